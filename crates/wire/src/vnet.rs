//! Offloads a packet can carry between the kernel and xlat: a partial transport checksum
//! and TCP segmentation, as the virtio-net header describes them (virtio 1.2, 5.1.6 "Device
//! Operation"; Linux `include/uapi/linux/virtio_net.h`). A TUN device opened with
//! `IFF_VNET_HDR` puts this 10-byte header before every packet it hands out and expects one
//! before every packet written to it.
//!
//! - **Partial checksum** (`VIRTIO_NET_HDR_F_NEEDS_CSUM`): the TCP/UDP checksum field holds
//!   only the folded one's-complement sum of the pseudo-header (RFC 9293 3.1, RFC 768, RFC
//!   8200 8.1), not complemented; whoever transmits the packet sums the bytes from
//!   `csum_start` to the end and stores the complement at `csum_start + csum_offset`. The
//!   kernel's own stacks send packets so; they are never corrupted packets "repaired"
//!   (a packet that arrived with a bad checksum arrives complete, and is not merged by GRO).
//! - **Segmentation** (`gso_type` TCPV4 / TCPV6, `gso_size`): the packet is a TCP
//!   super-packet (GRO merged it, or a local sender's TSO made it) to be cut into segments
//!   of `gso_size` payload bytes each, every one with the same headers but its own sequence
//!   number, lengths and checksums. A super-packet always carries a partial checksum.
//!
//! A translator keeps both through an address/port rewrite or an IPv4/IPv6 header
//! translation: [`pseudo_finish`] writes the translated packet's own pseudo-header sum, and
//! the segmentation follows the new header's family. Where it cannot keep them (a tunnel's
//! outer header, a packet it must fragment), [`complete_checksum`] and [`segment`] do in
//! software what the kernel would have done before handing the packet over.
//!
//! Nothing here panics: every function returns `None`/`false` on bytes it cannot use.

use crate::checksum::{fold, sum};
use crate::field::{set_u16, set_u32, u16_at, u32_at, u8_at};

/// Bytes of the virtio-net header (`struct virtio_net_hdr`, without `num_buffers`).
pub const HEADER_LEN: usize = 10;

/// `flags`: the checksum is partial (`VIRTIO_NET_HDR_F_NEEDS_CSUM`).
const F_NEEDS_CSUM: u8 = 1;
/// `flags`: the checksum was verified (`VIRTIO_NET_HDR_F_DATA_VALID`): nothing to do.
const F_DATA_VALID: u8 = 2;
/// `gso_type` values.
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;

const TCP: u8 = 6;
const UDP: u8 = 17;
/// Offset of the checksum in a TCP header (RFC 9293 3.1) and in a UDP header (RFC 768).
const TCP_CSUM: u16 = 16;
const UDP_CSUM: u16 = 6;

/// A partial checksum: sum from `start` (the transport header) to the end, store at
/// `start + offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partial {
    pub start: u16,
    pub offset: u16,
}

/// TCP segmentation: segments of `size` payload bytes, over IPv4 or IPv6 (`v6`), with ECN's
/// CWR kept to the first segment (`ecn`, RFC 3168 6.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gso {
    pub v6: bool,
    pub size: u16,
    pub ecn: bool,
}

/// The offloads a packet carries; none for a packet whose checksums are complete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    pub csum: Option<Partial>,
    pub gso: Option<Gso>,
}

/// A virtio-net header xlat does not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VnetError {
    /// A `gso_type` other than TCP over IPv4 or IPv6 (UDP, SCTP: the device never offers
    /// them), or segmentation without a partial checksum.
    UnknownGso(u8),
    /// A partial checksum whose field lies outside the packet.
    BadChecksumPlace,
}

impl Offload {
    pub const NONE: Offload = Offload {
        csum: None,
        gso: None,
    };

    /// True when the packet's checksums are complete and it is one packet on the wire.
    pub fn is_none(&self) -> bool {
        self.csum.is_none() && self.gso.is_none()
    }

