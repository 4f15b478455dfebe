//! Records found by key, with no stall however many come: the NAPT's inside hosts
//! ([`crate::hosts`]) and its address-dependent filter's extra remote addresses (RFC 4787
//! REQ-8) grow with what outside and inside senders choose, so neither may rebuild a whole
//! table in the packet that fills it.
//!
//! Records live in chunks of [`CHUNK`] that never move, under a number; a released number
//! goes to the next new record (the released records are a list linked through themselves,
//! so nothing grows with the numbers issued: a free list in a vector that doubled copied
//! 16 MB in the packet that made the 4,194,305th record, 9.8 ms). Finding a record by key is a [`FlowIndex`] of numbers under
//! a seeded hash of the key (keys are chosen by whoever sends packets). The index grows by
//! doubling, and the entries move to the new table a few at a time as records come and go
//! ([`MIGRATE_STEP`]), so no packet waits for the whole table: a hash map of hosts that
//! rehashed in one go held up the packet that made the 3,670,017th host for 132 ms (tables
//! prefaulted), and a spray of inside source addresses reaches that.

use crate::index::{FlowIndex, KeyHasher};

/// Records per chunk.
const CHUNK: usize = CHUNK32 as usize;
/// [`CHUNK`] as the type of a record number.
const CHUNK32: u32 = 4096;
/// No released number to reuse.
const NO_FREE: u32 = u32::MAX;
/// Index entries a new index is made for at first; it doubles from there.
const FIRST_ROOM: usize = 64;
/// Entries of the old index copied to the new one at each record made or released while the
/// index grows: at least 2, so the copy is done before the new index fills in its turn.
const MIGRATE_STEP: usize = 4;
/// Slots of the old index looked at per entry copied, at most (its emptier stretches).
const MIGRATE_SCAN: usize = 4;
/// Slots of a copied-out index whose memory goes back to the kernel at each record made or
/// released (2 pages of 4 KiB).
const RETIRE_SLOTS: usize = 2 * 1024;
/// Slots of the next index made resident at each record made once the index is nearly full
/// (a 4 KiB page): done long before the growth ([`Records::prepare`]).
const PREPARE_SLOTS: usize = 1024;

/// What [`Records`] keeps: a record with its own key and a mark of being live.
pub(crate) trait Record: Copy {
    type Key: Copy + PartialEq;
    fn key(&self) -> Self::Key;
    fn live(&self) -> bool;
    /// Marks it released (not live), keeping `next`, the next released record's number, in
    /// a field a released record does not need.
    fn release(&mut self, next: u32);
    /// The `next` a released record keeps.
    fn next_free(&self) -> u32;
    /// The key as the four words the index's hash takes.
    fn words(key: Self::Key) -> [u64; 4];
}

/// Records of one kind, by number and by key.
pub(crate) struct Records<R> {
    chunks: Vec<Box<[R; CHUNK]>>,
    /// Numbers given out so far, released ones included.
    issued: u32,
    /// The last released number, reused first ([`NO_FREE`]: none); each released record
    /// names the one released before it.
    free: u32,
    /// Live records.
    len: usize,
    /// Numbers by key.
    index: FlowIndex,
    /// The index before it last grew, while its entries are copied over; `index` is looked
    /// in first. Nothing is inserted into or removed from it: a record released meanwhile
    /// leaves a stale entry that lookups and the copy recognise (not live, or another key).
    old: Option<(FlowIndex, usize)>,
    /// The index the next growth moves to, and how much of it is resident
    /// ([`Records::prepare`]).
    next: Option<(FlowIndex, usize)>,
    /// An old index all copied, and how far its memory has gone back ([`Records::retire`]).
    retiring: Option<(FlowIndex, usize)>,
    /// Live records stay no more than this.
    max: usize,
    hasher: KeyHasher,
}

impl<R: Record> Records<R> {
    pub fn new(max: usize, seed: u64) -> Self {
        let max = max.max(1);
        Records {
            chunks: Vec::new(),
            issued: 0,
            free: NO_FREE,
            len: 0,
            index: FlowIndex::growing(FIRST_ROOM.min(max), max),
            old: None,
            next: None,
            retiring: None,
            max,
            hasher: KeyHasher::new(seed),
        }
    }

    #[inline]
    fn hash(&self, key: R::Key) -> u64 {
        self.hasher.hash(R::words(key))
    }

