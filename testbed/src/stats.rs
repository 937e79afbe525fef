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

/// One-sided Wilcoxon signed-rank test, exact: how likely differences this far below zero
/// would be if each were as likely positive as negative (the arms' paired samples alike).
/// `diffs`: one difference per pair (e.g. the log of a round's ratio of the two arms); zeros
/// and NaN are left out, tied magnitudes share their mean rank. The sum of the positive
/// differences' ranks is compared with its value under every assignment of signs (2^n, n at
/// most 20). Small: the differences are measurably negative. 1 with no difference to judge.
pub fn signed_rank_lower_p(diffs: &[f64]) -> f64 {
    let mut d: Vec<f64> = diffs.iter().copied().filter(|x| *x != 0.0 && !x.is_nan()).collect();
    let n = d.len();
    if n == 0 || n > 20 {
        return 1.0;
    }
    d.sort_by(|a, b| a.abs().total_cmp(&b.abs()));
    let mut ranks = vec![0.0; n];
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && d[j + 1].abs() == d[i].abs() {
            j += 1;
        }
        // Ranks i+1..=j+1 share their mean.
        ranks[i..=j].fill((i + j + 2) as f64 / 2.0);
        i = j + 1;
    }
    let observed: f64 = d.iter().zip(&ranks).filter(|(x, _)| **x > 0.0).map(|(_, r)| r).sum();
    let as_low = (0u32..1 << n).filter(|signs| (0..n).filter(|k| signs & (1 << k) != 0).map(|k| ranks[k]).sum::<f64>() <= observed + 1e-9).count();
    as_low as f64 / f64::from(1u32 << n)
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
    fn signed_rank_one_sided_exact() {
        // All five lower: no positive rank, 1 assignment of 32 as low: p = 1/32.
        assert_eq!(signed_rank_lower_p(&[-1.0, -2.0, -3.0, -4.0, -5.0]), 1.0 / 32.0);
        // One higher, the smallest: W+ = 1, assignments with W+ <= 1 are {} and {1}: 2/32.
        assert_eq!(signed_rank_lower_p(&[1.0, -2.0, -3.0, -4.0, -5.0]), 2.0 / 32.0);
        // One higher, the largest: W+ = 5; {}, {1}..{5}, {1,2}, {1,3}, {1,4}, {2,3}: 10/32.
        assert_eq!(signed_rank_lower_p(&[-1.0, -2.0, -3.0, -4.0, 5.0]), 10.0 / 32.0);
        // Ties share their rank: +1, -1, -2 ranks 1.5, 1.5, 3; W+ = 1.5, assignments with
        // W+ <= 1.5: {}, {a}, {b}: 3/8 (ranked 1, 2, 3 as they come it would be 2/8).
        assert_eq!(signed_rank_lower_p(&[1.0, -1.0, -2.0]), 3.0 / 8.0);
        // Zeros and NaN left out; all higher: nothing says lower.
        assert_eq!(signed_rank_lower_p(&[0.0, f64::NAN, -1.0]), 0.5);
        assert_eq!(signed_rank_lower_p(&[1.0, 2.0, 3.0]), 1.0);
        assert_eq!(signed_rank_lower_p(&[]), 1.0);
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
