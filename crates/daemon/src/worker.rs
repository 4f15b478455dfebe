//! The packet workers of `xlat run`: each owns one engine shard and one TUN queue, and
//! hands the packets it reads but does not own to their owner (VPP nat44-ed's layout).
//!
//! One turn of a worker: wait (poll) on its TUN queue, its eventfd and the stop descriptor
//! ([`xlat_io::sys::stop_fd`]) until the engine's next timer ([`Engine::poll_timeout`]: the
//! expiry sweep while sessions live, fragment and tunnel timers), [`IDLE_MAX`] at most;
//! translate what other workers handed it (its rings, in place); read a batch of up to 64
//! packets from its queue; with several workers, place each ([`Shards::owner`]): its own
//! and stateless packets stay, the others are copied into the bounded lock-free ring to
//! their owner (a full ring is a drop, `handoff_ring_full`), whose [`Doorbell`] rings only
//! if it sleeps; translate the batch with one `now`, write it back to its queue, then what
//! [`Engine::pop_ready`] releases; expire a little ([`Engine::expire_step`]); carry offload
//! ops to the XDP fast path; answer pending control requests. When the engine's timer is due,
//! an idle worker expires longer ([`Engine::expire`]); a gateway with nothing to expire
//! sleeps until a packet, a control request or a stop wakes it. With one worker nothing is placed: the batch goes straight to the
//! engine, as before workers existed.
//!
//! Fragments (RFC 4787 REQ-14, RFC 6146 3.4 / 3.5): outbound fragments follow their
//! source address, so they stay together. Inbound, only the first fragment of a datagram
//! has the port that names its owner: the worker that reads it notes (datagram -> owner) in
//! [`FragOwners`], a small shared table of atomics, and a later fragment, read by any
//! worker, goes where the table says. A later fragment that arrives before its first one
//! waits in a bounded per-worker queue ([`MAX_WAITING`]) and is looked up again every turn
//! (every [`FRAG_RETRY`] while it waits) until the engine's fragment timeout, then dropped
//! and counted (`fragment_wait_expired`).
//!
//! Logs never go per packet: failed TUN writes are counted and reported at most every 10 s.
//!
//! Packet trace (`xlat trace`, [`crate::control`]'s `trace`): armed by a control request, a
//! worker translates each batch with [`Engine::process_batch_traced`] instead of
//! [`Engine::process_batch`] (same translation) and keeps the records the filter takes, at
//! most the count asked for, in a buffer reserved when armed; the control thread collects
//! them between batches. Unarmed, the cost is one test of a field of the worker per batch.
//! Packets the XDP fast path translates never reach a worker, so a trace shows only what the
//! slow path sees: a flow's first packets, and packets the fast path hands on.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tracing::warn;
use xlat_engine::counters::NamedCount;
use xlat_engine::events::EndReason;
use xlat_engine::shard::{FragId, Owner, Shards};
use xlat_engine::vnet::Offload;
use xlat_engine::{Engine, PacketBuf, Time, Verdict};
use xlat_io::ring::{Consumer, Doorbell, Producer};
use xlat_io::sys::wait_readable;
use xlat_io::tun::{RecvBatch, Tun, DEFAULT_BATCH};

use crate::control::{
    DaemonStats, FastPathStats, Ingress, IoCounters, Pong, Reloaded, Request, Response, TraceEntry,
    WorkerStats,
};
use xlat_engine::trace::{TraceFilter, TraceRecord};

/// Expiry work per pcap tick offline, and at least this much per idle tick (in the engine's
/// units: a session slot looked at costs 1, a removal 65 -- `Engine::expire`).
pub const EXPIRE_BUDGET: usize = 65536;
/// Expiry work per pass on an idle tick: at most 16 removals, ~3 us. (While traffic flows,
/// each batch is followed by [`Engine::expire_step`], whose budget follows the batch and
/// the backlog.)
pub const EXPIRE_BUDGET_PER_BATCH: usize = 1024;
/// Idle ticks expire in passes of [`EXPIRE_BUDGET_PER_BATCH`] for as long as passes find
/// sessions to remove, up to this many (~16,000 removals, ~5-10 ms) -- and stop as soon as a
/// packet waits, so it waits no longer than one pass.
const IDLE_PASSES_MAX: usize = 1024;
/// The expiry cadence of a pcap replay (`xlat translate`), and a worker's longest wait when
/// the stop descriptor is missing (then it looks at the stop flag this often).
pub const TICK: Duration = Duration::from_millis(100);
/// A worker's longest wait when the engine has no timer: it still wakes now and then, so a
/// write error report or a lost wake-up is never stuck for long.
pub const IDLE_MAX: Duration = Duration::from_secs(1);
/// How often a worker with fragments waiting for their owner looks again.
pub const FRAG_RETRY: Duration = Duration::from_millis(5);
/// Later fragments a worker holds while their owner is unknown.
pub const MAX_WAITING: usize = 64;

/// Sessions ended at a time when the daemon stops with `[logging]` on ([`Worker::log_stop`]):
/// their events (a session's, its mapping's, its host's) fit the engine's event queue.
const STOP_CHUNK: usize = 4096;

/// How long a stopping worker waits for room in the log thread's queue, in all.
const STOP_LOG_TIME: Duration = Duration::from_secs(2);
/// Slots of the ring to each other worker: 1,024 with two workers, fewer with more (about
/// 2,048 packets may wait for one worker in all), at least 64.
pub fn ring_slots(workers: usize) -> usize {
    (2048 / workers.saturating_sub(1).max(1))
        .clamp(64, 1024)
        .next_power_of_two()
        .min(1024)
}

/// One list of the workers' own counters: name, explanation (what `xlat show stats
/// --explain` prints).
macro_rules! worker_counters {
    ($($variant:ident = $name:literal: $explain:literal,)*) => {
        /// A worker's counter (not the engine's): handoffs between workers and fragments
        /// waiting for their owner.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum WorkerCounter { $($variant,)* }

        impl WorkerCounter {
            pub const ALL: &'static [WorkerCounter] = &[$(WorkerCounter::$variant,)*];
            /// Stable name (JSON, text output).
            pub fn name(self) -> &'static str {
                match self { $(WorkerCounter::$variant => $name,)* }
            }
            /// What it means and what to do about it.
            pub fn explain(self) -> &'static str {
                match self { $(WorkerCounter::$variant => $explain,)* }
            }
        }
    };
}

