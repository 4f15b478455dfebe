//! End-to-end NAT event logging ([logging], issue 22): the gateway sends its session events
//! as RFC 5424 syslog lines to a collector, and the lines name who had which outside address
//! and port.
//!
//! Topology (see `common`): IN 198.18.0.20 -- GW (xlat, pool 198.19.0.100) -- OUT 198.19.0.2,
//! where a UDP syslog collector (a small python3 receiver, one line per datagram) listens on
//! 198.19.0.2:5514. Needs root: `#[ignore]`d, run by scripts/test.sh (`--include-ignored`),
//! failing when run as another user.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::time::Duration;

const COLLECTOR_PORT: u16 = 5514;

/// A UDP receiver printing each datagram as one line, flushed.
const COLLECTOR: &str = "import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    d, _ = s.recvfrom(65535)
    print(d.decode('utf-8', 'replace'), flush=True)
";

fn lines_with(t: &mut Topo, p: ProcId, words: &[&str]) -> Vec<String> {
    t.proc(p)
        .stdout_text()
        .lines()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .map(str::to_string)
        .collect()
}

/// A topology whose OUT runs the syslog collector on OUT_ADDR:COLLECTOR_PORT and whose
/// gateway logs every session to it: the topology, the collector, the xlat process.
fn gateway_logging_to_a_collector() -> (Topo, ProcId, ProcId) {
    require_root();
    let mut t = Topo::new(Opts::default());
    let out = t.ns_out.clone();
    let port = COLLECTOR_PORT.to_string();
    let col = t.spawn(
        &out,
        "syslog-collector",
        &["python3", "-u", "-c", COLLECTOR, OUT_ADDR, &port],
    );
    t.wait_listening_on(&out, "udp", OUT_ADDR, COLLECTOR_PORT, Some(col));
    let cfg = format!(
        "{}\n[logging]\nsyslog = [\"{OUT_ADDR}:{COLLECTOR_PORT}\"]\nevents = \"sessions\"\n",
        t.default_config()
    );
    let x = t.start_xlat(&cfg);
    (t, col, x)
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn session_events_reach_a_syslog_collector_and_name_the_subscriber() {
    let (mut t, col, _) = gateway_logging_to_a_collector();

    let inn = t.ns_in.clone();
    t.ping_all(&inn, 3, &[], OUT_ADDR);
    let created = [
        "NAT44_SESSION_CREATE",
        "proto=icmp",
        &format!("inside={IN_ADDR} "),
        &format!("outside={POOL_ADDR} "),
        &format!("remote={OUT_ADDR}"),
    ];
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        !lines_with(&mut t, col, &created).is_empty()
    });
    let got = t.proc(col).stdout_text();
    assert!(
        ok,
        "no session-create line for the ping; collector got:\n{got}"
    );
    let line = lines_with(&mut t, col, &created).remove(0);
    // RFC 5424 6: <PRI>VERSION TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD MSG.
    let f: Vec<&str> = line.splitn(8, ' ').collect();
    assert_eq!(f[0], "<134>1", "{line}");
    assert!(
        f[1].ends_with('Z') && f[1].len() == 27,
        "timestamp {:?}: {line}",
        f[1]
    );
    assert_eq!(
        (f[3], f[5], f[6]),
        ("xlat", "NAT44_SESSION_CREATE", "-"),
        "{line}"
    );
    // The outside identifier in the line is the one the session table shows.
    let id = line
        .split(' ')
        .find_map(|w| w.strip_prefix("outside_port="))
        .expect("outside_port");
    let rows = t.sessions();
    assert!(
        rows.iter()
            .any(|s| s["proto"] == "icmp" && endpoint(s, "outside") == format!("{POOL_ADDR}:{id}")),
        "line says {POOL_ADDR}:{id}, table has {rows:?}"
    );

    // Clearing the sessions logs their deletion with the reason.
    t.xlat_cmd(&["clear", "sessions", "--all"]).check();
    let deleted = [
        "NAT44_SESSION_DELETE",
        "proto=icmp",
        &format!("inside={IN_ADDR} "),
        "reason=cleared",
    ];
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        !lines_with(&mut t, col, &deleted).is_empty()
    });
    let got = t.proc(col).stdout_text();
    assert!(
        ok,
        "no session-delete line after clear; collector got:\n{got}"
    );
    // The operator's question from the stored lines: `xlat lookup` at the create line's
    // time names IN, and says the session was cleared.
    let log = t.proc(col).stdout.display().to_string();
    let outside = format!("{POOL_ADDR}:{id}");
    let r = run_host(
        15,
        &[
            xlat_bin(),
            "lookup",
            "--outside",
            &outside,
            "--at",
            f[1],
            "--proto",
            "icmp",
            "--log",
            &log,
        ],
    );
    assert!(r.ok(), "xlat lookup: {}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains(&format!("NAT44_SESSION proto=icmp inside={IN_ADDR} "))
            && r.stdout.contains("(cleared)"),
        "{}",
        r.stdout
    );
    // Nothing was lost on the way to the log thread, in any worker.
    let st = t.stats();
    let lost: Vec<u64> = st["workers"]
        .as_array()
        .unwrap_or_else(|| panic!("no \"workers\" in stats: {st}"))
        .iter()
        .map(|w| {
            w["counters"]
                .as_array()
                .and_then(|a| a.iter().find(|c| c["name"] == "log_events_dropped"))
                .and_then(|c| c["value"].as_u64())
                .unwrap_or_else(|| panic!("worker row lacks log_events_dropped: {w}"))
        })
        .collect();
    assert!(lost.iter().all(|&n| n == 0), "{st}");
}

/// When the daemon stops (SIGTERM), the sessions die with its table: the log says so
/// (`reason=stopped`), so a lookup after a restart never names a subscriber whose session
/// ended with the old process.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn sessions_open_at_stop_are_logged_as_ended() {
    let (mut t, col, x) = gateway_logging_to_a_collector();
    let inn = t.ns_in.clone();
    t.ping_all(&inn, 2, &[], OUT_ADDR);
    let created = ["NAT44_SESSION_CREATE", &format!("inside={IN_ADDR} ")];
    assert!(
        poll(Duration::from_secs(10), Duration::from_millis(100), || {
            !lines_with(&mut t, col, &created).is_empty()
        }),
        "no session-create line; collector got:\n{}",
        t.proc(col).stdout_text()
    );
    assert!(
        lines_with(&mut t, col, &["reason=stopped"]).is_empty(),
        "nothing stopped yet"
    );
    t.stop(x);
    let stopped = [
        "NAT44_SESSION_DELETE",
        &format!("inside={IN_ADDR} "),
        "reason=stopped",
    ];
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        !lines_with(&mut t, col, &stopped).is_empty()
    });
    let got = t.proc(col).stdout_text();
    assert!(ok, "no session-delete line at stop; collector got:\n{got}");
    // Its mapping and host pairing end with it.
    for kind in ["NAT44_BIB_DELETE", "ADDRESS_BINDING_DELETE"] {
        assert!(
            got.lines().any(|l| l.contains(kind)),
            "no {kind} line at stop; collector got:\n{got}"
        );
    }
}
