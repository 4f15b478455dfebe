//! The session index: an open-addressing hash table from a packet's flow tuple to a session.
//!
//! Each slot is 8 bytes -- a 32-bit tag (the high half of the key's hash) and a 32-bit value
//! -- so the index costs about 11 bytes per entry at the maximum load of 3/4, and a lookup
//! touches one slot line before the session itself. Keys are not stored: the caller compares
//! candidates against the session they point to (the session holds its own tuple anyway).
//!
//! Linear probing with backward-shift deletion (no tombstones, so probe lengths stay short
//! under churn). The home slot comes from the tag, which is stored, so the table can grow
//! without rehashing keys. Hashes must come from a per-table random seed: keys are chosen by
//! whoever sends packets ([`KeyHasher`]).
//!
//! The slot count need not be a power of two (the home slot is `tag * slots >> 32`), so a table
//! sized ahead for a configured maximum is 4/3 of it, not up to 8/3.

use crate::mem::Zeroed;

/// An empty slot (tables start zero-filled).
const EMPTY: u64 = 0;
/// Load factor limit: grow when more than 3/4 full.
const LOAD_NUM: usize = 3;
const LOAD_DEN: usize = 4;

/// A seeded hash of a few 64-bit words (the packed tuple): folded 64x64->128 multiplies, as
/// foldhash does, with per-table secrets from the seed. Much cheaper than hashing a derived
/// `Hash` field by field, and keys chosen by packet senders cannot aim at slots without the
/// secrets.
#[derive(Clone, Copy)]
pub struct KeyHasher {
    k: [u64; 6],
}

#[inline]
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

/// Tuple hash -> value index (values are below `u32::MAX`).
pub struct FlowIndex {
    slots: Zeroed,
    len: usize,
}

#[inline]
fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

#[inline]
fn pack(tag: u32, val: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(val.wrapping_add(1))
}

#[inline]
fn unpack_val(slot: u64) -> u32 {
    (slot as u32).wrapping_sub(1)
}

impl FlowIndex {
    /// An index with room for `entries` before it grows.
    pub fn with_capacity(entries: usize) -> Self {
        let cap = (entries.saturating_mul(LOAD_DEN) / LOAD_NUM + 1).max(16);
        FlowIndex {
            slots: Zeroed::new(cap),
            len: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn home(&self, tag: u32) -> usize {
        ((u64::from(tag) * self.slots.len() as u64) >> 32) as usize
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
        self.prefetch_slot(self.home(tag_of(hash)));
    }

    /// Hints the CPU to fetch the cache line after the home slot's: a lookup that misses, and
    /// an insertion, read the whole run from the home slot to the next empty one -- at the
    /// load of a table filled to its maximum (3/4) ~8.5 slots on average, 68 bytes, often
    /// over a line boundary. For new entries (established lookups stop at their entry, ~2.5
    /// slots, and skip this).
    #[inline]
    pub fn prefetch_next_line(&self, hash: u64) {
        self.prefetch_slot(self.home(tag_of(hash)) + 8);
    }

    #[inline]
    fn prefetch_slot(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(p) = self.slots.get(i) {
            // SAFETY: prefetch has no architectural effect; the pointer is valid anyway.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    (p as *const u64).cast::<i8>(),
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }

    /// The value in the first slot whose tag matches `hash`, without comparing keys: a guess
    /// good enough to prefetch the session it points to (and, [`crate::napt`], to try first).
    /// Looks 16 slots from home: at the 3/4 load of a full table some entries sit more than
    /// 8 from theirs (peeking only 8 left those unprefetched, and sent their packets to
    /// prefetch the lines a new session would need).
    #[inline(always)]
    pub fn peek(&self, hash: u64) -> Option<u32> {
        let tag = tag_of(hash);
        let mut i = self.home(tag);
        for _ in 0..16 {
            let s = *self.slots.get(i)?;
            if s == EMPTY {
                return None;
            }
            if (s >> 32) as u32 == tag {
                return Some(unpack_val(s));
            }
            i = self.next(i);
        }
        None
    }

    /// The first value under `hash` for which `eq` is true.
    #[inline]
    pub fn get(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = tag_of(hash);
        let mut i = self.home(tag);
        for _ in 0..self.slots.len() {
            let s = *self.slots.get(i)?;
            if s == EMPTY {
                return None;
            }
            if (s >> 32) as u32 == tag && eq(unpack_val(s)) {
                return Some(unpack_val(s));
            }
            i = self.next(i);
        }
        None
    }

    /// Adds `val` under `hash` (the caller makes sure it is not there yet).
    pub fn insert(&mut self, hash: u64, val: u32) {
        if (self.len + 1) * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.grow();
        }
        let tag = tag_of(hash);
        self.place(pack(tag, val));
        self.len += 1;
    }

    fn place(&mut self, slot: u64) {
        let mut i = self.home((slot >> 32) as u32);
        for _ in 0..self.slots.len() {
            match self.slots.get_mut(i) {
                Some(s) if *s == EMPTY => {
                    *s = slot;
                    return;
                }
                Some(_) => i = self.next(i),
                None => return,
            }
        }
    }

    fn grow(&mut self) {
        let bigger = Zeroed::new(self.slots.len() * 2);
        let old = std::mem::replace(&mut self.slots, bigger);
        for &s in old.iter().filter(|&&s| s != EMPTY) {
            self.place(s);
        }
    }

    /// Removes the entry `val` under `hash`; returns whether it was there.
    pub fn remove(&mut self, hash: u64, val: u32) -> bool {
        let want = pack(tag_of(hash), val);
        let mut i = self.home(tag_of(hash));
        let mut found = None;
        for _ in 0..self.slots.len() {
            match self.slots.get(i).copied() {
                Some(EMPTY) | None => break,
                Some(s) if s == want => {
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
            let home = self.home((s >> 32) as u32);
            // distance from home to j vs. from home to hole (cyclic)
            if self.dist(home, j) >= self.dist(hole, j) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// The index agrees with a HashMap model under inserts and removes with colliding
        /// hashes (few distinct tags force long runs and wrap-around).
        #[test]
        fn matches_model(ops in proptest::collection::vec((any::<bool>(), 0u32..64, 0u64..8), 1..400)) {
            let mut idx = FlowIndex::with_capacity(4);
            let mut model: HashMap<u32, u64> = HashMap::new();
            for (ins, val, h) in ops {
                let hash = (h.wrapping_mul(0x9e37_79b9) << 32) | h;
                if ins {
                    if let std::collections::hash_map::Entry::Vacant(e) = model.entry(val) {
                        e.insert(hash);
                        idx.insert(hash, val);
                    }
                } else if let Some(hh) = model.remove(&val) {
                    prop_assert!(idx.remove(hh, val));
                }
                prop_assert_eq!(idx.len(), model.len());
                for (&v, &hh) in &model {
                    prop_assert_eq!(idx.get(hh, |x| x == v), Some(v));
                }
            }
        }
    }

    #[test]
    fn missing_is_none() {
        let mut idx = FlowIndex::with_capacity(1);
        assert_eq!(idx.get(5 << 32, |_| true), None);
        idx.insert(5 << 32, 9);
        assert_eq!(idx.get(5 << 32, |v| v == 9), Some(9));
        assert!(!idx.remove(5 << 32, 8));
        assert!(idx.remove(5 << 32, 9));
        assert!(idx.is_empty());
    }
}
