//! Deterministic NAT44 (RFC 7422 section 2, `xlat_engine::deterministic`) through the
//! public engine API: every inside host's flows leave from its own outside address and port
//! range, computed from the configuration; a full range is the host's quota; with several
//! workers the return traffic finds the host's worker by the same arithmetic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::{a4, a6, echo, ip4, ip6, reply, tcp, udp};
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

// Deterministic NAT64: RFC 7422 2's arithmetic over IPv6 subscribers (`nat64.inside`,
// `nat64.subscriber_prefix_len`), RFC 6146 3.5.1's allocation within each one's range.

/// 64 subscribers of /64 in 2001:db8:100::/58 on 2 pool4 addresses: 32 share an address,
/// 64,512 / 32 = 2,016 ports each.
fn det64(sub_len: u8) -> EngineConfig {
    EngineConfig {
        nat64: Some(Nat64Config {
            prefix: "2001:db8:64::/96".parse().unwrap(),
            pool4: vec!["198.19.0.100/31".parse().unwrap()],
            deterministic: true,
            inside: vec!["2001:db8:100::/58".parse().unwrap()],
            subscriber_prefix_len: sub_len,
            ..Nat64Config::default()
        }),
        seed: 12,
        ..EngineConfig::default()
    }
}

/// Address `host` of subscriber /64 number `sub` in 2001:db8:100::/58.
fn sub6(sub: u16, host: u16) -> [u8; 16] {
    let mut a = a6("2001:db8:100::");
    a[6..8].copy_from_slice(&sub.to_be_bytes());
    a[14..16].copy_from_slice(&host.to_be_bytes());
    a
}

fn packets6(src: [u8; 16], port: u16) -> [Vec<u8>; 3] {
    let dst = a6("2001:db8:64::203.0.113.9");
    [
        ip6(src, dst, 17, udp(port, 53, &[1; 8]), 64),
        ip6(src, dst, 6, tcp(port, 80, 0x02), 64),
        ip6(src, dst, 58, echo(128, port, 1, &[1; 8]), 64),
    ]
}

#[test]
fn deterministic_nat64_each_subscriber_prefix_maps_into_its_own_range() {
    let cfg = det64(64);
    let d = cfg.nat64.as_ref().unwrap().deterministic_map().unwrap();
    let plan = d.plan();
    assert_eq!((plan.subscribers, plan.per_address), (64, 32));
    assert_eq!(d.ports_per_host(), 2016);
    let mut e = Engine::new(cfg).unwrap();
    for sub in [0u16, 1, 31, 32, 63] {
        let s = d.of_inside6(u128::from_be_bytes(sub6(sub, 1))).unwrap();
        // Two addresses of one /64 are one subscriber: the same address and range.
        for host in [1u16, 0xbeef] {
            for (n, port) in [(0u16, s.first + 5 + host % 7), (1, 40_000), (2, 80)] {
                for p in packets6(sub6(sub, host), port) {
                    let mut out = p.clone();
                    assert_eq!(
                        e.process_vec(Time::from_secs(1), &mut out),
                        Verdict::Forward
                    );
                    let (addr, ext) = outside(&out);
                    assert_eq!(addr, s.addr, "subscriber {sub} left from another address");
                    assert!(
                        (s.first..=s.last).contains(&ext),
                        "subscriber {sub}: {ext} not in {}-{}",
                        s.first,
                        s.last
                    );
                    if n == 0 && host == 1 {
                        assert_eq!(ext, port, "port preservation inside the range");
                    }
                    assert_eq!(
                        d.of_outside_ip(addr, ext),
                        Some(std::net::IpAddr::from(sub6(sub, 0))),
                        "the lookup names the subscriber's /64"
                    );
                    let mut back = reply(&out);
                    assert!(e.process_vec(Time::from_secs(2), &mut back).transmit());
                    assert_eq!(
                        &back[24..40],
                        &sub6(sub, host),
                        "the reply reaches its host"
                    );
                }
            }
        }
    }
    // A source outside nat64.inside has no range: not ours.
    let mut p = packets6(a6("2001:db8:200::1"), 5000)[0].clone();
    assert_eq!(
        e.process_vec(Time::from_secs(1), &mut p),
        Verdict::Drop(DropReason::NotOurs)
    );
}

