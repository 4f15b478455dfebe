//! Engine configuration: plain, validated values. The daemon parses TOML into these; the
//! engine never reads files.

use std::net::Ipv4Addr;

/// An IPv4 prefix (address and length), host bits cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix4 {
    pub addr: u32,
    pub len: u8,
}

impl Prefix4 {
    /// Builds a prefix, clearing host bits; `None` if `len > 32`.
    pub fn new(addr: Ipv4Addr, len: u8) -> Option<Self> {
        if len > 32 {
            return None;
        }
        let a = u32::from(addr) & Self::mask_of(len);
        Some(Prefix4 { addr: a, len })
    }
    fn mask_of(len: u8) -> u32 {
        u32::MAX
            .checked_shl(32u32.saturating_sub(u32::from(len)))
            .unwrap_or(0)
    }
    pub fn mask(&self) -> u32 {
        Self::mask_of(self.len)
    }
    pub fn contains(&self, a: u32) -> bool {
        a & self.mask() == self.addr
    }
    /// Number of addresses in the prefix.
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.len.min(32)))
    }
    /// The i-th address of the prefix (no bounds check beyond wrapping).
    #[expect(
        clippy::cast_possible_truncation,
        reason = "wraps in the 32-bit address space, as said"
    )]
    pub fn nth(&self, i: u64) -> u32 {
        self.addr.wrapping_add(i as u32)
    }
}

/// IPv4 prefixes prepared for membership tests on the fast path: (network, mask) pairs, so a
/// test is an AND and a compare per prefix (no mask computed from a length per packet).
#[derive(Clone, Debug, Default)]
pub struct PrefixSet4(Box<[(u32, u32)]>);

impl PrefixSet4 {
    pub fn new(prefixes: &[Prefix4]) -> Self {
        PrefixSet4(prefixes.iter().map(|p| (p.addr, p.mask())).collect())
    }
    #[inline]
    pub fn contains(&self, a: u32) -> bool {
        self.0.iter().any(|&(net, mask)| a & mask == net)
    }
}

impl std::fmt::Display for Prefix4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.addr), self.len)
    }
}

impl std::str::FromStr for Prefix4 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (
                a,
                l.parse::<u8>()
                    .map_err(|_| format!("bad prefix length in {s:?}"))?,
            ),
            None => (s, 32),
        };
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
        let p = Prefix4::new(addr, l).ok_or_else(|| format!("prefix length {l} is over 32"))?;
        if p.addr != u32::from(addr) {
            return Err(format!("{s} has host bits set; did you mean {p}?"));
        }
        Ok(p)
    }
}

/// How inside addresses are translated (RFC 2663 4.1; RFC 3022 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nat44Mode {
    /// Only the static 1:1 entries translate (RFC 2663 4.1.1 static address assignment).
    Static,
    /// Basic NAT: each inside host is bound to a free pool address while it has sessions;
    /// ports are kept (RFC 3022 2.1).
    Pool,
    /// NAPT: addresses and ports (ICMP identifiers) translated (RFC 3022 2.2).
    Napt,
}

/// Inbound filtering behaviour (RFC 4787 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filtering {
    EndpointIndependent,
    AddressDependent,
    AddressAndPortDependent,
}

/// Idle timeouts in seconds. Defaults are the RFCs' recommendations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// RFC 4787 REQ-5: at least 2 minutes, 5 minutes recommended.
    pub udp: u64,
    /// RFC 5382 REQ-5: established idle timeout at least 2 hours 4 minutes.
    pub tcp_established: u64,
    /// RFC 5382 REQ-5: transitory (opening, closing) at least 4 minutes.
    pub tcp_transitory: u64,
    /// RFC 5508 REQ-1: ICMP query mappings at least 60 seconds.
    pub icmp: u64,
    /// How long fragment state (and held out-of-order fragments) lives.
    pub fragment: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            udp: 300,
            tcp_established: 7440,
            tcp_transitory: 240,
            icmp: 60,
            fragment: 2,
        }
    }
}

/// Memory bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_sessions: u32,
    pub max_sessions_per_host: u32,
    /// Fragmented datagrams tracked at once.
    pub max_fragment_flows: u32,
    /// Out-of-order non-first fragments held at once, waiting for their first fragment.
    pub max_fragments_held: u32,
    /// Port-block allocation (RFC 7422 2: each subscriber's ports come from blocks of this
    /// many ports, taken as it needs them and freed when empty, so a log names one block
    /// instead of every mapping); 0: off, each mapping's port from the whole range.
    pub port_block_size: u16,
    /// Seconds a freed port block waits before any host takes it again (0: at once), so
    /// late packets of the last host's flows never reach the next one and log records of
    /// the two never meet in the same second.
    pub port_block_hold: u32,
    /// With port blocks: the most blocks one host holds at once, per protocol (0: no limit
    /// but the pool's). A host at the limit whose blocks are full gets no new mapping
    /// (`port_quota`, an RFC 8158 quota-exceeded event), so one subscriber cannot take a
    /// whole address's ports (RFC 6888 REQ-4's per-subscriber limit, in blocks).
    pub port_blocks_per_host: u16,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: 1_000_000,
            max_sessions_per_host: 10_000,
            max_fragment_flows: 4096,
            max_fragments_held: 256,
            port_block_size: 0,
            port_block_hold: 0,
            port_blocks_per_host: 0,
        }
    }
}

