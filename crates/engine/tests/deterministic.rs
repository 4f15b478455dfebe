//! Deterministic NAT44 (RFC 7422 section 2, `xlat_engine::deterministic`) through the
//! public engine API: every inside host's flows leave from its own outside address and port
//! range, computed from the configuration; a full range is the host's quota; with several
//! workers the return traffic finds the host's worker by the same arithmetic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::{a4, echo, ip4, reply, tcp, udp};
use xlat_engine::deterministic::Deterministic;
use xlat_engine::events::{EventKind, StateEvent};
use xlat_engine::shard::Shards;
use xlat_engine::*;

const REMOTE: [u8; 4] = [203, 0, 113, 9];

/// 256 subscribers on 4 addresses: 64 share an address, 64,512 / 64 = 1,008 ports each.
fn det(ports_per_host: u16) -> EngineConfig {
    EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.0/30".parse().unwrap()],
            mode: Nat44Mode::Napt,
            deterministic: true,
            ports_per_host,
            ..Nat44Config::default()
        }),
        seed: 11,
        ..EngineConfig::default()
    }
}

fn map_of(c: &EngineConfig) -> Deterministic {
    c.nat44.as_ref().unwrap().deterministic_map().unwrap()
}

fn host(i: u8) -> [u8; 4] {
    [198, 18, 0, i]
}

/// The translated packet's source address and port (ICMP: identifier).
fn outside(p: &[u8]) -> (u32, u16) {
    let addr = u32::from_be_bytes(p[12..16].try_into().unwrap());
    let port = match p[9] {
        1 => u16::from_be_bytes([p[24], p[25]]),
        _ => u16::from_be_bytes([p[20], p[21]]),
    };
    (addr, port)
}

fn packets(h: [u8; 4], port: u16) -> [Vec<u8>; 3] {
    [
        ip4(h, REMOTE, 17, udp(port, 53, &[1; 8]), 64, 0, 1),
        ip4(h, REMOTE, 6, tcp(port, 80, 0x02), 64, 0, 1),
        ip4(h, REMOTE, 1, echo(8, port, 1, &[1; 8]), 64, 0, 1),
    ]
}

#[test]
fn rfc7422_2_each_host_maps_into_its_own_range() {
    let cfg = det(0);
    let d = map_of(&cfg);
    assert_eq!(d.ports_per_host(), 1008);
    let mut e = Engine::new(cfg).unwrap();
    for i in [0u8, 1, 63, 64, 127, 200, 255] {
        let s = d.of_inside(u32::from_be_bytes(host(i))).unwrap();
        // A port inside the host's range is kept (RFC 4787 REQ-3); one outside it is not.
        for (n, port) in [(0u16, s.first + 3), (1, 40_000), (2, 80)] {
            for p in packets(host(i), port) {
                let mut out = p.clone();
                assert_eq!(
                    e.process_vec(Time::from_secs(1), &mut out),
                    Verdict::Forward
                );
                let (addr, ext) = outside(&out);
                assert_eq!(addr, s.addr, "host {i} left from another address");
                assert!(
                    (s.first..=s.last).contains(&ext),
                    "host {i}: {ext} not in {}-{}",
                    s.first,
                    s.last
                );
                if n == 0 {
                    assert_eq!(ext, port, "port preservation inside the range");
                }
                // The lookup names the host from the outside endpoint alone.
                assert_eq!(d.of_outside(addr, ext), Some(u32::from_be_bytes(host(i))));
                let mut back = reply(&out);
                assert!(e.process_vec(Time::from_secs(2), &mut back).transmit());
                assert_eq!(&back[16..20], &host(i), "the reply reaches host {i}");
            }
        }
    }
}

