//! syn-throttle: 004 Figure 15, HIGH held at its target under the heavy load by dropping LOW's
//! SYNs.

use serde_json::{Map, Value};

use super::{
    arm, arm_in, class_mean, class_mean_steady, farm_busy, hold_tolerance, live_fidelity_check, num, on_heavy_farm, rlm_clean, scale, with_rlm,
    Checks, Experiment, Results, CLASS_RULES, OVERLOADED_BUSY, WAN_80_2,
};
use crate::arm::ArmSpec;

/// syn-throttle's target for HIGH's mean response time (s): unmanaged HIGH misses it under the
/// heavy load; shedding LOW's SYNs brings HIGH down to it. Calibrated (quick): unmanaged HIGH
/// 2.3 s at heavy load, HIGH alone (every LOW SYN dropped) about 0.9 s, so 1.5 s is in the
/// middle of what the rule can reach. The full scale's target is not calibrated by a run.
pub fn throttle_target_s(quick: bool) -> f64 {
    if quick {
        1.5
    } else {
        2.0
    }
}

/// The run per arm (s) of syn-throttle's heavy load with rlm, and the class window (s) of its rlm.
pub fn throttle_run(quick: bool) -> (f64, &'static str) {
    // syn-throttle's heavy runs with rlm (fast-syn and think-gap repeat them). The quick run is
    // short: a 10 s class window lets the rule react within it.
    let (_, _, dur, _) = scale(quick);
    if quick {
        (60.0, "10")
    } else {
        (dur, "30")
    }
}

/// 004 Figure 15: LOW's SYNs dropped while HIGH's mean response time is above `target_s`.
pub fn throttle_rules(target_s: f64) -> String {
    format!("{CLASS_RULES}IF IP.SRC != 10.4.*.* AND RT.HIGH > {target_s:.1}s THEN DROP SYN\n")
}

/// The share of the truth's pageviews rlm's live pageviews must match in the managed arm: under
/// the heavy load, with LOW's SYNs dropped, 95% (issue 23; 98% in fidelity's light live arms).
pub const THROTTLE_LIVE_MIN_MATCHED: f64 = 0.95;

pub struct SynThrottle;

impl Experiment for SynThrottle {
    fn name(&self) -> &'static str {
        "syn-throttle"
    }

    fn note(&self) -> &'static str {
        "004 Figure 15: under the heavy load over the 80 ms / 2% WAN, rlm drops the SYNs of LOW (every client \
        outside 10.4/16) while HIGH's mean response time is above the target, so that HIGH meets it and LOW pays."
    }

    /// Its rule holds a class at a target under the heavy load: a calibration of the last minutes.
    fn calibration_max_age(&self) -> Option<std::time::Duration> {
        Some(super::HOLD_CALIBRATION_MAX_AGE)
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (_, heavy, _, cores) = scale(quick);
        let target = throttle_target_s(quick);
        let (tdur, window) = throttle_run(quick);
        let heavy_rlm = |name: &str, rules: String| with_rlm(arm(name, heavy, tdur, &WAN_80_2, false, cores), rules, &["--class-window", window]);
        // The full run's farm is bound by its CPU, as 004's heavy load (see `heavy_farm`).
        [arm("unmanaged", heavy, tdur, &WAN_80_2, false, cores), heavy_rlm("syn-throttle", throttle_rules(target))]
            .into_iter()
            .map(|a| on_heavy_farm(a, quick))
            .collect()
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("target_s".into(), throttle_target_s(quick).into());
        m
    }

    /// 004 Figure 15: HIGH held at the target by dropping LOW's SYNs; LOW pays.
    fn check(&self, st: &Value, _all: &Results, c: &mut Checks) {
        judge(self.name(), st, c)
    }
}

