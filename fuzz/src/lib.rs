//! The engine under libFuzzer: one input is a trace of packets fed to one engine, so state
//! (sessions, mappings, held fragments, ISATAP routers) carries from packet to packet, with
//! time moving in small and large steps between them.
//!
//! Input format: byte 0 picks the configuration variant (`config`); then records of
//! `[op] [len: u16 big-endian] [len bytes of packet]` until the input ends (a short last
//! record takes what is left). `op`:
//! - bits 0-2: time step before the packet: 0, 1 ms, 10 ms, 100 ms, 1 s, 10 s, 100 s, 1000 s;
//! - bits 3-4: headroom in front of the packet: the drivers' `HEADROOM` (0, 1), none (2), or
//!   19 bytes, too little for an IPv4 -> IPv6 header (3);
//! - bit 5: the packet joins a batch for `Engine::process_batch` (with the next packets that
//!   have bit 5, at the same instant), instead of going alone through `Engine::process`;
//! - bit 6: `Engine::expire` runs before the packet.
//!
//! Checked for every packet the engine emits (`Forward`, `Reply`, `pop_ready`): the IPv4 or
//! IPv6 length fields match the buffer; the IPv4 header checksum is valid when the input's
//! was; the TCP, UDP, ICMP or ICMPv6 checksum is valid when the input's was (a bad one is
//! carried, never repaired, RFC 1624) and neither is a fragment -- and always in a `Reply`,
//! which the engine writes itself. And a second engine with the same configuration gets the
//! same packets one at a time through `Engine::process`: batches must give the same verdicts
//! and bytes (the lanes of `process_batch` are an optimisation, never a different answer).

use std::net::Ipv4Addr;

use xlat_engine::tunnel::{IsatapConfig, IsatapRole, SixToFourConfig, TunnelConfig, TunnelParams};
use xlat_engine::{
    Eam, EamHairpin, Engine, EngineConfig, Filtering, Limits, Nat44Config, Nat44Mode, Nat64Config,
    PacketBuf, PortForward, SiitConfig, StaticEntry, Time, UdpZeroChecksum, Verdict, XlatParams,
    HEADROOM,
};

/// Which translators the engine runs.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    Nat44,
    Nat64,
    Siit,
    Tunnel,
    /// NAT44, NAT64, SIIT (EAM only: its pref64 would overlap NAT64's), 6to4 and an ISATAP
    /// router together.
    All,
}

/// Small tables, so exhaustion and eviction paths are reached by short traces.
fn limits() -> Limits {
    Limits {
        max_sessions: 256,
        max_sessions_per_host: 64,
        max_fragment_flows: 16,
        max_fragments_held: 8,
        port_block_size: 0,
        port_block_hold: 0,
        port_blocks_per_host: 0,
    }
}

fn p<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    match s.parse() {
        Ok(v) => v,
        Err(e) => panic!("fuzz config {s}: {e:?}"),
    }
}

/// The addresses of tests/vectors (so the seed corpus taken from them reaches deep), with
/// the behaviour picked by `v`.
fn nat44(v: u8) -> Nat44Config {
    Nat44Config {
        inside: vec![p("198.18.0.0/24")],
        pool: vec![p("198.19.0.100/32")],
        mode: match v % 4 {
            0 | 1 => Nat44Mode::Napt,
            2 => Nat44Mode::Pool,
            _ => Nat44Mode::Static,
        },
        statics: vec![StaticEntry {
            inside: Ipv4Addr::new(198, 18, 0, 10),
            outside: Ipv4Addr::new(198, 19, 0, 10),
        }],
        filtering: filtering(v >> 2),
        ports: if v & 0x10 != 0 {
            (1024, 1031)
        } else {
            (1024, 65535)
        },
        // Port blocks of 8 (NAPT only), so a block fills and a second one is taken.
        limits: Limits {
            port_block_size: if v % 4 < 2 && v & 0x80 != 0 { 8 } else { 0 },
            // Freed blocks held 30 s on odd variants (the trace's clock passes it).
            port_block_hold: u32::from(v & 0x01) * 30,
            // At most two blocks a host on some variants, so the quota refusal is reached.
            port_blocks_per_host: u16::from(v & 0x04 != 0) * 2,
            ..limits()
        },
        // Deterministic NAT (RFC 7422) where it can be on: NAPT, the whole port range, no
        // port blocks or forwarding -- 256 inside addresses, 252 ports each.
        deterministic: v % 4 == 1 && v & 0xd0 == 0,
        verify_ip_checksum: v & 0x20 != 0,
        // The FTP ALG (`alg = ["ftp"]`) on its control connections (TCP port 21).
        alg_ftp: v & 0x08 != 0,
        // Port forwarding to the vectors' inside host, with NAPT.
        forwards: if v % 4 < 2 && v & 0x40 != 0 {
            vec![forward(0xc612_0014, 8080, 0xc613_0064, 80, 2)]
        } else {
            Vec::new()
        },
        ..Nat44Config::default()
    }
}

