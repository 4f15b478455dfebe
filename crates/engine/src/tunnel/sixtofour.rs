//! 6to4 (RFC 3056): a site with the IPv4 address V4ADDR owns 2002:V4ADDR::/48 (RFC 3056 2);
//! IPv6 packets to another 2002::/16 address are encapsulated to the IPv4 address embedded in
//! it, packets to native IPv6 go to a relay router (RFC 3056 5.3, 5.5). The anycast relay
//! address of RFC 3068 (192.88.99.1) was deprecated by RFC 7526: the relay here is configured
//! by its unicast address, or absent.
//!
//! Decapsulation applies the checks of RFC 3964 5.3.1: both IPv4 addresses and every
//! embedded IPv4 address must be usable unicast ([`valid_v4`]); a 6to4 source must embed the
//! outer source, a 6to4 destination the outer destination; inner addresses that must never be
//! tunneled (link-local, multicast, loopback, unspecified, IPv4-compatible or -mapped) are
//! refused. Native IPv6 sources are accepted only from the configured relay, and native
//! destinations only when this endpoint is itself a relay router.
//!
//! The XDP fast path (`[dataplane] fast_path = "xdp"`, issue 25) carries the common case of
//! both directions itself with these same checks, from the configuration [`xdp_config`]
//! derives; everything else still comes here.

use crate::counters::DropReason;

use super::{addr6, Inner6, SixToFourConfig, TunnelConfig, TunnelParams};

/// IPv4 ranges a 6to4 address may not embed and a 6to4 packet may not use (RFC 3964 5.3.1):
/// "this network", private use (RFC 1918), loopback, link-local, multicast, reserved and the
/// limited broadcast address. Global space and the special ranges RFC 3964 does not name --
/// the benchmarking range 198.18.0.0/15 (RFC 2544), the documentation ranges, 100.64.0.0/10
/// -- are accepted.
pub const REFUSED: &[(u32, u8, &str)] = &[
    (0x0000_0000, 8, "0.0.0.0/8 (this network)"),
    (0x0a00_0000, 8, "10.0.0.0/8 (private, RFC 1918)"),
    (0x7f00_0000, 8, "127.0.0.0/8 (loopback)"),
    (0xa9fe_0000, 16, "169.254.0.0/16 (link-local, RFC 3927)"),
    (0xac10_0000, 12, "172.16.0.0/12 (private, RFC 1918)"),
    (0xc0a8_0000, 16, "192.168.0.0/16 (private, RFC 1918)"),
    (0xe000_0000, 4, "224.0.0.0/4 (multicast)"),
    (
        0xf000_0000,
        4,
        "240.0.0.0/4 (reserved, with the broadcast 255.255.255.255)",
    ),
];

/// [`REFUSED`] in words, for config errors and docs.
pub const REFUSED_TEXT: &str = "0.0.0.0/8, 10.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 172.16.0.0/12, 192.168.0.0/16, 224.0.0.0/4 and 240.0.0.0/4 (with 255.255.255.255)";

/// True for an IPv4 address 6to4 may use (RFC 3964 5.3.1): not in [`REFUSED`].
pub fn valid_v4(a: u32) -> bool {
    !REFUSED.iter().any(|&(net, len, _)| {
        let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        a & m == net
    })
}

/// The 6to4 site prefix 2002:V4ADDR::/48 (RFC 3056 2), as an address with zero host bits.
pub fn prefix48(v4: u32) -> u128 {
    (0x2002u128 << 112) | (u128::from(v4) << 80)
}

/// The IPv4 address embedded in a 2002::/16 address (RFC 3056 2), if it is one.
#[expect(
    clippy::cast_possible_truncation,
    reason = "bits 16..48 of 2002::/16 are the IPv4 address (RFC 3056 2)"
)]
pub fn embedded(a: u128) -> Option<u32> {
    (a >> 112 == 0x2002).then_some((a >> 80) as u32)
}

/// The endpoint's own address 2002:V4ADDR::1, given to the TUN device (and the source of the
/// ICMPv6 errors the endpoint sends).
pub fn address(v4: u32) -> u128 {
    prefix48(v4) | 1
}

/// A 6to4 router (and possibly relay router).
pub(crate) struct SixToFour {
    pub v4: u32,
    pub relay: Option<u32>,
    pub relay_router: bool,
    pub params: TunnelParams,
}

