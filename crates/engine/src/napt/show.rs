//! What `xlat show` reads: the session listing and the table sizes and pool use.

use crate::events::EndReason;
use crate::flow::{InsideAddr, Proto};
use crate::snapshot::{PoolUse, SessionFilter, SessionInfo, SessionState, Stats};
use crate::Time;

use super::session::{SessState, Session};
use super::Napt;

impl<A: InsideAddr> Napt<A> {
    /// Does live session `s` match `f` (values compared, nothing formatted)?
    pub(super) fn takes(&self, s: &Session, f: &SessionFilter, now: Time) -> bool {
        if !(s.expires > now || s.offloaded()) {
            return false;
        }
        if f.proto.is_some_and(|p| p != s.proto()) {
            return false;
        }
        if f.outside.is_some_and(|a| u32::from(a) != s.ext_addr)
            || f.remote.is_some_and(|a| u32::from(a) != s.remote_addr)
        {
            return false;
        }
        if f.port
            .is_some_and(|p| p != s.int_port && p != s.ext_port && p != s.remote_port)
        {
            return false;
        }
        match f.inside {
            None => true,
            Some(a) => self.hosts.addr(s.int_addr).is_some_and(|int| int.ip() == a),
        }
    }

    /// Appends to `out` the live sessions `f` takes, sorted (protocol, inside, remote), at
    /// most `limit`: matched by value, and only the rows kept are built, so a few sessions
    /// out of millions cost a scan, not millions of rows.
    pub fn sessions(&self, now: Time, f: &SessionFilter, limit: usize, out: &mut Vec<SessionInfo>) {
        if f.translator.is_some_and(|t| t != A::TRANSLATOR) {
            return;
        }
        let mut found: Vec<(u8, std::net::IpAddr, u16, u32, u16, u32)> = self
            .sessions
            .iter()
            .filter(|(_, s)| self.takes(s, f, now))
            .filter_map(|(sid, s)| {
                let int = s.int(&self.hosts)?;
                Some((
                    s.proto() as u8,
                    int.addr.ip(),
                    int.port,
                    s.remote_addr,
                    s.remote_port,
                    sid,
                ))
            })
            .collect();
        found.sort_unstable();
        found.truncate(limit);
        out.extend(
            found
                .iter()
                .filter_map(|&(.., sid)| self.sessions.get(sid))
                .filter_map(|s| self.session_info(s, now)),
        );
    }

    /// A page of the live sessions `f` takes, in table order from slot `from`: at most
    /// `rows` rows appended to `out`, at most `visits` slots looked at, so one call costs a
    /// bounded part of a worker's turn however big the table. Returns the slot the next page
    /// starts at, `None` when the table is done.
    pub fn sessions_page(
        &self,
        now: Time,
        f: &SessionFilter,
        from: u32,
        (rows, visits): (usize, usize),
        out: &mut Vec<SessionInfo>,
    ) -> Option<u32> {
        if f.translator.is_some_and(|t| t != A::TRANSLATOR) {
            return None;
        }
        let mut taken = 0;
        let mut next = from;
        for (sid, s) in self.sessions.iter_slots(from, visits) {
            next = sid + 1;
            let Some(s) = s.filter(|s| self.takes(s, f, now)) else {
                continue;
            };
            if let Some(r) = self.session_info(s, now) {
                out.push(r);
                taken += 1;
                if taken >= rows {
                    break;
                }
            }
        }
        (next < self.sessions.slot_count()).then_some(next)
    }

    /// Removes the live sessions `f` takes (`xlat clear sessions`), each with its end
    /// event (reason cleared); returns how many.
    pub fn clear(&mut self, now: Time, f: &SessionFilter) -> u64 {
        if f.translator.is_some_and(|t| t != A::TRANSLATOR) {
            return 0;
        }
        let sids: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| self.takes(s, f, now))
            .map(|(sid, _)| sid)
            .collect();
        for &sid in &sids {
            self.remove_session(sid, now, EndReason::Cleared);
        }
        sids.len() as u64
    }

    /// Ends at most `max` sessions, each with its end event of reason `reason` (the daemon
    /// stopping: [`EndReason::Stopped`]); returns how many. Called until it returns 0, with
    /// the events drained between calls, so no event queue overflows.
    pub fn end_some(&mut self, now: Time, reason: EndReason, max: usize) -> u64 {
        let sids: Vec<u32> = self.sessions.iter().map(|(sid, _)| sid).take(max).collect();
        for &sid in &sids {
            self.remove_session(sid, now, reason);
        }
        sids.len() as u64
    }

    /// Ends every session, each with its end event of reason `reason`, all kept (the
    /// queue's bound lifted until the next drain); returns how many. A reload's (a new
    /// pref64).
    pub fn end_all(&mut self, now: Time, reason: EndReason) -> u64 {
        self.events.allow_burst(self.sessions.len.saturating_mul(4));
        self.end_some(now, reason, usize::MAX)
    }

    /// One row of the listing, as values.
    fn session_info(&self, s: &Session, now: Time) -> Option<SessionInfo> {
        let int = s.int(&self.hosts)?;
        let proto = s.proto();
        Some(SessionInfo {
            translator: A::TRANSLATOR,
            proto: Some(proto),
            inside: int.addr.ip(),
            inside_port: Some(int.port),
            outside: s.ext_addr.into(),
            outside_port: Some(s.ext_port),
            remote: Some(s.remote_addr.into()),
            remote_port: (proto != Proto::Icmp).then_some(s.remote_port),
            remote6: None,
            state: match s.state {
                SessState::Udp => SessionState::Udp,
                SessState::Icmp => SessionState::Icmp,
                SessState::Tcp(t) => SessionState::of_tcp(t),
            },
            expires_in: Some(now.secs_until(s.expires)),
            fast_path: s.offloaded(),
        })
    }

    /// Fills the table sizes and pool use of `st`.
    pub fn fill_stats(&self, st: &mut Stats) {
        let (lo, hi) = self.cfg.ports;
        let (ilo, ihi) = self.icmp_ids;
        st.sessions += self.sessions.len as u64;
        st.mappings += (self.mappings.len + self.folded) as u64;
        st.hosts += self.hosts.len() as u64;
        st.pool_addresses += self.spread.len() as u64;
        st.pool_addresses_used += self.pool.iter().filter(|p| p.hosts > 0).count() as u64;
        st.pool
            .extend([Proto::Tcp, Proto::Udp, Proto::Icmp].iter().map(|&p| {
                PoolUse {
                    proto: p.name().into(),
                    ports_used: self
                        .pool
                        .iter()
                        .filter_map(|a| a.ports.get(p as usize))
                        .map(|m| u64::from(m.used()))
                        .sum(),
                    ports_total: self.spread.len() as u64
                        * match p {
                            Proto::Icmp => u64::from(ihi - ilo) + 1,
                            _ => u64::from(hi - lo) + 1,
                        },
                }
            }));
    }
}