/// A static BIB entry of `count` TCP ports.
fn forward<A>(inside: A, iport: u16, outside: u32, oport: u16, count: u16) -> PortForward<A> {
    PortForward {
        proto: xlat_engine::flow::Proto::Tcp,
        inside: xlat_engine::flow::Endpoint {
            addr: inside,
            port: iport,
        },
        outside: xlat_engine::flow::Endpoint {
            addr: outside,
            port: oport,
        },
        count,
    }
}

fn filtering(v: u8) -> Filtering {
    match v % 3 {
        0 => Filtering::AddressDependent,
        1 => Filtering::EndpointIndependent,
        _ => Filtering::AddressAndPortDependent,
    }
}

fn params(v: u8) -> XlatParams {
    XlatParams {
        mtu: [1500, 1400, 1280, 9000][usize::from(v & 3)],
        udp_zero_checksum: if v & 4 != 0 {
            UdpZeroChecksum::Drop
        } else {
            UdpZeroChecksum::Compute
        },
        // RFC 7915 4.4 / 5.4 answers on or off, and their own source now and then.
        unreachable_errors: v & 8 == 0,
        error_source4: (v & 0x60 == 0x60).then_some(0xc633_64fe),
        error_source6: (v & 0x60 == 0x60).then_some(0x2001_0db8_0000_0000_0000_0000_0000_00fe),
        ..XlatParams::default()
    }
}

fn nat64(v: u8) -> Nat64Config {
    Nat64Config {
        prefix: p(if v & 0x40 != 0 {
            "64:ff9b::/96"
        } else {
            "2001:2:0:64::/96"
        }),
        pool4: vec![p("198.19.0.101/32")],
        ports: if v & 0x10 != 0 {
            (1024, 1031)
        } else {
            (1024, 65535)
        },
        filtering: filtering(v >> 3),
        limits: limits(),
        verify_ip_checksum: v & 0x20 != 0,
        params: params(v),
        // The FTP ALG of RFC 6384 on its control connections (TCP port 21).
        alg_ftp: v & 0x04 != 0,
        // The vectors' IPv6 client reachable at pool4 port 80.
        static_bib: if v & 0x80 != 0 {
            vec![forward(
                0x2001_0002_0000_0001_0000_0000_0000_0010,
                8080,
                0xc613_0065,
                80,
                1,
            )]
        } else {
            Vec::new()
        },
        // Deterministic NAT64: each /64 of 2001:2::/56 (the vectors' client's among them)
        // one subscriber; not with static_bib or the narrow port range.
        deterministic: v & 0x93 == 0x01,
        inside: if v & 0x93 == 0x01 {
            vec![p("2001:2::/56")]
        } else {
            Vec::new()
        },
        subscriber_prefix_len: if v & 0x93 == 0x01 { 64 } else { 128 },
        ..Nat64Config::default()
    }
}