/// Inner addresses never tunneled (RFC 3964 5.3.1 "disallow ... link-local, multicast,
/// IPv4-compatible, ... addresses"; RFC 4291 2.5.5).
fn never_tunneled(a: u128) -> bool {
    addr6::unspecified(a)
        || addr6::loopback(a)
        || addr6::multicast(a)
        || addr6::link_local(a)
        || addr6::v4_embedded(a)
}

impl SixToFour {
    pub fn new(c: &SixToFourConfig) -> SixToFour {
        SixToFour {
            v4: u32::from(c.ipv4),
            relay: c.relay.map(u32::from),
            relay_router: c.relay_router,
            params: c.params,
        }
    }

    fn ours(&self, a: u128) -> bool {
        embedded(a) == Some(self.v4)
    }

    /// The IPv4 destination of an outgoing packet (RFC 3056 5.3, "sending rule").
    pub fn next_hop(&self, src: u128, dst: u128) -> Result<u32, DropReason> {
        if never_tunneled(src) || never_tunneled(dst) {
            return Err(DropReason::TunnelBadInnerAddress);
        }
        // RFC 3964 5.3.1: a 6to4 router sends only from its own 2002:V4ADDR::/48 (a relay
        // router also forwards native sources toward 6to4 sites).
        match embedded(src) {
            Some(_) if !self.ours(src) => return Err(DropReason::TunnelSpoofedSource),
            None if !self.relay_router => return Err(DropReason::TunnelSpoofedSource),
            _ => {}
        }
        match embedded(dst) {
            Some(v4) if !valid_v4(v4) => Err(DropReason::Tunnel6to4AddressRefused),
            // Our own prefix came back to the tunnel: encapsulating to ourselves would loop.
            Some(v4) if v4 == self.v4 => Err(DropReason::TunnelLoop),
            Some(v4) => Ok(v4),
            None => self.relay.ok_or(DropReason::TunnelNoRelay),
        }
    }

    /// RFC 3964 5.3.1: may the decapsulated packet go on?
    pub fn check_decap(&self, src4: u32, dst4: u32, inner: &Inner6) -> Result<(), DropReason> {
        if !valid_v4(src4) || !valid_v4(dst4) {
            return Err(DropReason::Tunnel6to4AddressRefused);
        }
        if never_tunneled(inner.src) || never_tunneled(inner.dst) {
            return Err(DropReason::TunnelBadInnerAddress);
        }
        match embedded(inner.src) {
            Some(v4) if !valid_v4(v4) => return Err(DropReason::Tunnel6to4AddressRefused),
            // "if prefix of src_v6 == 2002::/16, the embedded IPv4 address must be src_v4"
            Some(v4) if v4 != src4 => return Err(DropReason::TunnelSpoofedSource),
            Some(_) => {}
            // Native sources come from relays only: ours (RFC 3964 5.2, 5.3.1).
            None if self.relay != Some(src4) => return Err(DropReason::TunnelSpoofedSource),
            None => {}
        }
        match embedded(inner.dst) {
            Some(v4) if !valid_v4(v4) => Err(DropReason::Tunnel6to4AddressRefused),
            // "if prefix of dst_v6 == 2002::/16, the embedded IPv4 address must be dst_v4"
            Some(v4) if v4 != dst4 => Err(DropReason::TunnelWrongDestination),
            Some(_) => Ok(()),
            // A native destination: only a relay router forwards to native IPv6.
            None if !self.relay_router => Err(DropReason::TunnelWrongDestination),
            None => Ok(()),
        }
    }
}

/// What the XDP fast path needs to encapsulate and decapsulate 6to4 itself (issue 25): the
/// endpoint is stateless, so its configuration is the whole rewrite, and the XDP program
/// applies `SixToFour::next_hop`'s and `SixToFour::check_decap`'s checks from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpSixToFour {
    /// The endpoint's IPv4 address (RFC 3056 2).
    pub ipv4: u32,
    /// The relay router (RFC 3056 5.3).
    pub relay: Option<u32>,
    /// This endpoint is a relay router (RFC 3056 5).
    pub relay_router: bool,
    /// Tunnel MTU, outer TTL, path MTU discovery (RFC 4213 3.2, 3.3).
    pub params: TunnelParams,
    /// IPv6 -> IPv4 in XDP. Off when `[nat64]` or `[siit]` is configured: the engine hands
    /// IPv6 to them before the tunnel (`Engine::dispatch`), so which packets are the
    /// tunnel's depends on their prefixes; that direction stays with the engine then.
    pub encap: bool,
    /// Native IPv6 destinations encapsulated to the relay in XDP. Only with a relay and
    /// without ISATAP beside: ISATAP's on-link and default-router destinations come before
    /// the relay (`Tunnel::mech6`).
    pub encap_relay: bool,
}

