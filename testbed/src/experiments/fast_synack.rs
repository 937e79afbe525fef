//! fast-synack: 004 Table 1, rlm resending the server's SYN/ACK every gap until the client's ACK
//! comes, at the light load over the 80 ms / 2% WAN.

use anyhow::Result;
use serde_json::{Map, Value};

use super::{arm, arm_in, injected, live_fidelity_note, num, rlm_clean, scale, with_rlm, Checks, Experiment, Results, CLASS_RULES, WAN_80_2};
use crate::arm::{ArmResult, ArmSpec, Fidelity};

/// fast-synack's browsers and run per arm. The effect (004 Table 1) is on the share of pageviews
/// past 3 s, 4 to 6.5% at light load here (baseline-wan quick: 17 and 27 of 417): a quick run
/// at the usual light load (60 browsers, 45 s) has far too few of them to show a 25% cut.
/// Quick: 200 browsers, with the farm's CPU scaled with them (still the light load, about 60%
/// busy), for 75 s: about 2,300 pageviews, 90 to 150 of them past 3 s in the arm without fast
/// retransmission; three arms of 75 s and about 10 s of setup each take 4.5 minutes at most.
/// Full: the light load, 300 s.
pub fn fast_synack_scale(quick: bool) -> (u32, f64) {
    if quick {
        (200, 75.0)
    } else {
        (150, 300.0)
    }
}

/// fast-synack's SYN/ACK retransmission gaps (004 Table 1), an arm each (`gap-3s`, ...). 3 s is
/// the server's own SYN/ACK timeout: that arm runs rlm with the classes only, nothing acted on.
/// The quick run has the two its check compares (3 s and 500 ms); 1 s and 10 ms run in the full
/// one (make test's time: each quick arm costs about 85 s).
pub fn fast_synack_gaps(quick: bool) -> &'static [&'static str] {
    if quick {
        &["3s", "500ms"]
    } else {
        &["3s", "1s", "500ms", "10ms"]
    }
}

/// 004 Table 1: fast SYN/ACK retransmission for every client every `gap`; at 3 s (the server's
/// own timeout) nothing is acted on.
fn fast_synack_rules(gap: &str) -> String {
    if gap == "3s" {
        CLASS_RULES.into()
    } else {
        format!("{CLASS_RULES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN/ACK GAP {gap}\n")
    }
}

pub struct FastSynack;

