//! Port (and ICMP identifier) allocation for one outside address and protocol.
//!
//! RFC 4787 REQ-3/4.2.1 and RFC 6056 3.3: keep the inside port when it is free and in range
//! ("port preservation"), otherwise start at a random point of the range and take the next
//! free port. A port stays taken until its mapping is removed, so a port still bound is never
//! handed out again. The bitmap makes each step O(range/64) at worst and O(1) typically.

/// A 65,536-bit map of ports in use; its 8 KiB are allocated on first use (a pool address
/// and protocol that never maps a port costs nothing).
#[derive(Default)]
pub struct PortMap {
    bits: Vec<u64>,
    used: u32,
}

impl PortMap {
    fn word(&self, p: u16) -> u64 {
        if self.bits.is_empty() {
            return 0;
        }
        self.bits
            .get(usize::from(p >> 6))
            .copied()
            .unwrap_or(u64::MAX)
    }

    pub fn is_used(&self, p: u16) -> bool {
        self.word(p) & (1u64 << (p & 63)) != 0
    }

    fn set(&mut self, p: u16, on: bool) {
        if on && self.bits.is_empty() {
            self.bits = vec![0; 1024];
        }
        if let Some(w) = self.bits.get_mut(usize::from(p >> 6)) {
            let bit = 1u64 << (p & 63);
            if on && *w & bit == 0 {
                *w |= bit;
                self.used = self.used.saturating_add(1);
            } else if !on && *w & bit != 0 {
                *w &= !bit;
                self.used = self.used.saturating_sub(1);
            }
        }
    }

    /// Ports in use.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Releases a port.
    pub fn free(&mut self, p: u16) {
        self.set(p, false);
    }

    /// Takes `want` if it is free and within `lo..=hi`; otherwise the first free port at or
    /// after `start` (wrapping within the range). `None` when the range is full.
    pub fn take(&mut self, want: u16, lo: u16, hi: u16, start: u16) -> Option<u16> {
        // Port preservation (RFC 4787 REQ-3): test and set `want`'s bit in one word access.
        if (lo..=hi).contains(&want) {
            if self.bits.is_empty() {
                self.bits = vec![0; 1024];
            }
            if let Some(w) = self.bits.get_mut(usize::from(want >> 6)) {
                let bit = 1u64 << (want & 63);
                if *w & bit == 0 {
                    *w |= bit;
                    self.used = self.used.saturating_add(1);
                    return Some(want);
                }
            }
        }
        let p = self.find_free(lo, hi, start.clamp(lo, hi))?;
        self.set(p, true);
        Some(p)
    }

