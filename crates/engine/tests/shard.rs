//! Per-worker shards (xlat_engine::shard): the port slices partition the range, every port
//! has exactly one owner, and the mappings a worker creates come from its slice, so the
//! return traffic finds that worker.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::{a4, a6, echo, frags4, frags6, ip4, ip6, raw4, reply, tcp, udp};
use xlat_engine::shard::{owner, slice, Shards};
use xlat_engine::*;

#[test]
fn slices_partition_the_range_and_owner_agrees() {
    for r in [
        (1024, 65535),
        (0, 65535),
        (1, 1),
        (1000, 1003),
        (40000, 40010),
    ] {
        for w in 1..=8usize {
            let span = usize::from(r.1 - r.0) + 1;
            if span < w {
                assert!(slice(r, w, w - 1).is_none() || slice(r, w, 0).is_none());
                continue;
            }
            // Consecutive, non-empty, covering lo..=hi.
            let mut next = u32::from(r.0);
            for k in 0..w {
                let (a, b) = slice(r, w, k).unwrap();
                assert_eq!(u32::from(a), next, "{r:?} w={w} k={k}");
                assert!(a <= b);
                next = u32::from(b) + 1;
            }
            assert_eq!(next, u32::from(r.1) + 1);
            assert!(slice(r, w, w).is_none());
            // Every port in the range maps to exactly one worker: the one whose slice holds it.
            for p in r.0..=r.1 {
                let k = owner(r, w, p).unwrap();
                let (a, b) = slice(r, w, k).unwrap();
                assert!((a..=b).contains(&p), "{r:?} w={w} port {p} -> {k}");
                let holders = (0..w)
                    .filter(|&j| {
                        let (a, b) = slice(r, w, j).unwrap();
                        (a..=b).contains(&p)
                    })
                    .count();
                assert_eq!(holders, 1);
            }
            if r.0 > 0 {
                assert_eq!(owner(r, w, r.0 - 1), None);
            }
            if r.1 < u16::MAX {
                assert_eq!(owner(r, w, r.1 + 1), None);
            }
        }
    }
}

#[test]
fn too_few_ports_for_the_workers_is_an_error() {
    let cfg = EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["10.0.0.0/8".parse().unwrap()],
            pool: vec!["198.51.100.0/30".parse().unwrap()],
            ports: (2000, 2002),
            ..Nat44Config::default()
        }),
        ..EngineConfig::default()
    };
    assert!(Shards::new(&cfg, 3).is_ok());
    assert_eq!(Shards::new(&cfg, 4).unwrap_err().key, "nat44.ports");
    assert!(Shards::new(&cfg, 0).is_err());
}

fn config() -> EngineConfig {
    EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["10.0.0.0/8".parse().unwrap()],
            pool: vec!["198.51.100.0/30".parse().unwrap()],
            ..Nat44Config::default()
        }),
        nat64: Some(Nat64Config {
            prefix: "64:ff9b::/96".parse().unwrap(),
            pool4: vec!["192.0.2.0/30".parse().unwrap()],
            ports: (20000, 29999),
            ..Nat64Config::default()
        }),
        seed: 9,
        ..EngineConfig::default()
    }
}

fn a4_of(b: &[u8]) -> [u8; 4] {
    b.try_into().unwrap()
}

