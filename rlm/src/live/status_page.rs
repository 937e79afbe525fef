//! The status page's view (`/view`, sent to each open page through `/events`, read by `rlm top`):
//! what a person needs of the status at a glance, with the history a status alone lacks. Made
//! once a second from the status the event loop sets ([`super::metrics::Board::set`]):
//!
//! - each class: its pageviews' p50 and p95 response times over the class window, second by
//!   second over the last [`HISTORY_S`] seconds, the limits the rules test them against,
//!   pageviews a second and the share of its SYNs admitted over the last minute;
//! - each rule: how often it fired over the last minute and in all, and what rlm did;
//! - the data path: ring and queue backlogs, reports lost and packets passed unseen (fail-open)
//!   over the last minute, the loop's lag, the injection's use of its budget;
//! - the slowest open pageviews with their event graphs (004 Figure 3).

use std::collections::VecDeque;

use serde_json::{json, Value};

/// Seconds of history kept and drawn.
pub const HISTORY_S: u64 = 300;
/// The window of the rates and the last-minute counts, in seconds.
const MINUTE_S: u64 = 60;
/// The window of pageviews a second, in seconds.
const RATE_S: u64 = 10;

/// One status, reduced to what the view draws over time.
#[derive(Clone, Debug, Default)]
struct Sample {
    t_ms: u64,
    classes: Vec<ClassPoint>,
    /// Each rule's label and times fired in all.
    rules: Vec<(String, u64)>,
    /// Totals of what rlm did, by name ([`ACTIONS`]), and of the data path's losses.
    totals: Vec<(&'static str, u64)>,
}

#[derive(Clone, Debug, Default)]
struct ClassPoint {
    name: String,
    p50: Option<f64>,
    p95: Option<f64>,
    pageviews: u64,
    syns: u64,
    /// SYNs dropped or limited.
    refused: u64,
}

/// What rlm did, as the view counts it: (name, where in the status, key, how the page and `rlm
/// top` name it under "what rlm did"; None for the data path's losses, which they show with the
/// data path).
const ACTIONS: [(&str, &str, &str, Option<&str>); 10] = [
    ("syns_dropped", "stats", "syns_dropped", Some("SYNs dropped")),
    ("fast_syns_sent", "stats", "fast_syns_sent", Some("SYNs resent early")),
    ("fast_synacks_sent", "stats", "fast_synacks_sent", Some("SYN/ACKs resent early")),
    ("frames_injected", "injector", "sent", Some("frames injected")),
    ("embeds_removed", "stats", "embeds_removed", Some("references blanked")),
    ("embeds_rewritten", "stats", "embeds_rewritten", Some("references rewritten")),
    ("requests_rejected", "stats", "requests_rejected", Some("requests rejected")),
    ("idle_aborted", "stats", "idle_aborted", Some("idle connections aborted")),
    ("reports_lost", "fastpath", "ring_full", None),
    ("fail_open_passes", "fastpath", "stale", None),
];

/// The view and its history.
#[derive(Debug, Default)]
pub struct View {
    history: VecDeque<Sample>,
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

impl Sample {
    fn of(status: &Value, t_ms: u64) -> Sample {
        let classes = status["classes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let k = &c["counters"];
                ClassPoint {
                    name: c["class"].as_str().unwrap_or("?").to_string(),
                    p50: c["rt_p50_s"].as_f64(),
                    p95: c["rt_p95_s"].as_f64(),
                    pageviews: num(&k["pageviews"]),
                    syns: num(&k["syns"]),
                    refused: num(&k["syns_dropped"]) + num(&k["syns_limited"]),
                }
            })
            .collect();
        let rules = status["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| (r["rule"].as_str().unwrap_or("?").to_string(), num(&r["counters"]["fired"])))
            .collect();
        let totals = ACTIONS.iter().map(|(name, part, key, _)| (*name, num(&status[*part][*key]))).collect();
        Sample { t_ms, classes, rules, totals }
    }

    fn class(&self, name: &str) -> Option<&ClassPoint> {
        self.classes.iter().find(|c| c.name == name)
    }

    fn rule(&self, label: &str) -> Option<u64> {
        self.rules.iter().find(|(l, _)| l == label).map(|(_, n)| *n)
    }

    fn total(&self, name: &str) -> u64 {
        self.totals.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
    }
}

impl View {
    /// Add the status set at `t_ms` (Unix milliseconds) to the history.
    pub fn push(&mut self, status: &Value, t_ms: u64) {
        // A step back of the wall clock starts the history again.
        if self.history.back().is_some_and(|s| s.t_ms > t_ms) {
            self.history.clear();
        }
        self.history.push_back(Sample::of(status, t_ms));
        while self.history.front().is_some_and(|s| s.t_ms + HISTORY_S * 1000 < t_ms) {
            self.history.pop_front();
        }
    }

