//! `rlm analyze`: run the engine over a capture; write transactions and pageviews as JSON lines,
//! a human summary and, on request, the summary as JSON.
//!
//! Memory depends on what is open at once (connections, pageviews), not on the capture's length:
//! records are written as they come and the summary's response-time statistics are streamed into
//! an HDR histogram (3 significant digits) with a running sum.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::capture::{self, Source};
use crate::records::{check_outputs, Dest, Protected, RecordOut};
use rlm_core::engine::{Config, Engine, Event, Sharding, Stats};

pub use crate::records::UsageError;

/// Options of one analysis.
pub struct AnalyzeOptions {
    /// The capture; `-` is standard input.
    pub capture: PathBuf,
    /// Where transactions go as JSON lines; `-` is standard output.
    pub transactions: Option<PathBuf>,
    /// Where pageviews go as JSON lines; `-` is standard output.
    pub pageviews: Option<PathBuf>,
    /// Where the summary goes as JSON; `-` is standard output.
    pub summary_json: Option<PathBuf>,
    pub config: Config,
    /// Show a progress bar (when stderr is a terminal).
    pub progress: bool,
    /// A rule file to replay over the capture (what-if): what each rule would have done.
    pub rules: Option<rules::RuleSet>,
    /// Where the rules' decisions go as JSON lines; `-` is standard output.
    pub decisions: Option<PathBuf>,
    /// Where TLS connections go as JSON lines (Zeek's ssl.log fields); `-` is standard output.
    pub tls: Option<PathBuf>,
    /// Engines side by side, each given every frame of its clients ([`Sharding`]); `None`: one
    /// per core. A what-if (`rules`) runs one engine whatever this says, and a usage error
    /// names more than one asked for with it.
    pub engines: Option<usize>,
}

/// Class response times are reported over time in buckets of this many seconds.
pub const WHAT_IF_BUCKET_S: u64 = 10;

/// What a rule would have done over the capture.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RuleReport {
    /// `FILE:LINE:COL`.
    pub rule: String,
    pub text: String,
    /// SYNs it would have dropped (DROP SYN) and refused for want of tokens (LIMIT SYN).
    pub syns_dropped: u64,
    pub syns_limited: u64,
    /// Distinct clients and connections it would have acted on.
    pub clients: u64,
    pub connections: u64,
    pub first_ts: Option<f64>,
    pub last_ts: Option<f64>,
    /// The first few connections it would have acted on (`client -> server`).
    pub examples: Vec<String>,
    /// Times its condition held at a node where it has an action, and of those the actions
    /// `rlm analyze` does not carry out (fast retransmission, content edits, REJECT): decided,
    /// counted, not done (the engine's rule counters).
    pub fired: u64,
    pub deferred: u64,
    #[serde(skip)]
    seen_clients: std::collections::HashSet<String>,
    #[serde(skip)]
    seen_conns: std::collections::HashSet<String>,
}

/// One bucket of class response times.
#[derive(Clone, Debug, Serialize)]
pub struct ClassRtPoint {
    /// Start of the bucket, Unix seconds.
    pub ts: u64,
    pub class: String,
    pub pageviews: u64,
    pub mean_s: f64,
}

/// What the SLA controller would have done over the capture (its SYN drops are its entry's in
/// `rules`, labelled `FILE:SLA`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ControllerWhatIf {
    pub decreases: u64,
    pub increases: u64,
    /// Requests of shed classes' pages it would have answered in the server's stead.
    pub requests_shed: u64,
    /// Requests of URL groups over their admitted rate it would have answered.
    pub requests_limited: u64,
    /// Where it ended: each shed class's and group's admitted rate (`None`: not limited).
    pub final_rates: Vec<(String, Option<f64>)>,
}

/// The what-if part of the summary (`--rules`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct WhatIf {
    pub rules_file: String,
    /// The file's rules, then the SLA controller's entry when it has one.
    pub rules: Vec<RuleReport>,
    pub controller: Option<ControllerWhatIf>,
    /// Pageviews of each class per bucket of `WHAT_IF_BUCKET_S` seconds.
    pub class_rt: Vec<ClassRtPoint>,
}

