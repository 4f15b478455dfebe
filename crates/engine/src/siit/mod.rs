//! SIIT: stateless IP/ICMP translation between IPv4 and IPv6 (RFC 7915), with addresses from
//! the pref64 (RFC 6052) and the Explicit Address Mapping table (RFC 7757).
//!
//! The header translation itself ([`to6`]: RFC 7915 section 4, [`to4`]: section 5, [`icmp`]:
//! the type/code tables of 4.2 and 5.2) is shared with NAT64, which decides addresses and
//! ports from its BIB instead. The packet path of both translators:
//!
//! 1. parse (`to6::parse` / `to4::parse`): header checks, extension headers, transport
//!    identifiers, the packet quoted in an ICMP error;
//! 2. the router checks of RFC 7915 4.1 / 5.1 ([`checks4`] / [`checks6`]): source route or
//!    routing header, TTL / hop limit, DF and the next hop MTU -- each answered with the
//!    translator's own ICMP error ([`reply`]);
//! 3. the addresses: SIIT maps each address on its own ([`AddrMap`]: EAM first, RFC 7757
//!    3.2; then the pref64), NAT64 looks up its session; a packet discarded here is answered
//!    with a Destination Unreachable (RFC 7915 4.4 / 5.4: [`unreachable4`], [`unreachable6`]);
//! 4. emit (`to6::emit` / `to4::emit`): the new header in place, checksums updated;
//! 5. fragments ([`frag`]): IPv4 packets without DF split to the lowest IPv6 MTU
//!    ([`split6`]), first fragments of ICMP messages held until their length is known.
//!
//! SIIT keeps no per-flow state; its only memory is that ICMP fragment bookkeeping, and, with
//! the XDP fast path on, the cache of address pairs whose recipes it handed over
//! ([`fastpath`]: the plain TCP/UDP its lane translates, keyed by addresses and protocol).

pub(crate) mod eam;
pub(crate) mod ext;
pub(crate) mod fastpath;
pub(crate) mod icmp;
pub(crate) mod reply;
pub(crate) mod to4;
pub(crate) mod to6;

use std::collections::VecDeque;

use xlat_wire::field::u16_at;
use xlat_wire::ipv4::proto as ipproto;
use xlat_wire::ipv6::{self, nh};
use xlat_wire::PacketBuf;

use crate::config::{EamHairpin, Prefix4, SiitConfig, XlatParams};
use crate::counters::{Counters, DropReason, Event};
use crate::flow::Proto;
use crate::ipv4_id::Ipv4Ids;
use crate::martian;
use crate::offload::{Pair4, Pair6};
use crate::rfc6052::Pref64;
use crate::{Time, Verdict};

use crate::frag::{self, FragId, FragTable, Pending};
use eam::Eamt;
use reply::RateLimit;
use to4::{In6, Kind6};
use to6::{In4, Kind4};

/// Transport identifiers: ports (TCP, UDP) or the echo identifier (in both `src` and `dst`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ports {
    pub proto: Proto,
    pub src: u16,
    pub dst: u16,
    /// TCP flags (0 otherwise).
    pub flags: u8,
}

/// The addresses and ports a translated packet gets. For ICMP echo `sport` is the
/// identifier (and `dport` equals it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Map<A> {
    pub src: A,
    pub dst: A,
    pub sport: u16,
    pub dport: u16,
}

impl<A> Map<A> {
    /// New addresses, ports kept.
    pub fn keep_ports(src: A, dst: A, ports: Option<&Ports>) -> Map<A> {
        Map {
            src,
            dst,
            sport: ports.map_or(0, |p| p.src),
            dport: ports.map_or(0, |p| p.dst),
        }
    }
}

/// How a translation ended when it did not drop the packet.
pub(crate) enum Done {
    Forward,
    Held,
    /// The packet was replaced by an ICMP error about it (dropped for this reason).
    Reply(DropReason),
}

impl Done {
    pub fn verdict(r: Result<Done, DropReason>) -> Verdict {
        match r {
            Ok(Done::Forward) => Verdict::Forward,
            Ok(Done::Held) => Verdict::Held,
            Ok(Done::Reply(r)) => Verdict::Reply(r),
            Err(r) => Verdict::Drop(r),
        }
    }
}

/// Moves the start of the packet so that what was at offset `old` is at offset `new`.
pub(crate) fn resize_front(buf: &mut PacketBuf, old: usize, new: usize) -> Result<(), DropReason> {
    let ok = if new >= old {
        buf.push_front(new - old)
    } else {
        buf.pull_front(old - new)
    };
    if ok {
        Ok(())
    } else {
        Err(DropReason::NoHeadroom)
    }
}

