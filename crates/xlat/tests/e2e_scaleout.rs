//! Scale-out end to end (issue 24): two real `xlat run` NAT44 nodes, each with its own pool,
//! behind an inside router's resilient nexthop group, their pools announced by real BIRD over
//! BGP to an outside router with a UDP echo server, and to the inside router, whose health check
//! (docs/scale-out/xlat-ecmp-health.sh) keeps the group to the nodes that announce. Subscribers
//! run streams through them; one node's xlat is SIGKILLed and restarted; then a third node is
//! added and new subscribers start. What is asserted is what the server, the subscribers and
//! the nodes' own session tables saw -- never wall time.
//! Needs root and BIRD: `#[ignore]`d, run by scripts/test.sh (`--include-ignored`, which
//! installs bird2), failing when run as another user or without bird.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use xlat_lab::scaleout::{node_of, pool_of, run, subscriber, Routing, ScaleOpts};

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn two_nodes_share_subscribers_a_killed_node_moves_only_its_own_and_a_new_node_takes_new_ones() {
    common::require_root();
    let missing = common::missing_tools(&["bird", "birdc"]);
    assert!(
        missing.is_empty(),
        "the scale-out test needs BIRD 2 ({missing:?} missing): apt-get install bird2, or run scripts/test.sh"
    );
    let dir = std::env::temp_dir().join(format!("xlat-e2e-scaleout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (nodes, subs, flows, late) = (2, 8, 2, 8);
    let o = run(&ScaleOpts {
        nodes,
        subscribers: subs,
        flows,
        interval: Duration::from_millis(20),
        settle: Duration::from_millis(1500),
        routing: Routing::Bgp,
        buckets: 64,
        idle_timer: 1,
        dir: dir.clone(),
        kill: None,
        xlat_bin: Some(env!("CARGO_BIN_EXE_xlat").into()),
        add_node: true,
        late_subscribers: late,
        load_steps: Vec::new(),
    })
    .unwrap_or_else(|e| panic!("scale-out run failed: {e:#}; configs and logs in {dir:?}"));
    let show = serde_json::to_string_pretty(&o).unwrap();
    assert_eq!(o.routing, "bgp (BIRD)");

    // Every subscriber's streams were all translated by one node: the server saw them from
    // that node's pool, and that node's own table holds exactly those (inside, outside)
    // pairs while the other node's table holds nothing of the subscriber.
    for s in 0..subs {
        let n = o.before[s].unwrap_or_else(|| panic!("subscriber {s} had no single node:\n{show}"));
        assert_eq!(o.sources_before[s].len(), flows, "subscriber {s}:\n{show}");
        for src in &o.sources_before[s] {
            assert_eq!(
                node_of(*src, nodes),
                Some(n),
                "subscriber {s}'s source {src} is not in node {n}'s pool {:?}",
                pool_of(n)
            );
            assert!(
                o.node_sessions[n].contains(&(subscriber(s), *src)),
                "node {n}'s table lacks {} -> {src}:\n{show}",
                subscriber(s)
            );
        }
        for m in (0..nodes).filter(|&m| m != n) {
            assert!(
                !o.node_sessions[m].iter().any(|(i, _)| *i == subscriber(s)),
                "node {m} also translated subscriber {s}:\n{show}"
            );
        }
    }
    // Every session a node holds to the server is from its own pool.
    for (n, sess) in o.node_sessions.iter().enumerate() {
        assert!(
            sess.iter().all(|(_, out)| node_of(*out, nodes) == Some(n)),
            "node {n} used another pool:\n{show}"
        );
    }
    let on =
        |n: usize| -> BTreeSet<usize> { (0..subs).filter(|&s| o.before[s] == Some(n)).collect() };
    assert!(
        !on(0).is_empty() && !on(1).is_empty(),
        "the group put every subscriber on one node:\n{show}"
    );

    // The killed node's subscribers, and only they, moved, and reach the server through the
    // other node; the other node's subscribers' streams lost nothing.
    let k = o.leave.node;
    let other = 1 - k;
    let moved: BTreeSet<usize> = o.leave.moved.iter().copied().collect();
    assert_eq!(moved, on(k), "who moved when node {k} died:\n{show}");
    assert!(o.leave.moved_other.is_empty(), "{show}");
    for &s in &moved {
        assert_eq!(
            o.after_leave[s],
            Some(other),
            "subscriber {s} after the kill:\n{show}"
        );
    }
    assert!(o.leave.recover_ms.is_some(), "{show}");
    assert!(o.leave.other_flows_sent > 0, "{show}");
    assert_eq!(
        o.leave.other_flows_lost, 0,
        "node {other}'s subscribers lost stream packets while node {k} died:\n{show}"
    );
    assert!(
        o.leave.moved_flows_lost > 0,
        "the killed node's subscribers lost nothing: was node {k} really killed?\n{show}"
    );

    // Back: the restarted node announced its pool again; nobody moved anywhere but to it,
    // and whoever did not move lost nothing.
    assert!(o.join.moved_other.is_empty(), "{show}");
    assert_eq!(o.join.other_flows_lost, 0, "{show}");
    assert!(o.join.other_flows_sent > 0, "{show}");
    let after: Vec<Option<usize>> = o.after_join.clone();
    assert!(after.iter().all(|n| n.is_some()), "{show}");
    // The health check (not the lab) took the killed node out of the group and put it back.
    assert!(
        o.health_log.contains("-> ") && o.leave.group_ms.is_some(),
        "{show}"
    );

    // A new node (index 2, its own pool) joins: established subscribers stay where they are
    // and lose nothing; new subscribers land on it too, and their echoes come back through it.
    let add = o.add.as_ref().expect("no add event");
    let new = nodes;
    assert_eq!(add.node, new);
    assert!(
        add.moved.is_empty(),
        "established subscribers moved when node {new} joined:\n{show}"
    );
    assert!(add.other_flows_sent > 0, "{show}");
    assert_eq!(add.other_flows_lost, 0, "{show}");
    assert!(
        o.after_add.iter().all(|n| n.is_some() && *n != Some(new)),
        "{show}"
    );
    let l = o.late.as_ref().expect("no late subscribers");
    assert_eq!(l.subscribers.len(), late);
    assert!(l.node.iter().all(|n| n.is_some()), "{show}");
    assert!(
        l.on_new_node > 0,
        "no new subscriber landed on the added node:\n{show}"
    );
    assert!(l.sent > 0 && l.new_node_replied > 0, "{show}");
    assert_eq!(l.lost, 0, "new subscribers lost stream packets:\n{show}");
    for (&s, n) in l.subscribers.iter().zip(&l.node) {
        if *n == Some(new) {
            // The added node's own table holds the subscriber, translated to its pool.
            assert!(
                l.new_node_sessions
                    .iter()
                    .any(|(i, out)| *i == subscriber(s) && node_of(*out, nodes + 1) == Some(new)),
                "node {new}'s table lacks subscriber {s}:\n{show}"
            );
        }
    }
    assert!(
        l.new_node_sessions
            .iter()
            .all(|(i, out)| node_of(*out, nodes + 1) == Some(new)
                && l.subscribers.iter().any(|&s| subscriber(s) == *i)),
        "node {new} translated an established subscriber or used another pool:\n{show}"
    );

    // Nothing left behind: the run's namespaces are gone.
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    // The one cluster of this process: "s<pid hex>0-...".
    let id = format!("s{:x}0-", std::process::id());
    let left: Vec<String> = String::from_utf8_lossy(&ns.stdout)
        .lines()
        .filter(|l| l.starts_with(&id))
        .map(String::from)
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
