//! Finding the session of a packet tuple in the session index, and the batch stages'
//! prefetches that start the memory accesses of a lookup (or of a new session) early
//! (`Engine::process_batch`: stage 1 the index slot, stage 2 the session, 2b its host).
//! Lazy expiry: a session found past its time is removed ([`Napt::live`]).

use crate::counters::{Counters, Event};
use crate::events::EndReason;
use crate::flow::{FlowKey, InsideAddr};
use crate::Time;

use super::{Napt, NO_CAND};

impl<A: InsideAddr> Napt<A> {
    /// Batch stage 1: starts fetching the index slot of a tuple; returns its hash.
    #[inline(always)]
    pub fn prefetch_index(&self, key: &FlowKey<A>) -> u64 {
        let h = self.hash(key);
        self.flows.prefetch(matches!(key, FlowKey::In(..)), h);
        h
    }

    /// Batch stage 2: starts fetching the session the index (probably) points to and
    /// returns its id, the candidate stage 3 tries before probing the index again
    /// ([`Napt::find`]); [`NO_CAND`] when the index has none for `hash`, the hash of `key`.
    #[inline]
    pub fn prefetch_session(&self, key: &FlowKey<A>, hash: u64) -> u32 {
        // The side's table holds session ids (its values without the direction bit).
        match self.flows.peek(matches!(key, FlowKey::In(..)), hash) {
            Some(sid) => {
                self.sessions.prefetch(sid);
                sid
            }
            None => self.prefetch_waiting(hash),
        }
    }

    /// More inside hosts than stay in cache ([`crate::hosts::CACHED`])?
    #[inline]
    pub fn hosts_beyond_cache(&self) -> bool {
        self.hosts.beyond_cache()
    }

    /// Batch stage 2b: starts fetching the host record of session `sid`, the candidate
    /// stage 2 returned, when it holds its inside address as a host's number (NAT64:
    /// stage 3 reads the address to check or write it). Reads the session, whose line stage
    /// 2 started fetching.
    #[inline]
    pub fn prefetch_host(&self, sid: u32) {
        if let Some(s) = self.sessions.get(sid) {
            self.hosts.prefetch(s.int_addr);
        }
    }

    /// [`Napt::prefetch_session`] for a session created a moment ago whose inbound entry
    /// still waits ([`Napt::insert_later`]). Out of line: established traffic finds its
    /// entry in the index.
    #[inline(never)]
    fn prefetch_waiting(&self, hash: u64) -> u32 {
        if !self.may_wait(hash) {
            return NO_CAND;
        }
        match self.pending.iter().find(|p| p.hash == hash && !p.bib) {
            Some(p) => {
                self.sessions.prefetch(p.val >> 1);
                p.val >> 1
            }
            None => NO_CAND,
        }
    }

    /// Batch stage 2 for a tuple the session index has no candidate for (most likely a new
    /// flow): starts fetching the BIB slot its mapping lookup will probe -- the inside
    /// endpoint's going out (RFC 4787 REQ-1: the mapping a new session reuses, or where a new
    /// one goes), the outside endpoint's coming in -- so creating the session waits for one
    /// memory access less. Out of line: established traffic never calls it.
    /// Also the line after the session index's home slot for `hash` (the tuple's, from stage
    /// 1): the full path's lookup of a new tuple and the insertion that follows read the run
    /// up to an empty slot.
    #[inline(never)]
    pub fn prefetch_new(&self, key: &FlowKey<A>, hash: u64) {
        let inbound = matches!(key, FlowKey::In(..));
        self.flows.prefetch_next_line(inbound, hash);
        let h = match *key {
            FlowKey::Out(proto, int, _) => {
                // A new mapping looks its host up by address.
                self.hosts.prefetch_addr(int.addr);
                self.bib_hash(proto, int.addr.words(), int.port, false)
            }
            FlowKey::In(proto, ext, _) => {
                self.bib_hash(proto, (u64::from(ext.addr), 0), ext.port, true)
            }
        };
        self.bib.prefetch(inbound, h);
        self.bib.prefetch_next_line(inbound, h);
    }

    /// The session of `key`, whose hash is `hash`: `cand`, the session batch stage 2 peeked
    /// at ([`Napt::prefetch_session`]), when it is that session -- then the index is not
    /// probed a second time -- else an index lookup (of session ids: the side's table).
    /// Trying `cand` first is safe even if earlier packets of the batch changed the index
    /// since: a session whose tuple is `key` is the one the index holds under `key`.
    ///
    /// An IPv6 inside address ([`Hosts`](crate::hosts::Hosts)) is compared once, with the session found by
    /// the rest of the tuple: in the probe's comparison it made that too large to inline (a
    /// call per candidate).
    #[inline(always)]
    pub(super) fn find(&self, key: &FlowKey<A>, hash: u64, cand: u32) -> Option<u32> {
        let sessions = &self.sessions;
        let inbound = matches!(key, FlowKey::In(..));
        let eq = |sid: u32| {
            sessions
                .get(sid)
                .is_some_and(|s| s.matches(key, inbound, None))
        };
        let sid = if cand != NO_CAND && eq(cand) {
            cand
        } else if let Some(sid) = self.flows.get_ids(inbound, hash, eq) {
            sid
        } else if inbound {
            // Only inbound entries wait.
            self.waiting(false, hash, |v| eq(v >> 1))? >> 1
        } else {
            return None;
        };
        if self.inside_addr_matches(sid, key) {
            Some(sid)
        } else {
            self.find_exact(key, hash)
        }
    }

