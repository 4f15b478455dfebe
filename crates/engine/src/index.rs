//! The session index: an open-addressing hash table from a packet's flow tuple to a session.
//!
//! Each slot is 4 bytes: the value (a session or mapping id) and, in the bits its largest
//! value leaves free, where the entry's home slot lies and a few bits of the key's hash. So the
//! index costs 6 bytes per entry at its maximum load of 2/3 (8-byte slots with a 32-bit
//! tag at 3/4 cost 10.7), and a run of 16 slots -- most lookups' whole probe -- is one cache
//! line. Keys are not stored: the caller compares candidates against the record they point to
//! (the session holds its own tuple anyway).
//!
//! Linear probing with backward-shift deletion (no tombstones, so probe lengths stay short
//! under churn). A slot keeps its home slot modulo F = 15: an entry fewer than 15 slots from
//! home -- all but 0.7 % at 2/3 load (simulated) -- is recognised as one of the
//! lookup's home exactly, and only entries of that home and hash bits are handed to the caller,
//! so a lookup touches another record only for ~1 in 2^tag-bits of the entries sharing its
//! home. Entries F or more slots from home are marked far: lookups try them on their hash bits
//! alone, and a deletion that must know a far entry's home asks the caller to recompute its
//! hash from the record (`home_of`). Hashes must come from a per-table random seed: keys are
//! chosen by whoever sends packets ([`KeyHasher`]).
//!
//! The session index and the BIB are each a [`SidedIndex`]: one such table per side of an
//! entry (outbound and inbound tuple; inside and outside endpoint), so the side is not a
//! value bit and each slot keeps one more hash bit -- at 10M sessions 4 instead of 3, which
//! took established NAT44 at 10M from ~17 to ~19 Mpps.
//!
//! The table is sized once, for a configured maximum, and does not grow (its slots could not
//! be rehashed without reading every record); the slot count need not be a power of two (the
//! home slot is `(hash >> 32) * slots >> 32`), so it is 3/2 of the maximum rounded up to a
//! multiple of 15, not up to 8/3.

use crate::mem::Zeroed;

/// An empty slot (tables start zero-filled; stored values are offset by one).
const EMPTY: u32 = 0;
/// Load factor at the table's maximum: 2/3. At 3/4 the index was 0.67 B an entry smaller
/// (2.7 B a NAT44 session) but a new flow's lookup and insertion walked ~8.5 slots to the
/// first empty one instead of ~5: filling to 10M ran 3.33 M/s against 3.51, its last tenth
/// 2.40 against 2.75.
const LOAD_NUM: usize = 2;
const LOAD_DEN: usize = 3;
/// Slots in a cache line.
const LINE: usize = 64 / 4;
/// Most bits a value may take: the rest of a slot holds the 4-bit home field and at least
/// one bit of hash.
const MAX_VAL_BITS: u32 = 32 - HOME_BITS - 1;

/// A seeded hash of a few 64-bit words (the packed tuple): folded 64x64->128 multiplies, as
/// foldhash does, with per-table secrets from the seed. Much cheaper than hashing a derived
/// `Hash` field by field, and keys chosen by packet senders cannot aim at slots without the
/// secrets.
#[derive(Clone, Copy)]
pub struct KeyHasher {
    k: [u64; 6],
}

#[inline]
#[expect(
    clippy::cast_possible_truncation,
    reason = "the product's two 64-bit halves, folded"
)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

impl KeyHasher {
    pub fn new(seed: u64) -> KeyHasher {
        let mut x = seed;
        let mut next = || {
            // splitmix64
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) | 1
        };
        KeyHasher {
            k: [next(), next(), next(), next(), next(), next()],
        }
    }

    /// Hash of four words (unused ones zero).
    #[inline]
    pub fn hash(&self, w: [u64; 4]) -> u64 {
        let [k0, k1, k2, k3, k4, k5] = self.k;
        let [w0, w1, w2, w3] = w;
        let a = fold_mul(w0 ^ k0, w1 ^ k1);
        let b = fold_mul(w2 ^ k2, w3 ^ k3);
        fold_mul(a ^ k4, b ^ k5)
    }
}

