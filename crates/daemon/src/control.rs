//! The control socket: `xlat show` talks to a running daemon through it.
//!
//! Protocol: a Unix stream socket (mode 0600). The client writes one JSON request per line, the
//! daemon answers each with one JSON line, and either side may close after that:
//!
//! ```text
//! -> {"cmd":"stats"}
//! <- {"stats":{"sessions":3,...,"io":{"tun_rx_packets":10,...}}}
//! -> {"cmd":"sessions"}            (optionally "limit":N, "filter":{"inside":"198.18.0.7","proto":"tcp"})
//! <- {"sessions":[{"proto":"udp","inside":"198.18.0.10:5000",...}]}
//! -> {"cmd":"clear","filter":{"inside":"198.18.0.7"}}
//! <- {"cleared":4}
//! -> {"cmd":"ping"}
//! <- {"pong":{"version":"0.1.0","uptime_secs":12}}
//! -> {"cmd":"trace","count":10,"timeout_secs":10,"filter":{"inside":"198.18.0.7","proto":"icmp"}}
//! <- {"trace":[{"at_ns":1200,"worker":0,"ingress":"tun","translator":"nat44",...}]}  (after N or the timeout)
//! <- {"error":"bad request: ..."}  (on any failure)
//! ```
//!
//! Each packet worker owns its engine, so the packet path takes no locks: the control thread
//! ([`ControlServer`]) passes each request with a reply channel through a std mpsc channel
//! per worker ([`ControlMsg`]) and wakes the workers through their eventfds
//! ([`xlat_io::sys::Waker`]); each answers between batches, and the control thread merges
//! the answers ([`merge`]: counters and tables added up, sessions listed together, one row
//! per worker under `"workers"`).
//!
//! Each connection is served on its own thread (at most [`MAX_CLIENTS`] at once; one more
//! is answered `{"error":"busy..."}` and closed), with read and write timeouts of
//! [`IO_TIMEOUT`], so a client that connects and sends nothing delays nobody else.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};
use xlat_dns64::Dns64Counters;
use xlat_engine::counters::NamedCount;
use xlat_engine::trace::TraceFilter;
use xlat_engine::{EngineConfig, SessionCursor, SessionFilter, SessionInfo, Stats};
use xlat_io::sys::{wait_readable, Waker};

use crate::routes::{RoutePlan, Routes};

/// Longest request line accepted.
pub const MAX_REQUEST: u64 = 64 * 1024;
/// How long the control thread waits for the worker's answer.
pub const WORKER_TIMEOUT: Duration = Duration::from_secs(5);
/// Client and server read/write timeout on a connection.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once.
pub const MAX_CLIENTS: usize = 16;

/// A request line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The translation table; at most `limit` rows when given; only the sessions `filter`
    /// takes (applied inside each worker's engine, before formatting).
    Sessions {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
        #[serde(default, skip_serializing_if = "SessionFilter::any")]
        filter: SessionFilter,
    },
    /// Removes the dynamic sessions `filter` takes (every one when it is empty; static
    /// entries stay); answered with how many.
    Clear {
        #[serde(default)]
        filter: SessionFilter,
    },
    /// Read the configuration file again and apply what changed live, all or nothing
    /// (`xlat reload`, SIGHUP).
    Reload {},
    /// Internal, from the control thread to the packet workers (never on the socket): the
    /// new engine configuration of each worker, in worker order.
    #[serde(skip)]
    Reconfigure(Arc<Reconfig>),
    /// Counters and table sizes.
    Stats {},
    /// Session sync (`[sync]`): make this gateway active (it forwards, with the synced
    /// table) or standby (it drops its sessions and asks the active for its table);
    /// keepalived's notify hook sends it (`xlat sync role active|standby`).
    SyncRole { role: String },
    /// Session sync's state and counters (`xlat show sync`).
    SyncStatus {},
    /// Internal, from the sync thread to a packet worker: the peer's session events whose
    /// inside hosts this worker owns, to install or remove.
    #[serde(skip)]
    SyncApply(Arc<Vec<xlat_engine::events::StateEvent>>),
    /// Internal: a full resync begins, drop the synced copies.
    #[serde(skip)]
    SyncClear,
    /// Internal: put a snapshot of the table in the sync queue (the peer asked for it).
    #[serde(skip)]
    SyncSnapshot,
    /// Liveness and version.
    Ping {},
    /// `xlat trace`: record the next `count` packets `filter` takes, waiting at most
    /// `timeout_secs`; answered with the records, oldest first (the control thread's `trace`).
    Trace {
        #[serde(default, skip_serializing_if = "trace_filter_any")]
        filter: TraceFilter,
        count: usize,
        timeout_secs: u64,
    },
    /// Internal, from the control thread to the packet workers: record the next `count`
    /// packets `filter` takes until `timeout` from now.
    #[serde(skip)]
    TraceArm {
        filter: TraceFilter,
        count: usize,
        timeout: Duration,
    },
    /// Internal: hand over the records so far; `stop` ends the trace.
    #[serde(skip)]
    TraceTake { stop: bool },
    /// Internal, from the control thread to one packet worker: a page of its table for a
    /// `{"cmd":"sessions"}` listing (`crate::listing`).
    #[serde(skip)]
    SessionsPage {
        filter: SessionFilter,
        from: SessionCursor,
    },
}

fn trace_filter_any(f: &TraceFilter) -> bool {
    *f == TraceFilter::default()
}

/// Most packets one `xlat trace` records.
pub const MAX_TRACE_COUNT: usize = 10_000;
/// Longest `xlat trace` wait.
pub const MAX_TRACE_SECS: u64 = 3600;
/// How often the control thread collects the workers' trace records.
const TRACE_POLL: Duration = Duration::from_millis(50);

/// Where a traced packet came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingress {
    /// Read from the worker's TUN queue (the kernel routed it into the xlat device).
    Tun,
    /// Read from the worker's AF_XDP socket (`[dataplane] slow_path = "af_xdp"`).
    AfXdp,
    /// Read by another worker and handed to this one, which owns its session.
    Handoff,
}