/// One static 1:1 entry: always translated, both directions (RFC 2663 4.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticEntry {
    pub inside: Ipv4Addr,
    pub outside: Ipv4Addr,
}

/// A static BIB entry (port forwarding): the inside endpoint `inside` is always reachable
/// from outside at `outside`, and its own flows leave from there -- `count` consecutive ports
/// (ICMP: identifiers) on both sides. NAT44: a static NAPT entry (Cisco `ip nat inside source
/// static tcp`); NAT64: a static BIB entry (RFC 6146 1.2.2: IPv4-initiated communication to
/// an IPv6 host through statically configured bindings; Jool's `bib add`). The outside
/// address is one of the pool's, and its ports are never handed out dynamically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortForward<A> {
    pub proto: crate::flow::Proto,
    pub inside: crate::flow::Endpoint<A>,
    pub outside: crate::flow::Endpoint,
    /// Ports in the range (1: one port).
    pub count: u16,
}

impl<A: crate::flow::InsideAddr> PortForward<A> {
    /// The entry's (inside, outside) endpoint pairs, one per port.
    pub fn pairs(
        &self,
    ) -> impl Iterator<Item = (crate::flow::Endpoint<A>, crate::flow::Endpoint)> + '_ {
        (0..self.count).map(move |i| {
            (
                crate::flow::Endpoint {
                    addr: self.inside.addr,
                    port: self.inside.port.wrapping_add(i),
                },
                crate::flow::Endpoint {
                    addr: self.outside.addr,
                    port: self.outside.port.wrapping_add(i),
                },
            )
        })
    }
}

/// Checks static BIB entries against their pool (`key` names the config list): ranges that
/// fit in 16 bits, outside addresses of the pool, and no endpoint on either side twice --
/// found by sorting, not pairwise.
fn validate_forwards<A: crate::flow::InsideAddr + Ord>(
    key: &'static str,
    forwards: &[PortForward<A>],
    pool: &[Prefix4],
) -> Result<(), ConfigError> {
    let err = |problem: String| Err(ConfigError { key, problem });
    for f in forwards {
        let last = |p: u16| u32::from(p) + u32::from(f.count) - 1;
        if f.count == 0 || last(f.inside.port) > 0xffff || last(f.outside.port) > 0xffff {
            return err(format!(
                "entry {} -> {}: {} ports do not fit below 65536",
                f.inside.show(true),
                f.outside.show(true),
                f.count
            ));
        }
        if !pool.iter().any(|p| p.contains(f.outside.addr)) {
            return err(format!(
                "entry {} -> {}: the outside address is not in the pool; a static BIB entry forwards a pool address's port (add {} to the pool, or use it in a 1:1 static entry)",
                f.inside.show(true),
                f.outside.show(true),
                std::net::Ipv4Addr::from(f.outside.addr)
            ));
        }
    }
    let mut outside: Vec<(crate::flow::Proto, u32, u32, u32)> = forwards
        .iter()
        .map(|f| {
            let p = u32::from(f.outside.port);
            (f.proto, f.outside.addr, p, p + u32::from(f.count) - 1)
        })
        .collect();
    outside.sort_unstable();
    if let Some(b) = outside.windows(2).find_map(|w| match w {
        [a, b] if a.0 == b.0 && a.1 == b.1 && b.2 <= a.3 => Some(*b),
        _ => None,
    }) {
        return err(format!(
            "two entries forward {} {}:{} (each outside port once)",
            b.0.name(),
            std::net::Ipv4Addr::from(b.1),
            b.2
        ));
    }
    let mut inside: Vec<(crate::flow::Proto, A, u32, u32)> = forwards
        .iter()
        .map(|f| {
            let p = u32::from(f.inside.port);
            (f.proto, f.inside.addr, p, p + u32::from(f.count) - 1)
        })
        .collect();
    inside.sort_unstable();
    if let Some(b) = inside.windows(2).find_map(|w| match w {
        [a, b] if a.0 == b.0 && a.1 == b.1 && b.2 <= a.3 => Some(*b),
        _ => None,
    }) {
        let e = crate::flow::Endpoint {
            addr: b.1,
            port: u16::try_from(b.2).unwrap_or(u16::MAX),
        };
        return err(format!(
            "two entries forward to {} {} (each inside endpoint once: its flows leave from one outside endpoint)",
            b.0.name(),
            e.show(true)
        ));
    }
    Ok(())
}

