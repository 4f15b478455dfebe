//! 6in4 tunnels: IPv6 carried in IPv4 protocol 41 between automatic tunnel endpoints, with the
//! endpoint running on the TUN device like the translators.
//!
//! - [`sixtofour`]: 6to4 (RFC 3056) with the security checks of RFC 3964 5.3.1, and an
//!   optional relay router (RFC 3056 5.3; the anycast relay of RFC 3068 is deprecated by
//!   RFC 7526, so the relay is a configured unicast address).
//! - [`isatap`]: ISATAP (RFC 5214): ISATAP interface identifiers (6.1), encapsulation to the
//!   IPv4 address in the next hop's identifier (7.1), the decapsulation check of 7.3, and
//!   router discovery over the NBMA link: a router answers Router Solicitations with a unicast
//!   Router Advertisement of its prefix (8.2), a host solicits its potential routers and
//!   learns the prefix and its default router from the advertisement (8.3).
//!
//! Both follow RFC 4213 section 3 for the tunnel itself:
//! - 3.2 tunnel MTU (1480 by default): a larger IPv6 packet is answered with an ICMPv6 Packet
//!   Too Big ([`Verdict::Reply`]); the outer DF bit is set on packets above 1280 bytes when
//!   path MTU discovery is on (3.2.2), never when it is off (static MTU, 3.2.1);
//! - 3.3 the tunnel is one IPv6 hop: the engine leaves the hop limit alone (the kernel in front
//!   of the TUN decrements it when it forwards) and sets the outer TTL (64 by default);
//! - 3.4 ICMPv4 errors about the tunnel packets, arriving at the endpoint address, are relayed
//!   to the IPv6 source as ICMPv6 errors;
//! - 3.5 the outer header (protocol 41, DSCP and ECN copied per RFC 6040 4.1);
//! - 3.6 decapsulation: IPv4 fragments of tunnel packets are reassembled first (`reasm`),
//!   the outer ECN is combined with the inner per RFC 6040 4.2, and the checks of the
//!   mechanism decide whether the inner packet is accepted.
//!
//! The daemon steers all ICMPv4 for an endpoint address into the TUN so that errors about
//! the tunnel arrive here; every other ICMPv4 message goes back to the kernel unchanged.

pub mod isatap;
mod reasm;
pub mod sixtofour;

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use xlat_wire::checksum;
use xlat_wire::field::{u16_at, u32_at, u8_at};
use xlat_wire::ipv4::{self, proto, Ipv4Fields, Ipv4Header};
use xlat_wire::ipv6;
use xlat_wire::l4::{icmp, icmpv6};
use xlat_wire::PacketBuf;

use crate::config::{ConfigError, Prefix6};
use crate::counters::{Counters, DropReason, Event};
use crate::siit::reply::{icmp6_error, RateLimit};
use crate::{Time, Verdict};

use isatap::Isatap;
use reasm::Reassembly;
use sixtofour::SixToFour;

/// IP protocol number of IPv6 encapsulated in IPv4 (IANA; RFC 4213 3.5).
pub const PROTO_IPV6: u8 = 41;
/// Default tunnel MTU: a 1500-byte IPv4 path less the 20-byte outer header (RFC 4213 3.2).
pub const DEFAULT_MTU: u16 = 1480;
/// Default outer TTL (RFC 4213 3.3: "the current suggested value" of Assigned Numbers, 64).
pub const DEFAULT_TTL: u8 = 64;
/// Outer header length (no options).
const OUTER: usize = ipv4::MIN_HEADER;
/// The IPv6 minimum MTU (RFC 8200 5).
const MIN_MTU6: usize = ipv6::MIN_MTU;

/// Settings every tunnel mechanism shares (RFC 4213 3.2, 3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunnelParams {
    /// Tunnel MTU: the largest IPv6 packet sent into the tunnel (RFC 4213 3.2).
    pub mtu: u16,
    /// TTL of the outer IPv4 header (RFC 4213 3.3).
    pub ttl: u8,
    /// Dynamic tunnel MTU (RFC 4213 3.2.2): DF set on packets above 1280 bytes, ICMPv4
    /// Fragmentation Needed relayed as Packet Too Big. Off: static MTU, DF never set (3.2.1).
    pub pmtud: bool,
}

