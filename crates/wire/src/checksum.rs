//! The Internet checksum: full computation (RFC 1071) and incremental update (RFC 1624).
//!
//! [`Delta`] accumulates 16-bit word changes (old -> new) in one's-complement arithmetic and
//! applies them to any number of checksum fields that cover those words. RFC 1624 eqn. 3:
//! `HC' = ~(~HC + ~m + m')`. Because it never looks at the covered bytes it cannot turn a bad
//! checksum into a good one.

/// One's-complement sum of `data` (RFC 1071), not folded, starting from `initial`.
/// An odd trailing byte is padded with zero, as RFC 1071 4.1 says.
pub fn sum(data: &[u8], initial: u32) -> u32 {
    let mut acc = u64::from(initial);
    // Big-endian 32-bit words: each adds two 16-bit words at once (RFC 1071 2 (B), (C)).
    let mut quads = data.chunks_exact(4);
    for c in &mut quads {
        if let [a, b, x, y] = c {
            acc = acc.wrapping_add(u64::from(u32::from_be_bytes([*a, *b, *x, *y])));
        }
    }
    let mut pairs = quads.remainder().chunks_exact(2);
    for c in &mut pairs {
        if let [a, b] = c {
            acc = acc.wrapping_add(u64::from(u16::from_be_bytes([*a, *b])));
        }
    }
    if let [last] = pairs.remainder() {
        acc = acc.wrapping_add(u64::from(u16::from_be_bytes([*last, 0])));
    }
    fold64(acc)
}

#[inline]
#[expect(
    clippy::cast_possible_truncation,
    reason = "two folds leave at most 2^32 - 1"
)]
fn fold64(mut acc: u64) -> u32 {
    // Two steps always suffice (2^64 - 1 -> at most 2^33 - 2 -> at most 2^32 - 1); no loop,
    // no branch.
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc as u32
}

/// Folds a 32-bit one's-complement accumulator to 16 bits.
#[inline]
#[expect(
    clippy::cast_possible_truncation,
    reason = "two folds leave at most 0xffff"
)]
pub fn fold(mut acc: u32) -> u16 {
    // As `fold64`: 2^32 - 1 -> at most 0x1fffe -> at most 0xffff.
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// The checksum field value for data whose one's-complement sum is `acc`.
pub fn finish(acc: u32) -> u16 {
    !fold(acc)
}

/// Checksum of `data` as it would be written in a header whose checksum field is zero.
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data, 0))
}

/// True when `data` (checksum field included) sums to 0xffff, i.e. its checksum verifies.
pub fn verifies(data: &[u8]) -> bool {
    fold(sum(data, 0)) == 0xffff
}

/// [`verifies`] for a 20-byte IPv4 header without options, the fast paths' case (RFC 1812
/// 5.2.2: a router verifies it): five 32-bit words summed in native byte order -- the
/// one's-complement sum is the same in either order, RFC 1071 2 (B), and the all-ones
/// result reads the same swapped -- with no loop and no byte swaps.
#[inline(always)]
pub fn header_verifies(h: &[u8; 20]) -> bool {
    let w = |i: usize| {
        let mut q = [0u8; 4];
        if let Some(b) = h.get(i..i + 4) {
            q.copy_from_slice(b);
        }
        u64::from(u32::from_ne_bytes(q))
    };
    let acc = w(0) + w(4) + w(8) + w(12) + w(16);
    fold(fold64(acc)) == 0xffff
}

/// Accumulated change to a set of 16-bit words, applied to checksums by RFC 1624 eqn. 3.
///
/// Kept as an unfolded 64-bit sum and folded once, when applied: one's-complement addition
/// is associative (RFC 1071 2 (A)), so folding after every word -- as this did -- gave the
/// same checksum for 4 more instructions a word (a NAT44 packet folded nine times). Each
/// word adds less than 2^17, so the sum cannot overflow in any real use (2^47 words).
#[derive(Clone, Copy, Debug, Default)]
pub struct Delta(u64);

impl Delta {
    /// No change.
    pub const ZERO: Delta = Delta(0);

