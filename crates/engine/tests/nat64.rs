//! Stateful NAT64 (RFC 6146) through the public engine API; every translated packet is
//! checked with the independent checksum oracle of `common`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use xlat_engine::*;

const C1: &str = "2001:2:0:1::10";
const C2: &str = "2001:2:0:1::11";
const POOL: &str = "198.19.0.101";
const S4: &str = "198.19.0.2";
const S6: &str = "2001:2:0:64::c613:2";
const RTR4: &str = "198.19.0.1";

fn config() -> Nat64Config {
    Nat64Config {
        prefix: "2001:2:0:64::/96".parse().unwrap(),
        pool4: vec!["198.19.0.101/32".parse().unwrap()],
        ..Nat64Config::default()
    }
}

fn engine_with(c: Nat64Config) -> Engine {
    Engine::new(EngineConfig {
        nat64: Some(c),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn engine() -> Engine {
    engine_with(config())
}

fn at(e: &mut Engine, t: u64, mut p: Vec<u8>) -> (Verdict, Vec<u8>) {
    let v = e.process_vec(Time::from_secs(t), &mut p);
    (v, p)
}

fn port(p: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([p[off], p[off + 1]])
}

#[test]
fn rfc6146_3_5_1_udp_out_and_back() {
    let mut e = engine();
    let (v, o) = at(&mut e, 0, ip6(a6(C1), a6(S6), 17, udp(40000, 53, b"q"), 64));
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!((&o[12..16], &o[16..20]), (&a4(POOL)[..], &a4(S4)[..]));
    assert_eq!((port(&o, 20), port(&o, 22)), (40000, 53), "port preserved");
    let (v, back) = at(
        &mut e,
        1,
        ip4(a4(S4), a4(POOL), 17, udp(53, 40000, b"a"), 64, 0, 1),
    );
    assert_eq!(v, Verdict::Forward);
    verify6(&back);
    assert_eq!((&back[8..24], &back[24..40]), (&a6(S6)[..], &a6(C1)[..]));
    assert_eq!((port(&back, 40), port(&back, 42)), (53, 40000));
    let st = e.stats();
    assert_eq!(
        (st.get("outbound"), st.get("inbound"), st.sessions),
        (1, 1, 1)
    );
}

#[test]
fn rfc6146_3_5_2_tcp_handshake_and_unsolicited_syn() {
    let mut e = engine();
    let (v, _) = at(&mut e, 0, ip6(a6(C1), a6(S6), 6, tcp(40001, 80, 0x02), 64));
    assert_eq!(v, Verdict::Forward);
    let (v, o) = at(
        &mut e,
        0,
        ip4(a4(S4), a4(POOL), 6, tcp(80, 40001, 0x12), 64, 0x4000, 2),
    );
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    let s = e.sessions(Time::from_secs(0));
    let row = s
        .iter()
        .find(|r| r.proto == Some(xlat_engine::flow::Proto::Tcp))
        .unwrap();
    assert_eq!(row.state, SessionState::Established);
    assert_eq!(
        (row.inside, row.inside_port),
        ("2001:2:0:1::10".parse().unwrap(), Some(40001))
    );
    assert_eq!(
        (row.outside, row.outside_port),
        ("198.19.0.101".parse().unwrap(), Some(40001))
    );
    assert_eq!(
        (row.remote, row.remote_port),
        (Some("198.19.0.2".parse().unwrap()), Some(80))
    );
    assert_eq!(row.translator, xlat_engine::flow::Translator::Nat64);
    assert_eq!(row.remote6, Some("2001:2:0:64::c613:2".parse().unwrap()));
    // Deviation from 3.5.2.2 (documented): an unsolicited inbound SYN is not held; its Port
    // Unreachable goes back at once.
    let (v, _) = at(
        &mut e,
        1,
        ip4(a4(S4), a4(POOL), 6, tcp(80, 5555, 0x02), 64, 0x4000, 3),
    );
    assert_eq!(v, Verdict::Reply(DropReason::NoMapping));
    // Only SYN opens a session.
    let (v, _) = at(&mut e, 1, ip6(a6(C1), a6(S6), 6, tcp(40002, 80, 0x10), 64));
    assert_eq!(v, Verdict::Drop(DropReason::TcpNoSession));
}

#[test]
fn rfc6146_3_5_3_icmp_echo_identifier() {
    let mut e = engine();
    let (v, o) = at(
        &mut e,
        0,
        ip6(a6(C1), a6(S6), 58, echo(128, 0x77, 1, b"ping"), 64),
    );
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!((o[20], port(&o, 24)), (8, 0x77));
    let (v, back) = at(
        &mut e,
        0,
        ip4(a4(S4), a4(POOL), 1, echo(0, 0x77, 1, b"ping"), 64, 0, 4),
    );
    assert_eq!(v, Verdict::Forward);
    verify6(&back);
    assert_eq!((back[40], port(&back, 44)), (129, 0x77));
    // Same identifier from another host: remapped.
    let (_, o2) = at(
        &mut e,
        0,
        ip6(a6(C2), a6(S6), 58, echo(128, 0x77, 1, b"ping"), 64),
    );
    verify4(&o2);
    assert_ne!(port(&o2, 24), 0x77);
}

#[test]
fn rfc6146_icmp_errors_both_ways() {
    let mut e = engine();
    at(&mut e, 0, ip6(a6(C1), a6(S6), 17, udp(40000, 53, b"q"), 64));
    // Inbound: a router on the IPv4 side reports TTL exceeded about the translated packet.
    let quoted = ip4(a4(POOL), a4(S4), 17, udp(40000, 53, b"q"), 1, 0x4000, 0);
    let mut err = vec![11, 0, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&quoted);
    let (v, o) = at(&mut e, 1, ip4(a4(RTR4), a4(POOL), 1, err, 64, 0, 5));
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!((o[40], o[41]), (3, 0));
    assert_eq!(&o[8..24], &a6("2001:2:0:64::c613:1"));
    assert_eq!(&o[24..40], &a6(C1));
    let inner = &o[48..];
    assert_eq!((&inner[8..24], &inner[24..40]), (&a6(C1)[..], &a6(S6)[..]));
    verify6(inner);
    // Outbound: the client reports port unreachable about an inbound reply.
    let (_, got) = at(
        &mut e,
        2,
        ip4(a4(S4), a4(POOL), 17, udp(53, 40000, b"a"), 64, 0, 6),
    );
    let mut err = vec![1, 4, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&got);
    let (v, o) = at(&mut e, 3, ip6(a6(C1), a6(S6), 58, err, 64));
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!((o[20], o[21]), (3, 3));
    let inner = &o[28..];
    assert_eq!(
        (&inner[12..16], &inner[16..20]),
        (&a4(S4)[..], &a4(POOL)[..])
    );
    verify4(inner);
    // An error about a flow that has no session: dropped.
    let quoted = ip4(a4(POOL), a4(S4), 17, udp(41000, 53, b"q"), 1, 0, 0);
    let mut err = vec![3, 3, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&quoted);
    let (v, _) = at(&mut e, 4, ip4(a4(S4), a4(POOL), 1, err, 64, 0, 7));
    assert_eq!(v, Verdict::Drop(DropReason::IcmpErrorNoSession));
}

#[test]
fn rfc6146_3_8_hairpinning() {
    let mut e = engine_with(Nat64Config {
        filtering: Filtering::EndpointIndependent,
        ..config()
    });
    // C2 has a mapping (pool:41000) from talking to the server.
    at(&mut e, 0, ip6(a6(C2), a6(S6), 17, udp(41000, 53, b"q"), 64));
    // C1 sends to the pref64 form of that mapping.
    let dst = a6("2001:2:0:64::c613:65");
    let (v, o) = at(
        &mut e,
        1,
        ip6(a6(C1), dst, 17, udp(40000, 41000, b"hi"), 64),
    );
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!(&o[24..40], &a6(C2));
    assert_eq!(
        &o[8..24],
        &a6("2001:2:0:64::c613:65"),
        "source: C1's mapping"
    );
    assert_eq!((port(&o, 40), port(&o, 42)), (40000, 41000));
    assert_eq!(o[7], 63, "one hop");
    assert_eq!(e.stats().get("hairpinned"), 1);
}

#[test]
fn rfc6146_3_4_fragments_both_ways_and_out_of_order() {
    let mut e = engine();
    let fr = frags6(
        a6(C1),
        a6(S6),
        17,
        udp(40000, 53, &[1; 48]),
        7,
        &[24, 24, 8],
    );
    // The last fragment first: held until the first one names the session.
    let (v, _) = at(&mut e, 0, fr[2].clone());
    assert_eq!(v, Verdict::Held);
    let mut out = Vec::new();
    for f in &fr[..2] {
        let (v, o) = at(&mut e, 0, f.clone());
        assert_eq!(v, Verdict::Forward);
        out.push(o);
    }
    out.extend(std::iter::from_fn(|| e.pop_ready()));
    assert_eq!(out.len(), 3);
    verify4_fragments(&out);
    assert!(out.iter().all(|f| f[12..16] == a4(POOL)));
    let fr = frags4(
        a4(S4),
        a4(POOL),
        17,
        udp(53, 40000, &[2; 48]),
        8,
        &[24, 24, 8],
    );
    let mut out = Vec::new();
    for f in fr {
        let (v, o) = at(&mut e, 1, f);
        assert_eq!(v, Verdict::Forward);
        out.push(o);
    }
    verify6_fragments(&out);
    assert!(out.iter().all(|f| f[24..40] == a6(C1)));
}

#[test]
fn ping_s_4000_through_nat64() {
    let mut e = engine();
    let msg = echo(128, 9, 1, &[0x5a; 4000]);
    let fr = frags6(a6(C1), a6(S6), 58, msg, 11, &[1448, 1448, 1112]);
    let mut out = Vec::new();
    for f in fr {
        let (v, o) = at(&mut e, 0, f);
        if v == Verdict::Forward {
            out.push(o);
        }
        out.extend(std::iter::from_fn(|| e.pop_ready()));
    }
    assert_eq!(out.len(), 3);
    verify4_fragments(&out);
    let reply = echo(0, 9, 1, &[0x5a; 4000]);
    let fr = frags4(a4(S4), a4(POOL), 1, reply, 12, &[1480, 1480, 1048]);
    let mut out = Vec::new();
    for f in fr {
        let (v, o) = at(&mut e, 0, f);
        if v == Verdict::Forward {
            out.push(o);
        }
        out.extend(std::iter::from_fn(|| e.pop_ready()));
    }
    assert!(out.iter().all(|f| f.len() <= 1280 && f[24..40] == a6(C1)));
    verify6_fragments(&out);
}

#[test]
fn nat44_and_nat64_in_one_engine() {
    let mut e = Engine::new(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.100/32".parse().unwrap()],
            ..Nat44Config::default()
        }),
        nat64: Some(config()),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap();
    let (v, o) = at(
        &mut e,
        0,
        ip4(a4("198.18.0.20"), a4(S4), 17, udp(5000, 53, b"q"), 64, 0, 1),
    );
    assert_eq!((v, &o[12..16]), (Verdict::Forward, &a4("198.19.0.100")[..]));
    let (v, o) = at(&mut e, 0, ip6(a6(C1), a6(S6), 17, udp(5000, 53, b"q"), 64));
    assert_eq!((v, &o[12..16]), (Verdict::Forward, &a4(POOL)[..]));
    let (v, o) = at(
        &mut e,
        0,
        ip4(a4(S4), a4(POOL), 17, udp(53, 5000, b"a"), 64, 0, 2),
    );
    assert_eq!((v, o[0] >> 4), (Verdict::Forward, 6));
    let st = e.stats();
    assert_eq!(st.sessions, 2);
    assert_eq!(st.pool.iter().filter(|p| p.proto == "udp").count(), 1);
    assert_eq!(e.sessions(Time(0)).len(), 2);
    // The pools may not overlap.
    let err = Engine::new(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.100/31".parse().unwrap()],
            ..Nat44Config::default()
        }),
        nat64: Some(config()),
        ..EngineConfig::default()
    })
    .err()
    .unwrap();
    assert_eq!(err.key, "nat64.pool4");
}

