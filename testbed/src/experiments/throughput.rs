//! throughput: what rlm inline costs the bridge, plain-bridge and rlm sample by sample, and in
//! the full run what rlm's records cost it, rlm on a core of its own and on the load's (the
//! samples are taken by [`crate::throughput`]).

use std::path::Path;

use anyhow::Result;
use serde_json::{Map, Value};
use sim_clients::tcp_profile::TcpProfile;

use super::{arm, arm_in, num, scale, Checks, Experiment, Results};
use crate::arm::{ArmResult, ArmSpec};
use crate::topology::Offloads;

/// Rounds of the throughput experiment (each a plain-bridge and an rlm sample): 5, the least the
/// lab issue asks for, in both runs. With 3, the quick run's bulk ratio swung from 89% to 95%
/// between two runs of the same code (rlm's cost here is 5 to 7%, against the 90% floor).
pub fn throughput_rounds(_quick: bool) -> usize {
    5
}

/// Seconds of each figure of a throughput sample (iperf3, then wrk): 5, the lab issue's; the
/// quick run's 3 keep its 5 rounds to about the time 3 rounds of 5 s took.
pub fn throughput_sample_s(quick: bool) -> u32 {
    if quick {
        3
    } else {
        5
    }
}

pub struct Throughput;

impl Experiment for Throughput {
    fn name(&self) -> &'static str {
        "throughput"
    }

    fn note(&self) -> &'static str {
        "What rlm inline costs the bridge: arms plain-bridge, rlm (full run only), rlm-records (the same rlm \
        writing its records) rlm-queue (full run only: rlm with its undecided SYNs through NFQUEUE, the path before held SYNs), rlm-own-core and rlm-records-own-core (full run only: rlm without and with its records on a core of its own, the load and the servers on the other, as on a real appliance) alternate, round after round (the first of them turning too), each sample `sample_s` seconds of iperf3 (one stream, server to client), as \
        long of wrk (a new connection per request to a 512-byte page of nginx on port 80, so every request's \
        SYN passes rlm's SYN node) and 2,000 timed connects from one address, then 500 first connects, each from an address new to rlm (its SYN decided by rlm, not the kernel). No WAN emulation; the appliance's bridge without br_netfilter unless rlm turns it on; offloads on at the appliance and the farm in the full run, as a real box has them (off in a quick run: with them on one stream's rate is bimodal here). \
        An arm's figures are the medians of its one-second runs pooled (a sample's, of its own); every sample is listed. The full run is judged on those medians (the records' cost also round by round: on a core of their own what they cost the data path, on the load's cores a 90% guard); a quick run on rlm's sample against the plain bridge's of the same round, the second best of the five ratios."
    }

    /// Its one arm, the spec of every arm ([`crate::throughput::Arm`]).
    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (_, _, _, cores) = scale(quick);
        let mut a = arm("throughput", 0, f64::from(throughput_sample_s(quick) * 2 * throughput_rounds(quick) as u32), &[], false, cores);
        a.farm.cpu_cores = None;
        a.profile = TcpProfile::Linux;
        vec![a]
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("rounds".into(), throughput_rounds(quick).into());
        m.insert("sample_s".into(), throughput_sample_s(quick).into());
        m
    }

    /// `rounds` rounds of a plain-bridge and an rlm sample, on one lab.
    fn run(&self, quick: bool, prefix: &str, specs: &[ArmSpec], out: &Path) -> Result<Vec<ArmResult>> {
        let arms = crate::throughput::Arm::of_run(quick);
        let names: Vec<&str> = arms.iter().map(|a| a.name()).collect();
        eprintln!("rlm-lab: {}: {} rounds of {}", self.name(), throughput_rounds(quick), names.join(", "));
        // Offloads on in the full run, as a real box has them; off in a quick run: with them on,
        // one iperf3 stream ran at about 7 or about 9 Gbit/s in every arm here (plain bridge
        // included), and a quick run's five rounds of 3 s failed the bulk guard on that alone
        // (2026-11-27: 83%, 103%, 83%, 75%, 68% round by round, the plain bridge's samples
        // 6.90 to 10.24 Gbit/s, rlm's 6.49 to 7.21).
        let offloads = if quick { Offloads::Off } else { Offloads::Appliance };
        crate::throughput::run(prefix, throughput_rounds(quick), throughput_sample_s(quick), offloads, out, &specs[0], &arms)
    }

    fn browsers(&self) -> bool {
        false
    }

    fn check(&self, tp: &Value, _all: &Results, c: &mut Checks) {
        let v = &mut c.v;
        let quick = tp["quick"].as_bool().unwrap_or(true);
        // The arm judged against the plain bridge: rlm without records in the full run (the
        // figures of docs/performance.md), rlm writing them in a quick run (its only rlm arm).
        let records = arm_in(tp, "rlm-records");
        let (plain, with) = (arm_in(tp, "plain-bridge"), if quick { records.clone() } else { arm_in(tp, "rlm") });
        let (p, w) = (&plain["throughput"], &with["throughput"]);
        let (np, nw) = (p["samples"].as_array().map_or(0, |a| a.len()), w["samples"].as_array().map_or(0, |a| a.len()));
        v.push((np >= 3 && nw >= 3, format!("throughput: {np} plain-bridge and {nw} rlm samples (at least 3 each)")));
        let full = !quick && nw >= 5 && np >= 5;
        // The full run is judged on each arm's median (5 rounds of 5 s: `make lab`). The quick
        // run's 3 s samples are at the mercy of whatever else runs on this shared two-core
        // machine, both ways: CI's run of 2026-11-25 had rlm samples of 7075, 6731, 284, 170 and
        // 3117 connections/s (for 852 and 512 requests that rlm measured one by one: slowed with
        // the machine, not failing), and a clean clone's of 2026-11-26 plain-bridge samples of
        // 6634 to 10086 beside rlm's 6095 to 7817. So the quick run compares each rlm sample
        // with the plain bridge's of the same round, taken back to back, and judges the second
        // best of those ratios: rlm reached it in two rounds of five at least.
        let judge = |key: &str, unit: &str, digits: usize, floor: f64, judged: &str| -> (bool, String) {
            if full {
                let (pm, wm) = (num(&p[key]), num(&w[key]));
                let what = format!(
                    "throughput: rlm {unit} {wm:.digits$} is {:.1}% of the plain bridge's {pm:.digits$} (medians; at least {judged})",
                    wm / pm * 100.0
                );
                return (wm >= floor * pm, what);
            }
            let ratios = round_ratios(&p["samples"], &w["samples"], key);
            let best2 = second_highest(&ratios);
            let shown: Vec<String> = ratios.iter().map(|r| format!("{:.0}%", r * 100.0)).collect();
            let what = format!(
                "throughput: rlm {unit} in two rounds of five at least {:.0}% of the plain bridge's beside it (per round: {}; at least {judged})",
                best2 * 100.0,
                shown.join(", ")
            );
            (best2 >= floor, what)
        };
        // Bulk: the target is 90%, judged on the full run (measured there: 95%). The quick run
        // guards against regressions at 85% (89.7%, 89% and 95% in three clean-clone runs).
        v.push(judge(
            "bulk_gbps",
            "bulk Gbit/s",
            2,
            if full { 0.9 } else { 0.85 },
            if full { "the 90% target" } else { "85% in a quick run; the 90% target is judged on the full run" },
        ));
        // Bulk on a port rlm watches (an HTTP download of an octet stream, whose body reaches
        // rlm as lengths): the target is 98%, judged on the full run; a quick run
        // guards at 85%, as for iperf3's.
        v.push(judge(
            "web_bulk_gbps",
            "web bulk Gbit/s",
            2,
            if full { 0.98 } else { 0.85 },
            if full { "the 98% target" } else { "85% in a quick run; the 98% target is judged on the full run" },
        ));
        // The target is 80%, judged on the full run (measured there: 81%). The quick run guards
        // against regressions at 70% (76-79% measured).
        v.push(judge(
            "conn_per_s",
            "connections/s",
            0,
            if full { 0.8 } else { 0.7 },
            if full { "the 80% target" } else { "70% in a quick run; the 80% target is judged on the full run" },
        ));
        // A client's first SYN, which rlm decides (held by the kernel and sent on by rlm): the
        // target is 200 µs at p99 over a plain bridge's first connects, judged on the full run's
        // medians (measured 68 µs); a quick run guards at 400 µs.
        let (first, limit) = (num(&w["first_added_p99_us"]), if full { 200.0 } else { 400.0 });
        v.push((
            first.is_finite() && first <= limit,
            format!(
                "throughput: a client's first connect through rlm took {first:.0} µs more than through the plain bridge at p99 \
                 (medians of 500 first connects a sample: rlm {:.0} µs, plain bridge {:.0} µs; at most {limit:.0} µs)",
                num(&w["first_connect_p99_us"]),
                num(&p["first_connect_p99_us"])
            ),
        ));
        measured_checks(v, "rlm", &with);
        records_checks(v, &records["throughput"]);
        if !quick {
            // What the records cost the data path: rlm on a core of its own, as on a real box,
            // the load on the other; beside it, what their CPU costs the load where rlm shares
            // its cores (the arms above).
            let (own, own_records) = (arm_in(tp, "rlm-own-core"), arm_in(tp, "rlm-records-own-core"));
            own_core_checks(v, &own["throughput"], &own_records["throughput"]);
            measured_checks(v, "rlm-records-own-core", &own_records);
            records_checks(v, &own_records["throughput"]);
            records_cost(v, &own_records["throughput"], &own["throughput"], true);
            records_cost(v, &records["throughput"], w, false);
        }
    }
}

