//! NAT44 behaviour, rule by rule, through the public engine API. Packets are built here with
//! full checksums; every translated packet is checked with a full (not incremental) checksum
//! verification, an oracle independent of the engine's RFC 1624 updates.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::Ipv4Addr;

use xlat_engine::*;

mod common;
use common::{ip4, tcp, udp, verify4};
use xlat_wire::checksum;

const IN_A: [u8; 4] = [198, 18, 0, 20];
const IN_B: [u8; 4] = [198, 18, 0, 21];
const STATIC_IN: [u8; 4] = [198, 18, 0, 10];
const STATIC_OUT: [u8; 4] = [198, 19, 0, 10];
const POOL: [u8; 4] = [198, 19, 0, 100];
const R1: [u8; 4] = [198, 19, 0, 2];
const R2: [u8; 4] = [198, 19, 0, 3];

fn cfg(mode: Nat44Mode, filtering: Filtering) -> Nat44Config {
    Nat44Config {
        inside: vec!["198.18.0.0/24".parse().unwrap()],
        pool: vec!["198.19.0.100/32".parse().unwrap()],
        mode,
        statics: vec![StaticEntry {
            inside: Ipv4Addr::from(STATIC_IN),
            outside: Ipv4Addr::from(STATIC_OUT),
        }],
        filtering,
        ..Nat44Config::default()
    }
}

fn engine(c: Nat44Config) -> Engine {
    Engine::new(EngineConfig {
        nat44: Some(c),
        seed: 7,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn napt() -> Engine {
    engine(cfg(Nat44Mode::Napt, Filtering::AddressDependent))
}

/// This file's IPv4 packets: TTL 64, checksums filled (`common::ip4`).
fn ip(src: [u8; 4], dst: [u8; 4], proto: u8, l4: Vec<u8>, frag: u16, ident: u16) -> Vec<u8> {
    ip4(src, dst, proto, l4, 64, frag, ident)
}

/// An echo message with an 8-byte payload.
fn echo(kind: u8, id: u16, seq: u16) -> Vec<u8> {
    common::echo(kind, id, seq, b"abcdefgh")
}

fn udp_pkt(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    ip(src, dst, 17, udp(sport, dport, b"hello"), 0, 1)
}

fn tcp_pkt(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, flags: u8) -> Vec<u8> {
    ip(src, dst, 6, tcp(sport, dport, flags), 0x4000, 2)
}

struct Out {
    bytes: Vec<u8>,
}

impl Out {
    fn src(&self) -> [u8; 4] {
        self.bytes[12..16].try_into().unwrap()
    }
    fn dst(&self) -> [u8; 4] {
        self.bytes[16..20].try_into().unwrap()
    }
    fn sport(&self) -> u16 {
        u16::from_be_bytes([self.bytes[20], self.bytes[21]])
    }
    fn dport(&self) -> u16 {
        u16::from_be_bytes([self.bytes[22], self.bytes[23]])
    }
    fn icmp_id(&self) -> u16 {
        u16::from_be_bytes([self.bytes[24], self.bytes[25]])
    }
}

fn fwd(e: &mut Engine, t: u64, mut p: Vec<u8>) -> Out {
    match e.process_vec(Time::from_secs(t), &mut p) {
        Verdict::Forward => Out { bytes: p },
        v => panic!("expected Forward, got {v:?}"),
    }
}

fn dropped(e: &mut Engine, t: u64, mut p: Vec<u8>) -> DropReason {
    match e.process_vec(Time::from_secs(t), &mut p) {
        Verdict::Drop(r) => r,
        v => panic!("expected Drop, got {v:?}"),
    }
}

#[test]
fn rfc3022_napt_udp_out_and_back_with_port_preservation() {
    let mut e = napt();
    let o = fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    assert_eq!(
        (o.src(), o.sport(), o.dst(), o.dport()),
        (POOL, 40000, R1, 53)
    );
    verify4(&o.bytes);
    let back = fwd(&mut e, 1, udp_pkt(R1, 53, POOL, 40000));
    assert_eq!((back.src(), back.dst(), back.dport()), (R1, IN_A, 40000));
    verify4(&back.bytes);
    assert_eq!(e.counters().count(Event::PortsPreserved), 1);
}

#[test]
fn rfc4787_req1_endpoint_independent_mapping() {
    let mut e = napt();
    let a = fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    let b = fwd(&mut e, 0, udp_pkt(IN_A, 40000, R2, 9999));
    assert_eq!((a.src(), a.sport()), (b.src(), b.sport()));
    assert_eq!(e.stats().mappings, 1);
    assert_eq!(e.stats().sessions, 2);
}

#[test]
fn rfc4787_req3_port_collision_picks_another_in_range() {
    let mut e = napt();
    let a = fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    let b = fwd(&mut e, 0, udp_pkt(IN_B, 40000, R1, 53));
    assert_eq!(a.sport(), 40000);
    assert_ne!(b.sport(), 40000);
    assert!(b.sport() >= 1024);
    // Both map back to their own inside host.
    assert_eq!(fwd(&mut e, 1, udp_pkt(R1, 53, POOL, b.sport())).dst(), IN_B);
    // A port below the range is not preserved.
    let low = fwd(&mut e, 0, udp_pkt(IN_A, 500, R1, 53));
    assert!(low.sport() >= 1024);
}

#[test]
fn rfc4787_filtering_address_dependent() {
    let mut e = napt();
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    // Same remote address, other port: admitted (creates a session).
    assert_eq!(fwd(&mut e, 1, udp_pkt(R1, 5353, POOL, 40000)).dst(), IN_A);
    // Other remote address: filtered.
    assert_eq!(
        dropped(&mut e, 1, udp_pkt(R2, 53, POOL, 40000)),
        DropReason::Filtered
    );
    // No mapping at all.
    assert_eq!(
        dropped(&mut e, 1, udp_pkt(R1, 53, POOL, 40001)),
        DropReason::NoMapping
    );
}

/// A mapping with one session has no record of its own (it is folded into the session):
/// the address-dependent filter then admits that session's remote address and no other, and
/// keeps doing so once a second session gives the mapping a record.
#[test]
fn rfc4787_filtering_address_dependent_before_and_after_a_second_session() {
    let mut e = napt();
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    assert_eq!(
        dropped(&mut e, 1, udp_pkt(R2, 53, POOL, 40000)),
        DropReason::Filtered
    );
    assert_eq!(fwd(&mut e, 1, udp_pkt(R1, 5353, POOL, 40000)).dst(), IN_A);
    assert_eq!(
        dropped(&mut e, 2, udp_pkt(R2, 53, POOL, 40000)),
        DropReason::Filtered
    );
    assert_eq!((e.stats().mappings, e.stats().sessions), (1, 2));
    // Past the sessions' time (300 s) the mapping admits nothing, not even R1.
    assert_eq!(
        dropped(&mut e, 400, udp_pkt(R1, 7, POOL, 40000)),
        DropReason::NoMapping
    );
}

/// RFC 4787 REQ-1 through a mapping's life: the port stays while any session lives -- its
/// first one included, which the mapping outlives -- and returns to the pool with the last.
#[test]
fn rfc4787_req1_mapping_outlives_its_first_session() {
    let mut e = napt();
    let a = fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53)).sport();
    assert_eq!(fwd(&mut e, 200, udp_pkt(IN_A, 40000, R2, 53)).sport(), a);
    // R1's session expired at 300; R2's lives to 500. Its packet finds the first expired
    // (removed, lazy expiry) and makes a new session on the same mapping.
    assert_eq!(fwd(&mut e, 400, udp_pkt(IN_A, 40000, R1, 53)).sport(), a);
    assert_eq!(e.counters().count(Event::SessionsExpired), 1);
    assert_eq!(fwd(&mut e, 401, udp_pkt(R2, 53, POOL, a)).dst(), IN_A);
    assert_eq!((e.stats().mappings, e.stats().sessions), (1, 2));
    // All past their time: the sweep removes them and the port is free again.
    for _ in 0..100 {
        e.expire_step(Time::from_secs(10_000), false);
    }
    assert_eq!((e.stats().mappings, e.stats().sessions), (0, 0));
    assert_eq!(e.stats().pool[1].ports_used, 0);
    assert_eq!(fwd(&mut e, 10_001, udp_pkt(IN_B, a, R1, 53)).sport(), a);
}

#[test]
fn rfc4787_filtering_endpoint_independent_and_port_dependent() {
    let mut e = engine(cfg(Nat44Mode::Napt, Filtering::EndpointIndependent));
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    assert_eq!(fwd(&mut e, 1, udp_pkt(R2, 1, POOL, 40000)).dst(), IN_A);
    let mut e = engine(cfg(Nat44Mode::Napt, Filtering::AddressAndPortDependent));
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    assert_eq!(
        dropped(&mut e, 1, udp_pkt(R1, 54, POOL, 40000)),
        DropReason::Filtered
    );
    assert_eq!(fwd(&mut e, 1, udp_pkt(R1, 53, POOL, 40000)).dst(), IN_A);
}

#[test]
fn rfc4787_req5_req6_udp_timeout_and_outbound_refresh() {
    let mut e = napt();
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    fwd(&mut e, 200, udp_pkt(IN_A, 40000, R1, 53)); // refresh: now expires at 500
    assert_eq!(fwd(&mut e, 499, udp_pkt(R1, 53, POOL, 40000)).dst(), IN_A); // inbound refresh -> 799
    assert_eq!(
        dropped(&mut e, 800, udp_pkt(R1, 53, POOL, 40000)),
        DropReason::NoMapping
    );
    // The lookup found the session expired and removed it (lazy expiry).
    assert_eq!(e.counters().count(Event::SessionsExpired), 1);
    assert_eq!(e.stats().sessions, 0);
    assert_eq!(e.stats().pool[1].ports_used, 0);
}

#[test]
fn rfc5382_tcp_only_syn_creates_and_states() {
    let mut e = napt();
    assert_eq!(
        dropped(&mut e, 0, tcp_pkt(IN_A, 40000, R1, 80, 0x10)),
        DropReason::TcpNoSession
    );
    fwd(&mut e, 0, tcp_pkt(IN_A, 40000, R1, 80, 0x02));
    let s = &e.sessions(Time::from_secs(0))[1];
    assert_eq!((s.state.name(), s.expires_in), ("syn_out", Some(240)));
    fwd(&mut e, 1, tcp_pkt(R1, 80, POOL, 40000, 0x12));
    let s = &e.sessions(Time::from_secs(1))[1];
    assert_eq!((s.state.name(), s.expires_in), ("established", Some(7440)));
    fwd(&mut e, 2, tcp_pkt(IN_A, 40000, R1, 80, 0x11));
    fwd(&mut e, 3, tcp_pkt(R1, 80, POOL, 40000, 0x11));
    let s = &e.sessions(Time::from_secs(3))[1];
    assert_eq!((s.state.name(), s.expires_in), ("fin_both", Some(240)));
    // Inbound SYN to a port with no mapping is dropped (RFC 5382 REQ-4 allows silence).
    assert_eq!(
        dropped(&mut e, 3, tcp_pkt(R1, 80, POOL, 40001, 0x02)),
        DropReason::NoMapping
    );
}

#[test]
fn rfc5382_req2_simultaneous_open() {
    let mut e = engine(cfg(Nat44Mode::Napt, Filtering::EndpointIndependent));
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 1)); // unrelated UDP does not map TCP
    fwd(&mut e, 0, tcp_pkt(IN_A, 40000, R1, 80, 0x02));
    // The peer's SYN (no ACK) crosses ours.
    let o = fwd(&mut e, 1, tcp_pkt(R1, 80, POOL, 40000, 0x02));
    assert_eq!(o.dst(), IN_A);
    let s = e.sessions(Time::from_secs(1));
    assert!(s
        .iter()
        .any(|s| s.proto == Some(xlat_engine::flow::Proto::Tcp)
            && s.state == SessionState::Established));
}