#[test]
fn nat64_only_engine_drops_what_is_not_ours() {
    let mut e = engine();
    let (v, _) = at(
        &mut e,
        0,
        ip4(a4(S4), a4("198.19.0.99"), 17, udp(1, 2, b"x"), 64, 0, 1),
    );
    assert_eq!(v, Verdict::Drop(DropReason::NotOurs));
    let (v, _) = at(
        &mut e,
        0,
        ip6(a6(C1), a6("2001:db8::1"), 17, udp(1, 2, b"x"), 64),
    );
    assert_eq!(v, Verdict::Drop(DropReason::NotOurs));
    let (v, _) = at(&mut e, 0, ip6(a6(C1), a6(S6), 47, vec![0; 8], 64));
    assert_eq!(v, Verdict::Reply(DropReason::UnsupportedProtocol));
}

// ---- Fast-path recipes (issue 6): the XDP program's model against the engine ----

use xlat_engine::offload::{self, OffloadKind};

fn ops(e: &mut Engine) -> Vec<offload::OffloadOp> {
    let mut evs = Vec::new();
    e.drain_events(&mut evs);
    evs.iter().filter_map(|ev| e.offload_op(ev)).collect()
}

#[test]
fn offload_nat64_recipes_match_the_engine_both_ways() {
    for (proto, open) in [(17u8, None), (6u8, Some(()))] {
        let mut e = engine();
        e.set_offload(true);
        let l4 = |sport, dport, payload: &[u8]| {
            if proto == 6 {
                tcp(sport, dport, 0x10)
            } else {
                udp(sport, dport, payload)
            }
        };
        if open.is_some() {
            at(&mut e, 0, ip6(a6(C1), a6(S6), 6, tcp(40010, 80, 0x02), 64));
            at(
                &mut e,
                0,
                ip4(a4(S4), a4(POOL), 6, tcp(80, 40010, 0x12), 64, 0x4000, 9),
            );
        } else {
            at(&mut e, 0, ip6(a6(C1), a6(S6), 17, udp(40010, 80, b"q"), 64));
        }
        let v = ops(&mut e);
        assert_eq!(v.len(), 1, "proto {proto}");
        assert_eq!(v[0].kind, OffloadKind::Install);
        assert_ne!(v[0].token & offload::TOKEN_NAT64, 0);
        let (out, inb) = v[0].nat64().unwrap();
        // IPv6 -> IPv4: byte for byte what the engine makes of the same packet, but for the
        // identification (RFC 7915 5.1: DF clear at this size, identification from each
        // one's own counter, RFC 7739 5.3) and so the header checksum.
        let p6 = ip6(a6(C1), a6(S6), proto, l4(40010, 80, b"payload"), 64);
        let by_recipe = offload::apply64(out, &p6, 5).unwrap();
        let (verdict, by_engine) = at(&mut e, 1, p6);
        assert_eq!(verdict, Verdict::Forward);
        verify4(&by_recipe);
        verify4(&by_engine);
        assert_eq!(
            u16::from_be_bytes([by_recipe[4], by_recipe[5]]),
            out.id_base.wrapping_add(5)
        );
        let masked = |p: &[u8]| {
            let mut p = p.to_vec();
            p[4..6].fill(0);
            p[10..12].fill(0);
            p
        };
        assert_eq!(by_recipe[6] & 0x40, 0, "DF clear up to 1260 bytes");
        assert_eq!(masked(&by_recipe), masked(&by_engine), "6->4 proto {proto}");
        // IPv4 -> IPv6.
        let p4 = ip4(
            a4(S4),
            a4(POOL),
            proto,
            l4(80, 40010, b"reply"),
            64,
            0x4000,
            7,
        );
        let by_recipe = offload::apply46(inb, &p4).unwrap();
        let (verdict, by_engine) = at(&mut e, 1, p4.clone());
        assert_eq!(verdict, Verdict::Forward);
        verify6(&by_recipe);
        assert_eq!(by_recipe, by_engine, "4->6 proto {proto}");
        // A corrupt IPv4 header checksum is the engine's to judge, not the fast path's.
        let mut bad = p4;
        bad[10] ^= 1;
        assert_eq!(offload::apply46(inb, &bad), None);
    }
}

