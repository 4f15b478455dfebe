//! reload (issue 20): what a live reload costs the data path.
//!
//! For each device (xlat-nat44, and xlat-nat44-xdp with the XDP fast path) the experiment
//! first finds its throughput with the lab's RFC 2544 search (the same run, the same flows),
//! then offers half of it, constant, on those flows, in five windows one after the other:
//!
//! 1. a baseline (no reload),
//! 2. `--count` reloads (default 1000) each changing `[timeouts] udp` (301 s and 302 s in
//!    turn, so every reload applies a change),
//! 3. a baseline,
//! 4. `--count` reloads that add a second pool address the flows do not use
//!    ([`EXTRA_POOL`]) and remove it again in turn (each ends no session),
//! 5. a baseline.
//!
//! A reload is what `xlat reload` does, without starting a process: the configuration file is
//! replaced (written beside it and renamed, so the daemon never reads half a file) and the
//! lab's own thread sends `xlat reload`'s request line (`{"cmd":"reload"}`) on the control
//! socket. The time from connecting to the answer is the round trip: the daemon answers after
//! every packet worker applied the change ("applied within"). Not the `xlat` command itself:
//! on this 2-vCPU lab a process started on either CPU costs that CPU's real-time work (the
//! tester's pacing or the device's receive work) frames of its own, which a gateway with a
//! core to spare for its operator would not see (docs/PERFORMANCE.md, "Reload cost").
//! Reloads start every [`INTERVAL`] (or right
//! after the previous one when that took longer), from [`LEAD`] after the tester's first frame;
//! the tester keeps sending until [`TAIL`] after the last reply. Loss is counted over each
//! whole window as in every trial (sent minus distinct frames received), and a baseline lasts
//! as long as the reload windows are planned to. Every reply must say `reloaded:` with the
//! changed key; the rows count those.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::addressing::POOL as POOL_PREFIX;
use crate::device::Device;
use crate::experiments::{size_label, Lab};
use crate::packet::SizeMix;
use crate::results::Row;
use crate::stats::Spread;
use crate::sys;
use crate::tester::{run_trial, Trial, TrialControl, TrialSpec};

/// The devices the experiment runs by default: NAT44 over the TUN device, and with the XDP
/// fast path.
pub const DEVICES: &[&str] = &["xlat-nat44", "xlat-nat44-xdp"];
/// Reloads per reload window unless `--count` says otherwise.
pub const COUNT: usize = 1000;
/// A reload starts this long after the one before started (or at once when that took longer).
pub const INTERVAL: Duration = Duration::from_millis(10);
/// From the tester's first frame to the first reload (flows in their steady state).
pub const LEAD: Duration = Duration::from_millis(500);
/// From the last reply to the tester's last frame.
pub const TAIL: Duration = Duration::from_millis(500);
/// The most one reload may take before the lab stops waiting and counts it failed.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The second pool address the pool variant adds and removes: in the outside subnet
/// (198.19.0.0/24, DESIGN.md's 198.18.0.0/15), outside the pool the flows use.
pub const EXTRA_POOL: &str = "198.19.0.100/32";
/// The two UDP idle timeouts the timeouts variant alternates (the lab's file sets none, so
/// the running one is the default 300 s before the first reload).
const UDP_TIMEOUTS: [u32; 2] = [301, 302];

/// What a variant's reloads change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `[timeouts] udp` between two values.
    Timeouts,
    /// A second pool address added, then removed.
    Pool,
}

impl Change {
    /// The row's label and the key the daemon must name as changed.
    pub fn label(self) -> &'static str {
        match self {
            Change::Timeouts => "timeouts",
            Change::Pool => "pool",
        }
    }
    pub fn key(self) -> &'static str {
        match self {
            Change::Timeouts => "timeouts.udp",
            Change::Pool => "nat44.pool",
        }
    }
}

/// The configuration for reload number `i` of a variant, from the device's own file `base`
/// (as the lab wrote it). Fails when `base` is not shaped as expected (a `[timeouts]` table
/// already, or not exactly one `pool = ["<the lab's pool>"]` line).
pub fn config_for(base: &str, change: Change, i: usize) -> Result<String> {
    match change {
        Change::Timeouts => {
            if base.contains("[timeouts]") {
                bail!("the device's configuration has a [timeouts] table already");
            }
            let udp = UDP_TIMEOUTS[i % 2];
            Ok(format!("{base}\n[timeouts]\nudp = {udp}\n"))
        }
        Change::Pool => {
            let line = format!("pool = [\"{POOL_PREFIX}\"]");
            if base.matches(&line).count() != 1 {
                bail!("the device's configuration has no single `{line}` line");
            }
            if i % 2 == 1 {
                return Ok(base.to_string());
            }
            let two = format!("pool = [\"{POOL_PREFIX}\", \"{EXTRA_POOL}\"]");
            Ok(base.replacen(&line, &two, 1))
        }
    }
}

