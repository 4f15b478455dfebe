//! S3's DNS64 path (issue 27): S3 ran NAT64 with TAYGA behind a DNS64 proxy (TOTD) over a real
//! DNS server (BIND), and its IPv6-only clients reached IPv4 web servers by name. Here the
//! IPv6-only client (the tester's A side) asks a DNS64 resolver on the NAT64 gateway (the DUT)
//! for AAAA records of names that have only A records; a real authoritative server (unbound
//! with an auth-zone, the BIND of this testbed) answers on the IPv4 side (the tester's D
//! address), and the web server (S3's 173,225-byte page) lives there too.
//!
//! The DNS64 resolvers, each in turn the client's resolver at 2001:2:0:1::1 port 53:
//! - `xlat-dns64`: xlat's own proxy (crates/dns64), a `[dns64]` table in the gateway's
//!   configuration (with TAYGA as the NAT64, `xlat dns64` alone on the DUT, as TOTD ran beside
//!   TAYGA); no cache: every query goes upstream (AAAA, then A when there is none).
//! - `unbound-dns64`: unbound with `module-config: "dns64 iterator"` forwarding to the same
//!   authoritative server; it caches.
//!
//! Both run on the DUT's CPUs at the same real-time priority (the gateway's). Measured per
//! resolver: AAAA queries per second and latency with dnsperf (a pass over never-asked names,
//! then names asked a moment before), the answers checked with dig against RFC 6147 (5.1.1 real
//! AAAA records win; 5.1.6-5.1.7 and 5.2 synthesis from the A records in the pref64) and RFC
//! 6052 2.2 (the IPv4 address in the last 32 bits of the /96), and S3's end-to-end path: ab
//! fetching the page by name (the client's resolv.conf names the DNS64) beside by address.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use super::*;
use crate::addressing::{pref64, A6_ADDR, D_ADDR, PREF64, UA6_ADDR};
use crate::dns::*;
use crate::sockets::{cpu_busy, non_dut_cpus, AbResult, HTTP_FILE_BYTES};

/// The web server's port (as the http experiment's).
const WEB_PORT: u16 = 8080;

/// The tester's CPU at or above this busy share (median of a dnsperf row) makes it a limit
/// of the row: dnsperf and the authoritative server share it.
pub const TESTER_BUSY_LIMIT_PCT: f64 = 95.0;

/// Marks a dnsperf row whose tester CPU was saturated: its queries/s is a lower bound of the
/// resolver's (and says whether the DUT CPU was saturated too).
pub fn mark_tester_limited(row: &mut Row) {
    let (Some(t), Some(d)) = (row.metric("tester_busy_pct"), row.metric("dut_busy_pct")) else {
        return;
    };
    if t.median >= TESTER_BUSY_LIMIT_PCT {
        row.tester_limited = true;
        row.notes.push(format!(
            "the tester's CPU (dnsperf and the authoritative server) was {:.0}% busy: queries/s is a lower bound of the resolver's{}",
            t.median,
            if d.median >= TESTER_BUSY_LIMIT_PCT {
                format!(" (the DUT CPU was {:.0}% busy too: both at their limit)", d.median)
            } else {
                format!(" (the DUT CPU had room: {:.0}% busy)", d.median)
            }
        ));
    }
}

