//! Whether a difference between two devices is more than noise: Welch's t-test (two-sided,
//! unequal variances, Welch-Satterthwaite degrees of freedom; [`crate::stats::welch`]) of each
//! repetition's value (for rtt: each echo reply's), NAT64 against NAT44 in the same cell of
//! an experiment, as S3 tested its apachebench results.
//!
//! The rows keep every repetition's value in [`crate::results::Row::samples`]; the tests are
//! computed from them when the report is written (so `xlat lab report DIR` recomputes them),
//! never stored. A cell is one (size, x) of the experiment: for http one grid cell (requests,
//! concurrency).

use std::fmt::Write as _;

use crate::report::num;
use crate::results::{Row, RunResults};
use crate::stats::{welch, Welch};

/// The metrics tested: (experiment, metric, what it is).
pub const METRICS: &[(&str, &str, &str)] = &[
    ("http", "requests_per_s", "requests/s"),
    ("http", "transfer_kbytes_s", "transfer KB/s"),
    ("rtt", "rtt_ms", "RTT (ms)"),
];

/// The device pairs tested: (NAT64, NAT44) of the same implementation family.
pub const PAIRS: &[(&str, &str)] = &[
    ("tayga-nat64", "kernel-nat44"),
    ("xlat-nat64", "xlat-nat44"),
    ("xlat-nat64-xdp", "xlat-nat44-xdp"),
];

/// Significance level the table's last column uses.
pub const ALPHA: f64 = 0.05;

/// One test: a pair of devices in one cell of one experiment's metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Test {
    pub experiment: String,
    pub metric: String,
    /// What the metric is, for the table.
    pub what: String,
    pub cell: String,
    pub a: String,
    pub b: String,
    /// The repetitions each side had.
    pub n_a: usize,
    pub n_b: usize,
    /// None when the test is undefined (fewer than two repetitions a side, or no spread).
    pub result: Option<Welch>,
}

/// The cell a row stands for, in words.
pub fn cell_text(exp: &str, row: &Row) -> String {
    match (exp, row.x) {
        ("http", Some(c)) => format!("{} requests, {} at once", row.size, num(c)),
        (_, Some(x)) => format!("{} / {}", row.size, num(x)),
        _ => row.size.clone(),
    }
}

/// Every test the run's rows allow, in the order of the experiment's rows.
pub fn tests(r: &RunResults) -> Vec<Test> {
    let mut out = Vec::new();
    for &(exp, metric, what) in METRICS {
        for e in r.experiments.iter().filter(|e| e.name == exp) {
            // The cells, in the order they were measured.
            let mut cells: Vec<(String, Option<f64>)> = Vec::new();
            for row in &e.rows {
                let c = (row.size.clone(), row.x);
                if !cells.contains(&c) {
                    cells.push(c);
                }
            }
            for (size, x) in cells {
                let in_cell = |d: &str| {
                    e.rows
                        .iter()
                        .find(|row| row.device == d && row.size == size && row.x == x)
                };
                for &(a, b) in PAIRS {
                    let (Some(ra), Some(rb)) = (in_cell(a), in_cell(b)) else {
                        continue;
                    };
                    let (Some(sa), Some(sb)) = (ra.samples.get(metric), rb.samples.get(metric))
                    else {
                        continue;
                    };
                    out.push(Test {
                        experiment: exp.into(),
                        metric: metric.into(),
                        what: what.into(),
                        cell: cell_text(exp, ra),
                        a: a.into(),
                        b: b.into(),
                        n_a: sa.len(),
                        n_b: sb.len(),
                        result: welch(sa, sb),
                    });
                }
            }
        }
    }
    out
}

/// A p-value for the table: four decimals, or "< 0.0001".
pub fn p_text(p: f64) -> String {
    if !p.is_finite() {
        "-".into()
    } else if p < 1e-4 {
        "< 0.0001".into()
    } else {
        format!("{p:.4}")
    }
}

/// What the test says, in words.
pub fn verdict(t: &Test) -> String {
    match &t.result {
        None if t.n_a < 2 || t.n_b < 2 => {
            "no test: fewer than 2 repetitions a side (--repeats)".into()
        }
        None => "no test: no spread on either side".into(),
        Some(w) if w.p < ALPHA => format!(
            "significant at {:.0}%: {} {} than {}",
            ALPHA * 100.0,
            t.a,
            if w.mean_a > w.mean_b {
                "higher"
            } else {
                "lower"
            },
            t.b
        ),
        Some(_) => format!("no significant difference at {:.0}%", ALPHA * 100.0),
    }
}

