//! The testbed's addressing plan: every address and prefix the tester, the DUT and the
//! devices' configurations use, typed, in one place (DESIGN.md's test ranges: 198.18.0.0/15,
//! 2001:2::/48 from RFC 5180, pref64 2001:2:0:64::/96 because the well-known prefix may not
//! carry these non-global IPv4 addresses, RFC 6052 3.1).
//!
//! ```text
//!   tester                          DUT
//!   A  198.18.0.2/16  ----------  UA 198.18.0.1/16    inside: flows come from 198.18.1.0+
//!   D  198.19.0.2/24  ----------  UD 198.19.0.1/24    outside: NAT pool 198.19.4.0/24 (routed)
//! ```
//!
//! [`crate::topo`] builds the namespaces with them, [`crate::device`] writes them into the
//! devices' configurations and [`crate::sockets`] sends to them; none of those import each
//! other for an address.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// An IPv4 prefix: address and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix4 {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Prefix4 {
    /// The last address of the prefix.
    pub const fn last(&self) -> Ipv4Addr {
        let host = if self.len >= 32 {
            0
        } else {
            u32::MAX >> self.len
        };
        Ipv4Addr::from_bits(self.addr.to_bits() | host)
    }

    /// "first-last", as nftables writes a range.
    pub fn range(&self) -> String {
        format!("{}-{}", self.addr, self.last())
    }
}

impl fmt::Display for Prefix4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An IPv6 prefix: address and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix6 {
    pub addr: Ipv6Addr,
    pub len: u8,
}

impl fmt::Display for Prefix6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The tester's inside port (sends into the DUT).
pub const A_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The DUT's inside port: the tester's gateway, and the tunnel devices' endpoint.
pub const UA_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The DUT's outside port.
pub const UD_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// The tester's outside port (receives from the DUT): every flow's destination.
pub const D_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
/// The inside network (A, UA, and the flows' sources from 198.18.1.0 up).
pub const INSIDE4: Prefix4 = Prefix4 {
    addr: Ipv4Addr::new(198, 18, 0, 0),
    len: 16,
};
/// The outside network's prefix length (D, UD).
pub const OUTSIDE4_LEN: u8 = 24;
/// NAT pool on the outside: 198.19.4.0/24, routed to the DUT's outside port (not on the
/// link). 256 addresses: paired pooling (RFC 4787 REQ-2) gives each inside host one address
/// and 64,512 ports on it, so the pool holds 256 x 64,512 = 16.5M endpoint-independent
/// mappings -- the 10,000,000-connection tables of RFC 9693's benchmarks need 156 inside hosts
/// (a /25 held 8.26M).
pub const POOL: Prefix4 = Prefix4 {
    addr: Ipv4Addr::new(198, 19, 4, 0),
    len: 24,
};
/// TAYGA's dynamic pool.
pub const TAYGA_POOL: Prefix4 = Prefix4 {
    addr: Ipv4Addr::new(198, 19, 1, 0),
    len: 24,
};
/// xlat-siit's EAM: the tester's IPv6 hosts 2001:2:0:1::1:N are 198.19.2.N (RFC 7757).
pub const SIIT_EAM4: Prefix4 = Prefix4 {
    addr: Ipv4Addr::new(198, 19, 2, 0),
    len: 24,
};
/// The IPv6 side of xlat-siit's EAM.
pub const SIIT_EAM6: Prefix6 = Prefix6 {
    addr: Ipv6Addr::new(0x2001, 2, 0, 1, 0, 0, 1, 0),
    len: 120,
};
/// The IPv6 client of the stack experiments through xlat-siit (inside its EAM).
pub const SIIT_CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 1, 0, 0, 1, 1);

/// The tester's inside port, IPv6.
pub const A6_ADDR: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 1, 0, 0, 0, 2);
/// The DUT's inside port, IPv6.
pub const UA6_ADDR: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 1, 0, 0, 0, 1);
/// The DUT's outside port, IPv6.
pub const UD6_ADDR: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 2, 0, 0, 0, 1);
/// The tester's outside port, IPv6.
pub const D6_ADDR: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 2, 0, 0, 0, 2);
/// The length of the inside and outside IPv6 prefixes.
pub const NET6_LEN: u8 = 64;
/// The NAT64 / SIIT prefix (RFC 6052 2.2: IPv4 in the last 32 bits).
pub const PREF64: Prefix6 = Prefix6 {
    addr: Ipv6Addr::new(0x2001, 2, 0, 0x64, 0, 0, 0, 0),
    len: 96,
};

