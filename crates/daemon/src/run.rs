//! The gateway runtime behind `xlat run`: TUN device, routes, control socket, packet loop.
//!
//! One packet worker (this thread) owns the engine. Each turn it waits (poll, 100 ms at most)
//! on the TUN descriptor and the control waker; reads a batch of up to 64 packets; translates
//! each with one `now` per batch from a monotonic clock; writes `Forward` packets and then
//! whatever [`Engine::pop_ready`] releases back to the TUN device; answers pending control
//! requests. Idle sessions are expired a little after every batch ([`Engine::expire_step`]:
//! less than a batch's work while reads come back full) and, when no traffic came in, in
//! longer passes every 100 ms ([`Engine::expire`], bounded work each).
//! With `[dataplane] fast_path = "xdp"` the XDP program ([`xlat_xdp`]) is attached to the
//! listed interfaces and the engine's offload ops are carried to it after every batch and
//! every expiry pass (`sync_fast_path`); a failed attach is logged and the loop runs without.
//! SIGINT or SIGTERM end the loop; routes and the socket file are removed on the way out, on
//! error paths too (drop guards). Logs never go per packet: failed TUN writes are counted and
//! reported at most every 10 s.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tracing::{info, warn};
use xlat_engine::{Engine, Time};
use xlat_io::sys::{install_stop_handler, stop_signal, wait_readable, Waker};
use xlat_io::tun::{RecvBatch, Tun, DEFAULT_BATCH};

use crate::config::{Config, FastPath};
use crate::control::{
    serve_pending, ControlServer, DaemonStats, FastPathStats, IoCounters, Pong, Request, Response,
};
use crate::routes::{RoutePlan, Routes};

/// Expiry work per pcap tick offline, and at least this much per idle tick (in the engine's
/// units: a session slot looked at costs 1, a removal 65 -- `Engine::expire`).
pub const EXPIRE_BUDGET: usize = 65536;
/// Expiry work per pass on an idle tick: at most 16 removals, ~3 us. (While traffic flows,
/// each batch is followed by [`Engine::expire_step`], whose budget follows the batch and
/// the backlog.)
pub const EXPIRE_BUDGET_PER_BATCH: usize = 1024;
/// Idle ticks expire in passes of [`EXPIRE_BUDGET_PER_BATCH`] for as long as passes find
/// sessions to remove, up to this many (~16,000 removals, ~5-10 ms) -- and stop as soon as a
/// packet waits, so it waits no longer than one pass.
const IDLE_PASSES_MAX: usize = 1024;
/// How often idle sessions are expired, and the longest poll wait.
pub const TICK: Duration = Duration::from_millis(100);

/// Reads a 64-bit seed from /dev/urandom.
pub fn random_seed() -> Result<u64> {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("cannot read a seed from /dev/urandom (or set [engine].seed)")?;
    Ok(u64::from_le_bytes(b))
}