/// One traced packet, as the daemon answers it (`{"trace":[...]}`): the engine's
/// [`xlat_engine::trace::TraceRecord`] with the worker's side, its verdict and drop reason
/// named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// When the worker translated it: nanoseconds since the daemon started.
    pub at_ns: u64,
    pub worker: u64,
    /// Its place in the worker's records (orders records of one batch).
    pub seq: u64,
    pub ingress: Ingress,
    /// `None`: no translator takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translator: Option<xlat_engine::trace::Translator>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<xlat_engine::trace::Direction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<xlat_engine::trace::Headers>,
    pub lookup: xlat_engine::trace::Lookup,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mapping_created: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hairpin: bool,
    /// What was transmitted: the translated packet, or the ICMP error sent back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<xlat_engine::trace::Headers>,
    /// "forwarded", "reply" (an ICMP error sent back in its place), "dropped" or "held".
    pub verdict: String,
    /// The drop reason's stable name (`xlat show stats`), for "dropped" and "reply".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The reason's explanation (`xlat show stats --explain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<String>,
}

impl TraceEntry {
    /// Names a worker's record (on the control path, between batches).
    pub fn new(
        worker: usize,
        seq: u64,
        ingress: Ingress,
        r: &xlat_engine::trace::TraceRecord,
    ) -> TraceEntry {
        use xlat_engine::Verdict;
        let (verdict, reason) = match r.verdict {
            Verdict::Forward => ("forwarded", None),
            Verdict::Held => ("held", None),
            Verdict::Drop(d) => ("dropped", Some(d)),
            Verdict::Reply(d) => ("reply", Some(d)),
        };
        TraceEntry {
            at_ns: r.at.0,
            worker: worker as u64,
            seq,
            ingress,
            translator: r.translator,
            direction: r.direction,
            before: r.before,
            lookup: r.lookup,
            mapping_created: r.mapping_created,
            hairpin: r.hairpin,
            after: r.after,
            verdict: verdict.to_string(),
            reason: reason.map(|d| d.name().to_string()),
            explain: reason.map(|d| d.explain().to_string()),
        }
    }
}

/// Counters of the TUN driver (the engine does not see these).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoCounters {
    pub tun_rx_packets: u64,
    pub tun_tx_packets: u64,
    /// Writes to the TUN device that failed (packet lost after translation).
    pub tun_write_errors: u64,
    /// Packets read from the TUN device and dropped because their virtio-net header
    /// asked for an offload xlat does not take (`[tun] offload`; the kernel sends none).
    #[serde(default)]
    pub tun_offload_refused: u64,
    pub uptime_secs: u64,
}

/// One packet worker's part of `{"cmd":"stats"}` (`"workers"`, one row per worker).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// The worker's number (0 to `[dataplane] workers` - 1).
    pub worker: u64,
    /// Packets read from this worker's TUN queue.
    pub tun_rx_packets: u64,
    /// Packets its engine took in (its own from the queue, and those handed to it).
    pub packets_in: u64,
    /// Sessions in its engine.
    pub sessions: u64,
    /// Handoff and fragment-wait counters (`handoffs_out`, `handoff_ring_full`, ...), each
    /// with its explanation.
    pub counters: Vec<NamedCount>,
}

impl WorkerStats {
    /// Value of a named counter (0 if unknown).
    pub fn get(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.value)
    }
}

/// The daemon's answer to `{"cmd":"stats"}`: the engine's [`Stats`] fields (summed over the
/// workers), plus `io`, plus `dns64` when `[dns64]` runs, plus one row per worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStats {
    #[serde(flatten)]
    pub engine: Stats,
    pub io: IoCounters,
    /// The DNS64 proxy's counters (`xlat_dns64::Dns64Counters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns64: Option<Dns64Counters>,
    /// The XDP fast path's state and counters, when `[dataplane] fast_path = "xdp"` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<FastPathStats>,
    /// The event log's counters (`[logging]`: syslog lines and IPFIX messages sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<Vec<NamedCount>>,
    /// Session sync's state and counters (`[sync]`), when on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<crate::sync::SyncStatus>,
    /// The packet workers (`[dataplane] workers`), in order; empty from a daemon older than
    /// this field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerStats>,
}

/// `[dataplane]` fast path in `{"cmd":"stats"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FastPathStats {
    /// "xdp".
    pub kind: String,
    /// Interfaces the program is attached to.
    pub interfaces: Vec<String>,
    /// Recipes installed (two per offloaded session).
    pub recipes: u64,
    /// Recipes the kernel refused (table full: `[dataplane].table_size`).
    pub install_errors: u64,
    /// Destinations in the AF_XDP slow path's egress cache (`slow_path = "af_xdp"`), when on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_destinations: Option<u64>,
    /// The program's counters (redirected, and why packets were passed on).
    pub counters: Vec<NamedCount>,
}

/// `{"cmd":"ping"}` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    pub version: String,
    pub uptime_secs: u64,
}

/// The packet workers' new configuration (a reload), applied by each between batches.
#[derive(Debug)]
pub struct Reconfig {
    /// Each worker's engine configuration, in worker order.
    pub engines: Vec<EngineConfig>,
    /// Where packets belong with several workers (the pool and static entries steer them).
    pub shards: Option<xlat_engine::shard::Shards>,
}

// Requests compare (tests); the steering is made from the engines' configurations and their
// count, so equal configurations mean equal steering.
impl PartialEq for Reconfig {
    fn eq(&self, o: &Reconfig) -> bool {
        self.engines == o.engines && self.shards.is_some() == o.shards.is_some()
    }
}

impl Eq for Reconfig {}

