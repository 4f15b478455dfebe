//! The xlat configuration file (TOML), parsed and checked into [`Config`] and from there into
//! the engine's [`EngineConfig`].
//!
//! Every table rejects unknown keys. Values the engine understands (prefixes, modes, port
//! ranges) are read as strings and converted here, so an error names the file, the key, what
//! was wrong and what would be right:
//!
//! ```text
//! xlat.toml: nat44.mode: unknown value "nap"; expected one of "static", "pool", "napt"
//! ```
//!
//! The engine's own checks ([`Nat44Config::validate`]) run last, and their errors get the file
//! name too. docs/CONFIG.md describes every key.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use xlat_dns64::Dns64Config;
use xlat_engine::{
    Eam, EamHairpin, EngineConfig, Filtering, Limits, Nat44Config, Nat44Mode, Nat64Config, Pref64,
    Prefix4, Prefix6, SiitConfig, StaticEntry, Timeouts, UdpZeroChecksum, XlatParams,
};

/// Where the control socket lives when the config does not say.
pub const DEFAULT_SOCKET: &str = "/run/xlat.sock";
/// Default TUN interface name.
pub const DEFAULT_TUN: &str = "xlat0";
/// Default routing table for traffic from inside prefixes.
pub const DEFAULT_ROUTE_TABLE: u32 = 4400;
/// Default preference of the `ip rule`s that send inside traffic to that table.
pub const DEFAULT_RULE_PREF: u32 = 4400;
/// The most `[dataplane] workers`.
pub const MAX_WORKERS: usize = xlat_engine::shard::MAX_WORKERS;

#[path = "config_forward.rs"]
mod forward;
#[path = "config_sync.rs"]
mod sync;
#[path = "config_tunnel.rs"]
mod tunnel;
pub use tunnel::{max_tunnel_mtu, min_tunnel_mtu, DEFAULT_ROUTER_LIFETIME};

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("{file}: cannot read: {error}")]
    Read { file: String, error: std::io::Error },
    /// TOML syntax, a wrong type, or an unknown key (toml's message, with line and column).
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    /// A value that parses but is not acceptable.
    #[error("{file}: {key}: {problem}")]
    Invalid {
        file: String,
        key: String,
        problem: String,
    },
    /// Several sections' problems, reported at once (each an `Invalid`, in file order).
    #[error("{}", several(file, errors))]
    Several {
        file: String,
        errors: Vec<ConfigFileError>,
    },
}

/// `FILE: N problems:` and a line per problem (`KEY: PROBLEM`).
fn several(file: &str, errors: &[ConfigFileError]) -> String {
    let mut s = format!("{file}: {} problems:", errors.len());
    for e in errors {
        match e {
            ConfigFileError::Invalid { key, problem, .. } => s += &format!("\n  {key}: {problem}"),
            other => s += &format!("\n  {other}"),
        }
    }
    s
}

impl ConfigFileError {
    /// The config key at fault, when the error is about one value (the first, of several).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigFileError::Invalid { key, .. } => Some(key),
            ConfigFileError::Several { errors, .. } => errors.first().and_then(|e| e.key()),
            _ => None,
        }
    }

    /// `errors` (at least one) as one error: itself when it is alone.
    fn all(file: &str, mut errors: Vec<ConfigFileError>) -> ConfigFileError {
        if errors.len() == 1 {
            if let Some(e) = errors.pop() {
                return e;
            }
        }
        ConfigFileError::Several {
            file: file.to_string(),
            errors,
        }
    }
}

/// The SHA-256 of `bytes`, in lower-case hex.
fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            use std::fmt::Write as _;
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The value of `r`, or `None` with its error kept in `errors` (a section's check goes on
/// to the next section).
fn keep<T>(errors: &mut Vec<ConfigFileError>, r: Result<T, ConfigFileError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

/// `[tun]`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunConfig {
    pub name: String,
    pub mtu: u32,
    /// Set up forwarding, policy routes and proxy ARP at start, remove them at exit.
    pub auto_routes: bool,
    pub route_table: u32,
    pub rule_pref: u32,
    /// Kernel offloads on the TUN device (`IFF_VNET_HDR`, `TUNSETOFFLOAD`): TCP
    /// super-packets and partial checksums cross it whole (`[tun] offload`).
    pub offload: bool,
}

impl Default for TunConfig {
    fn default() -> Self {
        TunConfig {
            name: DEFAULT_TUN.to_string(),
            mtu: 1500,
            auto_routes: true,
            route_table: DEFAULT_ROUTE_TABLE,
            rule_pref: DEFAULT_RULE_PREF,
            offload: true,
        }
    }
}

/// `[dataplane].fast_path`: who rewrites established flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FastPath {
    /// Every packet crosses the TUN device and the engine.
    #[default]
    None,
    /// An XDP program on `[dataplane].interfaces` applies the engine's session recipes
    /// (NAT44 UDP and established TCP); everything else still goes through the engine.
    Xdp,
}

/// `[dataplane].slow_path`: how packets the fast path does not carry reach the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlowPath {
    /// The kernel routes them into the TUN device; the engine's output goes back through it.
    #[default]
    Tun,
    /// The XDP program on `[dataplane].interfaces` redirects them to AF_XDP sockets; the
    /// engine's output leaves through the egress interface's socket (the TUN device stays
    /// for what the kernel must see, and as the fallback).
    AfXdp,
}

/// `[dataplane]`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataplaneConfig {
    pub fast_path: FastPath,
    pub slow_path: SlowPath,
    /// Interfaces the XDP program attaches to and may redirect to (inside and outside).
    pub interfaces: Vec<String>,
    /// Recipes the fast path can hold (two per session).
    pub table_size: u32,
    /// Packets a second per CPU the XDP program lets through to the slow path (new flows,
    /// TCP SYN/FIN/RST); 0 = no limit.
    pub slow_path_pps: u32,
    /// Packets a NAT44/NAT64 UDP session carries through the engine before its recipes go
    /// to the fast path (a reply promotes it at once): [`xlat_engine::Engine::set_offload_after`].
    pub offload_udp_after: u8,
    /// Packet workers: threads that each own one engine shard and one TUN queue.
    pub workers: usize,
}

/// Default `[dataplane].table_size`: recipes for 512k sessions (32 bytes each + hash
/// overhead in kernel memory).
pub const DEFAULT_FAST_PATH_TABLE: u32 = 1 << 20;

/// Default `[dataplane].offload_udp_after`: a UDP session goes to the fast path at its second
/// packet (or its first reply), so a one-packet flow never costs a recipe install and
/// withdrawal (docs/CONFIG.md has the measurement).
pub const DEFAULT_OFFLOAD_UDP_AFTER: u8 = 2;

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            fast_path: FastPath::None,
            slow_path: SlowPath::Tun,
            interfaces: Vec::new(),
            table_size: DEFAULT_FAST_PATH_TABLE,
            slow_path_pps: 0,
            offload_udp_after: DEFAULT_OFFLOAD_UDP_AFTER,
            workers: 1,
        }
    }
}

/// A checked configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The file it came from, as given (used in messages).
    pub file: String,
    pub tun: TunConfig,
    /// `[nat44]`, when present.
    pub nat44: Option<Nat44Config>,
    /// `[nat64]`, when present: stateful NAT64 (RFC 6146).
    pub nat64: Option<Nat64Config>,
    /// `[siit]`, when present: stateless translation (RFC 7915).
    pub siit: Option<SiitConfig>,
    /// `[control].socket`
    pub socket: PathBuf,
    /// `[engine].seed`; `None` lets the caller choose (the daemon reads /dev/urandom).
    pub seed: Option<u64>,
    /// `[dns64]`, when present: the DNS64 proxy `xlat run` starts beside the packet worker.
    pub dns64: Option<Dns64Config>,
    /// `[tunnel.6to4]` / `[tunnel.isatap]`, when present: 6in4 tunnel endpoints.
    pub tunnel: Option<xlat_engine::tunnel::TunnelConfig>,
    /// `[dataplane]`: the optional XDP fast path.
    pub dataplane: DataplaneConfig,
    /// `[limits].prefault`: make the tables for `max_sessions` resident at start.
    pub prefault: bool,
    /// `[logging]`, when present with a collector: NAT event logging.
    pub logging: Option<crate::eventlog::LogConfig>,
    /// `[metrics]`, when present: the HTTP listener for Prometheus and the live page.
    pub metrics: Option<MetricsConfig>,
    /// `[sync]`, when present: session sync with a peer gateway (stateful failover).
    pub sync: Option<crate::sync::SyncConfig>,
    /// SHA-256 of the file's bytes (hex): logged at start and at each reload, so the log
    /// names the exact configuration it was made under (RFC 7422 3: deterministic NAT's
    /// mapping is a function of it).
    pub sha256: String,
}

/// `[metrics]`: where the HTTP listener for `/metrics` (Prometheus), `/stats.json` and the
/// live page `/` listens (docs/METRICS.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    pub listen: std::net::SocketAddr,
}

/// The address the examples and docs use for `[metrics] listen`.
pub const EXAMPLE_METRICS_LISTEN: &str = "127.0.0.1:9641";

// ---- the file as written -------------------------------------------------------------------

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tun: RawTun,
    nat44: Option<RawNat44>,
    nat64: Option<RawNat64>,
    siit: Option<RawSiit>,
    #[serde(default)]
    timeouts: RawTimeouts,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    control: RawControl,
    #[serde(default)]
    engine: RawEngine,
    dns64: Option<RawDns64>,
    tunnel: Option<tunnel::RawTunnel>,
    #[serde(default)]
    dataplane: RawDataplane,
    logging: Option<RawLogging>,
    metrics: Option<RawMetrics>,
    sync: Option<sync::RawSync>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLogging {
    syslog: Option<Vec<String>>,
    ipfix: Option<Vec<String>>,
    ipfix_template_refresh: Option<i64>,
    ipfix_domain_id: Option<i64>,
    events: Option<String>,
}

impl RawLogging {
    /// `[logging]`: collectors as socket addresses, the event level; `None` when it logs
    /// nothing (no collector, or `events = "none"`).
    fn check(
        self,
        cx: &Ctx<'_>,
        max_sessions_per_host: u32,
    ) -> Result<Option<crate::eventlog::LogConfig>, ConfigFileError> {
        use crate::eventlog::{LogConfig, LogEvents};
        let events = match self.events.as_deref() {
            None | Some("sessions") => Some(LogEvents::Sessions),
            Some("mappings") => Some(LogEvents::Mappings),
            Some("port-blocks") => Some(LogEvents::PortBlocks),
            Some("none") => None,
            Some(other) => {
                return Err(cx.invalid(
                    "logging.events",
                    format!(
                    "unknown value {other:?}; expected one of \"sessions\", \"mappings\", \"port-blocks\", \"none\""
                ),
                ))
            }
        };
        let syslog = collectors(cx, "syslog", self.syslog.unwrap_or_default(), 514)?;
        let ipfix = collectors(cx, "ipfix", self.ipfix.unwrap_or_default(), 4739)?;
        let refresh = match self.ipfix_template_refresh {
            None => crate::ipfix::DEFAULT_REFRESH.as_secs(),
            Some(s @ 1..=86_400) => s.unsigned_abs(),
            Some(s) => {
                return Err(cx.invalid(
                    "logging.ipfix_template_refresh",
                    format!("{s} seconds is out of range; expected 1 to 86400 (a day), like 60: templates are resent this often (RFC 7011 10.3.6)"),
                ))
            }
        };
        let domain = match self.ipfix_domain_id {
            None => 1,
            Some(d) => u32::try_from(d).map_err(|_| {
                cx.invalid(
                    "logging.ipfix_domain_id",
                    format!("{d} is not an observation domain ID; expected 0 to 4294967295 (RFC 7011 3.1), like 1"),
                )
            })?,
        };
        Ok(match events {
            Some(events) if !syslog.is_empty() || !ipfix.is_empty() => Some(LogConfig {
                syslog,
                ipfix,
                ipfix_template_refresh: std::time::Duration::from_secs(refresh),
                ipfix_domain_id: domain,
                max_sessions_per_host,
                ports_per_host: 0,
                events,
            }),
            _ => None,
        })
    }
}

