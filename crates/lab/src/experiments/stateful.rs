//! RFC 9693's stateful benchmarks beside setup-rate: the connection tear-down rate
//! (`teardown-rate`) and the throughput with N connections in the state table
//! (`throughput-established`), each at several table sizes (`--sessions`).
//!
//! Both follow RFC 9693's two test phases (its abstract: "two test phases (phase 1 and
//! phase 2)"; earlier drafts called them the preliminary phase and the real test phase):
//!
//! - Phase 1 fills the device's state table: each of N flows with its own RFC 4814 port
//!   pair ([`crate::packet::flow_ports`]: source ports a permutation of 1024..65535, so no
//!   two flows share a 4-tuple) is sent once, at a rate well below the device's connection
//!   setup rate (`--rate`, default [`FILL_PPS`]). The device's table is then read: it must
//!   hold N entries, or the measurement has no table to speak of.
//! - Phase 2 is the measurement: for `throughput-established`, the RFC 2544 binary search
//!   with frames drawn only from those N flows (no frame may open a connection); for
//!   `teardown-rate`, the device deletes its whole table at once and that is timed: rate =
//!   N / (time B - time A), A before the deletion is asked for, B once the table is empty.
//! - Validation reads the table again: N entries after phase 2 of `throughput-established`
//!   (no connection lost, none created), none after the tear-down.
//!
//! What was checked against RFC 9693 itself: only its abstract (the copies of the RFC this was
//! written from held no more): two test phases, the connection tear-down rate as a metric of
//! its own beside the maximum connection establishment rate and the connection tracking table
//! capacity. The procedure here (time the device deleting its whole table; validate the table
//! after) is the lab's reading of it; its numbered subsections are not cited for that reason
//! and should be checked against the RFC's section 4 ("Recommended Benchmarking Method").
//!
//! The table is read where each device keeps it: the kernel's conntrack count in the DUT's
//! namespace (`nf_conntrack_count`); xlat's session count from its control socket (as `xlat
//! show stats` gives it). The tear-down is the device's own: `conntrack -F` in the DUT's
//! namespace for the kernel; `{"cmd":"clear"}` on xlat's control socket (what `xlat clear
//! sessions --all` sends), asked from this thread so no process start is timed; an XDP
//! device's deletion ends when the daemon has also removed the recipes it wrote in phase 1
//! (its `xdp_recipe_writes` counter has grown by as many again). TAYGA keeps no connection
//! table (a dynamic address pool, stateless per packet): it has no tear-down rate, and its
//! throughput with N flows has no table to validate; the report says so.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

use super::*;

/// Phase 1's default rate (new connections per second): half the XDP devices' slow-path
/// policer ([`crate::device::XDP_SLOW_PATH_PPS`]) and under every setup rate measured here
/// (setup-rate: kernel-nat44 119,000-244,000/s, xlat-nat44 55,000-273,000/s).
pub const FILL_PPS: f64 = 50_000.0;

/// The largest table these experiments fill (`--sessions`): the lab's pool holds 256 x 64,512
/// = 16.5M endpoint-independent mappings ([`crate::addressing::POOL`]).
pub const MAX_TABLE: u64 = 16_000_000;

/// Sessions the xlat devices are sized for when the largest table is `largest`: the lab's
/// default, or the table with 5% to spare (a fill's second pass sends every flow again; a
/// lost first frame's flow is then new).
pub fn capacity_for(largest: u64) -> u64 {
    crate::device::LAB_MAX_SESSIONS.max(largest + largest / 20 + 1024)
}

/// Kernel memory per conntrack entry with NAT, for the check that a table size fits
/// (memory-per-session measured about 320 B per entry; with room to spare).
const CONNTRACK_BYTES: u64 = 512;

/// Conntrack's UDP timeouts in the DUT's namespace while these experiments run (seconds):
/// the tester's flows are one way, so the kernel would drop an entry 30 s after its last
/// frame (`nf_conntrack_udp_timeout`), before a 1M table is even full. RFC 9693 asks for
/// timeouts longer than the test. xlat's devices get the same (`[timeouts] udp`, 300 s by
/// default, RFC 4787 REQ-5): a 10,000,000-connection fill and search outlast 300 s.
pub(super) const CONNTRACK_UDP_TIMEOUT: u64 = 900;

/// What the report says of published figures to compare with.
pub const PUBLISHED: &str = "Published figures: Lencse, Shima and Cho, \"Benchmarking methodology for stateful NAT64 \
     gateways\", Computer Communications 210 (2023), doi 10.1016/j.comcom.2023.08.009, measured Jool, TAYGA + iptables \
     and OpenBSD PF this way with siitperf (the connection tear-down rate among the new metrics) on physical servers with \
     DPDK testers; Lencse and Shima, \"Optimizing the performance of the iptables stateful NAT44 solution\", \
     Infocommunications Journal 15(1) (2023) 55-63, doi 10.36244/ICJ.2023.1.6, measured iptables' establishment rate, \
     throughput and tear-down rate with 40 million connections against conntrack's hash table size; and \
     draft-lencse-v6ops-transition-scalability (2022-2023) how IPv4aaS gateways degrade as sessions grow. Their tables \
     were not available where this lab was written (abstracts and front matter only), so no published number is \
     compared here; only the shape (how a rate changes with the table size) would compare with a veth testbed.";