    /// The oldest sample at most `s` seconds before the newest, and the seconds between them
    /// (`None` with a single sample).
    fn since(&self, s: u64) -> Option<(&Sample, f64)> {
        let now = self.history.back()?;
        let then = self.history.iter().find(|x| x.t_ms + s * 1000 >= now.t_ms)?;
        let dt = (now.t_ms - then.t_ms) as f64 / 1000.0;
        (dt > 0.0).then_some((then, dt))
    }

    /// The view of the history with `status`, the one set last, for what only it says (the
    /// slowest pageviews, the data path).
    pub fn make(&self, status: &Value) -> Value {
        let Some(now) = self.history.back() else { return Value::Null };
        let minute = self.since(MINUTE_S);
        let rate = self.since(RATE_S);
        let limits = rule_limits(status);
        let classes: Vec<Value> = now
            .classes
            .iter()
            .map(|c| {
                let series = |f: fn(&ClassPoint) -> Option<f64>| -> Vec<Value> {
                    self.history.iter().map(|s| s.class(&c.name).and_then(f).map_or(Value::Null, Value::from)).collect()
                };
                let pageviews_per_s = rate.and_then(|(then, dt)| then.class(&c.name).map(|o| c.pageviews.saturating_sub(o.pageviews) as f64 / dt));
                // The share of its SYNs rlm let through over the last minute (None: no SYN).
                let admitted = minute.and_then(|(then, _)| then.class(&c.name)).and_then(|o| {
                    let syns = c.syns.saturating_sub(o.syns);
                    (syns > 0).then(|| 1.0 - c.refused.saturating_sub(o.refused).min(syns) as f64 / syns as f64)
                });
                let own: Vec<&Value> = limits.iter().filter(|(scope, _)| scope == &c.name || scope == "ALL").map(|(_, l)| l).collect();
                json!({
                    "class": c.name,
                    "p50": series(|p| p.p50),
                    "p95": series(|p| p.p95),
                    "p50_s": c.p50,
                    "p95_s": c.p95,
                    "limits": own,
                    "pageviews": c.pageviews,
                    "pageviews_per_s": pageviews_per_s,
                    "admitted_share": admitted,
                })
            })
            .collect();
        let rules: Vec<Value> = status["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let label = r["rule"].as_str().unwrap_or("?");
                let fired = num(&r["counters"]["fired"]);
                let last_minute = minute.map(|(then, _)| fired.saturating_sub(then.rule(label).unwrap_or(0)));
                json!({
                    "rule": label,
                    "text": r["text"],
                    "firing": r["firing"],
                    "fired": fired,
                    "fired_last_minute": last_minute,
                    "deferred": r["counters"]["deferred"],
                })
            })
            .collect();
        let actions: serde_json::Map<String, Value> = ACTIONS
            .iter()
            .map(|(name, _, _, _)| {
                let total = now.total(name);
                let last_minute = minute.map(|(then, _)| total.saturating_sub(then.total(name)));
                (name.to_string(), json!({ "total": total, "last_minute": last_minute }))
            })
            .collect();
        let injected_per_s = rate.map(|(then, dt)| now.total("frames_injected").saturating_sub(then.total("frames_injected")) as f64 / dt);
        let max_per_s = status["datapath"]["inject_max_per_s"].as_f64();
        let budget_used = match (injected_per_s, max_per_s) {
            (Some(r), Some(m)) if m > 0.0 && !status["injector"].is_null() => Some(r / m),
            _ => None,
        };
        let t0 = self.history.front().map_or(now.t_ms, |s| s.t_ms);
        json!({
            "t_ms": now.t_ms,
            "state": status["state"],
            "uptime_s": status["uptime_s"],
            "rules_file": status["rules_file"],
            "observer": status["observer"],
            "engines": status["engines"].as_array().map_or(1, |e| e.len()),
            "history_s": HISTORY_S,
            // Each sample's time, in seconds before the newest.
            "t": self.history.iter().map(|s| -((now.t_ms - s.t_ms) as f64) / 1000.0).collect::<Vec<f64>>(),
            "span_s": (now.t_ms - t0) as f64 / 1000.0,
            "classes": classes,
            "rules": rules,
            "actions": actions,
            // The actions in the order shown, with their labels.
            "action_labels": ACTIONS.iter().filter_map(|(name, _, _, label)| Some([*name, (*label)?])).collect::<Vec<_>>(),
            "datapath": {
                "rings": status["datapath"]["rings"],
                "queues": status["datapath"]["queues"],
                "lag_max_ms": status["datapath"]["lag_max_ms"],
                "injected_per_s": injected_per_s,
                "inject_max_per_s": max_per_s,
                "inject_budget_used": budget_used,
                "inject_denied": status["stats"]["inject_denied"],
                "connections": status["tables"]["connections"],
                "open_pageviews": status["tables"]["open_pageviews"],
                "map_update_errors": status["fastpath"]["map_update_errors"],
            },
            "slowest": status["slowest"],
        })
    }
}

/// The limits the rules test each class's response time against: (class as the rules name it,
/// or `ALL`; the limit with its statistic, comparison and rule).
fn rule_limits(status: &Value) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for r in status["rules"].as_array().into_iter().flatten() {
        for t in r["tests"].as_array().into_iter().flatten() {
            let Some(scope) = t["name"].as_str().and_then(|n| n.strip_prefix("RT.")) else { continue };
            let limit = json!({ "stat": t["stat"], "cmp": t["cmp"], "limit_s": t["limit_s"], "rule": r["rule"] });
            if !out.iter().any(|(s, l)| s == scope && l["stat"] == limit["stat"] && l["limit_s"] == limit["limit_s"]) {
                out.push((scope.to_string(), limit));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status as the event loop sets it, with `pageviews` finished and `syns` seen of which
    /// `dropped` dropped for class HIGH, the rule fired `fired` times.
    fn status(p95: f64, pageviews: u64, syns: u64, dropped: u64, fired: u64, injected: u64) -> Value {
        json!({
            "state": "running",
            "classes": [
                { "class": "HIGH", "rt_p50_s": p95 / 2.0, "rt_p95_s": p95,
                  "counters": { "pageviews": pageviews, "syns": syns, "syns_dropped": dropped, "syns_limited": 0 } },
                { "class": "LOW", "rt_p50_s": null, "rt_p95_s": null, "counters": { "pageviews": 0, "syns": 0 } },
            ],
            "rules": [{
                "rule": "r.rlm:3:1", "text": "IF RT.HIGH > 3.0s THEN DROP SYN", "firing": true,
                "counters": { "fired": fired, "deferred": 0 },
                "tests": [{ "name": "RT.HIGH", "stat": "MEAN", "cmp": ">", "limit_s": 3.0 }],
            }],
            "stats": { "syns_dropped": dropped, "inject_denied": 0 },
            "injector": { "sent": injected },
            "fastpath": { "ring_full": 0, "stale": 0 },
            "datapath": { "rings": [{ "waiting_bytes": 10, "size_bytes": 100 }], "queues": [], "lag_max_ms": 1.5, "inject_max_per_s": 100.0 },
            "slowest": [{ "client": "10.4.0.1", "rt_s": 4.0, "events": [{ "kind": "syn", "conn": 0, "t_s": 0.0 }] }],
        })
    }

    #[test]
    fn the_view_draws_each_class_over_time_with_its_rates_and_limits() {
        let mut v = View::default();
        let mut last = status(1.0, 100, 50, 0, 0, 0);
        v.push(&last, 1_000_000);
        let first = v.make(&last);
        assert_eq!(first["classes"][0]["pageviews_per_s"], Value::Null, "one sample: no rate yet");
        for i in 1..=70u64 {
            // Ten pageviews a second, five SYNs of which one dropped, the rule firing once and
            // rlm injecting 20 frames a second.
            last = status(1.0 + i as f64 / 10.0, 100 + 10 * i, 50 + 5 * i, i, i, 20 * i);
            v.push(&last, 1_000_000 + i * 1000);
        }
        let view = &v.make(&last);
        let high = &view["classes"][0];
        assert_eq!(high["class"], "HIGH");
        assert_eq!(high["p95"].as_array().unwrap().len(), 71, "a point a second");
        assert_eq!(high["p95"][70], 8.0);
        assert_eq!(high["p50"][70], 4.0);
        assert_eq!(view["t"][0], -70.0);
        assert!((high["pageviews_per_s"].as_f64().unwrap() - 10.0).abs() < 1e-9, "{high}");
        assert!((high["admitted_share"].as_f64().unwrap() - 0.8).abs() < 1e-9, "{high}");
        assert_eq!(high["limits"][0]["limit_s"], 3.0);
        assert_eq!(view["classes"][1]["p95"][70], Value::Null, "no pageview, no point");
        assert_eq!(view["classes"][1]["admitted_share"], Value::Null);
        assert_eq!(view["classes"][1]["limits"].as_array().unwrap().len(), 0, "LOW has no limit");
        assert_eq!(view["rules"][0]["fired_last_minute"], 60);
        assert_eq!(view["rules"][0]["fired"], 70);
        assert_eq!(view["actions"]["syns_dropped"]["last_minute"], 60);
        // What rlm did, in the order shown and with the labels shown; the data path's losses apart.
        let labels = view["action_labels"].as_array().unwrap();
        assert_eq!((labels.len(), &labels[0]), (8, &json!(["syns_dropped", "SYNs dropped"])));
        assert!(labels.iter().all(|l| view["actions"][l[0].as_str().unwrap()].is_object() && l[0] != "reports_lost"));
        assert!((view["datapath"]["inject_budget_used"].as_f64().unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(view["slowest"][0]["events"][0]["kind"], "syn");
        // The history keeps HISTORY_S seconds; a step back of the clock starts it again.
        let same = status(1.0, 100, 50, 0, 0, 0);
        for i in 71..=400u64 {
            v.push(&same, 1_000_000 + i * 1000);
        }
        assert_eq!(v.make(&same)["t"].as_array().unwrap().len() as u64, HISTORY_S + 1);
        v.push(&same, 5_000);
        assert_eq!(v.make(&same)["t"].as_array().unwrap().len(), 1);
    }
}
