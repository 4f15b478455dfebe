//! setup-rate: RFC 9693's connection setup rate -- every packet opens a new session; a binary
//! search for the highest rate with loss under the threshold, the table emptied between trials.

use super::*;

impl Lab {
    pub(super) fn setup_rate(&mut self) -> Result<()> {
        let e = Self::exp(
            "setup-rate",
            "Session setup rate",
            None,
            format!(
                "RFC 9693 connection setup rate: every packet of a trial opens a new session (new RFC 4814 port pairs \
                 each trial); binary search for the highest rate with loss <= {}%; the device's table is emptied \
                 between trials (conntrack -F, xlat clear sessions --all, or TAYGA restarted); xlat holds as many sessions \
                 as the kernel's conntrack ({} entries; an XDP device's recipe table two a session). 64-byte frames, \
                 {:.1} s trials.",
                pct(self.opts.threshold),
                kernel_table_size(),
                self.opts.trial.as_secs_f64()
            ),
        );
        let size = SizeMix::Fixed(64);
        self.topo.session_capacity.set(kernel_table_size());
        let r = self.setup_rate_devices(&e, &size);
        self.topo
            .session_capacity
            .set(crate::device::LAB_MAX_SESSIONS);
        r?;
        self.push(e);
        Ok(())
    }

    fn setup_rate_devices(&mut self, e: &Experiment, size: &SizeMix) -> Result<()> {
        for d in self.opts.devices.clone() {
            let row = self.with_device(&d, |lab, dev| {
                let v6 = dev.v6_in();
                let max = lab.ceiling(size, v6)?;
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
                let mut busy: Option<(f64, f64, f64)> = None;
                for _ in 0..lab.opts.repeats.max(1) {
                    let mut trials = Vec::new();
                    let search =
                        stats::search(max, lab.opts.resolution, lab.opts.max_steps, |r| {
                            seed += 1;
                            let n = (r * dur.as_secs_f64()).ceil().max(1.0) as u32;
                            reset(dev, lab)?;
                            let fl = Arc::new(dev.flows(n, seed));
                            let mut spec =
                                lab.spec(lab.dut_path(v6), fl, size, Some(r), dur, dev.pids());
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
                    if let Some(b) = tester_bound(&trials, th) {
                        busy = Some(b);
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
                if let Some((rate, tester, dut)) = busy {
                    row.tester_limited = true;
                    row.notes.push(format!(
                        "at {rate:.0} new sessions/s the tester's CPU was {:.0}% busy (the DUT's {:.0}%): the setup rate is a lower bound",
                        pct(tester),
                        pct(dut)
                    ));
                }
                Ok(row)
            })?;
            self.add(e, vec![row]);
        }
        Ok(())
    }
}

/// The highest passing trial's (rate, tester busy, DUT busy) when the tester's core was full
/// at it ([`super::dns64::TESTER_BUSY_LIMIT_PCT`]): the rate found is then the tester's, a
/// lower bound of the device's. Measured 2026-11-29: the AF_XDP devices passed 430,643 new
/// sessions/s with the tester's core 100 % busy and the DUT's 60-70 %, and no trial fell
/// short of its rate, so nothing else said so.
fn tester_bound(trials: &[crate::tester::Trial], threshold: f64) -> Option<(f64, f64, f64)> {
    let t = trials
        .iter()
        .filter(|t| stats::passes(t.loss, threshold) && !t.sender_short)
        .max_by(|a, b| a.offered_pps.total_cmp(&b.offered_pps))?;
    (t.cpu.tester_busy * 100.0 >= super::dns64::TESTER_BUSY_LIMIT_PCT).then_some((
        t.offered_pps,
        t.cpu.tester_busy,
        t.cpu.dut_busy,
    ))
}

/// Sessions each device of setup-rate holds: as many as the kernel's conntrack table beside
/// it (`nf_conntrack_max`), at most [`crate::device::LAB_MAX_SESSIONS`]. An XDP device's
/// recipe table is sized from it (two recipes a session), as an operator sizes `table_size`
/// (docs/CONFIG.md). Measured 2026-11-29: with the lab's default 8,388,608 recipes, 21 % of
/// the DUT core went to missing in that table (`lookup_nulls_elem_raw`), where conntrack
/// misses in 262,144 buckets.
fn kernel_table_size() -> u64 {
    std::fs::read_to_string(super::stateful::CT_MAX)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
        .map_or(crate::device::LAB_MAX_SESSIONS, |n| {
            n.min(crate::device::LAB_MAX_SESSIONS)
        })
}

/// Empties the device's table between trials, as an operator would, on a running device:
/// `conntrack -F` for the kernel's NAT, `xlat clear sessions --all` for an xlat daemon
/// (checked: the daemon must then count no session). Other daemons (TAYGA) are restarted.
/// An xlat daemon was restarted too until 2026-11-29: each trial then began with a cold
/// daemon, whose first batch took 1.1-1.3 ms (`perf sched`: its next-hop table empty, the
/// first packets through the TUN device) while veth's 256-frame receive ring overflowed, and
/// that alone cost 0.1-0.5 % of the frames at a third of its setup rate.
pub(super) fn reset(dev: &mut dyn Device, lab: &Lab) -> Result<()> {
    let topo = &lab.topo;
    if dev.pids().is_empty() {
        let _ = topo.dut(&["conntrack", "-F"]);
        return Ok(());
    }
    if let Some((_, socket)) = dev.xlat_files() {
        let bin = crate::device::xlat_bin()?.display().to_string();
        let sock = socket.display().to_string();
        let o = sys::cmd(60, &[&bin, "clear", "sessions", "--all", "--socket", &sock])?;
        match dev.sessions(topo) {
            Some(0) if o.ok => return Ok(()),
            left => {
                lab.bar.line(&format!(
                    "{}: `xlat clear sessions --all` left {left:?} sessions ({}): restarting it",
                    dev.name(),
                    o.stderr.trim()
                ));
            }
        }
    }
    dev.teardown(topo);
    dev.setup(topo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tester::Trial;

    fn trial(rate: f64, loss: f64, tester_busy: f64) -> Trial {
        let mut t = Trial {
            offered_pps: rate,
            loss,
            ..Trial::default()
        };
        t.cpu.tester_busy = tester_busy;
        t.cpu.dut_busy = 0.6;
        t
    }

    #[test]
    fn a_rate_found_with_the_testers_core_full_is_the_testers() {
        // The highest passing trial decides; failing trials above it do not count.
        let full = [
            trial(215_000.0, 0.0, 0.8),
            trial(430_000.0, 0.0, 1.0),
            trial(861_000.0, 0.3, 1.0),
        ];
        assert_eq!(tester_bound(&full, 0.001), Some((430_000.0, 1.0, 0.6)));
        let room = [trial(215_000.0, 0.0, 1.0), trial(430_000.0, 0.0, 0.9)];
        assert_eq!(tester_bound(&room, 0.001), None);
        assert_eq!(tester_bound(&[trial(1.0, 0.5, 1.0)], 0.001), None);
    }
}