/// Replaces `path` with `text` at once: written beside it, then renamed over it.
fn replace_file(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("toml.new");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming onto {}", path.display()))
}

/// One reload: how long it took and what the daemon answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reload {
    /// Connecting to the control socket to the daemon's answer, milliseconds.
    pub ms: f64,
    /// When it ended, seconds after the tester's first frame.
    pub end_s: f64,
    /// The daemon answered `reloaded`.
    pub replied: bool,
    /// ... and named the expected key as changed.
    pub applied: bool,
    /// Sessions the reload ended (the reply's count).
    pub sessions_ended: u64,
    /// The reply or error when not applied.
    pub error: Option<String>,
}

/// Reads the daemon's answer to a reload request (`{"reloaded":{"keys":[...],
/// "sessions_ended":N}}`, or `{"refused":"..."}`): replied `reloaded`, named `key` among the
/// changed keys, and the sessions it ended.
pub fn parse_reply(line: &str, key: &str) -> (bool, bool, u64) {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
        return (false, false, 0);
    };
    let Some(done) = v.get("reloaded") else {
        return (false, false, 0);
    };
    let applied = done
        .get("keys")
        .and_then(|k| k.as_array())
        .is_some_and(|k| k.iter().any(|x| x.as_str() == Some(key)));
    let ended = done
        .get("sessions_ended")
        .and_then(|n| n.as_u64())
        .unwrap_or(0);
    (true, applied, ended)
}

/// Asks the daemon on `socket` to reload, as `xlat reload` does (the same request line on
/// the control socket), and times it from connecting to the answer; gives up after
/// [`RELOAD_TIMEOUT`].
fn ask_reload(socket: &Path, key: &str) -> Reload {
    let start = Instant::now();
    let answer = (|| -> std::io::Result<String> {
        let mut s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(RELOAD_TIMEOUT))?;
        s.set_write_timeout(Some(RELOAD_TIMEOUT))?;
        s.write_all(b"{\"cmd\":\"reload\"}\n")?;
        s.shutdown(Shutdown::Write)?;
        let mut line = String::new();
        BufReader::new(s.take(1 << 20)).read_line(&mut line)?;
        Ok(line)
    })();
    let ms = start.elapsed().as_secs_f64() * 1e3;
    match answer {
        Err(e) => Reload {
            ms,
            error: Some(format!("asking {}: {e}", socket.display())),
            ..Reload::default()
        },
        Ok(line) => {
            let (replied, applied, sessions_ended) = parse_reply(&line, key);
            Reload {
                ms,
                end_s: 0.0,
                replied,
                applied,
                sessions_ended,
                error: (!applied).then(|| line.trim().to_string()),
            }
        }
    }
}

/// The value below which a share `q` of the sorted `v` lies (nearest rank); 0 when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What a window does while the tester sends.
enum Job<'a> {
    /// Nothing, for this long.
    Baseline(Duration),
    /// `count` reloads of `change`.
    Reloads {
        change: Change,
        count: usize,
        files: &'a (PathBuf, PathBuf),
        base: &'a str,
    },
}

/// One window's trial and reloads.
struct Window {
    trial: Trial,
    reloads: Vec<Reload>,
}