/// NAT44 configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nat44Config {
    /// Inside prefixes: sources that may be translated (the "access list").
    pub inside: Vec<Prefix4>,
    /// Outside addresses used by pool and NAPT mappings.
    pub pool: Vec<Prefix4>,
    pub mode: Nat44Mode,
    pub statics: Vec<StaticEntry>,
    /// Static NAPT entries (port forwarding), `mode = "napt"` only.
    pub forwards: Vec<PortForward<u32>>,
    pub filtering: Filtering,
    /// Inclusive TCP/UDP port range for NAPT mappings. ICMP query identifiers are not ports
    /// and use the whole 0-65535 space (RFC 5508 3.1).
    pub ports: (u16, u16),
    pub timeouts: Timeouts,
    pub limits: Limits,
    /// RFC 4787 REQ-6: outbound packets always refresh a mapping; inbound ones do when true.
    pub inbound_refresh: bool,
    /// Verify the IPv4 header checksum of every packet (RFC 1812 5.2.2).
    pub verify_ip_checksum: bool,
    /// The FTP ALG ([`crate::alg`]): PORT/EPRT/227 rewritten, control sessions kept off
    /// the fast path. Off by default.
    pub alg_ftp: bool,
    /// Deterministic NAT ([`crate::deterministic`], RFC 7422 2): each inside address owns
    /// a fixed outside address and port range. `mode = "napt"` only.
    pub deterministic: bool,
    /// Ports each inside address gets with `deterministic`; 0: as many as fit.
    pub ports_per_host: u16,
}

impl Default for Nat44Config {
    fn default() -> Self {
        Nat44Config {
            inside: Vec::new(),
            pool: Vec::new(),
            mode: Nat44Mode::Napt,
            statics: Vec::new(),
            forwards: Vec::new(),
            filtering: Filtering::AddressDependent,
            ports: (1024, 65535),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            inbound_refresh: true,
            verify_ip_checksum: true,
            alg_ftp: false,
            deterministic: false,
            ports_per_host: 0,
        }
    }
}

/// Checks `[timeouts]` and `[limits]`, which NAT44 and NAT64 share.
fn validate_timeouts_limits(t: &Timeouts, l: &Limits) -> Result<(), ConfigError> {
    let err = |key, problem: String| Err(ConfigError { key, problem });
    for (key, v) in [
        ("timeouts.udp", t.udp),
        ("timeouts.tcp_established", t.tcp_established),
        ("timeouts.tcp_transitory", t.tcp_transitory),
        ("timeouts.icmp", t.icmp),
        ("timeouts.fragment", t.fragment),
    ] {
        if v == 0 {
            return err(key, "must be at least 1 s".into());
        }
    }
    if l.max_sessions == 0 {
        return err("limits.max_sessions", "must be at least 1".into());
    }
    if l.max_sessions > MAX_SESSIONS {
        return err(
            "limits.max_sessions",
            format!("must be at most {MAX_SESSIONS} (the index slots hold ids in 27 bits)"),
        );
    }
    if l.max_sessions_per_host == 0 {
        return err("limits.max_sessions_per_host", "must be at least 1".into());
    }
    Ok(())
}

/// The most sessions one table holds: index slots keep values in 27 bits (`crate::index`),
/// and the BIB's are `id * 4 + side * 2 + folded` with ids up to the session count.
pub const MAX_SESSIONS: u32 = (1 << 25) - 1;

/// A configuration the engine cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The config key at fault, e.g. `nat44.pool`.
    pub key: &'static str,
    pub problem: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

impl std::error::Error for ConfigError {}

