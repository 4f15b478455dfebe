//! CPU plans for the testbed: the `--dut-cpus`/`--tester-cpus` lists and how a device on
//! several cores is laid out (the steps of scale-cores, the queues of the DUT's veth ports,
//! xlat's packet workers, where each queue's receive thread runs). Pure functions: the lab
//! applies them in [`crate::topo`] and the experiments.

use anyhow::{bail, Result};

/// The most CPUs a list may name (a bound on what the lab pins and creates queues for).
pub const MAX_CPUS: usize = 1024;

/// Parses a CPU list as the kernel writes them (`cpuset(7)`'s list format): `1`, `1-3`,
/// `0,2-3`. The result keeps the order given (the order in which scale-cores adds cores:
/// `1,0` puts the device on CPU 1 first), without duplicates, each CPU below `online`.
pub fn parse_list(text: &str, online: usize) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            bail!("CPU list {text:?}: an empty item (write e.g. 1-3 or 0,2)");
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a, text)?, num(b, text)?),
            None => {
                let n = num(part, text)?;
                (n, n)
            }
        };
        if lo > hi {
            bail!("CPU list {text:?}: {part} runs backwards (write {hi}-{lo})");
        }
        if hi >= online {
            bail!(
                "CPU list {text:?}: CPU {hi} is not online (this machine has CPUs 0..{})",
                online.saturating_sub(1)
            );
        }
        if hi - lo >= MAX_CPUS || v.len() + (hi - lo) >= MAX_CPUS {
            bail!("CPU list {text:?}: more than {MAX_CPUS} CPUs");
        }
        for c in lo..=hi {
            if !v.contains(&c) {
                v.push(c);
            }
        }
    }
    Ok(v)
}

fn num(s: &str, text: &str) -> Result<usize> {
    match s.trim().parse::<usize>() {
        Ok(n) => Ok(n),
        Err(_) => bail!("CPU list {text:?}: {s:?} is not a CPU number"),
    }
}

/// Formats a CPU list back in the kernel's list format (`0-2,5`).
pub fn format_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// scale-cores' steps for a device given `n` cores: 1, 2, 4, ... doubling while below `n`,
/// then `n` itself (6 cores: 1, 2, 4, 6).
pub fn core_steps(n: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut k = 1;
    while k < n {
        v.push(k);
        k *= 2;
    }
    if n > 0 {
        v.push(n);
    }
    v
}

/// The layout of a device on `k` of the DUT's CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorePlan {
    /// The CPUs the device may use: the first `k` of the DUT's list.
    pub cpus: Vec<usize>,
    /// Receive and transmit queues of each DUT port (and of the tester's ports facing it):
    /// one per core, so each core polls one queue of each port.
    pub queues: usize,
    /// xlat's `[dataplane] workers`: one per core.
    pub workers: usize,
    /// The CPU of each queue's receive (threaded NAPI) thread, by queue index.
    pub queue_cpus: Vec<usize>,
}

/// The layout on the first `k` of `dut_cpus` (`k` is clamped to 1..=the list's length).
pub fn plan(dut_cpus: &[usize], k: usize) -> CorePlan {
    let k = k.clamp(1, dut_cpus.len().max(1));
    let cpus: Vec<usize> = dut_cpus.iter().copied().take(k).collect();
    let cpus = if cpus.is_empty() { vec![0] } else { cpus };
    CorePlan {
        queues: cpus.len(),
        workers: cpus.len(),
        queue_cpus: queue_cpus(&cpus, cpus.len()),
        cpus,
    }
}

/// Queue `i` of `queues` to `cpus[i % cpus.len()]`: round robin, so with as many queues as
/// CPUs each CPU gets one queue.
pub fn queue_cpus(cpus: &[usize], queues: usize) -> Vec<usize> {
    if cpus.is_empty() {
        return vec![0; queues];
    }
    (0..queues).map(|i| cpus[i % cpus.len()]).collect()
}

