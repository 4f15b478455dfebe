//! A deterministic driver for instruction counting (scripts/icount.sh runs it under
//! callgrind): builds `SESSIONS` NAT44 sessions, then translates `PACKETS` established-flow
//! packets in batches of 32. Instruction counts of two runs with different `PACKETS` give the
//! instructions per packet, independent of machine noise.
//!
//! Usage: hotpath SESSIONS PACKETS [batch|single]

#![allow(clippy::unwrap_used, clippy::expect_used)]

use xlat_engine::*;
use xlat_wire::checksum;

fn udp64(src: [u8; 4], sport: u16) -> [u8; 64] {
    let mut p = [0u8; 64];
    p[..12].copy_from_slice(&[0x45, 0, 0, 64, 0, 1, 0, 0, 64, 17, 0, 0]);
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&[203, 0, 113, 1]);
    let c = checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&53u16.to_be_bytes());
    p[24..26].copy_from_slice(&44u16.to_be_bytes());
    p
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sessions: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let packets: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let batch = args.get(3).map(|s| s != "single").unwrap_or(true);
    let cfg = Nat44Config {
        inside: vec!["198.18.0.0/16".parse().unwrap()],
        pool: vec!["198.19.0.0/24".parse().unwrap()],
        limits: Limits {
            max_sessions: sessions + 10,
            max_sessions_per_host: sessions + 10,
            ..Limits::default()
        },
        ..Nat44Config::default()
    };
    let mut e = Engine::new(EngineConfig {
        nat44: Some(cfg),
        seed: 3,
        ..EngineConfig::default()
    })
    .unwrap();
    let flow = |i: u32| {
        let h = i / 60000;
        udp64(
            [198, 18, (h >> 8) as u8, h as u8],
            1024 + (i % 60000) as u16,
        )
    };
    for i in 0..sessions {
        let mut p = flow(i);
        assert_eq!(
            e.process(Time(0), &mut PacketBuf::whole(&mut p)),
            Verdict::Forward
        );
    }
    let mut bufs = [[0u8; 64]; 32];
    let mut verdicts = [Verdict::Held; 32];
    let mut i = 0u32;
    let mut forwarded = 0u64;
    while i < packets {
        for b in bufs.iter_mut() {
            *b = flow((i.wrapping_mul(7919)) % sessions);
            i += 1;
        }
        if batch {
            let mut pkts = bufs.each_mut().map(|b| PacketBuf::whole(b));
            e.process_batch(Time(1), &mut pkts, &mut verdicts);
        } else {
            for (b, v) in bufs.iter_mut().zip(verdicts.iter_mut()) {
                *v = e.process(Time(1), &mut PacketBuf::whole(b));
            }
        }
        forwarded += verdicts.iter().filter(|v| **v == Verdict::Forward).count() as u64;
    }
    println!("forwarded {forwarded}");
}
