//! fast-syn: 004 Figure 16, syn-throttle's rule with fast SYN and SYN/ACK retransmission for
//! everyone, halted for LOW while its SYNs are dropped.

use serde_json::{Map, Value};

use super::syn_throttle::{throttle_rules, throttle_run, throttle_target_s};
use super::{
    arm, fast_syn_farm, injected, live_fidelity_note, machine_steady, num, on_farm, rlm_clean, scale, with_rlm, Checks, Experiment, Results,
    CLASS_RULES, WAN_80_2,
};
use crate::arm::ArmSpec;

/// fast-syn's and think-gap's release of held SYNs, per second: about a third of the pageviews
/// the farm serves at the heavy load (measured: 24 a second in the quick run, 66 to 73 on the
/// full run's farm).
pub fn fast_release_per_s(quick: bool) -> u32 {
    if quick {
        8
    } else {
        20
    }
}

/// The gap of fast-syn's and think-gap's FAST SYN + SYN/ACK (004 Figures 16 and 17).
pub const FAST_SYN_GAP: &str = "500ms";

/// 004 Figure 16: syn-throttle's rule with fast SYN and SYN/ACK retransmission for everyone,
/// halted for LOW while its SYNs are dropped.
pub fn fast_syn_rules(target_s: f64) -> String {
    format!(
        "{CLASS_RULES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP {FAST_SYN_GAP}\n\
         IF IP.SRC != 10.4.*.* AND RT.HIGH > {target_s:.1}s THEN\n  DROP SYN\n  HALT FAST SYN\n"
    )
}

/// An arm of fast-syn or think-gap: syn-throttle's heavy load with rlm inline and these rules.
pub fn fast_rlm(name: &str, rules: String, quick: bool) -> ArmSpec {
    let (_, heavy, _, cores) = scale(quick);
    let (tdur, _) = throttle_run(quick);
    // fast-syn and think-gap: the same load with a 1 s class window, so that the rule lets go
    // within a second of HIGH coming back under its target (the moment 004 resumes LOW's fast
    // retransmissions), and held SYNs released at a third of the pageviews the farm serves (24
    // a second in the quick run) rather than rlm's default 20 a second.
    // The farm: see `fast_syn_farm`.
    let release = fast_release_per_s(quick).to_string();
    let a = with_rlm(arm(name, heavy, tdur, &WAN_80_2, false, cores), rules, &["--class-window", "1", "--fast-release-per-s", &release]);
    on_farm(a, fast_syn_farm(quick, heavy))
}

pub struct FastSyn;

