//! quick: the headline table -- forward4, kernel-nat44 and the xlat devices at 64 and 512 bytes.
//!
//! First each device's throughput (RFC 2544 searches, median [min..max] of the searches). Then
//! the figure that holds on a machine whose speed drifts: each device's CPU cost per packet at
//! one fixed offered load, measured interleaved (forward4, kernel-nat44, xlat-nat44, ...,
//! then again, [`QUICK_ROUNDS`] rounds) and divided by the same round's baseline (forward4):
//! a slow minute slows every device of its round alike, so the ratio stays put while the
//! nanoseconds move. A trial the hypervisor or other processes disturbed beyond
//! [`DISTURBED_SHARE`] of the DUT CPU is repeated once. The run ends with one sentence per
//! comparison: the median ratio with its spread over the rounds.

use super::*;
use crate::tester::CpuUse;

/// Rounds of quick's interleaved cost measurement (each round sets up every device once).
pub const QUICK_ROUNDS: usize = 3;

/// A trial whose DUT CPU lost more than this share to the hypervisor (steal) and other
/// processes together is disturbed: quick repeats it once and keeps the quieter of the two.
pub const DISTURBED_SHARE: f64 = 0.20;

/// The device every other is divided by, when it is in the run (else the first device).
pub const BASELINE: &str = "forward4";

/// The device xlat's devices are compared with, when it is in the run.
pub const REFERENCE: &str = "kernel-nat44";

/// Share of the DUT CPU a trial lost to steal and other processes, 0..1 (and more: steal is
/// a share of the vCPU's time, other load of what the guest saw).
pub fn disturbance(cpu: &CpuUse) -> f64 {
    cpu.dut_steal.max(0.0) + cpu.dut_other.max(0.0)
}

/// Is a trial with this CPU use disturbed enough to repeat?
pub fn disturbed(cpu: &CpuUse) -> bool {
    disturbance(cpu) > DISTURBED_SHARE
}

/// Per round, `device / baseline`; rounds where either is missing or not positive are left
/// out (a round that did not measure both says nothing about their ratio).
pub fn round_ratios(device: &[Option<f64>], baseline: &[Option<f64>]) -> Vec<f64> {
    device
        .iter()
        .zip(baseline)
        .filter_map(|(d, b)| match (d, b) {
            (Some(d), Some(b)) if *d > 0.0 && *b > 0.0 && d.is_finite() && b.is_finite() => {
                Some(d / b)
            }
            _ => None,
        })
        .collect()
}

/// A ratio's spread over the rounds: "[1.31..1.55, 3 rounds]" (with `rounds`), "[1.31..1.55]".
pub fn spread_text(s: &Spread, rounds: bool) -> String {
    if !rounds {
        return format!("[{:.2}..{:.2}]", s.min, s.max);
    }
    let word = if s.n == 1 { "round" } else { "rounds" };
    format!("[{:.2}..{:.2}, {} {word}]", s.min, s.max, s.n)
}

/// Does a ratio's spread over the rounds reach 1 (the two costs not told apart)?
fn spans_one(s: &Spread) -> bool {
    s.n > 0 && s.min <= 1.0 && s.max >= 1.0
}

/// One comparison as a sentence: `device` against `base` (and, when given, against a
/// reference device too, with the reference's own ratio to `base`), each ratio the median
/// over the rounds with its [min..max]. E.g. "64 B: xlat-nat44 costs 1.42x forward4 per
/// packet [1.31..1.55, 3 rounds]; kernel-nat44 1.20x [1.10..1.30]: xlat-nat44 costs 1.18x
/// kernel-nat44 [1.12..1.25]."
pub fn sentence(
    size: &str,
    device: &str,
    base: &str,
    to_base: &Spread,
    reference: Option<(&str, &Spread, &Spread)>,
) -> String {
    let mut s = format!(
        "{size}: {device} costs {:.2}x {base} per packet {}",
        to_base.median,
        spread_text(to_base, true)
    );
    let last = match reference {
        Some((r, r_to_base, to_ref)) => {
            s.push_str(&format!(
                "; {r} {:.2}x {}: {device} costs {:.2}x {r} {}",
                r_to_base.median,
                spread_text(r_to_base, false),
                to_ref.median,
                spread_text(to_ref, false)
            ));
            to_ref
        }
        None => to_base,
    };
    if spans_one(last) {
        s.push_str(" -- the rounds do not tell them apart");
    }
    s.push('.');
    s
}

