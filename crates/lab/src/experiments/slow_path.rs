//! slow-path: the targets of the slow path (issue 25) in one run. What the XDP recipes do not
//! carry -- the first packets of flows, every packet with the fast path off, SIIT, the
//! tunnels, TCP bulk through the default data path -- measured with the devices each target
//! names beside the kernel's own (kernel NAT44, IPv6 forwarding, TAYGA), each step in its own
//! settings ([`STEPS`]), in interleaved rounds, then judged: [`TARGETS`] gives each target's
//! value in a round (a ratio between two devices of that round) and its bound, and the
//! `slow-path` table gives the median of the rounds and whether it is within the bound. The steps are the ordinary
//! experiments (setup-rate, cpu, cpu-return, tcp, churn), so their own tables are in the run
//! too. No test asserts on these numbers; they are the benchmark.

use super::*;

/// One step: an experiment over its devices, in its own settings.
struct Step {
    exp: &'static str,
    devices: &'static [&'static str],
    /// Frame size (bytes with FCS); setup-rate, tcp and churn choose their own.
    size: usize,
    /// Seconds per trial.
    trial: f64,
    /// The tester's receive moderation for this step (microseconds, 0: off; see
    /// topo::Topo::moderate_tester_rx): on where the measure is the DUT's CPU per packet at a
    /// fixed load, so the DUT's core is not charged the wake-up of the tester's receive thread
    /// (which veth runs on the sender's CPU); off where the tester's own core limits the
    /// result (setup-rate, churn, tcp), since the timer's polls cost the tester more (measured:
    /// its new-session ceiling fell from about 430,000/s to 340,000/s with it on,
    /// PERFORMANCE-LOG step 48).
    rx_coalesce_us: f64,
}

/// The tester's receive moderation in the CPU steps (a NIC's receive interrupt moderation is
/// of this order).
pub(crate) const CPU_RX_COALESCE_US: f64 = 50.0;

/// cpu's fixed load and sessions (the measurements: 100,000 pps, 1,000 flows).
const CPU_RATE: f64 = 100_000.0;
const CPU_SESSIONS: u32 = 1_000;
/// churn's steps of new flows per second: the target's 200,000 and one above it.
const CHURN_RATES: &[f64] = &[100_000.0, 200_000.0, 400_000.0];

/// The run, in order. The TUN devices (xlat-nat44, xlat-nat64: the default data path) are
/// measured where the issue names them, so the table says what the default gets too.
const STEPS: &[Step] = &[
    Step {
        exp: "setup-rate",
        devices: &[
            "kernel-nat44",
            "xlat-nat44-xdp-afxdp",
            "xlat-nat44-afxdp",
            "xlat-nat44",
        ],
        size: 64,
        trial: 1.0,
        rx_coalesce_us: 0.0,
    },
    Step {
        exp: "cpu",
        devices: &["kernel-nat44", "xlat-nat44-afxdp", "xlat-nat44"],
        size: 64,
        trial: 2.0,
        rx_coalesce_us: CPU_RX_COALESCE_US,
    },
    Step {
        exp: "cpu",
        devices: &["forward6", "tayga-nat64", "xlat-siit-xdp", "xlat-6to4-xdp"],
        size: 128,
        trial: 2.0,
        rx_coalesce_us: CPU_RX_COALESCE_US,
    },
    Step {
        exp: "cpu-return",
        devices: &["forward6", "xlat-6to4-xdp"],
        size: 128,
        trial: 2.0,
        rx_coalesce_us: CPU_RX_COALESCE_US,
    },
    Step {
        exp: "tcp",
        devices: &["kernel-nat44", "xlat-nat44", "xlat-nat64"],
        size: 64,
        trial: 2.0,
        rx_coalesce_us: 0.0,
    },
    Step {
        exp: "churn",
        devices: &["kernel-nat44", "xlat-nat44-afxdp"],
        size: 64,
        trial: 2.0,
        rx_coalesce_us: 0.0,
    },
];

/// Device set-ups the run makes (the progress bar's units).
pub(super) fn units() -> usize {
    STEPS.iter().map(|s| s.devices.len()).sum()
}

