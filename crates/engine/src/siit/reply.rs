//! The translator's own ICMP errors (RFC 7915 4.4, 5.4): when it drops a packet because the
//! hop limit ran out, the packet is too big for the next hop with DF set, or carries a source
//! route / routing header it cannot honour, it tells the sender -- as any router would; and
//! when it discards a packet it cannot translate (an address without a form in the other
//! family; NAT64: no BIB entry, filtered, a protocol without ports), it answers with a
//! Destination Unreachable unless `unreachable_errors` is off ([`super::unreachable4`],
//! [`super::unreachable6`], the codes in [`super::siit_code4`] and NAT64's `answer4`).
//!
//! The error replaces the dropped packet in its buffer (the driver sends it back out of the
//! same TUN device): a new IP and ICMP header go in front of the packet, which is cut to what
//! an error may quote (RFC 1812 4.3.2.3: 576 bytes in all for ICMPv4; RFC 4443 2.4 c: 1280
//! for ICMPv6). No error is sent about an ICMP error, a non-first fragment, or to a source
//! that is not a unicast address (RFC 1812 4.3.2.7, RFC 4443 2.4 e), and errors are rate
//! limited (RFC 4443 2.4 f; RFC 1812 4.3.2.8): [`RateLimit`].

use xlat_wire::checksum;
use xlat_wire::field::{set_u16, set_u32, set_u8, u8_at};
use xlat_wire::ipv4::{self, proto, Ipv4Fields, Ipv4Header};
use xlat_wire::ipv6::{self, nh, Ipv6Fields, Ipv6Header};
use xlat_wire::l4::{icmp, icmpv6};
use xlat_wire::PacketBuf;

use crate::Time;

/// Largest ICMPv4 error sent (RFC 1812 4.3.2.3).
const MAX_ICMP4: usize = 576;
/// Largest ICMPv6 error sent (RFC 4443 2.4 c: the minimum IPv6 MTU).
const MAX_ICMP6: usize = ipv6::MIN_MTU;
/// Hop limit / TTL of the errors (RFC 1700 / IANA default).
const TTL: u8 = 64;

/// True for an IPv4 address an error may go to: not 0/8, loopback, multicast, reserved or
/// broadcast (RFC 1812 4.3.2.7).
fn unicast4(a: u32) -> bool {
    let first = a >> 24;
    first != 0 && first != 127 && first < 224
}

/// True for an IPv6 address an error may go to: not unspecified, loopback or multicast.
fn unicast6(a: u128) -> bool {
    a != 0 && a != 1 && (a >> 120) != 0xff
}

/// Replaces the IPv4 packet in `buf` by an ICMPv4 error (`typ`, `code`, the 32 bits after
/// the checksum) about it, from `src` to the packet's source. False, with `buf` unchanged,
/// when no error may be sent -- or, a broken invariant, with `buf` changed, when a header
/// write missed the room it had made.
pub(crate) fn icmp4_error(buf: &mut PacketBuf, src: u32, typ: u8, code: u8, rest: u32) -> bool {
    let Ok(h) = Ipv4Header::parse(buf.data(), false) else {
        return false;
    };
    if h.is_later_fragment() || !unicast4(h.src) || !unicast4(h.dst) {
        return false;
    }
    if h.proto == proto::ICMP && u8_at(buf.data(), h.header_len).is_some_and(super::icmp::is_error4)
    {
        return false;
    }
    let quote = buf.len().min(h.total_len).min(MAX_ICMP4 - 28);
    buf.truncate(quote);
    if !buf.push_front(28) {
        return false;
    }
    // At most MAX_ICMP4 bytes (the quote was cut above).
    let Ok(total) = u16::try_from(buf.len()) else {
        return false;
    };
    let pkt = buf.data_mut();
    // False from a write below: the 28 bytes pushed in front were not there after all.
    let wrote = ipv4::write_header(
        pkt,
        &Ipv4Fields {
            tos: 0,
            total_len: total,
            ident: 0,
            dont_fragment: false,
            more_fragments: false,
            frag_offset: 0,
            ttl: TTL,
            proto: proto::ICMP,
            src,
            dst: h.src,
        },
    ) & set_u8(pkt, 20 + icmp::TYPE, typ)
        & set_u8(pkt, 20 + icmp::CODE, code)
        & set_u16(pkt, 20 + icmp::CHECKSUM, 0)
        & set_u32(pkt, 24, rest);
    let c = checksum::checksum(pkt.get(20..).unwrap_or(&[]));
    wrote & set_u16(pkt, 20 + icmp::CHECKSUM, c)
}

