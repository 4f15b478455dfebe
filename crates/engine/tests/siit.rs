//! SIIT (RFC 7915 with RFC 6052 and RFC 7757 addressing) through the public engine API.
//! Every packet that comes out is checked with the independent checksum oracle of
//! `common`, and the round-trip property test checks that 6 -> 4 -> 6 gives back the
//! original where RFC 7915 says the translation is lossless.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use proptest::prelude::*;
use xlat_engine::*;

/// The IPv6 host 2001:2:0:6::5 is 198.19.0.5 by EAM; IPv4 hosts are 2001:2:0:64::/96.
const H6: &str = "2001:2:0:6::5";
const H4: &str = "198.19.0.5";
const R4: &str = "198.51.100.7";
const R6: &str = "2001:2:0:64::c633:6407";

fn config() -> SiitConfig {
    SiitConfig {
        prefix: Some("2001:2:0:64::/96".parse().unwrap()),
        eam: vec![Eam {
            ipv4: "198.19.0.0/28".parse().unwrap(),
            ipv6: "2001:2:0:6::/124".parse().unwrap(),
        }],
        pool4: vec!["203.0.113.0/24".parse().unwrap()],
        rfc6791: Some("192.0.2.1/32".parse().unwrap()),
        ..SiitConfig::default()
    }
}

fn engine_with(c: SiitConfig) -> Engine {
    Engine::new(EngineConfig {
        siit: Some(c),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn engine() -> Engine {
    engine_with(config())
}

fn run(e: &mut Engine, mut p: Vec<u8>) -> (Verdict, Vec<u8>) {
    let v = e.process_vec(Time::from_secs(1), &mut p);
    (v, p)
}

fn ready(e: &mut Engine) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| e.pop_ready()).collect()
}

#[test]
fn rfc7915_5_1_udp_6to4_header_fields() {
    let mut e = engine();
    let p = ip6(a6(H6), a6(R6), 17, udp(5000, 53, b"query"), 64);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!(o[1], 0xb8, "TOS = traffic class");
    assert_eq!(
        &o[6..8],
        &[0, 0],
        "DF clear up to 1260 bytes (RFC 7915 5.1)"
    );
    assert_eq!((o[8], o[9]), (63, 17), "TTL = hop limit - 1");
    assert_eq!((&o[12..16], &o[16..20]), (&a4(H4)[..], &a4(R4)[..]));
    assert_eq!(&o[20..24], &[0x13, 0x88, 0, 53], "ports kept");
    assert_eq!(e.stats().get("ipv6_to_ipv4"), 1);
}

/// RFC 7915 5.1: "If the size of the translated IPv4 packet is less than or equal to 1260
/// bytes, [DF] is set to zero; otherwise, it is set to one", and the identification comes
/// from the translator's generator (RFC 7739 5.3): consecutive packets to one destination get
/// different identifications. Both on the lane (plain UDP) and the general path (ICMP).
#[test]
fn rfc7915_5_1_df_and_identification() {
    let mut e = engine();
    let ident = |o: &[u8]| u16::from_be_bytes([o[4], o[5]]);
    let df = |o: &[u8]| o[6] & 0x40 != 0;
    // 1260 bytes as IPv4: 20 + 8 + 1232 of UDP payload.
    let (_, a) = run(
        &mut e,
        ip6(a6(H6), a6(R6), 17, udp(5000, 53, &[7; 1232]), 64),
    );
    let (_, b) = run(
        &mut e,
        ip6(a6(H6), a6(R6), 17, udp(5000, 53, &[7; 1232]), 64),
    );
    verify4(&a);
    assert_eq!(a.len(), 1260);
    assert!(!df(&a) && !df(&b));
    assert_ne!(ident(&a), ident(&b), "no repeat for the same destination");
    // 1261 bytes: DF set, an atomic datagram (identification 0, RFC 6864 4.1).
    let (_, c) = run(
        &mut e,
        ip6(a6(H6), a6(R6), 17, udp(5000, 53, &[7; 1233]), 64),
    );
    verify4(&c);
    assert!(df(&c));
    assert_eq!(ident(&c), 0);
    // The general path (ICMPv6 echo) writes the same.
    let (_, d) = run(&mut e, ip6(a6(H6), a6(R6), 58, echo(128, 1, 1, b"x"), 64));
    verify4(&d);
    assert!(!df(&d));
}

#[test]
fn rfc7915_4_1_udp_4to6_header_fields() {
    let mut e = engine();
    let p = ip4(a4(R4), a4(H4), 17, udp(53, 5000, b"answer"), 64, 0x4000, 77);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!(o[0] >> 4, 6);
    assert_eq!(
        u32::from_be_bytes([o[0], o[1], o[2], o[3]]) >> 20 & 0xff,
        0x28,
        "TC = TOS"
    );
    assert_eq!(
        u32::from_be_bytes([o[0], o[1], o[2], o[3]]) & 0xfffff,
        0,
        "flow label 0"
    );
    assert_eq!((o[6], o[7]), (17, 63));
    assert_eq!((&o[8..24], &o[24..40]), (&a6(R6)[..], &a6(H6)[..]));
}

#[test]
fn rfc7915_4_5_udp_zero_checksum_computed_or_dropped() {
    let mut e = engine();
    let mut l4 = udp(53, 5000, b"no checksum");
    let p = raw4(a4(R4), a4(H4), 17, &l4, 64, 0x4000, 1, 0);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_ne!(&o[46..48], &[0, 0]);
    assert_eq!(e.stats().get("udp_checksums_computed"), 1);
    let mut drop = engine_with(SiitConfig {
        params: XlatParams {
            udp_zero_checksum: UdpZeroChecksum::Drop,
            ..XlatParams::default()
        },
        ..config()
    });
    l4[6..8].copy_from_slice(&[0, 0]);
    let p = raw4(a4(R4), a4(H4), 17, &l4, 64, 0x4000, 1, 0);
    assert_eq!(
        run(&mut drop, p).0,
        Verdict::Drop(DropReason::UdpZeroChecksum)
    );
    // A zero-checksum fragment cannot get a checksum: dropped.
    let p = raw4(a4(R4), a4(H4), 17, &l4, 64, 0x2000, 2, 0);
    assert_eq!(run(&mut e, p).0, Verdict::Drop(DropReason::UdpZeroChecksum));
}

#[test]
fn rfc7915_4_2_and_5_2_echo_both_ways() {
    let mut e = engine();
    let (v, o) = run(
        &mut e,
        ip6(a6(H6), a6(R6), 58, echo(128, 0x1234, 1, b"ping"), 64),
    );
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!((o[9], o[20]), (1, 8));
    let (v, o) = run(
        &mut e,
        ip4(a4(R4), a4(H4), 1, echo(0, 0x1234, 1, b"ping"), 64, 0, 3),
    );
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!((o[6], o[40]), (58, 129));
    // Timestamp requests and neighbor solicitations are not translated.
    let ts = ip4(a4(R4), a4(H4), 1, echo(13, 1, 1, &[0; 12]), 64, 0, 4);
    assert_eq!(
        run(&mut e, ts).0,
        Verdict::Drop(DropReason::IcmpNotTranslated)
    );
    let ns = ip6(a6(H6), a6(R6), 58, echo(135, 0, 0, &[0; 16]), 255);
    assert_eq!(
        run(&mut e, ns).0,
        Verdict::Drop(DropReason::IcmpNotTranslated)
    );
}

#[test]
fn rfc7915_4_3_icmp_error_with_quoted_udp_4to6() {
    let mut e = engine();
    // The IPv6 host sent UDP to R (as 198.19.0.5 -> 198.51.100.7); R answers port unreachable.
    let quoted = ip4(a4(H4), a4(R4), 17, udp(5000, 53, b"query"), 63, 0x4000, 0);
    let mut err = vec![3, 3, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&quoted);
    let p = ip4(a4(R4), a4(H4), 1, err, 64, 0, 9);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!((o[40], o[41]), (1, 4), "port unreachable -> type 1 code 4");
    let inner = &o[48..];
    assert_eq!(inner[0] >> 4, 6);
    assert_eq!((&inner[8..24], &inner[24..40]), (&a6(H6)[..], &a6(R6)[..]));
    assert_eq!(
        inner[7], 63,
        "quoted hop limit = quoted TTL, not decremented"
    );
    // The quoted UDP checksum follows its new pseudo-header.
    verify6(inner);
    assert_eq!(e.stats().get("icmp_errors_translated"), 1);
}

#[test]
fn rfc7915_5_3_packet_too_big_6to4_with_mtu() {
    let mut e = engine();
    let quoted = ip6(a6(R6), a6(H6), 17, udp(53, 5000, &[7; 100]), 60);
    let mut err = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00]; // MTU 1280
    err.extend_from_slice(&quoted);
    let p = ip6(a6(H6), a6(R6), 58, err, 64);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!((o[20], o[21]), (3, 4), "frag needed");
    assert_eq!(u16::from_be_bytes([o[26], o[27]]), 1260, "MTU - 20");
    let inner = &o[28..];
    assert_eq!((&inner[12..16], &inner[16..20]), (&a4(R4)[..], &a4(H4)[..]));
    verify4(inner);
}

