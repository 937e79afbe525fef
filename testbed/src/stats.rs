//! The lab's own arithmetic. The lab judges the appliance, so its ground-truth statistics
//! (means, percentiles, the share of pageviews past 3 s) are computed here, never with the
//! appliance's code (`rlm::analyze`): a bug there must not be able to hide itself.

use serde::{Deserialize, Serialize};

/// Nearest-rank percentile (0 < p ≤ 100) of values in any order: the smallest value such that
/// at least p% of the values are at most it. 0 for no values.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    percentile_sorted(&v, p)
}

/// [`percentile`] of values already sorted ascending.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    // rank = ⌈p/100 · n⌉ in 1..=n; computed in integers where p is a whole percent, so that
    // 95% of 20 is rank 19 and not 19.000000000000004 rounded up to 20.
    let scaled = p * n as f64;
    let rank = if (scaled - scaled.round()).abs() < 1e-9 { (scaled.round() as usize).div_ceil(100) } else { (scaled / 100.0).ceil() as usize };
    sorted[rank.clamp(1, n) - 1]
}

/// The arithmetic mean; 0 for no values.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    // Kahan summation: a million small response times add up without drift.
    let (mut sum, mut c) = (0.0f64, 0.0f64);
    for &x in values {
        let y = x - c;
        let t = sum + y;
        c = (t - sum) - y;
        sum = t;
    }
    sum / values.len() as f64
}

/// The median (nearest rank, so always one of the values).
pub fn median(values: &[f64]) -> f64 {
    percentile(values, 50.0)
}

