//! The reconfigure door: [`Engine::reconfigure`] takes a whole new [`EngineConfig`] and
//! applies, between batches, what can change without losing a session; anything else makes
//! it refuse the whole configuration, naming the key and why, and change nothing
//! (all-or-nothing, so a bad reload leaves the running configuration in place).
//!
//! What changes live (NAT44 and NAT64 alike): the session timeouts (`udp`,
//! `tcp_established`, `tcp_transitory`, `icmp`; RFC 4787 REQ-5, RFC 5382 REQ-5, RFC 5508
//! REQ-1), `filtering` (RFC 4787 REQ-8), `inbound_refresh` (REQ-6) and
//! `limits.max_sessions_per_host`. A live session keeps the expiry it has until its next
//! packet refreshes it with the new timeout; a new filtering policy applies to the next
//! inbound packet; a lower per-host limit refuses new sessions, never ends old ones.
//!
//! What reshapes the translator live, ending only the sessions it no longer allows
//! (`napt/repool.rs`; each with its end event, reason `reload`, counted in
//! `sessions_removed_by_reload`): NAT44 `inside`, `pool`, `static` entries and port
//! forwards; NAT64 `prefix`, `pool4` and `static_bib`. All of `[siit]` changes live too:
//! it keeps no per-flow state (RFC 7915), so nothing ends. Sessions whose pool address, outside
//! endpoint and inside address stay valid are not touched. With `deterministic` NAT44 the
//! inside prefixes and the pool are the mapping itself (RFC 7422 2): they are refused.
//!
//! Everything else sizes tables or shapes the port space and the translation itself
//! (`mode`, `ports`, the limits that size tables, fragment limits and timeout, port
//! blocks, the ALG, translators added or removed, tunnels, the seed) and is refused.

use crate::config::Timeouts;
use crate::{Engine, EngineConfig};

/// Why a configuration cannot be applied live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadError {
    /// The configuration key, as the file names it (`nat44.pool`).
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

impl std::error::Error for ReloadError {}

/// What a successful [`Engine::reconfigure`] changed: the keys, as the file names them,
/// and how many sessions it ended (those the new pool, prefixes or static entries no longer
/// allow).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub keys: Vec<String>,
    pub sessions_ended: u64,
}

impl Change {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn restart(key: &str) -> ReloadError {
    ReloadError {
        key: key.to_string(),
        reason: "cannot change while running (it sizes tables or shapes the port space or the translation itself): restart xlat to apply it".to_string(),
    }
}

/// The live-changeable part of a stateful translator's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Live {
    pub timeouts: Timeouts,
    pub filtering: crate::config::Filtering,
    pub inbound_refresh: bool,
    pub max_sessions_per_host: u32,
    /// `port_blocks_per_host`: a lower limit takes no block away; a host above it gets no
    /// new one until it is below.
    pub port_blocks_per_host: u16,
}

/// Compares a translator's old and new `Live` parts and adds the changed keys to `change`
/// (`table` names the per-translator ones); a changed fragment timeout is refused.
fn diff_live(table: &str, old: Live, new: Live, change: &mut Change) -> Result<(), ReloadError> {
    let t = |k: &str| format!("{table}.{k}");
    if old.timeouts.fragment != new.timeouts.fragment {
        return Err(restart("timeouts.fragment"));
    }
    for (k, a, b) in [
        ("timeouts.udp", old.timeouts.udp, new.timeouts.udp),
        (
            "timeouts.tcp_established",
            old.timeouts.tcp_established,
            new.timeouts.tcp_established,
        ),
        (
            "timeouts.tcp_transitory",
            old.timeouts.tcp_transitory,
            new.timeouts.tcp_transitory,
        ),
        ("timeouts.icmp", old.timeouts.icmp, new.timeouts.icmp),
    ] {
        if a != b {
            change.keys.push(k.to_string());
        }
    }
    if old.filtering != new.filtering {
        change.keys.push(t("filtering"));
    }
    if old.inbound_refresh != new.inbound_refresh {
        change.keys.push(t("inbound_refresh"));
    }
    if old.max_sessions_per_host != new.max_sessions_per_host {
        change.keys.push("limits.max_sessions_per_host".to_string());
    }
    if old.port_blocks_per_host != new.port_blocks_per_host {
        change.keys.push(t("port_blocks_per_host"));
    }
    Ok(())
}