/// What a target checks in its experiment's rows.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// median(`metric` of `dev`) / median(`metric` of `base`) within `bound`: at most when
    /// `at_most`, else at least.
    Ratio {
        metric: &'static str,
        base: &'static str,
        at_most: bool,
        bound: f64,
    },
    /// The largest `metric` of any repetition at x = `at` is 0.
    Zero { metric: &'static str, at: f64 },
    /// Along x, the median `metric` never falls and stays at least `base`'s at every x (both
    /// within 1 %: the trials' own jitter where every frame arrives); measured: the least ratio
    /// to `base`.
    NeverFallsAndAtLeast {
        metric: &'static str,
        base: &'static str,
    },
}

/// One target of issue 25.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub exp: &'static str,
    /// Frame size of the rows (bytes), where the experiment ran at several.
    pub size: Option<&'static str>,
    pub dev: &'static str,
    pub check: Check,
    /// What the target says, for the table.
    pub label: &'static str,
}

#[allow(clippy::too_many_arguments)]
const fn ratio(
    exp: &'static str,
    size: Option<&'static str>,
    dev: &'static str,
    metric: &'static str,
    base: &'static str,
    at_most: bool,
    bound: f64,
    label: &'static str,
) -> Target {
    Target {
        exp,
        size,
        dev,
        check: Check::Ratio {
            metric,
            base,
            at_most,
            bound,
        },
        label,
    }
}

/// Issue 25's targets, as the steps measure them.
pub const TARGETS: &[Target] = &[
    ratio(
        "setup-rate",
        None,
        "xlat-nat44-xdp-afxdp",
        "setup_rate_per_s",
        "kernel-nat44",
        false,
        2.0,
        "new sessions/s >= 2.0x kernel-nat44 (recipes + AF_XDP)",
    ),
    ratio(
        "setup-rate",
        None,
        "xlat-nat44-afxdp",
        "setup_rate_per_s",
        "kernel-nat44",
        false,
        2.0,
        "new sessions/s >= 2.0x kernel-nat44 (AF_XDP slow path)",
    ),
    ratio(
        "setup-rate",
        None,
        "xlat-nat44",
        "setup_rate_per_s",
        "kernel-nat44",
        false,
        2.0,
        "new sessions/s >= 2.0x kernel-nat44 (TUN, the default)",
    ),
    ratio(
        "cpu",
        Some("64"),
        "xlat-nat44-afxdp",
        "dut_ns_per_pkt",
        "kernel-nat44",
        true,
        1.0,
        "DUT ns/pkt off the fast path <= 1.0x kernel-nat44 (AF_XDP)",
    ),
    ratio(
        "cpu",
        Some("64"),
        "xlat-nat44",
        "dut_ns_per_pkt",
        "kernel-nat44",
        true,
        1.0,
        "DUT ns/pkt off the fast path <= 1.0x kernel-nat44 (TUN, the default)",
    ),
    ratio(
        "cpu",
        Some("128"),
        "xlat-siit-xdp",
        "dut_ns_per_pkt",
        "forward6",
        true,
        1.0,
        "SIIT DUT ns/pkt <= 1.0x forward6",
    ),
    ratio(
        "cpu",
        Some("128"),
        "xlat-siit-xdp",
        "dut_ns_per_pkt",
        "tayga-nat64",
        true,
        0.3,
        "SIIT DUT ns/pkt <= 0.3x tayga-nat64",
    ),
    ratio(
        "cpu",
        Some("128"),
        "xlat-6to4-xdp",
        "dut_ns_per_pkt",
        "forward6",
        true,
        1.0,
        "6to4 decapsulation DUT ns/pkt <= 1.0x forward6",
    ),
    ratio(
        "cpu-return",
        Some("128"),
        "xlat-6to4-xdp",
        "dut_ns_per_pkt",
        "forward6",
        true,
        1.0,
        "6to4 encapsulation DUT ns/pkt <= 1.0x forward6",
    ),
    ratio(
        "tcp",
        None,
        "xlat-nat44",
        "tcp_mbps",
        "kernel-nat44",
        false,
        1.0,
        "TCP bulk Mb/s >= 1.0x kernel-nat44 (NAT44, TUN)",
    ),
    ratio(
        "tcp",
        None,
        "xlat-nat64",
        "tcp_mbps",
        "kernel-nat44",
        false,
        1.0,
        "TCP bulk Mb/s >= 1.0x kernel-nat44 (NAT64, TUN)",
    ),
    Target {
        exp: "churn",
        size: None,
        dev: "xlat-nat44-afxdp",
        check: Check::Zero {
            metric: "est_lost",
            at: 200_000.0,
        },
        label: "churn: established frames lost at 200,000 new flows/s = 0",
    },
    Target {
        exp: "churn",
        size: None,
        dev: "xlat-nat44-afxdp",
        check: Check::NeverFallsAndAtLeast {
            metric: "new_rx_per_s",
            base: "kernel-nat44",
        },
        label: "churn: new flows delivered/s never fall, >= kernel-nat44's",
    },
];