    /// Records that one 16-bit word changed from `old` to `new`.
    #[must_use]
    #[inline]
    pub fn word(self, old: u16, new: u16) -> Delta {
        // ~m + m'
        Delta(self.0.wrapping_add(u64::from(!old) + u64::from(new)))
    }

    /// Records that a 32-bit value (two words, e.g. an IPv4 address) changed.
    #[must_use]
    #[inline]
    pub fn addr(self, old: u32, new: u32) -> Delta {
        self.word((old >> 16) as u16, (new >> 16) as u16)
            .word((old & 0xffff) as u16, (new & 0xffff) as u16)
    }

    /// Records that words summing to `sum` (a one's-complement sum, e.g. from [`sum`]) were
    /// added to the covered data: a pseudo-header that appears, a new address.
    #[must_use]
    #[inline]
    pub fn add_sum(self, sum: u32) -> Delta {
        Delta(self.0.wrapping_add(u64::from(sum)))
    }

    /// Records that words summing to `sum` were removed from the covered data (RFC 1624: adding
    /// the one's complement of each removed word).
    #[must_use]
    #[inline]
    pub fn remove_sum(self, sum: u32) -> Delta {
        Delta(self.0.wrapping_add(u64::from(!fold(sum))))
    }

    /// Combines two deltas.
    #[must_use]
    #[inline]
    pub fn plus(self, other: Delta) -> Delta {
        Delta(self.0.wrapping_add(other.0))
    }

    /// The delta folded to 16 bits: what a fast path adds to `~checksum` (RFC 1624 eqn. 3).
    #[inline]
    pub fn folded(self) -> u16 {
        fold(fold64(self.0))
    }

    /// True when the delta changes nothing.
    pub fn is_zero(self) -> bool {
        matches!(self.folded(), 0 | 0xffff)
    }

    /// Applies the delta to a checksum field value: `~(~HC + delta)` (RFC 1624 eqn. 3).
    #[inline]
    pub fn apply(self, cksum: u16) -> u16 {
        !fold(fold64(self.0.wrapping_add(u64::from(!cksum))))
    }

    /// Applies the delta to a UDP checksum: zero means "no checksum" and stays zero
    /// (RFC 768), and a computed zero is sent as all ones.
    #[inline]
    pub fn apply_udp(self, cksum: u16) -> u16 {
        if cksum == 0 {
            return 0;
        }
        match self.apply(cksum) {
            0 => 0xffff,
            c => c,
        }
    }
}