fn siit(v: u8, with_prefix: bool) -> SiitConfig {
    SiitConfig {
        prefix: with_prefix.then(|| p("2001:2:0:64::/96")),
        eam: vec![
            Eam {
                ipv4: p("198.19.1.0/28"),
                ipv6: p("2001:2:0:6::/124"),
            },
            // RFC 7757 3.2: suffixes of different lengths (4 IPv4 bits, 8 IPv6 bits).
            Eam {
                ipv4: p("198.19.2.0/28"),
                ipv6: p("2001:2:0:7::/120"),
            },
        ],
        rfc6791: Some(p("192.0.2.1/32")),
        // Without a pref64, IPv4 routers' errors take their source from here.
        rfc6791v6: (!with_prefix).then(|| p("2001:db8:6791::/96")),
        // RFC 7757 4: the three hairpinning modes (simple needs the pref64).
        eam_hairpin: match (v >> 4) % 3 {
            0 => EamHairpin::Intrinsic,
            1 if with_prefix => EamHairpin::Simple,
            _ => EamHairpin::Off,
        },
        params: params(v),
        ..SiitConfig::default()
    }
}

/// The addresses of tests/vectors/tunnel: `v % 4` picks 6to4 (198.18.0.2), an ISATAP router
/// (198.18.0.1), an ISATAP host (198.18.0.2, router 198.18.0.1), or 6to4 and the router.
fn tunnel(v: u8) -> TunnelConfig {
    let a4 = Ipv4Addr::new(198, 18, 0, 2);
    let router4 = Ipv4Addr::new(198, 18, 0, 1);
    let sixtofour = SixToFourConfig {
        ipv4: a4,
        relay: (v & 4 == 0).then_some(Ipv4Addr::new(198, 18, 1, 1)),
        relay_router: v & 8 != 0,
        params: TunnelParams::default(),
    };
    let router = IsatapConfig {
        ipv4: router4,
        role: IsatapRole::Router {
            prefix: p("2001:2:0:5::/64"),
            lifetime: 1800,
        },
        params: TunnelParams::default(),
    };
    let host = IsatapConfig {
        ipv4: a4,
        role: IsatapRole::Host {
            routers: vec![router4],
        },
        params: TunnelParams::default(),
    };
    match v % 4 {
        0 => TunnelConfig {
            sixtofour: Some(sixtofour),
            isatap: None,
        },
        1 => TunnelConfig {
            sixtofour: None,
            isatap: Some(router),
        },
        2 => TunnelConfig {
            sixtofour: None,
            isatap: Some(host),
        },
        _ => TunnelConfig {
            sixtofour: Some(sixtofour),
            isatap: Some(router),
        },
    }
}

/// The engine configuration of `target`, variant `v` (the input's first byte).
pub fn config(target: Target, v: u8) -> EngineConfig {
    let mut c = EngineConfig {
        seed: u64::from(v),
        ..EngineConfig::default()
    };
    match target {
        Target::Nat44 => c.nat44 = Some(nat44(v)),
        Target::Nat64 => c.nat64 = Some(nat64(v)),
        Target::Siit => c.siit = Some(siit(v, true)),
        Target::Tunnel => c.tunnel = Some(tunnel(v)),
        Target::All => {
            c.nat44 = Some(nat44(v & 0x3f));
            c.nat64 = Some(nat64(v & 0x3f));
            c.siit = Some(siit(v, false));
            c.tunnel = Some(tunnel(v | 3));
        }
    }
    c
}

/// One packet of the trace.
struct Rec<'a> {
    op: u8,
    bytes: &'a [u8],
}

fn records(mut data: &[u8]) -> Vec<Rec<'_>> {
    let mut out = Vec::new();
    while let [op, rest @ ..] = data {
        let (len, rest) = match rest {
            [a, b, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), rest),
            _ => (rest.len(), &[][..]),
        };
        let len = len.min(rest.len());
        out.push(Rec {
            op: *op,
            bytes: &rest[..len],
        });
        data = &rest[len..];
    }
    out
}

const STEP_MS: [u64; 8] = [0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000];

