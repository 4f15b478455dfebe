//! IPv6 prefixes for DNS64: the pref64 that synthesized addresses live in (RFC 6052 2.2
//! embedding, RFC 6147 5.2) and plain prefixes for the AAAA exclusion set (RFC 6147 5.1.4).
//!
//! This is DNS64's own small copy of the RFC 6052 address format; the engine has its own.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// RFC 6052 2.2: the prefix lengths an IPv4-embedded IPv6 address may use.
pub const PREF64_LENGTHS: [u8; 6] = [32, 40, 48, 56, 64, 96];

/// An IPv6 prefix (`2001:db8::/32`); host bits are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix6 {
    addr: Ipv6Addr,
    len: u8,
}

impl Prefix6 {
    /// `addr/len`; fails when `len > 128` or bits past `len` are set (and says which prefix
    /// was probably meant).
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Prefix6, String> {
        if len > 128 {
            return Err(format!("prefix length {len} is more than 128"));
        }
        let masked = Ipv6Addr::from(u128::from(addr) & mask(len));
        if masked != addr {
            return Err(format!(
                "{addr}/{len} has bits set past the prefix length; did you mean {masked}/{len}?"
            ));
        }
        Ok(Prefix6 { addr, len })
    }

    pub fn addr(&self) -> Ipv6Addr {
        self.addr
    }

    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether `a` lies inside the prefix.
    pub fn contains(&self, a: Ipv6Addr) -> bool {
        u128::from(a) & mask(self.len) == u128::from(self.addr)
    }
}

fn mask(len: u8) -> u128 {
    match len {
        0 => 0,
        l if l >= 128 => u128::MAX,
        l => u128::MAX << (128 - u32::from(l)),
    }
}

impl FromStr for Prefix6 {
    type Err = String;

    fn from_str(s: &str) -> Result<Prefix6, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} has no prefix length; expected ADDRESS/LENGTH"))?;
        let addr: Ipv6Addr = a
            .trim()
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv6 address"))?;
        let len: u8 = l
            .trim()
            .parse()
            .map_err(|_| format!("{l:?} is not a prefix length"))?;
        Prefix6::new(addr, len)
    }
}

impl fmt::Display for Prefix6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// RFC 6147 5.1.4: `::ffff:0:0/96`, the IPv4-mapped addresses, always in the exclusion set.
pub const IPV4_MAPPED: Prefix6 = Prefix6 {
    addr: Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0),
    len: 96,
};

/// The prefix synthesized AAAA records are made in (RFC 6052 2.2): one of the lengths
/// 32, 40, 48, 56, 64 or 96, with bits 64-71 zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pref64(Prefix6);

/// The Well-Known Prefix of RFC 6052 2.1.
pub const WELL_KNOWN_PREFIX: Pref64 = Pref64(Prefix6 {
    addr: Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
    len: 96,
});

impl Pref64 {
    /// Checks the RFC 6052 2.2 rules on `p`.
    pub fn new(p: Prefix6) -> Result<Pref64, String> {
        if !PREF64_LENGTHS.contains(&p.len) {
            return Err(format!(
                "/{} is not an RFC 6052 prefix length; expected /32, /40, /48, /56, /64 or /96",
                p.len
            ));
        }
        // RFC 6052 2.2: bits 64 to 71 ("u") MUST be zero; only a /96 covers them.
        if p.addr.octets()[8] != 0 {
            return Err(format!(
                "{p}: bits 64-71 of the address must be zero (RFC 6052 2.2)"
            ));
        }
        Ok(Pref64(p))
    }

    pub fn prefix(&self) -> Prefix6 {
        self.0
    }

    /// Whether this is 64:ff9b::/96 (RFC 6052 2.1).
    pub fn is_well_known(&self) -> bool {
        *self == WELL_KNOWN_PREFIX
    }

    /// RFC 6052 2.2: the IPv4-embedded IPv6 address of `v4` (suffix zero).
    pub(crate) fn embed(&self, v4: Ipv4Addr) -> Ipv6Addr {
        let mut out = self.0.addr.octets();
        let mut pos = usize::from(self.0.len / 8);
        for b in v4.octets() {
            if pos == 8 {
                pos += 1; // RFC 6052 2.2: skip the "u" octet (bits 64-71)
            }
            if let Some(slot) = out.get_mut(pos) {
                *slot = b;
            }
            pos += 1;
        }
        Ipv6Addr::from(out)
    }

