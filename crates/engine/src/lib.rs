//! The xlat translation engine: pure, sans-I/O.
//!
//! The engine takes packets, the current time and a seed from its caller and returns verdicts;
//! it never reads a clock, opens a file or does I/O (its only system calls allocate memory:
//! large tables are mapped anonymously, see `mem.rs`). Drivers (TUN, pcap) and the daemon
//! do the I/O, so the same code runs the gateway, `xlat translate` on captures, golden-vector
//! tests without root, and benchmarks.
//!
//! Implemented:
//! - NAT44 -- static 1:1, dynamic pool (Basic NAT) and NAPT -- after RFC 3022, RFC 4787
//!   (UDP), RFC 5382 (TCP), RFC 5508 (ICMP), with the TCP state machine of RFC 6146 3.5.2.2
//!   and incremental checksums (RFC 1624). See `nat44/`, and `napt/` for the state.
//! - SIIT, stateless IPv4/IPv6 translation (RFC 7915) with RFC 6052 and RFC 7757 (EAM)
//!   addressing. See `siit/`.
//! - Stateful NAT64 (RFC 6146), on the same NAPT state as NAT44 and the same header
//!   translation as SIIT. See `nat64/`.
//!
//! - 6in4 tunnel endpoints: 6to4 (RFC 3056, RFC 3964) and ISATAP (RFC 5214) over RFC 4213.
//!   See [`tunnel`].
//!
//! [`Engine::process`] sends each packet to one translator: IPv4 protocol 41 or ICMP to a
//! tunnel endpoint address to the tunnel; IPv6 to NAT64 when the destination is in its
//! pref64, else to SIIT when it is in SIIT's pref64 or EAM table, else to the tunnel; IPv4
//! to NAT64 when the destination is in pool4, else to SIIT when it is an EAM or siit.pool4
//! address, else to NAT44.
#![warn(clippy::cast_possible_truncation)]
// The unit tests' packet builders cast lengths and counters they chose: a wrong cast there
// fails a test, it does not mistranslate a packet.
#![cfg_attr(test, allow(clippy::cast_possible_truncation))]
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

pub mod alg;
pub mod config;
pub mod counters;
pub mod deterministic;
pub mod events;
pub mod flow;
mod frag;
mod hosts;
mod index;
mod ipv4_id;
mod kernel_offload;
#[cfg(test)]
mod lane_tests;
mod martian;
mod mem;
mod napt;
mod nat44;
mod nat64;
pub mod offload;
mod ports;
mod reconfigure;
mod records;
mod rewrite;
pub mod rfc6052;
mod rng;
pub mod shard;
mod siit;
pub mod snapshot;
pub mod synced;
mod tcp;
pub mod trace;
pub mod tunnel;

pub use config::{
    ConfigError, Eam, EamHairpin, Filtering, Limits, Nat44Config, Nat44Mode, Nat64Config,
    PortForward, Prefix4, Prefix6, SiitConfig, StaticEntry, Timeouts, UdpZeroChecksum, XlatParams,
    MAX_SESSIONS,
};
pub use counters::{Counters, DropReason, Event};
pub use mem::{mapped_bytes, set_prefault};
pub use reconfigure::{Change, ReloadError};
pub use rfc6052::{Pref64, Pref64Error};
pub use snapshot::{SessionCursor, SessionFilter, SessionInfo, SessionState, Stats};

/// Table slots one [`Engine::sessions_page`] looks at in each part, used or free: about a
/// millisecond of a worker's time.
pub const PAGE_VISITS: usize = 65_536;

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

pub use xlat_wire::{vnet, PacketBuf, HEADROOM};

/// While a translator holds sessions, how long [`Engine::poll_timeout`] lets pass between
/// expiry calls (100 ms): a call sweeps a bounded part of the table, so the sweep must come
/// round often for an idle timeout to end a session close to its time.
pub const SWEEP_INTERVAL: Time = Time::from_millis(100);

/// `now` + [`SWEEP_INTERVAL`].
pub(crate) fn sweep_after(now: Time) -> Time {
    Time(now.0.saturating_add(SWEEP_INTERVAL.0))
}

/// [`Engine::expire_step`]'s budget under load, with no new sessions: 128 units, a 128-slot
/// scan or two removals (`--bench fill` prints a pass against a batch).
pub const EXPIRE_STEP_BASE: usize = 128;
/// [`Engine::expire_step`]'s budget when no packet waits, with no new sessions: 1,024 units
/// (~2-3 us), so a gateway that never idles for a whole tick still sweeps its table briskly.
pub const EXPIRE_STEP_IDLE: usize = 1024;
/// The most packets [`Engine::set_offload_after`] may ask a UDP session to wait for.
pub use napt::MAX_OFFLOAD_AFTER;
/// [`Engine::expire_step`]'s largest budget: 64 removals more, a batch of new sessions' worth.
pub const EXPIRE_STEP_MAX: usize = EXPIRE_STEP_IDLE + 64 * napt::REMOVE_UNITS;