worker_counters! {
    HandoffsOut = "handoffs_out": "Packets this worker read from its TUN queue that another worker owns (the host's sessions, the mapping's port slice, the datagram's first fragment) and passed to it through their ring. The kernel spreads packets over the queues by flow and sends a flow's packets to the queue that last wrote that flow's translated packets, so mostly the first packets of a flow are handed off.",
    HandoffsIn = "handoffs_in": "Packets other workers read and passed to this one, which owns them, and which it translated.",
    HandoffRingFull = "handoff_ring_full": "Packets dropped because the ring to their owner was full: that worker is busier than the one that read them. Sustained growth means a worker is saturated; fewer flows per inside host, more workers or more cores help.",
    FragmentsWaited = "fragments_waited": "Non-first fragments of an inbound datagram (they carry no port) that arrived before their first fragment had named the worker that owns the datagram, and waited for it.",
    FragmentWaitExpired = "fragment_wait_expired": "Waiting non-first fragments dropped because their first fragment did not arrive within the fragment timeout ([timeouts] fragment).",
    FragmentWaitFull = "fragment_wait_full": "Non-first fragments dropped because this worker already held as many fragments waiting for their first fragment as it may (64).",
    LogEventsDropped = "log_events_dropped": "NAT events ([logging]) not logged because the queue to the log thread was full: it could not send as fast as sessions were made and ended. Log fewer events (events = \"mappings\"), or look at what slows the collector's path. Translation never waits for the log.",
    AfxdpRx = "afxdp_rx": "Packets this worker read from its AF_XDP sockets ([dataplane] slow_path = \"af_xdp\"): packets for the engine that crossed neither the kernel's stack nor the TUN device.",
    AfxdpTx = "afxdp_tx": "Translated packets this worker sent out through the AF_XDP socket of their egress interface, with the next hop's MAC from the kernel's neighbour table.",
    AfxdpFallbackUnresolved = "afxdp_fallback_unresolved": "Translated packets sent through the TUN device because their destination's egress was not known yet: a new destination (resolved within milliseconds), a next hop without a neighbour entry (the kernel resolves it while routing this packet), or a route that does not leave through one of [dataplane] interfaces (a local address, the TUN device). A few per new destination is normal; steady growth means a destination that never resolves, or more destinations in use than the egress cache holds (262,144, docs/CONFIG.md). A burst of it right after a route change is the cache following the kernel.",
    AfxdpFallbackNoSocket = "afxdp_fallback_no_socket": "Translated packets sent through the TUN device because their egress interface's socket belongs to another worker (one socket per receive queue: an interface with fewer queues than workers). More receive queues on the interfaces (ethtool -L) or fewer workers avoid it.",
    AfxdpFallbackTxFull = "afxdp_fallback_tx_full": "Translated packets sent through the TUN device because the egress socket had no free transmit frame or ring slot: the interface sends slower than packets come.",
    AfxdpFallbackTtl = "afxdp_fallback_ttl": "Translated packets sent through the TUN device because their TTL or hop limit would expire at this hop: the kernel answers with ICMP Time Exceeded (RFC 1812 5.3.1).",
    AfxdpRxInvalid = "afxdp_rx_invalid": "Frames read from an AF_XDP socket that were not a whole IPv4 or IPv6 packet (the XDP program redirects none such): dropped.",
    AfxdpKernelDrops = "afxdp_kernel_drops": "Frames the kernel could not deliver to this worker's AF_XDP sockets (its XDP_STATISTICS: receive ring full, no free frame in the fill ring, invalid): the worker did not keep up. More workers on more queues, or a core of its own for the worker, help.",
}

/// Every [`WorkerCounter`] at zero, with its explanation (the names a worker's stats row
/// lists; docs and tests).
pub fn worker_counter_names() -> Vec<NamedCount> {
    WorkerCounter::ALL
        .iter()
        .map(|&c| NamedCount {
            name: c.name().into(),
            value: 0,
            explain: c.explain().into(),
        })
        .collect()
}

/// Who owns the datagram of a first fragment, for its later fragments: a fixed table of
/// atomics any worker writes and reads without a lock. Each slot packs a 40-bit tag of the
/// datagram's keyed hash, the worker, and the second it was written; a newer datagram
/// hashing to the same slot takes it over (the older one's later fragments then wait and
/// expire, counted). The hash is keyed with a random seed: keys are attacker-chosen.
pub struct FragOwners {
    slots: Box<[AtomicU64]>,
    seed: u64,
    /// Seconds an entry stays valid (the engine's fragment timeout).
    timeout_secs: u64,
}

/// Slots of [`FragOwners`] (32 KiB).
const FRAG_OWNER_SLOTS: usize = 4096;

impl FragOwners {
    pub fn new(seed: u64, timeout_secs: u64) -> FragOwners {
        FragOwners {
            slots: (0..FRAG_OWNER_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            seed,
            timeout_secs: timeout_secs.clamp(1, 0xfff0),
        }
    }

    fn hash(&self, id: &FragId) -> u64 {
        let (addrs, rest) = match *id {
            FragId::V4 {
                src,
                dst,
                proto,
                ident,
            } => (
                u64::from(src) << 32 | u64::from(dst),
                u64::from(proto) << 16 | u64::from(ident),
            ),
            // Not steered today (only IPv4 datagrams to a pool address are), but named alike.
            FragId::V6 { src, dst, ident } => (
                fold128(src) ^ fold128(dst).rotate_left(32),
                u64::from(ident) | 1 << 40,
            ),
        };
        let h = mix(addrs ^ self.seed ^ rest.wrapping_mul(0x9e37_79b9));
        mix(h ^ self.seed.rotate_left(29))
    }

    /// Notes that `worker` owns datagram `id` (its first fragment was just placed).
    pub fn record(&self, id: &FragId, worker: usize, now: Time) {
        let h = self.hash(id);
        let tag = (h >> 24) | 1;
        let v = tag << 24 | (worker as u64 & 0xff) << 16 | (secs(now) & 0xffff);
        if let Some(s) = self.slots.get(h as usize % FRAG_OWNER_SLOTS) {
            s.store(v, Ordering::Relaxed);
        }
    }

    /// The worker that owns datagram `id`, if its first fragment was placed within the
    /// fragment timeout.
    pub fn lookup(&self, id: &FragId, now: Time) -> Option<usize> {
        let h = self.hash(id);
        let v = self
            .slots
            .get(h as usize % FRAG_OWNER_SLOTS)?
            .load(Ordering::Relaxed);
        let tag = (h >> 24) | 1;
        if v == 0 || v >> 24 != tag & 0xff_ffff_ffff {
            return None;
        }
        let age = secs(now).wrapping_sub(v & 0xffff) & 0xffff;
        (age <= self.timeout_secs).then_some(((v >> 16) & 0xff) as usize)
    }
}

fn secs(t: Time) -> u64 {
    t.0 / 1_000_000_000
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An IPv6 address's two halves, folded into one word for [`mix`].
fn fold128(a: u128) -> u64 {
    (a >> 64) as u64 ^ a as u64
}

/// A later fragment waiting for its first fragment to name the owner.
struct Waiting {
    id: FragId,
    since: Time,
    data: Vec<u8>,
}

/// What every worker shares (read-only, or atomics and the fast path's mutex).
pub struct Shared<'a> {
    pub shards: Option<&'a Shards>,
    pub bells: &'a [Arc<Doorbell>],
    pub owners: &'a FragOwners,
    /// The engine's fragment timeout: how long a later fragment waits for its owner.
    pub frag_timeout: Duration,
    pub fast: Option<&'a Mutex<xlat_xdp::FastPath>>,
    /// The AF_XDP slow path's egress cache (`slow_path = "af_xdp"`), when on.
    pub hops: Option<&'a xlat_xdp::nexthop::Hops>,
    /// NAT event logging (`[logging]`), when on.
    pub log: Option<&'a crate::eventlog::EventLog>,
    /// Session sync (`[sync]`), when on.
    pub sync: Option<&'a crate::sync::SyncShared>,
    /// SIGINT / SIGTERM.
    pub stop: &'a AtomicBool,
    /// Set when a worker ends (an error): every worker stops.
    pub halt: &'a AtomicBool,
    pub start: Instant,
    /// CLOCK_MONOTONIC at `start` (the XDP program's stamps).
    pub mono_start: u64,
    pub dns64: Option<&'a xlat_dns64::Stats>,
}

impl Shared<'_> {
    fn clock(&self) -> Time {
        Time::from_nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// A standby forwards nothing (`[sync]`): its table is the active's copy.
    #[inline]
    fn standby(&self) -> bool {
        self.sync.is_some_and(|s| !s.is_active())
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.halt.load(Ordering::SeqCst)
    }
}

/// Adds `n` to counter `c` of `counts`.
fn add(counts: &mut [u64], c: WorkerCounter, n: u64) {
    if let Some(v) = counts.get_mut(c as usize) {
        *v = v.saturating_add(n);
    }
}

/// Worker `k`'s bit in a set of workers (none past 63: [`xlat_engine::shard::MAX_WORKERS`]).
fn bit(k: usize) -> u64 {
    u32::try_from(k)
        .ok()
        .and_then(|k| 1u64.checked_shl(k))
        .unwrap_or(0)
}

/// One packet worker: its engine, its TUN queue, its control channel, its rings.
pub struct Worker {
    pub id: usize,
    engine: Engine,
    tun: Tun,
    control: crate::inbox::Inbox,
    /// Placement, the rings to the other workers, the fragment wait queue, the counters.
    handoff: Handoff,
    /// Rings from the other workers.
    from: Vec<Consumer>,
    io: IoCounters,
    /// An ISATAP host's routes follow its engine (one worker only: `[dataplane] workers`).
    isatap_host: Option<crate::tunnel_routes::IsatapHostRoutes>,
    /// The AF_XDP slow path's sockets of this worker (`[dataplane] slow_path = "af_xdp"`).
    afxdp: Option<crate::afxdp::Port>,
    /// The packet trace, while one is armed or its records wait to be collected.
    trace: Option<Box<Tracing>>,
    /// Where packets belong with several workers: [`Shared::shards`] at start, then what
    /// the last reload gave (applied with the engine's configuration, at the same batch
    /// boundary).
    steer: Option<Shards>,
    /// Readable once SIGINT/SIGTERM came ([`xlat_io::sys::stop_fd`]), so a long wait ends at
    /// once on a stop; `None` if it could not be made (waits are then [`TICK`] at most).
    stop: Option<std::os::fd::BorrowedFd<'static>>,
}

/// A worker's side of `xlat trace`.
struct Tracing {
    filter: TraceFilter,
    /// Records still wanted.
    left: usize,
    /// Recording stops at this time.
    until: Time,
    /// Records not collected yet, with where each packet came from (capacity: the count).
    records: Vec<(Ingress, TraceRecord)>,
    /// One batch's records (capacity: the count).
    batch: Vec<TraceRecord>,
    /// Records made so far.
    seq: u64,
}

impl Tracing {
    fn new(filter: TraceFilter, count: usize, until: Time) -> Tracing {
        Tracing {
            filter,
            left: count,
            until,
            records: Vec::with_capacity(count),
            batch: Vec::with_capacity(count),
            seq: 0,
        }
    }
}

/// Translates a batch: traced when a trace is armed and still wants packets, else
/// [`Engine::process_batch`] (the one test the trace costs when off).
#[inline]
fn translate(
    engine: &mut Engine,
    trace: &mut Option<Box<Tracing>>,
    now: Time,
    pkts: &mut [PacketBuf],
    verdicts: &mut [Verdict],
    ingress: Ingress,
) {
    match trace {
        None => engine.process_batch(now, pkts, verdicts),
        Some(t) if t.left > 0 && now < t.until => {
            t.batch.clear();
            let max = t.left;
            let n = engine.process_batch_traced(now, pkts, verdicts, &t.filter, &mut t.batch, max);
            t.left -= n.min(t.left);
            t.records.extend(t.batch.drain(..).map(|r| (ingress, r)));
        }
        Some(_) => engine.process_batch(now, pkts, verdicts),
    }
}

/// A worker's side of the handoff: which packets of a batch it keeps, the rings it hands
/// the others to, the later fragments waiting for their owner, and its counters. No I/O
/// (the rings are memory), so it is tested on its own.
pub struct Handoff {
    me: usize,
    /// Ring to worker k at `to[k]` (`None` for itself).
    to: Vec<Option<Producer>>,
    waiting: VecDeque<Waiting>,
    counts: [u64; WorkerCounter::ALL.len()],
    /// Workers handed packets since their doorbell was last rung (a bit each).
    rung: u64,
}

impl Handoff {
    /// Worker `me`'s handoff, with `to[k]` its ring to worker k.
    pub fn new(me: usize, to: Vec<Option<Producer>>) -> Handoff {
        Handoff {
            me,
            to,
            waiting: VecDeque::new(),
            counts: [0; WorkerCounter::ALL.len()],
            rung: 0,
        }
    }

