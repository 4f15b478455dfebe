//! What a packet asks of the NAPT: its session found or made, refreshed, and the endpoint
//! to write. The full path calls [`Napt::outbound`] and [`Napt::inbound`] (RFC 4787 REQ-1,
//! REQ-8), the established-flow lane [`Napt::lane`] and [`Napt::lane_or_new`] with the hash
//! and candidate its batch stages computed, and ICMP error translation
//! [`Napt::find_by_inside`] / [`Napt::find_by_outside`], which refresh nothing (RFC 5508
//! REQ-6).

use crate::counters::{Counters, DropReason, Event};
use crate::events::EndReason;
use crate::flow::{Endpoint, FlowKey, InsideAddr, Proto};
use crate::Time;

use super::{Napt, Translation};

impl<A: InsideAddr> Napt<A> {
    /// An outbound packet of flow `int` -> `remote`: finds or creates its session (RFC 4787
    /// REQ-1 endpoint-independent mapping) and returns the outside endpoint to write.
    pub fn outbound(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        remote: Endpoint,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Endpoint, DropReason> {
        let remote = Endpoint {
            addr: remote.addr,
            port: proto.remote_port(remote.port),
        };
        self.live_or_new(now, FlowKey::Out(proto, int, remote), tcp_flags, c)
            .map(|t| t.ext)
    }

    /// An inbound packet from `remote` to the outside endpoint `ext`: finds its session or,
    /// where the filtering policy admits the remote (RFC 4787 5, REQ-8), creates one; returns
    /// the inside endpoint to write.
    pub fn inbound(
        &mut self,
        now: Time,
        proto: Proto,
        ext: Endpoint,
        remote: Endpoint,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Endpoint<A>, DropReason> {
        let remote = Endpoint {
            addr: remote.addr,
            port: proto.remote_port(remote.port),
        };
        self.live_or_new(now, FlowKey::In(proto, ext, remote), tcp_flags, c)
            .map(|t| t.int)
    }

    /// [`Napt::outbound`] and [`Napt::inbound`] for the (normalised) tuple `key`: its live
    /// session refreshed, or a new one made where the full path makes one ([`Napt::renew`]).
    #[inline(always)]
    fn live_or_new(
        &mut self,
        now: Time,
        key: FlowKey<A>,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        let hash = self.hash(&key);
        if let Some(sid) = self.live(&key, hash, now, c) {
            return self
                .touch(sid, now, &key, tcp_flags)
                .ok_or(DropReason::Internal);
        }
        self.renew(now, &key, hash, tcp_flags, None, c)
    }

    /// The established-flow lane's lookup: the session of `key` (whose hash the caller
    /// computed in batch stage 1), refreshed by [`Napt::touch`] exactly as
    /// [`Napt::outbound`] / [`Napt::inbound`] refresh a live session they find. `None`,
    /// with nothing changed, when there is no live session: the full path then finds out
    /// why (a new session, lazy expiry, filtering) and counts it.
    #[inline]
    pub(crate) fn lane(
        &mut self,
        now: Time,
        key: &FlowKey<A>,
        hash: u64,
        cand: u32,
        tcp_flags: u8,
    ) -> Option<Translation<A>> {
        let sid = self.find(key, hash, cand)?;
        // As in `live`: an offloaded session is live until the sweep asks the fast path.
        if !self
            .sessions
            .get(sid)
            .is_some_and(|s| s.expires > now || s.offloaded())
        {
            return None;
        }
        self.touch(sid, now, key, tcp_flags)
    }

    /// What [`Napt::outbound`] / [`Napt::inbound`] do for the packet tuple `key` (whose
    /// remote port is normalised, [`Proto::remote_port`]; `hash` its stage-1 hash), for a
    /// lane whose packet the full path would hand straight to them: one index lookup, then
    /// the live session refreshed as [`Napt::lane`] does, or an expired one removed (lazy
    /// expiry) and a new session made where they would make one -- or the reason they
    /// would drop the packet.
    #[inline]
    pub(crate) fn lane_or_new(
        &mut self,
        now: Time,
        key: &FlowKey<A>,
        hash: u64,
        cand: u32,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        let found = self.find(key, hash, cand);
        if let Some(sid) = found {
            // As in `live`: an offloaded session is live until the sweep asks the fast path.
            if self
                .sessions
                .get(sid)
                .is_some_and(|s| s.expires > now || s.offloaded())
            {
                return self
                    .touch(sid, now, key, tcp_flags)
                    .ok_or(DropReason::Internal);
            }
        }
        self.renew(now, key, hash, tcp_flags, found, c)
    }

    /// [`Napt::lane_or_new`] with no live session: the expired one `stale` removed, then a
    /// new one made. Out of line: established traffic finds its session.
    #[inline(never)]
    fn renew(
        &mut self,
        now: Time,
        key: &FlowKey<A>,
        hash: u64,
        tcp_flags: u8,
        stale: Option<u32>,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        if let Some(sid) = stale {
            self.remove_session(sid, now, EndReason::Expired);
            c.event(Event::SessionsExpired);
        }
        match *key {
            FlowKey::Out(proto, int, remote) => {
                self.create_out(now, proto, int, remote, tcp_flags, hash, c)
            }
            FlowKey::In(proto, ext, remote) => {
                self.create_in(now, proto, ext, remote, tcp_flags, hash, c)
            }
        }
    }

    /// [`Napt::lane`] for the tuple `key` the full parse found, if it is the `planned` one
    /// whose hash is `hash` (else `None`: the full path runs).
    #[inline]
    pub(crate) fn lane_for(
        &mut self,
        now: Time,
        key: FlowKey<A>,
        planned: &FlowKey<A>,
        hash: u64,
        cand: u32,
        tcp_flags: u8,
    ) -> Option<Translation<A>> {
        if key != *planned {
            return None;
        }
        self.lane(now, planned, hash, cand, tcp_flags)
    }

    /// The outside endpoint of the live session `int` <-> `remote`, without creating or
    /// refreshing anything (RFC 5508 REQ-6: ICMP errors do not refresh sessions).
    pub fn find_by_inside(
        &mut self,
        now: Time,
        proto: Proto,
        int: Endpoint<A>,
        remote: Endpoint,
        c: &mut Counters,
    ) -> Option<Endpoint> {
        let remote = Endpoint {
            addr: remote.addr,
            port: proto.remote_port(remote.port),
        };
        let key = FlowKey::Out(proto, int, remote);
        let sid = self.live(&key, self.hash(&key), now, c)?;
        self.sessions.get(sid).map(|s| s.ext())
    }

    /// The inside endpoint of the live session `ext` <-> `remote`; see [`Napt::find_by_inside`].
    pub fn find_by_outside(
        &mut self,
        now: Time,
        proto: Proto,
        ext: Endpoint,
        remote: Endpoint,
        c: &mut Counters,
    ) -> Option<Endpoint<A>> {
        let remote = Endpoint {
            addr: remote.addr,
            port: proto.remote_port(remote.port),
        };
        let key = FlowKey::In(proto, ext, remote);
        let sid = self.live(&key, self.hash(&key), now, c)?;
        self.sessions.get(sid)?.int(&self.hosts)
    }
}
