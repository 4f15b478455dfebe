//! NAT event logging: the engine's state events (sessions, mappings, address pairings,
//! exhaustion and quota refusals) sent as syslog lines and as IPFIX records over UDP, so an
//! operator can answer "who had 198.19.0.100:40312 at 14:02:11?" (RFC 6888 REQ-12/13).
//!
//! The path an event takes never touches a packet worker's time: a worker drains its
//! engine's events after a batch and hands the batch to a bounded channel (a full channel
//! drops the batch and counts it, `log_events_dropped`, never blocks); this module's thread
//! takes what the workers queued, formats and sends. Syslog lines follow RFC 5424 (section
//! 6: `<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD MSG`), facility local0, severity
//! informational, one datagram a line; MSGID is the event's RFC 8158 natEvent name
//! (`NAT44_SESSION_CREATE`, ...), and MSG its values as `key=value` pairs in a fixed order
//! (docs/LOGGING.md lists them). UDP syslog (RFC 5426) can lose lines on the way
//! unseen; the IPFIX export ([`crate::ipfix`], RFC 7011 / RFC 8158) packs the same events
//! into messages with sequence numbers, so a collector counts what it missed.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use tracing::warn;
use xlat_engine::counters::NamedCount;
use xlat_engine::events::{EndReason, EventKind, StateEvent, Translator};

use crate::ipfix::Exporter;

/// Batches of events waiting for the log thread: each worker sends at most one a batch of
/// packets, so this is about as many batches as the workers translate in a second's stall.
pub const QUEUE_BATCHES: usize = 4096;

/// Batches the log thread takes from the queue at most before it sends: what the workers
/// queued meanwhile goes out together, in full IPFIX messages.
const TAKE_BATCHES: usize = 64;

/// `[logging]`: where NAT events go and which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Syslog collectors (UDP, RFC 5426).
    pub syslog: Vec<SocketAddr>,
    /// IPFIX collectors (UDP, RFC 7011 10.3).
    pub ipfix: Vec<SocketAddr>,
    /// IPFIX templates are resent this often (RFC 7011 10.3.6).
    pub ipfix_template_refresh: Duration,
    /// The IPFIX observation domain ID (RFC 7011 3.1).
    pub ipfix_domain_id: u32,
    /// `[limits] max_sessions_per_host`: the maxEntriesPerUser of a quota-exceeded record.
    pub max_sessions_per_host: u32,
    /// `nat44.ports_per_host` with deterministic NAT (0: off): the maxEntriesPerUser of a
    /// quota-exceeded record whose host's range is full (it names the outside address).
    pub ports_per_host: u32,
    pub events: LogEvents,
}

/// The `[logging]` keys a reload from `old` to `new` changes, as `logging.KEY` (sorted,
/// `max_sessions_per_host` and `ports_per_host` as the `[limits]` / `[nat44]` keys they
/// come from are reported by those sections, so not here). Both `None`: nothing.
pub fn changed_keys(old: Option<&LogConfig>, new: Option<&LogConfig>) -> Vec<String> {
    let mut keys = Vec::new();
    let (a, b) = match (old, new) {
        (None, None) => return keys,
        (Some(_), None) | (None, Some(_)) => return vec!["logging".to_string()],
        (Some(a), Some(b)) => (a, b),
    };
    let mut key = |changed: bool, k: &str| {
        if changed {
            keys.push(format!("logging.{k}"));
        }
    };
    key(a.events != b.events, "events");
    key(a.ipfix != b.ipfix, "ipfix");
    key(a.ipfix_domain_id != b.ipfix_domain_id, "ipfix_domain_id");
    key(
        a.ipfix_template_refresh != b.ipfix_template_refresh,
        "ipfix_template_refresh",
    );
    key(a.syslog != b.syslog, "syslog");
    keys
}

/// What a reload cannot do to `[logging]` live: turn it on in a daemon without an event log
/// (`running`: it has one, though `[logging]` may have been removed by a reload since; the
/// engines' event stream starts with the packet workers). `None`: it can.
pub fn refused(running: bool, new: Option<&LogConfig>) -> Option<String> {
    match (running, new) {
        (false, Some(_)) => Some(
            "logging: cannot turn NAT event logging on while running: the packet workers start \
             their engines' event stream only at start; restart xlat to apply it (a daemon \
             started with [logging] changes its collectors, events and IPFIX keys live, and \
             removing [logging] only stops sending)"
                .to_string(),
        ),
        _ => None,
    }
}

/// Which events are logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogEvents {
    /// Every session created and deleted, and everything `Mappings` logs.
    Sessions,
    /// Mappings (BIB entries) created and deleted, address pairings, port blocks, and
    /// refusals (addresses or ports exhausted, quota exceeded): fewer lines, still enough to
    /// name the inside host behind an outside address and port at a time.
    Mappings,
    /// Port blocks given and freed (`port_block_size`, RFC 7422) and refusals: one event a
    /// block instead of one a mapping; the block names the host behind each of its ports.
    PortBlocks,
}

impl LogEvents {
    fn code(self) -> u8 {
        match self {
            LogEvents::Sessions => 0,
            LogEvents::Mappings => 1,
            LogEvents::PortBlocks => 2,
        }
    }

    fn of_code(c: u8) -> LogEvents {
        match c {
            0 => LogEvents::Sessions,
            1 => LogEvents::Mappings,
            _ => LogEvents::PortBlocks,
        }
    }

