//! srpt-tls (issue 25): the srpt experiment's load over HTTPS at ρ 0.9. Each request is a
//! connection of its own with a full TLS 1.3 handshake to the front, which serves the files
//! over HTTP/1.1 inside TLS. rlm cannot read a response's length there, so the classifier ranks
//! each flow by the bytes it has sent (the handshake's flight included), as LAS does: the
//! question is how much of SRPT's gain that keeps.

use serde_json::{Map, Value};

use super::fidelity_tls::SITE;
use super::srpt::{judge, Sizes, Srpt};
use super::{with_https, Checks, Experiment, Results};
use crate::arm::ArmSpec;

pub struct SrptTls;

impl Experiment for SrptTls {
    fn name(&self) -> &'static str {
        "srpt-tls"
    }

    fn note(&self) -> &'static str {
        "The srpt experiment's open-loop load at ρ = 0.9 over HTTPS: each request a connection of its own with a full \
        TLS 1.3 handshake to the front server (the load counts the handshake's bytes), HTTP/1.1 inside. rlm inline in \
        both arms as there, `--srpt fair` against `--srpt srpt`; without keys rlm reads no response's length, so the \
        classifier ranks each flow by the bytes it has sent so far."
    }

    /// srpt's arms at ρ 0.9, through the front over HTTPS.
    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        Srpt.arms(quick)
            .into_iter()
            .filter(|a| a.name.ends_with("-0.9"))
            .map(|mut a| {
                if let Some(ol) = a.openloop.as_mut() {
                    ol.via_front = true;
                }
                with_https(a, SITE, false)
            })
            .collect()
    }

    fn params(&self, _quick: bool) -> Map<String, Value> {
        let mut m = Srpt.params(false);
        m.insert("loads".into(), vec![0.9].into());
        m
    }

    fn browsers(&self) -> bool {
        false
    }

    /// As srpt at ρ 0.9, with no size published and the exchanges read.
    fn check(&self, sr: &Value, _all: &Results, c: &mut Checks) {
        judge(self.name(), sr, c, Sizes::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srpts_arms_at_09_over_https_through_the_front() {
        for quick in [true, false] {
            let arms = SrptTls.arms(quick);
            assert_eq!(arms.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["fair-0.9", "srpt-0.9"]);
            for a in &arms {
                assert!(a.openloop.as_ref().is_some_and(|o| o.via_front));
                assert_eq!(a.farm.tls_sites, [SITE]);
                assert!(a.https.as_ref().is_some_and(|h| !h.h2));
            }
        }
    }
}
