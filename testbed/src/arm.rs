//! An arm of an experiment: what it is ([`ArmSpec`]) and what it measured ([`ArmResult`]), and
//! the summaries of its ground truth. The experiments build arms, the runner and the throughput
//! experiment measure them, the report writes them out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use sim_clients::browser::{GeneratorStats, GroundTruth};
use sim_clients::openloop::Schedule;
use sim_clients::tcp_profile::TcpProfile;

use crate::attack::{Attack, AttackOutcome};
use crate::farm::sampler::ServerView;
use crate::farm::{FarmConfig, FarmUsage};
pub use crate::inline::RlmArm;
use crate::inline::RlmOutcome;
pub use crate::stats::PvStats;
use crate::stats::Summary;
use crate::topology::Offloads;

/// One arm of an experiment.
#[derive(Clone, Debug, Serialize)]
pub struct ArmSpec {
    pub name: String,
    pub high_clients: u32,
    pub low_clients: u32,
    /// Browsers of further groups (10.6/16, 10.7/16, ...).
    pub more_clients: Vec<u32>,
    /// The class of each group in subnet order (10.4/16 first); empty: HIGH and LOW.
    pub classes: Vec<String>,
    pub think_mean_s: f64,
    pub duration_s: f64,
    /// WAN paths per client group; empty: no WAN hop (a LAN).
    pub wan: Vec<String>,
    pub profile: TcpProfile,
    pub farm: FarmConfig,
    /// Capture the appliance's server-side port for the passive measurement.
    pub capture: bool,
    pub seed: u64,
    /// An open-loop arm (the SRPT experiments) instead of browsers.
    pub openloop: Option<OpenLoopArm>,
    /// Run the appliance inline (`rlm run` on the appliance's bridge) with these rules.
    pub rlm: Option<RlmArm>,
    /// Capture SYNs and SYN/ACKs on the farm's own interface (what the appliance let through),
    /// counted per class into `server_syns`.
    pub syn_capture: bool,
    /// Which of the lab's ports keep their offloads: none, but in an arm that measures with them
    /// on (fidelity's live-offloads).
    pub offloads: Offloads,
    /// An attack sent while the browsers run (the `attacks` experiment), from the end of their
    /// ramp to the end of the run.
    pub attack: Option<Attack>,
    /// HTTPS: the browsers speak TLS to the farm (which terminates it: `farm.tls_sites`).
    pub https: Option<Https>,
    /// Open-loop pageview arrivals instead of thinking browsers (sla-step): the browsers are a
    /// pool of visitors, each arrival taken by an idle one of a class drawn by the pool's shares.
    pub arrivals: Option<sim_clients::browser::Arrivals>,
    /// The pages the browsers ask for, with weights (url-admission's DB-heavy mix); None:
    /// TPC-W's browsing mix ([`crate::runner::tpcw_pages`]).
    pub pages: Option<Vec<(String, f64)>>,
    /// (class, `Cookie` header) for the browsers of a class that send one (cookie-abort's carts).
    pub cookies: Vec<(String, String)>,
}

/// How an arm's browsers speak HTTPS.
#[derive(Clone, Debug, Serialize)]
pub struct Https {
    /// The site they ask for (SNI and Host).
    pub site: String,
    /// Each client group's site instead, by group (10.4/16 first): two sites behind one
    /// address (the `sites` experiment); empty: `site` for all.
    pub group_sites: Vec<String>,
    /// HTTP/2 (one connection, a page's images at once), else HTTP/1.1.
    pub h2: bool,
    /// Their shortest think time (the rest negative-exponential, the mean unchanged): rlm tells
    /// pageviews of encrypted traffic apart by the client's quiet (`encrypted_gap`, 1 s), so a
    /// click sooner than that after a page is one pageview with it (docs/architecture.md).
    pub think_min_s: f64,
}

