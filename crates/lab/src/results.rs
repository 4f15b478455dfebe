//! results.json: everything a run measured (every trial's raw numbers), the machine, versions,
//! settings and the command line. The report is generated from this file alone.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::{Search, Spread};
use crate::tester::Trial;

pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub mem_total_kib: u64,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_total_kib = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Machine {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            cpu_model,
            cpus: crate::sys::ncpus(),
            mem_total_kib,
        }
    }
}

/// Settings of a run, as given or defaulted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Settings {
    pub devices: Vec<String>,
    pub sizes: Vec<String>,
    pub trial_secs: f64,
    pub repeats: usize,
    /// Loss threshold of the throughput search, as a fraction.
    pub loss_threshold: f64,
    pub flows: u32,
    /// Nominal link rate (bits/s) for "percent of load"; 0 = the tester's ceiling.
    pub link_bps: f64,
    pub resolution: f64,
    /// Sender-side interrupt moderation, microseconds.
    #[serde(default)]
    pub coalesce_us: f64,
    /// How the tester received: "ring" (every frame through the packet ring) or "xdp" (the
    /// XDP receive counter, the ring sees a sample); "" in runs before this setting existed.
    #[serde(default)]
    pub rx: String,
    /// How the tester's frames reached the DUT: "skb" or "xdp" (`--ingress`); "" in runs
    /// before this setting existed (skb).
    #[serde(default)]
    pub ingress: String,
    /// The tester's receive moderation, microseconds (`--rx-coalesce-us`); 0: off, and in
    /// runs before this setting existed.
    #[serde(default)]
    pub rx_coalesce_us: f64,
}

/// The tester's own ceiling (A wired straight to D) for one frame size.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ceiling {
    pub size: String,
    pub v6: bool,
    /// Highest loss-free (within threshold) rate, pps.
    pub pps: f64,
    /// What the sender alone reached with no pacing, pps.
    pub send_max_pps: f64,
    pub search: Option<Search>,
    pub trials: Vec<Trial>,
}

/// One measured point: a device, a frame size, an x value (load, sessions...), metrics as
/// spreads over repetitions, and the raw trials behind them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    pub device: String,
    pub size: String,
    /// The x value (offered load %, sessions, ...) when the experiment sweeps one.
    pub x: Option<f64>,
    pub metrics: BTreeMap<String, Spread>,
    /// Every repetition's value of a metric, where a test needs more than the spread (the
    /// significance of a difference between devices: [`crate::significance`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub samples: BTreeMap<String, Vec<f64>>,
    /// The tester, not the device, set this number (the device passed the tester's ceiling,
    /// or the tester could not offer the asked load).
    pub tester_limited: bool,
    pub notes: Vec<String>,
    pub searches: Vec<Search>,
    pub trials: Vec<Trial>,
}

impl Row {
    pub fn metric(&self, k: &str) -> Option<Spread> {
        self.metrics.get(k).copied()
    }
}

/// One experiment's rows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Experiment {
    pub name: String,
    pub title: String,
    /// What x means ("offered load (% of nominal)", "sessions", ...), if any.
    pub x_label: Option<String>,
    pub method: String,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunResults {
    pub schema: u32,
    pub name: String,
    pub command_line: Vec<String>,
    pub started_utc: String,
    pub wall_secs: f64,
    pub machine: Machine,
    pub versions: BTreeMap<String, String>,
    pub placement: String,
    pub settings: Settings,
    pub ceilings: Vec<Ceiling>,
    pub experiments: Vec<Experiment>,
    pub notes: Vec<String>,
    /// The run's conclusions, one sentence per comparison with its uncertainty (quick).
    #[serde(default)]
    pub conclusions: Vec<String>,
    /// Set when the run stopped early (Ctrl-C or an error): what was measured is kept.
    pub incomplete: Option<String>,
}
