//! ICMP <-> ICMPv6 type, code, MTU and pointer mapping (RFC 7915 4.2 and 5.2).
//!
//! `None` everywhere means "silently drop" in the RFC's words; the caller counts it as
//! [`crate::DropReason::IcmpNotTranslated`].

use xlat_wire::l4::{icmp, icmpv6};

/// RFC 1191 7, Table 7-1: MTU plateaus, for Fragmentation Needed messages with an MTU of 0.
const PLATEAUS: [u32; 11] = [
    65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68,
];

/// The IPv6 minimum link MTU (RFC 8200 5): no Packet Too Big may ask for less.
const IPV6_MIN_MTU: u32 = 1280;

/// RFC 7915 4.2 (Destination Unreachable, Code 4): "use the greatest plateau value that is
/// less than the returned Total Length field, but that is larger than or equal to 1280".
fn plateau_below(total_len: u32) -> u32 {
    PLATEAUS
        .iter()
        .copied()
        .find(|&p| p < total_len)
        .unwrap_or(IPV6_MIN_MTU)
        .max(IPV6_MIN_MTU)
}

/// RFC 7915 4.2 Figure 3: IPv4 header field offset -> IPv6 header field offset.
fn pointer_4to6(p: u8) -> Option<u32> {
    Some(match p {
        0 => 0,        // Version/IHL -> Version/Traffic Class
        1 => 1,        // Type Of Service -> Traffic Class
        2 | 3 => 4,    // Total Length -> Payload Length
        8 => 7,        // Time to Live -> Hop Limit
        9 => 6,        // Protocol -> Next Header
        12..=15 => 8,  // Source Address
        16..=19 => 24, // Destination Address
        // Identification, Flags/Fragment Offset, Header Checksum, options: n/a.
        _ => return None,
    })
}

/// RFC 7915 5.2 Figure 6: IPv6 header field offset -> IPv4 header field offset.
fn pointer_6to4(p: u32) -> Option<u32> {
    Some(match p {
        0 => 0,        // Version/Traffic Class -> Version/IHL, Type Of Service
        1 => 1,        // Traffic Class/Flow Label -> Type Of Service
        4 | 5 => 2,    // Payload Length -> Total Length
        6 => 9,        // Next Header -> Protocol
        7 => 8,        // Hop Limit -> Time to Live
        8..=23 => 12,  // Source Address
        24..=39 => 16, // Destination Address
        // Flow Label, extension headers: n/a.
        _ => return None,
    })
}

/// An ICMPv6 error's type, code and the 32 bits after the checksum (MTU or pointer).
pub(crate) type Mapped = (u8, u8, u32);

/// RFC 7915 4.2: an ICMPv4 error (type, code, the 32 bits after the checksum) -> ICMPv6.
/// `inner_total_len` is the Total Length of the quoted packet (for the RFC 1191 plateau) and
/// `mtu` the next hop's MTU on both sides.
pub(crate) fn error_4to6(
    t: u8,
    code: u8,
    rest: u32,
    inner_total_len: u16,
    mtu: u32,
) -> Option<Mapped> {
    match t {
        icmp::DEST_UNREACH => Some(match code {
            // Net / host unreachable, source route failed, unknown net / host, isolated,
            // network / host unreachable for TOS -> No route to destination.
            0 | 1 | 5 | 6 | 7 | 8 | 11 | 12 => (icmpv6::DEST_UNREACH, icmpv6::CODE_NO_ROUTE, 0),
            // Protocol unreachable -> Parameter Problem, unrecognized Next Header, pointing
            // at the Next Header field.
            2 => (
                icmpv6::PARAM_PROBLEM,
                icmpv6::CODE_UNRECOGNIZED_NEXT_HEADER,
                6,
            ),
            3 => (icmpv6::DEST_UNREACH, icmpv6::CODE_PORT_UNREACH, 0),
            // Fragmentation Needed -> Packet Too Big, the MTU adjusted for the 20 bytes the
            // header grows by: min(advertised + 20, IPv6 next hop MTU, IPv4 next hop MTU + 20).
            // A router that sent no MTU (pre-RFC 1191): "use the plateau values specified in
            // [RFC1191] to determine a likely path MTU and include that path MTU in the ICMPv6
            // packet" -- the plateau itself (at least 1280) goes in, capped by the next hops.
            4 => {
                let likely = match rest & 0xffff {
                    0 => plateau_below(u32::from(inner_total_len)),
                    m => m + 20,
                };
                // Never below 1280 (RFC 7915 4.2, RFC 8200 5): an IPv6 host would answer
                // a smaller one with atomic fragments (RFC 6946), which RFC 7915 removed.
                let mtu6 = likely
                    .min(mtu)
                    .min(mtu.saturating_add(20))
                    .max(IPV6_MIN_MTU);
                (icmpv6::PACKET_TOO_BIG, 0, mtu6)
            }
            // Administratively prohibited (9, 10, 13) and precedence cutoff (15).
            9 | 10 | 13 | 15 => (icmpv6::DEST_UNREACH, icmpv6::CODE_ADMIN_PROHIBITED, 0),
            // 14 (host precedence violation) and unknown codes: drop.
            _ => return None,
        }),
        // Time Exceeded: type 3, code unchanged.
        icmp::TIME_EXCEEDED => Some((icmpv6::TIME_EXCEEDED, code, 0)),
        icmp::PARAM_PROBLEM => match code {
            // Pointer indicates the error, and bad length: pointer translated (Figure 3).
            0 | 2 => {
                let p = pointer_4to6((rest >> 24) as u8)?;
                Some((icmpv6::PARAM_PROBLEM, icmpv6::CODE_ERRONEOUS_FIELD, p))
            }
            // Missing a required option, and unknown codes: drop.
            _ => None,
        },
        // Source quench, redirect, and anything else: drop.
        _ => None,
    }
}