/// What a reload applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// The keys that changed (empty: the file changed nothing).
    pub keys: Vec<String>,
    /// Sessions the new configuration no longer allows, ended (a pool address removed, a
    /// forward changed, ...).
    #[serde(default)]
    pub sessions_ended: u64,
    /// What went wrong after the engines took the configuration (a route that could not
    /// be added): the reload stands, the operator should look.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A response line (externally tagged: `{"sessions":[...]}`, `{"stats":{...}}`,
/// `{"pong":{...}}`, `{"error":"..."}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Sessions(Vec<SessionInfo>),
    /// Sessions removed by `{"cmd":"clear"}`.
    Cleared(u64),
    /// A reload applied: what changed.
    Reloaded(Reloaded),
    /// A reload refused: the file is invalid or changes what needs a restart; the running
    /// configuration stays. The message names file, key, problem and fix.
    Refused(String),
    Stats(Box<DaemonStats>),
    Pong(Pong),
    /// Session sync's state (`{"cmd":"sync_status"}`, and the answer to `sync_role`).
    Sync(Box<crate::sync::SyncStatus>),
    /// `{"cmd":"trace"}`: the packets recorded, oldest first.
    Trace(Vec<TraceEntry>),
    Error(String),
    /// Internal: a worker's page of its table, and where the next one starts.
    #[serde(skip)]
    SessionsPage {
        rows: Vec<SessionInfo>,
        next: Option<SessionCursor>,
    },
}

/// One request on its way to the worker, with where to send the answer.
pub struct ControlMsg {
    pub request: Request,
    pub reply: Sender<Response>,
}

/// How the control thread reaches one packet worker.
#[derive(Clone)]
pub struct WorkerLink {
    pub tx: crate::inbox::Postbox,
    pub waker: Arc<Waker>,
}

impl WorkerLink {
    /// Hands `request` to the worker and wakes it; the answer arrives on the receiver
    /// (`None`: the worker has gone).
    pub fn ask(&self, request: Request) -> Option<Receiver<Response>> {
        let (reply, rx) = mpsc::channel();
        self.tx.post(ControlMsg { request, reply }).ok()?;
        self.waker.wake();
        Some(rx)
    }

    /// [`WorkerLink::ask`] without waiting for the answer (it is dropped).
    pub fn tell(&self, request: Request) {
        drop(self.ask(request));
    }
}

/// The workers' answers to one request as one answer: an error if any worker failed;
/// stats added up -- table
/// sizes, pool ports and counters summed (each worker has its own sessions and port
/// slice), pool addresses as the largest count any worker reports (each sees every pool
/// address), `io` summed (uptime the longest), the worker rows in order, `dns64` and
/// `fast_path` from the worker that reports them.
pub fn merge(answers: Vec<Response>) -> Response {
    if let Some(e) = answers
        .iter()
        .find(|r| matches!(r, Response::Error(_) | Response::Refused(_)))
    {
        return e.clone();
    }
    let mut it = answers.into_iter();
    let Some(mut first) = it.next() else {
        return Response::Error("no packet worker answered".to_string());
    };
    for r in it {
        match (&mut first, r) {
            (Response::Cleared(all), Response::Cleared(more)) => *all += more,
            (Response::Reloaded(all), Response::Reloaded(more)) => {
                all.sessions_ended += more.sessions_ended
            }
            (Response::Stats(all), Response::Stats(more)) => add_stats(all, *more),
            (Response::Pong(_), Response::Pong(_)) => {}
            (Response::Sync(_), Response::Sync(_)) => {}
            (Response::Trace(all), Response::Trace(more)) => all.extend(more),
            _ => return Response::Error("the packet workers answered differently".to_string()),
        }
    }
    first
}

/// Adds one worker's stats to the running total (see [`merge`]).
fn add_stats(a: &mut DaemonStats, b: DaemonStats) {
    let (e, f) = (&mut a.engine, b.engine);
    e.sessions += f.sessions;
    e.mappings += f.mappings;
    e.hosts += f.hosts;
    e.fragment_flows += f.fragment_flows;
    e.fragments_held += f.fragments_held;
    e.pool_addresses = e.pool_addresses.max(f.pool_addresses);
    e.pool_addresses_used = e.pool_addresses_used.max(f.pool_addresses_used);
    for row in f.pool {
        match e.pool.iter_mut().find(|r| r.proto == row.proto) {
            Some(r) => {
                r.ports_used += row.ports_used;
                r.ports_total += row.ports_total;
            }
            None => e.pool.push(row),
        }
    }
    add_counts(&mut e.events, f.events);
    add_counts(&mut e.drops, f.drops);
    let (x, y) = (&mut a.io, b.io);
    x.tun_rx_packets += y.tun_rx_packets;
    x.tun_tx_packets += y.tun_tx_packets;
    x.tun_write_errors += y.tun_write_errors;
    x.tun_offload_refused += y.tun_offload_refused;
    x.uptime_secs = x.uptime_secs.max(y.uptime_secs);
    a.workers.extend(b.workers);
    a.workers.sort_by_key(|w| w.worker);
    if a.dns64.is_none() {
        a.dns64 = b.dns64;
    }
    if a.fast_path.is_none() {
        a.fast_path = b.fast_path;
    }
    if a.log.is_none() {
        a.log = b.log;
    }
    if a.sync.is_none() {
        a.sync = b.sync;
    }
}

/// Adds counters by name (a name only `b` has is appended).
fn add_counts(a: &mut Vec<NamedCount>, b: Vec<NamedCount>) {
    for c in b {
        match a.iter_mut().find(|x| x.name == c.name) {
            Some(x) => x.value += c.value,
            None => a.push(c),
        }
    }
}

/// Encodes a request as one line (with the newline).
pub fn encode_request(r: &Request) -> String {
    let mut s = serde_json::to_string(r).unwrap_or_else(|_| "{}".to_string());
    s.push('\n');
    s
}

/// Parses a request line.
pub fn decode_request(line: &str) -> Result<Request, String> {
    serde_json::from_str(line.trim()).map_err(|e| {
        format!(
            "bad request: {e}; expected one JSON object per line: {{\"cmd\":\"stats\"}}, {{\"cmd\":\"sessions\"}} or {{\"cmd\":\"ping\"}}"
        )
    })
}

