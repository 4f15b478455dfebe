//! The reconfigure door ([`Engine::reconfigure`]): what changes live, all-or-nothing, and
//! sessions surviving it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use xlat_engine::*;

fn config() -> EngineConfig {
    EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.100/32".parse().unwrap()],
            ..Nat44Config::default()
        }),
        seed: 5,
        ..EngineConfig::default()
    }
}

fn out(e: &mut Engine, t: u64, sport: u16) -> Verdict {
    let mut p = ip4(
        a4("198.18.0.20"),
        a4("198.19.0.2"),
        17,
        udp(sport, 53, b"q"),
        64,
        0,
        1,
    );
    e.process_vec(Time::from_secs(t), &mut p)
}

#[test]
fn timeouts_change_live_and_sessions_survive() {
    let mut e = Engine::new(config()).unwrap();
    assert_eq!(out(&mut e, 0, 5000), Verdict::Forward);
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.timeouts.udp = 30;
        n.filtering = Filtering::EndpointIndependent;
    }
    let ch = e.reconfigure(Time::from_secs(1), &c).unwrap();
    assert_eq!(ch.keys, ["nat44.filtering", "timeouts.udp"]);
    // The session survived the reload, and its next packet refreshes it with the new timeout.
    assert_eq!(e.sessions(Time::from_secs(1)).len(), 1);
    assert_eq!(out(&mut e, 10, 5000), Verdict::Forward);
    let row = &e.sessions(Time::from_secs(10))[0];
    assert_eq!(row.expires_in, Some(30));
    assert_eq!(e.expire(Time::from_secs(41), 100), 1);
    // The same configuration again changes nothing.
    assert!(e.reconfigure(Time::from_secs(1), &c).unwrap().is_empty());
}

#[test]
fn what_cannot_change_live_is_refused_whole_and_changes_nothing() {
    let mut e = Engine::new(config()).unwrap();
    assert_eq!(out(&mut e, 0, 5000), Verdict::Forward);
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.timeouts.udp = 30;
        n.pool = vec!["198.19.0.101/32".parse().unwrap()];
        n.ports = (2000, 3000);
    }
    let err = e.reconfigure(Time::from_secs(1), &c).unwrap_err();
    assert_eq!(err.key, "nat44.ports");
    assert!(err.to_string().contains("restart"), "{err}");
    // Nothing applied: the UDP timeout is still 300 s, the pool the old one.
    assert_eq!(out(&mut e, 10, 5000), Verdict::Forward);
    assert_eq!(
        e.sessions(Time::from_secs(10))[0].outside.to_string(),
        "198.19.0.100"
    );
    assert_eq!(e.sessions(Time::from_secs(10))[0].expires_in, Some(300));
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.limits.max_sessions = 10;
    }
    assert!(e
        .reconfigure(Time::from_secs(1), &c)
        .unwrap_err()
        .key
        .starts_with("limits"));
    // Port blocks change who owns which ports: a restart.
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.limits.port_block_size = 512;
    }
    assert_eq!(
        e.reconfigure(Time::from_secs(1), &c).unwrap_err().key,
        "nat44.port_block_size"
    );
    // Deterministic NAT (RFC 7422): the mapping is a function of the config; a restart.
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.deterministic = true;
    }
    assert_eq!(
        e.reconfigure(Time::from_secs(1), &c).unwrap_err().key,
        "nat44.deterministic"
    );
    // The FTP ALG decides which sessions the lanes and the fast path may carry: a restart.
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.alg_ftp = true;
    }
    assert_eq!(
        e.reconfigure(Time::from_secs(1), &c).unwrap_err().key,
        "nat44.alg"
    );
    let mut c = config();
    c.nat64 = Some(Nat64Config {
        pool4: vec!["198.19.0.102/32".parse().unwrap()],
        prefix: "2001:2:0:64::/96".parse().unwrap(),
        ..Nat64Config::default()
    });
    assert_eq!(
        e.reconfigure(Time::from_secs(1), &c).unwrap_err().key,
        "nat64"
    );
}

#[test]
fn a_lower_per_host_limit_refuses_new_sessions_not_old_ones() {
    let mut e = Engine::new(config()).unwrap();
    assert_eq!(out(&mut e, 0, 5000), Verdict::Forward);
    assert_eq!(out(&mut e, 0, 5001), Verdict::Forward);
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.limits.max_sessions_per_host = 1;
    }
    e.reconfigure(Time::from_secs(1), &c).unwrap();
    assert_eq!(out(&mut e, 1, 5000), Verdict::Forward);
    assert_eq!(out(&mut e, 1, 5001), Verdict::Forward);
    assert_eq!(
        out(&mut e, 1, 5002),
        Verdict::Drop(DropReason::HostSessionLimit)
    );
}

