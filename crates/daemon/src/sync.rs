//! Stateful failover (`[sync]`, docs/FAILOVER.md): two gateways, one active and one standby,
//! keep the same session table, so that when the active dies the standby takes over
//! (keepalived moves the addresses and runs `xlat sync role active`) and every established
//! session's packets find their translation there.
//!
//! The active's packet workers drain their engines' session events after each batch
//! ([`xlat_engine::events`]) and hand them to this module's thread through a bounded
//! channel (a full channel drops the batch, counts it, never blocks a worker). The thread
//! packs them into datagrams ([`crate::sync_wire`]: sequence numbers, HMAC) and sends them to
//! the peer; the peer acknowledges what arrived in order, and what it did not acknowledge
//! within [`RESEND_AFTER`] is sent again -- a lost datagram is repaired, not silently
//! missed. The standby's thread puts the events back in order and hands each to the packet
//! worker that owns the session's inside host, which installs a frozen copy in its engine
//! (`xlat_engine::synced`) between batches; a standby forwards nothing (its packets are
//! dropped and counted: `sync_standby_dropped`).
//!
//! A standby that starts, restarts, or sees a gap it cannot fill asks for a full resync:
//! the active's workers each put a snapshot of their table into the same channel as their
//! events (so a session ended after the snapshot is ended after it on the standby too), and
//! the thread sends it between a BULK_BEGIN datagram (the standby drops its copies) and a
//! BULK_END one (the standby is in sync). Both send HELLO every [`HELLO_EVERY`]; a peer
//! that is also active is split brain, counted and logged.
//!
//! Flow control: at most [`WINDOW`] datagrams are out unacknowledged; what the workers queue
//! beyond that waits in the thread, in order, and goes out as acknowledgements come back, so
//! a full resync of millions of sessions is paced by the standby's own pace instead of
//! overrunning its socket and the resend memory. What waits is bounded (16,777,216
//! events); past it, or when the peer has been silent for 3 s, the thread starts
//! over with a new epoch and the standby, seeing it, asks for a full resync -- no event is
//! ever silently skipped.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use xlat_engine::events::StateEvent;
use xlat_engine::shard::Shards;
use xlat_engine::Time;

use crate::control::{Request, WorkerLink};
use crate::sync_wire::{self as wire, Header, Key, WireError};

/// How often each side says hello (role, workers, whether it wants a resync).
pub const HELLO_EVERY: Duration = Duration::from_secs(1);
/// A datagram not acknowledged this long after it was sent is sent again.
pub const RESEND_AFTER: Duration = Duration::from_millis(30);
/// Datagrams sent again per turn at most.
const RESEND_BURST: usize = 64;
/// Datagrams sent and not acknowledged at most (about 700 kB, what the standby's socket
/// holds: 4 MiB); more waits for acknowledgements.
pub const WINDOW: usize = 512;
/// Events waiting for the window at most (a full resync of this many sessions fits); past
/// it the thread starts over and the standby asks for a full resync.
const MAX_QUEUED: usize = 1 << 24;
/// The sync socket's receive buffer, so a window of datagrams fits in it.
const RECEIVE_BUFFER: i32 = 4 << 20;
/// Datagrams a standby holds ahead of a gap; past it the gap counts as lost: resync.
const MAX_AHEAD: usize = 4096;
/// A peer not heard from this long is gone: what it did not acknowledge is abandoned.
const PEER_GONE: Duration = Duration::from_secs(3);
/// After a full resync, requests for another are ignored this long (those in flight).
const RESYNC_QUIET: Duration = Duration::from_secs(2);
/// Event batches waiting for the sync thread (as the log's queue, crate::eventlog).
pub const QUEUE_BATCHES: usize = 4096;
/// Young sessions (`min_session_age`) held at most; past it the oldest is sent early.
const MAX_YOUNG: usize = 1 << 20;

/// `[sync] role`: what the gateway is when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartRole {
    Active,
    Standby,
    /// Standby until keepalived (its notify hook: `xlat sync role active`) says otherwise.
    Auto,
}

/// `[sync]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SyncConfig {
    pub listen: SocketAddr,
    pub peer: SocketAddr,
    pub role: StartRole,
    /// The shared HMAC key (never logged or shown).
    pub key: Vec<u8>,
    /// `min_session_age`: a session is synced once it has lived this long (zero: at once);
    /// one that ends sooner is never sent ([`Syncer`]'s young sessions).
    pub min_age: Duration,
}

impl std::fmt::Debug for SyncConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncConfig")
            .field("listen", &self.listen)
            .field("peer", &self.peer)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// What the workers hand the sync thread.
pub enum Outgoing {
    /// Session events of one batch, in the order the engine made them.
    Events(Vec<StateEvent>),
    /// One worker's whole table as session-created events (a full resync).
    Snapshot(Vec<StateEvent>),
}

macro_rules! sync_counters {
    ($($field:ident: $explain:literal,)*) => {
        /// The sync channel's counters (`xlat show sync`, `--explain`).
        #[derive(Debug, Default)]
        pub struct SyncCounters { $(pub $field: AtomicU64,)* }

        /// Their values, by name.
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct SyncCounts { $(pub $field: u64,)* }

        impl SyncCounters {
            pub fn snapshot(&self) -> SyncCounts {
                SyncCounts { $($field: self.$field.load(Ordering::Relaxed),)* }
            }
        }

        impl SyncCounts {
            /// The values with their names and explanations ([`COUNTERS`]' order).
            pub fn named(&self) -> Vec<xlat_engine::counters::NamedCount> {
                vec![$(xlat_engine::counters::NamedCount {
                    name: stringify!($field).to_string(),
                    value: self.$field,
                    explain: $explain.to_string(),
                },)*]
            }
        }

        /// Every counter's name and explanation.
        pub const COUNTERS: &[(&str, &str)] = &[$((stringify!($field), $explain),)*];
    };
}