/// Tuple hash -> value index (values are below the `entries` it was made for).
pub struct FlowIndex {
    slots: Zeroed,
    len: usize,
    /// Values above this do not fit in a slot.
    max_val: u32,
    /// Bits below the value: hash bits above the 4-bit home field (`home % F`, or `F`: far).
    val_shift: u32,
    /// The hash bits' place in a slot (they are the hash's bits at the same place).
    tag_mask: u32,
}

/// The home field's modulus: the field holds `home % F` in 4 bits, and its all-ones value,
/// F, marks a far entry. A constant, so the modulo compiles to a multiply (a run-time
/// divisor made every lookup wait for a `div`).
const F: usize = 15;
/// [`F`] as a tag bit pattern.
#[expect(clippy::cast_possible_truncation, reason = "F is 15")]
const F_TAG: u32 = F as u32;
/// Bits of the home field.
const HOME_BITS: u32 = 4;

/// How a lookup recognises the entries of its key: the home field and hash bits an entry of
/// it has when near home (`near`) or far from it (`far`), and the mask of both fields.
#[derive(Clone, Copy)]
struct Want {
    home: usize,
    near: u32,
    far: u32,
    mask: u32,
}

impl Want {
    /// Might the slot `s` hold an entry of this key?
    #[inline(always)]
    fn accepts(self, s: u32) -> bool {
        let m = s & self.mask;
        m == self.near || m == self.far
    }
}

impl FlowIndex {
    /// An index for up to `entries` entries, with values below `values`.
    pub fn with_capacity(entries: usize, values: usize) -> Self {
        FlowIndex::sized(entries, values, Zeroed::new)
    }

    /// [`FlowIndex::with_capacity`] for an index made while traffic runs (a table that
    /// grows, [`crate::hosts`]): its memory is never made resident up front (`Zeroed::lazy`).
    pub fn growing(entries: usize, values: usize) -> Self {
        FlowIndex::sized(entries, values, Zeroed::lazy)
    }

    fn sized(entries: usize, values: usize, zeroed: fn(usize) -> Zeroed) -> Self {
        let entries = entries.max(1);
        // Bits for the largest value plus one (stored values are offset by one, 0 is empty).
        let val_bits = (usize::BITS - values.max(1).leading_zeros()).min(MAX_VAL_BITS);
        let rest = 32 - val_bits;
        let want = (entries.saturating_mul(LOAD_DEN) / LOAD_NUM + 1).max(LINE);
        let cap = want.div_ceil(F).saturating_mul(F);
        FlowIndex {
            slots: zeroed(cap),
            len: 0,
            max_val: u32::try_from((1u64 << val_bits) - 2).unwrap_or(u32::MAX),
            val_shift: rest,
            tag_mask: ((1u32 << rest) - 1) & !F_TAG,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Makes slots `from..to` resident ([`Zeroed::populate`]): for an index being prepared.
    pub fn populate(&mut self, from: usize, to: usize) {
        self.slots.populate(from, to);
    }

    /// Gives the memory of slots `from..to` back ([`Zeroed::release`]): for an index no
    /// lookup will read again, on its way out.
    pub fn release(&mut self, from: usize, to: usize) {
        self.slots.release(from, to);
    }

    /// The entries it holds at its maximum load (at least the `entries` it was made for).
    pub fn room(&self) -> usize {
        self.slots.len() * LOAD_NUM / LOAD_DEN
    }

    /// Slots, for walking them with [`FlowIndex::value_at`].
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The value in slot `i`, if it holds one.
    pub fn value_at(&self, i: usize) -> Option<u32> {
        self.slots
            .get(i)
            .filter(|&&s| s != EMPTY)
            .map(|&s| self.val(s))
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        (((hash >> 32) * self.slots.len() as u64) >> 32) as usize
    }

    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the tag is the hash's low 32 bits; home % F is below 15"
    )]
    fn want(&self, hash: u64) -> Want {
        let home = self.home(hash);
        let tag = (hash as u32) & self.tag_mask;
        Want {
            home,
            near: tag | (home % F) as u32,
            far: tag | F_TAG,
            mask: self.tag_mask | F_TAG,
        }
    }

