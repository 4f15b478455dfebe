//! Where the AF_XDP slow path sends a translated packet: the egress interface and the
//! Ethernet addresses for its destination, asked of the kernel over rtnetlink (RFC 3549;
//! rtnetlink(7)) -- `RTM_GETROUTE` for the route the kernel would take (policy rules, the
//! route's gateway), `RTM_GETNEIGH` for the neighbour table's link-layer addresses.
//!
//! The packet workers never make a system call for this. They read a per-destination table
//! ([`Hops`]): a hit gives the interface, the next hop's MAC and the interface's own MAC; a
//! miss (a new destination, or a next hop the kernel has not resolved yet) sends the packet
//! through the TUN device as before -- the kernel routes it and resolves the neighbour --
//! and notes the destination for the resolver thread ([`Hops::resolve_loop`]), which
//! answers within a few milliseconds and re-checks every known destination every second
//! (a route or a neighbour that changes is followed within that second). Only unicast routes
//! out of the interfaces the slow path serves are taken; anything else (a local address, a
//! route into the TUN device, a blackhole) stays with the kernel.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most destinations the table holds; past it, new destinations stay on the TUN path.
pub const MAX_DESTINATIONS: usize = 65_536;
/// How often every known destination is resolved again.
const REFRESH: Duration = Duration::from_secs(1);
/// How often the resolver looks for destinations the workers missed.
const POLL: Duration = Duration::from_millis(5);
/// A destination whose next hop stays unresolved this long is forgotten (asked again on
/// its next miss).
const UNRESOLVED_FOR: Duration = Duration::from_secs(10);

/// The egress of one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub ifindex: u32,
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
}

