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
//! whoever sends packets.

/// An empty slot.
const EMPTY: u64 = 0;
/// Load factor limit: grow when more than 3/4 full.
const LOAD_NUM: usize = 3;
const LOAD_DEN: usize = 4;

/// Tuple hash -> value index (values are below `u32::MAX`).
pub struct FlowIndex {
    slots: Vec<u64>,
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
        let cap = (entries.saturating_mul(LOAD_DEN) / LOAD_NUM)
            .max(16)
            .next_power_of_two();
        FlowIndex {
            slots: vec![EMPTY; cap],
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
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    #[inline]
    fn home(&self, tag: u32) -> usize {
        (tag as usize) & self.mask()
    }

    /// Hints the CPU to fetch the home slot of `hash` (for batched lookups).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(p) = self.slots.get(self.home(tag_of(hash))) {
            // SAFETY: prefetch has no architectural effect; the pointer is valid anyway.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    (p as *const u64).cast::<i8>(),
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = hash;
    }

    /// The value in the first slot whose tag matches `hash`, without comparing keys: a guess
    /// good enough to prefetch the session it points to.
    #[inline]
    pub fn peek(&self, hash: u64) -> Option<u32> {
        let tag = tag_of(hash);
        let mask = self.mask();
        let mut i = self.home(tag);
        for _ in 0..8 {
            let s = *self.slots.get(i)?;
            if s == EMPTY {
                return None;
            }
            if (s >> 32) as u32 == tag {
                return Some(unpack_val(s));
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// The first value under `hash` for which `eq` is true.
    #[inline]
    pub fn get(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = tag_of(hash);
        let mask = self.mask();
        let mut i = self.home(tag);
        for _ in 0..self.slots.len() {
            let s = *self.slots.get(i)?;
            if s == EMPTY {
                return None;
            }
            if (s >> 32) as u32 == tag && eq(unpack_val(s)) {
                return Some(unpack_val(s));
            }
            i = (i + 1) & mask;
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
        let mask = self.mask();
        let mut i = self.home((slot >> 32) as u32);
        for _ in 0..self.slots.len() {
            match self.slots.get_mut(i) {
                Some(s) if *s == EMPTY => {
                    *s = slot;
                    return;
                }
                Some(_) => i = (i + 1) & mask,
                None => return,
            }
        }
    }

    fn grow(&mut self) {
        let bigger = vec![EMPTY; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        for s in old.into_iter().filter(|&s| s != EMPTY) {
            self.place(s);
        }
    }

    /// Removes the entry `val` under `hash`; returns whether it was there.
    pub fn remove(&mut self, hash: u64, val: u32) -> bool {
        let want = pack(tag_of(hash), val);
        let mask = self.mask();
        let mut i = self.home(tag_of(hash));
        let mut found = None;
        for _ in 0..self.slots.len() {
            match self.slots.get(i).copied() {
                Some(EMPTY) | None => break,
                Some(s) if s == want => {
                    found = Some(i);
                    break;
                }
                Some(_) => i = (i + 1) & mask,
            }
        }
        let Some(mut hole) = found else {
            return false;
        };
        // Backward-shift deletion: pull later entries of the run into the hole when their
        // home is not between the hole and their position.
        let mut j = (hole + 1) & mask;
        for _ in 0..self.slots.len() {
            let s = self.slots.get(j).copied().unwrap_or(EMPTY);
            if s == EMPTY {
                break;
            }
            let home = self.home((s >> 32) as u32);
            // distance from home to j vs. from home to hole (cyclic)
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                if let Some(h) = self.slots.get_mut(hole) {
                    *h = s;
                }
                hole = j;
            }
            j = (j + 1) & mask;
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
