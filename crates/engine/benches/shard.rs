//! Multi-core scaling of per-worker engine shards (xlat_engine::shard): 1 thread, then 2,
//! each thread with its own `Engine::new_shard` and its own established NAT44 flows
//! (`XLAT_BENCH_SESSIONS` per worker, default 100,000; the inside hosts `Shards::of_outbound`
//! gives that worker), 64-byte UDP packets in batches of 64 through `process_batch`, in a
//! scattered order, for `XLAT_BENCH_SECS` (default 2) per run. Rounds alternate 1 and 2
//! threads (`XLAT_BENCH_ROUNDS`, default 3); prints Mpps per run and the scaling ratio
//! (throughput of 2 threads / throughput of 1) per round and its median, by wall clock and
//! per CPU second each worker got (the second is what a core per worker would give; on a
//! machine other work shares, the wall-clock ratio measures the scheduler too). No
//! criterion: the figure is a ratio of two aggregate rates measured back to back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use xlat_engine::shard::Shards;
use xlat_engine::*;
use xlat_wire::checksum;

const BATCH: usize = 64;
const BUF: usize = HEADROOM + 128;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn config(sessions: u32) -> EngineConfig {
    let mut cfg = Nat44Config {
        inside: vec!["198.18.0.0/15".parse().unwrap()],
        pool: vec!["203.0.112.0/22".parse().unwrap()],
        filtering: Filtering::EndpointIndependent,
        ..Nat44Config::default()
    };
    cfg.limits.max_sessions = sessions + 16;
    cfg.limits.max_sessions_per_host = sessions + 16;
    EngineConfig {
        nat44: Some(cfg),
        seed: 42,
        ..EngineConfig::default()
    }
}

/// A 64-byte UDP/IPv4 packet (20 + 8 + 36) with valid checksums.
fn udp64(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut p = vec![0xabu8; 64];
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

/// Worker `k`'s engine with `n` established flows: inside hosts 198.18.0.0/15 that
/// `of_outbound` gives worker k, 1,000 ports each, to 192.0.2.1:53; packets in a scattered
/// order.
fn worker(shards: &Shards, k: usize, n: u32) -> (Engine, Vec<Vec<u8>>) {
    let mut e = Engine::new_shard(config(n), shards, k).unwrap();
    let mut flows = Vec::with_capacity(n as usize);
    let mut host = 0u32;
    while flows.len() < n as usize {
        let a = (198u32 << 24 | 18 << 16) + host;
        host += 1;
        let probe = udp64(a.to_be_bytes(), 1024, [192, 0, 2, 1], 53);
        if shards.of_outbound(&probe) != Some(k) {
            continue;
        }
        for port in 1024..2024u16 {
            if flows.len() == n as usize {
                break;
            }
            flows.push(udp64(a.to_be_bytes(), port, [192, 0, 2, 1], 53));
        }
    }
    for p in &flows {
        let mut b = p.clone();
        assert_eq!(e.process_vec(Time(0), &mut b), Verdict::Forward);
    }
    let len = flows.len() as u64;
    let order: Vec<Vec<u8>> = (0..len)
        .map(|i| flows[((i * 7919) % len) as usize].clone())
        .collect();
    (e, order)
}

/// Runs batches until `until`; returns packets processed.
fn run(e: &mut Engine, pkts: &[Vec<u8>], until: Instant) -> u64 {
    let mut bufs = Box::new([[0u8; BUF]; BATCH]);
    let mut verdicts = [Verdict::Held; BATCH];
    let mut at = 0usize;
    let mut done = 0u64;
    while Instant::now() < until {
        for _ in 0..64 {
            let mut lens = [0usize; BATCH];
            for (buf, len) in bufs.iter_mut().zip(lens.iter_mut()) {
                let p = &pkts[at];
                at = if at + 1 == pkts.len() { 0 } else { at + 1 };
                buf[HEADROOM..HEADROOM + p.len()].copy_from_slice(p);
                *len = p.len();
            }
            let mut i = 0;
            let mut ps = bufs.each_mut().map(|b| {
                i += 1;
                PacketBuf::new(b, HEADROOM, lens[i - 1]).unwrap()
            });
            e.process_batch(Time(1), &mut ps, &mut verdicts);
            black_box(&verdicts);
            done += BATCH as u64;
        }
    }
    assert_eq!(e.counters().total_drops(), 0);
    done
}

/// CPU time this thread has used, in seconds.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Aggregate packets per second of `threads` workers, each with its own engine and flows:
/// per wall-clock second, and summed per worker over the CPU time each worker got (what the
/// workers would do with a core each, whatever else the machine runs).
fn measure(threads: usize, n: u32, secs: u64) -> (f64, f64) {
    let shards = Shards::new(&config(n), threads).unwrap();
    let barrier = Arc::new(Barrier::new(threads + 1));
    let start = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let hs: Vec<_> = (0..threads)
        .map(|k| {
            let (shards, barrier, start) = (shards.clone(), barrier.clone(), start.clone());
            std::thread::spawn(move || {
                let (mut e, pkts) = worker(&shards, k, n);
                // Warm up (page in the tables), then wait for everyone.
                run(&mut e, &pkts, Instant::now() + Duration::from_millis(300));
                barrier.wait();
                barrier.wait();
                let until = start.lock().unwrap().unwrap();
                let c0 = thread_cpu();
                let done = run(&mut e, &pkts, until);
                (done, thread_cpu() - c0)
            })
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    *start.lock().unwrap() = Some(t0 + Duration::from_secs(secs));
    barrier.wait();
    let res: Vec<(u64, f64)> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let wall = t0.elapsed().as_secs_f64();
    let total: u64 = res.iter().map(|r| r.0).sum();
    let per_cpu: f64 = res.iter().map(|&(p, c)| p as f64 / c.max(1e-9)).sum();
    (total as f64 / wall, per_cpu)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this once, briefly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n = env("XLAT_BENCH_SESSIONS", if quick { 1000 } else { 100_000 }) as u32;
    let secs = env("XLAT_BENCH_SECS", if quick { 0 } else { 2 });
    let rounds = env("XLAT_BENCH_ROUNDS", if quick { 1 } else { 3 });
    println!(
        "shard scaling: NAT44 established, {n} sessions per worker, batches of {BATCH}, {secs} s per run"
    );
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let (one, one_cpu) = measure(1, n, secs);
        let (two, two_cpu) = measure(2, n, secs);
        println!(
            "round {r}: wall clock: 1 thread {:.2} Mpps, 2 threads {:.2} Mpps, ratio {:.2}; \
             per CPU second: {:.2} / {:.2} Mpps, ratio {:.2}",
            one / 1e6,
            two / 1e6,
            two / one,
            one_cpu / 1e6,
            two_cpu / 1e6,
            two_cpu / one_cpu
        );
        wall.push(two / one);
        cpu.push(two_cpu / one_cpu);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "scaling ratio (2 threads / 1 thread), median of {rounds}: wall clock {:.2}, \
         per CPU second {:.2}",
        median(&mut wall),
        median(&mut cpu)
    );
}
