//! Rewriting a plain packet from a tuple: the IPv4 and IPv6 headers of a family change (RFC
//! 7915 4.1, 5.1) and the RFC 1624 checksum adjustments of the addresses and ports (RFC 7915
//! 4.5, 5.5), shared by the engine's lanes (NAT64's and SIIT's plain-packet rewrites) and the
//! fast path's reference model ([`crate::offload`]), so the lanes, the recipes and the XDP
//! program cannot drift apart.
//!
//! The full path's translators (`siit/to4.rs`, `to6.rs`) write their headers with
//! `xlat_wire::ipv4::write_header` / `ipv6::write_header` instead: they carry fragment
//! fields, options and ICMP errors that a plain packet never has.

use xlat_wire::field::{chunk_mut, set_u16, u16_at};
use xlat_wire::ipv4::proto as ipproto;
use xlat_wire::ipv6::addr4_sum;
use xlat_wire::l4::{tcp, udp};
use xlat_wire::{Delta, PacketBuf};

use crate::counters::{wrote, DropReason};
use crate::flow::Proto;
use crate::ipv4_id::Ipv4Ids;

/// An IPv4 transport tuple as a packet carries it (host byte order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple4 {
    /// IP protocol number (TCP 6, UDP 17).
    pub proto: u8,
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
}

/// An IPv6 transport tuple as a packet carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple6 {
    /// Next header (TCP 6, UDP 17), with no extension headers before it.
    pub proto: u8,
    pub src: u128,
    pub dst: u128,
    pub sport: u16,
    pub dport: u16,
}

pub(crate) fn ip_proto(proto: Proto) -> u8 {
    match proto {
        Proto::Tcp => ipproto::TCP,
        Proto::Udp => ipproto::UDP,
        Proto::Icmp => ipproto::ICMP,
    }
}

/// [`xlat_wire::ipv6::addr_sum`] without the byte loop: the address's four 32-bit chunks
/// summed in 64 bits and folded (2^16 = 1 modulo 0xffff, so a chunk counts as its two
/// words, RFC 1071 2 (B)); the same value, zero only for `::`.
#[inline(always)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "the address's four 32-bit chunks; the folded sum is below 2^17"
)]
fn addr6_sum(a: u128) -> u32 {
    let s = u64::from(a as u32)
        + u64::from((a >> 32) as u32)
        + u64::from((a >> 64) as u32)
        + u64::from((a >> 96) as u32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u32
}

/// The adjustment of the address-family change: the IPv6 pseudo-header addresses `old6`
/// out, the IPv4 ones `new4` in (`remove6`), or the other way round, plus the port words
/// -- the terms `Delta::remove_sum`, `add_sum` and `word` add, summed once and folded at
/// the end (the same value: the fold after each step only keeps the sum short).
#[inline(always)]
fn family_delta(six: u32, four: u32, remove6: bool, ports: [(u16, u16); 2]) -> Delta {
    let (gone, came) = if remove6 { (six, four) } else { (four, six) };
    // `remove_sum` adds the complement of the folded sum; `add_sum` the folded sum, which
    // the unfolded one (at most 2^18 here) can stand for: same residue, zero only if zero.
    let gone = u32::from(!xlat_wire::checksum::fold(gone));
    let [(o1, n1), (o2, n2)] = ports;
    let total = gone + came + u32::from(!o1) + u32::from(n1) + u32::from(!o2) + u32::from(n2);
    Delta::ZERO.add_sum(total)
}

/// The TCP/UDP checksum adjustment of an IPv6 packet with tuple `key` rewritten as an IPv4
/// packet with tuple `new` (RFC 7915 5.5, RFC 1624): the pseudo-header's addresses go from
/// IPv6 to IPv4 and the ports change; its length and protocol words are the same in both
/// families. No TTL or hop limit is involved (they are not in the pseudo-header), so the
/// fast path and the engine's own lane ([`crate::nat64::Nat64::lane`]) use the same value.
#[inline(always)]
pub(crate) fn delta64(key: &Tuple6, new: &Tuple4) -> Delta {
    family_delta(
        addr6_sum(key.src) + addr6_sum(key.dst),
        addr4_sum(new.src) + addr4_sum(new.dst),
        true,
        [(key.sport, new.sport), (key.dport, new.dport)],
    )
}

/// [`delta64`] the other way: IPv4 tuple `key` rewritten as IPv6 tuple `new` (RFC 7915
/// 4.5).
#[inline(always)]
pub(crate) fn delta46(key: &Tuple4, new: &Tuple6) -> Delta {
    family_delta(
        addr6_sum(new.src) + addr6_sum(new.dst),
        addr4_sum(key.src) + addr4_sum(key.dst),
        false,
        [(key.sport, new.sport), (key.dport, new.dport)],
    )
}

/// Writes the 20-byte IPv4 header an unfragmented IPv6 packet becomes (RFC 7915 5.1) into
/// `h`: TOS = the traffic class, identification `ident` and DF `df` (from
/// [`crate::ipv4_id::Ipv4Ids::next`]: DF clear up to 1260 bytes), `ttl` (the caller decrements
/// the hop limit: the translator is a router), protocol and addresses of `new`, and its
/// header checksum (RFC 791), summed from the fields rather than over the bytes. Written in
/// place, not returned: a returned array is stored in small pieces and copied in wide ones,
/// and on the lane that copy waited on its own stores (store-forwarding stalls, a third of
/// [`crate::nat64::Nat64::lane`]'s time).
#[inline(always)]
pub(crate) fn write_ipv4_header(
    h: &mut [u8; 20],
    tos: u8,
    total_len: u16,
    (ident, df): (u16, bool),
    ttl: u8,
    new: &Tuple4,
) {
    let flags: u16 = if df { 0x4000 } else { 0 };
    let words = [
        0x4500 | u32::from(tos),
        u32::from(total_len),
        u32::from(ident),
        u32::from(flags),
        (u32::from(ttl) << 8) | u32::from(new.proto),
        new.src >> 16,
        new.src & 0xffff,
        new.dst >> 16,
        new.dst & 0xffff,
    ];
    let s: u32 = words.iter().sum();
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    #[expect(
        clippy::cast_possible_truncation,
        reason = "two folds leave at most 0xffff"
    )]
    let ck = !(s as u16);
    let [t0, t1] = total_len.to_be_bytes();
    let [c0, c1] = ck.to_be_bytes();
    let [i0, i1] = ident.to_be_bytes();
    let [f0, _] = flags.to_be_bytes();
    let [s0, s1, s2, s3] = new.src.to_be_bytes();
    let [d0, d1, d2, d3] = new.dst.to_be_bytes();
    *h = [
        0x45, tos, t0, t1, i0, i1, f0, 0, ttl, new.proto, c0, c1, s0, s1, s2, s3, d0, d1, d2, d3,
    ];
}