impl Nat44Config {
    /// Checks the things the engine relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if self.ports.0 > self.ports.1 {
            return err(
                "nat44.ports",
                format!(
                    "range {}-{} is empty; write LOW-HIGH with LOW <= HIGH",
                    self.ports.0, self.ports.1
                ),
            );
        }
        if self.ports.0 == 0 {
            return err(
                "nat44.ports",
                "port 0 cannot be used; start the range at 1 or above (1024 is usual)".into(),
            );
        }
        if self.mode != Nat44Mode::Static && self.pool.is_empty() {
            return err("nat44.pool", "mode \"pool\" and \"napt\" need at least one pool address, e.g. pool = [\"198.19.0.100/32\"]".into());
        }
        if self.mode != Nat44Mode::Static && self.inside.is_empty() {
            return err(
                "nat44.inside",
                "no inside prefixes: nobody could be translated; e.g. inside = [\"198.18.0.0/24\"]"
                    .into(),
            );
        }
        let pool_size: u64 = self.pool.iter().map(Prefix4::size).sum();
        if pool_size > 65536 {
            return err(
                "nat44.pool",
                format!("{pool_size} addresses; at most 65536 are supported"),
            );
        }
        // Each inside and each outside address once: found by sorting, not pairwise (a file of
        // millions of entries is checked in seconds, not hours).
        for side in [false, true] {
            let addr = |s: &StaticEntry| u32::from(if side { s.outside } else { s.inside });
            let mut v: Vec<(u32, usize)> = self
                .statics
                .iter()
                .enumerate()
                .map(|(i, s)| (addr(s), i))
                .collect();
            v.sort_unstable();
            let dup = v.windows(2).find_map(|w| match w {
                [(a, i), (b, j)] if a == b => Some((*i, *j)),
                _ => None,
            });
            if let Some((s, t)) =
                dup.and_then(|(i, j)| Some((self.statics.get(i)?, self.statics.get(j)?)))
            {
                return err("nat44.static", format!("entries {} -> {} and {} -> {} overlap; each inside and each outside address may appear once", s.inside, s.outside, t.inside, t.outside));
            }
        }
        if !self.forwards.is_empty() {
            if self.mode != Nat44Mode::Napt {
                return err(
                    "nat44.static",
                    "entries with a protocol and ports (port forwarding) need mode = \"napt\""
                        .into(),
                );
            }
            if let Some(f) = self
                .forwards
                .iter()
                .find(|f| !self.inside.iter().any(|p| p.contains(f.inside.addr)))
            {
                return err(
                    "nat44.static",
                    format!(
                        "entry {} -> {}: the inside address is not in nat44.inside",
                        f.inside.show(true),
                        f.outside.show(true)
                    ),
                );
            }
            validate_forwards("nat44.static", &self.forwards, &self.pool)?;
        }
        for s in &self.statics {
            if s.inside == s.outside {
                return err("nat44.static", format!("entry {} -> {} maps an address to itself; a static entry translates an inside address to a different outside one (leave an address that needs no translation out of [nat44])", s.inside, s.outside));
            }
            if self.pool.iter().any(|p| p.contains(u32::from(s.outside))) {
                return err("nat44.static", format!("outside address {} is also in nat44.pool; static addresses must be outside the pool", s.outside));
            }
        }
        for (i, p) in self.pool.iter().enumerate() {
            if self
                .inside
                .iter()
                .any(|q| q.contains(p.addr) || p.contains(q.addr))
            {
                return err("nat44.pool", format!("pool {p} overlaps an inside prefix"));
            }
            if self
                .pool
                .iter()
                .skip(i + 1)
                .any(|q| q.contains(p.addr) || p.contains(q.addr))
            {
                return err(
                    "nat44.pool",
                    format!("pool {p} is listed twice or overlaps another pool entry"),
                );
            }
        }
        self.validate_deterministic()?;
        validate_timeouts_limits(&self.timeouts, &self.limits)
    }

    /// The deterministic mapping ([`crate::deterministic`]) when `deterministic` is on and
    /// the configuration is valid.
    pub fn deterministic_map(&self) -> Option<crate::deterministic::Deterministic> {
        if !self.deterministic {
            return None;
        }
        let per_host = (self.ports_per_host > 0).then_some(self.ports_per_host);
        crate::deterministic::Deterministic::new(&self.inside, &self.pool, self.ports, per_host)
            .ok()
    }

    /// What deterministic NAT cannot be combined with, and whether its subscribers fit.
    fn validate_deterministic(&self) -> Result<(), ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if !self.deterministic {
            if self.ports_per_host > 0 {
                return err(
                    "nat44.ports_per_host",
                    "is for deterministic NAT; add deterministic = true or remove it".into(),
                );
            }
            return Ok(());
        }
        if self.mode != Nat44Mode::Napt {
            return err(
                "nat44.deterministic",
                "gives each inside address a range of ports: it needs mode = \"napt\"".into(),
            );
        }
        if self.limits.port_block_size > 0 {
            return err(
                "nat44.port_block_size",
                "port blocks are handed out as hosts need them, deterministic ranges are fixed: use one of port_block_size and deterministic = true".into(),
            );
        }
        if let Some(f) = self.forwards.first() {
            return err(
                "nat44.static",
                format!(
                    "entry {} -> {} forwards a pool port, which is some inside address's port with deterministic = true: forward from an address outside nat44.pool (a static 1:1 entry) or turn deterministic off",
                    f.inside.show(true),
                    f.outside.show(true)
                ),
            );
        }
        let per_host = (self.ports_per_host > 0).then_some(self.ports_per_host);
        crate::deterministic::Deterministic::new(&self.inside, &self.pool, self.ports, per_host)
            .map(|_| ())
    }

    /// Settings that work but go below an RFC's recommendation; `xlat check` prints them.
    pub fn warnings(&self) -> Vec<String> {
        let t = &self.timeouts;
        let mut w = Vec::new();
        let mut below = |key: &str, v: u64, min: u64, rfc: &str| {
            if v < min {
                w.push(format!(
                    "{key} = {v} s is below the {min} s minimum of {rfc}"
                ));
            }
        };
        below("timeouts.udp", t.udp, 120, "RFC 4787 REQ-5");
        below(
            "timeouts.tcp_established",
            t.tcp_established,
            7440,
            "RFC 5382 REQ-5",
        );
        below(
            "timeouts.tcp_transitory",
            t.tcp_transitory,
            240,
            "RFC 5382 REQ-5",
        );
        below("timeouts.icmp", t.icmp, 60, "RFC 5508 REQ-1");
        w
    }
}

