//! The studies' published figures beside a reproduce run's measurements.
//!
//! `data/papers.json` (embedded) holds every figure SEEDS.md quotes from the five studies: its
//! source (study, table or figure, the SEEDS.md line), units, axes, the published points, the
//! shape the figure showed, and a check that says how to look for that shape in a run's rows.
//! [`compare`] runs each check of a study against the run's results -- never against stored
//! numbers of ours -- and gives a verdict per device: the same shape, not the same shape, or not
//! measured in this run (a row it needs is missing). [`plots`] overlays a published series and
//! the run's rows where the axes match. The report puts both in a section of its own for
//! `xlat lab reproduce sN` runs.
//!
//! The checks:
//! - `trend`: the metric from the smallest to the largest x (load, sessions or payload) per
//!   device; a rise (or fall) counts when it exceeds `min_change` (relative) and `floor`
//!   (absolute), else the series is flat. Same shape when ours moves the way the paper's did.
//! - `ratio`: numerator / denominator for device pairs (or the same device at two sizes); below
//!   1 - `tolerance`, within it, or above 1 + `tolerance`, as the paper's was.
//! - `order`: the devices' values ascend in the listed order, each step by more than `min_abs`
//!   and `min_rel` of the one before.
//! - `constant`: the metric stays within `tolerance` of its median over x >= `min_x` (S5's
//!   linear memory: constant bytes per entry); the value is shown beside the paper's.
//! - `value`: ours beside the paper's, for scale only (hardware 10-20 years apart).
//! - `jump`: one device's relative rise from one size to the next against the same rise of
//!   reference devices; the same shape when it exceeds every reference's by `min_excess` (S2:
//!   TAYGA's delay above 1,750 B).
//! - `zero`: what a study reported working, with no number to compare (S3's clients reached
//!   IPv4 web servers by name through DNS64 and NAT64; S3 published no DNS timing): the same
//!   shape when the metric (failures) is 0 in every repetition for each device.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use plotters::prelude::SeriesLabelPosition;
use serde::Deserialize;

use crate::report::{num, svg_plot};
use crate::results::{Row, RunResults};

/// The embedded data file.
pub const PAPERS_JSON: &str = include_str!("../data/papers.json");

/// The data file: every published figure the report compares with.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Papers {
    pub about: String,
    pub figures: Vec<Figure>,
}

/// One published figure (or one number of a table) and how to check its shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub id: String,
    /// s1..s5.
    pub study: String,
    /// Table or figure of the study and the SEEDS.md line it comes from.
    pub source: String,
    /// What was measured, on what.
    pub what: String,
    /// Unit of the published y values.
    pub unit: String,
    /// What the published x axis is.
    pub x: String,
    #[serde(default)]
    pub series: Vec<Series>,
    /// The shape the figure showed, in words.
    pub shape: String,
    pub check: Check,
    pub plot: Option<PlotSpec>,
}

/// Published points (x, y).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Series {
    pub label: String,
    pub points: Vec<[f64; 2]>,
}

/// An overlay of the published series and the run's rows of one experiment.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    pub experiment: String,
    pub metric: String,
    pub size: Option<String>,
    /// Each series as a percentage of its first point (delay on a Cisco and in a VM differ
    /// by an order of magnitude; their rise can still be compared).
    #[serde(default)]
    pub normalize: bool,
    #[serde(default)]
    pub log_x: bool,
    pub y_label: String,
}

/// How to look for a figure's shape in a run's rows (module docs).
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Check {
    Trend {
        experiment: String,
        metric: String,
        size: Option<String>,
        devices: Vec<String>,
        min_x: Option<f64>,
        min_change: f64,
        #[serde(default)]
        floor: f64,
        /// x is the row's size (payload), not its x value.
        #[serde(default)]
        by_size: bool,
        /// For each device, the published series it is compared with (default the first).
        #[serde(default)]
        series_of: Vec<usize>,
        /// The paper gave no points, only that the metric rises with x.
        #[serde(default)]
        paper_rises: bool,
    },
    Ratio {
        experiment: String,
        metric: String,
        size: Option<String>,
        /// The numerator's size when it differs (the same device at two sizes).
        num_size: Option<String>,
        x: Option<f64>,
        /// (numerator device, denominator device).
        #[serde(default)]
        pairs: Vec<[String; 2]>,
        /// Devices compared with themselves at `num_size` vs `size`.
        #[serde(default)]
        devices: Vec<String>,
        paper: Option<f64>,
        /// The paper gave an order, not numbers: the ratio was above 1.
        #[serde(default)]
        paper_above_one: bool,
        tolerance: f64,
    },
    Order {
        experiment: String,
        metric: String,
        size: Option<String>,
        x: Option<f64>,
        devices: Vec<String>,
        #[serde(default)]
        min_rel: f64,
        #[serde(default)]
        min_abs: f64,
    },
    Constant {
        experiment: String,
        metric: String,
        devices: Vec<String>,
        min_x: Option<f64>,
        tolerance: f64,
        paper: f64,
    },
    Value {
        experiment: String,
        metric: String,
        size: Option<String>,
        devices: Vec<String>,
        paper: f64,
    },
    /// One device's step from size `from` to size `to` against the same step of reference
    /// devices (S2: TAYGA's delay jumped above 1,750 B where the others' did not).
    Jump {
        experiment: String,
        metric: String,
        from: String,
        to: String,
        device: String,
        references: Vec<String>,
        /// The device's relative rise must exceed every reference's by this much (0.1 = 10
        /// percentage points).
        min_excess: f64,
    },
    /// What the study reported working: the metric (a count of failures) is 0 for each device
    /// in every repetition (S3: pages fetched by name through DNS64 and NAT64).
    Zero {
        experiment: String,
        metric: String,
        size: Option<String>,
        devices: Vec<String>,
    },
}

