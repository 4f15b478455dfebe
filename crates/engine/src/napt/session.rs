//! Sessions: the [`Session`] record (both keys' endpoints, TCP state, expiry: the whole
//! translation in 32 bytes), making one, refreshing it on a packet (RFC 4787 REQ-5/REQ-6,
//! RFC 5382 REQ-5, RFC 5508 REQ-2; RFC 6146 3.5.2.2 TCP states) and removing it. A session's
//! expiry is handed on to its mapping and filter entry in coarse steps ([`Stamp`]).

use crate::counters::{Counters, Event};
use crate::events::{EndReason, EventKind};
use crate::flow::{Endpoint, FlowKey, InsideAddr, Proto};
use crate::hosts::Hosts;
use crate::tcp::{self as tcpsm, Dir, Lifetime, TcpState};
use crate::Time;

use super::mapping::{Ends, Owner, NO_MAP};
use super::{Napt, Translation};

#[derive(Clone, Copy)]
pub(super) enum SessState {
    Udp,
    Icmp,
    Tcp(TcpState),
}

flat_endpoints!(Session);

/// A session carries its whole translation (inside, outside and remote endpoints), so the
/// fast path is one index lookup and one session read. Fields are laid out flat (no padded
/// `Endpoint`s) and an IPv6 inside address is held as its host's number ([`Hosts`]), so a
/// session is 32 bytes, aligned to 32: two to a cache line, never split across two.
#[derive(Clone, Copy)]
#[repr(align(32))]
pub(super) struct Session {
    /// The inside address as held ([`Hosts`]).
    pub(super) int_addr: u32,
    pub(super) ext_addr: u32,
    pub(super) remote_addr: u32,
    /// Its mapping's record, or [`NO_MAP`]: the mapping is folded into this session.
    pub(super) map: u32,
    /// When it expires; its mapping and remote-address filter entry get this value again only
    /// when it moves into another ~0.54 s step ([`PROPAGATE_SHIFT`]), so a busy flow does not
    /// touch them per packet.
    pub(super) expires: Time,
    pub(super) int_port: u16,
    pub(super) ext_port: u16,
    pub(super) remote_port: u16,
    /// The protocol is implied: UDP, ICMP or TCP with its state.
    pub(super) state: SessState,
    /// On the fast path ([`ON_FAST_PATH`]: its recipes are installed, [`crate::offload`];
    /// expiry asks the fast path when it last saw the session before removing it), or, for
    /// a UDP session waiting to be promoted ([`Napt::set_offload_after`]), the packets the
    /// engine translated for it ([`SEEN`] bits) and whether an inbound packet opened it
    /// ([`OPENED_IN`]).
    pub(super) offload: u8,
}

/// [`Session::offload`]: the session's recipes are on the fast path.
pub(super) const ON_FAST_PATH: u8 = u8::MAX;
/// [`Session::offload`]: an inbound packet opened the session (so a reply goes out).
pub(super) const OPENED_IN: u8 = 0x80;
/// [`Session::offload`]: packets seen while waiting (saturating below [`ON_FAST_PATH`]).
pub(super) const SEEN: u8 = 0x7f;
/// The most packets [`crate::Engine::set_offload_after`] may ask a UDP session to wait for.
pub const MAX_OFFLOAD_AFTER: u8 = SEEN - 1;