fn pool(e: &mut Engine, pool: &[&str]) -> Change {
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.pool = pool.iter().map(|p| p.parse().unwrap()).collect();
    }
    e.reconfigure(Time::from_secs(2), &c).unwrap()
}

/// A session's outside address after one more outbound packet from port `sport`.
fn outside_of(e: &mut Engine, t: u64, sport: u16) -> std::net::Ipv4Addr {
    assert_eq!(out(e, t, sport), Verdict::Forward);
    let rows = e.sessions(Time::from_secs(t));
    rows.iter()
        .find(|r| r.inside_port == Some(sport))
        .unwrap()
        .outside
}

#[test]
fn a_pool_address_added_live_keeps_every_session_and_one_removed_ends_only_its_own() {
    let mut e = Engine::new(config()).unwrap();
    e.set_events(1024);
    let before = outside_of(&mut e, 0, 5000);
    assert_eq!(before.to_string(), "198.19.0.100");
    // Added: nothing ends, the session keeps its address (paired pooling, RFC 4787 REQ-2).
    let ch = pool(&mut e, &["198.19.0.100/32", "198.19.0.101/32"]);
    assert_eq!(
        (ch.keys.as_slice(), ch.sessions_ended),
        (&["nat44.pool".to_string()][..], 0)
    );
    assert_eq!(outside_of(&mut e, 3, 5000), before);
    assert_eq!(e.stats().pool_addresses, 2);
    // Removed: its sessions end with reason "reload", counted; the host is paired anew.
    let mut events = Vec::new();
    e.drain_events(&mut events);
    let ch = pool(&mut e, &["198.19.0.101/32"]);
    assert_eq!(ch.sessions_ended, 1);
    assert_eq!(e.counters().count(Event::SessionsRemovedByReload), 1);
    events.clear();
    e.drain_events(&mut events);
    assert!(
        events.iter().any(|ev| ev.kind
            == events::EventKind::SessionDeleted(events::EndReason::Reload)
            && ev.outside.to_string() == "198.19.0.100"),
        "{events:?}"
    );
    assert_eq!(e.sessions(Time::from_secs(4)).len(), 0);
    assert_eq!(outside_of(&mut e, 4, 5000).to_string(), "198.19.0.101");
    assert_eq!(e.stats().pool_addresses, 1);
    // The old address is no longer ours: an inbound packet to it is not translated.
    let mut p = ip4(
        a4("198.19.0.2"),
        a4("198.19.0.100"),
        17,
        udp(53, 5000, b"r"),
        64,
        0,
        1,
    );
    assert_ne!(e.process_vec(Time::from_secs(5), &mut p), Verdict::Forward);
    // Brought back, it serves new hosts again and the session on .101 stays.
    let ch = pool(&mut e, &["198.19.0.100/32", "198.19.0.101/32"]);
    assert_eq!(ch.sessions_ended, 0);
    assert_eq!(e.stats().pool_addresses, 2);
    assert_eq!(outside_of(&mut e, 6, 5000).to_string(), "198.19.0.101");
}

