//! maxclients: 004 Table 2, the farm shedding the heavy load by its own connection limit.

use serde_json::{Map, Value};

use super::{arm, farm_busy, num, scale, Checks, Experiment, Results, OVERLOADED_BUSY, WAN_80_2};
use crate::arm::ArmSpec;

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

pub struct Maxclients;

impl Experiment for Maxclients {
    fn name(&self) -> &'static str {
        "maxclients"
    }

    fn note(&self) -> &'static str {
        "004 Table 2: the farm sheds load by its own connection limit (Apache's MaxClients), one arm per limit, \
        under the heavy load over the 80 ms / 2% WAN. A tighter limit makes the server's own time per request \
        better and the clients' pageview response time worse: SYNs dropped at a full backlog cost the clients 3 s \
        and more, which the server never sees."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (_, heavy, dur, cores) = scale(quick);
        maxclients_limits(quick)
            .iter()
            .map(|&limit| {
                let mut a = arm(&format!("mc{limit}"), heavy, dur, &WAN_80_2, false, cores);
                a.farm.max_clients = limit;
                a
            })
            .collect()
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("max_clients".into(), maxclients_limits(quick).into());
        m
    }

    /// 004 Table 2: as MaxClients tightens, the clients' pageviews get worse, the server's own
    /// time better. Loosest against tightest strictly; no step between neighbours reversed by
    /// more than 5%.
    fn check(&self, mc: &Value, _all: &Results, c: &mut Checks) {
        let mut arms: Vec<Value> = mc["arms"].as_array().cloned().unwrap_or_default();
        arms.sort_by_key(|a| std::cmp::Reverse(a["config"]["farm"]["max_clients"].as_u64().unwrap_or(0)));
        let busy = arms.first().map_or(f64::NAN, farm_busy);
        let what = format!("under the loosest limit the farm was {:.0}% busy (its CPU the bottleneck)", busy * 100.0);
        if !c.regime("maxclients", busy >= OVERLOADED_BUSY, what) {
            return;
        }
        let v = &mut c.v;
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
}
