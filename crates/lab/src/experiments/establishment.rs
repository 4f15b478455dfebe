//! setup-rate-table: RFC 9693's maximum connection establishment rate at each state-table
//! size N (`--sessions`), beside the lab's setup-rate (new sessions a second for a one-second
//! trial at a loss threshold).
//!
//! The procedure is the one the RFC's first author's tester runs for this metric (siitperf's
//! `binary-rate-alg.sh-R`: a binary search for the rate R at which the preliminary phase --
//! RFC 9693's phase 1 -- sends its N frames, each opening a connection, and passes only when
//! all N arrive):
//!
//! - A trial empties the device's table, then sends N flows that the device has never seen
//!   (RFC 4814 pseudorandom port pairs, no 4-tuple twice, [`crate::packet::flow_ports`]),
//!   one 64-byte frame each, at rate R.
//! - It passes when every one of the N frames arrived (no loss at all: a lost frame is a
//!   connection not established) and, the validation of the state table, the device's table
//!   then holds exactly N entries.
//! - The binary search finds the highest R that passes, from the tester's ceiling down.
//!
//! The table is read and emptied as teardown-rate and throughput-established do it
//! ([`super::stateful`]): the kernel's conntrack count in the DUT's namespace and `conntrack
//! -F`; xlat's session count and `{"cmd":"clear"}` on its control socket.

use super::stateful::{capacity_for, fill_duration, mem_available, size_row, ConntrackGuard};
use super::stateful::{Validation, CONNTRACK_UDP_TIMEOUT, PUBLISHED};
use super::*;

/// Seeds of the flows of setup-rate-table's trials: new flows in every trial, none a flow of
/// teardown-rate's (5000 + repeat) or throughput-established's (7000 + N).
const SEED_BASE: u32 = 20_000_000;

impl Lab {
    /// RFC 9693's maximum connection establishment rate at each table size.
    pub(super) fn setup_rate_table(&mut self) -> Result<()> {
        let sizes = self.stateful_sizes();
        let size = SizeMix::Fixed(64);
        let e = Self::exp(
            "setup-rate-table",
            "Connection setup rate with N connections (RFC 9693)",
            Some("connections"),
            format!(
                "RFC 9693's maximum connection establishment rate at several state-table sizes N, as the RFC's first \
                 author's tester measures it (siitperf, binary-rate-alg.sh-R): a binary search for the highest rate R at \
                 which phase 1 establishes N connections -- N flows the device has never seen (RFC 4814 pseudorandom \
                 port pairs, no 4-tuple twice), one 64-byte frame each, sent at R after the device's table was emptied \
                 (conntrack -F; xlat's clear). A trial passes when all N frames arrived (no loss: a lost frame is a \
                 connection not established) and the table then holds exactly N entries (the validation: kernel \
                 nf_conntrack_count in the DUT's namespace, xlat's session count on its control socket). Conntrack's \
                 UDP timeouts in the DUT's namespace and xlat's are {CONNTRACK_UDP_TIMEOUT} s during the test, nf_conntrack_max \
                 and, past 4 entries a bucket, the conntrack hash table (hashsize) raised for the largest table, all \
                 restored after. Searches step to {}% of the tester's ceiling, at most {} trials; {} search(es) per \
                 table size. TAYGA keeps no connection table: not applicable. {PUBLISHED}",
                self.opts.resolution,
                self.opts.max_steps,
                self.opts.repeats.max(1)
            ),
        );
        let largest = u64::from(sizes.iter().copied().max().unwrap_or(0));
        let _ct = ConntrackGuard::new(&self.topo, largest);
        let cap = capacity_for(largest);
        self.size_devices(cap);
        let avail = mem_available();
        let mut seed = SEED_BASE;
        for d in self.opts.devices.clone() {
            let rows = self.with_device(&d, |lab, dev| {
                let mut rows = Vec::new();
                if dev.sessions(&lab.topo).is_none() {
                    rows.push(Row {
                        device: dev.name().into(),
                        size: size.label(),
                        notes: vec![format!(
                            "{}: not applicable -- it keeps no connection table to validate (TAYGA: a dynamic address pool)",
                            dev.name()
                        )],
                        ..Row::default()
                    });
                    return Ok(rows);
                }
                let v6 = dev.v6_in();
                let max = lab.ceiling(&size, v6)?;
                for &n in &sizes {
                    let (mut row, fits) = size_row(dev, size.label(), n, cap, avail);
                    if !fits {
                        rows.push(row);
                        continue;
                    }
                    let mut rates = Vec::new();
                    let (mut invalid, mut tried) = (0usize, 0usize);
                    for _ in 0..lab.opts.repeats.max(1) {
                        let mut trials = Vec::new();
                        let search =
                            stats::search(max, lab.opts.resolution, lab.opts.max_steps, |r| {
                                seed += 1;
                                lab.empty(dev)?;
                                let flows = Arc::new(dev.flows(n, seed));
                                let mut spec = lab.spec(
                                    lab.dut_path(v6),
                                    flows,
                                    &size,
                                    Some(r),
                                    fill_duration(u64::from(n), r),
                                    dev.pids(),
                                );
                                spec.max_packets = Some(u64::from(n));
                                let what = format!("{} establishes {n} connections", dev.name());
                                let t = lab.trial(&spec, &what)?;
                                dev.check_alive()?;
                                let table = lab.settled_count(dev);
                                let v = Validation::check(u64::from(n), table);
                                tried += 1;
                                let delivered = t.lost == 0 && !t.sender_short;
                                if delivered && !v.passed() {
                                    invalid += 1;
                                    row.notes.push(format!(
                                        "{} at {n}, {r:.0}/s: every frame arrived but {}",
                                        dev.name(),
                                        v.words("the table")
                                    ));
                                }
                                trials.push(t);
                                Ok::<bool, anyhow::Error>(delivered && v.passed())
                            })?;
                        rates.push(search.rate);
                        if search.at_ceiling {
                            row.tester_limited = true;
                        }
                        row.searches.push(search);
                        row.trials.extend(trials);
                    }
                    lab.progress(&format!(
                        "setup-rate-table {:<16} {n:>8} connections: {} /s (median of {})",
                        dev.name(),
                        crate::report::num(Spread::of(&rates).median),
                        rates.len()
                    ));
                    row.metrics
                        .insert("setup_rate_per_s".into(), Spread::of(&rates));
                    row.metrics.insert(
                        "fill_s".into(),
                        Spread::of(
                            &rates
                                .iter()
                                .filter(|r| **r > 0.0)
                                .map(|r| f64::from(n) / r)
                                .collect::<Vec<_>>(),
                        ),
                    );
                    row.metrics.insert(
                        "invalid_trials".into(),
                        Spread::of(&[invalid as f64]),
                    );
                    row.notes.push(format!(
                        "{} at {n}: {tried} trials; in {invalid} every frame arrived and the table did not hold N",
                        dev.name()
                    ));
                    rows.push(row);
                }
                lab.empty(dev)?;
                Ok(rows)
            })?;
            self.add(&e, rows);
        }
        self.unsize_devices();
        self.push(e);
        Ok(())
    }
}
