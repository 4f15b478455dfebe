//! The resolver thread: answers the workers' misses with the kernel's route and neighbour
//! entry, and keeps the answers true by following the kernel's notifications
//! ([`Event`]s) rather than asking again about every destination.
//!
//! - A route added, replaced or removed: every known destination inside its prefix leaves
//!   the table at once (its packets go through the TUN device, where the kernel routes them
//!   by the new route) and is asked again on its next miss. A policy rule changed, or
//!   notifications lost: every destination leaves.
//! - A neighbour's address changed (or it became unusable): the destinations behind it get
//!   the new MAC (or leave the table until the kernel resolves it again).
//! - A destination the kernel routes elsewhere (a local address, the TUN device, no route)
//!   is asked about once, then left to the kernel for [`UNRESOLVED_FOR`] or until a route
//!   covering it changes: its misses cost no round trip each.
//! - A safety net behind the notifications (IPv4 sends none for the routes an interface takes
//!   down with it; its neighbours' removal does arrive): [`SWEEP_PER_SECOND`] known
//!   destinations are asked again each second, in turn.
//!
//! [`State`] holds the logic without the I/O; [`Hops::resolve_loop`] feeds it from netlink.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    shard_of, Counter, Event, Hop, Hops, Netlink, Route, COUNTERS, MAX_DESTINATIONS, SHARDS,
};

/// How often the resolver reads notifications and the workers' misses.
const POLL: Duration = Duration::from_millis(5);
/// A destination without a route out of a served interface is not asked about again for this
/// long (unless a route or rule changes); then it is asked on its next miss.
const UNRESOLVED_FOR: Duration = Duration::from_secs(10);
/// Known destinations asked again each second, in turn, whatever the notifications said.
const SWEEP_PER_SECOND: usize = 1024;
/// New destinations asked per poll at most (a netlink round trip each); the rest wait for
/// the next poll.
const RESOLVE_PER_POLL: usize = 2048;
/// Route changes in one poll past which every destination is dropped rather than each
/// change's prefix checked against every destination (a BGP session's burst).
const ROUTE_EVENTS_PER_SCAN: usize = 64;

/// Whether `prefix`/`len` holds `addr` (same family).
fn covers(prefix: IpAddr, len: u8, addr: IpAddr) -> bool {
    match (prefix, addr) {
        (IpAddr::V4(p), IpAddr::V4(a)) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            u32::from(p) & m == u32::from(a) & m
        }
        (IpAddr::V6(p), IpAddr::V6(a)) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            u128::from(p) & m == u128::from(a) & m
        }
        _ => false,
    }
}

/// What the resolver knows, and the table it publishes.
pub(super) struct State {
    max: usize,
    ports: HashMap<u32, [u8; 6]>,
    neigh: HashMap<(u32, IpAddr), [u8; 6]>,
    /// Destinations whose route leaves through a served interface (with or without a usable
    /// neighbour entry yet).
    known: HashMap<IpAddr, Route>,
    /// Gateways the known routes use, with how many destinations use each.
    gateways: HashMap<(u32, IpAddr), usize>,
    /// Destinations asked for and not resolved yet (each asked once).
    pending: HashSet<IpAddr>,
    /// Destinations the kernel routes elsewhere (a local address, the TUN device, no route),
    /// since when: not asked again until [`UNRESOLVED_FOR`] has passed or a route changed.
    elsewhere: HashMap<IpAddr, Instant>,
    shards: Vec<HashMap<IpAddr, Hop>>,
    dirty: Vec<bool>,
    sweep: Vec<IpAddr>,
    last_sweep: Instant,
    counts: [u64; COUNTERS.len()],
}

impl State {
    pub(super) fn new(ports: HashMap<u32, [u8; 6]>, max: usize, now: Instant) -> State {
        State {
            max,
            ports,
            neigh: HashMap::new(),
            known: HashMap::new(),
            gateways: HashMap::new(),
            pending: HashSet::new(),
            elsewhere: HashMap::new(),
            shards: (0..SHARDS).map(|_| HashMap::new()).collect(),
            dirty: vec![false; SHARDS],
            sweep: Vec::new(),
            last_sweep: now,
            counts: [0; COUNTERS.len()],
        }
    }

    fn count(&mut self, c: Counter, n: u64) {
        if let Some(v) = self.counts.get_mut(c as usize) {
            *v = v.saturating_add(n);
        }
    }

    /// The next hop of a destination by `r`, as the neighbour table keys it.
    fn next_hop(d: IpAddr, r: &Route) -> (u32, IpAddr) {
        (r.oif, r.gateway.unwrap_or(d))
    }