/// Runs the gateway until SIGINT or SIGTERM.
pub fn run(cfg: &Config) -> Result<()> {
    let stop = install_stop_handler().context("installing SIGINT/SIGTERM handlers")?;
    let seed = match cfg.seed {
        Some(s) => s,
        None => random_seed()?,
    };
    // Before the engine maps its tables: with prefault they are written in full now, so no
    // packet later waits for the kernel to find and zero a huge page.
    xlat_engine::set_prefault(cfg.prefault);
    let mut engine =
        Engine::new(cfg.engine_config(seed)).map_err(|e| anyhow::anyhow!("{}: {e}", cfg.file))?;
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
    // the TUN device or routes. Requests wait in the channel until the loop starts.
    let waker = Arc::new(Waker::new().context("creating the control eventfd")?);
    let (tx, rx) = mpsc::channel();
    let _control = ControlServer::start(&cfg.socket, tx, waker.clone())?;

    let tun = Tun::open(&cfg.tun.name).context("opening the TUN device")?;
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
    info!(tun = %tun.name(), created = tun.created(), mtu = cfg.tun.mtu, "tun ready");

    let _routes = if cfg.tun.auto_routes {
        let plan = RoutePlan::new(
            &cfg.tun.name,
            cfg.tun.route_table,
            cfg.tun.rule_pref,
            cfg.nat44.as_ref(),
            cfg.nat64.as_ref(),
            cfg.siit.as_ref(),
        );
        Some(Routes::setup(&plan).context("setting up routes (tun.auto_routes)")?)
    } else {
        info!("tun.auto_routes = false: not touching routes");
        None
    };

    // [tunnel.*]: steer protocol 41 to the endpoint addresses into the TUN, give the TUN its
    // IPv6 addresses; an ISATAP host's learned address follows the engine (below).
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

    // [dataplane] fast_path = "xdp": established NAT44 flows are rewritten in the kernel by
    // the engine's recipes; without it (or where XDP cannot attach) every packet crosses the
    // TUN device, which is slower but complete.
    let mut fast = match cfg.dataplane.fast_path {
        FastPath::None => None,
        FastPath::Xdp => {
            match xlat_xdp::FastPath::attach(
                &cfg.dataplane.interfaces,
                cfg.dataplane.table_size,
                cfg.dataplane.slow_path_pps,
            ) {
                Ok(f) => {
                    engine.set_offload(true);
                    info!(
                        interfaces = ?f.interfaces(),
                        table_size = cfg.dataplane.table_size,
                        slow_path_pps = cfg.dataplane.slow_path_pps,
                        "XDP fast path attached"
                    );
                    Some(f)
                }
                Err(e) => {
                    warn!(
                        "{}: dataplane.fast_path = \"xdp\" is not available, running on the TUN device alone: {e:#}",
                        cfg.file
                    );
                    None
                }
            }
        }
    };
    let mut ops = Vec::new();

    info!(
        nat44 = ?cfg.nat44.as_ref().map(|n| n.mode),
        nat64 = ?cfg.nat64.as_ref().map(|n| n.prefix.to_string()),
        siit = ?cfg.siit.as_ref().map(|s| s.prefix.map(|p| p.to_string())),
        "xlat running"
    );
    let start = Instant::now();
    // The XDP program stamps recipes with CLOCK_MONOTONIC, the clock Instant reads.
    let mono_start = xlat_xdp::monotonic_ns();
    let clock = || Time::from_nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let mut batch = RecvBatch::new(DEFAULT_BATCH);
    let mut verdicts = vec![xlat_engine::Verdict::Held; DEFAULT_BATCH];
    let mut io = IoCounters::default();
    let mut last_expire = Time(0);
    let mut busy = false;
    let mut reported_errors = 0u64;
    let mut last_report = Instant::now();

    while !stop.load(Ordering::SeqCst) {
        let [tun_ready, wake_ready] = wait_readable([tun.as_fd(), waker.as_fd()], TICK)
            .context("waiting on the TUN device")?;
        if tun_ready {
            let n = batch
                .fill(&tun)
                .with_context(|| format!("reading from {}", tun.name()))?;
            let now = clock();
            io.tun_rx_packets += n as u64;
            let mut pkts = batch.packets_mut();
            engine.process_batch(now, &mut pkts, &mut verdicts);
            for (pkt, v) in pkts.iter().zip(verdicts.iter()) {
                if v.transmit() {
                    match tun.send(pkt.data()) {
                        Ok(()) => io.tun_tx_packets += 1,
                        Err(_) => io.tun_write_errors += 1,
                    }
                }
            }
            while let Some(p) = engine.pop_ready() {
                match tun.send(&p) {
                    Ok(()) => io.tun_tx_packets += 1,
                    Err(_) => io.tun_write_errors += 1,
                }
            }
            // A full read means more packets wait: keep the pass short (less than a batch).
            engine.expire_step(now, n == batch.capacity());
            if let Some(f) = fast.as_mut() {
                sync_fast_path(&mut engine, f, &mut ops, now, mono_start);
            }
            busy = true;
        }
        let now = clock();
        if wake_ready {
            waker.drain();
        }
        serve_pending(&rx, |req| {
            answer(
                req,
                &engine,
                now,
                &io,
                start,
                dns64_stats.as_deref(),
                fast.as_ref(),
            )
        });
        if now.0.saturating_sub(last_expire.0) >= TICK.as_nanos() as u64 {
            // Under traffic the per-batch passes sweep; a long pass only when idle.
            if !busy {
                let mut spent = 0;
                for _ in 0..IDLE_PASSES_MAX {
                    let removed = engine.expire(now, EXPIRE_BUDGET_PER_BATCH);
                    spent += EXPIRE_BUDGET_PER_BATCH;
                    if removed == 0 && spent >= EXPIRE_BUDGET {
                        break;
                    }
                    let [tun, wake] = wait_readable([tun.as_fd(), waker.as_fd()], Duration::ZERO)
                        .context("waiting on the TUN device")?;
                    if tun || wake {
                        break;
                    }
                }
                if let Some(f) = fast.as_mut() {
                    sync_fast_path(&mut engine, f, &mut ops, now, mono_start);
                }
            }
            busy = false;
            last_expire = now;
            // Packets the engine originates on its timers (ISATAP Router Solicitations).
            while let Some(p) = engine.pop_ready() {
                match tun.send(&p) {
                    Ok(()) => io.tun_tx_packets += 1,
                    Err(_) => io.tun_write_errors += 1,
                }
            }
            if let (Some(h), Some(st)) = (isatap_host.as_mut(), engine.tunnel_status()) {
                h.apply(&st);
            }
        }
        if io.tun_write_errors != reported_errors
            && last_report.elapsed() >= Duration::from_secs(10)
        {
            warn!(
                total = io.tun_write_errors,
                new = io.tun_write_errors - reported_errors,
                "writes to the TUN device failed (packets lost)"
            );
            reported_errors = io.tun_write_errors;
            last_report = Instant::now();
        }
    }
    let sig = stop_signal();
    let st = engine.stats();
    info!(
        signal = sig,
        packets_in = st.get("packets_in"),
        packets_out = st.get("packets_out"),
        tun_write_errors = io.tun_write_errors,
        "stopping"
    );
    Ok(())
}

