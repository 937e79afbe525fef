//! cookie-abort (issue 26, 003 Paper C): persistent connections overload a server whose workers
//! they hold. The farm keeps connections alive 15 s between requests (Apache's default) with
//! MaxClients 150 (each open connection holds a slot, idle or not); its CPU is ample. A third of
//! the browsers carry a cart cookie (HIGH, `Cookie: cart=1`). Unmanaged, the browsers' idle
//! connections hold every slot and the others wait in the listen queue or lose their SYNs; with
//! `IF NOT COOKIE.cart EXISTS THEN ABORT IDLE`, rlm closes the cartless browsers' connections a
//! second after their last response, cleanly for both ends, and keeps the carts'. Judged from
//! the browsers' clocks (response times, SYN retransmissions) and the farm's own count of the
//! connections reset under it, by client subnet.

use std::path::Path;

use anyhow::Result;
use serde_json::{json, Map, Value};

use super::{arm, arm_in, num, rlm_clean, run_arms, with_rlm, Checks, Experiment, Results, CLASS_RULES};
use crate::arm::{read_truth, ArmResult, ArmSpec};
use crate::stats::percentile_sorted;

/// The farm's keep-alive time (Apache's default).
pub const KEEPALIVE_S: f64 = 15.0;
/// The cart sessions' cookie.
pub const CART_COOKIE: &str = "cart=1";
/// The response time a pageview should stay under: the farm out of overload.
pub const GOAL_S: f64 = 2.0;

/// (browsers, seconds, the farm's cores): a third HIGH (with carts); two connections each, twice
/// MaxClients in all, the carts' alone two thirds of it.
fn shape(quick: bool) -> (u32, f64, f64) {
    if quick {
        (150, 60.0, 0.4)
    } else {
        (150, 180.0, 0.4)
    }
}

pub struct CookieAbort;

impl Experiment for CookieAbort {
    fn name(&self) -> &'static str {
        "cookie-abort"
    }

    fn note(&self) -> &'static str {
        "Issue 26 (003 Paper C): 150 thinking browsers on a LAN, a third (HIGH) with a cart cookie; the farm keeps connections \
        alive 15 s with MaxClients 150 and ample CPU, so idle persistent connections hold its slots. unmanaged; abort \
        (IF NOT COOKIE.cart EXISTS THEN ABORT IDLE: the cartless browsers' connections closed a second after their last response)."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (browsers, duration, cores) = shape(quick);
        let base = |name: &str| {
            let mut a = arm(name, browsers, duration, &[], false, cores);
            a.farm.keepalive_s = KEEPALIVE_S;
            a.cookies = vec![("HIGH".into(), CART_COOKIE.into())];
            a
        };
        vec![base("unmanaged"), with_rlm(base("abort"), format!("{CLASS_RULES}IF NOT COOKIE.cart EXISTS THEN ABORT IDLE\n"), &[])]
    }

    fn params(&self, _quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("goal_s".into(), GOAL_S.into());
        m.insert("keepalive_s".into(), KEEPALIVE_S.into());
        m
    }

    /// Each arm run, then its figures by class from its ground truth over the run after its
    /// first quarter (the browsers' ramp).
    fn run(&self, quick: bool, prefix: &str, specs: &[ArmSpec], out: &Path) -> Result<Vec<ArmResult>> {
        let mut results = run_arms(self.name(), prefix, specs, out)?;
        let (_, duration, _) = shape(quick);
        for r in &mut results {
            let pvs = read_truth(&r.ground_truth)?;
            let t0 = pvs.iter().map(|p| p.start_ts).min_by(f64::total_cmp).unwrap_or(0.0);
            let steady: Vec<_> = pvs.iter().filter(|p| p.start_ts - t0 >= duration / 4.0).collect();
            let mut by_class = Map::new();
            for class in ["HIGH", "LOW", "ALL"] {
                let mut rts: Vec<f64> = steady.iter().filter(|p| class == "ALL" || p.class == class).map(|p| p.rt_s).collect();
                rts.sort_by(f64::total_cmp);
                let n = rts.len();
                let p95 = (n > 0).then(|| percentile_sorted(&rts, 95.0));
                let retrans = steady.iter().filter(|p| (class == "ALL" || p.class == class) && p.syn_retransmissions > 0).count();
                by_class.insert(
                    class.into(),
                    json!({ "pageviews": n, "p95_s": p95, "over_goal": rts.iter().filter(|&&x| x > GOAL_S).count(), "with_syn_retransmissions": retrans }),
                );
            }
            r.windows = Some(Value::Object(by_class));
        }
        Ok(results)
    }

    fn check(&self, r: &Value, _all: &Results, c: &mut Checks) {
        judge(self.name(), r, c)
    }
}