#[test]
fn a_forward_changed_live_ends_the_mappings_on_its_ports_and_leaves_the_rest() {
    let fwd = |inside: &str| PortForward {
        proto: xlat_engine::flow::Proto::Udp,
        inside: xlat_engine::flow::Endpoint {
            addr: u32::from_be_bytes(a4(inside)),
            port: 53,
        },
        outside: xlat_engine::flow::Endpoint {
            addr: u32::from_be_bytes(a4("198.19.0.100")),
            port: 8053,
        },
        count: 1,
    };
    let mut e = Engine::new(config()).unwrap();
    // A dynamic session from another port, which no forward touches.
    assert_eq!(out(&mut e, 0, 5000), Verdict::Forward);
    // A forward added live: its port leaves the pool, inbound packets reach its host.
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.forwards = vec![fwd("198.18.0.10")];
    }
    let ch = e.reconfigure(Time::from_secs(1), &c).unwrap();
    assert_eq!(
        (ch.keys, ch.sessions_ended),
        (vec!["nat44.static".to_string()], 0)
    );
    let mut p = ip4(
        a4("198.19.0.2"),
        a4("198.19.0.100"),
        17,
        udp(4000, 8053, b"q"),
        64,
        0,
        1,
    );
    assert_eq!(e.process_vec(Time::from_secs(2), &mut p), Verdict::Forward);
    assert_eq!(&p[16..20], &a4("198.18.0.10"));
    assert_eq!(e.sessions(Time::from_secs(2)).len(), 2);
    // Pointed at another host: the session through the old one ends, the other stays.
    if let Some(n) = c.nat44.as_mut() {
        n.forwards = vec![fwd("198.18.0.11")];
    }
    let ch = e.reconfigure(Time::from_secs(3), &c).unwrap();
    assert_eq!(ch.sessions_ended, 1);
    let rows = e.sessions(Time::from_secs(3));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].inside_port, Some(5000));
    let mut p = ip4(
        a4("198.19.0.2"),
        a4("198.19.0.100"),
        17,
        udp(4000, 8053, b"q"),
        64,
        0,
        1,
    );
    assert_eq!(e.process_vec(Time::from_secs(4), &mut p), Verdict::Forward);
    assert_eq!(&p[16..20], &a4("198.18.0.11"));
    // Removed: its sessions end and its port returns to the pool.
    if let Some(n) = c.nat44.as_mut() {
        n.forwards.clear();
    }
    assert_eq!(
        e.reconfigure(Time::from_secs(5), &c)
            .unwrap()
            .sessions_ended,
        1
    );
    let mut p = ip4(
        a4("198.19.0.2"),
        a4("198.19.0.100"),
        17,
        udp(4000, 8053, b"q"),
        64,
        0,
        1,
    );
    assert_ne!(e.process_vec(Time::from_secs(6), &mut p), Verdict::Forward);
}

#[test]
fn an_inside_prefix_removed_live_ends_its_hosts_sessions() {
    let mut e = Engine::new(config()).unwrap();
    assert_eq!(out(&mut e, 0, 5000), Verdict::Forward);
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.inside = vec!["198.18.1.0/24".parse().unwrap()];
    }
    let ch = e.reconfigure(Time::from_secs(1), &c).unwrap();
    assert_eq!(
        (ch.keys, ch.sessions_ended),
        (vec!["nat44.inside".to_string()], 1)
    );
    assert_ne!(out(&mut e, 2, 5000), Verdict::Forward);
}

#[test]
fn deterministic_nat_refuses_a_new_pool_or_inside_live() {
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.deterministic = true;
    }
    let mut e = Engine::new(c.clone()).unwrap();
    if let Some(n) = c.nat44.as_mut() {
        n.pool = vec!["198.19.0.100/31".parse().unwrap()];
    }
    let err = e.reconfigure(Time::from_secs(1), &c).unwrap_err();
    assert_eq!(err.key, "nat44.pool");
    assert!(err.reason.contains("RFC 7422"), "{err}");
}