    #[inline]
    fn val(&self, s: u32) -> u32 {
        (s >> self.val_shift).wrapping_sub(1)
    }

    /// The slot after `i`, wrapping.
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 >= self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// Slots from `from` forward to `to`, wrapping.
    #[inline]
    fn dist(&self, from: usize, to: usize) -> usize {
        if to >= from {
            to - from
        } else {
            to + self.slots.len() - from
        }
    }

    /// Hints the CPU to fetch the home slot of `hash` (for batched lookups).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        self.prefetch_slot(self.home(hash));
    }

    /// Hints the CPU to fetch the cache line after the home slot's: a lookup that misses, and
    /// an insertion, read the whole run from the home slot to the next empty one -- at the
    /// load of a table filled to its maximum (2/3) ~5 slots on average, over a line
    /// boundary for about a third of the home slots. For new entries (established lookups stop at
    /// their entry, ~2.5 slots, and skip this).
    #[inline]
    pub fn prefetch_next_line(&self, hash: u64) {
        self.prefetch_slot(self.home(hash) + LINE);
    }

    #[inline]
    fn prefetch_slot(&self, i: usize) {
        if let Some(p) = self.slots.get(i) {
            crate::mem::prefetch(p);
        }
    }

    /// The value in the first slot that may hold `hash`'s entry, without comparing keys: a
    /// guess good enough to prefetch the record it points to (and, [`crate::napt`], to try
    /// first). Looks 16 slots (a line) from home: at the load of a full table some entries
    /// sit more than 8 from theirs (peeking only 8 left those unprefetched, and sent their
    /// packets to prefetch the lines a new session would need).
    #[inline(always)]
    pub fn peek(&self, hash: u64) -> Option<u32> {
        let w = self.want(hash);
        let mut i = w.home;
        for _ in 0..LINE {
            let s = *self.slots.get(i)?;
            if s == EMPTY {
                return None;
            }
            // Near entries only: one compare a slot. A far entry (0.7 % at the maximum load)
            // goes unpeeked, and its key's lookup probes the index in full.
            if s & w.mask == w.near {
                return Some(self.val(s));
            }
            i = self.next(i);
        }
        None
    }

    /// The first value under `hash` for which `eq` is true.
    #[inline]
    pub fn get(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let w = self.want(hash);
        let mut i = w.home;
        for _ in 0..self.slots.len() {
            let s = *self.slots.get(i)?;
            if s == EMPTY {
                return None;
            }
            if w.accepts(s) && eq(self.val(s)) {
                return Some(self.val(s));
            }
            i = self.next(i);
        }
        None
    }

    /// Adds `val` under `hash` (the caller makes sure it is not there yet). False, with
    /// nothing stored, if `val` is not below the `entries` the index was made for or the
    /// index is full -- neither happens while the caller keeps to the maximum it sized the
    /// index for.
    pub fn insert(&mut self, hash: u64, val: u32) -> bool {
        if val > self.max_val || self.len >= self.slots.len() {
            return false;
        }
        let w = self.want(hash);
        let stored = (val + 1) << self.val_shift;
        let mut i = w.home;
        for d in 0..self.slots.len() {
            match self.slots.get_mut(i) {
                Some(s) if *s == EMPTY => {
                    *s = stored | if d < F { w.near } else { w.far };
                    self.len += 1;
                    return true;
                }
                Some(_) => i = self.next(i),
                None => return false,
            }
        }
        false
    }

    /// Gives the entry `old` under `hash` the value `new` in place; returns whether it was
    /// there. `new` must fit ([`FlowIndex::insert`]).
    pub fn replace(&mut self, hash: u64, old: u32, new: u32) -> bool {
        if new > self.max_val {
            return false;
        }
        let meta = (1u32 << self.val_shift) - 1;
        let mut i = self.home(hash);
        for _ in 0..self.slots.len() {
            let s = self.slots.get(i).copied().unwrap_or(EMPTY);
            if s == EMPTY {
                return false;
            }
            if self.val(s) == old {
                if let Some(slot) = self.slots.get_mut(i) {
                    *slot = (new + 1) << self.val_shift | s & meta;
                }
                return true;
            }
            i = self.next(i);
        }
        false
    }

    /// Removes the entry `val` under `hash`; returns whether it was there. `home_of` gives
    /// the hash of another entry's value, as it was inserted: called only for far entries
    /// after the removed one in its run, whose home the slot does not tell (so their
    /// records must still be there to read).
    pub fn remove(&mut self, hash: u64, val: u32, home_of: impl Fn(u32) -> Option<u64>) -> bool {
        let mut i = self.home(hash);
        let mut found = None;
        for _ in 0..self.slots.len() {
            match self.slots.get(i).copied() {
                Some(EMPTY) | None => break,
                Some(s) if self.val(s) == val => {
                    found = Some(i);
                    break;
                }
                Some(_) => i = self.next(i),
            }
        }
        let Some(mut hole) = found else {
            return false;
        };
        // Backward-shift deletion: pull later entries of the run into the hole when their
        // home is not between the hole and their position.
        let mut j = self.next(hole);
        for _ in 0..self.slots.len() {
            let s = self.slots.get(j).copied().unwrap_or(EMPTY);
            if s == EMPTY {
                break;
            }
            let field = s as usize & F;
            // Slots from the entry's home to it: from the home field, or from the record.
            let from_home = if field == F {
                home_of(self.val(s)).map(|h| self.dist(self.home(h), j))
            } else {
                Some((j + F - field) % F)
            };
            // An entry whose home is unknown stays (home_of has the records of all entries).
            if from_home.is_some_and(|d| d >= self.dist(hole, j)) {
                if let Some(h) = self.slots.get_mut(hole) {
                    *h = s;
                }
                hole = j;
            }
            j = self.next(j);
        }
        if let Some(h) = self.slots.get_mut(hole) {
            *h = EMPTY;
        }
        self.len -= 1;
        true
    }
}

