//! Stateful NAT64 (RFC 6146): IPv6 hosts reach IPv4 hosts through the pref64 (RFC 6052),
//! sharing the pool4 addresses by BIB and session tables.
//!
//! The packet path follows RFC 6146 3's steps, each returning `Result<_, DropReason>`:
//!
//! - 3.4, determining the incoming tuple: [`crate::siit::to4::parse`] /
//!   [`crate::siit::to6::parse`] read the transport identifiers (ports, ICMP identifier, the
//!   tuple of the packet an ICMP error quotes); non-first fragments take their first
//!   fragment's translation, held until it comes when they are early.
//! - 3.5, filtering and updating binding and session information: [`Napt`] (shared with
//!   NAT44): endpoint-independent mapping (3.5.1, 3.5.2, 3.5.3), the filtering policy,
//!   the TCP state machine of 3.5.2.2 and the timeouts of section 4.
//! - 3.6, computing the outgoing tuple: the destination's IPv4 address comes out of the
//!   pref64 (IPv6 -> IPv4); the source's pref64 form goes in (IPv4 -> IPv6).
//! - 3.7, translating the packet: the SIIT code, RFC 7915 ([`crate::siit`]), including its
//!   own ICMP errors for hop limit and MTU.
//! - 3.8, hairpinning: an IPv6 host addressing the pref64 form of a pool4 address gets its
//!   packet translated out and straight back in.
//!
//! Deviation (docs/RFC-COMPLIANCE.md): an inbound TCP SYN without a BIB entry, or one the
//! filtering policy does not admit, is dropped at once instead of being held 6 s for a
//! simultaneous open (3.5.2.2); it is counted as `no_mapping` / `filtered`.

use std::collections::VecDeque;

use xlat_wire::{PacketBuf, HEADROOM};

use crate::config::{Nat44Mode, Nat64Config, XlatParams};
use crate::counters::{Counters, DropReason, Event};
use crate::flow::{Endpoint, FlowKey, Proto};
use crate::frag::{earliest, FragId, FragTable, Rewrite};
use crate::ipv4_id::Ipv4Ids;
use crate::martian;
use crate::napt::{Napt, NaptConfig, NO_CAND};
use crate::offload::{self, OffloadKind, OffloadOp};
use crate::rewrite;
use crate::rfc6052::Pref64;
use crate::siit::reply::RateLimit;
use crate::siit::to4::{self, Kind6};
use crate::siit::to6::{self, Kind4};
use crate::siit::{checks4, checks6, embed, extract, finish4, finish6, Done, Map};
use crate::snapshot::{SessionFilter, SessionInfo, Stats};
use crate::{Time, Verdict};
use xlat_wire::field::{u16_at, u32_at, u8_at};

/// What batch stage 1 learned about a NAT64 packet: its session-index key and hash, and
/// whether it may take the established-flow lane ([`Nat64::lane`]).
#[derive(Clone, Copy, Debug)]
pub struct Lane64 {
    key: FlowKey<u128>,
    hash: u64,
    /// The index entry stage 2 found under `hash` ([`Napt::prefetch_session`]).
    cand: u32,
    /// TCP or UDP right after a 40- or 20-byte header (no extension headers or options),
    /// not a fragment, no SYN/FIN/RST.
    fast: bool,
}

/// Is `pkt` plain enough for the lane (see [`Lane64::fast`])? The lane still parses it
/// fully; this only keeps control segments, fragments and ICMP on the full path.
fn plain(pkt: &[u8], v6: bool) -> bool {
    use xlat_wire::ipv4::{off as ip4, proto as ipproto};
    let (proto, l4) = if v6 {
        (
            u8_at(pkt, xlat_wire::ipv6::off::NEXT_HEADER),
            xlat_wire::ipv6::HEADER,
        )
    } else {
        // IHL 5, MF clear, offset 0 (RFC 6146 3.4: fragments take the full path).
        if u8_at(pkt, 0) != Some(0x45)
            || u16_at(pkt, ip4::FLAGS_FRAG).is_none_or(|f| f & 0x3fff != 0)
        {
            return false;
        }
        (u8_at(pkt, ip4::PROTO), xlat_wire::ipv4::MIN_HEADER)
    };
    match proto {
        Some(ipproto::UDP) => true,
        // RFC 6146 3.5.2.2: SYN, FIN and RST drive the state machine: the full path.
        Some(ipproto::TCP) => u8_at(pkt, l4 + xlat_wire::l4::tcp::FLAGS)
            .is_some_and(|f| f & (crate::tcp::SYN | crate::tcp::FIN | crate::tcp::RST) == 0),
        _ => false,
    }
}

/// What the lane's dedicated rewrite ([`Nat64::rewrite64`], [`Nat64::rewrite46`]) did.
enum Plain {
    /// Translated (the session refreshed or made), or dropped for the reason the full path
    /// would give.
    Done(Verdict),
    /// Not plain enough: nothing changed, the general lane runs.
    Not,
}

/// The full path's result (no lane: never `Ok(None)`).
fn full(r: Result<Option<Done>, DropReason>) -> Result<Done, DropReason> {
    // `Ok(None)` only comes from a lane miss; without a lane it cannot happen.
    r.and_then(|d| d.ok_or(DropReason::Internal))
}

/// The NAT64 translator.
pub struct Nat64 {
    prefix: Pref64,
    napt: Napt<u128>,
    params: XlatParams,
    verify_ip_checksum: bool,
    frags: FragTable,
    ready: VecDeque<Vec<u8>>,
    rate: RateLimit,
    /// Source of the translator's own ICMPv4 errors: `nat64.error_source4`, else the first
    /// pool4 address.
    own4: u32,
    /// Source of its own ICMPv6 errors: `nat64.error_source6`, else the pref64 form of the
    /// first pool4 address.
    own6: Option<u128>,
    /// Identifications of the IPv4 packets it makes (RFC 7915 5.1).
    ids: Ipv4Ids,
    /// The FTP ALG of RFC 6384 (`alg = ["ftp"]`), if on ([`crate::alg`]).
    ftp: Option<Box<crate::alg::FtpAlg>>,
    /// Packets the lane's dedicated rewrite translated (tests check it ran).
    #[cfg(test)]
    pub(crate) rewrites: u64,
}

