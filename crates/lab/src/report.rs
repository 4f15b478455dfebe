//! Reports from results.json: a printed table, report.md, report.html and SVG plots.
//!
//! Plots are SVG from plotters' SVG backend: text is emitted as SVG `<text>` and laid out by the
//! browser, so no font files are needed. Every number in the tables is the median over
//! repetitions with [min..max] when they differ.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use plotters::prelude::*;

use crate::results::{Ceiling, Experiment, Row, RunResults};
use crate::stats::Spread;

/// A table column: metric key and header.
type Col = (&'static str, &'static str);

/// The columns an experiment's table shows.
pub fn columns(exp: &str) -> Vec<Col> {
    match exp {
        "throughput" => vec![
            ("throughput_pps", "throughput (pps)"),
            ("throughput_mbps", "Mb/s"),
            ("ceiling_pct", "% of tester ceiling"),
            ("latency_p50_us", "latency p50 (us)"),
            ("latency_p99_us", "p99 (us)"),
            ("dut_busy_pct", "device CPU %"),
            ("dut_ns_per_pkt", "DUT ns/pkt"),
        ],
        "scale-cores" => vec![
            ("queues", "queues/port"),
            ("workers", "xlat workers"),
            ("throughput_pps", "throughput (pps)"),
            ("speedup", "x 1 core"),
            ("ceiling_pct", "% of tester ceiling"),
            ("dut_busy_pct", "device CPU % (mean of its cores)"),
            ("dut_ns_per_pkt", "DUT ns/pkt"),
            ("busiest_queue_pct", "busiest queue %"),
            ("latency_p50_us", "latency p50 (us)"),
            ("dut_steal_pct", "steal %"),
        ],
        "cost" => vec![
            ("offered_pps", "offered (pps)"),
            ("loss_pct", "loss %"),
            ("latency_p50_us", "latency p50 (us)"),
            ("latency_p99_us", "p99 (us)"),
            ("dut_busy_pct", "device CPU %"),
            ("dut_ns_per_pkt", "DUT ns/pkt"),
            ("ns_ratio", "x forward4/pkt"),
            ("proc_ns_per_pkt", "process ns/pkt"),
            ("dut_other_pct", "other load %"),
            ("dut_steal_pct", "steal %"),
            ("rounds", "rounds"),
        ],
        "loss-vs-load" => vec![
            ("offered_pps", "offered (pps)"),
            ("rx_mbps", "received Mb/s"),
            ("loss_pct", "loss %"),
            ("latency_mean_us", "latency mean (us)"),
            ("dut_busy_pct", "device CPU %"),
        ],
        "latency-vs-load" => vec![
            ("offered_pps", "offered (pps)"),
            ("latency_mean_us", "latency mean (us)"),
            ("latency_p50_us", "p50 (us)"),
            ("latency_p99_us", "p99 (us)"),
            ("latency_max_us", "max (us)"),
            ("loss_pct", "loss %"),
        ],
        "latency-vs-sessions" => vec![
            ("device_sessions", "table size"),
            ("offered_pps", "offered (pps)"),
            ("latency_mean_us", "latency mean (us)"),
            ("latency_p50_us", "p50 (us)"),
            ("latency_p99_us", "p99 (us)"),
            ("loss_pct", "loss %"),
        ],
        "memory-per-session" => vec![
            ("device_sessions", "table size"),
            ("memory_delta_bytes", "memory - baseline (B)"),
            ("bytes_per_session", "bytes/session"),
        ],
        "cpu" | "cpu-return" => vec![
            ("offered_pps", "offered (pps)"),
            ("dut_busy_pct", "device CPU %"),
            ("dut_softirq_pct", "softirq %"),
            ("dut_ns_per_pkt", "DUT ns/pkt"),
            ("proc_ns_per_pkt", "process ns/pkt"),
            ("cores_ns_per_pkt", "tester+DUT ns/pkt"),
            ("tester_alone_ns_per_pkt", "tester alone ns/pkt"),
            ("diff_ns_per_pkt", "by difference ns/pkt"),
            ("dut_other_pct", "other load %"),
            ("loss_pct", "loss %"),
        ],
        "setup-rate" => vec![("setup_rate_per_s", "new sessions/s")],
        "slow-path" => vec![("measured", "measured"), ("met", "met (1 = yes)")],
        "teardown-rate" => vec![
            ("sessions_filled", "table after phase 1"),
            ("teardown_rate_per_s", "connections torn down/s"),
            ("teardown_ms", "tear-down (ms)"),
            ("answer_ms", "daemon's answer (ms)"),
            ("empty_ms", "same, empty table (ms)"),
            ("sessions_after", "table after"),
            ("validated", "repeats validated"),
        ],
        "setup-rate-table" => vec![
            ("setup_rate_per_s", "connections established/s"),
            ("fill_s", "N / rate (s)"),
            ("invalid_trials", "trials: all arrived, table not N"),
        ],
        "throughput-established" => vec![
            ("sessions_filled", "table after phase 1"),
            ("throughput_pps", "throughput (pps)"),
            ("ceiling_pct", "% of tester ceiling"),
            ("sessions_after", "table after phase 2"),
            ("validated", "validated (1 = yes)"),
        ],
        "churn" => vec![
            ("offered_pps", "offered (pps)"),
            ("est_lost", "established lost"),
            ("est_loss_pct", "established loss %"),
            ("est_latency_p50_us", "est. p50 (us)"),
            ("est_latency_p99_us", "est. p99 (us)"),
            ("new_rx_per_s", "new flows delivered/s"),
            ("new_loss_pct", "new loss %"),
            ("new_latency_p50_us", "new p50 (us)"),
            ("est_in_xdp_pct", "established in XDP %"),
            ("recipes_per_call", "recipes per bpf call"),
            ("tx_refused", "refused at DUT port"),
            ("dut_rx_dropped", "dropped at DUT port"),
            ("afxdp_drops", "AF_XDP socket drops"),
            ("sender_max_burst", "tester's largest backlog"),
            ("sender_slipped", "tester slipped"),
            ("dut_busy_pct", "device CPU %"),
            ("dut_ns_per_pkt", "DUT ns/pkt"),
        ],
        "tcp" => vec![
            ("tcp_mbps", "TCP Mb/s"),
            ("retransmits", "retransmits"),
            ("dut_busy_pct", "device CPU %"),
            ("dut_ns_per_byte", "DUT ns/byte"),
            ("xdp_redirected", "packets in XDP"),
        ],
        "owd" => vec![("owd_us", "one-way delay (us)"), ("lost_runs", "lost runs")],
        "scale-out-distribution" => vec![
            ("subscribers", "subscribers"),
            ("subscribers_pct", "% of subscribers"),
            ("streams", "streams"),
            ("packets", "packets at server"),
            ("packets_pct", "% of packets"),
            ("buckets", "buckets"),
            ("xlat_ns_per_pkt", "xlat CPU ns/pkt"),
        ],
        "scale-out-events" => vec![
            ("routing_ms", "route change at outside router (ms)"),
            ("setup_ms", "node set up (ms)"),
            ("group_ms", "inside group changed (ms)"),
            ("moved", "subscribers moved"),
            ("moved_pct", "moved %"),
            ("moved_other", "moved, not the node's"),
            ("recover_ms", "moved work again after (ms)"),
            ("moved_flows_lost", "moved streams' lost pkts"),
            ("other_flows_lost", "other streams' lost pkts"),
            ("other_flows_sent", "other streams' pkts sent"),
            ("late_subscribers", "new subscribers"),
            ("late_on_new_node", "new ones on the added node"),
            ("late_flows_lost", "new ones' lost pkts"),
        ],
        "scale-out-load" => vec![
            ("offered_pps", "offered (pps)"),
            ("carried_pps", "carried (pps)"),
            ("replied_pct", "echoed %"),
            ("xlat_cpu_pct", "xlat CPU % of a core"),
            ("xlat_ns_per_pkt", "xlat CPU ns/pkt"),
            ("capacity_pps_projected", "projected pps, 1 core per node"),
        ],
        "failover" => vec![
            ("established", "established flows"),
            ("standby_entries", "standby held"),
            ("established_lost", "established lost"),
            ("established_stopped", "stopped"),
            ("established_remapped", "remapped"),
            ("failover_ms", "failover (ms)"),
            ("vrrp_ms", "VRRP part (ms)"),
            ("takeover_ms", "gateway part (ms)"),
            ("udp_lost_after", "UDP datagrams lost"),
            ("tcp_resets", "TCP resets"),
            ("download_ok", "download ok"),
            ("iperf3_ok", "iperf3 ok"),
            ("new_arrived_after", "new after failure: through"),
            ("new_sent_after", "new after failure: sent"),
        ],
        "failover-sync" => vec![
            ("new_per_s", "new sessions/s sent"),
            ("sync_bytes_per_event", "sync bytes/event"),
            ("sync_pps", "sync pkts/s"),
            ("sync_link_bytes_per_s", "sync link B/s"),
            ("sync_cpu_pct", "sync CPU % of a core"),
            ("sync_cpu_pct_of_datapath", "sync CPU % of data path"),
            ("events_dropped", "events dropped"),
            ("datagrams_resent", "datagrams resent"),
        ],
        "reload" => vec![
            ("offered_pps", "offered (pps)"),
            ("reloads", "reloads applied"),
            ("sent", "sent"),
            ("received", "received"),
            ("lost", "lost"),
            ("loss_pct", "loss %"),
            ("reload_p50_ms", "reload p50 (ms)"),
            ("reload_p99_ms", "p99 (ms)"),
            ("reload_max_ms", "max (ms)"),
            ("baseline_lost", "baseline lost"),
            ("baseline_loss_pct", "baseline loss %"),
            ("sessions_ended", "sessions ended"),
        ],
        "rtt" => vec![
            ("rtt_ms", "RTT (ms)"),
            ("rtt_mean_ms", "mean RTT (ms)"),
            ("loss_pct", "loss %"),
        ],
        "dns64" => vec![
            ("qps", "queries/s"),
            ("run_secs", "pass (s)"),
            ("latency_mean_ms", "mean latency (ms)"),
            ("latency_max_ms", "max latency (ms)"),
            ("lost_pct", "lost %"),
            ("noerror_pct", "NOERROR %"),
            ("dut_busy_pct", "device CPU %"),
            ("tester_busy_pct", "tester CPU %"),
            ("answers_checked", "answers checked"),
            ("answers_wrong", "wrong"),
            ("requests_per_s", "requests/s"),
            ("failed_requests", "failed"),
        ],
        "http" => vec![
            ("requests_per_s", "requests/s"),
            ("transfer_kbytes_s", "transfer KB/s"),
            ("time_per_request_ms", "time/request (ms)"),
            ("failed_requests", "failed"),
            ("p99_ms", "p99 (ms)"),
            ("longest_ms", "longest (ms)"),
            ("connect_max_ms", "slowest connect (ms)"),
            ("dut_busy_pct", "device CPU %"),
            ("tester_busy_pct", "tester CPU %"),
        ],
        _ => vec![],
    }
}

