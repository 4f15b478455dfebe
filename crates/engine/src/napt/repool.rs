//! Live changes of the pool and the static BIB entries ([`Napt::repool`], called by the
//! reconfigure door, [`crate::reconfigure`]): what a reload does to the NAPT state when the
//! operator adds or removes pool addresses, port forwards (static BIB entries, RFC 6146
//! 1.2.2) or inside prefixes.
//!
//! Sessions whose mapping stays valid are not touched: their pool address, their outside
//! endpoint and their inside address are all still what the new configuration allows. Every
//! other session ends, with its end event (reason `reload`, RFC 8158 logging and session
//! sync see it) and a count (`sessions_removed_by_reload`):
//! - its outside address left the pool -- a mapping is on one address for its life (RFC
//!   4787 REQ-2 pairs the host with it), and that address now belongs to someone else;
//! - its outside endpoint is a forward that was removed or now leads elsewhere, or it holds
//!   the outside endpoint of a new forward (the forward takes that port) -- RFC 4787 REQ-1:
//!   an inside endpoint has one mapping, so a dynamic mapping and a forward cannot share;
//! - its inside endpoint gets a new forward (the same rule, from the other side);
//! - its inside address is no longer one the translator may translate (`keep_inside`).
//!
//! A removed address is *retired*: it keeps its slot (hosts name their address by slot),
//! leaves the index and the set of addresses new hosts are paired with; added again later,
//! it takes the same slot back, with the port-block holds it had (RFC 7422 2).

use hashbrown::HashSet;

use crate::config::{PortForward, Prefix4, PrefixSet4};
use crate::events::EndReason;
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::Time;

use super::pool::PoolAddr;
use super::Napt;

impl<A: InsideAddr> Napt<A> {
    /// Takes the new pool `pool`, static BIB entries `forwards` (checked by the
    /// configuration: outside addresses in `pool`, no endpoint twice) and the inside test
    /// `keep_inside`, ending the sessions they no longer allow (module docs). Returns how
    /// many sessions ended. Call between batches.
    pub fn repool(
        &mut self,
        now: Time,
        pool: &[Prefix4],
        forwards: &[PortForward<A>],
        keep_inside: impl Fn(A) -> bool,
    ) -> u64 {
        let new_set = PrefixSet4::new(pool);
        let gone: HashSet<u32> = self
            .pool
            .iter()
            .filter(|p| !p.retired && !new_set.contains(p.addr))
            .map(|p| p.addr)
            .collect();
        // Forwards that go (or lead elsewhere) and forwards that come (or changed).
        let (dropped, added) = self.forwards.diff(forwards);
        let ext_hit: HashSet<(Proto, Endpoint)> = dropped
            .iter()
            .chain(added.iter())
            .map(|&(p, _, ext)| (p, ext))
            .collect();
        let int_hit: HashSet<(Proto, Endpoint<A>)> =
            added.iter().map(|&(p, int, _)| (p, int)).collect();

        let ending: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                let Some(int) = s.int(&self.hosts) else {
                    return false;
                };
                let p = s.proto();
                gone.contains(&s.ext_addr)
                    || ext_hit.contains(&(p, s.ext()))
                    || int_hit.contains(&(p, int))
                    || !keep_inside(int.addr)
            })
            .map(|(sid, _)| sid)
            .collect();
        // Each ending session's events (its end; its mapping's, host's and port block's
        // when it was their last) are kept, not lost to the per-batch bound.
        self.events.allow_burst(ending.len().saturating_mul(4));
        for &sid in &ending {
            self.remove_session(sid, now, EndReason::Reload);
        }
        // An ALG's announced data connections on what goes: their ports back now.
        let mut stale = false;
        for e in self.expects.iter_mut() {
            if gone.contains(&e.ext.addr) || ext_hit.contains(&(Proto::Tcp, e.ext)) {
                e.until = Time(0);
                stale = true;
            }
        }
        if stale {
            self.expire_expects(now);
        }

        // The static BIB: the ports of forwards that go return to their pool address, those
        // of new ones leave it (free now: whatever held them has ended).
        for (proto, int, ext) in dropped {
            self.forwards.remove(proto, int, ext);
            self.free_static_port(ext.addr, proto, ext.port);
        }

        // The pool: retire what goes, add (or bring back) what comes.
        for p in self.pool.iter_mut().filter(|p| gone.contains(&p.addr)) {
            p.retired = true;
            self.pool_index.remove(&p.addr);
        }
        for prefix in pool {
            for i in 0..prefix.size() {
                let addr = prefix.nth(i);
                if self.pool_index.contains_key(&addr) {
                    continue;
                }
                let ix = match self.pool.iter().position(|p| p.addr == addr) {
                    Some(ix) => ix,
                    None => {
                        self.pool.push(PoolAddr::new(addr));
                        self.pool.len() - 1
                    }
                };
                if let Some(p) = self.pool.get_mut(ix) {
                    p.retired = false;
                }
                self.pool_index
                    .insert(addr, u32::try_from(ix).unwrap_or(u32::MAX));
            }
        }
        self.spread = super::spread::Spread::new(&self.pool);
        self.pool_prefixes = new_set;

        for &(proto, _, ext) in &added {
            if let Some(pm) = self.port_map(ext.addr, proto) {
                pm.take_exact(ext.port);
            }
        }
        self.forwards.add(&added);
        ending.len() as u64
    }

    /// The port map of pool address `addr` (not retired) for `proto`.
    pub(super) fn port_map(
        &mut self,
        addr: u32,
        proto: Proto,
    ) -> Option<&mut crate::ports::PortMap> {
        let ix = *self.pool_index.get(&addr)?;
        self.pool
            .get_mut(ix as usize)?
            .ports
            .get_mut(proto as usize)
    }
}