/// What to do with a packet after [`Engine::process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Translated in place: transmit [`PacketBuf::data`] (its start and length may have moved).
    Forward,
    /// Kept by the engine (an out-of-order fragment waiting for its first fragment); it may
    /// come out later through [`Engine::pop_ready`]. Also: consumed by the engine (a Router
    /// Advertisement an ISATAP host learned from).
    Held,
    /// Not translated; counted under this reason.
    Drop(DropReason),
    /// Not translated (counted under this reason); the buffer now holds the translator's
    /// own ICMP error about it (RFC 7915 4.4, 5.4), to send back out of the same interface
    /// like a `Forward` packet.
    Reply(DropReason),
}

impl Verdict {
    /// True when the buffer holds a packet to transmit (`Forward` or `Reply`).
    pub fn transmit(self) -> bool {
        matches!(self, Verdict::Forward | Verdict::Reply(_))
    }
}

/// Everything the engine needs to start. At least one translator must be configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineConfig {
    pub nat44: Option<Nat44Config>,
    pub nat64: Option<Nat64Config>,
    pub siit: Option<SiitConfig>,
    /// 6to4 / ISATAP tunnel endpoints ([`tunnel`]).
    pub tunnel: Option<tunnel::TunnelConfig>,
    /// Seed for port randomisation (RFC 6056). Same seed + same trace = same output.
    pub seed: u64,
}

impl EngineConfig {
    /// Checks each translator and that they do not claim the same addresses.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if self.nat44.is_none()
            && self.nat64.is_none()
            && self.siit.is_none()
            && self.tunnel.is_none()
        {
            return err(
                "nat44",
                "no translator configured; add a [nat44], [nat64], [siit] or [tunnel.*] section"
                    .into(),
            );
        }
        if let Some(t) = &self.tunnel {
            t.validate()?;
        }
        if let Some(n) = &self.nat44 {
            n.validate()?;
        }
        if let Some(n) = &self.nat64 {
            n.validate()?;
        }
        if let Some(s) = &self.siit {
            s.validate()?;
        }
        if let (Some(n), Some(s)) = (&self.nat64, &self.siit) {
            // Issue 3: one translator per pref64; IPv6 destinations pick the translator.
            let np = Prefix6 {
                addr: n.prefix.addr(),
                len: n.prefix.len(),
            };
            if let Some(sp) = s.prefix {
                let sp6 = Prefix6 {
                    addr: sp.addr(),
                    len: sp.len(),
                };
                if np.overlaps(&sp6) {
                    return err("siit.prefix", format!("{sp} overlaps nat64.prefix {}; each pref64 belongs to one translator (NAT64 or SIIT)", n.prefix));
                }
            }
            if let Some(e) = s.eam.iter().find(|e| np.overlaps(&e.ipv6)) {
                return err(
                    "siit.eam",
                    format!("{} overlaps nat64.prefix {}", e.ipv6, n.prefix),
                );
            }
            for p in &n.pool4 {
                if s.eam.iter().any(|e| e.ipv4.overlaps(p)) || s.pool4.iter().any(|q| q.overlaps(p))
                {
                    return err(
                        "nat64.pool4",
                        format!("{p} overlaps an IPv4 address of [siit] (eam or pool4)"),
                    );
                }
            }
        }
        if let (Some(n44), Some(n64)) = (&self.nat44, &self.nat64) {
            for p in &n64.pool4 {
                if let Some(q) = n44.inside.iter().find(|q| q.overlaps(p)) {
                    return err(
                        "nat64.pool4",
                        format!("{p} overlaps nat44.inside {q}: NAT44 would take NAT64's translated packets for inside traffic and translate them again; take pool4 from outside the inside prefixes"),
                    );
                }
            }
        }
        if let Some(t) = &self.tunnel {
            // A tunnel endpoint's protocol 41 must reach the tunnel, not a translator.
            let keyed = t
                .sixtofour
                .iter()
                .map(|s| ("tunnel.6to4.ipv4", s.ipv4))
                .chain(t.isatap.iter().map(|i| ("tunnel.isatap.ipv4", i.ipv4)));
            for (key, a) in keyed {
                let a32 = u32::from(a);
                let taken = self
                    .nat44
                    .iter()
                    .flat_map(|n| {
                        n.pool
                            .iter()
                            .map(|p| ("nat44.pool", *p))
                            .chain(n.statics.iter().map(|s| {
                                (
                                    "nat44.static",
                                    Prefix4 {
                                        addr: u32::from(s.outside),
                                        len: 32,
                                    },
                                )
                            }))
                    })
                    .chain(
                        self.nat64
                            .iter()
                            .flat_map(|n| n.pool4.iter().map(|p| ("nat64.pool4", *p))),
                    )
                    .chain(
                        self.siit
                            .iter()
                            .flat_map(|s| s.pool4.iter().map(|p| ("siit.pool4", *p))),
                    )
                    .find(|(_, p)| p.contains(a32));
                if let Some((other, p)) = taken {
                    return err(
                        key,
                        format!("endpoint {a} is also in {other} ({p}): its protocol 41 would be translated instead of decapsulated; give the tunnel an address of its own"),
                    );
                }
            }
        }
        if let Some(n44) = &self.nat44 {
            let v4: Vec<(&str, Prefix4)> = self
                .nat64
                .iter()
                .flat_map(|n| n.pool4.iter().map(|p| ("nat64.pool4", *p)))
                .chain(self.siit.iter().flat_map(|s| {
                    s.pool4
                        .iter()
                        .map(|p| ("siit.pool4", *p))
                        .chain(s.eam.iter().map(|e| ("siit.eam", e.ipv4)))
                }))
                .collect();
            for (key, p) in v4 {
                let statics = n44.statics.iter().map(|s| Prefix4 {
                    addr: u32::from(s.outside),
                    len: 32,
                });
                if n44
                    .pool
                    .iter()
                    .copied()
                    .chain(statics)
                    .any(|q| q.overlaps(&p))
                {
                    return err(
                        key,
                        format!("{p} overlaps nat44.pool or a static outside address; IPv4 destinations pick the translator"),
                    );
                }
            }
        }
        Ok(())
    }
}

