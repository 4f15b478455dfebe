//! Index entries whose insertion waits, and the index access that sees them. A new session's
//! and a new mapping's outside entries land in random slots of large tables; they wait in a
//! short list ([`Napt::insert_later`]) while their slots are fetched, and go in together.
//! Lookups ([`Napt::index_get`]) and removals ([`Napt::index_remove`]) see waiting entries,
//! so nothing else can tell.

use crate::flow::{flow_hash, InsideAddr};

use super::mapping::Owner;
use super::Napt;

/// An index entry whose insertion waits: into the BIB (`bib`) or the session index.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Pending {
    pub(super) bib: bool,
    pub(super) hash: u64,
    pub(super) val: u32,
}

/// How many index insertions may wait ([`Napt::insert_later`]).
pub(super) const PENDING_MAX: usize = 32;

impl<A: InsideAddr> Napt<A> {
    /// Inserts `val` under `hash` into the BIB (`bib`) or the session index later: starts
    /// fetching its slot now and inserts when [`PENDING_MAX`] entries wait. The inside
    /// entries a new session or mapping is found by right away go in at once; its outside
    /// entries (the session by its inbound tuple, the mapping by its outside endpoint) land in
    /// random slots of large tables, and a run of new sessions then waits for those cache
    /// misses one after the other. Lookups see waiting entries ([`Napt::index_get`]) and
    /// removals take them back ([`Napt::index_remove`]), so nothing else can tell. Only
    /// outside entries wait.
    pub(super) fn insert_later(&mut self, bib: bool, hash: u64, val: u32) {
        if self.pending.len() >= PENDING_MAX {
            self.flush();
        }
        if bib {
            self.bib.prefetch(true, hash);
            self.bib.prefetch_next_line(true, hash);
        } else {
            self.flows.prefetch(true, hash);
            self.flows.prefetch_next_line(true, hash);
        }
        self.pending.push(Pending { bib, hash, val });
        let b = ((hash >> 16) & 0xff) as u8;
        if let Some(w) = self.pending_mask.get_mut(usize::from(b >> 6)) {
            *w |= 1 << (b & 63);
        }
    }

    /// Might an entry with this hash be waiting?
    #[inline]
    pub(super) fn may_wait(&self, hash: u64) -> bool {
        let b = ((hash >> 16) & 0xff) as u8;
        self.pending_mask
            .get(usize::from(b >> 6))
            .is_some_and(|w| w >> (b & 63) & 1 == 1)
    }

    /// Inserts the waiting index entries.
    pub fn flush(&mut self) {
        self.pending_mask = [0; 4];
        for p in self.pending.drain(..) {
            let placed = if p.bib {
                self.bib.insert(p.hash, p.val)
            } else {
                self.flows.insert(p.hash, p.val)
            };
            debug_assert!(placed, "index sized for limits.max_sessions");
        }
    }

    /// `FlowIndex::get` on the BIB (`bib`) or the session index, waiting entries included
    /// when the entry looked for is an outside one (`outside`: a session by its inbound
    /// tuple, a mapping by its outside endpoint) -- only those wait, so a lookup by an
    /// inside tuple or endpoint, which `eq` would never match with one of them, skips them.
    #[inline]
    pub(super) fn index_get(
        &self,
        bib: bool,
        outside: bool,
        hash: u64,
        eq: impl Fn(u32) -> bool + Copy,
    ) -> Option<u32> {
        let found = if bib {
            self.bib.get(outside, hash, eq)
        } else {
            self.flows.get(outside, hash, eq)
        };
        if found.is_some() || !outside {
            return found;
        }
        self.waiting(bib, hash, eq)
    }

    /// The waiting entry `eq` accepts under `hash`, if any. Out of line: established traffic
    /// finds its entry in the index.
    #[inline(never)]
    pub(super) fn waiting(&self, bib: bool, hash: u64, eq: impl Fn(u32) -> bool) -> Option<u32> {
        if !self.may_wait(hash) {
            return None;
        }
        self.pending
            .iter()
            .find(|p| p.hash == hash && p.bib == bib && eq(p.val))
            .map(|p| p.val)
    }

