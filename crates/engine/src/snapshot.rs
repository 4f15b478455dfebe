//! Read-only views of engine state for `xlat show` (serialisable).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// What state a listed session is in: a static entry, a UDP or ICMP query session, or the
/// RFC 6146 3.5.2.2 TCP state (shown in snake_case: `syn_out`, `established`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// A NAT44 static entry (RFC 3022 static address translation): no ports, never expires.
    Static,
    Udp,
    Icmp,
    /// TCP: SYN seen from the inside only (V6 INIT).
    SynOut,
    /// TCP: SYN seen from the outside only (V4 INIT).
    SynIn,
    Established,
    /// TCP: FIN seen from the inside (V6 FIN RCV).
    FinOut,
    /// TCP: FIN seen from the outside (V4 FIN RCV).
    FinIn,
    /// TCP: FINs from both sides (V4 FIN + V6 FIN RCV), transitory lifetime.
    FinBoth,
    /// TCP: after an RST (TRANS), transitory lifetime.
    Transitory,
}

impl SessionState {
    /// The TCP state's listed name.
    pub fn of_tcp(t: crate::tcp::TcpState) -> SessionState {
        use crate::tcp::TcpState;
        match t {
            TcpState::OutInit => SessionState::SynOut,
            TcpState::InInit => SessionState::SynIn,
            TcpState::Established => SessionState::Established,
            TcpState::OutFinRcv => SessionState::FinOut,
            TcpState::InFinRcv => SessionState::FinIn,
            TcpState::BothFinRcv => SessionState::FinBoth,
            TcpState::Trans => SessionState::Transitory,
        }
    }

    /// The name `xlat show sessions` prints (the same as in JSON).
    pub fn name(self) -> &'static str {
        match self {
            SessionState::Static => "static",
            SessionState::Udp => "udp",
            SessionState::Icmp => "icmp",
            SessionState::SynOut => "syn_out",
            SessionState::SynIn => "syn_in",
            SessionState::Established => "established",
            SessionState::FinOut => "fin_out",
            SessionState::FinIn => "fin_in",
            SessionState::FinBoth => "fin_both",
            SessionState::Transitory => "transitory",
        }
    }
}

/// One row of the translation table (like `show ip nat translations`), as values: the
/// daemon sends it as JSON and the CLI formats it, nothing is formatted in the engine.
///
/// Ports are absent where the row has none: a static entry has no ports at all, and an
/// ICMP query session's remote has none (its one identifier is the inside host's, RFC 5508
/// 3.1: `inside_port` and `outside_port` hold it and its translation).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionInfo {
    pub translator: crate::flow::Translator,
    /// `None` for a static entry (any protocol).
    #[serde(default)]
    pub proto: Option<crate::flow::Proto>,
    /// Inside local address (IPv4 for NAT44, IPv6 for NAT64) and port or ICMP identifier.
    pub inside: IpAddr,
    #[serde(default)]
    pub inside_port: Option<u16>,
    /// Inside global (translated) address, a pool address, and port.
    pub outside: Ipv4Addr,
    #[serde(default)]
    pub outside_port: Option<u16>,
    /// Outside (remote) address and port; `None` for a static entry.
    #[serde(default)]
    pub remote: Option<Ipv4Addr>,
    #[serde(default)]
    pub remote_port: Option<u16>,
    /// NAT64: the remote as the IPv6 side addresses it, its pref64 form (RFC 6052).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote6: Option<Ipv6Addr>,
    pub state: SessionState,
    /// Seconds until the session expires if idle; `None` for static entries.
    pub expires_in: Option<u64>,
    /// Its recipes are in the fast path (`[dataplane] fast_path`); `expires_in` then counts
    /// from the last packet the engine saw, and the fast path's own stamp is read before
    /// the session expires.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fast_path: bool,
}

impl Default for SessionInfo {
    /// An empty NAT44 UDP row with unspecified addresses (a base for tests and builders).
    fn default() -> SessionInfo {
        SessionInfo {
            translator: crate::flow::Translator::Nat44,
            proto: None,
            inside: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            inside_port: None,
            outside: Ipv4Addr::UNSPECIFIED,
            outside_port: None,
            remote: None,
            remote_port: None,
            remote6: None,
            state: SessionState::Udp,
            expires_in: None,
            fast_path: false,
        }
    }
}

