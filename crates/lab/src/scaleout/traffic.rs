//! Traffic: every subscriber's UDP streams, the echo server on the outside router, and the
//! record of what each side saw.

use super::*;

/// What the server saw of one stream.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StreamSeen {
    /// (seconds since the start, source address) each time the source address changed.
    pub changes: Vec<(f64, Ipv4Addr)>,
    /// Packets per source address.
    pub per_source: BTreeMap<Ipv4Addr, u64>,
}

/// What the client saw of one stream.
#[derive(Debug, Clone, Default)]
pub(super) struct StreamBack {
    /// Replied sequence numbers.
    pub(super) replied: Vec<bool>,
}

/// Everything both ends recorded.
#[derive(Debug, Default)]
pub struct Record {
    /// Send time (seconds since the start) of each tick; every stream sends seq = tick.
    pub ticks: Vec<f64>,
    /// `[subscriber][flow]`
    pub seen: Vec<Vec<StreamSeen>>,
    pub(super) replied: Vec<Vec<StreamBack>>,
    /// (seconds since the start, source address) of every stream packet the server received.
    pub server_rx: Vec<(f64, Ipv4Addr)>,
}

/// The server's record: per stream what it saw, and (time, source) of every packet.
pub(super) type ServerRecord = (Vec<Vec<StreamSeen>>, Vec<(f64, Ipv4Addr)>);

pub(super) struct Shared {
    pub(super) t0: Instant,
    pub(super) stop: AtomicBool,
    /// Subscribers sending now (0..active); the late ones join when it grows.
    pub(super) active: AtomicUsize,
    /// The streams' packet interval now, ns.
    pub(super) interval_ns: AtomicU64,
    pub(super) server: Mutex<ServerRecord>,
    pub(super) client: Mutex<(Vec<f64>, Vec<Vec<StreamBack>>)>,
}

/// Running streams; `finish` stops them and returns the record.
pub struct Traffic {
    pub(super) shared: Arc<Shared>,
    pub(super) threads: Vec<std::thread::JoinHandle<Result<()>>>,
}

pub(super) fn payload(sub: usize, flow: usize, seq: u32) -> [u8; PAYLOAD] {
    let mut b = [0u8; PAYLOAD];
    b[..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&(sub as u16).to_be_bytes());
    b[6..8].copy_from_slice(&(flow as u16).to_be_bytes());
    b[8..12].copy_from_slice(&seq.to_be_bytes());
    b
}

/// (subscriber, flow, seq) of a stream packet, None for anything else.
pub fn parse_payload(b: &[u8]) -> Option<(usize, usize, u32)> {
    if b.len() != PAYLOAD || b[..4] != MAGIC {
        return None;
    }
    let sub = u16::from_be_bytes([b[4], b[5]]) as usize;
    let flow = u16::from_be_bytes([b[6], b[7]]) as usize;
    let seq = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    Some((sub, flow, seq))
}

