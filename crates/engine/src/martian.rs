//! Martian addresses: sources and destinations a router never forwards, so a translator
//! never translates them (RFC 7915 4.1 and 5.1: the translator is a router; RFC 1812 5.3.7
//! and 4.2.2.11 for IPv4; RFC 3927 7 for IPv4 link-local; RFC 4291 2.5.2, 2.5.3, 2.5.6 and
//! 2.7 for IPv6). Packets with one are dropped as [`crate::DropReason::MartianAddress`].

/// RFC 1812 5.3.7 / 4.2.2.11: `{0, -1}` (this network, 0.0.0.0/8), `{127, -1}` (loopback),
/// the limited broadcast 255.255.255.255, and RFC 3927 7: 169.254.0.0/16 is never forwarded.
/// Martian as source or destination.
#[inline]
fn either4(a: u32) -> bool {
    let top = a >> 24;
    top == 0 || top == 127 || a >> 16 == 0xa9fe || a == u32::MAX
}

/// An IPv4 source a router discards (RFC 1812 5.3.7): the above, and a multicast (224.0.0.0/4)
/// or reserved class E (240.0.0.0/4) source.
#[inline]
pub(crate) fn source4(a: u32) -> bool {
    either4(a) || a >> 28 >= 0xe
}

/// An IPv4 destination a router does not forward (RFC 1812 5.3.7, RFC 3927 7).
#[inline]
pub(crate) fn destination4(a: u32) -> bool {
    either4(a)
}

/// RFC 4291 2.5.2 (unspecified), 2.5.3 (loopback) and 2.5.6 (link-local, fe80::/10, "routers
/// must not forward"): martian as source or destination.
#[inline]
fn either6(a: u128) -> bool {
    a == 0 || a == 1 || a >> 118 == 0x3fa
}

/// An IPv6 source a router discards: the above, and a multicast source (ff00::/8, RFC 4291
/// 2.7: "must not be used as a source address").
#[inline]
pub(crate) fn source6(a: u128) -> bool {
    either6(a) || a >> 120 == 0xff
}

/// An IPv6 destination a router does not forward.
#[inline]
pub(crate) fn destination6(a: u128) -> bool {
    either6(a)
}

/// True when an IPv4 packet from `src` to `dst` must not be translated.
#[inline]
pub(crate) fn packet4(src: u32, dst: u32) -> bool {
    source4(src) || destination4(dst)
}

/// True when an IPv6 packet from `src` to `dst` must not be translated.
#[inline]
pub(crate) fn packet6(src: u128, dst: u128) -> bool {
    source6(src) || destination6(dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }
    fn v6(s: &str) -> u128 {
        u128::from(s.parse::<Ipv6Addr>().unwrap())
    }

    #[test]
    fn rfc1812_5_3_7_ipv4_martians() {
        for s in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "169.254.1.1",
            "255.255.255.255",
        ] {
            assert!(source4(v4(s)) && destination4(v4(s)), "{s}");
        }
        for s in ["224.0.0.1", "239.1.1.1", "240.0.0.1"] {
            assert!(source4(v4(s)) && !destination4(v4(s)), "{s}");
        }
        for s in [
            "198.18.0.1",
            "192.0.2.1",
            "10.0.0.1",
            "1.1.1.1",
            "223.255.255.255",
        ] {
            assert!(!source4(v4(s)) && !destination4(v4(s)), "{s}");
        }
    }

    #[test]
    fn rfc4291_ipv6_martians() {
        for s in ["::", "::1", "fe80::1", "febf::1"] {
            assert!(source6(v6(s)) && destination6(v6(s)), "{s}");
        }
        assert!(source6(v6("ff02::1")) && !destination6(v6("ff02::1")));
        for s in ["2001:db8::1", "64:ff9b::c000:201", "fec0::1", "fc00::1"] {
            assert!(!source6(v6(s)) && !destination6(v6(s)), "{s}");
        }
    }
}
