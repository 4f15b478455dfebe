//! A packet worker's control inbox: requests from the control-plane threads (the control
//! socket, `[metrics]`, session sync, the watchdog) to one worker, which takes them between
//! batches without ever waiting for a sender.
//!
//! Not `std::sync::mpsc`: its receiver spins (`sched_yield`) while a sender that reserved a
//! slot has not finished writing it. A worker runs at a real-time priority (the lab's
//! SCHED_FIFO 51) and its senders at normal priority on the same CPU, so a sender preempted
//! by the worker between the two steps made the worker spin until the kernel's real-time
//! throttle stopped it: about 950 ms of a second with no packet read, a reload's round trip
//! of ~950 ms (docs/PERFORMANCE.md, "Reload cost"; perf sched showed the worker running
//! 946 ms without a switch, `sched_yield` in its profile). Here the senders take a mutex and
//! the worker only *tries* it: when a sender holds it, the worker carries on with packets
//! and sleeps as usual, the sender finishes, and its wake (after the unlock) brings the
//! worker back for the request. Every post is followed by a wake, so none is missed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crate::control::ControlMsg;

/// The queue both sides share; `None` once the worker has gone (its [`Inbox`] dropped).
type Queue = Mutex<Option<VecDeque<ControlMsg>>>;

/// The senders' side (one per control-plane thread; cheap to clone).
#[derive(Clone)]
pub struct Postbox(Arc<Queue>);

/// The worker's side.
pub struct Inbox(Arc<Queue>);

/// A new inbox and its senders' side.
pub fn inbox() -> (Postbox, Inbox) {
    let q = Arc::new(Mutex::new(Some(VecDeque::new())));
    (Postbox(q.clone()), Inbox(q))
}

impl Postbox {
    /// Queues `msg` for the worker (the caller then wakes it); gives `msg` back when the
    /// worker has gone.
    pub fn post(&self, msg: ControlMsg) -> Result<(), ControlMsg> {
        let mut q = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match q.as_mut() {
            Some(q) => {
                q.push_back(msg);
                Ok(())
            }
            None => Err(msg),
        }
    }
}

impl Inbox {
    /// The oldest request, if one waits and no sender holds the queue right now (never
    /// waits: a sender holding it wakes the worker again after letting go).
    pub fn take(&self) -> Option<ControlMsg> {
        let mut q = match self.0.try_lock() {
            Ok(q) => q,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        q.as_mut()?.pop_front()
    }

    /// Tests: the oldest request, waiting up to `timeout` for one.
    #[cfg(test)]
    pub(crate) fn wait(&self, timeout: std::time::Duration) -> Option<ControlMsg> {
        let until = std::time::Instant::now() + timeout;
        loop {
            if let Some(m) = self.take() {
                return Some(m);
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl Drop for Inbox {
    /// The worker has gone: later posts fail, and requests still queued are dropped, so
    /// their askers see the reply channel close ("the packet worker has stopped").
    fn drop(&mut self) {
        let left = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Request, Response};
    use std::sync::mpsc;

    fn ask(request: Request) -> (ControlMsg, mpsc::Receiver<Response>) {
        let (reply, rx) = mpsc::channel();
        (ControlMsg { request, reply }, rx)
    }

    fn ping() -> (ControlMsg, mpsc::Receiver<Response>) {
        ask(Request::Ping {})
    }

    #[test]
    fn requests_arrive_in_order() {
        let (post, inbox) = inbox();
        let (a, _ra) = ping();
        let (b, _rb) = ask(Request::Stats {});
        assert!(post.post(a).is_ok());
        assert!(post.clone().post(b).is_ok());
        let first = inbox.take().expect("the first request");
        assert!(matches!(first.request, Request::Ping {}));
        let second = inbox.take().expect("the second");
        assert!(matches!(second.request, Request::Stats {}));
        assert!(inbox.take().is_none());
    }

    /// The worker never waits: while a sender holds the queue, `take` answers `None` at
    /// once and finds the request after the sender lets go.
    #[test]
    fn the_worker_never_waits_for_a_sender() {
        let (post, inbox) = inbox();
        let held = post.0.lock().unwrap();
        assert!(
            inbox.take().is_none(),
            "a held queue is passed over, not waited on"
        );
        drop(held);
        let (m, _r) = ping();
        assert!(post.post(m).is_ok());
        assert!(inbox.take().is_some());
    }

    fn tagged(sender: u16, seq: u16) -> xlat_engine::events::StateEvent {
        use std::net::{IpAddr, Ipv4Addr};
        use xlat_engine::events::{EventKind, StateEvent, Translator};
        StateEvent {
            at: xlat_engine::Time(0),
            kind: EventKind::SessionCreated,
            translator: Translator::Nat44,
            session: None,
            proto: xlat_engine::flow::Proto::Udp,
            inside: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            inside_port: sender,
            outside: Ipv4Addr::new(198, 19, 0, 1),
            outside_port: seq,
            remote: Ipv4Addr::new(198, 19, 0, 2),
            remote_port: 53,
            with_mapping: false,
        }
    }

    /// Three senders and a worker that only tries: every request arrives once, each
    /// sender's in its order, though the worker passes over a held queue many times.
    #[test]
    fn every_post_arrives_once_in_order_under_contention() {
        use std::time::{Duration, Instant};
        const SENDERS: u64 = 3;
        const EACH: u64 = 20_000;
        let (post, inbox) = inbox();
        let senders: Vec<_> = (0..SENDERS)
            .map(|s| {
                let post = post.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        let (reply, _rx) = mpsc::channel();
                        // The sender and its sequence number ride in an event's ports.
                        let ev = vec![tagged(s as u16, i as u16)];
                        let request = Request::SyncApply(std::sync::Arc::new(ev));
                        assert!(post.post(ControlMsg { request, reply }).is_ok());
                    }
                })
            })
            .collect();
        let mut next = [0u64; SENDERS as usize];
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got = 0;
        while got < SENDERS * EACH && Instant::now() < deadline {
            match inbox.take() {
                Some(m) => {
                    let Request::SyncApply(evs) = &m.request else {
                        panic!("an unexpected request")
                    };
                    let e = &evs[0];
                    let s = usize::from(e.inside_port);
                    let i = u64::from(e.outside_port);
                    assert_eq!(i, next[s], "sender {s}'s requests in order");
                    next[s] += 1;
                    got += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        for s in senders {
            s.join().unwrap();
        }
        assert_eq!(got, SENDERS * EACH);
        assert!(inbox.take().is_none());
    }

    /// A worker that has gone refuses posts, and the requests it left are dropped, which
    /// closes their reply channels (the asker's "has stopped").
    #[test]
    fn a_gone_worker_refuses_and_closes_the_replies() {
        let (post, inbox) = inbox();
        let (m, reply) = ping();
        assert!(post.post(m).is_ok());
        drop(inbox);
        assert!(matches!(reply.recv(), Err(mpsc::RecvError),));
        let (m, _r) = ping();
        assert!(post.post(m).is_err());
    }
}