    /// Is event `e`, or the mapping event folded into it
    /// ([`StateEvent::with_mapping`]), logged? What a worker hands to the log thread.
    pub fn takes_event(self, e: &StateEvent) -> bool {
        self.takes(e.kind) || (e.with_mapping && self.takes(EventKind::MappingCreated))
    }

    /// Appends to `out` what of `e` is logged: the event and the mapping event folded into
    /// it, each when [`LogEvents::takes`] it (on the log thread, off the packet path).
    pub fn unfold_into(self, e: &StateEvent, out: &mut Vec<StateEvent>) {
        out.extend(e.unfolded().filter(|x| self.takes(x.kind)));
    }

    /// Is an event of kind `k` logged? Fast-path instructions never are.
    pub fn takes(self, k: EventKind) -> bool {
        match k {
            EventKind::FastPath(_) => false,
            EventKind::SessionCreated | EventKind::SessionDeleted(_) => self == LogEvents::Sessions,
            EventKind::MappingCreated
            | EventKind::MappingDeleted
            | EventKind::HostBound
            | EventKind::HostUnbound => self != LogEvents::PortBlocks,
            _ => true,
        }
    }
}

/// What the log thread sent, for `xlat show stats` and `/metrics` (`xlat_log_*_total`).
#[derive(Debug, Default)]
pub struct LogCounters {
    syslog_lines_sent: AtomicU64,
    syslog_send_errors: AtomicU64,
    ipfix_messages_sent: AtomicU64,
    ipfix_records_sent: AtomicU64,
    ipfix_send_errors: AtomicU64,
}

/// The counters' names and operator explanations, in their fixed order.
pub const COUNTERS: &[(&str, &str)] = &[
    ("syslog_lines_sent", "Syslog lines sent ([logging] syslog), one datagram each, summed over the collectors."),
    ("syslog_send_errors", "Syslog datagrams the socket refused (no route to a collector, buffer full): those lines are lost. Check the route to the collector."),
    ("ipfix_messages_sent", "IPFIX messages sent ([logging] ipfix, RFC 7011 over UDP), summed over the collectors."),
    ("ipfix_records_sent", "IPFIX data records (one a NAT event, RFC 8158) in the messages sent, summed over the collectors. A collector that got fewer saw a gap in the sequence numbers."),
    ("ipfix_send_errors", "IPFIX messages the socket refused (no route to a collector, buffer full): their records are lost, and the collector sees a gap in the sequence numbers. Check the route to the collector."),
];

impl LogCounters {
    /// The counters with their names and explanations ([`COUNTERS`]' order).
    pub fn named(&self) -> Vec<NamedCount> {
        let values = [
            &self.syslog_lines_sent,
            &self.syslog_send_errors,
            &self.ipfix_messages_sent,
            &self.ipfix_records_sent,
            &self.ipfix_send_errors,
        ];
        COUNTERS
            .iter()
            .zip(values)
            .map(|((name, explain), v)| NamedCount {
                name: (*name).to_string(),
                value: v.load(Ordering::Relaxed),
                explain: (*explain).to_string(),
            })
            .collect()
    }
}

/// What goes to the log thread.
enum Item {
    /// A worker's events ([`LogEvents::takes_event`]), and the level they are unfolded for.
    Events(Vec<StateEvent>, LogEvents),
    /// Look at the pending update ([`EventLog::apply`]).
    Wake,
    /// Send what is queued, then end ([`EventLog::finish`]).
    Finish,
}

/// What the log thread sends to and how: the collectors, and the IPFIX exporter's keys.
struct Targets {
    syslog: Vec<SocketAddr>,
    ipfix: Vec<SocketAddr>,
    domain: u32,
    refresh: Duration,
    quota: u32,
    port_quota: u32,
    /// Sockets for address families the log thread had none for (bound by
    /// [`EventLog::prepare`]); a socket it has stays, so a collector that stays sees the
    /// same source port (its IPFIX transport session goes on).
    sock4: Option<UdpSocket>,
    sock6: Option<UdpSocket>,
}

/// A `[logging]` change made ready by [`EventLog::prepare`] (the sockets it needs are
/// bound); [`EventLog::apply`] hands it to the log thread.
pub struct LogUpdate {
    targets: Targets,
    events: LogEvents,
}

