//! The failover workload: numbered UDP flows echoed by the server, new sessions, and the
//! records of what was sent and answered.

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------
// Traffic: the UDP flows, their echo server, the new sessions.

/// What happened to one established flow: (send time, reply time or None) per sequence
/// number, and the source endpoints the server saw it from with the first time of each.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FlowRecord {
    pub sent: Vec<f64>,
    pub replied: Vec<Option<f64>>,
    pub sources: Vec<(f64, String)>,
}

pub(super) struct Shared {
    pub(super) t0: Instant,
    pub(super) stop: AtomicBool,
    /// New sessions per second now (f64 bits).
    pub(super) new_rate: AtomicU64,
    pub(super) new_sent: AtomicU64,
    pub(super) flows: Mutex<Vec<FlowRecord>>,
}

/// Running traffic; `finish` stops it.
pub struct Traffic {
    pub(super) shared: Arc<Shared>,
    pub(super) threads: Vec<std::thread::JoinHandle<Result<()>>>,
}

pub(super) fn payload(flow: usize, seq: u32) -> [u8; PAYLOAD] {
    let mut b = [0u8; PAYLOAD];
    b[..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&(flow as u16).to_be_bytes());
    b[6..10].copy_from_slice(&seq.to_be_bytes());
    b
}

/// (flow, seq) of a flow datagram, None for anything else.
pub fn parse_payload(b: &[u8]) -> Option<(usize, u32)> {
    if b.len() != PAYLOAD || b[..4] != MAGIC {
        return None;
    }
    Some((
        u16::from_be_bytes([b[4], b[5]]) as usize,
        u32::from_be_bytes([b[6], b[7], b[8], b[9]]),
    ))
}