#[test]
fn offload_nat64_leaves_big_unfragmentable_and_checksumless_packets_to_the_engine() {
    let mut e = engine();
    e.set_offload(true);
    at(&mut e, 0, ip6(a6(C1), a6(S6), 17, udp(40011, 53, b"q"), 64));
    let v = ops(&mut e);
    let (_, inb) = v[0].nat64().unwrap();
    // No DF and longer than 1280 once translated: RFC 7915 4.1 fragments it (engine).
    let big = ip4(a4(S4), a4(POOL), 17, udp(53, 40011, &[7u8; 1300]), 64, 0, 8);
    assert_eq!(offload::apply46(inb, &big), None);
    let big_df = ip4(
        a4(S4),
        a4(POOL),
        17,
        udp(53, 40011, &[7u8; 1300]),
        64,
        0x4000,
        8,
    );
    assert!(offload::apply46(inb, &big_df).is_some());
    // A zero UDP checksum must be computed (RFC 7915 4.5): the engine's job.
    let mut zero = ip4(a4(S4), a4(POOL), 17, udp(53, 40011, b"z"), 64, 0x4000, 9);
    zero[26] = 0;
    zero[27] = 0;
    assert_eq!(offload::apply46(inb, &zero), None);
}

/// RFC 7915 5.1 / 4.1 and RFC 1812 5.3.7 in NAT64: a packet to the pref64 form of a martian
/// IPv4 address (127.0.0.1, 169.254.0.1) or from a link-local source makes no session and is
/// dropped, on the lane (UDP, TCP SYN) and the general path (ICMP); so is an IPv4 packet from a
/// martian source to the pool.
#[test]
fn rfc7915_nat64_martians_make_no_session() {
    let mut e = engine();
    let drop = |v: Verdict| assert_eq!(v, Verdict::Drop(DropReason::MartianAddress));
    for dst in ["2001:2:0:64::7f00:1", "2001:2:0:64::a9fe:1"] {
        drop(
            at(
                &mut e,
                0,
                ip6(a6(C1), a6(dst), 17, udp(40000, 53, b"q"), 64),
            )
            .0,
        );
        drop(at(&mut e, 0, ip6(a6(C1), a6(dst), 6, tcp(40000, 80, 0x02), 64)).0);
        drop(
            at(
                &mut e,
                0,
                ip6(a6(C1), a6(dst), 58, echo(128, 9, 1, b"p"), 64),
            )
            .0,
        );
    }
    drop(
        at(
            &mut e,
            0,
            ip6(a6("fe80::1"), a6(S6), 17, udp(40000, 53, b"q"), 64),
        )
        .0,
    );
    drop(
        at(
            &mut e,
            0,
            ip4(
                a4("127.0.0.1"),
                a4(POOL),
                17,
                udp(53, 40000, b"a"),
                64,
                0,
                1,
            ),
        )
        .0,
    );
    assert!(e.sessions(Time::from_secs(0)).is_empty());
    assert_eq!(e.stats().get("martian_address"), 8);
}

