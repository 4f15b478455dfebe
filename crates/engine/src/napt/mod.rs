//! NAPT state shared by the stateful translators (NAT44 and NAT64): hosts, mappings (the
//! BIB) and sessions, with port allocation, filtering, the TCP state machine and expiry.
//!
//! Generic over the inside address type (`u32` for NAT44, `u128` for NAT64); the outside and
//! remote sides are always IPv4. Sessions and mapping records hold an IPv6 inside address as
//! its host's number (`Hosts`), so both translators' sessions are 32 bytes. Rules
//! implemented here, and the file each lives in:
//! - RFC 4787 REQ-1 / RFC 5382 REQ-1 / RFC 6146 3.5.1: endpoint-independent mapping (the BIB
//!   is keyed by the inside endpoint alone) -- `mapping.rs`;
//! - RFC 4787 REQ-2: paired pooling (a host keeps one outside address), new hosts on the
//!   least loaded address; RFC 3022 2.1 Basic NAT (a pool address per host) -- `pool.rs`,
//!   `spread.rs`;
//! - RFC 4787 REQ-3 / RFC 6056 3.3: port preservation, else a random start in the range --
//!   `pool.rs`;
//! - RFC 4787 5 (REQ-8): endpoint-independent, address-dependent, address-and-port-dependent
//!   filtering -- `filter.rs`;
//! - RFC 4787 REQ-5/REQ-6, RFC 5382 REQ-5, RFC 5508 REQ-2: timeouts and refresh --
//!   `session.rs` (and `offload.rs` for sessions a fast path carries);
//! - RFC 6146 3.5.2.2: TCP states (see [`crate::tcp`]); only SYN creates a TCP session --
//!   `session.rs`, `mapping.rs` and `filter.rs` (where sessions are made);
//! - RFC 5508 REQ-6: ICMP errors find sessions without refreshing them -- `packet.rs`.
//!
//! A mapping lives while it has sessions; its port returns to the pool with the last one.
//! A mapping that has had one session only -- what a client's new port for each connection
//! makes, nearly every mapping -- has no record of its own: it is folded into that session,
//! which holds all of its state (endpoints, expiry, the one remote address it admits), and
//! the BIB points to the session. A second session gives it a record ([`Napt::promote`]).
//! Expiry is lazy (a lookup that finds an expired session removes it) plus a budgeted sweep.
//!
//! The files, in the order a packet meets them:
//! - `mod.rs`: [`Napt`] and [`NaptConfig`], construction, the hashes it keys its indexes by;
//! - `packet.rs`: what a packet asks of it -- [`Napt::outbound`] / [`Napt::inbound`] on the
//!   full path, [`Napt::lane`] / [`Napt::lane_or_new`] on the established-flow lane,
//!   [`Napt::find_by_inside`] / [`Napt::find_by_outside`] for ICMP errors;
//! - `lookup.rs`: finding a packet's session, and the batch stages' prefetches;
//! - `pending.rs`: index entries whose insertion waits, and the index access that sees them;
//! - `mapping.rs`: the BIB -- mapping records, folded mappings, making an outbound session;
//! - `pool.rs`: hosts paired with pool addresses, and ports taken from them;
//! - `spread.rs`: which address a new host is paired with (the least loaded);
//! - `filter.rs`: the address-dependent filter's entries, making an inbound session;
//! - `forward.rs`: static BIB entries (port forwarding) and the sessions they admit;
//! - `repool.rs`: live changes of the pool and the static BIB entries (a reload);
//! - `expect.rs`: data connections an ALG announced ([`crate::alg`]), mapped before they come;
//! - `session.rs`: the session record, its TCP state and refresh, its removal;
//! - `expiry.rs`: the budgeted sweep and the reclaiming pass of a full table;
//! - `offload.rs`: sessions handed to a fast path ([`crate::offload`]) and its answers;
//! - `show.rs`: listings and statistics for `xlat show`;
//! - `slab.rs`: the slot vectors sessions and mapping records live in.
//!
//! Words of its own: a mapping is *folded* into its only session; an inside address is
//! *held* as sessions store it (IPv4: itself; IPv6: its host's number); a *side* is a
//! table of an index (a packet's direction; a mapping's inside or outside endpoint); a *lane*
//! is the batch path of plain packets, which skips the full parse.

