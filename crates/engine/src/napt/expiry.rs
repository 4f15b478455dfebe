//! Expiry: a sweep over the session slab with a budget of work units ([`Napt::expire`]),
//! removing due sessions a batch at a time with their cache misses overlapped, and the
//! pass a new session runs when the table is full ([`Napt::reclaim`]). Lazy expiry (a lookup
//! that finds an expired session) is in `lookup.rs`.

use crate::counters::{Counters, Event};
use crate::events::EndReason;
use crate::flow::InsideAddr;
use crate::mem::Store;
use crate::Time;

use super::mapping::NO_MAP;
use super::Napt;

/// Work units of removing a session in an expiry pass ([`Napt::expire`]), against 1 for a
/// slot looked at: a removal touches about six random cache lines (four index slots, the
/// mapping, the port map) where looking at a slot reads 32 bytes in sequence -- ~300 ns
/// against ~2 ns at 1M sessions (`--bench fill`'s drain). A pass of 1,024 units removes at
/// most 16 sessions.
pub(super) const REMOVE_COST: usize = 64;

/// A removal's share of an expiry budget, in the units [`Napt::expire`] counts: the
/// removal and the slot looked at to find it.
pub const REMOVE_UNITS: usize = REMOVE_COST + 1;

/// Due sessions an expiry pass removes together, their cache misses overlapped.
const REMOVE_BATCH: usize = 16;

/// The expiry pass a new session runs when the table is full ([`Napt::reclaim`]): up to 64
/// sessions removed, or 4,096 slots looked at.
const RECLAIM_BUDGET: usize = 64 * REMOVE_UNITS;

/// After a reclaiming pass that found nothing due, none for this long (10 ms).
const RECLAIM_BACKOFF_NS: u64 = 10_000_000;

/// The shortest a sweep cycle over the whole slab lasts while it finds nothing due (1 s):
/// one that ends sooner stops the sweep after each batch ([`Napt::wants_expiry_step`])
/// until this long after it began, so a young or small table is not read over and over --
/// at 200,000 new flows a second the per-new-session credit looked at 13 million slots a
/// second, 3.9 % of the core (PERFORMANCE-LOG step 38), and 1,000 sessions at 100,000
/// packets a second were read whole after every batch (step 42). A session past its time
/// then waits at most about this long more for the sweep (every timeout is seconds or
/// longer; a packet that meets it removes it at once), the idle sweep
/// (`Engine::expire`) is not held, and a full table still makes room at once
/// ([`Napt::reclaim`]).
const QUIET_CYCLE_NS: u64 = 1_000_000_000;

impl<A: InsideAddr> Napt<A> {
    /// Whether the expiry sweep has anything to look at: sessions (their mappings and hosts
    /// go with them) or FTP expectations.
    pub fn needs_sweep(&self) -> bool {
        self.sessions.len > 0 || !self.expects.is_empty()
    }

    /// Whether the sweep after a batch (`Engine::expire_step`) should look at this
    /// translator now: not while its last cycle over the whole slab found nothing due and
    /// ended less than [`QUIET_CYCLE_NS`] after it began.
    pub fn wants_expiry_step(&self, now: Time) -> bool {
        now >= self.step_after
    }

    /// The sweep came round to the slab's start: a cycle that found nothing due in under
    /// [`QUIET_CYCLE_NS`] holds the step's sweep back until that long after it began.
    fn sweep_wrapped(&mut self, now: Time) {
        if !self.cycle_found_due {
            let quiet_until = Time(self.cycle_started.0.saturating_add(QUIET_CYCLE_NS));
            if now < quiet_until {
                self.step_after = quiet_until;
            }
        }
        self.cycle_started = now;
        self.cycle_found_due = false;
    }