/// The longest any one wait of these experiments may last (a table fill, a deletion).
const MAX_WAIT: Duration = Duration::from_secs(600);

/// Most passes of phase 1 over the flows (the first at the fill rate, each next at
/// [`next_fill_rate`]).
const FILL_PASSES: usize = 4;

/// The rate of phase 1's next pass after one at `rate` lost `lost` of `sent` frames: half
/// where the pass lost a tenth or more (the device could not take the rate), the same where
/// it lost less -- nearly every flow of the next pass finds its connection, cheaper than
/// opening one, and the few lost frames at 10,000,000 connections came at any rate (the
/// kernel's 876 of 10M at 25,000/s with its core 24% busy, 2026-11-28: a pass at half the
/// rate took 400 s and lost frames again).
pub fn next_fill_rate(rate: f64, lost: u64, sent: u64) -> f64 {
    if sent == 0 || lost as f64 >= sent as f64 / 10.0 {
        rate / 2.0
    } else {
        rate
    }
}

/// The connection tear-down rate of RFC 9693: `n` connections deleted in `secs`. None when
/// nothing was timed (no connections, or a zero or invalid duration).
pub fn teardown_rate(n: u64, secs: f64) -> Option<f64> {
    (n > 0 && secs.is_finite() && secs > 0.0).then(|| n as f64 / secs)
}

/// Phase 1's send time for `n` flows at `pps`, bounded by [`MAX_WAIT`].
pub fn fill_duration(n: u64, pps: f64) -> Duration {
    let pps = if pps.is_finite() && pps >= 1.0 {
        pps
    } else {
        FILL_PPS
    };
    Duration::from_secs_f64((n as f64 / pps + 1.0).min(MAX_WAIT.as_secs_f64()))
}

/// A phase-2 trial's length at `pps` with `n` connections: long enough for a frame of every
/// connection (the tester sends the flows round robin), at least `trial`, at most
/// [`PHASE2_MAX`].
pub fn phase2_duration(trial: Duration, n: u64, pps: f64) -> Duration {
    let all = if pps.is_finite() && pps > 0.0 {
        Duration::from_secs_f64((n as f64 / pps).min(PHASE2_MAX.as_secs_f64()))
    } else {
        PHASE2_MAX
    };
    trial.max(all).min(PHASE2_MAX.max(trial))
}

/// The longest phase-2 trial [`phase2_duration`] makes.
const PHASE2_MAX: Duration = Duration::from_secs(10);

/// What the validation of a state table found.
#[derive(Debug, Clone, PartialEq)]
pub enum Validation {
    /// The table held what it should.
    Passed,
    /// It did not: expected, found.
    Failed { expected: u64, found: u64 },
    /// No reading (the device keeps no table, or did not answer).
    Unknown,
}

impl Validation {
    /// Compares a table reading with what it should be.
    pub fn check(expected: u64, found: Option<u64>) -> Validation {
        match found {
            None => Validation::Unknown,
            Some(f) if f == expected => Validation::Passed,
            Some(f) => Validation::Failed { expected, found: f },
        }
    }
    pub fn passed(&self) -> bool {
        *self == Validation::Passed
    }
    /// In words, for the report.
    pub fn words(&self, what: &str) -> String {
        match self {
            Validation::Passed => format!("{what}: passed"),
            Validation::Failed { expected, found } => {
                let d = *found as i128 - *expected as i128;
                format!("{what}: FAILED, {found} entries where {expected} were expected ({d:+})")
            }
            Validation::Unknown => format!("{what}: no table to read"),
        }
    }
}

/// Does a table of `n` connections fit this device (and this machine)? None when it does,
/// else why not.
fn too_big(dev: &dyn Device, n: u32, capacity: u64, mem_available: Option<u64>) -> Option<String> {
    let n = u64::from(n);
    if dev.xlat_files().is_some() && n > capacity {
        return Some(format!(
            "{n} connections: the device's xlat configuration holds at most {capacity} sessions (max_sessions)"
        ));
    }
    if dev.pids().is_empty() {
        if let Some(avail) = mem_available {
            if n.saturating_mul(CONNTRACK_BYTES) > avail / 2 {
                return Some(format!(
                    "{n} connections: about {} MB of conntrack entries, more than half the machine's available memory ({} MB)",
                    (n * CONNTRACK_BYTES) >> 20,
                    avail >> 20
                ));
            }
        }
    }
    None
}

