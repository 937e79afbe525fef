//! baseline-lan: 004 Figure 10, the light load on a LAN.

use serde_json::Value;

use super::{arm, scale, Checks, Experiment, Results};
use crate::arm::ArmSpec;

pub struct BaselineLan;

impl Experiment for BaselineLan {
    fn name(&self) -> &'static str {
        "baseline-lan"
    }

    fn note(&self) -> &'static str {
        "004 Figure 10: no delay, no loss, light load."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (light, _, dur, cores) = scale(quick);
        vec![arm("lan", light, dur, &[], false, cores)]
    }

    /// Nothing of its own: baseline-wan's check compares its mean with this one's, and its arm is
    /// checked as every browser arm is.
    fn check(&self, _r: &Value, _all: &Results, _c: &mut Checks) {}
}