impl Nat64 {
    pub fn new(cfg: &Nat64Config, seed: u64) -> Nat64 {
        let mut n = Nat64 {
            prefix: cfg.prefix,
            napt: Napt::new(
                NaptConfig {
                    mode: Nat44Mode::Napt,
                    filtering: cfg.filtering,
                    ports: cfg.ports,
                    timeouts: cfg.timeouts,
                    limits: cfg.limits,
                    inbound_refresh: cfg.inbound_refresh,
                    det: cfg.deterministic_map(),
                },
                &cfg.pool4,
                seed,
            ),
            params: cfg.params,
            verify_ip_checksum: cfg.verify_ip_checksum,
            frags: FragTable::new(
                cfg.limits.max_fragment_flows,
                cfg.limits.max_fragments_held,
                cfg.timeouts.fragment,
            ),
            ready: VecDeque::new(),
            rate: RateLimit::new(),
            own4: cfg
                .params
                .error_source4
                .unwrap_or_else(|| cfg.pool4.first().map_or(0, |p| p.addr)),
            own6: cfg
                .params
                .error_source6
                .or_else(|| cfg.pool4.first().and_then(|p| cfg.prefix.embed(p.addr))),
            ids: Ipv4Ids::new(seed),
            ftp: cfg.alg_ftp.then(|| Box::new(crate::alg::FtpAlg::new(true))),
            #[cfg(test)]
            rewrites: 0,
        };
        n.napt.set_forwards(&cfg.static_bib);
        if n.ftp.is_some() {
            n.napt.set_alg_port(crate::alg::FTP_PORT);
        }
        n
    }

    /// True for an IPv4 destination in pool4.
    pub fn owns4(&self, a: u32) -> bool {
        self.napt.is_pool(a)
    }

    /// True for an IPv6 destination in the pref64.
    pub fn owns6(&self, a: u128) -> bool {
        self.prefix.contains(a)
    }

    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Lets sessions be handed to a fast path ([`crate::offload`]).
    pub fn set_offload(&mut self, on: bool) {
        self.napt.set_offload(on);
    }

    /// See [`crate::Engine::set_offload_after`].
    pub fn set_offload_after(&mut self, packets: u8) {
        self.napt.set_offload_after(packets);
    }

    /// See [`crate::Engine::hold_offload`].
    pub fn hold_offload(&mut self, now: Time, f: Option<SessionFilter>) -> u64 {
        self.napt.hold_offload(now, f)
    }

    /// Applies the live-changeable settings ([`crate::reconfigure`]).
    pub(crate) fn set_live(&mut self, l: crate::reconfigure::Live) {
        self.napt.set_live(l);
    }

    /// Takes a new configuration [`crate::reconfigure`] checked: its pref64, pool4 and
    /// static BIB entries, ending the sessions they no longer allow (`napt/repool.rs`). A
    /// new pref64 ends every session: each names its IPv6 peers by the old one (RFC 6052 2.2),
    /// whose addresses no longer reach this translator. Returns how many ended.
    pub(crate) fn reshape(&mut self, now: Time, cfg: &Nat64Config) -> u64 {
        let mut ended = 0;
        if cfg.prefix != self.prefix {
            ended += self.napt.end_all(now, crate::events::EndReason::Reload);
            self.prefix = cfg.prefix;
        }
        ended += self.napt.repool(now, &cfg.pool4, &cfg.static_bib, |_| true);
        // Only the own-error settings differ here ([`crate::reconfigure`] refuses the rest).
        self.params = cfg.params;
        self.own4 = cfg.pool4.first().map_or(0, |p| p.addr);
        ended
    }

    /// Starts (`capacity` > 0) or stops the state-event stream ([`crate::events`]).
    pub fn set_events(&mut self, capacity: usize) {
        self.napt.set_events(capacity);
    }

    /// Appends the state events since the last call; returns those dropped since.
    pub fn drain_events(&mut self, out: &mut Vec<crate::events::StateEvent>) -> u64 {
        self.napt.drain_events(out)
    }

    /// The NAT64 recipes of a session's fast-path event ([`crate::events`]); `token` is
    /// the session id with [`offload::TOKEN_NAT64`] set.
    pub fn offload_op(
        &self,
        ev: &crate::events::StateEvent,
        kind: OffloadKind,
    ) -> Option<OffloadOp> {
        let std::net::IpAddr::V6(inside) = ev.inside else {
            return None;
        };
        let limit = self.params.lowest_ipv6_mtu.min(self.params.mtu);
        let mtu_limit = u16::try_from(limit).unwrap_or(u16::MAX);
        // RFC 6052 2.2: the remote's pref64 form; pool4 and the pref64 are checked at
        // configuration, so this only fails for a remote no session could have.
        let remote6 = self.prefix.embed(u32::from(ev.remote))?;
        let (o, i) = offload::nat64_recipes(
            ev.proto,
            Endpoint {
                addr: u128::from(inside),
                port: ev.inside_port,
            },
            Endpoint {
                addr: u32::from(ev.outside),
                port: ev.outside_port,
            },
            Endpoint {
                addr: u32::from(ev.remote),
                port: ev.remote_port,
            },
            remote6,
            mtu_limit,
            self.ids.recipe(
                u32::from(ev.outside),
                u32::from(ev.remote),
                rewrite::ip_proto(ev.proto),
            ),
        );
        Some(OffloadOp {
            kind,
            token: offload::TOKEN_NAT64 | u64::from(ev.session?),
            recipes: offload::Recipes::Nat64 { out: o, inb: i },
        })
    }

    /// See [`crate::napt::Napt::offload_seen`].
    pub fn offload_seen(
        &mut self,
        now: Time,
        sid: u32,
        out_seen: Option<Time>,
        in_seen: Option<Time>,
        c: &mut Counters,
    ) -> bool {
        self.napt.offload_seen(now, sid, out_seen, in_seen, c)
    }

    /// When [`Nat64::expire`] next has work ([`crate::Engine::poll_timeout`]).
    pub fn poll_timeout(&self, now: Time) -> Option<Time> {
        let ftp = self.ftp.as_ref().is_some_and(|f| f.controls() > 0);
        let sweep = (self.napt.needs_sweep() || ftp).then(|| crate::sweep_after(now));
        earliest(sweep, self.frags.next_due())
    }

    /// Whether [`crate::Engine::expire_step`] should sweep this translator now (see
    /// `Napt::wants_expiry_step`).
    pub fn wants_expiry_step(&self, now: Time) -> bool {
        self.napt.wants_expiry_step(now)
    }

