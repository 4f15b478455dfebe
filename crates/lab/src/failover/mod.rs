//! `xlat lab run failover`: a pair of NAT44 gateways, one active and one standby, loses the
//! active while established flows and new ones cross it (issue 23, docs/FAILOVER.md).
//!
//! ```text
//!  cli 198.18.0.7 ---[swi bridge]--- a 198.18.0.2 / b 198.18.0.3   (VIP 198.18.0.1)
//!                                    a 198.18.1.2 / b 198.18.1.3   (VIP 198.18.1.1)
//!  srv 198.18.1.10 --[swo bridge]---/          pool 198.19.0.100 routed via 198.18.1.1
//!                  sync link: a 198.18.254.1 --- b 198.18.254.2 (its own veth)
//! ```
//!
//! keepalived (VRRP v3, 100 ms adverts, unicast over the inside LAN) runs in both gateways and
//! owns the two virtual addresses; its notify hook is a script the lab writes, which stamps
//! the time and then runs the device's takeover. Three devices are measured the same way:
//!
//! - `xlat-nat44`: `xlat run` with `[sync]` over the sync link; the hook runs
//!   `xlat sync role active|standby`.
//! - `kernel-nat44`: nftables `snat to` the pool address, conntrackd (FTFW over the sync link)
//!   keeping the standby's external cache, and the hook of conntrackd's primary-backup.sh:
//!   `-c` commit, `-f` flush, `-R` resync, `-B` bulk send when it becomes master; `-t`
//!   shorten timers and `-n` request a resync when it becomes backup.
//! - `kernel-nat44-random`: the same with `snat ... random`, so a gateway without the session
//!   picks another outside port.
//!
//! Workload: N UDP flows (distinct source ports, a numbered datagram per flow every interval,
//! echoed by the server), a rate-limited HTTP download (sha256 checked) and an iperf3 TCP
//! stream, and new sessions arriving all the time (one datagram each to a new destination
//! port, counted and dropped by the server's firewall). Before the failure the new-session
//! rate steps through `new_rates` and the sync link, the sync counters and the sync CPU are
//! measured at each. Then the active fails: `kill` SIGKILLs its processes and downs its links
//! (a box losing power), `link-down` only downs its links. Every device/variant pair gets a
//! fresh testbed.
//!
//! Files: `configs.rs` (the gateways' configuration texts), `testbed.rs` (namespaces,
//! daemons, the failure), `traffic.rs` (flows, download, new sessions), `analysis.rs` (what
//! the flows' records say), this file (one device and variant, start to end), `report.rs`
//! (tables, results.json, the command).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::results::{Experiment, Machine, Row, RunResults, Settings, SCHEMA};
use crate::stats::Spread;
use crate::sys;
use crate::topo::destroy_ns;

mod analysis;
mod configs;
mod report;
mod testbed;
#[cfg(test)]
mod tests;
mod traffic;

pub use analysis::*;
pub use configs::*;
pub use report::*;
pub use testbed::*;
pub use traffic::*;

use crate::addressing::failover::{CLI, POOL, SRV, VIP_IN, VIP_OUT};
const ECHO_PORT: u16 = 7000;
const HTTP_PORT: u16 = 8080;
const IPERF_PORT: u16 = 5201;
/// New sessions go to destination ports NEW_BASE .. NEW_BASE + NEW_SPAN.
const NEW_BASE: u16 = 20000;
const NEW_SPAN: u16 = 40000;
/// The UDP flows' source ports start here: below 1024, outside xlat's `[nat44] ports`, so
/// xlat chooses their outside ports (the kernel keeps a free one unless `random`), and only a
/// standby that holds the session sends them on from the same outside port.
const FLOW_PORT: u16 = 100;
const SYNC_PORT: u16 = 4790;
const CONNTRACKD_PORT: u16 = 3780;
const KEY: &str = "xlat-lab-failover-shared-key-0123456789";
const MAGIC: [u8; 4] = *b"XFO1";
const PAYLOAD: usize = 32;
pub const MAX_FLOWS: usize = 900;
pub const MAX_NEW_RATE: f64 = 200_000.0;
/// Seconds each new-session rate is measured for.
const SYNC_WINDOW: f64 = 1.0;
/// Source sockets of the new sessions: NEW_SOCKETS x NEW_SPAN distinct 5-tuples before one
/// repeats (more than `[limits] max_sessions`).
const NEW_SOCKETS: usize = 32;

/// The device pair under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dev {
    /// xlat NAT44 with `[sync]`.
    Xlat,
    /// nftables snat, conntrackd FTFW.
    Kernel,
    /// The same with `snat ... random`: the outside port is chosen at random, so a gateway
    /// that does not hold the session picks another one.
    KernelRandom,
}

