//! predict: 004 Figure 20, an image's request rewritten to its small variant when its predicted
//! transfer would take the pageview past the arm's goal, remove-embeds' groups and load.

use serde_json::{Map, Value};

use super::remove_embeds::{embeds_arm, embeds_rules, Adapt, RTT_GROUPS};
use super::{class_mean, num, rlm_clean, scale, Checks, Experiment, Results};
use crate::arm::ArmSpec;

/// The predict arms' goals (seconds): an arm `goal-Gs` each (004 Figure 20's thresholds, at the
/// lab's scale: its keep-all means are about half of 004's).
pub fn predict_goals(quick: bool) -> Vec<f64> {
    if quick {
        vec![0.5, 3.0]
    } else {
        vec![0.5, 1.0, 1.5, 2.0, 3.0, 5.0]
    }
}

pub struct Predict;

impl Experiment for Predict {
    fn name(&self) -> &'static str {
        "predict"
    }

    fn note(&self) -> &'static str {
        "004 Figure 20: remove-embeds' groups and load. rlm inline in every arm rewrites an image's request to \
        its small variant when the pageview's elapsed time plus the image's predicted transfer time would pass \
        the arm's goal (arm goal-Gs): the prediction is the mean transfer time rlm measured for objects of its \
        size to clients of its RTT and loss, or the Cardwell et al. model until 8 of them are measured; an \
        image whose size rlm has not seen served yet is left alone. A short goal rewrites the large cover \
        for every group; as the goal grows, the cover is let through first for the near groups."
    }

    fn arms(&self, quick: bool) -> Vec<ArmSpec> {
        let (light, _, dur, cores) = scale(quick);
        let goal_arm = |g: f64| {
            let rules = format!(
                "{}IF IP.SRC == *.*.*.* THEN REWRITE EMBEDS IF PREDICTED RT > {}s USING \"ims.map\"\n",
                embeds_rules(Adapt::Rewrite, None, None),
                g
            );
            embeds_arm(&format!("goal-{g}s"), rules, light, dur, cores)
        };
        predict_goals(quick).into_iter().map(goal_arm).collect()
    }

    fn params(&self, quick: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("groups".into(), serde_json::json!(RTT_GROUPS.iter().map(|g| g.0).collect::<Vec<_>>()));
        m.insert("goals_s".into(), serde_json::json!(predict_goals(quick)));
        m
    }

    /// 004 Figure 20: the shorter the goal, the more is rewritten and the faster the pageviews.
    fn check(&self, pr: &Value, _all: &Results, c: &mut Checks) {
        let v = &mut c.v;
        let goals: Vec<f64> = pr["goals_s"].as_array().into_iter().flatten().filter_map(|g| g.as_f64()).collect();
        if let (Some(lo), Some(hi)) = (goals.first(), goals.last()) {
            let (lo_arm, hi_arm) = (format!("goal-{lo}s"), format!("goal-{hi}s"));
            for (c, _) in RTT_GROUPS {
                let (a, b) = (class_mean(pr, &lo_arm, c), class_mean(pr, &hi_arm, c));
                v.push((a < b, format!("predict/{c}: {a:.2} s at the {lo} s goal, below {b:.2} s at {hi} s")));
            }
        }
        for a in pr["arms"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            rlm_clean(v, "predict", a);
            let ad = &a["rlm"]["adapted"];
            let (done, made) = (num(&ad["embeds_rewritten"]), num(&ad["predictions_measured"]) + num(&ad["predictions_model"]));
            v.push((made > 0.0 && num(&ad["adapt_patch_failed"]) == 0.0, format!("predict/{name}: {made} predictions, {done} requests rewritten")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_its_table_and_plot() {
        crate::experiments::testing::adapted_report(
            &Predict,
            "predict-goals.png",
            "requests rewritten | predictions: measured | from the model |",
            " | 40 | - | 7 |",
        );
    }
}
