//! Fragment state for NAPT (RFC 4787 REQ-14, RFC 5508 REQ-? / RFC 3022 4.1 "fragmented
//! packets"): only the first fragment carries the transport ports, so the translation chosen
//! for it is remembered per (source, destination, protocol, identification) and applied to
//! the later fragments. Later fragments that arrive before their first are held, bounded in
//! number and time, and released once the first arrives. No reassembly: fragments cross the
//! NAT as fragments.

use std::collections::VecDeque;

use hashbrown::HashMap;

use crate::{DropReason, Time};

/// Identifies one fragmented datagram as it arrived (RFC 791: src, dst, protocol, ident).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragKey {
    pub src: u32,
    pub dst: u32,
    pub proto: u8,
    pub ident: u16,
}

/// Addresses to write into every later fragment of the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragRewrite {
    pub src: u32,
    pub dst: u32,
}

struct Flow {
    rewrite: FragRewrite,
    expires: Time,
    /// Payload bytes seen so far, and the datagram's length once the last fragment is seen.
    received: u32,
    total: Option<u32>,
}

struct Held {
    key: FragKey,
    at: Time,
    data: Vec<u8>,
}

/// Bounded fragment tracking.
pub struct Frags {
    flows: HashMap<FragKey, Flow>,
    held: VecDeque<Held>,
    max_flows: usize,
    max_held: usize,
    timeout: u64,
}

impl Frags {
    pub fn new(max_flows: u32, max_held: u32, timeout_secs: u64) -> Self {
        Frags {
            flows: HashMap::new(),
            held: VecDeque::new(),
            max_flows: max_flows as usize,
            max_held: max_held as usize,
            timeout: timeout_secs,
        }
    }

    /// Remembers the translation of a datagram's first fragment.
    pub fn record_first(
        &mut self,
        key: FragKey,
        rewrite: FragRewrite,
        payload_len: usize,
        now: Time,
    ) -> Result<(), DropReason> {
        if !self.flows.contains_key(&key) && self.flows.len() >= self.max_flows {
            return Err(DropReason::FragmentLimit);
        }
        let expires = now.plus_secs(self.timeout);
        let f = self.flows.entry(key).or_insert(Flow {
            rewrite,
            expires,
            received: 0,
            total: None,
        });
        f.rewrite = rewrite;
        f.expires = expires;
        f.received = f.received.saturating_add(payload_len as u32);
        Ok(())
    }

    /// The rewrite for a later fragment, if its first fragment was seen. Counts the fragment
    /// and forgets the datagram once every byte has been seen.
    pub fn later(
        &mut self,
        key: FragKey,
        offset_units: u16,
        payload_len: usize,
        more: bool,
        now: Time,
    ) -> Option<FragRewrite> {
        let f = self.flows.get_mut(&key)?;
        if f.expires <= now {
            self.flows.remove(&key);
            return None;
        }
        let rw = f.rewrite;
        f.received = f.received.saturating_add(payload_len as u32);
        if !more {
            f.total = Some(u32::from(offset_units) * 8 + payload_len as u32);
        }
        if matches!(f.total, Some(t) if f.received >= t) {
            self.flows.remove(&key);
        }
        Some(rw)
    }

    /// Holds a later fragment that arrived before its first fragment.
    pub fn hold(&mut self, key: FragKey, data: &[u8], now: Time) -> Result<(), DropReason> {
        if self.held.len() >= self.max_held {
            return Err(DropReason::FragmentNoFirst);
        }
        self.held.push_back(Held {
            key,
            at: now,
            data: data.to_vec(),
        });
        Ok(())
    }

    /// Takes the held fragments of `key`, in arrival order.
    pub fn take_held(&mut self, key: FragKey, out: &mut Vec<Vec<u8>>) {
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

    /// Drops expired flows and held fragments; returns how many held fragments were dropped.
    pub fn expire(&mut self, now: Time) -> u64 {
        self.flows.retain(|_, f| f.expires > now);
        let timeout = self.timeout;
        let before = self.held.len();
        self.held.retain(|h| h.at.plus_secs(timeout) > now);
        (before - self.held.len()) as u64
    }

    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    pub fn held(&self) -> usize {
        self.held.len()
    }
}