/// The engine lanes' IPv6 -> IPv4 rewrite of a plain TCP/UDP packet in `buf` (40-byte
/// header straight to the transport header, `plen` payload bytes; the caller checked it):
/// tuple `key` becomes `new` (ports written, checksum adjusted by [`delta64`], RFC 7915
/// 5.5), the IPv4 header ([`write_ipv4_header`], `ttl` already decremented) replaces the
/// last 20 bytes of the IPv6 one (5.1; identification and DF from `ids`), and link padding
/// is cut. NAT64's and SIIT's lanes share it.
#[inline(always)]
pub(crate) fn lane_6to4(
    buf: &mut PacketBuf,
    plen: usize,
    tos: u8,
    ttl: u8,
    key: &Tuple6,
    new: &Tuple4,
    ids: &mut Ipv4Ids,
) -> Result<(), DropReason> {
    use xlat_wire::ipv6::HEADER;
    const SHRINK: usize = HEADER - xlat_wire::ipv4::MIN_HEADER;
    let delta = delta64(key, new).folded();
    buf.truncate(HEADER + plen);
    let out = buf.data_mut();
    write_l4(out, HEADER, new.proto, (new.sport, new.dport), delta)?;
    let h = chunk_mut::<20>(out, SHRINK).ok_or(DropReason::Internal)?;
    let total = xlat_wire::ipv4::MIN_HEADER + plen;
    let id = ids.next(total, new.src, new.dst, new.proto);
    let total = u16::try_from(total).unwrap_or(u16::MAX);
    write_ipv4_header(h, tos, total, id, ttl, new);
    wrote(buf.pull_front(SHRINK))
}

/// [`lane_6to4`]'s twin: a plain IPv4 TCP/UDP packet in `buf` (20-byte header, `total`
/// bytes; the caller checked it and that 20 bytes of headroom are there) becomes the IPv6
/// packet of tuple `new` (RFC 7915 4.1, 4.5; checksum by [`delta46`], `hop` already
/// decremented), link padding cut.
#[inline(always)]
pub(crate) fn lane_4to6(
    buf: &mut PacketBuf,
    total: usize,
    tos: u8,
    hop: u8,
    key: &Tuple4,
    new: &Tuple6,
) -> Result<(), DropReason> {
    use xlat_wire::ipv6::HEADER;
    let delta = delta46(key, new).folded();
    let payload = total.saturating_sub(xlat_wire::ipv4::MIN_HEADER);
    buf.truncate(total);
    wrote(buf.push_front(HEADER - xlat_wire::ipv4::MIN_HEADER))?;
    let out = buf.data_mut();
    let h = out
        .first_chunk_mut::<HEADER>()
        .ok_or(DropReason::Internal)?;
    let payload = u16::try_from(payload).unwrap_or(u16::MAX);
    write_ipv6_header(h, tos, payload, hop, new);
    write_l4(out, HEADER, new.proto, (new.sport, new.dport), delta)
}