/// `int()` and `ext()` of a record with flat `int_addr`/`int_port` and `ext_addr`/`ext_port`
/// fields (mappings and sessions keep their endpoints flat to stay small).
macro_rules! flat_endpoints {
    ($t:ident) => {
        impl $t {
            /// Its inside endpoint, the address looked up if held as a host's number.
            #[inline(always)]
            pub(super) fn int<A: $crate::flow::InsideAddr>(
                &self,
                hosts: &$crate::hosts::Hosts<A>,
            ) -> Option<$crate::flow::Endpoint<A>> {
                Some($crate::flow::Endpoint {
                    addr: hosts.addr(self.int_addr)?,
                    port: self.int_port,
                })
            }
            #[inline]
            pub(super) fn ext(&self) -> $crate::flow::Endpoint {
                $crate::flow::Endpoint {
                    addr: self.ext_addr,
                    port: self.ext_port,
                }
            }
            /// The BIB key's hash of its mapping (a session's: the one folded into it) by
            /// the inside (`outside = false`) or outside endpoint.
            pub(super) fn bib_hash<A: $crate::flow::InsideAddr>(
                &self,
                hasher: &$crate::index::KeyHasher,
                outside: bool,
                hosts: &$crate::hosts::Hosts<A>,
            ) -> Option<u64> {
                Some($crate::flow::ends_bib_hash(
                    hasher,
                    self.proto(),
                    self.int(hosts)?,
                    self.ext(),
                    outside,
                ))
            }
        }
    };
}

mod events;
mod expect;
mod expiry;
mod filter;
mod forward;
mod install;
mod lookup;
mod mapping;
mod offload;
mod packet;
mod pending;
mod pool;
mod repool;
mod session;
mod show;
mod slab;
mod spread;
#[cfg(test)]
mod tests;

pub use expiry::REMOVE_UNITS;
pub use install::InstallRefused;
pub use session::MAX_OFFLOAD_AFTER;

use hashbrown::HashMap;

use crate::config::{Filtering, Limits, Nat44Mode, Prefix4, PrefixSet4, Timeouts};
use crate::flow::{bib_hash, flow_hash, Endpoint, FlowKey, InsideAddr, Proto};
use crate::hosts::Hosts;
use crate::index::{KeyHasher, SidedIndex};
use crate::mem::Chunks;
use crate::records::Records;
use crate::rng::Rng;
use crate::Time;

use self::filter::SpilledRemote;
use self::mapping::Mapping;
use self::pending::{Pending, PENDING_MAX};
use self::pool::PoolAddr;
use self::session::Session;
use self::slab::{Slab, Slot};

/// No candidate session entry ([`Napt::prefetch_session`]): index values stop below it.
pub(crate) const NO_CAND: u32 = u32::MAX;

/// The endpoints of a session, as the fast path returns them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Translation<A> {
    pub int: Endpoint<A>,
    pub ext: Endpoint,
}

/// Settings of the NAPT state.
#[derive(Clone, Debug)]
pub struct NaptConfig {
    /// `Pool`: Basic NAT, one pool address per host, ports kept; otherwise NAPT.
    pub mode: Nat44Mode,
    pub filtering: Filtering,
    /// TCP/UDP port range; ICMP identifiers use 0-65535.
    pub ports: (u16, u16),
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub inbound_refresh: bool,
    /// Deterministic NAT44 / NAT64 ([`crate::deterministic`]): each host's address and
    /// ports are a function of the configuration (its range, not `ports` or a worker's
    /// slice).
    pub det: Option<crate::deterministic::Deterministic>,
}

/// Hosts, BIB and sessions of one stateful translator.
pub struct Napt<A> {
    cfg: NaptConfig,
    /// ICMP query identifiers to choose from: all of them, or a worker's slice
    /// ([`crate::shard`]).
    icmp_ids: (u16, u16),
    pool: Vec<PoolAddr>,
    /// Slots of `pool` new hosts are paired with, by load: all but those a reload retired
    /// (`repool.rs`).
    spread: spread::Spread,
    /// Pool slots by address (retired ones left out).
    pool_index: HashMap<u32, u32>,
    pool_prefixes: PrefixSet4,
    /// Inside hosts, and inside addresses by how sessions and mappings hold them.
    hosts: Hosts<A>,
    /// Records of mappings that have had more than one session: allocated as they come
    /// (up to one per session), since most mappings never have one.
    mappings: Slab<Mapping, Chunks<Slot<Mapping>>>,
    /// Mappings folded into their one session (no record).
    folded: usize,
    /// The BIB's index: values are [`Owner::bib_val`](mapping::Owner::bib_val)s, a table for each side.
    bib: SidedIndex<1>,
    sessions: Slab<Session>,
    /// Session index by packet tuple; values are `sid * 2 + direction` (0 out, 1 in), a
    /// table for each direction.
    flows: SidedIndex<0>,
    hasher: KeyHasher,
    /// Filter entries beyond the one each mapping holds, by (mapping, remote address): as
    /// many as the remote addresses outside senders get mappings to talk to, so they grow
    /// without a rehash stall ([`Records`]).
    remotes: Records<SpilledRemote>,
    rng: Rng,
    sweep_cursor: usize,
    /// The expiry sweep's current cycle over the slab: when it began, and whether it has
    /// met a session past its time ([`Napt::wants_expiry_step`]).
    cycle_started: Time,
    cycle_found_due: bool,
    /// No sweep after a batch before this time: the last cycle found nothing due.
    step_after: Time,
    /// Sessions may be handed to a fast path ([`Napt::set_offload`]).
    offload: bool,
    /// Packets a UDP session waits for before going to the fast path
    /// ([`Napt::set_offload_after`]).
    offload_after: u8,
    /// Sessions kept off the fast path while `xlat trace` looks at them
    /// ([`Napt::hold_offload`]).
    hold: Option<Box<crate::snapshot::SessionFilter>>,
    /// The state-event stream ([`crate::events`]); off until a consumer starts it.
    events: crate::events::EventQueue,
    /// `events.dropped()` at the last drain.
    events_dropped_seen: u64,
    /// Index entries of new sessions and mappings waiting to be inserted
    /// ([`Napt::insert_later`]); at most [`PENDING_MAX`].
    pending: Vec<Pending>,
    /// One bit per byte value of `hash >> 16` of the waiting entries: a lookup that misses
    /// the table scans `pending` only when its bit is set.
    pending_mask: [u64; 4],
    /// No reclaiming pass ([`Napt::reclaim`]) before this time: the last one found nothing.
    reclaim_after: Time,
    /// Static BIB entries ([`Napt::set_forwards`]).
    forwards: forward::Forwards<A>,
    /// An ALG's control port (0: none): its sessions are never offloaded.
    alg_port: u16,
    /// Data connections an ALG announced and mapped, waiting for their first packet
    /// ([`Napt::expect`]).
    expects: Vec<expect::Expect<A>>,
}