impl Default for TunnelParams {
    fn default() -> Self {
        TunnelParams {
            mtu: DEFAULT_MTU,
            ttl: DEFAULT_TTL,
            pmtud: true,
        }
    }
}

impl TunnelParams {
    fn validate(&self, mtu_key: &'static str, ttl_key: &'static str) -> Result<(), ConfigError> {
        if usize::from(self.mtu) < MIN_MTU6 || usize::from(self.mtu) > 65535 - OUTER {
            return Err(ConfigError {
                key: mtu_key,
                problem: format!(
                    "{} is out of range; expected 1280 (the IPv6 minimum) to 65515, usually 1480 (RFC 4213 3.2)",
                    self.mtu
                ),
            });
        }
        if self.ttl == 0 {
            return Err(ConfigError {
                key: ttl_key,
                problem: "0 would never leave the host; expected 1 to 255, usually 64".into(),
            });
        }
        Ok(())
    }
}

/// `[tunnel.6to4]`: a 6to4 router (RFC 3056).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SixToFourConfig {
    /// The endpoint's IPv4 address; the site prefix is 2002:V4ADDR::/48 (RFC 3056 2).
    pub ipv4: Ipv4Addr,
    /// Relay router for IPv6 destinations outside 2002::/16 (RFC 3056 5.3). Optional.
    pub relay: Option<Ipv4Addr>,
    /// This endpoint is itself a relay router (RFC 3056 5): it accepts packets to native
    /// (non-6to4) IPv6 destinations and encapsulates native sources to 6to4 sites.
    pub relay_router: bool,
    pub params: TunnelParams,
}

/// The role of an ISATAP interface (RFC 5214 8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IsatapRole {
    /// Advertising router (RFC 5214 8.2): answers Router Solicitations with this /64.
    Router {
        prefix: Prefix6,
        /// Router Lifetime advertised, seconds (RFC 4861 4.2; 1800 by default).
        lifetime: u16,
    },
    /// Host (RFC 5214 8.3): solicits the routers of its potential router list (PRL).
    Host { routers: Vec<Ipv4Addr> },
}

/// `[tunnel.isatap]`: an ISATAP interface (RFC 5214).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsatapConfig {
    pub ipv4: Ipv4Addr,
    pub role: IsatapRole,
    pub params: TunnelParams,
}

/// The tunnel endpoints of one engine (either or both).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TunnelConfig {
    pub sixtofour: Option<SixToFourConfig>,
    pub isatap: Option<IsatapConfig>,
}

/// True for an IPv4 address a tunnel endpoint may use or send to: not "this network" (0/8),
/// loopback (127/8), multicast (224/4), reserved or limited broadcast (240/4)
/// (RFC 1812 4.2.2.11, 5.3.7).
pub fn unicast4(a: u32) -> bool {
    let first = a >> 24;
    first != 0 && first != 127 && first < 224
}

