//! Read-only views of engine state for `xlat show` (serialisable).

use serde::{Deserialize, Serialize};

/// One row of the translation table (like `show ip nat translations`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionInfo {
    /// "tcp", "udp", "icmp", or "any" for a static entry.
    pub proto: String,
    /// Inside local address\[:port\].
    pub inside: String,
    /// Inside global (translated) address\[:port\].
    pub outside: String,
    /// Outside (remote) address\[:port\]; empty for static entries.
    pub remote: String,
    /// NAT64: the remote as the IPv6 side sees it, its pref64 form (`[2001:2:0:64::c613:2]:80`);
    /// absent for NAT44.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote6: String,
    /// "static", "udp", "icmp", or a TCP state (RFC 6146 3.5.2.2 names in snake_case).
    pub state: String,
    /// Seconds until the session expires if idle; `None` for static entries.
    pub expires_in: Option<u64>,
    /// "nat44" or "nat64" (empty when read from a daemon older than this field).
    #[serde(default)]
    pub translator: String,
    /// Its recipes are in the fast path (`[dataplane] fast_path`); `expires_in` then counts
    /// from the last packet the engine saw, and the fast path's own stamp is read before
    /// the session expires.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fast_path: bool,
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
