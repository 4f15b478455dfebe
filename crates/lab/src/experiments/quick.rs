//! quick: the headline table -- forward4, kernel-nat44 and the xlat devices at 64 and 512 bytes,
//! throughput searches, then latency and CPU cost at one common load.

use super::*;

impl Lab {
    pub(super) fn quick(&mut self) -> Result<()> {
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
}