impl TunnelConfig {
    /// Checks the addresses, the MTU and TTL, and the ISATAP role.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if self.sixtofour.is_none() && self.isatap.is_none() {
            return err(
                "tunnel",
                "[tunnel] has neither [tunnel.6to4] nor [tunnel.isatap]".into(),
            );
        }
        if let Some(s) = &self.sixtofour {
            let v4 = u32::from(s.ipv4);
            if !sixtofour::valid_v4(v4) {
                return err("tunnel.6to4.ipv4", format!("{} cannot carry a 6to4 prefix: RFC 3964 5.3.1 refuses {}; use a global or benchmarking (198.18.0.0/15) address", s.ipv4, sixtofour::REFUSED_TEXT));
            }
            if let Some(r) = s.relay {
                if !sixtofour::valid_v4(u32::from(r)) {
                    return err("tunnel.6to4.relay", format!("{r} is refused by RFC 3964 5.3.1 ({}); expected the relay router's unicast address", sixtofour::REFUSED_TEXT));
                }
                if r == s.ipv4 {
                    return err(
                        "tunnel.6to4.relay",
                        format!("{r} is this endpoint's own address; name another router"),
                    );
                }
            }
            s.params.validate("tunnel.6to4.mtu", "tunnel.6to4.ttl")?;
        }
        if let Some(i) = &self.isatap {
            if !unicast4(u32::from(i.ipv4)) {
                return err(
                    "tunnel.isatap.ipv4",
                    format!("{} is not a unicast IPv4 address", i.ipv4),
                );
            }
            match &i.role {
                IsatapRole::Router { prefix, .. } => {
                    if prefix.len != 64 {
                        return err("tunnel.isatap.prefix", format!("{prefix} is not a /64; ISATAP interface identifiers are 64 bits (RFC 5214 6.1), so the prefix must be a /64"));
                    }
                    if prefix.addr >> 118 == 0x3fa || prefix.addr >> 120 == 0xff {
                        return err(
                            "tunnel.isatap.prefix",
                            format!("{prefix} is link-local or multicast; expected a global /64"),
                        );
                    }
                }
                IsatapRole::Host { routers } => {
                    if routers.is_empty() {
                        return err("tunnel.isatap.routers", "a host needs at least one router in its potential router list (RFC 5214 8.3.2), e.g. routers = [\"198.18.0.1\"]".into());
                    }
                    if let Some(r) = routers.iter().find(|r| !unicast4(u32::from(**r))) {
                        return err(
                            "tunnel.isatap.routers",
                            format!("{r} is not a unicast IPv4 address"),
                        );
                    }
                    if routers.contains(&i.ipv4) {
                        return err(
                            "tunnel.isatap.routers",
                            format!("{} is this host's own address", i.ipv4),
                        );
                    }
                }
            }
            i.params
                .validate("tunnel.isatap.mtu", "tunnel.isatap.ttl")?;
            if self.sixtofour.as_ref().is_some_and(|s| s.ipv4 == i.ipv4) {
                return err("tunnel.isatap.ipv4", format!("{} is also tunnel.6to4.ipv4; each endpoint needs its own IPv4 address (the outer destination picks the mechanism)", i.ipv4));
            }
        }
        Ok(())
    }

    /// The IPv4 endpoint addresses (6to4 first).
    pub fn ipv4_addresses(&self) -> Vec<Ipv4Addr> {
        self.sixtofour
            .iter()
            .map(|s| s.ipv4)
            .chain(self.isatap.iter().map(|i| i.ipv4))
            .collect()
    }
}

/// What a tunnel learned that the daemon acts on (addresses and routes on the TUN device).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TunnelStatus {
    /// ISATAP host: the prefix learned from a Router Advertisement (RFC 5214 8.3.3).
    pub isatap_prefix: Option<Prefix6>,
    /// ISATAP host: the address formed from it (prefix + ISATAP interface identifier).
    pub isatap_address: Option<u128>,
    /// ISATAP host: the IPv4 address of the default router, while its lifetime lasts.
    pub isatap_router: Option<Ipv4Addr>,
}

/// The fixed header of an IPv6 packet inside (or about to go into) a tunnel (RFC 8200 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Inner6 {
    pub src: u128,
    pub dst: u128,
    /// Header plus payload length (bytes after this are link padding).
    pub len: usize,
    pub traffic_class: u8,
    pub next_header: u8,
    pub hop_limit: u8,
}

impl Inner6 {
    /// Reads the fixed header; `None` unless it is version 6 and its payload is all there.
    pub fn parse(b: &[u8]) -> Option<Inner6> {
        let first = u32_at(b, 0)?;
        if first >> 28 != 6 {
            return None;
        }
        let len = ipv6::HEADER + usize::from(u16_at(b, ipv6::off::PAYLOAD_LEN)?);
        if len > b.len() {
            return None;
        }
        Some(Inner6 {
            src: ipv6::addr_at(b, ipv6::off::SRC)?,
            dst: ipv6::addr_at(b, ipv6::off::DST)?,
            len,
            traffic_class: ((first >> 20) & 0xff) as u8,
            next_header: u8_at(b, ipv6::off::NEXT_HEADER)?,
            hop_limit: u8_at(b, ipv6::off::HOP_LIMIT)?,
        })
    }
}