/// [`XdpSixToFour`] for `t`, if it has a 6to4 endpoint; `ipv6_translators`: the engine also
/// runs `[nat64]` or `[siit]`.
pub fn xdp_config(t: &TunnelConfig, ipv6_translators: bool) -> Option<XdpSixToFour> {
    let s = t.sixtofour.as_ref()?;
    let encap = !ipv6_translators;
    Some(XdpSixToFour {
        ipv4: u32::from(s.ipv4),
        relay: s.relay.map(u32::from),
        relay_router: s.relay_router,
        params: s.params,
        encap,
        encap_relay: encap && s.relay.is_some() && t.isatap.is_none(),
    })
}

/// [`REFUSED`] as (network, mask) pairs, for the XDP program's copy of [`valid_v4`].
pub fn refused_masks() -> impl Iterator<Item = (u32, u32)> {
    REFUSED.iter().map(|&(net, len, _)| {
        let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        (net, m)
    })
}

#[cfg(test)]
mod xdp_tests {
    use super::*;
    use crate::tunnel::{IsatapConfig, IsatapRole};
    use std::net::Ipv4Addr;

    fn six(relay: Option<Ipv4Addr>) -> SixToFourConfig {
        SixToFourConfig {
            ipv4: Ipv4Addr::new(198, 18, 0, 1),
            relay,
            relay_router: true,
            params: TunnelParams::default(),
        }
    }

    #[test]
    fn xdp_config_follows_the_engines_dispatch() {
        let relay = Some(Ipv4Addr::new(198, 18, 9, 9));
        let t = TunnelConfig {
            sixtofour: Some(six(relay)),
            isatap: None,
        };
        let x = xdp_config(&t, false).unwrap();
        assert_eq!(x.ipv4, 0xc612_0001);
        assert_eq!(x.relay, Some(0xc612_0909));
        assert!(x.relay_router && x.encap && x.encap_relay);
        assert_eq!(x.params, TunnelParams::default());
        // [nat64] or [siit] take IPv6 first: decapsulation only.
        let x = xdp_config(&t, true).unwrap();
        assert!(!x.encap && !x.encap_relay);
        // No relay: 2002::/16 destinations only.
        let t = TunnelConfig {
            sixtofour: Some(six(None)),
            isatap: None,
        };
        let x = xdp_config(&t, false).unwrap();
        assert!(x.encap && !x.encap_relay);
        // ISATAP beside: its destinations come before the relay.
        let t = TunnelConfig {
            sixtofour: Some(six(relay)),
            isatap: Some(IsatapConfig {
                ipv4: Ipv4Addr::new(198, 18, 0, 2),
                role: IsatapRole::Host {
                    routers: vec![Ipv4Addr::new(198, 18, 0, 3)],
                },
                params: TunnelParams::default(),
            }),
        };
        let x = xdp_config(&t, false).unwrap();
        assert!(x.encap && !x.encap_relay);
        // ISATAP alone: nothing for XDP.
        let t = TunnelConfig {
            sixtofour: None,
            isatap: t.isatap,
        };
        assert_eq!(xdp_config(&t, false), None);
    }

    #[test]
    fn refused_masks_are_valid_v4() {
        let m: Vec<(u32, u32)> = refused_masks().collect();
        assert_eq!(m.len(), REFUSED.len());
        let refused = |a: u32| m.iter().any(|&(n, k)| a & k == n);
        for a in [
            0u32,
            0x0a01_0203,
            0x7f00_0001,
            0xa9fe_0101,
            0xac1f_ffff,
            0xc0a8_0001,
            0xe000_0001,
            0xffff_ffff,
            0xc612_0001,
            0xc000_0201,
            0x6440_0001,
            0x0808_0808,
            0xac20_0000,
        ] {
            assert_eq!(refused(a), !valid_v4(a), "{a:#x}");
        }
    }
}
