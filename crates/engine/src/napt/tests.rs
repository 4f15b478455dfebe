//! Tests of the NAPT state across its parts: layouts, held IPv6 hosts, filtering with spilled
//! remote addresses, expiry budgets, reclaiming, candidates and waiting index entries.

use hashbrown::HashMap;

use crate::config::{Filtering, Limits, Nat44Mode, Timeouts};
use crate::counters::{Counters, DropReason};
use crate::flow::{Endpoint, FlowKey, InsideAddr, Proto};
use crate::Time;

use super::expiry::REMOVE_COST;
use super::mapping::Mapping;
use super::session::{Session, Stamp, PROPAGATE_SHIFT};
use super::slab::Slot;
use super::{Napt, NaptConfig, NO_CAND};

/// The remote endpoint the tests' flows talk to (203.0.113.1:53).
const REMOTE: Endpoint = Endpoint {
    addr: 0xcb00_7101,
    port: 53,
};

/// A NAT44 NAPT on 198.19.0.0/31 with room for `max` sessions (per host too).
fn napt(max: u32) -> Napt<u32> {
    napt_of(max)
}

/// [`napt`] for inside addresses of type `A` (`u128`: NAT64's).
fn napt_of<A: InsideAddr>(max: u32) -> Napt<A> {
    Napt::new(
        NaptConfig {
            mode: Nat44Mode::Napt,
            filtering: Filtering::EndpointIndependent,
            ports: (1024, 65535),
            timeouts: Timeouts::default(),
            limits: Limits {
                max_sessions: max,
                max_sessions_per_host: max,
                ..Limits::default()
            },
            inbound_refresh: true,
        },
        &["198.19.0.0/31".parse().unwrap()],
        1,
    )
}

#[test]
fn slab_entries_are_as_small_as_the_docs_say() {
    // The memory bench measures these; this names the layout a change must keep (a
    // field added to `Session` or `Mapping` is a per-session cost at 10M sessions).
    use std::mem::size_of;
    assert_eq!(size_of::<Slot<Session>>(), 32);
    assert_eq!(size_of::<Slot<Mapping>>(), 36);
    assert_eq!(Stamp::of(Time(0)), Stamp(0));
    assert!(
        !Stamp::of(Time(1)).passed(Time(1)),
        "rounded up: never before the time"
    );
    assert!(Stamp::of(Time(1)).passed(Time(1 << PROPAGATE_SHIFT)));
    assert_eq!(Stamp::of(Time(u64::MAX)), Stamp(u32::MAX));
}

