//! Hostile input: arbitrary bytes and mutated valid packets never panic, and every packet
//! gets exactly one outcome that is counted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use xlat_engine::*;

fn engine() -> Engine {
    let cfg = Nat44Config {
        inside: vec!["198.18.0.0/24".parse().unwrap()],
        pool: vec!["198.19.0.100/32".parse().unwrap()],
        statics: vec![StaticEntry {
            inside: "198.18.0.10".parse().unwrap(),
            outside: "198.19.0.10".parse().unwrap(),
        }],
        verify_ip_checksum: false,
        ..Nat44Config::default()
    };
    Engine::new(EngineConfig {
        nat44: Some(cfg),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn seed_packet(proto: u8, src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 48, 0, 1, 0, 0, 64, proto, 0, 0];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&[0u8; 28]);
    p
}

fn outcome_counted(e: &Engine) -> bool {
    let c = e.counters();
    let out = c.count(Event::PacketsOut);
    let held = c.count(Event::FragmentsHeld);
    c.count(Event::PacketsIn) <= out + c.total_drops() + held
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut e = engine();
        let mut buf = data.clone();
        let mut pb = PacketBuf::whole(&mut buf);
        let v = e.process(Time::from_secs(1), &mut pb);
        if v == Verdict::Forward { prop_assert!(pb.len() <= data.len()); }
        prop_assert!(outcome_counted(&e));
        e.expire(Time::from_secs(1000), 10);
    }

    /// Valid-looking headers with fuzzed bodies and fields reach deep into the translator.
    #[test]
    fn mutated_packets_never_panic(proto in prop::sample::select(vec![1u8, 6, 17, 47]),
                                   dir in 0u8..3,
                                   flips in proptest::collection::vec((0usize..48, any::<u8>()), 0..12),
                                   cut in 20usize..48) {
        let mut e = engine();
        let (src, dst) = match dir {
            0 => ([198, 18, 0, 20], [198, 19, 0, 2]),
            1 => ([198, 19, 0, 2], [198, 19, 0, 100]),
            _ => ([198, 18, 0, 10], [198, 19, 0, 10]),
        };
        // open a session first so inbound and ICMP-error paths find state
        let mut open = seed_packet(proto, [198, 18, 0, 20], [198, 19, 0, 2]);
        e.process_vec(Time::from_secs(0), &mut open);
        let mut p = seed_packet(proto, src, dst);
        for (i, v) in flips {
            if i >= 9 { if let Some(b) = p.get_mut(i) { *b = v; } }
        }
        p.truncate(cut);
        e.process_vec(Time::from_secs(1), &mut p);
        while e.pop_ready().is_some() {}
        prop_assert!(outcome_counted(&e));
    }
}

