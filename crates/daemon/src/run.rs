//! The gateway runtime behind `xlat run`: TUN device, routes, control socket, packet workers.
//!
//! `[dataplane] workers = N` packet workers each own one engine shard and one queue of the
//! TUN device (`IFF_MULTI_QUEUE` when N > 1); [`crate::worker`] has the packet loop: batch
//! reads, placement of each packet on its owner with lock-free handoff rings, translation
//! with one `now` per batch from a monotonic clock, expiry, control requests between
//! batches. Worker 0 runs on this thread, the others on threads `xlat-worker-K`. With one
//! worker the engine gets every packet as read, as before workers existed.
//! With `[dataplane] fast_path = "xdp"` the XDP program ([`xlat_xdp`]) is attached to the
//! listed interfaces and each worker carries its engine's fast-path instructions to it after
//! every batch and every expiry pass (`drain_state`, under a mutex the workers share, taken
//! only when there are instructions); a failed attach is logged and the workers run without.
//! With `[logging]` the engines' state events go, after the same batches, to the event log
//! thread ([`crate::eventlog`]), which sends them to the syslog and IPFIX collectors.
//! Under systemd (`NOTIFY_SOCKET`) it sends READY=1 once the TUN device and its routes are
//! up, WATCHDOG=1 while every worker answers, STOPPING=1 at the end ([`crate::notify`]).
//! With `[metrics]` an HTTP listener ([`crate::http`]) serves Prometheus text and the live
//! page from control-plane threads.
//! SIGINT or SIGTERM stop every worker; so does a worker's fatal error, which `run` returns
//! naming the worker. SIGHUP does not stop the daemon: the control thread reloads the
//! configuration file (as `xlat reload` does). Routes and the socket file are removed on the way out, on error paths
//! too (drop guards).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tracing::{info, warn};
use xlat_engine::shard::Shards;
use xlat_engine::{Engine, EngineConfig};
use xlat_io::ring::{ring, Doorbell};
use xlat_io::sys::{install_stop_handler, stop_signal, Waker};
use xlat_io::tun::Tun;

use crate::config::{Config, FastPath, SlowPath};
use crate::control::{ControlServer, WorkerLink};
use crate::routes::{RoutePlan, Routes};
use crate::worker::{ring_slots, FragOwners, HaltOnExit, Shared, Worker};

pub use crate::worker::{EXPIRE_BUDGET, EXPIRE_BUDGET_PER_BATCH, TICK};

/// Reads a 64-bit seed from /dev/urandom.
pub fn random_seed() -> Result<u64> {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("cannot read a seed from /dev/urandom (or set [engine].seed)")?;
    Ok(u64::from_le_bytes(b))
}