/// A target's measurement: the number shown and whether the target was met (None: the rows
/// it needs are missing).
pub fn judge(t: &Target, exps: &[Experiment]) -> Option<(f64, bool)> {
    let rows: Vec<&Row> = exps
        .iter()
        .filter(|e| e.name == t.exp)
        .flat_map(|e| e.rows.iter())
        .filter(|r| t.size.is_none_or(|s| r.size == s))
        .collect();
    let of = |dev: &str, metric: &str, x: Option<f64>| {
        rows.iter()
            .find(|r| r.device == dev && (x.is_none() || r.x == x))
            .and_then(|r| r.metric(metric))
    };
    match t.check {
        Check::Ratio {
            metric,
            base,
            at_most,
            bound,
        } => {
            let (a, b) = (of(t.dev, metric, None)?, of(base, metric, None)?);
            if b.median <= 0.0 {
                return None;
            }
            let r = a.median / b.median;
            Some((r, if at_most { r <= bound } else { r >= bound }))
        }
        Check::Zero { metric, at } => {
            let s = of(t.dev, metric, Some(at))?;
            Some((s.max, s.max == 0.0))
        }
        Check::NeverFallsAndAtLeast { metric, base } => {
            let mut xs: Vec<f64> = rows
                .iter()
                .filter(|r| r.device == t.dev)
                .filter_map(|r| r.x)
                .collect();
            xs.sort_by(f64::total_cmp);
            if xs.is_empty() {
                return None;
            }
            let (mut least, mut ok, mut last) = (f64::INFINITY, true, 0.0f64);
            for x in xs {
                let (a, b) = (
                    of(t.dev, metric, Some(x))?.median,
                    of(base, metric, Some(x))?.median,
                );
                ok &= a >= last * 0.99 && a >= b * 0.99;
                last = a;
                if b > 0.0 {
                    least = least.min(a / b);
                }
            }
            Some((least, ok))
        }
    }
}

impl Lab {
    /// `--repeats` rounds of every step (one repetition each, so the devices a ratio compares
    /// are measured minutes apart at most, not a whole run), then the targets: the median of
    /// the rounds' values [min..max].
    pub(super) fn slow_path(&mut self) -> Result<()> {
        let saved = self.opts.clone();
        let rounds = saved.repeats.max(1);
        let mut values: Vec<Vec<(f64, bool)>> = vec![Vec::new(); TARGETS.len()];
        let mut limited = vec![0usize; TARGETS.len()];
        let mut r = Ok(());
        for round in 0..rounds {
            self.progress(&format!("slow-path: round {} of {rounds}", round + 1));
            let before: Vec<(String, usize)> = self
                .res
                .experiments
                .iter()
                .map(|e| (e.name.clone(), e.rows.len()))
                .collect();
            r = self.slow_path_steps();
            if r.is_err() {
                break;
            }
            let this_round = rows_since(&self.res.experiments, &before);
            for ((t, v), l) in TARGETS
                .iter()
                .zip(values.iter_mut())
                .zip(limited.iter_mut())
            {
                v.extend(judge(t, &this_round));
                *l += usize::from(tester_limited(t, &this_round));
            }
        }
        self.opts = saved;
        r?;
        let e = Self::exp(
            "slow-path",
            "The slow path's targets (issue 25)",
            None,
            format!(
                "{rounds} round(s), each every step once: setup-rate, cpu (100,000 pps, 1,000 flows), \
                 cpu-return, tcp and churn over the devices the targets name; cpu and cpu-return with the \
                 tester's receive moderation ({CPU_RX_COALESCE_US:.0} us, as --rx-coalesce-us: the DUT's \
                 transmit does not wake the tester's receive thread on the DUT's CPU), the others without \
                 (there the tester's core is the limit and the moderation costs it). A target's value in a round \
                 is the ratio between two devices of that round (for churn's lost frames: the number lost; \
                 for its delivery: the least ratio to kernel-nat44's over the steps); shown: the median \
                 of the rounds [min..max], met (1) when the median is within the bound."
            ),
        );
        let rows = TARGETS
            .iter()
            .zip(&values)
            .zip(&limited)
            .map(|((t, v), &l)| {
                let mut row = target_row(t, v);
                if l > 0 {
                    row.tester_limited = true;
                    row.notes.push(format!(
                        "{} was tester-limited in {l} of {} round(s): its value there is a bound, not the device's",
                        t.dev,
                        v.len()
                    ));
                }
                row
            })
            .collect();
        self.add(&e, rows);
        Ok(())
    }

