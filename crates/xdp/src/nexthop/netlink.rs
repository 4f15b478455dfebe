//! The rtnetlink (RFC 3549; rtnetlink(7)) the resolver speaks: `RTM_GETROUTE` for the route
//! the kernel would take to one destination (policy rules, the route's gateway; `ip route
//! get`), an `RTM_GETNEIGH` dump for the neighbour table's link-layer addresses, and a socket
//! joined to the kernel's route, rule and neighbour notification groups, so a change is
//! followed when it happens rather than found by asking again.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A unicast route's interface and gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub oif: u32,
    pub gateway: Option<IpAddr>,
}

/// A change the kernel announced on the notification socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A route of `prefix`/`len` was added, replaced or removed (any table).
    Route { prefix: IpAddr, len: u8 },
    /// A policy rule was added or removed.
    Rules,
    /// The neighbour `addr` on `ifindex` now has this usable link-layer address, or none.
    Neighbour {
        ifindex: u32,
        addr: IpAddr,
        mac: Option<[u8; 6]>,
    },
    /// Notifications were lost (the socket's buffer overflowed): anything may have changed.
    Lost,
}

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const RTM_GETNEIGH: u16 = 30;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// Neighbour states whose link-layer address may be used (include/uapi/linux/neighbour.h):
/// REACHABLE, STALE, DELAY, PROBE, NOARP, PERMANENT.
/// `rtm_flags` of a cached (cloned) route, e.g. an IPv6 PMTU exception: not a FIB change.
const RTM_F_CLONED: u32 = 0x200;
/// Notification groups (include/uapi/linux/rtnetlink.h): RTMGRP_NEIGH, RTMGRP_IPV4_ROUTE,
/// RTMGRP_IPV4_RULE, RTMGRP_IPV6_ROUTE, and RTNLGRP_IPV6_RULE (group 19, bit 18).
const GROUPS: u32 = 0x4 | 0x40 | 0x80 | 0x400 | (1 << 18);
/// Receive buffer asked for the notification socket: a full-table BGP session's burst of
/// route changes fits; if one does not, the kernel reports ENOBUFS ([`Event::Lost`]).
const EVENT_RCVBUF: libc::c_int = 8 << 20;
/// Notifications read per [`Netlink::events`] call at most (a bound, not a budget: the
/// rest waits for the next call).
const MAX_EVENTS: usize = 65_536;
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

/// The netlink messages in `b`: (type, flags, sequence number, body), stopping at the first
/// malformed header.
fn messages(mut b: &[u8]) -> impl Iterator<Item = (u16, u16, u32, &[u8])> {
    std::iter::from_fn(move || {
        let len = u32_at(b, 0)? as usize;
        let (ty, flags, seq) = (u16_at(b, 4)?, u16_at(b, 6)?, u32_at(b, 8)?);
        if len < NLMSG_HDR || len > b.len() {
            return None;
        }
        let body = b.get(NLMSG_HDR..len)?;
        b = b.get((len + 3) & !3..).unwrap_or(&[]);
        Some((ty, flags, seq, body))
    })
}

/// A neighbour message's (ifindex, address, usable link-layer address); `None` for other
/// families than IPv4 and IPv6 (a bridge's or a VXLAN device's forwarding entries arrive in
/// the same group and the same dump, with a remote endpoint's address beside a MAC).
fn neighbour(b: &[u8]) -> Option<(u32, IpAddr, Option<[u8; 6]>)> {
    if !matches!(i32::from(*b.first()?), libc::AF_INET | libc::AF_INET6) {
        return None;
    }
    let (ifindex, state) = (u32_at(b, 4)?, u16_at(b, 8)?);
    let mut dst = None;
    let mut mac = None;
    for (t, v) in attrs(b.get(12..).unwrap_or(&[])) {
        match t {
            NDA_DST => dst = ip_of(v),
            NDA_LLADDR => mac = <[u8; 6]>::try_from(v).ok(),
            _ => {}
        }
    }
    let usable = state & NUD_USABLE != 0;
    Some((ifindex, dst?, mac.filter(|_| usable)))
}

