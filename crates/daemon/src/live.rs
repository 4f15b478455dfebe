//! What a reload changes outside the engines: the `[metrics]` listener, the `[logging]`
//! collectors (the event log thread), the `[dns64]` proxy and the XDP program's slow-path
//! policer (`[dataplane] slow_path_pps`).
//!
//! A reload is all or nothing ([`crate::control`]): [`prepare`] does everything that can
//! fail -- binds the new metrics listener, the event log's sockets, the DNS64's added listen
//! addresses -- before the packet workers take the new engine configuration; if a step
//! fails, what was prepared is dropped (its sockets closed) and nothing changes. [`apply`],
//! after the workers took theirs, only switches: it cannot fail for want of an address.
//! What cannot change while running is refused with the reason ([`refusal`]).

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use tracing::info;

use crate::config::Config;
use crate::control::WorkerLink;
use crate::eventlog::{EventLog, LogUpdate};
use crate::http::MetricsServer;

/// The services a reload reconfigures, as `xlat run` started them (`None`: not running).
#[derive(Default)]
pub struct Services {
    /// `[metrics]`'s HTTP listener.
    pub metrics: Option<MetricsServer>,
    /// `[logging]`'s event log (the workers hold it too).
    pub log: Option<Arc<EventLog>>,
    /// `[dns64]`'s proxy.
    pub dns64: Option<xlat_dns64::Dns64Service>,
    /// The XDP program, when attached (the workers hold it too).
    pub fast: Option<Arc<Mutex<xlat_xdp::FastPath>>>,
}

/// Shared by `xlat run` (which fills it and empties it at exit) and the control thread's
/// reload.
pub type SharedServices = Arc<Mutex<Services>>;

/// The services, also when a thread panicked holding them (they stay usable).
pub fn lock(s: &SharedServices) -> std::sync::MutexGuard<'_, Services> {
    match s.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Stops the services `xlat run` handed to the reload (metrics listener, DNS64 proxy) when
/// it drops, at the place in `run`'s teardown where they were started.
pub struct ServicesAtExit(pub SharedServices);

impl Drop for ServicesAtExit {
    fn drop(&mut self) {
        let taken = std::mem::take(&mut *lock(&self.0));
        drop(taken);
    }
}

/// Lets the reload's hold on the XDP program go when it drops, so the program detaches where
/// `run`'s teardown always detached it (before the routes go), not with the other services.
pub struct FastAtExit(pub SharedServices);

impl Drop for FastAtExit {
    fn drop(&mut self) {
        let taken = lock(&self.0).fast.take();
        drop(taken);
    }
}

/// What the metrics listener becomes.
enum MetricsStep {
    Off,
    /// The new address, bound.
    On(TcpListener),
}

/// A reload's changes to the services, ready to apply.
#[derive(Default)]
pub struct Prepared {
    metrics: Option<MetricsStep>,
    log: Option<LogUpdate>,
    dns64: Option<xlat_dns64::Dns64Update>,
    /// A new `[dataplane] slow_path_pps`.
    slow_path_pps: Option<u32>,
    /// The keys that change (`metrics.listen`, `logging.ipfix`, `dns64.upstream`, ...).
    pub keys: Vec<String>,
}

/// The `[metrics]`, `[logging]` and `[dns64]` keys that differ between `old` and `new`
/// (a section added or removed is named by the section's name).
pub fn changed_keys(old: &Config, new: &Config) -> Vec<String> {
    let mut keys = Vec::new();
    match (&old.metrics, &new.metrics) {
        (None, None) => {}
        (Some(a), Some(b)) => {
            if a.listen != b.listen {
                keys.push("metrics.listen".to_string());
            }
        }
        _ => keys.push("metrics".to_string()),
    }
    keys.extend(crate::eventlog::changed_keys(
        old.logging.as_ref(),
        new.logging.as_ref(),
    ));
    match (&old.dns64, &new.dns64) {
        (None, None) => {}
        (Some(a), Some(b)) => {
            let mut key = |changed: bool, k: &str| {
                if changed {
                    keys.push(format!("dns64.{k}"));
                }
            };
            key(a.listen != b.listen, "listen");
            key(a.upstream != b.upstream, "upstream");
            key(a.prefix != b.prefix, "prefix");
            key(a.exclude != b.exclude, "exclude");
        }
        _ => keys.push("dns64".to_string()),
    }
    if old.dataplane.slow_path_pps != new.dataplane.slow_path_pps {
        keys.push("dataplane.slow_path_pps".to_string());
    }
    keys
}

/// Does `new`'s `[dataplane]` differ from `old`'s in more than `slow_path_pps` (the one
/// key of it a reload changes live)?
pub fn dataplane_restart(old: &Config, new: &Config) -> bool {
    let same_pps = crate::config::DataplaneConfig {
        slow_path_pps: old.dataplane.slow_path_pps,
        ..new.dataplane.clone()
    };
    same_pps != old.dataplane
}

