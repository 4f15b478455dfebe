//! The Explicit Address Mapping Table (RFC 7757): IPv4 prefixes mapped to IPv6 prefixes (3.1),
//! looked up by longest prefix match in either direction (3.2), the suffix carried over bit for
//! bit from the first bit after the prefix. The two suffixes may differ in length (3.2): an
//! IPv6 suffix longer than the IPv4 one gets the IPv4 suffix in its first bits and zeros after
//! them (IPv4 -> IPv6), and its excess bits are ignored the other way, so every address of the
//! IPv6 prefix has an IPv4 form; an IPv4 suffix longer than the IPv6 one is refused at
//! configuration ([`crate::SiitConfig::validate`]).

use crate::config::Eam;

/// The EAM table, sorted for longest-prefix match.
#[derive(Clone, Debug, Default)]
pub(crate) struct Eamt {
    /// Sorted by IPv4 prefix length, longest first.
    by4: Vec<Eam>,
    /// Sorted by IPv6 prefix length, longest first.
    by6: Vec<Eam>,
}

impl Eamt {
    pub fn new(entries: &[Eam]) -> Eamt {
        let mut by4 = entries.to_vec();
        by4.sort_by_key(|e| std::cmp::Reverse(e.ipv4.len));
        let mut by6 = entries.to_vec();
        by6.sort_by_key(|e| std::cmp::Reverse(e.ipv6.len));
        Eamt { by4, by6 }
    }

    /// True when an entry's IPv4 prefix holds `a`.
    pub fn has4(&self, a: u32) -> bool {
        self.by4.iter().any(|e| e.ipv4.contains(a))
    }

    /// True when an entry's IPv6 prefix holds `a`.
    pub fn has6(&self, a: u128) -> bool {
        self.by6.iter().any(|e| e.ipv6.contains(a))
    }

    /// RFC 7757 3.2: the IPv6 address of `a` by the longest matching IPv4 prefix.
    pub fn to6(&self, a: u32) -> Option<u128> {
        let e = self.by4.iter().find(|e| e.ipv4.contains(a))?;
        Some(e.ipv6.addr | suffix4to6(e, a))
    }

    /// RFC 7757 3.2: the IPv4 address of `a` by the longest matching IPv6 prefix.
    pub fn to4(&self, a: u128) -> Option<u32> {
        let e = self.by6.iter().find(|e| e.ipv6.contains(a))?;
        Some(e.ipv4.addr | suffix6to4(e, a))
    }
}

/// Suffix lengths of an entry: (IPv4, IPv6), IPv4 <= IPv6 (checked at configuration).
fn suffix_lens(e: &Eam) -> (u32, u32) {
    (
        32u32.saturating_sub(u32::from(e.ipv4.len)),
        128u32.saturating_sub(u32::from(e.ipv6.len)),
    )
}

/// The suffix of `a` moved to the first bits after the entry's IPv6 prefix (RFC 7757 3.2); the
/// IPv6 suffix bits beyond the IPv4 suffix's length stay zero.
fn suffix4to6(e: &Eam, a: u32) -> u128 {
    let (s4, s6) = suffix_lens(e);
    let suffix = u128::from(a & !e.ipv4.mask());
    suffix.checked_shl(s6.saturating_sub(s4)).unwrap_or(0)
}

/// The first IPv4-suffix-length bits after the entry's IPv6 prefix (RFC 7757 3.2); any further
/// IPv6 suffix bits are ignored.
#[expect(
    clippy::cast_possible_truncation,
    reason = "the IPv4 suffix is at most 32 bits (RFC 7757 3.2)"
)]
fn suffix6to4(e: &Eam, a: u128) -> u32 {
    let (s4, s6) = suffix_lens(e);
    let suffix = a & !e.ipv6.mask();
    suffix.checked_shr(s6.saturating_sub(s4)).unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eam(v4: &str, v6: &str) -> Eam {
        Eam {
            ipv4: v4.parse().unwrap(),
            ipv6: v6.parse().unwrap(),
        }
    }

    fn a6(s: &str) -> u128 {
        u128::from(s.parse::<std::net::Ipv6Addr>().unwrap())
    }

    fn a4(s: &str) -> u32 {
        u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
    }

    #[test]
    fn suffix_is_carried_both_ways() {
        let t = Eamt::new(&[eam("198.19.0.0/28", "2001:2:0:6::/124")]);
        assert_eq!(t.to6(a4("198.19.0.5")), Some(a6("2001:2:0:6::5")));
        assert_eq!(t.to4(a6("2001:2:0:6::f")), Some(a4("198.19.0.15")));
        assert_eq!(t.to6(a4("198.19.0.16")), None);
        assert_eq!(t.to4(a6("2001:2:0:6::10")), None);
        assert!(t.has4(a4("198.19.0.1")) && !t.has6(a6("2001:2:0:7::1")));
    }

    #[test]
    fn longest_prefix_wins() {
        // RFC 7757 3.2: a /32 inside a /24 takes precedence, both ways.
        let t = Eamt::new(&[
            eam("192.0.2.0/24", "2001:db8:aaaa::/120"),
            eam("192.0.2.1/32", "2001:db8:bbbb::1/128"),
        ]);
        assert_eq!(t.to6(a4("192.0.2.1")), Some(a6("2001:db8:bbbb::1")));
        assert_eq!(t.to6(a4("192.0.2.2")), Some(a6("2001:db8:aaaa::2")));
        assert_eq!(t.to4(a6("2001:db8:bbbb::1")), Some(a4("192.0.2.1")));
        assert_eq!(t.to4(a6("2001:db8:aaaa::1")), Some(a4("192.0.2.1")));
    }

    #[test]
    fn rfc7757_3_2_suffixes_of_different_lengths() {
        // A /24 onto a /64: the 8 IPv4 suffix bits are the first 8 bits after the IPv6
        // prefix, the other 56 are zero; back, only those 8 bits count.
        let t = Eamt::new(&[eam("192.0.2.0/24", "2001:db8:dddd::/64")]);
        assert_eq!(t.to6(a4("192.0.2.5")), Some(a6("2001:db8:dddd:0:500::")));
        assert_eq!(t.to6(a4("192.0.2.255")), Some(a6("2001:db8:dddd:0:ff00::")));
        assert_eq!(t.to4(a6("2001:db8:dddd:0:500::")), Some(a4("192.0.2.5")));
        assert_eq!(
            t.to4(a6("2001:db8:dddd:0:5ff:ffff:ffff:ffff")),
            Some(a4("192.0.2.5")),
            "excess IPv6 suffix bits ignored"
        );
        assert_eq!(t.to4(a6("2001:db8:dddd::5")), Some(a4("192.0.2.0")));
        // Extremes: a /0 IPv6 prefix (suffix 128) and an IPv4 /32 onto a /96.
        let t = Eamt::new(&[eam("198.51.100.7/32", "2001:db8::/96")]);
        assert_eq!(t.to6(a4("198.51.100.7")), Some(a6("2001:db8::")));
        assert_eq!(t.to4(a6("2001:db8::1:2")), Some(a4("198.51.100.7")));
        let t = Eamt::new(&[eam("0.0.0.0/0", "::/0")]);
        assert_eq!(t.to6(a4("192.0.2.1")), Some(a6("c000:201::")));
        assert_eq!(t.to4(a6("c000:201::1")), Some(a4("192.0.2.1")));
    }
}