/// Two [`FlowIndex`]es, one per side of an entry (a session's outbound and inbound tuples;
/// a mapping's inside and outside endpoints), under one set of values: bit `BIT` of a value
/// names its side and is not stored, so each slot keeps one more hash bit than one table of
/// both sides would. At 10M sessions that is 4 hash bits for the session index (3 before) and
/// 3 for the BIB (2): half the lookups that read another entry's record.
///
/// Lookups name the side they look in; insertions and removals take it from the value.
pub struct SidedIndex<const BIT: u32> {
    /// Entries whose side bit is 0 (outbound tuples, inside endpoints), then 1. An array, so
    /// choosing a side is an address computation, not a branch.
    sides: [FlowIndex; 2],
}

impl<const BIT: u32> SidedIndex<BIT> {
    /// Up to `entries` entries a side, values below `values` (both sides').
    pub fn with_capacity(entries: usize, values: usize) -> Self {
        let per_side = Self::pack(u32::try_from(values).unwrap_or(u32::MAX)) as usize + 1;
        SidedIndex {
            sides: [
                FlowIndex::with_capacity(entries, per_side),
                FlowIndex::with_capacity(entries, per_side),
            ],
        }
    }

    /// The value without its side bit.
    #[inline(always)]
    fn pack(v: u32) -> u32 {
        (v >> (BIT + 1)) << BIT | v & ((1 << BIT) - 1)
    }

    /// The value `s` stored on side `side`, side bit restored.
    #[inline(always)]
    fn unpack(s: u32, side: bool) -> u32 {
        (s >> BIT) << (BIT + 1) | u32::from(side) << BIT | s & ((1 << BIT) - 1)
    }

