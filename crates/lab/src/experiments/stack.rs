//! Experiments over the tester's own IP stack (see [`crate::sockets`]): tcp (iperf3), http
//! (S3's apachebench test), rtt (S3's ping) and owd (S2's UDP bounce).

use super::*;

/// Experiments over the tester's own stack (see [`crate::sockets`]).
impl Lab {
    pub(super) fn tcp(&mut self) -> Result<()> {
        let secs = self.opts.trial.as_secs_f64();
        let e = Self::exp(
            "tcp",
            "TCP throughput (iperf3)",
            None,
            format!(
                "iperf3 (one TCP stream, {secs:.1} s) from the tester's A-side address to an iperf3 server bound to its \
                 D-side address, through the device; the tester's own stack carries it (policy routing in the tester \
                 namespace; segmentation offloads stay off on every veth). Both iperf3 processes run off the DUT CPU, and so does the \
                 tester's receive work for what comes back (its inside port in threaded NAPI on the tester's CPUs). \
                 Throughput is the receiver's; device CPU % is the DUT CPU's busy share and ns/byte its busy time per \
                 received byte. Repeated {} time(s): median [min..max]; the source address the server saw is noted.",
                self.opts.repeats
            ),
        );
        for d in self.opts.devices.clone() {
            let ep = crate::sockets::endpoints(&d)?;
            let row = self.with_device(&d, |lab, dev| {
                let _peer = crate::sockets::TunnelPeer::start(&lab.topo, dev.name())?;
                let mut row = Row {
                    device: dev.name().into(),
                    size: "tcp".into(),
                    ..Row::default()
                };
                let mut m: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
                let mut peers = Vec::new();
                for i in 0..lab.opts.repeats {
                    sys::check_stop()?;
                    let before = sys::cpu_times();
                    let xdp0 = dev.fast_path_redirected();
                    let (c, peer) =
                        crate::sockets::iperf_tcp(&lab.topo, &ep, secs, 5201 + i as u16)?;
                    let after = sys::cpu_times();
                    // XDP devices: the packets (both ways) their XDP program carried.
                    if let (Some(a), Some(b)) = (xdp0, dev.fast_path_redirected()) {
                        m.entry("xdp_redirected")
                            .or_default()
                            .push(b.saturating_sub(a) as f64);
                    }
                    let (busy, busy_ns) =
                        crate::sockets::cpu_busy(&before, &after, lab.topo.dut_cpu);
                    lab.progress(&format!(
                        "tcp {:<18} {:>9.1} Mb/s, {:>5.0} retransmits, DUT cpu {:>3.0}%, server saw {}",
                        dev.name(),
                        c.received_bps / 1e6,
                        c.retransmits,
                        pct(busy),
                        peer.as_deref().unwrap_or("?")
                    ));
                    m.entry("tcp_mbps").or_default().push(c.received_bps / 1e6);
                    m.entry("retransmits").or_default().push(c.retransmits);
                    m.entry("dut_busy_pct").or_default().push(pct(busy));
                    if c.bytes > 0.0 {
                        m.entry("dut_ns_per_byte")
                            .or_default()
                            .push(busy_ns / c.bytes);
                    }
                    if let Some(p) = peer {
                        if !peers.contains(&p) {
                            peers.push(p);
                        }
                    }
                }
                for (k, v) in m {
                    row.metrics.insert(k.into(), Spread::of(&v));
                }
                row.notes.push(format!(
                    "client {} -> {}; the server saw the client as {}",
                    ep.client,
                    ep.target,
                    if peers.is_empty() {
                        "(unknown)".to_string()
                    } else {
                        peers.join(", ")
                    }
                ));
                Ok(row)
            })?;
            self.add(&e, vec![row]);
        }
        self.push(e);
        Ok(())
    }

    pub(super) fn owd(&mut self) -> Result<()> {
        let n = self.opts.bounces;
        let e = Self::exp(
            "owd",
            "One-way delay by UDP payload (S2 bounce)",
            None,
            format!(
                "S2's method: a UDP packet of each payload size bounced {n} times between a client socket on the tester's \
                 A side and an echo socket on its D side, through the device, timed on one clock; one-way delay = \
                 elapsed / (2 x {n}). Payloads above the 1500-byte MTU fragment. Repeated {} time(s): median [min..max]; \
                 a repetition with a lost packet (1 s timeout) is counted in lost_runs, not in the delay.",
                self.opts.repeats
            ),
        );
        for d in self.opts.devices.clone() {
            let ep = crate::sockets::endpoints(&d)?;
            let rows = self.with_device(&d, |lab, dev| {
                let _peer = crate::sockets::TunnelPeer::start(&lab.topo, dev.name())?;
                let mut rows = Vec::new();
                let ns = lab.topo.ns_tester.clone();
                for &p in &lab.opts.payloads.clone() {
                    let mut v = Vec::new();
                    let mut lost = 0.0;
                    for _ in 0..lab.opts.repeats {
                        sys::check_stop()?;
                        match crate::sockets::owd_bounce(&ns, &ep, 7007, p, n)? {
                            Some(us) => v.push(us),
                            None => lost += 1.0,
                        }
                    }
                    let mut row = Row {
                        device: dev.name().into(),
                        size: p.to_string(),
                        ..Row::default()
                    };
                    if !v.is_empty() {
                        let s = Spread::of(&v);
                        lab.progress(&format!(
                            "owd {:<18} {p:>5} B: {:>8.1} us [{:.1}..{:.1}]",
                            dev.name(),
                            s.median,
                            s.min,
                            s.max
                        ));
                        row.metrics.insert("owd_us".into(), s);
                    } else {
                        lab.progress(&format!("owd {:<18} {p:>5} B: lost", dev.name()));
                        row.notes
                            .push(format!("{p}-byte payload: every repetition lost a packet"));
                    }
                    row.metrics.insert("lost_runs".into(), Spread::of(&[lost]));
                    rows.push(row);
                }
                Ok(rows)
            })?;
            self.add(&e, rows);
        }
        self.push(e);
        Ok(())
    }