/// The open-loop load of an arm: Poisson arrivals at a load of a shaped uplink.
#[derive(Clone, Debug, Serialize)]
pub struct OpenLoopArm {
    pub schedule: Schedule,
    /// The farm's uplink toward the clients: without rlm, the appliance's client-side port is
    /// shaped to this rate; with rlm (`--srpt`), the WAN's client-side port is (the real link,
    /// downstream) and rlm shapes its own port a little under it.
    pub link_bps: u64,
    /// The bottleneck's rate, against which the load ρ and the slowdowns are counted: link_bps
    /// without rlm, rlm's shaped rate with it.
    pub rho_bps: u64,
    /// Packets the uplink's FIFO holds.
    pub queue_packets: u32,
    /// Distinct files, sized at the quantiles of 001 Table 1 bounded at `max_file` bytes.
    pub files: usize,
    pub max_file: f64,
    pub timeout_s: f64,
    /// Requests go to the front server (Apache's MaxClients and listen backlog: the server
    /// drops SYNs when they fill, 000 section 3) instead of straight to nginx.
    pub via_front: bool,
}

/// Statistics of ground-truth pageviews; a pageview counts as failed if its container or any
/// of its connections failed.
pub fn pv_stats<'a>(pvs: impl Iterator<Item = &'a GroundTruth>) -> PvStats {
    let pvs: Vec<&GroundTruth> = pvs.collect();
    let rts: Vec<f64> = pvs.iter().map(|p| p.rt_s).collect();
    PvStats::of(&rts, pvs.iter().filter(|p| p.failed || p.failed_connections > 0).count())
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PageviewSummary {
    #[serde(flatten)]
    pub all: PvStats,
    pub by_class: BTreeMap<String, PvStats>,
}

/// What one arm measured.
#[derive(Clone, Debug, Serialize)]
pub struct ArmResult {
    pub name: String,
    pub config: ArmSpec,
    pub clients: u32,
    pub duration_s: f64,
    pub pageviews: PageviewSummary,
    /// Open-loop request statistics (the SRPT experiments); null for browser arms.
    pub requests: Option<serde_json::Value>,
    pub generator: GeneratorStats,
    /// The load generator, not the farm or the link, limited the run.
    pub generator_bottleneck: bool,
    pub farm_usage: FarmUsage,
    pub ground_truth: PathBuf,
    pub capture: Option<PathBuf>,
    /// The appliance inline: how it ran and stopped, and what it reported.
    pub rlm: Option<RlmOutcome>,
    /// The farm front's own figures: its time per request, connections by client subnet.
    pub farm_front: Option<FrontSummary>,
    /// SYNs that reached the farm, per class, from a capture on its interface.
    pub server_syns: Option<ServerSyns>,
    /// The throughput experiment's samples and medians.
    pub throughput: Option<ThroughputArm>,
    /// The farm's kernel each second (browser arms): connections on the front's port and the
    /// connection attempts the namespace's listen queues dropped (the front's and nginx's).
    /// Open-loop arms carry it in `requests.server`.
    pub farm_tcp: Option<ServerView>,
    /// Pageviews by the time they started (buckets of a sixth of the run, at least 10 s), per
    /// class: how a rule's effect builds up and holds.
    pub timeline: Vec<TimeBucket>,
    /// The arm's capture of the server-side port replayed through the engine, against the
    /// ground truth; null without a capture.
    pub capture_fidelity: Option<Fidelity>,
    /// rlm's live pageview records against the ground truth; null without rlm's records.
    pub live_fidelity: Option<LiveFidelity>,
    /// The same, each class's pageviews of the ground truth apart; empty without rlm's records.
    pub live_fidelity_by_class: BTreeMap<String, LiveFidelity>,
    /// What the attacker sent (the arm's `attack`); null without one.
    pub attack: Option<AttackOutcome>,
    /// An experiment's own figures of the arm, from its files (sla-step's per-second windows);
    /// null for the others.
    pub windows: Option<serde_json::Value>,
    /// The machine's speed while the clients ran ([`crate::speed`]): a fixed piece of work timed
    /// every few seconds; null where no probe ran.
    pub machine_speed: Option<crate::speed::MachineSpeed>,
    /// The WAN emulator's counters (packets each way, those its loss model dropped, its
    /// lateness); null for an arm without WAN paths.
    pub wan: Option<sim_clients::wan::WanStats>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TimeBucket {
    /// Start of the bucket, seconds after the first pageview started.
    pub t_s: f64,
    pub span_s: f64,
    pub by_class: BTreeMap<String, PvStats>,
}

/// The classes of some pageviews, in order.
pub(crate) fn classes_of(pvs: &[GroundTruth]) -> std::collections::BTreeSet<String> {
    pvs.iter().map(|p| p.class.clone()).collect()
}

impl ArmSpec {
    /// The browsers' ramp (s): they start spread over it, a mean think time at most a quarter
    /// of the run.
    pub fn ramp_s(&self) -> f64 {
        ramp_s(self.think_mean_s, self.duration_s)
    }

    /// Browsers in all.
    pub fn clients(&self) -> u32 {
        self.high_clients + self.low_clients + self.more_clients.iter().sum::<u32>()
    }

    /// The class of each group, in subnet order (10.4/16 first).
    pub fn class_names(&self) -> Vec<String> {
        if self.classes.is_empty() {
            let more = (0..self.more_clients.len()).map(|k| format!("G{}", k + 3));
            ["HIGH".to_string(), "LOW".to_string()].into_iter().chain(more).collect()
        } else {
            self.classes.clone()
        }
    }
}

/// The browsers' ramp (s) for a mean think time and a run's length.
pub fn ramp_s(think_mean_s: f64, duration_s: f64) -> f64 {
    think_mean_s.min(duration_s / 4.0)
}

/// The timeline of an arm's pageviews (by start time, per class).
pub fn timeline(pvs: &[GroundTruth], duration_s: f64) -> Vec<TimeBucket> {
    let Some(t0) = pvs.iter().map(|p| p.start_ts).min_by(f64::total_cmp) else { return Vec::new() };
    let span = ((duration_s / 6.0 / 5.0).round() * 5.0).max(10.0);
    let last = pvs.iter().map(|p| ((p.start_ts - t0) / span) as usize).max().unwrap_or(0);
    (0..=last)
        .map(|k| {
            let inb = |p: &&GroundTruth| ((p.start_ts - t0) / span) as usize == k;
            let mut by_class = BTreeMap::new();
            for class in classes_of(pvs) {
                let v: Vec<&GroundTruth> = pvs.iter().filter(inb).filter(|p| p.class == class).collect();
                if !v.is_empty() {
                    by_class.insert(class, pv_stats(v.into_iter()));
                }
            }
            TimeBucket { t_s: k as f64 * span, span_s: span, by_class }
        })
        .collect()
}

/// The front server's report, summarised with the lab's arithmetic.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FrontSummary {
    pub connections: u64,
    pub pages: u64,
    pub images: u64,
    pub errors: u64,
    /// The server's own time per request (container pages and images together), as Apache's
    /// %D: from the request's head read to the last response byte handed to the kernel.
    pub server_time_s: Summary,
    pub page_time_s: Summary,
    pub image_time_s: Summary,
    pub accepted_by_subnet: BTreeMap<String, u64>,
    /// Connections that ended reset under the server, by the client's /16.
    pub reset_by_subnet: BTreeMap<String, u64>,
}

impl FrontSummary {
    pub fn of(r: &crate::farm::front::FrontReport) -> FrontSummary {
        let pages: Vec<f64> = r.page_times_s.iter().map(|&t| f64::from(t)).collect();
        let images: Vec<f64> = r.image_times_s.iter().map(|&t| f64::from(t)).collect();
        let all: Vec<f64> = pages.iter().chain(images.iter()).copied().collect();
        FrontSummary {
            connections: r.connections,
            pages: r.pages,
            images: r.images,
            errors: r.errors,
            server_time_s: Summary::of(&all),
            page_time_s: Summary::of(&pages),
            image_time_s: Summary::of(&images),
            accepted_by_subnet: r.accepted_by_subnet.clone(),
            reset_by_subnet: r.reset_by_subnet.clone(),
        }
    }
}

/// SYNs seen on the farm's interface in the steady part of an arm (after the browsers' ramp and
/// one connect timeout), per class.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerSyns {
    /// The window, in seconds after the browsers started.
    pub window_start_s: f64,
    pub window_s: f64,
    pub by_class: BTreeMap<String, ClassSyns>,
    pub capture: PathBuf,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ClassSyns {
    /// SYN packets that reached the farm (retransmissions included: a token bucket on SYNs
    /// counts packets).
    pub syns: u64,
    /// Distinct connections among them (client address and port).
    pub connections: u64,
    /// Distinct connections the farm answered with a SYN/ACK.
    pub answered: u64,
    pub syn_rate_per_s: f64,
    pub conn_rate_per_s: f64,
    pub answered_rate_per_s: f64,
    /// SYN packets per second of the window.
    pub per_second: Vec<u32>,
}

/// One sample of one arm.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub round: usize,
    /// The median of `bulk_runs_gbps`.
    pub bulk_gbps: f64,
    /// One-second iperf3 runs, one stream each: a stream's rate here depends on where its
    /// ends and their softirqs land on the two cores (steady within a run, up to 30% apart
    /// between runs), so a sample draws that several times rather than once.
    pub bulk_runs_gbps: Vec<f64>,
    /// iperf3's retransmissions during the bulk sample (all its runs).
    pub bulk_retransmits: u64,
    /// The median of `web_bulk_runs_gbps`.
    pub web_bulk_gbps: f64,
    /// One-second HTTP downloads from nginx on port 80, which rlm watches
    /// (`throughput::web_bulk`), one connection each.
    pub web_bulk_runs_gbps: Vec<f64>,
    /// The median of `conn_runs_per_s`.
    pub conn_per_s: f64,
    /// One-second wrk runs (as many as iperf3's): like one stream's bulk, wrk's rate here
    /// follows where wrk, nginx and their softirqs land on the two cores, so a sample draws it
    /// several times rather than once.
    pub conn_runs_per_s: Vec<f64>,
    /// wrk's requests in the sample, all its runs (each on a new connection).
    pub requests: u64,
    /// wrk's socket errors and non-2xx answers (should be 0).
    pub conn_errors: u64,
    pub connect_p50_us: f64,
    pub connect_p99_us: f64,
    pub connect_failures: usize,
    /// Connects each from an address not seen before (its client's first SYN, which the
    /// kernel has no verdict for: rlm decides it), timed by the lab.
    pub first_connect_p50_us: f64,
    pub first_connect_p99_us: f64,
    /// The `rlm` arm: how rlm ran and stopped in this sample.
    pub rlm: Option<RlmOutcome>,
    /// Lines of rlm's transaction records of this sample (records on), counted by the lab.
    pub transaction_lines: Option<u64>,
    /// The machine's speed probe during the sample ([`crate::speed`]): its median (ms). The
    /// arms alternate so that a drift weighs on each alike; this says whether there was one.
    pub machine_probe_ms: Option<f64>,
    /// The CPUs rlm's tasks (its threads and its guard) might run on, all of them together,
    /// read from the kernel after the sample's load.
    pub rlm_cpus: Option<Vec<usize>>,
    /// The same for the servers' tasks (nginx's, iperf3's).
    pub server_cpus: Option<Vec<usize>>,
    /// The CPUs of the lab thread that started the sample's load (wrk, iperf3's client, the
    /// connects' threads inherit them), read after it.
    pub load_cpus: Option<Vec<usize>>,
}

