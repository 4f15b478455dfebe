//! End to end with the AF_XDP slow path (`[dataplane] slow_path = "af_xdp"`, issue 25): the
//! NAT44 namespaces (IN -- GW running `xlat run` -- OUT) and the NAT64/SIIT ones (CLI -- GW --
//! SRV) with the XDP program on GW's two veth devices and no recipes (fast path off), so every
//! packet the engine translates should come from an AF_XDP socket and leave through one, never
//! crossing the TUN device: a file fetched over HTTP arrives intact (SHA-256) with the
//! translated address at the server, pings (also fragmented ones) are answered, and the
//! counters say which way the packets went. The whole NAT44, NAT64/SIIT, metrics and
//! logging suites also run with it on (`XLAT_E2E_AF_XDP=1`, see scripts/test.sh).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::topo64::{GW4, GW6, SRV};
use common::*;

const CLI6: &str = "2001:2:0:1::10";
const SIIT_CLI6: &str = "2001:2:0:1::5";
const SIIT_CLI4: &str = "198.19.1.5";
const SRV_V6: &str = "2001:2:0:64::c613:2";
const POOL4: &str = "198.19.0.101";

fn setup() -> Topo {
    require_root();
    let mut t = Topo::new(Opts {
        af_xdp: true,
        ..Opts::default()
    });
    let cfg = t.default_config();
    assert!(cfg.contains("slow_path = \"af_xdp\""), "{cfg}");
    t.start_xlat(&cfg);
    t
}

