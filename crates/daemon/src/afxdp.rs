//! A packet worker's side of the AF_XDP slow path (`[dataplane] slow_path = "af_xdp"`, issue
//! 25): the sockets it reads and sends on, and the egress choice for a translated packet.
//!
//! Receiving: the XDP program redirects what the kernel would route into the TUN device to
//! the AF_XDP socket of the interface and queue it arrived on (crates/xdp/bpf/xlat_fast.bpf.c,
//! `engine_or_pass`); [`Port::read`] copies each frame's IP packet into the worker's batch
//! (behind the engine's headroom, as a TUN read would) and returns the frame at once.
//!
//! Sending ([`Port::transmit`]): the egress of the packet's destination comes from the
//! per-destination table the resolver thread keeps from the kernel's routes and neighbours
//! and their change notifications (`xlat_xdp::nexthop`). With a known egress on an
//! interface this worker has a socket on, the packet gets its Ethernet header (the next hop's MAC, the interface's own), its TTL or
//! hop limit decremented -- the gateway is a router hop, RFC 1812 5.3.1 / RFC 8200 3 (the
//! header checksum adjusted by RFC 1624 eqn. 3) -- and leaves through that socket: no kernel
//! stack, no TUN device. Otherwise it goes to the TUN device as before and the worker counts
//! why (`afxdp_fallback_*`): a destination not resolved yet (the kernel resolves its neighbour
//! while routing this packet; the resolver sees it within milliseconds), an interface whose
//! socket another worker owns, full rings, a TTL that would expire here (the kernel sends the
//! ICMP Time Exceeded). Nothing here makes a system call per packet: one `sendto` per batch
//! kicks each socket's transmission.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use xlat_io::tun::RecvBatch;
use xlat_xdp::nexthop::{Hop, Hops, HopsView};
use xlat_xdp::xsk::Xsk;

use crate::worker::WorkerCounter;

/// Ethernet header length; EtherTypes of IPv4 and IPv6.
const ETH: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;

/// Destinations a worker notes as missed per batch before asking the resolver.
const MAX_MISSED: usize = 64;

/// This worker's AF_XDP sockets and its view of the egress table.
pub struct Port {
    sockets: Vec<Xsk>,
    hops: Arc<Hops>,
    table: HopsView,
    missed: Vec<IpAddr>,
    /// The worker counters this port keeps (indexed like the worker's).
    counts: [u64; WorkerCounter::ALL.len()],
}

impl Port {
    pub fn new(sockets: Vec<Xsk>, hops: Arc<Hops>) -> Port {
        Port {
            sockets,
            table: hops.view(),
            hops,
            missed: Vec::new(),
            counts: [0; WorkerCounter::ALL.len()],
        }
    }

    fn count(&mut self, c: WorkerCounter) {
        if let Some(v) = self.counts.get_mut(c as usize) {
            *v = v.saturating_add(1);
        }
    }

    /// Value of a counter (the kernel's drops read from the sockets).
    pub fn get(&self, c: WorkerCounter) -> u64 {
        if c == WorkerCounter::AfxdpKernelDrops {
            return self
                .sockets
                .iter()
                .map(|s| {
                    let st = s.stats();
                    st.rx_dropped + st.rx_ring_full + st.rx_fill_empty
                })
                .sum();
        }
        self.counts.get(c as usize).copied().unwrap_or(0)
    }

