//! ISATAP (RFC 5214): the IPv4 network as a non-broadcast multiple-access link for IPv6.
//!
//! - 6.1: an ISATAP interface identifier is `0000:5efe:V4ADDR`, or `0200:5efe:V4ADDR` when
//!   V4ADDR is globally unique (the u/l bit); addresses are a /64 prefix (or fe80::/64,
//!   7.4) plus that identifier ([`iid`], [`link_local`]).
//! - 6.3: no multicast; 7.1: a packet is encapsulated to the IPv4 address in the identifier
//!   of its on-link next hop, or to the default router (`Isatap::next_hop`).
//! - 7.3: a decapsulated packet is accepted when its IPv6 source is an ISATAP address that
//!   embeds the outer IPv4 source, or the outer source is a router of the potential router
//!   list (PRL).
//! - 8.2 (router): a Router Solicitation is answered at once with a Router Advertisement sent
//!   to the soliciting host only (RFC 4861 6.2.6), carrying the prefix (Prefix Information,
//!   on-link and autonomous) and the tunnel MTU.
//! - 8.3 (host): Router Solicitations go to the ISATAP link-local address of every PRL
//!   router (8.3.4), 3 times 4 s apart (RFC 4861 6.3.7) and then every 120 s
//!   (MinRouterSolicitInterval, 8.3.1) until an advertisement arrives, and again at half the
//!   router lifetime; an advertisement from a PRL router (8.3.3) gives the default router and
//!   the prefix, from which the host forms its address (RFC 4862 5.5.3).
//!
//! Neighbor Discovery messages are validated as RFC 4861 6.1.1 (RS) and 6.1.2 (RA) say:
//! hop limit 255, code 0, checksum, length, options of non-zero length.
//!
//! The XDP fast path (`[dataplane] fast_path = "xdp"`, issue 25) carries a router's common
//! case itself -- encapsulation to the IPv4 address in an on-link destination's identifier
//! (7.1) and decapsulation of packets whose IPv6 source embeds the outer IPv4 source (7.3) --
//! from the configuration [`xdp_config`] derives, with these same checks; Neighbor Discovery,
//! hosts (their router and prefix are learned state) and everything else still come here.

use xlat_wire::checksum;
use xlat_wire::field::{u16_at, u32_at, u8_at};
use xlat_wire::ipv4::Ipv4Header;
use xlat_wire::ipv6::{self, nh, Ipv6Fields};
use xlat_wire::PacketBuf;

use crate::config::Prefix6;
use crate::counters::{Counters, DropReason, Event};
use crate::rfc6052::is_global_ipv4;
use crate::{Time, Verdict};

use super::{
    addr6, outer, unicast4, Inner6, IsatapConfig, IsatapRole, TunnelParams, TunnelStatus, OUTER,
};

/// ICMPv6 Router Solicitation and Advertisement (RFC 4861 4.1, 4.2).
pub const ROUTER_SOLICITATION: u8 = 133;
pub const ROUTER_ADVERTISEMENT: u8 = 134;
/// ND option types (RFC 4861 4.6).
const OPT_PREFIX_INFO: u8 = 3;
const OPT_MTU: u8 = 5;
/// ND messages are sent with hop limit 255 and accepted only with it (RFC 4861 6.1).
const ND_HOP_LIMIT: u8 = 255;
/// ff02::2, all routers (RFC 4291 2.7.1).
const ALL_ROUTERS: u128 = 0xff02_0000_0000_0000_0000_0000_0000_0002;
/// RFC 4861 10: RTR_SOLICITATION_INTERVAL and MAX_RTR_SOLICITATIONS.
const RS_INTERVAL_SECS: u64 = 4;
const MAX_RS: u32 = 3;
/// RFC 5214 8.3.1: MinRouterSolicitInterval.
const MIN_RS_INTERVAL_SECS: u64 = 120;
/// RFC 4861 6.2.1 defaults: AdvValidLifetime, AdvPreferredLifetime, AdvCurHopLimit.
const VALID_LIFETIME: u32 = 2_592_000;
const PREFERRED_LIFETIME: u32 = 604_800;
const CUR_HOP_LIMIT: u8 = 64;
/// Length of the Router Advertisement sent: header 16, Prefix Information 32, MTU 8.
const RA_LEN: usize = 16 + 32 + 8;
/// Length of the Router Solicitation sent (no options: ISATAP has no link-layer address
/// option, the address is in the identifier).
const RS_LEN: usize = 8;