/// An IPv6 prefix (address and length), host bits cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix6 {
    pub addr: u128,
    pub len: u8,
}

impl Prefix6 {
    /// Builds a prefix, clearing host bits; `None` if `len > 128`.
    pub fn new(addr: std::net::Ipv6Addr, len: u8) -> Option<Self> {
        if len > 128 {
            return None;
        }
        Some(Prefix6 {
            addr: u128::from(addr) & Self::mask_of(len),
            len,
        })
    }
    fn mask_of(len: u8) -> u128 {
        u128::MAX
            .checked_shl(128u32.saturating_sub(u32::from(len)))
            .unwrap_or(0)
    }
    pub fn mask(&self) -> u128 {
        Self::mask_of(self.len)
    }
    pub fn contains(&self, a: u128) -> bool {
        a & self.mask() == self.addr
    }
    /// True when the two prefixes share any address.
    pub fn overlaps(&self, o: &Prefix6) -> bool {
        self.contains(o.addr) || o.contains(self.addr)
    }
}

impl std::fmt::Display for Prefix6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", std::net::Ipv6Addr::from(self.addr), self.len)
    }
}

impl std::str::FromStr for Prefix6 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (
                a,
                l.parse::<u8>()
                    .map_err(|_| format!("bad prefix length in {s:?}"))?,
            ),
            None => (s, 128),
        };
        let addr: std::net::Ipv6Addr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv6 address"))?;
        let p = Prefix6::new(addr, l).ok_or_else(|| format!("prefix length {l} is over 128"))?;
        if p.addr != u128::from(addr) {
            return Err(format!("{s} has host bits set; did you mean {p}?"));
        }
        Ok(p)
    }
}

impl Prefix4 {
    /// True when the two prefixes share any address.
    pub fn overlaps(&self, o: &Prefix4) -> bool {
        self.contains(o.addr) || o.contains(self.addr)
    }
}

/// What to do with an unfragmented IPv4 UDP datagram whose checksum is zero (none) on its
/// way to IPv6, where the checksum is mandatory (RFC 7915 4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpZeroChecksum {
    /// Compute the checksum (RFC 7915 4.5: the default of a stateless translator).
    Compute,
    /// Drop the datagram (counted as `udp_zero_checksum`).
    Drop,
}

/// Settings of the IPv4 <-> IPv6 header translation shared by SIIT and NAT64 (RFC 7915).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XlatParams {
    /// MTU of the next hop on both sides: the TUN device's MTU (`tun.mtu`). Larger DF
    /// packets get Fragmentation Needed / Packet Too Big back (RFC 7915 4.1, 5.1).
    pub mtu: u32,
    /// IPv4 packets without DF are fragmented so that no IPv6 packet exceeds this
    /// (RFC 7915 4.1 "lowest-ipv6-mtu"; 1280 by default, RFC 8200 5).
    pub lowest_ipv6_mtu: u32,
    pub udp_zero_checksum: UdpZeroChecksum,
    /// RFC 7915 4.4 / 5.4 (SHOULD, "configurable"): a packet discarded because an address has
    /// no translation, or (NAT64, RFC 6146 3.5) because no BIB entry exists or can be made,
    /// the filter refuses it or its protocol cannot cross, is answered with an ICMP
    /// Destination Unreachable (docs/CONFIG.md lists which). `false`: dropped
    /// silently. The router errors of 4.1 / 5.1 (Time Exceeded, Fragmentation Needed / Packet
    /// Too Big, source route, routing header) go either way: path MTU discovery needs them.
    pub unreachable_errors: bool,
    /// Source of the translator's own ICMPv4 errors; `None`: SIIT's first `rfc6791`
    /// address (else the address the packet was sent to), NAT64's first pool4 address.
    pub error_source4: Option<u32>,
    /// Source of the translator's own ICMPv6 errors; `None`: the pref64 form of the default
    /// IPv4 source above (SIIT without `rfc6791`: the address the packet was sent to).
    pub error_source6: Option<u128>,
}

