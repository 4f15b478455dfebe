//! Fragment state of every translator that keeps some: the one store of NAT44, NAT64 and
//! SIIT. No reassembly: fragments cross as fragments (RFC 3022 4.1, RFC 7915 4.1 and 5.1.1),
//! but three things need memory:
//!
//! - NAPT (NAT44, RFC 4787 REQ-14; NAT64, RFC 6146 3.4): only the first fragment carries the
//!   ports that pick the mapping, so its translation is remembered per datagram and applied to
//!   the later fragments; later fragments that arrive first are held (bounded in number and
//!   time) until the first one comes.
//! - ICMP messages (both IPv4 <-> IPv6 translators): the ICMPv6 checksum covers a
//!   pseudo-header with the message length, the ICMPv4 one does not (RFC 7915 4.2, 5.2), and a
//!   first fragment does not know the length of the whole message. The translated first
//!   fragment is held until the last fragment tells the length, then its checksum gets the
//!   missing length word (RFC 1624) and it leaves. Later fragments do not wait.
//! - Which worker owns a datagram ([`crate::shard`]): the same [`FragId`] names it.
//!
//! The 6to4/ISATAP tunnel reassembles (RFC 4213 3.6 asks it to), which is other work: its
//! store is `tunnel::reasm`, keyed by the same [`FragId`].

use std::collections::VecDeque;

use hashbrown::HashMap;
use xlat_wire::field::chunk_mut;
use xlat_wire::Delta;

use crate::{DropReason, Time};

/// One fragmented datagram as it arrived (RFC 791 3.2: source, destination, protocol,
/// identification; RFC 8200 4.5: source, destination, identification). The one name of a
/// datagram: the translators' fragment state, the tunnel's reassembly and the daemon's
/// record of which worker owns a datagram all use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FragId {
    V4 {
        src: u32,
        dst: u32,
        proto: u8,
        ident: u16,
    },
    V6 {
        src: u128,
        dst: u128,
        ident: u32,
    },
}

impl FragId {
    /// The datagram an IPv4 packet belongs to.
    pub(crate) fn of4(h: &xlat_wire::Ipv4Header) -> FragId {
        FragId::V4 {
            src: h.src,
            dst: h.dst,
            proto: h.proto,
            ident: h.ident,
        }
    }

    /// The datagram an IPv6 packet with a Fragment header belongs to.
    pub(crate) fn of6(h: &xlat_wire::Ipv6Header) -> Option<FragId> {
        h.frag.map(|f| FragId::V6 {
            src: h.src,
            dst: h.dst,
            ident: f.ident,
        })
    }
}

/// The earlier of two optional times.
pub(crate) fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Addresses the first fragment was translated to (NAT64): every later fragment gets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rewrite {
    To6 { src: u128, dst: u128 },
    To4 { src: u32, dst: u32 },
}

/// A translated first fragment of an ICMP message, waiting for the message length.
pub(crate) struct Pending {
    pub data: Vec<u8>,
    /// Offset of the ICMP(v6) checksum in `data`.
    pub cksum_at: usize,
    /// IPv4 -> IPv6: the length is added to the checksum (pseudo-header appears); IPv6 ->
    /// IPv4: removed.
    pub add: bool,
}

impl Pending {
    fn complete(mut self, total: u32) -> Vec<u8> {
        let d = if self.add {
            Delta::ZERO.add_sum(total)
        } else {
            Delta::ZERO.remove_sum(total)
        };
        if let Some(ck) = chunk_mut::<2>(&mut self.data, self.cksum_at) {
            *ck = d.apply(u16::from_be_bytes(*ck)).to_be_bytes();
        }
        self.data
    }
}

struct Flow {
    rewrite: Option<Rewrite>,
    expires: Time,
    /// Payload bytes seen, and the datagram's payload length once its last fragment was seen.
    received: u32,
    total: Option<u32>,
    first_seen: bool,
    pending: Option<Pending>,
}

struct Held {
    key: FragId,
    at: Time,
    data: Vec<u8>,
}

/// What a later fragment learns.
pub(crate) struct Later {
    /// The first fragment's translation, if it came.
    pub rewrite: Option<Rewrite>,
    /// A held first fragment that this fragment completed (it told the length).
    pub released: Option<Vec<u8>>,
}

/// Bounded fragment state: at most `max_flows` datagrams, `max_held` packets held.
pub(crate) struct FragTable {
    flows: HashMap<FragId, Flow>,
    held: VecDeque<Held>,
    pending: usize,
    /// No datagram or held fragment expires before this ([`FragTable::next_due`]): exact
    /// after [`FragTable::expire`], lowered by every insert, possibly early after removals.
    due: Option<Time>,
    max_flows: usize,
    max_held: usize,
    timeout: u64,
}

impl FragTable {
    pub fn new(max_flows: u32, max_held: u32, timeout_secs: u64) -> Self {
        FragTable {
            flows: HashMap::new(),
            held: VecDeque::new(),
            pending: 0,
            due: None,
            max_flows: max_flows as usize,
            max_held: max_held as usize,
            timeout: timeout_secs,
        }
    }