    pub(super) fn rtt(&mut self) -> Result<()> {
        use crate::sockets::{PING_COUNT, PING_INTERVAL};
        let e = Self::exp(
            "rtt",
            "Round-trip time (S3: ping)",
            None,
            format!(
                "S3's method: ping (iputils) from the tester's A-side address to its D-side address through the device                  (for NAT64 and SIIT the D side's address under the prefix), {PING_COUNT} echo requests {PING_INTERVAL} s                  apart (S3 sent 21), after 3 unmeasured ones (neighbour discovery), off the DUT CPU, the tester's own stack (as tcp). RTT: median [min..max] over every                  reply of {} run(s); mean RTT and loss per run. Every reply is kept for the t-test below.",
                self.opts.repeats
            ),
        );
        if !sys::have("ping") {
            bail!("the rtt experiment needs ping: apt-get install iputils-ping");
        }
        for d in self.opts.devices.clone() {
            let ep = crate::sockets::endpoints(&d)?;
            let row = self.with_device(&d, |lab, dev| {
                let _peer = crate::sockets::TunnelPeer::start(&lab.topo, dev.name())?;
                // Unmeasured: neighbour discovery and duplicate address detection on the just
                // configured addresses held forward6's first echoes for up to a second.
                let warm = crate::sockets::ping_run(&lab.topo, &ep, 3)?;
                if warm.received == 0.0 {
                    lab.progress(&format!("rtt {}: no reply to the warm-up echoes", dev.name()));
                }
                let mut rtts = Vec::new();
                let (mut means, mut losses) = (Vec::new(), Vec::new());
                for _ in 0..lab.opts.repeats {
                    sys::check_stop()?;
                    let r = crate::sockets::ping_run(&lab.topo, &ep, PING_COUNT)?;
                    let s = Spread::of(&r.rtts_ms);
                    lab.progress(&format!(
                        "rtt {:<18} {:>3} of {:>3} replies, median {:.3} ms [{:.3}..{:.3}], mean {:.3} ms",
                        dev.name(),
                        r.received,
                        r.transmitted,
                        s.median,
                        s.min,
                        s.max,
                        s.mean
                    ));
                    if s.n > 0 {
                        means.push(s.mean);
                    }
                    losses.push(r.loss_pct());
                    rtts.extend(r.rtts_ms);
                }
                let mut row = Row {
                    device: dev.name().into(),
                    size: "ping".into(),
                    ..Row::default()
                };
                if !rtts.is_empty() {
                    row.metrics.insert("rtt_ms".into(), Spread::of(&rtts));
                    row.metrics.insert("rtt_mean_ms".into(), Spread::of(&means));
                    row.samples.insert("rtt_ms".into(), rtts);
                } else {
                    row.notes.push("no echo reply came back".into());
                }
                row.metrics.insert("loss_pct".into(), Spread::of(&losses));
                row.notes
                    .push(format!("ping {} -> {}", ep.client, ep.target));
                Ok(row)
            })?;
            self.add(&e, vec![row]);
        }
        self.push(e);
        Ok(())
    }

    pub(super) fn http(&mut self) -> Result<()> {
        use crate::sockets::HTTP_FILE_BYTES;
        let (reqs, concs) = (self.opts.requests.clone(), self.opts.concurrency.clone());
        let list = |v: &[usize]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let e = Self::exp(
            "http",
            "HTTP (S3: ab against python3 http.server)",
            Some("concurrency"),
            format!(
                "S3's method: a python3 http.server (threading, listen backlog {backlog}) on the tester's D-side address \
                 serves a {HTTP_FILE_BYTES}-byte file; apachebench (ab) on the A side fetches it through the device (the \
                 tester's own stack, as tcp), over a grid: {} requests per run x {} at once (one row per cell). \
                 Requests/s, transfer KB/s (ab's Kbytes/sec received), mean time per request (ms), failed requests, \
                 DUT CPU %; the body length is checked (ab's document length and HTML bytes). Repeated {} time(s) a \
                 cell: median [min..max], every repetition kept for the t-test below. Both programs run off the DUT CPU, \
                 and so does the tester's receive work for the responses (its inside port in threaded NAPI on the \
                 tester's CPUs).",
                list(&reqs),
                list(&concs),
                self.opts.repeats,
                backlog = crate::sockets::HTTP_BACKLOG,
            ),
        );
        if !sys::have("ab") {
            bail!("the http experiment needs apachebench: apt-get install apache2-utils");
        }
        let dir = self.s3_page()?;
        for d in self.opts.devices.clone() {
            let ep = crate::sockets::endpoints(&d)?;
            let rows = self.with_device(&d, |lab, dev| {
                let _peer = crate::sockets::TunnelPeer::start(&lab.topo, dev.name())?;
                let _srv = crate::sockets::HttpServer::start(&lab.topo, &ep, 8080, &dir)?;
                let mut rows = Vec::new();
                for &n in &reqs {
                    for &c in &concs {
                        rows.push(lab.http_cell(dev, &ep, n, c)?);
                    }
                }
                Ok(rows)
            })?;
            self.add(&e, rows);
        }
        self.push(e);
        Ok(())
    }