impl Experiment for FastSyn {
    fn name(&self) -> &'static str {
        "fast-syn"
    }

    fn note(&self) -> &'static str {
        "004 Figure 16: syn-throttle's heavy load and rule (arm syn-throttle) against the same rule with fast SYN \
        and SYN/ACK retransmission for everyone every 500 ms, halted for LOW while its SYNs are dropped (arm \
        fast-syn): a LOW SYN dropped while HIGH is slow is resent by rlm once the rule lets go, instead of its \
        client waiting out 3 s and 9 s timeouts and failing at 21 s. The full run alternates the arms in two \
        rounds, A B B A (`-2`: the second round), and judges each kind pooled over its rounds."
    }

    /// Its rule holds a class at a target under the heavy load: a calibration of the last minutes.
    fn calibration_max_age(&self) -> Option<std::time::Duration> {
        Some(super::HOLD_CALIBRATION_MAX_AGE)
    }

    /// The quick run: `syn-throttle`, then `fast-syn`. The full run alternates them in two
    /// rounds, A B B A, each arm half the run (`syn-throttle`, `fast-syn`, `fast-syn-2`,
    /// `syn-throttle-2`), and judges each pooled over its rounds: a farm that works faster or
    /// slower as the shared machine's load changes over the 12 minutes weighs on both alike.
    /// (Run one after the other, the arms' farms did 5 to 12% more or less work a page from one
    /// arm to the next, both ways, at the same quota and 98% busy.)
    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let target = throttle_target_s(quick);
        let throttle = |name: &str| fast_rlm(name, throttle_rules(target), quick);
        let fast = |name: &str| fast_rlm(name, fast_syn_rules(target), quick);
        if quick {
            return vec![throttle("syn-throttle"), fast("fast-syn")];
        }
        let half = |mut a: ArmSpec| {
            a.duration_s /= 2.0;
            a
        };
        vec![half(throttle("syn-throttle")), half(fast("fast-syn")), half(fast("fast-syn-2")), half(throttle("syn-throttle-2"))]
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("target_s".into(), throttle_target_s(quick).into());
        m.insert("fast_gap".into(), FAST_SYN_GAP.into());
        m.insert("class_window_s".into(), 1.into());
        m.insert("release_per_s".into(), fast_release_per_s(quick).into());
        m
    }

    /// 004 Figure 16: with fast SYN retransmission, halted while LOW's SYNs are dropped, LOW's
    /// dropped connects are resent by rlm when the rule lets go instead of failing at 21 s.
    fn check(&self, fs: &Value, _all: &Results, c: &mut Checks) {
        let (st, fa) = (rounds_of(fs, "syn-throttle"), rounds_of(fs, "fast-syn"));
        // rlm measured live whether or not its rule was provoked: shown in any case.
        for a in st.iter().chain(&fa) {
            live_fidelity_note(&mut c.notes, "fast-syn", a);
        }
        // The full run's four arms are compared pooled; a machine that changed speed during its
        // twelve minutes would decide that comparison (docs/experiments.md, 2026-11-28).
        if !fs["quick"].as_bool().unwrap_or(false) {
            machine_steady(&mut c.v, "fast-syn", fs);
        }
        let low_failed = |a: &Value| num(&a["pageviews"]["by_class"]["LOW"]["failed"]);
        let (st_failed, fa_failed) = (pooled_sum(&st, low_failed), pooled_sum(&fa, low_failed));
        let drops = pooled_sum(&st, |a| num(&a["rlm"]["syn_drops"]["LOW"]));
        let what = format!(
            "syn-throttle's rule alone dropped {drops} LOW SYNs and left {st_failed} LOW pageviews with a failed connection (at least 10 to judge their fall)"
        );
        if !c.regime("fast-syn", drops > 0.0 && st_failed >= 10.0, what) {
            return;
        }
        let v = &mut c.v;
        v.push((
            fa_failed <= 0.10 * st_failed,
            format!(
                "fast-syn: LOW's pageviews with a failed connection fall by {:.0}%: {fa_failed:.0} against {st_failed:.0} under \
                 syn-throttle's rule alone (at least 90%)",
                (1.0 - fa_failed / st_failed) * 100.0
            ),
        ));
        // The target (LOW better) is judged on the full run. The quick run's two 60 s arms differ
        // by up to 8% either way from run to run (their rule holds and lets go every few
        // seconds), so it guards against LOW getting worse by more than that.
        let quick = fs["quick"].as_bool().unwrap_or(false);
        let (st_low, fa_low) = (pooled_mean(&st, "LOW"), pooled_mean(&fa, "LOW"));
        let (bound, what) = if quick { (1.10, "at most 10% worse (quick)") } else { (1.0, "better") };
        v.push((
            fa_low < st_low * bound,
            format!(
                "fast-syn: LOW's mean {what}: {fa_low:.2} s against {st_low:.2} s under syn-throttle's rule alone ({:.0}% better; 004: 23%)",
                (1.0 - fa_low / st_low) * 100.0
            ),
        ));
        let (st_high, fa_high) = (pooled_mean(&st, "HIGH"), pooled_mean(&fa, "HIGH"));
        v.push((
            fa_high <= 1.10 * st_high,
            format!("fast-syn: HIGH's mean {fa_high:.2} s at most 10% above its {st_high:.2} s under syn-throttle's rule alone"),
        ));
        let sent = pooled_sum(&fa, |a| injected(a, "fast_syns_sent"));
        v.push((sent > 0.0, format!("fast-syn/fast-syn: rlm resent {sent} SYNs to the farm")));
        for a in st.iter().chain(&fa) {
            rlm_clean(v, "fast-syn", a);
        }
    }
}

