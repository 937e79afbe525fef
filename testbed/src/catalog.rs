//! The lab's experiments by name: what `rlm-lab run NAME` and `rlm-lab check` go through. Each
//! experiment is a file of [`crate::experiments`]: its arms, rules, figures and checks.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::{Map, Value};

use crate::arm::ArmSpec;
use crate::experiments::attacks::Attacks;
use crate::experiments::baseline_lan::BaselineLan;
use crate::experiments::baseline_wan::BaselineWan;
use crate::experiments::cookie_abort::CookieAbort;
use crate::experiments::fast_syn::FastSyn;
use crate::experiments::fast_synack::FastSynack;
use crate::experiments::fidelity::Fidelity;
use crate::experiments::fidelity_tls::FidelityTls;
use crate::experiments::heavy::Heavy;
use crate::experiments::maxclients::Maxclients;
use crate::experiments::openloop::Openloop;
use crate::experiments::predict::Predict;
use crate::experiments::remove_embeds::RemoveEmbeds;
use crate::experiments::rewrite_embeds::RewriteEmbeds;
use crate::experiments::sites::Sites;
use crate::experiments::sla_step::SlaStep;
use crate::experiments::soak::Soak;
use crate::experiments::srpt::Srpt;
use crate::experiments::srpt_tls::SrptTls;
use crate::experiments::srpt_transient::SrptTransient;
use crate::experiments::syn_police::SynPolice;
use crate::experiments::syn_throttle::SynThrottle;
use crate::experiments::syn_throttle_tls::SynThrottleTls;
use crate::experiments::think_gap::ThinkGap;
use crate::experiments::throughput::Throughput;
use crate::experiments::url_admission::UrlAdmission;
use crate::experiments::{check_browsers, Checks, Experiment, Results};
use crate::report;

/// Every experiment, in the order `rlm-lab check` checks them.
pub const ALL: &[&dyn Experiment] = &[
    &BaselineLan,
    &BaselineWan,
    &Heavy,
    &Fidelity,
    &FidelityTls,
    &Openloop,
    &Srpt,
    &SrptTransient,
    &Maxclients,
    &SynThrottle,
    &SynThrottleTls,
    &Sites,
    &SrptTls,
    &SynPolice,
    &FastSynack,
    &FastSyn,
    &ThinkGap,
    &RemoveEmbeds,
    &RewriteEmbeds,
    &Predict,
    &Throughput,
    &Attacks,
    &Soak,
    &SlaStep,
    &UrlAdmission,
    &CookieAbort,
];

/// The experiments' names, in order.
pub fn names() -> Vec<&'static str> {
    ALL.iter().map(|e| e.name()).collect()
}

/// The experiment of this name.
pub fn find(name: &str) -> Result<&'static dyn Experiment> {
    match ALL.iter().find(|e| e.name() == name) {
        Some(e) => Ok(*e),
        None => bail!("unknown experiment '{name}' (known: {})", names().join(", ")),
    }
}

/// The arms of an experiment, and a note for its report.
pub fn arms(name: &str, quick: bool) -> Result<(Vec<ArmSpec>, &'static str)> {
    let e = find(name)?;
    Ok((e.arms(quick), e.note()))
}

/// Figures of an experiment that belong to no arm (result.json's top level); none for a name
/// that is no experiment's.
pub fn params(name: &str, quick: bool) -> Map<String, Value> {
    find(name).map(|e| e.params(quick)).unwrap_or_default()
}

/// Run an experiment end to end (only the arms `only` names, if any); returns the report's text.
/// An experiment whose arms give their farm a CPU quota runs on this machine's calibration
/// ([`crate::calibrate`]): read from `calibration` if that file exists, else measured first (and
/// written there, or into `out`); its arms' quotas are scaled by it and result.json says so.
pub fn run(name: &str, quick: bool, out: &Path, prefix: &str, only: &[String], calibration: Option<&Path>) -> Result<String> {
    let e = find(name)?;
    let mut specs = e.arms(quick);
    let mut params = e.params(quick);
    if e.browsers() && specs.iter().any(|s| s.farm.cpu_cores.is_some()) {
        let file = calibration.map_or_else(|| out.join("calibration.json"), Path::to_path_buf);
        let c = crate::calibrate::load_or_measure(&file, prefix, e.calibration_max_age())?;
        specs.iter_mut().for_each(|s| c.apply(s));
        params.insert("calibration".into(), serde_json::to_value(&c)?);
    }

    if let Some(missing) = only.iter().find(|o| !specs.iter().any(|s| &s.name == *o)) {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        bail!("{name} has no arm {missing} (its arms: {})", names.join(", "));
    }
    if !only.is_empty() {
        specs.retain(|s| only.contains(&s.name));
    }
    let results = e.run(quick, prefix, &specs, out)?;
    let fid = e.fidelity(&results)?;
    report::write(out, name, quick, &results, fid.as_ref(), e.note(), &params)
}