    /// Removes idle sessions (up to `budget` slots looked at) and stale fragment state.
    pub fn expire(&mut self, now: Time, budget: usize, c: &mut Counters) -> usize {
        let (held, incomplete) = self.frags.expire(now);
        for _ in 0..held {
            c.drop(DropReason::FragmentNoFirst);
        }
        for _ in 0..incomplete {
            c.drop(DropReason::FragmentIncomplete);
        }
        if let Some(ftp) = &mut self.ftp {
            ftp.expire(now, self.napt.tcp_established());
            self.napt.expire_expects(now);
        }
        self.napt.expire(now, budget, c)
    }

    /// The live sessions: inside = the IPv6 host, outside = its pool4 transport address,
    /// remote = the IPv4 host (its pref64 form in `remote6`).
    /// Appends the live sessions `f` takes, at most `limit`.
    pub fn sessions(&self, now: Time, f: &SessionFilter, limit: usize, out: &mut Vec<SessionInfo>) {
        self.napt.sessions(now, f, limit, out);
    }

    /// A page of the live sessions `f` takes (see [`crate::Engine::sessions_page`]).
    pub fn sessions_page(
        &self,
        now: Time,
        f: &SessionFilter,
        from: u32,
        budget: (usize, usize),
        out: &mut Vec<SessionInfo>,
    ) -> Option<u32> {
        self.napt.sessions_page(now, f, from, budget, out)
    }

    /// Removes the sessions `f` takes; returns how many.
    pub fn clear(&mut self, now: Time, f: &SessionFilter) -> u64 {
        self.napt.clear(now, f)
    }

    /// See [`crate::napt::Napt::end_some`].
    pub fn end_some(&mut self, now: Time, reason: crate::events::EndReason, max: usize) -> u64 {
        self.napt.end_some(now, reason, max)
    }

    /// Its NAPT state, for sessions synced from another gateway ([`crate::synced`]).
    pub(crate) fn napt_mut(&mut self) -> &mut Napt<u128> {
        &mut self.napt
    }

    /// The pref64 form (RFC 6052) of an IPv4 remote, as the IPv6 side addresses it.
    pub fn remote6(&self, remote: std::net::Ipv4Addr) -> Option<std::net::Ipv6Addr> {
        self.prefix
            .embed(u32::from(remote))
            .map(std::net::Ipv6Addr::from)
    }

    pub fn fill_stats(&self, st: &mut Stats) {
        self.napt.fill_stats(st);
        st.fragment_flows += self.frags.flows() as u64;
        st.fragments_held += self.frags.held() as u64;
    }

    /// The translator's own IPv6 address (for its ICMPv6 errors): `nat64.error_source6`,
    /// else the pref64 form of the first pool4 address.
    fn own6(&self) -> Option<u128> {
        self.own6
    }

    /// The session-index key an IPv6 -> IPv4 packet would look up, if it is an unfragmented
    /// TCP/UDP/ICMPv6-echo packet with no extension headers and a pref64 destination (for
    /// batch prefetching only: a wrong or missing key costs a useless or missed prefetch,
    /// the real work re-derives everything).
    fn flow_key6(&self, pkt: &[u8]) -> Option<FlowKey<u128>> {
        use xlat_wire::ipv6::{addr_at, nh, off, HEADER};
        let proto = match u8_at(pkt, off::NEXT_HEADER)? {
            nh::TCP => Proto::Tcp,
            nh::UDP => Proto::Udp,
            nh::ICMPV6 if matches!(u8_at(pkt, HEADER)?, 128 | 129) => Proto::Icmp,
            _ => return None,
        };
        let src = addr_at(pkt, off::SRC)?;
        let dst4 = self.prefix.extract(addr_at(pkt, off::DST)?)?;
        let (sport, dport) = match proto {
            Proto::Icmp => {
                let id = u16_at(pkt, HEADER + 4)?;
                (id, 0)
            }
            _ => (u16_at(pkt, HEADER)?, u16_at(pkt, HEADER + 2)?),
        };
        Some(FlowKey::Out(
            proto,
            Endpoint {
                addr: src,
                port: sport,
            },
            Endpoint {
                addr: dst4,
                port: dport,
            },
        ))
    }

    /// The session-index key an IPv4 -> IPv6 packet would look up (the outside tuple), if it
    /// is a TCP/UDP/ICMP-echo packet that is not a later fragment; for prefetching only.
    fn flow_key4(&self, pkt: &[u8]) -> Option<FlowKey<u128>> {
        use xlat_wire::ipv4::{off, proto as ipproto};
        let ihl = usize::from(u8_at(pkt, 0)? & 0x0f) * 4;
        if u16_at(pkt, 6)? & 0x1fff != 0 {
            return None;
        }
        let proto = match u8_at(pkt, off::PROTO)? {
            ipproto::TCP => Proto::Tcp,
            ipproto::UDP => Proto::Udp,
            ipproto::ICMP if matches!(u8_at(pkt, ihl)?, 0 | 8) => Proto::Icmp,
            _ => return None,
        };
        let src = u32_at(pkt, off::SRC)?;
        let dst = u32_at(pkt, off::DST)?;
        let (sport, dport) = match proto {
            Proto::Icmp => (0, u16_at(pkt, ihl + 4)?),
            _ => (u16_at(pkt, ihl)?, u16_at(pkt, ihl + 2)?),
        };
        Some(FlowKey::In(
            proto,
            Endpoint {
                addr: dst,
                port: dport,
            },
            Endpoint {
                addr: src,
                port: sport,
            },
        ))
    }

    /// See [`crate::napt::Napt::set_ranges`].
    pub fn set_ranges(&mut self, ports: (u16, u16), icmp_ids: (u16, u16)) {
        self.napt.set_ranges(ports, icmp_ids);
    }

    /// Batch stage 1: plans `pkt` (IPv6 -> IPv4 when `v6`, else IPv4 -> IPv6; see
    /// [`Lane64`]) and starts fetching the index slot it will probe.
    #[inline(always)]
    pub fn plan(&self, pkt: &[u8], v6: bool) -> Option<Lane64> {
        let key = if v6 {
            self.flow_key6(pkt)?
        } else {
            self.flow_key4(pkt)?
        };
        Some(Lane64 {
            key,
            hash: self.napt.prefetch_index(&key),
            cand: NO_CAND,
            // With the FTP ALG on, its control connections take the full path.
            fast: plain(pkt, v6) && !(self.ftp.is_some() && crate::alg::is_control_key(&key)),
        })
    }