/// RFC 7915 4.1: splits the IPv6 packet in `buf`, which carries a Fragment header right
/// after the fixed header, into fragments of at most `limit` bytes. The first stays in `buf`;
/// the others are appended to `out`. Returns the number of fragments (0: nothing to split).
pub(crate) fn split6(
    buf: &mut PacketBuf,
    limit: usize,
    out: &mut VecDeque<Vec<u8>>,
) -> Result<u64, DropReason> {
    const HDR: usize = ipv6::HEADER + ipv6::FRAGMENT_HEADER;
    /// Offsets of the payload length and the fragment offset word in the headers.
    const PLEN: usize = ipv6::off::PAYLOAD_LEN;
    const FO: usize = ipv6::HEADER + 2;
    let chunk = (limit.saturating_sub(HDR) / 8) * 8;
    if chunk == 0 || buf.len() <= limit {
        return Ok(0);
    }
    // A fragment's payload length: at most `chunk` bytes after the Fragment header, less than
    // the packet's own (a u16), so it fits.
    let plen =
        |n: usize| u16::try_from(ipv6::FRAGMENT_HEADER + n).map_err(|_| DropReason::Internal);
    let Some((header, payload)) = buf.data().split_first_chunk::<HDR>() else {
        return Ok(0);
    };
    let fo = u16::from_be_bytes([header[FO], header[FO + 1]]);
    let (base, more) = (fo >> 3, fo & 1 != 0);
    let mut n = 1;
    for (k, part) in payload.chunks(chunk).enumerate().skip(1) {
        let last = (k + 1) * chunk >= payload.len();
        let off = base.saturating_add(u16::try_from(k * chunk / 8).unwrap_or(u16::MAX));
        let mut h = *header;
        h[PLEN..PLEN + 2].copy_from_slice(&plen(part.len())?.to_be_bytes());
        h[FO..FO + 2].copy_from_slice(&((off << 3) | u16::from(!last || more)).to_be_bytes());
        let mut p = Vec::with_capacity(HDR + part.len());
        p.extend_from_slice(&h);
        p.extend_from_slice(part);
        out.push_back(p);
        n += 1;
    }
    buf.truncate(HDR + chunk);
    let h = buf
        .data_mut()
        .first_chunk_mut::<HDR>()
        .ok_or(DropReason::Internal)?;
    h[PLEN..PLEN + 2].copy_from_slice(&plen(chunk)?.to_be_bytes());
    h[FO..FO + 2].copy_from_slice(&((base << 3) | 1).to_be_bytes());
    Ok(n)
}

/// Sends an ICMPv4 error about the packet in `buf` in its place, if allowed; else drops.
fn send4(
    buf: &mut PacketBuf,
    own: Option<u32>,
    rate: &mut RateLimit,
    now: Time,
    c: &mut Counters,
    (reason, typ, code, rest): (DropReason, u8, u8, u32),
) -> Result<Done, DropReason> {
    let Some(src) = own else {
        return Err(reason);
    };
    if !rate.allow(now) {
        c.event(Event::IcmpErrorsRateLimited);
        return Err(reason);
    }
    if reply::icmp4_error(buf, src, typ, code, rest) {
        Ok(Done::Reply(reason))
    } else {
        Err(reason)
    }
}

/// Sends an ICMPv6 error about the packet in `buf` in its place, if allowed; else drops.
fn send6(
    buf: &mut PacketBuf,
    own: Option<u128>,
    rate: &mut RateLimit,
    now: Time,
    c: &mut Counters,
    (reason, typ, code, rest): (DropReason, u8, u8, u32),
) -> Result<Done, DropReason> {
    let Some(src) = own else {
        return Err(reason);
    };
    if !rate.allow(now) {
        c.event(Event::IcmpErrorsRateLimited);
        return Err(reason);
    }
    if reply::icmp6_error(buf, src, typ, code, rest) {
        Ok(Done::Reply(reason))
    } else {
        Err(reason)
    }
}

/// RFC 7915 4.4: answers the IPv4 packet in `buf`, discarded for `reason`, with ICMPv4
/// Destination Unreachable `code` from `own` -- when `code` is given, the translator's
/// `unreachable_errors` setting allows it, the buffer still holds the IPv4 packet (not the
/// IPv6 packet a hairpin made of it) and the rate limit has a token; never about an ICMP
/// error, a non-first fragment or a non-unicast source ([`reply::icmp4_error`]). The
/// reason is counted either way.
#[allow(clippy::too_many_arguments)]
pub(crate) fn unreachable4(
    buf: &mut PacketBuf,
    p: &XlatParams,
    own: u32,
    rate: &mut RateLimit,
    now: Time,
    c: &mut Counters,
    reason: DropReason,
    code: Option<u8>,
) -> Result<Done, DropReason> {
    match code {
        Some(code) if p.unreachable_errors && buf.data().first().map(|b| b >> 4) == Some(4) => {
            send4(buf, Some(own), rate, now, c, (reason, 3, code, 0))
        }
        _ => Err(reason),
    }
}

/// RFC 7915 5.4: [`unreachable4`] for an IPv6 packet: ICMPv6 Destination Unreachable `code`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn unreachable6(
    buf: &mut PacketBuf,
    p: &XlatParams,
    own: u128,
    rate: &mut RateLimit,
    now: Time,
    c: &mut Counters,
    reason: DropReason,
    code: Option<u8>,
) -> Result<Done, DropReason> {
    match code {
        Some(code) if p.unreachable_errors && buf.data().first().map(|b| b >> 4) == Some(6) => {
            send6(buf, Some(own), rate, now, c, (reason, 1, code, 0))
        }
        _ => Err(reason),
    }
}

