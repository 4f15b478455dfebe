//! Test frames: UDP over IPv4 or IPv6 in Ethernet, with a test tag in the payload (trial tag,
//! flow, sequence number, transmit timestamp), RFC 4814 pseudorandom ports per flow, frame sizes
//! as RFC 2544 counts them (including the 4-byte FCS the wire adds), and the IMIX of S5.
//! For the 6in4 tunnel devices a flow may carry an outer IPv4 header: the tester is then the
//! far tunnel endpoint (a 6to4 site or an ISATAP host) and sends IPv6 in IPv4 protocol 41
//! (RFC 4213 3.5); [`parse_tag`] looks through such a header too.

use serde::{Deserialize, Serialize};

/// Bytes of the test tag at the start of the UDP payload:
/// tag u16 | flow u32 | seq u32 | tx_ns u64 (big endian).
pub const TAG_LEN: usize = 18;
/// Ethernet header (no VLAN).
pub const ETH_LEN: usize = 14;
/// Ethernet FCS: counted in RFC 2544 frame sizes, added by the wire, not by us.
pub const FCS_LEN: usize = 4;
/// Largest frame (RFC 2544: 1518 with FCS).
pub const MAX_FRAME: usize = 1518;
/// IPv4 header without options: the outer header of a 6in4 frame (RFC 4213 3.5).
pub const OUTER4_LEN: usize = 20;
/// IP protocol number of IPv6 encapsulated in IPv4 (RFC 4213 3.5).
pub const PROTO_IPV6_IN_IPV4: u8 = 41;

/// Smallest frame that carries the tag for an IP version.
pub fn min_frame(v6: bool) -> usize {
    ETH_LEN + if v6 { 40 } else { 20 } + 8 + TAG_LEN + FCS_LEN
}

/// Smallest IPv6 frame that carries the tag inside an outer IPv4 header (6in4).
pub fn min_frame_6in4() -> usize {
    min_frame(true) + OUTER4_LEN
}

/// One flow: addresses and ports of the frames the tester sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    /// IPv6 flows only: sent inside an IPv4 protocol-41 header with these addresses.
    pub outer: Option<Outer4>,
}

/// The outer IPv4 addresses of a 6in4 flow (RFC 4213 3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outer4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
}

/// Which automatic tunnel a 6in4 flow's inner source address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tunnel6in4 {
    /// 6to4 (RFC 3056 2): the host 2002:V4ADDR::1 of the site of the outer source.
    SixToFour,
    /// ISATAP (RFC 5214 6.1): the /64 given plus the identifier 0:5efe:V4ADDR of the outer
    /// source (the u/l bit clear: the lab's addresses are not globally unique).
    Isatap { prefix64: [u8; 8] },
}

impl Tunnel6in4 {
    /// The IPv6 address of the tunnel host behind the IPv4 address `v4`.
    pub fn host(&self, v4: [u8; 4]) -> [u8; 16] {
        let mut a = [0u8; 16];
        match self {
            Tunnel6in4::SixToFour => {
                a[..2].copy_from_slice(&[0x20, 0x02]);
                a[2..6].copy_from_slice(&v4);
                a[15] = 1;
            }
            Tunnel6in4::Isatap { prefix64 } => {
                a[..8].copy_from_slice(prefix64);
                a[8..12].copy_from_slice(&[0, 0, 0x5e, 0xfe]);
                a[12..].copy_from_slice(&v4);
            }
        }
        a
    }
}

/// A permutation step coprime to 64512 (= 2^10 * 3^2 * 7): odd, not a multiple of 3 or 7.
const PORT_STEP: u32 = 40_501;