    /// RFC 6052 2.3: the IPv4 address embedded in `a`, when `a` is inside the prefix and its
    /// "u" octet is zero. The suffix is not checked.
    pub(crate) fn extract(&self, a: Ipv6Addr) -> Option<Ipv4Addr> {
        if !self.0.contains(a) {
            return None;
        }
        let o = a.octets();
        if self.0.len < 96 && o[8] != 0 {
            return None;
        }
        let mut v4 = [0u8; 4];
        let mut pos = usize::from(self.0.len / 8);
        for b in v4.iter_mut() {
            if pos == 8 {
                pos += 1;
            }
            *b = *o.get(pos)?;
            pos += 1;
        }
        Some(Ipv4Addr::from(v4))
    }
}

impl FromStr for Pref64 {
    type Err = String;

    fn from_str(s: &str) -> Result<Pref64, String> {
        Pref64::new(s.parse()?)
    }
}

impl fmt::Display for Pref64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// RFC 6052 3.1: the Well-Known Prefix MUST NOT be used with non-global IPv4 addresses
/// (RFC 1918 and the special ranges of RFC 5735 section 3, RFC 6598 shared space).
pub(crate) fn is_global_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    !(o[0] == 0
        || o[0] == 10
        || o[0] == 127
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        || (o[0] == 169 && o[1] == 254)
        || (o[0] == 172 && (o[1] & 0xf0) == 16)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 192 && o[1] == 0 && o[2] == 2)
        || (o[0] == 192 && o[1] == 88 && o[2] == 99)
        || (o[0] == 192 && o[1] == 168)
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
        || (o[0] == 198 && o[1] == 51 && o[2] == 100)
        || (o[0] == 203 && o[1] == 0 && o[2] == 113)
        || o[0] >= 224)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Pref64 {
        s.parse().unwrap()
    }

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// RFC 6052 2.4, the table of examples (IPv4 192.0.2.33).
    #[test]
    fn rfc6052_section_2_4_examples() {
        let v4 = Ipv4Addr::new(192, 0, 2, 33);
        let table = [
            ("2001:db8::/32", "2001:db8:c000:221::"),
            ("2001:db8:100::/40", "2001:db8:1c0:2:21::"),
            ("2001:db8:122::/48", "2001:db8:122:c000:2:2100::"),
            ("2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"),
            ("2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"),
            ("2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"),
            ("64:ff9b::/96", "64:ff9b::192.0.2.33"),
        ];
        for (prefix, want) in table {
            let pf = p(prefix);
            assert_eq!(pf.embed(v4), v6(want), "{prefix}");
            assert_eq!(pf.extract(v6(want)), Some(v4), "{prefix}");
        }
    }

    #[test]
    fn project_prefix() {
        let pf = p("2001:2:0:64::/96");
        let a = pf.embed(Ipv4Addr::new(198, 19, 0, 5));
        assert_eq!(a.to_string(), "2001:2:0:64::c613:5");
        assert!(!pf.is_well_known());
        assert!(WELL_KNOWN_PREFIX.is_well_known());
        assert_eq!(p("64:ff9b::/96"), WELL_KNOWN_PREFIX);
    }

    #[test]
    fn extract_rejects_outside_and_u_octet() {
        let pf = p("2001:db8:122:344::/64");
        assert_eq!(pf.extract(v6("2001:db8:122:345::1")), None);
        // RFC 6052 2.2: the u octet (bits 64-71) must be zero
        assert_eq!(pf.extract(v6("2001:db8:122:344:1c0:2:2100:0")), None);
    }

    #[test]
    fn bad_prefixes() {
        for (s, what) in [
            ("2001:db8::/33", "not an RFC 6052 prefix length"),
            ("2001:db8::1/96", "did you mean 2001:db8::/96"),
            ("2001:db8:0:0:100::/96", "bits 64-71"),
            ("2001:db8::", "no prefix length"),
            ("banana/96", "not an IPv6 address"),
            ("2001:db8::/129", "more than 128"),
        ] {
            match s.parse::<Pref64>() {
                Ok(v) => panic!("{s} parsed as {v}"),
                Err(e) => assert!(e.contains(what), "{s}: {e}"),
            }
        }
    }

    #[test]
    fn prefix6_contains() {
        let x: Prefix6 = "::ffff:0:0/96".parse().unwrap();
        assert!(x.contains(v6("::ffff:192.0.2.1")));
        assert!(!x.contains(v6("2001:db8::1")));
        let all: Prefix6 = "::/0".parse().unwrap();
        assert!(all.contains(Ipv6Addr::LOCALHOST));
    }

    #[test]
    fn non_global() {
        for a in [
            [10, 1, 2, 3],
            [192, 168, 1, 1],
            [198, 19, 0, 2],
            [192, 0, 2, 1],
            [100, 64, 0, 1],
        ] {
            assert!(!is_global_v4(Ipv4Addr::from(a)), "{a:?}");
        }
        for a in [[8, 8, 8, 8], [100, 128, 0, 1], [198, 20, 0, 1]] {
            assert!(is_global_v4(Ipv4Addr::from(a)), "{a:?}");
        }
    }
}
