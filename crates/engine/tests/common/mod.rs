//! Packet builders and an independent checksum oracle for the IPv4/IPv6 translator tests.
//! Nothing here uses the engine's or the wire crate's checksum code.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, Ipv6Addr};

pub fn a4(s: &str) -> [u8; 4] {
    s.parse::<Ipv4Addr>().unwrap().octets()
}

pub fn a6(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

/// One's-complement sum of 16-bit words, folded (a plain, obviously-correct loop).
pub fn sum16(mut acc: u64, b: &[u8]) -> u64 {
    let mut i = 0;
    while i + 1 < b.len() {
        acc += u64::from(b[i]) << 8 | u64::from(b[i + 1]);
        i += 2;
    }
    if i < b.len() {
        acc += u64::from(b[i]) << 8;
    }
    acc
}

pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

pub fn cksum(acc: u64) -> u16 {
    !fold(acc)
}

/// The IPv4 pseudo-header sum (RFC 768 / RFC 793) of a `len`-byte transport message.
pub fn pseudo4(src: &[u8], dst: &[u8], proto: u8, len: usize) -> u64 {
    sum16(sum16(0, src), dst) + u64::from(proto) + len as u64
}

fn pseudo6(src: &[u8], dst: &[u8], nh: u8, len: usize) -> u64 {
    sum16(sum16(0, src), dst) + u64::from(nh) + len as u64
}

/// Fills the checksum of a TCP (6), UDP (17), ICMP (1) or ICMPv6 (58) message.
fn fill(l4: &mut [u8], proto: u8, pseudo: u64) {
    let at = match proto {
        6 => 16,
        17 => 6,
        1 | 58 => 2,
        _ => return,
    };
    if l4.len() < at + 2 {
        return;
    }
    l4[at..at + 2].copy_from_slice(&[0, 0]);
    let init = if proto == 1 { 0 } else { pseudo };
    let mut c = cksum(sum16(init, l4));
    if proto == 17 && c == 0 {
        c = 0xffff;
    }
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

pub fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t
}

/// An echo message of type `kind` (8/0 for ICMPv4, 128/129 for ICMPv6).
pub fn echo(kind: u8, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut e = vec![kind, 0, 0, 0];
    e.extend_from_slice(&id.to_be_bytes());
    e.extend_from_slice(&seq.to_be_bytes());
    e.extend_from_slice(payload);
    e
}

/// An IPv4 packet around `l4` (its checksum filled unless `keep_l4_checksum`), with `ff` the
/// flags/fragment-offset word. Checksums are computed over `l4` as given (for a first
/// fragment, pass the whole datagram's sum through `datagram`).
pub fn ip4(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    mut l4: Vec<u8>,
    ttl: u8,
    ff: u16,
    ident: u16,
) -> Vec<u8> {
    if ff & 0x3fff == 0 {
        let n = l4.len();
        fill(&mut l4, proto, pseudo4(&src, &dst, proto, n));
    }
    raw4(src, dst, proto, &l4, ttl, ff, ident, 0x28)
}

/// An IPv4 packet around `payload` as is (no transport checksum work).
#[allow(clippy::too_many_arguments)]
pub fn raw4(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    payload: &[u8],
    ttl: u8,
    ff: u16,
    ident: u16,
    tos: u8,
) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut p = vec![0x45, tos, (total >> 8) as u8, total as u8];
    p.extend_from_slice(&ident.to_be_bytes());
    p.extend_from_slice(&ff.to_be_bytes());
    p.extend_from_slice(&[ttl, proto, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = cksum(sum16(0, &p));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// An IPv6 packet around `l4`, its checksum filled.
pub fn ip6(src: [u8; 16], dst: [u8; 16], nh: u8, mut l4: Vec<u8>, hop: u8) -> Vec<u8> {
    let n = l4.len();
    fill(&mut l4, nh, pseudo6(&src, &dst, nh, n));
    raw6(src, dst, nh, &l4, hop, 0xb8, 0x12345)
}

/// An IPv6 packet around `payload` as is.
pub fn raw6(
    src: [u8; 16],
    dst: [u8; 16],
    nh: u8,
    payload: &[u8],
    hop: u8,
    tc: u8,
    fl: u32,
) -> Vec<u8> {
    let first: u32 = 6 << 28 | u32::from(tc) << 20 | fl;
    let mut p = first.to_be_bytes().to_vec();
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.extend_from_slice(&[nh, hop]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

/// IPv6 fragments of the upper-layer message `l4` (checksum filled over the whole message),
/// `sizes` bytes each.
pub fn frags6(
    src: [u8; 16],
    dst: [u8; 16],
    nh: u8,
    mut l4: Vec<u8>,
    ident: u32,
    sizes: &[usize],
) -> Vec<Vec<u8>> {
    let n = l4.len();
    fill(&mut l4, nh, pseudo6(&src, &dst, nh, n));
    assert_eq!(sizes.iter().sum::<usize>(), l4.len());
    let mut out = Vec::new();
    let mut off = 0;
    for (i, n) in sizes.iter().enumerate() {
        let more = i + 1 < sizes.len();
        let mut f = vec![nh, 0];
        f.extend_from_slice(&(((off / 8) as u16) << 3 | u16::from(more)).to_be_bytes());
        f.extend_from_slice(&ident.to_be_bytes());
        f.extend_from_slice(&l4[off..off + n]);
        out.push(raw6(src, dst, 44, &f, 64, 0, 0));
        off += n;
    }
    out
}

/// IPv4 fragments of `l4` (checksum over the whole message), `sizes` bytes each.
pub fn frags4(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    mut l4: Vec<u8>,
    ident: u16,
    sizes: &[usize],
) -> Vec<Vec<u8>> {
    let n = l4.len();
    fill(&mut l4, proto, pseudo4(&src, &dst, proto, n));
    let mut out = Vec::new();
    let mut off = 0;
    for (i, n) in sizes.iter().enumerate() {
        let more = i + 1 < sizes.len();
        let ff = ((off / 8) as u16) | if more { 0x2000 } else { 0 };
        out.push(raw4(src, dst, proto, &l4[off..off + n], 64, ff, ident, 0));
        off += n;
    }
    out
}

/// Checks every checksum of an unfragmented IPv4 packet, and of the packet an ICMP error
/// quotes (header checksum; transport checksum only when the quote is whole).
pub fn verify4(p: &[u8]) {
    let ihl = usize::from(p[0] & 0xf) * 4;
    assert_eq!(fold(sum16(0, &p[..ihl])), 0xffff, "IPv4 header checksum");
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    assert_eq!(total, p.len(), "IPv4 total length");
    let proto = p[9];
    let l4 = &p[ihl..];
    let ok = match proto {
        1 => fold(sum16(0, l4)) == 0xffff,
        17 if l4[6..8] == [0, 0] => true,
        6 | 17 => fold(sum16(pseudo4(&p[12..16], &p[16..20], proto, l4.len()), l4)) == 0xffff,
        _ => true,
    };
    assert!(ok, "IPv4 transport checksum (protocol {proto})");
    if proto == 1 && matches!(l4[0], 3 | 11 | 12) {
        let inner = &l4[8..];
        let iihl = usize::from(inner[0] & 0xf) * 4;
        assert_eq!(
            fold(sum16(0, &inner[..iihl])),
            0xffff,
            "quoted IPv4 header checksum"
        );
    }
}

/// Checks the transport checksum of an unfragmented IPv6 packet without extension headers,
/// and the payload length.
pub fn verify6(p: &[u8]) {
    assert_eq!(p[0] >> 4, 6);
    let plen = usize::from(u16::from_be_bytes([p[4], p[5]]));
    assert_eq!(plen + 40, p.len(), "IPv6 payload length");
    let nh = p[6];
    let l4 = &p[40..];
    if matches!(nh, 6 | 17 | 58) {
        let acc = sum16(pseudo6(&p[8..24], &p[24..40], nh, l4.len()), l4);
        assert_eq!(
            fold(acc),
            0xffff,
            "IPv6 transport checksum (next header {nh})"
        );
    }
}

/// Whole-message checksum check of a reassembled IPv6 datagram (fragments in any order).
pub fn verify6_fragments(frags: &[Vec<u8>]) {
    let mut parts: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut nh = 0;
    for f in frags {
        assert_eq!(f[6], 44, "fragment header");
        let ofm = u16::from_be_bytes([f[42], f[43]]);
        nh = f[40];
        parts.push((usize::from(ofm >> 3) * 8, f[48..].to_vec()));
    }
    parts.sort();
    let mut msg = Vec::new();
    for (off, data) in parts {
        assert_eq!(off, msg.len(), "fragments are contiguous");
        msg.extend_from_slice(&data);
    }
    let f = &frags[0];
    let acc = sum16(pseudo6(&f[8..24], &f[24..40], nh, msg.len()), &msg);
    assert_eq!(fold(acc), 0xffff, "reassembled checksum");
}

/// Whole-message checksum check of a reassembled IPv4 datagram.
pub fn verify4_fragments(frags: &[Vec<u8>]) {
    let mut parts: Vec<(usize, Vec<u8>)> = Vec::new();
    for f in frags {
        assert_eq!(fold(sum16(0, &f[..20])), 0xffff, "fragment header checksum");
        let ff = u16::from_be_bytes([f[6], f[7]]);
        parts.push((usize::from(ff & 0x1fff) * 8, f[20..].to_vec()));
    }
    parts.sort();
    let mut msg = Vec::new();
    for (off, data) in parts {
        assert_eq!(off, msg.len(), "fragments are contiguous");
        msg.extend_from_slice(&data);
    }
    let f = &frags[0];
    let proto = f[9];
    let init = if proto == 1 {
        0
    } else {
        pseudo4(&f[12..16], &f[16..20], proto, msg.len())
    };
    assert_eq!(fold(sum16(init, &msg)), 0xffff, "reassembled checksum");
}

/// The reply to a translated IPv4 packet `out` (UDP, TCP or echo): addresses and ports
/// swapped, as the remote would send it.
pub fn reply(out: &[u8]) -> Vec<u8> {
    let a = |at: usize| -> [u8; 4] { out[at..at + 4].try_into().unwrap() };
    let sport = u16::from_be_bytes([out[20], out[21]]);
    let dport = u16::from_be_bytes([out[22], out[23]]);
    let l4 = match out[9] {
        17 => udp(dport, sport, &[7; 8]),
        6 => tcp(dport, sport, 0x12),
        _ => echo(0, u16::from_be_bytes([out[24], out[25]]), 1, &[7; 8]),
    };
    ip4(a(16), a(12), out[9], l4, 64, 0, 1)
}
