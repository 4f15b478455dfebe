//! Engine-only NAT64 (RFC 6146) and SIIT (RFC 7915) benchmarks at 1,000,000 flows: IPv6 ->
//! IPv4 and IPv4 -> IPv6 for established NAT64 sessions, and both directions of SIIT (which
//! keeps no per-flow state; the flows are there to make the packets differ). 64-byte packets
//! on the input side, batches of 64 through `Engine::process_batch`. `XLAT_BENCH_FLOWS` sets
//! the flow count. NAT64 runs twice: 1,000 sessions per IPv6 host, and one per host (a
//! host's record, which the session names by number, is then a line of its own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/arrivals.rs"]
mod arrivals;
#[path = "../tests/common/mod.rs"]
mod common;

use arrivals::Arrivals;
use common::{ip4, ip6, udp};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use xlat_engine::*;

const BATCH: usize = 64;
/// Room for a packet that grows by 20 bytes (IPv4 -> IPv6).
const BUF: usize = HEADROOM + 128;

fn flows() -> u32 {
    std::env::var("XLAT_BENCH_FLOWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

/// IPv6 host 2001:db8::(i / 1000), port 1024 + i % 1000.
fn host6(i: u32) -> ([u8; 16], u16) {
    host6_of(i, 1000)
}

/// IPv6 host 2001:db8::(i / per_host), port 1024 + i % per_host.
fn host6_of(i: u32, per_host: u32) -> ([u8; 16], u16) {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[12..].copy_from_slice(&(i / per_host).to_be_bytes());
    (a, 1024 + (i % per_host) as u16)
}

/// 203.0.113.1 in the pref64 2001:db8:64::/96.
fn remote6() -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0x64]);
    a[12..].copy_from_slice(&[203, 0, 113, 1]);
    a
}

const REMOTE4: [u8; 4] = [203, 0, 113, 1];

/// 64-byte UDP/IPv6 (40 + 8 + 16).
fn pkt6(src: [u8; 16], sport: u16) -> Vec<u8> {
    ip6(src, remote6(), 17, udp(sport, 53, &[0xab; 16]), 64)
}

/// 64-byte UDP/IPv4 (20 + 8 + 36).
fn pkt4(dst: [u8; 4], dport: u16) -> Vec<u8> {
    ip4(REMOTE4, dst, 17, udp(53, dport, &[0xab; 36]), 64, 0, 1)
}

struct Run {
    e: Engine,
    pkts: Arrivals,
    bufs: Box<[[u8; BUF]; BATCH]>,
    verdicts: [Verdict; BATCH],
}

impl Run {
    fn new(e: Engine, pkts: Arrivals) -> Run {
        Run {
            e,
            pkts,
            bufs: Box::new([[0u8; BUF]; BATCH]),
            verdicts: [Verdict::Held; BATCH],
        }
    }
    fn batch(&mut self) {
        for buf in self.bufs.iter_mut() {
            self.pkts.write_next(&mut buf[HEADROOM..]);
        }
        let len = self.pkts.len();
        let mut ps = self
            .bufs
            .each_mut()
            .map(|b| PacketBuf::new(b, HEADROOM, len).unwrap());
        self.e.process_batch(Time(1), &mut ps, &mut self.verdicts);
        black_box(&self.verdicts);
    }
}

/// Flow `i` of `n` in a scattered visiting order, as real traffic comes.
fn scattered(n: u32, i: usize) -> u32 {
    ((i as u64 * 7919) % u64::from(n)) as u32
}

fn nat64(c: &mut Criterion) {
    nat64_with(c, 1000, "sessions");
    nat64_with(c, 1, "sessions_one_per_host");
}

/// NAT64 both ways at `per_host` sessions per IPv6 host; `label` names the runs.
fn nat64_with(c: &mut Criterion, per_host: u32, label: &str) {
    let n = flows();
    let mut g = c.benchmark_group("nat64_established_udp64");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    let cfg = Nat64Config {
        prefix: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["198.19.0.0/22".parse().unwrap()],
        filtering: Filtering::EndpointIndependent,
        limits: Limits {
            max_sessions: n + 10,
            max_sessions_per_host: n + 10,
            ..Limits::default()
        },
        ..Nat64Config::default()
    };
    let mut e = Engine::new(EngineConfig {
        nat64: Some(cfg),
        seed: 42,
        ..EngineConfig::default()
    })
    .unwrap();
    // Open every session from the IPv6 side; its outside endpoint gives the return packet.
    let mut ext = vec![([0u8; 4], 0u16); n as usize];
    for i in 0..n {
        let (a, p) = host6_of(i, per_host);
        let mut b = pkt6(a, p);
        assert_eq!(e.process_vec(Time(0), &mut b), Verdict::Forward);
        ext[i as usize] = (
            b[12..16].try_into().unwrap(),
            u16::from_be_bytes([b[20], b[21]]),
        );
    }
    let out = Arrivals::new(n as usize, |i| {
        let (a, p) = host6_of(scattered(n, i), per_host);
        pkt6(a, p)
    });
    let back = Arrivals::new(n as usize, |i| {
        let (a, p) = ext[scattered(n, i) as usize];
        pkt4(a, p)
    });
    drop(ext);
    let mut r = Run::new(e, out);
    g.bench_function(format!("{n}_{label}_6to4_batch"), |b| b.iter(|| r.batch()));
    r.pkts = back;
    g.bench_function(format!("{n}_{label}_4to6_batch"), |b| b.iter(|| r.batch()));
    assert_eq!(r.e.counters().total_drops(), 0);
    g.finish();
}

fn siit(c: &mut Criterion) {
    let n = flows();
    let mut g = c.benchmark_group("siit_udp64");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    // IPv6 hosts 2001:db8:1::/112 are 198.51.0.0/16 by EAM; IPv4 hosts are in 2001:db8:64::/96.
    let cfg = SiitConfig {
        prefix: Some("2001:db8:64::/96".parse().unwrap()),
        eam: vec![Eam {
            ipv4: "198.51.0.0/16".parse().unwrap(),
            ipv6: "2001:db8:1::/112".parse().unwrap(),
        }],
        ..SiitConfig::default()
    };
    let e = Engine::new(EngineConfig {
        siit: Some(cfg),
        seed: 42,
        ..EngineConfig::default()
    })
    .unwrap();
    let h6 = |i: u32| {
        let (mut a, p) = host6(i);
        a[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1]);
        a[12..14].copy_from_slice(&[0, 0]);
        a[14..].copy_from_slice(&((i / 1000) as u16).to_be_bytes());
        (a, p)
    };
    let out = Arrivals::new(n as usize, |i| {
        let (a, p) = h6(scattered(n, i));
        pkt6(a, p)
    });
    let back = Arrivals::new(n as usize, |i| {
        let f = scattered(n, i);
        let h = ((f / 1000) as u16).to_be_bytes();
        pkt4([198, 51, h[0], h[1]], 1024 + (f % 1000) as u16)
    });
    let mut r = Run::new(e, out);
    g.bench_function(format!("{n}_flows_6to4_batch"), |b| b.iter(|| r.batch()));
    r.pkts = back;
    g.bench_function(format!("{n}_flows_4to6_batch"), |b| b.iter(|| r.batch()));
    assert_eq!(r.e.counters().total_drops(), 0);
    g.finish();
}

criterion_group!(benches, nat64, siit);
criterion_main!(benches);