#[test]
fn rfc6791_router_without_ipv4_form() {
    let mut e = engine();
    // A router 2001:db8::1 on the IPv6 side reports hop limit exceeded for an inbound packet.
    let quoted = ip6(a6(R6), a6(H6), 17, udp(53, 5000, b"x"), 1);
    let mut err = vec![3, 0, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&quoted);
    let p = ip6(a6("2001:db8::1"), a6(R6), 58, err, 64);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!(&o[12..16], &a4("192.0.2.1"), "RFC 6791 source");
    assert_eq!((o[20], o[21]), (11, 0));
    // Not an error: no RFC 6791 address for it (RFC 7915 5.4: answered, address unreachable).
    let p = ip6(a6("2001:db8::1"), a6(R6), 17, udp(1, 2, b"x"), 64);
    assert_eq!(
        run(&mut e, p).0,
        Verdict::Reply(DropReason::UntranslatableAddress)
    );
}

#[test]
fn rfc7915_4_1_own_errors_ttl_and_frag_needed() {
    let mut e = engine_with(SiitConfig {
        params: XlatParams {
            mtu: 1400,
            ..XlatParams::default()
        },
        ..config()
    });
    let p = ip4(a4(R4), a4(H4), 17, udp(53, 5000, b"late"), 1, 0x4000, 5);
    let (v, o) = run(&mut e, p.clone());
    assert_eq!(v, Verdict::Reply(DropReason::HopLimitExceeded));
    verify4(&o);
    assert_eq!((o[20], o[21]), (11, 0));
    assert_eq!(&o[12..16], &a4("192.0.2.1"));
    assert_eq!(&o[16..20], &a4(R4));
    assert_eq!(&o[28..], &p[..]);
    // 1381 + 20 > 1400 with DF: Fragmentation Needed, MTU 1380.
    let big = ip4(a4(R4), a4(H4), 17, udp(53, 5000, &[1; 1353]), 64, 0x4000, 6);
    assert_eq!(big.len(), 1381);
    let (v, o) = run(&mut e, big);
    assert_eq!(v, Verdict::Reply(DropReason::TooBig));
    verify4(&o);
    assert_eq!(
        (o[20], o[21], u16::from_be_bytes([o[26], o[27]])),
        (3, 4, 1380)
    );
    assert!(o.len() <= 576);
    let st = e.stats();
    assert_eq!(
        (
            st.get("hop_limit_exceeded"),
            st.get("too_big"),
            st.get("icmp_errors_sent")
        ),
        (1, 1, 2)
    );
}

#[test]
fn rfc7915_5_1_own_errors_hop_limit_too_big_routing_header() {
    let mut e = engine_with(SiitConfig {
        params: XlatParams {
            mtu: 1300,
            ..XlatParams::default()
        },
        ..config()
    });
    let p = ip6(a6(H6), a6(R6), 17, udp(5000, 53, b"x"), 1);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Reply(DropReason::HopLimitExceeded));
    verify6(&o);
    assert_eq!((o[40], o[41]), (3, 0));
    assert_eq!(&o[24..40], &a6(H6));
    assert_eq!(
        &o[8..24],
        &a6("2001:2:0:64::c000:201"),
        "pref64 form of the RFC 6791 address"
    );
    let big = ip6(a6(H6), a6(R6), 17, udp(5000, 53, &[0; 1300]), 64);
    let (v, o) = run(&mut e, big);
    assert_eq!(v, Verdict::Reply(DropReason::TooBig));
    assert_eq!((o[40], o[41]), (2, 0));
    assert_eq!(u32::from_be_bytes([o[44], o[45], o[46], o[47]]), 1320);
    assert!(o.len() <= 1280);
    verify6(&o);
    // Routing header with segments left 1: parameter problem pointing at it (offset 43).
    let mut rh = vec![17, 2, 0, 1, 0, 0, 0, 0];
    rh.extend_from_slice(&a6("2001:2:0:64::1"));
    rh.extend_from_slice(&udp(5000, 53, b"x"));
    let p = raw6(a6(H6), a6(R6), 43, &rh, 64, 0, 0);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Reply(DropReason::RoutingHeader));
    assert_eq!(
        (
            o[40],
            o[41],
            u32::from_be_bytes([o[44], o[45], o[46], o[47]])
        ),
        (4, 0, 43)
    );
}

#[test]
fn rfc7915_5_1_1_fragments_6to4_and_4_1_fragments_4to6() {
    let mut e = engine();
    let msg = udp(5000, 53, &[9; 48]);
    let fr = frags6(a6(H6), a6(R6), 17, msg, 0xabcd_1234, &[24, 24, 8]);
    let mut out = Vec::new();
    for f in fr {
        let (v, o) = run(&mut e, f);
        assert_eq!(v, Verdict::Forward);
        assert_eq!(
            u16::from_be_bytes([o[4], o[5]]),
            0x1234,
            "ident = low 16 bits"
        );
        assert_eq!(o[6] & 0x40, 0, "DF clear");
        out.push(o);
    }
    verify4_fragments(&out);
    let fr = frags4(
        a4(R4),
        a4(H4),
        17,
        udp(53, 5000, &[3; 48]),
        0x4321,
        &[24, 24, 8],
    );
    let mut out = Vec::new();
    for f in fr {
        let (v, o) = run(&mut e, f);
        assert_eq!(v, Verdict::Forward);
        assert_eq!((o[6], &o[44..48]), (44, &[0, 0, 0x43, 0x21][..]));
        out.push(o);
    }
    verify6_fragments(&out);
}