/// The worker counters of the AF_XDP path and the TUN reads: enough to read a failure by.
fn brief(st: &serde_json::Value) -> String {
    let names = [
        "afxdp_rx",
        "afxdp_tx",
        "afxdp_fallback_unresolved",
        "afxdp_fallback_no_socket",
        "afxdp_fallback_tx_full",
        "afxdp_fallback_ttl",
        "afxdp_rx_invalid",
        "afxdp_kernel_drops",
    ];
    let w: Vec<String> = names
        .iter()
        .map(|n| format!("{n}={}", worker_counter(st, n)))
        .collect();
    format!(
        "{} xdp_to_afxdp={} io={}",
        w.join(" "),
        xdp(st, "xdp_to_afxdp"),
        st["io"]
    )
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn http_and_ping_cross_af_xdp_not_the_tun_device() {
    let mut t = setup();
    // A ping first, as a real path has: the next hops are known before the transfer (see
    // siit_http_both_ways_crosses_af_xdp; CI once saw 173 of 2,194 packets fall back).
    let inn = t.ns_in.clone();
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    let srv = t.fetch_random_file(2_097_152);
    let log = t.proc(srv).stderr_text();
    assert_http_client(&log, "/blob.bin", POOL_ADDR);
    // ICMP echo is the engine's too (no recipe ever carries it).
    let r = t.ping_all(&inn, 5, &[], OUT_ADDR);
    assert_all_replies(&r, 5);

    let st = t.stats();
    let rx = worker_counter(&st, "afxdp_rx");
    let tx = worker_counter(&st, "afxdp_tx");
    let tun_rx = st["io"]["tun_rx_packets"].as_u64().unwrap_or(u64::MAX);
    eprintln!("after 2 MiB and 5 pings: {}", brief(&st));
    // 2 MiB is ~1,450 full segments plus ACKs and the pings; all of them are the engine's.
    assert!(
        rx >= 1500,
        "only {rx} packets came over AF_XDP: {}",
        brief(&st)
    );
    assert!(
        tx >= 1500,
        "only {tx} packets left over AF_XDP: {}",
        brief(&st)
    );
    assert!(xdp(&st, "xdp_to_afxdp") >= rx, "{}", brief(&st));
    // The TUN device carries only what fell back (the first packets to a new destination).
    assert!(
        tun_rx * 20 < rx,
        "the TUN device still read {tun_rx} packets beside {rx} over AF_XDP: {}",
        brief(&st)
    );
    let fallbacks = worker_counter(&st, "afxdp_fallback_unresolved")
        + worker_counter(&st, "afxdp_fallback_no_socket")
        + worker_counter(&st, "afxdp_fallback_tx_full");
    assert!(fallbacks * 20 < tx, "{}", brief(&st));
    assert_eq!(worker_counter(&st, "afxdp_rx_invalid"), 0, "{}", brief(&st));
}

/// The counters after a run: most packets over AF_XDP both ways, few through the TUN device.
fn assert_mostly_af_xdp(st: &serde_json::Value, at_least: u64) {
    let rx = worker_counter(st, "afxdp_rx");
    let tx = worker_counter(st, "afxdp_tx");
    let tun_rx = st["io"]["tun_rx_packets"].as_u64().unwrap_or(u64::MAX);
    let tun_tx = st["io"]["tun_tx_packets"].as_u64().unwrap_or(u64::MAX);
    eprintln!("{}", brief(st));
    assert!(
        rx >= at_least,
        "only {rx} packets came over AF_XDP: {}",
        brief(st)
    );
    assert!(
        tx >= at_least,
        "only {tx} packets left over AF_XDP: {}",
        brief(st)
    );
    assert!(tun_rx * 20 < rx, "{}", brief(st));
    assert!(tun_tx * 20 < tx, "{}", brief(st));
    assert_eq!(worker_counter(st, "afxdp_rx_invalid"), 0, "{}", brief(st));
}

/// CLI -- GW -- SRV with xlat running `section` (and the AF_XDP slow path) in GW.
fn lab64(cli_addr: &str, section: &str) -> Topo64 {
    require_root();
    let mut lab = Topo64::new('a', cli_addr, true);
    let cli = lab.cli.clone();
    lab.ip(&cli, &["-6", "route", "add", "default", "via", GW6]);
    let cfg = format!(
        "[tun]\nname = \"{tun}\"\nmtu = 1500\nauto_routes = true\n\n{section}\n[control]\nsocket = \"{sock}\"\n\n[dataplane]\nslow_path = \"af_xdp\"\ninterfaces = [\"{a}\", \"{b}\"]\n{workers}",
        tun = lab.tun,
        sock = lab.socket.display(),
        a = lab.gw_cli_dev,
        b = lab.gw_srv_dev,
        workers = workers_line(),
    );
    let (gw, tun, path) = (lab.gw.clone(), lab.tun.clone(), lab.dir.join("xlat.toml"));
    let k = lab.spawn_xlat(&gw, "xlat", &["run"], &path, &cfg);
    lab.wait_xlat_ready(
        k,
        &gw,
        &tun,
        &[&["-6", "route", "show"], &["-4", "route", "show"]],
        &cfg,
    );
    lab
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_http_and_fragmented_ping_cross_af_xdp() {
    let mut lab = lab64(
        CLI6,
        &format!("[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"{POOL4}/32\"]\n"),
    );
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    let (_http, blob) = lab.serve_random_file(&srv, SRV, 8080, 2_097_152);
    lab.ping_all(&cli, 1, &["-6"], SRV_V6);
    let (_, got) = lab.curl(&cli, &format!("http://[{SRV_V6}]:8080/blob.bin"));
    assert_same_file(&blob, &got);
    lab.ping_all(&cli, 3, &["-6"], SRV_V6);
    // Three fragments each way (RFC 7915 5.1.1 / 4.1: translated one by one).
    lab.ping_all(&cli, 3, &["-6", "-s", "4000"], SRV_V6);
    assert_mostly_af_xdp(&lab.stats(), 1500);
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn siit_http_both_ways_crosses_af_xdp() {
    let mut lab = lab64(
        SIIT_CLI6,
        "[siit]\nprefix = \"2001:2:0:64::/96\"\neam = [{ ipv4 = \"198.19.1.0/28\", ipv6 = \"2001:2:0:1::/124\" }]\n",
    );
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    lab.ip(&srv, &["route", "add", "198.19.1.0/28", "via", GW4]);
    let (_h4, blob4) = lab.serve_random_file(&srv, SRV, 8080, 1_048_576);
    let (_h6, blob6) = lab.serve_random_file(&cli, "::", 8081, 1_048_576);
    // A ping each way first, as a real path has: the next hops' neighbour entries exist
    // before the transfers, so what leaves through the TUN device is the few packets sent
    // before the resolver knew them, not a 1 MB burst's worth (CI once saw 131 of 2,360).
    lab.ping_all(&cli, 1, &["-6"], SRV_V6);
    lab.ping_all(&srv, 1, &[], SIIT_CLI4);
    let (_, got) = lab.curl(&cli, &format!("http://[{SRV_V6}]:8080/blob.bin"));
    assert_same_file(&blob4, &got);
    let (_, got) = lab.curl(&srv, &format!("http://{SIIT_CLI4}:8081/blob.bin"));
    assert_same_file(&blob6, &got);
    lab.ping_all(&cli, 2, &["-6", "-s", "4000"], SRV_V6);
    lab.ping_all(&srv, 2, &["-s", "4000"], SIIT_CLI4);
    assert_mostly_af_xdp(&lab.stats(), 1500);
}

/// The scheduling policy (`/proc/PID/task/TID/stat` field 41: 0 SCHED_OTHER, 1 SCHED_FIFO) and
/// name of each thread of process `pid`.
fn thread_policies(pid: i32) -> Vec<(String, u32)> {
    let dir = format!("/proc/{pid}/task");
    let mut v = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let p = e.unwrap().path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        // Fields after the name's closing parenthesis start at field 3 (state).
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let policy = rest
            .split_whitespace()
            .nth(41 - 3)
            .and_then(|f| f.parse().ok());
        if let Some(policy) = policy {
            v.push((comm.trim().to_string(), policy));
        }
    }
    v.sort();
    v
}

/// A daemon started real-time (`chrt -f 10 xlat run`, as the lab and a tuned gateway run it)
/// keeps that class on its packet worker only: the AF_XDP next-hop resolver, the control
/// socket, the metrics listener and the watchdog run in the normal class, so none of them
/// preempts packet work on its core (the resolver at real-time priority once held a core
/// for 1.5 ms, longer than a veth receive ring lasts at 200,000 packets/s).
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn only_the_packet_worker_keeps_a_real_time_class() {
    require_root();
    let mut t = Topo::new(Opts {
        af_xdp: true,
        ..Opts::default()
    });
    let cfg = format!(
        "{}\n[metrics]\nlisten = \"127.0.0.1:19641\"\n",
        t.default_config()
    );
    assert!(cfg.contains("slow_path = \"af_xdp\""), "{cfg}");
    let (gw, tun, path) = (t.ns_gw.clone(), t.tun.clone(), t.config.clone());
    std::fs::write(&path, &cfg).unwrap();
    let cfg_path = path.display().to_string();
    let p = t.spawn_env(
        &gw,
        "xlat",
        &["chrt", "-f", "10", xlat_bin(), "run", "-c", &cfg_path],
        &[("RUST_LOG", "info")],
    );
    t.xlat.push(p);
    t.wait_xlat_ready(
        p,
        &gw,
        &tun,
        &[&["-4", "route", "show", "table", "all"]],
        &cfg,
    );
    // The resolver starts with the workers; give it a moment to be there.
    let pid = t.proc(p).pid();
    let mut threads = thread_policies(pid);
    for _ in 0..50 {
        if threads.iter().any(|(n, _)| n == "xlat-nexthop") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        threads = thread_policies(pid);
    }
    eprintln!("threads (name, policy): {threads:?}");
    let worker = |n: &str| n == "xlat" || n.starts_with("xlat-worker-");
    assert!(
        threads.iter().any(|(n, pol)| n == "xlat" && *pol == 1),
        "the packet worker (the main thread) lost its real-time class: {threads:?}"
    );
    for name in ["xlat-nexthop", "xlat-control", "xlat-metrics"] {
        assert!(
            threads.iter().any(|(n, _)| n == name),
            "no {name} thread: {threads:?}"
        );
    }
    let rt: Vec<_> = threads
        .iter()
        .filter(|(n, pol)| !worker(n) && *pol != 0)
        .collect();
    assert!(
        rt.is_empty(),
        "control-plane threads left real-time: {rt:?}"
    );
}

/// `ping -c n` from IN to OUT that must get no reply at all.
fn ping_unanswered(t: &Topo, n: u32) {
    let count = n.to_string();
    let r = t.ns(
        &t.ns_in,
        10,
        &["ping", "-n", "-c", &count, "-i", "0.2", "-W", "1", OUT_ADDR],
    );
    assert!(
        r.stdout
            .contains(&format!("{n} packets transmitted, 0 received")),
        "expected no reply: {}\n{}",
        r.stdout,
        r.stderr
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn the_egress_follows_the_kernels_neighbour_and_route_changes() {
    let t = setup();
    let (inn, gw) = (t.ns_in.clone(), t.ns_gw.clone());
    t.ping_all(&inn, 3, &[], OUT_ADDR);
    let real = t
        .ns(
            &t.ns_out,
            5,
            &["cat", &format!("/sys/class/net/{}/address", t.out_dev)],
        )
        .check()
        .stdout
        .trim()
        .to_string();
    let neigh = |mac: &str, nud: &str| {
        t.ns(
            &gw,
            5,
            &[
                "ip",
                "neigh",
                "replace",
                OUT_ADDR,
                "lladdr",
                mac,
                "dev",
                &t.gw_out_dev,
                "nud",
                nud,
            ],
        )
        .check();
    };
    let settle = || std::thread::sleep(std::time::Duration::from_millis(500));

    // OUT's neighbour entry now names a MAC no host has: the resolver hears of it
    // (RTM_NEWNEIGH) and the echo requests still leave over AF_XDP, to that MAC, unanswered.
    // Had it kept the old entry, they would reach OUT and be answered.
    neigh("02:00:5e:00:53:99", "permanent");
    settle();
    let tx = worker_counter(&t.stats(), "afxdp_tx");
    ping_unanswered(&t, 3);
    let st = t.stats();
    assert!(
        worker_counter(&st, "afxdp_tx") >= tx + 3,
        "the requests should still leave over AF_XDP: {}",
        brief(&st)
    );
    // The right address back: answered again, both ways over AF_XDP.
    neigh(&real, "reachable");
    settle();
    let tx = worker_counter(&t.stats(), "afxdp_tx");
    t.ping_all(&inn, 3, &[], OUT_ADDR);
    let st = t.stats();
    assert!(worker_counter(&st, "afxdp_tx") >= tx + 6, "{}", brief(&st));

    // A blackhole route to OUT (RTM_NEWROUTE): its entry leaves the table, the requests go
    // through the TUN device, and the kernel drops them by that route.
    let route = |op: &str| {
        t.ns(
            &gw,
            5,
            &["ip", "route", op, "blackhole", &format!("{OUT_ADDR}/32")],
        )
        .check();
    };
    let st = t.stats();
    assert!(
        st["fast_path"]["egress_destinations"].as_u64() >= Some(2),
        "OUT and IN are cached: {}",
        st["fast_path"]
    );
    let drops = xdp(&st, "afxdp_egress_route_drops");
    route("add");
    settle();
    let st = t.stats();
    assert!(
        xdp(&st, "afxdp_egress_route_drops") > drops,
        "the blackhole route should have dropped OUT's entry: {}",
        st["fast_path"]
    );
    let unresolved = worker_counter(&st, "afxdp_fallback_unresolved");
    ping_unanswered(&t, 3);
    let st = t.stats();
    assert!(
        worker_counter(&st, "afxdp_fallback_unresolved") >= unresolved + 3,
        "the requests should have gone to the kernel: {}",
        brief(&st)
    );
    route("del");
    settle();
    t.ping_all(&inn, 3, &[], OUT_ADDR);
    t.ping_all(&inn, 3, &[], OUT_ADDR);
    let st = t.stats();
    assert!(
        worker_counter(&st, "afxdp_tx") >= tx + 12,
        "back over AF_XDP once the route went: {}",
        brief(&st)
    );
}