/// The table: header and rows.
pub fn table(ts: &[Test]) -> (Vec<String>, Vec<Vec<String>>) {
    let head: Vec<String> = [
        "experiment",
        "metric",
        "cell",
        "NAT64",
        "NAT44",
        "NAT64 mean (sd, n)",
        "NAT44 mean (sd, n)",
        "difference",
        "t",
        "df",
        "p (two-sided)",
        "verdict",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rows = ts
        .iter()
        .map(|t| {
            let mut v = vec![
                t.experiment.clone(),
                t.what.clone(),
                t.cell.clone(),
                t.a.clone(),
                t.b.clone(),
            ];
            match &t.result {
                Some(w) => {
                    v.push(format!("{} ({}, {})", num(w.mean_a), num(w.sd_a), w.n_a));
                    v.push(format!("{} ({}, {})", num(w.mean_b), num(w.sd_b), w.n_b));
                    v.push(if w.mean_b != 0.0 {
                        format!("{:+.1}%", (w.mean_a - w.mean_b) / w.mean_b.abs() * 100.0)
                    } else {
                        "-".into()
                    });
                    v.push(format!("{:.2}", w.t));
                    v.push(format!("{:.1}", w.df));
                    v.push(p_text(w.p));
                }
                None => {
                    v.push(format!("n {}", t.n_a));
                    v.push(format!("n {}", t.n_b));
                    v.extend(["-", "-", "-", "-"].map(String::from));
                }
            }
            v.push(verdict(t));
            v
        })
        .collect();
    (head, rows)
}

/// What the section says before the table.
pub const INTRO: &str = "Welch's t-test (two-sided; unequal variances; Welch-Satterthwaite degrees of freedom) of each \
     repetition's value, NAT64 against NAT44 of the same family in the same cell, computed from results.json's samples. \
     p is the probability of a difference of means at least this large if both devices performed alike; below 0.05 \
     counts as significant. S3 tested its apachebench results the same way (NAT64 and NAT44 came out about equal).";

/// The section's title.
pub const TITLE: &str = "NAT64 vs NAT44: significance (Welch's t-test)";

/// The printed section (empty when there is nothing to test).
pub fn text(r: &RunResults) -> String {
    let ts = tests(r);
    let mut s = String::new();
    if ts.is_empty() {
        return s;
    }
    let (h, rows) = table(&ts);
    let _ = writeln!(s, "\n{TITLE}");
    s.push_str(&crate::report::text_table(&h, &rows));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Experiment;
    use crate::stats::Spread;

    fn row(dev: &str, size: &str, x: Option<f64>, v: &[f64]) -> Row {
        let mut r = Row {
            device: dev.into(),
            size: size.into(),
            x,
            ..Row::default()
        };
        r.metrics.insert("requests_per_s".into(), Spread::of(v));
        r.samples.insert("requests_per_s".into(), v.to_vec());
        r
    }

    fn run(rows: Vec<Row>) -> RunResults {
        RunResults {
            name: "reproduce-s3".into(),
            experiments: vec![Experiment {
                name: "http".into(),
                rows,
                ..Experiment::default()
            }],
            ..RunResults::default()
        }
    }

    #[test]
    fn pairs_per_cell_from_the_samples() {
        let r = run(vec![
            row(
                "kernel-nat44",
                "1000",
                Some(10.0),
                &[61.0, 61.8, 61.3, 61.5],
            ),
            row("tayga-nat64", "1000", Some(10.0), &[61.2, 61.9, 61.4]),
            row("kernel-nat44", "1000", Some(100.0), &[50.0, 51.0, 50.5]),
            row("tayga-nat64", "1000", Some(100.0), &[40.0, 41.0, 40.2]),
            // No partner: no test.
            row("xlat-nat64", "1000", Some(10.0), &[70.0, 71.0]),
            // One repetition a side: listed, not tested.
            row("xlat-nat64", "2000", Some(10.0), &[70.0]),
            row("xlat-nat44", "2000", Some(10.0), &[71.0]),
        ]);
        let ts = tests(&r);
        assert_eq!(ts.len(), 3, "{ts:?}");
        assert_eq!(ts[0].cell, "1000 requests, 10 at once");
        assert_eq!(
            (ts[0].a.as_str(), ts[0].b.as_str()),
            ("tayga-nat64", "kernel-nat44")
        );
        let w = ts[0].result.unwrap();
        // The same numbers as stats' reference test.
        assert!((w.p - 0.726_608_253_193).abs() < 1e-9, "{w:?}");
        assert!(verdict(&ts[0]).starts_with("no significant difference"));
        let w = ts[1].result.unwrap();
        assert!(w.p < 0.001, "{w:?}");
        assert_eq!(
            verdict(&ts[1]),
            "significant at 5%: tayga-nat64 lower than kernel-nat44"
        );
        assert!(ts[2].result.is_none());
        assert!(verdict(&ts[2]).contains("fewer than 2 repetitions"));
        let (h, rows) = table(&ts);
        assert!(rows.iter().all(|r| r.len() == h.len()));
        assert_eq!(rows[0][10], "0.7266");
        assert_eq!(rows[0][7], "+0.2%");
        assert_eq!(rows[1][10], "< 0.0001");
        assert_eq!(rows[2][10], "-");
        let s = text(&r);
        assert!(s.contains(TITLE) && s.contains("0.7266"), "{s}");
    }

    #[test]
    fn rtt_replies_are_the_samples() {
        let mk = |dev: &str, v: &[f64]| {
            let mut r = Row {
                device: dev.into(),
                size: "ping".into(),
                ..Row::default()
            };
            r.samples.insert("rtt_ms".into(), v.to_vec());
            r
        };
        let mut r = run(vec![]);
        r.experiments[0].name = "rtt".into();
        r.experiments[0].rows = vec![
            mk("xlat-nat44", &[0.24, 0.23, 0.25, 0.24]),
            mk("xlat-nat64", &[0.27, 0.26, 0.28, 0.27]),
        ];
        let ts = tests(&r);
        assert_eq!(ts.len(), 1);
        assert_eq!(
            (ts[0].what.as_str(), ts[0].cell.as_str()),
            ("RTT (ms)", "ping")
        );
        assert_eq!((ts[0].n_a, ts[0].n_b), (4, 4));
        assert_eq!(
            verdict(&ts[0]),
            "significant at 5%: xlat-nat64 higher than xlat-nat44"
        );
    }

    #[test]
    fn nothing_to_test_without_samples() {
        let mut a = row("kernel-nat44", "http", None, &[1.0, 2.0]);
        let mut b = row("tayga-nat64", "http", None, &[1.0, 2.0]);
        // A run from before the samples were kept.
        a.samples.clear();
        b.samples.clear();
        assert!(tests(&run(vec![a, b])).is_empty());
        assert_eq!(text(&run(vec![])), "");
    }
}
