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
//! Needs root or `CAP_NET_ADMIN`.

use std::ffi::c_char;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Largest IPv4 packet, and so the size of every receive buffer.
pub const MAX_PACKET: usize = 65536;

/// Default number of buffers in a [`RecvBatch`].
pub const DEFAULT_BATCH: usize = 64;

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
}

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
        if n <= 1 {
            return Ok(vec![Tun::open(name)?]);
        }
        let existed = Path::new("/sys/class/net").join(name).exists();
        let flags = libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE;
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
        })
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

    /// Writes one packet. The kernel takes a TUN write whole or not at all.
    pub fn send(&self, pkt: &[u8]) -> io::Result<()> {
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
        self.lens.clear();
        for buf in self.bufs.iter_mut() {
            let Some(room) = buf.get_mut(xlat_wire::HEADROOM..) else {
                break;
            };
            match tun.recv(room)? {
                Some(n) => self.lens.push(n),
                None => break,
            }
        }
        Ok(self.lens.len())
    }

    /// Empties the batch (for [`RecvBatch::push`]).
    pub fn clear(&mut self) {
        self.lens.clear();
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
        true
    }

    /// All packets of the last fill, mutable, with their headroom, in order.
    pub fn packets_mut(&mut self) -> Vec<xlat_wire::PacketBuf<'_>> {
        self.bufs
            .iter_mut()
            .zip(self.lens.iter())
            .filter_map(|(b, &len)| xlat_wire::PacketBuf::new(b, xlat_wire::HEADROOM, len))
            .collect()
    }

    /// The `i`-th received packet, mutable, with its headroom (the engine translates in place).
    pub fn packet_mut(&mut self, i: usize) -> Option<xlat_wire::PacketBuf<'_>> {
        let len = *self.lens.get(i)?;
        xlat_wire::PacketBuf::new(self.bufs.get_mut(i)?, xlat_wire::HEADROOM, len)
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

    #[test]
    fn batch_buffers() {
        let mut b = RecvBatch::new(0);
        assert_eq!(b.capacity(), 1);
        assert!(b.is_empty());
        assert!(b.packet_mut(0).is_none());
    }
}