    /// [`PortMap::take`] with its two usual outcomes inline: `want` free, or a free port in
    /// `start`'s word of the map at or after `start` (a port block's search, which starts
    /// past the block's ports in use). Anything else goes to `take`, which finds the same.
    #[inline(always)]
    pub fn take_near(&mut self, want: u16, lo: u16, hi: u16, start: u16) -> Option<u16> {
        if (lo..=hi).contains(&want) {
            if let Some(w) = self.bits.get_mut(usize::from(want >> 6)) {
                let bit = 1u64 << (want & 63);
                if *w & bit == 0 {
                    *w |= bit;
                    self.used = self.used.saturating_add(1);
                    return Some(want);
                }
            }
        }
        if (lo..=hi).contains(&start) {
            if let Some(w) = self.bits.get_mut(usize::from(start >> 6)) {
                // `take`'s scan, its first word: the free ports from `start` to the word's end.
                let free = !*w >> (start & 63);
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "trailing_zeros of a nonzero word < 64"
                )]
                let q = start + free.trailing_zeros() as u16;
                if free != 0 && q <= hi {
                    *w |= 1u64 << (q & 63);
                    self.used = self.used.saturating_add(1);
                    return Some(q);
                }
            }
        }
        self.take(want, lo, hi, start)
    }

    /// Takes exactly `p` if free.
    pub fn take_exact(&mut self, p: u16) -> bool {
        if self.is_used(p) {
            return false;
        }
        self.set(p, true);
        true
    }

    fn find_free(&self, lo: u16, hi: u16, start: u16) -> Option<u16> {
        // Scan start..=hi then lo..start, skipping full 64-bit words.
        self.scan(start, hi).or_else(|| {
            if start > lo {
                self.scan(lo, start - 1)
            } else {
                None
            }
        })
    }

    #[expect(
        clippy::cast_possible_truncation,
        reason = "p <= to, a u16, where it is cast"
    )]
    fn scan(&self, from: u16, to: u16) -> Option<u16> {
        let mut p = u32::from(from);
        let to = u32::from(to);
        while p <= to {
            // The free ports from p to the end of its word, p's at bit 0: the first one is
            // its lowest set bit, so a word costs one step however full it is.
            let free = !self.word(p as u16) >> (p & 63);
            if free != 0 {
                let q = p + free.trailing_zeros();
                return (q <= to).then_some(q as u16);
            }
            p = (p | 63) + 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preserves_then_wraps_and_exhausts() {
        let mut m = PortMap::default();
        assert_eq!(m.take(5000, 1024, 65535, 2000), Some(5000));
        // 5000 is taken: the next free port from the start point.
        assert_eq!(m.take(5000, 1024, 65535, 2000), Some(2000));
        // Out of range wants are not preserved.
        assert_eq!(m.take(80, 1024, 65535, 1024), Some(1024));
        let mut small = PortMap::default();
        for _ in 0..4 {
            assert!(small.take(1, 10, 13, 12).is_some());
        }
        assert_eq!(small.take(1, 10, 13, 12), None);
        small.free(11);
        assert_eq!(small.take(1, 10, 13, 12), Some(11));
        assert_eq!(small.used(), 4);
    }

    proptest::proptest! {
        /// `take` gives what a port-by-port model gives: `want` if free and in range, else
        /// the first free port from `start` to `hi`, then from `lo`; none when all are used.
        #[test]
        fn take_agrees_with_a_port_by_port_model(
            used in proptest::collection::vec(0u16..600, 0..500),
            (lo, span, start, want) in (0u16..400, 1u16..200, 0u16..200, 0u16..700),
        ) {
            let hi = lo + span;
            let start = (lo + start % (span + 1)).min(hi);
            let mut m = PortMap::default();
            for &p in &used {
                m.take_exact(p);
            }
            let free = |p: u16| !used.contains(&p);
            let model = if (lo..=hi).contains(&want) && free(want) {
                Some(want)
            } else {
                (start..=hi).chain(lo..start).find(|&p| free(p))
            };
            proptest::prop_assert_eq!(m.take(want, lo, hi, start), model);
        }

        /// `take_near` takes what `take` takes, from a map with the same ports in use.
        #[test]
        fn take_near_agrees_with_take(
            used in proptest::collection::vec(0u16..600, 0..500),
            (lo, span, start, want) in (0u16..400, 1u16..200, 0u16..200, 0u16..700),
        ) {
            let hi = lo + span;
            let start = (lo + start % (span + 1)).min(hi);
            let (mut a, mut b) = (PortMap::default(), PortMap::default());
            for &p in &used {
                a.take_exact(p);
                b.take_exact(p);
            }
            for _ in 0..3 {
                proptest::prop_assert_eq!(a.take_near(want, lo, hi, start), b.take(want, lo, hi, start));
                proptest::prop_assert_eq!(a.used(), b.used());
            }
        }
    }

    #[test]
    fn skips_full_words() {
        let mut m = PortMap::default();
        for p in 0..=65534u16 {
            assert!(m.take_exact(p));
        }
        assert_eq!(m.take(1, 0, 65535, 0), Some(65535));
        assert_eq!(m.take(1, 0, 65535, 0), None);
    }
}
