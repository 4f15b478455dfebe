//! IPv4-embedded IPv6 addresses (RFC 6052): the pref64 that NAT64 and SIIT use to give every
//! IPv4 address an IPv6 form.
//!
//! - 2.2: the IPv4 address sits right after the prefix; prefix lengths 32, 40, 48, 56, 64 and
//!   96 only; bits 64 to 71 (the "u" octet) are zero and the IPv4 address skips over them;
//!   the suffix after the IPv4 address is zero.
//! - 2.4: the examples of the RFC are unit tests below.
//! - 3.1: the Well-Known Prefix 64:ff9b::/96 must not carry non-global IPv4 addresses
//!   (private, shared, loopback, link-local, documentation, benchmarking, multicast, ...):
//!   [`Pref64::embed`] and [`Pref64::extract`] refuse them with that prefix. Networks that
//!   translate such addresses (the test beds of this project do) use a network-specific
//!   prefix such as 2001:2:0:64::/96, or, knowingly, [`Pref64::allowing_non_global`]
//!   (`allow_non_global_wkp = true`, TAYGA's `wkpf-strict no`) for networks that use the
//!   Well-Known Prefix with private IPv4 space on purpose.

use std::net::Ipv6Addr;

/// An RFC 6052 prefix: a valid length, host bits and the u octet (bits 64-71) clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pref64 {
    addr: u128,
    len: u8,
    /// The Well-Known Prefix may carry non-global IPv4 addresses (RFC 6052 3.1 relaxed).
    non_global: bool,
}

/// Why a prefix cannot be an RFC 6052 pref64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pref64Error {
    /// RFC 6052 2.2 allows 32, 40, 48, 56, 64 and 96 only.
    Length(u8),
    /// Bits after the prefix length are set.
    HostBits,
    /// Bits 64-71 are set (RFC 6052 2.2: they MUST be zero; matters for /96).
    UBits,
}

impl std::fmt::Display for Pref64Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pref64Error::Length(l) => write!(
                f,
                "prefix length /{l} is not one of RFC 6052's /32, /40, /48, /56, /64, /96"
            ),
            Pref64Error::HostBits => write!(f, "bits after the prefix length are set"),
            Pref64Error::UBits => write!(
                f,
                "bits 64-71 (the fifth 16-bit group's upper byte) must be zero (RFC 6052 2.2)"
            ),
        }
    }
}

/// The Well-Known Prefix 64:ff9b::/96 (RFC 6052 2.1).
pub const WELL_KNOWN: Pref64 = Pref64 {
    addr: 0x0064_ff9b_0000_0000_0000_0000_0000_0000,
    len: 96,
    non_global: false,
};

/// Byte positions (0 = most significant) that hold the IPv4 address, per prefix length
/// (RFC 6052 2.2, Figure 1): byte 8 (bits 64-71) is always skipped.
fn positions(len: u8) -> Option<[usize; 4]> {
    Some(match len {
        32 => [4, 5, 6, 7],
        40 => [5, 6, 7, 9],
        48 => [6, 7, 9, 10],
        56 => [7, 9, 10, 11],
        64 => [9, 10, 11, 12],
        96 => [12, 13, 14, 15],
        _ => return None,
    })
}

fn mask(len: u8) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(u32::from(len)))
        .unwrap_or(0)
}

const U_OCTET: u128 = 0xff << 56;

impl Pref64 {
    /// Checks `addr/len` against RFC 6052 2.2.
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Pref64, Pref64Error> {
        if positions(len).is_none() {
            return Err(Pref64Error::Length(len));
        }
        let a = u128::from(addr);
        if a & !mask(len) != 0 {
            return Err(Pref64Error::HostBits);
        }
        if a & U_OCTET != 0 {
            return Err(Pref64Error::UBits);
        }
        Ok(Pref64 {
            addr: a,
            len,
            non_global: false,
        })
    }

    /// This prefix, allowed to carry non-global IPv4 addresses even when it is the
    /// Well-Known Prefix (against RFC 6052 3.1; for networks that do so on purpose).
    #[must_use]
    pub fn allowing_non_global(self, allow: bool) -> Pref64 {
        Pref64 {
            non_global: allow,
            ..self
        }
    }

    /// True when [`Pref64::allowing_non_global`] relaxed RFC 6052 3.1.
    pub fn allows_non_global(&self) -> bool {
        self.non_global
    }

    /// True when RFC 6052 3.1 keeps `v4` out of this prefix: the Well-Known Prefix, a
    /// non-global address, and no [`Pref64::allowing_non_global`].
    #[inline]
    pub fn refuses(&self, v4: u32) -> bool {
        self.is_well_known() && !self.non_global && !is_global_ipv4(v4)
    }

