//! The `[metrics]` HTTP listener: `GET /metrics` (Prometheus text, [`crate::metrics`]),
//! `GET /stats.json` (the `xlat show stats --json` document) and `GET /` (the live page,
//! `page.html`, which polls `/stats.json`).
//!
//! It runs on control-plane threads, never on a packet worker. The numbers come the way
//! `xlat show stats` gets them: a `Stats` request through each worker's control channel,
//! answered between batches and merged ([`crate::control::ask_workers`]); a scrape waits for
//! the workers, the workers never wait for a scrape. One ask is in flight at a time and an
//! answer younger than [`MIN_ASK_INTERVAL`] is served again, so however often clients poll,
//! the workers answer at most a few times a second.
//!
//! Hostile or slow clients stall nothing but themselves: one thread per connection, at most
//! [`MAX_HTTP_CLIENTS`] at once (one more is answered 503 and closed), a request head of at
//! most [`MAX_HEAD`] bytes that must arrive within [`HEAD_DEADLINE`], reads and writes timing
//! out after [`HTTP_TIMEOUT`], one request per connection.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};
use xlat_io::sys::wait_readable;

use crate::control::{ask_workers, DaemonStats, Request, Response, WorkerLink};

/// Most connections served at once.
pub const MAX_HTTP_CLIENTS: usize = 8;
/// Longest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 8 * 1024;
/// Read and write timeout of one socket call.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// The whole request head must have arrived by then.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(10);
/// An answer of the workers younger than this is served again instead of asking anew.
pub const MIN_ASK_INTERVAL: Duration = Duration::from_millis(250);

/// The live page (self-contained: its script and style are inline, nothing is fetched but
/// `/stats.json`).
pub const PAGE: &str = include_str!("page.html");

/// Serves the listener on its own thread; dropping it stops the thread.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Where the numbers come from: the workers, through the control path, with the last answer.
struct Source {
    workers: Vec<WorkerLink>,
    last: Mutex<Option<(Instant, Arc<DaemonStats>)>>,
}

impl Source {
    /// The workers' merged stats, or why there are none.
    fn stats(&self) -> Result<Arc<DaemonStats>, String> {
        // Held across the ask: concurrent scrapes wait here and share its answer.
        let mut last = match self.last.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        if let Some((at, s)) = last.as_ref() {
            if at.elapsed() < MIN_ASK_INTERVAL {
                return Ok(s.clone());
            }
        }
        match ask_workers(Request::Stats {}, &self.workers) {
            Response::Stats(s) => {
                let s: Arc<DaemonStats> = Arc::from(s);
                *last = Some((Instant::now(), s.clone()));
                Ok(s)
            }
            Response::Error(e) => Err(e),
            other => Err(format!("unexpected answer from the workers: {other:?}")),
        }
    }
}

impl MetricsServer {
    /// Binds `listen` and starts serving; the numbers are asked of `workers`.
    pub fn start(listen: SocketAddr, workers: Vec<WorkerLink>) -> std::io::Result<MetricsServer> {
        MetricsServer::serve(MetricsServer::bind(listen)?, workers)
    }