/// Each worker's NAT44 and NAT64 mappings (TCP, UDP, ICMP echo) take ports and identifiers
/// from its own slice, and `of_inbound` sends their return traffic (and ICMP errors about
/// them) to that worker, which translates it.
#[test]
fn outbound_flows_of_worker_k_map_back_to_k() {
    for workers in [1usize, 2, 3, 4] {
        let shards = Shards::new(&config(), workers).unwrap();
        let mut used = vec![0u32; workers];
        let mut engines: Vec<Engine> = (0..workers)
            .map(|k| Engine::new_shard(config(), &shards, k).unwrap())
            .collect();
        for i in 0..200u32 {
            let h4 = [10, 1, (i >> 8) as u8, i as u8];
            let mut h6 = a6("2001:db8::");
            h6[12..].copy_from_slice(&i.to_be_bytes());
            let port = 1024 + (i * 37 % 50000) as u16;
            let pkts = [
                ip4(h4, a4("8.8.8.8"), 17, udp(port, 53, &[1; 8]), 64, 0, 1),
                ip4(h4, a4("8.8.8.8"), 6, tcp(port, 80, 0x02), 64, 0, 1),
                ip4(h4, a4("8.8.8.8"), 1, echo(8, port, 1, &[1; 8]), 64, 0, 1),
                ip6(h6, a6("64:ff9b::808:808"), 17, udp(port, 53, &[1; 8]), 64),
                ip6(h6, a6("64:ff9b::808:808"), 6, tcp(port, 80, 0x02), 64),
                ip6(
                    h6,
                    a6("64:ff9b::808:808"),
                    58,
                    echo(128, port, 1, &[1; 8]),
                    64,
                ),
            ];
            for p in pkts {
                let k = shards.of_outbound(&p).unwrap();
                assert!(k < workers);
                used[k] += 1;
                let v6 = p[0] >> 4 == 6;
                let mut out = p.clone();
                assert_eq!(engines[k].process_vec(Time(1), &mut out), Verdict::Forward);
                // The outside port / identifier is in worker k's slice.
                let ext = if out[9] == 1 {
                    u16::from_be_bytes([out[24], out[25]])
                } else {
                    u16::from_be_bytes([out[20], out[21]])
                };
                let (lo, hi) = match (out[9], v6) {
                    (1, _) => shards.icmp_slice(k),
                    (_, false) => shards.nat44_slice(k).unwrap(),
                    (_, true) => shards.nat64_slice(k).unwrap(),
                };
                assert!(
                    (lo..=hi).contains(&ext),
                    "worker {k}/{workers}: {ext} not in {lo}-{hi}"
                );
                // The reply finds worker k, and worker k translates it.
                let mut back = reply(&out);
                assert_eq!(shards.of_inbound(&back), Some(k));
                assert!(engines[k].process_vec(Time(2), &mut back).transmit());
                // So does an ICMP error quoting the translated packet.
                let mut quote = out.clone();
                quote.truncate(28);
                let err = ip4(
                    a4("8.8.4.4"),
                    a4_of(&out[12..16]),
                    1,
                    [vec![3, 3, 0, 0, 0, 0, 0, 0], quote].concat(),
                    64,
                    0,
                    1,
                );
                assert_eq!(shards.of_inbound(&err), Some(k));
            }
        }
        assert!(used.iter().all(|&u| u > 0), "{used:?}");
    }
}

#[test]
fn packets_without_a_port_have_no_owner() {
    let shards = Shards::new(&config(), 2).unwrap();
    // A later fragment, another protocol, garbage.
    let frag = ip4(
        a4("8.8.8.8"),
        a4("198.51.100.1"),
        17,
        vec![0; 16],
        64,
        0x0010,
        5,
    );
    assert_eq!(shards.of_inbound(&frag), None);
    let gre = ip4(a4("8.8.8.8"), a4("198.51.100.1"), 47, vec![0; 16], 64, 0, 5);
    assert_eq!(shards.of_inbound(&gre), None);
    for junk in [&[][..], &[0x45][..], &[0x45, 0, 0, 20][..], &[0x60; 10][..]] {
        assert_eq!(shards.of_inbound(junk), None);
        let _ = shards.of_outbound(junk);
    }
    // Truncated after a valid header: no port to read.
    let mut t = ip4(
        a4("8.8.8.8"),
        a4("198.51.100.1"),
        17,
        udp(53, 2000, &[]),
        64,
        0,
        1,
    );
    t.truncate(21);
    assert_eq!(shards.of_inbound(&t), None);
}

use xlat_engine::shard::{FragId, Owner};
use xlat_engine::tunnel::{IsatapConfig, IsatapRole, SixToFourConfig, TunnelConfig};