/// RFC 4814 4.5: source ports pseudorandom in 1024..=65535, destination ports in 1..=49151.
/// Flow i gets a source port from a permutation of the 64,512 source ports, so the first
/// 64,512 flows of a source address never share a source port; beyond that the source address
/// moves on. `seed` changes the permutation (new sessions for each setup-rate trial).
pub fn flow_ports(i: u32, seed: u32) -> (u16, u32, u16) {
    let per = 64_512u32;
    let host = i / per;
    let k = i % per;
    // In 64 bits: a 32-bit sum wrapped for large seeds (seed x 7919 near 2^32), and since
    // 2^32 is no multiple of 64,512 the wrapped flows' ports then repeated others' (found by
    // throughput-established's validation: seed 1,007,000 left 12% of 1M flows sharing a
    // source port). The same ports as before for seeds under 212,000, where nothing wrapped.
    let offset = (u64::from(seed) * 7919) % u64::from(per);
    let sport = 1024 + ((u64::from(k) * u64::from(PORT_STEP) + offset) % u64::from(per)) as u32;
    let h = mix32(i ^ seed.rotate_left(16));
    let dport = 1 + (h % 49_151);
    (sport as u16, host, dport as u16)
}

/// A 32-bit integer hash (lowbias32).
pub fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// `n` IPv4 flows from inside hosts 198.18.1.0 + host to `dst`. Host numbers start at 198.18.1.1
/// and stay inside 198.18.0.0/16 (at most 65,024 hosts, 4 billion flows).
pub fn flows_v4(n: u32, seed: u32, dst: [u8; 4]) -> Vec<Flow> {
    flows_v4_at(0, n, seed, dst)
}

/// Flows `first..first + n` of [`flows_v4`]`(.., seed, dst)` (churn: flows no earlier trial used).
pub fn flows_v4_at(first: u32, n: u32, seed: u32, dst: [u8; 4]) -> Vec<Flow> {
    (first..first.saturating_add(n))
        .map(|i| {
            let (sport, host, dport) = flow_ports(i, seed);
            let h = 256 + 1 + (host % 65_000);
            let mut src = [0u8; 16];
            src[..4].copy_from_slice(&[198, 18, (h >> 8) as u8, (h & 0xff) as u8]);
            let mut d = [0u8; 16];
            d[..4].copy_from_slice(&dst);
            Flow {
                src,
                dst: d,
                sport,
                dport,
                outer: None,
            }
        })
        .collect()
}

/// `n` IPv6 flows from 2001:2:0:1::1:0 + host to `dst`.
pub fn flows_v6(n: u32, seed: u32, dst: [u8; 16]) -> Vec<Flow> {
    flows_v6_at(0, n, seed, dst)
}

/// Flows `first..first + n` of [`flows_v6`]`(.., seed, dst)`.
pub fn flows_v6_at(first: u32, n: u32, seed: u32, dst: [u8; 16]) -> Vec<Flow> {
    flows_v6_from(first, n, seed, [0x20, 0x01, 0, 2, 0, 0, 0, 1], dst)
}

/// `n` IPv6 flows of the return direction, sent on the tester's outside port: from hosts
/// 2001:2:0:2::1:0 + host (the outside port's /64) to `dst` on the inside.
pub fn flows_v6_return(n: u32, seed: u32, dst: [u8; 16]) -> Vec<Flow> {
    flows_v6_from(0, n, seed, [0x20, 0x01, 0, 2, 0, 0, 0, 2], dst)
}

/// IPv6 flows `first..first + n` from hosts ::1:0 + host of the /64 `src64` to `dst`.
fn flows_v6_from(first: u32, n: u32, seed: u32, src64: [u8; 8], dst: [u8; 16]) -> Vec<Flow> {
    (first..first.saturating_add(n))
        .map(|i| {
            let (sport, host, dport) = flow_ports(i, seed);
            let mut src = [0u8; 16];
            src[..8].copy_from_slice(&src64);
            src[12..14].copy_from_slice(&[0, 1]);
            src[14..16].copy_from_slice(&((host % 65_000) as u16 + 1).to_be_bytes());
            Flow {
                src,
                dst,
                sport,
                dport,
                outer: None,
            }
        })
        .collect()
}

/// `n` 6in4 flows: the IPv4 flows' inside hosts (198.18.1.0 + host, as [`flows_v4`]) are tunnel
/// endpoints that send IPv6 from their 6to4 or ISATAP address to `dst`, encapsulated to the
/// device's endpoint address `endpoint` (outer source: the inside host).
pub fn flows_6in4(
    n: u32,
    seed: u32,
    dst: [u8; 16],
    endpoint: [u8; 4],
    tunnel: Tunnel6in4,
) -> Vec<Flow> {
    flows_6in4_at(0, n, seed, dst, endpoint, tunnel)
}

