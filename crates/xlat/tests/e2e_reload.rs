//! End-to-end tests of live reload (`xlat reload`, SIGHUP): what changes live changes
//! without losing a session, a bad or restart-only file changes nothing and exits 2, a
//! download crossing the gateway survives a hundred reloads intact, and the pool changes
//! live with its routes, ending only the sessions of a removed address (docs/OPERATIONS.md).
//!
//! Topology (see `common`): IN 198.18.0.20 -- GW (xlat NAPT over 198.19.0.100) -- OUT
//! 198.19.0.2. Needs root: `#[ignore]`d, run by scripts/test.sh
//! (`--include-ignored`), failing when run as another user.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::time::Duration;

/// The ICMP sessions' `expires_in` values listed now.
fn icmp_expiries(t: &Topo) -> Vec<u64> {
    t.sessions()
        .iter()
        .filter(|s| s["proto"] == "icmp")
        .filter_map(|s| s["expires_in"].as_u64())
        .collect()
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn reload_applies_live_changes_and_refuses_the_rest() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config();
    let x = t.start_xlat(&cfg);
    let inn = t.ns_in.clone();
    let path = t.config.clone();
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    assert!(
        icmp_expiries(&t).iter().all(|&e| e > 40),
        "{:?}",
        icmp_expiries(&t)
    );

    // A live change: the ICMP timeout (60 s by default) to 33 s.
    std::fs::write(&path, format!("{cfg}\n[timeouts]\nicmp = 33\n")).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(
        r.stdout.contains("timeouts.icmp"),
        "reload did not report the change: {}",
        r.stdout
    );
    // The session survived; a new ping's session gets the new timeout.
    assert!(!icmp_expiries(&t).is_empty(), "the ICMP session was lost");
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    assert!(
        icmp_expiries(&t).iter().any(|&e| e <= 33),
        "no session with the new timeout: {:?}",
        icmp_expiries(&t)
    );

    // A file that does not parse: exit 2, the running configuration stays, traffic flows.
    std::fs::write(&path, "[nat44\nbroken").unwrap();
    let bad = t.xlat_cmd(&["reload"]);
    assert_eq!(bad.status.code(), Some(2), "{}\n{}", bad.stdout, bad.stderr);
    assert!(
        bad.stderr.contains(&path.display().to_string()),
        "the error does not name the file: {}",
        bad.stderr
    );
    t.ping_all(&inn, 2, &[], OUT_ADDR);

    // A change that needs a restart (the port range each mapping was chosen from), beside a
    // live one: refused with the key, exit 2, nothing applied.
    let moved = cfg.replace("ports = \"1024-65535\"", "ports = \"2000-65535\"");
    assert_ne!(moved, cfg);
    std::fs::write(&path, format!("{moved}\n[timeouts]\nicmp = 20\n")).unwrap();
    let pool = t.xlat_cmd(&["reload"]);
    assert_eq!(
        pool.status.code(),
        Some(2),
        "{}\n{}",
        pool.stdout,
        pool.stderr
    );
    assert!(
        pool.stderr.contains("nat44.ports") && pool.stderr.contains("restart"),
        "{}",
        pool.stderr
    );
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    assert!(
        icmp_expiries(&t).iter().all(|&e| e > 20),
        "the refused file was applied in part: {:?}",
        icmp_expiries(&t)
    );

    // SIGHUP reloads the same way.
    std::fs::write(&path, format!("{cfg}\n[timeouts]\nicmp = 44\n")).unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(t.proc(x).pid(), libc::SIGHUP);
    }
    let logged = poll(Duration::from_secs(5), Duration::from_millis(50), || {
        t.proc(x)
            .stderr_text()
            .contains("SIGHUP: configuration reloaded")
    });
    assert!(
        logged,
        "no reload after SIGHUP:\n{}",
        t.proc(x).stderr_text()
    );
    // The log names the configuration it now runs under by its digest (RFC 7422 3).
    let digest = format!("sha256={}", sha256(&path));
    assert!(
        t.proc(x).stderr_text().contains(&digest),
        "no {digest} in the log:\n{}",
        t.proc(x).stderr_text()
    );
    assert!(t.proc(x).try_status().is_none(), "xlat exited on SIGHUP");
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn a_download_survives_a_hundred_reloads() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config();
    t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let path = t.config.clone();
    let (_srv, blob) = t.serve_random_file(&out, OUT_ADDR, 8080, 8 << 20);
    let got = t.dir.join("got.bin");
    let url = format!("http://{OUT_ADDR}:8080/blob.bin");
    let got_s = got.display().to_string();
    // About four seconds at 2 MB/s: the reloads below happen while it runs.
    let curl = t.spawn(
        &inn,
        "curl-through-reloads",
        &[
            "curl",
            "-sS",
            "--max-time",
            "60",
            "--limit-rate",
            "2M",
            "-o",
            &got_s,
            &url,
        ],
    );
    let mut changed = 0;
    for i in 0..100 {
        let udp = 120 + (i % 2) * 60;
        std::fs::write(&path, format!("{cfg}\n[timeouts]\nudp = {udp}\n")).unwrap();
        let r = t.xlat_cmd(&["reload"]).check();
        changed += usize::from(r.stdout.contains("timeouts.udp"));
    }
    assert_eq!(changed, 100, "every reload changed the UDP timeout");
    let st = t.proc(curl).wait_exit(Duration::from_secs(60));
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(0),
        "curl through the reloads: {}",
        t.proc(curl).stderr_text()
    );
    assert_same_file(&blob, &got);
}

