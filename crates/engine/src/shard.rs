//! Per-worker engine shards: each worker thread owns one [`crate::Engine`] (its sessions,
//! mappings and indexes) and a disjoint slice of the NAPT port range and of the ICMP
//! identifier space, so no table is shared and no lock is taken (VPP nat44-ed's layout):
//!
//! - outbound packets (inside -> outside: IPv4 from an inside host, IPv6 to NAT64) go to the
//!   worker [`Shards::of_outbound`] picks from the source address alone, so every flow of a
//!   host, and every fragment of its packets, meets the same sessions, mappings and per-host
//!   limits (RFC 4787 REQ-2 paired pooling holds per host);
//! - inbound packets (to a pool address) go to the worker that owns their destination port
//!   (TCP/UDP), ICMP identifier (echo), or the source port / identifier of the packet an ICMP
//!   error quotes (RFC 5508 REQ-3), by [`Shards::of_inbound`]: the mapping was created by
//!   that worker, from its slice -- except a static BIB entry's outside endpoint (port
//!   forwarding), which belongs to the worker of its inside host, whatever slice its port is
//!   in (every worker keeps the forwarded ports out of its own allocations). With
//!   deterministic NAT44 and NAT64 ([`crate::deterministic`]) every port belongs to one
//!   inside host (NAT64: one subscriber prefix, whose addresses all go to one worker) by
//!   the config's arithmetic, and the packet goes to that host's worker (no slices).
//!
//! [`Shards::owner`] is the whole placement a driver needs, in [`crate::Engine::process`]'s
//! order of translators; it answers [`Owner::Any`] for packets no worker holds state for:
//!
//! - SIIT (RFC 7915) and 6to4 (RFC 3056) keep no per-flow state, but per-datagram state:
//!   SIIT holds the first fragment of a fragmented ICMP message until the last one gives
//!   the checksum's length (RFC 7915 4.2 / 5.2), and a tunnel endpoint reassembles
//!   fragmented protocol-41 packets (RFC 4213 3.6). Their fragments therefore go to the
//!   worker of their source address; unfragmented packets to any worker. Each engine also
//!   has its own ICMP error rate limit (RFC 4443 2.4 f), so N workers allow N times the rate.
//! - Static NAT44 entries (RFC 2663 4.1.1) rewrite addresses only, and their later
//!   fragments need no first fragment: any worker translates them.
//! - A non-first IPv4 fragment to a pool address carries no port (RFC 4787 REQ-14, RFC 6146
//!   3.4/3.5): [`Owner::LaterFragment`] names its datagram, and the driver sends it where
//!   [`Owner::FirstFragment`] sent the first one (the daemon keeps that table, and holds
//!   later fragments that arrive first).
//!
//! Not sharded (refused by [`Shards::new`] with more than one worker): NAT44
//! `mode = "pool"` (Basic NAT binds whole outside addresses to hosts, not port slices) and
//! ISATAP (RFC 5214 router and host state and timers). Hairpinned packets (inside host to
//! a pool address, RFC 4787 REQ-9) are translated back in by the worker that took them
//! out, which finds the target mapping only if it owns it too (with N workers, 1 in N).
//! The daemon (`xlat run`, `[dataplane] workers`) runs one worker per TUN queue on these
//! functions.

use crate::config::{Nat44Mode, Prefix4, PrefixSet4};
use crate::rfc6052::Pref64;
use crate::EngineConfig;
use xlat_wire::field::{u16_at, u32_at, u8_at};

/// The most workers a configuration may have (ICMP identifiers and port slices stay
/// meaningful; the daemon refuses more).
pub const MAX_WORKERS: usize = 64;

