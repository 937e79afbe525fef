//! fidelity: the appliance's passive measurement against the browsers' ground truth, two ways:
//! offline (a capture of its server port replayed through the engine) and live (the pageview
//! records `rlm run` writes inline). The lab's matching of both with the ground truth is here; it
//! is the only file of the lab that uses the engine (`rlm_core`), for the offline replay.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;
use sim_clients::browser::GroundTruth;

use super::{arm, num, scale, Checks, Experiment, Results, WAN_80_2};
use crate::arm::{ArmResult, ArmSpec};
use crate::live::{read_pageviews, LivePageview};
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
        Ok(of_captured_arm(arms))
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

/// The fidelity of the first arm of an experiment that captured its server port, if any: its
/// capture replayed through the engine (`arms[].capture_fidelity`, computed after the arm ran).
pub fn of_captured_arm(arms: &[ArmResult]) -> Option<report::Fidelity> {
    arms.iter().find(|a| a.capture.is_some()).and_then(|a| a.capture_fidelity.clone())
}

/// The check that at least 95% of the ground truth's pageviews were matched in a capture
/// (`f`: a result's `fidelity`), its line starting with `who` and `where_` after "matched".
pub fn matched_check(f: &Value, who: &str, where_: &str) -> (bool, String) {
    let (truth, matched) = (num(&f["truth_pageviews"]), num(&f["matched"]));
    (truth > 0.0 && matched / truth >= 0.95, format!("{who} {matched} of {truth} truth pageviews matched{where_} (at least 95%)"))
}

/// A pageview as the appliance measured it, live ([`LivePageview`]) or from a capture replayed
/// through the engine: what is matched with the ground truth.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub client: String,
    pub container: Option<String>,
    /// Unix seconds.
    pub start_ts: f64,
    pub rt_s: f64,
    /// rlm acted on it ([`LivePageview::acted`]). Never in a capture replayed: no rule runs.
    pub acted: bool,
}

impl From<LivePageview> for Seen {
    fn from(p: LivePageview) -> Seen {
        let acted = p.acted();
        Seen { client: p.client, container: p.container, start_ts: p.start_ts, rt_s: p.rt_s, acted }
    }
}

impl From<rlm_core::PageviewRecord> for Seen {
    fn from(p: rlm_core::PageviewRecord) -> Seen {
        Seen { client: p.client, container: p.container, start_ts: p.start_ts, rt_s: p.rt_s, acted: false }
    }
}

/// Replay a capture of the server port through the engine and compare its pageviews with the
/// ground truth (the clients' connect timeout as theirs).
pub fn of_capture(cap: &Path, truth: &[GroundTruth], connect_timeout: Duration) -> Result<report::Fidelity> {
    let mut cfg = rlm_core::Config { server_ports: vec![crate::farm::FRONT_PORT], ..rlm_core::Config::default() };
    cfg.pageview.connect_timeout = connect_timeout;
    let mut engine = rlm_core::Engine::new(cfg);
    let mut seen = Vec::new();
    rlm::capture::replay(
        cap,
        &mut engine,
        &mut |ev| {
            if let rlm_core::Event::Pageview(p) = ev {
                seen.push(Seen::from(p));
            }
            Ok(())
        },
        None,
    )?;
    Ok(compare(truth, &seen).all)
}

/// rlm's live pageviews (its `--pageviews` file) against the ground truth.
pub fn of_live(pageviews: &Path, truth: &[GroundTruth]) -> Result<report::LiveFidelity> {
    let seen: Vec<Seen> = read_pageviews(pageviews)?.into_iter().map(Seen::from).collect();
    Ok(compare(truth, &seen))
}

/// How far apart a truth pageview and the appliance's may start and still be matched (s).
const MATCH_WINDOW_S: f64 = 2.0;