    /// Record `num`, live or released (a released one keeps what it last held).
    #[inline(always)]
    pub fn slot(&self, num: u32) -> Option<&R> {
        self.chunks
            .get((num / CHUNK32) as usize)?
            .get(num as usize % CHUNK)
    }

    /// Starts fetching the index slots [`Records::number`] of `key` reads: the index's, and
    /// the old index's while it is being copied (a key not found is looked for there too).
    #[inline]
    pub fn prefetch_key(&self, key: R::Key) {
        let h = self.hash(key);
        self.index.prefetch(h);
        if let Some((old, _)) = &self.old {
            old.prefetch(h);
        }
    }

    /// Starts fetching record `num` ([`crate::mem::prefetch`]).
    #[inline(always)]
    pub fn prefetch(&self, num: u32) {
        if let Some(r) = self.slot(num) {
            crate::mem::prefetch(r);
        }
    }

    #[inline(always)]
    fn slot_mut(&mut self, num: u32) -> Option<&mut R> {
        self.chunks
            .get_mut((num / CHUNK32) as usize)?
            .get_mut(num as usize % CHUNK)
    }

    /// The number of the live record with key `key`.
    #[inline]
    pub fn number(&self, key: R::Key) -> Option<u32> {
        let h = self.hash(key);
        // Entries of `index` are all live records'; `old` may hold stale ones. The first
        // candidate is nearly always the record: tried with one compare a slot before the
        // full probe.
        let is = |num: u32| self.slot(num).is_some_and(|r| r.key() == key);
        match self.index.peek(h) {
            Some(num) if is(num) => Some(num),
            // `peek` looks at one line's near entries: no candidate there is not absence.
            _ => self.index.get(h, is).or_else(|| self.in_old(key, h)),
        }
    }

    /// [`Records::number`] in the index being copied from. Out of line: rare.
    #[inline(never)]
    fn in_old(&self, key: R::Key, h: u64) -> Option<u32> {
        let (old, _) = self.old.as_ref()?;
        old.get(h, |num| self.get(num).is_some_and(|r| r.key() == key))
    }

    /// Record `num`, if live.
    pub fn get(&self, num: u32) -> Option<&R> {
        self.slot(num).filter(|r| r.live())
    }

    /// Record `num`, if live.
    pub fn get_mut(&mut self, num: u32) -> Option<&mut R> {
        self.slot_mut(num).filter(|r| r.live())
    }

    /// The live record with key `key`.
    #[inline]
    pub fn find_mut(&mut self, key: R::Key) -> Option<&mut R> {
        let num = self.number(key)?;
        self.get_mut(num)
    }

    /// Adds `rec` (live; no record with its key yet); returns its number, or `None` when
    /// `max` are live.
    pub fn insert(&mut self, rec: R) -> Option<u32> {
        debug_assert!(rec.live());
        if self.len >= self.max {
            return None;
        }
        let num = match self.free {
            NO_FREE => {
                let n = self.issued;
                if (n as usize).is_multiple_of(CHUNK) {
                    let mut dead = rec;
                    dead.release(NO_FREE);
                    // Made on the heap: a chunk would pass through the stack.
                    let c = vec![dead; CHUNK].into_boxed_slice().try_into().ok()?;
                    self.chunks.push(c);
                }
                self.issued += 1;
                n
            }
            n => {
                self.free = self.slot(n)?.next_free();
                n
            }
        };
        *self.slot_mut(num)? = rec;
        self.len += 1;
        if self.len > self.index.room() {
            self.grow();
        }
        let placed = self.index.insert(self.hash(rec.key()), num);
        debug_assert!(placed, "the index grows ahead of its records");
        self.migrate(MIGRATE_STEP);
        self.retire();
        self.prepare();
        Some(num)
    }

    /// Releases record `num`; its number goes to the next record.
    pub fn remove(&mut self, num: u32) {
        let Some(key) = self.get(num).map(|r| r.key()) else {
            return;
        };
        let hasher = self.hasher;
        let chunks = &self.chunks;
        // The entry is in `index` unless it is still waiting in `old` to be copied; there it
        // stays, stale, until `old` goes.
        self.index.remove(hasher.hash(R::words(key)), num, |v| {
            let r = chunks
                .get((v / CHUNK32) as usize)?
                .get(v as usize % CHUNK)?;
            Some(hasher.hash(R::words(r.key())))
        });
        let next = self.free;
        if let Some(r) = self.slot_mut(num) {
            r.release(next);
            self.free = num;
        }
        self.len -= 1;
        self.migrate(MIGRATE_STEP);
        self.retire();
    }