    /// Batch stage 2: starts fetching the session behind a stage-1 plan; false when the
    /// index has no candidate for it. The batch path uses [`Nat64::prefetch_lane`]; the
    /// tests ask this one.
    #[cfg(test)]
    pub fn prefetch_session(&self, l: &Lane64) -> bool {
        self.napt.prefetch_session(&l.key, l.hash) != NO_CAND
    }

    /// Are there more IPv6 hosts than stay in cache? Then batch stage 2b fetches their
    /// records ([`Nat64::prefetch_host`]); with fewer, waiting for each session's line to
    /// read its host's number costs more than it saves.
    #[inline]
    pub fn hosts_beyond_cache(&self) -> bool {
        self.napt.hosts_beyond_cache()
    }

    /// Batch stage 2b: starts fetching the IPv6 host's record of the session stage 2 found
    /// ([`Napt::prefetch_host`]).
    #[inline(always)]
    pub fn prefetch_host(&self, l: &Lane64) {
        if l.cand != NO_CAND {
            self.napt.prefetch_host(l.cand);
        }
    }

    /// Batch stage 2 for a stage-1 plan: the session's line; when the index has no candidate (a
    /// new flow), the BIB slot its creation will probe instead ([`Napt::prefetch_new`]).
    /// Notes the index entry found for stage 3.
    #[inline(always)]
    pub fn prefetch_lane(&self, l: &mut Lane64) -> bool {
        l.cand = self.napt.prefetch_session(&l.key, l.hash);
        let found = l.cand != NO_CAND;
        if !found {
            self.napt.prefetch_new(&l.key, l.hash);
        }
        found
    }

    /// True with the FTP ALG on (RFC 6384): it reads and rewrites control connections'
    /// payload, which needs their checksums complete.
    pub(crate) fn ftp_alg(&self) -> bool {
        self.ftp.is_some()
    }

    /// IPv6 -> IPv4 (RFC 6146 3.4 - 3.8).
    pub fn process6(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        if self.ftp.is_some() {
            return self.process6_ftp(now, buf, c);
        }
        let r = full(self.outbound(now, buf, c, None));
        Done::verdict(self.answer6(now, buf, c, r))
    }

    /// IPv4 -> IPv6 (RFC 6146 3.4 - 3.7).
    pub fn process4(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        if self.ftp.is_some() && crate::alg::is_control4(buf.data()) {
            // RFC 6384: the ALG works on the IPv4 side; an inbound control segment has its
            // acknowledgement moved by what the ALG added going out, before translation.
            if let Some(ftp) = &mut self.ftp {
                if let Err(e) = ftp.inbound(now, buf, c) {
                    return Verdict::Drop(e);
                }
            }
        }
        let r = full(self.inbound(now, buf, c, true, None));
        Done::verdict(self.answer4(now, buf, c, r))
    }

    /// RFC 7915 5.4 with RFC 6146's codes: an IPv6 packet NAT64 discards is answered with
    /// ICMPv6 Destination Unreachable ([`crate::siit::unreachable6`] says when) --
    /// code 3, address unreachable, when no BIB entry can be made for it (pool4 ports, the
    /// session limits, RFC 6146 3.5.1: "If it is not possible to allocate an appropriate IPv4
    /// transport address or create a BIB entry ... SHOULD send an ICMPv6 Destination
    /// Unreachable error message with Code 3") or its pref64 destination has no IPv4 form
    /// (RFC 6052 3.1); code 4, port unreachable, for a protocol other than TCP, UDP and ICMPv6
    /// (RFC 6146 3.5, which names that code). Anything else stays a silent drop.
    fn answer6(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        r: Result<Done, DropReason>,
    ) -> Result<Done, DropReason> {
        let Err(reason) = r else {
            return r;
        };
        let code = match reason {
            DropReason::PoolExhausted
            | DropReason::PortQuota
            | DropReason::SessionLimit
            | DropReason::HostSessionLimit
            | DropReason::UntranslatableAddress
            | DropReason::WellKnownPrefixNonGlobal => Some(3),
            DropReason::UnsupportedProtocol => Some(4),
            _ => None,
        };
        let Some(own) = self.own6() else {
            return Err(reason);
        };
        let p = self.params;
        crate::siit::unreachable6(buf, &p, own, &mut self.rate, now, c, reason, code)
    }

    /// RFC 7915 4.4 with RFC 6146's codes: an IPv4 packet to pool4 NAT64 discards is answered
    /// with ICMPv4 Destination Unreachable -- code 1, host unreachable, when no BIB entry
    /// matches a UDP datagram or ICMP query (RFC 6146 3.5.1, 3.5.3; the same answer Jool
    /// gives); code 3, port unreachable, for a TCP SYN without one (RFC 6146 3.5.2.2 sends it
    /// when the 6 s it holds such a SYN run out; this translator does not hold it, so at
    /// once); code 13, communication administratively prohibited, when the filter refuses it
    /// (RFC 6146 3.5.1 / 4.4's default); code 2, protocol unreachable, for a protocol other
    /// than TCP, UDP and ICMP (RFC 6146 3.5). Other TCP segments without a session, and
    /// everything else, stay silent drops.
    fn answer4(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        r: Result<Done, DropReason>,
    ) -> Result<Done, DropReason> {
        let Err(reason) = r else {
            return r;
        };
        let code = match reason {
            DropReason::NoMapping => match to6::parse(buf.data(), false, &self.params) {
                Ok(in4) => match in4.kind {
                    Kind4::Flow(p) if p.proto == Proto::Tcp => {
                        // SYN without ACK only: other segments are silently discarded.
                        (p.flags & 0x12 == 0x02).then_some(3)
                    }
                    Kind4::Flow(_) => Some(1),
                    _ => None,
                },
                Err(_) => None,
            },
            DropReason::Filtered => Some(13),
            DropReason::UnsupportedProtocol => Some(2),
            _ => None,
        };
        let own = self.own4;
        let p = self.params;
        crate::siit::unreachable4(buf, &p, own, &mut self.rate, now, c, reason, code)
    }