/// An arm's samples and their medians.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ThroughputArm {
    pub samples: Vec<Sample>,
    /// Median of every run of every sample ([`Sample::bulk_runs_gbps`], pooled).
    pub bulk_gbps: f64,
    /// Median of every download of every sample ([`Sample::web_bulk_runs_gbps`], pooled).
    pub web_bulk_gbps: f64,
    /// Median of every wrk run of every sample ([`Sample::conn_runs_per_s`], pooled).
    pub conn_per_s: f64,
    pub connect_p50_us: f64,
    pub connect_p99_us: f64,
    /// `rlm` arm: median connect time minus the plain bridge's (the queued path's cost to a
    /// handshake: a SYN and a SYN/ACK each wait for a verdict).
    pub added_latency_p50_us: Option<f64>,
    pub added_latency_p99_us: Option<f64>,
    /// Medians of the samples' first connects ([`Sample::first_connect_p50_us`]).
    pub first_connect_p50_us: f64,
    pub first_connect_p99_us: f64,
    /// `rlm` arm: the same differences for first connects (what deciding a client's first SYN
    /// costs it).
    pub first_added_p50_us: Option<f64>,
    pub first_added_p99_us: Option<f64>,
    /// `rlm` arm: rlm's own verdict-latency histogram, median over the samples (per packet).
    pub rlm_verdict_latency_p50_us: Option<f64>,
    pub rlm_verdict_latency_p99_us: Option<f64>,
    /// `rlm` arm: samples in which rlm exited 0 on SIGTERM and left no rule.
    pub rlm_clean_exits: Option<usize>,
    /// `rlm` arm: rlm's CPU over its wall time, median over the samples (cores).
    pub rlm_cpu_cores: Option<f64>,
    /// Ratios to the plain bridge's medians.
    pub bulk_ratio: Option<f64>,
    /// And the web bulk's.
    pub web_bulk_ratio: Option<f64>,
    pub conn_ratio: Option<f64>,
}