/// How the port ranges of one configuration are split among `workers` engines, and where
/// each packet goes ([`Shards::owner`]).
#[derive(Clone, Debug)]
pub struct Shards {
    workers: usize,
    nat44_ports: Option<(u16, u16)>,
    nat64_ports: Option<(u16, u16)>,
    nat64_pool4: Vec<Prefix4>,
    nat64_prefix: Option<Pref64>,
    nat44: Option<Nat44Steer>,
    /// Deterministic NAT64: an outside port names its subscriber, whose worker holds it.
    nat64_det: Option<crate::deterministic::Deterministic>,
    /// IPv6 sources are placed by this much of them: all of it, or with deterministic NAT64
    /// the subscriber's prefix, so all of a subscriber's addresses share a worker (and its
    /// one port range).
    source6_mask: u128,
    siit: Option<SiitSteer>,
    /// Tunnel endpoint addresses (6to4): protocol 41 and ICMP to them is the tunnel's.
    tunnel4: Vec<u32>,
    /// Static BIB entries' outside endpoints (IP protocol, address, port) -> the worker of
    /// their inside host.
    forwards: std::collections::HashMap<(u8, u32, u16), usize>,
}

/// What [`Shards::owner`] needs of `[nat44]`.
#[derive(Clone, Debug)]
struct Nat44Steer {
    /// Inside prefixes and static inside addresses: their packets are outbound.
    inside: PrefixSet4,
    static_inside: Vec<u32>,
    /// Pool prefixes: packets to them are inbound to a mapping.
    pool: PrefixSet4,
    /// Deterministic NAT: an outside port names its inside host, whose worker holds it.
    det: Option<crate::deterministic::Deterministic>,
}

/// What [`Shards::owner`] needs of `[siit]`.
#[derive(Clone, Debug)]
struct SiitSteer {
    prefix: Option<Pref64>,
    eam: Vec<crate::config::Eam>,
    pool4: Vec<Prefix4>,
}

impl SiitSteer {
    fn owns4(&self, a: u32) -> bool {
        self.eam.iter().any(|e| e.ipv4.contains(a)) || self.pool4.iter().any(|p| p.contains(a))
    }
    fn owns6(&self, a: u128) -> bool {
        self.eam.iter().any(|e| e.ipv6.contains(a)) || self.prefix.is_some_and(|p| p.contains(a))
    }
}

/// One datagram, as its fragments arrive: the engine's one datagram name (`FragId::V4` here,
/// RFC 791 3.2: source, destination, protocol, identification).
pub use crate::frag::FragId;

/// Which worker translates a packet ([`Shards::owner`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// This worker holds the state the packet needs: its host's sessions and mappings, the
    /// mapping it is addressed to, or its datagram's fragment state.
    Worker(usize),
    /// The first fragment (offset 0, more fragments) of a datagram to a pool address, owned
    /// by `worker`: the datagram's later fragments, which carry no port, belong there too.
    FirstFragment { worker: usize, id: FragId },
    /// A later fragment of a datagram to a pool address: it belongs to the worker its first
    /// fragment went to (RFC 4787 REQ-14, RFC 6146 3.4 / 3.5).
    LaterFragment(FragId),
    /// No worker holds state for it (SIIT or 6to4 outside fragments, static NAT44 entries,
    /// packets no translator claims, garbage): the worker that read it translates or drops
    /// it, with a reason and a counter.
    Any,
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