/// RFC 6146 1.2.2: a static BIB entry lets IPv4 hosts reach an IPv6 server -- an IPv4 client
/// sends to the pool4 endpoint and the IPv6 server gets it from the client's pref64 form; the
/// server's answer leaves from that endpoint; a TCP connection opens with a SYN from IPv4;
/// anything not forwarded stays closed.
#[test]
fn rfc6146_static_bib_entry_admits_ipv4_initiated_flows() {
    let mut c = config();
    let server = u128::from_be_bytes(a6(C1));
    let pool = u32::from_be_bytes(a4(POOL));
    c.static_bib = [flow::Proto::Udp, flow::Proto::Tcp]
        .map(|proto| PortForward {
            proto,
            inside: flow::Endpoint {
                addr: server,
                port: 2000,
            },
            outside: flow::Endpoint {
                addr: pool,
                port: 2000,
            },
            count: 1,
        })
        .to_vec();
    let mut e = engine_with(c);
    let (v, six) = at(
        &mut e,
        0,
        ip4(a4(S4), a4(POOL), 17, udp(53, 2000, b"hello"), 64, 0, 1),
    );
    assert_eq!(v, Verdict::Forward);
    verify6(&six);
    assert_eq!((&six[8..24], &six[24..40]), (&a6(S6)[..], &a6(C1)[..]));
    assert_eq!((port(&six, 40), port(&six, 42)), (53, 2000));
    let (v, four) = at(&mut e, 0, ip6(a6(C1), a6(S6), 17, udp(2000, 53, b"hi"), 64));
    assert_eq!(v, Verdict::Forward);
    assert_eq!(&four[12..16], &a4(POOL)[..]);
    assert_eq!(port(&four, 20), 2000);
    let (v, syn) = at(
        &mut e,
        0,
        ip4(a4(S4), a4(POOL), 6, tcp(40000, 2000, 0x02), 64, 0x4000, 2),
    );
    assert_eq!(v, Verdict::Forward);
    verify6(&syn);
    assert_eq!(port(&syn, 42), 2000);
    let (v, _) = at(
        &mut e,
        0,
        ip4(a4(S4), a4(POOL), 17, udp(53, 2001, b"no"), 64, 0, 3),
    );
    assert_eq!(v, Verdict::Reply(DropReason::NoMapping));
}