/// One translator instance (one per worker thread).
pub struct Engine {
    /// The configuration running, as given ([`Engine::reconfigure`] compares against it).
    cfg: EngineConfig,
    nat44: Option<nat44::Nat44>,
    nat64: Option<nat64::Nat64>,
    siit: Option<siit::Siit>,
    tunnel: Option<tunnel::Tunnel>,
    counters: Counters,
    /// `sessions_created` at the last [`Engine::expire_step`].
    made_at_step: u64,
    /// Translated segments of super-packets cut in software, for [`Engine::pop_ready`].
    segmented: std::collections::VecDeque<Vec<u8>>,
    /// Packets the established-flow lane translated (tests check the lane ran).
    #[cfg(test)]
    lane_hits: u64,
}

/// The translator a packet goes to ([`Engine::route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Nat64From6,
    SiitFrom6,
    TunnelFrom6,
    TunnelFrom4,
    Nat64From4,
    SiitFrom4,
    Nat44,
    Drop(DropReason),
}

/// What batch stage 1 decided for a packet ([`Engine::process_batch`]).
#[derive(Clone, Copy)]
enum Plan {
    /// No session lookup to prepare: the full path.
    Full,
    Nat44(nat44::Lane44),
    Nat64(nat64::Lane64),
    /// A packet SIIT translates: its plain-packet lane (`Siit::lane`) is tried.
    Siit,
}

impl Engine {
    /// Builds an engine; fails with the config key at fault.
    pub fn new(cfg: EngineConfig) -> Result<Engine, ConfigError> {
        cfg.validate()?;
        // The translators draw from independent streams of the one seed.
        let nat64 = cfg
            .nat64
            .as_ref()
            .map(|n| nat64::Nat64::new(n, cfg.seed ^ 0x6464_6464_6464_6464));
        let siit = cfg.siit.as_ref().map(|s| {
            let (limits, fragment) = match (&cfg.nat64, &cfg.nat44) {
                (Some(n), _) => (n.limits, n.timeouts.fragment),
                (None, Some(n)) => (n.limits, n.timeouts.fragment),
                (None, None) => (Limits::default(), Timeouts::default().fragment),
            };
            siit::Siit::new(s, &limits, fragment, cfg.seed ^ 0x5151_5151_5151_5151)
        });
        Ok(Engine {
            nat44: cfg.nat44.clone().map(|n| nat44::Nat44::new(n, cfg.seed)),
            nat64,
            siit,
            tunnel: cfg
                .tunnel
                .as_ref()
                .map(|t| tunnel::Tunnel::new(t, cfg.seed ^ 0x4141_4141_4141_4141)),
            cfg,
            counters: Counters::default(),
            made_at_step: 0,
            segmented: std::collections::VecDeque::new(),
            #[cfg(test)]
            lane_hits: 0,
        })
    }

    /// Builds worker `worker`'s engine of `shards` ([`shard`]): its own tables, NAPT ports
    /// and ICMP identifiers only from its slices, so inbound packets find it by
    /// [`shard::Shards::of_inbound`].
    pub fn new_shard(
        cfg: EngineConfig,
        shards: &shard::Shards,
        worker: usize,
    ) -> Result<Engine, ConfigError> {
        let mut e = Engine::new(cfg)?;
        let ids = shards.icmp_slice(worker);
        if let (Some(n), Some(r)) = (e.nat44.as_mut(), shards.nat44_slice(worker)) {
            n.set_ranges(r, ids);
        }
        if let (Some(n), Some(r)) = (e.nat64.as_mut(), shards.nat64_slice(worker)) {
            n.set_ranges(r, ids);
        }
        Ok(e)
    }

    /// Translates one packet in place. `pkt` holds exactly the bytes received, with headroom
    /// in front of them where the driver has it; on `Forward` or `Reply`, transmit
    /// `pkt.data()`.
    ///
    /// A packet may carry kernel offloads ([`PacketBuf::offload`]: a partial checksum, a TCP
    /// super-packet); `kernel_offload.rs` says which translators keep them and what
    /// becomes of the others. On `Forward` the buffer's offloads describe the packet to
    /// transmit.
    pub fn process(&mut self, now: Time, pkt: &mut PacketBuf) -> Verdict {
        if !pkt.offload().is_none() {
            if let Some(v) = self.take_offloads(now, pkt) {
                return v;
            }
        }
        self.counters.event(Event::PacketsIn);
        let mut v = self.dispatch(now, pkt);
        if !pkt.offload().is_none() {
            v = self.finish_offloads(pkt, v);
        }
        self.count(v);
        v
    }