#[test]
fn rfc7915_4_1_no_df_fragmented_to_lowest_ipv6_mtu() {
    let mut e = engine();
    let p = ip4(a4(R4), a4(H4), 17, udp(53, 5000, &[5; 2000]), 64, 0, 0x77);
    let (v, first) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    let mut all = vec![first];
    all.extend(ready(&mut e));
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|f| f.len() <= 1280));
    verify6_fragments(&all);
    assert_eq!(e.stats().get("fragments_created"), 2);
    // With DF and within the MTU: no fragment header.
    let p = ip4(
        a4(R4),
        a4(H4),
        17,
        udp(53, 5000, &[5; 1400]),
        64,
        0x4000,
        0x78,
    );
    let (v, o) = run(&mut e, p);
    assert_eq!((v, o[6]), (Verdict::Forward, 17));
}

#[test]
fn rfc7915_fragmented_echo_first_fragment_waits_for_length() {
    let mut e = engine();
    // ping -s 3000 from the IPv6 side: 3008-byte ICMPv6 echo in 3 fragments.
    let msg = echo(128, 0x42, 1, &[0x61; 3000]);
    let fr = frags6(a6(H6), a6(R6), 58, msg, 99, &[1448, 1448, 112]);
    let (v, _) = run(&mut e, fr[0].clone());
    assert_eq!(v, Verdict::Held, "first fragment waits for the length");
    let (v, o2) = run(&mut e, fr[1].clone());
    assert_eq!(v, Verdict::Forward);
    let (v, o3) = run(&mut e, fr[2].clone());
    assert_eq!(v, Verdict::Forward);
    let rest = ready(&mut e);
    assert_eq!(rest.len(), 1);
    verify4_fragments(&[rest[0].clone(), o2, o3]);
    // The reply from IPv4, fragmented at 1500: each piece becomes two IPv6 fragments.
    let reply = echo(0, 0x42, 1, &[0x61; 3000]);
    let fr = frags4(a4(R4), a4(H4), 1, reply, 5, &[1480, 1480, 48]);
    let mut out = Vec::new();
    for f in fr {
        let (v, o) = run(&mut e, f);
        if v == Verdict::Forward {
            out.push(o);
        }
        out.extend(ready(&mut e));
    }
    assert!(out.iter().all(|f| f.len() <= 1280));
    verify6_fragments(&out);
}

#[test]
fn rfc7757_eam_hairpin_and_not_ours() {
    let mut e = engine();
    // 2001:2:0:6::5 -> the pref64 form of 198.19.0.6 (another EAM host): back to IPv6.
    let p = ip6(a6(H6), a6("2001:2:0:64::c613:6"), 17, udp(1, 2, b"hi"), 64);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!(&o[24..40], &a6("2001:2:0:6::6"));
    assert_eq!(
        &o[8..24],
        &a6("2001:2:0:64::c613:5"),
        "source: pref64 form of 198.19.0.5"
    );
    let p = ip6(a6(H6), a6("2001:2:0:65::1"), 17, udp(1, 2, b"hi"), 64);
    assert_eq!(run(&mut e, p).0, Verdict::Drop(DropReason::NotOurs));
    let p = ip4(a4(R4), a4("198.19.0.99"), 17, udp(1, 2, b"hi"), 64, 0, 1);
    assert_eq!(run(&mut e, p).0, Verdict::Drop(DropReason::NotOurs));
}

#[test]
fn rfc7757_eam_for_ipv4_side_hosts_is_not_hairpinned() {
    // 198.51.100.0/28 = 2001:2:0:7::/124 maps IPv4-side servers: IPv6 clients address them by
    // the EAM IPv6 prefix, and the packet leaves as IPv4 (no hairpin back to IPv6).
    let mut c = config();
    c.eam.push(Eam {
        ipv4: "198.51.100.0/28".parse().unwrap(),
        ipv6: "2001:2:0:7::/124".parse().unwrap(),
    });
    let mut e = engine_with(c);
    let p = ip6(a6(H6), a6("2001:2:0:7::7"), 17, udp(1, 2, b"hi"), 64);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!((&o[12..16], &o[16..20]), (&a4(H4)[..], &a4(R4)[..]));
    // And back: the source takes the EAM form.
    let (v, o) = run(&mut e, ip4(a4(R4), a4(H4), 17, udp(2, 1, b"ho"), 64, 0, 1));
    assert_eq!(v, Verdict::Forward);
    assert_eq!(&o[8..24], &a6("2001:2:0:7::7"));
}

#[test]
fn rfc6052_3_1_well_known_prefix_refuses_non_global() {
    let mut e = engine_with(SiitConfig {
        prefix: Some("64:ff9b::/96".parse().unwrap()),
        pool4: vec![],
        rfc6791: None,
        ..config()
    });
    let p = ip6(a6(H6), a6("64:ff9b::c633:6407"), 17, udp(1, 2, b"hi"), 64);
    assert_eq!(
        run(&mut e, p).0,
        Verdict::Reply(DropReason::WellKnownPrefixNonGlobal)
    );
    let p = ip6(a6(H6), a6("64:ff9b::808:808"), 17, udp(1, 2, b"hi"), 64);
    assert_eq!(run(&mut e, p).0, Verdict::Forward);
}

#[test]
fn config_errors_name_the_key() {
    let bad = |c: EngineConfig| Engine::new(c).err().unwrap();
    let e = bad(EngineConfig::default());
    assert!(e.problem.contains("no translator"), "{e}");
    let e = bad(EngineConfig {
        siit: Some(SiitConfig {
            eam: vec![Eam {
                ipv4: "198.19.0.0/24".parse().unwrap(),
                ipv6: "2001:2:0:6::/124".parse().unwrap(),
            }],
            ..config()
        }),
        ..EngineConfig::default()
    });
    assert_eq!(e.key, "siit.eam");
    assert!(e.problem.contains("IPv4 suffix (8 bits) is longer"), "{e}");
    let e = bad(EngineConfig {
        siit: Some(config()),
        nat64: Some(Nat64Config {
            prefix: "2001:2:0:64::/96".parse().unwrap(),
            pool4: vec!["198.19.0.101/32".parse().unwrap()],
            ..Nat64Config::default()
        }),
        ..EngineConfig::default()
    });
    assert_eq!(e.key, "siit.prefix");
}