/// A length of the messages built here (all below 200 bytes) as a header field.
#[expect(clippy::cast_possible_truncation, reason = "capped at 0xffff first")]
const fn len16(n: usize) -> u16 {
    if n > 0xffff {
        u16::MAX
    } else {
        n as u16
    }
}

/// The ISATAP interface identifier of `v4` (RFC 5214 6.1), as the low 64 bits of an address.
pub fn iid(v4: u32) -> u64 {
    let hi: u64 = if is_global_ipv4(v4) {
        0x0200_5efe
    } else {
        0x0000_5efe
    };
    (hi << 32) | u64::from(v4)
}

/// The IPv4 address in an ISATAP interface identifier (either u/l form), if `a` has one.
#[expect(
    clippy::cast_possible_truncation,
    reason = "the identifier's two 32-bit halves (RFC 5214 6.1)"
)]
pub fn embedded(a: u128) -> Option<u32> {
    let hi = (a >> 32) as u32;
    (hi == 0x0000_5efe || hi == 0x0200_5efe).then_some(a as u32)
}

/// fe80::/64 plus the ISATAP identifier of `v4` (RFC 5214 7.4).
pub fn link_local(v4: u32) -> u128 {
    (0xfe80u128 << 112) | u128::from(iid(v4))
}

/// fe80::/64.
fn in_link_local64(a: u128) -> bool {
    a >> 64 == 0xfe80_0000_0000_0000
}

/// The /64 of an address.
fn prefix64(a: u128) -> u128 {
    a & !(u128::from(u64::MAX))
}

/// What the XDP fast path needs to encapsulate and decapsulate for an ISATAP router itself
/// (issue 25): a router's interface is stateless -- its address, its /64 and the tunnel
/// parameters are the whole rewrite -- so the XDP program applies `Isatap::next_hop`'s and
/// `Isatap::decap`'s checks from this. Hosts are not carried: their default router and
/// prefix are learned from Router Advertisements (RFC 5214 8.3.3), state the engine keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpIsatap {
    /// The router's IPv4 address: the outer destination decapsulated, the outer source
    /// encapsulated (RFC 5214 7.1, 7.3).
    pub ipv4: u32,
    /// The advertised /64 (RFC 5214 8.2): destinations in it are on the ISATAP link, their
    /// IPv4 address in the interface identifier (6.1, 7.1).
    pub prefix: u128,
    /// Tunnel MTU, outer TTL, path MTU discovery (RFC 4213 3.2, 3.3).
    pub params: TunnelParams,
    /// IPv6 -> IPv4 in XDP. Off when `[nat64]` or `[siit]` is configured: the engine hands
    /// IPv6 to them before the tunnel (`Engine::dispatch`), so that direction stays with the
    /// engine then (as 6to4's `XdpSixToFour::encap`).
    pub encap: bool,
}

/// [`XdpIsatap`] for `t`, if it has an ISATAP router; `ipv6_translators`: the engine also
/// runs `[nat64]` or `[siit]`.
pub fn xdp_config(t: &super::TunnelConfig, ipv6_translators: bool) -> Option<XdpIsatap> {
    let i = t.isatap.as_ref()?;
    let IsatapRole::Router { prefix, .. } = &i.role else {
        return None;
    };
    // `Tunnel::mech6` gives 2002::/16 destinations to 6to4 first: a /64 inside it, with 6to4
    // beside, stays with the engine in that direction.
    let under_6to4 = t.sixtofour.is_some() && super::sixtofour::embedded(prefix.addr).is_some();
    Some(XdpIsatap {
        ipv4: u32::from(i.ipv4),
        prefix: prefix64(prefix.addr),
        params: i.params,
        encap: !ipv6_translators && !under_6to4,
    })
}

/// What happened to a decapsulated packet.
pub(crate) enum Decap {
    /// Accepted: strip the outer header and hand it on.
    Deliver,
    /// Dealt with here (answered, learned from, or dropped).
    Done(Verdict),
}

struct Learned {
    prefix: u128,
    until: Time,
}