/// RFC 7915 4.4: the ICMPv4 Destination Unreachable code SIIT answers an IPv4 packet it
/// discards for `r` with. An address without an IPv6 form (no EAM entry, outside the pref64 or
/// refused by it, RFC 6052 3.1): code 1, host unreachable (RFC 1812 5.2.7.1: the host cannot
/// be reached through this router; 4.4's default, 13, says a policy refused it, which is not
/// why). Other discards are malformed or untranslatable input that 4.1 - 4.3 drop silently,
/// or router errors sent by [`checks4`].
pub(crate) fn siit_code4(r: DropReason) -> Option<u8> {
    match r {
        DropReason::UntranslatableAddress | DropReason::WellKnownPrefixNonGlobal => Some(1),
        _ => None,
    }
}

/// RFC 7915 5.4: the ICMPv6 Destination Unreachable code for an IPv6 packet SIIT discards:
/// an address without an IPv4 form gets code 3, address unreachable (RFC 4443 3.1: "any other
/// reason for the failure to deliver"), as [`siit_code4`].
pub(crate) fn siit_code6(r: DropReason) -> Option<u8> {
    match r {
        DropReason::UntranslatableAddress | DropReason::WellKnownPrefixNonGlobal => Some(3),
        _ => None,
    }
}

/// RFC 7915 4.1, the translator as a router on the IPv4 side: a martian source or
/// destination (dropped, [`crate::martian`]), an unexpired source route
/// (Source Route Failed), a TTL that runs out (Time Exceeded), a DF packet too big for the
/// next hop once it is IPv6 (Fragmentation Needed with the MTU that fits). `Some` when the
/// packet was answered instead of translated.
pub(crate) fn checks4(
    buf: &mut PacketBuf,
    in4: &In4,
    p: &XlatParams,
    own: Option<u32>,
    rate: &mut RateLimit,
    now: Time,
    c: &mut Counters,
) -> Result<Option<Done>, DropReason> {
    let h = &in4.h;
    if martian::packet4(h.src, h.dst) {
        return Err(DropReason::MartianAddress);
    }
    let is_error = matches!(in4.kind, Kind4::Error(_));
    let frag = if h.is_fragment() {
        ipv6::FRAGMENT_HEADER
    } else {
        0
    };
    let err = if in4.source_route {
        (DropReason::SourceRoute, 3, 5, 0)
    } else if h.ttl <= 1 {
        (DropReason::HopLimitExceeded, 11, 0, 0)
    } else if !is_error
        && h.dont_fragment
        && (ipv6::HEADER + frag + on_wire4(buf, h)) as u64 > u64::from(p.mtu)
    {
        let fits = p
            .mtu
            .saturating_sub(u32::try_from(20 + frag).unwrap_or(u32::MAX))
            .min(0xffff);
        (DropReason::TooBig, 3, 4, fits)
    } else {
        return Ok(None);
    };
    send4(buf, own, rate, now, c, err).map(Some)
}

/// The IPv4 payload of `h`'s packet as its largest segment carries it on the wire: all
/// of it, unless `buf` is a TCP super-packet ([`xlat_wire::vnet`]); MTU decisions are
/// made for the segments, as the kernel makes them (`skb_gso_validate_network_len`).
pub(crate) fn on_wire4(buf: &PacketBuf, h: &xlat_wire::Ipv4Header) -> usize {
    buf.offload()
        .l4_on_wire(buf.data(), h.header_len, h.payload_len())
}

/// RFC 7915 5.1, the translator as a router on the IPv6 side: a martian source or
/// destination (dropped, [`crate::martian`]), a routing header with
/// segments left (Parameter Problem pointing at it), a hop limit that runs out (Time
/// Exceeded), a packet too big for the next hop once it is IPv4 with DF (Packet Too Big).
pub(crate) fn checks6(
    buf: &mut PacketBuf,
    in6: &In6,
    p: &XlatParams,
    own: Option<u128>,
    rate: &mut RateLimit,
    now: Time,
    c: &mut Counters,
) -> Result<Option<Done>, DropReason> {
    let h = &in6.h;
    if martian::packet6(h.src, h.dst) {
        return Err(DropReason::MartianAddress);
    }
    let is_error = matches!(in6.kind, Kind6::Error(_));
    let err = if let Some(at) = h.segments_left_at {
        (
            DropReason::RoutingHeader,
            4,
            0,
            u32::try_from(at).unwrap_or(u32::MAX),
        )
    } else if h.hop_limit <= 1 {
        (DropReason::HopLimitExceeded, 3, 0, 0)
    } else if !is_error
        && !h.is_fragment()
        && (20 + buf.offload().l4_on_wire(buf.data(), h.l4_off, h.l4_len())) as u64
            > u64::from(p.mtu)
    {
        (DropReason::TooBig, 2, 0, p.mtu.saturating_add(20))
    } else {
        return Ok(None);
    };
    send6(buf, own, rate, now, c, err).map(Some)
}

/// The failure to embed `v4` in `pref64`.
fn embed_drop(pref64: &Pref64, v4: u32) -> DropReason {
    if pref64.refuses(v4) {
        DropReason::WellKnownPrefixNonGlobal
    } else {
        DropReason::UntranslatableAddress
    }
}

/// Embeds `v4` in `pref64` (RFC 6052 2.2) or says why not.
pub(crate) fn embed(pref64: &Pref64, v4: u32) -> Result<u128, DropReason> {
    pref64.embed(v4).ok_or_else(|| embed_drop(pref64, v4))
}

