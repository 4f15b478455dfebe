//! The Explicit Address Mapping Table (RFC 7757): IPv4 prefixes mapped to IPv6 prefixes with
//! suffixes of equal length (3.1), looked up by longest prefix match in either direction
//! (3.2), the suffix carried over bit for bit.

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
        let suffix = u128::from(a & !e.ipv4.mask());
        Some(e.ipv6.addr | suffix)
    }

    /// RFC 7757 3.2: the IPv4 address of `a` by the longest matching IPv6 prefix.
    pub fn to4(&self, a: u128) -> Option<u32> {
        let e = self.by6.iter().find(|e| e.ipv6.contains(a))?;
        // Equal suffix lengths (3.1, checked at configuration): the suffix fits 32 bits.
        let suffix = (a & !e.ipv6.mask()) as u32;
        Some(e.ipv4.addr | suffix)
    }
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
}