impl Check {
    /// The experiment and metric the check reads.
    pub fn reads(&self) -> (&str, &str) {
        match self {
            Check::Trend {
                experiment, metric, ..
            }
            | Check::Ratio {
                experiment, metric, ..
            }
            | Check::Order {
                experiment, metric, ..
            }
            | Check::Constant {
                experiment, metric, ..
            }
            | Check::Value {
                experiment, metric, ..
            }
            | Check::Jump {
                experiment, metric, ..
            }
            | Check::Zero {
                experiment, metric, ..
            } => (experiment, metric),
        }
    }
}

/// Parses the embedded data file.
pub fn load() -> Result<Papers> {
    serde_json::from_str(PAPERS_JSON).context("crates/lab/data/papers.json")
}

/// Whether our measurement shows the published shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Same,
    Differs,
    /// A row the check needs is not in the run.
    NotMeasured,
    /// Numbers beside each other for scale; no shape to compare.
    ForScale,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Same => "same shape",
            Verdict::Differs => "not the same shape",
            Verdict::NotMeasured => "not measured in this run",
            Verdict::ForScale => "for scale only",
        }
    }
}

/// One figure beside the run: the paper's side, ours per device, the verdict.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub id: String,
    pub what: String,
    pub source: String,
    pub paper: String,
    /// Per device (or pair): what we measured and its verdict.
    pub ours: Vec<(String, Verdict)>,
    pub verdict: Verdict,
}

impl Comparison {
    /// One line: "id: paper ...; here ... -> verdict".
    pub fn line(&self) -> String {
        let here: Vec<&str> = self.ours.iter().map(|o| o.0.as_str()).collect();
        let here = if here.is_empty() {
            "nothing measured".to_string()
        } else {
            here.join("; ")
        };
        format!(
            "{}: paper: {}. Here: {} -> {}",
            self.id,
            self.paper,
            here,
            self.verdict.text()
        )
    }
}

/// The study a run reproduced ("reproduce-s5" -> "s5").
pub fn study_of(r: &RunResults) -> Option<&str> {
    r.name.strip_prefix("reproduce-")
}

/// Rows of `exp` for `device` (and `size` when given) that carry `metric`.
fn rows<'a>(
    r: &'a RunResults,
    exp: &str,
    device: &str,
    size: Option<&str>,
    metric: &str,
) -> Vec<&'a Row> {
    r.experiments
        .iter()
        .filter(|e| e.name == exp)
        .flat_map(|e| e.rows.iter())
        .filter(|row| row.device == device)
        .filter(|row| size.is_none_or(|s| row.size == s))
        .filter(|row| row.metric(metric).is_some_and(|m| m.n > 0))
        .collect()
}

/// The median of `metric` in the row at `x` (or, without x, the row with the largest x).
fn value(
    r: &RunResults,
    exp: &str,
    device: &str,
    size: Option<&str>,
    x: Option<f64>,
    metric: &str,
) -> Option<f64> {
    let mut v = rows(r, exp, device, size, metric);
    match x {
        Some(x) => v.retain(|row| row.x.is_some_and(|rx| (rx - x).abs() < 1e-9)),
        None => v.sort_by(|a, b| a.x.unwrap_or(0.0).total_cmp(&b.x.unwrap_or(0.0))),
    }
    v.last()
        .and_then(|row| row.metric(metric))
        .map(|m| m.median)
}

/// Rise, flat or fall of first -> last.
fn direction(first: f64, last: f64, min_change: f64, floor: f64) -> i8 {
    let d = last - first;
    let rel = if first.abs() > 0.0 {
        d / first.abs()
    } else if d.abs() > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    if d.abs() <= floor || rel.abs() <= min_change {
        0
    } else if d > 0.0 {
        1
    } else {
        -1
    }
}

/// "a -> b (+X%)", the percentage only when a is not zero.
fn change_text(first: f64, last: f64) -> String {
    if first.abs() > 0.0 {
        format!(
            "{} -> {} ({:+.0}%)",
            num(first),
            num(last),
            (last - first) / first.abs() * 100.0
        )
    } else {
        format!("{} -> {}", num(first), num(last))
    }
}

/// A short unit for a metric's values in the text.
fn f_unit(metric: &str) -> &'static str {
    if metric.ends_with("_pct") {
        " %"
    } else if metric.ends_with("_us") {
        " us"
    } else if metric.ends_with("_mbps") {
        " Mb/s"
    } else {
        ""
    }
}