    /// Counts a packet's verdict.
    #[inline]
    fn count(&mut self, v: Verdict) {
        match v {
            Verdict::Forward => self.counters.event(Event::PacketsOut),
            Verdict::Drop(r) => self.counters.drop(r),
            Verdict::Reply(r) => {
                self.counters.drop(r);
                self.counters.event(Event::IcmpErrorsSent);
            }
            Verdict::Held => {}
        }
    }

    /// Picks the translator by IP version and destination address (the order the crate
    /// docs give).
    fn route(&self, data: &[u8]) -> Route {
        match data.first().map(|b| b >> 4) {
            Some(6) if self.nat64.is_some() || self.siit.is_some() || self.tunnel.is_some() => {
                let Some(dst) = xlat_wire::ipv6::addr_at(data, xlat_wire::ipv6::off::DST) else {
                    return Route::Drop(DropReason::TruncatedIpv6);
                };
                if self.nat64.as_ref().is_some_and(|n| n.owns6(dst)) {
                    Route::Nat64From6
                } else if self.siit.as_ref().is_some_and(|s| s.owns6(dst)) {
                    Route::SiitFrom6
                } else if self.tunnel.is_some() {
                    Route::TunnelFrom6
                } else {
                    Route::Drop(DropReason::NotOurs)
                }
            }
            Some(4) => {
                let dst = xlat_wire::field::u32_at(data, xlat_wire::ipv4::off::DST);
                let proto = xlat_wire::field::u8_at(data, xlat_wire::ipv4::off::PROTO);
                if let (Some(t), Some(d), Some(p)) = (self.tunnel.as_ref(), dst, proto) {
                    if t.owns4(d, p) {
                        return Route::TunnelFrom4;
                    }
                }
                if let Some(dst) = dst {
                    if self.nat64.as_ref().is_some_and(|n| n.owns4(dst)) {
                        return Route::Nat64From4;
                    }
                    if self.siit.as_ref().is_some_and(|s| s.owns4(dst)) {
                        return Route::SiitFrom4;
                    }
                }
                match self.nat44 {
                    Some(_) => Route::Nat44,
                    None if dst.is_none() => Route::Drop(DropReason::Truncated),
                    None => Route::Drop(DropReason::NotOurs),
                }
            }
            None => Route::Drop(DropReason::Truncated),
            _ if self.nat44.is_some() => Route::Nat44,
            _ => Route::Drop(DropReason::NotIpv4),
        }
    }

    /// Gives the packet to the translator [`Engine::route`] picks.
    fn dispatch(&mut self, now: Time, pkt: &mut PacketBuf) -> Verdict {
        let route = self.route(pkt.data());
        let c = &mut self.counters;
        let gone = Verdict::Drop(DropReason::NotOurs);
        match route {
            Route::Nat64From6 => self
                .nat64
                .as_mut()
                .map_or(gone, |n| n.process6(now, pkt, c)),
            Route::SiitFrom6 => self.siit.as_mut().map_or(gone, |s| s.process6(now, pkt, c)),
            Route::TunnelFrom6 => self
                .tunnel
                .as_mut()
                .map_or(gone, |t| t.process6(now, pkt, c)),
            Route::TunnelFrom4 => self
                .tunnel
                .as_mut()
                .map_or(gone, |t| t.process4(now, pkt, c)),
            Route::Nat64From4 => self
                .nat64
                .as_mut()
                .map_or(gone, |n| n.process4(now, pkt, c)),
            Route::SiitFrom4 => self.siit.as_mut().map_or(gone, |s| s.process4(now, pkt, c)),
            Route::Nat44 => self.nat44.as_mut().map_or(gone, |n| n.process(now, pkt, c)),
            Route::Drop(r) => Verdict::Drop(r),
        }
    }