impl Traffic {
    /// Starts the echo server in the outside router and the streams in the tester: the
    /// subscribers send, the late ones wait for [`Traffic::start_late`]. At most `max_secs`
    /// of sending (the streams stop by themselves then).
    pub fn start(c: &Cluster, max_secs: f64) -> Result<Traffic> {
        let (m, f) = (c.opts.subscribers + c.opts.late_subscribers, c.opts.flows);
        let max_secs = max_secs.clamp(1.0, 7200.0);
        let shared = Arc::new(Shared {
            t0: Instant::now(),
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(c.opts.subscribers),
            interval_ns: AtomicU64::new(c.opts.interval.as_nanos() as u64),
            server: Mutex::new((vec![vec![StreamSeen::default(); f]; m], Vec::new())),
            client: Mutex::new((Vec::new(), vec![vec![StreamBack::default(); f]; m])),
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let sh = shared.clone();
        let ns = c.ns_or.clone();
        let rtx = ready_tx.clone();
        let server = std::thread::spawn(move || -> Result<()> {
            let sock = (|| -> Result<UdpSocket> {
                sys::enter_netns(&ns)?;
                let s = UdpSocket::bind(SocketAddrV4::new(SERVER, SERVER_PORT))
                    .context("server bind")?;
                s.set_read_timeout(Some(Duration::from_millis(50)))?;
                Ok(s)
            })();
            let sock = match sock {
                Ok(s) => {
                    let _ = rtx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = rtx.send(Err(anyhow::anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            serve(&sock, &sh)
        });
        let sh = shared.clone();
        let ns = c.ns_t.clone();
        let client = std::thread::spawn(move || -> Result<()> {
            let socks = (|| -> Result<Vec<Vec<UdpSocket>>> {
                sys::enter_netns(&ns)?;
                let mut v = Vec::new();
                for s in 0..m {
                    let mut row = Vec::new();
                    for _ in 0..f {
                        let u = UdpSocket::bind(SocketAddrV4::new(subscriber(s), 0))
                            .with_context(|| format!("binding {}", subscriber(s)))?;
                        u.set_nonblocking(true)?;
                        row.push(u);
                    }
                    v.push(row);
                }
                Ok(v)
            })();
            let socks = match socks {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            stream(&socks, &sh, Duration::from_secs_f64(max_secs))
        });
        let t = Traffic {
            shared,
            threads: vec![server, client],
        };
        for _ in 0..2 {
            match ready_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    t.shared.stop.store(true, Ordering::SeqCst);
                    return Err(e);
                }
                Err(_) => {
                    t.shared.stop.store(true, Ordering::SeqCst);
                    bail!("the traffic threads did not start within 10 s");
                }
            }
        }
        Ok(t)
    }

    /// The late subscribers start sending; returns the record's time of that moment (every
    /// tick at or after it includes them).
    pub fn start_late(&self, total: usize) -> f64 {
        self.shared.active.store(total, Ordering::SeqCst);
        self.now()
    }

    /// Sets the streams' packet interval.
    pub fn set_interval(&self, d: Duration) {
        self.shared
            .interval_ns
            .store(d.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Seconds since the streams started (the record's clock).
    pub fn now(&self) -> f64 {
        self.shared.t0.elapsed().as_secs_f64()
    }

    /// A copy of what the server has seen so far.
    pub fn seen(&self) -> Vec<Vec<StreamSeen>> {
        self.shared
            .server
            .lock()
            .map(|g| g.0.clone())
            .unwrap_or_default()
    }

    /// Stops sending, waits `drain` for the last replies, stops the server.
    pub fn finish(mut self, drain: Duration) -> Result<Record> {
        self.shared.stop.store(true, Ordering::SeqCst);
        let client = self.threads.pop();
        if let Some(h) = client {
            match h.join() {
                Ok(r) => r.context("stream client")?,
                Err(_) => bail!("the stream client thread panicked"),
            }
        }
        // The client drains before it returns; the server keeps answering meanwhile.
        std::thread::sleep(drain.min(Duration::from_secs(2)));
        if let Some(h) = self.threads.pop() {
            match h.join() {
                Ok(r) => r.context("echo server")?,
                Err(_) => bail!("the echo server thread panicked"),
            }
        }
        let (seen, rx) = std::mem::take(
            &mut *self
                .shared
                .server
                .lock()
                .map_err(|_| anyhow::anyhow!("lock"))?,
        );
        let (ticks, replied) = std::mem::take(
            &mut *self
                .shared
                .client
                .lock()
                .map_err(|_| anyhow::anyhow!("lock"))?,
        );
        Ok(Record {
            ticks,
            seen,
            replied,
            server_rx: rx,
        })
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

/// The echo server: records sources, sends every stream packet back. Stops when the client
/// has stopped and 300 ms passed (its replies may still be in flight).
pub(super) fn serve(sock: &UdpSocket, sh: &Shared) -> Result<()> {
    let mut buf = [0u8; 2048];
    let mut stop_seen: Option<Instant> = None;
    loop {
        if sh.stop.load(Ordering::SeqCst) {
            let t = *stop_seen.get_or_insert_with(Instant::now);
            if t.elapsed() > Duration::from_millis(800) {
                return Ok(());
            }
        }
        let (len, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("server recv"),
        };
        let Some((sub, flow, _seq)) = parse_payload(&buf[..len]) else {
            continue;
        };
        let std::net::SocketAddr::V4(from4) = from else {
            continue;
        };
        let now = sh.t0.elapsed().as_secs_f64();
        {
            let Ok(mut g) = sh.server.lock() else {
                bail!("server state lock poisoned");
            };
            let Some(st) = g.0.get_mut(sub).and_then(|r| r.get_mut(flow)) else {
                continue;
            };
            let src = *from4.ip();
            if st.changes.last().map(|c| c.1) != Some(src) {
                st.changes.push((now, src));
            }
            *st.per_source.entry(src).or_insert(0) += 1;
            if g.1.len() < 20_000_000 {
                g.1.push((now, src));
            }
        }
        let _ = sock.send_to(&buf[..len], from);
    }
}

/// The streams: every interval (`sh.interval_ns`, which may change), one packet on every
/// socket of the active subscribers; replies counted by sequence. A sender that falls more
/// than 50 ms behind skips the missed ticks (the offered rate is what the ticks record).
pub(super) fn stream(socks: &[Vec<UdpSocket>], sh: &Shared, max: Duration) -> Result<()> {
    let dst = SocketAddrV4::new(SERVER, SERVER_PORT);
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut who: Vec<(usize, usize)> = Vec::new();
    for (s, row) in socks.iter().enumerate() {
        for (f, u) in row.iter().enumerate() {
            fds.push(libc::pollfd {
                fd: u.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            who.push((s, f));
        }
    }
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let mut tick: usize = 0;
    let mut due = start;
    let mut drain_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if drain_until.is_none()
            && (sh.stop.load(Ordering::SeqCst) || now >= start + max || tick >= 5_000_000)
        {
            drain_until = Some(now + Duration::from_millis(500));
        }
        if let Some(d) = drain_until {
            if now >= d {
                return Ok(());
            }
        } else if now >= due {
            let t = sh.t0.elapsed().as_secs_f64();
            let active = sh.active.load(Ordering::SeqCst);
            {
                let Ok(mut g) = sh.client.lock() else {
                    bail!("client state lock poisoned");
                };
                g.0.push(t);
                for r in g.1.iter_mut() {
                    for b in r.iter_mut() {
                        b.replied.push(false);
                    }
                }
            }
            for (s, row) in socks.iter().enumerate().take(active) {
                for (f, u) in row.iter().enumerate() {
                    // A refused send (a route or neighbour missing for a moment) is a lost
                    // packet: counted as unreplied.
                    let _ = u.send_to(&payload(s, f, tick as u32), dst);
                }
            }
            tick += 1;
            due += Duration::from_nanos(sh.interval_ns.load(Ordering::SeqCst).max(1_000_000));
            let now = Instant::now();
            if due + Duration::from_millis(50) < now {
                due = now;
            }
        }
        let next = if drain_until.is_some() {
            Duration::from_millis(20)
        } else {
            due.saturating_duration_since(Instant::now())
        };
        let next = next.min(Duration::from_millis(100));
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: next.subsec_nanos() as libc::c_long,
        };
        // SAFETY: fds is a valid array of pollfd of the given length; ts is a valid timespec;
        // a null signal mask leaves the thread's mask alone.
        let r = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if r <= 0 {
            continue;
        }
        let Ok(mut g) = sh.client.lock() else {
            bail!("client state lock poisoned");
        };
        for (k, p) in fds.iter_mut().enumerate() {
            if p.revents & libc::POLLIN == 0 {
                continue;
            }
            p.revents = 0;
            let (s, f) = who[k];
            // Bounded: at most 64 datagrams per socket per wakeup.
            for _ in 0..64 {
                match socks[s][f].recv_from(&mut buf) {
                    Ok((len, _)) => {
                        if let Some((rs, rf, seq)) = parse_payload(&buf[..len]) {
                            if (rs, rf) == (s, f) {
                                if let Some(x) = g.1[s][f].replied.get_mut(seq as usize) {
                                    *x = true;
                                }
                            }
                        }
                    }
                    Err(_) => break,
                }
            }
        }
    }
}
