//! `xlat lab`: measures translators the way the studies in SEEDS.md did, on one machine.
//!
//! A testbed of network namespaces ([`topo`]) puts a device under test ([`device`]: kernel
//! forwarding, kernel NAT with nftables, xlat, TAYGA) between the two ports of a software
//! tester ([`tester`], [`afpacket`]) that sends UDP frames with sequence numbers and timestamps
//! and receives them on one clock. [`experiments`] run RFC 2544 / RFC 9693 style measurements;
//! [`results`] keeps every raw sample in results.json, and [`report`] turns that into a
//! printed table, report.md, report.html and SVG plots.

pub mod addressing;
pub mod afpacket;
pub mod churn;
pub mod cpus;
pub mod device;
pub mod dns;
pub mod experiments;
pub mod failover;
pub mod packet;
pub mod papers;
pub mod progress;
pub mod reload;
pub mod report;
pub mod results;
pub mod scaleout;
pub mod significance;
pub mod sockets;
pub mod stats;
pub mod sys;
pub mod tester;
pub mod topo;
pub mod txframe;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use crate::experiments::{Lab, Opts, Runner, EXPERIMENTS};
use crate::packet::SizeMix;
use crate::results::{Machine, RunResults, Settings, SCHEMA};

/// `xlat lab ...`
#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub cmd: LabCmd,
}

#[derive(Debug, Subcommand)]
pub enum LabCmd {
    /// List experiments, devices and studies.
    List,
    /// Run one experiment (needs root): `quick`, `throughput`, `loss-vs-load`, ...
    Run {
        /// Experiment name (see `xlat lab list`).
        experiment: String,
        #[command(flatten)]
        opts: RunOpts,
    },
    /// Run a study's experiments (s1..s5) with its sizes, loads and devices.
    Reproduce {
        /// s1, s2, s3, s4 or s5.
        study: String,
        #[command(flatten)]
        opts: RunOpts,
    },
    /// Regenerate report.md, report.html and plots from a run's results.json.
    Report {
        /// A results directory (or its results.json).
        dir: PathBuf,
    },
}