/// Deterministic NAT64: pool4, the subscribers and their prefix length are the mapping's
/// inputs; a reload may not change them, but may change what changes live.
#[test]
fn deterministic_nat64_refuses_a_new_pool4_or_subscribers_live() {
    let base = EngineConfig {
        nat64: Some(Nat64Config {
            pool4: vec!["198.19.0.102/32".parse().unwrap()],
            prefix: "2001:2:0:64::/96".parse().unwrap(),
            deterministic: true,
            inside: vec!["2001:db8:100::/120".parse().unwrap()],
            ..Nat64Config::default()
        }),
        seed: 5,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(base.clone()).unwrap();
    let change = |f: &dyn Fn(&mut Nat64Config)| {
        let mut c = base.clone();
        f(c.nat64.as_mut().unwrap());
        c
    };
    let c = change(&|n| n.pool4 = vec!["198.19.0.102/31".parse().unwrap()]);
    let err = e.reconfigure(Time::from_secs(1), &c).unwrap_err();
    assert_eq!(err.key, "nat64.pool4");
    assert!(err.reason.contains("RFC 7422"), "{err}");
    let c = change(&|n| n.inside = vec!["2001:db8:100::/121".parse().unwrap()]);
    assert_eq!(
        e.reconfigure(Time::from_secs(1), &c).unwrap_err().key,
        "nat64.inside"
    );
    let c = change(&|n| {
        n.inside = vec!["2001:db8:100::/56".parse().unwrap()];
        n.subscriber_prefix_len = 64;
    });
    assert_eq!(
        e.reconfigure(Time::from_secs(1), &c).unwrap_err().key,
        "nat64.inside"
    );
    let c = change(&|n| n.timeouts.udp = 100);
    assert!(e.reconfigure(Time::from_secs(1), &c).is_ok());
}

#[test]
fn a_new_nat64_prefix_ends_every_nat64_session_and_a_new_pool4_only_its_own() {
    let cfg64 = |prefix: &str, pool4: &str| EngineConfig {
        nat64: Some(Nat64Config {
            pool4: vec![pool4.parse().unwrap()],
            prefix: prefix.parse().unwrap(),
            ..Nat64Config::default()
        }),
        seed: 5,
        ..EngineConfig::default()
    };
    let send = |e: &mut Engine, t: u64, dst: &str| {
        let mut p = ip6(a6("2001:db8::5"), a6(dst), 17, udp(5000, 53, b"q"), 64);
        e.process_vec(Time::from_secs(t), &mut p)
    };
    let mut e = Engine::new(cfg64("2001:db8:46::/96", "198.19.0.100/32")).unwrap();
    assert_eq!(send(&mut e, 0, "2001:db8:46::c613:2"), Verdict::Forward);
    // pool4 grows: the session stays.
    let ch = e
        .reconfigure(
            Time::from_secs(1),
            &cfg64("2001:db8:46::/96", "198.19.0.100/31"),
        )
        .unwrap();
    assert_eq!(
        (ch.keys, ch.sessions_ended),
        (vec!["nat64.pool4".to_string()], 0)
    );
    assert_eq!(e.sessions(Time::from_secs(1)).len(), 1);
    // A new pref64: every session named its peers by the old one.
    let ch = e
        .reconfigure(
            Time::from_secs(2),
            &cfg64("2001:db8:64::/96", "198.19.0.100/31"),
        )
        .unwrap();
    assert_eq!(ch.sessions_ended, 1);
    assert_ne!(send(&mut e, 3, "2001:db8:46::c613:2"), Verdict::Forward);
    assert_eq!(send(&mut e, 3, "2001:db8:64::c613:2"), Verdict::Forward);
    // The translator's own errors switch live; an MTU, which the fast path's recipes carry,
    // needs a restart.
    let mut c = cfg64("2001:db8:64::/96", "198.19.0.100/31");
    if let Some(n) = c.nat64.as_mut() {
        n.params.unreachable_errors = false;
    }
    let ch = e.reconfigure(Time::from_secs(4), &c).unwrap();
    assert_eq!(
        (ch.keys, ch.sessions_ended),
        (vec!["nat64.unreachable_errors".to_string()], 0)
    );
    if let Some(n) = c.nat64.as_mut() {
        n.params.lowest_ipv6_mtu = 1400;
    }
    let err = e.reconfigure(Time::from_secs(5), &c).unwrap_err();
    assert!(
        err.key.starts_with("nat64.(translation parameters"),
        "{err}"
    );
}

#[test]
fn siit_changes_live_and_the_next_packet_takes_the_new_mapping() {
    let cfg = |eam: Vec<Eam>| EngineConfig {
        siit: Some(SiitConfig {
            prefix: Some("2001:db8:64::/96".parse().unwrap()),
            eam,
            ..SiitConfig::default()
        }),
        seed: 5,
        ..EngineConfig::default()
    };
    let send = |e: &mut Engine, t: u64| {
        let mut p = ip6(
            a6("2001:db8:6::5"),
            a6("2001:db8:64::c613:2"),
            17,
            udp(5000, 53, b"q"),
            64,
        );
        let v = e.process_vec(Time::from_secs(t), &mut p);
        (v, p)
    };
    let mut e = Engine::new(cfg(Vec::new())).unwrap();
    // The source has no IPv4 form yet (RFC 7915 5.1: not translated).
    assert_ne!(send(&mut e, 0).0, Verdict::Forward);
    let eam = Eam {
        ipv4: "198.19.1.0/24".parse().unwrap(),
        ipv6: "2001:db8:6::/120".parse().unwrap(),
    };
    let ch = e.reconfigure(Time::from_secs(1), &cfg(vec![eam])).unwrap();
    assert_eq!(
        (ch.keys, ch.sessions_ended),
        (vec!["siit.eam".to_string()], 0)
    );
    let (v, p) = send(&mut e, 2);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(
        &p[12..16],
        &a4("198.19.1.5"),
        "the EAM entry (RFC 7757) gave the source"
    );
    // Removing [siit] altogether is a restart.
    let err = e.reconfigure(Time::from_secs(3), &config()).unwrap_err();
    assert_eq!(err.key, "siit");
}
