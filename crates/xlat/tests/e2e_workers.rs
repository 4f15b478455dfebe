//! End to end with two packet workers (`[dataplane] workers = 2`): the NAT44 topology of
//! `common` (IN -- GW running `xlat run` on a two-queue TUN -- OUT), many UDP flows from
//! several inside addresses at once. Checks what only several workers can get wrong: every
//! flow's reply comes back (return traffic finds the worker that owns the mapping), both
//! workers hold sessions, and packets were handed from the worker that read them to their
//! owner; fragmented echo replies (no port in later fragments) reach their owner too. The
//! NAT44 and NAT64 suites also run on two workers (`XLAT_E2E_WORKERS=2`, scripts/test.sh).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;

/// Inside addresses the flows come from (IN's own plus these, all in 198.18.0.0/24).
const EXTRA_INSIDE: &[&str] = &[
    "198.18.0.21",
    "198.18.0.22",
    "198.18.0.23",
    "198.18.0.24",
    "198.18.0.25",
    "198.18.0.26",
    "198.18.0.27",
];

/// A UDP echo server: answers every datagram with its payload, until killed.
const ECHO: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("LISTENING", flush=True)
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(data, peer)
"#;

/// Opens one UDP socket per (source address, port), sends a datagram naming the flow on
/// each, and waits (bounded) for every echo, resending to the unanswered ones a few times.
/// Prints "REPLIES n of m" and the flows that got none.
const FLOWS: &str = r#"
import select, socket, sys, time
dst, port = sys.argv[1], int(sys.argv[2])
srcs = sys.argv[3].split(",")
per = int(sys.argv[4])
socks = {}
for a in srcs:
    for i in range(per):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((a, 0))
        s.setblocking(False)
        socks[s] = "flow-%s-%d" % (a, i)
got = set()
for attempt in range(4):
    for s, name in socks.items():
        if name not in got:
            s.sendto(name.encode(), (dst, port))
    end = time.time() + 3
    while len(got) < len(socks) and time.time() < end:
        r, _, _ = select.select(list(socks), [], [], 0.2)
        for s in r:
            try:
                data = s.recv(2048)
            except OSError:
                continue
            if data.decode(errors="replace") == socks[s]:
                got.add(socks[s])
    if len(got) == len(socks):
        break
print("REPLIES %d of %d" % (len(got), len(socks)))
for name in socks.values():
    if name not in got:
        print("MISSING", name)
"#;

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn many_flows_spread_over_two_workers_and_all_replies_return() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let (inn, out, ind) = (t.ns_in.clone(), t.ns_out.clone(), t.in_dev.clone());
    for a in EXTRA_INSIDE {
        t.ip(&inn, &["addr", "add", &format!("{a}/24"), "dev", &ind]);
    }
    let cfg = format!(
        "{}\n[dataplane]\nworkers = 2\n",
        t.default_config().split("\n[dataplane]").next().unwrap()
    );
    t.start_xlat(&cfg);
    let srv = t.spawn(&out, "udp-echo", &["python3", "-c", ECHO, OUT_ADDR, "7000"]);
    t.wait_listening(&out, "udp", 7000, Some(srv));

    // 8 inside addresses x 8 ports = 64 flows.
    let srcs: Vec<&str> = std::iter::once(IN_ADDR)
        .chain(EXTRA_INSIDE.iter().copied())
        .collect();
    let r = t.ns(
        &inn,
        40,
        &[
            "python3",
            "-c",
            FLOWS,
            OUT_ADDR,
            "7000",
            &srcs.join(","),
            "8",
        ],
    );
    assert!(
        r.ok() && r.stdout.contains("REPLIES 64 of 64"),
        "not every flow's reply came back through two workers:\n{}\n{}",
        r.stdout,
        r.stderr
    );
    // And fragmented echo replies, whose later fragments carry no port.
    t.ping_all(&inn, 3, &["-s", "4000"], OUT_ADDR);

    let st = t.stats();
    let workers = st["workers"]
        .as_array()
        .unwrap_or_else(|| panic!("no \"workers\" in stats: {st}"));
    assert_eq!(workers.len(), 2, "{st}");
    let per: Vec<(u64, u64, u64, u64)> = workers
        .iter()
        .map(|w| {
            let c = |n: &str| {
                w["counters"]
                    .as_array()
                    .and_then(|a| a.iter().find(|c| c["name"] == n))
                    .and_then(|c| c["value"].as_u64())
                    .unwrap_or_else(|| panic!("worker row lacks {n}: {w}"))
            };
            (
                w["sessions"].as_u64().unwrap_or(0),
                c("handoffs_out"),
                c("handoffs_in"),
                c("handoff_ring_full"),
            )
        })
        .collect();
    let summary = format!("per worker (sessions, handoffs out, in, ring full): {per:?}");
    assert!(
        per.iter().all(|p| p.0 > 0),
        "both workers must hold sessions: {summary}"
    );
    let sessions: u64 = per.iter().map(|p| p.0).sum();
    assert_eq!(
        st["sessions"].as_u64(),
        Some(sessions),
        "the summed sessions are the workers' sessions: {summary}"
    );
    assert!(
        sessions >= 64,
        "64 UDP flows, {sessions} sessions: {summary}"
    );
    let (out_total, in_total): (u64, u64) = per.iter().fold((0, 0), |a, p| (a.0 + p.1, a.1 + p.2));
    assert!(out_total > 0, "no packet was handed off: {summary}");
    assert_eq!(out_total, in_total, "every handoff arrives: {summary}");
    assert!(per.iter().all(|p| p.3 == 0), "{summary}");
    assert!(Topo::event(&st, "fragments") > 0, "{st}");
    // `show sessions` lists both workers' sessions, and the static entry once.
    let rows = t.sessions();
    let statics = rows.iter().filter(|s| s["state"] == "static").count();
    assert_eq!(statics, 1, "{rows:?}");
    assert_eq!(rows.len() as u64 - 1, sessions, "{summary}");
    for a in &srcs {
        assert!(
            rows.iter()
                .any(|s| endpoint(s, "inside").starts_with(&format!("{a}:"))),
            "no session of {a}"
        );
    }
    // The text form names the workers and explains the handoff counters.
    let text = t.xlat_cmd(&["show", "stats", "--explain"]).check().stdout;
    assert!(text.contains("Workers (2)"), "{text}");
    assert!(
        text.contains("handoffs_out") && text.contains("passed to it"),
        "{text}"
    );
}
