//! A bounded, lock-free, single-producer single-consumer ring of packets between two packet
//! workers (the daemon has one per ordered pair: worker i hands worker k the packets k owns).
//!
//! The producer copies a packet into the next free slot behind [`xlat_wire::HEADROOM`] bytes
//! ([`Producer::push`]); the consumer takes the waiting packets as [`xlat_wire::PacketBuf`]s
//! over the slots themselves ([`Consumer::batch`]), so the engine translates them in place
//! and the slots go back to the producer when the batch is dropped. A full ring refuses the
//! packet (the caller counts the drop); nothing blocks. Slot buffers are allocated on their
//! first use and keep their size, so a warm ring allocates nothing.
//!
//! The algorithm is Lamport's queue: `tail` is written only by the producer, `head` only by
//! the consumer; a slot between `head` and `tail` belongs to the consumer, any other slot to
//! the producer. The release store that publishes an index follows the writes to the slots
//! it hands over, and the acquire load that reads the other side's index precedes the
//! accesses to them.
//!
//! [`Doorbell`] wakes a consumer that sleeps in poll(2) on its eventfd, and only then: the
//! consumer marks itself asleep and checks its rings once more before it waits; a producer
//! checks the mark after publishing. The two sequentially consistent fences between those
//! steps make sure at least one side sees the other (no lost wake-up).

use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use xlat_wire::vnet::Offload;
use xlat_wire::{PacketBuf, HEADROOM};

use crate::sys::Waker;

/// Bytes kept free behind each packet in a slot (translators write at most at the front,
/// into the headroom; this is slack).
const TAILROOM: usize = 64;

/// An index on its own cache line, so the producer's and the consumer's writes do not
/// contend for one line.
#[repr(align(128))]
struct Padded(AtomicUsize);

struct Slot {
    buf: UnsafeCell<Vec<u8>>,
    len: UnsafeCell<usize>,
    /// The packet's kernel offloads (a TCP super-packet travels whole).
    off: UnsafeCell<Offload>,
}

struct Shared {
    slots: Box<[Slot]>,
    mask: usize,
    /// Buffer size a slot gets on first use (it grows for a larger packet).
    slot_bytes: usize,
    /// Next slot the consumer reads; written by the consumer only.
    head: Padded,
    /// Next slot the producer writes; written by the producer only.
    tail: Padded,
}

// SAFETY: the slots' `UnsafeCell`s are accessed by at most one thread at a time: the
// producer only touches slots in [tail, head + capacity) and the consumer only slots in
// [head, tail), where each side reads the other's index with acquire and publishes its own
// with release after it is done with the slots it hands over (module docs). The indexes are
// atomics, and the rest is immutable after construction.
unsafe impl Sync for Shared {}

impl Shared {
    fn slot(&self, i: usize) -> Option<&Slot> {
        self.slots.get(i & self.mask)
    }
}

/// The writing end of a ring (one thread).
pub struct Producer {
    shared: Arc<Shared>,
    /// Our own `tail` (only we write it).
    tail: usize,
    /// The consumer's `head` as last read; refreshed when the ring looks full.
    head: usize,
}

/// The reading end of a ring (one thread).
pub struct Consumer {
    shared: Arc<Shared>,
    /// Our own `head` (only we write it).
    head: usize,
}

