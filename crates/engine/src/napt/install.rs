//! Sessions installed from another gateway's engine (session sync, `[sync]`): a standby
//! keeps a copy of the active gateway's table -- the same inside, outside and remote
//! endpoints, the same pool address and port -- so that when it takes over, every session's
//! packets find their translation and a returning packet its mapping.
//!
//! What differs from a session a packet makes:
//! - the outside endpoint is given, not chosen: the port is taken from the pool exactly
//!   (with port blocks, the block that holds it is the host's), and the host is paired with
//!   that address (RFC 4787 REQ-2 holds: the active paired it so);
//! - the session does not age while it is a copy: it is *frozen* (never due), and ends when
//!   the active says it ended ([`Napt::remove_synced`]). The active's timers are what count;
//!   a standby that aged its copies by itself would drop sessions the active keeps alive
//!   with packets the standby never sees. [`Napt::thaw`] starts every frozen session's timer
//!   when the standby takes over: the timeout of its state from that moment, as if a packet
//!   had just refreshed it (the active saw one less than a timeout ago, or it would have
//!   ended it);
//! - a TCP session is installed established (RFC 6146 3.5.2.2 / RFC 7857 2.1 states): the
//!   active made it on a SYN, and a session still listed is one the active keeps. Its
//!   FIN/RST transitions run from there after takeover.
//!
//! A copy that contradicts the table (the inside endpoint mapped to another outside
//! endpoint, the port held by another mapping, the host paired with another address) is
//! refused and counted by the caller: the table the standby has stays consistent, and a full
//! resync repairs it.

use crate::counters::{Counters, Event};
use crate::events::EndReason;
use crate::flow::{Endpoint, FlowKey, InsideAddr, Proto};
use crate::tcp::{Dir, TcpState};
use crate::Time;

use super::mapping::{Ends, Owner, NO_MAP};
use super::pool::HostUse;
use super::session::SessState;
use super::Napt;

/// The expiry of a frozen session: never due (2^62 ns is 146 years), and recognisable.
pub(super) const FROZEN: Time = Time(1 << 62);

/// Why a synced session was not installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstallRefused {
    /// `limits.max_sessions` (or the host's limit) is reached.
    Full,
    /// The outside address is not in this gateway's pool: the two configurations differ.
    NotInPool,
    /// The table holds something else for it: the inside endpoint mapped elsewhere, the
    /// outside port another mapping's, or the host paired with another pool address.
    Conflict,
}

impl<A: InsideAddr> Napt<A> {
    /// Installs the active's session `int` <-> `ext` to `remote` (normalised,
    /// [`Proto::remote_port`]) as a frozen copy; true if it was new, false if it was there.
    pub fn install(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        ext: Endpoint,
        remote: Endpoint,
        c: &mut Counters,
    ) -> Result<bool, InstallRefused> {
        let key = FlowKey::Out(proto, int, remote);
        let hash = self.hash(&key);
        if let Some(sid) = self.lookup(&key, hash) {
            return match self.sessions.get(sid) {
                Some(s) if s.ext() == ext => Ok(false),
                _ => Err(InstallRefused::Conflict),
            };
        }
        let &pool_ix = self
            .pool_index
            .get(&ext.addr)
            .ok_or(InstallRefused::NotInPool)?;
        if self.sessions.len >= self.cfg.limits.max_sessions as usize {
            return Err(InstallRefused::Full);
        }
        let h_bib = self.bib_hash(proto, int.addr.words(), int.port, false);
        let found = self.bib_by_inside(proto, int, h_bib);
        if let Some(owner) = found {
            // The inside endpoint's mapping must be this one (RFC 4787 REQ-1).
            if self.bib_by_outside(proto, ext) != Some(owner) {
                return Err(InstallRefused::Conflict);
            }
        } else if self.bib_by_outside(proto, ext).is_some() {
            return Err(InstallRefused::Conflict);
        }
        let host = self.host_at(int.addr, pool_ix, u32::from(found.is_none()))?;
        // A copy is not handed to the fast path: a standby forwards nothing, also not in
        // XDP. `thaw` hands it over at takeover.
        let offload = std::mem::replace(&mut self.offload, false);
        let sid = self.install_session(
            found, host, pool_ix, proto, int, ext, remote, now, hash, h_bib, c,
        );
        self.offload = offload;
        let sid = sid?;
        if let Some(s) = self.sessions.get_mut(sid) {
            s.expires = FROZEN;
            if proto == Proto::Tcp {
                s.state = SessState::Tcp(TcpState::Established);
            }
        }
        Ok(true)
    }