    /// The directory the web server serves: S3's page, `s3.bin`,
    /// [`crate::sockets::HTTP_FILE_BYTES`] long.
    pub(super) fn s3_page(&self) -> Result<std::path::PathBuf> {
        let dir = self.topo.dir.join("http");
        std::fs::create_dir_all(&dir)?;
        let n = crate::sockets::HTTP_FILE_BYTES;
        let body: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("s3.bin"), &body)?;
        Ok(dir)
    }

    /// One cell of the http grid: `n` requests, `c` at once, `--repeats` times.
    fn http_cell(
        &mut self,
        dev: &dyn Device,
        ep: &crate::sockets::Endpoints,
        n: usize,
        c: usize,
    ) -> Result<Row> {
        use crate::sockets::HTTP_FILE_BYTES;
        let mut row = Row {
            device: dev.name().into(),
            size: n.to_string(),
            x: Some(c as f64),
            ..Row::default()
        };
        let mut m: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut bad_len = Vec::new();
        for _ in 0..self.opts.repeats {
            sys::check_stop()?;
            let before = sys::cpu_times();
            let r = crate::sockets::ab_run(&self.topo, ep, 8080, "s3.bin", n, c)?;
            let after = sys::cpu_times();
            let (busy, _) = crate::sockets::cpu_busy(&before, &after, self.topo.dut_cpu);
            // ab, the server and both hosts' TCP stacks share the other CPUs: when they are
            // full, the tester limits the rate, not the device.
            let others: Vec<f64> = (0..before.len())
                .filter(|&c| c != self.topo.dut_cpu)
                .map(|c| crate::sockets::cpu_busy(&before, &after, c).0)
                .collect();
            let tester = others.iter().sum::<f64>() / others.len().max(1) as f64;
            self.progress(&format!(
                "http {:<18} {n:>5} x {c:<4} {:>8.1} req/s, {:>9.0} KB/s, {:>7.2} ms/req, {} failed, longest {:.0} ms, slowest connect {:.0} ms, DUT cpu {:>3.0}%, tester {:>3.0}%",
                dev.name(),
                r.requests_per_s,
                r.transfer_kbytes_s,
                r.time_per_request_ms,
                r.failed,
                r.longest_ms.unwrap_or(f64::NAN),
                r.connect_max_ms.unwrap_or(f64::NAN),
                pct(busy),
                pct(tester)
            ));
            let good = r.document_length == HTTP_FILE_BYTES as f64
                && r.html_transferred == r.complete * HTTP_FILE_BYTES as f64;
            if !good {
                bad_len.push(format!(
                    "document length {} B, {} B of bodies for {} requests",
                    r.document_length, r.html_transferred, r.complete
                ));
            }
            m.entry("requests_per_s")
                .or_default()
                .push(r.requests_per_s);
            m.entry("transfer_kbytes_s")
                .or_default()
                .push(r.transfer_kbytes_s);
            m.entry("time_per_request_ms")
                .or_default()
                .push(r.time_per_request_ms);
            m.entry("failed_requests").or_default().push(r.failed);
            m.entry("dut_busy_pct").or_default().push(pct(busy));
            m.entry("tester_busy_pct").or_default().push(pct(tester));
            for (k, v) in [
                ("p50_ms", r.p50_ms),
                ("p99_ms", r.p99_ms),
                ("longest_ms", r.longest_ms),
                ("connect_max_ms", r.connect_max_ms),
            ] {
                if let Some(v) = v {
                    m.entry(k).or_default().push(v);
                }
            }
        }
        for (k, v) in m {
            row.metrics.insert(k.into(), Spread::of(&v));
            // Each repetition's value: the report's Welch's t-test between devices.
            row.samples.insert(k.into(), v);
        }
        if bad_len.is_empty() {
            row.notes.push(format!(
                "client {} -> {}; every response body was {HTTP_FILE_BYTES} bytes",
                ep.client, ep.target
            ));
        } else {
            row.notes
                .push(format!("body length mismatch: {}", bad_len.join("; ")));
        }
        Ok(row)
    }
}