/// syn-throttle's checks of result `st` of experiment `exp` (syn-throttle, or its twin over
/// HTTPS), whose arms are `unmanaged` and `syn-throttle`.
pub fn judge(exp: &str, st: &Value, c: &mut Checks) {
    let target = num(&st["target_s"]);
    let (un_high, th_high) = (class_mean(st, "unmanaged", "HIGH"), class_mean(st, "syn-throttle", "HIGH"));
    let (un_low, th_low) = (class_mean(st, "unmanaged", "LOW"), class_mean(st, "syn-throttle", "LOW"));
    let a = arm_in(st, "syn-throttle");
    let drops = num(&a["rlm"]["syn_drops"]["LOW"]);
    let busy = farm_busy(&arm_in(st, "unmanaged"));
    let reached = un_high > target && busy >= OVERLOADED_BUSY && drops > 0.0;
    let what = format!(
        "unmanaged, the farm {:.0}% busy and HIGH's mean {un_high:.2} s against the target {target:.2} s; the rule dropped {drops} LOW SYNs",
        busy * 100.0
    );
    if !c.regime(exp, reached, what) {
        return;
    }
    let v = &mut c.v;
    // The hold, judged once the browsers have all started (see think-gap).
    let steady = class_mean_steady(st, "syn-throttle", "HIGH");
    let tol = hold_tolerance(st);
    v.push((
        (steady - target).abs() <= tol * target,
        format!("{exp}: HIGH mean {steady:.2} s after the ramp (whole run {th_high:.2} s) within {:.0}% of the target {target:.2} s", tol * 100.0),
    ));
    v.push((th_low > un_low, format!("{exp}: LOW pays: mean {th_low:.2} s against {un_low:.2} s unmanaged")));
    rlm_clean(v, exp, &a);
    live_fidelity_check(v, exp, &a, THROTTLE_LIVE_MIN_MATCHED);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::testing::synthetic_arms;

    #[test]
    fn judged_only_once_the_regime_is_reached() {
        let arm = |name: &str, high: f64, busy_cpu_s: f64, drops: f64| {
            serde_json::json!({"name": name, "duration_s": 45.0, "config": {"farm": {"cpu_cores": 0.12}},
                "farm_usage": {"load_cpu_s": busy_cpu_s},
                "pageviews": {"by_class": {"HIGH": {"mean_s": high}, "LOW": {"mean_s": 3.0}}},
                "rlm": {"syn_drops": {"LOW": drops}}})
        };
        let result = |un_high: f64, busy_cpu_s: f64| serde_json::json!({"target_s": 1.5, "arms": [arm("unmanaged", un_high, busy_cpu_s, 0.0), arm("syn-throttle", 1.5, 5.0, 12.0)]});
        let check = |r: &Value| {
            let mut c = Checks::default();
            SynThrottle.check(r, &Results::new(), &mut c);
            c.v
        };
        // Overloaded: the farm busy for 5.4 of its 0.12 x 45 s, HIGH over its target.
        let v = check(&result(2.3, 5.4));
        assert!(v[0].0 && v[0].1.starts_with("syn-throttle: regime reached: unmanaged, the farm 100% busy"), "{v:?}");
        assert!(v.len() > 3, "{v:?}");
        // A fast machine: HIGH meets its target unmanaged, the farm idles: one failing line.
        let v = check(&result(0.9, 1.0));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(!v[0].0 && v[0].1.starts_with("syn-throttle: regime not reached: unmanaged, the farm 19% busy"), "{v:?}");
    }

    #[test]
    fn live_fidelity_judged_in_the_managed_arm() {
        let arm = |name: &str, high: f64, busy_cpu_s: f64, drops: f64| {
            serde_json::json!({"name": name, "duration_s": 45.0, "config": {"farm": {"cpu_cores": 0.12}},
                "farm_usage": {"load_cpu_s": busy_cpu_s},
                "pageviews": {"by_class": {"HIGH": {"mean_s": high}, "LOW": {"mean_s": 3.0}}},
                "rlm": {"syn_drops": {"LOW": drops}}})
        };
        let live = |matched: u64, p90: f64| {
            let mut managed = arm("syn-throttle", 1.5, 5.0, 800.0);
            managed["live_fidelity"] = serde_json::json!({
                "all": {"truth_pageviews": 2000, "matched": matched, "median_rel_err": 0.006, "p90_rel_err": p90},
                "acted": {"truth_pageviews": 150, "matched": 150, "median_rel_err": 0.002, "p90_rel_err": 0.011},
                "seen": 2050, "seen_acted": 170});
            let r = serde_json::json!({"target_s": 1.5, "arms": [arm("unmanaged", 2.3, 5.4, 0.0), managed]});
            let mut c = Checks::default();
            SynThrottle.check(&r, &Results::new(), &mut c);
            c.v.into_iter().find(|(_, l)| l.starts_with("syn-throttle/syn-throttle: rlm's live pageviews")).expect("a live fidelity line")
        };
        // 96% matched, p90 2.5%: within the heavy load's bounds; the SYNs rlm dropped shown apart.
        let (ok, line) = live(1920, 0.025);
        assert!(ok, "{line}");
        assert!(line.contains("matched 1920 of 2000 truth pageviews (96.0%, at least 95%), median error 0.60% (at most 1%), p90 2.50%"), "{line}");
        assert!(
            line.ends_with("rlm acted on 170 of its 2050 live pageviews, 150 of them matched: median error 0.20%, p90 1.10% (not judged)"),
            "{line}"
        );
        // 94% matched, or a p90 of 3.5%: fails.
        assert!(!live(1880, 0.025).0);
        assert!(!live(1920, 0.035).0);
    }

    #[test]
    fn full_arms_on_the_cpu_bound_farm() {
        use crate::experiments::syn_police::SynPolice;
        for a in SynThrottle.arms(false).iter().chain(SynPolice.arms(false).iter()) {
            assert_eq!((a.clients(), a.farm.max_clients, a.farm.cpu_cores), (600, 1200, Some(0.25)), "{}", a.name);
        }
        for a in SynThrottle.arms(true).iter().chain(SynPolice.arms(true).iter()) {
            assert_eq!((a.clients(), a.farm.max_clients, a.farm.cpu_cores), (240, 150, Some(0.12)), "{}", a.name);
        }
    }

    #[test]
    fn hold_judged_after_the_ramp_looser_quick() {
        let arm = |name: &str, high: f64, busy_cpu_s: f64, drops: f64| {
            let bucket = |t: f64, mean: f64| serde_json::json!({"t_s": t, "span_s": 10.0, "by_class": {"HIGH": {"count": 100, "mean_s": mean}}});
            serde_json::json!({"name": name, "duration_s": 60.0, "config": {"farm": {"cpu_cores": 0.12}, "think_mean_s": 7.0, "duration_s": 60.0},
                "farm_usage": {"load_cpu_s": busy_cpu_s},
                "pageviews": {"by_class": {"HIGH": {"mean_s": (3.0 + 2.0 * high) / 3.0}, "LOW": {"mean_s": if drops > 0.0 { 9.0 } else { 4.0 }}}},
                "timeline": [bucket(0.0, 3.0), bucket(10.0, high), bucket(20.0, high)],
                "rlm": {"syn_drops": {"LOW": drops}}})
        };
        let hold = |quick: bool, high: f64| {
            let r = serde_json::json!({"quick": quick, "target_s": 1.5, "arms": [arm("unmanaged", 3.9, 7.2, 0.0), arm("syn-throttle", high, 7.0, 800.0)]});
            let mut c = Checks::default();
            SynThrottle.check(&r, &Results::new(), &mut c);
            c.v.into_iter().find(|(_, l)| l.starts_with("syn-throttle: HIGH mean")).expect("a hold line")
        };
        // 1.70 s after the ramp (the whole run 2.13 s with the burst): 13% over.
        let (ok, line) = hold(true, 1.7);
        assert!(ok && line.contains("1.70 s after the ramp (whole run 2.13 s) within 40%"), "{line}");
        assert!(hold(false, 1.7).0);
        // 20% over, and CI's 29% (1.94 s): a quick run passes, a full one does not; over-shedding
        // and 45% over fail both.
        assert!(hold(true, 1.8).0 && !hold(false, 1.8).0);
        assert!(hold(true, 1.94).0 && !hold(false, 1.94).0);
        assert!(!hold(true, 2.18).0 && !hold(false, 2.18).0);
        assert!(!hold(true, 0.85).0 && !hold(false, 1.2).0);
    }

    #[test]
    fn report_with_an_inline_arm_and_top_level_figures() {
        let dir = std::env::temp_dir().join(format!("rlm-lab-report-{}", std::process::id()));
        let (arms, note) = synthetic_arms(&dir, &SynThrottle);
        let params = SynThrottle.params(true);
        let md = crate::report::write(&dir, "syn-throttle", true, &arms, None, note, &params).unwrap();
        assert!(md.contains("- target_s: 1.5"), "{md}");
        assert!(md.contains("### Timeline"), "{md}");
        assert!(md.contains("| syn-throttle | LOW |"), "{md}");
        assert!(md.contains("syn-throttle / rlm: exit 0"), "{md}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("result.json")).unwrap()).unwrap();
        assert_eq!(v["target_s"], 1.5);
        assert_eq!(v["arms"][1]["rlm"]["syn_drops"]["LOW"], 12.0);
        assert_eq!(v["arms"][1]["rlm"]["injected"]["fast_syns_sent"], 7.0);
        assert_eq!(v["arms"][0]["timeline"].as_array().unwrap().len(), 6);
        assert!(dir.join("syn-throttle-rt.png").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
