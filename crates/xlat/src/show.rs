//! Human-readable output of `xlat show` and `xlat translate`: the translation table (after
//! Cisco's `show ip nat translations`) and the counters, with drop explanations on request.

use std::fmt::Write as _;
use std::net::IpAddr;

use xlat_daemon::control::{FastPathStats, IoCounters, WorkerStats};
use xlat_daemon::translate::PcapCounters;
use xlat_engine::counters::NamedCount;
use xlat_engine::{SessionInfo, Stats};

/// Seconds as `H:MM:SS`.
pub fn hms(secs: u64) -> String {
    format!("{}:{:02}:{:02}", secs / 3600, (secs / 60) % 60, secs % 60)
}

/// An endpoint as printed: `addr:port`, `[v6]:port`, or the address alone without a port.
fn endpoint(addr: IpAddr, port: Option<u16>) -> String {
    match (addr, port) {
        (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

/// The translation table: one row per session or static entry, columns padded to fit. With
/// NAT64 sessions an "Outside local" column shows the remote as the IPv6 side addresses it
/// (its pref64 form); for NAT44 rows it equals "Outside".
pub fn sessions_table(sessions: &[SessionInfo]) -> String {
    let v6 = sessions.iter().any(|s| s.remote6.is_some());
    let mut header = vec!["Pro", "Inside local", "Inside global"];
    if v6 {
        header.push("Outside local");
    }
    header.extend(["Outside", "State", "Expires"]);
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            let remote = s.remote.map(|a| endpoint(a.into(), s.remote_port));
            let mut r = vec![
                s.proto.map_or("any", |p| p.name()).to_string(),
                endpoint(s.inside, s.inside_port),
                endpoint(s.outside.into(), s.outside_port),
            ];
            if v6 {
                let local = s.remote6.map(|a| endpoint(a.into(), s.remote_port));
                r.push(
                    local
                        .or_else(|| remote.clone())
                        .unwrap_or_else(|| "---".into()),
                );
            }
            r.extend([
                remote.unwrap_or_else(|| "---".into()),
                if s.fast_path {
                    format!("{} (xdp)", s.state.name())
                } else {
                    s.state.name().to_string()
                },
                s.expires_in.map(hms).unwrap_or_else(|| "---".to_string()),
            ]);
            r
        })
        .collect();
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(width.iter()).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut out, &header);
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    let n = sessions.len();
    let _ = writeln!(out, "{n} entr{}", if n == 1 { "y" } else { "ies" });
    out
}

/// Word-wraps `text` to `width` columns, each line indented by `indent` spaces.
fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{:indent$}{line}", "");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{:indent$}{line}", "");
    }
    out
}

/// Counters and table sizes. Drop reasons: the nonzero ones, or every one with `all`; with
/// `explain`, each listed reason is followed by its explanation.
pub fn stats_text(s: &Stats, io: Option<&IoCounters>, explain: bool, all: bool) -> String {
    let mut out = String::new();
    let row = |out: &mut String, name: &str, value: String| {
        let _ = writeln!(out, "  {name:<26} {value}");
    };
    out.push_str("Table\n");
    row(&mut out, "sessions", s.sessions.to_string());
    row(&mut out, "mappings", s.mappings.to_string());
    row(&mut out, "inside hosts", s.hosts.to_string());
    row(&mut out, "fragment flows", s.fragment_flows.to_string());
    row(&mut out, "fragments held", s.fragments_held.to_string());
    row(
        &mut out,
        "pool addresses in use",
        format!("{}/{}", s.pool_addresses_used, s.pool_addresses),
    );
    for p in &s.pool {
        row(
            &mut out,
            &format!("pool {} ports in use", p.proto),
            format!("{}/{}", p.ports_used, p.ports_total),
        );
    }
    out.push_str("Events\n");
    for e in &s.events {
        row(&mut out, &e.name, e.value.to_string());
    }
    let total: u64 = s.drops.iter().map(|d| d.value).sum();
    let _ = writeln!(out, "Drops ({total} total)");
    let mut listed = 0;
    for d in s.drops.iter().filter(|d| all || d.value != 0) {
        listed += 1;
        row(&mut out, &d.name, d.value.to_string());
        if explain {
            out.push_str(&wrap(&d.explain, 6, 92));
        }
    }
    if listed == 0 {
        out.push_str("  (none)\n");
    }
    if let Some(io) = io {
        out.push_str("TUN\n");
        row(&mut out, "rx packets", io.tun_rx_packets.to_string());
        row(&mut out, "tx packets", io.tun_tx_packets.to_string());
        row(&mut out, "write errors", io.tun_write_errors.to_string());
        row(&mut out, "uptime", hms(io.uptime_secs));
    }
    out
}