sync_counters! {
    events_sent: "Session events sent to the peer (created and ended), first sending only.",
    datagrams_sent: "Sync datagrams sent, resent ones included.",
    bytes_sent: "Bytes of sync datagrams sent (UDP payload), resent ones included.",
    datagrams_resent: "Datagrams sent again because the peer had not acknowledged them within 30 ms: loss on the way, or a slow peer.",
    datagrams_abandoned: "Datagrams given up because the peer was gone for 3 s: the sync starts over (a new epoch) and the peer asks for a full resync when it is back.",
    events_abandoned: "Session events given up before they were sent: the peer was gone for 3 s, or more than 16,777,216 waited for the window (a peer far slower than the sessions change). The sync starts over and the peer asks for a full resync.",
    events_dropped: "Session events a packet worker could not queue for the sync thread (its queue was full): the standby misses them until its next resync. The sync thread could not send as fast as sessions changed.",
    events_received: "Session events received from the peer, in order.",
    installed: "Sessions installed as copies of the peer's (a standby's table).",
    removed: "Copies removed because the peer ended its session.",
    refused: "Peer sessions not installed: the table here contradicts them (another mapping for the inside endpoint or the outside port) or is full. A full resync repairs the former; different [nat44]/[nat64] pools or limits on the two gateways cause it.",
    resyncs_sent: "Full resyncs this gateway sent (the peer asked: it started, restarted or lost events).",
    resyncs_received: "Full resyncs received from the peer.",
    bad_datagrams: "Datagrams dropped before they were believed: too short, another format, or records that cannot be read.",
    auth_failures: "Datagrams whose HMAC did not verify with [sync] key, or that came from an address other than [sync] peer: another key, or someone else. Dropped.",
    version_mismatches: "Datagrams of another sync format version: the two gateways run different xlat releases. Dropped.",
    gaps: "Sequence gaps the standby could not fill (more than 4,096 datagrams ahead, or the peer started over): it asked for a full resync.",
    split_brain: "HELLOs from a peer that is active while this gateway is active too: both forward, with separate tables. keepalived's state or the network between them is at fault.",
    standby_dropped: "Packets a standby received and dropped: a standby forwards nothing (its table is the active's copy). keepalived should route nothing here until it makes this gateway active.",
    short_sessions_not_synced: "Sessions that ended within [sync] min_session_age of their start, so neither their start nor their end was sent: a failover loses such sessions, as configured (0 syncs every session).",
}

/// What `xlat show sync` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncStatus {
    /// "active" or "standby".
    pub role: String,
    pub peer: String,
    /// Seconds since the peer was last heard (None: never).
    pub peer_seen_secs_ago: Option<u64>,
    /// The peer's role as its last HELLO said.
    pub peer_role: Option<String>,
    /// A standby: whether it holds the whole table (its last full resync completed and no
    /// event was lost since). An active: whether the peer said so.
    pub in_sync: bool,
    /// Datagrams waiting for the peer's acknowledgement.
    pub unacked: u64,
    /// Session events waiting to be sent (the window is full: a full resync in progress,
    /// or a slow peer).
    #[serde(default)]
    pub queued: u64,
    /// The active's lag: milliseconds since the oldest datagram the peer has not
    /// acknowledged was first sent (0 when all is acknowledged).
    #[serde(default)]
    pub lag_ms: u64,
    pub counters: SyncCounts,
}

/// What the workers, the control socket and the sync thread share.
pub struct SyncShared {
    active: AtomicBool,
    tx: SyncSender<Outgoing>,
    pub counters: SyncCounters,
    status: Mutex<SyncStatus>,
    peer: SocketAddr,
}

impl SyncShared {
    /// Does this gateway forward (and send its events)?
    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Sets the role; true if it changed.
    pub fn set_active(&self, on: bool) -> bool {
        self.active.swap(on, Ordering::SeqCst) != on
    }

