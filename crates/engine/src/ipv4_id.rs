//! Identification and Don't Fragment of the IPv4 packets the translator makes from
//! unfragmented IPv6 ones (RFC 7915 5.1).
//!
//! RFC 7915 5.1 (unlike RFC 6145, which it obsoletes): "Identification: Set according to a
//! Fragment Identification algorithm at the translator"; "Flags: ... The Don't Fragment (DF)
//! flag is set as follows: If the size of the translated IPv4 packet is less than or equal
//! to 1260 bytes, it is set to zero; otherwise, it is set to one." So an IPv4 router behind
//! the translator may fragment a small packet for a link below 1280 bytes (where the IPv6
//! host, which never sees a Packet Too Big below 1280, cannot help), and a fragmented packet
//! needs an identification that does not repeat soon for its (source, destination,
//! protocol) (RFC 791; RFC 6864 4.1).
//!
//! The identification comes from RFC 7739 5.3's hash-based generator: a keyed hash of the
//! (source, destination, protocol) picks a counter in a table and an offset, and the
//! identification is offset + counter, the counter then incremented. Packets to one
//! destination get consecutive values (no quick repeat), different destinations share
//! nothing an observer could use to predict another's (the key is random per engine).
//! Packets above 1260 bytes leave with DF set and identification 0: they are atomic
//! datagrams, whose identification has no meaning (RFC 6864 4.1: "MAY set the IPv4 ID field
//! of atomic datagrams to any value"), so they do not use the counters.
//!
//! The XDP fast path writes the same header for a session's later packets: its recipe holds
//! the session's offset (with the top bit flipped, so the two counters of a destination start
//! half the space apart) and counter slot, and the program counts in a table of its own
//! ([`Ipv4Ids::recipe`]).

use crate::rng::Rng;

/// RFC 7915 5.1: translated IPv4 packets up to this many bytes leave with DF clear.
pub const DF_LIMIT: usize = 1260;

/// Counters in the table (a power of two; the XDP program's table has as many).
pub const SLOTS: usize = 4096;

/// The XDP fast path's offset: the engine's with the top bit flipped.
pub const FAST_PATH_OFFSET: u16 = 0x8000;

/// RFC 7739 5.3's generator for one translator.
pub struct Ipv4Ids {
    /// Secret keys of the hash (random per engine).
    k: [u64; 4],
    counters: Box<[u16]>,
}

/// The 128-bit product of `a` and `b`, its halves folded (the mixing step of the engine's
/// keyed hashes, `index::KeyHasher`).
#[inline(always)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "the product's two 64-bit halves, folded"
)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

impl Ipv4Ids {
    /// A generator keyed from `seed`; the counters start at random values (RFC 7739 5.3).
    pub fn new(seed: u64) -> Ipv4Ids {
        let mut rng = Rng::new(seed ^ 0x6964_6964_6964_6964);
        let k = [0; 4].map(|_: u64| rng.next_u64() | 1);
        let counters = (0..SLOTS)
            .map(|_| (rng.next_u64() & 0xffff) as u16)
            .collect();
        Ipv4Ids { k, counters }
    }

    /// The offset and counter slot of (`src`, `dst`, `proto`): two keyed multiplications of
    /// the packed triple (a keyed hash, not a cryptographic one: what an observer sees of its
    /// own destinations' identifications does not give the keys away easily, and the keys
    /// are new with every start).
    #[inline(always)]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the slot is masked to SLOTS - 1 (4095)"
    )]
    fn place(&self, src: u32, dst: u32, proto: u8) -> (u16, usize) {
        let [k0, k1, k2, k3] = self.k;
        let pair = (u64::from(src) << 32) | u64::from(dst);
        let h = fold_mul(fold_mul(pair ^ k0, u64::from(proto) ^ k1) ^ k2, k3);
        ((h >> 48) as u16, (h as usize) & (SLOTS - 1))
    }

    /// Identification and DF for an unfragmented IPv4 packet of `total_len` bytes from `src`
    /// to `dst` (RFC 7915 5.1): up to [`DF_LIMIT`] DF clear and the next identification of
    /// the triple, above it DF set and identification 0.
    #[inline(always)]
    pub fn next(&mut self, total_len: usize, src: u32, dst: u32, proto: u8) -> (u16, bool) {
        if total_len > DF_LIMIT {
            return (0, true);
        }
        let (offset, slot) = self.place(src, dst, proto);
        let Some(c) = self.counters.get_mut(slot) else {
            return (0, true);
        };
        let id = offset.wrapping_add(*c);
        *c = c.wrapping_add(1);
        (id, false)
    }

    /// The fast path's part for a session sending from `src` to `dst`: its offset and the
    /// slot of its counter in the XDP program's table.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the slot is below SLOTS (4096)"
    )]
    pub fn recipe(&self, src: u32, dst: u32, proto: u8) -> (u16, u16) {
        let (offset, slot) = self.place(src, dst, proto);
        (offset ^ FAST_PATH_OFFSET, slot as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7915_5_1_df_clear_up_to_1260_bytes_and_set_above() {
        let mut ids = Ipv4Ids::new(1);
        assert!(!ids.next(1260, 1, 2, 17).1);
        assert_eq!(ids.next(1261, 1, 2, 17), (0, true));
        assert!(!ids.next(28, 1, 2, 17).1);
    }

    #[test]
    fn rfc7739_identifications_of_one_destination_do_not_repeat_soon() {
        let mut ids = Ipv4Ids::new(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..60_000 {
            assert!(seen.insert(ids.next(100, 0xc000_0201, 0xc633_6401, 6).0));
        }
    }

    #[test]
    fn rfc7739_keyed_per_engine() {
        let a: Vec<u16> = {
            let mut ids = Ipv4Ids::new(1);
            (0..4).map(|_| ids.next(100, 1, 2, 6).0).collect()
        };
        let mut other = Ipv4Ids::new(2);
        let b: Vec<u16> = (0..4).map(|_| other.next(100, 1, 2, 6).0).collect();
        assert_ne!(a, b);
        // The same seed gives the same sequence: a replayed trace is replayed exactly.
        let mut again = Ipv4Ids::new(1);
        let c: Vec<u16> = (0..4).map(|_| again.next(100, 1, 2, 6).0).collect();
        assert_eq!(a, c);
    }
}
