//! The other system calls the daemon needs, wrapped safely: waiting on descriptors
//! ([`wait_readable`], poll(2)), waking a thread blocked in that wait ([`Waker`], an eventfd),
//! turning SIGINT/SIGTERM into a stop flag and SIGHUP into a reload request
//! ([`install_stop_handler`], [`take_hangup`]) -- the stop also readable on a descriptor a
//! sleeping thread waits on ([`stop_fd`]) --, and keeping control-plane threads out of a
//! real-time class the packet workers run in ([`control_plane_priority`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

/// Waits until at least one of `fds` is readable (or has an error or hang-up, which a read
/// will report) or `timeout` passes. Returns which are ready; all false on timeout or when a
/// signal interrupted the wait.
pub fn wait_readable<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout: Duration,
) -> io::Result<[bool; N]> {
    let mut pfds = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfds` is an array of N initialised pollfd structs that outlives the call, and
    // N is passed as its length; every fd is borrowed, so open for the duration of the call.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), N as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok([false; N]);
        }
        return Err(e);
    }
    Ok(pfds
        .map(|p| p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0))
}

/// [`wait_readable`] for a number of descriptors known at run time (at most 64): bit i of
/// the answer is set when `fds[i]` is ready.
pub fn wait_readable_any(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<u64> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .take(64)
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfds` holds pfds.len() initialised pollfd structs and outlives the call; every
    // fd is borrowed, so open for the duration of the call.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(pfds.iter().enumerate().fold(0u64, |acc, (i, p)| {
        let ready =
            p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        acc | (u64::from(ready) << i)
    }))
}

/// An eventfd another thread writes to wake a thread waiting in [`wait_readable`].
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub fn new() -> io::Result<Waker> {
        // SAFETY: eventfd(2) with constant flags; no pointers.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we just created and own exclusively.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Waker { fd })
    }

    /// Makes the eventfd readable. Never blocks (a saturated counter is readable anyway).
    pub fn wake(&self) {
        Waker::wake_fd(self.fd.as_raw_fd());
    }

    /// Adds one to the eventfd `fd`, which the caller keeps open across the call.
    fn wake_fd(fd: libc::c_int) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, which lives across the call, to `fd`, which the
        // caller holds open. Errors (EAGAIN on a saturated counter) leave the fd readable,
        // which is all a wake needs.
        let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), std::mem::size_of::<u64>()) };
    }

    /// Resets the eventfd to not readable.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into `v`, which lives across the call. EAGAIN (nothing
        // pending) is the expected outcome when there was no wake.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut v as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
static HANGUP: AtomicBool = AtomicBool::new(false);
/// The eventfd behind [`stop_fd`] (-1 until made): written by the signal handler, never
/// closed, so the handler can never write to a descriptor that was closed and reused.
static STOP_FD: AtomicI32 = AtomicI32::new(-1);
static STOP_FD_MADE: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();

extern "C" fn on_stop_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: atomic stores and write(2).
    if sig == libc::SIGHUP {
        HANGUP.store(true, Ordering::SeqCst);
        return;
    }
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
    let fd = STOP_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: `fd` is the process-lifetime eventfd of `stop_fd` (never closed); writes the
        // 8 bytes of `one`, which lives across the call. write(2) is async-signal-safe.
        let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

/// A descriptor that becomes readable (and stays so) when SIGINT or SIGTERM sets the stop
/// flag of [`install_stop_handler`]: a thread that sleeps long in [`wait_readable`] adds it
/// to its descriptors and wakes at once on a stop. Made on the first call and kept for the
/// life of the process; `None` if the eventfd cannot be made (then sleep in short steps).
/// Call it before the stop can come (a stop before the first call is seen on the flag only).
pub fn stop_fd() -> Option<BorrowedFd<'static>> {
    let made = STOP_FD_MADE.get_or_init(|| {
        // SAFETY: eventfd(2) with constant flags; no pointers.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return None;
        }
        STOP_FD.store(raw, Ordering::SeqCst);
        // SAFETY: `raw` is a descriptor we just created and own exclusively.
        Some(unsafe { OwnedFd::from_raw_fd(raw) })
    });
    if STOP.load(Ordering::SeqCst) {
        // A stop that came before the descriptor existed: make it readable now.
        if let Some(fd) = made {
            Waker::wake_fd(fd.as_raw_fd());
        }
    }
    made.as_ref().map(|fd| fd.as_fd())
}

