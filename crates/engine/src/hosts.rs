//! The NAPT's inside hosts (RFC 4787 REQ-2 paired pooling: a host keeps one outside address;
//! `limits.max_sessions_per_host`): a record per host, found by its inside address or by its
//! number, with no stall however many hosts come ([`Records`]).
//!
//! Sessions and mappings hold the inside address in 4 bytes (`InsideAddr::as_held`): an IPv4
//! address as itself, an IPv6 address as its host's number, so reading a NAT64 session's
//! address is two loads here ([`Hosts::addr`]).

use crate::flow::InsideAddr;
use crate::records::{Record, Records};

/// Hosts whose records (32 bytes for IPv6) and index entries a core's cache keeps beside the
/// sessions; with more, batch stages fetch them ahead ([`Hosts::prefetch_addr`],
/// `nat64::Nat64::hosts_beyond_cache`). Measured with NAT64 at 1M sessions (ns/packet out,
/// host records not fetched ahead / fetched): 17 hosts 60 / 65, 62,500 hosts 78 / 69, 1M
/// hosts 173 / 77. Tests fetch always (the stages read what batch stage 2 named).
#[cfg(not(test))]
pub(crate) const CACHED: usize = 4096;
#[cfg(test)]
pub(crate) const CACHED: usize = 0;

/// One inside host.
#[derive(Clone, Copy)]
pub(crate) struct HostRec<A> {
    pub addr: A,
    /// Pool index of the paired (NAPT) or bound (pool mode) outside address.
    pub pool: u32,
    pub mappings: u32,
    pub sessions: u32,
    /// With port blocks: the block on its address it last took a port from (any protocol;
    /// a hint, checked against the block's owner). Fits in the record's padding.
    pub block: u16,
    live: bool,
}

impl<A: InsideAddr> Record for HostRec<A> {
    type Key = A;
    #[inline(always)]
    fn key(&self) -> A {
        self.addr
    }
    #[inline(always)]
    fn live(&self) -> bool {
        self.live
    }
    /// A released host keeps its address ([`Hosts::addr`]); its mapping count is the link.
    fn release(&mut self, next: u32) {
        self.live = false;
        self.mappings = next;
    }
    fn next_free(&self) -> u32 {
        self.mappings
    }
    /// The fourth word marks a host key.
    #[inline]
    fn words(a: A) -> [u64; 4] {
        let (w0, w1) = a.words();
        [w0, w1, 0, 4 << 40]
    }
}

/// The hosts of one NAPT.
pub(crate) struct Hosts<A> {
    recs: Records<HostRec<A>>,
}

impl<A: InsideAddr> Hosts<A> {
    /// At most `max_hosts` (`limits.max_sessions`: a host has a session).
    pub fn new(max_hosts: usize, seed: u64) -> Self {
        Hosts {
            recs: Records::new(max_hosts, seed ^ 0x2545_f491_4f6c_dd1d),
        }
    }

    /// The address a session's or mapping's `held` value stands for (for a released number,
    /// the address it last had: nothing holds one).
    #[inline(always)]
    pub fn addr(&self, held: u32) -> Option<A> {
        match A::from_held(held) {
            Some(a) => Some(a),
            None => self.recs.slot(held).map(|r| r.addr),
        }
    }

    /// Starts fetching the record a `held` value names, if it names one (an IPv6 host).
    #[inline(always)]
    pub fn prefetch(&self, held: u32) {
        if A::from_held(held).is_none() {
            self.recs.prefetch(held);
        }
    }

    /// Starts fetching the index slot where [`Hosts::number`] looks `a` up, when there are
    /// more hosts than stay in cache ([`CACHED`]).
    #[inline]
    pub fn prefetch_addr(&self, a: A) {
        if self.beyond_cache() {
            self.recs.prefetch_key(a);
        }
    }

    /// More hosts than stay in cache ([`CACHED`])?
    #[inline]
    pub fn beyond_cache(&self) -> bool {
        self.recs.len() > CACHED
    }

    /// How sessions and mappings hold the address of host `num`.
    #[cfg(test)]
    pub fn held(&self, num: u32) -> Option<u32> {
        let a = self.get(num)?.addr;
        Some(a.as_held().unwrap_or(num))
    }

    /// The number of the live host with address `a`.
    #[inline]
    pub fn number(&self, a: A) -> Option<u32> {
        self.recs.number(a)
    }