/// Why `new` cannot be applied to these services while running, with the fix (the running
/// configuration stays): `[dns64]` added or removed, `[logging]` turned on in a daemon
/// without an event log (`log_running`: it has one).
pub fn refusal(old: &Config, new: &Config, log_running: bool) -> Option<String> {
    let file = &new.file;
    if let Some(e) = crate::eventlog::refused(log_running, new.logging.as_ref()) {
        return Some(format!("{file}: {e}"));
    }
    match (&old.dns64, &new.dns64) {
        (None, Some(_)) => Some(format!(
            "{file}: dns64: cannot start the DNS64 proxy while running (its counters are part of the packet workers' statistics, set at start): restart xlat to apply it; a running [dns64] changes its listen, upstream, prefix and exclude keys live"
        )),
        (Some(_), None) => Some(format!(
            "{file}: dns64: cannot stop the DNS64 proxy while running (its counters are part of the packet workers' statistics, set at start): restart xlat to apply it; a running [dns64] changes its listen, upstream, prefix and exclude keys live"
        )),
        _ => None,
    }
}

/// Prepares what `new` changes in the services (binds what it needs); an error names the
/// file, the key, the problem and the fix. Nothing running changes.
pub fn prepare(svc: &Services, old: &Config, new: &Config) -> Result<Prepared, String> {
    if let Some(e) = refusal(old, new, svc.log.is_some()) {
        return Err(e);
    }
    let file = &new.file;
    let mut p = Prepared {
        keys: changed_keys(old, new),
        ..Prepared::default()
    };
    if old.metrics != new.metrics {
        p.metrics = Some(match &new.metrics {
            None => MetricsStep::Off,
            Some(m) => {
                let bound = MetricsServer::bind(m.listen).map_err(|e| {
                    // The new address is bound while the old one still listens: another
                    // address on the running port collides with it.
                    let same_port = old
                        .metrics
                        .as_ref()
                        .is_some_and(|o| o.listen.port() == m.listen.port());
                    let hint = if same_port {
                        " (the running listener holds that port: move to another port, or restart to change the address alone)"
                    } else {
                        ""
                    };
                    format!(
                        "{file}: metrics.listen: cannot listen on {}: {e}; choose a free address and port{hint} (the listener stays on {})",
                        m.listen,
                        old.metrics
                            .as_ref()
                            .map_or("nothing".to_string(), |o| o.listen.to_string())
                    )
                })?;
                MetricsStep::On(bound)
            }
        });
    }
    if old.logging != new.logging {
        if let Some(log) = &svc.log {
            p.log = Some(log.prepare(new.logging.as_ref()).map_err(|e| {
                format!("{file}: logging: {e:#}; check the collectors' address families")
            })?);
        }
    }
    if let (Some(d), Some(svc_d)) = (&new.dns64, &svc.dns64) {
        if old.dns64.as_ref() != Some(d) {
            p.dns64 = Some(svc_d.prepare(d).map_err(|e| match e.key() {
                Some(_) => format!(
                    "{file}: dns64.{e}; choose an address this host has and a free port (the DNS64 keeps its running addresses)"
                ),
                None => format!("{file}: dns64: {e}"),
            })?);
        }
    }
    if old.dataplane.slow_path_pps != new.dataplane.slow_path_pps {
        p.slow_path_pps = Some(new.dataplane.slow_path_pps);
    }
    Ok(p)
}

