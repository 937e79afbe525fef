//! sites (issue 25): a hosting provider's SLA per site. Two sites on one farm behind one address,
//! over HTTPS: the HIGH group's browsers (10.4/16) ask for shop.example, the LOW group's
//! (10.5/16) for news.example, under syn-throttle's heavy load. rlm's classes are the sites, by
//! the SNI (`CLASS SHOP IF SITE == shop.example`): no address names them. The rule drops the
//! SYNs of news.example's clients (a client's class at the SYN is its latest site's) while
//! shop.example's mean response time is above its target, so that shop.example meets it and
//! news.example pays.

use serde_json::{Map, Value};

use super::syn_throttle::{throttle_target_s, SynThrottle};
use super::syn_throttle_tls::SynThrottleTls;
use super::{arm_in, class_mean, class_mean_steady, farm_busy, hold_tolerance, num, rlm_clean, Checks, Experiment, Results, OVERLOADED_BUSY};
use crate::arm::ArmSpec;

/// The two sites, by client group (10.4/16 first).
pub const SITES: [&str; 2] = ["shop.example", "news.example"];

/// The classes, named as the browsers' groups are.
pub const CLASSES: [&str; 2] = ["SHOP", "NEWS"];

/// The rules: classes by site; news.example's clients' SYNs dropped while shop.example's mean
/// is above `target_s`.
pub fn sites_rules(target_s: f64) -> String {
    format!("CLASS SHOP IF SITE == {}\nCLASS NEWS IF SITE == {}\nIF CLASS == NEWS AND RT.SHOP > {target_s:.1}s THEN DROP SYN\n", SITES[0], SITES[1])
}

pub struct Sites;