/// A route message's destination prefix (none: the family's default route); `None` for a
/// cached clone or a family other than IPv4 and IPv6.
fn route_prefix(b: &[u8]) -> Option<(IpAddr, u8)> {
    let (family, len) = (*b.first()?, *b.get(1)?);
    if u32_at(b, 8)? & RTM_F_CLONED != 0 {
        return None;
    }
    let any = match i32::from(family) {
        libc::AF_INET => IpAddr::from([0u8; 4]),
        libc::AF_INET6 => IpAddr::from([0u8; 16]),
        _ => return None,
    };
    let dst = attrs(b.get(12..).unwrap_or(&[]))
        .find(|(t, _)| *t == RTA_DST)
        .and_then(|(_, v)| ip_of(v));
    Some((dst.unwrap_or(any), len))
}

/// The event a notification announces, if one the resolver follows.
fn event(ty: u16, body: &[u8]) -> Option<Event> {
    match ty {
        RTM_NEWROUTE | RTM_DELROUTE => {
            route_prefix(body).map(|(prefix, len)| Event::Route { prefix, len })
        }
        RTM_NEWRULE | RTM_DELRULE => Some(Event::Rules),
        RTM_NEWNEIGH | RTM_DELNEIGH => {
            let (ifindex, addr, mac) = neighbour(body)?;
            let mac = if ty == RTM_DELNEIGH { None } else { mac };
            Some(Event::Neighbour { ifindex, addr, mac })
        }
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
    /// A socket for requests (each answer waited for at most a second).
    pub fn open() -> io::Result<Netlink> {
        let nl = Netlink::socket()?;
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a valid timeval for the call; a receive timeout bounds every wait.
        unsafe {
            libc::setsockopt(
                nl.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        Ok(nl)
    }

    /// A socket joined to the route, rule and neighbour notification groups, read without
    /// waiting ([`Netlink::events`]). Open it before reading the tables it keeps current, so
    /// no change falls between the two.
    pub fn subscribe() -> io::Result<Netlink> {
        let nl = Netlink::socket()?;
        // SAFETY: a zeroed sockaddr_nl is valid; family and groups are set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        sa.nl_groups = GROUPS;
        // SAFETY: `sa` is a valid sockaddr_nl of the size given.
        let rc = unsafe {
            libc::bind(
                nl.fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: an int option of the size given; FORCE needs CAP_NET_ADMIN, the plain
            // one (capped by net.core.rmem_max) is the fallback.
            let rc = unsafe {
                libc::setsockopt(
                    nl.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&EVENT_RCVBUF as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
        Ok(nl)
    }

    fn socket() -> io::Result<Netlink> {
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
        Ok(Netlink {
            fd,
            seq: 1,
            buf: vec![0; 65536],
        })
    }

    /// Hands `f` the notifications waiting on a [`Netlink::subscribe`] socket, without
    /// waiting for more; an overflowed socket gives [`Event::Lost`].
    pub fn events(&mut self, mut f: impl FnMut(Event)) {
        let mut seen = 0usize;
        while seen < MAX_EVENTS {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                    f(Event::Lost);
                    seen += 1;
                    continue;
                }
                return;
            }
            if n == 0 {
                return;
            }
            for (ty, _, _, body) in messages(self.buf.get(..n as usize).unwrap_or(&[])) {
                seen += 1;
                if let Some(e) = event(ty, body) {
                    f(e);
                }
            }
        }
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
            let mut done = false;
            for (ty, flags, s, body) in messages(self.buf.get(..n as usize).unwrap_or(&[])) {
                if s != seq {
                    continue;
                }
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
            if let Some((ifindex, d, Some(m))) = neighbour(b) {
                out.insert((ifindex, d), m);
            }
        })?;
        Ok(out)
    }
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

    /// A netlink message of `ty` with `body`, as the kernel sends it.
    fn msg(ty: u16, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn rtattr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn route_msg(ty: u16, family: i32, len: u8, flags: u32, dst: &[u8]) -> Vec<u8> {
        let mut b = vec![family as u8, len, 0, 0, 254, 0, 0, libc::RTN_UNICAST];
        b.extend_from_slice(&flags.to_ne_bytes());
        if !dst.is_empty() {
            b.extend(rtattr(RTA_DST, dst));
        }
        msg(ty, &b)
    }

    fn neigh_msg(ty: u16, ifindex: u32, state: u16, dst: &[u8], mac: &[u8]) -> Vec<u8> {
        neigh_msg_of(libc::AF_INET, ty, ifindex, state, dst, mac)
    }

    fn neigh_msg_of(
        family: i32,
        ty: u16,
        ifindex: u32,
        state: u16,
        dst: &[u8],
        mac: &[u8],
    ) -> Vec<u8> {
        let mut b = vec![family as u8, 0, 0, 0];
        b.extend_from_slice(&ifindex.to_ne_bytes());
        b.extend_from_slice(&state.to_ne_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend(rtattr(NDA_DST, dst));
        b.extend(rtattr(NDA_LLADDR, mac));
        msg(ty, &b)
    }

    fn events_of(b: &[u8]) -> Vec<Event> {
        messages(b)
            .filter_map(|(ty, _, _, body)| event(ty, body))
            .collect()
    }

    #[test]
    fn notifications_parse_into_the_changes_the_resolver_follows() {
        let mut b = route_msg(RTM_NEWROUTE, libc::AF_INET, 24, 0, &[203, 0, 113, 0]);
        b.extend(route_msg(RTM_DELROUTE, libc::AF_INET6, 0, 0, &[]));
        // A cached clone (an IPv6 PMTU exception) is not a route change.
        b.extend(route_msg(
            RTM_NEWROUTE,
            libc::AF_INET6,
            128,
            RTM_F_CLONED,
            &[0x20; 16],
        ));
        b.extend(msg(RTM_NEWRULE, &[0u8; 12]));
        let mac = [2, 0, 0, 0, 0, 1];
        b.extend(neigh_msg(RTM_NEWNEIGH, 3, 0x02, &[198, 51, 100, 1], &mac));
        // INCOMPLETE (0x01): no usable address; a deletion: none either.
        b.extend(neigh_msg(RTM_NEWNEIGH, 3, 0x01, &[198, 51, 100, 2], &mac));
        b.extend(neigh_msg(RTM_DELNEIGH, 3, 0x02, &[198, 51, 100, 1], &mac));
        // A VXLAN forwarding entry (AF_BRIDGE): a remote endpoint beside a MAC, not a neighbour.
        b.extend(neigh_msg_of(
            libc::AF_BRIDGE,
            RTM_NEWNEIGH,
            3,
            0x80,
            &[198, 51, 100, 9],
            &mac,
        ));
        // Garbage after: parsing stops there.
        b.extend_from_slice(&[200, 0, 0, 0, 24, 0]);
        let a = |s: &str| s.parse().unwrap_or(IpAddr::from([0u8; 4]));
        assert_eq!(
            events_of(&b),
            [
                Event::Route {
                    prefix: a("203.0.113.0"),
                    len: 24
                },
                Event::Route {
                    prefix: a("::"),
                    len: 0
                },
                Event::Rules,
                Event::Neighbour {
                    ifindex: 3,
                    addr: a("198.51.100.1"),
                    mac: Some(mac)
                },
                Event::Neighbour {
                    ifindex: 3,
                    addr: a("198.51.100.2"),
                    mac: None
                },
                Event::Neighbour {
                    ifindex: 3,
                    addr: a("198.51.100.1"),
                    mac: None
                },
            ]
        );
    }
}