    /// Translates a batch in three stages over chunks of 32, so the memory latency of a large
    /// table overlaps across the chunk: (1) plan every packet -- a minimal parse picks its
    /// translator and session key, hashes it and starts fetching its index slot; (2) start
    /// fetching the session each slot (probably) points to; (3) translate. In stage 3 a
    /// NAT44 or NAT64 TCP/UDP packet that needs nothing unusual takes the established-flow
    /// lane (one lookup with the stage-1 hash, the session refreshed -- or, for a new flow,
    /// made as the full path makes it -- and the rewrite applied by the full path's own
    /// code), and a plain SIIT TCP/UDP packet SIIT's lane (header and checksum written from
    /// the fixed header, `Siit::lane`); everything else (TCP SYN/FIN/RST,
    /// fragments, options, ICMP, hairpins, static entries) goes through [`Engine::process`].
    /// Verdicts, output bytes, counters and session state are those `process` gives packet
    /// by packet. `verdicts[i]` is packet i's.
    pub fn process_batch(&mut self, now: Time, pkts: &mut [PacketBuf], verdicts: &mut [Verdict]) {
        const CHUNK: usize = 32;
        let mut start = 0;
        while start < pkts.len() {
            let end = pkts.len().min(start + CHUNK);
            let mut plans = [Plan::Full; CHUNK];
            if self.nat44.is_some() || self.nat64.is_some() || self.siit.is_some() {
                for (pl, p) in plans.iter_mut().zip(pkts.get(start..end).unwrap_or(&[])) {
                    // Packets with kernel offloads take the full path (`process`).
                    if p.offload().is_none() {
                        self.plan(p.data(), pl);
                    }
                }
                for pl in &mut plans {
                    match (pl, &self.nat64, &self.nat44) {
                        (Plan::Nat64(l), Some(n), _) => {
                            let _ = n.prefetch_lane(l);
                        }
                        (Plan::Nat44(l), _, Some(n)) => n.prefetch_session(l),
                        _ => {}
                    }
                }
                // Stage 2b: NAT64 sessions hold an IPv6 host's number, and with many hosts
                // its record is a third line to fetch ([`nat64::Nat64::prefetch_host`]).
                if let Some(n) = self.nat64.as_ref().filter(|n| n.hosts_beyond_cache()) {
                    for pl in &plans {
                        if let Plan::Nat64(l) = pl {
                            n.prefetch_host(l);
                        }
                    }
                }
            }
            let chunk = pkts.get_mut(start..end).unwrap_or(&mut []);
            let vs = verdicts.get_mut(start..end).unwrap_or(&mut []);
            for ((p, v), pl) in chunk.iter_mut().zip(vs.iter_mut()).zip(plans.iter()) {
                let lane = match (pl, self.nat44.as_mut(), self.nat64.as_mut()) {
                    (Plan::Nat44(l), Some(n), _) => n.lane(now, p, l, &mut self.counters),
                    (Plan::Nat64(l), _, Some(n)) => n.lane(now, p, l, &mut self.counters),
                    (Plan::Siit, _, _) => self
                        .siit
                        .as_mut()
                        .and_then(|s| s.lane(now, p, &mut self.counters)),
                    _ => None,
                };
                *v = match lane {
                    Some(verdict) => {
                        #[cfg(test)]
                        {
                            self.lane_hits += 1;
                        }
                        self.counters.event(Event::PacketsIn);
                        self.count(verdict);
                        verdict
                    }
                    None => self.process(now, p),
                };
            }
            start = end;
        }
    }

    /// Batch stage 1 for one packet: picks the translator as `dispatch` does and, for NAT44
    /// or NAT64, plans the session lookup into `out` and starts fetching its index slot;
    /// SIIT's packets are marked for its lane; others stay [`Plan::Full`]. The plan is written in place rather than returned:
    /// a returned plan was stored field by field and copied in wide loads right after,
    /// which waited on store forwarding (a fifth of the NAT64 batch's time).
    #[inline(always)]
    fn plan(&self, data: &[u8], out: &mut Plan) {
        match data.first().map(|b| b >> 4) {
            Some(6) => {
                let Some(dst) = xlat_wire::ipv6::addr_at(data, xlat_wire::ipv6::off::DST) else {
                    return;
                };
                if let Some(n) = self.nat64.as_ref().filter(|n| n.owns6(dst)) {
                    if let Some(l) = n.plan(data, true) {
                        *out = Plan::Nat64(l);
                    }
                } else if self.siit.as_ref().is_some_and(|s| s.owns6(dst)) {
                    *out = Plan::Siit;
                }
            }
            Some(4) => {
                let (Some(dst), Some(proto)) = (
                    xlat_wire::field::u32_at(data, xlat_wire::ipv4::off::DST),
                    xlat_wire::field::u8_at(data, xlat_wire::ipv4::off::PROTO),
                ) else {
                    return;
                };
                if self.tunnel.as_ref().is_some_and(|t| t.owns4(dst, proto)) {
                    return;
                }
                if let Some(n) = self.nat64.as_ref().filter(|n| n.owns4(dst)) {
                    if let Some(l) = n.plan(data, false) {
                        *out = Plan::Nat64(l);
                    }
                    return;
                }
                if self.siit.as_ref().is_some_and(|s| s.owns4(dst)) {
                    *out = Plan::Siit;
                    return;
                }
                if let Some(l) = self.nat44.as_ref().and_then(|n| n.plan(data)) {
                    *out = Plan::Nat44(l);
                }
            }
            _ => {}
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
        if v.transmit() {
            *pkt = b.data().to_vec();
        }
        v
    }

    /// Packets released by the engine outside of [`Engine::process`]'s return value: held
    /// out-of-order fragments whose first fragment has arrived, fragments made from a
    /// packet too big for IPv6, first fragments of ICMP messages whose length is now known.
    /// Drivers drain this after every batch.
    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        // Segments of a super-packet were counted when they were translated.
        if let Some(p) = self.segmented.pop_front() {
            return Some(p);
        }
        let p = self
            .nat44
            .as_mut()
            .and_then(|n| n.pop_ready())
            .or_else(|| self.nat64.as_mut().and_then(|n| n.pop_ready()))
            .or_else(|| self.siit.as_mut().and_then(|s| s.pop_ready()))
            .or_else(|| self.tunnel.as_mut().and_then(|t| t.pop_ready()));
        if p.is_some() {
            self.counters.event(Event::PacketsOut);
        }
        p
    }

    /// Removes idle sessions and stale fragment state, doing at most `budget` units of work
    /// per translator -- a session slot looked at costs 1, a removal 65 -- so a call's time is
    /// bounded whether no session or every session is due (1,024 units: ~2 us with nothing
    /// due, ~3 us median with everything due, at 1M sessions). A table that fills up with
    /// sessions the sweep has not reached makes room itself when a new session needs it.
    /// Returns sessions removed.
    pub fn expire(&mut self, now: Time, budget: usize) -> usize {
        self.expire_each(now, |_| budget)
    }

