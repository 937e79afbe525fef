//! syn-throttle-tls (issue 25): 004 Figure 15 over HTTPS. The same heavy load, farm, target and
//! rule as syn-throttle, but the farm terminates TLS and the browsers speak HTTP/1.1 over it
//! (two connections, thinking at least 2 s): rlm, without keys, measures the pageviews from the
//! encrypted records alone, and its `RT.HIGH` drives `DROP SYN` as it does in the clear.

use serde_json::{Map, Value};

use super::fidelity_tls::SITE;
use super::syn_throttle::{judge, SynThrottle};
use super::{with_https, Checks, Experiment, Results};
use crate::arm::ArmSpec;

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

    /// syn-throttle's arms, over HTTPS.
    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        SynThrottle.arms(quick).into_iter().map(|a| with_https(a, SITE, false)).collect()
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
                assert_eq!((&p.name, p.clients(), p.duration_s, p.farm.cpu_cores), (&t.name, t.clients(), t.duration_s, t.farm.cpu_cores));
                assert_eq!(t.farm.tls_sites, [SITE]);
                assert!(t.https.as_ref().is_some_and(|h| !h.h2 && h.site == SITE));
                assert_eq!(p.rlm.as_ref().map(|r| &r.rules), t.rlm.as_ref().map(|r| &r.rules));
            }
        }
    }
}