fn head(op: u8) -> usize {
    match (op >> 3) & 3 {
        0 | 1 => HEADROOM,
        2 => 0,
        _ => 19,
    }
}

/// A buffer holding `pkt` behind `head` bytes, with `HEADROOM` bytes after it.
fn room(pkt: &[u8], head: usize) -> Vec<u8> {
    let mut r = vec![0u8; head + pkt.len() + HEADROOM];
    r[head..head + pkt.len()].copy_from_slice(pkt);
    r
}

/// Runs the trace in `data` through an engine of `target` and checks every output.
pub fn run(target: Target, data: &[u8]) {
    let Some((&variant, data)) = data.split_first() else {
        return;
    };
    let cfg = config(target, variant);
    let (Ok(mut a), Ok(mut b)) = (Engine::new(cfg.clone()), Engine::new(cfg)) else {
        panic!("fuzz configuration {target:?}/{variant} refused");
    };
    let recs = records(data);
    let mut now = Time::from_secs(1);
    let mut i = 0;
    while i < recs.len() {
        let op = recs[i].op;
        now = Time(now.0 + STEP_MS[usize::from(op & 7)] * 1_000_000);
        if op & 0x40 != 0 {
            assert_eq!(a.expire(now, 64), b.expire(now, 64), "expire at {now:?}");
        }
        // A batch: this record and the following ones with bit 5, all at `now`.
        let mut end = i + 1;
        if op & 0x20 != 0 {
            while end < recs.len() && recs[end].op & 0x20 != 0 && end - i < 64 {
                end += 1;
            }
        }
        let batch = &recs[i..end];
        // Reference: packet by packet through `process`.
        let mut outs_a = Vec::with_capacity(batch.len());
        for r in batch {
            let mut buf = room(r.bytes, head(r.op));
            let Some(mut pb) = PacketBuf::new(&mut buf, head(r.op), r.bytes.len()) else {
                panic!("PacketBuf::new refused a buffer made for it");
            };
            let v = a.process(now, &mut pb);
            outs_a.push((v, pb.data().to_vec()));
        }
        // The same through `process_batch` when the trace asked for a batch, else `process`.
        let mut rooms: Vec<Vec<u8>> = batch.iter().map(|r| room(r.bytes, head(r.op))).collect();
        let mut pbs: Vec<PacketBuf> = rooms
            .iter_mut()
            .zip(batch)
            .filter_map(|(buf, r)| PacketBuf::new(buf, head(r.op), r.bytes.len()))
            .collect();
        assert_eq!(pbs.len(), batch.len());
        let mut vs = vec![Verdict::Held; batch.len()];
        if op & 0x20 != 0 {
            b.process_batch(now, &mut pbs, &mut vs);
        } else {
            for (pb, v) in pbs.iter_mut().zip(vs.iter_mut()) {
                *v = b.process(now, pb);
            }
        }
        for (k, (((va, da), vb), pb)) in outs_a.iter().zip(&vs).zip(&pbs).enumerate() {
            let input = batch[k].bytes;
            assert_eq!(va, vb, "verdict of {input:02x?} at {now:?}");
            if va.transmit() {
                assert_eq!(da.as_slice(), pb.data(), "bytes of {input:02x?}");
                check_output(input, da, matches!(va, Verdict::Reply(_)));
            }
        }
        while let Some(pa) = a.pop_ready() {
            assert_eq!(Some(&pa), b.pop_ready().as_ref(), "pop_ready at {now:?}");
            check_lengths(&pa, &"from pop_ready");
        }
        assert_eq!(b.pop_ready(), None, "pop_ready at {now:?}");
        i = end;
    }
    assert_eq!(a.stats(), b.stats(), "counters");
    assert_eq!(a.sessions(now), b.sessions(now), "sessions");
}

// ---- checks on emitted packets, with their own checksum code (not the wire crate's) ----

