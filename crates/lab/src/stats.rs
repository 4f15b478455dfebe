//! Statistics over repetitions and the RFC 2544 throughput search.

use serde::{Deserialize, Serialize};

/// Min, median, max (and mean) of repeated measurements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub mean: f64,
}

impl Spread {
    /// Summary of `v` (NaNs ignored); all zeros for an empty input.
    pub fn of(v: &[f64]) -> Spread {
        let mut x: Vec<f64> = v.iter().copied().filter(|a| !a.is_nan()).collect();
        if x.is_empty() {
            return Spread::default();
        }
        x.sort_by(|a, b| a.total_cmp(b));
        let n = x.len();
        let median = if n % 2 == 1 {
            x[n / 2]
        } else {
            (x[n / 2 - 1] + x[n / 2]) / 2.0
        };
        Spread {
            n,
            min: x[0],
            median,
            max: x[n - 1],
            mean: x.iter().sum::<f64>() / n as f64,
        }
    }

    /// (max - min) / median, 0 when the median is 0.
    pub fn relative_range(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// One step of a search: the rate tried and whether loss stayed within the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub rate: f64,
    pub pass: bool,
}

/// The result of a throughput search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Search {
    /// Highest rate that passed (0 if none did).
    pub rate: f64,
    /// The top rate passed: the device may go faster than the search could offer.
    pub at_ceiling: bool,
    pub steps: Vec<Step>,
}

/// RFC 2544 26.1 throughput: the highest offered rate at which the device forwards every frame
/// (here: loss <= threshold, decided by `trial`). The first trial is at `max`; if it passes,
/// that is the answer. Otherwise a binary search between 0 and `max`, stopping when the interval
/// is narrower than `resolution` (a fraction of `max`) or after `max_steps` trials. `trial`
/// returns Ok(true) for "loss within threshold"; an error ends the search.
pub fn search<E>(
    max: f64,
    resolution: f64,
    max_steps: usize,
    mut trial: impl FnMut(f64) -> Result<bool, E>,
) -> Result<Search, E> {
    let mut steps = Vec::new();
    if max <= 0.0 || max_steps == 0 {
        return Ok(Search {
            rate: 0.0,
            at_ceiling: false,
            steps,
        });
    }
    let pass = trial(max)?;
    steps.push(Step { rate: max, pass });
    if pass {
        return Ok(Search {
            rate: max,
            at_ceiling: true,
            steps,
        });
    }
    let (mut lo, mut hi) = (0.0f64, max);
    let width = (resolution.max(1e-6)) * max;
    let mut best = 0.0;
    while steps.len() < max_steps && hi - lo > width {
        let mid = (lo + hi) / 2.0;
        let pass = trial(mid)?;
        steps.push(Step { rate: mid, pass });
        if pass {
            lo = mid;
            best = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Search {
        rate: best,
        at_ceiling: false,
        steps,
    })
}

/// Loss ratio within the threshold (loss and threshold as fractions, e.g. 0.001 = 0.1%).
pub fn passes(loss: f64, threshold: f64) -> bool {
    loss <= threshold + 1e-12
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_odd_even_empty() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.min, s.median, s.max, s.n), (1.0, 2.0, 3.0, 3));
        let s = Spread::of(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!(s.median, 2.5);
        assert_eq!(s.mean, 2.5);
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(Spread::of(&[f64::NAN, 5.0]).median, 5.0);
        assert!((Spread::of(&[9.0, 10.0, 11.0]).relative_range() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn search_finds_capacity_within_resolution() {
        for cap in [1.0, 12_345.0, 500_000.0, 999_999.0] {
            let r = search::<()>(1_000_000.0, 0.01, 20, |rate| Ok(rate <= cap)).unwrap();
            assert!(r.rate <= cap, "{} > {cap}", r.rate);
            assert!(
                cap - r.rate <= 10_000.0 + 1e-6,
                "cap {cap} found {}",
                r.rate
            );
            assert!(!r.at_ceiling);
        }
    }

    #[test]
    fn search_stops_at_ceiling_when_max_passes() {
        let r = search::<()>(100.0, 0.01, 20, |_| Ok(true)).unwrap();
        assert_eq!(r.rate, 100.0);
        assert!(r.at_ceiling);
        assert_eq!(r.steps.len(), 1);
    }

    #[test]
    fn search_respects_step_limit_and_errors() {
        let mut n = 0;
        let r = search::<()>(1000.0, 1e-9, 5, |_| {
            n += 1;
            Ok(false)
        })
        .unwrap();
        assert_eq!(n, 5);
        assert_eq!(r.rate, 0.0);
        assert_eq!(r.steps.len(), 5);
        let e = search(1000.0, 0.01, 5, |_| Err("boom"));
        assert_eq!(e, Err("boom"));
        assert_eq!(search::<()>(0.0, 0.01, 5, |_| Ok(true)).unwrap().rate, 0.0);
    }

    #[test]
    fn search_steps_are_monotone_bisections() {
        let r = search::<()>(800.0, 0.01, 20, |rate| Ok(rate <= 300.0)).unwrap();
        assert_eq!(r.steps[0].rate, 800.0);
        assert_eq!(r.steps[1].rate, 400.0);
        assert_eq!(r.steps[2].rate, 200.0);
        assert!(r.steps[2].pass);
    }

    #[test]
    fn pass_threshold() {
        assert!(passes(0.0, 0.0));
        assert!(passes(0.001, 0.001));
        assert!(!passes(0.0011, 0.001));
    }
}