/// Every translator at once: NAPT with a static entry, NAT64, SIIT (its own pref64 and an
/// EAM entry) and a 6to4 endpoint.
fn all_config() -> EngineConfig {
    let mut c = config();
    if let Some(n) = c.nat44.as_mut() {
        n.statics = vec![StaticEntry {
            inside: "10.9.9.9".parse().unwrap(),
            outside: "203.0.113.200".parse().unwrap(),
        }];
    }
    c.siit = Some(SiitConfig {
        prefix: Some("2001:db8:64::/96".parse().unwrap()),
        eam: vec![Eam {
            ipv4: "198.18.5.0/24".parse().unwrap(),
            ipv6: "2001:db8:5::/120".parse().unwrap(),
        }],
        ..SiitConfig::default()
    });
    c.tunnel = Some(TunnelConfig {
        sixtofour: Some(SixToFourConfig {
            ipv4: "203.0.113.1".parse().unwrap(),
            relay: None,
            relay_router: false,
            params: Default::default(),
        }),
        isatap: None,
    });
    c
}

/// The id of an IPv4 fragment as the owner function names it.
fn frag_id(p: &[u8]) -> FragId {
    FragId::V4 {
        src: u32::from_be_bytes(a4_of(&p[12..16])),
        dst: u32::from_be_bytes(a4_of(&p[16..20])),
        proto: p[9],
        ident: u16::from_be_bytes([p[4], p[5]]),
    }
}

