//! Experiment output: `result.json`, `report.md` and PNG plots drawn like 004 Figures 10-16
//! (response-time histogram with the mean and the 95th percentile marked).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use serde::Serialize;

use crate::arm::{ArmResult, Fidelity};

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

fn register_font() -> Result<()> {
    static ONCE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let bytes = std::fs::read(FONT).map_err(|e| format!("{FONT}: {e} (install fonts-dejavu-core)"))?;
        let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).map_err(|_| "bad font".to_string())
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// A histogram of response times with mean and 95th percentile marked.
pub fn histogram_png(path: &Path, title: &str, rts: &[f64], mean: f64, p95: f64) -> Result<()> {
    // Wide enough for the tail that matters (the 21 s failures of 004 Figure 14), no wider.
    let max = rts.iter().cloned().fold(0.0f64, f64::max);
    let top = max.min((p95 * 2.0).max(mean * 3.0)).max(p95 * 1.2).clamp(0.1, 60.0);
    let bin = top / 60.0;
    let bins = (top / bin).ceil() as usize + 1;
    let mut counts = vec![0u32; bins];
    for &r in rts {
        counts[((r / bin) as usize).min(bins - 1)] += 1;
    }
    let ymax = counts.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
    chart_png(path, title, (0f64..top, "response time (s)"), (0f64..ymax, "count"), |chart| {
        chart
            .draw_series(counts.iter().enumerate().map(|(i, c)| {
                let x0 = i as f64 * bin;
                Rectangle::new([(x0, 0.0), (x0 + bin, *c as f64)], BLUE.mix(0.6).filled())
            }))
            .map_err(|e| anyhow!("{e}"))?;
        for (x, label, color) in [(mean, format!("mean {mean:.2} s"), RED), (p95, format!("95th {p95:.2} s"), BLACK)] {
            chart
                .draw_series(LineSeries::new(vec![(x, 0.0), (x, ymax)], color.stroke_width(2)))
                .map_err(|e| anyhow!("{e}"))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
        }
        Ok(())
    })
}

/// A chart of the lab's: f64 against f64, drawn into a PNG.
type Chart<'a> = ChartContext<'a, BitMapBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The lab's charts: an 800×480 PNG with a title, axes over these ranges with these labels,
/// what `draw` puts in, and a legend of the series it labelled.
fn chart_png(
    path: &Path,
    title: &str,
    (xs, x_desc): (std::ops::Range<f64>, &str),
    (ys, y_desc): (std::ops::Range<f64>, &str),
    draw: impl FnOnce(&mut Chart<'_>) -> Result<()>,
) -> Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(xs, ys)
        .map_err(|e| anyhow!("{e}"))?;
    chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).label_style(("sans-serif", 14)).draw().map_err(|e| anyhow!("{e}"))?;
    draw(&mut chart)?;
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// One of rlm's injection counters of an arm (`arms[].rlm.injected`), or "-".
fn injected(a: &ArmResult, counter: &str) -> String {
    a.rlm.as_ref().and_then(|r| r.injected.get(counter)).map_or("-".into(), |x| format!("{x:.0}"))
}

/// 004 Table 1 for fast-synack: per SYN/ACK gap, the mean pageview response time and its speedup
/// against the arm without fast retransmission (gap-3s), the 95th percentile, the share past
/// 3 s and the pages, and the SYN/ACKs rlm resent.
fn synack_table(arms: &[ArmResult]) -> String {
    let base = arms.iter().find(|a| a.name == "gap-3s").map(|a| a.pageviews.all.mean_s).filter(|m| *m > 0.0);
    let mut md = String::from(
        "\n| SYN/ACK gap | mean PV RT | mean speedup | 95th % PV RT | > 3 s PV RT | total pages | SYN/ACKs rlm resent |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for a in arms {
        let p = &a.pageviews.all;
        let gap = a.name.strip_prefix("gap-").unwrap_or(&a.name);
        let off = if a.name == "gap-3s" { " (off)" } else { "" };
        let speedup = base.map_or("-".into(), |b| format!("{:.1}%", (b - p.mean_s) / b * 100.0));
        md.push_str(&format!(
            "| {gap}{off} | {:.2} s | {speedup} | {:.2} s | {:.2}% | {} | {} |\n",
            p.mean_s,
            p.p95_s,
            p.gt3s_frac * 100.0,
            p.count,
            injected(a, "fast_synacks_sent")
        ));
    }
    md
}

