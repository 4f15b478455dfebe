//! The state-event stream ([`xlat_engine::events`]) through the public engine API: what a
//! NAT logger (RFC 8158 natEvent), a session sync or a metrics consumer sees when sessions,
//! mappings and host pairings are made and end, and when a flow is refused for exhaustion
//! or quota.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::*;
use xlat_engine::events::{EndReason, EventKind, StateEvent, Translator};
use xlat_engine::flow::Proto;
use xlat_engine::*;

const IN_A: &str = "198.18.0.20";
const IN_B: &str = "198.18.0.21";
const POOL: &str = "198.19.0.100";
const R1: &str = "198.19.0.2";
const R2: &str = "198.19.0.3";

fn nat44(limits: Limits) -> Engine {
    Engine::new(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.100/32".parse().unwrap()],
            mode: Nat44Mode::Napt,
            limits,
            ..Nat44Config::default()
        }),
        seed: 3,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn udp_out(e: &mut Engine, t: u64, src: &str, sport: u16, dst: &str) -> Verdict {
    let mut p = ip4(a4(src), a4(dst), 17, udp(sport, 53, b"q"), 64, 0, 1);
    e.process_vec(Time::from_secs(t), &mut p)
}

/// The events as the engine queues them: a mapping made or ended with its one session
/// rides in the session's event (`with_mapping`).
fn drain_raw(e: &mut Engine) -> Vec<StateEvent> {
    let mut out = Vec::new();
    e.drain_events(&mut out);
    out
}

/// The events as a logger sees them: each folded mapping event unfolded after its session's.
fn drain(e: &mut Engine) -> Vec<StateEvent> {
    drain_raw(e).iter().flat_map(StateEvent::unfolded).collect()
}