    #[inline(always)]
    fn side_of(v: u32) -> bool {
        v >> BIT & 1 == 1
    }

    /// The table of side `side` (always there: the index is 0 or 1).
    #[inline(always)]
    fn side(&self, side: bool) -> Option<&FlowIndex> {
        self.sides.get(usize::from(side))
    }

    #[inline(always)]
    fn side_mut(&mut self, side: bool) -> Option<&mut FlowIndex> {
        self.sides.get_mut(usize::from(side))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sides.iter().map(FlowIndex::len).sum()
    }

    /// [`FlowIndex::prefetch`] on side `side`.
    #[inline]
    pub fn prefetch(&self, side: bool, hash: u64) {
        if let Some(ix) = self.side(side) {
            ix.prefetch(hash);
        }
    }

    /// [`FlowIndex::prefetch_next_line`] on side `side`.
    #[inline]
    pub fn prefetch_next_line(&self, side: bool, hash: u64) {
        if let Some(ix) = self.side(side) {
            ix.prefetch_next_line(hash);
        }
    }

    /// [`FlowIndex::peek`] on side `side`: the value as stored, without its side bit (for
    /// a session index, `BIT` 0, the session id).
    #[inline(always)]
    pub fn peek(&self, side: bool, hash: u64) -> Option<u32> {
        self.side(side)?.peek(hash)
    }

    /// [`SidedIndex::get`] of values as stored, without their side bit (as [`SidedIndex::peek`]).
    #[inline(always)]
    pub fn get_ids(&self, side: bool, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.side(side)?.get(hash, eq)
    }

    /// [`FlowIndex::get`] on side `side`.
    #[inline]
    pub fn get(&self, side: bool, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.side(side)?
            .get(hash, |s| eq(Self::unpack(s, side)))
            .map(|s| Self::unpack(s, side))
    }

    /// [`FlowIndex::insert`] on `val`'s side.
    pub fn insert(&mut self, hash: u64, val: u32) -> bool {
        self.side_mut(Self::side_of(val))
            .is_some_and(|ix| ix.insert(hash, Self::pack(val)))
    }

    /// [`FlowIndex::replace`]; `old` and `new` must be of one side.
    pub fn replace(&mut self, hash: u64, old: u32, new: u32) -> bool {
        let side = Self::side_of(old);
        side == Self::side_of(new)
            && self
                .side_mut(side)
                .is_some_and(|ix| ix.replace(hash, Self::pack(old), Self::pack(new)))
    }