/// The plots an experiment gets: (metric, y label, log x).
pub fn plots(exp: &str) -> Vec<(&'static str, &'static str, bool)> {
    match exp {
        "throughput" => vec![
            ("throughput_pps", "throughput (pps)", false),
            ("throughput_mbps", "throughput (Mb/s)", false),
        ],
        "loss-vs-load" => vec![
            ("loss_pct", "loss (%)", false),
            ("rx_mbps", "received (Mb/s)", false),
        ],
        "latency-vs-load" => vec![
            ("latency_mean_us", "mean latency (us)", false),
            ("latency_p99_us", "p99 latency (us)", false),
        ],
        "latency-vs-sessions" => vec![("latency_mean_us", "mean latency (us)", true)],
        "memory-per-session" => vec![("memory_delta_bytes", "memory - baseline (bytes)", true)],
        "cpu" | "cpu-return" => vec![("dut_ns_per_pkt", "DUT CPU ns per packet", true)],
        "teardown-rate" => vec![(
            "teardown_rate_per_s",
            "connections torn down per second",
            true,
        )],
        "throughput-established" => vec![("throughput_pps", "throughput (pps)", true)],
        "setup-rate-table" => vec![(
            "setup_rate_per_s",
            "connections established per second",
            true,
        )],
        "scale-cores" => vec![
            ("throughput_pps", "throughput (pps)", false),
            ("dut_ns_per_pkt", "DUT CPU ns per packet", false),
        ],
        "owd" => vec![("owd_us", "one-way delay (us)", false)],
        "churn" => vec![
            ("new_rx_per_s", "new flows delivered per second", false),
            ("est_loss_pct", "established-flow loss (%)", false),
        ],
        _ => vec![],
    }
}