fn kinds(ev: &[StateEvent]) -> Vec<EventKind> {
    ev.iter().map(|e| e.kind).collect()
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[test]
fn off_by_default_nothing_is_queued() {
    let mut e = nat44(Limits::default());
    assert_eq!(udp_out(&mut e, 1, IN_A, 5000, R1), Verdict::Forward);
    assert!(drain(&mut e).is_empty());
}

#[test]
fn session_mapping_and_host_lifecycle_nat44() {
    let mut e = nat44(Limits::default());
    e.set_events(1024);
    assert_eq!(udp_out(&mut e, 1, IN_A, 5000, R1), Verdict::Forward);
    let raw = drain_raw(&mut e);
    assert_eq!(
        kinds(&raw),
        [EventKind::HostBound, EventKind::SessionCreated]
    );
    assert!(raw[1].with_mapping && !raw[0].with_mapping);
    let ev: Vec<StateEvent> = raw.iter().flat_map(StateEvent::unfolded).collect();
    assert_eq!(
        kinds(&ev),
        [
            EventKind::HostBound,
            EventKind::SessionCreated,
            EventKind::MappingCreated
        ]
    );
    assert!(ev.iter().all(|x| !x.with_mapping));
    assert_eq!((ev[2].session, ev[2].remote_port), (None, 0));
    let s = ev[1];
    assert_eq!(s.translator, Translator::Nat44);
    assert_eq!(s.proto, Proto::Udp);
    assert_eq!(s.at, Time::from_secs(1));
    assert_eq!((s.inside, s.inside_port), (IpAddr::V4(v4(IN_A)), 5000));
    assert_eq!(s.outside, v4(POOL));
    assert_eq!((s.remote, s.remote_port), (v4(R1), 53));
    // The mapping names the same endpoints; the host its pool address.
    assert_eq!(
        (ev[2].outside, ev[2].outside_port),
        (s.outside, s.outside_port)
    );
    assert_eq!((ev[0].inside, ev[0].outside), (s.inside, v4(POOL)));
    // RFC 4787 REQ-1: a second remote reuses the mapping: a session, no mapping, no host.
    assert_eq!(udp_out(&mut e, 2, IN_A, 5000, R2), Verdict::Forward);
    let ev2 = drain_raw(&mut e);
    assert_eq!(kinds(&ev2), [EventKind::SessionCreated]);
    assert!(!ev2[0].with_mapping, "the mapping was there before");
    assert_eq!(ev2[0].outside_port, s.outside_port);

    // Both expire (UDP 300 s): two deletes, then the mapping, then the host.
    let removed = e.expire(Time::from_secs(1000), 1000);
    assert_eq!(removed, 2);
    let ev3 = drain(&mut e);
    let expired = EventKind::SessionDeleted(EndReason::Expired);
    assert_eq!(
        kinds(&ev3),
        [
            expired,
            expired,
            EventKind::MappingDeleted,
            EventKind::HostUnbound
        ],
        "{ev3:?}"
    );
    assert!(ev3.iter().all(|x| x.at == Time::from_secs(1000)));
    assert_eq!(ev3[2].outside_port, s.outside_port);
    assert_eq!(ev3[3].inside, IpAddr::V4(v4(IN_A)));
}

#[test]
fn quota_exceeded_is_an_event() {
    let mut e = nat44(Limits {
        max_sessions_per_host: 1,
        ..Limits::default()
    });
    e.set_events(1024);
    assert_eq!(udp_out(&mut e, 1, IN_A, 5000, R1), Verdict::Forward);
    drain(&mut e);
    assert_eq!(
        udp_out(&mut e, 1, IN_A, 5001, R1),
        Verdict::Drop(DropReason::HostSessionLimit)
    );
    let ev = drain(&mut e);
    assert_eq!(kinds(&ev), [EventKind::QuotaExceeded]);
    assert_eq!(
        (ev[0].inside, ev[0].inside_port),
        (IpAddr::V4(v4(IN_A)), 5001)
    );
}

#[test]
fn a_full_queue_drops_and_counts_never_blocks() {
    let mut e = nat44(Limits::default());
    e.set_events(2);
    assert_eq!(udp_out(&mut e, 1, IN_A, 5000, R1), Verdict::Forward);
    assert_eq!(udp_out(&mut e, 1, IN_B, 5000, R1), Verdict::Forward);
    let ev = drain(&mut e);
    assert_eq!(
        kinds(&ev),
        [
            EventKind::HostBound,
            EventKind::SessionCreated,
            EventKind::MappingCreated
        ]
    );
    let dropped = e
        .stats()
        .events
        .iter()
        .find(|c| c.name == "state_events_dropped")
        .map(|c| c.value);
    assert_eq!(
        dropped,
        Some(2),
        "two events a new host (its mapping's folded into its session's), two kept"
    );
    // Drained, it takes events again.
    assert_eq!(udp_out(&mut e, 2, IN_A, 5001, R2), Verdict::Forward);
    assert_eq!(
        kinds(&drain(&mut e)),
        [EventKind::SessionCreated, EventKind::MappingCreated]
    );
}

#[test]
fn nat64_delete_still_names_the_ipv6_host() {
    let mut e = Engine::new(EngineConfig {
        nat64: Some(Nat64Config {
            prefix: "2001:2:0:64::/96".parse().unwrap(),
            pool4: vec!["198.19.0.101/32".parse().unwrap()],
            ..Nat64Config::default()
        }),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap();
    e.set_events(64);
    let client = "2001:2:0:1::5";
    let mut p = ip6(
        a6(client),
        a6("2001:2:0:64::c613:2"),
        17,
        udp(40000, 53, b"q"),
        64,
    );
    assert_eq!(e.process_vec(Time::from_secs(1), &mut p), Verdict::Forward);
    let ev = drain(&mut e);
    assert_eq!(ev[1].kind, EventKind::SessionCreated);
    assert_eq!(ev[1].translator, Translator::Nat64);
    assert_eq!(ev[1].inside, client.parse::<IpAddr>().unwrap());
    assert_eq!((ev[1].remote, ev[1].remote_port), (v4("198.19.0.2"), 53));
    assert_eq!(e.expire(Time::from_secs(1000), 100), 1);
    let gone = drain(&mut e);
    assert_eq!(
        kinds(&gone),
        [
            EventKind::SessionDeleted(EndReason::Expired),
            EventKind::MappingDeleted,
            EventKind::HostUnbound
        ]
    );
    assert!(
        gone.iter()
            .all(|x| x.inside == client.parse::<IpAddr>().unwrap()),
        "{gone:?}"
    );
}

#[test]
fn listing_filters_by_value_and_limits_inside_the_engine() {
    let mut e = nat44(Limits::default());
    for port in 5000..5010 {
        assert_eq!(udp_out(&mut e, 1, IN_A, port, R1), Verdict::Forward);
    }
    assert_eq!(udp_out(&mut e, 1, IN_B, 6000, R2), Verdict::Forward);
    let all = e.sessions(Time::from_secs(2));
    assert_eq!(all.len(), 11);
    let by_b = SessionFilter {
        inside: Some(IpAddr::V4(v4(IN_B))),
        ..SessionFilter::default()
    };
    let rows = e.sessions_matching(Time::from_secs(2), &by_b, 100);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].inside, v4(IN_B), "{rows:?}");
    let a3 = SessionFilter {
        inside: Some(IpAddr::V4(v4(IN_A))),
        proto: Some(Proto::Udp),
        ..SessionFilter::default()
    };
    let rows = e.sessions_matching(Time::from_secs(2), &a3, 3);
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.inside == v4(IN_A)));
    // Sorted by value: the inside ports 5000, 5001, 5002.
    assert_eq!(rows[0].inside_port, Some(5000));
    assert_eq!(rows[2].inside_port, Some(5002));
    assert_eq!(rows[0].state, SessionState::Udp);
    assert_eq!(rows[0].remote, Some(v4(R1)));
    let tcp = SessionFilter {
        proto: Some(Proto::Tcp),
        ..SessionFilter::default()
    };
    assert!(e
        .sessions_matching(Time::from_secs(2), &tcp, 100)
        .is_empty());
    let nat64 = SessionFilter {
        translator: Some(Translator::Nat64),
        ..SessionFilter::default()
    };
    assert!(e
        .sessions_matching(Time::from_secs(2), &nat64, 100)
        .is_empty());
}

