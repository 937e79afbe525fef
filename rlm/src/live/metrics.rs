//! Observability of `rlm run`: Prometheus `/metrics` and a JSON `/status`, served on localhost by
//! default (hyper), from metric handles the event loop updates in place (prometheus-client).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabel {
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabel {
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BandLabel {
    pub band: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CounterLabel {
    pub counter: &'static str,
}

/// A kind of record: transactions, pageviews or decisions.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

fn rt_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 1.5, 16))
}

/// Every metric `rlm run` exports.
#[derive(Clone)]
pub struct Metrics {
    pub frames: Family<SourceLabel, Counter>,
    pub verdicts: Family<VerdictLabel, Counter>,
    pub syn_drops: Family<ClassLabel, Counter>,
    /// QUIC flows and their bytes by class (all of them as class "-" when no rules are in force).
    pub quic_flows: Family<ClassLabel, Counter>,
    pub quic_bytes: Family<ClassLabel, Counter>,
    pub malformed: Family<ReasonLabel, Counter>,
    pub queue_dropped: Family<QueueLabel, Gauge>,
    pub queue_user_dropped: Family<QueueLabel, Gauge>,
    pub tap_dropped: Gauge,
    pub fastpath: Family<CounterLabel, Gauge>,
    pub injected: Family<CounterLabel, Gauge>,
    pub verdict_latency: Histogram,
    pub queue_wait: Histogram,
    pub queue_unstamped: Counter,
    pub pageview_rt: Family<ClassLabel, Histogram, fn() -> Histogram>,
    pub rule_firing: Family<RuleLabel, Gauge>,
    pub connections: Gauge,
    pub open_pageviews: Gauge,
    pub loop_lag: Histogram,
    pub srpt_band_packets: Family<BandLabel, Counter>,
    pub records_written: Family<KindLabel, Counter>,
    pub records_dropped: Family<KindLabel, Counter>,
    pub held: Family<BoundLabel, Gauge>,
    pub limit: Family<BoundLabel, Gauge>,
    /// The SLA controller: the SYN rate it admits of each shed class (-1: not limited), each
    /// target's last measurement and limit.
    pub controller_rate: Family<ClassLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub controller_measured: Family<ClassLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub controller_target: Family<ClassLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Resource-aware admission: each URL group's admitted request rate (-1: not limited), its
    /// server time's last measurement and its target's limit.
    pub group_rate: Family<GroupLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub group_measured: Family<GroupLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub group_target: Family<GroupLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

/// What a `[limits]` bound bounds: `connections` (a count), `held_bytes`, `pageview_list_bytes`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BoundLabel {
    pub bound: &'static str,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            frames: Family::default(),
            verdicts: Family::default(),
            syn_drops: Family::default(),
            quic_flows: Family::default(),
            quic_bytes: Family::default(),
            malformed: Family::default(),
            queue_dropped: Family::default(),
            queue_user_dropped: Family::default(),
            tap_dropped: Gauge::default(),
            fastpath: Family::default(),
            injected: Family::default(),
            verdict_latency: Histogram::new(exponential_buckets(1e-6, 2.0, 20)),
            queue_wait: Histogram::new(exponential_buckets(1e-6, 2.0, 20)),
            queue_unstamped: Counter::default(),
            pageview_rt: Family::new_with_constructor(rt_histogram as fn() -> Histogram),
            rule_firing: Family::default(),
            connections: Gauge::default(),
            open_pageviews: Gauge::default(),
            loop_lag: Histogram::new(exponential_buckets(1e-5, 2.0, 18)),
            srpt_band_packets: Family::default(),
            records_written: Family::default(),
            records_dropped: Family::default(),
            held: Family::default(),
            limit: Family::default(),
            controller_rate: Family::default(),
            controller_measured: Family::default(),
            controller_target: Family::default(),
            group_rate: Family::default(),
            group_measured: Family::default(),
            group_target: Family::default(),
        };
        registry.register(
            "rlm_controller_rate",
            "The SLA controller's admitted SYN rate per second for each shed class (-1 while the class is not limited)",
            m.controller_rate.clone(),
        );
        registry.register(
            "rlm_controller_measured_seconds",
            "Each SLA target's last measurement (its statistic over the recent pageviews and those in flight)",
            m.controller_measured.clone(),
        );
        registry.register("rlm_controller_target_seconds", "Each SLA target's limit", m.controller_target.clone());
        registry.register(
            "rlm_group_admitted_rate",
            "Resource-aware admission: the requests per second admitted of each URL group with an SLA GROUP target (-1 while not limited)",
            m.group_rate.clone(),
        );
        registry.register(
            "rlm_group_server_time_seconds",
            "Each SLA GROUP target's last measurement of its group's server time (request to first response byte)",
            m.group_measured.clone(),
        );
        registry.register("rlm_group_target_seconds", "Each SLA GROUP target's limit", m.group_target.clone());
        registry.register("rlm_frames", "Frames handed to the engine, by source (queue, tap, fastpath)", m.frames.clone());
        registry.register("rlm_verdicts", "Verdicts on queued packets", m.verdicts.clone());
        registry.register("rlm_syn_drops", "SYNs dropped by rules, by the client's class", m.syn_drops.clone());
        registry.register(
            "rlm_quic_flows",
            "QUIC flows (UDP to or from the servers' ports) by the client's class: seen, not managed",
            m.quic_flows.clone(),
        );
        registry.register("rlm_quic_bytes", "UDP payload bytes of those QUIC flows, both ways, by class", m.quic_bytes.clone());
        registry.register("rlm_malformed_frames", "Frames that did not decode, by reason", m.malformed.clone());
        registry.register("rlm_queue_dropped", "Packets the kernel could not queue (queue full: accepted unseen)", m.queue_dropped.clone());
        registry.register("rlm_queue_user_dropped", "Packets the kernel could not deliver to rlm's socket", m.queue_user_dropped.clone());
        registry.register("rlm_tap_dropped", "Packets the measurement tap lost", m.tap_dropped.clone());
        registry.register(
            "rlm_fastpath_packets",
            "The eBPF fast path's counters: SYNs passed, dropped and queued in the kernel, packets reported, reports lost to a full ring",
            m.fastpath.clone(),
        );
        registry.register(
            "rlm_injected_frames",
            "Frames rlm sent on the endpoints' behalf: fast SYNs and SYN/ACKs sent, client retransmissions absorbed, first SYNs delayed, \
             frames the budget denied, frames without a link address, and the injector's sent and failed",
            m.injected.clone(),
        );
        registry.register("rlm_verdict_latency_seconds", "From a queued packet's arrival in rlm to its verdict", m.verdict_latency.clone());
        registry.register(
            "rlm_queue_wait_seconds",
            "From a queued packet's arrival in the kernel (its receive stamp, which is its time for the engine) to rlm's reading it",
            m.queue_wait.clone(),
        );
        registry.register(
            "rlm_queue_unstamped",
            "Queued packets without a plausible kernel receive stamp, timed when rlm read them",
            m.queue_unstamped.clone(),
        );
        registry.register("rlm_pageview_rt_seconds", "Response time of finished pageviews, by class", m.pageview_rt.clone());
        registry.register("rlm_rule_firing", "1 while a rule holds, by rule (file:line)", m.rule_firing.clone());
        registry.register("rlm_connections", "Connections tracked", m.connections.clone());
        registry.register(
            "rlm_held",
            "What rlm holds against its [limits]: connections tracked, bytes held for later, bytes of open pageviews' lists",
            m.held.clone(),
        );
        registry.register("rlm_limit", "rlm's [limits], derived from memory_mb: the bounds rlm_held is held to", m.limit.clone());
        registry.register("rlm_open_pageviews", "Pageviews open", m.open_pageviews.clone());
        registry.register("rlm_loop_lag_seconds", "How long frames waited between arrival and handling", m.loop_lag.clone());
        registry.register(
            "rlm_srpt_band_packets",
            "Packets the SRPT classifier put in each band of the client port (0: control)",
            m.srpt_band_packets.clone(),
        );
        registry.register(
            "rlm_records_written",
            "Records written to --transactions, --pageviews and --decisions, by kind",
            m.records_written.clone(),
        );
        registry.register(
            "rlm_records_dropped",
            "Records lost, by kind: the writer's queue was full (a slow disk or pipe) or the write failed",
            m.records_dropped.clone(),
        );
        m
    }
}