/// Bounded memory: clients and connections are counted exactly up to this many per rule.
const MAX_DISTINCT: usize = 100_000;

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

/// Bins of the text histogram: 24 of equal width from 0, then everything above.
const BINS: usize = 24;

/// The width of one bin for the given mean and 95th percentile.
fn bin_width(mean_s: f64, p95_s: f64) -> f64 {
    (p95_s * 1.5).max(mean_s * 2.0).max(1.0) / BINS as f64
}

fn bin_of(rt_s: f64, width: f64) -> usize {
    ((rt_s / width) as usize).min(BINS)
}

/// The text histogram of `counts` (BINS + 1 bins of `width`), mean and p95 marked.
fn render_bins(counts: &[u64], width: f64, mean_s: f64, p95_s: f64) -> String {
    let mut out = String::new();
    let maxc = counts.iter().copied().max().unwrap_or(1).max(1);
    for (i, &c) in counts.iter().enumerate() {
        let lo = i as f64 * width;
        let label = if i == BINS { format!("   >= {lo:6.2} s") } else { format!("{lo:6.2}-{:6.2} s", lo + width) };
        let bar = "#".repeat(((c * 40).div_ceil(maxc)) as usize);
        let mut marks = String::new();
        let within = |x: f64| x >= lo && (i == BINS || x < lo + width);
        if within(mean_s) {
            marks.push_str(" <- mean");
        }
        if within(p95_s) {
            marks.push_str(" <- p95");
        }
        let _ = writeln!(out, "  {label} |{bar:<40} {c}{marks}");
    }
    out
}

/// A text histogram of response times with the mean and 95th percentile marked (004 Figures 10-16).
pub fn histogram(rts: &[f64], summary: &RtSummary) -> String {
    if rts.is_empty() {
        return String::new();
    }
    let width = bin_width(summary.mean_s, summary.p95_s);
    let mut counts = vec![0u64; BINS + 1];
    for &r in rts {
        counts[bin_of(r, width)] += 1;
    }
    render_bins(&counts, width, summary.mean_s, summary.p95_s)
}

/// One bin of the response-time histogram in the JSON summary.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Bucket {
    pub lo_s: f64,
    /// None for the last, open-ended bin.
    pub hi_s: Option<f64>,
    pub count: u64,
}

/// Response-time statistics of the complete pageviews.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RtStats {
    pub count: u64,
    pub mean_s: f64,
    /// Percentiles are nearest-rank, within 0.1% (3 significant digits).
    pub p50_s: f64,
    pub p95_s: f64,
    pub p99_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    /// Share of pageviews over 3 s (exact).
    pub over_3s_frac: f64,
    pub histogram: Vec<Bucket>,
}

/// Response times above this (a day, in µs) are counted at it in the histogram (230 KB of counts).
const RT_MAX_US: u64 = 86_400 * 1_000_000;

/// Streaming response-time statistics: constant memory whatever the number of pageviews.
pub struct RtStream {
    /// Microseconds, 3 significant digits.
    hist: Histogram<u64>,
    sum_s: f64,
    count: u64,
    over_3s: u64,
    min_s: f64,
    max_s: f64,
}

impl Default for RtStream {
    fn default() -> Self {
        RtStream {
            hist: Histogram::new_with_bounds(1, RT_MAX_US, 3).expect("valid bounds"),
            sum_s: 0.0,
            count: 0,
            over_3s: 0,
            min_s: f64::INFINITY,
            max_s: 0.0,
        }
    }
}

