//! think-gap: 004 Figure 17, fast-syn's rules and LOW's first SYN of each pageview held back.

use serde_json::{Map, Value};

use super::fast_syn::{fast_rlm, fast_syn_rules, FastSyn};
use super::syn_throttle::throttle_target_s;
use super::{arm_in, class_mean, class_mean_steady, hold_tolerance, injected, num, rlm_clean, Checks, Experiment, Results};
use crate::arm::ArmSpec;

/// think-gap's DELAY FIRST SYN for LOW (004 Figure 17).
pub const FIRST_SYN_DELAY: &str = "3s";

/// 004 Figure 17: fast-syn's rules, and LOW's first SYN of each pageview held back.
fn think_gap_rules(target_s: f64) -> String {
    format!("{}IF IP.SRC != 10.4.*.* THEN\n  DELAY FIRST SYN {FIRST_SYN_DELAY}\n", fast_syn_rules(target_s))
}

pub struct ThinkGap;

impl Experiment for ThinkGap {
    fn name(&self) -> &'static str {
        "think-gap"
    }

    fn note(&self) -> &'static str {
        "004 Figure 17: fast-syn's rules, and rlm also drops the initial SYN of the first connection of each LOW \
        pageview and sends it on 3 s later (then every 500 ms): LOW's think time grows and the farm's load falls. \
        004 shows the distribution shifted right and the 95th percentile of both classes better; a pageview \
        whose container comes over a kept-alive connection is not delayed."
    }

    /// Its rule holds a class at a target under the heavy load: a calibration of the last minutes.
    fn calibration_max_age(&self) -> Option<std::time::Duration> {
        Some(super::HOLD_CALIBRATION_MAX_AGE)
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let target = throttle_target_s(quick);
        // The quick run has the think-gap arm only (`rlm-lab check` compares it with the
        // fast-syn experiment's arm); the full run repeats fast-syn's arm next to it.
        let mut arms = vec![fast_rlm("think-gap", think_gap_rules(target), quick)];
        if !quick {
            arms.insert(0, fast_rlm("fast-syn", fast_syn_rules(target), quick));
        }
        arms
    }

    /// fast-syn's, and the delay.
    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = FastSyn.params(quick);
        m.insert("first_syn_delay".into(), FIRST_SYN_DELAY.into());
        m
    }

    /// 004 Figure 17: LOW's first SYN of each pageview held back 3 s on top of fast-syn's rules.
    fn check(&self, tg: &Value, all: &Results, c: &mut Checks) {
        let target = num(&tg["target_s"]);
        let a = arm_in(tg, "think-gap");
        let drops = num(&a["rlm"]["syn_drops"]["LOW"]);
        let what = format!("the load tripped the throttle (RT.HIGH over {target:.1} s): it dropped {drops} LOW SYNs");
        if !c.regime("think-gap", drops > 0.0, what) {
            return;
        }
        let Checks { v, notes } = c;
        let delayed = injected(&a, "syns_delayed");
        v.push((delayed > 0.0, format!("think-gap: rlm delayed {delayed} first SYNs of LOW pageviews")));
        // Judged once the browsers have all started: their start-up burst comes before the rule
        // has measured a pageview (the whole run's mean is printed beside it).
        let (high, all_run) = (class_mean_steady(tg, "think-gap", "HIGH"), class_mean(tg, "think-gap", "HIGH"));
        let tol = hold_tolerance(tg);
        v.push((
            high <= (1.0 + tol) * target,
            format!(
                "think-gap: HIGH mean {high:.2} s after the ramp (whole run {all_run:.2} s) at most {:.0}% above the target {target:.2} s",
                tol * 100.0
            ),
        ));
        rlm_clean(v, "think-gap", &a);
        // 004: the 95th percentile of both classes better than under fast-syn's rules alone.
        // Shown, not judged: the quick run compares two experiments run minutes apart on a
        // shared machine, and LOW's p95 sits on the steps of its SYN timeouts (3, 9, 21 s) and
        // carries the 3 s delay itself.
        let reference = if arm_in(tg, "fast-syn").is_null() {
            all.get("fast-syn").map(|r| (r, "the fast-syn experiment's fast-syn arm"))
        } else {
            Some((tg, "its own fast-syn arm"))
        };
        if let Some((r, what)) = reference {
            for class in ["HIGH", "LOW"] {
                let p95 = |r: &Value, a: &str| num(&arm_in(r, a)["pageviews"]["by_class"][class]["p95_s"]);
                notes.push(format!(
                    "think-gap: {class} p95 {:.2} s against {:.2} s in {what} (004 Figure 17: better for both classes; not judged)",
                    p95(tg, "think-gap"),
                    p95(r, "fast-syn")
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::CLASS_RULES;

    #[test]
    fn arms_and_rules() {
        let names = |specs: &[ArmSpec]| specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        let rules = |s: &ArmSpec| s.rlm.as_ref().expect("rlm inline").rules.clone();

        // fast-syn's rules at the quick target.
        let fast = format!(
            "{CLASS_RULES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 1.5s THEN\n  DROP SYN\n  HALT FAST SYN\n"
        );

        // think-gap: its arm alone quick, after fast-syn's in the full run.
        let tq = ThinkGap.arms(true);
        assert_eq!(names(&tq), ["think-gap"]);
        assert_eq!(rules(&tq[0]), format!("{fast}IF IP.SRC != 10.4.*.* THEN\n  DELAY FIRST SYN 3s\n"));
        let tf = ThinkGap.arms(false);
        assert_eq!(names(&tf), ["fast-syn", "think-gap"]);
        // fast-syn's arm whole: fast-syn's own full run splits it into two rounds of 150 s.
        let mut fast_arm = FastSyn.arms(false)[1].clone();
        fast_arm.duration_s *= 2.0;
        assert_eq!(serde_json::to_value(&tf[0]).unwrap(), serde_json::to_value(&fast_arm).unwrap());
    }
}
