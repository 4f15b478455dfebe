//! AF_PACKET on the tester ports: a TPACKET_V2 transmit ring ([`TxRing`]: frames written into
//! shared memory, one sendto() per batch, qdisc bypassed), a plain transmit socket
//! ([`TxSocket`], sendmmsg) and a TPACKET_V3 receive ring that the kernel fills with frames and
//! a per-frame software timestamp (CLOCK_REALTIME, taken when the frame reached the port), so
//! receive time does not depend on when the reader wakes up.
//!
//! Sockets belong to the network namespace of the thread that creates them: create them after
//! [`crate::sys::enter_netns`].

use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context, Result};

const SOL_PACKET: libc::c_int = 263;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_SENDING: u32 = 2;
/// asm-generic/socket.h (x86, arm): SO_SNDBUF beyond net.core.wmem_max, for CAP_NET_ADMIN.
const SO_SNDBUFFORCE: libc::c_int = 32;
const ETH_P_ALL: u16 = 0x0003;

#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

fn ifindex(dev: &str) -> Result<u32> {
    let c = CString::new(dev).context("interface name has a NUL byte")?;
    // SAFETY: c is a valid C string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!(
            "no interface {dev} in this namespace: {}",
            io::Error::last_os_error()
        );
    }
    Ok(i)
}

fn setopt<T>(fd: libc::c_int, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: v points to a live T of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn packet_socket(proto: u16) -> Result<libc::c_int> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto.to_be())) };
    if fd < 0 {
        bail!("AF_PACKET socket: {}", io::Error::last_os_error());
    }
    Ok(fd)
}

fn bind_dev(fd: libc::c_int, dev: &str, proto: u16) -> Result<()> {
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto.to_be();
    sll.sll_ifindex = ifindex(dev)? as i32;
    // SAFETY: sll is a valid sockaddr_ll of the size passed.
    let r = unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        bail!("binding AF_PACKET to {dev}: {}", io::Error::last_os_error());
    }
    Ok(())
}

/// Transmit side: frames go out of one port as they are.
pub struct TxSocket {
    fd: libc::c_int,
}

impl TxSocket {
    pub fn open(dev: &str) -> Result<TxSocket> {
        // Protocol 0: this socket receives nothing.
        let fd = packet_socket(0)?;
        let s = TxSocket { fd };
        bind_dev(fd, dev, 0)?;
        let one: libc::c_int = 1;
        // Best effort: without it frames go through the (noqueue) qdisc path.
        let _ = setopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one);
        let sndbuf: libc::c_int = 4 << 20;
        let _ = setopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &sndbuf);
        Ok(s)
    }

    /// Sends `frames` with one sendmmsg; returns how many the kernel took (0 when its buffers
    /// are full) or an error other than ENOBUFS/EAGAIN.
    pub fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
        const MAX: usize = 64;
        let n = frames.len().min(MAX);
        // SAFETY: zeroed iovec/mmsghdr are valid; pointers set below point into `frames`,
        // which outlives the call; the kernel only reads them.
        let mut iov: [libc::iovec; MAX] = unsafe { std::mem::zeroed() };
        // SAFETY: as above: an all-zero mmsghdr is valid (null pointers, zero lengths).
        let mut msgs: [libc::mmsghdr; MAX] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            iov[i].iov_base = frames[i].as_ptr() as *mut libc::c_void;
            iov[i].iov_len = frames[i].len();
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: msgs[..n] are initialised above.
        let r = unsafe { libc::sendmmsg(self.fd, msgs.as_mut_ptr(), n as libc::c_uint, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) => Ok(0),
                _ => Err(e),
            };
        }
        Ok(r as usize)
    }
}

impl Drop for TxSocket {
    fn drop(&mut self) {
        // SAFETY: fd is ours.
        unsafe { libc::close(self.fd) };
    }
}

/// Size of one transmit ring slot: a `tpacket2_hdr` and the largest frame fit.
pub const TX_SLOT: usize = 2048;
/// Where a frame's bytes start in its slot: TPACKET_ALIGN(sizeof(tpacket2_hdr)) (the kernel's
/// `tp_hdrlen - sizeof(struct sockaddr_ll)` for TPACKET_V2 without PACKET_TX_HAS_OFF).
pub const TX_DATA_OFF: usize = 32;
/// Slots per ring block (one page holds two 2 KB slots; blocks are the kernel's allocation unit).
const TX_BLOCK: usize = 4096;
/// struct virtio_net_hdr: flags u8, gso_type u8, hdr_len, gso_size, csum_start, csum_offset
/// (u16, little endian on virtio 1.0 and on x86/arm hosts).
const VNET_HDR_LEN: usize = 10;