#[test]
fn rfc5508_echo_identifier_and_timeout() {
    let mut e = napt();
    let o = fwd(&mut e, 0, ip(IN_A, R1, 1, echo(8, 777, 1), 0, 3));
    assert_eq!((o.src(), o.icmp_id()), (POOL, 777));
    verify4(&o.bytes);
    let r = fwd(&mut e, 1, ip(R1, POOL, 1, echo(0, 777, 1), 0, 3));
    assert_eq!((r.dst(), r.icmp_id()), (IN_A, 777));
    verify4(&r.bytes);
    // Second host with the same identifier gets another one.
    let o2 = fwd(&mut e, 1, ip(IN_B, R1, 1, echo(8, 777, 1), 0, 3));
    assert_ne!(o2.icmp_id(), 777);
    verify4(&o2.bytes);
    assert_eq!(
        fwd(&mut e, 2, ip(R1, POOL, 1, echo(0, o2.icmp_id(), 1), 0, 3)).dst(),
        IN_B
    );
    // RFC 5508 REQ-1: 60 s.
    assert_eq!(
        dropped(&mut e, 200, ip(R1, POOL, 1, echo(0, 777, 1), 0, 3)),
        DropReason::NoMapping
    );
}

#[test]
fn rfc5508_icmp_error_inbound_embedded_translated() {
    let mut e = napt();
    // IN_B takes port 40000 first so IN_A's mapping gets another port (exercises the port rewrite).
    fwd(&mut e, 0, udp_pkt(IN_B, 40000, R2, 1));
    let out = fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 33434));
    let ext_port = out.sport();
    assert_ne!(ext_port, 40000);
    // R1 answers with port unreachable quoting the translated datagram.
    let mut err = vec![3, 3, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&out.bytes);
    let o = fwd(&mut e, 1, ip(R1, POOL, 1, err, 0, 9));
    assert_eq!(o.dst(), IN_A);
    verify4(&o.bytes);
    let inner = &o.bytes[28..];
    assert_eq!(&inner[12..16], &IN_A);
    assert_eq!(u16::from_be_bytes([inner[20], inner[21]]), 40000);
    assert!(checksum::verifies(&inner[..20]), "embedded IPv4 checksum");
    // The embedded UDP checksum equals the original datagram's.
    let orig = udp_pkt(IN_A, 40000, R1, 33434);
    assert_eq!(&inner[26..28], &orig[26..28]);
    assert_eq!(e.counters().count(Event::IcmpErrorsTranslated), 1);
    // An error about a flow we never saw is dropped.
    let mut stray = vec![3, 3, 0, 0, 0, 0, 0, 0];
    stray.extend_from_slice(&udp_pkt(POOL, 41000, R1, 1));
    assert_eq!(
        dropped(&mut e, 1, ip(R1, POOL, 1, stray, 0, 9)),
        DropReason::IcmpErrorNoSession
    );
}