/// `xlat show sessions` pages: pages of a few rows, each call looking at a bounded part of
/// the table, gather exactly what one unbounded listing gives -- static entries first, then
/// the sessions -- and the cursor ends; a filter is applied inside the page.
#[test]
fn pages_gather_the_whole_listing_and_end() {
    let mut e = Engine::new(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.100/32".parse().unwrap()],
            mode: Nat44Mode::Napt,
            statics: vec![StaticEntry {
                inside: v4("198.18.0.10"),
                outside: v4("198.19.0.10"),
            }],
            ..Nat44Config::default()
        }),
        seed: 3,
        ..EngineConfig::default()
    })
    .unwrap();
    for port in 5000..5010 {
        assert_eq!(udp_out(&mut e, 1, IN_A, port, R1), Verdict::Forward);
    }
    assert_eq!(udp_out(&mut e, 1, IN_B, 6000, R2), Verdict::Forward);
    let now = Time::from_secs(2);
    let key = |r: &SessionInfo| format!("{r:?}");
    for f in [
        SessionFilter::default(),
        SessionFilter {
            inside: Some(IpAddr::V4(v4(IN_B))),
            ..SessionFilter::default()
        },
    ] {
        let mut want: Vec<String> = e
            .sessions_matching(now, &f, usize::MAX)
            .iter()
            .map(key)
            .collect();
        let mut got = Vec::new();
        let mut at = Some(SessionCursor::default());
        let mut pages = 0;
        while let Some(from) = at {
            let (rows, next) = e.sessions_page(now, &f, from, 3);
            assert!(rows.len() <= 3);
            got.extend(rows.iter().map(key));
            at = next;
            pages += 1;
            assert!(pages < 100, "the cursor never ends");
        }
        assert_eq!(got.first(), want.first(), "static entries first");
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }
    // A listing that leaves the static entries to another worker.
    let (rows, _) = e.sessions_page(now, &SessionFilter::default(), SessionCursor::DYNAMIC, 100);
    assert_eq!(rows.len(), 11);
    assert!(rows.iter().all(|r| r.state != SessionState::Static));
}

