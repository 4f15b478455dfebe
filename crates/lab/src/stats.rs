//! Statistics over repetitions, the RFC 2544 throughput search, and Welch's t-test (two
//! samples with unequal variances; the Student-t CDF through the regularized incomplete beta
//! function) for the significance of a difference between two devices.

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

/// Welch's t-test of two independent samples with unequal variances (Welch 1947): t, the
/// Welch-Satterthwaite degrees of freedom, and the two-sided p-value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Welch {
    pub t: f64,
    pub df: f64,
    /// Two-sided: the probability of a |t| at least this large if the means were equal.
    pub p: f64,
    pub mean_a: f64,
    pub mean_b: f64,
    /// Sample standard deviations (n - 1 in the denominator).
    pub sd_a: f64,
    pub sd_b: f64,
    pub n_a: usize,
    pub n_b: usize,
}

/// Mean and sample variance (n - 1), NaNs ignored.
fn mean_var(v: &[f64]) -> (usize, f64, f64) {
    let x: Vec<f64> = v.iter().copied().filter(|a| !a.is_nan()).collect();
    let n = x.len();
    if n == 0 {
        return (0, 0.0, 0.0);
    }
    let m = x.iter().sum::<f64>() / n as f64;
    let var = if n > 1 {
        x.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    (n, m, var)
}

/// Welch's t-test of `a` against `b`. None when either sample has fewer than two values or
/// both have no spread at all (the statistic is undefined).
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    let (na, ma, va) = mean_var(a);
    let (nb, mb, vb) = mean_var(b);
    if na < 2 || nb < 2 {
        return None;
    }
    let (sa, sb) = (va / na as f64, vb / nb as f64);
    let se2 = sa + sb;
    if se2 <= 0.0 || !se2.is_finite() {
        return None;
    }
    let t = (ma - mb) / se2.sqrt();
    // Welch-Satterthwaite.
    let df = se2 * se2 / (sa * sa / (na - 1) as f64 + sb * sb / (nb - 1) as f64);
    Some(Welch {
        t,
        df,
        p: t_two_sided_p(t, df),
        mean_a: ma,
        mean_b: mb,
        sd_a: va.sqrt(),
        sd_b: vb.sqrt(),
        n_a: na,
        n_b: nb,
    })
}

/// Two-sided p-value of Student's t with `df` degrees of freedom (df > 0, not necessarily an
/// integer): P(|T| >= |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2).
pub fn t_two_sided_p(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return 0.0;
    }
    reg_inc_beta(df / 2.0, 0.5, df / (df + t * t)).clamp(0.0, 1.0)
}

/// Student's t cumulative distribution function P(T <= t).
pub fn t_cdf(t: f64, df: f64) -> f64 {
    let tail = t_two_sided_p(t, df) / 2.0;
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// ln Gamma(x) for x > 0 (Lanczos, g = 7, nine coefficients; relative error below 1e-13).
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Gamma(x) Gamma(1 - x) = pi / sin(pi x).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1: the continued
/// fraction (modified Lentz), on the side of the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where
/// it converges fast.
pub fn reg_inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// The continued fraction of I_x(a, b) (bounded: at most 500 terms).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let clamp = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / clamp(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=500 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / clamp(1.0 + aa * d);
        c = clamp(1.0 + aa / c);
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / clamp(1.0 + aa * d);
        c = clamp(1.0 + aa / c);
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b} (tolerance {tol})");
    }

    #[test]
    fn ln_gamma_known_values() {
        close(ln_gamma(1.0), 0.0, 1e-13);
        close(ln_gamma(2.0), 0.0, 1e-13);
        close(ln_gamma(5.0), 24f64.ln(), 1e-12);
        close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), 1e-12);
        close(ln_gamma(10.5), 1_133_278.388_7f64.ln(), 1e-9);
    }

    #[test]
    fn student_t_closed_forms() {
        // df = 1 is Cauchy: F(t) = 1/2 + atan(t) / pi; df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2)).
        for t in [-30.0, -3.0, -1.0, -0.2, 0.0, 0.7, 2.5, 12.0] {
            close(
                t_cdf(t, 1.0),
                0.5 + f64::atan(t) / std::f64::consts::PI,
                1e-12,
            );
            close(t_cdf(t, 2.0), 0.5 + t / (2.0 * (2.0 + t * t).sqrt()), 1e-12);
        }
        // Reference values by numerical integration of the t density (Simpson, 200,000
        // intervals, python3 math.lgamma), independent of the incomplete beta function.
        close(t_two_sided_p(2.228, 10.0), 0.050_011_771_817, 1e-9);
        close(t_two_sided_p(2.0, 5.0), 0.101_939_478_830, 1e-9);
        close(t_two_sided_p(-0.5, 3.3), 0.648_535_076_400, 1e-9);
        close(t_two_sided_p(4.5, 1.7), 0.061_558_210_026, 1e-9);
        assert_eq!(t_two_sided_p(0.0, 7.0), 1.0);
        assert_eq!(t_two_sided_p(f64::INFINITY, 7.0), 0.0);
        assert!(t_two_sided_p(1.0, 0.0).is_nan());
        // The incomplete beta function's symmetry and ends.
        close(
            reg_inc_beta(2.5, 0.5, 0.3),
            1.0 - reg_inc_beta(0.5, 2.5, 0.7),
            1e-14,
        );
        assert_eq!(reg_inc_beta(3.0, 4.0, 0.0), 0.0);
        assert_eq!(reg_inc_beta(3.0, 4.0, 1.0), 1.0);
        // I_x(1, 1) = x.
        close(reg_inc_beta(1.0, 1.0, 0.37), 0.37, 1e-14);
    }

    #[test]
    fn welch_matches_reference() {
        // Wikipedia's Welch's t-test example 2 (15 and 15 values): t -2.46, df 24.99, p 0.021.
        let a = [
            27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7,
            21.4,
        ];
        let b = [
            27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5,
            24.4,
        ];
        let w = welch(&a, &b).unwrap();
        close(w.t, -2.455_356_398_286, 1e-9);
        close(w.df, 24.988_529_290_231, 1e-9);
        close(w.p, 0.021_378_001_463, 1e-9);
        // Unequal sizes and variances (python3: t and df by the formulas, p by numerical
        // integration as in the test above).
        let w = welch(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap();
        close(w.t, -1.897_366_596_101, 1e-9);
        close(w.df, 5.882_352_941_176, 1e-9);
        close(w.p, 0.107_531_194_931, 1e-9);
        let w = welch(&[61.2, 61.9, 61.4], &[61.0, 61.8, 61.3, 61.5]).unwrap();
        close(w.t, 0.373_543_683_819, 1e-9);
        close(w.df, 4.257_099_002_302, 1e-9);
        close(w.p, 0.726_608_253_193, 1e-9);
        assert_eq!((w.n_a, w.n_b), (3, 4));
        // Swapping the samples flips t and keeps p.
        let v = welch(&[61.0, 61.8, 61.3, 61.5], &[61.2, 61.9, 61.4]).unwrap();
        close(v.t, -w.t, 1e-12);
        close(v.p, w.p, 1e-12);
        // Undefined: one value a side, or no spread on either.
        assert!(welch(&[1.0], &[2.0, 3.0]).is_none());
        assert!(welch(&[2.0, 2.0], &[3.0, 3.0]).is_none());
        // One side without spread still tests.
        assert!(welch(&[2.0, 2.0], &[3.0, 3.5]).is_some());
    }

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
