//! Packets for the engine benchmarks the way a receive ring hands them over: each one is
//! written into a reused buffer that is already in cache, as a TUN read or an AF_XDP ring
//! delivers it, rather than copied out of a table holding every flow's packet (64 MB at 1M
//! flows, 640 MB at 10M). Streaming such a table costs the timed loop a cache line per
//! packet that no daemon pays -- 53 -> 62 ns per packet at 1M NAT44 sessions -- so it would
//! be measured as the engine's.
//!
//! The flows' packets differ from the first one in a few 16-bit words (addresses, ports,
//! checksums): those word positions are found once, and each packet is kept as its words at
//! them (4 of 32 for the UDP flows here). Writing a packet is a copy of the 64-byte template
//! (in L1) and those few words.

/// All flows' packets as a template and, per packet, the words in which it differs.
pub struct Arrivals {
    template: Vec<u8>,
    /// Byte offsets of the 16-bit words in which some packet differs from the template.
    at: Vec<usize>,
    /// `at.len()` words per packet, in flow order (as they sit in the packet).
    recs: Vec<[u8; 2]>,
    next: usize,
    count: usize,
}

impl Arrivals {
    /// The `n` packets `packet(0..n)`, all of one length (the template is packet 0).
    /// `packet` is called twice per flow: once to find where they differ, once to keep it.
    pub fn new(n: usize, mut packet: impl FnMut(usize) -> Vec<u8>) -> Arrivals {
        assert!(n > 0, "no packets");
        let template = packet(0);
        assert_eq!(template.len() % 2, 0, "packets of whole 16-bit words");
        let mut differs = vec![false; template.len() / 2];
        for i in 1..n {
            let p = packet(i);
            assert_eq!(p.len(), template.len(), "packets of one length");
            for ((d, a), b) in differs.iter_mut().zip(p.chunks(2)).zip(template.chunks(2)) {
                *d |= a != b;
            }
        }
        let at: Vec<usize> = (0..differs.len())
            .filter(|&w| differs[w])
            .map(|w| 2 * w)
            .collect();
        let mut recs = Vec::with_capacity(n * at.len());
        for i in 0..n {
            let p = packet(i);
            recs.extend(at.iter().map(|&k| [p[k], p[k + 1]]));
        }
        Arrivals {
            template,
            at,
            recs,
            next: 0,
            count: n,
        }
    }

    /// The packets' length.
    #[allow(dead_code)] // not every bench needs it
    pub fn len(&self) -> usize {
        self.template.len()
    }

    /// Writes the next packet (after the last, the first again) to the front of `buf`.
    #[inline]
    pub fn write_next(&mut self, buf: &mut [u8]) {
        let w = self.at.len();
        let rec = &self.recs[self.next * w..self.next * w + w];
        buf[..self.template.len()].copy_from_slice(&self.template);
        for (&k, w) in self.at.iter().zip(rec) {
            buf[k..k + 2].copy_from_slice(w);
        }
        self.next = if self.next + 1 == self.count {
            0
        } else {
            self.next + 1
        };
    }
}