    /// One expiry pass over every translator. `budget` gives a session translator's units
    /// from whether it wants a step's sweep now (`Napt::wants_expiry_step`).
    fn expire_each(&mut self, now: Time, budget: impl Fn(bool) -> usize) -> usize {
        let c = &mut self.counters;
        let mut removed = 0;
        if let Some(n) = self.nat44.as_mut() {
            removed += n.expire(now, budget(n.wants_expiry_step(now)), c);
        }
        if let Some(n) = self.nat64.as_mut() {
            removed += n.expire(now, budget(n.wants_expiry_step(now)), c);
        }
        if let Some(s) = self.siit.as_mut() {
            s.expire(now, c);
        }
        if let Some(t) = self.tunnel.as_mut() {
            t.expire(now, c);
        }
        removed
    }

    /// When the engine next needs [`Engine::expire`] though no packet comes: the earliest of
    /// its timers -- the expiry sweep while sessions or FTP expectations exist
    /// ([`SWEEP_INTERVAL`] after `now`), a held or tracked fragment's timeout, a tunnel
    /// datagram's reassembly deadline, an ISATAP host's Router Solicitation or lifetimes.
    /// `None`: nothing happens until a packet comes, so a driver may sleep as long as it
    /// likes. A time at or before `now` means "now". Cheap (no table is walked): a driver asks
    /// once per turn and sleeps to the answer instead of waking on a fixed tick.
    pub fn poll_timeout(&self, now: Time) -> Option<Time> {
        let mut next = None;
        if let Some(n) = &self.nat44 {
            next = frag::earliest(next, n.poll_timeout(now));
        }
        if let Some(n) = &self.nat64 {
            next = frag::earliest(next, n.poll_timeout(now));
        }
        if let Some(s) = &self.siit {
            next = frag::earliest(next, s.poll_timeout());
        }
        if let Some(t) = &self.tunnel {
            next = frag::earliest(next, t.poll_timeout(now));
        }
        next
    }

    /// The expiry a driver runs after each batch it translates: [`Engine::expire`] with a
    /// budget that follows the batch. `backlog`: more packets are waiting (the batch filled
    /// the driver's read). Then the budget is [`EXPIRE_STEP_BASE`] units (128 session slots
    /// looked at, or two removals: ~0.2-0.4 us median, ~1.5 us at p99 with everything due at
    /// 1M sessions) -- so a pass holds the waiting packets up for less than a batch takes
    /// (a fixed 1,024 units took 2.8 us median and 10 us at p99 with everything due, where a
    /// batch of 64 established packets of random flows takes ~3.7 us) -- and otherwise
    /// [`EXPIRE_STEP_IDLE`] units, since nothing waits. Either way, plus one removal for
    /// every session the engine made since the last step, up to [`EXPIRE_STEP_MAX`] in all:
    /// a run of new flows is met by as many removals, so the table does not fill with expired
    /// sessions while traffic creates new ones. Nothing at all while a translator's sweep
    /// went round its whole table in under a second finding nothing due
    /// (`Napt::wants_expiry_step`), until a second after that cycle began: the step would
    /// only read a young or small table again. Returns sessions removed.
    pub fn expire_step(&mut self, now: Time, backlog: bool) -> usize {
        let made = self.counters.count(Event::SessionsCreated);
        let new = usize::try_from(made.saturating_sub(self.made_at_step)).unwrap_or(usize::MAX);
        self.made_at_step = made;
        let base = if backlog {
            EXPIRE_STEP_BASE
        } else {
            EXPIRE_STEP_IDLE
        };
        let credit = new.saturating_mul(napt::REMOVE_UNITS);
        self.expire_each(now, |wants| {
            if wants {
                base.saturating_add(credit).min(EXPIRE_STEP_MAX)
            } else {
                0
            }
        })
    }

    /// Hands simple sessions (NAT44 and NAT64: UDP, established TCP) to a fast path from now
    /// on: their instructions come out of [`Engine::drain_events`], turned into recipes by
    /// [`Engine::offload_op`] ([`offload`] explains the protocol). SIIT, which has no
    /// sessions, hands over the address pairs of its plain TCP/UDP packets: their
    /// instructions come out of [`Engine::drain_offload`].
    pub fn set_offload(&mut self, on: bool) {
        if let Some(n) = self.nat44.as_mut() {
            n.set_offload(on);
        }
        if let Some(n) = self.nat64.as_mut() {
            n.set_offload(on);
        }
        if let Some(s) = self.siit.as_mut() {
            s.set_offload(on);
        }
    }

    /// How many packets a NAT44 or NAT64 UDP session carries through the engine before its
    /// recipes go to the fast path (1, the default: at its first packet; clamped to
    /// 1..=[`MAX_OFFLOAD_AFTER`]); a reply -- a packet against the direction that opened
    /// the session -- promotes it at once. So one-packet flows (DNS queries, scans, a flood
    /// of new flows) cost no recipe install and withdrawal, as a flow-offload table takes
    /// only flows conntrack has seen both ways. TCP waits for the established state
    /// regardless. The daemon sets `[dataplane] offload_udp_after` (docs/CONFIG.md says why
    /// its default is what it is).
    pub fn set_offload_after(&mut self, packets: u8) {
        if let Some(n) = self.nat44.as_mut() {
            n.set_offload_after(packets);
        }
        if let Some(n) = self.nat64.as_mut() {
            n.set_offload_after(packets);
        }
    }

