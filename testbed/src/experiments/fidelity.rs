//! fidelity: the appliance's passive measurement, a capture replayed through the engine, against
//! the browsers' ground truth. The only file of the lab that uses the engine (`rlm_core`).

use anyhow::{bail, Result};
use serde_json::Value;

use super::{arm, num, scale, Checks, Experiment, Results, WAN_80_2};
use crate::arm::{read_truth, ArmResult, ArmSpec};
use crate::report;

pub struct Fidelity;

impl Experiment for Fidelity {
    fn name(&self) -> &'static str {
        "fidelity"
    }

    fn note(&self) -> &'static str {
        "The appliance's passive measurement against the browsers' ground truth, over the 004 Figure 12 WAN."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (light, _, dur, cores) = scale(quick);
        vec![arm("wan", light, dur, &WAN_80_2, true, cores)]
    }

    fn fidelity(&self, arms: &[ArmResult]) -> Result<Option<report::Fidelity>> {
        of_captured_arm(arms)
    }

    fn check(&self, fid: &Value, _all: &Results, c: &mut Checks) {
        let v = &mut c.v;
        let f = &fid["fidelity"];
        v.push(matched_check(f, "fidelity:", ""));
        let med = num(&f["median_rel_err"]);
        v.push((med <= 0.05, format!("fidelity: median relative error {:.2}% (at most 5%)", med * 100.0)));
        let p90 = num(&f["p90_rel_err"]);
        v.push((p90 <= 0.10, format!("fidelity: p90 relative error {:.2}% (at most 10%)", p90 * 100.0)));
    }
}

/// The fidelity of the one arm of an experiment that captured its server port, if any.
pub fn of_captured_arm(arms: &[ArmResult]) -> Result<Option<report::Fidelity>> {
    arms.iter().find(|a| a.capture.is_some()).map(fidelity).transpose()
}

/// The check that at least 95% of the ground truth's pageviews were matched in a capture
/// (`f`: a result's `fidelity`), its line starting with `who` and `where_` after "matched".
pub fn matched_check(f: &Value, who: &str, where_: &str) -> (bool, String) {
    let (truth, matched) = (num(&f["truth_pageviews"]), num(&f["matched"]));
    (truth > 0.0 && matched / truth >= 0.95, format!("{who} {matched} of {truth} truth pageviews matched{where_} (at least 95%)"))
}

/// Replay an arm's capture through the engine and compare its pageviews with the ground truth.
pub fn fidelity(a: &ArmResult) -> Result<report::Fidelity> {
    let Some(cap) = &a.capture else { bail!("arm {} has no capture", a.name) };
    let truth = read_truth(&a.ground_truth)?;
    let mut cfg = rlm_core::Config { server_ports: vec![crate::farm::FRONT_PORT], ..rlm_core::Config::default() };
    cfg.pageview.connect_timeout = a.config.profile.connect_timeout();
    let mut engine = rlm_core::Engine::new(cfg);
    let mut seen = Vec::new();
    rlm::capture::replay(
        cap,
        &mut engine,
        &mut |ev| {
            if let rlm_core::Event::Pageview(p) = ev {
                seen.push(p);
            }
            Ok(())
        },
        None,
    )?;
    Ok(compare(&truth, &seen))
}

/// Match each truth pageview with the engine's pageview of the same client and container that
/// started nearest to it (within 2 s), and take the relative errors of the matched RTs.
pub fn compare(truth: &[sim_clients::browser::GroundTruth], seen: &[rlm_core::PageviewRecord]) -> report::Fidelity {
    let mut used = vec![false; seen.len()];
    let mut errs = Vec::new();
    for t in truth.iter().filter(|t| !t.failed) {
        let best = seen
            .iter()
            .enumerate()
            .filter(|(i, s)| !used[*i] && s.client == t.client && s.container.as_deref() == Some(t.url.as_str()))
            .map(|(i, s)| (i, (s.start_ts - t.start_ts).abs()))
            .filter(|(_, d)| *d < 2.0)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((i, _)) = best {
            used[i] = true;
            errs.push(((seen[i].rt_s - t.rt_s) / t.rt_s.max(1e-3)).abs());
        }
    }
    errs.sort_by(f64::total_cmp);
    report::Fidelity {
        truth_pageviews: truth.iter().filter(|t| !t.failed).count(),
        matched: errs.len(),
        median_rel_err: crate::stats::percentile_sorted(&errs, 50.0),
        p90_rel_err: crate::stats::percentile_sorted(&errs, 90.0),
    }
}
