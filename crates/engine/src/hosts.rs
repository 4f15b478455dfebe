//! The NAPT's inside hosts (RFC 4787 REQ-2 paired pooling: a host keeps one outside address;
//! `limits.max_sessions_per_host`): a record per host, found by its inside address or by its
//! number, with no stall however many hosts come.
//!
//! Records live in chunks of [`HOST_CHUNK`] that never move, under a host number; a released
//! number goes to the next new host. Sessions and mappings hold the inside address in 4 bytes
//! (`InsideAddr::as_held`): an IPv4 address as itself, an IPv6 address as its host's number,
//! so reading a NAT64 session's address is two loads here ([`Hosts::addr`]).
//!
//! Finding a host by address is a [`FlowIndex`] of host numbers under a seeded hash of the
//! address (keys are chosen by whoever sends packets). The index grows by doubling, and the
//! entries move to the new table a few at a time as hosts come and go ([`MIGRATE_STEP`]), so
//! no packet waits for the whole table to be rebuilt: a hash map of hosts that rehashed in
//! one go held up the packet that made the 3,670,017th host for 132 ms (32 ms at the
//! 917,505th, within the default `max_sessions`; tables prefaulted), and a spray of inside
//! source addresses reaches that.

use crate::index::{FlowIndex, KeyHasher};
use crate::napt::InsideAddr;

/// Host records per chunk: a translator has far fewer hosts than sessions.
const HOST_CHUNK: usize = 4096;
/// Index entries a new index is made for at first; it doubles from there.
const FIRST_ROOM: usize = 64;
/// Entries of the old index copied to the new one at each host made or released while the
/// index grows: at least 2, so the copy is done before the new index fills in its turn.
const MIGRATE_STEP: usize = 4;
/// Slots of the old index looked at per entry copied, at most (its emptier stretches).
const MIGRATE_SCAN: usize = 4;

/// One inside host.
#[derive(Clone, Copy)]
pub(crate) struct HostRec<A> {
    pub addr: A,
    /// Pool index of the paired (NAPT) or bound (pool mode) outside address.
    pub pool: u32,
    pub mappings: u32,
    pub sessions: u32,
    live: bool,
}

/// The hosts of one NAPT.
pub(crate) struct Hosts<A> {
    chunks: Vec<Box<[HostRec<A>; HOST_CHUNK]>>,
    /// Numbers given out so far, released ones included.
    issued: u32,
    /// Released numbers, reused first. Its room grows as numbers are issued, so releasing
    /// (in an expiry pass) never allocates.
    free: Vec<u32>,
    /// Live hosts.
    len: usize,
    /// Host numbers by address.
    index: FlowIndex,
    /// The index before it last grew, while its entries are copied over; `index` is looked
    /// in first. Nothing is inserted into or removed from it: a host released meanwhile
    /// leaves a stale entry that lookups and the copy recognise (not live, or another
    /// address).
    old: Option<(FlowIndex, usize)>,
    /// Numbers stay below this (`limits.max_sessions`: a host has a session).
    max_hosts: usize,
    hasher: KeyHasher,
}

impl<A: InsideAddr> Hosts<A> {
    pub fn new(max_hosts: usize, seed: u64) -> Self {
        let max_hosts = max_hosts.max(1);
        Hosts {
            chunks: Vec::new(),
            issued: 0,
            free: Vec::new(),
            len: 0,
            index: FlowIndex::growing(FIRST_ROOM.min(max_hosts), max_hosts),
            old: None,
            max_hosts,
            hasher: KeyHasher::new(seed ^ 0x2545_f491_4f6c_dd1d),
        }
    }

    #[inline]
    fn hash(&self, a: A) -> u64 {
        Self::hash_with(&self.hasher, a)
    }

    #[inline(always)]
    fn rec(&self, num: u32) -> Option<&HostRec<A>> {
        self.chunks
            .get((num / HOST_CHUNK as u32) as usize)?
            .get(num as usize % HOST_CHUNK)
    }

    #[inline(always)]
    fn rec_mut(&mut self, num: u32) -> Option<&mut HostRec<A>> {
        self.chunks
            .get_mut((num / HOST_CHUNK as u32) as usize)?
            .get_mut(num as usize % HOST_CHUNK)
    }

    /// The address a session's or mapping's `held` value stands for (for a released number,
    /// the address it last had: nothing holds one).
    #[inline(always)]
    pub fn addr(&self, held: u32) -> Option<A> {
        match A::from_held(held) {
            Some(a) => Some(a),
            None => self.rec(held).map(|r| r.addr),
        }
    }