#[test]
fn rfc5508_icmp_error_outbound_from_inside_host() {
    let mut e = engine(cfg(Nat44Mode::Napt, Filtering::EndpointIndependent));
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    let inb = fwd(&mut e, 1, udp_pkt(R2, 7, POOL, 40000));
    let mut err = vec![3, 3, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&inb.bytes);
    let o = fwd(&mut e, 1, ip(IN_A, R2, 1, err, 0, 4));
    assert_eq!(o.src(), POOL);
    verify4(&o.bytes);
    let inner = &o.bytes[28..];
    assert_eq!(&inner[16..20], &POOL);
    assert_eq!(u16::from_be_bytes([inner[22], inner[23]]), 40000);
}

#[test]
fn rfc4787_req9_hairpin_to_static_and_dynamic() {
    let mut e = engine(cfg(Nat44Mode::Napt, Filtering::EndpointIndependent));
    let o = fwd(&mut e, 0, udp_pkt(IN_A, 5000, STATIC_OUT, 53));
    assert_eq!(
        (o.src(), o.sport(), o.dst(), o.dport()),
        (POOL, 5000, STATIC_IN, 53)
    );
    verify4(&o.bytes);
    // B listens via a mapping; A reaches it at B's outside address.
    fwd(&mut e, 0, udp_pkt(IN_B, 6000, R1, 1));
    let h = fwd(&mut e, 1, udp_pkt(IN_A, 5001, POOL, 6000));
    assert_eq!((h.src(), h.dst(), h.dport()), (POOL, IN_B, 6000));
    verify4(&h.bytes);
    assert_eq!(e.counters().count(Event::Hairpinned), 2);
}

#[test]
fn rfc2663_static_both_ways_any_protocol() {
    let mut e = napt();
    let o = fwd(&mut e, 0, tcp_pkt(STATIC_IN, 22, R1, 5555, 0x10));
    assert_eq!((o.src(), o.sport()), (STATIC_OUT, 22));
    verify4(&o.bytes);
    let i = fwd(&mut e, 0, tcp_pkt(R2, 1234, STATIC_OUT, 22, 0x02));
    assert_eq!(i.dst(), STATIC_IN);
    verify4(&i.bytes);
    let gre = fwd(&mut e, 0, ip(R1, STATIC_OUT, 47, vec![0; 8], 0, 1));
    assert_eq!(gre.dst(), STATIC_IN);
    assert_eq!(
        dropped(&mut e, 0, ip(IN_A, R1, 47, vec![0; 8], 0, 1)),
        DropReason::UnsupportedProtocol
    );
}

#[test]
fn static_mode_drops_unlisted_hosts() {
    let mut e = engine(cfg(Nat44Mode::Static, Filtering::AddressDependent));
    assert_eq!(
        dropped(&mut e, 0, udp_pkt(IN_A, 1, R1, 1)),
        DropReason::NoStaticMapping
    );
    assert_eq!(
        fwd(&mut e, 0, udp_pkt(STATIC_IN, 1, R1, 1)).src(),
        STATIC_OUT
    );
}

#[test]
fn rfc3022_basic_nat_pool_mode_and_exhaustion() {
    let mut e = engine(cfg(Nat44Mode::Pool, Filtering::AddressDependent));
    let o = fwd(&mut e, 0, udp_pkt(IN_A, 80, R1, 53));
    assert_eq!((o.src(), o.sport()), (POOL, 80)); // port kept even below the NAPT range
    assert_eq!(
        dropped(&mut e, 0, udp_pkt(IN_B, 80, R1, 53)),
        DropReason::PoolExhausted
    );
    assert_eq!(e.stats().hosts, 1);
    // After A's session expires the address is free for B.
    assert_eq!(e.expire(Time::from_secs(1000), 100), 1);
    assert_eq!(fwd(&mut e, 1000, udp_pkt(IN_B, 80, R1, 53)).src(), POOL);
}

#[test]
fn napt_pool_exhaustion_counts() {
    let mut c = cfg(Nat44Mode::Napt, Filtering::AddressDependent);
    c.ports = (2000, 2001);
    let mut e = engine(c);
    fwd(&mut e, 0, udp_pkt(IN_A, 1, R1, 1));
    fwd(&mut e, 0, udp_pkt(IN_A, 2, R1, 1));
    assert_eq!(
        dropped(&mut e, 0, udp_pkt(IN_A, 3, R1, 1)),
        DropReason::PoolExhausted
    );
    let s = e.stats();
    assert_eq!((s.pool[1].ports_used, s.pool[1].ports_total), (2, 2));
    assert_eq!(s.get("pool_exhausted"), 1);
}

#[test]
fn session_limits_total_and_per_host() {
    let mut c = cfg(Nat44Mode::Napt, Filtering::AddressDependent);
    c.limits.max_sessions_per_host = 2;
    c.limits.max_sessions = 3;
    let mut e = engine(c);
    fwd(&mut e, 0, udp_pkt(IN_A, 1001, R1, 1));
    fwd(&mut e, 0, udp_pkt(IN_A, 1002, R1, 1));
    assert_eq!(
        dropped(&mut e, 0, udp_pkt(IN_A, 1003, R1, 1)),
        DropReason::HostSessionLimit
    );
    fwd(&mut e, 0, udp_pkt(IN_B, 1001, R1, 1));
    assert_eq!(
        dropped(&mut e, 0, udp_pkt(IN_B, 1002, R1, 1)),
        DropReason::SessionLimit
    );
}

