//! The address-dependent filter (RFC 4787 5, REQ-8): which remote addresses a mapping has
//! sessions with, so an inbound packet from a new remote endpoint is admitted or filtered as
//! the policy says ([`Napt::create_in`]). A mapping holds the entry of one remote address
//! ([`RemoteRef`]); others spill over into [`Napt::remotes`] ([`SpilledRemote`]).

use crate::config::Filtering;
use crate::counters::{Counters, DropReason};
use crate::events::EventKind;
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::records::{Record, Records};
use crate::tcp::{self as tcpsm, Dir};
use crate::Time;

use super::mapping::Owner;
use super::session::Stamp;
use super::{Napt, Translation};

/// Remote addresses a mapping has sessions with: the address-dependent filter (RFC 4787 5).
#[derive(Clone, Copy)]
pub(super) struct RemoteRef {
    pub(super) addr: u32,
    pub(super) sessions: u32,
    pub(super) expires: Stamp,
}

/// A filter entry of a mapping for a remote address other than the one the mapping holds
/// ([`Napt::remotes`]): live while it has sessions.
#[derive(Clone, Copy)]
pub(super) struct SpilledRemote {
    pub(super) map: u32,
    pub(super) r: RemoteRef,
}

impl Record for SpilledRemote {
    type Key = (u32, u32);
    #[inline(always)]
    fn key(&self) -> (u32, u32) {
        (self.map, self.r.addr)
    }
    #[inline(always)]
    fn live(&self) -> bool {
        self.r.sessions > 0
    }
    /// Its expiry is the link.
    fn release(&mut self, next: u32) {
        self.r.sessions = 0;
        self.r.expires = Stamp(next);
    }
    fn next_free(&self) -> u32 {
        self.r.expires.0
    }
    /// The fourth word marks a (mapping, remote address) key.
    #[inline]
    fn words((map, addr): (u32, u32)) -> [u64; 4] {
        [u64::from(map), u64::from(addr), 0, 5 << 40]
    }
}

