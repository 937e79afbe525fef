//! syn-police: Voigt's token bucket, LOW's SYN rate capped by rlm, counted at the farm.

use serde_json::{Map, Value};

use super::{
    arm, arm_in, class_mean, farm_busy, num, on_heavy_farm, rlm_clean, scale, with_rlm, Checks, Experiment, Results, CLASS_RULES, OVERLOADED_BUSY,
    WAN_80_2,
};
use crate::arm::ArmSpec;

/// syn-police's token bucket on LOW's SYNs: (rate per second, burst). Calibrated (quick):
/// unmanaged LOW offers the farm 26.5 SYNs/s at heavy load, so 8/s (30%) binds with margin; the
/// full run's LOW browsers are 2.5 times as many.
pub fn police_limit(quick: bool) -> (f64, u32) {
    if quick {
        (8.0, 5)
    } else {
        (20.0, 5)
    }
}

/// LOW's (10.5/16) SYNs limited to `rate` a second with a burst of `burst`.
fn police_rules(rate: f64, burst: u32) -> String {
    format!("{CLASS_RULES}IF IP.SRC == 10.5.*.* THEN LIMIT SYN {rate:.0}/s BURST {burst}\n")
}

pub struct SynPolice;

impl Experiment for SynPolice {
    fn name(&self) -> &'static str {
        "syn-police"
    }

    fn note(&self) -> &'static str {
        "Voigt's token bucket: rlm caps the SYN rate of LOW (10.5/16) with LIMIT SYN r/s BURST b and leaves HIGH \
        alone. The lab counts the SYNs that reach the farm (a capture on the farm's own interface) per class and \
        second, from the end of the browsers' ramp plus one connect timeout (LOW's first refused connects have \
        played out) to the end of the run."
    }

    /// Its regime (the unmanaged farm busy, LOW offering more than the bucket's rate) is the
    /// calibration's overload: a clean-clone run four minutes after one found its farm 68% busy
    /// (docs/experiments.md). It runs in `make lab` after the quick experiments, so it takes a
    /// calibration of the last minutes as the holding experiments do.
    fn calibration_max_age(&self) -> Option<std::time::Duration> {
        Some(super::HOLD_CALIBRATION_MAX_AGE)
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (_, heavy, dur, cores) = scale(quick);
        let (rate, burst) = police_limit(quick);
        // SYNs are counted from the ramp's end plus a connect timeout (28 s): 60 s leaves 32.
        let pdur = if quick { 60.0 } else { dur };
        let mut un = arm("unmanaged", heavy, pdur, &WAN_80_2, false, cores);
        un.syn_capture = true;
        let mut lim = with_rlm(arm("limit", heavy, pdur, &WAN_80_2, false, cores), police_rules(rate, burst), &[]);
        lim.syn_capture = true;
        // The full run's farm is bound by its CPU, as 004's heavy load (see `heavy_farm`).
        vec![on_heavy_farm(un, quick), on_heavy_farm(lim, quick)]
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        let (rate, burst) = police_limit(quick);
        m.insert("limit_rate_per_s".into(), rate.into());
        m.insert("limit_burst".into(), burst.into());
        m
    }

    /// Voigt's token bucket on LOW's SYNs, counted at the farm by the lab.
    fn check(&self, sp: &Value, _all: &Results, c: &mut Checks) {
        let rate = num(&sp["limit_rate_per_s"]);
        let (un, lim) = (arm_in(sp, "unmanaged"), arm_in(sp, "limit"));
        let un_low = num(&un["server_syns"]["by_class"]["LOW"]["syn_rate_per_s"]);
        let lim_low = num(&lim["server_syns"]["by_class"]["LOW"]["syn_rate_per_s"]);
        let busy = farm_busy(&un);
        let what = format!("unmanaged, the farm {:.0}% busy and LOW offering {un_low:.2} SYNs/s against the limit {rate:.0}/s", busy * 100.0);
        if !c.regime("syn-police", busy >= OVERLOADED_BUSY && un_low > rate * 1.2, what) {
            return;
        }
        let v = &mut c.v;
        v.push((
            (lim_low - rate).abs() <= 0.10 * rate,
            format!("syn-police: LOW's SYNs reach the farm at {lim_low:.2}/s, within 10% of the limit {rate:.0}/s"),
        ));
        let (un_high, lim_high) = (class_mean(sp, "unmanaged", "HIGH"), class_mean(sp, "limit", "HIGH"));
        v.push((lim_high < un_high, format!("syn-police: HIGH mean improves: {lim_high:.2} s against {un_high:.2} s unmanaged")));
        rlm_clean(v, "syn-police", &lim);
    }
}