impl Lab {
    pub(crate) fn reload(&mut self) -> Result<()> {
        let count = self.opts.count;
        let e = Lab::exp(
            "reload",
            "Reload cost: loss and round trip while xlat reloads",
            None,
            format!(
                "Half the device's throughput (its RFC 2544 search in this run, loss <= {}%; or --rate), constant, \
                 on {} flows, {} frames, in five windows: baseline, {count} reloads changing [timeouts] udp (301/302 s), \
                 baseline, {count} reloads adding and removing pool address {EXTRA_POOL} (the flows' pool stays), \
                 baseline. A reload replaces the file (write and rename) and sends `xlat reload`'s request on the control \
                 socket from the lab's thread on the tester's CPU (no process started); its round trip is from connecting to the answer \
                 (the daemon answers once every packet worker applied it). Reloads start every {} ms (at once when behind), from {} ms after the first frame; \
                 the tester sends until {} ms after the last reply; a baseline lasts as long as a reload window is \
                 planned to. Loss = sent - distinct frames received over the whole window; baseline loss: the windows \
                 before and after (median [min..max]). Reloads applied = answers `reloaded` naming the changed key.",
                self.opts.threshold * 100.0,
                self.opts.flows,
                self.opts
                    .sizes
                    .first()
                    .map(size_label)
                    .unwrap_or_else(|| "64 B".into()),
                INTERVAL.as_millis(),
                LEAD.as_millis(),
                TAIL.as_millis(),
            ),
        );
        let t = Lab::exp(
            "throughput",
            "Throughput (RFC 2544): the reload experiment's rate is half of it",
            None,
            self.throughput_method(),
        );
        let size = self
            .opts
            .sizes
            .first()
            .cloned()
            .unwrap_or(SizeMix::Fixed(64));
        for d in self.opts.devices.clone() {
            let (search, rows) = self.with_device(&d, |lab, dev| lab.reload_device(dev, &size))?;
            if let Some(s) = search {
                self.add(&t, vec![s]);
            }
            self.add(&e, rows);
        }
        self.push(e);
        Ok(())
    }

    /// One device: its rate, then baseline, timeouts, baseline, pool, baseline.
    fn reload_device(
        &mut self,
        dev: &mut dyn Device,
        size: &SizeMix,
    ) -> Result<(Option<Row>, Vec<Row>)> {
        let Some(files) = dev.xlat_files() else {
            bail!(
                "{}: reload measures `xlat run` devices only (xlat-nat44, xlat-nat44-xdp)",
                dev.name()
            );
        };
        if dev.v6_in() {
            bail!(
                "{}: reload changes a NAT44 pool; use xlat-nat44 or xlat-nat44-xdp",
                dev.name()
            );
        }
        let base = std::fs::read_to_string(&files.0)
            .with_context(|| format!("reading {}", files.0.display()))?;
        config_for(&base, Change::Timeouts, 0)?;
        config_for(&base, Change::Pool, 0)?;
        let flows = Arc::new(dev.flows(self.opts.flows, 0));
        let (rate, search) = match self.opts.rate {
            Some(r) => {
                self.warm(dev, flows.clone(), size)?;
                (r, None)
            }
            None => {
                let row = self.throughput_row(dev, size, self.opts.flows)?;
                let tput = row.metric("throughput_pps").map_or(0.0, |s| s.median);
                if tput <= 0.0 {
                    bail!(
                        "{}: no throughput trial passed, so there is no half of it to offer",
                        dev.name()
                    );
                }
                (tput / 2.0, Some(row))
            }
        };
        self.progress(&format!(
            "{}: offering {rate:.0} pps ({}) while reloading",
            dev.name(),
            match search {
                Some(_) => "half its throughput",
                None => "--rate",
            }
        ));
        let count = self.opts.count;
        let planned = LEAD + INTERVAL * count as u32 + TAIL;
        let spec = self.spec(
            self.dut_path(false),
            flows,
            size,
            Some(rate),
            // An upper bound: the window ends when its job is done.
            planned + Duration::from_millis(100) * count as u32 + Duration::from_secs(5),
            dev.pids(),
        );
        let sessions_before = dev.sessions(&self.topo);
        let mut baselines = vec![self.window(dev, &spec, Job::Baseline(planned), "baseline")?];
        let mut rows = Vec::new();
        for change in [Change::Timeouts, Change::Pool] {
            let job = Job::Reloads {
                change,
                count,
                files: &files,
                base: &base,
            };
            let w = self.window(
                dev,
                &spec,
                job,
                &format!("{count} reloads ({})", change.label()),
            )?;
            // Back to the file the device started with, outside the windows.
            replace_file(&files.0, &base)?;
            let reset = ask_reload(&files.1, change.key());
            if !reset.replied {
                bail!(
                    "{}: reloading the file it started with failed: {}",
                    dev.name(),
                    reset.error.unwrap_or_default()
                );
            }
            let after = self.window(dev, &spec, Job::Baseline(planned), "baseline")?;
            baselines.push(after);
            let pair = &baselines[baselines.len() - 2..];
            let mut row = reload_row(dev.name(), change, size, rate, &w, pair, count);
            if let Some(n) = sessions_before {
                row.metrics
                    .insert("sessions_before".into(), Spread::of(&[n as f64]));
            }
            if let Some(n) = dev.sessions(&self.topo) {
                row.metrics
                    .insert("sessions_after".into(), Spread::of(&[n as f64]));
            }
            self.progress(&format!(
                "{} ({}): {} of {count} reloads applied, lost {} of {} ({:.4}%), reload p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                dev.name(),
                change.label(),
                w.reloads.iter().filter(|r| r.applied).count(),
                w.trial.lost,
                w.trial.sent,
                w.trial.loss * 100.0,
                row.metric("reload_p50_ms").map_or(0.0, |s| s.median),
                row.metric("reload_p99_ms").map_or(0.0, |s| s.median),
                row.metric("reload_max_ms").map_or(0.0, |s| s.median),
            ));
            rows.push(row);
        }
        Ok((search, rows))
    }

