//! Engine-only NAT44 benchmarks (no I/O): established-flow translation at several table sizes,
//! and new-session creation. Throughput is reported in packets (elements) per second; compare
//! numbers from one run, on one machine (see docs/PERFORMANCE.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use xlat_engine::*;
use xlat_wire::checksum;

const BATCH: usize = 64;

fn engine(max_sessions: u32) -> Engine {
    let mut cfg = Nat44Config {
        inside: vec!["198.18.0.0/16".parse().unwrap()],
        pool: vec!["198.19.0.0/24".parse().unwrap()],
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
fn udp64(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 64, 0, 1, 0, 0, 64, 17, 0, 0];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&[0, 44, 0, 0]);
    p.extend_from_slice(&[0xab; 36]);
    let mut ph = Vec::new();
    ph.extend_from_slice(&src);
    ph.extend_from_slice(&dst);
    ph.extend_from_slice(&[0, 17, 0, 44]);
    let c = checksum::finish(checksum::sum(&p[20..], checksum::sum(&ph, 0)));
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}

/// Flow i: inside host 198.18.x.y, port 1024 + i % 60000.
fn flow(i: u32) -> Vec<u8> {
    let host = i / 60000;
    udp64(
        [198, 18, (host >> 8) as u8, host as u8],
        1024 + (i % 60000) as u16,
        [203, 0, 113, 1],
        53,
    )
}

fn established(c: &mut Criterion) {
    let mut g = c.benchmark_group("nat44_established_udp64");
    g.throughput(Throughput::Elements(BATCH as u64));
    for &n in &[1_000u32, 100_000, 1_000_000] {
        let mut e = engine(n + 10);
        let flows: Vec<Vec<u8>> = (0..n).map(flow).collect();
        for f in &flows {
            let mut b = f.clone();
            assert_eq!(e.process_vec(Time(0), &mut b), Verdict::Forward);
        }
        // Visit flows in a scattered order, as real traffic does.
        let order: Vec<usize> = (0..n as usize).map(|i| (i * 7919) % n as usize).collect();
        let mut bufs = [[0u8; 64]; BATCH];
        let mut at = 0usize;
        g.bench_function(format!("{n}_sessions"), |b| {
            b.iter(|| {
                for buf in bufs.iter_mut() {
                    let f = &flows[order[at]];
                    at = if at + 1 == order.len() { 0 } else { at + 1 };
                    buf.copy_from_slice(f);
                    black_box(e.process(Time(1), &mut PacketBuf::whole(buf)));
                }
            })
        });
        let mut verdicts = [Verdict::Held; BATCH];
        g.bench_function(format!("{n}_sessions_batch_prefetch"), |b| {
            b.iter(|| {
                for buf in bufs.iter_mut() {
                    let f = &flows[order[at]];
                    at = if at + 1 == order.len() { 0 } else { at + 1 };
                    buf.copy_from_slice(f);
                }
                let mut pkts = bufs.each_mut().map(|b| PacketBuf::whole(b));
                e.process_batch(Time(1), &mut pkts, &mut verdicts);
                black_box(&verdicts);
            })
        });
    }
    g.finish();
}

fn new_sessions(c: &mut Criterion) {
    let mut g = c.benchmark_group("nat44_new_sessions");
    const N: u32 = 100_000;
    g.throughput(Throughput::Elements(u64::from(N)));
    g.sample_size(10);
    let flows: Vec<Vec<u8>> = (0..N).map(flow).collect();
    g.bench_function("100k_into_empty_table", |b| {
        b.iter_batched(
            || engine(N + 10),
            |mut e| {
                let mut buf = [0u8; 64];
                for f in &flows {
                    buf.copy_from_slice(f);
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