/// `Shards::owner` for every kind of packet: outbound by source (fragments too), inbound by
/// port / identifier / the quoted packet, inbound fragments by their first fragment,
/// stateless translators anywhere except their fragments, which meet by source.
#[test]
fn owner_places_every_packet_kind() {
    let cfg = all_config();
    for workers in [1usize, 2, 3, 8] {
        let s = Shards::new(&cfg, workers).unwrap();
        let by_src = |p: &[u8]| Owner::Worker(s.of_outbound(p).unwrap());
        for i in 0..64u16 {
            let h4 = [10, 1, 0, i as u8];
            let mut h6 = a6("2001:db8:1::");
            h6[14..].copy_from_slice(&i.to_be_bytes());
            let port = 1024 + i * 977;
            // Outbound IPv4 (NAT44) and IPv6 (NAT64): by source, fragments included.
            for p in [
                ip4(h4, a4("8.8.8.8"), 17, udp(port, 53, &[1; 8]), 64, 0, 1),
                ip4(h4, a4("8.8.8.8"), 6, tcp(port, 80, 0x10), 64, 0, 1),
                ip4(h4, a4("8.8.8.8"), 1, echo(8, port, 1, &[1; 8]), 64, 0, 1),
                ip6(h6, a6("64:ff9b::808:808"), 17, udp(port, 53, &[1; 8]), 64),
                ip6(
                    h6,
                    a6("64:ff9b::808:808"),
                    58,
                    echo(128, port, 1, &[1; 8]),
                    64,
                ),
            ] {
                assert_eq!(s.owner(&p), by_src(&p));
            }
            let payload = udp(port, 53, &[2; 40]);
            let v4 = frags4(h4, a4("8.8.8.8"), 17, payload.clone(), i, &[16, 16, 16]);
            let v6 = frags6(h6, a6("64:ff9b::808:808"), 17, payload, 7, &[16, 32]);
            for f in v4.into_iter().chain(v6) {
                assert_eq!(s.owner(&f), by_src(&f));
            }
            // Inbound to the NAT44 pool and NAT64's pool4: by port, identifier, quote.
            for pool in [a4("198.51.100.1"), a4("192.0.2.2")] {
                let ports = if pool[0] == 192 {
                    20000 + i * 150
                } else {
                    port
                };
                let u = ip4(a4("8.8.8.8"), pool, 17, udp(53, ports, &[1; 8]), 64, 0, 1);
                let t = ip4(a4("8.8.8.8"), pool, 6, tcp(80, ports, 0x12), 64, 0, 1);
                let e = ip4(a4("8.8.8.8"), pool, 1, echo(0, port, 1, &[1; 8]), 64, 0, 1);
                for p in [&u, &t, &e] {
                    let k = s.of_inbound(p).unwrap();
                    assert!(k < workers);
                    assert_eq!(s.owner(p), Owner::Worker(k));
                }
                // An ICMP error about a packet that left from the mapping.
                let out = ip4(pool, a4("8.8.8.8"), 17, udp(ports, 53, &[1; 8]), 64, 0, 1);
                let err = ip4(
                    a4("8.8.4.4"),
                    pool,
                    1,
                    [vec![3, 3, 0, 0, 0, 0, 0, 0], out[..28].to_vec()].concat(),
                    64,
                    0,
                    1,
                );
                assert_eq!(s.owner(&err), Owner::Worker(s.of_inbound(&u).unwrap()));
                // A fragmented reply: the first fragment names the worker and the datagram,
                // the later ones only the datagram.
                let fr = frags4(
                    a4("8.8.8.8"),
                    pool,
                    17,
                    udp(53, ports, &[3; 40]),
                    900 + i,
                    &[16, 16, 16],
                );
                let id = frag_id(&fr[0]);
                assert_eq!(
                    s.owner(&fr[0]),
                    Owner::FirstFragment {
                        worker: s.of_inbound(&u).unwrap(),
                        id
                    }
                );
                for f in &fr[1..] {
                    assert_eq!(s.owner(f), Owner::LaterFragment(id));
                }
                let fe = frags4(
                    a4("8.8.8.8"),
                    pool,
                    1,
                    echo(0, port, 1, &[4; 40]),
                    77,
                    &[24, 24],
                );
                assert!(
                    matches!(s.owner(&fe[0]), Owner::FirstFragment { worker, .. } if worker == s.of_inbound(&e).unwrap())
                );
                assert_eq!(s.owner(&fe[1]), Owner::LaterFragment(frag_id(&fe[1])));
            }
            // Static NAT44: from the static host by source (it is inside), to its outside
            // address anywhere (no state), fragments too.
            let st = ip4(
                a4("8.8.8.8"),
                a4("203.0.113.200"),
                17,
                udp(53, port, &[1; 8]),
                64,
                0,
                1,
            );
            assert_eq!(s.owner(&st), Owner::Any);
            for f in frags4(
                a4("8.8.8.8"),
                a4("203.0.113.200"),
                17,
                udp(53, port, &[1; 40]),
                5,
                &[16, 32],
            ) {
                assert_eq!(s.owner(&f), Owner::Any);
            }
            let from_static = ip4(a4("10.9.9.9"), a4("8.8.8.8"), 47, vec![0; 8], 64, 0, 1);
            assert_eq!(s.owner(&from_static), by_src(&from_static));
            // SIIT: unfragmented anywhere; fragments (IPv4 and IPv6, also after another
            // extension header) by source, so an ICMP message's fragments meet.
            let eam4 = [198, 18, 5, i as u8];
            let v4 = ip4(eam4, a4("8.8.8.8"), 17, udp(port, 53, &[1; 8]), 64, 0, 1);
            let to_eam = ip4(a4("8.8.8.8"), eam4, 17, udp(53, port, &[1; 8]), 64, 0, 1);
            assert_eq!(s.owner(&to_eam), Owner::Any);
            let _ = v4;
            let fr = frags4(
                a4("8.8.8.8"),
                eam4,
                1,
                echo(8, port, 1, &[5; 40]),
                3,
                &[16, 32],
            );
            for f in &fr {
                assert_eq!(s.owner(f), by_src(f));
            }
            let mut eam6 = a6("2001:db8:5::");
            eam6[15] = i as u8;
            let to6 = ip6(h6, eam6, 17, udp(port, 53, &[1; 8]), 64);
            assert_eq!(s.owner(&to6), Owner::Any);
            let to_pref = ip6(
                h6,
                a6("2001:db8:64::808:808"),
                58,
                echo(128, port, 1, &[1; 8]),
                64,
            );
            assert_eq!(s.owner(&to_pref), Owner::Any);
            for f in frags6(h6, eam6, 58, echo(128, port, 1, &[6; 40]), 9, &[16, 32]) {
                assert_eq!(s.owner(&f), by_src(&f));
                // The same fragment behind a Destination Options header.
                let mut d = f[..40].to_vec();
                d[6] = 60;
                d.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
                d.extend_from_slice(&f[40..]);
                let plen = (d.len() - 40) as u16;
                d[4..6].copy_from_slice(&plen.to_be_bytes());
                assert_eq!(s.owner(&d), by_src(&d));
            }
            // 6to4: protocol 41 to the endpoint anywhere; its fragments by source (the
            // endpoint reassembles them); IPv6 into the tunnel anywhere.
            let udp6 = |src: &str, dst: &str| ip6(a6(src), a6(dst), 17, udp(1, 2, &[0; 8]), 64);
            let inner = udp6("2002:c000:201::1", "2002:cb00:7101::1");
            // Protocol 41 to the endpoint with this flags/offset word.
            let p41 = |payload: &[u8], ff: u16| {
                raw4(
                    a4("192.0.2.99"),
                    a4("203.0.113.1"),
                    41,
                    payload,
                    64,
                    ff,
                    i,
                    0,
                )
            };
            assert_eq!(s.owner(&p41(&inner, 0)), Owner::Any);
            let first41 = p41(&inner[..24], 0x2000);
            assert_eq!(s.owner(&first41), by_src(&first41));
            let later41 = p41(&inner[24..], 3);
            assert_eq!(s.owner(&later41), by_src(&later41));
            let encap = udp6("2002:cb00:7101::5", "2002:c000:201::1");
            assert_eq!(s.owner(&encap), Owner::Any);
            // Nobody's: dropped by whichever engine reads it.
            let stray4 = ip4(
                a4("198.51.100.77"),
                a4("198.51.100.78"),
                17,
                udp(1, 2, &[0; 8]),
                64,
                0,
                1,
            );
            let stray6 = udp6("2001:db8:9::1", "2001:db8:9::2");
            assert_eq!(s.owner(&stray4), Owner::Any);
            assert_eq!(s.owner(&stray6), Owner::Any);
        }
    }
}

