//! SIIT on the XDP fast path (issue 25): which address pairs SIIT has handed to the fast
//! path, and the instructions that install, refresh and withdraw their recipes.
//!
//! SIIT is stateless (RFC 7915): what a TCP/UDP packet becomes depends on its addresses and
//! protocol alone, the ports are kept, and so the transport checksum's RFC 1624 adjustment
//! is one value per address pair (RFC 7915 4.5, 5.5; [`crate::offload::siit64_recipe`]).
//! The recipes are therefore keyed by (source, destination, protocol), not by the 5-tuple
//! as NAT's sessions are: one recipe carries every flow between two hosts, and a new flow
//! between them costs the engine nothing.
//!
//! When offload is on, SIIT's plain-packet lane (`Siit::lane`, the only packets simple enough
//! for a recipe: TCP/UDP, no options, extension headers or fragments, addresses mapped by
//! EAM or the pref64 -- RFC 7757 3.2, RFC 6052 2.2/2.3 -- not hairpinned, not martian)
//! reports each pair it translates ([`FastPath::seen6`], [`FastPath::seen4`]). A pair not
//! yet offloaded gets its recipe, one direction at a time (the reverse direction's mapping is
//! the engine's own decision when a packet of it comes: EAM and pref64 need not be
//! symmetric, RFC 7757 4). The table is a cache, not state the RFC knows: bounded
//! ([`CAPACITY`] pairs per engine; when full the oldest slot in the sweep's order is evicted,
//! counted `siit_offload_evicted`), its entries expire when neither the engine nor the fast
//! path has seen a packet for [`IDLE`] (the engine asks the fast path with a `Query`, as
//! for NAT sessions), and a reload of `[siit]` withdraws them all (the mapping may have
//! changed; the next packets install the new recipes).
//!
//! A pair whose packets still reach the engine (the recipe was refused, another worker's
//! eviction withdrew it, or its packets are ones XDP leaves to the engine: too big,
//! no neighbour yet) is installed again, at most once a second ([`REINSTALL`]).

use std::collections::VecDeque;

use hashbrown::HashMap;

use crate::counters::{Counters, Event};
use crate::offload::{
    siit46_recipe, siit64_recipe, OffloadKind, OffloadOp, Pair4, Pair6, Recipes, TOKEN_SIIT,
};
use crate::Time;

/// Address pairs (per direction and protocol) one engine offloads at most.
pub const CAPACITY: usize = 65_536;

/// A recipe neither the engine nor the fast path used for this long is withdrawn.
pub const IDLE: Time = Time::from_secs(60);

/// A pair whose packets keep reaching the engine is installed again after this long.
pub const REINSTALL: Time = Time::from_secs(1);

/// Slots the sweep looks at per [`FastPath::expire`] call.
const SWEEP: usize = 64;

/// Instructions held between drains at most (installs beyond it wait for the next packet).
const OPS_MAX: usize = 4096;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    V6(Pair6),
    V4(Pair4),
}

#[derive(Clone, Copy)]
struct Slot {
    recipes: Recipes,
    /// When the engine last translated the pair or the fast path said it did.
    last: Time,
    /// When the recipe was last (re)installed.
    installed: Time,
    /// A `Query` is out (since this time) and not answered yet.
    query: Option<Time>,
}

/// The pairs offloaded by one engine, and the instructions not yet drained.
pub(crate) struct FastPath {
    slots: Vec<Option<Slot>>,
    index: HashMap<Key, u32>,
    free: Vec<u32>,
    cursor: usize,
    ops: VecDeque<OffloadOp>,
    /// `xlat trace` runs: nothing is installed, so every packet reaches the engine
    /// ([`FastPath::hold`]).
    held: bool,
}

impl FastPath {
    pub fn new() -> FastPath {
        FastPath {
            slots: Vec::new(),
            index: HashMap::new(),
            free: Vec::new(),
            cursor: 0,
            ops: VecDeque::new(),
            held: false,
        }
    }

    /// `xlat trace` with the fast path: withdraws every recipe and installs none until
    /// `hold(false)` (SIIT has no inside host to hold back alone; a trace is bounded in
    /// time). Released, the pairs are installed again as their packets come.
    pub fn hold(&mut self, on: bool) {
        if on && !self.held {
            self.clear();
        }
        self.held = on;
    }

    fn key(r: &Recipes) -> Option<Key> {
        match r {
            Recipes::Siit64(r) => Some(Key::V6(r.key)),
            Recipes::Siit46(r) => Some(Key::V4(r.key)),
            _ => None,
        }
    }

    fn op(&mut self, kind: OffloadKind, slot: u32, recipes: Recipes) {
        self.ops.push_back(OffloadOp {
            kind,
            token: TOKEN_SIIT | u64::from(slot),
            recipes,
        });
    }

