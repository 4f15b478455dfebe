//! Reassembly of fragmented protocol-41 packets (RFC 4213 3.6: the decapsulating node
//! reassembles before decapsulating; RFC 791 3.2 / RFC 815 for the procedure).
//!
//! Bounded: at most [`MAX_FLOWS`] datagrams in progress, each at most 65535 bytes, each given
//! [`TIMEOUT_SECS`] from its first fragment. Overlapping fragments, a second last fragment
//! that disagrees, or fragments past 65535 bytes abandon the datagram (overlaps are how
//! fragment attacks work; RFC 5722 takes the same line for IPv6). The reassembled datagram
//! gets a fresh 20-byte header: the first fragment's fields, no options, no fragmentation.

use xlat_wire::ipv4::{self, Ipv4Fields, Ipv4Header};

use crate::counters::{Counters, DropReason};
use crate::frag::FragId;
use crate::Time;

/// Datagrams reassembled at once.
pub const MAX_FLOWS: usize = 64;
/// Seconds a datagram may take to complete (RFC 791 suggests 15 s as the lower bound of the
/// reassembly timer; Linux uses 30 s).
pub const TIMEOUT_SECS: u64 = 30;
/// Largest IPv4 datagram.
const MAX_DATAGRAM: usize = 65535;

struct Flow {
    /// The datagram (RFC 791 3.2; the protocol is always 41 here).
    id: FragId,
    deadline: Time,
    /// Fields of the first fragment (offset 0), once it arrived.
    first: Option<Ipv4Header>,
    /// Payload bytes received so far, at their offsets.
    data: Vec<u8>,
    /// Byte ranges received, [start, end).
    have: Vec<(usize, usize)>,
    /// Payload length, once the last fragment arrived.
    total: Option<usize>,
}

pub(crate) struct Reassembly {
    flows: Vec<Flow>,
}

impl Reassembly {
    pub fn new() -> Reassembly {
        Reassembly { flows: Vec::new() }
    }

    /// Adds the fragment `pkt` (header `h`, already validated). Returns the whole datagram
    /// when this fragment completes it.
    pub fn add(
        &mut self,
        now: Time,
        h: &Ipv4Header,
        pkt: &[u8],
    ) -> Result<Option<Vec<u8>>, DropReason> {
        let Some(payload) = pkt.get(h.header_len..h.total_len) else {
            return Err(DropReason::TunnelReassemblyInvalid);
        };
        let start = usize::from(h.frag_offset) * 8;
        let end = start + payload.len();
        // RFC 791: every fragment but the last carries a multiple of 8 bytes.
        let bad_size = h.more_fragments && payload.len() % 8 != 0;
        if bad_size || end + ipv4::MIN_HEADER > MAX_DATAGRAM || payload.is_empty() {
            self.forget(h);
            return Err(DropReason::TunnelReassemblyInvalid);
        }
        let i = match self.find(h) {
            Some(i) => i,
            None => {
                if self.flows.len() >= MAX_FLOWS {
                    return Err(DropReason::TunnelReassemblyLimit);
                }
                self.flows.push(Flow {
                    id: FragId::of4(h),
                    deadline: now.plus_secs(TIMEOUT_SECS),
                    first: None,
                    data: Vec::new(),
                    have: Vec::new(),
                    total: None,
                });
                self.flows.len() - 1
            }
        };
        let Some(f) = self.flows.get_mut(i) else {
            return Err(DropReason::TunnelReassemblyLimit);
        };
        let overlap = f.have.iter().any(|&(s, e)| start < e && s < end);
        let beyond_last = f.total.is_some_and(|t| end > t);
        let second_last = !h.more_fragments && f.total.is_some_and(|t| t != end);
        let last_short = !h.more_fragments && f.have.iter().any(|&(_, e)| e > end);
        if overlap || beyond_last || second_last || last_short {
            self.flows.swap_remove(i);
            return Err(DropReason::TunnelReassemblyInvalid);
        }
        if f.data.len() < end {
            f.data.resize(end, 0);
        }
        if let Some(dst) = f.data.get_mut(start..end) {
            dst.copy_from_slice(payload);
        }
        f.have.push((start, end));
        if start == 0 {
            f.first = Some(*h);
        }
        if !h.more_fragments {
            f.total = Some(end);
        }
        let Some(total) = f.total else {
            return Ok(None);
        };
        let got: usize = f.have.iter().map(|&(s, e)| e - s).sum();
        if got != total || f.first.is_none() {
            return Ok(None);
        }
        let f = self.flows.swap_remove(i);
        let Some(first) = f.first else {
            return Ok(None);
        };
        let data = f.data.get(..total).ok_or(DropReason::Internal)?;
        let mut out = Vec::with_capacity(ipv4::MIN_HEADER + total);
        out.extend_from_slice(&ipv4::header(&Ipv4Fields {
            tos: first.tos,
            total_len: u16::try_from(ipv4::MIN_HEADER + total)
                .map_err(|_| DropReason::TunnelReassemblyInvalid)?,
            ident: first.ident,
            dont_fragment: false,
            more_fragments: false,
            frag_offset: 0,
            ttl: first.ttl,
            proto: first.proto,
            src: first.src,
            dst: first.dst,
        }));
        out.extend_from_slice(data);
        Ok(Some(out))
    }

    fn find(&self, h: &Ipv4Header) -> Option<usize> {
        let id = FragId::of4(h);
        self.flows.iter().position(|f| f.id == id)
    }

    fn forget(&mut self, h: &Ipv4Header) {
        if let Some(i) = self.find(h) {
            self.flows.swap_remove(i);
        }
    }

    /// The earliest deadline of a datagram in progress (at most [`MAX_FLOWS`] to look at).
    pub fn next_due(&self) -> Option<Time> {
        self.flows.iter().map(|f| f.deadline).min()
    }

    /// Abandons datagrams past their deadline, one `tunnel_reassembly_timeout` each.
    pub fn expire(&mut self, now: Time, c: &mut Counters) {
        let before = self.flows.len();
        self.flows.retain(|f| f.deadline > now);
        for _ in self.flows.len()..before {
            c.drop(DropReason::TunnelReassemblyTimeout);
        }
    }
}
