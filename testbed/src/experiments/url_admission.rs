//! url-admission (issue 26, 003 Paper D): resource-aware admission at the request. An open-loop
//! arrival rate of pageviews well past the farm's capacity, with a DB-heavy mix: half the
//! pageviews are TPC-W's best-sellers and search results, whose database queries (over a
//! catalogue of [`ITEMS`] books) make them cost the farm three times the others. Three arms: the
//! unmanaged farm; `syn-police` (003's SYN policing: a LIMIT SYN at the farm's capacity for
//! the mix as the lab reckons it, blind to what a connection will ask for);
//! `resource-aware` (`GROUP db` of those URLs with `SLA GROUP db RT.P95 < 500ms`: the SLA
//! controller holds the group's requests to the rate at which its server time, measured from
//! the wire, meets the target, and answers the excess with a 503). Judged from the browsers'
//! clocks: the whole pageviews (every object fetched, none failed) completed per second over
//! the overload's steady part, and their 95th percentile.

use std::path::Path;

use anyhow::Result;
use serde_json::{json, Map, Value};
use sim_clients::browser::{Arrivals, GroundTruth};

use super::{arm, arm_in, num, rlm_clean, run_arms, with_rlm, Checks, Experiment, Results};
use crate::arm::{read_truth, ArmResult, ArmSpec};
use crate::farm::site::PageType;
use crate::runner::tpcw_pages;
use crate::stats::{mean, percentile_sorted};

/// The group's target: its server time's 95th percentile under this.
pub const TARGET_S: f64 = 0.5;
/// The share of the pageviews in the DB-heavy group.
pub const DB_SHARE: f64 = 0.5;
/// What a pageview of the DB-heavy mix costs the farm on the reference machine: its CPU time
/// over the pages it served, unmanaged and overloaded (the first quick run, 2026-11-27: 6.8 s
/// for 602 pages, 11.3 ms; a TPC-W browsing-mix pageview costs
/// [`crate::calibrate::REFERENCE_CPU_PER_PAGEVIEW_MS`], and one outside the group about as
/// much: the group's pageviews cost about three times it).
pub const MIX_CPU_PER_PAGEVIEW_MS: f64 = 11.3;
/// The arrival rate, in the mix's capacities ([`mix_capacity_pv_s`]): the pageviews outside the
/// group alone load the farm to about three quarters of its quota.
pub const LOAD: f64 = 3.0;

/// The farm's capacity in pageviews of the DB-heavy mix per second, as the lab reckons it.
pub fn mix_capacity_pv_s(cores: f64) -> f64 {
    cores * 1e3 / MIX_CPU_PER_PAGEVIEW_MS
}
/// The bookstore's catalogue: ten times the other experiments', so that a search (a scan of
/// every title) costs the farm several times what a home page does.
pub const ITEMS: u32 = 100_000;
/// The URLs of the group.
const DB_PAGES: [PageType; 2] = [PageType::BestSellers, PageType::SearchResults];

/// (seconds of arrivals, seconds before the steady part, the farm's cores, the browsers in the pool).
fn shape(quick: bool) -> (f64, f64, f64, u32) {
    if quick {
        (30.0, 10.0, 0.12, 600)
    } else {
        (90.0, 20.0, 0.12, 600)
    }
}

/// TPC-W's browsing mix with its two DB-heavy pages scaled to [`DB_SHARE`] of the pageviews.
pub fn db_heavy_pages() -> Vec<(String, f64)> {
    let is_db = |p: &str| DB_PAGES.iter().any(|d| p.starts_with(d.path()));
    let pages = tpcw_pages();
    let (db, rest): (f64, f64) = pages.iter().fold((0.0, 0.0), |(d, r), (p, w)| if is_db(p) { (d + w, r) } else { (d, r + w) });
    let scale = DB_SHARE / (1.0 - DB_SHARE) * rest / db;
    pages.into_iter().map(|(p, w)| if is_db(&p) { (p, w * scale) } else { (p, w) }).collect()
}

/// The rules' group: the DB-heavy URLs.
fn group_decl() -> String {
    let conds: Vec<String> = DB_PAGES.iter().map(|p| format!("URL == \"{}*\"", p.path())).collect();
    format!("GROUP db IF {}\n", conds.join(" OR "))
}

pub struct UrlAdmission;