/// Carries the engine's offload ops to the XDP fast path: installs and removals as they are,
/// queries answered with the recipes' last-seen stamps (converted to the engine's clock),
/// which may expire sessions and so produce removals: a few rounds, bounded.
fn sync_fast_path(
    engine: &mut Engine,
    fast: &mut xlat_xdp::FastPath,
    ops: &mut Vec<xlat_engine::offload::OffloadOp>,
    now: Time,
    mono_start: u64,
) {
    use xlat_engine::offload::OffloadKind;
    for _ in 0..4 {
        ops.clear();
        engine.offload_ops(ops);
        if ops.is_empty() {
            return;
        }
        let stamp = xlat_xdp::monotonic_ns();
        for op in ops.iter() {
            if op.kind == OffloadKind::Query {
                let t = |ns: u64| Time::from_nanos(ns.saturating_sub(mono_start));
                let (o, i) = fast.last_seen(op);
                engine.offload_seen(now, op.token, o.map(t), i.map(t));
            } else {
                fast.apply(op, stamp);
            }
        }
    }
}

/// Starts the DNS64 service; a bind error names the file and the `dns64.listen[i]` key.
pub fn start_dns64(file: &str, d: &xlat_dns64::Dns64Config) -> Result<xlat_dns64::Dns64Service> {
    xlat_dns64::Dns64Service::start(d).map_err(|e| match e.key() {
        Some(_) => anyhow::anyhow!("{file}: dns64.{e}"),
        None => anyhow::anyhow!("{file}: dns64: {e}"),
    })
}

/// `xlat dns64`: only the DNS64 proxy, in the foreground, until SIGINT or SIGTERM.
pub fn run_dns64(file: &str, d: &xlat_dns64::Dns64Config) -> Result<()> {
    let stop = install_stop_handler().context("installing SIGINT/SIGTERM handlers")?;
    let svc = start_dns64(file, d)?;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(TICK);
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

fn answer(
    req: &Request,
    engine: &Engine,
    now: Time,
    io: &IoCounters,
    start: Instant,
    dns64: Option<&xlat_dns64::Stats>,
    fast: Option<&xlat_xdp::FastPath>,
) -> Response {
    let uptime_secs = start.elapsed().as_secs();
    match req {
        Request::Sessions { limit } => {
            let mut s = engine.sessions(now);
            if let Some(l) = limit {
                s.truncate(*l);
            }
            Response::Sessions(s)
        }
        Request::Stats {} => Response::Stats(Box::new(DaemonStats {
            engine: engine.stats(),
            io: IoCounters {
                uptime_secs,
                ..io.clone()
            },
            dns64: dns64.map(|s| s.snapshot()),
            fast_path: fast.map(|f| FastPathStats {
                kind: "xdp".into(),
                interfaces: f.interfaces().to_vec(),
                recipes: f.recipes(),
                install_errors: f.install_errors(),
                counters: f
                    .counters()
                    .into_iter()
                    .map(|c| xlat_engine::counters::NamedCount {
                        name: c.name.into(),
                        value: c.value,
                        explain: c.explain.into(),
                    })
                    .collect(),
            }),
        })),
        Request::Ping {} => Response::Pong(Pong {
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_secs,
        }),
    }
}
