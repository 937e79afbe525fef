//! The experiments `rlm-lab run NAME` knows, at quick (CI) and full scale.
//!
//! Scale on this 2-core machine: the full runs keep the papers' shape (think time, RTT, loss,
//! light vs heavy load relative to the farm's capacity) with fewer clients and shorter runs
//! than the papers' (004 ran 200 and 550 browsers for 30 minutes on seven machines); the farm's
//! CPU quota is set so that the farm, not the load generators, saturates.

use std::path::Path;

use anyhow::{bail, Result};

use crate::arm::{read_truth, ArmResult, ArmSpec, OpenLoopArm, RlmArm};
use crate::runner::run_arm;
use crate::farm::FarmConfig;
use crate::report::{self, Fidelity};
use sim_clients::openloop::Schedule;
use sim_clients::tcp_profile::TcpProfile;

pub const NAMES: [&str; 17] = [
    "baseline-lan",
    "baseline-wan",
    "heavy",
    "fidelity",
    "openloop",
    "srpt",
    "srpt-transient",
    "maxclients",
    "syn-throttle",
    "syn-police",
    "fast-synack",
    "fast-syn",
    "think-gap",
    "remove-embeds",
    "rewrite-embeds",
    "predict",
    "throughput",
];

/// The classes of 004 section 6.3, declared and measured, nothing acted on.
pub const CLASS_RULES: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n";

/// MaxClients of the maxclients arms (004 Table 2), loosest first. The loosest lets the heavy
/// load overload the farm itself (its own time per request grows); the tighter ones shed it at
/// the door. Measured (quick): at 100 the farm is already idle, its own time at the floor.
pub fn maxclients_limits(quick: bool) -> &'static [usize] {
    if quick {
        // Two limits (a third, 100, is shown in docs/experiments.md): the trend, in a minute
        // and a half of `make test`.
        &[300, 30]
    } else {
        &[600, 300, 150, 75]
    }
}

/// syn-throttle's target for HIGH's mean response time (s): unmanaged HIGH misses it under the
/// heavy load; shedding LOW's SYNs brings HIGH down to it. Calibrated (quick): unmanaged HIGH
/// 2.3 s at heavy load, HIGH alone (every LOW SYN dropped) about 0.9 s, so 1.5 s is in the
/// middle of what the rule can reach. The full scale's target is not calibrated by a run.
pub fn throttle_target_s(quick: bool) -> f64 {
    if quick {
        1.5
    } else {
        2.0
    }
}

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

/// fast-syn's and think-gap's full-run farm for `browsers` at the heavy load: (CPU cores,
/// connection slots); `None` quick, which keeps syn-throttle's farm. 004's heavy load (section 6.3, Figure 13) is bound by the farm's CPU: "No SYNs
/// dropped at the server complex", and 200 clients alone keep its bottleneck 60% busy. The full
/// run is that: a slot for every connection the browsers can open (two each: the front never
/// refuses one; measured at most 714 open) and 0.17 core, so that a pageview's 2.6 ms of CPU
/// saturates the farm (HIGH's 200 browsers alone would use about 40% of it). With the heavy
/// load's 0.3 core and 375 slots (the quick run's 150 scaled) the full farm was bound by its
/// slots instead: connections waited for one in the accept queue, fast retransmission only moved
/// LOW's wait there, and LOW's mean came out 7 to 13% worse than under the throttle alone. The
/// quick run keeps syn-throttle's farm (0.12 core, 150 slots for 240 browsers): a quick farm
/// bound by its CPU (0.068 core, 480 slots) did not clear its ramp's backlog within the 60 s arms
/// (LOW 6.7 and 7.0 s, HIGH over its target in both arms).
pub fn fast_syn_farm(quick: bool, browsers: u32) -> Option<(f64, usize)> {
    (!quick).then_some((0.17, 2 * browsers as usize))
}

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
/// The quick run leaves out 1 s to keep to its time.
pub fn fast_synack_gaps(quick: bool) -> &'static [&'static str] {
    if quick {
        &["3s", "500ms", "10ms"]
    } else {
        &["3s", "1s", "500ms", "10ms"]
    }
}

/// The gap of fast-syn's and think-gap's FAST SYN + SYN/ACK (004 Figures 16 and 17).
pub const FAST_SYN_GAP: &str = "500ms";
/// think-gap's DELAY FIRST SYN for LOW (004 Figure 17).
pub const FIRST_SYN_DELAY: &str = "3s";

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

fn throttle_rules(target_s: f64) -> String {
    format!("{CLASS_RULES}IF IP.SRC != 10.4.*.* AND RT.HIGH > {target_s:.1}s THEN DROP SYN\n")
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

/// 004 Figure 16: syn-throttle's rule with fast SYN and SYN/ACK retransmission for everyone,
/// halted for LOW while its SYNs are dropped.
fn fast_syn_rules(target_s: f64) -> String {
    format!(
        "{CLASS_RULES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP {FAST_SYN_GAP}\n\
         IF IP.SRC != 10.4.*.* AND RT.HIGH > {target_s:.1}s THEN\n  DROP SYN\n  HALT FAST SYN\n"
    )
}

/// 004 Figure 17: fast-syn's rules, and LOW's first SYN of each pageview held back.
fn think_gap_rules(target_s: f64) -> String {
    format!("{}IF IP.SRC != 10.4.*.* THEN\n  DELAY FIRST SYN {FIRST_SYN_DELAY}\n", fast_syn_rules(target_s))
}

fn police_rules(rate: f64, burst: u32) -> String {
    format!("{CLASS_RULES}IF IP.SRC == 10.5.*.* THEN LIMIT SYN {rate:.0}/s BURST {burst}\n")
}

/// Figures of an experiment that belong to no arm (result.json's top level).
pub fn params(name: &str, quick: bool) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    match name {
        "syn-throttle" => {
            m.insert("target_s".into(), throttle_target_s(quick).into());
        }
        "fast-synack" => {
            m.insert("synack_gaps".into(), fast_synack_gaps(quick).into());
        }
        "fast-syn" | "think-gap" => {
            m.insert("target_s".into(), throttle_target_s(quick).into());
            m.insert("fast_gap".into(), FAST_SYN_GAP.into());
            m.insert("class_window_s".into(), 1.into());
            m.insert("release_per_s".into(), fast_release_per_s(quick).into());
            if name == "think-gap" {
                m.insert("first_syn_delay".into(), FIRST_SYN_DELAY.into());
            }
        }
        "syn-police" => {
            let (rate, burst) = police_limit(quick);
            m.insert("limit_rate_per_s".into(), rate.into());
            m.insert("limit_burst".into(), burst.into());
        }
        "maxclients" => {
            m.insert("max_clients".into(), maxclients_limits(quick).into());
        }
        "srpt" => {
            m.insert("loads".into(), srpt_loads(quick).into());
            m.insert("link_bps".into(), SRPT_LINK_BPS.into());
            m.insert("rate_pct".into(), SRPT_RATE_PCT.into());
        }
        "srpt-transient" => {
            m.insert("link_bps".into(), SRPT_LINK_BPS.into());
            m.insert("rate_pct".into(), SRPT_RATE_PCT.into());
            m.insert("max_clients".into(), TRANSIENT_MAX_CLIENTS.into());
            m.insert("backlog".into(), TRANSIENT_BACKLOG.into());
        }
        "remove-embeds" | "rewrite-embeds" => {
            m.insert("groups".into(), serde_json::json!(RTT_GROUPS.iter().map(|g| g.0).collect::<Vec<_>>()));
            m.insert("kept".into(), serde_json::json!(embeds_kept(quick)));
        }
        "predict" => {
            m.insert("groups".into(), serde_json::json!(RTT_GROUPS.iter().map(|g| g.0).collect::<Vec<_>>()));
            m.insert("goals_s".into(), serde_json::json!(predict_goals(quick)));
        }
        "throughput" => {
            m.insert("rounds".into(), throughput_rounds(quick).into());
            m.insert("sample_s".into(), throughput_sample_s(quick).into());
        }
        _ => {}
    }
    m
}

/// The farm at an experiment's scale: its CPU quota is sized so that the light load keeps it
/// about 60% busy (004 section 6.1) and the heavy load overloads it.
fn farm(cpu_cores: f64) -> FarmConfig {
    // Apache 2.0's default keep-alive is 15 s; 3 s closes two browsers' connections in three
    // during their think time (mean 7 s), so that, as in 004's runs, most pageviews open
    // connections and meet the WAN's SYN and SYN/ACK losses.
    FarmConfig { cpu_cores: Some(cpu_cores), keepalive_s: 3.0, ..FarmConfig::default() }
}

fn arm(name: &str, clients: u32, duration_s: f64, wan: &[&str], capture: bool, cpu_cores: f64) -> ArmSpec {
    // One third HIGH (10.4/16), two thirds LOW, as in 004 section 6.3.
    let high = clients / 3;
    ArmSpec {
        name: name.into(),
        high_clients: high,
        low_clients: clients - high,
        more_clients: Vec::new(),
        classes: Vec::new(),
        think_mean_s: 7.0,
        duration_s,
        wan: wan.iter().map(|s| s.to_string()).collect(),
        profile: TcpProfile::Xp,
        farm: farm(cpu_cores),
        capture,
        seed: 1,
        openloop: None,
        rlm: None,
        syn_capture: false,
    }
}

