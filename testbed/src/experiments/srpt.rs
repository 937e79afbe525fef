//! srpt: 002 section 3 on 000's link, SRPT by remaining bytes against FAIR, rlm inline shaping in
//! both arms.

use serde_json::{Map, Value};
use sim_clients::openloop::Schedule;

use super::{arm_in, num, openloop_arm, requests_done, rlm_clean, with_rlm, Checks, Experiment, Results, CLASS_RULES, SRPT_LINK_BPS};
use crate::arm::ArmSpec;

/// The share of the farm's uplink ([`SRPT_LINK_BPS`]) rlm shapes its client port at
/// (`[srpt] rate_pct`), so that the queue forms in rlm's bands.
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

/// An arm of the SRPT experiments: the open-loop load of `schedule` at rlm's shaped rate, rlm
/// inline with `--srpt mode`.
pub fn srpt_schedule_arm(name: &str, mode: &str, schedule: Schedule, duration_s: f64) -> ArmSpec {
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

pub struct Srpt;

impl Experiment for Srpt {
    fn name(&self) -> &'static str {
        "srpt"
    }

    fn note(&self) -> &'static str {
        "002 section 3 on 000's link: open-loop Poisson arrivals, one connection each, file sizes of 001 Table 1 \
        bounded at 4 MB, at load ρ of the 9.5 Mbit/s that rlm shapes its client port to (95% of the 10 Mbit/s link \
        downstream). rlm runs inline in both arms: `--srpt fair` (one FIFO of 100 packets) against `--srpt srpt` \
        (strict-priority bands by each response's remaining bytes, cutoffs 2K, 5K, 20K, 50K, 512K: see \
        SRPT_CUTOFFS; SYN/ACKs and other control packets first)."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let dur = if quick { 45.0 } else { 300.0 };
        srpt_loads(quick).iter().flat_map(|&rho| [srpt_arm("fair", rho, dur), srpt_arm("srpt", rho, dur)]).collect()
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("loads".into(), srpt_loads(quick).into());
        m.insert("link_bps".into(), SRPT_LINK_BPS.into());
        m.insert("rate_pct".into(), SRPT_RATE_PCT.into());
        m
    }

    fn browsers(&self) -> bool {
        false
    }

    /// 002 section 3 / 000: SRPT by remaining bytes against FAIR, rlm shaping in both arms.
    fn check(&self, sr: &Value, _all: &Results, c: &mut Checks) {
        judge(self.name(), sr, c, Sizes::Published)
    }
}

/// What the SRPT arms' classifier knows of a response's size.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Sizes {
    /// rlm reads each response's length in its HTTP head and publishes it (srpt).
    Published,
    /// Encrypted: rlm cannot read a length, and the classifier ranks each flow by the bytes it
    /// has sent (srpt-tls).
    Unknown,
}

/// The checks of the srpt experiment `exp` (its arms are `fair-ρ` and `srpt-ρ`): each arm's
/// requests done with the queue in rlm's port, the bands used, SRPT's mean against FAIR's at
/// each load with throughput kept and the largest 1% not starved.
pub fn judge(exp: &str, sr: &Value, c: &mut Checks, sizes: Sizes) {
    let v = &mut c.v;
    let quick = sr["quick"].as_bool().unwrap_or(false);
    let loads: Vec<f64> = sr["loads"].as_array().into_iter().flatten().filter_map(|v| v.as_f64()).collect();
    for a in sr["arms"].as_array().into_iter().flatten() {
        let name = a["name"].as_str().unwrap_or("?");
        let r = &a["requests"];
        let done = num(&r["completed"]);
        requests_done(v, exp, a, 500.0, 0.95);
        let (down_sent, down_dropped) = (num(&r["link"]["downstream"]["sent_packets"]), num(&r["link"]["downstream"]["dropped"]));
        v.push((
                down_sent > 0.0 && down_dropped <= 0.001 * down_sent,
                format!("{exp}/{name}: the queue formed in rlm's port, not downstream: {down_dropped} of {down_sent} packets dropped on the 10 Mbit/s link (at most 0.1%)"),
            ));
        let bands: Vec<f64> = a["rlm"]["srpt"]["bands"].as_array().into_iter().flatten().map(|b| num(&b["packets"])).collect();
        if name.starts_with("srpt") {
            // Control, 6 data bands and (rlm's default) the resend band.
            let used = bands.len() >= 7 && bands[1] > 0.0 && bands[6] > 0.0 && bands[0] > 0.0;
            v.push((used, format!("{exp}/{name}: rlm's classifier used band 0, the smallest and the largest data bands: {bands:?} packets")));
            let published = num(&a["rlm"]["srpt"]["sizes_published"]);
            match sizes {
                Sizes::Published => v.push((
                    published >= 0.9 * done,
                    format!("{exp}/{name}: rlm published {published} response sizes for {done} requests (at least 90%)"),
                )),
                Sizes::Unknown => {
                    v.push((
                        published == 0.0,
                        format!("{exp}/{name}: rlm published no response size ({published}): encrypted, each flow ranks by the bytes it has sent"),
                    ));
                }
            }
        } else {
            v.push((bands.len() == 1 && bands[0] > 0.0, format!("{exp}/{name}: FAIR: one class, {bands:?} packets")));
        }
        if sizes == Sizes::Unknown {
            // The regime: the responses were encrypted and rlm read them as such.
            let exchanges = num(&a["rlm"]["tls_exchanges"]);
            v.push((exchanges >= 0.9 * done, format!("{exp}/{name}: rlm read {exchanges} TLS exchanges for {done} requests (at least 90%)")));
        }
        rlm_clean(v, exp, a);
    }
    let req = |name: &str, key: &str| num(&arm_in(sr, name)["requests"][key]);
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
            v.push((ratio > 1.0, format!("{exp} at ρ = {rho}: SRPT's mean is lower: {what}")));
            continue;
        }
        let (min_ratio, tput_tol, mut largest_max) = if quick { (2.0, 0.03, 1.3) } else { (3.0, 0.02, 1.10) };
        if sizes == Sizes::Unknown {
            // Ranked by bytes sent (LAS), every response starts in the highest data band and
            // sinks as it grows: the largest pay for the small ones more than under SRPT with
            // sizes known (000's bound is for SRPT). What is asked is that they are not
            // starved: at most twice their time under FAIR.
            largest_max = 2.0;
        }
        v.push((ratio >= min_ratio, format!("{exp} at ρ = {rho}: SRPT's mean at least {min_ratio}x lower than FAIR's (002: 3-8x): {what}")));
        // Throughput is the bytes of the completed requests over the time from the first
        // arrival to the last completion: FAIR's drain after the arrivals stop is the
        // slower (its losses leave the link idle in RTOs), so SRPT's may come out higher;
        // the check is that SRPT loses none.
        v.push((tput >= 1.0 - tput_tol, format!("{exp} at ρ = {rho}: byte throughput no more than {:.0}% below FAIR's: {what}", tput_tol * 100.0)));
        v.push((
            largest <= largest_max,
            format!(
                "{exp} at ρ = {rho}: the largest 1% of requests at most {:.0}% slower than under FAIR ({}): {what}",
                (largest_max - 1.0) * 100.0,
                if sizes == Sizes::Unknown { "not starved" } else { "000" }
            ),
        ));
    }
}