    /// How sessions and mappings hold the address of host `num`.
    #[cfg(test)]
    pub fn held(&self, num: u32) -> Option<u32> {
        let a = self.get(num)?.addr;
        Some(a.as_held().unwrap_or(num))
    }

    /// The number of the live host with address `a`.
    #[inline]
    pub fn number(&self, a: A) -> Option<u32> {
        let h = self.hash(a);
        // Entries of `index` are all live hosts'; `old` may hold stale ones. The first
        // candidate is nearly always the host: tried with one compare a slot before the
        // full probe.
        let is = |num: u32| self.rec(num).is_some_and(|r| r.addr == a);
        match self.index.peek(h) {
            Some(num) if is(num) => Some(num),
            // `peek` looks at one line's near entries: no candidate there is not absence.
            _ => self.index.get(h, is).or_else(|| self.in_old(a, h)),
        }
    }

    /// [`Hosts::number`] in the index being copied from. Out of line: rare.
    #[inline(never)]
    fn in_old(&self, a: A, h: u64) -> Option<u32> {
        let (old, _) = self.old.as_ref()?;
        old.get(h, |num| self.get(num).is_some_and(|r| r.addr == a))
    }

    /// The number of the host a session's or mapping's `held` value names.
    pub fn number_of_held(&self, held: u32) -> Option<u32> {
        match A::from_held(held) {
            Some(a) => self.number(a),
            None => self.get(held).map(|_| held),
        }
    }

    /// Host `num`, if live.
    pub fn get(&self, num: u32) -> Option<&HostRec<A>> {
        self.rec(num).filter(|r| r.live)
    }

    /// Host `num`, if live.
    pub fn get_mut(&mut self, num: u32) -> Option<&mut HostRec<A>> {
        self.rec_mut(num).filter(|r| r.live)
    }

    /// Adds a host with address `a` (not there yet); returns its number, or `None` when
    /// `max_hosts` are live.
    pub fn insert(&mut self, a: A, pool: u32, mappings: u32, sessions: u32) -> Option<u32> {
        if self.len >= self.max_hosts {
            return None;
        }
        let rec = HostRec {
            addr: a,
            pool,
            mappings,
            sessions,
            live: true,
        };
        let num = match self.free.pop() {
            Some(n) => n,
            None => {
                let n = self.issued;
                if (n as usize).is_multiple_of(HOST_CHUNK) {
                    // Made on the heap: a chunk would pass through the stack.
                    let c = vec![rec; HOST_CHUNK].into_boxed_slice().try_into().ok()?;
                    self.chunks.push(c);
                }
                self.issued += 1;
                self.free.reserve(self.issued as usize - self.free.len());
                n
            }
        };
        *self.rec_mut(num)? = rec;
        self.len += 1;
        if self.len > self.index.room() {
            self.grow();
        }
        let placed = self.index.insert(self.hash(a), num);
        debug_assert!(placed, "the host index grows ahead of its hosts");
        self.migrate(MIGRATE_STEP);
        Some(num)
    }

    /// Releases host `num` (its last mapping has gone); its number goes to the next host.
    pub fn remove(&mut self, num: u32) {
        let Some(a) = self.get(num).map(|r| r.addr) else {
            return;
        };
        let hasher = self.hasher;
        let chunks = &self.chunks;
        // The entry is in `index` unless it is still waiting in `old` to be copied; there it
        // stays, stale, until `old` goes.
        self.index.remove(Self::hash_with(&hasher, a), num, |v| {
            let r = chunks
                .get((v / HOST_CHUNK as u32) as usize)?
                .get(v as usize % HOST_CHUNK)?;
            Some(Self::hash_with(&hasher, r.addr))
        });
        if let Some(r) = self.rec_mut(num) {
            r.live = false;
        }
        self.free.push(num);
        self.len -= 1;
        self.migrate(MIGRATE_STEP);
    }

    /// The index's hash of address `a` (the fourth word marks a host key).
    #[inline]
    fn hash_with(hasher: &KeyHasher, a: A) -> u64 {
        let (w0, w1) = a.words();
        hasher.hash([w0, w1, 0, 4 << 40])
    }

    /// Live hosts.
    pub fn len(&self) -> usize {
        self.len
    }

    /// A new index of twice the room; the entries follow a few at a time ([`Hosts::migrate`]).
    /// Should the old one still be copying, that finishes first -- it cannot be: its `room`
    /// entries are copied [`MIGRATE_STEP`] a host (or [`MIGRATE_SCAN`] slots), and `room`
    /// more hosts come before the new index is full.
    #[cold]
    fn grow(&mut self) {
        if self.old.is_some() {
            self.migrate(usize::MAX);
        }
        let room = self.index.room().saturating_mul(2).min(self.max_hosts);
        let new = FlowIndex::growing(room, self.max_hosts);
        self.old = Some((std::mem::replace(&mut self.index, new), 0));
    }