fn with_rlm(mut a: ArmSpec, rules: String, extra_args: &[&str]) -> ArmSpec {
    a.rlm = Some(RlmArm { rules, extra_args: extra_args.iter().map(|s| s.to_string()).collect() });
    a
}

fn openloop_arm(name: &str, schedule: Schedule, duration_s: f64, cpu_cores: f64) -> ArmSpec {
    let mut a = arm(name, 30, duration_s, &[], false, cpu_cores);
    a.farm.cpu_cores = None; // the link is the bottleneck, not the farm
    a.openloop = Some(OpenLoopArm {
        schedule,
        link_bps: SRPT_LINK_BPS,
        rho_bps: SRPT_LINK_BPS,
        queue_packets: 100,
        files: 2000,
        max_file: 4e6,
        timeout_s: 60.0,
        via_front: false,
    });
    a
}

/// The farm's uplink in the SRPT experiments (000: 10 Mbit/s), and the share of it rlm shapes
/// its client port at (`[srpt] rate_pct`), so that the queue forms in rlm's bands.
pub const SRPT_LINK_BPS: u64 = 10_000_000;
pub const SRPT_RATE_PCT: u64 = 95;

/// The cutoffs the SRPT arms give rlm, chosen by docs/deployment.md's rule for this lab's sizes
/// (001 Table 1 bounded at 4 MB): 49.5% of the requests are under 2 KB, and the last cutoff
/// splits the largest 1% (0.15% of the requests are over 512 KB) so that in a bump in the wire
/// the smaller of them do not queue behind the multi-megabyte ones in one FIFO band. 002's
/// defaults (1K, 2K, 5K, 20K, 50K, rlm's own) left the largest 1% 31% slower than under FAIR.
pub const SRPT_CUTOFFS: &str = "2048,5120,20480,51200,524288";

/// The loads of the srpt experiment's arms (002 section 3: ρ = 0.5, 0.7, 0.9).
pub fn srpt_loads(quick: bool) -> &'static [f64] {
    if quick {
        &[0.9]
    } else {
        &[0.5, 0.7, 0.9]
    }
}

/// An srpt arm: the open-loop load at `rho` of rlm's shaped rate, rlm inline with `--srpt mode`
/// (fair: the same shaper and classifier, one FIFO class), the real 10 Mbit/s link downstream.
fn srpt_arm(mode: &str, rho: f64, duration_s: f64) -> ArmSpec {
    srpt_schedule_arm(&format!("{mode}-{rho}"), mode, Schedule::Constant { rho }, duration_s)
}

/// The server of the srpt-transient arms: 000 section 3's standard limits, 150 Apache processes
/// (MaxClients) and an accept queue of 128.
pub const TRANSIENT_MAX_CLIENTS: usize = 150;
pub const TRANSIENT_BACKLOG: i32 = 128;

/// 000's realistic path (Table II row J): 100 ms RTT, 5% loss.
const WAN_100_5: [&str; 2] = ["10.4.0.0/16=100ms,5%", "10.5.0.0/16=100ms,5%"];

/// An srpt-transient arm: W1 (000 Table I) through the front server, whose connection limits
/// make it drop SYNs when connections pile up; `wan`: over 000's realistic path.
fn transient_arm(mode: &str, wan: bool, duration_s: f64) -> ArmSpec {
    let name = format!("{mode}-w1{}", if wan { "-wan" } else { "" });
    let mut a = srpt_schedule_arm(&name, mode, Schedule::table_i(1).expect("W1"), duration_s);
    if let Some(ol) = a.openloop.as_mut() {
        ol.via_front = true;
    }
    a.farm.max_clients = TRANSIENT_MAX_CLIENTS;
    a.farm.backlog = TRANSIENT_BACKLOG;
    if wan {
        a.wan = WAN_100_5.iter().map(|s| s.to_string()).collect();
    }
    a
}

fn srpt_schedule_arm(name: &str, mode: &str, schedule: Schedule, duration_s: f64) -> ArmSpec {
    let mut a = openloop_arm(name, schedule, duration_s, 1.0);
    if let Some(ol) = a.openloop.as_mut() {
        ol.rho_bps = SRPT_LINK_BPS * SRPT_RATE_PCT / 100;
    }
    let (link, pct) = (SRPT_LINK_BPS.to_string(), SRPT_RATE_PCT.to_string());
    // Overhead 0: the link downstream (HTB without a size table) counts the frame as rlm's does.
    let args = [
        "--srpt",
        mode,
        "--srpt-link-bps",
        &link,
        "--srpt-rate-pct",
        &pct,
        "--srpt-overhead",
        "0",
        "--srpt-cutoffs",
        SRPT_CUTOFFS,
        "--server-ports",
        "80",
        "8080",
    ];
    with_rlm(a, CLASS_RULES.into(), &args)
}

const WAN_80_2: [&str; 2] = ["10.4.0.0/16=80ms,2%", "10.5.0.0/16=80ms,2%"];

/// 004 section 6.4's client groups: (class, WAN path), on 10.4/16, 10.5/16 and 10.6/16.
const RTT_GROUPS: [(&str, &str); 3] = [("rtt160", "10.4.0.0/16=160ms,2%"), ("rtt220", "10.5.0.0/16=220ms,2%"), ("rtt300", "10.6.0.0/16=300ms,2%")];

/// The remove-embeds and rewrite-embeds arms' embedded objects kept whole (`None`: all; 0: none),
/// in order.
fn embeds_kept(quick: bool) -> Vec<Option<u32>> {
    if quick {
        vec![None, Some(0), Some(1)]
    } else {
        std::iter::once(None).chain((0..=10).map(Some)).collect()
    }
}

/// The predict arms' goals (seconds): an arm `goal-Gs` each (004 Figure 20's thresholds, at the
/// lab's scale: its keep-all means are about half of 004's).
pub fn predict_goals(quick: bool) -> Vec<f64> {
    if quick {
        vec![0.5, 3.0]
    } else {
        vec![0.5, 1.0, 1.5, 2.0, 3.0, 5.0]
    }
}

/// Seconds per arm of remove-embeds: 30 quick (the light load's 45 s, cut to keep `make test`
/// within its 30 minutes; the effects are far above the noise: keep-1's means were 37 to 41% of
/// keep-all's at 45 s and 37 to 50% at 30 s), 300 full. rewrite-embeds, whose quick
/// effect is smaller (keep-0's rtt300 at 90% of keep-all's) and which `make test` does not run,
/// keeps 45 s.
pub fn embeds_duration_s(quick: bool) -> f64 {
    if quick {
        30.0
    } else {
        300.0
    }
}

/// What the arms of remove-embeds and rewrite-embeds do to the embedded objects past those kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Adapt {
    /// `REMOVE EMBEDS`: their references blanked out of the container (004 Figure 18).
    Remove,
    /// `REWRITE EMBEDS`: their requests rewritten to the small variants, through the lab's
    /// mapping (004 Figure 19).
    Rewrite,
}

/// The rules of a remove-embeds or rewrite-embeds arm: the groups' classes, and the action
/// keeping the first `kept` objects whole (none: nothing done); or, with `after_rt`, the action
/// on every object requested once the pageview has taken that long (rewrites only).
fn embeds_rules(adapt: Adapt, kept: Option<u32>, after_rt: Option<f64>) -> String {
    let mut r: String = RTT_GROUPS.iter().enumerate().map(|(g, (c, _))| format!("CLASS {c} IF IP.SRC == 10.{}.*.*\n", 4 + g)).collect();
    let (action, using) = match adapt {
        Adapt::Remove => ("REMOVE EMBEDS", ""),
        Adapt::Rewrite => ("REWRITE EMBEDS", " USING \"ims.map\""),
    };
    let cond = after_rt.map_or("IP.SRC == *.*.*.*".to_string(), |t| format!("RT > {t:.1}s"));
    match kept {
        None if after_rt.is_none() => {}
        None | Some(0) => r.push_str(&format!("IF {cond} THEN {action}{using}\n")),
        Some(n) => r.push_str(&format!("IF {cond} THEN {action} AFTER {n}{using}\n")),
    }
    r
}

/// A remove-embeds or rewrite-embeds arm: `clients` browsers in the three RTT groups, rlm
/// inline.
fn embeds_arm(name: &str, rules: String, clients: u32, duration_s: f64, cpu_cores: f64) -> ArmSpec {
    let wan: Vec<&str> = RTT_GROUPS.iter().map(|g| g.1).collect();
    let mut a = with_rlm(arm(name, clients, duration_s, &wan, false, cpu_cores), rules, &[]);
    let per = clients / 3;
    (a.high_clients, a.low_clients, a.more_clients) = (per, per, vec![clients - 2 * per]);
    a.classes = RTT_GROUPS.iter().map(|g| g.0.to_string()).collect();
    a
}

/// The arms keeping the first N objects whole, N from [`embeds_kept`]: `keep-all`, `keep-0`, ...
fn embeds_arms(adapt: Adapt, quick: bool, clients: u32, duration_s: f64, cpu_cores: f64) -> Vec<ArmSpec> {
    embeds_kept(quick)
        .into_iter()
        .map(|k| embeds_arm(&k.map_or("keep-all".to_string(), |n| format!("keep-{n}")), embeds_rules(adapt, k, None), clients, duration_s, cpu_cores))
        .collect()
}

