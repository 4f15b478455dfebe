//! NAPT state shared by the stateful translators (NAT44 and NAT64): hosts, mappings (the
//! BIB) and sessions, with port allocation, filtering, the TCP state machine and expiry.
//!
//! Generic over the inside address type (`u32` for NAT44, `u128` for NAT64); the outside and
//! remote sides are always IPv4. Sessions and mapping records hold an IPv6 inside address as
//! its host's number (`Hosts`), so both translators' sessions are 32 bytes. Rules
//! implemented here:
//! - RFC 4787 REQ-1 / RFC 5382 REQ-1 / RFC 6146 3.5.1: endpoint-independent mapping (the BIB
//!   is keyed by the inside endpoint alone);
//! - RFC 4787 REQ-2: paired pooling (a host keeps one outside address);
//! - RFC 4787 REQ-3 / RFC 6056 3.3: port preservation, else a random start in the range;
//! - RFC 4787 5 (REQ-8): endpoint-independent, address-dependent, address-and-port-dependent
//!   filtering;
//! - RFC 4787 REQ-5/REQ-6, RFC 5382 REQ-5, RFC 5508 REQ-2: timeouts and refresh;
//! - RFC 6146 3.5.2.2: TCP states (see [`crate::tcp`]); only SYN creates a TCP session.
//!
//! A mapping lives while it has sessions; its port returns to the pool with the last one.
//! A mapping that has had one session only -- what a client's new port for each connection
//! makes, nearly every mapping -- has no record of its own: it is folded into that session,
//! which holds all of its state (endpoints, expiry, the one remote address it admits), and
//! the BIB points to the session. A second session gives it a record ([`Napt::promote`]).
//! Expiry is lazy (a lookup that finds an expired session removes it) plus a budgeted sweep.

use hashbrown::HashMap;

use crate::config::{Filtering, Limits, Nat44Mode, Prefix4, PrefixSet4, Timeouts};
use crate::counters::{Counters, DropReason, Event};
use crate::flow::{bib_hash, ends_bib_hash, flow_hash, Endpoint, FlowKey, InsideAddr, Proto};
use crate::hosts::Hosts;
use crate::index::{KeyHasher, SidedIndex};
use crate::mem::{Chunks, FixedVec, Store};
use crate::ports::PortMap;
use crate::records::{Record, Records};
use crate::rng::Rng;
use crate::snapshot::{PoolUse, SessionInfo, Stats};
use crate::tcp::{self as tcpsm, Dir, Lifetime, TcpState};
use crate::Time;

/// What [`Napt::host_for`] tells about the host of a new session.
struct HostUse {
    /// Pool index of its outside address.
    pool: u32,
    /// How sessions hold its address ([`Hosts`]).
    held: u32,
    /// It was made for this session.
    new: bool,
}

/// A mapping's endpoints, the inside address also as held ([`Hosts`]).
#[derive(Clone, Copy)]
struct Ends<A> {
    held: u32,
    int: Endpoint<A>,
    ext: Endpoint,
}

/// The record of a BIB entry with more than one session (one with a single session is folded
/// into it: the module docs). Flat fields and a coarse expiry, so a mapping is 36 bytes (it
/// was 48 with `Endpoint`s' padding and nanosecond times, NAT64's 80 with its IPv6 address).
#[derive(Clone, Copy)]
struct Mapping {
    /// The inside address as held ([`Hosts`]).
    int_addr: u32,
    ext_addr: u32,
    sessions: u32,
    /// Latest expiry among its sessions: a mapping whose time has passed admits nothing
    /// inbound even if the sweep has not removed it yet.
    expires: Stamp,
    /// The address-dependent filter's entry for one remote address, kept here because most
    /// mappings talk to one remote address; others go to [`Napt::remotes`].
    remote: RemoteRef,
    int_port: u16,
    ext_port: u16,
    proto: Proto,
}