/// RFC 7915 5.2: an ICMPv6 error (type, code, the 32 bits after the checksum) -> ICMPv4.
/// `inner_fragment` tells whether the quoted packet carries a Fragment header (it shrinks
/// by 8 more bytes on the way to IPv4).
pub(crate) fn error_6to4(
    t: u8,
    code: u8,
    rest: u32,
    inner_fragment: bool,
    mtu: u32,
) -> Option<Mapped> {
    match t {
        icmpv6::DEST_UNREACH => Some(match code {
            // No route, beyond scope of source, address unreachable -> host unreachable.
            0 | 2 | 3 => (icmp::DEST_UNREACH, icmp::CODE_HOST_UNREACH, 0),
            // Administratively prohibited -> communication with destination host
            // administratively prohibited (code 10).
            1 => (icmp::DEST_UNREACH, 10, 0),
            4 => (icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH, 0),
            _ => return None,
        }),
        // Packet Too Big -> Fragmentation Needed, the MTU adjusted for the header shrinking
        // by 20 (28 with a Fragment header): min(advertised - 20, IPv4 next hop MTU, IPv6 next
        // hop MTU - 20).
        icmpv6::PACKET_TOO_BIG => {
            let shrink = if inner_fragment { 28 } else { 20 };
            let mtu4 = rest
                .saturating_sub(shrink)
                .min(mtu)
                .min(mtu.saturating_sub(20))
                .min(0xffff);
            Some((icmp::DEST_UNREACH, icmp::CODE_FRAG_NEEDED, mtu4))
        }
        // Time Exceeded: type 11, code unchanged.
        icmpv6::TIME_EXCEEDED => Some((icmp::TIME_EXCEEDED, code, 0)),
        icmpv6::PARAM_PROBLEM => match code {
            // Erroneous header field: pointer translated (Figure 6), in the first byte.
            0 => {
                let p = pointer_6to4(rest)?;
                Some((icmp::PARAM_PROBLEM, 0, p << 24))
            }
            // Unrecognized Next Header -> protocol unreachable.
            1 => Some((icmp::DEST_UNREACH, icmp::CODE_PROTO_UNREACH, 0)),
            // Unrecognized option, and unknown codes: drop.
            _ => None,
        },
        _ => None,
    }
}

/// RFC 7915 4.2: ICMPv4 echo request/reply -> ICMPv6 echo request/reply.
pub(crate) fn query_4to6(t: u8) -> Option<u8> {
    match t {
        icmp::ECHO_REQUEST => Some(icmpv6::ECHO_REQUEST),
        icmp::ECHO_REPLY => Some(icmpv6::ECHO_REPLY),
        // Timestamp, information, address mask, router messages: drop.
        _ => None,
    }
}

/// RFC 7915 5.2: ICMPv6 echo request/reply -> ICMPv4 echo request/reply.
pub(crate) fn query_6to4(t: u8) -> Option<u8> {
    match t {
        icmpv6::ECHO_REQUEST => Some(icmp::ECHO_REQUEST),
        icmpv6::ECHO_REPLY => Some(icmp::ECHO_REPLY),
        // MLD, neighbor discovery and other informational messages: drop.
        _ => None,
    }
}

