//! throughput: RFC 2544 26.1's binary search for the highest rate with loss under the threshold,
//! per device and frame size, repeated; also the searches of quick and reload.

use super::*;

impl Lab {
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

    pub(super) fn throughput(&mut self) -> Result<()> {
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
}