    /// Value of a counter.
    pub fn get(&self, c: WorkerCounter) -> u64 {
        self.counts.get(c as usize).copied().unwrap_or(0)
    }

    fn count(&mut self, c: WorkerCounter, n: u64) {
        add(&mut self.counts, c, n);
    }

    /// Later fragments waiting for their owner.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Copies `pkt` into the ring to worker `k` and marks `k` for its doorbell: `Some(true)`
    /// handed, `Some(false)` the ring was full, `None` no ring to `k` (itself, or no such
    /// worker).
    fn hand_over(
        to: &mut [Option<Producer>],
        rung: &mut u64,
        k: usize,
        pkt: &[u8],
        off: Offload,
    ) -> Option<bool> {
        let ring = to.get_mut(k)?.as_mut()?;
        let pushed = ring.push_with(pkt, off);
        if pushed {
            *rung |= bit(k);
        }
        Some(pushed)
    }

    /// Keeps this worker's packets (and stateless ones) in `pkts`, in order, and hands the
    /// others to their owners or, later fragments whose owner is not known yet, to the wait
    /// queue (RFC 4787 REQ-14: a later fragment follows its first fragment).
    pub fn place(
        &mut self,
        shards: &Shards,
        owners: &FragOwners,
        now: Time,
        pkts: &mut Vec<PacketBuf>,
    ) {
        let me = self.me;
        let (to, waiting, counts, rung) = (
            &mut self.to,
            &mut self.waiting,
            &mut self.counts,
            &mut self.rung,
        );
        let mut bump = |c: WorkerCounter| add(counts, c, 1);
        pkts.retain(|p| {
            let k = match shards.owner(p.data()) {
                Owner::Any => return true,
                Owner::Worker(k) => k,
                Owner::FirstFragment { worker, id } => {
                    owners.record(&id, worker, now);
                    worker
                }
                Owner::LaterFragment(id) => match owners.lookup(&id, now) {
                    Some(k) => k,
                    None => {
                        if waiting.len() >= MAX_WAITING {
                            bump(WorkerCounter::FragmentWaitFull);
                        } else {
                            waiting.push_back(Waiting {
                                id,
                                since: now,
                                data: p.data().to_vec(),
                            });
                            bump(WorkerCounter::FragmentsWaited);
                        }
                        return false;
                    }
                },
            };
            if k == me {
                return true;
            }
            match Self::hand_over(to, rung, k, p.data(), p.offload()) {
                Some(true) => bump(WorkerCounter::HandoffsOut),
                Some(false) => bump(WorkerCounter::HandoffRingFull),
                // Not a worker we know (cannot happen): translate here.
                None => return true,
            }
            false
        });
    }

    /// Looks up the owners of the waiting fragments again: those of other workers are handed
    /// on, those past `timeout` dropped and counted; returns those this worker owns, to
    /// translate.
    pub fn retry(&mut self, owners: &FragOwners, now: Time, timeout: Duration) -> Vec<Vec<u8>> {
        let timeout = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let mut local = Vec::new();
        let (mut expired, mut full, mut handed) = (0, 0, 0);
        let me = self.me;
        let (to, rung) = (&mut self.to, &mut self.rung);
        self.waiting.retain_mut(|w| {
            match owners.lookup(&w.id, now) {
                Some(k) if k == me => local.push(std::mem::take(&mut w.data)),
                Some(k) => match Self::hand_over(to, rung, k, &w.data, Offload::NONE) {
                    Some(true) => handed += 1,
                    Some(false) => full += 1,
                    None => local.push(std::mem::take(&mut w.data)),
                },
                None if now.0.saturating_sub(w.since.0) > timeout => expired += 1,
                None => return true,
            }
            false
        });
        self.count(WorkerCounter::HandoffsOut, handed);
        self.count(WorkerCounter::HandoffRingFull, full);
        self.count(WorkerCounter::FragmentWaitExpired, expired);
        local
    }

    /// Wakes the workers handed packets since the last call, if they sleep.
    pub fn ring_owners(&mut self, bells: &[Arc<Doorbell>]) {
        if self.rung == 0 {
            return;
        }
        for (k, b) in bells.iter().enumerate() {
            if self.rung & bit(k) != 0 {
                b.ring();
            }
        }
        self.rung = 0;
    }