/// IPv6 address classes the tunnels refuse in various places (RFC 4291 2.4, 2.5.5).
pub(crate) mod addr6 {
    pub fn unspecified(a: u128) -> bool {
        a == 0
    }
    pub fn loopback(a: u128) -> bool {
        a == 1
    }
    pub fn multicast(a: u128) -> bool {
        a >> 120 == 0xff
    }
    pub fn link_local(a: u128) -> bool {
        a >> 118 == 0x3fa
    }
    /// IPv4-compatible (::/96, deprecated) and IPv4-mapped (::ffff:0:0/96) addresses.
    pub fn v4_embedded(a: u128) -> bool {
        a >> 32 == 0 || a >> 32 == 0xffff
    }
}

/// Which mechanism an endpoint address belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mech {
    SixToFour,
    Isatap,
}

/// The tunnel endpoints of one engine and their shared state.
pub struct Tunnel {
    six: Option<SixToFour>,
    isatap: Option<Isatap>,
    /// IPv4 Identification of the next outer header (RFC 4213 3.5: unique per packet; a
    /// counter from the seed, so that replays are identical).
    ident: u16,
    errors: RateLimit,
    reasm: Reassembly,
    ready: VecDeque<Vec<u8>>,
}

/// Packets the engine originates on its own (Router Solicitations, reassembled tunnel
/// packets) waiting for [`Tunnel::pop_ready`]; beyond this many the newest are dropped.
const MAX_READY: usize = 256;