    /// `FlowIndex::remove`, or takes the entry back if it is still waiting.
    ///
    /// The index needs the hash of an entry it cannot place from its slot alone (see
    /// [`FlowIndex::remove`](crate::index::FlowIndex::remove)): the records of all entries must still be in their slabs.
    pub(super) fn index_remove(&mut self, bib: bool, hash: u64, val: u32) {
        let hasher = &self.hasher;
        let sessions = &self.sessions;
        let hosts = &self.hosts;
        let removed = if bib {
            let maps = &self.mappings;
            self.bib.remove(hash, val, |v| {
                let outside = v & 2 == 2;
                match Owner::of_bib_val(v) {
                    Owner::Mapping(mid) => maps.get(mid)?.bib_hash(hasher, outside, hosts),
                    Owner::Session(sid) => sessions.get(sid)?.bib_hash(hasher, outside, hosts),
                }
            })
        } else {
            self.flows.remove(hash, val, |v| {
                let key = sessions.get(v >> 1)?.key(v & 1 == 1, hosts)?;
                Some(flow_hash(hasher, &key))
            })
        };
        if !removed {
            let p = Pending { bib, hash, val };
            self.pending.retain(|q| *q != p);
        }
    }

    /// Gives the BIB entry `old` under `hash` the value `new`, in the index or waiting.
    pub(super) fn bib_replace(&mut self, hash: u64, old: u32, new: u32) {
        if !self.bib.replace(hash, old, new) {
            if let Some(p) = self
                .pending
                .iter_mut()
                .find(|p| p.bib && p.hash == hash && p.val == old)
            {
                p.val = new;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::counters::{Counters, DropReason};
    use crate::flow::{Endpoint, Proto};
    use crate::napt::tests::{napt, REMOTE};
    use crate::Time;

    /// Index entries that wait ([`Napt::insert_later`]) are found, and removed, as if they
    /// had been inserted: runs of new sessions longer than [`PENDING_MAX`], each looked up
    /// by its inbound tuple at once (and a second remote admitted through the waiting BIB
    /// entry of its mapping), all looked up again afterwards, then all expired.
    #[test]
    fn waiting_index_entries_behave_as_inserted() {
        let mut n = napt(1000);
        let mut c = Counters::default();
        let (r1, r2) = (
            REMOTE,
            Endpoint {
                addr: 0xcb00_7102,
                port: 80,
            },
        );
        let now = Time::from_secs(1);
        let mut seen = Vec::new();
        for i in 0..100u16 {
            let int = Endpoint {
                addr: 0xc612_0001 + u32::from(i % 3),
                port: 2000 + i,
            };
            let ext = n.outbound(now, Proto::Udp, int, r1, 0, &mut c).unwrap();
            assert_eq!(n.inbound(now, Proto::Udp, ext, r1, 0, &mut c), Ok(int));
            assert_eq!(n.inbound(now, Proto::Udp, ext, r2, 0, &mut c), Ok(int));
            seen.push((int, ext));
        }
        assert!(!n.pending.is_empty(), "the last run still waits");
        for &(int, ext) in &seen {
            assert_eq!(
                n.find_by_outside(now, Proto::Udp, ext, r1, &mut c),
                Some(int)
            );
            assert_eq!(
                n.find_by_outside(now, Proto::Udp, ext, r2, &mut c),
                Some(int)
            );
            assert_eq!(
                n.find_by_inside(now, Proto::Udp, int, r2, &mut c),
                Some(ext)
            );
        }
        assert_eq!(n.sessions.len, 200);
        let later = now.plus_secs(100_000);
        let mut removed = 0;
        for _ in 0..100 {
            removed += n.expire(later, 1000, &mut c);
        }
        assert_eq!(removed, 200);
        assert_eq!((n.sessions.len, n.mappings.len), (0, 0));
        assert!(
            n.pending.is_empty(),
            "waiting entries of removed sessions taken back"
        );
        assert_eq!((n.flows.len(), n.bib.len()), (0, 0), "no entry left behind");
        for &(_, ext) in &seen {
            assert_eq!(
                n.inbound(later, Proto::Udp, ext, r1, 0, &mut c),
                Err(DropReason::NoMapping)
            );
        }
    }
}