impl<A: InsideAddr> Napt<A> {
    /// What [`Napt::inbound`] does for a flow with no live session: makes one where the
    /// mapping of `ext` is live and the filtering policy admits `remote` (RFC 4787 5,
    /// REQ-8), or says why not. `remote` is normalised ([`Proto::remote_port`]); `hash` is
    /// the hash of the inbound tuple.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_in(
        &mut self,
        now: Time,
        proto: Proto,
        ext: Endpoint,
        remote: Endpoint,
        tcp_flags: u8,
        hash: u64,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        let Some(owner) = self.bib_by_outside(proto, ext) else {
            // A static BIB entry admits what reaches it even before its first mapping.
            return match self.forwards.inside_of(proto, ext) {
                Some(int) => self.create_forwarded(now, proto, int, ext, remote, tcp_flags, c),
                // An ALG's announced data connection (RFC 959 PORT / 227, `expect.rs`).
                None if !self.expects.is_empty() => {
                    self.create_expected(now, proto, ext, remote, tcp_flags, c)
                }
                None => Err(DropReason::NoMapping),
            };
        };
        // The mapping's expiry, inside address and filter entry for `remote.addr`; its
        // sessions may have expired (and will take it with them).
        let (expires, held, filter) = match owner {
            Owner::Mapping(mid) => {
                let m = self.mappings.get(mid).ok_or(DropReason::Internal)?;
                let r = self.remote_ref(mid, remote.addr).map(|r| r.expires);
                (m.expires, m.int_addr, r)
            }
            Owner::Session(sid) => {
                let s = self.sessions.get(sid).ok_or(DropReason::Internal)?;
                let e = Stamp::of(s.expires);
                (e, s.int_addr, (s.remote_addr == remote.addr).then_some(e))
            }
        };
        if expires.passed(now) {
            return Err(DropReason::NoMapping);
        }
        let int_addr = self.hosts.addr(held).ok_or(DropReason::Internal)?;
        // A static BIB entry is open to every remote (the operator opened it).
        let admitted = match self.cfg.filtering {
            _ if self.forwards.holds(proto, ext) => true,
            Filtering::EndpointIndependent => true,
            Filtering::AddressDependent => filter.is_some_and(|e| !e.passed(now)),
            Filtering::AddressAndPortDependent => false,
        };
        if !admitted {
            return Err(DropReason::Filtered);
        }
        if proto == Proto::Tcp && tcp_flags & tcpsm::SYN == 0 {
            return Err(DropReason::TcpNoSession);
        }
        if self.sessions.len >= self.cfg.limits.max_sessions as usize && !self.reclaim(now, c) {
            return Err(DropReason::SessionLimit);
        }
        // The host's session limit checked and its count taken in one lookup.
        let limit = self.cfg.limits.max_sessions_per_host;
        let num = self.hosts.number_of_held(held);
        if let Some(h) = num.and_then(|num| self.hosts.get_mut(num)) {
            if h.sessions >= limit {
                if self.events.on() {
                    // RFC 8158 natEvent quota exceeded.
                    let int = Endpoint {
                        addr: int_addr,
                        port: 0,
                    };
                    self.endpoint_event(now, EventKind::QuotaExceeded, proto, int, ext);
                }
                return Err(DropReason::HostSessionLimit);
            }
            h.sessions += 1;
        }
        match self.promote(owner) {
            Some((mid, ends)) => Ok(self
                .create_session(mid, ends, remote, proto, Dir::In, now, hash, c)
                .1),
            None => {
                self.unhost(int_addr, false, 0);
                Err(DropReason::Internal)
            }
        }
    }

    /// The filter entry of mapping `mid` for a remote address, if it has sessions with it.
    fn remote_ref(&self, mid: u32, raddr: u32) -> Option<&RemoteRef> {
        let m = self.mappings.get(mid)?;
        if m.remote.sessions > 0 && m.remote.addr == raddr {
            return Some(&m.remote);
        }
        self.spilled_ref(mid, raddr)
    }

    /// [`Napt::remote_ref`] in [`Napt::remotes`]. Out of line: rare.
    #[inline(never)]
    fn spilled_ref(&self, mid: u32, raddr: u32) -> Option<&RemoteRef> {
        let num = self.remotes.number((mid, raddr))?;
        self.remotes.get(num).map(|s| &s.r)
    }

    /// Counts a new session on mapping `mid` with remote address `raddr` in the mapping's
    /// filter entry, or one in [`Napt::remotes`] (RFC 4787 REQ-8). Out of line: a folded
    /// mapping (most) has none, and inlined it weighs on the established path's code.
    #[inline(never)]
    pub(super) fn count_session(&mut self, mid: u32, raddr: u32, stamp: Stamp) {
        let remotes = &mut self.remotes;
        if let Some(m) = self.mappings.get_mut(mid) {
            // The mapping's own filter entry serves this remote address if it already does,
            // or if it is free and the address has no entry elsewhere; other addresses spill
            // over.
            let r = &mut m.remote;
            let r = if r.sessions > 0 && r.addr == raddr {
                Some(r)
            } else if let Some(num) = remotes.number((mid, raddr)) {
                remotes.get_mut(num).map(|s| &mut s.r)
            } else if r.sessions == 0 {
                *r = RemoteRef {
                    addr: raddr,
                    sessions: 0,
                    expires: stamp,
                };
                Some(r)
            } else {
                // A new entry, born with this session; not made only past `max_sessions`
                // live entries, which as many sessions would take first.
                let made = remotes.insert(SpilledRemote {
                    map: mid,
                    r: RemoteRef {
                        addr: raddr,
                        sessions: 1,
                        expires: stamp,
                    },
                });
                debug_assert!(made.is_some(), "an entry per session at most");
                None
            };
            if let Some(r) = r {
                r.sessions += 1;
                r.expires = r.expires.max(stamp);
            }
            m.sessions += 1;
            m.expires = m.expires.max(stamp);
        }
    }

    /// A session of mapping `mid` with remote address `raddr` has gone: one fewer on its
    /// entry in `remotes`, which goes with the last. Out of line: rare.
    #[inline(never)]
    pub(super) fn uncount_spilled(remotes: &mut Records<SpilledRemote>, mid: u32, raddr: u32) {
        let Some(num) = remotes.number((mid, raddr)) else {
            return;
        };
        if let Some(r) = remotes.get_mut(num).map(|x| &mut x.r) {
            if r.sessions > 1 {
                r.sessions -= 1;
            } else {
                remotes.remove(num);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hashbrown::HashMap;

    use crate::config::{Limits, Nat44Mode, Timeouts};
    use crate::napt::NaptConfig;

    proptest::proptest! {
        /// RFC 4787 REQ-8 address-dependent filtering while mappings talk to several remote
        /// addresses (all but one per mapping in [`Napt::remotes`]; with 80 addresses, through
        /// its growths): an inbound packet from a new port of remote address R is admitted
        /// exactly when the mapping has a session with R that has not timed out, and nothing
        /// is left once all have gone.
        #[test]
        fn address_dependent_filter_admits_exactly_the_live_remote_addresses(
            addrs in proptest::prop_oneof![proptest::strategy::Just(5u32), proptest::strategy::Just(80)],
            ops in proptest::collection::vec((0u8..3, 0u16..3, 0u32..80, 0u8..4), 1..300)
        ) {
            use proptest::prelude::*;
            let mut n: Napt<u32> = Napt::new(
                NaptConfig {
                    mode: Nat44Mode::Napt,
                    filtering: Filtering::AddressDependent,
                    ports: (1024, 65535),
                    timeouts: Timeouts::default(),
                    limits: Limits::default(),
                    inbound_refresh: true,
                    det: None,
                },
                &["198.19.0.0/31".parse().unwrap()],
                1,
            );
            let mut c = Counters::default();
            let udp = Timeouts::default().udp;
            let int = |p: u16| Endpoint { addr: 0xc612_0001, port: 1000 + p };
            let remote = |r: u32, port: u16| Endpoint { addr: 0xcb00_7100 + r, port };
            // (inside port, remote address, remote port) -> when its session times out.
            let mut model: HashMap<(u16, u32, u16), u64> = HashMap::new();
            // Inside port -> the outside endpoint its mapping was last given.
            let mut ext: HashMap<u16, Endpoint> = HashMap::new();
            let mut now = 1u64;
            for (op, p, r, dt) in ops {
                let r = r % addrs;
                now += [0, 10, 120, 400][usize::from(dt)];
                let t = Time::from_secs(now);
                match op {
                    0 => {
                        let e = n.outbound(t, Proto::Udp, int(p), remote(r, 53), 0, &mut c).unwrap();
                        ext.insert(p, e);
                        model.insert((p, r, 53), now + udp);
                    }
                    1 => {
                        let Some(&e) = ext.get(&p) else { continue };
                        let live = |m: &HashMap<(u16, u32, u16), u64>| {
                            m.iter().filter(|((q, a, _), _)| *q == p && *a == r).map(|(_, &x)| x).max()
                        };
                        let until = live(&model);
                        // Skip the instants a timeout falls on (the mapping's coarse stamp).
                        if until.is_some_and(|u| u.abs_diff(now) < 2) {
                            continue;
                        }
                        // A port of R no session of this mapping uses.
                        let got = n.inbound(t, Proto::Udp, e, remote(r, 9000 + p), 0, &mut c);
                        let admitted = until.is_some_and(|u| now < u);
                        prop_assert_eq!(got.is_ok(), admitted, "inside port {}, remote {} at {}", p, r, now);
                        if admitted {
                            prop_assert_eq!(got.unwrap(), int(p));
                            model.insert((p, r, 9000 + p), now + udp);
                        }
                    }
                    _ => {
                        n.expire(t, 1024, &mut c);
                    }
                }
                // Timed out sessions leave the model (the engine removes them lazily), not
                // before the instants skipped above have passed.
                model.retain(|_, &mut u| u + 2 > now);
            }
            let end = Time::from_secs(now + 100_000);
            while n.expire(end, 1024, &mut c) > 0 {}
            prop_assert_eq!((n.sessions.len, n.mappings.len, n.remotes.len()), (0, 0, 0));
        }
    }
}
