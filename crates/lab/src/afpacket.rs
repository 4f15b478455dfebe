//! AF_PACKET on the tester ports: a transmit socket that writes whole Ethernet frames in
//! batches (sendmmsg, qdisc bypassed) and a TPACKET_V3 receive ring that the kernel fills with
//! frames and a per-frame software timestamp (CLOCK_REALTIME, taken when the frame reached the
//! port), so receive time does not depend on when the reader wakes up.
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
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
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
