//! What the failover run's records say: flows lost, stopped or remapped, the sync samples,
//! and the parsers of conntrackd's and iperf3's output.

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------
// Analysis (pure: unit tested).

/// What the flows say about one failure at time `kill` (the record's clock).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowOutcome {
    /// Flows older than 1 s at the failure.
    pub established: usize,
    /// Of those, flows lost: stopped or remapped (the session the server knew, its outside
    /// endpoint, sends nothing more either way).
    pub established_lost: usize,
    /// Flows with no reply to anything sent in the last second of sending.
    pub established_stopped: usize,
    /// Flows the server saw from another outside endpoint after the failure.
    pub established_remapped: usize,
    /// The longest silence of a flow across the failure, ms: the largest gap between two
    /// consecutive replies it received from half a second before the failure on (flows not
    /// lost; includes up to one sending interval).
    pub failover_ms: Option<f64>,
    /// Median of the same.
    pub failover_ms_median: Option<f64>,
    /// Datagrams sent after the failure without a reply, and sent after it.
    pub lost_after: u64,
    pub sent_after: u64,
}

/// Judges the flows' records for a failure at `kill`.
pub fn analyse(flows: &[FlowRecord], kill: f64) -> FlowOutcome {
    let mut o = FlowOutcome::default();
    let mut gaps = Vec::new();
    for r in flows {
        let Some(first) = r.sent.first() else {
            continue;
        };
        if kill - first < 1.0 {
            continue;
        }
        o.established += 1;
        let end = r.sent.last().copied().unwrap_or(0.0);
        let mut tail_replied = false;
        let mut got: Vec<f64> = Vec::new();
        for (s, rep) in r.sent.iter().zip(&r.replied) {
            if *s >= kill {
                o.sent_after += 1;
                if rep.is_none() {
                    o.lost_after += 1;
                }
            }
            if let Some(t) = rep {
                if *t >= kill - 0.5 {
                    got.push(*t);
                }
            }
            if *s > end - 1.0 && rep.is_some() {
                tail_replied = true;
            }
        }
        let before = r.sources.iter().rev().find(|s| s.0 < kill).map(|s| &s.1);
        let remapped = r
            .sources
            .iter()
            .any(|s| s.0 >= kill && Some(&s.1) != before);
        if remapped {
            o.established_remapped += 1;
        }
        if !tail_replied {
            o.established_stopped += 1;
        } else {
            got.sort_by(|a, b| a.total_cmp(b));
            let gap = got.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
            gaps.push(gap * 1e3);
        }
        if remapped || !tail_replied {
            o.established_lost += 1;
        }
    }
    if !gaps.is_empty() {
        o.failover_ms = gaps.iter().copied().reduce(f64::max);
        o.failover_ms_median = Some(Spread::of(&gaps).median);
    }
    o
}

/// Sync cost at one new-session rate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SyncSample {
    /// The asked rate, and what was sent.
    pub new_rate: f64,
    pub new_per_s: f64,
    /// Session events the device said it sent (xlat), per second.
    pub events_per_s: Option<f64>,
    /// Sync payload bytes per session event: xlat's own counters; the kernel device: UDP
    /// payload on the sync link per new session.
    pub bytes_per_event: Option<f64>,
    /// Packets and bytes per second on the sync link (the active's transmit side, frames).
    pub link_pps: f64,
    pub link_bytes_per_s: f64,
    /// CPU of the sync work on the active, % of one CPU.
    pub cpu_pct: f64,
    /// ... and as % of the active's data-path CPU (xlat only).
    pub cpu_pct_of_datapath: Option<f64>,
    /// xlat's events_dropped in the window.
    pub events_dropped: Option<u64>,
    /// xlat's datagrams_sent and datagrams_resent in the window (bytes_sent counts both).
    pub datagrams_sent: Option<u64>,
    pub datagrams_resent: Option<u64>,
}

/// One device/variant run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outcome {
    pub device: String,
    pub variant: String,
    pub flows: FlowOutcome,
    /// keepalived's part: failure to the start of b's notify_master hook, ms.
    pub vrrp_ms: Option<f64>,
    /// The device's part: b's notify_master hook (xlat sync role active / conntrackd -c ...), ms.
    pub takeover_ms: Option<f64>,
    pub tcp_resets: u64,
    pub download_ok: bool,
    pub download_bytes: u64,
    pub iperf_ok: Option<bool>,
    pub iperf_retransmits: Option<u64>,
    pub new_sent: u64,
    pub new_arrived: u64,
    /// New sessions sent after the failure, and how many of them reached the server.
    pub new_sent_after: u64,
    pub new_arrived_after: u64,
    /// Sessions the standby held as copies just before the failure (xlat: installed minus
    /// removed; conntrackd: its external cache's active entries).
    pub standby_entries: Option<u64>,
    pub sync: Vec<SyncSample>,
    pub notes: Vec<String>,
}

/// The external cache's "current active connections" in `conntrackd -s` output.
pub fn conntrackd_external_active(stats: &str) -> Option<u64> {
    let mut section = "";
    for l in stats.lines() {
        let l = l.trim();
        if l.ends_with(':') {
            section = l;
        } else if section == "cache external:" {
            if let Some(v) = l.strip_prefix("current active connections:") {
                return v.trim().parse().ok();
            }
        }
    }
    None
}

/// (ok, received bytes, retransmits) from iperf3's --json output; None when unreadable.
pub fn parse_iperf(json: &str) -> Option<(bool, u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    if v.get("error").is_some() {
        return Some((false, 0, 0));
    }
    let end = v.get("end")?;
    let rx = end["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let re = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    Some((rx > 0, rx, re))
}