struct Host {
    prl: Vec<u32>,
    prefix: Option<Learned>,
    router: Option<(u32, Time)>,
    next_rs: Option<Time>,
    rs_count: u32,
}

enum Role {
    Router { prefix: u128, lifetime: u16 },
    Host(Host),
}

/// An ISATAP interface.
pub(crate) struct Isatap {
    pub v4: u32,
    pub params: TunnelParams,
    ll: u128,
    role: Role,
}

impl Isatap {
    pub fn new(c: &IsatapConfig) -> Isatap {
        let v4 = u32::from(c.ipv4);
        let role = match &c.role {
            IsatapRole::Router { prefix, lifetime } => Role::Router {
                prefix: prefix.addr,
                lifetime: *lifetime,
            },
            IsatapRole::Host { routers } => Role::Host(Host {
                prl: routers.iter().map(|r| u32::from(*r)).collect(),
                prefix: None,
                router: None,
                next_rs: None,
                rs_count: 0,
            }),
        };
        Isatap {
            v4,
            params: c.params,
            ll: link_local(v4),
            role,
        }
    }

    pub fn is_host(&self) -> bool {
        matches!(self.role, Role::Host(_))
    }

    /// The /64 of this interface: configured (router) or learned (host).
    fn prefix(&self) -> Option<u128> {
        match &self.role {
            Role::Router { prefix, .. } => Some(*prefix),
            Role::Host(h) => h.prefix.as_ref().map(|l| l.prefix),
        }
    }

    /// This interface's global address, if it has one.
    fn global(&self) -> Option<u128> {
        self.prefix().map(|p| p | u128::from(iid(self.v4)))
    }

    /// True for destinations on the ISATAP link: fe80::/64 and the interface's /64.
    pub fn on_link(&self, dst: u128) -> bool {
        in_link_local64(dst) || self.prefix().is_some_and(|p| prefix64(dst) == p)
    }

    /// Source of the ICMPv6 errors this interface sends: its global address, else its
    /// link-local one.
    pub fn error_source(&self) -> u128 {
        self.global().unwrap_or(self.ll)
    }

    fn ours(&self, a: u128) -> bool {
        a == self.ll || Some(a) == self.global()
    }

    /// RFC 5214 7.1: the IPv4 address to encapsulate a packet for `dst` to.
    pub fn next_hop(&self, dst: u128) -> Result<u32, DropReason> {
        if addr6::multicast(dst)
            || addr6::unspecified(dst)
            || addr6::loopback(dst)
            || addr6::v4_embedded(dst)
        {
            // RFC 5214 6.3: ISATAP links carry no multicast (MLD, all-nodes ...).
            return Err(DropReason::TunnelBadInnerAddress);
        }
        if self.on_link(dst) {
            // On-link: the link-layer (IPv4) address is in the interface identifier.
            let v4 = embedded(dst).ok_or(DropReason::IsatapNoNextHop)?;
            if v4 == self.v4 {
                return Err(DropReason::TunnelLoop);
            }
            if !unicast4(v4) {
                return Err(DropReason::TunnelBadInnerAddress);
            }
            return Ok(v4);
        }
        match &self.role {
            // Off-link from a host: its default router (RFC 5214 8.3.3, RFC 4861 6.3.6).
            Role::Host(h) => h.router.map(|(v4, _)| v4).ok_or(DropReason::IsatapNoRouter),
            Role::Router { .. } => Err(DropReason::IsatapNoNextHop),
        }
    }

