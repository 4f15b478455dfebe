//! The experiments: each drives devices through the tester and adds rows to the results.
//!
//! Every experiment first knows the tester's ceiling for the frame sizes it uses (measured
//! once per run on the CA-CD pair, no DUT): it is the top of every throughput search and the
//! 100% of "offered load" unless `--link` gives a nominal link rate.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::device::{self, Device};
use crate::packet::{line_rate_pps, Flow, SizeMix};
use crate::progress::Progress;
use crate::results::{Ceiling, Experiment, Row, RunResults};
use crate::stats::{self, Spread};
use crate::sys;
use crate::tester::{run_trial, PathSpec, Trial, TrialSpec};
use crate::topo::Topo;

/// The experiments `xlat lab list` shows.
pub const EXPERIMENTS: &[(&str, &str)] = &[
    ("quick", "headline table: forward4, kernel-nat44, xlat-nat44 at 64 B and 512 B: throughput, latency and CPU cost (< 3 min)"),
    ("throughput", "RFC 2544 binary search for the highest rate with loss <= threshold, per frame size, repeated"),
    ("loss-vs-load", "loss and received rate at offered load 10%..100% (S1 figures)"),
    ("latency-vs-load", "latency percentiles at offered load 10%..100% (S1 figures)"),
    ("latency-vs-sessions", "latency at a fixed load with 1, 200, 2,000, 20,000 ... active sessions (S5 table 4.1)"),
    ("memory-per-session", "device memory at N sessions minus baseline, bytes per session (S5 table 4.3)"),
    ("cpu", "DUT CPU busy share and ns per forwarded packet at a fixed load, by frame size and sessions (S5 table 4.4)"),
    ("setup-rate", "highest rate of new sessions per second with loss <= threshold (RFC 9693)"),
    ("churn", "established flows at a fixed rate while never-seen flows arrive at stepped rates: loss and latency of each group, new flows delivered per second, device CPU"),
    ("tcp", "iperf3 TCP through the device (tester's own stack): Mb/s, retransmits, DUT CPU, ns per byte"),
    ("http", "S3's HTTP test: ab fetches a 173,225-byte file from python3 http.server through the device: requests/s, KB/s"),
    ("owd", "one-way delay by UDP payload size 50..3000 B, S2's bounce: RTT/(2N) over N round trips"),
    ("reload", "xlat-nat44 with and without the XDP fast path at half its throughput while `xlat reload` applies a changed [timeouts] udp, then a pool address added and removed, --count times (default 1000): loss against baselines, reload round trip p50/p99/max"),
];

/// Options common to all experiments.
#[derive(Debug, Clone)]
pub struct Opts {
    pub devices: Vec<String>,
    pub sizes: Vec<SizeMix>,
    pub trial: Duration,
    pub repeats: usize,
    pub threshold: f64,
    pub flows: u32,
    pub link_bps: Option<f64>,
    pub resolution: f64,
    pub max_steps: usize,
    pub loads: Vec<f64>,
    pub sessions: Vec<u32>,
    /// Fixed offered load (pps) for cpu / latency-vs-sessions, churn's established rate;
    /// None = a default.
    pub rate: Option<f64>,
    /// churn: new flows per second, one step each.
    pub new_rates: Vec<f64>,
    /// Sender-side interrupt moderation (see tester::TrialSpec::coalesce).
    pub coalesce: Duration,
    /// Receive with the XDP receive counter (see tester::TrialSpec::rx_xdp).
    pub rx_xdp: bool,
    /// UDP payload sizes for owd (bytes).
    pub payloads: Vec<usize>,
    /// Round trips per owd measurement.
    pub bounces: usize,
    /// HTTP requests per http run, and how many at once.
    pub requests: usize,
    pub concurrency: usize,
    /// reload: reloads per variant.
    pub count: usize,
}

/// S2's payload sizes for the bounce test (the larger ones fragment).
pub const OWD_PAYLOADS: &[usize] = &[50, 100, 250, 500, 750, 1000, 1250, 1500, 1750, 2000, 3000];

/// churn's default steps of new flows per second: from none, past every slow path measured
/// here (setup-rate: xlat-nat44 55,000/s, kernel-nat44 119,000/s).
pub const CHURN_NEW_RATES: &[f64] = &[0.0, 10_000.0, 25_000.0, 50_000.0, 100_000.0, 200_000.0];
/// churn's default rate of the established flows, together (pps).
pub const CHURN_ESTABLISHED_PPS: f64 = 100_000.0;
/// At most this many new flows per churn trial (the step's trial is shortened to fit): the
/// kernel's conntrack table holds 262,144 entries on this machine.
pub const CHURN_MAX_NEW: f64 = 200_000.0;

/// A run in progress: the testbed, options and what has been measured so far.
pub struct Lab {
    pub topo: Topo,
    pub opts: Opts,
    pub res: RunResults,
    /// Progress on stderr: a bar on a terminal, plain lines elsewhere.
    pub bar: Progress,
    trials_done: usize,
    /// Measure every device's cost by difference too (the cpu experiment), not only the
    /// devices whose receive work runs on the sender's CPU.
    by_difference: bool,
}

fn pct(x: f64) -> f64 {
    x * 100.0
}

/// Frame size label with a unit.
pub fn size_label(s: &SizeMix) -> String {
    match s {
        SizeMix::Fixed(n) => format!("{n} B"),
        SizeMix::Imix => "IMIX".into(),
    }
}

impl Lab {
    pub fn new(topo: Topo, opts: Opts, res: RunResults) -> Lab {
        Lab {
            topo,
            opts,
            res,
            bar: Progress::new(),
            trials_done: 0,
            by_difference: false,
        }
    }

    pub(crate) fn progress(&self, what: &str) {
        self.bar.line(what);
    }

    /// Units of work (a device set up for one experiment and size) experiment `name` has,
    /// for the progress bar.
    pub fn planned_units(&self, name: &str) -> usize {
        let (d, s) = (self.opts.devices.len(), self.opts.sizes.len().max(1));
        match name {
            "quick" => 2 * d * s,
            "memory-per-session" | "setup-rate" | "tcp" | "http" | "owd" | "churn" | "reload" => d,
            _ => d * s,
        }
    }

    pub(crate) fn dut_path(&self, v6: bool) -> PathSpec {
        PathSpec {
            ns: self.topo.ns_tester.clone(),
            tx_dev: self.topo.a.dev.clone(),
            rx_dev: self.topo.d.dev.clone(),
            src_mac: self.topo.a.mac,
            dst_mac: self.topo.ua.mac,
            v6,
        }
    }

    fn loop_path(&self, v6: bool) -> PathSpec {
        PathSpec {
            ns: self.topo.ns_tester.clone(),
            tx_dev: self.topo.ca.dev.clone(),
            rx_dev: self.topo.cd.dev.clone(),
            src_mac: self.topo.ca.mac,
            dst_mac: self.topo.cd.mac,
            v6,
        }
    }

    pub(crate) fn spec(
        &self,
        path: PathSpec,
        flows: Arc<Vec<Flow>>,
        size: &SizeMix,
        rate: Option<f64>,
        duration: Duration,
        pids: Vec<i32>,
    ) -> TrialSpec {
        TrialSpec {
            path,
            flows,
            sizes: size.clone(),
            rate_pps: rate,
            duration,
            max_packets: None,
            tester_cpu: self.topo.tester_cpu,
            dut_cpu: self.topo.dut_cpu,
            dut_pids: pids,
            dut_kernel_pids: self.topo.dut_napi_pids(),
            tester_kernel_pids: self.topo.tester_kernel_pids(),
            drain: Duration::from_millis(300),
            coalesce: self.opts.coalesce,
            rx_xdp: self.opts.rx_xdp,
            mix: None,
            control: None,
        }
    }