/// Options of `run` and `reproduce`; unset ones take the experiment's defaults.
// The field docs are `--help` text, not rustdoc: `results/<timestamp>-<name>/` is a path.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, Args, Default, Clone)]
pub struct RunOpts {
    /// Devices, comma-separated (see `xlat lab list`).
    #[arg(long, value_delimiter = ',')]
    pub devices: Option<Vec<String>>,
    /// Frame sizes in bytes including FCS (64..1518) or `imix`, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<String>>,
    /// Seconds per trial.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Repetitions of each measurement (median and spread are reported).
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Loss threshold of the throughput search, in percent (0 allowed).
    #[arg(long)]
    pub loss: Option<f64>,
    /// Flows (RFC 4814 pseudorandom port pairs) in throughput and load trials.
    #[arg(long)]
    pub flows: Option<u32>,
    /// Nominal link for "percent of load": e.g. 100M, 1G. Default: the tester's ceiling.
    #[arg(long)]
    pub link: Option<String>,
    /// Offered loads in percent of nominal, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub loads: Option<Vec<f64>>,
    /// Session counts for latency-vs-sessions, memory-per-session and cpu; table sizes N for
    /// teardown-rate, throughput-established and setup-rate-table (RFC 9693; up to 16,000,000).
    #[arg(long, value_delimiter = ',')]
    pub sessions: Option<Vec<u32>>,
    /// Fixed offered load in packets/s for cpu and latency-vs-sessions; churn: the
    /// established flows' rate (default 100,000); failover: datagrams/s of each UDP flow
    /// (default 100); reload: the offered rate instead of half the measured throughput;
    /// teardown-rate, throughput-established: phase 1's fill rate (default 50,000).
    #[arg(long)]
    pub rate: Option<f64>,
    /// churn: new flows per second to step through, comma-separated (one frame each);
    /// failover: new sessions/s to measure sync at (default 1000,10000), the first kept
    /// through the failure.
    #[arg(long, value_delimiter = ',')]
    pub new_rates: Option<Vec<f64>>,
    /// Search resolution in percent of the ceiling.
    #[arg(long)]
    pub resolution: Option<f64>,
    /// Most trials per throughput search.
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Microseconds a due frame may wait to leave with others, like a NIC's interrupt
    /// moderation (default 200; 0 sends every frame when due).
    #[arg(long)]
    pub coalesce_us: Option<f64>,
    /// Microseconds the tester's receive ports poll again after a frame instead of being woken
    /// for each one, like a NIC's receive interrupt moderation (default 0: off). On veth the
    /// DUT's transmit otherwise wakes the tester's receive thread on another CPU, on the DUT's
    /// CPU; with this on that cost stays off the device, as across a wire. Delays each
    /// frame's receipt by up to this much: not for latency experiments.
    #[arg(long)]
    pub rx_coalesce_us: Option<f64>,
    /// How the tester receives: `xdp` (default: an XDP program on the receive port counts
    /// the trial's frames and drops them, the packet ring gets a sample for latency) or
    /// `ring` (every frame through the packet ring; costs the tester's core about twice).
    #[arg(long, value_parser = ["xdp", "ring"])]
    pub rx: Option<String>,
    /// How the tester's frames reach the DUT: `skb` (default: sent on the port facing it, an
    /// AF_PACKET skb that veth copies before an XDP program may run) or `xdp` (sent into a veth
    /// pair of the tester's own whose XDP program redirects them out of that port: the DUT
    /// receives XDP frames, as from a NIC's driver, without that copy).
    #[arg(long, value_parser = ["skb", "xdp"])]
    pub ingress: Option<String>,
    /// Directory under which results/<timestamp>-<name>/ is created (default: ./results).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// UDP payload sizes in bytes for owd, comma-separated (default S2's 50..3000).
    #[arg(long, value_delimiter = ',')]
    pub payloads: Option<Vec<usize>>,
    /// Round trips per owd measurement (default 100).
    #[arg(long)]
    pub bounces: Option<usize>,
    /// HTTP requests per ab run, comma-separated: one grid row each (default 1000; reproduce
    /// s3: S3's 1000,2000,3000).
    #[arg(long, value_delimiter = ',')]
    pub requests: Option<Vec<usize>>,
    /// Concurrent HTTP requests, comma-separated: one grid column each (default 10; reproduce
    /// s3: S3's 10,100,200,300).
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Option<Vec<usize>>,
    /// What idle CPUs do during the run: `halt` (default: the machine's idle states; in a VM
    /// a halted vCPU takes tens of microseconds to wake) or `poll` (hold a PM QoS latency of
    /// 0 us, so idle CPUs spin and a device is woken as fast at low load as at high load).
    #[arg(long, value_parser = ["halt", "poll"])]
    pub idle: Option<String>,
    /// CPUs for the tester (a list: `0`, `0,2`, `0-1`): its threads on the first, its
    /// ports' receive work round robin on all (default 0). `--tester-cpu N` is the same.
    #[arg(long, visible_alias = "tester-cpu")]
    pub tester_cpus: Option<String>,
    /// CPUs for the device (a list: `1`, `1-3`, `1,0`; scale-cores adds them in this order): its processes, its ports' receive queues
    /// (one queue and one pinned receive thread per CPU), xlat's workers; scale-cores steps
    /// through 1, 2, 4 ... of them (default 1, or 0 on one CPU). `--dut-cpu N` is the same.
    #[arg(long, visible_alias = "dut-cpu")]
    pub dut_cpus: Option<String>,
    /// scale-out: xlat nodes behind the inside router's ECMP group (2..12, default 3).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// scale-out: subscribers (inside source addresses, default 24); `--flows` is the
    /// streams per subscriber (default 4) and `--duration` the steady-state seconds.
    #[arg(long)]
    pub subscribers: Option<usize>,
    /// scale-out: how the outside router learns the nodes' pools: `bgp` (BIRD in every
    /// node and the router; the default when bird is installed) or `static`.
    #[arg(long, value_parser = ["bgp", "static"])]
    pub routing: Option<String>,
    /// failover: how the active fails, comma-separated: `kill` (its processes SIGKILLed and
    /// its links down) and/or `link-down` (its links down only). Default both.
    #[arg(long, value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
    /// reload: reloads per variant (default 1000).
    #[arg(long)]
    pub count: Option<usize>,
}

/// Runs `xlat lab`. Output goes to stdout; progress to stderr.
pub fn main(args: LabArgs) -> Result<()> {
    match args.cmd {
        LabCmd::List => {
            print!("{}", list_text());
            Ok(())
        }
        LabCmd::Report { dir } => {
            let (d, r) = report::regenerate(&dir)?;
            print!("{}", report::text(&r));
            println!(
                "\nreport: {}/report.md, {}/report.html",
                d.display(),
                d.display()
            );
            Ok(())
        }
        LabCmd::Run { experiment, opts } => {
            let def = experiments::find(&experiment)?;
            let given = [
                ("--nodes", opts.nodes.is_some()),
                ("--subscribers", opts.subscribers.is_some()),
                ("--routing", opts.routing.is_some()),
                ("--variants", opts.variants.is_some()),
                ("--count", opts.count.is_some()),
            ];
            for (flag, set) in given {
                if set && !def.options.contains(&flag) {
                    let owners: Vec<&str> = EXPERIMENTS
                        .iter()
                        .filter(|e| e.options.contains(&flag))
                        .map(|e| e.name)
                        .collect();
                    bail!("{flag} is an option of {} only", owners.join(", "));
                }
            }
            match def.run {
                Runner::Own(run) => run(&opts),
                Runner::Lab(_) => {
                    let plan = Plan {
                        name: experiment.clone(),
                        steps: vec![experiment.clone()],
                        defaults: (def.defaults)(),
                    };
                    execute(plan, &opts).map(|_| ())
                }
            }
        }
        LabCmd::Reproduce { study, opts } => {
            let plan = study_plan(&study)?;
            execute(plan, &opts).map(|_| ())
        }
    }
}