    /// RFC 5214 7.3 and the Neighbor Discovery of section 8 for a decapsulated packet.
    pub fn decap(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        ident: &mut u16,
        h: &Ipv4Header,
        inner: &Inner6,
    ) -> Decap {
        let drop = |r| Decap::Done(Verdict::Drop(r));
        // RFC 5214 7.3: the IPv6 source embeds the IPv4 source, or the IPv4 source is a
        // router of the PRL.
        let from_prl = matches!(&self.role, Role::Host(hs) if hs.prl.contains(&h.src));
        if !unicast4(h.src) || !(embedded(inner.src) == Some(h.src) || from_prl) {
            return drop(DropReason::TunnelSpoofedSource);
        }
        if addr6::unspecified(inner.src)
            || addr6::loopback(inner.src)
            || addr6::multicast(inner.src)
            || addr6::v4_embedded(inner.src)
        {
            return drop(DropReason::TunnelBadInnerAddress);
        }
        let at = h.header_len;
        if inner.next_header == nh::ICMPV6 {
            let ty = u8_at(buf.data(), at + ipv6::HEADER);
            match (ty, &self.role) {
                (Some(ROUTER_SOLICITATION), Role::Router { .. }) => {
                    return Decap::Done(self.answer_rs(buf, c, ident, h, inner));
                }
                (Some(ROUTER_ADVERTISEMENT), Role::Host(_)) => {
                    return Decap::Done(self.learn_ra(now, buf.data(), c, h, inner));
                }
                (Some(ROUTER_SOLICITATION | ROUTER_ADVERTISEMENT), _) => {
                    // A solicitation to a host, an advertisement to a router: not for us.
                    return drop(DropReason::IsatapInvalidNd);
                }
                _ => {}
            }
        }
        if addr6::multicast(inner.dst)
            || addr6::unspecified(inner.dst)
            || addr6::loopback(inner.dst)
            || addr6::v4_embedded(inner.dst)
        {
            return drop(DropReason::TunnelBadInnerAddress);
        }
        // A host takes packets to its own addresses only; a router also forwards, but never
        // to another node's link-local address.
        let wanted = match &self.role {
            Role::Host(_) => self.ours(inner.dst),
            Role::Router { .. } => !addr6::link_local(inner.dst) || inner.dst == self.ll,
        };
        if !wanted {
            return drop(DropReason::TunnelWrongDestination);
        }
        Decap::Deliver
    }

    /// RFC 5214 8.2, RFC 4861 6.2.6: the Router Solicitation in `buf` (outer header at 0) is
    /// replaced by the Router Advertisement for its sender, encapsulated to the sender.
    fn answer_rs(
        &self,
        buf: &mut PacketBuf,
        c: &mut Counters,
        ident: &mut u16,
        h: &Ipv4Header,
        inner: &Inner6,
    ) -> Verdict {
        let Role::Router { prefix, lifetime } = self.role else {
            return Verdict::Drop(DropReason::IsatapInvalidNd);
        };
        let msg = buf
            .data()
            .get(h.header_len + ipv6::HEADER..h.header_len + inner.len)
            .unwrap_or(&[]);
        if let Err(r) = valid_nd(msg, inner, RS_LEN) {
            return Verdict::Drop(r);
        }
        // RFC 4861 6.1.1: an unspecified source has no reply address (and would have failed
        // the RFC 5214 7.3 check already).
        if addr6::unspecified(inner.src) {
            return Verdict::Drop(DropReason::IsatapInvalidNd);
        }
        if inner.dst != ALL_ROUTERS && !self.ours(inner.dst) {
            return Verdict::Drop(DropReason::TunnelWrongDestination);
        }
        const TOTAL: usize = OUTER + ipv6::HEADER + RA_LEN;
        // Room for the advertisement: grow at the tail if the buffer allows, else at the front.
        let grown = buf.len() >= TOTAL || buf.set_len(TOTAL) || buf.push_front(TOTAL - buf.len());
        if !grown {
            return Verdict::Drop(DropReason::NoHeadroom);
        }
        buf.truncate(TOTAL);
        *ident = ident.wrapping_add(1);
        let Some(out) = buf.data_mut().first_chunk_mut::<TOTAL>() else {
            return Verdict::Drop(DropReason::Internal);
        };
        let [l0, l1] = lifetime.to_be_bytes();
        let [v0, v1, v2, v3] = VALID_LIFETIME.to_be_bytes();
        let [p0, p1, p2, p3] = PREFERRED_LIFETIME.to_be_bytes();
        let [m0, m1, m2, m3] = u32::from(self.params.mtu).to_be_bytes();
        let mut ra = [0u8; RA_LEN];
        // RFC 4861 4.2: type, code, checksum, Cur Hop Limit, M/O flags, Router Lifetime,
        // Reachable Time, Retrans Timer (zero).
        ra[..8].copy_from_slice(&[ROUTER_ADVERTISEMENT, 0, 0, 0, CUR_HOP_LIMIT, 0, l0, l1]);
        // RFC 4861 4.6.2 Prefix Information: /64, on-link (L) and autonomous (A).
        ra[16..32].copy_from_slice(&[
            OPT_PREFIX_INFO,
            4,
            64,
            0xc0,
            v0,
            v1,
            v2,
            v3,
            p0,
            p1,
            p2,
            p3,
            0,
            0,
            0,
            0,
        ]);
        ra[32..48].copy_from_slice(&prefix.to_be_bytes());
        // RFC 4861 4.6.4 MTU: the tunnel MTU (RFC 4213 3.2).
        ra[48..].copy_from_slice(&[OPT_MTU, 1, 0, 0, m0, m1, m2, m3]);
        [ra[2], ra[3]] = ipv6::upper_checksum(self.ll, inner.src, nh::ICMPV6, &ra).to_be_bytes();
        let h6 = ipv6::header(&Ipv6Fields {
            traffic_class: 0,
            flow_label: 0,
            payload_len: len16(RA_LEN),
            next_header: nh::ICMPV6,
            hop_limit: ND_HOP_LIMIT,
            src: self.ll,
            dst: inner.src,
        });
        out[..OUTER].copy_from_slice(&outer(len16(TOTAL), *ident, &self.params, self.v4, h.src));
        out[OUTER..OUTER + ipv6::HEADER].copy_from_slice(&h6);
        out[OUTER + ipv6::HEADER..].copy_from_slice(&ra);
        c.event(Event::IsatapRaSent);
        Verdict::Forward
    }