#[test]
fn rfc1624_bad_checksum_is_not_repaired() {
    let mut e = napt();
    let mut p = udp_pkt(IN_A, 40000, R1, 53);
    p[26] ^= 0x55; // corrupt the UDP checksum
    let o = fwd(&mut e, 0, p);
    let l4 = &o.bytes[20..];
    let init = common::pseudo4(&o.bytes[12..16], &o.bytes[16..20], 17, l4.len());
    assert_ne!(common::fold(common::sum16(init, l4)), 0xffff);
    // Zero UDP checksum stays zero.
    let mut z = udp_pkt(IN_A, 40001, R1, 53);
    z[26] = 0;
    z[27] = 0;
    assert_eq!(&fwd(&mut e, 0, z).bytes[26..28], &[0, 0]);
    // Bad IPv4 header checksum is dropped.
    let mut b = udp_pkt(IN_A, 40002, R1, 53);
    b[10] ^= 1;
    assert_eq!(dropped(&mut e, 0, b), DropReason::BadIpChecksum);
}

/// Splits a whole IPv4 packet into fragments of `chunk` payload bytes (multiple of 8).
fn fragment(p: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let payload = &p[20..];
    let mut out = Vec::new();
    let mut off = 0;
    while off < payload.len() {
        let end = (off + chunk).min(payload.len());
        let more = end < payload.len();
        let frag = ((off / 8) as u16) | if more { 0x2000 } else { 0 };
        let mut f = p[..20].to_vec();
        f.extend_from_slice(&payload[off..end]);
        let total = f.len() as u16;
        f[2..4].copy_from_slice(&total.to_be_bytes());
        f[6..8].copy_from_slice(&frag.to_be_bytes());
        f[10..12].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&f[..20]);
        f[10..12].copy_from_slice(&c.to_be_bytes());
        out.push(f);
        off = end;
    }
    out
}

/// Reassembles fragments (in order) into one packet for checksum verification.
fn reassemble(frags: &[Vec<u8>]) -> Vec<u8> {
    let mut p = frags[0][..20].to_vec();
    for f in frags {
        p.extend_from_slice(&f[20..]);
    }
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[6..8].copy_from_slice(&[0, 0]);
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn rfc4787_req14_fragments_in_and_out_of_order() {
    let mut e = napt();
    fwd(&mut e, 0, udp_pkt(IN_B, 40000, R2, 1)); // force a port change for IN_A
    let whole = ip(IN_A, R1, 17, udp(40000, 53, &[7u8; 100]), 0, 0x1234);
    let frags = fragment(&whole, 48);
    assert_eq!(frags.len(), 3);
    // In order.
    let outs: Vec<Vec<u8>> = frags
        .iter()
        .map(|f| fwd(&mut e, 1, f.clone()).bytes)
        .collect();
    assert!(outs.iter().all(|o| o[12..16] == POOL));
    let r = reassemble(&outs);
    verify4(&r);
    let port = u16::from_be_bytes([r[20], r[21]]);
    assert_ne!(port, 40000);
    // Out of order: the last two arrive first and are held.
    let whole2 = ip(IN_A, R1, 17, udp(40000, 53, &[9u8; 100]), 0, 0x1235);
    let f2 = fragment(&whole2, 48);
    for f in [&f2[2], &f2[1]] {
        let mut b = f.clone();
        assert_eq!(e.process_vec(Time::from_secs(2), &mut b), Verdict::Held);
    }
    let first = fwd(&mut e, 2, f2[0].clone());
    let released: Vec<Vec<u8>> = std::iter::from_fn(|| e.pop_ready()).collect();
    assert_eq!(released.len(), 2);
    let mut all = vec![first.bytes];
    all.push(released[1].clone());
    all.push(released[0].clone());
    verify4(&reassemble(&all));
    // A later fragment whose first never comes is dropped after the fragment timeout.
    let mut lone = fragment(&ip(IN_A, R1, 17, udp(1, 2, &[0; 100]), 0, 0x999), 48)[1].clone();
    assert_eq!(e.process_vec(Time::from_secs(3), &mut lone), Verdict::Held);
    e.expire(Time::from_secs(10), 100);
    assert_eq!(e.counters().dropped(DropReason::FragmentNoFirst), 1);
    // Inbound fragmented reply.
    let reply = ip(R1, POOL, 17, udp(53, port, &[3u8; 100]), 0, 0x4444);
    let back: Vec<Vec<u8>> = fragment(&reply, 48)
        .into_iter()
        .map(|f| fwd(&mut e, 4, f).bytes)
        .collect();
    assert!(back.iter().all(|o| o[16..20] == IN_A));
    verify4(&reassemble(&back));
}

#[test]
fn fragmented_echo_crosses() {
    let mut e = napt();
    let mut body = echo(8, 4242, 1);
    body.extend_from_slice(&[1u8; 3000]);
    let whole = ip(IN_A, R1, 1, body, 0, 0x77);
    let outs: Vec<Vec<u8>> = fragment(&whole, 1480)
        .into_iter()
        .map(|f| fwd(&mut e, 0, f).bytes)
        .collect();
    verify4(&reassemble(&outs));
}

#[test]
fn malformed_headers_are_counted() {
    let mut e = napt();
    let good = udp_pkt(IN_A, 1, R1, 1);
    assert_eq!(
        dropped(&mut e, 0, good[..10].to_vec()),
        DropReason::Truncated
    );
    let mut v6 = good.clone();
    v6[0] = 0x65;
    assert_eq!(dropped(&mut e, 0, v6), DropReason::NotIpv4);
    let mut ihl = good.clone();
    ihl[0] = 0x44;
    assert_eq!(dropped(&mut e, 0, ihl), DropReason::BadIhl);
    let mut tl = good.clone();
    tl[3] = 200;
    assert_eq!(dropped(&mut e, 0, tl), DropReason::BadTotalLength);
    let short = ip(IN_A, R1, 17, vec![0, 1, 0, 2], 0, 1);
    assert_eq!(dropped(&mut e, 0, short), DropReason::TruncatedL4);
    assert_eq!(
        dropped(&mut e, 0, udp_pkt([192, 0, 2, 1], 1, R1, 1)),
        DropReason::NotOurs
    );
    assert_eq!(e.counters().total_drops(), 6);
}

#[test]
fn ipv4_options_translate() {
    let mut e = napt();
    let base = udp_pkt(IN_A, 40000, R1, 53);
    // Insert a 4-byte option (NOP x3 + EOL) and fix IHL, total length and checksum.
    let mut p = base[..20].to_vec();
    p.extend_from_slice(&[1, 1, 1, 0]);
    p.extend_from_slice(&base[20..]);
    p[0] = 0x46;
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&p[..24]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let o = fwd(&mut e, 0, p);
    assert!(checksum::verifies(&o.bytes[..24]));
    assert_eq!(&o.bytes[12..16], &POOL);
    verify4(&o.bytes);
}

#[test]
fn trailing_padding_is_trimmed() {
    let mut e = napt();
    let mut p = udp_pkt(IN_A, 40000, R1, 53);
    let len = p.len();
    p.extend_from_slice(&[0; 10]);
    assert_eq!(e.process_vec(Time::from_secs(0), &mut p), Verdict::Forward);
    assert_eq!(p.len(), len);
}

#[test]
fn rfc5508_req3_icmp_error_with_bad_checksum_dropped() {
    let mut e = napt();
    let out = fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 33434));
    let mut err = vec![3, 3, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&out.bytes);
    let mut p = ip(R1, POOL, 1, err.clone(), 0, 9);
    p[22] ^= 0xff; // ICMP checksum
    assert_eq!(dropped(&mut e, 1, p), DropReason::IcmpErrorBadChecksum);
    // Embedded IPv4 header checksum broken, ICMP checksum recomputed to match.
    err[8 + 10] ^= 0xff;
    let p = ip(R1, POOL, 1, err, 0, 9);
    assert_eq!(dropped(&mut e, 1, p), DropReason::IcmpErrorBadChecksum);
}

