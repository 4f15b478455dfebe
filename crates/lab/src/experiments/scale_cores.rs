//! scale-cores: the device on 1, 2, 4 ... of the DUT's CPUs (`--dut-cpus`), an RFC 2544
//! throughput search (as the throughput experiment) and the DUT's CPU time per packet at each
//! step. The layout of a step is [`crate::cpus::plan`]: a receive and a transmit queue per core
//! on each DUT port and on the tester's ports facing them, each DUT queue's threaded-NAPI
//! thread pinned to its core, xlat with one packet worker per core, the device's processes
//! allowed on the step's cores. The tester sends without the qdisc bypass so that the kernel
//! hashes each flow to a transmit queue, and veth delivers a frame to the peer's receive queue
//! of the same number: the spread RSS would make. Each row says how evenly it came out (the
//! busiest DUT receive queue's share of the frames, from veth's per-queue counters).

use super::*;
use crate::cpus;

impl Lab {
    pub(super) fn scale_cores(&mut self) -> Result<()> {
        let steps = cpus::core_steps(self.topo.dut_cpus.len());
        let shared: Vec<usize> = self
            .topo
            .dut_cpus
            .iter()
            .copied()
            .filter(|c| self.topo.tester_cpus.contains(c))
            .collect();
        let e = Self::exp(
            "scale-cores",
            "Throughput and cost per packet by DUT cores",
            Some("DUT cores"),
            format!(
                "The device on the first k of the DUT CPUs ({}) for k in {:?}: k receive and transmit queues on each DUT port \
                 and on the tester ports facing them (ethtool -L on veths made with numrxqueues/numtxqueues {}), one threaded-NAPI \
                 thread per DUT queue pinned to its core (RPS of each queue to the same core), xlat with [dataplane] workers = k, \
                 the device's processes allowed on those k cores; the kernel devices' work is that of the pinned receive threads. \
                 The tester sends on the tester CPU {} without PACKET_QDISC_BYPASS, so the kernel hashes each of the {} flows to one \
                 of the k transmit queues of its port and veth hands the frame to the DUT's receive queue of that number. \
                 \"busiest queue %\" is the DUT inside port's busiest receive queue's share of the frames of the row \
                 (veth's rx_queue_N_xdp_packets; 100/k is an even spread). Throughput: {} DUT ns/pkt is the busy time \
                 of all k cores' receive threads, softirq and the device's processes per forwarded packet, at the highest passing rate. \
                 \"x 1 core\" is the median throughput over that of the same device on one core in this run.{}",
                cpus::format_list(&self.topo.dut_cpus),
                steps,
                self.topo.dut_cpus.len(),
                cpus::format_list(&self.topo.tester_cpus),
                self.opts.flows,
                self.throughput_method(),
                if shared.is_empty() {
                    String::new()
                } else {
                    format!(
                        " SHARED: CPU {} is both the tester's and the device's, so the rows that use it mix their costs.",
                        cpus::format_list(&shared)
                    )
                }
            ),
        );
        // The registry's units count one step; the others are planned here.
        let (d, s) = (self.opts.devices.len(), self.opts.sizes.len().max(1));
        self.bar.plan(d * s * steps.len().saturating_sub(1));
        let r = self.scale_cores_steps(&e, &steps, &shared);
        // Later experiments of a plan get the whole DUT again.
        let back = self.topo.set_dut_cores(self.topo.dut_cpus.len());
        self.push(e);
        r?;
        back.map(|_| ())
    }

    fn scale_cores_steps(
        &mut self,
        e: &Experiment,
        steps: &[usize],
        shared: &[usize],
    ) -> Result<()> {
        let mut one_core: BTreeMap<(String, String), f64> = BTreeMap::new();
        for &k in steps {
            let p = self.topo.set_dut_cores(k)?;
            self.progress(&format!(
                "scale-cores: {k} core(s) {}: {} queue(s) a port, {} worker(s)",
                cpus::format_list(&p.cpus),
                p.queues,
                p.workers
            ));
            for dname in self.opts.devices.clone() {
                for size in self.opts.sizes.clone() {
                    let flows = self.opts.flows;
                    let (ns, ua) = (self.topo.ns_dut.clone(), self.topo.ua.dev.clone());
                    let before = self.topo.rx_queue_packets(&ns, &ua);
                    let mut row =
                        self.with_device(&dname, |lab, dev| lab.throughput_row(dev, &size, flows))?;
                    let after = self.topo.rx_queue_packets(&ns, &ua);
                    let counts = queue_deltas(&before, &after, p.queues);
                    row.x = Some(k as f64);
                    let one = |v: f64| Spread::of(&[v]);
                    row.metrics.insert("cores".into(), one(k as f64));
                    row.metrics.insert("queues".into(), one(p.queues as f64));
                    if dname.starts_with("xlat-") {
                        row.metrics.insert("workers".into(), one(p.workers as f64));
                    }
                    if let Some(b) = cpus::busiest_share(&counts) {
                        row.metrics
                            .insert("busiest_queue_pct".into(), one(100.0 * b));
                    }
                    let tput = row.metric("throughput_pps").map(|s| s.median);
                    let key = (dname.clone(), size.label());
                    if let Some(t) = tput {
                        if k == 1 {
                            one_core.insert(key.clone(), t);
                        }
                        if let Some(&base) = one_core.get(&key) {
                            if base > 0.0 {
                                row.metrics.insert("speedup".into(), one(t / base));
                            }
                        }
                    }
                    row.notes.push(format!(
                        "DUT CPUs {} ({} receive queue(s) a port: frames per queue {:?})",
                        cpus::format_list(&p.cpus),
                        p.queues,
                        counts
                    ));
                    if p.cpus.iter().any(|c| shared.contains(c)) {
                        row.notes.push(format!(
                            "SHARED CPU: the device's CPUs {} include the tester's {}",
                            cpus::format_list(&p.cpus),
                            cpus::format_list(&self.topo.tester_cpus)
                        ));
                    }
                    self.add(e, vec![row]);
                }
            }
        }
        Ok(())
    }
}

/// Frames each of the first `queues` receive queues took between two readings of veth's
/// per-queue counters (a counter that went backwards, or is missing, counts 0).
pub(crate) fn queue_deltas(before: &[u64], after: &[u64], queues: usize) -> Vec<u64> {
    (0..queues)
        .map(|i| {
            let b = before.get(i).copied().unwrap_or(0);
            after.get(i).copied().unwrap_or(0).saturating_sub(b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_counts_are_differences_of_the_active_queues() {
        assert_eq!(queue_deltas(&[10, 20, 5], &[15, 40, 9], 2), vec![5, 20]);
        // A queue the first reading did not have (queues were added) counts from 0.
        assert_eq!(queue_deltas(&[10], &[15, 7], 2), vec![5, 7]);
        // Missing or backwards: 0.
        assert_eq!(queue_deltas(&[10, 9], &[3], 2), vec![0, 0]);
    }
}
