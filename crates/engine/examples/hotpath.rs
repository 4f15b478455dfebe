//! A deterministic driver for instruction counting (scripts/icount.sh runs it under
//! callgrind): builds `SESSIONS` NAT44 sessions, then translates `PACKETS` established-flow
//! packets in batches of 32. Instruction counts of two runs with different `PACKETS` give the
//! instructions per packet, independent of machine noise.
//!
//! `nat64out` / `nat64in` do the same for NAT64 (RFC 6146) sessions: 64-byte UDP/IPv6
//! packets out, 64-byte UDP/IPv4 packets back in, batches of 32.
//!
//! `fill44` / `fill64` count session creation instead: a table sized for SESSIONS, PACKETS
//! new flows (each its own inside endpoint, so its own mapping) in batches of 32.
//!
//! Also prints the loop's ns per packet in thread CPU time (steadier than wall time when
//! other work shares the cores) and wall time.
//!
//! `listing` times `xlat show sessions` inside the engine instead: one whole listing of the
//! SESSIONS (what a worker did in one turn before paging) against the pages that replace it
//! (the longest one is the longest a worker now spends on a listing between two batches).
//!
//! Usage: hotpath SESSIONS PACKETS [batch|single|nat64out|nat64in|fill44|fill64|listing]
//! (`XLAT_PREFAULT=1`: tables made resident before the timed loop; `XLAT_PER_HOST=N`: NAT64
//! flows per IPv6 host, default 60,000; `XLAT_EVENTS=1`: the state-event stream on and
//! drained after every batch, as a worker with `[logging]` or `[sync]` runs it;
//! `XLAT_PORT_BLOCK=N`: NAT44 ports handed out in blocks of N, `port_block_size`).

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

/// Flows per IPv6 host in the NAT64 modes: `XLAT_PER_HOST` (default 60,000; 1 makes every
/// flow its own host, the host table's worst case).
fn per_host() -> u32 {
    static K: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *K.get_or_init(|| {
        std::env::var("XLAT_PER_HOST")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60_000u32)
            .clamp(1, 60_000)
    })
}

/// 64-byte UDP/IPv6 from host `i` (2001:db8::(i / per_host), port 1024 + i % per_host) to
/// 203.0.113.1 in the pref64 2001:db8:64::/96.
fn udp6(i: u32) -> [u8; 64] {
    let k = per_host();
    let mut p = [0u8; 64];
    p[..8].copy_from_slice(&[0x60, 0, 0, 0, 0, 24, 17, 64]);
    p[8..12].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    p[20..24].copy_from_slice(&(i / k).to_be_bytes());
    p[24..30].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0x64]);
    p[36..40].copy_from_slice(&[203, 0, 113, 1]);
    p[40..42].copy_from_slice(&(1024 + (i % k) as u16).to_be_bytes());
    p[42..44].copy_from_slice(&53u16.to_be_bytes());
    p[44..46].copy_from_slice(&24u16.to_be_bytes());
    let mut ph = [0u8; 40];
    ph[..32].copy_from_slice(&p[8..40]);
    ph[35] = 24;
    ph[39] = 17;
    let c = checksum::finish(checksum::sum(&p[40..], checksum::sum(&ph, 0)));
    p[46..48].copy_from_slice(&c.to_be_bytes());
    p
}

/// 64-byte UDP/IPv4 from 203.0.113.1:53 to a NAT64 session's outside endpoint.
fn udp4_in(dst: [u8; 4], dport: u16) -> [u8; 64] {
    let mut p = [0u8; 64];
    p[..12].copy_from_slice(&[0x45, 0, 0, 64, 0, 1, 0x40, 0, 64, 17, 0, 0]);
    p[12..16].copy_from_slice(&[203, 0, 113, 1]);
    p[16..20].copy_from_slice(&dst);
    let c = checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&53u16.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&44u16.to_be_bytes());
    let mut ph = [0u8; 12];
    ph[..8].copy_from_slice(&p[12..20]);
    ph[9] = 17;
    ph[11] = 44;
    let c = checksum::finish(checksum::sum(&p[20..], checksum::sum(&ph, 0)));
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}

/// NAT64: `sessions` opened from the IPv6 side, then `packets` established packets out
/// (`inbound` false) or back in, in batches of 32.
fn nat64(sessions: u32, packets: u32, inbound: bool) {
    let cfg = Nat64Config {
        prefix: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["198.19.0.0/22".parse().unwrap()],
        limits: Limits {
            max_sessions: sessions + 10,
            max_sessions_per_host: sessions + 10,
            ..Limits::default()
        },
        ..Nat64Config::default()
    };
    let mut e = engine(EngineConfig {
        nat64: Some(cfg),
        seed: 3,
        ..EngineConfig::default()
    });
    let mut out = Vec::with_capacity(sessions as usize);
    let mut back = Vec::with_capacity(sessions as usize);
    for i in 0..sessions {
        out.push(udp6(i));
        let mut p = udp6(i).to_vec();
        assert_eq!(e.process_vec(Time(0), &mut p), Verdict::Forward);
        back.push(udp4_in(
            p[12..16].try_into().unwrap(),
            u16::from_be_bytes([p[20], p[21]]),
        ));
    }
    // The packets in visiting order (scattered over the sessions), read sequentially as a
    // driver reads its receive ring.
    let from = if inbound { &back } else { &out };
    let seq: Vec<[u8; 64]> = (0..sessions)
        .map(|i| from[(u64::from(i) * 7919 % u64::from(sessions)) as usize])
        .collect();
    drop((out, back));
    timed_batches(&mut e, packets, |i| seq[(i % sessions) as usize]);
}

