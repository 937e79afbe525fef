//! The experiments `rlm-lab run NAME` knows, at quick (CI) and full scale.
//!
//! Scale on this 2-core machine: the full runs keep the papers' shape (think time, RTT, loss,
//! light vs heavy load relative to the farm's capacity) with fewer clients and shorter runs
//! than the papers' (004 ran 200 and 550 browsers for 30 minutes on seven machines); the farm's
//! CPU quota is set so that the farm, not the load generators, saturates.

use std::path::Path;

use anyhow::{bail, Result};

use crate::experiment::{read_truth, run_arm, ArmResult, ArmSpec, OpenLoopArm};
use sim_clients::openloop::Schedule;
use crate::farm::FarmConfig;
use crate::report::{self, Fidelity};
use sim_clients::tcp_profile::TcpProfile;

pub const NAMES: [&str; 5] = ["baseline-lan", "baseline-wan", "heavy", "fidelity", "openloop"];

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
        think_mean_s: 7.0,
        duration_s,
        wan: wan.iter().map(|s| s.to_string()).collect(),
        profile: TcpProfile::Xp,
        farm: farm(cpu_cores),
        capture,
        seed: 1,
        openloop: None,
        rlm: None,
    }
}

fn openloop_arm(name: &str, schedule: Schedule, duration_s: f64, cpu_cores: f64) -> ArmSpec {
    let mut a = arm(name, 30, duration_s, &[], false, cpu_cores);
    a.farm.cpu_cores = None; // the link is the bottleneck, not the farm
    a.openloop = Some(OpenLoopArm { schedule, link_bps: 10_000_000, queue_packets: 100, files: 2000, max_file: 4e6, timeout_s: 60.0 });
    a
}

const WAN_80_2: [&str; 2] = ["10.4.0.0/16=80ms,2%", "10.5.0.0/16=80ms,2%"];

