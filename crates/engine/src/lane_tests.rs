//! The established-flow lane of [`Engine::process_batch`] against the full path: two engines
//! with one configuration and seed get the same random trace, one packet by packet through
//! [`Engine::process`], the other in batches of random size; every verdict and output byte,
//! the counters, the table sizes and the session table (TCP states, expiry times) must be
//! the same, and the lane must have carried a good part of the traffic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::*;
use xlat_wire::checksum;

/// xorshift64*: a fixed, seedable trace.
struct Rand(u64);

impl Rand {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const ACK: u8 = 0x10;

/// An IPv4 packet with valid checksums; `opts` adds a 4-byte NOP option, `frag` is the
/// flags/offset word, `pad` bytes follow the total length (link padding).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ip4(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    l4: &[u8],
    frag: u16,
    opts: bool,
    ttl: u8,
    pad: usize,
) -> Vec<u8> {
    let hl = if opts { 24 } else { 20 };
    let total = hl + l4.len();
    let mut p = vec![0u8; hl];
    p[0] = 0x40 | (hl / 4) as u8;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = ttl;
    p[9] = proto;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    if opts {
        p[20..24].copy_from_slice(&[1, 1, 1, 0]);
    }
    let c = checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut l = l4.to_vec();
    let ck_at = match proto {
        TCP => Some(16),
        UDP => Some(6),
        ICMP => Some(2),
        _ => None,
    };
    if let Some(at) = ck_at.filter(|&at| l.len() >= at + 2) {
        let s = if proto == ICMP {
            0
        } else {
            let mut ph = Vec::new();
            ph.extend_from_slice(&src);
            ph.extend_from_slice(&dst);
            ph.extend_from_slice(&[0, proto]);
            ph.extend_from_slice(&(l.len() as u16).to_be_bytes());
            checksum::sum(&ph, 0)
        };
        let c = checksum::finish(checksum::sum(&l, s));
        l[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    p.extend_from_slice(&l);
    p.extend(std::iter::repeat_n(0xee, pad));
    p
}

/// A UDP packet of 8 payload bytes from `src:sport` to `dst:dport` (other modules' tests).
pub(crate) fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    ip4(src, dst, UDP, &udp(sport, dport, 8), 0, false, 64, 0)
}

fn udp(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut l = vec![0u8; 8 + payload];
    l[0..2].copy_from_slice(&sport.to_be_bytes());
    l[2..4].copy_from_slice(&dport.to_be_bytes());
    l[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    for (i, b) in l.iter_mut().enumerate().skip(8) {
        *b = i as u8;
    }
    l
}

fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut l = vec![0u8; 24];
    l[0..2].copy_from_slice(&sport.to_be_bytes());
    l[2..4].copy_from_slice(&dport.to_be_bytes());
    l[4..8].copy_from_slice(&7u32.to_be_bytes());
    l[12] = 0x50;
    l[13] = flags;
    l[20..24].copy_from_slice(b"data");
    l
}

fn echo(kind: u8, id: u16) -> Vec<u8> {
    let mut l = vec![kind, 0, 0, 0, 0, 0, 0, 1, 9, 9];
    l[4..6].copy_from_slice(&id.to_be_bytes());
    l
}

const INSIDE: [[u8; 4]; 3] = [[198, 18, 0, 1], [198, 18, 0, 2], [198, 18, 7, 9]];
const STATIC_IN: [u8; 4] = [198, 18, 9, 9];
const STATIC_OUT: [u8; 4] = [198, 19, 9, 9];
const REMOTES: [[u8; 4]; 2] = [[203, 0, 113, 1], [203, 0, 113, 2]];
const POOL: [[u8; 4]; 2] = [[198, 19, 0, 0], [198, 19, 0, 1]];
const PORTS: [u16; 3] = [1024, 1025, 40000];
const RPORTS: [u16; 2] = [53, 443];

pub(crate) fn nat44_engine(filtering: Filtering, inbound_refresh: bool, verify: bool) -> Engine {
    let mut cfg = Nat44Config {
        inside: vec!["198.18.0.0/16".parse().unwrap()],
        pool: vec!["198.19.0.0/31".parse().unwrap()],
        statics: vec![StaticEntry {
            inside: STATIC_IN.into(),
            outside: STATIC_OUT.into(),
        }],
        filtering,
        inbound_refresh,
        verify_ip_checksum: verify,
        ..Nat44Config::default()
    };
    cfg.limits.max_sessions = 40;
    cfg.limits.max_sessions_per_host = 16;
    Engine::new(EngineConfig {
        nat44: Some(cfg),
        seed: 7,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// One random NAT44 packet; inbound ones mostly go to outside endpoints seen in outputs.
fn nat44_packet(r: &mut Rand, seen: &[([u8; 4], u16, u8)]) -> Vec<u8> {
    let flags = r.pick(&[ACK, ACK, ACK, ACK | 0x08, 0x02, 0x12, 0x11, 0x04, 0]);
    let proto = r.pick(&[UDP, UDP, TCP, TCP, ICMP]);
    let l4 = |r: &mut Rand, sport: u16, dport: u16| match proto {
        UDP => udp(sport, dport, r.below(40) as usize),
        TCP => tcp(sport, dport, flags),
        _ => echo(if r.below(2) == 0 { 8 } else { 0 }, sport),
    };
    let (mut frag, mut opts, mut ttl, mut pad) = (0x4000u16, false, 64u8, 0usize);
    match r.below(24) {
        0 => frag = 0x2000,
        1 => frag = 0x0003,
        2 => opts = true,
        3 => ttl = 1,
        4 => pad = 6,
        5 => frag = 0,
        _ => {}
    }
    let remote = r.pick(&REMOTES);
    let rport = r.pick(&RPORTS);
    let mut p = match r.below(10) {
        // Outbound from a dynamic host (sometimes to a pool address: a hairpin).
        0..=4 => {
            let dst = if r.below(12) == 0 {
                r.pick(&POOL)
            } else {
                remote
            };
            let sport = r.pick(&PORTS);
            let l = l4(r, sport, rport);
            ip4(r.pick(&INSIDE), dst, proto, &l, frag, opts, ttl, pad)
        }
        // Inbound to an outside endpoint a translated packet showed.
        5..=7 if !seen.is_empty() => {
            let (a, port, sp) = seen[r.below(seen.len() as u64) as usize];
            let (proto, l) = match sp {
                UDP => (UDP, udp(rport, port, r.below(30) as usize)),
                TCP => (TCP, tcp(rport, port, flags)),
                _ => (ICMP, echo(0, port)),
            };
            ip4(remote, a, proto, &l, frag, opts, ttl, pad)
        }
        // Static entry traffic, or inbound to a random pool port.
        8 => {
            let sport = r.pick(&PORTS);
            let l = l4(r, sport, rport);
            ip4(STATIC_IN, remote, proto, &l, frag, opts, ttl, pad)
        }
        _ => {
            let dport = r.pick(&PORTS);
            let l = l4(r, rport, dport);
            ip4(remote, r.pick(&POOL), proto, &l, frag, opts, ttl, pad)
        }
    };
    match r.below(40) {
        0 => p[10] ^= 0x40, // bad IP header checksum
        1 => p.truncate(30),
        2 => p.truncate(r.below(20) as usize),
        _ => {}
    }
    p
}

/// Runs `n` random packets through `a` one by one and through `b` in batches; compares
/// everything. Returns the lane's share of `b`'s packets.
fn compare(
    mut a: Engine,
    b: &mut Engine,
    seed: u64,
    n: usize,
    gen: impl Fn(&mut Rand, &[([u8; 4], u16, u8)]) -> Vec<u8>,
    learn: impl Fn(&[u8]) -> Option<([u8; 4], u16, u8)>,
) -> f64 {
    let mut r = Rand(seed);
    let mut now = Time::from_secs(1);
    let mut seen: Vec<([u8; 4], u16, u8)> = Vec::new();
    let mut done = 0;
    while done < n {
        // Time moves by milliseconds to minutes, sometimes past the timeouts.
        let step_ms = if r.below(30) == 0 { 400_000 } else { 3_000 };
        now = Time(now.0 + r.below(step_ms) * 1_000_000);
        let size = 1 + r.below(70) as usize;
        let batch: Vec<Vec<u8>> = (0..size).map(|_| gen(&mut r, &seen)).collect();
        // Headroom in front of each packet: mostly the drivers' own, sometimes too little for
        // an IPv4 -> IPv6 header (the same for both engines).
        let heads: Vec<usize> = (0..size)
            .map(|_| match r.below(30) {
                0 => 0,
                1 => 19,
                2 => 20,
                _ => HEADROOM,
            })
            .collect();
        // The full path, packet by packet.
        let mut outs_a = Vec::new();
        for (p, &head) in batch.iter().zip(&heads) {
            let mut room = vec![0u8; head + p.len() + HEADROOM];
            room[head..head + p.len()].copy_from_slice(p);
            let mut pb = PacketBuf::new(&mut room, head, p.len()).unwrap();
            let v = a.process(now, &mut pb);
            outs_a.push((v, pb.data().to_vec()));
        }
        // The batch (and lane).
        let mut rooms: Vec<Vec<u8>> = batch
            .iter()
            .zip(&heads)
            .map(|(p, &head)| {
                let mut room = vec![0u8; head + p.len() + HEADROOM];
                room[head..head + p.len()].copy_from_slice(p);
                room
            })
            .collect();
        let mut pbs: Vec<PacketBuf> = rooms
            .iter_mut()
            .zip(batch.iter().zip(&heads))
            .map(|(room, (p, &head))| PacketBuf::new(room, head, p.len()).unwrap())
            .collect();
        let mut vs = vec![Verdict::Held; size];
        b.process_batch(now, &mut pbs, &mut vs);
        for (i, ((va, da), (vb, pb))) in outs_a.iter().zip(vs.iter().zip(&pbs)).enumerate() {
            assert_eq!(
                va, vb,
                "verdict of packet {i} of batch at {now:?}: {:02x?}",
                batch[i]
            );
            if va.transmit() {
                assert_eq!(da, pb.data(), "bytes of packet {i}: {:02x?}", batch[i]);
                if let Some(s) = learn(da) {
                    if !seen.contains(&s) {
                        seen.push(s);
                    }
                }
            }
        }
        assert_eq!(a.stats(), b.stats(), "counters at {now:?}");
        assert_eq!(a.sessions(now), b.sessions(now), "sessions at {now:?}");
        while let Some(pa) = a.pop_ready() {
            assert_eq!(Some(pa), b.pop_ready());
        }
        assert_eq!(b.pop_ready(), None);
        if r.below(10) == 0 {
            assert_eq!(a.expire(now, 16), b.expire(now, 16));
        }
        done += size;
    }
    // Expiry times agree to the second, at every point they can be seen from.
    for later in [1, 59, 61, 239, 241, 299, 301, 7_441] {
        let t = now.plus_secs(later);
        assert_eq!(a.sessions(t), b.sessions(t));
    }
    b.lane_hits as f64 / done as f64
}

/// The outside endpoint (address, port, protocol) an outbound NAT44 output carries.
fn learn44(p: &[u8]) -> Option<([u8; 4], u16, u8)> {
    if p.len() < 28 || p[0] != 0x45 || p[12..14] != [198, 19] {
        return None;
    }
    let src: [u8; 4] = p[12..16].try_into().ok()?;
    let port = match p[9] {
        ICMP => u16::from_be_bytes([p[24], p[25]]),
        _ => u16::from_be_bytes([p[20], p[21]]),
    };
    Some((src, port, p[9]))
}

#[test]
fn nat44_lane_matches_full_path_byte_for_byte() {
    let mut lane_share = Vec::new();
    for (k, filtering) in [
        Filtering::EndpointIndependent,
        Filtering::AddressDependent,
        Filtering::AddressAndPortDependent,
    ]
    .into_iter()
    .enumerate()
    {
        for (inbound_refresh, verify) in [(true, true), (false, false)] {
            let mk = || nat44_engine(filtering, inbound_refresh, verify);
            let share = compare(
                mk(),
                &mut mk(),
                0x9e37_79b9 + k as u64,
                6_000,
                nat44_packet,
                learn44,
            );
            lane_share.push(share);
        }
    }
    // Established traffic is a good part of these traces: the lane must have carried some.
    assert!(
        lane_share.iter().all(|&s| s > 0.1),
        "lane shares {lane_share:?}"
    );
}

#[test]
fn nat44_lane_takes_only_plain_packets() {
    let e = nat44_engine(Filtering::EndpointIndependent, true, true);
    let n = e.nat44.as_ref().unwrap();
    let plain = ip4(
        INSIDE[0],
        REMOTES[0],
        UDP,
        &udp(1024, 53, 4),
        0x4000,
        false,
        64,
        0,
    );
    assert!(matches!(n.lane_key(&plain), Some((true, _))));
    let ack = ip4(
        INSIDE[0],
        REMOTES[0],
        TCP,
        &tcp(1024, 53, ACK),
        0,
        false,
        64,
        0,
    );
    assert!(matches!(n.lane_key(&ack), Some((true, _))));
    let not_fast = [
        ip4(
            INSIDE[0],
            REMOTES[0],
            TCP,
            &tcp(1024, 53, 0x02),
            0,
            false,
            64,
            0,
        ),
        ip4(
            INSIDE[0],
            REMOTES[0],
            TCP,
            &tcp(1024, 53, 0x11),
            0,
            false,
            64,
            0,
        ),
        ip4(
            INSIDE[0],
            REMOTES[0],
            TCP,
            &tcp(1024, 53, 0x14),
            0,
            false,
            64,
            0,
        ),
        ip4(
            INSIDE[0],
            REMOTES[0],
            UDP,
            &udp(1024, 53, 4),
            0x2000,
            false,
            64,
            0,
        ),
        ip4(
            INSIDE[0],
            REMOTES[0],
            UDP,
            &udp(1024, 53, 4),
            0,
            true,
            64,
            0,
        ),
        ip4(INSIDE[0], REMOTES[0], ICMP, &echo(8, 5), 0, false, 64, 0),
        ip4(INSIDE[0], POOL[0], UDP, &udp(1024, 53, 4), 0, false, 64, 0),
        ip4(
            STATIC_IN,
            REMOTES[0],
            UDP,
            &udp(1024, 53, 4),
            0,
            false,
            64,
            0,
        ),
        ip4(
            REMOTES[0],
            STATIC_OUT,
            UDP,
            &udp(53, 1024, 4),
            0,
            false,
            64,
            0,
        ),
    ];
    for p in &not_fast {
        assert!(!matches!(n.lane_key(p), Some((true, _))), "fast: {p:02x?}");
    }
    let mut bad = plain.clone();
    bad[10] ^= 1;
    assert!(!matches!(n.lane_key(&bad), Some((true, _))));
}

const HOSTS6: [u128; 3] = [
    0x2001_0db8_0001_0000_0000_0000_0000_0001,
    0x2001_0db8_0001_0000_0000_0000_0000_0002,
    0x2001_0db8_0002_0000_0000_0000_0000_0009,
];
const PREF64: u128 = 0x2001_0db8_0064_0000_0000_0000_0000_0000;

/// The same pref64 as a /64: the IPv4 address in bytes 9-12, the u octet (byte 8) and the
/// suffix (13-15) ignored on the way in (RFC 6052 2.2).
const PREF64_WIDE: u128 = 0x2001_0db8_0064_0000_0000_0000_0000_0000;

/// Where IPv4 address `v4` sits in the pref64 (`wide`: the /64).
pub(crate) fn in_pref64(v4: [u8; 4], wide: bool) -> u128 {
    let v4 = u128::from(u32::from_be_bytes(v4));
    if wide {
        PREF64_WIDE | (v4 << 24)
    } else {
        PREF64 | v4
    }
}

pub(crate) fn nat64_engine(
    filtering: Filtering,
    inbound_refresh: bool,
    verify: bool,
    wide: bool,
) -> Engine {
    let mut cfg = Nat64Config {
        prefix: if wide {
            "2001:db8:64::/64".parse().unwrap()
        } else {
            "2001:db8:64::/96".parse().unwrap()
        },
        pool4: vec!["198.19.0.0/31".parse().unwrap()],
        filtering,
        inbound_refresh,
        verify_ip_checksum: verify,
        ..Nat64Config::default()
    };
    cfg.limits.max_sessions = 40;
    cfg.limits.max_sessions_per_host = 16;
    Engine::new(EngineConfig {
        nat64: Some(cfg),
        seed: 11,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// An IPv6 packet with a valid transport checksum; `ext` puts an empty Hop-by-Hop header
/// first, `frag` a Fragment header (offset 0, MF set).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ip6(
    src: u128,
    dst: u128,
    nh: u8,
    l4: &[u8],
    hop: u8,
    ext: bool,
    frag: bool,
    tc_fl: u32,
) -> Vec<u8> {
    let mut l = l4.to_vec();
    let ck_at = match nh {
        TCP => Some(16),
        UDP => Some(6),
        58 => Some(2),
        _ => None,
    };
    if let Some(at) = ck_at.filter(|&at| l.len() >= at + 2) {
        let mut ph = Vec::new();
        ph.extend_from_slice(&src.to_be_bytes());
        ph.extend_from_slice(&dst.to_be_bytes());
        ph.extend_from_slice(&(l.len() as u32).to_be_bytes());
        ph.extend_from_slice(&[0, 0, 0, nh]);
        let c = checksum::finish(checksum::sum(&l, checksum::sum(&ph, 0)));
        l[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    let mut hdrs = Vec::new();
    let mut first = nh;
    if frag {
        hdrs.splice(0..0, [first, 0, 0, 1, 0, 0, 0x12, 0x34]);
        first = 44;
    }
    if ext {
        hdrs.splice(0..0, [first, 0, 1, 4, 0, 0, 0, 0]);
        first = 0;
    }
    let mut p = vec![0x60, 0, 0, 0, 0, 0, first, hop];
    p[0..4].copy_from_slice(&((6 << 28) | (tc_fl & 0x0fff_ffff)).to_be_bytes());
    p[4..6].copy_from_slice(&((hdrs.len() + l.len()) as u16).to_be_bytes());
    p.extend_from_slice(&src.to_be_bytes());
    p.extend_from_slice(&dst.to_be_bytes());
    p.extend_from_slice(&hdrs);
    p.extend_from_slice(&l);
    p
}

/// A random payload size for the NAT64 and SIIT traces: mostly small, sometimes past the
/// lowest IPv6 MTU or the 1500-byte MTU.
fn size(r: &mut Rand, n: u64) -> usize {
    match r.below(25) {
        0 => 1_240 + r.below(300) as usize,
        _ => r.below(n) as usize,
    }
}

/// Sometimes cuts a transport header short.
fn maybe_short(r: &mut Rand, l: &mut Vec<u8>, proto: u8) {
    if r.below(25) == 0 {
        l.truncate(if proto == TCP { 12 } else { 6 });
    }
}

/// An IPv6 packet of the NAT64 and SIIT traces around `l`: sometimes hop limit 1 or 2, a
/// Hop-by-Hop or Fragment header, a flow label, link padding.
fn v6_variant(r: &mut Rand, src: u128, dst: u128, proto: u8, l: &[u8], tos: u8) -> Vec<u8> {
    let (mut hop, mut ext, mut frag) = (64, false, false);
    match r.below(20) {
        0 => hop = 1,
        1 => ext = true,
        2 => frag = true,
        3 => hop = 2,
        _ => {}
    }
    let tc_fl = (u32::from(tos) << 20) | (r.below(2) as u32 * 0x1_2345);
    let mut p = ip6(src, dst, proto, l, hop, ext, frag, tc_fl);
    if r.below(15) == 0 {
        p.extend_from_slice(&[0xee; 6]); // link padding
    }
    p
}

/// An IPv4 packet of the NAT64 and SIIT traces around `l`: sometimes MF, no DF, an option,
/// TTL 1 or 2, link padding, no UDP checksum; TOS `tos`.
fn v4_variant(r: &mut Rand, src: [u8; 4], dst: [u8; 4], proto: u8, l: &[u8], tos: u8) -> Vec<u8> {
    let (mut frag, mut opts, mut ttl, mut pad) = (0x4000u16, false, 64u8, 0);
    match r.below(20) {
        0 => frag = 0x2000,
        1 => opts = true,
        2 => ttl = 1,
        3 | 4 => frag = 0,
        5 => pad = 6,
        6 => ttl = 2,
        _ => {}
    }
    let mut p = ip4(src, dst, proto, l, frag, opts, ttl, pad);
    let at = if opts { 30 } else { 26 };
    if proto == UDP && p.len() >= at + 2 && r.below(12) == 0 {
        p[at..at + 2].copy_from_slice(&[0, 0]); // no UDP checksum (RFC 768)
    }
    p[1] = tos;
    let hl = usize::from(p[0] & 0x0f) * 4;
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&p[..hl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// Sometimes damages a packet: a flipped bit at byte 10 (the IPv4 header checksum, or an
/// IPv6 address bit), or truncation.
fn corrupt(r: &mut Rand, p: &mut Vec<u8>) {
    match r.below(40) {
        0 => p[10] ^= 0x40,
        1 => p.truncate(30),
        2 => p.truncate(r.below(50) as usize),
        _ => {}
    }
}

/// One random NAT64 packet: IPv6 out from a host, or IPv4 back to a seen pool4 endpoint;
/// `wide`: the engine's pref64 is the /64. Besides plain packets (the lane's own rewrite):
/// control segments, ICMP, extension headers, fragments, options, hop limit / TTL 1,
/// traffic classes and flow labels, link padding, short transport headers, zero UDP
/// checksums, packets too big with and without DF, hairpins, bad header checksums,
/// truncation.
fn nat64_packet(r: &mut Rand, seen: &[([u8; 4], u16, u8)], wide: bool) -> Vec<u8> {
    let flags = r.pick(&[ACK, ACK, ACK, ACK | 0x08, 0x02, 0x12, 0x11, 0x04]);
    let remote = r.pick(&REMOTES);
    let rport = r.pick(&RPORTS);
    let tos = if r.below(4) == 0 {
        r.below(256) as u8
    } else {
        0
    };
    let mut p = if r.below(2) == 0 || seen.is_empty() {
        let proto = r.pick(&[UDP, UDP, TCP, TCP, 58]);
        let sport = r.pick(&PORTS);
        let mut l = match proto {
            UDP => udp(sport, rport, size(r, 40)),
            TCP => tcp(sport, rport, flags),
            _ => echo(128, sport),
        };
        maybe_short(r, &mut l, proto);
        let mut dst = in_pref64(remote, wide);
        if r.below(12) == 0 {
            dst = in_pref64(r.pick(&POOL), wide); // a hairpin
        }
        if wide && r.below(3) == 0 {
            dst |= u128::from(r.below(1 << 24) as u32); // suffix bits, ignored (RFC 6052 2.2)
        }
        let src = r.pick(&HOSTS6);
        v6_variant(r, src, dst, proto, &l, tos)
    } else {
        let (a, port, sp) = seen[r.below(seen.len() as u64) as usize];
        let mut l = match sp {
            UDP => udp(rport, port, size(r, 30)),
            TCP => tcp(rport, port, flags),
            _ => echo(0, port),
        };
        maybe_short(r, &mut l, sp);
        v4_variant(r, remote, a, sp, &l, tos)
    };
    corrupt(r, &mut p);
    p
}

#[test]
fn nat64_lane_matches_full_path_byte_for_byte() {
    let mut lane_share = Vec::new();
    let mut rewrite_share = Vec::new();
    for (k, filtering) in [
        Filtering::EndpointIndependent,
        Filtering::AddressDependent,
        Filtering::AddressAndPortDependent,
    ]
    .into_iter()
    .enumerate()
    {
        for (inbound_refresh, verify, wide) in [(true, true, false), (false, false, true)] {
            let mk = || nat64_engine(filtering, inbound_refresh, verify, wide);
            let mut b = mk();
            let share = compare(
                mk(),
                &mut b,
                0x5eed + k as u64,
                6_000,
                |r, s| nat64_packet(r, s, wide),
                learn44,
            );
            lane_share.push(share);
            rewrite_share.push(b.nat64.as_ref().unwrap().rewrites as f64 / 6_000.0);
        }
    }
    assert!(
        lane_share.iter().all(|&s| s > 0.1),
        "lane shares {lane_share:?}"
    );
    // Most of the lane's packets are plain: the dedicated rewrite carried them.
    assert!(
        rewrite_share.iter().all(|&s| s > 0.08),
        "rewrite shares {rewrite_share:?}"
    );
}

/// IPv6 hosts with EAM entries (2001:db8:5::/124 <-> 198.51.100.0/28, RFC 7757).
const EAM6: u128 = 0x2001_0db8_0005_0000_0000_0000_0000_0000;
const EAM4: [u8; 4] = [198, 51, 100, 0];
/// IPv6 hosts addressed by the pref64 forms of siit.pool4 (192.0.2.0/28).
const POOL4: [u8; 4] = [192, 0, 2, 0];

fn with_last(a: [u8; 4], last: u8) -> [u8; 4] {
    [a[0], a[1], a[2], last]
}

pub(crate) fn siit_engine(wide: bool, mtu: u32) -> Engine {
    Engine::new(EngineConfig {
        siit: Some(SiitConfig {
            prefix: Some(if wide {
                "2001:db8:64::/64".parse().unwrap()
            } else {
                "2001:db8:64::/96".parse().unwrap()
            }),
            eam: vec![Eam {
                ipv4: "198.51.100.0/28".parse().unwrap(),
                ipv6: "2001:db8:5::/124".parse().unwrap(),
            }],
            pool4: vec!["192.0.2.0/28".parse().unwrap()],
            rfc6791: Some("198.18.255.1/32".parse().unwrap()),
            rfc6791v6: None,
            params: XlatParams {
                mtu,
                ..XlatParams::default()
            },
            ..SiitConfig::default()
        }),
        seed: 5,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// One random SIIT packet, either way. Besides plain TCP/UDP (the lane's): ICMP,
/// extension and fragment headers, fragments, options, hop limit / TTL 1 and 2, traffic
/// classes, link padding, short transport headers, zero UDP checksums, packets past the
/// lowest IPv6 MTU or the next hop's with and without DF, hairpins, addresses with no
/// mapping, bad header checksums, truncation.
fn siit_packet(r: &mut Rand, wide: bool) -> Vec<u8> {
    let flags = r.pick(&[ACK, ACK, 0x02, 0x11, 0x04]);
    let tos = if r.below(4) == 0 {
        r.below(256) as u8
    } else {
        0
    };
    let (p1, p2) = (r.pick(&PORTS), r.pick(&RPORTS));
    let mut p = if r.below(2) == 0 {
        let proto = r.pick(&[UDP, UDP, TCP, TCP, 58]);
        let mut l = match proto {
            UDP => udp(p1, p2, size(r, 40)),
            TCP => tcp(p1, p2, flags),
            _ => echo(128, p1),
        };
        maybe_short(r, &mut l, proto);
        let src = match r.below(8) {
            0 => HOSTS6[0], // no mapping
            1 | 2 => in_pref64(with_last(POOL4, r.below(16) as u8), wide),
            _ => EAM6 | u128::from(r.below(16) as u8),
        };
        let dst = match r.below(10) {
            0 => in_pref64(with_last(EAM4, r.below(16) as u8), wide), // hairpin
            1 => in_pref64(with_last(POOL4, 3), wide),                // hairpin
            2 => EAM6 | 7, // an EAM host on the IPv4 side (no hairpin)
            _ => {
                let mut d = in_pref64(r.pick(&REMOTES), wide);
                if wide && r.below(3) == 0 {
                    d |= u128::from(r.below(1 << 24) as u32); // suffix, ignored
                }
                d
            }
        };
        v6_variant(r, src, dst, proto, &l, tos)
    } else {
        let proto = r.pick(&[UDP, UDP, TCP, TCP, ICMP]);
        let mut l = match proto {
            UDP => udp(p2, p1, size(r, 30)),
            TCP => tcp(p2, p1, flags),
            _ => echo(8, p1),
        };
        maybe_short(r, &mut l, proto);
        let src = match r.below(6) {
            0 => with_last(EAM4, r.below(16) as u8),
            1 => [0, 0, 0, 0], // fine for a non-well-known pref64, too
            _ => r.pick(&REMOTES),
        };
        let dst = match r.below(3) {
            0 => with_last(POOL4, r.below(16) as u8),
            _ => with_last(EAM4, r.below(16) as u8),
        };
        v4_variant(r, src, dst, proto, &l, tos)
    };
    corrupt(r, &mut p);
    p
}

#[test]
fn siit_lane_matches_full_path_byte_for_byte() {
    let mut shares = Vec::new();
    for (k, (wide, mtu)) in [(false, 1500), (true, 1500), (false, 1400)]
        .into_iter()
        .enumerate()
    {
        let mut b = siit_engine(wide, mtu);
        let share = compare(
            siit_engine(wide, mtu),
            &mut b,
            0x5117 + k as u64,
            6_000,
            |r, _| siit_packet(r, wide),
            |_| None,
        );
        shares.push(share);
    }
    // About half the packets are plain TCP/UDP with both addresses mapped, no hairpin.
    assert!(shares.iter().all(|&s| s > 0.25), "lane shares {shares:?}");
}
