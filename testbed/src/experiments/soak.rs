//! soak: issue 24's one-hour soak. rlm inline with a rule in force and its records on, under
//! the light browsing load over the 80 ms / 2% WAN for an hour; the lab samples rlm each second
//! (its resident memory and open descriptors from /proc, /status's tables) and counts the fast
//! path's map entries itself every ten. Judged: no resource grows by more than 5% over the last
//! 40 minutes.

use serde_json::{Map, Value};

use super::{arm, arm_in, num, rlm_clean, scale, with_rlm, Checks, Experiment, Results, CLASS_RULES, WAN_80_2};
use crate::arm::ArmSpec;

/// The run (s): an hour; quick, six minutes (the same shape, to try the experiment).
pub fn soak_s(quick: bool) -> f64 {
    if quick {
        360.0
    } else {
        3600.0
    }
}

/// The share of the run judged: its last 40 minutes of 60, after the warm-up.
pub const JUDGED_SHARE: f64 = 40.0 / 60.0;
/// The judged span is cut into this many blocks, each one point of the trend (a minute each in
/// the full run): a block's mean smooths what a second's sample catches mid-burst.
pub const BLOCKS: usize = 40;
/// How much a resource may grow over the judged span, as a share of its mean there.
pub const GROWTH_MAX: f64 = 0.05;
/// A trend counts as growth only this many standard errors from flat: the blocks of a noisy
/// table wander by more than 5% of a small mean without growing.
pub const T_MIN: f64 = 3.0;
/// A resource whose mean over the judged span is under this is flat by construction (a table
/// empty but for an entry now and then).
pub const FLOOR: f64 = 1.0;
/// The share of the planned run the samples must span for the run to be judged.
pub const SPAN_MIN: f64 = 0.95;

/// The rule in force: LOW's SYNs dropped while HIGH's pageviews take over 2 s (on this WAN's
/// loss, a few windows a run).
pub fn soak_rules() -> String {
    format!("{CLASS_RULES}IF IP.SRC != 10.4.*.* AND RT.HIGH > 2.0s THEN DROP SYN\n")
}

pub struct Soak;

impl Experiment for Soak {
    fn name(&self) -> &'static str {
        "soak"
    }

    fn note(&self) -> &'static str {
        "Issue 24: rlm inline for an hour under the light browsing load over the 80 ms / 2% WAN, a SYN-dropping rule in force \
        and its records written; the lab samples its resident memory, descriptors and /status tables each second and counts \
        the fast path's map entries every ten. No resource may grow by more than 5% over the last 40 minutes (a trend over \
        40 block means, counted when 3 standard errors from flat)."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (light, _, _, cores) = scale(quick);
        let mut a = with_rlm(arm("soak", light, soak_s(quick), &WAN_80_2, false, cores), soak_rules(), &["--class-window", "30"]);
        if let Some(r) = a.rlm.as_mut() {
            r.count_maps = true;
        }
        vec![a]
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("soak_s".into(), soak_s(quick).into());
        m
    }

    fn check(&self, r: &Value, _all: &Results, c: &mut Checks) {
        let a = arm_in(r, "soak");
        let planned = num(&r["soak_s"]);
        let series = resources(&a);
        let span = series.iter().find(|s| s.name == "rss_kib").map_or(0.0, |s| s.points.last().map_or(0.0, |p| p.0) - s.points[0].0);
        let maps_counted = series.iter().filter(|s| s.name.starts_with("map_entries.")).count();
        let what = format!(
            "rlm sampled over {span:.0} s of the {planned:.0} s planned ({:.0}% at least), {} resources, {maps_counted} fast-path maps counted",
            SPAN_MIN * 100.0,
            series.len()
        );
        if !c.regime("soak", span >= SPAN_MIN * planned && planned > 0.0 && maps_counted > 0, what) {
            return;
        }
        rlm_clean(&mut c.v, "soak", &a);
        let t_end = span + series[0].points[0].0;
        let from = t_end - JUDGED_SHARE * planned;
        for s in &series {
            let g = growth(&s.points, from, t_end);
            let (ok, line) = judge(&s.name, &g);
            c.v.push((ok, format!("soak: {line}")));
        }
    }
}

