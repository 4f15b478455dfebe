//! The experiments: each drives devices through the tester and adds rows to the results.
//!
//! Every experiment first knows the tester's ceiling for the frame sizes it uses (measured
//! once per run on the CA-CD pair, no DUT): it is the top of every throughput search and the
//! 100% of "offered load" unless `--link` gives a nominal link rate.
//!
//! [`EXPERIMENTS`] is the registry: one entry per experiment with its name, what `xlat lab list`
//! says of it, its defaults, its planned units, the options of its own and how it runs; adding
//! an experiment is one entry there and its code. One file per family: throughput (RFC 2544
//! searches), quick (the headline table), load (fixed loads: loss/latency vs load and vs
//! sessions), scale_cores (the device on 1, 2, 4 ... cores), cpu (and cpu-return), memory, setup_rate, churn, slow_path (issue 25's targets table over the others) and stack (the tester's own stack: tcp, http,
//! rtt, owd), dns64 (S3's DNS64 path: DNS64 resolvers on the NAT64 gateway, over the tester's stack), stateful (RFC 9693's tear-down rate and throughput with N connections); reload and the experiments with a testbed of their own (scale-out, failover) live in
//! their modules. A result table's columns and plots are in [`crate::report`], by table name
//! (one experiment may write several tables, e.g. quick's throughput and cost).

mod churn;
mod cpu;
mod dns64;
mod establishment;
mod load;
mod memory;
mod quick;
mod scale_cores;
mod setup_rate;
mod slow_path;
mod stack;
mod stateful;
mod throughput;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

pub use crate::dns::is_nat64;
pub use cpu::ByDifference;
pub use stateful::MAX_TABLE;

use crate::device::{self, Device};
use crate::packet::{line_rate_pps, Flow, SizeMix};
use crate::progress::Progress;
use crate::results::{Ceiling, Experiment, Row, RunResults};
use crate::stats::{self, Spread};
use crate::sys;
use crate::tester::{run_trial, PathSpec, Trial, TrialSpec};
use crate::topo::Topo;
use crate::{Defaults, RunOpts};

/// How an experiment runs.
#[derive(Clone, Copy)]
pub enum Runner {
    /// On the tester/DUT testbed, in a [`Lab`] (and in a study's plan).
    Lab(fn(&mut Lab) -> Result<()>),
    /// With a testbed of its own (scale-out, failover): alone, from the command line.
    Own(fn(&RunOpts) -> Result<()>),
}

/// One experiment: everything about it that is not its measuring code.
pub struct ExperimentDef {
    pub name: &'static str,
    /// What `xlat lab list` says of it.
    pub about: &'static str,
    /// Its defaults (the command line overrides them).
    pub defaults: fn() -> Defaults,
    /// Units of work (a device set up for one experiment and size) for the progress bar, from
    /// the resolved options (devices, frame sizes, repetitions).
    pub units: fn(&Opts) -> usize,
    /// The experiment's own options among [`OWN_OPTIONS`] (the others are refused).
    pub options: &'static [&'static str],
    pub run: Runner,
}

/// Options that belong to some experiments only; [`ExperimentDef::options`] says whose.
pub const OWN_OPTIONS: &[&str] = &[
    "--nodes",
    "--subscribers",
    "--routing",
    "--variants",
    "--count",
];

fn per_device(o: &Opts) -> usize {
    o.devices.len()
}

fn per_device_size(o: &Opts) -> usize {
    o.devices.len() * o.sizes.len().max(1)
}