    /// The sockets' descriptors (to wait on).
    pub fn fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.sockets.iter().map(|s| s.as_fd())
    }

    /// Whether received frames wait on any socket.
    pub fn rx_ready(&self) -> bool {
        self.sockets.iter().any(|s| s.rx_ready())
    }

    /// Takes what changed in the resolver's table (once per batch: one atomic load when
    /// nothing did).
    pub fn refresh(&mut self) {
        self.table.refresh(&self.hops);
    }

    /// Fills `batch` (emptied first) with the IP packets of up to its capacity of received
    /// frames; returns how many. A frame that is not a whole IPv4 or IPv6 packet is dropped
    /// and counted (`afxdp_rx_invalid`); the program redirects none such.
    pub fn read(&mut self, batch: &mut RecvBatch) -> usize {
        batch.clear();
        let cap = batch.capacity();
        let mut invalid = 0u64;
        let mut got = 0usize;
        for s in self.sockets.iter_mut() {
            if got >= cap {
                break;
            }
            got += s.recv(cap - got, |frame| match ip_packet(frame) {
                Some(p) if batch.push(p) => {}
                _ => invalid += 1,
            });
        }
        let n = batch.len();
        if let Some(v) = self.counts.get_mut(WorkerCounter::AfxdpRx as usize) {
            *v = v.saturating_add(n as u64);
        }
        if let Some(v) = self.counts.get_mut(WorkerCounter::AfxdpRxInvalid as usize) {
            *v = v.saturating_add(invalid);
        }
        n
    }

    /// Sends a translated packet out of its egress interface's socket; false (counted) when
    /// it must go through the TUN device instead.
    pub fn transmit(&mut self, pkt: &[u8]) -> bool {
        let (dst, ttl) = match pkt.first().map(|b| b >> 4) {
            Some(4) => match (pkt.get(16..20), pkt.get(8)) {
                (Some(d), Some(&t)) => (IpAddr::V4(Ipv4Addr::new(d[0], d[1], d[2], d[3])), t),
                _ => return false,
            },
            Some(6) => match (
                pkt.get(24..40).and_then(|d| <[u8; 16]>::try_from(d).ok()),
                pkt.get(7),
            ) {
                (Some(d), Some(&t)) => (IpAddr::V6(Ipv6Addr::from(d)), t),
                _ => return false,
            },
            _ => return false,
        };
        let Some(hop) = self.table.get(&dst) else {
            if self.missed.len() < MAX_MISSED && !self.missed.contains(&dst) {
                self.missed.push(dst);
            }
            self.count(WorkerCounter::AfxdpFallbackUnresolved);
            return false;
        };
        if ttl <= 1 {
            // RFC 1812 5.3.1: the kernel, routing it from the TUN device, answers.
            self.count(WorkerCounter::AfxdpFallbackTtl);
            return false;
        }
        let Some(sock) = self.sockets.iter_mut().find(|s| s.ifindex() == hop.ifindex) else {
            self.count(WorkerCounter::AfxdpFallbackNoSocket);
            return false;
        };
        let sent = sock.send(|buf| frame(buf, &hop, pkt));
        self.count(if sent {
            WorkerCounter::AfxdpTx
        } else {
            WorkerCounter::AfxdpFallbackTxFull
        });
        sent
    }

    /// After a batch: kicks the sockets' transmission and hands the missed destinations to
    /// the resolver.
    pub fn flush(&mut self) {
        for s in self.sockets.iter_mut() {
            s.flush();
        }
        if !self.missed.is_empty() {
            self.hops.want(&self.missed);
            self.missed.clear();
        }
    }
}

/// The IP packet of an Ethernet frame, trimmed to its IP length (a short frame is padded to
/// 60 bytes on the wire); `None` unless a whole IPv4 or IPv6 packet.
pub fn ip_packet(frame: &[u8]) -> Option<&[u8]> {
    let ty = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = frame.get(ETH..)?;
    let len = match (ty, ip.first()? >> 4) {
        (ETH_P_IP, 4) => usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])),
        (ETH_P_IPV6, 6) => 40 + usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?])),
        _ => return None,
    };
    if len < 20 {
        return None;
    }
    ip.get(..len)
}