/// An engine with every translator: NAT44 (above), NAT64 on 2001:2:0:64::/96 with pool4
/// 198.19.0.101, SIIT on 2001:2:0:46::/96 with an EAM entry and pool4.
fn engine46() -> Engine {
    let n44 = Nat44Config {
        inside: vec!["198.18.0.0/24".parse().unwrap()],
        pool: vec!["198.19.0.100/32".parse().unwrap()],
        verify_ip_checksum: false,
        ..Nat44Config::default()
    };
    Engine::new(EngineConfig {
        nat44: Some(n44),
        nat64: Some(Nat64Config {
            prefix: "2001:2:0:64::/96".parse().unwrap(),
            pool4: vec!["198.19.0.101/32".parse().unwrap()],
            verify_ip_checksum: false,
            filtering: Filtering::EndpointIndependent,
            ..Nat64Config::default()
        }),
        siit: Some(SiitConfig {
            prefix: Some("2001:2:0:46::/96".parse().unwrap()),
            eam: vec![Eam {
                ipv4: "198.19.1.0/28".parse().unwrap(),
                ipv6: "2001:2:0:6::/124".parse().unwrap(),
            }],
            pool4: vec!["203.0.113.0/24".parse().unwrap()],
            rfc6791: Some("192.0.2.1/32".parse().unwrap()),
            ..SiitConfig::default()
        }),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn v6(src: [u8; 16], dst: [u8; 16], nh: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(body.len() as u16).to_be_bytes());
    p.extend_from_slice(&[nh, 64]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(body);
    p
}

fn addr6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// A valid-looking IPv6 packet of a kind the translators treat differently.
fn seed6(kind: u8, dst: [u8; 16]) -> Vec<u8> {
    let src = addr6("2001:2:0:6::5");
    let udp = [0x13, 0x88, 0, 53, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    match kind {
        0 => v6(src, dst, 17, &udp),
        1 => v6(
            src,
            dst,
            6,
            &[
                0x13, 0x88, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 2, 0xff, 0xff, 0, 0, 0, 0,
            ],
        ),
        2 => v6(src, dst, 58, &[128, 0, 0, 0, 0, 7, 0, 1, 9, 9, 9, 9]),
        3 => {
            // ICMPv6 error quoting a UDP packet from the pref64 side.
            let mut e = vec![1, 4, 0, 0, 0, 0, 0, 0];
            e.extend_from_slice(&v6(dst, src, 17, &udp));
            v6(src, dst, 58, &e)
        }
        4 => {
            // Fragment header (first fragment, more follow) then UDP.
            let mut f = vec![17, 0, 0, 1, 0, 0, 0, 9];
            f.extend_from_slice(&udp);
            v6(src, dst, 44, &f)
        }
        5 => {
            // Hop-by-hop, routing (segments left 1), destination options, UDP.
            let mut b = vec![43, 0, 1, 4, 0, 0, 0, 0];
            b.extend_from_slice(&[60, 0, 0, 1, 0, 0, 0, 0]);
            b.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
            b.extend_from_slice(&udp);
            v6(src, dst, 0, &b)
        }
        _ => {
            // Later fragment of an ICMPv6 message.
            let mut f = vec![58, 0, 0, 0x18, 0, 0, 0, 9];
            f.extend_from_slice(&[7; 24]);
            v6(src, dst, 44, &f)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Arbitrary bytes behind an IPv6 version nibble never panic the IPv6 translators.
    #[test]
    fn arbitrary_ipv6_bytes_never_panic(mut data in proptest::collection::vec(any::<u8>(), 0..300),
                                        to in 0u8..3) {
        let mut e = engine46();
        if let Some(b) = data.get_mut(0) { *b = 0x60 | (*b & 0x0f); }
        let dst = match to { 0 => addr6("2001:2:0:64::c613:2"), 1 => addr6("2001:2:0:46::cb00:7101"), _ => addr6("2001:2:0:6::3") };
        if data.len() >= 40 { data[24..40].copy_from_slice(&dst); }
        let mut p = data.clone();
        e.process_vec(Time::from_secs(1), &mut p);
        while e.pop_ready().is_some() {}
        prop_assert!(outcome_counted(&e));
        e.expire(Time::from_secs(1000), 10);
    }

    /// Mutated valid IPv6 packets (and the IPv4 answers to them) reach deep into NAT64 and
    /// SIIT without panicking, and every packet is counted.
    #[test]
    fn mutated_ipv6_packets_never_panic(kind in 0u8..7, to in 0u8..3,
                                        flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..12),
                                        cut in 40usize..120,
                                        reply_flips in proptest::collection::vec((0usize..80, any::<u8>()), 0..6)) {
        let mut e = engine46();
        let dst = match to { 0 => addr6("2001:2:0:64::c613:2"), 1 => addr6("2001:2:0:46::cb00:7101"), _ => addr6("2001:2:0:46::c613:103") };
        // A clean packet first, so sessions and fragment state exist.
        let mut open = seed6(kind, dst);
        e.process_vec(Time::from_secs(0), &mut open);
        let mut p = seed6(kind, dst);
        for (i, v) in flips {
            if i >= 4 { if let Some(b) = p.get_mut(i) { *b = v; } }
        }
        p.truncate(cut);
        let mut out = p.clone();
        let v = e.process_vec(Time::from_secs(1), &mut out);
        // Whatever came out goes back in, mutated (an answer from the other side).
        if v.transmit() {
            for (i, x) in reply_flips {
                if i >= 9 { if let Some(b) = out.get_mut(i) { *b = x; } }
            }
            e.process_vec(Time::from_secs(2), &mut out);
        }
        while e.pop_ready().is_some() {}
        prop_assert!(outcome_counted(&e));
        e.expire(Time::from_secs(1000), 100);
        prop_assert!(outcome_counted(&e));
    }

    /// IPv4 packets to NAT64's pool4 and SIIT's addresses, mutated.
    #[test]
    fn mutated_ipv4_to_ipv6_translators_never_panic(proto in prop::sample::select(vec![1u8, 6, 17, 47]),
                                                    to in 0u8..2, df in any::<bool>(), mf in any::<bool>(),
                                                    flips in proptest::collection::vec((0usize..48, any::<u8>()), 0..12),
                                                    cut in 20usize..48) {
        let mut e = engine46();
        let dst = if to == 0 { [198, 19, 0, 101] } else { [198, 19, 1, 3] };
        let mut open = v6(addr6("2001:2:0:1::10"), addr6("2001:2:0:64::c613:2"), 17,
                          &[0x13, 0x88, 0, 53, 0, 8, 0, 0]);
        e.process_vec(Time::from_secs(0), &mut open);
        let mut p = seed_packet(proto, [198, 19, 0, 2], dst);
        let ff: u16 = if df { 0x4000 } else { 0 } | if mf { 0x2000 } else { 0 };
        p[6..8].copy_from_slice(&ff.to_be_bytes());
        p[8] = 64;
        for (i, v) in flips {
            if i >= 9 { if let Some(b) = p.get_mut(i) { *b = v; } }
        }
        p.truncate(cut);
        e.process_vec(Time::from_secs(1), &mut p);
        while e.pop_ready().is_some() {}
        prop_assert!(outcome_counted(&e));
    }
}

/// A UDP (`tcp` false) or TCP ACK packet, ports 5000 -> 53 / 80, 8 bytes of payload.
fn l4(tcp: bool) -> Vec<u8> {
    if tcp {
        let mut t = vec![
            0x13, 0x88, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff,
        ];
        t.extend_from_slice(&[0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        t
    } else {
        vec![0x13, 0x88, 0, 53, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    }
}

fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    p[2..4].copy_from_slice(&((20 + body.len()) as u16).to_be_bytes());
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(body);
    p
}

/// A packet of one of the kinds the batch lanes see: NAT44 out (0) and in (1), NAT64 6->4
/// (2: UDP, TCP, ICMPv6, errors, fragments, extension headers) and 4->6 (3), UDP or TCP
/// (`kind` picks), of the flows `open_flows` opened; SIIT 6->4 (4) and 4->6 (5) between an
/// EAM host and an IPv4 host (its header checksum right, as SIIT always verifies it).
fn batch_packet(family: u8, kind: u8) -> Vec<u8> {
    let tcp = kind % 2 == 1;
    let proto = if tcp { 6 } else { 17 };
    let reply = |mut b: Vec<u8>| {
        b.swap(0, 2);
        b.swap(1, 3);
        b
    };
    match family {
        0 => v4([198, 18, 0, 20], [198, 19, 0, 2], proto, &l4(tcp)),
        1 => v4([198, 19, 0, 2], [198, 19, 0, 100], proto, &reply(l4(tcp))),
        2 if kind < 2 => v6(
            addr6("2001:2:0:1::10"),
            addr6("2001:2:0:64::c613:2"),
            proto,
            &l4(tcp),
        ),
        2 => seed6(kind, addr6("2001:2:0:64::c613:2")),
        3 => v4([198, 19, 0, 2], [198, 19, 0, 101], proto, &reply(l4(tcp))),
        4 => v6(
            addr6("2001:2:0:6::3"),
            addr6("2001:2:0:46::c633:6401"),
            proto,
            &l4(tcp),
        ),
        _ => {
            let mut p = v4([198, 51, 100, 1], [198, 19, 1, 3], proto, &reply(l4(tcp)));
            let c = xlat_wire::checksum::checksum(&p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            p
        }
    }
}

/// Opens the NAT44 and NAT64 UDP and TCP flows the batch packets belong to (TCP with a SYN
/// each way, so the sessions are established).
fn open_flows(e: &mut Engine) {
    let syn = |b: Vec<u8>| {
        let mut b = b;
        b[13] = 0x02;
        b
    };
    let synack = |b: Vec<u8>| {
        let mut b = b;
        b[13] = 0x12;
        b
    };
    for tcp in [false, true] {
        let proto = if tcp { 6 } else { 17 };
        let mut out44 = l4(tcp);
        let mut out64 = l4(tcp);
        if tcp {
            out44 = syn(out44);
            out64 = syn(out64);
        }
        let mut p = v4([198, 18, 0, 20], [198, 19, 0, 2], proto, &out44);
        e.process_vec(Time::from_secs(0), &mut p);
        let mut p = v6(
            addr6("2001:2:0:1::10"),
            addr6("2001:2:0:64::c613:2"),
            proto,
            &out64,
        );
        e.process_vec(Time::from_secs(0), &mut p);
        if tcp {
            for family in [1, 3] {
                let mut back = batch_packet(family, 1);
                let t = synack(back[20..].to_vec());
                back[20..].copy_from_slice(&t);
                e.process_vec(Time::from_secs(0), &mut back);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Mutated packets of every kind in batches: `Engine::process_batch` -- whose lanes parse
    /// the untrusted bytes with their own minimal parsers -- gives each packet the verdict,
    /// the bytes and the counts `Engine::process` gives it one at a time, leaves the same
    /// sessions, and never panics. Headroom varies as the drivers' can.
    #[test]
    fn mutated_batches_translate_as_packet_by_packet(
        pkts in proptest::collection::vec(
            (0u8..6, 0u8..7, proptest::collection::vec((1usize..80, any::<u8>()), 0..6),
             0usize..8, 0u8..4),
            1..40),
        later in 0u64..400)
    {
        let (mut a, mut b) = (engine46(), engine46());
        open_flows(&mut a);
        open_flows(&mut b);
        let now = Time::from_secs(1 + later);
        let mut batch = Vec::new();
        let mut heads = Vec::new();
        for (family, kind, flips, cut, head) in &pkts {
            let mut p = batch_packet(*family, *kind);
            for &(i, v) in flips {
                if let Some(x) = p.get_mut(i) { *x = v; }
            }
            // Most packets whole, some cut short.
            if *cut < 3 { let keep = p.len().saturating_sub(cut * 7); p.truncate(keep); }
            batch.push(p);
            heads.push(match head { 0 => 0, 1 => 19, 2 => 20, _ => HEADROOM });
        }
        let mut one_by_one = Vec::new();
        for (p, &head) in batch.iter().zip(&heads) {
            let mut room = vec![0u8; head + p.len() + HEADROOM];
            room[head..head + p.len()].copy_from_slice(p);
            let mut pb = PacketBuf::new(&mut room, head, p.len()).unwrap();
            let v = a.process(now, &mut pb);
            one_by_one.push((v, pb.data().to_vec()));
        }
        let mut rooms: Vec<Vec<u8>> = batch.iter().zip(&heads).map(|(p, &head)| {
            let mut room = vec![0u8; head + p.len() + HEADROOM];
            room[head..head + p.len()].copy_from_slice(p);
            room
        }).collect();
        let mut pbs: Vec<PacketBuf> = rooms.iter_mut().zip(batch.iter().zip(&heads))
            .map(|(room, (p, &head))| PacketBuf::new(room, head, p.len()).unwrap())
            .collect();
        let mut vs = vec![Verdict::Held; pbs.len()];
        b.process_batch(now, &mut pbs, &mut vs);
        for (i, ((va, da), (vb, pb))) in one_by_one.iter().zip(vs.iter().zip(&pbs)).enumerate() {
            prop_assert_eq!(va, vb, "verdict of packet {}: {:02x?}", i, batch[i]);
            if va.transmit() {
                prop_assert_eq!(da.as_slice(), pb.data(), "bytes of packet {}", i);
            }
        }
        prop_assert_eq!(a.stats(), b.stats());
        prop_assert_eq!(a.sessions(now), b.sessions(now));
        while let Some(p) = a.pop_ready() {
            prop_assert_eq!(Some(p), b.pop_ready());
        }
        prop_assert_eq!(b.pop_ready(), None);
        prop_assert!(outcome_counted(&b));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Packets with arbitrary kernel offloads (any virtio-net header the driver accepts)
    /// through every translator never panic, every packet is counted, and what leaves with
    /// offloads has its checksum field inside the packet.
    #[test]
    fn arbitrary_offloads_never_panic(kind in 0u8..7, to in 0u8..3, v4 in any::<bool>(),
                                      header in proptest::array::uniform10(any::<u8>()),
                                      flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..6),
                                      cut in 20usize..200) {
        let mut e = engine46();
        let mut p = if v4 {
            let mut p = seed_packet(6, [198, 18, 0, 2], [203, 0, 113, 9]);
            p[6] = 0x40;
            p.extend_from_slice(&[7u8; 100]);
            let len = p.len() as u16;
            p[2..4].copy_from_slice(&len.to_be_bytes());
            p
        } else {
            let dst = match to { 0 => addr6("2001:2:0:64::c613:2"), 1 => addr6("2001:2:0:46::cb00:7101"), _ => addr6("2001:2:0:46::c613:103") };
            seed6(kind, dst)
        };
        for (i, v) in flips {
            if let Some(b) = p.get_mut(i) { *b = v; }
        }
        p.truncate(cut);
        let Ok(off) = vnet::Offload::from_header(&header, p.len()) else {
            return Ok(());
        };
        let mut room = vec![0u8; HEADROOM + p.len() + HEADROOM];
        room[HEADROOM..HEADROOM + p.len()].copy_from_slice(&p);
        let mut pb = PacketBuf::new(&mut room, HEADROOM, p.len()).unwrap();
        pb.set_offload(off);
        let v = e.process(Time::from_secs(1), &mut pb);
        let out = pb.offload();
        if let Some(c) = out.csum {
            prop_assert_eq!(v, Verdict::Forward);
            prop_assert!(usize::from(c.start) + usize::from(c.offset) + 2 <= pb.len());
        }
        while e.pop_ready().is_some() {}
        prop_assert!(outcome_counted(&e));
    }
}