    fn flow(&mut self, key: FragId, now: Time) -> Result<&mut Flow, DropReason> {
        if !self.flows.contains_key(&key) && self.flows.len() >= self.max_flows {
            return Err(DropReason::FragmentLimit);
        }
        let expires = now.plus_secs(self.timeout);
        self.due = earliest(self.due, Some(expires));
        Ok(self.flows.entry(key).or_insert(Flow {
            rewrite: None,
            expires,
            received: 0,
            total: None,
            first_seen: false,
            pending: None,
        }))
    }

    /// The first fragment went through, translated with `rewrite`, carrying `payload` bytes
    /// of the datagram. With `pending` (an ICMP message) it is held until the length is known;
    /// if it is known already, the completed fragment comes back at once.
    pub fn first(
        &mut self,
        key: FragId,
        rewrite: Option<Rewrite>,
        payload: usize,
        pending: Option<Pending>,
        now: Time,
    ) -> Result<Option<Vec<u8>>, DropReason> {
        if pending.is_some() && self.held.len() + self.pending >= self.max_held {
            return Err(DropReason::FragmentLimit);
        }
        let f = self.flow(key, now)?;
        f.rewrite = rewrite.or(f.rewrite);
        f.first_seen = true;
        f.received = f
            .received
            .saturating_add(u32::try_from(payload).unwrap_or(u32::MAX));
        let mut out = None;
        let mut added = false;
        if let Some(p) = pending {
            match f.total {
                Some(t) => out = Some(p.complete(t)),
                None => {
                    f.pending = Some(p);
                    added = true;
                }
            }
        }
        let done = f.pending.is_none() && matches!(f.total, Some(t) if f.received >= t);
        if added {
            self.pending += 1;
        }
        if done {
            self.flows.remove(&key);
        }
        Ok(out)
    }

    /// A later fragment (`offset` in 8-byte units, `payload` bytes, `more` = M/MF flag).
    /// With `create`, a datagram not seen yet is recorded (so that the length reaches its
    /// first fragment when that comes).
    pub fn later(
        &mut self,
        key: FragId,
        offset: u16,
        payload: usize,
        more: bool,
        now: Time,
        create: bool,
    ) -> Later {
        let none = Later {
            rewrite: None,
            released: None,
        };
        if !self.flows.contains_key(&key) && (!create || self.flows.len() >= self.max_flows) {
            return none;
        }
        let Ok(f) = self.flow(key, now) else {
            return none;
        };
        if f.expires <= now {
            let had_pending = f.pending.is_some();
            self.flows.remove(&key);
            if had_pending {
                self.pending = self.pending.saturating_sub(1);
            }
            return none;
        }
        f.received = f
            .received
            .saturating_add(u32::try_from(payload).unwrap_or(u32::MAX));
        if !more {
            f.total = Some(
                (u32::from(offset) * 8).saturating_add(u32::try_from(payload).unwrap_or(u32::MAX)),
            );
        }
        let mut released = None;
        if let Some(t) = f.total {
            if let Some(p) = f.pending.take() {
                released = Some(p.complete(t));
            }
        }
        let rewrite = f.rewrite;
        let done = f.first_seen && matches!(f.total, Some(t) if f.received >= t);
        if released.is_some() {
            self.pending = self.pending.saturating_sub(1);
        }
        if done {
            self.flows.remove(&key);
        }
        Later { rewrite, released }
    }

    /// [`FragTable::later`] for an IPv4 fragment with header `h` (its datagram, offset,
    /// payload and MF flag read from it).
    pub fn later4(&mut self, h: &xlat_wire::Ipv4Header, now: Time, create: bool) -> Later {
        let key = FragId::of4(h);
        self.later(
            key,
            h.frag_offset,
            h.payload_len(),
            h.more_fragments,
            now,
            create,
        )
    }

    /// Holds a later fragment that came before its first fragment (RFC 6146 3.4).
    pub fn hold(&mut self, key: FragId, data: &[u8], now: Time) -> Result<(), DropReason> {
        if self.held.len() + self.pending >= self.max_held {
            return Err(DropReason::FragmentNoFirst);
        }
        self.due = earliest(self.due, Some(now.plus_secs(self.timeout)));
        self.held.push_back(Held {
            key,
            at: now,
            data: data.to_vec(),
        });
        Ok(())
    }