    /// A worker's session events after a batch (an active's only); a full queue drops and
    /// counts them.
    pub fn send_events(&self, evs: Vec<StateEvent>) {
        let n = evs.len() as u64;
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(Outgoing::Events(evs))
        {
            self.counters.events_dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A worker's snapshot for a full resync: waits for room (a resync is rare, and the
    /// standby needs every row).
    pub fn send_snapshot(&self, evs: Vec<StateEvent>) {
        if self.tx.send(Outgoing::Snapshot(evs)).is_err() {
            warn!("session sync: the sync thread is gone; the snapshot is lost");
        }
    }

    pub fn count(&self, c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// `xlat show sync`.
    pub fn status(&self) -> SyncStatus {
        let mut s = match self.status.lock() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        };
        s.role = if self.is_active() {
            "active"
        } else {
            "standby"
        }
        .into();
        s.peer = self.peer.to_string();
        s.counters = self.counters.snapshot();
        s
    }
}

/// Starts the sync side: the shared state (for the workers and the control socket) and
/// the thread's state, which [`Syncer::run`] drives on a thread of the caller's.
pub fn start(
    cfg: &SyncConfig,
    workers: Vec<WorkerLink>,
) -> anyhow::Result<(Arc<SyncShared>, Syncer)> {
    use anyhow::Context;
    let sock = UdpSocket::bind(cfg.listen)
        .with_context(|| format!("sync.listen: cannot bind {}", cfg.listen))?;
    sock.set_read_timeout(Some(Duration::from_millis(5)))
        .context("sync socket timeout")?;
    // Best effort: a smaller buffer only means more resends.
    let _ = xlat_io::sys::grow_receive_buffer(&sock, RECEIVE_BUFFER);
    let (tx, rx) = sync_channel(QUEUE_BATCHES);
    let shared = Arc::new(SyncShared {
        active: AtomicBool::new(cfg.role == StartRole::Active),
        tx,
        counters: SyncCounters::default(),
        status: Mutex::new(SyncStatus::default()),
        peer: cfg.peer,
    });
    let epoch = random_u32();
    info!(listen = %cfg.listen, peer = %cfg.peer, role = ?cfg.role, "session sync on");
    let syncer = Syncer {
        sh: shared.clone(),
        sock,
        key: Key::new(&cfg.key),
        peer: cfg.peer,
        rx,
        workers,
        epoch,
        next_seq: 1,
        unacked: VecDeque::new(),
        queued: VecDeque::new(),
        queued_events: 0,
        max_queued: MAX_QUEUED,
        cur: Vec::new(),
        cur_count: 0,
        cur_flags: 0,
        bulk: None,
        last_bulk_end: None,
        peer_epoch: None,
        expect: 0,
        ahead: BTreeMap::new(),
        in_sync: false,
        peer_in_sync: false,
        peer_seen: None,
        peer_active: None,
        last_hello: None,
        last_split_warn: None,
        warned_workers: false,
        warned_start_over: false,
        was_active: cfg.role == StartRole::Active,
        young: VecDeque::new(),
        young_live: HashMap::new(),
        young_next: 0,
        min_age: cfg.min_age,
    };
    Ok((shared, syncer))
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
            .unwrap_or(1);
        b = t.to_be_bytes();
    }
    u32::from_be_bytes(b).max(1)
}

struct Sent {
    seq: u32,
    bytes: Vec<u8>,
    /// When it was last sent (resends move it).
    at: Instant,
    /// When it was first sent: the lag of what the peer has not acknowledged.
    first: Instant,
}

/// Events waiting for the window, in the order they came; `bulk_end`: the last of a full
/// resync's snapshots (BULK_END goes out after it).
struct Queued {
    events: Vec<StateEvent>,
    next: usize,
    bulk_end: bool,
}

/// A received DATA datagram waiting for its turn.
struct Ahead {
    flags: u8,
    events: Vec<StateEvent>,
}

/// The sync thread's state.
pub struct Syncer {
    sh: Arc<SyncShared>,
    sock: UdpSocket,
    key: Key,
    peer: SocketAddr,
    rx: Receiver<Outgoing>,
    workers: Vec<WorkerLink>,
    // Sending.
    epoch: u32,
    next_seq: u32,
    unacked: VecDeque<Sent>,
    /// What waits for the window, and how many events that is.
    queued: VecDeque<Queued>,
    queued_events: usize,
    /// [`MAX_QUEUED`] (smaller in tests).
    max_queued: usize,
    cur: Vec<u8>,
    cur_count: u16,
    cur_flags: u8,
    /// A full resync in progress: snapshots still to come.
    bulk: Option<usize>,
    last_bulk_end: Option<Instant>,
    // Receiving.
    peer_epoch: Option<u32>,
    expect: u32,
    ahead: BTreeMap<u32, Ahead>,
    in_sync: bool,
    peer_in_sync: bool,
    peer_seen: Option<Instant>,
    peer_active: Option<bool>,
    last_hello: Option<Instant>,
    last_split_warn: Option<Instant>,
    /// The peer's worker count differs (said once).
    warned_workers: bool,
    /// The sync started over since the peer was last heard (said once).
    warned_start_over: bool,
    was_active: bool,
    /// Sessions made less than `min_age` ago, not sent yet: when each came, its number, its
    /// event. One that ends while here is never sent (nor its end).
    young: VecDeque<(Instant, u64, StateEvent)>,
    /// The young sessions still alive, by what names a session on the wire, with their
    /// number (an entry of `young` whose number is not here has ended).
    young_live: HashMap<YoungKey, u64>,
    young_next: u64,
    min_age: Duration,
}

/// What names a session on the wire ([`wire::put_record`]): protocol, inside and remote
/// endpoints.
type YoungKey = (u8, std::net::IpAddr, u16, std::net::Ipv4Addr, u16);

fn young_key(ev: &StateEvent) -> YoungKey {
    (
        ev.proto as u8,
        ev.inside,
        ev.inside_port,
        ev.remote,
        ev.remote_port,
    )
}

impl Syncer {
    /// Runs until `stop`: sends what the workers queue, receives the peer's datagrams,
    /// resends, says hello.
    pub fn run(mut self, shards: Option<&Shards>, stop: &AtomicBool) {
        let mut buf = vec![0u8; 65_536];
        let mut per_worker: Vec<Vec<StateEvent>> = vec![Vec::new(); self.workers.len()];
        while !stop.load(Ordering::Relaxed) {
            let active = self.sh.is_active();
            if active != self.was_active {
                self.role_changed(active);
            }
            // What the workers queued (an active's).
            for _ in 0..256 {
                match self.rx.try_recv() {
                    Ok(m) => self.outgoing(m, active),
                    Err(_) => break,
                }
            }
            self.release_young(false);
            self.flush();
            // The peer's datagrams (the socket waits up to 5 ms for the first).
            let mut got = false;
            for _ in 0..256 {
                match self.sock.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        got = true;
                        let d = buf.get(..n).unwrap_or(&[]);
                        self.receive(d, from, &mut per_worker, shards);
                    }
                    Err(_) => break,
                }
            }
            if got {
                self.hand_to_workers(&mut per_worker);
                if !active {
                    self.send_ack();
                }
            }
            self.resend();
            if self.last_hello.is_none_or(|t| t.elapsed() >= HELLO_EVERY) {
                self.hello();
            }
            self.publish();
        }
    }

    /// What a worker queued: an active's events go out; a snapshot goes out, and the last
    /// worker's ends the full resync (BULK_END).
    fn outgoing(&mut self, m: Outgoing, active: bool) {
        match m {
            Outgoing::Events(evs) if active => self.hold_young(evs),
            Outgoing::Events(_) => {}
            Outgoing::Snapshot(evs) => {
                // The snapshot names the young sessions too: their ends must follow it.
                self.release_young(true);
                let mut bulk_end = false;
                if let Some(left) = self.bulk.as_mut() {
                    *left = left.saturating_sub(1);
                    if *left == 0 {
                        self.bulk = None;
                        bulk_end = true;
                    }
                }
                self.enqueue(evs, bulk_end);
            }
        }
    }

    fn role_changed(&mut self, active: bool) {
        self.was_active = active;
        info!(
            role = if active { "active" } else { "standby" },
            "session sync: role changed"
        );
        if active {
            // What arrives from the old active now is stale: its table is ours.
            self.ahead.clear();
        } else {
            // The workers dropped their sessions; ask the (new) active for its table.
            self.young.clear();
            self.young_live.clear();
            self.in_sync = false;
            self.unacked.clear();
            self.drop_queued();
            self.bulk = None;
        }
        self.hello();
    }

    /// An active's events of one batch: with `min_session_age`, a new session waits in
    /// `young` and one that ends while it waits is never sent; the rest goes out now.
    fn hold_young(&mut self, evs: Vec<StateEvent>) {
        if self.min_age.is_zero() {
            self.enqueue(evs, false);
            return;
        }
        let now = Instant::now();
        for ev in &evs {
            match ev.kind {
                xlat_engine::events::EventKind::SessionCreated => {
                    self.young_next += 1;
                    self.young_live.insert(young_key(ev), self.young_next);
                    self.young.push_back((now, self.young_next, *ev));
                    if self.young.len() > MAX_YOUNG {
                        self.send_oldest_young();
                    }
                }
                xlat_engine::events::EventKind::SessionDeleted(_)
                    if self.young_live.remove(&young_key(ev)).is_some() =>
                {
                    self.sh
                        .count(&self.sh.counters.short_sessions_not_synced, 1);
                }
                _ => self.queue_events(std::slice::from_ref(ev)),
            }
        }
    }

    /// Sends the young sessions that have lived `min_age` (`all`: every one, as a snapshot
    /// goes out).
    fn release_young(&mut self, all: bool) {
        while let Some(&(at, _, _)) = self.young.front() {
            if !all && at.elapsed() < self.min_age {
                break;
            }
            self.send_oldest_young();
        }
    }

    fn send_oldest_young(&mut self) {
        let Some((_, n, ev)) = self.young.pop_front() else {
            return;
        };
        let key = young_key(&ev);
        if self.young_live.get(&key) == Some(&n) {
            self.young_live.remove(&key);
            self.queue_events(&[ev]);
        }
    }

    /// Queues `evs` behind what waits and sends what the window allows.
    fn queue_events(&mut self, evs: &[StateEvent]) {
        self.enqueue(evs.to_vec(), false);
    }

    /// Queues a batch (`bulk_end`: the last snapshot of a full resync) and sends what the
    /// window allows. Past [`MAX_QUEUED`] events the sync starts over.
    fn enqueue(&mut self, events: Vec<StateEvent>, bulk_end: bool) {
        if self.queued_events + events.len() > self.max_queued {
            self.sh
                .count(&self.sh.counters.events_abandoned, events.len() as u64);
            self.start_over();
            return;
        }
        self.queued_events += events.len();
        self.queued.push_back(Queued {
            events,
            next: 0,
            bulk_end,
        });
        self.pump();
    }

    /// Packs what waits into datagrams while fewer than [`WINDOW`] are unacknowledged,
    /// sending each full one; BULK_END goes out after the last snapshot's events.
    fn pump(&mut self) {
        loop {
            let Some(q) = self.queued.front() else {
                return;
            };
            let Some(ev) = q.events.get(q.next).copied() else {
                let bulk_end = q.bulk_end;
                self.queued.pop_front();
                if bulk_end {
                    self.cur_flags |= wire::F_BULK_END;
                    self.flush();
                    self.last_bulk_end = Some(Instant::now());
                }
                continue;
            };
            let len = wire::record_len(&ev);
            if len > 0 {
                let full = !self.cur.is_empty()
                    && (wire::room(self.cur.len()) < len || self.cur_count == u16::MAX);
                if full {
                    self.flush();
                }
                if self.cur.is_empty() {
                    if self.unacked.len() >= WINDOW {
                        return;
                    }
                    self.start_data();
                }
                if wire::put_record(&mut self.cur, &ev) {
                    self.cur_count += 1;
                    self.sh.count(&self.sh.counters.events_sent, 1);
                }
            }
            if let Some(q) = self.queued.front_mut() {
                q.next += 1;
            }
            self.queued_events = self.queued_events.saturating_sub(1);
        }
    }

    /// Drops what waits for the window, counted.
    fn drop_queued(&mut self) {
        let n = self.queued_events as u64;
        self.queued.clear();
        self.queued_events = 0;
        if n > 0 {
            self.sh.count(&self.sh.counters.events_abandoned, n);
        }
    }

    /// Gives up what is unacknowledged and what waits, and starts a new epoch: the standby,
    /// seeing it without BULK_BEGIN, knows it missed events and asks for a full resync.
    fn start_over(&mut self) {
        let n = self.unacked.len() as u64;
        self.unacked.clear();
        self.sh.count(&self.sh.counters.datagrams_abandoned, n);
        self.drop_queued();
        self.cur.clear();
        self.cur_count = 0;
        self.cur_flags = 0;
        self.epoch = self.epoch.wrapping_add(random_u32()).max(1);
        if !self.warned_start_over {
            self.warned_start_over = true;
            warn!(peer = %self.peer, "session sync: the peer fell too far behind or went silent; starting over (it will ask for the whole table)");
        }
    }

    fn start_data(&mut self) {
        let h = Header {
            kind: wire::T_DATA,
            flags: 0,
            count: 0,
            epoch: self.epoch,
            seq: self.next_seq,
            aux: 0,
        };
        wire::begin(&mut self.cur, &h);
        self.cur_count = 0;
    }

    /// Sends the datagram being filled (also an empty one that carries a bulk flag).
    fn flush(&mut self) {
        if self.cur_count == 0 && self.cur_flags & (wire::F_BULK_BEGIN | wire::F_BULK_END) == 0 {
            return;
        }
        if self.cur.is_empty() {
            self.start_data();
        }
        let flags = self.cur_flags | wire::F_ACTIVE;
        wire::seal(&mut self.cur, &self.key, self.cur_count, flags);
        let bytes = std::mem::take(&mut self.cur);
        self.send_bytes(&bytes);
        let now = Instant::now();
        self.unacked.push_back(Sent {
            seq: self.next_seq,
            bytes,
            at: now,
            first: now,
        });
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        self.cur_count = 0;
        self.cur_flags = 0;
    }

    fn send_bytes(&self, b: &[u8]) {
        if self.sock.send_to(b, self.peer).is_ok() {
            self.sh.count(&self.sh.counters.datagrams_sent, 1);
            self.sh.count(&self.sh.counters.bytes_sent, b.len() as u64);
        }
    }

    /// Sends again what the peer has not acknowledged in time; abandons it all when the
    /// peer is gone.
    fn resend(&mut self) {
        if self.unacked.is_empty() {
            return;
        }
        if self.peer_seen.is_none_or(|t| t.elapsed() >= PEER_GONE)
            && self
                .unacked
                .front()
                .is_some_and(|s| s.at.elapsed() >= PEER_GONE)
        {
            self.start_over();
            return;
        }
        let now = Instant::now();
        let mut again = Vec::new();
        for s in self.unacked.iter_mut() {
            if again.len() >= RESEND_BURST {
                break;
            }
            if now.duration_since(s.at) >= RESEND_AFTER {
                s.at = now;
                again.push(s.bytes.clone());
            }
        }
        for b in &again {
            self.send_bytes(b);
        }
        self.sh
            .count(&self.sh.counters.datagrams_resent, again.len() as u64);
    }

    fn control(&mut self, kind: u8, flags: u8, count: u16, seq: u32, aux: u32) {
        let mut b = Vec::with_capacity(wire::HEADER + wire::TAG);
        let h = Header {
            kind,
            flags,
            count: 0,
            epoch: self.epoch,
            seq,
            aux,
        };
        wire::begin(&mut b, &h);
        wire::seal(&mut b, &self.key, count, flags);
        self.send_bytes(&b);
    }

    fn hello(&mut self) {
        let active = self.sh.is_active();
        let mut flags = if active { wire::F_ACTIVE } else { 0 };
        if !active && !self.in_sync {
            flags |= wire::F_WANT_RESYNC;
        }
        // HELLO's aux: whether this side holds the whole table (a standby in sync).
        let aux = u32::from(!active && self.in_sync);
        let workers = u16::try_from(self.workers.len()).unwrap_or(u16::MAX);
        self.control(wire::T_HELLO, flags, workers, 0, aux);
        self.last_hello = Some(Instant::now());
    }

    fn send_ack(&mut self) {
        if let Some(pe) = self.peer_epoch {
            let upto = self.expect.wrapping_sub(1);
            self.control(wire::T_ACK, 0, 0, upto, pe);
        }
    }

    /// One datagram from the network.
    fn receive(
        &mut self,
        d: &[u8],
        from: SocketAddr,
        per_worker: &mut [Vec<StateEvent>],
        shards: Option<&Shards>,
    ) {
        let c = &self.sh.counters;
        if from.ip() != self.peer.ip() {
            self.sh.count(&c.auth_failures, 1);
            return;
        }
        let (h, recs) = match wire::open(d, &self.key) {
            Ok(x) => x,
            Err(WireError::Auth) => return self.sh.count(&c.auth_failures, 1),
            Err(WireError::Version(_)) => return self.sh.count(&c.version_mismatches, 1),
            Err(_) => return self.sh.count(&c.bad_datagrams, 1),
        };
        self.peer_seen = Some(Instant::now());
        self.warned_start_over = false;
        match h.kind {
            wire::T_HELLO => self.on_hello(&h),
            wire::T_ACK => {
                if h.aux == self.epoch {
                    while self.unacked.front().is_some_and(|s| seq_le(s.seq, h.seq)) {
                        self.unacked.pop_front();
                    }
                    // The window opened: what waits goes out.
                    self.pump();
                }
            }
            wire::T_DATA if !self.sh.is_active() => {
                let mut events = Vec::with_capacity(usize::from(h.count));
                if wire::records(recs, h.count, Time(0), &mut events).is_err() {
                    self.sh.count(&c.bad_datagrams, 1);
                    return;
                }
                self.on_data(&h, events, per_worker, shards);
            }
            // An active ignores the data of a peer that thinks it is active (split brain
            // is counted from its HELLOs).
            wire::T_DATA => {}
            _ => self.sh.count(&c.bad_datagrams, 1),
        }
    }

    fn on_hello(&mut self, h: &Header) {
        let peer_active = h.flags & wire::F_ACTIVE != 0;
        self.peer_active = Some(peer_active);
        let active = self.sh.is_active();
        if active && peer_active {
            self.sh.count(&self.sh.counters.split_brain, 1);
            if self
                .last_split_warn
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
            {
                warn!(peer = %self.peer, "session sync: split brain -- the peer is active too; both gateways forward with separate tables");
                self.last_split_warn = Some(Instant::now());
            }
        }
        if usize::from(h.count) != self.workers.len() && !self.warned_workers {
            self.warned_workers = true;
            warn!(peer = %self.peer, peer_workers = h.count, workers = self.workers.len(), "session sync: the peer runs another number of packet workers ([dataplane] workers); after a takeover, inbound packets would reach workers without the session");
        }
        if active {
            self.peer_in_sync = h.aux == 1;
            let quiet = self
                .last_bulk_end
                .is_some_and(|t| t.elapsed() < RESYNC_QUIET);
            if h.flags & wire::F_WANT_RESYNC != 0 && self.bulk.is_none() && !quiet {
                self.start_bulk();
            }
        }
    }

    /// A full resync: the datagram after this one starts it; each worker puts its snapshot
    /// in the queue behind the events it sent before.
    fn start_bulk(&mut self) {
        info!(peer = %self.peer, "session sync: the peer asked for the whole table; sending it");
        self.flush();
        self.cur_flags |= wire::F_BULK_BEGIN;
        self.bulk = Some(self.workers.len().max(1));
        self.sh.count(&self.sh.counters.resyncs_sent, 1);
        for w in &self.workers {
            w.tell(Request::SyncSnapshot);
        }
    }

    fn on_data(
        &mut self,
        h: &Header,
        events: Vec<StateEvent>,
        per_worker: &mut [Vec<StateEvent>],
        shards: Option<&Shards>,
    ) {
        if self.peer_epoch != Some(h.epoch) {
            // The peer started (over): its numbers restart here. Unless this begins a full
            // resync, what came before is unknown.
            if self.peer_epoch.is_some() || h.flags & wire::F_BULK_BEGIN == 0 {
                self.in_sync = false;
            }
            self.peer_epoch = Some(h.epoch);
            self.expect = h.seq;
            self.ahead.clear();
        }
        if seq_le(h.seq, self.expect.wrapping_sub(1)) {
            return; // a duplicate (a resend of what arrived)
        }
        self.ahead.insert(
            h.seq,
            Ahead {
                flags: h.flags,
                events,
            },
        );
        if self.ahead.len() > MAX_AHEAD {
            // The gap will not be filled: start over from what is here, and ask.
            self.sh.count(&self.sh.counters.gaps, 1);
            self.in_sync = false;
            if let Some((&first, _)) = self.ahead.iter().next() {
                self.expect = first;
            }
        }
        while let Some(a) = self.ahead.remove(&self.expect) {
            if a.flags & wire::F_BULK_BEGIN != 0 {
                self.hand_to_workers(per_worker);
                self.clear_workers();
                self.sh.count(&self.sh.counters.resyncs_received, 1);
            }
            self.sh
                .count(&self.sh.counters.events_received, a.events.len() as u64);
            for ev in a.events {
                let k = shards.map_or(0, |s| s.of_inside(ev.inside));
                if let Some(v) = per_worker.get_mut(k) {
                    v.push(ev);
                }
            }
            if a.flags & wire::F_BULK_END != 0 {
                self.in_sync = true;
                info!(peer = %self.peer, "session sync: in sync with the active's table");
            }
            self.expect = self.expect.wrapping_add(1).max(1);
        }
    }

    fn clear_workers(&self) {
        for w in &self.workers {
            w.tell(Request::SyncClear);
        }
    }

    /// Hands each worker the events of its sessions (between its batches).
    fn hand_to_workers(&self, per_worker: &mut [Vec<StateEvent>]) {
        for (w, evs) in self.workers.iter().zip(per_worker.iter_mut()) {
            if evs.is_empty() {
                continue;
            }
            w.tell(Request::SyncApply(Arc::new(std::mem::take(evs))));
        }
    }

    /// Updates what `xlat show sync` reads.
    fn publish(&self) {
        let mut s = match self.sh.status.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        s.peer_seen_secs_ago = self.peer_seen.map(|t| t.elapsed().as_secs());
        s.peer_role = self
            .peer_active
            .map(|a| if a { "active" } else { "standby" }.to_string());
        s.in_sync = if self.sh.is_active() {
            self.peer_in_sync
        } else {
            self.in_sync
        };
        s.unacked = self.unacked.len() as u64;
        s.queued = self.queued_events as u64;
        s.lag_ms = self.unacked.front().map_or(0, |u| {
            u64::try_from(u.first.elapsed().as_millis()).unwrap_or(u64::MAX)
        });
    }
}