    /// RFC 5214 8.3.3, RFC 4861 6.1.2 and 6.3.4: a Router Advertisement from a PRL router
    /// gives the default router and the prefix.
    fn learn_ra(
        &mut self,
        now: Time,
        data: &[u8],
        c: &mut Counters,
        h: &Ipv4Header,
        inner: &Inner6,
    ) -> Verdict {
        let Role::Host(hs) = &mut self.role else {
            return Verdict::Drop(DropReason::IsatapInvalidNd);
        };
        if !hs.prl.contains(&h.src) || !addr6::link_local(inner.src) {
            return Verdict::Drop(DropReason::IsatapInvalidNd);
        }
        let msg = data
            .get(h.header_len + ipv6::HEADER..h.header_len + inner.len)
            .unwrap_or(&[]);
        if let Err(r) = valid_nd(msg, inner, 16) {
            return Verdict::Drop(r);
        }
        let lifetime = u16_at(msg, 6).unwrap_or(0);
        // The first Prefix Information option usable for address autoconfiguration
        // (RFC 4862 5.5.3: A flag, /64 for a 64-bit identifier, not link-local, preferred
        // lifetime not above valid lifetime).
        let mut learned = None;
        let mut at = 16;
        while let (Some(ty), Some(units)) = (u8_at(msg, at), u8_at(msg, at + 1)) {
            let len = usize::from(units) * 8;
            if ty == OPT_PREFIX_INFO && len == 32 {
                let plen = u8_at(msg, at + 2).unwrap_or(0);
                let flags = u8_at(msg, at + 3).unwrap_or(0);
                let valid = u32_at(msg, at + 4).unwrap_or(0);
                let preferred = u32_at(msg, at + 8).unwrap_or(0);
                let prefix = ipv6::addr_at(msg, at + 16).map(prefix64);
                if let Some(p) = prefix {
                    if plen == 64
                        && flags & 0x40 != 0
                        && preferred <= valid
                        && !addr6::link_local(p)
                        && !addr6::multicast(p)
                        && learned.is_none()
                    {
                        learned = Some((p, valid));
                    }
                }
            }
            at += len;
        }
        // Router Lifetime 0: not a default router (RFC 4861 6.3.4).
        hs.router = match (lifetime, hs.router) {
            (0, Some((r, _))) if r == h.src => None,
            (0, keep) => keep,
            (l, _) => Some((h.src, now.plus_secs(u64::from(l)))),
        };
        match learned {
            Some((_, 0)) => hs.prefix = None,
            Some((p, valid)) => {
                hs.prefix = Some(Learned {
                    prefix: p,
                    until: now.plus_secs(u64::from(valid)),
                })
            }
            None => {}
        }
        // RFC 5214 8.3.4: solicit again before the router lifetime runs out.
        hs.rs_count = 0;
        let again = (u64::from(lifetime) / 2).max(RS_INTERVAL_SECS);
        hs.next_rs = Some(now.plus_secs(again));
        c.event(Event::IsatapRaReceived);
        Verdict::Held
    }