/// Hex CPU mask (sysfs's rps_cpus/xps_cpus format: comma-separated 32-bit groups, the
/// highest first) of `cpus`.
pub fn mask(cpus: &[usize]) -> String {
    let top = cpus.iter().copied().max().unwrap_or(0);
    let mut groups = vec![0u32; top / 32 + 1];
    for &c in cpus {
        groups[c / 32] |= 1 << (c % 32);
    }
    groups
        .iter()
        .rev()
        .map(|g| format!("{g:x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The most packets of one queue as a share of all, from per-queue counts (1.0: one queue
/// took everything; 1/n: an even spread over n). None when nothing was counted.
pub fn busiest_share(counts: &[u64]) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    Some(*counts.iter().max().unwrap_or(&0) as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_list("1", 4).unwrap(), vec![1]);
        assert_eq!(parse_list("1-3", 4).unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_list("0,2-3", 4).unwrap(), vec![0, 2, 3]);
        // In the order given, duplicates removed.
        assert_eq!(parse_list("3,1-2,2", 4).unwrap(), vec![3, 1, 2]);
        assert_eq!(parse_list("1,0", 2).unwrap(), vec![1, 0]);
        assert_eq!(parse_list(" 0 , 1 ", 2).unwrap(), vec![0, 1]);
        for bad in ["", "1,", "a", "3-1", "1-", "-1", "0-4"] {
            let e = parse_list(bad, 4).unwrap_err().to_string();
            assert!(e.contains("CPU list"), "{bad}: {e}");
        }
        assert!(parse_list("4", 4).unwrap_err().to_string().contains("0..3"));
        assert!(parse_list("0-5000", 10_000).is_err());
    }

    #[test]
    fn lists_format_back() {
        for s in ["1", "1-3", "0,2-3", "0-2,5,7-8", "1,0", "3,0-1"] {
            assert_eq!(format_list(&parse_list(s, 16).unwrap()), s);
        }
        assert_eq!(format_list(&[]), "");
    }

    #[test]
    fn steps_double_up_to_the_cores_given() {
        assert_eq!(core_steps(0), Vec::<usize>::new());
        assert_eq!(core_steps(1), vec![1]);
        assert_eq!(core_steps(2), vec![1, 2]);
        assert_eq!(core_steps(3), vec![1, 2, 3]);
        assert_eq!(core_steps(4), vec![1, 2, 4]);
        assert_eq!(core_steps(6), vec![1, 2, 4, 6]);
        assert_eq!(core_steps(16), vec![1, 2, 4, 8, 16]);
    }

    #[test]
    fn a_plan_gives_each_core_one_queue_and_one_worker() {
        let p = plan(&[1, 2, 3], 2);
        assert_eq!(p.cpus, vec![1, 2]);
        assert_eq!(p.queues, 2);
        assert_eq!(p.workers, 2);
        assert_eq!(p.queue_cpus, vec![1, 2]);
        // Clamped to the list.
        assert_eq!(plan(&[5], 4).cpus, vec![5]);
        assert_eq!(plan(&[1, 2], 0).cpus, vec![1]);
        assert_eq!(plan(&[], 1).cpus, vec![0]);
        // Round robin when queues outnumber CPUs.
        assert_eq!(queue_cpus(&[4, 6], 5), vec![4, 6, 4, 6, 4]);
    }

    #[test]
    fn masks() {
        assert_eq!(mask(&[0]), "1");
        assert_eq!(mask(&[1]), "2");
        assert_eq!(mask(&[1, 2, 3]), "e");
        assert_eq!(mask(&[33]), "2,0");
        assert_eq!(mask(&[0, 33]), "2,1");
    }

    #[test]
    fn the_busiest_queue_share() {
        assert_eq!(busiest_share(&[0, 0]), None);
        assert_eq!(busiest_share(&[10, 0]), Some(1.0));
        assert_eq!(busiest_share(&[5, 5]), Some(0.5));
        assert_eq!(busiest_share(&[3, 1]), Some(0.75));
    }
}