/// Writes `pkt` into `buf` as an Ethernet frame to `hop`, with the TTL / hop limit one lower
/// (the caller checked it is above 1); returns the frame's length, 0 if it does not fit.
fn frame(buf: &mut [u8], hop: &Hop, pkt: &[u8]) -> usize {
    let len = ETH + pkt.len();
    let Some((eth, rest)) = buf
        .get_mut(..len)
        .and_then(|f| f.split_first_chunk_mut::<ETH>())
    else {
        return 0;
    };
    let v6 = pkt.first().map(|b| b >> 4) == Some(6);
    let ty = if v6 { ETH_P_IPV6 } else { ETH_P_IP };
    let mut hdr = [0u8; ETH];
    for (d, s) in hdr.iter_mut().zip(
        hop.dst_mac
            .iter()
            .chain(&hop.src_mac)
            .chain(&ty.to_be_bytes()),
    ) {
        *d = *s;
    }
    *eth = hdr;
    let out = rest;
    out.copy_from_slice(pkt);
    if v6 {
        // RFC 8200 3: each node that forwards the packet decrements the hop limit.
        if let Some(h) = out.get_mut(7) {
            *h = h.saturating_sub(1);
        }
    } else {
        decrement_ttl(out);
    }
    len
}

/// RFC 1812 5.3.1: TTL - 1, the header checksum adjusted incrementally (RFC 1624 eqn. 3:
/// HC' = ~(~HC + ~m + m'), m the 16-bit word holding TTL and protocol).
fn decrement_ttl(ip: &mut [u8]) {
    let (Some(&ttl), Some(&proto), Some(&c0), Some(&c1)) =
        (ip.get(8), ip.get(9), ip.get(10), ip.get(11))
    else {
        return;
    };
    let m = u16::from_be_bytes([ttl, proto]);
    let m2 = u16::from_be_bytes([ttl.saturating_sub(1), proto]);
    let hc = u16::from_be_bytes([c0, c1]);
    let mut s = u32::from(!hc) + u32::from(!m) + u32::from(m2);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    let out = !(s as u16);
    if let Some(b) = ip.get_mut(8) {
        *b = ttl.saturating_sub(1);
    }
    if let Some(b) = ip.get_mut(10..12) {
        b.copy_from_slice(&out.to_be_bytes());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ipv4_checksum(h: &[u8]) -> u16 {
        let mut s: u32 = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    fn v4_header(ttl: u8) -> Vec<u8> {
        let mut h = vec![
            0x45, 0, 0, 28, 0x12, 0x34, 0x40, 0, ttl, 17, 0, 0, 198, 19, 0, 100, 203, 0, 113, 5,
        ];
        let c = ipv4_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(&[0; 8]);
        h
    }

    /// The incremental update gives the checksum a full computation gives, for every TTL.
    #[test]
    fn ttl_decrement_keeps_the_checksum_right() {
        for ttl in 2..=255u8 {
            let mut p = v4_header(ttl);
            decrement_ttl(&mut p);
            assert_eq!(p[8], ttl - 1);
            let mut h = p[..20].to_vec();
            let got = u16::from_be_bytes([h[10], h[11]]);
            h[10] = 0;
            h[11] = 0;
            assert_eq!(got, ipv4_checksum(&h), "ttl {ttl}");
        }
    }

    #[test]
    fn frames_become_packets_and_packets_frames() {
        let pkt = v4_header(64);
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        f.extend_from_slice(&pkt);
        f.resize(60.max(f.len()), 0); // link padding
        assert_eq!(ip_packet(&f), Some(&pkt[..]));
        // Not IP, truncated, lying lengths: none.
        assert_eq!(ip_packet(&f[..20]), None);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(ip_packet(&arp), None);
        let mut long = f.clone();
        long[16..18].copy_from_slice(&2000u16.to_be_bytes());
        assert_eq!(ip_packet(&long), None);

        let hop = Hop {
            ifindex: 3,
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_mac: [2, 0, 0, 0, 0, 2],
        };
        let mut buf = vec![0u8; 2048];
        let n = frame(&mut buf, &hop, &pkt);
        assert_eq!(n, 14 + pkt.len());
        assert_eq!(&buf[..6], &hop.dst_mac);
        assert_eq!(&buf[6..12], &hop.src_mac);
        assert_eq!(&buf[12..14], &ETH_P_IP.to_be_bytes());
        assert_eq!(buf[14 + 8], 63);
        assert_eq!(frame(&mut [0u8; 20], &hop, &pkt), 0, "does not fit");
    }
}
