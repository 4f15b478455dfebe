//! The memory floor of the established-flow lane: what two dependent random cache lines per
//! packet cost on this machine with no translation work at all. Per packet it reads a random
//! 8-byte slot of an index sized as the engine's session index (two entries per session at
//! load 3/4) and then the 32-byte record the slot points to in a table sized as the session
//! slab, in batches of 32 staged as `Engine::process_batch` stages them (prefetch every slot;
//! read the slots and prefetch every record; read the records), tables on 2 MiB pages.
//!
//! `engine ns/packet at N sessions - engine ns/packet at 1,000` against this program's figure
//! at N says how much of the growth with table size is the memory system's (docs/PERFORMANCE.md).
//!
//! Usage: memfloor [SESSIONS] [write] (default 1,000,000; `write` stores to each record too).

#![allow(clippy::indexing_slicing)]

use std::time::Instant;

/// `words` u64s on 2 MiB-aligned anonymous memory marked for huge pages, made resident.
fn table(words: usize) -> &'static mut [u64] {
    let bytes = (words * 8).next_multiple_of(2 << 20);
    // SAFETY: a fresh private anonymous mapping of `bytes`, never unmapped (the program
    // exits), handed out once as a slice of the u64s it holds (zero-filled by the kernel).
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
        std::slice::from_raw_parts_mut(p.cast::<u64>(), bytes / 8)
    }
}

#[inline(always)]
fn prefetch(p: *const u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
}

fn main() {
    let sessions: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    // `write`: each packet also stores to its record, as the lane refreshes its session's
    // expiry (a dirty line to write back later).
    let write = std::env::args().nth(2).is_some_and(|a| a == "write");
    let slots = sessions * 2 * 4 / 3;
    let index = table(slots);
    let records = table(sessions * 4);
    // Each slot points to a random record (xorshift); every record's page is touched.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for s in index.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *s = x % sessions as u64;
    }
    records.fill(1);
    let packets = 40_000_000usize;
    let mut h = 12_345u64;
    let mut sum = 0u64;
    let t = Instant::now();
    for _ in 0..packets / 32 {
        let mut at = [0usize; 32];
        for a in at.iter_mut() {
            h = h.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(1);
            *a = (h >> 20) as usize % slots;
            prefetch(&index[*a]);
        }
        for a in at.iter_mut() {
            *a = index[*a] as usize * 4;
            prefetch(&records[*a]);
        }
        for a in at {
            sum = sum.wrapping_add(records[a]);
            if write {
                records[a] = sum;
            }
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / packets as f64;
    println!(
        "sessions={sessions} index={slots} slots{}: {ns:.1} ns per packet (two dependent random lines; check {sum})",
        if write { ", record written" } else { "" }
    );
}