/// The DNS64 proxy's counters (`[dns64]`), as `(name, value)` pairs in their fixed order.
pub fn dns64_text(fields: &[(&str, u64)]) -> String {
    let mut out = String::from("DNS64\n");
    for (name, value) in fields {
        let _ = writeln!(out, "  {name:<26} {value}");
    }
    out
}

/// The event log's part of `xlat show stats` (`[logging]`): syslog lines and IPFIX
/// messages and records sent, and failed sends -- every counter, each followed by its
/// explanation with `explain`.
pub fn log_text(counters: &[NamedCount], explain: bool) -> String {
    let mut out = String::from("Event log\n");
    for c in counters {
        let _ = writeln!(out, "  {:<26} {}", c.name, c.value);
        if explain {
            out.push_str(&wrap(&c.explain, 6, 92));
        }
    }
    out
}

/// The `[dataplane]` fast path's part of `xlat show stats`: what it carried, and why the
/// rest went to the kernel (zero counters only with `all`).
pub fn fast_path_text(f: &FastPathStats, explain: bool, all: bool) -> String {
    let mut out = format!("Fast path ({} on {})\n", f.kind, f.interfaces.join(", "));
    let _ = writeln!(out, "  {:<26} {}", "recipes", f.recipes);
    let _ = writeln!(out, "  {:<26} {}", "install_errors", f.install_errors);
    if let Some(n) = f.egress_destinations {
        let _ = writeln!(out, "  {:<26} {}", "egress_destinations", n);
    }
    for c in f.counters.iter().filter(|c| all || c.value != 0) {
        let _ = writeln!(out, "  {:<26} {}", c.name, c.value);
        if explain {
            out.push_str(&wrap(&c.explain, 6, 92));
        }
    }
    out
}

/// The packet workers (`[dataplane] workers`): one row each (packets read from its TUN
/// queue, taken in by its engine, sessions, packets handed to other workers and from them),
/// then their handoff and fragment-wait counters added up -- the nonzero ones, or every one
/// with `all`, each followed by its explanation with `explain`.
pub fn workers_text(w: &[WorkerStats], explain: bool, all: bool) -> String {
    let mut out = format!("Workers ({})\n", w.len());
    let _ = writeln!(
        out,
        "  {:<7} {:>12} {:>12} {:>10} {:>12} {:>12}",
        "worker", "rx packets", "packets in", "sessions", "handoffs out", "handoffs in"
    );
    for r in w {
        let _ = writeln!(
            out,
            "  {:<7} {:>12} {:>12} {:>10} {:>12} {:>12}",
            r.worker,
            r.tun_rx_packets,
            r.packets_in,
            r.sessions,
            r.get("handoffs_out"),
            r.get("handoffs_in")
        );
    }
    let mut totals: Vec<(&str, u64, &str)> = Vec::new();
    for c in w.iter().flat_map(|r| r.counters.iter()) {
        match totals.iter_mut().find(|t| t.0 == c.name) {
            Some(t) => t.1 += c.value,
            None => totals.push((&c.name, c.value, &c.explain)),
        }
    }
    for (name, value, text) in totals.into_iter().filter(|t| all || t.1 != 0) {
        let _ = writeln!(out, "  {name:<26} {value}");
        if explain {
            out.push_str(&wrap(text, 6, 92));
        }
    }
    out
}