impl<A: InsideAddr> Napt<A> {
    /// Takes the live-changeable settings ([`crate::reconfigure`]); the port range (a
    /// worker's slice) and the table sizes stay.
    pub fn set_live(&mut self, l: crate::reconfigure::Live) {
        self.cfg.timeouts = l.timeouts;
        self.cfg.filtering = l.filtering;
        self.cfg.inbound_refresh = l.inbound_refresh;
        self.cfg.limits.max_sessions_per_host = l.max_sessions_per_host;
        self.cfg.limits.port_blocks_per_host = l.port_blocks_per_host;
    }

    pub fn new(cfg: NaptConfig, pool_prefixes: &[Prefix4], seed: u64) -> Self {
        let max = cfg.limits.max_sessions as usize;
        let mut pool = Vec::new();
        let mut pool_index = HashMap::new();
        for p in pool_prefixes {
            for i in 0..p.size() {
                let addr = p.nth(i);
                pool_index.insert(addr, u32::try_from(pool.len()).unwrap_or(u32::MAX));
                pool.push(PoolAddr::new(addr));
            }
        }
        Napt {
            cfg,
            icmp_ids: (0, u16::MAX),
            spread: spread::Spread::new(&pool),
            pool,
            pool_index,
            pool_prefixes: PrefixSet4::new(pool_prefixes),
            hosts: Hosts::new(max, seed),
            // Sized ahead for the configured maximum (two index entries per session, and at
            // worst a mapping with two BIB entries each): no table grows, or moves, while
            // traffic runs. Mapping records come in chunks as they are needed.
            mappings: Slab::chunked(max),
            folded: 0,
            bib: SidedIndex::with_capacity(max, max * 4),
            sessions: Slab::with_capacity(max),
            flows: SidedIndex::with_capacity(max, max * 2),
            hasher: KeyHasher::new(seed ^ 0x5bd1_e995_7f4a_7c15),
            remotes: Records::new(max, seed ^ 0x9e37_79b9_7f4a_7c15),
            rng: Rng::new(seed),
            sweep_cursor: 0,
            cycle_started: Time(0),
            cycle_found_due: false,
            step_after: Time(0),
            offload: false,
            offload_after: 1,
            hold: None,
            events: crate::events::EventQueue::default(),
            events_dropped_seen: 0,
            pending: Vec::with_capacity(PENDING_MAX),
            pending_mask: [0; 4],
            reclaim_after: Time(0),
            forwards: forward::Forwards::default(),
            alg_port: 0,
            expects: Vec::new(),
        }
    }

    /// True for an address of the pool.
    pub fn is_pool(&self, a: u32) -> bool {
        self.pool_prefixes.contains(a)
    }

    /// Restricts new mappings to the TCP/UDP ports `ports` and ICMP identifiers `icmp_ids`
    /// (inclusive ranges): a worker's slices ([`crate::shard`]). Call before traffic.
    pub fn set_ranges(&mut self, ports: (u16, u16), icmp_ids: (u16, u16)) {
        self.cfg.ports = ports;
        self.icmp_ids = icmp_ids;
    }

    /// The hash of a packet tuple ([`flow_hash`]).
    #[inline]
    fn hash(&self, key: &FlowKey<A>) -> u64 {
        flow_hash(&self.hasher, key)
    }

    /// Hash of a BIB key ([`bib_hash`]).
    #[inline]
    fn bib_hash(&self, proto: Proto, addr: (u64, u64), port: u16, outside: bool) -> u64 {
        bib_hash(&self.hasher, proto, addr, port, outside)
    }
}