fn sum16(mut acc: u64, b: &[u8]) -> u64 {
    let mut it = b.chunks_exact(2);
    for c in &mut it {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [x] = it.remainder() {
        acc += u64::from(*x) << 8;
    }
    acc
}

fn folds_to_ones(mut acc: u64) -> bool {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc == 0xffff
}

fn be16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

/// Panics unless the IP length fields of `p` match its length (and an IPv4 header's
/// length fits); returns the IP version. `what` says where `p` came from.
fn check_lengths(p: &[u8], what: &dyn std::fmt::Debug) -> u8 {
    assert!(!p.is_empty(), "empty packet emitted ({what:02x?})");
    match p[0] >> 4 {
        4 => {
            assert!(
                p.len() >= 20,
                "IPv4 packet of {} bytes: {p:02x?} ({what:02x?})",
                p.len()
            );
            let ihl = usize::from(p[0] & 15) * 4;
            assert!(
                ihl >= 20 && ihl <= p.len(),
                "IPv4 IHL {ihl} in {} bytes ({what:02x?})",
                p.len()
            );
            assert_eq!(
                be16(p, 2),
                p.len(),
                "IPv4 total length: {p:02x?} ({what:02x?})"
            );
            4
        }
        6 => {
            assert!(
                p.len() >= 40,
                "IPv6 packet of {} bytes: {p:02x?} ({what:02x?})",
                p.len()
            );
            assert_eq!(
                be16(p, 4) + 40,
                p.len(),
                "IPv6 payload length: {p:02x?} ({what:02x?})"
            );
            6
        }
        v => panic!("IP version {v} emitted: {p:02x?} ({what:02x?})"),
    }
}

fn is_fragment4(p: &[u8]) -> bool {
    be16(p, 6) & 0x3fff != 0
}

/// Is an IPv4 header's checksum valid? `None` when `p` is no IPv4 packet with a whole header.
fn ip4_header_ok(p: &[u8]) -> Option<bool> {
    let ihl = usize::from(*p.first()? & 15) * 4;
    (p[0] >> 4 == 4 && ihl >= 20 && p.len() >= ihl).then(|| folds_to_ones(sum16(0, &p[..ihl])))
}

/// Is the transport checksum of an unfragmented `p` valid? `None` when that cannot be said
/// (a fragment, extension headers, an unknown protocol, inconsistent lengths). IPv6 in IPv4
/// answers for the inner packet.
fn l4_ok(p: &[u8]) -> Option<bool> {
    match *p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 15) * 4;
            if p.len() < 20 || ihl < 20 || p.len() < ihl || be16(p, 2) != p.len() || is_fragment4(p)
            {
                return None;
            }
            let l4 = &p[ihl..];
            let pseudo = sum16(sum16(0, &p[12..20]), &[0, p[9]]) + l4.len() as u64;
            match p[9] {
                1 => Some(folds_to_ones(sum16(0, l4))),
                6 if l4.len() >= 20 => Some(folds_to_ones(sum16(pseudo, l4))),
                17 if l4.len() >= 8 && be16(l4, 4) == l4.len() => {
                    // Checksum 0: none was computed (RFC 768), which IPv4 allows.
                    Some(be16(l4, 6) == 0 || folds_to_ones(sum16(pseudo, l4)))
                }
                41 => l4_ok(l4),
                _ => None,
            }
        }
        6 => {
            if p.len() < 40 || be16(p, 4) + 40 != p.len() {
                return None;
            }
            let l4 = &p[40..];
            let pseudo = sum16(sum16(0, &p[8..40]), &[0, p[6]]) + l4.len() as u64;
            match p[6] {
                58 => Some(folds_to_ones(sum16(pseudo, l4))),
                6 if l4.len() >= 20 => Some(folds_to_ones(sum16(pseudo, l4))),
                // IPv6 has no "no checksum" for UDP (RFC 8200 8.1).
                17 if l4.len() >= 8 && be16(l4, 4) == l4.len() => {
                    Some(be16(l4, 6) != 0 && folds_to_ones(sum16(pseudo, l4)))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The checks on one packet `out` the engine emitted for `input` (`reply`: its own ICMP error).
fn check_output(input: &[u8], out: &[u8], reply: bool) {
    let v = check_lengths(out, &format_args!("input {input:02x?}"));
    if v == 4 {
        // The IPv4 header: valid when the engine wrote it, or when the input's (IPv6, or a
        // valid IPv4 header) gave it nothing bad to carry over.
        let input_ok = ip4_header_ok(input).unwrap_or(true);
        if reply || input_ok {
            assert_eq!(
                ip4_header_ok(out),
                Some(true),
                "IPv4 header checksum of {out:02x?} (input {input:02x?})"
            );
        }
    }
    let out_l4 = l4_ok(out);
    if reply {
        assert_ne!(
            out_l4,
            Some(false),
            "checksum of the engine's own ICMP error {out:02x?}"
        );
    } else if l4_ok(input) == Some(true) {
        assert_ne!(
            out_l4,
            Some(false),
            "transport checksum of {out:02x?} (input {input:02x?}, valid)"
        );
    }
}

/// The seed format: `variant`, then each packet as one record with the time step `step`
/// (0..8, see the module docs) before it.
pub fn encode(variant: u8, packets: &[(u8, &[u8])]) -> Vec<u8> {
    let mut out = vec![variant];
    for (step, pkt) in packets {
        let len = u16::try_from(pkt.len()).unwrap_or(u16::MAX);
        out.push(step & 7);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&pkt[..usize::from(len)]);
    }
    out
}

/// The checks themselves: each must fail on the packet it exists to catch
/// (`cargo +nightly test --manifest-path fuzz/Cargo.toml --lib`, run by scripts/fuzz.sh).
/// The FTP ALG's parser and writers on arbitrary bytes (the `ftp` target): every line of
/// the input is parsed as a command and as a reply, which must not panic; what parses is
/// written again and must parse to the same value (RFC 959 4.1.2 / 4.2.2, RFC 2428 2 / 3);
/// and sequence offsets recorded from the input keep `ack(seq(s) + n) == s + n` for a segment
/// after the last change (RFC 6384's adjustment undone by the peer's acknowledgement).
pub fn ftp(data: &[u8]) {
    use xlat_engine::alg::ftp::{self, Command, Reply, SeqAdj};
    let mut rest = data;
    for _ in 0..64 {
        let Some((line, n)) = ftp::first_line(rest) else {
            let _ = (ftp::parse_command(rest), ftp::parse_reply(rest));
            break;
        };
        let again = |o: ftp::Out| {
            let b = o.as_bytes().to_vec();
            assert!(b.ends_with(b"\r\n") && b.len() <= ftp::MAX_OUT, "{b:?}");
            b
        };
        match ftp::parse_command(line) {
            Some(Command::Port { addr, port }) | Some(Command::Eprt4 { addr, port }) => {
                let p = again(ftp::write_port(addr, port));
                assert_eq!(
                    ftp::first_line(&p).and_then(|(l, _)| ftp::parse_command(l)),
                    Some(Command::Port { addr, port })
                );
                let e = again(ftp::write_eprt4(addr, port));
                assert_eq!(
                    ftp::first_line(&e).and_then(|(l, _)| ftp::parse_command(l)),
                    Some(Command::Eprt4 { addr, port })
                );
            }
            _ => {}
        }
        match ftp::parse_reply(line) {
            Some(Reply::Pasv227 { addr, port }) => {
                let r = again(ftp::write_227(addr, port));
                assert_eq!(
                    ftp::first_line(&r).and_then(|(l, _)| ftp::parse_reply(l)),
                    Some(Reply::Pasv227 { addr, port })
                );
                let r = again(ftp::write_229(port));
                assert_eq!(
                    ftp::first_line(&r).and_then(|(l, _)| ftp::parse_reply(l)),
                    Some(Reply::Epsv229 { port })
                );
            }
            Some(Reply::Other(code)) => assert!(code <= 999),
            _ => {}
        }
        rest = rest.get(n..).unwrap_or(&[]);
    }
    // Offsets: records of (seq, diff) from the input's 5-byte groups (diffs of a line's
    // length: -128..=127 bytes).
    let mut adj = SeqAdj::default();
    for c in data.chunks_exact(5) {
        let seq = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        adj.record(seq, i32::from(c[4] as i8));
    }
    if let Some(pos) = adj.pos() {
        // A segment of 100 bytes starting after the last change: the peer's ack of its end
        // comes back as the sender numbered it.
        let s = pos.wrapping_add(1000);
        let sent_end = adj.seq(s).wrapping_add(100);
        assert_eq!(adj.ack(sent_end), s.wrapping_add(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 198.18.0.20:5000 -> 198.19.0.2:7 UDP "ping", checksums filled.
    fn udp4() -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 198, 18, 0, 20, 198, 19, 0, 2,
        ];
        p.extend_from_slice(&[0x13, 0x88, 0, 7, 0, 12, 0, 0, b'p', b'i', b'n', b'g']);
        let h = !fold(sum16(0, &p[..20]));
        p[10..12].copy_from_slice(&h.to_be_bytes());
        let pseudo = sum16(sum16(0, &p[12..20]), &[0, 17]) + 12;
        let u = !fold(sum16(pseudo, &p[20..]));
        p[26..28].copy_from_slice(&u.to_be_bytes());
        p
    }

    fn fold(mut acc: u64) -> u16 {
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn a_valid_packet_passes() {
        let p = udp4();
        assert_eq!(ip4_header_ok(&p), Some(true));
        assert_eq!(l4_ok(&p), Some(true));
        check_output(&p, &p, false);
        check_output(&p, &p, true);
    }

    #[test]
    #[should_panic(expected = "IPv4 total length")]
    fn a_wrong_total_length_fails() {
        let p = udp4();
        check_output(&p, &p[..31], false);
    }

    #[test]
    #[should_panic(expected = "IPv4 header checksum")]
    fn a_bad_header_checksum_fails() {
        let p = udp4();
        let mut out = p.clone();
        out[8] -= 1; // TTL decremented, checksum not updated
        check_output(&p, &out, false);
    }

    #[test]
    #[should_panic(expected = "transport checksum")]
    fn a_bad_udp_checksum_fails_when_the_input_was_good() {
        let p = udp4();
        let mut out = p.clone();
        out[21] ^= 1; // source port changed, checksum not updated
        check_output(&p, &out, false);
    }

    #[test]
    fn a_bad_checksum_carried_from_the_input_passes_but_not_in_a_reply() {
        let mut p = udp4();
        p[27] ^= 1;
        assert_eq!(l4_ok(&p), Some(false));
        check_output(&p, &p, false);
        assert!(std::panic::catch_unwind(|| check_output(&p, &p, true)).is_err());
    }

    #[test]
    #[should_panic(expected = "IPv6 payload length")]
    fn a_wrong_ipv6_payload_length_fails() {
        let mut p = vec![0x60, 0, 0, 0, 0, 9, 59, 64];
        p.extend_from_slice(&[0; 32]);
        p.extend_from_slice(&[0; 8]);
        check_lengths(&p, &"test");
    }

    #[test]
    fn records_split_and_the_last_takes_what_is_left() {
        let r = records(&[0x21, 0, 2, 9, 9, 0x05, 0, 9, 7]);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].op, r[0].bytes), (0x21, &[9, 9][..]));
        assert_eq!((r[1].op, r[1].bytes), (0x05, &[7][..]));
        assert_eq!(encode(3, &[(1, &[9, 9])]), vec![3, 1, 0, 2, 9, 9]);
    }

    #[test]
    fn every_configuration_variant_is_accepted() {
        for t in [
            Target::Nat44,
            Target::Nat64,
            Target::Siit,
            Target::Tunnel,
            Target::All,
        ] {
            for v in 0..=255u8 {
                if let Err(e) = config(t, v).validate() {
                    panic!("{t:?} variant {v}: {e:?}");
                }
            }
        }
    }
}