/// Encodes a response as one line (with the newline).
pub fn encode_response(r: &Response) -> String {
    let mut s = serde_json::to_string(r)
        .unwrap_or_else(|e| format!("{{\"error\":\"cannot encode the response: {e}\"}}"));
    s.push('\n');
    s
}

/// Parses a response line.
pub fn decode_response(line: &str) -> Result<Response, serde_json::Error> {
    serde_json::from_str(line.trim())
}

// ---- server ----------------------------------------------------------------------------------

/// Listens on the control socket in its own thread; dropping it stops the thread and removes
/// the socket file.
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Why the control socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("another xlat daemon is listening at {0}; stop it or choose another [control].socket")]
    InUse(String),
    #[error("{0} exists and is not a socket; remove it or choose another [control].socket")]
    NotASocket(String),
    #[error("control socket {path}: {error}")]
    Io { path: String, error: std::io::Error },
}

impl ControlServer {
    /// Binds `path` (replacing a stale socket file), sets mode 0600 and starts serving.
    /// Requests go to `tx`; `waker` is woken after each.
    pub fn start(
        path: &Path,
        tx: crate::inbox::Postbox,
        waker: Arc<Waker>,
    ) -> Result<ControlServer, ControlError> {
        ControlServer::start_workers(path, vec![WorkerLink { tx, waker }])
    }

    /// [`ControlServer::start`] for several packet workers: every request goes to each of
    /// them, and their answers are merged ([`merge`]).
    pub fn start_workers(
        path: &Path,
        workers: Vec<WorkerLink>,
    ) -> Result<ControlServer, ControlError> {
        ControlServer::start_reloadable(path, workers, None)
    }