    fn slow_path_steps(&mut self) -> Result<()> {
        for s in STEPS {
            self.topo.moderate_tester_rx(s.rx_coalesce_us)?;
            self.opts.devices = s.devices.iter().map(|d| d.to_string()).collect();
            self.opts.sizes = vec![SizeMix::Fixed(s.size)];
            self.opts.trial = Duration::from_secs_f64(s.trial);
            self.opts.repeats = 1;
            self.opts.sessions = vec![CPU_SESSIONS];
            self.opts.rate = Some(CPU_RATE);
            self.opts.flows = CPU_SESSIONS;
            self.opts.new_rates = CHURN_RATES.to_vec();
            match s.exp {
                "setup-rate" => self.setup_rate()?,
                "cpu" => self.cpu_rows(Self::cpu_header(false))?,
                "cpu-return" => self.receiving_inside(Lab::cpu_return)?,
                "tcp" => self.on_stack(|lab| lab.receiving_inside(Lab::tcp))?,
                "churn" => self.churn()?,
                other => bail!("slow-path: no step {other}"),
            }
        }
        Ok(())
    }
}

/// The experiments' rows added since `before` (each experiment's row count then).
fn rows_since(exps: &[Experiment], before: &[(String, usize)]) -> Vec<Experiment> {
    exps.iter()
        .map(|e| {
            let from = before.iter().find(|(n, _)| *n == e.name).map_or(0, |b| b.1);
            Experiment {
                rows: e.rows.get(from..).unwrap_or_default().to_vec(),
                ..e.clone()
            }
        })
        .collect()
}

/// Whether the row of `t`'s device in `exps` was the tester's limit rather than the device's
/// (setup-rate: the tester's core full at the rate found).
fn tester_limited(t: &Target, exps: &[Experiment]) -> bool {
    exps.iter()
        .filter(|e| e.name == t.exp)
        .flat_map(|e| e.rows.iter())
        .any(|r| r.device == t.dev && r.tester_limited && t.size.is_none_or(|s| r.size == s))
}

