//! Per-worker shards (xlat_engine::shard): the port slices partition the range, every port
//! has exactly one owner, and the mappings a worker creates come from its slice, so the
//! return traffic finds that worker.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::{a4, a6, echo, ip4, ip6, tcp, udp};
use xlat_engine::shard::{owner, slice, Shards};
use xlat_engine::*;

#[test]
fn slices_partition_the_range_and_owner_agrees() {
    for r in [
        (1024, 65535),
        (0, 65535),
        (1, 1),
        (1000, 1003),
        (40000, 40010),
    ] {
        for w in 1..=8usize {
            let span = usize::from(r.1 - r.0) + 1;
            if span < w {
                assert!(slice(r, w, w - 1).is_none() || slice(r, w, 0).is_none());
                continue;
            }
            // Consecutive, non-empty, covering lo..=hi.
            let mut next = u32::from(r.0);
            for k in 0..w {
                let (a, b) = slice(r, w, k).unwrap();
                assert_eq!(u32::from(a), next, "{r:?} w={w} k={k}");
                assert!(a <= b);
                next = u32::from(b) + 1;
            }
            assert_eq!(next, u32::from(r.1) + 1);
            assert!(slice(r, w, w).is_none());
            // Every port in the range maps to exactly one worker: the one whose slice holds it.
            for p in r.0..=r.1 {
                let k = owner(r, w, p).unwrap();
                let (a, b) = slice(r, w, k).unwrap();
                assert!((a..=b).contains(&p), "{r:?} w={w} port {p} -> {k}");
                let holders = (0..w)
                    .filter(|&j| {
                        let (a, b) = slice(r, w, j).unwrap();
                        (a..=b).contains(&p)
                    })
                    .count();
                assert_eq!(holders, 1);
            }
            if r.0 > 0 {
                assert_eq!(owner(r, w, r.0 - 1), None);
            }
            if r.1 < u16::MAX {
                assert_eq!(owner(r, w, r.1 + 1), None);
            }
        }
    }
}

#[test]
fn too_few_ports_for_the_workers_is_an_error() {
    let cfg = EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["10.0.0.0/8".parse().unwrap()],
            pool: vec!["198.51.100.0/30".parse().unwrap()],
            ports: (2000, 2002),
            ..Nat44Config::default()
        }),
        ..EngineConfig::default()
    };
    assert!(Shards::new(&cfg, 3).is_ok());
    assert_eq!(Shards::new(&cfg, 4).unwrap_err().key, "nat44.ports");
    assert!(Shards::new(&cfg, 0).is_err());
}

fn config() -> EngineConfig {
    EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["10.0.0.0/8".parse().unwrap()],
            pool: vec!["198.51.100.0/30".parse().unwrap()],
            ..Nat44Config::default()
        }),
        nat64: Some(Nat64Config {
            prefix: "64:ff9b::/96".parse().unwrap(),
            pool4: vec!["192.0.2.0/30".parse().unwrap()],
            ports: (20000, 29999),
            ..Nat64Config::default()
        }),
        seed: 9,
        ..EngineConfig::default()
    }
}

/// The reply to a translated IPv4 packet `out` (UDP, TCP or echo): addresses and ports
/// swapped.
fn reply(out: &[u8]) -> Vec<u8> {
    let (src, dst) = (a4_of(&out[12..16]), a4_of(&out[16..20]));
    let sport = u16::from_be_bytes([out[20], out[21]]);
    let dport = u16::from_be_bytes([out[22], out[23]]);
    let l4 = match out[9] {
        17 => udp(dport, sport, &[7; 8]),
        6 => tcp(dport, sport, 0x12),
        _ => echo(0, u16::from_be_bytes([out[24], out[25]]), 1, &[7; 8]),
    };
    ip4(dst, src, out[9], l4, 64, 0, 1)
}

fn a4_of(b: &[u8]) -> [u8; 4] {
    b.try_into().unwrap()
}