#[test]
fn clear_ends_exactly_the_chosen_sessions_with_cleared_events() {
    let mut e = nat44(Limits::default());
    e.set_events(1024);
    for port in 5000..5004 {
        assert_eq!(udp_out(&mut e, 1, IN_A, port, R1), Verdict::Forward);
    }
    assert_eq!(udp_out(&mut e, 1, IN_B, 6000, R2), Verdict::Forward);
    drain(&mut e);
    let by_a = SessionFilter {
        inside: Some(IpAddr::V4(v4(IN_A))),
        ..SessionFilter::default()
    };
    assert_eq!(e.clear_sessions(Time::from_secs(3), &by_a), 4);
    let left = e.sessions(Time::from_secs(3));
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].inside, v4(IN_B));
    let ev = drain(&mut e);
    let cleared = ev
        .iter()
        .filter(|x| x.kind == EventKind::SessionDeleted(EndReason::Cleared))
        .count();
    assert_eq!(cleared, 4);
    assert!(ev.iter().all(|x| x.inside == IpAddr::V4(v4(IN_A))));
    assert_eq!(ev.last().map(|x| x.kind), Some(EventKind::HostUnbound));
    let n = e
        .stats()
        .events
        .iter()
        .find(|c| c.name == "sessions_cleared")
        .map(|c| c.value);
    assert_eq!(n, Some(4));
    // The cleared host translates again from scratch.
    assert_eq!(udp_out(&mut e, 4, IN_A, 5000, R1), Verdict::Forward);
}

/// The fast path is one consumer of the stream: with offload on, its instructions come out
/// of `drain_events` whether or not other events are on, a full queue never drops them, and
/// each names its session so the recipes can be made from the event alone.
#[test]
fn fast_path_instructions_ride_the_stream_and_are_never_dropped() {
    use xlat_engine::offload::OffloadKind;
    let mut e = nat44(Limits::default());
    e.set_offload(true);
    assert_eq!(udp_out(&mut e, 1, IN_A, 5000, R1), Verdict::Forward);
    let ev = drain(&mut e);
    assert_eq!(kinds(&ev), [EventKind::FastPath(OffloadKind::Install)]);
    let op = e.offload_op(&ev[0]).expect("an install op");
    let (out, _) = op.nat44().expect("NAT44 recipes");
    assert_eq!(out.key.src, u32::from(v4(IN_A)));
    assert_eq!(out.key.sport, 5000);
    assert_eq!(op.token, u64::from(ev[0].session.unwrap()));
    // Other events on but full: theirs are dropped and counted, the fast path's are not.
    e.set_events(1);
    for port in 5001..5004 {
        assert_eq!(udp_out(&mut e, 2, IN_A, port, R1), Verdict::Forward);
    }
    let ev = drain_raw(&mut e);
    let installs = ev
        .iter()
        .filter(|x| x.kind == EventKind::FastPath(OffloadKind::Install))
        .count();
    assert_eq!(installs, 3, "{ev:?}");
    assert_eq!(ev.len(), 4, "one other event fits: {ev:?}");
    // A cleared session's recipes are withdrawn; the op is made from the event alone.
    let n = e.clear_sessions(Time::from_secs(3), &SessionFilter::default());
    assert_eq!(n, 4);
    let ev = drain(&mut e);
    let removes: Vec<_> = ev
        .iter()
        .filter(|x| x.kind == EventKind::FastPath(OffloadKind::Remove))
        .collect();
    assert_eq!(removes.len(), 4, "{ev:?}");
    assert!(removes.iter().all(|x| e.offload_op(x).is_some()));
    let ops = e.stats().get("offload_removed");
    assert_eq!(ops, 4);
    // Session events themselves are not instructions.
    let created = ev
        .iter()
        .find(|x| matches!(x.kind, EventKind::SessionDeleted(_)));
    assert!(created.is_none_or(|x| e.offload_op(x).is_none()));
}