impl Session {
    /// Are its recipes on the fast path?
    #[inline]
    pub(super) fn offloaded(&self) -> bool {
        self.offload == ON_FAST_PATH
    }
    /// Puts it on the fast path or takes it off (then counting its packets afresh).
    #[inline]
    pub(super) fn set_offloaded(&mut self, on: bool) {
        self.offload = if on {
            ON_FAST_PATH
        } else {
            self.offload & OPENED_IN
        };
    }
    #[inline]
    pub(super) fn proto(&self) -> Proto {
        match self.state {
            SessState::Udp => Proto::Udp,
            SessState::Icmp => Proto::Icmp,
            SessState::Tcp(_) => Proto::Tcp,
        }
    }
    #[inline]
    pub(super) fn remote(&self) -> Endpoint {
        Endpoint {
            addr: self.remote_addr,
            port: self.remote_port,
        }
    }
    /// The tuple this session's packets carry going out (`inbound = false`) or coming in.
    #[inline]
    pub(super) fn key<A: InsideAddr>(&self, inbound: bool, hosts: &Hosts<A>) -> Option<FlowKey<A>> {
        Some(if inbound {
            FlowKey::In(self.proto(), self.ext(), self.remote())
        } else {
            FlowKey::Out(self.proto(), self.int(hosts)?, self.remote())
        })
    }
    /// Does the packet tuple `key` belong to this session (in the direction `inbound`)?
    /// Without `hosts`, an inside address held as its host's number is not compared (the
    /// caller does: [`Napt::find`]).
    #[inline(always)]
    pub(super) fn matches<A: InsideAddr>(
        &self,
        key: &FlowKey<A>,
        inbound: bool,
        hosts: Option<&Hosts<A>>,
    ) -> bool {
        match *key {
            FlowKey::Out(p, int, r) => {
                !inbound
                    && self.int_port == int.port
                    && self.remote_addr == r.addr
                    && self.remote_port == r.port
                    && self.proto() == p
                    && match A::from_held(self.int_addr) {
                        Some(a) => a == int.addr,
                        None => hosts.is_none_or(|h| h.addr(self.int_addr) == Some(int.addr)),
                    }
            }
            FlowKey::In(p, ext, r) => {
                inbound
                    && self.ext_addr == ext.addr
                    && self.ext_port == ext.port
                    && self.remote_addr == r.addr
                    && self.remote_port == r.port
                    && self.proto() == p
            }
        }
    }
}

/// A session's expiry is copied to its mapping and filter entry when it moves into another
/// step of 2^29 ns (0.54 s): they lag it by less than that.
pub(super) const PROPAGATE_SHIFT: u32 = 29;

/// The expiry of a mapping or a filter entry: the latest expiry of its sessions, in steps of
/// 2^[`PROPAGATE_SHIFT`] ns (0.54 s; a `u32` of them spans 73 years), rounded up -- the steps
/// in which sessions hand their expiry on anyway ([`Napt::propagate`]). Rounding up means a
/// mapping never expires before its sessions do; it may admit inbound packets for up to
/// 0.54 s after its last session's time (RFC 4787 REQ-5's timeouts are minutes).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct Stamp(pub(super) u32);

impl Stamp {
    #[inline]
    pub(super) fn of(t: Time) -> Stamp {
        let steps = t.0.div_ceil(1 << PROPAGATE_SHIFT);
        Stamp(u32::try_from(steps).unwrap_or(u32::MAX))
    }
    /// Has this expiry come at `now`?
    #[inline]
    pub(super) fn passed(self, now: Time) -> bool {
        u64::from(self.0) << PROPAGATE_SHIFT <= now.0
    }
}

