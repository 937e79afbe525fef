//! srpt-transient: 000 section 5, workload W1's transient overloads through the front server,
//! SRPT against FAIR, on a LAN and over 000's realistic path.

use serde_json::{Map, Value};
use sim_clients::openloop::Schedule;

use super::srpt::{srpt_schedule_arm, SRPT_RATE_PCT};
use super::{arm_in, num, requests_done, rlm_clean, Checks, Experiment, Results, SRPT_LINK_BPS};
use crate::arm::ArmSpec;

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

pub struct SrptTransient;

impl Experiment for SrptTransient {
    fn name(&self) -> &'static str {
        "srpt-transient"
    }

    fn note(&self) -> &'static str {
        "000 section 5 (workload W1 of Table I: 25 s at ρ = 0.2, 25 s at ρ = 1.2, in turn) on the srpt experiment's \
        link, with rlm inline in both arms as there. The requests go through the front server, which serves at most \
        150 connections at once with an accept queue of 128 (000 section 3's standard limits): when they fill, the \
        server's kernel drops SYNs. The `-wan` arms add 000's realistic path: 100 ms RTT and 5% loss (Table II \
        row J). Each second, the server's open connections and listen-queue drops are read from its kernel."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let dur = if quick { 100.0 } else { 300.0 };
        [false, true].into_iter().flat_map(|wan| [transient_arm("fair", wan, dur), transient_arm("srpt", wan, dur)]).collect()
    }

    fn params(&self, _quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("link_bps".into(), SRPT_LINK_BPS.into());
        m.insert("rate_pct".into(), SRPT_RATE_PCT.into());
        m.insert("max_clients".into(), TRANSIENT_MAX_CLIENTS.into());
        m.insert("backlog".into(), TRANSIENT_BACKLOG.into());
        m
    }

    fn browsers(&self) -> bool {
        false
    }

    /// 000 section 5: under W1's overloads connections pile up at the FAIR server until its
    /// queues drop SYNs; SRPT finishes the many small requests and keeps the server healthy.
    fn check(&self, tr: &Value, _all: &Results, c: &mut Checks) {
        let v = &mut c.v;
        for a in tr["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            requests_done(v, "srpt-transient", a, 500.0, 0.9);
            v.push((
                a["requests"]["server"]["timeline"].as_array().is_some_and(|t| t.len() as f64 >= 0.9 * num(&a["duration_s"])),
                format!("srpt-transient/{name}: the server's connections and drops were sampled each second"),
            ));
            rlm_clean(v, "srpt-transient", a);
        }
        let (mut fair_drops_any, mut seen) = (false, 0);
        for path in ["", "-wan"] {
            let (fair, srpt) = (arm_in(tr, &format!("fair-w1{path}")), arm_in(tr, &format!("srpt-w1{path}")));
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::testing::synthetic_arms;

    #[test]
    fn srpt_transient_report_has_the_server_columns_and_the_timelines() {
        let dir = std::env::temp_dir().join(format!("rlm-lab-report-transient-{}", std::process::id()));
        let (mut arms, note) = synthetic_arms(&dir, &SrptTransient);
        assert_eq!(arms.len(), 4);
        for (k, a) in arms.iter_mut().enumerate() {
            let secs: Vec<serde_json::Value> =
                (0..100).map(|t| serde_json::json!({"t_s": t, "started": 10, "completed": 10, "mean_s": 0.1 * k as f64})).collect();
            let server: Vec<serde_json::Value> = (1..100).map(|t| serde_json::json!({"t_s": t as f64, "connections": 50 * k + t % 25})).collect();
            a.requests = Some(serde_json::json!({"count": 1000, "completed": 990, "mean_s": 0.5, "mean_slowdown": 3.0, "largest1pct_mean_s": 2.0,
                "throughput_bps": 5e6, "by_second": secs, "server": {"max_connections": 50 * k + 24, "listen_drops": 7 * k, "timeline": server}}));
        }
        let md = crate::report::write(&dir, "srpt-transient", true, &arms, None, note, &SrptTransient.params(true)).unwrap();
        assert!(md.contains("| server: most connections | listen drops |"), "{md}");
        assert!(md.contains("| srpt-w1 | 1000 | 990 | 0.500 s | 3.0 | 2.00 s | 5.00 Mbit/s | 74 | 7 |"), "{md}");
        assert!(md.contains("- max_clients: 150"), "{md}");
        for png in ["srpt-transient-rt.png", "srpt-transient-connections.png"] {
            assert!(md.contains(png) && std::fs::metadata(dir.join(png)).unwrap().len() > 1000, "{png}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