/// Worker `k`'s engine configuration of `n`: with several workers, each its own stream of
/// the seed (worker 0 keeps it: port choice, and a tunnel's IPv4 identifications, RFC 4213
/// 3.5, differ per worker) and its share of `[limits] max_sessions` (so the workers
/// together map what one would).
pub fn worker_engine_config(cfg: &Config, seed: u64, k: usize, n: usize) -> EngineConfig {
    let mut e = cfg.engine_config(seed);
    if n > 1 {
        e.seed ^= (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let share = |m: u32| m.div_ceil(n as u32).max(1);
        if let Some(x) = e.nat44.as_mut() {
            x.limits.max_sessions = share(x.limits.max_sessions);
        }
        if let Some(x) = e.nat64.as_mut() {
            x.limits.max_sessions = share(x.limits.max_sessions);
        }
    }
    e
}

/// The engine's fragment timeout (seconds): how long a later fragment waits for its owner.
fn fragment_timeout(cfg: &Config) -> u64 {
    cfg.nat44
        .as_ref()
        .map(|n| n.timeouts.fragment)
        .into_iter()
        .chain(cfg.nat64.as_ref().map(|n| n.timeouts.fragment))
        .max()
        .unwrap_or(xlat_engine::Timeouts::default().fragment)
}

/// How a worker ended: its number, its result, its totals (`Worker::totals`).
type WorkerEnd = (usize, Result<()>, (u64, u64, u64));

/// Runs the gateway until SIGINT or SIGTERM.
pub fn run(cfg: &Config) -> Result<()> {
    let stop = install_stop_handler().context("installing SIGINT/SIGTERM handlers")?;
    let seed = match cfg.seed {
        Some(s) => s,
        None => random_seed()?,
    };
    let n = cfg.dataplane.workers.max(1);
    // Before the engines map their tables: with prefault they are written in full now, so
    // no packet later waits for the kernel to find and zero a huge page.
    xlat_engine::set_prefault(cfg.prefault);
    let shards = if n > 1 {
        Some(Shards::new(&cfg.engine_config(seed), n).map_err(|e| {
            anyhow::anyhow!("{}: dataplane.workers: {}: {}", cfg.file, e.key, e.problem)
        })?)
    } else {
        None
    };
    let mut engines = Vec::with_capacity(n);
    for k in 0..n {
        let ec = worker_engine_config(cfg, seed, k, n);
        let e = match &shards {
            Some(s) => Engine::new_shard(ec, s, k),
            None => Engine::new(ec),
        };
        engines.push(e.map_err(|e| anyhow::anyhow!("{}: {e}", cfg.file))?);
    }
    if cfg.prefault {
        info!(
            mib = xlat_engine::mapped_bytes() >> 20,
            "session tables resident ([limits] prefault)"
        );
    }
    for w in cfg.warnings() {
        warn!("{}: {w}", cfg.file);
    }

    // The control socket first: a second daemon on the same socket fails before touching
    // the TUN device or routes. Requests wait in the channels until the workers start.
    let mut bells = Vec::with_capacity(n);
    let mut links = Vec::with_capacity(n);
    let mut controls = Vec::with_capacity(n);
    for _ in 0..n {
        let waker = Arc::new(Waker::new().context("creating a worker's eventfd")?);
        let (tx, rx) = crate::inbox::inbox();
        links.push(WorkerLink {
            tx,
            waker: waker.clone(),
        });
        bells.push(Arc::new(Doorbell::new(waker)));
        controls.push(rx);
    }
    // The routes, once made, are the reload's too: they follow the pool and static entries.
    let routed: crate::control::SharedRoutes = Default::default();
    // So are the metrics listener, the event log and the DNS64 proxy (crate::live).
    let services: crate::live::SharedServices = Default::default();
    let reload = crate::control::ReloadCtx {
        file: std::path::PathBuf::from(&cfg.file),
        running: cfg.clone(),
        seed,
        workers: n,
        routes: routed.clone(),
        services: services.clone(),
    };
    let sync_links = links.clone();
    let metric_links = links.clone();
    let watchdog_links = links.clone();
    let _control = ControlServer::start_reloadable(&cfg.socket, links, Some(reload))?;
    // [metrics]: Prometheus and the live page on a control-plane thread, asking the workers
    // through the same channels as the control socket (they answer between batches).
    let _services = crate::live::ServicesAtExit(services.clone());
    crate::live::lock(&services).metrics = match &cfg.metrics {
        Some(m) => Some(
            crate::http::MetricsServer::start(m.listen, metric_links).map_err(|e| {
                anyhow::anyhow!(
                    "{}: metrics.listen: cannot listen on {}: {e}; choose a free address and port, or remove [metrics]",
                    cfg.file,
                    m.listen
                )
            })?,
        ),
        None => None,
    };

    // Only NAT44, NAT64 and SIIT keep a super-packet whole; 6to4 and ISATAP alone would cut
    // every one in software, which the kernel does as well before a device without them.
    let offload =
        cfg.tun.offload && (cfg.nat44.is_some() || cfg.nat64.is_some() || cfg.siit.is_some());
    let tuns = if offload {
        Tun::open_queues_offload(&cfg.tun.name, n)
    } else {
        Tun::open_queues(&cfg.tun.name, n)
    }
    .context("opening the TUN device")?;
    let tun = tuns.first().context("no TUN queue")?;
    if tun.created() && cfg.nat64.is_none() && cfg.siit.is_none() && cfg.tunnel.is_none() {
        // NAT44 alone translates IPv4 only: keep the kernel's own IPv6 (router solicitations,
        // MLD) out of a tun we created, before it comes up. Best effort: the file is missing
        // when the kernel has no IPv6. NAT64 and SIIT need IPv6 on the tun.
        let v6 = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", tun.name());
        if let Err(e) = std::fs::write(&v6, "1") {
            tracing::debug!(error = %e, "disabling IPv6 on the tun");
        }
    }
    tun.set_mtu(cfg.tun.mtu).context("setting the TUN MTU")?;
    tun.set_up().context("bringing the TUN device up")?;
    info!(tun = %tun.name(), created = tun.created(), mtu = cfg.tun.mtu, queues = n, "tun ready");

    let _routes = if cfg.tun.auto_routes {
        let plan = RoutePlan::of(cfg);
        let r = Routes::setup(&plan).context("setting up routes (tun.auto_routes)")?;
        if let Ok(mut slot) = routed.lock() {
            *slot = Some((plan, r));
        }
        Some(RoutesAtExit(routed))
    } else {
        info!("tun.auto_routes = false: not touching routes");
        None
    };

    // [tunnel.*]: steer protocol 41 to the endpoint addresses into the TUN, give the TUN its
    // IPv6 addresses; an ISATAP host's learned address follows the engine (worker 0; ISATAP
    // runs on one worker only).
    let _tunnel_routes = match (&cfg.tunnel, cfg.tun.auto_routes) {
        (Some(t), true) => Some(
            crate::tunnel_routes::setup(t, &cfg.tun.name, cfg.tun.route_table)
                .context("setting up tunnel routes (tun.auto_routes)")?,
        ),
        _ => None,
    };
    let mut isatap_host = match (&cfg.tunnel, cfg.tun.auto_routes) {
        (Some(t), true)
            if t.isatap.as_ref().is_some_and(|i| {
                matches!(i.role, xlat_engine::tunnel::IsatapRole::Host { .. })
            }) =>
        {
            Some(crate::tunnel_routes::IsatapHostRoutes::new(&cfg.tun.name))
        }
        _ => None,
    };

    // [dns64]: the RFC 6147 proxy on its own threads, after the routes (its listen addresses
    // may depend on them); stopped and joined when `dns64_service` drops.
    let dns64_service = match &cfg.dns64 {
        Some(d) => Some(start_dns64(&cfg.file, d)?),
        None => None,
    };
    let dns64_stats = dns64_service.as_ref().map(|s| s.stats().clone());
    crate::live::lock(&services).dns64 = dns64_service;

    // [dataplane] fast_path = "xdp": established NAT44 flows are rewritten in the kernel by
    // the engines' recipes; without it (or where XDP cannot attach) every packet crosses the
    // TUN device, which is slower but complete. One program and one recipe table for all
    // workers: their sessions, and so their recipes' keys, are disjoint.
    let want_xdp =
        cfg.dataplane.fast_path == FastPath::Xdp || cfg.dataplane.slow_path == SlowPath::AfXdp;
    let mut fast = if want_xdp {
        // Recipe tables only with the fast path: the AF_XDP slow path alone installs none, and
        // the program looks up every packet in them first (a table of full size costs each
        // packet cache-missing reads of its empty buckets; one of a single entry, a cached one).
        let recipes = cfg.dataplane.fast_path == FastPath::Xdp;
        let translators = xlat_xdp::Translators {
            nat44: recipes && cfg.nat44.is_some(),
            nat64: recipes && cfg.nat64.is_some(),
            siit: recipes && cfg.siit.is_some(),
        };
        match xlat_xdp::FastPath::attach(
            &cfg.dataplane.interfaces,
            cfg.dataplane.table_size,
            translators,
            cfg.dataplane.slow_path_pps,
        ) {
            Ok(mut f) => {
                if cfg.dataplane.fast_path == FastPath::Xdp {
                    for e in engines.iter_mut() {
                        e.set_offload(true);
                        e.set_offload_after(cfg.dataplane.offload_udp_after);
                    }
                    // 6to4 is stateless: its configuration is all XDP needs (issue 25).
                    let six = cfg.tunnel.as_ref().and_then(|t| {
                        let ipv6 = cfg.nat64.is_some() || cfg.siit.is_some();
                        xlat_engine::tunnel::sixtofour::xdp_config(t, ipv6)
                    });
                    // With tun.auto_routes the daemon's rule steers protocol 41 into the TUN.
                    let routes = if cfg.tun.auto_routes {
                        xlat_xdp::TunnelRoutes::Daemon
                    } else {
                        xlat_xdp::TunnelRoutes::Operator
                    };
                    if let Some(x) = six {
                        match xlat_xdp::ifindex(tun.name()).and_then(|i| f.set_6to4(&x, i, routes)) {
                            Ok(()) => info!(
                                encapsulation = x.encap,
                                to_relay = x.encap_relay,
                                "6to4 on the XDP fast path"
                            ),
                            Err(e) => warn!(
                                "{}: 6to4 stays on the TUN device (the XDP fast path could not take it): {e:#}",
                                cfg.file
                            ),
                        }
                    }
                    // So is an ISATAP router (RFC 5214 8.2): its address, /64 and tunnel
                    // parameters; a host's router and prefix are learned, so it stays here.
                    let isatap = cfg.tunnel.as_ref().and_then(|t| {
                        let ipv6 = cfg.nat64.is_some() || cfg.siit.is_some();
                        xlat_engine::tunnel::isatap::xdp_config(t, ipv6)
                    });
                    if let Some(x) = isatap {
                        match xlat_xdp::ifindex(tun.name()).and_then(|i| f.set_isatap(&x, i, routes)) {
                            Ok(()) => info!(
                                encapsulation = x.encap,
                                "ISATAP router on the XDP fast path"
                            ),
                            Err(e) => warn!(
                                "{}: ISATAP stays on the TUN device (the XDP fast path could not take it): {e:#}",
                                cfg.file
                            ),
                        }
                    }
                }
                info!(
                    interfaces = ?f.interfaces(),
                    table_size = cfg.dataplane.table_size,
                    slow_path_pps = cfg.dataplane.slow_path_pps,
                    recipes = cfg.dataplane.fast_path == FastPath::Xdp,
                    "XDP program attached"
                );
                Some(f)
            }
            Err(e) => {
                warn!(
                    "{}: dataplane.fast_path = \"xdp\" / slow_path = \"af_xdp\" is not available, running on the TUN device alone: {e:#}",
                    cfg.file
                );
                None
            }
        }
    } else {
        None
    };

    // [dataplane] slow_path = "af_xdp": sockets on every queue of every interface, worker
    // q % n taking queue q's; the resolver thread keeps the egress table. Anything that fails
    // leaves the TUN path in charge.
    let hops = Arc::new(xlat_xdp::nexthop::Hops::default());
    let mut ports: Vec<Vec<xlat_xdp::xsk::Xsk>> = (0..n).map(|_| Vec::new()).collect();
    let mut macs: std::collections::HashMap<u32, [u8; 6]> = std::collections::HashMap::new();
    let mut slow_on = false;
    if let (SlowPath::AfXdp, Some(f)) = (cfg.dataplane.slow_path, fast.as_mut()) {
        match open_slow_path(f, &cfg.dataplane.interfaces, tun.name(), n) {
            Ok((socks, m)) => {
                info!(
                    sockets = socks.iter().map(Vec::len).sum::<usize>(),
                    "AF_XDP slow path on"
                );
                ports = socks;
                macs = m;
                slow_on = true;
            }
            Err(e) => warn!(
                "{}: dataplane.slow_path = \"af_xdp\" is not available, the slow path stays on the TUN device: {e:#}",
                cfg.file
            ),
        }
    }
    let fast = fast.map(|f| Arc::new(Mutex::new(f)));
    crate::live::lock(&services).fast = fast.clone();
    let _fast_at_exit = crate::live::FastAtExit(services.clone());

    // The handoff rings: one per ordered pair of workers, slots sized for the TUN's MTU.
    let mut to: Vec<Vec<Option<xlat_io::ring::Producer>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    let mut from: Vec<Vec<xlat_io::ring::Consumer>> = (0..n).map(|_| Vec::new()).collect();
    if n > 1 {
        for (i, row) in to.iter_mut().enumerate() {
            for (k, slot) in row.iter_mut().enumerate() {
                if i != k {
                    let (p, c) = ring(ring_slots(n), cfg.tun.mtu as usize);
                    *slot = Some(p);
                    if let Some(f) = from.get_mut(k) {
                        f.push(c);
                    }
                }
            }
        }
    }
    let mut workers: Vec<Worker> = Vec::with_capacity(n);
    for (k, ((((engine, tun), control), to), from)) in engines
        .into_iter()
        .zip(tuns)
        .zip(controls)
        .zip(to)
        .zip(from)
        .enumerate()
    {
        let host = if k == 0 { isatap_host.take() } else { None };
        let mut w = Worker::new(k, engine, tun, control, to, from, host);
        // Every worker gets a port when the slow path is on, also one with no socket (an
        // interface with fewer queues than workers): what it translates for that interface
        // goes through the TUN device, counted (`afxdp_fallback_no_socket`), never unseen.
        if slow_on {
            let socks = ports.get_mut(k).map(std::mem::take).unwrap_or_default();
            w.set_afxdp(crate::afxdp::Port::new(socks, hops.clone()));
        }
        workers.push(w);
    }

    info!(
        nat44 = ?cfg.nat44.as_ref().map(|n| n.mode),
        nat64 = ?cfg.nat64.as_ref().map(|n| n.prefix.to_string()),
        siit = ?cfg.siit.as_ref().map(|s| s.prefix.map(|p| p.to_string())),
        workers = n,
        "xlat running"
    );
    // RFC 7422 3: the configuration the log is made under -- the file's digest, and the
    // deterministic mapping's inputs (a reload cannot change them: the engine refuses it).
    info!(file = %cfg.file, sha256 = %cfg.sha256, "configuration in use");
    for d in cfg.deterministic_summary() {
        info!(file = %cfg.file, "{d}");
    }
    // Issue 25: a user who never runs `xlat check` learns the one line that makes the data
    // path fast from the daemon's start too.
    for a in cfg.advice() {
        info!(file = %cfg.file, "note: {a}");
    }
    let halt = AtomicBool::new(false);
    let start = Instant::now();
    // [logging]: the engines make state events from now on, drained after each batch.
    let log = match &cfg.logging {
        Some(l) => {
            for w in workers.iter_mut() {
                w.set_events(xlat_engine::events::DEFAULT_CAPACITY);
            }
            let log = crate::eventlog::EventLog::start(l, start)?;
            info!(syslog = ?l.syslog, ipfix = ?l.ipfix, events = ?l.events, "NAT event logging on");
            crate::live::lock(&services).log = Some(log.clone());
            Some(log)
        }
        None => None,
    };
    // [sync]: the engines make state events; the sync thread sends an active's to the peer
    // and hands a standby the peer's.
    let sync = match &cfg.sync {
        Some(sc) => {
            if log.is_none() {
                for w in workers.iter_mut() {
                    w.set_events(xlat_engine::events::DEFAULT_CAPACITY);
                }
            }
            Some(
                crate::sync::start(sc, sync_links)
                    .with_context(|| format!("{}: [sync]", cfg.file))?,
            )
        }
        None => None,
    };
    let (sync_shared, syncer) = match sync {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    let owners = FragOwners::new(seed.rotate_left(17) ^ 0x5bd1_e995, fragment_timeout(cfg));
    let shared = Shared {
        shards: shards.as_ref(),
        bells: &bells,
        owners: &owners,
        frag_timeout: Duration::from_secs(fragment_timeout(cfg)),
        fast: fast.as_deref(),
        hops: (!macs.is_empty()).then_some(&*hops),
        log: log.as_deref(),
        stop,
        halt: &halt,
        start,
        // The XDP program stamps recipes with CLOCK_MONOTONIC, the clock Instant reads.
        mono_start: xlat_xdp::monotonic_ns(),
        dns64: dns64_stats.as_deref(),
        sync: sync_shared.as_deref(),
    };
    // systemd (Type=notify): ready now that the TUN device, its routes and the control
    // socket are up; keep-alives while every worker answers (crate::notify).
    let notifier = crate::notify::Notifier::from_env().map(Arc::new);
    let _watchdog = match (&notifier, crate::notify::watchdog_interval()) {
        (Some(n), Some(every)) => Some(
            crate::notify::Watchdog::start(n.clone(), every, watchdog_links)
                .context("starting the systemd watchdog thread")?,
        ),
        _ => None,
    };
    if let Some(sd) = &notifier {
        sd.notify(&format!(
            "READY=1\nMAINPID={}\nSTATUS=translating on {} with {n} packet worker(s)",
            std::process::id(),
            cfg.tun.name
        ));
    }
    let mut iter = workers.into_iter();
    let mut first = iter.next().context("no packet worker")?;
    let resolver_stop = AtomicBool::new(false);
    let results: Vec<WorkerEnd> = std::thread::scope(|s| {
        let shared = &shared;
        let mut handles = Vec::new();
        if let Some(sy) = syncer {
            let (sh, rs) = (shards.as_ref(), &resolver_stop);
            if let Err(e) = std::thread::Builder::new()
                .name("xlat-sync".into())
                .spawn_scoped(s, move || {
                    xlat_io::sys::control_plane_priority();
                    sy.run(sh, rs)
                })
            {
                warn!("session sync: no sync thread ({e}); the peer gets nothing");
            }
        }
        if !macs.is_empty() {
            let (hops, macs, rs) = (&hops, &macs, &resolver_stop);
            if let Err(e) = std::thread::Builder::new()
                .name("xlat-nexthop".into())
                .spawn_scoped(s, move || {
                    // Its netlink round trips must wait for the packets, not the other way
                    // round: at the workers' real-time priority a refresh of the known
                    // destinations held the CPU for 1.5 ms, longer than the receive ring
                    // lasts at 200,000 packets/s (lab setup-rate, 2026-11-29).
                    xlat_io::sys::control_plane_priority();
                    hops.resolve_loop(macs, rs)
                })
            {
                warn!("AF_XDP slow path: no resolver thread ({e}); every packet leaves through the TUN device");
            }
        }
        for mut w in iter {
            let k = w.id;
            let h = std::thread::Builder::new()
                .name(format!("xlat-worker-{k}"))
                .spawn_scoped(s, move || {
                    let _halt = HaltOnExit(shared);
                    let r = w.run(shared);
                    (k, r, w.totals())
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    halt.store(true, Ordering::SeqCst);
                    resolver_stop.store(true, Ordering::SeqCst);
                    handles.clear();
                    return vec![(
                        k,
                        Err(anyhow::anyhow!("starting packet worker {k}: {e}")),
                        (0, 0, 0),
                    )];
                }
            }
        }
        let r0 = {
            let _halt = HaltOnExit(shared);
            first.run(shared)
        };
        let mut out = vec![(0, r0, first.totals())];
        resolver_stop.store(true, Ordering::SeqCst);
        for (k, h) in handles.into_iter().enumerate() {
            out.push(h.join().unwrap_or_else(|_| {
                (
                    k + 1,
                    Err(anyhow::anyhow!("packet worker {} panicked", k + 1)),
                    (0, 0, 0),
                )
            }));
        }
        out
    });
    let (mut packets_in, mut packets_out, mut write_errors) = (0, 0, 0);
    for (_, _, (i, o, e)) in &results {
        packets_in += i;
        packets_out += o;
        write_errors += e;
    }
    if let Some(sd) = &notifier {
        sd.notify("STOPPING=1");
    }
    // The NAT log's last lines (the sessions the workers ended on the way out) reach the
    // collectors before the process ends.
    if let Some(l) = &log {
        l.finish(Duration::from_secs(2));
    }
    let sig = stop_signal();
    info!(
        signal = sig,
        workers = n,
        packets_in,
        packets_out,
        tun_write_errors = write_errors,
        "stopping"
    );
    // The first worker that failed names the error; the others stopped because of it.
    for (k, r, _) in results {
        if let Err(e) = r {
            return Err(if n > 1 {
                e.context(format!("packet worker {k} failed"))
            } else {
                e
            });
        }
    }
    Ok(())
}

/// Opens the AF_XDP slow path's sockets (one per receive queue of each interface, queue q
/// for worker q % `workers`) and switches the XDP program's redirect on; returns each
/// worker's sockets and the interfaces' own MACs by ifindex.
type SlowPorts = (
    Vec<Vec<xlat_xdp::xsk::Xsk>>,
    std::collections::HashMap<u32, [u8; 6]>,
);

fn open_slow_path(
    fast: &mut xlat_xdp::FastPath,
    interfaces: &[String],
    tun: &str,
    workers: usize,
) -> Result<SlowPorts> {
    let mut per: Vec<Vec<xlat_xdp::xsk::Xsk>> = (0..workers).map(|_| Vec::new()).collect();
    let mut macs = std::collections::HashMap::new();
    for name in interfaces {
        let i = xlat_xdp::ifindex(name)?;
        let mac = xlat_xdp::nexthop::interface_mac(name)
            .with_context(|| format!("{name} has no Ethernet address"))?;
        macs.insert(i, mac);
        let queues = xlat_xdp::nexthop::rx_queues(name).min(xlat_xdp::MAX_QUEUES);
        if (queues as usize) < workers {
            warn!(
                interface = %name,
                queues,
                workers,
                "{name} has fewer receive queues than packet workers: workers {queues}.. have no AF_XDP socket on it, so what they translate for {name} leaves through the TUN device (afxdp_fallback_no_socket); give it {workers} queues (ethtool -L {name} combined {workers}) or set fewer workers"
            );
        }
        for q in 0..queues {
            let x = xlat_xdp::xsk::Xsk::open(i, q)
                .with_context(|| format!("opening an AF_XDP socket on {name} queue {q}"))?;
            if let Some(p) = per.get_mut(q as usize % workers.max(1)) {
                p.push(x);
            }
        }
    }
    let all: Vec<&xlat_xdp::xsk::Xsk> = per.iter().flatten().collect();
    fast.enable_slow_path(xlat_xdp::ifindex(tun)?, &all)?;
    Ok((per, macs))
}

/// Starts the DNS64 service; a bind error names the file and the `dns64.listen[i]` key.
/// Its threads inherit the scheduling class of the thread that starts them, so they are
/// started from one in the normal class: a flood of queries never preempts packet workers
/// that run at a real-time priority.
pub fn start_dns64(file: &str, d: &xlat_dns64::Dns64Config) -> Result<xlat_dns64::Dns64Service> {
    let started = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("xlat-dns64".into())
            .spawn_scoped(s, || {
                xlat_io::sys::control_plane_priority();
                xlat_dns64::Dns64Service::start(d)
            })
            .map(|h| h.join())
    });
    let started = match started {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => anyhow::bail!("{file}: dns64: the thread starting the service panicked"),
        Err(e) => anyhow::bail!("{file}: dns64: cannot start a thread for the service: {e}"),
    };
    started.map_err(|e| match e.key() {
        Some(_) => anyhow::anyhow!("{file}: dns64.{e}"),
        None => anyhow::anyhow!("{file}: dns64: {e}"),
    })
}