/// Extracts the IPv4 address from `a` (RFC 6052 2.3) or says why not.
pub(crate) fn extract(pref64: &Pref64, a: u128) -> Result<u32, DropReason> {
    match pref64.extract(a) {
        Some(v4) => Ok(v4),
        None if pref64.contains(a) => Err(DropReason::WellKnownPrefixNonGlobal),
        None => Err(DropReason::UntranslatableAddress),
    }
}

/// SIIT's address mapping: RFC 7757 3.2 (the EAM table) first, then RFC 6052 (the pref64).
#[derive(Clone, Debug)]
pub(crate) struct AddrMap {
    pref64: Option<Pref64>,
    eamt: Eamt,
}

impl AddrMap {
    fn to6(&self, a: u32) -> Result<u128, DropReason> {
        if let Some(v6) = self.eamt.to6(a) {
            return Ok(v6);
        }
        match &self.pref64 {
            Some(p) => embed(p, a),
            None => Err(DropReason::UntranslatableAddress),
        }
    }

    fn to4(&self, a: u128) -> Result<u32, DropReason> {
        if let Some(v4) = self.eamt.to4(a) {
            return Ok(v4);
        }
        match &self.pref64 {
            Some(p) => extract(p, a),
            None => Err(DropReason::UntranslatableAddress),
        }
    }
}

/// The SIIT translator.
pub struct Siit {
    map: AddrMap,
    pool4: Vec<Prefix4>,
    rfc6791: Option<Prefix4>,
    rfc6791v6: Option<crate::config::Prefix6>,
    eam_hairpin: EamHairpin,
    params: XlatParams,
    frags: FragTable,
    ready: VecDeque<Vec<u8>>,
    rate: RateLimit,
    /// Identifications of the IPv4 packets it makes (RFC 7915 5.1).
    ids: Ipv4Ids,
    /// The pairs handed to the XDP fast path (offload on), [`fastpath`].
    fast: Option<Box<fastpath::FastPath>>,
}

impl Siit {
    pub fn new(cfg: &SiitConfig, limits: &crate::Limits, fragment_timeout: u64, seed: u64) -> Siit {
        Siit {
            map: AddrMap {
                pref64: cfg.prefix,
                eamt: Eamt::new(&cfg.eam),
            },
            pool4: cfg.pool4.clone(),
            rfc6791: cfg.rfc6791,
            rfc6791v6: cfg.rfc6791v6,
            eam_hairpin: cfg.eam_hairpin,
            params: cfg.params,
            frags: FragTable::new(
                limits.max_fragment_flows,
                limits.max_fragments_held,
                fragment_timeout,
            ),
            ready: VecDeque::new(),
            rate: RateLimit::new(),
            ids: Ipv4Ids::new(seed),
            fast: None,
        }
    }

    /// Hands plain TCP/UDP address pairs to a fast path from now on ([`fastpath`]), or stops
    /// (withdrawing what was handed).
    pub fn set_offload(&mut self, on: bool) {
        match (on, self.fast.as_mut()) {
            (true, None) => self.fast = Some(Box::new(fastpath::FastPath::new())),
            (false, Some(f)) => f.clear(),
            _ => {}
        }
    }

    /// Holds every pair off the fast path while `xlat trace` runs, or releases them
    /// ([`fastpath::FastPath::hold`]).
    pub fn hold_offload(&mut self, on: bool) {
        if let Some(f) = self.fast.as_mut() {
            f.hold(on);
        }
    }

    /// The fast path's instructions since the last call ([`fastpath`]).
    pub fn drain_offload(&mut self, out: &mut Vec<crate::offload::OffloadOp>) {
        if let Some(f) = self.fast.as_mut() {
            f.drain(out);
        }
    }

    /// The answer to a `Query` about the recipe in `slot` (see [`fastpath::FastPath::seen`]).
    pub fn offload_seen(
        &mut self,
        now: Time,
        slot: u32,
        fast: Option<Time>,
        c: &mut Counters,
    ) -> bool {
        self.fast
            .as_mut()
            .is_some_and(|f| f.seen(now, slot, fast, c))
    }

    /// Takes a new configuration (a reload, [`crate::reconfigure`]): the pref64, pool4, EAM
    /// table, RFC 6791 pools, hairpin mode and translation parameters. SIIT keeps no state
    /// per flow (RFC 7915), so nothing ends: the next packet is translated by the new
    /// mapping. Held fragments, the error rate limiter and the identification counters stay.
    pub(crate) fn reshape(&mut self, cfg: &SiitConfig) {
        self.map = AddrMap {
            pref64: cfg.prefix,
            eamt: Eamt::new(&cfg.eam),
        };
        self.pool4.clone_from(&cfg.pool4);
        self.rfc6791 = cfg.rfc6791;
        self.rfc6791v6 = cfg.rfc6791v6;
        self.eam_hairpin = cfg.eam_hairpin;
        self.params = cfg.params;
        // The fast path's recipes were made with the old mapping: withdrawn, and made anew
        // by the next packets.
        if let Some(f) = self.fast.as_mut() {
            f.clear();
        }
    }

    /// True for an IPv4 destination SIIT translates: an EAM entry's or siit.pool4's.
    pub fn owns4(&self, a: u32) -> bool {
        self.map.eamt.has4(a) || self.pool4.iter().any(|p| p.contains(a))
    }