/// Formats a number for a table: thousands grouped, fewer decimals as it grows.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 1000.0 {
        let r = v.round() as i64;
        let s = r.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, ch) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(ch);
        }
        if r < 0 {
            out.insert(0, '-');
        }
        out
    } else if v.fract() == 0.0 || a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.3}")
    }
}

/// A cell: median, and [min..max] when repetitions differ.
pub fn cell(s: Option<Spread>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.n == 0 => "-".into(),
        Some(s) if s.n > 1 && num(s.min) != num(s.max) => {
            format!("{} [{}..{}]", num(s.median), num(s.min), num(s.max))
        }
        Some(s) => num(s.median),
    }
}

fn header(e: &Experiment) -> Vec<String> {
    let what = match e.name.as_str() {
        "http" => "ab run",
        "rtt" => "probe",
        "dns64" => "case",
        "slow-path" => "target",
        _ => "frame",
    };
    let mut h = vec!["device".to_string(), what.to_string()];
    if let Some(x) = &e.x_label {
        h.push(x.clone());
    }
    h.extend(columns(&e.name).iter().map(|c| c.1.to_string()));
    h
}

fn row_cells(e: &Experiment, r: &Row) -> Vec<String> {
    let mut v = vec![
        format!("{}{}", r.device, if r.tester_limited { " *" } else { "" }),
        size_cell(&e.name, &r.size),
    ];
    if e.x_label.is_some() {
        v.push(r.x.map(num).unwrap_or_else(|| "-".into()));
    }
    v.extend(columns(&e.name).iter().map(|c| cell(r.metric(c.0))));
    v
}

/// A row's size in its experiment's words: http's is its requests per run, not bytes.
fn size_cell(exp: &str, s: &str) -> String {
    if exp == "http" && s.parse::<f64>().is_ok() {
        format!("{s} requests")
    } else {
        size_text(s)
    }
}

fn size_text(s: &str) -> String {
    if s == "imix" {
        "IMIX".into()
    } else if s.parse::<f64>().is_err() {
        s.into()
    } else {
        format!("{s} B")
    }
}