/// Experiment `dns64` (module docs).
impl Lab {
    pub(super) fn dns64(&mut self) -> Result<()> {
        for (tool, pkg) in [
            ("unbound", "unbound"),
            ("dnsperf", "dnsperf"),
            ("dig", "bind9-dnsutils"),
            ("ab", "apache2-utils"),
        ] {
            if !sys::have(tool) {
                bail!("the dns64 experiment needs {tool}: apt-get install {pkg}");
            }
        }
        let secs = self.opts.trial.as_secs_f64();
        let reps = self.opts.repeats.max(1);
        let n = self.opts.requests.first().copied().unwrap_or(1000);
        let c = self.opts.concurrency.first().copied().unwrap_or(10);
        let e = Self::exp(
            "dns64",
            "S3's DNS64 path: DNS64 resolvers on the NAT64 gateway",
            None,
            format!(
                "S3 ran TAYGA with a DNS64 proxy (TOTD) over BIND; its clients reached IPv4 web servers by name. Here the \
                 IPv6-only client (the tester's A side, {A6_ADDR}) asks a DNS64 on the gateway ({UA6_ADDR} port 53) for \
                 AAAA records of names in {ZONE}. that have only A records; a real authoritative server (unbound, \
                 auth-zone) answers on the IPv4 side ({D_ADDR}, the tester's D port, where the web server is too). \
                 Resolvers: xlat-dns64 = xlat's DNS64 proxy ([dns64] in the xlat gateway's configuration; beside \
                 tayga-nat64 `xlat dns64` alone), no cache; unbound-dns64 = unbound {unbound} with module-config \
                 \"dns64 iterator\", dns64-prefix {PREF64}, one thread, forwarding to the same server, caching. Both \
                 run on the DUT CPU at the gateway daemon's real-time priority; dnsperf, the authoritative server, \
                 ab and the web server run on the other CPUs. Rows: AAAA uncached = dnsperf ({dnsperf}, UDP, \
                 {DNSPERF_OUTSTANDING} queries in flight) over {UNCACHED_NAMES} never-asked names, once, at most \
                 {secs:.1} s (every query makes the DNS64 ask upstream: AAAA, then A); AAAA cached = right after, the \
                 first {CACHED_NAMES} of those names over and over for {secs:.1} s (unbound answers from its cache; \
                 xlat's proxy has none and asks upstream again). queries/s and latency are dnsperf's (mean, and max; \
                 dnsperf prints no percentiles); lost = no answer within 1 s; the uncached pass ends early when its names \
                 run out (pass (s)). dnsperf and the authoritative server share the tester's CPU: a dnsperf row with \
                 the tester CPU {TESTER_BUSY_LIMIT_PCT:.0}% busy or more is marked * and its queries/s is a lower \
                 bound of the resolver's. answers = dig from the client: A and \
                 AAAA of www (one A), two (two A), dual (A and a real AAAA) and of a name of each pass; every \
                 synthesized AAAA must be {PREF64} + the A record (RFC 6147 5.1.6-5.1.7, 5.2; RFC 6052 2.2) and a real \
                 AAAA must come back unsynthesized (RFC 6147 5.1.1). HTTP by address = ab fetching S3's \
                 {HTTP_FILE_BYTES}-byte page from [{target}]:{WEB_PORT}; HTTP by name = the same from \
                 {WEB_NAME}:{WEB_PORT} (the client's resolv.conf names the DNS64; ab resolves the name once per run, \
                 so the two differ by one lookup), {n} requests, {c} at once. {reps} repetition(s), each with its own \
                 never-asked names: median [min..max].",
                unbound = tool_version(&["unbound", "-V"]).replace("Version ", ""),
                dnsperf = tool_version(&["dnsperf", "-h"]).replace("Version ", ""),
                target = pref64(D_ADDR),
            ),
        );
        let nat64: Vec<String> = self
            .opts
            .devices
            .iter()
            .filter(|d| is_nat64(d))
            .cloned()
            .collect();
        for d in self.opts.devices.iter().filter(|d| !is_nat64(d)) {
            self.progress(&format!(
                "dns64: {d} is not a NAT64 device; the DNS64 path runs over the NAT64 ones"
            ));
            self.bar.unit_done();
            self.bar.unit_done();
        }
        if nat64.is_empty() {
            self.res.notes.push(
                "dns64: no NAT64 device among --devices (xlat-nat64..., tayga-nat64), nothing measured".into(),
            );
            return Ok(());
        }
        self.res
            .versions
            .insert("unbound".into(), tool_version(&["unbound", "-V"]));
        self.res
            .versions
            .insert("dnsperf".into(), tool_version(&["dnsperf", "-h"]));
        let dir = self.topo.dir.join("dns64");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ds = dir.display().to_string();
        std::fs::write(dir.join(format!("{ZONE}.zone")), zone_text(reps))?;
        std::fs::write(dir.join("auth.conf"), auth_conf(&ds))?;
        std::fs::write(dir.join("unbound-dns64.conf"), unbound_dns64_conf(&ds))?;
        std::fs::write(
            dir.join("xlat-dns64.toml"),
            format!("# written by xlat lab{}", xlat_dns64_section()),
        )?;
        for rep in 0..reps {
            std::fs::write(
                dir.join(format!("uncached-{rep}.txt")),
                query_file(rep, UNCACHED_NAMES),
            )?;
            std::fs::write(
                dir.join(format!("cached-{rep}.txt")),
                query_file(rep, CACHED_NAMES),
            )?;
        }
        let web = self.s3_page()?;
        let others = non_dut_cpus(self.topo.dut_cpu);
        let conf = dir.join("auth.conf").display().to_string();
        let mut auth = Server::start(
            &self.topo.ns_tester,
            &others,
            None,
            &["unbound", "-d", "-c", &conf],
            &dir.join("auth.log"),
            "the authoritative server (unbound)",
        )?;
        wait_udp_listening(
            &self.topo.ns_tester,
            &format!("{D_ADDR}:53"),
            Some(&mut auth),
            20,
        )?;
        let _resolv = ResolvConf::write(&self.topo.ns_tester, UA6_ADDR)?;
        for d in nat64 {
            for r in [Resolver::Xlat, Resolver::Unbound] {
                let in_gateway = r == Resolver::Xlat && d.starts_with("xlat-");
                if in_gateway {
                    *self.topo.xlat_extra.borrow_mut() = xlat_dns64_section();
                }
                let rows = self.with_device(&d, |lab, dev| lab.dns64_resolver(dev, r, &dir, &web));
                self.topo.xlat_extra.borrow_mut().clear();
                auth.check_alive()?;
                self.add(&e, rows?);
            }
        }
        self.push(e);
        Ok(())
    }