/// Each worker's NAT44 and NAT64 mappings (TCP, UDP, ICMP echo) take ports and identifiers
/// from its own slice, and `of_inbound` sends their return traffic (and ICMP errors about
/// them) to that worker, which translates it.
#[test]
fn outbound_flows_of_worker_k_map_back_to_k() {
    for workers in [1usize, 2, 3, 4] {
        let shards = Shards::new(&config(), workers).unwrap();
        let mut used = vec![0u32; workers];
        let mut engines: Vec<Engine> = (0..workers)
            .map(|k| Engine::new_shard(config(), &shards, k).unwrap())
            .collect();
        for i in 0..200u32 {
            let h4 = [10, 1, (i >> 8) as u8, i as u8];
            let mut h6 = a6("2001:db8::");
            h6[12..].copy_from_slice(&i.to_be_bytes());
            let port = 1024 + (i * 37 % 50000) as u16;
            let pkts = [
                ip4(h4, a4("8.8.8.8"), 17, udp(port, 53, &[1; 8]), 64, 0, 1),
                ip4(h4, a4("8.8.8.8"), 6, tcp(port, 80, 0x02), 64, 0, 1),
                ip4(h4, a4("8.8.8.8"), 1, echo(8, port, 1, &[1; 8]), 64, 0, 1),
                ip6(h6, a6("64:ff9b::808:808"), 17, udp(port, 53, &[1; 8]), 64),
                ip6(h6, a6("64:ff9b::808:808"), 6, tcp(port, 80, 0x02), 64),
                ip6(
                    h6,
                    a6("64:ff9b::808:808"),
                    58,
                    echo(128, port, 1, &[1; 8]),
                    64,
                ),
            ];
            for p in pkts {
                let k = shards.of_outbound(&p).unwrap();
                assert!(k < workers);
                used[k] += 1;
                let v6 = p[0] >> 4 == 6;
                let mut out = p.clone();
                assert_eq!(engines[k].process_vec(Time(1), &mut out), Verdict::Forward);
                // The outside port / identifier is in worker k's slice.
                let ext = if out[9] == 1 {
                    u16::from_be_bytes([out[24], out[25]])
                } else {
                    u16::from_be_bytes([out[20], out[21]])
                };
                let (lo, hi) = match (out[9], v6) {
                    (1, _) => shards.icmp_slice(k),
                    (_, false) => shards.nat44_slice(k).unwrap(),
                    (_, true) => shards.nat64_slice(k).unwrap(),
                };
                assert!(
                    (lo..=hi).contains(&ext),
                    "worker {k}/{workers}: {ext} not in {lo}-{hi}"
                );
                // The reply finds worker k, and worker k translates it.
                let mut back = reply(&out);
                assert_eq!(shards.of_inbound(&back), Some(k));
                assert!(engines[k].process_vec(Time(2), &mut back).transmit());
                // So does an ICMP error quoting the translated packet.
                let mut quote = out.clone();
                quote.truncate(28);
                let err = ip4(
                    a4("8.8.4.4"),
                    a4_of(&out[12..16]),
                    1,
                    [vec![3, 3, 0, 0, 0, 0, 0, 0], quote].concat(),
                    64,
                    0,
                    1,
                );
                assert_eq!(shards.of_inbound(&err), Some(k));
            }
        }
        assert!(used.iter().all(|&u| u > 0), "{used:?}");
    }
}

#[test]
fn packets_without_a_port_have_no_owner() {
    let shards = Shards::new(&config(), 2).unwrap();
    // A later fragment, another protocol, garbage.
    let frag = ip4(
        a4("8.8.8.8"),
        a4("198.51.100.1"),
        17,
        vec![0; 16],
        64,
        0x0010,
        5,
    );
    assert_eq!(shards.of_inbound(&frag), None);
    let gre = ip4(a4("8.8.8.8"), a4("198.51.100.1"), 47, vec![0; 16], 64, 0, 5);
    assert_eq!(shards.of_inbound(&gre), None);
    for junk in [&[][..], &[0x45][..], &[0x45, 0, 0, 20][..], &[0x60; 10][..]] {
        assert_eq!(shards.of_inbound(junk), None);
        let _ = shards.of_outbound(junk);
    }
    // Truncated after a valid header: no port to read.
    let mut t = ip4(
        a4("8.8.8.8"),
        a4("198.51.100.1"),
        17,
        udp(53, 2000, &[]),
        64,
        0,
        1,
    );
    t.truncate(21);
    assert_eq!(shards.of_inbound(&t), None);
}