    /// The counters with their names and explanations.
    fn named(&self) -> Vec<NamedCount> {
        WorkerCounter::ALL
            .iter()
            .map(|&c| NamedCount {
                name: c.name().into(),
                value: self.get(c),
                explain: c.explain().into(),
            })
            .collect()
    }
}

/// Stops every worker when one ends, also by a panic: dropped at the end of its thread.
pub struct HaltOnExit<'a, 'b>(pub &'a Shared<'b>);

impl Drop for HaltOnExit<'_, '_> {
    fn drop(&mut self) {
        self.0.halt.store(true, Ordering::SeqCst);
        for b in self.0.bells {
            b.waker().wake();
        }
    }
}

impl Worker {
    pub fn new(
        id: usize,
        engine: Engine,
        tun: Tun,
        control: crate::inbox::Inbox,
        to: Vec<Option<Producer>>,
        from: Vec<Consumer>,
        isatap_host: Option<crate::tunnel_routes::IsatapHostRoutes>,
    ) -> Worker {
        Worker {
            id,
            engine,
            tun,
            control,
            handoff: Handoff::new(id, to),
            from,
            io: IoCounters::default(),
            isatap_host,
            afxdp: None,
            trace: None,
            steer: None,
            stop: xlat_io::sys::stop_fd(),
        }
    }

    /// Gives this worker its AF_XDP sockets (`[dataplane] slow_path = "af_xdp"`).
    pub fn set_afxdp(&mut self, port: crate::afxdp::Port) {
        self.afxdp = Some(port);
    }

    /// Sends a translated packet: out of its egress interface's AF_XDP socket when the slow
    /// path has one for it, else through the TUN device.
    fn send(tun: &Tun, io: &mut IoCounters, afxdp: &mut Option<crate::afxdp::Port>, pkt: &[u8]) {
        Self::send_with(tun, io, afxdp, pkt, Offload::NONE);
    }

    /// [`Worker::send`] for a packet with kernel offloads: a super-packet or a partial
    /// checksum goes back through the TUN device, whose kernel side completes them (an
    /// AF_XDP frame carries neither).
    fn send_with(
        tun: &Tun,
        io: &mut IoCounters,
        afxdp: &mut Option<crate::afxdp::Port>,
        pkt: &[u8],
        off: Offload,
    ) {
        if let Some(port) = afxdp.as_mut().filter(|_| off.is_none()) {
            if port.transmit(pkt) {
                return;
            }
        }
        let sent = if off.is_none() {
            tun.send(pkt)
        } else {
            tun.send_offload(pkt, off)
        };
        match sent {
            Ok(()) => io.tun_tx_packets += 1,
            Err(_) => io.tun_write_errors += 1,
        }
    }

    /// Carries a batch read from `ingress`: hands other workers their packets (with
    /// several), translates this worker's and sends what the engine transmits.
    fn carry(
        &mut self,
        sh: &Shared<'_>,
        now: Time,
        mut pkts: Vec<PacketBuf<'_>>,
        verdicts: &mut [Verdict],
        ingress: Ingress,
    ) {
        if let Some(shards) = &self.steer {
            self.handoff.place(shards, sh.owners, now, &mut pkts);
            // The owners start on what we handed them while we translate ours.
            self.handoff.ring_owners(sh.bells);
        }
        translate(
            &mut self.engine,
            &mut self.trace,
            now,
            &mut pkts,
            verdicts,
            ingress,
        );
        Self::send_transmitted(&self.tun, &mut self.io, &mut self.afxdp, &pkts, verdicts);
    }