/// attacks (issue 24): per arm, what the attacker sent and rlm's memory, descriptors and
/// engine call times, beside HIGH's mean by the browsers.
fn attack_table(arms: &[ArmResult]) -> String {
    let mut md = String::from(
        "\n| arm | attacker: frames (refused), seconds, per second | rlm RSS max | fds max | engine call p99.99 / max, timed | HIGH mean | rlm's RT.HIGH at the end |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for a in arms {
        let attacker =
            a.attack.as_ref().map_or("-".into(), |o| format!("{} ({}), {:.1} s, {:.0}", o.frames_sent, o.frames_failed, o.seconds, o.rate_per_s));
        let r = a.rlm.as_ref();
        let rss = r.and_then(|r| r.rss_max_kib).map_or("-".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
        let fds = r.and_then(|r| r.fds_max).map_or("-".into(), |n| n.to_string());
        let calls = r.and_then(|r| r.engine_call_us.as_ref()).map_or("-".into(), |c| format!("{} / {} µs, {}", c["p9999"], c["max"], c["timed"]));
        let high = a.pageviews.by_class.get("HIGH").map_or("-".into(), |h| format!("{:.3} s", h.mean_s));
        let rt = r.and_then(|r| r.samples.last()).and_then(|s| s.rt_mean_s.get("HIGH")).map_or("-".into(), |x| format!("{x:.3} s"));
        md.push_str(&format!("| {} | {attacker} | {rss} | {fds} | {calls} | {high} | {rt} |\n", a.name));
    }
    md
}

/// fast-syn and think-gap (004 Figures 16 and 17): each class of each arm, and what rlm did to
/// the SYNs.
fn class_table(arms: &[ArmResult]) -> String {
    let mut md = String::from("\n| arm | class | pageviews | mean | p95 | > 3 s | failed |\n| --- | --- | --- | --- | --- | --- | --- |\n");
    for a in arms {
        for (class, s) in &a.pageviews.by_class {
            md.push_str(&format!(
                "| {} | {class} | {} | {:.2} s | {:.2} s | {:.1}% | {} |\n",
                a.name,
                s.count,
                s.mean_s,
                s.p95_s,
                s.gt3s_frac * 100.0,
                s.failed
            ));
        }
    }
    md.push_str(
        "\n| arm | LOW SYNs dropped | SYNs resent | client SYNs absorbed | client SYNs let through | first SYNs delayed | SYN/ACKs resent | frames refused |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for a in arms {
        let dropped = a.rlm.as_ref().and_then(|r| r.syn_drops.get("LOW")).map_or("-".into(), |x| format!("{x:.0}"));
        md.push_str(&format!(
            "| {} | {dropped} | {} | {} | {} | {} | {} | {} |\n",
            a.name,
            injected(a, "fast_syns_sent"),
            injected(a, "fast_syns_absorbed"),
            injected(a, "fast_syns_client_passed"),
            injected(a, "syns_delayed"),
            injected(a, "fast_synacks_sent"),
            injected(a, "inject_denied")
        ));
    }
    md
}

/// The objects an arm of remove-embeds or rewrite-embeds keeps whole (`keep-N`: N; `keep-all`
/// and others: None).
fn kept_of(arm: &str) -> Option<u32> {
    arm.strip_prefix("keep-").and_then(|n| n.parse().ok())
}

/// An arm on the objects-kept axis: `keep-N` and `keep-all` (the other arms, such as
/// rewrite-embeds' `rt-1s`, are in the table only).
fn on_kept_axis(arm: &str) -> bool {
    arm == "keep-all" || kept_of(arm).is_some()
}

/// remove-embeds and rewrite-embeds (004 Figures 18 and 19): each group's mean by the objects
/// kept, and what rlm did to the pages or the requests.
fn embeds_table(experiment: &str, arms: &[ArmResult]) -> String {
    let classes: Vec<&String> = arms.first().map(|a| a.pageviews.by_class.keys().collect()).unwrap_or_default();
    let heads: Vec<String> = classes.iter().map(|c| format!("{c} mean")).collect();
    let counters: [(&str, &str); 3] = if experiment == "rewrite-embeds" {
        [("requests rewritten", "embeds_rewritten"), ("left: target split", "rewrites_split"), ("segments rewritten", "adapt_segments_edited")]
    } else if experiment == "predict" {
        [("requests rewritten", "embeds_rewritten"), ("predictions: measured", "predictions_measured"), ("from the model", "predictions_model")]
    } else {
        [("references blanked", "embeds_removed"), ("kept at a cut", "embeds_kept_split"), ("segments rewritten", "adapt_segments_edited")]
    };
    let mut md = format!("\n| arm | {} | {} |\n", heads.join(" | "), counters.map(|c| c.0).join(" | "));
    md.push_str(&format!("| --- |{} --- | --- | --- |\n", " --- |".repeat(classes.len())));
    for a in arms {
        let means: Vec<String> = classes.iter().map(|c| a.pageviews.by_class.get(*c).map_or("-".into(), |s| format!("{:.2} s", s.mean_s))).collect();
        let got = |k: &str| a.rlm.as_ref().and_then(|r| r.adapted.get(k)).map_or("-".into(), |x| format!("{x:.0}"));
        md.push_str(&format!("| {} | {} | {} |\n", a.name, means.join(" | "), counters.map(|c| got(c.1)).join(" | ")));
    }
    md
}

/// 004 Figures 18 and 19 as a plot: each class's mean response time against the objects kept
/// (the arm that keeps all at the right, one past the largest N).
pub fn removal_png(path: &Path, arms: &[ArmResult]) -> Result<()> {
    let largest = arms.iter().filter_map(|a| kept_of(&a.name)).max().unwrap_or(0);
    let x_of = |name: &str| on_kept_axis(name).then(|| kept_of(name).unwrap_or(largest + 1) as f64);
    let x = (-0.5f64..(largest as f64 + 1.5), "embedded objects kept");
    class_means_png(path, "mean response time by objects kept (right: all)", x, arms, x_of)
}

/// The goal of a predict arm (`goal-1.5s`: 1.5).
fn goal_of(arm: &str) -> Option<f64> {
    arm.strip_prefix("goal-")?.strip_suffix('s')?.parse().ok()
}

/// 004 Figure 20 as a plot: each class's mean response time against the arm's goal.
pub fn goals_png(path: &Path, arms: &[ArmResult]) -> Result<()> {
    let largest = arms.iter().filter_map(|a| goal_of(&a.name)).fold(0.0, f64::max);
    class_means_png(path, "mean response time by IF PREDICTED goal", (0f64..largest * 1.1 + 0.5, "goal (s)"), arms, goal_of)
}

/// Each class's mean response time against the arms' positions on an x axis (`x_of`: none for
/// arms left out).
fn class_means_png(path: &Path, title: &str, x: (std::ops::Range<f64>, &str), arms: &[ArmResult], x_of: impl Fn(&str) -> Option<f64>) -> Result<()> {
    let arms: Vec<(f64, &ArmResult)> = arms.iter().filter_map(|a| Some((x_of(&a.name)?, a))).collect();
    let ymax = arms.iter().flat_map(|(_, a)| a.pageviews.by_class.values().map(|s| s.mean_s)).fold(0.0, f64::max).max(0.5) * 1.15;
    let classes: Vec<String> = arms.first().map(|(_, a)| a.pageviews.by_class.keys().cloned().collect()).unwrap_or_default();
    chart_png(path, title, x, (0f64..ymax, "mean (s)"), |chart| {
        for (k, class) in classes.iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            let mut pts: Vec<(f64, f64)> = arms.iter().filter_map(|(x, a)| a.pageviews.by_class.get(class).map(|s| (*x, s.mean_s))).collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| anyhow!("{e}"))?
                .label(class.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled()))).map_err(|e| anyhow!("{e}"))?;
        }
        Ok(())
    })
}