    /// [`Nat64::process6`] with the FTP ALG on: a control segment (TCP right after the
    /// IPv6 header, port 21 at either end) is translated, then its lines rewritten on the
    /// IPv4 side (RFC 6384: EPRT |2| becomes PORT with the pool4 address and a mapped port).
    #[cold]
    fn process6_ftp(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        use xlat_wire::ipv6::{addr_at, off, HEADER};
        let pkt = buf.data();
        let control = u8_at(pkt, off::NEXT_HEADER) == Some(xlat_wire::ipv4::proto::TCP)
            && (u16_at(pkt, HEADER) == Some(crate::alg::FTP_PORT)
                || u16_at(pkt, HEADER + 2) == Some(crate::alg::FTP_PORT));
        let src6 = addr_at(pkt, off::SRC);
        let r = full(self.outbound(now, buf, c, None));
        let v = Done::verdict(self.answer6(now, buf, c, r));
        let (true, Some(src6), Verdict::Forward) = (control, src6, v) else {
            return v;
        };
        let Some(mut ftp) = self.ftp.take() else {
            return v;
        };
        let napt = &mut self.napt;
        let (ext, remote) = (
            u32_at(buf.data(), xlat_wire::ipv4::off::SRC).unwrap_or(0),
            u32_at(buf.data(), xlat_wire::ipv4::off::DST).unwrap_or(0),
        );
        // Only the control connection's own IPv6 host gets a mapping (RFC 2577: a bounce
        // to another host passes unmodified).
        let mut map = |a: crate::alg::Announced, c: &mut Counters| match a {
            crate::alg::Announced::V6(addr, port) if addr == src6 && port != 0 => {
                napt.expect(now, crate::flow::Endpoint { addr, port }, ext, remote, c)
            }
            crate::alg::Announced::Own(port) if port != 0 => {
                let int = crate::flow::Endpoint { addr: src6, port };
                napt.expect(now, int, ext, remote, c)
            }
            _ => None,
        };
        let done = ftp.outbound(now, buf, &mut map, c);
        self.ftp = Some(ftp);
        match done {
            Ok(()) => v,
            Err(e) => Verdict::Drop(e),
        }
    }

    /// The established-flow lane (batch stage 3): the packet goes through the same
    /// translation code as [`Nat64::process6`] / [`Nat64::process4`], its session found
    /// with the stage-1 hash (a plain packet without a live session gets the one the full
    /// path would make, [`Nat64::rewrite64`]); `None`, with nothing changed, when
    /// [`Nat64::plan`] did not find the packet plain, or the general lane finds no live
    /// session (the full path then runs).
    pub fn lane(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        l: &Lane64,
        c: &mut Counters,
    ) -> Option<Verdict> {
        if !l.fast {
            return None;
        }
        let plain = match l.key {
            FlowKey::Out(..) => self.rewrite64(now, buf, l, c),
            FlowKey::In(..) => self.rewrite46(now, buf, l, c),
        };
        match plain {
            Plain::Done(v) => {
                #[cfg(test)]
                {
                    self.rewrites += 1;
                }
                return Some(v);
            }
            Plain::Not => {}
        }
        let r = match l.key {
            FlowKey::Out(..) => self.outbound(now, buf, c, Some(l)),
            FlowKey::In(..) => self.inbound(now, buf, c, true, Some(l)),
        };
        match r {
            Ok(None) => None,
            Ok(Some(d)) => Some(Done::verdict(Ok(d))),
            Err(e) => Some(Done::verdict(match l.key {
                FlowKey::Out(..) => self.answer6(now, buf, c, Err(e)),
                FlowKey::In(..) => self.answer4(now, buf, c, Err(e)),
            })),
        }
    }

    /// The lane's rewrite of a plain IPv6 packet (RFC 7915 5.1, 5.5) of its session, live or made
    /// for it: 40-byte header straight to TCP/UDP (the plan saw to that, and that it is not a
    /// control segment), the whole transport header present, hop limit above 1, small
    /// enough for the next hop with DF (5.1), not a hairpin (RFC 6146 3.8). Everything the
    /// full path would check is checked before the session is touched: `Plain::Not`
    /// (nothing changed) sends the packet to the general lane. The session is what the
    /// full path's [`Napt::outbound`] gives ([`Napt::lane_or_new`]: refreshed, or made for a
    /// new flow, RFC 6146 3.5.1, 3.5.2). The header comes from the session's tuple as
    /// [`offload::Recipe64`]'s does, with the same checksum adjustment
    /// ([`rewrite::delta64`]) and header writer; output and counters are the full path's.
    #[inline]
    fn rewrite64(&mut self, now: Time, buf: &mut PacketBuf, l: &Lane64, c: &mut Counters) -> Plain {
        use xlat_wire::ipv6::{addr_at, off, HEADER};
        let FlowKey::Out(proto, int, remote) = l.key else {
            return Plain::Not;
        };
        let d = buf.data();
        let (Some(first), Some(plen), Some(hop), Some(dst6)) = (
            u8_at(d, 0),
            u16_at(d, off::PAYLOAD_LEN),
            u8_at(d, off::HOP_LIMIT),
            addr_at(d, off::DST),
        ) else {
            return Plain::Not;
        };
        let plen = usize::from(plen);
        let (need, flags) = match proto {
            Proto::Tcp => (
                xlat_wire::l4::tcp::NEEDED,
                u8_at(d, HEADER + xlat_wire::l4::tcp::FLAGS).unwrap_or(0),
            ),
            Proto::Udp => (xlat_wire::l4::udp::HEADER, 0),
            Proto::Icmp => return Plain::Not,
        };
        let total4 = xlat_wire::ipv4::MIN_HEADER + plen;
        // RFC 8200 3: the payload is all there (link padding after it is cut, as the full
        // path cuts it); RFC 7915 5.1: hop limit 1 gets Time Exceeded, a packet too big for
        // the next hop gets Packet Too Big -- from the full path.
        if first >> 4 != 6
            || HEADER + plen > d.len()
            || plen < need
            || hop <= 1
            || total4 as u64 > u64::from(self.params.mtu).min(0xffff)
            || self.napt.is_pool(remote.addr)
            || martian::packet6(int.addr, dst6)
            || martian::destination4(remote.addr)
        {
            return Plain::Not;
        }
        let tc = ((first & 0x0f) << 4) | u8_at(d, 1).unwrap_or(0) >> 4;
        let t = match self.napt.lane_or_new(now, &l.key, l.hash, l.cand, flags, c) {
            Ok(t) => t,
            Err(e) => {
                buf.truncate(HEADER + plen);
                return Plain::Done(Done::verdict(self.answer6(now, buf, c, Err(e))));
            }
        };
        let p = rewrite::ip_proto(proto);
        let key = rewrite::Tuple6 {
            proto: p,
            src: int.addr,
            dst: dst6,
            sport: int.port,
            dport: remote.port,
        };
        let new = rewrite::Tuple4 {
            proto: p,
            src: t.ext.addr,
            dst: remote.addr,
            sport: t.ext.port,
            dport: remote.port,
        };
        if let Err(e) = rewrite::lane_6to4(buf, plen, tc, hop - 1, &key, &new, &mut self.ids) {
            return Plain::Done(Verdict::Drop(e));
        }
        c.event(Event::Ipv6ToIpv4);
        c.event(Event::Outbound);
        Plain::Done(Verdict::Forward)
    }