/// Table size `n`'s row for `dev` (frames of `size`), and whether it fits this machine: when
/// not, the row is done ([`too_big`] says why, in a note).
pub(super) fn size_row(
    dev: &dyn Device,
    size: String,
    n: u32,
    capacity: u64,
    avail: Option<u64>,
) -> (Row, bool) {
    let mut row = Row {
        device: dev.name().into(),
        size,
        x: Some(f64::from(n)),
        ..Row::default()
    };
    match too_big(dev, n, capacity, avail) {
        Some(why) => {
            row.notes.push(format!("{}: skipped, {why}", dev.name()));
            (row, false)
        }
        None => (row, true),
    }
}

/// MemAvailable of /proc/meminfo, bytes.
pub(super) fn mem_available() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|k| k * 1024)
}

/// One request line on an xlat control socket, its answer and the time from connecting to
/// the answer.
fn ask(socket: &Path, line: &str) -> Result<(serde_json::Value, Duration)> {
    let start = Instant::now();
    let mut s = UnixStream::connect(socket)
        .with_context(|| format!("connecting to {}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(line.as_bytes())?;
    s.write_all(b"\n")?;
    s.shutdown(Shutdown::Write)?;
    let mut answer = String::new();
    BufReader::new(s.take(1 << 24)).read_line(&mut answer)?;
    let took = start.elapsed();
    let v: serde_json::Value = serde_json::from_str(answer.trim())
        .with_context(|| format!("{}: not JSON: {answer:?}", socket.display()))?;
    if let Some(e) = v.get("error") {
        bail!("{}: {e}", socket.display());
    }
    Ok((v, took))
}

/// An XDP device's count of recipe writes (and removals), from its control socket.
fn recipe_writes(socket: &Path) -> Option<u64> {
    let (v, _) = ask(socket, "{\"cmd\":\"stats\"}").ok()?;
    let s = v.get("stats").unwrap_or(&v);
    s.get("fast_path")?
        .get("counters")?
        .as_array()?
        .iter()
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some("xdp_recipe_writes"))?
        .get("value")?
        .as_u64()
}

/// Conntrack settings these experiments need, restored when dropped (also on failure):
/// the machine-wide `nf_conntrack_max` raised to hold the largest table, the machine-wide
/// hash table grown to at least a bucket per [`ENTRIES_PER_BUCKET`] entries of it (as an
/// operator sizes `hashsize` for a large table), and the DUT namespace's UDP timeouts longer
/// than the test.
pub(super) struct ConntrackGuard {
    ns: String,
    max_before: Option<u64>,
    buckets_before: Option<u64>,
    timeouts_before: Vec<(String, String)>,
}

pub(super) const CT_MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";

/// The conntrack hash table's size (buckets), writable in the first network namespace: the
/// kernel moves the entries into a table of the new size.
const CT_BUCKETS: &str = "/sys/module/nf_conntrack/parameters/hashsize";

/// Most conntrack entries a hash bucket holds at the largest table: 4, the ratio of the
/// kernel's own defaults before 5.15 (nf_conntrack_max = 4 x buckets). This machine's
/// 262,144 buckets keep tables up to 1M as they were; 10M gets 4,194,304.
const ENTRIES_PER_BUCKET: u64 = 4;

/// Buckets for a table of `largest` entries: at least `current`, else the power of two that
/// keeps [`ENTRIES_PER_BUCKET`].
fn buckets_for(largest: u64, current: u64) -> u64 {
    let want = largest.div_ceil(ENTRIES_PER_BUCKET).next_power_of_two();
    current.max(want)
}

impl ConntrackGuard {
    pub(super) fn new(topo: &Topo, largest: u64) -> ConntrackGuard {
        let mut g = ConntrackGuard {
            ns: topo.ns_dut.clone(),
            max_before: None,
            buckets_before: None,
            timeouts_before: Vec::new(),
        };
        let buckets: Option<u64> = std::fs::read_to_string(CT_BUCKETS)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        if let Some(b) = buckets {
            let want = buckets_for(largest, b);
            if want > b && std::fs::write(CT_BUCKETS, want.to_string()).is_ok() {
                g.buckets_before = Some(b);
            }
        }
        let cur: Option<u64> = std::fs::read_to_string(CT_MAX)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let want = largest + largest / 10 + 1024;
        if let Some(c) = cur {
            if c < want && std::fs::write(CT_MAX, want.to_string()).is_ok() {
                g.max_before = Some(c);
            }
        }
        for k in [
            "nf_conntrack_udp_timeout",
            "nf_conntrack_udp_timeout_stream",
        ] {
            let path = format!("/proc/sys/net/netfilter/{k}");
            if let Some(old) = topo.dut_read(&path) {
                let v = CONNTRACK_UDP_TIMEOUT.to_string();
                let script = format!("echo {v} > {path}");
                if sys::ns_sh(&g.ns, &script).is_ok() {
                    g.timeouts_before.push((path, old.trim().to_string()));
                }
            }
        }
        g
    }
}

impl Drop for ConntrackGuard {
    fn drop(&mut self) {
        if let Some(m) = self.max_before {
            let _ = std::fs::write(CT_MAX, m.to_string());
        }
        if let Some(b) = self.buckets_before {
            let _ = std::fs::write(CT_BUCKETS, b.to_string());
        }
        for (path, old) in &self.timeouts_before {
            let _ = sys::ns_sh(&self.ns, &format!("echo {old} > {path}"));
        }
    }
}

/// One table size's outcome of phase 1.
struct Filled {
    flows: Arc<Vec<Flow>>,
    /// The table after phase 1 (None: the device keeps none).
    table: Option<u64>,
    /// Frames lost in each pass.
    lost: Vec<u64>,
}

impl Filled {
    /// The passes in words, for a note.
    fn words(&self) -> String {
        let l: Vec<String> = self.lost.iter().map(|l| l.to_string()).collect();
        format!(
            "phase 1 took {} pass(es), frames lost per pass: {}",
            self.lost.len(),
            l.join(", ")
        )
    }
}

impl Lab {
    /// xlat devices set up from now hold `capacity` sessions and keep a UDP session
    /// [`CONNTRACK_UDP_TIMEOUT`] s idle, as the kernel's conntrack does during these
    /// experiments (a 10,000,000-connection fill and search outlast the default 300 s: the
    /// first flows expired before the validation read the table). [`Lab::unsize_devices`]
    /// puts both back.
    pub(super) fn size_devices(&self, capacity: u64) {
        self.topo.session_capacity.set(capacity);
        *self.topo.xlat_extra.borrow_mut() =
            format!("\n[timeouts]\nudp = {CONNTRACK_UDP_TIMEOUT}\n");
    }

    /// Undoes [`Lab::size_devices`].
    pub(super) fn unsize_devices(&self) {
        self.topo
            .session_capacity
            .set(crate::device::LAB_MAX_SESSIONS);
        self.topo.xlat_extra.borrow_mut().clear();
    }

    /// The fill rate of phase 1 (`--rate`, else [`FILL_PPS`]).
    fn fill_pps(&self) -> f64 {
        self.opts.rate.filter(|r| *r >= 1.0).unwrap_or(FILL_PPS)
    }

    /// Phase 1: every one of `n` flows once at the fill rate. While the table holds fewer
    /// than `n`, every flow is sent once more, at [`next_fill_rate`] (at most
    /// [`FILL_PASSES`] passes: a flow sent again opens no second connection). `seed` makes
    /// the flows new to the device.
    fn fill(&mut self, dev: &mut dyn Device, n: u32, seed: u32) -> Result<Filled> {
        let flows = Arc::new(dev.flows(n, seed));
        let size = SizeMix::Fixed(64);
        let mut rate = self.fill_pps();
        let mut lost = Vec::new();
        let mut table = None;
        for pass in 1..=FILL_PASSES {
            let mut spec = self.spec(
                self.dut_path(dev.v6_in()),
                flows.clone(),
                &size,
                Some(rate),
                fill_duration(u64::from(n), rate),
                dev.pids(),
            );
            spec.max_packets = Some(u64::from(n));
            let what = format!("{} phase 1 (pass {pass}): {n} connections", dev.name());
            let t = self.trial(&spec, &what)?;
            dev.check_alive()?;
            lost.push(t.lost);
            table = self.settled_count(dev);
            if table.is_none_or(|c| c >= u64::from(n)) {
                break;
            }
            self.progress(&format!(
                "{}: phase 1 pass {pass} left {} of {n} connections ({} frames lost)",
                dev.name(),
                table.unwrap_or(0),
                t.lost
            ));
            rate = next_fill_rate(rate, t.lost, t.sent);
        }
        Ok(Filled { flows, table, lost })
    }

    /// The device's table once it stops changing (two equal readings 100 ms apart, at most
    /// 3 s): a daemon may still be working through its queue when the tester is done.
    pub(super) fn settled_count(&self, dev: &dyn Device) -> Option<u64> {
        let mut last = dev.sessions(&self.topo)?;
        for _ in 0..30 {
            sys::sleep_interruptible(Duration::from_millis(100));
            let now = dev.sessions(&self.topo)?;
            if now == last {
                return Some(now);
            }
            last = now;
        }
        Some(last)
    }

    /// Empties the device's table before a new fill (conntrack -F, or the daemon's clear).
    pub(super) fn empty(&mut self, dev: &mut dyn Device) -> Result<()> {
        match dev.xlat_files() {
            Some((_, sock)) => {
                ask(&sock, "{\"cmd\":\"clear\"}")?;
            }
            None => {
                if dev.sessions(&self.topo).is_some() {
                    let _ = self.topo.dut(&["conntrack", "-F"]);
                }
            }
        }
        // Bounded: until the table reads empty or 10 s passed.
        let start = Instant::now();
        while dev.sessions(&self.topo).is_some_and(|c| c > 0)
            && start.elapsed() < Duration::from_secs(10)
        {
            sys::sleep_interruptible(Duration::from_millis(50));
        }
        Ok(())
    }

    pub(super) fn stateful_sizes(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .opts
            .sessions
            .iter()
            .copied()
            .filter(|n| *n > 0)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// RFC 9693's connection tear-down rate at each table size.
    pub(super) fn teardown_rate(&mut self) -> Result<()> {
        let sizes = self.stateful_sizes();
        let e = Self::exp(
            "teardown-rate",
            "Connection tear-down rate (RFC 9693)",
            Some("connections"),
            format!(
                "RFC 9693's connection tear-down rate. Phase 1 fills the device's state table with N connections: each of \
                 N flows (RFC 4814 pseudorandom port pairs, no 4-tuple twice) sent once as a 64-byte UDP frame at {:.0}/s, \
                 under the connection setup rate, every flow once more while the table holds fewer (at most 4 passes, at half \
                 the rate after one that lost a tenth of its frames); the table must then hold N entries. Then the device deletes its whole \
                 table at once and that is timed: rate = N / (B - A), A before the deletion is asked for, B when the table \
                 is empty. Kernel: `conntrack -F` in the DUT's namespace (a process started: the column 'same, empty \
                 table' is that command on an empty table, the floor of the timing); xlat: {{\"cmd\":\"clear\"}} on the \
                 control socket from the lab's thread (`xlat clear sessions --all`), until the answer; an XDP device until \
                 its recipes are removed from the BPF maps too (xdp_recipe_writes grown by phase 1's writes again, polled \
                 every 2 ms on the socket). Validation: the table reads 0 after. Conntrack's UDP timeouts in the DUT's \
                 namespace and xlat's [timeouts] udp are {CONNTRACK_UDP_TIMEOUT} s during the test (one-way flows: 30 s by default), \
                 nf_conntrack_max raised to hold the largest table, both restored after. TAYGA keeps no connection table \
                 (a dynamic address pool), so it has no tear-down rate. Repeated {} time(s), each with a new fill. RFC \
                 9693 was checked here by its abstract only (two phases; the tear-down rate a metric of its own): the \
                 procedure is the lab's reading of it, its subsections not cited. {PUBLISHED}",
                self.fill_pps(),
                self.opts.repeats.max(1)
            ),
        );
        let largest = u64::from(sizes.iter().copied().max().unwrap_or(0));
        let _ct = ConntrackGuard::new(&self.topo, largest);
        let cap = capacity_for(largest);
        self.size_devices(cap);
        // Every run shows the tester's ceiling, even where only phase-1 frames are sent.
        self.ceiling(&SizeMix::Fixed(64), false)?;
        let avail = mem_available();
        for d in self.opts.devices.clone() {
            if d == "tayga-nat64" {
                let row = Row {
                    device: d.clone(),
                    size: "64 B".into(),
                    notes: vec![
                        "tayga-nat64: not applicable -- TAYGA keeps no connection table (stateless translation with a dynamic address pool), so there is nothing to tear down and no rate to report".into(),
                    ],
                    ..Row::default()
                };
                self.add(&e, vec![row]);
                continue;
            }
            let rows = self.with_device(&d, |lab, dev| {
                let mut rows = Vec::new();
                if dev.sessions(&lab.topo).is_none() {
                    lab.progress(&format!("{}: keeps no connection table; skipped", dev.name()));
                    return Ok(rows);
                }
                for &n in &sizes {
                    let (mut row, fits) = size_row(dev, "64 B".into(), n, cap, avail);
                    if !fits {
                        rows.push(row);
                        continue;
                    }
                    let mut m: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
                    let mut passed = 0;
                    let reps = lab.opts.repeats.max(1);
                    for rep in 0..reps {
                        lab.empty(dev)?;
                        let w0 = dev.xlat_files().and_then(|(_, s)| recipe_writes(&s));
                        let f = lab.fill(dev, n, 5000 + rep as u32)?;
                        let before = f.table.unwrap_or(0);
                        let v1 = Validation::check(u64::from(n), f.table);
                        if !v1.passed() {
                            row.notes.push(format!(
                                "{} at {n}, repeat {}: {} ({})",
                                dev.name(),
                                rep + 1,
                                v1.words("table after phase 1"),
                                f.words()
                            ));
                        }
                        let (secs, engine_secs, empty_secs) = match dev.xlat_files() {
                            Some((_, sock)) => {
                                let w1 = recipe_writes(&sock);
                                let start = Instant::now();
                                let (ans, rt) = ask(&sock, "{\"cmd\":\"clear\"}")?;
                                let cleared = ans.get("cleared").and_then(|c| c.as_u64()).unwrap_or(0);
                                // An XDP device: until the recipes phase 1 wrote are removed.
                                let mut end = rt;
                                if let (Some(a), Some(b)) = (w0, w1) {
                                    let target = b + (b - a.min(b));
                                    let mut done = false;
                                    while start.elapsed() < MAX_WAIT && !sys::stopped() {
                                        if recipe_writes(&sock).is_some_and(|w| w >= target) {
                                            done = true;
                                            break;
                                        }
                                        std::thread::sleep(Duration::from_millis(2));
                                    }
                                    end = start.elapsed();
                                    if !done {
                                        row.notes.push(format!(
                                            "{} at {n}: the recipes were not all removed after {:.0} s",
                                            dev.name(),
                                            end.as_secs_f64()
                                        ));
                                    }
                                }
                                if cleared != before {
                                    row.notes.push(format!(
                                        "{} at {n}, repeat {}: the daemon cleared {cleared} sessions of {before}",
                                        dev.name(),
                                        rep + 1
                                    ));
                                }
                                let (_, empty) = ask(&sock, "{\"cmd\":\"clear\"}")?;
                                (end.as_secs_f64(), Some(rt.as_secs_f64()), empty.as_secs_f64())
                            }
                            None => {
                                let ns = lab.topo.ns_dut.clone();
                                let run = || -> Result<f64> {
                                    let start = Instant::now();
                                    let o = sys::cmd(
                                        MAX_WAIT.as_secs(),
                                        &["ip", "netns", "exec", &ns, "conntrack", "-F"],
                                    )?;
                                    if !o.ok {
                                        bail!("conntrack -F: {}", o.stderr.trim());
                                    }
                                    Ok(start.elapsed().as_secs_f64())
                                };
                                let full = run()?;
                                let empty = run()?;
                                (full, None, empty)
                            }
                        };
                        let after = dev.sessions(&lab.topo);
                        let v2 = Validation::check(0, after);
                        if v2.passed() && v1.passed() {
                            passed += 1;
                        } else if !v2.passed() {
                            row.notes.push(format!(
                                "{} at {n}, repeat {}: {}",
                                dev.name(),
                                rep + 1,
                                v2.words("table after the tear-down")
                            ));
                        }
                        let rate = teardown_rate(before, secs);
                        lab.progress(&format!(
                            "teardown {:<16} {n:>8}: {before} connections deleted in {:.3} ms ({} /s); same on an empty table {:.3} ms; table after {}",
                            dev.name(),
                            secs * 1e3,
                            rate.map_or("-".into(), crate::report::num),
                            empty_secs * 1e3,
                            after.map_or("-".into(), |a| a.to_string())
                        ));
                        m.entry("sessions_filled").or_default().push(before as f64);
                        m.entry("teardown_ms").or_default().push(secs * 1e3);
                        if let Some(r) = rate {
                            m.entry("teardown_rate_per_s").or_default().push(r);
                        }
                        if let Some(es) = engine_secs {
                            m.entry("answer_ms").or_default().push(es * 1e3);
                        }
                        m.entry("empty_ms").or_default().push(empty_secs * 1e3);
                        m.entry("sessions_after")
                            .or_default()
                            .push(after.map_or(f64::NAN, |a| a as f64));
                    }
                    for (k, v) in m {
                        row.metrics.insert(k.into(), Spread::of(&v));
                    }
                    row.metrics
                        .insert("validated".into(), Spread::of(&[passed as f64]));
                    row.notes.push(format!(
                        "{} at {n}: validation (N entries after phase 1, none after the tear-down) passed in {passed} of {reps} repeats",
                        dev.name()
                    ));
                    rows.push(row);
                }
                Ok(rows)
            })?;
            self.add(&e, rows);
        }
        self.unsize_devices();
        self.push(e);
        Ok(())
    }

    /// RFC 9693's throughput with N connections in the state table, at each table size.
    pub(super) fn throughput_established(&mut self) -> Result<()> {
        let sizes = self.stateful_sizes();
        let size = SizeMix::Fixed(64);
        let e = Self::exp(
            "throughput-established",
            "Throughput with N established connections (RFC 9693)",
            Some("connections"),
            format!(
                "RFC 9693's throughput of a stateful gateway, at several state-table sizes. Phase 1 fills the table with N \
                 connections: each of N flows (RFC 4814 pseudorandom port pairs, no 4-tuple twice) sent once at {:.0}/s, \
                 under the connection setup rate, every flow once more while the table holds fewer (at most 4 passes, at half \
                 the rate after one that lost a tenth of its frames); the table must then hold N entries. Phase 2: the RFC 2544 binary search \
                 for the highest rate with loss <= {}% (64-byte frames), every frame from those same N flows, round \
                 robin, so no frame opens a connection; a trial lasts {:.1} s or, where that is too short for a frame of \
                 every connection, N / rate (at most 10 s). Validation after the search: the table still holds N \
                 entries (none lost, none created): kernel nf_conntrack_count in the DUT's namespace, xlat's session \
                 count on its control socket. Conntrack's UDP timeouts in the DUT's namespace and xlat's are {CONNTRACK_UDP_TIMEOUT} \
                 s during the test (one-way flows: 30 s by default), nf_conntrack_max raised to hold the largest table, \
                 both restored after. TAYGA keeps no connection table: its row is the search alone, unvalidated. \
                 Repeated {} time(s) per table size on one fill. RFC 9693 was checked here by its abstract only (two \
                 phases): the procedure is the lab's reading of it, its subsections not cited. {PUBLISHED}",
                self.fill_pps(),
                pct(self.opts.threshold),
                self.opts.trial.as_secs_f64(),
                self.opts.repeats.max(1)
            ),
        );
        let largest = u64::from(sizes.iter().copied().max().unwrap_or(0));
        let _ct = ConntrackGuard::new(&self.topo, largest);
        let cap = capacity_for(largest);
        self.size_devices(cap);
        let avail = mem_available();
        for d in self.opts.devices.clone() {
            let rows = self.with_device(&d, |lab, dev| {
                let v6 = dev.v6_in();
                let max = lab.ceiling(&size, v6)?;
                let mut rows = Vec::new();
                for &n in &sizes {
                    let (mut row, fits) = size_row(dev, size.label(), n, cap, avail);
                    if !fits {
                        rows.push(row);
                        continue;
                    }
                    lab.empty(dev)?;
                    let f = lab.fill(dev, n, 7000 + n)?;
                    let v1 = Validation::check(u64::from(n), f.table);
                    let th = lab.opts.threshold;
                    let mut rates = Vec::new();
                    for _ in 0..lab.opts.repeats.max(1) {
                        let mut trials = Vec::new();
                        let search = stats::search(max, lab.opts.resolution, lab.opts.max_steps, |r| {
                            let spec = lab.spec(
                                lab.dut_path(v6),
                                f.flows.clone(),
                                &size,
                                Some(r),
                                phase2_duration(lab.opts.trial, u64::from(n), r),
                                dev.pids(),
                            );
                            let t = lab.trial(&spec, &format!("{} with {n} connections", dev.name()))?;
                            let ok = stats::passes(t.loss, th) && !t.sender_short;
                            trials.push(t);
                            Ok::<bool, anyhow::Error>(ok)
                        })?;
                        dev.check_alive()?;
                        rates.push(search.rate);
                        if search.at_ceiling {
                            row.tester_limited = true;
                        }
                        row.searches.push(search);
                        row.trials.extend(trials);
                    }
                    sys::sleep_interruptible(Duration::from_millis(300));
                    let after = dev.sessions(&lab.topo);
                    let v2 = Validation::check(u64::from(n), after);
                    let valid = v1.passed() && v2.passed();
                    lab.progress(&format!(
                        "throughput {:<16} {n:>8} connections: {} pps (median); table {} after phase 1, {} after phase 2: {}",
                        dev.name(),
                        crate::report::num(Spread::of(&rates).median),
                        f.table.map_or("-".into(), |c| c.to_string()),
                        after.map_or("-".into(), |c| c.to_string()),
                        if f.table.is_none() { "no table" } else if valid { "valid" } else { "NOT valid" }
                    ));
                    row.metrics
                        .insert("throughput_pps".into(), Spread::of(&rates));
                    row.metrics.insert(
                        "ceiling_pct".into(),
                        Spread::of(&[pct(Spread::of(&rates).median / max.max(1.0))]),
                    );
                    if let Some(c) = f.table {
                        row.metrics
                            .insert("sessions_filled".into(), Spread::of(&[c as f64]));
                    }
                    if let Some(c) = after {
                        row.metrics
                            .insert("sessions_after".into(), Spread::of(&[c as f64]));
                    }
                    if f.table.is_some() {
                        row.metrics.insert(
                            "validated".into(),
                            Spread::of(&[if valid { 1.0 } else { 0.0 }]),
                        );
                    }
                    row.notes.push(format!(
                        "{} at {n}: {} ({}); {}",
                        dev.name(),
                        v1.words("validation after phase 1 (N entries)"),
                        f.words(),
                        v2.words("after phase 2 (still N: none lost, none created)")
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_pass_that_lost_little_is_repeated_at_its_rate_one_that_lost_much_at_half() {
        assert_eq!(next_fill_rate(50_000.0, 533_969, 10_000_000), 50_000.0);
        assert_eq!(next_fill_rate(50_000.0, 876, 10_000_000), 50_000.0);
        assert_eq!(next_fill_rate(50_000.0, 1_000_000, 10_000_000), 25_000.0);
        assert_eq!(next_fill_rate(50_000.0, 0, 0), 25_000.0);
    }

    #[test]
    fn conntrack_buckets_grow_only_past_four_entries_a_bucket() {
        // This machine's 262,144 buckets hold 1M at four a bucket: unchanged.
        assert_eq!(buckets_for(1_000_000, 262_144), 262_144);
        assert_eq!(buckets_for(1000, 262_144), 262_144);
        // 10M: 2.5M buckets wanted, the next power of two.
        assert_eq!(buckets_for(10_000_000, 262_144), 4_194_304);
        // Never smaller than the machine has.
        assert_eq!(buckets_for(10_000_000, 8_388_608), 8_388_608);
    }

    #[test]
    fn devices_are_sized_for_the_largest_table() {
        let lab = crate::device::LAB_MAX_SESSIONS;
        assert_eq!(capacity_for(1_000_000), lab);
        assert_eq!(capacity_for(0), lab);
        assert_eq!(capacity_for(10_000_000), 10_501_024);
        assert!(
            capacity_for(MAX_TABLE) <= 33_554_431,
            "xlat's max_sessions bound"
        );
        let c = crate::device::with_capacity(&crate::device::xlat_config("t", "/s"), 10_501_024);
        assert!(c.contains("max_sessions = 10501024\n"), "{c}");
        assert_eq!(
            crate::device::with_capacity(&crate::device::xlat_config("t", "/s"), lab),
            crate::device::xlat_config("t", "/s")
        );
    }

    #[test]
    fn teardown_rate_is_connections_over_seconds() {
        assert_eq!(teardown_rate(1_000_000, 0.5), Some(2_000_000.0));
        assert_eq!(teardown_rate(1000, 0.004), Some(250_000.0));
        assert_eq!(teardown_rate(0, 1.0), None);
        assert_eq!(teardown_rate(10, 0.0), None);
        assert_eq!(teardown_rate(10, -1.0), None);
        assert_eq!(teardown_rate(10, f64::NAN), None);
        assert_eq!(teardown_rate(10, f64::INFINITY), None);
    }

    #[test]
    fn fill_takes_n_over_rate_plus_a_second_and_is_bounded() {
        assert_eq!(fill_duration(1_000_000, 50_000.0), Duration::from_secs(21));
        assert_eq!(fill_duration(1000, 50_000.0), Duration::from_secs_f64(1.02));
        // A bad rate falls back to the default, a huge table to the bound.
        assert_eq!(fill_duration(50_000, 0.0), Duration::from_secs(2));
        assert_eq!(fill_duration(50_000, f64::NAN), Duration::from_secs(2));
        assert_eq!(fill_duration(u64::MAX, 1.0), MAX_WAIT);
    }

    #[test]
    fn phase_two_trials_reach_every_connection_within_bounds() {
        let t = Duration::from_secs(1);
        // Small tables: the trial as asked.
        assert_eq!(phase2_duration(t, 1000, 100_000.0), t);
        // 1M connections at 250,000 pps: 4 s to send each one a frame.
        assert_eq!(
            phase2_duration(t, 1_000_000, 250_000.0),
            Duration::from_secs(4)
        );
        // Bounded: a slow rate or a bad one.
        assert_eq!(phase2_duration(t, 1_000_000, 1000.0), PHASE2_MAX);
        assert_eq!(phase2_duration(t, 1_000_000, 0.0), PHASE2_MAX);
        assert_eq!(phase2_duration(t, 1_000_000, f64::NAN), PHASE2_MAX);
        // A longer trial asked for stays.
        let long = Duration::from_secs(20);
        assert_eq!(phase2_duration(long, 1000, 1e6), long);
    }

    #[test]
    fn validation_wants_exactly_the_expected_count() {
        assert!(Validation::check(1000, Some(1000)).passed());
        assert!(Validation::check(0, Some(0)).passed());
        let lost = Validation::check(1000, Some(998));
        assert_eq!(
            lost,
            Validation::Failed {
                expected: 1000,
                found: 998
            }
        );
        assert!(lost.words("after").contains("(-2)"));
        let created = Validation::check(1000, Some(1003));
        assert!(!created.passed());
        assert!(created.words("after").contains("(+3)"));
        assert_eq!(Validation::check(5, None), Validation::Unknown);
        assert!(!Validation::Unknown.passed());
    }

    /// RFC 9693 phase 1 needs N distinct connections: the flows the devices send (IPv4 and
    /// IPv6, past one source address's 64,512 source ports) never repeat a 4-tuple.
    #[test]
    fn phase_one_flows_are_distinct_connections() {
        let n = 200_000u32;
        // The seeds the experiments use: teardown-rate 5000 + repeat, throughput-established
        // 7000 + N (1,007,000 at 1M).
        for (v6, seed) in [
            (false, 5001),
            (true, 5001),
            (false, 1_007_000),
            (true, 1_007_000),
        ] {
            let flows = if v6 {
                crate::packet::flows_v6_at(0, n, seed, [0x20; 16])
            } else {
                crate::packet::flows_v4_at(0, n, seed, [198, 19, 0, 2])
            };
            assert_eq!(flows.len(), n as usize);
            let set: HashSet<_> = flows
                .iter()
                .map(|f| (f.src, f.sport, f.dst, f.dport))
                .collect();
            assert_eq!(set.len(), n as usize, "v6 {v6} seed {seed}");
            // Nor a source address and port twice: a NAT keeps one mapping for that pair.
            let pairs: HashSet<_> = flows.iter().map(|f| (f.src, f.sport)).collect();
            assert_eq!(pairs.len(), n as usize, "v6 {v6} seed {seed}");
            assert!(flows.iter().all(|f| f.sport >= 1024 && f.dport >= 1));
        }
    }

    #[test]
    fn the_xlat_session_limit_is_the_lab_configurations() {
        let c = crate::device::xlat_config("t", "/s");
        assert!(c.contains(&format!(
            "max_sessions = {}\n",
            crate::device::LAB_MAX_SESSIONS
        )));
    }

    #[test]
    fn meminfo_is_read() {
        // Linux always has MemAvailable (since 3.14).
        assert!(mem_available().is_some_and(|m| m > 0));
    }
}