/// 000 Figures 6 and 8 over time, one line per arm: the mean response time of the requests
/// started in each second (`rt`), or the connections open at the server each second.
fn transient_png(path: &Path, arms: &[ArmResult], rt: bool) -> Result<()> {
    let series: Vec<(String, Vec<(f64, f64)>)> = arms
        .iter()
        .filter_map(|a| {
            let r = a.requests.as_ref()?;
            let pts: Vec<(f64, f64)> = if rt {
                r["by_second"].as_array()?.iter().filter(|b| b["completed"].as_u64() > Some(0)).map(|b| (num(&b["t_s"]), num(&b["mean_s"]))).collect()
            } else {
                r["server"]["timeline"].as_array()?.iter().map(|s| (num(&s["t_s"]), num(&s["connections"]))).collect()
            };
            Some((a.name.clone(), pts))
        })
        .collect();
    let xmax = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).fold(10.0, f64::max);
    let ymax = series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).fold(if rt { 0.5 } else { 10.0 }, f64::max) * 1.1;
    let (title, y) = if rt {
        ("Mean response time of the requests started each second", "mean (s)")
    } else {
        ("Connections open on the server's port", "connections")
    };
    chart_png(path, title, (0f64..xmax, "time (s)"), (0f64..ymax, y), |chart| {
        for (k, (name, pts)) in series.into_iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(|e| anyhow!("{e}"))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
        }
        Ok(())
    })
}