/// The routes GW's main table has for `addr` (a pool address: its route into the tun and
/// its fail-closed twin) and whether GW answers ARP for it.
fn routed(t: &Topo, addr: &str) -> (usize, bool) {
    let gw = t.ns_gw.clone();
    let routes = t.ns_ok(&gw, &["ip", "-4", "route", "show", "table", "main"]);
    let n = routes
        .stdout
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(usize::from(l.starts_with("unreachable")))
                == Some(addr)
        })
        .count();
    let proxy = t.ns_ok(&gw, &["ip", "neigh", "show", "proxy"]);
    (
        n,
        proxy
            .stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some(addr)),
    )
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn the_pool_changes_live_with_its_routes_and_only_its_removed_address_loses_sessions() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let before = t.machine_state();
    let cfg = t.default_config();
    let x = t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let path = t.config.clone();
    let one = format!("pool = [\"{POOL_ADDR}/32\"]");
    assert!(cfg.contains(&one), "{cfg}");
    let two = cfg.replace(
        &one,
        &format!("pool = [\"{POOL_ADDR}/32\", \"198.19.0.101/32\"]"),
    );
    let moved = cfg.replace(&one, "pool = [\"198.19.0.101/32\"]");
    assert_eq!(routed(&t, POOL_ADDR), (2, true));
    assert_eq!(routed(&t, "198.19.0.101"), (0, false));

    // An address added while a download runs on the first one: nothing ends, the new address
    // is routed (and its fail-closed twin made) and answered for by proxy ARP.
    let (_srv, blob) = t.serve_random_file(&out, OUT_ADDR, 8080, 4 << 20);
    let got = t.dir.join("got.bin");
    let got_s = got.display().to_string();
    let url = format!("http://{OUT_ADDR}:8080/blob.bin");
    let curl = t.spawn(
        &inn,
        "curl-through-a-pool-change",
        &[
            "curl",
            "-sS",
            "--max-time",
            "60",
            "--limit-rate",
            "2M",
            "-o",
            &got_s,
            &url,
        ],
    );
    wait_for(
        "the download's session",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || t.sessions().iter().any(|s| s["proto"] == "tcp"),
    );
    std::fs::write(&path, &two).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(r.stdout.contains("nat44.pool"), "{}", r.stdout);
    assert!(!r.stdout.contains("sessions ended"), "{}", r.stdout);
    assert_eq!(routed(&t, "198.19.0.101"), (2, true));
    let st = t.proc(curl).wait_exit(Duration::from_secs(60));
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(0),
        "curl across the pool change: {}",
        t.proc(curl).stderr_text()
    );
    assert_same_file(&blob, &got);

    // The first address removed: the sessions on it end (counted), its routes and proxy ARP
    // entry go, and the host's next packets leave from the address that stays.
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    assert!(
        t.sessions().iter().any(|s| s["outside"] == POOL_ADDR),
        "{:?}",
        t.sessions()
    );
    std::fs::write(&path, &moved).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(r.stdout.contains("sessions ended"), "{}", r.stdout);
    assert!(Topo::event(&t.stats(), "sessions_removed_by_reload") >= 1);
    assert!(
        t.sessions().iter().all(|s| s["outside"] != POOL_ADDR),
        "{:?}",
        t.sessions()
    );
    assert_eq!(routed(&t, POOL_ADDR), (0, false));
    t.ping_all(&inn, 2, &[], OUT_ADDR);
    assert!(
        t.sessions()
            .iter()
            .any(|s| s["proto"] == "icmp" && s["outside"] == "198.19.0.101"),
        "{:?}",
        t.sessions()
    );

    // A clean exit leaves GW as it was, though the routes changed while it ran.
    let st = t.stop(x);
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(0),
        "{}",
        t.proc(x).stderr_text()
    );
    assert_eq!(
        before,
        t.machine_state(),
        "GW after the pool changes and exit"
    );
}

/// `curl http://ADDR/metrics` from GW (where the daemon listens on its loopback).
fn metrics_get(t: &Topo, addr: &str) -> Run {
    t.http_get(&t.ns_gw, &format!("http://{addr}/metrics"))
}

