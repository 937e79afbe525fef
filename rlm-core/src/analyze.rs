//! `rlm analyze`: run the engine over a capture; write transactions and pageviews as JSON lines
//! and a human summary.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::engine::{Config, Engine, Event, Stats};
use crate::pageview::PageviewRecord;

/// Options of one analysis.
pub struct AnalyzeOptions {
    pub capture: PathBuf,
    pub transactions: Option<PathBuf>,
    pub pageviews: Option<PathBuf>,
    pub config: Config,
    /// Show a progress bar (when stderr is a terminal).
    pub progress: bool,
}

/// Response-time statistics of a set of pageviews.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RtSummary {
    pub count: usize,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p95_s: f64,
    pub gt3s_frac: f64,
    pub failed: usize,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl RtSummary {
    pub fn of(rts: &[f64], failed: usize) -> RtSummary {
        let mut v = rts.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        RtSummary {
            count: n,
            mean_s: if n == 0 { 0.0 } else { v.iter().sum::<f64>() / n as f64 },
            p50_s: percentile(&v, 50.0),
            p95_s: percentile(&v, 95.0),
            gt3s_frac: if n == 0 { 0.0 } else { v.iter().filter(|x| **x > 3.0).count() as f64 / n as f64 },
            failed,
        }
    }
}

/// A text histogram of response times with the mean and 95th percentile marked (004 Figures 10-16).
pub fn histogram(rts: &[f64], summary: &RtSummary) -> String {
    let mut out = String::new();
    if rts.is_empty() {
        return out;
    }
    let top = (summary.p95_s * 1.5).max(summary.mean_s * 2.0).max(1.0);
    let bins = 24usize;
    let width = top / bins as f64;
    let mut counts = vec![0usize; bins + 1];
    for &r in rts {
        let i = ((r / width) as usize).min(bins);
        counts[i] += 1;
    }
    let maxc = *counts.iter().max().unwrap_or(&1).max(&1);
    for (i, c) in counts.iter().enumerate() {
        let lo = i as f64 * width;
        let label = if i == bins { format!("   >= {lo:6.2} s") } else { format!("{lo:6.2}-{:6.2} s", lo + width) };
        let bar = "#".repeat((c * 40).div_ceil(maxc));
        let mut marks = String::new();
        let within = |x: f64| x >= lo && (i == bins || x < lo + width);
        if within(summary.mean_s) {
            marks.push_str(" <- mean");
        }
        if within(summary.p95_s) {
            marks.push_str(" <- p95");
        }
        let _ = writeln!(out, "  {label} |{bar:<40} {c}{marks}");
    }
    out
}

fn open_out(p: &Option<PathBuf>) -> Result<Option<BufWriter<File>>> {
    p.as_ref()
        .map(|p| File::create(p).map(BufWriter::new).with_context(|| format!("cannot write {}", p.display())))
        .transpose()
}

/// The summary text printed on stdout.
pub fn summary_text(capture: &Path, frames: u64, stats: &Stats, pvs: &[PageviewRecord]) -> String {
    let mut s = String::new();
    let malformed: u64 = stats.malformed.values().sum();
    let ignored: u64 = stats.ignored.values().sum();
    let _ = writeln!(s, "rlm analyze {}", capture.display());
    let _ = writeln!(s, "  frames {frames}: tcp {}, ignored {ignored}, malformed {malformed}", stats.tcp_segments);
    for (k, v) in stats.malformed.iter().filter(|(_, v)| **v > 0) {
        let _ = writeln!(s, "    malformed {k}: {v}");
    }
    let _ = writeln!(
        s,
        "  connections {} (failed {}, joined midstream {}, not HTTP {}, evicted {}); SYN retransmissions {}, SYN/ACK retransmissions {}",
        stats.connections,
        stats.connections_failed,
        stats.connections_midstream,
        stats.connections_not_http,
        stats.connections_evicted,
        stats.syn_retransmissions,
        stats.synack_retransmissions
    );
    let _ = writeln!(s, "  transactions {} ({} with anomalies)", stats.transactions, stats.transactions_with_anomalies);
    let rts: Vec<f64> = pvs.iter().map(|p| p.rt_s).collect();
    let failed = pvs.iter().filter(|p| p.failed_connections > 0).count();
    let sum = RtSummary::of(&rts, failed);
    let _ = writeln!(
        s,
        "  pageviews {}: mean {:.3} s, p50 {:.3} s, p95 {:.3} s, over 3 s {:.1}%, with failed connections {}",
        sum.count,
        sum.mean_s,
        sum.p50_s,
        sum.p95_s,
        sum.gt3s_frac * 100.0,
        sum.failed
    );
    if !rts.is_empty() {
        let _ = writeln!(s, "  pageview response time distribution:");
        s.push_str(&histogram(&rts, &sum));
    }
    s
}

/// Run the analysis; print the summary; return it.
pub fn run(opts: AnalyzeOptions) -> Result<String> {
    let mut tx_out = open_out(&opts.transactions)?;
    let mut pv_out = open_out(&opts.pageviews)?;
    let mut engine = Engine::new(opts.config);
    let mut pvs: Vec<PageviewRecord> = Vec::new();
    let size = std::fs::metadata(&opts.capture).map(|m| m.len()).unwrap_or(0);
    let bar = (opts.progress && std::io::stderr().is_terminal() && size > 4 << 20).then(|| {
        let b = indicatif::ProgressBar::new(size);
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {bytes}/{total_bytes} [{bar:40}] {eta} left").expect("template").progress_chars("=> "),
        );
        b
    });
    let mut on_event = |ev: Event| -> Result<()> {
        match ev {
            Event::Transaction(t) => {
                if let Some(w) = tx_out.as_mut() {
                    serde_json::to_writer(&mut *w, &t)?;
                    w.write_all(b"\n")?;
                }
            }
            Event::Decision(_) => {}
            Event::Pageview(p) => {
                if let Some(w) = pv_out.as_mut() {
                    serde_json::to_writer(&mut *w, &p)?;
                    w.write_all(b"\n")?;
                }
                pvs.push(p);
            }
        }
        Ok(())
    };
    let mut tick = |done: u64, _total: u64| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    };
    let result = crate::capture::replay(&opts.capture, &mut engine, &mut on_event, Some(&mut tick));
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(w) = tx_out.as_mut() {
        w.flush()?;
    }
    if let Some(w) = pv_out.as_mut() {
        w.flush()?;
    }
    let frames = result?;
    Ok(summary_text(&opts.capture, frames, engine.stats(), &pvs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_summary() {
        let v: Vec<f64> = (1..=100).map(|i| i as f64 / 10.0).collect();
        let s = RtSummary::of(&v, 3);
        assert_eq!(s.count, 100);
        assert!((s.mean_s - 5.05).abs() < 1e-9);
        assert_eq!(s.p50_s, 5.0);
        assert_eq!(s.p95_s, 9.5);
        assert!((s.gt3s_frac - 0.70).abs() < 1e-9);
        let h = histogram(&v, &s);
        assert!(h.contains("<- mean") && h.contains("<- p95"));
        assert_eq!(RtSummary::of(&[], 0).count, 0);
    }
}