/// RFC 7915 4.4 with RFC 6146's codes: IPv4 packets to pool4 that NAT64 discards are
/// answered with ICMPv4 Destination Unreachable from the first pool4 address -- no BIB entry
/// for a UDP datagram or an echo request: host unreachable (3/1, 3.5.1, 3.5.3); a TCP SYN
/// without one: port unreachable (3/3, 3.5.2.2); refused by the filter: communication
/// administratively prohibited (3/13); a protocol other than TCP, UDP, ICMP: protocol
/// unreachable (3/2, 3.5). Other TCP segments without a session: silent.
#[test]
fn rfc7915_4_4_nat64_ipv4_discards_answered() {
    let mut e = engine();
    let code = |e: &mut Engine, p: Vec<u8>| {
        let orig = p.clone();
        let (v, o) = at(e, 1, p);
        match v {
            Verdict::Reply(_) => {
                verify4(&o);
                assert_eq!((&o[12..16], &o[16..20]), (&a4(POOL)[..], &a4(S4)[..]));
                assert_eq!(&o[28..], &orig[..]);
                assert_eq!(o[20], 3);
                Some(o[21])
            }
            _ => None,
        }
    };
    let udp4 = ip4(a4(S4), a4(POOL), 17, udp(53, 6000, b"x"), 64, 0, 1);
    assert_eq!(code(&mut e, udp4), Some(1));
    let ping = ip4(a4(S4), a4(POOL), 1, echo(8, 0x4242, 1, b"p"), 64, 0, 2);
    assert_eq!(code(&mut e, ping), Some(1));
    let syn = ip4(a4(S4), a4(POOL), 6, tcp(80, 6001, 0x02), 64, 0x4000, 3);
    assert_eq!(code(&mut e, syn), Some(3));
    let ack = ip4(a4(S4), a4(POOL), 6, tcp(80, 6001, 0x10), 64, 0x4000, 4);
    assert_eq!(code(&mut e, ack), None);
    let gre = ip4(a4(S4), a4(POOL), 47, vec![0; 8], 64, 0, 5);
    assert_eq!(code(&mut e, gre), Some(2));
    // Address-dependent filtering (the default): a mapping to S4 refuses another remote.
    let (v, _) = at(&mut e, 1, ip6(a6(C1), a6(S6), 17, udp(40000, 53, b"q"), 64));
    assert_eq!(v, Verdict::Forward);
    let other = ip4(a4(RTR4), a4(POOL), 17, udp(53, 40000, b"x"), 64, 0, 6);
    let (v, o) = at(&mut e, 1, other);
    assert_eq!(v, Verdict::Reply(DropReason::Filtered));
    assert_eq!((o[20], o[21]), (3, 13));
    let st = e.stats();
    assert_eq!(
        (
            st.get("no_mapping"),
            st.get("filtered"),
            st.get("unsupported_protocol"),
            st.get("icmp_errors_sent")
        ),
        (4, 1, 1, 5)
    );
}