#[test]
fn deterministic_nat64_a_full_range_is_the_subscribers_quota() {
    let mut cfg = det64(128);
    // /58 of /128 subscribers is 2^70: too many; a /120 is 256, on 2 addresses 252 each.
    cfg.nat64.as_mut().unwrap().inside = vec!["2001:db8:100::/120".parse().unwrap()];
    cfg.nat64.as_mut().unwrap().ports_per_host = 3;
    let mut e = Engine::new(cfg).unwrap();
    e.set_events(1024);
    let a = a6("2001:db8:100::7");
    let dst = a6("2001:db8:64::203.0.113.9");
    for port in 0..3u16 {
        let mut p = ip6(a, dst, 17, udp(30_000 + port, 53, &[1; 8]), 64);
        assert_eq!(e.process_vec(Time::from_secs(1), &mut p), Verdict::Forward);
    }
    // RFC 6146 3.5.1: no port can be allocated -- dropped, answered with an ICMPv6
    // Destination Unreachable (code 3) as for any exhausted pool4.
    let mut p = ip6(a, dst, 17, udp(30_003, 53, &[1; 8]), 64);
    assert_eq!(
        e.process_vec(Time::from_secs(1), &mut p),
        Verdict::Reply(DropReason::PortQuota)
    );
    assert_eq!(
        (p[6], p[40], p[41]),
        (58, 1, 3),
        "ICMPv6 address unreachable"
    );
    let mut ev: Vec<StateEvent> = Vec::new();
    e.drain_events(&mut ev);
    assert_eq!(
        ev.iter()
            .filter(|x| x.kind == EventKind::QuotaExceeded)
            .count(),
        1,
        "{ev:?}"
    );
    // The next address is another subscriber, with its own range.
    let mut p = ip6(a6("2001:db8:100::8"), dst, 17, udp(30_003, 53, &[1; 8]), 64);
    assert_eq!(e.process_vec(Time::from_secs(1), &mut p), Verdict::Forward);
}

/// With several workers, every address of a subscriber goes to one worker (its one range
/// is never taken from by two), and replies and ICMP errors find it by the arithmetic.
#[test]
fn deterministic_nat64_return_traffic_finds_the_subscribers_worker() {
    for workers in [2usize, 3] {
        let cfg = det64(64);
        let shards = Shards::new(&cfg, workers).unwrap();
        let mut engines: Vec<Engine> = (0..workers)
            .map(|k| Engine::new_shard(cfg.clone(), &shards, k).unwrap())
            .collect();
        for sub in 0..64u16 {
            let k0 = shards.of_outbound(&packets6(sub6(sub, 1), 1)[0]).unwrap();
            for host in [1u16, 2, 0x1234] {
                for p in packets6(sub6(sub, host), 2000 + sub * 7 + host) {
                    let k = shards.of_outbound(&p).unwrap();
                    assert_eq!(k, k0, "subscriber {sub}: its addresses on two workers");
                    let mut out = p.clone();
                    assert_eq!(engines[k].process_vec(Time(1), &mut out), Verdict::Forward);
                    let mut back = reply(&out);
                    assert_eq!(shards.of_inbound(&back), Some(k), "subscriber {sub}");
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
                    assert_eq!(shards.of_inbound(&err), Some(k), "error about {sub}");
                }
            }
        }
    }
}

#[test]
fn deterministic_nat64_refuses_what_breaks_the_arithmetic() {
    let refuse = |f: &dyn Fn(&mut Nat64Config)| {
        let mut c = det64(64);
        f(c.nat64.as_mut().unwrap());
        Engine::new(c).err().expect("refused")
    };
    assert_eq!(
        refuse(&|n| n.limits.port_block_size = 512).key,
        "nat64.port_block_size"
    );
    assert_eq!(refuse(&|n| n.inside.clear()).key, "nat64.inside");
    let e = refuse(&|n| n.subscriber_prefix_len = 56);
    assert_eq!(e.key, "nat64.subscriber_prefix_len");
    assert!(e.problem.contains("2001:db8:100::/58"), "{}", e.problem);
    let e = refuse(&|n| n.subscriber_prefix_len = 128);
    assert_eq!(e.key, "nat64.inside");
    assert!(e.problem.contains("2^70"), "{}", e.problem);
    let e = refuse(&|n| n.ports_per_host = 2017);
    assert_eq!(e.key, "nat64.ports_per_host");
    assert!(e.problem.contains("at most 2016"), "{}", e.problem);
    let e = refuse(&|n| {
        n.inside.push("2001:db8:100:20::/59".parse().unwrap());
    });
    assert_eq!(e.key, "nat64.inside");
    assert!(e.problem.contains("overlap"), "{}", e.problem);
    let e = refuse(&|n| {
        n.deterministic = false;
    });
    assert_eq!(e.key, "nat64.inside");
    assert!(e.problem.contains("deterministic = true"), "{}", e.problem);
}