    /// Appends SIIT's fast-path instructions since the last call to `out` (installs and
    /// withdrawals of its address-pair recipes, and queries about idle ones, answered with
    /// [`Engine::offload_seen`]); counts installs and withdrawals. Drivers drain this with
    /// [`Engine::drain_events`].
    pub fn drain_offload(&mut self, out: &mut Vec<offload::OffloadOp>) {
        let Some(s) = self.siit.as_mut() else {
            return;
        };
        let from = out.len();
        s.drain_offload(out);
        for op in out.iter().skip(from) {
            match op.kind {
                offload::OffloadKind::Install => self.counters.event(Event::OffloadInstalled),
                offload::OffloadKind::Remove => self.counters.event(Event::OffloadRemoved),
                offload::OffloadKind::Query => {}
            }
        }
    }

    /// `xlat trace` with a fast path: the fast path gives back the sessions `f` takes and
    /// takes none of them until `hold_offload(now, None)`, which hands the held ones that
    /// qualify back; so a traced flow's packets pass the engine. SIIT, which has no inside
    /// host to single out, gives back all its address pairs for the time. The recipes go
    /// through the fast-path events of [`Engine::drain_events`]. Returns how many NAT
    /// sessions moved.
    pub fn hold_offload(&mut self, now: Time, f: Option<SessionFilter>) -> u64 {
        if let Some(s) = self.siit.as_mut() {
            s.hold_offload(f.is_some());
        }
        let mut n = 0;
        if let Some(t) = self.nat44.as_mut() {
            n += t.hold_offload(now, f.clone());
        }
        if let Some(t) = self.nat64.as_mut() {
            n += t.hold_offload(now, f);
        }
        n
    }

    /// Removes the dynamic sessions `f` takes (`xlat clear sessions`; static entries stay),
    /// each with a session-deleted event of reason `cleared`; their fast-path recipes are
    /// withdrawn through the fast-path events of [`Engine::drain_events`]. Returns how many, also counted
    /// (`sessions_cleared`).
    pub fn clear_sessions(&mut self, now: Time, f: &SessionFilter) -> u64 {
        let mut n = 0;
        if let Some(x) = self.nat44.as_mut() {
            n += x.clear(now, f);
        }
        if let Some(x) = self.nat64.as_mut() {
            n += x.clear(now, f);
        }
        self.counters.add(Event::SessionsCleared, n);
        n
    }

    /// Ends at most `max` dynamic sessions with `reason`, each with its session-deleted
    /// event (and its mapping's and host's when they end with it); returns how many. The
    /// daemon ends every session this way when it stops, draining the events between calls
    /// for its NAT log, so the log never leaves a session open that no longer exists.
    pub fn end_sessions(&mut self, now: Time, reason: events::EndReason, max: usize) -> u64 {
        let mut n = 0;
        if let Some(x) = self.nat44.as_mut() {
            n += x.end_some(now, reason, max);
        }
        if let Some(x) = self.nat64.as_mut() {
            n += x.end_some(
                now,
                reason,
                max.saturating_sub(usize::try_from(n).unwrap_or(usize::MAX)),
            );
        }
        n
    }

    /// Starts (`capacity` > 0: events held between drains at most) or stops the state-event
    /// stream of the stateful translators ([`events`]): sessions, mappings and host pairings
    /// made and ended, and exhaustion and quota refusals, for NAT logging, session sync and
    /// metrics. Off by default; off, it costs a branch where an event would be made.
    pub fn set_events(&mut self, capacity: usize) {
        if let Some(n) = self.nat44.as_mut() {
            n.set_events(capacity);
        }
        if let Some(n) = self.nat64.as_mut() {
            n.set_events(capacity);
        }
    }

    /// Appends the state events since the last call to `out`: NAT44's, then NAT64's, each
    /// oldest first, with the fast path's instructions among them when offload is on.
    /// Events a full queue dropped are counted (`state_events_dropped`). Drivers drain after
    /// every batch and every [`Engine::expire`].
    pub fn drain_events(&mut self, out: &mut Vec<events::StateEvent>) {
        let mut dropped = 0;
        if let Some(n) = self.nat44.as_mut() {
            dropped += n.drain_events(out);
        }
        if let Some(n) = self.nat64.as_mut() {
            dropped += n.drain_events(out);
        }
        if dropped > 0 {
            self.counters.add(Event::StateEventsDropped, dropped);
        }
    }

    /// The fast path's instruction in a state event ([`events::EventKind::FastPath`]): the
    /// session's recipes and whether to install or withdraw them, or to read when they last
    /// matched; `None` for every other event. Counts installs and withdrawals.
    pub fn offload_op(&mut self, ev: &events::StateEvent) -> Option<offload::OffloadOp> {
        let events::EventKind::FastPath(kind) = ev.kind else {
            return None;
        };
        let op = match ev.translator {
            events::Translator::Nat44 => nat44::Nat44::offload_op(ev, kind),
            events::Translator::Nat64 => self.nat64.as_ref()?.offload_op(ev, kind),
        }?;
        match kind {
            offload::OffloadKind::Install => self.counters.event(Event::OffloadInstalled),
            offload::OffloadKind::Remove => self.counters.event(Event::OffloadRemoved),
            offload::OffloadKind::Query => {}
        }
        Some(op)
    }