#[test]
fn rfc3128_overlapping_tcp_fragment_dropped() {
    let mut e = napt();
    fwd(&mut e, 0, tcp_pkt(IN_A, 40000, R1, 80, 0x02));
    // Offset 1 (8 bytes) would overwrite TCP flags and more.
    let p = ip(IN_A, R1, 6, vec![0; 16], 0x0001, 5);
    assert_eq!(dropped(&mut e, 0, p), DropReason::FragmentOverlap);
}

// ---- Fast-path recipes (issue 6, crates/engine/src/offload.rs) ----

use xlat_engine::offload::{self, OffloadKind, OffloadOp};

fn ops(e: &mut Engine) -> Vec<OffloadOp> {
    let mut evs = Vec::new();
    e.drain_events(&mut evs);
    evs.iter().filter_map(|ev| e.offload_op(ev)).collect()
}

/// What the engine makes of `p`, with the TTL a router hop takes off (the engine leaves that
/// to the kernel; a fast path is the router): the bytes a recipe must produce.
fn engine_as_router(e: &mut Engine, t: u64, p: Vec<u8>) -> Vec<u8> {
    let mut o = fwd(e, t, p).bytes;
    o[8] -= 1;
    o[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&o[..20]);
    o[10..12].copy_from_slice(&c.to_be_bytes());
    o
}

#[test]
fn offload_udp_recipes_match_the_engine_both_ways() {
    let mut e = napt();
    e.set_offload(true);
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    let v = ops(&mut e);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].kind, OffloadKind::Install);
    // The second packet each way: the recipe and the engine agree byte for byte.
    let mut by_recipe = udp_pkt(IN_A, 40000, R1, 53);
    assert!(offload::apply(v[0].nat44().unwrap().0, &mut by_recipe));
    verify4(&by_recipe);
    assert_eq!(
        by_recipe,
        engine_as_router(&mut e, 1, udp_pkt(IN_A, 40000, R1, 53))
    );
    let reply = udp_pkt(R1, 53, POOL, 40000);
    let mut by_recipe = reply.clone();
    assert!(offload::apply(v[0].nat44().unwrap().1, &mut by_recipe));
    verify4(&by_recipe);
    assert_eq!(by_recipe, engine_as_router(&mut e, 1, reply));
    assert!(
        ops(&mut e).is_empty(),
        "no second install for the same session"
    );
    assert!(e.sessions(Time::from_secs(1)).iter().any(|s| s.fast_path));
}

#[test]
fn offload_tcp_only_while_established() {
    let mut e = napt();
    e.set_offload(true);
    fwd(&mut e, 0, tcp_pkt(IN_A, 40001, R1, 80, 0x02));
    assert!(ops(&mut e).is_empty(), "a SYN alone is not established");
    fwd(&mut e, 0, tcp_pkt(R1, 80, POOL, 40001, 0x12));
    let v = ops(&mut e);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].kind, OffloadKind::Install);
    let mut by_recipe = tcp_pkt(IN_A, 40001, R1, 80, 0x10);
    assert!(offload::apply(v[0].nat44().unwrap().0, &mut by_recipe));
    assert_eq!(
        by_recipe,
        engine_as_router(&mut e, 1, tcp_pkt(IN_A, 40001, R1, 80, 0x10))
    );
    // FIN goes to the engine (the fast path passes it) and the recipes come back.
    fwd(&mut e, 2, tcp_pkt(IN_A, 40001, R1, 80, 0x11));
    let v = ops(&mut e);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].kind, OffloadKind::Remove);
    assert_eq!(e.counters().count(Event::OffloadRemoved), 1);
}

/// `xlat trace` with the fast path: holding a host's flows back withdraws its offloaded
/// sessions (and only its), keeps its new UDP and newly established TCP sessions in the
/// engine, and ending the hold hands back exactly the held sessions that qualify.
#[test]
fn offload_hold_keeps_a_traced_hosts_flows_in_the_engine_and_gives_them_back() {
    let mut e = napt();
    e.set_offload(true);
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    fwd(&mut e, 0, udp_pkt(IN_B, 40000, R1, 53));
    assert_eq!(ops(&mut e).len(), 2);
    let a = SessionFilter {
        inside: Some(std::net::IpAddr::V4(IN_A.into())),
        ..SessionFilter::default()
    };
    assert_eq!(e.hold_offload(Time::from_secs(1), Some(a)), 1);
    let v = ops(&mut e);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].kind, OffloadKind::Remove);
    assert_eq!(v[0].nat44().unwrap().0.key.src, u32::from_be_bytes(IN_A));
    // Held: a new UDP flow and a TCP connection reaching established stay in the engine.
    fwd(&mut e, 1, udp_pkt(IN_A, 40002, R1, 53));
    fwd(&mut e, 1, tcp_pkt(IN_A, 40003, R1, 80, 0x02));
    fwd(&mut e, 1, tcp_pkt(R1, 80, POOL, 40003, 0x12));
    assert!(
        ops(&mut e).is_empty(),
        "nothing of a held host goes to the fast path"
    );
    // Another host's flows still do.
    fwd(&mut e, 1, udp_pkt(IN_B, 40004, R1, 53));
    assert_eq!(ops(&mut e).len(), 1);
    // The hold ends: A's three sessions go back (UDP x2, established TCP).
    assert_eq!(e.hold_offload(Time::from_secs(2), None), 3);
    let v = ops(&mut e);
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|o| o.kind == OffloadKind::Install));
    assert_eq!(
        e.hold_offload(Time::from_secs(2), None),
        0,
        "no hold, nothing moves"
    );
    // A withdrawn session was refreshed: it lives a UDP timeout from the hold on.
    let s = e.sessions(Time::from_secs(2));
    assert!(s
        .iter()
        .filter(|r| r.inside_port == Some(40000))
        .all(|r| r.fast_path));
}

