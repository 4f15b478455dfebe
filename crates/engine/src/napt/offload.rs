//! Sessions handed to a fast path ([`crate::offload`]): the state-event stream's
//! [`EventKind::FastPath`] instructions that install, withdraw or query a session's recipes,
//! and the fast path's answer ([`Napt::offload_seen`]).

use crate::counters::{Counters, Event};
use crate::events::{event, EndReason, EventKind};
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::offload::OffloadKind;
use crate::tcp::TcpState;
use crate::Time;

use super::session::{SessState, Session};
use super::Napt;

impl<A: InsideAddr> Napt<A> {
    /// Lets sessions be handed to a fast path from now on ([`crate::offload`]).
    pub fn set_offload(&mut self, on: bool) {
        self.offload = on;
    }

    /// Can a session's packets be rewritten by a fast path? UDP and TCP (established only;
    /// the caller checks the state), not hairpinned (a remote in the pool needs the second
    /// translation only the engine does, RFC 4787 REQ-9).
    /// With an ALG on, its control connections (`alg_port` at either end) stay in the
    /// engine, which rewrites their payload ([`crate::alg`]).
    pub(super) fn offloadable(&self, proto: Proto, remote: Endpoint, int_port: u16) -> bool {
        self.offload
            && proto != Proto::Icmp
            && !self.is_pool(remote.addr)
            && (self.alg_port == 0 || (remote.port != self.alg_port && int_port != self.alg_port))
    }

    pub(super) fn offload_event(&mut self, now: Time, kind: OffloadKind, sid: u32) {
        if let Some(&s) = self.sessions.get(sid) {
            self.push_offload(now, kind, sid, &s);
        }
    }

    /// Queues a fast-path instruction for session `sid`, which is `s` (never dropped:
    /// [`crate::events`]).
    pub(super) fn push_offload(&mut self, now: Time, kind: OffloadKind, sid: u32, s: &Session) {
        if let Some(int) = s.int(&self.hosts) {
            self.events.push_fast_path(event(
                now,
                EventKind::FastPath(kind),
                s.proto(),
                int,
                s.ext(),
                Some((sid, s.remote())),
            ));
        }
    }

    /// The fast path's answer to [`OffloadKind::Query`]:
    /// when it last saw the session's packets going out and coming in. Refreshes the session
    /// as those packets would have (RFC 4787 REQ-6: outbound refreshes, inbound only with
    /// `inbound_refresh`; RFC 6146 3.5.2.2: an established TCP session by either direction),
    /// then removes it if it is still past its time. Returns true if it was removed.
    pub fn offload_seen(
        &mut self,
        now: Time,
        sid: u32,
        out_seen: Option<Time>,
        in_seen: Option<Time>,
        c: &mut Counters,
    ) -> bool {
        let t = self.cfg.timeouts;
        let inbound_refresh = self.cfg.inbound_refresh;
        let Some(s) = self.sessions.get_mut(sid) else {
            return false;
        };
        if !s.offloaded {
            return false;
        }
        let (life, both) = match s.state {
            SessState::Udp => (t.udp, inbound_refresh),
            SessState::Icmp => (t.icmp, inbound_refresh),
            SessState::Tcp(TcpState::Established) => (t.tcp_established, true),
            SessState::Tcp(_) => (t.tcp_transitory, true),
        };
        let last = match (out_seen, in_seen.filter(|_| both)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let Some(e) = last.map(|l| l.plus_secs(life)).filter(|&e| e > s.expires) {
            s.expires = e;
            let (mid, raddr) = (s.map, s.remote_addr);
            self.propagate(mid, raddr, e);
            c.event(Event::OffloadRefreshed);
        }
        if self.sessions.get(sid).is_some_and(|s| s.expires <= now) {
            self.remove_session(sid, now, EndReason::Expired);
            c.event(Event::SessionsExpired);
            return true;
        }
        false
    }

    /// A TCP session entered (`established`) or left the established state: its recipes go
    /// to the fast path, or come back so FIN/RST handling and the transitory timeout stay
    /// the engine's (RFC 6146 3.5.2.2).
    pub(super) fn tcp_offload(&mut self, now: Time, sid: u32, established: bool) {
        let Some((offloaded, proto, remote, int_port)) = self
            .sessions
            .get(sid)
            .map(|s| (s.offloaded, s.proto(), s.remote(), s.int_port))
        else {
            return;
        };
        let kind = if established && !offloaded && self.offloadable(proto, remote, int_port) {
            OffloadKind::Install
        } else if !established && offloaded {
            OffloadKind::Remove
        } else {
            return;
        };
        if let Some(s) = self.sessions.get_mut(sid) {
            s.offloaded = kind == OffloadKind::Install;
        }
        self.offload_event(now, kind, sid);
    }
}