    /// The session (and, for a new mapping, its exact port) of [`Napt::install`].
    #[allow(clippy::too_many_arguments)]
    fn install_session(
        &mut self,
        found: Option<Owner>,
        host: HostUse,
        pool_ix: u32,
        proto: Proto,
        int: Endpoint<A>,
        ext: Endpoint,
        remote: Endpoint,
        now: Time,
        hash: u64,
        h_bib: u64,
        c: &mut Counters,
    ) -> Result<u32, InstallRefused> {
        let sid = match found {
            Some(owner) => {
                let Some((mid, ends)) = self.promote(owner) else {
                    self.unhost(int.addr, false, 0);
                    return Err(InstallRefused::Conflict);
                };
                self.create_session(mid, ends, remote, proto, Dir::Out, now, hash, c)
                    .0
            }
            None => {
                let forwarded = self.forwards.outside_of(proto, int) == Some(ext);
                if !forwarded && !self.take_exact_port(pool_ix, proto, int.addr, ext.port) {
                    self.unhost(int.addr, host.new, 1);
                    return Err(InstallRefused::Conflict);
                }
                let ends = Ends {
                    held: host.held,
                    int,
                    ext,
                };
                let (sid, _) =
                    self.create_session(NO_MAP, ends, remote, proto, Dir::Out, now, hash, c);
                let placed = self.bib.insert(h_bib, Owner::Session(sid).bib_val(false));
                debug_assert!(placed, "index sized for limits.max_sessions");
                let h_ext = self.bib_hash(proto, (u64::from(ext.addr), 0), ext.port, true);
                self.insert_later(true, h_ext, Owner::Session(sid).bib_val(true));
                self.folded += 1;
                c.event(Event::MappingsCreated);
                sid
            }
        };
        Ok(sid)
    }

    /// Removes the copy of the active's session `int` to `remote` when the active ended it
    /// (with the active's reason); false if there was none.
    pub fn remove_synced(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        remote: Endpoint,
        why: EndReason,
    ) -> bool {
        let key = FlowKey::Out(proto, int, remote);
        let hash = self.hash(&key);
        match self.lookup(&key, hash) {
            Some(sid) => {
                self.remove_session(sid, now, why);
                true
            }
            None => false,
        }
    }

