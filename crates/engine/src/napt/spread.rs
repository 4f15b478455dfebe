//! Which pool address a new inside host is paired with: one of the addresses that hold the
//! fewest hosts, chosen at random among them.
//!
//! RFC 4787 REQ-2 (paired pooling) keeps a host on one outside address for as long as it has
//! mappings, so the host's ports can only ever come from that address's range (64,512 ports
//! by default). An address picked at random without regard to its load pairs two busy hosts
//! with one address while others stay idle, and the second host's new mappings fail
//! (`port_exhausted`) with most of the pool free: 156 hosts on 256 addresses share an address
//! with near certainty (the birthday bound). Spreading hosts evenly makes an address's ports
//! run out only when every address holds as many hosts; the random choice among the least
//! loaded keeps outside addresses unpredictable (RFC 6056 3: no address a host is known to
//! get). RFC 3022 2.1 Basic NAT (`mode = "pool"`) is the case of at most one host an address:
//! a host gets an address of load 0 or none.
//!
//! Cost: new hosts and released hosts move their address one level, O(log L) for L distinct
//! loads and O(1) in the level; nothing scans the pool (a /16 pool is 65,536 addresses).

use std::collections::BTreeMap;

use crate::rng::Rng;

use super::pool::PoolAddr;

/// The pool slots new hosts may be paired with (all but those a reload retired), by load.
#[derive(Default)]
pub(super) struct Spread {
    /// Slots by the number of hosts paired with them; no level is empty.
    levels: BTreeMap<u32, Vec<u32>>,
    /// Each slot's level and position in it (None: retired, not paired with new hosts).
    at: Vec<Option<(u32, u32)>>,
    len: usize,
}

impl Spread {
    /// The index of `pool`'s active (not retired) slots at their loads now.
    pub(super) fn new(pool: &[PoolAddr]) -> Spread {
        let mut s = Spread {
            at: vec![None; pool.len()],
            ..Spread::default()
        };
        for (slot, p) in pool.iter().enumerate() {
            if !p.retired {
                s.insert(u32::try_from(slot).unwrap_or(u32::MAX), p.hosts);
            }
        }
        s
    }

    /// Active slots.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// A slot of the least load, at random among them, and that load (None: no active slot).
    pub(super) fn least(&self, rng: &mut Rng) -> Option<(u32, u32)> {
        let (&load, slots) = self.levels.first_key_value()?;
        let i = usize::try_from(rng.below(slots.len() as u64)).ok()?;
        slots.get(i).map(|&slot| (slot, load))
    }

    /// `slot` now holds `hosts` hosts (a host paired with it or released). Retired slots are
    /// not indexed and stay out.
    pub(super) fn moved(&mut self, slot: u32, hosts: u32) {
        if self.remove(slot).is_some() {
            self.insert(slot, hosts);
        }
    }

    fn insert(&mut self, slot: u32, load: u32) {
        let level = self.levels.entry(load).or_default();
        let pos = u32::try_from(level.len()).unwrap_or(u32::MAX);
        level.push(slot);
        if let Some(a) = self.at.get_mut(slot as usize) {
            *a = Some((load, pos));
            self.len += 1;
        }
    }

    /// Takes `slot` out of its level; its load, None if it was not indexed.
    fn remove(&mut self, slot: u32) -> Option<u32> {
        let (load, pos) = self.at.get_mut(slot as usize)?.take()?;
        self.len -= 1;
        let level = self.levels.get_mut(&load)?;
        level.swap_remove(pos as usize);
        // The slot that took its place (the level's last) is at `pos` now.
        if let Some(&moved) = level.get(pos as usize) {
            if let Some(a) = self.at.get_mut(moved as usize) {
                *a = Some((load, pos));
            }
        }
        if level.is_empty() {
            self.levels.remove(&load);
        }
        Some(load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: u32) -> Vec<PoolAddr> {
        (0..n).map(|i| PoolAddr::new(0xc613_0400 + i)).collect()
    }

    /// Pairs `hosts` hosts one after another as `new_host` does, and returns the loads.
    fn pair(p: &mut [PoolAddr], s: &mut Spread, rng: &mut Rng, hosts: u32) {
        for _ in 0..hosts {
            let (slot, load) = s.least(rng).unwrap();
            let a = &mut p[slot as usize];
            assert_eq!(a.hosts, load, "the level is the address's load");
            a.hosts += 1;
            s.moved(slot, a.hosts);
        }
    }

    #[test]
    fn hosts_spread_evenly_one_address_each_while_any_is_free() {
        let (mut p, mut rng) = (pool(256), Rng::new(7));
        let mut s = Spread::new(&p);
        pair(&mut p, &mut s, &mut rng, 156);
        assert_eq!(p.iter().filter(|a| a.hosts == 1).count(), 156);
        assert_eq!(p.iter().filter(|a| a.hosts > 1).count(), 0);
        pair(&mut p, &mut s, &mut rng, 256 - 156 + 3);
        assert!(p.iter().all(|a| a.hosts >= 1 && a.hosts <= 2));
        assert_eq!(p.iter().filter(|a| a.hosts == 2).count(), 3);
        assert_eq!(s.len(), 256);
    }

    #[test]
    fn a_released_address_is_the_next_one_paired() {
        let (mut p, mut rng) = (pool(8), Rng::new(1));
        let mut s = Spread::new(&p);
        pair(&mut p, &mut s, &mut rng, 16);
        assert!(p.iter().all(|a| a.hosts == 2));
        p[5].hosts -= 1;
        s.moved(5, p[5].hosts);
        assert_eq!(s.least(&mut rng), Some((5, 1)));
    }

    #[test]
    fn retired_slots_are_never_chosen_and_the_choice_is_random_among_the_least() {
        let mut p = pool(4);
        p[0].retired = true;
        p[3].hosts = 1;
        let mut s = Spread::new(&p);
        assert_eq!(s.len(), 3);
        s.moved(0, 0);
        let mut rng = Rng::new(3);
        let mut seen = [0u32; 4];
        for _ in 0..1000 {
            let (slot, load) = s.least(&mut rng).unwrap();
            assert_eq!(load, 0);
            seen[slot as usize] += 1;
        }
        assert_eq!(seen[0] + seen[3], 0, "{seen:?}");
        assert!(seen[1] > 400 && seen[2] > 400, "{seen:?}");
        assert!(Spread::new(&[]).least(&mut rng).is_none());
    }
}