    /// [`Nat64::rewrite64`]'s twin for a plain IPv4 packet of a session (RFC 7915 4.1,
    /// 4.5): no options, not a fragment, TCP/UDP (not a control segment) with the whole
    /// transport header, header checksum good where it is verified (RFC 1812 5.2.2), TTL
    /// above 1, a UDP checksum present (a zero one is computed by the full path, 4.5), the
    /// translated packet within the lowest IPv6 MTU and the next hop's (else Packet Too Big
    /// or fragmentation, 4.1), a pref64 form for the source (RFC 6052 2.2, 3.1), and 20
    /// bytes of headroom for the longer header.
    #[inline]
    fn rewrite46(&mut self, now: Time, buf: &mut PacketBuf, l: &Lane64, c: &mut Counters) -> Plain {
        use xlat_wire::ipv4::{off, MIN_HEADER};
        let FlowKey::In(proto, ext, remote) = l.key else {
            return Plain::Not;
        };
        let d = buf.data();
        let (Some(hdr), Some(total), Some(tos), Some(ttl)) = (
            d.first_chunk::<MIN_HEADER>(),
            u16_at(d, off::TOTAL_LEN),
            u8_at(d, off::TOS),
            u8_at(d, off::TTL),
        ) else {
            return Plain::Not;
        };
        let total = usize::from(total);
        let (need, flags, ck_at) = match proto {
            Proto::Tcp => (
                xlat_wire::l4::tcp::NEEDED,
                u8_at(d, MIN_HEADER + xlat_wire::l4::tcp::FLAGS).unwrap_or(0),
                MIN_HEADER + xlat_wire::l4::tcp::CHECKSUM,
            ),
            Proto::Udp => (
                xlat_wire::l4::udp::HEADER,
                0,
                MIN_HEADER + xlat_wire::l4::udp::CHECKSUM,
            ),
            Proto::Icmp => return Plain::Not,
        };
        let payload = total.saturating_sub(MIN_HEADER);
        let limit = self.params.lowest_ipv6_mtu.min(self.params.mtu);
        let grow = xlat_wire::ipv6::HEADER - MIN_HEADER;
        // `plan` saw version 4, IHL 5, no MF, offset 0.
        if total > d.len()
            || payload < need
            || ttl <= 1
            || (xlat_wire::ipv6::HEADER + payload) as u64 > u64::from(limit)
            || buf.head() < grow
            || u16_at(d, ck_at).is_none_or(|ck| ck == 0 && proto == Proto::Udp)
            || (self.verify_ip_checksum && !xlat_wire::checksum::header_verifies(hdr))
            || martian::packet4(remote.addr, ext.addr)
        {
            return Plain::Not;
        }
        let Some(src6) = self.prefix.embed(remote.addr) else {
            return Plain::Not;
        };
        let t = match self.napt.lane_or_new(now, &l.key, l.hash, l.cand, flags, c) {
            Ok(t) => t,
            Err(e) => {
                buf.truncate(total);
                return Plain::Done(Done::verdict(self.answer4(now, buf, c, Err(e))));
            }
        };
        let p = rewrite::ip_proto(proto);
        let key = rewrite::Tuple4 {
            proto: p,
            src: remote.addr,
            dst: ext.addr,
            sport: remote.port,
            dport: ext.port,
        };
        let new = rewrite::Tuple6 {
            proto: p,
            src: src6,
            dst: t.int.addr,
            sport: remote.port,
            dport: t.int.port,
        };
        if let Err(e) = rewrite::lane_4to6(buf, total, tos, ttl - 1, &key, &new) {
            return Plain::Done(Verdict::Drop(e));
        }
        c.event(Event::Ipv4ToIpv6);
        c.event(Event::Inbound);
        Plain::Done(Verdict::Forward)
    }

