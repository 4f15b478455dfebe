//! Trials at fixed offered loads: loss-vs-load and latency-vs-load (S1's figures, one sweep
//! feeds both) and latency-vs-sessions (S5 table 4.1); [`Lab::load_rows`] is the trial loop the
//! cost tables of quick and cpu use too.

use super::*;

impl Lab {
    /// Trials at fixed offered loads; one row per load.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn load_rows(
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

    /// loss-vs-load and latency-vs-load come from the same sweep.
    pub(super) fn add_load(&mut self, header: &Experiment, rows: Vec<Row>) {
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

    pub(super) fn vs_load(&mut self, name: &str) -> Result<()> {
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
    pub(super) fn fixed_rate(&mut self, size: &SizeMix, v6: bool) -> Result<f64> {
        match self.opts.rate {
            Some(r) => Ok(r),
            None => Ok((self.ceiling(size, v6)? * 0.1).clamp(1000.0, 20_000.0)),
        }
    }

    pub(super) fn latency_vs_sessions(&mut self) -> Result<()> {
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
}
