//! Per-worker engine shards: each worker thread owns one [`crate::Engine`] (its sessions,
//! mappings and indexes) and a disjoint slice of the NAPT port range and of the ICMP
//! identifier space, so no table is shared and no lock is taken:
//!
//! - outbound packets (inside -> outside: IPv4 from an inside host, IPv6 to NAT64) go to the
//!   worker [`Shards::of_outbound`] picks from the source address alone, so every flow of a
//!   host, and every fragment of its packets, meets the same sessions, mappings and per-host
//!   limits;
//! - inbound packets (to a pool address) go to the worker that owns their destination port
//!   (TCP/UDP), ICMP identifier (echo), or the source port / identifier of the packet an ICMP
//!   error quotes, by [`Shards::of_inbound`]: the mapping was created by that worker, from its
//!   slice.
//!
//! Limits: a non-first IPv4 fragment carries no port, so `of_inbound` cannot place it (it
//! returns `None`; a driver sends it to worker 0, which drops it unless it owns the flow).
//! Basic NAT (`Nat44Mode::Pool`) and static entries are not port-sliced; shard NAPT only.
//! Hairpinned packets (inside host to a pool address) are translated back in by the worker
//! that took them out, which finds the target mapping only if it owns it too. The
//! daemon runs one worker: wiring multiqueue TUN (or XDP queues) to these functions is work
//! for the driver.

use crate::config::Prefix4;
use crate::EngineConfig;
use xlat_wire::field::{u16_at, u32_at, u8_at};

/// How the port ranges of one configuration are split among `workers` engines.
#[derive(Clone, Debug)]
pub struct Shards {
    workers: usize,
    nat44_ports: Option<(u16, u16)>,
    nat64_ports: Option<(u16, u16)>,
    nat64_pool4: Vec<Prefix4>,
}

/// Slice `k` of `workers` of the inclusive range `r`: `[lo + k*span/W, lo + (k+1)*span/W)`.
/// `None` when `k` is out of range or the slice would be empty.
pub fn slice(r: (u16, u16), workers: usize, k: usize) -> Option<(u16, u16)> {
    let (lo, hi) = r;
    if lo > hi || k >= workers {
        return None;
    }
    let span = u64::from(hi - lo) + 1;
    let w = workers as u64;
    let start = |k: u64| u64::from(lo) + k * span / w;
    let (a, b) = (start(k as u64), start(k as u64 + 1));
    if b <= a {
        return None;
    }
    Some((u16::try_from(a).ok()?, u16::try_from(b - 1).ok()?))
}

/// The worker whose [`slice`] of `r` holds `port` (`None` outside `r`).
pub fn owner(r: (u16, u16), workers: usize, port: u16) -> Option<usize> {
    let (lo, hi) = r;
    if workers == 0 || !(lo..=hi).contains(&port) {
        return None;
    }
    let span = u64::from(hi - lo) + 1;
    let off = u64::from(port - lo);
    // The largest k with k*span/W <= off, i.e. k*span < (off+1)*W.
    let k = ((off + 1) * workers as u64 - 1) / span;
    usize::try_from(k).ok()
}

impl Shards {
    /// Splits `cfg`'s NAT44 and NAT64 port ranges and the ICMP identifiers among `workers`;
    /// fails when a range has fewer ports than workers.
    pub fn new(cfg: &EngineConfig, workers: usize) -> Result<Shards, crate::ConfigError> {
        let s = Shards {
            workers,
            nat44_ports: cfg.nat44.as_ref().map(|n| n.ports),
            nat64_ports: cfg.nat64.as_ref().map(|n| n.ports),
            nat64_pool4: cfg
                .nat64
                .as_ref()
                .map(|n| n.pool4.clone())
                .unwrap_or_default(),
        };
        for (key, r) in [
            ("nat44.ports", s.nat44_ports),
            ("nat64.ports", s.nat64_ports),
        ] {
            if let Some(r) = r {
                if workers == 0 || (u64::from(r.1.saturating_sub(r.0)) + 1) < workers as u64 {
                    return Err(crate::ConfigError {
                        key,
                        problem: format!(
                            "{}-{} has fewer ports than the {workers} workers",
                            r.0, r.1
                        ),
                    });
                }
            }
        }
        if workers == 0 {
            return Err(crate::ConfigError {
                key: "workers",
                problem: "at least one worker".into(),
            });
        }
        Ok(s)
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Worker `k`'s NAT44 TCP/UDP ports.
    pub fn nat44_slice(&self, k: usize) -> Option<(u16, u16)> {
        slice(self.nat44_ports?, self.workers, k)
    }

    /// Worker `k`'s NAT64 TCP/UDP ports.
    pub fn nat64_slice(&self, k: usize) -> Option<(u16, u16)> {
        slice(self.nat64_ports?, self.workers, k)
    }

    /// Worker `k`'s ICMP query identifiers (NAT44 and NAT64).
    pub fn icmp_slice(&self, k: usize) -> (u16, u16) {
        slice((0, u16::MAX), self.workers, k).unwrap_or((0, u16::MAX))
    }

    /// The worker for an outbound packet (IPv4 from the inside, or IPv6 to NAT64): a hash
    /// of its source address. `None` for a packet too short to have one.
    pub fn of_outbound(&self, pkt: &[u8]) -> Option<usize> {
        let h = match u8_at(pkt, 0)? >> 4 {
            4 => u64::from(u32_at(pkt, 12)?),
            6 => {
                let a = xlat_wire::ipv6::addr_at(pkt, 8)?;
                (a as u64) ^ ((a >> 64) as u64)
            }
            _ => return None,
        };
        let m = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        usize::try_from(((m >> 32) * self.workers as u64) >> 32).ok()
    }

    /// The worker that owns an inbound IPv4 packet's mapping: by destination port (TCP,
    /// UDP), echo identifier, or for an ICMP error the source port / identifier of the
    /// packet it quotes (which left from our mapping). `None` when the packet names no port
    /// in a sliced range (a later fragment, another protocol, a truncated packet).
    pub fn of_inbound(&self, pkt: &[u8]) -> Option<usize> {
        let b0 = u8_at(pkt, 0)?;
        if b0 >> 4 != 4 {
            return None;
        }
        let ihl = usize::from(b0 & 0x0f) * 4;
        if u16_at(pkt, 6)? & 0x1fff != 0 {
            return None;
        }
        let dst = u32_at(pkt, 16)?;
        let ports = if self.nat64_pool4.iter().any(|p| p.contains(dst)) {
            self.nat64_ports
        } else {
            self.nat44_ports
        }?;
        let icmp = (0, u16::MAX);
        match u8_at(pkt, 9)? {
            6 | 17 => owner(ports, self.workers, u16_at(pkt, ihl + 2)?),
            1 => match u8_at(pkt, ihl)? {
                0 | 8 => owner(icmp, self.workers, u16_at(pkt, ihl + 4)?),
                3 | 11 | 12 => {
                    // The quoted packet: our outside endpoint is its source.
                    let inner = ihl.checked_add(8)?;
                    let iihl = usize::from(u8_at(pkt, inner)? & 0x0f) * 4;
                    let l4 = inner.checked_add(iihl)?;
                    match u8_at(pkt, inner + 9)? {
                        6 | 17 => owner(ports, self.workers, u16_at(pkt, l4)?),
                        1 => owner(icmp, self.workers, u16_at(pkt, l4 + 4)?),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        }
    }
}
