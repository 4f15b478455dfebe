//! New-session rate while the table fills to 10,000,000 sessions (NAT44 and NAT64, port
//! allocation included; one mapping per session, the worst case). Prints sessions per second
//! for each tenth of the fill, so a rate that falls as the table grows shows, and the longest
//! batch of the fill: a table that grows all at once (a rehash) holds up the batch that makes
//! it grow. Packets are built ahead in chunks and only the engine calls are timed. The rates
//! are printed twice: by wall clock, then per CPU second of the thread (what the engine does
//! when nothing else takes its core; on a shared VM the wall-clock rates move 20 % from run
//! to run).
//! Workloads (`XLAT_BENCH_FILL_WORKLOADS=nat44,nat64,...`, default all): `nat44` and `nat64`,
//! 1,000 sessions per inside host; `nat64¹`, one session per IPv6 host (the host table grows
//! with the sessions); `nat44²`, two sessions per mapping to two remote addresses (every
//! mapping's second address goes to the filter's table of extra remote addresses).
//! Packets go through `Engine::process_batch` in batches of 64, as the daemon passes each TUN
//! read batch; `XLAT_BENCH_FILL_BATCH=1` calls `Engine::process` per packet instead (what
//! this bench did before).
//! After each fill, the expiry sweep drains the table in the daemon's per-batch passes
//! (`Engine::expire_step`) and prints how long a pass takes (nothing due, then everything
//! due) next to how long a batch of 64 established packets takes at that table size.
//! Run: `cargo bench -p xlat-engine --bench fill` (`XLAT_BENCH_FILL=1000000` for a smaller fill;
//! `XLAT_BENCH_PREFAULT=1` / `=0` for only prefaulted / only first-touch tables;
//! `XLAT_BENCH_FILL_BATCH_CPU=1` also times each batch in CPU time, to tell a long batch the
//! engine took from one the VM took).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};
use xlat_engine::*;

const CHUNK: u32 = 100_000;