/// `[metrics] listen` moves with a reload: the new address serves, the old one refuses
/// connections; a reload to an address another process holds is refused (exit 2, naming
/// `metrics.listen`) and the listener stays where it was; removing `[metrics]` stops it.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn reload_moves_the_metrics_listener_and_refuses_a_taken_address() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let base = t.default_config();
    let with = |listen: &str| format!("{base}\n[metrics]\nlisten = \"{listen}\"\n");
    t.start_xlat(&with("127.0.0.1:9641"));
    let (inn, gw) = (t.ns_in.clone(), t.ns_gw.clone());
    let path = t.config.clone();
    let r = metrics_get(&t, "127.0.0.1:9641");
    assert!(r.ok() && r.stdout.contains("xlat_"), "{}", r.stderr);

    std::fs::write(&path, with("127.0.0.1:9642")).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(r.stdout.contains("metrics.listen"), "{}", r.stdout);
    let r = metrics_get(&t, "127.0.0.1:9642");
    assert!(r.ok() && r.stdout.contains("xlat_"), "{}", r.stderr);
    let old = metrics_get(&t, "127.0.0.1:9641");
    assert!(!old.ok(), "the old address still serves: {}", old.stdout);
    assert!(
        old.stderr.contains("Connection refused") || old.stderr.contains("Failed to connect"),
        "{}",
        old.stderr
    );
    t.ping_all(&inn, 1, &[], OUT_ADDR);

    // Another process holds 127.0.0.1:9643: the reload (with a live change beside it) is
    // refused whole.
    let holder = t.spawn(
        &gw,
        "holds-9643",
        &[
            "python3",
            "-c",
            "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',9643))\ns.listen()\ntime.sleep(120)",
        ],
    );
    t.wait_listening_on(&gw, "tcp", "127.0.0.1", 9643, Some(holder));
    std::fs::write(
        &path,
        format!("{}\n[timeouts]\nicmp = 21\n", with("127.0.0.1:9643")),
    )
    .unwrap();
    let bad = t.xlat_cmd(&["reload"]);
    assert_eq!(bad.status.code(), Some(2), "{}\n{}", bad.stdout, bad.stderr);
    assert!(
        bad.stderr.contains("metrics.listen")
            && bad.stderr.contains("127.0.0.1:9643")
            && bad.stderr.contains("running configuration stays"),
        "{}",
        bad.stderr
    );
    let r = metrics_get(&t, "127.0.0.1:9642");
    assert!(r.ok(), "the running listener was lost: {}", r.stderr);
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    assert!(
        icmp_expiries(&t).iter().all(|&e| e > 21),
        "the refused file was applied in part: {:?}",
        icmp_expiries(&t)
    );
    t.stop(holder);

    // [metrics] removed: the listener stops.
    std::fs::write(&path, &base).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(r.stdout.contains("metrics"), "{}", r.stdout);
    assert!(!metrics_get(&t, "127.0.0.1:9642").ok());
    // And back on.
    std::fs::write(&path, with("127.0.0.1:9644")).unwrap();
    t.xlat_cmd(&["reload"]).check();
    assert!(metrics_get(&t, "127.0.0.1:9644").ok());
}

/// A UDP collector: binds argv1:argv2 for argv3 seconds and prints one line per datagram:
/// the sender's port, the IPFIX sequence number and the Set IDs in it.
const IPFIX_SETS: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(0.2)
end = time.time() + float(sys.argv[3])
print("listening", flush=True)
while time.time() < end:
    try:
        d, a = s.recvfrom(65535)
    except socket.timeout:
        continue
    if len(d) < 16:
        print("short", flush=True)
        continue
    v, n, t, seq, dom = struct.unpack("!HHIII", d[:16])
    sets, at = [], 16
    while at + 4 <= len(d):
        sid, sl = struct.unpack("!HH", d[at:at + 4])
        sets.append(str(sid))
        at += max(sl, 4)
    print("from=%d version=%d seq=%d sets=%s" % (a[1], v, seq, ",".join(sets)), flush=True)
"#;

/// One collector line's fields.
fn ipfix_lines(text: &str) -> Vec<(u16, u32, Vec<u16>)> {
    text.lines()
        .filter_map(|l| {
            let mut from = None;
            let mut seq = None;
            let mut sets = Vec::new();
            for w in l.split_whitespace() {
                if let Some(x) = w.strip_prefix("from=") {
                    from = x.parse().ok();
                } else if let Some(x) = w.strip_prefix("seq=") {
                    seq = x.parse().ok();
                } else if let Some(x) = w.strip_prefix("sets=") {
                    sets = x.split(',').filter_map(|s| s.parse().ok()).collect();
                }
            }
            Some((from?, seq?, sets))
        })
        .collect()
}

