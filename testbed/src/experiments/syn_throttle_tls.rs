//! syn-throttle-tls (issue 25): 004 Figure 15 over HTTPS. The same heavy load, farm, target and
//! rule as syn-throttle, but the farm terminates TLS and the browsers speak HTTP/1.1 over it
//! (two connections, thinking at least 2 s): rlm, without keys, measures the pageviews from the
//! encrypted records alone, and its `RT.HIGH` drives `DROP SYN` as it does in the clear.

use serde_json::{Map, Value};

use super::fidelity_tls::SITE;
use super::syn_throttle::{judge, SynThrottle};
use super::{with_https, Checks, Experiment, Results};
use crate::arm::ArmSpec;

/// The full run's farm is syn-throttle's CPU-bound one scaled by what a pageview costs it over
/// HTTPS against HTTP: the first full run (0.25 core) served its pageviews at 3.5 ms of CPU each
/// against the HTTP calibration's 4.9 ms, and stayed under the target unmanaged.
pub const HTTPS_FULL_CPU_SCALE: f64 = 0.72;

pub struct SynThrottleTls;

impl Experiment for SynThrottleTls {
    fn name(&self) -> &'static str {
        "syn-throttle-tls"
    }

    fn note(&self) -> &'static str {
        "004 Figure 15 over HTTPS: under the heavy load over the 80 ms / 2% WAN, with the farm terminating TLS and the \
        browsers speaking HTTP/1.1 over it, rlm drops LOW's SYNs while HIGH's mean response time, measured from the \
        encrypted records, is above the target."
    }

    /// Its rule holds a class at a target under the heavy load: a calibration of the last minutes.
    fn calibration_max_age(&self) -> Option<std::time::Duration> {
        Some(super::HOLD_CALIBRATION_MAX_AGE)
    }

    /// syn-throttle's arms, over HTTPS; the full run's farm CPU-bound at [`HTTPS_FULL_CPU_SCALE`]
    /// of syn-throttle's cores.
    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        SynThrottle
            .arms(quick)
            .into_iter()
            .map(|mut a| {
                if !quick {
                    a.farm.cpu_cores = a.farm.cpu_cores.map(|c| c * HTTPS_FULL_CPU_SCALE);
                }
                with_https(a, SITE, false)
            })
            .collect()
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        SynThrottle.params(quick)
    }

    /// As syn-throttle: the regime (unmanaged HIGH over the target, the farm overloaded, LOW's
    /// SYNs dropped), HIGH held near the target, LOW pays, rlm clean, rlm's live pageviews.
    fn check(&self, st: &Value, _all: &Results, c: &mut Checks) {
        judge(self.name(), st, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syn_throttles_arms_over_https() {
        for quick in [true, false] {
            let (plain, tls) = (SynThrottle.arms(quick), SynThrottleTls.arms(quick));
            assert_eq!(plain.len(), tls.len());
            for (p, t) in plain.iter().zip(&tls) {
                let cores = if quick { p.farm.cpu_cores } else { p.farm.cpu_cores.map(|c| c * HTTPS_FULL_CPU_SCALE) };
                assert_eq!((&p.name, p.clients(), p.duration_s, cores), (&t.name, t.clients(), t.duration_s, t.farm.cpu_cores));
                assert_eq!(t.farm.tls_sites, [SITE]);
                assert!(t.https.as_ref().is_some_and(|h| !h.h2 && h.site == SITE));
                assert_eq!(p.rlm.as_ref().map(|r| &r.rules), t.rlm.as_ref().map(|r| &r.rules));
            }
        }
    }
}
