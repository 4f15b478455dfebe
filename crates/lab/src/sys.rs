//! Small OS helpers for the lab: commands under a time limit, namespaces (setns), CPU
//! affinity, clocks, /proc readings, and a Ctrl-C flag. Most unsafe code of the lab lives here;
//! the rest: the AF_PACKET rings (`afpacket`), kill(2) of its own children (`device`,
//! `sockets`, `topo`), geteuid (`topo`) and the DUT's CPU pinning between fork and exec
//! (`device`).

use std::fs;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Output of a finished command.
#[derive(Debug)]
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `args` under `timeout -k 2 SECS`, capturing output.
pub fn cmd(secs: u64, args: &[&str]) -> Result<Out> {
    let mut c = Command::new("timeout");
    c.args(["-k", "2", &secs.to_string()])
        .args(args)
        .stdin(Stdio::null());
    let o = c
        .output()
        .with_context(|| format!("cannot start `{}`", args.join(" ")))?;
    Ok(Out {
        ok: o.status.success(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    })
}

/// Runs `args`; fails with the command and its stderr unless it succeeded.
pub fn cmd_ok(args: &[&str]) -> Result<String> {
    let o = cmd(30, args)?;
    if !o.ok {
        bail!("`{}` failed: {}", args.join(" "), o.stderr.trim());
    }
    Ok(o.stdout)
}

/// Runs `args` inside namespace `ns` (`ip netns exec`); must succeed.
pub fn ns_ok(ns: &str, args: &[&str]) -> Result<String> {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    cmd_ok(&v)
}

/// Runs a shell script inside `ns`; must succeed.
pub fn ns_sh(ns: &str, script: &str) -> Result<String> {
    ns_ok(ns, &["sh", "-c", script])
}

/// Loads an nft ruleset (several lines; nft 1.0.6 rejects some one-liners) into `ns`.
pub fn nft_load(ns: &str, ruleset: &str, scratch: &std::path::Path) -> Result<()> {
    let f = scratch.join(format!("nft-{ns}-{}.nft", now_ns()));
    fs::write(&f, ruleset).with_context(|| format!("writing {}", f.display()))?;
    let p = f.display().to_string();
    let r = ns_ok(ns, &["nft", "-f", &p]).with_context(|| format!("nft ruleset:\n{ruleset}"));
    let _ = fs::remove_file(&f);
    r.map(|_| ())
}

/// True if `prog` is on PATH.
pub fn have(prog: &str) -> bool {
    cmd(
        5,
        &["sh", "-c", &format!("command -v {prog} >/dev/null 2>&1")],
    )
    .map(|o| o.ok)
    .unwrap_or(false)
}

/// Moves the calling thread into network namespace `ns` (a thread's namespace is its own).
pub fn enter_netns(ns: &str) -> Result<()> {
    let path = format!("/run/netns/{ns}");
    let f = fs::File::open(&path).with_context(|| format!("opening {path}"))?;
    // SAFETY: setns on a valid namespace descriptor affects only the calling thread for
    // CLONE_NEWNET.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        bail!("setns({path}): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Pins the calling thread to `cpu`. Returns false when the kernel refused.
pub fn pin_thread(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity(0, ...)
    // affects the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Pins another thread or process (e.g. a NAPI kernel thread) to `cpu`.
pub fn pin_pid(pid: i32, cpu: usize) -> bool {
    // SAFETY: as in pin_thread, for another task.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Real-time priority of the lab's own threads and of the devices' threads (SCHED_FIFO), so
/// that other work on the machine does not decide the results. The kernel's RT throttling
/// (sched_rt_runtime_us) still leaves a slice of every second to everything else.
pub const RT_PRIO: i32 = 50;
/// A device's daemon (xlat, TAYGA): above the DUT's receive work, which would otherwise
/// starve it whenever more frames arrive than the receive thread can take (an XDP device's
/// policer bounds the daemon's share instead; `device::XDP_SLOW_PATH_PPS`).
pub const RT_PRIO_SLOW_PATH: i32 = RT_PRIO + 1;
/// The sender's priority: below the receive work on the tester CPU, which it must not starve.
pub const RT_PRIO_SENDER: i32 = 40;

/// Sets SCHED_FIFO at `prio` for a task (0 = the calling thread). False if refused.
pub fn set_fifo(pid: i32, prio: i32) -> bool {
    let p = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: sched_setscheduler with a valid sched_param.
    unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &p) == 0 }
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::sched_getcpu() }
}

/// Online CPUs: the machine's (`/sys/devices/system/cpu/online`), not the ones this process
/// may run on -- the lab pins itself, and `available_parallelism` follows the pinning (a
/// 2-CPU machine read as "1 CPUs" in reports).
pub fn ncpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| count_cpu_list(&s))
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
}