impl Experiment for UrlAdmission {
    fn name(&self) -> &'static str {
        "url-admission"
    }

    fn note(&self) -> &'static str {
        "Issue 26 (003 Paper D): open-loop pageview arrivals at three times the farm's capacity for the mix (as the lab reckons it), \
        half of them TPC-W's DB-heavy best-sellers and search results (over 100,000 books), on a LAN. unmanaged; syn-police (LIMIT SYN at that capacity); \
        resource-aware (GROUP db of those URLs, SLA GROUP db RT.P95 < 500ms: the controller holds the group's requests to the rate \
        its server time allows, 503 for the rest). Judged by whole pageviews completed per second and their p95, from the browsers' clocks."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (duration, _, cores, pool) = shape(quick);
        let c = mix_capacity_pv_s(cores);
        let base = |name: &str| {
            let mut a = arm(name, pool, duration, &[], false, cores);
            a.arrivals = Some(Arrivals { steps: vec![(0.0, LOAD * c)] });
            a.pages = Some(db_heavy_pages());
            a.farm.items = ITEMS;
            a
        };
        // Two connections a pageview: the SYN rate at which the farm keeps up with the mix.
        let syn_rate = (2.0 * c).round();
        let burst = (syn_rate / 4.0).ceil();
        vec![
            base("unmanaged"),
            with_rlm(base("syn-police"), format!("IF IP.SRC == *.*.*.* THEN LIMIT SYN {syn_rate}/s BURST {burst}\n"), &[]),
            with_rlm(base("resource-aware"), format!("{}SLA GROUP db RT.P95 < {:.0}ms\n", group_decl(), TARGET_S * 1e3), &[]),
        ]
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let (duration, warm, cores, _) = shape(quick);
        let mut m = Map::new();
        m.insert("target_s".into(), TARGET_S.into());
        m.insert("capacity_pv_s".into(), mix_capacity_pv_s(cores).into());
        m.insert("arrival_rate_pv_s".into(), (LOAD * mix_capacity_pv_s(cores)).into());
        m.insert("window_s".into(), json!([warm, duration]));
        m
    }

    /// Each arm run, then its figures over the steady part from its ground truth.
    fn run(&self, quick: bool, prefix: &str, specs: &[ArmSpec], out: &Path) -> Result<Vec<ArmResult>> {
        let mut results = run_arms(self.name(), prefix, specs, out)?;
        let (duration, warm, ..) = shape(quick);
        for r in &mut results {
            let pvs = read_truth(&r.ground_truth)?;
            r.windows = Some(steady(&pvs, warm, duration));
        }
        Ok(results)
    }

    fn check(&self, r: &Value, _all: &Results, c: &mut Checks) {
        judge(self.name(), r, c)
    }
}

/// The figures of the pageviews that ended between `from` and `to` seconds after the first one
/// began: whole ones (every object fetched, not failed) per second, their p95 and mean, those of
/// the DB group among them, and the failed ones (a 503 from rlm is one).
pub fn steady(pvs: &[GroundTruth], from: f64, to: f64) -> Value {
    let Some(t0) = pvs.iter().map(|p| p.start_ts).min_by(f64::total_cmp) else { return json!({}) };
    let span = (to - from).max(1e-9);
    let in_window: Vec<&GroundTruth> = pvs.iter().filter(|p| (from..to).contains(&(p.end_ts - t0))).collect();
    let whole: Vec<&GroundTruth> = in_window.iter().copied().filter(|p| !p.failed && p.objects_fetched >= p.objects_expected).collect();
    let mut rts: Vec<f64> = whole.iter().map(|p| p.rt_s).collect();
    rts.sort_by(f64::total_cmp);
    let p95 = (!rts.is_empty()).then(|| percentile_sorted(&rts, 95.0));
    let mean_s = (!rts.is_empty()).then(|| mean(&rts));
    let is_db = |p: &GroundTruth| DB_PAGES.iter().any(|d| p.url.starts_with(d.path()));
    let begun = pvs.iter().filter(|p| (from..to).contains(&(p.start_ts - t0))).count();
    json!({
        "window_s": [from, to],
        "begun_per_s": begun as f64 / span,
        "completed_per_s": whole.len() as f64 / span,
        "completed_db_per_s": whole.iter().filter(|p| is_db(p)).count() as f64 / span,
        "failed_per_s": in_window.iter().filter(|p| p.failed).count() as f64 / span,
        "p95_s": p95,
        "mean_s": mean_s,
    })
}