/// `logging.KEY`: collector addresses, each `ADDR:PORT` with a unicast address and a port
/// (`port` is the one an example names).
fn collectors(
    cx: &Ctx<'_>,
    key: &str,
    list: Vec<String>,
    port: u16,
) -> Result<Vec<std::net::SocketAddr>, ConfigFileError> {
    let mut out = Vec::new();
    for (i, a) in list.iter().enumerate() {
        let addr: std::net::SocketAddr = a.parse().map_err(|_| {
            cx.invalid(
                format!("logging.{key}[{i}]"),
                format!("{a:?} is not an address and port; expected one like \"192.0.2.51:{port}\" or \"[2001:db8::51]:{port}\""),
            )
        })?;
        if addr.port() == 0 || addr.ip().is_unspecified() || addr.ip().is_multicast() {
            return Err(cx.invalid(
                format!("logging.{key}[{i}]"),
                format!("{a:?} cannot receive: expected a unicast collector address and a port other than 0, like \"192.0.2.51:{port}\""),
            ));
        }
        out.push(addr);
    }
    Ok(out)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDataplane {
    fast_path: Option<String>,
    slow_path: Option<String>,
    interfaces: Option<Vec<String>>,
    table_size: Option<u32>,
    slow_path_pps: Option<u32>,
    offload_udp_after: Option<i64>,
    workers: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTun {
    name: Option<String>,
    mtu: Option<u32>,
    auto_routes: Option<bool>,
    route_table: Option<u32>,
    rule_pref: Option<u32>,
    offload: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawNat44 {
    inside: Option<Vec<String>>,
    pool: Option<Vec<String>>,
    mode: Option<String>,
    #[serde(rename = "static")]
    statics: Option<Vec<RawStatic>>,
    filtering: Option<String>,
    ports: Option<String>,
    port_block_size: Option<i64>,
    port_block_hold: Option<i64>,
    port_blocks_per_host: Option<i64>,
    deterministic: Option<bool>,
    ports_per_host: Option<i64>,
    inbound_refresh: Option<bool>,
    verify_ip_checksum: Option<bool>,
    alg: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawNat64 {
    prefix: Option<String>,
    pool4: Option<Vec<String>>,
    ports: Option<String>,
    port_block_size: Option<i64>,
    port_block_hold: Option<i64>,
    port_blocks_per_host: Option<i64>,
    deterministic: Option<bool>,
    inside: Option<Vec<String>>,
    subscriber_prefix_len: Option<i64>,
    ports_per_host: Option<i64>,
    filtering: Option<String>,
    inbound_refresh: Option<bool>,
    verify_ip_checksum: Option<bool>,
    lowest_ipv6_mtu: Option<u32>,
    udp_zero_checksum: Option<String>,
    allow_non_global_wkp: Option<bool>,
    static_bib: Option<Vec<forward::RawBib>>,
    alg: Option<Vec<String>>,
    unreachable_errors: Option<bool>,
    error_source4: Option<String>,
    error_source6: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSiit {
    prefix: Option<String>,
    allow_non_global_wkp: Option<bool>,
    pool4: Option<Vec<String>>,
    eam: Option<Vec<RawEam>>,
    rfc6791: Option<String>,
    rfc6791v6: Option<String>,
    lowest_ipv6_mtu: Option<u32>,
    udp_zero_checksum: Option<String>,
    eam_hairpin: Option<String>,
    unreachable_errors: Option<bool>,
    error_source4: Option<String>,
    error_source6: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEam {
    ipv4: String,
    ipv6: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStatic {
    inside: String,
    outside: String,
    /// With a protocol, a static NAPT entry (port forwarding, `config_forward.rs`).
    proto: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    udp: Option<u64>,
    tcp_established: Option<u64>,
    tcp_transitory: Option<u64>,
    icmp: Option<u64>,
    fragment: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_sessions: Option<u32>,
    max_sessions_per_host: Option<u32>,
    max_fragment_flows: Option<u32>,
    max_fragments_held: Option<u32>,
    prefault: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawControl {
    socket: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    seed: Option<u64>,
}

// ---- conversion ------------------------------------------------------------------------------

struct Ctx<'a> {
    file: &'a str,
}

impl Ctx<'_> {
    fn invalid(&self, key: impl Into<String>, problem: impl Into<String>) -> ConfigFileError {
        ConfigFileError::Invalid {
            file: self.file.to_string(),
            key: key.into(),
            problem: problem.into(),
        }
    }

    /// `[tun]`.
    fn tun(&self, raw: RawTun) -> Result<TunConfig, ConfigFileError> {
        // [tun]
        let d = TunConfig::default();
        let tun = TunConfig {
            name: raw.name.unwrap_or(d.name),
            mtu: raw.mtu.unwrap_or(d.mtu),
            auto_routes: raw.auto_routes.unwrap_or(d.auto_routes),
            route_table: raw.route_table.unwrap_or(d.route_table),
            rule_pref: raw.rule_pref.unwrap_or(d.rule_pref),
            offload: raw.offload.unwrap_or(d.offload),
        };
        if !xlat_io::tun::valid_ifname(&tun.name) {
            return Err(self.invalid(
                "tun.name",
                format!("{:?} is not a valid interface name; expected 1 to 15 letters, digits, '-', '_' or '.', like \"xlat0\"", tun.name),
            ));
        }
        // An existing interface must be a TUN device (one the daemon can attach to, e.g. made
        // with `ip tuntap add`); `lo` or `eth0` would fail at start, after the routes.
        let sys = std::path::Path::new("/sys/class/net").join(&tun.name);
        if sys.exists() && !sys.join("tun_flags").exists() {
            return Err(self.invalid(
                "tun.name",
                format!("{:?} is an existing interface that is not a TUN device; name a new interface (xlat creates it) or one made with `ip tuntap add NAME mode tun`", tun.name),
            ));
        }
        if !(68..=65535).contains(&tun.mtu) {
            return Err(self.invalid(
                "tun.mtu",
                format!(
                    "{} is out of range; expected 68 to 65535 (1500 is usual)",
                    tun.mtu
                ),
            ));
        }
        if tun.route_table == 0 || (253..=255).contains(&tun.route_table) {
            return Err(self.invalid(
                "tun.route_table",
                format!("{} is reserved (0 unspec, 253 default, 254 main, 255 local); expected another table number like 4400", tun.route_table),
            ));
        }
        if tun.rule_pref == 0 || tun.rule_pref >= 32766 {
            return Err(self.invalid(
                "tun.rule_pref",
                format!("{} would not come before the main table's rule (32766); expected 1 to 32765, like 4400", tun.rule_pref),
            ));
        }

        Ok(tun)
    }

    /// `[nat44]`.
    fn nat44(
        &self,
        n: RawNat44,
        timeouts: Timeouts,
        limits: Limits,
    ) -> Result<Nat44Config, ConfigFileError> {
        let defaults = Nat44Config::default();
        let mode = self.choice(
            "nat44.mode",
            n.mode.as_deref(),
            defaults.mode,
            &[
                ("static", Nat44Mode::Static),
                ("pool", Nat44Mode::Pool),
                ("napt", Nat44Mode::Napt),
            ],
        )?;
        let filtering = self.filtering("nat44.filtering", n.filtering.as_deref())?;
        let inside = self.prefixes("nat44.inside", n.inside)?;
        let pool = self.prefixes("nat44.pool", n.pool)?;
        let mut statics = Vec::new();
        let mut forwards = Vec::new();
        for (i, s) in n.statics.unwrap_or_default().iter().enumerate() {
            if let Some(proto) = &s.proto {
                forwards.push(self.forward4(i, proto, &s.inside, &s.outside)?);
                continue;
            }
            statics.push(StaticEntry {
                inside: self.address(format!("nat44.static[{i}].inside"), &s.inside)?,
                outside: self.address(format!("nat44.static[{i}].outside"), &s.outside)?,
            });
        }
        let ports = self.ports("nat44.ports", n.ports.as_deref())?;
        let mut limits = limits;
        limits.port_block_size =
            self.port_block_size("nat44", n.port_block_size, ports, mode == Nat44Mode::Napt)?;
        limits.port_block_hold =
            self.port_block_hold("nat44", n.port_block_hold, limits.port_block_size)?;
        limits.port_blocks_per_host = self.port_blocks_per_host(
            "nat44",
            n.port_blocks_per_host,
            limits.port_block_size,
            ports,
        )?;

        let nat44 = Nat44Config {
            inside,
            pool,
            mode,
            statics,
            forwards,
            filtering,
            ports,
            timeouts,
            limits,
            inbound_refresh: n.inbound_refresh.unwrap_or(defaults.inbound_refresh),
            verify_ip_checksum: n.verify_ip_checksum.unwrap_or(defaults.verify_ip_checksum),
            alg_ftp: self.alg("nat44", n.alg.as_deref())?,
            deterministic: n.deterministic.unwrap_or(false),
            ports_per_host: self.ports_per_host("nat44.ports_per_host", n.ports_per_host)?,
        };
        nat44
            .validate()
            .map_err(|e| self.invalid(e.key, e.problem))?;
        Ok(nat44)
    }

    /// `TABLE.ports_per_host` (deterministic NAT): 0 when absent (as many as fit).
    fn ports_per_host(&self, key: &str, v: Option<i64>) -> Result<u16, ConfigFileError> {
        match v {
            None => Ok(0),
            Some(v @ 1..=65535) => Ok(u16::try_from(v).unwrap_or(u16::MAX)),
            Some(v) => Err(self.invalid(
                key,
                format!("{v} is out of range; expected 1 to 65535 ports, like 1008 (or leave it out: as many as fit)"),
            )),
        }
    }

    /// `[control] socket`.
    fn socket(&self, raw: RawControl) -> Result<String, ConfigFileError> {
        // [control]
        let socket = raw.socket.unwrap_or_else(|| DEFAULT_SOCKET.to_string());
        if socket.is_empty() {
            return Err(self.invalid(
                "control.socket",
                format!("empty path; expected a file path like {DEFAULT_SOCKET:?}"),
            ));
        }
        // sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
        if socket.len() > 107 {
            return Err(self.invalid(
                "control.socket",
                format!(
                    "path is {} bytes; a Unix socket path may have at most 107",
                    socket.len()
                ),
            ));
        }

        Ok(socket)
    }

    /// `[dataplane]`; `offloadable`: the file has a [nat44], [nat64], [siit] or
    /// [tunnel.6to4] section or an ISATAP router (what the XDP fast path carries).
    fn dataplane(
        &self,
        raw: RawDataplane,
        offloadable: bool,
    ) -> Result<DataplaneConfig, ConfigFileError> {
        // [dataplane]
        let dd = DataplaneConfig::default();
        let fast_path = match raw.fast_path.as_deref() {
            None | Some("none") => FastPath::None,
            Some("xdp") => FastPath::Xdp,
            Some(other) => {
                return Err(self.invalid(
                    "dataplane.fast_path",
                    format!("{other:?} is not a fast path; expected \"none\" or \"xdp\""),
                ))
            }
        };
        let slow_path = match raw.slow_path.as_deref() {
            None | Some("tun") => SlowPath::Tun,
            Some("af_xdp") => SlowPath::AfXdp,
            Some(other) => {
                return Err(self.invalid(
                    "dataplane.slow_path",
                    format!("{other:?} is not a slow path; expected \"tun\" or \"af_xdp\""),
                ))
            }
        };
        let interfaces = raw.interfaces.unwrap_or_default();
        if let Some(bad) = interfaces.iter().find(|i| !xlat_io::tun::valid_ifname(i)) {
            return Err(self.invalid(
                "dataplane.interfaces",
                format!("{bad:?} is not a valid interface name"),
            ));
        }
        if fast_path == FastPath::Xdp && interfaces.is_empty() {
            return Err(self.invalid(
                "dataplane.interfaces",
                "fast_path = \"xdp\" needs the interfaces to attach to, like [\"eth0\", \"eth1\"] (inside and outside)",
            ));
        }
        if slow_path == SlowPath::AfXdp && interfaces.is_empty() {
            return Err(self.invalid(
                "dataplane.interfaces",
                "slow_path = \"af_xdp\" needs the interfaces to receive on and send from, like [\"eth0\", \"eth1\"] (inside and outside)",
            ));
        }
        if interfaces.len() as u64 > 64 {
            return Err(self.invalid(
                "dataplane.interfaces",
                format!("{} interfaces; expected at most 64", interfaces.len()),
            ));
        }
        if fast_path == FastPath::Xdp && !offloadable {
            return Err(self.invalid(
                "dataplane.fast_path",
                "the XDP fast path carries NAT44 and NAT64 sessions, SIIT's address pairs, 6to4 and ISATAP routers (not ISATAP hosts); add a [nat44], [nat64], [siit] or [tunnel.6to4] section, make [tunnel.isatap] a role = \"router\", or set fast_path = \"none\"",
            ));
        }
        let table_size = raw.table_size.unwrap_or(dd.table_size);
        if table_size < 2 {
            return Err(self.invalid(
                "dataplane.table_size",
                format!("{table_size} is too small; expected at least 2 (two recipes per session)"),
            ));
        }
        let slow_path_pps = raw.slow_path_pps.unwrap_or(dd.slow_path_pps);
        if slow_path_pps > xlat_xdp::MAX_SLOW_PATH_PPS {
            return Err(self.invalid(
                "dataplane.slow_path_pps",
                format!(
                    "{slow_path_pps} is too large; expected at most {} (0 = no limit)",
                    xlat_xdp::MAX_SLOW_PATH_PPS
                ),
            ));
        }
        let max_after = xlat_engine::MAX_OFFLOAD_AFTER;
        let offload_udp_after = match raw.offload_udp_after {
            None => dd.offload_udp_after,
            Some(n) if (1..=i64::from(max_after)).contains(&n) => n as u8,
            Some(n) => {
                return Err(self.invalid(
                    "dataplane.offload_udp_after",
                    format!("{n} is out of range; expected 1 to {max_after} (packets a UDP session carries through the engine before the fast path takes it; 1 = at its first packet, {} is the default)", dd.offload_udp_after),
                ))
            }
        };
        let workers = match raw.workers {
            None => dd.workers,
            Some(w) if (1..=MAX_WORKERS as i64).contains(&w) => w as usize,
            Some(w) => {
                return Err(self.invalid(
                    "dataplane.workers",
                    format!("{w} is out of range; expected 1 to {MAX_WORKERS} (one per core that should carry packets; 1 is the default)"),
                ))
            }
        };
        let dataplane = DataplaneConfig {
            fast_path,
            slow_path,
            interfaces,
            table_size,
            slow_path_pps,
            offload_udp_after,
            workers,
        };

        Ok(dataplane)
    }

    /// `[metrics]`.
    fn metrics(&self, raw: Option<RawMetrics>) -> Result<Option<MetricsConfig>, ConfigFileError> {
        // [metrics]
        let metrics = match raw {
            None => None,
            Some(m) => {
                let Some(listen) = m.listen else {
                    return Err(self.invalid(
                        "metrics.listen",
                        format!("missing; [metrics] needs the address and port to serve on, like listen = {EXAMPLE_METRICS_LISTEN:?} (or remove [metrics])"),
                    ));
                };
                let addr: std::net::SocketAddr = listen.parse().map_err(|_| {
                    self.invalid(
                        "metrics.listen",
                        format!("{listen:?} is not an address and port; expected like {EXAMPLE_METRICS_LISTEN:?} or \"[::1]:9641\""),
                    )
                })?;
                if addr.port() == 0 {
                    return Err(self.invalid(
                        "metrics.listen",
                        format!("{listen:?} has port 0; expected a fixed port for Prometheus to scrape, like {EXAMPLE_METRICS_LISTEN:?}"),
                    ));
                }
                Some(MetricsConfig { listen: addr })
            }
        };

        Ok(metrics)
    }

    fn choice<T: Copy>(
        &self,
        key: &str,
        value: Option<&str>,
        default: T,
        options: &[(&str, T)],
    ) -> Result<T, ConfigFileError> {
        let Some(v) = value else {
            return Ok(default);
        };
        if let Some((_, t)) = options.iter().find(|(name, _)| *name == v) {
            return Ok(*t);
        }
        let expected: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
        Err(self.invalid(
            key,
            format!(
                "unknown value {v:?}; expected one of {}",
                expected.join(", ")
            ),
        ))
    }

    fn prefixes(
        &self,
        key: &str,
        list: Option<Vec<String>>,
    ) -> Result<Vec<Prefix4>, ConfigFileError> {
        let mut out = Vec::new();
        for (i, s) in list.unwrap_or_default().iter().enumerate() {
            let p: Prefix4 = s.trim().parse().map_err(|e: String| {
                let problem = if e.contains("did you mean") {
                    e
                } else {
                    format!("{e}; expected an IPv4 prefix like \"198.18.0.0/24\" or an address like \"198.19.0.100\"")
                };
                self.invalid(format!("{key}[{i}]"), problem)
            })?;
            out.push(p);
        }
        Ok(out)
    }

    fn address(&self, key: String, s: &str) -> Result<Ipv4Addr, ConfigFileError> {
        s.trim().parse().map_err(|_| {
            self.invalid(
                key,
                format!("{s:?} is not an IPv4 address; expected one like \"198.18.0.10\""),
            )
        })
    }

    /// `TABLE.port_block_size`: ports per block (RFC 7422 2 port-block allocation), 0 when
    /// absent. A block must fit the TCP/UDP range `ports`, and the translator must give each
    /// host its ports (`napt`: NAPT mode, NAT64 always).
    fn port_block_size(
        &self,
        table: &str,
        value: Option<i64>,
        ports: (u16, u16),
        napt: bool,
    ) -> Result<u16, ConfigFileError> {
        let Some(v) = value else {
            return Ok(0);
        };
        let key = format!("{table}.port_block_size");
        let span = i64::from(ports.1 - ports.0) + 1;
        if !(8..=span).contains(&v) {
            return Err(self.invalid(
                key,
                format!("{v} ports per block is out of range; expected 8 to {span} (the {span} ports of {table}.ports {}-{}), like 512", ports.0, ports.1),
            ));
        }
        if !napt {
            return Err(self.invalid(
                key,
                "port blocks are for NAPT (each host shares its address by port); set nat44.mode = \"napt\" or remove port_block_size".to_string(),
            ));
        }
        Ok(u16::try_from(v).unwrap_or(u16::MAX))
    }

    /// `TABLE.port_blocks_per_host`: the most port blocks a host holds at once (per
    /// protocol); 0 (no limit) when absent. Only with `port_block_size` (`size` > 0), and at
    /// most the blocks the range holds.
    fn port_blocks_per_host(
        &self,
        table: &str,
        value: Option<i64>,
        size: u16,
        ports: (u16, u16),
    ) -> Result<u16, ConfigFileError> {
        let Some(v) = value else {
            return Ok(0);
        };
        let key = format!("{table}.port_blocks_per_host");
        if size == 0 {
            return Err(self.invalid(
                key,
                "limits port blocks, but port blocks are off: set port_block_size too, or remove it".to_string(),
            ));
        }
        let blocks = (u32::from(ports.1 - ports.0) + 1).div_ceil(u32::from(size));
        match u16::try_from(v) {
            Ok(n) if n >= 1 && u32::from(n) <= blocks => Ok(n),
            _ => Err(self.invalid(
                key,
                format!("{v} blocks is out of range; expected 1 to {blocks} (the blocks of {size} ports in {table}.ports {}-{}), like 4", ports.0, ports.1),
            )),
        }
    }

    /// `TABLE.port_block_hold`: seconds a freed block waits before another host takes it;
    /// 0 when absent. Only with `port_block_size` (`size` > 0).
    fn port_block_hold(
        &self,
        table: &str,
        value: Option<i64>,
        size: u16,
    ) -> Result<u32, ConfigFileError> {
        let Some(v) = value else {
            return Ok(0);
        };
        let key = format!("{table}.port_block_hold");
        if size == 0 {
            return Err(self.invalid(
                key,
                "holds freed port blocks, but port blocks are off: set port_block_size too, or remove it".to_string(),
            ));
        }
        match u32::try_from(v) {
            Ok(s) if s <= 86_400 => Ok(s),
            _ => Err(self.invalid(
                key,
                format!("{v} seconds is out of range; expected 0 to 86400 (a day), like 120"),
            )),
        }
    }

    fn ports(&self, key: &str, value: Option<&str>) -> Result<(u16, u16), ConfigFileError> {
        let Some(v) = value else {
            return Ok(Nat44Config::default().ports);
        };
        let bad = || {
            self.invalid(
                key,
                format!("{v:?} is not a port range; expected \"LOW-HIGH\" with 1 <= LOW <= HIGH <= 65535, like \"1024-65535\""),
            )
        };
        let (lo, hi) = match v.split_once('-') {
            Some((lo, hi)) => (lo.trim(), hi.trim()),
            None => (v.trim(), v.trim()),
        };
        let lo: u16 = lo.parse().map_err(|_| bad())?;
        let hi: u16 = hi.parse().map_err(|_| bad())?;
        if lo == 0 || lo > hi {
            return Err(bad());
        }
        Ok((lo, hi))
    }
}

impl Ctx<'_> {
    fn pref64(&self, key: &str, value: Option<&str>) -> Result<Pref64, ConfigFileError> {
        let Some(v) = value else {
            return Err(self.invalid(
                key,
                "missing; expected an RFC 6052 pref64 like \"2001:2:0:64::/96\" (or the well-known \"64:ff9b::/96\", which carries global IPv4 addresses only)",
            ));
        };
        v.trim().parse().map_err(|e: String| {
            let problem = if e.contains("did you mean") || e.contains("RFC 6052") {
                e
            } else {
                format!("{e}; expected an RFC 6052 pref64 like \"2001:2:0:64::/96\"")
            };
            self.invalid(key, problem)
        })
    }

    fn prefix6(&self, key: String, s: &str) -> Result<Prefix6, ConfigFileError> {
        s.trim().parse().map_err(|e: String| {
            let problem = if e.contains("did you mean") {
                e
            } else {
                format!("{e}; expected an IPv6 prefix like \"2001:2:0:6::/124\"")
            };
            self.invalid(key, problem)
        })
    }

    fn prefix4(&self, key: String, s: &str) -> Result<Prefix4, ConfigFileError> {
        s.trim().parse().map_err(|e: String| {
            let problem = if e.contains("did you mean") {
                e
            } else {
                format!("{e}; expected an IPv4 prefix like \"198.19.0.0/28\" or an address")
            };
            self.invalid(key, problem)
        })
    }

    /// `lowest_ipv6_mtu` and `udp_zero_checksum` of `section`, with the MTU of the tun.
    fn params(
        &self,
        section: &str,
        mtu: u32,
        lowest: Option<u32>,
        udp_zero: Option<&str>,
    ) -> Result<XlatParams, ConfigFileError> {
        let d = XlatParams::default();
        Ok(XlatParams {
            mtu,
            lowest_ipv6_mtu: lowest.unwrap_or(d.lowest_ipv6_mtu),
            udp_zero_checksum: self.choice(
                &format!("{section}.udp_zero_checksum"),
                udp_zero,
                d.udp_zero_checksum,
                &[
                    ("compute", UdpZeroChecksum::Compute),
                    ("drop", UdpZeroChecksum::Drop),
                ],
            )?,
            ..d
        })
    }

    /// `unreachable_errors`, `error_source4` and `error_source6` of `section` into `p`.
    fn error_params(
        &self,
        section: &str,
        p: &mut XlatParams,
        unreachable: Option<bool>,
        src4: Option<&str>,
        src6: Option<&str>,
    ) -> Result<(), ConfigFileError> {
        p.unreachable_errors = unreachable.unwrap_or(p.unreachable_errors);
        if let Some(a) = src4 {
            let a: std::net::Ipv4Addr = a.trim().parse().map_err(|_| {
                self.invalid(
                    format!("{section}.error_source4"),
                    format!(
                        "{a:?} is not an IPv4 address; expected one address like \"192.0.2.1\""
                    ),
                )
            })?;
            p.error_source4 = Some(u32::from(a));
        }
        if let Some(a) = src6 {
            let a: std::net::Ipv6Addr = a.trim().parse().map_err(|_| {
                self.invalid(
                    format!("{section}.error_source6"),
                    format!(
                        "{a:?} is not an IPv6 address; expected one address like \"2001:db8::1\""
                    ),
                )
            })?;
            p.error_source6 = Some(u128::from(a));
        }
        Ok(())
    }

    /// `alg = ["ftp"]`: the application-level gateways to run; `true` for the FTP ALG.
    fn alg(&self, section: &str, list: Option<&[String]>) -> Result<bool, ConfigFileError> {
        let mut ftp = false;
        for (i, name) in list.unwrap_or_default().iter().enumerate() {
            match name.as_str() {
                "ftp" => ftp = true,
                other => {
                    return Err(self.invalid(
                        format!("{section}.alg[{i}]"),
                        format!(
                            "unknown ALG {other:?}; the one xlat has is \"ftp\" (alg = [\"ftp\"]), or leave alg out for none"
                        ),
                    ))
                }
            }
        }
        Ok(ftp)
    }

    fn filtering(&self, key: &str, value: Option<&str>) -> Result<Filtering, ConfigFileError> {
        self.choice(
            key,
            value,
            Nat44Config::default().filtering,
            &[
                ("endpoint-independent", Filtering::EndpointIndependent),
                ("address-dependent", Filtering::AddressDependent),
                (
                    "address-and-port-dependent",
                    Filtering::AddressAndPortDependent,
                ),
            ],
        )
    }

    fn nat64(
        &self,
        n: RawNat64,
        tun: &TunConfig,
        timeouts: Timeouts,
        limits: Limits,
    ) -> Result<Nat64Config, ConfigFileError> {
        let d = Nat64Config::default();
        let ports = self.ports("nat64.ports", n.ports.as_deref())?;
        let mut limits = limits;
        limits.port_block_size = self.port_block_size("nat64", n.port_block_size, ports, true)?;
        limits.port_block_hold =
            self.port_block_hold("nat64", n.port_block_hold, limits.port_block_size)?;
        limits.port_blocks_per_host = self.port_blocks_per_host(
            "nat64",
            n.port_blocks_per_host,
            limits.port_block_size,
            ports,
        )?;
        let mut params = self.params(
            "nat64",
            tun.mtu,
            n.lowest_ipv6_mtu,
            n.udp_zero_checksum.as_deref(),
        )?;
        self.error_params(
            "nat64",
            &mut params,
            n.unreachable_errors,
            n.error_source4.as_deref(),
            n.error_source6.as_deref(),
        )?;
        let cfg = Nat64Config {
            prefix: self
                .pref64("nat64.prefix", n.prefix.as_deref())?
                .allowing_non_global(n.allow_non_global_wkp.unwrap_or(false)),
            pool4: self.prefixes("nat64.pool4", n.pool4)?,
            ports,
            static_bib: n
                .static_bib
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(i, b)| self.forward6(i, b))
                .collect::<Result<_, _>>()?,
            filtering: self.filtering("nat64.filtering", n.filtering.as_deref())?,
            timeouts,
            limits,
            inbound_refresh: n.inbound_refresh.unwrap_or(d.inbound_refresh),
            verify_ip_checksum: n.verify_ip_checksum.unwrap_or(d.verify_ip_checksum),
            alg_ftp: self.alg("nat64", n.alg.as_deref())?,
            params,
            deterministic: n.deterministic.unwrap_or(false),
            inside: n
                .inside
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(i, p)| self.prefix6(format!("nat64.inside[{i}]"), p))
                .collect::<Result<_, _>>()?,
            subscriber_prefix_len: match n.subscriber_prefix_len {
                None => d.subscriber_prefix_len,
                Some(v @ 1..=128) => u8::try_from(v).unwrap_or(128),
                Some(v) => {
                    return Err(self.invalid(
                        "nat64.subscriber_prefix_len",
                        format!("{v} is not a prefix length; expected 1 to 128, like 128 (each address a subscriber) or 64 (each /64 one subscriber)"),
                    ))
                }
            },
            ports_per_host: self.ports_per_host("nat64.ports_per_host", n.ports_per_host)?,
        };
        cfg.validate().map_err(|e| self.invalid(e.key, e.problem))?;
        Ok(cfg)
    }

    fn siit(&self, s: RawSiit, tun: &TunConfig) -> Result<SiitConfig, ConfigFileError> {
        let prefix = match s.prefix.as_deref() {
            Some(p) => Some(
                self.pref64("siit.prefix", Some(p))?
                    .allowing_non_global(s.allow_non_global_wkp.unwrap_or(false)),
            ),
            None => None,
        };
        let mut eam = Vec::new();
        for (i, e) in s.eam.unwrap_or_default().iter().enumerate() {
            eam.push(Eam {
                ipv4: self.prefix4(format!("siit.eam[{i}].ipv4"), &e.ipv4)?,
                ipv6: self.prefix6(format!("siit.eam[{i}].ipv6"), &e.ipv6)?,
            });
        }
        let rfc6791 = match s.rfc6791.as_deref() {
            Some(r) => Some(self.prefix4("siit.rfc6791".into(), r)?),
            None => None,
        };
        let rfc6791v6 = match s.rfc6791v6.as_deref() {
            Some(r) => Some(self.prefix6("siit.rfc6791v6".into(), r)?),
            None => None,
        };
        let mut params = self.params(
            "siit",
            tun.mtu,
            s.lowest_ipv6_mtu,
            s.udp_zero_checksum.as_deref(),
        )?;
        self.error_params(
            "siit",
            &mut params,
            s.unreachable_errors,
            s.error_source4.as_deref(),
            s.error_source6.as_deref(),
        )?;
        let cfg = SiitConfig {
            prefix,
            pool4: self.prefixes("siit.pool4", s.pool4)?,
            eam,
            rfc6791,
            rfc6791v6,
            eam_hairpin: self.choice(
                "siit.eam_hairpin",
                s.eam_hairpin.as_deref(),
                EamHairpin::default(),
                &[
                    ("off", EamHairpin::Off),
                    ("simple", EamHairpin::Simple),
                    ("intrinsic", EamHairpin::Intrinsic),
                ],
            )?,
            params,
        };
        cfg.validate().map_err(|e| self.invalid(e.key, e.problem))?;
        Ok(cfg)
    }
}

impl Config {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            file: file.clone(),
            error: source,
        })?;
        Config::parse(&file, &text)
    }

    /// Parses and checks `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigFileError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigFileError::Syntax {
            file: file.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let cx = Ctx { file };

        // Every section is checked, and every section's problem reported at once (the first
        // of each); what depends on a broken section takes its defaults meanwhile. The checks
        // across sections run when every section is sound.
        let mut errors = Vec::new();
        let tun_mtu_set = raw.tun.mtu.is_some();
        let tun = keep(&mut errors, cx.tun(raw.tun)).unwrap_or_default();

        // [timeouts] and [limits]
        let t = raw.timeouts;
        let dt = Timeouts::default();
        let timeouts = Timeouts {
            udp: t.udp.unwrap_or(dt.udp),
            tcp_established: t.tcp_established.unwrap_or(dt.tcp_established),
            tcp_transitory: t.tcp_transitory.unwrap_or(dt.tcp_transitory),
            icmp: t.icmp.unwrap_or(dt.icmp),
            fragment: t.fragment.unwrap_or(dt.fragment),
        };
        let l = raw.limits;
        let prefault = l.prefault.unwrap_or(false);
        let dl = Limits::default();
        let limits = Limits {
            max_sessions: l.max_sessions.unwrap_or(dl.max_sessions),
            max_sessions_per_host: l.max_sessions_per_host.unwrap_or(dl.max_sessions_per_host),
            max_fragment_flows: l.max_fragment_flows.unwrap_or(dl.max_fragment_flows),
            max_fragments_held: l.max_fragments_held.unwrap_or(dl.max_fragments_held),
            // Per translator: [nat44] / [nat64] port_block_size, port_block_hold and
            // port_blocks_per_host.
            port_block_size: 0,
            port_block_hold: 0,
            port_blocks_per_host: 0,
        };

        // [nat44]
        let offloadable = raw.nat44.is_some()
            || raw.nat64.is_some()
            || raw.siit.is_some()
            || raw
                .tunnel
                .as_ref()
                .is_some_and(tunnel::RawTunnel::xdp_carries);
        let nat44 = raw
            .nat44
            .and_then(|n| keep(&mut errors, cx.nat44(n, timeouts, limits)));

        // [nat64] and [siit]
        let nat64 = raw
            .nat64
            .and_then(|n| keep(&mut errors, cx.nat64(n, &tun, timeouts, limits)));
        let siit = raw.siit.and_then(|s| keep(&mut errors, cx.siit(s, &tun)));

        // [tunnel.6to4] and [tunnel.isatap]; the TUN device carries the tunnel MTU plus the
        // outer IPv4 header (RFC 4213 3.2).
        let tunnel = raw.tunnel.and_then(|t| keep(&mut errors, cx.tunnel(t)));
        let mut tun = tun;
        if let Some(t) = &tunnel {
            let need = max_tunnel_mtu(t) + 20;
            if !tun_mtu_set {
                tun.mtu = tun.mtu.max(need);
            } else if tun.mtu < need {
                errors.push(cx.invalid(
                    "tun.mtu",
                    format!("{} is below the tunnel MTU plus the 20-byte outer IPv4 header; expected at least {need} (or leave it out)", tun.mtu),
                ));
            }
        }

        let socket = keep(&mut errors, cx.socket(raw.control)).unwrap_or_default();

        let dataplane =
            keep(&mut errors, cx.dataplane(raw.dataplane, offloadable)).unwrap_or_default();

        let metrics = keep(&mut errors, cx.metrics(raw.metrics)).flatten();
        let dns64 = raw.dns64.and_then(|d| keep(&mut errors, d.check(&cx)));
        let logging = raw
            .logging
            .and_then(|l| keep(&mut errors, l.check(&cx, limits.max_sessions_per_host)))
            .flatten();
        let sync = raw.sync.and_then(|s| keep(&mut errors, s.check(&cx)));
        if !errors.is_empty() {
            return Err(ConfigFileError::all(file, errors));
        }

        // With deterministic NAT, a full range is a quota of this many ports (IPFIX:
        // [nat44]'s, else [nat64]'s); with a port-block limit, the ports of that many blocks
        // ([nat44]'s, else [nat64]'s).
        let block_quota = |l: &xlat_engine::Limits| {
            u32::from(l.port_blocks_per_host) * u32::from(l.port_block_size)
        };
        let det_ports = nat44
            .as_ref()
            .and_then(|n| n.deterministic_map())
            .or_else(|| nat64.as_ref().and_then(|n| n.deterministic_map()))
            .map(|d| u32::from(d.ports_per_host()))
            .or_else(|| {
                nat44
                    .as_ref()
                    .map(|n| block_quota(&n.limits))
                    .filter(|&q| q > 0)
            })
            .or_else(|| {
                nat64
                    .as_ref()
                    .map(|n| block_quota(&n.limits))
                    .filter(|&q| q > 0)
            })
            .unwrap_or(0);
        let cfg = Config {
            sha256: sha256_hex(text.as_bytes()),
            file: file.to_string(),
            tun,
            nat44,
            nat64,
            siit,
            socket: PathBuf::from(socket),
            seed: raw.engine.seed,
            dns64,
            tunnel,
            dataplane,
            prefault,
            logging: logging.map(|mut l| {
                l.ports_per_host = det_ports;
                l
            }),
            metrics,
            sync,
        };
        // At least one translator, and no two claiming the same addresses.
        cfg.engine_config(0)
            .validate()
            .map_err(|e| cx.invalid(e.key, e.problem))?;
        cfg.check_workers(&cx)?;
        Ok(cfg)
    }

    /// `[dataplane] workers`: what can run on several workers does, the rest is refused
    /// here with the fix (xlat_engine::shard says why each translator can or cannot).
    fn check_workers(&self, cx: &Ctx<'_>) -> Result<(), ConfigFileError> {
        let w = self.dataplane.workers;
        if w == 1 {
            return Ok(());
        }
        let key = "dataplane.workers";
        if self
            .nat44
            .as_ref()
            .is_some_and(|n| n.mode == Nat44Mode::Pool)
        {
            return Err(cx.invalid(key, format!("{w} workers cannot share nat44.mode = \"pool\": Basic NAT binds whole outside addresses to inside hosts, which cannot be split by port; set workers = 1 or nat44.mode = \"napt\"")));
        }
        if self.tunnel.as_ref().is_some_and(|t| t.isatap.is_some()) {
            return Err(cx.invalid(key, format!("{w} workers cannot share [tunnel.isatap]: its router and host state and timers live in one engine; set workers = 1")));
        }
        for (section, ports) in [
            ("nat44.ports", self.nat44.as_ref().map(|n| n.ports)),
            ("nat64.ports", self.nat64.as_ref().map(|n| n.ports)),
        ] {
            if let Some((lo, hi)) = ports {
                let span = u64::from(hi.saturating_sub(lo)) + 1;
                if span < w as u64 {
                    return Err(cx.invalid(key, format!("{w} workers need at least {w} ports in {section}, which has {span} ({lo}-{hi}): each worker takes its own slice; set fewer workers or a wider {section}")));
                }
            }
        }
        // Port blocks come from a worker's slice: one must fit.
        for (table, ports, block) in [
            (
                "nat44",
                self.nat44.as_ref().map(|n| n.ports),
                self.nat44.as_ref().map(|n| n.limits.port_block_size),
            ),
            (
                "nat64",
                self.nat64.as_ref().map(|n| n.ports),
                self.nat64.as_ref().map(|n| n.limits.port_block_size),
            ),
        ] {
            if let (Some((lo, hi)), Some(b)) = (ports, block) {
                let slice = (u64::from(hi.saturating_sub(lo)) + 1) / w as u64;
                if u64::from(b) > slice {
                    return Err(cx.invalid(key, format!("{w} workers each take {slice} of the ports of {table}.ports ({lo}-{hi}), fewer than {table}.port_block_size = {b}: set fewer workers or smaller blocks")));
                }
            }
        }
        // Anything else the engine's shard layout refuses.
        xlat_engine::shard::Shards::new(&self.engine_config(0), w)
            .map(|_| ())
            .map_err(|e| cx.invalid(key, format!("{}: {}", e.key, e.problem)))
    }

    /// Settings that work but go below an RFC's recommendation, one line each.
    pub fn rfc_warnings(&self) -> Vec<String> {
        // Timeouts are shared: NAT44's checks cover NAT64's too.
        let timeouts = self
            .nat44
            .as_ref()
            .map(|n| n.timeouts)
            .or(self.nat64.as_ref().map(|n| n.timeouts));
        match timeouts {
            Some(timeouts) => Nat44Config {
                timeouts,
                ..Nat44Config::default()
            }
            .warnings(),
            None => Vec::new(),
        }
    }

    /// What deterministic NAT44 and NAT64 (RFC 7422) make of this file, one line each, for
    /// `xlat check` and the daemon's log at start and reload (RFC 7422 3: the mapping's
    /// configuration must be kept as long as answers from it may be asked for). Empty when
    /// it is off.
    pub fn deterministic_summary(&self) -> Vec<String> {
        let keep = "keep this file as long as you keep logs: `xlat lookup -c FILE --outside ADDR:PORT` answers from it";
        let mut lines = Vec::new();
        if let Some((n, d)) = self
            .nat44
            .as_ref()
            .and_then(|n| Some((n, n.deterministic_map()?)))
        {
            let p = d.plan();
            lines.push(format!(
                "deterministic NAT44 (RFC 7422): {} inside addresses on {} pool addresses, {} per address, {} ports each from nat44.ports {}-{} ({} unused); {keep}",
                p.subscribers, p.pool_addresses, p.per_address, p.ports_per_host, n.ports.0, n.ports.1, p.ports_unused
            ));
        }
        if let Some((n, d)) = self
            .nat64
            .as_ref()
            .and_then(|n| Some((n, n.deterministic_map()?)))
        {
            let p = d.plan();
            lines.push(format!(
                "deterministic NAT64 (RFC 7422's arithmetic): {} subscribers of /{} on {} pool4 addresses, {} per address, {} ports each from nat64.ports {}-{} ({} unused); {keep}",
                p.subscribers, n.subscriber_prefix_len, p.pool_addresses, p.per_address, p.ports_per_host, n.ports.0, n.ports.1, p.ports_unused
            ));
        }
        lines
    }

    /// [`Config::rfc_warnings`] and other advice, one line each.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.rfc_warnings();
        if !self.tun.auto_routes {
            w.push("tun.auto_routes = false: route traffic into the tun device yourself (see docs/CONFIG.md)".to_string());
        }
        if let Some(m) = self
            .metrics
            .as_ref()
            .filter(|m| !m.listen.ip().is_loopback())
        {
            w.push(format!("metrics.listen = \"{}\" is not a loopback address: anyone who reaches it reads the counters and the live page (there is no authentication); firewall it or listen on 127.0.0.1", m.listen));
        }
        let prefixes = [
            ("nat64", self.nat64.as_ref().map(|n| n.prefix)),
            ("siit", self.siit.as_ref().and_then(|s| s.prefix)),
            ("dns64", self.dns64.as_ref().map(|d| d.prefix)),
        ];
        for (table, p) in prefixes {
            match p {
                Some(p) if p.allows_non_global() && p.is_well_known() => w.push(format!(
                    "{table}.allow_non_global_wkp = true: the Well-Known Prefix 64:ff9b::/96 will carry non-global IPv4 addresses (private, shared, benchmarking and other special-purpose space), which RFC 6052 3.1 forbids: hosts and resolvers outside this network may treat them as global; use a network-specific prefix (e.g. \"2001:db8:64::/96\") where you can"
                )),
                Some(p) if p.allows_non_global() => w.push(format!(
                    "{table}.allow_non_global_wkp = true has no effect: {table}.prefix {p} is not the Well-Known Prefix 64:ff9b::/96, and a network-specific prefix carries any IPv4 address already"
                )),
                _ => {}
            }
        }
        w
    }

    /// Advice on speed for `xlat check`, one line each (not warnings: the settings are
    /// right, only slower than they need be). Today: the TUN-only data path, which a user who
    /// writes no `[dataplane]` runs (issue 25: docs/PERFORMANCE.md measures both).
    pub fn advice(&self) -> Vec<String> {
        let d = &self.dataplane;
        let offloadable = self.nat44.is_some() || self.nat64.is_some() || self.siit.is_some();
        if d.fast_path == FastPath::None && d.slow_path == SlowPath::Tun && offloadable {
            let fast = "fast_path = \"xdp\", ";
            return vec![format!(
                "every packet crosses the TUN device (the default data path, the slowest); for speed on Linux 6.3 or later set [dataplane] {fast}slow_path = \"af_xdp\", interfaces = [\"INSIDE\", \"OUTSIDE\"] (docs/CONFIG.md, docs/PERFORMANCE.md)"
            )];
        }
        // A 6to4 endpoint or an ISATAP router alone: XDP carries it from its configuration
        // (issue 25).
        let six = self.tunnel.as_ref().is_some_and(|t| t.sixtofour.is_some());
        if d.fast_path == FastPath::None && six && !offloadable {
            return vec!["every 6to4 packet crosses the TUN device (the default data path, the slowest); for speed set [dataplane] fast_path = \"xdp\", interfaces = [\"INSIDE\", \"OUTSIDE\"]: XDP encapsulates and decapsulates 6to4 itself (docs/CONFIG.md, docs/PERFORMANCE.md)".into()];
        }
        let router = self
            .tunnel
            .as_ref()
            .is_some_and(|t| xlat_engine::tunnel::isatap::xdp_config(t, false).is_some());
        if d.fast_path == FastPath::None && router && !offloadable {
            return vec!["every ISATAP packet crosses the TUN device (the default data path, the slowest); for speed set [dataplane] fast_path = \"xdp\", interfaces = [\"INSIDE\", \"OUTSIDE\"]: XDP encapsulates and decapsulates for the ISATAP router itself (docs/CONFIG.md, docs/PERFORMANCE.md)".into()];
        }
        Vec::new()
    }

    /// The engine's configuration, seeded with `[engine].seed` or else `default_seed`.
    pub fn engine_config(&self, default_seed: u64) -> EngineConfig {
        EngineConfig {
            nat44: self.nat44.clone(),
            nat64: self.nat64.clone(),
            siit: self.siit.clone(),
            tunnel: self.tunnel.clone(),
            seed: self.seed.unwrap_or(default_seed),
        }
    }
}