    /// True for an IPv6 destination SIIT translates: in an EAM entry or the pref64.
    pub fn owns6(&self, a: u128) -> bool {
        self.map.eamt.has6(a) || self.map.pref64.is_some_and(|p| p.contains(a))
    }

    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Forgets stale fragment state.
    /// When [`Siit::expire`] next has work: a fragment's time is up.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.frags.next_due()
    }

    pub fn expire(&mut self, now: Time, c: &mut Counters) {
        if let Some(f) = self.fast.as_mut() {
            f.expire(now);
        }
        let (held, incomplete) = self.frags.expire(now);
        for _ in 0..held {
            c.drop(DropReason::FragmentNoFirst);
        }
        for _ in 0..incomplete {
            c.drop(DropReason::FragmentIncomplete);
        }
    }

    pub fn fill_stats(&self, st: &mut crate::Stats) {
        st.fragment_flows += self.frags.flows() as u64;
        st.fragments_held += self.frags.held() as u64;
    }

    /// An RFC 6791 address for an ICMPv6 error from `src`, which has no IPv4 form; the same
    /// source always gets the same address.
    fn rfc6791_for(&self, src: u128) -> Option<u32> {
        let p = self.rfc6791?;
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the address's two 64-bit halves, folded"
        )]
        let fold = (src as u64) ^ ((src >> 64) as u64);
        Some(p.nth(fold % p.size()))
    }

    /// An address of `siit.rfc6791v6` for an ICMPv4 error from `src`, which has no IPv6 form;
    /// the same source always gets the same address (its host bits a hash of `src`).
    fn rfc6791v6_for(&self, src: u32) -> Option<u128> {
        let p = self.rfc6791v6?;
        let host = !p.mask();
        let h = u128::from(u64::from(src).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        Some(p.addr | (h & host))
    }

    /// Source of this translator's own ICMPv4 errors: `siit.error_source4`, else the first
    /// RFC 6791 address, else the address the packet was sent to.
    fn own4(&self, dst: u32) -> u32 {
        if let Some(a) = self.params.error_source4 {
            return a;
        }
        self.rfc6791.map_or(dst, |p| p.addr)
    }

    /// Source of this translator's own ICMPv6 errors: `siit.error_source6`, else the pref64
    /// form of the first RFC 6791 address, else the address the packet was sent to.
    fn own6(&self, dst: u128) -> u128 {
        if let Some(a) = self.params.error_source6 {
            return a;
        }
        match (self.rfc6791, self.map.pref64) {
            (Some(r), Some(p)) => p.embed(r.addr).unwrap_or(dst),
            _ => dst,
        }
    }

    /// The IPv6 form of an IPv4 source: by the pref64 alone when `pref` (a hairpinned
    /// packet, RFC 7757 4.3, or every packet in simple mode, 4.2) and a pref64 exists, else
    /// EAM first (RFC 7757 3.2).
    fn src6(&self, a: u32, pref: bool) -> Result<u128, DropReason> {
        match (pref, &self.map.pref64) {
            (true, Some(p)) => embed(p, a),
            _ => self.map.to6(a),
        }
    }

    /// The plain-packet lane of [`crate::Engine::process_batch`]: a TCP or UDP packet that
    /// needs none of the general path's cases is translated straight from its fixed header
    /// ([`Siit::lane6`], [`Siit::lane4`]), with the same header writers and checksum
    /// adjustment as NAT64's lane ([`crate::offload`]). `None`, with nothing changed, sends
    /// it to [`Siit::process6`] / [`Siit::process4`]; where the lane answers, output and
    /// counters are theirs (`lane_tests` compares them byte for byte).
    #[inline]
    pub fn lane(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Option<Verdict> {
        match buf.data().first().map(|b| b >> 4) {
            Some(6) => self.lane6(now, buf, c),
            Some(4) => self.lane4(now, buf, c),
            _ => None,
        }
    }

    /// IPv6 -> IPv4 for a packet whose 40-byte header is followed straight by TCP or UDP
    /// (RFC 7915 5.1, 5.5): the whole transport header present, hop limit above 1, small
    /// enough for the next hop as IPv4 with DF (else Packet Too Big, 5.1), both addresses
    /// mapped (EAM, then pref64: RFC 7757 3.2, RFC 6052 2.3), no martian among them
    /// ([`crate::martian`]) and not a hairpin (RFC 7757 4).
    #[inline]
    fn lane6(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Option<Verdict> {
        use crate::rewrite::{self, Tuple4, Tuple6};
        use xlat_wire::ipv6::{addr_at, off, HEADER};
        let d = buf.data();
        let (Some(first), Some(plen), Some(next), Some(hop), Some(src6), Some(dst6)) = (
            d.first().copied(),
            u16_at(d, off::PAYLOAD_LEN),
            d.get(off::NEXT_HEADER).copied(),
            d.get(off::HOP_LIMIT).copied(),
            addr_at(d, off::SRC),
            addr_at(d, off::DST),
        ) else {
            return None;
        };
        let plen = usize::from(plen);
        let need = match next {
            nh::TCP => xlat_wire::l4::tcp::NEEDED,
            nh::UDP => xlat_wire::l4::udp::HEADER,
            _ => return None,
        };
        let total4 = xlat_wire::ipv4::MIN_HEADER + plen;
        if first >> 4 != 6
            || HEADER + plen > d.len()
            || plen < need
            || hop <= 1
            || total4 as u64 > u64::from(self.params.mtu).min(0xffff)
        {
            return None;
        }
        let (Ok(src4), Ok(dst4)) = (self.map.to4(src6), self.map.to4(dst6)) else {
            return None;
        };
        if martian::packet6(src6, dst6) || martian::packet4(src4, dst4) {
            return None;
        }
        if self.owns4(dst4) && !self.map.eamt.has6(dst6) {
            return None;
        }
        let (Some(sport), Some(dport)) = (u16_at(d, HEADER), u16_at(d, HEADER + 2)) else {
            return None;
        };
        let tc = ((first & 0x0f) << 4) | d.get(1).map_or(0, |b| b >> 4);
        let key = Tuple6 {
            proto: next,
            src: src6,
            dst: dst6,
            sport,
            dport,
        };
        let new = Tuple4 {
            proto: next,
            src: src4,
            dst: dst4,
            sport,
            dport,
        };
        if let Err(e) = rewrite::lane_6to4(buf, plen, tc, hop - 1, &key, &new, &mut self.ids) {
            return Some(Verdict::Drop(e));
        }
        c.event(Event::Ipv6ToIpv4);
        if let Some(f) = self.fast.as_mut() {
            // Everything checked above about the addresses holds for every packet of the
            // pair; what depends on the packet, the fast path checks itself.
            let ids = &self.ids;
            let mtu = u16::try_from(self.params.mtu).unwrap_or(u16::MAX);
            f.seen6(
                now,
                Pair6 {
                    proto: next,
                    src: src6,
                    dst: dst6,
                },
                Pair4 {
                    proto: next,
                    src: src4,
                    dst: dst4,
                },
                || ids.recipe(src4, dst4, next),
                mtu,
                c,
            );
        }
        Some(Verdict::Forward)
    }

    /// IPv4 -> IPv6 for a packet without options or fragmentation carrying TCP or UDP (RFC
    /// 7915 4.1, 4.5): header checksum good (RFC 1812 5.2.2), the whole transport header
    /// present, TTL above 1, a UDP checksum present (a zero one is computed by the general
    /// path, 4.5), the IPv6 packet within the lowest IPv6 MTU and the next hop's (else
    /// fragmentation or Fragmentation Needed, 4.1), no martian address ([`crate::martian`]),
    /// both addresses mapped (EAM, then pref64: RFC 7757 3.2, RFC 6052 2.2; the source by the
    /// pref64 alone in simple hairpinning mode, 4.2) and 20 bytes of headroom for the longer
    /// header.
    #[inline]
    fn lane4(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Option<Verdict> {
        use crate::rewrite::{self, Tuple4, Tuple6};
        use xlat_wire::ipv4::MIN_HEADER;
        let d = buf.data();
        let h: &[u8; MIN_HEADER] = d.first_chunk()?;
        let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let (tos, ttl, proto) = (h[1], h[8], h[9]);
        let (need, ck_at) = match proto {
            ipproto::TCP => (xlat_wire::l4::tcp::NEEDED, xlat_wire::l4::tcp::CHECKSUM),
            ipproto::UDP => (xlat_wire::l4::udp::HEADER, xlat_wire::l4::udp::CHECKSUM),
            _ => return None,
        };
        let payload = total.saturating_sub(MIN_HEADER);
        let limit = self.params.lowest_ipv6_mtu.min(self.params.mtu);
        let grow = ipv6::HEADER - MIN_HEADER;
        // Version 4, IHL 5; MF clear and offset 0 (DF either way: the packet fits).
        if h[0] != 0x45
            || u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0
            || total > d.len()
            || payload < need
            || ttl <= 1
            || (ipv6::HEADER + payload) as u64 > u64::from(limit)
            || buf.head() < grow
            || u16_at(d, MIN_HEADER + ck_at).is_none_or(|ck| ck == 0 && proto == ipproto::UDP)
            || !xlat_wire::checksum::header_verifies(h)
        {
            return None;
        }
        let src4 = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        let dst4 = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
        if martian::packet4(src4, dst4) {
            return None;
        }
        let simple = self.eam_hairpin == EamHairpin::Simple;
        let (Ok(src6), Ok(dst6)) = (self.src6(src4, simple), self.map.to6(dst4)) else {
            return None;
        };
        let (Some(sport), Some(dport)) = (u16_at(d, MIN_HEADER), u16_at(d, MIN_HEADER + 2)) else {
            return None;
        };
        let key = Tuple4 {
            proto,
            src: src4,
            dst: dst4,
            sport,
            dport,
        };
        let new = Tuple6 {
            proto,
            src: src6,
            dst: dst6,
            sport,
            dport,
        };
        if let Err(e) = rewrite::lane_4to6(buf, total, tos, ttl - 1, &key, &new) {
            return Some(Verdict::Drop(e));
        }
        c.event(Event::Ipv4ToIpv6);
        if let Some(f) = self.fast.as_mut() {
            // The lane took only what fits the lower limit; the fast path takes DF packets up
            // to the next hop's MTU, as the general path translates them (RFC 7915 4.1).
            let mtu = (
                u16::try_from(limit).unwrap_or(u16::MAX),
                u16::try_from(self.params.mtu).unwrap_or(u16::MAX),
            );
            f.seen4(
                now,
                Pair4 {
                    proto,
                    src: src4,
                    dst: dst4,
                },
                Pair6 {
                    proto,
                    src: src6,
                    dst: dst6,
                },
                mtu,
                c,
            );
        }
        Some(Verdict::Forward)
    }

    /// An IPv4 packet to an EAM or pool4 address: to IPv6 (RFC 7915 4); a discarded one
    /// answered as 4.4 says ([`siit_code4`]).
    pub fn process4(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        let r = match self.translate4(now, buf, c, true) {
            Err(reason) => {
                let dst = xlat_wire::field::u32_at(buf.data(), 16).unwrap_or(0);
                let own = self.own4(dst);
                let code = siit_code4(reason);
                let p = self.params;
                unreachable4(buf, &p, own, &mut self.rate, now, c, reason, code)
            }
            ok => ok,
        };
        Done::verdict(r)
    }

    /// An IPv6 packet to the pref64 or an EAM address: to IPv4 (RFC 7915 5); a discarded one
    /// answered as 5.4 says ([`siit_code6`]).
    pub fn process6(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        let r = match self.translate6(now, buf, c) {
            Err(reason) => {
                let dst = ipv6::addr_at(buf.data(), ipv6::off::DST).unwrap_or(0);
                let own = self.own6(dst);
                let code = siit_code6(reason);
                let p = self.params;
                unreachable6(buf, &p, own, &mut self.rate, now, c, reason, code)
            }
            ok => ok,
        };
        Done::verdict(r)
    }

    fn translate4(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        decrement: bool,
    ) -> Result<Done, DropReason> {
        let in4 = to6::parse(buf.data(), true, &self.params)?;
        let h = in4.h;
        buf.truncate(h.total_len);
        if decrement {
            let own = Some(self.own4(h.dst));
            if let Some(d) = checks4(buf, &in4, &self.params, own, &mut self.rate, now, c)? {
                return Ok(d);
            }
        }
        // RFC 7915 4.1 (addresses per RFC 7757 3.2 / RFC 6052 2.2). An ICMP error's source
        // is translated whatever it is, for troubleshooting (4.1). RFC 7757 4: a hairpinned
        // packet's source (4.3, intrinsic), or every IPv4 source (4.2, simple), takes its
        // pref64 form even when an EAM entry covers it, so that the answer comes back through
        // the translator to the address the sender used; an error's source only when it is
        // the node the quoted packet was sent to, and the quoted packet's destination -- the
        // address its sender used -- likewise.
        let pref = !decrement || self.eam_hairpin == EamHairpin::Simple;
        let (m, inner) = match &in4.kind {
            Kind4::Error(e) => (
                // An error from an IPv4 router with no IPv6 form gets a source from
                // `siit.rfc6791v6` (RFC 6791's rule, the other way), if set.
                Map::keep_ports(
                    match self.src6(h.src, pref && h.src == e.inner.dst) {
                        Ok(a) => a,
                        Err(r) => self.rfc6791v6_for(h.src).ok_or(r)?,
                    },
                    self.map.to6(h.dst)?,
                    None,
                ),
                Some(Map::keep_ports(
                    self.map.to6(e.inner.src)?,
                    self.src6(e.inner.dst, pref)?,
                    e.inner_ports.as_ref(),
                )),
            ),
            Kind4::Flow(p) => (
                Map::keep_ports(self.src6(h.src, pref)?, self.map.to6(h.dst)?, Some(p)),
                None,
            ),
            Kind4::Other => (
                Map::keep_ports(self.src6(h.src, pref)?, self.map.to6(h.dst)?, None),
                None,
            ),
        };
        let em = to6::emit(buf, &in4, &m, inner.as_ref(), &self.params, decrement)?;
        c.event(Event::Ipv4ToIpv6);
        if em.udp_checksum_computed {
            c.event(Event::UdpChecksumsComputed);
        }
        if matches!(in4.kind, Kind4::Error(_)) {
            c.event(Event::IcmpErrorsTranslated);
        }
        if h.is_fragment() {
            c.event(Event::Fragments);
        }
        // RFC 7915 4.2: a later fragment of an ICMP message tells its length to the held
        // first fragment.
        if h.is_later_fragment() && h.proto == ipproto::ICMP {
            let l = self.frags.later4(&h, now, true);
            self.ready.extend(l.released);
        }
        finish6(buf, &em, &h, None, &mut self.frags, &mut self.ready, now, c)
    }

    fn translate6(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
    ) -> Result<Done, DropReason> {
        let in6 = to4::parse(buf.data(), &self.params)?;
        let h = in6.h;
        buf.truncate(h.total_len());
        let own = Some(self.own6(h.dst));
        if let Some(d) = checks6(buf, &in6, &self.params, own, &mut self.rate, now, c)? {
            return Ok(d);
        }
        let (m, inner) = match &in6.kind {
            Kind6::Error(e) => {
                // RFC 6791: an ICMPv6 error from a node without an IPv4 form (a router on
                // the IPv6 side) gets a source from the RFC 6791 pool.
                let src = match self.map.to4(h.src) {
                    Ok(a) => a,
                    Err(r) => self.rfc6791_for(h.src).ok_or(r)?,
                };
                (
                    Map::keep_ports(src, self.map.to4(h.dst)?, None),
                    Some(Map::keep_ports(
                        self.map.to4(e.inner.src)?,
                        self.map.to4(e.inner.dst)?,
                        e.inner_ports.as_ref(),
                    )),
                )
            }
            Kind6::Flow(p) => (
                Map::keep_ports(self.map.to4(h.src)?, self.map.to4(h.dst)?, Some(p)),
                None,
            ),
            Kind6::Other => (
                Map::keep_ports(self.map.to4(h.src)?, self.map.to4(h.dst)?, None),
                None,
            ),
        };
        // The IPv4 forms must not be martians either (an EAM or pref64 that maps to one).
        if martian::packet4(m.src, m.dst) {
            return Err(DropReason::MartianAddress);
        }
        let em = to4::emit(buf, &in6, &m, inner.as_ref(), true, &mut self.ids)?;
        c.event(Event::Ipv6ToIpv4);
        if matches!(in6.kind, Kind6::Error(_)) {
            c.event(Event::IcmpErrorsTranslated);
        }
        if let (Some(key), Some(f)) = (FragId::of6(&h), h.frag) {
            c.event(Event::Fragments);
            if h.is_later_fragment() && h.proto == nh::ICMPV6 {
                let l = self
                    .frags
                    .later(key, f.offset, h.l4_len(), f.more, now, true);
                self.ready.extend(l.released);
            }
            let done = finish4(
                buf,
                em.icmp_len_pending,
                &h,
                None,
                &mut self.frags,
                &mut self.ready,
                now,
                c,
            )?;
            if !matches!(done, Done::Forward) {
                return Ok(done);
            }
        }
        // RFC 7915 1.3 / RFC 7757 4.3: an IPv6 node addressing another by the pref64 form of
        // its IPv4 address (hairpinning): the packet goes back to IPv6 at once -- always for
        // a pool4 (IPv4-translatable) address, for an EAM address in intrinsic mode only (in
        // simple mode, 4.2, it leaves as IPv4 and the IPv4 routes bring it back; off: it just
        // leaves). A destination reached through an EAM entry's IPv6 prefix is an IPv4-side
        // host: no hairpin.
        let eam_dst = self.map.eamt.has4(m.dst);
        let back = if eam_dst {
            self.eam_hairpin == EamHairpin::Intrinsic
        } else {
            self.pool4.iter().any(|p| p.contains(m.dst))
        };
        if back && !self.map.eamt.has6(h.dst) {
            return self.translate4(now, buf, c, false);
        }
        Ok(Done::Forward)
    }
}

/// After an IPv4 -> IPv6 emit: splits an oversized packet without DF (RFC 7915 4.1), and for
/// a first fragment records its translation (`rewrite`, NAT64) or, for an ICMP message,
/// holds it until the message length is known (the pieces after the first leave at once).
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish6(
    buf: &mut PacketBuf,
    em: &to6::Emitted6,
    h: &xlat_wire::Ipv4Header,
    rewrite: Option<frag::Rewrite>,
    frags: &mut FragTable,
    ready: &mut VecDeque<Vec<u8>>,
    now: Time,
    c: &mut Counters,
) -> Result<Done, DropReason> {
    let mut extra = VecDeque::new();
    if let Some(limit) = em.split {
        let n = split6(buf, limit, &mut extra)?;
        c.add(Event::FragmentsCreated, n);
    }
    let first = h.more_fragments && h.frag_offset == 0;
    let mut done = Done::Forward;
    if first {
        if let Some(ck) = em.icmp_len_pending {
            let pending = Pending {
                data: buf.data().to_vec(),
                cksum_at: ck,
                add: true,
            };
            ready.extend(frags.first(
                FragId::of4(h),
                rewrite,
                h.payload_len(),
                Some(pending),
                now,
            )?);
            c.event(Event::FragmentsHeld);
            done = Done::Held;
        } else if rewrite.is_some() {
            frags.first(FragId::of4(h), rewrite, h.payload_len(), None, now)?;
        }
    }
    ready.extend(extra);
    Ok(done)
}

/// After an IPv6 -> IPv4 emit of a first fragment: the bookkeeping of [`finish6`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish4(
    buf: &mut PacketBuf,
    pending_at: Option<usize>,
    h: &xlat_wire::Ipv6Header,
    rewrite: Option<frag::Rewrite>,
    frags: &mut FragTable,
    ready: &mut VecDeque<Vec<u8>>,
    now: Time,
    c: &mut Counters,
) -> Result<Done, DropReason> {
    let (Some(key), true) = (FragId::of6(h), h.more_fragments() && !h.is_later_fragment()) else {
        return Ok(Done::Forward);
    };
    if let Some(ck) = pending_at {
        let pending = Pending {
            data: buf.data().to_vec(),
            cksum_at: ck,
            add: false,
        };
        ready.extend(frags.first(key, rewrite, h.l4_len(), Some(pending), now)?);
        c.event(Event::FragmentsHeld);
        return Ok(Done::Held);
    }
    if rewrite.is_some() {
        frags.first(key, rewrite, h.l4_len(), None, now)?;
    }
    Ok(Done::Forward)
}
