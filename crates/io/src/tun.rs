//! A Linux TUN device: layer-3 packets in and out of the kernel, one `read`/`write` each.
//!
//! [`Tun::open`] attaches to `/dev/net/tun` with `TUNSETIFF` and `IFF_TUN | IFF_NO_PI` (no
//! packet-information header: each read returns exactly one IP packet), makes the descriptor
//! non-blocking and close-on-exec. If the interface did not exist it is created non-persistent,
//! so the kernel deletes it when the descriptor closes (on drop, on exit, on a crash); an existing
//! persistent interface (`ip tuntap add ...`) is attached to and left in place.
//!
//! [`Tun::open_queues`] opens `n` queues of one interface for `n` packet workers: with
//! `n > 1` each descriptor is attached with `IFF_MULTI_QUEUE`, and the kernel spreads
//! received packets over the queues by flow (and sends a flow's packets to the queue that
//! last wrote packets of that flow: tun's automatic flow steering); `n = 1` is [`Tun::open`].
//! The interface lives while any queue is open.
//!
//! [`Tun::set_mtu`] and [`Tun::set_up`] use `SIOCSIFMTU` / `SIOCGIFFLAGS` / `SIOCSIFFLAGS` on an
//! `AF_INET` datagram socket, as `ip link set` does. [`RecvBatch`] reads packets until the
//! device has none left (`EAGAIN`) or the batch is full, into buffers allocated once.
//!
//! With offloads ([`Tun::open_queues_offload`]) each descriptor also has `IFF_VNET_HDR`
//! and the device `TUNSETOFFLOAD` with `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 |
//! TUN_F_TSO_ECN`: the kernel then hands over TCP super-packets (what GRO merged, or a local
//! sender's TSO made: up to 64 KB) with partial checksums, each behind a 10-byte
//! virtio-net header ([`xlat_wire::vnet`]), and takes them back the same way, segmenting
//! them (in software or on the egress NIC) only where they leave. Every read then carries
//! the header, and every write needs one.
//!
//! Needs root or `CAP_NET_ADMIN`.

use std::ffi::c_char;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use xlat_wire::vnet::{Offload, VnetError, HEADER_LEN};

/// Largest IPv4 packet, and so the size of every receive buffer.
pub const MAX_PACKET: usize = 65536;

/// Default number of buffers in a [`RecvBatch`].
pub const DEFAULT_BATCH: usize = 64;

/// Bytes after which [`RecvBatch::fill`] stops reading: with TCP super-packets (up to 64 KB
/// each) a batch of 64 packets could be 4 MB, several milliseconds of the worker's core
/// in one go (on a shared core, the receive queues wait that long); two or three
/// super-packets a batch keep a batch's time near what 64 plain packets take. TCP
/// throughput in the lab did not differ between 64 KB and 4 MB (docs/PERFORMANCE.md).
pub const BATCH_BYTES: usize = 128 << 10;

/// Why a TUN device could not be opened or configured.
#[derive(Debug, thiserror::Error)]
pub enum TunError {
    #[error(
        "interface name {0:?} is not valid: use 1 to 15 bytes of letters, digits, '-', '_' or '.'"
    )]
    BadName(String),
    #[error(
        "cannot open /dev/net/tun: {0} (xlat needs root or CAP_NET_ADMIN, and the tun driver)"
    )]
    OpenDevice(io::Error),
    #[error("{op} on {name}: {error}")]
    Ioctl {
        op: &'static str,
        name: String,
        error: io::Error,
    },
}

/// An open TUN interface.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    created: bool,
    /// Opened with `IFF_VNET_HDR`: a virtio-net header before every packet.
    vnet: bool,
}

/// The offloads xlat asks the device for (`TUNSETOFFLOAD`).
const OFFLOADS: libc::c_uint =
    libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;

/// Checks a Linux interface name: 1..=15 bytes (IFNAMSIZ - 1) of `[A-Za-z0-9._-]`, not `.`/`..`.
pub fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// An `ifreq` with `name` filled in (checked by [`valid_ifname`]) and the union zeroed.
fn ifreq_for(name: &str) -> Result<libc::ifreq, TunError> {
    if !valid_ifname(name) {
        return Err(TunError::BadName(name.to_string()));
    }
    // SAFETY: `ifreq` is a plain C struct (arrays, integers, a union of such and pointers);
    // all-zero bytes is a valid value for every field, and the kernel expects zeroed padding.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as c_char;
    }
    Ok(req)
}

