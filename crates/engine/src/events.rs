//! The engine's state-event stream: what changed in the translation state, as typed values,
//! for the consumers outside the engine -- NAT event logging (RFC 8158 natEvent values,
//! syslog), session sync to a standby, metrics -- without asking the tables again.
//!
//! The stateful translators push events into a bounded queue while they process a batch;
//! the driver takes them with [`crate::Engine::drain_events`] after the batch. Nothing is
//! formatted or sent on the packet path. A full queue drops the event and counts it
//! (`state_events_dropped` in `xlat show stats`), never blocks translation. With no consumer
//! the stream is off and costs one predictable branch where an event would be made.
//!
//! A fast path ([`crate::offload`]) is one consumer: with offload on, the sessions it may
//! carry come out of the same stream as [`EventKind::FastPath`] events -- install a
//! session's recipes, withdraw them, or report when it last saw the session's packets --
//! which the driver turns into recipes with [`crate::Engine::offload_op`]. Those are
//! instructions, not a log: they are queued whether or not other events are, and never
//! dropped (a lost withdrawal would leave a stale rewrite in the fast path); a batch makes
//! at most one per session it touches and an expiry pass a bounded number, and the driver
//! drains after each.
//!
//! A mapping made or ended together with its one session is not an event of its own: the
//! session's event carries it ([`StateEvent::with_mapping`], one event where there were two:
//! most mappings have one session), and a consumer that wants mapping events takes them
//! from [`StateEvent::unfolded`] off the packet path.
//!
//! Each event names its addresses as addresses (an IPv6 inside host by its address, not
//! the host number the tables hold), so a host deleted since is still named.

use std::net::{IpAddr, Ipv4Addr};

use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::Time;

/// Events held between two drains by default (a batch of 64 packets creates at most 64
/// sessions and 64 mappings, and an expiry pass removes a bounded number).
pub const DEFAULT_CAPACITY: usize = 16 * 1024;

pub use crate::flow::Translator;

/// Why a session (or a mapping, or a host pairing) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// Idle past its timeout (RFC 4787 REQ-5, RFC 6146 3.5.2.2 timers), also a TCP session
    /// after its FIN or RST exchange (its transitory timer).
    Expired,
    /// Removed before its time to make room for a new one at `limits.max_sessions`.
    Evicted,
    /// Removed by the operator (`xlat clear sessions`).
    Cleared,
    /// Its pool address left the configuration in a live reload.
    Reload,
    /// The daemon stopped (SIGTERM, SIGINT): its table is gone, so its NAT log says the
    /// session ended, and a lookup after the restart names nobody from before it.
    Stopped,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A session was made (RFC 8158 natEvent 4 NAT44 / 6 NAT64 session create).
    SessionCreated,
    /// A session ended (RFC 8158 natEvent 5 / 7 session delete).
    SessionDeleted(EndReason),
    /// A mapping (BIB entry: inside endpoint to outside endpoint) was made (natEvent 8 / 10).
    MappingCreated,
    /// A mapping ended with its last session; its port is free again (natEvent 9 / 11).
    MappingDeleted,
    /// An inside host was paired with an outside address (RFC 4787 REQ-2 paired pooling; in
    /// pool mode the address is the host's alone, RFC 3022 2.1).
    HostBound,
    /// An inside host's pairing ended with its last session.
    HostUnbound,
    /// No free outside address for a new host (natEvent 3 addresses exhausted).
    AddressesExhausted,
    /// No free port on the host's outside address (natEvent 12 ports exhausted).
    PortsExhausted,
    /// The host reached `limits.max_sessions_per_host` (natEvent 13 quota exceeded).
    QuotaExceeded,
    /// A block of ports on the host's outside address was given to it (`limits.port_block_size`,
    /// RFC 8158 natEvent 16 port block allocation): `outside_port` is the block's first port
    /// and `remote_port` its last (a block event has no remote), `proto` the protocol whose
    /// ports (ICMP identifiers) it holds.
    PortBlockAllocated,
    /// The block's last mapping ended; its ports are free for any host (natEvent 17 port
    /// block de-allocation). Ports as in `PortBlockAllocated`.
    PortBlockReleased,
    /// For the fast path only ([`crate::offload`]): install the session's recipes (a UDP
    /// session made, a TCP session established), withdraw them (the session ended or left
    /// the established state), or query when the fast path last saw its packets (its timer
    /// ran out in the engine). Other consumers skip these.
    FastPath(crate::offload::OffloadKind),
}