/// Applies what [`prepare`] made ready; returns what went wrong on the way (a thread that
/// could not start), as warnings: the rest stands.
pub fn apply(svc: &mut Services, p: Prepared, workers: &[WorkerLink]) -> Vec<String> {
    let mut warnings = Vec::new();
    match p.metrics {
        None => {}
        Some(MetricsStep::Off) => {
            let stopped = svc.metrics.take();
            info!(
                was = ?stopped.as_ref().map(MetricsServer::local_addr),
                "metrics listener stopped ([metrics] removed)"
            );
            drop(stopped);
        }
        Some(MetricsStep::On(listener)) => {
            // The old listener goes first (its thread joined), then the new one serves the
            // socket bound in `prepare`: connections to the new address wait in its backlog
            // meanwhile.
            drop(svc.metrics.take());
            match MetricsServer::serve(listener, workers.to_vec()) {
                Ok(m) => svc.metrics = Some(m),
                Err(e) => warnings.push(format!(
                    "metrics: the new listener could not start: {e}; reload again or restart"
                )),
            }
        }
    }
    if let (Some(u), Some(log)) = (p.log, &svc.log) {
        log.apply(u);
    }
    if let (Some(u), Some(d)) = (p.dns64, svc.dns64.as_mut()) {
        info!("dns64 reload: {}", u.summary());
        warnings.extend(d.apply(u));
    }
    // Without an attached program nothing is policed: the value waits for a restart.
    if let (Some(pps), Some(fast)) = (p.slow_path_pps, &svc.fast) {
        let mut f = match fast.lock() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        match f.set_slow_path_pps(pps) {
            Ok(()) => info!(slow_path_pps = pps, "XDP slow-path policer reconfigured"),
            Err(e) => warnings.push(format!(
                "dataplane.slow_path_pps: {e:#}; the policer keeps its old rate, reload again or restart"
            )),
        }
    }
    warnings
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const NAT: &str = "[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100\"]\n";

    fn cfg(extra: &str) -> Config {
        Config::parse("xlat.toml", &format!("{NAT}{extra}")).unwrap()
    }

    #[test]
    fn the_changed_keys_of_metrics_logging_and_dns64() {
        let base = cfg("");
        let m1 = cfg("[metrics]\nlisten = \"127.0.0.1:9641\"\n");
        let m2 = cfg("[metrics]\nlisten = \"127.0.0.1:9642\"\n");
        assert!(changed_keys(&base, &base).is_empty());
        assert_eq!(changed_keys(&base, &m1), ["metrics"]);
        assert_eq!(changed_keys(&m1, &base), ["metrics"]);
        assert_eq!(changed_keys(&m1, &m2), ["metrics.listen"]);
        let l1 = cfg("[logging]\nipfix = [\"192.0.2.50:4739\"]\n");
        let l2 = cfg("[logging]\nipfix = [\"192.0.2.50:4739\", \"192.0.2.51:4739\"]\nsyslog = [\"192.0.2.52:514\"]\n");
        assert_eq!(changed_keys(&l1, &l2), ["logging.ipfix", "logging.syslog"]);
        assert!(refusal(&l1, &l2, true).is_none());
        assert!(
            refusal(&l1, &base, true).is_none(),
            "removing [logging] stops sending"
        );
        // Back on after a reload removed it: the event log is still there.
        assert!(refusal(&base, &l1, true).is_none());
        assert!(refusal(&base, &l1, false)
            .is_some_and(|e| e.contains("logging") && e.contains("restart")));
        let d = |up: &str, listen: &str| {
            cfg(&format!(
                "[nat64]\nprefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.1.0/30\"]\n[dns64]\nlisten = [\"{listen}\"]\nupstream = [\"{up}\"]\nprefix = \"2001:2:0:64::/96\"\n"
            ))
        };
        let d1 = d("198.19.0.2:53", "127.0.0.1:53");
        let d2 = d("198.19.0.3:53", "127.0.0.1:53");
        let d3 = d("198.19.0.3:53", "127.0.0.1:5353");
        assert_eq!(changed_keys(&d1, &d2), ["dns64.upstream"]);
        assert_eq!(changed_keys(&d1, &d3), ["dns64.listen", "dns64.upstream"]);
        assert!(refusal(&d1, &d2, false).is_none());
        let no_dns = d1.clone();
        let mut no_dns = no_dns;
        no_dns.dns64 = None;
        assert!(refusal(&d1, &no_dns, false)
            .is_some_and(|e| e.contains("dns64") && e.contains("restart")));
        assert!(refusal(&no_dns, &d1, false)
            .is_some_and(|e| e.contains("dns64") && e.contains("restart")));
    }

    /// The metrics listener moves: the new address is bound in `prepare`; a taken address
    /// refuses with the key and keeps the old listener.
    #[test]
    fn metrics_listen_moves_and_a_taken_address_is_refused() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let free_at = free.local_addr().unwrap();
        drop(free);
        let a = cfg("");
        let b = cfg(&format!("[metrics]\nlisten = \"{free_at}\"\n"));
        let c = cfg(&format!(
            "[metrics]\nlisten = \"{}\"\n",
            taken.local_addr().unwrap()
        ));
        let mut svc = Services::default();
        let p = prepare(&svc, &a, &b).unwrap();
        assert_eq!(p.keys, ["metrics"]);
        assert!(apply(&mut svc, p, &[]).is_empty());
        assert_eq!(svc.metrics.as_ref().map(|m| m.local_addr()), Some(free_at));
        let e = prepare(&svc, &b, &c).err().unwrap();
        assert!(
            e.contains("metrics.listen") && e.contains(&free_at.to_string()),
            "{e}"
        );
        assert_eq!(svc.metrics.as_ref().map(|m| m.local_addr()), Some(free_at));
        let p = prepare(&svc, &b, &a).unwrap();
        assert!(apply(&mut svc, p, &[]).is_empty());
        assert!(svc.metrics.is_none());
        assert!(std::net::TcpStream::connect(free_at).is_err());
    }
}