    /// Sends each packet of a translated batch whose verdict transmits it.
    fn send_transmitted(
        tun: &Tun,
        io: &mut IoCounters,
        afxdp: &mut Option<crate::afxdp::Port>,
        pkts: &[PacketBuf<'_>],
        verdicts: &[Verdict],
    ) {
        for (pkt, v) in pkts.iter().zip(verdicts.iter()) {
            if v.transmit() {
                Self::send_with(tun, io, afxdp, pkt.data(), pkt.offload());
            }
        }
    }

    /// Runs until SIGINT/SIGTERM or another worker's end; an error ends this worker (and,
    /// through [`HaltOnExit`], all of them).
    pub fn run(&mut self, sh: &Shared<'_>) -> Result<()> {
        let bell = sh
            .bells
            .get(self.id)
            .context("no doorbell for this worker")?
            .clone();
        let mut batch = RecvBatch::new(DEFAULT_BATCH);
        let mut xbatch = RecvBatch::new(if self.afxdp.is_some() {
            DEFAULT_BATCH
        } else {
            1
        });
        let mut verdicts = vec![Verdict::Held; DEFAULT_BATCH];
        self.steer = sh.shards.cloned();
        let mut ops = FastPathBufs::default();
        let mut last_expire = Time(0);
        let mut busy = false;
        let mut reported_errors = 0u64;
        let mut last_report = Instant::now();
        let name = self.tun.name().to_string();

        while !sh.stopping() {
            // Sleep only when nothing was handed to us; the doorbell then wakes us.
            let timeout = if self.handoff.waiting() > 0 {
                FRAG_RETRY
            } else {
                self.idle_wait(sh.clock(), last_expire)
            };
            let [tun_ready, wake_ready, xsk_ready] = if sh.shards.is_none() {
                // One worker: nobody hands it packets, no doorbell.
                self.wait(&bell, timeout)
            } else if self.rings_waiting() {
                self.wait(&bell, Duration::ZERO)
            } else {
                bell.sleep();
                let t = if self.rings_waiting() {
                    Duration::ZERO
                } else {
                    timeout
                };
                let r = self.wait(&bell, t);
                bell.awake();
                r
            }
            .with_context(|| format!("waiting on {name}"))?;
            if wake_ready {
                bell.waker().drain();
            }
            // The resolver's newest egress table before anything this turn sends (one atomic
            // load): packets handed by other workers and read from the TUN device leave
            // through the sockets too, also on a worker whose own sockets see no traffic.
            if let Some(port) = self.afxdp.as_mut() {
                port.refresh();
            }
            let handed = if sh.shards.is_some() {
                self.translate_handed(sh, &mut verdicts)
            } else {
                0
            };
            let mut now = if handed > 0 { sh.clock() } else { Time(0) };
            let mut backlog = handed >= DEFAULT_BATCH;
            if tun_ready {
                let n = batch
                    .fill(&self.tun)
                    .with_context(|| format!("reading from {name}"))?;
                now = sh.clock();
                backlog |= batch.full();
                self.io.tun_rx_packets += n as u64;
                self.io.tun_offload_refused = batch.bad_headers();
                if sh.standby() {
                    standby_drop(sh, n);
                    batch.clear();
                }
                self.carry(sh, now, batch.packets_mut(), &mut verdicts, Ingress::Tun);
            }
            if xsk_ready {
                let mut n = self.afxdp.as_mut().map_or(0, |port| port.read(&mut xbatch));
                if n > 0 && sh.standby() {
                    standby_drop(sh, n);
                    xbatch.clear();
                    n = 0;
                }
                if n > 0 {
                    now = sh.clock();
                    backlog |= n == xbatch.capacity();
                    self.carry(sh, now, xbatch.packets_mut(), &mut verdicts, Ingress::AfXdp);
                }
            }
            if tun_ready || handed > 0 || xsk_ready {
                self.send_ready();
                // A full read means more packets wait: keep the pass short (less than a batch).
                self.engine.expire_step(now, backlog);
                self.drain_state(sh, &mut ops, now);
                busy = true;
            }
            if self.handoff.waiting() > 0 {
                self.retry_waiting(sh);
            }
            let now = sh.clock();
            let mut answered = false;
            while let Some(msg) = self.control.take() {
                let r = self.answer(&msg.request, now, sh);
                let _ = msg.reply.send(r);
                answered = true;
            }
            if answered {
                // A request may have changed the table (`clear sessions`, a reload, a
                // peer's sessions): its events leave now, not with the next packet -- an
                // emptied table has no timer to wake the worker for them.
                self.drain_state(sh, &mut ops, now);
            }
            let due = self
                .engine
                .poll_timeout(last_expire)
                .is_some_and(|t| t <= now);
            if due {
                // Under traffic the per-batch passes sweep; a long pass only when idle.
                if !busy {
                    self.idle_expiry(now, &bell)?;
                    self.drain_state(sh, &mut ops, now);
                }
                busy = false;
                last_expire = now;
                // Packets the engine originates on its timers (ISATAP Router Solicitations).
                self.send_ready();
            }
            if due || tun_ready || xsk_ready {
                // An ISATAP host's address and default route follow what the router's
                // advertisements (packets) and the lifetimes (timers) made of its state.
                if let (Some(h), Some(st)) =
                    (self.isatap_host.as_mut(), self.engine.tunnel_status())
                {
                    h.apply(&st);
                }
            }
            // Everything this turn sent (batches, released fragments, timers) goes out now:
            // one kick per socket that has frames queued.
            if let Some(port) = self.afxdp.as_mut() {
                port.flush();
            }
            if self.io.tun_write_errors != reported_errors
                && last_report.elapsed() >= Duration::from_secs(10)
            {
                warn!(
                    worker = self.id,
                    total = self.io.tun_write_errors,
                    new = self.io.tun_write_errors - reported_errors,
                    "writes to the TUN device failed (packets lost)"
                );
                reported_errors = self.io.tun_write_errors;
                last_report = Instant::now();
            }
        }
        self.log_stop(sh);
        Ok(())
    }

    /// The daemon stops: with `[logging]` on, every session ends in the NAT log with reason
    /// `stopped` (its table dies with the process), so the log leaves no session open that a
    /// later `xlat lookup` would name after the restart. Not with `[sync]`: the peer carries
    /// the sessions on. Chunks of [`STOP_CHUNK`] sessions, each chunk's events handed to the
    /// log thread, waiting for room until [`STOP_LOG_TIME`] has passed (then counted lost).
    fn log_stop(&mut self, sh: &Shared<'_>) {
        let (Some(log), None) = (sh.log, sh.sync) else {
            return;
        };
        let now = sh.clock();
        let deadline = Instant::now() + STOP_LOG_TIME;
        let wanted = log.events();
        let mut events = Vec::new();
        loop {
            let ended = self
                .engine
                .end_sessions(now, EndReason::Stopped, STOP_CHUNK);
            events.clear();
            self.engine.drain_events(&mut events);
            let batch: Vec<_> = events
                .iter()
                .filter(|e| wanted.takes_event(e))
                .copied()
                .collect();
            let lost = log.send_until(batch, deadline);
            if lost > 0 {
                self.handoff.count(WorkerCounter::LogEventsDropped, lost);
            }
            if ended == 0 || Instant::now() >= deadline {
                break;
            }
        }
    }

    /// Idle tick: passes of [`EXPIRE_BUDGET_PER_BATCH`] while they find sessions to remove
    /// (at least [`EXPIRE_BUDGET`] units), stopping as soon as a packet or a wake waits.
    /// Starts the engine's state-event stream (`capacity` events between drains).
    pub fn set_events(&mut self, capacity: usize) {
        self.engine.set_events(capacity);
    }

    /// After a batch or an expiry pass: the engine's state events to the fast path and the
    /// event log ([`drain_state`]), when either is on.
    fn drain_state(&mut self, sh: &Shared<'_>, bufs: &mut FastPathBufs, now: Time) {
        if sh.fast.is_none() && sh.log.is_none() && sh.sync.is_none() {
            return;
        }
        let sync = sh.sync.filter(|s| s.is_active());
        let lost = drain_state(
            &mut self.engine,
            sh.fast,
            sh.log,
            sync,
            bufs,
            now,
            sh.mono_start,
        );
        if lost > 0 {
            self.handoff.count(WorkerCounter::LogEventsDropped, lost);
        }
    }

    fn idle_expiry(&mut self, now: Time, bell: &Doorbell) -> Result<()> {
        let mut spent = 0;
        for _ in 0..IDLE_PASSES_MAX {
            let removed = self.engine.expire(now, EXPIRE_BUDGET_PER_BATCH);
            spent += EXPIRE_BUDGET_PER_BATCH;
            if removed == 0 && spent >= EXPIRE_BUDGET {
                break;
            }
            let [tun, wake, xsk] = self
                .wait(bell, Duration::ZERO)
                .context("waiting on the TUN device")?;
            if tun || wake || xsk || self.rings_waiting() {
                break;
            }
        }
        Ok(())
    }

    /// How long a turn may wait for packets: until the engine's next timer, counted from
    /// the last expiry (`last`), rounded up to poll(2)'s milliseconds; [`IDLE_MAX`] at most
    /// ([`TICK`] without the stop descriptor, which alone wakes a long wait on a stop).
    fn idle_wait(&self, now: Time, last: Time) -> Duration {
        let most = if self.stop.is_some() { IDLE_MAX } else { TICK };
        match self.engine.poll_timeout(last) {
            None => most,
            Some(t) => {
                let ms = t.0.saturating_sub(now.0).div_ceil(1_000_000);
                Duration::from_millis(ms).min(most)
            }
        }
    }

    /// Waits on the TUN queue, the doorbell, the stop descriptor and the AF_XDP sockets:
    /// which are ready (the sockets as one; a stop shows as the doorbell).
    fn wait(&self, bell: &Doorbell, timeout: Duration) -> std::io::Result<[bool; 3]> {
        let port = self.afxdp.as_ref();
        let rx = port.is_some_and(|p| p.rx_ready());
        let timeout = if rx { Duration::ZERO } else { timeout };
        let (tun, waker) = (self.tun.as_fd(), bell.waker().as_fd());
        match (self.stop, port.filter(|_| !rx)) {
            (None, None) => {
                let [t, w] = wait_readable([tun, waker], timeout)?;
                Ok([t, w, rx])
            }
            (Some(stop), None) => {
                let [t, w, s] = wait_readable([tun, waker, stop], timeout)?;
                Ok([t, w || s, rx])
            }
            (stop, Some(port)) => {
                let mut fds = vec![tun, waker];
                fds.extend(stop);
                let first_socket = fds.len();
                fds.extend(port.fds());
                let r = xlat_io::sys::wait_readable_any(&fds, timeout)?;
                let wake = r & 2 != 0 || (stop.is_some() && r & 4 != 0);
                Ok([r & 1 != 0, wake, r >> first_socket != 0])
            }
        }
    }

    /// Writes what the engine released outside a batch's verdicts.
    fn send_ready(&mut self) {
        while let Some(p) = self.engine.pop_ready() {
            Self::send(&self.tun, &mut self.io, &mut self.afxdp, &p);
        }
    }

    fn rings_waiting(&self) -> bool {
        self.from.iter().any(|c| !c.is_empty())
    }

    /// Translates, in place in the rings, the packets other workers handed to this one (a
    /// batch from each ring at most); returns how many.
    fn translate_handed(&mut self, sh: &Shared<'_>, verdicts: &mut [Verdict]) -> usize {
        let mut total = 0;
        let mut now = None;
        for ring in self.from.iter_mut() {
            if ring.is_empty() {
                continue;
            }
            let now = *now.get_or_insert_with(|| sh.clock());
            let mut b = ring.batch(DEFAULT_BATCH);
            let mut pkts = b.packets_mut();
            translate(
                &mut self.engine,
                &mut self.trace,
                now,
                &mut pkts,
                verdicts,
                Ingress::Handoff,
            );
            Self::send_transmitted(&self.tun, &mut self.io, &mut self.afxdp, &pkts, verdicts);
            self.handoff
                .count(WorkerCounter::HandoffsIn, pkts.len() as u64);
            total += pkts.len();
        }
        total
    }

    /// Translates the waiting fragments this worker turned out to own, hands on the others
    /// ([`Handoff::retry`]).
    fn retry_waiting(&mut self, sh: &Shared<'_>) {
        let now = sh.clock();
        for mut pkt in self.handoff.retry(sh.owners, now, sh.frag_timeout) {
            // Rare (a fragment that arrived before its first one): the allocating entry point.
            if self.engine.process_vec(now, &mut pkt).transmit() {
                Self::send(&self.tun, &mut self.io, &mut self.afxdp, &pkt);
            }
        }
        self.send_ready();
        self.handoff.ring_owners(sh.bells);
    }

    /// This worker's row of `{"cmd":"stats"}`.
    fn stats_row(&self) -> WorkerStats {
        WorkerStats {
            worker: self.id as u64,
            tun_rx_packets: self.io.tun_rx_packets,
            packets_in: self.engine.counters().count(xlat_engine::Event::PacketsIn),
            sessions: 0,
            counters: {
                let mut c = self.handoff.named();
                if let Some(port) = self.afxdp.as_ref() {
                    for (n, &k) in c.iter_mut().zip(WorkerCounter::ALL) {
                        n.value = n.value.saturating_add(port.get(k));
                    }
                }
                c
            },
        }
    }

    /// This worker's answer to a control request (the control thread merges the workers'
    /// answers: `crate::control::merge`). Worker 0 also reports DNS64 and the fast path.
    fn answer(&mut self, req: &Request, now: Time, sh: &Shared<'_>) -> Response {
        let uptime_secs = sh.start.elapsed().as_secs();
        match req {
            // A page of the table (`crate::listing` gathers them; it asks worker 0 alone
            // for the static entries every engine holds).
            Request::SessionsPage { filter, from } => {
                let (rows, next) =
                    self.engine
                        .sessions_page(now, filter, *from, crate::listing::PAGE_ROWS);
                Response::SessionsPage { rows, next }
            }
            Request::Sessions { .. } => {
                Response::Error("session listings are the control thread's".to_string())
            }
            // The sessions' fast-path recipes are withdrawn by the next fast-path sync.
            Request::Clear { filter } => Response::Cleared(self.engine.clear_sessions(now, filter)),
            // Between batches: every worker applies it before its next batch.
            Request::Reconfigure(r) => match r.engines.get(self.id) {
                Some(c) => match self.engine.reconfigure(now, c) {
                    Ok(ch) => {
                        if self.steer.is_some() {
                            self.steer.clone_from(&r.shards);
                        }
                        Response::Reloaded(Reloaded {
                            keys: ch.keys,
                            sessions_ended: ch.sessions_ended,
                            warnings: Vec::new(),
                        })
                    }
                    Err(e) => Response::Refused(e.to_string()),
                },
                None => Response::Error(format!("no configuration for packet worker {}", self.id)),
            },
            // Handled by the control thread.
            Request::Reload {} => Response::Error("reload is the control thread's".to_string()),
            Request::Stats {} => {
                let engine = self.engine.stats();
                let mut row = self.stats_row();
                row.sessions = engine.sessions;
                let first = self.id == 0;
                Response::Stats(Box::new(DaemonStats {
                    engine,
                    io: IoCounters {
                        uptime_secs,
                        ..self.io.clone()
                    },
                    dns64: sh.dns64.filter(|_| first).map(|s| s.snapshot()),
                    fast_path: sh
                        .fast
                        .filter(|_| first)
                        .map(|f| fast_path_stats(f, sh.hops)),
                    log: sh.log.filter(|_| first).map(|l| l.counters()),
                    sync: sh.sync.filter(|_| first).map(|s| s.status()),
                    workers: vec![row],
                }))
            }
            Request::Ping {} => Response::Pong(Pong {
                version: env!("CARGO_PKG_VERSION").to_string(),
                uptime_secs,
            }),
            Request::SyncRole { role } => self.sync_role(role, now, sh),
            Request::SyncStatus {} => match sh.sync {
                Some(s) => Response::Sync(Box::new(s.status())),
                None => Response::Error(NO_SYNC.to_string()),
            },
            Request::SyncApply(evs) => {
                let Some(sy) = sh.sync else {
                    return Response::Error(NO_SYNC.to_string());
                };
                let (mut installed, mut removed, mut refused) = (0, 0, 0);
                for ev in evs.iter() {
                    match (self.engine.apply_synced(now, ev), ev.kind) {
                        (Ok(true), xlat_engine::events::EventKind::SessionCreated) => {
                            installed += 1
                        }
                        (Ok(true), _) => removed += 1,
                        (Ok(false), _) => {}
                        (Err(_), _) => refused += 1,
                    }
                }
                sy.count(&sy.counters.installed, installed);
                sy.count(&sy.counters.removed, removed);
                sy.count(&sy.counters.refused, refused);
                Response::Cleared(installed)
            }
            Request::SyncClear => Response::Cleared(self.engine.clear_synced(now)),
            Request::Trace { .. } => Response::Error("trace is the control thread's".to_string()),
            Request::TraceArm {
                filter,
                count,
                timeout,
            } => {
                let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
                let until = Time(now.0.saturating_add(ns));
                self.trace = Some(Box::new(Tracing::new(filter.clone(), *count, until)));
                // The fast path gives the traced host's flows back to the engine for the
                // trace (by inside host and protocol; a trace by outside address alone
                // holds every flow of the protocol back).
                let hold = xlat_engine::SessionFilter {
                    inside: filter.inside,
                    proto: filter.proto,
                    ..Default::default()
                };
                // The tunnels in XDP (6to4, ISATAP) have no flows to single out: all of them come
                // back for the trace.
                hold_tunnels(sh, true);
                Response::Cleared(self.engine.hold_offload(now, Some(hold)))
            }
            Request::TraceTake { stop } => {
                if *stop {
                    // The held flows go back to the fast path.
                    self.engine.hold_offload(now, None);
                    hold_tunnels(sh, false);
                }
                let Some(t) = self.trace.as_mut() else {
                    return Response::Trace(Vec::new());
                };
                let id = self.id;
                let first = t.seq;
                let out = t
                    .records
                    .drain(..)
                    .zip(first..)
                    .map(|((ingress, r), seq)| TraceEntry::new(id, seq, ingress, &r))
                    .collect::<Vec<_>>();
                t.seq = first + out.len() as u64;
                if *stop {
                    self.trace = None;
                }
                Response::Trace(out)
            }
            Request::SyncSnapshot => {
                if let Some(sy) = sh.sync {
                    sy.send_snapshot(snapshot_events(&self.engine, now));
                }
                Response::Cleared(0)
            }
        }
    }

    /// `xlat sync role active|standby`: active thaws the synced copies (their timers start
    /// now, the fast path gets those it may carry); standby drops every session (the new
    /// active's table replaces them through a full resync).
    fn sync_role(&mut self, role: &str, now: Time, sh: &Shared<'_>) -> Response {
        let Some(sy) = sh.sync else {
            return Response::Error(NO_SYNC.to_string());
        };
        let active = match role {
            "active" => true,
            "standby" => false,
            other => {
                return Response::Error(format!(
                    "unknown role {other:?}; expected \"active\" or \"standby\""
                ))
            }
        };
        sy.set_active(active);
        if active {
            self.engine.thaw_synced(now);
        } else {
            self.engine
                .clear_sessions(now, &xlat_engine::SessionFilter::default());
        }
        Response::Sync(Box::new(sy.status()))
    }

    /// Totals for the log line at exit: packets in and out of the engine, failed writes.
    pub fn totals(&self) -> (u64, u64, u64) {
        let st = self.engine.stats();
        (
            st.get("packets_in"),
            st.get("packets_out"),
            self.io.tun_write_errors,
        )
    }
}

const NO_SYNC: &str = "session sync is off: add a [sync] section (docs/FAILOVER.md)";

/// Packets a standby read and dropped (`sync_standby_dropped`).
fn standby_drop(sh: &Shared<'_>, n: usize) {
    if let Some(s) = sh.sync {
        s.count(&s.counters.standby_dropped, n as u64);
    }
}

/// This worker's sessions as session-created events (a full resync's snapshot).
fn snapshot_events(engine: &Engine, now: Time) -> Vec<xlat_engine::events::StateEvent> {
    use xlat_engine::events::{EventKind, StateEvent};
    engine
        .sessions(now)
        .into_iter()
        .filter(|s| s.state != xlat_engine::SessionState::Static)
        .filter_map(|s| {
            let (outside, remote) = (s.outside, s.remote?);
            Some(StateEvent {
                at: now,
                kind: EventKind::SessionCreated,
                translator: s.translator,
                session: None,
                proto: s.proto?,
                inside: s.inside,
                inside_port: s.inside_port?,
                outside,
                outside_port: s.outside_port?,
                remote,
                remote_port: s.remote_port.unwrap_or(0),
                with_mapping: false,
            })
        })
        .collect()
}

fn fast_path_stats(
    f: &Mutex<xlat_xdp::FastPath>,
    hops: Option<&xlat_xdp::nexthop::Hops>,
) -> FastPathStats {
    let f = match f.lock() {
        Ok(f) => f,
        Err(poisoned) => poisoned.into_inner(),
    };
    FastPathStats {
        kind: "xdp".into(),
        interfaces: f.interfaces().to_vec(),
        recipes: f.recipes(),
        install_errors: f.install_errors(),
        egress_destinations: hops.map(|h| h.cached()),
        counters: f
            .counters()
            .into_iter()
            .chain(hops.map(|h| h.counters()).unwrap_or_default())
            .map(|c| NamedCount {
                name: c.name.into(),
                value: c.value,
                explain: c.explain.into(),
            })
            .collect(),
    }
}

/// What [`drain_state`] reuses from one round to the next.
#[derive(Default)]
pub struct FastPathBufs {
    events: Vec<xlat_engine::events::StateEvent>,
    ops: Vec<xlat_engine::offload::OffloadOp>,
}

/// `xlat trace` and the tunnels in XDP: [`xlat_xdp::FastPath::hold_tunnels`] (every worker asks; the
/// same write each time).
fn hold_tunnels(sh: &Shared<'_>, held: bool) {
    if let Some(f) = sh.fast {
        let mut f = f.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = f.hold_tunnels(held) {
            warn!("xlat trace: {e:#}");
        }
    }
}

/// Takes the engine's state events to their consumers: the fast-path instructions (and
/// SIIT's, [`Engine::drain_offload`]) to the XDP fast path, the events `[logging]` wants to the event log (a bounded queue to its thread;
/// returns how many it had no room for). Installs and removals are staged and written with
/// one batched bpf(2) call per map (issue 25: not one per session), queries answered with the
/// recipes' last-seen stamps (converted to the engine's clock), which may expire sessions and
/// so produce removals (and deletion events): a few rounds, bounded. The fast path is shared
/// by the workers (their sessions' recipes are disjoint); its lock is taken only when there
/// are instructions, once per round.
#[allow(clippy::too_many_arguments)]
pub fn drain_state(
    engine: &mut Engine,
    fast: Option<&Mutex<xlat_xdp::FastPath>>,
    log: Option<&crate::eventlog::EventLog>,
    sync: Option<&crate::sync::SyncShared>,
    bufs: &mut FastPathBufs,
    now: Time,
    mono_start: u64,
) -> u64 {
    use xlat_engine::offload::OffloadKind;
    let FastPathBufs { events, ops } = bufs;
    let mut log_dropped = 0;
    for _ in 0..4 {
        events.clear();
        engine.drain_events(events);
        ops.clear();
        if fast.is_some() {
            // SIIT's address-pair recipes: not state events (SIIT has no sessions to log).
            engine.drain_offload(ops);
        }
        if events.is_empty() && ops.is_empty() {
            break;
        }
        if let Some(sy) = sync {
            let batch: Vec<_> = events
                .iter()
                .filter(|e| xlat_engine::synced::synced_kind(e.kind))
                .copied()
                .collect();
            if !batch.is_empty() {
                sy.send_events(batch);
            }
        }
        if let Some(l) = log {
            let wanted = l.events();
            let batch: Vec<_> = events
                .iter()
                .filter(|e| wanted.takes_event(e))
                .copied()
                .collect();
            if !batch.is_empty() {
                log_dropped += l.send(batch);
            }
        }
        let Some(fast) = fast else {
            break;
        };
        ops.extend(events.iter().filter_map(|ev| engine.offload_op(ev)));
        if ops.is_empty() {
            break;
        }
        let mut fast = match fast.lock() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        let stamp = xlat_xdp::monotonic_ns();
        for op in ops.iter() {
            if op.kind == OffloadKind::Query {
                // A query reads what was staged before it.
                fast.flush();
                let t = |ns: u64| Time::from_nanos(ns.saturating_sub(mono_start));
                let (o, i) = fast.last_seen(op);
                engine.offload_seen(now, op.token, o.map(t), i.map(t));
            } else {
                fast.stage(op, stamp);
            }
        }
        fast.flush();
    }
    log_dropped
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use xlat_engine::HEADROOM;

    fn id(ident: u16) -> FragId {
        FragId::V4 {
            src: 0xcb00_7105,
            dst: 0xc613_0064,
            proto: 17,
            ident,
        }
    }

    #[test]
    fn frag_owners_remember_within_the_timeout() {
        let t = FragOwners::new(7, 2);
        assert_eq!(t.lookup(&id(1), Time::from_secs(10)), None);
        t.record(&id(1), 3, Time::from_secs(10));
        assert_eq!(t.lookup(&id(1), Time::from_secs(10)), Some(3));
        assert_eq!(t.lookup(&id(1), Time::from_secs(12)), Some(3));
        assert_eq!(
            t.lookup(&id(1), Time::from_secs(13)),
            None,
            "past the timeout"
        );
        assert_eq!(
            t.lookup(&id(2), Time::from_secs(10)),
            None,
            "another datagram"
        );
        // Many datagrams at once: each finds its owner unless a newer one took its slot.
        let n = 1000u16;
        for i in 0..n {
            t.record(&id(i), usize::from(i % 64), Time::from_secs(20));
        }
        let found = (0..n)
            .filter(|&i| t.lookup(&id(i), Time::from_secs(20)) == Some(usize::from(i % 64)))
            .count();
        assert!(found > 850, "{found} of {n}");
        let wrong = (0..n)
            .filter(|&i| {
                t.lookup(&id(i), Time::from_secs(20))
                    .is_some_and(|k| k != usize::from(i % 64))
            })
            .count();
        assert_eq!(wrong, 0);
        // Another seed, another layout (keys are attacker-chosen).
        let u = FragOwners::new(8, 2);
        assert_ne!(t.hash(&id(1)), u.hash(&id(1)));
    }

    /// An IPv4 packet (no checksums: placement reads only addresses, fragment fields and
    /// ports): protocol 17, flags/offset `ff`, identification `ident`, `l4` after the header.
    fn v4(src: [u8; 4], dst: [u8; 4], ff: u16, ident: u16, l4: &[u8]) -> Vec<u8> {
        let len = (20 + l4.len()) as u16;
        let mut p = vec![0x45, 0];
        p.extend_from_slice(&len.to_be_bytes());
        p.extend_from_slice(&ident.to_be_bytes());
        p.extend_from_slice(&ff.to_be_bytes());
        p.extend_from_slice(&[64, 17, 0, 0]);
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(l4);
        p
    }

    fn udp(sport: u16, dport: u16) -> Vec<u8> {
        let mut u = sport.to_be_bytes().to_vec();
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&[0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        u
    }

    const POOL: [u8; 4] = [198, 19, 0, 100];
    const REMOTE: [u8; 4] = [203, 0, 113, 5];

    fn shards() -> Shards {
        let cfg = xlat_engine::EngineConfig {
            nat44: Some(xlat_engine::Nat44Config {
                inside: vec!["198.18.0.0/24".parse().unwrap()],
                pool: vec!["198.19.0.100/32".parse().unwrap()],
                ..xlat_engine::Nat44Config::default()
            }),
            ..xlat_engine::EngineConfig::default()
        };
        match Shards::new(&cfg, 2) {
            Ok(s) => s,
            Err(e) => panic!("{e:?}"),
        }
    }

    /// Two workers' handoffs wired with rings of `slots`: (handoff 0, handoff 1, ring 0->1's
    /// consumer, ring 1->0's consumer).
    fn pair(slots: usize) -> (Handoff, Handoff, Consumer, Consumer) {
        let (p01, c01) = xlat_io::ring::ring(slots, 1500);
        let (p10, c10) = xlat_io::ring::ring(slots, 1500);
        (
            Handoff::new(0, vec![None, Some(p01)]),
            Handoff::new(1, vec![Some(p10), None]),
            c01,
            c10,
        )
    }

    /// Places `pkts` as worker `h` reads them; returns the ones it keeps.
    fn place(
        h: &mut Handoff,
        s: &Shards,
        o: &FragOwners,
        now: Time,
        pkts: &[Vec<u8>],
    ) -> Vec<Vec<u8>> {
        let mut bufs: Vec<Vec<u8>> = pkts
            .iter()
            .map(|p| [vec![0u8; HEADROOM], p.clone()].concat())
            .collect();
        let mut views: Vec<PacketBuf> = bufs
            .iter_mut()
            .zip(pkts)
            .filter_map(|(b, p)| PacketBuf::new(b, HEADROOM, p.len()))
            .collect();
        h.place(s, o, now, &mut views);
        views.iter().map(|v| v.data().to_vec()).collect()
    }

    fn drain(c: &mut Consumer) -> Vec<Vec<u8>> {
        let mut b = c.batch(64);
        b.packets_mut().iter().map(|p| p.data().to_vec()).collect()
    }

    /// A port of worker `k`'s NAT44 slice.
    fn port_of(s: &Shards, k: usize) -> u16 {
        s.nat44_slice(k).map_or(0, |r| r.0 + 7)
    }

    /// Each packet stays with the worker that owns it or is handed over, in order; inbound
    /// and outbound alike.
    #[test]
    fn place_keeps_own_packets_and_hands_the_others_over() {
        let s = shards();
        let o = FragOwners::new(1, 2);
        let (mut h0, mut h1, mut c01, mut c10) = pair(64);
        let now = Time::from_secs(1);
        let to0 = v4(REMOTE, POOL, 0, 1, &udp(53, port_of(&s, 0)));
        let to1 = v4(REMOTE, POOL, 0, 2, &udp(53, port_of(&s, 1)));
        // Outbound: from two inside hosts that hash to different workers.
        let (mut out0, mut out1) = (None, None);
        for i in 1..=254u8 {
            let p = v4([198, 18, 0, i], REMOTE, 0, 3, &udp(4000, 53));
            match s.of_outbound(&p) {
                Some(0) => out0 = out0.or(Some(p)),
                Some(_) => out1 = out1.or(Some(p)),
                None => {}
            }
        }
        let (out0, out1) = (out0.unwrap_or_default(), out1.unwrap_or_default());
        let stray = v4(REMOTE, [192, 0, 2, 1], 0, 4, &udp(1, 2));
        let read = [
            to0.clone(),
            to1.clone(),
            out1.clone(),
            out0.clone(),
            stray.clone(),
        ];
        let kept = place(&mut h0, &s, &o, now, &read);
        assert_eq!(kept, [to0.clone(), out0.clone(), stray.clone()]);
        assert_eq!(drain(&mut c01), [to1.clone(), out1.clone()]);
        assert_eq!(h0.get(WorkerCounter::HandoffsOut), 2);
        let kept = place(&mut h1, &s, &o, now, &read);
        assert_eq!(kept, [to1, out1, stray]);
        assert_eq!(drain(&mut c10), [to0, out0]);
        assert_eq!(h1.rung, 1, "worker 0 is to be woken");
        h1.ring_owners(&[]);
        assert_eq!(h1.rung, 0);
    }

    /// A later fragment read before its first fragment waits; once the first fragment (read
    /// by the other worker) names the owner, it is handed there; a later fragment read after
    /// its first goes straight to the owner.
    #[test]
    fn later_fragments_follow_their_first_fragment() {
        let s = shards();
        let o = FragOwners::new(2, 2);
        let (mut h0, mut h1, mut c01, _c10) = pair(64);
        let t = Time::from_secs(5);
        let ident = 777;
        let first = v4(REMOTE, POOL, 0x2000, ident, &udp(53, port_of(&s, 1)));
        let middle = v4(REMOTE, POOL, 0x2000 | 2, ident, &[9; 16]);
        let last = v4(REMOTE, POOL, 4, ident, &[9; 8]);
        // Worker 0 reads the middle fragment first: nobody knows the owner yet.
        assert!(place(&mut h0, &s, &o, t, std::slice::from_ref(&middle)).is_empty());
        assert_eq!(h0.waiting(), 1);
        assert_eq!(h0.get(WorkerCounter::FragmentsWaited), 1);
        assert!(h0.retry(&o, t, Duration::from_secs(2)).is_empty());
        assert_eq!(h0.waiting(), 1);
        // Worker 1 reads the first fragment: its port is worker 1's; it keeps it.
        assert_eq!(
            place(&mut h1, &s, &o, t, std::slice::from_ref(&first)),
            std::slice::from_ref(&first)
        );
        // Worker 0's retry now hands the waiting fragment to worker 1.
        assert!(h0.retry(&o, t, Duration::from_secs(2)).is_empty());
        assert_eq!(h0.waiting(), 0);
        assert_eq!(drain(&mut c01), [middle]);
        // The last fragment, read by worker 0 after the first: handed over at once.
        assert!(place(&mut h0, &s, &o, t, std::slice::from_ref(&last)).is_empty());
        assert_eq!(drain(&mut c01), std::slice::from_ref(&last));
        assert_eq!(h0.get(WorkerCounter::HandoffsOut), 2);
        // Worker 1 reading it keeps it.
        assert_eq!(
            place(&mut h1, &s, &o, t, std::slice::from_ref(&last)),
            [last]
        );
        // A waiting fragment the owner itself holds comes back to be translated there.
        let other = v4(REMOTE, POOL, 3, 778, &[1; 8]);
        assert!(place(&mut h1, &s, &o, t, std::slice::from_ref(&other)).is_empty());
        let first2 = v4(REMOTE, POOL, 0x2000, 778, &udp(53, port_of(&s, 1)));
        place(&mut h0, &s, &o, t, &[first2]);
        drain(&mut c01);
        assert_eq!(h1.retry(&o, t, Duration::from_secs(2)), [other]);
    }

    /// Waiting is bounded in time and in count, and a full ring drops: each counted.
    #[test]
    fn waits_expire_and_full_queues_drop_with_counters() {
        let s = shards();
        let o = FragOwners::new(3, 2);
        let (mut h0, _h1, _c01, _c10) = pair(2);
        let t = Time::from_secs(10);
        let later = |id: u16| v4(REMOTE, POOL, 5, id, &[0; 8]);
        let burst: Vec<Vec<u8>> = (0..MAX_WAITING as u16 + 3).map(later).collect();
        assert!(place(&mut h0, &s, &o, t, &burst).is_empty());
        assert_eq!(h0.waiting(), MAX_WAITING);
        assert_eq!(h0.get(WorkerCounter::FragmentWaitFull), 3);
        // Within the timeout they stay; after it they go, counted.
        assert!(h0
            .retry(&o, Time::from_secs(11), Duration::from_secs(2))
            .is_empty());
        assert_eq!(h0.waiting(), MAX_WAITING);
        assert!(h0
            .retry(&o, Time::from_secs(13), Duration::from_secs(2))
            .is_empty());
        assert_eq!(h0.waiting(), 0);
        assert_eq!(
            h0.get(WorkerCounter::FragmentWaitExpired),
            MAX_WAITING as u64
        );
        // A ring of two slots takes two packets for worker 1, then drops.
        let to1: Vec<Vec<u8>> = (0..5)
            .map(|i| v4(REMOTE, POOL, 0, i, &udp(53, port_of(&s, 1))))
            .collect();
        assert!(place(&mut h0, &s, &o, t, &to1).is_empty());
        assert_eq!(h0.get(WorkerCounter::HandoffsOut), 2);
        assert_eq!(h0.get(WorkerCounter::HandoffRingFull), 3);
    }

    #[test]
    fn ring_slots_shrink_with_workers() {
        assert_eq!(ring_slots(2), 1024);
        assert_eq!(ring_slots(3), 1024);
        assert_eq!(ring_slots(5), 512);
        assert_eq!(ring_slots(64), 64);
        assert!(ring_slots(1) >= 64);
    }

    #[test]
    fn counters_have_names_and_explanations() {
        for c in WorkerCounter::ALL {
            assert!(!c.name().is_empty() && c.explain().len() > 20);
        }
        assert_eq!(WorkerCounter::HandoffsOut.name(), "handoffs_out");
    }
}
