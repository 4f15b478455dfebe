//! Static BIB entries in the configuration file (docs/CONFIG.md): port forwarding in
//! `[nat44] static` (an entry with a `proto`: a static NAPT entry, Cisco's `ip nat inside
//! source static tcp`) and `[nat64] static_bib` (RFC 6146 1.2.2, Jool's `bib add`).
//!
//! ```toml
//! [nat44]
//! static = [{ proto = "tcp", inside = "198.18.0.10:8080", outside = "198.19.0.100:80" },
//!           { proto = "udp", inside = "198.18.0.10:5000-5009", outside = "198.19.0.100:5000-5009" }]
//! [nat64]
//! static_bib = [{ proto = "udp", ipv6 = "[2001:db8::5]:2000", ipv4 = "198.19.0.101:2000" }]
//! ```
//!
//! ICMP entries forward echo identifiers (`proto = "icmp"`). The engine checks the rest
//! (outside addresses in the pool, no endpoint twice: `xlat_engine::PortForward`).

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Deserialize;
use xlat_engine::flow::{Endpoint, Proto};
use xlat_engine::PortForward;

use super::{ConfigFileError, Ctx};

/// One `[nat64] static_bib` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBib {
    proto: String,
    ipv6: String,
    ipv4: String,
}

/// `ADDRESS:PORT` or `ADDRESS:LOW-HIGH` (IPv6 in brackets): the address text, the first port
/// and how many.
fn split_ports(s: &str) -> Option<(&str, u16, u16)> {
    let (addr, ports) = s.trim().rsplit_once(':')?;
    let addr = addr
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(addr);
    let (lo, hi) = match ports.split_once('-') {
        Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
        None => {
            let p = ports.trim().parse().ok()?;
            (p, p)
        }
    };
    if hi < lo {
        return None;
    }
    // 0-65535 is one port too many for a count of 16 bits.
    let count = u16::try_from(u32::from(hi) - u32::from(lo) + 1).ok()?;
    Some((addr, lo, count))
}

impl Ctx<'_> {
    /// A static BIB entry's protocol.
    fn forward_proto(&self, key: &str, s: &str) -> Result<Proto, ConfigFileError> {
        self.choice(
            key,
            Some(s.trim()),
            Proto::Tcp,
            &[
                ("tcp", Proto::Tcp),
                ("udp", Proto::Udp),
                ("icmp", Proto::Icmp),
            ],
        )
    }

    /// One side of an entry: the address (parsed by `parse`) and its port range.
    fn forward_side<A>(
        &self,
        key: String,
        s: &str,
        parse: impl Fn(&str) -> Option<A>,
        example: &str,
    ) -> Result<(Endpoint<A>, u16), ConfigFileError> {
        let bad = || {
            self.invalid(
                key.clone(),
                format!(
                    "{s:?} is not ADDRESS:PORT or ADDRESS:LOW-HIGH; expected one like {example:?}"
                ),
            )
        };
        let (addr, port, count) = split_ports(s).ok_or_else(bad)?;
        let addr = parse(addr).ok_or_else(bad)?;
        Ok((Endpoint { addr, port }, count))
    }

    /// A `[nat44] static` entry with a protocol: a static NAPT entry.
    pub(super) fn forward4(
        &self,
        i: usize,
        proto: &str,
        inside: &str,
        outside: &str,
    ) -> Result<PortForward<u32>, ConfigFileError> {
        let v4 = |a: &str| a.parse::<Ipv4Addr>().ok().map(u32::from);
        let proto = self.forward_proto(&format!("nat44.static[{i}].proto"), proto)?;
        let (inside, n_in) = self.forward_side(
            format!("nat44.static[{i}].inside"),
            inside,
            v4,
            "198.18.0.10:8080",
        )?;
        let (outside, n_out) = self.forward_side(
            format!("nat44.static[{i}].outside"),
            outside,
            v4,
            "198.19.0.100:80",
        )?;
        self.same_count(format!("nat44.static[{i}]"), n_in, n_out)?;
        Ok(PortForward {
            proto,
            inside,
            outside,
            count: n_in,
        })
    }

    /// A `[nat64] static_bib` entry.
    pub(super) fn forward6(
        &self,
        i: usize,
        b: &RawBib,
    ) -> Result<PortForward<u128>, ConfigFileError> {
        let v6 = |a: &str| a.parse::<Ipv6Addr>().ok().map(u128::from);
        let v4 = |a: &str| a.parse::<Ipv4Addr>().ok().map(u32::from);
        let proto = self.forward_proto(&format!("nat64.static_bib[{i}].proto"), &b.proto)?;
        let (inside, n_in) = self.forward_side(
            format!("nat64.static_bib[{i}].ipv6"),
            &b.ipv6,
            v6,
            "[2001:db8::5]:2000",
        )?;
        let (outside, n_out) = self.forward_side(
            format!("nat64.static_bib[{i}].ipv4"),
            &b.ipv4,
            v4,
            "198.19.0.101:2000",
        )?;
        self.same_count(format!("nat64.static_bib[{i}]"), n_in, n_out)?;
        Ok(PortForward {
            proto,
            inside,
            outside,
            count: n_in,
        })
    }

    fn same_count(&self, key: String, inside: u16, outside: u16) -> Result<(), ConfigFileError> {
        if inside == outside {
            return Ok(());
        }
        Err(self.invalid(
            key,
            format!("the inside range has {inside} ports and the outside one {outside}; a range forwards port for port, so both need the same length"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::split_ports;

    #[test]
    fn ports_and_ranges() {
        assert_eq!(
            split_ports("198.18.0.10:8080"),
            Some(("198.18.0.10", 8080, 1))
        );
        assert_eq!(split_ports("1.2.3.4:10-19"), Some(("1.2.3.4", 10, 10)));
        assert_eq!(
            split_ports("[2001:db8::5]:2000"),
            Some(("2001:db8::5", 2000, 1))
        );
        assert_eq!(split_ports("1.2.3.4:19-10"), None);
        assert_eq!(split_ports("1.2.3.4"), None);
        assert_eq!(split_ports("1.2.3.4:70000"), None);
        assert_eq!(split_ports("1.2.3.4:0-65535"), None);
        assert_eq!(split_ports("1.2.3.4:1-65535"), Some(("1.2.3.4", 1, 65535)));
    }
}
