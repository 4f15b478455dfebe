//! The DNS64 service: UDP and TCP listeners on every `listen` address, a fixed pool of
//! worker threads for UDP queries, one thread per TCP connection (bounded), all stopped
//! and joined when the [`Dns64Service`] is dropped.
//!
//! Bounds: at most `workers` UDP queries in progress and `queue` waiting (more are dropped
//! and counted); at most `max_tcp_connections` TCP connections, each closed after
//! [`TCP_IDLE`] without a query (RFC 7766 6.2.3); every upstream attempt ends after
//! `timeout`. Threads look at the stop flag at least every [`POLL`].

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::policy::{Policy, Transport};
use crate::stats::{inc, Dns64Counters, Stats};
use crate::upstream::UpstreamSet;
use crate::Dns64Config;

/// How often blocked threads look at the stop flag.
pub const POLL: Duration = Duration::from_millis(200);
/// RFC 7766 6.2.3: an idle TCP connection is closed after this long.
pub const TCP_IDLE: Duration = Duration::from_secs(10);
/// How long a listen address may stay unavailable at start (an IPv6 address still in
/// duplicate address detection) before binding fails.
pub const BIND_WAIT: Duration = Duration::from_secs(5);

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum Dns64Error {
    /// `listen[index]` could not be bound.
    #[error("listen[{index}]: cannot bind {proto} {addr}: {error}")]
    Bind {
        index: usize,
        addr: SocketAddr,
        proto: &'static str,
        error: std::io::Error,
    },
    #[error("cannot start a DNS64 thread: {0}")]
    Thread(std::io::Error),
}

impl Dns64Error {
    /// The config key at fault (`listen[0]`), when there is one.
    pub fn key(&self) -> Option<String> {
        match self {
            Dns64Error::Bind { index, .. } => Some(format!("listen[{index}]")),
            Dns64Error::Thread(_) => None,
        }
    }
}

struct Job {
    query: Vec<u8>,
    peer: SocketAddr,
    sock: Arc<UdpSocket>,
}

/// What answers a query: the policy (pref64, exclusions) and the upstreams. Swapped whole
/// by [`Dns64Service::apply`]; a query in progress keeps the one it started with.
struct Core {
    policy: Arc<Policy>,
    upstream: UpstreamSet,
}

/// The core in use, shared by every thread of the service.
struct Live {
    core: Mutex<Arc<Core>>,
}

impl Live {
    fn current(&self) -> Arc<Core> {
        match self.core.lock() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn set(&self, core: Core) {
        let core = Arc::new(core);
        match self.core.lock() {
            Ok(mut c) => *c = core,
            Err(p) => *p.into_inner() = core,
        }
    }
}

/// One `listen` address: its UDP and TCP threads, stopped on their own when a reload
/// removes the address.
struct Listener {
    /// The address as configured (port 0 stays 0: the config's identity of the listener).
    configured: SocketAddr,
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Its sockets closed (UDP listener gone, TCP listener closed): 2 when both are.
    closed: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

/// A socket pair bound for a listen address, not yet served.
struct Bound {
    configured: SocketAddr,
    local: SocketAddr,
    udp: Arc<UdpSocket>,
    tcp: TcpListener,
}

/// A new configuration made ready by [`Dns64Service::prepare`]: the new listen addresses
/// bound, the policy and upstreams built. Applying it cannot fail for want of an address.
pub struct Dns64Update {
    bound: Vec<Bound>,
    keep: Vec<SocketAddr>,
    core: Core,
    summary: String,
}

impl Dns64Update {
    /// What the update changes, for the log.
    pub fn summary(&self) -> &str {
        &self.summary
    }
}

/// A running DNS64 proxy. Dropping it stops and joins its threads.
pub struct Dns64Service {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<Stats>,
    live: Arc<Live>,
    listeners: Vec<Listener>,
    /// Threads of listeners a reload removed: they end by themselves (a TCP connection
    /// answers the query it is in first); joined when the service drops.
    retired: Vec<JoinHandle<()>>,
    tx: SyncSender<Job>,
    tcp_active: Arc<AtomicUsize>,
    max_tcp: usize,
    local: Vec<SocketAddr>,
}

/// Binds every address of `listen` that is not in `keep` (UDP, then TCP on the same port).
fn bind_all(listen: &[SocketAddr], keep: &[SocketAddr]) -> Result<Vec<Bound>, Dns64Error> {
    let mut out = Vec::new();
    for (index, &addr) in listen.iter().enumerate() {
        if keep.contains(&addr) {
            continue;
        }
        let bind_err = |proto, error| Dns64Error::Bind {
            index,
            addr,
            proto,
            error,
        };
        let udp = bind_retrying(|| UdpSocket::bind(addr)).map_err(|e| bind_err("UDP", e))?;
        // The same port for TCP, also when the config said port 0 (tests).
        let local = udp.local_addr().map_err(|e| bind_err("UDP", e))?;
        let tcp = bind_retrying(|| TcpListener::bind(local)).map_err(|e| bind_err("TCP", e))?;
        udp.set_read_timeout(Some(POLL))
            .map_err(|e| bind_err("UDP", e))?;
        tcp.set_nonblocking(true).map_err(|e| bind_err("TCP", e))?;
        out.push(Bound {
            configured: addr,
            local,
            udp: Arc::new(udp),
            tcp,
        });
    }
    Ok(out)
}

impl Dns64Service {
    /// Binds every listen address (UDP and TCP on the same port), then starts the threads.
    pub fn start(cfg: &Dns64Config) -> Result<Dns64Service, Dns64Error> {
        Self::start_with_stats(cfg, Arc::new(Stats::default()))
    }

