//! Engine-only NAT44 benchmarks (no I/O): established-flow translation at 1k, 100k, 1M and
//! 10M sessions, per packet and batched, and new-session creation. Throughput is reported in
//! packets (elements) per second; criterion prints the time per batch of 64, so ns/packet is
//! that divided by 64. Compare numbers from one run, on one machine (docs/PERFORMANCE.md).
//!
//! Flows: inside host 198.18.x.y (one per 1,000 flows), ports 1024..2023, one remote
//! (203.0.113.1:53), so every session has its own mapping (the worst case for NAPT).
//! `XLAT_BENCH_SIZES=1000,1000000` limits the table sizes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/arrivals.rs"]
mod arrivals;

use arrivals::Arrivals;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use xlat_engine::*;
use xlat_wire::checksum;

const BATCH: usize = 64;

pub fn engine(max_sessions: u32) -> Engine {
    let mut cfg = Nat44Config {
        inside: vec!["198.18.0.0/16".parse().unwrap()],
        pool: vec!["198.19.0.0/22".parse().unwrap()],
        filtering: Filtering::EndpointIndependent,
        ..Nat44Config::default()
    };
    cfg.limits.max_sessions = max_sessions;
    cfg.limits.max_sessions_per_host = max_sessions;
    Engine::new(EngineConfig {
        nat44: Some(cfg),
        seed: 42,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// A 64-byte UDP/IPv4 packet (20 + 8 + 36) with valid checksums.
fn udp64(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> [u8; 64] {
    let mut p = [0xabu8; 64];
    p[..12].copy_from_slice(&[0x45, 0, 0, 64, 0, 1, 0, 0, 64, 17, 0, 0]);
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    let c = checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..28].copy_from_slice(&[0, 44, 0, 0]);
    let mut ph = [0u8; 12];
    ph[..4].copy_from_slice(&src);
    ph[4..8].copy_from_slice(&dst);
    ph[8..].copy_from_slice(&[0, 17, 0, 44]);
    let c = checksum::finish(checksum::sum(&p[20..], checksum::sum(&ph, 0)));
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}

/// Flow i: inside host 198.18.x.y = i / 1000, port 1024 + i % 1000.
pub fn flow(i: u32) -> [u8; 64] {
    let host = i / 1000;
    udp64(
        [198, 18, (host >> 8) as u8, host as u8],
        1024 + (i % 1000) as u16,
        [203, 0, 113, 1],
        53,
    )
}

fn sizes() -> Vec<u32> {
    std::env::var("XLAT_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000, 1_000_000, 10_000_000])
}

fn established(c: &mut Criterion) {
    let mut g = c.benchmark_group("nat44_established_udp64");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    for n in sizes() {
        // Built once per size (10M takes a few seconds).
        let mut e = engine(n + 10);
        for i in 0..n {
            let mut b = flow(i);
            assert_eq!(
                e.process(Time(0), &mut PacketBuf::whole(&mut b)),
                Verdict::Forward
            );
        }
        // Visit flows in a scattered order, as real traffic does; each packet is written
        // into a reused buffer as a receive ring delivers it (see `arrivals`).
        let mut pkts = Arrivals::new(n as usize, |i| {
            flow(((i as u64 * 7919) % u64::from(n)) as u32).to_vec()
        });
        let mut bufs = [[0u8; 64]; BATCH];
        g.bench_function(format!("{n}_sessions"), |b| {
            b.iter(|| {
                for buf in bufs.iter_mut() {
                    pkts.write_next(buf);
                    black_box(e.process(Time(1), &mut PacketBuf::whole(buf)));
                }
            })
        });
        let mut verdicts = [Verdict::Held; BATCH];
        g.bench_function(format!("{n}_sessions_batch_prefetch"), |b| {
            b.iter(|| {
                for buf in bufs.iter_mut() {
                    pkts.write_next(buf);
                }
                let mut ps = bufs.each_mut().map(|b| PacketBuf::whole(b));
                e.process_batch(Time(1), &mut ps, &mut verdicts);
                black_box(&verdicts);
            })
        });
        assert_eq!(e.counters().total_drops(), 0);
    }
    g.finish();
}

fn new_sessions(c: &mut Criterion) {
    let mut g = c.benchmark_group("nat44_new_sessions");
    const N: u32 = 100_000;
    g.throughput(Throughput::Elements(u64::from(N)));
    g.sample_size(10);
    let flows: Vec<[u8; 64]> = (0..N).map(flow).collect();
    g.bench_function("100k_into_empty_table", |b| {
        b.iter_batched(
            || engine(N + 10),
            |mut e| {
                for f in &flows {
                    let mut buf = *f;
                    black_box(e.process(Time(0), &mut PacketBuf::whole(&mut buf)));
                }
                e
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, established, new_sessions);
criterion_main!(benches);
