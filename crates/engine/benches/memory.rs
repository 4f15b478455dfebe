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

fn main() {
    println!(
        "{:>12} {:>16} {:>18}",
        "sessions", "heap bytes", "bytes/session"
    );
    for &n in &[1_000u32, 100_000, 1_000_000] {
        let cfg = Nat44Config {
            inside: vec!["198.18.0.0/16".parse().unwrap()],
            pool: vec!["198.19.0.0/24".parse().unwrap()],
            limits: Limits {
                max_sessions: n + 10,
                max_sessions_per_host: n + 10,
                ..Limits::default()
            },
            ..Nat44Config::default()
        };
        let before = LIVE.load(Ordering::Relaxed);
        let mut e = Engine::new(EngineConfig {
            nat44: Some(cfg),
            seed: 1,
            ..EngineConfig::default()
        })
        .unwrap();
        let empty = LIVE.load(Ordering::Relaxed);
        let mut buf = udp([0; 4], 0, [0; 4], 0);
        for i in 0..n {
            // one session per flow: distinct inside host+port, one remote
            let host = i / 60000;
            let p = udp(
                [198, 18, (host >> 8) as u8, host as u8],
                1024 + (i % 60000) as u16,
                [203, 0, 113, 1],
                53,
            );
            buf.clear();
            buf.extend_from_slice(&p);
            assert_eq!(e.process_vec(Time(0), &mut buf), Verdict::Forward);
        }
        assert_eq!(e.stats().sessions, u64::from(n));
        let full = LIVE.load(Ordering::Relaxed);
        let per = (full - empty) as f64 / f64::from(n);
        println!("{n:>12} {:>16} {per:>18.1}", full - before);
        drop(e);
    }
}