/// Read a ground-truth file.
pub fn read_truth(path: &Path) -> Result<Vec<GroundTruth>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).map_err(Into::into)).collect()
}

/// The fidelity block of result.json: the appliance's passive measurement against the truth.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Fidelity {
    pub truth_pageviews: usize,
    pub matched: usize,
    pub median_rel_err: f64,
    pub p90_rel_err: f64,
}

/// An arm's live fidelity (`arms[].live_fidelity`): rlm's live pageview records against the
/// truth, all of them and those rlm acted on.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LiveFidelity {
    pub all: Fidelity,
    /// The truth's pageviews matched with a live pageview rlm acted on (a SYN dropped, limited
    /// or delayed, a reference blanked or rewritten). Its truth pageviews are those matched: the
    /// truth does not say what rlm did, so `seen_acted` is what to set `matched` against.
    pub acted: Fidelity,
    /// rlm's live pageviews read, and those it acted on.
    pub seen: usize,
    pub seen_acted: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(class: &str, start: f64, rt: f64) -> GroundTruth {
        GroundTruth {
            client: "10.4.0.1".into(),
            class: class.into(),
            url: "/home".into(),
            start_ts: start,
            end_ts: start + rt,
            rt_s: rt,
            objects_fetched: 1,
            objects_expected: 1,
            syn_retransmissions: 0,
            failed_connections: 0,
            failed: false,
        }
    }

    #[test]
    fn timeline_buckets_by_start_and_class() {
        let pvs = vec![pv("HIGH", 100.0, 3.0), pv("HIGH", 105.0, 1.0), pv("LOW", 109.9, 5.0), pv("HIGH", 112.0, 0.5), pv("LOW", 125.0, 1.0)];
        let t = timeline(&pvs, 60.0);
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].t_s, t[0].span_s), (0.0, 10.0));
        assert_eq!(t[0].by_class["HIGH"].count, 2);
        assert_eq!(t[0].by_class["HIGH"].mean_s, 2.0);
        assert_eq!(t[0].by_class["LOW"].mean_s, 5.0);
        assert!(!t[1].by_class.contains_key("LOW"));
        assert_eq!(t[2].by_class["LOW"].count, 1);
        // A 300 s run: buckets of 50 s.
        assert_eq!(timeline(&pvs, 300.0)[0].span_s, 50.0);
        assert!(timeline(&[], 60.0).is_empty());
    }
}