/// A stateful translator's configuration: its live-changeable part read and written, and
/// the part a reload reshapes (pools, prefixes, static entries).
pub(crate) trait Stateful: Clone + PartialEq {
    /// Its `[nat44]` / `[nat64]` table name.
    const TABLE: &'static str;
    fn live(&self) -> Live;
    fn set_live(&mut self, l: Live);
    /// The reshaping keys (as the file names them) where `self` and `o` differ.
    fn reshaped(&self, o: &Self) -> Vec<&'static str>;
    /// Takes `o`'s reshaping part.
    fn take_shape(&mut self, o: &Self);
    /// Refuses a reshaping `keys` cannot take (with deterministic NAT44: its inputs).
    fn shape_allowed(&self, keys: &[&'static str]) -> Result<(), ReloadError>;
    /// The first key (beyond the live and reshaping ones) where `self` and `o` differ.
    fn first_diff(&self, o: &Self) -> String;
}

macro_rules! stateful_live {
    () => {
        fn live(&self) -> Live {
            Live {
                timeouts: self.timeouts,
                filtering: self.filtering,
                inbound_refresh: self.inbound_refresh,
                max_sessions_per_host: self.limits.max_sessions_per_host,
                port_blocks_per_host: self.limits.port_blocks_per_host,
            }
        }
        fn set_live(&mut self, l: Live) {
            self.timeouts = l.timeouts;
            self.filtering = l.filtering;
            self.inbound_refresh = l.inbound_refresh;
            self.limits.max_sessions_per_host = l.max_sessions_per_host;
            self.limits.port_blocks_per_host = l.port_blocks_per_host;
        }
    };
}

impl Stateful for crate::Nat44Config {
    const TABLE: &'static str = "nat44";
    stateful_live!();
    fn reshaped(&self, o: &Self) -> Vec<&'static str> {
        let mut k = Vec::new();
        if self.inside != o.inside {
            k.push("nat44.inside");
        }
        if self.pool != o.pool {
            k.push("nat44.pool");
        }
        if self.statics != o.statics || self.forwards != o.forwards {
            k.push("nat44.static");
        }
        k
    }
    fn take_shape(&mut self, o: &Self) {
        self.inside.clone_from(&o.inside);
        self.pool.clone_from(&o.pool);
        self.statics.clone_from(&o.statics);
        self.forwards.clone_from(&o.forwards);
    }
    fn shape_allowed(&self, keys: &[&'static str]) -> Result<(), ReloadError> {
        match keys.iter().find(|k| **k != "nat44.static") {
            Some(k) if self.deterministic => Err(ReloadError {
                key: (*k).to_string(),
                reason: "cannot change while running with deterministic = true: each inside address's outside address and ports are computed from the inside prefixes and the pool (RFC 7422), and logs and `xlat lookup` rely on it; restart xlat to apply it".to_string(),
            }),
            _ => Ok(()),
        }
    }
    fn first_diff(&self, o: &Self) -> String {
        first_diff44(self, o)
    }
}

impl Stateful for crate::Nat64Config {
    const TABLE: &'static str = "nat64";
    stateful_live!();
    fn reshaped(&self, o: &Self) -> Vec<&'static str> {
        let mut k = Vec::new();
        if self.prefix != o.prefix {
            k.push("nat64.prefix");
        }
        if self.pool4 != o.pool4 {
            k.push("nat64.pool4");
        }
        if self.static_bib != o.static_bib {
            k.push("nat64.static_bib");
        }
        // The translator's own errors change live (per packet, nothing ends); the MTUs and
        // the UDP checksum rule are in the fast path's recipes: a restart.
        if self.params.unreachable_errors != o.params.unreachable_errors {
            k.push("nat64.unreachable_errors");
        }
        if (self.params.error_source4, self.params.error_source6)
            != (o.params.error_source4, o.params.error_source6)
        {
            k.push("nat64.error_source");
        }
        k
    }
    fn take_shape(&mut self, o: &Self) {
        self.prefix = o.prefix;
        self.pool4.clone_from(&o.pool4);
        self.static_bib.clone_from(&o.static_bib);
        self.params.unreachable_errors = o.params.unreachable_errors;
        self.params.error_source4 = o.params.error_source4;
        self.params.error_source6 = o.params.error_source6;
    }
    fn shape_allowed(&self, keys: &[&'static str]) -> Result<(), ReloadError> {
        match keys.iter().find(|k| **k == "nat64.pool4") {
            Some(k) if self.deterministic => Err(ReloadError {
                key: (*k).to_string(),
                reason: "cannot change while running with deterministic = true: each subscriber's pool4 address and ports are computed from nat64.inside and the pool (RFC 7422), and logs and `xlat lookup` rely on it; restart xlat to apply it".to_string(),
            }),
            _ => Ok(()),
        }
    }
    fn first_diff(&self, o: &Self) -> String {
        first_diff64(self, o)
    }
}

/// Checks one translator's old and new configuration: present in both or neither, and
/// differing only in what changes live or reshapes it (whose keys go into `change`).
/// Returns whether it reshapes.
fn check<C: Stateful>(
    old: Option<&C>,
    new: Option<&C>,
    change: &mut Change,
) -> Result<bool, ReloadError> {
    match (old, new) {
        (None, None) => Ok(false),
        (Some(a), Some(b)) => {
            diff_live(C::TABLE, a.live(), b.live(), change)?;
            let reshaped = a.reshaped(b);
            let mut same = b.clone();
            same.set_live(a.live());
            same.take_shape(a);
            if same != *a {
                return Err(restart(&a.first_diff(b)));
            }
            a.shape_allowed(&reshaped)?;
            change.keys.extend(reshaped.iter().map(|k| k.to_string()));
            Ok(!reshaped.is_empty())
        }
        _ => Err(restart(C::TABLE)),
    }
}

impl Engine {
    /// Applies `new` where it differs from the running configuration in what can change
    /// live or reshape a translator (module docs), or refuses all of it with the first key
    /// that cannot, changing nothing. Call it between batches, with the time `now` (the end
    /// events of the sessions a reshaping ends carry it); every packet worker applies the
    /// same configuration (its own share of it: `seed` and `limits.max_sessions` as it was
    /// built with).
    pub fn reconfigure(
        &mut self,
        now: crate::Time,
        new: &EngineConfig,
    ) -> Result<Change, ReloadError> {
        let old = &self.cfg;
        let mut change = Change::default();
        if new.seed != old.seed {
            return Err(restart("engine.seed"));
        }
        let siit_keys = match (&old.siit, &new.siit) {
            (Some(a), Some(b)) => siit_keys(a, b),
            (None, None) => Vec::new(),
            _ => return Err(restart("siit")),
        };
        if new.tunnel != old.tunnel {
            return Err(restart("tunnel"));
        }
        let reshape44 = check(old.nat44.as_ref(), new.nat44.as_ref(), &mut change)?;
        let reshape64 = check(old.nat64.as_ref(), new.nat64.as_ref(), &mut change)?;
        change.keys.extend(siit_keys.iter().map(|k| k.to_string()));
        change.keys.sort();
        change.keys.dedup();
        // Checked: apply.
        if let (Some(s), Some(c), false) =
            (self.siit.as_mut(), new.siit.as_ref(), siit_keys.is_empty())
        {
            s.reshape(c);
        }
        if let (Some(n), Some(c)) = (self.nat44.as_mut(), new.nat44.as_ref()) {
            n.set_live(c.live());
            if reshape44 {
                change.sessions_ended += n.reshape(now, c);
            }
        }
        if let (Some(n), Some(c)) = (self.nat64.as_mut(), new.nat64.as_ref()) {
            n.set_live(c.live());
            if reshape64 {
                change.sessions_ended += n.reshape(now, c);
            }
        }
        self.counters
            .add(crate::Event::SessionsRemovedByReload, change.sessions_ended);
        self.cfg = new.clone();
        Ok(change)
    }
}

/// The `[siit]` keys where `a` and `b` differ: all of them change live (SIIT is stateless).
fn siit_keys(a: &crate::SiitConfig, b: &crate::SiitConfig) -> Vec<&'static str> {
    let mut k = Vec::new();
    for (key, same) in [
        ("siit.prefix", a.prefix == b.prefix),
        ("siit.pool4", a.pool4 == b.pool4),
        ("siit.eam", a.eam == b.eam),
        ("siit.rfc6791", a.rfc6791 == b.rfc6791),
        ("siit.rfc6791v6", a.rfc6791v6 == b.rfc6791v6),
        ("siit.eam_hairpin", a.eam_hairpin == b.eam_hairpin),
        ("siit (translation parameters)", a.params == b.params),
    ] {
        if !same {
            k.push(key);
        }
    }
    if k.is_empty() && a != b {
        // A field this list does not name yet: still applied, under the table's name.
        k.push("siit");
    }
    k
}

/// The first key of `[nat44]` (beyond the live and reshaping ones) where `a` and `b` differ.
fn first_diff44(a: &crate::Nat44Config, b: &crate::Nat44Config) -> String {
    let k = if a.mode != b.mode {
        "mode"
    } else if a.ports != b.ports {
        "ports"
    } else if a.verify_ip_checksum != b.verify_ip_checksum {
        "verify_ip_checksum"
    } else if a.alg_ftp != b.alg_ftp {
        "alg"
    } else if a.limits.port_block_size != b.limits.port_block_size {
        "port_block_size"
    } else if a.limits.port_block_hold != b.limits.port_block_hold {
        "port_block_hold"
    } else if a.deterministic != b.deterministic {
        "deterministic"
    } else if a.ports_per_host != b.ports_per_host {
        "ports_per_host"
    } else {
        return "limits (only max_sessions_per_host and port_blocks_per_host change live)"
            .to_string();
    };
    format!("nat44.{k}")
}

/// The first key of `[nat64]` (beyond the live and reshaping ones) where `a` and `b` differ.
fn first_diff64(a: &crate::Nat64Config, b: &crate::Nat64Config) -> String {
    let k = if a.ports != b.ports {
        "ports"
    } else if a.verify_ip_checksum != b.verify_ip_checksum {
        "verify_ip_checksum"
    } else if a.alg_ftp != b.alg_ftp {
        "alg"
    } else if a.params != b.params {
        "(translation parameters: mtu, lowest_ipv6_mtu, udp_zero_checksum)"
    } else if a.limits.port_block_size != b.limits.port_block_size {
        "port_block_size"
    } else if a.limits.port_block_hold != b.limits.port_block_hold {
        "port_block_hold"
    } else if a.deterministic != b.deterministic {
        "deterministic"
    } else if a.inside != b.inside {
        "inside"
    } else if a.subscriber_prefix_len != b.subscriber_prefix_len {
        "subscriber_prefix_len"
    } else if a.ports_per_host != b.ports_per_host {
        "ports_per_host"
    } else {
        return "limits (only max_sessions_per_host and port_blocks_per_host change live)"
            .to_string();
    };
    format!("nat64.{k}")
}