    /// Sets `d`'s table entry from its route and neighbour (removes it without either).
    fn set_hop(&mut self, d: IpAddr) {
        let hop = self.known.get(&d).and_then(|r| {
            Some(Hop {
                ifindex: r.oif,
                dst_mac: *self.neigh.get(&Self::next_hop(d, r))?,
                src_mac: *self.ports.get(&r.oif)?,
            })
        });
        let i = shard_of(&d);
        let Some(s) = self.shards.get_mut(i) else {
            return;
        };
        let changed = match hop {
            Some(h) => s.insert(d, h) != Some(h),
            None => s.remove(&d).is_some(),
        };
        if changed {
            if let Some(d) = self.dirty.get_mut(i) {
                *d = true;
            }
        }
    }

    fn learn(&mut self, d: IpAddr, r: Route) {
        if let Some(old) = self.known.insert(d, r) {
            self.unuse_gateway(d, &old);
        }
        if r.gateway.is_some() {
            *self.gateways.entry(Self::next_hop(d, &r)).or_insert(0) += 1;
        }
        self.set_hop(d);
    }

    fn unuse_gateway(&mut self, d: IpAddr, r: &Route) {
        if r.gateway.is_none() {
            return;
        }
        let k = Self::next_hop(d, r);
        if let Some(n) = self.gateways.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                self.gateways.remove(&k);
            }
        }
    }

    /// Drops `d` from what is known and from the table.
    fn forget(&mut self, d: IpAddr) {
        if let Some(r) = self.known.remove(&d) {
            self.unuse_gateway(d, &r);
        }
        self.set_hop(d);
    }

    fn forget_all(&mut self) {
        self.count(Counter::Flushes, 1);
        self.known.clear();
        self.gateways.clear();
        for (s, d) in self.shards.iter_mut().zip(self.dirty.iter_mut()) {
            if !s.is_empty() {
                s.clear();
                *d = true;
            }
        }
    }

    /// Replaces the neighbour table (a dump) and sets every known destination's hop by it.
    pub(super) fn set_neighbours(&mut self, neigh: HashMap<(u32, IpAddr), [u8; 6]>) {
        self.neigh = neigh;
        let all: Vec<IpAddr> = self.known.keys().copied().collect();
        for d in all {
            self.set_hop(d);
        }
    }

    /// Follows one poll's notifications; true when they were lost (the caller dumps the
    /// neighbour table again).
    pub(super) fn on_events(&mut self, events: &[Event]) -> bool {
        let mut routes = Vec::new();
        let mut neighbours = Vec::new();
        let mut all = false;
        let mut lost = false;
        for e in events {
            match *e {
                Event::Route { prefix, len } => routes.push((prefix, len)),
                Event::Rules => all = true,
                Event::Lost => lost = true,
                Event::Neighbour { ifindex, addr, mac } => {
                    let k = (ifindex, addr);
                    let before = self.neigh.get(&k).copied();
                    match mac {
                        Some(m) => self.neigh.insert(k, m),
                        None => self.neigh.remove(&k),
                    };
                    if before != mac {
                        neighbours.push(k);
                    }
                }
            }
        }
        if all || lost || routes.len() > ROUTE_EVENTS_PER_SCAN {
            self.forget_all();
            self.elsewhere.clear();
            return lost;
        }
        if !routes.is_empty() {
            // A route changed: what it covers may now leave through a served interface.
            self.elsewhere
                .retain(|d, _| !routes.iter().any(|&(p, l)| covers(p, l, *d)));
            let hit: Vec<IpAddr> = self
                .known
                .keys()
                .copied()
                .filter(|d| routes.iter().any(|&(p, l)| covers(p, l, *d)))
                .collect();
            self.count(Counter::RouteDrops, hit.len() as u64);
            for d in hit {
                self.forget(d);
            }
        }
        let mut gateways = HashSet::new();
        for &(ifindex, addr) in &neighbours {
            // A directly connected destination is its own next hop.
            if self
                .known
                .get(&addr)
                .is_some_and(|r| r.oif == ifindex && r.gateway.is_none())
            {
                self.set_hop(addr);
            }
            if self.gateways.contains_key(&(ifindex, addr)) {
                gateways.insert((ifindex, addr));
            }
        }
        if !gateways.is_empty() {
            let behind: Vec<IpAddr> = self
                .known
                .iter()
                .filter(|(d, r)| gateways.contains(&Self::next_hop(**d, r)))
                .map(|(d, _)| *d)
                .collect();
            for d in behind {
                self.set_hop(d);
            }
        }
        false
    }

    /// Notes destinations the workers missed; at the limit, an eighth of the known ones
    /// make room.
    pub(super) fn want(&mut self, asked: &[IpAddr], now: Instant) {
        for &d in asked {
            if self.known.contains_key(&d) || self.pending.contains(&d) {
                continue;
            }
            match self.elsewhere.get(&d) {
                Some(&since) if now.duration_since(since) < UNRESOLVED_FOR => continue,
                Some(_) => {
                    self.elsewhere.remove(&d);
                }
                None => {}
            }
            if self.known.len() + self.pending.len() >= self.max {
                let out: Vec<IpAddr> = self
                    .known
                    .keys()
                    .take((self.max / 8).max(1))
                    .copied()
                    .collect();
                self.count(Counter::Evicted, out.len() as u64);
                for o in out {
                    self.forget(o);
                }
            }
            if self.known.len() + self.pending.len() < self.max {
                self.pending.insert(d);
            }
        }
    }

    /// Asks `route` about pending destinations (at most [`RESOLVE_PER_POLL`], each once):
    /// those it routes out of a served interface become known, the rest wait in
    /// `elsewhere`, which forgets them after [`UNRESOLVED_FOR`] (and is held to the cache's
    /// size).
    pub(super) fn resolve(&mut self, now: Instant, mut route: impl FnMut(IpAddr) -> Option<Route>) {
        let batch: Vec<IpAddr> = self
            .pending
            .iter()
            .take(RESOLVE_PER_POLL)
            .copied()
            .collect();
        for d in batch {
            self.pending.remove(&d);
            match route(d).filter(|r| self.ports.contains_key(&r.oif)) {
                Some(r) => {
                    self.count(Counter::Resolved, 1);
                    self.learn(d, r);
                }
                None => {
                    if self.elsewhere.len() >= self.max {
                        self.elsewhere
                            .retain(|_, t| now.duration_since(*t) < UNRESOLVED_FOR);
                        if self.elsewhere.len() >= self.max {
                            self.elsewhere.clear();
                        }
                    }
                    self.elsewhere.insert(d, now);
                }
            }
        }
    }

    /// Once a second: asks `route` again about the next [`SWEEP_PER_SECOND`] known
    /// destinations.
    pub(super) fn sweep(&mut self, now: Instant, mut route: impl FnMut(IpAddr) -> Option<Route>) {
        if now.duration_since(self.last_sweep) < Duration::from_secs(1) {
            return;
        }
        self.last_sweep = now;
        if self.sweep.is_empty() {
            self.sweep = self.known.keys().copied().collect();
        }
        let n = self.sweep.len().min(SWEEP_PER_SECOND);
        let start = self.sweep.len() - n;
        for d in self.sweep.split_off(start) {
            let Some(old) = self.known.get(&d).copied() else {
                continue;
            };
            match route(d).filter(|r| self.ports.contains_key(&r.oif)) {
                Some(r) if r == old => {}
                Some(r) => self.learn(d, r),
                None => self.forget(d),
            }
        }
    }

    /// Hands the shards that changed to the workers, and the counters to `xlat show stats`.
    pub(super) fn publish(&mut self, hops: &Hops) {
        let mut any = false;
        for (i, (s, d)) in self.shards.iter().zip(self.dirty.iter_mut()).enumerate() {
            if std::mem::take(d) {
                hops.publish(i, Arc::new(s.clone()));
                any = true;
            }
        }
        if any {
            hops.bump();
        }
        let cached = self.shards.iter().map(|s| s.len() as u64).sum();
        hops.store_counts(&self.counts, cached);
    }
}