/// Each arm's classes' mean response time (the browsers' own) over the run: a line per arm and
/// class, a point per timeline interval at its middle (an arm's first class drawn thicker).
fn class_timeline_png(path: &Path, experiment: &str, arms: &[ArmResult]) -> Result<()> {
    let series: Vec<(String, usize, Vec<(f64, f64)>)> = arms
        .iter()
        .filter(|a| a.timeline.len() > 1)
        .flat_map(|a| {
            a.pageviews.by_class.keys().enumerate().map(move |(k, class)| {
                let pts: Vec<(f64, f64)> = a
                    .timeline
                    .iter()
                    .filter_map(|b| b.by_class.get(class).filter(|s| s.count > 0).map(|s| (b.t_s + b.span_s / 2.0, s.mean_s)))
                    .collect();
                (format!("{} / {class}", a.name), k, pts)
            })
        })
        .collect();
    let xmax = arms.iter().flat_map(|a| a.timeline.iter().map(|b| b.t_s + b.span_s)).fold(10.0, f64::max);
    let ymax = series.iter().flat_map(|s| s.2.iter().map(|p| p.1)).fold(0.5, f64::max) * 1.1;
    let title = format!("{experiment}: mean response time of each class's pageviews, by start");
    chart_png(path, &title, (0f64..xmax, "time since the arm began (s)"), (0f64..ymax, "mean (s)"), |chart| {
        for (i, (name, k, pts)) in series.into_iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let style = color.stroke_width(if k == 0 { 3 } else { 2 });
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(|e| anyhow!("{e}"))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled()))).map_err(|e| anyhow!("{e}"))?;
        }
        Ok(())
    })
}

fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// A figure's share of `of` as a percentage, or "-" when there is nothing to share.
fn share(n: usize, of: usize) -> String {
    if of > 0 {
        format!("{:.1}%", n as f64 / of as f64 * 100.0)
    } else {
        "-".into()
    }
}