/// Set the counter of `label` in `family` to `total`, a count the engine or a writer keeps
/// (cumulative: the metric follows it).
pub fn store_total<L: Clone + std::hash::Hash + Eq>(family: &Family<L, Counter>, label: L, total: u64) {
    family.get_or_create(&label).inner().store(total, std::sync::atomic::Ordering::Relaxed);
}

/// What `/status` shows; the event loop replaces it about once a second.
pub type Status = Arc<Mutex<serde_json::Value>>;

/// Serve `/metrics` and `/status` until the runtime ends.
pub async fn serve(addr: SocketAddr, registry: Arc<Registry>, status: Status) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} for metrics"))?;
    tokio::task::spawn_local(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (registry, status) = (registry.clone(), status.clone());
            tokio::task::spawn_local(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (registry, status) = (registry.clone(), status.clone());
                    async move { Ok::<_, std::convert::Infallible>(respond(req.uri().path(), &registry, &status)) }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok(())
}

fn respond(path: &str, registry: &Registry, status: &Status) -> Response<Full<Bytes>> {
    let (code, ctype, body) = match path {
        "/metrics" => {
            let mut s = String::new();
            match prometheus_client::encoding::text::encode(&mut s, registry) {
                Ok(()) => (200, "application/openmetrics-text; version=1.0.0; charset=utf-8", s),
                Err(e) => (500, "text/plain", e.to_string()),
            }
        }
        "/status" => {
            let v = status.lock().map(|v| v.clone()).unwrap_or_default();
            (200, "application/json", serde_json::to_string_pretty(&v).unwrap_or_default())
        }
        _ => (404, "text/plain", "try /metrics or /status\n".to_string()),
    };
    Response::builder()
        .status(code)
        .header("content-type", ctype)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// The kernel's per-queue counters (/proc/net/netfilter/nfnetlink_queue): queue number,
/// packets dropped because the queue was full, packets the socket could not take.
pub fn queue_counters() -> Vec<(u16, u64, u64)> {
    let Ok(text) = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue") else { return Vec::new() };
    text.lines()
        .filter_map(|l| {
            // queue_number peer_portid queue_total copy_mode copy_range queue_dropped user_dropped id_sequence 1
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.first()?.parse().ok()?, f.get(5)?.parse().ok()?, f.get(6)?.parse().ok()?))
        })
        .collect()
}