impl Default for XlatParams {
    fn default() -> Self {
        XlatParams {
            mtu: 1500,
            lowest_ipv6_mtu: 1280,
            udp_zero_checksum: UdpZeroChecksum::Compute,
            unreachable_errors: true,
            error_source4: None,
            error_source6: None,
        }
    }
}

impl XlatParams {
    fn validate(&self, section: &'static str) -> Result<(), ConfigError> {
        if self.mtu < 1280 {
            return Err(ConfigError {
                key: "tun.mtu",
                problem: format!(
                    "{} is below 1280, the minimum IPv6 MTU (RFC 8200 5) that [{section}] needs",
                    self.mtu
                ),
            });
        }
        if self.lowest_ipv6_mtu < 1280 || self.lowest_ipv6_mtu > 65535 {
            return Err(ConfigError {
                key: if section == "nat64" {
                    "nat64.lowest_ipv6_mtu"
                } else {
                    "siit.lowest_ipv6_mtu"
                },
                problem: format!(
                    "{} is out of range; expected 1280 (the IPv6 minimum, the default) to 65535",
                    self.lowest_ipv6_mtu
                ),
            });
        }
        let nat64 = section == "nat64";
        if let Some(a) = self.error_source4 {
            if crate::martian::source4(a) {
                return Err(ConfigError {
                    key: if nat64 {
                        "nat64.error_source4"
                    } else {
                        "siit.error_source4"
                    },
                    problem: format!(
                        "{} cannot be a source (this-network, loopback, link-local, multicast or broadcast: RFC 1812 5.3.7); give a unicast address of this translator, e.g. \"192.0.2.1\"",
                        Ipv4Addr::from(a)
                    ),
                });
            }
        }
        if let Some(a) = self.error_source6 {
            if crate::martian::source6(a) {
                return Err(ConfigError {
                    key: if nat64 {
                        "nat64.error_source6"
                    } else {
                        "siit.error_source6"
                    },
                    problem: format!(
                        "{} cannot be a source of errors that cross routers (unspecified, loopback, link-local or multicast: RFC 4291 2.5); give a global unicast address, e.g. \"2001:db8::1\"",
                        std::net::Ipv6Addr::from(a)
                    ),
                });
            }
        }
        Ok(())
    }
}

/// How SIIT handles an IPv6 node that sends to the pref64 form of an IPv4 address that an
/// EAM entry maps back to IPv6 (RFC 7757 4: hairpinning; Jool's `eam-hairpin-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EamHairpin {
    /// No hairpinning support: every packet is translated with the EAM table as it is; a
    /// hairpinned packet leaves as IPv4 and comes back with its source's EAM form, which the
    /// receiver does not know (RFC 7757 4.1, the problem).
    Off,
    /// RFC 7757 4.2: the source of an IPv4 packet is never translated by the EAM table
    /// (always by the pref64), so a packet that left as IPv4 and was routed back comes in
    /// with the address its sender used; only for networks whose EAM IPv4 addresses never
    /// send from the IPv4 side.
    Simple,
    /// RFC 7757 4.3: the translator recognises the hairpin itself -- an IPv6 packet whose
    /// destination, translated by the pref64, is an address it translates back to IPv6 --
    /// and sends it straight back to IPv6 with the pref64 form of its source.
    #[default]
    Intrinsic,
}

/// One Explicit Address Mapping (RFC 7757 3.1): an IPv4 prefix and an IPv6 prefix with
/// suffixes of equal length, translated into each other bit for bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eam {
    pub ipv4: Prefix4,
    pub ipv6: Prefix6,
}

/// Stateless translation (SIIT, RFC 7915) configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiitConfig {
    /// pref64 (RFC 6052): IPv4 addresses without an EAM entry are embedded in it.
    pub prefix: Option<crate::rfc6052::Pref64>,
    /// IPv4 addresses of IPv6 hosts that translate through `prefix` (IPv4-translatable
    /// addresses, RFC 6052 / RFC 7915 1.3): IPv4 packets to them are translated.
    pub pool4: Vec<Prefix4>,
    /// Explicit Address Mappings (RFC 7757).
    pub eam: Vec<Eam>,
    /// Source addresses for ICMPv6 errors from IPv6 nodes whose address has no IPv4 form
    /// (RFC 6791); also the source of this translator's own ICMPv4 errors.
    pub rfc6791: Option<Prefix4>,
    /// Source addresses for ICMPv4 errors from IPv4 nodes whose address has no IPv6 form
    /// (no EAM entry and no pref64 it may go in): RFC 6791's idea the other way (Jool's
    /// `rfc6791v6`).
    pub rfc6791v6: Option<Prefix6>,
    /// Hairpinning of EAM addresses (RFC 7757 4).
    pub eam_hairpin: EamHairpin,
    pub params: XlatParams,
}