/// The number of CPUs in a kernel CPU list ("0-3,6,8-9" is 7); `None` if it does not parse.
fn count_cpu_list(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => part.parse::<usize>().map(|_| 1).ok()?,
        };
    }
    (n > 0).then_some(n)
}

/// CLOCK_REALTIME in nanoseconds: the clock the kernel stamps AF_PACKET receive rings with,
/// so sender and receiver use one clock.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), ns. Without IRQ time accounting
/// this includes softirq work the kernel ran in the thread's context (in veth's default
/// receive mode: the receiving device's work, inside the sender's sendto()).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The pid of the kernel thread named `comm` (e.g. "ksoftirqd/0"), if there is one.
pub fn kthread_pid(comm: &str) -> Option<i32> {
    fs::read_dir("/proc")
        .ok()?
        .flatten()
        .take(100_000)
        .find_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let c = fs::read_to_string(e.path().join("comm")).ok()?;
            (c.trim() == comm).then_some(pid)
        })
}

/// Sets this thread's timer slack to 1 ns so short sleeps in the pacer are short.
pub fn tight_timer_slack() {
    // SAFETY: prctl with an integer argument.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Asks the kernel for a CPU wake-up latency of 0 us (PM QoS, /dev/cpu_dma_latency) for as
/// long as the returned file stays open: cpuidle then picks its polling state, so an idle CPU
/// spins instead of halting (which in a VM means an exit to the hypervisor and a slow wake).
pub fn hold_idle_poll() -> Result<std::fs::File> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")
        .context("opening /dev/cpu_dma_latency (--idle poll)")?;
    f.write_all(&0i32.to_ne_bytes())
        .context("writing a 0 us CPU latency request (--idle poll)")?;
    Ok(f)
}

/// Installs SIGINT/SIGTERM/SIGHUP handlers that set the stop flag (checked by every loop).
/// SIGHUP too: a closed terminal or a dropped ssh session must still remove the namespaces.
pub fn install_stop_handler() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGHUP, &sa, std::ptr::null_mut());
    }
}

/// True once Ctrl-C (SIGINT), SIGTERM or SIGHUP arrived.
pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Fails with "interrupted" once the stop flag is set.
pub fn check_stop() -> Result<()> {
    if stopped() {
        bail!("interrupted (Ctrl-C): stopping and removing the testbed");
    }
    Ok(())
}