    /// Live records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// A new index of twice the room; the entries follow a few at a time
    /// ([`Records::migrate`]). Should the old one still be copying, that finishes first -- it
    /// cannot be: its `room` entries are copied [`MIGRATE_STEP`] a record (or
    /// [`MIGRATE_SCAN`] slots), and `room` more records come before the new index is full.
    #[cold]
    fn grow(&mut self) {
        if self.old.is_some() {
            self.migrate(usize::MAX);
        }
        let new = match self.next.take() {
            Some((next, _)) => next,
            None => FlowIndex::growing(self.next_room(), self.max),
        };
        self.old = Some((std::mem::replace(&mut self.index, new), 0));
    }

    /// The room of the index the next growth makes.
    fn next_room(&self) -> usize {
        self.index.room().saturating_mul(2).min(self.max)
    }

    /// Once the index is seven eighths full, makes the next one and, a page at each record
    /// made, its memory resident (it needs ~1 page per 170 records): after a growth every
    /// record made writes ~5 random slots of the new index (its own and the ones copied),
    /// and faulting those pages in then held a batch of 64 new hosts 250-470 us instead of
    /// ~45. The price: the next index is resident over the last eighth before a growth
    /// (with half the records made ahead, `--bench memory` counted 6 B/session more for
    /// `nat44²` at 1M and 10M).
    fn prepare(&mut self) {
        let room = self.index.room();
        if self.len < room - room / 8 || room >= self.max {
            return;
        }
        match &mut self.next {
            None => self.next = Some((FlowIndex::growing(self.next_room(), self.max), 0)),
            Some((next, at)) if *at < next.slot_count() => {
                let to = at.saturating_add(PREPARE_SLOTS);
                next.populate(*at, to);
                *at = to;
            }
            Some(_) => {}
        }
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
                if let Some(key) = self.get(num).map(|r| r.key()) {
                    let h = self.hash(key);
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
        } else {
            // Dropped now, a retiring index's pages go back in one go: it cannot be there
            // still (its few hundred steps are done long before the next copy ends).
            self.retiring = Some((old, 0));
        }
    }

