//! Prometheus text exposition (format 0.0.4) of the daemon's counters and table sizes.
//!
//! [`encode`] turns one [`DaemonStats`] -- the same merged answer of the packet workers that
//! `xlat show stats` prints, asked for through the control path between batches -- into the
//! text `GET /metrics` serves ([`crate::http`]). Nothing here runs on a packet worker, and
//! nothing is kept between scrapes: every value is the daemon's own at the time of the ask.
//!
//! The names are stable and listed in docs/METRICS.md with their RFC 7659 (NATV2-MIB)
//! counterparts. They follow the daemon's own stable counter names, so a counter added to
//! the engine appears here with its explanation as HELP, and a test keeps the document
//! complete:
//!
//! - engine event `E` -> counter `xlat_E_total`; drop reason `R` -> `xlat_drops_total{reason="R"}`;
//! - table sizes -> gauges (`xlat_sessions`, `xlat_pool_ports_used{proto}`, ...);
//! - TUN driver -> `xlat_tun_*_total`; DNS64 counter `D` -> `xlat_dns64_D_total`;
//! - fast-path counter `xdp_C` -> `xlat_xdp_C_total`, installed recipes -> `xlat_xdp_recipes`;
//! - event log counter `L` (`[logging]`) -> `xlat_log_L_total`;
//! - session sync counter `S` (`[sync]`) -> `xlat_sync_S_total`, and its state as gauges;
//! - per packet worker -> `xlat_worker_*{worker="K"}`.
//!
//! Written by hand rather than with prometheus-client: that crate writes OpenMetrics only,
//! whose counter families (`# TYPE x counter` with samples `x_total`) the Prometheus 2.42
//! `promtool check metrics` (text format 0.0.4) flags; a snapshot encoded once per scrape
//! needs none of its registry, and the format is a few lines.

use std::fmt::Write as _;

use crate::control::DaemonStats;

/// The `Content-Type` of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a metric is (its `# TYPE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets when the daemon restarts); the name ends in `_total`.
    Counter,
    /// Goes up and down: a size or a level now.
    Gauge,
}

/// The exposition being written: families one after the other, each with its samples.
struct Out {
    text: String,
    /// Families written so far (a name must not appear twice).
    names: Vec<String>,
}

impl Out {
    /// Starts family `name` with its `# HELP` (whitespace folded, escaped) and `# TYPE`.
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let help = help.replace('\\', "\\\\");
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        self.names.push(name.to_string());
    }

    /// One sample of the family just started.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape_label(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    /// A family with one unlabelled sample.
    fn single(&mut self, name: &str, kind: Kind, help: &str, value: u64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// A family with one unlabelled sample that is not a whole number (seconds in
    /// Prometheus' base unit).
    fn single_f64(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help);
        let _ = writeln!(self.text, "{name} {value}");
    }
}

