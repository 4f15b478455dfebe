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

/// A running DNS64 proxy. Dropping it stops and joins its threads.
pub struct Dns64Service {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<Stats>,
    local: Vec<SocketAddr>,
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
        let mut sockets = Vec::new();
        for (index, &addr) in cfg.listen.iter().enumerate() {
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
            sockets.push((local, Arc::new(udp), tcp));
        }

        let policy = Arc::new(Policy::new(cfg.prefix, &cfg.exclude, stats.clone()));
        let upstream = UpstreamSet::new(cfg.upstream.clone(), cfg.timeout, stats.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let mut svc = Dns64Service {
            stop: stop.clone(),
            threads: Vec::new(),
            stats: stats.clone(),
            local: sockets.iter().map(|(a, _, _)| *a).collect(),
        };
        let (tx, rx) = mpsc::sync_channel::<Job>(cfg.queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..cfg.workers.max(1) {
            let (rx, policy, mut up, stop) =
                (rx.clone(), policy.clone(), upstream.clone(), stop.clone());
            svc.spawn(format!("xlat-dns64-w{i}"), move || {
                worker(&rx, &policy, &mut up, &stop)
            })?;
        }
        let tcp_active = Arc::new(AtomicUsize::new(0));
        for (local, udp, tcp) in sockets {
            let (tx, stop2, st) = (tx.clone(), stop.clone(), stats.clone());
            svc.spawn(format!("xlat-dns64-udp-{local}"), move || {
                udp_listener(&udp, &tx, &stop2, &st)
            })?;
            let (policy, upstream, stop2, active) = (
                policy.clone(),
                upstream.clone(),
                stop.clone(),
                tcp_active.clone(),
            );
            let max = cfg.max_tcp_connections.max(1);
            svc.spawn(format!("xlat-dns64-tcp-{local}"), move || {
                tcp_listener(&tcp, &policy, &upstream, &stop2, &active, max)
            })?;
        }
        info!(
            listen = ?svc.local,
            upstream = ?cfg.upstream,
            prefix = %cfg.prefix,
            "dns64 listening"
        );
        Ok(svc)
    }

    fn spawn(&mut self, name: String, f: impl FnOnce() + Send + 'static) -> Result<(), Dns64Error> {
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(Dns64Error::Thread)?;
        self.threads.push(h);
        Ok(())
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

impl Drop for Dns64Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
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

fn udp_listener(sock: &Arc<UdpSocket>, tx: &SyncSender<Job>, stop: &AtomicBool, st: &Stats) {
    let mut buf = vec![0u8; 65535];
    let mut reported = false;
    while !stop.load(Ordering::Relaxed) {
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

fn worker(rx: &Mutex<Receiver<Job>>, policy: &Policy, up: &mut UpstreamSet, stop: &AtomicBool) {
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
        if let Some(answer) = policy.handle(&job.query, Transport::Udp, up) {
            if job.sock.send_to(&answer, job.peer).is_err() {
                inc(&policy.stats().send_errors);
            }
        }
    }
}

fn tcp_listener(
    l: &TcpListener,
    policy: &Arc<Policy>,
    upstream: &UpstreamSet,
    stop: &Arc<AtomicBool>,
    active: &Arc<AtomicUsize>,
    max: usize,
) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                conns.retain(|h| !h.is_finished());
                if active.load(Ordering::SeqCst) >= max {
                    inc(&policy.stats().tcp_refused);
                    continue; // dropping `s` closes it
                }
                active.fetch_add(1, Ordering::SeqCst);
                let (policy2, mut up, stop, active2) = (
                    policy.clone(),
                    upstream.clone(),
                    stop.clone(),
                    active.clone(),
                );
                let r = std::thread::Builder::new()
                    .name("xlat-dns64-conn".to_string())
                    .spawn(move || {
                        tcp_connection(s, &policy2, &mut up, &stop);
                        active2.fetch_sub(1, Ordering::SeqCst);
                    });
                match r {
                    Ok(h) => conns.push(h),
                    Err(_) => {
                        active.fetch_sub(1, Ordering::SeqCst);
                        inc(&policy.stats().tcp_refused);
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    for h in conns {
        let _ = h.join();
    }
}

/// RFC 7766: length-prefixed queries, answered in order, until the client closes, an idle
/// [`TCP_IDLE`], an error, or stop.
fn tcp_connection(mut s: TcpStream, policy: &Policy, up: &mut UpstreamSet, stop: &AtomicBool) {
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
        let Some(answer) = policy.handle(&q, Transport::Tcp, up) else {
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
fn read_full(s: &mut TcpStream, buf: &mut [u8], idle: Duration, stop: &AtomicBool) -> bool {
    let mut got = 0;
    let mut last = Instant::now();
    while got < buf.len() {
        if stop.load(Ordering::Relaxed) || last.elapsed() >= idle {
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