impl<A: InsideAddr> Napt<A> {
    /// Makes a session of mapping `mid` (the record's; [`NO_MAP`]: a new mapping folded into
    /// this session) between its endpoints `ends` and `remote` (normalised,
    /// [`Proto::remote_port`]);
    /// `hash` is the hash of its tuple in the direction `dir` of the packet that opens it.
    /// Its host has counted it already ([`Napt::host_for`], `create_in`). Returns its id.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn create_session(
        &mut self,
        mid: u32,
        ends: Ends<A>,
        remote: Endpoint,
        proto: Proto,
        dir: Dir,
        now: Time,
        hash: u64,
        c: &mut Counters,
    ) -> (u32, Translation<A>) {
        let Ends { held, int, ext } = ends;
        let t = &self.cfg.timeouts;
        let (state, life) = match proto {
            Proto::Udp => (SessState::Udp, t.udp),
            Proto::Icmp => (SessState::Icmp, t.icmp),
            Proto::Tcp => (SessState::Tcp(tcpsm::initial(dir)), t.tcp_transitory),
        };
        let expires = now.plus_secs(life);
        // UDP goes to the fast path at once, or once it has proven itself
        // ([`Napt::set_offload_after`]); TCP when it is established (see `touch`).
        let offloaded = proto == Proto::Udp
            && self.offload_after <= 1
            && self.offloadable(proto, remote, int.port);
        let offload = if offloaded {
            ON_FAST_PATH
        } else if dir == Dir::In {
            OPENED_IN | 1
        } else {
            1
        };
        let sid = self.sessions.insert(Session {
            int_addr: held,
            ext_addr: ext.addr,
            remote_addr: remote.addr,
            map: mid,
            expires,
            int_port: int.port,
            ext_port: ext.port,
            remote_port: remote.port,
            state,
            offload,
        });
        // Not while `xlat trace` holds its flows back (cold: only then is there a hold).
        if offloaded && self.hold.is_some() && self.held(sid, now) {
            if let Some(s) = self.sessions.get_mut(sid) {
                s.set_offloaded(false);
            }
        } else if offloaded {
            self.offload_event(now, crate::offload::OffloadKind::Install, sid);
        }
        if self.events.on() {
            // A folded mapping is made with its session: one event carries both.
            self.created_event(now, sid, proto, int, ext, remote, mid == NO_MAP);
        }
        // The opening packet's tuple was hashed by the caller; the other one is hashed here.
        let (h_out, h_in) = match dir {
            Dir::Out => (hash, self.hash(&FlowKey::In(proto, ext, remote))),
            Dir::In => (self.hash(&FlowKey::Out(proto, int, remote)), hash),
        };
        let placed = self.flows.insert(h_out, sid * 2);
        debug_assert!(placed, "index sized for limits.max_sessions");
        self.insert_later(false, h_in, sid * 2 + 1);
        if mid != NO_MAP {
            self.count_session(mid, remote.addr, Stamp::of(expires));
        }
        c.event(Event::SessionsCreated);
        (sid, Translation { int, ext })
    }

    /// Updates state and lifetime for a packet of an existing session (RFC 4787 REQ-6:
    /// outbound refreshes; inbound does when `inbound_refresh`; RFC 6146 3.5.2.2 for TCP) and
    /// returns it. The caller found `sid` live just before, by the packet tuple `key`.
    #[inline(always)]
    pub(super) fn touch(
        &mut self,
        sid: u32,
        now: Time,
        key: &FlowKey<A>,
        flags: u8,
    ) -> Option<Translation<A>> {
        let t = self.cfg.timeouts;
        let inbound_refresh = self.cfg.inbound_refresh;
        let s = self.sessions.get_mut(sid)?;
        // Going out, the inside endpoint is the packet's: an IPv6 address is looked up only
        // coming in ([`Hosts`]).
        let (dir, int) = match *key {
            FlowKey::Out(_, int, _) => (Dir::Out, int),
            FlowKey::In(..) => (Dir::In, s.int(&self.hosts)?),
        };
        let mut established = None;
        let mut promote = false;
        let new_expiry = match s.state {
            SessState::Udp if dir == Dir::Out || inbound_refresh => Some(now.plus_secs(t.udp)),
            SessState::Icmp if dir == Dir::Out || inbound_refresh => Some(now.plus_secs(t.icmp)),
            SessState::Udp | SessState::Icmp => None,
            SessState::Tcp(st) => {
                let (next, life) = tcpsm::next(st, dir, flags);
                s.state = SessState::Tcp(next);
                let (was, is) = (st == TcpState::Established, next == TcpState::Established);
                if was != is {
                    established = Some(is);
                }
                match life {
                    Lifetime::Established => Some(now.plus_secs(t.tcp_established)),
                    Lifetime::Transitory => Some(now.plus_secs(t.tcp_transitory)),
                    Lifetime::Unchanged => None,
                }
            }
        };
        if self.offload && matches!(s.state, SessState::Udp) && s.offload != ON_FAST_PATH {
            // A UDP session proves itself by a reply (a packet against the direction that
            // opened it) or its `offload_after`-th packet ([`Napt::set_offload_after`]).
            let seen = (s.offload & SEEN).saturating_add(1).min(MAX_OFFLOAD_AFTER);
            s.offload = (s.offload & OPENED_IN) | seen;
            let reply = (s.offload & OPENED_IN != 0) == (dir == Dir::Out);
            promote = reply || seen >= self.offload_after;
        }
        let tr = Translation { int, ext: s.ext() };
        if let Some(e) = new_expiry {
            let old = s.expires;
            s.expires = e;
            if e.0 >> PROPAGATE_SHIFT != old.0 >> PROPAGATE_SHIFT {
                let (mid, raddr) = (s.map, s.remote_addr);
                self.propagate(mid, raddr, e);
            }
        }
        if let Some(is) = established {
            self.tcp_offload(now, sid, is);
        }
        if promote {
            self.udp_offload(now, sid);
        }
        Some(tr)
    }

    /// Copies a session's new expiry `e` to its mapping and filter entry.
    /// Nothing for a folded mapping: its session's expiry is its own.
    pub(super) fn propagate(&mut self, mid: u32, raddr: u32, e: Time) {
        if mid == NO_MAP {
            return;
        }
        let e = Stamp::of(e);
        if let Some(m) = self.mappings.get_mut(mid) {
            m.expires = m.expires.max(e);
            if m.remote.sessions > 0 && m.remote.addr == raddr {
                m.remote.expires = m.remote.expires.max(e);
                return;
            }
        }
        self.propagate_spilled(mid, raddr, e);
    }

    /// [`Napt::propagate`] to a filter entry in [`Napt::remotes`]. Out of line: rare, and
    /// inlined its lookup weighs on the established path's code.
    #[inline(never)]
    fn propagate_spilled(&mut self, mid: u32, raddr: u32, e: Stamp) {
        if let Some(s) = self.remotes.find_mut((mid, raddr)) {
            s.r.expires = s.r.expires.max(e);
        }
    }

    /// Removes session `sid` (at `now`, for `why`), its index entries, its count at its
    /// mapping and host, and the mapping with its last session.
    pub(super) fn remove_session(&mut self, sid: u32, now: Time, why: EndReason) {
        // Out of its slab only after its index entries: removing one may need the other's
        // record ([`Napt::index_remove`]).
        let Some(&s) = self.sessions.get(sid) else {
            return;
        };
        if self.events.on() {
            // Named before the host number can be released and reused.
            self.session_event(now, EventKind::SessionDeleted(why), sid, s.map == NO_MAP);
        }
        if s.offloaded() {
            self.push_offload(now, crate::offload::OffloadKind::Remove, sid, &s);
        }
        for inbound in [false, true] {
            if let Some(key) = s.key(inbound, &self.hosts) {
                let h = self.hash(&key);
                self.index_remove(false, h, sid * 2 + u32::from(inbound));
            }
        }
        let num = self.hosts.number_of_held(s.int_addr);
        if let Some(h) = num.and_then(|num| self.hosts.get_mut(num)) {
            h.sessions = h.sessions.saturating_sub(1);
        }
        if s.map == NO_MAP {
            // Its mapping goes with it.
            for outside in [false, true] {
                if let Some(h) = s.bib_hash(&self.hasher, outside, &self.hosts) {
                    self.index_remove(true, h, Owner::Session(sid).bib_val(outside));
                }
            }
            self.sessions.remove(sid);
            self.folded = self.folded.saturating_sub(1);
            self.release_mapping(s.proto(), s.int_addr, s.int_port, s.ext(), now);
            return;
        }
        self.sessions.remove(sid);
        let Some(m) = self.mappings.get_mut(s.map) else {
            return;
        };
        if m.remote.sessions > 0 && m.remote.addr == s.remote_addr {
            m.remote.sessions -= 1;
        } else {
            Self::uncount_spilled(&mut self.remotes, s.map, s.remote_addr);
        }
        m.sessions = m.sessions.saturating_sub(1);
        if m.sessions == 0 {
            self.remove_mapping(s.map, now);
        }
    }
}