/// ICMPv4 types RFC 7915 4.2 treats as errors (translated with their quoted packet).
pub(crate) fn is_error4(t: u8) -> bool {
    matches!(
        t,
        icmp::DEST_UNREACH
            | icmp::SOURCE_QUENCH
            | icmp::REDIRECT
            | icmp::TIME_EXCEEDED
            | icmp::PARAM_PROBLEM
            | 6 // alternate host address
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_unreach_codes_4to6() {
        let m = |code| error_4to6(3, code, 0, 0, 1500).map(|(t, c, _)| (t, c));
        assert_eq!(m(0), Some((1, 0)));
        assert_eq!(m(1), Some((1, 0)));
        assert_eq!(error_4to6(3, 2, 0, 0, 1500), Some((4, 1, 6)));
        assert_eq!(m(3), Some((1, 4)));
        assert_eq!(m(5), Some((1, 0)));
        assert_eq!(m(9), Some((1, 1)));
        assert_eq!(m(13), Some((1, 1)));
        assert_eq!(m(14), None);
        assert_eq!(m(15), Some((1, 1)));
        assert_eq!(m(16), None);
    }

    #[test]
    fn frag_needed_to_packet_too_big() {
        // RFC 7915 4.2: min(1400 + 20, 1500, 1520).
        assert_eq!(error_4to6(3, 4, 1400, 0, 1500), Some((2, 0, 1420)));
        // Capped by the IPv6 next hop.
        assert_eq!(error_4to6(3, 4, 1492, 0, 1500), Some((2, 0, 1500)));
        // No MTU (pre-RFC 1191 router): the plateau below the quoted total length 1500, 1492,
        // is the MTU the ICMPv6 message carries.
        assert_eq!(error_4to6(3, 4, 0, 1500, 9000), Some((2, 0, 1492)));
    }

    /// RFC 7915 4.2: the Packet Too Big MTU is never below 1280 -- an advertised 1024 gives
    /// 1280, not 1044 -- and the plateau for a router that sent no MTU, which the ICMPv6
    /// message carries as it is, is at least 1280.
    #[test]
    fn rfc7915_4_2_packet_too_big_never_below_1280() {
        assert_eq!(error_4to6(3, 4, 1024, 0, 1500), Some((2, 0, 1280)));
        assert_eq!(error_4to6(3, 4, 68, 0, 1500), Some((2, 0, 1280)));
        assert_eq!(error_4to6(3, 4, 0, 576, 1500), Some((2, 0, 1280)));
        assert_eq!(error_4to6(3, 4, 0, 1300, 1500), Some((2, 0, 1280)));
        assert_eq!(error_4to6(3, 4, 0, 2000, 1500), Some((2, 0, 1492)));
        assert_eq!(plateau_below(68), 1280);
        assert_eq!(plateau_below(1400), 1280);
        assert_eq!(plateau_below(2000), 1492);
    }

    #[test]
    fn packet_too_big_to_frag_needed() {
        assert_eq!(error_6to4(2, 0, 1400, false, 1500), Some((3, 4, 1380)));
        assert_eq!(error_6to4(2, 0, 1400, true, 1500), Some((3, 4, 1372)));
        assert_eq!(error_6to4(2, 0, 9000, false, 1500), Some((3, 4, 1480)));
        assert_eq!(error_6to4(2, 0, 10, false, 1500), Some((3, 4, 0)));
    }

    #[test]
    fn parameter_problem_pointers() {
        assert_eq!(error_4to6(12, 0, 9 << 24, 0, 1500), Some((4, 0, 6)));
        assert_eq!(error_4to6(12, 2, 16 << 24, 0, 1500), Some((4, 0, 24)));
        assert_eq!(
            error_4to6(12, 0, 4 << 24, 0, 1500),
            None,
            "identification: n/a"
        );
        assert_eq!(error_4to6(12, 1, 0, 0, 1500), None);
        assert_eq!(error_6to4(4, 0, 7, false, 1500), Some((12, 0, 8 << 24)));
        assert_eq!(error_6to4(4, 0, 30, false, 1500), Some((12, 0, 16 << 24)));
        assert_eq!(error_6to4(4, 0, 2, false, 1500), None, "flow label: n/a");
        assert_eq!(error_6to4(4, 0, 40, false, 1500), None);
        assert_eq!(error_6to4(4, 1, 0, false, 1500), Some((3, 2, 0)));
        assert_eq!(error_6to4(4, 2, 0, false, 1500), None);
    }

    #[test]
    fn other_types() {
        assert_eq!(error_4to6(11, 1, 0, 0, 1500), Some((3, 1, 0)));
        assert_eq!(error_6to4(3, 0, 0, false, 1500), Some((11, 0, 0)));
        assert_eq!(error_6to4(1, 1, 0, false, 1500), Some((3, 10, 0)));
        assert_eq!(error_6to4(1, 4, 0, false, 1500), Some((3, 3, 0)));
        assert_eq!(error_6to4(1, 7, 0, false, 1500), None);
        assert_eq!(error_4to6(4, 0, 0, 0, 1500), None, "source quench");
        assert_eq!(error_4to6(5, 0, 0, 0, 1500), None, "redirect");
        assert_eq!(query_4to6(13), None, "timestamp");
        assert_eq!(query_4to6(8), Some(128));
        assert_eq!(query_6to4(129), Some(0));
        assert_eq!(query_6to4(135), None, "neighbor solicitation");
    }
}