    /// The answer to an [`offload::OffloadKind::Query`]: when the fast path last saw the
    /// session's outbound and inbound packets (the engine's clock; a SIIT recipe, one
    /// direction, answers in `out_seen`). The session is refreshed
    /// or, if still idle past its timeout, removed (its `Remove` follows in
    /// [`Engine::drain_events`]). Returns true if it was removed.
    pub fn offload_seen(
        &mut self,
        now: Time,
        token: u64,
        out_seen: Option<Time>,
        in_seen: Option<Time>,
    ) -> bool {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the session id is the token's low 32 bits (offload::Recipe::token)"
        )]
        let sid = token as u32;
        let c = &mut self.counters;
        if token & offload::TOKEN_SIIT != 0 {
            return self
                .siit
                .as_mut()
                .is_some_and(|s| s.offload_seen(now, sid, out_seen, c));
        }
        match (
            token & offload::TOKEN_NAT64 != 0,
            &mut self.nat44,
            &mut self.nat64,
        ) {
            (false, Some(n), _) => n.offload_seen(now, sid, out_seen, in_seen, c),
            (true, _, Some(n)) => n.offload_seen(now, sid, out_seen, in_seen, c),
            _ => false,
        }
    }

    /// What the tunnel endpoints learned that the daemon configures on the TUN device (an
    /// ISATAP host's prefix and router); `None` without a tunnel.
    pub fn tunnel_status(&self) -> Option<tunnel::TunnelStatus> {
        self.tunnel.as_ref().map(tunnel::Tunnel::status)
    }

    /// Counters of this engine.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Table sizes, pool use and counters (NAT44 and NAT64 tables added up; pool use per
    /// protocol summed over both pools).
    pub fn stats(&self) -> Stats {
        let mut st = Stats::from_counters(&self.counters);
        if let Some(n) = &self.nat44 {
            n.fill_stats(&mut st);
        }
        if let Some(n) = &self.nat64 {
            n.fill_stats(&mut st);
        }
        if let Some(s) = &self.siit {
            s.fill_stats(&mut st);
        }
        st.merge_pool_rows();
        st
    }

    /// The live translation table: NAT44 (static entries first, then dynamic sessions),
    /// then NAT64 sessions.
    pub fn sessions(&self, now: Time) -> Vec<SessionInfo> {
        self.sessions_matching(now, &SessionFilter::default(), usize::MAX)
    }

    /// A page of the table for `xlat show sessions`: up to `rows` of the sessions `f`
    /// takes, in table order from `from` (NAT44 static entries, NAT44 sessions, NAT64
    /// sessions), and where the next page starts (`None`: the end). A page looks at no more
    /// than [`PAGE_VISITS`] slots of each part, so a worker answers it between two batches
    /// however many sessions there are; the caller sorts what it gathered.
    pub fn sessions_page(
        &self,
        now: Time,
        f: &SessionFilter,
        from: SessionCursor,
        rows: usize,
    ) -> (Vec<SessionInfo>, Option<SessionCursor>) {
        let mut out = Vec::new();
        let mut at = from;
        loop {
            let left = rows.saturating_sub(out.len());
            if left == 0 {
                return (out, Some(at));
            }
            let budget = (left, PAGE_VISITS);
            let next = match at.part {
                0 => self
                    .nat44
                    .as_ref()
                    .and_then(|n| n.statics_page(f, at.slot, budget, &mut out)),
                1 => self
                    .nat44
                    .as_ref()
                    .and_then(|n| n.sessions_page(now, f, at.slot, budget, &mut out)),
                2 => self.nat64.as_ref().and_then(|n| {
                    let start = out.len();
                    let next = n.sessions_page(now, f, at.slot, budget, &mut out);
                    for r in out.iter_mut().skip(start) {
                        r.remote6 = r.remote.and_then(|a| n.remote6(a));
                    }
                    next
                }),
                _ => return (out, None),
            };
            match next {
                Some(slot) => {
                    return (
                        out,
                        Some(SessionCursor {
                            part: at.part,
                            slot,
                        }),
                    )
                }
                None => {
                    at = SessionCursor {
                        part: at.part + 1,
                        slot: 0,
                    }
                }
            }
        }
    }

    /// The sessions `f` takes, at most `limit`, in the order of [`Engine::sessions`]: the
    /// filter and the limit are applied to values inside the engine, so only the rows
    /// returned are built.
    pub fn sessions_matching(
        &self,
        now: Time,
        f: &SessionFilter,
        limit: usize,
    ) -> Vec<SessionInfo> {
        let mut out = match &self.nat44 {
            Some(n) => n.sessions(now, f, limit),
            None => Vec::new(),
        };
        if let Some(n) = &self.nat64 {
            let start = out.len();
            n.sessions(now, f, limit.saturating_sub(start), &mut out);
            for r in out.iter_mut().skip(start) {
                r.remote6 = r.remote.and_then(|a| n.remote6(a));
            }
        }
        out
    }
}
