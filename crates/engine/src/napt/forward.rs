//! Static BIB entries (port forwarding, [`crate::config::PortForward`]): an inside endpoint
//! reachable from outside at a fixed pool endpoint, and whose own flows leave from it.
//!
//! RFC 6146 1.2.2 (NAT64: IPv4-initiated communication to IPv6 hosts through statically
//! configured bindings) and the static NAPT entries of NAT44 gateways. What differs from a
//! dynamic mapping is only where the mapping comes from:
//! - outbound, a new mapping of the inside endpoint takes its forwarded outside endpoint
//!   instead of a port from the pool ([`Napt::create_out`]);
//! - inbound, a packet to the forwarded outside endpoint with no mapping creates one (and its
//!   session) toward the inside endpoint, whatever the filtering policy: the operator opened
//!   it on purpose (RFC 4787 REQ-8's filtering is about mappings the inside made);
//! - the forwarded ports are taken from the pool when the table is built and never return to
//!   it ([`Napt::release_mapping`]), so no dynamic mapping takes one.
//!
//! The mapping and its sessions are otherwise ordinary: they expire with their sessions, are
//! listed by `xlat show sessions`, logged, and carried by the fast path.

use hashbrown::HashMap;

use crate::config::PortForward;
use crate::counters::{Counters, DropReason, Event};
use crate::events::EventKind;
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::tcp::{self as tcpsm, Dir};
use crate::Time;

use super::mapping::{Ends, Owner, NO_MAP};
use super::{Napt, Translation};

/// Both directions of the static BIB entries of one translator.
pub(super) struct Forwards<A> {
    by_ext: HashMap<(Proto, Endpoint), Endpoint<A>>,
    by_int: HashMap<(Proto, Endpoint<A>), Endpoint>,
}

impl<A> Default for Forwards<A> {
    fn default() -> Self {
        Forwards {
            by_ext: HashMap::new(),
            by_int: HashMap::new(),
        }
    }
}

impl<A: InsideAddr> Forwards<A> {
    /// The outside endpoint forwarded to `int`, if any.
    #[inline]
    pub(super) fn outside_of(&self, proto: Proto, int: Endpoint<A>) -> Option<Endpoint> {
        if self.by_int.is_empty() {
            return None;
        }
        self.by_int.get(&(proto, int)).copied()
    }

    /// The inside endpoint `ext` forwards to, if any.
    #[inline]
    pub(super) fn inside_of(&self, proto: Proto, ext: Endpoint) -> Option<Endpoint<A>> {
        if self.by_ext.is_empty() {
            return None;
        }
        self.by_ext.get(&(proto, ext)).copied()
    }

    /// True when `ext` is a forwarded outside endpoint (its port never returns to the pool).
    #[inline]
    pub(super) fn holds(&self, proto: Proto, ext: Endpoint) -> bool {
        !self.by_ext.is_empty() && self.by_ext.contains_key(&(proto, ext))
    }

    fn insert(&mut self, proto: Proto, int: Endpoint<A>, ext: Endpoint) {
        self.by_ext.insert((proto, ext), int);
        self.by_int.insert((proto, int), ext);
    }

    /// Adds `entries` (their ports taken from the pool already).
    pub(super) fn add(&mut self, entries: &[Entry<A>]) {
        for &(proto, int, ext) in entries {
            self.insert(proto, int, ext);
        }
    }

    /// Removes the entry `ext` -> `int`.
    pub(super) fn remove(&mut self, proto: Proto, int: Endpoint<A>, ext: Endpoint) {
        self.by_ext.remove(&(proto, ext));
        if self.by_int.get(&(proto, int)) == Some(&ext) {
            self.by_int.remove(&(proto, int));
        }
    }

    /// Against the entries `list` would make: those of `self` it drops or leads elsewhere,
    /// and those it adds or changes, as (protocol, inside, outside).
    pub(super) fn diff(&self, list: &[PortForward<A>]) -> (Vec<Entry<A>>, Vec<Entry<A>>) {
        let mut wanted: HashMap<(Proto, Endpoint), Endpoint<A>> = HashMap::new();
        for f in list {
            for (int, ext) in f.pairs() {
                wanted.insert((f.proto, ext), int);
            }
        }
        let dropped = self
            .by_ext
            .iter()
            .filter(|&(k, int)| wanted.get(k) != Some(int))
            .map(|(&(p, ext), &int)| (p, int, ext))
            .collect();
        let added = wanted
            .iter()
            .filter(|&(k, int)| self.by_ext.get(k) != Some(int))
            .map(|(&(p, ext), &int)| (p, int, ext))
            .collect();
        (dropped, added)
    }
}

/// A static BIB entry: protocol, inside and outside endpoint.
pub(super) type Entry<A> = (Proto, Endpoint<A>, Endpoint);

impl<A: InsideAddr> Napt<A> {
    /// Installs the static BIB entries `list` (checked by the configuration: outside
    /// addresses in the pool, no endpoint twice) and takes their ports from the pool.
    pub fn set_forwards(&mut self, list: &[PortForward<A>]) {
        for f in list {
            for (int, ext) in f.pairs() {
                if let Some(p) = self.port_map(ext.addr, f.proto) {
                    p.take_exact(ext.port);
                }
                self.forwards.insert(f.proto, int, ext);
            }
        }
    }

    /// An inbound packet from `remote` to the forwarded outside endpoint `ext`, which has no
    /// mapping: makes the mapping to `int` and its session, as the inside endpoint's first
    /// outbound packet would have (TCP: only a SYN opens it, RFC 6146 3.5.2.2).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_forwarded(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        ext: Endpoint,
        remote: Endpoint,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        if proto == Proto::Tcp && tcp_flags & tcpsm::SYN == 0 {
            return Err(DropReason::TcpNoSession);
        }
        if self.sessions.len >= self.cfg.limits.max_sessions as usize && !self.reclaim(now, c) {
            return Err(DropReason::SessionLimit);
        }
        let host = self.host_for(int.addr, 1)?;
        let ends = Ends {
            held: host.held,
            int,
            ext,
        };
        if host.new && self.events.on() {
            let bound = Endpoint {
                addr: ext.addr,
                port: 0,
            };
            self.endpoint_event(now, EventKind::HostBound, proto, int, bound);
        }
        // The session's index entry is by the inbound tuple, as `create_in` makes it.
        let key = crate::flow::FlowKey::In(proto, ext, remote);
        let hash = self.hash(&key);
        let (sid, t) = self.create_session(NO_MAP, ends, remote, proto, Dir::In, now, hash, c);
        let h_int = self.bib_hash(proto, int.addr.words(), int.port, false);
        let placed = self.bib.insert(h_int, Owner::Session(sid).bib_val(false));
        debug_assert!(placed, "index sized for limits.max_sessions");
        let h_ext = self.bib_hash(proto, (u64::from(ext.addr), 0), ext.port, true);
        self.insert_later(true, h_ext, Owner::Session(sid).bib_val(true));
        self.folded += 1;
        c.event(Event::MappingsCreated);
        Ok(t)
    }
}
