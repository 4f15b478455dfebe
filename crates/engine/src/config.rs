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
    pub fn nth(&self, i: u64) -> u32 {
        self.addr.wrapping_add(i as u32)
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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: 1_000_000,
            max_sessions_per_host: 10_000,
            max_fragment_flows: 4096,
            max_fragments_held: 256,
        }
    }
}

/// One static 1:1 entry: always translated, both directions (RFC 2663 4.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticEntry {
    pub inside: Ipv4Addr,
    pub outside: Ipv4Addr,
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
}

impl Default for Nat44Config {
    fn default() -> Self {
        Nat44Config {
            inside: Vec::new(),
            pool: Vec::new(),
            mode: Nat44Mode::Napt,
            statics: Vec::new(),
            filtering: Filtering::AddressDependent,
            ports: (1024, 65535),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            inbound_refresh: true,
            verify_ip_checksum: true,
        }
    }
}

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
        for (i, s) in self.statics.iter().enumerate() {
            for t in self.statics.iter().skip(i + 1) {
                if s.inside == t.inside || s.outside == t.outside {
                    return err("nat44.static", format!("entries {} -> {} and {} -> {} overlap; each inside and each outside address may appear once", s.inside, s.outside, t.inside, t.outside));
                }
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
        let t = &self.timeouts;
        for (key, v) in [
            ("timeouts.udp", t.udp),
            ("timeouts.tcp_established", t.tcp_established),
            ("timeouts.tcp_transitory", t.tcp_transitory),
            ("timeouts.icmp", t.icmp),
        ] {
            if v == 0 {
                return err(key, "must be at least 1 s".into());
            }
        }
        if self.timeouts.fragment == 0 {
            return err("timeouts.fragment", "must be at least 1 s".into());
        }
        if self.limits.max_sessions == 0 {
            return err("limits.max_sessions", "must be at least 1".into());
        }
        if self.limits.max_sessions_per_host == 0 {
            return err("limits.max_sessions_per_host", "must be at least 1".into());
        }
        Ok(())
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