/// The arms of an experiment, and a note for its report.
pub fn arms(name: &str, quick: bool) -> Result<(Vec<ArmSpec>, &'static str)> {
    // Measured here: a pageview costs the farm about 9 ms of CPU, so N browsers thinking 7 s
    // ask for N / 7 × 9 ms of CPU per second.
    let (light, heavy, dur, cores) = if quick { (60, 240, 45.0, 0.12) } else { (150, 600, 300.0, 0.3) };
    Ok(match name {
        "baseline-lan" => (vec![arm("lan", light, dur, &[], false, cores)], "004 Figure 10: no delay, no loss, light load."),
        "baseline-wan" => (
            vec![arm("unmanaged", light, dur, &WAN_80_2, false, cores), arm("managed", light, dur, &WAN_80_2, true, cores)],
            "004 Figure 12: 80 ms RTT and 2% loss each way, Windows XP clients (3 s initial SYN timeout, 2 retries). \
             The managed arm runs the appliance's passive measurement (a capture of its server-side port analysed by \
             the engine); no management action exists yet, so it shapes nothing.",
        ),
        "heavy" => (vec![arm("unmanaged", heavy, dur, &WAN_80_2, false, cores)], "004 Figure 13: heavy load over the same WAN."),
        "fidelity" => (
            vec![arm("wan", light, dur, &WAN_80_2, true, cores)],
            "The appliance's passive measurement against the browsers' ground truth, over the 004 Figure 12 WAN.",
        ),
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
    rlm_core::capture::replay(cap, &mut engine, &mut |ev| {
        if let rlm_core::Event::Pageview(p) = ev {
            seen.push(p);
        }
        Ok(())
    }, None)?;
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
pub fn run(name: &str, quick: bool, out: &Path, prefix: &str) -> Result<String> {
    let (specs, note) = arms(name, quick)?;
    let mut results = Vec::new();
    for s in &specs {
        let dir = out.join(&s.name);
        eprintln!("rlm-lab: {name}: arm {} ({} clients, {:.0} s)", s.name, s.high_clients + s.low_clients, s.duration_s);
        results.push(run_arm(prefix, s, &dir)?);
    }
    let fid = if name == "fidelity" || name == "baseline-wan" {
        results.iter().find(|a| a.capture.is_some()).map(fidelity).transpose()?
    } else {
        None
    };
    report::write(out, name, quick, &results, fid.as_ref(), note)
}

/// Check the quick experiments' results in `root` (one directory per experiment) against what
/// the papers show and the lab promises. Returns (passed, failed) lines.
pub fn check(root: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let load = |name: &str| -> Result<serde_json::Value> {
        let p = root.join(name).join("result.json");
        Ok(serde_json::from_slice(&std::fs::read(&p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?)?)
    };
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    let mut verdict = |pass: bool, what: String| if pass { ok.push(what) } else { bad.push(what) };
    let arm_mean = |v: &serde_json::Value, arm: &str, field: &str| -> f64 {
        v["arms"].as_array().and_then(|a| a.iter().find(|x| x["name"] == arm)).map(|x| x["pageviews"][field].as_f64().unwrap_or(f64::NAN)).unwrap_or(f64::NAN)
    };
    if let Ok(ol) = load("openloop") {
        for a in ol["arms"].as_array().into_iter().flatten() {
            let r = &a["requests"];
            let (count, done) = (r["count"].as_f64().unwrap_or(0.0), r["completed"].as_f64().unwrap_or(0.0));
            let name = a["name"].as_str().unwrap_or("?");
            verdict(count > 1000.0 && done / count >= 0.95, format!("openloop/{name}: {done} of {count} requests completed (at least 95%)"));
            let tput = r["throughput_bps"].as_f64().unwrap_or(0.0);
            verdict(tput > 4e6 && tput <= 10.5e6, format!("openloop/{name}: {:.2} Mbit/s through the 10 Mbit/s uplink", tput / 1e6));
            verdict(!a["generator_bottleneck"].as_bool().unwrap_or(true), format!("openloop/{name}: the load generator was not the bottleneck"));
        }
    }
    let lan = load("baseline-lan")?;
    let wan = load("baseline-wan")?;
    let heavy = load("heavy")?;
    let fid = load("fidelity")?;
    let (lan_mean, wan_mean) = (arm_mean(&lan, "lan", "mean_s"), arm_mean(&wan, "unmanaged", "mean_s"));
    verdict(wan_mean > 2.0 * lan_mean && wan_mean - lan_mean > 0.2, format!("baseline-wan mean {wan_mean:.2} s clearly above baseline-lan {lan_mean:.2} s"));
    let gt3 = arm_mean(&wan, "unmanaged", "gt3s_frac");
    verdict(gt3 >= 0.02, format!("baseline-wan: {:.1}% of pageviews past 3 s (SYN and SYN/ACK loss), at least 2%", gt3 * 100.0));
    let heavy_mean = arm_mean(&heavy, "unmanaged", "mean_s");
    verdict(heavy_mean > wan_mean * 1.5, format!("heavy mean {heavy_mean:.2} s well above baseline-wan {wan_mean:.2} s"));
    let f = &fid["fidelity"];
    let (truth, matched) = (f["truth_pageviews"].as_f64().unwrap_or(0.0), f["matched"].as_f64().unwrap_or(0.0));
    verdict(truth > 0.0 && matched / truth >= 0.95, format!("fidelity: {matched} of {truth} truth pageviews matched (at least 95%)"));
    let med = f["median_rel_err"].as_f64().unwrap_or(f64::NAN);
    verdict(med <= 0.05, format!("fidelity: median relative error {:.2}% (at most 5%)", med * 100.0));
    let p90 = f["p90_rel_err"].as_f64().unwrap_or(f64::NAN);
    verdict(p90 <= 0.10, format!("fidelity: p90 relative error {:.2}% (at most 10%)", p90 * 100.0));
    for (name, v) in [("baseline-lan", &lan), ("baseline-wan", &wan), ("heavy", &heavy), ("fidelity", &fid)] {
        for a in v["arms"].as_array().into_iter().flatten() {
            let b = a["generator_bottleneck"].as_bool().unwrap_or(true);
            verdict(!b, format!("{name}/{}: the load generator was not the bottleneck", a["name"].as_str().unwrap_or("?")));
            let n = a["pageviews"]["count"].as_u64().unwrap_or(0);
            verdict(n >= 100, format!("{name}/{}: {n} pageviews measured", a["name"].as_str().unwrap_or("?")));
        }
    }
    Ok((ok, bad))
}