#[test]
fn offload_expiry_asks_the_fast_path_first() {
    let mut e = napt();
    e.set_offload(true);
    fwd(&mut e, 0, udp_pkt(IN_A, 40002, R1, 53));
    let install = ops(&mut e)[0];
    // Past the 300 s UDP timeout by the engine's count: a query, not a removal.
    assert_eq!(e.expire(Time::from_secs(301), 100), 0);
    let v = ops(&mut e);
    assert_eq!(v.len(), 1);
    assert_eq!((v[0].kind, v[0].token), (OffloadKind::Query, install.token));
    // The fast path saw an outbound packet at 250 s: live until 550 s.
    assert!(!e.offload_seen(
        Time::from_secs(301),
        v[0].token,
        Some(Time::from_secs(250)),
        None
    ));
    assert_eq!(e.counters().count(Event::OffloadRefreshed), 1);
    assert!(ops(&mut e).is_empty());
    assert_eq!(e.expire(Time::from_secs(400), 100), 0);
    assert!(ops(&mut e).is_empty(), "not due yet: no query");
    // inbound_refresh (the default) lets inbound packets refresh too: seen at 549 s.
    e.expire(Time::from_secs(551), 100);
    let q = ops(&mut e);
    assert_eq!(q[0].kind, OffloadKind::Query);
    assert!(!e.offload_seen(
        Time::from_secs(551),
        q[0].token,
        None,
        Some(Time::from_secs(549))
    ));
    // Nothing seen since: removed, recipes withdrawn.
    e.expire(Time::from_secs(850), 100);
    let q = ops(&mut e);
    assert_eq!(q[0].kind, OffloadKind::Query);
    assert!(e.offload_seen(
        Time::from_secs(850),
        q[0].token,
        Some(Time::from_secs(249)),
        Some(Time::from_secs(549))
    ));
    let v = ops(&mut e);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].kind, OffloadKind::Remove);
    assert_eq!(v[0].recipes, install.recipes);
    assert!(!e
        .sessions(Time::from_secs(850))
        .iter()
        .any(|s| s.proto == Some(xlat_engine::flow::Proto::Udp)));
    // Inbound to the old mapping now drops: the session and its mapping are gone.
    assert_eq!(
        dropped(&mut e, 851, udp_pkt(R1, 53, POOL, 40002)),
        DropReason::NoMapping
    );
}

#[test]
fn offload_skips_icmp_hairpin_and_disabled_engines() {
    let mut e = engine(cfg(Nat44Mode::Napt, Filtering::EndpointIndependent));
    fwd(&mut e, 0, udp_pkt(IN_A, 40003, R1, 53));
    assert!(ops(&mut e).is_empty(), "offload is off by default");
    e.set_offload(true);
    fwd(&mut e, 0, ip(IN_A, R1, 1, echo(8, 7, 1), 0, 3));
    assert!(ops(&mut e).is_empty(), "ICMP stays in the engine");
    // Hairpin: IN_B to IN_A's outside endpoint needs the engine's second translation.
    fwd(&mut e, 0, udp_pkt(IN_B, 40004, POOL, 40003));
    assert!(ops(&mut e).iter().all(|o| o.kind != OffloadKind::Install));
}

/// `Engine::expire_step`: under load (`backlog`) a pass removes two sessions when nothing
/// new was made -- it must stay shorter than a batch -- sixteen when no packet waits, and
/// one more for every session made since the last step, so new flows are met by as many
/// removals.
#[test]
fn expire_step_budget_follows_backlog_and_new_sessions() {
    let mut e = napt();
    for port in 0..100 {
        fwd(&mut e, 0, udp_pkt(IN_A, 20000 + port, R1, 53));
    }
    // Takes note of the 100 new sessions; none is due yet.
    assert_eq!(e.expire_step(Time::from_secs(1), true), 0);
    let late = Time::from_secs(1000);
    assert_eq!(e.expire_step(late, true), 2, "under load: two removals");
    assert_eq!(e.expire_step(late, false), 16, "nothing waits: sixteen");
    assert_eq!(e.stats().sessions, 82);
    // Ten new flows at `late`: the next step under load removes ten more than two, less
    // the budget its scan spends on the new (live) sessions it passes.
    for port in 0..10 {
        fwd(&mut e, 1000, udp_pkt(IN_B, 30000 + port, R1, 53));
    }
    let removed = e.expire_step(late, true);
    assert!((10..=12).contains(&removed), "{removed} removed");
    // Without new sessions, back to two.
    assert_eq!(e.expire_step(late, true), 2);
}

/// `Engine::expire_step` rests for a second after a translator's sweep went round its table
/// finding nothing due, so a small table is not read whole after every batch; the idle sweep
/// (`Engine::expire`) does not rest, and after the second the step sweeps again.
#[test]
fn expire_step_rests_after_a_quiet_cycle() {
    let mut e = napt();
    for port in 0..100 {
        fwd(&mut e, 0, udp_pkt(IN_A, 20000 + port, R1, 53));
    }
    let at = |ms: u64| Time(ms * 1_000_000);
    // Nothing due before 300 s (UDP). A step looks at no more than the table: the first goes
    // round it, the second ends the cycle begun long ago (no rest), the third ends the cycle
    // begun at 299.5 s, quiet after 0.1 s: the step rests until 300.5 s.
    for t in [299_500, 299_500, 299_600] {
        assert_eq!(e.expire_step(at(t), false), 0);
    }
    // 300.2 s: every session is due, but the step rests.
    assert_eq!(e.expire_step(at(300_200), false), 0);
    assert_eq!(e.stats().sessions, 100);
    // The idle sweep does not rest: 1,024 units remove 16 (65 units each). It also ends the
    // cycle begun at 299.6 s, still quiet: the step now rests until 300.6 s.
    assert_eq!(e.expire(at(300_200), 1024), 16);
    assert_eq!(e.expire_step(at(300_500), false), 0);
    // 300.6 s: the step sweeps again, and a cycle that met due sessions never rests.
    assert_eq!(e.expire_step(at(300_600), false), 16);
    assert_eq!(e.expire_step(at(300_600), false), 16);
    assert_eq!(e.stats().sessions, 52);
}

/// The session index keeps ids in 27 bits: a table larger than that is refused up front, with
/// the key named, not left to lose entries.
#[test]
fn max_sessions_beyond_the_index_is_a_config_error() {
    let with = |max: u32| {
        let mut c = cfg(Nat44Mode::Napt, Filtering::AddressDependent);
        c.limits.max_sessions = max;
        c.validate()
    };
    let e = with(MAX_SESSIONS + 1).unwrap_err();
    assert_eq!(e.key, "limits.max_sessions");
    assert!(e.problem.contains("at most 33554431"), "{e}");
    assert!(with(MAX_SESSIONS).is_ok());
}