    /// [`FlowIndex::remove`] on `val`'s side; `home_of` is asked about values of that side.
    pub fn remove(&mut self, hash: u64, val: u32, home_of: impl Fn(u32) -> Option<u64>) -> bool {
        let side = Self::side_of(val);
        self.side_mut(side)
            .is_some_and(|ix| ix.remove(hash, Self::pack(val), |s| home_of(Self::unpack(s, side))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// A hash for the model tests: home `h` of 8 near the end of the table (so runs wrap),
    /// hash bits `t` of 4 (so candidates collide).
    fn colliding(h: u64, t: u64) -> u64 {
        ((u64::MAX - h * 0x0100_0000) & !0xffff_ffff) | t << 4
    }

    /// What one model-test operation does to the index under test.
    enum Step {
        Insert(u64),
        Remove(u64),
    }

    /// Applies an insert (`ins`) or remove of `val` (hash `hash` when inserted) to the model;
    /// says what the index must do (nothing for a value already in, or not there to remove).
    fn step(model: &mut HashMap<u32, u64>, ins: bool, val: u32, hash: u64) -> Option<Step> {
        if ins {
            match model.entry(val) {
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(hash);
                    Some(Step::Insert(hash))
                }
                std::collections::hash_map::Entry::Occupied(_) => None,
            }
        } else {
            model.remove(&val).map(Step::Remove)
        }
    }

    proptest! {
        /// The index agrees with a HashMap model under inserts and removes with colliding
        /// hashes: few distinct homes force long runs, far entries (15+ slots from home, whose
        /// removal asks `home_of`) and wrap-around; few distinct tags force false candidates.
        #[test]
        fn matches_model(ops in proptest::collection::vec((any::<bool>(), 0u32..64, 0u64..8, 0u64..4), 1..400)) {
            let mut idx = FlowIndex::with_capacity(64, 64);
            let mut model: HashMap<u32, u64> = HashMap::new();
            for (ins, val, h, t) in ops {
                match step(&mut model, ins, val, colliding(h, t)) {
                    Some(Step::Insert(hh)) => prop_assert!(idx.insert(hh, val)),
                    Some(Step::Remove(hh)) => {
                        prop_assert!(idx.remove(hh, val, |v| model.get(&v).copied()))
                    }
                    None => {}
                }
                prop_assert_eq!(idx.len(), model.len());
                for (&v, &hh) in &model {
                    prop_assert_eq!(idx.get(hh, |x| x == v), Some(v));
                }
            }
        }
    }

    proptest! {
        /// A sided index behaves as one index of all values (each side's own hashes), with
        /// the side bit in bit 0 (session entries) or bit 1 (BIB entries): values come back
        /// whole from lookups, `home_of` and removals, and the sides never see each other.
        #[test]
        fn sided_matches_model(ops in proptest::collection::vec((any::<bool>(), 0u32..128, 0u64..8, 0u64..4), 1..300)) {
            let mut s0: SidedIndex<0> = SidedIndex::with_capacity(64, 128);
            let mut s1: SidedIndex<1> = SidedIndex::with_capacity(64, 128);
            let mut model: HashMap<u32, u64> = HashMap::new();
            for (ins, val, h, t) in ops {
                match step(&mut model, ins, val, colliding(h, t)) {
                    Some(Step::Insert(hh)) => {
                        prop_assert!(s0.insert(hh, val));
                        prop_assert!(s1.insert(hh, val));
                    }
                    Some(Step::Remove(hh)) => {
                        prop_assert!(s0.remove(hh, val, |v| model.get(&v).copied()));
                        prop_assert!(s1.remove(hh, val, |v| model.get(&v).copied()));
                    }
                    None => {}
                }
                prop_assert_eq!((s0.len(), s1.len()), (model.len(), model.len()));
                for (&v, &hh) in &model {
                    let (side0, side1) = (v & 1 == 1, v & 2 == 2);
                    prop_assert_eq!(s0.get(side0, hh, |x| x == v), Some(v));
                    prop_assert_eq!(s1.get(side1, hh, |x| x == v), Some(v));
                    // The other side holds nothing of this value.
                    prop_assert_eq!(s0.get(!side0, hh, |x| x == v), None);
                    prop_assert_eq!(s1.get(!side1, hh, |x| x == v), None);
                }
            }
        }
    }

    #[test]
    fn sided_values_keep_their_side_and_low_bits() {
        for v in [0u32, 1, 2, 3, 6, 7, 1 << 20 | 5] {
            let (p1, side1) = (SidedIndex::<1>::pack(v), SidedIndex::<1>::side_of(v));
            assert_eq!(SidedIndex::<1>::unpack(p1, side1), v);
            let (p0, side0) = (SidedIndex::<0>::pack(v), SidedIndex::<0>::side_of(v));
            assert_eq!(SidedIndex::<0>::unpack(p0, side0), v);
            assert_eq!(p0, v >> 1);
        }
        // One side's values need one bit fewer: a 10M-session BIB keeps 3 hash bits, not 2.
        let s: SidedIndex<1> = SidedIndex::with_capacity(10_000_000, 40_000_000);
        let one = FlowIndex::with_capacity(20_000_000, 40_000_000);
        assert!(s.sides.iter().all(|x| x.val_shift == one.val_shift + 1));
        let mut s: SidedIndex<1> = SidedIndex::with_capacity(10, 40);
        assert!(s.insert(7, 6));
        assert!(!s.replace(7, 6, 4), "a replacement may not change sides");
        assert!(s.replace(7, 6, 7));
        assert_eq!(s.peek(true, 7), Some(3), "7 without its side bit");
        assert_eq!(s.get_ids(true, 7, |v| v == 3), Some(3));
        assert_eq!(s.peek(false, 7), None);
    }

    /// Entries are handed to the caller only when their home and hash bits say they may be
    /// the key's: a lookup in a full run of other homes' entries asks about none of them.
    #[test]
    fn lookups_skip_entries_of_other_homes() {
        let mut idx = FlowIndex::with_capacity(1000, 1000);
        let n = idx.slots.len() as u64;
        // Hash of home slot `i` (its high half is the smallest that lands there), hash bits
        // `t` where the slots keep them (above the home field's 4 bits).
        let at = |i: u64, t: u64| ((i << 32).div_ceil(n) << 32) | t << 4;
        for i in 0..12 {
            assert!(idx.insert(at(100 + i, 1), i as u32));
        }
        let mut asked = 0;
        assert_eq!(
            idx.get(at(100, 2), |_| {
                asked += 1;
                false
            }),
            None
        );
        assert_eq!(asked, 0, "same home, other tag");
        assert_eq!(
            idx.get(at(101, 1), |v| {
                asked += 1;
                v == 1
            }),
            Some(1)
        );
        assert_eq!(asked, 1, "only the entry of home 101");
        assert_eq!(idx.peek(at(105, 1)), Some(5));
    }

    #[test]
    fn replace_keeps_the_entry_where_it_is() {
        let mut idx = FlowIndex::with_capacity(100, 400);
        for v in 0..20 {
            assert!(idx.insert(7 << 32 | u64::from(v) << 4, v));
        }
        assert!(idx.replace(7 << 32 | 5 << 4, 5, 399));
        assert!(!idx.replace(7 << 32 | 5 << 4, 5, 398), "5 is gone");
        assert_eq!(idx.get(7 << 32 | 5 << 4, |v| v == 399), Some(399));
        assert_eq!(idx.get(7 << 32 | 5 << 4, |v| v == 5), None);
        // Entries 15 and on are far from their (common) home: their hashes come from here.
        let home_of = |v: u32| Some(7 << 32 | u64::from(v) << 4);
        assert!(idx.remove(7 << 32 | 5 << 4, 399, home_of));
        assert_eq!(idx.len(), 19);
        for v in (0..20).filter(|&v| v != 5) {
            assert_eq!(idx.get(7 << 32 | u64::from(v) << 4, |x| x == v), Some(v));
        }
    }

    /// The largest table the configuration admits holds every value the NAPT stores: BIB
    /// values `id * 4 + 3` with ids below `limits.max_sessions` (the table is mapped, not
    /// touched).
    #[test]
    fn the_largest_configurable_table_holds_its_values() {
        let max = crate::config::MAX_SESSIONS as usize;
        let bib = FlowIndex::with_capacity(max * 2, max * 4);
        assert!(bib.max_val as usize >= max * 4 - 1);
        let too_big = FlowIndex::with_capacity(16, (max + 1) * 4);
        assert!((too_big.max_val as usize) < (max + 1) * 4 - 1);
    }

    #[test]
    fn values_beyond_its_size_are_refused() {
        let mut idx = FlowIndex::with_capacity(100, 100);
        assert!(idx.max_val >= 99);
        assert!(!idx.insert(5 << 32, idx.max_val + 1));
        assert!(idx.is_empty());
    }

    #[test]
    fn missing_is_none() {
        let mut idx = FlowIndex::with_capacity(1, 2);
        assert_eq!(idx.get(5 << 32, |_| true), None);
        assert!(idx.insert(5 << 32, 0));
        assert_eq!(idx.get(5 << 32, |v| v == 0), Some(0));
        assert!(!idx.remove(5 << 32, 1, |_| None));
        assert!(idx.remove(5 << 32, 0, |_| None));
        assert!(idx.is_empty());
    }
}