/// Under the load an arm's rlm still measured every request (its count of HTTP transactions
/// against wrk's count of requests, sample by sample) and exited cleanly after each sample.
fn measured_checks(v: &mut Vec<(bool, String)>, name: &str, arm: &Value) {
    let samples = arm["throughput"]["samples"].as_array().map_or(&[][..], |a| a.as_slice());
    for s in samples {
        let (req, got) = (num(&s["requests"]), num(&s["rlm"]["transactions"]));
        v.push((
            req > 0.0 && got >= 0.97 * req,
            format!("throughput: round {} {name} measured {got:.0} transactions for wrk's {req:.0} requests (at least 97%)", s["round"]),
        ));
    }
    let (clean, n) = (arm["throughput"]["rlm_clean_exits"].as_u64().unwrap_or(0) as usize, samples.len());
    v.push((clean == n && n > 0, format!("throughput: {name} exited cleanly after {clean} of {n} samples")));
}

/// The own-core arms ran as they say: in every sample rlm's CPUs, the servers' and the load's,
/// read from the kernel after the load, are known, and rlm's are none of the others' (and
/// there are ten samples at least).
fn own_core_checks(v: &mut Vec<(bool, String)>, own: &Value, own_records: &Value) {
    let list = |c: &Value| c.as_array().map(|a| a.iter().filter_map(|x| x.as_u64()).collect::<Vec<_>>()).unwrap_or_default();
    let samples: Vec<&Value> = [own, own_records].iter().flat_map(|a| a["samples"].as_array().into_iter().flatten()).collect();
    let cpus = |s: &Value| (list(&s["rlm_cpus"]), list(&s["server_cpus"]), list(&s["load_cpus"]));
    let bad: Vec<String> = samples
        .iter()
        .filter_map(|s| {
            let (r, srv, l) = cpus(s);
            (r.is_empty() || srv.is_empty() || l.is_empty() || r.iter().any(|c| srv.contains(c) || l.contains(c)))
                .then(|| format!("round {}: rlm on {r:?}, servers on {srv:?}, load on {l:?}", s["round"]))
        })
        .collect();
    let first = samples.first().map(|s| cpus(s)).unwrap_or_default();
    v.push((
        samples.len() >= 10 && bad.is_empty(),
        format!(
            "throughput: in all {} own-core samples rlm ran on CPUs of its own ({:?}), the servers ({:?}) and the load ({:?}) on the others{}",
            samples.len(),
            first.0,
            first.1,
            first.2,
            if bad.is_empty() { String::new() } else { format!(" (but {})", bad.join("; ")) }
        ),
    ));
}