/// Installs handlers for SIGINT and SIGTERM that set the returned flag (and nothing else),
/// and for SIGHUP -- what a closed terminal or SSH session sends, and what `systemctl reload`
/// sends -- one that only records a reload request for [`take_hangup`]: SIGHUP never stops
/// the daemon (stopping without cleanup is what it did by default). Without `SA_RESTART`, so
/// a thread blocked in [`wait_readable`] returns early.
pub fn install_stop_handler() -> io::Result<&'static AtomicBool> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; we then set the
        // handler to an `extern "C" fn(c_int)` that only does atomic stores (async-signal-safe),
        // and pass valid pointers to sigemptyset and sigaction.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(&STOP)
}

/// The signal that set the stop flag (0 if none).
pub fn stop_signal() -> i32 {
    STOP_SIGNAL.load(Ordering::SeqCst)
}

/// Whether a SIGHUP arrived since the last call (the request is taken: a second call
/// without a new SIGHUP says false).
pub fn take_hangup() -> bool {
    HANGUP.swap(false, Ordering::SeqCst)
}

/// Puts the calling thread (and the threads and processes it starts from now on) in the
/// normal time-sharing class, out of any real-time class it inherited: a control-plane thread
/// -- the control socket, the metrics listener, the AF_XDP next-hop resolver, session sync,
/// the NAT event log, the watchdog, DNS64 -- must never take the CPU from the packet
/// workers, which keep what the operator gave the daemon (e.g. `chrt -f 51 xlat run`).
/// Returns whether the class was changed (false: it was normal already, or refused).
pub fn control_plane_priority() -> bool {
    // SAFETY: sched_getscheduler(0) reads the calling thread's policy; no memory is passed.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy != libc::SCHED_FIFO && policy != libc::SCHED_RR {
        return false;
    }
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: `p` is a valid sched_param that outlives the call; pid 0 is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) == 0 }
}

/// Asks for a socket receive buffer of `bytes`: beyond `net.core.rmem_max` with
/// CAP_NET_ADMIN (SO_RCVBUFFORCE), else as far as that limit allows (SO_RCVBUF). Returns
/// the size the kernel reports now (it doubles what is asked, for its bookkeeping).
pub fn grow_receive_buffer(sock: &impl AsFd, bytes: i32) -> io::Result<i32> {
    let fd = sock.as_fd().as_raw_fd();
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `fd` is borrowed open for the call; the value is a live c_int of `len`.
        let r =
            unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, opt, (&raw const bytes).cast(), len) };
        if r == 0 {
            break;
        }
    }
    let mut got: libc::c_int = 0;
    let mut got_len = len;
    // SAFETY: as above; `got` and `got_len` are live and writable for the call.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw mut got).cast(),
            &raw mut got_len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test here that raises a stop signal (the flag is process-wide).
    #[test]
    fn a_stop_signal_makes_the_stop_descriptor_readable() {
        let flag = install_stop_handler().expect("handlers");
        let fd = stop_fd().expect("an eventfd");
        let [before] = wait_readable([fd], Duration::ZERO).expect("poll");
        assert!(!before, "not readable before a stop");
        // SAFETY: raise(3) sends SIGTERM to this thread, whose handler was installed above.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        let [after] = wait_readable([fd], Duration::from_secs(5)).expect("poll");
        assert!(after, "readable after SIGTERM");
        assert!(flag.load(Ordering::SeqCst));
        assert_eq!(stop_signal(), libc::SIGTERM);
    }

    #[test]
    fn a_real_time_thread_goes_back_to_time_sharing() {
        let t = std::thread::spawn(|| {
            let p = libc::sched_param { sched_priority: 1 };
            // SAFETY: a valid sched_param; pid 0 is this test's own thread.
            let rt = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0;
            let changed = control_plane_priority();
            // SAFETY: reads this thread's policy.
            let now = unsafe { libc::sched_getscheduler(0) };
            (rt, changed, now)
        });
        let (rt, changed, now) = t.join().expect("thread");
        // Without the privilege for SCHED_FIFO there is nothing to take back.
        assert_eq!(changed, rt);
        assert_eq!(now, libc::SCHED_OTHER);
        // This thread was never real-time: nothing to change.
        assert!(!control_plane_priority(), "a normal thread stays as it is");
    }

    #[test]
    fn waker_wakes_and_drains() -> io::Result<()> {
        let w = Waker::new()?;
        let [r] = wait_readable([w.as_fd()], Duration::from_millis(0))?;
        assert!(!r);
        w.wake();
        w.wake();
        let [r] = wait_readable([w.as_fd()], Duration::from_millis(1000))?;
        assert!(r);
        w.drain();
        let [r] = wait_readable([w.as_fd()], Duration::from_millis(0))?;
        assert!(!r);
        Ok(())
    }
}