    /// Is the inside address of session `sid` the one of the outbound tuple `key`? True
    /// when [`Session::matches`](super::session::Session::matches) compared it already (held as itself) or `key` is inbound.
    #[inline(always)]
    fn inside_addr_matches(&self, sid: u32, key: &FlowKey<A>) -> bool {
        match *key {
            FlowKey::Out(_, int, _) => {
                A::from_held(0).is_some()
                    || self
                        .sessions
                        .get(sid)
                        .is_some_and(|s| self.hosts.addr(s.int_addr) == Some(int.addr))
            }
            FlowKey::In(..) => true,
        }
    }

    /// The session of `key` (hash `h`), whole tuples compared: [`Napt::find`] when another
    /// host's session matched all but the inside address. Out of line: rare.
    #[inline(never)]
    fn find_exact(&self, key: &FlowKey<A>, h: u64) -> Option<u32> {
        let (sessions, hosts) = (&self.sessions, &self.hosts);
        let inbound = matches!(key, FlowKey::In(..));
        self.index_get(false, inbound, h, |v| {
            sessions
                .get(v >> 1)
                .is_some_and(|s| s.matches(key, v & 1 == 1, Some(hosts)))
        })
        .map(|v| v >> 1)
    }

    /// The session of `key` (whose hash is `h`), live or not.
    pub(super) fn lookup(&self, key: &FlowKey<A>, h: u64) -> Option<u32> {
        self.find_exact(key, h)
    }

    /// The session a packet tuple belongs to, if it is live; an expired one found here is
    /// removed (lazy expiry).
    pub(super) fn live(
        &mut self,
        key: &FlowKey<A>,
        hash: u64,
        now: Time,
        c: &mut Counters,
    ) -> Option<u32> {
        let sid = self.lookup(key, hash)?;
        // An offloaded session's last packets may have crossed the fast path only: the sweep
        // asks it before expiring the session (`offload_seen`), so it is live until then.
        if self
            .sessions
            .get(sid)
            .is_some_and(|s| s.expires > now || s.offloaded())
        {
            return Some(sid);
        }
        self.remove_session(sid, now, EndReason::Expired);
        c.event(Event::SessionsExpired);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{Endpoint, Proto};
    use crate::napt::tests::{napt, REMOTE};

    /// Stage 3 tries the entry stage 2 peeked at ([`Napt::find`]); by then that session may
    /// be gone and its slab slot another flow's. The candidate must then be passed over:
    /// a's packet, planned while a lived, arrives after a expired and b took a's slot.
    #[test]
    fn a_stale_candidate_is_never_taken_for_another_session() {
        let mut n = napt(10);
        let mut c = Counters::default();
        let now = Time::from_secs(1);
        let a = Endpoint {
            addr: 0xc612_0001,
            port: 2000,
        };
        let b = Endpoint {
            addr: 0xc612_0002,
            port: 3000,
        };
        n.outbound(now, Proto::Udp, a, REMOTE, 0, &mut c).unwrap();
        let key_a = FlowKey::Out(Proto::Udp, a, REMOTE);
        let h_a = n.hash(&key_a);
        let cand = n.prefetch_session(&key_a, h_a);
        assert_ne!(cand, NO_CAND, "stage 2 finds a's entry");
        let later = now.plus_secs(100_000);
        n.expire(later, 10_000, &mut c);
        assert_eq!(n.sessions.len, 0);
        let ext_b = n.outbound(later, Proto::Udp, b, REMOTE, 0, &mut c).unwrap();
        let h_b = n.hash(&FlowKey::Out(Proto::Udp, b, REMOTE));
        let key_b = FlowKey::Out(Proto::Udp, b, REMOTE);
        assert_eq!(
            n.prefetch_session(&key_b, h_b),
            cand,
            "b's entry is the one a had"
        );
        // a's packet with the stale candidate: a new session for a, not b's translation.
        let tr = n.lane_or_new(later, &key_a, h_a, cand, 0, &mut c).unwrap();
        assert_eq!(tr.int, a);
        assert_ne!(tr.ext, ext_b);
        assert_eq!(n.sessions.len, 2);
        // And the lookup-only lane, with the same stale candidate, finds a's new session.
        let again = n.lane(later, &key_a, h_a, cand, 0).unwrap();
        assert_eq!((again.int, again.ext), (a, tr.ext));
    }
}