/// `XLAT_EVENTS=1`: the engine's state events on (bounded as the daemon bounds them).
fn events_on() -> bool {
    std::env::var_os("XLAT_EVENTS").is_some_and(|v| v == "1")
}

/// `XLAT_PORT_BLOCK=N`: NAT44 port blocks of N ports (0: none).
fn port_block() -> u16 {
    std::env::var("XLAT_PORT_BLOCK")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The engine of a mode, with the event stream on when asked.
fn engine(cfg: EngineConfig) -> Engine {
    let mut e = Engine::new(cfg).unwrap();
    if events_on() {
        e.set_events(4096);
    }
    e
}

/// Times `packets` 64-byte packets (`packet(i)` is the i-th) through `process_batch` in
/// batches of 32 behind [`HEADROOM`], and prints the rate and how many were forwarded.
fn timed_batches(e: &mut Engine, packets: u32, mut packet: impl FnMut(u32) -> [u8; 64]) {
    let mut bufs = [[0u8; HEADROOM + 64]; 32];
    let mut verdicts = [Verdict::Held; 32];
    let mut i = 0u32;
    let mut forwarded = 0u64;
    let mut events = Events::default();
    let t0 = clocks();
    while i < packets {
        for b in bufs.iter_mut() {
            b[HEADROOM..].copy_from_slice(&packet(i));
            i += 1;
        }
        let mut pkts = bufs
            .each_mut()
            .map(|b| PacketBuf::new(b, HEADROOM, 64).unwrap());
        e.process_batch(Time(1), &mut pkts, &mut verdicts);
        forwarded += verdicts.iter().filter(|v| **v == Verdict::Forward).count() as u64;
        events.drain(e);
    }
    report(t0, i);
    println!("forwarded {forwarded}");
    events.print();
}

/// Drains the engine's events after a batch, as a worker does, and counts them by kind
/// (an array slot each: the count stays out of what callgrind measures).
#[derive(Default)]
struct Events {
    buf: Vec<events::StateEvent>,
    kinds: [u64; KINDS.len()],
}

/// The event kinds, in [`slot`]'s order.
const KINDS: [&str; 12] = [
    "session created",
    "session deleted",
    "mapping created",
    "mapping deleted",
    "host bound",
    "host unbound",
    "addresses exhausted",
    "ports exhausted",
    "quota exceeded",
    "port block allocated",
    "port block released",
    "fast path",
];

fn slot(k: events::EventKind) -> usize {
    use events::EventKind as K;
    match k {
        K::SessionCreated => 0,
        K::SessionDeleted(_) => 1,
        K::MappingCreated => 2,
        K::MappingDeleted => 3,
        K::HostBound => 4,
        K::HostUnbound => 5,
        K::AddressesExhausted => 6,
        K::PortsExhausted => 7,
        K::QuotaExceeded => 8,
        K::PortBlockAllocated => 9,
        K::PortBlockReleased => 10,
        K::FastPath(_) => 11,
    }
}

impl Events {
    fn drain(&mut self, e: &mut Engine) {
        if events_on() {
            e.drain_events(&mut self.buf);
            // A mapping folded into its session's event counts as its own (the log thread
            // unfolds it, off the worker: `StateEvent::unfolded`).
            for ev in self.buf.drain(..) {
                if let Some(n) = self.kinds.get_mut(slot(ev.kind)) {
                    *n += 1;
                }
                if ev.with_mapping {
                    let m = slot(ev.mapping_event().map_or(ev.kind, |m| m.kind));
                    if let Some(n) = self.kinds.get_mut(m) {
                        *n += 1;
                    }
                }
            }
        }
    }

    fn print(&self) {
        if events_on() {
            let total: u64 = self.kinds.iter().sum();
            let kinds: Vec<String> = KINDS
                .iter()
                .zip(self.kinds)
                .filter(|(_, n)| *n > 0)
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            println!("events {total}: {}", kinds.join(", "));
        }
    }
}

/// `packets` new NAT44 (`v6` false) or NAT64 flows into a table sized for `sessions`.
fn fill(sessions: u32, packets: u32, v6: bool) {
    let limits = Limits {
        max_sessions: sessions.max(packets) + 10,
        max_sessions_per_host: sessions.max(packets) + 10,
        port_block_size: port_block(),
        ..Limits::default()
    };
    let mut e = engine(EngineConfig {
        nat44: (!v6).then(|| Nat44Config {
            inside: vec!["198.18.0.0/16".parse().unwrap()],
            pool: vec!["198.19.0.0/22".parse().unwrap()],
            limits,
            ..Nat44Config::default()
        }),
        nat64: v6.then(|| Nat64Config {
            prefix: "2001:db8:64::/96".parse().unwrap(),
            pool4: vec!["198.19.0.0/22".parse().unwrap()],
            limits,
            ..Nat64Config::default()
        }),
        seed: 3,
        ..EngineConfig::default()
    });
    timed_batches(&mut e, packets, |i| {
        if v6 {
            udp6(i)
        } else {
            let h = i / 1000;
            udp64([198, 18, (h >> 8) as u8, h as u8], 1024 + (i % 1000) as u16)
        }
    });
}

/// `sessions` NAT44 sessions, then one whole listing against the pages of a paged one.
fn listing(sessions: u32) {
    let mut e = engine(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/16".parse().unwrap()],
            pool: vec!["198.19.0.0/22".parse().unwrap()],
            limits: Limits {
                max_sessions: sessions + 10,
                max_sessions_per_host: sessions + 10,
                ..Limits::default()
            },
            ..Nat44Config::default()
        }),
        seed: 3,
        ..EngineConfig::default()
    });
    for i in 0..sessions {
        let h = i / 1000;
        let mut p = udp64([198, 18, (h >> 8) as u8, h as u8], 1024 + (i % 1000) as u16);
        assert_eq!(
            e.process(Time(0), &mut PacketBuf::whole(&mut p)),
            Verdict::Forward
        );
    }
    let all = SessionFilter::default();
    let t = std::time::Instant::now();
    let whole = e.sessions_matching(Time(1), &all, usize::MAX).len();
    let one_turn = t.elapsed();
    let (mut rows, mut pages, mut longest) = (0, 0, std::time::Duration::ZERO);
    let mut at = Some(SessionCursor::default());
    let t = std::time::Instant::now();
    while let Some(from) = at {
        let p0 = std::time::Instant::now();
        let (page, next) = e.sessions_page(Time(1), &all, from, 4096);
        longest = longest.max(p0.elapsed());
        rows += page.len();
        pages += 1;
        at = next;
    }
    println!(
        "whole listing: {whole} rows in one turn of {:.1} ms; paged: {rows} rows in {pages} pages, {:.1} ms in all, the longest page {:.2} ms",
        one_turn.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3,
        longest.as_secs_f64() * 1e3
    );
}