/// Below, about or above 1.
fn ratio_class(v: f64, tol: f64) -> i8 {
    if v < 1.0 - tol {
        -1
    } else if v > 1.0 + tol {
        1
    } else {
        0
    }
}

fn ratio_words(c: i8, tol: f64) -> String {
    match c {
        -1 => format!("below 1 by more than {:.0}%", tol * 100.0),
        1 => format!("above 1 by more than {:.0}%", tol * 100.0),
        _ => format!("within {:.0}% of 1", tol * 100.0),
    }
}

fn verdict_of(b: bool) -> Verdict {
    if b {
        Verdict::Same
    } else {
        Verdict::Differs
    }
}

/// Checks one figure against a run.
pub fn compare_figure(f: &Figure, r: &RunResults) -> Comparison {
    let mut ours: Vec<(String, Verdict)> = Vec::new();
    let mut paper = f.shape.clone();
    match &f.check {
        Check::Trend {
            experiment,
            metric,
            size,
            devices,
            min_x,
            min_change,
            floor,
            by_size,
            series_of,
            paper_rises,
        } => {
            // The paper's direction for series i.
            let pdir = |i: usize| {
                f.series
                    .get(i)
                    .and_then(|s| {
                        let (a, b) = (s.points.first()?, s.points.last()?);
                        Some(direction(a[1], b[1], *min_change, *floor))
                    })
                    .or(paper_rises.then_some(1))
            };
            for (i, d) in devices.iter().enumerate() {
                let si = series_of.get(i).copied().unwrap_or(0);
                let mut pts: Vec<(f64, f64)> = rows(r, experiment, d, size.as_deref(), metric)
                    .iter()
                    .filter_map(|row| {
                        let x = if *by_size {
                            row.size.parse().ok()?
                        } else {
                            row.x?
                        };
                        Some((x, row.metric(metric)?.median))
                    })
                    .filter(|p| min_x.is_none_or(|m| p.0 >= m))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let against = match (series_of.is_empty(), f.series.get(si)) {
                    (false, Some(s)) => format!(" [vs paper's {}]", s.label),
                    _ => String::new(),
                };
                match (pts.first(), pts.last()) {
                    (Some(a), Some(b)) if b.0 > a.0 => {
                        let dir = direction(a.1, b.1, *min_change, *floor);
                        let v = pdir(si).map_or(Verdict::ForScale, |p| verdict_of(p == dir));
                        ours.push((
                            format!(
                                "{d} {}{} from {} to {}{against}",
                                change_text(a.1, b.1),
                                f_unit(metric),
                                num(a.0),
                                num(b.0),
                            ),
                            v,
                        ));
                    }
                    _ => ours.push((
                        format!("{d} not measured in this run"),
                        Verdict::NotMeasured,
                    )),
                }
            }
            let published: Vec<String> = f
                .series
                .iter()
                .filter_map(|s| {
                    let (a, b) = (s.points.first()?, s.points.last()?);
                    Some(format!(
                        "{}: {} {}",
                        s.label,
                        change_text(a[1], b[1]),
                        f.unit
                    ))
                })
                .collect();
            if !published.is_empty() {
                paper = format!("{} ({})", f.shape, published.join("; "));
            }
        }
        Check::Ratio {
            experiment,
            metric,
            size,
            num_size,
            x,
            pairs,
            devices,
            paper: pv,
            paper_above_one,
            tolerance,
        } => {
            let pclass = if *paper_above_one {
                1
            } else {
                ratio_class(pv.unwrap_or(1.0), *tolerance)
            };
            let mut sels: Vec<(String, Option<String>, String, Option<String>)> = pairs
                .iter()
                .map(|[a, b]| (a.clone(), num_size.clone(), b.clone(), size.clone()))
                .collect();
            sels.extend(
                devices
                    .iter()
                    .map(|d| (d.clone(), num_size.clone(), d.clone(), size.clone())),
            );
            for (nd, ns, dd, ds) in sels {
                let ns = ns.or_else(|| ds.clone());
                let a = value(r, experiment, &nd, ns.as_deref(), *x, metric);
                let b = value(r, experiment, &dd, ds.as_deref(), *x, metric);
                let label = if nd == dd {
                    format!(
                        "{nd} {} / {}",
                        ns.as_deref().unwrap_or("-"),
                        ds.as_deref().unwrap_or("-")
                    )
                } else {
                    format!("{nd} / {dd}")
                };
                match (a, b) {
                    (Some(a), Some(b)) if b != 0.0 => {
                        let c = ratio_class(a / b, *tolerance);
                        ours.push((
                            format!("{label} = {:.2} ({} / {})", a / b, num(a), num(b)),
                            verdict_of(c == pclass),
                        ));
                    }
                    (Some(a), Some(_)) => ours.push((
                        format!("{label}: {} / 0, no ratio", num(a)),
                        Verdict::Differs,
                    )),
                    _ => ours.push((
                        format!("{label} not measured in this run"),
                        Verdict::NotMeasured,
                    )),
                }
            }
            paper = format!(
                "{} (a ratio {}; ours counts when it is too)",
                f.shape,
                ratio_words(pclass, *tolerance)
            );
        }
        Check::Order {
            experiment,
            metric,
            size,
            x,
            devices,
            min_rel,
            min_abs,
        } => {
            let vals: Vec<Option<f64>> = devices
                .iter()
                .map(|d| value(r, experiment, d, size.as_deref(), *x, metric))
                .collect();
            let missing: Vec<&str> = devices
                .iter()
                .zip(&vals)
                .filter(|(_, v)| v.is_none())
                .map(|(d, _)| d.as_str())
                .collect();
            if missing.is_empty() {
                let v: Vec<f64> = vals.iter().map(|v| v.unwrap_or(0.0)).collect();
                let ascending = v
                    .windows(2)
                    .all(|w| w[1] - w[0] > min_abs.max(min_rel * w[0].abs()));
                let s: Vec<String> = devices
                    .iter()
                    .zip(&v)
                    .map(|(d, v)| format!("{d} {}", num(*v)))
                    .collect();
                ours.push((
                    format!(
                        "{} ({} in that order)",
                        s.join(", "),
                        if ascending {
                            "ascending"
                        } else {
                            "not ascending"
                        }
                    ),
                    verdict_of(ascending),
                ));
            } else {
                ours.push((
                    format!("{} not measured in this run", missing.join(", ")),
                    Verdict::NotMeasured,
                ));
            }
        }
        Check::Constant {
            experiment,
            metric,
            devices,
            min_x,
            tolerance,
            paper: pv,
        } => {
            for d in devices {
                let v: Vec<(f64, f64)> = rows(r, experiment, d, None, metric)
                    .iter()
                    .filter(|row| min_x.is_none_or(|m| row.x.unwrap_or(0.0) >= m))
                    .filter_map(|row| Some((row.x.unwrap_or(0.0), row.metric(metric)?.median)))
                    .collect();
                if v.len() < 2 {
                    ours.push((
                        format!("{d} not measured in this run (fewer than two table sizes)"),
                        Verdict::NotMeasured,
                    ));
                    continue;
                }
                let mut ys: Vec<f64> = v.iter().map(|p| p.1).collect();
                ys.sort_by(f64::total_cmp);
                let med = crate::stats::Spread::of(&ys).median;
                let flat = med > 0.0 && ys.iter().all(|y| (y - med).abs() <= tolerance * med);
                let pts: Vec<String> = v
                    .iter()
                    .map(|p| format!("{}: {}", num(p.0), num(p.1)))
                    .collect();
                ours.push((
                    format!(
                        "{d} {} {} ({:.1}x the paper's; {})",
                        num(med),
                        f.unit,
                        med / pv,
                        pts.join(", ")
                    ),
                    verdict_of(flat),
                ));
            }
            paper = format!(
                "{} ({} {}; constant within {:.0}% counts as the same shape)",
                f.shape,
                num(*pv),
                f.unit,
                tolerance * 100.0
            );
        }
        Check::Value {
            experiment,
            metric,
            size,
            devices,
            paper: pv,
        } => {
            for d in devices {
                match value(r, experiment, d, size.as_deref(), None, metric) {
                    Some(v) => ours.push((
                        format!("{d} {} ({:.0}x the paper's {})", num(v), v / pv, num(*pv)),
                        Verdict::ForScale,
                    )),
                    None => ours.push((
                        format!("{d} not measured in this run"),
                        Verdict::NotMeasured,
                    )),
                }
            }
        }
        Check::Jump {
            experiment,
            metric,
            from,
            to,
            device,
            references,
            min_excess,
        } => {
            // Relative rise from `from` to `to` of device d.
            let rise = |d: &str| {
                let a = value(r, experiment, d, Some(from), None, metric)?;
                let b = value(r, experiment, d, Some(to), None, metric)?;
                (a > 0.0).then(|| (a, b, (b - a) / a))
            };
            let refs: Vec<(&String, (f64, f64, f64))> = references
                .iter()
                .filter_map(|d| Some((d, rise(d)?)))
                .collect();
            match rise(device) {
                Some((a, b, j)) if !refs.is_empty() => {
                    let worst = refs.iter().map(|x| x.1 .2).fold(f64::MIN, f64::max);
                    let others: Vec<String> = refs
                        .iter()
                        .map(|(d, (a, b, _))| format!("{d} {}", change_text(*a, *b)))
                        .collect();
                    ours.push((
                        format!(
                            "{device} {}{} from {from} to {to} B; {}",
                            change_text(a, b),
                            f_unit(metric),
                            others.join(", ")
                        ),
                        verdict_of(j > worst + min_excess),
                    ));
                }
                _ => ours.push((
                    format!(
                        "{device} (and one of {}) at {from} and {to} B not measured in this run",
                        references.join(", ")
                    ),
                    Verdict::NotMeasured,
                )),
            }
            paper = format!(
                "{} (ours counts when {device}'s rise exceeds every other's by more than {:.0} points)",
                f.shape,
                min_excess * 100.0
            );
        }
        Check::Zero {
            experiment,
            metric,
            size,
            devices,
        } => {
            for d in devices {
                let worst = rows(r, experiment, d, size.as_deref(), metric)
                    .iter()
                    .filter_map(|row| row.metric(metric))
                    .map(|m| m.max)
                    .reduce(f64::max);
                match worst {
                    Some(w) => ours.push((
                        format!("{d} {} {metric} at most", num(w)),
                        verdict_of(w == 0.0),
                    )),
                    None => ours.push((
                        format!("{d} not measured in this run"),
                        Verdict::NotMeasured,
                    )),
                }
            }
            paper = format!("{} (ours counts when {metric} is 0 every time)", f.shape);
        }
    }
    let measured: Vec<Verdict> = ours
        .iter()
        .map(|o| o.1)
        .filter(|v| *v != Verdict::NotMeasured)
        .collect();
    let verdict = if measured.is_empty() {
        Verdict::NotMeasured
    } else if measured.contains(&Verdict::ForScale) {
        Verdict::ForScale
    } else if measured.contains(&Verdict::Same) {
        Verdict::Same
    } else {
        Verdict::Differs
    };
    Comparison {
        id: f.id.clone(),
        what: f.what.clone(),
        source: f.source.clone(),
        paper,
        ours,
        verdict,
    }
}

