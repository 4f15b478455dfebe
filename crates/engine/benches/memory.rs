//! Bytes per NAT44 session, measured by counting what the allocator hands out (not by adding
//! up struct sizes): live heap after creating N sessions minus live heap before, divided by N.
//! Run: `cargo bench -p xlat-engine --bench memory`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use xlat_engine::*;
use xlat_wire::checksum;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&[0, 8, 0, 0]);
    p
}

/// A UDP/IPv6 packet with a valid checksum.
fn udp6(src: [u8; 16], sport: u16, dst: [u8; 16], dport: u16) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&[0, 8, 0, 0]);
    let mut ph = Vec::new();
    ph.extend_from_slice(&src);
    ph.extend_from_slice(&dst);
    ph.extend_from_slice(&[0, 0, 0, 8, 0, 0, 0, 17]);
    let c = checksum::finish(checksum::sum(&p[40..], checksum::sum(&ph, 0)));
    p[46..48].copy_from_slice(&c.to_be_bytes());
    p
}

fn limits(n: u32) -> Limits {
    Limits {
        max_sessions: n,
        max_sessions_per_host: n,
        ..Limits::default()
    }
}

/// Heap bytes counted by the allocator plus the bytes the engine mapped for its large tables
/// (`mapped_bytes`; an anonymous mapping, not seen by the allocator).
fn allocated() -> usize {
    LIVE.load(Ordering::Relaxed) + mapped_bytes()
}

/// Resident memory of the process (what the allocations cost once written).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .unwrap_or(0)
        * 4096
}

/// Bytes per session: everything the engine allocated (from before `Engine::new`, so tables
/// sized ahead to `limits.max_sessions` count) divided by the sessions; the part that grew
/// while the sessions were created; and, as a cross-check, the growth of resident memory.
fn measure(name: &str, n: u32, make: impl FnOnce() -> Engine, pkt: impl Fn(u32) -> Vec<u8>) {
    let before = allocated();
    let rss0 = rss();
    let mut e = make();
    let empty = allocated();
    let mut buf = Vec::with_capacity(128);
    for i in 0..n {
        buf.clear();
        buf.extend_from_slice(&pkt(i));
        let v = e.process_vec(Time(0), &mut buf);
        assert_eq!(v, Verdict::Forward, "{name} flow {i}");
    }
    assert_eq!(e.stats().sessions, u64::from(n));
    let full = allocated();
    let rss1 = rss();
    println!(
        "{name:>6} {n:>12} {:>16} {:>14.1} {:>14.1} {:>14.1}",
        full - before,
        (full - before) as f64 / f64::from(n),
        (full - empty) as f64 / f64::from(n),
        rss1.saturating_sub(rss0) as f64 / f64::from(n)
    );
    drop(e);
}

/// A NAT44 engine for `n` sessions.
fn nat44(n: u32) -> Engine {
    Engine::new(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/16".parse().unwrap()],
            pool: vec!["198.19.0.0/22".parse().unwrap()],
            limits: limits(n),
            ..Nat44Config::default()
        }),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// A NAT64 engine for `n` sessions.
fn nat64(n: u32) -> Engine {
    Engine::new(EngineConfig {
        nat64: Some(Nat64Config {
            prefix: "2001:db8:64::/96".parse().unwrap(),
            pool4: vec!["198.19.0.0/22".parse().unwrap()],
            limits: limits(n),
            ..Nat64Config::default()
        }),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn main() {
    // `XLAT_BENCH_SIZES=1000,1000000` picks the sizes.
    let sizes: Vec<u32> = std::env::var("XLAT_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000, 1_000_000, 10_000_000]);
    println!(
        "{:>6} {:>12} {:>16} {:>14} {:>14} {:>14}",
        "", "sessions", "bytes", "B/session", "grown B/sess", "RSS B/sess"
    );
    // "nat44": one session and one mapping per flow (what clients opening a new port per
    // connection make): inside endpoint i (host i / 1000, port 1024 + i % 1000), one remote.
    // "nat44²": two sessions per mapping (each inside endpoint talks to two remote addresses),
    // so every mapping has a record (one with a single session is folded into it).
    for (name, per_mapping) in [("nat44", 1), ("nat44²", 2)] {
        for &n in &sizes {
            measure(
                name,
                n,
                || nat44(n),
                |i| {
                    let ep = i / per_mapping;
                    let h = ((ep / 1000) as u16).to_be_bytes();
                    udp(
                        [198, 18, h[0], h[1]],
                        1024 + (ep % 1000) as u16,
                        [203, 0, 113, 1 + (i % per_mapping) as u8],
                        53,
                    )
                },
            );
        }
    }
    // "nat64": 1,000 sessions per IPv6 host (host i / 1000, port 1024 + i % 1000), one remote;
    // "nat64¹": one session per host, the most the host table can cost per session.
    for (name, per_host) in [("nat64", 1000), ("nat64¹", 1)] {
        for &n in &sizes {
            measure(
                name,
                n,
                || nat64(n),
                |i| {
                    let mut src = [0u8; 16];
                    src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
                    src[12..].copy_from_slice(&(i / per_host).to_be_bytes());
                    let mut dst = [0u8; 16];
                    dst[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0x64]);
                    dst[12..].copy_from_slice(&[203, 0, 113, 1]);
                    udp6(src, 1024 + (i % per_host) as u16, dst, 53)
                },
            );
        }
    }
}