/// One change of state, with everything a consumer needs. Fields that an event does not
/// carry are unspecified-address and port 0 (a host event has no ports; an exhaustion event
/// no outside endpoint).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateEvent {
    /// The engine's clock when it happened (the batch's `now`).
    pub at: Time,
    pub kind: EventKind,
    pub translator: Translator,
    /// The engine's number for the session (sessions only), valid until its
    /// `SessionDeleted`: it names the session to [`crate::Engine::offload_seen`].
    pub session: Option<u32>,
    pub proto: Proto,
    /// Inside endpoint (IPv4 for NAT44, IPv6 for NAT64).
    pub inside: IpAddr,
    pub inside_port: u16,
    /// Outside (translated) endpoint: a pool address.
    pub outside: Ipv4Addr,
    pub outside_port: u16,
    /// Remote endpoint (sessions only), as IPv4.
    pub remote: Ipv4Addr,
    pub remote_port: u16,
    /// Session events only: the session's mapping (BIB entry) was made with it
    /// (`SessionCreated`) or ended with it (`SessionDeleted`). Most mappings have one
    /// session, so their two events travel as one; [`StateEvent::unfolded`] gives both.
    pub with_mapping: bool,
}

impl StateEvent {
    /// The mapping event folded into this session event ([`StateEvent::with_mapping`]):
    /// `MappingCreated` / `MappingDeleted` with the session's inside and outside endpoints,
    /// no remote and no session number.
    pub fn mapping_event(&self) -> Option<StateEvent> {
        let kind = match self.kind {
            _ if !self.with_mapping => return None,
            EventKind::SessionCreated => EventKind::MappingCreated,
            EventKind::SessionDeleted(_) => EventKind::MappingDeleted,
            _ => return None,
        };
        Some(StateEvent {
            kind,
            session: None,
            remote: Ipv4Addr::UNSPECIFIED,
            remote_port: 0,
            with_mapping: false,
            ..*self
        })
    }

    /// This event and the mapping event folded into it, in the order they happened (the
    /// session's first), each on its own (`with_mapping` false).
    pub fn unfolded(&self) -> impl Iterator<Item = StateEvent> {
        let alone = StateEvent {
            with_mapping: false,
            ..*self
        };
        std::iter::once(alone).chain(self.mapping_event())
    }
}

/// The bounded queue a translator pushes into.
#[derive(Debug, Default)]
pub struct EventQueue {
    /// Whether anyone drains it; off, nothing is queued.
    on: bool,
    capacity: usize,
    buf: Vec<StateEvent>,
    /// Events in `buf` that are not fast-path instructions: what `capacity` bounds.
    held: usize,
    /// Room beyond `capacity` until the next drain ([`EventQueue::allow_burst`]).
    burst: usize,
    dropped: u64,
}

impl EventQueue {
    /// Starts (`capacity` > 0) or stops queueing events; stopping forgets what was queued
    /// but the fast path's instructions.
    pub fn set(&mut self, capacity: usize) {
        self.on = capacity > 0;
        self.capacity = capacity;
        if self.on {
            self.buf.reserve(capacity.min(DEFAULT_CAPACITY));
        } else {
            self.buf
                .retain(|e| matches!(e.kind, EventKind::FastPath(_)));
            self.held = 0;
        }
    }

    /// Is a consumer listening? Checked before an event is put together.
    #[inline(always)]
    pub fn on(&self) -> bool {
        self.on
    }

    /// Queues `e`, or counts it dropped when the queue is full. Inlined into the
    /// translators' out-of-line event helpers (`napt/events.rs`); the one event of every
    /// new session is made in place with [`EventQueue::push_with`].
    #[inline]
    pub fn push(&mut self, e: StateEvent) {
        self.push_with(|| e);
    }

    /// [`EventQueue::push`] of the event `make` puts together, only once it has room: made
    /// in place in the buffer. Inlined where a session is made: a new session's event costs
    /// the stores of its fields.
    #[inline(always)]
    pub fn push_with(&mut self, make: impl FnOnce() -> StateEvent) {
        if self.held >= self.capacity + self.burst {
            self.dropped = self.dropped.saturating_add(1);
            return;
        }
        self.held += 1;
        if self.buf.len() < self.buf.capacity() {
            // Room reserved by `set`: stores, no call to grow the buffer (so the code this
            // is inlined into keeps no registers aside for one).
            self.buf.push(make());
        } else {
            self.push_growing(make());
        }
    }