/// One-paragraph summary of an offline translation.
pub fn translate_summary(input: &str, output: &str, s: &Stats, p: &PcapCounters) -> String {
    let mut out = String::new();
    let dropped: u64 = s.drops.iter().map(|d| d.value).sum();
    let _ = writeln!(
        out,
        "{input} -> {output}: {} packets read, {} written, {dropped} dropped",
        p.packets_read, p.packets_written
    );
    for d in s.drops.iter().filter(|d| d.value != 0) {
        let _ = writeln!(out, "  {:<26} {}", d.name, d.value);
    }
    if p.frames_skipped != 0 {
        let _ = writeln!(
            out,
            "  {} Ethernet frames without IPv4 skipped",
            p.frames_skipped
        );
    }
    let _ = writeln!(
        out,
        "  {} sessions, {} mappings at the end of the capture",
        s.sessions, s.mappings
    );
    out
}

/// `xlat show sync` (and `xlat sync role`): the role, the peer, whether the table is whole,
/// then the counters (with `explain`, what each means).
pub fn sync_status(st: &xlat_daemon::sync::SyncStatus, explain: bool) -> String {
    let mut out = String::new();
    let seen = match st.peer_seen_secs_ago {
        Some(s) => format!("heard {s} s ago"),
        None => "never heard".to_string(),
    };
    let peer_role = st.peer_role.as_deref().unwrap_or("unknown");
    let _ = writeln!(out, "role: {}", st.role);
    let _ = writeln!(out, "peer: {} ({seen}, {peer_role})", st.peer);
    let _ = writeln!(
        out,
        "in sync: {}{}",
        if st.in_sync { "yes" } else { "no" },
        if st.role == "active" {
            " (as the standby says)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "unacknowledged datagrams: {} (window {}), events waiting: {}, lag: {} ms",
        st.unacked,
        xlat_daemon::sync::WINDOW,
        st.queued,
        st.lag_ms
    );
    let values = serde_json::to_value(&st.counters).unwrap_or_default();
    for (name, text) in xlat_daemon::sync::COUNTERS {
        let v = values.get(*name).and_then(|v| v.as_u64()).unwrap_or(0);
        let _ = writeln!(out, "  {name:<22} {v}");
        if explain {
            let _ = writeln!(out, "      {text}");
        }
    }
    out
}

/// A packet's headers on one line, tcpdump-like: `udp 198.18.0.7:5000 > 203.0.113.9:53,
/// ttl 64, 33 bytes`.
pub fn headers_line(h: &xlat_engine::trace::Headers) -> String {
    let mut out = match h.proto {
        6 => "tcp ",
        17 => "udp ",
        1 => "icmp ",
        58 => "icmp6 ",
        _ => "",
    }
    .to_string();
    if out.is_empty() {
        let _ = write!(out, "proto {} ", h.proto);
    }
    let (sport, dport) = match h.icmp {
        Some(_) => (None, None),
        None => (h.sport, h.dport),
    };
    let _ = write!(
        out,
        "{} > {}",
        endpoint(h.src, sport),
        endpoint(h.dst, dport)
    );
    if let Some(f) = h.tcp_flags {
        let mut flags = String::new();
        for (bit, c) in [
            (0x02, 'S'),
            (0x01, 'F'),
            (0x04, 'R'),
            (0x08, 'P'),
            (0x10, '.'),
        ] {
            if f & bit != 0 {
                flags.push(c);
            }
        }
        let _ = write!(out, " [{flags}]");
    }
    if let Some((t, c)) = h.icmp {
        let name = match (h.proto, t) {
            (1, 0) | (58, 129) => Some("echo-reply"),
            (1, 8) | (58, 128) => Some("echo-request"),
            (1, 3) | (58, 1) => Some("dest-unreachable"),
            (58, 2) => Some("packet-too-big"),
            (1, 11) | (58, 3) => Some("time-exceeded"),
            (1, 12) | (58, 4) => Some("parameter-problem"),
            _ => None,
        };
        match name {
            Some(n) => {
                let _ = write!(out, " {n}");
            }
            None => {
                let _ = write!(out, " type {t}");
            }
        }
        if c != 0 || name.is_none() {
            let _ = write!(out, " code {c}");
        }
        if let Some(id) = h.sport {
            let _ = write!(out, " id {id}");
        }
    }
    if h.fragment {
        out.push_str(", fragment");
    }
    let _ = write!(out, ", ttl {}, {} bytes", h.ttl, h.len);
    out
}

/// `xlat trace`'s records, one block each (VPP's packet trace): where the packet came from,
/// the translator, the headers before, the lookup, the headers after, the verdict (a drop
/// with its reason and explanation). Times are from the first record.
pub fn trace_text(
    entries: &[xlat_daemon::control::TraceEntry],
    asked: usize,
    timeout_secs: u64,
) -> String {
    use xlat_daemon::control::Ingress;
    let mut out = String::new();
    let t0 = entries.first().map_or(0, |e| e.at_ns);
    for (i, e) in entries.iter().enumerate() {
        let dt = e.at_ns.saturating_sub(t0);
        let from = match e.ingress {
            Ingress::Tun => "tun",
            Ingress::AfXdp => "af_xdp",
            Ingress::Handoff => "handoff",
        };
        let _ = writeln!(
            out,
            "Packet {} at +{}.{:06} s, worker {}, from {from}",
            i + 1,
            dt / 1_000_000_000,
            dt % 1_000_000_000 / 1000,
            e.worker
        );
        let mut tr = e
            .translator
            .map_or("none (no translator takes it)", |t| t.name())
            .to_string();
        if let Some(d) = e.direction {
            tr.push_str(match d {
                xlat_engine::trace::Direction::Outbound => ", outbound",
                xlat_engine::trace::Direction::Inbound => ", inbound",
            });
        }
        if e.hairpin {
            tr.push_str(", hairpin");
        }
        let _ = writeln!(out, "  translator  {tr}");
        let before = e
            .before
            .as_ref()
            .map_or("not an IPv4 or IPv6 packet".to_string(), headers_line);
        let _ = writeln!(out, "  before      {before}");
        let mut lookup = e.lookup.name().to_string();
        if e.mapping_created {
            lookup.push_str(", mapping created");
        }
        let _ = writeln!(out, "  lookup      {lookup}");
        if let Some(a) = &e.after {
            let label = if e.verdict == "reply" {
                "reply"
            } else {
                "after"
            };
            let _ = writeln!(out, "  {label:<11} {}", headers_line(a));
        }
        match (&e.reason, e.verdict.as_str()) {
            (Some(r), "reply") => {
                let _ = writeln!(
                    out,
                    "  verdict     not translated, ICMP error sent back: {r}"
                );
            }
            (Some(r), v) => {
                let _ = writeln!(out, "  verdict     {v}: {r}");
            }
            (None, v) => {
                let _ = writeln!(out, "  verdict     {v}");
            }
        }
        if let Some(x) = &e.explain {
            out.push_str(&wrap(x, 14, 100));
        }
        out.push('\n');
    }
    let n = entries.len();
    let _ = writeln!(out, "{n} packet{} traced", if n == 1 { "" } else { "s" });
    if n < asked {
        let _ = writeln!(
            out,
            "(fewer than {asked}: no more matched within {timeout_secs} s; packets of flows the XDP fast path carries never reach the engine, and a trace sees only what the engine sees)"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat_engine::counters::NamedCount;
    use xlat_engine::flow::{Proto, Translator};
    use xlat_engine::SessionState;

    fn nc(name: &str, value: u64, explain: &str) -> NamedCount {
        NamedCount {
            name: name.into(),
            value,
            explain: explain.into(),
        }
    }

    #[test]
    fn table_rows_line_up() {
        let rows = vec![
            SessionInfo {
                inside: "198.18.0.10".parse().unwrap(),
                outside: "198.19.0.10".parse().unwrap(),
                state: SessionState::Static,
                ..SessionInfo::default()
            },
            SessionInfo {
                proto: Some(Proto::Tcp),
                inside: "198.18.0.20".parse().unwrap(),
                inside_port: Some(40000),
                outside: "198.19.0.100".parse().unwrap(),
                outside_port: Some(40000),
                remote: Some("203.0.113.5".parse().unwrap()),
                remote_port: Some(80),
                state: SessionState::Established,
                expires_in: Some(7439),
                ..SessionInfo::default()
            },
        ];
        let t = sessions_table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines[0].starts_with("Pro  Inside local       Inside global"),
            "{t}"
        );
        assert!(lines[1].contains("---"), "{t}");
        assert!(lines[2].ends_with("established  2:03:59"), "{t}");
        let col = |l: &str| l.find("Inside global").or_else(|| l.find("198.19"));
        assert_eq!(col(lines[0]), col(lines[2]));
        assert_eq!(lines[3], "2 entries");
        assert_eq!(sessions_table(&[]).lines().last(), Some("0 entries"));
    }

    #[test]
    fn nat64_rows_get_an_outside_local_column() {
        let rows = vec![SessionInfo {
            translator: Translator::Nat64,
            proto: Some(Proto::Udp),
            inside: "2001:2:0:1::10".parse().unwrap(),
            inside_port: Some(40000),
            outside: "198.19.0.101".parse().unwrap(),
            outside_port: Some(40000),
            remote: Some("198.19.0.2".parse().unwrap()),
            remote_port: Some(53),
            remote6: Some("2001:2:0:64::c613:2".parse().unwrap()),
            state: SessionState::Udp,
            expires_in: Some(299),
            fast_path: true,
        }];
        let t = sessions_table(&rows);
        assert!(t.contains("udp (xdp)"), "{t}");
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("Outside local"), "{t}");
        assert!(lines[1].contains("[2001:2:0:1::10]:40000"), "{t}");
        assert!(
            lines[1].contains("[2001:2:0:64::c613:2]:53  198.19.0.2:53"),
            "{t}"
        );
    }

    #[test]
    fn stats_lists_nonzero_drops_and_explains() {
        let s = Stats {
            sessions: 2,
            events: vec![nc("packets_in", 10, "")],
            drops: vec![
                nc("not_ours", 3, "Source is not an inside address."),
                nc(
                    "filtered",
                    0,
                    "Inbound from a remote the policy does not admit.",
                ),
            ],
            ..Stats::default()
        };
        let t = stats_text(&s, None, false, false);
        assert!(t.contains("Drops (3 total)"), "{t}");
        assert!(t.contains("  not_ours"), "{t}");
        assert!(!t.contains("filtered"), "{t}");
        assert!(!t.contains("Source is"), "{t}");
        let t = stats_text(&s, None, true, false);
        assert!(t.contains("      Source is not an inside address."), "{t}");
        let t = stats_text(&s, None, true, true);
        assert!(t.contains("filtered"), "{t}");
        assert!(t.contains("the policy does not admit"), "{t}");
        let io = IoCounters {
            tun_write_errors: 4,
            ..IoCounters::default()
        };
        let t = stats_text(&Stats::default(), Some(&io), false, false);
        assert!(t.contains("(none)"), "{t}");
        assert!(t.contains("write errors"), "{t}");
    }

    #[test]
    fn workers_rows_and_totals() {
        let row = |k: u64, out: u64, full: u64| WorkerStats {
            worker: k,
            tun_rx_packets: 10 + k,
            packets_in: 20 + k,
            sessions: 3,
            counters: vec![
                nc("handoffs_out", out, "Passed to their owner."),
                nc("handoff_ring_full", full, "Dropped: ring full."),
            ],
        };
        let t = workers_text(&[row(0, 5, 0), row(1, 7, 0)], false, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "Workers (2)");
        assert!(lines[1].contains("handoffs out"), "{t}");
        assert!(
            lines[2].starts_with("  0 ") && lines[2].ends_with(" 5            0"),
            "{t}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("  handoffs_out ") && l.ends_with(" 12")),
            "{t}"
        );
        assert!(!t.contains("handoff_ring_full"), "{t}");
        let t = workers_text(&[row(0, 5, 1)], true, true);
        assert!(t.contains("handoff_ring_full"), "{t}");
        assert!(t.contains("      Dropped: ring full."), "{t}");
    }

    #[test]
    fn wrapping() {
        let w = wrap("aaa bbb ccc ddd", 2, 10);
        assert_eq!(w, "  aaa bbb\n  ccc ddd\n");
        assert_eq!(hms(0), "0:00:00");
        assert_eq!(hms(3661), "1:01:01");
    }

    #[test]
    fn trace_blocks_name_the_steps() {
        use xlat_daemon::control::{Ingress, TraceEntry};
        use xlat_engine::trace::{Direction, Headers, Lookup, Translator as T};
        let h = |src: &str, dst: &str| Headers {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto: 1,
            len: 84,
            ttl: 63,
            sport: Some(7),
            dport: None,
            icmp: Some((8, 0)),
            tcp_flags: None,
            fragment: false,
        };
        let fwd = TraceEntry {
            at_ns: 5_000_000_000,
            worker: 1,
            seq: 0,
            ingress: Ingress::Handoff,
            translator: Some(T::Nat44),
            direction: Some(Direction::Outbound),
            before: Some(h("198.18.0.7", "198.51.100.9")),
            lookup: Lookup::Created,
            mapping_created: true,
            hairpin: false,
            after: Some(h("203.0.113.1", "198.51.100.9")),
            verdict: "forwarded".into(),
            reason: None,
            explain: None,
        };
        let drop = TraceEntry {
            at_ns: 6_500_000_000,
            before: Some(Headers {
                proto: 17,
                icmp: None,
                sport: Some(53),
                dport: Some(4000),
                ..h("198.51.100.9", "203.0.113.1")
            }),
            lookup: Lookup::None,
            direction: None,
            mapping_created: false,
            after: None,
            verdict: "dropped".into(),
            reason: Some("no_mapping".into()),
            explain: Some("Inbound to a pool address and port that has no mapping.".into()),
            ..fwd.clone()
        };
        let t = trace_text(&[fwd, drop], 2, 10);
        assert!(
            t.contains("Packet 1 at +0.000000 s, worker 1, from handoff"),
            "{t}"
        );
        assert!(t.contains("translator  nat44, outbound"), "{t}");
        assert!(
            t.contains(
                "before      icmp 198.18.0.7 > 198.51.100.9 echo-request id 7, ttl 63, 84 bytes"
            ),
            "{t}"
        );
        assert!(
            t.contains("lookup      session created, mapping created"),
            "{t}"
        );
        assert!(
            t.contains("after       icmp 203.0.113.1 > 198.51.100.9"),
            "{t}"
        );
        assert!(t.contains("Packet 2 at +1.500000 s"), "{t}");
        assert!(
            t.contains("udp 198.51.100.9:53 > 203.0.113.1:4000, ttl 63"),
            "{t}"
        );
        assert!(
            t.contains("verdict     dropped: no_mapping\n              Inbound to a pool"),
            "{t}"
        );
        assert!(t.contains("2 packets traced\n"), "{t}");
        assert!(!t.contains("fewer than"), "{t}");
        assert!(trace_text(&[], 3, 4).contains("fewer than 3: no more matched within 4 s"));
    }
}