/// rlm's records under the load, sample by sample: the file holds as many transaction lines as
/// rlm says it wrote, and every transaction rlm measured was written or counted dropped
/// (`written + dropped >= transactions` at its last /status, taken before it stopped).
fn records_checks(v: &mut Vec<(bool, String)>, w: &Value) {
    let (mut written, mut dropped) = (0.0, 0.0);
    let mut bad = Vec::new();
    let samples = w["samples"].as_array().map_or(&[][..], |a| a.as_slice());
    for s in samples {
        let counts = &s["rlm"]["records"]["counts"]["transactions"];
        let (wr, dr, lines, txns) = (num(&counts["written"]), num(&counts["dropped"]), num(&s["transaction_lines"]), num(&s["rlm"]["transactions"]));
        if counts.is_null() || lines != wr || wr + dr < txns {
            bad.push(format!("round {}: {wr} written, {dr} dropped, {lines} lines, {txns} transactions", s["round"]));
        }
        written += wr;
        dropped += dr;
    }
    v.push((
        !samples.is_empty() && bad.is_empty() && written > 0.0,
        format!(
            "throughput: rlm's transaction records under the load: {written} written ({} lines read back), {dropped} dropped and counted, none lost uncounted{}",
            samples.iter().map(|s| num(&s["transaction_lines"])).sum::<f64>(),
            if bad.is_empty() { String::new() } else { format!(" (but {})", bad.join("; ")) }
        ),
    ));
}