/// RFC 7915 5.4 with RFC 6146's codes: IPv6 packets NAT64 discards are answered with ICMPv6
/// Destination Unreachable from the pref64 form of the first pool4 address (or
/// `error_source6`) -- no BIB entry can be made (pool4 ports exhausted): address unreachable
/// (1/3, 3.5.1); a protocol other than TCP, UDP, ICMPv6: port unreachable (1/4, 3.5). With
/// `unreachable_errors = false` both are silent drops.
#[test]
fn rfc7915_5_4_nat64_ipv6_discards_answered() {
    let mut e = engine_with(Nat64Config {
        ports: (1024, 1024),
        ..config()
    });
    let (v, _) = at(&mut e, 0, ip6(a6(C1), a6(S6), 17, udp(5000, 53, b"a"), 64));
    assert_eq!(v, Verdict::Forward);
    let p = ip6(a6(C2), a6(S6), 17, udp(5000, 53, b"b"), 64);
    let (v, o) = at(&mut e, 0, p.clone());
    assert_eq!(v, Verdict::Reply(DropReason::PoolExhausted));
    verify6(&o);
    assert_eq!((o[40], o[41]), (1, 3));
    assert_eq!(
        (&o[8..24], &o[24..40]),
        (&a6("2001:2:0:64::c613:65")[..], &a6(C2)[..])
    );
    assert_eq!(&o[48..], &p[..]);
    let (v, o) = at(&mut e, 0, ip6(a6(C1), a6(S6), 47, vec![0; 8], 64));
    assert_eq!(v, Verdict::Reply(DropReason::UnsupportedProtocol));
    assert_eq!((o[40], o[41]), (1, 4));
    // error_source6 / error_source4 replace the pool4 address as the errors' source.
    let mut e = engine_with(Nat64Config {
        params: XlatParams {
            error_source4: Some(u32::from_be_bytes(a4("192.0.2.1"))),
            error_source6: Some(u128::from_be_bytes(a6("2001:db8::1"))),
            ..XlatParams::default()
        },
        ..config()
    });
    let (_, o) = at(&mut e, 0, ip6(a6(C1), a6(S6), 47, vec![0; 8], 64));
    assert_eq!(&o[8..24], &a6("2001:db8::1"));
    let (_, o) = at(
        &mut e,
        0,
        ip4(a4(S4), a4(POOL), 17, udp(53, 6000, b"x"), 64, 0, 1),
    );
    assert_eq!(&o[12..16], &a4("192.0.2.1"));
    // Off.
    let mut e = engine_with(Nat64Config {
        params: XlatParams {
            unreachable_errors: false,
            ..XlatParams::default()
        },
        ..config()
    });
    let (v, _) = at(&mut e, 0, ip6(a6(C1), a6(S6), 47, vec![0; 8], 64));
    assert_eq!(v, Verdict::Drop(DropReason::UnsupportedProtocol));
    let (v, _) = at(
        &mut e,
        0,
        ip4(a4(S4), a4(POOL), 17, udp(53, 6000, b"x"), 64, 0, 1),
    );
    assert_eq!(v, Verdict::Drop(DropReason::NoMapping));
}