// ---- [dns64] ---------------------------------------------------------------------------------

/// `[dns64]` as written (RFC 6147 DNS64 proxy; docs/CONFIG.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDns64 {
    listen: Vec<String>,
    upstream: Vec<String>,
    prefix: String,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    allow_non_global_wkp: bool,
}

impl RawDns64 {
    fn check(self, cx: &Ctx<'_>) -> Result<Dns64Config, ConfigFileError> {
        let sockets = |key: &str, list: &[String], example: &str| {
            if list.is_empty() {
                return Err(cx.invalid(
                    format!("dns64.{key}"),
                    format!("empty list; expected at least one socket address like {example:?}"),
                ));
            }
            list.iter()
                .enumerate()
                .map(|(i, s)| {
                    s.trim().parse::<std::net::SocketAddr>().map_err(|_| {
                        cx.invalid(
                            format!("dns64.{key}[{i}]"),
                            format!("{s:?} is not a socket address; expected ADDRESS:PORT like {example:?} (IPv6 in brackets)"),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let listen = sockets("listen", &self.listen, "[2001:2:0:1::1]:53")?;
        let upstream = sockets("upstream", &self.upstream, "198.19.0.2:53")?;
        // The parse errors that say what would be right already are kept as they are.
        let hint = |e: String, example: &str| {
            if e.contains("expected") || e.contains("did you mean") {
                e
            } else {
                format!("{e}; expected {example}")
            }
        };
        let prefix: xlat_dns64::Pref64 = self.prefix.trim().parse().map_err(|e: String| {
            cx.invalid(
                "dns64.prefix",
                hint(e, "an RFC 6052 pref64 like \"2001:2:0:64::/96\""),
            )
        })?;
        let prefix = prefix.allowing_non_global(self.allow_non_global_wkp);
        let mut exclude = Vec::new();
        for (i, s) in self.exclude.iter().enumerate() {
            exclude.push(s.trim().parse::<xlat_dns64::Prefix6>().map_err(|e| {
                cx.invalid(
                    format!("dns64.exclude[{i}]"),
                    hint(e, "an IPv6 prefix like \"2001:db8::/32\""),
                )
            })?);
        }
        Ok(Dns64Config::new(listen, upstream, prefix, exclude))
    }
}

/// `[dns64]` alone, for `xlat dns64`: the other tables are not read (and need not be valid).
pub fn load_dns64(path: &Path) -> Result<Dns64Config, ConfigFileError> {
    #[derive(Deserialize)]
    struct Only {
        dns64: Option<RawDns64>,
    }
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| ConfigFileError::Read {
        file: file.clone(),
        error,
    })?;
    let raw: Only = toml::from_str(&text).map_err(|e| ConfigFileError::Syntax {
        file: file.clone(),
        message: e.to_string().trim_end().to_string(),
    })?;
    let cx = Ctx { file: &file };
    match raw.dns64 {
        Some(d) => d.check(&cx),
        None => Err(cx.invalid(
            "dns64",
            "no [dns64] table; expected one with listen, upstream and prefix (docs/CONFIG.md)",
        )),
    }
}

#[cfg(test)]
mod dns64_tests {
    use super::*;

    const BASE: &str = "[nat44]\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\n";

    fn parse(dns64: &str) -> Result<Config, String> {
        Config::parse("xlat.toml", &format!("{BASE}[dns64]\n{dns64}")).map_err(|e| e.to_string())
    }

    #[test]
    fn dns64_section() {
        let c = parse(
            "listen = [\"[2001:2:0:1::1]:53\"]\nupstream = [\"198.19.0.2:53\"]\nprefix = \"2001:2:0:64::/96\"\nexclude = [\"2001:db8:dead::/48\"]\n",
        )
        .unwrap();
        let d = c.dns64.unwrap();
        assert_eq!(d.listen[0].to_string(), "[2001:2:0:1::1]:53");
        assert_eq!(d.upstream[0].to_string(), "198.19.0.2:53");
        assert_eq!(d.prefix.to_string(), "2001:2:0:64::/96");
        assert_eq!(d.exclude[0].to_string(), "2001:db8:dead::/48");
        assert!(Config::parse("xlat.toml", BASE).unwrap().dns64.is_none());
    }

    #[test]
    fn dns64_errors_name_the_key() {
        let ok_rest = "upstream = [\"198.19.0.2:53\"]\nprefix = \"2001:2:0:64::/96\"\n";
        let e = parse(&format!("listen = [\"2001:2:0:1::1:53\"]\n{ok_rest}")).unwrap_err();
        assert!(e.starts_with("xlat.toml: dns64.listen[0]: "), "{e}");
        let e = parse(&format!("listen = []\n{ok_rest}")).unwrap_err();
        assert!(e.starts_with("xlat.toml: dns64.listen: empty list"), "{e}");
        let l = "listen = [\"[::1]:53\"]\n";
        let e = parse(&format!(
            "{l}upstream = [\"198.19.0.2\"]\nprefix = \"2001:2:0:64::/96\"\n"
        ))
        .unwrap_err();
        assert!(e.starts_with("xlat.toml: dns64.upstream[0]: "), "{e}");
        let e = parse(&format!(
            "{l}upstream = [\"198.19.0.2:53\"]\nprefix = \"2001:2:0:64::/80\"\n"
        ))
        .unwrap_err();
        assert!(
            e.starts_with("xlat.toml: dns64.prefix: 2001:2:0:64::/80: prefix length /80 is not one of RFC 6052's"),
            "{e}"
        );
        let e = parse(&format!("{l}{ok_rest}exclude = [\"2001:db8::1/32\"]\n")).unwrap_err();
        assert!(e.starts_with("xlat.toml: dns64.exclude[0]: "), "{e}");
        assert!(e.contains("did you mean 2001:db8::/32"), "{e}");
        let e = parse(&format!("{l}{ok_rest}lisen = 1\n")).unwrap_err();
        assert!(e.contains("unknown field `lisen`"), "{e}");
        let e = parse(l).unwrap_err();
        assert!(e.contains("missing field `upstream`"), "{e}");
    }

    #[test]
    fn dns64_alone() {
        let dir = std::env::temp_dir().join(format!("xlat-dns64-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("only.toml");
        // No [nat44]: fine for `xlat dns64`.
        std::fs::write(&f, "[dns64]\nlisten = [\"[::1]:5353\"]\nupstream = [\"127.0.0.1:53\"]\nprefix = \"64:ff9b::/96\"\n").unwrap();
        let d = load_dns64(&f).unwrap();
        assert!(d.prefix.is_well_known());
        std::fs::write(&f, "[tun]\nname = \"x\"\n").unwrap();
        let e = load_dns64(&f).unwrap_err().to_string();
        assert!(e.ends_with("only.toml: dns64: no [dns64] table; expected one with listen, upstream and prefix (docs/CONFIG.md)"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match Config::parse("xlat.toml", text) {
            Ok(c) => panic!("expected an error, parsed {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn n44(c: &Config) -> &Nat44Config {
        match &c.nat44 {
            Some(n) => n,
            None => panic!("no [nat44] in {c:?}"),
        }
    }

    fn ok(text: &str) -> Config {
        match Config::parse("xlat.toml", text) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    const FULL: &str = r#"
[tun]
name = "xlat1"
mtu = 1400
auto_routes = false
route_table = 100
rule_pref = 200

[nat44]
inside = ["198.18.0.0/24", "198.18.1.0/24"]
pool = ["198.19.0.100/31"]
mode = "napt"
static = [{ inside = "198.18.0.10", outside = "198.19.0.10" }]
filtering = "endpoint-independent"
ports = "2000-3000"
inbound_refresh = false
verify_ip_checksum = false

[timeouts]
udp = 120
tcp_established = 7440
tcp_transitory = 240
icmp = 60
fragment = 5

[limits]
max_sessions = 1000
max_sessions_per_host = 10
max_fragment_flows = 16
max_fragments_held = 8
prefault = true

[control]
socket = "/tmp/x.sock"

[engine]
seed = 42
"#;

    #[test]
    fn full_file() {
        let c = ok(FULL);
        assert_eq!(c.tun.name, "xlat1");
        assert_eq!(c.tun.mtu, 1400);
        assert!(!c.tun.auto_routes);
        assert_eq!((c.tun.route_table, c.tun.rule_pref), (100, 200));
        assert_eq!(n44(&c).inside.len(), 2);
        assert_eq!(n44(&c).pool[0].to_string(), "198.19.0.100/31");
        assert_eq!(n44(&c).mode, Nat44Mode::Napt);
        assert_eq!(
            n44(&c).statics,
            vec![StaticEntry {
                inside: Ipv4Addr::new(198, 18, 0, 10),
                outside: Ipv4Addr::new(198, 19, 0, 10)
            }]
        );
        assert_eq!(n44(&c).filtering, Filtering::EndpointIndependent);
        assert_eq!(n44(&c).ports, (2000, 3000));
        assert!(!n44(&c).inbound_refresh);
        assert!(!n44(&c).verify_ip_checksum);
        assert_eq!(n44(&c).timeouts.udp, 120);
        assert_eq!(n44(&c).timeouts.fragment, 5);
        assert_eq!(n44(&c).limits.max_sessions, 1000);
        assert_eq!(n44(&c).limits.max_fragments_held, 8);
        assert!(c.prefault);
        assert_eq!(c.socket, PathBuf::from("/tmp/x.sock"));
        assert_eq!(c.seed, Some(42));
        assert_eq!(c.engine_config(7).seed, 42);
        assert_eq!(c.warnings().len(), 1, "{:?}", c.warnings());
    }

    #[test]
    fn metrics_section() {
        let base = "[nat44]\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\n";
        assert_eq!(ok(base).metrics, None);
        let c = ok(&format!("{base}[metrics]\nlisten = \"127.0.0.1:9641\"\n"));
        assert_eq!(
            c.metrics.map(|m| m.listen.to_string()),
            Some("127.0.0.1:9641".to_string())
        );
        assert!(!ok(&format!("{base}[metrics]\nlisten = \"[::1]:9641\"\n"))
            .warnings()
            .iter()
            .any(|w| w.contains("metrics")));
        let open = ok(&format!("{base}[metrics]\nlisten = \"0.0.0.0:9641\"\n"));
        assert!(
            open.warnings()
                .iter()
                .any(|w| w
                    .starts_with("metrics.listen = \"0.0.0.0:9641\" is not a loopback address")),
            "{:?}",
            open.warnings()
        );
        let e = err(&format!("{base}[metrics]\nlisten = \"localhost:9641\"\n"));
        assert_eq!(
            e,
            "xlat.toml: metrics.listen: \"localhost:9641\" is not an address and port; expected like \"127.0.0.1:9641\" or \"[::1]:9641\""
        );
        let e = err(&format!("{base}[metrics]\nlisten = \"127.0.0.1:0\"\n"));
        assert!(
            e.starts_with("xlat.toml: metrics.listen: \"127.0.0.1:0\" has port 0"),
            "{e}"
        );
        let e = err(&format!("{base}[metrics]\n"));
        assert!(e.starts_with("xlat.toml: metrics.listen: missing;"), "{e}");
        let e = err(&format!(
            "{base}[metrics]\nlisten = \"127.0.0.1:9641\"\nport = 1\n"
        ));
        assert!(e.contains("unknown field `port`"), "{e}");
    }

    #[test]
    fn minimal_file_takes_defaults() {
        let c = ok("[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n");
        assert_eq!(c.tun, TunConfig::default());
        assert_eq!(c.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(c.seed, None);
        assert_eq!(c.engine_config(7).seed, 7);
        assert_eq!(n44(&c).pool[0].to_string(), "198.19.0.100/32");
        let d = Nat44Config::default();
        assert_eq!(n44(&c).mode, d.mode);
        assert_eq!(n44(&c).ports, d.ports);
        assert_eq!(n44(&c).timeouts, Timeouts::default());
        assert_eq!(n44(&c).limits, Limits::default());
        assert!(c.warnings().is_empty());
    }

    #[test]
    fn static_mode_needs_no_pool() {
        let c = ok(r#"
[nat44]
mode = "static"
static = [{ inside = "198.18.0.10", outside = "198.19.0.10" }]
"#);
        assert_eq!(n44(&c).mode, Nat44Mode::Static);
    }

    #[test]
    fn unknown_mode_names_file_key_and_choices() {
        let e = err("[nat44]\nmode = \"nap\"\n");
        assert_eq!(
            e,
            r#"xlat.toml: nat44.mode: unknown value "nap"; expected one of "static", "pool", "napt""#
        );
    }

    #[test]
    fn alg_ftp_is_off_unless_listed() {
        let base = "[nat44]\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\n";
        let c = ok(base);
        assert!(!n44(&c).alg_ftp);
        let c = ok(&format!("{base}alg = [\"ftp\"]\n"));
        assert!(n44(&c).alg_ftp);
        let e = err(&format!("{base}alg = [\"ftp\", \"sip\"]\n"));
        assert!(
            e.starts_with(
                "xlat.toml: nat44.alg[1]: unknown ALG \"sip\"; the one xlat has is \"ftp\""
            ),
            "{e}"
        );
        let c = ok("[nat64]\npool4 = [\"198.19.0.101/32\"]\nprefix = \"2001:2:0:64::/96\"\nalg = [\"ftp\"]\n");
        assert!(c.nat64.as_ref().is_some_and(|n| n.alg_ftp));
    }

    #[test]
    fn unknown_filtering() {
        let e = err("[nat44]\nfiltering = \"full-cone\"\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\n");
        assert!(e.starts_with("xlat.toml: nat44.filtering: unknown value \"full-cone\"; expected one of \"endpoint-independent\""), "{e}");
    }

    #[test]
    fn bad_prefixes() {
        let e = err(
            "[nat44]\ninside = [\"198.18.0.0/24\", \"198.18.0.1/24\"]\npool=[\"198.19.0.1\"]\n",
        );
        assert!(e.starts_with("xlat.toml: nat44.inside[1]: "), "{e}");
        assert!(e.contains("did you mean 198.18.0.0/24"), "{e}");
        let e = err("[nat44]\ninside = [\"198.18.0.0/24\"]\npool=[\"banana\"]\n");
        assert!(e.starts_with("xlat.toml: nat44.pool[0]: "), "{e}");
        assert!(e.contains("expected an IPv4 prefix like"), "{e}");
        let e = err("[nat44]\ninside = [\"198.18.0.0/33\"]\npool=[\"198.19.0.1\"]\n");
        assert!(e.starts_with("xlat.toml: nat44.inside[0]: "), "{e}");
    }

    #[test]
    fn bad_static_address() {
        let e = err("[nat44]\nmode = \"static\"\nstatic = [{ inside = \"198.18.0.10\", outside = \"198.19.0.300\" }]\n");
        assert!(
            e.starts_with(
                "xlat.toml: nat44.static[0].outside: \"198.19.0.300\" is not an IPv4 address"
            ),
            "{e}"
        );
    }

    #[test]
    fn bad_ports() {
        let base = "[nat44]\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\n";
        for p in ["x", "0-100", "2000-1000", "1-70000", ""] {
            let e = err(&format!("{base}ports = \"{p}\"\n"));
            assert!(e.starts_with("xlat.toml: nat44.ports: "), "{e}");
            assert!(e.contains("expected \"LOW-HIGH\""), "{e}");
        }
        assert_eq!(
            n44(&ok(&format!("{base}ports = \"5000\"\n"))).ports,
            (5000, 5000)
        );
    }

    #[test]
    fn engine_checks_get_the_file_name() {
        let e = err("[nat44]\ninside = [\"198.18.0.0/24\"]\n");
        assert!(e.starts_with("xlat.toml: nat44.pool: "), "{e}");
        let e = err("[nat44]\npool = [\"198.19.0.1\"]\n");
        assert!(e.starts_with("xlat.toml: nat44.inside: "), "{e}");
        let e = err(
            "[nat44]\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\n[timeouts]\nudp = 0\n",
        );
        assert!(e.starts_with("xlat.toml: timeouts.udp: "), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected_with_position() {
        let e = err("[nat44]\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\nmod = \"napt\"\n");
        assert!(e.starts_with("xlat.toml: "), "{e}");
        assert!(e.contains("unknown field `mod`"), "{e}");
        assert!(e.contains("line 4"), "{e}");
        let e = err("[nat]\n");
        assert!(e.contains("unknown field `nat`"), "{e}");
        let e = err("[nat44]\nmode = \"static\"\nstatic = [{ inside = \"198.18.0.10\", outsid = \"198.19.0.10\" }]\n");
        assert!(e.contains("unknown field `outsid`"), "{e}");
    }

    #[test]
    fn wrong_types_and_syntax() {
        let e = err("[tun]\nmtu = \"big\"\n");
        assert!(e.starts_with("xlat.toml: "), "{e}");
        assert!(e.contains("mtu"), "{e}");
        let e = err("[timeouts]\nudp = -5\n");
        assert!(e.starts_with("xlat.toml: "), "{e}");
        let e = err("[tun\n");
        assert!(e.starts_with("xlat.toml: "), "{e}");
    }

    #[test]
    fn tun_and_control_checks() {
        let base = "[nat44]\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\n";
        let e = err(&format!("{base}[tun]\nname = \"much-too-long-name\"\n"));
        assert!(e.starts_with("xlat.toml: tun.name: "), "{e}");
        let e = err(&format!("{base}[tun]\nmtu = 20\n"));
        assert!(
            e.starts_with("xlat.toml: tun.mtu: 20 is out of range"),
            "{e}"
        );
        let e = err(&format!("{base}[tun]\nroute_table = 254\n"));
        assert!(e.starts_with("xlat.toml: tun.route_table: "), "{e}");
        let e = err(&format!("{base}[tun]\nrule_pref = 32766\n"));
        assert!(e.starts_with("xlat.toml: tun.rule_pref: "), "{e}");
        let e = err(&format!("{base}[control]\nsocket = \"\"\n"));
        assert!(e.starts_with("xlat.toml: control.socket: "), "{e}");
        let long = "x".repeat(120);
        let e = err(&format!("{base}[control]\nsocket = \"/{long}\"\n"));
        assert!(e.contains("at most 107"), "{e}");
    }

    #[test]
    fn rfc_warnings() {
        let c = ok(
            "[nat44]\ninside=[\"198.18.0.0/24\"]\npool=[\"198.19.0.1\"]\n[timeouts]\nudp = 30\n",
        );
        let w = c.warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("timeouts.udp"), "{w:?}");
    }

    /// `xlat check` points a TUN-only configuration at the fast data path, and says nothing
    /// once it is set.
    #[test]
    fn advice_points_at_the_fast_data_path() {
        let base = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100/32\"]\n";
        let a = ok(base).advice();
        assert_eq!(a.len(), 1, "{a:?}");
        assert!(
            a[0].contains("fast_path = \"xdp\", slow_path = \"af_xdp\""),
            "{a:?}"
        );
        let fast = format!("{base}[dataplane]\nfast_path = \"xdp\"\nslow_path = \"af_xdp\"\ninterfaces = [\"eth0\", \"eth1\"]\n");
        assert!(ok(&fast).advice().is_empty());
        // 6to4 alone: the XDP fast path, which carries it.
        let six = "[tunnel.6to4]\nipv4 = \"198.18.0.1\"\n";
        let a = ok(six).advice();
        assert!(
            a.len() == 1 && a[0].contains("fast_path = \"xdp\", interfaces"),
            "{a:?}"
        );
        let fast =
            format!("{six}[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"eth0\", \"eth1\"]\n");
        assert!(ok(&fast).advice().is_empty());
        // An ISATAP router alone too; a host gets no advice (XDP does not carry it).
        let router = "[tunnel.isatap]\nrole = \"router\"\nipv4 = \"198.18.0.1\"\nprefix = \"2001:2:0:5::/64\"\n";
        let a = ok(router).advice();
        assert!(
            a.len() == 1
                && a[0].contains("ISATAP")
                && a[0].contains("fast_path = \"xdp\", interfaces"),
            "{a:?}"
        );
        let fast = format!(
            "{router}[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"eth0\", \"eth1\"]\n"
        );
        assert!(ok(&fast).advice().is_empty());
        let host =
            "[tunnel.isatap]\nrole = \"host\"\nipv4 = \"198.18.0.2\"\nrouters = [\"198.18.0.1\"]\n";
        assert!(ok(host).advice().is_empty());
    }

    /// Static BIB entries: `[nat44] static` entries with a protocol (port ranges too) and
    /// `[nat64] static_bib`, with errors that name the entry and the fix.
    #[test]
    fn static_bib_entries() {
        let base = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100/32\"]\n";
        let c = ok(&format!("{base}static = [{{ inside = \"198.18.0.9\", outside = \"198.19.0.9\" }}, {{ proto = \"tcp\", inside = \"198.18.0.10:8080\", outside = \"198.19.0.100:80\" }}, {{ proto = \"udp\", inside = \"198.18.0.10:5000-5009\", outside = \"198.19.0.100:6000-6009\" }}]\n"));
        let n = c.nat44.as_ref().unwrap();
        assert_eq!(n.statics.len(), 1);
        assert_eq!(n.forwards.len(), 2);
        assert_eq!(
            (
                n.forwards[1].inside.port,
                n.forwards[1].outside.port,
                n.forwards[1].count
            ),
            (5000, 6000, 10)
        );
        let e = err(&format!("{base}static = [{{ proto = \"tcp\", inside = \"198.18.0.10:8080\", outside = \"198.19.0.7:80\" }}]\n"));
        assert!(e.starts_with("xlat.toml: nat44.static: entry 198.18.0.10:8080 -> 198.19.0.7:80: the outside address is not in the pool"), "{e}");
        let e = err(&format!("{base}static = [{{ proto = \"tcp\", inside = \"198.18.0.10:1-2\", outside = \"198.19.0.100:80\" }}]\n"));
        assert!(
            e.starts_with("xlat.toml: nat44.static[0]: the inside range has 2 ports"),
            "{e}"
        );
        let e = err(&format!("{base}static = [{{ proto = \"sctp\", inside = \"198.18.0.10:1\", outside = \"198.19.0.100:80\" }}]\n"));
        assert!(e.starts_with("xlat.toml: nat44.static[0].proto: "), "{e}");
        let e = err(&format!("{base}static = [{{ proto = \"tcp\", inside = \"198.18.0.10\", outside = \"198.19.0.100:80\" }}]\n"));
        assert!(
            e.contains("nat44.static[0].inside") && e.contains("ADDRESS:PORT"),
            "{e}"
        );
        let e = err(&format!("{base}static = [{{ proto = \"tcp\", inside = \"198.18.0.10:1\", outside = \"198.19.0.100:80\" }}, {{ proto = \"tcp\", inside = \"198.18.0.11:1-2\", outside = \"198.19.0.100:79-80\" }}]\n"));
        assert!(
            e.contains("two entries forward tcp 198.19.0.100:79")
                || e.contains("two entries forward tcp 198.19.0.100:80"),
            "{e}"
        );
        let c = ok(&format!("{NAT64}static_bib = [{{ proto = \"udp\", ipv6 = \"[2001:db8::5]:2000\", ipv4 = \"198.19.0.101:2000\" }}]\n"));
        let b = &c.nat64.as_ref().unwrap().static_bib[0];
        assert_eq!(
            (b.inside.addr, b.inside.port, b.outside.port),
            (0x2001_0db8_0000_0000_0000_0000_0000_0005, 2000, 2000)
        );
        let e = err(&format!("{NAT64}static_bib = [{{ proto = \"udp\", ipv6 = \"2001:db8::5\", ipv4 = \"198.19.0.101:2000\" }}]\n"));
        assert!(e.contains("nat64.static_bib[0].ipv6"), "{e}");
    }

    /// RFC 6052 3.1 relaxed on purpose (TAYGA's `wkpf-strict no`): accepted for [nat64],
    /// [siit] and [dns64], and `xlat check` warns -- that it breaks 3.1 with the Well-Known
    /// Prefix, that it does nothing with another.
    #[test]
    fn allow_non_global_wkp_is_accepted_with_a_warning() {
        let c = ok("[nat64]\nprefix = \"64:ff9b::/96\"\npool4 = [\"198.19.0.101/32\"]\nallow_non_global_wkp = true\n[siit]\nprefix = \"2001:2:0:64::/96\"\nallow_non_global_wkp = true\neam = [{ ipv4 = \"198.19.1.0/28\", ipv6 = \"2001:2:0:6::/124\" }]\n");
        let n = c.nat64.clone().unwrap();
        assert!(n.prefix.allows_non_global());
        assert_eq!(
            n.prefix.embed(0xc613_0002),
            Some(0x0064_ff9b_0000_0000_0000_0000_c613_0002)
        );
        let w = c.warnings();
        assert!(
            w.iter().any(|l| l
                .starts_with("nat64.allow_non_global_wkp = true: the Well-Known Prefix")
                && l.contains("RFC 6052 3.1")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|l| l.starts_with("siit.allow_non_global_wkp = true has no effect")),
            "{w:?}"
        );
        // Without it the Well-Known Prefix refuses private space, and nothing warns.
        let c = ok("[nat64]\nprefix = \"64:ff9b::/96\"\npool4 = [\"198.19.0.101/32\"]\n");
        assert_eq!(c.nat64.as_ref().unwrap().prefix.embed(0xc613_0002), None);
        assert!(c.warnings().is_empty());
        let e = err("[nat64]\nprefix = \"64:ff9b::/96\"\npool4 = [\"198.19.0.101/32\"]\nallow_non_global_wkp = \"yes\"\n");
        assert!(e.contains("allow_non_global_wkp"), "{e}");
    }

    #[test]
    fn every_sections_problem_is_reported_at_once() {
        let e = Config::parse(
            "x.toml",
            "[tun]\nmtu = 10\n[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"bad\"]\n\
             [nat64]\nprefix = \"64:ff9b::/95\"\npool4 = [\"198.19.0.1/32\"]\n\
             [dataplane]\nworkers = 0\n",
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("x.toml: 4 problems:"), "{text}");
        let keys: Vec<&str> = text
            .lines()
            .skip(1)
            .filter_map(|l| l.trim().split(':').next())
            .collect();
        assert_eq!(
            keys,
            [
                "tun.mtu",
                "nat44.pool[0]",
                "nat64.prefix",
                "dataplane.workers"
            ]
        );
        assert_eq!(e.key(), Some("tun.mtu"));
        // One problem alone reads as before: file, key, problem.
        let one = err("[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"bad\"]\n");
        assert!(one.starts_with("xlat.toml: nat44.pool[0]: "), "{one}");
    }

    #[test]
    fn unreachable_errors_error_sources_and_eam_hairpin_are_read_and_checked() {
        let c = ok("[siit]\nprefix = \"2001:2:0:64::/96\"\nunreachable_errors = false\nerror_source4 = \"192.0.2.1\"\nerror_source6 = \"2001:db8::1\"\neam_hairpin = \"simple\"\neam = [{ ipv4 = \"198.19.1.0/24\", ipv6 = \"2001:2:0:6::/64\" }]\n");
        let s = c.siit.as_ref().unwrap();
        assert!(!s.params.unreachable_errors);
        assert_eq!(s.params.error_source4, Some(0xc000_0201));
        assert_eq!(s.params.error_source6, Some(0x2001_0db8 << 96 | 1));
        assert_eq!(s.eam_hairpin, EamHairpin::Simple);
        let c = ok("[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.0.101/32\"]\n");
        let n = c.nat64.as_ref().unwrap();
        assert!(n.params.unreachable_errors);
        assert_eq!(n.params.error_source4, None);
        let e = err("[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.0.101/32\"]\nerror_source4 = \"192.0.2.0/24\"\n");
        assert!(e.starts_with("xlat.toml: nat64.error_source4: "), "{e}");
        assert!(e.contains("192.0.2.1"), "names a right value: {e}");
        let e = err("[siit]\nprefix = \"2001:2:0:64::/96\"\nerror_source4 = \"127.0.0.1\"\n");
        assert!(e.starts_with("xlat.toml: siit.error_source4: "), "{e}");
        let e = err("[siit]\nprefix = \"2001:2:0:64::/96\"\nerror_source6 = \"fe80::1\"\n");
        assert!(e.starts_with("xlat.toml: siit.error_source6: "), "{e}");
        let e = err("[siit]\nprefix = \"2001:2:0:64::/96\"\neam_hairpin = \"on\"\n");
        assert!(e.starts_with("xlat.toml: siit.eam_hairpin: "), "{e}");
        assert!(e.contains("\"intrinsic\""), "{e}");
        let e = err("[siit]\neam_hairpin = \"simple\"\neam = [{ ipv4 = \"198.19.1.0/28\", ipv6 = \"2001:2:0:6::/124\" }]\n");
        assert!(e.starts_with("xlat.toml: siit.eam_hairpin: "), "{e}");
        // RFC 7757 3.2: an IPv4 suffix longer than the IPv6 one is refused, with the fix.
        let e = err("[siit]\nprefix = \"2001:2:0:64::/96\"\neam = [{ ipv4 = \"198.19.1.0/24\", ipv6 = \"2001:2:0:6::/124\" }]\n");
        assert!(e.starts_with("xlat.toml: siit.eam: "), "{e}");
        assert!(e.contains("/120 or less"), "{e}");
    }

    #[test]
    fn the_files_digest_is_kept_for_the_log() {
        // FIPS 180-2's example: SHA-256("abc").
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let text = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        assert_eq!(ok(text).sha256, sha256_hex(text.as_bytes()));
    }

    #[test]
    fn missing_file_is_named() {
        let e = Config::load(Path::new("/nonexistent/xlat.toml"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("/nonexistent/xlat.toml: cannot read: "),
            "{e}"
        );
    }

    #[test]
    fn example_config_is_valid() {
        for f in ["nat44.toml", "nat64.toml", "siit.toml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples")
                .join(f);
            if let Err(e) = Config::load(&path) {
                panic!("{e}");
            }
        }
    }

    const NAT64: &str = "[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.0.101/32\"]\n";

    #[test]
    fn nat64_section() {
        let c = ok(&format!(
            "{NAT64}ports = \"2000-3000\"\nfiltering = \"endpoint-independent\"\nlowest_ipv6_mtu = 1400\nudp_zero_checksum = \"drop\"\n[timeouts]\nudp = 100\n"
        ));
        assert!(c.nat44.is_none() && c.siit.is_none());
        let n = c.nat64.clone().unwrap();
        assert_eq!(n.prefix.to_string(), "2001:2:0:64::/96");
        assert_eq!(n.pool4[0].to_string(), "198.19.0.101/32");
        assert_eq!(n.ports, (2000, 3000));
        assert_eq!(n.filtering, Filtering::EndpointIndependent);
        assert_eq!(n.timeouts.udp, 100, "[timeouts] is shared");
        assert_eq!(n.params.lowest_ipv6_mtu, 1400);
        assert_eq!(n.params.udp_zero_checksum, UdpZeroChecksum::Drop);
        assert_eq!(n.params.mtu, 1500, "tun.mtu");
        assert_eq!(
            c.rfc_warnings().len(),
            1,
            "udp = 100 is below RFC 4787's 120 s"
        );
        let e = c.engine_config(3);
        assert!(e.nat64.is_some() && e.nat44.is_none());
    }

    #[test]
    fn siit_section() {
        let c = ok(r#"
[siit]
prefix = "2001:2:0:46::/96"
pool4 = ["203.0.113.0/24"]
eam = [{ ipv4 = "198.19.1.0/28", ipv6 = "2001:2:0:6::/124" }, { ipv4 = "192.0.2.7", ipv6 = "2001:db8::7" }]
rfc6791 = "192.0.2.1"
rfc6791v6 = "2001:db8:6791::/96"
"#);
        let s = c.siit.unwrap();
        assert_eq!(
            s.rfc6791v6.map(|r| r.to_string()).as_deref(),
            Some("2001:db8:6791::/96")
        );
        // Overlapping the pref64: refused, naming the key.
        let e = err("[siit]\nprefix = \"2001:2:0:46::/96\"\nrfc6791v6 = \"2001:2:0:46::/112\"\n");
        assert!(e.starts_with("xlat.toml: siit.rfc6791v6: "), "{e}");
        assert_eq!(s.eam.len(), 2);
        assert_eq!(s.eam[1].ipv6.to_string(), "2001:db8::7/128");
        assert_eq!(
            s.rfc6791.map(|r| r.to_string()).as_deref(),
            Some("192.0.2.1/32")
        );
        assert_eq!(s.pool4[0].to_string(), "203.0.113.0/24");
    }

    #[test]
    fn dataplane_section() {
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        assert_eq!(ok(NAT).dataplane, DataplaneConfig::default());
        let c = ok(&format!(
            "{NAT}[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"in0\", \"out0\"]\ntable_size = 4096\nslow_path_pps = 50000\n"
        ));
        assert_eq!(c.dataplane.fast_path, FastPath::Xdp);
        assert_eq!(c.dataplane.interfaces, ["in0", "out0"]);
        assert_eq!(c.dataplane.table_size, 4096);
        assert_eq!(c.dataplane.slow_path_pps, 50_000);
        assert_eq!(c.dataplane.offload_udp_after, DEFAULT_OFFLOAD_UDP_AFTER);
        let c = ok(&format!(
            "{NAT}[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"a\"]\noffload_udp_after = 1\n"
        ));
        assert_eq!(c.dataplane.offload_udp_after, 1);
        for bad in ["0", "127", "-1"] {
            let e = err(&format!(
                "{NAT}[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"a\"]\noffload_udp_after = {bad}\n"
            ));
            assert!(
                e.starts_with("xlat.toml: dataplane.offload_udp_after: "),
                "{e}"
            );
        }
        let e = err(&format!(
            "{NAT}[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"a\"]\nslow_path_pps = 200000000\n"
        ));
        assert!(e.starts_with("xlat.toml: dataplane.slow_path_pps: "), "{e}");
        let c = ok(&format!(
            "{NAT}[dataplane]\nslow_path = \"af_xdp\"\ninterfaces = [\"in0\", \"out0\"]\n"
        ));
        assert_eq!(c.dataplane.slow_path, SlowPath::AfXdp);
        assert_eq!(c.dataplane.fast_path, FastPath::None);
        assert_eq!(ok(NAT).dataplane.slow_path, SlowPath::Tun);
        let e = err(&format!("{NAT}[dataplane]\nslow_path = \"af_xdp\"\n"));
        assert!(
            e.starts_with("xlat.toml: dataplane.interfaces: slow_path"),
            "{e}"
        );
        let e = err(&format!("{NAT}[dataplane]\nslow_path = \"dpdk\"\n"));
        assert!(
            e.starts_with("xlat.toml: dataplane.slow_path: \"dpdk\""),
            "{e}"
        );
        let e = err(&format!("{NAT}[dataplane]\nfast_path = \"dpdk\"\n"));
        assert!(
            e.starts_with("xlat.toml: dataplane.fast_path: \"dpdk\""),
            "{e}"
        );
        let e = err(&format!("{NAT}[dataplane]\nfast_path = \"xdp\"\n"));
        assert!(e.starts_with("xlat.toml: dataplane.interfaces: "), "{e}");
        let e = err(&format!(
            "{NAT}[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"a b\"]\n"
        ));
        assert!(e.starts_with("xlat.toml: dataplane.interfaces: "), "{e}");
        // SIIT is carried (its address pairs), and 6to4; ISATAP alone is not.
        let siit = Config::parse("xlat.toml", "[siit]\nprefix = \"2001:2:0:64::/96\"\n[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"a\"]\n").unwrap();
        assert_eq!(siit.dataplane.fast_path, FastPath::Xdp);
        let xdp = "[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"a\"]\n";
        let six = Config::parse(
            "xlat.toml",
            &format!("[tunnel.6to4]\nipv4 = \"198.18.0.1\"\n{xdp}"),
        )
        .unwrap();
        assert_eq!(six.dataplane.fast_path, FastPath::Xdp);
        // An ISATAP router is carried (its address and /64); a host, whose router and prefix
        // are learned, is not.
        let router = Config::parse("xlat.toml", &format!("[tunnel.isatap]\nrole = \"router\"\nipv4 = \"198.18.0.1\"\nprefix = \"2001:2:0:5::/64\"\n{xdp}")).unwrap();
        assert_eq!(router.dataplane.fast_path, FastPath::Xdp);
        let e = err(&format!("[tunnel.isatap]\nrole = \"host\"\nipv4 = \"198.18.0.2\"\nrouters = [\"198.18.0.1\"]\n{xdp}"));
        assert!(
            e.starts_with("xlat.toml: dataplane.fast_path: the XDP fast path carries")
                && e.contains("(not ISATAP hosts)")
                && e.contains("fast_path = \"none\""),
            "{e}"
        );
    }

    #[test]
    fn dataplane_workers() {
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        assert_eq!(ok(NAT).dataplane.workers, 1);
        assert_eq!(
            ok(&format!("{NAT}[dataplane]\nworkers = 2\n"))
                .dataplane
                .workers,
            2
        );
        assert_eq!(
            ok(&format!("{NAT}[dataplane]\nworkers = 64\n"))
                .dataplane
                .workers,
            64
        );
        for bad in ["0", "-1", "65", "1000000000000"] {
            let e = err(&format!("{NAT}[dataplane]\nworkers = {bad}\n"));
            assert_eq!(
                e,
                format!("xlat.toml: dataplane.workers: {bad} is out of range; expected 1 to 64 (one per core that should carry packets; 1 is the default)")
            );
        }
        let e = err(&format!("{NAT}[dataplane]\nworkers = \"2\"\n"));
        assert!(
            e.contains("workers = \"2\"") && e.contains("expected i64"),
            "{e}"
        );
        // More workers than ports: each worker needs a slice.
        let e = err(&format!(
            "{NAT}ports = \"2000-2002\"\n[dataplane]\nworkers = 4\n"
        ));
        assert_eq!(e, "xlat.toml: dataplane.workers: 4 workers need at least 4 ports in nat44.ports, which has 3 (2000-2002): each worker takes its own slice; set fewer workers or a wider nat44.ports");
        assert_eq!(
            ok(&format!(
                "{NAT}ports = \"2000-2002\"\n[dataplane]\nworkers = 3\n"
            ))
            .dataplane
            .workers,
            3
        );
        // Pool mode and ISATAP stay on one worker.
        let e = err("[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.96/28\"]\nmode = \"pool\"\n[dataplane]\nworkers = 2\n");
        assert!(
            e.starts_with(
                "xlat.toml: dataplane.workers: 2 workers cannot share nat44.mode = \"pool\""
            ) && e.ends_with("set workers = 1 or nat44.mode = \"napt\""),
            "{e}"
        );
        let e = err("[tunnel.isatap]\nipv4 = \"192.0.2.1\"\nrole = \"router\"\nprefix = \"2001:db8:1::/64\"\n[dataplane]\nworkers = 2\n");
        assert!(
            e.starts_with("xlat.toml: dataplane.workers: 2 workers cannot share [tunnel.isatap]"),
            "{e}"
        );
        // Static NAT44, NAT64, SIIT and 6to4 shard.
        ok("[nat44]\ninside = [\"198.18.0.0/24\"]\nmode = \"static\"\nstatic = [{ inside = \"198.18.0.10\", outside = \"198.19.0.10\" }]\n[dataplane]\nworkers = 4\n");
        ok("[siit]\nprefix = \"2001:2:0:64::/96\"\n[dataplane]\nworkers = 4\n");
        ok("[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.0.101\"]\n[dataplane]\nworkers = 4\n");
    }

    #[test]
    fn sync_section() {
        use crate::sync::StartRole;
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        const SYNC: &str = "[sync]\nlisten = \"198.18.254.1:4790\"\npeer = \"198.18.254.2:4790\"\n";
        let key = "key = \"0123456789abcdef\"\n";
        assert_eq!(ok(NAT).sync, None);
        let s = ok(&format!("{NAT}{SYNC}{key}")).sync.expect("sync on");
        assert_eq!(s.role, StartRole::Auto);
        assert_eq!(s.peer.to_string(), "198.18.254.2:4790");
        assert_eq!(s.key, b"0123456789abcdef");
        // The key never appears in the config's debug form (logs).
        assert!(!format!("{s:?}").contains("0123456789abcdef"));
        let role = ok(&format!("{NAT}{SYNC}{key}role = \"active\"\n"))
            .sync
            .unwrap()
            .role;
        assert_eq!(role, StartRole::Active);
        assert!(s.min_age.is_zero(), "every session synced by default");
        let aged = ok(&format!("{NAT}{SYNC}{key}min_session_age = 2\n"))
            .sync
            .unwrap()
            .min_age;
        assert_eq!(aged, std::time::Duration::from_secs(2));
        for (extra, key_named, says) in [
            ("", "sync.key", "missing"),
            (
                &format!("{key}min_session_age = 61\n") as &str,
                "sync.min_session_age",
                "0 (sync every session) to 60",
            ),
            ("key = \"short\"\n", "sync.key", "16 or more"),
            (
                &format!("{key}role = \"master\"\n") as &str,
                "sync.role",
                "\"standby\"",
            ),
            (
                &format!("{key}key_file = \"/nonexistent\"\n"),
                "sync.key_file",
                "keep one",
            ),
        ] {
            let e = err(&format!("{NAT}{SYNC}{extra}"));
            assert!(e.contains(key_named) && e.contains(says), "{extra:?}: {e}");
        }
        let e = err(&format!(
            "{NAT}[sync]\nlisten = \"198.18.254.1:4790\"\npeer = \"198.18.254.1:4790\"\n{key}"
        ));
        assert!(e.contains("sync.peer") && e.contains("own"), "{e}");
        let e = err(&format!(
            "{NAT}[sync]\nlisten = \"198.18.254.1\"\npeer = \"198.18.254.2:4790\"\n{key}"
        ));
        assert!(
            e.contains("sync.listen") && e.contains("198.18.254.1:4790"),
            "{e}"
        );
        let e = err(&format!("{NAT}[sync]\npeer = \"198.18.254.2:4790\"\n{key}"));
        assert!(e.contains("sync.listen") && e.contains("missing"), "{e}");
        // A key file: trailing newline trimmed.
        let f = std::env::temp_dir().join(format!("xlat-sync-key-{}", std::process::id()));
        std::fs::write(&f, "0123456789abcdefXYZ\n").unwrap();
        let s = ok(&format!("{NAT}{SYNC}key_file = \"{}\"\n", f.display()))
            .sync
            .unwrap();
        let _ = std::fs::remove_file(&f);
        assert_eq!(s.key, b"0123456789abcdefXYZ");
    }

    #[test]
    fn logging_section() {
        use crate::eventlog::LogEvents;
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        assert_eq!(ok(NAT).logging, None);
        let c = ok(&format!(
            "{NAT}[logging]\nsyslog = [\"192.0.2.51:514\", \"[2001:db8::51]:514\"]\n"
        ));
        let l = c.logging.expect("logging on");
        assert_eq!(l.events, LogEvents::Sessions);
        assert_eq!(l.syslog.len(), 2);
        // No collector, or "none": nothing is logged.
        assert_eq!(
            ok(&format!("{NAT}[logging]\nevents = \"mappings\"\n")).logging,
            None
        );
        let none = format!("{NAT}[logging]\nsyslog = [\"192.0.2.51:514\"]\nevents = \"none\"\n");
        assert_eq!(ok(&none).logging, None);
        let e = err(&format!("{NAT}[logging]\nsyslog = [\"192.0.2.51\"]\n"));
        assert!(
            e.contains("logging.syslog[0]") && e.contains("192.0.2.51:514"),
            "{e}"
        );
        let e = err(&format!("{NAT}[logging]\nsyslog = [\"0.0.0.0:514\"]\n"));
        assert!(
            e.contains("logging.syslog[0]") && e.contains("unicast"),
            "{e}"
        );
        let e = err(&format!(
            "{NAT}[logging]\nsyslog = [\"192.0.2.51:514\"]\nevents = \"all\"\n"
        ));
        assert!(
            e.contains("logging.events") && e.contains("\"sessions\""),
            "{e}"
        );
        let e = err(&format!("{NAT}[logging]\nipfx = [\"192.0.2.50:4739\"]\n"));
        assert!(e.contains("ipfx"), "an unknown key is refused: {e}");
    }

    /// `[nat44] deterministic` and `ports_per_host` (RFC 7422): parsed, refused with the
    /// numbers when the subscribers do not fit, summarised for `xlat check`, its range size
    /// handed to the IPFIX quota records.
    #[test]
    fn deterministic_nat44_keys() {
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        let c = ok(&format!(
            "{NAT}deterministic = true\n[logging]\nsyslog = [\"192.0.2.51:514\"]\n"
        ));
        let n = c.nat44.as_ref().unwrap();
        assert!(n.deterministic);
        assert_eq!(n.deterministic_map().map(|d| d.ports_per_host()), Some(252));
        let sum = c.deterministic_summary().join("\n");
        assert!(
            sum.contains("256 inside addresses on 1 pool addresses"),
            "{sum}"
        );
        assert!(sum.contains("252 ports each"), "{sum}");
        assert_eq!(c.logging.as_ref().map(|l| l.ports_per_host), Some(252));
        assert!(ok(NAT).deterministic_summary().is_empty());
        let c = ok(&format!(
            "{NAT}deterministic = true\nports_per_host = 100\n"
        ));
        assert!(c.deterministic_summary()[0].contains("100 ports each"));
        let e = err(&format!(
            "{NAT}deterministic = true\nports_per_host = 300\n"
        ));
        assert!(
            e.contains("nat44.ports_per_host") && e.contains("at most 252"),
            "{e}"
        );
        let e = err(&format!("{NAT}deterministic = true\nports_per_host = 0\n"));
        assert!(
            e.contains("nat44.ports_per_host") && e.contains("expected 1 to 65535"),
            "{e}"
        );
        let e = err(&format!("{NAT}ports_per_host = 100\n"));
        assert!(e.contains("deterministic = true"), "{e}");
        let e = err(
            "[nat44]\ninside = [\"10.0.0.0/8\"]\npool = [\"198.19.0.100\"]\ndeterministic = true\n",
        );
        assert!(
            e.contains("nat44.inside") && e.contains("16777216 subscribers"),
            "{e}"
        );
    }

    /// `[nat64] deterministic`, `inside`, `subscriber_prefix_len`, `ports_per_host`:
    /// parsed, summarised, refused with the key and the numbers when they do not fit or
    /// stand without deterministic = true.
    #[test]
    fn deterministic_nat64_keys() {
        const NAT: &str = "[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.0.100/31\"]\n";
        let c = ok(&format!(
            "{NAT}deterministic = true\ninside = [\"2001:db8:100::/56\"]\nsubscriber_prefix_len = 64\n[logging]\nsyslog = [\"192.0.2.51:514\"]\n"
        ));
        let n = c.nat64.as_ref().unwrap();
        assert_eq!((n.deterministic, n.subscriber_prefix_len), (true, 64));
        let d = n.deterministic_map().unwrap();
        assert_eq!((d.plan().subscribers, d.ports_per_host()), (256, 504));
        let sum = c.deterministic_summary().join("\n");
        assert!(
            sum.contains(
                "256 subscribers of /64 on 2 pool4 addresses, 128 per address, 504 ports each"
            ),
            "{sum}"
        );
        assert_eq!(c.logging.as_ref().map(|l| l.ports_per_host), Some(504));
        // Every address a subscriber (the default): a /120 is 256 of them.
        let c = ok(&format!(
            "{NAT}deterministic = true\ninside = [\"2001:db8:100::/120\"]\nports_per_host = 200\n"
        ));
        assert!(c.deterministic_summary()[0].contains("of /128"));
        for (extra, key, says) in [
            (
                "deterministic = true\n",
                "nat64.inside",
                "needs the subscribers",
            ),
            (
                "deterministic = true\ninside = [\"2001:db8::/64\"]\n",
                "nat64.inside",
                "2^64 subscribers",
            ),
            (
                "deterministic = true\ninside = [\"2001:db8::/64\"]\nsubscriber_prefix_len = 48\n",
                "nat64.subscriber_prefix_len",
                "longer than one subscriber",
            ),
            (
                "deterministic = true\ninside = [\"2001:db8::/64\"]\nsubscriber_prefix_len = 129\n",
                "nat64.subscriber_prefix_len",
                "expected 1 to 128",
            ),
            (
                "deterministic = true\ninside = [\"2001:db8:100::/120\"]\nports_per_host = 600\n",
                "nat64.ports_per_host",
                "at most 504",
            ),
            (
                "deterministic = true\ninside = [\"2001:db8::/126\", \"2001:db8::/127\"]\n",
                "nat64.inside",
                "overlap",
            ),
            (
                "deterministic = true\ninside = [\"2001:db8::/127\"]\nport_block_size = 512\n",
                "nat64.port_block_size",
                "one of port_block_size",
            ),
            (
                "inside = [\"2001:db8::/120\"]\n",
                "nat64.inside",
                "deterministic = true",
            ),
            (
                "ports_per_host = 100\n",
                "nat64.ports_per_host",
                "deterministic = true",
            ),
            (
                "deterministic = true\ninside = [\"2001:db8::1/120\"]\n",
                "nat64.inside[0]",
                "host bits",
            ),
        ] {
            let e = err(&format!("{NAT}{extra}"));
            assert!(e.contains(key) && e.contains(says), "{extra}: {e}");
        }
    }

    #[test]
    fn port_block_hold_needs_blocks_and_a_sane_number() {
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        let c = ok(&format!(
            "{NAT}port_block_size = 512\nport_block_hold = 120\n"
        ));
        assert_eq!(n44(&c).limits.port_block_hold, 120);
        assert_eq!(n44(&ok(NAT)).limits.port_block_hold, 0, "off by default");
        let e = err(&format!("{NAT}port_block_hold = 120\n"));
        assert!(
            e.contains("nat44.port_block_hold") && e.contains("port_block_size"),
            "{e}"
        );
        let e = err(&format!(
            "{NAT}port_block_size = 512\nport_block_hold = -1\n"
        ));
        assert!(e.contains("expected 0 to 86400"), "{e}");
        let c = ok("[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.0.101\"]\nport_block_size = 64\nport_block_hold = 30\n");
        assert_eq!(c.nat64.as_ref().map(|n| n.limits.port_block_hold), Some(30));
    }

    #[test]
    fn port_blocks_per_host_needs_blocks_and_fits_the_range() {
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        let c = ok(&format!(
            "{NAT}port_block_size = 512\nport_blocks_per_host = 4\n"
        ));
        assert_eq!(n44(&c).limits.port_blocks_per_host, 4);
        assert_eq!(
            n44(&ok(NAT)).limits.port_blocks_per_host,
            0,
            "no limit by default"
        );
        let e = err(&format!("{NAT}port_blocks_per_host = 4\n"));
        assert!(
            e.contains("nat44.port_blocks_per_host") && e.contains("port_block_size"),
            "{e}"
        );
        // 1024-65535 in blocks of 512: 126 blocks.
        for bad in ["0", "-1", "127"] {
            let e = err(&format!(
                "{NAT}port_block_size = 512\nport_blocks_per_host = {bad}\n"
            ));
            assert!(e.contains("expected 1 to 126"), "{bad}: {e}");
        }
        let c = ok("[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.0.101\"]\nport_block_size = 64\nport_blocks_per_host = 2\n");
        assert_eq!(
            c.nat64.as_ref().map(|n| n.limits.port_blocks_per_host),
            Some(2)
        );
    }

    #[test]
    fn port_block_size_per_translator() {
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";
        assert_eq!(n44(&ok(NAT)).limits.port_block_size, 0, "off by default");
        let c = ok(&format!("{NAT}port_block_size = 512\n"));
        assert_eq!(n44(&c).limits.port_block_size, 512);
        let c = ok("[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.0.101\"]\nport_block_size = 64\n");
        assert_eq!(c.nat64.as_ref().map(|n| n.limits.port_block_size), Some(64));
        for bad in ["4", "0", "-1", "64513"] {
            let e = err(&format!("{NAT}port_block_size = {bad}\n"));
            assert!(
                e.contains("nat44.port_block_size") && e.contains("expected 8 to 64512"),
                "{e}"
            );
        }
        let e = err(&format!("{NAT}mode = \"pool\"\nport_block_size = 512\n"));
        assert!(
            e.contains("nat44.port_block_size") && e.contains("napt"),
            "{e}"
        );
        // Each worker's slice holds a block.
        let e = err(&format!(
            "{NAT}ports = \"1024-2047\"\nport_block_size = 1000\n[dataplane]\nworkers = 2\n"
        ));
        assert!(
            e.contains("dataplane.workers") && e.contains("port_block_size = 1000"),
            "{e}"
        );
        ok(&format!(
            "{NAT}ports = \"1024-2047\"\nport_block_size = 512\n[dataplane]\nworkers = 2\n"
        ));
        // Logging only the blocks.
        let l = ok(&format!(
            "{NAT}port_block_size = 512\n[logging]\nipfix = [\"192.0.2.50:4739\"]\nevents = \"port-blocks\"\n"
        ))
        .logging
        .expect("logging on");
        assert_eq!(l.events, crate::eventlog::LogEvents::PortBlocks);
    }

    #[test]
    fn logging_ipfix_collectors_refresh_and_domain() {
        use std::time::Duration;
        const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n[limits]\nmax_sessions_per_host = 77\n";
        // IPFIX alone turns logging on; defaults: templates every 60 s, domain 1.
        let l = ok(&format!("{NAT}[logging]\nipfix = [\"192.0.2.50:4739\"]\n"))
            .logging
            .expect("logging on");
        assert_eq!(l.ipfix, vec!["192.0.2.50:4739".parse().unwrap()]);
        assert!(l.syslog.is_empty());
        assert_eq!(l.ipfix_template_refresh, Duration::from_secs(60));
        assert_eq!(l.ipfix_domain_id, 1);
        assert_eq!(l.max_sessions_per_host, 77);
        let l = ok(&format!(
            "{NAT}[logging]\nipfix = [\"[2001:db8::50]:4739\"]\nipfix_template_refresh = 600\nipfix_domain_id = 4294967295\n"
        ))
        .logging
        .expect("logging on");
        assert_eq!(l.ipfix_template_refresh, Duration::from_secs(600));
        assert_eq!(l.ipfix_domain_id, u32::MAX);
        // Bad values name the key and say what would be right.
        let e = err(&format!("{NAT}[logging]\nipfix = [\"192.0.2.50\"]\n"));
        assert!(
            e.contains("logging.ipfix[0]") && e.contains("192.0.2.51:4739"),
            "{e}"
        );
        let e = err(&format!("{NAT}[logging]\nipfix = [\"192.0.2.50:0\"]\n"));
        assert!(
            e.contains("logging.ipfix[0]") && e.contains("unicast"),
            "{e}"
        );
        for bad in ["0", "-5", "86401"] {
            let e = err(&format!(
                "{NAT}[logging]\nipfix = [\"192.0.2.50:4739\"]\nipfix_template_refresh = {bad}\n"
            ));
            assert!(
                e.contains("logging.ipfix_template_refresh") && e.contains("1 to 86400"),
                "{e}"
            );
        }
        for bad in ["-1", "4294967296"] {
            let e = err(&format!(
                "{NAT}[logging]\nipfix = [\"192.0.2.50:4739\"]\nipfix_domain_id = {bad}\n"
            ));
            assert!(
                e.contains("logging.ipfix_domain_id") && e.contains("4294967295"),
                "{e}"
            );
        }
        // events = "none" still turns everything off.
        let none = format!("{NAT}[logging]\nipfix = [\"192.0.2.50:4739\"]\nevents = \"none\"\n");
        assert_eq!(ok(&none).logging, None);
    }

    #[test]
    fn v6_translator_errors_name_the_key() {
        let e = err("[nat64]\npool4 = [\"198.19.0.101\"]\n");
        assert!(
            e.starts_with("xlat.toml: nat64.prefix: missing; expected an RFC 6052 pref64"),
            "{e}"
        );
        let e = err("[nat64]\nprefix = \"2001:2:0:64::/80\"\npool4 = [\"198.19.0.101\"]\n");
        assert!(e.starts_with("xlat.toml: nat64.prefix: "), "{e}");
        assert!(e.contains("/80 is not one of RFC 6052's"), "{e}");
        let e = err("[nat64]\nprefix = \"2001:2:0:64::1/96\"\npool4 = [\"198.19.0.101\"]\n");
        assert!(e.contains("did you mean 2001:2:0:64::/96"), "{e}");
        let e = err("[nat64]\nprefix = \"2001:2:0:64::/96\"\n");
        assert!(e.starts_with("xlat.toml: nat64.pool4: "), "{e}");
        let e = err(&format!("{NAT64}ports = \"9-1\"\n"));
        assert!(e.starts_with("xlat.toml: nat64.ports: "), "{e}");
        let e = err(&format!("{NAT64}filtering = \"cone\"\n"));
        assert!(
            e.starts_with("xlat.toml: nat64.filtering: unknown value"),
            "{e}"
        );
        let e = err(&format!("{NAT64}udp_zero_checksum = \"fix\"\n"));
        assert!(e.starts_with("xlat.toml: nat64.udp_zero_checksum: unknown value \"fix\"; expected one of \"compute\", \"drop\""), "{e}");
        let e = err(&format!("{NAT64}lowest_ipv6_mtu = 1000\n"));
        assert!(e.starts_with("xlat.toml: nat64.lowest_ipv6_mtu: "), "{e}");
        let e = err(&format!("{NAT64}[tun]\nmtu = 1000\n"));
        assert!(
            e.starts_with("xlat.toml: tun.mtu: 1000 is below 1280"),
            "{e}"
        );
        let e = err("[siit]\nprefix = \"2001:2:0:46::/96\"\neam = [{ ipv4 = \"198.19.1.0/24\", ipv6 = \"2001:2:0:6::/124\" }]\n");
        assert!(e.starts_with("xlat.toml: siit.eam: entry 0"), "{e}");
        assert!(e.contains("is longer than the IPv6 suffix"), "{e}");
        let e = err("[siit]\neam = [{ ipv4 = \"198.19.1.300\", ipv6 = \"2001:2:0:6::1\" }]\n");
        assert!(e.starts_with("xlat.toml: siit.eam[0].ipv4: "), "{e}");
        let e = err("[siit]\neam = [{ ipv4 = \"198.19.1.3\", ipv6 = \"2001:2:0:6::1/129\" }]\n");
        assert!(e.starts_with("xlat.toml: siit.eam[0].ipv6: "), "{e}");
        let e = err("[siit]\nrfc6791 = \"192.0.2.1\"\n");
        assert!(e.starts_with("xlat.toml: siit.prefix: "), "{e}");
        // One translator per pref64 (issue 3).
        let e = err(&format!("{NAT64}[siit]\nprefix = \"2001:2:0:64::/96\"\n"));
        assert!(e.starts_with("xlat.toml: siit.prefix: "), "{e}");
        assert!(e.contains("overlaps nat64.prefix"), "{e}");
        // NAT64's pool4 and NAT44's pool may not overlap.
        let e = err(&format!(
            "{NAT64}[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100/31\"]\n"
        ));
        assert!(e.starts_with("xlat.toml: nat64.pool4: "), "{e}");
        let e = err("[control]\nsocket = \"/tmp/x.sock\"\n");
        assert!(e.contains("no translator configured"), "{e}");
        // What would break at run time is refused by `xlat check` (issue 20).
        let e = err(&format!(
            "{NAT64}[nat44]\ninside = [\"198.19.0.0/24\"]\npool = [\"198.18.5.1\"]\n"
        ));
        assert!(e.starts_with("xlat.toml: nat64.pool4: "), "{e}");
        assert!(e.contains("overlaps nat44.inside"), "{e}");
        let e = err("[nat44]\nmode = \"static\"\nstatic = [{ inside = \"198.19.0.10\", outside = \"198.19.0.10\" }]\n");
        assert!(e.starts_with("xlat.toml: nat44.static: "), "{e}");
        assert!(e.contains("to itself"), "{e}");
        let e = err("[nat44]\nmode = \"static\"\nstatic = [{ inside = \"198.18.0.10\", outside = \"198.19.0.10\" }, { inside = \"198.18.0.11\", outside = \"198.19.0.12\" }, { inside = \"198.18.0.10\", outside = \"198.19.0.11\" }]\n");
        assert!(
            e.contains("198.18.0.10 -> 198.19.0.10 and 198.18.0.10 -> 198.19.0.11 overlap"),
            "{e}"
        );
        let e = err("[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n[tunnel.6to4]\nipv4 = \"198.19.0.100\"\n");
        assert!(e.starts_with("xlat.toml: tunnel.6to4.ipv4: "), "{e}");
        assert!(e.contains("nat44.pool"), "{e}");
        let e = err(&format!("{NAT64}[tun]\nname = \"lo\"\n"));
        assert!(e.starts_with("xlat.toml: tun.name: "), "{e}");
        assert!(e.contains("not a TUN device"), "{e}");
        let e = err(&format!("{NAT64}prefx = 1\n"));
        assert!(e.contains("unknown field `prefx`"), "{e}");
    }
}