impl Dev {
    pub fn name(self) -> &'static str {
        match self {
            Dev::Xlat => "xlat-nat44",
            Dev::Kernel => "kernel-nat44",
            Dev::KernelRandom => "kernel-nat44-random",
        }
    }
    /// The kernel's NAT with conntrackd.
    pub fn kernel(self) -> bool {
        self != Dev::Xlat
    }
    pub fn parse(s: &str) -> Result<Dev> {
        match s {
            "xlat-nat44" => Ok(Dev::Xlat),
            "kernel-nat44" => Ok(Dev::Kernel),
            "kernel-nat44-random" => Ok(Dev::KernelRandom),
            _ => bail!(
                "failover: unknown device {s:?}; known: xlat-nat44, kernel-nat44, kernel-nat44-random"
            ),
        }
    }
}

/// How the active fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Variant {
    /// SIGKILL of its processes and its links down: a box losing power.
    Kill,
    /// Its links down, its processes alive.
    LinkDown,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Kill => "kill",
            Variant::LinkDown => "link-down",
        }
    }
    pub fn parse(s: &str) -> Result<Variant> {
        match s {
            "kill" => Ok(Variant::Kill),
            "link-down" => Ok(Variant::LinkDown),
            _ => bail!("failover: unknown variant {s:?}; known: kill, link-down"),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct FailOpts {
    pub devices: Vec<Dev>,
    pub variants: Vec<Variant>,
    /// Established UDP flows.
    pub flows: usize,
    /// Datagrams per second of each flow.
    pub flow_pps: f64,
    /// New sessions per second to measure sync at; the first is kept through the failover.
    pub new_rates: Vec<f64>,
    /// Seconds of traffic after the failure (at least 2).
    pub after: f64,
    /// Download rate limit, bytes/s (the file is sized to outlast the failover).
    pub download_rate: u64,
    /// Run iperf3 beside the download.
    pub iperf: bool,
    pub dir: PathBuf,
    /// The xlat binary; None = [`crate::device::xlat_bin`].
    pub xlat_bin: Option<PathBuf>,
}

impl FailOpts {
    pub fn validate(&self) -> Result<()> {
        if self.devices.is_empty() || self.variants.is_empty() {
            bail!("failover: no device or no variant to run");
        }
        if !(1..=MAX_FLOWS).contains(&self.flows) {
            bail!("--flows: {} is outside 1..={MAX_FLOWS}", self.flows);
        }
        if !(1.0..=1000.0).contains(&self.flow_pps) {
            bail!(
                "--rate: {} datagrams/s per flow is outside 1..=1000",
                self.flow_pps
            );
        }
        if self.new_rates.is_empty()
            || self
                .new_rates
                .iter()
                .any(|r| !(0.0..=MAX_NEW_RATE).contains(r))
        {
            bail!(
                "--new-rates: {:?}: one or more rates in 0..={MAX_NEW_RATE} new sessions/s",
                self.new_rates
            );
        }
        if self.new_rates.len() > 8 {
            bail!("--new-rates: at most 8 rates");
        }
        if !(2.0..=600.0).contains(&self.after) {
            bail!(
                "--duration: {} s after the failure is outside 2..=600",
                self.after
            );
        }
        if !(10_000..=100_000_000).contains(&self.download_rate) {
            bail!(
                "download rate {} B/s is outside 10k..100M",
                self.download_rate
            );
        }
        Ok(())
    }

    /// Seconds from the start of traffic to the failure: a second of warm-up, then a window
    /// per new-session rate, then a second more so every flow is older than a second.
    pub fn before(&self) -> f64 {
        1.0 + self.new_rates.len() as f64 * (SYNC_WINDOW + 0.3) + 1.0
    }
}

// ---------------------------------------------------------------------------------------
// One run.

fn measure_sync(t: &Testbed, tr: &Traffic, rate: f64) -> Result<SyncSample> {
    tr.set_new_rate(rate);
    sys::sleep_interruptible(Duration::from_millis(300));
    let xl = |t: &Testbed| -> Option<serde_json::Value> {
        (t.dev == Dev::Xlat).then(|| t.xlat_sync(0).ok()).flatten()
    };
    let (x0, l0, c0, n0, w0) = (
        xl(t),
        t.sync_tx(0),
        t.cpu_ns(0),
        tr.new_sent(),
        Instant::now(),
    );
    sys::sleep_interruptible(Duration::from_secs_f64(SYNC_WINDOW));
    let (x1, l1, c1, n1) = (xl(t), t.sync_tx(0), t.cpu_ns(0), tr.new_sent());
    let secs = w0.elapsed().as_secs_f64().max(1e-3);
    let new = n1.saturating_sub(n0);
    let d =
        |a: &Option<serde_json::Value>, b: &Option<serde_json::Value>, k: &str| -> Option<u64> {
            let a = a.as_ref()?["counters"][k].as_u64()?;
            let b = b.as_ref()?["counters"][k].as_u64()?;
            Some(b.saturating_sub(a))
        };
    let (lb, lp) = (l1.0.saturating_sub(l0.0), l1.1.saturating_sub(l0.1));
    let ev = d(&x0, &x1, "events_sent");
    let bytes_per_event = match t.dev {
        Dev::Xlat => match (d(&x0, &x1, "bytes_sent"), ev) {
            (Some(b), Some(e)) if e > 0 => Some(b as f64 / e as f64),
            _ => None,
        },
        // Frames minus Ethernet, IPv4 and UDP headers.
        Dev::Kernel | Dev::KernelRandom => {
            (new > 0).then(|| lb.saturating_sub(42 * lp) as f64 / new as f64)
        }
    };
    let cpu = c1.0.saturating_sub(c0.0) as f64;
    let data = match (c0.1, c1.1) {
        (Some(a), Some(b)) if b > a => Some((b - a) as f64),
        _ => None,
    };
    Ok(SyncSample {
        new_rate: rate,
        new_per_s: new as f64 / secs,
        events_per_s: ev.map(|e| e as f64 / secs),
        bytes_per_event,
        link_pps: lp as f64 / secs,
        link_bytes_per_s: lb as f64 / secs,
        cpu_pct: 100.0 * cpu / (secs * 1e9),
        cpu_pct_of_datapath: data.map(|d| 100.0 * cpu / d),
        events_dropped: d(&x0, &x1, "events_dropped"),
        datagrams_sent: d(&x0, &x1, "datagrams_sent"),
        datagrams_resent: d(&x0, &x1, "datagrams_resent"),
    })
}

/// Runs one device through one failure; the testbed is removed on return.
pub fn run_one(o: &FailOpts, dev: Dev, v: Variant) -> Result<Outcome> {
    let dir = o.dir.join(format!("{}-{}", dev.name(), v.name()));
    let bin = match &o.xlat_bin {
        Some(b) => b.clone(),
        None => crate::device::xlat_bin()?,
    };
    let mut t = Testbed::new(dev, &dir, bin)?;
    t.start()?;
    let before = o.before();
    let total = before + o.after;
    let mut out = Outcome {
        device: dev.name().into(),
        variant: v.name().into(),
        ..Outcome::default()
    };
    // The download: sized to outlast the failure at the rate limit.
    let www = dir.join("www");
    std::fs::create_dir_all(&www)?;
    let blob = www.join("blob.bin");
    let size = (o.download_rate as f64 * (total - 0.5)) as u64;
    sys::cmd_ok(&[
        "sh",
        "-c",
        &format!("head -c {size} /dev/urandom > {}", blob.display()),
    ])?;
    out.download_bytes = size;
    let (srv, cli) = (t.srv.clone(), t.cli.clone());
    let w = www.display().to_string();
    t.spawn(
        &srv,
        "http",
        &[
            "python3",
            "-m",
            "http.server",
            &HTTP_PORT.to_string(),
            "--bind",
            &SRV.to_string(),
            "--directory",
            &w,
        ],
    )?;
    let iperf = o.iperf && sys::have("iperf3");
    if iperf {
        t.spawn(
            &srv,
            "iperf3-server",
            &[
                "iperf3",
                "-s",
                "-1",
                "-B",
                &SRV.to_string(),
                "-p",
                &IPERF_PORT.to_string(),
            ],
        )?;
    }
    // Both servers listening.
    let start = Instant::now();
    loop {
        let s = sys::ns_ok(&srv, &["ss", "-Hltn"]).unwrap_or_default();
        if s.contains(&format!(":{HTTP_PORT}")) && (!iperf || s.contains(&format!(":{IPERF_PORT}")))
        {
            break;
        }
        if start.elapsed() > Duration::from_secs(10) {
            bail!("the HTTP / iperf3 servers did not listen within 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = dir.join("download.bin");
    let tr = Traffic::start(&t, o.flows, o.flow_pps, o.new_rates[0], total + 5.0)?;
    let g = got.display().to_string();
    let (rate_s, max_s) = (
        o.download_rate.to_string(),
        format!("{}", (total * 3.0 + 20.0) as u64),
    );
    t.spawn(
        &cli,
        "curl",
        &[
            "curl",
            "-sS",
            "--fail",
            "--limit-rate",
            &rate_s,
            "--max-time",
            &max_s,
            "-o",
            &g,
            &format!("http://{SRV}:{HTTP_PORT}/blob.bin"),
        ],
    )?;
    if iperf {
        let secs = format!("{}", total.ceil() as u64);
        t.spawn(
            &cli,
            "iperf3",
            &[
                "iperf3",
                "-c",
                &SRV.to_string(),
                "-p",
                &IPERF_PORT.to_string(),
                "-t",
                &secs,
                "-b",
                "20M",
                "--connect-timeout",
                "3000",
                "-J",
            ],
        )?;
    }
    sys::sleep_interruptible(Duration::from_secs(1));
    for &r in &o.new_rates {
        sys::check_stop()?;
        out.sync.push(measure_sync(&t, &tr, r)?);
    }
    tr.set_new_rate(o.new_rates[0]);
    let left = before - tr.now();
    if left > 0.0 {
        sys::sleep_interruptible(Duration::from_secs_f64(left));
    }
    sys::check_stop()?;
    out.standby_entries = t.standby_entries();
    let (sent0, arrived0) = (tr.new_sent(), t.nft_counter(&srv));
    // The failure.
    let kill_unix = unix_now();
    let kill = tr.now();
    t.fail_active(v)?;
    let took = t.wait_state(1, "master", kill_unix - 0.05, Duration::from_secs(10));
    let left = total - tr.now();
    if left > 0.0 {
        sys::sleep_interruptible(Duration::from_secs_f64(left));
    }
    out.new_sent = tr.new_sent();
    let flows = tr.finish()?;
    // A hook still running (conntrackd's commit) gets 30 s more to finish.
    if took.is_err() {
        match t.wait_state(1, "master", kill_unix - 0.05, Duration::from_secs(30)) {
            Ok(()) => out
                .notes
                .push("b's notify_master hook ran for more than 10 s".into()),
            Err(e) => out.notes.push(format!("{e:#}")),
        }
    }
    let log = t.notify_log(1);
    let begin = log
        .iter()
        .find(|(s, b, tm)| s == "master" && *b && *tm >= kill_unix - 0.05)
        .map(|x| x.2);
    let end = log
        .iter()
        .find(|(s, b, tm)| s == "master" && !*b && *tm >= kill_unix - 0.05)
        .map(|x| x.2);
    out.vrrp_ms = begin.map(|b| (b - kill_unix).max(0.0) * 1e3);
    out.takeover_ms = match (begin, end) {
        (Some(b), Some(e)) => Some((e - b).max(0.0) * 1e3),
        _ => None,
    };
    out.flows = analyse(&flows, kill);
    out.new_arrived = t.nft_counter(&srv);
    // The counter was read after the failure began: datagrams in flight then count as after.
    out.new_sent_after = out.new_sent.saturating_sub(sent0);
    out.new_arrived_after = out.new_arrived.saturating_sub(arrived0);
    // The TCP transfers end by themselves (bounded by their own time limits).
    let st = t.wait_proc("curl", Duration::from_secs_f64(total * 3.0 + 25.0));
    let sum = |p: &Path| -> Option<String> {
        let o = sys::cmd(60, &["sha256sum", &p.display().to_string()]).ok()?;
        o.ok.then(|| o.stdout.split_whitespace().next().map(str::to_string))
            .flatten()
    };
    out.download_ok =
        st.is_some_and(|s| s.success()) && sum(&blob).is_some() && sum(&blob) == sum(&got);
    if !out.download_ok {
        out.notes.push(format!(
            "download failed ({st:?}): {}",
            tail(&t.log("curl"), 3)
        ));
    }
    if iperf {
        let st = t.wait_proc("iperf3", Duration::from_secs_f64(total + 20.0));
        let p = parse_iperf(&t.log("iperf3"));
        out.iperf_ok = Some(st.is_some_and(|s| s.success()) && p.is_some_and(|p| p.0));
        out.iperf_retransmits = p.map(|p| p.2);
    }
    out.tcp_resets = t.nft_counter(&cli);
    std::fs::write(
        dir.join("flows.json"),
        serde_json::to_string(&flows).context("encoding flows")?,
    )?;
    let _ = std::fs::remove_file(&blob);
    let _ = std::fs::remove_file(&got);
    drop(t);
    Ok(out)
}

/// Runs every device through every variant.
pub fn run(o: &FailOpts) -> Result<Vec<Outcome>> {
    o.validate()?;
    let mut v = Vec::new();
    for &var in &o.variants {
        for &dev in &o.devices {
            sys::check_stop()?;
            eprintln!("failover: {} / {}", dev.name(), var.name());
            v.push(
                run_one(o, dev, var).with_context(|| format!("{} / {}", dev.name(), var.name()))?,
            );
        }
    }
    Ok(v)
}