/// url-admission's checks.
pub fn judge(exp: &str, r: &Value, c: &mut Checks) {
    let fig = |a: &str, f: &str| num(&arm_in(r, a)["windows"][f]);
    let arrivals = num(&r["arrival_rate_pv_s"]);
    let un = fig("unmanaged", "completed_per_s");
    if !c.regime(
        exp,
        un < 0.8 * arrivals,
        format!("unmanaged, the farm completed {un:.1} whole pageviews a second of the {arrivals:.1} arriving (under 80%: overloaded)"),
    ) {
        return;
    }
    let ra = fig("resource-aware", "completed_per_s");
    c.v.push((ra >= 1.4 * un, format!("{exp}/resource-aware: {ra:.1} whole pageviews completed a second, unmanaged {un:.1} (at least 40% more)")));
    let (ra_p95, un_p95) = (fig("resource-aware", "p95_s"), fig("unmanaged", "p95_s"));
    c.v.push((
        ra_p95 * 5.0 <= un_p95,
        format!("{exp}/resource-aware: the completed pageviews' p95 {ra_p95:.2} s, unmanaged {un_p95:.2} s (at least 5 times lower)"),
    ));
    c.notes.push(format!(
        "{exp}/syn-police: {:.1} whole pageviews a second, p95 {:.2} s; resource-aware's DB pages completed {:.1}/s, failed (503) {:.1}/s",
        fig("syn-police", "completed_per_s"),
        fig("syn-police", "p95_s"),
        fig("resource-aware", "completed_db_per_s"),
        fig("resource-aware", "failed_per_s"),
    ));
    for name in ["syn-police", "resource-aware"] {
        rlm_clean(&mut c.v, exp, &arm_in(r, name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_half_db_and_the_group_matches_its_urls() {
        let pages = db_heavy_pages();
        let total: f64 = pages.iter().map(|(_, w)| w).sum();
        let db: f64 = pages.iter().filter(|(p, _)| p.starts_with("/best_sellers") || p.starts_with("/execute_search")).map(|(_, w)| w).sum();
        assert!((db / total - DB_SHARE).abs() < 1e-9, "{db} of {total}");
        let rs = rules::compile("t.rlm", &format!("{}SLA GROUP db RT.P95 < 500ms\n", group_decl())).expect("the rules compile");
        assert_eq!(rs.slas().len(), 1);
    }

    fn pv(url: &str, start: f64, rt: f64, failed: bool) -> GroundTruth {
        GroundTruth {
            client: "10.4.0.1".into(),
            class: "LOW".into(),
            url: url.into(),
            start_ts: 1000.0 + start,
            end_ts: 1000.0 + start + rt,
            rt_s: rt,
            objects_fetched: 1,
            objects_expected: 1,
            syn_retransmissions: 0,
            failed_connections: 0,
            failed,
        }
    }

    #[test]
    fn steady_counts_whole_pageviews_ended_in_the_window() {
        let pvs = vec![
            pv("/home", 0.0, 0.5, false),
            pv("/best_sellers?subject=X", 1.0, 0.5, false),
            pv("/execute_search?q=1", 2.0, 0.1, true),
            pv("/home", 3.0, 10.0, false),
        ];
        let s = steady(&pvs, 1.0, 3.0);
        assert_eq!(num(&s["completed_per_s"]), 0.5, "{s}");
        assert_eq!(num(&s["completed_db_per_s"]), 0.5);
        assert_eq!(num(&s["failed_per_s"]), 0.5);
        assert_eq!(num(&s["p95_s"]), 0.5);
    }

    #[test]
    fn judged_only_once_the_regime_is_reached() {
        let arm = |name: &str, done: f64, p95: f64| {
            json!({"name": name, "windows": {"completed_per_s": done, "p95_s": p95, "completed_db_per_s": 1.0, "failed_per_s": 1.0},
                   "rlm": {"exit_code": 0, "clean_exit": true, "installed": true, "reports_lost": 0.0}})
        };
        let run = |un: f64, ra: f64, ra_p95: f64| json!({"arrival_rate_pv_s": 40.0, "arms": [arm("unmanaged", un, 10.0), arm("syn-police", 20.0, 1.0), arm("resource-aware", ra, ra_p95)]});
        let check = |r: &Value| {
            let mut c = Checks::default();
            UrlAdmission.check(r, &Results::new(), &mut c);
            c.v
        };
        let v = check(&run(20.0, 30.0, 1.0));
        assert!(v.iter().all(|(ok, _)| *ok), "{v:?}");
        let v = check(&run(39.0, 60.0, 1.0));
        assert_eq!(v.len(), 1, "not overloaded: not judged further {v:?}");
        let v = check(&run(20.0, 25.0, 3.0));
        assert_eq!(v.iter().filter(|(ok, _)| !ok).count(), 2, "{v:?}");
    }
}