/// What `xlat lab list` prints.
pub fn list_text() -> String {
    let mut s = String::from("Experiments (xlat lab run NAME):\n");
    for e in EXPERIMENTS {
        s.push_str(&format!("  {:<22} {}\n", e.name, e.about));
    }
    s.push_str("\nDevices (--devices a,b,c):\n");
    for d in device::DEVICES {
        s.push_str(&format!("  {:<22} {}\n", d.name, d.about));
    }
    s.push_str("\nStudies (xlat lab reproduce NAME):\n");
    for (n, d) in STUDIES {
        s.push_str(&format!("  {n:<22} {d}\n"));
    }
    s
}

pub const STUDIES: &[(&str, &str)] = &[
    ("s1", "IPv6 routing vs NAT44: loss, rate and latency vs load (10..100% of 100 Mb/s) for its 13 payload sizes"),
    ("s2", "transition mechanisms: throughput and one-way delay by payload size: native IPv4, native IPv6, 6to4, ISATAP, NAT64 (TAYGA, xlat)"),
    ("s3", "NAT64 vs NAT44: throughput at full-size frames, router CPU at a fixed load, RTT with ping, HTTP with apachebench over S3's grid, Welch's t-tests, the DNS64 path (xlat's DNS64 and unbound's)"),
    ("s4", "slimming kernel NAT: loss vs load at 64 B on 100 Mb/s, no hooks / NAT / default firewall / custom hook (xlat-nat44-xdp)"),
    ("s5", "NAT impact: latency vs entries, throughput at 1000 entries, memory per entry, CPU, entry creation rate"),
];

/// Defaults that a plan sets and the command line may override.
#[derive(Debug, Clone)]
pub struct Defaults {
    pub devices: Vec<&'static str>,
    pub sizes: Vec<String>,
    pub duration: f64,
    pub repeats: usize,
    pub flows: u32,
    pub link: Option<&'static str>,
    pub sessions: Vec<u32>,
    pub resolution: f64,
    pub max_steps: usize,
    /// http's grid: requests per ab run x concurrency.
    pub requests: Vec<usize>,
    pub concurrency: Vec<usize>,
    /// The largest `--sessions` the experiment takes: the lab's xlat tables
    /// ([`device::LAB_MAX_SESSIONS`]) unless it sizes the devices for more (RFC 9693's
    /// stateful benchmarks, up to the pool's 16.5M mappings).
    pub max_sessions: u64,
}

/// S3's apachebench grid: requests per run and concurrency.
pub const S3_REQUESTS: &[usize] = &[1000, 2000, 3000];
pub const S3_CONCURRENCY: &[usize] = &[10, 100, 200, 300];

impl Default for Defaults {
    fn default() -> Defaults {
        Defaults {
            devices: vec!["forward4", "kernel-nat44", "xlat-nat44", "xlat-nat44-xdp"],
            sizes: vec!["64".into()],
            duration: 2.0,
            repeats: 1,
            flows: 100,
            link: None,
            sessions: vec![1, 200, 2000, 20000],
            resolution: 2.0,
            max_steps: 8,
            requests: vec![1000],
            concurrency: vec![10],
            max_sessions: device::LAB_MAX_SESSIONS,
        }
    }
}

/// An experiment's defaults (the registry's; plain defaults for an unknown name).
pub fn defaults_for(exp: &str) -> Defaults {
    experiments::find(exp).map_or_else(|_| Defaults::default(), |e| (e.defaults)())
}

/// A named sequence of experiments with defaults.
pub struct Plan {
    pub name: String,
    pub steps: Vec<String>,
    pub defaults: Defaults,
}

/// Frame sizes (with FCS) for IPv4 UDP payload sizes.
fn frames_for_payloads(p: &[usize]) -> Vec<String> {
    p.iter()
        .map(|x| (x + 14 + 20 + 8 + 4).clamp(64, 1518).to_string())
        .collect()
}