    /// Copies up to `n` live entries of the old index to the new one (the old one goes when
    /// all are copied).
    fn migrate(&mut self, n: usize) {
        let Some((old, mut cursor)) = self.old.take() else {
            return;
        };
        let (mut copied, mut scanned) = (0, 0);
        while copied < n && scanned < n.saturating_mul(MIGRATE_SCAN) && cursor < old.slot_count() {
            scanned += 1;
            if let Some(num) = old.value_at(cursor) {
                if let Some(a) = self.get(num).map(|r| r.addr) {
                    let h = self.hash(a);
                    if self.index.get(h, |v| v == num).is_none() {
                        let placed = self.index.insert(h, num);
                        debug_assert!(placed, "the new index has room for the old");
                        copied += 1;
                    }
                }
            }
            cursor += 1;
        }
        if cursor < old.slot_count() {
            self.old = Some((old, cursor));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    proptest::proptest! {
        /// Hosts agree with a map model while they are made and released in numbers that
        /// make the index grow several times, released numbers are reused, and the copy to
        /// each new index runs between operations.
        #[test]
        fn hosts_match_a_model(ops in proptest::collection::vec((proptest::bool::weighted(0.7), 0u128..20_000), 1..3000)) {
            let mut hosts: Hosts<u128> = Hosts::new(100_000, 7);
            let mut model: HashMap<u128, u32> = HashMap::new();
            for (add, a) in ops {
                if add {
                    if model.contains_key(&a) {
                        continue;
                    }
                    let num = hosts.insert(a, 1, 1, 1).unwrap();
                    proptest::prop_assert!(model.values().all(|&n| n != num), "a number in use given out");
                    model.insert(a, num);
                } else if let Some(num) = model.remove(&a) {
                    hosts.remove(num);
                    proptest::prop_assert_eq!(hosts.number(a), None, "released, not found");
                }
                proptest::prop_assert_eq!(hosts.len(), model.len());
            }
            for (&a, &num) in &model {
                proptest::prop_assert_eq!(hosts.number(a), Some(num));
                proptest::prop_assert_eq!(hosts.addr(num), Some(a));
                proptest::prop_assert_eq!(hosts.number_of_held(num), Some(num));
            }
            proptest::prop_assert_eq!(hosts.number(20_001), None);
        }
    }

    #[test]
    fn growing_never_copies_more_than_a_step_per_host() {
        // 100,000 hosts: the index doubles 11 times from 64, and no host made moves more
        // than MIGRATE_STEP entries (a hash map that rehashed in one go moved all of them).
        let mut hosts: Hosts<u32> = Hosts::new(1_000_000, 1);
        let mut grew = 0;
        for a in 0..100_000u32 {
            let (room, before) = (hosts.index.room(), hosts.index.len());
            let num = hosts.insert(a, 0, 1, 1).unwrap();
            assert_eq!(
                hosts.held(num),
                Some(a),
                "IPv4 hosts are held as their address"
            );
            let moved = if hosts.index.room() == room {
                hosts.index.len() - before
            } else {
                grew += 1;
                hosts.index.len()
            };
            assert!(
                moved <= 1 + MIGRATE_STEP,
                "{moved} entries moved for one host"
            );
        }
        assert_eq!(grew, 11);
        // The last growth (at 81,911 hosts) copies its 81,911 entries up to 4 a host (fewer
        // where 16 slots hold fewer): done ~21,000 hosts later, long before the new index
        // (room 163,830) fills.
        for a in 100_000..110_000u32 {
            hosts.insert(a, 0, 1, 1).unwrap();
        }
        assert!(hosts.old.is_none(), "the copy is done");
        assert!((0..100_000u32).all(|a| hosts.number(a).is_some()));
        assert_eq!(hosts.number_of_held(77), hosts.number(77));
        // Released and reused: the number goes to the next host, the old address is gone.
        let n5 = hosts.number(5).unwrap();
        hosts.remove(n5);
        assert_eq!(hosts.number(5), None);
        assert_eq!(hosts.insert(1_000_001, 0, 1, 1), Some(n5));
        assert_eq!(hosts.number(1_000_001), Some(n5));
    }

    #[test]
    fn no_more_hosts_than_the_limit() {
        let mut hosts: Hosts<u128> = Hosts::new(3, 1);
        assert!((0..3).all(|a| hosts.insert(a, 0, 1, 1).is_some()));
        assert_eq!(hosts.insert(3, 0, 1, 1), None);
    }
}