impl Tun {
    /// Opens (creating if needed) the TUN interface `name`, non-blocking.
    pub fn open(name: &str) -> Result<Tun, TunError> {
        let existed = Path::new("/sys/class/net").join(name).exists();
        Tun::attach(name, libc::IFF_TUN | libc::IFF_NO_PI, !existed)
    }

    /// Opens `n` queues of the TUN interface `name` (creating it if needed), non-blocking:
    /// one per packet worker. `n = 1` is [`Tun::open`]; more attach each descriptor with
    /// `IFF_MULTI_QUEUE`, which an existing interface must have been created with
    /// (`ip tuntap add ... multi_queue`). The first queue says whether the interface was
    /// created; it disappears when the last queue closes.
    pub fn open_queues(name: &str, n: usize) -> Result<Vec<Tun>, TunError> {
        Tun::open_queues_with(name, n, false)
    }

    /// [`Tun::open_queues`] with kernel offloads (module docs): partial checksums and TCP
    /// super-packets both ways, each packet behind a virtio-net header.
    pub fn open_queues_offload(name: &str, n: usize) -> Result<Vec<Tun>, TunError> {
        let queues = Tun::open_queues_with(name, n, true)?;
        if let Some(q) = queues.first() {
            q.ioctl_int(
                "TUNSETVNETHDRSZ",
                libc::TUNSETVNETHDRSZ,
                xlat_wire::vnet::HEADER_LEN,
            )?;
            q.ioctl_int("TUNSETOFFLOAD", libc::TUNSETOFFLOAD, OFFLOADS as usize)?;
        }
        Ok(queues)
    }

    fn open_queues_with(name: &str, n: usize, vnet: bool) -> Result<Vec<Tun>, TunError> {
        let vnet_flag = if vnet { libc::IFF_VNET_HDR } else { 0 };
        if n <= 1 {
            let existed = Path::new("/sys/class/net").join(name).exists();
            return Ok(vec![Tun::attach(
                name,
                libc::IFF_TUN | libc::IFF_NO_PI | vnet_flag,
                !existed,
            )?]);
        }
        let existed = Path::new("/sys/class/net").join(name).exists();
        let flags = libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE | vnet_flag;
        (0..n)
            .map(|i| {
                Tun::attach(name, flags, !existed && i == 0).map_err(|e| match e {
                    TunError::Ioctl { op, name, error }
                        if existed && error.raw_os_error() == Some(libc::EINVAL) =>
                    {
                        TunError::Ioctl {
                            op,
                            error: io::Error::new(
                                error.kind(),
                                format!("{error} (an existing interface needs the multi_queue flag for several workers: delete it, or create it with `ip tuntap add dev {name} mode tun multi_queue`)"),
                            ),
                            name,
                        }
                    }
                    e => e,
                })
            })
            .collect()
    }

