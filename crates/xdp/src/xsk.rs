//! AF_XDP sockets for the slow path (`[dataplane] slow_path = "af_xdp"`, issue 25): one
//! socket per interface and receive queue, each with its own UMEM, on rings of our own over
//! libc (no xdpilone: its EUPL-1.2 licence does not sit in an MIT/Apache-2.0 workspace).
//!
//! The layout is the kernel's (Documentation/networking/af_xdp.rst, include/uapi/linux/if_xdp.h):
//! a UMEM of [`FRAMES`] chunks of [`FRAME_SIZE`] bytes registered with `XDP_UMEM_REG`, and four
//! single-producer single-consumer rings mapped from the socket -- FILL (frames we give the
//! kernel to receive into), RX (frames it filled), TX (frames we want sent), COMPLETION (frames
//! it has sent). A ring is a power-of-two array with a producer and a consumer index; each side
//! publishes its index with a release store after writing the entries and reads the other's
//! with an acquire load (the kernel's `smp_store_release` / `smp_load_acquire` pairs in
//! net/xdp/xsk_queue.h). The first half of the frames receive, the second half transmit.
//!
//! Receiving: [`Xsk::recv`] hands each frame to the caller, which copies what it needs, and
//! gives the frame straight back to the FILL ring. Only half the receive frames are ever in
//! the FILL ring at once (a completely full FILL ring can stall, the kernel learning of our
//! progress lazily): the others wait in a free list and circulate. Transmitting:
//! [`Xsk::send`] writes a frame and queues it, [`Xsk::flush`] publishes the queue and kicks
//! the kernel with `sendto` (copy mode transmits in that call, at most 32 frames per call, so
//! it is repeated while the kernel says EAGAIN), then takes back completed frames.
//!
//! veth and most drivers without zero-copy support run in copy mode (`XDP_COPY`): the kernel
//! copies each frame into the UMEM and out again. That is what this module asks for; it works
//! on every device.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes per UMEM frame (the kernel puts its XDP headroom, 256 bytes, in front of a received
/// frame: 1,792 bytes remain, more than an Ethernet frame of a 1,500-byte MTU).
pub const FRAME_SIZE: u32 = 2048;
/// Frames per socket: half receive, half transmit (8 MiB).
pub const FRAMES: u32 = 4096;
/// Entries of each ring.
const RING: u32 = 2048;

/// One mapped ring. Producer rings (FILL, TX) are written by us, consumer rings (RX,
/// COMPLETION) by the kernel.
struct Ring {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    desc: *mut u8,
    map: *mut c_void,
    map_len: usize,
    /// Our own index (producer of a producer ring, consumer of a consumer ring), published
    /// with a release store.
    ours: u32,
}