/// Sleeps up to `d`, waking early on Ctrl-C.
pub fn sleep_interruptible(d: Duration) {
    let end = Instant::now() + d;
    for _ in 0..100_000 {
        let now = Instant::now();
        if now >= end || stopped() {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// Per-CPU time counters from /proc/stat, in clock ticks (USER_HZ).
#[derive(Debug, Clone, Default)]
pub struct CpuTimes {
    /// user+nice, system, irq, softirq, idle+iowait, steal.
    pub user: u64,
    pub system: u64,
    pub irq: u64,
    pub softirq: u64,
    pub idle: u64,
    pub steal: u64,
}

impl CpuTimes {
    pub fn busy(&self) -> u64 {
        self.user + self.system + self.irq + self.softirq + self.steal
    }
    pub fn total(&self) -> u64 {
        self.busy() + self.idle
    }
    pub fn delta(&self, before: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(before.user),
            system: self.system.saturating_sub(before.system),
            irq: self.irq.saturating_sub(before.irq),
            softirq: self.softirq.saturating_sub(before.softirq),
            idle: self.idle.saturating_sub(before.idle),
            steal: self.steal.saturating_sub(before.steal),
        }
    }
}

/// Clock ticks per second of /proc/stat and /proc/PID/stat.
pub fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Reads the per-CPU lines of /proc/stat (index = CPU number).
pub fn cpu_times() -> Vec<CpuTimes> {
    let text = fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_proc_stat(&text)
}

/// Parses /proc/stat text into per-CPU counters.
pub fn parse_proc_stat(text: &str) -> Vec<CpuTimes> {
    let mut out: Vec<CpuTimes> = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(name) = it.next() else { continue };
        let Some(idx) = name.strip_prefix("cpu") else {
            continue;
        };
        let Ok(idx) = idx.parse::<usize>() else {
            continue;
        };
        let v: Vec<u64> = it.map(|x| x.parse().unwrap_or(0)).collect();
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        if idx >= 4096 {
            continue;
        }
        if out.len() <= idx {
            out.resize(idx + 1, CpuTimes::default());
        }
        out[idx] = CpuTimes {
            user: g(0) + g(1),
            system: g(2),
            idle: g(3) + g(4),
            irq: g(5),
            softirq: g(6),
            steal: g(7),
        };
    }
    out
}

/// utime + stime of a process (all its threads), in clock ticks.
pub fn proc_cpu_ticks(pid: i32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time of all threads of a process in nanoseconds (sum of /proc/PID/task/*/schedstat,
/// which the scheduler keeps in ns), or utime+stime ticks converted when schedstat is missing.
pub fn proc_cpu_ns(pid: i32) -> Option<u64> {
    let mut total = 0u64;
    let mut found = false;
    if let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten().take(4096) {
            let Ok(t) = fs::read_to_string(e.path().join("schedstat")) else {
                continue;
            };
            if let Some(ns) = t
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
            {
                total += ns;
                found = true;
            }
        }
    }
    if found {
        return Some(total);
    }
    proc_cpu_ticks(pid).map(|t| t * (1_000_000_000 / clk_tck()))
}

/// Resident set size of a process in bytes (VmRSS).
pub fn proc_rss(pid: i32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_kb_field(&text, "VmRSS:")
}

fn parse_kb_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// Bytes held by one slab cache (active objects x object size) from /proc/slabinfo.
pub fn slab_bytes(cache: &str) -> Option<(u64, u64)> {
    let text = fs::read_to_string("/proc/slabinfo").ok()?;
    parse_slabinfo(&text, cache)
}

/// (active objects, object size) of `cache` in slabinfo text.
pub fn parse_slabinfo(text: &str, cache: &str) -> Option<(u64, u64)> {
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if it.next() != Some(cache) {
            continue;
        }
        let active: u64 = it.next()?.parse().ok()?;
        let _num: u64 = it.next()?.parse().ok()?;
        let size: u64 = it.next()?.parse().ok()?;
        return Some((active, size));
    }
    None
}

/// Columns of the terminal on file descriptor `fd`, if it is one.
pub fn term_width(fd: libc::c_int) -> Option<usize> {
    // SAFETY: winsize is plain data; TIOCGWINSZ writes one into it.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: ioctl with a valid out pointer of the type TIOCGWINSZ expects.
    let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// A UTC timestamp `YYYYMMDD-HHMMSS` for result directory names.
pub fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86400) as i64);
    let s = secs % 86400;
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {

    #[test]
    fn cpu_lists_count_ranges_and_singles() {
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    use super::*;

    #[test]
    fn proc_stat_parses_per_cpu_lines() {
        let t = "cpu  10 0 5 100 0 0 1 0 0 0\ncpu0 4 1 2 50 3 0 1 0 0 0\ncpu1 5 0 3 47 0 1 0 2 0 0\nintr 1\n";
        let v = parse_proc_stat(t);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].user, 5);
        assert_eq!(v[0].idle, 53);
        assert_eq!(v[0].softirq, 1);
        assert_eq!(v[1].busy(), 5 + 3 + 1 + 2);
    }

    #[test]
    fn slabinfo_parses() {
        let t = "slabinfo - version: 2.1\nnf_conntrack          32     48    256   16    1 : tunables\n";
        assert_eq!(parse_slabinfo(t, "nf_conntrack"), Some((32, 256)));
        assert_eq!(parse_slabinfo(t, "x"), None);
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn kb_field() {
        assert_eq!(
            parse_kb_field("Name: x\nVmRSS:\t  1234 kB\n", "VmRSS:"),
            Some(1234 * 1024)
        );
    }
}