#[test]
fn ipv6_hosts_are_held_as_numbers_that_are_reused_but_never_confused() {
    // NAT64 sessions and mappings hold a host's number, not its 16-byte address: a
    // released host's number goes to the next new host, and each session keeps
    // translating to its own host's address both ways.
    let mut n: Napt<u128> = napt_of(1000);
    let mut c = Counters::default();
    let r = REMOTE;
    let addr = |h: u128| 0x2001_0db8_0000_0000_0000_0000_0000_0000 | h;
    let ep = |h: u128, port: u16| Endpoint {
        addr: addr(h),
        port,
    };
    let held = |n: &Napt<u128>, h: u128| n.hosts.number(addr(h)).and_then(|x| n.hosts.held(x));
    let t0 = Time::from_secs(1);
    let t1 = t0.plus_secs(200);
    let back = |n: &mut Napt<u128>, now: Time, ext: Endpoint, c: &mut Counters| {
        n.inbound(now, Proto::Udp, ext, r, 0, c)
    };
    let mut out = Vec::new();
    for (h, ports, now) in [(1, 1000..1003, t0), (2, 2000..2002, t1)] {
        for port in ports {
            let ext = n
                .outbound(now, Proto::Udp, ep(h, port), r, 0, &mut c)
                .unwrap();
            assert_eq!(back(&mut n, now, ext, &mut c), Ok(ep(h, port)));
            out.push((ep(h, port), ext));
        }
    }
    let one = held(&n, 1).unwrap();
    assert_ne!(Some(one), held(&n, 2), "one number per host");
    // Host 1's sessions time out (host 2's were refreshed at t1): its number is free.
    let t2 = t0.plus_secs(350);
    while n.expire(t2, 1024, &mut c) > 0 {}
    assert_eq!((held(&n, 1), n.sessions.len), (None, 2));
    assert_eq!(n.hosts.len(), 1);
    // A new host takes the number; host 1 coming back gets another one.
    let e3 = n
        .outbound(t2, Proto::Udp, ep(3, 3000), r, 0, &mut c)
        .unwrap();
    assert_eq!(held(&n, 3), Some(one), "the freed number is reused");
    let e1 = n
        .outbound(t2, Proto::Udp, ep(1, 1000), r, 0, &mut c)
        .unwrap();
    assert!(held(&n, 1).is_some_and(|h| h != one));
    assert_eq!(back(&mut n, t2, e3, &mut c), Ok(ep(3, 3000)));
    assert_eq!(back(&mut n, t2, e1, &mut c), Ok(ep(1, 1000)));
    for &(int, ext) in &out[3..] {
        assert_eq!(back(&mut n, t2, ext, &mut c), Ok(int));
    }
    // Outbound tuples find their own host's session, not the one holding the number.
    assert_eq!(
        n.find_by_inside(t2, Proto::Udp, ep(3, 3000), r, &mut c),
        Some(e3)
    );
    assert_eq!(
        n.find_by_inside(t2, Proto::Udp, ep(1, 3000), r, &mut c),
        None
    );
    // All gone: no number left behind.
    while n.expire(t2.plus_secs(1000), 1024, &mut c) > 0 {}
    assert_eq!(n.hosts.len(), 0);
    assert_eq!((n.flows.len(), n.bib.len()), (0, 0));
}

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

proptest::proptest! {
    /// NAT64 hosts come and go (sessions time out, hosts are released, their numbers are
    /// reused): every answer in either direction is the one the flow's own host was
    /// given, and when all is gone nothing is left behind.
    #[test]
    fn ipv6_host_numbers_never_mix_hosts_up(
        ops in proptest::collection::vec((0u8..4, 0u128..6, 0u16..3, 0u64..200), 1..200)
    ) {
        use proptest::prelude::*;
        let mut n: Napt<u128> = napt_of(1000);
        let mut c = Counters::default();
        let r = REMOTE;
        let ep = |h: u128, port: u16| Endpoint {
            addr: 0x2001_0db8_0000_0000_0000_0000_0000_0000 | h << 8,
            port: 1000 + port,
        };
        // Outside endpoint -> the inside endpoint it was last given to.
        let mut given: HashMap<Endpoint, Endpoint<u128>> = HashMap::new();
        let mut now = Time::from_secs(1);
        for (op, h, port, dt) in ops {
            now = now.plus_secs(dt);
            let int = ep(h, port);
            match op {
                0 | 1 => {
                    if let Ok(ext) = n.outbound(now, Proto::Udp, int, r, 0, &mut c) {
                        given.insert(ext, int);
                        prop_assert_eq!(n.find_by_inside(now, Proto::Udp, int, r, &mut c), Some(ext));
                    }
                }
                2 => {
                    for (&ext, &int) in &given {
                        if let Ok(back) = n.inbound(now, Proto::Udp, ext, r, 0, &mut c) {
                            prop_assert_eq!(back, int);
                        }
                    }
                }
                _ => {
                    n.expire(now, 1024, &mut c);
                }
            }
        }
        let end = now.plus_secs(100_000);
        while n.expire(end, 1024, &mut c) > 0 {}
        prop_assert_eq!((n.hosts.len(), n.sessions.len), (0, 0));
        prop_assert_eq!((n.flows.len(), n.bib.len()), (0, 0));
    }
}

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