/// `[logging] ipfix` changes live: a collector added by a reload gets a template set first,
/// then data records for the next session, while the collector that stays goes on from the
/// same source port with no gap; a removed collector gets nothing more; the gateway keeps
/// translating throughout.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn reload_adds_an_ipfix_collector_which_gets_templates_then_data() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let base = t.default_config();
    let with = |collectors: &[u16]| {
        let list: Vec<String> = collectors
            .iter()
            .map(|p| format!("\"{OUT_ADDR}:{p}\""))
            .collect();
        format!("{base}\n[logging]\nipfix = [{}]\n", list.join(", "))
    };
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let a = t.spawn(
        &out,
        "collector-4739",
        &["python3", "-c", IPFIX_SETS, OUT_ADDR, "4739", "90"],
    );
    let b = t.spawn(
        &out,
        "collector-4740",
        &["python3", "-c", IPFIX_SETS, OUT_ADDR, "4740", "90"],
    );
    t.wait_listening_on(&out, "udp", OUT_ADDR, 4739, Some(a));
    t.wait_listening_on(&out, "udp", OUT_ADDR, 4740, Some(b));
    t.start_xlat(&with(&[4739]));
    let path = t.config.clone();

    t.ping_all(&inn, 1, &[], OUT_ADDR);
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        ipfix_lines(&t.proc(a).stdout_text())
            .iter()
            .any(|l| l.2.iter().any(|&s| s >= 256))
    });
    assert!(ok, "no data at 4739: {}", t.proc(a).stdout_text());
    let first_a = ipfix_lines(&t.proc(a).stdout_text());
    assert!(
        first_a[0].2.first() == Some(&2),
        "templates first: {first_a:?}"
    );
    assert!(
        ipfix_lines(&t.proc(b).stdout_text()).is_empty(),
        "4740 is not a collector yet"
    );

    // Add 4740.
    std::fs::write(&path, with(&[4739, 4740])).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(r.stdout.contains("logging.ipfix"), "{}", r.stdout);
    let ok = poll(Duration::from_secs(5), Duration::from_millis(50), || {
        !ipfix_lines(&t.proc(b).stdout_text()).is_empty()
    });
    assert!(ok, "the new collector got nothing");
    // A new session: data to both.
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        ipfix_lines(&t.proc(b).stdout_text())
            .iter()
            .any(|l| l.2.iter().any(|&s| s >= 256))
    });
    assert!(ok, "no data at 4740: {}", t.proc(b).stdout_text());
    let got_b = ipfix_lines(&t.proc(b).stdout_text());
    assert_eq!(
        got_b[0].2,
        vec![2],
        "a templates-only message first: {got_b:?}"
    );
    let all_a = ipfix_lines(&t.proc(a).stdout_text());
    assert!(
        all_a.len() > first_a.len(),
        "4739 got no data after the reload"
    );
    assert!(
        all_a.iter().all(|l| l.0 == all_a[0].0),
        "4739 saw another source port (a new transport session): {all_a:?}"
    );
    // Sequence numbers at 4739 never go back (no restart of the stream).
    assert!(all_a.windows(2).all(|w| w[1].1 >= w[0].1), "{all_a:?}");
    let st = t.stats();
    assert_eq!(counter(&st, "log", "ipfix_send_errors"), 0, "{st}");

    // Remove 4739: it gets nothing more; 4740 goes on; the gateway translates.
    std::fs::write(&path, with(&[4740])).unwrap();
    t.xlat_cmd(&["reload"]).check();
    let before_a = ipfix_lines(&t.proc(a).stdout_text()).len();
    let before_b = ipfix_lines(&t.proc(b).stdout_text()).len();
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        ipfix_lines(&t.proc(b).stdout_text()).len() > before_b
    });
    assert!(ok, "4740 got nothing after 4739 was removed");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        ipfix_lines(&t.proc(a).stdout_text()).len(),
        before_a,
        "a removed collector still gets messages"
    );

    // [logging] removed: nothing is sent; added back: 4740 gets templates, then data.
    std::fs::write(&path, &base).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(r.stdout.contains("logging"), "{}", r.stdout);
    let before_b = ipfix_lines(&t.proc(b).stdout_text()).len();
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        ipfix_lines(&t.proc(b).stdout_text()).len(),
        before_b,
        "[logging] removed, yet 4740 gets messages"
    );
    std::fs::write(&path, with(&[4740])).unwrap();
    t.xlat_cmd(&["reload"]).check();
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        let l = ipfix_lines(&t.proc(b).stdout_text());
        l.len() > before_b + 1 && l.last().is_some_and(|x| x.2.iter().any(|&s| s >= 256))
    });
    assert!(
        ok,
        "no data after [logging] came back: {}",
        t.proc(b).stdout_text()
    );
}