    /// Host timers: forget expired routers and prefixes, send Router Solicitations when due.
    /// When [`Isatap::timers`] next has work: a host's next Router Solicitation (now, before
    /// the first) or the end of its router's or prefix's lifetime; a router has no timers.
    pub fn next_timer(&self, now: Time) -> Option<Time> {
        let Role::Host(hs) = &self.role else {
            return None;
        };
        let lifetimes = hs.router.map(|(_, until)| until).into_iter();
        let lifetimes = lifetimes.chain(hs.prefix.as_ref().map(|l| l.until));
        lifetimes.chain([hs.next_rs.unwrap_or(now)]).min()
    }

    pub fn timers(&mut self, now: Time, c: &mut Counters, ident: &mut u16, out: &mut Vec<Vec<u8>>) {
        let (v4, ll, params) = (self.v4, self.ll, self.params);
        let Role::Host(hs) = &mut self.role else {
            return;
        };
        if hs.router.is_some_and(|(_, until)| until <= now) {
            hs.router = None;
        }
        if hs.prefix.as_ref().is_some_and(|l| l.until <= now) {
            hs.prefix = None;
        }
        let due = hs.next_rs.is_none_or(|t| t <= now);
        if !due {
            return;
        }
        for &r in &hs.prl {
            *ident = ident.wrapping_add(1);
            out.push(router_solicitation(*ident, &params, v4, ll, r));
            c.event(Event::IsatapRsSent);
        }
        hs.rs_count = hs.rs_count.saturating_add(1);
        let wait = if hs.rs_count < MAX_RS {
            RS_INTERVAL_SECS
        } else {
            MIN_RS_INTERVAL_SECS
        };
        hs.next_rs = Some(now.plus_secs(wait));
    }

    pub fn status(&self) -> TunnelStatus {
        match &self.role {
            Role::Router { .. } => TunnelStatus::default(),
            Role::Host(hs) => TunnelStatus {
                isatap_prefix: hs.prefix.as_ref().map(|l| Prefix6 {
                    addr: l.prefix,
                    len: 64,
                }),
                isatap_address: self.global(),
                isatap_router: hs.router.map(|(r, _)| std::net::Ipv4Addr::from(r)),
            },
        }
    }
}

/// RFC 4861 6.1.1 / 6.1.2: hop limit 255, code 0, at least `min` bytes, a checksum that
/// verifies, options of non-zero length that end with the message.
fn valid_nd(msg: &[u8], inner: &Inner6, min: usize) -> Result<(), DropReason> {
    if inner.hop_limit != ND_HOP_LIMIT || msg.len() < min || u8_at(msg, 1) != Some(0) {
        return Err(DropReason::IsatapInvalidNd);
    }
    let len = u32::try_from(msg.len()).unwrap_or(u32::MAX);
    let sum = checksum::sum(
        msg,
        ipv6::pseudo_header_sum(inner.src, inner.dst, len, nh::ICMPV6),
    );
    if checksum::fold(sum) != 0xffff {
        return Err(DropReason::IsatapInvalidNd);
    }
    let mut at = min;
    while at < msg.len() {
        match u8_at(msg, at + 1) {
            Some(units) if units > 0 => at += usize::from(units) * 8,
            _ => return Err(DropReason::IsatapInvalidNd),
        }
    }
    if at != msg.len() {
        return Err(DropReason::IsatapInvalidNd);
    }
    Ok(())
}