    /// [`EventQueue::push`] past the room reserved (fast-path instructions share it).
    #[cold]
    #[inline(never)]
    fn push_growing(&mut self, e: StateEvent) {
        self.buf.push(e);
    }

    /// Queues a fast-path instruction: whether or not other events are on, and never
    /// dropped (bounded by the work between two drains, see the module docs).
    pub fn push_fast_path(&mut self, e: StateEvent) {
        self.buf.push(e);
    }

    /// Appends every queued event to `out`, oldest first.
    pub fn drain_into(&mut self, out: &mut Vec<StateEvent>) {
        self.held = 0;
        self.burst = 0;
        out.append(&mut self.buf);
    }

    /// Room for `n` more events until the next drain: an operator's action that ends many
    /// sessions at once between batches (a reload, `napt/repool.rs`) logs each of them
    /// instead of overflowing the bound made for a batch. Not for the packet path.
    pub fn allow_burst(&mut self, n: usize) {
        if self.on {
            self.burst = self.burst.saturating_add(n);
        }
    }

    /// Events dropped because the queue was full, since the start.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// An event with its endpoints; `remote` `None` for a mapping or host event (then `session`
/// is `None` too). The translator is the inside address's family's: NAT44 inside hosts are
/// IPv4, NAT64's IPv6.
pub fn event<A: InsideAddr>(
    at: Time,
    kind: EventKind,
    proto: Proto,
    int: Endpoint<A>,
    ext: Endpoint,
    remote: Option<(u32, Endpoint)>,
) -> StateEvent {
    let session = remote.map(|(sid, _)| sid);
    let remote = remote.map(|(_, r)| r);
    let r = remote.unwrap_or(Endpoint { addr: 0, port: 0 });
    let inside = int.addr.ip();
    StateEvent {
        at,
        kind,
        translator: A::TRANSLATOR,
        session,
        proto,
        inside,
        inside_port: int.port,
        outside: Ipv4Addr::from(ext.addr),
        outside_port: ext.port,
        remote: Ipv4Addr::from(r.addr),
        remote_port: r.port,
        with_mapping: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(n: u16) -> StateEvent {
        event(
            Time(1),
            EventKind::SessionCreated,
            Proto::Udp,
            Endpoint {
                addr: 0xc612_0014u32,
                port: n,
            },
            Endpoint {
                addr: 0xc613_0064,
                port: 1024,
            },
            Some((
                7,
                Endpoint {
                    addr: 0xc613_0002,
                    port: 53,
                },
            )),
        )
    }

    #[test]
    fn off_queue_takes_nothing_and_a_full_one_counts_drops() {
        let mut q = EventQueue::default();
        assert!(!q.on());
        q.set(2);
        assert!(q.on());
        for n in 0..5 {
            q.push(ev(n));
        }
        assert_eq!((q.len(), q.dropped()), (2, 3));
        let mut out = Vec::new();
        q.drain_into(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].inside_port, 0);
        assert_eq!(out[1].inside_port, 1);
        assert!(q.is_empty());
        assert_eq!(out[0].inside, "198.18.0.20".parse::<IpAddr>().unwrap());
        assert_eq!(out[0].translator, Translator::Nat44);
        assert_eq!(out[0].outside, Ipv4Addr::new(198, 19, 0, 100));
        assert_eq!(out[0].remote, Ipv4Addr::new(198, 19, 0, 2));
        assert_eq!(out[0].session, Some(7));
        // Off, or full: the fast path's instructions are still queued, and kept when the
        // other events stop.
        let mut fp = ev(9);
        fp.kind = EventKind::FastPath(crate::offload::OffloadKind::Remove);
        for n in 0..3 {
            q.push(ev(n));
        }
        q.push_fast_path(fp);
        assert_eq!((q.len(), q.dropped()), (3, 4));
        // The queue's bound is for the other events: two fit beside the instruction.
        q.drain_into(&mut out);
        q.set(2);
        q.push_fast_path(fp);
        for n in 0..3 {
            q.push(ev(n));
        }
        assert_eq!((q.len(), q.dropped()), (3, 5));
        q.set(0);
        assert!(!q.on());
        assert_eq!(q.len(), 1);
        q.drain_into(&mut out);
        assert_eq!(out.last(), Some(&fp));
    }
}