/// Replaces the IPv6 packet in `buf` by an ICMPv6 error about it, from `src` to the packet's
/// source; see [`icmp4_error`].
pub(crate) fn icmp6_error(buf: &mut PacketBuf, src: u128, typ: u8, code: u8, rest: u32) -> bool {
    let Ok(h) = Ipv6Header::parse_embedded(buf.data()) else {
        return false;
    };
    // RFC 4443 2.4 e: not to multicast destinations (Packet Too Big excepted), not from
    // unspecified or multicast sources, not about errors or non-first fragments.
    let dst_ok = unicast6(h.dst) || typ == icmpv6::PACKET_TOO_BIG;
    if !unicast6(h.src) || !dst_ok || h.is_later_fragment() {
        return false;
    }
    if h.proto == nh::ICMPV6 && u8_at(buf.data(), h.l4_off).is_some_and(icmpv6::is_error) {
        return false;
    }
    let quote = buf.len().min(h.total_len()).min(MAX_ICMP6 - 48);
    buf.truncate(quote);
    if !buf.push_front(48) {
        return false;
    }
    // At most MAX_ICMP6 bytes (the quote was cut above).
    let Ok(payload_len) = u16::try_from(buf.len() - 40) else {
        return false;
    };
    let pkt = buf.data_mut();
    // False from a write below: the 48 bytes pushed in front were not there after all.
    let wrote = ipv6::write_header(
        pkt,
        &Ipv6Fields {
            traffic_class: 0,
            flow_label: 0,
            payload_len,
            next_header: nh::ICMPV6,
            hop_limit: TTL,
            src,
            dst: h.src,
        },
    ) & set_u8(pkt, 40 + icmpv6::TYPE, typ)
        & set_u8(pkt, 40 + icmpv6::CODE, code)
        & set_u16(pkt, 40 + icmpv6::CHECKSUM, 0)
        & set_u32(pkt, 44, rest);
    let c = ipv6::upper_checksum(src, h.src, nh::ICMPV6, pkt.get(40..).unwrap_or(&[]));
    wrote & set_u16(pkt, 40 + icmpv6::CHECKSUM, c)
}

/// A token bucket for the errors a translator originates (RFC 4443 2.4 f): `RATE` per
/// second, bursts of `BURST`. Time comes from the caller, so replays are deterministic.
pub(crate) struct RateLimit {
    tokens: u64,
    last: Time,
}

impl RateLimit {
    const RATE: u64 = 1000;
    const BURST: u64 = 50;

    pub fn new() -> Self {
        RateLimit {
            tokens: Self::BURST,
            last: Time(0),
        }
    }

    /// Takes a token if one is left.
    pub fn allow(&mut self, now: Time) -> bool {
        let elapsed = now.0.saturating_sub(self.last.0);
        let new = elapsed.saturating_mul(Self::RATE) / 1_000_000_000;
        if new > 0 {
            self.tokens = (self.tokens + new).min(Self::BURST);
            self.last = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_udp(ttl: u8) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 36, 0, 1, 0x40, 0, ttl, 17, 0, 0, 198, 19, 0, 2, 198, 19, 0, 101,
        ];
        p.extend_from_slice(&[0x13, 0x88, 0, 53, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        ipv4::fill_checksum(&mut p, 20);
        p
    }

    #[test]
    fn icmp4_error_quotes_the_packet() {
        let orig = v4_udp(1);
        let mut room = vec![0u8; 64 + orig.len()];
        room[64..].copy_from_slice(&orig);
        let mut b = PacketBuf::new(&mut room, 64, orig.len()).unwrap();
        assert!(icmp4_error(&mut b, 0xc613_0065, 11, 0, 0));
        let d = b.data();
        let h = Ipv4Header::parse(d, true).unwrap();
        assert_eq!(
            (h.src, h.dst, h.proto, h.total_len),
            (0xc613_0065, 0xc613_0002, 1, 64)
        );
        assert_eq!(&d[20..22], &[11, 0]);
        assert!(checksum::verifies(&d[20..]));
        assert_eq!(&d[28..], &orig[..]);
        // Not about an ICMP error.
        let mut again = d.to_vec();
        let mut b = PacketBuf::new(&mut again, 0, 64).unwrap();
        assert!(!icmp4_error(&mut b, 1, 11, 0, 0));
    }

    #[test]
    fn rate_limit_refills() {
        let mut r = RateLimit::new();
        let t = Time::from_secs(10);
        for _ in 0..50 {
            assert!(r.allow(t));
        }
        assert!(!r.allow(t));
        assert!(r.allow(Time(t.0 + 1_000_000)), "1 ms later: one token");
        assert!(!r.allow(Time(t.0 + 1_000_000)));
    }
}