/// Stage 3 tries the entry stage 2 peeked at ([`Napt::find`]); by then that session may
/// be gone and its slab slot another flow's. The candidate must then be passed over:
/// a's packet, planned while a lived, arrives after a expired and b took a's slot.
#[test]
fn a_stale_candidate_is_never_taken_for_another_session() {
    let mut n = napt(10);
    let mut c = Counters::default();
    let now = Time::from_secs(1);
    let a = Endpoint {
        addr: 0xc612_0001,
        port: 2000,
    };
    let b = Endpoint {
        addr: 0xc612_0002,
        port: 3000,
    };
    n.outbound(now, Proto::Udp, a, REMOTE, 0, &mut c).unwrap();
    let key_a = FlowKey::Out(Proto::Udp, a, REMOTE);
    let h_a = n.hash(&key_a);
    let cand = n.prefetch_session(&key_a, h_a);
    assert_ne!(cand, NO_CAND, "stage 2 finds a's entry");
    let later = now.plus_secs(100_000);
    n.expire(later, 10_000, &mut c);
    assert_eq!(n.sessions.len, 0);
    let ext_b = n.outbound(later, Proto::Udp, b, REMOTE, 0, &mut c).unwrap();
    let h_b = n.hash(&FlowKey::Out(Proto::Udp, b, REMOTE));
    let key_b = FlowKey::Out(Proto::Udp, b, REMOTE);
    assert_eq!(
        n.prefetch_session(&key_b, h_b),
        cand,
        "b's entry is the one a had"
    );
    // a's packet with the stale candidate: a new session for a, not b's translation.
    let tr = n.lane_or_new(later, &key_a, h_a, cand, 0, &mut c).unwrap();
    assert_eq!(tr.int, a);
    assert_ne!(tr.ext, ext_b);
    assert_eq!(n.sessions.len, 2);
    // And the lookup-only lane, with the same stale candidate, finds a's new session.
    let again = n.lane(later, &key_a, h_a, cand, 0).unwrap();
    assert_eq!((again.int, again.ext), (a, tr.ext));
}

/// Index entries that wait ([`Napt::insert_later`]) are found, and removed, as if they
/// had been inserted: runs of new sessions longer than [`PENDING_MAX`], each looked up
/// by its inbound tuple at once (and a second remote admitted through the waiting BIB
/// entry of its mapping), all looked up again afterwards, then all expired.
#[test]
fn waiting_index_entries_behave_as_inserted() {
    let mut n = napt(1000);
    let mut c = Counters::default();
    let (r1, r2) = (
        REMOTE,
        Endpoint {
            addr: 0xcb00_7102,
            port: 80,
        },
    );
    let now = Time::from_secs(1);
    let mut seen = Vec::new();
    for i in 0..100u16 {
        let int = Endpoint {
            addr: 0xc612_0001 + u32::from(i % 3),
            port: 2000 + i,
        };
        let ext = n.outbound(now, Proto::Udp, int, r1, 0, &mut c).unwrap();
        assert_eq!(n.inbound(now, Proto::Udp, ext, r1, 0, &mut c), Ok(int));
        assert_eq!(n.inbound(now, Proto::Udp, ext, r2, 0, &mut c), Ok(int));
        seen.push((int, ext));
    }
    assert!(!n.pending.is_empty(), "the last run still waits");
    for &(int, ext) in &seen {
        assert_eq!(
            n.find_by_outside(now, Proto::Udp, ext, r1, &mut c),
            Some(int)
        );
        assert_eq!(
            n.find_by_outside(now, Proto::Udp, ext, r2, &mut c),
            Some(int)
        );
        assert_eq!(
            n.find_by_inside(now, Proto::Udp, int, r2, &mut c),
            Some(ext)
        );
    }
    assert_eq!(n.sessions.len, 200);
    let later = now.plus_secs(100_000);
    let mut removed = 0;
    for _ in 0..100 {
        removed += n.expire(later, 1000, &mut c);
    }
    assert_eq!(removed, 200);
    assert_eq!((n.sessions.len, n.mappings.len), (0, 0));
    assert!(
        n.pending.is_empty(),
        "waiting entries of removed sessions taken back"
    );
    assert_eq!((n.flows.len(), n.bib.len()), (0, 0), "no entry left behind");
    for &(_, ext) in &seen {
        assert_eq!(
            n.inbound(later, Proto::Udp, ext, r1, 0, &mut c),
            Err(DropReason::NoMapping)
        );
    }
}