/// A plain-text table with aligned columns.
pub fn text_table(head: &[String], rows: &[Vec<String>]) -> String {
    let n = head.len();
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate().take(n) {
            let pad = w[i] - c.chars().count();
            if i == 0 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str("  ");
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head);
    out.push_str(&line(&w.iter().map(|&x| "-".repeat(x)).collect::<Vec<_>>()));
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

fn md_table(head: &[String], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n", head.join(" | "));
    s.push_str(&format!("|{}\n", "---|".repeat(head.len())));
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn html_table(head: &[String], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table>\n<tr>");
    for h in head {
        let _ = write!(s, "<th>{}</th>", html_escape(h));
    }
    s.push_str("</tr>\n");
    for r in rows {
        s.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let cls = if i < 2 { "" } else { " class=\"n\"" };
            let _ = write!(s, "<td{cls}>{}</td>", html_escape(c));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
    s
}

fn ceiling_table(r: &RunResults) -> (Vec<String>, Vec<Vec<String>>) {
    let head = vec![
        "frame".to_string(),
        "IP".to_string(),
        "loss-free (pps)".to_string(),
        "Mb/s".to_string(),
        "sender alone (pps)".to_string(),
    ];
    let rows = r
        .ceilings
        .iter()
        .map(|c| {
            let mean = c.trials.first().map(|t| t.mean_frame).unwrap_or(0.0);
            vec![
                size_text(&c.size),
                if c.v6 { "IPv6" } else { "IPv4" }.to_string(),
                num(c.pps),
                num(c.pps * mean * 8.0 / 1e6),
                num(c.send_max_pps),
            ]
        })
        .collect();
    (head, rows)
}

/// The printed summary: ceilings and each experiment's table.
pub fn text(r: &RunResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "xlat lab: {} ({}; {:.0} s)",
        r.name, r.started_utc, r.wall_secs
    );
    let _ = writeln!(s, "where: {}", r.placement);
    if !r.ceilings.is_empty() {
        let (h, rows) = ceiling_table(r);
        let _ = writeln!(s, "\nTester ceiling (A wired straight to D, no DUT)");
        s.push_str(&text_table(&h, &rows));
    }
    for e in &r.experiments {
        let _ = writeln!(s, "\n{}", e.title);
        let rows: Vec<Vec<String>> = e.rows.iter().map(|x| row_cells(e, x)).collect();
        s.push_str(&text_table(&header(e), &rows));
    }
    s.push_str(&crate::significance::text(r));
    let beside = papers_beside(r);
    if !beside.is_empty() {
        let _ = writeln!(s, "\nBeside the published figures");
        for c in &beside {
            let _ = writeln!(s, "{}", c.line());
        }
    }
    if !r.conclusions.is_empty() {
        let _ = writeln!(s, "\nConclusions (median ratio over the rounds [min..max])");
        for c in &r.conclusions {
            let _ = writeln!(s, "{c}");
        }
    }
    let notes = all_notes(r);
    if !notes.is_empty() {
        s.push('\n');
        for n in notes {
            let _ = writeln!(s, "note: {n}");
        }
    }
    if let Some(i) = &r.incomplete {
        let _ = writeln!(s, "\nINCOMPLETE: {i}");
    }
    s
}

fn all_notes(r: &RunResults) -> Vec<String> {
    let mut v: Vec<String> = r.notes.clone();
    let mut limited = false;
    for e in &r.experiments {
        for row in &e.rows {
            if row.tester_limited {
                limited = true;
            }
            for n in &row.notes {
                let s = format!(
                    "{} {} ({}): {n}",
                    e.name,
                    row.device,
                    size_cell(&e.name, &row.size)
                );
                if !v.contains(&s)
                    && !n.starts_with("nf_conntrack_count")
                    && !n.starts_with("VmRSS")
                {
                    v.push(s);
                }
            }
        }
    }
    if limited {
        v.push("* = the tester, not the device, was the limit for that row".into());
    }
    v
}

/// Numeric x for a frame size label (IMIX at its mean).
fn size_x(s: &str) -> f64 {
    if s == "imix" {
        crate::packet::SizeMix::Imix.mean(false)
    } else {
        s.parse().unwrap_or(0.0)
    }
}

/// One SVG line plot: series of (x, y) points with names.
pub fn svg_plot(
    title: &str,
    x_label: &str,
    y_label: &str,
    log_x: bool,
    legend: SeriesLabelPosition,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<String> {
    let mut out = String::new();
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
    if pts.is_empty() {
        return Ok(out);
    }
    let tx = |x: f64| if log_x { (x.max(1.0)).log10() } else { x };
    let (mut x0, mut x1) = pts.iter().fold((f64::MAX, f64::MIN), |a, p| {
        (a.0.min(tx(p.0)), a.1.max(tx(p.0)))
    });
    if x1 <= x0 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    let y1 = pts.iter().fold(0.0f64, |a, p| a.max(p.1)) * 1.1;
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 };
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    {
        let root = SVGBackend::with_string(&mut out, (720, 420)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        let xl = if log_x {
            format!("{x_label} (log10)")
        } else {
            x_label.to_string()
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        chart
            .configure_mesh()
            .x_desc(xl)
            .y_desc(y_label)
            .y_label_formatter(&|v| num(*v))
            .x_label_formatter(&|v| if log_x { num(10f64.powf(*v)) } else { num(*v) })
            .draw()
            .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        for (i, (name, p)) in series.iter().enumerate() {
            // The tester's ceiling is a wide pale band under the devices' lines.
            let ceiling = name.starts_with("tester ceiling");
            let (c, w) = if ceiling {
                (RGBColor(200, 200, 200), 8)
            } else {
                (colors[i % colors.len()], 2)
            };
            let data: Vec<(f64, f64)> = p.iter().map(|&(x, y)| (tx(x), y)).collect();
            chart
                .draw_series(LineSeries::new(data.clone(), c.stroke_width(w)))
                .map_err(|e| anyhow::anyhow!("plot: {e}"))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(w))
                });
            chart
                .draw_series(
                    data.iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, c.filled())),
                )
                .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(legend)
            .draw()
            .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    }
    Ok(out)
}