/// S1's 13 UDP payload sizes (bytes), every one in reproduce mode.
pub const S1_PAYLOADS: &[usize] = &[
    32, 64, 128, 256, 384, 512, 640, 768, 896, 1024, 1152, 1280, 1408,
];

pub fn study_plan(study: &str) -> Result<Plan> {
    let d = Defaults::default();
    let (steps, defaults): (Vec<&str>, Defaults) = match study {
        "s1" => (
            vec!["loss-vs-load"],
            Defaults {
                devices: vec!["forward6", "kernel-nat44", "xlat-nat44"],
                sizes: frames_for_payloads(S1_PAYLOADS),
                duration: 1.0,
                link: Some("100M"),
                ..d
            },
        ),
        // S2's five mechanisms: native IPv4, native IPv6, 6to4, ISATAP, NAT64 (two of them).
        "s2" => (
            vec!["throughput", "owd"],
            Defaults {
                devices: vec![
                    "forward4",
                    "forward6",
                    "xlat-6to4",
                    "xlat-isatap",
                    "tayga-nat64",
                    "xlat-nat64",
                ],
                sizes: frames_for_payloads(&[50, 100, 250, 500, 750, 1000, 1250, 1472]),
                duration: 1.0,
                ..d
            },
        ),
        // S3's apachebench figures (req/s NAT64 vs NAT44 vs native IPv6) come from http, over
        // S3's grid, three repetitions a cell so the report can test NAT64 against NAT44;
        // dns64 runs S3's DNS64 path over the NAT64 devices (TAYGA, xlat).
        "s3" => (
            vec!["throughput", "cpu", "rtt", "http", "dns64"],
            Defaults {
                requests: S3_REQUESTS.to_vec(),
                concurrency: S3_CONCURRENCY.to_vec(),
                repeats: 3,
                devices: vec![
                    "forward6",
                    "kernel-nat44",
                    "tayga-nat64",
                    "xlat-nat64",
                    "xlat-nat44",
                ],
                sizes: vec!["1518".into()],
                sessions: vec![100],
                ..d
            },
        ),
        // No hooks, slimmed NAT, the default firewall, and the hand-written static NAT hook,
        // played by xlat's XDP fast path.
        "s4" => (
            vec!["loss-vs-load"],
            Defaults {
                devices: vec![
                    "forward4",
                    "kernel-nat44",
                    "kernel-nat44-heavy",
                    "xlat-nat44-xdp",
                ],
                sizes: vec!["64".into()],
                link: Some("100M"),
                ..d
            },
        ),
        "s5" => (
            vec![
                "latency-vs-sessions",
                "throughput",
                "memory-per-session",
                "cpu",
                "setup-rate",
            ],
            Defaults {
                devices: vec!["forward4", "kernel-nat44", "xlat-nat44", "xlat-nat44-xdp"],
                sizes: vec!["64".into(), "imix".into()],
                flows: 1000,
                sessions: vec![1, 200, 2000, 20_000],
                ..d
            },
        ),
        other => bail!("unknown study {other:?}; known: s1, s2, s3, s4, s5"),
    };
    Ok(Plan {
        name: format!("reproduce-{study}"),
        steps: steps.into_iter().map(String::from).collect(),
        defaults,
    })
}

/// Parses "100M", "1G", "10k", "1500000" into bits per second.
pub fn parse_rate(s: &str) -> Option<f64> {
    let s = s.trim();
    let s = s
        .strip_suffix("bps")
        .or_else(|| s.strip_suffix("b"))
        .unwrap_or(s);
    let (num, mul) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1e3),
        'm' | 'M' => (&s[..s.len() - 1], 1e6),
        'g' | 'G' => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v > 0.0 && v.is_finite()).then_some(v * mul)
}