/// A target's row: its rounds' values, median [min..max], and met when the median is within
/// the bound (for churn's lost frames: no frame lost in the median round).
fn target_row(t: &Target, rounds: &[(f64, bool)]) -> Row {
    let mut row = Row {
        device: t.dev.into(),
        size: t.label.into(),
        ..Row::default()
    };
    if rounds.is_empty() {
        row.notes
            .push("not measured: a device of this target has no row".into());
        return row;
    }
    let v: Vec<f64> = rounds.iter().map(|r| r.0).collect();
    let median = Spread::of(&v).median;
    let met = match t.check {
        Check::Ratio { at_most, bound, .. } => {
            if at_most {
                median <= bound
            } else {
                median >= bound
            }
        }
        Check::Zero { .. } => median == 0.0,
        Check::NeverFallsAndAtLeast { .. } => {
            rounds.iter().filter(|r| r.1).count() * 2 > rounds.len()
        }
    };
    row.metrics.insert("measured".into(), Spread::of(&v));
    row.metrics
        .insert("met".into(), Spread::of(&[f64::from(u8::from(met))]));
    let met_rounds = rounds.iter().filter(|r| r.1).count();
    row.notes
        .push(format!("met in {met_rounds} of {} round(s)", rounds.len()));
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(dev: &str, size: &str, x: Option<f64>, metric: &str, v: &[f64]) -> Row {
        let mut r = Row {
            device: dev.into(),
            size: size.into(),
            x,
            ..Row::default()
        };
        r.metrics.insert(metric.into(), Spread::of(v));
        r
    }

    fn exp(name: &str, rows: Vec<Row>) -> Experiment {
        Experiment {
            name: name.into(),
            rows,
            ..Experiment::default()
        }
    }

    fn target(exp: &str, dev: &str) -> Target {
        *TARGETS
            .iter()
            .find(|t| t.exp == exp && t.dev == dev)
            .unwrap()
    }

    #[test]
    fn ratios_are_judged_against_their_bound_in_their_direction() {
        let exps = [
            exp(
                "setup-rate",
                vec![
                    row(
                        "kernel-nat44",
                        "64",
                        None,
                        "setup_rate_per_s",
                        &[100.0, 150.0, 200.0],
                    ),
                    row("xlat-nat44-afxdp", "64", None, "setup_rate_per_s", &[310.0]),
                    row("xlat-nat44", "64", None, "setup_rate_per_s", &[160.0]),
                ],
            ),
            exp(
                "cpu",
                vec![
                    row("kernel-nat44", "64", None, "dut_ns_per_pkt", &[4000.0]),
                    row("xlat-nat44-afxdp", "64", None, "dut_ns_per_pkt", &[3000.0]),
                    // Another size's row of the same device is not this target's.
                    row("kernel-nat44", "128", None, "dut_ns_per_pkt", &[1.0]),
                ],
            ),
        ];
        // At least: 310 / median 150.
        let (r, met) = judge(&target("setup-rate", "xlat-nat44-afxdp"), &exps).unwrap();
        assert!((r - 310.0 / 150.0).abs() < 1e-9 && met);
        let (r, met) = judge(&target("setup-rate", "xlat-nat44"), &exps).unwrap();
        assert!((r - 160.0 / 150.0).abs() < 1e-9 && !met);
        // At most: 3000 / 4000.
        let (r, met) = judge(&target("cpu", "xlat-nat44-afxdp"), &exps).unwrap();
        assert!((r - 0.75).abs() < 1e-9 && met);
        // A device without a row: not measured, not met.
        assert!(judge(&target("setup-rate", "xlat-nat44-xdp-afxdp"), &exps).is_none());
        assert!(judge(&target("tcp", "xlat-nat44"), &exps).is_none());
    }

    #[test]
    fn churn_needs_no_loss_and_a_delivery_rate_that_never_falls() {
        let churn = |lost200: &[f64], xlat: [f64; 3]| {
            let mut rows = Vec::new();
            for (i, x) in CHURN_RATES.iter().enumerate() {
                let lost: &[f64] = if *x == 200_000.0 { lost200 } else { &[5.0] };
                let mut r = row("xlat-nat44-afxdp", "64", Some(*x), "est_lost", lost);
                r.metrics
                    .insert("new_rx_per_s".into(), Spread::of(&[xlat[i]]));
                rows.push(r);
                let k = [99_000.0, 180_000.0, 170_000.0][i];
                rows.push(row("kernel-nat44", "64", Some(*x), "new_rx_per_s", &[k]));
            }
            [exp("churn", rows)]
        };
        let zero = *TARGETS
            .iter()
            .find(|t| matches!(t.check, Check::Zero { .. }))
            .unwrap();
        let never = *TARGETS
            .iter()
            .find(|t| matches!(t.check, Check::NeverFallsAndAtLeast { .. }))
            .unwrap();
        let good = churn(&[0.0, 0.0, 0.0], [99_900.0, 199_000.0, 390_000.0]);
        assert_eq!(judge(&zero, &good), Some((0.0, true)));
        let (least, met) = judge(&never, &good).unwrap();
        assert!(met && (least - 99_900.0 / 99_000.0).abs() < 1e-9, "{least}");
        // One repetition lost 3 frames: not met, though the median is 0.
        assert_eq!(
            judge(&zero, &churn(&[0.0, 3.0, 0.0], [1.0; 3])),
            Some((3.0, false))
        );
        // Delivery falls from 200k to 400k offered: not met.
        let falls = churn(&[0.0], [99_900.0, 199_000.0, 180_000.0]);
        assert!(!judge(&never, &falls).unwrap().1);
        // Below the kernel's at one step: not met.
        let below = churn(&[0.0], [98_000.0, 199_000.0, 390_000.0]);
        assert!(!judge(&never, &below).unwrap().1);
    }

    #[test]
    fn a_tester_limited_row_marks_only_its_own_target() {
        let mut r = row("xlat-nat44-afxdp", "64", None, "setup_rate_per_s", &[430.0]);
        r.tester_limited = true;
        let exps = [exp(
            "setup-rate",
            vec![
                r,
                row("kernel-nat44", "64", None, "setup_rate_per_s", &[215.0]),
            ],
        )];
        assert!(tester_limited(
            &target("setup-rate", "xlat-nat44-afxdp"),
            &exps
        ));
        assert!(!tester_limited(&target("setup-rate", "xlat-nat44"), &exps));
        assert!(!tester_limited(&target("cpu", "xlat-nat44-afxdp"), &exps));
    }

    #[test]
    fn a_round_is_the_rows_added_since_it_began() {
        let all = [
            exp(
                "cpu",
                vec![
                    row("a", "64", None, "m", &[1.0]),
                    row("a", "64", None, "m", &[2.0]),
                ],
            ),
            exp("tcp", vec![row("b", "tcp", None, "m", &[3.0])]),
        ];
        // cpu had one row before the round, tcp did not exist.
        let r = rows_since(&all, &[("cpu".into(), 1)]);
        assert_eq!(r[0].rows.len(), 1);
        assert_eq!(r[0].rows[0].metric("m").unwrap().median, 2.0);
        assert_eq!(r[1].rows.len(), 1);
    }

    #[test]
    fn a_target_row_is_the_median_round() {
        let t = target("setup-rate", "xlat-nat44-afxdp");
        // Three rounds: 1.9x, 2.1x, 2.2x: the median 2.1x is at least 2.0x.
        let r = target_row(&t, &[(1.9, false), (2.1, true), (2.2, true)]);
        let m = r.metric("measured").unwrap();
        assert_eq!((m.min, m.median, m.max), (1.9, 2.1, 2.2));
        assert_eq!(r.metric("met").unwrap().median, 1.0);
        assert_eq!(r.notes, ["met in 2 of 3 round(s)"]);
        let r = target_row(&t, &[(1.9, false), (1.95, false), (2.2, true)]);
        assert_eq!(r.metric("met").unwrap().median, 0.0);
        // Lost frames: the median round lost none.
        let zero = *TARGETS
            .iter()
            .find(|t| matches!(t.check, Check::Zero { .. }))
            .unwrap();
        let r = target_row(&zero, &[(0.0, true), (267.0, false), (0.0, true)]);
        assert_eq!(r.metric("met").unwrap().median, 1.0);
        // No rounds: not measured, no value and no verdict.
        let r = target_row(&t, &[]);
        assert!(r.metric("met").is_none() && r.metric("measured").is_none());
    }

    #[test]
    fn every_target_is_measured_by_a_step() {
        for t in TARGETS {
            let devs: Vec<&str> = match t.check {
                Check::Ratio { base, .. } | Check::NeverFallsAndAtLeast { base, .. } => {
                    vec![t.dev, base]
                }
                Check::Zero { .. } => vec![t.dev],
            };
            for d in devs {
                assert!(
                    STEPS.iter().any(|s| s.exp == t.exp
                        && s.devices.contains(&d)
                        && t.size.is_none_or(|z| z == s.size.to_string())),
                    "{}: no step measures {d}",
                    t.label
                );
            }
        }
    }
}