/// The worker whose [`slice`](fn@slice) of `r` holds `port` (`None` outside `r`).
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
    /// fails (naming the key at fault) when a range has fewer ports than workers, or, with
    /// more than one worker, for what cannot be split by port: NAT44 `mode = "pool"` and
    /// ISATAP.
    pub fn new(cfg: &EngineConfig, workers: usize) -> Result<Shards, crate::ConfigError> {
        let err = |key, problem: String| Err(crate::ConfigError { key, problem });
        if workers == 0 || workers > MAX_WORKERS {
            return err(
                "workers",
                format!("{workers} workers; expected 1 to {MAX_WORKERS}"),
            );
        }
        // NAT64's map, built once: it steers, and its subscriber length masks sources.
        let nat64_det = cfg.nat64.as_ref().and_then(|n| n.deterministic_map());
        let source6_mask = nat64_det
            .as_ref()
            .and_then(|d| u128::MAX.checked_shl(128 - u32::from(d.subscriber_len())))
            .unwrap_or(u128::MAX);
        let mut s = Shards {
            workers,
            nat44_ports: cfg.nat44.as_ref().map(|n| n.ports),
            nat64_ports: cfg.nat64.as_ref().map(|n| n.ports),
            nat64_pool4: cfg
                .nat64
                .as_ref()
                .map(|n| n.pool4.clone())
                .unwrap_or_default(),
            nat64_prefix: cfg.nat64.as_ref().map(|n| n.prefix),
            nat44: cfg.nat44.as_ref().map(|n| Nat44Steer {
                inside: PrefixSet4::new(&n.inside),
                static_inside: n.statics.iter().map(|s| u32::from(s.inside)).collect(),
                pool: PrefixSet4::new(&n.pool),
                det: n.deterministic_map(),
            }),
            nat64_det,
            source6_mask,
            siit: cfg.siit.as_ref().map(|s| SiitSteer {
                prefix: s.prefix,
                eam: s.eam.clone(),
                pool4: s.pool4.clone(),
            }),
            tunnel4: cfg
                .tunnel
                .iter()
                .flat_map(|t| t.sixtofour.iter().map(|s| u32::from(s.ipv4)))
                .collect(),
            forwards: Default::default(),
        };
        let ip = crate::rewrite::ip_proto;
        for f in cfg.nat44.iter().flat_map(|n| &n.forwards) {
            let w = s.by_source4(f.inside.addr);
            for (_, ext) in f.pairs() {
                s.forwards.insert((ip(f.proto), ext.addr, ext.port), w);
            }
        }
        for f in cfg.nat64.iter().flat_map(|n| &n.static_bib) {
            let w = s.by_source6(f.inside.addr);
            for (_, ext) in f.pairs() {
                s.forwards.insert((ip(f.proto), ext.addr, ext.port), w);
            }
        }
        for (key, r) in [
            ("nat44.ports", s.nat44_ports),
            ("nat64.ports", s.nat64_ports),
        ] {
            if let Some(r) = r {
                if (u64::from(r.1.saturating_sub(r.0)) + 1) < workers as u64 {
                    return err(
                        key,
                        format!("{}-{} has fewer ports than the {workers} workers", r.0, r.1),
                    );
                }
            }
        }
        if workers > 1 {
            if cfg
                .nat44
                .as_ref()
                .is_some_and(|n| n.mode == Nat44Mode::Pool)
            {
                return err(
                    "nat44.mode",
                    format!("\"pool\" binds whole outside addresses to inside hosts, which cannot be split among {workers} workers by port"),
                );
            }
            if cfg.tunnel.as_ref().is_some_and(|t| t.isatap.is_some()) {
                return err(
                    "tunnel.isatap",
                    format!("an ISATAP interface keeps router and host state and timers in one engine; it cannot run on {workers} workers"),
                );
            }
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
        match u8_at(pkt, 0)? >> 4 {
            4 => Some(self.by_source4(u32_at(pkt, 12)?)),
            6 => Some(self.by_source6(xlat_wire::ipv6::addr_at(pkt, 8)?)),
            _ => None,
        }
    }

    /// The worker that owns an inside host's sessions (as [`Shards::of_outbound`] places
    /// its packets): where a session synced from a peer is installed.
    pub fn of_inside(&self, a: std::net::IpAddr) -> usize {
        match a {
            std::net::IpAddr::V4(a) => self.by_source4(u32::from(a)),
            std::net::IpAddr::V6(a) => self.by_source6(u128::from(a)),
        }
    }

    /// The worker of an IPv4 source address (a multiplicative hash spread over the workers).
    #[inline]
    fn by_source4(&self, a: u32) -> usize {
        self.pick(u64::from(a))
    }

    /// The worker of an IPv6 source address (its subscriber's prefix with deterministic
    /// NAT64; both halves folded, then as IPv4).
    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the address's two 64-bit halves, folded"
    )]
    fn by_source6(&self, a: u128) -> usize {
        let a = a & self.source6_mask;
        self.pick((a as u64) ^ ((a >> 64) as u64))
    }

    #[inline]
    fn pick(&self, h: u64) -> usize {
        let m = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        usize::try_from(((m >> 32) * self.workers as u64) >> 32).unwrap_or(0)
    }

    /// Where packet `pkt` (as read from the TUN device) is translated: the translator is
    /// picked as [`crate::Engine::process`] picks it (IPv6: NAT64 pref64, SIIT, tunnel;
    /// IPv4: tunnel endpoint, NAT64 pool4, SIIT, NAT44), then the worker as the module
    /// documentation says. Never fails: what it cannot read is [`Owner::Any`], for the
    /// engine to drop with its reason.
    pub fn owner(&self, pkt: &[u8]) -> Owner {
        match u8_at(pkt, 0).map(|b| b >> 4) {
            Some(4) => self.owner4(pkt).unwrap_or(Owner::Any),
            Some(6) => self.owner6(pkt).unwrap_or(Owner::Any),
            _ => Owner::Any,
        }
    }

    fn owner6(&self, pkt: &[u8]) -> Option<Owner> {
        let src = xlat_wire::ipv6::addr_at(pkt, xlat_wire::ipv6::off::SRC)?;
        let dst = xlat_wire::ipv6::addr_at(pkt, xlat_wire::ipv6::off::DST)?;
        if self.nat64_prefix.is_some_and(|p| p.contains(dst)) {
            // RFC 6146 3.5: the IPv6 host's sessions live with its source address.
            return Some(Owner::Worker(self.by_source6(src)));
        }
        if self.siit.as_ref().is_some_and(|s| s.owns6(dst)) && is_fragment6(pkt) {
            // RFC 7915 5.2: an ICMPv6 message's fragments meet in one engine.
            return Some(Owner::Worker(self.by_source6(src)));
        }
        // SIIT unfragmented, 6to4 encapsulation (stateless), or nobody's.
        Some(Owner::Any)
    }

    fn owner4(&self, pkt: &[u8]) -> Option<Owner> {
        use xlat_wire::ipv4::off;
        let ff = u16_at(pkt, off::FLAGS_FRAG)?;
        let proto = u8_at(pkt, off::PROTO)?;
        let src = u32_at(pkt, off::SRC)?;
        let dst = u32_at(pkt, off::DST)?;
        // MF set or a fragment offset: part of a fragmented datagram.
        let fragment = ff & 0x3fff != 0;
        let by_src = Owner::Worker(self.by_source4(src));
        if (proto == 41 || proto == 1) && self.tunnel4.contains(&dst) {
            // RFC 4213 3.6: the endpoint reassembles before decapsulating.
            return Some(if fragment { by_src } else { Owner::Any });
        }
        if self.nat64_pool4.iter().any(|p| p.contains(dst)) {
            return Some(self.inbound(pkt, ff, proto, src, dst));
        }
        if self.siit.as_ref().is_some_and(|s| s.owns4(dst)) {
            // RFC 7915 4.2: an ICMPv4 message's fragments meet in one engine.
            return Some(if fragment { by_src } else { Owner::Any });
        }
        let n = self.nat44.as_ref()?;
        if n.inside.contains(src) || n.static_inside.contains(&src) {
            return Some(by_src);
        }
        if n.pool.contains(dst) {
            return Some(self.inbound(pkt, ff, proto, src, dst));
        }
        // A static outside address (stateless) or nobody's.
        Some(Owner::Any)
    }

    /// An IPv4 packet to a pool address (NAT44 pool or NAT64 pool4).
    fn inbound(&self, pkt: &[u8], ff: u16, proto: u8, src: u32, dst: u32) -> Owner {
        let id = |pkt: &[u8]| FragId::V4 {
            src,
            dst,
            proto,
            ident: u16_at(pkt, xlat_wire::ipv4::off::IDENT).unwrap_or(0),
        };
        if ff & 0x1fff != 0 {
            return Owner::LaterFragment(id(pkt));
        }
        match self.mapping_owner(pkt, proto, dst) {
            Some(worker) if ff & 0x2000 != 0 => Owner::FirstFragment {
                worker,
                id: id(pkt),
            },
            Some(worker) => Owner::Worker(worker),
            // No port in a sliced range: the engine drops it (no mapping, unsupported
            // protocol, truncated) wherever it is.
            None => Owner::Any,
        }
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
        if u16_at(pkt, 6)? & 0x1fff != 0 {
            return None;
        }
        self.mapping_owner(pkt, u8_at(pkt, 9)?, u32_at(pkt, 16)?)
    }

    /// [`Shards::of_inbound`] for an IPv4 packet (not a later fragment) whose protocol and
    /// destination the caller has read.
    fn mapping_owner(&self, pkt: &[u8], proto: u8, dst: u32) -> Option<usize> {
        let ihl = usize::from(u8_at(pkt, 0)? & 0x0f) * 4;
        let ports = if self.nat64_pool4.iter().any(|p| p.contains(dst)) {
            self.nat64_ports
        } else {
            self.nat44_ports
        }?;
        let icmp = (0, u16::MAX);
        let det = match &self.nat44 {
            Some(n) if n.pool.contains(dst) => n.det.as_ref(),
            _ if self.nat64_pool4.iter().any(|p| p.contains(dst)) => self.nat64_det.as_ref(),
            _ => None,
        };
        // A static BIB entry's port belongs to its inside host's worker, a deterministic
        // port (or identifier) to its subscriber's, else to the slice.
        let owner = |range, workers, port: u16, proto: u8| {
            if let Some(w) = self.forwards.get(&(proto, dst, port)) {
                return Some(*w);
            }
            match det {
                Some(d) => d.of_outside_ip(dst, port).map(|a| self.of_inside(a)),
                None => owner(range, workers, port),
            }
        };
        match proto {
            6 | 17 => owner(ports, self.workers, u16_at(pkt, ihl + 2)?, proto),
            1 => match u8_at(pkt, ihl)? {
                0 | 8 => owner(icmp, self.workers, u16_at(pkt, ihl + 4)?, 1),
                3 | 11 | 12 => {
                    // The quoted packet: our outside endpoint is its source.
                    let inner = ihl.checked_add(8)?;
                    let iihl = usize::from(u8_at(pkt, inner)? & 0x0f) * 4;
                    let l4 = inner.checked_add(iihl)?;
                    match u8_at(pkt, inner + 9)? {
                        p @ (6 | 17) => owner(ports, self.workers, u16_at(pkt, l4)?, p),
                        1 => owner(icmp, self.workers, u16_at(pkt, l4 + 4)?, 1),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        }
    }
}

/// True when an IPv6 packet carries a Fragment header (RFC 8200 4.5), after at most a few
/// Hop-by-Hop, Routing or Destination Options headers (RFC 8200 4.1's order); false for
/// anything it cannot read.
fn is_fragment6(pkt: &[u8]) -> bool {
    use xlat_wire::ipv6::nh;
    let Some(mut next) = u8_at(pkt, 6) else {
        return false;
    };
    let mut at = 40usize;
    for _ in 0..4 {
        match next {
            nh::FRAGMENT => return true,
            nh::HOP_BY_HOP | nh::ROUTING | nh::DEST_OPTIONS => {
                let (Some(n), Some(len)) = (u8_at(pkt, at), u8_at(pkt, at + 1)) else {
                    return false;
                };
                next = n;
                at += (usize::from(len) + 1) * 8;
            }
            _ => return false,
        }
    }
    false
}