/// The plots of one experiment: (file name, title, svg).
pub fn experiment_plots(
    e: &Experiment,
    ceilings: &[Ceiling],
) -> Result<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    for (metric, ylab, log_x) in plots(&e.name) {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        // Throughput plots carry the tester's ceiling: a device on that line was not measured.
        if e.name == "throughput" {
            for v6 in [false, true] {
                let mut pts: Vec<(f64, f64)> = ceilings
                    .iter()
                    .filter(|c| c.v6 == v6)
                    .map(|c| {
                        let mean = c.trials.first().map(|t| t.mean_frame).unwrap_or(0.0);
                        let y = if metric == "throughput_mbps" {
                            c.pps * mean * 8.0 / 1e6
                        } else {
                            c.pps
                        };
                        (size_x(&c.size), y)
                    })
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                if !pts.is_empty() {
                    let name = if v6 {
                        "tester ceiling (IPv6)"
                    } else {
                        "tester ceiling"
                    };
                    series.push((name.to_string(), pts));
                }
            }
        }
        for r in &e.rows {
            let Some(y) = r.metric(metric) else { continue };
            let (name, x) = match e.x_label {
                Some(_) => (
                    format!("{} {}", r.device, size_text(&r.size)),
                    r.x.unwrap_or(0.0),
                ),
                None => (r.device.clone(), size_x(&r.size)),
            };
            match series.iter_mut().find(|s| s.0 == name) {
                Some(s) => s.1.push((x, y.median)),
                None => series.push((name, vec![(x, y.median)])),
            }
        }
        for s in &mut series {
            s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let x_label = e
            .x_label
            .clone()
            .unwrap_or_else(|| "frame size (bytes)".into());
        let title = format!("{}: {ylab}", e.title);
        let legend = if e.name == "throughput" {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperRight
        };
        let svg = svg_plot(&title, &x_label, ylab, log_x, legend, &series)?;
        if !svg.is_empty() {
            out.push((format!("{}-{}.svg", e.name, metric), title, svg));
        }
    }
    Ok(out)
}