/// Every figure of the run's study beside the run; empty for a run that is not a reproduce.
pub fn compare(p: &Papers, r: &RunResults) -> Vec<Comparison> {
    let Some(study) = study_of(r) else {
        return Vec::new();
    };
    p.figures
        .iter()
        .filter(|f| f.study == study)
        .map(|f| compare_figure(f, r))
        .collect()
}

/// Overlays of published series and the run's rows: (file name, title, svg).
pub fn plots(p: &Papers, r: &RunResults) -> Result<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    let Some(study) = study_of(r) else {
        return Ok(out);
    };
    for f in p.figures.iter().filter(|f| f.study == study) {
        let Some(spec) = &f.plot else { continue };
        let mut series: Vec<(String, Vec<(f64, f64)>)> = f
            .series
            .iter()
            .map(|s| {
                (
                    format!("paper: {}", s.label),
                    s.points.iter().map(|p| (p[0], p[1])).collect(),
                )
            })
            .collect();
        let mut mine: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for row in r
            .experiments
            .iter()
            .filter(|e| e.name == spec.experiment)
            .flat_map(|e| e.rows.iter())
            .filter(|row| spec.size.as_ref().is_none_or(|s| &row.size == s))
        {
            let (Some(x), Some(y)) = (row.x, row.metric(&spec.metric)) else {
                continue;
            };
            let name = format!("here: {}", row.device);
            match mine.iter_mut().find(|s| s.0 == name) {
                Some(s) => s.1.push((x, y.median)),
                None => mine.push((name, vec![(x, y.median)])),
            }
        }
        if mine.is_empty() {
            continue;
        }
        series.extend(mine);
        for s in &mut series {
            s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
            if spec.normalize {
                let first = s.1.first().map(|p| p.1).unwrap_or(0.0);
                if first > 0.0 {
                    for p in &mut s.1 {
                        p.1 = p.1 / first * 100.0;
                    }
                }
            }
        }
        let title = format!("{}: paper and this run", f.id);
        let svg = svg_plot(
            &title,
            &f.x,
            &spec.y_label,
            spec.log_x,
            SeriesLabelPosition::UpperLeft,
            &series,
        )?;
        if !svg.is_empty() {
            out.push((format!("paper-{}.svg", f.id), title, svg));
        }
    }
    Ok(out)
}