/// What one [`TxRing::kick`] did with the frames queued since the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kick {
    /// Frames the kernel took (handed to the port, or dropped by it after taking them).
    pub taken: usize,
    /// Frames the port refused (ENOBUFS: a veth whose peer's ring is full pushes back). A wire
    /// cannot push back, so the caller counts these as sent and lost; their slots are free again.
    pub refused: usize,
    /// Frames not attempted because the socket's send buffer was full (a tester limit, not the
    /// port's): their slots are free again and the caller sends them later.
    pub deferred: usize,
}

/// Transmit side: a TPACKET_V2 TX_RING on one port. The caller writes frames into free slots
/// ([`TxRing::slot`]), queues them ([`TxRing::queue`]) and hands the batch to the kernel with
/// one sendto() ([`TxRing::kick`]). The kernel builds an skb per frame (copied whole into its
/// head when the socket takes a virtio_net_hdr, else pointing into the ring page), and marks
/// the slot available again when the skb is freed, wherever that happens (after the device
/// forwarded it and the tester's receive port dropped it). A slot in flight is not written: [`TxRing::slot`]
/// returns None for it. The kernel only reads the ring inside sendto(), so between kicks the
/// queued-but-untaken slots are ours again.
pub struct TxRing {
    fd: libc::c_int,
    map: *mut u8,
    map_len: usize,
    frame_nr: usize,
    /// The next slot to fill; the kernel's head is here too after every kick.
    fill: usize,
    /// Slots queued since the last kick, starting at `fill`.
    queued: usize,
    /// Frames carry a virtio_net_hdr asking the kernel to copy them whole into the skb.
    vnet: bool,
}

// SAFETY: the ring is used by one thread at a time; the mapping belongs to this object.
unsafe impl Send for TxRing {}