    /// The offloads of the `len`-byte packet behind the header `h` (native byte order, as
    /// a TUN device without `TUNSETVNETLE` uses: virtio's legacy interface).
    pub fn from_header(h: &[u8; HEADER_LEN], len: usize) -> Result<Offload, VnetError> {
        let [flags, gso_type, _, _, g0, g1, s0, s1, o0, o1] = *h;
        let gso_size = u16::from_ne_bytes([g0, g1]);
        let csum = if flags & F_NEEDS_CSUM != 0 {
            let p = Partial {
                start: u16::from_ne_bytes([s0, s1]),
                offset: u16::from_ne_bytes([o0, o1]),
            };
            if usize::from(p.start) + usize::from(p.offset) + 2 > len {
                return Err(VnetError::BadChecksumPlace);
            }
            Some(p)
        } else {
            None
        };
        let gso = match gso_type & !GSO_ECN {
            GSO_NONE => None,
            t @ (GSO_TCPV4 | GSO_TCPV6) if csum.is_some() && gso_size > 0 => Some(Gso {
                v6: t == GSO_TCPV6,
                size: gso_size,
                ecn: gso_type & GSO_ECN != 0,
            }),
            _ => return Err(VnetError::UnknownGso(gso_type)),
        };
        // F_DATA_VALID alone: checksums verified and complete; nothing for us to do.
        let _ = F_DATA_VALID;
        Ok(Offload { csum, gso })
    }

    /// The virtio-net header for a packet with these offloads whose headers (network and
    /// transport) take `hdr_len` bytes.
    pub fn header(&self, hdr_len: u16) -> [u8; HEADER_LEN] {
        let (flags, [s0, s1], [o0, o1]) = match self.csum {
            Some(p) => (F_NEEDS_CSUM, p.start.to_ne_bytes(), p.offset.to_ne_bytes()),
            None => (0, [0; 2], [0; 2]),
        };
        let (gso_type, [h0, h1], [g0, g1]) = match self.gso {
            Some(g) => (
                if g.v6 { GSO_TCPV6 } else { GSO_TCPV4 } | if g.ecn { GSO_ECN } else { 0 },
                hdr_len.to_ne_bytes(),
                g.size.to_ne_bytes(),
            ),
            None => (GSO_NONE, [0; 2], [0; 2]),
        };
        [flags, gso_type, h0, h1, g0, g1, s0, s1, o0, o1]
    }

    /// The virtio-net header for `pkt` with these offloads: `hdr_len` is its network and
    /// TCP headers' length for a super-packet (the kernel's hint for the linear part).
    pub fn header_for(&self, pkt: &[u8]) -> [u8; HEADER_LEN] {
        let hdr_len = match (self.gso, self.csum) {
            (Some(_), Some(p)) => {
                let l4 = usize::from(p.start);
                let thl = tcp_header_len(pkt, l4).unwrap_or(20);
                u16::try_from(l4 + thl).unwrap_or(0)
            }
            _ => 0,
        };
        self.header(hdr_len)
    }

    /// The transport bytes of the largest segment this packet becomes on the wire, for a
    /// packet whose transport part starts at `l4` and is `l4_len` bytes: `l4_len` itself
    /// unless it is a super-packet (then its TCP header and `gso_size` payload bytes, at most
    /// `l4_len`).
    /// MTU decisions (RFC 7915 4.1, 5.1) are about these, as the kernel's
    /// `skb_gso_validate_network_len` makes them.
    pub fn l4_on_wire(&self, pkt: &[u8], l4: usize, l4_len: usize) -> usize {
        match self.gso {
            Some(g) => {
                let thl = tcp_header_len(pkt, l4).unwrap_or(20);
                l4_len.min(thl + usize::from(g.size))
            }
            None => l4_len,
        }
    }
}

/// A plain IP packet's transport header: (offset, protocol, transport length) for IPv4
/// (any header length, not a fragment) and for IPv6 whose first next header is TCP or UDP.
pub fn plain_l4(pkt: &[u8]) -> Option<(usize, u8, usize)> {
    match u8_at(pkt, 0)? >> 4 {
        4 => {
            let ihl = usize::from(u8_at(pkt, 0)? & 0x0f) * 4;
            let total = usize::from(u16_at(pkt, 2)?);
            let frag = u16_at(pkt, 6)? & 0x3fff;
            if ihl < 20 || total < ihl || total > pkt.len() || frag != 0 {
                return None;
            }
            Some((ihl, u8_at(pkt, 9)?, total - ihl))
        }
        6 => {
            let plen = usize::from(u16_at(pkt, 4)?);
            if 40 + plen > pkt.len() {
                return None;
            }
            Some((40, u8_at(pkt, 6)?, plen))
        }
        _ => None,
    }
}

/// True when `p` is the plain TCP or UDP checksum of `pkt` ([`plain_l4`]): the case a
/// translator rewrites headers around and keeps partial.
pub fn is_plain_partial(pkt: &[u8], p: Partial) -> bool {
    match plain_l4(pkt) {
        Some((l4, TCP, _)) => usize::from(p.start) == l4 && p.offset == TCP_CSUM,
        Some((l4, UDP, _)) => usize::from(p.start) == l4 && p.offset == UDP_CSUM,
        _ => false,
    }
}