/// The arms of one kind in a fast-syn result: `name`, and `name-2` on the full run.
fn rounds_of(fs: &Value, name: &str) -> Vec<Value> {
    let second = format!("{name}-2");
    fs["arms"].as_array().into_iter().flatten().filter(|a| a["name"] == name || a["name"] == second.as_str()).cloned().collect()
}

/// A class's mean response time over rounds: their means weighted by their pageviews.
fn pooled_mean(arms: &[Value], class: &str) -> f64 {
    let (mut n, mut sum) = (0.0, 0.0);
    for a in arms {
        let c = &a["pageviews"]["by_class"][class];
        n += num(&c["count"]);
        sum += num(&c["count"]) * num(&c["mean_s"]);
    }
    sum / n
}

/// A count summed over rounds.
fn pooled_sum(arms: &[Value], f: impl Fn(&Value) -> f64) -> f64 {
    arms.iter().map(f).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::syn_throttle::SynThrottle;
    use crate::experiments::testing::synthetic_arms;

    #[test]
    fn arms_and_rules() {
        let names = |specs: &[ArmSpec]| specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        let rules = |s: &ArmSpec| s.rlm.as_ref().expect("rlm inline").rules.clone();

        // fast-syn: syn-throttle's managed arm with a 1 s class window, and the same rule with
        // fast retransmission; the full run's farm bound by its CPU, with a slot for every
        // connection.
        let st = SynThrottle.arms(true);
        let fs = FastSyn.arms(true);
        assert_eq!(names(&fs), ["syn-throttle", "fast-syn"]);
        let mut throttle = st[1].clone();
        throttle.rlm.as_mut().unwrap().extra_args = ["--class-window", "1", "--fast-release-per-s", "8"].map(String::from).to_vec();
        assert_eq!(serde_json::to_value(&fs[0]).unwrap(), serde_json::to_value(&throttle).unwrap());
        let ff = FastSyn.arms(false);
        assert_eq!(names(&ff), ["syn-throttle", "fast-syn", "fast-syn-2", "syn-throttle-2"]);
        assert!(ff.iter().all(|a| a.duration_s == 150.0), "each arm half of the 300 s run");
        assert_eq!((ff[1].clients(), ff[1].farm.max_clients, ff[1].farm.cpu_cores), (600, 1200, Some(0.28)));
        for a in &ff[1..] {
            assert_eq!(serde_json::to_value(&ff[0].farm).unwrap(), serde_json::to_value(&a.farm).unwrap());
        }
        assert_eq!(rules(&ff[0]), rules(&ff[3]));
        assert_eq!(rules(&ff[1]), rules(&ff[2]));
        assert_eq!(ff[1].rlm.as_ref().unwrap().extra_args, ["--class-window", "1", "--fast-release-per-s", "20"]);
        let fast = format!(
            "{CLASS_RULES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 1.5s THEN\n  DROP SYN\n  HALT FAST SYN\n"
        );
        assert_eq!(rules(&fs[1]), fast);
        assert_eq!(fs[1].rlm.as_ref().unwrap().extra_args, ["--class-window", "1", "--fast-release-per-s", "8"]);
        assert_eq!((fs[1].clients(), fs[1].duration_s), (240, 60.0));
    }

    #[test]
    fn the_full_run_is_judged_on_its_rounds_pooled() {
        let arm = |name: &str, high: (u64, f64), low: (u64, f64, u64), drops: f64, sent: f64| {
            serde_json::json!({"name": name, "generator_bottleneck": false,
                "pageviews": {"count": high.0 + low.0, "by_class": {
                    "HIGH": {"count": high.0, "mean_s": high.1, "failed": 0},
                    "LOW": {"count": low.0, "mean_s": low.1, "failed": low.2}}},
                "rlm": {"exit_code": 0, "clean_exit": true, "installed": true, "rules_left": [], "reports_lost": 0.0,
                        "injected": {"fast_syns_sent": sent}, "syn_drops": {"LOW": drops}}})
        };
        // The first round has fast-syn's LOW worse, the second better; pooled, 600 LOW pageviews
        // at 3.0 s (pooled 3.2 and 2.8) against 3.5 s (pooled 3.0 and 4.0).
        let r = serde_json::json!({"quick": false, "arms": [
            arm("syn-throttle", (300, 1.5), (300, 3.0, 12), 400.0, 0.0),
            arm("fast-syn", (300, 1.5), (300, 3.2, 0), 380.0, 200.0),
            arm("fast-syn-2", (300, 1.6), (300, 2.8, 1), 390.0, 210.0),
            arm("syn-throttle-2", (300, 1.5), (300, 4.0, 13), 410.0, 0.0)]});
        let mut c = Checks::default();
        FastSyn.check(&r, &Results::new(), &mut c);
        let has = |s: &str| c.v.iter().find(|(_, l)| l.contains(s)).unwrap_or_else(|| panic!("no {s} in {:#?}", c.v)).0;
        assert!(has("syn-throttle's rule alone dropped 810 LOW SYNs and left 25 LOW pageviews"));
        assert!(has("fast-syn: LOW's pageviews with a failed connection fall by 96%: 1 against 25"));
        assert!(has("fast-syn: LOW's mean better: 3.00 s against 3.50 s"));
        assert!(has("fast-syn: HIGH's mean 1.55 s at most 10% above its 1.50 s"));
        assert!(has("fast-syn/fast-syn: rlm resent 410 SYNs"));
        assert_eq!(c.v.iter().filter(|(ok, l)| *ok && l.contains("rlm inline exited 0")).count(), 4);
        // No probe in these arms: nothing said of the machine.
        assert!(!c.v.iter().any(|(_, l)| l.contains("kept its speed")), "{:#?}", c.v);
        // Probed: steady (1.00 to 1.10 ms) passes; a machine that slowed by 60% fails.
        let probed = |ms: [f64; 4], calibration: Option<f64>| {
            let mut r = r.clone();
            r["calibration"] = serde_json::json!({"machine_probe_ms": calibration});
            for (a, ms) in r["arms"].as_array_mut().unwrap().iter_mut().zip(ms) {
                a["machine_speed"] = serde_json::json!({"median_ms": ms, "samples_ms": [ms]});
            }
            let mut c = Checks::default();
            FastSyn.check(&r, &Results::new(), &mut c);
            c.v.into_iter().find(|(_, l)| l.contains("kept its speed")).expect("a machine check")
        };
        let (ok, line) = probed([1.0, 1.05, 1.1, 1.02], None);
        assert!(
            ok && line.contains("syn-throttle 1.000 ms, fast-syn 1.050 ms, fast-syn-2 1.100 ms, syn-throttle-2 1.020 ms (")
                && line.contains("10% apart"),
            "{line}"
        );
        let (ok, line) = probed([1.0, 1.05, 1.2, 1.6], None);
        assert!(!ok && line.contains("60% apart"), "{line}");
        // The calibration's probe is said, not judged: the quotas were scaled at its speed.
        let (ok, line) = probed([1.0, 1.05, 1.1, 1.02], Some(2.0));
        assert!(ok && line.contains("syn-throttle-2 1.020 ms, and 2.000 ms at the calibration (") && line.contains("10% apart"), "{line}");
        // The second round alone would have made it worse: 3.2 against 3.0.
        let first: Vec<Value> = r["arms"].as_array().unwrap()[..2].to_vec();
        let mut c = Checks::default();
        FastSyn.check(&serde_json::json!({"quick": false, "arms": first}), &Results::new(), &mut c);
        assert!(c.v.iter().any(|(ok, l)| !ok && l.contains("fast-syn: LOW's mean better: 3.20 s against 3.00 s")), "{:#?}", c.v);
    }

    #[test]
    fn fast_syn_report_has_the_classes_and_rlm_counters() {
        let dir = std::env::temp_dir().join(format!("rlm-lab-report-fastsyn-{}", std::process::id()));
        let (arms, note) = synthetic_arms(&dir, &FastSyn);
        let md = crate::report::write(&dir, "fast-syn", true, &arms, None, note, &FastSyn.params(true)).unwrap();
        assert!(md.contains("| arm | class | pageviews | mean | p95 | > 3 s | failed |"), "{md}");
        assert!(md.contains("| fast-syn | LOW | 26 |"), "{md}");
        assert!(md.contains("| fast-syn | 12 | 7 | - | - | - | 30 | - |"), "{md}");
        assert!(md.contains("### Timeline"), "{md}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
