//! Sessions handed to a fast path ([`crate::offload`]): the state-event stream's
//! [`EventKind::FastPath`] instructions that install, withdraw or query a session's recipes,
//! and the fast path's answer ([`Napt::offload_seen`]).

use crate::counters::{Counters, Event};
use crate::events::{event, EndReason, EventKind};
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::offload::OffloadKind;
use crate::snapshot::SessionFilter;
use crate::tcp::TcpState;
use crate::Time;

use super::session::{SessState, Session, MAX_OFFLOAD_AFTER};
use super::Napt;

impl<A: InsideAddr> Napt<A> {
    /// Lets sessions be handed to a fast path from now on ([`crate::offload`]).
    pub fn set_offload(&mut self, on: bool) {
        self.offload = on;
    }

    /// How many packets a UDP session carries through the engine before its recipes go to
    /// the fast path (1: at its first packet; clamped to 1..=[`MAX_OFFLOAD_AFTER`]); a reply
    /// -- a packet against the direction that opened it -- promotes it at once. Like a
    /// flow-offload table that takes only flows conntrack has seen both ways, this keeps
    /// one-packet flows (DNS queries, scans, a flood of new flows) from costing a recipe
    /// install and withdrawal each. TCP waits for the established state regardless.
    pub fn set_offload_after(&mut self, packets: u8) {
        self.offload_after = packets.clamp(1, MAX_OFFLOAD_AFTER);
    }

    /// A UDP session proved itself ([`Napt::set_offload_after`]): its recipes go to the
    /// fast path, unless it cannot go there or `xlat trace` holds it back.
    #[inline(never)]
    pub(super) fn udp_offload(&mut self, now: Time, sid: u32) {
        let Some((proto, remote, int_port)) = self
            .sessions
            .get(sid)
            .map(|s| (s.proto(), s.remote(), s.int_port))
        else {
            return;
        };
        if !self.offloadable(proto, remote, int_port) || self.held(sid, now) {
            return;
        }
        if let Some(s) = self.sessions.get_mut(sid) {
            s.set_offloaded(true);
        }
        self.offload_event(now, OffloadKind::Install, sid);
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
        if !s.offloaded() {
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

    /// `xlat trace`: withdraws the recipes of the offloaded sessions `f` takes and keeps the
    /// sessions it takes off the fast path from now on, so their packets reach the engine
    /// and its trace; `None` ends that and hands the held sessions that qualify (UDP,
    /// established TCP) back. A withdrawn session is refreshed as if its packets were seen
    /// now: the fast path carried them uncounted, and timeouts are minimums (RFC 4787
    /// REQ-5). Returns how many sessions were withdrawn or handed back.
    pub fn hold_offload(&mut self, now: Time, f: Option<SessionFilter>) -> u64 {
        let (f, hold) = match f {
            Some(f) => (f, true),
            None => match self.hold.take() {
                Some(f) => (*f, false),
                None => return 0,
            },
        };
        let sids: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.offloaded() == hold && self.takes(s, &f, now))
            .filter(|(_, s)| hold || self.may_offload(s))
            .map(|(sid, _)| sid)
            .collect();
        let t = self.cfg.timeouts;
        for &sid in &sids {
            let Some(s) = self.sessions.get_mut(sid) else {
                continue;
            };
            s.set_offloaded(!hold);
            if hold {
                let life = match s.state {
                    SessState::Udp => t.udp,
                    SessState::Icmp => t.icmp,
                    SessState::Tcp(TcpState::Established) => t.tcp_established,
                    SessState::Tcp(_) => t.tcp_transitory,
                };
                let e = now.plus_secs(life);
                if e > s.expires {
                    s.expires = e;
                    let (mid, raddr) = (s.map, s.remote_addr);
                    self.propagate(mid, raddr, e);
                }
            }
            let kind = if hold {
                OffloadKind::Remove
            } else {
                OffloadKind::Install
            };
            self.offload_event(now, kind, sid);
        }
        if hold {
            self.hold = Some(Box::new(f));
        }
        sids.len() as u64
    }

    /// Could session `s` be on the fast path now (UDP, or TCP established, offloadable)?
    fn may_offload(&self, s: &Session) -> bool {
        matches!(
            s.state,
            SessState::Udp | SessState::Tcp(TcpState::Established)
        ) && self.offloadable(s.proto(), s.remote(), s.int_port)
    }

    /// Is session `sid` held off the fast path ([`Napt::hold_offload`])?
    pub(super) fn held(&self, sid: u32, now: Time) -> bool {
        self.hold.as_ref().is_some_and(|f| {
            self.sessions
                .get(sid)
                .is_some_and(|s| self.takes(s, f, now))
        })
    }

    /// A TCP session entered (`established`) or left the established state: its recipes go
    /// to the fast path, or come back so FIN/RST handling and the transitory timeout stay
    /// the engine's (RFC 6146 3.5.2.2).
    pub(super) fn tcp_offload(&mut self, now: Time, sid: u32, established: bool) {
        let Some((offloaded, proto, remote, int_port)) = self
            .sessions
            .get(sid)
            .map(|s| (s.offloaded(), s.proto(), s.remote(), s.int_port))
        else {
            return;
        };
        let kind = if established
            && !offloaded
            && self.offloadable(proto, remote, int_port)
            && !self.held(sid, now)
        {
            OffloadKind::Install
        } else if !established && offloaded {
            OffloadKind::Remove
        } else {
            return;
        };
        if let Some(s) = self.sessions.get_mut(sid) {
            s.set_offloaded(kind == OffloadKind::Install);
        }
        self.offload_event(now, kind, sid);
    }
}