#[test]
fn rfc7422_2_a_full_range_is_the_hosts_quota() {
    let cfg = det(4);
    let d = map_of(&cfg);
    let mut e = Engine::new(cfg).unwrap();
    e.set_events(1024);
    let a = host(5);
    let s = d.of_inside(u32::from_be_bytes(a)).unwrap();
    assert_eq!(s.last - s.first + 1, 4);
    for port in 0..4u16 {
        let mut p = ip4(a, REMOTE, 17, udp(30_000 + port, 53, &[1; 8]), 64, 0, 1);
        assert_eq!(e.process_vec(Time::from_secs(1), &mut p), Verdict::Forward);
    }
    let mut p = ip4(a, REMOTE, 17, udp(30_004, 53, &[1; 8]), 64, 0, 1);
    assert_eq!(
        e.process_vec(Time::from_secs(1), &mut p),
        Verdict::Drop(DropReason::PortQuota)
    );
    assert_eq!(e.stats().get("port_quota"), 1);
    let mut ev: Vec<StateEvent> = Vec::new();
    e.drain_events(&mut ev);
    let quota: Vec<_> = ev
        .iter()
        .filter(|x| x.kind == EventKind::QuotaExceeded)
        .collect();
    assert_eq!(quota.len(), 1, "{ev:?}");
    assert_eq!(quota[0].inside_port, 30_004);
    // Its neighbour, on the same address, still has its whole range; TCP and ICMP of the
    // full host have theirs too (a range per protocol, as ports are).
    let mut p = ip4(host(6), REMOTE, 17, udp(30_000, 53, &[1; 8]), 64, 0, 1);
    assert_eq!(e.process_vec(Time::from_secs(1), &mut p), Verdict::Forward);
    let mut p = ip4(a, REMOTE, 6, tcp(30_004, 80, 0x02), 64, 0, 1);
    assert_eq!(e.process_vec(Time::from_secs(1), &mut p), Verdict::Forward);
    // When a mapping ends, its port is the host's again.
    assert!(e.expire(Time::from_secs(1000), 1000) >= 5);
    let mut p = ip4(a, REMOTE, 17, udp(30_004, 53, &[1; 8]), 64, 0, 1);
    assert_eq!(
        e.process_vec(Time::from_secs(1000), &mut p),
        Verdict::Forward
    );
}

/// With several workers, ports are not sliced by worker: a reply (and an ICMP error
/// quoting the flow) goes to the worker of the host its port belongs to.
#[test]
fn deterministic_return_traffic_finds_the_hosts_worker() {
    for workers in [2usize, 3] {
        let cfg = det(0);
        let shards = Shards::new(&cfg, workers).unwrap();
        let mut engines: Vec<Engine> = (0..workers)
            .map(|k| Engine::new_shard(cfg.clone(), &shards, k).unwrap())
            .collect();
        for i in 0..=255u8 {
            for p in packets(host(i), 1024 + u16::from(i) * 7) {
                let k = shards.of_outbound(&p).unwrap();
                let mut out = p.clone();
                assert_eq!(engines[k].process_vec(Time(1), &mut out), Verdict::Forward);
                let mut back = reply(&out);
                assert_eq!(shards.of_inbound(&back), Some(k), "host {i}");
                assert!(engines[k].process_vec(Time(2), &mut back).transmit());
                let mut quote = out.clone();
                quote.truncate(28);
                let err = ip4(
                    [203, 0, 113, 1],
                    <[u8; 4]>::try_from(&out[12..16]).unwrap(),
                    1,
                    [vec![3, 3, 0, 0, 0, 0, 0, 0], quote].concat(),
                    64,
                    0,
                    1,
                );
                assert_eq!(
                    shards.of_inbound(&err),
                    Some(k),
                    "ICMP error about host {i}"
                );
            }
        }
    }
}

#[test]
fn deterministic_refuses_what_breaks_the_arithmetic() {
    let refuse = |f: &dyn Fn(&mut Nat44Config)| {
        let mut c = det(0);
        f(c.nat44.as_mut().unwrap());
        Engine::new(c).err().expect("refused")
    };
    assert_eq!(
        refuse(&|n| n.mode = Nat44Mode::Pool).key,
        "nat44.deterministic"
    );
    assert_eq!(
        refuse(&|n| n.limits.port_block_size = 512).key,
        "nat44.port_block_size"
    );
    assert_eq!(
        refuse(&|n| n.ports_per_host = 2000).key,
        "nat44.ports_per_host"
    );
    let e = refuse(&|n| n.inside = vec!["10.0.0.0/8".parse().unwrap()]);
    assert_eq!(e.key, "nat44.inside");
    assert!(e.problem.contains("per address"), "{}", e.problem);
    let e = refuse(&|n| {
        n.deterministic = false;
        n.ports_per_host = 100;
    });
    assert_eq!(e.key, "nat44.ports_per_host");
    let e = refuse(&|n| {
        n.forwards = vec![PortForward {
            proto: flow::Proto::Tcp,
            inside: flow::Endpoint {
                addr: u32::from_be_bytes(a4("198.18.0.10")),
                port: 80,
            },
            outside: flow::Endpoint {
                addr: u32::from_be_bytes(a4("198.19.0.1")),
                port: 80,
            },
            count: 1,
        }]
    });
    assert_eq!(e.key, "nat44.static");
}