/// A label value with `\`, `"` and newlines escaped (text format 0.0.4).
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `xlat_` + `name` + `suffix`, with anything outside `[a-zA-Z0-9_]` made `_` (the daemon's
/// names are snake_case already; this keeps a future odd one valid).
fn metric_name(name: &str, suffix: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("xlat_{clean}{suffix}")
}

/// The Prometheus text of `s` (see the module docs for the names).
pub fn encode(s: &DaemonStats) -> String {
    let mut o = Out {
        text: String::with_capacity(16 * 1024),
        names: Vec::new(),
    };
    let e = &s.engine;
    let g = Kind::Gauge;
    let c = Kind::Counter;

    o.family(
        "xlat_build_info",
        g,
        "Always 1; the version label names the running xlat.",
    );
    o.sample(
        "xlat_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    o.single(
        "xlat_uptime_seconds",
        g,
        "Seconds since the packet workers started.",
        s.io.uptime_secs,
    );

    // Table sizes (gauges).
    o.single(
        "xlat_sessions",
        g,
        "Sessions in the translation tables (NAT44 and NAT64, summed over the workers).",
        e.sessions,
    );
    o.single(
        "xlat_mappings",
        g,
        "Mappings (inside address and port to outside address and port; BIB entries) held.",
        e.mappings,
    );
    o.single(
        "xlat_inside_hosts",
        g,
        "Inside hosts that hold sessions or an address pairing.",
        e.hosts,
    );
    o.single(
        "xlat_fragment_flows",
        g,
        "Fragmented datagrams being tracked.",
        e.fragment_flows,
    );
    o.single(
        "xlat_held_fragments",
        g,
        "Non-first fragments held now, waiting for their first fragment.",
        e.fragments_held,
    );
    o.single(
        "xlat_pool_addresses",
        g,
        "Outside (pool) addresses configured.",
        e.pool_addresses,
    );
    o.single(
        "xlat_pool_addresses_used",
        g,
        "Pool addresses bound to an inside host (pool mode) or paired with one (NAPT).",
        e.pool_addresses_used,
    );
    o.family(
        "xlat_pool_ports",
        g,
        "Ports (ICMP identifiers) available across the pool addresses, per protocol.",
    );
    for p in &e.pool {
        o.sample("xlat_pool_ports", &[("proto", &p.proto)], p.ports_total);
    }
    o.family(
        "xlat_pool_ports_used",
        g,
        "Ports (ICMP identifiers) bound in mappings across the pool addresses, per protocol.",
    );
    for p in &e.pool {
        o.sample("xlat_pool_ports_used", &[("proto", &p.proto)], p.ports_used);
    }

    // The engine's events (counters).
    for ev in &e.events {
        let name = metric_name(&ev.name, "_total");
        o.single(&name, c, &ev.explain, ev.value);
    }
    o.family(
        "xlat_drops_total",
        c,
        "Packets dropped, by reason (xlat show stats --explain says what each reason means and what to change).",
    );
    for d in &e.drops {
        o.sample("xlat_drops_total", &[("reason", &d.name)], d.value);
    }

    // The TUN driver.
    o.single(
        "xlat_tun_rx_packets_total",
        c,
        "Packets read from the TUN device.",
        s.io.tun_rx_packets,
    );
    o.single(
        "xlat_tun_tx_packets_total",
        c,
        "Packets written to the TUN device.",
        s.io.tun_tx_packets,
    );
    o.single(
        "xlat_tun_write_errors_total",
        c,
        "Writes to the TUN device that failed (packets lost after translation).",
        s.io.tun_write_errors,
    );
    o.single(
        "xlat_tun_offload_refused_total",
        c,
        "Packets read from the TUN device whose virtio-net header asked for an offload xlat does not take.",
        s.io.tun_offload_refused,
    );

    if let Some(d) = &s.dns64 {
        for (name, value) in d.fields() {
            let m = metric_name(&format!("dns64_{name}"), "_total");
            let help = format!("DNS64 proxy counter {name} (RFC 6147; docs/METRICS.md).");
            o.single(&m, c, &help, value);
        }
    }

    if let Some(f) = &s.fast_path {
        o.single(
            "xlat_xdp_recipes",
            g,
            "Fast-path recipes installed in the kernel (two per offloaded session).",
            f.recipes,
        );
        o.single(
            "xlat_xdp_install_errors_total",
            c,
            "Recipes the kernel refused (table full: [dataplane] table_size).",
            f.install_errors,
        );
        if let Some(n) = f.egress_destinations {
            o.single(
                "xlat_afxdp_egress_destinations",
                g,
                "Destinations in the AF_XDP slow path's egress cache (at most 262,144).",
                n,
            );
        }
        for k in &f.counters {
            o.single(&metric_name(&k.name, "_total"), c, &k.explain, k.value);
        }
    }

    if let Some(log) = &s.log {
        for k in log {
            let m = metric_name(&format!("log_{}", k.name), "_total");
            o.single(&m, c, &k.explain, k.value);
        }
    }

    if let Some(sy) = &s.sync {
        o.single(
            "xlat_sync_active",
            g,
            "1 while this gateway is the active one of a [sync] pair (it forwards), 0 while standby.",
            u64::from(sy.role == "active"),
        );
        o.single(
            "xlat_sync_in_sync",
            g,
            "1 when the standby holds the whole table (as it says; on the active, as the standby said last).",
            u64::from(sy.in_sync),
        );
        o.single(
            "xlat_sync_unacked_datagrams",
            g,
            "Sync datagrams sent and not acknowledged by the peer yet.",
            sy.unacked,
        );
        o.single(
            "xlat_sync_queued_events",
            g,
            "Session events waiting to be sent: the window of unacknowledged datagrams is full (a full resync in progress, or a slow peer).",
            sy.queued,
        );
        o.single_f64(
            "xlat_sync_lag_seconds",
            g,
            "Seconds since the oldest sync datagram the peer has not acknowledged was first sent (0: all acknowledged).",
            sy.lag_ms as f64 / 1000.0,
        );
        for k in sy.counters.named() {
            let m = metric_name(&format!("sync_{}", k.name), "_total");
            o.single(&m, c, &k.explain, k.value);
        }
    }

    if !s.workers.is_empty() {
        let rows = &s.workers;
        let ids: Vec<String> = rows.iter().map(|w| w.worker.to_string()).collect();
        o.family(
            "xlat_worker_tun_rx_packets_total",
            c,
            "Packets read from this worker's TUN queue.",
        );
        for (w, id) in rows.iter().zip(&ids) {
            o.sample(
                "xlat_worker_tun_rx_packets_total",
                &[("worker", id)],
                w.tun_rx_packets,
            );
        }
        o.family(
            "xlat_worker_packets_in_total",
            c,
            "Packets this worker's engine took in (its own and those handed to it).",
        );
        for (w, id) in rows.iter().zip(&ids) {
            o.sample(
                "xlat_worker_packets_in_total",
                &[("worker", id)],
                w.packets_in,
            );
        }
        o.family(
            "xlat_worker_sessions",
            g,
            "Sessions in this worker's engine.",
        );
        for (w, id) in rows.iter().zip(&ids) {
            o.sample("xlat_worker_sessions", &[("worker", id)], w.sessions);
        }
        // Every worker reports the same counter names, in the same order.
        let names: Vec<(String, String)> = rows
            .first()
            .map(|w| {
                w.counters
                    .iter()
                    .map(|k| (k.name.clone(), k.explain.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (name, explain) in names {
            let m = metric_name(&format!("worker_{name}"), "_total");
            o.family(&m, c, &explain);
            for (w, id) in rows.iter().zip(&ids) {
                o.sample(&m, &[("worker", id)], w.get(&name));
            }
        }
    }
    debug_assert!(
        {
            let mut n = o.names.clone();
            n.sort();
            n.windows(2).all(|w| w[0] != w[1])
        },
        "a metric family written twice: {:?}",
        o.names
    );
    o.text
}

/// The family names [`encode`] writes for `s`, in order (for docs and tests).
pub fn family_names(s: &DaemonStats) -> Vec<String> {
    encode(s)
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// A [`DaemonStats`] with every part present (DNS64, fast path, two workers) and all
/// counters zero: what [`family_names`] of a daemon running everything would list.
pub fn everything() -> DaemonStats {
    use xlat_engine::counters::NamedCount;
    let named = |list: &[(&str, &str)]| -> Vec<NamedCount> {
        list.iter()
            .map(|(n, x)| NamedCount {
                name: (*n).to_string(),
                value: 0,
                explain: (*x).to_string(),
            })
            .collect()
    };
    let mut engine = xlat_engine::Stats::from_counters(&xlat_engine::Counters::default());
    engine.pool = ["tcp", "udp", "icmp"]
        .iter()
        .map(|p| xlat_engine::snapshot::PoolUse {
            proto: (*p).to_string(),
            ports_used: 0,
            ports_total: 0,
        })
        .collect();
    let worker = |k| crate::control::WorkerStats {
        worker: k,
        counters: crate::worker::worker_counter_names(),
        ..Default::default()
    };
    let mut xdp = named(xlat_xdp::COUNTERS);
    xdp.extend(named(xlat_xdp::WRITE_COUNTERS));
    xdp.extend(named(xlat_xdp::nexthop::COUNTERS));
    DaemonStats {
        engine,
        io: Default::default(),
        dns64: Some(Default::default()),
        fast_path: Some(crate::control::FastPathStats {
            kind: "xdp".to_string(),
            counters: xdp,
            egress_destinations: Some(0),
            ..Default::default()
        }),
        log: Some(named(crate::eventlog::COUNTERS)),
        sync: Some(crate::sync::SyncStatus::default()),
        workers: vec![worker(0), worker(1)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{FastPathStats, WorkerStats};
    use xlat_engine::counters::NamedCount;

    fn value(text: &str, sample: &str) -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn encodes_counters_gauges_and_labels() {
        let mut s = everything();
        s.engine.sessions = 7;
        for ev in s.engine.events.iter_mut() {
            if ev.name == "outbound" {
                ev.value = 42;
            }
        }
        for d in s.engine.drops.iter_mut() {
            if d.name == "no_mapping" {
                d.value = 3;
            }
        }
        s.engine.pool[1].ports_used = 5;
        s.io.tun_rx_packets = 99;
        s.workers[1] = WorkerStats {
            worker: 1,
            sessions: 4,
            counters: vec![NamedCount {
                name: "handoffs_out".into(),
                value: 11,
                explain: "x".into(),
            }],
            ..WorkerStats::default()
        };
        s.fast_path = Some(FastPathStats {
            recipes: 6,
            counters: vec![NamedCount {
                name: "xdp_redirected".into(),
                value: 12,
                explain: "Packets \"rewritten\"\n by a recipe \\ here.".into(),
            }],
            ..FastPathStats::default()
        });
        let t = encode(&s);
        assert_eq!(value(&t, "xlat_sessions"), Some(7), "{t}");
        assert_eq!(value(&t, "xlat_outbound_total"), Some(42));
        assert_eq!(
            value(&t, "xlat_drops_total{reason=\"no_mapping\"}"),
            Some(3)
        );
        assert_eq!(value(&t, "xlat_pool_ports_used{proto=\"udp\"}"), Some(5));
        assert_eq!(value(&t, "xlat_tun_rx_packets_total"), Some(99));
        assert_eq!(value(&t, "xlat_worker_sessions{worker=\"1\"}"), Some(4));
        assert_eq!(
            value(&t, "xlat_worker_handoffs_out_total{worker=\"1\"}"),
            Some(11)
        );
        // Worker 0 has the counter too (every worker lists the same names).
        assert_eq!(
            value(&t, "xlat_worker_handoffs_out_total{worker=\"0\"}"),
            Some(0)
        );
        assert_eq!(value(&t, "xlat_xdp_recipes"), Some(6));
        assert_eq!(value(&t, "xlat_xdp_redirected_total"), Some(12));
        assert_eq!(value(&t, "xlat_dns64_queries_total"), Some(0));
        // HELP on one line, backslashes escaped; quotes stay as they are in HELP.
        assert!(
            t.contains(
                "# HELP xlat_xdp_redirected_total Packets \"rewritten\" by a recipe \\\\ here.\n"
            ),
            "{t}"
        );
        assert!(t.contains("# TYPE xlat_drops_total counter\n"));
        assert!(t.contains("# TYPE xlat_sessions gauge\n"));
        // Every sample line is NAME[{labels}] VALUE, every counter ends in _total, every
        // family is typed once, and no gauge is named like a counter.
        let mut types = std::collections::HashMap::new();
        for l in t.lines() {
            if let Some(r) = l.strip_prefix("# TYPE ") {
                let (n, k) = r.split_once(' ').unwrap_or_default();
                assert!(types.insert(n.to_string(), k.to_string()).is_none(), "{n}");
                assert_eq!(k == "counter", n.ends_with("_total"), "{l}");
            } else if !l.starts_with("# HELP ") {
                let name = l.split(['{', ' ']).next().unwrap_or_default();
                assert!(types.contains_key(name), "sample before its TYPE: {l}");
                assert!(l
                    .rsplit(' ')
                    .next()
                    .is_some_and(|v| v.parse::<u64>().is_ok()));
            }
        }
        // Without DNS64, fast path and workers their families are absent.
        let bare = DaemonStats::default();
        let t = encode(&bare);
        assert!(!t.contains("xlat_dns64_"));
        assert!(!t.contains("xlat_xdp_"));
        assert!(!t.contains("xlat_worker_"));
        assert!(t.contains("xlat_drops_total"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(metric_name("odd-name.x", "_total"), "xlat_odd_name_x_total");
    }

    /// docs/METRICS.md lists every family a daemon running everything writes, and every
    /// drop reason.
    #[test]
    fn metrics_doc_lists_every_family() {
        let doc = include_str!("../../../docs/METRICS.md");
        let missing: Vec<String> = family_names(&everything())
            .into_iter()
            .filter(|n| !doc.contains(&format!("`{n}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/METRICS.md does not list: {missing:?}"
        );
        // And every value of the reason label.
        let reasons: Vec<&str> = xlat_engine::DropReason::ALL
            .iter()
            .map(|r| r.name())
            .filter(|r| !doc.contains(&format!("`{r}`")))
            .collect();
        assert!(
            reasons.is_empty(),
            "docs/METRICS.md does not list the drop reasons {reasons:?}"
        );
    }

    /// The cost of a scrape against a worker holding 1M and 10M sessions: the ask through
    /// the control channel (the worker answers with `Engine::stats`), the merge and the
    /// encoding, as `GET /metrics` does. A measurement, not a check of speed (tests never
    /// assert on wall time); run it with
    /// `cargo test --release -p xlat-daemon -- --ignored scrape_cost --nocapture`
    /// (the 10M-session table needs a few GiB free). docs/METRICS.md has the numbers.
    #[test]
    #[ignore]
    fn scrape_cost_at_1m_and_10m_sessions() -> Result<(), Box<dyn std::error::Error>> {
        use crate::control::{ask_workers, serve_pending, Request, Response, WorkerLink};
        use std::sync::Arc;
        use std::time::{Duration, Instant};
        use xlat_io::sys::{wait_readable, Waker};

        for n in [1_000_000u64, 10_000_000] {
            // 1,000 inside hosts (198.18.0.0/22), 1/1000 of the sessions each, to remotes in
            // 203.0.113.0/24 with varying ports: one mapping per host, many sessions.
            let text = format!(
                "[nat44]\ninside = [\"198.18.0.0/22\"]\npool = [\"198.19.0.100/32\"]\nmode = \"napt\"\n[limits]\nmax_sessions = {}\nmax_sessions_per_host = {}\n",
                n + 1000,
                n / 1000 + 10
            );
            let cfg = crate::config::Config::parse("scrape.toml", &text)?;
            let mut engine = xlat_engine::Engine::new(cfg.engine_config(1))?;
            let now = xlat_engine::Time::from_secs(1);
            let start = Instant::now();
            for k in 0..n {
                let host = (k % 1000) as u16;
                let j = k / 1000;
                let src = [198, 18, (host >> 8) as u8, host as u8];
                let dst = [203, 0, 113, 1 + (j % 250) as u8];
                let mut pkt = crate::translate::udp(src, dst, 5000, 1024 + (j / 250) as u16);
                let _ = engine.process_vec(now, &mut pkt);
            }
            let fill = start.elapsed();
            assert_eq!(engine.stats().sessions, n, "sessions made");

            // The worker: owns the engine, answers between "batches".
            let (tx, rx) = crate::inbox::inbox();
            let waker = Arc::new(Waker::new()?);
            let w = waker.clone();
            let worker = std::thread::spawn(move || {
                for _ in 0..10_000 {
                    let _ =
                        wait_readable([std::os::fd::AsFd::as_fd(&*w)], Duration::from_millis(100));
                    w.drain();
                    let mut stop = false;
                    serve_pending(&rx, |r| match r {
                        Request::Stats {} => Response::Stats(Box::new(DaemonStats {
                            engine: engine.stats(),
                            ..DaemonStats::default()
                        })),
                        _ => {
                            stop = true;
                            Response::Error("stop".into())
                        }
                    });
                    if stop {
                        break;
                    }
                }
                drop(engine);
            });
            let links = vec![WorkerLink { tx, waker }];
            let mut times = Vec::new();
            let mut text = String::new();
            for _ in 0..21 {
                let t0 = Instant::now();
                let Response::Stats(s) = ask_workers(Request::Stats {}, &links) else {
                    panic!("no stats")
                };
                text = encode(&s);
                times.push(t0.elapsed());
            }
            let _ = ask_workers(Request::Ping {}, &links);
            let _ = worker.join();
            times.sort();
            let series = text.lines().filter(|l| !l.starts_with('#')).count();
            assert!(text.contains(&format!("\nxlat_sessions {n}\n")));
            println!(
                "{n} sessions (made in {:.1} s): scrape median {:?}, max {:?}; {} bytes, {series} series",
                fill.as_secs_f64(),
                times[times.len() / 2],
                times[times.len() - 1],
                text.len()
            );
        }
        Ok(())
    }
}
