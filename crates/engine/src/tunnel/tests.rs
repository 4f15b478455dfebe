//! Unit tests of the tunnel endpoints, through [`crate::Engine`] as the drivers use it.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::expect_used)]

use std::net::{Ipv4Addr, Ipv6Addr};

use xlat_wire::checksum;
use xlat_wire::ipv4::{self, Ipv4Fields, Ipv4Header};
use xlat_wire::ipv6::{self, nh, Ipv6Fields};

use super::*;
use crate::{DropReason, Engine, EngineConfig, Event, Time, Verdict};

const A4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const B4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const RELAY4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);

fn v6(s: &str) -> u128 {
    u128::from(s.parse::<Ipv6Addr>().unwrap())
}
fn v4(a: Ipv4Addr) -> u32 {
    u32::from(a)
}

fn six_engine(relay: Option<Ipv4Addr>, relay_router: bool) -> Engine {
    Engine::new(EngineConfig {
        tunnel: Some(TunnelConfig {
            sixtofour: Some(SixToFourConfig {
                ipv4: A4,
                relay,
                relay_router,
                params: TunnelParams::default(),
            }),
            isatap: None,
        }),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// An IPv6 UDP packet with `n` payload bytes (checksum left 0: the tunnel does not look).
fn udp6(src: u128, dst: u128, n: usize, tc: u8, hlim: u8) -> Vec<u8> {
    let mut p = vec![0u8; 40 + 8 + n];
    assert!(ipv6::write_header(
        &mut p,
        &Ipv6Fields {
            traffic_class: tc,
            flow_label: 7,
            payload_len: (8 + n) as u16,
            next_header: nh::UDP,
            hop_limit: hlim,
            src,
            dst,
        },
    ));
    p[40..42].copy_from_slice(&5000u16.to_be_bytes());
    p[42..44].copy_from_slice(&53u16.to_be_bytes());
    p[44..46].copy_from_slice(&((8 + n) as u16).to_be_bytes());
    for (i, b) in p[48..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

/// `inner` in an IPv4 protocol-41 header.
fn encap(src: Ipv4Addr, dst: Ipv4Addr, tos: u8, inner: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    assert!(ipv4::write_header(
        &mut p,
        &Ipv4Fields {
            tos,
            total_len: (20 + inner.len()) as u16,
            ident: 9,
            dont_fragment: false,
            more_fragments: false,
            frag_offset: 0,
            ttl: 60,
            proto: PROTO_IPV6,
            src: v4(src),
            dst: v4(dst),
        },
    ));
    p.extend_from_slice(inner);
    p
}

fn run(e: &mut Engine, p: &[u8]) -> (Verdict, Vec<u8>) {
    let mut v = p.to_vec();
    let verdict = e.process_vec(Time::from_secs(1), &mut v);
    (verdict, v)
}

#[test]
fn address_helpers() {
    assert_eq!(
        sixtofour::prefix48(v4(A4)),
        v6("2002:c612:2::"),
        "2002:V4ADDR::/48 (RFC 3056 2)"
    );
    assert_eq!(sixtofour::address(v4(A4)), v6("2002:c612:2::1"));
    assert_eq!(sixtofour::embedded(v6("2002:c612:102::5")), Some(v4(B4)));
    assert_eq!(sixtofour::embedded(v6("2001:db8::1")), None);
    // RFC 3964 5.3.1 refusals; the benchmarking range is accepted.
    for ok in [
        "198.18.0.2",
        "198.19.255.1",
        "192.0.2.1",
        "100.64.0.1",
        "8.8.8.8",
    ] {
        assert!(sixtofour::valid_v4(v4(ok.parse().unwrap())), "{ok}");
    }
    for bad in [
        "0.1.2.3",
        "10.1.2.3",
        "127.0.0.1",
        "169.254.1.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "224.0.0.1",
        "239.1.1.1",
        "240.0.0.1",
        "255.255.255.255",
    ] {
        assert!(!sixtofour::valid_v4(v4(bad.parse().unwrap())), "{bad}");
    }
    assert!(sixtofour::valid_v4(v4("172.32.0.1".parse().unwrap())));
    // RFC 5214 6.1: u/l bit set only for globally unique IPv4 addresses.
    assert_eq!(isatap::iid(v4(A4)), 0x0000_5efe_c612_0002);
    assert_eq!(isatap::iid(0x0808_0808), 0x0200_5efe_0808_0808);
    assert_eq!(isatap::link_local(v4(A4)), v6("fe80::5efe:c612:2"));
    assert_eq!(
        isatap::embedded(v6("2001:2:0:5:0:5efe:c612:102")),
        Some(v4(B4))
    );
    assert_eq!(
        isatap::embedded(v6("2001:2:0:5:200:5efe:808:808")),
        Some(0x0808_0808)
    );
    assert_eq!(isatap::embedded(v6("2001:2:0:5::1")), None);
}

#[test]
fn sixtofour_encapsulates_to_the_embedded_address() {
    let mut e = six_engine(None, false);
    let inner = udp6(v6("2002:c612:2::1"), v6("2002:c612:102::1"), 100, 0xb9, 17);
    let (v, out) = run(&mut e, &inner);
    assert_eq!(v, Verdict::Forward);
    let h = Ipv4Header::parse(&out, true).unwrap();
    assert_eq!((h.src, h.dst, h.proto, h.ttl), (v4(A4), v4(B4), 41, 64));
    assert_eq!(h.tos, 0xb9, "RFC 6040 4.1: DSCP and ECN copied");
    assert!(!h.dont_fragment, "RFC 4213 3.2.2: no DF up to 1280 bytes");
    assert_eq!(
        &out[20..],
        &inner[..],
        "inner packet untouched, hop limit included"
    );
    // Above 1280 bytes DF is set (dynamic MTU); a static MTU never sets it.
    let big = udp6(v6("2002:c612:2::1"), v6("2002:c612:102::1"), 1400, 0, 64);
    let (_, out) = run(&mut e, &big);
    assert!(Ipv4Header::parse(&out, true).unwrap().dont_fragment);
    assert_eq!(e.counters().count(Event::TunnelEncapsulated), 2);
}

#[test]
fn sixtofour_relay_and_refusals() {
    let mut e = six_engine(Some(RELAY4), false);
    let (v, out) = run(
        &mut e,
        &udp6(v6("2002:c612:2::1"), v6("2001:db8::1"), 8, 0, 64),
    );
    assert_eq!(v, Verdict::Forward);
    assert_eq!(Ipv4Header::parse(&out, true).unwrap().dst, v4(RELAY4));

    let mut e = six_engine(None, false);
    let cases = [
        (("2002:c612:2::1", "2001:db8::1"), DropReason::TunnelNoRelay),
        (
            ("2002:c612:2::1", "2002:0a00:1::1"),
            DropReason::Tunnel6to4AddressRefused,
        ),
        (
            ("2002:c612:2::1", "2002:c612:2:5::1"),
            DropReason::TunnelLoop,
        ),
        (
            ("2002:c612:3::1", "2002:c612:102::1"),
            DropReason::TunnelSpoofedSource,
        ),
        (
            ("2001:db8::1", "2002:c612:102::1"),
            DropReason::TunnelSpoofedSource,
        ),
        (
            ("fe80::1", "2002:c612:102::1"),
            DropReason::TunnelBadInnerAddress,
        ),
        (
            ("2002:c612:2::1", "ff02::16"),
            DropReason::TunnelBadInnerAddress,
        ),
    ];
    for ((s, d), r) in cases {
        assert_eq!(
            run(&mut e, &udp6(v6(s), v6(d), 8, 0, 64)).0,
            Verdict::Drop(r),
            "{s} -> {d}"
        );
    }
}

#[test]
fn too_big_for_the_tunnel_gets_packet_too_big() {
    let mut e = six_engine(None, false);
    let src = v6("2002:c612:2::10");
    let p = udp6(src, v6("2002:c612:102::1"), 1481 - 48, 0, 64);
    assert_eq!(p.len(), 1481);
    let (v, out) = run(&mut e, &p);
    assert_eq!(v, Verdict::Reply(DropReason::TooBig));
    let h = ipv6::Ipv6Header::parse(&out).unwrap();
    assert_eq!(
        (h.src, h.dst, h.proto),
        (v6("2002:c612:2::1"), src, nh::ICMPV6)
    );
    assert_eq!((out[40], out[41]), (2, 0));
    assert_eq!(u32::from_be_bytes(out[44..48].try_into().unwrap()), 1480);
    assert_eq!(
        &out[48..],
        &p[..1280 - 48],
        "quotes as much as fits in 1280 bytes"
    );
    let c = ipv6::upper_checksum(h.src, h.dst, nh::ICMPV6, &{
        let mut m = out[40..].to_vec();
        m[2] = 0;
        m[3] = 0;
        m
    });
    assert_eq!(u16::from_be_bytes([out[42], out[43]]), c);
}

#[test]
fn sixtofour_decapsulates_with_rfc3964_checks() {
    let mut e = six_engine(Some(RELAY4), false);
    let inner = udp6(v6("2002:c612:102::1"), v6("2002:c612:2::1"), 20, 0, 63);
    let (v, out) = run(&mut e, &encap(B4, A4, 0, &inner));
    assert_eq!(v, Verdict::Forward);
    assert_eq!(out, inner);
    // Native source through the configured relay.
    let inner = udp6(v6("2001:db8::1"), v6("2002:c612:2::1"), 20, 0, 63);
    assert_eq!(
        run(&mut e, &encap(RELAY4, A4, 0, &inner)).0,
        Verdict::Forward
    );
    let cases: [(Ipv4Addr, &str, &str, DropReason); 7] = [
        (
            B4,
            "2002:c612:103::1",
            "2002:c612:2::1",
            DropReason::TunnelSpoofedSource,
        ),
        (
            B4,
            "2001:db8::1",
            "2002:c612:2::1",
            DropReason::TunnelSpoofedSource,
        ),
        (
            B4,
            "2002:c612:102::1",
            "2002:c612:3::1",
            DropReason::TunnelWrongDestination,
        ),
        (
            B4,
            "2002:c612:102::1",
            "2001:db8::9",
            DropReason::TunnelWrongDestination,
        ),
        (
            Ipv4Addr::new(10, 0, 0, 1),
            "2002:a00:1::1",
            "2002:c612:2::1",
            DropReason::Tunnel6to4AddressRefused,
        ),
        (
            B4,
            "fe80::1",
            "2002:c612:2::1",
            DropReason::TunnelBadInnerAddress,
        ),
        (
            B4,
            "2002:c612:102::1",
            "ff02::1",
            DropReason::TunnelBadInnerAddress,
        ),
    ];
    for (o, s, d, r) in cases {
        let p = encap(o, A4, 0, &udp6(v6(s), v6(d), 8, 0, 64));
        assert_eq!(run(&mut e, &p).0, Verdict::Drop(r), "{o} {s} -> {d}");
    }
    // A relay router takes native destinations.
    let mut r = six_engine(None, true);
    let p = encap(
        B4,
        A4,
        0,
        &udp6(v6("2002:c612:102::1"), v6("2001:db8::9"), 8, 0, 64),
    );
    assert_eq!(run(&mut r, &p).0, Verdict::Forward);
    // Not an IPv6 packet inside.
    let mut bad = udp6(v6("2002:c612:102::1"), v6("2002:c612:2::1"), 8, 0, 64);
    bad[0] = 0x45;
    assert_eq!(
        run(&mut e, &encap(B4, A4, 0, &bad)).0,
        Verdict::Drop(DropReason::TunnelBadInnerPacket)
    );
    let p = encap(
        B4,
        A4,
        0,
        &udp6(v6("2002:c612:102::1"), v6("2002:c612:2::1"), 8, 0, 64),
    );
    assert_eq!(
        run(&mut e, &p[..50]).0,
        Verdict::Drop(DropReason::BadTotalLength)
    );
}

#[test]
fn ecn_is_combined_per_rfc6040() {
    let mut e = six_engine(None, false);
    let ect0 = udp6(v6("2002:c612:102::1"), v6("2002:c612:2::1"), 8, 0xa2, 64);
    let (v, out) = run(&mut e, &encap(B4, A4, 0x03, &ect0));
    assert_eq!(v, Verdict::Forward);
    assert_eq!(
        (out[0], out[1] >> 4),
        (0x6a, 0x3),
        "CE set on the inner header"
    );
    let not_ect = udp6(v6("2002:c612:102::1"), v6("2002:c612:2::1"), 8, 0xa0, 64);
    assert_eq!(
        run(&mut e, &encap(B4, A4, 0x03, &not_ect)).0,
        Verdict::Drop(DropReason::TunnelEcnNotEct)
    );
}

/// An ICMPv4 error from `from` to A4 quoting `quoted` (cut to `quote` bytes).
fn icmp4_error(from: Ipv4Addr, ty: u8, code: u8, mtu: u16, quoted: &[u8], quote: usize) -> Vec<u8> {
    let q = &quoted[..quote.min(quoted.len())];
    let mut p = vec![0u8; 28];
    p.extend_from_slice(q);
    assert!(ipv4::write_header(
        &mut p,
        &Ipv4Fields {
            tos: 0,
            total_len: (28 + q.len()) as u16,
            ident: 1,
            dont_fragment: false,
            more_fragments: false,
            frag_offset: 0,
            ttl: 64,
            proto: 1,
            src: v4(from),
            dst: v4(A4),
        },
    ));
    p[20] = ty;
    p[21] = code;
    p[26..28].copy_from_slice(&mtu.to_be_bytes());
    let c = checksum::checksum(&p[20..]);
    p[22..24].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn icmpv4_errors_are_relayed_as_icmpv6() {
    let mut e = six_engine(None, false);
    let src = v6("2002:c612:2::10");
    let sent = {
        let (_, out) = run(&mut e, &udp6(src, v6("2002:c612:102::1"), 1400, 0, 64));
        out
    };
    let rtr = Ipv4Addr::new(198, 18, 0, 1);
    // Fragmentation needed, next-hop MTU 1400: Packet Too Big 1380 (RFC 4213 3.2.2, 3.4).
    let (v, out) = run(&mut e, &icmp4_error(rtr, 3, 4, 1400, &sent, 548));
    assert_eq!(v, Verdict::Forward);
    let h = ipv6::Ipv6Header::parse(&out).unwrap();
    assert_eq!((h.src, h.dst), (v6("2002:c612:2::1"), src));
    assert_eq!((out[40], out[41]), (2, 0));
    assert_eq!(u32::from_be_bytes(out[44..48].try_into().unwrap()), 1380);
    assert_eq!(
        &out[48..],
        &sent[20..548],
        "quotes the IPv6 packet the router quoted"
    );
    // Below 1280 the MTU stays 1280.
    let (_, out) = run(&mut e, &icmp4_error(rtr, 3, 4, 576, &sent, 548));
    assert_eq!(u32::from_be_bytes(out[44..48].try_into().unwrap()), 1280);
    // Host unreachable and TTL exceeded: address unreachable (RFC 4213 3.3, 3.4).
    for (ty, code, want) in [
        (3u8, 1u8, (1u8, 3u8)),
        (11, 0, (1, 3)),
        (3, 13, (1, 1)),
        (3, 2, (1, 3)),
    ] {
        let (v, out) = run(&mut e, &icmp4_error(rtr, ty, code, 0, &sent, 100));
        assert_eq!(v, Verdict::Forward, "{ty}/{code}");
        assert_eq!((out[40], out[41]), want, "{ty}/{code}");
    }
    assert_eq!(e.counters().count(Event::TunnelIcmpRelayed), 6);
    // Too short a quote (8 bytes of the IPv6 header), parameter problem, reassembly timeout.
    let cases = [
        (
            icmp4_error(rtr, 3, 1, 0, &sent, 28),
            DropReason::TunnelIcmpTooShort,
        ),
        (
            icmp4_error(rtr, 12, 0, 0, &sent, 100),
            DropReason::TunnelIcmpNotRelayed,
        ),
        (
            icmp4_error(rtr, 11, 1, 0, &sent, 100),
            DropReason::TunnelIcmpNotRelayed,
        ),
    ];
    for (p, r) in cases {
        assert_eq!(run(&mut e, &p).0, Verdict::Drop(r));
    }
    // Not about our tunnel packets: back to the kernel unchanged.
    for p in [
        icmp4_error(rtr, 5, 0, 0, &sent, 100),
        icmp4_error(rtr, 3, 1, 0, &encap(B4, RELAY4, 0, &sent[20..]), 100),
    ] {
        assert_eq!(run(&mut e, &p), (Verdict::Forward, p.clone()));
    }
    let mut bad = icmp4_error(rtr, 3, 1, 0, &sent, 100);
    bad[30] ^= 1;
    assert_eq!(
        run(&mut e, &bad).0,
        Verdict::Drop(DropReason::IcmpErrorBadChecksum)
    );
}

#[test]
fn other_icmp_to_the_endpoint_goes_to_the_kernel() {
    let mut e = six_engine(None, false);
    let p = icmp4_error(B4, 8, 0, 0x0102, b"ping-data", 9);
    assert_eq!(run(&mut e, &p), (Verdict::Forward, p.clone()));
    assert_eq!(e.counters().count(Event::TunnelIcmpPassed), 1);
    // Link padding after the total length is not passed on with it (a fuzz finding: the
    // passed packet's length field disagreed with its size).
    let mut padded = p.clone();
    padded.extend_from_slice(&[0; 6]);
    assert_eq!(run(&mut e, &padded), (Verdict::Forward, p.clone()));
}

#[test]
fn fragments_are_reassembled_before_decapsulation() {
    let mut e = six_engine(None, false);
    let inner = udp6(v6("2002:c612:102::1"), v6("2002:c612:2::1"), 1000, 0, 64);
    let whole = encap(B4, A4, 0, &inner);
    let frag = |off: usize, data: &[u8], more: bool| {
        let mut p = vec![0u8; 20];
        assert!(ipv4::write_header(
            &mut p,
            &Ipv4Fields {
                tos: 0,
                total_len: (20 + data.len()) as u16,
                ident: 77,
                dont_fragment: false,
                more_fragments: more,
                frag_offset: (off / 8) as u16,
                ttl: 60,
                proto: PROTO_IPV6,
                src: v4(B4),
                dst: v4(A4),
            },
        ));
        p.extend_from_slice(data);
        p
    };
    let payload = &whole[20..];
    let (a, b) = payload.split_at(512);
    // Last fragment first.
    assert_eq!(run(&mut e, &frag(512, b, false)).0, Verdict::Held);
    assert!(e.pop_ready().is_none());
    assert_eq!(run(&mut e, &frag(0, a, true)).0, Verdict::Held);
    assert_eq!(e.pop_ready().unwrap(), inner);
    assert_eq!(e.counters().count(Event::TunnelReassembled), 1);
    // Overlap abandons the datagram.
    assert_eq!(run(&mut e, &frag(0, a, true)).0, Verdict::Held);
    assert_eq!(
        run(&mut e, &frag(504, b, false)).0,
        Verdict::Drop(DropReason::TunnelReassemblyInvalid)
    );
    // A lone fragment times out.
    assert_eq!(run(&mut e, &frag(0, a, true)).0, Verdict::Held);
    e.expire(Time::from_secs(40), 1000);
    assert_eq!(e.counters().dropped(DropReason::TunnelReassemblyTimeout), 1);
}

fn isatap_engine(role: IsatapRole, ipv4: Ipv4Addr) -> Engine {
    Engine::new(EngineConfig {
        tunnel: Some(TunnelConfig {
            sixtofour: None,
            isatap: Some(IsatapConfig {
                ipv4,
                role,
                params: TunnelParams::default(),
            }),
        }),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

const RTR4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const HOST4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);

fn router() -> Engine {
    isatap_engine(
        IsatapRole::Router {
            prefix: "2001:2:0:5::/64".parse().unwrap(),
            lifetime: 1800,
        },
        RTR4,
    )
}

fn host() -> Engine {
    isatap_engine(
        IsatapRole::Host {
            routers: vec![RTR4],
        },
        HOST4,
    )
}

#[test]
fn isatap_host_solicits_and_router_advertises() {
    let mut h = host();
    let mut r = router();
    // A router has no timer; a host's first solicitation is due at once.
    assert_eq!(r.poll_timeout(Time::from_secs(1)), None);
    assert_eq!(h.poll_timeout(Time::from_secs(1)), Some(Time::from_secs(1)));
    // The first timer run sends a Router Solicitation to the PRL router.
    h.expire(Time::from_secs(1), 1000);
    // The next is due in 4 s (RFC 4861 6.3.7's RTR_SOLICITATION_INTERVAL).
    assert_eq!(h.poll_timeout(Time::from_secs(1)), Some(Time::from_secs(5)));
    let rs = h.pop_ready().expect("a router solicitation");
    assert!(h.pop_ready().is_none());
    let oh = Ipv4Header::parse(&rs, true).unwrap();
    assert_eq!((oh.src, oh.dst, oh.proto), (v4(HOST4), v4(RTR4), 41));
    let ih = ipv6::Ipv6Header::parse(&rs[20..]).unwrap();
    assert_eq!(
        (ih.src, ih.dst, ih.hop_limit),
        (v6("fe80::5efe:c612:102"), v6("fe80::5efe:c612:1"), 255)
    );
    assert_eq!(rs[60], 133);
    // Not again before 4 s; again after.
    h.expire(Time::from_secs(3), 1000);
    assert!(h.pop_ready().is_none());
    h.expire(Time::from_secs(5), 1000);
    assert!(h.pop_ready().is_some());

    // The router answers with a unicast advertisement of its prefix.
    let (v, ra) = run(&mut r, &rs);
    assert_eq!(v, Verdict::Forward);
    let oh = Ipv4Header::parse(&ra, true).unwrap();
    assert_eq!((oh.src, oh.dst, oh.proto), (v4(RTR4), v4(HOST4), 41));
    let ih = ipv6::Ipv6Header::parse(&ra[20..]).unwrap();
    assert_eq!(
        (ih.src, ih.dst, ih.hop_limit, ih.proto),
        (
            v6("fe80::5efe:c612:1"),
            v6("fe80::5efe:c612:102"),
            255,
            nh::ICMPV6
        )
    );
    let m = &ra[60..];
    assert_eq!(
        (m[0], m[1], u16::from_be_bytes([m[6], m[7]])),
        (134, 0, 1800)
    );
    let sum = checksum::sum(
        m,
        ipv6::pseudo_header_sum(ih.src, ih.dst, m.len() as u32, 58),
    );
    assert_eq!(checksum::fold(sum), 0xffff);
    assert_eq!((m[16], m[17], m[18], m[19]), (3, 4, 64, 0xc0));
    assert_eq!(ipv6::addr_at(m, 32), Some(v6("2001:2:0:5::")));
    assert_eq!((m[48], m[49]), (5, 1));
    assert_eq!(u32::from_be_bytes(m[52..56].try_into().unwrap()), 1480);
    assert_eq!(r.counters().count(Event::IsatapRaSent), 1);

    // The host learns prefix and router.
    assert_eq!(h.tunnel_status().unwrap(), TunnelStatus::default());
    let (v, _) = run(&mut h, &ra);
    assert_eq!(v, Verdict::Held);
    let st = h.tunnel_status().unwrap();
    assert_eq!(st.isatap_prefix, Some("2001:2:0:5::/64".parse().unwrap()));
    assert_eq!(st.isatap_address, Some(v6("2001:2:0:5::5efe:c612:102")));
    assert_eq!(st.isatap_router, Some(RTR4));

    // Host sending: on-link ISATAP destinations directly, others to the router.
    let me = v6("2001:2:0:5::5efe:c612:102");
    let (v, out) = run(&mut h, &udp6(me, v6("2001:2:0:5::5efe:c612:203"), 8, 0, 64));
    assert_eq!(v, Verdict::Forward);
    assert_eq!(Ipv4Header::parse(&out, true).unwrap().dst, 0xc612_0203);
    let (_, out) = run(&mut h, &udp6(me, v6("2001:2:0:6::1"), 8, 0, 64));
    assert_eq!(Ipv4Header::parse(&out, true).unwrap().dst, v4(RTR4));
    assert_eq!(
        run(&mut h, &udp6(me, v6("2001:2:0:5::1"), 8, 0, 64)).0,
        Verdict::Drop(DropReason::IsatapNoNextHop)
    );
    assert_eq!(
        run(&mut h, &udp6(me, v6("ff02::16"), 8, 0, 1)).0,
        Verdict::Drop(DropReason::TunnelBadInnerAddress)
    );
    // Router sending to the host.
    let (v, out) = run(&mut r, &udp6(v6("2001:2:0:6::1"), me, 8, 0, 64));
    assert_eq!(v, Verdict::Forward);
    assert_eq!(Ipv4Header::parse(&out, true).unwrap().dst, v4(HOST4));
    assert_eq!(
        run(
            &mut r,
            &udp6(v6("2001:2:0:6::1"), v6("2001:2:0:7::1"), 8, 0, 64)
        )
        .0,
        Verdict::Drop(DropReason::NotOurs)
    );
}

#[test]
fn isatap_decapsulation_checks_rfc5214_7_3() {
    let mut h = host();
    let mut r = router();
    let me = v6("fe80::5efe:c612:102");
    // Host, before any RA: off-link destinations have no router.
    assert_eq!(
        run(&mut h, &udp6(me, v6("2001:2:0:6::1"), 8, 0, 64)).0,
        Verdict::Drop(DropReason::IsatapNoRouter)
    );
    // From the PRL router, any source; from others only their own ISATAP address.
    let p = encap(RTR4, HOST4, 0, &udp6(v6("2001:2:0:6::1"), me, 8, 0, 64));
    assert_eq!(run(&mut h, &p).0, Verdict::Forward);
    let other = Ipv4Addr::new(198, 18, 2, 3);
    let p = encap(
        other,
        HOST4,
        0,
        &udp6(v6("fe80::5efe:c612:203"), me, 8, 0, 64),
    );
    assert_eq!(run(&mut h, &p).0, Verdict::Forward);
    let p = encap(
        other,
        HOST4,
        0,
        &udp6(v6("fe80::5efe:c612:204"), me, 8, 0, 64),
    );
    assert_eq!(
        run(&mut h, &p).0,
        Verdict::Drop(DropReason::TunnelSpoofedSource)
    );
    let p = encap(other, HOST4, 0, &udp6(v6("2001:2:0:6::1"), me, 8, 0, 64));
    assert_eq!(
        run(&mut h, &p).0,
        Verdict::Drop(DropReason::TunnelSpoofedSource)
    );
    // A host takes only its own addresses.
    let p = encap(
        RTR4,
        HOST4,
        0,
        &udp6(v6("2001:2:0:6::1"), v6("fe80::5efe:c612:105"), 8, 0, 64),
    );
    assert_eq!(
        run(&mut h, &p).0,
        Verdict::Drop(DropReason::TunnelWrongDestination)
    );
    // Router: hosts with ISATAP sources; RAs are not for routers.
    let p = encap(
        HOST4,
        RTR4,
        0,
        &udp6(
            v6("2001:2:0:5::5efe:c612:102"),
            v6("2001:2:0:6::1"),
            8,
            0,
            64,
        ),
    );
    assert_eq!(run(&mut r, &p).0, Verdict::Forward);
    let p = encap(
        HOST4,
        RTR4,
        0,
        &udp6(
            v6("2001:2:0:5::5efe:c612:103"),
            v6("2001:2:0:6::1"),
            8,
            0,
            64,
        ),
    );
    assert_eq!(
        run(&mut r, &p).0,
        Verdict::Drop(DropReason::TunnelSpoofedSource)
    );
}

#[test]
fn isatap_nd_validation() {
    let mut h = host();
    let mut r = router();
    h.expire(Time::from_secs(1), 1000);
    let rs = h.pop_ready().unwrap();
    // Hop limit below 255: forwarded from elsewhere, invalid (RFC 4861 6.1.1).
    let mut bad = rs.clone();
    bad[27] = 254;
    assert_eq!(
        run(&mut r, &bad).0,
        Verdict::Drop(DropReason::IsatapInvalidNd)
    );
    let mut bad = rs.clone();
    bad[62] ^= 0xff;
    assert_eq!(
        run(&mut r, &bad).0,
        Verdict::Drop(DropReason::IsatapInvalidNd)
    );
    // An RA from a router not in the PRL is ignored.
    let (_, ra) = run(&mut r, &rs);
    let mut other = ra.clone();
    other[12..16].copy_from_slice(&[198, 18, 0, 9]);
    ipv4::fill_checksum(&mut other, 20);
    let v = run(&mut h, &other).0;
    assert_eq!(v, Verdict::Drop(DropReason::TunnelSpoofedSource));
    assert_eq!(h.tunnel_status().unwrap().isatap_prefix, None);
}

#[test]
fn config_validation() {
    let ok = TunnelConfig {
        sixtofour: Some(SixToFourConfig {
            ipv4: A4,
            relay: Some(RELAY4),
            relay_router: false,
            params: TunnelParams::default(),
        }),
        isatap: Some(IsatapConfig {
            ipv4: RTR4,
            role: IsatapRole::Router {
                prefix: "2001:2:0:5::/64".parse().unwrap(),
                lifetime: 1800,
            },
            params: TunnelParams::default(),
        }),
    };
    assert_eq!(ok.validate(), Ok(()));
    let key = |c: TunnelConfig| c.validate().unwrap_err().key;
    let mut c = ok.clone();
    c.sixtofour.as_mut().unwrap().ipv4 = Ipv4Addr::new(192, 168, 1, 1);
    assert_eq!(key(c), "tunnel.6to4.ipv4");
    let mut c = ok.clone();
    c.sixtofour.as_mut().unwrap().relay = Some(A4);
    assert_eq!(key(c), "tunnel.6to4.relay");
    let mut c = ok.clone();
    c.sixtofour.as_mut().unwrap().params.mtu = 1000;
    assert_eq!(key(c), "tunnel.6to4.mtu");
    let mut c = ok.clone();
    c.isatap.as_mut().unwrap().role = IsatapRole::Router {
        prefix: "2001:2::/48".parse().unwrap(),
        lifetime: 1800,
    };
    assert_eq!(key(c), "tunnel.isatap.prefix");
    let mut c = ok.clone();
    c.isatap.as_mut().unwrap().role = IsatapRole::Host { routers: vec![] };
    assert_eq!(key(c), "tunnel.isatap.routers");
    let mut c = ok.clone();
    c.isatap.as_mut().unwrap().ipv4 = A4;
    assert_eq!(key(c), "tunnel.isatap.ipv4");
}

#[test]
fn hostile_input_never_panics() {
    let mut e = six_engine(Some(RELAY4), true);
    let mut h = host();
    let mut r = router();
    let seeds = [
        encap(
            B4,
            A4,
            0,
            &udp6(v6("2002:c612:102::1"), v6("2002:c612:2::1"), 40, 0, 64),
        ),
        icmp4_error(
            B4,
            3,
            4,
            1300,
            &encap(
                A4,
                B4,
                0,
                &udp6(v6("2002:c612:2::1"), v6("2002:c612:102::1"), 40, 0, 64),
            ),
            200,
        ),
        encap(
            HOST4,
            RTR4,
            0,
            &udp6(v6("fe80::5efe:c612:102"), v6("ff02::2"), 16, 0, 255),
        ),
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..4000 {
        for s in &seeds {
            let mut p = s.clone();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % p.len();
                p[i] = (x >> 32) as u8;
            }
            let cut = (x as usize >> 8) % (p.len() + 1);
            let p = &p[..cut.max(1)];
            for eng in [&mut e, &mut h, &mut r] {
                let mut v = p.to_vec();
                let _ = eng.process_vec(Time::from_secs(1), &mut v);
                let mut v6p = p.to_vec();
                if let Some(b) = v6p.first_mut() {
                    *b = 0x60 | (*b & 0x0f);
                }
                let _ = eng.process_vec(Time::from_secs(1), &mut v6p);
            }
        }
    }
}