/// Flows `first..first + n` of [`flows_6in4`].
pub fn flows_6in4_at(
    first: u32,
    n: u32,
    seed: u32,
    dst: [u8; 16],
    endpoint: [u8; 4],
    tunnel: Tunnel6in4,
) -> Vec<Flow> {
    flows_v4_at(first, n, seed, endpoint)
        .into_iter()
        .map(|f| {
            let mut v4 = [0u8; 4];
            v4.copy_from_slice(&f.src[..4]);
            Flow {
                src: tunnel.host(v4),
                dst,
                sport: f.sport,
                dport: f.dport,
                outer: Some(Outer4 {
                    src: v4,
                    dst: endpoint,
                }),
            }
        })
        .collect()
}

/// Frame sizes to send: one fixed size, or a repeating IMIX pattern.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SizeMix {
    Fixed(usize),
    Imix,
}

/// S5's IMIX: 64 B 55%, 570 B 15%, 1024 B 20%, 1500 B 10%, as a 20-frame pattern, interleaved.
pub const IMIX_PATTERN: [usize; 20] = [
    64, 570, 64, 1024, 64, 64, 1500, 64, 1024, 64, 570, 64, 1024, 64, 64, 1500, 64, 1024, 570, 64,
];

impl SizeMix {
    pub fn parse(s: &str) -> Option<SizeMix> {
        if s.eq_ignore_ascii_case("imix") {
            return Some(SizeMix::Imix);
        }
        let n: usize = s.trim().trim_end_matches('B').parse().ok()?;
        (64..=MAX_FRAME).contains(&n).then_some(SizeMix::Fixed(n))
    }
    pub fn label(&self) -> String {
        match self {
            SizeMix::Fixed(n) => n.to_string(),
            SizeMix::Imix => "imix".to_string(),
        }
    }
    /// Frame size (with FCS) of packet number `i`, raised to the version's minimum.
    pub fn frame(&self, i: u64, v6: bool) -> usize {
        let f = match self {
            SizeMix::Fixed(n) => *n,
            SizeMix::Imix => IMIX_PATTERN[(i % IMIX_PATTERN.len() as u64) as usize],
        };
        f.max(min_frame(v6))
    }
    /// Mean frame size (with FCS).
    pub fn mean(&self, v6: bool) -> f64 {
        match self {
            SizeMix::Fixed(n) => (*n).max(min_frame(v6)) as f64,
            SizeMix::Imix => {
                IMIX_PATTERN
                    .iter()
                    .map(|&f| f.max(min_frame(v6)) as f64)
                    .sum::<f64>()
                    / IMIX_PATTERN.len() as f64
            }
        }
    }
}

/// Packets per second that fill a link of `bps` bits/s with frames of mean size `frame`
/// (each frame also costs 8 bytes preamble and 12 bytes inter-frame gap on Ethernet).
pub fn line_rate_pps(bps: f64, frame: f64) -> f64 {
    bps / ((frame + 20.0) * 8.0)
}

/// One's-complement sum of 16-bit big-endian words (odd tail padded with zero).
pub fn sum16(data: &[u8]) -> u32 {
    let mut s: u32 = 0;
    let mut it = data.chunks_exact(2);
    for c in &mut it {
        s = s.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
    }
    if let [b] = it.remainder() {
        s = s.wrapping_add(u32::from(*b) << 8);
    }
    s
}

/// Folds a 32-bit sum to the 16-bit one's-complement checksum.
pub fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The parsed test tag of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    pub tag: u16,
    pub flow: u32,
    pub seq: u32,
    pub tx_ns: u64,
}

