//! baseline-wan: 004 Figure 12, the light load over the 80 ms / 2% WAN, unmanaged next to rlm
//! inline measuring and acting on nothing.

use anyhow::Result;
use serde_json::Value;

use super::{arm, arm_in, arm_mean, rlm_clean, scale, with_rlm, Checks, Experiment, Results, CLASS_RULES, WAN_80_2};
use crate::arm::{ArmResult, ArmSpec, Fidelity};

pub struct BaselineWan;

impl Experiment for BaselineWan {
    fn name(&self) -> &'static str {
        "baseline-wan"
    }

    fn note(&self) -> &'static str {
        "004 Figure 12: 80 ms RTT and 2% loss each way, Windows XP clients (3 s initial SYN timeout, 2 retries). \
        The managed arm runs the appliance inline (`rlm run` on the bridge) with rules that only declare the classes \
        HIGH and LOW: it measures and acts on nothing. Its server-side port is also captured, and the capture \
        replayed through the engine for the fidelity figure."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (light, _, dur, cores) = scale(quick);
        vec![
            arm("unmanaged", light, dur, &WAN_80_2, false, cores),
            with_rlm(arm("managed", light, dur, &WAN_80_2, true, cores), CLASS_RULES.into(), &[]),
        ]
    }

    /// The managed arm's capture replayed through the engine.
    fn fidelity(&self, arms: &[ArmResult]) -> Result<Option<Fidelity>> {
        Ok(super::fidelity::of_captured_arm(arms))
    }

    /// Its mean against baseline-lan's (when that is checked too), its pageviews past 3 s, its
    /// inline rlm, and its capture's pageviews matched with the ground truth.
    fn check(&self, wan: &Value, all: &Results, c: &mut Checks) {
        let v = &mut c.v;
        if let Some(lan) = all.get("baseline-lan") {
            let (lan_mean, wan_mean) = (arm_mean(lan, "lan", "mean_s"), arm_mean(wan, "unmanaged", "mean_s"));
            v.push((
                wan_mean > 2.0 * lan_mean && wan_mean - lan_mean > 0.2,
                format!("baseline-wan mean {wan_mean:.2} s clearly above baseline-lan {lan_mean:.2} s"),
            ));
        }
        let gt3 = arm_mean(wan, "unmanaged", "gt3s_frac");
        v.push((gt3 >= 0.02, format!("baseline-wan: {:.1}% of pageviews past 3 s (SYN and SYN/ACK loss), at least 2%", gt3 * 100.0)));
        rlm_clean(v, "baseline-wan", &arm_in(wan, "managed"));
        v.push(super::fidelity::matched_check(&wan["fidelity"], "baseline-wan/managed (inline):", " in its capture"));
    }
}