    /// The engine translated a packet of `key` to `new` (RFC 7915 5.1): install the recipe
    /// if the pair has none (`ids`: the fast path's identification offset and counter slot,
    /// `mtu`: the longest IPv4 packet), else note the use.
    pub fn seen6(
        &mut self,
        now: Time,
        key: Pair6,
        new: Pair4,
        ids: impl FnOnce() -> (u16, u16),
        mtu: u16,
        c: &mut Counters,
    ) {
        if !self.held && !self.touch(now, Key::V6(key)) {
            let r = Recipes::Siit64(siit64_recipe(key, new, ids(), mtu));
            self.install(now, Key::V6(key), r, c);
        }
    }

    /// [`FastPath::seen6`] for IPv4 -> IPv6 (RFC 7915 4.1): `mtu` is the longest IPv6 packet
    /// made from one without DF, and from one with DF.
    pub fn seen4(&mut self, now: Time, key: Pair4, new: Pair6, mtu: (u16, u16), c: &mut Counters) {
        if !self.held && !self.touch(now, Key::V4(key)) {
            let r = Recipes::Siit46(siit46_recipe(key, new, mtu));
            self.install(now, Key::V4(key), r, c);
        }
    }

    /// Notes a use of `key` if it is offloaded (and installs it again if it was installed
    /// more than [`REINSTALL`] ago: its packets should not be reaching the engine); false if
    /// it is not.
    fn touch(&mut self, now: Time, key: Key) -> bool {
        let Some(&i) = self.index.get(&key) else {
            return false;
        };
        let Some(Some(s)) = self.slots.get_mut(i as usize) else {
            return false;
        };
        s.last = now;
        if now.0.saturating_sub(s.installed.0) >= REINSTALL.0 && self.ops.len() < OPS_MAX {
            s.installed = now;
            let r = s.recipes;
            self.op(OffloadKind::Install, i, r);
        }
        true
    }

    fn install(&mut self, now: Time, key: Key, recipes: Recipes, c: &mut Counters) {
        if self.ops.len() >= OPS_MAX {
            return;
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < CAPACITY => {
                if self.slots.capacity() == 0 {
                    // Allocated once, on the first install: no allocation per packet after.
                    self.slots.reserve_exact(CAPACITY);
                    self.index.reserve(CAPACITY);
                }
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
            None => {
                // Full: evict the slot the sweep reaches next.
                let i = self.cursor % self.slots.len().max(1);
                self.cursor = i + 1;
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                self.withdraw(i);
                c.event(Event::SiitOffloadEvicted);
                i
            }
        };
        let Some(s) = self.slots.get_mut(i as usize) else {
            return;
        };
        *s = Some(Slot {
            recipes,
            last: now,
            installed: now,
            query: None,
        });
        self.index.insert(key, i);
        self.op(OffloadKind::Install, i, recipes);
    }

    /// Frees slot `i` and withdraws its recipe.
    fn withdraw(&mut self, i: u32) {
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::take) else {
            return;
        };
        if let Some(k) = Self::key(&s.recipes) {
            self.index.remove(&k);
        }
        self.free.push(i);
        self.op(OffloadKind::Remove, i, s.recipes);
    }

    /// Looks at the next [`SWEEP`] slots: one idle for [`IDLE`] gets a `Query` (the fast
    /// path may have carried its packets all along); one whose query went unanswered for
    /// as long is asked again.
    pub fn expire(&mut self, now: Time) {
        let n = self.slots.len();
        if n == 0 {
            return;
        }
        for _ in 0..SWEEP.min(n) {
            let i = self.cursor % n;
            self.cursor = i + 1;
            let Some(Some(s)) = self.slots.get_mut(i) else {
                continue;
            };
            let since = s.query.unwrap_or(s.last);
            if now.0.saturating_sub(since.0) < IDLE.0 {
                continue;
            }
            s.query = Some(now);
            let r = s.recipes;
            self.op(OffloadKind::Query, u32::try_from(i).unwrap_or(u32::MAX), r);
        }
    }

    /// The answer to a `Query` for slot `slot`: when the fast path last used the recipe
    /// (`None`: it has no such recipe). Used within [`IDLE`]: kept; else withdrawn. Returns
    /// true if withdrawn.
    pub fn seen(&mut self, now: Time, slot: u32, fast: Option<Time>, c: &mut Counters) -> bool {
        let Some(Some(s)) = self.slots.get_mut(slot as usize) else {
            return false;
        };
        if s.query.take().is_none() {
            return false; // not asked (the slot was reused since): nothing to decide
        }
        let last = fast.map_or(s.last, |f| f.max(s.last));
        if fast.is_some() && now.0.saturating_sub(last.0) < IDLE.0 {
            s.last = last;
            c.event(Event::OffloadRefreshed);
            return false;
        }
        self.withdraw(slot);
        true
    }

    /// Withdraws every recipe (a reload of `[siit]`: the mapping may have changed).
    pub fn clear(&mut self) {
        for i in 0..self.slots.len() {
            self.withdraw(u32::try_from(i).unwrap_or(u32::MAX));
        }
    }

