//! A packet inside a caller-owned buffer, with room in front of it.
//!
//! Translators change header sizes: IPv4 -> IPv6 grows the header by 20 bytes (more with a
//! fragment header), IPv6 -> IPv4 shrinks it. Drivers read each packet at an offset
//! ([`HEADROOM`]) so the translator can move the start of the packet instead of copying the
//! payload. Nothing here panics: moves that do not fit return `false` and change nothing.

use crate::vnet::Offload;

/// Headroom drivers leave before each packet (an IPv6 header plus a fragment header, rounded
/// up, plus slack).
pub const HEADROOM: usize = 64;

/// A packet at `bytes[head..head + len]`, with the offloads it carries ([`Offload`]: none
/// unless a driver that takes them from the kernel set them).
#[derive(Debug)]
pub struct PacketBuf<'a> {
    bytes: &'a mut [u8],
    head: usize,
    len: usize,
    offload: Offload,
}

impl<'a> PacketBuf<'a> {
    /// A packet of `len` bytes starting at `head`; `None` if that does not fit in `bytes`.
    pub fn new(bytes: &'a mut [u8], head: usize, len: usize) -> Option<Self> {
        if head.checked_add(len)? > bytes.len() {
            return None;
        }
        Some(PacketBuf {
            bytes,
            head,
            len,
            offload: Offload::NONE,
        })
    }

    /// A packet that fills all of `bytes` (no headroom).
    pub fn whole(bytes: &'a mut [u8]) -> Self {
        let len = bytes.len();
        PacketBuf {
            bytes,
            head: 0,
            len,
            offload: Offload::NONE,
        }
    }

    /// The offloads the packet carries: a partial checksum, TCP segmentation.
    pub fn offload(&self) -> Offload {
        self.offload
    }

    /// Sets the offloads (a driver after reading the packet; a translator after rewriting).
    pub fn set_offload(&mut self, o: Offload) {
        self.offload = o;
    }

    /// The packet bytes.
    pub fn data(&self) -> &[u8] {
        self.bytes
            .get(self.head..self.head + self.len)
            .unwrap_or(&[])
    }

    /// The packet bytes, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (h, l) = (self.head, self.len);
        self.bytes.get_mut(h..h + l).unwrap_or(&mut [])
    }

    /// Offset of the first packet byte in the buffer.
    pub fn head(&self) -> usize {
        self.head
    }

    /// Packet length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty packet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Shortens the packet to `len` bytes (no-op if already shorter).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Grows the packet by `n` bytes at the front (into the headroom).
    #[must_use = "false means nothing was written: the buffer is too short"]
    pub fn push_front(&mut self, n: usize) -> bool {
        match self.head.checked_sub(n) {
            Some(h) => {
                self.head = h;
                self.len += n;
                true
            }
            None => false,
        }
    }

    /// Removes `n` bytes from the front.
    #[must_use = "false means nothing was written: the buffer is too short"]
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.len {
            return false;
        }
        self.head += n;
        self.len -= n;
        true
    }

    /// Sets the length, growing at the tail within the buffer if needed.
    #[must_use = "false means nothing was written: the buffer is too short"]
    pub fn set_len(&mut self, len: usize) -> bool {
        if self
            .head
            .checked_add(len)
            .is_none_or(|end| end > self.bytes.len())
        {
            return false;
        }
        self.len = len;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_within_bounds_only() {
        let mut b = [0u8; 100];
        let mut p = PacketBuf::new(&mut b, HEADROOM, 20).unwrap();
        assert!(p.push_front(20));
        assert_eq!((p.head(), p.len()), (44, 40));
        assert!(!p.push_front(45));
        assert!(p.pull_front(40));
        assert!(!p.pull_front(1));
        assert_eq!(p.head(), 84);
        assert!(p.set_len(16));
        assert!(!p.set_len(17));
        assert!(PacketBuf::new(&mut b, 90, 11).is_none());
    }
}