    pub(crate) fn trial(&mut self, spec: &TrialSpec, what: &str) -> Result<Trial> {
        sys::check_stop()?;
        let rate = match spec.rate_pps {
            Some(r) => format!("{:>9.0} pps", r),
            None => "  max rate".into(),
        };
        self.bar.status(&format!(
            "trial {:>3}: {what} {} {}: running",
            self.trials_done + 1,
            spec.sizes.label(),
            rate.trim()
        ));
        let t = run_trial(spec)?;
        self.trials_done += 1;
        self.bar.step(&format!(
            "trial {:>3}: {what:<34} {} {rate}: rx {:>9.0} pps, loss {:>7.3}%, p50 {:>8.1} us, DUT cpu {:>3.0}%",
            self.trials_done,
            spec.sizes.label(),
            t.rx_pps,
            pct(t.loss),
            t.latency.p50_us,
            pct(t.cpu.device_busy)
        ));
        Ok(t)
    }

    /// The tester's ceiling for a frame size: first as fast as the sender goes, then a search
    /// below that for the highest loss-free rate on CA -> CD.
    pub fn ceiling(&mut self, size: &SizeMix, v6: bool) -> Result<f64> {
        if let Some(c) = self
            .res
            .ceilings
            .iter()
            .find(|c| c.size == size.label() && c.v6 == v6)
        {
            return Ok(c.pps);
        }
        let flows = Arc::new(if v6 {
            crate::packet::flows_v6(
                self.opts.flows,
                0,
                [0x20, 1, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2],
            )
        } else {
            crate::packet::flows_v4(self.opts.flows, 0, crate::topo::D_ADDR)
        });
        let dur = self.opts.trial;
        let spec = self.spec(self.loop_path(v6), flows.clone(), size, None, dur, vec![]);
        let first = self.trial(&spec, "tester ceiling (no DUT), unpaced")?;
        let send_max = first.tx_pps;
        let mut trials = vec![first];
        let th = self.opts.threshold;
        let search = stats::search(send_max, self.opts.resolution, self.opts.max_steps, |r| {
            let spec = self.spec(
                self.loop_path(v6),
                flows.clone(),
                size,
                Some(r),
                dur,
                vec![],
            );
            let t = self.trial(&spec, "tester ceiling (no DUT)")?;
            let ok = stats::passes(t.loss, th) && !t.sender_short;
            trials.push(t);
            Ok::<bool, anyhow::Error>(ok)
        })?;
        let pps = if search.rate > 0.0 {
            search.rate
        } else {
            send_max * 0.5
        };
        self.progress(&format!(
            "tester ceiling {}: {:.0} pps loss-free (sender alone {:.0} pps)",
            size.label(),
            pps,
            send_max
        ));
        self.res.ceilings.push(Ceiling {
            size: size.label(),
            v6,
            pps,
            send_max_pps: send_max,
            search: Some(search),
            trials,
        });
        Ok(pps)
    }

    /// The tester alone (CA -> CD, no device) at `rate` with the same flows and size: the
    /// baseline of a device's cost by difference.
    fn tester_alone(
        &mut self,
        flows: Arc<Vec<Flow>>,
        size: &SizeMix,
        rate: f64,
        v6: bool,
    ) -> Result<Trial> {
        let dur = self.opts.trial;
        let spec = self.spec(self.loop_path(v6), flows, size, Some(rate), dur, vec![]);
        let mut t = self.trial(&spec, "tester alone (cost baseline)")?;
        t.baseline = true;
        Ok(t)
    }

    /// 100% offered load for a size: the nominal link if given, else the tester's ceiling.
    pub fn nominal(&mut self, size: &SizeMix, v6: bool) -> Result<f64> {
        match self.opts.link_bps {
            Some(bps) => Ok(line_rate_pps(bps, size.mean(v6))),
            None => self.ceiling(size, v6),
        }
    }

    /// Sends each flow once at a modest rate so the device holds a session for each.
    pub(crate) fn warm(
        &mut self,
        dev: &dyn Device,
        flows: Arc<Vec<Flow>>,
        size: &SizeMix,
    ) -> Result<()> {
        if flows.is_empty() {
            return Ok(());
        }
        let rate = 20_000.0f64;
        let n = flows.len() as u64;
        let secs = (n as f64 / rate + 1.0).min(240.0);
        let mut spec = self.spec(
            self.dut_path(dev.v6_in()),
            flows,
            size,
            Some(rate),
            Duration::from_secs_f64(secs),
            dev.pids(),
        );
        spec.max_packets = Some(n);
        let t = self.trial(&spec, &format!("{} warm-up ({n} flows)", dev.name()))?;
        if t.received < t.sent {
            self.progress(&format!(
                "warning: warm-up lost {} of {} packets; sending every flow once more",
                t.lost, t.sent
            ));
            let mut again = spec.clone();
            again.rate_pps = Some(rate / 2.0);
            again.duration = Duration::from_secs_f64((n as f64 * 2.0 / rate + 1.0).min(240.0));
            self.trial(&again, &format!("{} warm-up again", dev.name()))?;
        }
        Ok(())
    }

