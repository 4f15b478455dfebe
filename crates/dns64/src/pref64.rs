//! The pref64 synthesized addresses live in (RFC 6052 2.2 embedding, RFC 6147 5.2) and the
//! prefixes of the AAAA exclusion set (RFC 6147 5.1.4).
//!
//! The RFC 6052 address format itself is the engine's (`xlat_engine::rfc6052`): one copy in
//! the tree. This module adds the `Ipv4Addr`/`Ipv6Addr` forms the DNS records carry.

use std::net::{Ipv4Addr, Ipv6Addr};

pub use xlat_engine::rfc6052::{Pref64, WELL_KNOWN as WELL_KNOWN_PREFIX};
pub use xlat_engine::Prefix6;

/// RFC 6147 5.1.4: `::ffff:0:0/96`, the IPv4-mapped addresses, always in the exclusion set.
pub const IPV4_MAPPED: Prefix6 = Prefix6 {
    addr: 0xffff_0000_0000,
    len: 96,
};

/// RFC 6052 2.2: the IPv4-embedded IPv6 address of `v4` in `p` (suffix zero).
pub(crate) fn embed(p: &Pref64, v4: Ipv4Addr) -> Option<Ipv6Addr> {
    p.embed(u32::from(v4)).map(Ipv6Addr::from)
}

/// RFC 6052 2.3: the IPv4 address embedded in `a`, when `a` is inside `p`.
pub(crate) fn extract(p: &Pref64, a: Ipv6Addr) -> Option<Ipv4Addr> {
    p.extract(u128::from(a)).map(Ipv4Addr::from)
}

/// Whether the exclusion prefix `p` covers `a`.
pub(crate) fn covers(p: &Prefix6, a: Ipv6Addr) -> bool {
    p.contains(u128::from(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6052_2_4_example_through_the_engine() {
        // RFC 6052 2.4: 192.0.2.33 in 2001:db8:122:344::/64 is 2001:db8:122:344:c0:2:2100::.
        let p: Pref64 = "2001:db8:122:344::/64".parse().unwrap();
        let v4 = Ipv4Addr::new(192, 0, 2, 33);
        let a = embed(&p, v4).unwrap();
        assert_eq!(
            a,
            "2001:db8:122:344:c0:2:2100:0".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(extract(&p, a), Some(v4));
        assert!(covers(&IPV4_MAPPED, "::ffff:1.2.3.4".parse().unwrap()));
        // RFC 6052 3.1: the Well-Known Prefix refuses non-global space unless allowed.
        let private = u32::from(Ipv4Addr::new(198, 18, 0, 1));
        assert!(WELL_KNOWN_PREFIX.refuses(private));
        assert!(!WELL_KNOWN_PREFIX.allowing_non_global(true).refuses(private));
    }
}