/// The live fidelity of the arms that ran rlm with its records: for all the truth's pageviews and
/// for those rlm acted on, and, for an arm that also captured its server port, the offline figure
/// over the same traffic (the live path's own error is the difference).
fn live_fidelity_table(arms: &[ArmResult]) -> String {
    let live: Vec<&ArmResult> = arms.iter().filter(|a| a.live_fidelity.is_some()).collect();
    if live.is_empty() {
        return String::new();
    }
    let pct = |x: f64| format!("{:.2}%", x * 100.0);
    // A subset's errors, "-" without a match.
    let errs = |f: &Fidelity| if f.matched > 0 { (pct(f.median_rel_err), pct(f.p90_rel_err)) } else { ("-".into(), "-".into()) };
    let mut md = String::from(
        "\n## Live fidelity\n\nrlm's live pageview records against the browsers' ground truth; acted on: the live pageviews rlm \
         dropped, limited or delayed a SYN of, or blanked or rewrote a reference of, and the truth's pageviews matched with them; \
         offline: the same arm's capture of the server-side port replayed through the engine.\n\n\
         | arm | truth pageviews | matched | median error | p90 error | acted on | acted matched | acted median | acted p90 | offline matched | offline median | offline p90 |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for a in live {
        let f = a.live_fidelity.as_ref().expect("filtered");
        let (med, p90) = errs(&f.all);
        let (acted_med, acted_p90) = errs(&f.acted);
        let offline = a.capture_fidelity.as_ref().map_or(["-".to_string(), "-".into(), "-".into()], |c| {
            let (m, p) = errs(c);
            [format!("{} ({})", c.matched, share(c.matched, c.truth_pageviews)), m, p]
        });
        md.push_str(&format!(
            "| {} | {} | {} ({}) | {med} | {p90} | {} of {} | {} | {acted_med} | {acted_p90} | {} |\n",
            a.name,
            f.all.truth_pageviews,
            f.all.matched,
            share(f.all.matched, f.all.truth_pageviews),
            f.seen_acted,
            f.seen,
            f.acted.matched,
            offline.join(" | ")
        ));
    }
    md
}

#[derive(Serialize)]
struct ResultFile<'a> {
    experiment: &'a str,
    quick: bool,
    /// The experiment's own figures (syn-throttle's target_s, syn-police's rate, ...).
    #[serde(flatten)]
    params: &'a serde_json::Map<String, serde_json::Value>,
    arms: &'a [ArmResult],
    #[serde(skip_serializing_if = "Option::is_none")]
    fidelity: Option<&'a Fidelity>,
}