/// Where a paged session listing goes on ([`crate::Engine::sessions_page`]): the part of
/// the table -- 0 NAT44 static entries, 1 NAT44 sessions, 2 NAT64 sessions -- and the slot
/// in it. The default starts at the beginning.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionCursor {
    pub part: u8,
    pub slot: u32,
}

impl SessionCursor {
    /// The first dynamic session: a listing that leaves the static entries to another.
    pub const DYNAMIC: SessionCursor = SessionCursor { part: 1, slot: 0 };
}

/// Which sessions a listing or a clear takes: every field given must match (an address is
/// compared as a value, before anything is formatted). Static NAT44 entries are listed when
/// neither `proto` nor `port` is given, and never cleared.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SessionFilter {
    /// Inside host (IPv4 for NAT44, IPv6 for NAT64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside: Option<std::net::IpAddr>,
    /// Outside (pool) address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<std::net::Ipv4Addr>,
    /// Remote address (IPv4; a NAT64 remote as its pref64 form embeds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<std::net::Ipv4Addr>,
    /// A port (or ICMP identifier) on any side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<crate::flow::Proto>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translator: Option<crate::events::Translator>,
}

impl SessionFilter {
    /// Takes every session.
    pub fn any(&self) -> bool {
        *self == SessionFilter::default()
    }

    /// Whether a static entry (any protocol, no ports) of `translator` is taken.
    pub fn takes_static(&self, inside: std::net::IpAddr, outside: std::net::Ipv4Addr) -> bool {
        self.proto.is_none()
            && self.port.is_none()
            && self.remote.is_none()
            && self.translator != Some(crate::events::Translator::Nat64)
            && self.inside.is_none_or(|a| a == inside)
            && self.outside.is_none_or(|a| a == outside)
    }
}

/// Pool use per protocol.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PoolUse {
    pub proto: String,
    /// Ports (ICMP identifiers) bound across all pool addresses.
    pub ports_used: u64,
    /// Ports available across all pool addresses.
    pub ports_total: u64,
}

/// Counters and table sizes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stats {
    pub sessions: u64,
    pub mappings: u64,
    pub hosts: u64,
    pub fragment_flows: u64,
    pub fragments_held: u64,
    pub pool_addresses: u64,
    /// Pool addresses bound to an inside host (pool mode) or paired with one (NAPT).
    pub pool_addresses_used: u64,
    pub pool: Vec<PoolUse>,
    pub events: Vec<crate::counters::NamedCount>,
    pub drops: Vec<crate::counters::NamedCount>,
}

impl Stats {
    /// Stats holding `c`'s counters (with their explanations) and empty tables.
    pub fn from_counters(c: &crate::Counters) -> Stats {
        use crate::counters::{DropReason, Event, NamedCount};
        Stats {
            events: Event::ALL
                .iter()
                .map(|&e| NamedCount {
                    name: e.name().into(),
                    value: c.count(e),
                    explain: e.explain().into(),
                })
                .collect(),
            drops: DropReason::ALL
                .iter()
                .map(|&r| NamedCount {
                    name: r.name().into(),
                    value: c.dropped(r),
                    explain: r.explain().into(),
                })
                .collect(),
            ..Stats::default()
        }
    }

    /// Adds up `pool` rows of the same protocol (NAT44's pool and NAT64's pool4 each give one
    /// row per protocol).
    pub fn merge_pool_rows(&mut self) {
        let mut merged: Vec<PoolUse> = Vec::new();
        for row in self.pool.drain(..) {
            match merged.iter_mut().find(|m| m.proto == row.proto) {
                Some(m) => {
                    m.ports_used += row.ports_used;
                    m.ports_total += row.ports_total;
                }
                None => merged.push(row),
            }
        }
        self.pool = merged;
    }

    /// Value of a named event or drop counter (0 if unknown).
    pub fn get(&self, name: &str) -> u64 {
        self.events
            .iter()
            .chain(self.drops.iter())
            .find(|c| c.name == name)
            .map(|c| c.value)
            .unwrap_or(0)
    }
}