impl Tunnel {
    pub fn new(cfg: &TunnelConfig, seed: u64) -> Tunnel {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the first identification: any 16 bits of the seed"
        )]
        fn fold16(seed: u64) -> u16 {
            (seed ^ (seed >> 16) ^ (seed >> 32)) as u16
        }
        Tunnel {
            six: cfg.sixtofour.as_ref().map(SixToFour::new),
            isatap: cfg.isatap.as_ref().map(Isatap::new),
            ident: fold16(seed),
            errors: RateLimit::new(),
            reasm: Reassembly::new(),
            ready: VecDeque::new(),
        }
    }

    fn mech4(&self, dst: u32) -> Option<Mech> {
        if self.six.as_ref().is_some_and(|s| s.v4 == dst) {
            Some(Mech::SixToFour)
        } else if self.isatap.as_ref().is_some_and(|i| i.v4 == dst) {
            Some(Mech::Isatap)
        } else {
            None
        }
    }

    /// True for IPv4 packets this tunnel handles: protocol 41 or ICMP to an endpoint address.
    pub fn owns4(&self, dst: u32, proto: u8) -> bool {
        (proto == PROTO_IPV6 || proto == proto::ICMP) && self.mech4(dst).is_some()
    }

    /// Which mechanism carries an IPv6 packet from the TUN (the kernel routed it here):
    /// 2002::/16 destinations go by 6to4; ISATAP on-link destinations (link-local or the
    /// ISATAP prefix) by ISATAP; then 6to4 sources by 6to4 (to the relay); then the ISATAP
    /// host's default router; then the 6to4 relay.
    fn mech6(&self, src: u128, dst: u128) -> Option<Mech> {
        if self.six.is_some() && sixtofour::embedded(dst).is_some() {
            return Some(Mech::SixToFour);
        }
        if let Some(i) = &self.isatap {
            if i.on_link(dst) {
                return Some(Mech::Isatap);
            }
        }
        if self.six.is_some() && sixtofour::embedded(src).is_some() {
            return Some(Mech::SixToFour);
        }
        if self.isatap.as_ref().is_some_and(Isatap::is_host) {
            return Some(Mech::Isatap);
        }
        if self.six.as_ref().is_some_and(|s| s.relay.is_some()) {
            return Some(Mech::SixToFour);
        }
        None
    }

    /// An IPv6 packet from the TUN: encapsulate it toward the next hop's IPv4 address.
    pub fn process6(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        let data = buf.data();
        if data.len() < ipv6::HEADER {
            return Verdict::Drop(DropReason::TruncatedIpv6);
        }
        let Some(inner) = Inner6::parse(data) else {
            return Verdict::Drop(DropReason::BadPayloadLength);
        };
        let (v4, dst4, params, err_src) = match self.mech6(inner.src, inner.dst) {
            Some(Mech::SixToFour) => {
                let Some(s) = &self.six else {
                    return Verdict::Drop(DropReason::NotOurs);
                };
                match s.next_hop(inner.src, inner.dst) {
                    Ok(d) => (s.v4, d, s.params, sixtofour::address(s.v4)),
                    Err(r) => return Verdict::Drop(r),
                }
            }
            Some(Mech::Isatap) => {
                let Some(i) = &self.isatap else {
                    return Verdict::Drop(DropReason::NotOurs);
                };
                match i.next_hop(inner.dst) {
                    Ok(d) => (i.v4, d, i.params, i.error_source()),
                    Err(r) => return Verdict::Drop(r),
                }
            }
            // The kernel's own link-local traffic on the TUN (MLD reports, solicitations).
            None if addr6::multicast(inner.dst) || addr6::link_local(inner.src) => {
                return Verdict::Drop(DropReason::TunnelBadInnerAddress)
            }
            None => return Verdict::Drop(DropReason::NotOurs),
        };
        self.encapsulate(now, buf, c, &inner, v4, dst4, &params, err_src)
    }

    /// RFC 4213 3.2 and 3.5: checks the tunnel MTU and puts the outer IPv4 header in front.
    #[allow(clippy::too_many_arguments)]
    fn encapsulate(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        inner: &Inner6,
        src4: u32,
        dst4: u32,
        p: &TunnelParams,
        err_src: u128,
    ) -> Verdict {
        if inner.len > usize::from(p.mtu) {
            // RFC 4213 3.2: larger than the tunnel MTU -> ICMPv6 Packet Too Big with the MTU.
            return self.too_big(now, buf, c, err_src, u32::from(p.mtu));
        }
        buf.truncate(inner.len);
        if !buf.push_front(OUTER) {
            return Verdict::Drop(DropReason::NoHeadroom);
        }
        // An IPv4 packet says at most 65,535 bytes: a tunnel MTU above 65,515 cannot be used.
        let Ok(total) = u16::try_from(buf.len()) else {
            return Verdict::Drop(DropReason::TranslatedTooLong);
        };
        // RFC 4213 3.2.2: DF on packets above the IPv6 minimum MTU, so that the path can tell
        // us its MTU; smaller ones must always get through, fragmented by IPv4 if need be.
        // 3.2.1 (static MTU): DF never set.
        let dont_fragment = p.pmtud && inner.len > MIN_MTU6;
        self.ident = self.ident.wrapping_add(1);
        let wrote = ipv4::write_header(
            buf.data_mut(),
            &Ipv4Fields {
                // RFC 4213 3.5 leaves TOS to RFC 2983 / RFC 3168; RFC 6040 4.1 (normal mode):
                // copy the DSCP and the ECN field.
                tos: inner.traffic_class,
                total_len: total,
                ident: self.ident,
                dont_fragment,
                more_fragments: false,
                frag_offset: 0,
                // RFC 4213 3.3: the outer TTL is set; the inner hop limit is left alone.
                ttl: p.ttl,
                proto: PROTO_IPV6,
                src: src4,
                dst: dst4,
            },
        );
        if !wrote {
            return Verdict::Drop(DropReason::Internal);
        }
        c.event(Event::TunnelEncapsulated);
        Verdict::Forward
    }

    /// The packet in `buf` becomes a Packet Too Big about itself (RFC 4213 3.2; RFC 4443
    /// 3.2), rate limited (RFC 4443 2.4 f).
    fn too_big(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        src: u128,
        mtu: u32,
    ) -> Verdict {
        if !self.errors.allow(now) {
            c.event(Event::IcmpErrorsRateLimited);
            return Verdict::Drop(DropReason::TooBig);
        }
        if icmp6_error(buf, src, icmpv6::PACKET_TOO_BIG, 0, mtu) {
            Verdict::Reply(DropReason::TooBig)
        } else {
            Verdict::Drop(DropReason::TooBig)
        }
    }

    /// An IPv4 packet to an endpoint address: protocol 41 is decapsulated, ICMP answered or
    /// relayed.
    pub fn process4(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        let h = match Ipv4Header::parse(buf.data(), true) {
            Ok(h) => h,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let Some(mech) = self.mech4(h.dst) else {
            return Verdict::Drop(DropReason::NotOurs);
        };
        // Bytes after the total length (link padding, RFC 1812 5.2.2 allows them) are not
        // the packet's: whatever goes back out -- decapsulated, relayed or passed to the
        // kernel unchanged -- carries the packet alone (a fuzz finding: passed-through ICMP
        // kept them, so its length field disagreed with its size).
        buf.truncate(h.total_len);
        match h.proto {
            PROTO_IPV6 if h.is_fragment() => self.fragment(now, buf, c, &h, mech),
            PROTO_IPV6 => self.decapsulate(now, buf, c, &h, mech),
            proto::ICMP => self.icmp4(now, buf, c, &h, mech),
            _ => Verdict::Drop(DropReason::NotOurs),
        }
    }

    /// RFC 4213 3.6: "the decapsulating node ... MUST reassemble" fragmented tunnel packets.
    /// Fragments are held; the reassembled packet, decapsulated, leaves through
    /// [`Tunnel::pop_ready`].
    fn fragment(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        h: &Ipv4Header,
        mech: Mech,
    ) -> Verdict {
        let whole = match self.reasm.add(now, h, buf.data()) {
            Ok(None) => return Verdict::Held,
            Ok(Some(w)) => w,
            Err(r) => return Verdict::Drop(r),
        };
        c.event(Event::TunnelReassembled);
        let mut bytes = whole;
        let mut b = PacketBuf::whole(&mut bytes);
        let Ok(wh) = Ipv4Header::parse(b.data(), false) else {
            return Verdict::Drop(DropReason::TunnelReassemblyInvalid);
        };
        match self.decapsulate(now, &mut b, c, &wh, mech) {
            Verdict::Forward => {
                let out = b.data().to_vec();
                self.push_ready(out, c);
                Verdict::Held
            }
            v => v,
        }
    }

    fn push_ready(&mut self, p: Vec<u8>, c: &mut Counters) {
        if self.ready.len() < MAX_READY {
            self.ready.push_back(p);
        } else {
            c.drop(DropReason::TunnelQueueFull);
        }
    }

    /// RFC 4213 3.6 and the mechanism's checks (RFC 3964 5.3.1, RFC 5214 7.3).
    fn decapsulate(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        h: &Ipv4Header,
        mech: Mech,
    ) -> Verdict {
        let Some(payload) = buf.data().get(h.header_len..h.total_len) else {
            return Verdict::Drop(DropReason::TunnelBadInnerPacket);
        };
        let Some(inner) = Inner6::parse(payload) else {
            return Verdict::Drop(DropReason::TunnelBadInnerPacket);
        };
        match mech {
            Mech::SixToFour => {
                let Some(s) = &self.six else {
                    return Verdict::Drop(DropReason::NotOurs);
                };
                if let Err(r) = s.check_decap(h.src, h.dst, &inner) {
                    return Verdict::Drop(r);
                }
            }
            Mech::Isatap => {
                let Some(i) = self.isatap.as_mut() else {
                    return Verdict::Drop(DropReason::NotOurs);
                };
                match i.decap(now, buf, c, &mut self.ident, h, &inner) {
                    isatap::Decap::Deliver => {}
                    isatap::Decap::Done(v) => return v,
                }
            }
        }
        // RFC 6040 4.2: combine the outer ECN into the inner header.
        let outer_ecn = h.tos & 0x03;
        let inner_ecn = inner.traffic_class & 0x03;
        let mut new_tc = inner.traffic_class;
        if outer_ecn == 0x03 {
            if inner_ecn == 0 {
                // Not-ECT inside, CE outside: the congestion mark cannot be passed on.
                return Verdict::Drop(DropReason::TunnelEcnNotEct);
            }
            new_tc |= 0x03;
        }
        if !buf.pull_front(h.header_len) {
            return Verdict::Drop(DropReason::TunnelBadInnerPacket);
        }
        buf.truncate(inner.len);
        if new_tc != inner.traffic_class {
            if let Some(w) = buf.data_mut().first_chunk_mut::<4>() {
                let first = u32::from_be_bytes(*w);
                *w = ((first & !0x0ff0_0000) | (u32::from(new_tc) << 20)).to_be_bytes();
            }
        }
        // RFC 4213 3.3: the hop limit is not touched here; the kernel decrements it when it
        // forwards the packet on.
        c.event(Event::TunnelDecapsulated);
        Verdict::Forward
    }

    /// ICMPv4 to an endpoint: Destination Unreachable and Time Exceeded about our own
    /// protocol-41 packets relayed to the IPv6 source (RFC 4213 3.4); other errors about them
    /// dropped; everything else handed back to the kernel.
    fn icmp4(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        h: &Ipv4Header,
        mech: Mech,
    ) -> Verdict {
        // Anything that is not an error about one of our protocol-41 packets belongs to the
        // host: it goes back to the kernel unchanged (the daemon's `iif TUN lookup local`
        // rule delivers it), so pings and errors about the host's own IPv4 traffic work.
        let pass = |c: &mut Counters| {
            c.event(Event::TunnelIcmpPassed);
            Verdict::Forward
        };
        if h.is_fragment() {
            return pass(c);
        }
        let l4 = h.header_len;
        let data = buf.data();
        let msg = data.get(l4..h.total_len).unwrap_or(&[]);
        let (Some(ty), Some(code)) = (u8_at(msg, icmp::TYPE), u8_at(msg, icmp::CODE)) else {
            return pass(c);
        };
        // The quoted packet must be one of ours: IPv4 from this endpoint, protocol 41.
        let q = l4 + icmp::HEADER;
        let qv = u8_at(data, q).unwrap_or(0);
        let qihl = usize::from(qv & 0x0f) * 4;
        let ours = matches!(
            ty,
            icmp::DEST_UNREACH | icmp::TIME_EXCEEDED | icmp::PARAM_PROBLEM | icmp::SOURCE_QUENCH
        ) && msg.len() >= icmp::HEADER
            && qv >> 4 == 4
            && qihl >= ipv4::MIN_HEADER
            && u8_at(data, q + ipv4::off::PROTO) == Some(PROTO_IPV6)
            && u32_at(data, q + ipv4::off::SRC) == Some(h.dst);
        if !ours {
            return pass(c);
        }
        if !checksum::verifies(msg) {
            return Verdict::Drop(DropReason::IcmpErrorBadChecksum);
        }
        let inner_at = q + qihl;
        // RFC 4213 3.4: relaying needs the quoted IPv6 header (routers quote up to 576
        // bytes, RFC 1812 4.3.2.3; some only 8 bytes of the payload, which is not enough).
        if h.total_len < inner_at + ipv6::HEADER {
            return Verdict::Drop(DropReason::TunnelIcmpTooShort);
        }
        let (ty6, code6, rest) = match (ty, code) {
            (icmp::DEST_UNREACH, icmp::CODE_FRAG_NEEDED) => {
                // RFC 4213 3.2.2: the tunnel MTU is the IPv4 path MTU less the outer header,
                // never below 1280 (smaller paths get unfragmentable-size packets without DF).
                let mtu4 = u16_at(msg, 6).map_or(0, usize::from);
                let mtu6 = if mtu4 == 0 {
                    MIN_MTU6
                } else {
                    mtu4.saturating_sub(qihl).max(MIN_MTU6)
                };
                (
                    icmpv6::PACKET_TOO_BIG,
                    0,
                    u32::try_from(mtu6).unwrap_or(u32::MAX),
                )
            }
            // Administratively prohibited (RFC 1812 5.2.7.1; RFC 1122 codes 9 and 10).
            (icmp::DEST_UNREACH, 9 | 10 | icmp::CODE_ADMIN_PROHIBITED) => {
                (icmpv6::DEST_UNREACH, icmpv6::CODE_ADMIN_PROHIBITED, 0)
            }
            // Any other unreachable: the tunnel's far end cannot be reached, which for IPv6
            // is a link-layer failure toward the next hop: address unreachable (RFC 4443 3.1).
            (icmp::DEST_UNREACH, _) => (icmpv6::DEST_UNREACH, icmpv6::CODE_ADDR_UNREACH, 0),
            // RFC 4213 3.3: the tunnel is one IPv6 hop, so the outer TTL running out is a
            // link failure, not an IPv6 hop limit: address unreachable as well.
            (icmp::TIME_EXCEEDED, icmp::CODE_TTL_EXCEEDED) => {
                (icmpv6::DEST_UNREACH, icmpv6::CODE_ADDR_UNREACH, 0)
            }
            _ => return Verdict::Drop(DropReason::TunnelIcmpNotRelayed),
        };
        let src = match mech {
            Mech::SixToFour => self.six.as_ref().map(|s| sixtofour::address(s.v4)),
            Mech::Isatap => self.isatap.as_ref().map(Isatap::error_source),
        };
        let Some(src) = src else {
            return Verdict::Drop(DropReason::NotOurs);
        };
        if !self.errors.allow(now) {
            c.event(Event::IcmpErrorsRateLimited);
            return Verdict::Drop(DropReason::TunnelIcmpNotRelayed);
        }
        let quoted = h.total_len - inner_at;
        if !buf.pull_front(inner_at) {
            return Verdict::Drop(DropReason::TunnelIcmpTooShort);
        }
        buf.truncate(quoted);
        if !icmp6_error(buf, src, ty6, code6, rest) {
            // Not about something an error may be sent for (RFC 4443 2.4 e).
            return Verdict::Drop(DropReason::TunnelIcmpNotRelayed);
        }
        c.event(Event::TunnelIcmpRelayed);
        Verdict::Forward
    }

    /// Packets the tunnel releases outside of `process`: reassembled tunnel packets and
    /// Router Solicitations.
    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Timers: reassembly timeouts and, on an ISATAP host, Router Solicitations due.
    /// When [`Tunnel::expire`] next has work: a datagram's reassembly time is up, or an
    /// ISATAP host's timer (Router Solicitation, router or prefix lifetime) is due.
    pub fn poll_timeout(&self, now: Time) -> Option<Time> {
        let isatap = self.isatap.as_ref().and_then(|i| i.next_timer(now));
        crate::frag::earliest(self.reasm.next_due(), isatap)
    }

    pub fn expire(&mut self, now: Time, c: &mut Counters) {
        self.reasm.expire(now, c);
        let mut out = Vec::new();
        if let Some(i) = self.isatap.as_mut() {
            i.timers(now, c, &mut self.ident, &mut out);
        }
        for p in out {
            self.push_ready(p, c);
        }
    }

    /// What the daemon needs to configure on the TUN device.
    pub fn status(&self) -> TunnelStatus {
        self.isatap.as_ref().map(Isatap::status).unwrap_or_default()
    }
}

/// The outer IPv4 header of a packet the tunnel originates (Router Solicitation or
/// Advertisement), `total` bytes long with it.
pub(crate) fn outer(total: u16, ident: u16, p: &TunnelParams, src: u32, dst: u32) -> [u8; OUTER] {
    ipv4::header(&Ipv4Fields {
        tos: 0,
        total_len: total,
        ident,
        dont_fragment: false,
        more_fragments: false,
        frag_offset: 0,
        ttl: p.ttl,
        proto: PROTO_IPV6,
        src,
        dst,
    })
}

#[cfg(test)]
mod tests;