    /// One resolver in front of one NAT64 device: its rows.
    fn dns64_resolver(
        &mut self,
        dev: &dyn Device,
        r: Resolver,
        dir: &Path,
        web: &Path,
    ) -> Result<Vec<Row>> {
        let label = format!("{} + {}", dev.name(), r.name());
        let ep = crate::sockets::endpoints(dev.name())?;
        let _web = crate::sockets::HttpServer::start(&self.topo, &ep, WEB_PORT, web)?;
        let dut_cpus = self
            .topo
            .device_cpus()
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let prio = Some(sys::RT_PRIO_SLOW_PATH);
        let mut server = match r {
            Resolver::Unbound => {
                let conf = dir.join("unbound-dns64.conf").display().to_string();
                Some(Server::start(
                    &self.topo.ns_dut,
                    &dut_cpus,
                    prio,
                    &["unbound", "-d", "-c", &conf],
                    &dir.join("unbound-dns64.log"),
                    "unbound-dns64",
                )?)
            }
            Resolver::Xlat if !dev.name().starts_with("xlat-") => {
                let bin = crate::device::xlat_bin()?.display().to_string();
                let conf = dir.join("xlat-dns64.toml").display().to_string();
                Some(Server::start(
                    &self.topo.ns_dut,
                    &dut_cpus,
                    prio,
                    &[&bin, "dns64", "-c", &conf],
                    &dir.join("xlat-dns64.log"),
                    "xlat dns64",
                )?)
            }
            // In the gateway: its [dns64] (Topo::xlat_extra).
            Resolver::Xlat => None,
        };
        wait_udp_listening(
            &self.topo.ns_dut,
            &format!("[{UA6_ADDR}]:53"),
            server.as_mut(),
            20,
        )?;
        // Unmeasured: the first answer (neighbour discovery, the upstream's first contact).
        let mut warm = false;
        for _ in 0..5 {
            if self
                .dig("AAAA", &format!("ns.{ZONE}"))
                .is_some_and(|v: Vec<Ipv6Addr>| !v.is_empty())
            {
                warm = true;
                break;
            }
            sys::check_stop()?;
        }
        if !warm {
            self.progress(&format!("dns64 {label}: no answer to the warm-up query"));
        }
        let row = |case: &str| Row {
            device: label.clone(),
            size: case.into(),
            ..Row::default()
        };
        let (mut unc, mut cac) = (row("AAAA uncached"), row("AAAA cached"));
        let (mut by_addr, mut by_name) = (row("HTTP by address"), row("HTTP by name"));
        let mut m: [BTreeMap<&'static str, Vec<f64>>; 4] = Default::default();
        let url_name = format!("http://{WEB_NAME}:{WEB_PORT}/s3.bin");
        for rep in 0..self.opts.repeats.max(1) {
            sys::check_stop()?;
            let f = dir.join(format!("uncached-{rep}.txt"));
            self.dnsperf_pass(&label, "uncached", &f, true, &mut m[0], &mut unc.notes)?;
            let f = dir.join(format!("cached-{rep}.txt"));
            self.dnsperf_pass(&label, "cached", &f, false, &mut m[1], &mut cac.notes)?;
            let n = self.opts.requests.first().copied().unwrap_or(1000);
            let c = self.opts.concurrency.first().copied().unwrap_or(10);
            let a = crate::sockets::ab_run(&self.topo, &ep, WEB_PORT, "s3.bin", n, c);
            self.ab_case(&label, "by address", a, n, &mut m[2], &mut by_addr.notes);
            let a = crate::sockets::ab_url(&self.topo, ep.client, &url_name, n, c);
            self.ab_case(&label, "by name", a, n, &mut m[3], &mut by_name.notes);
            if let Some(s) = server.as_mut() {
                s.check_alive()?;
            }
        }
        for (row, m) in [&mut unc, &mut cac, &mut by_addr, &mut by_name]
            .into_iter()
            .zip(m)
        {
            for (k, v) in m {
                row.metrics.insert(k.into(), Spread::of(&v));
                row.samples.insert(k.into(), v);
            }
        }
        for row in [&mut unc, &mut cac] {
            mark_tester_limited(row);
        }
        by_addr.notes.push(format!(
            "client {} -> [{}]:{WEB_PORT}",
            ep.client, ep.target
        ));
        by_name.notes.push(format!(
            "client {} -> {WEB_NAME}:{WEB_PORT} (AAAA from {} at {UA6_ADDR})",
            ep.client,
            r.name()
        ));
        let answers = self.dns64_answers(&label)?;
        Ok(vec![unc, cac, answers, by_addr, by_name])
    }

    /// `dig +short TYPE name @DNS64` from the client; None when dig failed or printed
    /// something that is not an address.
    fn dig<T: std::str::FromStr + Ord>(&self, qtype: &str, name: &str) -> Option<Vec<T>> {
        let server = format!("@{UA6_ADDR}");
        let o = sys::cmd(
            10,
            &[
                "ip",
                "netns",
                "exec",
                &self.topo.ns_tester,
                "dig",
                "+short",
                "+time=1",
                "+tries=2",
                &server,
                qtype,
                name,
            ],
        )
        .ok()?;
        if !o.ok {
            return None;
        }
        parse_dig_short(&o.stdout)
    }

    /// The answers row: every checked name's A and AAAA as RFC 6147 and RFC 6052 say.
    fn dns64_answers(&mut self, label: &str) -> Result<Row> {
        let mut row = Row {
            device: label.into(),
            size: "answers".into(),
            ..Row::default()
        };
        let mut names = checked_names();
        // A name of each pass (asked already: unbound answers it from its cache).
        for rep in 0..self.opts.repeats.max(1) {
            names.push((bulk_name(rep, 0), vec![D_ADDR], vec![]));
        }
        let (mut checked, mut wrong) = (0.0, 0.0);
        for (n, a4, a6) in &names {
            sys::check_stop()?;
            let name = format!("{n}.{ZONE}");
            // RFC 6147 5.1: A queries are answered as the authoritative server does.
            let mut want4 = a4.clone();
            want4.sort();
            let got4: Option<Vec<Ipv4Addr>> = self.dig("A", &name);
            checked += 1.0;
            if got4.as_ref() != Some(&want4) {
                wrong += 1.0;
                row.notes
                    .push(format!("{name} A: got {got4:?}, expected {want4:?}"));
            }
            let want6 = expected_aaaa(a4, a6);
            let got6: Option<Vec<Ipv6Addr>> = self.dig("AAAA", &name);
            checked += 1.0;
            if got6.as_ref() != Some(&want6) {
                wrong += 1.0;
                row.notes
                    .push(format!("{name} AAAA: got {got6:?}, expected {want6:?}"));
            }
        }
        self.progress(&format!(
            "dns64 {label:<32} answers: {wrong} wrong of {checked} (A and AAAA of {} names)",
            names.len()
        ));
        if wrong == 0.0 {
            row.notes.push(format!(
                "every answer as expected: synthesized AAAA = {PREF64} + the A record, www -> {}, real AAAA of dual kept",
                pref64(D_ADDR)
            ));
        }
        row.metrics
            .insert("answers_checked".into(), Spread::of(&[checked]));
        row.metrics
            .insert("answers_wrong".into(), Spread::of(&[wrong]));
        Ok(row)
    }

    /// One dnsperf run against the DNS64 from the client: `once` = one pass over the file.
    fn dnsperf_pass(
        &mut self,
        label: &str,
        what: &str,
        file: &Path,
        once: bool,
        m: &mut BTreeMap<&'static str, Vec<f64>>,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let secs = self.opts.trial.as_secs_f64().max(0.1);
        let cpus = non_dut_cpus(self.topo.dut_cpu);
        let (server, local, f) = (
            UA6_ADDR.to_string(),
            A6_ADDR.to_string(),
            file.display().to_string(),
        );
        let (l, q) = (format!("{secs}"), DNSPERF_OUTSTANDING.to_string());
        let mut args: Vec<&str> = vec![
            "ip",
            "netns",
            "exec",
            &self.topo.ns_tester,
            "taskset",
            "-c",
            &cpus,
            "dnsperf",
            "-s",
            &server,
            "-a",
            &local,
            "-d",
            &f,
            "-l",
            &l,
            "-q",
            &q,
            "-t",
            "1",
        ];
        if once {
            args.extend(["-n", "1"]);
        }
        let before = sys::cpu_times();
        let o = sys::cmd((secs + 20.0).ceil() as u64, &args)?;
        let after = sys::cpu_times();
        let r = parse_dnsperf(&o.stdout)
            .with_context(|| format!("dnsperf {what}: {}{}", o.stdout.trim(), o.stderr.trim()))?;
        let (dut, _) = cpu_busy(&before, &after, self.topo.dut_cpu);
        let (tester, _) = cpu_busy(&before, &after, self.topo.tester_cpu);
        let lost_pct = if r.sent > 0.0 {
            r.lost / r.sent * 100.0
        } else {
            0.0
        };
        let noerror_pct = if r.completed > 0.0 {
            r.noerror / r.completed * 100.0
        } else {
            0.0
        };
        self.progress(&format!(
            "dns64 {label:<32} {what:<8} {:>9.0} q/s, mean {:>7.3} ms, {:>6.0} sent in {:.2} s, lost {:.2}%, NOERROR {:.1}%, DUT cpu {:>3.0}%, tester cpu {:>3.0}%",
            r.qps,
            r.latency.map_or(f64::NAN, |l| l[0] * 1e3),
            r.sent,
            r.run_secs,
            lost_pct,
            noerror_pct,
            pct(dut),
            pct(tester)
        ));
        m.entry("qps").or_default().push(r.qps);
        m.entry("queries_sent").or_default().push(r.sent);
        m.entry("run_secs").or_default().push(r.run_secs);
        m.entry("lost_pct").or_default().push(lost_pct);
        m.entry("noerror_pct").or_default().push(noerror_pct);
        m.entry("dut_busy_pct").or_default().push(pct(dut));
        m.entry("tester_busy_pct").or_default().push(pct(tester));
        match r.latency {
            Some([mean, min, max, sd]) => {
                m.entry("latency_mean_ms").or_default().push(mean * 1e3);
                m.entry("latency_min_ms").or_default().push(min * 1e3);
                m.entry("latency_max_ms").or_default().push(max * 1e3);
                if sd.is_finite() {
                    m.entry("latency_sd_ms").or_default().push(sd * 1e3);
                }
            }
            None => notes.push(format!("a {what} pass had no answered query")),
        }
        Ok(())
    }

    /// One ab run's numbers into `m`; a run that could not start (the name did not resolve)
    /// counts every request failed.
    fn ab_case(
        &mut self,
        label: &str,
        what: &str,
        r: Result<AbResult>,
        n: usize,
        m: &mut BTreeMap<&'static str, Vec<f64>>,
        notes: &mut Vec<String>,
    ) {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                self.progress(&format!("dns64 {label:<32} HTTP {what}: failed: {e:#}"));
                notes.push(format!("ab failed: {e:#}"));
                AbResult {
                    failed: n as f64,
                    ..AbResult::default()
                }
            }
        };
        self.progress(&format!(
            "dns64 {label:<32} HTTP {what:<10} {:>8.1} req/s, {:>9.0} KB/s, {} complete, {} failed",
            r.requests_per_s, r.transfer_kbytes_s, r.complete, r.failed
        ));
        if r.complete > 0.0
            && (r.document_length != HTTP_FILE_BYTES as f64
                || r.html_transferred != r.complete * HTTP_FILE_BYTES as f64)
        {
            notes.push(format!(
                "body length mismatch: document length {} B, {} B of bodies for {} requests",
                r.document_length, r.html_transferred, r.complete
            ));
        }
        m.entry("requests_per_s")
            .or_default()
            .push(r.requests_per_s);
        m.entry("transfer_kbytes_s")
            .or_default()
            .push(r.transfer_kbytes_s);
        m.entry("complete_requests").or_default().push(r.complete);
        m.entry("failed_requests").or_default().push(r.failed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saturated_tester_marks_the_row() {
        let mut r = Row::default();
        r.metrics
            .insert("tester_busy_pct".into(), Spread::of(&[99.0, 98.0, 97.0]));
        r.metrics
            .insert("dut_busy_pct".into(), Spread::of(&[90.0, 92.0, 93.0]));
        mark_tester_limited(&mut r);
        assert!(r.tester_limited);
        assert!(r.notes[0].contains("lower bound") && r.notes[0].contains("had room: 92%"));
        let mut r = Row::default();
        r.metrics
            .insert("tester_busy_pct".into(), Spread::of(&[60.0]));
        r.metrics.insert("dut_busy_pct".into(), Spread::of(&[99.0]));
        mark_tester_limited(&mut r);
        assert!(!r.tester_limited && r.notes.is_empty());
    }
}