/// A Router Solicitation from `ll` to the ISATAP link-local address of `router`, in IPv4
/// (RFC 5214 8.3.4; RFC 4861 4.1).
fn router_solicitation(ident: u16, p: &TunnelParams, v4: u32, ll: u128, router: u32) -> Vec<u8> {
    const TOTAL: usize = OUTER + ipv6::HEADER + RS_LEN;
    let dst = link_local(router);
    let mut rs = [ROUTER_SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
    [rs[2], rs[3]] = ipv6::upper_checksum(ll, dst, nh::ICMPV6, &rs).to_be_bytes();
    let h6 = ipv6::header(&Ipv6Fields {
        traffic_class: 0,
        flow_label: 0,
        payload_len: len16(RS_LEN),
        next_header: nh::ICMPV6,
        hop_limit: ND_HOP_LIMIT,
        src: ll,
        dst,
    });
    let mut b = Vec::with_capacity(TOTAL);
    b.extend_from_slice(&outer(len16(TOTAL), ident, p, v4, router));
    b.extend_from_slice(&h6);
    b.extend_from_slice(&rs);
    b
}

#[cfg(test)]
mod xdp_tests {
    use super::*;
    use crate::tunnel::{SixToFourConfig, TunnelConfig};
    use std::net::Ipv4Addr;

    fn router() -> IsatapConfig {
        IsatapConfig {
            ipv4: Ipv4Addr::new(198, 18, 0, 1),
            role: IsatapRole::Router {
                prefix: Prefix6 {
                    addr: 0x2001_0002_0000_0005 << 64,
                    len: 64,
                },
                lifetime: 1800,
            },
            params: TunnelParams {
                mtu: 1400,
                ttl: 40,
                pmtud: false,
            },
        }
    }

    #[test]
    fn xdp_config_carries_a_router_only() {
        let t = TunnelConfig {
            sixtofour: None,
            isatap: Some(router()),
        };
        let x = xdp_config(&t, false).unwrap();
        assert_eq!(x.ipv4, 0xc612_0001);
        assert_eq!(x.prefix, 0x2001_0002_0000_0005 << 64);
        assert_eq!(
            x.params,
            TunnelParams {
                mtu: 1400,
                ttl: 40,
                pmtud: false
            }
        );
        assert!(x.encap);
        // [nat64] or [siit] take IPv6 first: decapsulation only.
        assert!(!xdp_config(&t, true).unwrap().encap);
        // 6to4 beside changes nothing for ISATAP (the outer destination picks the mechanism).
        let both = TunnelConfig {
            sixtofour: Some(SixToFourConfig {
                ipv4: Ipv4Addr::new(198, 18, 0, 2),
                relay: None,
                relay_router: false,
                params: TunnelParams::default(),
            }),
            isatap: Some(router()),
        };
        assert_eq!(xdp_config(&both, false), Some(x));
        // ... unless its /64 is inside 2002::/16, which 6to4 takes first (Tunnel::mech6).
        let mut in2002 = both.clone();
        if let Some(IsatapConfig {
            role: IsatapRole::Router { prefix, .. },
            ..
        }) = in2002.isatap.as_mut()
        {
            prefix.addr = 0x2002_c612_0002_0001 << 64;
        }
        let y = xdp_config(&in2002, false).unwrap();
        assert!(!y.encap && y.prefix == 0x2002_c612_0002_0001 << 64);
        // A host's router and prefix are learned state: nothing for XDP.
        let host = TunnelConfig {
            sixtofour: None,
            isatap: Some(IsatapConfig {
                role: IsatapRole::Host {
                    routers: vec![Ipv4Addr::new(198, 18, 0, 9)],
                },
                ..router()
            }),
        };
        assert_eq!(xdp_config(&host, false), None);
        assert_eq!(
            xdp_config(
                &TunnelConfig {
                    sixtofour: both.sixtofour,
                    isatap: None
                },
                false
            ),
            None
        );
    }

    /// What the XDP program reproduces of `Isatap::next_hop` for a router: an on-link
    /// destination's identifier gives the IPv4 next hop; its own address loops.
    #[test]
    fn router_next_hop_is_the_identifiers_ipv4() {
        let i = Isatap::new(&router());
        let p = 0x2001_0002_0000_0005u128 << 64;
        assert_eq!(i.next_hop(p | 0x0000_5efe_c612_0102), Ok(0xc612_0102));
        assert_eq!(i.next_hop(p | 0x0200_5efe_c612_0102), Ok(0xc612_0102));
        assert_eq!(
            i.next_hop(p | 0x0000_5efe_c612_0001),
            Err(DropReason::TunnelLoop)
        );
        assert_eq!(i.next_hop(p | 0x1234), Err(DropReason::IsatapNoNextHop));
        assert_eq!(
            i.next_hop(p | 0x0000_5efe_e000_0001),
            Err(DropReason::TunnelBadInnerAddress)
        );
    }
}
