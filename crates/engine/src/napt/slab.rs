//! Slabs: vectors of slots with a free list, where sessions and mapping records live under
//! ids that stay valid until removed.

use crate::mem::{Chunks, FixedVec, Store};

/// A slot of a [`Slab`]: an entry, or a link in the list of free slots.
pub(super) enum Slot<T> {
    Used(T),
    /// The next free slot ([`NO_SLOT`]: none).
    Free(u32),
}

/// The end of a [`Slab`]'s free list.
const NO_SLOT: u32 = u32::MAX;

/// A vector of slots with a free list; ids stay valid until removed. The slots never move:
/// they are reserved ahead ([`FixedVec`], on huge pages when large: the sessions) or come in
/// chunks allocated as the slab fills ([`Chunks`]: the mapping records, which most mappings
/// never need). The free list runs through the free slots themselves (a `Vec` of free ids
/// would grow -- and copy itself -- while a mass expiry frees millions of slots, stalling an
/// expiry pass); a free slot costs no more than an `Option<T>` would (the enum fits in
/// `T`'s unused values: the layout test).
pub(super) struct Slab<T, S = FixedVec<Slot<T>>> {
    pub(super) slots: S,
    pub(super) free: u32,
    pub(super) len: usize,
    pub(super) _t: std::marker::PhantomData<T>,
}

impl<T> Slab<T> {
    /// A slab with room for `cap` entries allocated ahead.
    pub(super) fn with_capacity(cap: usize) -> Self {
        Slab::on(FixedVec::with_capacity(cap))
    }
}

impl<T> Slab<T, Chunks<Slot<T>>> {
    /// A slab of up to `cap` entries whose memory is allocated as it fills.
    pub(super) fn chunked(cap: usize) -> Self {
        Slab::on(Chunks::with_capacity(cap))
    }
}

impl<T, S: Store<Slot<T>>> Slab<T, S> {
    pub(super) fn on(slots: S) -> Self {
        Slab {
            slots,
            free: NO_SLOT,
            len: 0,
            _t: std::marker::PhantomData,
        }
    }
    pub(super) fn insert(&mut self, v: T) -> u32 {
        self.len += 1;
        let i = self.free;
        if let Some(s) = self.slots.at_mut(i as usize) {
            if let Slot::Free(next) = *s {
                self.free = next;
                *s = Slot::Used(v);
                return i;
            }
        }
        self.slots.append(Slot::Used(v));
        #[expect(
            clippy::cast_possible_truncation,
            reason = "slot ids are u32: the table holds at most max_sessions (a u32)"
        )]
        let id = (self.slots.count() - 1) as u32;
        id
    }
    pub(super) fn remove(&mut self, i: u32) -> Option<T> {
        let s = self.slots.at_mut(i as usize)?;
        if matches!(s, Slot::Free(_)) {
            return None;
        }
        let Slot::Used(v) = std::mem::replace(s, Slot::Free(self.free)) else {
            return None;
        };
        self.free = i;
        self.len -= 1;
        Some(v)
    }
    #[inline]
    pub(super) fn get(&self, i: u32) -> Option<&T> {
        match self.slots.at(i as usize)? {
            Slot::Used(v) => Some(v),
            Slot::Free(_) => None,
        }
    }
    #[inline]
    pub(super) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        match self.slots.at_mut(i as usize)? {
            Slot::Used(v) => Some(v),
            Slot::Free(_) => None,
        }
    }
    pub(super) fn prefetch(&self, i: u32) {
        if let Some(p) = self.slots.at(i as usize) {
            crate::mem::prefetch(p);
        }
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.iter_slots(0, usize::MAX)
            .filter_map(|(i, v)| Some((i, v?)))
    }

    /// Slots `from..`, at most `visits` of them, used or not (`None`): a bounded walk that
    /// a later one continues where this one stopped.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "slot ids are u32: the table holds at most max_sessions (a u32)"
    )]
    pub(super) fn iter_slots(
        &self,
        from: u32,
        visits: usize,
    ) -> impl Iterator<Item = (u32, Option<&T>)> {
        let end = self.slots.count();
        let from = (from as usize).min(end);
        (from..end.min(from.saturating_add(visits))).map(|i| {
            (
                i as u32,
                match self.slots.at(i) {
                    Some(Slot::Used(v)) => Some(v),
                    _ => None,
                },
            )
        })
    }

    /// Slots so far (used and free): where a walk ends.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "slot ids are u32: the table holds at most max_sessions (a u32)"
    )]
    pub(super) fn slot_count(&self) -> u32 {
        self.slots.count() as u32
    }
}