impl TxRing {
    /// Opens a ring of `frame_nr` slots (rounded up to an even number) on `dev`.
    /// `bypass`: skip the qdisc layer (PACKET_QDISC_BYPASS), which also picks the transmit
    /// queue by the sending CPU; without it the kernel hashes each frame's flow to a queue.
    pub fn open(dev: &str, frame_nr: usize, bypass: bool) -> Result<TxRing> {
        let per_block = TX_BLOCK / TX_SLOT;
        let frame_nr = frame_nr.max(per_block).div_ceil(per_block) * per_block;
        // Protocol 0: this socket receives nothing.
        let fd = packet_socket(0)?;
        let mut ring = TxRing {
            fd,
            map: std::ptr::null_mut(),
            map_len: 0,
            frame_nr,
            fill: 0,
            queued: 0,
            vnet: false,
        };
        let v: libc::c_int = TPACKET_V2;
        setopt(fd, SOL_PACKET, PACKET_VERSION, &v).context("PACKET_VERSION V2")?;
        let one: libc::c_int = 1;
        // A malformed frame is skipped (slot available again) instead of stopping the ring.
        setopt(fd, SOL_PACKET, PACKET_LOSS, &one).context("PACKET_LOSS")?;
        // Best effort: without it frames go through the (noqueue) qdisc path.
        if bypass {
            let _ = setopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one);
        }
        // Without a virtio_net_hdr the kernel copies only the Ethernet header into the skb and
        // points the rest at the ring page, marked zero-copy: veth then copies that into a
        // fresh page per frame (skb_copy_ubufs) and the device gets a non-linear skb whose
        // headers it must pull, which cost the DUT 30-40% more per packet than the linear
        // skbs of sendmmsg (measured on forward4 and xlat-nat44). With hdr_len = the frame
        // length the whole frame is copied into the skb's head, as sendmsg does.
        ring.vnet = setopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one).is_ok();
        // Frames in flight count against the send buffer (their ring memory is the skb's
        // payload): room for the whole ring, so the buffer is never the limit.
        let sndbuf = (frame_nr * (TX_SLOT + 1024)).min(i32::MAX as usize) as libc::c_int;
        if setopt(fd, libc::SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf).is_err() {
            let _ = setopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &sndbuf);
        }
        let req = TpacketReq {
            block_size: TX_BLOCK as u32,
            block_nr: (frame_nr / per_block) as u32,
            frame_size: TX_SLOT as u32,
            frame_nr: frame_nr as u32,
        };
        setopt(fd, SOL_PACKET, PACKET_TX_RING, &req).context("PACKET_TX_RING")?;
        let len = frame_nr * TX_SLOT;
        ring.map = map_ring(fd, len).context("mmap of the transmit ring")?;
        ring.map_len = len;
        bind_dev(fd, dev, 0)?;
        Ok(ring)
    }

    /// Slots in the ring.
    pub fn frames(&self) -> usize {
        self.frame_nr
    }

    /// Index of the slot `k` places after the first unqueued one.
    fn index(&self, k: usize) -> usize {
        (self.fill + self.queued + k) % self.frame_nr
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: i < frame_nr; a slot starts with tpacket2_hdr.tp_status (u32, 2048-aligned),
        // shared with the kernel, so accessed atomically.
        unsafe { &*(self.map.add(i * TX_SLOT) as *const AtomicU32) }
    }

    /// The next unqueued slot (its index and its frame bytes) if the kernel is done with it;
    /// None while the frame last sent from it is still in flight, or when the whole ring is
    /// queued.
    pub fn slot(&mut self) -> Option<(usize, &mut [u8])> {
        if self.queued >= self.frame_nr {
            return None;
        }
        let i = self.index(0);
        let st = self.status(i).load(Ordering::Acquire);
        if st & (TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING) != 0 {
            return None;
        }
        let off = self.frame_off();
        // SAFETY: slot i is not queued and the kernel released it (status checked above), so
        // nothing else reads or writes its data until we queue it; the range lies inside the
        // mapping.
        let data = unsafe {
            std::slice::from_raw_parts_mut(self.map.add(i * TX_SLOT + off), TX_SLOT - off)
        };
        Some((i, data))
    }

    /// Where a frame starts in its slot.
    fn frame_off(&self) -> usize {
        TX_DATA_OFF + if self.vnet { VNET_HDR_LEN } else { 0 }
    }

    /// Queues the slot [`TxRing::slot`] returned last, holding a frame of `len` bytes.
    pub fn queue(&mut self, len: usize) {
        let i = self.index(0);
        let len = len.min(TX_SLOT - self.frame_off());
        let mut tp_len = len;
        if self.vnet {
            // No offloads; hdr_len: copy the whole frame into the skb's linear part.
            let mut h = [0u8; VNET_HDR_LEN];
            h[2..4].copy_from_slice(&(len as u16).to_le_bytes());
            // SAFETY: slot i is ours (see `slot`); its data area starts with room for the
            // header, inside the mapping.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    h.as_ptr(),
                    self.map.add(i * TX_SLOT + TX_DATA_OFF),
                    VNET_HDR_LEN,
                )
            };
            tp_len += VNET_HDR_LEN;
        }
        // SAFETY: slot i is ours (see `slot`); tp_len is the u32 at offset 4 of its header.
        unsafe {
            std::ptr::write_volatile(self.map.add(i * TX_SLOT + 4) as *mut u32, tp_len as u32)
        };
        self.status(i)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.queued += 1;
    }

    /// Frames queued and not yet kicked.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Hands the queued frames to the kernel with one sendto(). Fails only on errors other
    /// than the port refusing (ENOBUFS) or the send buffer being full (EAGAIN).
    pub fn kick(&mut self) -> io::Result<Kick> {
        let n = self.queued;
        if n == 0 {
            return Ok(Kick::default());
        }
        // SAFETY: a send with no buffer: the kernel reads the queued slots of the ring.
        let r = unsafe {
            libc::sendto(
                self.fd,
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        let err = (r < 0).then(io::Error::last_os_error);
        // The kernel takes frames in order from its head (== fill) and stops at the first it
        // does not take, which it leaves marked SEND_REQUEST.
        let mut taken = 0;
        while taken < n
            && self
                .status((self.fill + taken) % self.frame_nr)
                .load(Ordering::Acquire)
                & TP_STATUS_SEND_REQUEST
                == 0
        {
            taken += 1;
        }
        let rest = n - taken;
        // The untaken slots are ours again (the kernel does not look at the ring outside
        // sendto(); its head stays at the first of them, where the next frame goes).
        for k in taken..n {
            self.status((self.fill + k) % self.frame_nr)
                .store(TP_STATUS_AVAILABLE, Ordering::Release);
        }
        self.fill = (self.fill + taken) % self.frame_nr;
        self.queued = 0;
        let refused = match err.as_ref().and_then(|e| e.raw_os_error()) {
            Some(libc::ENOBUFS) => rest,
            Some(libc::EAGAIN) | None => 0,
            Some(_) => return Err(err.unwrap_or_else(|| io::Error::other("sendto"))),
        };
        Ok(Kick {
            taken,
            refused,
            deferred: rest - refused,
        })
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: map/len came from our mmap; fd is ours. Frames still in flight keep their
        // pages referenced in the kernel, which frees them when the last skb is gone.
        unsafe {
            if !self.map.is_null() {
                libc::munmap(self.map.cast(), self.map_len);
            }
            libc::close(self.fd);
        }
    }
}

#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// Maps a packet ring of `len` bytes, locked in memory where RLIMIT_MEMLOCK allows.
fn map_ring(fd: libc::c_int, len: usize) -> Result<*mut u8> {
    for flags in [libc::MAP_SHARED | libc::MAP_LOCKED, libc::MAP_SHARED] {
        // SAFETY: mapping the ring the kernel allocated for this socket; no existing memory
        // is affected (address chosen by the kernel).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            return Ok(p.cast());
        }
    }
    bail!("{}", io::Error::last_os_error())
}