/// Truncated and hostile input: `owner` never panics and never names a worker that does
/// not exist; a packet cut before its addresses or port is anyone's.
#[test]
fn owner_of_garbage_and_truncated_packets() {
    let s = Shards::new(&all_config(), 3).unwrap();
    let samples = [
        ip4(
            a4("10.1.0.1"),
            a4("8.8.8.8"),
            17,
            udp(1, 53, &[1; 8]),
            64,
            0,
            1,
        ),
        ip4(
            a4("8.8.8.8"),
            a4("198.51.100.1"),
            17,
            udp(53, 2000, &[1; 8]),
            64,
            0,
            1,
        ),
        ip4(
            a4("8.8.8.8"),
            a4("198.51.100.1"),
            1,
            [vec![3, 3, 0, 0, 0, 0, 0, 0], vec![0x45; 28]].concat(),
            64,
            0,
            1,
        ),
        ip4(
            a4("8.8.8.8"),
            a4("192.0.2.1"),
            17,
            udp(53, 20000, &[1; 8]),
            64,
            0x2000,
            1,
        ),
        ip6(
            a6("2001:db8::1"),
            a6("64:ff9b::808:808"),
            17,
            udp(1, 53, &[1; 8]),
            64,
        ),
        frags6(
            a6("2001:db8::1"),
            a6("2001:db8:5::1"),
            17,
            udp(1, 53, &[1; 16]),
            1,
            &[8, 16],
        )
        .remove(0),
    ];
    for p in &samples {
        for n in 0..=p.len() {
            match s.owner(&p[..n]) {
                Owner::Worker(k) | Owner::FirstFragment { worker: k, .. } => assert!(k < 3),
                Owner::LaterFragment(_) | Owner::Any => {}
            }
        }
    }
    assert_eq!(s.owner(&[]), Owner::Any);
    assert_eq!(s.owner(&[0x45; 19]), Owner::Any);
    assert_eq!(s.owner(&[0x60; 39]), Owner::Any);
    assert_eq!(s.owner(&[0x10; 64]), Owner::Any);
    // An IHL of 0 or 15 with a short packet, an ICMP error quoting nothing: no panic.
    let mut p = samples[2].clone();
    p[0] = 0x4f;
    let _ = s.owner(&p);
    p[0] = 0x40;
    let _ = s.owner(&p);
    // Random bytes behind each version nibble.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let mut b = vec![0u8; (x % 120) as usize];
        for v in b.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *v = x as u8;
        }
        if let Some(f) = b.first_mut() {
            *f = if x & 1 == 0 { 0x45 } else { 0x60 | (*f & 0x0f) };
        }
        match s.owner(&b) {
            Owner::Worker(k) | Owner::FirstFragment { worker: k, .. } => assert!(k < 3),
            _ => {}
        }
    }
}