    /// The prefix bits.
    pub fn addr(&self) -> u128 {
        self.addr
    }

    /// The prefix length.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u8 {
        self.len
    }

    /// True for 64:ff9b::/96, which carries global IPv4 addresses only (RFC 6052 3.1).
    pub fn is_well_known(&self) -> bool {
        self.addr == WELL_KNOWN.addr && self.len == WELL_KNOWN.len
    }

    /// True when `a` starts with this prefix.
    pub fn contains(&self, a: u128) -> bool {
        a & mask(self.len) == self.addr
    }

    /// The IPv4-embedded IPv6 address of `v4` (RFC 6052 2.2); `None` when this is the
    /// Well-Known Prefix and `v4` is not global (RFC 6052 3.1).
    #[inline]
    pub fn embed(&self, v4: u32) -> Option<u128> {
        if self.refuses(v4) {
            return None;
        }
        if self.len == 96 {
            // The common case: the IPv4 address is the last 32 bits.
            return Some(self.addr | u128::from(v4));
        }
        let mut b = self.addr.to_be_bytes();
        for (pos, byte) in positions(self.len)?.iter().zip(v4.to_be_bytes()) {
            *b.get_mut(*pos)? = byte;
        }
        Some(u128::from_be_bytes(b))
    }

    /// The IPv4 address embedded in `a` (RFC 6052 2.3); `None` when `a` is not in this
    /// prefix, or when this is the Well-Known Prefix and the address is not global (3.1).
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the embedded IPv4 address is 32 bits of the IPv6 one (RFC 6052 2.2)"
    )]
    pub fn extract(&self, a: u128) -> Option<u32> {
        if !self.contains(a) {
            return None;
        }
        let v4 = if self.len == 96 {
            a as u32
        } else {
            let b = a.to_be_bytes();
            let mut v4 = [0u8; 4];
            for (out, pos) in v4.iter_mut().zip(positions(self.len)?) {
                *out = *b.get(pos)?;
            }
            u32::from_be_bytes(v4)
        };
        if self.refuses(v4) {
            return None;
        }
        Some(v4)
    }
}

impl std::fmt::Display for Pref64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv6Addr::from(self.addr), self.len)
    }
}

impl std::str::FromStr for Pref64 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = s.split_once('/').ok_or_else(|| {
            format!("{s:?} has no prefix length; expected e.g. \"2001:2:0:64::/96\"")
        })?;
        let addr: Ipv6Addr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv6 address"))?;
        let len: u8 = l
            .parse()
            .map_err(|_| format!("bad prefix length in {s:?}"))?;
        Pref64::new(addr, len).map_err(|e| match e {
            Pref64Error::HostBits => {
                let fixed = u128::from(addr) & mask(len);
                format!(
                    "{s} has bits set after /{len}; did you mean {}/{len}?",
                    Ipv6Addr::from(fixed)
                )
            }
            e => format!("{s}: {e}"),
        })
    }
}