impl SiitConfig {
    /// Checks the things the engine relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if self.prefix.is_none() && self.eam.is_empty() {
            return err(
                "siit.prefix",
                "SIIT needs a pref64 or EAM entries; e.g. prefix = \"2001:2:0:64::/96\"".into(),
            );
        }
        if !self.pool4.is_empty() && self.prefix.is_none() {
            return err(
                "siit.pool4",
                "pool4 addresses translate through the pref64; set siit.prefix too".into(),
            );
        }
        for (i, e) in self.eam.iter().enumerate() {
            // RFC 7757 3.2: the suffixes may differ in length (the shorter one takes the first
            // bits of the longer one, [`crate::siit::eam`]), but an IPv4 suffix longer than
            // the IPv6 one would give several IPv4 hosts one IPv6 address, and answers could
            // not tell them apart.
            if 32 - u32::from(e.ipv4.len) > 128 - u32::from(e.ipv6.len) {
                return err(
                    "siit.eam",
                    format!(
                        "entry {i} ({} = {}): the IPv4 suffix ({} bits) is longer than the IPv6 suffix ({} bits), so several IPv4 addresses would share one IPv6 address; shorten the IPv6 prefix to /{} or less, or lengthen the IPv4 prefix",
                        e.ipv4,
                        e.ipv6,
                        32 - u32::from(e.ipv4.len),
                        128 - u32::from(e.ipv6.len),
                        96 + u32::from(e.ipv4.len)
                    ),
                );
            }
            for (j, f) in self.eam.iter().enumerate().skip(i + 1) {
                if e.ipv4 == f.ipv4 || e.ipv6 == f.ipv6 {
                    return err(
                        "siit.eam",
                        format!(
                            "entries {i} and {j} map the same prefix; each prefix may appear once"
                        ),
                    );
                }
            }
            if let Some(p) = self.prefix {
                if p.contains(e.ipv6.addr) {
                    return err(
                        "siit.eam",
                        format!("entry {i}: {} lies inside siit.prefix {p}", e.ipv6),
                    );
                }
            }
        }
        if self.eam_hairpin == EamHairpin::Simple && self.prefix.is_none() {
            return err(
                "siit.eam_hairpin",
                "\"simple\" translates every IPv4 source by the pref64 (RFC 7757 4.2), and there is none: set siit.prefix, or use \"intrinsic\" (the default) or \"off\"".into(),
            );
        }
        for (i, p) in self.pool4.iter().enumerate() {
            if self.eam.iter().any(|e| e.ipv4.overlaps(p)) {
                return err(
                    "siit.pool4",
                    format!("entry {i} ({p}) overlaps an EAM entry's IPv4 prefix"),
                );
            }
        }
        if let Some(r) = self.rfc6791v6 {
            if self.eam.iter().any(|e| e.ipv6.overlaps(&r))
                || self
                    .prefix
                    .is_some_and(|p| r.contains(p.addr()) || p.contains(r.addr))
            {
                return err(
                    "siit.rfc6791v6",
                    format!("{r} overlaps an EAM entry or siit.prefix; its addresses must name nobody else"),
                );
            }
        }
        if let Some(r) = self.rfc6791 {
            if self.eam.iter().any(|e| e.ipv4.overlaps(&r))
                || self.pool4.iter().any(|p| p.overlaps(&r))
            {
                return err(
                    "siit.rfc6791",
                    format!("{r} overlaps siit.pool4 or an EAM entry; RFC 6791 addresses must be addresses no host uses"),
                );
            }
        }
        self.params.validate("siit")
    }
}

/// Stateful NAT64 (RFC 6146) configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nat64Config {
    /// pref64 (RFC 6052): IPv6 packets to it go to the IPv4 address embedded in it.
    pub prefix: crate::rfc6052::Pref64,
    /// IPv4 transport addresses for the BIB (RFC 6146 3.5).
    pub pool4: Vec<Prefix4>,
    /// Inclusive TCP/UDP port range of pool4; ICMP identifiers use 0-65535.
    pub ports: (u16, u16),
    /// Static BIB entries: IPv6 endpoints IPv4 hosts can reach at a pool4 endpoint.
    pub static_bib: Vec<PortForward<u128>>,
    /// RFC 6146 3.5.1 / 3.5.2: endpoint-independent or address-dependent filtering.
    pub filtering: Filtering,
    pub timeouts: Timeouts,
    pub limits: Limits,
    /// Inbound packets refresh sessions (RFC 6146 3.5.1 refreshes on both directions).
    pub inbound_refresh: bool,
    /// Verify the IPv4 header checksum of every packet (RFC 1812 5.2.2).
    pub verify_ip_checksum: bool,
    pub params: XlatParams,
    /// The FTP ALG of RFC 6384 ([`crate::alg`]). Off by default.
    pub alg_ftp: bool,
    /// Deterministic NAT64 ([`crate::deterministic`], RFC 7422 2's arithmetic): each
    /// subscriber of `inside` owns a fixed pool4 address and port range.
    pub deterministic: bool,
    /// With `deterministic`: the IPv6 prefixes of the subscribers, the only sources
    /// translated (others are `not_ours`).
    pub inside: Vec<Prefix6>,
    /// With `deterministic`: the prefix length of one subscriber (128: each address; 64:
    /// each /64, all its addresses sharing one range).
    pub subscriber_prefix_len: u8,
    /// Ports each subscriber gets with `deterministic`; 0: as many as fit.
    pub ports_per_host: u16,
}