/// Repairs the one case RFC 1624 eqn. 3 gets wrong, for a message without a pseudo-header
/// (ICMPv4) whose checksum field is at `ck_at` in `msg` (the whole message): eqn. 3 never
/// yields 0xffff (its sum is never +0, RFC 1624 3), yet data whose words are all zero has the
/// checksum ~(+0) = 0xffff (RFC 1071), and 0x0000 there does not verify. An ICMPv4 echo reply
/// with identifier, sequence number and payload all zero is such data. Scans only when the
/// checksum is 0x0000, and stops at the first non-zero byte.
pub fn fix_all_zero(msg: &mut [u8], ck_at: usize) {
    if crate::field::u16_at(msg, ck_at) == Some(0) && msg.iter().all(|&b| b == 0) {
        if let Some(ck) = crate::field::chunk_mut::<2>(msg, ck_at) {
            *ck = [0xff, 0xff];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d, 0)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    /// RFC 1624 3: eqn. 3 turns an echo request (type 8, identifier 1) into an all-zero
    /// echo reply with checksum 0x0000, which does not verify; the full sum says 0xffff.
    #[test]
    fn rfc1624_all_zero_data_gets_0xffff() {
        let mut m = [8u8, 0, 0, 0, 0, 1, 0, 0];
        let c = checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        let d = Delta::ZERO.word(0x0800, 0).word(1, 0);
        m[0] = 0;
        m[5] = 0;
        let updated = d.apply(c);
        assert_eq!(updated, 0, "eqn. 3's answer");
        m[2..4].copy_from_slice(&updated.to_be_bytes());
        assert!(!verifies(&m));
        fix_all_zero(&mut m, 2);
        assert_eq!(&m[2..4], &[0xff, 0xff]);
        assert!(verifies(&m));
        // Data that is not all zero keeps eqn. 3's 0x0000, which verifies there.
        let mut n = [0u8, 0, 0, 0, 0xff, 0xff, 0, 0];
        fix_all_zero(&mut n, 2);
        assert_eq!(&n[2..4], &[0, 0]);
        assert!(verifies(&n));
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56], 0)), 0x1234 + 0x5600);
    }

    proptest! {
        /// The 20-byte header check agrees with the general one, on headers whose checksum
        /// is right (set from `checksum`) and on arbitrary bytes.
        #[test]
        fn header_verifies_is_verifies(mut h in any::<[u8; 20]>(), fix in any::<bool>()) {
            if fix {
                h[10] = 0;
                h[11] = 0;
                let c = checksum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                prop_assert!(header_verifies(&h));
            }
            prop_assert_eq!(header_verifies(&h), verifies(&h));
        }

        /// Incremental update after rewriting any word equals recomputation (RFC 1624 eqn. 3),
        /// except for the one-complement's two zeros, which both verify.
        #[test]
        fn incremental_equals_full(mut data in proptest::collection::vec(any::<u8>(), 4..64),
                                   idx in 0usize..30, new in any::<u16>()) {
            let len = data.len() & !1;
            data.truncate(len);
            // put a valid checksum in words 0..2
            if let Some(w) = data.get_mut(0..2) { w.copy_from_slice(&[0, 0]); }
            let c = checksum(&data);
            if let Some(w) = data.get_mut(0..2) { w.copy_from_slice(&c.to_be_bytes()); }
            prop_assert!(verifies(&data));
            let words = len / 2;
            let i = 1 + idx % (words - 1);
            let off = i * 2;
            let old = u16::from_be_bytes([data[off], data[off + 1]]);
            data[off..off + 2].copy_from_slice(&new.to_be_bytes());
            let updated = Delta::ZERO.word(old, new).apply(c);
            data[0..2].copy_from_slice(&updated.to_be_bytes());
            prop_assert!(verifies(&data));
        }

        /// Removing some words and adding others by their sums equals recomputation.
        #[test]
        fn add_remove_sum_equals_full(mut data in proptest::collection::vec(any::<u8>(), 8..64),
                                      extra in proptest::collection::vec(any::<u8>(), 0..20)) {
            let len = data.len() & !1;
            data.truncate(len);
            data[0..2].copy_from_slice(&[0, 0]);
            let c = checksum(&data);
            // Replace words 1..3 by `extra` (even length).
            let extra_len = extra.len() & !1;
            let removed = sum(&data[2..6], 0);
            let added = sum(&extra[..extra_len], 0);
            let mut new = data[..2].to_vec();
            new.extend_from_slice(&extra[..extra_len]);
            new.extend_from_slice(&data[6..]);
            let updated = Delta::ZERO.remove_sum(removed).add_sum(added).apply(c);
            new[0..2].copy_from_slice(&updated.to_be_bytes());
            prop_assert!(verifies(&new));
        }

        /// A packet whose checksum is wrong stays wrong after an incremental update.
        #[test]
        fn bad_checksum_stays_bad(mut data in proptest::collection::vec(any::<u8>(), 8..64),
                                  err in 1u16..0xffff, new in any::<u16>()) {
            let len = data.len() & !1;
            data.truncate(len);
            data[0..2].copy_from_slice(&[0, 0]);
            let c = checksum(&data);
            let bad = c.wrapping_add(err);
            prop_assume!(bad != c && !(bad == 0 && c == 0xffff) && !(bad == 0xffff && c == 0));
            data[0..2].copy_from_slice(&bad.to_be_bytes());
            prop_assume!(!verifies(&data));
            let old = u16::from_be_bytes([data[2], data[3]]);
            data[2..4].copy_from_slice(&new.to_be_bytes());
            let updated = Delta::ZERO.word(old, new).apply(bad);
            data[0..2].copy_from_slice(&updated.to_be_bytes());
            prop_assert!(!verifies(&data));
        }
    }
}
