//! Where the AF_XDP slow path sends a translated packet: the egress interface and the
//! Ethernet addresses for its destination, asked of the kernel over rtnetlink
//! ([`Netlink`]).
//!
//! The packet workers never make a system call for this. They read a per-destination table
//! ([`Hops`], looked up through a [`HopsView`]): a hit gives the interface, the next hop's
//! MAC and the interface's own MAC; a miss (a new destination, or a next hop the kernel has
//! not resolved yet) sends the packet through the TUN device as before -- the kernel routes
//! it and resolves the neighbour -- and notes the destination for the resolver thread
//! ([`Hops::resolve_loop`], in `resolver.rs`), which answers within a few milliseconds.
//!
//! The kernel is asked once per destination (`ip route get`, so policy rules are the
//! kernel's own), and after that it tells: the resolver listens to the route, rule and
//! neighbour notifications and takes out of the table at once every destination a changed
//! route covers (asked again on its next packet), and moves every destination behind a
//! neighbour whose address changed. Only unicast routes out of the interfaces the slow path
//! serves are taken; anything else (a local address, a route into the TUN device, a
//! blackhole) stays with the kernel.
//!
//! The table is a cache of [`MAX_DESTINATIONS`] entries, split in [`SHARDS`] shards so that
//! a change copies one shard (at most a few hundred entries), not the table; when it is full, an eighth of it is dropped and
//! what is still in use comes back on its next miss.

mod netlink;
mod resolver;

pub use netlink::{Event, Netlink, Route};

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most destinations the table holds (about 48 bytes each in the workers' table, as much
/// again in the resolver's); at the limit an eighth is dropped to make room.
pub const MAX_DESTINATIONS: usize = 262_144;

/// Shards of the table: a change copies the shards it touches. A full cache's shard holds
/// about 256 entries, so a round that learns 50 new destinations copies about 12,800
/// entries, not the 262,144 of the whole table.
pub const SHARDS: usize = 1 << SHARD_BITS;
const SHARD_BITS: u32 = 10;

/// The resolver's counters ([`Hops::counters`]), in `xlat show stats` after the fast path's.
pub const COUNTERS: &[(&str, &str)] = &[
    ("afxdp_egress_resolved", "Destinations the AF_XDP slow path's resolver asked the kernel about (`ip route get`) and found a route out of [dataplane] interfaces for; one netlink round trip each, in the resolver's thread."),
    ("afxdp_egress_route_drops", "Cached destinations dropped because a route covering them was added, replaced or removed: their packets take the TUN path (the kernel routes them by the new route) until the resolver has asked again."),
    ("afxdp_egress_flushes", "Times the whole egress cache was dropped: a policy rule changed, the kernel's route notifications were lost (socket overflow), or more than 64 route changes came within 5 ms. It refills as packets come."),
    ("afxdp_egress_evicted", "Destinations dropped to make room in the full egress cache (262,144): they come back on their next packet. Steady growth: more destinations in use than the cache holds (docs/CONFIG.md)."),
];

/// Indexes into [`COUNTERS`].
#[derive(Clone, Copy)]
pub(crate) enum Counter {
    Resolved = 0,
    RouteDrops = 1,
    Flushes = 2,
    Evicted = 3,
}

/// The egress of one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub ifindex: u32,
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
}

type Shard = Arc<HashMap<IpAddr, Hop>>;

/// The destinations' egresses, shared by the workers (each keeps a [`HopsView`] and takes
/// the shards that changed when the generation moves) and the resolver thread.
pub struct Hops {
    generation: AtomicU64,
    shards: Vec<Mutex<Shard>>,
    /// Each shard's own generation: a worker copies only the shards whose one moved.
    shard_generations: Vec<AtomicU64>,
    wanted: Mutex<Vec<IpAddr>>,
    counts: [AtomicU64; COUNTERS.len()],
    cached: AtomicU64,
}

