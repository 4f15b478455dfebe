//! What a TUN crossing costs, one system call per packet (the daemon's [`RecvBatch`] and
//! [`Tun::send`]) against io_uring batches (one `io_uring_enter` for a batch of writes, one for
//! a batch of reads): issue 25's question whether batching the TUN's system calls is the way
//! to a faster slow path.
//!
//! In a network namespace of its own (unshare(2): it goes when the process ends) it opens a
//! TUN device, routes 198.51.100.0/24 back into it and writes batches of 64 UDP packets of
//! 60 bytes from 198.18.5.1: the kernel forwards each (ip_rcv, a route lookup, the TTL
//! decrement) back into the device, whence it is read. Per packet that is one write, one
//! forward and one read -- the TUN path of the gateway without the wire, the NAPI threads and
//! the wake-ups. Prints the process's CPU time (user + system, getrusage) and wall time per
//! packet, for each mode, three times alternating.
//!
//! Needs root. `cargo run --release -p xlat-io --example tun_cost [ROUNDS]` (default 20,000
//! rounds of 64 packets a mode); pin it for steadier numbers (`taskset -c 1`).

use std::error::Error;
use std::os::fd::{AsFd, AsRawFd};
use std::process::Command;
use std::time::Instant;

use io_uring::{opcode, types, IoUring};
use xlat_io::tun::{RecvBatch, Tun};

const BATCH: usize = 64;

/// A 60-byte IPv4/UDP packet from 198.18.5.1 to 198.51.100.1 (header checksum set; the UDP
/// checksum 0 -- none -- which forwarding does not look at).
fn packet(sport: u16) -> Vec<u8> {
    let mut p = vec![0u8; 60];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&60u16.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[198, 18, 5, 1]);
    p[16..20].copy_from_slice(&[198, 51, 100, 1]);
    let sum = p[..20]
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum::<u32>();
    let folded = (sum & 0xffff) + (sum >> 16);
    let c = !(((folded & 0xffff) + (folded >> 16)) as u16);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&9u16.to_be_bytes());
    p[24..26].copy_from_slice(&40u16.to_be_bytes());
    p
}

/// This process's CPU time (user + system), ns.
fn cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |tv: libc::timeval| {
        u64::try_from(tv.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(tv.tv_usec).unwrap_or(0) * 1000
    };
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// One system call per packet, as the daemon does today: the writes, then reads until none
/// is left. Returns the packets read back.
fn per_packet(tun: &Tun, pkts: &[Vec<u8>], batch: &mut RecvBatch, rounds: usize) -> u64 {
    let mut got = 0u64;
    for _ in 0..rounds {
        for p in pkts {
            let _ = tun.send(p);
        }
        got += batch.fill(tun).map_or(0, |n| n as u64);
    }
    got
}

/// io_uring: a batch of writes in one `io_uring_enter`, then a batch of reads in another
/// (the descriptor is non-blocking, so a read with nothing waiting completes with EAGAIN).
fn uring(
    ring: &mut IoUring,
    pkts: &[Vec<u8>],
    bufs: &mut [Vec<u8>],
    rounds: usize,
) -> Result<u64, Box<dyn Error>> {
    let mut got = 0u64;
    for _ in 0..rounds {
        {
            let mut sq = ring.submission();
            for p in pkts {
                let e = opcode::Write::new(types::Fixed(0), p.as_ptr(), p.len() as u32).build();
                // SAFETY: the packet buffer outlives the request (we wait for all completions
                // below before it can be touched).
                unsafe { sq.push(&e)? };
            }
        }
        ring.submit_and_wait(pkts.len())?;
        ring.completion().for_each(drop);
        {
            let mut sq = ring.submission();
            for b in bufs.iter_mut() {
                let e = opcode::Read::new(types::Fixed(0), b.as_mut_ptr(), b.len() as u32).build();
                // SAFETY: each buffer is written by one request only and outlives it (all
                // completions are reaped below before the buffers are used again).
                unsafe { sq.push(&e)? };
            }
        }
        ring.submit_and_wait(bufs.len())?;
        got += ring.completion().filter(|c| c.result() > 0).count() as u64;
    }
    Ok(got)
}

fn sh(cmd: &str) -> Result<(), Box<dyn Error>> {
    if !Command::new("sh").arg("-c").arg(cmd).status()?.success() {
        return Err(format!("failed: {cmd}").into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    // SAFETY: unshare with a valid flag; from here on this process (and its children) have a
    // network namespace of their own, which the kernel removes when the last of them exits.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "unshare(CLONE_NEWNET): {} (needs root)",
            std::io::Error::last_os_error()
        )
        .into());
    }
    let tun = Tun::open("cost0")?;
    tun.set_up()?;
    sh(
        "ip addr add 198.18.0.1/24 dev cost0 && ip route add 198.51.100.0/24 dev cost0 && \
        ip route add 198.18.5.0/24 dev cost0 && sysctl -qw net.ipv4.ip_forward=1 \
        net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.cost0.send_redirects=0 \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.cost0.rp_filter=0",
    )?;
    let pkts: Vec<Vec<u8>> = (0..BATCH as u16).map(|i| packet(1024 + i)).collect();
    let mut batch = RecvBatch::new(BATCH);
    // Buffers as long as the daemon's (the TUN reads at most the MTU anyway).
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; 2048]).collect();
    let mut ring = IoUring::new(256)?;
    ring.submitter()
        .register_files(&[tun.as_fd().as_raw_fd()])?;
    for rep in 0..3 {
        for mode in ["read/write", "io_uring"] {
            let (c0, w0) = (cpu_ns(), Instant::now());
            let got = if mode == "io_uring" {
                uring(&mut ring, &pkts, &mut bufs, rounds)?
            } else {
                per_packet(&tun, &pkts, &mut batch, rounds)
            };
            let (cpu, wall) = (cpu_ns() - c0, w0.elapsed().as_nanos());
            let sent = (rounds * BATCH) as f64;
            println!(
                "{rep} {mode:<10}: {sent:.0} packets written, {got} read back, CPU {:.0} ns a packet, wall {:.0} ns",
                cpu as f64 / sent,
                wall as f64 / sent
            );
        }
    }
    Ok(())
}