/// The arms of an experiment, and a note for its report.
pub fn arms(name: &str, quick: bool) -> Result<(Vec<ArmSpec>, &'static str)> {
    // Measured when the lab was built: a pageview cost the farm about 9 ms of CPU, so N browsers
    // thinking 7 s asked for N / 7 × 9 ms of CPU per second. The full fast-syn runs of
    // 2026-11-24 measured 2.6 to 3.5 ms (`fast_syn_farm`): the heavy load's 0.3 core is no longer
    // an overload by CPU alone.
    let (light, heavy, dur, cores) = if quick { (60, 240, 45.0, 0.12) } else { (150, 600, 300.0, 0.3) };
    // syn-throttle's heavy runs with rlm (fast-syn and think-gap repeat them). The quick run is
    // short: a 10 s class window lets the rule react within it.
    let target = throttle_target_s(quick);
    let (tdur, window) = if quick { (60.0, "10") } else { (dur, "30") };
    let heavy_rlm = |name: &str, rules: String| with_rlm(arm(name, heavy, tdur, &WAN_80_2, false, cores), rules, &["--class-window", window]);
    // fast-syn and think-gap: the same load with a 1 s class window, so that the rule lets go
    // within a second of HIGH coming back under its target (the moment 004 resumes LOW's fast
    // retransmissions), and held SYNs released at a third of the pageviews the farm serves (24
    // a second in the quick run) rather than rlm's default 20 a second.
    // The farm: see `fast_syn_farm`.
    let release = fast_release_per_s(quick).to_string();
    let fast_farm = fast_syn_farm(quick, heavy);
    let fast_rlm = |name: &str, rules: String| {
        let mut a = with_rlm(arm(name, heavy, tdur, &WAN_80_2, false, cores), rules, &["--class-window", "1", "--fast-release-per-s", &release]);
        if let Some((cpu, slots)) = fast_farm {
            (a.farm.cpu_cores, a.farm.max_clients) = (Some(cpu), slots);
        }
        a
    };
    Ok(match name {
        "baseline-lan" => (vec![arm("lan", light, dur, &[], false, cores)], "004 Figure 10: no delay, no loss, light load."),
        "baseline-wan" => (
            vec![
                arm("unmanaged", light, dur, &WAN_80_2, false, cores),
                with_rlm(arm("managed", light, dur, &WAN_80_2, true, cores), CLASS_RULES.into(), &[]),
            ],
            "004 Figure 12: 80 ms RTT and 2% loss each way, Windows XP clients (3 s initial SYN timeout, 2 retries). \
             The managed arm runs the appliance inline (`rlm run` on the bridge) with rules that only declare the classes \
             HIGH and LOW: it measures and acts on nothing. Its server-side port is also captured, and the capture \
             replayed through the engine for the fidelity figure.",
        ),
        "heavy" => (vec![arm("unmanaged", heavy, dur, &WAN_80_2, false, cores)], "004 Figure 13: heavy load over the same WAN."),
        "fidelity" => (
            vec![arm("wan", light, dur, &WAN_80_2, true, cores)],
            "The appliance's passive measurement against the browsers' ground truth, over the 004 Figure 12 WAN.",
        ),
        "srpt" => {
            let dur = if quick { 45.0 } else { 300.0 };
            let arms = srpt_loads(quick).iter().flat_map(|&rho| [srpt_arm("fair", rho, dur), srpt_arm("srpt", rho, dur)]).collect();
            (
                arms,
                "002 section 3 on 000's link: open-loop Poisson arrivals, one connection each, file sizes of 001 Table 1 \
                 bounded at 4 MB, at load ρ of the 9.5 Mbit/s that rlm shapes its client port to (95% of the 10 Mbit/s link \
                 downstream). rlm runs inline in both arms: `--srpt fair` (one FIFO of 100 packets) against `--srpt srpt` \
                 (strict-priority bands by each response's remaining bytes, cutoffs 2K, 5K, 20K, 50K, 512K: see \
                 SRPT_CUTOFFS; SYN/ACKs and other control packets first).",
            )
        }
        "srpt-transient" => {
            let dur = if quick { 100.0 } else { 300.0 };
            let arms = [false, true].into_iter().flat_map(|wan| [transient_arm("fair", wan, dur), transient_arm("srpt", wan, dur)]).collect();
            (
                arms,
                "000 section 5 (workload W1 of Table I: 25 s at ρ = 0.2, 25 s at ρ = 1.2, in turn) on the srpt experiment's \
                 link, with rlm inline in both arms as there. The requests go through the front server, which serves at most \
                 150 connections at once with an accept queue of 128 (000 section 3's standard limits): when they fill, the \
                 server's kernel drops SYNs. The `-wan` arms add 000's realistic path: 100 ms RTT and 5% loss (Table II \
                 row J). Each second, the server's open connections and listen-queue drops are read from its kernel.",
            )
        }
        "openloop" => {
            // 000's setup: a 10 Mbit/s uplink, 001 Table 1 sizes, FAIR scheduling (the baseline
            // of the SRPT experiments), at ρ = 0.9; the full run adds 000 Table I's W1.
            let mut arms = vec![openloop_arm("fair-rho0.9", Schedule::Constant { rho: 0.9 }, dur, cores)];
            if !quick {
                arms.push(openloop_arm("fair-w1", Schedule::table_i(1).expect("W1"), 300.0, cores));
            }
            (
                arms,
                "Open-loop load on a 10 Mbit/s uplink (000 section 3): Poisson arrivals, one connection each, file sizes of \
                 001 Table 1 bounded at 4 MB, FAIR (one FIFO of 100 packets, the txqueuelen of 000's Linux).",
            )
        }
        "maxclients" => (
            maxclients_limits(quick)
                .iter()
                .map(|&limit| {
                    let mut a = arm(&format!("mc{limit}"), heavy, dur, &WAN_80_2, false, cores);
                    a.farm.max_clients = limit;
                    a
                })
                .collect(),
            "004 Table 2: the farm sheds load by its own connection limit (Apache's MaxClients), one arm per limit, \
             under the heavy load over the 80 ms / 2% WAN. A tighter limit makes the server's own time per request \
             better and the clients' pageview response time worse: SYNs dropped at a full backlog cost the clients 3 s \
             and more, which the server never sees.",
        ),
        "syn-throttle" => (
            vec![arm("unmanaged", heavy, tdur, &WAN_80_2, false, cores), heavy_rlm("syn-throttle", throttle_rules(target))],
            "004 Figure 15: under the heavy load over the 80 ms / 2% WAN, rlm drops the SYNs of LOW (every client \
             outside 10.4/16) while HIGH's mean response time is above the target, so that HIGH meets it and LOW pays.",
        ),
        "syn-police" => {
            let (rate, burst) = police_limit(quick);
            // SYNs are counted from the ramp's end plus a connect timeout (28 s): 60 s leaves 32.
            let pdur = if quick { 60.0 } else { dur };
            let mut un = arm("unmanaged", heavy, pdur, &WAN_80_2, false, cores);
            un.syn_capture = true;
            let mut lim = with_rlm(arm("limit", heavy, pdur, &WAN_80_2, false, cores), police_rules(rate, burst), &[]);
            lim.syn_capture = true;
            (
                vec![un, lim],
                "Voigt's token bucket: rlm caps the SYN rate of LOW (10.5/16) with LIMIT SYN r/s BURST b and leaves HIGH \
                 alone. The lab counts the SYNs that reach the farm (a capture on the farm's own interface) per class and \
                 second, from the end of the browsers' ramp plus one connect timeout (LOW's first refused connects have \
                 played out) to the end of the run.",
            )
        }
        "fast-synack" => {
            let (clients, fdur) = fast_synack_scale(quick);
            // The farm's CPU scaled with the browsers: the same light load, about 60% busy.
            let fcores = cores * f64::from(clients) / f64::from(light);
            let fast_arm = |g: &str| {
                let mut a = with_rlm(arm(&format!("gap-{g}"), clients, fdur, &WAN_80_2, false, fcores), fast_synack_rules(g), &[]);
                // Connection slots for every browser's two connections and their keep-alive: as
                // in 004's light runs, the farm drops no SYN, so what passes 3 s is the WAN's
                // doing. (With the default 150 slots, 200 browsers filled them: pages waited in
                // the listen backlog and SYNs fell at the farm, which no SYN/ACK resend helps:
                // measured 12.5% of pageviews past 3 s against 4% at 60 browsers.)
                a.farm.max_clients = a.farm.max_clients.max(3 * clients as usize);
                a
            };
            (
                fast_synack_gaps(quick).iter().map(|g| fast_arm(g)).collect(),
                "004 Table 1: the light load over the 80 ms / 2% WAN of 004 Figure 12, rlm inline in every arm. With \
                 FAST SYN/ACK GAP g rlm resends the server's SYN/ACK to the client every g until the client's ACK \
                 comes, so a SYN/ACK lost in the WAN costs g instead of the server's 3 s timeout. Arm gap-3s is that \
                 timeout alone (rlm with the classes only, nothing acted on); the quick run leaves out gap-1s and has \
                 more browsers than the other light runs (the farm scaled with them) to count enough pageviews past \
                 3 s. A SYN lost before it reaches rlm is out of its reach.",
            )
        }
        "fast-syn" => (
            vec![fast_rlm("syn-throttle", throttle_rules(target)), fast_rlm("fast-syn", fast_syn_rules(target))],
            "004 Figure 16: syn-throttle's heavy load and rule (arm syn-throttle) against the same rule with fast SYN \
             and SYN/ACK retransmission for everyone every 500 ms, halted for LOW while its SYNs are dropped (arm \
             fast-syn): a LOW SYN dropped while HIGH is slow is resent by rlm once the rule lets go, instead of its \
             client waiting out 3 s and 9 s timeouts and failing at 21 s.",
        ),
        "think-gap" => {
            // The quick run has the think-gap arm only (`rlm-lab check` compares it with the
            // fast-syn experiment's arm); the full run repeats fast-syn's arm next to it.
            let mut arms = vec![fast_rlm("think-gap", think_gap_rules(target))];
            if !quick {
                arms.insert(0, fast_rlm("fast-syn", fast_syn_rules(target)));
            }
            (
                arms,
                "004 Figure 17: fast-syn's rules, and rlm also drops the initial SYN of the first connection of each LOW \
                 pageview and sends it on 3 s later (then every 500 ms): LOW's think time grows and the farm's load falls. \
                 004 shows the distribution shifted right and the 95th percentile of both classes better; a pageview \
                 whose container comes over a kept-alive connection is not delayed.",
            )
        }
        "remove-embeds" => (
            embeds_arms(Adapt::Remove, quick, light, embeds_duration_s(quick), cores),
            "004 Figure 18: the light load split into three groups of clients at 160, 220 and 300 ms RTT (2% loss), \
             no server overloaded. rlm inline in every arm blanks the image references of each container page past \
             the first N (arm keep-N; keep-all removes nothing, keep-0 all of them), so that a client far away can \
             be given the response time of a near one. A reference whose attribute a segment boundary cuts is kept \
             whole (counted).",
        ),
        "rewrite-embeds" => {
            let mut arms = embeds_arms(Adapt::Rewrite, quick, light, dur, cores);
            if !quick {
                // 004 section 6.4's `IF RT > 2s THEN REWRITE EMBEDS`, at the lab's scale (its
                // keep-all means are about half of 004's): too late for the large cover.
                arms.push(embeds_arm("rt-1s", embeds_rules(Adapt::Rewrite, None, Some(1.0)), light, dur, cores));
            }
            (
                arms,
                "004 Figure 19: remove-embeds' groups and load. rlm inline in every arm rewrites the requests of each \
                 container's images past the first N to their small variants (a sixteenth of the size, `/ims/` for \
                 `/img/`, through the lab's mapping ims.map; arm keep-N; keep-all rewrites nothing, keep-0 every one), \
                 in place, as the requests pass: the browser fetches every object, the farm serves the small ones. The \
                 full run adds rt-1s, the rewrite of every image requested once the pageview has taken 1 s (004's \
                 `IF RT > 2s THEN REWRITE EMBEDS`, which comes too late for the large cover).",
            )
        }
        "predict" => {
            let goal_arm = |g: f64| {
                let rules = format!(
                    "{}IF IP.SRC == *.*.*.* THEN REWRITE EMBEDS IF PREDICTED RT > {}s USING \"ims.map\"\n",
                    embeds_rules(Adapt::Rewrite, None, None),
                    g
                );
                embeds_arm(&format!("goal-{g}s"), rules, light, dur, cores)
            };
            (
                predict_goals(quick).into_iter().map(goal_arm).collect(),
                "004 Figure 20: remove-embeds' groups and load. rlm inline in every arm rewrites an image's request to \
                 its small variant when the pageview's elapsed time plus the image's predicted transfer time would pass \
                 the arm's goal (arm goal-Gs): the prediction is the mean transfer time rlm measured for objects of its \
                 size to clients of its RTT and loss, or the Cardwell et al. model until 8 of them are measured; an \
                 image whose size rlm has not seen served yet is left alone. A short goal rewrites the large cover \
                 for every group; as the goal grows, the cover is let through first for the near groups.",
            )
        }
        "throughput" => {
            let mut a = arm("throughput", 0, f64::from(throughput_sample_s(quick) * 2 * throughput_rounds(quick) as u32), &[], false, cores);
            a.farm.cpu_cores = None;
            a.profile = TcpProfile::Linux;
            (
                vec![a],
                "What rlm inline costs the bridge: arms plain-bridge and rlm alternate, round after round (the first of \
                 the two alternating too), each sample `sample_s` seconds of iperf3 (one stream, server to client), as \
                 long of wrk (a new connection per request to a 512-byte page of nginx on port 80, so every request's \
                 SYN crosses rlm's queue) and 2,000 timed connects. No WAN emulation; offloads off as in every lab run. \
                 Medians of the samples; every sample is listed.",
            )
        }
        other => bail!("unknown experiment '{other}' (known: {})", NAMES.join(", ")),
    })
}