/// One-sided Mann-Whitney U test: how likely `lower`'s values would fall this far below
/// `base`'s if both were drawn from one distribution (the normal approximation, tied values
/// given their mean rank and the variance corrected for them, with a continuity correction).
/// Small: `lower` is measurably lower than `base`. 1 when either is empty or every value ties.
pub fn mann_whitney_lower_p(base: &[f64], lower: &[f64]) -> f64 {
    let (n1, n2) = (base.len() as f64, lower.len() as f64);
    if base.is_empty() || lower.is_empty() {
        return 1.0;
    }
    let mut all: Vec<(f64, bool)> = base.iter().map(|&x| (x, true)).chain(lower.iter().map(|&x| (x, false))).collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = all.len();
    let (mut rank_sum_base, mut ties, mut i) = (0.0, 0.0, 0);
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        // Ranks i+1..=j+1 share their mean.
        let (t, mean_rank) = ((j - i + 1) as f64, (i + j + 2) as f64 / 2.0);
        rank_sum_base += mean_rank * all[i..=j].iter().filter(|v| v.1).count() as f64;
        ties += t * t * t - t;
        i = j + 1;
    }
    let u = rank_sum_base - n1 * (n1 + 1.0) / 2.0;
    let nf = n as f64;
    let var = n1 * n2 / 12.0 * ((nf + 1.0) - ties / (nf * (nf - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    let z = (u - n1 * n2 / 2.0 - 0.5) / var.sqrt();
    0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
}

/// Response-time statistics of a set of pageviews, as result.json carries them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PvStats {
    pub count: usize,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p95_s: f64,
    /// Share of the pageviews that took longer than 3 s (004's spike after a lost SYN).
    pub gt3s_frac: f64,
    /// Pageviews whose container or any connection failed.
    pub failed: usize,
}

impl PvStats {
    pub fn of(rts: &[f64], failed: usize) -> PvStats {
        let mut v = rts.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        PvStats {
            count: n,
            mean_s: mean(&v),
            p50_s: percentile_sorted(&v, 50.0),
            p95_s: percentile_sorted(&v, 95.0),
            gt3s_frac: if n == 0 { 0.0 } else { v.iter().filter(|x| **x > 3.0).count() as f64 / n as f64 },
            failed,
        }
    }
}

/// Mean and tail of a set of durations (server times, connect times), in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(values: &[f64]) -> Summary {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        Summary {
            count: v.len(),
            mean: mean(&v),
            p50: percentile_sorted(&v, 50.0),
            p95: percentile_sorted(&v, 95.0),
            p99: percentile_sorted(&v, 99.0),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mann_whitney_one_sided() {
        // Five values all below five others: U = 25, its mean 12.5 and deviation
        // sqrt(25 * 11 / 12) = 4.787, z = (12.5 - 0.5) / 4.787 = 2.507, p = 0.0061 (the exact
        // test's 1/252 = 0.004).
        let (hi, lo) = ([6.0, 7.0, 8.0, 9.0, 10.0], [1.0, 2.0, 3.0, 4.0, 5.0]);
        let p = mann_whitney_lower_p(&hi, &lo);
        assert!((p - 0.0061).abs() < 0.0002, "{p}");
        // The other way round: no evidence at all that the higher values are lower.
        assert!(mann_whitney_lower_p(&lo, &hi) > 0.99);
        // Interleaved alike: U at its mean, p just over one half (the continuity correction).
        let p = mann_whitney_lower_p(&[1.0, 3.0, 5.0, 7.0], &[2.0, 4.0, 6.0, 8.0]);
        assert!((0.5..0.9).contains(&p), "{p}");
        // Ties: 1, 1, 2, 2 against 2, 3: ranks 1.5, 1.5, 4, 4 | 4, 6; U = 11 - 10 = 1 of 8,
        // variance 8/12 * (7 - (6 + 24)/30) = 4, z = (1 - 4 - 0.5) / 2 = -1.75: p = 0.96.
        let p = mann_whitney_lower_p(&[1.0, 1.0, 2.0, 2.0], &[2.0, 3.0]);
        assert!((p - 0.9599).abs() < 0.001, "{p}");
        // Nothing to judge.
        assert_eq!(mann_whitney_lower_p(&[], &[1.0]), 1.0);
        assert_eq!(mann_whitney_lower_p(&[2.0, 2.0], &[2.0]), 1.0);
    }

    #[test]
    fn nearest_rank_percentiles() {
        // The textbook example (Wikipedia, "Percentile", nearest-rank method).
        let v = [15.0, 20.0, 35.0, 40.0, 50.0];
        assert_eq!(percentile(&v, 5.0), 15.0);
        assert_eq!(percentile(&v, 30.0), 20.0);
        assert_eq!(percentile(&v, 40.0), 20.0);
        assert_eq!(percentile(&v, 50.0), 35.0);
        assert_eq!(percentile(&v, 100.0), 50.0);
        // Order does not matter; NaNs are ignored.
        assert_eq!(percentile(&[50.0, f64::NAN, 15.0, 40.0, 35.0, 20.0], 50.0), 35.0);
        // 1..=20: the 95th is the 19th value exactly (no float round-up to the 20th).
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 95.0), 19.0);
        assert_eq!(percentile(&v, 50.0), 10.0);
        assert_eq!(percentile(&v, 99.0), 20.0);
        // 1..=100: the p-th percentile is p.
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        for p in [1.0, 10.0, 50.0, 95.0, 99.0, 100.0] {
            assert_eq!(percentile(&v, p), p);
        }
        assert_eq!(percentile(&v, 0.0), 1.0, "rank clamps to the first value");
        assert_eq!(percentile(&[], 50.0), 0.0);
        assert_eq!(percentile(&[7.0], 95.0), 7.0);
        assert_eq!(median(&[3.0, 1.0, 2.0, 4.0]), 2.0);
    }

    #[test]
    fn means() {
        assert_eq!(mean(&[]), 0.0);
        assert_eq!(mean(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        // A million 0.1 s pageviews average to 0.1 s, not 0.1 plus accumulated rounding.
        let v = vec![0.1; 1_000_000];
        assert!((mean(&v) - 0.1).abs() < 1e-15, "{}", mean(&v));
    }

    #[test]
    fn pageview_stats() {
        let s = PvStats::of(&[0.5, 4.0, 1.0, 3.0, 3.5], 2);
        assert_eq!(s.count, 5);
        assert_eq!(s.mean_s, 2.4);
        assert_eq!(s.p50_s, 3.0);
        assert_eq!(s.p95_s, 4.0);
        assert_eq!(s.gt3s_frac, 0.4, "3.0 itself is not past 3 s");
        assert_eq!(s.failed, 2);
        assert_eq!(PvStats::of(&[], 0), PvStats::default());
        let d = Summary::of(&[0.002, 0.001, 0.003, 0.010]);
        assert_eq!((d.count, d.p50, d.p99, d.max), (4, 0.002, 0.010, 0.010));
        assert!((d.mean - 0.004).abs() < 1e-12);
    }
}