    /// Opens /dev/net/tun and attaches it to `name` with `flags` (`TUNSETIFF`).
    fn attach(name: &str, flags: libc::c_int, created: bool) -> Result<Tun, TunError> {
        let mut req = ifreq_for(name)?;
        // SAFETY: the path is a NUL-terminated literal; `open` has no other preconditions.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(TunError::OpenDevice(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a descriptor we just opened and own exclusively.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        req.ifr_ifru.ifru_flags = flags as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`; `req` is a valid, initialised
        // ifreq that lives across the call, and `fd` is an open /dev/net/tun descriptor.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if rc < 0 {
            return Err(TunError::Ioctl {
                op: "TUNSETIFF",
                name: name.to_string(),
                error: io::Error::last_os_error(),
            });
        }
        Ok(Tun {
            fd,
            name: name.to_string(),
            created,
            vnet: flags & libc::IFF_VNET_HDR != 0,
        })
    }

    /// An ioctl that takes an int argument by pointer (`TUNSETVNETHDRSZ`) or by value
    /// (`TUNSETOFFLOAD`).
    fn ioctl_int(&self, op: &'static str, req: libc::Ioctl, v: usize) -> Result<(), TunError> {
        let arg = libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
        let rc = if req == libc::TUNSETVNETHDRSZ {
            // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, valid for the call.
            unsafe { libc::ioctl(self.fd.as_raw_fd(), req, &arg) }
        } else {
            // SAFETY: TUNSETOFFLOAD takes its flags as the integer argument itself.
            unsafe {
                libc::ioctl(
                    self.fd.as_raw_fd(),
                    req,
                    libc::c_ulong::from(arg.unsigned_abs()),
                )
            }
        };
        if rc < 0 {
            return Err(self.ioctl_err(op, io::Error::last_os_error()));
        }
        Ok(())
    }

    /// True when packets carry a virtio-net header (opened with offloads).
    pub fn offloads(&self) -> bool {
        self.vnet
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True if this call created the interface (it disappears when this value is dropped).
    pub fn created(&self) -> bool {
        self.created
    }

    /// Sets the interface MTU (`SIOCSIFMTU`).
    pub fn set_mtu(&self, mtu: u32) -> Result<(), TunError> {
        let mut req = ifreq_for(&self.name)?;
        req.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu).unwrap_or(libc::c_int::MAX);
        let sock = control_socket().map_err(|e| self.ioctl_err("socket(AF_INET)", e))?;
        // SAFETY: SIOCSIFMTU reads one `struct ifreq` (name and ifru_mtu), valid for the call;
        // `sock` is an open AF_INET socket.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFMTU, &mut req) };
        if rc < 0 {
            return Err(self.ioctl_err("SIOCSIFMTU", io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Brings the interface up (`IFF_UP | IFF_RUNNING`), keeping its other flags.
    pub fn set_up(&self) -> Result<(), TunError> {
        let mut req = ifreq_for(&self.name)?;
        let sock = control_socket().map_err(|e| self.ioctl_err("socket(AF_INET)", e))?;
        // SAFETY: SIOCGIFFLAGS writes ifru_flags of the `struct ifreq` we pass, valid for the call.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) };
        if rc < 0 {
            return Err(self.ioctl_err("SIOCGIFFLAGS", io::Error::last_os_error()));
        }
        // SAFETY: the kernel just filled `ifru_flags`, so reading that union member is valid.
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        // SAFETY: SIOCSIFFLAGS reads the `struct ifreq` (name and flags), valid for the call.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req) };
        if rc < 0 {
            return Err(self.ioctl_err("SIOCSIFFLAGS", io::Error::last_os_error()));
        }
        Ok(())
    }

    fn ioctl_err(&self, op: &'static str, source: io::Error) -> TunError {
        TunError::Ioctl {
            op,
            name: self.name.clone(),
            error: source,
        }
    }

    /// Reads one packet into `buf`: `Ok(Some(len))`, or `Ok(None)` when none is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(Some(n.unsigned_abs()));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }

    /// Reads one packet with offloads into `buf` (a device opened with them): its length
    /// and offloads, `Ok(None)` when none is waiting. A header xlat does not take is an
    /// `Err` in the inner result (the packet is consumed).
    pub fn recv_offload(
        &self,
        buf: &mut [u8],
    ) -> io::Result<Option<(usize, Result<Offload, VnetError>)>> {
        let mut h = [0u8; HEADER_LEN];
        let iov = [
            libc::iovec {
                iov_base: h.as_mut_ptr().cast(),
                iov_len: h.len(),
            },
            libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            },
        ];
        loop {
            // SAFETY: both iovecs point to buffers valid for writes of their lengths for the
            // duration of the call.
            let n = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
            if n >= 0 {
                let len = n.unsigned_abs().saturating_sub(HEADER_LEN);
                return Ok(Some((len, Offload::from_header(&h, len))));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }

    /// Writes one packet with offloads `off` (a device opened with them; with none, a
    /// plain packet behind an empty header).
    pub fn send_offload(&self, pkt: &[u8], off: Offload) -> io::Result<()> {
        let h = off.header_for(pkt);
        let iov = [
            libc::iovec {
                iov_base: h.as_ptr().cast_mut().cast(),
                iov_len: h.len(),
            },
            libc::iovec {
                iov_base: pkt.as_ptr().cast_mut().cast(),
                iov_len: pkt.len(),
            },
        ];
        loop {
            // SAFETY: both iovecs point to buffers valid for reads of their lengths for the
            // duration of the call; writev does not write through them.
            let n = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Writes one packet. The kernel takes a TUN write whole or not at all.
    pub fn send(&self, pkt: &[u8]) -> io::Result<()> {
        if self.vnet {
            return self.send_offload(pkt, Offload::NONE);
        }
        loop {
            // SAFETY: `pkt` is valid for reads of `pkt.len()` bytes for the duration of the call.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An AF_INET datagram socket for interface ioctls.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call with constant arguments.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just opened and own exclusively.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Receive buffers allocated once: [`RecvBatch::fill`] reads up to `capacity` packets.
pub struct RecvBatch {
    bufs: Vec<Box<[u8]>>,
    lens: Vec<usize>,
    /// Each packet's kernel offloads (a device opened with them).
    offs: Vec<Offload>,
    /// Packets dropped by fills because their virtio-net header was not one xlat takes.
    bad_headers: u64,
    /// Bytes the last fill read.
    bytes: usize,
}

impl RecvBatch {
    /// `count` buffers of [`MAX_PACKET`] bytes (at least one), each with
    /// [`xlat_wire::HEADROOM`] bytes in front for translators that grow headers.
    pub fn new(count: usize) -> RecvBatch {
        let count = count.max(1);
        RecvBatch {
            bufs: (0..count)
                .map(|_| vec![0u8; xlat_wire::HEADROOM + MAX_PACKET].into_boxed_slice())
                .collect(),
            lens: Vec::with_capacity(count),
            offs: Vec::with_capacity(count),
            bad_headers: 0,
            bytes: 0,
        }
    }

    /// Number of buffers.
    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// Packets held by the last fill.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Reads packets from `tun` until it has none waiting or the batch is full; returns the
    /// number read. Previous contents are discarded.
    pub fn fill(&mut self, tun: &Tun) -> io::Result<usize> {
        self.clear();
        let (mut i, mut bytes) = (0, 0);
        // Bounded: each turn reads a packet; a bad header's packet is read and dropped.
        for _ in 0..2 * self.bufs.len() {
            if bytes >= BATCH_BYTES {
                break;
            }
            let Some(room) = self
                .bufs
                .get_mut(i)
                .and_then(|b| b.get_mut(xlat_wire::HEADROOM..))
            else {
                break;
            };
            if !tun.vnet {
                match tun.recv(room)? {
                    Some(n) => {
                        self.lens.push(n);
                        bytes += n;
                    }
                    None => break,
                }
                self.offs.push(Offload::NONE);
            } else {
                match tun.recv_offload(room)? {
                    Some((n, Ok(off))) => {
                        self.lens.push(n);
                        self.offs.push(off);
                        bytes += n;
                    }
                    Some((_, Err(_))) => {
                        self.bad_headers += 1;
                        continue;
                    }
                    None => break,
                }
            }
            i += 1;
        }
        self.bytes = bytes;
        Ok(self.lens.len())
    }

    /// True when the last fill stopped with the batch full (in packets or in
    /// [`BATCH_BYTES`]), not because the device had no more: more packets probably wait.
    pub fn full(&self) -> bool {
        self.lens.len() >= self.bufs.len() || self.bytes >= BATCH_BYTES
    }

    /// Packets dropped so far because their virtio-net header was not one xlat takes.
    pub fn bad_headers(&self) -> u64 {
        self.bad_headers
    }

    /// Empties the batch (for [`RecvBatch::push`]).
    pub fn clear(&mut self) {
        self.lens.clear();
        self.offs.clear();
    }

    /// Copies `pkt` into the next free buffer (behind its headroom); false when the batch is
    /// full or `pkt` is larger than [`MAX_PACKET`].
    pub fn push(&mut self, pkt: &[u8]) -> bool {
        let Some(buf) = self.bufs.get_mut(self.lens.len()) else {
            return false;
        };
        let Some(room) = buf.get_mut(xlat_wire::HEADROOM..xlat_wire::HEADROOM + pkt.len()) else {
            return false;
        };
        room.copy_from_slice(pkt);
        self.lens.push(pkt.len());
        self.offs.push(Offload::NONE);
        true
    }

    /// All packets of the last fill, mutable, with their headroom, in order.
    pub fn packets_mut(&mut self) -> Vec<xlat_wire::PacketBuf<'_>> {
        self.bufs
            .iter_mut()
            .zip(self.lens.iter().zip(self.offs.iter()))
            .filter_map(|(b, (&len, &off))| {
                let mut p = xlat_wire::PacketBuf::new(b, xlat_wire::HEADROOM, len)?;
                p.set_offload(off);
                Some(p)
            })
            .collect()
    }

    /// The `i`-th received packet, mutable, with its headroom (the engine translates in place).
    pub fn packet_mut(&mut self, i: usize) -> Option<xlat_wire::PacketBuf<'_>> {
        let len = *self.lens.get(i)?;
        let off = self.offs.get(i).copied().unwrap_or_default();
        let mut p = xlat_wire::PacketBuf::new(self.bufs.get_mut(i)?, xlat_wire::HEADROOM, len)?;
        p.set_offload(off);
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names() {
        assert!(valid_ifname("xlat0"));
        assert!(valid_ifname("a.b-c_d"));
        assert!(valid_ifname("fifteen-chars-x"));
        assert!(!valid_ifname("sixteen-chars-xx"));
        assert!(!valid_ifname(""));
        assert!(!valid_ifname(".."));
        assert!(!valid_ifname("a/b"));
        assert!(!valid_ifname("a b"));
        assert!(matches!(Tun::open("bad/name"), Err(TunError::BadName(_))));
    }

    /// Creates a real, uniquely named interface (needs root: run by scripts/test.sh, fails
    /// elsewhere): MTU and up-state reach the kernel, and the interface disappears on drop.
    #[test]
    #[ignore = "needs root: scripts/test.sh"]
    fn create_configure_and_delete() -> Result<(), Box<dyn std::error::Error>> {
        let name = format!("xlt{}", std::process::id() % 1_000_000);
        let tun = Tun::open(&name)?;
        assert!(tun.created());
        tun.set_mtu(1400)?;
        tun.set_up()?;
        let sys = Path::new("/sys/class/net").join(&name);
        assert_eq!(std::fs::read_to_string(sys.join("mtu"))?.trim(), "1400");
        let flags = std::fs::read_to_string(sys.join("flags"))?;
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16)?;
        assert_eq!(flags & 1, 1, "IFF_UP");
        let mut buf = [0u8; 64];
        // Nothing routed to it: a read finds nothing and does not block.
        assert!(matches!(tun.recv(&mut buf), Ok(None) | Ok(Some(_))));
        drop(tun);
        assert!(!sys.exists());
        Ok(())
    }

    /// Several queues of one new interface (needs root: run by scripts/test.sh, fails
    /// elsewhere): each reads and writes, the kernel spreads flows over them, and the
    /// interface goes with the last one.
    #[test]
    #[ignore = "needs root: scripts/test.sh"]
    fn multi_queue_open_and_delete() -> Result<(), Box<dyn std::error::Error>> {
        let name = format!("xlq{}", std::process::id() % 1_000_000);
        let queues = Tun::open_queues(&name, 3)?;
        assert_eq!(queues.len(), 3);
        assert!(queues[0].created());
        assert!(!queues[1].created());
        let sys = Path::new("/sys/class/net").join(&name);
        let flags = std::fs::read_to_string(sys.join("tun_flags"))?;
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16)?;
        assert_ne!(flags & libc::IFF_MULTI_QUEUE as u32, 0, "IFF_MULTI_QUEUE");
        queues[0].set_up()?;
        let mut buf = [0u8; 64];
        for q in &queues {
            assert!(matches!(q.recv(&mut buf), Ok(None) | Ok(Some(_))));
        }
        // One queue open: n = 1 is the plain single-queue open (which cannot attach to a
        // multi-queue interface, so it is refused while the others are open).
        assert!(Tun::open(&name).is_err());
        drop(queues);
        assert!(!sys.exists());
        let one = Tun::open_queues(&name, 1)?;
        assert_eq!(one.len(), 1);
        let flags = std::fs::read_to_string(sys.join("tun_flags"))?;
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16)?;
        assert_eq!(flags & libc::IFF_MULTI_QUEUE as u32, 0);
        Ok(())
    }

    /// A new interface with offloads (needs root: run by scripts/test.sh, fails elsewhere):
    /// the descriptor has `IFF_VNET_HDR`, the device takes TSO for both families, and a
    /// packet written behind an empty virtio-net header is taken.
    #[test]
    #[ignore = "needs root: scripts/test.sh"]
    fn offloads_open_and_write() -> Result<(), Box<dyn std::error::Error>> {
        let name = format!("xlo{}", std::process::id() % 1_000_000);
        let q = Tun::open_queues_offload(&name, 1)?;
        assert!(q[0].offloads());
        let sys = Path::new("/sys/class/net").join(&name);
        let flags = std::fs::read_to_string(sys.join("tun_flags"))?;
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16)?;
        assert_ne!(flags & libc::IFF_VNET_HDR as u32, 0, "IFF_VNET_HDR");
        q[0].set_up()?;
        let k = std::process::Command::new("ethtool")
            .args(["-k", &name])
            .output()?;
        let k = String::from_utf8_lossy(&k.stdout);
        for f in ["tcp-segmentation-offload: on", "tx-tcp6-segmentation: on"] {
            assert!(k.contains(f), "{f} in\n{k}");
        }
        // An IPv4 header to nowhere (the kernel drops it unrouted; the write is taken).
        let mut p = [0u8; 20];
        p[0] = 0x45;
        p[3] = 20;
        p[8] = 1;
        q[0].send(&p)?;
        drop(q);
        assert!(!sys.exists());
        Ok(())
    }

    #[test]
    fn batch_buffers() {
        let mut b = RecvBatch::new(0);
        assert_eq!(b.capacity(), 1);
        assert!(b.is_empty());
        assert!(b.packet_mut(0).is_none());
    }
}