/// What cannot be split by port is refused with more than one worker, naming the key.
#[test]
fn pool_mode_and_isatap_run_on_one_worker_only() {
    let mut pool = config();
    if let Some(n) = pool.nat44.as_mut() {
        n.mode = Nat44Mode::Pool;
    }
    assert!(Shards::new(&pool, 1).is_ok());
    assert_eq!(Shards::new(&pool, 2).unwrap_err().key, "nat44.mode");
    let mut isatap = config();
    isatap.tunnel = Some(TunnelConfig {
        sixtofour: None,
        isatap: Some(IsatapConfig {
            ipv4: "203.0.113.2".parse().unwrap(),
            role: IsatapRole::Host {
                routers: vec!["203.0.113.3".parse().unwrap()],
            },
            params: Default::default(),
        }),
    });
    assert!(Shards::new(&isatap, 1).is_ok());
    assert_eq!(Shards::new(&isatap, 4).unwrap_err().key, "tunnel.isatap");
    assert_eq!(Shards::new(&config(), 65).unwrap_err().key, "workers");
}

/// A static BIB entry's outside endpoint belongs to its inside host's worker, whatever
/// slice its port is in: the inbound packet goes where the host's outbound packets go, and
/// that worker translates it, for NAT44 and NAT64 alike, with 4 workers.
#[test]
fn forwarded_ports_go_to_the_inside_hosts_worker() {
    let mut cfg = config();
    let n = cfg.nat44.as_mut().unwrap();
    n.forwards = vec![PortForward {
        proto: flow::Proto::Tcp,
        inside: flow::Endpoint {
            addr: u32::from_be_bytes(a4("10.0.0.7")),
            port: 8080,
        },
        outside: flow::Endpoint {
            addr: u32::from_be_bytes(a4("198.51.100.1")),
            port: 80,
        },
        count: 1,
    }];
    let n6 = cfg.nat64.as_mut().unwrap();
    n6.static_bib = vec![PortForward {
        proto: flow::Proto::Udp,
        inside: flow::Endpoint {
            addr: u128::from_be_bytes(a6("2001:db8::5")),
            port: 2000,
        },
        outside: flow::Endpoint {
            addr: u32::from_be_bytes(a4("192.0.2.1")),
            port: 2000,
        },
        count: 1,
    }];
    let s = Shards::new(&cfg, 4).unwrap();
    let out44 = ip4(
        a4("10.0.0.7"),
        a4("203.0.113.9"),
        6,
        tcp(8080, 1, 0x12),
        64,
        0,
        1,
    );
    let in44 = ip4(
        a4("203.0.113.9"),
        a4("198.51.100.1"),
        6,
        tcp(1, 80, 0x02),
        64,
        0,
        1,
    );
    assert_eq!(s.of_inbound(&in44), s.of_outbound(&out44));
    let out64 = ip6(
        a6("2001:db8::5"),
        a6("64:ff9b::cb00:7109"),
        17,
        udp(2000, 1, b"x"),
        64,
    );
    let in64 = ip4(
        a4("203.0.113.9"),
        a4("192.0.2.1"),
        17,
        udp(1, 2000, b"x"),
        64,
        0,
        1,
    );
    assert_eq!(s.of_inbound(&in64), s.of_outbound(&out64));
    // Port 80 lies in no NAT44 slice (1024-65535): without the entry it would be nobody's.
    let other = ip4(
        a4("203.0.113.9"),
        a4("198.51.100.1"),
        6,
        tcp(1, 81, 0x02),
        64,
        0,
        1,
    );
    assert_eq!(s.of_inbound(&other), None);
    // And that worker's engine translates it.
    let w = s.of_inbound(&in44).unwrap();
    let mut engines: Vec<Engine> = (0..4)
        .map(|k| Engine::new_shard(cfg.clone(), &s, k).unwrap())
        .collect();
    let mut p = in44.clone();
    let v = engines[w].process_vec(Time::from_secs(1), &mut p);
    assert_eq!(v, Verdict::Forward);
}
