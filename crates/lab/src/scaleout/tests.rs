//! Unit tests of the pure parts: payloads, the record's analysis, configurations, group parsing.

use super::*;

fn rec() -> Record {
    let p0 = Ipv4Addr::new(198, 19, 16, 1);
    let p1 = Ipv4Addr::new(198, 19, 17, 3);
    let seen = vec![
        vec![StreamSeen {
            changes: vec![(0.1, p0), (5.0, p1)],
            ..Default::default()
        }],
        vec![StreamSeen {
            changes: vec![(0.1, p1)],
            ..Default::default()
        }],
    ];
    let replied = vec![
        vec![StreamBack {
            replied: vec![true, false, true, true],
        }],
        vec![StreamBack {
            replied: vec![true, true, true],
        }],
    ];
    Record {
        ticks: vec![0.0, 1.0, 2.0, 3.0],
        seen,
        replied,
        server_rx: vec![
            (0.1, p0),
            (0.2, p1),
            (0.3, p1),
            (9.0, Ipv4Addr::new(192, 0, 2, 1)),
        ],
    }
}

#[test]
fn pools_are_distinct_and_nodes_found_by_pool() {
    for i in 0..MAX_NODES {
        assert_eq!(node_of(pool_of(i).0, MAX_NODES), Some(i));
        let last = Ipv4Addr::from(u32::from(pool_of(i).0) + 15);
        assert_eq!(node_of(last, MAX_NODES), Some(i));
    }
    assert_eq!(node_of(Ipv4Addr::new(198, 19, 16, 16), 1), None);
    assert_eq!(node_of(Ipv4Addr::new(198, 18, 1, 1), MAX_NODES), None);
    assert_eq!(subscriber(0), Ipv4Addr::new(198, 18, 1, 1));
    assert_eq!(
        subscriber(MAX_SUBSCRIBERS - 1),
        Ipv4Addr::new(198, 18, 1, 250)
    );
}

#[test]
fn payload_round_trips_and_rejects_others() {
    let p = payload(7, 3, 123_456);
    assert_eq!(parse_payload(&p), Some((7, 3, 123_456)));
    assert_eq!(parse_payload(&p[..10]), None);
    let mut q = p;
    q[0] = b'Y';
    assert_eq!(parse_payload(&q), None);
    assert_eq!(parse_payload(&[]), None);
}

#[test]
fn record_answers_who_where_and_what_was_lost() {
    let r = rec();
    assert_eq!(r.sub_node_at(0, 1.0, 2), Some(0));
    assert_eq!(r.sub_node_at(0, 6.0, 2), Some(1));
    assert_eq!(r.sub_node_at(0, 0.0, 2), None);
    assert_eq!(r.sub_node_at(1, 1.0, 2), Some(1));
    assert_eq!(r.lost(0, 0.0, 10.0), 1);
    assert_eq!(r.lost(0, 2.0, 10.0), 0);
    // A tick the client never recorded as replied (short vector) counts as lost.
    assert_eq!(r.lost(1, 0.0, 10.0), 1);
    assert_eq!(r.sent(0, 0.0, 2.0), 2);
    let rec_s = r.recovered_after(0, 0, 2.0, 2).unwrap();
    assert!((rec_s - 3.0).abs() < 1e-9);
    assert_eq!(r.recovered_after(1, 1, 2.0, 2), None);
    assert_eq!(r.packets_per_node(0.0, 10.0, 2), vec![1, 2]);
}

#[test]
fn options_are_checked() {
    let ok = ScaleOpts {
        nodes: 3,
        subscribers: 24,
        flows: 4,
        interval: Duration::from_millis(20),
        settle: Duration::from_secs(3),
        routing: Routing::Bgp,
        buckets: 128,
        idle_timer: 2,
        dir: PathBuf::from("/tmp/x"),
        kill: None,
        xlat_bin: None,
        add_node: true,
        late_subscribers: 8,
        load_steps: vec![Duration::from_millis(5)],
    };
    ok.validate().unwrap();
    for bad in [
        ScaleOpts {
            nodes: 1,
            ..ok.clone()
        },
        ScaleOpts {
            nodes: 13,
            ..ok.clone()
        },
        ScaleOpts {
            subscribers: 0,
            ..ok.clone()
        },
        ScaleOpts {
            subscribers: 251,
            ..ok.clone()
        },
        ScaleOpts {
            flows: 17,
            ..ok.clone()
        },
        ScaleOpts {
            kill: Some(3),
            ..ok.clone()
        },
        ScaleOpts {
            buckets: 2,
            ..ok.clone()
        },
        ScaleOpts {
            nodes: 12,
            ..ok.clone()
        },
        ScaleOpts {
            add_node: false,
            ..ok.clone()
        },
        ScaleOpts {
            subscribers: 245,
            ..ok.clone()
        },
        ScaleOpts {
            load_steps: vec![Duration::from_micros(100)],
            ..ok.clone()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

#[test]
fn configs_name_the_pool_and_tun() {
    let c = bird_node_config(
        Ipv4Addr::new(198, 19, 64, 2),
        64497,
        Ipv4Addr::new(198, 19, 64, 1),
        64496,
        Ipv4Addr::new(198, 18, 16, 1),
        "198.19.16.0/28",
        "xlat0",
    );
    assert!(c.contains("net ~ [ 198.19.16.0/28 ]") && c.contains("ifname = \"xlat0\""));
    assert!(c.contains("dest = RTD_UNICAST"));
    let x = node_config("xlat0", "198.19.16.0/28", "/tmp/s");
    assert!(x.contains("pool = [\"198.19.16.0/28\"]"));
    let o = bird_outside_config(
        Ipv4Addr::new(198, 19, 0, 2),
        &[(Ipv4Addr::new(198, 19, 64, 2), 64497)],
    );
    assert!(o.contains("neighbor 198.19.64.2 as 64497"));
    assert!(c.contains("neighbor 198.18.16.1 as 64511"));
    let i = bird_inside_config(
        Ipv4Addr::new(198, 18, 0, 1),
        &[(Ipv4Addr::new(198, 18, 16, 2), 64497)],
    );
    assert!(i.contains("kernel table 200") && i.contains("neighbor 198.18.16.2 as 64497"));
    assert!(i.contains("local as 64511"));
}

#[test]
fn group_members_are_parsed_from_ip_nexthop() {
    assert_eq!(
        parse_group("id 100 group 1/3 type resilient buckets 128 idle_timer 2"),
        vec![0, 2]
    );
    assert_eq!(parse_group("id 100 group 3,2/1 type resilient"), vec![0, 2]);
    assert_eq!(
        parse_group("id 1 via 198.18.16.2 dev n0 scope link"),
        Vec::<usize>::new()
    );
    assert_eq!(parse_group(""), Vec::<usize>::new());
}

#[test]
fn the_health_check_is_the_documented_script() {
    assert!(HEALTH_SCRIPT.starts_with("#!/bin/bash"));
    assert!(HEALTH_SCRIPT.contains("unbalanced_timer 0"));
    assert!(HEALTH_SCRIPT.contains("MAX_SECONDS"));
}