/// cookie-abort's checks.
pub fn judge(exp: &str, r: &Value, c: &mut Checks) {
    let goal = num(&r["goal_s"]);
    let fig = |a: &str, class: &str, f: &str| num(&arm_in(r, a)["windows"][class][f]);
    let resets = |a: &str, subnet: &str| num(&arm_in(r, a)["farm_front"]["reset_by_subnet"][subnet]).max(0.0);
    let un_p95 = fig("unmanaged", "ALL", "p95_s");
    if !c.regime(exp, un_p95 > 2.0 * goal, format!("unmanaged, the pageviews' p95 {un_p95:.2} s (over twice the {goal:.1} s goal: the slots held)")) {
        return;
    }
    let (cart_resets, other_resets) = (resets("abort", "10.4"), resets("abort", "10.5"));
    c.v.push((
        cart_resets == 0.0 && other_resets > 0.0,
        format!(
            "{exp}/abort: no cart session's connection aborted (the farm saw {cart_resets} of HIGH's reset under it), the others' were ({other_resets} of LOW's)"
        ),
    ));
    let p95 = fig("abort", "ALL", "p95_s");
    let high = fig("abort", "HIGH", "p95_s");
    c.v.push((
        p95 <= goal && high <= goal,
        format!("{exp}/abort: out of overload: the pageviews' p95 {p95:.2} s, the carts' {high:.2} s (under {goal:.1} s; unmanaged {un_p95:.2} s)"),
    ));
    c.notes.push(format!(
        "{exp}: pageviews with a SYN retransmitted: unmanaged {}, abort {}; the farm's resets of the cartless: unmanaged {}",
        fig("unmanaged", "ALL", "with_syn_retransmissions"),
        fig("abort", "ALL", "with_syn_retransmissions"),
        resets("unmanaged", "10.5"),
    ));
    rlm_clean(&mut c.v, exp, &arm_in(r, "abort"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judged_only_once_the_regime_is_reached() {
        let arm = |name: &str, p95: f64, high: f64, resets: Value| {
            json!({"name": name, "windows": {"ALL": {"p95_s": p95, "with_syn_retransmissions": 3}, "HIGH": {"p95_s": high}},
                   "farm_front": {"reset_by_subnet": resets},
                   "rlm": {"exit_code": 0, "clean_exit": true, "installed": true, "reports_lost": 0.0}})
        };
        let run =
            |un: f64, p95: f64, resets: Value| json!({"goal_s": 2.0, "arms": [arm("unmanaged", un, un, json!({})), arm("abort", p95, p95, resets)]});
        let check = |r: &Value| {
            let mut c = Checks::default();
            CookieAbort.check(r, &Results::new(), &mut c);
            c.v
        };
        let v = check(&run(9.0, 1.0, json!({"10.5": 40})));
        assert!(v.iter().all(|(ok, _)| *ok), "{v:?}");
        assert_eq!(check(&run(1.0, 1.0, json!({"10.5": 40}))).len(), 1, "not overloaded: not judged further");
        // A cart aborted, or nothing aborted at all: failing.
        assert!(!check(&run(9.0, 1.0, json!({"10.4": 1, "10.5": 40})))[1].0);
        assert!(!check(&run(9.0, 1.0, json!({})))[1].0);
        assert!(!check(&run(9.0, 3.0, json!({"10.5": 40})))[2].0);
    }
}
