//! churn (issue 6): established flows keep their rate while never-seen flows arrive at stepped
//! rates: loss and latency of each group, new flows delivered per second, device CPU.

use super::setup_rate::reset;
use super::*;

/// churn (issue 6): established flows keep their rate while new flows arrive.
impl Lab {
    pub(super) fn churn(&mut self) -> Result<()> {
        let est_pps = self.opts.rate.unwrap_or(CHURN_ESTABLISHED_PPS).round();
        let nest = self.opts.flows;
        let e = Self::exp(
            "churn",
            "Established flows while new flows arrive (churn)",
            Some("new flows/s offered"),
            format!(
                "{nest} established flows (each sent once before every step, so the device holds their sessions and an \
                 XDP device has their recipes) get {est_pps:.0} pps together, round robin; interleaved with them, frames \
                 to flows the device has never seen (a new source port or address each, one frame per flow) at each step's \
                 rate. Every step starts with an emptied session table (conntrack -F, xlat clear sessions --all, or TAYGA restarted) and lasts \
                 {:.1} s (shorter where it would need more than {CHURN_MAX_NEW:.0} new flows). Loss and latency are \
                 counted per group on the receive side (a frame's group is its flow); a frame the device's port refused \
                 is lost in its group. New flows delivered/s = new-flow frames received / send time: the slow path's \
                 sustained new-flow rate. Device CPU as in cpu. 64-byte frames; repeated {} time(s).",
                self.opts.trial.as_secs_f64(),
                self.opts.repeats
            ),
        );
        let size = SizeMix::Fixed(64);
        let new_rates = self.opts.new_rates.clone();
        for d in self.opts.devices.clone() {
            let rows = self.with_device(&d, |lab, dev| {
                let v6 = dev.v6_in();
                lab.ceiling(&size, v6)?;
                let est = Arc::new(dev.flows(nest, 0));
                // New flows come after the established ones in the same sequence, and each
                // step takes the next unused ones: no flow is ever new twice.
                let mut next = nest;
                let mut rows = Vec::new();
                for &nr in &new_rates {
                    let nr = nr.round();
                    let Some(mix) = crate::churn::Mix::new(nest, est_pps as u64, nr as u64) else {
                        bail!("churn: nothing to send at {est_pps} + {nr} pps");
                    };
                    let dur = if nr > 0.0 {
                        lab.opts.trial.min(Duration::from_secs_f64(CHURN_MAX_NEW / nr))
                    } else {
                        lab.opts.trial
                    };
                    let mut row = Row {
                        device: dev.name().into(),
                        size: size.label(),
                        x: Some(nr),
                        ..Row::default()
                    };
                    let mut m: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
                    for _ in 0..lab.opts.repeats.max(1) {
                        reset(dev, lab)?;
                        lab.warm(dev, est.clone(), &size)?;
                        let nnew = (nr * dur.as_secs_f64() * 1.05).ceil() as u32 + 1;
                        let nnew = if nr > 0.0 { nnew } else { 0 };
                        let mut fl = (*est).clone();
                        fl.extend(dev.flows_at(next, nnew, 0));
                        next = next.saturating_add(nnew);
                        let mut spec = lab.spec(
                            lab.dut_path(v6),
                            Arc::new(fl),
                            &size,
                            Some(mix.total() as f64),
                            dur,
                            dev.pids(),
                        );
                        spec.mix = Some(mix);
                        // Established flows must not be charged the tester's catch-up bursts.
                        spec.smooth = true;
                        spec.max_packets = mix.max_frames(u64::from(nnew));
                        let xdp0 = dev.fast_path_redirected();
                        let writes0 = dev.fast_path_counter("xdp_recipe_writes");
                        let calls0 = dev.fast_path_counter("xdp_recipe_syscalls");
                        let logged0 = dev.log_counter("ipfix_records_sent");
                        let port_drops0 = lab.topo.dut_rx_dropped();
                        let sock_drops0 = dev.worker_counter("afxdp_kernel_drops");
                        let t = lab.trial(&spec, &format!("{} churn {nr:.0} new/s", dev.name()))?;
                        dev.check_alive()?;
                        let g = t.groups.clone().unwrap_or_default();
                        // A logging device: the NAT log's records of the step (the log thread
                        // sends within milliseconds of the batch; a moment for the last).
                        if let Some(l0) = logged0 {
                            std::thread::sleep(Duration::from_millis(300));
                            if let Some(l1) = dev.log_counter("ipfix_records_sent") {
                                let n = l1.saturating_sub(l0) as f64;
                                m.entry("log_records").or_default().push(n);
                                m.entry("log_records_per_new_flow")
                                    .or_default()
                                    .push(n / g.new.received.max(1) as f64);
                            }
                        }
                        // Where lost frames went on the DUT: its ports' receive rings (the
                        // receive thread fell behind) and the AF_XDP sockets (the daemon did).
                        if let (Some(a), Some(b)) = (port_drops0, lab.topo.dut_rx_dropped()) {
                            m.entry("dut_rx_dropped")
                                .or_default()
                                .push(b.saturating_sub(a) as f64);
                        }
                        if let (Some(a), Some(b)) =
                            (sock_drops0, dev.worker_counter("afxdp_kernel_drops"))
                        {
                            m.entry("afxdp_drops")
                                .or_default()
                                .push(b.saturating_sub(a) as f64);
                        }
                        // What share of the established frames the XDP program carried.
                        if let (Some(a), Some(b)) = (xdp0, dev.fast_path_redirected()) {
                            let share = b.saturating_sub(a) as f64
                                / g.established.received.max(1) as f64;
                            m.entry("est_in_xdp_pct").or_default().push(pct(share.min(1.0)));
                        }
                        // Recipes the daemon wrote (and removed) per bpf(2) call: its batching.
                        if let (Some(w0), Some(c0), Some(w1), Some(c1)) = (
                            writes0,
                            calls0,
                            dev.fast_path_counter("xdp_recipe_writes"),
                            dev.fast_path_counter("xdp_recipe_syscalls"),
                        ) {
                            let calls = c1.saturating_sub(c0);
                            if calls > 0 {
                                m.entry("recipes_per_call")
                                    .or_default()
                                    .push(w1.saturating_sub(w0) as f64 / calls as f64);
                            }
                        }
                        let secs = t.send_secs.max(1e-9);
                        lab.progress(&format!(
                            "churn {:<16} {nr:>8.0} new/s: established lost {} of {} ({:.3}%), p99 {:.0} us; new delivered {:.0}/s ({:.1}% lost); device CPU {:.0}%",
                            dev.name(),
                            g.established.lost,
                            g.established.sent,
                            pct(g.established.loss),
                            g.established.latency.p99_us,
                            g.new.received as f64 / secs,
                            pct(g.new.loss),
                            pct(t.cpu.device_busy)
                        ));
                        if t.sender_short {
                            row.tester_limited = true;
                        }
                        for (k, v) in [
                            ("offered_pps", mix.total() as f64),
                            ("est_lost", g.established.lost as f64),
                            ("est_loss_pct", pct(g.established.loss)),
                            ("est_latency_p50_us", g.established.latency.p50_us),
                            ("est_latency_p99_us", g.established.latency.p99_us),
                            ("est_latency_max_us", g.established.latency.max_us),
                            ("new_sent_per_s", g.new.sent as f64 / secs),
                            ("new_rx_per_s", g.new.received as f64 / secs),
                            ("new_loss_pct", pct(g.new.loss)),
                            ("new_latency_p50_us", g.new.latency.p50_us),
                            ("tx_refused", t.tx_refused as f64),
                            ("sender_max_burst", t.sender_max_burst as f64),
                            ("sender_slipped", t.sender_slipped as f64),
                            ("dut_busy_pct", pct(t.cpu.device_busy)),
                            ("dut_ns_per_pkt", t.cpu.dut_ns_per_pkt),
                            ("proc_ns_per_pkt", t.cpu.proc_ns_per_pkt),
                            ("dut_other_pct", pct(t.cpu.dut_other)),
                        ] {
                            m.entry(k).or_default().push(v);
                        }
                        row.trials.push(t);
                    }
                    for (k, v) in m {
                        row.metrics.insert(k.into(), Spread::of(&v));
                    }
                    if row.tester_limited {
                        row.notes.push(format!(
                            "the tester could not offer {:.0} pps",
                            mix.total()
                        ));
                    }
                    rows.push(row);
                }
                // The slow path's sustained rate: the most new flows it delivered per second
                // in any step, and what it kept at the highest step.
                let best = rows
                    .iter()
                    .filter_map(|r| Some((r.x?, r.metric("new_rx_per_s")?.median)))
                    .fold((0.0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
                if let Some(last) = rows.last_mut() {
                    let at_top = last.metric("new_rx_per_s").map(|s| s.median).unwrap_or(0.0);
                    last.notes.push(format!(
                        "new flows delivered: at most {:.0}/s (offered {:.0}/s); {:.0}/s at the highest step ({:.0}/s offered)",
                        best.1,
                        best.0,
                        at_top,
                        last.x.unwrap_or(0.0)
                    ));
                }
                Ok(rows)
            })?;
            self.add(&e, rows);
        }
        self.push(e);
        Ok(())
    }
}