impl Hops {
    /// Resolves what the workers ask for and keeps the table current until `stop`; `ports`
    /// are the interfaces served, by ifindex, with their own MAC.
    pub fn resolve_loop(&self, ports: &HashMap<u32, [u8; 6]>, stop: &AtomicBool) {
        // The notification socket first: no change may fall between it and the dump.
        let (Ok(mut events), Ok(mut nl)) = (Netlink::subscribe(), Netlink::open()) else {
            tracing::warn!(
                "AF_XDP slow path: no rtnetlink socket; every packet leaves through the TUN device"
            );
            return;
        };
        let mut st = State::new(ports.clone(), MAX_DESTINATIONS, Instant::now());
        st.set_neighbours(nl.neighbours().unwrap_or_default());
        let mut batch = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(POLL);
            let now = Instant::now();
            batch.clear();
            events.events(|e| batch.push(e));
            if st.on_events(&batch) {
                tracing::debug!(
                    "AF_XDP slow path: route notifications lost; every destination is asked again"
                );
                st.set_neighbours(nl.neighbours().unwrap_or_default());
            }
            st.want(&self.take_wanted(), now);
            st.resolve(now, |d| nl.route(d).ok().flatten());
            st.sweep(now, |d| nl.route(d).ok().flatten());
            st.publish(self);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORT: u32 = 7;
    const OWN: [u8; 6] = [2, 0, 0, 0, 0, 7];
    const GW_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::from([0u8; 4]))
    }

    fn gw() -> IpAddr {
        ip("198.51.100.1")
    }

    /// A state serving one interface, its gateway's neighbour entry known.
    fn state(max: usize, now: Instant) -> State {
        let mut st = State::new(HashMap::from([(PORT, OWN)]), max, now);
        st.set_neighbours(HashMap::from([((PORT, gw()), GW_MAC)]));
        st
    }

    /// The default route's answer: out of PORT via the gateway.
    fn via_gw(_: IpAddr) -> Option<Route> {
        Some(Route {
            oif: PORT,
            gateway: Some(gw()),
        })
    }

    fn published(st: &mut State) -> Hops {
        let hops = Hops::default();
        st.publish(&hops);
        hops
    }

    /// A state (room for 16) that has resolved `dsts` by the default route, and the table
    /// it published.
    fn resolved(dsts: &[IpAddr], now: Instant) -> (State, Hops) {
        let mut st = state(16, now);
        st.want(dsts, now);
        st.resolve(now, via_gw);
        let hops = published(&mut st);
        (st, hops)
    }

    #[test]
    fn covers_matches_by_prefix_and_family() {
        assert!(covers(ip("0.0.0.0"), 0, ip("203.0.113.9")));
        assert!(covers(ip("203.0.113.0"), 24, ip("203.0.113.9")));
        assert!(!covers(ip("203.0.113.0"), 25, ip("203.0.113.200")));
        assert!(covers(ip("203.0.113.9"), 32, ip("203.0.113.9")));
        assert!(covers(ip("2001:db8::"), 32, ip("2001:db8:1::1")));
        assert!(!covers(ip("2001:db8::"), 48, ip("2001:db8:1::1")));
        assert!(!covers(ip("::"), 0, ip("203.0.113.9")));
    }

    #[test]
    fn a_missed_destination_gets_its_hop_and_the_workers_see_it() {
        let now = Instant::now();
        let d = ip("203.0.113.9");
        let (_, hops) = resolved(&[d], now);
        let view = hops.view();
        assert_eq!(
            view.get(&d),
            Some(Hop {
                ifindex: PORT,
                dst_mac: GW_MAC,
                src_mac: OWN
            })
        );
        assert_eq!(view.get(&ip("203.0.113.10")), None);
    }

    #[test]
    fn a_route_change_drops_only_the_destinations_it_covers() {
        let now = Instant::now();
        let (a, b) = (ip("203.0.113.9"), ip("192.0.2.9"));
        let (mut st, hops) = resolved(&[a, b], now);
        let mut view = hops.view();
        st.on_events(&[Event::Route {
            prefix: ip("203.0.113.0"),
            len: 24,
        }]);
        st.publish(&hops);
        view.refresh(&hops);
        assert_eq!(view.get(&a), None, "the changed route's destination left");
        assert_eq!(hops.counters()[Counter::RouteDrops as usize].value, 1);
        assert!(view.get(&b).is_some(), "another route's destination stays");
        // The default route changing covers everything.
        st.on_events(&[Event::Route {
            prefix: ip("0.0.0.0"),
            len: 0,
        }]);
        st.publish(&hops);
        view.refresh(&hops);
        assert_eq!(view.get(&b), None);
        assert!(hops.is_empty());
    }

    #[test]
    fn a_gateway_with_a_new_address_moves_every_destination_behind_it() {
        let now = Instant::now();
        let ds = [ip("203.0.113.9"), ip("192.0.2.9")];
        let (mut st, hops) = resolved(&ds, now);
        let new = [2, 0, 0, 0, 0, 9];
        st.on_events(&[Event::Neighbour {
            ifindex: PORT,
            addr: gw(),
            mac: Some(new),
        }]);
        st.publish(&hops);
        let view = hops.view();
        for d in ds {
            assert_eq!(view.get(&d).map(|h| h.dst_mac), Some(new));
        }
        // Unusable (failed, deleted): out of the table until it is resolved again.
        st.on_events(&[Event::Neighbour {
            ifindex: PORT,
            addr: gw(),
            mac: None,
        }]);
        st.publish(&hops);
        assert!(hops.is_empty());
        st.on_events(&[Event::Neighbour {
            ifindex: PORT,
            addr: gw(),
            mac: Some(GW_MAC),
        }]);
        st.publish(&hops);
        assert_eq!(
            hops.len(),
            2,
            "the destinations come back with their neighbour"
        );
    }

    #[test]
    fn a_connected_destination_waits_for_its_own_neighbour_entry() {
        let now = Instant::now();
        let mut st = state(16, now);
        let d = ip("198.51.100.20");
        st.want(&[d], now);
        st.resolve(now, |_| {
            Some(Route {
                oif: PORT,
                gateway: None,
            })
        });
        let hops = published(&mut st);
        assert!(hops.is_empty(), "no neighbour entry yet");
        st.on_events(&[Event::Neighbour {
            ifindex: PORT,
            addr: d,
            mac: Some([2, 0, 0, 0, 0, 0x20]),
        }]);
        st.publish(&hops);
        assert_eq!(hops.view().get(&d).map(|h| h.dst_mac[5]), Some(0x20));
    }

    #[test]
    fn rules_or_lost_notifications_drop_everything() {
        let now = Instant::now();
        for e in [Event::Rules, Event::Lost] {
            let (mut st, hops) = resolved(&[ip("203.0.113.9")], now);
            assert_eq!(hops.len(), 1);
            assert_eq!(st.on_events(&[e]), e == Event::Lost);
            st.publish(&hops);
            assert!(hops.is_empty(), "{e:?}");
            assert_eq!(hops.counters()[Counter::Flushes as usize].value, 1);
        }
    }

    #[test]
    fn routes_elsewhere_are_not_asked_again_until_they_age_or_a_route_changes() {
        let now = Instant::now();
        let mut st = state(16, now);
        let d = ip("203.0.113.9");
        let asked = std::cell::Cell::new(0);
        // Out of an interface the slow path does not serve (the TUN device, say).
        let elsewhere = |_| {
            asked.set(asked.get() + 1);
            Some(Route {
                oif: PORT + 1,
                gateway: None,
            })
        };
        st.want(&[d], now);
        st.resolve(now, elsewhere);
        st.want(&[d], now + Duration::from_millis(5));
        st.resolve(now + Duration::from_millis(5), elsewhere);
        assert_eq!(asked.get(), 1, "asked once, not on every miss");
        assert!(st.pending.is_empty() && st.known.is_empty());
        st.want(&[d], now + UNRESOLVED_FOR);
        st.resolve(now + UNRESOLVED_FOR, elsewhere);
        assert_eq!(asked.get(), 2, "asked again once it aged");
        // A route that covers it: asked again on its next miss.
        st.on_events(&[Event::Route {
            prefix: ip("203.0.113.0"),
            len: 24,
        }]);
        st.want(&[d], now + UNRESOLVED_FOR);
        st.resolve(now + UNRESOLVED_FOR, via_gw);
        assert!(st.known.contains_key(&d));
    }

    #[test]
    fn many_pending_destinations_are_each_asked_once_none_starved() {
        let now = Instant::now();
        let mut st = state(1 << 16, now);
        let all: Vec<IpAddr> = (0..5000u32)
            .map(|i| IpAddr::from((0xC633_0000 | i).to_be_bytes()))
            .collect();
        st.want(&all, now);
        let mut asked = HashMap::new();
        for _ in 0..3 {
            st.resolve(now, |d| {
                *asked.entry(d).or_insert(0) += 1;
                None
            });
        }
        assert_eq!(asked.len(), all.len(), "every destination asked");
        assert!(asked.values().all(|&n| n == 1), "and only once");
    }

    #[test]
    fn a_full_table_makes_room_and_never_grows_past_its_limit() {
        let now = Instant::now();
        let mut st = state(64, now);
        for i in 0..200u32 {
            st.want(&[IpAddr::from((0xCB00_7100 | i).to_be_bytes())], now);
            st.resolve(now, via_gw);
            assert!(st.known.len() + st.pending.len() <= 64);
        }
        let hops = published(&mut st);
        assert!(hops.len() <= 64 && hops.len() >= 56, "{}", hops.len());
        assert!(
            hops.view().get(&ip("203.0.113.199")).is_some(),
            "the newest is in"
        );
    }

    #[test]
    fn the_sweep_follows_a_route_no_notification_announced() {
        let now = Instant::now();
        let d = ip("203.0.113.9");
        let (mut st, hops) = resolved(&[d], now);
        st.sweep(now + Duration::from_millis(500), |_| None);
        st.publish(&hops);
        assert_eq!(hops.len(), 1, "not before a second has passed");
        st.sweep(now + Duration::from_secs(1), |_| None);
        st.publish(&hops);
        assert!(hops.is_empty(), "the route went: so does the entry");
    }
}