/// Combines a plan's defaults with the command line into experiment options.
pub fn resolve(plan: &Plan, o: &RunOpts) -> Result<Opts> {
    let d = &plan.defaults;
    let devices: Vec<String> = o
        .devices
        .clone()
        .unwrap_or_else(|| d.devices.iter().map(|s| s.to_string()).collect());
    for dev in &devices {
        if !device::DEVICES.iter().any(|x| x.name == dev) {
            bail!(
                "unknown device {dev:?}; known: {}",
                device::DEVICES
                    .iter()
                    .map(|x| x.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if plan.steps.iter().any(|s| s == "cpu-return") {
        for dev in &devices {
            if device::make(dev)?.return_flows(1, 0).is_none() {
                bail!(
                    "cpu-return: {dev} has no return-direction flows (its sessions start inside); \
                     cpu-return measures forward6, xlat-6to4, xlat-6to4-xdp, xlat-isatap and \
                     xlat-isatap-xdp"
                );
            }
        }
    }
    let size_text = o.sizes.clone().unwrap_or_else(|| d.sizes.clone());
    let mut sizes = Vec::new();
    for s in &size_text {
        sizes.push(SizeMix::parse(s).with_context(|| {
            format!("--sizes: {s:?} is not a frame size (64..1518 bytes) or imix")
        })?);
    }
    let duration = o.duration.unwrap_or(d.duration);
    if !(0.05..=3600.0).contains(&duration) {
        bail!("--duration: {duration} s is outside 0.05..3600");
    }
    let loss = o.loss.unwrap_or(0.1);
    if !(0.0..=100.0).contains(&loss) {
        bail!("--loss: {loss}% is outside 0..100");
    }
    let link_bps = match o.link.as_deref().or(d.link) {
        None => None,
        Some(l) => Some(
            parse_rate(l).with_context(|| format!("--link: {l:?}: expected e.g. 100M or 1G"))?,
        ),
    };
    let flows = o.flows.unwrap_or(d.flows);
    if flows == 0 || flows > 4_000_000 {
        bail!("--flows: {flows} is outside 1..4000000");
    }
    let sessions = o.sessions.clone().unwrap_or_else(|| d.sessions.clone());
    if let Some(n) = sessions.iter().find(|&&n| u64::from(n) > d.max_sessions) {
        bail!(
            "--sessions: {n} is more than {} can take (at most {}; teardown-rate, \
             throughput-established and setup-rate-table size the devices for up to {})",
            plan.name,
            d.max_sessions,
            experiments::MAX_TABLE
        );
    }
    let loads = o
        .loads
        .clone()
        .unwrap_or_else(|| (1..=10).map(|x| f64::from(x) * 10.0).collect());
    if loads.iter().any(|l| !(0.1..=1000.0).contains(l)) {
        bail!("--loads: each load is a percentage in 0.1..1000");
    }
    if let Some(r) = o.rate {
        if !(1.0..=1e8).contains(&r) {
            bail!("--rate: {r} pps is outside 1..1e8");
        }
    }
    let new_rates = o
        .new_rates
        .clone()
        .unwrap_or_else(|| experiments::CHURN_NEW_RATES.to_vec());
    if new_rates.is_empty() || new_rates.iter().any(|r| !(0.0..=1e7).contains(r)) {
        bail!("--new-rates: each rate is new flows per second in 0..10000000");
    }
    let resolution = o.resolution.unwrap_or(d.resolution);
    if !(0.01..=50.0).contains(&resolution) {
        bail!("--resolution: {resolution}% is outside 0.01..50");
    }
    let coalesce_us = o.coalesce_us.unwrap_or(200.0);
    if !(0.0..=10_000.0).contains(&coalesce_us) {
        bail!("--coalesce-us: {coalesce_us} is outside 0..10000");
    }
    // veth's receive ring holds 256 frames: at the tester's ceiling (about 1.5 Mpps) a poll
    // every 100 us finds about 150.
    let rx_coalesce_us = o.rx_coalesce_us.unwrap_or(0.0);
    if !(0.0..=100.0).contains(&rx_coalesce_us) {
        bail!(
            "--rx-coalesce-us: {rx_coalesce_us} is outside 0..100 (veth's receive ring of 256 \
             frames would overflow between polls at the tester's rates)"
        );
    }
    if o.rx_coalesce_us.is_some() && plan.steps.iter().any(|s| s == "slow-path") {
        bail!(
            "--rx-coalesce-us: slow-path sets the tester's receive moderation itself, per step \
             (on for its CPU steps, off where the tester's core is the limit); run it without"
        );
    }
    let requests = o.requests.clone().unwrap_or_else(|| d.requests.clone());
    let concurrency = o
        .concurrency
        .clone()
        .unwrap_or_else(|| d.concurrency.clone());
    if requests.is_empty() || requests.iter().any(|n| !(1..=10_000_000).contains(n)) {
        bail!("--requests: each is a number of requests in 1..10000000");
    }
    if concurrency.is_empty() || concurrency.iter().any(|c| !(1..=20_000).contains(c)) {
        bail!("--concurrency: each is a number of requests at once in 1..20000");
    }
    let (least, most) = (
        requests.iter().min().copied().unwrap_or(1),
        concurrency.iter().max().copied().unwrap_or(1),
    );
    if most > least {
        bail!("--concurrency {most} is above --requests {least}: ab cannot have more requests at once than it sends");
    }
    let rx_xdp = match o.rx.as_deref() {
        Some("ring") => false,
        Some(_) => true,
        None => xlat_xdp::lab_rx::built(),
    };
    if rx_xdp && !xlat_xdp::lab_rx::built() {
        bail!("--rx xdp: this xlat was built without the XDP receive counter (clang-14 was missing); use --rx ring");
    }
    let ingress_xdp = o.ingress.as_deref() == Some("xdp");
    if ingress_xdp {
        if let Some(d) = devices.iter().find(|d| d.ends_with("-softirq")) {
            bail!(
                "--ingress xdp: {d} turns NAPI off on the DUT's ports, and veth drops frames \
                 redirected to a port without it; use --ingress skb for the -softirq devices"
            );
        }
    }
    Ok(Opts {
        coalesce: Duration::from_secs_f64(coalesce_us / 1e6),
        rx_coalesce_us,
        rx_xdp,
        ingress_xdp,
        devices,
        sizes,
        trial: Duration::from_secs_f64(duration),
        repeats: o.repeats.unwrap_or(d.repeats).clamp(1, 100),
        threshold: loss / 100.0,
        flows,
        link_bps,
        resolution: resolution / 100.0,
        max_steps: o.max_steps.unwrap_or(d.max_steps).clamp(1, 40),
        loads,
        sessions,
        rate: o.rate,
        new_rates,
        payloads: o
            .payloads
            .clone()
            .unwrap_or_else(|| experiments::OWD_PAYLOADS.to_vec()),
        bounces: o.bounces.unwrap_or(100).clamp(1, 1_000_000),
        requests,
        concurrency,
        count: match o.count {
            None => reload::COUNT,
            Some(n @ 1..=100_000) => n,
            Some(n) => bail!("--count: {n} reloads is outside 1..100000"),
        },
    })
}

/// Builds the testbed, runs the plan, writes results and reports; returns the results
/// directory. Results measured before an error or Ctrl-C are written too (marked incomplete).
pub fn execute(plan: Plan, o: &RunOpts) -> Result<PathBuf> {
    let opts = resolve(&plan, o)?;
    sys::install_stop_handler();
    let n = sys::ncpus();
    let tester_cpus = match &o.tester_cpus {
        Some(t) => cpus::parse_list(t, n).context("--tester-cpus")?,
        None => vec![0],
    };
    let dut_cpus = match &o.dut_cpus {
        Some(t) => cpus::parse_list(t, n).context("--dut-cpus")?,
        None => vec![if n > 1 { 1 } else { 0 }],
    };
    let tester_cpu = tester_cpus[0];
    let shared: Vec<usize> = dut_cpus
        .iter()
        .copied()
        .filter(|c| tester_cpus.contains(c))
        .collect();
    // The lab's own bookkeeping (and the commands it starts) stays off the DUT CPU.
    sys::pin_thread(tester_cpu);
    let base = o.out.clone().unwrap_or_else(|| PathBuf::from("results"));
    let stamp = sys::utc_stamp();
    let dir = base.join(format!("{stamp}-{}", plan.name));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let started = Instant::now();
    let mut res = RunResults {
        schema: SCHEMA,
        name: plan.name.clone(),
        command_line: std::env::args().collect(),
        started_utc: stamp,
        machine: Machine::read(),
        settings: Settings {
            devices: opts.devices.clone(),
            sizes: opts.sizes.iter().map(SizeMix::label).collect(),
            trial_secs: opts.trial.as_secs_f64(),
            repeats: opts.repeats,
            loss_threshold: opts.threshold,
            flows: opts.flows,
            link_bps: opts.link_bps.unwrap_or(0.0),
            resolution: opts.resolution,
            coalesce_us: opts.coalesce.as_secs_f64() * 1e6,
            rx: if opts.rx_xdp { "xdp" } else { "ring" }.into(),
            ingress: if opts.ingress_xdp { "xdp" } else { "skb" }.into(),
            rx_coalesce_us: opts.rx_coalesce_us,
        },
        ..RunResults::default()
    };
    res.versions
        .insert("xlat-lab".into(), env!("CARGO_PKG_VERSION").to_string());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load1: f64 = load
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .unwrap_or(0.0);
    if load1 > 0.5 {
        res.notes.push(format!(
            "the machine was busy before the run (load average {load1:.2}): other processes share the tester and DUT CPUs, so numbers are noisier and lower"
        ));
    }
    if !shared.is_empty() {
        res.notes.push(format!(
            "SHARED CPUs: tester and device share CPU {} (tester CPUs {}, DUT CPUs {}): results mix their costs",
            cpus::format_list(&shared),
            cpus::format_list(&tester_cpus),
            cpus::format_list(&dut_cpus)
        ));
    }
    eprintln!(
        "xlat lab {}: building the testbed (tester CPUs {}, DUT CPUs {}{}); results in {}",
        plan.name,
        cpus::format_list(&tester_cpus),
        cpus::format_list(&dut_cpus),
        if shared.is_empty() { "" } else { ", SHARED" },
        dir.display()
    );
    // Held for the whole run; the kernel drops the request when the file closes.
    let idle_poll = match o.idle.as_deref() {
        Some("poll") => Some(sys::hold_idle_poll()?),
        _ => None,
    };
    let topo = topo::Topo::new(&tester_cpus, &dut_cpus).and_then(|mut t| {
        if opts.ingress_xdp {
            t.add_injection()?;
        }
        if opts.rx_coalesce_us > 0.0 {
            t.moderate_tester_rx(opts.rx_coalesce_us)?;
        }
        Ok(t)
    });
    let outcome = match topo {
        Err(e) => Err(e),
        Ok(t) => {
            res.placement = t.placement();
            if t.inject.is_some() {
                res.placement.push_str(
                    "; the tester's frames reach the DUT as XDP frames redirected from an injection pair on the tester's CPU (--ingress xdp)",
                );
            }
            if opts.rx_coalesce_us > 0.0 {
                res.placement.push_str(&format!(
                    "; the tester's ports facing the DUT poll their receive ring every {:.0} us while frames come, like a NIC's interrupt moderation, so the DUT's transmit does not wake the tester's receive thread (--rx-coalesce-us)",
                    opts.rx_coalesce_us
                ));
            }
            if idle_poll.is_some() {
                res.placement
                    .push_str("; idle CPUs poll (PM QoS CPU latency 0 us held for the run)");
            }
            let mut lab = Lab::new(t, opts, res.clone());
            for step in &plan.steps {
                lab.bar.plan(lab.planned_units(step));
            }
            let mut r = Ok(());
            for step in &plan.steps {
                if let Err(e) = lab.run(step) {
                    r = Err(e);
                    break;
                }
            }
            lab.bar.clear();
            res = lab.res;
            // lab.topo is dropped here: namespaces removed.
            r
        }
    };
    res.wall_secs = started.elapsed().as_secs_f64();
    if let Err(e) = &outcome {
        res.incomplete = Some(format!("{e:#}"));
    }
    finish(&dir, &res)?;
    outcome.map(|_| dir)
}

/// Writes a run's results.json and report (md, html, plots) into `dir` and prints the
/// report; names outcome.json too when the experiment saved one ([`save_outcome`]).
pub(crate) fn finish(dir: &Path, res: &RunResults) -> Result<()> {
    let p = dir.join("results.json");
    let text = serde_json::to_string_pretty(res).context("encoding results")?;
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    report::write(dir, res)?;
    print!("{}", report::text(res));
    let outcome = match dir.join("outcome.json").exists() {
        true => " (and outcome.json)",
        false => "",
    };
    println!(
        "\nresults: {}/results.json{outcome}\nreport:  {}/report.md, {}/report.html",
        dir.display(),
        dir.display(),
        dir.display()
    );
    Ok(())
}

/// Writes an experiment's own record of what happened (`outcome.json`) into `dir`.
pub(crate) fn save_outcome<T: serde::Serialize + ?Sized>(dir: &Path, outcome: &T) -> Result<()> {
    let p = dir.join("outcome.json");
    let text = serde_json::to_string_pretty(outcome).context("encoding the outcome")?;
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("100M"), Some(100e6));
        assert_eq!(parse_rate("1G"), Some(1e9));
        assert_eq!(parse_rate("10kbps"), Some(10e3));
        assert_eq!(parse_rate("1500"), Some(1500.0));
        assert_eq!(parse_rate("x"), None);
        assert_eq!(parse_rate("-5M"), None);
        assert_eq!(parse_rate(""), None);
    }

    #[test]
    fn options_resolve_and_validate() {
        let plan = Plan {
            name: "t".into(),
            steps: vec!["throughput".into()],
            defaults: defaults_for("throughput"),
        };
        let o = resolve(&plan, &RunOpts::default()).unwrap();
        assert_eq!(o.sizes.len(), 3);
        assert_eq!(o.repeats, 3);
        assert!((o.threshold - 0.001).abs() < 1e-12);
        let bad = RunOpts {
            sizes: Some(vec!["12".into()]),
            ..RunOpts::default()
        };
        assert!(resolve(&plan, &bad).is_err());
        let bad = RunOpts {
            devices: Some(vec!["cisco".into()]),
            ..RunOpts::default()
        };
        assert!(resolve(&plan, &bad).is_err());
        let link = RunOpts {
            link: Some("100M".into()),
            ..RunOpts::default()
        };
        assert_eq!(resolve(&plan, &link).unwrap().link_bps, Some(100e6));
        // The tester's receive moderation: off unless asked, at most veth's ring allows, and
        // not for slow-path, which sets it per step.
        assert_eq!(o.rx_coalesce_us, 0.0);
        let rx = |us: f64| RunOpts {
            rx_coalesce_us: Some(us),
            ..RunOpts::default()
        };
        assert_eq!(resolve(&plan, &rx(50.0)).unwrap().rx_coalesce_us, 50.0);
        assert!(resolve(&plan, &rx(150.0)).is_err());
        let sp = Plan {
            name: "slow-path".into(),
            steps: vec!["slow-path".into()],
            defaults: defaults_for("slow-path"),
        };
        assert!(resolve(&sp, &RunOpts::default()).is_ok());
        assert!(resolve(&sp, &rx(50.0)).is_err());
    }

    #[test]
    fn studies_have_plans() {
        for (s, _) in STUDIES {
            let p = study_plan(s).unwrap();
            assert!(!p.steps.is_empty());
            for step in &p.steps {
                assert!(matches!(
                    experiments::find(step).unwrap().run,
                    Runner::Lab(_)
                ));
            }
            resolve(&p, &RunOpts::default()).unwrap();
        }
        assert!(study_plan("s9").is_err());
        // S2 covers its five mechanisms, with throughput and the bounce's one-way delay.
        let s2 = study_plan("s2").unwrap();
        assert_eq!(s2.steps, ["throughput", "owd"]);
        for d in [
            "forward4",
            "forward6",
            "xlat-6to4",
            "xlat-isatap",
            "tayga-nat64",
            "xlat-nat64",
        ] {
            assert!(s2.defaults.devices.contains(&d), "s2 lacks {d}");
            crate::sockets::endpoints(d).unwrap();
        }
        // S1's 32-byte payload is a 78-byte frame; all 13 payloads are distinct frames.
        assert_eq!(frames_for_payloads(&[32])[0], "78");
        let s1 = study_plan("s1").unwrap();
        assert_eq!(s1.defaults.sizes.len(), 13);
        assert_eq!(s1.defaults.sizes.last().unwrap(), "1454");
        // S4's custom hook is xlat's XDP fast path.
        let s4 = study_plan("s4").unwrap();
        assert!(s4.defaults.devices.contains(&"xlat-nat44-xdp"));
        // S3 measures HTTP through every one of its devices.
        let s3 = study_plan("s3").unwrap();
        assert!(s3.steps.iter().any(|s| s == "http"));
        for d in &s3.defaults.devices {
            crate::sockets::endpoints(d).unwrap();
        }
        // S3's DNS64 path runs over its NAT64 devices (TAYGA, as S3's, and xlat's).
        assert!(s3.steps.iter().any(|s| s == "dns64"));
        let nat64: Vec<&&str> = s3
            .defaults
            .devices
            .iter()
            .filter(|d| crate::experiments::is_nat64(d))
            .collect();
        assert_eq!(nat64, [&"tayga-nat64", &"xlat-nat64"]);
    }

    #[test]
    fn http_grid_defaults_and_limits() {
        // `run http`: one cell; `reproduce s3`: S3's 3 x 4 grid, 3 repetitions a cell (the
        // t-test needs two or more a side).
        let run = Plan {
            name: "http".into(),
            steps: vec!["http".into()],
            defaults: defaults_for("http"),
        };
        let o = resolve(&run, &RunOpts::default()).unwrap();
        assert_eq!((o.requests, o.concurrency), (vec![1000], vec![10]));
        let s3 = study_plan("s3").unwrap();
        let o = resolve(&s3, &RunOpts::default()).unwrap();
        assert_eq!(o.requests, [1000, 2000, 3000]);
        assert_eq!(o.concurrency, [10, 100, 200, 300]);
        assert!(o.repeats >= 2);
        let small = RunOpts {
            requests: Some(vec![50, 100]),
            concurrency: Some(vec![5, 50]),
            ..RunOpts::default()
        };
        let o = resolve(&s3, &small).unwrap();
        assert_eq!((o.requests, o.concurrency), (vec![50, 100], vec![5, 50]));
        // ab cannot keep more requests in flight than it sends.
        let bad = RunOpts {
            requests: Some(vec![20, 100]),
            concurrency: Some(vec![50]),
            ..RunOpts::default()
        };
        let e = resolve(&s3, &bad).unwrap_err().to_string();
        assert!(e.contains("--concurrency 50 is above --requests 20"), "{e}");
        let bad = RunOpts {
            requests: Some(vec![0]),
            ..RunOpts::default()
        };
        assert!(resolve(&run, &bad).is_err());
    }

    #[test]
    fn list_mentions_everything() {
        let t = list_text();
        for e in EXPERIMENTS {
            assert!(t.contains(e.name));
        }
        assert!(t.contains("tayga-nat64"));
        assert!(t.contains("xlat-6to4") && t.contains("xlat-isatap"));
    }
}