/// Match each truth pageview (those that did not fail) with the unused pageview of `seen` of the
/// same client and container that started nearest to it, within 2 s, and take the relative
/// errors of the matched response times: over all of them, and over those matched with a
/// pageview rlm acted on. A pageview of `seen` is matched once at most.
pub fn compare(truth: &[GroundTruth], seen: &[Seen]) -> report::LiveFidelity {
    let mut by_page: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (i, s) in seen.iter().enumerate() {
        if let Some(c) = &s.container {
            by_page.entry((s.client.as_str(), c.as_str())).or_default().push(i);
        }
    }
    let mut used = vec![false; seen.len()];
    let (mut errs, mut acted_errs) = (Vec::new(), Vec::new());
    let truth: Vec<&GroundTruth> = truth.iter().filter(|t| !t.failed).collect();
    for t in &truth {
        let Some(candidates) = by_page.get(&(t.client.as_str(), t.url.as_str())) else { continue };
        let best = candidates
            .iter()
            .filter(|&&i| !used[i])
            .map(|&i| (i, (seen[i].start_ts - t.start_ts).abs()))
            .filter(|(_, d)| *d < MATCH_WINDOW_S)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((i, _)) = best {
            used[i] = true;
            let err = ((seen[i].rt_s - t.rt_s) / t.rt_s.max(1e-3)).abs();
            errs.push(err);
            if seen[i].acted {
                acted_errs.push(err);
            }
        }
    }
    report::LiveFidelity {
        all: figures(truth.len(), errs),
        acted: figures(acted_errs.len(), acted_errs),
        seen: seen.len(),
        seen_acted: seen.iter().filter(|s| s.acted).count(),
    }
}

/// The fidelity figures of `truth_pageviews` of which these relative errors were matched.
fn figures(truth_pageviews: usize, mut errs: Vec<f64>) -> report::Fidelity {
    errs.sort_by(f64::total_cmp);
    report::Fidelity {
        truth_pageviews,
        matched: errs.len(),
        median_rel_err: crate::stats::percentile_sorted(&errs, 50.0),
        p90_rel_err: crate::stats::percentile_sorted(&errs, 90.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth(client: &str, url: &str, start_ts: f64, rt_s: f64) -> GroundTruth {
        GroundTruth {
            client: client.into(),
            class: "HIGH".into(),
            url: url.into(),
            start_ts,
            end_ts: start_ts + rt_s,
            rt_s,
            objects_fetched: 3,
            objects_expected: 3,
            syn_retransmissions: 0,
            failed_connections: 0,
            failed: false,
        }
    }

    fn seen(client: &str, url: &str, start_ts: f64, rt_s: f64, acted: bool) -> Seen {
        Seen { client: client.into(), container: Some(url.into()), start_ts, rt_s, acted }
    }

    #[test]
    fn compare_matches_each_seen_pageview_once_within_2_s() {
        let mut failed = truth("10.4.0.1", "/home", 50.0, 21.0);
        failed.failed = true;
        let truth = [
            truth("10.4.0.1", "/home", 100.0, 1.0),
            // The same page again 0.5 s later: the seen pageview nearest to the first is used,
            // and this one takes the other.
            truth("10.4.0.1", "/home", 100.5, 2.0),
            // Its only candidate started 2 s away: unmatched.
            truth("10.4.0.2", "/home", 200.0, 1.0),
            // rlm dropped its first SYN: 3 s more, in both measurements.
            truth("10.5.0.1", "/item", 300.0, 4.0),
            // Another client's page, or another page of the client: never matched with these.
            truth("10.5.0.2", "/item", 400.0, 1.0),
            failed,
        ];
        let seen = [
            seen("10.4.0.1", "/home", 100.45, 1.98, false),
            seen("10.4.0.1", "/home", 100.02, 1.01, false),
            seen("10.4.0.2", "/home", 202.0, 1.0, false),
            seen("10.5.0.1", "/item", 300.001, 4.2, true),
            seen("10.5.0.1", "/item", 400.0, 1.0, false),
            seen("10.5.0.2", "/other", 400.0, 1.0, false),
            Seen { container: None, ..seen("10.5.0.2", "/item", 400.0, 1.0, true) },
        ];
        let f = compare(&truth, &seen);
        // Five truth pageviews that did not fail; 1%, 1%, and 5% matched.
        assert_eq!((f.all.truth_pageviews, f.all.matched), (5, 3));
        assert!((f.all.median_rel_err - 0.01).abs() < 1e-9, "{f:?}");
        assert!((f.all.p90_rel_err - 0.05).abs() < 1e-9, "{f:?}");
        // Acted on: the dropped SYN's pageview alone, its truth the one matched with it.
        assert_eq!((f.seen, f.seen_acted), (7, 2));
        assert_eq!((f.acted.truth_pageviews, f.acted.matched), (1, 1));
        assert!((f.acted.median_rel_err - 0.05).abs() < 1e-9, "{f:?}");
        // A seen pageview is used once: the same truth pageview twice finds one match.
        let twice = [truth[0].clone(), truth[0].clone()];
        let one = [seen[1].clone()];
        assert_eq!(compare(&twice, &one).all.matched, 1);
        // Nothing acted on: the subset is empty, its errors 0.
        let none = compare(&twice, &[]);
        assert_eq!((none.all.truth_pageviews, none.all.matched, none.acted.truth_pageviews, none.seen), (2, 0, 0, 0));
    }
}