/// One received frame: bytes and the kernel's receive timestamp (CLOCK_REALTIME ns).
pub struct Frame<'a> {
    pub data: &'a [u8],
    pub rx_ns: u64,
}

/// Receive side: a TPACKET_V3 ring on one port.
pub struct RxRing {
    fd: libc::c_int,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    block_nr: usize,
    next: usize,
}

// SAFETY: the ring is used by one thread at a time; the mapping belongs to this object.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Opens a ring of `block_nr` blocks of `block_size` bytes on `dev` (all frames in).
    pub fn open(dev: &str, block_size: usize, block_nr: usize) -> Result<RxRing> {
        let fd = packet_socket(ETH_P_ALL)?;
        let mut ring = RxRing {
            fd,
            map: std::ptr::null_mut(),
            map_len: 0,
            block_size,
            block_nr,
            next: 0,
        };
        let v: libc::c_int = TPACKET_V3;
        setopt(fd, SOL_PACKET, PACKET_VERSION, &v).context("PACKET_VERSION V3")?;
        let one: libc::c_int = 1;
        let _ = setopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one);
        let req = TpacketReq3 {
            block_size: block_size as u32,
            block_nr: block_nr as u32,
            frame_size: 2048,
            frame_nr: (block_size / 2048 * block_nr) as u32,
            retire_blk_tov: 2, // ms: a partly filled block is handed over after this
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setopt(fd, SOL_PACKET, PACKET_RX_RING, &req).context("PACKET_RX_RING")?;
        let len = block_size * block_nr;
        // SAFETY: mapping the ring the kernel just allocated for this socket.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd,
                0,
            )
        };
        let p = if p == libc::MAP_FAILED {
            // MAP_LOCKED may exceed RLIMIT_MEMLOCK; retry without it.
            // SAFETY: as above.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            }
        } else {
            p
        };
        if p == libc::MAP_FAILED {
            bail!("mmap of the receive ring: {}", io::Error::last_os_error());
        }
        ring.map = p.cast();
        ring.map_len = len;
        // Bind last, so frames only arrive once the ring exists.
        bind_dev(fd, dev, ETH_P_ALL)?;
        Ok(ring)
    }

    fn status(&self, block: usize) -> &AtomicU32 {
        // SAFETY: block < block_nr; offset 8 of a block descriptor is block_status (u32,
        // 4-aligned), shared with the kernel, so accessed atomically.
        unsafe { &*(self.map.add(block * self.block_size + 8) as *const AtomicU32) }
    }

    /// Waits up to `timeout_ms` for a filled block and hands each frame of it to `f`;
    /// returns the number of frames seen.
    pub fn poll_block(&mut self, timeout_ms: i32, mut f: impl FnMut(Frame<'_>)) -> usize {
        let b = self.next;
        if self.status(b).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd: self.fd,
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
            if self.status(b).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                return 0;
            }
        }
        let base = b * self.block_size;
        // SAFETY: the block belongs to us until we write TP_STATUS_KERNEL; all offsets are
        // checked against the block size before use.
        let block = unsafe { std::slice::from_raw_parts(self.map.add(base), self.block_size) };
        let rd = |off: usize| -> u32 {
            block
                .get(off..off + 4)
                .map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
                .unwrap_or(0)
        };
        let num = rd(12) as usize;
        let mut off = rd(16) as usize;
        let mut seen = 0;
        for _ in 0..num.min(self.block_size / 32) {
            if off + 32 > self.block_size {
                break;
            }
            let next = rd(off) as usize;
            let sec = u64::from(rd(off + 4));
            let nsec = u64::from(rd(off + 8));
            let snap = rd(off + 12) as usize;
            let mac = block
                .get(off + 24..off + 26)
                .map(|x| u16::from_ne_bytes([x[0], x[1]]) as usize)
                .unwrap_or(0);
            if let Some(data) = block.get(off + mac..off + mac + snap) {
                f(Frame {
                    data,
                    rx_ns: sec * 1_000_000_000 + nsec,
                });
                seen += 1;
            }
            if next == 0 {
                break;
            }
            off += next;
        }
        self.status(b).store(TP_STATUS_KERNEL, Ordering::Release);
        self.next = (b + 1) % self.block_nr;
        seen
    }

    /// Frames the kernel dropped because the ring was full, since the last call.
    pub fn drops(&self) -> u64 {
        let mut st = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: st is a valid out buffer of len bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd,
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return 0;
        }
        u64::from(st.drops)
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: map/len came from our mmap; fd is ours.
        unsafe {
            if !self.map.is_null() {
                libc::munmap(self.map.cast(), self.map_len);
            }
            libc::close(self.fd);
        }
    }
}