/// RFC 1624 3: an echo reply whose identifier becomes 0, with sequence number 0 and no
/// payload, is all zero but for its checksum, which must be 0xffff (the full sum) -- an
/// incremental update by eqn. 3 alone gives 0x0000, which does not verify.
#[test]
fn rfc1624_all_zero_echo_reply_gets_checksum_0xffff() {
    let mut e = napt();
    let o = fwd(
        &mut e,
        0,
        ip(IN_A, R1, 1, vec![8, 0, 0, 0, 0, 0, 0, 0], 0, 3),
    );
    let id = o.icmp_id().to_be_bytes();
    let r = fwd(
        &mut e,
        1,
        ip(R1, POOL, 1, vec![0, 0, 0, 0, id[0], id[1], 0, 0], 0, 3),
    );
    assert_eq!(r.dst(), IN_A);
    assert_eq!(&r.bytes[20..], &[0, 0, 0xff, 0xff, 0, 0, 0, 0]);
    verify4(&r.bytes);
}

fn forwarding() -> Engine {
    let mut c = cfg(Nat44Mode::Napt, Filtering::AddressAndPortDependent);
    c.ports = (80, 81);
    c.forwards = vec![
        PortForward {
            proto: flow::Proto::Tcp,
            inside: flow::Endpoint {
                addr: u32::from_be_bytes(IN_A),
                port: 8080,
            },
            outside: flow::Endpoint {
                addr: u32::from_be_bytes(POOL),
                port: 80,
            },
            count: 1,
        },
        PortForward {
            proto: flow::Proto::Udp,
            inside: flow::Endpoint {
                addr: u32::from_be_bytes(IN_A),
                port: 5000,
            },
            outside: flow::Endpoint {
                addr: u32::from_be_bytes(POOL),
                port: 6000,
            },
            count: 3,
        },
    ];
    engine(c)
}

/// Static NAPT entries (port forwarding): an outside host reaches the inside server at the
/// forwarded pool endpoint, with a SYN only (RFC 6146 3.5.2.2's rule for TCP), whatever the
/// filtering (here the strictest); the server's answers leave from that endpoint; a second
/// remote gets in too.
#[test]
fn static_napt_entry_forwards_inbound_connections() {
    let mut e = forwarding();
    assert_eq!(
        dropped(&mut e, 0, tcp_pkt(R1, 40000, POOL, 80, 0x10)),
        DropReason::TcpNoSession
    );
    let i = fwd(&mut e, 0, tcp_pkt(R1, 40000, POOL, 80, 0x02));
    assert_eq!(
        (i.dst(), i.dport(), i.src(), i.sport()),
        (IN_A, 8080, R1, 40000)
    );
    verify4(&i.bytes);
    let o = fwd(&mut e, 0, tcp_pkt(IN_A, 8080, R1, 40000, 0x12));
    assert_eq!((o.src(), o.sport()), (POOL, 80));
    verify4(&o.bytes);
    let i2 = fwd(&mut e, 1, tcp_pkt(R2, 41000, POOL, 80, 0x02));
    assert_eq!((i2.dst(), i2.dport()), (IN_A, 8080));
    // A port of a range: 6001 -> 5001.
    let u = fwd(&mut e, 1, udp_pkt(R1, 53, POOL, 6001));
    assert_eq!((u.dst(), u.dport()), (IN_A, 5001));
    // Nothing else is open.
    assert_eq!(
        dropped(&mut e, 1, udp_pkt(R1, 53, POOL, 6003)),
        DropReason::NoMapping
    );
}

/// The forwarded inside endpoint's own new flows leave from its outside endpoint, and no
/// dynamic mapping ever takes a forwarded port (here the range is 80-81 and port 80 is
/// forwarded: a host asking for port 80 gets 81), not even after the forwarded mapping's
/// sessions expire.
#[test]
fn static_napt_entry_owns_its_outside_port() {
    let mut e = forwarding();
    let o = fwd(&mut e, 0, udp_pkt(IN_A, 5002, R1, 53));
    assert_eq!((o.src(), o.sport()), (POOL, 6002));
    let b = fwd(&mut e, 0, tcp_pkt(IN_B, 80, R1, 443, 0x02));
    assert_eq!(b.sport(), 81, "port 80 is forwarded, never allocated");
    // After every session expired (UDP 300 s, transitory TCP 240 s), still forwarded.
    let i = fwd(&mut e, 1000, tcp_pkt(R2, 42000, POOL, 80, 0x02));
    assert_eq!((i.dst(), i.dport()), (IN_A, 8080));
    let b = fwd(&mut e, 1000, tcp_pkt(IN_B, 80, R1, 444, 0x02));
    assert_eq!(
        b.sport(),
        81,
        "the forwarded port did not return to the pool"
    );
    // With 81 taken too, the range is full: 80 is not handed out.
    assert_eq!(
        dropped(&mut e, 1000, tcp_pkt(IN_B, 90, R1, 444, 0x02)),
        DropReason::PoolExhausted
    );
}

/// `Engine::poll_timeout`: nothing to wake for until a packet comes; the expiry sweep's
/// cadence while sessions live; a held fragment's own timeout when only it waits; and
/// nothing again once the sweep has ended every session.
#[test]
fn poll_timeout_names_the_next_thing_the_engine_must_do() {
    let mut e = napt();
    let t0 = Time::from_secs(1);
    assert_eq!(e.poll_timeout(t0), None, "a fresh engine has no timer");

    // A later fragment whose first has not come: held, due at the fragment timeout.
    let mut lone = fragment(&ip(IN_A, R1, 17, udp(1, 2, &[0; 100]), 0, 0x999), 48)[1].clone();
    assert_eq!(e.process_vec(t0, &mut lone), Verdict::Held);
    let frag_due = t0.plus_secs(Timeouts::default().fragment);
    assert_eq!(e.poll_timeout(t0), Some(frag_due));

    // A session: the sweep wants to come round every SWEEP_INTERVAL, earlier than the fragment.
    let t1 = Time::from_secs(2);
    fwd(&mut e, 2, udp_pkt(IN_A, 40000, R1, 53));
    let sweep = Time(t1.0 + SWEEP_INTERVAL.0);
    assert_eq!(e.poll_timeout(t1), Some(sweep.min(frag_due)));

    // Past every timeout: the fragment is dropped (counted), the session ends, no timer left.
    let late = Time::from_secs(100_000);
    while e.expire(late, 1 << 16) > 0 {}
    assert_eq!(e.counters().dropped(DropReason::FragmentNoFirst), 1);
    assert_eq!(e.stats().sessions, 0);
    assert_eq!(e.poll_timeout(late), None, "nothing left to expire");
}

// ---- When a UDP session goes to the fast path (`Engine::set_offload_after`) ----

fn installs(v: &[OffloadOp]) -> usize {
    v.iter().filter(|o| o.kind == OffloadKind::Install).count()
}