/// Thread CPU time in ns/// Thread CPU time in ns (time this thread ran, whatever else the machine does) and wall
/// time, for the timed part's rate in the printout.
fn clocks() -> (u64, std::time::Instant) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
        std::time::Instant::now(),
    )
}

/// Prints ns per packet (thread CPU time and wall time) since `t0` for `n` packets.
fn report(t0: (u64, std::time::Instant), n: u32) {
    let (cpu, _) = clocks();
    let wall = t0.1.elapsed().as_nanos() as f64;
    let cpu = (cpu - t0.0) as f64;
    println!(
        "cpu {:.1} ns/pkt ({:.2} Mpps per CPU second), wall {:.1} ns/pkt",
        cpu / f64::from(n),
        f64::from(n) / cpu * 1e3,
        wall / f64::from(n)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sessions: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    // XLAT_PREFAULT=1: tables resident when built (`[limits] prefault`), so page faults and
    // huge-page zeroing stay out of the timed loop.
    if std::env::var_os("XLAT_PREFAULT").is_some_and(|v| v == "1") {
        set_prefault(true);
    }
    let packets: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    match args.get(3).map(String::as_str) {
        Some("nat64out") => return nat64(sessions, packets, false),
        Some("nat64in") => return nat64(sessions, packets, true),
        Some("fill44") => return fill(sessions, packets, false),
        Some("fill64") => return fill(sessions, packets, true),
        Some("listing") => return listing(sessions),
        _ => {}
    }
    let batch = args.get(3).map(|s| s != "single").unwrap_or(true);
    let cfg = Nat44Config {
        inside: vec!["198.18.0.0/16".parse().unwrap()],
        pool: vec!["198.19.0.0/22".parse().unwrap()],
        limits: Limits {
            max_sessions: sessions + 10,
            max_sessions_per_host: sessions + 10,
            port_block_size: port_block(),
            ..Limits::default()
        },
        ..Nat44Config::default()
    };
    let mut e = engine(EngineConfig {
        nat44: Some(cfg),
        seed: 3,
        ..EngineConfig::default()
    });
    // The criterion bench's flows (benches/nat44.rs): 1,000 per inside host, so 10M
    // sessions spread over 10,000 hosts and the /22 pool's ports.
    let flow = |i: u32| {
        let h = i / 1000;
        udp64([198, 18, (h >> 8) as u8, h as u8], 1024 + (i % 1000) as u16)
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
    let mut events = Events::default();
    events.drain(&mut e); // the set-up's events are not the loop's
    let t0 = clocks();
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
        events.drain(&mut e);
    }
    report(t0, i);
    println!("forwarded {forwarded}");
    events.print();
}
