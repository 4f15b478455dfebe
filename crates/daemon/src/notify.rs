//! systemd's service notifications (sd_notify(3)) for `Type=notify` units
//! (packaging/xlat.service): `READY=1` once the TUN device, its routes and the control socket
//! are up, `STOPPING=1` on the way out, and `WATCHDOG=1` keep-alives while every packet worker
//! answers.
//!
//! The protocol is one datagram per message to the Unix socket named by `NOTIFY_SOCKET` (a
//! path, or `@name` for the abstract namespace); without it (not started by systemd) nothing
//! is sent. The watchdog ([`Watchdog`]) runs on its own control-plane thread: every half of
//! `WATCHDOG_USEC` it pings every packet worker through its control channel (answered between
//! batches, as `xlat show` is) and sends the keep-alive only when all of them answered, so a
//! stuck worker lets systemd's watchdog restart the service.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::control::{ask_workers, Request, Response, WorkerLink};

/// Where systemd listens for this service's notifications.
pub struct Notifier {
    socket: UnixDatagram,
    addr: std::os::unix::net::SocketAddr,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` names, or `None` when it is unset or unusable (logged).
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        match Notifier::new(&path.to_string_lossy()) {
            Ok(n) => Some(n),
            Err(e) => {
                warn!(error = %e, "NOTIFY_SOCKET is set but unusable: systemd gets no notifications");
                None
            }
        }
    }

    /// A notifier for socket `path` (`@name`: abstract namespace).
    pub fn new(path: &str) -> std::io::Result<Notifier> {
        use std::os::linux::net::SocketAddrExt;
        let addr = match path.strip_prefix('@') {
            Some(name) => std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?,
            None => std::os::unix::net::SocketAddr::from_pathname(path)?,
        };
        Ok(Notifier {
            socket: UnixDatagram::unbound()?,
            addr,
        })
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines, e.g. `READY=1`).
    pub fn send(&self, state: &str) -> std::io::Result<()> {
        self.socket.send_to_addr(state.as_bytes(), &self.addr)?;
        Ok(())
    }

    /// [`Notifier::send`], a failure logged (systemd went away: nothing else to do).
    pub fn notify(&self, state: &str) {
        if let Err(e) = self.send(state) {
            warn!(error = %e, state, "cannot notify systemd");
        }
    }
}

/// The watchdog interval systemd asks for (`WATCHDOG_USEC`, for this process when
/// `WATCHDOG_PID` is set), or `None`.
pub fn watchdog_interval() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    interval_for(usec.as_deref(), pid.as_deref(), std::process::id())
}

/// [`watchdog_interval`] from the variables' values and this process's id.
fn interval_for(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    if pid.is_some_and(|p| p.trim() != me.to_string()) {
        return None;
    }
    let usec: u64 = usec?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// The keep-alive thread; dropping it stops the thread.
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Sends `WATCHDOG=1` every `interval / 2` while every worker of `workers` answers a ping.
    pub fn start(
        notifier: Arc<Notifier>,
        interval: Duration,
        workers: Vec<WorkerLink>,
    ) -> std::io::Result<Watchdog> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let every = (interval / 2).max(Duration::from_millis(100));
        let thread = std::thread::Builder::new()
            .name("xlat-watchdog".to_string())
            .spawn(move || {
                xlat_io::sys::control_plane_priority();
                let mut next = Instant::now();
                while !stop2.load(Ordering::SeqCst) {
                    if Instant::now() >= next {
                        next = Instant::now() + every;
                        match ask_workers(Request::Ping {}, &workers) {
                            Response::Pong(_) => notifier.notify("WATCHDOG=1"),
                            Response::Error(e) => {
                                warn!("watchdog: no keep-alive sent: {e}")
                            }
                            other => debug!(?other, "watchdog: unexpected answer"),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100).min(every));
                }
            })?;
        info!(
            ?interval,
            "systemd watchdog: keep-alives while every packet worker answers"
        );
        Ok(Watchdog {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{serve_pending, Pong};
    use xlat_io::sys::{wait_readable, Waker};

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 256];
        match sock.recv(&mut buf) {
            Ok(n) => String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned(),
            Err(e) => panic!("no notification: {e}"),
        }
    }

    #[test]
    fn notifies_a_path_and_an_abstract_socket() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("xlat-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path)?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        Notifier::new(&path.display().to_string())?.send("READY=1")?;
        assert_eq!(recv(&sock), "READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("xlat-notify-test-{}", std::process::id());
        let abs = UnixDatagram::bind_addr(&std::os::unix::net::SocketAddr::from_abstract_name(
            name.as_bytes(),
        )?)?;
        abs.set_read_timeout(Some(Duration::from_secs(5)))?;
        Notifier::new(&format!("@{name}"))?.send("STOPPING=1")?;
        assert_eq!(recv(&abs), "STOPPING=1");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn watchdog_keeps_alive_only_while_the_workers_answer() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("xlat-watchdog-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path)?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        let notifier = Arc::new(Notifier::new(&path.display().to_string())?);

        // A worker that answers pings for a while, then stops.
        let (tx, rx) = crate::inbox::inbox();
        let waker = Arc::new(Waker::new()?);
        let w = waker.clone();
        let worker = std::thread::spawn(move || {
            let mut answered = 0;
            for _ in 0..200 {
                if answered >= 3 {
                    break;
                }
                let _ = wait_readable([std::os::fd::AsFd::as_fd(&*w)], Duration::from_millis(50));
                w.drain();
                serve_pending(&rx, |_| {
                    answered += 1;
                    Response::Pong(Pong {
                        version: "t".into(),
                        uptime_secs: 0,
                    })
                });
            }
            // Dropping rx: the worker "has stopped".
        });
        let dog = Watchdog::start(
            notifier,
            Duration::from_millis(400),
            vec![WorkerLink { tx, waker }],
        )?;
        for _ in 0..3 {
            assert_eq!(recv(&sock), "WATCHDOG=1");
        }
        let _ = worker.join();
        // With the worker gone no keep-alive follows (one may have been in flight).
        sock.set_read_timeout(Some(Duration::from_millis(1500)))?;
        let mut buf = [0u8; 64];
        let mut late = 0;
        while sock.recv(&mut buf).is_ok() {
            late += 1;
            assert!(late <= 1, "keep-alives went on after the worker stopped");
        }
        drop(dog);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn watchdog_interval_is_for_this_process() {
        let s = Duration::from_secs;
        assert_eq!(interval_for(Some("30000000"), None, 7), Some(s(30)));
        assert_eq!(interval_for(Some("30000000"), Some("7"), 7), Some(s(30)));
        // Meant for another process (a child that inherited the environment).
        assert_eq!(interval_for(Some("30000000"), Some("8"), 7), None);
        assert_eq!(interval_for(Some("0"), None, 7), None);
        assert_eq!(interval_for(Some("x"), None, 7), None);
        assert_eq!(interval_for(None, Some("7"), 7), None);
    }
}
