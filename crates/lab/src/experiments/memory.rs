//! memory-per-session: the device's memory after N sessions minus before any (S5 table 4.3).

use super::*;

impl Lab {
    pub(super) fn memory_per_session(&mut self) -> Result<()> {
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
}