    /// IPv6 -> IPv4. With `lane` (the established-flow lane, [`Nat64::lane`]) the session
    /// is looked up with the stage-1 hash and only a live one is used: `Ok(None)`, with
    /// nothing changed, when there is none (the full path then runs). Without it, never
    /// `Ok(None)`.
    fn outbound(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        lane: Option<&Lane64>,
    ) -> Result<Option<Done>, DropReason> {
        let in6 = to4::parse(buf.data(), &self.params)?;
        let h = in6.h;
        buf.truncate(h.total_len());
        let own6 = self.own6();
        if let Some(d) = checks6(buf, &in6, &self.params, own6, &mut self.rate, now, c)? {
            return Ok(Some(d));
        }
        let (m, inner, rewrite) = match &in6.kind {
            Kind6::Flow(p) => {
                // RFC 6146 3.5.1 (UDP), 3.5.2 (TCP), 3.5.3 (ICMP query): the BIB entry and
                // session of (source, port) -> (pref64 destination, port); 3.6.1: the
                // destination is the IPv4 address in the pref64.
                let dst4 = extract(&self.prefix, h.dst)?;
                if martian::destination4(dst4) {
                    return Err(DropReason::MartianAddress);
                }
                let int = Endpoint {
                    addr: h.src,
                    port: p.src,
                };
                let remote = Endpoint {
                    addr: dst4,
                    port: p.dst,
                };
                let ext = match lane {
                    None => self.napt.outbound(now, p.proto, int, remote, p.flags, c)?,
                    Some(l) => {
                        let key = FlowKey::Out(p.proto, int, remote);
                        match self
                            .napt
                            .lane_for(now, key, &l.key, l.hash, l.cand, p.flags)
                        {
                            Some(t) => t.ext,
                            None => return Ok(None),
                        }
                    }
                };
                let dport = if p.proto == Proto::Icmp {
                    ext.port
                } else {
                    p.dst
                };
                (
                    Map {
                        src: ext.addr,
                        dst: dst4,
                        sport: ext.port,
                        dport,
                    },
                    None,
                    Some(Rewrite::To4 {
                        src: ext.addr,
                        dst: dst4,
                    }),
                )
            }
            Kind6::Other if h.is_later_fragment() => {
                // RFC 6146 3.4: a later fragment takes its first fragment's translation.
                let (Some(key), Some(f)) = (FragId::of6(&h), h.frag) else {
                    return Err(DropReason::UnsupportedProtocol);
                };
                let l = self
                    .frags
                    .later(key, f.offset, h.l4_len(), f.more, now, false);
                self.ready.extend(l.released);
                match l.rewrite {
                    Some(Rewrite::To4 { src, dst }) => (
                        Map {
                            src,
                            dst,
                            sport: 0,
                            dport: 0,
                        },
                        None,
                        None,
                    ),
                    _ => {
                        self.frags.hold(key, buf.data(), now)?;
                        c.event(Event::FragmentsHeld);
                        return Ok(Some(Done::Held));
                    }
                }
            }
            // Only TCP, UDP and ICMP have the identifiers a BIB needs (RFC 6146 3.4).
            Kind6::Other => return Err(DropReason::UnsupportedProtocol),
            Kind6::Error(e) => {
                // RFC 6146 3.4 / 3.6: an ICMPv6 error about a packet that came from the IPv4
                // side; the quoted packet's tuple (pref64 source -> IPv6 node) names the
                // session. It does not refresh it (find_by_inside).
                let ip = e.inner_ports.ok_or(DropReason::IcmpErrorMalformed)?;
                let remote4 = extract(&self.prefix, e.inner.src)?;
                let ext = self
                    .napt
                    .find_by_inside(
                        now,
                        ip.proto,
                        Endpoint {
                            addr: e.inner.dst,
                            port: ip.dst,
                        },
                        Endpoint {
                            addr: remote4,
                            port: ip.src,
                        },
                        c,
                    )
                    .ok_or(DropReason::IcmpErrorNoSession)?;
                let (sport, dport) = if ip.proto == Proto::Icmp {
                    (ext.port, ext.port)
                } else {
                    (ip.src, ext.port)
                };
                (
                    Map {
                        src: ext.addr,
                        dst: extract(&self.prefix, h.dst)?,
                        sport: 0,
                        dport: 0,
                    },
                    Some(Map {
                        src: remote4,
                        dst: ext.addr,
                        sport,
                        dport,
                    }),
                    None,
                )
            }
        };
        // RFC 6146 3.7: translate (RFC 7915 5).
        let em = to4::emit(buf, &in6, &m, inner.as_ref(), true, &mut self.ids)?;
        c.event(Event::Ipv6ToIpv4);
        c.event(Event::Outbound);
        if inner.is_some() {
            c.event(Event::IcmpErrorsTranslated);
        }
        if let Some(key) = FragId::of6(&h) {
            c.event(Event::Fragments);
            let done = finish4(
                buf,
                em.icmp_len_pending,
                &h,
                rewrite,
                &mut self.frags,
                &mut self.ready,
                now,
                c,
            )?;
            if rewrite.is_some() {
                self.release_held(key, rewrite, now, c);
            }
            if !matches!(done, Done::Forward) {
                return Ok(Some(done));
            }
        }
        // RFC 6146 3.8: a destination in pool4 is hairpinned: the packet, now with its
        // IPv4 source, is handled as if it had arrived on the IPv4 side.
        if self.napt.is_pool(m.dst) {
            let done = self.inbound(now, buf, c, false, None)?;
            c.event(Event::Hairpinned);
            return Ok(done);
        }
        Ok(Some(Done::Forward))
    }

    /// IPv4 -> IPv6; `lane` as in [`Nat64::outbound`].
    fn inbound(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
        decrement: bool,
        lane: Option<&Lane64>,
    ) -> Result<Option<Done>, DropReason> {
        let in4 = to6::parse(buf.data(), self.verify_ip_checksum, &self.params)?;
        let h = in4.h;
        buf.truncate(h.total_len);
        if decrement {
            let own = Some(self.own4);
            if let Some(d) = checks4(buf, &in4, &self.params, own, &mut self.rate, now, c)? {
                return Ok(Some(d));
            }
        }
        let (m, inner, rewrite) = match &in4.kind {
            Kind4::Flow(p) => {
                // RFC 6146 3.5: the session of (pool4 address, port) <- (source, port), or a
                // new one where the BIB entry and the filtering policy admit it; 3.6.2: the
                // source gets its pref64 form.
                let ext = Endpoint {
                    addr: h.dst,
                    port: p.dst,
                };
                let remote = Endpoint {
                    addr: h.src,
                    port: p.src,
                };
                let int = match lane {
                    None => self.napt.inbound(now, p.proto, ext, remote, p.flags, c)?,
                    Some(l) => {
                        let key = FlowKey::In(p.proto, ext, remote);
                        match self
                            .napt
                            .lane_for(now, key, &l.key, l.hash, l.cand, p.flags)
                        {
                            Some(t) => t.int,
                            None => return Ok(None),
                        }
                    }
                };
                let src6 = embed(&self.prefix, h.src)?;
                let sport = if p.proto == Proto::Icmp {
                    int.port
                } else {
                    p.src
                };
                (
                    Map {
                        src: src6,
                        dst: int.addr,
                        sport,
                        dport: int.port,
                    },
                    None,
                    Some(Rewrite::To6 {
                        src: src6,
                        dst: int.addr,
                    }),
                )
            }
            Kind4::Other if h.is_later_fragment() => {
                let key = FragId::of4(&h);
                let l = self.frags.later4(&h, now, false);
                self.ready.extend(l.released);
                match l.rewrite {
                    Some(Rewrite::To6 { src, dst }) => (
                        Map {
                            src,
                            dst,
                            sport: 0,
                            dport: 0,
                        },
                        None,
                        None,
                    ),
                    _ => {
                        self.frags.hold(key, buf.data(), now)?;
                        c.event(Event::FragmentsHeld);
                        return Ok(Some(Done::Held));
                    }
                }
            }
            Kind4::Other => return Err(DropReason::UnsupportedProtocol),
            Kind4::Error(e) => {
                // The quoted packet went out from a pool4 transport address; its session
                // gives the IPv6 node (without refreshing it).
                let ip = e.inner_ports.ok_or(DropReason::IcmpErrorMalformed)?;
                let int = self
                    .napt
                    .find_by_outside(
                        now,
                        ip.proto,
                        Endpoint {
                            addr: e.inner.src,
                            port: ip.src,
                        },
                        Endpoint {
                            addr: e.inner.dst,
                            port: ip.dst,
                        },
                        c,
                    )
                    .ok_or(DropReason::IcmpErrorNoSession)?;
                let dport = if ip.proto == Proto::Icmp {
                    int.port
                } else {
                    ip.dst
                };
                (
                    Map {
                        src: embed(&self.prefix, h.src)?,
                        dst: int.addr,
                        sport: 0,
                        dport: 0,
                    },
                    Some(Map {
                        src: int.addr,
                        dst: embed(&self.prefix, e.inner.dst)?,
                        sport: int.port,
                        dport,
                    }),
                    None,
                )
            }
        };
        let em = to6::emit(buf, &in4, &m, inner.as_ref(), &self.params, decrement)?;
        c.event(Event::Ipv4ToIpv6);
        if decrement {
            c.event(Event::Inbound);
        }
        if inner.is_some() {
            c.event(Event::IcmpErrorsTranslated);
        }
        if h.is_fragment() {
            c.event(Event::Fragments);
        }
        let done = finish6(
            buf,
            &em,
            &h,
            rewrite,
            &mut self.frags,
            &mut self.ready,
            now,
            c,
        )?;
        if h.more_fragments && h.frag_offset == 0 && rewrite.is_some() {
            self.release_held(FragId::of4(&h), rewrite, now, c);
        }
        Ok(Some(done))
    }