    /// Takes the held fragments of `key`, in arrival order.
    pub fn take_held(&mut self, key: FragId, out: &mut Vec<Vec<u8>>) {
        if self.held.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.held.len() {
            if self.held.get(i).is_some_and(|h| h.key == key) {
                if let Some(h) = self.held.remove(i) {
                    out.push(h.data);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Forgets expired datagrams; returns (held fragments dropped, first fragments dropped
    /// for want of their length).
    pub fn expire(&mut self, now: Time) -> (u64, u64) {
        let mut incomplete = 0u64;
        self.flows.retain(|_, f| {
            let keep = f.expires > now;
            if !keep && f.pending.is_some() {
                incomplete += 1;
            }
            keep
        });
        self.pending = self
            .pending
            .saturating_sub(usize::try_from(incomplete).unwrap_or(usize::MAX));
        let timeout = self.timeout;
        let before = self.held.len();
        self.held.retain(|h| h.at.plus_secs(timeout) > now);
        // Held fragments queue in arrival order: the first is the next to time out.
        let held_due = self.held.front().map(|h| h.at.plus_secs(timeout));
        self.due = earliest(self.flows.values().map(|f| f.expires).min(), held_due);
        ((before - self.held.len()) as u64, incomplete)
    }

    /// When [`FragTable::expire`] next has something to do (`None`: nothing held or tracked).
    /// Never later than the truth; after a datagram completes it may be earlier.
    pub fn next_due(&self) -> Option<Time> {
        if self.flows.is_empty() && self.held.is_empty() {
            return None;
        }
        self.due
    }

    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    pub fn held(&self) -> usize {
        self.held.len() + self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat_wire::field::{set_u16, u16_at};

    const K: FragId = FragId::V6 {
        src: 1,
        dst: 2,
        ident: 3,
    };

    fn pending(c: u16) -> Pending {
        let mut data = vec![0u8; 8];
        assert!(set_u16(&mut data, 2, c));
        Pending {
            data,
            cksum_at: 2,
            add: true,
        }
    }

    #[test]
    fn icmp_first_fragment_waits_for_the_length() {
        let mut t = FragTable::new(8, 8, 2);
        let now = Time::from_secs(1);
        assert!(t
            .first(K, None, 24, Some(pending(0x1000)), now)
            .unwrap()
            .is_none());
        assert_eq!(t.held(), 1);
        let l = t.later(K, 3, 24, true, now, true);
        assert!(l.released.is_none());
        let l = t.later(K, 6, 8, false, now, true);
        let done = l.released.unwrap();
        // 0x1000 + total (56) in one's complement.
        assert_eq!(
            u16_at(&done, 2),
            Some(Delta::ZERO.add_sum(56).apply(0x1000))
        );
        assert_eq!((t.held(), t.flows()), (0, 0));
    }

    #[test]
    fn last_fragment_first_completes_at_once() {
        let mut t = FragTable::new(8, 8, 2);
        let now = Time::from_secs(1);
        let l = t.later(K, 6, 8, false, now, true);
        assert!(l.rewrite.is_none() && l.released.is_none());
        let done = t
            .first(K, None, 48, Some(pending(7)), now)
            .unwrap()
            .unwrap();
        assert_eq!(u16_at(&done, 2), Some(Delta::ZERO.add_sum(56).apply(7)));
        assert_eq!(t.flows(), 0);
    }

    #[test]
    fn rewrite_reaches_later_fragments_and_held_ones_wait() {
        let mut t = FragTable::new(8, 1, 2);
        let now = Time::from_secs(1);
        let l = t.later(K, 3, 24, true, now, false);
        assert!(l.rewrite.is_none());
        t.hold(K, &[1, 2, 3], now).unwrap();
        assert_eq!(t.hold(K, &[4], now), Err(DropReason::FragmentNoFirst));
        let rw = Rewrite::To4 { src: 9, dst: 10 };
        assert!(t.first(K, Some(rw), 24, None, now).unwrap().is_none());
        let mut out = Vec::new();
        t.take_held(K, &mut out);
        assert_eq!(out, vec![vec![1, 2, 3]]);
        assert_eq!(t.later(K, 3, 24, true, now, false).rewrite, Some(rw));
        assert_eq!(t.later(K, 6, 8, false, now, false).rewrite, Some(rw));
        assert_eq!(t.flows(), 0, "every byte seen: forgotten");
    }

    #[test]
    fn expiry_counts_what_it_drops() {
        let mut t = FragTable::new(8, 8, 2);
        t.first(K, None, 24, Some(pending(1)), Time::from_secs(0))
            .unwrap();
        t.hold(
            FragId::V4 {
                src: 1,
                dst: 2,
                proto: 17,
                ident: 5,
            },
            &[0],
            Time::from_secs(0),
        )
        .unwrap();
        assert_eq!(t.expire(Time::from_secs(1)), (0, 0));
        assert_eq!(t.expire(Time::from_secs(3)), (1, 1));
        assert_eq!((t.flows(), t.held()), (0, 0));
    }

    #[test]
    fn limits_hold() {
        let mut t = FragTable::new(1, 8, 2);
        let now = Time::from_secs(0);
        t.first(K, None, 8, None, now).unwrap();
        let other = FragId::V6 {
            src: 1,
            dst: 2,
            ident: 4,
        };
        assert_eq!(
            t.first(other, None, 8, None, now),
            Err(DropReason::FragmentLimit)
        );
        assert!(t.later(other, 1, 8, false, now, true).rewrite.is_none());
    }
}
