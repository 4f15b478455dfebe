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
//! Everything else sizes tables or shapes the pool, the BIB and the routes (pools, prefixes,
//! static entries, `mode`, `ports`, `limits.max_sessions`, fragment limits and timeout,
//! translators added or removed, SIIT, tunnels, the seed) and is refused for now.

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

/// What a successful [`Engine::reconfigure`] changed: the keys, as the file names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub keys: Vec<String>,
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
        reason: "cannot change while running (it sizes tables or shapes the pool, BIB or routes): restart xlat to apply it".to_string(),
    }
}

/// The live-changeable part of a stateful translator's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Live {
    pub timeouts: Timeouts,
    pub filtering: crate::config::Filtering,
    pub inbound_refresh: bool,
    pub max_sessions_per_host: u32,
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
    Ok(())
}

/// A stateful translator's configuration: its live-changeable part read and written.
pub(crate) trait Stateful: Clone + PartialEq {
    /// Its `[nat44]` / `[nat64]` table name.
    const TABLE: &'static str;
    fn live(&self) -> Live;
    fn set_live(&mut self, l: Live);
    /// The first key (beyond the live ones) where `self` and `o` differ.
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
            }
        }
        fn set_live(&mut self, l: Live) {
            self.timeouts = l.timeouts;
            self.filtering = l.filtering;
            self.inbound_refresh = l.inbound_refresh;
            self.limits.max_sessions_per_host = l.max_sessions_per_host;
        }
    };
}

impl Stateful for crate::Nat44Config {
    const TABLE: &'static str = "nat44";
    stateful_live!();
    fn first_diff(&self, o: &Self) -> String {
        first_diff44(self, o)
    }
}

impl Stateful for crate::Nat64Config {
    const TABLE: &'static str = "nat64";
    stateful_live!();
    fn first_diff(&self, o: &Self) -> String {
        first_diff64(self, o)
    }
}

/// Checks one translator's old and new configuration: present in both or neither, and
/// differing only in what changes live (whose keys go into `change`).
fn check<C: Stateful>(
    old: Option<&C>,
    new: Option<&C>,
    change: &mut Change,
) -> Result<(), ReloadError> {
    match (old, new) {
        (None, None) => Ok(()),
        (Some(a), Some(b)) => {
            diff_live(C::TABLE, a.live(), b.live(), change)?;
            let mut same = b.clone();
            same.set_live(a.live());
            if same != *a {
                return Err(restart(&a.first_diff(b)));
            }
            Ok(())
        }
        _ => Err(restart(C::TABLE)),
    }
}

impl Engine {
    /// Applies `new` where it differs from the running configuration in what can change
    /// live (module docs), or refuses all of it with the first key that cannot, changing
    /// nothing. Call it between batches; every packet worker applies the same configuration
    /// (its own share of it: `seed` and `limits.max_sessions` as it was built with).
    pub fn reconfigure(&mut self, new: &EngineConfig) -> Result<Change, ReloadError> {
        let old = &self.cfg;
        let mut change = Change::default();
        if new.seed != old.seed {
            return Err(restart("engine.seed"));
        }
        if new.siit != old.siit {
            return Err(restart("siit"));
        }
        if new.tunnel != old.tunnel {
            return Err(restart("tunnel"));
        }
        check(old.nat44.as_ref(), new.nat44.as_ref(), &mut change)?;
        check(old.nat64.as_ref(), new.nat64.as_ref(), &mut change)?;
        change.keys.sort();
        change.keys.dedup();
        // Checked: apply.
        if let (Some(n), Some(c)) = (self.nat44.as_mut(), new.nat44.as_ref()) {
            n.set_live(c.live());
        }
        if let (Some(n), Some(c)) = (self.nat64.as_mut(), new.nat64.as_ref()) {
            n.set_live(c.live());
        }
        self.cfg = new.clone();
        Ok(change)
    }
}

/// The first key of `[nat44]` (beyond the live ones) where `a` and `b` differ.
fn first_diff44(a: &crate::Nat44Config, b: &crate::Nat44Config) -> String {
    let k = if a.inside != b.inside {
        "inside"
    } else if a.pool != b.pool {
        "pool"
    } else if a.mode != b.mode {
        "mode"
    } else if a.statics != b.statics || a.forwards != b.forwards {
        "static"
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
        return "limits (only max_sessions_per_host changes live)".to_string();
    };
    format!("nat44.{k}")
}

/// The first key of `[nat64]` (beyond the live ones) where `a` and `b` differ.
fn first_diff64(a: &crate::Nat64Config, b: &crate::Nat64Config) -> String {
    let k = if a.prefix != b.prefix {
        "prefix"
    } else if a.pool4 != b.pool4 {
        "pool4"
    } else if a.ports != b.ports {
        "ports"
    } else if a.static_bib != b.static_bib {
        "static_bib"
    } else if a.verify_ip_checksum != b.verify_ip_checksum {
        "verify_ip_checksum"
    } else if a.alg_ftp != b.alg_ftp {
        "alg"
    } else if a.params != b.params {
        "(translation parameters)"
    } else if a.limits.port_block_size != b.limits.port_block_size {
        "port_block_size"
    } else if a.limits.port_block_hold != b.limits.port_block_hold {
        "port_block_hold"
    } else {
        return "limits (only max_sessions_per_host changes live)".to_string();
    };
    format!("nat64.{k}")
}
