//! heavy: 004 Figure 13, the heavy load over the 80 ms / 2% WAN.

use serde_json::Value;

use super::{arm, arm_mean, scale, Checks, Experiment, Results, WAN_80_2};
use crate::arm::ArmSpec;

pub struct Heavy;

impl Experiment for Heavy {
    fn name(&self) -> &'static str {
        "heavy"
    }

    fn note(&self) -> &'static str {
        "004 Figure 13: heavy load over the same WAN."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (_, heavy, dur, cores) = scale(quick);
        vec![arm("unmanaged", heavy, dur, &WAN_80_2, false, cores)]
    }

    /// Against baseline-wan's mean, when baseline-lan's and baseline-wan's results are checked too.
    fn check(&self, heavy: &Value, all: &Results, c: &mut Checks) {
        let v = &mut c.v;
        if let (Some(_), Some(wan)) = (all.get("baseline-lan"), all.get("baseline-wan")) {
            let wan_mean = arm_mean(wan, "unmanaged", "mean_s");
            let heavy_mean = arm_mean(heavy, "unmanaged", "mean_s");
            v.push((heavy_mean > wan_mean * 1.5, format!("heavy mean {heavy_mean:.2} s well above baseline-wan {wan_mean:.2} s")));
        }
    }
}