/// The full run: what writing the records costs, rlm-records against rlm, which alternate
/// within every round. Each arm's figure is the median of its one-second runs pooled (iperf3's
/// for bulk, wrk's for connections).
///
/// On a core of its own (`own_core`), what they cost the data path: nothing measurable. The
/// records arm fails when it is under 95% of rlm's and measurably lower round by round
/// (one-sided exact Wilcoxon signed-rank test on the rounds' log ratios of the samples' figures,
/// p < 0.05: with five rounds, lower in all five), or under 90% whatever the test says. The
/// round is the unit: the runs of one sample share an rlm and a minute of the machine, so they
/// are not independent draws.
///
/// Where rlm shares the two cores with wrk and nginx, the CPU the records take (about 0.03 core,
/// 33,000 instructions a connection: docs/performance.md) is taken from the load, and the
/// records arm was 94.8% to 106.9% of rlm's connection rate in three runs (2026-11-29, lower in
/// 4, 2 and 5 of 5 rounds): judged at 90%, a regression guard. On this two-core machine a
/// sample moves by 10-20% with where the load lands on the cores, records or not.
fn records_cost(v: &mut Vec<(bool, String)>, with: &Value, without: &Value, own_core: bool) {
    for (key, unit, digits) in [("bulk_gbps", "bulk Gbit/s", 2), ("conn_per_s", "connections/s", 0)] {
        let ratios = round_ratios(&without["samples"], &with["samples"], key);
        v.push(records_cost_verdict(num(&with[key]), num(&without[key]), &ratios, unit, digits, own_core));
    }
}

/// [`records_cost`]'s verdict on one figure: the arms' figures (records, without) and the
/// rounds' ratios of records over without ([`round_ratios`]).
fn records_cost_verdict(a: f64, b: f64, ratios: &[f64], unit: &str, digits: usize, own_core: bool) -> (bool, String) {
    let ratio = a / b;
    let lower = ratios.iter().filter(|r| **r < 1.0).count();
    let p = crate::stats::signed_rank_lower_p(&ratios.iter().map(|r| r.ln()).collect::<Vec<_>>());
    let measurable = ratio < 0.95 && p < 0.05;
    let ok = !ratios.is_empty() && b > 0.0 && ratio >= 0.9 && (!own_core || !measurable);
    let (place, rule) = if own_core {
        ("on a core of its own", "at least 95%, or not measurably lower (p >= 0.05) and at least 90%")
    } else {
        ("on the cores of the load", "at least 90%: here its CPU is the load's")
    };
    (
        ok,
        format!(
            "throughput: rlm writing its records {place} reached {a:.digits$} {unit}, {:.1}% of rlm's without records {b:.digits$} \
             (medians of the runs pooled; lower in {lower} of {} rounds, one-sided signed-rank p = {p:.3}; {rule})",
            ratio * 100.0,
            ratios.len()
        ),
    )
}