/// NAT64 UDP waits like NAT44's (`Engine::set_offload_after`): the IPv4 reply proves the
/// session and its recipes go out then; a second IPv6 packet would have too.
#[test]
fn offload_nat64_udp_after_a_reply_or_its_second_packet() {
    let mut e = engine();
    e.set_offload(true);
    e.set_offload_after(2);
    at(&mut e, 0, ip6(a6(C1), a6(S6), 17, udp(40010, 80, b"q"), 64));
    assert!(ops(&mut e).is_empty(), "the first packet alone: not yet");
    let (v, _) = at(
        &mut e,
        1,
        ip4(a4(S4), a4(POOL), 17, udp(80, 40010, b"r"), 64, 0, 9),
    );
    assert_eq!(v, Verdict::Forward);
    let v = ops(&mut e);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].kind, OffloadKind::Install);
    assert_ne!(v[0].token & offload::TOKEN_NAT64, 0);
    at(&mut e, 2, ip6(a6(C1), a6(S6), 17, udp(40011, 80, b"q"), 64));
    assert!(ops(&mut e).is_empty());
    at(&mut e, 3, ip6(a6(C1), a6(S6), 17, udp(40011, 80, b"q"), 64));
    assert_eq!(ops(&mut e).len(), 1, "the second packet");
}
