//! Hostile input: arbitrary bytes and mutated valid packets never panic, and every packet
//! gets exactly one outcome that is counted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use xlat_engine::*;

fn engine() -> Engine {
    let cfg = Nat44Config {
        inside: vec!["198.18.0.0/24".parse().unwrap()],
        pool: vec!["198.19.0.100/32".parse().unwrap()],
        statics: vec![StaticEntry {
            inside: "198.18.0.10".parse().unwrap(),
            outside: "198.19.0.10".parse().unwrap(),
        }],
        verify_ip_checksum: false,
        ..Nat44Config::default()
    };
    Engine::new(EngineConfig {
        nat44: cfg,
        seed: 1,
    })
    .unwrap()
}

fn seed_packet(proto: u8, src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 48, 0, 1, 0, 0, 64, proto, 0, 0];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&[0u8; 28]);
    p
}

fn outcome_counted(e: &Engine) -> bool {
    let c = e.counters();
    let out = c.count(Event::PacketsOut);
    let held = c.count(Event::FragmentsHeld);
    c.count(Event::PacketsIn) <= out + c.total_drops() + held
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut e = engine();
        let mut buf = data.clone();
        let mut pb = PacketBuf::whole(&mut buf);
        let v = e.process(Time::from_secs(1), &mut pb);
        if v == Verdict::Forward { prop_assert!(pb.len() <= data.len()); }
        prop_assert!(outcome_counted(&e));
        e.expire(Time::from_secs(1000), 10);
    }

    /// Valid-looking headers with fuzzed bodies and fields reach deep into the translator.
    #[test]
    fn mutated_packets_never_panic(proto in prop::sample::select(vec![1u8, 6, 17, 47]),
                                   dir in 0u8..3,
                                   flips in proptest::collection::vec((0usize..48, any::<u8>()), 0..12),
                                   cut in 20usize..48) {
        let mut e = engine();
        let (src, dst) = match dir {
            0 => ([198, 18, 0, 20], [198, 19, 0, 2]),
            1 => ([198, 19, 0, 2], [198, 19, 0, 100]),
            _ => ([198, 18, 0, 10], [198, 19, 0, 10]),
        };
        // open a session first so inbound and ICMP-error paths find state
        let mut open = seed_packet(proto, [198, 18, 0, 20], [198, 19, 0, 2]);
        e.process_vec(Time::from_secs(0), &mut open);
        let mut p = seed_packet(proto, src, dst);
        for (i, v) in flips {
            if i >= 9 { if let Some(b) = p.get_mut(i) { *b = v; } }
        }
        p.truncate(cut);
        e.process_vec(Time::from_secs(1), &mut p);
        while e.pop_ready().is_some() {}
        prop_assert!(outcome_counted(&e));
    }
}