    /// [`ControlServer::start_workers`] that also reloads the configuration (`xlat reload`,
    /// SIGHUP) described by `reload`.
    pub fn start_reloadable(
        path: &Path,
        workers: Vec<WorkerLink>,
        reload: Option<ReloadCtx>,
    ) -> Result<ControlServer, ControlError> {
        let reloader: Reloader = Arc::new(std::sync::Mutex::new(reload));
        let name = path.display().to_string();
        let io_err = |source| ControlError::Io {
            path: name.clone(),
            error: source,
        };
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
                Ok(_) => return Err(ControlError::InUse(name)),
                Err(_) => {
                    info!(path = %name, "removing stale control socket");
                    std::fs::remove_file(path).map_err(io_err)?;
                }
            },
            Ok(_) => return Err(ControlError::NotASocket(name)),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(e)),
        }
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::create_dir_all(dir).map_err(io_err)?;
            }
        }
        // Bound with the process umask (usually 022: only the owner can connect), then 0600.
        let listener = UnixListener::bind(path).map_err(io_err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
        listener.set_nonblocking(true).map_err(io_err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xlat-control".to_string())
            .spawn(move || {
                // Reading and checking a file, the netlink batches of a reload's routes, formatting
                // listings: never at the packet workers' real-time priority (if they have one).
                if xlat_io::sys::control_plane_priority() {
                    debug!("control thread: back to normal scheduling");
                }
                serve(listener, workers, stop2, reloader)
            })
            .map_err(io_err)?;
        info!(path = %name, "control socket listening");
        Ok(ControlServer {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            debug!(error = %e, "removing control socket");
        }
    }
}

/// What a reload needs: the file, the configuration running, the seed and worker count the
/// engines were built with, the routes `[tun] auto_routes` made (with the plan they
/// follow), which follow the configuration, and the services outside the engines
/// (`[metrics]`, `[logging]`, `[dns64]`, [`crate::live`]).
pub struct ReloadCtx {
    pub file: PathBuf,
    pub running: crate::config::Config,
    pub seed: u64,
    pub workers: usize,
    pub routes: SharedRoutes,
    pub services: crate::live::SharedServices,
}

/// The routes of `[tun] auto_routes` and the plan they follow, once set up (`None` before,
/// without auto routes, and after teardown).
pub type SharedRoutes = Arc<std::sync::Mutex<Option<(RoutePlan, Routes)>>>;

/// Shared between the control thread and its client threads; `None`: reload unsupported
/// (a server started without a configuration, as in unit tests).
type Reloader = Arc<std::sync::Mutex<Option<ReloadCtx>>>;

/// Reads the file again and applies it (module docs of [`xlat_engine`]'s reconfigure): the
/// whole file is checked first, keys outside the engines that cannot change while running
/// are refused, the services' changes are prepared (sockets bound, [`crate::live`]), then
/// every worker applies its engine configuration between batches, and the services switch.
/// A refusal changes nothing.
fn reload(reloader: &Reloader, workers: &[WorkerLink]) -> Response {
    let Ok(mut guard) = reloader.lock() else {
        return Response::Error("reload state poisoned".to_string());
    };
    let Some(ctx) = guard.as_mut() else {
        return Response::Error("this server cannot reload".to_string());
    };
    let new = match crate::config::Config::load(&ctx.file) {
        Ok(c) => c,
        Err(e) => return Response::Refused(format!("{e}; the running configuration stays")),
    };
    let old = &ctx.running;
    let file = &new.file;
    let restart = |key: &str| {
        Response::Refused(format!(
            "{file}: {key}: cannot change while running: restart xlat to apply it; the running configuration stays"
        ))
    };
    if new.tun != old.tun {
        return restart("tun");
    }
    if new.socket != old.socket {
        return restart("control.socket");
    }
    if crate::live::dataplane_restart(old, &new) {
        return restart("dataplane");
    }
    if new.sync != old.sync {
        return restart("sync");
    }
    if new.prefault != old.prefault {
        return restart("limits.prefault");
    }
    if new.seed.is_some_and(|s| s != ctx.seed) {
        return restart("engine.seed");
    }
    let engines: Vec<EngineConfig> = (0..ctx.workers)
        .map(|k| crate::run::worker_engine_config(&new, ctx.seed, k, ctx.workers))
        .collect();
    // With several workers, packets are steered by the pool and static entries too.
    let shards = match ctx.workers {
        0 | 1 => None,
        n => match xlat_engine::shard::Shards::new(&new.engine_config(ctx.seed), n) {
            Ok(s) => Some(s),
            Err(e) => {
                return Response::Refused(format!("{file}: {e}; the running configuration stays"))
            }
        },
    };
    // Everything that can fail before the workers change: bind the services' new sockets.
    let services = ctx.services.clone();
    let mut services = crate::live::lock(&services);
    let prepared = match crate::live::prepare(&services, old, &new) {
        Ok(p) => p,
        Err(e) => return Response::Refused(format!("{e}; the running configuration stays")),
    };
    let req = Request::Reconfigure(Arc::new(Reconfig { engines, shards }));
    match ask_workers(req, workers) {
        Response::Reloaded(mut done) => {
            for k in &prepared.keys {
                if !done.keys.contains(k) {
                    done.keys.push(k.clone());
                }
            }
            done.warnings = crate::live::apply(&mut services, prepared, workers);
            done.warnings.extend(reroute(&ctx.routes, &new));
            info!(file = %file, sha256 = %new.sha256, changed = ?done.keys, sessions_ended = done.sessions_ended, "configuration reloaded");
            for w in &done.warnings {
                warn!(file = %file, "reload: {w}");
            }
            ctx.running = new;
            Response::Reloaded(done)
        }
        Response::Refused(e) => {
            Response::Refused(format!("{file}: {e}; the running configuration stays"))
        }
        other => other,
    }
}

/// Makes the routes follow the configuration `new` (the engines took it already); what
/// went wrong, as warnings.
fn reroute(routes: &SharedRoutes, new: &crate::config::Config) -> Vec<String> {
    let Ok(mut guard) = routes.lock() else {
        return vec!["routes: state poisoned; not changed".to_string()];
    };
    let Some((plan, routes)) = guard.as_mut() else {
        return Vec::new();
    };
    let next = RoutePlan::of(new);
    match routes.update(plan, &next) {
        Ok(_) => {
            *plan = next;
            Vec::new()
        }
        Err(e) => vec![format!(
            "routes: {e:#}; what was made stays (removed at exit), fix it and reload again"
        )],
    }
}

fn serve(
    listener: UnixListener,
    workers: Vec<WorkerLink>,
    stop: Arc<AtomicBool>,
    reloader: Reloader,
) {
    use std::os::fd::AsFd;
    let workers: Arc<[WorkerLink]> = workers.into();
    let clients = Arc::new(AtomicUsize::new(0));
    let tracing = Arc::new(AtomicBool::new(false));
    while !stop.load(Ordering::SeqCst) {
        if xlat_io::sys::take_hangup() {
            match reload(&reloader, &workers) {
                Response::Reloaded(done) => {
                    info!(changed = ?done.keys, sessions_ended = done.sessions_ended, "SIGHUP: configuration reloaded")
                }
                Response::Refused(e) | Response::Error(e) => {
                    warn!("SIGHUP: reload refused: {e}")
                }
                _ => {}
            }
        }
        match wait_readable([listener.as_fd()], Duration::from_millis(200)) {
            Ok([true]) => {}
            Ok(_) => continue,
            Err(e) => {
                warn!(error = %e, "control socket poll failed");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        }
        match listener.accept() {
            Ok((stream, _)) => serve_client(stream, &workers, &stop, &clients, &reloader, &tracing),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => {
                warn!(error = %e, "control socket accept failed");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Serves `stream` on a thread of its own, or answers "busy" when [`MAX_CLIENTS`] are
/// being served.
fn serve_client(
    mut stream: UnixStream,
    workers: &Arc<[WorkerLink]>,
    stop: &Arc<AtomicBool>,
    clients: &Arc<AtomicUsize>,
    reloader: &Reloader,
    tracing: &Arc<AtomicBool>,
) {
    if clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
        clients.fetch_sub(1, Ordering::SeqCst);
        let busy = Response::Error(format!(
            "busy: {MAX_CLIENTS} control connections are open; try again"
        ));
        // Best effort: the socket is new and empty, the line short.
        let _ = stream.set_nonblocking(true);
        let _ = stream.write_all(encode_response(&busy).as_bytes());
        debug!("control connection refused: busy");
        return;
    }
    let (workers, stop, count) = (workers.clone(), stop.clone(), clients.clone());
    let (reloader, tracing) = (reloader.clone(), tracing.clone());
    let spawned = std::thread::Builder::new()
        .name("xlat-control-client".to_string())
        .spawn(move || {
            if let Err(e) = handle(stream, &workers, &stop, &reloader, &tracing) {
                debug!(error = %e, "control connection");
            }
            count.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        clients.fetch_sub(1, Ordering::SeqCst);
        warn!(error = %e, "cannot start a thread for a control connection");
    }
}

/// Serves one connection: request lines in, response lines out, until EOF.
fn handle(
    stream: UnixStream,
    workers: &[WorkerLink],
    stop: &AtomicBool,
    reloader: &Reloader,
    tracing: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        let n = (&mut reader).take(MAX_REQUEST).read_line(&mut line)?;
        if n == 0 {
            return Ok(());
        }
        let response = if !line.ends_with('\n') && n as u64 >= MAX_REQUEST {
            Response::Error(format!("request longer than {MAX_REQUEST} bytes"))
        } else if line.trim().is_empty() {
            continue;
        } else {
            match decode_request(&line) {
                Ok(Request::Reload {}) => reload(reloader, workers),
                Ok(Request::Trace {
                    filter,
                    count,
                    timeout_secs,
                }) => trace(filter, count, timeout_secs, workers, stop, tracing),
                Ok(Request::Sessions { limit, filter }) => {
                    crate::listing::sessions(limit, filter, workers)
                }
                Ok(request) => ask_workers(request, workers),
                Err(e) => Response::Error(e),
            }
        };
        writer.write_all(encode_response(&response).as_bytes())?;
        if matches!(response, Response::Error(_)) || stop.load(Ordering::SeqCst) {
            return Ok(());
        }
    }
}

/// `{"cmd":"trace"}`: arms every worker's trace, collects their records every
/// [`TRACE_POLL`] until `count` are in or `timeout_secs` have passed (or the daemon stops),
/// ends the trace and answers the first `count` records in time order (workers share one
/// clock). One trace at a time (`busy`); a worker stops recording by itself at its count or
/// the deadline, so a client that goes away leaves nothing armed for long.
fn trace(
    filter: TraceFilter,
    count: usize,
    timeout_secs: u64,
    workers: &[WorkerLink],
    stop: &AtomicBool,
    busy: &AtomicBool,
) -> Response {
    if count == 0 || count > MAX_TRACE_COUNT {
        return Response::Error(format!(
            "trace count {count}: expected 1 to {MAX_TRACE_COUNT} packets"
        ));
    }
    if timeout_secs == 0 || timeout_secs > MAX_TRACE_SECS {
        return Response::Error(format!(
            "trace timeout {timeout_secs} s: expected 1 to {MAX_TRACE_SECS} seconds"
        ));
    }
    if busy.swap(true, Ordering::SeqCst) {
        return Response::Error(
            "another xlat trace is running on this gateway; try again when it ends".to_string(),
        );
    }
    let timeout = Duration::from_secs(timeout_secs);
    let r = collect_trace(filter, count, timeout, workers, stop);
    busy.store(false, Ordering::SeqCst);
    r
}

fn collect_trace(
    filter: TraceFilter,
    count: usize,
    timeout: Duration,
    workers: &[WorkerLink],
    stop: &AtomicBool,
) -> Response {
    let deadline = std::time::Instant::now() + timeout;
    let arm = Request::TraceArm {
        filter,
        count,
        timeout,
    };
    if let e @ (Response::Error(_) | Response::Refused(_)) = ask_workers(arm, workers) {
        let _ = ask_workers(Request::TraceTake { stop: true }, workers);
        return e;
    }
    let mut got = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        std::thread::sleep(left.min(TRACE_POLL));
        let done = left <= TRACE_POLL || stop.load(Ordering::SeqCst);
        match ask_workers(Request::TraceTake { stop: done }, workers) {
            Response::Trace(v) => got.extend(v),
            other => {
                let _ = ask_workers(Request::TraceTake { stop: true }, workers);
                return other;
            }
        }
        if done {
            break;
        }
        if got.len() >= count {
            if let Response::Trace(v) = ask_workers(Request::TraceTake { stop: true }, workers) {
                got.extend(v);
            }
            break;
        }
    }
    got.sort_by_key(|e| (e.at_ns, e.worker, e.seq));
    got.truncate(count);
    Response::Trace(got)
}

/// Sends `request` to every worker, wakes them, and merges their answers; a worker that
/// stopped or does not answer within [`WORKER_TIMEOUT`] makes the answer an error. The
/// workers answer between batches; the caller (a control-plane thread) waits, they do not.
pub fn ask_workers(request: Request, workers: &[WorkerLink]) -> Response {
    match ask_some(&request, workers, 0..workers.len()) {
        Ok(answers) => merge(answers),
        Err(e) => e,
    }
}

/// Sends `request` to the workers `which` (indices into `workers`), wakes them, and returns
/// their answers in that order, or the error answer when one stopped or did not answer
/// within [`WORKER_TIMEOUT`].
pub(crate) fn ask_some(
    request: &Request,
    workers: &[WorkerLink],
    which: std::ops::Range<usize>,
) -> Result<Vec<Response>, Response> {
    let mut pending = Vec::with_capacity(which.len());
    for k in which {
        let w = workers
            .get(k)
            .ok_or_else(|| Response::Error(stopped(k, workers.len())))?;
        let Some(rx) = w.ask(request.clone()) else {
            return Err(Response::Error(stopped(k, workers.len())));
        };
        pending.push((k, rx));
    }
    let deadline = std::time::Instant::now() + WORKER_TIMEOUT;
    let mut answers = Vec::with_capacity(pending.len());
    for (k, rx) in pending {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => answers.push(r),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Response::Error(stopped(k, workers.len())))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let who = if workers.len() == 1 {
                    "the packet worker".to_string()
                } else {
                    format!("packet worker {k}")
                };
                return Err(Response::Error(format!(
                    "{who} did not answer within {} s",
                    WORKER_TIMEOUT.as_secs()
                )));
            }
        }
    }
    Ok(answers)
}

fn stopped(k: usize, n: usize) -> String {
    if n == 1 {
        "the packet worker has stopped".to_string()
    } else {
        format!("packet worker {k} has stopped")
    }
}

/// Answers every pending request with `answer` (called by the worker between batches).
pub fn serve_pending(rx: &crate::inbox::Inbox, mut answer: impl FnMut(&Request) -> Response) {
    while let Some(msg) = rx.take() {
        let r = answer(&msg.request);
        let _ = msg.reply.send(r);
    }
}

// ---- client ----------------------------------------------------------------------------------

/// Why `xlat show` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no xlat daemon at {0}: is `xlat run` running?")]
    NoDaemon(String),
    #[error("cannot connect to {0}: permission denied (the socket is mode 0600: run as the daemon's user, usually root)")]
    Permission(String),
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: the daemon's answer is not valid: {detail}")]
    BadResponse { path: String, detail: String },
    #[error("{path}: the daemon answered: {message}")]
    Daemon { path: String, message: String },
    #[error("reload refused: {message}")]
    Refused { path: String, message: String },
}

