//! The xlat translation engine: pure, sans-I/O.
//!
//! The engine takes packets, the current time and a seed from its caller and returns verdicts;
//! it never reads a clock, opens a file or makes a syscall. Drivers (TUN, pcap) and the daemon
//! do the I/O, so the same code runs the gateway, `xlat translate` on captures, golden-vector
//! tests without root, and benchmarks.
//!
//! Implemented: NAT44 -- static 1:1, dynamic pool (Basic NAT) and NAPT -- after RFC 3022,
//! RFC 4787 (UDP), RFC 5382 (TCP), RFC 5508 (ICMP), with the TCP state machine of RFC 6146
//! 3.5.2.2 and incremental checksums (RFC 1624). See [`nat44`].
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

pub mod config;
pub mod counters;
mod frag;
mod index;
pub mod napt;
pub mod nat44;
mod ports;
mod rng;
pub mod snapshot;
pub mod tcp;

pub use config::{
    ConfigError, Filtering, Limits, Nat44Config, Nat44Mode, Prefix4, StaticEntry, Timeouts,
};
pub use counters::{Counters, DropReason, Event};
pub use snapshot::{SessionInfo, Stats};

/// Monotonic time in nanoseconds since an epoch of the caller's choosing. The engine never
/// reads a clock: the caller passes `now` with every call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    pub const fn from_secs(s: u64) -> Time {
        Time(s.saturating_mul(1_000_000_000))
    }
    pub const fn from_millis(ms: u64) -> Time {
        Time(ms.saturating_mul(1_000_000))
    }
    pub const fn from_nanos(ns: u64) -> Time {
        Time(ns)
    }
    /// `self + secs` seconds, saturating.
    pub const fn plus_secs(self, secs: u64) -> Time {
        Time(self.0.saturating_add(secs.saturating_mul(1_000_000_000)))
    }
    /// Whole seconds from `self` until `later` (0 if `later` is not later).
    pub const fn secs_until(self, later: Time) -> u64 {
        later.0.saturating_sub(self.0) / 1_000_000_000
    }
}

pub use xlat_wire::{PacketBuf, HEADROOM};

/// What to do with a packet after [`Engine::process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Translated in place: transmit [`PacketBuf::data`] (its start and length may have moved).
    Forward,
    /// Kept by the engine (an out-of-order fragment waiting for its first fragment); it may
    /// come out later through [`Engine::pop_ready`].
    Held,
    /// Not translated; counted under this reason.
    Drop(DropReason),
}

/// Everything the engine needs to start.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub nat44: Nat44Config,
    /// Seed for port randomisation (RFC 6056). Same seed + same trace = same output.
    pub seed: u64,
}

/// One translator instance (one per worker thread).
pub struct Engine {
    nat44: nat44::Nat44,
    counters: Counters,
}

impl Engine {
    /// Builds an engine; fails with the config key at fault.
    pub fn new(cfg: EngineConfig) -> Result<Engine, ConfigError> {
        cfg.nat44.validate()?;
        Ok(Engine {
            nat44: nat44::Nat44::new(cfg.nat44, cfg.seed),
            counters: Counters::default(),
        })
    }

    /// Translates one packet in place. `pkt` holds exactly the bytes received, with headroom
    /// in front of them where the driver has it; on `Forward`, transmit `pkt.data()`.
    pub fn process(&mut self, now: Time, pkt: &mut PacketBuf) -> Verdict {
        self.counters.event(Event::PacketsIn);
        let v = self.nat44.process(now, pkt, &mut self.counters);
        match v {
            Verdict::Forward => self.counters.event(Event::PacketsOut),
            Verdict::Drop(r) => self.counters.drop(r),
            Verdict::Held => {}
        }
        v
    }

    /// Translates a batch: first starts fetching the index slots and then the sessions every
    /// packet will need, so the memory latency of a large table overlaps across the batch,
    /// then processes each packet as [`Engine::process`] does. `verdicts[i]` is packet i's.
    pub fn process_batch(&mut self, now: Time, pkts: &mut [PacketBuf], verdicts: &mut [Verdict]) {
        const CHUNK: usize = 32;
        let mut start = 0;
        while start < pkts.len() {
            let end = pkts.len().min(start + CHUNK);
            let mut hashes = [None; CHUNK];
            for (h, p) in hashes.iter_mut().zip(pkts.get(start..end).unwrap_or(&[])) {
                *h = self.nat44.prefetch_index(p.data());
            }
            for h in hashes.iter().flatten() {
                self.nat44.prefetch_session(*h);
            }
            let chunk = pkts.get_mut(start..end).unwrap_or(&mut []);
            let vs = verdicts.get_mut(start..end).unwrap_or(&mut []);
            for (p, v) in chunk.iter_mut().zip(vs.iter_mut()) {
                *v = self.process(now, p);
            }
            start = end;
        }
    }

    /// [`Engine::process`] on a plain byte vector: copies it behind [`HEADROOM`] bytes, and
    /// on `Forward` replaces it with the packet to transmit. For tests and offline tools
    /// (it allocates), not the fast path.
    pub fn process_vec(&mut self, now: Time, pkt: &mut Vec<u8>) -> Verdict {
        let mut room = vec![0u8; HEADROOM + pkt.len() + HEADROOM];
        if let Some(dst) = room.get_mut(HEADROOM..HEADROOM + pkt.len()) {
            dst.copy_from_slice(pkt);
        }
        let Some(mut b) = PacketBuf::new(&mut room, HEADROOM, pkt.len()) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        let v = self.process(now, &mut b);
        if v == Verdict::Forward {
            *pkt = b.data().to_vec();
        }
        v
    }

    /// Packets released by the engine outside of [`Engine::process`]'s return value: held
    /// out-of-order fragments whose first fragment has arrived. Drivers drain this after
    /// every batch.
    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        let p = self.nat44.pop_ready();
        if p.is_some() {
            self.counters.event(Event::PacketsOut);
        }
        p
    }

    /// Removes idle sessions and stale fragment state, looking at no more than `budget`
    /// session slots (so a call never stalls the fast path for long). Returns sessions removed.
    pub fn expire(&mut self, now: Time, budget: usize) -> usize {
        self.nat44.expire(now, budget, &mut self.counters)
    }

    /// Counters of this engine.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Table sizes, pool use and counters.
    pub fn stats(&self) -> Stats {
        self.nat44.stats(&self.counters)
    }

    /// The live translation table (static entries first, then dynamic sessions).
    pub fn sessions(&self, now: Time) -> Vec<SessionInfo> {
        self.nat44.sessions(now)
    }
}