impl Default for Nat64Config {
    fn default() -> Self {
        Nat64Config {
            prefix: crate::rfc6052::WELL_KNOWN,
            pool4: Vec::new(),
            ports: (1024, 65535),
            static_bib: Vec::new(),
            filtering: Filtering::AddressDependent,
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            inbound_refresh: true,
            verify_ip_checksum: true,
            params: XlatParams::default(),
            alg_ftp: false,
            deterministic: false,
            inside: Vec::new(),
            subscriber_prefix_len: 128,
            ports_per_host: 0,
        }
    }
}

impl Nat64Config {
    /// The deterministic mapping ([`crate::deterministic`]) when `deterministic` is on and
    /// the configuration is valid.
    pub fn deterministic_map(&self) -> Option<crate::deterministic::Deterministic> {
        if !self.deterministic {
            return None;
        }
        self.build_deterministic().ok()
    }

    fn build_deterministic(&self) -> Result<crate::deterministic::Deterministic, ConfigError> {
        let per_host = (self.ports_per_host > 0).then_some(self.ports_per_host);
        crate::deterministic::Deterministic::new64(
            &self.inside,
            self.subscriber_prefix_len,
            &self.pool4,
            self.ports,
            per_host,
        )
    }

    /// What deterministic NAT64 cannot be combined with, and whether its subscribers fit.
    fn validate_deterministic(&self) -> Result<(), ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if !self.deterministic {
            let stray = if self.ports_per_host > 0 {
                Some("nat64.ports_per_host")
            } else if !self.inside.is_empty() {
                Some("nat64.inside")
            } else if self.subscriber_prefix_len != 128 {
                Some("nat64.subscriber_prefix_len")
            } else {
                None
            };
            return match stray {
                Some(k) => err(
                    k,
                    "is for deterministic NAT64; add deterministic = true or remove it".into(),
                ),
                None => Ok(()),
            };
        }
        if self.inside.is_empty() {
            return err(
                "nat64.inside",
                "deterministic NAT64 needs the subscribers' IPv6 prefixes, e.g. inside = [\"2001:db8:1::/64\"] with subscriber_prefix_len = 128".into(),
            );
        }
        if self.limits.port_block_size > 0 {
            return err(
                "nat64.port_block_size",
                "port blocks are handed out as hosts need them, deterministic ranges are fixed: use one of port_block_size and deterministic = true".into(),
            );
        }
        if let Some(f) = self.static_bib.first() {
            return err(
                "nat64.static_bib",
                format!(
                    "entry {} -> {} forwards a pool4 port, which is some subscriber's port with deterministic = true: remove the entry or turn deterministic off",
                    f.inside.show(true),
                    f.outside.show(true)
                ),
            );
        }
        self.build_deterministic().map(|_| ())
    }

    /// Checks the things the engine relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if self.pool4.is_empty() {
            return err(
                "nat64.pool4",
                "NAT64 needs at least one pool4 address, e.g. pool4 = [\"198.19.0.101/32\"]".into(),
            );
        }
        let size: u64 = self.pool4.iter().map(Prefix4::size).sum();
        if size > 65536 {
            return err(
                "nat64.pool4",
                format!("{size} addresses; at most 65536 are supported"),
            );
        }
        for (i, p) in self.pool4.iter().enumerate() {
            if self.pool4.iter().skip(i + 1).any(|q| q.overlaps(p)) {
                return err(
                    "nat64.pool4",
                    format!("{p} is listed twice or overlaps another pool4 entry"),
                );
            }
        }
        if self.ports.0 == 0 || self.ports.0 > self.ports.1 {
            return err(
                "nat64.ports",
                format!(
                    "range {}-{} is empty or starts at 0; write LOW-HIGH with 1 <= LOW <= HIGH",
                    self.ports.0, self.ports.1
                ),
            );
        }
        validate_forwards("nat64.static_bib", &self.static_bib, &self.pool4)?;
        self.validate_deterministic()?;
        validate_timeouts_limits(&self.timeouts, &self.limits)?;
        self.params.validate("nat64")
    }
}
