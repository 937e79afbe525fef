//! openloop: open-loop load on a 10 Mbit/s uplink (000 section 3), FAIR.

use serde_json::Value;
use sim_clients::openloop::Schedule;

use super::{openloop_arm, requests_done, scale, Checks, Experiment, Results};
use crate::arm::ArmSpec;

pub struct Openloop;

impl Experiment for Openloop {
    fn name(&self) -> &'static str {
        "openloop"
    }

    fn note(&self) -> &'static str {
        "Open-loop load on a 10 Mbit/s uplink (000 section 3): Poisson arrivals, one connection each, file sizes of \
        001 Table 1 bounded at 4 MB, FAIR (one FIFO of 100 packets, the txqueuelen of 000's Linux)."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (_, _, dur, cores) = scale(quick);
        // 000's setup: a 10 Mbit/s uplink, 001 Table 1 sizes, FAIR scheduling (the baseline
        // of the SRPT experiments), at ρ = 0.9; the full run adds 000 Table I's W1.
        let mut arms = vec![openloop_arm("fair-rho0.9", Schedule::Constant { rho: 0.9 }, dur, cores)];
        if !quick {
            arms.push(openloop_arm("fair-w1", Schedule::table_i(1).expect("W1"), 300.0, cores));
        }
        arms
    }

    fn browsers(&self) -> bool {
        false
    }

    fn check(&self, ol: &Value, _all: &Results, c: &mut Checks) {
        let v = &mut c.v;
        for a in ol["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            requests_done(v, "openloop", a, 1000.0, 0.95);
            let tput = a["requests"]["throughput_bps"].as_f64().unwrap_or(0.0);
            v.push((tput > 4e6 && tput <= 10.5e6, format!("openloop/{name}: {:.2} Mbit/s through the 10 Mbit/s uplink", tput / 1e6)));
        }
    }
}