/// The engine's default: a UDP session's recipes go out with its first packet.
#[test]
fn offload_udp_at_the_first_packet_by_default_and_with_1() {
    for after in [None, Some(1), Some(0)] {
        let mut e = napt();
        e.set_offload(true);
        if let Some(n) = after {
            e.set_offload_after(n); // 0 is clamped to 1
        }
        fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
        assert_eq!(installs(&ops(&mut e)), 1, "{after:?}");
    }
}

/// Waiting for the Nth packet: the engine translates the first N-1 itself, installs the
/// recipes with the Nth (outbound packets count, whatever their spacing), and only once.
#[test]
fn offload_udp_after_its_nth_packet() {
    let mut e = napt();
    e.set_offload(true);
    e.set_offload_after(3);
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    assert!(ops(&mut e).is_empty(), "first packet: not yet");
    fwd(&mut e, 1, udp_pkt(IN_A, 40000, R1, 53));
    assert!(ops(&mut e).is_empty(), "second packet: not yet");
    fwd(&mut e, 2, udp_pkt(IN_A, 40000, R1, 53));
    let v = ops(&mut e);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].kind, OffloadKind::Install);
    // The recipe is the session's: it agrees with the engine byte for byte.
    let mut by_recipe = udp_pkt(IN_A, 40000, R1, 53);
    assert!(offload::apply(v[0].nat44().unwrap().0, &mut by_recipe));
    assert_eq!(
        by_recipe,
        engine_as_router(&mut e, 3, udp_pkt(IN_A, 40000, R1, 53))
    );
    assert!(ops(&mut e).is_empty(), "installed once");
    assert_eq!(e.counters().count(Event::OffloadInstalled), 1);
    assert!(e.sessions(Time::from_secs(3)).iter().any(|s| s.fast_path));
}

/// A reply proves the session at once, however many packets it would otherwise wait for.
#[test]
fn offload_udp_reply_promotes_at_once() {
    let mut e = napt();
    e.set_offload(true);
    e.set_offload_after(100);
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    assert!(ops(&mut e).is_empty());
    assert!(e.sessions(Time::from_secs(0)).iter().all(|s| !s.fast_path));
    fwd(&mut e, 1, udp_pkt(R1, 53, POOL, 40000));
    assert_eq!(installs(&ops(&mut e)), 1);
    assert!(e.sessions(Time::from_secs(1)).iter().any(|s| s.fast_path));
}

/// A session an inbound packet opened (endpoint-independent filtering, RFC 4787 REQ-8):
/// its reply is the outbound packet; more inbound packets only count.
#[test]
fn offload_udp_reply_to_an_inbound_opened_session_goes_out() {
    let mut e = engine(cfg(Nat44Mode::Napt, Filtering::EndpointIndependent));
    e.set_offload(true);
    e.set_offload_after(3);
    fwd(&mut e, 0, udp_pkt(IN_A, 40000, R1, 53));
    assert!(ops(&mut e).is_empty());
    // R2 -> the mapping: a new session, opened inbound.
    assert_eq!(fwd(&mut e, 1, udp_pkt(R2, 1, POOL, 40000)).dst(), IN_A);
    assert!(ops(&mut e).is_empty());
    // The answer goes out: a reply for the R2 session (installed), not for R1's.
    fwd(&mut e, 2, udp_pkt(IN_A, 40000, R2, 1));
    let v = ops(&mut e);
    assert_eq!(installs(&v), 1);
    assert_eq!(v[0].nat44().unwrap().0.key.dst, u32::from_be_bytes(R2));
    // R1's session reaches its third packet (second outbound is not a reply): installed.
    fwd(&mut e, 3, udp_pkt(IN_A, 40000, R1, 53));
    assert!(ops(&mut e).is_empty());
    fwd(&mut e, 4, udp_pkt(IN_A, 40000, R1, 53));
    let v = ops(&mut e);
    assert_eq!(installs(&v), 1);
    assert_eq!(v[0].nat44().unwrap().0.key.dst, u32::from_be_bytes(R1));
}

/// One-packet flows (a setup-rate trial, DNS queries, a scan) never reach the fast path:
/// no install when they start, no withdrawal or query when they expire.
#[test]
fn offload_one_packet_flows_never_touch_the_fast_path() {
    let mut e = napt();
    e.set_offload(true);
    e.set_offload_after(2);
    for port in 0..200u16 {
        fwd(&mut e, 0, udp_pkt(IN_A, 20000 + port, R1, 53));
    }
    assert!(ops(&mut e).is_empty());
    for _ in 0..100 {
        e.expire_step(Time::from_secs(10_000), false);
    }
    assert!(ops(&mut e).is_empty(), "no withdrawal, no query");
    assert_eq!(e.counters().count(Event::SessionsExpired), 200);
    assert_eq!(e.counters().count(Event::OffloadInstalled), 0);
}

/// TCP is unchanged by the UDP setting: its recipes go out when it is established.
#[test]
fn offload_after_leaves_tcp_to_the_established_state() {
    let mut e = napt();
    e.set_offload(true);
    e.set_offload_after(5);
    fwd(&mut e, 0, tcp_pkt(IN_A, 40001, R1, 80, 0x02));
    assert!(ops(&mut e).is_empty());
    fwd(&mut e, 0, tcp_pkt(R1, 80, POOL, 40001, 0x12));
    assert_eq!(installs(&ops(&mut e)), 1);
}

/// `xlat trace` holds a host back: its proven UDP sessions stay in the engine, and go to
/// the fast path when the hold ends.
#[test]
fn offload_after_respects_a_hold() {
    let mut e = napt();
    e.set_offload(true);
    e.set_offload_after(2);
    let a = SessionFilter {
        inside: Some(std::net::IpAddr::V4(IN_A.into())),
        ..SessionFilter::default()
    };
    assert_eq!(e.hold_offload(Time::from_secs(0), Some(a)), 0);
    for t in 0..4 {
        fwd(&mut e, t, udp_pkt(IN_A, 40000, R1, 53));
    }
    fwd(&mut e, 4, udp_pkt(R1, 53, POOL, 40000));
    assert!(
        ops(&mut e).is_empty(),
        "held: nothing goes to the fast path"
    );
    assert_eq!(e.hold_offload(Time::from_secs(5), None), 1);
    assert_eq!(installs(&ops(&mut e)), 1);
}

/// Offload off: counting nothing, installing nothing, whatever the setting.
#[test]
fn offload_after_without_offload_does_nothing() {
    let mut e = napt();
    e.set_offload_after(2);
    for t in 0..3 {
        fwd(&mut e, t, udp_pkt(IN_A, 40000, R1, 53));
    }
    fwd(&mut e, 3, udp_pkt(R1, 53, POOL, 40000));
    assert!(ops(&mut e).is_empty());
}