/// `xlat dns64`: only the DNS64 proxy, in the foreground, until SIGINT or SIGTERM; SIGHUP
/// reads `[dns64]` again and applies it live (as a reload of `xlat run` does).
pub fn run_dns64(file: &str, d: &xlat_dns64::Dns64Config) -> Result<()> {
    let stop = install_stop_handler().context("installing SIGINT/SIGTERM handlers")?;
    let mut svc = start_dns64(file, d)?;
    let mut running = d.clone();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(TICK);
        if xlat_io::sys::take_hangup() {
            reload_dns64(file, &mut svc, &mut running);
        }
    }
    let c = svc.counters();
    drop(svc);
    info!(
        signal = stop_signal(),
        queries = c.queries,
        synthesized = c.synthesized,
        ptr_synthesized = c.ptr_synthesized,
        passthrough = c.passthrough,
        upstream_errors = c.upstream_errors,
        malformed = c.malformed,
        "dns64 stopped"
    );
    Ok(())
}

/// SIGHUP in `xlat dns64`: `[dns64]` read again, its added listen addresses bound, then
/// applied; a refusal (bad file, address that cannot be bound) changes nothing.
fn reload_dns64(
    file: &str,
    svc: &mut xlat_dns64::Dns64Service,
    running: &mut xlat_dns64::Dns64Config,
) {
    let new = match crate::config::load_dns64(std::path::Path::new(file)) {
        Ok(n) => n,
        Err(e) => {
            warn!("SIGHUP: reload refused: {e}; the running configuration stays");
            return;
        }
    };
    if new == *running {
        info!("SIGHUP: configuration reloaded: nothing changed");
        return;
    }
    match svc.prepare(&new) {
        Ok(u) => {
            for w in svc.apply(u) {
                warn!("SIGHUP: {w}");
            }
            *running = new;
            info!("SIGHUP: configuration reloaded");
        }
        Err(e) => {
            warn!("SIGHUP: reload refused: {file}: dns64.{e}; the running configuration stays")
        }
    }
}

/// Removes the routes (`[tun] auto_routes`) when it drops, at the place in `run`'s teardown
/// where they were made, though the reload shares them.
struct RoutesAtExit(crate::control::SharedRoutes);

impl Drop for RoutesAtExit {
    fn drop(&mut self) {
        let routes = self.0.lock().ok().and_then(|mut s| s.take());
        drop(routes);
    }
}