/// Every experiment, in the order `xlat lab list` shows them: the one place an experiment is
/// named.
pub const EXPERIMENTS: &[ExperimentDef] = &[
    ExperimentDef {
        name: "quick",
        about: "headline table: forward4, kernel-nat44, xlat-nat44 at 64 B and 512 B: throughput, latency, and CPU cost per packet as a ratio to forward4 over 3 interleaved rounds (about 4 min)",
        // Searches now end below the ceiling (the devices, not the tester, are the limit), so
        // they take all their steps: 6 (3% of the ceiling). Two searches per device and size
        // leave time for the interleaved cost rounds, which carry the headline.
        defaults: || Defaults {
            sizes: vec!["64".into(), "512".into()],
            repeats: 2,
            duration: 1.0,
            max_steps: 6,
            resolution: 3.0,
            ..Defaults::default()
        },
        // The searches (a device per size), then the rounds (every size per device setup).
        units: |o| per_device_size(o) + quick::QUICK_ROUNDS * o.devices.len(),
        options: &[],
        run: Runner::Lab(Lab::quick),
    },
    ExperimentDef {
        name: "throughput",
        about: "RFC 2544 binary search for the highest rate with loss <= threshold, per frame size, repeated",
        defaults: || Defaults {
            sizes: vec!["64".into(), "512".into(), "imix".into()],
            repeats: 3,
            ..Defaults::default()
        },
        units: per_device_size,
        options: &[],
        run: Runner::Lab(Lab::throughput),
    },
    ExperimentDef {
        name: "scale-cores",
        about: "the device on 1, 2, 4 ... of the --dut-cpus (a queue, a pinned receive thread and an xlat worker per core, flows spread by hash): RFC 2544 throughput and DUT ns per packet at each step, for forward4, kernel-nat44, xlat-nat44, xlat-nat44-xdp",
        // As quick's searches: 1 s trials, 6 steps; one device set-up per step and size.
        defaults: || Defaults {
            devices: vec!["xlat-nat44", "xlat-nat44-xdp", "kernel-nat44", "forward4"],
            duration: 1.0,
            repeats: 2,
            max_steps: 6,
            resolution: 3.0,
            ..Defaults::default()
        },
        // One step's; scale-cores plans the others when it knows the DUT's CPUs.
        units: per_device_size,
        options: &[],
        run: Runner::Lab(Lab::scale_cores),
    },
    ExperimentDef {
        name: "loss-vs-load",
        about: "loss and received rate at offered load 10%..100% (S1 figures)",
        defaults: Defaults::default,
        units: per_device_size,
        options: &[],
        run: Runner::Lab(|lab| lab.vs_load("loss-vs-load")),
    },
    ExperimentDef {
        name: "latency-vs-load",
        about: "latency percentiles at offered load 10%..100% (S1 figures)",
        defaults: Defaults::default,
        units: per_device_size,
        options: &[],
        run: Runner::Lab(|lab| lab.vs_load("latency-vs-load")),
    },
    ExperimentDef {
        name: "latency-vs-sessions",
        about: "latency at a fixed load with 1, 200, 2,000, 20,000 ... active sessions (S5 table 4.1)",
        defaults: Defaults::default,
        units: per_device_size,
        options: &[],
        run: Runner::Lab(Lab::latency_vs_sessions),
    },
    ExperimentDef {
        name: "memory-per-session",
        about: "device memory at N sessions minus baseline, bytes per session (S5 table 4.3)",
        defaults: || Defaults {
            sessions: vec![1000, 10_000, 50_000, 100_000],
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(Lab::memory_per_session),
    },
    ExperimentDef {
        name: "cpu",
        about: "DUT CPU busy share and ns per forwarded packet at a fixed load, by frame size and sessions (S5 table 4.4)",
        defaults: || Defaults {
            sizes: vec!["64".into(), "1024".into()],
            sessions: vec![1, 1000, 10_000],
            ..Defaults::default()
        },
        units: per_device_size,
        options: &[],
        run: Runner::Lab(Lab::cpu),
    },
    ExperimentDef {
        name: "cpu-return",
        about: "cpu in the return direction (outside port to inside) for the stateless devices: forward6, and the 6to4 and ISATAP endpoints' encapsulation",
        defaults: || Defaults {
            devices: vec!["forward6", "xlat-6to4", "xlat-6to4-xdp"],
            sizes: vec!["128".into()],
            sessions: vec![1000],
            ..Defaults::default()
        },
        units: per_device_size,
        options: &[],
        run: Runner::Lab(|lab| lab.receiving_inside(Lab::cpu_return)),
    },
    ExperimentDef {
        name: "slow-path",
        about: "the slow path's targets (issue 25) in one run: setup-rate, cpu, cpu-return, tcp and churn over the devices each target names (its own devices and sizes) in --repeats interleaved rounds, then each target's median round against its bound and whether it was met (about 4 min at 3 rounds)",
        defaults: || Defaults {
            repeats: 3,
            ..Defaults::default()
        },
        units: |o| slow_path::units() * o.repeats.max(1),
        options: &[],
        run: Runner::Lab(Lab::slow_path),
    },
    ExperimentDef {
        name: "setup-rate",
        about: "highest rate of new sessions per second with loss <= threshold (RFC 9693)",
        defaults: || Defaults {
            duration: 1.0,
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(Lab::setup_rate),
    },
    ExperimentDef {
        name: "teardown-rate",
        about: "RFC 9693 connection tear-down rate: the table filled with N connections (--sessions), then the device deletes it all (conntrack -F, xlat's clear), N / seconds; validated empty after",
        defaults: || Defaults {
            devices: vec!["kernel-nat44", "xlat-nat44", "xlat-nat44-xdp"],
            sessions: vec![1000, 100_000, 1_000_000],
            repeats: 3,
            max_sessions: MAX_TABLE,
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(Lab::teardown_rate),
    },
    ExperimentDef {
        name: "setup-rate-table",
        about: "RFC 9693 maximum connection establishment rate at N connections (--sessions): the highest rate at which N new flows, one frame each, all pass and the table then holds N",
        defaults: || Defaults {
            devices: vec!["kernel-nat44", "xlat-nat44", "xlat-nat44-xdp"],
            sessions: vec![1000, 100_000, 1_000_000],
            max_sessions: MAX_TABLE,
            repeats: 1,
            max_steps: 7,
            resolution: 3.0,
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(Lab::setup_rate_table),
    },
    ExperimentDef {
        name: "throughput-established",
        about: "RFC 9693 throughput with N established connections (--sessions): the table filled, then an RFC 2544 search with frames of those N flows only; validated: still N entries after",
        defaults: || Defaults {
            devices: vec!["kernel-nat44", "xlat-nat44", "xlat-nat44-xdp"],
            sessions: vec![1000, 100_000, 1_000_000],
            max_sessions: MAX_TABLE,
            duration: 1.0,
            repeats: 2,
            max_steps: 7,
            resolution: 3.0,
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(Lab::throughput_established),
    },
    ExperimentDef {
        name: "churn",
        about: "established flows at a fixed rate while never-seen flows arrive at stepped rates: loss and latency of each group, new flows delivered per second, device CPU",
        defaults: || Defaults {
            devices: vec!["kernel-nat44", "xlat-nat44", "xlat-nat44-xdp"],
            flows: 1000,
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(Lab::churn),
    },
    ExperimentDef {
        name: "tcp",
        about: "iperf3 TCP through the device (tester's own stack): Mb/s, retransmits, DUT CPU, ns per byte",
        defaults: || Defaults {
            duration: 5.0,
            repeats: 3,
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(|lab| lab.on_stack(|lab| lab.receiving_inside(Lab::tcp))),
    },
    ExperimentDef {
        name: "http",
        about: "S3's HTTP test: ab fetches a 173,225-byte file from python3 http.server through the device, over a grid of --requests x --concurrency: requests/s, KB/s",
        defaults: || Defaults {
            repeats: 3,
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(|lab| lab.on_stack(|lab| lab.receiving_inside(Lab::http))),
    },
    ExperimentDef {
        name: "rtt",
        about: "S3's ping: round-trip time of 21 ICMP echoes (0.2 s apart) from the tester's A side to its D side through the device: median [min..max], mean, loss",
        defaults: Defaults::default,
        units: per_device,
        options: &[],
        run: Runner::Lab(|lab| lab.on_stack(Lab::rtt)),
    },
    ExperimentDef {
        name: "dns64",
        about: "S3's DNS64 path over a NAT64 device: the IPv6 client's resolver is xlat's DNS64 ([dns64] in the gateway) or unbound's dns64 module, over a real authoritative server (unbound auth-zone) on the IPv4 side: dnsperf AAAA queries/s, latency and loss for never-asked and cached names, every answer checked against pref64 + A (RFC 6147, RFC 6052 2.2) with dig, and ab fetching S3's page by name beside by address",
        defaults: || Defaults {
            devices: vec!["xlat-nat64"],
            duration: 5.0,
            repeats: 3,
            ..Defaults::default()
        },
        // Each device set up once per resolver (xlat's, unbound's).
        units: |o| 2 * o.devices.len(),
        options: &[],
        run: Runner::Lab(|lab| lab.on_stack(Lab::dns64)),
    },
    ExperimentDef {
        name: "owd",
        about: "one-way delay by UDP payload size 50..3000 B, S2's bounce: RTT/(2N) over N round trips",
        defaults: || Defaults {
            repeats: 5,
            ..Defaults::default()
        },
        units: per_device,
        options: &[],
        run: Runner::Lab(|lab| lab.on_stack(Lab::owd)),
    },
    ExperimentDef {
        name: "reload",
        about: "xlat-nat44 with and without the XDP fast path at half its throughput while `xlat reload` applies a changed [timeouts] udp, then a pool address added and removed, --count times (default 1000): loss against baselines, reload round trip p50/p99/max",
        // One search for the rate (as quick's: 1 s trials, 6 steps), then the windows.
        defaults: || Defaults {
            devices: crate::reload::DEVICES.to_vec(),
            duration: 1.0,
            max_steps: 6,
            resolution: 3.0,
            ..Defaults::default()
        },
        units: per_device,
        options: &["--count"],
        run: Runner::Lab(Lab::reload),
    },
    ExperimentDef {
        name: "scale-out",
        about: "N xlat NAT44 nodes behind a resilient ECMP group, pools announced by BGP (BIRD): spread of subscribers, load and CPU per node, a node killed and restarted, a new node added (--nodes 3 --subscribers 24 --flows 4)",
        defaults: Defaults::default,
        units: per_device,
        options: &["--nodes", "--subscribers", "--routing"],
        run: Runner::Own(|o| crate::scaleout::main_run(o).map(|_| ())),
    },
    ExperimentDef {
        name: "failover",
        about: "an active/standby NAT44 pair with keepalived loses its active under established UDP flows, a download and iperf3: xlat [sync] vs kernel NAT + conntrackd, ports kept or random (--devices xlat-nat44,kernel-nat44,kernel-nat44-random --variants kill,link-down --flows 50 --new-rates 1000,10000)",
        defaults: Defaults::default,
        units: per_device,
        options: &["--variants"],
        run: Runner::Own(|o| crate::failover::main_run(o).map(|_| ())),
    },
];

/// The registry's entry for `name`, or an error that lists the known ones.
pub fn find(name: &str) -> Result<&'static ExperimentDef> {
    match EXPERIMENTS.iter().find(|e| e.name == name) {
        Some(e) => Ok(e),
        None => bail!(
            "unknown experiment {name:?}; `xlat lab list` shows them: {}",
            EXPERIMENTS
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

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
    /// The NIC-like ingress (`--ingress xdp`, see topo::Injection).
    pub ingress_xdp: bool,
    /// The tester's receive moderation, microseconds (`--rx-coalesce-us`, see
    /// topo::Topo::moderate_tester_rx); 0: off.
    pub rx_coalesce_us: f64,
    /// UDP payload sizes for owd (bytes).
    pub payloads: Vec<usize>,
    /// Round trips per owd measurement.
    pub bounces: usize,
    /// http's grid: requests per ab run, and how many at once (every pair is a cell).
    pub requests: Vec<usize>,
    pub concurrency: Vec<usize>,
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
    /// Trials send from the tester's outside port to its inside port (cpu-return): the
    /// return direction of the stateless devices ([`Device::return_flows`]).
    from_outside: bool,
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
            from_outside: false,
        }
    }

    pub(crate) fn progress(&self, what: &str) {
        self.bar.line(what);
    }

    /// Units of work (a device set up for one experiment and size) experiment `name` has,
    /// for the progress bar.
    pub fn planned_units(&self, name: &str) -> usize {
        find(name).map_or(per_device_size(&self.opts), |e| (e.units)(&self.opts))
    }

    /// The path through the DUT: inside port to outside port, or the other way round while
    /// [`Lab::from_outside`] is set; through the injection pair with `--ingress xdp`.
    pub(crate) fn dut_path(&self, v6: bool) -> PathSpec {
        let t = &self.topo;
        let (tx, rx, dut_rx) = if self.from_outside {
            (&t.d, &t.a, &t.ud)
        } else {
            (&t.a, &t.d, &t.ua)
        };
        // With the NIC-like ingress the frames go into the injection pair and leave through
        // the same port as XDP frames; their Ethernet source stays the port's.
        let tx_dev = match &t.inject {
            Some(i) if self.from_outside => i.id.dev.clone(),
            Some(i) => i.ia.dev.clone(),
            None => tx.dev.clone(),
        };
        PathSpec {
            ns: t.ns_tester.clone(),
            tx_dev,
            rx_dev: rx.dev.clone(),
            src_mac: tx.mac,
            dst_mac: dut_rx.mac,
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
            // Spread by flow over the DUT's queues; the tester's loop (CA -> CD) has one
            // queue and keeps the qdisc bypass.
            tx_spread: self.topo.queues() > 1 && path.tx_dev != self.topo.ca.dev,
            path,
            flows,
            sizes: size.clone(),
            rate_pps: rate,
            duration,
            max_packets: None,
            tester_cpu: self.topo.tester_cpu,
            dut_cpus: self.topo.device_cpus(),
            dut_pids: pids,
            dut_kernel_pids: self.topo.dut_napi_pids(),
            tester_kernel_pids: self.topo.tester_kernel_pids(),
            drain: Duration::from_millis(300),
            coalesce: self.opts.coalesce,
            rx_xdp: self.opts.rx_xdp,
            smooth: false,
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
            "trial {:>3}: {what:<34} {} {rate}: rx {:>9.0} pps, loss {:>7.3}%, p50 {:>8.1} us, DUT cpu {:>3.0}% (core {:>3.0}%)",
            self.trials_done,
            spec.sizes.label(),
            t.rx_pps,
            pct(t.loss),
            t.latency.p50_us,
            // The device's share of the DUT core over the send window and the drain after it
            // (up to 300 ms waiting for frames a lossy trial never delivers: at most about
            // 75 % then), and the core's busy share over the send window alone (/proc/stat).
            // A lossy trial's first figure is not idle capacity (docs/PERFORMANCE-LOG.md,
            // step 35); the second is what the core had to spare while frames arrived.
            pct(t.cpu.device_busy),
            pct(t.cpu.dut_busy)
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
            crate::packet::flows_v4(self.opts.flows, 0, crate::addressing::D_ADDR.octets())
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

    /// Sends each flow twice at a modest rate so the device holds a session for each, on
    /// its fast path where it has one.
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
        // Every flow twice: an XDP device hands a UDP session to its fast path at its second
        // packet (`[dataplane] offload_udp_after`), and a warm flow is an established one.
        let nflows = flows.len();
        let n = 2 * nflows as u64;
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
        let t = self.trial(&spec, &format!("{} warm-up ({nflows} flows)", dev.name()))?;
        if t.received < t.sent {
            self.progress(&format!(
                "warning: warm-up lost {} of {} packets; sending every flow twice more",
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

    /// Adds rows to the results as soon as they are measured, so an interrupted run keeps them.
    pub(crate) fn add(&mut self, header: &Experiment, rows: Vec<Row>) {
        let mut e = header.clone();
        e.rows = rows;
        self.push(e);
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
        match find(name)?.run {
            Runner::Lab(f) => f(self),
            Runner::Own(_) => {
                bail!("{name} builds a testbed of its own: run it alone (`xlat lab run {name}`)")
            }
        }
    }

    /// Runs `f` with the tester's own IP stack on (tcp, http, rtt, owd), turning it off after.
    fn on_stack(&mut self, f: fn(&mut Lab) -> Result<()>) -> Result<()> {
        self.topo.stack_on()?;
        let r = f(self);
        let off = self.topo.stack_off();
        r?;
        off
    }

    /// Runs `f` with the tester's inside port receiving in threaded NAPI on the tester's CPUs
    /// ([`Topo::tester_inside_rx_threaded`]), as its outside port always does, turning it back
    /// after: for the experiments whose traffic comes back through the DUT in bulk (cpu-return's
    /// frames, tcp's ACKs, http's responses). In veth's default mode that receive work -- for
    /// tcp and http the tester's own TCP stack, which sends the next segments from it -- ran in
    /// softirq on the DUT CPU that transmitted the frames, and was charged to the device.
    fn receiving_inside(&mut self, f: fn(&mut Lab) -> Result<()>) -> Result<()> {
        self.topo.tester_inside_rx_threaded(true)?;
        let r = f(self);
        let off = self.topo.tester_inside_rx_threaded(false);
        r?;
        off
    }
}

/// What a softirq-mode row's CPU columns mean.
const SOFTIRQ_NOTE: &str = "the DUT's ports in veth's default receive mode: the device's work ran in softirq on the tester's CPU; \
     DUT ns/pkt and device CPU % are by difference: (tester CPU + the device's DUT CPU time) per packet minus the tester's own \
     per packet sent to itself (CA -> CD) at the same rate right after";