/// The unfolded pseudo-header sum of a plain packet (RFC 9293 3.1 for IPv4, RFC 8200 8.1
/// for IPv6) for `proto` and `l4_len` transport bytes.
fn pseudo_sum(pkt: &[u8], proto: u8, l4_len: usize) -> Option<u32> {
    let (addrs, len) = match u8_at(pkt, 0)? >> 4 {
        4 => (pkt.get(12..20)?, u32::try_from(l4_len).ok()?),
        6 => (pkt.get(8..40)?, u32::try_from(l4_len).ok()?),
        _ => return None,
    };
    let acc = sum(addrs, 0);
    let acc = u64::from(acc) + u64::from(proto) + u64::from(len >> 16) + u64::from(len & 0xffff);
    Some(fold(u32::try_from(acc).ok()?).into())
}

/// Writes the pseudo-header sum of the plain TCP/UDP packet `pkt` into its checksum field
/// (a partial checksum, as the kernel leaves it for the transmitter) and returns where the
/// checksum now is; `None` (nothing written) for a packet that is not plain TCP or UDP.
/// A translator calls this on its output: the pseudo-header is all a partial checksum
/// holds, so whatever the rewrite did to the field is replaced, not adjusted.
pub fn pseudo_finish(pkt: &mut [u8]) -> Option<Partial> {
    let (l4, proto, l4_len) = plain_l4(pkt)?;
    let offset = match proto {
        TCP => TCP_CSUM,
        UDP => UDP_CSUM,
        _ => return None,
    };
    let s = pseudo_sum(pkt, proto, l4_len)?;
    let at = l4 + usize::from(offset);
    pkt.get(at..at + 2)?;
    put16(pkt, at, fold(s))?;
    Some(Partial {
        start: u16::try_from(l4).ok()?,
        offset,
    })
}

/// Completes the partial checksum `p` of `pkt` in software, as the kernel's
/// `skb_checksum_help` does: sums the bytes from `start` to the end (the field holds the
/// pseudo-header sum) and stores the complement; 0 is written as 0xffff (RFC 768: a UDP
/// checksum that computes to zero is sent as all ones; the same value for TCP). False
/// (nothing written) when the field lies outside the packet.
pub fn complete_checksum(pkt: &mut [u8], p: Partial) -> bool {
    let (start, at) = (
        usize::from(p.start),
        usize::from(p.start) + usize::from(p.offset),
    );
    let Some(tail) = pkt.get(start..) else {
        return false;
    };
    if at + 2 > pkt.len() {
        return false;
    }
    let ck = !fold(sum(tail, 0));
    set_u16(pkt, at, if ck == 0 { 0xffff } else { ck })
}

/// Writes a big-endian word; `None` outside the buffer.
fn put16(b: &mut [u8], at: usize, v: u16) -> Option<()> {
    set_u16(b, at, v).then_some(())
}

fn put32(b: &mut [u8], at: usize, v: u32) -> Option<()> {
    set_u32(b, at, v).then_some(())
}

/// Length of the TCP header at `l4` (data offset, RFC 9293 3.1), if it is one.
fn tcp_header_len(pkt: &[u8], l4: usize) -> Option<usize> {
    let thl = usize::from(u8_at(pkt, l4 + 12)? >> 4) * 4;
    (thl >= 20).then_some(thl)
}