/// Write result.json, the plots and report.md into `dir`; returns the report's text.
pub fn write(
    dir: &Path,
    experiment: &str,
    quick: bool,
    arms: &[ArmResult],
    fidelity: Option<&Fidelity>,
    notes: &str,
    params: &serde_json::Map<String, serde_json::Value>,
) -> Result<String> {
    std::fs::create_dir_all(dir)?;
    let result = ResultFile { experiment, quick, params, arms, fidelity };
    std::fs::write(dir.join("result.json"), serde_json::to_vec_pretty(&result)?)?;
    let mut md = format!("# {experiment}{}\n\n{notes}\n\n", if quick { " (quick)" } else { "" });
    for (k, v) in params {
        md.push_str(&format!("- {k}: {v}\n"));
    }
    if !params.is_empty() {
        md.push('\n');
    }
    if arms.iter().any(|a| a.throughput.is_some()) {
        md.push_str(&crate::throughput::table(arms));
        std::fs::write(dir.join("report.md"), &md)?;
        return Ok(md);
    }
    // The machine's probe: the same work's CPU time in every arm, unless the machine changed
    // speed (`crate::speed`).
    md.push_str("| arm | clients | duration | pageviews | mean | p50 | p95 | > 3 s | failed | generator CPU | generator lag p99 | farm CPU | machine probe |\n");
    md.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for a in arms {
        let p = &a.pageviews.all;
        md.push_str(&format!(
            "| {} | {} | {:.0} s | {} | {:.2} s | {:.2} s | {:.2} s | {:.1}% | {} | {:.0}%{} | {:.1} ms | {:.1} s | {} |\n",
            a.name,
            a.clients,
            a.duration_s,
            p.count,
            p.mean_s,
            p.p50_s,
            p.p95_s,
            p.gt3s_frac * 100.0,
            p.failed,
            if a.generator.wall_s > 0.0 { a.generator.cpu_s / a.generator.wall_s * 100.0 } else { 0.0 },
            if a.generator_bottleneck { " (bottleneck!)" } else { "" },
            a.generator.lag_p99_ms,
            a.farm_usage.cpu_s,
            a.machine_speed.as_ref().filter(|m| !m.samples_ms.is_empty()).map_or("-".to_string(), |m| format!("{:.2} ms", m.median_ms))
        ));
    }
    match experiment {
        "fast-synack" => md.push_str(&synack_table(arms)),
        "fast-syn" | "think-gap" => md.push_str(&class_table(arms)),
        "attacks" => md.push_str(&attack_table(arms)),
        "predict" => {
            md.push_str(&embeds_table(experiment, arms));
            goals_png(&dir.join("predict-goals.png"), arms)?;
            md.push_str("\n![mean by goal](predict-goals.png)\n");
        }
        "srpt-transient" => {
            for (png, what) in [("srpt-transient-rt.png", "mean response time by second"), ("srpt-transient-connections.png", "server connections")] {
                transient_png(&dir.join(png), arms, png.ends_with("rt.png"))?;
                md.push_str(&format!("\n![{what}]({png})\n"));
            }
        }
        "remove-embeds" | "rewrite-embeds" => {
            md.push_str(&embeds_table(experiment, arms));
            let png = format!("{experiment}-kept.png");
            removal_png(&dir.join(&png), arms)?;
            md.push_str(&format!("\n![mean by objects kept]({png})\n"));
        }
        _ => {}
    }
    let open: Vec<&ArmResult> = arms.iter().filter(|a| a.requests.is_some()).collect();
    if !open.is_empty() {
        md.push_str(
            "\n| arm | requests | completed | mean | mean slowdown | largest 1% mean | throughput | server: most connections | listen drops |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for a in &open {
            let r = a.requests.as_ref().expect("filtered");
            md.push_str(&format!(
                "| {} | {} | {} | {:.3} s | {:.1} | {:.2} s | {:.2} Mbit/s | {} | {} |\n",
                a.name,
                r["count"],
                r["completed"],
                r["mean_s"].as_f64().unwrap_or(0.0),
                r["mean_slowdown"].as_f64().unwrap_or(0.0),
                r["largest1pct_mean_s"].as_f64().unwrap_or(0.0),
                r["throughput_bps"].as_f64().unwrap_or(0.0) / 1e6,
                r["server"]["max_connections"],
                r["server"]["listen_drops"]
            ));
        }
    }
    for a in arms {
        for (class, s) in &a.pageviews.by_class {
            md.push_str(&format!(
                "\n- {} / {class}: {} pageviews, mean {:.2} s, p95 {:.2} s, > 3 s {:.1}%",
                a.name,
                s.count,
                s.mean_s,
                s.p95_s,
                s.gt3s_frac * 100.0
            ));
        }
    }
    md.push('\n');
    let fronts: Vec<&ArmResult> = arms.iter().filter(|a| a.farm_front.is_some()).collect();
    if !fronts.is_empty() {
        md.push_str(
            "\n| arm | max clients | most open | listen drops | pageview mean | pageview p95 | server time mean | server p95 | page time mean | image time mean | requests |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for a in fronts {
            let f = a.farm_front.as_ref().expect("filtered");
            // The farm's kernel, sampled each second: its most connections open on the front's
            // port, and the connection attempts its namespace's listen queues dropped.
            let (open, drops) =
                a.farm_tcp.as_ref().map_or(("-".to_string(), "-".to_string()), |t| (t.max_connections.to_string(), t.listen_drops.to_string()));
            md.push_str(&format!(
                "| {} | {} | {open} | {drops} | {:.2} s | {:.2} s | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {} |\n",
                a.name,
                a.config.farm.max_clients,
                a.pageviews.all.mean_s,
                a.pageviews.all.p95_s,
                f.server_time_s.mean * 1e3,
                f.server_time_s.p95 * 1e3,
                f.page_time_s.mean * 1e3,
                f.image_time_s.mean * 1e3,
                f.server_time_s.count
            ));
        }
    }
    for a in arms {
        if let Some(sy) = &a.server_syns {
            for (class, c) in &sy.by_class {
                md.push_str(&format!(
                    "\n- {} / {class}: {} SYNs reached the farm in {:.0} s ({:.2}/s; {:.2} connections/s, {:.2} answered/s)",
                    a.name, c.syns, sy.window_s, c.syn_rate_per_s, c.conn_rate_per_s, c.answered_rate_per_s
                ));
            }
        }
        if let Some(r) = &a.rlm {
            md.push_str(&format!(
                "\n- {} / rlm: exit {}, rules left {}, SYN drops {:?}, verdicts {:?}, frames sent or held {:?}, verdict latency p50 {} p99 {}, \
                 CPU {:.1} s; log {}",
                a.name,
                r.exit_code.map_or("none (killed)".into(), |c| c.to_string()),
                r.rules_left.len(),
                r.syn_drops,
                r.verdicts,
                r.injected,
                r.verdict_latency_p50_us.map_or("-".into(), |v| format!("{v:.0} µs")),
                r.verdict_latency_p99_us.map_or("-".into(), |v| format!("{v:.0} µs")),
                r.cpu_s,
                r.log.display()
            ));
        }
    }
    md.push('\n');
    // How each class's response time moves over the run (by pageview start).
    let timed: Vec<&ArmResult> = arms.iter().filter(|a| a.timeline.len() > 1).collect();
    if !timed.is_empty() && arms.iter().any(|a| a.rlm.as_ref().is_some_and(|r| !r.syn_drops.is_empty()) || a.server_syns.is_some()) {
        md.push_str("\n### Timeline (mean response time of the pageviews started in each interval, and their count)\n\n| arm | class |");
        let width = timed.iter().map(|a| a.timeline.len()).max().unwrap_or(0);
        let first = timed[0];
        for b in first.timeline.iter().take(width) {
            md.push_str(&format!(" {:.0}-{:.0} s |", b.t_s, b.t_s + b.span_s));
        }
        md.push_str(&format!("\n| --- | --- |{}\n", " --- |".repeat(width.min(first.timeline.len()))));
        for a in timed {
            // The arm's classes (HIGH and LOW, or the sites'), as its pageviews name them.
            for class in a.pageviews.by_class.keys() {
                md.push_str(&format!("| {} | {class} |", a.name));
                for b in a.timeline.iter().take(width.min(first.timeline.len())) {
                    match b.by_class.get(class) {
                        Some(s) => md.push_str(&format!(" {:.2} s ({}) |", s.mean_s, s.count)),
                        None => md.push_str(" - |"),
                    }
                }
                md.push('\n');
            }
        }
    }
    // Each class's response time over the run, every arm on one chart.
    if arms.iter().any(|a| a.timeline.len() > 1 && !a.pageviews.by_class.is_empty()) {
        class_timeline_png(&dir.join("class-rt-over-time.png"), experiment, arms)?;
        md.push_str("\n![each class's mean response time over the run](class-rt-over-time.png)\n");
    }
    md.push_str(&live_fidelity_table(arms));
    if let Some(f) = fidelity {
        md.push_str(&format!(
            "\n## Fidelity\n\nThe appliance's passive measurement (`rlm analyze` over a capture of its server-side port) against the browsers' ground truth: {} of {} truth pageviews matched ({:.1}%), median relative error {:.1}%, 90th percentile {:.1}%.\n",
            f.matched,
            f.truth_pageviews,
            if f.truth_pageviews > 0 { f.matched as f64 / f.truth_pageviews as f64 * 100.0 } else { 0.0 },
            f.median_rel_err * 100.0,
            f.p90_rel_err * 100.0
        ));
    }
    md.push_str("\n## Response-time distributions\n\n");
    for a in arms {
        let (rts, what): (Vec<f64>, &str) = if a.requests.is_some() {
            let text = std::fs::read_to_string(&a.ground_truth).unwrap_or_default();
            let recs: Vec<sim_clients::openloop::RequestRecord> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
            (recs.iter().filter(|r| r.ok).map(|r| r.rt_s).collect(), "requests")
        } else {
            (crate::arm::read_truth(&a.ground_truth).unwrap_or_default().iter().map(|p| p.rt_s).collect(), "pageviews")
        };
        let s = crate::stats::PvStats::of(&rts, 0);
        let png = format!("{}-rt.png", a.name);
        histogram_png(&dir.join(&png), &format!("{experiment}: {} ({} {what})", a.name, rts.len()), &rts, s.mean_s, s.p95_s)?;
        md.push_str(&format!("![{}]({png})\n\n", a.name));
    }
    std::fs::write(dir.join("report.md"), &md)?;
    Ok(md)
}