/// A ring of `capacity` slots (rounded up to a power of two, at least 2), each buffer
/// `slot_bytes` of packet room (plus headroom) when first used.
pub fn ring(capacity: usize, slot_bytes: usize) -> (Producer, Consumer) {
    let cap = capacity.max(2).next_power_of_two();
    let slots = (0..cap)
        .map(|_| Slot {
            buf: UnsafeCell::new(Vec::new()),
            len: UnsafeCell::new(0),
            off: UnsafeCell::new(Offload::NONE),
        })
        .collect();
    let shared = Arc::new(Shared {
        slots,
        mask: cap - 1,
        slot_bytes: HEADROOM + slot_bytes + TAILROOM,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (
        Producer {
            shared: shared.clone(),
            tail: 0,
            head: 0,
        },
        Consumer { shared, head: 0 },
    )
}

impl Producer {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.slots.len()
    }

    /// Copies `pkt` into the next free slot and hands it to the consumer; `false` (and
    /// nothing written) when the ring is full.
    pub fn push(&mut self, pkt: &[u8]) -> bool {
        self.push_with(pkt, Offload::NONE)
    }

    /// [`Producer::push`] for a packet with kernel offloads `off`.
    pub fn push_with(&mut self, pkt: &[u8], off: Offload) -> bool {
        let cap = self.capacity();
        if self.tail.wrapping_sub(self.head) >= cap {
            self.head = self.shared.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head) >= cap {
                return false;
            }
        }
        let Some(slot) = self.shared.slot(self.tail) else {
            return false;
        };
        // SAFETY: slot `tail` is not in [head, tail) (the ring is not full, checked against
        // a `head` read with acquire, so the consumer released it), so only this thread
        // accesses it until the release store below publishes it.
        let (buf, len, o) = unsafe {
            (
                &mut *slot.buf.get(),
                &mut *slot.len.get(),
                &mut *slot.off.get(),
            )
        };
        *o = off;
        let need = HEADROOM + pkt.len() + TAILROOM;
        if buf.len() < need {
            buf.resize(need.max(self.shared.slot_bytes), 0);
        }
        let Some(dst) = buf.get_mut(HEADROOM..HEADROOM + pkt.len()) else {
            return false;
        };
        dst.copy_from_slice(pkt);
        *len = pkt.len();
        self.tail = self.tail.wrapping_add(1);
        self.shared.tail.0.store(self.tail, Ordering::Release);
        true
    }
}

impl Consumer {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.slots.len()
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.shared
            .tail
            .0
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }

    /// True when no packet waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `max` waiting packets, oldest first, to translate in place; their slots go back
    /// to the producer when the batch is dropped.
    pub fn batch(&mut self, max: usize) -> ReadBatch<'_> {
        let n = self.len().min(max);
        ReadBatch { ring: self, n }
    }
}

/// Packets taken from a ring by [`Consumer::batch`]; dropping it frees their slots.
pub struct ReadBatch<'a> {
    ring: &'a mut Consumer,
    n: usize,
}

impl ReadBatch<'_> {
    /// Number of packets in the batch.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The packets, mutable and with their headroom, in the order they were pushed.
    pub fn packets_mut(&mut self) -> Vec<PacketBuf<'_>> {
        let shared = &self.ring.shared;
        (0..self.n)
            .filter_map(|i| {
                let slot = shared.slot(self.ring.head.wrapping_add(i))?;
                // SAFETY: slots [head, head + n) were published by the producer (n is at
                // most tail - head, read with acquire) and stay ours until this batch drops
                // (the release store in `drop`); `self` is borrowed mutably for the lifetime
                // of the returned buffers, so no second batch can alias them, and each index
                // names a distinct slot (n <= capacity).
                let (buf, len, off) =
                    unsafe { (&mut *slot.buf.get(), *slot.len.get(), *slot.off.get()) };
                let mut p = PacketBuf::new(buf.as_mut_slice(), HEADROOM, len)?;
                p.set_offload(off);
                Some(p)
            })
            .collect()
    }
}

impl Drop for ReadBatch<'_> {
    fn drop(&mut self) {
        self.ring.head = self.ring.head.wrapping_add(self.n);
        self.ring
            .shared
            .head
            .0
            .store(self.ring.head, Ordering::Release);
    }
}

/// Wakes a worker that sleeps in poll(2) on its eventfd when another worker hands it
/// packets; a worker that is busy is not woken (no system call).
#[derive(Debug)]
pub struct Doorbell {
    waker: Arc<Waker>,
    asleep: AtomicBool,
}

impl Doorbell {
    /// A doorbell on `waker`, the eventfd the worker polls (others, like the control
    /// thread, may wake it directly).
    pub fn new(waker: Arc<Waker>) -> Doorbell {
        Doorbell {
            waker,
            asleep: AtomicBool::new(false),
        }
    }

    /// The eventfd the sleeping worker polls.
    pub fn waker(&self) -> &Arc<Waker> {
        &self.waker
    }