    /// The number of the host a session's or mapping's `held` value names.
    pub fn number_of_held(&self, held: u32) -> Option<u32> {
        match A::from_held(held) {
            Some(a) => self.number(a),
            None => self.get(held).map(|_| held),
        }
    }

    /// Host `num`, if live.
    pub fn get(&self, num: u32) -> Option<&HostRec<A>> {
        self.recs.get(num)
    }

    /// Host `num`, if live.
    pub fn get_mut(&mut self, num: u32) -> Option<&mut HostRec<A>> {
        self.recs.get_mut(num)
    }

    /// Adds a host with address `a` (not there yet); returns its number, or `None` when
    /// `max_hosts` are live.
    pub fn insert(&mut self, a: A, pool: u32, mappings: u32, sessions: u32) -> Option<u32> {
        self.recs.insert(HostRec {
            addr: a,
            pool,
            mappings,
            sessions,
            block: u16::MAX,
            live: true,
        })
    }

    /// Releases host `num` (its last mapping has gone); its number goes to the next host.
    pub fn remove(&mut self, num: u32) {
        self.recs.remove(num);
    }

    /// Live hosts.
    pub fn len(&self) -> usize {
        self.recs.len()
    }
}
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    proptest::proptest! {
        /// Hosts agree with a map model while they are made and released in numbers that
        /// make the index grow several times, released numbers are reused, and the copy to
        /// each new index runs between operations.
        #[test]
        fn hosts_match_a_model(ops in proptest::collection::vec((proptest::bool::weighted(0.7), 0u128..20_000), 1..3000)) {
            let mut hosts: Hosts<u128> = Hosts::new(100_000, 7);
            let mut model: HashMap<u128, u32> = HashMap::new();
            for (add, a) in ops {
                if add {
                    if model.contains_key(&a) {
                        continue;
                    }
                    let num = hosts.insert(a, 1, 1, 1).unwrap();
                    proptest::prop_assert!(model.values().all(|&n| n != num), "a number in use given out");
                    model.insert(a, num);
                } else if let Some(num) = model.remove(&a) {
                    hosts.remove(num);
                    proptest::prop_assert_eq!(hosts.number(a), None, "released, not found");
                }
                proptest::prop_assert_eq!(hosts.len(), model.len());
            }
            for (&a, &num) in &model {
                proptest::prop_assert_eq!(hosts.number(a), Some(num));
                proptest::prop_assert_eq!(hosts.addr(num), Some(a));
                proptest::prop_assert_eq!(hosts.number_of_held(num), Some(num));
            }
            proptest::prop_assert_eq!(hosts.number(20_001), None);
        }
    }

    /// The port-block hint lives in the records' padding: a host costs what it did.
    #[test]
    fn host_records_keep_their_size() {
        assert_eq!(std::mem::size_of::<HostRec<u32>>(), 20);
        assert_eq!(std::mem::size_of::<HostRec<u128>>(), 32);
    }

    #[test]
    fn ipv4_hosts_are_held_as_their_address_ipv6_as_their_number() {
        // Through several growths of the index (Records' own tests count the entries moved).
        let mut v4: Hosts<u32> = Hosts::new(1_000_000, 1);
        for a in 0..10_000u32 {
            let num = v4.insert(a, 0, 1, 1).unwrap();
            assert_eq!(v4.held(num), Some(a));
            assert_eq!(v4.number_of_held(a), Some(num));
            assert_eq!(v4.addr(a), Some(a));
        }
        let mut v6: Hosts<u128> = Hosts::new(1_000_000, 1);
        for a in 1u128 << 100..(1 << 100) + 10_000 {
            let num = v6.insert(a, 0, 1, 1).unwrap();
            assert_eq!(v6.held(num), Some(num));
            assert_eq!(v6.addr(num), Some(a));
        }
        // Released and reused: the number goes to the next host, the old address is gone.
        let n5 = v6.number((1 << 100) + 5).unwrap();
        v6.remove(n5);
        assert_eq!(v6.number((1 << 100) + 5), None);
        assert_eq!(
            v6.number_of_held(n5),
            None,
            "nothing holds a released number"
        );
        assert_eq!(v6.insert(7, 0, 1, 1), Some(n5));
        assert_eq!(v6.addr(n5), Some(7));
    }

    #[test]
    fn no_more_hosts_than_the_limit() {
        let mut hosts: Hosts<u128> = Hosts::new(3, 1);
        assert!((0..3).all(|a| hosts.insert(a, 0, 1, 1).is_some()));
        assert_eq!(hosts.insert(3, 0, 1, 1), None);
    }
}