/// One resource's samples: (Unix seconds, value).
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// The resources of an arm's samples: `rss_kib`, `fds`, each of `tables`, each of
/// `map_entries` (from the samples that counted them), in that order.
pub fn resources(a: &Value) -> Vec<Series> {
    let samples = a["rlm"]["samples"].as_array().cloned().unwrap_or_default();
    let mut out: Vec<Series> = Vec::new();
    let mut push = |name: String, t: f64, v: f64| match out.iter_mut().find(|s| s.name == name) {
        Some(s) => s.points.push((t, v)),
        None => out.push(Series { name, points: vec![(t, v)] }),
    };
    for s in &samples {
        let t = num(&s["unix_s"]);
        for key in ["rss_kib", "fds"] {
            if let Some(v) = s[key].as_f64() {
                push(key.to_string(), t, v);
            }
        }
        for group in ["tables", "map_entries"] {
            for (k, v) in s[group].as_object().into_iter().flatten() {
                if let Some(v) = v.as_f64() {
                    push(format!("{group}.{k}"), t, v);
                }
            }
        }
    }
    out
}

/// A resource's trend over a span: its mean there, how much its least-squares line over the
/// span's block means rises from the span's start to its end, and that rise's standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Growth {
    pub mean: f64,
    pub rise: f64,
    pub stderr: f64,
    pub first_block: f64,
    pub last_block: f64,
    pub blocks: usize,
    /// The 95th percentile of its samples in the span's first quarter, and in its last: its
    /// envelope.
    pub first_high: f64,
    pub last_high: f64,
}

/// The trend of `points` within [from, to]: their means in [`BLOCKS`] equal blocks (empty
/// blocks left out), and the line through them.
pub fn growth(points: &[(f64, f64)], from: f64, to: f64) -> Growth {
    let width = (to - from) / BLOCKS as f64;
    let mut sums = vec![(0.0, 0usize); BLOCKS];
    for &(t, v) in points.iter().filter(|(t, _)| *t >= from && *t <= to) {
        let b = (((t - from) / width) as usize).min(BLOCKS - 1);
        sums[b].0 += v;
        sums[b].1 += 1;
    }
    let xy: Vec<(f64, f64)> =
        sums.iter().enumerate().filter(|(_, (_, n))| *n > 0).map(|(i, (s, n))| ((i as f64 + 0.5) * width, s / *n as f64)).collect();
    let n = xy.len() as f64;
    let mean = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - mean)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let resid: f64 = xy.iter().map(|p| (p.1 - mean - slope * (p.0 - mx)).powi(2)).sum();
    let se_slope = if n > 2.0 && sxx > 0.0 { (resid / (n - 2.0) / sxx).sqrt() } else { f64::INFINITY };
    let span = to - from;
    let high_in = |a: f64, b: f64| {
        let mut v: Vec<f64> = points.iter().filter(|(t, _)| *t >= a && *t <= b).map(|p| p.1).collect();
        v.sort_by(f64::total_cmp);
        v.get((v.len() as f64 * 0.95) as usize).or(v.last()).copied().unwrap_or(f64::NAN)
    };
    Growth {
        first_high: high_in(from, from + span / 4.0),
        last_high: high_in(to - span / 4.0, to),
        mean,
        rise: slope * span,
        stderr: se_slope * span,
        first_block: xy.first().map_or(f64::NAN, |p| p.1),
        last_block: xy.last().map_or(f64::NAN, |p| p.1),
        blocks: xy.len(),
    }
}