impl Experiment for FastSynack {
    fn name(&self) -> &'static str {
        "fast-synack"
    }

    fn note(&self) -> &'static str {
        "004 Table 1: the light load over the 80 ms / 2% WAN of 004 Figure 12, rlm inline in every arm. With \
        FAST SYN/ACK GAP g rlm resends the server's SYN/ACK to the client every g until the client's ACK \
        comes, so a SYN/ACK lost in the WAN costs g instead of the server's 3 s timeout. Arm gap-3s is that \
        timeout alone (rlm with the classes only, nothing acted on); the quick run leaves out gap-1s and has \
        more browsers than the other light runs (the farm scaled with them) to count enough pageviews past \
        3 s. A SYN lost before it reaches rlm is out of its reach."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (light, _, _, cores) = scale(quick);
        let (clients, fdur) = fast_synack_scale(quick);
        // The farm's CPU scaled with the browsers: the same light load, about 60% busy.
        let fcores = cores * f64::from(clients) / f64::from(light);
        let fast_arm = |g: &str| {
            // gap-3s (rlm inline, nothing acted on) also captures the server's port, and the
            // capture replayed through the engine must match the clients' pageviews: rlm inline
            // is transparent when it acts on nothing (baseline-wan's managed arm checks the
            // same in make lab).
            let mut a = with_rlm(arm(&format!("gap-{g}"), clients, fdur, &WAN_80_2, g == "3s", fcores), fast_synack_rules(g), &[]);
            // Connection slots for every browser's two connections and their keep-alive: as
            // in 004's light runs, the farm drops no SYN, so what passes 3 s is the WAN's
            // doing. (With the default 150 slots, 200 browsers filled them: pages waited in
            // the listen backlog and SYNs fell at the farm, which no SYN/ACK resend helps:
            // measured 12.5% of pageviews past 3 s against 4% at 60 browsers.)
            a.farm.max_clients = a.farm.max_clients.max(3 * clients as usize);
            a
        };
        fast_synack_gaps(quick).iter().map(|g| fast_arm(g)).collect()
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("synack_gaps".into(), fast_synack_gaps(quick).into());
        m
    }

    fn fidelity(&self, arms: &[ArmResult]) -> Result<Option<Fidelity>> {
        Ok(super::fidelity::of_captured_arm(arms))
    }

    /// 004 Table 1: rlm resends the SYN/ACK every gap until the client's ACK comes, so a SYN/ACK
    /// lost in the WAN costs the gap instead of the server's 3 s, and fewer pageviews pass 3 s.
    fn check(&self, fs: &Value, _all: &Results, c: &mut Checks) {
        let v = &mut c.v;
        let (off, fast) = (arm_in(fs, "gap-3s"), arm_in(fs, "gap-500ms"));
        let pv = |a: &Value, field: &str| num(&a["pageviews"][field]);
        let (off_n, fast_n, off_gt3, fast_gt3) = (pv(&off, "count"), pv(&fast, "count"), pv(&off, "gt3s_frac"), pv(&fast, "gt3s_frac"));
        let off_slow = (off_gt3 * off_n).round();
        // A cut of a quarter is told from noise only among enough slow pageviews (the quick
        // run is sized for 90 to 150 of them in gap-3s).
        v.push((
            off_slow >= 50.0,
            format!("fast-synack/gap-3s: {off_slow:.0} pageviews past 3 s (at least 50, for a 25% cut to be told from noise)"),
        ));
        // The 25% target is judged on the full run (all four gaps, 300 s arms). A quick run's
        // arms hold about 100 pageviews past 3 s in gap-3s, half of which rlm can rescue (the
        // other half lost their SYN before rlm): measured 52% at 500 ms, but 24% at 10 ms in the
        // same run, so the quick run guards the mechanism at 20%.
        let full = fs["synack_gaps"].as_array().is_some_and(|g| g.len() >= 4);
        let (cut, judged) =
            if full { (0.25, "at least 25%") } else { (0.20, "at least 20% in a quick run; the 25% target is judged on the full run") };
        v.push((
            fast_gt3 <= (1.0 - cut) * off_gt3,
            format!(
                "fast-synack: gap-500ms cuts the share of pageviews past 3 s by {:.0}%: {:.2}% ({:.0} of {fast_n:.0}) against gap-3s's {:.2}% \
                 ({off_slow:.0} of {off_n:.0}) ({judged}; 004 Table 1: 28%)",
                (1.0 - fast_gt3 / off_gt3) * 100.0,
                fast_gt3 * 100.0,
                fast_gt3 * fast_n,
                off_gt3 * 100.0
            ),
        ));
        v.push((
            fast_n >= 0.97 * off_n,
            format!(
                "fast-synack: gap-500ms completed {fast_n:.0} pages against gap-3s's {off_n:.0} (at least as many, less 3% allowed for \
                 run-to-run noise)"
            ),
        ));
        v.push(super::fidelity::matched_check(&fs["fidelity"], "fast-synack/gap-3s (rlm inline, nothing acted on):", " in its capture"));
        for a in fs["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            let sent = injected(a, "fast_synacks_sent");
            if name == "gap-3s" {
                // Nothing acted on: the counter is 0, or absent from an rlm that sends nothing.
                v.push((sent.is_nan() || sent == 0.0, format!("fast-synack/gap-3s: rlm resent no SYN/ACK ({sent} reported; nothing acted on)")));
            } else {
                v.push((sent > 0.0, format!("fast-synack/{name}: rlm resent {sent} SYN/ACKs to the clients")));
            }
            rlm_clean(v, "fast-synack", a);
            live_fidelity_note(&mut c.notes, "fast-synack", a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::baseline_wan::BaselineWan;
    use crate::experiments::testing::synthetic_arms;

    #[test]
    fn arms_rules_and_sizes() {
        let names = |specs: &[ArmSpec]| specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        let rules = |s: &ArmSpec| s.rlm.as_ref().expect("rlm inline").rules.clone();

        // fast-synack: every arm rlm inline at the light load (scaled), CI time kept.
        let quick = FastSynack.arms(true);
        assert_eq!(names(&quick), ["gap-3s", "gap-500ms"]);
        let full = FastSynack.arms(false);
        assert_eq!(names(&full), ["gap-3s", "gap-1s", "gap-500ms", "gap-10ms"]);
        assert_eq!(rules(&quick[0]), CLASS_RULES);
        assert_eq!(quick.iter().chain(full.iter()).filter(|s| s.capture).map(|s| s.name.as_str()).collect::<Vec<_>>(), ["gap-3s", "gap-3s"]);
        assert_eq!(rules(&quick[1]), format!("{CLASS_RULES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN/ACK GAP 500ms\n"));
        let wan = BaselineWan.arms(true);
        let per_core = |s: &ArmSpec| f64::from(s.clients()) / s.farm.cpu_cores.unwrap();
        for s in quick.iter().chain(full.iter()) {
            assert!(s.clients() <= 200, "{}", s.name);
            assert!((per_core(s) - per_core(&wan[0])).abs() < 1e-6, "{}: the light load's browsers per farm core", s.name);
            assert_eq!(s.wan, wan[0].wan);
            assert!(s.rlm.as_ref().unwrap().extra_args.is_empty());
        }
        // About 10 s of set-up and tail per arm: the quick experiment within 3 minutes.
        let wall: f64 = quick.iter().map(|s| s.duration_s + 10.0).sum();
        assert!(wall <= 180.0, "{wall} s");
    }

    #[test]
    fn fast_synack_report_is_004_table_1() {
        let dir = std::env::temp_dir().join(format!("rlm-lab-report-synack-{}", std::process::id()));
        let (arms, note) = synthetic_arms(&dir, &FastSynack);
        let md = crate::report::write(&dir, "fast-synack", true, &arms, None, note, &FastSynack.params(true)).unwrap();
        assert!(md.contains("| SYN/ACK gap | mean PV RT | mean speedup | 95th % PV RT | > 3 s PV RT | total pages |"), "{md}");
        // gap-3s is the reference (mean 2.5 s); gap-500ms is 1 s slower in this synthetic run.
        assert!(md.contains("| 3s (off) | 2.50 s | 0.0% | 4.50 s | 40.00% | 40 | 0 |"), "{md}");
        assert!(md.contains("| 500ms | 3.50 s | -40.0% |"), "{md}");
        assert!(md.contains(r#"- synack_gaps: ["3s","500ms"]"#), "{md}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