/// `a <= b` in sequence-number arithmetic (RFC 1982 style, 32 bits).
fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < 1 << 31
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::control::ControlMsg;
    use std::net::{IpAddr, Ipv4Addr};
    use xlat_engine::events::{EventKind, Translator};
    use xlat_engine::flow::Proto;

    /// A sync side on a loopback socket with one worker whose control channel the test
    /// reads.
    fn side(active: bool) -> (Arc<SyncShared>, Syncer, crate::inbox::Inbox) {
        side_aged(active, Duration::ZERO)
    }

    /// [`side`] with `[sync] min_session_age`.
    fn side_aged(
        active: bool,
        min_age: Duration,
    ) -> (Arc<SyncShared>, Syncer, crate::inbox::Inbox) {
        let (tx, rx) = crate::inbox::inbox();
        let waker = Arc::new(xlat_io::sys::Waker::new().unwrap());
        let cfg = SyncConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            peer: "127.0.0.1:9".parse().unwrap(),
            role: if active {
                StartRole::Active
            } else {
                StartRole::Standby
            },
            key: b"0123456789abcdef".to_vec(),
            min_age,
        };
        let (sh, sy) = start(&cfg, vec![WorkerLink { tx, waker }]).unwrap();
        (sh, sy, rx)
    }

    fn created(port: u16) -> StateEvent {
        StateEvent {
            at: Time(0),
            kind: EventKind::SessionCreated,
            translator: Translator::Nat44,
            session: None,
            proto: Proto::Udp,
            inside: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 7)),
            inside_port: port,
            outside: Ipv4Addr::new(198, 19, 0, 100),
            outside_port: port,
            remote: Ipv4Addr::new(203, 0, 113, 9),
            remote_port: 53,
            with_mapping: false,
        }
    }

    fn header(epoch: u32, seq: u32, flags: u8) -> Header {
        Header {
            kind: wire::T_DATA,
            flags,
            count: 1,
            epoch,
            seq,
            aux: 0,
        }
    }

    /// What the worker was handed: `Clear` or the inside ports of the events applied.
    fn handed(rx: &crate::inbox::Inbox) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(m) = rx.take() {
            match m.request {
                Request::SyncClear => out.push("clear".to_string()),
                Request::SyncApply(evs) => {
                    out.extend(evs.iter().map(|e| e.inside_port.to_string()))
                }
                _ => out.push("other".to_string()),
            }
        }
        out
    }

    /// A standby applies datagrams in sequence order: one ahead of a gap waits for it,
    /// a duplicate is skipped, and the acknowledgement covers what arrived in order.
    #[test]
    fn a_standby_puts_datagrams_back_in_order() {
        let (sh, mut sy, rx) = side(false);
        let mut per = vec![Vec::new()];
        sy.on_data(
            &header(7, 1, wire::F_BULK_BEGIN),
            vec![created(1)],
            &mut per,
            None,
        );
        sy.on_data(&header(7, 3, 0), vec![created(3)], &mut per, None);
        sy.hand_to_workers(&mut per);
        assert_eq!(handed(&rx), ["clear", "1"], "3 waits for 2");
        assert_eq!(sy.expect, 2);
        sy.on_data(
            &header(7, 2, wire::F_BULK_END),
            vec![created(2)],
            &mut per,
            None,
        );
        sy.on_data(&header(7, 2, 0), vec![created(2)], &mut per, None); // a resend
        sy.hand_to_workers(&mut per);
        assert_eq!(handed(&rx), ["2", "3"]);
        assert_eq!(sy.expect, 4);
        assert!(sy.in_sync, "BULK_END arrived and nothing is missing");
        assert_eq!(sh.counters.snapshot().events_received, 3);
        assert_eq!(sh.counters.snapshot().resyncs_received, 1);
    }

    /// A peer that starts over (a new epoch) without a full resync leaves the standby out
    /// of sync (it asks in its HELLO); a gap past what it holds ahead is counted.
    #[test]
    fn a_new_epoch_or_a_lost_gap_means_out_of_sync() {
        let (sh, mut sy, _rx) = side(false);
        let mut per = vec![Vec::new()];
        sy.on_data(
            &header(7, 1, wire::F_BULK_BEGIN | wire::F_BULK_END),
            vec![],
            &mut per,
            None,
        );
        assert!(sy.in_sync);
        sy.on_data(&header(8, 50, 0), vec![created(5)], &mut per, None);
        assert!(!sy.in_sync, "a new epoch without BULK_BEGIN");
        assert_eq!(sy.expect, 51);
        for k in 0..=MAX_AHEAD as u32 {
            sy.on_data(&header(8, 60 + k, 0), vec![created(6)], &mut per, None);
        }
        assert_eq!(sh.counters.snapshot().gaps, 1);
        assert!(sy.ahead.len() <= MAX_AHEAD);
        assert!(sy.expect > 60, "it went on from what it holds");
    }

    /// A peer that says it is active while this side is active too is split brain; an
    /// active's HELLO asking for the table starts a full resync (once, not again while the
    /// requests in flight arrive).
    #[test]
    fn split_brain_is_counted_and_a_resync_request_starts_one_bulk() {
        let (sh, mut sy, rx) = side(true);
        let hello = |flags: u8| Header {
            kind: wire::T_HELLO,
            flags,
            count: 1,
            epoch: 5,
            seq: 0,
            aux: 0,
        };
        sy.on_hello(&hello(wire::F_ACTIVE));
        assert_eq!(sh.counters.snapshot().split_brain, 1);
        sy.on_hello(&hello(wire::F_WANT_RESYNC));
        sy.on_hello(&hello(wire::F_WANT_RESYNC));
        assert_eq!(sh.counters.snapshot().resyncs_sent, 1);
        assert!(matches!(rx.take().unwrap().request, Request::SyncSnapshot));
        assert!(rx.take().is_none(), "one snapshot request per worker");
        // The worker's snapshot ends the bulk: the last datagram carries BULK_END.
        sh.send_snapshot(vec![created(1), created(2)]);
        let m = sy.rx.try_recv().unwrap();
        sy.outgoing(m, true);
        assert!(sy.bulk.is_none());
        let last = sy.unacked.back().unwrap();
        let (h, _) = wire::open(&last.bytes, &sy.key).unwrap();
        assert_eq!(
            h.flags & (wire::F_BULK_BEGIN | wire::F_BULK_END),
            wire::F_BULK_BEGIN | wire::F_BULK_END
        );
        assert_eq!(h.count, 2);
    }

    /// The active keeps what it sent until the peer acknowledges it, sends it again when
    /// the acknowledgement is late, and drops it once acknowledged.
    #[test]
    fn the_active_resends_until_acknowledged() {
        let (sh, mut sy, _rx) = side(true);
        sy.publish();
        assert_eq!(sh.status().lag_ms, 0, "nothing sent, no lag");
        let evs: Vec<StateEvent> = (0..200).map(created).collect();
        sy.queue_events(&evs);
        sy.flush();
        let n = sy.unacked.len();
        assert!(
            n >= 3,
            "200 NAT44 events are three datagrams of 1,400 bytes: {n}"
        );
        assert_eq!(sh.counters.snapshot().events_sent, 200);
        // On the wire, headers and tags included: under 20 bytes a NAT44 session made (the
        // issue's target is 32 on average; Jool's joold sends about 52).
        let bytes = sh.counters.snapshot().bytes_sent;
        assert!(bytes < 200 * 20, "{bytes} bytes for 200 events");
        sy.peer_seen = Some(Instant::now());
        std::thread::sleep(RESEND_AFTER + Duration::from_millis(5));
        sy.resend();
        assert_eq!(sh.counters.snapshot().datagrams_resent, n as u64);
        // The lag counts from the first sending, not the resend.
        sy.publish();
        let lag = sh.status().lag_ms;
        assert!(lag >= RESEND_AFTER.as_millis() as u64, "lag {lag} ms");
        // The peer's ACK up to the second datagram.
        let mut ack = Vec::new();
        let h = Header {
            kind: wire::T_ACK,
            flags: 0,
            count: 0,
            epoch: 99,
            seq: 2,
            aux: sy.epoch,
        };
        wire::begin(&mut ack, &h);
        wire::seal(&mut ack, &sy.key, 0, 0);
        let mut per = vec![Vec::new()];
        sy.receive(&ack, sy.peer, &mut per, None);
        assert_eq!(sy.unacked.len(), n - 2);
        // From elsewhere, or with another key: dropped, counted.
        let elsewhere: SocketAddr = "127.0.0.2:9".parse().unwrap();
        sy.receive(&ack, elsewhere, &mut per, None);
        let mut forged = ack.clone();
        let last = forged.len() - 1;
        forged[last] ^= 1;
        sy.receive(&forged, sy.peer, &mut per, None);
        assert_eq!(sh.counters.snapshot().auth_failures, 2);
        assert_eq!(sy.unacked.len(), n - 2);
    }

    /// `min_session_age`: a session that ends young is never sent, nor its end; one that
    /// lives long enough is sent then, and its end after it; a snapshot sends the young at
    /// once (their ends must follow it).
    #[test]
    fn sessions_younger_than_min_age_are_not_synced() {
        let age = Duration::from_millis(200);
        let (sh, mut sy, _rx) = side_aged(true, age);
        let ended = |port| StateEvent {
            kind: EventKind::SessionDeleted(xlat_engine::events::EndReason::Expired),
            ..created(port)
        };
        let sent = |sh: &SyncShared| sh.counters.snapshot().events_sent;
        // 1000 ends young; 1001 lives on.
        sy.outgoing(Outgoing::Events(vec![created(1000), created(1001)]), true);
        sy.outgoing(Outgoing::Events(vec![ended(1000)]), true);
        sy.release_young(false);
        assert_eq!(sent(&sh), 0, "nothing sent before the minimum age");
        assert_eq!(sh.counters.snapshot().short_sessions_not_synced, 1);
        std::thread::sleep(age + Duration::from_millis(20));
        sy.release_young(false);
        assert_eq!(sent(&sh), 1, "the session that lived on is sent");
        sy.outgoing(Outgoing::Events(vec![ended(1001)]), true);
        assert_eq!(sent(&sh), 2, "and its end at once");
        // A young session when a full resync's snapshot passes: sent before the snapshot.
        sy.outgoing(Outgoing::Events(vec![created(1002)]), true);
        sy.outgoing(Outgoing::Snapshot(vec![created(1002)]), true);
        assert_eq!(sent(&sh), 4, "the young one, then the snapshot's");
        sy.outgoing(Outgoing::Events(vec![ended(1002)]), true);
        assert_eq!(sent(&sh), 5, "its end follows");
        assert_eq!(sh.counters.snapshot().short_sessions_not_synced, 1);
    }

    /// Event `i` of a large table: distinct inside endpoints.
    fn created_n(i: u32) -> StateEvent {
        StateEvent {
            inside: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (i >> 16))),
            inside_port: (i & 0xffff) as u16,
            ..created(0)
        }
    }

    /// An acknowledgement from the peer of everything up to `seq` in `sy`'s epoch.
    fn ack(sy: &mut Syncer, seq: u32) {
        let mut b = Vec::new();
        let h = Header {
            kind: wire::T_ACK,
            flags: 0,
            count: 0,
            epoch: 99,
            seq,
            aux: sy.epoch,
        };
        wire::begin(&mut b, &h);
        wire::seal(&mut b, &sy.key, 0, 0);
        let mut per = vec![Vec::new()];
        sy.receive(&b, sy.peer, &mut per, None);
    }

    /// A full resync larger than the window goes out as acknowledgements open it: never
    /// more than WINDOW datagrams out, the rest waiting in order, BULK_END after the last.
    #[test]
    fn a_full_resync_is_paced_by_the_window() {
        let (sh, mut sy, _rx) = side(true);
        sy.peer_seen = Some(Instant::now());
        sy.bulk = Some(1);
        let n = 100_000u32;
        sy.outgoing(Outgoing::Snapshot((0..n).map(created_n).collect()), true);
        assert_eq!(sy.unacked.len(), WINDOW);
        let sent = sh.counters.snapshot().events_sent;
        assert!(sent < u64::from(n) && sent > 0, "{sent}");
        assert_eq!(sy.queued_events as u64, u64::from(n) - sent);
        // Acknowledge the oldest half: as many new datagrams go out, no more.
        let half = sy.unacked[WINDOW / 2 - 1].seq;
        ack(&mut sy, half);
        assert_eq!(sy.unacked.len(), WINDOW);
        // Acknowledge all, round after round, until everything went.
        for _ in 0..1000 {
            if sy.queued.is_empty() {
                break;
            }
            let last = sy.unacked.back().unwrap().seq;
            ack(&mut sy, last);
            assert!(sy.unacked.len() <= WINDOW);
        }
        assert!(sy.queued.is_empty() && sy.queued_events == 0);
        let c = sh.counters.snapshot();
        assert_eq!(c.events_sent, u64::from(n));
        assert_eq!((c.datagrams_abandoned, c.events_abandoned), (0, 0));
        let (h, _) = wire::open(&sy.unacked.back().unwrap().bytes, &sy.key).unwrap();
        assert_ne!(
            h.flags & wire::F_BULK_END,
            0,
            "BULK_END after the last event"
        );
    }

    /// A peer silent for PEER_GONE, or more waiting than the bound: the sync starts over in
    /// a new epoch (the standby will ask for the table), everything given up counted.
    #[test]
    fn a_gone_or_far_behind_peer_starts_the_sync_over() {
        let (sh, mut sy, _rx) = side(true);
        sy.queue_events(&(0..50_000).map(created_n).collect::<Vec<_>>());
        let (epoch, out, waiting) = (sy.epoch, sy.unacked.len(), sy.queued_events);
        assert!(out == WINDOW && waiting > 0);
        // Never heard from, and the oldest datagram is PEER_GONE old.
        sy.unacked[0].at = Instant::now() - PEER_GONE;
        sy.resend();
        let c = sh.counters.snapshot();
        assert_eq!(c.datagrams_abandoned, out as u64);
        assert_eq!(c.events_abandoned, waiting as u64);
        assert!(sy.unacked.is_empty() && sy.queued.is_empty());
        assert_ne!(sy.epoch, epoch);
        // Far behind: past the bound, the same.
        sy.queue_events(&(0..50_000).map(created_n).collect::<Vec<_>>());
        assert_eq!(sy.unacked.len(), WINDOW);
        sy.max_queued = sy.queued_events + 1_000;
        let epoch = sy.epoch;
        sy.queue_events(&(0..999).map(created_n).collect::<Vec<_>>());
        assert_eq!(sy.epoch, epoch, "within the bound");
        sy.queue_events(&(0..2).map(created_n).collect::<Vec<_>>());
        assert_ne!(sy.epoch, epoch, "past it");
        assert!(sy.queued.is_empty() && sy.unacked.is_empty());
        assert!(sh.counters.snapshot().events_abandoned > waiting as u64);
    }

    /// Two sync threads over loopback: a standby that starts asks for the table, the active
    /// sends a million sessions, paced by the window, and the standby gets every one and
    /// says it is in sync; nothing was given up on the way.
    #[test]
    fn a_million_sessions_resync_over_loopback() {
        let n = 1_000_000u32;
        let (sh_a, mut a, rx_a) = side(true);
        let (sh_b, mut b, rx_b) = side(false);
        a.peer = b.sock.local_addr().unwrap();
        b.peer = a.sock.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = [a, b]
            .into_iter()
            .map(|sy| {
                let stop = stop.clone();
                std::thread::spawn(move || sy.run(None, &stop))
            })
            .collect();
        // The active's worker: answers the snapshot request with its table.
        let sh = sh_a.clone();
        let worker = std::thread::spawn(move || {
            let m = rx_a.wait(Duration::from_secs(30));
            if let Some(ControlMsg {
                request: Request::SyncSnapshot,
                ..
            }) = m
            {
                sh.send_snapshot((0..n).map(created_n).collect());
                true
            } else {
                false
            }
        });
        // The standby's worker: counts what it is handed.
        let started = Instant::now();
        let (mut got, mut cleared) = (0u64, 0);
        while started.elapsed() < Duration::from_secs(60) {
            match rx_b.wait(Duration::from_millis(50)) {
                Some(ControlMsg {
                    request: Request::SyncApply(evs),
                    ..
                }) => got += evs.len() as u64,
                Some(ControlMsg {
                    request: Request::SyncClear,
                    ..
                }) => cleared += 1,
                _ => {}
            }
            if got >= u64::from(n) && sh_b.status().in_sync {
                break;
            }
        }
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        assert!(
            worker.join().unwrap(),
            "the active never asked its worker for a snapshot"
        );
        let (ca, cb) = (sh_a.counters.snapshot(), sh_b.counters.snapshot());
        eprintln!(
            "{n} sessions resynced in {took:?}: {} datagrams ({} resent)",
            ca.datagrams_sent, ca.datagrams_resent
        );
        assert_eq!(got, u64::from(n), "{ca:?}\n{cb:?}");
        assert!(sh_b.status().in_sync, "{cb:?}");
        assert_eq!(cleared, 1);
        assert_eq!(
            (ca.datagrams_abandoned, ca.events_abandoned),
            (0, 0),
            "{ca:?}"
        );
        assert_eq!((cb.gaps, cb.bad_datagrams, cb.auth_failures), (0, 0, 0));
    }

    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        assert!(seq_le(1, 1));
        assert!(seq_le(1, 2));
        assert!(!seq_le(2, 1));
        assert!(seq_le(u32::MAX, 3));
        assert!(!seq_le(3, u32::MAX));
    }
}