/// Check the results in `root` (one directory per experiment) of these experiments (each must
/// have its result; the others are not read) against what the papers show and the lab promises:
/// each experiment's own checks, then, for an experiment of browsers, every arm's load generator
/// and count of pageviews. Returns (passed, failed, notes) lines: notes are figures shown next to
/// the checks but not judged. An experiment whose result is missing fails its checks; the others
/// are still checked.
pub fn check(root: &Path, wanted: &[&str]) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    let mut c = Checks::default();
    let mut results = Results::new();
    for &name in wanted {
        let Ok(e) = find(name) else {
            c.v.push((false, format!("{name}: no such experiment (known: {})", names().join(", "))));
            continue;
        };
        let name = e.name();
        let p = root.join(name).join("result.json");
        match std::fs::read(&p).map_err(anyhow::Error::from).and_then(|b| Ok(serde_json::from_slice::<Value>(&b)?)) {
            Ok(r) => {
                results.insert(name, r);
            }
            Err(e) => c.v.push((false, format!("{name}: no result ({}: {e})", p.display()))),
        }
    }
    for e in ALL {
        let Some(r) = results.get(e.name()) else { continue };
        e.check(r, &results, &mut c);
        if e.browsers() {
            check_browsers(e.name(), r, &mut c.v);
        }
    }
    let (ok, bad): (Vec<_>, Vec<_>) = c.v.into_iter().partition(|(p, _)| *p);
    Ok((ok.into_iter().map(|(_, s)| s).collect(), bad.into_iter().map(|(_, s)| s).collect(), c.notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_rule_file_compiles_with_the_labs_mapping_beside_it() {
        // As rlm reads them: from a file, with the mapping the lab writes beside it.
        let dir = std::env::temp_dir().join(format!("rlm-lab-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ims.map"), crate::inline::IMS_MAP).unwrap();
        let mut rewrites = 0;
        for name in names() {
            for quick in [true, false] {
                let (specs, _) = arms(name, quick).unwrap();
                for s in specs {
                    if let Some(r) = &s.rlm {
                        std::fs::write(dir.join("rules.rlm"), &r.rules).unwrap();
                        match rules::check_file(&dir.join("rules.rlm")) {
                            Ok(rs) => rewrites += (0..rs.embeds_count()).filter(|&i| rs.embeds(rules::EmbedsId(i as u32)).map.is_some()).count(),
                            Err(d) => panic!("{name}/{} (quick {quick}): its rules do not compile:\n{}\n{d}", s.name, r.rules),
                        }
                    }
                }
            }
        }
        // rewrite-embeds' arms but keep-all (2 quick, 11 full and rt-1s) and predict's.
        assert_eq!(
            rewrites,
            2 + 11 + 1 + crate::experiments::predict::predict_goals(true).len() + crate::experiments::predict::predict_goals(false).len()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn class(mean: f64, p95: f64, failed: u64) -> Value {
        json!({"count": 500, "mean_s": mean, "p95_s": p95, "gt3s_frac": 0.1, "failed": failed})
    }

    fn arm_json(name: &str, count: u64, gt3s: f64, by_class: Value, injected: Value) -> Value {
        json!({
            "name": name,
            "generator_bottleneck": false,
            "pageviews": {"count": count, "mean_s": 1.0, "p95_s": 2.0, "gt3s_frac": gt3s, "failed": 0, "by_class": by_class},
            "rlm": {"exit_code": 0, "clean_exit": true, "installed": true, "rules_left": [], "reports_lost": 0.0, "injected": injected, "syn_drops": {"LOW": 30.0}}
        })
    }

    fn write_result(root: &Path, name: &str, result: Value) {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("result.json"), serde_json::to_vec(&result).unwrap()).unwrap();
    }

    /// The lines of `check` about the fast retransmission experiments.
    fn fast_lines(root: &Path) -> (Vec<String>, Vec<String>, Vec<String>) {
        let (ok, bad, notes) = check(root, &names()).unwrap();
        let ours = |v: Vec<String>| v.into_iter().filter(|l| l.starts_with("fast-syn") || l.starts_with("think-gap")).collect::<Vec<_>>();
        (ours(ok), ours(bad), notes)
    }

    #[test]
    fn checks_of_the_fast_experiments() {
        let root = std::env::temp_dir().join(format!("rlm-lab-check-fast-{}", std::process::id()));
        let (none, no_class) = (json!({}), json!({}));
        let synack = |slow_frac: f64, pages: u64| {
            json!({"experiment": "fast-synack", "synack_gaps": ["3s", "1s", "500ms", "10ms"],
                   "fidelity": {"truth_pageviews": 2300, "matched": 2290}, "arms": [
                arm_json("gap-3s", 2300, 0.05, no_class.clone(), none.clone()),
                arm_json("gap-500ms", pages, slow_frac, no_class.clone(), json!({"fast_synacks_sent": 60.0})),
                arm_json("gap-10ms", 2310, 0.025, no_class.clone(), json!({"fast_synacks_sent": 900.0})),
            ]})
        };
        let fast_syn = |throttle_failed: u64, high: f64, low: f64, quick: bool| {
            json!({"experiment": "fast-syn", "quick": quick, "target_s": 1.5, "arms": [
                arm_json("syn-throttle", 1500, 0.3, json!({"HIGH": class(1.43, 4.6, 0), "LOW": class(4.5, 21.4, throttle_failed)}), json!({})),
                arm_json("fast-syn", 1500, 0.2, json!({"HIGH": class(high, 4.5, 0), "LOW": class(low, 9.0, 2)}), json!({"fast_syns_sent": 150.0})),
            ]})
        };
        write_result(&root, "fast-synack", synack(0.03, 2250));
        write_result(&root, "fast-syn", fast_syn(40, 1.52, 3.5, false));
        // think-gap's HIGH: 2.4 s in the ramp's bucket, 1.6 s after it.
        let mut tg = arm_json("think-gap", 1400, 0.3, json!({"HIGH": class(1.8, 4.0, 0), "LOW": class(5.0, 8.0, 1)}), json!({"syns_delayed": 700.0}));
        tg["config"] = json!({"think_mean_s": 7.0, "duration_s": 60.0});
        let bucket = |t: f64, mean: f64, n: u64| json!({"t_s": t, "span_s": 10.0, "by_class": {"HIGH": {"count": n, "mean_s": mean}}});
        tg["timeline"] = json!([bucket(0.0, 2.4, 100), bucket(10.0, 1.6, 300)]);
        write_result(&root, "think-gap", json!({"experiment": "think-gap", "quick": false, "target_s": 1.5, "arms": [tg]}));
        let (ok, bad, notes) = fast_lines(&root);
        assert!(bad.is_empty(), "{bad:#?}");
        let has = |lines: &[String], s: &str| lines.iter().any(|l| l.contains(s));
        assert!(has(&ok, "fast-synack/gap-3s: 115 pageviews past 3 s (at least 50"), "{ok:#?}");
        assert!(has(&ok, "fast-synack: gap-500ms cuts the share of pageviews past 3 s by 40%"), "{ok:#?}");
        assert!(has(&ok, "fast-synack: gap-500ms completed 2250 pages against gap-3s's 2300"), "{ok:#?}");
        assert!(has(&ok, "fast-synack/gap-3s: rlm resent no SYN/ACK"), "{ok:#?}");
        assert!(has(&ok, "fast-synack/gap-3s (rlm inline, nothing acted on): 2290 of 2300 truth pageviews matched in its capture"), "{ok:#?}");
        assert!(has(&ok, "fast-synack/gap-10ms: rlm resent 900 SYN/ACKs"), "{ok:#?}");
        assert!(has(&ok, "fast-syn: LOW's pageviews with a failed connection fall by 95%: 2 against 40"), "{ok:#?}");
        assert!(has(&ok, "fast-syn: LOW's mean better: 3.50 s against 4.50 s"), "{ok:#?}");
        assert!(has(&ok, "fast-syn: HIGH's mean 1.52 s at most 10% above its 1.43 s"), "{ok:#?}");
        assert!(has(&ok, "fast-syn/fast-syn: rlm resent 150 SYNs"), "{ok:#?}");
        assert!(has(&ok, "think-gap: rlm delayed 700 first SYNs"), "{ok:#?}");
        assert!(has(&ok, "fast-syn: regime reached: syn-throttle's rule alone dropped 30 LOW SYNs and left 40 LOW pageviews"), "{ok:#?}");
        assert!(has(&ok, "think-gap: regime reached: the load tripped the throttle"), "{ok:#?}");
        assert!(has(&ok, "think-gap: HIGH mean 1.60 s after the ramp (whole run 1.80 s) at most 15% above the target 1.50 s"), "{ok:#?}");
        assert!(has(&ok, "think-gap/think-gap: 1400 pageviews measured"), "{ok:#?}");
        assert_eq!(ok.iter().filter(|l| l.contains("rlm inline exited")).count(), 6, "{ok:#?}");
        assert_eq!(
            notes,
            [
                "think-gap: HIGH p95 4.00 s against 4.50 s in the fast-syn experiment's fast-syn arm (004 Figure 17: better for both classes; not judged)",
                "think-gap: LOW p95 8.00 s against 9.00 s in the fast-syn experiment's fast-syn arm (004 Figure 17: better for both classes; not judged)",
            ]
        );

        // A cut of a fifth, 4% fewer pages, and a syn-throttle arm with too few failures: fast-syn's
        // regime was not reached, and nothing else of it is judged.
        write_result(&root, "fast-synack", synack(0.04, 2200));
        write_result(&root, "fast-syn", fast_syn(9, 1.52, 3.5, false));
        let (_, bad, _) = fast_lines(&root);
        assert_eq!(bad.len(), 3, "{bad:#?}");
        assert!(has(&bad, "fast-synack: gap-500ms cuts the share of pageviews past 3 s by 20%"), "{bad:#?}");
        assert!(has(&bad, "fast-synack: gap-500ms completed 2200 pages"), "{bad:#?}");
        assert!(has(&bad, "fast-syn: regime not reached: syn-throttle's rule alone dropped 30 LOW SYNs and left 9 LOW pageviews"), "{bad:#?}");
        assert!(!fast_lines(&root).0.iter().any(|l| l.starts_with("fast-syn: LOW's mean")), "not judged without the regime");
        // A quick run (three gaps) guards the mechanism at a 20% cut.
        let mut quick = synack(0.04, 2300);
        quick["synack_gaps"] = json!(["3s", "500ms", "10ms"]);
        quick["fidelity"]["matched"] = json!(2100);
        write_result(&root, "fast-synack", quick.clone());
        let (ok, bad, _) = fast_lines(&root);
        assert!(has(&ok, "by 20%: 4.00% (92 of 2300) against gap-3s's 5.00% (115 of 2300) (at least 20% in a quick run"), "{ok:#?}");
        assert!(has(&bad, "fast-synack/gap-3s (rlm inline, nothing acted on): 2100 of 2300 truth pageviews matched"), "{bad:#?}");
        quick["fidelity"]["matched"] = json!(2290);
        write_result(&root, "fast-synack", quick);
        // LOW 7% worse: within a quick run's guard, not the full run's target; HIGH 12% worse fails both.
        write_result(&root, "fast-syn", fast_syn(40, 1.60, 4.8, true));
        let (ok, bad, _) = fast_lines(&root);
        assert!(has(&ok, "fast-syn: LOW's mean at most 10% worse (quick): 4.80 s against 4.50 s"), "{ok:#?}");
        assert!(has(&bad, "fast-syn: HIGH's mean 1.60 s at most 10% above its 1.43 s"), "{bad:#?}");
        write_result(&root, "fast-syn", fast_syn(40, 1.50, 4.8, false));
        let (_, bad, _) = fast_lines(&root);
        assert_eq!(bad.len(), 1, "{bad:#?}");
        assert!(has(&bad, "fast-syn: LOW's mean better: 4.80 s against 4.50 s"), "{bad:#?}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