/// This thread's CPU time: unlike wall time, it leaves out the time the thread was preempted
/// (another process on its core) or its vCPU descheduled by the host (the kernel accounts
/// steal time apart), so on a shared VM it is the engine's own rate.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn nat44(n: u32) -> Engine {
    let cfg = Nat44Config {
        inside: vec!["198.18.0.0/16".parse().unwrap()],
        pool: vec!["198.19.0.0/22".parse().unwrap()],
        limits: Limits {
            max_sessions: n,
            max_sessions_per_host: n,
            ..Limits::default()
        },
        ..Nat44Config::default()
    };
    Engine::new(EngineConfig {
        nat44: Some(cfg),
        seed: 7,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn nat64(n: u32) -> Engine {
    let cfg = Nat64Config {
        prefix: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["198.19.0.0/22".parse().unwrap()],
        limits: Limits {
            max_sessions: n,
            max_sessions_per_host: n,
            ..Limits::default()
        },
        ..Nat64Config::default()
    };
    Engine::new(EngineConfig {
        nat64: Some(cfg),
        seed: 7,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// Flow i of NAT44: inside host 198.18.x.y = i / 1000, port 1024 + i % 1000, to 203.0.113.1:53.
fn pkt44(i: u32) -> Vec<u8> {
    let h = ((i / 1000) as u16).to_be_bytes();
    common::ip4(
        [198, 18, h[0], h[1]],
        [203, 0, 113, 1],
        17,
        common::udp(1024 + (i % 1000) as u16, 53, &[0xab; 36]),
        64,
        0,
        1,
    )
}

/// Flow i of NAT64: 2001:db8::(i / 1000) port 1024 + i % 1000, to 2001:db8:64::203.0.113.1.
fn pkt64(i: u32) -> Vec<u8> {
    pkt64_from(i / 1000, 1024 + (i % 1000) as u16)
}

/// NAT64 flow from host 2001:db8::`host` port `port` to 2001:db8:64::203.0.113.1 port 53.
fn pkt64_from(host: u32, port: u16) -> Vec<u8> {
    let mut src = [0u8; 16];
    src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    src[12..].copy_from_slice(&host.to_be_bytes());
    let mut dst = [0u8; 16];
    dst[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0x64]);
    dst[12..].copy_from_slice(&[203, 0, 113, 1]);
    common::ip6(src, dst, 17, common::udp(port, 53, &[0xab; 16]), 64)
}

/// Flow i of `nat44²`: mapping i / 2 (host 198.18.x.y = i / 2000, port 1024 + i / 2 % 1000)
/// to 203.0.113.1 or .2 (i % 2), port 53.
fn pkt44_two(i: u32) -> Vec<u8> {
    let m = i / 2;
    let h = ((m / 1000) as u16).to_be_bytes();
    common::ip4(
        [198, 18, h[0], h[1]],
        [203, 0, 113, 1 + (i % 2) as u8],
        17,
        common::udp(1024 + (m % 1000) as u16, 53, &[0xab; 36]),
        64,
        0,
        1,
    )
}

/// Flow i of `nat64¹`: host 2001:db8::1:0:0 + i, port 1024, to 2001:db8:64::203.0.113.1.
fn pkt64_one(i: u32) -> Vec<u8> {
    pkt64_from(i | 1 << 31, 1024)
}

fn fill(name: &str, n: u32, mut e: Engine, pkt: fn(u32) -> Vec<u8>) {
    let batch: usize = std::env::var("XLAT_BENCH_FILL_BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let mut verdicts = vec![Verdict::Held; batch.max(1)];
    let mut bufs = vec![[0u8; HEADROOM + 128]; CHUNK as usize];
    let mut lens = vec![0usize; CHUNK as usize];
    let tenth = (n / 10).max(1);
    let mut spent = Duration::ZERO;
    let mut total = Duration::ZERO;
    // The same in thread CPU time, printed after the wall-clock rates.
    let (mut cpu_spent, mut cpu_total) = (Duration::ZERO, Duration::ZERO);
    let mut cpu_tenths = Vec::new();
    // The longest batch (or packet, batch 1) and how many sessions the table held before it,
    // by wall clock and, with `XLAT_BENCH_FILL_BATCH_CPU=1`, by the thread's CPU time: a
    // batch long by wall clock only was preempted or its vCPU descheduled, one long in CPU
    // time too was the engine's. Off by default: reading the thread's CPU clock is a system
    // call (~0.5 us on this VM), two per batch would lower the rates by ~8 %.
    let batch_cpu = std::env::var_os("XLAT_BENCH_FILL_BATCH_CPU").is_some_and(|v| v == "1");
    let cpu_now = || {
        if batch_cpu {
            thread_cpu()
        } else {
            Duration::ZERO
        }
    };
    let mut longest = (Duration::ZERO, 0u32);
    let mut longest_cpu = (Duration::ZERO, 0u32);
    // Batches (packets, batch 1) over half a millisecond: 25 times a batch's usual time.
    let mut slow = 0u32;
    const SLOW: Duration = Duration::from_micros(500);
    let mut done = 0u32;
    let mut since = 0u32;
    print!("{name:>6} M sessions/s per tenth:");
    while done < n {
        let k = CHUNK.min(n - done);
        for j in 0..k {
            let p = pkt(done + j);
            bufs[j as usize][HEADROOM..HEADROOM + p.len()].copy_from_slice(&p);
            lens[j as usize] = p.len();
        }
        let t = Instant::now();
        let c = thread_cpu();
        if batch <= 1 {
            for j in 0..k as usize {
                let mut b = PacketBuf::new(&mut bufs[j], HEADROOM, lens[j]).unwrap();
                let (c, t) = (cpu_now(), Instant::now());
                e.process(Time(0), &mut b);
                let (d, dc) = (t.elapsed(), cpu_now().saturating_sub(c));
                longest = longest.max((d, done + j as u32));
                longest_cpu = longest_cpu.max((dc, done + j as u32));
                slow += u32::from(d > SLOW);
            }
        } else {
            for (i, (bs, ls)) in bufs[..k as usize]
                .chunks_mut(batch)
                .zip(lens[..k as usize].chunks(batch))
                .enumerate()
            {
                let mut pkts: Vec<PacketBuf> = bs
                    .iter_mut()
                    .zip(ls)
                    .map(|(b, &l)| PacketBuf::new(b, HEADROOM, l).unwrap())
                    .collect();
                let n = pkts.len();
                let (c, t) = (cpu_now(), Instant::now());
                e.process_batch(Time(0), &mut pkts, &mut verdicts[..n]);
                let (d, dc) = (t.elapsed(), cpu_now().saturating_sub(c));
                longest = longest.max((d, done + (i * batch) as u32));
                longest_cpu = longest_cpu.max((dc, done + (i * batch) as u32));
                slow += u32::from(d > SLOW);
            }
        }
        let d = t.elapsed();
        let dc = thread_cpu().saturating_sub(c);
        spent += d;
        total += d;
        cpu_spent += dc;
        cpu_total += dc;
        done += k;
        since += k;
        if since >= tenth || done == n {
            print!(" {:.2}", f64::from(since) / spent.as_secs_f64() / 1e6);
            cpu_tenths.push(f64::from(since) / cpu_spent.as_secs_f64() / 1e6);
            spent = Duration::ZERO;
            cpu_spent = Duration::ZERO;
            since = 0;
        }
    }
    let st = e.stats();
    println!(
        " | overall {:.2} M/s, {} sessions; longest batch {:.2} ms (at {} sessions), {slow} over 0.5 ms",
        f64::from(n) / total.as_secs_f64() / 1e6,
        st.sessions,
        longest.0.as_secs_f64() * 1e3,
        longest.1
    );
    let tenths: Vec<String> = cpu_tenths.iter().map(|r| format!("{r:.2}")).collect();
    print!(
        "{name:>6} per CPU second, by tenth: {} | overall {:.2} M/s",
        tenths.join(" "),
        f64::from(n) / cpu_total.as_secs_f64() / 1e6,
    );
    if batch_cpu {
        print!(
            "; longest batch {:.2} ms of CPU time (at {} sessions)",
            longest_cpu.0.as_secs_f64() * 1e3,
            longest_cpu.1
        );
    }
    println!();
    assert_eq!(st.sessions, u64::from(n), "every flow opened a session");
    drain(name, e, n, pkt);
}

/// The expiry sweep over the full table, in the daemon's per-batch passes under load
/// (`Engine::expire_step(now, true)` after every full batch): first while no session is due
/// (the scan alone, as many passes as a full drain takes, so the two tails compare; as
/// `Engine::expire` with the step's budget under load, since the step itself rests for a
/// second after a cycle that found nothing due and this clock stands still), then
/// with every session past its timeout (a mass expiry, e.g. a burst of flows gone idle). A
/// pass runs between two batches, so its longest time is how long expiry can hold up the
/// fast path; the target is no more than one batch, timed here first: 64 established
/// packets of random flows of the same full table.
fn drain(name: &str, mut e: Engine, n: u32, pkt: fn(u32) -> Vec<u8>) {
    let batch = batch_times(&mut e, n, pkt);
    // The first step after the fill would follow its 10M new sessions; start from here.
    e.expire_step(Time::from_secs(1), true);
    let mut quiet = Vec::new();
    for _ in 0..(n as usize / 4).max(2000) {
        let t = Instant::now();
        e.expire(Time::from_secs(1), EXPIRE_STEP_BASE);
        quiet.push(t.elapsed());
    }
    let mut passes = Vec::new();
    let mut removed = 0usize;
    let late = Time::from_secs(100_000);
    let t0 = Instant::now();
    while removed < n as usize && passes.len() < 100_000_000 {
        let t = Instant::now();
        removed += e.expire_step(late, true);
        passes.push(t.elapsed());
    }
    let all = t0.elapsed();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    quiet.sort();
    passes.sort();
    let pct = |v: &[Duration], p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len() - 1))
            .copied()
            .unwrap_or_default()
    };
    let b50 = us(pct(&batch, 0.5));
    println!(
        "{name:>6} a batch of 64 established packets: median {b50:.1} us, p99 {:.1}",
        us(pct(&batch, 0.99))
    );
    println!(
        "{name:>6} expiry passes (the step's 128 units): nothing due ({} passes) median {:.1} us, p99 {:.1}, p99.9 {:.1}, max {:.1}, {} over 100 us; all due ({} passes) median {:.1} us, p99 {:.1} ({:.2} batch), p99.9 {:.1}, max {:.1}, {} over 100 us; {:.2} M sessions removed/s",
        quiet.len(),
        us(pct(&quiet, 0.5)),
        us(pct(&quiet, 0.99)),
        us(pct(&quiet, 0.999)),
        us(pct(&quiet, 1.0)),
        quiet.iter().filter(|d| us(**d) > 100.0).count(),
        passes.len(),
        us(pct(&passes, 0.5)),
        us(pct(&passes, 0.99)),
        us(pct(&passes, 0.99)) / b50,
        us(pct(&passes, 0.999)),
        us(pct(&passes, 1.0)),
        passes.iter().filter(|d| us(**d) > 100.0).count(),
        removed as f64 / all.as_secs_f64() / 1e6
    );
    assert_eq!(e.stats().sessions, 0, "the sweep removed every session");
}

/// Times 2,000 batches of 64 established packets, each of a random flow of the `n` in the
/// table: 128k draws, so few flows come twice (a flow seen a moment ago would find its
/// session in cache); packets built ahead, only `process_batch` timed.
fn batch_times(e: &mut Engine, n: u32, pkt: fn(u32) -> Vec<u8>) -> Vec<Duration> {
    const BATCHES: usize = 2000;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let pool: Vec<Vec<u8>> = (0..64 * BATCHES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            pkt((x % u64::from(n)) as u32)
        })
        .collect();
    let mut bufs = vec![[0u8; HEADROOM + 128]; 64];
    let mut verdicts = vec![Verdict::Held; 64];
    let mut times = Vec::with_capacity(BATCHES);
    for ps in pool.chunks(64) {
        for (b, p) in bufs.iter_mut().zip(ps) {
            b[HEADROOM..HEADROOM + p.len()].copy_from_slice(p);
        }
        let mut pkts: Vec<PacketBuf> = bufs
            .iter_mut()
            .zip(ps)
            .map(|(b, p)| PacketBuf::new(b, HEADROOM, p.len()).unwrap())
            .collect();
        let t = Instant::now();
        e.process_batch(Time(0), &mut pkts, &mut verdicts);
        times.push(t.elapsed());
        assert!(verdicts.iter().all(|v| *v == Verdict::Forward));
    }
    times.sort();
    times
}

/// A fill's name, its engine for n sessions and its flow i's packet.
type Workload = (&'static str, fn(u32) -> Engine, fn(u32) -> Vec<u8>);

fn main() {
    let n: u32 = std::env::var("XLAT_BENCH_FILL")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    // Prefaulted tables (`[limits] prefault = true`, what a gateway sized for millions of
    // sessions runs with) first, then tables whose pages the kernel supplies on first touch
    // (the default): the difference is the kernel's page faults (zeroing 2 MiB huge pages)
    // taken on the fast path. `XLAT_BENCH_PREFAULT=1` or `=0` runs one of the two.
    let modes: &[bool] = match std::env::var("XLAT_BENCH_PREFAULT").as_deref() {
        Ok("1") => &[true],
        Ok("0") => &[false],
        _ => &[true, false],
    };
    let workloads: [Workload; 4] = [
        ("nat44", nat44, pkt44),
        ("nat64", nat64, pkt64),
        ("nat64¹", nat64, pkt64_one),
        ("nat44²", nat44, pkt44_two),
    ];
    let chosen = std::env::var("XLAT_BENCH_FILL_WORKLOADS").unwrap_or_default();
    let chosen: Vec<&str> = chosen.split(',').filter(|w| !w.is_empty()).collect();
    for &pf in modes {
        set_prefault(pf);
        println!("prefault = {pf}");
        for &(name, engine, pkt) in &workloads {
            if chosen.is_empty() || chosen.contains(&name) {
                fill(name, n, engine(n), pkt);
            }
        }
    }
}
