//! Where the NAPT makes its state events ([`crate::events`]): each helper reads what the
//! event names from the tables before they change, so a removed session's inside host -- an
//! IPv6 address held as a host number that is reused at once -- is still named. Out of line
//! and behind [`EventQueue::on`](crate::events::EventQueue::on): with no consumer an event
//! costs the branch that skips it. The exception is the event every new session makes
//! ([`Napt::created_event`]): inlined where the session is made, from the endpoints in hand
//! (docs/PERFORMANCE-LOG.md step 28).

use crate::events::{event, EventKind};
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::Time;

use super::Napt;

impl<A: InsideAddr> Napt<A> {
    /// Starts (`capacity` > 0) or stops the event stream ([`crate::events`]).
    pub fn set_events(&mut self, capacity: usize) {
        self.events.set(capacity);
    }

    /// Appends the events queued since the last call to `out`; returns how many were
    /// dropped (queue full) since the last call.
    pub fn drain_events(&mut self, out: &mut Vec<crate::events::StateEvent>) -> u64 {
        self.events.drain_into(out);
        let d = self.events.dropped();
        let new = d.saturating_sub(self.events_dropped_seen);
        self.events_dropped_seen = d;
        new
    }

    /// Session `sid`'s event `kind` (created, deleted), carrying its folded mapping's
    /// (`with_mapping`: the mapping is made or ends with the session).
    #[inline(never)]
    pub(super) fn session_event(
        &mut self,
        now: Time,
        kind: EventKind,
        sid: u32,
        with_mapping: bool,
    ) {
        let Some(&s) = self.sessions.get(sid) else {
            return;
        };
        let Some(int) = s.int(&self.hosts) else {
            return;
        };
        let mut e = event(now, kind, s.proto(), int, s.ext(), Some((sid, s.remote())));
        e.with_mapping = with_mapping;
        self.events.push(e);
    }

    /// A new session's event (`SessionCreated`, carrying its folded mapping's when
    /// `with_mapping`), from the endpoints its maker holds: nothing is read back from the
    /// tables (NAT64's inside host is named by the address the packet gave, not looked up
    /// by its number), and the event is put together in its place in the queue. Inlined
    /// into [`Napt::create_session`] behind [`EventQueue::on`](crate::events::EventQueue::on):
    /// the fields are in registers there.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn created_event(
        &mut self,
        now: Time,
        sid: u32,
        proto: Proto,
        int: Endpoint<A>,
        ext: Endpoint,
        remote: Endpoint,
        with_mapping: bool,
    ) {
        self.events.push_with(|| {
            let mut e = event(
                now,
                EventKind::SessionCreated,
                proto,
                int,
                ext,
                Some((sid, remote)),
            );
            e.with_mapping = with_mapping;
            e
        });
    }

    /// An event without a session: a mapping's, a host's (`proto` of the flow that caused
    /// it), or a refusal (`ext` the pool address concerned, or none).
    #[inline(never)]
    pub(super) fn endpoint_event(
        &mut self,
        now: Time,
        kind: EventKind,
        proto: Proto,
        int: Endpoint<A>,
        ext: Endpoint,
    ) {
        self.events.push(event(now, kind, proto, int, ext, None));
    }

    /// A port block's event (allocated, released): host `int`, pool address `ext`, the
    /// block's first and last port ([`EventKind::PortBlockAllocated`] says where they go).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block_event(
        &mut self,
        now: Time,
        kind: EventKind,
        proto: Proto,
        int: A,
        ext: u32,
        first: u16,
        last: u16,
    ) {
        let int = Endpoint { addr: int, port: 0 };
        let ext = Endpoint {
            addr: ext,
            port: first,
        };
        let mut e = event(now, kind, proto, int, ext, None);
        e.remote_port = last;
        self.events.push(e);
    }

    /// The address of the pool address at index `ix` (0.0.0.0 if none).
    pub(super) fn pool_addr(&self, ix: u32) -> u32 {
        self.pool.get(ix as usize).map_or(0, |p| p.addr)
    }
}