impl Default for Hops {
    fn default() -> Hops {
        Hops {
            generation: AtomicU64::new(0),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_generations: (0..SHARDS).map(|_| AtomicU64::new(0)).collect(),
            wanted: Mutex::new(Vec::new()),
            counts: Default::default(),
            cached: AtomicU64::new(0),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The shard of a destination: a multiplicative hash of its address's words.
pub fn shard_of(dst: &IpAddr) -> usize {
    let x = match dst {
        IpAddr::V4(a) => u32::from(*a),
        IpAddr::V6(a) => {
            let v = u128::from(*a);
            (v as u32) ^ ((v >> 32) as u32) ^ ((v >> 64) as u32) ^ ((v >> 96) as u32)
        }
    };
    (x.wrapping_mul(0x9E37_79B1) >> (32 - SHARD_BITS)) as usize % SHARDS
}

impl Hops {
    /// The table's generation: it moves whenever a shard changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A worker's view of the current table.
    pub fn view(&self) -> HopsView {
        let mut v = HopsView {
            generation: self.generation(),
            shards: Vec::with_capacity(SHARDS),
        };
        for (s, g) in self.shards.iter().zip(&self.shard_generations) {
            let g = g.load(Ordering::Acquire);
            v.shards.push((g, lock(s).clone()));
        }
        v
    }

    /// Asks for destinations to be resolved (a worker's misses of one batch).
    pub fn want(&self, dsts: &[IpAddr]) {
        if dsts.is_empty() {
            return;
        }
        let mut w = lock(&self.wanted);
        if w.len() < 4096 {
            w.extend_from_slice(dsts);
        }
    }

    fn take_wanted(&self) -> Vec<IpAddr> {
        std::mem::take(&mut *lock(&self.wanted))
    }

    /// Replaces shard `i` (the resolver's) and moves its generation; the caller then moves
    /// the table's ([`Hops::bump`]).
    fn publish(&self, i: usize, table: Shard) {
        if let (Some(s), Some(g)) = (self.shards.get(i), self.shard_generations.get(i)) {
            *lock(s) = table;
            g.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Moves the table's generation (after a round's [`Hops::publish`]es).
    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Every destination the table holds now (tests, diagnostics).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Destinations with a known egress, as of the resolver's last round.
    pub fn cached(&self) -> u64 {
        self.cached.load(Ordering::Relaxed)
    }

    /// The resolver's counters ([`COUNTERS`]).
    pub fn counters(&self) -> Vec<crate::Count> {
        COUNTERS
            .iter()
            .zip(&self.counts)
            .map(|(&(name, explain), v)| crate::Count {
                name,
                value: v.load(Ordering::Relaxed),
                explain,
            })
            .collect()
    }

    /// Sets the counters and the cached count (the resolver, once a round).
    fn store_counts(&self, counts: &[u64; COUNTERS.len()], cached: u64) {
        for (a, v) in self.counts.iter().zip(counts) {
            a.store(*v, Ordering::Relaxed);
        }
        self.cached.store(cached, Ordering::Relaxed);
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A worker's copy of the table's shards, brought up to date once per batch.
pub struct HopsView {
    generation: u64,
    shards: Vec<(u64, Shard)>,
}

impl HopsView {
    /// The egress of `dst`, if known.
    pub fn get(&self, dst: &IpAddr) -> Option<Hop> {
        self.shards.get(shard_of(dst))?.1.get(dst).copied()
    }

    /// Takes the shards that changed since the last call: one atomic load when none did,
    /// one per shard and a lock per changed shard when some did.
    pub fn refresh(&mut self, hops: &Hops) {
        let g = hops.generation();
        if g == self.generation {
            return;
        }
        self.generation = g;
        for ((mine, theirs), gen) in self
            .shards
            .iter_mut()
            .zip(&hops.shards)
            .zip(&hops.shard_generations)
        {
            // The generation before the table: a shard replaced in between is taken again
            // next time, never missed.
            let now = gen.load(Ordering::Acquire);
            if now != mine.0 {
                *mine = (now, lock(theirs).clone());
            }
        }
    }
}

/// An interface's own MAC (`/sys/class/net/NAME/address`).
pub fn interface_mac(name: &str) -> Option<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{name}/address")).ok()?;
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    <[u8; 6]>::try_from(v.as_slice()).ok()
}

/// Receive queues of an interface (`/sys/class/net/NAME/queues/rx-N`), at least 1.
pub fn rx_queues(name: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(1)
        .max(1) as u32
}