    /// Removes every frozen copy (a full resync starts over); returns how many.
    pub fn clear_synced(&mut self, now: Time) -> u64 {
        let sids: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires == FROZEN)
            .map(|(sid, _)| sid)
            .collect();
        for &sid in &sids {
            self.remove_session(sid, now, EndReason::Cleared);
        }
        sids.len() as u64
    }

    /// Takeover: every frozen session's timer starts now, with its state's timeout, and the
    /// sessions the fast path may carry are handed to it. Returns how many were thawed.
    pub fn thaw(&mut self, now: Time) -> u64 {
        let t = self.cfg.timeouts;
        let frozen: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires == FROZEN)
            .map(|(sid, _)| sid)
            .collect();
        for &sid in &frozen {
            let Some(s) = self.sessions.get_mut(sid) else {
                continue;
            };
            let (life, established) = match s.state {
                SessState::Udp => (t.udp, true),
                SessState::Icmp => (t.icmp, false),
                SessState::Tcp(TcpState::Established) => (t.tcp_established, true),
                SessState::Tcp(_) => (t.tcp_transitory, false),
            };
            let e = now.plus_secs(life);
            s.expires = e;
            let (mid, raddr, proto, remote) = (s.map, s.remote_addr, s.proto(), s.remote());
            let int_port = s.int_port;
            self.propagate(mid, raddr, e);
            if established && self.offloadable(proto, remote, int_port) {
                if let Some(s) = self.sessions.get_mut(sid) {
                    s.set_offloaded(true);
                }
                self.offload_event(now, crate::offload::OffloadKind::Install, sid);
            }
        }
        frozen.len() as u64
    }

    /// The host `int_addr` paired with pool address `pool_ix` (made so if new), one more
    /// session and `new_maps` more mappings counted for it.
    fn host_at(
        &mut self,
        int_addr: A,
        pool_ix: u32,
        new_maps: u32,
    ) -> Result<HostUse, InstallRefused> {
        if let Some(num) = self.hosts.number(int_addr) {
            let held = int_addr.as_held().unwrap_or(num);
            let limit = self.cfg.limits.max_sessions_per_host;
            let h = self.hosts.get_mut(num).ok_or(InstallRefused::Conflict)?;
            if h.pool != pool_ix {
                return Err(InstallRefused::Conflict);
            }
            if h.sessions >= limit {
                return Err(InstallRefused::Full);
            }
            h.sessions += 1;
            h.mappings += new_maps;
            return Ok(HostUse {
                pool: pool_ix,
                held,
                new: false,
                num,
            });
        }
        let num = self
            .hosts
            .insert(int_addr, pool_ix, new_maps, 1)
            .ok_or(InstallRefused::Full)?;
        self.paired(pool_ix, 1);
        Ok(HostUse {
            pool: pool_ix,
            held: int_addr.as_held().unwrap_or(num),
            new: true,
            num,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::napt::tests::{napt, REMOTE};

    const INT: Endpoint<u32> = Endpoint {
        addr: 0xc612_0007,
        port: 40000,
    };

    /// The active's table, copied: the same outside endpoint, a packet of the flow finds
    /// it after takeover, and a second flow of the endpoint shares its mapping.
    #[test]
    fn an_installed_session_is_the_actives_and_thaws_at_takeover() {
        let mut active = napt(1000);
        let mut standby = napt(1000);
        let mut c = Counters::default();
        let now = Time::from_secs(10);
        let ext = active
            .outbound(now, Proto::Udp, INT, REMOTE, 0, &mut c)
            .unwrap();
        assert!(standby
            .install(now, Proto::Udp, INT, ext, REMOTE, &mut c)
            .unwrap());
        assert!(!standby
            .install(now, Proto::Udp, INT, ext, REMOTE, &mut c)
            .unwrap());
        // Frozen: an hour of sweeps removes nothing.
        let later = Time::from_secs(3_600);
        assert_eq!(standby.expire(later, 1 << 20, &mut c), 0);
        assert_eq!(standby.thaw(later), 1);
        let got = standby
            .outbound(later, Proto::Udp, INT, REMOTE, 0, &mut c)
            .unwrap();
        assert_eq!(got, ext, "the same outside endpoint after takeover");
        let other = Endpoint {
            addr: REMOTE.addr + 1,
            port: 53,
        };
        let got = standby
            .outbound(later, Proto::Udp, INT, other, 0, &mut c)
            .unwrap();
        assert_eq!(got, ext, "RFC 4787 REQ-1: the mapping is shared");
        // Thawed, it ages again.
        let much_later = Time::from_secs(3_600 + 100_000);
        assert!(standby.expire(much_later, 1 << 20, &mut c) >= 2);
    }

    #[test]
    fn a_copy_that_contradicts_the_table_is_refused() {
        let mut standby = napt(1000);
        let mut c = Counters::default();
        let now = Time::from_secs(1);
        let ext = Endpoint {
            addr: standby.pool_addr(0),
            port: 5000,
        };
        standby
            .install(now, Proto::Udp, INT, ext, REMOTE, &mut c)
            .unwrap();
        // The same inside endpoint mapped elsewhere.
        let other_ext = Endpoint { port: 5001, ..ext };
        let other_remote = Endpoint {
            addr: REMOTE.addr + 1,
            port: 53,
        };
        assert_eq!(
            standby.install(now, Proto::Udp, INT, other_ext, other_remote, &mut c),
            Err(InstallRefused::Conflict)
        );
        // Another inside endpoint on the same outside port.
        let int2 = Endpoint {
            addr: INT.addr,
            port: 40001,
        };
        assert_eq!(
            standby.install(now, Proto::Udp, int2, ext, REMOTE, &mut c),
            Err(InstallRefused::Conflict)
        );
        // An address outside the pool.
        let foreign = Endpoint {
            addr: 0xcb00_7101,
            port: 5000,
        };
        assert_eq!(
            standby.install(now, Proto::Udp, int2, foreign, REMOTE, &mut c),
            Err(InstallRefused::NotInPool)
        );
        // Refusals left nothing behind: one session, and its removal empties the table.
        assert_eq!(standby.sessions.len, 1);
        assert!(standby.remove_synced(now, Proto::Udp, INT, REMOTE, EndReason::Expired));
        assert_eq!(standby.sessions.len, 0);
        assert_eq!(standby.hosts.len(), 0);
        // The port is free again: a new copy of it installs.
        standby
            .install(now, Proto::Udp, int2, ext, REMOTE, &mut c)
            .unwrap();
    }

    /// With port blocks (RFC 7422), a copy's port takes its block for the host; another
    /// host's copy in that block is refused.
    #[test]
    fn with_port_blocks_a_copy_takes_its_block() {
        let mut standby: Napt<u32> = crate::napt::tests::napt_blocks(1000, 512);
        let mut c = Counters::default();
        let now = Time::from_secs(1);
        let ext = Endpoint {
            addr: standby.pool_addr(0),
            port: 2000,
        };
        standby
            .install(now, Proto::Udp, INT, ext, REMOTE, &mut c)
            .unwrap();
        let same_host = Endpoint {
            addr: INT.addr,
            port: 40001,
        };
        let next = Endpoint { port: 2001, ..ext };
        standby
            .install(now, Proto::Udp, same_host, next, REMOTE, &mut c)
            .unwrap();
        let other_host = Endpoint {
            addr: INT.addr + 1,
            port: 40000,
        };
        let in_block = Endpoint { port: 2002, ..ext };
        assert_eq!(
            standby.install(now, Proto::Udp, other_host, in_block, REMOTE, &mut c),
            Err(InstallRefused::Conflict)
        );
        // The other host's port in another block is fine; its refusal left nothing behind.
        let elsewhere = Endpoint { port: 3000, ..ext };
        standby
            .install(now, Proto::Udp, other_host, elsewhere, REMOTE, &mut c)
            .unwrap();
        assert_eq!(standby.hosts.len(), 2);
    }

    #[test]
    fn tcp_copies_are_established_and_clear_synced_removes_only_copies() {
        let mut standby = napt(1000);
        let mut c = Counters::default();
        let now = Time::from_secs(1);
        let ext = Endpoint {
            addr: standby.pool_addr(0),
            port: 6000,
        };
        standby
            .install(now, Proto::Tcp, INT, ext, REMOTE, &mut c)
            .unwrap();
        let local = Endpoint {
            addr: INT.addr,
            port: 40002,
        };
        standby
            .outbound(now, Proto::Udp, local, REMOTE, 0, &mut c)
            .unwrap();
        // A plain ACK finds the copy: only an established session admits one without a SYN.
        standby.thaw(now);
        let key = FlowKey::Out(Proto::Tcp, INT, REMOTE);
        let sid = standby.lookup(&key, standby.hash(&key)).unwrap();
        assert!(matches!(
            standby.sessions.get(sid).unwrap().state,
            SessState::Tcp(TcpState::Established)
        ));
        let mut again = napt(1000);
        again
            .install(now, Proto::Tcp, INT, ext, REMOTE, &mut c)
            .unwrap();
        again
            .outbound(now, Proto::Udp, local, REMOTE, 0, &mut c)
            .unwrap();
        assert_eq!(again.clear_synced(now), 1);
        assert_eq!(again.sessions.len, 1, "the standby's own session stays");
    }
}