/// Writes a complete test frame for `flow` into `buf` (whose length is the frame size without
/// FCS) and returns its length. `buf` must be at least `frame - FCS_LEN` long; the payload
/// beyond the tag is left as it is (zeros in the sender's buffers). A 6in4 flow (`flow.outer`,
/// IPv6 only) gets the outer IPv4 header inside the same frame size, raised to
/// [`min_frame_6in4`] where smaller (as IPv6 frames are raised to their minimum).
#[allow(clippy::too_many_arguments)]
pub fn build_frame(
    buf: &mut [u8],
    frame: usize,
    v6: bool,
    dst_mac: &[u8; 6],
    src_mac: &[u8; 6],
    flow: &Flow,
    tag: Tag,
) -> Option<usize> {
    let mut len = frame.checked_sub(FCS_LEN)?;
    if frame < min_frame(v6) || (flow.outer.is_some() && !v6) {
        return None;
    }
    if flow.outer.is_some() {
        len = len.max(min_frame_6in4() - FCS_LEN);
    }
    if len > buf.len() {
        return None;
    }
    let b = &mut buf[..len];
    b[0..6].copy_from_slice(dst_mac);
    b[6..12].copy_from_slice(src_mac);
    let l3 = match flow.outer {
        Some(o) => {
            // RFC 4213 3.5: the outer header, protocol 41, TTL 64, DF as the tester's IPv4
            // frames; the inner packet follows it.
            b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let tot = (len - ETH_LEN) as u16;
            let h = &mut b[ETH_LEN..ETH_LEN + OUTER4_LEN];
            h[0] = 0x45;
            h[1] = 0;
            h[2..4].copy_from_slice(&tot.to_be_bytes());
            h[4..6].copy_from_slice(&(tag.seq as u16).to_be_bytes());
            h[6..8].copy_from_slice(&[0x40, 0]);
            h[8] = 64;
            h[9] = PROTO_IPV6_IN_IPV4;
            h[10..12].copy_from_slice(&[0, 0]);
            h[12..16].copy_from_slice(&o.src);
            h[16..20].copy_from_slice(&o.dst);
            let c = fold(sum16(h));
            h[10..12].copy_from_slice(&c.to_be_bytes());
            ETH_LEN + OUTER4_LEN
        }
        None => ETH_LEN,
    };
    let (l4, pseudo) = if v6 {
        if flow.outer.is_none() {
            b[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        }
        let plen = (len - l3 - 40) as u16;
        let h = &mut b[l3..l3 + 40];
        h[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
        h[4..6].copy_from_slice(&plen.to_be_bytes());
        h[6] = 17;
        h[7] = 64;
        h[8..24].copy_from_slice(&flow.src);
        h[24..40].copy_from_slice(&flow.dst);
        let p = sum16(&flow.src) + sum16(&flow.dst) + u32::from(plen) + 17;
        (l3 + 40, p)
    } else {
        b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let tot = (len - l3) as u16;
        let h = &mut b[l3..l3 + 20];
        h[0] = 0x45;
        h[1] = 0;
        h[2..4].copy_from_slice(&tot.to_be_bytes());
        h[4..6].copy_from_slice(&(tag.seq as u16).to_be_bytes());
        h[6..8].copy_from_slice(&[0x40, 0]); // DF
        h[8] = 64;
        h[9] = 17;
        h[10..12].copy_from_slice(&[0, 0]);
        h[12..16].copy_from_slice(&flow.src[..4]);
        h[16..20].copy_from_slice(&flow.dst[..4]);
        let c = fold(sum16(h));
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let ulen = tot - 20;
        let p = sum16(&flow.src[..4]) + sum16(&flow.dst[..4]) + u32::from(ulen) + 17;
        (l3 + 20, p)
    };
    let ulen = (len - l4) as u16;
    let u = &mut b[l4..];
    u[0..2].copy_from_slice(&flow.sport.to_be_bytes());
    u[2..4].copy_from_slice(&flow.dport.to_be_bytes());
    u[4..6].copy_from_slice(&ulen.to_be_bytes());
    u[6..8].copy_from_slice(&[0, 0]);
    u[8..10].copy_from_slice(&tag.tag.to_be_bytes());
    u[10..14].copy_from_slice(&tag.flow.to_be_bytes());
    u[14..18].copy_from_slice(&tag.seq.to_be_bytes());
    u[18..26].copy_from_slice(&tag.tx_ns.to_be_bytes());
    // The payload past the tag is zero, so it adds nothing to the checksum: the sum covers
    // the UDP header and the tag only, whatever the frame size.
    let mut sum = pseudo + sum16(&u[..8 + TAG_LEN]);
    if u.len() > 8 + TAG_LEN && u[8 + TAG_LEN..].iter().any(|&x| x != 0) {
        sum = pseudo + sum16(u);
    }
    let mut c = fold(sum);
    if c == 0 {
        c = 0xffff; // RFC 768: a computed zero is sent as all ones
    }
    u[6..8].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

/// Finds the test tag in a received Ethernet frame (IPv4 or IPv6, UDP). None for anything else.
pub fn parse_tag(f: &[u8]) -> Option<Tag> {
    let et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    let payload = match et {
        0x0800 if *f.get(ETH_LEN + 9)? == PROTO_IPV6_IN_IPV4 => {
            // 6in4 (RFC 4213 3.5): an unfragmented outer IPv4 header, then IPv6 and UDP.
            let ihl = usize::from(f.get(ETH_LEN)? & 0x0f) * 4;
            let frag = u16::from_be_bytes([*f.get(ETH_LEN + 6)?, *f.get(ETH_LEN + 7)?]);
            if ihl < 20 || frag & 0x3fff != 0 {
                return None;
            }
            let l3 = ETH_LEN + ihl;
            if f.get(l3)? >> 4 != 6 || *f.get(l3 + 6)? != 17 {
                return None;
            }
            l3 + 40 + 8
        }
        0x0800 => {
            let ihl = usize::from(f.get(ETH_LEN)? & 0x0f) * 4;
            if ihl < 20 || *f.get(ETH_LEN + 9)? != 17 {
                return None;
            }
            ETH_LEN + ihl + 8
        }
        0x86dd => {
            if *f.get(ETH_LEN + 6)? != 17 {
                return None;
            }
            ETH_LEN + 40 + 8
        }
        _ => return None,
    };
    let t = f.get(payload..payload + TAG_LEN)?;
    Some(Tag {
        tag: u16::from_be_bytes([t[0], t[1]]),
        flow: u32::from_be_bytes([t[2], t[3], t[4], t[5]]),
        seq: u32::from_be_bytes([t[6], t[7], t[8], t[9]]),
        tx_ns: u64::from_be_bytes([t[10], t[11], t[12], t[13], t[14], t[15], t[16], t[17]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_in_rfc4814_ranges_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..64_512 {
            let (s, host, d) = flow_ports(i, 3);
            assert!(s >= 1024);
            assert!((1..=49_151).contains(&d));
            assert_eq!(host, 0);
            assert!(seen.insert(s), "source port {s} repeated");
        }
        assert_eq!(flow_ports(64_512, 3).1, 1);
    }

    /// Every seed gives a permutation of the source ports, the largest ones too (a 32-bit
    /// sum once wrapped there and repeated ports).
    #[test]
    fn source_ports_are_a_permutation_for_any_seed() {
        for seed in [0, 3, 212_000, 542_400, 1_007_000, 4_000_000_000, u32::MAX] {
            let mut seen = vec![false; 65_536];
            for i in 0..64_512 {
                let (s, _, _) = flow_ports(i, seed);
                assert!(s >= 1024, "seed {seed}");
                assert!(
                    !seen[usize::from(s)],
                    "seed {seed}: source port {s} repeated"
                );
                seen[usize::from(s)] = true;
            }
        }
        // Unchanged where nothing wrapped: what earlier runs sent.
        let (k, seed) = (64_511u32, 212_000u32);
        let old = 1024 + (k * PORT_STEP + seed * 7919) % 64_512;
        assert_eq!(u32::from(flow_ports(k, seed).0), old);
    }

    #[test]
    fn flows_distinct_tuples() {
        let f = flows_v4(70_000, 1, [198, 19, 0, 2]);
        let set: std::collections::HashSet<_> = f.iter().map(|x| (x.src, x.sport)).collect();
        assert_eq!(set.len(), 70_000);
        assert_eq!(&f[0].src[..2], &[198, 18]);
        // A range is the same flows as the start of a longer list (churn's new flows).
        assert_eq!(flows_v4_at(64_000, 6_000, 1, [198, 19, 0, 2]), f[64_000..]);
        let d6 = [0x20, 1, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2];
        assert_eq!(flows_v6_at(5, 10, 2, d6), flows_v6(15, 2, d6)[5..]);
        let t = Tunnel6in4::SixToFour;
        assert_eq!(
            flows_6in4_at(3, 4, 0, d6, [198, 18, 0, 1], t),
            flows_6in4(7, 0, d6, [198, 18, 0, 1], t)[3..]
        );
    }

    #[test]
    fn frame_round_trip_and_checksums() {
        let flow = flows_v4(1, 0, [198, 19, 0, 2])[0];
        let mut buf = vec![0u8; 2048];
        let tag = Tag {
            tag: 0xabcd,
            flow: 7,
            seq: 123_456,
            tx_ns: 0x0102_0304_0506_0708,
        };
        for size in [64usize, 570, 1518] {
            buf.iter_mut().for_each(|b| *b = 0);
            let n = build_frame(&mut buf, size, false, &[2; 6], &[4; 6], &flow, tag).unwrap();
            assert_eq!(n, size - 4);
            let f = &buf[..n];
            assert_eq!(parse_tag(f), Some(tag));
            // IPv4 header checksum verifies to zero.
            assert_eq!(fold(sum16(&f[14..34])), 0);
            // UDP checksum over pseudo header verifies.
            let udp = &f[34..];
            let p = sum16(&f[26..34]) + 17 + udp.len() as u32;
            assert_eq!(fold(p + sum16(udp)), 0);
        }
        assert!(build_frame(&mut buf, 63, false, &[0; 6], &[0; 6], &flow, tag).is_none());
    }

    #[test]
    fn v6_frame_round_trip() {
        let mut dst = [0u8; 16];
        dst[0] = 0x20;
        dst[1] = 1;
        let flow = flows_v6(1, 0, dst)[0];
        let mut buf = vec![0u8; 2048];
        let tag = Tag {
            tag: 1,
            flow: 0,
            seq: 5,
            tx_ns: 9,
        };
        let n = build_frame(&mut buf, 128, true, &[2; 6], &[4; 6], &flow, tag).unwrap();
        let f = &buf[..n];
        assert_eq!(parse_tag(f), Some(tag));
        let udp = &f[54..];
        let p = sum16(&f[22..54]) + 17 + udp.len() as u32;
        assert_eq!(fold(p + sum16(udp)), 0);
        assert!(build_frame(&mut buf, 64, true, &[0; 6], &[0; 6], &flow, tag).is_none());
    }

    #[test]
    fn imix_mean_and_sizes() {
        let m = SizeMix::Imix.mean(false);
        assert!((m - 475.5).abs() < 1e-9);
        assert_eq!(SizeMix::parse("imix"), Some(SizeMix::Imix));
        assert_eq!(SizeMix::parse("512"), Some(SizeMix::Fixed(512)));
        assert_eq!(SizeMix::parse("20"), None);
        assert_eq!(SizeMix::parse("x"), None);
        assert_eq!(SizeMix::Fixed(64).frame(0, true), min_frame(true));
        let n64 = IMIX_PATTERN.iter().filter(|&&x| x == 64).count();
        assert_eq!(n64, 11);
    }

    #[test]
    fn line_rate() {
        // 100 Mb/s with 64-byte frames: 148,809.5 pps.
        assert!((line_rate_pps(100e6, 64.0) - 148_809.52).abs() < 0.1);
    }

    #[test]
    fn tunnel_host_addresses() {
        let v4 = [198, 18, 1, 1];
        // RFC 3056 2: 2002:c612:0101::1.
        let a: std::net::Ipv6Addr = "2002:c612:101::1".parse().unwrap();
        assert_eq!(Tunnel6in4::SixToFour.host(v4), a.octets());
        // RFC 5214 6.1: 2001:2:0:5:0:5efe:c612:101.
        let t = Tunnel6in4::Isatap {
            prefix64: [0x20, 1, 0, 2, 0, 0, 0, 5],
        };
        let a: std::net::Ipv6Addr = "2001:2:0:5:0:5efe:c612:101".parse().unwrap();
        assert_eq!(t.host(v4), a.octets());
    }

    #[test]
    fn sixin4_frame_round_trip_and_checksums() {
        let dst: std::net::Ipv6Addr = "2001:2:0:2::2".parse().unwrap();
        let flows = flows_6in4(3, 0, dst.octets(), [198, 18, 0, 1], Tunnel6in4::SixToFour);
        let flow = flows[1];
        assert_eq!(
            flow.outer,
            Some(Outer4 {
                src: [198, 18, 1, 1],
                dst: [198, 18, 0, 1]
            })
        );
        assert_eq!(&flow.src[..6], &[0x20, 0x02, 198, 18, 1, 1]);
        let tag = Tag {
            tag: 0x1234,
            flow: 1,
            seq: 77,
            tx_ns: 42,
        };
        let mut buf = vec![0u8; 2048];
        for size in [min_frame_6in4(), 512, MAX_FRAME] {
            buf.iter_mut().for_each(|b| *b = 0);
            let n = build_frame(&mut buf, size, true, &[2; 6], &[4; 6], &flow, tag).unwrap();
            assert_eq!(n, size - FCS_LEN);
            let f = &buf[..n];
            assert_eq!(&f[12..14], &[0x08, 0x00]);
            assert_eq!(f[14 + 9], PROTO_IPV6_IN_IPV4);
            assert_eq!(usize::from(u16::from_be_bytes([f[16], f[17]])), n - 14);
            assert_eq!(fold(sum16(&f[14..34])), 0, "outer header checksum");
            assert_eq!(f[34] >> 4, 6);
            assert_eq!(&f[42..58], &flow.src);
            assert_eq!(parse_tag(f), Some(tag));
            // The inner UDP checksum verifies over the inner IPv6 pseudo header.
            let udp = &f[74..];
            let p = sum16(&f[42..74]) + 17 + udp.len() as u32;
            assert_eq!(fold(p + sum16(udp)), 0);
        }
        // Smaller sizes are raised to the 6in4 minimum; IPv4 inner packets are refused.
        let n = build_frame(&mut buf, 96, true, &[2; 6], &[4; 6], &flow, tag).unwrap();
        assert_eq!(n, min_frame_6in4() - FCS_LEN);
        assert!(build_frame(&mut buf, 512, false, &[2; 6], &[4; 6], &flow, tag).is_none());
    }

    #[test]
    fn parse_tag_rejects_bad_6in4() {
        let dst = [0x20, 1, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2];
        let t = Tunnel6in4::Isatap {
            prefix64: [0x20, 1, 0, 2, 0, 0, 0, 5],
        };
        let flow = flows_6in4(1, 0, dst, [198, 18, 0, 1], t)[0];
        let tag = Tag {
            tag: 9,
            flow: 0,
            seq: 1,
            tx_ns: 2,
        };
        let mut buf = vec![0u8; 256];
        let n = build_frame(&mut buf, 128, true, &[2; 6], &[4; 6], &flow, tag).unwrap();
        let good = buf[..n].to_vec();
        assert_eq!(parse_tag(&good), Some(tag));
        // Truncated anywhere: never a tag, never a panic.
        for cut in 0..n - 1 {
            let p = parse_tag(&good[..cut]);
            assert_eq!(p.is_some(), cut >= 82 + TAG_LEN, "cut {cut}: {p:?}");
        }
        // A non-first fragment, an inner IPv4 header, an inner TCP header.
        let mut f = good.clone();
        f[14 + 6] = 0x00;
        f[14 + 7] = 0x10;
        assert_eq!(parse_tag(&f), None);
        let mut f = good.clone();
        f[34] = 0x45;
        assert_eq!(parse_tag(&f), None);
        let mut f = good.clone();
        f[34 + 6] = 6;
        assert_eq!(parse_tag(&f), None);
        // A bad IHL.
        let mut f = good;
        f[14] = 0x43;
        assert_eq!(parse_tag(&f), None);
    }

    #[test]
    fn parse_tag_rejects_garbage() {
        assert_eq!(parse_tag(&[]), None);
        assert_eq!(parse_tag(&[0u8; 13]), None);
        let mut f = vec![0u8; 60];
        f[12] = 0x08;
        f[14] = 0x45;
        f[23] = 6; // TCP
        assert_eq!(parse_tag(&f), None);
    }
}