    /// Runs one trial of `spec` while `job` runs beside it, and ends the trial when the job
    /// is done.
    fn window(
        &mut self,
        dev: &mut dyn Device,
        spec: &TrialSpec,
        job: Job<'_>,
        what: &str,
    ) -> Result<Window> {
        sys::check_stop()?;
        let ctl = Arc::new(TrialControl::default());
        let mut spec = spec.clone();
        spec.control = Some(ctl.clone());
        self.bar.status(&format!("{} {what}: running", dev.name()));
        let (trial, reloads) = std::thread::scope(|s| {
            let h = s.spawn(|| run_trial(&spec));
            let reloads = drive(&ctl, &job, || h.is_finished());
            ctl.stop.store(true, Ordering::Release);
            let t = h
                .join()
                .map_err(|_| anyhow!("the trial's thread panicked"))
                .and_then(|r| r);
            (t, reloads)
        });
        let mut trial = trial?;
        trial.baseline = matches!(job, Job::Baseline(_));
        dev.check_alive()?;
        let reloads = reloads?;
        self.bar.step(&format!(
            "{} {what}: {:.1} s, sent {}, lost {} ({:.4}%)",
            dev.name(),
            trial.send_secs,
            trial.sent,
            trial.lost,
            trial.loss * 100.0
        ));
        Ok(Window { trial, reloads })
    }
}