/// Sends one request to the daemon at `path` and reads its answer (a daemon-side
/// `{"error":...}` becomes [`ClientError::Daemon`]).
pub fn request(path: &Path, req: &Request) -> Result<Response, ClientError> {
    request_waiting(path, req, IO_TIMEOUT)
}

/// [`request`] whose answer may take up to `wait` (`xlat trace` waits for packets).
pub fn request_waiting(
    path: &Path,
    req: &Request,
    wait: Duration,
) -> Result<Response, ClientError> {
    let name = path.display().to_string();
    let mut stream = UnixStream::connect(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => ClientError::NoDaemon(name.clone()),
        ErrorKind::PermissionDenied => ClientError::Permission(name.clone()),
        _ => ClientError::Io {
            path: name.clone(),
            error: e,
        },
    })?;
    let io = |source| ClientError::Io {
        path: name.clone(),
        error: source,
    };
    stream
        .set_read_timeout(Some(wait.max(IO_TIMEOUT)))
        .map_err(io)?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    stream
        .write_all(encode_request(req).as_bytes())
        .map_err(io)?;
    stream.shutdown(std::net::Shutdown::Write).map_err(io)?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(io)?;
    if line.is_empty() {
        return Err(ClientError::BadResponse {
            path: name,
            detail: "the connection closed without an answer".to_string(),
        });
    }
    match decode_response(&line) {
        Ok(Response::Error(message)) => Err(ClientError::Daemon {
            path: name,
            message,
        }),
        Ok(Response::Refused(message)) => Err(ClientError::Refused {
            path: name,
            message,
        }),
        Ok(r) => Ok(r),
        Err(e) => Err(ClientError::BadResponse {
            path: name,
            detail: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_encoding() {
        assert_eq!(encode_request(&Request::Stats {}), "{\"cmd\":\"stats\"}\n");
        assert_eq!(
            encode_request(&Request::Sessions {
                limit: None,
                filter: SessionFilter::default()
            }),
            "{\"cmd\":\"sessions\"}\n"
        );
        assert_eq!(
            encode_request(&Request::Sessions {
                limit: Some(5),
                filter: SessionFilter::default()
            }),
            "{\"cmd\":\"sessions\",\"limit\":5}\n"
        );
        assert_eq!(encode_request(&Request::Ping {}), "{\"cmd\":\"ping\"}\n");
        for r in [
            Request::Stats {},
            Request::Ping {},
            Request::Sessions {
                limit: Some(1),
                filter: SessionFilter::default(),
            },
        ] {
            assert_eq!(decode_request(&encode_request(&r)), Ok(r));
        }
        assert_eq!(
            decode_request(" {\"cmd\":\"sessions\"} \r\n"),
            Ok(Request::Sessions {
                limit: None,
                filter: SessionFilter::default()
            })
        );
    }

    #[test]
    fn trace_requests_round_trip_and_bad_ones_are_refused() {
        let r = Request::Trace {
            filter: TraceFilter {
                inside: Some("198.18.0.7".parse().unwrap()),
                ..TraceFilter::default()
            },
            count: 3,
            timeout_secs: 5,
        };
        let line = encode_request(&r);
        assert_eq!(
            line,
            "{\"cmd\":\"trace\",\"filter\":{\"inside\":\"198.18.0.7\"},\"count\":3,\"timeout_secs\":5}\n"
        );
        assert_eq!(decode_request(&line), Ok(r));
        assert!(decode_request(
            "{\"cmd\":\"trace\",\"count\":1,\"timeout_secs\":1,\"filter\":{\"proto\":\"gre\"}}"
        )
        .is_err());
        let (stop, busy) = (AtomicBool::new(false), AtomicBool::new(false));
        let f = TraceFilter::default;
        let err = |r: Response| match r {
            Response::Error(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(err(trace(f(), 0, 5, &[], &stop, &busy)).contains("expected 1 to"));
        assert!(err(trace(f(), 1, 0, &[], &stop, &busy)).contains("expected 1 to 3600"));
        // No worker to arm: an error, and the next trace is not refused as busy.
        assert!(err(trace(f(), 1, 1, &[], &stop, &busy)).contains("no packet worker"));
        assert!(!busy.load(Ordering::SeqCst));
        busy.store(true, Ordering::SeqCst);
        assert!(err(trace(f(), 1, 1, &[], &stop, &busy)).contains("another xlat trace"));
    }

    #[test]
    fn bad_requests_explain_the_format() {
        for line in [
            "{\"cmd\":\"reboot\"}",
            "stats",
            "{}",
            "{\"cmd\":\"stats\",\"x\":1}",
        ] {
            let e = decode_request(line).err().unwrap_or_default();
            assert!(e.starts_with("bad request: "), "{line}: {e}");
            assert!(e.contains("{\"cmd\":\"stats\"}"), "{e}");
        }
        // Reload is a client request; the workers' reconfigure message is not.
        assert_eq!(
            decode_request("{\"cmd\":\"reload\"}"),
            Ok(Request::Reload {})
        );
        assert!(decode_request("{\"cmd\":\"reconfigure\"}").is_err());
        // A filter with an unknown key is refused, not ignored.
        assert!(
            decode_request("{\"cmd\":\"clear\",\"filter\":{\"insde\":\"198.18.0.1\"}}").is_err()
        );
    }

    #[test]
    fn response_encoding() -> Result<(), serde_json::Error> {
        let s = SessionInfo {
            proto: Some(xlat_engine::flow::Proto::Udp),
            inside: "198.18.0.10".parse().unwrap(),
            inside_port: Some(5000),
            outside: "198.19.0.100".parse().unwrap(),
            outside_port: Some(5000),
            remote: Some("203.0.113.5".parse().unwrap()),
            remote_port: Some(53),
            expires_in: Some(299),
            ..SessionInfo::default()
        };
        let r = Response::Sessions(vec![s]);
        let line = encode_response(&r);
        // Values, not strings: addresses and ports apart, the state a name.
        assert!(
            line.starts_with(
                "{\"sessions\":[{\"translator\":\"nat44\",\"proto\":\"udp\",\
                 \"inside\":\"198.18.0.10\",\"inside_port\":5000,"
            ),
            "{line}"
        );
        assert!(line.contains("\"state\":\"udp\""), "{line}");
        assert!(line.ends_with("}\n"));
        assert_eq!(decode_response(&line)?, r);

        let mut stats = DaemonStats::default();
        stats.engine.sessions = 3;
        stats.io.tun_write_errors = 2;
        let r = Response::Stats(Box::new(stats));
        let line = encode_response(&r);
        // Flattened: the engine's fields sit beside "io", so a Stats reader can parse it.
        let v: serde_json::Value = serde_json::from_str(&line)?;
        assert_eq!(v["stats"]["sessions"], 3);
        assert_eq!(v["stats"]["io"]["tun_write_errors"], 2);
        let plain: Stats = serde_json::from_value(v["stats"].clone())?;
        assert_eq!(plain.sessions, 3);
        assert_eq!(decode_response(&line)?, r);

        let e = encode_response(&Response::Error("x".into()));
        assert_eq!(e, "{\"error\":\"x\"}\n");
        Ok(())
    }

    #[test]
    fn answers_of_several_workers_merge() {
        let nc = |name: &str, value| NamedCount {
            name: name.into(),
            value,
            explain: String::new(),
        };
        let worker = |k: u64, sessions, drops| {
            let mut s = DaemonStats::default();
            s.engine.sessions = sessions;
            s.engine.hosts = 1;
            s.engine.pool_addresses = 2;
            s.engine.pool_addresses_used = k + 1;
            s.engine.pool = vec![xlat_engine::snapshot::PoolUse {
                proto: "udp".into(),
                ports_used: sessions,
                ports_total: 100,
            }];
            s.engine.events = vec![nc("packets_in", 10 * (k + 1))];
            s.engine.drops = vec![nc("no_mapping", drops)];
            s.io.tun_rx_packets = 7;
            s.io.uptime_secs = 5 + k;
            s.workers = vec![WorkerStats {
                worker: k,
                sessions,
                counters: vec![nc("handoffs_out", k)],
                ..WorkerStats::default()
            }];
            if k == 0 {
                s.fast_path = Some(FastPathStats::default());
            }
            Response::Stats(Box::new(s))
        };
        let r = merge(vec![worker(0, 3, 1), worker(1, 4, 2)]);
        let Response::Stats(s) = r else {
            panic!("{r:?}")
        };
        assert_eq!(s.engine.sessions, 7);
        assert_eq!(s.engine.hosts, 2);
        assert_eq!(
            (s.engine.pool_addresses, s.engine.pool_addresses_used),
            (2, 2)
        );
        assert_eq!(s.engine.pool[0].ports_used, 7);
        assert_eq!(s.engine.pool[0].ports_total, 200);
        assert_eq!(s.engine.get("packets_in"), 30);
        assert_eq!(s.engine.get("no_mapping"), 3);
        assert_eq!((s.io.tun_rx_packets, s.io.uptime_secs), (14, 6));
        assert_eq!(s.workers.len(), 2);
        assert_eq!(s.workers[1].get("handoffs_out"), 1);
        assert!(s.fast_path.is_some());
        // The JSON keeps the old fields and adds "workers".
        let v: serde_json::Value =
            serde_json::from_str(&encode_response(&Response::Stats(s))).unwrap_or_default();
        assert_eq!(v["stats"]["sessions"], 7);
        assert_eq!(v["stats"]["workers"][1]["worker"], 1);
        assert_eq!(
            v["stats"]["workers"][0]["counters"][0]["name"],
            "handoffs_out"
        );

        let e = Response::Error("worker 1 stopped".into());
        assert_eq!(merge(vec![worker(0, 1, 0), e.clone()]), e);
        assert!(matches!(merge(vec![]), Response::Error(_)));
    }

    #[test]
    fn server_and_client_round_trip() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("xlat-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("c.sock");
        // A stale regular socket file is replaced.
        drop(UnixListener::bind(&path)?);
        let (tx, rx) = crate::inbox::inbox();
        let waker = Arc::new(Waker::new()?);
        let server = ControlServer::start(&path, tx, waker.clone())?;
        let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A second server on the same path refuses.
        let (tx2, _rx2) = crate::inbox::inbox();
        assert!(matches!(
            ControlServer::start(&path, tx2, waker.clone()),
            Err(ControlError::InUse(_))
        ));

        // The "worker": answers after being woken.
        let worker = std::thread::spawn(move || {
            for _ in 0..2 {
                let _ = wait_readable([std::os::fd::AsFd::as_fd(&*waker)], Duration::from_secs(5));
                waker.drain();
                serve_pending(&rx, |r| match r {
                    Request::Ping {} => Response::Pong(Pong {
                        version: "t".into(),
                        uptime_secs: 1,
                    }),
                    _ => Response::Error("nope".into()),
                });
            }
        });
        // Five clients that connect and say nothing delay no one (they used to hold the
        // server for IO_TIMEOUT each, one after the other).
        let idle: Vec<UnixStream> = (0..5)
            .map(|_| UnixStream::connect(&path))
            .collect::<Result<_, _>>()?;
        let r = request(&path, &Request::Ping {})?;
        assert_eq!(
            r,
            Response::Pong(Pong {
                version: "t".into(),
                uptime_secs: 1
            })
        );
        drop(idle);
        let e = request(&path, &Request::Stats {})
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.ends_with("the daemon answered: nope"), "{e}");
        // Past MAX_CLIENTS open connections, one more is told the server is busy.
        let full: Vec<UnixStream> = (0..MAX_CLIENTS)
            .map(|_| UnixStream::connect(&path))
            .collect::<Result<_, _>>()?;
        let e = request(&path, &Request::Ping {})
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("the daemon answered: busy"), "{e}");
        drop(full);
        let _ = worker.join();
        drop(server);
        assert!(!path.exists());
        let e = request(&path, &Request::Ping {})
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            e,
            format!(
                "no xlat daemon at {}: is `xlat run` running?",
                path.display()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