/// `int()` and `ext()` of a record with flat `int_addr`/`int_port` and `ext_addr`/`ext_port`
/// fields (mappings and sessions keep their endpoints flat to stay small).
macro_rules! flat_endpoints {
    ($t:ident) => {
        impl $t {
            /// Its inside endpoint, the address looked up if held as a host's number.
            #[inline(always)]
            fn int<A: InsideAddr>(&self, hosts: &Hosts<A>) -> Option<Endpoint<A>> {
                Some(Endpoint {
                    addr: hosts.addr(self.int_addr)?,
                    port: self.int_port,
                })
            }
            #[inline]
            fn ext(&self) -> Endpoint {
                Endpoint {
                    addr: self.ext_addr,
                    port: self.ext_port,
                }
            }
            /// The BIB key's hash of its mapping (a session's: the one folded into it) by
            /// the inside (`outside = false`) or outside endpoint.
            fn bib_hash<A: InsideAddr>(
                &self,
                hasher: &KeyHasher,
                outside: bool,
                hosts: &Hosts<A>,
            ) -> Option<u64> {
                Some(ends_bib_hash(
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

flat_endpoints!(Mapping);

/// The expiry of a mapping or a filter entry: the latest expiry of its sessions, in steps of
/// 2^[`PROPAGATE_SHIFT`] ns (0.54 s; a `u32` of them spans 73 years), rounded up -- the steps
/// in which sessions hand their expiry on anyway ([`Napt::propagate`]). Rounding up means a
/// mapping never expires before its sessions do; it may admit inbound packets for up to
/// 0.54 s after its last session's time (RFC 4787 REQ-5's timeouts are minutes).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Stamp(u32);

impl Stamp {
    #[inline]
    fn of(t: Time) -> Stamp {
        let steps = t.0.div_ceil(1 << PROPAGATE_SHIFT);
        Stamp(u32::try_from(steps).unwrap_or(u32::MAX))
    }
    /// Has this expiry come at `now`?
    #[inline]
    fn passed(self, now: Time) -> bool {
        u64::from(self.0) << PROPAGATE_SHIFT <= now.0
    }
}

#[derive(Clone, Copy)]
enum SessState {
    Udp,
    Icmp,
    Tcp(TcpState),
}

flat_endpoints!(Session);

/// A session carries its whole translation (inside, outside and remote endpoints), so the
/// fast path is one index lookup and one session read. Fields are laid out flat (no padded
/// `Endpoint`s) and an IPv6 inside address is held as its host's number ([`Hosts`]), so a
/// session is 32 bytes, aligned to 32: two to a cache line, never split across two.
#[derive(Clone, Copy)]
#[repr(align(32))]
struct Session {
    /// The inside address as held ([`Hosts`]).
    int_addr: u32,
    ext_addr: u32,
    remote_addr: u32,
    /// Its mapping's record, or [`NO_MAP`]: the mapping is folded into this session.
    map: u32,
    /// When it expires; its mapping and remote-address filter entry get this value again only
    /// when it moves into another ~0.54 s step ([`PROPAGATE_SHIFT`]), so a busy flow does not
    /// touch them per packet.
    expires: Time,
    int_port: u16,
    ext_port: u16,
    remote_port: u16,
    /// The protocol is implied: UDP, ICMP or TCP with its state.
    state: SessState,
    /// Its recipes are installed in the fast path ([`crate::offload`]): expiry asks the fast
    /// path when it last saw the session before removing it.
    offloaded: bool,
}

impl Session {
    #[inline]
    fn proto(&self) -> Proto {
        match self.state {
            SessState::Udp => Proto::Udp,
            SessState::Icmp => Proto::Icmp,
            SessState::Tcp(_) => Proto::Tcp,
        }
    }
    #[inline]
    fn remote(&self) -> Endpoint {
        Endpoint {
            addr: self.remote_addr,
            port: self.remote_port,
        }
    }
    /// The tuple this session's packets carry going out (`inbound = false`) or coming in.
    #[inline]
    fn key<A: InsideAddr>(&self, inbound: bool, hosts: &Hosts<A>) -> Option<FlowKey<A>> {
        Some(if inbound {
            FlowKey::In(self.proto(), self.ext(), self.remote())
        } else {
            FlowKey::Out(self.proto(), self.int(hosts)?, self.remote())
        })
    }
    /// Does the packet tuple `key` belong to this session (in the direction `inbound`)?
    /// Without `hosts`, an inside address held as its host's number is not compared (the
    /// caller does: [`Napt::find`]).
    #[inline(always)]
    fn matches<A: InsideAddr>(
        &self,
        key: &FlowKey<A>,
        inbound: bool,
        hosts: Option<&Hosts<A>>,
    ) -> bool {
        match *key {
            FlowKey::Out(p, int, r) => {
                !inbound
                    && self.int_port == int.port
                    && self.remote_addr == r.addr
                    && self.remote_port == r.port
                    && self.proto() == p
                    && match A::from_held(self.int_addr) {
                        Some(a) => a == int.addr,
                        None => hosts.is_none_or(|h| h.addr(self.int_addr) == Some(int.addr)),
                    }
            }
            FlowKey::In(p, ext, r) => {
                inbound
                    && self.ext_addr == ext.addr
                    && self.ext_port == ext.port
                    && self.remote_addr == r.addr
                    && self.remote_port == r.port
                    && self.proto() == p
            }
        }
    }
}

/// A session's expiry is copied to its mapping and filter entry when it moves into another
/// step of 2^29 ns (0.54 s): they lag it by less than that.
const PROPAGATE_SHIFT: u32 = 29;

/// A session's change that a fast path must follow ([`crate::offload`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffloadEvent<A> {
    pub kind: crate::offload::OffloadKind,
    pub sid: u32,
    pub proto: Proto,
    pub int: Endpoint<A>,
    pub ext: Endpoint,
    pub remote: Endpoint,
}

/// Remote addresses a mapping has sessions with: the address-dependent filter (RFC 4787 5).
#[derive(Clone, Copy)]
struct RemoteRef {
    addr: u32,
    sessions: u32,
    expires: Stamp,
}

/// A filter entry of a mapping for a remote address other than the one the mapping holds
/// ([`Napt::remotes`]): live while it has sessions.
#[derive(Clone, Copy)]
struct SpilledRemote {
    map: u32,
    r: RemoteRef,
}

impl Record for SpilledRemote {
    type Key = (u32, u32);
    #[inline(always)]
    fn key(&self) -> (u32, u32) {
        (self.map, self.r.addr)
    }
    #[inline(always)]
    fn live(&self) -> bool {
        self.r.sessions > 0
    }
    /// Its expiry is the link.
    fn release(&mut self, next: u32) {
        self.r.sessions = 0;
        self.r.expires = Stamp(next);
    }
    fn next_free(&self) -> u32 {
        self.r.expires.0
    }
    /// The fourth word marks a (mapping, remote address) key.
    #[inline]
    fn words((map, addr): (u32, u32)) -> [u64; 4] {
        [u64::from(map), u64::from(addr), 0, 5 << 40]
    }
}

struct PoolAddr {
    addr: u32,
    hosts: u32,
    ports: [PortMap; 3],
}

/// A slot of a [`Slab`]: an entry, or a link in the list of free slots.
enum Slot<T> {
    Used(T),
    /// The next free slot ([`NO_SLOT`]: none).
    Free(u32),
}

/// The end of a [`Slab`]'s free list.
const NO_SLOT: u32 = u32::MAX;

/// No candidate session entry ([`Napt::prefetch_session`]): index values stop below it.
pub(crate) const NO_CAND: u32 = u32::MAX;

/// A session's `map` when its mapping has no record but is folded into it.
const NO_MAP: u32 = u32::MAX;

/// What a BIB entry leads to: a mapping's record, or the session a mapping is folded into.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Owner {
    Mapping(u32),
    Session(u32),
}

impl Owner {
    /// The BIB value of the owner's entry by its inside (`outside = false`) or outside
    /// endpoint: `id * 4 + side * 2 + folded`.
    #[inline]
    fn bib_val(self, outside: bool) -> u32 {
        let (id, folded) = match self {
            Owner::Mapping(mid) => (mid, 0),
            Owner::Session(sid) => (sid, 1),
        };
        id << 2 | u32::from(outside) << 1 | folded
    }
    #[inline]
    fn of_bib_val(v: u32) -> Owner {
        if v & 1 == 1 {
            Owner::Session(v >> 2)
        } else {
            Owner::Mapping(v >> 2)
        }
    }
}

/// A vector of slots with a free list; ids stay valid until removed. The slots never move:
/// they are reserved ahead ([`FixedVec`], on huge pages when large: the sessions) or come in
/// chunks allocated as the slab fills ([`Chunks`]: the mapping records, which most mappings
/// never need). The free list runs through the free slots themselves (a `Vec` of free ids
/// grew -- and copied itself -- while a mass expiry freed millions of slots: a 1 ms stall in
/// one expiry pass); a free slot costs no more than an `Option<T>` would (the enum fits in
/// `T`'s unused values: the layout test).
struct Slab<T, S = FixedVec<Slot<T>>> {
    slots: S,
    free: u32,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T> Slab<T> {
    /// A slab with room for `cap` entries allocated ahead.
    fn with_capacity(cap: usize) -> Self {
        Slab::on(FixedVec::with_capacity(cap))
    }
}

impl<T> Slab<T, Chunks<Slot<T>>> {
    /// A slab of up to `cap` entries whose memory is allocated as it fills.
    fn chunked(cap: usize) -> Self {
        Slab::on(Chunks::with_capacity(cap))
    }
}

impl<T, S: Store<Slot<T>>> Slab<T, S> {
    fn on(slots: S) -> Self {
        Slab {
            slots,
            free: NO_SLOT,
            len: 0,
            _t: std::marker::PhantomData,
        }
    }
    fn insert(&mut self, v: T) -> u32 {
        self.len += 1;
        let i = self.free;
        if let Some(s) = self.slots.at_mut(i as usize) {
            if let Slot::Free(next) = *s {
                self.free = next;
                *s = Slot::Used(v);
                return i;
            }
        }
        self.slots.append(Slot::Used(v));
        (self.slots.count() - 1) as u32
    }
    fn remove(&mut self, i: u32) -> Option<T> {
        let s = self.slots.at_mut(i as usize)?;
        if matches!(s, Slot::Free(_)) {
            return None;
        }
        let Slot::Used(v) = std::mem::replace(s, Slot::Free(self.free)) else {
            return None;
        };
        self.free = i;
        self.len -= 1;
        Some(v)
    }
    #[inline]
    fn get(&self, i: u32) -> Option<&T> {
        match self.slots.at(i as usize)? {
            Slot::Used(v) => Some(v),
            Slot::Free(_) => None,
        }
    }
    #[inline]
    fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        match self.slots.at_mut(i as usize)? {
            Slot::Used(v) => Some(v),
            Slot::Free(_) => None,
        }
    }
    fn prefetch(&self, i: u32) {
        if let Some(p) = self.slots.at(i as usize) {
            crate::mem::prefetch(p);
        }
    }
    fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        (0..self.slots.count()).filter_map(|i| match self.slots.at(i)? {
            Slot::Used(v) => Some((i as u32, v)),
            Slot::Free(_) => None,
        })
    }
}

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
}

/// Hosts, BIB and sessions of one stateful translator.
pub struct Napt<A> {
    cfg: NaptConfig,
    /// ICMP query identifiers to choose from: all of them, or a worker's slice
    /// ([`crate::shard`]).
    icmp_ids: (u16, u16),
    pool: Vec<PoolAddr>,
    pool_index: HashMap<u32, u32>,
    pool_prefixes: PrefixSet4,
    /// Inside hosts, and inside addresses by how sessions and mappings hold them.
    hosts: Hosts<A>,
    /// Records of mappings that have had more than one session: allocated as they come
    /// (up to one per session), since most mappings never have one.
    mappings: Slab<Mapping, Chunks<Slot<Mapping>>>,
    /// Mappings folded into their one session (no record).
    folded: usize,
    /// The BIB's index: values are [`Owner::bib_val`]s, a table for each side.
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
    /// Sessions may be handed to a fast path ([`Napt::set_offload`]).
    offload: bool,
    offload_events: Vec<OffloadEvent<A>>,
    /// Index entries of new sessions and mappings waiting to be inserted
    /// ([`Napt::insert_later`]); at most [`PENDING_MAX`].
    pending: Vec<Pending>,
    /// One bit per byte value of `hash >> 16` of the waiting entries: a lookup that misses
    /// the table scans `pending` only when its bit is set.
    pending_mask: [u64; 4],
    /// No reclaiming pass ([`Napt::reclaim`]) before this time: the last one found nothing.
    reclaim_after: Time,
}

/// An index entry whose insertion waits: into the BIB (`bib`) or the session index.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Pending {
    bib: bool,
    hash: u64,
    val: u32,
}

/// How many index insertions may wait ([`Napt::insert_later`]).
const PENDING_MAX: usize = 32;

/// Work units of removing a session in an expiry pass ([`Napt::expire`]), against 1 for a
/// slot looked at: a removal touches about six random cache lines (four index slots, the
/// mapping, the port map) where looking at a slot reads 32 bytes in sequence -- ~300 ns
/// against ~2 ns at 1M sessions (`--bench fill`'s drain). A pass of 1,024 units removes at
/// most 16 sessions.
const REMOVE_COST: usize = 64;
/// A removal's share of an expiry budget, in the units [`Napt::expire`] counts: the
/// removal and the slot looked at to find it.
pub const REMOVE_UNITS: usize = REMOVE_COST + 1;
/// Due sessions an expiry pass removes together, their cache misses overlapped.
const REMOVE_BATCH: usize = 16;
/// The expiry pass a new session runs when the table is full ([`Napt::reclaim`]): up to 64
/// sessions removed, or 4,096 slots looked at.
const RECLAIM_BUDGET: usize = 64 * REMOVE_UNITS;
/// After a reclaiming pass that found nothing due, none for this long (10 ms).
const RECLAIM_BACKOFF_NS: u64 = 10_000_000;

impl Mapping {
    #[inline]
    fn proto(&self) -> Proto {
        self.proto
    }
}

impl<A: InsideAddr> Napt<A> {
    pub fn new(cfg: NaptConfig, pool_prefixes: &[Prefix4], seed: u64) -> Self {
        let max = cfg.limits.max_sessions as usize;
        let mut pool = Vec::new();
        let mut pool_index = HashMap::new();
        for p in pool_prefixes {
            for i in 0..p.size() {
                let addr = p.nth(i);
                pool_index.insert(addr, pool.len() as u32);
                pool.push(PoolAddr {
                    addr,
                    hosts: 0,
                    ports: Default::default(),
                });
            }
        }
        Napt {
            cfg,
            icmp_ids: (0, u16::MAX),
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
            offload: false,
            offload_events: Vec::new(),
            pending: Vec::with_capacity(PENDING_MAX),
            pending_mask: [0; 4],
            reclaim_after: Time(0),
        }
    }

    /// Inserts `val` under `hash` into the BIB (`bib`) or the session index later: starts
    /// fetching its slot now and inserts when [`PENDING_MAX`] entries wait. The inside
    /// entries a new session or mapping is found by right away go in at once; its outside
    /// entries (the session by its inbound tuple, the mapping by its outside endpoint) land in
    /// random slots of large tables, and a run of new sessions then waits for those cache
    /// misses one after the other. Lookups see waiting entries ([`Napt::index_get`]) and
    /// removals take them back ([`Napt::index_remove`]), so nothing else can tell. Only
    /// outside entries wait.
    fn insert_later(&mut self, bib: bool, hash: u64, val: u32) {
        if self.pending.len() >= PENDING_MAX {
            self.flush();
        }
        if bib {
            self.bib.prefetch(true, hash);
            self.bib.prefetch_next_line(true, hash);
        } else {
            self.flows.prefetch(true, hash);
            self.flows.prefetch_next_line(true, hash);
        }
        self.pending.push(Pending { bib, hash, val });
        let b = (hash >> 16) as u8;
        if let Some(w) = self.pending_mask.get_mut(usize::from(b >> 6)) {
            *w |= 1 << (b & 63);
        }
    }

    /// Might an entry with this hash be waiting?
    #[inline]
    fn may_wait(&self, hash: u64) -> bool {
        let b = (hash >> 16) as u8;
        self.pending_mask
            .get(usize::from(b >> 6))
            .is_some_and(|w| w >> (b & 63) & 1 == 1)
    }

    /// Inserts the waiting index entries.
    pub fn flush(&mut self) {
        self.pending_mask = [0; 4];
        for p in self.pending.drain(..) {
            let placed = if p.bib {
                self.bib.insert(p.hash, p.val)
            } else {
                self.flows.insert(p.hash, p.val)
            };
            debug_assert!(placed, "index sized for limits.max_sessions");
        }
    }

    /// `FlowIndex::get` on the BIB (`bib`) or the session index, waiting entries included
    /// when the entry looked for is an outside one (`outside`: a session by its inbound
    /// tuple, a mapping by its outside endpoint) -- only those wait, so a lookup by an
    /// inside tuple or endpoint, which `eq` would never match with one of them, skips them.
    #[inline]
    fn index_get(
        &self,
        bib: bool,
        outside: bool,
        hash: u64,
        eq: impl Fn(u32) -> bool + Copy,
    ) -> Option<u32> {
        let found = if bib {
            self.bib.get(outside, hash, eq)
        } else {
            self.flows.get(outside, hash, eq)
        };
        if found.is_some() || !outside {
            return found;
        }
        self.waiting(bib, hash, eq)
    }

    /// The waiting entry `eq` accepts under `hash`, if any. Out of line: established traffic
    /// finds its entry in the index.
    #[inline(never)]
    fn waiting(&self, bib: bool, hash: u64, eq: impl Fn(u32) -> bool) -> Option<u32> {
        if !self.may_wait(hash) {
            return None;
        }
        self.pending
            .iter()
            .find(|p| p.hash == hash && p.bib == bib && eq(p.val))
            .map(|p| p.val)
    }

    /// `FlowIndex::remove`, or takes the entry back if it is still waiting.
    ///
    /// The index needs the hash of an entry it cannot place from its slot alone (see
    /// [`FlowIndex::remove`]): the records of all entries must still be in their slabs.
    fn index_remove(&mut self, bib: bool, hash: u64, val: u32) {
        let hasher = &self.hasher;
        let sessions = &self.sessions;
        let hosts = &self.hosts;
        let removed = if bib {
            let maps = &self.mappings;
            self.bib.remove(hash, val, |v| {
                let outside = v & 2 == 2;
                match Owner::of_bib_val(v) {
                    Owner::Mapping(mid) => maps.get(mid)?.bib_hash(hasher, outside, hosts),
                    Owner::Session(sid) => sessions.get(sid)?.bib_hash(hasher, outside, hosts),
                }
            })
        } else {
            self.flows.remove(hash, val, |v| {
                let key = sessions.get(v >> 1)?.key(v & 1 == 1, hosts)?;
                Some(flow_hash(hasher, &key))
            })
        };
        if !removed {
            let p = Pending { bib, hash, val };
            self.pending.retain(|q| *q != p);
        }
    }

    /// Gives the BIB entry `old` under `hash` the value `new`, in the index or waiting.
    fn bib_replace(&mut self, hash: u64, old: u32, new: u32) {
        if !self.bib.replace(hash, old, new) {
            if let Some(p) = self
                .pending
                .iter_mut()
                .find(|p| p.bib && p.hash == hash && p.val == old)
            {
                p.val = new;
            }
        }
    }

    /// Lets sessions be handed to a fast path from now on ([`crate::offload`]).
    pub fn set_offload(&mut self, on: bool) {
        self.offload = on;
    }

    /// Takes the fast-path changes accumulated since the last call.
    pub fn drain_offload(&mut self) -> std::vec::Drain<'_, OffloadEvent<A>> {
        self.offload_events.drain(..)
    }

    /// Can a session's packets be rewritten by a fast path? UDP and TCP (established only;
    /// the caller checks the state), not hairpinned (a remote in the pool needs the second
    /// translation only the engine does, RFC 4787 REQ-9).
    fn offloadable(&self, proto: Proto, remote: Endpoint) -> bool {
        self.offload && proto != Proto::Icmp && !self.is_pool(remote.addr)
    }

    fn offload_event(&mut self, kind: crate::offload::OffloadKind, sid: u32) {
        if let Some(&s) = self.sessions.get(sid) {
            self.push_offload(kind, sid, &s);
        }
    }

    /// Queues a fast-path change for session `sid`, which is `s`.
    fn push_offload(&mut self, kind: crate::offload::OffloadKind, sid: u32, s: &Session) {
        if let Some(int) = s.int(&self.hosts) {
            self.offload_events.push(OffloadEvent {
                kind,
                sid,
                proto: s.proto(),
                int,
                ext: s.ext(),
                remote: s.remote(),
            });
        }
    }

    /// The fast path's answer to [`OffloadKind::Query`](crate::offload::OffloadKind::Query):
    /// when it last saw the session's packets going out and coming in. Refreshes the session
    /// as those packets would have (RFC 4787 REQ-6: outbound refreshes, inbound only with
    /// `inbound_refresh`; RFC 6146 3.5.2.2: an established TCP session by either direction),
    /// then removes it if it is still past its time. Returns true if it was removed.
    pub fn offload_seen(
        &mut self,
        now: Time,
        sid: u32,
        out_seen: Option<Time>,
        in_seen: Option<Time>,
        c: &mut Counters,
    ) -> bool {
        let t = self.cfg.timeouts;
        let inbound_refresh = self.cfg.inbound_refresh;
        let Some(s) = self.sessions.get_mut(sid) else {
            return false;
        };
        if !s.offloaded {
            return false;
        }
        let (life, both) = match s.state {
            SessState::Udp => (t.udp, inbound_refresh),
            SessState::Icmp => (t.icmp, inbound_refresh),
            SessState::Tcp(TcpState::Established) => (t.tcp_established, true),
            SessState::Tcp(_) => (t.tcp_transitory, true),
        };
        let last = match (out_seen, in_seen.filter(|_| both)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let Some(e) = last.map(|l| l.plus_secs(life)).filter(|&e| e > s.expires) {
            s.expires = e;
            let (mid, raddr) = (s.map, s.remote_addr);
            self.propagate(mid, raddr, e);
            c.event(Event::OffloadRefreshed);
        }
        if self.sessions.get(sid).is_some_and(|s| s.expires <= now) {
            self.remove_session(sid);
            c.event(Event::SessionsExpired);
            return true;
        }
        false
    }

    /// True for an address of the pool.
    pub fn is_pool(&self, a: u32) -> bool {
        self.pool_prefixes.contains(a)
    }

    /// An outbound packet of flow `int` -> `remote`: finds or creates its session (RFC 4787
    /// REQ-1 endpoint-independent mapping) and returns the outside endpoint to write.
    pub fn outbound(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        remote: Endpoint,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Endpoint, DropReason> {
        let remote = Endpoint {
            addr: remote.addr,
            port: proto.remote_port(remote.port),
        };
        self.live_or_new(now, FlowKey::Out(proto, int, remote), tcp_flags, c)
            .map(|t| t.ext)
    }

    /// [`Napt::outbound`] and [`Napt::inbound`] for the (normalised) tuple `key`: its live
    /// session refreshed, or a new one made where the full path makes one ([`Napt::renew`]).
    #[inline(always)]
    fn live_or_new(
        &mut self,
        now: Time,
        key: FlowKey<A>,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        let hash = self.hash(&key);
        if let Some(sid) = self.live(&key, hash, now, c) {
            return self
                .touch(sid, now, &key, tcp_flags)
                .ok_or(DropReason::NoMapping);
        }
        self.renew(now, &key, hash, tcp_flags, None, c)
    }

    /// What [`Napt::outbound`] does for a flow with no live session: makes one, on the
    /// inside endpoint's mapping or a new one (RFC 4787 REQ-1), or says why not. `remote`
    /// is normalised ([`Proto::remote_port`]); `hash` is the hash of the outbound tuple.
    #[allow(clippy::too_many_arguments)]
    fn create_out(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        remote: Endpoint,
        tcp_flags: u8,
        hash: u64,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        // RFC 6146 3.5.2.2 (and RFC 5382): only a SYN opens a TCP session.
        if proto == Proto::Tcp && tcp_flags & tcpsm::SYN == 0 {
            return Err(DropReason::TcpNoSession);
        }
        if self.sessions.len >= self.cfg.limits.max_sessions as usize && !self.reclaim(now, c) {
            return Err(DropReason::SessionLimit);
        }
        // The endpoint's mapping, if it has one (a lookup only: nothing changes yet).
        let h_bib = self.bib_hash(proto, int.addr.words(), int.port, false);
        let found = self.bib_by_inside(proto, int, h_bib);
        let new_maps = u32::from(found.is_none());
        let host = self.host_for(int.addr, new_maps)?;
        let Some(owner) = found else {
            // A new mapping, folded into the session it is made for.
            let ext = match self.take_port(proto, int, host.pool, c) {
                Ok(ext) => ext,
                Err(e) => {
                    self.unhost(int.addr, host.new, new_maps);
                    return Err(e);
                }
            };
            let ends = Ends {
                held: host.held,
                int,
                ext,
            };
            let (sid, t) = self.create_session(NO_MAP, ends, remote, proto, Dir::Out, now, hash, c);
            let placed = self.bib.insert(h_bib, Owner::Session(sid).bib_val(false));
            debug_assert!(placed, "index sized for limits.max_sessions");
            let h_ext = self.bib_hash(proto, (u64::from(ext.addr), 0), ext.port, true);
            self.insert_later(true, h_ext, Owner::Session(sid).bib_val(true));
            self.folded += 1;
            c.event(Event::MappingsCreated);
            return Ok(t);
        };
        match self.promote(owner) {
            Some((mid, ends)) => Ok(self
                .create_session(mid, ends, remote, proto, Dir::Out, now, hash, c)
                .1),
            None => {
                self.unhost(int.addr, false, 0);
                Err(DropReason::NoMapping)
            }
        }
    }

    /// The record of `owner`'s mapping, made now if the mapping is folded into its session
    /// (which keeps its place in the BIB no longer), and the mapping's endpoints.
    fn promote(&mut self, owner: Owner) -> Option<(u32, Ends<A>)> {
        let sid = match owner {
            Owner::Mapping(mid) => {
                let m = self.mappings.get(mid)?;
                let ends = Ends {
                    held: m.int_addr,
                    int: m.int(&self.hosts)?,
                    ext: m.ext(),
                };
                return Some((mid, ends));
            }
            Owner::Session(sid) => sid,
        };
        let s = *self.sessions.get(sid)?;
        let ends = Ends {
            held: s.int_addr,
            int: s.int(&self.hosts)?,
            ext: s.ext(),
        };
        // All it has been is this one session's: its expiry, and this remote address.
        let stamp = Stamp::of(s.expires);
        let mid = self.mappings.insert(Mapping {
            int_addr: s.int_addr,
            ext_addr: s.ext_addr,
            sessions: 1,
            expires: stamp,
            remote: RemoteRef {
                addr: s.remote_addr,
                sessions: 1,
                expires: stamp,
            },
            int_port: s.int_port,
            ext_port: s.ext_port,
            proto: s.proto(),
        });
        for outside in [false, true] {
            let h = ends_bib_hash(&self.hasher, s.proto(), ends.int, ends.ext, outside);
            self.bib_replace(
                h,
                owner.bib_val(outside),
                Owner::Mapping(mid).bib_val(outside),
            );
        }
        if let Some(s) = self.sessions.get_mut(sid) {
            s.map = mid;
        }
        self.folded = self.folded.saturating_sub(1);
        Some((mid, ends))
    }

    /// An inbound packet from `remote` to the outside endpoint `ext`: finds its session or,
    /// where the filtering policy admits the remote (RFC 4787 5, REQ-8), creates one; returns
    /// the inside endpoint to write.
    pub fn inbound(
        &mut self,
        now: Time,
        proto: Proto,
        ext: Endpoint,
        remote: Endpoint,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Endpoint<A>, DropReason> {
        let remote = Endpoint {
            addr: remote.addr,
            port: proto.remote_port(remote.port),
        };
        self.live_or_new(now, FlowKey::In(proto, ext, remote), tcp_flags, c)
            .map(|t| t.int)
    }

    /// What [`Napt::inbound`] does for a flow with no live session: makes one where the
    /// mapping of `ext` is live and the filtering policy admits `remote` (RFC 4787 5,
    /// REQ-8), or says why not. `remote` is normalised ([`Proto::remote_port`]); `hash` is
    /// the hash of the inbound tuple.
    #[allow(clippy::too_many_arguments)]
    fn create_in(
        &mut self,
        now: Time,
        proto: Proto,
        ext: Endpoint,
        remote: Endpoint,
        tcp_flags: u8,
        hash: u64,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        let owner = self
            .bib_by_outside(proto, ext)
            .ok_or(DropReason::NoMapping)?;
        // The mapping's expiry, inside address and filter entry for `remote.addr`; its
        // sessions may have expired (and will take it with them).
        let (expires, held, filter) = match owner {
            Owner::Mapping(mid) => {
                let m = self.mappings.get(mid).ok_or(DropReason::NoMapping)?;
                let r = self.remote_ref(mid, remote.addr).map(|r| r.expires);
                (m.expires, m.int_addr, r)
            }
            Owner::Session(sid) => {
                let s = self.sessions.get(sid).ok_or(DropReason::NoMapping)?;
                let e = Stamp::of(s.expires);
                (e, s.int_addr, (s.remote_addr == remote.addr).then_some(e))
            }
        };
        if expires.passed(now) {
            return Err(DropReason::NoMapping);
        }
        let int_addr = self.hosts.addr(held).ok_or(DropReason::NoMapping)?;
        let admitted = match self.cfg.filtering {
            Filtering::EndpointIndependent => true,
            Filtering::AddressDependent => filter.is_some_and(|e| !e.passed(now)),
            Filtering::AddressAndPortDependent => false,
        };
        if !admitted {
            return Err(DropReason::Filtered);
        }
        if proto == Proto::Tcp && tcp_flags & tcpsm::SYN == 0 {
            return Err(DropReason::TcpNoSession);
        }
        if self.sessions.len >= self.cfg.limits.max_sessions as usize && !self.reclaim(now, c) {
            return Err(DropReason::SessionLimit);
        }
        // The host's session limit checked and its count taken in one lookup.
        let limit = self.cfg.limits.max_sessions_per_host;
        let num = self.hosts.number_of_held(held);
        if let Some(h) = num.and_then(|num| self.hosts.get_mut(num)) {
            if h.sessions >= limit {
                return Err(DropReason::HostSessionLimit);
            }
            h.sessions += 1;
        }
        match self.promote(owner) {
            Some((mid, ends)) => Ok(self
                .create_session(mid, ends, remote, proto, Dir::In, now, hash, c)
                .1),
            None => {
                self.unhost(int_addr, false, 0);
                Err(DropReason::NoMapping)
            }
        }
    }

    /// The outside endpoint of the live session `int` <-> `remote`, without creating or
    /// refreshing anything (RFC 5508 REQ-6: ICMP errors do not refresh sessions).
    pub fn find_by_inside(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        remote: Endpoint,
        c: &mut Counters,
    ) -> Option<Endpoint> {
        let remote = Endpoint {
            addr: remote.addr,
            port: proto.remote_port(remote.port),
        };
        let key = FlowKey::Out(proto, int, remote);
        let sid = self.live(&key, self.hash(&key), now, c)?;
        self.sessions.get(sid).map(|s| s.ext())
    }

    /// The inside endpoint of the live session `ext` <-> `remote`; see [`Napt::find_by_inside`].
    pub fn find_by_outside(
        &mut self,
        now: Time,
        proto: Proto,
        ext: Endpoint,
        remote: Endpoint,
        c: &mut Counters,
    ) -> Option<Endpoint<A>> {
        let remote = Endpoint {
            addr: remote.addr,
            port: proto.remote_port(remote.port),
        };
        let key = FlowKey::In(proto, ext, remote);
        let sid = self.live(&key, self.hash(&key), now, c)?;
        self.sessions.get(sid)?.int(&self.hosts)
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

    /// The mapping of an inside endpoint (RFC 4787 REQ-1: one per endpoint and protocol).
    /// `h` is its [`Napt::bib_hash`].
    fn bib_by_inside(&self, proto: Proto, int: Endpoint<A>, h: u64) -> Option<Owner> {
        self.index_get(true, false, h, |v| {
            v & 2 == 0
                && self
                    .owner_ends(Owner::of_bib_val(v), proto)
                    .is_some_and(|(held, port, _)| {
                        port == int.port && self.hosts.addr(held) == Some(int.addr)
                    })
        })
        .map(Owner::of_bib_val)
    }

    /// The inside address (as held), inside port and outside endpoint of `owner`'s mapping
    /// if it is one for `proto`.
    #[inline]
    fn owner_ends(&self, owner: Owner, proto: Proto) -> Option<(u32, u16, Endpoint)> {
        match owner {
            Owner::Mapping(mid) => {
                let m = self.mappings.get(mid).filter(|m| m.proto == proto)?;
                Some((m.int_addr, m.int_port, m.ext()))
            }
            Owner::Session(sid) => {
                let s = self
                    .sessions
                    .get(sid)
                    .filter(|s| s.map == NO_MAP && s.proto() == proto)?;
                Some((s.int_addr, s.int_port, s.ext()))
            }
        }
    }

    /// The mapping that holds an outside endpoint.
    fn bib_by_outside(&self, proto: Proto, ext: Endpoint) -> Option<Owner> {
        let h = self.bib_hash(proto, (u64::from(ext.addr), 0), ext.port, true);
        self.index_get(true, true, h, |v| {
            v & 2 == 2
                && self
                    .owner_ends(Owner::of_bib_val(v), proto)
                    .is_some_and(|(_, _, e)| e == ext)
        })
        .map(Owner::of_bib_val)
    }

    /// The filter entry of mapping `mid` for a remote address, if it has sessions with it.
    fn remote_ref(&self, mid: u32, raddr: u32) -> Option<&RemoteRef> {
        let m = self.mappings.get(mid)?;
        if m.remote.sessions > 0 && m.remote.addr == raddr {
            return Some(&m.remote);
        }
        self.spilled_ref(mid, raddr)
    }

    /// [`Napt::remote_ref`] in [`Napt::remotes`]. Out of line: rare.
    #[inline(never)]
    fn spilled_ref(&self, mid: u32, raddr: u32) -> Option<&RemoteRef> {
        let num = self.remotes.number((mid, raddr))?;
        self.remotes.get(num).map(|s| &s.r)
    }

    /// Copies a session's new expiry `e` to its mapping and filter entry.
    /// Nothing for a folded mapping: its session's expiry is its own.
    fn propagate(&mut self, mid: u32, raddr: u32, e: Time) {
        if mid == NO_MAP {
            return;
        }
        let e = Stamp::of(e);
        if let Some(m) = self.mappings.get_mut(mid) {
            m.expires = m.expires.max(e);
            if m.remote.sessions > 0 && m.remote.addr == raddr {
                m.remote.expires = m.remote.expires.max(e);
                return;
            }
        }
        self.propagate_spilled(mid, raddr, e);
    }

    /// [`Napt::propagate`] to a filter entry in [`Napt::remotes`]. Out of line: rare, and
    /// inlined its lookup cost the established path 16-24 instructions a packet.
    #[inline(never)]
    fn propagate_spilled(&mut self, mid: u32, raddr: u32, e: Stamp) {
        if let Some(s) = self.remotes.find_mut((mid, raddr)) {
            s.r.expires = s.r.expires.max(e);
        }
    }

    /// Batch stage 1: starts fetching the index slot of a tuple; returns its hash.
    pub fn prefetch_index(&self, key: &FlowKey<A>) -> u64 {
        let h = self.hash(key);
        self.flows.prefetch(matches!(key, FlowKey::In(..)), h);
        h
    }

    /// Batch stage 2: starts fetching the session the index (probably) points to and
    /// returns its id, the candidate stage 3 tries before probing the index again
    /// ([`Napt::find`]); [`NO_CAND`] when the index has none for `hash`, the hash of `key`.
    #[inline]
    pub fn prefetch_session(&self, key: &FlowKey<A>, hash: u64) -> u32 {
        // The side's table holds session ids (its values without the direction bit).
        match self.flows.peek(matches!(key, FlowKey::In(..)), hash) {
            Some(sid) => {
                self.sessions.prefetch(sid);
                sid
            }
            None => self.prefetch_waiting(hash),
        }
    }

    /// More inside hosts than stay in cache ([`crate::hosts::CACHED`])?
    #[inline]
    pub fn hosts_beyond_cache(&self) -> bool {
        self.hosts.beyond_cache()
    }

    /// Batch stage 2b: starts fetching the host record of session `sid`, the candidate
    /// stage 2 returned, when it holds its inside address as a host's number (NAT64:
    /// stage 3 reads the address to check or write it). Reads the session, whose line stage
    /// 2 started fetching.
    #[inline]
    pub fn prefetch_host(&self, sid: u32) {
        if let Some(s) = self.sessions.get(sid) {
            self.hosts.prefetch(s.int_addr);
        }
    }

    /// [`Napt::prefetch_session`] for a session created a moment ago whose inbound entry
    /// still waits ([`Napt::insert_later`]). Out of line: established traffic finds its
    /// entry in the index.
    #[inline(never)]
    fn prefetch_waiting(&self, hash: u64) -> u32 {
        if !self.may_wait(hash) {
            return NO_CAND;
        }
        match self.pending.iter().find(|p| p.hash == hash && !p.bib) {
            Some(p) => {
                self.sessions.prefetch(p.val >> 1);
                p.val >> 1
            }
            None => NO_CAND,
        }
    }

    /// The session of `key`, whose hash is `hash`: `cand`, the session batch stage 2 peeked
    /// at ([`Napt::prefetch_session`]), when it is that session -- then the index is not
    /// probed a second time -- else an index lookup (of session ids: the side's table).
    /// Trying `cand` first is safe even if earlier packets of the batch changed the index
    /// since: a session whose tuple is `key` is the one the index holds under `key`.
    ///
    /// An IPv6 inside address ([`Hosts`]) is compared once, with the session found by
    /// the rest of the tuple: in the probe's comparison it made that too large to inline (a
    /// call per candidate, 14-22 instructions a NAT64 packet).
    #[inline(always)]
    fn find(&self, key: &FlowKey<A>, hash: u64, cand: u32) -> Option<u32> {
        let sessions = &self.sessions;
        let inbound = matches!(key, FlowKey::In(..));
        let eq = |sid: u32| {
            sessions
                .get(sid)
                .is_some_and(|s| s.matches(key, inbound, None))
        };
        let sid = if cand != NO_CAND && eq(cand) {
            cand
        } else if let Some(sid) = self.flows.get_ids(inbound, hash, eq) {
            sid
        } else if inbound {
            // Only inbound entries wait.
            self.waiting(false, hash, |v| eq(v >> 1))? >> 1
        } else {
            return None;
        };
        if self.inside_addr_matches(sid, key) {
            Some(sid)
        } else {
            self.find_exact(key, hash)
        }
    }

    /// Is the inside address of session `sid` the one of the outbound tuple `key`? True
    /// when [`Session::matches`] compared it already (held as itself) or `key` is inbound.
    #[inline(always)]
    fn inside_addr_matches(&self, sid: u32, key: &FlowKey<A>) -> bool {
        match *key {
            FlowKey::Out(_, int, _) => {
                A::from_held(0).is_some()
                    || self
                        .sessions
                        .get(sid)
                        .is_some_and(|s| self.hosts.addr(s.int_addr) == Some(int.addr))
            }
            FlowKey::In(..) => true,
        }
    }

    /// The session of `key` (hash `h`), whole tuples compared: [`Napt::find`] when another
    /// host's session matched all but the inside address. Out of line: rare.
    #[inline(never)]
    fn find_exact(&self, key: &FlowKey<A>, h: u64) -> Option<u32> {
        let (sessions, hosts) = (&self.sessions, &self.hosts);
        let inbound = matches!(key, FlowKey::In(..));
        self.index_get(false, inbound, h, |v| {
            sessions
                .get(v >> 1)
                .is_some_and(|s| s.matches(key, v & 1 == 1, Some(hosts)))
        })
        .map(|v| v >> 1)
    }

    /// Batch stage 2 for a tuple the session index has no candidate for (most likely a new
    /// flow): starts fetching the BIB slot its mapping lookup will probe -- the inside
    /// endpoint's going out (RFC 4787 REQ-1: the mapping a new session reuses, or where a new
    /// one goes), the outside endpoint's coming in -- so creating the session waits for one
    /// memory access less. Out of line: established traffic never calls it.
    /// Also the line after the session index's home slot for `hash` (the tuple's, from stage
    /// 1): the full path's lookup of a new tuple and the insertion that follows read the run
    /// up to an empty slot.
    #[inline(never)]
    pub fn prefetch_new(&self, key: &FlowKey<A>, hash: u64) {
        let inbound = matches!(key, FlowKey::In(..));
        self.flows.prefetch_next_line(inbound, hash);
        let h = match *key {
            FlowKey::Out(proto, int, _) => {
                // A new mapping looks its host up by address.
                self.hosts.prefetch_addr(int.addr);
                self.bib_hash(proto, int.addr.words(), int.port, false)
            }
            FlowKey::In(proto, ext, _) => {
                self.bib_hash(proto, (u64::from(ext.addr), 0), ext.port, true)
            }
        };
        self.bib.prefetch(inbound, h);
        self.bib.prefetch_next_line(inbound, h);
    }

    /// The established-flow lane's lookup: the session of `key` (whose hash the caller
    /// computed in batch stage 1), refreshed by [`Napt::touch`] exactly as
    /// [`Napt::outbound`] / [`Napt::inbound`] refresh a live session they find. `None`,
    /// with nothing changed, when there is no live session: the full path then finds out
    /// why (a new session, lazy expiry, filtering) and counts it.
    #[inline]
    pub(crate) fn lane(
        &mut self,
        now: Time,
        key: &FlowKey<A>,
        hash: u64,
        cand: u32,
        tcp_flags: u8,
    ) -> Option<Translation<A>> {
        let sid = self.find(key, hash, cand)?;
        // As in `live`: an offloaded session is live until the sweep asks the fast path.
        if !self
            .sessions
            .get(sid)
            .is_some_and(|s| s.expires > now || s.offloaded)
        {
            return None;
        }
        self.touch(sid, now, key, tcp_flags)
    }

    /// What [`Napt::outbound`] / [`Napt::inbound`] do for the packet tuple `key` (whose
    /// remote port is normalised, [`Proto::remote_port`]; `hash` its stage-1 hash), for a
    /// lane whose packet the full path would hand straight to them: one index lookup, then
    /// the live session refreshed as [`Napt::lane`] does, or an expired one removed (lazy
    /// expiry) and a new session made where they would make one -- or the reason they
    /// would drop the packet.
    #[inline]
    pub(crate) fn lane_or_new(
        &mut self,
        now: Time,
        key: &FlowKey<A>,
        hash: u64,
        cand: u32,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        let found = self.find(key, hash, cand);
        if let Some(sid) = found {
            // As in `live`: an offloaded session is live until the sweep asks the fast path.
            if self
                .sessions
                .get(sid)
                .is_some_and(|s| s.expires > now || s.offloaded)
            {
                return self
                    .touch(sid, now, key, tcp_flags)
                    .ok_or(DropReason::NoMapping);
            }
        }
        self.renew(now, key, hash, tcp_flags, found, c)
    }

    /// [`Napt::lane_or_new`] with no live session: the expired one `stale` removed, then a
    /// new one made. Out of line: established traffic finds its session.
    #[inline(never)]
    fn renew(
        &mut self,
        now: Time,
        key: &FlowKey<A>,
        hash: u64,
        tcp_flags: u8,
        stale: Option<u32>,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        if let Some(sid) = stale {
            self.remove_session(sid);
            c.event(Event::SessionsExpired);
        }
        match *key {
            FlowKey::Out(proto, int, remote) => {
                self.create_out(now, proto, int, remote, tcp_flags, hash, c)
            }
            FlowKey::In(proto, ext, remote) => {
                self.create_in(now, proto, ext, remote, tcp_flags, hash, c)
            }
        }
    }

    /// [`Napt::lane`] for the tuple `key` the full parse found, if it is the `planned` one
    /// whose hash is `hash` (else `None`: the full path runs).
    #[inline]
    pub(crate) fn lane_for(
        &mut self,
        now: Time,
        key: FlowKey<A>,
        planned: &FlowKey<A>,
        hash: u64,
        cand: u32,
        tcp_flags: u8,
    ) -> Option<Translation<A>> {
        if key != *planned {
            return None;
        }
        self.lane(now, planned, hash, cand, tcp_flags)
    }

    /// The session of `key` (whose hash is `h`), live or not.
    fn lookup(&self, key: &FlowKey<A>, h: u64) -> Option<u32> {
        self.find_exact(key, h)
    }

    /// The session a packet tuple belongs to, if it is live; an expired one found here is
    /// removed (lazy expiry).
    fn live(&mut self, key: &FlowKey<A>, hash: u64, now: Time, c: &mut Counters) -> Option<u32> {
        let sid = self.lookup(key, hash)?;
        // An offloaded session's last packets may have crossed the fast path only: the sweep
        // asks it before expiring the session (`offload_seen`), so it is live until then.
        if self
            .sessions
            .get(sid)
            .is_some_and(|s| s.expires > now || s.offloaded)
        {
            return Some(sid);
        }
        self.remove_session(sid);
        c.event(Event::SessionsExpired);
        None
    }

    /// The pool address of an inside host, with one more session and `new_maps` more
    /// mappings counted for it, and whether the host is new: one table lookup for the
    /// host's session limit, its address and its counts ([`Napt::unhost`] takes them back).
    /// A new host is paired with a pool address (RFC 4787 REQ-2 paired pooling: one inside
    /// address always uses the same outside address); in pool mode the address is the
    /// host's alone (RFC 3022 2.1 Basic NAT).
    fn host_for(&mut self, int_addr: A, new_maps: u32) -> Result<HostUse, DropReason> {
        let limit = self.cfg.limits.max_sessions_per_host;
        if let Some(num) = self.hosts.number(int_addr) {
            let held = int_addr.as_held().unwrap_or(num);
            let h = self.hosts.get_mut(num).ok_or(DropReason::NoMapping)?;
            if h.sessions >= limit {
                return Err(DropReason::HostSessionLimit);
            }
            h.sessions += 1;
            h.mappings += new_maps;
            return Ok(HostUse {
                pool: h.pool,
                held,
                new: false,
            });
        }
        let pool = &mut self.pool;
        let n = pool.len() as u64;
        if n == 0 {
            return Err(DropReason::PoolExhausted);
        }
        let start = self.rng.below(n);
        let pick = match self.cfg.mode {
            Nat44Mode::Pool => (0..n)
                .map(|i| ((start + i) % n) as u32)
                .find(|&i| pool.get(i as usize).is_some_and(|p| p.hosts == 0))
                .ok_or(DropReason::PoolExhausted)?,
            _ => start as u32,
        };
        // No more hosts than sessions: `limits.max_sessions` was checked before.
        let num = self
            .hosts
            .insert(int_addr, pick, new_maps, 1)
            .ok_or(DropReason::SessionLimit)?;
        if let Some(p) = self.pool.get_mut(pick as usize) {
            p.hosts += 1;
        }
        Ok(HostUse {
            pool: pick,
            held: int_addr.as_held().unwrap_or(num),
            new: true,
        })
    }

    /// Takes back what [`Napt::host_for`] (or `create_in`) counted for a session that was
    /// not made: the host itself when it was new.
    #[cold]
    fn unhost(&mut self, int_addr: A, host_new: bool, new_maps: u32) {
        let Some(num) = self.hosts.number(int_addr) else {
            return;
        };
        if host_new {
            self.release_host(num);
        } else if let Some(h) = self.hosts.get_mut(num) {
            h.sessions = h.sessions.saturating_sub(1);
            h.mappings = h.mappings.saturating_sub(new_maps);
        }
    }

    /// Releases host `num` and its pool address pairing.
    fn release_host(&mut self, num: u32) {
        if let Some(pool) = self.hosts.get(num).map(|h| h.pool) {
            self.hosts.remove(num);
            if let Some(p) = self.pool.get_mut(pool as usize) {
                p.hosts = p.hosts.saturating_sub(1);
            }
        }
    }

    /// The outside endpoint of a new mapping of `int`, its port taken from the pool address
    /// `pool_ix` per RFC 4787 REQ-3 / RFC 6056: the inside port if free and in range, else
    /// from a random point in the range. The host has counted the mapping already
    /// ([`Napt::host_for`]).
    fn take_port(
        &mut self,
        proto: Proto,
        int: Endpoint<A>,
        pool_ix: u32,
        c: &mut Counters,
    ) -> Result<Endpoint, DropReason> {
        // ICMP identifiers are not ports: any value may be kept or chosen (RFC 5508 3.1).
        let (lo, hi) = match proto {
            Proto::Icmp => self.icmp_ids,
            _ => self.cfg.ports,
        };
        let span = u64::from(hi - lo) + 1;
        let start = lo.wrapping_add(self.rng.below(span) as u16);
        let mode = self.cfg.mode;
        let p = self
            .pool
            .get_mut(pool_ix as usize)
            .ok_or(DropReason::PoolExhausted)?;
        let ports = p
            .ports
            .get_mut(proto as usize)
            .ok_or(DropReason::PoolExhausted)?;
        let port = match mode {
            // Basic NAT keeps every port: the address is this host's alone.
            Nat44Mode::Pool if ports.take_exact(int.port) => int.port,
            _ => ports
                .take(int.port, lo, hi, start)
                .ok_or(DropReason::PoolExhausted)?,
        };
        if port == int.port {
            c.event(Event::PortsPreserved);
        }
        Ok(Endpoint { addr: p.addr, port })
    }

    /// Makes a session of mapping `mid` (the record's; [`NO_MAP`]: a new mapping folded into
    /// this session) between its endpoints `ends` and `remote` (normalised,
    /// [`Proto::remote_port`]);
    /// `hash` is the hash of its tuple in the direction `dir` of the packet that opens it.
    /// Its host has counted it already ([`Napt::host_for`], `create_in`). Returns its id.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn create_session(
        &mut self,
        mid: u32,
        ends: Ends<A>,
        remote: Endpoint,
        proto: Proto,
        dir: Dir,
        now: Time,
        hash: u64,
        c: &mut Counters,
    ) -> (u32, Translation<A>) {
        let Ends { held, int, ext } = ends;
        let t = &self.cfg.timeouts;
        let (state, life) = match proto {
            Proto::Udp => (SessState::Udp, t.udp),
            Proto::Icmp => (SessState::Icmp, t.icmp),
            Proto::Tcp => (SessState::Tcp(tcpsm::initial(dir)), t.tcp_transitory),
        };
        let expires = now.plus_secs(life);
        // UDP goes to the fast path at once; TCP when it is established (see `touch`).
        let offloaded = proto == Proto::Udp && self.offloadable(proto, remote);
        let sid = self.sessions.insert(Session {
            int_addr: held,
            ext_addr: ext.addr,
            remote_addr: remote.addr,
            map: mid,
            expires,
            int_port: int.port,
            ext_port: ext.port,
            remote_port: remote.port,
            state,
            offloaded,
        });
        if offloaded {
            self.offload_event(crate::offload::OffloadKind::Install, sid);
        }
        // The opening packet's tuple was hashed by the caller; the other one is hashed here.
        let (h_out, h_in) = match dir {
            Dir::Out => (hash, self.hash(&FlowKey::In(proto, ext, remote))),
            Dir::In => (self.hash(&FlowKey::Out(proto, int, remote)), hash),
        };
        let placed = self.flows.insert(h_out, sid * 2);
        debug_assert!(placed, "index sized for limits.max_sessions");
        self.insert_later(false, h_in, sid * 2 + 1);
        if mid != NO_MAP {
            self.count_session(mid, remote.addr, Stamp::of(expires));
        }
        c.event(Event::SessionsCreated);
        (sid, Translation { int, ext })
    }

    /// Updates state and lifetime for a packet of an existing session (RFC 4787 REQ-6:
    /// outbound refreshes; inbound does when `inbound_refresh`; RFC 6146 3.5.2.2 for TCP) and
    /// returns it. The caller found `sid` live just before, by the packet tuple `key`.
    #[inline(always)]
    fn touch(
        &mut self,
        sid: u32,
        now: Time,
        key: &FlowKey<A>,
        flags: u8,
    ) -> Option<Translation<A>> {
        let t = self.cfg.timeouts;
        let inbound_refresh = self.cfg.inbound_refresh;
        let s = self.sessions.get_mut(sid)?;
        // Going out, the inside endpoint is the packet's: an IPv6 address is looked up only
        // coming in ([`Hosts`]).
        let (dir, int) = match *key {
            FlowKey::Out(_, int, _) => (Dir::Out, int),
            FlowKey::In(..) => (Dir::In, s.int(&self.hosts)?),
        };
        let mut established = None;
        let new_expiry = match s.state {
            SessState::Udp if dir == Dir::Out || inbound_refresh => Some(now.plus_secs(t.udp)),
            SessState::Icmp if dir == Dir::Out || inbound_refresh => Some(now.plus_secs(t.icmp)),
            SessState::Udp | SessState::Icmp => None,
            SessState::Tcp(st) => {
                let (next, life) = tcpsm::next(st, dir, flags);
                s.state = SessState::Tcp(next);
                let (was, is) = (st == TcpState::Established, next == TcpState::Established);
                if was != is {
                    established = Some(is);
                }
                match life {
                    Lifetime::Established => Some(now.plus_secs(t.tcp_established)),
                    Lifetime::Transitory => Some(now.plus_secs(t.tcp_transitory)),
                    Lifetime::Unchanged => None,
                }
            }
        };
        let tr = Translation { int, ext: s.ext() };
        if let Some(e) = new_expiry {
            let old = s.expires;
            s.expires = e;
            if e.0 >> PROPAGATE_SHIFT != old.0 >> PROPAGATE_SHIFT {
                let (mid, raddr) = (s.map, s.remote_addr);
                self.propagate(mid, raddr, e);
            }
        }
        if let Some(is) = established {
            self.tcp_offload(sid, is);
        }
        Some(tr)
    }

    /// A TCP session entered (`established`) or left the established state: its recipes go
    /// to the fast path, or come back so FIN/RST handling and the transitory timeout stay
    /// the engine's (RFC 6146 3.5.2.2).
    fn tcp_offload(&mut self, sid: u32, established: bool) {
        use crate::offload::OffloadKind;
        let Some((offloaded, proto, remote)) = self
            .sessions
            .get(sid)
            .map(|s| (s.offloaded, s.proto(), s.remote()))
        else {
            return;
        };
        let kind = if established && !offloaded && self.offloadable(proto, remote) {
            OffloadKind::Install
        } else if !established && offloaded {
            OffloadKind::Remove
        } else {
            return;
        };
        if let Some(s) = self.sessions.get_mut(sid) {
            s.offloaded = kind == OffloadKind::Install;
        }
        self.offload_event(kind, sid);
    }

    fn remove_session(&mut self, sid: u32) {
        // Out of its slab only after its index entries: removing one may need the other's
        // record ([`Napt::index_remove`]).
        let Some(&s) = self.sessions.get(sid) else {
            return;
        };
        if s.offloaded {
            self.push_offload(crate::offload::OffloadKind::Remove, sid, &s);
        }
        for inbound in [false, true] {
            if let Some(key) = s.key(inbound, &self.hosts) {
                let h = self.hash(&key);
                self.index_remove(false, h, sid * 2 + u32::from(inbound));
            }
        }
        let num = self.hosts.number_of_held(s.int_addr);
        if let Some(h) = num.and_then(|num| self.hosts.get_mut(num)) {
            h.sessions = h.sessions.saturating_sub(1);
        }
        if s.map == NO_MAP {
            // Its mapping goes with it.
            for outside in [false, true] {
                if let Some(h) = s.bib_hash(&self.hasher, outside, &self.hosts) {
                    self.index_remove(true, h, Owner::Session(sid).bib_val(outside));
                }
            }
            self.sessions.remove(sid);
            self.folded = self.folded.saturating_sub(1);
            self.release_mapping(s.proto(), s.int_addr, s.ext());
            return;
        }
        self.sessions.remove(sid);
        let Some(m) = self.mappings.get_mut(s.map) else {
            return;
        };
        if m.remote.sessions > 0 && m.remote.addr == s.remote_addr {
            m.remote.sessions -= 1;
        } else {
            Self::uncount_spilled(&mut self.remotes, s.map, s.remote_addr);
        }
        m.sessions = m.sessions.saturating_sub(1);
        if m.sessions == 0 {
            self.remove_mapping(s.map);
        }
    }

    /// Counts a new session on mapping `mid` with remote address `raddr` in the mapping's
    /// filter entry, or one in [`Napt::remotes`] (RFC 4787 REQ-8). Out of line: a folded
    /// mapping (most) has none, and inlined it cost the established path's code 16
    /// instructions a packet.
    #[inline(never)]
    fn count_session(&mut self, mid: u32, raddr: u32, stamp: Stamp) {
        let remotes = &mut self.remotes;
        if let Some(m) = self.mappings.get_mut(mid) {
            // The mapping's own filter entry serves this remote address if it already does,
            // or if it is free and the address has no entry elsewhere; other addresses spill
            // over.
            let r = &mut m.remote;
            let r = if r.sessions > 0 && r.addr == raddr {
                Some(r)
            } else if let Some(num) = remotes.number((mid, raddr)) {
                remotes.get_mut(num).map(|s| &mut s.r)
            } else if r.sessions == 0 {
                *r = RemoteRef {
                    addr: raddr,
                    sessions: 0,
                    expires: stamp,
                };
                Some(r)
            } else {
                // A new entry, born with this session; not made only past `max_sessions`
                // live entries, which as many sessions would take first.
                let made = remotes.insert(SpilledRemote {
                    map: mid,
                    r: RemoteRef {
                        addr: raddr,
                        sessions: 1,
                        expires: stamp,
                    },
                });
                debug_assert!(made.is_some(), "an entry per session at most");
                None
            };
            if let Some(r) = r {
                r.sessions += 1;
                r.expires = r.expires.max(stamp);
            }
            m.sessions += 1;
            m.expires = m.expires.max(stamp);
        }
    }

    /// A session of mapping `mid` with remote address `raddr` has gone: one fewer on its
    /// entry in `remotes`, which goes with the last. Out of line: rare.
    #[inline(never)]
    fn uncount_spilled(remotes: &mut Records<SpilledRemote>, mid: u32, raddr: u32) {
        let Some(num) = remotes.number((mid, raddr)) else {
            return;
        };
        if let Some(r) = remotes.get_mut(num).map(|x| &mut x.r) {
            if r.sessions > 1 {
                r.sessions -= 1;
            } else {
                remotes.remove(num);
            }
        }
    }

    fn remove_mapping(&mut self, mid: u32) {
        // Out of its slab only after its index entries, as in `remove_session`.
        let Some(&m) = self.mappings.get(mid) else {
            return;
        };
        for outside in [false, true] {
            if let Some(h) = m.bib_hash(&self.hasher, outside, &self.hosts) {
                self.index_remove(true, h, Owner::Mapping(mid).bib_val(outside));
            }
        }
        self.mappings.remove(mid);
        self.release_mapping(m.proto, m.int_addr, m.ext());
    }

    /// What a mapping held beyond its records: its port, and its count at its host (the host
    /// itself with its last mapping).
    fn release_mapping(&mut self, proto: Proto, int_held: u32, ext: Endpoint) {
        if let Some(&ix) = self.pool_index.get(&ext.addr) {
            if let Some(pm) = self
                .pool
                .get_mut(ix as usize)
                .and_then(|p| p.ports.get_mut(proto as usize))
            {
                pm.free(ext.port);
            }
        }
        let Some(num) = self.hosts.number_of_held(int_held) else {
            return;
        };
        let mut gone = false;
        if let Some(h) = self.hosts.get_mut(num) {
            h.mappings = h.mappings.saturating_sub(1);
            gone = h.mappings == 0;
        }
        if gone {
            self.release_host(num);
        }
    }

    /// Removes expired sessions, from where the last call stopped, for at most `budget` units
    /// of work: a slot looked at costs 1, a removal [`REMOVE_COST`] -- so a pass's time is
    /// bounded whether nothing or everything is due (a mass expiry used to make a 1,024-slot
    /// pass take 0.3-1 ms, a few hundred batches' worth). Due sessions are removed
    /// [`REMOVE_BATCH`] at a time with their index slots and mappings prefetched. Returns how
    /// many were removed.
    pub fn expire(&mut self, now: Time, budget: usize, c: &mut Counters) -> usize {
        let n = self.sessions.slots.count();
        let mut removed = 0;
        let mut work = 0;
        let mut due = [0u32; REMOVE_BATCH];
        let mut k = 0;
        for _ in 0..n {
            if work >= budget {
                break;
            }
            work += 1;
            if self.sweep_cursor >= n {
                self.sweep_cursor = 0;
            }
            let sid = self.sweep_cursor as u32;
            self.sweep_cursor += 1;
            match self.sessions.get(sid) {
                Some(s) if s.expires <= now && s.offloaded => {
                    self.offload_event(crate::offload::OffloadKind::Query, sid);
                }
                Some(s) if s.expires <= now => {
                    work += REMOVE_COST;
                    if let Some(d) = due.get_mut(k) {
                        *d = sid;
                        k += 1;
                    }
                    if k == REMOVE_BATCH {
                        removed += self.remove_due(&due, c);
                        k = 0;
                    }
                }
                _ => {}
            }
        }
        removed + self.remove_due(due.get(..k).unwrap_or(&[]), c)
    }

    /// Makes room in a full table: sessions past their time that the sweep has not reached
    /// yet would otherwise keep new flows out (expiry passes are small, [`REMOVE_COST`]), so
    /// the packet that finds the table full runs one pass of [`RECLAIM_BUDGET`] -- at most
    /// once per [`RECLAIM_BACKOFF_NS`] while passes find nothing, so a flood against a table
    /// of live sessions costs one pass per interval, not one per packet. True if there is room
    /// now.
    #[cold]
    fn reclaim(&mut self, now: Time, c: &mut Counters) -> bool {
        if now < self.reclaim_after {
            return false;
        }
        if self.expire(now, RECLAIM_BUDGET, c) == 0 {
            self.reclaim_after = Time(now.0.saturating_add(RECLAIM_BACKOFF_NS));
        }
        self.sessions.len < self.cfg.limits.max_sessions as usize
    }

    /// Removes the due sessions `sids` (all distinct, none offloaded): first starts fetching
    /// their session index slots and mappings, then the BIB slots of mappings that go with
    /// them, then removes them -- their cache misses overlap instead of queueing.
    fn remove_due(&mut self, sids: &[u32], c: &mut Counters) -> usize {
        for &sid in sids {
            let Some(s) = self.sessions.get(sid) else {
                continue;
            };
            for side in [false, true] {
                if let Some(key) = s.key(side, &self.hosts) {
                    self.flows.prefetch(side, self.hash(&key));
                }
                if s.map == NO_MAP {
                    if let Some(h) = s.bib_hash(&self.hasher, side, &self.hosts) {
                        self.bib.prefetch(side, h);
                    }
                }
            }
            if s.map != NO_MAP {
                self.mappings.prefetch(s.map);
            }
        }
        for &sid in sids {
            let Some(s) = self.sessions.get(sid) else {
                continue;
            };
            if let Some(m) = self.mappings.get(s.map).filter(|m| m.sessions <= 1) {
                for side in [false, true] {
                    if let Some(h) = m.bib_hash(&self.hasher, side, &self.hosts) {
                        self.bib.prefetch(side, h);
                    }
                }
            }
        }
        for &sid in sids {
            self.remove_session(sid);
            c.event(Event::SessionsExpired);
        }
        sids.len()
    }

    /// Appends the live sessions, sorted, to `out`.
    pub fn sessions(&self, now: Time, out: &mut Vec<SessionInfo>) {
        let mut dynamic: Vec<SessionInfo> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires > now || s.offloaded)
            .map(|(_, s)| SessionInfo {
                proto: s.proto().name().into(),
                inside: s.int(&self.hosts).map(|e| e.show(true)).unwrap_or_default(),
                outside: s.ext().show(true),
                remote: s.remote().show(s.proto() != Proto::Icmp),
                state: match s.state {
                    SessState::Udp => "udp".into(),
                    SessState::Icmp => "icmp".into(),
                    SessState::Tcp(t) => tcp_state_name(t).into(),
                },
                expires_in: Some(now.secs_until(s.expires)),
                fast_path: s.offloaded,
                ..SessionInfo::default()
            })
            .collect();
        dynamic.sort_by(|a, b| {
            (&a.proto, &a.inside, &a.remote).cmp(&(&b.proto, &b.inside, &b.remote))
        });
        out.extend(dynamic);
    }

    /// Restricts new mappings to the TCP/UDP ports `ports` and ICMP identifiers `icmp_ids`
    /// (inclusive ranges): a worker's slices ([`crate::shard`]). Call before traffic.
    pub fn set_ranges(&mut self, ports: (u16, u16), icmp_ids: (u16, u16)) {
        self.cfg.ports = ports;
        self.icmp_ids = icmp_ids;
    }

    /// Fills the table sizes and pool use of `st`.
    pub fn fill_stats(&self, st: &mut Stats) {
        let (lo, hi) = self.cfg.ports;
        let (ilo, ihi) = self.icmp_ids;
        st.sessions += self.sessions.len as u64;
        st.mappings += (self.mappings.len + self.folded) as u64;
        st.hosts += self.hosts.len() as u64;
        st.pool_addresses += self.pool.len() as u64;
        st.pool_addresses_used += self.pool.iter().filter(|p| p.hosts > 0).count() as u64;
        st.pool
            .extend([Proto::Tcp, Proto::Udp, Proto::Icmp].iter().map(|&p| {
                PoolUse {
                    proto: p.name().into(),
                    ports_used: self
                        .pool
                        .iter()
                        .filter_map(|a| a.ports.get(p as usize))
                        .map(|m| u64::from(m.used()))
                        .sum(),
                    ports_total: self.pool.len() as u64
                        * match p {
                            Proto::Icmp => u64::from(ihi - ilo) + 1,
                            _ => u64::from(hi - lo) + 1,
                        },
                }
            }));
    }
}

fn tcp_state_name(t: TcpState) -> &'static str {
    match t {
        TcpState::OutInit => "syn_out",
        TcpState::InInit => "syn_in",
        TcpState::Established => "established",
        TcpState::OutFinRcv => "fin_out",
        TcpState::InFinRcv => "fin_in",
        TcpState::BothFinRcv => "fin_both",
        TcpState::Trans => "transitory",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The remote endpoint the tests' flows talk to (203.0.113.1:53).
    const REMOTE: Endpoint = Endpoint {
        addr: 0xcb00_7101,
        port: 53,
    };

    /// A NAT44 NAPT on 198.19.0.0/31 with room for `max` sessions (per host too).
    fn napt(max: u32) -> Napt<u32> {
        napt_of(max)
    }

    /// [`napt`] for inside addresses of type `A` (`u128`: NAT64's).
    fn napt_of<A: InsideAddr>(max: u32) -> Napt<A> {
        Napt::new(
            NaptConfig {
                mode: Nat44Mode::Napt,
                filtering: Filtering::EndpointIndependent,
                ports: (1024, 65535),
                timeouts: Timeouts::default(),
                limits: Limits {
                    max_sessions: max,
                    max_sessions_per_host: max,
                    ..Limits::default()
                },
                inbound_refresh: true,
            },
            &["198.19.0.0/31".parse().unwrap()],
            1,
        )
    }

    #[test]
    fn slab_entries_are_as_small_as_the_docs_say() {
        // The memory bench measures these; this names the layout a change must keep (a
        // field added to `Session` or `Mapping` is a per-session cost at 10M sessions).
        use std::mem::size_of;
        assert_eq!(size_of::<Slot<Session>>(), 32);
        assert_eq!(size_of::<Slot<Mapping>>(), 36);
        assert_eq!(Stamp::of(Time(0)), Stamp(0));
        assert!(
            !Stamp::of(Time(1)).passed(Time(1)),
            "rounded up: never before the time"
        );
        assert!(Stamp::of(Time(1)).passed(Time(1 << PROPAGATE_SHIFT)));
        assert_eq!(Stamp::of(Time(u64::MAX)), Stamp(u32::MAX));
    }

    #[test]
    fn ipv6_hosts_are_held_as_numbers_that_are_reused_but_never_confused() {
        // NAT64 sessions and mappings hold a host's number, not its 16-byte address: a
        // released host's number goes to the next new host, and each session keeps
        // translating to its own host's address both ways.
        let mut n: Napt<u128> = napt_of(1000);
        let mut c = Counters::default();
        let r = REMOTE;
        let addr = |h: u128| 0x2001_0db8_0000_0000_0000_0000_0000_0000 | h;
        let ep = |h: u128, port: u16| Endpoint {
            addr: addr(h),
            port,
        };
        let held = |n: &Napt<u128>, h: u128| n.hosts.number(addr(h)).and_then(|x| n.hosts.held(x));
        let t0 = Time::from_secs(1);
        let t1 = t0.plus_secs(200);
        let back = |n: &mut Napt<u128>, now: Time, ext: Endpoint, c: &mut Counters| {
            n.inbound(now, Proto::Udp, ext, r, 0, c)
        };
        let mut out = Vec::new();
        for (h, ports, now) in [(1, 1000..1003, t0), (2, 2000..2002, t1)] {
            for port in ports {
                let ext = n
                    .outbound(now, Proto::Udp, ep(h, port), r, 0, &mut c)
                    .unwrap();
                assert_eq!(back(&mut n, now, ext, &mut c), Ok(ep(h, port)));
                out.push((ep(h, port), ext));
            }
        }
        let one = held(&n, 1).unwrap();
        assert_ne!(Some(one), held(&n, 2), "one number per host");
        // Host 1's sessions time out (host 2's were refreshed at t1): its number is free.
        let t2 = t0.plus_secs(350);
        while n.expire(t2, 1024, &mut c) > 0 {}
        assert_eq!((held(&n, 1), n.sessions.len), (None, 2));
        assert_eq!(n.hosts.len(), 1);
        // A new host takes the number; host 1 coming back gets another one.
        let e3 = n
            .outbound(t2, Proto::Udp, ep(3, 3000), r, 0, &mut c)
            .unwrap();
        assert_eq!(held(&n, 3), Some(one), "the freed number is reused");
        let e1 = n
            .outbound(t2, Proto::Udp, ep(1, 1000), r, 0, &mut c)
            .unwrap();
        assert!(held(&n, 1).is_some_and(|h| h != one));
        assert_eq!(back(&mut n, t2, e3, &mut c), Ok(ep(3, 3000)));
        assert_eq!(back(&mut n, t2, e1, &mut c), Ok(ep(1, 1000)));
        for &(int, ext) in &out[3..] {
            assert_eq!(back(&mut n, t2, ext, &mut c), Ok(int));
        }
        // Outbound tuples find their own host's session, not the one holding the number.
        assert_eq!(
            n.find_by_inside(t2, Proto::Udp, ep(3, 3000), r, &mut c),
            Some(e3)
        );
        assert_eq!(
            n.find_by_inside(t2, Proto::Udp, ep(1, 3000), r, &mut c),
            None
        );
        // All gone: no number left behind.
        while n.expire(t2.plus_secs(1000), 1024, &mut c) > 0 {}
        assert_eq!(n.hosts.len(), 0);
        assert_eq!((n.flows.len(), n.bib.len()), (0, 0));
    }

    proptest::proptest! {
        /// RFC 4787 REQ-8 address-dependent filtering while mappings talk to several remote
        /// addresses (all but one per mapping in [`Napt::remotes`]; with 80 addresses, through
        /// its growths): an inbound packet from a new port of remote address R is admitted
        /// exactly when the mapping has a session with R that has not timed out, and nothing
        /// is left once all have gone.
        #[test]
        fn address_dependent_filter_admits_exactly_the_live_remote_addresses(
            addrs in proptest::prop_oneof![proptest::strategy::Just(5u32), proptest::strategy::Just(80)],
            ops in proptest::collection::vec((0u8..3, 0u16..3, 0u32..80, 0u8..4), 1..300)
        ) {
            use proptest::prelude::*;
            let mut n: Napt<u32> = Napt::new(
                NaptConfig {
                    mode: Nat44Mode::Napt,
                    filtering: Filtering::AddressDependent,
                    ports: (1024, 65535),
                    timeouts: Timeouts::default(),
                    limits: Limits::default(),
                    inbound_refresh: true,
                },
                &["198.19.0.0/31".parse().unwrap()],
                1,
            );
            let mut c = Counters::default();
            let udp = Timeouts::default().udp;
            let int = |p: u16| Endpoint { addr: 0xc612_0001, port: 1000 + p };
            let remote = |r: u32, port: u16| Endpoint { addr: 0xcb00_7100 + r, port };
            // (inside port, remote address, remote port) -> when its session times out.
            let mut model: HashMap<(u16, u32, u16), u64> = HashMap::new();
            // Inside port -> the outside endpoint its mapping was last given.
            let mut ext: HashMap<u16, Endpoint> = HashMap::new();
            let mut now = 1u64;
            for (op, p, r, dt) in ops {
                let r = r % addrs;
                now += [0, 10, 120, 400][usize::from(dt)];
                let t = Time::from_secs(now);
                match op {
                    0 => {
                        let e = n.outbound(t, Proto::Udp, int(p), remote(r, 53), 0, &mut c).unwrap();
                        ext.insert(p, e);
                        model.insert((p, r, 53), now + udp);
                    }
                    1 => {
                        let Some(&e) = ext.get(&p) else { continue };
                        let live = |m: &HashMap<(u16, u32, u16), u64>| {
                            m.iter().filter(|((q, a, _), _)| *q == p && *a == r).map(|(_, &x)| x).max()
                        };
                        let until = live(&model);
                        // Skip the instants a timeout falls on (the mapping's coarse stamp).
                        if until.is_some_and(|u| u.abs_diff(now) < 2) {
                            continue;
                        }
                        // A port of R no session of this mapping uses.
                        let got = n.inbound(t, Proto::Udp, e, remote(r, 9000 + p), 0, &mut c);
                        let admitted = until.is_some_and(|u| now < u);
                        prop_assert_eq!(got.is_ok(), admitted, "inside port {}, remote {} at {}", p, r, now);
                        if admitted {
                            prop_assert_eq!(got.unwrap(), int(p));
                            model.insert((p, r, 9000 + p), now + udp);
                        }
                    }
                    _ => {
                        n.expire(t, 1024, &mut c);
                    }
                }
                // Timed out sessions leave the model (the engine removes them lazily), not
                // before the instants skipped above have passed.
                model.retain(|_, &mut u| u + 2 > now);
            }
            let end = Time::from_secs(now + 100_000);
            while n.expire(end, 1024, &mut c) > 0 {}
            prop_assert_eq!((n.sessions.len, n.mappings.len, n.remotes.len()), (0, 0, 0));
        }
    }

    proptest::proptest! {
        /// NAT64 hosts come and go (sessions time out, hosts are released, their numbers are
        /// reused): every answer in either direction is the one the flow's own host was
        /// given, and when all is gone nothing is left behind.
        #[test]
        fn ipv6_host_numbers_never_mix_hosts_up(
            ops in proptest::collection::vec((0u8..4, 0u128..6, 0u16..3, 0u64..200), 1..200)
        ) {
            use proptest::prelude::*;
            let mut n: Napt<u128> = napt_of(1000);
            let mut c = Counters::default();
            let r = REMOTE;
            let ep = |h: u128, port: u16| Endpoint {
                addr: 0x2001_0db8_0000_0000_0000_0000_0000_0000 | h << 8,
                port: 1000 + port,
            };
            // Outside endpoint -> the inside endpoint it was last given to.
            let mut given: HashMap<Endpoint, Endpoint<u128>> = HashMap::new();
            let mut now = Time::from_secs(1);
            for (op, h, port, dt) in ops {
                now = now.plus_secs(dt);
                let int = ep(h, port);
                match op {
                    0 | 1 => {
                        if let Ok(ext) = n.outbound(now, Proto::Udp, int, r, 0, &mut c) {
                            given.insert(ext, int);
                            prop_assert_eq!(n.find_by_inside(now, Proto::Udp, int, r, &mut c), Some(ext));
                        }
                    }
                    2 => {
                        for (&ext, &int) in &given {
                            if let Ok(back) = n.inbound(now, Proto::Udp, ext, r, 0, &mut c) {
                                prop_assert_eq!(back, int);
                            }
                        }
                    }
                    _ => {
                        n.expire(now, 1024, &mut c);
                    }
                }
            }
            let end = now.plus_secs(100_000);
            while n.expire(end, 1024, &mut c) > 0 {}
            prop_assert_eq!((n.hosts.len(), n.sessions.len), (0, 0));
            prop_assert_eq!((n.flows.len(), n.bib.len()), (0, 0));
        }
    }

    #[test]
    fn an_expiry_pass_is_bounded_however_many_sessions_are_due() {
        let mut n = napt(1000);
        let mut c = Counters::default();
        let r = REMOTE;
        let now = Time::from_secs(1);
        for i in 0..300u16 {
            let int = Endpoint {
                addr: 0xc612_0001 + u32::from(i % 7),
                port: 2000 + i,
            };
            n.outbound(now, Proto::Udp, int, r, 0, &mut c).unwrap();
        }
        // Nothing due: a pass looks at `budget` slots and removes nothing.
        assert_eq!(n.expire(now, 1024, &mut c), 0);
        let later = now.plus_secs(100_000);
        let most = 1024 / (REMOVE_COST + 1) + 1;
        let mut passes = 0;
        while n.sessions.len > 0 {
            let r = n.expire(later, 1024, &mut c);
            assert!((1..=most).contains(&r), "pass removed {r}, at most {most}");
            passes += 1;
            assert!(passes <= 300, "the sweep makes progress");
        }
        assert_eq!((n.mappings.len, n.hosts.len()), (0, 0));
        assert_eq!((n.flows.len(), n.bib.len()), (0, 0), "no entry left behind");
        assert!(n.pool.iter().all(|p| p.hosts == 0), "hosts unpaired");
    }

    #[test]
    fn a_full_table_makes_room_from_sessions_past_their_time() {
        let mut n = napt(100);
        let mut c = Counters::default();
        let r = REMOTE;
        let flow = |i: u16| Endpoint {
            addr: 0xc612_0001,
            port: 2000 + i,
        };
        let now = Time::from_secs(1);
        for i in 0..100 {
            n.outbound(now, Proto::Udp, flow(i), r, 0, &mut c).unwrap();
        }
        // Full of live sessions: refused, and the pass that found nothing due is not run
        // again for a while (the sweep cursor stays put).
        let full = n.outbound(now, Proto::Udp, flow(100), r, 0, &mut c);
        assert_eq!(full, Err(DropReason::SessionLimit));
        let cursor = n.sweep_cursor;
        let again = n.outbound(now, Proto::Udp, flow(101), r, 0, &mut c);
        assert_eq!(again, Err(DropReason::SessionLimit));
        assert_eq!(n.sweep_cursor, cursor, "no second pass within the backoff");
        // Past every session's time, with no sweep in between: a new flow gets in.
        let later = now.plus_secs(100_000);
        assert!(n
            .outbound(later, Proto::Udp, flow(102), r, 0, &mut c)
            .is_ok());
        assert!(n.sessions.len <= 100);
    }

    /// Stage 3 tries the entry stage 2 peeked at ([`Napt::find`]); by then that session may
    /// be gone and its slab slot another flow's. The candidate must then be passed over:
    /// a's packet, planned while a lived, arrives after a expired and b took a's slot.
    #[test]
    fn a_stale_candidate_is_never_taken_for_another_session() {
        let mut n = napt(10);
        let mut c = Counters::default();
        let now = Time::from_secs(1);
        let a = Endpoint {
            addr: 0xc612_0001,
            port: 2000,
        };
        let b = Endpoint {
            addr: 0xc612_0002,
            port: 3000,
        };
        n.outbound(now, Proto::Udp, a, REMOTE, 0, &mut c).unwrap();
        let key_a = FlowKey::Out(Proto::Udp, a, REMOTE);
        let h_a = n.hash(&key_a);
        let cand = n.prefetch_session(&key_a, h_a);
        assert_ne!(cand, NO_CAND, "stage 2 finds a's entry");
        let later = now.plus_secs(100_000);
        n.expire(later, 10_000, &mut c);
        assert_eq!(n.sessions.len, 0);
        let ext_b = n.outbound(later, Proto::Udp, b, REMOTE, 0, &mut c).unwrap();
        let h_b = n.hash(&FlowKey::Out(Proto::Udp, b, REMOTE));
        let key_b = FlowKey::Out(Proto::Udp, b, REMOTE);
        assert_eq!(
            n.prefetch_session(&key_b, h_b),
            cand,
            "b's entry is the one a had"
        );
        // a's packet with the stale candidate: a new session for a, not b's translation.
        let tr = n.lane_or_new(later, &key_a, h_a, cand, 0, &mut c).unwrap();
        assert_eq!(tr.int, a);
        assert_ne!(tr.ext, ext_b);
        assert_eq!(n.sessions.len, 2);
        // And the lookup-only lane, with the same stale candidate, finds a's new session.
        let again = n.lane(later, &key_a, h_a, cand, 0).unwrap();
        assert_eq!((again.int, again.ext), (a, tr.ext));
    }

    /// Index entries that wait ([`Napt::insert_later`]) are found, and removed, as if they
    /// had been inserted: runs of new sessions longer than [`PENDING_MAX`], each looked up
    /// by its inbound tuple at once (and a second remote admitted through the waiting BIB
    /// entry of its mapping), all looked up again afterwards, then all expired.
    #[test]
    fn waiting_index_entries_behave_as_inserted() {
        let mut n = napt(1000);
        let mut c = Counters::default();
        let (r1, r2) = (
            REMOTE,
            Endpoint {
                addr: 0xcb00_7102,
                port: 80,
            },
        );
        let now = Time::from_secs(1);
        let mut seen = Vec::new();
        for i in 0..100u16 {
            let int = Endpoint {
                addr: 0xc612_0001 + u32::from(i % 3),
                port: 2000 + i,
            };
            let ext = n.outbound(now, Proto::Udp, int, r1, 0, &mut c).unwrap();
            assert_eq!(n.inbound(now, Proto::Udp, ext, r1, 0, &mut c), Ok(int));
            assert_eq!(n.inbound(now, Proto::Udp, ext, r2, 0, &mut c), Ok(int));
            seen.push((int, ext));
        }
        assert!(!n.pending.is_empty(), "the last run still waits");
        for &(int, ext) in &seen {
            assert_eq!(
                n.find_by_outside(now, Proto::Udp, ext, r1, &mut c),
                Some(int)
            );
            assert_eq!(
                n.find_by_outside(now, Proto::Udp, ext, r2, &mut c),
                Some(int)
            );
            assert_eq!(
                n.find_by_inside(now, Proto::Udp, int, r2, &mut c),
                Some(ext)
            );
        }
        assert_eq!(n.sessions.len, 200);
        let later = now.plus_secs(100_000);
        let mut removed = 0;
        for _ in 0..100 {
            removed += n.expire(later, 1000, &mut c);
        }
        assert_eq!(removed, 200);
        assert_eq!((n.sessions.len, n.mappings.len), (0, 0));
        assert!(
            n.pending.is_empty(),
            "waiting entries of removed sessions taken back"
        );
        assert_eq!((n.flows.len(), n.bib.len()), (0, 0), "no entry left behind");
        for &(_, ext) in &seen {
            assert_eq!(
                n.inbound(later, Proto::Udp, ext, r1, 0, &mut c),
                Err(DropReason::NoMapping)
            );
        }
    }
}