    /// Consumer, before it waits: marks it asleep. It must then check its rings once more
    /// and not wait if one has packets (call [`Doorbell::awake`] either way after).
    pub fn sleep(&self) {
        self.asleep.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Consumer, after waiting (or deciding not to).
    pub fn awake(&self) {
        self.asleep.store(false, Ordering::Relaxed);
    }

    /// Producer, after pushing: wakes the consumer if it sleeps. Returns true if it woke it.
    pub fn ring(&self) -> bool {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) {
            self.waker.wake();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::wait_readable;
    use std::os::fd::AsFd;
    use std::time::{Duration, Instant};

    fn pkt(i: u32, len: usize) -> Vec<u8> {
        let mut p = vec![(i % 251) as u8; len.max(4)];
        p[..4].copy_from_slice(&i.to_be_bytes());
        p
    }

    #[test]
    fn order_and_in_place_translation() {
        let (mut tx, mut rx) = ring(8, 100);
        assert_eq!(tx.capacity(), 8);
        assert!(rx.is_empty());
        for i in 0..5 {
            assert!(tx.push(&pkt(i, 20 + i as usize)));
        }
        assert_eq!(rx.len(), 5);
        {
            let mut b = rx.batch(3);
            assert_eq!(b.len(), 3);
            let mut ps = b.packets_mut();
            for (i, p) in ps.iter_mut().enumerate() {
                assert_eq!(p.data(), &pkt(i as u32, 20 + i)[..]);
                assert_eq!(p.head(), HEADROOM);
                // Translators grow headers into the headroom (IPv4 -> IPv6: 20 bytes).
                assert!(p.push_front(20));
            }
        }
        assert_eq!(rx.len(), 2);
        let mut b = rx.batch(64);
        let ps = b.packets_mut();
        assert_eq!(ps.len(), 2);
        assert_eq!(ps[0].data(), &pkt(3, 23)[..]);
        assert_eq!(ps[1].data(), &pkt(4, 24)[..]);
    }

    #[test]
    fn full_ring_refuses_until_the_consumer_frees_slots() {
        let (mut tx, mut rx) = ring(3, 64); // rounded up to 4
        for i in 0..4 {
            assert!(tx.push(&pkt(i, 40)));
        }
        assert!(!tx.push(&pkt(9, 40)), "a full ring takes nothing");
        drop(rx.batch(1));
        assert!(tx.push(&pkt(4, 40)));
        assert!(!tx.push(&pkt(10, 40)));
        let mut b = rx.batch(8);
        let got: Vec<u32> = b
            .packets_mut()
            .iter()
            .map(|p| u32::from_be_bytes([p.data()[0], p.data()[1], p.data()[2], p.data()[3]]))
            .collect();
        assert_eq!(got, [1, 2, 3, 4]);
        // A packet larger than the slot size grows the slot's buffer.
        drop(b);
        assert!(tx.push(&pkt(5, 9000)));
        let mut b = rx.batch(1);
        assert_eq!(b.packets_mut()[0].len(), 9000);
    }

    /// Two threads: every packet arrives once, in order, while the ring wraps many times.
    #[test]
    fn threads_see_every_packet_in_order() {
        let (mut tx, mut rx) = ring(16, 64);
        const N: u32 = 200_000;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            while i < N && Instant::now() < deadline {
                if tx.push(&pkt(i, 8 + (i as usize % 50))) {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            i
        });
        let mut next = 0u32;
        let deadline = Instant::now() + Duration::from_secs(60);
        while next < N && Instant::now() < deadline {
            let mut b = rx.batch(7);
            for p in b.packets_mut() {
                assert_eq!(p.data(), &pkt(next, 8 + (next as usize % 50))[..]);
                next += 1;
            }
        }
        assert_eq!(t.join().ok(), Some(N));
        assert_eq!(next, N);
    }

    /// The doorbell wakes a sleeping consumer's poll, and costs nothing when it is awake.
    #[test]
    fn doorbell_wakes_only_a_sleeper() -> std::io::Result<()> {
        let bell = Arc::new(Doorbell::new(Arc::new(Waker::new()?)));
        assert!(!bell.ring(), "an awake consumer is not woken");
        let [r] = wait_readable([bell.waker().as_fd()], Duration::ZERO)?;
        assert!(!r);
        let (mut tx, rx) = ring(4, 64);
        let b2 = bell.clone();
        let producer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            assert!(tx.push(&pkt(1, 20)));
            b2.ring()
        });
        bell.sleep();
        let woke = if rx.is_empty() {
            let [r] = wait_readable([bell.waker().as_fd()], Duration::from_secs(10))?;
            r
        } else {
            true
        };
        bell.awake();
        bell.waker().drain();
        assert!(woke, "the consumer slept through a push");
        assert_eq!(rx.len(), 1);
        let _ = producer.join();
        Ok(())
    }
}