impl Ring {
    /// Maps ring `off` of `fd` at page offset `pgoff` with `RING` entries of `entry` bytes.
    fn map(fd: RawFd, off: &libc::xdp_ring_offset, pgoff: u64, entry: usize) -> io::Result<Ring> {
        let desc = usize::try_from(off.desc).map_err(|_| io::Error::other("ring offset"))?;
        let map_len = desc + RING as usize * entry;
        let pgoff = libc::off_t::try_from(pgoff).map_err(|_| io::Error::other("ring pgoff"))?;
        // SAFETY: a fresh shared mapping of the socket's ring; the kernel checks the offset
        // and the length against the ring it created; nothing else aliases the new mapping.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = map.cast::<u8>();
        let at = |o: u64| {
            usize::try_from(o)
                .unwrap_or(0)
                .min(map_len.saturating_sub(4))
        };
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS and lie inside the mapping (clamped
        // above): the producer and consumer are aligned u32 the kernel accesses atomically.
        let (producer, consumer, desc) = unsafe {
            (
                base.add(at(off.producer)).cast::<AtomicU32>().cast_const(),
                base.add(at(off.consumer)).cast::<AtomicU32>().cast_const(),
                base.add(desc),
            )
        };
        let mut r = Ring {
            producer,
            consumer,
            desc,
            map,
            map_len,
            ours: 0,
        };
        r.ours = r.load_producer_or_consumer();
        Ok(r)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping (see `map`); AtomicU32 has u32's layout.
        unsafe { &*self.producer }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as in `prod`.
        unsafe { &*self.consumer }
    }

    /// Starting value of our index (both are 0 on a new socket).
    fn load_producer_or_consumer(&self) -> u32 {
        self.prod().load(Ordering::Relaxed)
    }

    /// Entry `i` (modulo the ring) as a pointer to `entry` bytes.
    fn entry(&self, i: u32, entry: usize) -> *mut u8 {
        let idx = (i & (RING - 1)) as usize;
        // SAFETY: idx < RING, so the entry lies inside the descriptor array we mapped.
        unsafe { self.desc.add(idx * entry) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `Ring::map`, used by nothing after this.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// `XDP_STATISTICS` of a socket: what the kernel could not deliver.
#[derive(Clone, Copy, Debug, Default)]
pub struct XskStats {
    /// Frames dropped for a full RX ring.
    pub rx_ring_full: u64,
    /// Frames dropped for want of a frame in the FILL ring.
    pub rx_fill_empty: u64,
    /// Frames dropped for other reasons (too big for a frame, ...).
    pub rx_dropped: u64,
}

/// One AF_XDP socket bound to an interface's receive queue, with its UMEM and rings.
pub struct Xsk {
    fd: OwnedFd,
    umem: *mut u8,
    umem_len: usize,
    fill: Ring,
    comp: Ring,
    rx: Ring,
    tx: Ring,
    free_rx: Vec<u64>,
    free_tx: Vec<u64>,
    /// TX entries written but not published yet.
    tx_queued: u32,
    ifindex: u32,
    queue: u32,
}

// SAFETY: the raw pointers point into mappings this value owns; a socket is used by one
// thread at a time (moved to its worker), never shared.
unsafe impl Send for Xsk {}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(0);
    // SAFETY: `v` is a valid T for the duration of the call and `len` is its size.
    check(unsafe { libc::setsockopt(fd, libc::SOL_XDP, opt, (v as *const T).cast(), len) })
}

impl Xsk {
    /// Opens a socket on queue `queue` of interface `ifindex` in copy mode.
    pub fn open(ifindex: u32, queue: u32) -> io::Result<Xsk> {
        // SAFETY: plain socket(2) call with constant arguments.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        check(raw)?;
        // SAFETY: `raw` is a descriptor we just opened and own exclusively.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem_len = (FRAMES * FRAME_SIZE) as usize;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // From here the mapping is owned by a guard until `Xsk` takes it.
        struct Umem(*mut c_void, usize);
        impl Drop for Umem {
            fn drop(&mut self) {
                // SAFETY: the mapping made above, not used after this.
                unsafe { libc::munmap(self.0, self.1) };
            }
        }
        let guard = Umem(umem, umem_len);
        let reg = libc::xdp_umem_reg {
            addr: umem as u64,
            len: umem_len as u64,
            chunk_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        let f = fd.as_raw_fd();
        setsockopt(f, libc::XDP_UMEM_REG, &reg)?;
        setsockopt(f, libc::XDP_UMEM_FILL_RING, &RING)?;
        setsockopt(f, libc::XDP_UMEM_COMPLETION_RING, &RING)?;
        setsockopt(f, libc::XDP_RX_RING, &RING)?;
        setsockopt(f, libc::XDP_TX_RING, &RING)?;
        // SAFETY: xdp_mmap_offsets is plain integers; all zeroes is a valid value.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len =
            libc::socklen_t::try_from(std::mem::size_of::<libc::xdp_mmap_offsets>()).unwrap_or(0);
        // SAFETY: `off` is writable for `len` bytes, `len` is a valid in/out length.
        check(unsafe {
            libc::getsockopt(
                f,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                &mut len,
            )
        })?;
        let desc = std::mem::size_of::<libc::xdp_desc>();
        let rx = Ring::map(f, &off.rx, libc::XDP_PGOFF_RX_RING as u64, desc)?;
        let tx = Ring::map(f, &off.tx, libc::XDP_PGOFF_TX_RING as u64, desc)?;
        let fill = Ring::map(f, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING, 8)?;
        let comp = Ring::map(f, &off.cr, libc::XDP_UMEM_PGOFF_COMPLETION_RING, 8)?;
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        let salen =
            libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_xdp>()).unwrap_or(0);
        // SAFETY: `sa` is a valid sockaddr_xdp of `salen` bytes.
        check(unsafe { libc::bind(f, (&sa as *const libc::sockaddr_xdp).cast(), salen) })?;
        std::mem::forget(guard);
        let half = u64::from(FRAMES / 2);
        let mut x = Xsk {
            fd,
            umem: umem.cast(),
            umem_len,
            fill,
            comp,
            rx,
            tx,
            free_rx: (0..half).map(|i| i * u64::from(FRAME_SIZE)).collect(),
            free_tx: (half..u64::from(FRAMES))
                .map(|i| i * u64::from(FRAME_SIZE))
                .collect(),
            tx_queued: 0,
            ifindex,
            queue,
        };
        x.refill();
        Ok(x)
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The receive queue it is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Gives free receive frames to the kernel, keeping the FILL ring at most half full.
    fn refill(&mut self) {
        let cons = self.fill.cons().load(Ordering::Acquire);
        let in_ring = self.fill.ours.wrapping_sub(cons);
        let room = (RING / 2).saturating_sub(in_ring);
        let n = room.min(u32::try_from(self.free_rx.len()).unwrap_or(u32::MAX));
        if n == 0 {
            return;
        }
        for k in 0..n {
            let Some(addr) = self.free_rx.pop() else {
                break;
            };
            let p = self
                .fill
                .entry(self.fill.ours.wrapping_add(k), 8)
                .cast::<u64>();
            // SAFETY: the entry is ours to write (between the kernel's consumer and our
            // producer plus the room computed above), 8-byte aligned inside the mapping.
            unsafe { p.write(addr) };
        }
        self.fill.ours = self.fill.ours.wrapping_add(n);
        self.fill.prod().store(self.fill.ours, Ordering::Release);
    }

    /// Frame bytes at `addr`, `len` long, if inside the UMEM.
    fn frame(&self, addr: u64, len: u32) -> Option<&[u8]> {
        let start = usize::try_from(addr).ok()?;
        let end = start.checked_add(len as usize)?;
        if end > self.umem_len {
            return None;
        }
        // SAFETY: [start, end) lies inside the UMEM mapping we own; the kernel filled this
        // frame and does not touch it until we return it to the FILL ring.
        Some(unsafe { std::slice::from_raw_parts(self.umem.add(start), len as usize) })
    }

    /// Hands up to `max` received frames to `f` (Ethernet frames as received), then gives
    /// the frames back to the kernel; returns how many.
    pub fn recv(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let prod = self.rx.prod().load(Ordering::Acquire);
        let avail = prod.wrapping_sub(self.rx.ours) as usize;
        let n = avail.min(max);
        let desc = std::mem::size_of::<libc::xdp_desc>();
        for k in 0..n {
            let p = self
                .rx
                .entry(self.rx.ours.wrapping_add(k as u32), desc)
                .cast::<libc::xdp_desc>();
            // SAFETY: the entry lies between our consumer and the kernel's producer, which it
            // published (acquire above); xdp_desc entries are 16-byte aligned in the ring.
            let d = unsafe { p.read() };
            if let Some(bytes) = self.frame(d.addr, d.len) {
                f(bytes);
            }
            self.free_rx.push(d.addr & !u64::from(FRAME_SIZE - 1));
        }
        self.rx.ours = self.rx.ours.wrapping_add(n as u32);
        self.rx.cons().store(self.rx.ours, Ordering::Release);
        self.refill();
        n
    }

    /// Whether received frames wait.
    pub fn rx_ready(&self) -> bool {
        self.rx.prod().load(Ordering::Acquire) != self.rx.ours
    }

    /// Writes a frame with `build` (given a frame's bytes, returns the length it wrote, 0 to
    /// give up) and queues it for [`Xsk::flush`]; false when no frame or TX slot is free.
    pub fn send(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> bool {
        if self.free_tx.is_empty() {
            self.reclaim();
        }
        let cons = self.tx.cons().load(Ordering::Acquire);
        if self.tx.ours.wrapping_sub(cons) >= RING {
            return false;
        }
        let Some(addr) = self.free_tx.pop() else {
            return false;
        };
        let Ok(start) = usize::try_from(addr) else {
            return false;
        };
        if start + FRAME_SIZE as usize > self.umem_len {
            return false;
        }
        // SAFETY: a transmit frame inside the UMEM that is ours (in the free list: neither
        // queued nor in flight), so no one else reads or writes it now.
        let buf =
            unsafe { std::slice::from_raw_parts_mut(self.umem.add(start), FRAME_SIZE as usize) };
        let len = build(buf).min(FRAME_SIZE as usize);
        if len == 0 {
            self.free_tx.push(addr);
            return false;
        }
        let desc = std::mem::size_of::<libc::xdp_desc>();
        let p = self
            .tx
            .entry(self.tx.ours.wrapping_add(self.tx_queued), desc)
            .cast::<libc::xdp_desc>();
        let d = libc::xdp_desc {
            addr,
            len: len as u32,
            options: 0,
        };
        // SAFETY: the entry is past our producer and within RING of the kernel's consumer
        // (checked above, and tx_queued counts into that room).
        unsafe { p.write(d) };
        self.tx_queued += 1;
        if self.tx_queued >= 64 {
            self.flush();
        }
        true
    }

    /// Publishes the queued frames, kicks the kernel to send them, and takes back the frames
    /// it has sent.
    pub fn flush(&mut self) {
        if self.tx_queued > 0 {
            self.tx.ours = self.tx.ours.wrapping_add(self.tx_queued);
            self.tx_queued = 0;
            self.tx.prod().store(self.tx.ours, Ordering::Release);
            // Copy mode sends at most 32 frames per call and says EAGAIN when more wait.
            for _ in 0..(RING / 32 + 1) {
                // SAFETY: sendto with no buffer on our socket: the AF_XDP transmit kick.
                let rc = unsafe {
                    libc::sendto(
                        self.fd.as_raw_fd(),
                        std::ptr::null(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null(),
                        0,
                    )
                };
                let again = rc < 0
                    && matches!(
                        io::Error::last_os_error().raw_os_error(),
                        Some(libc::EAGAIN) | Some(libc::EBUSY)
                    );
                let cons = self.tx.cons().load(Ordering::Acquire);
                if !again || cons == self.tx.ours {
                    break;
                }
            }
        }
        self.reclaim();
    }

    /// Takes back the frames the kernel has sent (COMPLETION ring).
    fn reclaim(&mut self) {
        let prod = self.comp.prod().load(Ordering::Acquire);
        let n = prod.wrapping_sub(self.comp.ours);
        for k in 0..n {
            let p = self
                .comp
                .entry(self.comp.ours.wrapping_add(k), 8)
                .cast::<u64>();
            // SAFETY: published by the kernel (acquire above), 8-byte aligned in the ring.
            let addr = unsafe { p.read() };
            self.free_tx.push(addr & !u64::from(FRAME_SIZE - 1));
        }
        self.comp.ours = prod;
        self.comp.cons().store(prod, Ordering::Release);
    }

    /// The kernel's drop counters for this socket.
    pub fn stats(&self) -> XskStats {
        // SAFETY: xdp_statistics is plain integers; all zeroes is a valid value.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len =
            libc::socklen_t::try_from(std::mem::size_of::<libc::xdp_statistics>()).unwrap_or(0);
        // SAFETY: `s` is writable for `len` bytes, `len` is a valid in/out length.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut s as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return XskStats::default();
        }
        XskStats {
            rx_ring_full: s.rx_ring_full,
            rx_fill_empty: s.rx_fill_ring_empty_descs,
            rx_dropped: s.rx_dropped,
        }
    }
}

impl AsFd for Xsk {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Xsk {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for Xsk {
    fn drop(&mut self) {
        // SAFETY: the UMEM mapping made in `open`; the rings (dropped after this) and the
        // socket no longer use it once the socket closes, and nothing of ours refers to it.
        unsafe { libc::munmap(self.umem.cast(), self.umem_len) };
    }
}