impl RtStream {
    pub fn record(&mut self, rt_s: f64) {
        let rt_s = if rt_s.is_finite() { rt_s.max(0.0) } else { 0.0 };
        self.hist.saturating_record((rt_s * 1e6).round() as u64);
        self.sum_s += rt_s;
        self.count += 1;
        if rt_s > 3.0 {
            self.over_3s += 1;
        }
        self.min_s = self.min_s.min(rt_s);
        self.max_s = self.max_s.max(rt_s);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Nearest-rank percentile, within the histogram's precision and clamped to what was seen.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = (((p / 100.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for v in self.hist.iter_recorded() {
            seen += v.count_since_last_iteration();
            if seen >= rank {
                let us = self.hist.median_equivalent(v.value_iterated_to());
                return (us as f64 / 1e6).clamp(self.min_s, self.max_s);
            }
        }
        self.max_s
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_s / self.count as f64
        }
    }

    /// The histogram's bins (BINS + 1, see [`histogram`]).
    fn bins(&self, width: f64) -> Vec<u64> {
        let mut counts = vec![0u64; BINS + 1];
        for v in self.hist.iter_recorded() {
            let s = (self.hist.median_equivalent(v.value_iterated_to()) as f64 / 1e6).clamp(self.min_s, self.max_s);
            counts[bin_of(s, width)] += v.count_since_last_iteration();
        }
        counts
    }

    pub fn stats(&self) -> RtStats {
        if self.count == 0 {
            return RtStats::default();
        }
        let (mean_s, p95_s) = (self.mean(), self.percentile(95.0));
        let width = bin_width(mean_s, p95_s);
        let histogram = self
            .bins(width)
            .into_iter()
            .enumerate()
            .map(|(i, count)| Bucket { lo_s: i as f64 * width, hi_s: (i < BINS).then(|| (i + 1) as f64 * width), count })
            .collect();
        RtStats {
            count: self.count,
            mean_s,
            p50_s: self.percentile(50.0),
            p95_s,
            p99_s: self.percentile(99.0),
            min_s: self.min_s,
            max_s: self.max_s,
            over_3s_frac: self.over_3s as f64 / self.count as f64,
            histogram,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ConnectionCounts {
    pub total: u64,
    pub failed: u64,
    pub midstream: u64,
    pub not_http: u64,
    pub evicted: u64,
    pub syn_retransmissions: u64,
    pub synack_retransmissions: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TransactionCounts {
    pub total: u64,
    pub with_anomalies: u64,
    /// Cut off by the end of the capture (anomaly `incomplete`).
    pub incomplete: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PageviewCounts {
    pub total: u64,
    /// Cut off by the end of the capture: left out of the response-time statistics.
    pub incomplete: u64,
    pub with_failed_connections: u64,
}

/// What `rlm analyze` read and found; printed as text, written as JSON by `--summary-json`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub capture: String,
    /// Read to its end (false: cut short, see `cut`).
    pub complete: bool,
    /// Why the capture ended before its end.
    pub cut: Option<String>,
    pub frames: u64,
    pub bytes: u64,
    pub tcp_segments: u64,
    pub ignored: BTreeMap<&'static str, u64>,
    pub malformed_total: u64,
    pub malformed: BTreeMap<&'static str, u64>,
    pub connections: ConnectionCounts,
    pub transactions: TransactionCounts,
    pub pageviews: PageviewCounts,
    /// Of the complete pageviews only.
    pub response_time: RtStats,
    /// What the rules given with `--rules` would have done.
    pub what_if: Option<WhatIf>,
}

impl Summary {
    fn new(capture: &str, frames: u64, cut: Option<String>, stats: &Stats, tx: TransactionCounts, pv: PageviewCounts, rt: &RtStream) -> Summary {
        Summary {
            capture: capture.to_string(),
            complete: cut.is_none(),
            cut,
            frames,
            bytes: stats.bytes,
            tcp_segments: stats.tcp_segments,
            ignored: stats.ignored.clone(),
            malformed_total: stats.malformed.values().sum(),
            malformed: stats.malformed.clone(),
            connections: ConnectionCounts {
                total: stats.connections,
                failed: stats.connections_failed,
                midstream: stats.connections_midstream,
                not_http: stats.connections_not_http,
                evicted: stats.connections_evicted,
                syn_retransmissions: stats.syn_retransmissions,
                synack_retransmissions: stats.synack_retransmissions,
            },
            transactions: TransactionCounts { total: stats.transactions, ..tx },
            pageviews: pv,
            response_time: rt.stats(),
            what_if: None,
        }
    }

    /// The human summary.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "rlm analyze {}", self.capture);
        if let Some(cut) = &self.cut {
            let _ = writeln!(s, "  capture cut short after {} frames: {cut}", self.frames);
        }
        let ignored: u64 = self.ignored.values().sum();
        let _ = writeln!(s, "  frames {}: tcp {}, ignored {ignored}, malformed {}", self.frames, self.tcp_segments, self.malformed_total);
        for (k, v) in self.malformed.iter().filter(|(_, v)| **v > 0) {
            let _ = writeln!(s, "    malformed {k}: {v}");
        }
        let c = &self.connections;
        let _ = writeln!(
            s,
            "  connections {} (failed {}, joined midstream {}, not HTTP {}, evicted {}); SYN retransmissions {}, SYN/ACK retransmissions {}",
            c.total, c.failed, c.midstream, c.not_http, c.evicted, c.syn_retransmissions, c.synack_retransmissions
        );
        let t = &self.transactions;
        let _ = writeln!(s, "  transactions {} ({} with anomalies, {} incomplete)", t.total, t.with_anomalies, t.incomplete);
        let p = &self.pageviews;
        let _ = writeln!(s, "  pageviews {} ({} incomplete, {} with failed connections)", p.total, p.incomplete, p.with_failed_connections);
        let r = &self.response_time;
        let _ = writeln!(
            s,
            "  response time of {} complete pageviews: mean {:.3} s, p50 {:.3} s, p95 {:.3} s, p99 {:.3} s, over 3 s {:.1}%",
            r.count,
            r.mean_s,
            r.p50_s,
            r.p95_s,
            r.p99_s,
            r.over_3s_frac * 100.0
        );
        if r.count > 0 {
            let _ = writeln!(s, "  pageview response time distribution:");
            let counts: Vec<u64> = r.histogram.iter().map(|b| b.count).collect();
            let width = r.histogram.first().and_then(|b| b.hi_s).unwrap_or(1.0);
            s.push_str(&render_bins(&counts, width, r.mean_s, r.p95_s));
        }
        if let Some(w) = &self.what_if {
            let _ = writeln!(s, "  what-if with {} (the capture is as it happened; this is what the rules would have done):", w.rules_file);
            for r in &w.rules {
                let _ = writeln!(s, "    {} {}", r.rule, r.text);
                if r.deferred > 0 {
                    let _ = writeln!(
                        s,
                        "      fired {} times; {} of its actions decided but not carried out by a replay (deferred)",
                        r.fired, r.deferred
                    );
                }
                if r.syns_dropped + r.syns_limited == 0 {
                    if r.deferred == 0 {
                        let _ = writeln!(s, "      never acted");
                    }
                    continue;
                }
                let _ = writeln!(
                    s,
                    "      {} SYNs dropped, {} refused by the token bucket, {} connections of {} clients, from {:.3} to {:.3}",
                    r.syns_dropped,
                    r.syns_limited,
                    r.connections,
                    r.clients,
                    r.first_ts.unwrap_or(0.0),
                    r.last_ts.unwrap_or(0.0)
                );
                for e in &r.examples {
                    let _ = writeln!(s, "      e.g. {e}");
                }
            }
            if let Some(c) = &w.controller {
                let rates: Vec<String> =
                    c.final_rates.iter().map(|(n, r)| format!("{n} {}", r.map_or("not limited".to_string(), |r| format!("{r:.2}/s")))).collect();
                let _ = writeln!(
                    s,
                    "    the SLA controller: {} decreases, {} increases; {} requests of shed classes and {} of groups over their rate it would have answered (503); at the end: {}",
                    c.decreases,
                    c.increases,
                    c.requests_shed,
                    c.requests_limited,
                    rates.join(", ")
                );
            }
            if !w.class_rt.is_empty() {
                let _ = writeln!(s, "    class response times per {WHAT_IF_BUCKET_S} s (pageviews, mean):");
                let mut by_ts: BTreeMap<u64, Vec<&ClassRtPoint>> = BTreeMap::new();
                for p in &w.class_rt {
                    by_ts.entry(p.ts).or_default().push(p);
                }
                let step = by_ts.len().div_ceil(30).max(1);
                for (ts, points) in by_ts.iter().step_by(step) {
                    let cells: Vec<String> = points.iter().map(|p| format!("{} {} {:.2} s", p.class, p.pageviews, p.mean_s)).collect();
                    let _ = writeln!(s, "      {ts}: {}", cells.join(", "));
                }
                if step > 1 {
                    let _ = writeln!(s, "      (every {step}th bucket shown; --summary-json has them all)");
                }
            }
        }
        s
    }
}

/// What an analysis produced.
pub struct Report {
    pub summary: Summary,
    /// Some output is standard output: the human summary goes to standard error.
    pub summary_to_stderr: bool,
}

/// Run the analysis. A capture cut short still gives a report (with `summary.cut`); errors are
/// a [`UsageError`] (refused before anything was opened) or a failure to read or write.
pub fn run(opts: AnalyzeOptions) -> Result<Report> {
    if let (Some(_), Some(n @ 2..)) = (&opts.rules, opts.engines) {
        return Err(UsageError(format!(
            "--engines {n} with --rules: a what-if replays the rules over one engine (they read statistics over all clients)"
        ))
        .into());
    }
    let source = Source::from_arg(&opts.capture);
    let capture_input = match &source {
        Source::File(p) => Protected::file("the input capture", p),
        Source::Stdin => Protected::stdin("the input capture"),
    };
    let dests = check_outputs(
        &[capture_input],
        &[
            ("--transactions", &opts.transactions),
            ("--pageviews", &opts.pageviews),
            ("--summary-json", &opts.summary_json),
            ("--decisions", &opts.decisions),
            ("--tls", &opts.tls),
        ],
    )?;
    let summary_to_stderr = dests.iter().flatten().any(|d| *d == Dest::Stdout);
    // The capture is opened (and recognised) before any output is created.
    let mut reader = capture::open(&source)?;
    let mut tx_out = dests[0].as_ref().map(RecordOut::create).transpose()?;
    let mut pv_out = dests[1].as_ref().map(RecordOut::create).transpose()?;
    if let Some(Dest::File(p)) = &dests[2] {
        // Created now, so an unwritable path fails before the work, not after.
        File::create(p).with_context(|| format!("cannot write {}", p.display()))?;
    }
    let mut dec_out = dests[3].as_ref().map(RecordOut::create).transpose()?;
    let mut tls_out = dests[4].as_ref().map(RecordOut::create).transpose()?;
    let config = Config { tls_records: tls_out.is_some() || opts.config.tls_records, ..opts.config };
    let shards =
        if opts.rules.is_some() { 1 } else { opts.engines.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1) };
    // The first engine is the what-if's (which has only one).
    let mut engines: Vec<Engine> = (0..shards).map(|i| Engine::new(config.for_shard(i, shards))).collect();
    let engine = &mut engines[0];
    let mut what_if = opts.rules.as_ref().map(|r| WhatIf {
        rules_file: r.file_name().to_string(),
        rules: (0..r.rule_count())
            .map(|i| {
                let id = rules::RuleId(i as u32);
                RuleReport { rule: rlm_core::policy::rule_label(r, id), text: rlm_core::policy::rule_text(r, id), ..RuleReport::default() }
            })
            .collect(),
        class_rt: Vec::new(),
        controller: None,
    });
    let mut class_buckets: BTreeMap<(u64, String), (u64, f64)> = BTreeMap::new();
    engine.set_rules(opts.rules);
    // The SLA controller acts as a rule of its own (its drops carry `FILE:SLA`).
    if let (Some(w), Some(p)) = (what_if.as_mut(), engine.policy().filter(|p| p.controller().is_some())) {
        // Its SLA and SHED statements, as the file's printed back.
        let parts: Vec<String> = p
            .rules()
            .ast()
            .items
            .iter()
            .filter_map(|item| match item {
                rules::ast::Item::Sla(s) => Some(s.to_string()),
                rules::ast::Item::Shed(s) => Some(s.to_string()),
                _ => None,
            })
            .collect();
        w.rules.push(RuleReport {
            rule: p.rule_label(p.controller_rule()).to_string(),
            text: format!("the SLA controller ({})", parts.join("; ")),
            ..RuleReport::default()
        });
    }
    let mut rt = RtStream::default();
    let mut tx = TransactionCounts::default();
    let mut pv = PageviewCounts::default();
    let size = reader.size().unwrap_or(0);
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
                if t.anomalies.contains(&"incomplete") {
                    tx.incomplete += 1;
                }
                if !t.anomalies.is_empty() {
                    tx.with_anomalies += 1;
                }
                if let Some(w) = tx_out.as_mut() {
                    w.write(&t)?;
                }
            }
            Event::Decision(d) => {
                // The what-if counts the SYNs its rules drop (the actions that send or rewrite
                // frames are not carried out over a capture).
                if let Some(r) = what_if.as_mut().filter(|_| d.drops_syn()).and_then(|w| w.rules.iter_mut().find(|r| r.rule == d.rule)) {
                    if d.action == "LIMIT SYN" {
                        r.syns_limited += 1;
                    } else {
                        r.syns_dropped += 1;
                    }
                    r.first_ts.get_or_insert(d.ts.secs());
                    r.last_ts = Some(d.ts.secs());
                    let conn = format!("{} -> {}", d.client, d.server);
                    if r.seen_conns.len() < MAX_DISTINCT && r.seen_conns.insert(conn.clone()) {
                        r.connections += 1;
                        if r.examples.len() < 5 {
                            r.examples.push(format!("{conn} ({}, class {})", d.action, d.class));
                        }
                    }
                    let client = d.client.rsplit_once(':').map_or(d.client.clone(), |(h, _)| h.to_string());
                    if r.seen_clients.len() < MAX_DISTINCT && r.seen_clients.insert(client) {
                        r.clients += 1;
                    }
                }
                if let Some(w) = dec_out.as_mut() {
                    w.write(&d)?;
                }
            }
            Event::Pageview(p) => {
                if let (Some(class), false) = (&p.class, p.incomplete) {
                    let b = (p.end_ts.max(0.0) as u64) / WHAT_IF_BUCKET_S * WHAT_IF_BUCKET_S;
                    let e = class_buckets.entry((b, class.clone())).or_insert((0, 0.0));
                    e.0 += 1;
                    e.1 += p.rt_s;
                }
                pv.total += 1;
                if p.failed_connections > 0 {
                    pv.with_failed_connections += 1;
                }
                if p.incomplete {
                    pv.incomplete += 1;
                } else {
                    rt.record(p.rt_s);
                }
                if let Some(w) = pv_out.as_mut() {
                    w.write(&p)?;
                }
            }
            Event::Tls(t) => {
                if let Some(w) = tls_out.as_mut() {
                    w.write(&t)?;
                }
            }
        }
        Ok(())
    };
    let mut tick = |done: u64, _total: u64| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    };
    let replayed = if shards == 1 {
        capture::replay_reader(&mut reader, &mut engines[0], &mut on_event, Some(&mut tick))
    } else {
        let sharded =
            capture::replay_sharded(&mut reader, std::mem::take(&mut engines), &Sharding::new(&config, shards), &mut on_event, Some(&mut tick));
        sharded.map(|(r, shut_down)| {
            engines = shut_down;
            r
        })
    };
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    // What was written is flushed whatever happened.
    let flushed = [
        tx_out.as_mut().map(RecordOut::flush),
        pv_out.as_mut().map(RecordOut::flush),
        dec_out.as_mut().map(RecordOut::flush),
        tls_out.as_mut().map(RecordOut::flush),
    ];
    let replayed = replayed?;
    for f in flushed.into_iter().flatten() {
        f?;
    }
    let mut stats = Stats::default();
    engines.iter().for_each(|e| stats.add(e.stats()));
    let mut summary = Summary::new(reader.name(), replayed.frames, replayed.cut.map(|c| c.0), &stats, tx, pv, &rt);
    if let Some(mut w) = what_if {
        if let Some(p) = engines[0].policy() {
            for (r, c) in w.rules.iter_mut().zip(&p.rule_counters) {
                (r.fired, r.deferred) = (c.fired, c.deferred);
            }
            if let Some(ctl) = p.controller() {
                let st = ctl.state();
                let shed = st.requests_shed + st.requests_limited;
                if let Some(r) = w.rules.last_mut() {
                    (r.fired, r.deferred) = (shed, shed);
                }
                let rs = p.rules();
                let final_rates = st
                    .stages
                    .iter()
                    .map(|&(c, rate, _)| (rs.class_name(c).to_string(), rate))
                    .chain(st.groups.iter().map(|g| (format!("GROUP {}", rs.group_name(g.group)), g.admitted_per_s)))
                    .collect();
                w.controller = Some(ControllerWhatIf {
                    decreases: st.decreases,
                    increases: st.increases,
                    requests_shed: st.requests_shed,
                    requests_limited: st.requests_limited,
                    final_rates,
                });
            }
        }
        w.class_rt = class_buckets
            .into_iter()
            .map(|((ts, class), (n, sum))| ClassRtPoint { ts, class, pageviews: n, mean_s: sum / n.max(1) as f64 })
            .collect();
        summary.what_if = Some(w);
    }
    if let Some(dest) = &dests[2] {
        let mut out = RecordOut::create(dest)?;
        out.write_pretty(&summary)?;
        out.flush()?;
    }
    Ok(Report { summary, summary_to_stderr })
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

    #[test]
    fn streaming_statistics_agree_with_the_exact_ones() {
        let mut rng = rlm_core::testkit::Rng::new(7);
        for n in [1usize, 2, 3, 10, 99, 1000, 20_000] {
            // Log-normal-ish response times from 1 ms to minutes.
            let v: Vec<f64> = (0..n).map(|_| (rng.next_f64() * 12.0 - 7.0).exp()).collect();
            let mut st = RtStream::default();
            v.iter().for_each(|&x| st.record(x));
            let exact = RtSummary::of(&v, 0);
            let got = st.stats();
            assert_eq!(got.count as usize, n);
            assert!((got.mean_s - exact.mean_s).abs() <= 1e-9 * exact.mean_s.max(1.0));
            assert!((got.over_3s_frac - exact.gt3s_frac).abs() < 1e-12);
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            for (p, g) in [(50.0, got.p50_s), (95.0, got.p95_s), (99.0, got.p99_s)] {
                let e = percentile(&sorted, p);
                // 3 significant digits, plus 1 µs of rounding.
                assert!((g - e).abs() <= e * 1e-3 + 1e-6, "n {n} p{p}: {g} vs {e}");
            }
            assert_eq!(got.histogram.len(), BINS + 1);
            assert_eq!(got.histogram.iter().map(|b| b.count).sum::<u64>(), n as u64);
            // Bins agree with exact binning except for values within 0.1% of a boundary.
            let width = got.histogram[0].hi_s.unwrap();
            let mut exact_bins = [0u64; BINS + 1];
            v.iter().for_each(|&x| exact_bins[bin_of(x, width)] += 1);
            let moved: u64 = exact_bins.iter().zip(&got.histogram).map(|(a, b)| a.abs_diff(b.count)).sum();
            let near = v.iter().filter(|&&x| ((x / width).round() - x / width).abs() * width <= x * 1e-3 + 1e-6).count() as u64;
            assert!(moved <= 2 * near, "n {n}: {moved} moved, {near} near a boundary");
        }
        assert_eq!(RtStream::default().stats(), RtStats::default());
    }
}
