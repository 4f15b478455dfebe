//! A small seeded generator (SplitMix64). The engine takes its seed from the caller so that a
//! replayed trace gives identical output; the daemon seeds it from the OS.

/// SplitMix64 (Steele, Lea, Flood 2014): fast, full-period, good enough for port choice.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform-enough value in `0..n` (`n > 0`; returns 0 for `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; bias is negligible for n <= 2^16.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}
