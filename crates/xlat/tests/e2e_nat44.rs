//! End-to-end NAT44 tests: real clients and servers in network namespaces, crossing `xlat run`.
//!
//! Topology (see `common`): IN 198.18.0.20 -- GW (xlat, pool 198.19.0.100, static
//! 198.18.0.10 <-> 198.19.0.10) -- OUT 198.19.0.2 / 198.19.0.3, with no route back to the
//! inside prefix. Every test builds its own namespaces and removes them, also on failure.
//! Needs root: `#[ignore]`d, run by scripts/test.sh (`--include-ignored`), failing when run as
//! another user.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::time::Duration;

/// Builds a topology with xlat running the default config, or `None` when not root.
fn setup(opts: Opts) -> Topo {
    require_root();
    let mut t = Topo::new(opts);
    let cfg = t.default_config();
    t.start_xlat(&cfg);
    t
}

/// Lines of a tcpdump text capture that show an IPv4 packet from `src` to `dst`.
fn from_to<'a>(lines: &'a [String], src: &str, dst: &str) -> Vec<&'a String> {
    lines
        .iter()
        .filter(|l| Pkt::parse(l).is_some_and(|p| !p.v6 && p.is(src, dst)))
        .collect()
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn ping_and_fragmented_ping_cross_napt_with_pool_source() {
    let mut t = setup(Opts::default());
    let (inn, out, od) = (t.ns_in.clone(), t.ns_out.clone(), t.out_dev.clone());
    let cap = t.tcpdump(&out, &od, "ip");

    t.ping_all(&inn, 3, &[], OUT_ADDR);
    // 4000 bytes of payload: three fragments each way on 1500-byte links.
    t.ping_all(&inn, 3, &["-s", "4000"], OUT_ADDR);

    let lines = t.tcpdump_lines(cap);
    let from_pool = from_to(&lines, POOL_ADDR, OUT_ADDR);
    let from_inside = from_to(&lines, IN_ADDR, OUT_ADDR);
    assert!(
        from_inside.is_empty(),
        "OUT saw untranslated inside source:\n{from_inside:#?}"
    );
    let echo = from_pool
        .iter()
        .filter(|l| l.contains("ICMP echo request"))
        .count();
    assert!(
        echo >= 6,
        "OUT should see 6 echo requests from {POOL_ADDR}, saw {echo}:\n{}",
        lines.join("\n")
    );
    // The later fragments of the 4000-byte pings also carry the pool source (tcpdump prints them
    // as "ip-proto-1" / "frag"): at least two per request.
    let frags = from_pool
        .iter()
        .filter(|l| !l.contains("ICMP echo"))
        .count();
    assert!(
        frags >= 6,
        "OUT should see non-first fragments from {POOL_ADDR}, saw {frags}:\n{}",
        lines.join("\n")
    );

    let st = t.stats();
    assert!(
        Topo::event(&st, "fragments") > 0,
        "no fragments counted: {st}"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn curl_fetches_4mb_file_intact() {
    let mut t = setup(Opts::default());
    let srv = t.fetch_random_file(4_194_304);

    // The server's access log names the client: the pool address, never the inside host.
    let log = t.proc(srv).stderr_text();
    assert_http_client(&log, "/blob.bin", POOL_ADDR);
    assert!(
        !log.contains(IN_ADDR),
        "HTTP server saw the inside address:\n{log}"
    );
}

/// With the hosts' offloads as Linux sets them (TSO, GSO, GRO, partial checksums), TCP
/// super-packets cross the TUN device and the engine whole (`[tun] offload`, on by
/// default) both ways: a 16 MB download arrives intact, iperf3 runs both ways, and the
/// engine counted super-packets (on the TUN path; the fast paths see segments).
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn tcp_super_packets_cross_whole_with_host_offloads() {
    let mut t = setup(Opts {
        kernel_offloads: true,
        ..Opts::default()
    });
    t.fetch_random_file(16 << 20);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let (_, sj) = t.iperf3_tcp(&out, OUT_ADDR, &inn, OUT_ADDR);
    let sent = sj["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(sent > 1 << 20, "iperf3 moved {sent} bytes: {sj}");
    let st = t.stats();
    if t.kernel_offloads {
        assert!(
            Topo::event(&st, "super_packets") > 0,
            "no super-packet crossed whole: {st}"
        );
    }
    assert_eq!(Topo::drops(&st, "unusable_offload"), 0, "{st}");
    assert_eq!(st["io"]["tun_offload_refused"], 0, "{st}");
}

/// Parses "peer=A port=P" from the echo server's reply.
fn peer_of(reply: &str) -> Option<(String, u16)> {
    let line = reply.lines().find(|l| l.starts_with("peer="))?;
    let mut it = line.split_whitespace();
    let a = it.next()?.strip_prefix("peer=")?.to_string();
    let p = it.next()?.strip_prefix("port=")?.parse().ok()?;
    Some((a, p))
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn udp_both_ways_with_socat_and_endpoint_independent_mapping() {
    let mut t = setup(Opts::default());
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    t.udp_echo(&out, OUT_ADDR, 7000);
    t.udp_echo(&out, OUT_ADDR2, 7000);

    // Request from IN, reply from OUT.
    let r = t.sh(
        &inn,
        20,
        &format!("echo hello-xlat | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000"),
    );
    assert!(r.ok(), "socat client failed: {}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("hello-xlat"),
        "no echo came back through xlat: {:?}",
        r.stdout
    );
    let (peer, _) =
        peer_of(&r.stdout).unwrap_or_else(|| panic!("no peer line in reply {:?}", r.stdout));
    assert_eq!(
        peer, POOL_ADDR,
        "OUT must see the pool address as the UDP peer"
    );

    // RFC 4787 REQ-1: one inside address:port maps to one outside address:port whatever the
    // remote. Same source port to two remotes -> same outside port.
    let r = t.sh(
        &inn,
        30,
        &format!(
            "echo one | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:40000,reuseaddr && \
             echo two | socat -T 5 -t 3 - UDP4:{OUT_ADDR2}:7000,bind={IN_ADDR}:40000,reuseaddr"
        ),
    );
    assert!(r.ok(), "socat clients failed: {}\n{}", r.stdout, r.stderr);
    let peers: Vec<(String, u16)> = r.stdout.lines().filter_map(peer_of).collect();
    assert_eq!(peers.len(), 2, "expected two replies: {:?}", r.stdout);
    assert_eq!(peers[0].0, POOL_ADDR);
    assert_eq!(peers[1].0, POOL_ADDR);
    assert_eq!(
        peers[0].1, peers[1].1,
        "endpoint-independent mapping: outside port must not depend on the remote"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn icmp_port_unreachable_reaches_inside_client() {
    let t = setup(Opts::default());
    let inn = t.ns_in.clone();
    let before = Topo::event(&t.stats(), "icmp_errors_translated");
    // Nothing listens on UDP 9 in OUT: its kernel answers with ICMP port unreachable, which
    // xlat must translate back (outer and embedded header) so IN's connected socket sees it.
    let r = t.ns(&inn, 20, &["python3", "-c", ICMP_PROBE, OUT_ADDR, "9"]);
    assert!(
        r.ok() && r.stdout.contains("REFUSED"),
        "the ICMP port unreachable did not reach the inside socket as ECONNREFUSED: {}\n{}",
        r.stdout,
        r.stderr
    );
    let after = Topo::event(&t.stats(), "icmp_errors_translated");
    assert!(
        after > before,
        "icmp_errors_translated did not grow ({before} -> {after})"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn iperf3_tcp_three_seconds() {
    let mut t = setup(Opts::default());
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let (_, sj) = t.iperf3_tcp(&out, OUT_ADDR, &inn, OUT_ADDR);
    // The server saw the pool address as its client.
    let remote = sj["start"]["connected"][0]["remote_host"]
        .as_str()
        .unwrap_or("");
    assert_eq!(
        remote, POOL_ADDR,
        "iperf3 server should see the pool address as the client"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn unsolicited_inbound_is_dropped_and_counted() {
    let mut t = setup(Opts::default());
    let (inn, out, ind) = (t.ns_in.clone(), t.ns_out.clone(), t.in_dev.clone());
    t.udp_echo(&out, OUT_ADDR, 7000);
    // Anything reaching IN that is not for the listener's port 5555 is a leak.
    let cap = t.tcpdump(&inn, &ind, "udp and not port 5555");
    let (lis, _, mapped) = t.udp_listener(&inn, "inside-listener", IN_ADDR, OUT_ADDR);

    let st0 = t.stats();
    let (nomap0, filt0) = (
        Topo::drops(&st0, "no_mapping"),
        Topo::drops(&st0, "filtered"),
    );
    let unmapped: u16 = if mapped == 33333 { 33334 } else { 33333 };
    let outside_ports: Vec<String> = t
        .sessions()
        .iter()
        .map(|s| endpoint(s, "outside"))
        .collect();
    assert!(
        !outside_ports
            .iter()
            .any(|o| o == &format!("{POOL_ADDR}:{unmapped}")),
        "test assumption broken: {unmapped} is mapped: {outside_ports:?}"
    );

    // 1. To the mapped port, from a remote address the inside host never contacted:
    //    address-dependent filtering (RFC 4787 5) must drop it.
    let m = mapped.to_string();
    let u = unmapped.to_string();
    t.ns(
        &out,
        10,
        &[
            "python3", "-c", UDP4_SEND, OUT_ADDR2, "0", POOL_ADDR, &m, "FILTERED",
        ],
    )
    .check();
    // 2. To a pool port with no mapping at all.
    t.ns(
        &out,
        10,
        &[
            "python3", "-c", UDP4_SEND, OUT_ADDR, "0", POOL_ADDR, &u, "NOMAP",
        ],
    )
    .check();
    let mut last = st0.clone();
    let counted = poll(Duration::from_secs(5), Duration::from_millis(100), || {
        last = t.stats();
        Topo::drops(&last, "no_mapping") > nomap0 && Topo::drops(&last, "filtered") > filt0
    });
    assert!(
        counted,
        "drops did not grow: no_mapping {nomap0} -> {}, filtered {filt0} -> {}",
        Topo::drops(&last, "no_mapping"),
        Topo::drops(&last, "filtered")
    );
    // 3. Control: from the contacted address (another port) is admitted (address-dependent
    //    filtering ignores the remote port), and tells the listener to stop.
    t.ns(
        &out,
        10,
        &[
            "python3", "-c", UDP4_SEND, OUT_ADDR, "7001", POOL_ADDR, &m, "DONE",
        ],
    )
    .check();
    let st = t.proc(lis).wait_exit(Duration::from_secs(12));
    let text = t.proc(lis).stdout_text();
    assert!(
        st.map(|s| s.success()).unwrap_or(false),
        "the admitted datagram did not arrive: {text}"
    );
    assert!(
        text.contains(&format!("from {OUT_ADDR} 7001 DONE")),
        "admitted datagram not seen: {text}"
    );
    assert!(
        !text.contains("FILTERED"),
        "a filtered datagram reached IN:\n{text}"
    );
    assert!(
        !text.contains("NOMAP"),
        "an unmapped datagram reached IN:\n{text}"
    );
    let leaks = t.tcpdump_lines(cap);
    assert!(
        leaks.is_empty(),
        "unsolicited packets reached IN:\n{}",
        leaks.join("\n")
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn show_sessions_and_stats_list_the_flows() {
    let mut t = setup(Opts::default());
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    t.udp_echo(&out, OUT_ADDR, 7000);
    let www = t.dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello from outside\n").unwrap();
    t.http_server(&out, OUT_ADDR, 8080, &www);

    // One flow of each protocol.
    t.ping_all(&inn, 2, &[], OUT_ADDR);
    let r = t.sh(
        &inn,
        20,
        &format!("echo hi | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000"),
    );
    assert!(
        r.stdout.contains("hi"),
        "udp echo failed: {}\n{}",
        r.stdout,
        r.stderr
    );
    let r = t.ns(
        &inn,
        20,
        &[
            "curl",
            "-sS",
            "--max-time",
            "10",
            &format!("http://{OUT_ADDR}:8080/index.html"),
        ],
    );
    assert!(
        r.stdout.contains("hello from outside"),
        "curl failed: {}\n{}",
        r.stdout,
        r.stderr
    );

    let sessions = t.sessions();
    let find = |proto: &str, remote_port: Option<u16>| {
        sessions.iter().find(|s| {
            s["proto"]
                .as_str()
                .map(|p| p.eq_ignore_ascii_case(proto))
                .unwrap_or(false)
                && endpoint(s, "inside").starts_with(&format!("{IN_ADDR}:"))
                && endpoint(s, "outside").starts_with(&format!("{POOL_ADDR}:"))
                && match remote_port {
                    Some(p) => endpoint(s, "remote") == format!("{OUT_ADDR}:{p}"),
                    // ICMP: the remote has no port; accept "addr" and "addr:id".
                    None => {
                        let r = endpoint(s, "remote");
                        r == OUT_ADDR || r.starts_with(&format!("{OUT_ADDR}:"))
                    }
                }
        })
    };
    let all = serde_json::to_string_pretty(&sessions).unwrap_or_default();
    for (proto, port) in [("icmp", None), ("udp", Some(7000)), ("tcp", Some(8080))] {
        let s = find(proto, port).unwrap_or_else(|| {
            panic!("no {proto} session {IN_ADDR}:* -> {POOL_ADDR}:* -> {OUT_ADDR} in:\n{all}")
        });
        for k in ["state", "expires_in"] {
            assert!(!s[k].is_null(), "{proto} session lacks {k:?}: {s}");
        }
    }
    // Text forms work too.
    let r = t.xlat_cmd(&["show", "sessions"]).check();
    assert!(
        r.stdout.contains(POOL_ADDR),
        "`show sessions` does not list the pool address:\n{}",
        r.stdout
    );
    let st = t.stats();
    assert!(!st["sessions"].is_null(), "stats lacks \"sessions\": {st}");
    assert!(
        Topo::event(&st, "packets_in") > 0
            && Topo::event(&st, "outbound") > 0
            && Topo::event(&st, "inbound") > 0,
        "{st}"
    );
    for e in st["events"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(st["drops"].as_array().into_iter().flatten())
    {
        assert!(
            e["name"].is_string() && e["value"].is_u64() && e["explain"].is_string(),
            "bad counter entry {e}"
        );
    }
    t.xlat_cmd(&["show", "stats"]).check();

    // Filters and the limit, applied in the daemon: only the UDP flow; one row of all.
    let udp = t
        .xlat_cmd(&[
            "show", "sessions", "--json", "--proto", "udp", "--inside", IN_ADDR,
        ])
        .check();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&udp.stdout).unwrap();
    assert!(
        !rows.is_empty() && rows.iter().all(|r| r["proto"] == "udp"),
        "--proto udp listed:\n{}",
        udp.stdout
    );
    let one = t
        .xlat_cmd(&["show", "sessions", "--json", "--limit", "1"])
        .check();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&one.stdout).unwrap();
    assert_eq!(rows.len(), 1, "{}", one.stdout);

    // Clear: exactly the chosen sessions end; the others stay. Without a selection it
    // refuses.
    let bare = t.xlat_cmd(&["clear", "sessions"]);
    assert!(
        !bare.ok() && bare.stderr.contains("--all"),
        "clear without a selection: {}",
        bare.stderr
    );
    let before = t.sessions().len();
    let c = t
        .xlat_cmd(&["clear", "sessions", "--proto", "udp", "--inside", IN_ADDR])
        .check();
    let n: usize = c
        .stdout
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("clear printed {:?}", c.stdout));
    assert!(n >= 1, "nothing cleared: {}", c.stdout);
    let after = t.sessions();
    assert_eq!(after.len(), before - n, "{after:?}");
    assert!(
        after.iter().all(|r| r["proto"] != "udp"),
        "a UDP session survived the clear: {after:?}"
    );
    assert!(
        after.iter().any(|r| r["proto"] == "tcp"),
        "the clear took the TCP session too: {after:?}"
    );
    assert_eq!(Topo::event(&t.stats(), "sessions_cleared"), n as u64);
}

#[test]
fn show_against_missing_socket_fails_clearly() {
    // Needs no root and no namespaces: only the CLI.
    let sock =
        std::env::temp_dir().join(format!("xlat-e2e-missing-{}/none.sock", std::process::id()));
    let sock_s = sock.display().to_string();
    for what in ["sessions", "stats"] {
        let r = run_host(
            15,
            &[xlat_bin(), "show", what, "--json", "--socket", &sock_s],
        );
        assert!(
            !r.ok(),
            "`xlat show {what}` against a missing socket succeeded: {}",
            r.stdout
        );
        assert!(
            r.status.code().is_some(),
            "`xlat show {what}` died by a signal: {}",
            r.status
        );
        assert!(
            r.stderr.contains(&sock_s),
            "the error should name the socket path {sock_s}:\n{}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("panicked"),
            "`xlat show {what}` panicked:\n{}",
            r.stderr
        );
        assert!(
            r.stdout.trim().is_empty(),
            "nothing should go to stdout on error: {}",
            r.stdout
        );
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn static_one_to_one_reachable_from_outside() {
    let mut t = setup(Opts {
        second_inside_host: true,
        ..Opts::default()
    });
    let (out, od) = (t.ns_out.clone(), t.out_dev.clone());
    let in2 = t.ns_in2.clone().expect("IN2 exists");

    // Unsolicited inbound to the static outside address is allowed (RFC 2663 4.1.1).
    let r = t.ping_all(&out, 3, &[], STATIC_OUTSIDE);
    assert!(
        r.stdout.contains(&format!("from {STATIC_OUTSIDE}")),
        "replies must come from {STATIC_OUTSIDE}:\n{}",
        r.stdout
    );

    // UDP from outside to a server on the static host: it sees the real remote (NAT44 does not
    // touch the outside address), and the reply returns from the static outside address.
    t.udp_echo(&in2, IN2_ADDR, 7000);
    let r = t.sh(
        &out,
        20,
        &format!("echo static-hi | socat -T 5 -t 3 - UDP4:{STATIC_OUTSIDE}:7000"),
    );
    assert!(
        r.stdout.contains("static-hi"),
        "UDP to the static address got no answer: {}\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        peer_of(&r.stdout).map(|p| p.0),
        Some(OUT_ADDR.to_string()),
        "{}",
        r.stdout
    );

    // Outbound from the static host leaves with its static outside address.
    let cap = t.tcpdump(&out, &od, "icmp");
    t.ping_all(&in2, 2, &[], OUT_ADDR);
    let lines = t.tcpdump_lines(cap);
    let req = from_to(&lines, STATIC_OUTSIDE, OUT_ADDR);
    assert!(
        req.len() >= 2,
        "OUT should see echo requests from {STATIC_OUTSIDE}:\n{}",
        lines.join("\n")
    );
    assert!(
        from_to(&lines, IN2_ADDR, OUT_ADDR).is_empty()
            && from_to(&lines, POOL_ADDR, OUT_ADDR).is_empty(),
        "{}",
        lines.join("\n")
    );

    assert!(Topo::event(&t.stats(), "static_translated") > 0);
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn sigterm_exits_zero_and_removes_routes_rules_tun() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let before = t.machine_state();
    let cfg = t.default_config();
    let x = t.start_xlat(&cfg);
    let during = t.machine_state();
    assert_ne!(
        before, during,
        "xlat with auto_routes = true changed nothing in GW"
    );
    assert!(
        during.contains(&t.tun),
        "GW state while running does not mention the TUN {}:\n{during}",
        t.tun
    );
    let inn = t.ns_in.clone();
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    // Issue 25: a TUN-only daemon names the one line that makes it fast at its start, as
    // `xlat check` does; a daemon already on XDP or AF_XDP says nothing of it.
    let log = t.proc(x).stderr_text();
    let advised = log.contains("note: every packet crosses the TUN device");
    let mode = common::lab::dataplane_mode(&cfg);
    assert_eq!(
        advised,
        mode.starts_with("tun"),
        "data path {mode}: the start-up note on the fast data path is wrong:\n{log}"
    );

    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(t.proc(x).pid(), libc::SIGTERM);
    }
    let st = t.proc(x).wait_exit(Duration::from_secs(10));
    let st = st.unwrap_or_else(|| panic!("xlat did not exit within 10 s of SIGTERM"));
    assert_eq!(
        st.code(),
        Some(0),
        "xlat exit status after SIGTERM: {st}\n{}",
        t.proc(x).stderr_text()
    );
    let after = t.machine_state();
    assert_eq!(
        before, after,
        "GW state after xlat exit differs from before it started"
    );
    let gw = t.ns_gw.clone();
    let tun = t.tun.clone();
    assert!(
        !t.ns(&gw, 5, &["ip", "link", "show", "dev", &tun]).ok(),
        "TUN {tun} still exists"
    );
}

/// Port forwarding (a static NAPT entry, `[nat44] static` with a protocol): an outside client
/// fetches a file from an inside web server at the pool address's port 80, the server sees
/// the real client address, and the copy is whole; port 81, not forwarded, stays closed.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn port_forward_reaches_the_inside_server() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config().replace(
        &format!("static = [{{ inside = \"{IN2_ADDR}\", outside = \"{STATIC_OUTSIDE}\" }}]"),
        &format!("static = [{{ inside = \"{IN2_ADDR}\", outside = \"{STATIC_OUTSIDE}\" }}, {{ proto = \"tcp\", inside = \"{IN_ADDR}:8080\", outside = \"{POOL_ADDR}:80\" }}]"),
    );
    assert!(
        cfg.contains("proto = \"tcp\""),
        "the config template changed:\n{cfg}"
    );
    t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    // http.server looks its own address up before it listens (socket.getfqdn): a resolver
    // that refuses at once, not one whose queries would wait behind the gateway.
    t.resolv_conf(&inn, "127.0.0.1");
    let (srv, blob) = t.serve_random_file(&inn, IN_ADDR, 8080, 1_048_576);
    let (_, got) = t.curl(&out, &format!("http://{POOL_ADDR}:80/blob.bin"));
    assert_same_file(&blob, &got);
    let log = t.proc(srv).stderr_text();
    assert_http_client(&log, "/blob.bin", OUT_ADDR);
    // Not forwarded: nothing answers on port 81 (curl gives up; no connection is made).
    let url = format!("http://{POOL_ADDR}:81/blob.bin");
    let r = t.ns(
        &out,
        10,
        &["curl", "-s", "-o", "/dev/null", "--max-time", "3", &url],
    );
    assert!(!r.ok(), "port 81 answered");
    let stats = t.stats();
    assert!(
        Topo::drops(&stats, "no_mapping") > 0,
        "the SYN to port 81 was not counted"
    );
    // The forwarded connection is listed with the session it made.
    let forwarded = t.sessions().iter().any(|s| {
        endpoint(s, "outside") == format!("{POOL_ADDR}:80")
            && endpoint(s, "inside") == format!("{IN_ADDR}:8080")
    });
    assert!(forwarded, "no session of the forward in show sessions");
}

/// Deterministic NAT44 (RFC 7422 2): 256 inside addresses on the one pool address get 252
/// ports each, IN (198.18.0.20, the 21st) ports 6064-6315. A UDP flow from a port in the
/// range keeps it; one from outside the range leaves from inside the range; TCP (curl)
/// too; and `xlat lookup -c` names IN from the outside endpoint OUT saw, with no log.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn deterministic_ports_come_from_the_hosts_range_and_lookup_names_it() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config().replace(
        "ports = \"1024-65535\"\n",
        "ports = \"1024-65535\"\ndeterministic = true\n",
    );
    assert!(cfg.contains("deterministic = true"), "{cfg}");
    t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let (first, last) = (1024 + 20 * 252, 1024 + 21 * 252 - 1);
    t.udp_echo(&out, OUT_ADDR, 7000);
    let r = t.sh(
        &inn,
        30,
        &format!(
            "echo kept | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:6100,reuseaddr && \
             echo moved | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:40000,reuseaddr"
        ),
    );
    assert!(r.ok(), "socat clients failed: {}\n{}", r.stdout, r.stderr);
    let peers: Vec<(String, u16)> = r.stdout.lines().filter_map(peer_of).collect();
    assert_eq!(peers.len(), 2, "expected two replies: {:?}", r.stdout);
    assert_eq!(
        peers[0],
        (POOL_ADDR.to_string(), 6100),
        "a port in the range is kept"
    );
    assert_eq!(peers[1].0, POOL_ADDR);
    let moved = peers[1].1;
    assert!(
        (first..=last).contains(&moved),
        "port 40000 must be mapped into IN's range {first}-{last}, got {moved}"
    );
    // TCP: every session's outside port lies in the range.
    t.fetch_random_file(1 << 20);
    let sessions = t.sessions();
    let ports: Vec<u64> = sessions
        .iter()
        .filter(|s| s["inside"].as_str() == Some(IN_ADDR))
        .filter_map(|s| s["outside_port"].as_u64())
        .collect();
    assert!(ports.len() >= 3, "sessions of IN: {sessions:?}");
    for p in &ports {
        assert!(
            (u64::from(first)..=u64::from(last)).contains(p),
            "outside port {p} not in {first}-{last}: {sessions:?}"
        );
    }
    // The answer from the configuration alone.
    let r = std::process::Command::new(xlat_bin())
        .args(["lookup", "-c"])
        .arg(&t.config)
        .args(["--outside", &format!("{POOL_ADDR}:{moved}")])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(said.contains(&format!("is {IN_ADDR} ")), "{said}");
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn trace_shows_an_unsolicited_drop_and_a_translated_ping() {
    let mut t = setup(Opts::default());
    let (inn, out, gw) = (t.ns_in.clone(), t.ns_out.clone(), t.ns_gw.clone());

    // An unsolicited datagram to a pool port nobody mapped: dropped, and the trace says why.
    let text = t.trace_while(
        &gw,
        &["--count", "1", "--outside", OUT_ADDR, "--proto", "udp"],
        |t| {
            t.ns(
                &out,
                10,
                &[
                    "python3", "-c", UDP4_SEND, OUT_ADDR, "0", POOL_ADDR, "33999", "TRACE",
                ],
            )
            .check();
        },
    );
    eprintln!("{text}");
    assert!(text.contains("Packet 1 at +0.000000 s, worker "), "{text}");
    assert!(text.contains("translator  nat44\n"), "{text}");
    assert!(
        text.contains(&format!("before      udp {OUT_ADDR}:")),
        "{text}"
    );
    assert!(
        text.contains(&format!("> {POOL_ADDR}:33999, ttl ")),
        "{text}"
    );
    assert!(text.contains("lookup      no session\n"), "{text}");
    assert!(text.contains("verdict     dropped: no_mapping\n"), "{text}");
    assert!(
        text.contains("Inbound to a pool address and port that has no mapping"),
        "the explanation is missing:\n{text}"
    );
    assert!(
        !text.contains("after "),
        "a dropped packet has no after:\n{text}"
    );
    assert!(text.contains("1 packet traced\n"), "{text}");

    // An outbound ping and its reply: translated, with the addresses before and after.
    let json = t.trace_while(
        &gw,
        &[
            "--count", "2", "--inside", IN_ADDR, "--proto", "icmp", "--json",
        ],
        |t| {
            let _ = t.ns(&inn, 5, &["ping", "-c", "1", "-W", "1", OUT_ADDR]);
        },
    );
    eprintln!("{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 2, "{json}");
    let a =
        |r: &serde_json::Value, side: &str, f: &str| r[side][f].as_str().unwrap_or("").to_string();
    let req = recs
        .iter()
        .find(|r| r["direction"] == "outbound")
        .unwrap_or_else(|| panic!("no outbound record:\n{json}"));
    assert_eq!(req["translator"], "nat44", "{json}");
    assert_eq!(req["verdict"], "forwarded", "{json}");
    assert!(
        req["lookup"] == "created" || req["lookup"] == "found",
        "{json}"
    );
    assert_eq!(req["before"]["icmp"][0], 8, "{json}");
    assert_eq!(
        (a(req, "before", "src"), a(req, "before", "dst")),
        (IN_ADDR.to_string(), OUT_ADDR.to_string())
    );
    assert_eq!(
        (a(req, "after", "src"), a(req, "after", "dst")),
        (POOL_ADDR.to_string(), OUT_ADDR.to_string())
    );
    // The second record: the next echo request, or the first one's reply on its way in.
    let other = recs.iter().find(|r| !std::ptr::eq(*r, req)).unwrap();
    assert_eq!(other["verdict"], "forwarded", "{json}");
    if other["direction"] == "inbound" {
        assert_eq!(other["lookup"], "found", "{json}");
        assert_eq!(
            (a(other, "before", "src"), a(other, "before", "dst")),
            (OUT_ADDR.to_string(), POOL_ADDR.to_string())
        );
        assert_eq!(
            (a(other, "after", "src"), a(other, "after", "dst")),
            (OUT_ADDR.to_string(), IN_ADDR.to_string())
        );
    }

    // A second trace while none runs, with no traffic: ends at its timeout, nothing caught.
    let r = t.xlat_cmd(&[
        "trace",
        "--count",
        "1",
        "--timeout",
        "1",
        "--inside",
        "198.18.0.99",
    ]);
    let r = r.check();
    assert!(r.stdout.contains("0 packets traced"), "{}", r.stdout);
    // Bad filters are refused by the CLI, before the daemon is asked.
    let r = t.xlat_cmd(&["trace", "--inside", "198.18.0"]);
    assert!(
        !r.ok() && r.stderr.contains("invalid value"),
        "{}",
        r.stderr
    );
}