/// False for the IPv4 ranges RFC 6052 3.1 calls non-global: those of RFC 5735 section 3
/// (this network, private, loopback, link-local, TEST-NETs, benchmarking, 6to4 relay,
/// multicast, reserved, broadcast) and the shared address space of RFC 6598 -- the
/// special-purpose ranges whose "Globally Reachable" is false in the IANA registry (RFC 6890),
/// except the two global anycast addresses 192.0.0.9 and 192.0.0.10.
pub fn is_global_ipv4(a: u32) -> bool {
    const NON_GLOBAL: &[(u32, u8)] = &[
        (0x0000_0000, 8),  // 0.0.0.0/8 "this network"
        (0x0a00_0000, 8),  // 10.0.0.0/8 private (RFC 1918)
        (0x6440_0000, 10), // 100.64.0.0/10 shared (RFC 6598)
        (0x7f00_0000, 8),  // 127.0.0.0/8 loopback
        (0xa9fe_0000, 16), // 169.254.0.0/16 link-local
        (0xac10_0000, 12), // 172.16.0.0/12 private
        (0xc000_0000, 24), // 192.0.0.0/24 IETF protocol assignments
        (0xc000_0200, 24), // 192.0.2.0/24 TEST-NET-1
        (0xc058_6300, 24), // 192.88.99.0/24 6to4 relay anycast
        (0xc0a8_0000, 16), // 192.168.0.0/16 private
        (0xc612_0000, 15), // 198.18.0.0/15 benchmarking (RFC 2544)
        (0xc633_6400, 24), // 198.51.100.0/24 TEST-NET-2
        (0xcb00_7100, 24), // 203.0.113.0/24 TEST-NET-3
        (0xe000_0000, 4),  // 224.0.0.0/4 multicast
        (0xf000_0000, 4),  // 240.0.0.0/4 reserved, and 255.255.255.255
    ];
    if a == 0xc000_0009 || a == 0xc000_000a {
        return true;
    }
    !NON_GLOBAL.iter().any(|&(net, len)| {
        let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        a & m == net
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(s: &str) -> u128 {
        u128::from(s.parse::<Ipv6Addr>().unwrap())
    }

    fn v4(s: &str) -> u32 {
        u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
    }

    /// RFC 6052 2.4, Table 1: 192.0.2.33 in each network-specific prefix length.
    #[test]
    fn rfc6052_2_4_examples() {
        let table = [
            ("2001:db8::/32", "2001:db8:c000:221::"),
            ("2001:db8:100::/40", "2001:db8:1c0:2:21::"),
            ("2001:db8:122::/48", "2001:db8:122:c000:2:2100::"),
            ("2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"),
            ("2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"),
            ("2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"),
        ];
        for (prefix, embedded) in table {
            let p: Pref64 = prefix.parse().unwrap();
            assert_eq!(p.embed(v4("192.0.2.33")), Some(v6(embedded)), "{prefix}");
            assert_eq!(p.extract(v6(embedded)), Some(v4("192.0.2.33")), "{prefix}");
            assert_eq!(p.to_string(), prefix);
        }
    }

    /// RFC 6052 2.4 also lists 64:ff9b::192.0.2.33, but 192.0.2.33 is a documentation address,
    /// which section 3.1 forbids with the Well-Known Prefix: this implementation refuses it.
    #[test]
    fn well_known_prefix_carries_global_addresses_only() {
        let wkp: Pref64 = "64:ff9b::/96".parse().unwrap();
        assert!(wkp.is_well_known());
        assert_eq!(
            wkp.embed(v4("8.8.8.8")),
            Some(v6("64:ff9b::8.8.8.8")),
            "a global address is embedded"
        );
        assert_eq!(wkp.extract(v6("64:ff9b::8.8.8.8")), Some(v4("8.8.8.8")));
        for a in [
            "192.0.2.33",
            "10.1.2.3",
            "198.18.0.1",
            "198.19.0.2",
            "100.64.0.1",
            "127.0.0.1",
            "169.254.1.1",
            "172.16.5.5",
            "192.168.1.1",
            "224.0.0.1",
            "255.255.255.255",
            "0.1.2.3",
        ] {
            assert_eq!(wkp.embed(v4(a)), None, "{a}");
            assert_eq!(wkp.extract(v6(&format!("64:ff9b::{a}"))), None, "{a}");
        }
        assert!(is_global_ipv4(v4("192.0.0.9")));
        // The project's network-specific prefix takes them all.
        let nsp: Pref64 = "2001:2:0:64::/96".parse().unwrap();
        assert_eq!(
            nsp.embed(v4("198.19.0.2")),
            Some(v6("2001:2:0:64::198.19.0.2"))
        );
        assert_eq!(
            nsp.extract(v6("2001:2:0:64::c613:2")),
            Some(v4("198.19.0.2"))
        );
    }

    #[test]
    fn u_octet_is_skipped_and_suffix_zero() {
        for len in [32u8, 40, 48, 56, 64, 96] {
            let p = Pref64::new(Ipv6Addr::from(0x2001_0db8_u128 << 96), len).unwrap();
            for a in [0u32, 0xffff_ffff, 0xc000_0221, 0x0102_0304] {
                let e = p.embed(a).unwrap();
                assert_eq!(e & U_OCTET, 0, "/{len}");
                assert!(p.contains(e));
                assert_eq!(p.extract(e), Some(a), "/{len} {a:#x}");
            }
        }
    }

    #[test]
    fn bad_prefixes_are_rejected_with_reasons() {
        let e = |s: &str| s.parse::<Pref64>().unwrap_err();
        assert!(e("2001:db8::/33").contains("not one of RFC 6052's"));
        assert!(e("2001:db8::/128").contains("not one of"));
        assert!(e("2001:db8::1/96").contains("did you mean 2001:db8::/96"));
        assert!(e("2001:db8:0:0:ff00::/96").contains("bits 64-71"));
        assert!(e("2001:db8::").contains("no prefix length"));
        assert!(e("banana/96").contains("not an IPv6 address"));
        assert!(e("2001:db8::/x").contains("bad prefix length"));
        assert_eq!(
            Pref64::new("2001:db8::".parse().unwrap(), 57),
            Err(Pref64Error::Length(57))
        );
    }

    #[test]
    fn outside_the_prefix_is_not_extracted() {
        let p: Pref64 = "2001:2:0:64::/96".parse().unwrap();
        assert_eq!(p.extract(v6("2001:2:0:65::1")), None);
        assert!(!p.contains(v6("2001:2:0:1::10")));
    }
}