    /// Binds `listen` for [`MetricsServer::serve`]: a reload binds the new address before it
    /// lets the old one go, so a failed bind changes nothing.
    pub fn bind(listen: SocketAddr) -> std::io::Result<TcpListener> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    }

    /// Starts serving a listener made by [`MetricsServer::bind`].
    pub fn serve(
        listener: TcpListener,
        workers: Vec<WorkerLink>,
    ) -> std::io::Result<MetricsServer> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let source = Arc::new(Source {
            workers,
            last: Mutex::new(None),
        });
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xlat-metrics".to_string())
            .spawn(move || {
                // A scrape never takes the CPU from real-time packet workers.
                xlat_io::sys::control_plane_priority();
                serve(listener, source, stop2)
            })?;
        info!(%addr, "metrics listening (GET /metrics, /stats.json, /)");
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the port chosen when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listener: TcpListener, source: Arc<Source>, stop: Arc<AtomicBool>) {
    use std::os::fd::AsFd;
    let clients = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match wait_readable([listener.as_fd()], Duration::from_millis(200)) {
            Ok([true]) => {}
            Ok(_) => continue,
            Err(e) => {
                warn!(error = %e, "metrics listener poll failed");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        }
        let mut stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            Err(e) => {
                warn!(error = %e, "metrics accept failed");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        if clients.fetch_add(1, Ordering::SeqCst) >= MAX_HTTP_CLIENTS {
            clients.fetch_sub(1, Ordering::SeqCst);
            // Best effort, without blocking: the socket is new and its buffer empty.
            let _ = stream.set_nonblocking(true);
            let busy = format!("{MAX_HTTP_CLIENTS} connections are being served; try again\n");
            let _ = stream.write_all(&response(
                503,
                "text/plain; charset=utf-8",
                busy.as_bytes(),
                true,
            ));
            debug!("metrics connection refused: busy");
            continue;
        }
        let (source, count) = (source.clone(), clients.clone());
        let spawned = std::thread::Builder::new()
            .name("xlat-metrics-client".to_string())
            .spawn(move || {
                if let Err(e) = handle(stream, &source) {
                    debug!(error = %e, "metrics connection");
                }
                count.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            clients.fetch_sub(1, Ordering::SeqCst);
            warn!(error = %e, "cannot start a thread for a metrics connection");
        }
    }
}

/// Reads the request head: `Ok(None)` when the client closed or was too slow, an error
/// status when it is too long.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Result<Option<Vec<u8>>, u16>> {
    let start = Instant::now();
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        if start.elapsed() > HEAD_DEADLINE {
            return Ok(Ok(None));
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(Ok(None)),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(Ok(None))
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(Ok(Some(head)));
        }
        if head.len() >= MAX_HEAD {
            return Ok(Err(431));
        }
    }
}

/// An HTTP/1.1 response, the connection closed after it; `body` left out for HEAD.
fn response(status: u16, content_type: &str, body: &[u8], with_body: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nContent-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:\r\nConnection: close\r\n",
        body.len()
    );
    if status == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

/// What a request gets: status, content type, body.
fn route(method: &str, path: &str, source: &Source) -> (u16, &'static str, Vec<u8>) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != "GET" && method != "HEAD" {
        return (405, TEXT, b"only GET and HEAD\n".to_vec());
    }
    let path = path.split(['?', '#']).next().unwrap_or_default();
    match path {
        "/" | "/index.html" => (200, "text/html; charset=utf-8", PAGE.as_bytes().to_vec()),
        "/metrics" => match source.stats() {
            Ok(s) => (
                200,
                crate::metrics::CONTENT_TYPE,
                crate::metrics::encode(&s).into_bytes(),
            ),
            Err(e) => (503, TEXT, format!("xlat: {e}\n").into_bytes()),
        },
        "/stats.json" => match source.stats() {
            Ok(s) => match serde_json::to_vec(&*s) {
                Ok(j) => (200, "application/json", j),
                Err(e) => (
                    503,
                    TEXT,
                    format!("xlat: cannot encode: {e}\n").into_bytes(),
                ),
            },
            Err(e) => (503, TEXT, format!("xlat: {e}\n").into_bytes()),
        },
        _ => (
            404,
            TEXT,
            b"not found; try /metrics, /stats.json or /\n".to_vec(),
        ),
    }
}

