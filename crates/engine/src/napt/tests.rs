//! Tests of the NAPT state across its parts (the records' layout, IPv6 hosts held as numbers)
//! and the helpers the files' own tests share.

use hashbrown::HashMap;

use crate::config::{Filtering, Limits, Nat44Mode, Timeouts};
use crate::counters::Counters;
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::Time;

use super::mapping::Mapping;
use super::session::{Session, Stamp, PROPAGATE_SHIFT};
use super::slab::Slot;
use super::{Napt, NaptConfig};

/// The remote endpoint the tests' flows talk to (203.0.113.1:53).
pub(super) const REMOTE: Endpoint = Endpoint {
    addr: 0xcb00_7101,
    port: 53,
};

/// A NAT44 NAPT on 198.19.0.0/31 with room for `max` sessions (per host too).
pub(super) fn napt(max: u32) -> Napt<u32> {
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