    /// Gives [`RETIRE_SLOTS`] more of the retiring index's memory back to the kernel, and
    /// drops it (nothing left resident to unmap) when all is.
    fn retire(&mut self) {
        let Some((old, at)) = self.retiring.as_mut() else {
            return;
        };
        let to = at.saturating_add(RETIRE_SLOTS);
        old.release(*at, to);
        *at = to;
        if to >= old.slot_count() {
            self.retiring = None;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A record keyed by a number, with a payload to check.
    #[derive(Clone, Copy)]
    struct Rec {
        key: u64,
        val: u32,
        live: bool,
    }

    impl Record for Rec {
        type Key = u64;
        fn key(&self) -> u64 {
            self.key
        }
        fn live(&self) -> bool {
            self.live
        }
        fn release(&mut self, next: u32) {
            self.live = false;
            self.val = next;
        }
        fn next_free(&self) -> u32 {
            self.val
        }
        fn words(key: u64) -> [u64; 4] {
            [key, 0, 0, 0]
        }
    }

    fn rec(key: u64) -> Rec {
        Rec {
            key,
            val: key as u32 ^ 0x5a5a,
            live: true,
        }
    }

    proptest::proptest! {
        /// Records agree with a map model while they are made and released in numbers that
        /// make the index grow several times, released numbers are reused, and the copy to
        /// each new index runs between operations.
        #[test]
        fn records_match_a_model(ops in proptest::collection::vec((proptest::bool::weighted(0.7), 0u64..20_000), 1..3000)) {
            let mut recs: Records<Rec> = Records::new(100_000, 7);
            let mut model: HashMap<u64, u32> = HashMap::new();
            for (add, k) in ops {
                if add {
                    if model.contains_key(&k) {
                        continue;
                    }
                    let num = recs.insert(rec(k)).unwrap();
                    proptest::prop_assert!(model.values().all(|&n| n != num), "a number in use given out");
                    model.insert(k, num);
                } else if let Some(num) = model.remove(&k) {
                    recs.remove(num);
                    proptest::prop_assert_eq!(recs.number(k), None, "released, not found");
                    proptest::prop_assert!(recs.get(num).is_none(), "released, not live");
                }
                proptest::prop_assert_eq!(recs.len(), model.len());
            }
            for (&k, &num) in &model {
                proptest::prop_assert_eq!(recs.number(k), Some(num));
                proptest::prop_assert_eq!(recs.get(num).map(|r| r.val), Some(k as u32 ^ 0x5a5a));
                proptest::prop_assert_eq!(recs.find_mut(k).map(|r| r.key), Some(k));
            }
            proptest::prop_assert_eq!(recs.number(20_001), None);
        }
    }

    #[test]
    fn growing_never_copies_more_than_a_step_per_record() {
        // 100,000 records: the index doubles 11 times from 64, and no record made moves more
        // than MIGRATE_STEP entries (a hash map that rehashed in one go moved all of them).
        let mut recs: Records<Rec> = Records::new(1_000_000, 1);
        let mut grew = 0;
        for k in 0..100_000u64 {
            let (room, before) = (recs.index.room(), recs.index.len());
            recs.insert(rec(k)).unwrap();
            let moved = if recs.index.room() == room {
                recs.index.len() - before
            } else {
                grew += 1;
                recs.index.len()
            };
            assert!(
                moved <= 1 + MIGRATE_STEP,
                "{moved} entries moved for one record"
            );
        }
        assert_eq!(grew, 11);
        // The last growth (at 81,911 records) copies its 81,911 entries up to 4 a record
        // (fewer where 16 slots hold fewer): done ~21,000 records later, long before the new
        // index (room 163,830) fills.
        for k in 100_000..110_000u64 {
            recs.insert(rec(k)).unwrap();
        }
        assert!(recs.old.is_none(), "the copy is done");
        assert!(
            recs.retiring.is_none(),
            "the old index's memory is given back in steps, and then it goes"
        );
        assert!(recs.next.is_none(), "110,000 of 163,830: not yet");
        for k in 110_000..150_000u64 {
            recs.insert(rec(k)).unwrap();
        }
        // Past seven eighths, the next index is made and made resident ahead.
        let (next, at) = recs.next.as_ref().expect("the next index is prepared");
        assert!(next.room() >= 2 * recs.index.room() && *at >= next.slot_count());
        let grown = recs.index.room();
        for k in 150_000..170_000u64 {
            recs.insert(rec(k)).unwrap();
        }
        assert!(recs.index.room() > grown, "it grew into the prepared index");
        assert!((0..170_000u64).all(|k| recs.number(k).is_some()));
        assert!((0..100_000u64).all(|k| recs.number(k).is_some()));
        // Released and reused: the number goes to the next record, the old key is gone.
        let n5 = recs.number(5).unwrap();
        recs.remove(n5);
        assert_eq!(recs.number(5), None);
        assert_eq!(recs.insert(rec(1_000_001)), Some(n5));
        assert_eq!(recs.number(1_000_001), Some(n5));
    }

    #[test]
    fn released_while_copying_is_not_found_in_the_old_index() {
        // Grow once, then release a record whose entry still waits in the old index.
        let mut recs: Records<Rec> = Records::new(10_000, 3);
        let mut k = 0;
        while recs.old.is_none() {
            recs.insert(rec(k)).unwrap();
            k += 1;
        }
        let waiting = (0..k)
            .find(|&k| {
                let n = recs.number(k).unwrap();
                recs.index.get(recs.hash(k), |v| v == n).is_none()
            })
            .expect("some entry not copied yet");
        let n = recs.number(waiting).unwrap();
        recs.remove(n);
        assert_eq!(recs.number(waiting), None);
        // Its number goes to a new key; the stale entry in `old` does not find it.
        assert_eq!(recs.insert(rec(50_000)), Some(n));
        assert_eq!(recs.number(waiting), None);
        assert_eq!(recs.number(50_000), Some(n));
    }

    #[test]
    fn no_more_records_than_the_limit() {
        let mut recs: Records<Rec> = Records::new(3, 1);
        assert!((0..3).all(|k| recs.insert(rec(k)).is_some()));
        assert_eq!(recs.insert(rec(3)), None);
        recs.remove(recs.number(1).unwrap());
        assert!(
            recs.insert(rec(3)).is_some(),
            "a released record makes room"
        );
    }
}