    /// Runs `f` with a device set up, tearing it down afterwards whatever happens.
    pub fn with_device<T>(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut Lab, &mut dyn Device) -> Result<T>,
    ) -> Result<T> {
        sys::check_stop()?;
        let mut dev = device::make(name)?;
        self.res
            .versions
            .entry(name.to_string())
            .or_insert_with(|| dev.version());
        self.progress(&format!("setting up {name}"));
        if let Err(e) = dev.setup(&self.topo) {
            dev.teardown(&self.topo);
            return Err(e.context(format!("setting up {name}")));
        }
        let r = f(self, dev.as_mut());
        let alive = dev.check_alive();
        dev.teardown(&self.topo);
        self.bar.unit_done();
        let r = r?;
        alive?;
        Ok(r)
    }

    /// RFC 2544 throughput for one device and size: `repeats` searches.
    pub(crate) fn throughput_row(
        &mut self,
        dev: &mut dyn Device,
        size: &SizeMix,
        flows: u32,
    ) -> Result<Row> {
        let v6 = dev.v6_in();
        let max = self.ceiling(size, v6)?;
        let fl = Arc::new(dev.flows(flows, 0));
        self.warm(dev, fl.clone(), size)?;
        let mut row = Row {
            device: dev.name().into(),
            size: size.label(),
            ..Row::default()
        };
        let mut rates = Vec::new();
        let mut mbps = Vec::new();
        let (mut p50, mut p99, mut ns, mut busy) = (vec![], vec![], vec![], vec![]);
        let th = self.opts.threshold;
        let dur = self.opts.trial;
        let mut short: Option<(f64, f64)> = None;
        for _ in 0..self.opts.repeats.max(1) {
            let mut best: Option<Trial> = None;
            let mut trials = Vec::new();
            let search = stats::search(max, self.opts.resolution, self.opts.max_steps, |r| {
                let spec = self.spec(
                    self.dut_path(v6),
                    fl.clone(),
                    size,
                    Some(r),
                    dur,
                    dev.pids(),
                );
                let t = self.trial(&spec, &format!("{} throughput", dev.name()))?;
                dev.check_alive()?;
                // A trial the tester could not offer proves nothing about the device.
                let ok = stats::passes(t.loss, th) && !t.sender_short;
                if stats::passes(t.loss, th) && t.sender_short {
                    short = Some((r, t.tx_pps));
                }
                if ok {
                    best = Some(t.clone());
                }
                trials.push(t);
                Ok::<bool, anyhow::Error>(ok)
            })?;
            rates.push(search.rate);
            if search.at_ceiling {
                row.tester_limited = true;
            }
            if let Some(b) = &best {
                mbps.push(b.rx_bps / 1e6);
                p50.push(b.latency.p50_us);
                p99.push(b.latency.p99_us);
                if dev.rx_on_sender() {
                    let alone = self.tester_alone(fl.clone(), size, b.offered_pps, v6)?;
                    let d = ByDifference::of(b, &alone);
                    ns.push(d.device_ns);
                    busy.push(pct(d.device_busy));
                    row.trials.push(alone);
                } else {
                    ns.push(b.cpu.dut_ns_per_pkt);
                    busy.push(pct(b.cpu.device_busy));
                }
            }
            row.searches.push(search);
            row.trials.extend(trials);
        }
        row.metrics
            .insert("throughput_pps".into(), Spread::of(&rates));
        row.metrics
            .insert("throughput_mbps".into(), Spread::of(&mbps));
        row.metrics.insert(
            "ceiling_pct".into(),
            Spread::of(&rates.iter().map(|r| 100.0 * r / max).collect::<Vec<_>>()),
        );
        row.metrics
            .insert("latency_p50_us".into(), Spread::of(&p50));
        row.metrics
            .insert("latency_p99_us".into(), Spread::of(&p99));
        row.metrics.insert("dut_ns_per_pkt".into(), Spread::of(&ns));
        row.metrics.insert("dut_busy_pct".into(), Spread::of(&busy));
        let steal: Vec<f64> = row.trials.iter().map(|t| pct(t.cpu.dut_steal)).collect();
        row.metrics
            .insert("dut_steal_pct".into(), Spread::of(&steal));
        if let Some((asked, got)) = short {
            let found = rates.iter().copied().fold(0.0, f64::max);
            if got >= found * 0.97 {
                row.tester_limited = true;
                row.notes.push(format!(
                    "asked for {asked:.0} pps the tester sent only {got:.0} pps without loss: the tester, not {}, was the limit",
                    dev.name()
                ));
            }
        }
        if dev.rx_on_sender() {
            row.notes.push(SOFTIRQ_NOTE.into());
        }
        if row.tester_limited && short.is_none() {
            row.notes.push(format!(
                "passed at the tester's ceiling ({max:.0} pps): the tester, not {}, was the limit",
                dev.name()
            ));
        }
        Ok(row)
    }

    /// Trials at fixed offered loads; one row per load.
    #[allow(clippy::too_many_arguments)]
    fn load_rows(
        &mut self,
        dev: &mut dyn Device,
        size: &SizeMix,
        flows: Arc<Vec<Flow>>,
        loads: &[(f64, f64)],
        x_is_load: bool,
    ) -> Result<Vec<Row>> {
        let v6 = dev.v6_in();
        let mut rows = Vec::new();
        for &(x, rate) in loads {
            let mut row = Row {
                device: dev.name().into(),
                size: size.label(),
                x: Some(x),
                ..Row::default()
            };
            let mut m: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
            for _ in 0..self.opts.repeats.max(1) {
                let spec = self.spec(
                    self.dut_path(v6),
                    flows.clone(),
                    size,
                    Some(rate),
                    self.opts.trial,
                    dev.pids(),
                );
                let label = if x_is_load {
                    format!("{} at {x:.0}% load", dev.name())
                } else {
                    format!("{} at {rate:.0} pps", dev.name())
                };
                let t = self.trial(&spec, &label)?;
                dev.check_alive()?;
                if t.sender_short {
                    row.tester_limited = true;
                }
                let ceiling = self.ceiling(size, v6)?;
                if rate > ceiling * 1.02 && t.loss > self.opts.threshold {
                    row.tester_limited = true;
                }
                let (mut dut_ns, mut dut_busy) = (t.cpu.dut_ns_per_pkt, t.cpu.device_busy);
                if dev.rx_on_sender() || self.by_difference {
                    let b = self.tester_alone(flows.clone(), size, rate, v6)?;
                    let d = ByDifference::of(&t, &b);
                    if dev.rx_on_sender() {
                        (dut_ns, dut_busy) = (d.device_ns, d.device_busy);
                    }
                    for (k, v) in [
                        ("cores_ns_per_pkt", d.cores_ns),
                        ("tester_alone_ns_per_pkt", d.tester_alone_ns),
                        ("diff_ns_per_pkt", d.device_ns),
                    ] {
                        m.entry(k).or_default().push(v);
                    }
                }
                for (k, v) in [
                    ("offered_pps", rate),
                    ("rx_pps", t.rx_pps),
                    ("rx_mbps", t.rx_bps / 1e6),
                    ("loss_pct", pct(t.loss)),
                    ("latency_mean_us", t.latency.mean_us),
                    ("latency_p50_us", t.latency.p50_us),
                    ("latency_p99_us", t.latency.p99_us),
                    ("latency_max_us", t.latency.max_us),
                    ("dut_busy_pct", pct(dut_busy)),
                    ("dut_cpu_all_pct", pct(t.cpu.dut_busy)),
                    ("dut_softirq_pct", pct(t.cpu.dut_softirq)),
                    ("dut_ns_per_pkt", dut_ns),
                    ("proc_ns_per_pkt", t.cpu.proc_ns_per_pkt),
                    ("dut_other_pct", pct(t.cpu.dut_other)),
                    ("dut_steal_pct", pct(t.cpu.dut_steal)),
                    ("tester_busy_pct", pct(t.cpu.tester_busy)),
                    ("reordered", t.reordered as f64),
                    ("duplicates", t.duplicates as f64),
                ] {
                    m.entry(k).or_default().push(v);
                }
                row.trials.push(t);
            }
            for (k, v) in m {
                row.metrics.insert(k.into(), Spread::of(&v));
            }
            if row.tester_limited {
                row.notes
                    .push("the tester could not offer this load loss-free".into());
            }
            if dev.rx_on_sender() {
                row.notes.push(SOFTIRQ_NOTE.into());
            }
            if let Some(o) = row.metric("dut_steal_pct").filter(|o| o.max > 1.0) {
                row.notes.push(format!(
                    "the hypervisor took up to {:.1}% of the DUT's vCPU (steal) during these trials",
                    o.max
                ));
            }
            if let Some(o) = row.metric("dut_other_pct").filter(|o| o.median > 10.0) {
                row.notes.push(format!(
                    "other processes used {:.0}% of the DUT CPU during these trials (not counted in DUT ns/pkt)",
                    o.median
                ));
            }
            rows.push(row);
        }
        Ok(rows)
    }

    /// Adds rows to the results as soon as they are measured, so an interrupted run keeps them.
    pub(crate) fn add(&mut self, header: &Experiment, rows: Vec<Row>) {
        let mut e = header.clone();
        e.rows = rows;
        self.push(e);
    }

    /// loss-vs-load and latency-vs-load come from the same sweep.
    fn add_load(&mut self, header: &Experiment, rows: Vec<Row>) {
        for (name, title) in [
            ("loss-vs-load", "Loss and received rate vs offered load"),
            ("latency-vs-load", "Latency vs offered load"),
        ] {
            let mut e = header.clone();
            e.name = name.into();
            e.title = title.into();
            e.rows = rows.clone();
            self.push(e);
        }
    }

    pub(crate) fn push(&mut self, e: Experiment) {
        if let Some(x) = self.res.experiments.iter_mut().find(|x| x.name == e.name) {
            x.rows.extend(e.rows);
        } else {
            self.res.experiments.push(e);
        }
    }

    pub(crate) fn exp(
        name: &str,
        title: &str,
        x_label: Option<&str>,
        method: String,
    ) -> Experiment {
        Experiment {
            name: name.into(),
            title: title.into(),
            x_label: x_label.map(String::from),
            method,
            rows: Vec::new(),
        }
    }

    /// Runs one named experiment over the configured devices and sizes.
    pub fn run(&mut self, name: &str) -> Result<()> {
        match name {
            "quick" => self.quick(),
            "throughput" => self.throughput(),
            "loss-vs-load" | "latency-vs-load" => self.vs_load(name),
            "latency-vs-sessions" => self.latency_vs_sessions(),
            "memory-per-session" => self.memory_per_session(),
            "cpu" => self.cpu(),
            "setup-rate" => self.setup_rate(),
            "churn" => self.churn(),
            "reload" => self.reload(),
            "tcp" | "owd" | "http" => {
                self.topo.stack_on()?;
                let r = match name {
                    "tcp" => self.tcp(),
                    "http" => self.http(),
                    _ => self.owd(),
                };
                let off = self.topo.stack_off();
                r?;
                off
            }
            other => bail!(
                "unknown experiment {other:?}; `xlat lab list` shows them: {}",
                EXPERIMENTS
                    .iter()
                    .map(|e| e.0)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    pub(crate) fn throughput_method(&self) -> String {
        format!(
            "RFC 2544 26.1: binary search between 0 and the tester's ceiling for the highest offered rate with loss <= {}%, \
             {:.1} s trials, stop at {}% of the ceiling or {} trials; {} flows with RFC 4814 pseudorandom ports (each sent once before the search); \
             repeated {} time(s): median [min..max]. Latency and CPU are those of the highest passing trial.",
            pct(self.opts.threshold),
            self.opts.trial.as_secs_f64(),
            pct(self.opts.resolution),
            self.opts.max_steps,
            self.opts.flows,
            self.opts.repeats
        )
    }

    fn throughput(&mut self) -> Result<()> {
        let e = Self::exp(
            "throughput",
            "Throughput (RFC 2544)",
            None,
            self.throughput_method(),
        );
        for d in self.opts.devices.clone() {
            for s in self.opts.sizes.clone() {
                let flows = self.opts.flows;
                let row = self.with_device(&d, |lab, dev| lab.throughput_row(dev, &s, flows))?;
                self.add(&e, vec![row]);
            }
        }
        self.push(e);
        Ok(())
    }

    fn quick(&mut self) -> Result<()> {
        let e = Self::exp(
            "throughput",
            "Throughput (RFC 2544)",
            None,
            self.throughput_method(),
        );
        let sizes = self.opts.sizes.clone();
        for s in &sizes {
            self.ceiling(s, false)?;
        }
        let mut by_size: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for d in self.opts.devices.clone() {
            for s in &sizes {
                let flows = self.opts.flows;
                let row = self.with_device(&d, |lab, dev| lab.throughput_row(dev, s, flows))?;
                let r = row
                    .metric("throughput_pps")
                    .map(|x| x.median)
                    .unwrap_or(0.0);
                by_size.entry(s.label()).or_default().push(r);
                self.add(&e, vec![row.clone()]);
            }
        }
        self.push(e);
        // Latency and CPU cost at one load every device carries: half the slowest one's throughput.
        let c = Self::exp(
            "cost",
            "Latency and CPU cost at a common load",
            None,
            "Each device at the same offered load, half of the lowest throughput measured for that size \
             (so no device is overloaded), one trial of at least 2 s: one-way latency (one clock), the DUT CPU's \
             busy share, and the device's CPU nanoseconds per forwarded packet (softirq and irq time of the \
             DUT CPU plus the device processes' CPU time, divided by packets received)."
                .into(),
        );
        for d in self.opts.devices.clone() {
            for s in &sizes {
                let min = by_size
                    .get(&s.label())
                    .and_then(|v| v.iter().copied().filter(|x| *x > 0.0).reduce(f64::min))
                    .unwrap_or(10_000.0);
                let rate = (min * 0.5).max(1000.0);
                let flows = self.opts.flows;
                let rows = self.with_device(&d, |lab, dev| {
                    let fl = Arc::new(dev.flows(flows, 0));
                    lab.warm(dev, fl.clone(), s)?;
                    // CPU time comes in scheduler ticks: a longer trial counts more of them.
                    // One 2 s trial each: the repetitions went into the throughput searches.
                    let (keep, reps) = (lab.opts.trial, lab.opts.repeats);
                    lab.opts.trial = keep.max(Duration::from_secs(2));
                    lab.opts.repeats = 1;
                    let r = lab.load_rows(dev, s, fl, &[(rate, rate)], false);
                    lab.opts.trial = keep;
                    lab.opts.repeats = reps;
                    r
                })?;
                for mut r in rows {
                    r.x = None;
                    self.add(&c, vec![r]);
                }
            }
        }
        self.push(c);
        Ok(())
    }

    fn vs_load(&mut self, name: &str) -> Result<()> {
        let nominal_word = match self.opts.link_bps {
            Some(b) => format!(
                "a {:.0} Mb/s link (line rate with 20 B preamble+gap per frame)",
                b / 1e6
            ),
            None => "the tester's ceiling for the size".into(),
        };
        let title = if name == "loss-vs-load" {
            "Loss and received rate vs offered load"
        } else {
            "Latency vs offered load"
        };
        let _ = title;
        let e = Self::exp(
            name,
            title,
            Some("offered load (% of nominal)"),
            format!(
                "Offered load {} % of {nominal_word}; {:.1} s trials, {} flows, repeated {} time(s).",
                self.opts
                    .loads
                    .iter()
                    .map(|l| format!("{l:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.opts.trial.as_secs_f64(),
                self.opts.flows,
                self.opts.repeats
            ),
        );
        for d in self.opts.devices.clone() {
            for s in self.opts.sizes.clone() {
                let flows = self.opts.flows;
                let loads = self.opts.loads.clone();
                let rows = self.with_device(&d, |lab, dev| {
                    let nominal = lab.nominal(&s, dev.v6_in())?;
                    let pts: Vec<(f64, f64)> =
                        loads.iter().map(|l| (*l, nominal * l / 100.0)).collect();
                    let fl = Arc::new(dev.flows(flows, 0));
                    lab.warm(dev, fl.clone(), &s)?;
                    lab.load_rows(dev, &s, fl, &pts, true)
                })?;
                self.add_load(&e, rows);
            }
        }
        self.add_load(&e, Vec::new());
        Ok(())
    }

    /// The fixed load of cpu and latency-vs-sessions: --rate, else 20,000 pps (every device
    /// here carries it), at most 10% of the tester's ceiling.
    fn fixed_rate(&mut self, size: &SizeMix, v6: bool) -> Result<f64> {
        match self.opts.rate {
            Some(r) => Ok(r),
            None => Ok((self.ceiling(size, v6)? * 0.1).clamp(1000.0, 20_000.0)),
        }
    }

    fn latency_vs_sessions(&mut self) -> Result<()> {
        let e = Self::exp(
            "latency-vs-sessions",
            "Latency vs active sessions",
            Some("sessions"),
            "Each flow is sent once (warm-up, 20,000 pps) so the device holds N sessions, then a trial at a fixed \
             offered load (--rate, default 20,000 pps) cycles through all N flows. S5 table 4.1."
                .into(),
        );
        let sessions = self.opts.sessions.clone();
        for d in self.opts.devices.clone() {
            for s in self.opts.sizes.clone() {
                let rows = self.with_device(&d, |lab, dev| {
                    let rate = lab.fixed_rate(&s, dev.v6_in())?;
                    let mut out = Vec::new();
                    for &n in &sessions {
                        let fl = Arc::new(dev.flows(n.max(1), 0));
                        lab.warm(dev, fl.clone(), &s)?;
                        let table = dev.sessions(&lab.topo);
                        let mut rows =
                            lab.load_rows(dev, &s, fl, &[(f64::from(n), rate)], false)?;
                        for r in &mut rows {
                            if let Some(t) = table {
                                r.metrics
                                    .insert("device_sessions".into(), Spread::of(&[t as f64]));
                            }
                        }
                        out.extend(rows);
                    }
                    Ok(out)
                })?;
                self.add(&e, rows);
            }
        }
        self.push(e);
        Ok(())
    }

    fn memory_per_session(&mut self) -> Result<()> {
        let e = Self::exp(
            "memory-per-session",
            "Memory per session",
            Some("sessions"),
            "Device memory after N sessions were created (each flow sent once at 20,000 pps), minus the memory \
             before any: kernel devices count nf_conntrack entries x the conntrack slab object size; processes \
             their resident set size (VmRSS). S5 table 4.3."
                .into(),
        );
        let sessions = self.opts.sessions.clone();
        let size = SizeMix::Fixed(64);
        // Every run shows the tester's ceiling, even where only warm-ups are sent.
        self.ceiling(&size, false)?;
        for d in self.opts.devices.clone() {
            // The resident set's growth per session: xlat's tables written only where
            // sessions land (elsewhere the lab makes them resident at start).
            self.topo.lazy_tables.set(true);
            let rows = self.with_device(&d, |lab, dev| {
                let mut out = Vec::new();
                sys::sleep_interruptible(Duration::from_millis(300));
                let Some(base) = dev.memory(&lab.topo) else {
                    lab.progress(&format!("{}: no memory reading; skipped", dev.name()));
                    return Ok(out);
                };
                let all = dev.flows(sessions.iter().copied().max().unwrap_or(0), 0);
                let mut done = 0usize;
                for &n in &sessions {
                    let n = (n as usize).min(all.len());
                    if n > done {
                        lab.warm(dev, Arc::new(all[done..n].to_vec()), &size)?;
                        done = n;
                    }
                    sys::sleep_interruptible(Duration::from_millis(300));
                    let m = dev.memory(&lab.topo).unwrap_or_default();
                    let table = dev.sessions(&lab.topo).unwrap_or(n as u64);
                    let delta = m.bytes as f64 - base.bytes as f64;
                    let mut row = Row {
                        device: dev.name().into(),
                        size: size.label(),
                        x: Some(n as f64),
                        ..Row::default()
                    };
                    row.metrics
                        .insert("memory_bytes".into(), Spread::of(&[m.bytes as f64]));
                    row.metrics
                        .insert("memory_delta_bytes".into(), Spread::of(&[delta]));
                    row.metrics
                        .insert("device_sessions".into(), Spread::of(&[table as f64]));
                    if table > 0 {
                        row.metrics.insert(
                            "bytes_per_session".into(),
                            Spread::of(&[delta / table as f64]),
                        );
                    }
                    row.notes.push(m.source.clone());
                    lab.progress(&format!(
                        "{}: {n} flows -> {table} sessions, memory {:+.0} B",
                        dev.name(),
                        delta
                    ));
                    out.push(row);
                }
                Ok(out)
            });
            self.topo.lazy_tables.set(false);
            let rows = rows?;
            self.add(&e, rows);
        }
        self.push(e);
        Ok(())
    }

    fn cpu(&mut self) -> Result<()> {
        self.by_difference = true;
        let r = self.cpu_rows();
        self.by_difference = false;
        r
    }

    fn cpu_rows(&mut self) -> Result<()> {
        let e = Self::exp(
            "cpu",
            "DUT CPU at a fixed load",
            Some("sessions"),
            "A fixed offered load (--rate, default 20,000 pps) for each frame size and \
             number of sessions: DUT core busy share (and its softirq part), busy nanoseconds per forwarded packet, \
             and the device processes' own CPU time per packet. S5 table 4.4. Also by difference, for every \
             device: (tester CPU busy time + the device's DUT CPU time) per packet, minus the tester's own busy \
             time per packet sending the same frames to itself (CA -> CD) at the same rate right after; for \
             devices in veth's default receive mode (-softirq) that difference is their DUT ns/pkt."
                .into(),
        );
        let sessions = self.opts.sessions.clone();
        for d in self.opts.devices.clone() {
            for s in self.opts.sizes.clone() {
                let rows = self.with_device(&d, |lab, dev| {
                    let rate = lab.fixed_rate(&s, dev.v6_in())?;
                    let mut out = Vec::new();
                    for &n in &sessions {
                        let fl = Arc::new(dev.flows(n.max(1), 0));
                        lab.warm(dev, fl.clone(), &s)?;
                        out.extend(lab.load_rows(dev, &s, fl, &[(f64::from(n), rate)], false)?);
                    }
                    Ok(out)
                })?;
                self.add(&e, rows);
            }
        }
        self.push(e);
        Ok(())
    }

    fn setup_rate(&mut self) -> Result<()> {
        let e = Self::exp(
            "setup-rate",
            "Session setup rate",
            None,
            format!(
                "RFC 9693 connection setup rate: every packet of a trial opens a new session (new RFC 4814 port pairs \
                 each trial); binary search for the highest rate with loss <= {}%; the device's table is emptied \
                 between trials (conntrack -F, or the daemon restarted). 64-byte frames, {:.1} s trials.",
                pct(self.opts.threshold),
                self.opts.trial.as_secs_f64()
            ),
        );
        let size = SizeMix::Fixed(64);
        for d in self.opts.devices.clone() {
            let row = self.with_device(&d, |lab, dev| {
                let v6 = dev.v6_in();
                let max = lab.ceiling(&size, v6)?;
                // At most 1,000,000 new sessions per trial.
                let dur = lab
                    .opts
                    .trial
                    .min(Duration::from_secs_f64(1e6 / max.max(1.0)));
                let th = lab.opts.threshold;
                let mut row = Row {
                    device: dev.name().into(),
                    size: size.label(),
                    ..Row::default()
                };
                let mut rates = Vec::new();
                let mut short: Option<(f64, f64)> = None;
                let mut seed = 1000u32;
                for _ in 0..lab.opts.repeats.max(1) {
                    let mut trials = Vec::new();
                    let search =
                        stats::search(max, lab.opts.resolution, lab.opts.max_steps, |r| {
                            seed += 1;
                            let n = (r * dur.as_secs_f64()).ceil().max(1.0) as u32;
                            reset(dev, &lab.topo)?;
                            let fl = Arc::new(dev.flows(n, seed));
                            let mut spec =
                                lab.spec(lab.dut_path(v6), fl, &size, Some(r), dur, dev.pids());
                            spec.max_packets = Some(u64::from(n));
                            let t = lab.trial(&spec, &format!("{} new sessions", dev.name()))?;
                            let ok = stats::passes(t.loss, th) && !t.sender_short;
                            if stats::passes(t.loss, th) && t.sender_short {
                                short = Some((r, t.tx_pps));
                            }
                            trials.push(t);
                            Ok::<bool, anyhow::Error>(ok)
                        })?;
                    rates.push(search.rate);
                    if search.at_ceiling {
                        row.tester_limited = true;
                    }
                    row.searches.push(search);
                    row.trials.extend(trials);
                }
                row.metrics
                    .insert("setup_rate_per_s".into(), Spread::of(&rates));
                if let Some((asked, got)) = short {
                    let found = rates.iter().copied().fold(0.0, f64::max);
                    if got >= found * 0.97 {
                        row.tester_limited = true;
                        row.notes.push(format!(
                            "asked for {asked:.0} new sessions/s the tester sent only {got:.0}/s without loss: the tester was the limit"
                        ));
                    }
                }
                Ok(row)
            })?;
            self.add(&e, vec![row]);
        }
        self.push(e);
        Ok(())
    }
}

/// What a softirq-mode row's CPU columns mean.
const SOFTIRQ_NOTE: &str = "the DUT's ports in veth's default receive mode: the device's work ran in softirq on the tester's CPU; \
     DUT ns/pkt and device CPU % are by difference: (tester CPU + the device's DUT CPU time) per packet minus the tester's own \
     per packet sent to itself (CA -> CD) at the same rate right after";

/// A device's CPU cost by difference: the tester's CPU time (its sender and receiver threads,
/// its ports' NAPI threads, its CPU's ksoftirqd) plus the device's time on the DUT CPU, per
/// packet, minus the tester's own time per packet when it sends the same frames at the same
/// rate to itself. It counts the device's work wherever it ran -- on the
/// sender's CPU in veth's default receive mode -- and also what sending into a device costs
/// the tester beyond sending to itself (for threaded NAPI: waking the other CPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ByDifference {
    /// Tester CPU busy ns per packet plus the device's DUT CPU ns per packet.
    pub cores_ns: f64,
    /// The tester's own busy ns per packet, sending to itself.
    pub tester_alone_ns: f64,
    /// cores_ns - tester_alone_ns.
    pub device_ns: f64,
    /// device_ns as a share of one CPU at the device trial's receive rate.
    pub device_busy: f64,
}

impl ByDifference {
    pub fn of(device: &Trial, alone: &Trial) -> ByDifference {
        // The tester's own threads; runs from before tester_ns_per_pkt existed: its CPU's
        // busy share (which counts other processes too).
        let tester_ns = |t: &Trial| {
            if t.cpu.tester_ns_per_pkt > 0.0 {
                t.cpu.tester_ns_per_pkt
            } else {
                t.cpu.tester_busy * t.send_secs * 1e9 / t.received.max(1) as f64
            }
        };
        let cores_ns = tester_ns(device) + device.cpu.dut_ns_per_pkt;
        let tester_alone_ns = tester_ns(alone);
        let device_ns = cores_ns - tester_alone_ns;
        ByDifference {
            cores_ns,
            tester_alone_ns,
            device_ns,
            device_busy: (device_ns * device.received as f64 / (device.send_secs.max(1e-9) * 1e9))
                .max(0.0),
        }
    }
}

/// churn (issue 6): established flows keep their rate while new flows arrive.
impl Lab {
    fn churn(&mut self) -> Result<()> {
        let est_pps = self.opts.rate.unwrap_or(CHURN_ESTABLISHED_PPS).round();
        let nest = self.opts.flows;
        let e = Self::exp(
            "churn",
            "Established flows while new flows arrive (churn)",
            Some("new flows/s offered"),
            format!(
                "{nest} established flows (each sent once before every step, so the device holds their sessions and an \
                 XDP device has their recipes) get {est_pps:.0} pps together, round robin; interleaved with them, frames \
                 to flows the device has never seen (a new source port or address each, one frame per flow) at each step's \
                 rate. Every step starts with an emptied session table (conntrack -F, or the daemon restarted) and lasts \
                 {:.1} s (shorter where it would need more than {CHURN_MAX_NEW:.0} new flows). Loss and latency are \
                 counted per group on the receive side (a frame's group is its flow); a frame the device's port refused \
                 is lost in its group. New flows delivered/s = new-flow frames received / send time: the slow path's \
                 sustained new-flow rate. Device CPU as in cpu. 64-byte frames; repeated {} time(s).",
                self.opts.trial.as_secs_f64(),
                self.opts.repeats
            ),
        );
        let size = SizeMix::Fixed(64);
        let new_rates = self.opts.new_rates.clone();
        for d in self.opts.devices.clone() {
            let rows = self.with_device(&d, |lab, dev| {
                let v6 = dev.v6_in();
                lab.ceiling(&size, v6)?;
                let est = Arc::new(dev.flows(nest, 0));
                // New flows come after the established ones in the same sequence, and each
                // step takes the next unused ones: no flow is ever new twice.
                let mut next = nest;
                let mut rows = Vec::new();
                for &nr in &new_rates {
                    let nr = nr.round();
                    let Some(mix) = crate::churn::Mix::new(nest, est_pps as u64, nr as u64) else {
                        bail!("churn: nothing to send at {est_pps} + {nr} pps");
                    };
                    let dur = if nr > 0.0 {
                        lab.opts.trial.min(Duration::from_secs_f64(CHURN_MAX_NEW / nr))
                    } else {
                        lab.opts.trial
                    };
                    let mut row = Row {
                        device: dev.name().into(),
                        size: size.label(),
                        x: Some(nr),
                        ..Row::default()
                    };
                    let mut m: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
                    for _ in 0..lab.opts.repeats.max(1) {
                        reset(dev, &lab.topo)?;
                        lab.warm(dev, est.clone(), &size)?;
                        let nnew = (nr * dur.as_secs_f64() * 1.05).ceil() as u32 + 1;
                        let nnew = if nr > 0.0 { nnew } else { 0 };
                        let mut fl = (*est).clone();
                        fl.extend(dev.flows_at(next, nnew, 0));
                        next = next.saturating_add(nnew);
                        let mut spec = lab.spec(
                            lab.dut_path(v6),
                            Arc::new(fl),
                            &size,
                            Some(mix.total() as f64),
                            dur,
                            dev.pids(),
                        );
                        spec.mix = Some(mix);
                        spec.max_packets = mix.max_frames(u64::from(nnew));
                        let xdp0 = dev.fast_path_redirected();
                        let writes0 = dev.fast_path_counter("xdp_recipe_writes");
                        let calls0 = dev.fast_path_counter("xdp_recipe_syscalls");
                        let t = lab.trial(&spec, &format!("{} churn {nr:.0} new/s", dev.name()))?;
                        dev.check_alive()?;
                        let g = t.groups.clone().unwrap_or_default();
                        // What share of the established frames the XDP program carried.
                        if let (Some(a), Some(b)) = (xdp0, dev.fast_path_redirected()) {
                            let share = b.saturating_sub(a) as f64
                                / g.established.received.max(1) as f64;
                            m.entry("est_in_xdp_pct").or_default().push(pct(share.min(1.0)));
                        }
                        // Recipes the daemon wrote (and removed) per bpf(2) call: its batching.
                        if let (Some(w0), Some(c0), Some(w1), Some(c1)) = (
                            writes0,
                            calls0,
                            dev.fast_path_counter("xdp_recipe_writes"),
                            dev.fast_path_counter("xdp_recipe_syscalls"),
                        ) {
                            let calls = c1.saturating_sub(c0);
                            if calls > 0 {
                                m.entry("recipes_per_call")
                                    .or_default()
                                    .push(w1.saturating_sub(w0) as f64 / calls as f64);
                            }
                        }
                        let secs = t.send_secs.max(1e-9);
                        lab.progress(&format!(
                            "churn {:<16} {nr:>8.0} new/s: established lost {} of {} ({:.3}%), p99 {:.0} us; new delivered {:.0}/s ({:.1}% lost); device CPU {:.0}%",
                            dev.name(),
                            g.established.lost,
                            g.established.sent,
                            pct(g.established.loss),
                            g.established.latency.p99_us,
                            g.new.received as f64 / secs,
                            pct(g.new.loss),
                            pct(t.cpu.device_busy)
                        ));
                        if t.sender_short {
                            row.tester_limited = true;
                        }
                        for (k, v) in [
                            ("offered_pps", mix.total() as f64),
                            ("est_lost", g.established.lost as f64),
                            ("est_loss_pct", pct(g.established.loss)),
                            ("est_latency_p50_us", g.established.latency.p50_us),
                            ("est_latency_p99_us", g.established.latency.p99_us),
                            ("est_latency_max_us", g.established.latency.max_us),
                            ("new_sent_per_s", g.new.sent as f64 / secs),
                            ("new_rx_per_s", g.new.received as f64 / secs),
                            ("new_loss_pct", pct(g.new.loss)),
                            ("new_latency_p50_us", g.new.latency.p50_us),
                            ("tx_refused", t.tx_refused as f64),
                            ("dut_busy_pct", pct(t.cpu.device_busy)),
                            ("dut_ns_per_pkt", t.cpu.dut_ns_per_pkt),
                            ("proc_ns_per_pkt", t.cpu.proc_ns_per_pkt),
                            ("dut_other_pct", pct(t.cpu.dut_other)),
                        ] {
                            m.entry(k).or_default().push(v);
                        }
                        row.trials.push(t);
                    }
                    for (k, v) in m {
                        row.metrics.insert(k.into(), Spread::of(&v));
                    }
                    if row.tester_limited {
                        row.notes.push(format!(
                            "the tester could not offer {:.0} pps",
                            mix.total()
                        ));
                    }
                    rows.push(row);
                }
                // The slow path's sustained rate: the most new flows it delivered per second
                // in any step, and what it kept at the highest step.
                let best = rows
                    .iter()
                    .filter_map(|r| Some((r.x?, r.metric("new_rx_per_s")?.median)))
                    .fold((0.0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
                if let Some(last) = rows.last_mut() {
                    let at_top = last.metric("new_rx_per_s").map(|s| s.median).unwrap_or(0.0);
                    last.notes.push(format!(
                        "new flows delivered: at most {:.0}/s (offered {:.0}/s); {:.0}/s at the highest step ({:.0}/s offered)",
                        best.1,
                        best.0,
                        at_top,
                        last.x.unwrap_or(0.0)
                    ));
                }
                Ok(rows)
            })?;
            self.add(&e, rows);
        }
        self.push(e);
        Ok(())
    }
}

/// Empties a device's session table: conntrack -F for the kernel, a restart for daemons.
fn reset(dev: &mut dyn Device, topo: &Topo) -> Result<()> {
    if dev.pids().is_empty() {
        let _ = topo.dut(&["conntrack", "-F"]);
        Ok(())
    } else {
        dev.teardown(topo);
        dev.setup(topo)
    }
}

/// Experiments over the tester's own stack (see [`crate::sockets`]).
impl Lab {
    fn tcp(&mut self) -> Result<()> {
        let secs = self.opts.trial.as_secs_f64();
        let e = Self::exp(
            "tcp",
            "TCP throughput (iperf3)",
            None,
            format!(
                "iperf3 (one TCP stream, {secs:.1} s) from the tester's A-side address to an iperf3 server bound to its \
                 D-side address, through the device; the tester's own stack carries it (policy routing in the tester \
                 namespace; segmentation offloads stay off on every veth). Both iperf3 processes run off the DUT CPU. \
                 Throughput is the receiver's; device CPU % is the DUT CPU's busy share and ns/byte its busy time per \
                 received byte. Repeated {} time(s): median [min..max]; the source address the server saw is noted.",
                self.opts.repeats
            ),
        );
        for d in self.opts.devices.clone() {
            let ep = crate::sockets::endpoints(&d)?;
            let row = self.with_device(&d, |lab, dev| {
                let _peer = crate::sockets::TunnelPeer::start(&lab.topo, dev.name())?;
                let mut row = Row {
                    device: dev.name().into(),
                    size: "tcp".into(),
                    ..Row::default()
                };
                let mut m: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
                let mut peers = Vec::new();
                for i in 0..lab.opts.repeats {
                    sys::check_stop()?;
                    let before = sys::cpu_times();
                    let xdp0 = dev.fast_path_redirected();
                    let (c, peer) =
                        crate::sockets::iperf_tcp(&lab.topo, &ep, secs, 5201 + i as u16)?;
                    let after = sys::cpu_times();
                    // XDP devices: the packets (both ways) their XDP program carried.
                    if let (Some(a), Some(b)) = (xdp0, dev.fast_path_redirected()) {
                        m.entry("xdp_redirected")
                            .or_default()
                            .push(b.saturating_sub(a) as f64);
                    }
                    let (busy, busy_ns) =
                        crate::sockets::cpu_busy(&before, &after, lab.topo.dut_cpu);
                    lab.progress(&format!(
                        "tcp {:<18} {:>9.1} Mb/s, {:>5.0} retransmits, DUT cpu {:>3.0}%, server saw {}",
                        dev.name(),
                        c.received_bps / 1e6,
                        c.retransmits,
                        pct(busy),
                        peer.as_deref().unwrap_or("?")
                    ));
                    m.entry("tcp_mbps").or_default().push(c.received_bps / 1e6);
                    m.entry("retransmits").or_default().push(c.retransmits);
                    m.entry("dut_busy_pct").or_default().push(pct(busy));
                    if c.bytes > 0.0 {
                        m.entry("dut_ns_per_byte")
                            .or_default()
                            .push(busy_ns / c.bytes);
                    }
                    if let Some(p) = peer {
                        if !peers.contains(&p) {
                            peers.push(p);
                        }
                    }
                }
                for (k, v) in m {
                    row.metrics.insert(k.into(), Spread::of(&v));
                }
                row.notes.push(format!(
                    "client {} -> {}; the server saw the client as {}",
                    ep.client,
                    ep.target,
                    if peers.is_empty() {
                        "(unknown)".to_string()
                    } else {
                        peers.join(", ")
                    }
                ));
                Ok(row)
            })?;
            self.add(&e, vec![row]);
        }
        self.push(e);
        Ok(())
    }

    fn owd(&mut self) -> Result<()> {
        let n = self.opts.bounces;
        let e = Self::exp(
            "owd",
            "One-way delay by UDP payload (S2 bounce)",
            None,
            format!(
                "S2's method: a UDP packet of each payload size bounced {n} times between a client socket on the tester's \
                 A side and an echo socket on its D side, through the device, timed on one clock; one-way delay = \
                 elapsed / (2 x {n}). Payloads above the 1500-byte MTU fragment. Repeated {} time(s): median [min..max]; \
                 a repetition with a lost packet (1 s timeout) is counted in lost_runs, not in the delay.",
                self.opts.repeats
            ),
        );
        for d in self.opts.devices.clone() {
            let ep = crate::sockets::endpoints(&d)?;
            let rows = self.with_device(&d, |lab, dev| {
                let _peer = crate::sockets::TunnelPeer::start(&lab.topo, dev.name())?;
                let mut rows = Vec::new();
                let ns = lab.topo.ns_tester.clone();
                for &p in &lab.opts.payloads.clone() {
                    let mut v = Vec::new();
                    let mut lost = 0.0;
                    for _ in 0..lab.opts.repeats {
                        sys::check_stop()?;
                        match crate::sockets::owd_bounce(&ns, &ep, 7007, p, n)? {
                            Some(us) => v.push(us),
                            None => lost += 1.0,
                        }
                    }
                    let mut row = Row {
                        device: dev.name().into(),
                        size: p.to_string(),
                        ..Row::default()
                    };
                    if !v.is_empty() {
                        let s = Spread::of(&v);
                        lab.progress(&format!(
                            "owd {:<18} {p:>5} B: {:>8.1} us [{:.1}..{:.1}]",
                            dev.name(),
                            s.median,
                            s.min,
                            s.max
                        ));
                        row.metrics.insert("owd_us".into(), s);
                    } else {
                        lab.progress(&format!("owd {:<18} {p:>5} B: lost", dev.name()));
                        row.notes
                            .push(format!("{p}-byte payload: every repetition lost a packet"));
                    }
                    row.metrics.insert("lost_runs".into(), Spread::of(&[lost]));
                    rows.push(row);
                }
                Ok(rows)
            })?;
            self.add(&e, rows);
        }
        self.push(e);
        Ok(())
    }

    fn http(&mut self) -> Result<()> {
        use crate::sockets::HTTP_FILE_BYTES;
        let (n, c) = (self.opts.requests, self.opts.concurrency);
        let e = Self::exp(
            "http",
            "HTTP (S3: ab against python3 http.server)",
            None,
            format!(
                "S3's method: python3 -m http.server on the tester's D-side address serves a {HTTP_FILE_BYTES}-byte file; \
                 apachebench (ab) on the A side fetches it {n} times, {c} at once, through the device (the tester's own \
                 stack, as tcp). Requests/s, transfer KB/s (ab's Kbytes/sec received), mean time per request (ms), failed \
                 requests, DUT CPU %; the body length is checked (ab's document length and HTML bytes). Repeated {} \
                 time(s): median [min..max]. Both programs run off the DUT CPU.",
                self.opts.repeats
            ),
        );
        if !sys::have("ab") {
            bail!("the http experiment needs apachebench: apt-get install apache2-utils");
        }
        let dir = self.topo.dir.join("http");
        std::fs::create_dir_all(&dir)?;
        let body: Vec<u8> = (0..HTTP_FILE_BYTES).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("s3.bin"), &body)?;
        for d in self.opts.devices.clone() {
            let ep = crate::sockets::endpoints(&d)?;
            let row = self.with_device(&d, |lab, dev| {
                let _peer = crate::sockets::TunnelPeer::start(&lab.topo, dev.name())?;
                let _srv = crate::sockets::HttpServer::start(&lab.topo, &ep, 8080, &dir)?;
                let mut row = Row {
                    device: dev.name().into(),
                    size: "http".into(),
                    ..Row::default()
                };
                let mut m: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
                let mut bad_len = Vec::new();
                for _ in 0..lab.opts.repeats {
                    sys::check_stop()?;
                    let before = sys::cpu_times();
                    let r = crate::sockets::ab_run(&lab.topo, &ep, 8080, "s3.bin", n, c)?;
                    let after = sys::cpu_times();
                    let (busy, _) = crate::sockets::cpu_busy(&before, &after, lab.topo.dut_cpu);
                    lab.progress(&format!(
                        "http {:<18} {:>8.1} req/s, {:>9.0} KB/s, {:>7.2} ms/req, {} failed, DUT cpu {:>3.0}%",
                        dev.name(),
                        r.requests_per_s,
                        r.transfer_kbytes_s,
                        r.time_per_request_ms,
                        r.failed,
                        pct(busy)
                    ));
                    let good = r.document_length == HTTP_FILE_BYTES as f64
                        && r.html_transferred == r.complete * HTTP_FILE_BYTES as f64;
                    if !good {
                        bad_len.push(format!(
                            "document length {} B, {} B of bodies for {} requests",
                            r.document_length, r.html_transferred, r.complete
                        ));
                    }
                    m.entry("requests_per_s").or_default().push(r.requests_per_s);
                    m.entry("transfer_kbytes_s")
                        .or_default()
                        .push(r.transfer_kbytes_s);
                    m.entry("time_per_request_ms")
                        .or_default()
                        .push(r.time_per_request_ms);
                    m.entry("failed_requests").or_default().push(r.failed);
                    m.entry("dut_busy_pct").or_default().push(pct(busy));
                }
                for (k, v) in m {
                    row.metrics.insert(k.into(), Spread::of(&v));
                }
                if bad_len.is_empty() {
                    row.notes.push(format!(
                        "client {} -> {}; every response body was {HTTP_FILE_BYTES} bytes",
                        ep.client, ep.target
                    ));
                } else {
                    row.notes
                        .push(format!("body length mismatch: {}", bad_len.join("; ")));
                }
                Ok(row)
            })?;
            self.add(&e, vec![row]);
        }
        self.push(e);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tester::CpuUse;

    fn trial(received: u64, send_secs: f64, tester_busy: f64, dut_ns: f64) -> Trial {
        Trial {
            received,
            send_secs,
            cpu: CpuUse {
                tester_busy,
                dut_ns_per_pkt: dut_ns,
                ..CpuUse::default()
            },
            ..Trial::default()
        }
    }

    #[test]
    fn cost_by_difference() {
        // Softirq mode: 100,000 packets in 1 s, the tester CPU 60% busy and nothing on the
        // DUT CPU; the tester alone at the same rate was 25% busy. The device: 3.5 us per
        // packet, 35% of a CPU. (Results without the tester's own thread times.)
        let d = ByDifference::of(
            &trial(100_000, 1.0, 0.60, 0.0),
            &trial(100_000, 1.0, 0.25, 0.0),
        );
        assert!((d.cores_ns - 6000.0).abs() < 1e-6);
        assert!((d.tester_alone_ns - 2500.0).abs() < 1e-6);
        assert!((d.device_ns - 3500.0).abs() < 1e-6);
        assert!((d.device_busy - 0.35).abs() < 1e-9);
        // Threaded NAPI: the device's own time on the DUT CPU counts in full, and what the
        // tester paid beyond sending to itself is added (here 500 ns).
        let d = ByDifference::of(
            &trial(200_000, 2.0, 0.30, 2000.0),
            &trial(200_000, 2.0, 0.25, 0.0),
        );
        assert!((d.device_ns - 2500.0).abs() < 1e-6);
        // Nothing received: no division by zero, and a negative share is not reported.
        let d = ByDifference::of(&trial(0, 1.0, 0.1, 0.0), &trial(10, 1.0, 0.5, 0.0));
        assert!(d.device_ns.is_finite());
        assert_eq!(d.device_busy, 0.0);
        // The tester's own thread times win over its CPU's busy share (other processes).
        let mut dev = trial(100_000, 1.0, 1.0, 0.0);
        dev.cpu.tester_ns_per_pkt = 6000.0;
        let mut alone = trial(100_000, 1.0, 1.0, 0.0);
        alone.cpu.tester_ns_per_pkt = 2500.0;
        assert!((ByDifference::of(&dev, &alone).device_ns - 3500.0).abs() < 1e-6);
    }
}
