//! rewrite-embeds: 004 Figure 19, the requests of each container's images past the first N
//! rewritten by rlm to their small variants, remove-embeds' groups and load.

use serde_json::{Map, Value};

use super::remove_embeds::{check_embeds, embeds_arm, embeds_arms, embeds_params, embeds_rules, Adapt};
use super::{scale, Checks, Experiment, Results};
use crate::arm::ArmSpec;

pub struct RewriteEmbeds;

impl Experiment for RewriteEmbeds {
    fn name(&self) -> &'static str {
        "rewrite-embeds"
    }

    fn note(&self) -> &'static str {
        "004 Figure 19: remove-embeds' groups and load. rlm inline in every arm rewrites the requests of each \
        container's images past the first N to their small variants (a sixteenth of the size, `/ims/` for \
        `/img/`, through the lab's mapping ims.map; arm keep-N; keep-all rewrites nothing, keep-0 every one), \
        in place, as the requests pass: the browser fetches every object, the farm serves the small ones. The \
        full run adds rt-1s, the rewrite of every image requested once the pageview has taken 1 s (004's \
        `IF RT > 2s THEN REWRITE EMBEDS`, which comes too late for the large cover)."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (light, _, dur, cores) = scale(quick);
        let mut arms = embeds_arms(Adapt::Rewrite, quick, light, dur, cores);
        if !quick {
            // 004 section 6.4's `IF RT > 2s THEN REWRITE EMBEDS`, at the lab's scale (its
            // keep-all means are about half of 004's): too late for the large cover.
            arms.push(embeds_arm("rt-1s", embeds_rules(Adapt::Rewrite, None, Some(1.0)), light, dur, cores));
        }
        arms
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        embeds_params(quick)
    }

    fn check(&self, re: &Value, _all: &Results, c: &mut Checks) {
        check_embeds(re, "rewrite-embeds", "embeds_rewritten", "rewrote {} requests", 0.95, &mut c.v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_its_table_and_plot() {
        crate::experiments::testing::adapted_report(
            &RewriteEmbeds,
            "rewrite-embeds-kept.png",
            "requests rewritten | left: target split | segments rewritten |",
            " | 40 | 2 | - |",
        );
    }
}