/// Whether a resource held flat: its rise over the span at most [`GROWTH_MAX`] of its mean;
/// or within [`T_MIN`] standard errors of none (a table whose blocks wander, or a sawtooth: a
/// heap emptied of its stale entries each time they reach a bound) while its envelope, the 95th
/// percentile of its last quarter, is at most [`GROWTH_MAX`] over its first quarter's (which a
/// sawtooth whose teeth rise does not keep); or its mean under [`FLOOR`]. And the line that says
/// so.
pub fn judge(name: &str, g: &Growth) -> (bool, String) {
    let share = g.rise / g.mean;
    let t = g.rise / g.stderr;
    let envelope = g.last_high <= (1.0 + GROWTH_MAX) * g.first_high;
    let ok = g.mean < FLOOR || share <= GROWTH_MAX || (t < T_MIN && envelope);
    let high = format!("its envelope (p95) in the last quarter {:.0}, in the first {:.0}", g.last_high, g.first_high);
    let why = if g.mean < FLOOR {
        format!("mean {:.2} under {FLOOR}", g.mean)
    } else if share <= GROWTH_MAX {
        format!("at most {:.0}%", GROWTH_MAX * 100.0)
    } else if ok {
        format!("within {T_MIN} standard errors of flat, {high}")
    } else if t < T_MIN {
        format!("within {T_MIN} standard errors of flat but {high}: over {:.0}%", GROWTH_MAX * 100.0)
    } else {
        format!("over {:.0}% and {t:.1} standard errors from flat; {high}", GROWTH_MAX * 100.0)
    };
    (
        ok,
        format!(
            "{name} over the last {:.0}% of the run: {:+.2}% ({:+.1} ± {:.1} on a mean of {:.1}; first block {:.1}, last {:.1}, {} blocks): {why}",
            JUDGED_SHARE * 100.0,
            share * 100.0,
            g.rise,
            g.stderr,
            g.mean,
            g.first_block,
            g.last_block,
            g.blocks
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Samples each second for `secs`, a value of `f(t)`, noise from a fixed sequence.
    fn points(secs: usize, f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..secs).map(|t| (1000.0 + t as f64, f(t as f64))).collect()
    }

    /// A deterministic wobble in [-1, 1].
    fn wobble(t: f64) -> f64 {
        ((t * 12.9898).sin() * 43758.5453).fract()
    }

    #[test]
    fn flat_noisy_and_tiny_resources_pass_and_a_leak_fails() {
        let (from, to) = (1000.0 + 1200.0, 1000.0 + 3600.0);
        // Flat at 50,000 KiB with a 2% wobble: passes.
        let flat = growth(&points(3600, |t| 50_000.0 * (1.0 + 0.02 * wobble(t))), from, to);
        assert!(judge("rss_kib", &flat).0, "{:?}", judge("rss_kib", &flat));
        assert!(flat.rise.abs() < 0.01 * 50_000.0, "{flat:?}");
        // A leak of 10% over the last 40 minutes: fails, its line says by how much.
        let leak = growth(&points(3600, |t| 50_000.0 * (1.0 + 0.10 * (t - 1200.0).max(0.0) / 2400.0)), from, to);
        let (ok, line) = judge("rss_kib", &leak);
        assert!(!ok, "{line}");
        assert!(line.starts_with("rss_kib over the last 67% of the run: +9."), "{line}");
        // 4% over the span: passes, however clear.
        let slow = growth(&points(3600, |t| 1000.0 * (1.0 + 0.04 * t / 3600.0)), from, to);
        assert!(judge("x", &slow).0);
        // A table of a few entries that wander (no trend but noise bigger than 5% of its mean):
        // within its standard errors, passes; the same with a real doubling fails.
        let wander = growth(&points(3600, |t| 4.0 + 3.0 * wobble(t * 0.01)), from, to);
        assert!(judge("tables.pending_acts", &wander).0, "{:?}", judge("tables.pending_acts", &wander));
        let doubling = growth(&points(3600, |t| 4.0 + 4.0 * t / 3600.0 + 0.5 * wobble(t)), from, to);
        assert!(!judge("tables.pending_acts", &doubling).0, "{:?}", judge("tables.pending_acts", &doubling));
        // A heap emptied of its stale entries each time it reaches 4,096 (a tooth every 9
        // minutes): whatever its line says, its highest does not grow; the same teeth rising 10%
        // over the span fail.
        let saw = |rise: f64| growth(&points(3600, |t| (1.0 + rise * t / 3600.0) * (200.0 + 3900.0 * ((t + 100.0) % 540.0) / 540.0)), from, to);
        assert!(judge("tables.timers", &saw(0.0)).0, "{:?}", judge("tables.timers", &saw(0.0)));
        assert!(!judge("tables.timers", &saw(0.15)).0, "{:?}", judge("tables.timers", &saw(0.15)));
        // Empty but for an entry now and then: under the floor.
        let empty = growth(&points(3600, |t| if t as u64 % 600 == 599 { 1.0 } else { 0.0 }), from, to);
        assert!(judge("tables.pending_acts", &empty).0);
    }

    /// A result of the soak: `secs` samples of rss growing by `rss_growth` over the run, the
    /// fast path's map counted every ten.
    fn result(secs: usize, planned: f64, rss_growth: f64) -> Value {
        let samples: Vec<Value> = (0..secs)
            .map(|t| {
                let mut s = json!({"unix_s": 1000.0 + t as f64, "rss_kib": 60_000.0 * (1.0 + rss_growth * t as f64 / secs as f64), "fds": 40,
                    "tables": {"connections": 100.0 + 10.0 * wobble(t as f64), "timers": 300}});
                if t % 10 == 0 {
                    s["map_entries"] = json!({"handshakes": 70, "syn_verdicts": 30});
                }
                s
            })
            .collect();
        json!({"soak_s": planned, "arms": [{"name": "soak", "rlm": {"samples": samples, "clean_exit": true, "installed": true,
            "exit_code": 0, "rules_left": [], "reports_lost": 0.0}}]})
    }

    fn check(r: &Value) -> Vec<(bool, String)> {
        let mut c = Checks::default();
        Soak.check(r, &Results::new(), &mut c);
        c.v
    }

    #[test]
    fn every_resource_is_judged_once_the_run_spanned_its_hour() {
        let v = check(&result(3600, 3600.0, 0.0));
        assert!(v.iter().all(|(ok, _)| *ok), "{v:#?}");
        for name in ["rss_kib", "fds", "tables.connections", "tables.timers", "map_entries.handshakes", "map_entries.syn_verdicts"] {
            assert!(v.iter().any(|(_, l)| l.starts_with(&format!("soak: {name} over the last"))), "{name}: {v:#?}");
        }
        // RSS up 12% over the hour (8% over the judged 40 minutes): fails.
        let v = check(&result(3600, 3600.0, 0.12));
        assert!(!v.iter().find(|(_, l)| l.starts_with("soak: rss_kib")).unwrap().0, "{v:#?}");
        // A run cut short is not judged.
        let v = check(&result(3000, 3600.0, 0.0));
        assert_eq!(v.len(), 1, "{v:#?}");
        assert!(!v[0].0 && v[0].1.starts_with("soak: regime not reached: rlm sampled over 2999 s of the 3600 s planned"), "{v:#?}");
    }

    #[test]
    fn one_arm_with_its_rule_its_records_and_the_maps_counted() {
        for quick in [true, false] {
            let arms = Soak.arms(quick);
            assert_eq!(arms.len(), 1);
            let r = arms[0].rlm.as_ref().unwrap();
            assert!(r.count_maps && r.records);
            assert_eq!(r.rules, soak_rules());
            assert_eq!(arms[0].duration_s, soak_s(quick));
        }
    }
}