/// The markdown section for a reproduce run (empty otherwise).
pub fn markdown(cs: &[Comparison], study: &str) -> String {
    let mut s = String::new();
    if cs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\n## Beside the published figures ({})\n\n{}\n",
        study.to_uppercase(),
        INTRO
    );
    for c in cs {
        let _ = writeln!(s, "### {}\n", c.what);
        let _ = writeln!(s, "- Source: {}", c.source);
        let _ = writeln!(s, "- Paper: {}", c.paper);
        for (o, v) in &c.ours {
            let _ = writeln!(s, "- Here: {}", mine(o, *v));
        }
        let _ = writeln!(s, "- **Verdict: {}**\n", c.verdict.text());
    }
    s
}

/// One device's measurement and its verdict ("not measured" says it once).
pub fn mine(o: &str, v: Verdict) -> String {
    if v == Verdict::NotMeasured {
        o.to_string()
    } else {
        format!("{o} -> {}", v.text())
    }
}

/// What the section says before the figures.
pub const INTRO: &str = "The study's published figures (crates/lab/data/papers.json, from SEEDS.md) beside this run's rows. \
     The studies ran on hardware of 2003-2016: the shape is compared, not the numbers. Every \"here\" is computed from this \
     run's results.json; a row the comparison needs and the run lacks says \"not measured in this run\". A figure counts \
     as the same shape when at least one device shows it; each device's own verdict is listed.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Experiment;
    use crate::stats::Spread;

    fn row(exp_dev: &str, size: &str, x: Option<f64>, metric: &str, v: f64) -> Row {
        let mut r = Row {
            device: exp_dev.into(),
            size: size.into(),
            x,
            ..Row::default()
        };
        r.metrics.insert(metric.into(), Spread::of(&[v]));
        r
    }

    fn run(study: &str, exp: &str, rows: Vec<Row>) -> RunResults {
        RunResults {
            name: format!("reproduce-{study}"),
            experiments: vec![Experiment {
                name: exp.into(),
                rows,
                ..Experiment::default()
            }],
            ..RunResults::default()
        }
    }

    fn figure(id: &str) -> Figure {
        let p = load().unwrap();
        p.figures.into_iter().find(|f| f.id == id).unwrap()
    }

    #[test]
    fn data_file_parses_and_every_entry_has_a_source() {
        let p = load().unwrap();
        assert!(!p.about.is_empty());
        let mut ids = std::collections::BTreeSet::new();
        for f in &p.figures {
            assert!(ids.insert(f.id.as_str()), "{}: duplicate id", f.id);
            assert!(
                f.source.contains(&f.study.to_uppercase()) && f.source.len() > 20,
                "{}: source must name the study and where the number is",
                f.id
            );
            assert!(!f.unit.is_empty() && !f.x.is_empty() && !f.shape.is_empty());
            let (exp, metric) = f.check.reads();
            assert!(
                crate::report::columns(exp).iter().any(|c| c.0 == metric),
                "{}: {exp} has no column {metric}",
                f.id
            );
            for s in &f.series {
                assert!(!s.points.is_empty(), "{}: empty series", f.id);
            }
            if let Check::Trend {
                devices, series_of, ..
            } = &f.check
            {
                assert!(series_of.is_empty() || series_of.len() == devices.len());
                assert!(series_of.iter().all(|i| *i < f.series.len()), "{}", f.id);
            }
            if let Some(pl) = &f.plot {
                assert!(
                    !f.series.is_empty(),
                    "{}: a plot needs published points",
                    f.id
                );
                assert!(crate::report::columns(&pl.experiment)
                    .iter()
                    .any(|c| c.0 == pl.metric));
            }
        }
        for s in ["s1", "s2", "s3", "s4", "s5"] {
            assert!(
                p.figures.iter().any(|f| f.study == s),
                "{s} has no published figure"
            );
        }
    }

    #[test]
    fn trend_same_and_not_and_missing() {
        let f = figure("s5-delay-vs-entries-64");
        // kernel-nat44 rises 50%, xlat-nat44 stays flat, the rest were not run.
        let rows = vec![
            row("kernel-nat44", "64", Some(1.0), "latency_mean_us", 20.0),
            row("kernel-nat44", "64", Some(20000.0), "latency_mean_us", 30.0),
            row("xlat-nat44", "64", Some(1.0), "latency_mean_us", 20.0),
            row("xlat-nat44", "64", Some(20000.0), "latency_mean_us", 20.2),
        ];
        let c = compare_figure(&f, &run("s5", "latency-vs-sessions", rows));
        assert_eq!(c.ours[0].1, Verdict::Same);
        assert!(
            c.ours[0].0.contains("20 -> 30 (+50%) us from 1 to 20,000"),
            "{}",
            c.ours[0].0
        );
        assert_eq!(c.ours[1].1, Verdict::Differs);
        assert_eq!(c.ours[2].1, Verdict::NotMeasured);
        assert!(c.ours[2].0.contains("not measured in this run"));
        assert_eq!(c.verdict, Verdict::Same);
        assert!(c.paper.contains("+57%"), "{}", c.paper);
        // Only flat devices: not the same shape.
        let rows = vec![
            row("xlat-nat44", "64", Some(1.0), "latency_mean_us", 20.0),
            row("xlat-nat44", "64", Some(20000.0), "latency_mean_us", 19.0),
        ];
        let c = compare_figure(&f, &run("s5", "latency-vs-sessions", rows));
        assert_eq!(c.verdict, Verdict::Differs);
        // Nothing of the experiment: not measured.
        let c = compare_figure(&f, &run("s5", "throughput", vec![]));
        assert_eq!(c.verdict, Verdict::NotMeasured);
        assert!(c.line().ends_with("not measured in this run"));
    }

    #[test]
    fn zero_holds_when_nothing_failed() {
        let f = figure("s3-dns64-by-name");
        let r = run(
            "s3",
            "dns64",
            vec![
                row(
                    "xlat-nat64 + xlat-dns64",
                    "HTTP by name",
                    None,
                    "failed_requests",
                    0.0,
                ),
                row(
                    "xlat-nat64 + unbound-dns64",
                    "HTTP by name",
                    None,
                    "failed_requests",
                    3.0,
                ),
                // Another case's failures do not count.
                row(
                    "tayga-nat64 + xlat-dns64",
                    "HTTP by address",
                    None,
                    "failed_requests",
                    0.0,
                ),
            ],
        );
        let c = compare_figure(&f, &r);
        let v = |d: &str| c.ours.iter().find(|o| o.0.starts_with(d)).unwrap().1;
        assert_eq!(v("xlat-nat64 + xlat-dns64"), Verdict::Same);
        assert_eq!(v("xlat-nat64 + unbound-dns64"), Verdict::Differs);
        assert_eq!(v("tayga-nat64 + xlat-dns64"), Verdict::NotMeasured);
        assert!(c.paper.contains("TOTD"), "{}", c.paper);
        assert!(c.paper.contains("no DNS timing"), "{}", c.paper);
    }

    #[test]
    fn trend_without_published_points() {
        // S2 gives the order only: delay grows with payload.
        let f = figure("s2-owd-vs-payload");
        let r = run(
            "s2",
            "owd",
            vec![
                row("forward4", "50", None, "owd_us", 40.0),
                row("forward4", "1500", None, "owd_us", 80.0),
                row("forward6", "50", None, "owd_us", 80.0),
                row("forward6", "1500", None, "owd_us", 40.0),
            ],
        );
        let c = compare_figure(&f, &r);
        assert_eq!(c.ours[0].1, Verdict::Same, "{:?}", c.ours);
        assert_eq!(c.ours[1].1, Verdict::Differs, "{:?}", c.ours);
        assert_eq!(c.ours[2].1, Verdict::NotMeasured);
    }

    #[test]
    fn trend_compares_each_device_with_its_series() {
        // S4: default firewall vs 0 -> 54%, slimmed vs 0 -> 11.4%, no hooks vs a single 0.
        let f = figure("s4-loss-vs-load");
        let r = run(
            "s4",
            "loss-vs-load",
            vec![
                row("kernel-nat44-heavy", "64", Some(20.0), "loss_pct", 0.0),
                row("kernel-nat44-heavy", "64", Some(100.0), "loss_pct", 30.0),
                row("kernel-nat44", "64", Some(20.0), "loss_pct", 0.0),
                row("kernel-nat44", "64", Some(100.0), "loss_pct", 0.0),
                row("forward4", "64", Some(20.0), "loss_pct", 0.0),
                row("forward4", "64", Some(100.0), "loss_pct", 0.05),
            ],
        );
        let c = compare_figure(&f, &r);
        let v: Vec<Verdict> = c.ours.iter().map(|o| o.1).collect();
        assert_eq!(
            v,
            [Verdict::Same, Verdict::Differs, Verdict::Same],
            "{:?}",
            c.ours
        );
        assert!(c.ours[1].0.contains("[vs paper's slimmed netfilter]"));
        assert!(
            c.paper.contains("slimmed netfilter: 0 -> 11.4 % loss"),
            "{}",
            c.paper
        );
    }

    #[test]
    fn ratio_same_and_not() {
        let f = figure("s5-throughput-nat-vs-none");
        let mk = |nat: f64| {
            run(
                "s5",
                "throughput",
                vec![
                    row("forward4", "64", None, "throughput_pps", 100_000.0),
                    row("kernel-nat44", "64", None, "throughput_pps", nat),
                ],
            )
        };
        let c = compare_figure(&f, &mk(70_000.0));
        assert_eq!(c.ours[0].1, Verdict::Same);
        assert!(c.ours[0].0.contains("= 0.70"), "{}", c.ours[0].0);
        assert_eq!(c.verdict, Verdict::Same);
        let c = compare_figure(&f, &mk(99_000.0));
        assert_eq!(c.ours[0].1, Verdict::Differs);
        assert_eq!(c.verdict, Verdict::Differs);
        // Same device at two sizes (S5's CPU vs frame size).
        let f = figure("s5-cpu-vs-size");
        let r = run(
            "s5",
            "cpu",
            vec![
                row("xlat-nat44", "64", Some(1000.0), "dut_busy_pct", 50.0),
                row("xlat-nat44", "imix", Some(1000.0), "dut_busy_pct", 20.0),
                row("kernel-nat44", "64", Some(1000.0), "dut_busy_pct", 50.0),
                row("kernel-nat44", "imix", Some(1000.0), "dut_busy_pct", 51.0),
            ],
        );
        let c = compare_figure(&f, &r);
        assert_eq!(c.ours[0].1, Verdict::Differs, "{:?}", c.ours);
        assert_eq!(c.ours[1].1, Verdict::Same, "{:?}", c.ours);
    }

    #[test]
    fn s4_custom_hook_is_xlat_xdp_beside_slimmed_nat() {
        let f = figure("s4-custom-hook");
        let mk = |hook: f64| {
            run(
                "s4",
                "loss-vs-load",
                vec![
                    row("kernel-nat44", "64", Some(50.0), "rx_mbps", 10.0),
                    row("kernel-nat44", "64", Some(100.0), "rx_mbps", 88.0),
                    row("xlat-nat44-xdp", "64", Some(100.0), "rx_mbps", hook),
                ],
            )
        };
        // No faster than slimmed NAT: the paper's shape.
        let c = compare_figure(&f, &mk(87.0));
        assert_eq!(c.verdict, Verdict::Same, "{:?}", c.ours);
        assert!(c.ours[0]
            .0
            .starts_with("xlat-nat44-xdp / kernel-nat44 = 0.99"));
        // Faster by a quarter: not the paper's shape.
        assert_eq!(compare_figure(&f, &mk(110.0)).verdict, Verdict::Differs);
        // s4 without the hook's row: not measured.
        let r = run(
            "s4",
            "loss-vs-load",
            vec![row("kernel-nat44", "64", Some(100.0), "rx_mbps", 88.0)],
        );
        assert_eq!(compare_figure(&f, &r).verdict, Verdict::NotMeasured);
    }

    #[test]
    fn jump_of_one_device_against_the_others() {
        let f = figure("s2-tayga-anomaly-above-1750");
        let mk = |tayga_2000: f64| {
            run(
                "s2",
                "owd",
                vec![
                    row("tayga-nat64", "1750", None, "owd_us", 100.0),
                    row("tayga-nat64", "2000", None, "owd_us", tayga_2000),
                    row("xlat-nat64", "1750", None, "owd_us", 90.0),
                    row("xlat-nat64", "2000", None, "owd_us", 99.0),
                    row("forward6", "1750", None, "owd_us", 50.0),
                    row("forward6", "2000", None, "owd_us", 52.0),
                ],
            )
        };
        // TAYGA +50% where the others rise 10% and 4%: the anomaly.
        let c = compare_figure(&f, &mk(150.0));
        assert_eq!(c.verdict, Verdict::Same, "{:?}", c.ours);
        assert!(
            c.ours[0]
                .0
                .contains("tayga-nat64 100 -> 150 (+50%) us from 1750 to 2000 B"),
            "{}",
            c.ours[0].0
        );
        assert!(c.ours[0].0.contains("xlat-nat64 90 -> 99 (+10%)"));
        // +15%: within 10 points of xlat-nat64's +10%, no anomaly.
        assert_eq!(compare_figure(&f, &mk(115.0)).verdict, Verdict::Differs);
        // No reference device measured: not measured.
        let r = run(
            "s2",
            "owd",
            vec![
                row("tayga-nat64", "1750", None, "owd_us", 100.0),
                row("tayga-nat64", "2000", None, "owd_us", 150.0),
            ],
        );
        assert_eq!(compare_figure(&f, &r).verdict, Verdict::NotMeasured);
    }

    #[test]
    fn order_same_and_not() {
        let f = figure("s4-loss-at-100mbps");
        let mk = |a: f64, b: f64, c: f64| {
            run(
                "s4",
                "loss-vs-load",
                vec![
                    row("forward4", "64", Some(100.0), "loss_pct", a),
                    row("kernel-nat44", "64", Some(100.0), "loss_pct", b),
                    row("kernel-nat44-heavy", "64", Some(100.0), "loss_pct", c),
                    row("kernel-nat44-heavy", "64", Some(50.0), "loss_pct", 99.0),
                ],
            )
        };
        assert_eq!(
            compare_figure(&f, &mk(0.0, 10.0, 50.0)).verdict,
            Verdict::Same
        );
        // No loss anywhere at 100 Mb/s: the hooks' cost does not show.
        assert_eq!(
            compare_figure(&f, &mk(0.0, 0.0, 0.0)).verdict,
            Verdict::Differs
        );
        assert_eq!(
            compare_figure(&f, &mk(0.0, 20.0, 5.0)).verdict,
            Verdict::Differs
        );
    }

    #[test]
    fn constant_same_and_not() {
        let f = figure("s5-memory-per-entry");
        let mk = |small: f64, big: f64| {
            run(
                "s5",
                "memory-per-session",
                vec![
                    row("xlat-nat44", "64", Some(1.0), "bytes_per_session", 9e6),
                    row("xlat-nat44", "64", Some(2000.0), "bytes_per_session", small),
                    row("xlat-nat44", "64", Some(20000.0), "bytes_per_session", big),
                ],
            )
        };
        // The 1-session row (below min_x) is left out.
        assert_eq!(compare_figure(&f, &mk(300.0, 310.0)).verdict, Verdict::Same);
        assert_eq!(
            compare_figure(&f, &mk(300.0, 3000.0)).verdict,
            Verdict::Differs
        );
    }

    #[test]
    fn only_the_runs_study_and_overlay_plot() {
        let p = load().unwrap();
        let rows = vec![
            row("kernel-nat44", "64", Some(1.0), "latency_mean_us", 20.0),
            row("kernel-nat44", "64", Some(20000.0), "latency_mean_us", 30.0),
        ];
        let r = run("s5", "latency-vs-sessions", rows);
        let cs = compare(&p, &r);
        assert!(!cs.is_empty());
        assert!(cs.iter().all(|c| c.id.starts_with("s5-")));
        let md = markdown(&cs, "s5");
        assert!(md.contains("## Beside the published figures (S5)"));
        assert!(md.contains("not measured in this run"));
        let pl = plots(&p, &r).unwrap();
        assert_eq!(pl.len(), 1, "only the delay figure has rows here");
        assert!(pl[0].2.contains("paper: Cisco 7206VXR 64 B"));
        assert!(pl[0].2.contains("here: kernel-nat44"));
        let mut q = r.clone();
        q.name = "quick".into();
        assert!(compare(&p, &q).is_empty());
    }
}