prop_compose! {
    fn v6_packet()(proto in prop::sample::select(vec![6u8, 17, 58]),
                   sport in 1u16.., dport in 1u16..,
                   tc in any::<u8>(), hop in 2u8..,
                   payload in proptest::collection::vec(any::<u8>(), 0..200),
                   dst_host in 0u8..=255)
        -> Vec<u8> {
        let l4 = match proto {
            6 => { let mut t = tcp(sport, dport, 0x18); t.extend_from_slice(&payload); t }
            17 => udp(sport, dport, &payload),
            _ => echo(128, sport, dport, &payload),
        };
        // Both ends are IPv4-translatable (siit.pool4 203.0.113.0/24 in the pref64).
        let src = a6("2001:2:0:64::cb00:7105");
        let mut p = ip6(src, a6(&format!("2001:2:0:64::cb00:71{dst_host:02x}")), proto, l4, hop);
        p[0] = 0x60 | (tc >> 4);
        p[1] = (tc & 0x0f) << 4; // flow label 0: RFC 7915 does not carry it
        p[2] = 0;
        p[3] = 0;
        p
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// RFC 7915: 6 -> 4 -> 6 (a hairpin through pool4 does both in one call) gives back the
    /// packet, hop limit one less (flow label is zero both times); checksums verify.
    #[test]
    fn siit_6to4to6_is_lossless(p in v6_packet()) {
        let mut e = engine();
        let mut q = p.clone();
        let v = e.process_vec(Time::from_secs(1), &mut q);
        prop_assert_eq!(v, Verdict::Forward);
        verify6(&q);
        let mut want = p.clone();
        want[7] -= 1;
        // ICMP/TCP/UDP checksums may differ only between the two one's-complement zeros.
        let ck = match p[6] { 6 => 40 + 16, 17 => 40 + 6, _ => 40 + 2 };
        let (a, b) = (u16::from_be_bytes([q[ck], q[ck + 1]]), u16::from_be_bytes([want[ck], want[ck + 1]]));
        prop_assert!(a == b || (a | b == 0xffff && (a == 0 || b == 0)), "checksum {a:#x} vs {b:#x}");
        q[ck] = want[ck];
        q[ck + 1] = want[ck + 1];
        prop_assert_eq!(q, want);
    }
}

/// RFC 1624 3: an ICMPv6 echo reply with identifier, sequence number and payload all zero
/// becomes an all-zero ICMPv4 echo reply, whose checksum is 0xffff (the full sum), not the
/// 0x0000 that eqn. 3 alone gives and that does not verify.
#[test]
fn rfc1624_all_zero_echo_reply_6to4_gets_checksum_0xffff() {
    let mut e = engine();
    let (v, o) = run(&mut e, ip6(a6(H6), a6(R6), 58, echo(129, 0, 0, b""), 64));
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!(&o[20..], &[0, 0, 0xff, 0xff, 0, 0, 0, 0]);
}

/// RFC 7915 4.1 / 5.1 (the translator is a router) and RFC 1812 5.3.7: martian sources and
/// destinations are not translated, on the lane (UDP) and on the general path (ICMP), in
/// both directions and for the IPv4 form of an IPv6 address (a pref64 address embedding
/// 127.0.0.1).
#[test]
fn rfc7915_martian_addresses_are_not_translated() {
    let mut e = engine();
    let drop = |v: Verdict| assert_eq!(v, Verdict::Drop(DropReason::MartianAddress));
    // IPv4 -> IPv6: loopback, this-network, link-local and multicast sources.
    for src in ["127.0.0.1", "0.0.0.7", "169.254.9.9", "224.0.0.5"] {
        drop(
            run(
                &mut e,
                ip4(a4(src), a4(H4), 17, udp(53, 5000, b"x"), 64, 0, 1),
            )
            .0,
        );
        drop(
            run(
                &mut e,
                ip4(a4(src), a4(H4), 1, echo(8, 1, 1, b"x"), 64, 0, 1),
            )
            .0,
        );
    }
    // IPv6 -> IPv4: link-local, loopback and multicast sources.
    for src in ["fe80::5", "::1", "ff02::1"] {
        drop(run(&mut e, ip6(a6(src), a6(R6), 17, udp(5000, 53, b"x"), 64)).0);
        drop(run(&mut e, ip6(a6(src), a6(R6), 58, echo(128, 1, 1, b"x"), 64)).0);
    }
    // IPv6 -> IPv4 to the pref64 form of 127.0.0.1 and of 255.255.255.255.
    for dst in ["2001:2:0:64::7f00:1", "2001:2:0:64::ffff:ffff"] {
        drop(run(&mut e, ip6(a6(H6), a6(dst), 17, udp(5000, 53, b"x"), 64)).0);
    }
    assert_eq!(
        e.stats().get("ipv6_to_ipv4") + e.stats().get("ipv4_to_ipv6"),
        0
    );
    assert_eq!(e.stats().get("martian_address"), 16);
}

/// RFC 791: no IPv4 total length says more than 65,535 bytes. An IPv6 fragment of 65,527
/// data bytes (payload length 65,535 with its Fragment header) would be 65,547 bytes as
/// IPv4: dropped with a reason, not sent with a total length that lies.
#[test]
fn rfc791_translation_longer_than_65535_is_dropped() {
    let mut e = engine();
    let mut l4 = vec![17u8, 0];
    l4.extend_from_slice(&((100u16 << 3) | 1).to_be_bytes());
    l4.extend_from_slice(&7u32.to_be_bytes());
    l4.extend(std::iter::repeat_n(0x5a, 65_527));
    let (v, _) = run(&mut e, ip6(a6(H6), a6(R6), 44, l4, 64));
    assert_eq!(v, Verdict::Drop(DropReason::TranslatedTooLong));
    // One byte less fits exactly: 20 + 65,515 (a multiple of 8) is within the limit.
    let mut l4 = vec![17u8, 0];
    l4.extend_from_slice(&((100u16 << 3) | 1).to_be_bytes());
    l4.extend_from_slice(&7u32.to_be_bytes());
    l4.extend(std::iter::repeat_n(0x5a, 65_512));
    let (v, o) = run(&mut e, ip6(a6(H6), a6(R6), 44, l4, 64));
    assert_eq!(v, Verdict::Forward);
    assert_eq!(u16::from_be_bytes([o[2], o[3]]), 20 + 65_512);
}

/// RFC 6946 4: an atomic fragment (Fragment header, offset 0, M clear) is a whole packet,
/// processed in isolation: an ICMPv6 echo in one leaves as an ICMPv4 echo whose checksum
/// verifies (its pseudo-header length is the message's), and an ICMPv6 error in one is
/// translated like any error instead of being dropped as a fragmented one.
#[test]
fn rfc6946_4_atomic_fragments_are_whole_packets() {
    let mut e = engine();
    let msg = echo(128, 0x77, 3, b"atomic fragment");
    let n = msg.len();
    let p = frags6(a6(H6), a6(R6), 58, msg, 0xabcd, &[n]).remove(0);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!((o[9], o[20]), (1, 8), "ICMPv4 echo request");
    assert_eq!(usize::from(u16::from_be_bytes([o[2], o[3]])), 20 + n);
    assert!(ready(&mut e).is_empty(), "nothing held for later fragments");

    let quoted = ip6(a6(R6), a6(H6), 17, udp(53, 5000, &[7; 100]), 60);
    let mut err = vec![2, 0, 0, 0, 0, 0, 0x05, 0xdc]; // Packet Too Big, MTU 1500
    err.extend_from_slice(&quoted);
    let n = err.len();
    let p = frags6(a6(H6), a6(R6), 58, err, 0xabce, &[n]).remove(0);
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!((o[20], o[21]), (3, 4), "Fragmentation Needed");
    assert_eq!(e.stats().get("fragmented_icmp_error"), 0);
}

/// An RFC 4884 extension structure (version 2, checksummed) with one object.
fn icmp_extension() -> Vec<u8> {
    let mut e = vec![0x20, 0, 0, 0, 0, 8, 1, 1, 0xde, 0xad, 0xbe, 0xef];
    let c = !fold(sum16(0, &e));
    e[2..4].copy_from_slice(&c.to_be_bytes());
    e
}

/// RFC 7915 4.2 / 5.2 with RFC 4884: an error's extension structure stays an extension
/// structure. The original datagram field is padded to the new family's boundary (at least
/// 128 octets), the structure follows it unchanged, and the length attribute says the new
/// field's length -- ICMPv4 Time Exceeded with a 128-octet field (attribute 32) becomes ICMPv6
/// Time Exceeded with a 152-octet one (148 padded to 64 bits: attribute 19), and an ICMPv6
/// Destination Unreachable with a 128-octet field (16) an ICMPv4 one with 128 octets (108
/// padded to the RFC's minimum: 32). A Packet Too Big has no attribute: no extension.
#[test]
fn rfc7915_4_2_5_2_rfc4884_extensions_follow_the_translated_quote() {
    let mut e = engine();
    let ext = icmp_extension();
    // IPv4 -> IPv6.
    let quoted = ip4(a4(H4), a4(R4), 17, udp(5000, 53, &[7; 100]), 63, 0x4000, 0);
    assert_eq!(quoted.len(), 128);
    let mut err = vec![11, 0, 0, 0, 0, 32, 0, 0];
    err.extend_from_slice(&quoted);
    err.extend_from_slice(&ext);
    let (v, o) = run(&mut e, ip4(a4(R4), a4(H4), 1, err, 64, 0, 9));
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!(
        (o[40], o[41], o[44]),
        (3, 0, 19),
        "Time Exceeded, attribute 19"
    );
    assert_eq!(o.len(), 40 + 8 + 152 + ext.len());
    assert_eq!(&o[48 + 148..48 + 152], &[0; 4], "zero padding");
    assert_eq!(&o[48 + 152..], &ext[..], "the structure unchanged");
    // IPv6 -> IPv4.
    let quoted = ip6(a6(R6), a6(H6), 17, udp(53, 5000, &[7; 80]), 60);
    assert_eq!(quoted.len(), 128);
    let mut err = vec![1, 4, 0, 0, 16, 0, 0, 0];
    err.extend_from_slice(&quoted);
    err.extend_from_slice(&ext);
    let (v, o) = run(&mut e, ip6(a6(H6), a6(R6), 58, err, 64));
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!(
        (o[20], o[21], o[25]),
        (3, 3, 32),
        "port unreachable, attribute 32"
    );
    assert_eq!(o.len(), 20 + 8 + 128 + ext.len());
    assert_eq!(
        &o[28 + 108..28 + 128],
        &[0; 20],
        "zero padding to 128 octets"
    );
    assert_eq!(&o[28 + 128..], &ext[..]);
    // Fragmentation Needed -> Packet Too Big: no attribute, so no structure.
    let quoted = ip4(a4(H4), a4(R4), 17, udp(5000, 53, &[7; 100]), 63, 0x4000, 0);
    let mut err = vec![3, 4, 0, 0, 0, 32, 0x05, 0xdc];
    err.extend_from_slice(&quoted);
    err.extend_from_slice(&ext);
    let (v, o) = run(&mut e, ip4(a4(R4), a4(H4), 1, err, 64, 0, 9));
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!((o[40], o[44]), (2, 0x00));
    assert_eq!(o.len(), 40 + 8 + 148, "the structure is left off");
}

/// `siit.rfc6791v6` (RFC 6791's rule the other way, Jool's `rfc6791v6`): with EAM entries
/// only, an ICMPv4 error from an IPv4 router that has no IPv6 form takes its source from the
/// prefix -- the same router, the same address -- instead of being dropped.
#[test]
fn rfc6791v6_gives_untranslatable_ipv4_routers_a_source() {
    let eam_only = |v6pool: Option<&str>| SiitConfig {
        prefix: None,
        eam: vec![
            Eam {
                ipv4: "198.19.0.0/28".parse().unwrap(),
                ipv6: "2001:2:0:6::/124".parse().unwrap(),
            },
            Eam {
                ipv4: "198.51.100.7/32".parse().unwrap(),
                ipv6: "2001:2:0:7::7/128".parse().unwrap(),
            },
        ],
        rfc6791v6: v6pool.map(|p| p.parse().unwrap()),
        ..SiitConfig::default()
    };
    let quoted = ip4(a4(H4), a4(R4), 17, udp(5000, 53, b"x"), 1, 0x4000, 0);
    let mut err = vec![11, 0, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&quoted);
    let p = ip4(a4("198.51.100.1"), a4(H4), 1, err, 64, 0, 9);
    let mut e = engine_with(eam_only(None));
    assert_eq!(
        run(&mut e, p.clone()).0,
        Verdict::Drop(DropReason::UntranslatableAddress)
    );
    let mut e = engine_with(eam_only(Some("2001:db8:6791::/96")));
    let (v, o) = run(&mut e, p.clone());
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!(
        &o[8..20],
        &a6("2001:db8:6791::")[..12],
        "source in the prefix"
    );
    assert_eq!(&o[24..40], &a6(H6)[..]);
    let (_, again) = run(&mut e, p);
    assert_eq!(
        &again[8..24],
        &o[8..24],
        "the same router, the same address"
    );
}

/// RFC 7915 5.4: an IPv6 packet SIIT discards because an address has no IPv4 form is answered
/// with ICMPv6 Destination Unreachable, code 3 (address unreachable), quoting it, from the
/// pref64 form of the RFC 6791 address; rate limited as every own error; never about an ICMPv6
/// error; counted under its drop reason and `icmp_errors_sent`; and silent with
/// `unreachable_errors = false`.
#[test]
fn rfc7915_5_4_untranslatable_ipv6_packet_gets_address_unreachable() {
    let mut e = engine();
    // The source 2001:db8::9 is in no EAM entry and outside the pref64.
    let p = ip6(a6("2001:db8::9"), a6(R6), 17, udp(5000, 53, b"who"), 64);
    let (v, o) = run(&mut e, p.clone());
    assert_eq!(v, Verdict::Reply(DropReason::UntranslatableAddress));
    verify6(&o);
    assert_eq!((o[6], o[40], o[41]), (58, 1, 3), "ICMPv6 1/3");
    assert_eq!(&o[8..24], &a6("2001:2:0:64::c000:201"));
    assert_eq!(&o[24..40], &a6("2001:db8::9"));
    assert_eq!(&o[48..], &p[..]);
    // An echo request (ping) too; an ICMPv6 error never.
    let p = ip6(a6("2001:db8::9"), a6(R6), 58, echo(128, 7, 1, b"ping"), 64);
    assert_eq!(
        run(&mut e, p).0,
        Verdict::Reply(DropReason::UntranslatableAddress)
    );
    let mut err = vec![1, 0, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&ip6(a6(R6), a6("2001:db8::9"), 17, udp(53, 5000, b"x"), 64));
    let p = ip6(a6("2001:db8::9"), a6(R6), 58, err, 64);
    // (the quoted packet's address has no IPv4 form either: dropped, never answered)
    assert_eq!(
        run(&mut e, p).0,
        Verdict::Drop(DropReason::UntranslatableAddress)
    );
    let st = e.stats();
    assert_eq!(
        (st.get("untranslatable_address"), st.get("icmp_errors_sent")),
        (3, 2)
    );
    // Rate limited: 50 in a burst at one instant, then dropped and counted.
    let mut burst = engine();
    let mut replies = 0;
    for i in 0..60u16 {
        let p = ip6(a6("2001:db8::9"), a6(R6), 17, udp(i, 53, b"x"), 64);
        if run(&mut burst, p).0 == Verdict::Reply(DropReason::UntranslatableAddress) {
            replies += 1;
        }
    }
    assert_eq!(replies, 50);
    assert_eq!(burst.stats().get("icmp_errors_rate_limited"), 10);
    assert_eq!(burst.stats().get("untranslatable_address"), 60);
    // Off: a silent drop, still counted.
    let mut off = engine_with(SiitConfig {
        params: XlatParams {
            unreachable_errors: false,
            ..XlatParams::default()
        },
        ..config()
    });
    let p = ip6(a6("2001:db8::9"), a6(R6), 17, udp(5000, 53, b"who"), 64);
    assert_eq!(
        run(&mut off, p).0,
        Verdict::Drop(DropReason::UntranslatableAddress)
    );
    assert_eq!(off.stats().get("icmp_errors_sent"), 0);
}

/// RFC 7915 4.4: an IPv4 packet SIIT discards because an address has no IPv6 form (here the
/// well-known prefix, which may not carry the private source, RFC 6052 3.1) is answered with
/// ICMPv4 Destination Unreachable, code 1 (host unreachable), quoting it; not about an ICMPv4
/// error, nor a non-first fragment.
#[test]
fn rfc7915_4_4_untranslatable_ipv4_packet_gets_host_unreachable() {
    let mut e = engine_with(SiitConfig {
        prefix: Some("64:ff9b::/96".parse().unwrap()),
        pool4: vec![],
        ..config()
    });
    let p = ip4(a4("10.0.0.1"), a4(H4), 17, udp(53, 5000, b"x"), 64, 0, 1);
    let (v, o) = run(&mut e, p.clone());
    assert_eq!(v, Verdict::Reply(DropReason::WellKnownPrefixNonGlobal));
    verify4(&o);
    assert_eq!((o[9], o[20], o[21]), (1, 3, 1), "ICMPv4 3/1");
    assert_eq!(
        (&o[12..16], &o[16..20]),
        (&a4("192.0.2.1")[..], &a4("10.0.0.1")[..])
    );
    assert_eq!(&o[28..], &p[..]);
    // A later fragment: no error.
    let p = raw4(a4("10.0.0.1"), a4(H4), 17, b"12345678", 64, 0x0001, 2, 0);
    assert_eq!(
        run(&mut e, p).0,
        Verdict::Drop(DropReason::WellKnownPrefixNonGlobal)
    );
    // An ICMPv4 error: no error about it.
    let mut err = vec![3, 1, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&ip4(a4(H4), a4("10.0.0.2"), 17, udp(1, 2, b"x"), 64, 0, 9));
    let p = ip4(a4("10.0.0.1"), a4(H4), 1, err, 64, 0, 3);
    assert!(matches!(run(&mut e, p).0, Verdict::Drop(_)));
}

/// The source of SIIT's own errors (`error_source4`, `error_source6`), apart from the RFC
/// 6791 pool, for the router errors of RFC 7915 4.1 / 5.1 and the errors of 4.4 / 5.4.
#[test]
fn rfc7915_4_4_5_4_own_errors_come_from_the_configured_source() {
    let mut e = engine_with(SiitConfig {
        params: XlatParams {
            error_source4: Some(u32::from_be_bytes(a4("198.51.100.254"))),
            error_source6: Some(u128::from_be_bytes(a6("2001:db8::fe"))),
            ..XlatParams::default()
        },
        ..config()
    });
    let (v, o) = run(
        &mut e,
        ip4(a4(R4), a4(H4), 17, udp(53, 5000, b"late"), 1, 0, 5),
    );
    assert_eq!(v, Verdict::Reply(DropReason::HopLimitExceeded));
    assert_eq!(&o[12..16], &a4("198.51.100.254"));
    let (v, o) = run(
        &mut e,
        ip6(a6("2001:db8::9"), a6(R6), 17, udp(5000, 53, b"who"), 64),
    );
    assert_eq!(v, Verdict::Reply(DropReason::UntranslatableAddress));
    verify6(&o);
    assert_eq!(&o[8..24], &a6("2001:db8::fe"));
}

/// RFC 7757 3.2: an EAM entry whose IPv6 suffix is longer than its IPv4 suffix (a /28 onto a
/// /120) translates both ways: the IPv4 suffix goes to the first bits after the IPv6 prefix,
/// the rest zero; back, bits beyond the IPv4 suffix's length are ignored.
#[test]
fn rfc7757_3_2_eam_suffixes_of_different_lengths() {
    let mut e = engine_with(SiitConfig {
        eam: vec![Eam {
            ipv4: "198.19.0.0/28".parse().unwrap(),
            ipv6: "2001:2:0:6::/120".parse().unwrap(),
        }],
        ..config()
    });
    // 198.19.0.5: suffix 0101 -> 0101 0000 after the /120.
    let (v, o) = run(
        &mut e,
        ip4(a4(R4), a4(H4), 17, udp(53, 5000, b"x"), 64, 0, 1),
    );
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!(&o[24..40], &a6("2001:2:0:6::50"));
    // 2001:2:0:6::5a -> 0101 (the 1010 beyond the IPv4 suffix ignored) = 198.19.0.5.
    let (v, o) = run(
        &mut e,
        ip6(a6("2001:2:0:6::5a"), a6(R6), 17, udp(5000, 53, b"x"), 64),
    );
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!(&o[12..16], &a4(H4));
}

/// RFC 7757 4: the three hairpinning modes for 2001:2:0:6::5 (198.19.0.5 by EAM) sending to
/// the pref64 form of 198.19.0.6 (2001:2:0:6::6 by EAM).
#[test]
fn rfc7757_4_eam_hairpin_modes() {
    let hairpin = || ip6(a6(H6), a6("2001:2:0:64::c613:6"), 17, udp(1, 2, b"hi"), 64);
    let with = |mode| {
        engine_with(SiitConfig {
            eam_hairpin: mode,
            ..config()
        })
    };
    // 4.3 intrinsic (the default): straight back to IPv6, the source in pref64 form.
    let mut e = with(EamHairpin::Intrinsic);
    let (v, o) = run(&mut e, hairpin());
    assert_eq!(v, Verdict::Forward);
    verify6(&o);
    assert_eq!(
        (&o[8..24], &o[24..40]),
        (&a6("2001:2:0:64::c613:5")[..], &a6("2001:2:0:6::6")[..])
    );
    assert_eq!(SiitConfig::default().eam_hairpin, EamHairpin::Intrinsic);
    // 4.2 simple: the packet leaves as IPv4 (the IPv4 routes bring it back) ...
    let mut e = with(EamHairpin::Simple);
    let (v, o) = run(&mut e, hairpin());
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    assert_eq!(
        (&o[12..16], &o[16..20]),
        (&a4(H4)[..], &a4("198.19.0.6")[..])
    );
    // ... and coming back, its source -- any IPv4 source -- takes the pref64 form, EAM or not.
    let (v, back) = run(&mut e, o.clone());
    assert_eq!(v, Verdict::Forward);
    verify6(&back);
    assert_eq!(
        (&back[8..24], &back[24..40]),
        (&a6("2001:2:0:64::c613:5")[..], &a6("2001:2:0:6::6")[..])
    );
    let (_, o) = run(
        &mut e,
        ip4(a4(R4), a4(H4), 17, udp(53, 5000, b"x"), 64, 0, 1),
    );
    assert_eq!(&o[8..24], &a6(R6));
    // Off: leaves as IPv4, and comes back with the EAM form of its source, which the
    // receiver never addressed (RFC 7757 4.1's problem).
    let mut e = with(EamHairpin::Off);
    let (v, o) = run(&mut e, hairpin());
    assert_eq!(v, Verdict::Forward);
    verify4(&o);
    let (_, back) = run(&mut e, o);
    assert_eq!(&back[8..24], &a6(H6));
    // A pool4 (IPv4-translatable) destination hairpins in every mode (RFC 7915 1.3).
    let p = ip6(
        a6(H6),
        a6("2001:2:0:64::cb00:7105"),
        17,
        udp(1, 2, b"hi"),
        64,
    );
    let (v, o) = run(&mut e, p);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(o[0] >> 4, 6);
    // Simple needs a pref64.
    let err = Engine::new(EngineConfig {
        siit: Some(SiitConfig {
            prefix: None,
            pool4: vec![],
            rfc6791: None,
            eam_hairpin: EamHairpin::Simple,
            ..config()
        }),
        ..EngineConfig::default()
    })
    .err()
    .unwrap();
    assert_eq!(err.key, "siit.eam_hairpin");
}

// ---- The XDP fast path (issue 25): SIIT's address-pair recipes against the engine ----
//
// `offload::apply_siit64` / `apply_siit46` are the reference model of what the XDP program
// does with a recipe; each test checks that the model makes of a packet exactly what the
// engine makes of it (checksums included), through the batch path whose lane hands out the
// recipes.

use xlat_engine::offload::{self, OffloadKind, OffloadOp};

/// A batch of one packet, as the daemon translates: SIIT's lane runs (and offloads).
fn lane(e: &mut Engine, now: Time, p: &[u8]) -> (Verdict, Vec<u8>) {
    let mut room = vec![0u8; HEADROOM + p.len() + HEADROOM];
    room[HEADROOM..HEADROOM + p.len()].copy_from_slice(p);
    let mut bufs = [PacketBuf::new(&mut room, HEADROOM, p.len()).unwrap()];
    let mut v = [Verdict::Held];
    e.process_batch(now, &mut bufs, &mut v);
    (v[0], bufs[0].data().to_vec())
}

fn offload_ops(e: &mut Engine) -> Vec<OffloadOp> {
    let mut v = Vec::new();
    e.drain_offload(&mut v);
    v
}

fn offloading() -> Engine {
    let mut e = engine();
    e.set_offload(true);
    e
}

/// Zeroes the identification and header checksum of an IPv4 packet: the fast path's
/// identification comes from its own counter (RFC 7739 5.3), the engine's from another.
fn masked(p: &[u8]) -> Vec<u8> {
    let mut p = p.to_vec();
    p[4..6].fill(0);
    p[10..12].fill(0);
    p
}

fn l4(proto: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    if proto == 6 {
        let mut t = tcp(sport, dport, 0x18);
        t.extend_from_slice(payload);
        t
    } else {
        udp(sport, dport, payload)
    }
}

#[test]
fn rfc7915_5_1_5_5_siit_recipe_6to4_equals_the_engine_eam_and_pref64() {
    for proto in [17u8, 6] {
        let mut e = offloading();
        let t = Time::from_secs(1);
        let first = ip6(a6(H6), a6(R6), proto, l4(proto, 5000, 53, b"first"), 64);
        assert_eq!(lane(&mut e, t, &first).0, Verdict::Forward);
        let v = offload_ops(&mut e);
        assert_eq!(v.len(), 1, "one recipe per pair and direction");
        assert_eq!(v[0].kind, OffloadKind::Install);
        assert_ne!(v[0].token & offload::TOKEN_SIIT, 0);
        let r = v[0].siit64().unwrap();
        // RFC 7757 3.2: the source by EAM; RFC 6052 2.3: the destination from the pref64.
        assert_eq!(r.new.src, u32::from_be_bytes(a4(H4)));
        assert_eq!(r.new.dst, u32::from_be_bytes(a4(R4)));
        // Any flow of the pair, TCP control segments included (SIIT keeps no TCP state).
        for (sport, dport, flags) in [(5000, 53, 0x18), (40000, 443, 0x02), (1, 65535, 0x11)] {
            let mut seg = l4(proto, sport, dport, b"payload bytes");
            if proto == 6 {
                seg[13] = flags;
            }
            let p = ip6(a6(H6), a6(R6), proto, seg, 64);
            let by_recipe = offload::apply_siit64(r, &p, 9).unwrap();
            let (verdict, by_engine) = lane(&mut e, t, &p);
            assert_eq!(verdict, Verdict::Forward);
            verify4(&by_recipe);
            verify4(&by_engine);
            assert_eq!(
                masked(&by_recipe),
                masked(&by_engine),
                "proto {proto} {sport}"
            );
            // RFC 7915 5.1: DF clear up to 1260 bytes, identification offset + counter.
            assert_eq!(by_recipe[6] & 0x40, 0);
            assert_eq!(
                u16::from_be_bytes([by_recipe[4], by_recipe[5]]),
                r.id_base.wrapping_add(9)
            );
        }
        // Above 1260 bytes: DF set, identification 0, byte for byte the engine's.
        let big = ip6(a6(H6), a6(R6), proto, l4(proto, 5, 6, &[0x5a; 1300]), 64);
        let by_recipe = offload::apply_siit64(r, &big, 9).unwrap();
        let (_, by_engine) = lane(&mut e, t, &big);
        assert_eq!(by_recipe, by_engine);
        assert_eq!(by_recipe[6] & 0x40, 0x40);
        assert!(offload_ops(&mut e).is_empty(), "installed already");
    }
}

#[test]
fn rfc7915_4_1_4_5_siit_recipe_4to6_equals_the_engine_eam_and_pref64() {
    for proto in [17u8, 6] {
        let mut e = offloading();
        let t = Time::from_secs(1);
        let first = ip4(
            a4(R4),
            a4(H4),
            proto,
            l4(proto, 53, 5000, b"x"),
            64,
            0x4000,
            3,
        );
        assert_eq!(lane(&mut e, t, &first).0, Verdict::Forward);
        let v = offload_ops(&mut e);
        assert_eq!(v.len(), 1);
        let r = v[0].siit46().unwrap();
        // RFC 6052 2.2: the source into the pref64; RFC 7757 3.2: the destination by EAM.
        assert_eq!(r.new.src, u128::from_be_bytes(a6(R6)));
        assert_eq!(r.new.dst, u128::from_be_bytes(a6(H6)));
        for (sport, dport, ff) in [(53, 5000, 0x4000), (80, 1, 0), (65535, 2, 0x4000)] {
            let p = ip4(
                a4(R4),
                a4(H4),
                proto,
                l4(proto, sport, dport, b"data"),
                9,
                ff,
                7,
            );
            let by_recipe = offload::apply_siit46(r, &p).unwrap();
            let (verdict, by_engine) = lane(&mut e, t, &p);
            assert_eq!(verdict, Verdict::Forward);
            verify6(&by_recipe);
            assert_eq!(by_recipe, by_engine, "proto {proto} {sport}");
        }
        // A corrupt header checksum is the engine's to judge (RFC 1812 5.2.2).
        let mut bad = ip4(a4(R4), a4(H4), proto, l4(proto, 53, 5000, b"x"), 64, 0, 3);
        bad[10] ^= 1;
        assert_eq!(offload::apply_siit46(r, &bad), None);
        // RFC 7915 4.1: longer than the lowest IPv6 MTU without DF: fragmented (engine).
        let big = ip4(a4(R4), a4(H4), proto, l4(proto, 1, 2, &[1; 1300]), 64, 0, 4);
        assert_eq!(offload::apply_siit46(r, &big), None);
        // With DF it fits the next hop (1500): translated whole, byte for byte the engine's
        // (its general path: the lane keeps to the lower limit).
        let big_df = ip4(
            a4(R4),
            a4(H4),
            proto,
            l4(proto, 1, 2, &[1; 1400]),
            64,
            0x4000,
            4,
        );
        let by_recipe = offload::apply_siit46(r, &big_df).unwrap();
        assert_eq!(by_recipe, lane(&mut e, t, &big_df).1);
        // Longer than the next hop with DF: Fragmentation Needed (engine).
        let too_big = ip4(
            a4(R4),
            a4(H4),
            proto,
            l4(proto, 1, 2, &[1; 1460]),
            64,
            0x4000,
            4,
        );
        assert_eq!(offload::apply_siit46(r, &too_big), None);
        // Fragments, TTL 1, another pair: not this recipe's.
        let frag = ip4(a4(R4), a4(H4), proto, l4(proto, 1, 2, b"x"), 64, 0x2000, 5);
        assert_eq!(offload::apply_siit46(r, &frag), None);
        let ttl1 = ip4(a4(R4), a4(H4), proto, l4(proto, 1, 2, b"x"), 1, 0, 5);
        assert_eq!(offload::apply_siit46(r, &ttl1), None);
        let other = ip4(
            a4(R4),
            a4("198.19.0.6"),
            proto,
            l4(proto, 1, 2, b"x"),
            9,
            0,
            5,
        );
        assert_eq!(offload::apply_siit46(r, &other), None);
    }
}

#[test]
fn rfc7915_4_5_siit_recipe_udp_zero_checksum() {
    let mut e = offloading();
    let t = Time::from_secs(1);
    lane(
        &mut e,
        t,
        &ip4(a4(R4), a4(H4), 17, udp(53, 5000, b"x"), 64, 0, 3),
    );
    let v = offload_ops(&mut e);
    let r = v[0].siit46().unwrap();
    // IPv4 without a UDP checksum: one is computed for IPv6 (4.5), by the engine.
    let mut zero = ip4(a4(R4), a4(H4), 17, udp(53, 5000, b"z"), 64, 0, 3);
    zero[26..28].fill(0);
    assert_eq!(offload::apply_siit46(r, &zero), None);
    // IPv6 -> IPv4: a zero stays zero, as the engine leaves it.
    lane(&mut e, t, &ip6(a6(H6), a6(R6), 17, udp(5000, 53, b"q"), 64));
    let v = offload_ops(&mut e);
    let r = v[0].siit64().unwrap();
    let mut zero6 = ip6(a6(H6), a6(R6), 17, udp(5000, 53, b"q"), 64);
    zero6[46..48].fill(0);
    let by_recipe = offload::apply_siit64(r, &zero6, 0).unwrap();
    let (_, by_engine) = lane(&mut e, t, &zero6);
    assert_eq!(masked(&by_recipe), masked(&by_engine));
    assert_eq!(&by_recipe[26..28], &[0, 0]);
    // A computed zero leaves as all ones (RFC 768): the model and the engine agree on every
    // checksum value a port sweep produces.
    for port in 0..2000u16 {
        let p = ip6(a6(H6), a6(R6), 17, udp(port, 53, b"q"), 64);
        let by_recipe = offload::apply_siit64(r, &p, 0).unwrap();
        let (_, by_engine) = lane(&mut e, t, &p);
        assert_eq!(masked(&by_recipe), masked(&by_engine), "port {port}");
    }
}

#[test]
fn rfc6052_2_2_siit_recipes_pref64_on_both_sides() {
    // 2001:2:0:64::cb00:7105 is 203.0.113.5 (siit.pool4) by the pref64 alone.
    let src6 = "2001:2:0:64::cb00:7105";
    let mut e = offloading();
    let t = Time::from_secs(1);
    let p = ip6(a6(src6), a6(R6), 6, tcp(1000, 80, 0x10), 64);
    let (_, by_engine) = lane(&mut e, t, &p);
    let v = offload_ops(&mut e);
    let r = v[0].siit64().unwrap();
    assert_eq!(r.new.src, u32::from_be_bytes(a4("203.0.113.5")));
    assert_eq!(
        masked(&offload::apply_siit64(r, &p, 0).unwrap()),
        masked(&by_engine)
    );
    let back = ip4(
        a4(R4),
        a4("203.0.113.5"),
        6,
        tcp(80, 1000, 0x10),
        64,
        0x4000,
        1,
    );
    let (_, by_engine) = lane(&mut e, t, &back);
    let v = offload_ops(&mut e);
    let r = v[0].siit46().unwrap();
    assert_eq!(offload::apply_siit46(r, &back).unwrap(), by_engine);
}

#[test]
fn rfc7915_siit_recipes_not_for_hairpins_icmp_fragments_or_untranslatable() {
    let mut e = offloading();
    let t = Time::from_secs(1);
    // RFC 7915 1.3 / RFC 7757 4.3: to the pref64 form of a pool4 address -- a hairpin.
    let hairpin = ip6(
        a6(H6),
        a6("2001:2:0:64::cb00:7105"),
        17,
        udp(1, 2, b"h"),
        64,
    );
    lane(&mut e, t, &hairpin);
    // ICMP, fragments, no mapping: the engine's path, never a recipe.
    lane(
        &mut e,
        t,
        &ip6(a6(H6), a6(R6), 58, echo(128, 1, 1, b"p"), 64),
    );
    lane(
        &mut e,
        t,
        &ip4(a4(R4), a4(H4), 17, udp(1, 2, b"f"), 64, 0x2000, 9),
    );
    lane(
        &mut e,
        t,
        &ip6(a6("2001:db8::1"), a6(R6), 17, udp(1, 2, b"u"), 64),
    );
    assert!(offload_ops(&mut e).is_empty());
}

#[test]
fn siit_recipes_expire_idle_and_reload_withdraws_them() {
    let mut e = offloading();
    lane(
        &mut e,
        Time::from_secs(1),
        &ip6(a6(H6), a6(R6), 17, udp(1, 2, b"a"), 64),
    );
    lane(
        &mut e,
        Time::from_secs(1),
        &ip4(a4(R4), a4(H4), 17, udp(2, 1, b"b"), 64, 0, 1),
    );
    assert_eq!(offload_ops(&mut e).len(), 2);
    assert_eq!(e.counters().count(Event::OffloadInstalled), 2);
    // Idle for a minute: the engine asks the fast path; one was used 10 s ago (kept), the
    // other never (withdrawn).
    let now = Time::from_secs(62);
    e.expire(now, 1024);
    let q = offload_ops(&mut e);
    assert_eq!(q.len(), 2);
    assert!(q.iter().all(|o| o.kind == OffloadKind::Query));
    assert!(!e.offload_seen(now, q[0].token, Some(Time::from_secs(52)), None));
    assert!(e.offload_seen(now, q[1].token, None, None));
    let r = offload_ops(&mut e);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].kind, OffloadKind::Remove);
    assert_eq!(r[0].recipes, q[1].recipes);
    // A reload of [siit] withdraws what is left (the mapping may have changed).
    let mut cfg = config();
    cfg.pool4.push("198.51.100.0/30".parse().unwrap());
    let new = EngineConfig {
        siit: Some(cfg),
        seed: 1,
        ..EngineConfig::default()
    };
    e.reconfigure(now, &new).unwrap();
    let w = offload_ops(&mut e);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].kind, OffloadKind::Remove);
    assert_eq!(w[0].recipes, q[0].recipes);
}