impl Experiment for Sites {
    fn name(&self) -> &'static str {
        "sites"
    }

    fn note(&self) -> &'static str {
        "Two sites behind one address over HTTPS, under syn-throttle's heavy load: the 10.4/16 browsers ask for \
        shop.example, the 10.5/16 ones for news.example; rlm's classes are the sites by their SNI, and it drops the SYNs \
        of news.example's clients while shop.example's mean response time is above its target."
    }

    /// Its rule holds a class at a target under the heavy load: a calibration of the last minutes.
    fn calibration_max_age(&self) -> Option<std::time::Duration> {
        Some(super::HOLD_CALIBRATION_MAX_AGE)
    }

    /// syn-throttle-tls's arms (unmanaged, then managed with the sites' rules; the full run's
    /// farm scaled for HTTPS's cost as there), each group asking for its site.
    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let target = throttle_target_s(quick);
        SynThrottleTls
            .arms(quick)
            .into_iter()
            .map(|mut a| {
                a.classes = CLASSES.iter().map(|c| c.to_string()).collect();
                if let Some(r) = a.rlm.as_mut() {
                    r.rules = sites_rules(target);
                }
                a.farm.tls_sites = SITES.iter().map(|s| s.to_string()).collect();
                if let Some(h) = a.https.as_mut() {
                    h.group_sites = SITES.iter().map(|s| s.to_string()).collect();
                }
                a
            })
            .collect()
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        SynThrottle.params(quick)
    }

    /// The regime (unmanaged, shop.example over its target on an overloaded farm; rlm dropped
    /// news.example's clients' SYNs), then shop.example near its target (as syn-throttle's
    /// tolerance: 40% quick, 15% full), news.example pays, rlm clean.
    fn check(&self, st: &Value, _all: &Results, c: &mut Checks) {
        let target = num(&st["target_s"]);
        let un_shop = class_mean(st, "unmanaged", "SHOP");
        let (un_news, th_news) = (class_mean(st, "unmanaged", "NEWS"), class_mean(st, "syn-throttle", "NEWS"));
        let a = arm_in(st, "syn-throttle");
        let drops = num(&a["rlm"]["syn_drops"]["NEWS"]);
        let busy = farm_busy(&arm_in(st, "unmanaged"));
        let what = format!(
            "unmanaged, the farm {:.0}% busy and shop.example's mean {un_shop:.2} s against the target {target:.2} s; the rule dropped {drops} SYNs of news.example's clients",
            busy * 100.0
        );
        if !c.regime("sites", un_shop > target && busy >= OVERLOADED_BUSY && drops > 0.0, what) {
            return;
        }
        let steady = class_mean_steady(st, "syn-throttle", "SHOP");
        let tol = hold_tolerance(st);
        c.v.push((
            (steady - target).abs() <= tol * target,
            format!("sites: shop.example's mean {steady:.2} s after the ramp within {:.0}% of the target {target:.2} s", tol * 100.0),
        ));
        c.v.push((th_news > un_news, format!("sites: news.example pays: mean {th_news:.2} s against {un_news:.2} s unmanaged")));
        rlm_clean(&mut c.v, "sites", &a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sites_behind_one_address_one_per_group() {
        for quick in [true, false] {
            let farms = |arms: Vec<ArmSpec>| arms.iter().map(|a| (a.name.clone(), a.duration_s, a.farm.cpu_cores)).collect::<Vec<_>>();
            assert_eq!(farms(Sites.arms(quick)), farms(SynThrottleTls.arms(quick)), "syn-throttle-tls's arms and farm");
        }
        for a in Sites.arms(true) {
            assert_eq!(a.class_names(), CLASSES);
            assert_eq!(a.farm.tls_sites, SITES);
            let h = a.https.as_ref().expect("over HTTPS");
            assert_eq!((h.site.as_str(), h.group_sites.as_slice(), h.h2), (SITES[0], &SITES.map(String::from)[..], false));
        }
        let managed = &Sites.arms(true)[1];
        let rules = &managed.rlm.as_ref().expect("rlm inline").rules;
        assert!(rules::compile("sites.rlm", rules).is_ok_and(|r| r.classes_by_site()), "{rules}");
        assert!(Sites.arms(true)[0].rlm.is_none());
    }

    #[test]
    fn judged_only_once_the_regime_is_reached() {
        let arm = |name: &str, shop: f64, news: f64, drops: f64| {
            let bucket = |t: f64| serde_json::json!({"t_s": t, "span_s": 10.0, "by_class": {"SHOP": {"count": 100, "mean_s": shop}}});
            serde_json::json!({"name": name, "duration_s": 60.0, "config": {"farm": {"cpu_cores": 0.12}, "think_mean_s": 7.0, "duration_s": 60.0},
                "timeline": [bucket(10.0), bucket(20.0)],
                "farm_usage": {"load_cpu_s": 7.0},
                "pageviews": {"by_class": {"SHOP": {"mean_s": shop}, "NEWS": {"mean_s": news}}},
                "rlm": {"syn_drops": {"NEWS": drops}, "clean_exit": true, "installed": true, "reports_lost": 0}})
        };
        let check = |un_shop: f64, shop: f64, news: f64| {
            let r = serde_json::json!({"quick": true, "target_s": 1.5, "arms": [arm("unmanaged", un_shop, 4.0, 0.0), arm("syn-throttle", shop, news, 500.0)]});
            let mut c = Checks::default();
            Sites.check(&r, &Results::new(), &mut c);
            c.v
        };
        let v = check(3.5, 1.6, 8.0);
        assert!(v.iter().all(|(ok, _)| *ok), "{v:?}");
        // shop.example 60% over its target, or news.example not paying: fails.
        assert!(check(3.5, 2.4, 8.0).iter().any(|(ok, l)| !ok && l.contains("shop.example's mean")));
        assert!(check(3.5, 1.6, 3.0).iter().any(|(ok, l)| !ok && l.contains("news.example pays")));
        // shop.example meets its target unmanaged: the regime fails, nothing else is judged.
        let v = check(1.2, 1.0, 8.0);
        assert!(v.len() == 1 && !v[0].0, "{v:?}");
    }
}