/// The workers' side: a bounded channel to the log thread.
pub struct EventLog {
    tx: SyncSender<Item>,
    /// [`LogEvents`] as its code: a reload changes it, the workers read it after each batch.
    events: AtomicU8,
    counters: Arc<LogCounters>,
    /// The address families the log thread has a socket for (IPv4, IPv6).
    families: Mutex<(bool, bool)>,
    /// The update the log thread takes at its next wake.
    pending: Arc<Mutex<Option<Targets>>>,
    /// The log thread, joined by [`EventLog::finish`].
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The log's events in `batch` at `level`: a session event with its mapping folded in may
/// be two (what a lost batch loses).
fn logged(batch: &[StateEvent], level: LogEvents) -> u64 {
    batch
        .iter()
        .map(|e| e.unfolded().filter(|x| level.takes(x.kind)).count() as u64)
        .sum()
}

/// Binds the event log's socket for one address family.
fn bind_family(v6: bool) -> Result<UdpSocket> {
    let addr = if v6 { "[::]:0" } else { "0.0.0.0:0" };
    UdpSocket::bind(addr).with_context(|| format!("opening the event log's socket on {addr}"))
}

/// Does any collector of `cfg` use IPv6 (`true`) / IPv4 (`false`)?
fn wants(cfg: &LogConfig, v6: bool) -> bool {
    cfg.syslog
        .iter()
        .chain(&cfg.ipfix)
        .any(|a| a.is_ipv6() == v6)
}

impl EventLog {
    /// Starts the log thread. `start` is the instant the engines' clock counts from.
    pub fn start(cfg: &LogConfig, start: Instant) -> Result<Arc<EventLog>> {
        let (tx, rx) = sync_channel(QUEUE_BATCHES);
        // One socket per address family the collectors use.
        let bind = |v6: bool| -> Result<Option<UdpSocket>> {
            if !wants(cfg, v6) {
                return Ok(None);
            }
            bind_family(v6).map(Some)
        };
        let sock4 = bind(false)?;
        let sock6 = bind(true)?;
        let families = (sock4.is_some(), sock6.is_some());
        let pending = Arc::new(Mutex::new(None));
        let host = hostname();
        let pid = std::process::id();
        // The engines' clock as wall time: the wall clock at `start`.
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(start.elapsed());
        let counters = Arc::new(LogCounters::default());
        let sender = Sender {
            sock4,
            sock6,
            syslog: cfg.syslog.clone(),
            ipfix: cfg.ipfix.clone(),
            exporter: Exporter::new(
                cfg.ipfix_domain_id,
                crate::ipfix::DEFAULT_MAX_LEN,
                cfg.ipfix_template_refresh,
                cfg.max_sessions_per_host,
            )
            .with_port_quota(cfg.ports_per_host),
            host,
            pid,
            epoch,
            counters: counters.clone(),
            pending: pending.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("xlat-log".into())
            .spawn(move || {
                // Sending records is I/O: it waits for the packet workers, never they for it
                // (the queue between them counts what it must drop).
                xlat_io::sys::control_plane_priority();
                sender.run(&rx)
            })
            .context("starting the event log thread")?;
        Ok(Arc::new(EventLog {
            tx,
            events: AtomicU8::new(cfg.events.code()),
            counters,
            families: Mutex::new(families),
            pending,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// Makes `cfg` ready to replace the running `[logging]` (a reload): binds a socket for
    /// an address family its collectors use that the log thread has none for. `None`: the
    /// section was removed, which stops sending (no collector); the event stream goes on.
    /// Nothing changes until [`EventLog::apply`].
    pub fn prepare(&self, cfg: Option<&LogConfig>) -> Result<LogUpdate> {
        let (has4, has6) = match self.families.lock() {
            Ok(f) => *f,
            Err(p) => *p.into_inner(),
        };
        let Some(cfg) = cfg else {
            return Ok(LogUpdate {
                targets: Targets {
                    syslog: Vec::new(),
                    ipfix: Vec::new(),
                    domain: 0,
                    refresh: Duration::ZERO,
                    quota: 0,
                    port_quota: 0,
                    sock4: None,
                    sock6: None,
                },
                events: self.events(),
            });
        };
        let sock4 = match !has4 && wants(cfg, false) {
            true => Some(bind_family(false)?),
            false => None,
        };
        let sock6 = match !has6 && wants(cfg, true) {
            true => Some(bind_family(true)?),
            false => None,
        };
        Ok(LogUpdate {
            targets: Targets {
                syslog: cfg.syslog.clone(),
                ipfix: cfg.ipfix.clone(),
                domain: cfg.ipfix_domain_id,
                refresh: cfg.ipfix_template_refresh,
                quota: cfg.max_sessions_per_host,
                port_quota: cfg.ports_per_host,
                sock4,
                sock6,
            },
            events: cfg.events,
        })
    }

    /// Applies a prepared update: the workers filter by its events from their next batch,
    /// the log thread takes the collectors before it sends again (a new IPFIX collector gets
    /// the templates first, RFC 7011 8.1 / 10.3.6; one removed gets nothing more; what is
    /// queued goes to the collectors in place when it is sent). Cannot fail: a removed
    /// `[logging]` keeps its events setting (nothing is sent anyway).
    pub fn apply(&self, u: LogUpdate) {
        let LogUpdate { targets, events } = u;
        if targets.sock4.is_some() || targets.sock6.is_some() {
            let mut f = match self.families.lock() {
                Ok(f) => f,
                Err(p) => p.into_inner(),
            };
            f.0 |= targets.sock4.is_some();
            f.1 |= targets.sock6.is_some();
        }
        let stopping = targets.syslog.is_empty() && targets.ipfix.is_empty();
        if !stopping {
            self.events.store(events.code(), Ordering::Relaxed);
        }
        match self.pending.lock() {
            Ok(mut p) => *p = Some(targets),
            Err(p) => *p.into_inner() = Some(targets),
        }
        // Wake the thread now; with a full queue it looks at the update within
        // [`UPDATE_POLL`] anyway.
        let _ = self.tx.try_send(Item::Wake);
    }

    /// What the log thread has sent so far.
    pub fn counters(&self) -> Vec<NamedCount> {
        self.counters.named()
    }

    /// Which events go to the log.
    pub fn events(&self) -> LogEvents {
        LogEvents::of_code(self.events.load(Ordering::Relaxed))
    }

    /// Hands a batch to the log thread; returns how many events were dropped because the
    /// queue was full (or the thread gone).
    pub fn send(&self, batch: Vec<StateEvent>) -> u64 {
        if batch.is_empty() {
            // An empty batch tells the log thread to finish ([`EventLog::finish`]).
            return 0;
        }
        let level = self.events();
        match self.tx.try_send(Item::Events(batch, level)) {
            Ok(()) => 0,
            Err(
                TrySendError::Full(Item::Events(b, _))
                | TrySendError::Disconnected(Item::Events(b, _)),
            ) => logged(&b, level),
            Err(_) => 0,
        }
    }
}

impl EventLog {
    /// [`EventLog::send`], but waiting for room in the queue until `deadline` (the daemon
    /// stopping, [`crate::worker`]): returns how many events were lost.
    pub fn send_until(&self, batch: Vec<StateEvent>, deadline: Instant) -> u64 {
        if batch.is_empty() {
            return 0;
        }
        let level = self.events();
        let n = logged(&batch, level);
        let mut batch = Item::Events(batch, level);
        loop {
            match self.tx.try_send(batch) {
                Ok(()) => return 0,
                Err(TrySendError::Disconnected(_)) => return n,
                Err(TrySendError::Full(b)) if Instant::now() < deadline => {
                    batch = b;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TrySendError::Full(_)) => return n,
            }
        }
    }

    /// After the workers stopped: lets the log thread send what is queued, then end; waits
    /// for it at most `timeout`.
    pub fn finish(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            match self.tx.try_send(Item::Finish) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TrySendError::Full(_)) => return,
            }
        }
        let handle = match self.thread.lock() {
            Ok(mut h) => h.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let Some(h) = handle else { return };
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if h.is_finished() {
            let _ = h.join();
        }
    }
}

/// The log thread: the sockets, the collectors, the IPFIX exporter's state.
struct Sender {
    sock4: Option<UdpSocket>,
    sock6: Option<UdpSocket>,
    syslog: Vec<SocketAddr>,
    ipfix: Vec<SocketAddr>,
    exporter: Exporter,
    host: String,
    pid: u32,
    /// Wall time of the engines' clock zero.
    epoch: Duration,
    counters: Arc<LogCounters>,
    /// Where [`EventLog::apply`] leaves an update.
    pending: Arc<Mutex<Option<Targets>>>,
}

/// How long the log thread waits for a batch before it looks at a pending update (one is
/// normally announced by a wake in the queue; a full queue delays that).
const UPDATE_POLL: Duration = Duration::from_millis(250);

impl Sender {
    /// Takes a pending update: the new collectors and exporter keys. A new IPFIX collector
    /// gets a message with the templates at once (RFC 7011 8.1: templates before the data
    /// records that use them); a new observation domain starts its sequence at 0 with the
    /// templates to every collector.
    fn update(&mut self) {
        let t = match self.pending.lock() {
            Ok(mut p) => p.take(),
            Err(p) => p.into_inner().take(),
        };
        let Some(t) = t else { return };
        if t.sock4.is_some() {
            self.sock4 = t.sock4;
        }
        if t.sock6.is_some() {
            self.sock6 = t.sock6;
        }
        self.syslog = t.syslog;
        if t.ipfix.is_empty() {
            self.ipfix.clear();
            return;
        }
        let new_domain = self.exporter.domain() != t.domain;
        if new_domain {
            self.exporter =
                Exporter::new(t.domain, crate::ipfix::DEFAULT_MAX_LEN, t.refresh, t.quota)
                    .with_port_quota(t.port_quota);
        } else {
            self.exporter.set_keys(t.refresh, t.quota, t.port_quota);
        }
        let added: Vec<SocketAddr> = t
            .ipfix
            .iter()
            .filter(|a| new_domain || !self.ipfix.contains(a))
            .copied()
            .collect();
        self.ipfix = t.ipfix;
        if added.is_empty() {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let m = self.exporter.templates(now);
        let (mut sent, mut failed) = (0, 0);
        for to in &added {
            match self.send(&m.bytes, to) {
                Ok(_) => sent += 1,
                Err(_) => failed += 1,
            }
        }
        let c = &self.counters;
        c.ipfix_messages_sent.fetch_add(sent, Ordering::Relaxed);
        c.ipfix_send_errors.fetch_add(failed, Ordering::Relaxed);
    }

    /// Until the workers are gone or an empty batch ([`EventLog::finish`]) comes: waits for
    /// a batch, takes what else is queued (up to [`TAKE_BATCHES`]), sends it as syslog lines
    /// and IPFIX messages.
    fn run(mut self, rx: &Receiver<Item>) {
        let mut events: Vec<StateEvent> = Vec::new();
        let mut line = String::with_capacity(512);
        let mut messages = Vec::new();
        let mut errors = 0u64;
        let mut last_warn = Instant::now() - Duration::from_secs(60);
        let mut finishing = false;
        while !finishing {
            events.clear();
            let mut take = |item: Item, events: &mut Vec<StateEvent>| match item {
                Item::Events(more, level) => {
                    for e in &more {
                        level.unfold_into(e, events);
                    }
                }
                Item::Wake => {}
                Item::Finish => finishing = true,
            };
            match rx.recv_timeout(UPDATE_POLL) {
                Ok(first) => take(first, &mut events),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            for _ in 1..TAKE_BATCHES {
                match rx.try_recv() {
                    Ok(more) => take(more, &mut events),
                    Err(_) => break,
                }
            }
            // An update applies before what is sent next: the events queued before the
            // reload go to the collectors of after it (a removed one gets no more).
            self.update();
            if events.is_empty() {
                continue;
            }
            errors += self.syslog(&events, &mut line);
            errors += self.ipfix(&events, &mut messages);
            if errors > 0 && last_warn.elapsed() >= Duration::from_secs(10) {
                warn!(errors, "event log: sending to a collector failed");
                errors = 0;
                last_warn = Instant::now();
            }
        }
    }

    /// Sends one datagram to `to` from the socket of its address family.
    fn send(&self, buf: &[u8], to: &SocketAddr) -> std::io::Result<usize> {
        let sock = if to.is_ipv6() {
            &self.sock6
        } else {
            &self.sock4
        };
        match sock {
            Some(s) => s.send_to(buf, to),
            None => Err(std::io::ErrorKind::AddrNotAvailable.into()),
        }
    }

    /// One line an event to every syslog collector; returns the failed sends.
    fn syslog(&self, events: &[StateEvent], line: &mut String) -> u64 {
        if self.syslog.is_empty() {
            return 0;
        }
        let (mut sent, mut failed) = (0, 0);
        for ev in events {
            line.clear();
            let at = self.epoch + Duration::from_nanos(ev.at.0);
            syslog_line(line, ev, at, &self.host, self.pid);
            for t in &self.syslog {
                match self.send(line.as_bytes(), t) {
                    Ok(_) => sent += 1,
                    Err(_) => failed += 1,
                }
            }
        }
        let c = &self.counters;
        c.syslog_lines_sent.fetch_add(sent, Ordering::Relaxed);
        c.syslog_send_errors.fetch_add(failed, Ordering::Relaxed);
        failed
    }

    /// The events as IPFIX messages to every IPFIX collector (the same messages to each:
    /// every collector's transport session sees the same sequence numbers); returns the
    /// failed sends.
    fn ipfix(&mut self, events: &[StateEvent], messages: &mut Vec<crate::ipfix::Message>) -> u64 {
        if self.ipfix.is_empty() {
            return 0;
        }
        messages.clear();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.exporter.encode(events, self.epoch, now, messages);
        let (mut sent, mut records, mut failed) = (0, 0, 0);
        for m in messages.iter() {
            for t in &self.ipfix {
                match self.send(&m.bytes, t) {
                    Ok(_) => {
                        sent += 1;
                        records += u64::from(m.records);
                    }
                    Err(_) => failed += 1,
                }
            }
        }
        let c = &self.counters;
        c.ipfix_messages_sent.fetch_add(sent, Ordering::Relaxed);
        c.ipfix_send_errors.fetch_add(failed, Ordering::Relaxed);
        c.ipfix_records_sent.fetch_add(records, Ordering::Relaxed);
        failed
    }
}

/// The host's name for the HOSTNAME field ("-" when unknown, RFC 5424 6.2.4).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && s.is_ascii() && !s.contains(' '))
        .unwrap_or_else(|| "-".into())
}

/// The RFC 8158 natEvent name of an event (section 4.1's table, its IANA values in
/// parentheses), used as the syslog MSGID.
pub fn event_name(ev: &StateEvent) -> &'static str {
    let v6 = ev.translator == Translator::Nat64;
    match (ev.kind, v6) {
        (EventKind::SessionCreated, false) => "NAT44_SESSION_CREATE", // 4
        (EventKind::SessionDeleted(_), false) => "NAT44_SESSION_DELETE", // 5
        (EventKind::SessionCreated, true) => "NAT64_SESSION_CREATE",  // 6
        (EventKind::SessionDeleted(_), true) => "NAT64_SESSION_DELETE", // 7
        (EventKind::MappingCreated, false) => "NAT44_BIB_CREATE",     // 8
        (EventKind::MappingDeleted, false) => "NAT44_BIB_DELETE",     // 9
        (EventKind::MappingCreated, true) => "NAT64_BIB_CREATE",      // 10
        (EventKind::MappingDeleted, true) => "NAT64_BIB_DELETE",      // 11
        (EventKind::AddressesExhausted, _) => "ADDRESSES_EXHAUSTED",  // 3
        (EventKind::PortsExhausted, _) => "PORTS_EXHAUSTED",          // 12
        (EventKind::QuotaExceeded, _) => "QUOTA_EXCEEDED",            // 13
        (EventKind::HostBound, _) => "ADDRESS_BINDING_CREATE",        // 14
        (EventKind::HostUnbound, _) => "ADDRESS_BINDING_DELETE",      // 15
        (EventKind::PortBlockAllocated, _) => "PORT_BLOCK_ALLOC",     // 16
        (EventKind::PortBlockReleased, _) => "PORT_BLOCK_DEALLOC",    // 17
        (EventKind::FastPath(_), _) => "FAST_PATH",
    }
}

fn reason_name(r: EndReason) -> &'static str {
    match r {
        EndReason::Expired => "expired",
        EndReason::Evicted => "evicted",
        EndReason::Cleared => "cleared",
        EndReason::Reload => "reload",
        EndReason::Stopped => "stopped",
    }
}

/// Appends one RFC 5424 line for `ev` at wall time `at` (since the Unix epoch) to `out`:
///
/// ```text
/// <134>1 2026-11-26T14:02:11.123456Z gw xlat 812 NAT44_SESSION_CREATE - proto=tcp inside=198.18.0.7 inside_port=40312 outside=198.19.0.100 outside_port=40312 remote=198.19.0.2 remote_port=80
/// ```
///
/// PRI 134 is facility local0 (16), severity informational (6), RFC 5424 6.2.1. Keys
/// without a value for the event (a mapping has no remote) are left out; a deleted session
/// adds `reason=expired|evicted|cleared|reload`.
pub fn syslog_line(out: &mut String, ev: &StateEvent, at: Duration, host: &str, pid: u32) {
    let _ = write!(out, "<134>1 ");
    timestamp(out, at);
    let _ = write!(
        out,
        " {host} xlat {pid} {} - proto={}",
        event_name(ev),
        ev.proto.name()
    );
    let unspecified = match ev.inside {
        IpAddr::V4(a) => a.is_unspecified(),
        IpAddr::V6(a) => a.is_unspecified(),
    };
    if !unspecified {
        let _ = write!(out, " inside={}", ev.inside);
        if ev.inside_port != 0 || ev.session.is_some() {
            let _ = write!(out, " inside_port={}", ev.inside_port);
        }
    }
    let block = matches!(
        ev.kind,
        EventKind::PortBlockAllocated | EventKind::PortBlockReleased
    );
    if block {
        // A port block: its first and last port (`outside_port`, `remote_port`).
        let _ = write!(
            out,
            " outside={} ports={}-{}",
            ev.outside, ev.outside_port, ev.remote_port
        );
    } else if !ev.outside.is_unspecified() {
        let _ = write!(out, " outside={}", ev.outside);
        if ev.outside_port != 0 || ev.session.is_some() {
            let _ = write!(out, " outside_port={}", ev.outside_port);
        }
    }
    if ev.session.is_some() {
        let _ = write!(out, " remote={}", ev.remote);
        if ev.proto != xlat_engine::flow::Proto::Icmp {
            let _ = write!(out, " remote_port={}", ev.remote_port);
        }
    }
    if let EventKind::SessionDeleted(r) = ev.kind {
        let _ = write!(out, " reason={}", reason_name(r));
    }
}

/// RFC 5424 6.2.3 TIMESTAMP (RFC 3339, UTC, microseconds).
fn timestamp(out: &mut String, at: Duration) {
    let secs = at.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    let _ = write!(
        out,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        at.subsec_micros()
    );
}

/// Year, month, day of a count of days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use xlat_engine::flow::Proto;
    use xlat_engine::Time;

    fn session(kind: EventKind) -> StateEvent {
        StateEvent {
            at: Time::from_secs(1),
            kind,
            translator: Translator::Nat44,
            session: Some(3),
            proto: Proto::Tcp,
            inside: "198.18.0.7".parse().unwrap(),
            inside_port: 40312,
            outside: Ipv4Addr::new(198, 19, 0, 100),
            outside_port: 40312,
            remote: Ipv4Addr::new(198, 19, 0, 2),
            remote_port: 80,
            with_mapping: false,
        }
    }

    #[test]
    fn a_session_line_is_rfc5424_with_its_values() {
        let mut s = String::new();
        // 2026-11-26T14:02:11.123456Z
        let at = Duration::new(1_795_701_731, 123_456_000);
        syslog_line(&mut s, &session(EventKind::SessionCreated), at, "gw", 812);
        assert_eq!(
            s,
            "<134>1 2026-11-26T14:02:11.123456Z gw xlat 812 NAT44_SESSION_CREATE - proto=tcp \
             inside=198.18.0.7 inside_port=40312 outside=198.19.0.100 outside_port=40312 \
             remote=198.19.0.2 remote_port=80"
        );
        s.clear();
        syslog_line(
            &mut s,
            &session(EventKind::SessionDeleted(EndReason::Cleared)),
            at,
            "gw",
            812,
        );
        assert!(s.contains(" NAT44_SESSION_DELETE - "), "{s}");
        assert!(s.ends_with(" reason=cleared"), "{s}");
    }

    #[test]
    fn a_mapping_line_has_no_remote_and_nat64_names_its_ipv6_host() {
        let mut e = session(EventKind::MappingCreated);
        e.session = None;
        e.translator = Translator::Nat64;
        e.inside = "2001:db8::7".parse().unwrap();
        e.remote = Ipv4Addr::UNSPECIFIED;
        e.remote_port = 0;
        let mut s = String::new();
        syslog_line(&mut s, &e, Duration::from_secs(0), "-", 1);
        assert_eq!(
            s,
            "<134>1 1970-01-01T00:00:00.000000Z - xlat 1 NAT64_BIB_CREATE - proto=tcp \
             inside=2001:db8::7 inside_port=40312 outside=198.19.0.100 outside_port=40312"
        );
    }

    #[test]
    fn dates_across_leap_years() {
        let day = |d: u64| {
            let mut s = String::new();
            timestamp(&mut s, Duration::from_secs(d * 86_400));
            s[..10].to_string()
        };
        assert_eq!(day(0), "1970-01-01");
        assert_eq!(day(11_016), "2000-02-29");
        assert_eq!(day(11_017), "2000-03-01");
        assert_eq!(day(20_783), "2026-11-26");
    }

    #[test]
    fn a_logging_change_names_its_keys_and_only_turning_it_on_is_refused() {
        let a = LogConfig {
            syslog: vec![],
            ipfix: vec!["192.0.2.50:4739".parse().unwrap()],
            ipfix_template_refresh: Duration::from_secs(60),
            ipfix_domain_id: 1,
            max_sessions_per_host: 100,
            ports_per_host: 0,
            events: LogEvents::Sessions,
        };
        let limit = LogConfig {
            max_sessions_per_host: 5,
            ports_per_host: 0,
            ..a.clone()
        };
        assert!(changed_keys(Some(&a), Some(&limit)).is_empty());
        assert!(changed_keys(None, None).is_empty());
        assert_eq!(changed_keys(Some(&a), None), ["logging"]);
        assert_eq!(changed_keys(None, Some(&a)), ["logging"]);
        assert!(refused(false, Some(&a)).is_some_and(|e| e.contains("restart")));
        assert!(refused(false, None).is_none());
        assert!(refused(true, None).is_none());
        assert!(refused(true, Some(&limit)).is_none());
        let b = LogConfig {
            ipfix_domain_id: 2,
            ipfix_template_refresh: Duration::from_secs(61),
            syslog: vec!["192.0.2.51:514".parse().unwrap()],
            ipfix: vec!["192.0.2.52:4739".parse().unwrap()],
            events: LogEvents::Mappings,
            ..a.clone()
        };
        assert_eq!(
            changed_keys(Some(&a), Some(&b)),
            [
                "logging.events",
                "logging.ipfix",
                "logging.ipfix_domain_id",
                "logging.ipfix_template_refresh",
                "logging.syslog"
            ]
        );
    }

    /// A live change of collectors: a kept IPFIX collector goes on with the same source
    /// port and sequence, an added one gets a templates message first, then the data; a
    /// removed one gets nothing more; syslog follows; the events level changes.
    #[test]
    fn a_reload_moves_the_collectors_live() {
        let listen = || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            s
        };
        let (kept, added, removed, sys) = (listen(), listen(), listen(), listen());
        let at = |s: &UdpSocket| s.local_addr().unwrap();
        let cfg = LogConfig {
            syslog: vec![],
            ipfix: vec![at(&kept), at(&removed)],
            ipfix_template_refresh: Duration::from_secs(600),
            ipfix_domain_id: 1,
            max_sessions_per_host: 100,
            ports_per_host: 0,
            events: LogEvents::Sessions,
        };
        let log = EventLog::start(&cfg, Instant::now()).unwrap();
        let mut buf = [0u8; 2048];
        let ev = session(EventKind::SessionCreated);
        assert_eq!(log.send(vec![ev]), 0);
        let (n, from) = kept.recv_from(&mut buf).unwrap();
        assert!(
            n > 16 && u16::from_be_bytes([buf[16], buf[17]]) == 2,
            "templates first"
        );
        removed.recv_from(&mut buf).unwrap();

        let next = LogConfig {
            syslog: vec![at(&sys)],
            ipfix: vec![at(&kept), at(&added)],
            events: LogEvents::Mappings,
            ..cfg.clone()
        };
        let u = log.prepare(Some(&next)).unwrap();
        log.apply(u);
        assert_eq!(log.events(), LogEvents::Mappings);
        // The added collector: a templates message (no record) at once.
        let (n, _) = added.recv_from(&mut buf).unwrap();
        assert_eq!(u16::from_be_bytes([buf[16], buf[17]]), 2);
        assert_eq!(usize::from(u16::from_be_bytes([buf[2], buf[3]])), n);
        assert_eq!(u32::from_be_bytes(buf[8..12].try_into().unwrap()), 1);
        // Then data: to both IPFIX collectors (the kept one from the same port, no
        // templates: not due) and syslog; not to the removed one. At the new level only the
        // mapping folded into a session's event is logged, not the session.
        let folded = StateEvent {
            with_mapping: true,
            ..ev
        };
        assert_eq!(log.send(vec![folded]), 0);
        let (_, from2) = kept.recv_from(&mut buf).unwrap();
        let bib = crate::ipfix::Template::Nat44Bib.id();
        assert_eq!(from, from2, "the same source port");
        assert_eq!(u16::from_be_bytes([buf[16], buf[17]]), bib);
        assert_eq!(u32::from_be_bytes(buf[8..12].try_into().unwrap()), 1);
        added.recv_from(&mut buf).unwrap();
        assert_eq!(u16::from_be_bytes([buf[16], buf[17]]), bib);
        let (n, _) = sys.recv_from(&mut buf).unwrap();
        let line = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(line.contains("NAT44_BIB_CREATE"), "{line}");
        sys.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(
            sys.recv_from(&mut buf).is_err(),
            "one line: the session's is not logged"
        );
        removed
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(
            removed.recv_from(&mut buf).is_err(),
            "nothing for a removed collector"
        );

        // [logging] removed: nothing is sent any more.
        log.apply(log.prepare(None).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(log.send(vec![ev]), 0);
        kept.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(kept.recv_from(&mut buf).is_err());
        log.finish(Duration::from_secs(2));
    }

    /// 1M NAT44 session events offered at 1M/s (batches of 64, as a worker hands them over)
    /// to the log thread exporting IPFIX to a collector on the loopback: how many the queue
    /// dropped and how many records the collector got
    /// (`cargo test --release -p xlat-daemon -- --ignored log_thread_keeps_up --nocapture`;
    /// docs/LOGGING.md has the numbers). Prints; asserts only that nothing is lost
    /// unseen: every event is dropped-and-counted, or sent.
    #[test]
    #[ignore = "measurement: run with --release --nocapture"]
    fn log_thread_keeps_up_with_a_million_sessions_a_second() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let to = rx.local_addr().unwrap();
        let cfg = LogConfig {
            syslog: vec![],
            ipfix: vec![to],
            ipfix_template_refresh: Duration::from_secs(60),
            ipfix_domain_id: 1,
            max_sessions_per_host: 100,
            ports_per_host: 0,
            events: LogEvents::Sessions,
        };
        let collector = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let (mut messages, mut got, mut last_seq, mut last_n) = (0u64, 0u64, 0u32, 0u32);
            while let Ok(n) = rx.recv(&mut buf) {
                messages += 1;
                last_seq = u32::from_be_bytes(buf[8..12].try_into().unwrap());
                // Records in this message: NAT44 session records of 28 octets after the
                // header, the template set in the first one.
                let mut at = 16;
                last_n = 0;
                while at + 4 <= n {
                    let id = u16::from_be_bytes([buf[at], buf[at + 1]]);
                    let len = usize::from(u16::from_be_bytes([buf[at + 2], buf[at + 3]]));
                    if id == 256 {
                        last_n += ((len - 4) / 28) as u32;
                    }
                    at += len.max(4);
                }
                got += u64::from(last_n);
            }
            // What the last sequence number says was sent, and what arrived.
            (messages, u64::from(last_seq) + u64::from(last_n), got)
        });
        let log = EventLog::start(&cfg, Instant::now()).unwrap();
        let ev = session(EventKind::SessionCreated);
        let (total, batch) = (1_000_000u64, 64u64);
        let mut dropped = 0;
        let start = Instant::now();
        for k in 0..total / batch {
            // Paced: batch k leaves at k * 64 us.
            let due = Duration::from_micros(k * batch);
            while start.elapsed() < due {
                std::hint::spin_loop();
            }
            dropped += log.send(vec![ev; batch as usize]);
        }
        let offered = start.elapsed();
        let sent = |name: &str| {
            log.counters()
                .iter()
                .find(|c| c.name == name)
                .map_or(0, |c| c.value)
        };
        let mut waited = 0;
        while sent("ipfix_records_sent") + dropped < total && waited < 100 {
            std::thread::sleep(Duration::from_millis(50));
            waited += 1;
        }
        let records = sent("ipfix_records_sent");
        let (msgs_sent, errors) = (sent("ipfix_messages_sent"), sent("ipfix_send_errors"));
        drop(log);
        let (messages, by_seq, received) = collector.join().unwrap();
        println!(
            "log thread: {total} events offered in {offered:?}; dropped at the queue {dropped}, \
             records sent {records} in {} messages (send errors {}), collector got {messages} \
             messages holding {received} records; its sequence numbers say {by_seq} were sent",
            msgs_sent, errors,
        );
        assert_eq!(records + dropped, total);
    }

    #[test]
    fn a_port_block_line_names_the_host_and_its_ports() {
        let mut e = session(EventKind::PortBlockAllocated);
        e.session = None;
        e.proto = Proto::Udp;
        e.inside_port = 0;
        e.outside_port = 1536;
        e.remote = Ipv4Addr::UNSPECIFIED;
        e.remote_port = 2047;
        let mut s = String::new();
        syslog_line(&mut s, &e, Duration::from_secs(0), "gw", 1);
        assert_eq!(
            s,
            "<134>1 1970-01-01T00:00:00.000000Z gw xlat 1 PORT_BLOCK_ALLOC - proto=udp \
             inside=198.18.0.7 outside=198.19.0.100 ports=1536-2047"
        );
        e.kind = EventKind::PortBlockReleased;
        s.clear();
        syslog_line(&mut s, &e, Duration::from_secs(0), "gw", 1);
        assert!(s.contains(" PORT_BLOCK_DEALLOC - "), "{s}");
    }

    #[test]
    fn which_events_each_level_takes() {
        use xlat_engine::offload::OffloadKind;
        let s = LogEvents::Sessions;
        let m = LogEvents::Mappings;
        let b = LogEvents::PortBlocks;
        assert!(b.takes(EventKind::PortBlockAllocated) && b.takes(EventKind::PortBlockReleased));
        assert!(m.takes(EventKind::PortBlockAllocated) && s.takes(EventKind::PortBlockReleased));
        assert!(!b.takes(EventKind::SessionCreated) && !b.takes(EventKind::MappingCreated));
        assert!(!b.takes(EventKind::HostBound) && b.takes(EventKind::QuotaExceeded));
        assert!(s.takes(EventKind::SessionCreated) && !m.takes(EventKind::SessionCreated));
        assert!(s.takes(EventKind::MappingDeleted) && m.takes(EventKind::MappingDeleted));
        assert!(m.takes(EventKind::PortsExhausted));
        assert!(!s.takes(EventKind::FastPath(OffloadKind::Install)));
    }
}