/// Cuts the TCP super-packet `pkt` (a plain IPv4 or IPv6 packet, [`plain_l4`]) into
/// segments of `g.size` payload bytes, each a complete packet with its own checksums, as
/// the kernel's `tcp_gso_segment` does: the sequence number advances by the payload before
/// it; FIN and PSH stay on the last segment, CWR on the first (RFC 3168 6.1.2); IPv4
/// identification counts up from the super-packet's. Calls `out` with each segment;
/// returns the number made, or `None` (nothing made) for a packet that is not plain TCP.
pub fn segment(pkt: &[u8], g: Gso, mut out: impl FnMut(&[u8])) -> Option<usize> {
    let (l4, proto, l4_len) = plain_l4(pkt)?;
    if proto != TCP || g.size == 0 {
        return None;
    }
    let thl = tcp_header_len(pkt, l4)?;
    let hdrs = l4 + thl;
    if thl > l4_len {
        return None;
    }
    let payload = pkt.get(hdrs..l4 + l4_len)?;
    let head = pkt.get(..hdrs)?;
    let v4 = u8_at(pkt, 0)? >> 4 == 4;
    let seq0 = u32_at(pkt, l4 + 4)?;
    let flags0 = u8_at(pkt, l4 + 13)?;
    let id0 = if v4 { u16_at(pkt, 4)? } else { 0 };
    let mut seg = Vec::with_capacity(hdrs + usize::from(g.size));
    let chunks: Vec<&[u8]> = if payload.is_empty() {
        vec![payload]
    } else {
        payload.chunks(usize::from(g.size)).collect()
    };
    let n = chunks.len();
    let mut off = 0u32;
    for (i, chunk) in chunks.into_iter().enumerate() {
        seg.clear();
        seg.extend_from_slice(head);
        seg.extend_from_slice(chunk);
        let seg_l4 = thl + chunk.len();
        if v4 {
            put16(&mut seg, 2, u16::try_from(hdrs + chunk.len()).ok()?)?;
            put16(&mut seg, 4, id0.wrapping_add(u16::try_from(i).ok()?))?;
            put16(&mut seg, 10, 0)?;
            let ck = !fold(sum(seg.get(..l4)?, 0));
            put16(&mut seg, 10, ck)?;
        } else {
            put16(&mut seg, 4, u16::try_from(l4 - 40 + seg_l4).ok()?)?;
        }
        put32(&mut seg, l4 + 4, seq0.wrapping_add(off))?;
        let mut flags = flags0;
        if i + 1 < n {
            flags &= !(0x01 | 0x08); // FIN, PSH: last segment only
        }
        if i > 0 {
            flags &= !0x80; // CWR: first segment only
        }
        if let Some(f) = seg.get_mut(l4 + 13) {
            *f = flags;
        }
        put16(&mut seg, l4 + 16, 0)?;
        let ps = pseudo_sum(&seg, TCP, seg_l4)?;
        let ck = !fold(sum(seg.get(l4..)?, ps));
        put16(&mut seg, l4 + 16, ck)?;
        out(&seg);
        off = off.wrapping_add(u32::try_from(chunk.len()).ok()?);
    }
    Some(n)
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // test data: small indexes and lengths
mod tests {
    use super::*;
    use crate::checksum::verifies;

    /// A TCP packet over IPv4 (or IPv6) with `payload` bytes, its checksum complete.
    fn tcp(v6: bool, payload: usize, flags: u8) -> Vec<u8> {
        let l4 = if v6 { 40 } else { 20 };
        let mut p = vec![0u8; l4 + 20 + payload];
        if v6 {
            p[0] = 0x60;
            assert!(set_u16(&mut p, 4, u16::try_from(20 + payload).unwrap()));
            p[6] = TCP;
            p[7] = 64;
            p[8..24].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            p[24..40]
                .copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        } else {
            p[0] = 0x45;
            assert!(set_u16(&mut p, 2, u16::try_from(40 + payload).unwrap()));
            assert!(set_u16(&mut p, 4, 0xfffe));
            p[6] = 0x40; // DF
            p[8] = 64;
            p[9] = TCP;
            p[12..20].copy_from_slice(&[198, 18, 0, 1, 198, 19, 0, 2]);
            let ck = !fold(sum(&p[..20], 0));
            assert!(set_u16(&mut p, 10, ck));
        }
        assert!(set_u16(&mut p, l4, 40000));
        assert!(set_u16(&mut p, l4 + 2, 80));
        assert!(set_u32(&mut p, l4 + 4, 0xffff_ff00));
        p[l4 + 12] = 5 << 4;
        p[l4 + 13] = flags;
        for (i, b) in p[l4 + 20..].iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let ps = pseudo_sum(&p, TCP, 20 + payload).unwrap();
        let ck = !fold(sum(&p[l4..], ps));
        assert!(set_u16(&mut p, l4 + 16, ck));
        p
    }

    fn l4_verifies(p: &[u8]) -> bool {
        let (l4, proto, len) = plain_l4(p).unwrap();
        let ps = pseudo_sum(p, proto, len).unwrap();
        fold(sum(&p[l4..l4 + len], ps)) == 0xffff
    }

    #[test]
    fn header_round_trip_and_refusals() {
        let off = Offload {
            csum: Some(Partial {
                start: 20,
                offset: 16,
            }),
            gso: Some(Gso {
                v6: false,
                size: 1448,
                ecn: true,
            }),
        };
        let h = off.header(52);
        assert_eq!(Offload::from_header(&h, 60000), Ok(off));
        assert_eq!(Offload::from_header(&[0; HEADER_LEN], 1), Ok(Offload::NONE));
        // The field must lie inside the packet.
        assert_eq!(
            Offload::from_header(&h, 37),
            Err(VnetError::BadChecksumPlace)
        );
        // UDP segmentation, and TCP segmentation without a partial checksum, are refused.
        let mut udp = Offload::NONE.header(0);
        udp[1] = 5;
        assert_eq!(
            Offload::from_header(&udp, 100),
            Err(VnetError::UnknownGso(5))
        );
        let mut bare = h;
        bare[0] = 0;
        assert!(Offload::from_header(&bare, 60000).is_err());
    }

    #[test]
    fn partial_then_completed_equals_full() {
        for v6 in [false, true] {
            for len in [0, 1, 2, 1447, 3000] {
                let full = tcp(v6, len, 0x18);
                let mut p = full.clone();
                let part = pseudo_finish(&mut p).unwrap();
                assert!(is_plain_partial(&p, part));
                assert_ne!(p, full, "the field holds the pseudo-header only");
                assert!(complete_checksum(&mut p, part));
                assert!(l4_verifies(&p));
                // 0 and 0xffff verify alike; completion writes 0xffff for 0.
                let (a, b) = (
                    u16_at(&p, part.start as usize + 16),
                    u16_at(&full, part.start as usize + 16),
                );
                assert!(a == b || (a == Some(0xffff) && b == Some(0)));
            }
        }
        assert!(!complete_checksum(
            &mut [0u8; 10],
            Partial {
                start: 8,
                offset: 1
            }
        ));
    }

    #[test]
    fn segments_are_complete_packets_in_sequence() {
        for v6 in [false, true] {
            let sup = tcp(v6, 4000, 0x80 | 0x18 | 0x01); // CWR, PSH, ACK, FIN
            let g = Gso {
                v6,
                size: 1448,
                ecn: true,
            };
            let mut segs = Vec::new();
            assert_eq!(segment(&sup, g, |s| segs.push(s.to_vec())), Some(3));
            let l4 = if v6 { 40 } else { 20 };
            let mut payload = Vec::new();
            for (i, s) in segs.iter().enumerate() {
                assert!(l4_verifies(s), "segment {i}");
                if !v6 {
                    assert!(verifies(&s[..20]));
                    assert_eq!(u16_at(s, 4), Some(0xfffeu16.wrapping_add(i as u16)));
                }
                assert_eq!(
                    u32_at(s, l4 + 4),
                    Some(0xffff_ff00u32.wrapping_add(1448 * i as u32))
                );
                let f = s[l4 + 13];
                assert_eq!(f & 0x80 != 0, i == 0, "CWR on the first");
                assert_eq!(f & 0x09 != 0, i == 2, "FIN, PSH on the last");
                payload.extend_from_slice(&s[l4 + 20..]);
            }
            assert_eq!(payload, sup[l4 + 20..]);
            assert_eq!(segs[2].len(), l4 + 20 + 4000 - 2 * 1448);
        }
        // Not TCP: nothing made.
        let mut udp = tcp(false, 10, 0);
        udp[9] = UDP;
        assert_eq!(
            segment(
                &udp,
                Gso {
                    v6: false,
                    size: 8,
                    ecn: false
                },
                |_| panic!("no segment")
            ),
            None
        );
    }

    #[test]
    fn largest_segment_on_the_wire() {
        let sup = tcp(false, 4000, 0x10);
        let off = Offload {
            csum: Some(Partial {
                start: 20,
                offset: 16,
            }),
            gso: Some(Gso {
                v6: false,
                size: 1448,
                ecn: false,
            }),
        };
        assert_eq!(off.l4_on_wire(&sup, 20, 4020), 1468);
        assert_eq!(off.l4_on_wire(&sup, 20, 1000), 1000);
        assert_eq!(Offload::NONE.l4_on_wire(&sup, 20, 4020), 4020);
    }

    proptest::proptest! {
        /// No input makes these panic.
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200), h in proptest::array::uniform10(proptest::num::u8::ANY)) {
            let mut b = bytes.clone();
            if let Ok(o) = Offload::from_header(&h, b.len()) {
                if let Some(p) = o.csum { let _ = complete_checksum(&mut b, p); }
                if let Some(g) = o.gso { let _ = segment(&b, g, |_| {}); }
                let _ = o.l4_on_wire(&b, 20, b.len());
            }
            let _ = pseudo_finish(&mut b);
            let _ = plain_l4(&b);
        }
    }
}