impl Traffic {
    /// Starts the echo server, the flows and the new-session sender; all stop by themselves
    /// after `max_secs`.
    pub fn start(t: &Testbed, flows: usize, pps: f64, rate: f64, max_secs: f64) -> Result<Traffic> {
        let shared = Arc::new(Shared {
            t0: Instant::now(),
            stop: AtomicBool::new(false),
            new_rate: AtomicU64::new(rate.to_bits()),
            new_sent: AtomicU64::new(0),
            flows: Mutex::new(vec![FlowRecord::default(); flows]),
        });
        let deadline = Instant::now() + Duration::from_secs_f64(max_secs);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        let mut threads = Vec::new();
        // Echo server.
        let (sh, ns, rtx) = (shared.clone(), t.srv.clone(), ready_tx.clone());
        threads.push(std::thread::spawn(move || -> Result<()> {
            let s = sys::enter_netns(&ns).and_then(|_| {
                let s = UdpSocket::bind(SocketAddrV4::new(SRV, ECHO_PORT)).context("bind")?;
                s.set_read_timeout(Some(Duration::from_millis(50)))?;
                Ok(s)
            });
            let s = ready(s, &rtx)?;
            echo(&s, &sh, deadline)
        }));
        // Flows.
        let (sh, ns, rtx) = (shared.clone(), t.cli.clone(), ready_tx.clone());
        threads.push(std::thread::spawn(move || -> Result<()> {
            let socks = sys::enter_netns(&ns).and_then(|_| {
                (0..flows)
                    .map(|f| {
                        let u = UdpSocket::bind(SocketAddrV4::new(
                            Ipv4Addr::UNSPECIFIED,
                            FLOW_PORT + f as u16,
                        ))
                        .with_context(|| format!("binding flow {f}"))?;
                        u.set_nonblocking(true)?;
                        Ok(u)
                    })
                    .collect::<Result<Vec<_>>>()
            });
            let socks = ready(socks, &rtx)?;
            run_flows(&socks, &sh, Duration::from_secs_f64(1.0 / pps), deadline)
        }));
        // New sessions.
        let (sh, ns, rtx) = (shared.clone(), t.cli.clone(), ready_tx);
        threads.push(std::thread::spawn(move || -> Result<()> {
            let s = sys::enter_netns(&ns).and_then(|_| {
                (0..NEW_SOCKETS)
                    .map(|_| {
                        let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
                        s.set_nonblocking(true)?;
                        Ok(s)
                    })
                    .collect::<Result<Vec<_>>>()
            });
            let s = ready(s, &rtx)?;
            new_sessions(&s, &sh, deadline)
        }));
        let tr = Traffic { shared, threads };
        for _ in 0..3 {
            match ready_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => bail!("traffic: {e}"),
                Err(_) => bail!("the traffic threads did not start within 10 s"),
            }
        }
        Ok(tr)
    }

    pub fn now(&self) -> f64 {
        self.shared.t0.elapsed().as_secs_f64()
    }

    pub fn set_new_rate(&self, r: f64) {
        self.shared.new_rate.store(r.to_bits(), Ordering::SeqCst);
    }

    pub fn new_sent(&self) -> u64 {
        self.shared.new_sent.load(Ordering::SeqCst)
    }

    /// Stops sending, lets the last replies come back, returns the flows' records.
    pub fn finish(mut self) -> Result<Vec<FlowRecord>> {
        self.shared.stop.store(true, Ordering::SeqCst);
        for h in self.threads.drain(..) {
            match h.join() {
                Ok(r) => r?,
                Err(_) => bail!("a traffic thread panicked"),
            }
        }
        let v = std::mem::take(
            &mut *self
                .shared
                .flows
                .lock()
                .map_err(|_| anyhow::anyhow!("lock"))?,
        );
        Ok(v)
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

pub(super) fn ready<T>(
    r: Result<T>,
    tx: &std::sync::mpsc::Sender<std::result::Result<(), String>>,
) -> Result<T> {
    match r {
        Ok(x) => {
            let _ = tx.send(Ok(()));
            Ok(x)
        }
        Err(e) => {
            let _ = tx.send(Err(format!("{e:#}")));
            Err(e)
        }
    }
}

/// Answers every flow datagram; records each flow's source endpoints. Runs until stopped
/// (plus 300 ms for replies in flight) or the deadline.
pub(super) fn echo(sock: &UdpSocket, sh: &Shared, deadline: Instant) -> Result<()> {
    let mut buf = [0u8; 2048];
    let mut stop_seen: Option<Instant> = None;
    loop {
        if sh.stop.load(Ordering::SeqCst) || Instant::now() > deadline {
            let t = *stop_seen.get_or_insert_with(Instant::now);
            if t.elapsed() > Duration::from_millis(300) {
                return Ok(());
            }
        }
        let (len, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("echo recv"),
        };
        let Some((flow, _)) = parse_payload(&buf[..len]) else {
            continue;
        };
        {
            let Ok(mut g) = sh.flows.lock() else {
                bail!("flows lock poisoned");
            };
            if let Some(r) = g.get_mut(flow) {
                let src = from.to_string();
                if r.sources.last().map(|s| &s.1) != Some(&src) {
                    r.sources.push((sh.t0.elapsed().as_secs_f64(), src));
                }
            }
        }
        let _ = sock.send_to(&buf[..len], from);
    }
}

/// Every interval, one datagram on every flow's socket; replies recorded by sequence number.
pub(super) fn run_flows(
    socks: &[UdpSocket],
    sh: &Shared,
    interval: Duration,
    deadline: Instant,
) -> Result<()> {
    let dst = SocketAddr::V4(SocketAddrV4::new(SRV, ECHO_PORT));
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|u| libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(u),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let mut tick: u32 = 0;
    let mut drain_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if drain_until.is_none() && (sh.stop.load(Ordering::SeqCst) || now > deadline) {
            drain_until = Some(now + Duration::from_millis(200));
        }
        if let Some(d) = drain_until {
            if now >= d {
                return Ok(());
            }
        } else if now >= start + interval * tick {
            let t = sh.t0.elapsed().as_secs_f64();
            {
                let Ok(mut g) = sh.flows.lock() else {
                    bail!("flows lock poisoned");
                };
                for r in g.iter_mut() {
                    r.sent.push(t);
                    r.replied.push(None);
                }
            }
            for (f, u) in socks.iter().enumerate() {
                // A refused send (no neighbour for a moment) is an unreplied datagram.
                let _ = u.send_to(&payload(f, tick), dst);
            }
            tick = tick.saturating_add(1);
        }
        let next = if drain_until.is_some() {
            Duration::from_millis(20)
        } else {
            (start + interval * tick).saturating_duration_since(Instant::now())
        };
        let ms = next.as_millis().clamp(0, 50) as libc::c_int;
        // SAFETY: fds is a valid array of pollfd of the given length for the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r <= 0 {
            continue;
        }
        let t = sh.t0.elapsed().as_secs_f64();
        let Ok(mut g) = sh.flows.lock() else {
            bail!("flows lock poisoned");
        };
        for (k, p) in fds.iter_mut().enumerate() {
            if p.revents & libc::POLLIN == 0 {
                continue;
            }
            p.revents = 0;
            for _ in 0..64 {
                match socks[k].recv_from(&mut buf) {
                    Ok((len, _)) => {
                        if let Some((f, seq)) = parse_payload(&buf[..len]) {
                            if f == k {
                                if let Some(x) = g[k].replied.get_mut(seq as usize) {
                                    x.get_or_insert(t);
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

/// One datagram per new session (a new destination port each, then the next source socket),
/// at the shared rate, sent in 1 ms rounds of at most 1,000.
pub(super) fn new_sessions(socks: &[UdpSocket], sh: &Shared, deadline: Instant) -> Result<()> {
    let mut k: u64 = 0;
    let mut owed = 0.0f64;
    let mut last = Instant::now();
    let data = [0u8; 16];
    while !sh.stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        let now = Instant::now();
        let rate = f64::from_bits(sh.new_rate.load(Ordering::SeqCst));
        owed = (owed + rate * (now - last).as_secs_f64()).min(1000.0);
        last = now;
        while owed >= 1.0 {
            let port = NEW_BASE + (k % u64::from(NEW_SPAN)) as u16;
            let sock = &socks[(k / u64::from(NEW_SPAN)) as usize % socks.len()];
            if sock.send_to(&data, SocketAddrV4::new(SRV, port)).is_ok() {
                sh.new_sent.fetch_add(1, Ordering::SeqCst);
            }
            k += 1;
            owed -= 1.0;
        }
    }
    Ok(())
}