/// Replay an arm's capture through the engine and compare its pageviews with the ground truth.
pub fn fidelity(a: &ArmResult) -> Result<Fidelity> {
    let Some(cap) = &a.capture else { bail!("arm {} has no capture", a.name) };
    let truth = read_truth(&a.ground_truth)?;
    let mut cfg = rlm_core::Config { server_ports: vec![crate::farm::FRONT_PORT], ..rlm_core::Config::default() };
    cfg.pageview.connect_timeout = a.config.profile.connect_timeout();
    let mut engine = rlm_core::Engine::new(cfg);
    let mut seen = Vec::new();
    rlm_core::capture::replay(
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
pub fn compare(truth: &[sim_clients::browser::GroundTruth], seen: &[rlm_core::PageviewRecord]) -> Fidelity {
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
    Fidelity {
        truth_pageviews: truth.iter().filter(|t| !t.failed).count(),
        matched: errs.len(),
        median_rel_err: crate::stats::percentile_sorted(&errs, 50.0),
        p90_rel_err: crate::stats::percentile_sorted(&errs, 90.0),
    }
}

/// Run an experiment end to end; returns the report's text.
pub fn run(name: &str, quick: bool, out: &Path, prefix: &str, only: &[String]) -> Result<String> {
    let (mut specs, note) = arms(name, quick)?;
    if let Some(missing) = only.iter().find(|o| !specs.iter().any(|s| &s.name == *o)) {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        bail!("{name} has no arm {missing} (its arms: {})", names.join(", "));
    }
    if !only.is_empty() {
        specs.retain(|s| only.contains(&s.name));
    }
    let params = params(name, quick);
    if name == "throughput" {
        eprintln!("rlm-lab: {name}: {} rounds of plain-bridge and rlm", throughput_rounds(quick));
        let results = crate::throughput::run(prefix, throughput_rounds(quick), throughput_sample_s(quick), out, &specs[0])?;
        return report::write(out, name, quick, &results, None, note, &params);
    }
    let mut results = Vec::new();
    for s in &specs {
        let dir = out.join(&s.name);
        eprintln!("rlm-lab: {name}: arm {} ({} clients, {:.0} s)", s.name, s.clients(), s.duration_s);
        results.push(run_arm(prefix, s, &dir)?);
    }
    let fid =
        if name == "fidelity" || name == "baseline-wan" { results.iter().find(|a| a.capture.is_some()).map(fidelity).transpose()? } else { None };
    report::write(out, name, quick, &results, fid.as_ref(), note, &params)
}

/// Check the quick experiments' results in `root` (one directory per experiment) against what
/// the papers show and the lab promises. Returns (passed, failed, notes) lines: notes are
/// figures shown next to the checks but not judged. An experiment whose result is missing fails
/// its checks; the others are still checked.
pub fn check(root: &Path) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    check_only(root, &NAMES)
}

/// [`check`] for these experiments only (each must have its result; the others are not read).
pub fn check_only(root: &Path, names: &[&str]) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    use serde_json::Value;
    let mut v: Vec<(bool, String)> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut results: std::collections::BTreeMap<&str, Value> = std::collections::BTreeMap::new();
    for &name in names {
        let Some(name) = NAMES.iter().copied().find(|n| *n == name) else {
            v.push((false, format!("{name}: no such experiment (known: {})", NAMES.join(", "))));
            continue;
        };
        let p = root.join(name).join("result.json");
        match std::fs::read(&p).map_err(anyhow::Error::from).and_then(|b| Ok(serde_json::from_slice::<Value>(&b)?)) {
            Ok(r) => {
                results.insert(name, r);
            }
            Err(e) => v.push((false, format!("{name}: no result ({}: {e})", p.display()))),
        }
    }
    let arm =
        |r: &Value, name: &str| -> Value { r["arms"].as_array().and_then(|a| a.iter().find(|x| x["name"] == name)).cloned().unwrap_or(Value::Null) };
    let num = |x: &Value| x.as_f64().unwrap_or(f64::NAN);
    let arm_mean = |r: &Value, a: &str, field: &str| num(&arm(r, a)["pageviews"][field]);
    let class_mean = |r: &Value, a: &str, class: &str| num(&arm(r, a)["pageviews"]["by_class"][class]["mean_s"]);
    // rlm's own count of frames it sent (arms[].rlm.injected); NaN when it reported none.
    let injected = |a: &Value, counter: &str| num(&a["rlm"]["injected"][counter]);
    // rlm ran, installed its rules, exited 0 on SIGTERM and left nothing behind.
    let rlm_clean = |v: &mut Vec<(bool, String)>, exp: &str, a: &Value| {
        let r = &a["rlm"];
        let what = format!(
            "{exp}/{}: rlm inline exited {} on SIGTERM, rules installed {}, rules left {}",
            a["name"].as_str().unwrap_or("?"),
            r["exit_code"],
            r["rules_installed"],
            r["rules_left"]
        );
        v.push((r["clean_exit"].as_bool() == Some(true) && r["rules_installed"].as_bool() == Some(true), what));
        let lost = r["reports_lost"].as_f64().unwrap_or(f64::NAN);
        v.push((lost == 0.0, format!("{exp}/{}: rlm kept up: {lost} packet reports lost", a["name"].as_str().unwrap_or("?"))));
    };
    // An open-loop arm completed at least `share` of its requests (more than `min` of them), and
    // its load generator kept up.
    let requests_done = |v: &mut Vec<(bool, String)>, exp: &str, a: &Value, min: f64, share: f64| {
        let name = a["name"].as_str().unwrap_or("?");
        let (count, done) = (num(&a["requests"]["count"]), num(&a["requests"]["completed"]));
        v.push((
            count > min && done / count >= share,
            format!("{exp}/{name}: {done} of {count} requests completed (at least {:.0}%)", share * 100.0),
        ));
        v.push((!a["generator_bottleneck"].as_bool().unwrap_or(true), format!("{exp}/{name}: the load generator was not the bottleneck")));
    };

    if let Some(ol) = results.get("openloop") {
        for a in ol["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            requests_done(&mut v, "openloop", a, 1000.0, 0.95);
            let tput = a["requests"]["throughput_bps"].as_f64().unwrap_or(0.0);
            v.push((tput > 4e6 && tput <= 10.5e6, format!("openloop/{name}: {:.2} Mbit/s through the 10 Mbit/s uplink", tput / 1e6)));
        }
    }
    // 002 section 3 / 000: SRPT by remaining bytes against FAIR, rlm shaping in both arms.
    if let Some(sr) = results.get("srpt") {
        let quick = sr["quick"].as_bool().unwrap_or(false);
        let loads: Vec<f64> = sr["loads"].as_array().into_iter().flatten().filter_map(|v| v.as_f64()).collect();
        for a in sr["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            let r = &a["requests"];
            let done = num(&r["completed"]);
            requests_done(&mut v, "srpt", a, 500.0, 0.95);
            let (down_sent, down_dropped) = (num(&r["link"]["downstream"]["sent_packets"]), num(&r["link"]["downstream"]["dropped"]));
            v.push((
                down_sent > 0.0 && down_dropped <= 0.001 * down_sent,
                format!("srpt/{name}: the queue formed in rlm's port, not downstream: {down_dropped} of {down_sent} packets dropped on the 10 Mbit/s link (at most 0.1%)"),
            ));
            let bands: Vec<f64> = a["rlm"]["srpt"]["bands"].as_array().into_iter().flatten().map(|b| num(&b["packets"])).collect();
            if name.starts_with("srpt") {
                // Control, 6 data bands and (rlm's default) the resend band.
                let used = bands.len() >= 7 && bands[1] > 0.0 && bands[6] > 0.0 && bands[0] > 0.0;
                v.push((used, format!("srpt/{name}: rlm's classifier used band 0, the smallest and the largest data bands: {bands:?} packets")));
                let published = num(&a["rlm"]["srpt"]["sizes_published"]);
                v.push((
                    published >= 0.9 * done,
                    format!("srpt/{name}: rlm published {published} response sizes for {done} requests (at least 90%)"),
                ));
            } else {
                v.push((bands.len() == 1 && bands[0] > 0.0, format!("srpt/{name}: FAIR: one class, {bands:?} packets")));
            }
            rlm_clean(&mut v, "srpt", a);
        }
        let req = |name: &str, key: &str| num(&arm(sr, name)["requests"][key]);
        for rho in loads {
            let (fair, srpt) = (format!("fair-{rho}"), format!("srpt-{rho}"));
            let ratio = req(&fair, "mean_s") / req(&srpt, "mean_s");
            let tput = req(&srpt, "throughput_bps") / req(&fair, "throughput_bps");
            let largest = req(&srpt, "largest1pct_mean_s") / req(&fair, "largest1pct_mean_s");
            let what = format!(
                "mean {:.3} s against FAIR's {:.3} s ({ratio:.1}x), throughput {:.2} against {:.2} Mbit/s, largest 1% {:.2} against {:.2} s",
                req(&srpt, "mean_s"),
                req(&fair, "mean_s"),
                req(&srpt, "throughput_bps") / 1e6,
                req(&fair, "throughput_bps") / 1e6,
                req(&srpt, "largest1pct_mean_s"),
                req(&fair, "largest1pct_mean_s")
            );
            if rho < 0.85 {
                // 002 reports the gain at every load; the issue judges it at 0.9.
                v.push((ratio > 1.0, format!("srpt at ρ = {rho}: SRPT's mean is lower: {what}")));
                continue;
            }
            let (min_ratio, tput_tol, largest_max) = if quick { (2.0, 0.03, 1.3) } else { (3.0, 0.02, 1.10) };
            v.push((ratio >= min_ratio, format!("srpt at ρ = {rho}: SRPT's mean at least {min_ratio}x lower than FAIR's (002: 3-8x): {what}")));
            // Throughput is the bytes of the completed requests over the time from the first
            // arrival to the last completion: FAIR's drain after the arrivals stop is the
            // slower (its losses leave the link idle in RTOs), so SRPT's may come out higher;
            // the check is that SRPT loses none.
            v.push((
                tput >= 1.0 - tput_tol,
                format!("srpt at ρ = {rho}: byte throughput no more than {:.0}% below FAIR's: {what}", tput_tol * 100.0),
            ));
            v.push((
                largest <= largest_max,
                format!(
                    "srpt at ρ = {rho}: the largest 1% of requests at most {:.0}% slower than under FAIR (000): {what}",
                    (largest_max - 1.0) * 100.0
                ),
            ));
        }
    }
    // 000 section 5: under W1's overloads connections pile up at the FAIR server until its
    // queues drop SYNs; SRPT finishes the many small requests and keeps the server healthy.
    if let Some(tr) = results.get("srpt-transient") {
        for a in tr["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            requests_done(&mut v, "srpt-transient", a, 500.0, 0.9);
            v.push((
                a["requests"]["server"]["timeline"].as_array().is_some_and(|t| t.len() as f64 >= 0.9 * num(&a["duration_s"])),
                format!("srpt-transient/{name}: the server's connections and drops were sampled each second"),
            ));
            rlm_clean(&mut v, "srpt-transient", a);
        }
        let (mut fair_drops_any, mut seen) = (false, 0);
        for path in ["", "-wan"] {
            let (fair, srpt) = (arm(tr, &format!("fair-w1{path}")), arm(tr, &format!("srpt-w1{path}")));
            if fair.is_null() || srpt.is_null() {
                continue;
            }
            seen += 1;
            let (fs, ss) = (&fair["requests"]["server"], &srpt["requests"]["server"]);
            let (fd, sd) = (num(&fs["listen_drops"]), num(&ss["listen_drops"]));
            let (fe, se) = (num(&fs["max_connections"]), num(&ss["max_connections"]));
            let (fm, sm) = (num(&fair["requests"]["mean_s"]), num(&srpt["requests"]["mean_s"]));
            let what = format!("listen drops {sd} against FAIR's {fd}, at most {se} connections open against {fe}, mean {sm:.3} s against {fm:.3} s");
            let variant = if path.is_empty() { "W1" } else { "W1 over 100 ms and 5% loss" };
            fair_drops_any |= fd > 0.0;
            v.push((sd <= fd / 10.0, format!("srpt-transient {variant}: SRPT drops no SYNs where FAIR does, or at most a tenth as many: {what}")));
            v.push((se < fe, format!("srpt-transient {variant}: fewer connections pile up at the server under SRPT: {what}")));
            v.push((sm < fm, format!("srpt-transient {variant}: SRPT's mean response time is lower (000: 138 ms against 1.1 s): {what}")));
        }
        v.push((
            seen == 2 && fair_drops_any,
            format!("srpt-transient: the FAIR server dropped connection attempts in at least one of the {seen} variants (the experiment's premise)"),
        ));
    }
    if let (Some(lan), Some(wan)) = (results.get("baseline-lan"), results.get("baseline-wan")) {
        let (lan_mean, wan_mean) = (arm_mean(lan, "lan", "mean_s"), arm_mean(wan, "unmanaged", "mean_s"));
        v.push((
            wan_mean > 2.0 * lan_mean && wan_mean - lan_mean > 0.2,
            format!("baseline-wan mean {wan_mean:.2} s clearly above baseline-lan {lan_mean:.2} s"),
        ));
        if let Some(heavy) = results.get("heavy") {
            let heavy_mean = arm_mean(heavy, "unmanaged", "mean_s");
            v.push((heavy_mean > wan_mean * 1.5, format!("heavy mean {heavy_mean:.2} s well above baseline-wan {wan_mean:.2} s")));
        }
    }
    if let Some(wan) = results.get("baseline-wan") {
        let gt3 = arm_mean(wan, "unmanaged", "gt3s_frac");
        v.push((gt3 >= 0.02, format!("baseline-wan: {:.1}% of pageviews past 3 s (SYN and SYN/ACK loss), at least 2%", gt3 * 100.0)));
        rlm_clean(&mut v, "baseline-wan", &arm(wan, "managed"));
        let f = &wan["fidelity"];
        let (truth, matched) = (num(&f["truth_pageviews"]), num(&f["matched"]));
        v.push((
            truth > 0.0 && matched / truth >= 0.95,
            format!("baseline-wan/managed (inline): {matched} of {truth} truth pageviews matched in its capture (at least 95%)"),
        ));
    }
    if let Some(fid) = results.get("fidelity") {
        let f = &fid["fidelity"];
        let (truth, matched) = (num(&f["truth_pageviews"]), num(&f["matched"]));
        v.push((truth > 0.0 && matched / truth >= 0.95, format!("fidelity: {matched} of {truth} truth pageviews matched (at least 95%)")));
        let med = num(&f["median_rel_err"]);
        v.push((med <= 0.05, format!("fidelity: median relative error {:.2}% (at most 5%)", med * 100.0)));
        let p90 = num(&f["p90_rel_err"]);
        v.push((p90 <= 0.10, format!("fidelity: p90 relative error {:.2}% (at most 10%)", p90 * 100.0)));
    }

    // 004 Table 2: as MaxClients tightens, the clients' pageviews get worse, the server's own
    // time better. Loosest against tightest strictly; no step between neighbours reversed by
    // more than 5%.
    if let Some(mc) = results.get("maxclients") {
        let mut arms: Vec<Value> = mc["arms"].as_array().cloned().unwrap_or_default();
        arms.sort_by_key(|a| std::cmp::Reverse(a["config"]["farm"]["max_clients"].as_u64().unwrap_or(0)));
        // (limit, pageview mean, pageview p95, server time mean)
        type Row = (u64, f64, f64, f64);
        let row = |a: &Value| {
            (
                a["config"]["farm"]["max_clients"].as_u64().unwrap_or(0),
                num(&a["pageviews"]["mean_s"]),
                num(&a["pageviews"]["p95_s"]),
                num(&a["farm_front"]["server_time_s"]["mean"]),
            )
        };
        let rows: Vec<Row> = arms.iter().map(row).collect();
        let show = |f: &dyn Fn(&Row) -> String| rows.iter().map(f).collect::<Vec<_>>().join(", ");
        if rows.len() >= 2 {
            let (first, last) = (rows[0], rows[rows.len() - 1]);
            // Each step from a limit to the next tighter one: not better by more than 5%.
            let worse = |f: fn(&Row) -> f64| rows.windows(2).all(|w| f(&w[1]) >= f(&w[0]) * 0.95);
            v.push((
                last.1 > first.1 && worse(|r| r.1),
                format!("maxclients: pageview mean gets worse as the limit tightens ({})", show(&|r| format!("{}: {:.2} s", r.0, r.1))),
            ));
            v.push((
                last.2 > first.2 && worse(|r| r.2),
                format!("maxclients: pageview p95 gets worse as the limit tightens ({})", show(&|r| format!("{}: {:.2} s", r.0, r.2))),
            ));
            let better = rows.windows(2).all(|w| w[1].3 <= w[0].3 * 1.05);
            v.push((
                last.3 < first.3 && better,
                format!(
                    "maxclients: the server's own time gets better as the limit tightens ({})",
                    show(&|r| format!("{}: {:.1} ms", r.0, r.3 * 1e3))
                ),
            ));
        } else {
            v.push((false, "maxclients: at least two limits".into()));
        }
    }

    // 004 Figure 15: HIGH held at the target by dropping LOW's SYNs; LOW pays.
    if let Some(st) = results.get("syn-throttle") {
        let target = num(&st["target_s"]);
        let (un_high, th_high) = (class_mean(st, "unmanaged", "HIGH"), class_mean(st, "syn-throttle", "HIGH"));
        let (un_low, th_low) = (class_mean(st, "unmanaged", "LOW"), class_mean(st, "syn-throttle", "LOW"));
        v.push((un_high > target, format!("syn-throttle: unmanaged HIGH mean {un_high:.2} s misses the target {target:.2} s")));
        v.push(((th_high - target).abs() <= 0.15 * target, format!("syn-throttle: HIGH mean {th_high:.2} s within 15% of the target {target:.2} s")));
        v.push((th_low > un_low, format!("syn-throttle: LOW pays: mean {th_low:.2} s against {un_low:.2} s unmanaged")));
        let a = arm(st, "syn-throttle");
        rlm_clean(&mut v, "syn-throttle", &a);
        let drops = num(&a["rlm"]["syn_drops"]["LOW"]);
        v.push((drops > 0.0, format!("syn-throttle: rlm reports {drops} LOW SYNs dropped")));
    }

    // Voigt's token bucket on LOW's SYNs, counted at the farm by the lab.
    if let Some(sp) = results.get("syn-police") {
        let rate = num(&sp["limit_rate_per_s"]);
        let (un, lim) = (arm(sp, "unmanaged"), arm(sp, "limit"));
        let un_low = num(&un["server_syns"]["by_class"]["LOW"]["syn_rate_per_s"]);
        let lim_low = num(&lim["server_syns"]["by_class"]["LOW"]["syn_rate_per_s"]);
        v.push((
            un_low > rate * 1.2,
            format!("syn-police: unmanaged LOW offers {un_low:.2} SYNs/s to the farm, above the limit {rate:.0}/s (the limit binds)"),
        ));
        v.push((
            (lim_low - rate).abs() <= 0.10 * rate,
            format!("syn-police: LOW's SYNs reach the farm at {lim_low:.2}/s, within 10% of the limit {rate:.0}/s"),
        ));
        let (un_high, lim_high) = (class_mean(sp, "unmanaged", "HIGH"), class_mean(sp, "limit", "HIGH"));
        v.push((lim_high < un_high, format!("syn-police: HIGH mean improves: {lim_high:.2} s against {un_high:.2} s unmanaged")));
        rlm_clean(&mut v, "syn-police", &lim);
    }

    // 004 Table 1: rlm resends the SYN/ACK every gap until the client's ACK comes, so a SYN/ACK
    // lost in the WAN costs the gap instead of the server's 3 s, and fewer pageviews pass 3 s.
    if let Some(fs) = results.get("fast-synack") {
        let (off, fast) = (arm(fs, "gap-3s"), arm(fs, "gap-500ms"));
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
        for a in fs["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            let sent = injected(a, "fast_synacks_sent");
            if name == "gap-3s" {
                // Nothing acted on: the counter is 0, or absent from an rlm that sends nothing.
                v.push((sent.is_nan() || sent == 0.0, format!("fast-synack/gap-3s: rlm resent no SYN/ACK ({sent} reported; nothing acted on)")));
            } else {
                v.push((sent > 0.0, format!("fast-synack/{name}: rlm resent {sent} SYN/ACKs to the clients")));
            }
            rlm_clean(&mut v, "fast-synack", a);
        }
    }

    // 004 Figure 16: with fast SYN retransmission, halted while LOW's SYNs are dropped, LOW's
    // dropped connects are resent by rlm when the rule lets go instead of failing at 21 s.
    if let Some(fs) = results.get("fast-syn") {
        let (st, fa) = (arm(fs, "syn-throttle"), arm(fs, "fast-syn"));
        let low_failed = |a: &Value| num(&a["pageviews"]["by_class"]["LOW"]["failed"]);
        let (st_failed, fa_failed) = (low_failed(&st), low_failed(&fa));
        if st_failed >= 10.0 {
            v.push((
                fa_failed <= 0.10 * st_failed,
                format!(
                    "fast-syn: LOW's pageviews with a failed connection fall by {:.0}%: {fa_failed:.0} against {st_failed:.0} under \
                     syn-throttle's rule alone (at least 90%)",
                    (1.0 - fa_failed / st_failed) * 100.0
                ),
            ));
        } else {
            v.push((
                false,
                format!(
                    "fast-syn: the syn-throttle arm has {st_failed} LOW pageviews with a failed connection, too few (at least 10) to \
                     judge their fall under fast-syn"
                ),
            ));
        }
        // The target (LOW better) is judged on the full run. The quick run's two 60 s arms differ
        // by up to 8% either way from run to run (their rule holds and lets go every few
        // seconds), so it guards against LOW getting worse by more than that.
        let quick = fs["quick"].as_bool().unwrap_or(false);
        let (st_low, fa_low) = (class_mean(fs, "syn-throttle", "LOW"), class_mean(fs, "fast-syn", "LOW"));
        let (bound, what) = if quick { (1.10, "at most 10% worse (quick)") } else { (1.0, "better") };
        v.push((
            fa_low < st_low * bound,
            format!(
                "fast-syn: LOW's mean {what}: {fa_low:.2} s against {st_low:.2} s under syn-throttle's rule alone ({:.0}% better; 004: 23%)",
                (1.0 - fa_low / st_low) * 100.0
            ),
        ));
        let (st_high, fa_high) = (class_mean(fs, "syn-throttle", "HIGH"), class_mean(fs, "fast-syn", "HIGH"));
        v.push((
            fa_high <= 1.10 * st_high,
            format!("fast-syn: HIGH's mean {fa_high:.2} s at most 10% above its {st_high:.2} s under syn-throttle's rule alone"),
        ));
        let sent = injected(&fa, "fast_syns_sent");
        v.push((sent > 0.0, format!("fast-syn/fast-syn: rlm resent {sent} SYNs to the farm")));
        rlm_clean(&mut v, "fast-syn", &st);
        rlm_clean(&mut v, "fast-syn", &fa);
    }

    // 004 Figure 17: LOW's first SYN of each pageview held back 3 s on top of fast-syn's rules.
    // 004 Figures 18 and 19: removing embedded objects, or rewriting their requests to small
    // variants, brings the far groups' response times down. keep-0's bound: removal half of
    // keep-all's rtt300 mean (the issue's). A rewrite still fetches every object, each a round
    // trip or more, and saves mostly the 256 KB cover's transfer (a fifth of the pageviews):
    // 95% (measured quick: 90%; 004 Figure 19 is likewise well above Figure 18).
    for (exp, counter, did, bound) in
        [("remove-embeds", "embeds_removed", "blanked {} references", 0.5), ("rewrite-embeds", "embeds_rewritten", "rewrote {} requests", 0.95)]
    {
        let Some(re) = results.get(exp) else { continue };
        let classes: Vec<&str> = RTT_GROUPS.iter().map(|g| g.0).collect();
        let means = |a: &str| classes.iter().map(|c| class_mean(re, a, c)).collect::<Vec<f64>>();
        let show = |m: &[f64]| classes.iter().zip(m).map(|(c, x)| format!("{c} {x:.2} s")).collect::<Vec<_>>().join(", ");
        let (all, none, one) = (means("keep-all"), means("keep-0"), means("keep-1"));
        v.push((all.windows(2).all(|w| w[0] < w[1]), format!("{exp}/keep-all: the farther the slower ({})", show(&all))));
        v.push((
            none[2] <= bound * all[2],
            format!("{exp}: keep-0 brings rtt300's mean to {:.2} s, at most {:.0}% of keep-all's {:.2} s", none[2], bound * 100.0, all[2]),
        ));
        v.push((
            one.iter().zip(&all).all(|(o, a)| o < a),
            format!("{exp}: keep-1 beats keep-all in every group ({} against {})", show(&one), show(&all)),
        ));
        for a in re["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            rlm_clean(&mut v, exp, a);
            let (done, failed) = (num(&a["rlm"]["adapted"][counter]), num(&a["rlm"]["adapted"]["adapt_patch_failed"]));
            // keep-10 may find nothing to do: the bookstore's pages came to at most 10 images in
            // the browsing mix (the full run of 2026-11-24: keep-9 blanked 4,081, keep-10 none).
            let kept = name.strip_prefix("keep-").and_then(|n| n.parse::<u32>().ok());
            let want = match (name, kept) {
                ("keep-all", _) => done == 0.0,
                (_, Some(n)) if n >= 10 => true,
                _ => done > 0.0,
            };
            v.push((
                want && failed == 0.0,
                format!("{exp}/{name}: rlm {}, {failed} segments it could not rewrite", did.replace("{}", &done.to_string())),
            ));
        }
    }
    // 004 Figure 20: the shorter the goal, the more is rewritten and the faster the pageviews.
    if let Some(pr) = results.get("predict") {
        let goals: Vec<f64> = pr["goals_s"].as_array().into_iter().flatten().filter_map(|g| g.as_f64()).collect();
        if let (Some(lo), Some(hi)) = (goals.first(), goals.last()) {
            let (lo_arm, hi_arm) = (format!("goal-{lo}s"), format!("goal-{hi}s"));
            for (c, _) in RTT_GROUPS {
                let (a, b) = (class_mean(pr, &lo_arm, c), class_mean(pr, &hi_arm, c));
                v.push((a < b, format!("predict/{c}: {a:.2} s at the {lo} s goal, below {b:.2} s at {hi} s")));
            }
        }
        for a in pr["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            rlm_clean(&mut v, "predict", a);
            let ad = &a["rlm"]["adapted"];
            let (done, made) = (num(&ad["embeds_rewritten"]), num(&ad["predictions_measured"]) + num(&ad["predictions_model"]));
            v.push((made > 0.0 && num(&ad["adapt_patch_failed"]) == 0.0, format!("predict/{name}: {made} predictions, {done} requests rewritten")));
        }
    }
    if let Some(tg) = results.get("think-gap") {
        let target = num(&tg["target_s"]);
        let a = arm(tg, "think-gap");
        let delayed = injected(&a, "syns_delayed");
        v.push((delayed > 0.0, format!("think-gap: rlm delayed {delayed} first SYNs of LOW pageviews")));
        let high = class_mean(tg, "think-gap", "HIGH");
        v.push((high <= 1.15 * target, format!("think-gap: HIGH mean {high:.2} s at most 15% above the target {target:.2} s")));
        rlm_clean(&mut v, "think-gap", &a);
        // 004: the 95th percentile of both classes better than under fast-syn's rules alone.
        // Shown, not judged: the quick run compares two experiments run minutes apart on a
        // shared machine, and LOW's p95 sits on the steps of its SYN timeouts (3, 9, 21 s) and
        // carries the 3 s delay itself.
        let reference = if arm(tg, "fast-syn").is_null() {
            results.get("fast-syn").map(|r| (r, "the fast-syn experiment's fast-syn arm"))
        } else {
            Some((tg, "its own fast-syn arm"))
        };
        if let Some((r, what)) = reference {
            for class in ["HIGH", "LOW"] {
                let p95 = |r: &Value, a: &str| num(&arm(r, a)["pageviews"]["by_class"][class]["p95_s"]);
                notes.push(format!(
                    "think-gap: {class} p95 {:.2} s against {:.2} s in {what} (004 Figure 17: better for both classes; not judged)",
                    p95(tg, "think-gap"),
                    p95(r, "fast-syn")
                ));
            }
        }
    }

    if let Some(tp) = results.get("throughput") {
        let (plain, with) = (arm(tp, "plain-bridge"), arm(tp, "rlm"));
        let (p, w) = (&plain["throughput"], &with["throughput"]);
        let (np, nw) = (p["samples"].as_array().map_or(0, |a| a.len()), w["samples"].as_array().map_or(0, |a| a.len()));
        v.push((np >= 3 && nw >= 3, format!("throughput: {np} plain-bridge and {nw} rlm samples (at least 3 each)")));
        let (bp, bw) = (num(&p["bulk_gbps"]), num(&w["bulk_gbps"]));
        v.push((
            bw >= 0.9 * bp,
            format!("throughput: rlm bulk {bw:.2} Gbit/s is {:.0}% of the plain bridge's {bp:.2} (at least 90%)", bw / bp * 100.0),
        ));
        let (cp, cw) = (num(&p["conn_per_s"]), num(&w["conn_per_s"]));
        // The target is 80%, judged on the full run (5 rounds of 5 s: `make lab`). Measured
        // there: 81%. The quick run's shorter samples swing by several points on this shared
        // two-core machine (76-79% measured), so it guards against regressions at 70%.
        let quick = tp["quick"].as_bool().unwrap_or(true);
        let (floor, judged) = if !quick && nw >= 5 && np >= 5 {
            (0.8, "the 80% target")
        } else {
            (0.7, "70% in a quick run; the 80% target is judged on the full run")
        };
        v.push((
            cw >= floor * cp,
            format!("throughput: rlm {cw:.0} connections/s is {:.0}% of the plain bridge's {cp:.0} (at least {judged})", cw / cp * 100.0),
        ));
        // Under that load rlm still measured every request (rlm's count of HTTP transactions
        // against wrk's count of requests, sample by sample).
        for s in w["samples"].as_array().into_iter().flatten() {
            let (req, got) = (num(&s["requests"]), num(&s["rlm"]["transactions"]));
            v.push((
                req > 0.0 && got >= 0.97 * req,
                format!("throughput: round {} rlm measured {got:.0} transactions for wrk's {req:.0} requests (at least 97%)", s["round"]),
            ));
        }
        let clean = w["rlm_clean_exits"].as_u64().unwrap_or(0) as usize;
        v.push((clean == nw && nw > 0, format!("throughput: rlm exited cleanly after {clean} of {nw} samples")));
    }

    // Every experiment of browsers (openloop, srpt and throughput have none).
    for name in NAMES.into_iter().filter(|n| !matches!(*n, "openloop" | "srpt" | "srpt-transient" | "throughput")) {
        let Some(r) = results.get(name) else { continue };
        for a in r["arms"].as_array().into_iter().flatten() {
            let b = a["generator_bottleneck"].as_bool().unwrap_or(true);
            v.push((!b, format!("{name}/{}: the load generator was not the bottleneck", a["name"].as_str().unwrap_or("?"))));
            let n = a["pageviews"]["count"].as_u64().unwrap_or(0);
            v.push((n >= 100, format!("{name}/{}: {n} pageviews measured", a["name"].as_str().unwrap_or("?"))));
        }
    }
    let (ok, bad): (Vec<_>, Vec<_>) = v.into_iter().partition(|(p, _)| *p);
    Ok((ok.into_iter().map(|(_, s)| s).collect(), bad.into_iter().map(|(_, s)| s).collect(), notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn every_rule_file_compiles_with_the_labs_mapping_beside_it() {
        // As rlm reads them: from a file, with the mapping the lab writes beside it.
        let dir = std::env::temp_dir().join(format!("rlm-lab-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ims.map"), crate::inline::IMS_MAP).unwrap();
        let mut rewrites = 0;
        for name in NAMES {
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
        assert_eq!(rewrites, 2 + 11 + 1 + predict_goals(true).len() + predict_goals(false).len());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fast_experiments_arms_and_rules() {
        let names = |specs: &[ArmSpec]| specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        let rules = |s: &ArmSpec| s.rlm.as_ref().expect("rlm inline").rules.clone();

        // fast-synack: every arm rlm inline at the light load (scaled), CI time kept.
        let (quick, _) = arms("fast-synack", true).unwrap();
        assert_eq!(names(&quick), ["gap-3s", "gap-500ms", "gap-10ms"]);
        let (full, _) = arms("fast-synack", false).unwrap();
        assert_eq!(names(&full), ["gap-3s", "gap-1s", "gap-500ms", "gap-10ms"]);
        assert_eq!(rules(&quick[0]), CLASS_RULES);
        assert_eq!(rules(&quick[1]), format!("{CLASS_RULES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN/ACK GAP 500ms\n"));
        let (wan, _) = arms("baseline-wan", true).unwrap();
        let per_core = |s: &ArmSpec| f64::from(s.clients()) / s.farm.cpu_cores.unwrap();
        for s in quick.iter().chain(full.iter()) {
            assert!(s.clients() <= 200, "{}", s.name);
            assert!((per_core(s) - per_core(&wan[0])).abs() < 1e-6, "{}: the light load's browsers per farm core", s.name);
            assert_eq!(s.wan, wan[0].wan);
            assert!(s.rlm.as_ref().unwrap().extra_args.is_empty());
        }
        // About 10 s of setup per arm: the quick experiment within 4.5 minutes.
        let wall: f64 = quick.iter().map(|s| s.duration_s + 10.0).sum();
        assert!(wall <= 270.0, "{wall} s");

        // fast-syn: syn-throttle's managed arm with a 1 s class window, and the same rule with
        // fast retransmission; the full run's farm bound by its CPU, with a slot for every
        // connection.
        let (st, _) = arms("syn-throttle", true).unwrap();
        let (fs, _) = arms("fast-syn", true).unwrap();
        assert_eq!(names(&fs), ["syn-throttle", "fast-syn"]);
        let mut throttle = st[1].clone();
        throttle.rlm.as_mut().unwrap().extra_args = ["--class-window", "1", "--fast-release-per-s", "8"].map(String::from).to_vec();
        assert_eq!(serde_json::to_value(&fs[0]).unwrap(), serde_json::to_value(&throttle).unwrap());
        let (ff, _) = arms("fast-syn", false).unwrap();
        assert_eq!((ff[1].clients(), ff[1].farm.max_clients, ff[1].farm.cpu_cores), (600, 1200, Some(0.17)));
        assert_eq!(serde_json::to_value(&ff[0].farm).unwrap(), serde_json::to_value(&ff[1].farm).unwrap());
        assert_eq!(ff[1].rlm.as_ref().unwrap().extra_args, ["--class-window", "1", "--fast-release-per-s", "20"]);
        let fast = format!(
            "{CLASS_RULES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 1.5s THEN\n  DROP SYN\n  HALT FAST SYN\n"
        );
        assert_eq!(rules(&fs[1]), fast);
        assert_eq!(fs[1].rlm.as_ref().unwrap().extra_args, ["--class-window", "1", "--fast-release-per-s", "8"]);
        assert_eq!((fs[1].clients(), fs[1].duration_s), (240, 60.0));

        // think-gap: its arm alone quick, after fast-syn's in the full run.
        let (tq, _) = arms("think-gap", true).unwrap();
        assert_eq!(names(&tq), ["think-gap"]);
        assert_eq!(rules(&tq[0]), format!("{fast}IF IP.SRC != 10.4.*.* THEN\n  DELAY FIRST SYN 3s\n"));
        let (tf, _) = arms("think-gap", false).unwrap();
        assert_eq!(names(&tf), ["fast-syn", "think-gap"]);
        assert_eq!(serde_json::to_value(&tf[0]).unwrap(), serde_json::to_value(&arms("fast-syn", false).unwrap().0[1]).unwrap());
    }

    fn class(mean: f64, p95: f64, failed: u64) -> Value {
        json!({"count": 500, "mean_s": mean, "p95_s": p95, "gt3s_frac": 0.1, "failed": failed})
    }

    fn arm_json(name: &str, count: u64, gt3s: f64, by_class: Value, injected: Value) -> Value {
        json!({
            "name": name,
            "generator_bottleneck": false,
            "pageviews": {"count": count, "mean_s": 1.0, "p95_s": 2.0, "gt3s_frac": gt3s, "failed": 0, "by_class": by_class},
            "rlm": {"exit_code": 0, "clean_exit": true, "rules_installed": true, "rules_left": [], "reports_lost": 0.0, "injected": injected}
        })
    }

    fn write_result(root: &Path, name: &str, result: Value) {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("result.json"), serde_json::to_vec(&result).unwrap()).unwrap();
    }

    /// The lines of `check` about the fast retransmission experiments.
    fn fast_lines(root: &Path) -> (Vec<String>, Vec<String>, Vec<String>) {
        let (ok, bad, notes) = check(root).unwrap();
        let ours = |v: Vec<String>| v.into_iter().filter(|l| l.starts_with("fast-syn") || l.starts_with("think-gap")).collect::<Vec<_>>();
        (ours(ok), ours(bad), notes)
    }

    #[test]
    fn checks_of_the_fast_experiments() {
        let root = std::env::temp_dir().join(format!("rlm-lab-check-fast-{}", std::process::id()));
        let (none, no_class) = (json!({}), json!({}));
        let synack = |slow_frac: f64, pages: u64| {
            json!({"experiment": "fast-synack", "synack_gaps": ["3s", "1s", "500ms", "10ms"], "arms": [
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
        write_result(
            &root,
            "think-gap",
            json!({"experiment": "think-gap", "target_s": 1.5, "arms": [
                arm_json("think-gap", 1400, 0.3, json!({"HIGH": class(1.6, 4.0, 0), "LOW": class(5.0, 8.0, 1)}), json!({"syns_delayed": 700.0})),
            ]}),
        );
        let (ok, bad, notes) = fast_lines(&root);
        assert!(bad.is_empty(), "{bad:#?}");
        let has = |lines: &[String], s: &str| lines.iter().any(|l| l.contains(s));
        assert!(has(&ok, "fast-synack/gap-3s: 115 pageviews past 3 s (at least 50"), "{ok:#?}");
        assert!(has(&ok, "fast-synack: gap-500ms cuts the share of pageviews past 3 s by 40%"), "{ok:#?}");
        assert!(has(&ok, "fast-synack: gap-500ms completed 2250 pages against gap-3s's 2300"), "{ok:#?}");
        assert!(has(&ok, "fast-synack/gap-3s: rlm resent no SYN/ACK"), "{ok:#?}");
        assert!(has(&ok, "fast-synack/gap-10ms: rlm resent 900 SYN/ACKs"), "{ok:#?}");
        assert!(has(&ok, "fast-syn: LOW's pageviews with a failed connection fall by 95%: 2 against 40"), "{ok:#?}");
        assert!(has(&ok, "fast-syn: LOW's mean better: 3.50 s against 4.50 s"), "{ok:#?}");
        assert!(has(&ok, "fast-syn: HIGH's mean 1.52 s at most 10% above its 1.43 s"), "{ok:#?}");
        assert!(has(&ok, "fast-syn/fast-syn: rlm resent 150 SYNs"), "{ok:#?}");
        assert!(has(&ok, "think-gap: rlm delayed 700 first SYNs"), "{ok:#?}");
        assert!(has(&ok, "think-gap: HIGH mean 1.60 s at most 15% above the target 1.50 s"), "{ok:#?}");
        assert!(has(&ok, "think-gap/think-gap: 1400 pageviews measured"), "{ok:#?}");
        assert_eq!(ok.iter().filter(|l| l.contains("rlm inline exited")).count(), 6, "{ok:#?}");
        assert_eq!(
            notes,
            [
                "think-gap: HIGH p95 4.00 s against 4.50 s in the fast-syn experiment's fast-syn arm (004 Figure 17: better for both classes; not judged)",
                "think-gap: LOW p95 8.00 s against 9.00 s in the fast-syn experiment's fast-syn arm (004 Figure 17: better for both classes; not judged)",
            ]
        );

        // A cut of a fifth, 4% fewer pages, and a syn-throttle arm with too few failures.
        write_result(&root, "fast-synack", synack(0.04, 2200));
        write_result(&root, "fast-syn", fast_syn(9, 1.52, 3.5, false));
        let (_, bad, _) = fast_lines(&root);
        assert_eq!(bad.len(), 3, "{bad:#?}");
        assert!(has(&bad, "fast-synack: gap-500ms cuts the share of pageviews past 3 s by 20%"), "{bad:#?}");
        assert!(has(&bad, "fast-synack: gap-500ms completed 2200 pages"), "{bad:#?}");
        assert!(has(&bad, "fast-syn: the syn-throttle arm has 9 LOW pageviews with a failed connection, too few"), "{bad:#?}");
        // A quick run (three gaps) guards the mechanism at a 20% cut.
        let mut quick = synack(0.04, 2300);
        quick["synack_gaps"] = json!(["3s", "500ms", "10ms"]);
        write_result(&root, "fast-synack", quick);
        let (ok, _, _) = fast_lines(&root);
        assert!(has(&ok, "by 20%: 4.00% (92 of 2300) against gap-3s's 5.00% (115 of 2300) (at least 20% in a quick run"), "{ok:#?}");
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
