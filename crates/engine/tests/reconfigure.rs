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
    let ch = e.reconfigure(&c).unwrap();
    assert_eq!(ch.keys, ["nat44.filtering", "timeouts.udp"]);
    // The session survived the reload, and its next packet refreshes it with the new timeout.
    assert_eq!(e.sessions(Time::from_secs(1)).len(), 1);
    assert_eq!(out(&mut e, 10, 5000), Verdict::Forward);
    let row = &e.sessions(Time::from_secs(10))[0];
    assert_eq!(row.expires_in, Some(30));
    assert_eq!(e.expire(Time::from_secs(41), 100), 1);
    // The same configuration again changes nothing.
    assert!(e.reconfigure(&c).unwrap().is_empty());
}

#[test]
fn what_cannot_change_live_is_refused_whole_and_changes_nothing() {
    let mut e = Engine::new(config()).unwrap();
    assert_eq!(out(&mut e, 0, 5000), Verdict::Forward);
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.timeouts.udp = 30;
        n.pool = vec!["198.19.0.101/32".parse().unwrap()];
    }
    let err = e.reconfigure(&c).unwrap_err();
    assert_eq!(err.key, "nat44.pool");
    assert!(err.to_string().contains("restart"), "{err}");
    // Nothing applied: the UDP timeout is still 300 s.
    assert_eq!(out(&mut e, 10, 5000), Verdict::Forward);
    assert_eq!(e.sessions(Time::from_secs(10))[0].expires_in, Some(300));
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.limits.max_sessions = 10;
    }
    assert!(e.reconfigure(&c).unwrap_err().key.starts_with("limits"));
    // Port blocks change who owns which ports: a restart.
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.limits.port_block_size = 512;
    }
    assert_eq!(e.reconfigure(&c).unwrap_err().key, "nat44.port_block_size");
    // Deterministic NAT (RFC 7422): the mapping is a function of the config; a restart.
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.deterministic = true;
    }
    assert_eq!(e.reconfigure(&c).unwrap_err().key, "nat44.deterministic");
    // The FTP ALG decides which sessions the lanes and the fast path may carry: a restart.
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.alg_ftp = true;
    }
    assert_eq!(e.reconfigure(&c).unwrap_err().key, "nat44.alg");
    let mut c = config();
    c.nat64 = Some(Nat64Config {
        pool4: vec!["198.19.0.102/32".parse().unwrap()],
        prefix: "2001:2:0:64::/96".parse().unwrap(),
        ..Nat64Config::default()
    });
    assert_eq!(e.reconfigure(&c).unwrap_err().key, "nat64");
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
    e.reconfigure(&c).unwrap();
    assert_eq!(out(&mut e, 1, 5000), Verdict::Forward);
    assert_eq!(out(&mut e, 1, 5001), Verdict::Forward);
    assert_eq!(
        out(&mut e, 1, 5002),
        Verdict::Drop(DropReason::HostSessionLimit)
    );
}