/// What the cost rounds measured for one device and size.
#[derive(Default)]
struct Cell {
    /// The kept trial of each round (None: the round did not reach this device).
    trials: Vec<Option<Trial>>,
    /// DUT ns per packet of each round.
    ns: Vec<Option<f64>>,
    /// The rounds whose trial was repeated: "round 2 35% -> 12%".
    notes: Vec<String>,
}

impl Lab {
    pub(super) fn quick(&mut self) -> Result<()> {
        let e = Self::exp(
            "throughput",
            "Throughput (RFC 2544; median [min..max] of the searches)",
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
        // One load every device carries, fixed for the run: half the slowest one's throughput.
        let rates: Vec<f64> = sizes
            .iter()
            .map(|s| {
                let min = by_size
                    .get(&s.label())
                    .and_then(|v| v.iter().copied().filter(|x| *x > 0.0).reduce(f64::min))
                    .unwrap_or(10_000.0);
                (min * 0.5).max(1000.0).round()
            })
            .collect();
        let devices = self.opts.devices.clone();
        let base = if devices.iter().any(|d| d == BASELINE) {
            BASELINE.to_string()
        } else {
            devices.first().cloned().unwrap_or_default()
        };
        let c = Self::exp(
            "cost",
            "CPU cost per packet at a fixed load, interleaved rounds",
            None,
            format!(
                "Each device at one offered load per size, fixed for the run: half of the lowest throughput measured \
                 for that size (so no device is overloaded). The devices take turns ({}), {QUICK_ROUNDS} rounds, each \
                 device set up afresh, warmed and measured with one trial of at least 2 s per size: one-way latency \
                 (one clock), the DUT CPU's busy share, and the device's CPU nanoseconds per forwarded packet \
                 (softirq and irq time of the DUT CPU plus the device's threads and processes, divided by packets \
                 received). `x {base}/pkt` is the device's ns/pkt divided by {base}'s in the same round: the \
                 machine's drift between rounds cancels. Every cell is the median [min..max] over the rounds. \
                 A trial whose DUT CPU lost more than {:.0}% to steal and other processes together is repeated \
                 once and the quieter of the two kept (the notes say which).",
                devices.join(", "),
                pct(DISTURBED_SHARE)
            ),
        );
        let mut cells: BTreeMap<(String, String), Cell> = BTreeMap::new();
        for round in 0..QUICK_ROUNDS {
            for d in &devices {
                let flows = self.opts.flows;
                let measured = self.with_device(d, |lab, dev| {
                    let mut out = Vec::new();
                    for (s, &rate) in sizes.iter().zip(&rates) {
                        let fl = Arc::new(dev.flows(flows, 0));
                        lab.warm(dev, fl.clone(), s)?;
                        out.push(lab.cost_trial(dev, s, fl, rate, round)?);
                    }
                    Ok(out)
                })?;
                for (s, (t, ns, note)) in sizes.iter().zip(measured) {
                    let cell = cells.entry((d.clone(), s.label())).or_default();
                    cell.trials.resize(round, None);
                    cell.ns.resize(round, None);
                    cell.trials.push(Some(t));
                    cell.ns.push(Some(ns));
                    cell.notes.extend(note);
                }
            }
            // Rows after every round, so an interrupted run keeps the rounds it finished.
            let rows = cost_rows(&devices, &sizes, &rates, &base, &cells);
            self.set_rows(&c, rows);
            self.res.conclusions = conclusions(&devices, &sizes, &base, &cells);
        }
        Ok(())
    }

    /// One cost trial at `rate`, repeated once if it was disturbed (the quieter one kept):
    /// the trial, the device's ns/pkt and a note if it was repeated.
    fn cost_trial(
        &mut self,
        dev: &mut dyn Device,
        size: &SizeMix,
        flows: Arc<Vec<Flow>>,
        rate: f64,
        round: usize,
    ) -> Result<(Trial, f64, Option<String>)> {
        let v6 = dev.v6_in();
        // CPU time comes in scheduler ticks: a longer trial counts more of them.
        let dur = self.opts.trial.max(Duration::from_secs(2));
        let label = format!("{} round {} at {rate:.0} pps", dev.name(), round + 1);
        let spec = self.spec(
            self.dut_path(v6),
            flows.clone(),
            size,
            Some(rate),
            dur,
            dev.pids(),
        );
        let mut t = self.trial(&spec, &label)?;
        dev.check_alive()?;
        let mut note = None;
        if disturbed(&t.cpu) {
            let first = disturbance(&t.cpu);
            self.progress(&format!(
                "{}: round {} disturbed ({:.0}% steal + {:.0}% other load on the DUT CPU): repeating once",
                dev.name(),
                round + 1,
                pct(t.cpu.dut_steal),
                pct(t.cpu.dut_other)
            ));
            let again = self.trial(&spec, &format!("{label} (again)"))?;
            dev.check_alive()?;
            let second = disturbance(&again.cpu);
            note = Some(format!(
                "round {} {:.0}% -> {:.0}%",
                round + 1,
                pct(first),
                pct(second)
            ));
            if second < first {
                t = again;
            }
        }
        let ns = if dev.rx_on_sender() {
            let alone = self.tester_alone(flows, size, rate, v6)?;
            ByDifference::of(&t, &alone).device_ns
        } else {
            t.cpu.dut_ns_per_pkt
        };
        Ok((t, ns, note))
    }

    /// Replaces an experiment's rows (adding the experiment if it is not there yet).
    fn set_rows(&mut self, header: &Experiment, rows: Vec<Row>) {
        let mut e = header.clone();
        e.rows = rows;
        match self.res.experiments.iter_mut().find(|x| x.name == e.name) {
            Some(x) => *x = e,
            None => self.res.experiments.push(e),
        }
    }
}

/// The cost table's rows from the rounds so far.
fn cost_rows(
    devices: &[String],
    sizes: &[SizeMix],
    rates: &[f64],
    base: &str,
    cells: &BTreeMap<(String, String), Cell>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for d in devices {
        for (s, &rate) in sizes.iter().zip(rates) {
            let Some(cell) = cells.get(&(d.clone(), s.label())) else {
                continue;
            };
            let trials: Vec<&Trial> = cell.trials.iter().flatten().collect();
            let mut row = Row {
                device: d.clone(),
                size: s.label(),
                ..Row::default()
            };
            let of = |f: &dyn Fn(&Trial) -> f64| {
                Spread::of(&trials.iter().map(|t| f(t)).collect::<Vec<_>>())
            };
            for (k, v) in [
                ("offered_pps", Spread::of(&[rate])),
                ("loss_pct", of(&|t| pct(t.loss))),
                ("latency_p50_us", of(&|t| t.latency.p50_us)),
                ("latency_p99_us", of(&|t| t.latency.p99_us)),
                ("dut_busy_pct", of(&|t| pct(t.cpu.device_busy))),
                ("proc_ns_per_pkt", of(&|t| t.cpu.proc_ns_per_pkt)),
                ("dut_other_pct", of(&|t| pct(t.cpu.dut_other))),
                ("dut_steal_pct", of(&|t| pct(t.cpu.dut_steal))),
                ("dut_cpu_all_pct", of(&|t| pct(t.cpu.dut_busy))),
                (
                    "dut_ns_per_pkt",
                    Spread::of(&cell.ns.iter().flatten().copied().collect::<Vec<_>>()),
                ),
            ] {
                row.metrics.insert(k.into(), v);
            }
            if let Some(b) = cells.get(&(base.to_string(), s.label())) {
                let r = round_ratios(&cell.ns, &b.ns);
                row.metrics.insert("ns_ratio".into(), Spread::of(&r));
            }
            row.metrics
                .insert("rounds".into(), Spread::of(&[trials.len() as f64]));
            if base != BASELINE && d == base {
                row.notes.push(format!(
                    "{BASELINE} was not in the run: the ratios are to {base}"
                ));
            }
            if trials.iter().any(|t| t.sender_short) {
                row.tester_limited = true;
                row.notes
                    .push("the tester could not offer this load loss-free".into());
            }
            if !cell.notes.is_empty() {
                row.notes.push(format!(
                    "disturbed trials repeated once (steal + other load on the DUT CPU, first -> repeat; the quieter kept): {}",
                    cell.notes.join(", ")
                ));
            }
            if dev_rx_on_sender(d) {
                row.notes.push(SOFTIRQ_NOTE.into());
            }
            row.trials = trials.into_iter().cloned().collect();
            rows.push(row);
        }
    }
    rows
}

/// Does the named device's receive work run on the sender's CPU?
fn dev_rx_on_sender(name: &str) -> bool {
    device::make(name).is_ok_and(|d| d.rx_on_sender())
}

/// One sentence per comparison: every device against the baseline, the xlat devices also
/// against kernel-nat44 (per round, then median and spread).
fn conclusions(
    devices: &[String],
    sizes: &[SizeMix],
    base: &str,
    cells: &BTreeMap<(String, String), Cell>,
) -> Vec<String> {
    let mut out = Vec::new();
    for s in sizes {
        let key = |d: &str| (d.to_string(), s.label());
        let Some(b) = cells.get(&key(base)) else {
            continue;
        };
        let reference = cells.get(&key(REFERENCE));
        for d in devices.iter().filter(|d| *d != base) {
            let Some(cell) = cells.get(&key(d)) else {
                continue;
            };
            let to_base = Spread::of(&round_ratios(&cell.ns, &b.ns));
            if to_base.n == 0 {
                continue;
            }
            let against = match reference {
                Some(r) if d.starts_with("xlat") && base != REFERENCE => {
                    let r_to_base = Spread::of(&round_ratios(&r.ns, &b.ns));
                    let to_ref = Spread::of(&round_ratios(&cell.ns, &r.ns));
                    (r_to_base.n > 0 && to_ref.n > 0).then_some((r_to_base, to_ref))
                }
                _ => None,
            };
            out.push(sentence(
                &size_label(s),
                d,
                base,
                &to_base,
                against.as_ref().map(|(a, b)| (REFERENCE, a, b)),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_pair_rounds_and_skip_the_unmeasured() {
        // forward4 1,850 / 2,100 / 1,700 ns; xlat-nat44 2,630 / 3,150 / 2,210 ns: the slow
        // second round slows both, the ratio holds (1.42, 1.50, 1.30).
        let base = [Some(1850.0), Some(2100.0), Some(1700.0)];
        let xlat = [Some(2627.0), Some(3150.0), Some(2210.0)];
        let r = round_ratios(&xlat, &base);
        assert_eq!(r.len(), 3);
        assert!((r[0] - 1.42).abs() < 1e-9 && (r[1] - 1.5).abs() < 1e-9);
        let s = Spread::of(&r);
        assert!((s.median - 1.42).abs() < 1e-9);
        assert!((s.min - 1.3).abs() < 1e-9 && (s.max - 1.5).abs() < 1e-9);
        // A round without the device (interrupted), a zero and a NaN say nothing.
        let r = round_ratios(&[Some(3000.0), None, Some(0.0)], &base);
        assert_eq!(r.len(), 1);
        assert!(round_ratios(&[Some(f64::NAN)], &[Some(1.0)]).is_empty());
        // Fewer rounds on one side: only the rounds both have.
        assert_eq!(round_ratios(&xlat, &base[..1]).len(), 1);
    }

    #[test]
    fn a_trial_is_repeated_past_a_fifth_of_the_dut_cpu() {
        let cpu = |steal: f64, other: f64| CpuUse {
            dut_steal: steal,
            dut_other: other,
            ..CpuUse::default()
        };
        assert!(!disturbed(&cpu(0.0, 0.0)));
        assert!(!disturbed(&cpu(0.18, 0.0))); // the 18% steal of issue 27's run alone
        assert!(!disturbed(&cpu(0.10, 0.10)));
        assert!(disturbed(&cpu(0.12, 0.10))); // together past 20%
        assert!(disturbed(&cpu(0.0, 0.72))); // a compiler on the DUT CPU
        assert!((disturbance(&cpu(0.05, -0.01)) - 0.05).abs() < 1e-12);
    }

    #[test]
    fn the_conclusion_is_one_sentence_with_its_spread() {
        let x = Spread::of(&[1.42, 1.31, 1.55]);
        let k = Spread::of(&[1.20, 1.10, 1.30]);
        let xk = Spread::of(&[1.18, 1.12, 1.25]);
        assert_eq!(
            sentence(
                "64 B",
                "xlat-nat44",
                "forward4",
                &x,
                Some(("kernel-nat44", &k, &xk))
            ),
            "64 B: xlat-nat44 costs 1.42x forward4 per packet [1.31..1.55, 3 rounds]; \
             kernel-nat44 1.20x [1.10..1.30]: xlat-nat44 costs 1.18x kernel-nat44 [1.12..1.25]."
        );
        // A spread across 1 is said to be one.
        let same = Spread::of(&[0.95, 1.04, 0.99]);
        let s = sentence(
            "512 B",
            "xlat-nat44-xdp",
            "forward4",
            &x,
            Some(("kernel-nat44", &k, &same)),
        );
        assert!(
            s.ends_with("kernel-nat44 [0.95..1.04] -- the rounds do not tell them apart."),
            "{s}"
        );
        let s = sentence(
            "512 B",
            "kernel-nat44",
            "forward4",
            &Spread::of(&[2.0]),
            None,
        );
        assert_eq!(
            s,
            "512 B: kernel-nat44 costs 2.00x forward4 per packet [2.00..2.00, 1 round]."
        );
    }

    #[test]
    fn conclusions_compare_each_device_with_the_baseline_and_xlat_with_the_kernel() {
        let cell = |ns: &[f64]| Cell {
            ns: ns.iter().map(|x| Some(*x)).collect(),
            ..Cell::default()
        };
        let mut cells = BTreeMap::new();
        let s = SizeMix::Fixed(64);
        for (d, ns) in [
            ("forward4", [1000.0, 2000.0, 1000.0]),
            ("kernel-nat44", [1200.0, 2400.0, 1300.0]),
            ("xlat-nat44", [1500.0, 3000.0, 1500.0]),
        ] {
            cells.insert((d.to_string(), s.label()), cell(&ns));
        }
        let devices: Vec<String> = ["forward4", "kernel-nat44", "xlat-nat44"]
            .map(String::from)
            .to_vec();
        let c = conclusions(&devices, &[s], "forward4", &cells);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0],
            "64 B: kernel-nat44 costs 1.20x forward4 per packet [1.20..1.30, 3 rounds]."
        );
        // xlat / kernel per round: 1.25, 1.25, 1.15.
        assert!(
            c[1].ends_with("xlat-nat44 costs 1.25x kernel-nat44 [1.15..1.25]."),
            "{}",
            c[1]
        );
    }
}