/// Writes report.md, report.html and the SVG plots into `dir`; returns the files written.
pub fn write(dir: &Path, r: &RunResults) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut md = String::new();
    let mut html = String::new();
    let _ = writeln!(md, "# xlat lab: {}\n", r.name);
    let _ = writeln!(
        html,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>xlat lab: {name}</title>\n<style>\
         body{{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #bbb;padding:3px 8px}}\
         th{{background:#eee}}td.n{{text-align:right;font-variant-numeric:tabular-nums}}\
         .meta{{color:#555;font-size:90%}}svg{{max-width:100%;height:auto}}</style></head><body>\n\
         <h1>xlat lab: {name}</h1>",
        name = html_escape(&r.name)
    );
    let meta = vec![
        format!("Started {} (UTC), {:.0} s.", r.started_utc, r.wall_secs),
        format!("Command: `{}`", r.command_line.join(" ")),
        format!(
            "Machine: {} ({} CPUs, {} MiB), Linux {}.",
            r.machine.cpu_model,
            r.machine.cpus,
            r.machine.mem_total_kib / 1024,
            r.machine.kernel
        ),
        format!("Where the work ran: {}.", r.placement),
        format!(
            "Settings: {:.1} s trials, {} repetition(s), loss threshold {}%, {} flows, sender coalescing {:.0} us, {}{}{}.",
            r.settings.trial_secs,
            r.settings.repeats,
            r.settings.loss_threshold * 100.0,
            r.settings.flows,
            r.settings.coalesce_us,
            if r.settings.rx_coalesce_us > 0.0 {
                format!(
                    "receive moderation {:.0} us (--rx-coalesce-us), ",
                    r.settings.rx_coalesce_us
                )
            } else {
                String::new()
            },
            match r.settings.rx.as_str() {
                "xdp" => "frames counted by the XDP receive counter (latency from a sample)",
                "ring" => "every frame received through the packet ring",
                _ => "receive mode not recorded",
            },
            if r.settings.link_bps > 0.0 {
                format!(", nominal link {:.0} Mb/s", r.settings.link_bps / 1e6)
            } else {
                String::new()
            }
        ),
    ];
    for m in &meta {
        let _ = writeln!(md, "- {m}");
    }
    let _ = writeln!(html, "<ul class=\"meta\">");
    for m in &meta {
        let _ = writeln!(html, "<li>{}</li>", html_escape(m).replace('`', ""));
    }
    for (k, v) in &r.versions {
        let _ = writeln!(md, "- {k}: {v}");
        let _ = writeln!(html, "<li>{}: {}</li>", html_escape(k), html_escape(v));
    }
    let _ = writeln!(html, "</ul>");
    if let Some(i) = &r.incomplete {
        let _ = writeln!(md, "\n**Incomplete run:** {i}\n");
        let _ = writeln!(html, "<p><b>Incomplete run:</b> {}</p>", html_escape(i));
    }
    if !r.ceilings.is_empty() {
        let (h, rows) = ceiling_table(r);
        let intro = "The tester wired straight to itself (no device): the highest rate it sends and receives with loss within the threshold. Device results at this rate say more about the tester than the device.";
        let _ = writeln!(
            md,
            "\n## Tester ceiling\n\n{intro}\n\n{}",
            md_table(&h, &rows)
        );
        let _ = writeln!(
            html,
            "<h2>Tester ceiling</h2><p>{intro}</p>{}",
            html_table(&h, &rows)
        );
    }
    for e in &r.experiments {
        let rows: Vec<Vec<String>> = e.rows.iter().map(|x| row_cells(e, x)).collect();
        let h = header(e);
        let _ = writeln!(
            md,
            "\n## {}\n\n{}\n\n{}",
            e.title,
            e.method,
            md_table(&h, &rows)
        );
        let _ = writeln!(
            html,
            "<h2>{}</h2><p>{}</p>{}",
            html_escape(&e.title),
            html_escape(&e.method),
            html_table(&h, &rows)
        );
        for (file, title, svg) in experiment_plots(e, &r.ceilings)? {
            let p = dir.join(&file);
            std::fs::write(&p, &svg).with_context(|| format!("writing {}", p.display()))?;
            files.push(p);
            let _ = writeln!(md, "![{title}]({file})\n");
            let _ = writeln!(html, "<div>{svg}</div>");
        }
    }
    let tests = crate::significance::tests(r);
    if !tests.is_empty() {
        let (h, rows) = crate::significance::table(&tests);
        let (title, intro) = (crate::significance::TITLE, crate::significance::INTRO);
        let _ = writeln!(md, "\n## {title}\n\n{intro}\n\n{}", md_table(&h, &rows));
        let _ = writeln!(
            html,
            "<h2>{}</h2><p>{}</p>{}",
            html_escape(title),
            html_escape(intro),
            html_table(&h, &rows)
        );
    }
    papers_section(dir, r, &mut md, &mut html, &mut files)?;
    if !r.conclusions.is_empty() {
        let _ = writeln!(md, "\n## Conclusions\n");
        let _ = writeln!(html, "<h2>Conclusions</h2><ul>");
        for c in &r.conclusions {
            let _ = writeln!(md, "- {c}");
            let _ = writeln!(html, "<li>{}</li>", html_escape(c));
        }
        let _ = writeln!(html, "</ul>");
    }
    let notes = all_notes(r);
    if !notes.is_empty() {
        let _ = writeln!(md, "\n## Notes\n");
        let _ = writeln!(html, "<h2>Notes</h2><ul>");
        for n in &notes {
            let _ = writeln!(md, "- {n}");
            let _ = writeln!(html, "<li>{}</li>", html_escape(n));
        }
        let _ = writeln!(html, "</ul>");
    }
    let _ = writeln!(
        md,
        "\nRaw samples: results.json. Regenerate with `xlat lab report {}`.",
        dir.display()
    );
    let _ = writeln!(
        html,
        "<p class=\"meta\">Raw samples: results.json.</p></body></html>"
    );
    let pm = dir.join("report.md");
    std::fs::write(&pm, md).with_context(|| format!("writing {}", pm.display()))?;
    let ph = dir.join("report.html");
    std::fs::write(&ph, html).with_context(|| format!("writing {}", ph.display()))?;
    files.push(pm);
    files.push(ph);
    Ok(files)
}

/// The run's study beside its published figures (empty for a run that is not a reproduce).
fn papers_beside(r: &RunResults) -> Vec<crate::papers::Comparison> {
    match crate::papers::load() {
        Ok(p) => crate::papers::compare(&p, r),
        Err(_) => Vec::new(),
    }
}

/// The "Beside the published figures" section of report.md and report.html, with overlays.
fn papers_section(
    dir: &Path,
    r: &RunResults,
    md: &mut String,
    html: &mut String,
    files: &mut Vec<PathBuf>,
) -> Result<()> {
    let Some(study) = crate::papers::study_of(r) else {
        return Ok(());
    };
    let p = crate::papers::load()?;
    let cs = crate::papers::compare(&p, r);
    if cs.is_empty() {
        return Ok(());
    }
    md.push_str(&crate::papers::markdown(&cs, study));
    let _ = writeln!(
        html,
        "<h2>Beside the published figures ({})</h2><p>{}</p>",
        html_escape(&study.to_uppercase()),
        html_escape(crate::papers::INTRO)
    );
    let head: Vec<String> = ["figure", "source", "paper", "here", "verdict"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let rows: Vec<Vec<String>> = cs
        .iter()
        .map(|c| {
            vec![
                c.what.clone(),
                c.source.clone(),
                c.paper.clone(),
                c.ours
                    .iter()
                    .map(|(o, v)| crate::papers::mine(o, *v))
                    .collect::<Vec<_>>()
                    .join("; "),
                c.verdict.text().to_string(),
            ]
        })
        .collect();
    let _ = writeln!(html, "{}", html_table(&head, &rows));
    for (file, title, svg) in crate::papers::plots(&p, r)? {
        let path = dir.join(&file);
        std::fs::write(&path, &svg).with_context(|| format!("writing {}", path.display()))?;
        files.push(path);
        let _ = writeln!(md, "![{title}]({file})\n");
        let _ = writeln!(html, "<div>{svg}</div>");
    }
    Ok(())
}

/// Reads results.json from `dir` (or the file itself) and writes the reports again.
pub fn regenerate(path: &Path) -> Result<(PathBuf, RunResults)> {
    let (dir, file) = if path.is_dir() {
        (path.to_path_buf(), path.join("results.json"))
    } else {
        (
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
            path.to_path_buf(),
        )
    };
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let r: RunResults = serde_json::from_str(&text)
        .with_context(|| format!("{}: not an xlat lab results file", file.display()))?;
    write(&dir, &r)?;
    Ok((dir, r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Ceiling, Experiment, Row};

    fn sample() -> RunResults {
        let mut r = RunResults {
            name: "quick".into(),
            started_utc: "20260101-000000".into(),
            ..RunResults::default()
        };
        r.ceilings.push(Ceiling {
            size: "64".into(),
            pps: 500_000.0,
            send_max_pps: 600_000.0,
            ..Ceiling::default()
        });
        let mut e = Experiment {
            name: "throughput".into(),
            title: "Throughput (RFC 2544)".into(),
            ..Experiment::default()
        };
        for (d, s, v) in [
            ("forward4", "64", 300_000.0),
            ("forward4", "512", 250_000.0),
            ("xlat-nat44", "64", 100_000.0),
        ] {
            let mut row = Row {
                device: d.into(),
                size: s.into(),
                ..Row::default()
            };
            row.metrics
                .insert("throughput_pps".into(), Spread::of(&[v, v * 1.1, v * 0.9]));
            e.rows.push(row);
        }
        e.rows[0].tester_limited = true;
        r.experiments.push(e);
        let mut l = Experiment {
            name: "loss-vs-load".into(),
            title: "Loss".into(),
            x_label: Some("offered load (% of nominal)".into()),
            ..Experiment::default()
        };
        for x in [10.0, 50.0, 100.0] {
            let mut row = Row {
                device: "kernel-nat44".into(),
                size: "imix".into(),
                x: Some(x),
                ..Row::default()
            };
            row.metrics
                .insert("loss_pct".into(), Spread::of(&[x / 10.0]));
            l.rows.push(row);
        }
        r.experiments.push(l);
        r
    }

    #[test]
    fn numbers_format() {
        assert_eq!(num(1234567.4), "1,234,567");
        assert_eq!(num(-1234.0), "-1,234");
        assert_eq!(num(150.4), "150");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(0.12345), "0.123");
        assert_eq!(num(1.0), "1");
        assert_eq!(num(20.0), "20");
        assert_eq!(num(f64::NAN), "-");
        assert_eq!(cell(None), "-");
        assert_eq!(
            cell(Some(Spread::of(&[1.5, 2.5, 3.5]))),
            "2.500 [1.500..3.500]"
        );
        assert_eq!(cell(Some(Spread::of(&[5.0]))), "5");
        assert_eq!(cell(Some(Spread::of(&[2054.2, 2054.4]))), "2,054");
    }

    #[test]
    fn text_table_aligns() {
        let t = text_table(
            &["a".into(), "bb".into()],
            &[
                vec!["xxx".into(), "1".into()],
                vec!["y".into(), "22".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "a    bb");
        assert_eq!(lines[1], "---  --");
        assert_eq!(lines[2], "xxx   1");
        assert_eq!(lines[3], "y    22");
    }

    #[test]
    fn printed_report_has_tables_and_notes() {
        let r = sample();
        let t = text(&r);
        assert!(t.contains("Tester ceiling"));
        assert!(t.contains("forward4 *"));
        assert!(t.contains("300,000 [270,000..330,000]"));
        assert!(t.contains("the tester, not the device, was the limit"));
        assert!(t.contains("IMIX"));
        assert!(!t.contains("Conclusions"));
        let mut r = sample();
        r.conclusions.push(
            "64 B: xlat-nat44 costs 1.42x forward4 per packet [1.31..1.55, 3 rounds].".into(),
        );
        let t = text(&r);
        let at = t.find("Conclusions").unwrap();
        assert!(t[at..].contains("\n64 B: xlat-nat44 costs 1.42x"));
        // Before the notes, after the tables.
        assert!(at > t.find("Throughput").unwrap() && at < t.find("note:").unwrap());
    }

    #[test]
    fn report_files_written_and_regenerated() {
        let dir = std::env::temp_dir().join(format!("xlat-lab-report-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let r = sample();
        std::fs::write(dir.join("results.json"), serde_json::to_string(&r).unwrap()).unwrap();
        let (d, back) = regenerate(&dir).unwrap();
        assert_eq!(d, dir);
        assert_eq!(back.experiments.len(), 2);
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("| device | frame |"));
        assert!(md
            .contains("![Throughput (RFC 2544): throughput (pps)](throughput-throughput_pps.svg)"));
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("<svg"));
        assert!(html.contains("<table>"));
        let tp = std::fs::read_to_string(dir.join("throughput-throughput_pps.svg")).unwrap();
        assert!(tp.contains("tester ceiling"));
        let svg = std::fs::read_to_string(dir.join("loss-vs-load-loss_pct.svg")).unwrap();
        assert!(svg.contains("kernel-nat44 IMIX"));
        assert!(regenerate(&dir.join("nope")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reproduce_report_has_the_papers_section() {
        let dir = std::env::temp_dir().join(format!("xlat-lab-papers-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = sample();
        r.name = "reproduce-s4".into();
        // The sample's loss-vs-load rows are kernel-nat44 at IMIX; give it S4's 64 B sweep.
        for (d, lo, hi) in [
            ("kernel-nat44-heavy", 0.0, 40.0),
            ("kernel-nat44", 0.0, 0.0),
        ] {
            for (x, v) in [(20.0, lo), (100.0, hi)] {
                let mut row = Row {
                    device: d.into(),
                    size: "64".into(),
                    x: Some(x),
                    ..Row::default()
                };
                row.metrics.insert("loss_pct".into(), Spread::of(&[v]));
                r.experiments[1].rows.push(row);
            }
        }
        r.experiments[1].rows.iter_mut().for_each(|row| {
            row.metrics
                .entry("loss_pct".into())
                .or_insert(Spread::of(&[0.0]));
        });
        let files = write(&dir, &r).unwrap();
        assert!(files
            .iter()
            .any(|f| f.ends_with("paper-s4-loss-vs-load.svg")));
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        let at = md.find("## Beside the published figures (S4)").unwrap();
        assert!(md[at..].contains("kernel-nat44-heavy 0 -> 40 % from 20 to 100"));
        assert!(md[at..].contains("forward4 not measured in this run"));
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("Beside the published figures (S4)"));
        assert!(text(&r).contains("s4-loss-vs-load: paper:"));
        // Not a reproduce run: no section.
        r.name = "quick".into();
        assert!(!text(&r).contains("Beside the published figures"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn http_grid_rows_and_the_t_test_in_every_report() {
        let dir = std::env::temp_dir().join(format!("xlat-lab-http-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = sample();
        r.name = "reproduce-s3".into();
        let mut e = Experiment {
            name: "http".into(),
            title: "HTTP".into(),
            x_label: Some("concurrency".into()),
            ..Experiment::default()
        };
        for (d, v) in [
            ("kernel-nat44", [100.0, 104.0, 102.0]),
            ("tayga-nat64", [80.0, 81.0, 79.5]),
        ] {
            let mut row = Row {
                device: d.into(),
                size: "2000".into(),
                x: Some(300.0),
                ..Row::default()
            };
            row.metrics.insert("requests_per_s".into(), Spread::of(&v));
            row.samples.insert("requests_per_s".into(), v.to_vec());
            e.rows.push(row);
        }
        r.experiments.push(e);
        let t = text(&r);
        // The requests column is a count, not bytes.
        assert!(t.contains("2000 requests") && !t.contains("2000 B"), "{t}");
        assert!(t.contains(crate::significance::TITLE), "{t}");
        assert!(t.contains("2000 requests, 300 at once"), "{t}");
        assert!(t.contains("significant at 5%: tayga-nat64 lower than kernel-nat44"));
        write(&dir, &r).unwrap();
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains(&format!("## {}", crate::significance::TITLE)));
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("2000 requests, 300 at once"));
        // Regenerated from results.json: the samples survive the round trip.
        let back: RunResults = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(
            crate::significance::tests(&back),
            crate::significance::tests(&r)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_plot_is_empty() {
        assert!(
            svg_plot("t", "x", "y", false, SeriesLabelPosition::UpperRight, &[])
                .unwrap()
                .is_empty()
        );
    }
}