/// Serves one request on `stream`.
fn handle(mut stream: TcpStream, source: &Source) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
    let head = match read_head(&mut stream)? {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(()),
        Err(status) => {
            let body = format!("request head longer than {MAX_HEAD} bytes\n");
            stream.write_all(&response(
                status,
                "text/plain; charset=utf-8",
                body.as_bytes(),
                true,
            ))?;
            return Ok(());
        }
    };
    let text = String::from_utf8_lossy(&head);
    let mut parts = text.lines().next().unwrap_or_default().split_whitespace();
    let (method, path, version) = (parts.next(), parts.next(), parts.next());
    let (status, ctype, body) = match (method, path, version) {
        (Some(m), Some(p), Some(v)) if v.starts_with("HTTP/1.") && p.starts_with('/') => {
            route(m, p, source)
        }
        _ => (
            400,
            "text/plain; charset=utf-8",
            b"expected a request line like GET /metrics HTTP/1.1\n".to_vec(),
        ),
    };
    stream.write_all(&response(status, ctype, &body, method != Some("HEAD")))?;
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::serve_pending;
    use xlat_io::sys::Waker;

    /// Sends `raw` and reads the whole answer (the server closes after one).
    fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        s.write_all(raw).unwrap_or_else(|e| panic!("write: {e}"));
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn get(addr: SocketAddr, path: &str) -> String {
        exchange(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
    }

    #[test]
    fn serves_metrics_json_and_page_through_the_control_path(
    ) -> Result<(), Box<dyn std::error::Error>> {
        // A "packet worker": answers Stats between its "batches", as the real ones do.
        let (tx, rx) = crate::inbox::inbox();
        let waker = Arc::new(Waker::new()?);
        let stop = Arc::new(AtomicBool::new(false));
        let (w, st) = (waker.clone(), stop.clone());
        let asked = Arc::new(AtomicUsize::new(0));
        let asked2 = asked.clone();
        let worker = std::thread::spawn(move || {
            for _ in 0..1000 {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let _ = wait_readable([std::os::fd::AsFd::as_fd(&*w)], Duration::from_millis(50));
                w.drain();
                serve_pending(&rx, |r| match r {
                    Request::Stats {} => {
                        let n = asked2.fetch_add(1, Ordering::SeqCst) as u64;
                        let mut s = crate::metrics::everything();
                        s.engine.sessions = 5 + n;
                        Response::Stats(Box::new(s))
                    }
                    _ => Response::Error("nope".into()),
                });
            }
        });
        let server = MetricsServer::start("127.0.0.1:0".parse()?, vec![WorkerLink { tx, waker }])?;
        let addr = server.local_addr();

        let m = get(addr, "/metrics");
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(m.contains("Content-Type: text/plain; version=0.0.4"), "{m}");
        assert!(m.contains("\nxlat_sessions 5\n"), "{m}");
        assert!(m.contains("# TYPE xlat_drops_total counter\n"), "{m}");
        let j = get(addr, "/stats.json?x=1");
        let body = j.split("\r\n\r\n").nth(1).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(body)?;
        assert!(v["sessions"].as_u64().is_some_and(|s| s >= 5), "{j}");
        assert!(v["events"].as_array().is_some_and(|a| !a.is_empty()));
        let p = get(addr, "/");
        assert!(p.starts_with("HTTP/1.1 200 OK\r\n"), "{p}");
        assert!(p.contains("<canvas"), "{p}");
        assert!(p.contains("/stats.json"));
        let h = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            h.starts_with("HTTP/1.1 200 OK\r\n") && h.ends_with("\r\n\r\n"),
            "{h}"
        );
        assert!(get(addr, "/nope").starts_with("HTTP/1.1 404 "));
        let post = exchange(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        assert!(exchange(addr, b"hello\r\n\r\n").starts_with("HTTP/1.1 400 "));
        // A head that never ends is cut at MAX_HEAD.
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD + 100, b'a');
        assert!(exchange(addr, &long).starts_with("HTTP/1.1 431 "));

        // Clients that connect and say nothing take their own slots only: past
        // MAX_HTTP_CLIENTS the next is told 503, and once they go, requests are served.
        let idle: Vec<TcpStream> = (0..MAX_HTTP_CLIENTS)
            .map(|_| TcpStream::connect(addr))
            .collect::<Result<_, _>>()?;
        let mut busy = String::new();
        for _ in 0..50 {
            busy = get(addr, "/metrics");
            if busy.starts_with("HTTP/1.1 503 ") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(busy.starts_with("HTTP/1.1 503 "), "{busy}");
        drop(idle);
        let mut again = String::new();
        for _ in 0..100 {
            again = get(addr, "/metrics");
            if again.starts_with("HTTP/1.1 200 ") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(again.starts_with("HTTP/1.1 200 "), "{again}");
        assert!(asked.load(Ordering::SeqCst) >= 1);

        drop(server);
        assert!(
            TcpStream::connect(addr).is_err(),
            "still listening after drop"
        );
        stop.store(true, Ordering::SeqCst);
        let _ = worker.join();
        Ok(())
    }

    #[test]
    fn a_stopped_worker_gives_503() -> Result<(), Box<dyn std::error::Error>> {
        let (tx, rx) = crate::inbox::inbox();
        drop(rx);
        let server = MetricsServer::start(
            "127.0.0.1:0".parse()?,
            vec![WorkerLink {
                tx,
                waker: Arc::new(Waker::new()?),
            }],
        )?;
        let r = get(server.local_addr(), "/metrics");
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
        assert!(r.contains("the packet worker has stopped"), "{r}");
        Ok(())
    }
}