    /// The instructions since the last call, oldest first.
    pub fn drain(&mut self, out: &mut Vec<OffloadOp>) {
        out.extend(self.ops.drain(..));
    }

    /// Pairs offloaded.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pair4(n: u32) -> Pair4 {
        Pair4 {
            proto: 17,
            src: 0xc000_0000 + n,
            dst: 0xc613_0005,
        }
    }

    fn pair6(n: u32) -> Pair6 {
        Pair6 {
            proto: 17,
            src: 0x2001_0002_0000_0064_0000_0001_0000_0000 + u128::from(n),
            dst: 0x2001_0002_0000_0006_0000_0000_0000_0005,
        }
    }

    fn drain(f: &mut FastPath) -> Vec<OffloadOp> {
        let mut v = Vec::new();
        f.drain(&mut v);
        v
    }

    /// `xlat trace`: held, every recipe is withdrawn and none is installed; released, the
    /// next packet of a pair installs it again.
    #[test]
    fn a_hold_withdraws_every_pair_and_installs_none_until_released() {
        let mut f = FastPath::new();
        let mut c = Counters::default();
        let t = Time::from_secs(10);
        f.seen4(t, pair4(1), pair6(1), (1280, 1500), &mut c);
        f.seen4(t, pair4(2), pair6(2), (1280, 1500), &mut c);
        assert_eq!(drain(&mut f).len(), 2);
        f.hold(true);
        let v = drain(&mut f);
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|o| o.kind == OffloadKind::Remove));
        f.seen4(t, pair4(1), pair6(1), (1280, 1500), &mut c);
        assert!(drain(&mut f).is_empty(), "nothing installed while held");
        f.hold(false);
        f.seen4(t, pair4(1), pair6(1), (1280, 1500), &mut c);
        let v = drain(&mut f);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].kind, OffloadKind::Install);
    }

    #[test]
    fn a_pair_is_installed_once_and_again_only_if_its_packets_keep_coming() {
        let mut f = FastPath::new();
        let mut c = Counters::default();
        let t = Time::from_secs(10);
        f.seen4(t, pair4(1), pair6(1), (1280, 1500), &mut c);
        f.seen4(t, pair4(1), pair6(1), (1280, 1500), &mut c);
        let v = drain(&mut f);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].kind, OffloadKind::Install);
        assert_eq!(v[0].token & TOKEN_SIIT, TOKEN_SIIT);
        f.seen4(t.plus_secs(1), pair4(1), pair6(1), (1280, 1500), &mut c);
        assert_eq!(drain(&mut f).len(), 1, "reinstalled after REINSTALL");
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn idle_pairs_are_queried_then_kept_or_withdrawn() {
        let mut f = FastPath::new();
        let mut c = Counters::default();
        f.seen4(Time::from_secs(0), pair4(1), pair6(1), (1280, 1500), &mut c);
        f.seen4(Time::from_secs(0), pair4(2), pair6(2), (1280, 1500), &mut c);
        drain(&mut f);
        f.expire(Time::from_secs(30));
        assert!(drain(&mut f).is_empty(), "not idle yet");
        f.expire(Time::from_secs(61));
        let q = drain(&mut f);
        assert_eq!(q.len(), 2);
        assert!(q.iter().all(|o| o.kind == OffloadKind::Query));
        let now = Time::from_secs(61);
        // Slot 0: the fast path used it 5 s ago -- kept. Slot 1: never since -- withdrawn.
        assert!(!f.seen(now, 0, Some(Time::from_secs(56)), &mut c));
        assert!(f.seen(now, 1, Some(Time::from_secs(0)), &mut c));
        let r = drain(&mut f);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].kind, OffloadKind::Remove);
        assert_eq!(f.len(), 1);
        // An answer nobody asked for changes nothing.
        assert!(!f.seen(now, 0, None, &mut c));
    }

    #[test]
    fn a_full_table_evicts_counted_and_clear_withdraws_everything() {
        let mut f = FastPath::new();
        let mut c = Counters::default();
        let t = Time::from_secs(1);
        for n in 0..CAPACITY as u32 {
            f.seen6(t, pair6(n), pair4(n), || (1, 2), 1500, &mut c);
            if n % 1024 == 0 {
                drain(&mut f);
            }
        }
        drain(&mut f);
        f.seen6(t, pair6(CAPACITY as u32), pair4(0), || (1, 2), 1500, &mut c);
        let v = drain(&mut f);
        assert_eq!(
            v.iter().map(|o| o.kind).collect::<Vec<_>>(),
            [OffloadKind::Remove, OffloadKind::Install]
        );
        assert_eq!(c.count(Event::SiitOffloadEvicted), 1);
        assert_eq!(f.len(), CAPACITY);
        f.clear();
        let mut v = Vec::new();
        f.drain(&mut v);
        assert_eq!(v.len(), CAPACITY);
        assert!(v.iter().all(|o| o.kind == OffloadKind::Remove));
        assert_eq!(f.len(), 0);
    }
}