    /// As [`Dns64Service::start`], counting into `stats`.
    pub fn start_with_stats(
        cfg: &Dns64Config,
        stats: Arc<Stats>,
    ) -> Result<Dns64Service, Dns64Error> {
        let bound = bind_all(&cfg.listen, &[])?;
        let core = Core {
            policy: Arc::new(Policy::new(cfg.prefix, &cfg.exclude, stats.clone())),
            upstream: UpstreamSet::new(cfg.upstream.clone(), cfg.timeout, stats.clone()),
        };
        let live = Arc::new(Live {
            core: Mutex::new(Arc::new(core)),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::sync_channel::<Job>(cfg.queue.max(1));
        let mut svc = Dns64Service {
            stop: stop.clone(),
            threads: Vec::new(),
            stats: stats.clone(),
            live: live.clone(),
            listeners: Vec::new(),
            retired: Vec::new(),
            tx,
            tcp_active: Arc::new(AtomicUsize::new(0)),
            max_tcp: cfg.max_tcp_connections.max(1),
            local: Vec::new(),
        };
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..cfg.workers.max(1) {
            let (rx, live, stop) = (rx.clone(), live.clone(), stop.clone());
            let h = spawn(format!("xlat-dns64-w{i}"), move || {
                worker(&rx, &live, &stop)
            })?;
            svc.threads.push(h);
        }
        for b in bound {
            svc.serve(b)?;
        }
        info!(
            listen = ?svc.local,
            upstream = ?cfg.upstream,
            prefix = %cfg.prefix,
            "dns64 listening"
        );
        Ok(svc)
    }

    /// Starts the UDP and TCP threads of a bound listen address.
    fn serve(&mut self, b: Bound) -> Result<(), Dns64Error> {
        let Bound {
            configured,
            local,
            udp,
            tcp,
        } = b;
        let mine = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::with_capacity(2);
        let (tx, stop, own, st, done) = (
            self.tx.clone(),
            self.stop.clone(),
            mine.clone(),
            self.stats.clone(),
            closed.clone(),
        );
        threads.push(spawn(format!("xlat-dns64-udp-{local}"), move || {
            udp_listener(&udp, &tx, &[&stop, &own], &st);
            // Queries taken still hold the socket for their answers; nothing new is read.
            done.fetch_add(1, Ordering::SeqCst);
        })?);
        let (live, stop, own, active, max, done) = (
            self.live.clone(),
            self.stop.clone(),
            mine.clone(),
            self.tcp_active.clone(),
            self.max_tcp,
            closed.clone(),
        );
        let r = spawn(format!("xlat-dns64-tcp-{local}"), move || {
            tcp_listener(tcp, &live, [&stop, &own], &active, max, &done)
        });
        match r {
            Ok(h) => threads.push(h),
            Err(e) => {
                mine.store(true, Ordering::SeqCst);
                self.retired.extend(threads);
                return Err(e);
            }
        }
        self.listeners.push(Listener {
            configured,
            local,
            stop: mine,
            closed,
            threads,
        });
        self.local = self.listeners.iter().map(|l| l.local).collect();
        Ok(())
    }

    /// Makes `cfg` ready to replace the running configuration (a reload): binds the listen
    /// addresses it adds (an address it keeps stays bound, with its queries), builds the
    /// policy and the upstreams. Nothing changes in the service; a bind error names
    /// `listen[i]` of `cfg`. The limits (workers, queue, TCP connections, timeout) keep their
    /// running values.
    pub fn prepare(&self, cfg: &Dns64Config) -> Result<Dns64Update, Dns64Error> {
        let running: Vec<SocketAddr> = self.listeners.iter().map(|l| l.configured).collect();
        let keep: Vec<SocketAddr> = cfg
            .listen
            .iter()
            .copied()
            .filter(|a| running.contains(a))
            .collect();
        let bound = bind_all(&cfg.listen, &keep)?;
        let core = Core {
            policy: Arc::new(Policy::new(cfg.prefix, &cfg.exclude, self.stats.clone())),
            upstream: UpstreamSet::new(cfg.upstream.clone(), cfg.timeout, self.stats.clone()),
        };
        let added: Vec<SocketAddr> = bound.iter().map(|b| b.local).collect();
        let removed: Vec<SocketAddr> = running
            .iter()
            .copied()
            .filter(|a| !keep.contains(a))
            .collect();
        let summary = format!(
            "listen +{added:?} -{removed:?}, upstream {:?}, prefix {}",
            cfg.upstream, cfg.prefix
        );
        Ok(Dns64Update {
            bound,
            keep,
            core,
            summary,
        })
    }

    /// Applies a prepared configuration: queries from now on use its policy and upstreams
    /// (one in progress finishes with what it started with), removed listen addresses stop
    /// taking queries (what they took is still answered), added ones start. Returns what
    /// went wrong (a thread that could not start), for a warning: the rest is applied.
    pub fn apply(&mut self, u: Dns64Update) -> Vec<String> {
        let Dns64Update {
            bound, keep, core, ..
        } = u;
        self.live.set(core);
        let mut warnings = Vec::new();
        let (stay, gone): (Vec<Listener>, Vec<Listener>) = std::mem::take(&mut self.listeners)
            .into_iter()
            .partition(|l| keep.contains(&l.configured));
        self.listeners = stay;
        for l in &gone {
            l.stop.store(true, Ordering::SeqCst);
        }
        // A removed address stops taking queries before the reload answers: its listeners
        // look at the flag every POLL (a TCP connection open on it answers its query first).
        let deadline = Instant::now() + 3 * POLL;
        while Instant::now() < deadline && gone.iter().any(|l| l.closed.load(Ordering::SeqCst) < 2)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        for l in gone {
            self.retired.extend(l.threads);
        }
        self.retired.retain(|h| !h.is_finished());
        for b in bound {
            let at = b.local;
            if let Err(e) = self.serve(b) {
                warnings.push(format!("dns64: not listening on {at}: {e}"));
            }
        }
        self.local = self.listeners.iter().map(|l| l.local).collect();
        info!(listen = ?self.local, "dns64 reconfigured");
        warnings
    }

    /// The addresses bound (with the real port when the config said 0).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }

    /// The live counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Dns64Counters {
        self.stats.snapshot()
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, Dns64Error> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(Dns64Error::Thread)
}

impl Drop for Dns64Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for l in self.listeners.drain(..) {
            for t in l.threads {
                let _ = t.join();
            }
        }
        for t in self.threads.drain(..).chain(self.retired.drain(..)) {
            let _ = t.join();
        }
    }
}

/// Has any of the stop flags been raised?
fn stopped(flags: &[&Arc<AtomicBool>]) -> bool {
    flags.iter().any(|f| f.load(Ordering::Relaxed))
}

/// Binds, retrying for up to [`BIND_WAIT`] while the address is not (yet) available.
fn bind_retrying<T>(mut f: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let start = Instant::now();
    loop {
        match f() {
            Err(e) if e.kind() == ErrorKind::AddrNotAvailable && start.elapsed() < BIND_WAIT => {
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

fn udp_listener(
    sock: &Arc<UdpSocket>,
    tx: &SyncSender<Job>,
    stop: &[&Arc<AtomicBool>],
    st: &Stats,
) {
    let mut buf = vec![0u8; 65535];
    let mut reported = false;
    while !stopped(stop) {
        match sock.recv_from(&mut buf) {
            Ok((n, peer)) => {
                let job = Job {
                    query: buf.get(..n).unwrap_or_default().to_vec(),
                    peer,
                    sock: sock.clone(),
                };
                match tx.try_send(job) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) => inc(&st.dropped_overload),
                    Err(TrySendError::Disconnected(_)) => return,
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                if !reported {
                    warn!(error = %e, "dns64: UDP receive failed (reported once)");
                    reported = true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn worker(rx: &Mutex<Receiver<Job>>, live: &Live, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let job = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv_timeout(POLL)
        };
        let job = match job {
            Ok(j) => j,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let core = live.current();
        let mut up = core.upstream.clone();
        let policy = &core.policy;
        if let Some(answer) = policy.handle(&job.query, Transport::Udp, &mut up) {
            if job.sock.send_to(&answer, job.peer).is_err() {
                inc(&policy.stats().send_errors);
            }
        }
    }
}

fn tcp_listener(
    l: TcpListener,
    live: &Arc<Live>,
    stop: [&Arc<AtomicBool>; 2],
    active: &Arc<AtomicUsize>,
    max: usize,
    closed: &AtomicUsize,
) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stopped(&stop) {
        match l.accept() {
            Ok((s, _)) => {
                conns.retain(|h| !h.is_finished());
                let stats = live.current().policy.stats().clone();
                if active.load(Ordering::SeqCst) >= max {
                    inc(&stats.tcp_refused);
                    continue; // dropping `s` closes it
                }
                active.fetch_add(1, Ordering::SeqCst);
                let (live2, stop, own, active2) = (
                    live.clone(),
                    stop[0].clone(),
                    stop[1].clone(),
                    active.clone(),
                );
                let r = std::thread::Builder::new()
                    .name("xlat-dns64-conn".to_string())
                    .spawn(move || {
                        tcp_connection(s, &live2, &[&stop, &own]);
                        active2.fetch_sub(1, Ordering::SeqCst);
                    });
                match r {
                    Ok(h) => conns.push(h),
                    Err(_) => {
                        active.fetch_sub(1, Ordering::SeqCst);
                        inc(&stats.tcp_refused);
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    // Closed before the connections end: a removed address refuses new ones at once.
    drop(l);
    closed.fetch_add(1, Ordering::SeqCst);
    for h in conns {
        let _ = h.join();
    }
}

/// RFC 7766: length-prefixed queries, answered in order, until the client closes, an idle
/// [`TCP_IDLE`], an error, or stop (a query being answered is answered first). Each query
/// takes the policy and upstreams in use when it arrives (a reload changes them).
fn tcp_connection(mut s: TcpStream, live: &Live, stop: &[&Arc<AtomicBool>]) {
    if s.set_nonblocking(false).is_err()
        || s.set_read_timeout(Some(POLL)).is_err()
        || s.set_write_timeout(Some(TCP_IDLE)).is_err()
        || s.set_nodelay(true).is_err()
    {
        return;
    }
    loop {
        let mut len = [0u8; 2];
        if !read_full(&mut s, &mut len, TCP_IDLE, stop) {
            return;
        }
        let n = usize::from(u16::from_be_bytes(len));
        let mut q = vec![0u8; n];
        if !read_full(&mut s, &mut q, TCP_IDLE, stop) {
            return;
        }
        let core = live.current();
        let policy = &core.policy;
        let mut up = core.upstream.clone();
        let Some(answer) = policy.handle(&q, Transport::Tcp, &mut up) else {
            continue;
        };
        let Ok(alen) = u16::try_from(answer.len()) else {
            inc(&policy.stats().send_errors);
            return;
        };
        let mut out = Vec::with_capacity(answer.len() + 2);
        out.extend_from_slice(&alen.to_be_bytes());
        out.extend_from_slice(&answer);
        if s.write_all(&out).is_err() {
            inc(&policy.stats().send_errors);
            return;
        }
    }
}

/// Fills `buf`; false on EOF, error, `idle` without progress, or stop.
fn read_full(s: &mut TcpStream, buf: &mut [u8], idle: Duration, stop: &[&Arc<AtomicBool>]) -> bool {
    let mut got = 0;
    let mut last = Instant::now();
    while got < buf.len() {
        if stopped(stop) || last.elapsed() >= idle {
            return false;
        }
        match s.read(buf.get_mut(got..).unwrap_or_default()) {
            Ok(0) => return false,
            Ok(n) => {
                got += n;
                last = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
    true
}