/// Round by round, rlm's figure over the plain bridge's of the same round, in round order.
fn round_ratios(plain: &Value, rlm: &Value, key: &str) -> Vec<f64> {
    let of = |samples: &Value, round: &Value| samples.as_array().into_iter().flatten().find(|s| &s["round"] == round).map(|s| num(&s[key]));
    rlm.as_array().into_iter().flatten().filter_map(|s| Some(num(&s[key]) / of(plain, &s["round"])?)).filter(|r| r.is_finite()).collect()
}

/// The second-highest of some figures (the highest with one, NaN with none).
fn second_highest(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    v.get(1).or(v.first()).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five samples of each arm; the medians are the middle samples, as the lab writes them.
    fn samples(bulk: [f64; 5], conn: [f64; 5]) -> (Vec<Value>, f64, f64) {
        let v = (0..5)
            .map(|i| {
                serde_json::json!({"round": i, "requests": 100, "bulk_gbps": bulk[i], "web_bulk_gbps": bulk[i], "conn_per_s": conn[i], "transaction_lines": 100,
                    "rlm_cpus": [1], "server_cpus": [0], "load_cpus": [0],
                    "rlm": {"transactions": 100, "records": {"counts": {"transactions": {"written": 100, "dropped": 0}}}}})
            })
            .collect();
        let median = |x: [f64; 5]| crate::stats::median(&x);
        (v, median(bulk), median(conn))
    }

    fn result(quick: bool, plain: (Vec<Value>, f64, f64), rlm: (Vec<Value>, f64, f64)) -> Value {
        serde_json::json!({"quick": quick, "arms": [
            {"name": "plain-bridge", "throughput": {"samples": plain.0, "bulk_gbps": plain.1, "web_bulk_gbps": plain.1, "conn_per_s": plain.2}},
            {"name": "rlm", "throughput": {"rlm_clean_exits": 5, "samples": rlm.0, "bulk_gbps": rlm.1, "web_bulk_gbps": rlm.1, "conn_per_s": rlm.2}},
            {"name": "rlm-records", "throughput": {"rlm_clean_exits": 5, "samples": rlm.0, "bulk_gbps": rlm.1, "web_bulk_gbps": rlm.1, "conn_per_s": rlm.2}},
            {"name": "rlm-own-core", "throughput": {"rlm_clean_exits": 5, "samples": rlm.0, "bulk_gbps": rlm.1, "web_bulk_gbps": rlm.1, "conn_per_s": rlm.2}},
            {"name": "rlm-records-own-core", "throughput": {"rlm_clean_exits": 5, "samples": rlm.0, "bulk_gbps": rlm.1, "web_bulk_gbps": rlm.1, "conn_per_s": rlm.2}}]})
    }

    /// Every sample alike: the median and the second best are the same figure.
    fn even(quick: bool, bulk: f64, conn: f64) -> Value {
        result(quick, samples([2.73; 5], [9000.0; 5]), samples([bulk; 5], [conn; 5]))
    }

    fn verdict(r: &Value, starts: &str) -> bool {
        let mut c = Checks::default();
        Throughput.check(r, &Results::new(), &mut c);
        c.v.iter().find(|(_, m)| m.starts_with(starts)).unwrap_or_else(|| panic!("no {starts} in {:?}", c.v)).0
    }

    #[test]
    fn bulk_and_connections_judged_at_their_targets_on_a_full_run_looser_quick() {
        // CI's quick run of 2026-11-25: 2.45 against 2.73 Gbit/s, 89.7%.
        assert!(verdict(&even(true, 2.45, 7000.0), "throughput: rlm bulk Gbit/s in two rounds of five at least 90%"));
        assert!(!verdict(&even(false, 2.45, 7500.0), "throughput: rlm bulk Gbit/s 2.45 is 89.7%"));
        assert!(verdict(&even(false, 2.46, 7500.0), "throughput: rlm bulk Gbit/s 2.46 is 90.1%"));
        assert!(!verdict(&even(true, 2.30, 7000.0), "throughput: rlm bulk Gbit/s in two rounds of five at least 84%"));
        // The web's bulk: 98% on a full run, 85% quick.
        assert!(!verdict(&even(false, 2.66, 7500.0), "throughput: rlm web bulk Gbit/s 2.66 is 97.4%"));
        assert!(verdict(&even(false, 2.68, 7500.0), "throughput: rlm web bulk Gbit/s 2.68 is 98.2%"));
        assert!(verdict(&even(true, 2.45, 7000.0), "throughput: rlm web bulk Gbit/s in two rounds of five at least 90%"));
        assert!(!verdict(&even(true, 2.30, 7000.0), "throughput: rlm web bulk Gbit/s in two rounds of five at least 84%"));
        assert!(verdict(&even(true, 2.6, 6400.0), "throughput: rlm connections/s in two rounds of five at least 71%"));
        assert!(!verdict(&even(false, 2.6, 7100.0), "throughput: rlm connections/s 7100 is 78.9%"));
        assert!(!verdict(&even(true, 2.6, 6200.0), "throughput: rlm connections/s in two rounds of five at least 69%"));
    }

    #[test]
    fn a_quick_run_judged_round_by_round_a_full_run_on_medians() {
        // CI's quick run of 2026-11-26: three of rlm's samples taken while the machine was busy
        // elsewhere (rlm measured every one of their requests).
        let plain = || samples([2.5, 2.4, 2.5, 2.3, 2.45], [8500.0, 8300.0, 8100.0, 8000.0, 7900.0]);
        let rlm = || samples([2.4, 2.3, 2.35, 2.2, 2.4], [7075.0, 6731.0, 284.0, 170.0, 3117.0]);
        let quick = result(true, plain(), rlm());
        assert!(verdict(
            &quick,
            "throughput: rlm connections/s in two rounds of five at least 81% of the plain bridge's beside it (per round: 83%, 81%, 4%, 2%, 39%;"
        ));
        assert!(verdict(&quick, "throughput: rlm bulk Gbit/s in two rounds of five at least"));
        assert!(!verdict(&result(false, plain(), rlm()), "throughput: rlm connections/s 3117 is 38.5% of the plain bridge's 8100 (medians;"));
        // rlm slow in four rounds of five: the quick run fails too.
        let slow = samples([2.4; 5], [7075.0, 3000.0, 284.0, 170.0, 3117.0]);
        assert!(!verdict(&result(true, plain(), slow), "throughput: rlm connections/s in two rounds of five at least 39%"));
        // A clean clone's of 2026-11-26: the plain bridge fast in some rounds. Against the
        // second-best plain sample (10007) rlm's second best (6491) was 65%; round by round it
        // reached 79% twice.
        let plain = samples([2.93, 2.52, 2.76, 2.82, 2.95], [10086.0, 8595.0, 10007.0, 7977.0, 6634.0]);
        let rlm = samples([2.51, 2.32, 2.24, 2.29, 2.44], [7817.0, 6457.0, 6491.0, 6332.0, 6095.0]);
        let r = result(true, plain, rlm);
        assert!(verdict(
            &r,
            "throughput: rlm connections/s in two rounds of five at least 79% of the plain bridge's beside it (per round: 78%, 75%, 65%, 79%, 92%;"
        ));
        // Its bulk: 86%, 92%, 81%, 81% and 83% round by round (the second-best samples gave 83%).
        assert!(verdict(&r, "throughput: rlm bulk Gbit/s in two rounds of five at least 86%"));
        assert!(second_highest(&[]).is_nan());
        assert_eq!(round_ratios(&Value::Null, &Value::Null, "conn_per_s"), Vec::<f64>::new());
    }

    #[test]
    fn a_first_connect_is_judged_by_what_rlm_adds_at_p99() {
        let with_first = |quick: bool, added: Option<f64>| {
            let mut r = even(quick, 2.6, 7500.0);
            r["arms"][0]["throughput"]["first_connect_p99_us"] = 100.0.into();
            for a in [1, 2] {
                if let Some(added) = added {
                    r["arms"][a]["throughput"]["first_connect_p99_us"] = (100.0 + added).into();
                    r["arms"][a]["throughput"]["first_added_p99_us"] = added.into();
                }
            }
            r
        };
        let judged = "throughput: a client's first connect through rlm took";
        assert!(verdict(&with_first(false, Some(150.0)), judged));
        assert!(!verdict(&with_first(false, Some(250.0)), judged));
        assert!(verdict(&with_first(true, Some(350.0)), judged));
        assert!(!verdict(&with_first(true, Some(450.0)), judged));
        assert!(!verdict(&with_first(false, None), judged), "not measured: not passed");
    }

    #[test]
    fn records_cost_fails_only_when_measurable_and_over_5_percent_or_over_10_percent() {
        // rlm's five rounds, as a noisy machine draws them.
        let rlm = [7000.0, 9400.0, 8200.0, 7600.0, 8800.0];
        let judge = |ratio: f64, each: [f64; 5]| {
            let with = serde_json::json!(rlm
                .iter()
                .zip(each)
                .enumerate()
                .map(|(i, (r, f))| serde_json::json!({"round": i, "conn_per_s": r * f}))
                .collect::<Vec<_>>());
            let without =
                serde_json::json!(rlm.iter().enumerate().map(|(i, r)| serde_json::json!({"round": i, "conn_per_s": r})).collect::<Vec<_>>());
            records_cost_verdict(8200.0 * ratio, 8200.0, &round_ratios(&without, &with, "conn_per_s"), "connections/s", 0, true)
        };
        // The same: 100%.
        assert!(judge(1.0, [1.0; 5]).0);
        // 3% lower in every round: measurable (p = 1/32) but within 5%: passes.
        let (ok, what) = judge(0.97, [0.97; 5]);
        assert!(ok && what.contains("97.0%") && what.contains("lower in 5 of 5 rounds") && what.contains("p = 0.031"), "{what}");
        // 6% lower in every round: measurable and over 5%: fails.
        assert!(!judge(0.94, [0.94; 5]).0);
        // 6% lower by the medians, but higher in one round of five (p = 2/32 at best): within
        // the noise, passes.
        let (ok, what) = judge(0.94, [1.01, 0.9, 0.95, 0.92, 0.97]);
        assert!(ok && what.contains("lower in 4 of 5 rounds") && what.contains("p = 0.062"), "{what}");
        // 12% lower fails whatever the rounds say.
        assert!(!judge(0.88, [1.2, 0.8, 1.1, 0.7, 0.9]).0);
        // With no rounds to pair nothing passes.
        assert!(!records_cost_verdict(8200.0, 8200.0, &[], "connections/s", 0, true).0);
        // On the cores of the load, only the 90% floor: 6% lower in every round passes there,
        // 12% fails, no rounds fail.
        let shared = |ratio: f64| records_cost_verdict(8200.0 * ratio, 8200.0, &[ratio; 5], "connections/s", 0, false);
        let (ok, what) = shared(0.94);
        assert!(ok && what.contains("on the cores of the load") && what.contains("p = 0.031"), "{what}");
        assert!(!shared(0.88).0);
        assert!(!records_cost_verdict(8200.0, 8200.0, &[], "connections/s", 0, false).0);
    }

    #[test]
    fn every_transaction_is_written_or_counted_dropped_and_records_cost_judged_on_a_full_run() {
        let r = even(false, 2.6, 7500.0);
        assert!(verdict(&r, "throughput: rlm's transaction records under the load: 500 written (500 lines read back), 0 dropped"));
        for place in ["on a core of its own", "on the cores of the load"] {
            assert!(verdict(
                &r,
                &format!("throughput: rlm writing its records {place} reached 7500 connections/s, 100.0% of rlm's without records 7500 (medians of the runs pooled; lower in 0 of 5 rounds")
            ));
        }
        // Dropped and counted: fine. Lines short of what rlm says it wrote, or transactions
        // neither written nor counted: not.
        let mut r = even(true, 2.6, 7500.0);
        r["arms"][2]["throughput"]["samples"][2]["rlm"]["records"]["counts"]["transactions"] = serde_json::json!({"written": 60, "dropped": 40});
        r["arms"][2]["throughput"]["samples"][2]["transaction_lines"] = serde_json::json!(60);
        assert!(verdict(&r, "throughput: rlm's transaction records under the load: 460 written (460 lines read back), 40 dropped"));
        r["arms"][2]["throughput"]["samples"][3]["transaction_lines"] = serde_json::json!(99);
        assert!(!verdict(&r, "throughput: rlm's transaction records under the load: 460 written (459 lines read back)"));
        let mut r = even(true, 2.6, 7500.0);
        r["arms"][2]["throughput"]["samples"][0]["rlm"]["transactions"] = serde_json::json!(101);
        assert!(!verdict(&r, "throughput: rlm's transaction records"));
        // Records costing 6% of the connection rate in every round fail the full run on a core
        // of their own (arm 4 against 3), not on the load's (arm 2 against 1).
        for (arm, place, ok) in [(4, "on a core of its own", false), (2, "on the cores of the load", true)] {
            let mut r = even(false, 2.6, 7500.0);
            r["arms"][arm]["throughput"]["samples"] = samples([2.6; 5], [7050.0; 5]).0.into();
            r["arms"][arm]["throughput"]["conn_per_s"] = serde_json::json!(7050.0);
            let what = format!(
                "throughput: rlm writing its records {place} reached 7050 connections/s, 94.0% of rlm's without records 7500 (medians of the runs pooled; lower in 5 of 5 rounds"
            );
            assert_eq!(verdict(&r, &what), ok, "{what}");
        }
        // Rounds the two arms do not share are not paired: nothing judged, not passed.
        let mut r = even(false, 2.6, 7500.0);
        for s in r["arms"][4]["throughput"]["samples"].as_array_mut().unwrap() {
            s["round"] = serde_json::json!(s["round"].as_u64().unwrap() + 10);
        }
        assert!(!verdict(&r, "throughput: rlm writing its records on a core of its own reached 7500 connections/s, 100.0% of rlm's without records 7500 (medians of the runs pooled; lower in 0 of 0 rounds"));
        // The own-core arms ran where they say, else the run fails: rlm's CPUs unknown in one
        // sample, or shared with the servers in another.
        let own = "throughput: in all 10 own-core samples rlm ran on CPUs of its own ([1]), the servers ([0]) and the load ([0]) on the others";
        assert!(verdict(&even(false, 2.6, 7500.0), own));
        let mut r = even(false, 2.6, 7500.0);
        r["arms"][3]["throughput"]["samples"][1]["rlm_cpus"] = Value::Null;
        assert!(!verdict(&r, "throughput: in all 10 own-core samples"));
        let mut r = even(false, 2.6, 7500.0);
        r["arms"][4]["throughput"]["samples"][4]["server_cpus"] = serde_json::json!([0, 1]);
        assert!(!verdict(&r, "throughput: in all 10 own-core samples"));
        // The load left on rlm's CPU (its thread not pinned) fails too.
        let mut r = even(false, 2.6, 7500.0);
        r["arms"][3]["throughput"]["samples"][2]["load_cpus"] = serde_json::json!([0, 1]);
        assert!(!verdict(&r, "throughput: in all 10 own-core samples"));
        // The own-core records arm measured every request and exited cleanly, as rlm's did.
        let mut r = even(false, 2.6, 7500.0);
        assert!(verdict(&r, "throughput: round 3 rlm-records-own-core measured 100 transactions"));
        assert!(verdict(&r, "throughput: rlm-records-own-core exited cleanly after 5 of 5 samples"));
        r["arms"][4]["throughput"]["samples"][3]["rlm"]["transactions"] = serde_json::json!(90);
        r["arms"][4]["throughput"]["rlm_clean_exits"] = serde_json::json!(4);
        assert!(!verdict(&r, "throughput: round 3 rlm-records-own-core measured 90 transactions"));
        assert!(!verdict(&r, "throughput: rlm-records-own-core exited cleanly after 4 of 5 samples"));
        let mut r = even(false, 2.6, 7500.0);
        r["arms"][4]["throughput"]["samples"] = Value::Null;
        assert!(!verdict(&r, "throughput: in all 5 own-core samples"));
        // The quick run does not judge it (no rlm arm without records).
        let mut c = Checks::default();
        Throughput.check(&even(true, 2.6, 7500.0), &Results::new(), &mut c);
        assert!(c.v.iter().all(|(_, m)| !m.starts_with("throughput: rlm writing its records")));
    }
}