/// The destinations' egresses, shared by the workers (each keeps an `Arc` of the current
/// table and takes the new one when the generation moves) and the resolver thread.
#[derive(Default)]
pub struct Hops {
    generation: AtomicU64,
    table: Mutex<Arc<HashMap<IpAddr, Hop>>>,
    wanted: Mutex<Vec<IpAddr>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Hops {
    /// The table's generation: it moves whenever [`Hops::table`] changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current table.
    pub fn table(&self) -> Arc<HashMap<IpAddr, Hop>> {
        lock(&self.table).clone()
    }

    /// Asks for destinations to be resolved (a worker's misses of one batch).
    pub fn want(&self, dsts: &[IpAddr]) {
        if dsts.is_empty() {
            return;
        }
        let mut w = lock(&self.wanted);
        if w.len() < 4096 {
            w.extend_from_slice(dsts);
        }
    }

    /// Resolves what the workers ask for and refreshes the table until `stop`; `ports` are
    /// the interfaces served, by ifindex, with their own MAC.
    pub fn resolve_loop(&self, ports: &HashMap<u32, [u8; 6]>, stop: &AtomicBool) {
        let Ok(mut nl) = Netlink::open() else {
            tracing::warn!(
                "AF_XDP slow path: no rtnetlink socket; every packet leaves through the TUN device"
            );
            return;
        };
        let mut known: HashSet<IpAddr> = HashSet::new();
        let mut pending: HashMap<IpAddr, Instant> = HashMap::new();
        let mut last_refresh = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(POLL);
            let asked: Vec<IpAddr> = std::mem::take(&mut *lock(&self.wanted));
            let now = Instant::now();
            for d in asked {
                if !known.contains(&d) && known.len() + pending.len() < MAX_DESTINATIONS {
                    pending.entry(d).or_insert(now);
                }
            }
            let refresh = now.duration_since(last_refresh) >= REFRESH;
            if pending.is_empty() && !refresh {
                continue;
            }
            let neigh = nl.neighbours().unwrap_or_default();
            let mut table = if refresh {
                last_refresh = now;
                pending.extend(known.drain().map(|d| (d, now)));
                HashMap::new()
            } else {
                (*self.table()).clone()
            };
            pending.retain(|&d, since| match resolve(&mut nl, &neigh, ports, d) {
                Some(h) => {
                    table.insert(d, h);
                    known.insert(d);
                    false
                }
                None => now.duration_since(*since) < UNRESOLVED_FOR,
            });
            let changed = *self.table() != table;
            if changed {
                *lock(&self.table) = Arc::new(table);
                self.generation.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

/// One destination's egress: the kernel's route, then the next hop's neighbour entry.
fn resolve(
    nl: &mut Netlink,
    neigh: &HashMap<(u32, IpAddr), [u8; 6]>,
    ports: &HashMap<u32, [u8; 6]>,
    dst: IpAddr,
) -> Option<Hop> {
    let r = nl.route(dst).ok()??;
    let src_mac = *ports.get(&r.oif)?;
    let next = r.gateway.unwrap_or(dst);
    let dst_mac = *neigh.get(&(r.oif, next))?;
    Some(Hop {
        ifindex: r.oif,
        dst_mac,
        src_mac,
    })
}

/// A unicast route's interface and gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub oif: u32,
    pub gateway: Option<IpAddr>,
}

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// Neighbour states whose link-layer address may be used (include/uapi/linux/neighbour.h):
/// REACHABLE, STALE, DELAY, PROBE, NOARP, PERMANENT.
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// A NETLINK_ROUTE socket.
pub struct Netlink {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(i..i + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

fn ip_of(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

/// Route attributes (`struct rtattr`: length, type, value, padded to 4) from `b`.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(b, 0)?);
        let ty = u16_at(b, 2)?;
        if len < 4 {
            return None;
        }
        let val = b.get(4..len)?;
        b = b.get((len + 3) & !3..).unwrap_or(&[]);
        Some((ty & 0x3fff, val))
    })
}

impl Netlink {
    pub fn open() -> io::Result<Netlink> {
        // SAFETY: plain socket(2) call with constant arguments.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we just opened and own exclusively.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a valid timeval for the call; a receive timeout bounds every wait.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        Ok(Netlink {
            fd,
            seq: 1,
            buf: vec![0; 65536],
        })
    }

    fn send(&mut self, ty: u16, flags: u16, body: &[u8]) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let len = NLMSG_HDR + body.len();
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        m.extend_from_slice(&self.seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        // SAFETY: `m` is valid for `m.len()` bytes; a null address sends to the kernel.
        let rc = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(self.seq)
    }

    /// Reads replies to `seq`, handing each message's type and body to `f`, until a
    /// non-multipart reply, NLMSG_DONE or an error; bounded.
    fn replies(&mut self, seq: u32, mut f: impl FnMut(u16, &[u8])) -> io::Result<()> {
        for _ in 0..4096 {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut b = self.buf.get(..n as usize).unwrap_or(&[]);
            let mut done = false;
            while let (Some(len), Some(ty), Some(flags), Some(s)) =
                (u32_at(b, 0), u16_at(b, 4), u16_at(b, 6), u32_at(b, 8))
            {
                let len = len as usize;
                if len < NLMSG_HDR || len > b.len() {
                    break;
                }
                let body = b.get(NLMSG_HDR..len).unwrap_or(&[]);
                if s == seq {
                    match ty {
                        NLMSG_DONE => done = true,
                        NLMSG_ERROR => {
                            let code = u32_at(body, 0).unwrap_or(0) as i32;
                            if code != 0 {
                                return Err(io::Error::from_raw_os_error(-code));
                            }
                            done = true;
                        }
                        _ => {
                            f(ty, body);
                            if flags & 2 == 0 {
                                // Not NLM_F_MULTI: a single answer.
                                done = true;
                            }
                        }
                    }
                }
                b = b.get((len + 3) & !3..).unwrap_or(&[]);
            }
            if done {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The kernel's unicast route to `dst` (`ip route get`), if it has one.
    pub fn route(&mut self, dst: IpAddr) -> io::Result<Option<Route>> {
        let (family, bytes): (u8, Vec<u8>) = match dst {
            IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
            IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
        };
        // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
        let mut body = vec![family, (bytes.len() * 8) as u8, 0, 0, 0, 0, 0, 0];
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend_from_slice(&((4 + bytes.len()) as u16).to_ne_bytes());
        body.extend_from_slice(&RTA_DST.to_ne_bytes());
        body.extend_from_slice(&bytes);
        let seq = self.send(RTM_GETROUTE, 0, &body)?;
        let mut out = None;
        self.replies(seq, |ty, b| {
            if ty != RTM_NEWROUTE || b.get(7) != Some(&libc::RTN_UNICAST) {
                return;
            }
            let mut oif = None;
            let mut gateway = None;
            for (t, v) in attrs(b.get(12..).unwrap_or(&[])) {
                match t {
                    RTA_OIF => oif = u32_at(v, 0),
                    RTA_GATEWAY => gateway = ip_of(v),
                    _ => {}
                }
            }
            if let Some(oif) = oif {
                out = Some(Route { oif, gateway });
            }
        })?;
        Ok(out)
    }

    /// Usable neighbour entries: (ifindex, address) -> link-layer address.
    pub fn neighbours(&mut self) -> io::Result<HashMap<(u32, IpAddr), [u8; 6]>> {
        // struct ndmsg: family, pad, pad, ifindex, state, flags, type.
        let body = [0u8; 12];
        let seq = self.send(RTM_GETNEIGH, NLM_F_DUMP, &body)?;
        let mut out = HashMap::new();
        self.replies(seq, |ty, b| {
            if ty != RTM_NEWNEIGH {
                return;
            }
            let (Some(ifindex), Some(state)) = (u32_at(b, 4), u16_at(b, 8)) else {
                return;
            };
            if state & NUD_USABLE == 0 {
                return;
            }
            let mut dst = None;
            let mut mac = None;
            for (t, v) in attrs(b.get(12..).unwrap_or(&[])) {
                match t {
                    NDA_DST => dst = ip_of(v),
                    NDA_LLADDR => mac = <[u8; 6]>::try_from(v).ok(),
                    _ => {}
                }
            }
            if let (Some(d), Some(m)) = (dst, mac) {
                out.insert((ifindex, d), m);
            }
        })?;
        Ok(out)
    }
}

/// An interface's own MAC (`/sys/class/net/NAME/address`).
pub fn interface_mac(name: &str) -> Option<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{name}/address")).ok()?;
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    <[u8; 6]>::try_from(v.as_slice()).ok()
}

/// Receive queues of an interface (`/sys/class/net/NAME/queues/rx-N`), at least 1.
pub fn rx_queues(name: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(1)
        .max(1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_attributes_parse_and_stop_at_garbage() {
        let mut b = Vec::new();
        b.extend_from_slice(&8u16.to_ne_bytes());
        b.extend_from_slice(&RTA_OIF.to_ne_bytes());
        b.extend_from_slice(&7u32.to_ne_bytes());
        b.extend_from_slice(&8u16.to_ne_bytes());
        b.extend_from_slice(&RTA_GATEWAY.to_ne_bytes());
        b.extend_from_slice(&[198, 51, 100, 1]);
        b.extend_from_slice(&[2, 0]); // truncated attribute
        let got: Vec<(u16, Vec<u8>)> = attrs(&b).map(|(t, v)| (t, v.to_vec())).collect();
        assert_eq!(
            got,
            [
                (RTA_OIF, 7u32.to_ne_bytes().to_vec()),
                (RTA_GATEWAY, vec![198, 51, 100, 1])
            ]
        );
        assert_eq!(
            ip_of(&[198, 51, 100, 1]),
            Some("198.51.100.1".parse().unwrap_or(IpAddr::from([0u8; 4])))
        );
        assert_eq!(ip_of(&[1, 2, 3]), None);
    }
}