/// Waits for the trial's first frame, then does `job`; returns the reloads done.
fn drive(ctl: &TrialControl, job: &Job<'_>, trial_over: impl Fn() -> bool) -> Result<Vec<Reload>> {
    let wait = Instant::now();
    // Bounded: the sender starts within seconds or the trial has failed.
    while !ctl.started.load(Ordering::Acquire) {
        if trial_over() || sys::stopped() || wait.elapsed() > Duration::from_secs(20) {
            return Ok(Vec::new());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let t0 = Instant::now();
    sys::sleep_interruptible(LEAD);
    let mut out = Vec::new();
    match *job {
        Job::Baseline(d) => sys::sleep_interruptible(d.saturating_sub(LEAD + TAIL)),
        Job::Reloads {
            change,
            count,
            files,
            base,
        } => {
            for i in 0..count {
                if trial_over() || sys::stopped() {
                    break;
                }
                let due = LEAD + INTERVAL * i as u32;
                if let Some(w) = due.checked_sub(t0.elapsed()) {
                    std::thread::sleep(w);
                }
                replace_file(&files.0, &config_for(base, change, i)?)?;
                let mut r = ask_reload(&files.1, change.key());
                r.end_s = t0.elapsed().as_secs_f64();
                out.push(r);
            }
        }
    }
    sys::sleep_interruptible(TAIL);
    Ok(out)
}

/// A variant's row: the reload window against the baselines either side of it.
fn reload_row(
    device: &str,
    change: Change,
    size: &SizeMix,
    rate: f64,
    w: &Window,
    baselines: &[Window],
    count: usize,
) -> Row {
    let mut row = Row {
        device: format!("{device} ({})", change.label()),
        size: size.label(),
        ..Row::default()
    };
    let t = &w.trial;
    let mut ms: Vec<f64> = w.reloads.iter().map(|r| r.ms).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let applied = w.reloads.iter().filter(|r| r.applied).count();
    let ended: u64 = w.reloads.iter().map(|r| r.sessions_ended).sum();
    // Replies after the tester's last frame (the window ran out first) did not cost it.
    let outside = w.reloads.iter().filter(|r| r.end_s > t.send_secs).count();
    let one = |v: f64| Spread::of(&[v]);
    let bl = |f: &dyn Fn(&Trial) -> f64| {
        Spread::of(&baselines.iter().map(|b| f(&b.trial)).collect::<Vec<_>>())
    };
    for (k, v) in [
        ("offered_pps", one(rate)),
        ("reloads", one(applied as f64)),
        ("reloads_asked", one(count as f64)),
        ("reloads_done", one(w.reloads.len() as f64)),
        ("reloads_after_window", one(outside as f64)),
        ("sent", one(t.sent as f64)),
        ("received", one(t.received as f64)),
        ("lost", one(t.lost as f64)),
        ("loss_pct", one(t.loss * 100.0)),
        ("window_s", one(t.send_secs)),
        ("reload_p50_ms", one(percentile(&ms, 0.5))),
        ("reload_p99_ms", one(percentile(&ms, 0.99))),
        ("reload_max_ms", one(ms.last().copied().unwrap_or(0.0))),
        ("reload_ms", Spread::of(&ms)),
        ("sessions_ended", one(ended as f64)),
        ("baseline_sent", bl(&|t| t.sent as f64)),
        ("baseline_lost", bl(&|t| t.lost as f64)),
        ("baseline_loss_pct", bl(&|t| t.loss * 100.0)),
        ("tx_refused", one(t.tx_refused as f64)),
    ] {
        row.metrics.insert(k.into(), v);
    }
    if t.sender_short {
        row.tester_limited = true;
        row.notes
            .push("the tester could not offer the rate during the reload window".into());
    }
    if applied < count {
        let first = w.reloads.iter().find_map(|r| r.error.clone());
        row.notes.push(format!(
            "{applied} of {count} reloads applied{}",
            first
                .map(|e| format!("; first failure: {e}"))
                .unwrap_or_default()
        ));
    }
    if outside > 0 {
        row.notes.push(format!(
            "{outside} reloads ended after the tester's last frame (the window's upper bound ran out)"
        ));
    }
    row.trials.push(t.clone());
    row.trials.extend(baselines.iter().map(|b| b.trial.clone()));
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str =
        "[nat44]\ninside = [\"198.18.0.0/16\"]\npool = [\"198.19.4.0/24\"]\nmode = \"napt\"\n";

    #[test]
    fn every_reload_changes_the_file() {
        let a = config_for(BASE, Change::Timeouts, 0).unwrap();
        let b = config_for(BASE, Change::Timeouts, 1).unwrap();
        assert!(a.ends_with("[timeouts]\nudp = 301\n"), "{a}");
        assert!(b.ends_with("[timeouts]\nudp = 302\n"), "{b}");
        assert_eq!(config_for(BASE, Change::Timeouts, 2).unwrap(), a);
        let add = config_for(BASE, Change::Pool, 0).unwrap();
        assert!(add.contains("pool = [\"198.19.4.0/24\", \"198.19.0.100/32\"]"));
        assert_eq!(config_for(BASE, Change::Pool, 1).unwrap(), BASE);
        // A file of another shape is refused, not guessed at.
        assert!(config_for(&a, Change::Timeouts, 0).is_err());
        assert!(config_for("[nat64]\n", Change::Pool, 0).is_err());
    }

    #[test]
    fn replies_parse() {
        assert_eq!(
            parse_reply(
                r#"{"reloaded":{"keys":["timeouts.udp"],"sessions_ended":0}}"#,
                "timeouts.udp"
            ),
            (true, true, 0)
        );
        assert_eq!(
            parse_reply(
                r#"{"reloaded":{"keys":["nat44.pool","timeouts.udp"],"sessions_ended":212,"warnings":["x"]}}"#,
                "nat44.pool"
            ),
            (true, true, 212)
        );
        // Nothing changed, another key, a refusal, garbage.
        assert_eq!(
            parse_reply(
                r#"{"reloaded":{"keys":[],"sessions_ended":0}}"#,
                "nat44.pool"
            ),
            (true, false, 0)
        );
        assert_eq!(
            parse_reply(r#"{"reloaded":{"keys":["nat44.pool"]}}"#, "timeouts.udp"),
            (true, false, 0)
        );
        assert_eq!(
            parse_reply(r#"{"refused":"xlat.toml: nat44.ports: ..."}"#, "nat44.pool"),
            (false, false, 0)
        );
        assert_eq!(parse_reply("", "nat44.pool"), (false, false, 0));
        assert_eq!(parse_reply("reloaded: x", "nat44.pool"), (false, false, 0));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 500.0);
        assert_eq!(percentile(&v, 0.99), 990.0);
        assert_eq!(percentile(&v, 1.0), 1000.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