/// The tunnel devices' endpoint on the DUT (6to4 relay, ISATAP router): its inside address.
pub const TUNNEL_ENDPOINT: Ipv4Addr = UA_ADDR;
/// The ISATAP router's prefix (RFC 5214).
pub const ISATAP_PREFIX: Prefix6 = Prefix6 {
    addr: Ipv6Addr::new(0x2001, 2, 0, 5, 0, 0, 0, 0),
    len: 64,
};

/// The scale-out testbed's plan (its own namespaces: a tester, inside and outside routers,
/// N nodes; docs/SCALE-OUT.md).
pub mod scale_out {
    use super::Prefix4;
    use std::net::Ipv4Addr;

    /// The server every stream goes to, on the outside router's loopback.
    pub const SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
    /// The subscribers' prefix, every node's `inside`.
    pub const INSIDE: Prefix4 = Prefix4 {
        addr: Ipv4Addr::new(198, 18, 1, 0),
        len: 24,
    };

    /// Node i's pool prefix: 198.19.(16 + i).0/28.
    pub fn pool_of(i: usize) -> (Ipv4Addr, u8) {
        (Ipv4Addr::new(198, 19, 16 + i as u8, 0), 28)
    }

    /// Subscriber s's address (s from 0): 198.18.1.(1 + s).
    pub fn subscriber(s: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 1, 1 + s as u8)
    }
}

/// The failover testbed's plan (its own namespaces: a client, two gateways, a server;
/// docs/FAILOVER.md).
pub mod failover {
    use std::net::Ipv4Addr;

    /// The client, inside.
    pub const CLI: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 7);
    /// The gateways' virtual address inside (VRRP).
    pub const VIP_IN: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    /// The gateways' virtual address outside (VRRP).
    pub const VIP_OUT: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
    /// The server, outside.
    pub const SRV: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 10);
    /// The NAT pool address both gateways use.
    pub const POOL: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 100);
}

/// `v4` in [`PREF64`] (RFC 6052 2.2).
pub fn pref64(v4: Ipv4Addr) -> Ipv6Addr {
    let mut b = PREF64.addr.octets();
    b[12..].copy_from_slice(&v4.octets());
    Ipv6Addr::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_reads_as_the_docs_write_it() {
        assert_eq!(POOL.to_string(), "198.19.4.0/24");
        assert_eq!(POOL.range(), "198.19.4.0-198.19.4.255");
        assert_eq!(INSIDE4.to_string(), "198.18.0.0/16");
        assert_eq!(PREF64.to_string(), "2001:2:0:64::/96");
        assert_eq!(SIIT_EAM6.to_string(), "2001:2:0:1::1:0/120");
        assert_eq!(ISATAP_PREFIX.to_string(), "2001:2:0:5::/64");
        assert_eq!(pref64(D_ADDR).to_string(), "2001:2:0:64::c613:2");
        assert_eq!(SIIT_CLIENT6.to_string(), "2001:2:0:1::1:1");
        // The ports sit in their networks, the pool outside the ports' networks and the
        // other testbeds' (scale-out's 198.19.16.0/20 and up) and big enough for the largest table.
        assert_eq!(INSIDE4.last(), Ipv4Addr::new(198, 18, 255, 255));
        assert!(
            POOL.addr.to_bits() >> (32 - OUTSIDE4_LEN) != D_ADDR.to_bits() >> (32 - OUTSIDE4_LEN)
        );
        assert!(POOL.last() < TAYGA_POOL.addr || POOL.addr > TAYGA_POOL.last());
        assert!(POOL.last() < scale_out::pool_of(0).0);
        // Every address's 64,512 ports hold the largest table the lab builds.
        const { assert!((1u64 << (32 - POOL.len)) * 64_512 >= crate::experiments::MAX_TABLE) };
        // The other testbeds' plans, as their configurations write them.
        assert_eq!(scale_out::INSIDE.to_string(), "198.18.1.0/24");
        assert_eq!(scale_out::pool_of(2), (Ipv4Addr::new(198, 19, 18, 0), 28));
        assert_eq!(scale_out::subscriber(249), Ipv4Addr::new(198, 18, 1, 250));
        assert_eq!(failover::POOL.to_string(), "198.19.0.100");
    }
}
