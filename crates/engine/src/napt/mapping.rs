//! The BIB: mappings of an inside endpoint to an outside one, endpoint-independent (RFC 4787
//! REQ-1, RFC 5382 REQ-1, RFC 6146 3.5.1: keyed by the inside endpoint alone). A mapping with
//! one session is folded into it (no record; the BIB points to the session); a second session
//! gives it a [`Mapping`] record ([`Napt::promote`]). An outbound packet with no session
//! makes one here ([`Napt::create_out`]); a mapping goes, and its port returns to the pool,
//! with its last session.

use crate::counters::{Counters, DropReason, Event};
use crate::events::EventKind;
use crate::flow::{ends_bib_hash, Endpoint, InsideAddr, Proto};
use crate::tcp::{self as tcpsm, Dir};
use crate::Time;

use super::filter::RemoteRef;
use super::session::Stamp;
use super::{Napt, Translation};

/// A mapping's endpoints, the inside address also as held ([`Hosts`](crate::hosts::Hosts)).
#[derive(Clone, Copy)]
pub(super) struct Ends<A> {
    pub(super) held: u32,
    pub(super) int: Endpoint<A>,
    pub(super) ext: Endpoint,
}

/// The record of a BIB entry with more than one session (one with a single session is folded
/// into it: the module docs). Flat fields (no padded `Endpoint`s), a coarse expiry and the
/// inside address as held, so a mapping is 36 bytes for NAT44 and NAT64 alike.
#[derive(Clone, Copy)]
pub(super) struct Mapping {
    /// The inside address as held ([`Hosts`](crate::hosts::Hosts)).
    pub(super) int_addr: u32,
    pub(super) ext_addr: u32,
    pub(super) sessions: u32,
    /// Latest expiry among its sessions: a mapping whose time has passed admits nothing
    /// inbound even if the sweep has not removed it yet.
    pub(super) expires: Stamp,
    /// The address-dependent filter's entry for one remote address, kept here because most
    /// mappings talk to one remote address; others go to [`Napt::remotes`].
    pub(super) remote: RemoteRef,
    pub(super) int_port: u16,
    pub(super) ext_port: u16,
    pub(super) proto: Proto,
}

impl Mapping {
    #[inline]
    pub(super) fn proto(&self) -> Proto {
        self.proto
    }
}

flat_endpoints!(Mapping);

/// A session's `map` when its mapping has no record but is folded into it.
pub(super) const NO_MAP: u32 = u32::MAX;

/// What a BIB entry leads to: a mapping's record, or the session a mapping is folded into.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Owner {
    Mapping(u32),
    Session(u32),
}

impl Owner {
    /// The BIB value of the owner's entry by its inside (`outside = false`) or outside
    /// endpoint: `id * 4 + side * 2 + folded`.
    #[inline]
    pub(super) fn bib_val(self, outside: bool) -> u32 {
        let (id, folded) = match self {
            Owner::Mapping(mid) => (mid, 0),
            Owner::Session(sid) => (sid, 1),
        };
        id << 2 | u32::from(outside) << 1 | folded
    }
    #[inline]
    pub(super) fn of_bib_val(v: u32) -> Owner {
        if v & 1 == 1 {
            Owner::Session(v >> 2)
        } else {
            Owner::Mapping(v >> 2)
        }
    }
}