    /// Removes expired sessions, from where the last call stopped, for at most `budget` units
    /// of work: a slot looked at costs 1, a removal [`REMOVE_COST`] -- so a pass's time is
    /// bounded whether nothing or everything is due (a pass that removed every due session it
    /// looked at would hold a mass expiry's batch up for hundreds of batches' time). Due
    /// sessions are removed [`REMOVE_BATCH`] at a time with their index slots and mappings
    /// prefetched. Returns how many were removed.
    pub fn expire(&mut self, now: Time, budget: usize, c: &mut Counters) -> usize {
        let n = self.sessions.slots.count();
        let mut removed = 0;
        let mut work = 0;
        let mut due = [0u32; REMOVE_BATCH];
        let mut k = 0;
        for _ in 0..n {
            if work >= budget {
                break;
            }
            work += 1;
            if self.sweep_cursor >= n {
                self.sweep_cursor = 0;
                self.sweep_wrapped(now);
            }
            #[expect(
                clippy::cast_possible_truncation,
                reason = "the cursor is below the slab's length, whose ids are u32"
            )]
            let sid = self.sweep_cursor as u32;
            self.sweep_cursor += 1;
            match self.sessions.get(sid) {
                Some(s) if s.expires <= now && s.offloaded() => {
                    self.cycle_found_due = true;
                    self.offload_event(now, crate::offload::OffloadKind::Query, sid);
                }
                Some(s) if s.expires <= now => {
                    self.cycle_found_due = true;
                    work += REMOVE_COST;
                    if let Some(d) = due.get_mut(k) {
                        *d = sid;
                        k += 1;
                    }
                    if k == REMOVE_BATCH {
                        removed += self.remove_due(&due, now, c);
                        k = 0;
                    }
                }
                _ => {}
            }
        }
        removed + self.remove_due(due.get(..k).unwrap_or(&[]), now, c)
    }

    /// Makes room in a full table: sessions past their time that the sweep has not reached
    /// yet would otherwise keep new flows out (expiry passes are small, [`REMOVE_COST`]), so
    /// the packet that finds the table full runs one pass of [`RECLAIM_BUDGET`] -- at most
    /// once per [`RECLAIM_BACKOFF_NS`] while passes find nothing, so a flood against a table
    /// of live sessions costs one pass per interval, not one per packet. True if there is room
    /// now.
    #[cold]
    pub(super) fn reclaim(&mut self, now: Time, c: &mut Counters) -> bool {
        if now < self.reclaim_after {
            return false;
        }
        if self.expire(now, RECLAIM_BUDGET, c) == 0 {
            self.reclaim_after = Time(now.0.saturating_add(RECLAIM_BACKOFF_NS));
        }
        self.sessions.len < self.cfg.limits.max_sessions as usize
    }

    /// Removes the due sessions `sids` (all distinct, none offloaded): first starts fetching
    /// their session index slots and mappings, then the BIB slots of mappings that go with
    /// them, then removes them -- their cache misses overlap instead of queueing.
    fn remove_due(&mut self, sids: &[u32], now: Time, c: &mut Counters) -> usize {
        for &sid in sids {
            let Some(s) = self.sessions.get(sid) else {
                continue;
            };
            for side in [false, true] {
                if let Some(key) = s.key(side, &self.hosts) {
                    self.flows.prefetch(side, self.hash(&key));
                }
                if s.map == NO_MAP {
                    if let Some(h) = s.bib_hash(&self.hasher, side, &self.hosts) {
                        self.bib.prefetch(side, h);
                    }
                }
            }
            if s.map != NO_MAP {
                self.mappings.prefetch(s.map);
            }
        }
        for &sid in sids {
            let Some(s) = self.sessions.get(sid) else {
                continue;
            };
            if let Some(m) = self.mappings.get(s.map).filter(|m| m.sessions <= 1) {
                for side in [false, true] {
                    if let Some(h) = m.bib_hash(&self.hasher, side, &self.hosts) {
                        self.bib.prefetch(side, h);
                    }
                }
            }
        }
        for &sid in sids {
            self.remove_session(sid, now, EndReason::Expired);
            c.event(Event::SessionsExpired);
        }
        sids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::DropReason;
    use crate::flow::{Endpoint, Proto};
    use crate::napt::tests::{napt, REMOTE};

    #[test]
    fn an_expiry_pass_is_bounded_however_many_sessions_are_due() {
        let mut n = napt(1000);
        let mut c = Counters::default();
        let r = REMOTE;
        let now = Time::from_secs(1);
        for i in 0..300u16 {
            let int = Endpoint {
                addr: 0xc612_0001 + u32::from(i % 7),
                port: 2000 + i,
            };
            n.outbound(now, Proto::Udp, int, r, 0, &mut c).unwrap();
        }
        // Nothing due: a pass looks at `budget` slots and removes nothing.
        assert_eq!(n.expire(now, 1024, &mut c), 0);
        let later = now.plus_secs(100_000);
        let most = 1024 / (REMOVE_COST + 1) + 1;
        let mut passes = 0;
        while n.sessions.len > 0 {
            let r = n.expire(later, 1024, &mut c);
            assert!((1..=most).contains(&r), "pass removed {r}, at most {most}");
            passes += 1;
            assert!(passes <= 300, "the sweep makes progress");
        }
        assert_eq!((n.mappings.len, n.hosts.len()), (0, 0));
        assert_eq!((n.flows.len(), n.bib.len()), (0, 0), "no entry left behind");
        assert!(n.pool.iter().all(|p| p.hosts == 0), "hosts unpaired");
    }

    /// A sweep that goes round a young table finds nothing due: the per-new-session credit
    /// stops until a second after the cycle began, and a cycle that meets due sessions never
    /// stops it.
    #[test]
    fn a_quiet_sweep_holds_the_new_session_credit_back_for_a_second() {
        let mut n = napt(1000);
        let mut c = Counters::default();
        let start = Time::from_secs(10);
        for i in 0..100u16 {
            let int = Endpoint {
                addr: 0xc612_0001,
                port: 2000 + i,
            };
            n.outbound(start, Proto::Udp, int, REMOTE, 0, &mut c)
                .unwrap();
        }
        assert!(n.wants_expiry_step(start));
        let ms = |t: Time, m: u64| Time(t.0 + m * 1_000_000);
        // A pass looks at no more than the slab: the first goes round once; the second
        // wraps, ending the cycle begun at time 0 (long ago): no hold.
        let t1 = ms(start, 1);
        assert_eq!(n.expire(t1, 150, &mut c), 0);
        let t2 = ms(t1, 1);
        assert_eq!(n.expire(t2, 150, &mut c), 0);
        assert!(n.wants_expiry_step(t2));
        // The cycle begun at t2 goes round in 10 ms finding nothing due: held for a second.
        let t3 = ms(t2, 10);
        assert_eq!(n.expire(t3, 150, &mut c), 0);
        assert!(!n.wants_expiry_step(t3));
        assert!(!n.wants_expiry_step(ms(t2, 999)));
        assert!(n.wants_expiry_step(ms(t2, 1000)));
        // Everything due: the cycle finds it, removes what its budget allows, and the step
        // is never held while sessions wait.
        let late = start.plus_secs(100_000);
        let mut passes = 0;
        while n.sessions.len > 0 {
            n.expire(late, 1024, &mut c);
            assert!(n.wants_expiry_step(late), "held while sessions were due");
            passes += 1;
            assert!(passes <= 100, "the sweep makes progress");
        }
    }

    #[test]
    fn a_full_table_makes_room_from_sessions_past_their_time() {
        let mut n = napt(100);
        let mut c = Counters::default();
        let r = REMOTE;
        let flow = |i: u16| Endpoint {
            addr: 0xc612_0001,
            port: 2000 + i,
        };
        let now = Time::from_secs(1);
        for i in 0..100 {
            n.outbound(now, Proto::Udp, flow(i), r, 0, &mut c).unwrap();
        }
        // Full of live sessions: refused, and the pass that found nothing due is not run
        // again for a while (the sweep cursor stays put).
        let full = n.outbound(now, Proto::Udp, flow(100), r, 0, &mut c);
        assert_eq!(full, Err(DropReason::SessionLimit));
        let cursor = n.sweep_cursor;
        let again = n.outbound(now, Proto::Udp, flow(101), r, 0, &mut c);
        assert_eq!(again, Err(DropReason::SessionLimit));
        assert_eq!(n.sweep_cursor, cursor, "no second pass within the backoff");
        // Past every session's time, with no sweep in between: a new flow gets in.
        let later = now.plus_secs(100_000);
        assert!(n
            .outbound(later, Proto::Udp, flow(102), r, 0, &mut c)
            .is_ok());
        assert!(n.sessions.len <= 100);
    }
}