/// Writes the 40-byte IPv6 header an unfragmented IPv4 packet without options becomes (RFC
/// 7915 4.1) into `h`: traffic class = TOS, flow label 0, `hop` (the caller decrements the
/// TTL), next header and addresses of `new`. In place, as [`write_ipv4_header`].
#[inline(always)]
pub(crate) fn write_ipv6_header(
    h: &mut [u8; 40],
    tos: u8,
    payload_len: u16,
    hop: u8,
    new: &Tuple6,
) {
    let [p0, p1] = payload_len.to_be_bytes();
    let (first, addrs) = h.split_at_mut(8);
    first.copy_from_slice(&[0x60 | (tos >> 4), tos << 4, 0, 0, p0, p1, new.proto, hop]);
    let (src, dst) = addrs.split_at_mut(16);
    src.copy_from_slice(&new.src.to_be_bytes());
    dst.copy_from_slice(&new.dst.to_be_bytes());
}

/// RFC 1624 eqn. 3 on a checksum field, as the XDP program does it.
#[expect(
    clippy::cast_possible_truncation,
    reason = "two folds leave at most 0xffff"
)]
fn csum_apply(ck: u16, d: u16) -> u16 {
    let s = u32::from(!ck) + u32::from(d);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

/// Writes the ports `(sport, dport)` of the TCP/UDP header at `at` in `out` and updates its
/// checksum by the folded `delta` ([`l4_csum`]): the lanes' transport rewrite.
#[inline(always)]
fn write_l4(
    out: &mut [u8],
    at: usize,
    proto: u8,
    (sport, dport): (u16, u16),
    delta: u16,
) -> Result<(), DropReason> {
    let ck = at + l4_csum_off(proto);
    let old = u16_at(out, ck).ok_or(DropReason::Internal)?;
    wrote(
        set_u16(out, at, sport)
            & set_u16(out, at + 2, dport)
            & set_u16(out, ck, l4_csum(proto, old, delta)),
    )
}

/// The transport checksum after `d`: TCP plainly; UDP keeps a zero (none, IPv4 only) and sends
/// a computed zero as all ones (RFC 768, RFC 8200 8.1).
#[inline(always)]
pub(crate) fn l4_csum(proto: u8, ck: u16, d: u16) -> u16 {
    if proto != ipproto::UDP {
        return csum_apply(ck, d);
    }
    match ck {
        0 => 0,
        c => match csum_apply(c, d) {
            0 => 0xffff,
            n => n,
        },
    }
}

#[inline(always)]
pub(crate) fn l4_csum_off(proto: u8) -> usize {
    if proto == ipproto::TCP {
        tcp::CHECKSUM
    } else {
        udp::CHECKSUM
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `delta64` / `delta46` against the step-by-step `Delta` the full path computes
    /// (`siit::to4` / `siit::to6`), edge addresses included.
    #[test]
    fn family_deltas_equal_the_step_by_step_ones() {
        use proptest::prelude::*;
        use xlat_wire::ipv6::addr_sum;
        let a6 = prop_oneof![Just(0u128), Just(u128::MAX), any::<u128>()];
        let a4 = prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()];
        let port = prop_oneof![Just(0u16), Just(0xffff), any::<u16>()];
        let cfg = ProptestConfig::with_cases(4000);
        proptest!(cfg, |(s6 in a6.clone(), d6 in a6, s4 in a4.clone(), d4 in a4,
                        p in [port.clone(), port.clone(), port.clone(), port])| {
            let t6 = Tuple6 { proto: 17, src: s6, dst: d6, sport: p[0], dport: p[1] };
            let t4 = Tuple4 { proto: 17, src: s4, dst: d4, sport: p[2], dport: p[3] };
            let want64 = Delta::ZERO
                .remove_sum(addr_sum(s6).wrapping_add(addr_sum(d6)))
                .add_sum(addr4_sum(s4) + addr4_sum(d4))
                .word(p[0], p[2])
                .word(p[1], p[3]);
            prop_assert_eq!(delta64(&t6, &t4).folded(), want64.folded());
            let want46 = Delta::ZERO
                .remove_sum(addr4_sum(s4) + addr4_sum(d4))
                .add_sum(addr_sum(s6).wrapping_add(addr_sum(d6)))
                .word(p[2], p[0])
                .word(p[3], p[1]);
            let t4k = Tuple4 { sport: p[2], dport: p[3], ..t4 };
            let t6n = Tuple6 { sport: p[0], dport: p[1], ..t6 };
            prop_assert_eq!(delta46(&t4k, &t6n).folded(), want46.folded());
        });
    }
}