impl<A: InsideAddr> Napt<A> {
    /// What [`Napt::outbound`] does for a flow with no live session: makes one, on the
    /// inside endpoint's mapping or a new one (RFC 4787 REQ-1), or says why not. `remote`
    /// is normalised ([`Proto::remote_port`]); `hash` is the hash of the outbound tuple.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_out(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        remote: Endpoint,
        tcp_flags: u8,
        hash: u64,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        // RFC 6146 3.5.2.2 (and RFC 5382): only a SYN opens a TCP session.
        if proto == Proto::Tcp && tcp_flags & tcpsm::SYN == 0 {
            return Err(DropReason::TcpNoSession);
        }
        if self.sessions.len >= self.cfg.limits.max_sessions as usize && !self.reclaim(now, c) {
            return Err(DropReason::SessionLimit);
        }
        // The endpoint's mapping, if it has one (a lookup only: nothing changes yet).
        let h_bib = self.bib_hash(proto, int.addr.words(), int.port, false);
        let found = self.bib_by_inside(proto, int, h_bib);
        let new_maps = u32::from(found.is_none());
        let host = match self.host_for(int.addr, new_maps) {
            Ok(h) => h,
            Err(e) => {
                if self.events.on() {
                    // RFC 8158 natEvent: addresses exhausted (no pool address for a new
                    // host) or quota exceeded (the host's session limit).
                    let kind = match e {
                        DropReason::PoolExhausted => Some(EventKind::AddressesExhausted),
                        DropReason::HostSessionLimit => Some(EventKind::QuotaExceeded),
                        _ => None,
                    };
                    if let Some(k) = kind {
                        let none = Endpoint { addr: 0, port: 0 };
                        self.endpoint_event(now, k, proto, int, none);
                    }
                }
                return Err(e);
            }
        };
        let Some(owner) = found else {
            // A new mapping, folded into the session it is made for: a static BIB entry's
            // outside endpoint, or a port from the host's pool address (or its port block).
            let port = match self.forwards.outside_of(proto, int) {
                Some(ext) => Ok((ext, None)),
                None => self.take_port(proto, int, host.pool, Some(host.num), now, c),
            };
            let ext = match port {
                Ok((ext, block)) => {
                    if let (Some((first, last)), true) = (block, self.events.on()) {
                        let kind = EventKind::PortBlockAllocated;
                        self.block_event(now, kind, proto, int.addr, ext.addr, first, last);
                    }
                    ext
                }
                Err(e) => {
                    self.unhost(int.addr, host.new, new_maps);
                    if self.events.on() {
                        let ext = Endpoint {
                            addr: self.pool_addr(host.pool),
                            port: 0,
                        };
                        // RFC 8158 natEvent: ports exhausted, or quota exceeded when the
                        // host's deterministic range (RFC 7422) or its allowed port blocks
                        // are full.
                        let kind = match e {
                            DropReason::PortQuota => EventKind::QuotaExceeded,
                            _ => EventKind::PortsExhausted,
                        };
                        self.endpoint_event(now, kind, proto, int, ext);
                    }
                    return Err(e);
                }
            };
            let ends = Ends {
                held: host.held,
                int,
                ext,
            };
            if host.new && self.events.on() {
                // Paired only now that its first session is certain (`unhost` above).
                let ext = Endpoint {
                    addr: ext.addr,
                    port: 0,
                };
                self.endpoint_event(now, EventKind::HostBound, proto, int, ext);
            }
            let (sid, t) = self.create_session(NO_MAP, ends, remote, proto, Dir::Out, now, hash, c);
            let placed = self.bib.insert(h_bib, Owner::Session(sid).bib_val(false));
            debug_assert!(placed, "index sized for limits.max_sessions");
            let h_ext = self.bib_hash(proto, (u64::from(ext.addr), 0), ext.port, true);
            self.insert_later(true, h_ext, Owner::Session(sid).bib_val(true));
            self.folded += 1;
            c.event(Event::MappingsCreated);
            return Ok(t);
        };
        match self.promote(owner) {
            Some((mid, ends)) => Ok(self
                .create_session(mid, ends, remote, proto, Dir::Out, now, hash, c)
                .1),
            None => {
                self.unhost(int.addr, false, 0);
                Err(DropReason::Internal)
            }
        }
    }

    /// The record of `owner`'s mapping, made now if the mapping is folded into its session
    /// (which keeps its place in the BIB no longer), and the mapping's endpoints.
    pub(super) fn promote(&mut self, owner: Owner) -> Option<(u32, Ends<A>)> {
        let sid = match owner {
            Owner::Mapping(mid) => {
                let m = self.mappings.get(mid)?;
                let ends = Ends {
                    held: m.int_addr,
                    int: m.int(&self.hosts)?,
                    ext: m.ext(),
                };
                return Some((mid, ends));
            }
            Owner::Session(sid) => sid,
        };
        let s = *self.sessions.get(sid)?;
        let ends = Ends {
            held: s.int_addr,
            int: s.int(&self.hosts)?,
            ext: s.ext(),
        };
        // All it has been is this one session's: its expiry, and this remote address.
        let stamp = Stamp::of(s.expires);
        let mid = self.mappings.insert(Mapping {
            int_addr: s.int_addr,
            ext_addr: s.ext_addr,
            sessions: 1,
            expires: stamp,
            remote: RemoteRef {
                addr: s.remote_addr,
                sessions: 1,
                expires: stamp,
            },
            int_port: s.int_port,
            ext_port: s.ext_port,
            proto: s.proto(),
        });
        for outside in [false, true] {
            let h = ends_bib_hash(&self.hasher, s.proto(), ends.int, ends.ext, outside);
            self.bib_replace(
                h,
                owner.bib_val(outside),
                Owner::Mapping(mid).bib_val(outside),
            );
        }
        if let Some(s) = self.sessions.get_mut(sid) {
            s.map = mid;
        }
        self.folded = self.folded.saturating_sub(1);
        Some((mid, ends))
    }

    /// The mapping of an inside endpoint (RFC 4787 REQ-1: one per endpoint and protocol).
    /// `h` is its [`Napt::bib_hash`].
    pub(super) fn bib_by_inside(&self, proto: Proto, int: Endpoint<A>, h: u64) -> Option<Owner> {
        self.index_get(true, false, h, |v| {
            v & 2 == 0
                && self
                    .owner_ends(Owner::of_bib_val(v), proto)
                    .is_some_and(|(held, port, _)| {
                        port == int.port && self.hosts.addr(held) == Some(int.addr)
                    })
        })
        .map(Owner::of_bib_val)
    }

    /// The inside address (as held), inside port and outside endpoint of `owner`'s mapping
    /// if it is one for `proto`.
    #[inline]
    fn owner_ends(&self, owner: Owner, proto: Proto) -> Option<(u32, u16, Endpoint)> {
        match owner {
            Owner::Mapping(mid) => {
                let m = self.mappings.get(mid).filter(|m| m.proto == proto)?;
                Some((m.int_addr, m.int_port, m.ext()))
            }
            Owner::Session(sid) => {
                let s = self
                    .sessions
                    .get(sid)
                    .filter(|s| s.map == NO_MAP && s.proto() == proto)?;
                Some((s.int_addr, s.int_port, s.ext()))
            }
        }
    }

    /// The mapping that holds an outside endpoint.
    pub(super) fn bib_by_outside(&self, proto: Proto, ext: Endpoint) -> Option<Owner> {
        let h = self.bib_hash(proto, (u64::from(ext.addr), 0), ext.port, true);
        self.index_get(true, true, h, |v| {
            v & 2 == 2
                && self
                    .owner_ends(Owner::of_bib_val(v), proto)
                    .is_some_and(|(_, _, e)| e == ext)
        })
        .map(Owner::of_bib_val)
    }

    pub(super) fn remove_mapping(&mut self, mid: u32, now: Time) {
        // Out of its slab only after its index entries, as in `remove_session`.
        let Some(&m) = self.mappings.get(mid) else {
            return;
        };
        if self.events.on() {
            if let Some(int) = m.int(&self.hosts) {
                self.endpoint_event(now, EventKind::MappingDeleted, m.proto, int, m.ext());
            }
        }
        for outside in [false, true] {
            if let Some(h) = m.bib_hash(&self.hasher, outside, &self.hosts) {
                self.index_remove(true, h, Owner::Mapping(mid).bib_val(outside));
            }
        }
        self.mappings.remove(mid);
        self.release_mapping(m.proto, m.int_addr, m.int_port, m.ext(), now);
    }

    /// What a mapping held beyond its records: its port, and its count at its host (the host
    /// itself with its last mapping).
    pub(super) fn release_mapping(
        &mut self,
        proto: Proto,
        int_held: u32,
        int_port: u16,
        ext: Endpoint,
        now: Time,
    ) {
        // A static BIB entry's port stays taken (`forward.rs`).
        let pooled = !self.forwards.holds(proto, ext);
        let freed = match self.pool_index.get(&ext.addr).filter(|_| pooled) {
            Some(&ix) => self.free_port(ix, proto, ext.port, now),
            None => None,
        };
        if let (Some((first, last)), true) = (freed, self.events.on()) {
            // Named before the host goes (its number is reused at once).
            if let Some(a) = self.hosts.addr(int_held) {
                let kind = EventKind::PortBlockReleased;
                self.block_event(now, kind, proto, a, ext.addr, first, last);
            }
        }
        let Some(num) = self.hosts.number_of_held(int_held) else {
            return;
        };
        let mut gone = false;
        if let Some(h) = self.hosts.get_mut(num) {
            h.mappings = h.mappings.saturating_sub(1);
            gone = h.mappings == 0;
        }
        if gone {
            if self.events.on() {
                if let Some(a) = self.hosts.addr(int_held) {
                    let int = Endpoint {
                        addr: a,
                        port: int_port,
                    };
                    let ext = Endpoint {
                        addr: ext.addr,
                        port: 0,
                    };
                    self.endpoint_event(now, EventKind::HostUnbound, proto, int, ext);
                }
            }
            self.release_host(num);
        }
    }
}