    /// Translates the later fragments held for a datagram whose first fragment just went
    /// through (RFC 6146 3.4) and queues them.
    fn release_held(&mut self, key: FragId, rewrite: Option<Rewrite>, now: Time, c: &mut Counters) {
        let mut held = Vec::new();
        self.frags.take_held(key, &mut held);
        for data in held {
            let mut room = vec![0u8; HEADROOM + data.len()];
            if let Some(d) = room.get_mut(HEADROOM..) {
                d.copy_from_slice(&data);
            }
            let Some(mut b) = PacketBuf::new(&mut room, HEADROOM, data.len()) else {
                continue;
            };
            let r = match rewrite {
                Some(Rewrite::To4 { src, dst }) => self.held6(&mut b, src, dst, now, c),
                Some(Rewrite::To6 { src, dst }) => self.held4(&mut b, src, dst, now, c),
                None => Err(DropReason::FragmentNoFirst),
            };
            match r {
                Ok(()) => {
                    c.event(Event::Fragments);
                    self.ready.push_back(b.data().to_vec());
                }
                Err(reason) => c.drop(reason),
            }
        }
    }

    fn held6(
        &mut self,
        b: &mut PacketBuf,
        src: u32,
        dst: u32,
        now: Time,
        c: &mut Counters,
    ) -> Result<(), DropReason> {
        let in6 = to4::parse(b.data(), &self.params)?;
        let (Some(key), Some(f)) = (FragId::of6(&in6.h), in6.h.frag) else {
            return Err(DropReason::FragmentNoFirst);
        };
        let m = Map {
            src,
            dst,
            sport: 0,
            dport: 0,
        };
        to4::emit(b, &in6, &m, None, true, &mut self.ids)?;
        c.event(Event::Ipv6ToIpv4);
        let l = self
            .frags
            .later(key, f.offset, in6.h.l4_len(), f.more, now, false);
        self.ready.extend(l.released);
        Ok(())
    }

    fn held4(
        &mut self,
        b: &mut PacketBuf,
        src: u128,
        dst: u128,
        now: Time,
        c: &mut Counters,
    ) -> Result<(), DropReason> {
        let in4 = to6::parse(b.data(), false, &self.params)?;
        let h = in4.h;
        let m = Map {
            src,
            dst,
            sport: 0,
            dport: 0,
        };
        let em = to6::emit(b, &in4, &m, None, &self.params, true)?;
        c.event(Event::Ipv4ToIpv6);
        let l = self.frags.later4(&h, now, false);
        self.ready.extend(l.released);
        if let Some(limit) = em.split {
            let mut extra = VecDeque::new();
            let n = crate::siit::split6(b, limit, &mut extra)?;
            c.add(Event::FragmentsCreated, n);
            self.ready.extend(extra);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "../../tests/common/mod.rs"]
mod common;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::common::{a4, a6, echo, ip4, ip6, tcp, udp};
    use super::*;

    /// The prefetch keys of both directions name the index entries the real lookups use:
    /// stage 2 finds a candidate for an established flow (UDP, TCP, ICMP echo) and none for
    /// a flow that has no session.
    #[test]
    fn prefetch_keys_hit_the_session_index() {
        let cfg = Nat64Config {
            prefix: "64:ff9b::/96".parse().unwrap(),
            pool4: vec!["198.51.100.0/30".parse().unwrap()],
            ..Nat64Config::default()
        };
        let mut n = Nat64::new(&cfg, 7);
        let mut c = Counters::default();
        let (h6, r6, r4) = (a6("2001:db8::5"), a6("64:ff9b::808:808"), a4("8.8.8.8"));
        let outs = [
            ip6(h6, r6, 17, udp(4000, 53, &[1; 8]), 64),
            ip6(h6, r6, 6, tcp(4001, 80, 0x02), 64),
            ip6(h6, r6, 58, echo(128, 77, 1, &[2; 8]), 64),
        ];
        for p in &outs {
            let mut room = vec![0u8; HEADROOM + p.len() + HEADROOM];
            room[HEADROOM..HEADROOM + p.len()].copy_from_slice(p);
            let mut b = PacketBuf::new(&mut room, HEADROOM, p.len()).unwrap();
            assert_eq!(n.process6(Time(1), &mut b, &mut c), Verdict::Forward);
            let out4 = b.data().to_vec();
            let l = n.plan(p, true).unwrap();
            assert!(n.prefetch_session(&l), "6->4 key of {p:02x?}");
            // The reply: source and destination (ports, or the echo identifier) swapped.
            let ext = u32_at(&out4, 12).unwrap().to_be_bytes();
            let l4 = match out4[9] {
                17 => udp(53, u16_at(&out4, 20).unwrap(), &[1; 8]),
                6 => tcp(80, u16_at(&out4, 20).unwrap(), 0x12),
                _ => echo(0, u16_at(&out4, 24).unwrap(), 1, &[2; 8]),
            };
            let back = ip4(r4, ext, out4[9], l4, 64, 0, 1);
            let l = n.plan(&back, false).unwrap();
            assert!(n.prefetch_session(&l), "4->6 key of {back:02x?}");
        }
        let none = ip6(h6, r6, 17, udp(4999, 53, &[1; 8]), 64);
        let l = n.plan(&none, true).unwrap();
        assert!(!n.prefetch_session(&l));
        // Not a flow: no key.
        assert!(n.plan(&ip6(h6, r6, 59, vec![0; 8], 64), true).is_none());
        assert!(n.plan(&[0x45, 0], false).is_none());
    }
}
