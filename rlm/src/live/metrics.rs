//! Observability of `rlm run`: Prometheus `/metrics`, a JSON `/status` and the status page (`/`,
//! live through `/events`, its view as JSON at `/view`), served on localhost by default (hyper),
//! from metric handles the event loop updates in place (prometheus-client) and the status it
//! sets each second ([`Board`]).

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

use super::status_page::View;

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

/// What `rlm run` shows of itself: the JSON `/status` the event loop replaces about once a
/// second, and the status page's view made from each one ([`View`]), sent to every page open
/// (`/events`).
pub struct Board {
    status: Mutex<serde_json::Value>,
    view: Mutex<View>,
    /// The view as last made, as JSON text; each page's event stream waits on it.
    updates: tokio::sync::watch::Sender<Arc<str>>,
    /// Whether a status was set while no page watched, so that the view in `updates` is older
    /// than it: the view is made each second only while a page watches, else when asked for.
    stale: std::sync::atomic::AtomicBool,
    /// The token each request must carry, when one is configured.
    token: Option<String>,
}

/// The board the event loop writes and the server reads.
pub type Status = Arc<Board>;

impl Board {
    /// A board showing `status` until the first [`Board::set`]; requests must carry `token` if
    /// it is given.
    pub fn new(status: serde_json::Value, token: Option<String>) -> Status {
        let (updates, _) = tokio::sync::watch::channel(Arc::from("{}"));
        Arc::new(Board { status: Mutex::new(status), view: Mutex::new(View::default()), updates, stale: false.into(), token })
    }

    /// Replace the status, add it to the page's history at `t_ms` (Unix milliseconds), and make
    /// the view of it for the pages watching (none watching: when [`Board::view`] asks).
    pub fn set(&self, status: serde_json::Value, t_ms: u64) {
        let made = match self.view.lock() {
            Ok(mut v) => {
                v.push(&status, t_ms);
                (self.updates.receiver_count() > 0).then(|| v.make(&status).to_string())
            }
            Err(_) => return,
        };
        if let Ok(mut s) = self.status.lock() {
            *s = status;
        }
        match made {
            Some(view) => {
                self.stale.store(false, std::sync::atomic::Ordering::Release);
                self.updates.send_replace(Arc::from(view));
            }
            None => self.stale.store(true, std::sync::atomic::Ordering::Release),
        }
    }

    /// The view of the status as last set, as JSON text (made now if no page watched when it
    /// was set).
    pub fn view(&self) -> Arc<str> {
        if self.stale.swap(false, std::sync::atomic::Ordering::AcqRel) {
            if let (Ok(v), Ok(s)) = (self.view.lock(), self.status.lock()) {
                self.updates.send_replace(Arc::from(v.make(&s).to_string()));
            }
        }
        self.updates.borrow().clone()
    }

    /// The status as last set.
    pub fn status(&self) -> serde_json::Value {
        self.status.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Whether a request may be answered.
    fn admits(&self, req: &Request<hyper::body::Incoming>) -> bool {
        let authorization = req.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        token_admits(self.token.as_deref(), authorization, req.uri().query())
    }
}

/// Whether a request with this `Authorization` header and query carries `token` (any request
/// does when there is none).
fn token_admits(token: Option<&str>, authorization: Option<&str>, query: Option<&str>) -> bool {
    let Some(token) = token else { return true };
    let bearer = authorization.and_then(|v| v.strip_prefix("Bearer "));
    let query = query.into_iter().flat_map(|q| q.split('&')).find_map(|kv| kv.strip_prefix("token="));
    [bearer, query].into_iter().flatten().any(|given| same_secret(given.as_bytes(), token.as_bytes()))
}

/// Whether a request's `Host` names this box's loopback or an address: `localhost` (or a name
/// under it), an IPv4 or IPv6 literal, with or without a port, or no Host at all (HTTP/1.0).
/// Without a token that is all rlm answers: a web page from elsewhere can have its own DNS name
/// rebound to 127.0.0.1 and have the browser of someone on the box (or at the end of an `ssh
/// -L`) read the page and what it says of the clients; its requests carry that name.
fn host_is_local(host: Option<&str>) -> bool {
    let Some(host) = host else { return true };
    let name = match host.strip_prefix('[') {
        Some(v6) => {
            return v6.split_once(']').is_some_and(|(a, port)| a.parse::<std::net::Ipv6Addr>().is_ok() && (port.is_empty() || port.starts_with(':')))
        }
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    let name = name.to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

/// Compare two secrets in time that depends on their lengths only.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Read the status token from `path`: its first line, at least 16 characters.
pub fn read_token(path: &std::path::Path) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    // A regular file, read within a bound (a FIFO or /dev/zero would hold rlm at its start).
    let bytes = rules::read_bounded(path, 4096, "status token file").map_err(|why| anyhow::anyhow!("status_token_file {}: {why}", path.display()))?;
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0);
    if mode & 0o027 != 0 {
        anyhow::bail!(
            "status_token_file {}: other users can read or write it (mode {:o}): chmod g-w,o-rwx it (e.g. 0600, or 0640 for a group such as Prometheus's)",
            path.display(),
            mode & 0o7777
        );
    }
    let text = String::from_utf8_lossy(&bytes);
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic() && b != b'&') {
        anyhow::bail!("status_token_file {}: its first line must be a token of at least 16 printable characters (no spaces, no '&')", path.display());
    }
    Ok(token)
}

/// `GET path` from a running rlm's local API at `addr` (with its token if it asks for one): the
/// body of a 200 answer, else an error that says what came back.
pub fn get_local(addr: SocketAddr, path: &str, token: Option<&str>) -> anyhow::Result<String> {
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).with_context(|| format!("no rlm answering on {addr}"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    std::io::Write::write_all(&mut s, format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").as_bytes())?;
    let mut buf = String::new();
    std::io::Read::read_to_string(&mut s, &mut buf)?;
    let (head, body) = buf.split_once("\r\n\r\n").with_context(|| format!("rlm on {addr}: no HTTP answer"))?;
    let code = head.split_whitespace().nth(1).unwrap_or("");
    if code != "200" {
        anyhow::bail!("rlm on {addr} answered {path} with HTTP {code}: {}", body.trim());
    }
    Ok(body.to_string())
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// What the local API lets a client hold: a request head must come whole within
/// `header_timeout`, a connection on which no byte has moved either way for `stall_timeout` is
/// closed, and at most `max_connections` are open at once (one more is closed as soon as it is
/// accepted). Without them a client that sends half a head and waits held a connection for
/// ever, token or not, and enough of them took every file descriptor; and one that pipelines
/// requests and never reads the answers (401s too, without the token) stalls hyper's writes,
/// while no head is being read and no head timer runs, so 64 of them shut out the page and
/// Prometheus for good.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    pub header_timeout: std::time::Duration,
    pub stall_timeout: std::time::Duration,
    pub max_connections: usize,
}

impl ServeLimits {
    /// 10 s for a head; 30 s without a byte moving (`/events` writes every second); 64
    /// connections (a person's pages and a scraper or two).
    pub const DEFAULT: ServeLimits =
        ServeLimits { header_timeout: std::time::Duration::from_secs(10), stall_timeout: std::time::Duration::from_secs(30), max_connections: 64 };
}

/// A connection's stream that notes when a byte last moved on it, either way.
struct Progress {
    stream: tokio::net::TcpStream,
    moved: std::rc::Rc<std::cell::Cell<tokio::time::Instant>>,
}

impl Progress {
    fn note<T>(&self, r: &std::task::Poll<std::io::Result<T>>, moved: bool) {
        if moved && matches!(r, std::task::Poll::Ready(Ok(_))) {
            self.moved.set(tokio::time::Instant::now());
        }
    }
}

impl tokio::io::AsyncRead for Progress {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.stream).poll_read(cx, buf);
        self.note(&r, buf.filled().len() > before);
        r
    }
}

impl tokio::io::AsyncWrite for Progress {
    fn poll_write(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.stream).poll_write(cx, buf);
        let moved = matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0);
        self.note(&r, moved);
        r
    }

    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Serve `/metrics`, `/status`, the status page and its live view until the runtime ends.
pub async fn serve(addr: SocketAddr, registry: Arc<Registry>, status: Status) -> Result<()> {
    serve_with(addr, registry, status, ServeLimits::DEFAULT).await.map(|_| ())
}

/// [`serve`] within `limits`; returns the address it listens on (a port 0 chosen).
pub async fn serve_with(addr: SocketAddr, registry: Arc<Registry>, status: Status, limits: ServeLimits) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} for metrics"))?;
    let bound = listener.local_addr()?;
    let open = std::rc::Rc::new(std::cell::Cell::new(0usize));
    tokio::task::spawn_local(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of descriptors, most likely: wait rather than spin on the error.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            if open.get() >= limits.max_connections {
                drop(stream);
                continue;
            }
            open.set(open.get() + 1);
            let (registry, status, open) = (registry.clone(), status.clone(), open.clone());
            tokio::task::spawn_local(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (registry, status) = (registry.clone(), status.clone());
                    async move { Ok::<_, std::convert::Infallible>(respond(&req, &registry, &status)) }
                });
                let moved = std::rc::Rc::new(std::cell::Cell::new(tokio::time::Instant::now()));
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .serve_connection(hyper_util::rt::TokioIo::new(Progress { stream, moved: moved.clone() }), svc);
                let stalled = async {
                    while moved.get() + limits.stall_timeout > tokio::time::Instant::now() {
                        tokio::time::sleep_until(moved.get() + limits.stall_timeout).await;
                    }
                };
                // Whichever ends first; a stalled connection is dropped, closing it.
                tokio::select! {
                    _ = conn => {}
                    () = stalled => {}
                }
                open.set(open.get() - 1);
            });
        }
    });
    Ok(bound)
}

fn respond(req: &Request<hyper::body::Incoming>, registry: &Registry, status: &Board) -> Response<Body> {
    use http_body_util::BodyExt;
    if !status.admits(req) {
        return reply(401, "text/plain", "a token is needed: Authorization: Bearer TOKEN, or ?token=TOKEN\n".to_string());
    }
    let host = req.headers().get(hyper::header::HOST).map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
    if status.token.is_none() && !host_is_local(host.as_deref()) {
        return reply(
            403,
            "text/plain",
            "without a token (status_token_file) rlm answers requests for localhost or an address only, not for a DNS name (a page that \
             rebinds its name to 127.0.0.1 could read this one)\n"
                .to_string(),
        );
    }
    let (code, ctype, body) = match req.uri().path() {
        "/metrics" => {
            let mut s = String::new();
            match prometheus_client::encoding::text::encode(&mut s, registry) {
                Ok(()) => (200, "application/openmetrics-text; version=1.0.0; charset=utf-8", s),
                Err(e) => (500, "text/plain", e.to_string()),
            }
        }
        "/status" => (200, "application/json", serde_json::to_string_pretty(&status.status()).unwrap_or_default()),
        "/" | "/index.html" => (200, "text/html; charset=utf-8", page_with(&status.view())),
        "/view" => (200, "application/json", status.view().to_string()),
        "/events" => {
            // Server-sent events: the view now, then each new one as it is made (every second
            // while this stream, or another, watches).
            status.view();
            let rx = status.updates.subscribe();
            let stream = futures_util::stream::unfold((rx, true), |(mut rx, first)| async move {
                if !first {
                    rx.changed().await.ok()?;
                }
                let view = rx.borrow_and_update().clone();
                let frame = hyper::body::Frame::data(Bytes::from(format!("data: {view}\n\n")));
                Some((Ok::<_, std::convert::Infallible>(frame), (rx, false)))
            });
            return Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-store")
                .body(http_body_util::StreamBody::new(stream).boxed())
                .unwrap_or_else(|_| Response::new(Body::default()));
        }
        _ => (404, "text/plain", "try /, /metrics, /status or /view\n".to_string()),
    };
    reply(code, ctype, body)
}

fn reply(code: u16, ctype: &str, body: String) -> Response<Body> {
    use http_body_util::BodyExt;
    Response::builder()
        .status(code)
        .header("content-type", ctype)
        .header("cache-control", "no-store")
        .body(Full::new(Bytes::from(body)).boxed())
        .unwrap_or_else(|_| Response::new(Body::default()))
}

/// The status page with `view` (JSON) written into its script as the view as of now. Hosts and
/// URIs in it come from the wire: every `<`, `>` and `&` is written as a JSON escape, so that
/// nothing in it can end the script or put the HTML parser into another state (a `<!--<script>`
/// in a URI made the page's own `</script>` no end, and the page died of a syntax error; only
/// `</` was escaped then). In JSON these appear only inside strings, where the escape reads
/// back as the same character.
fn page_with(view: &str) -> String {
    let mut escaped = String::with_capacity(view.len());
    for c in view.chars() {
        match c {
            '<' => escaped.push_str("\\u003c"),
            '>' => escaped.push_str("\\u003e"),
            '&' => escaped.push_str("\\u0026"),
            c => escaped.push(c),
        }
    }
    STATUS_PAGE.replacen("/*VIEW*/null", &escaped, 1)
}

/// The status page: one file, its script and style inline, nothing fetched from elsewhere.
const STATUS_PAGE: &str = include_str!("status_page.html");

/// One NFQUEUE's figures, as the kernel keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCounters {
    pub queue: u16,
    /// Packets waiting in it for rlm now.
    pub waiting: u64,
    /// Packets dropped (or, with fail-open, accepted unseen) because it was full.
    pub dropped: u64,
    /// Packets the socket could not take.
    pub user_dropped: u64,
}

/// The kernel's per-queue counters (/proc/net/netfilter/nfnetlink_queue).
pub fn queue_counters() -> Vec<QueueCounters> {
    let Ok(text) = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue") else { return Vec::new() };
    text.lines()
        .filter_map(|l| {
            // queue_number peer_portid queue_total copy_mode copy_range queue_dropped user_dropped id_sequence 1
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| -> Option<u64> { f.get(i)?.parse().ok() };
            Some(QueueCounters { queue: f.first()?.parse().ok()?, waiting: n(2)?, dropped: n(5)?, user_dropped: n(6)? })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serve `status` within `limits` on this thread (a LocalSet, as `rlm run` serves) while
    /// `clients` runs on another with the server's address; what `clients` returns.
    fn beside_a_server<T: Send + 'static>(status: Status, limits: ServeLimits, clients: impl FnOnce(SocketAddr) -> T + Send + 'static) -> T {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let local = tokio::task::LocalSet::new();
        let addr = local.block_on(&rt, serve_with("127.0.0.1:0".parse().unwrap(), Arc::new(Registry::default()), status, limits)).unwrap();
        let clients = std::thread::spawn(move || clients(addr));
        local.block_on(&rt, async {
            while !clients.is_finished() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        });
        clients.join().unwrap()
    }

    /// A client that sends half a request head is closed after the head timeout, and one past
    /// the most connections is closed at once; the others are answered.
    #[test]
    fn half_heads_time_out_and_connections_past_the_limit_are_closed() {
        use std::io::{Read, Write};
        let limits = ServeLimits { header_timeout: std::time::Duration::from_secs(3), max_connections: 2, ..ServeLimits::DEFAULT };
        let board = Board::new(serde_json::json!({"ok": true}), None);
        let (third_closed, a_closed, answer) = beside_a_server(board, limits, move |addr| {
            let connect = || {
                let s = std::net::TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
                s
            };
            let closed_within = |mut s: std::net::TcpStream| {
                let t = std::time::Instant::now();
                let mut buf = [0u8; 256];
                // Closed: EOF, or hyper's 408 answer and then EOF.
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        return Some(t.elapsed());
                    }
                }
                None
            };
            let (mut a, b) = (connect(), connect());
            a.write_all(b"GET /status HTTP/1.1\r\nHo").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(100));
            let third = connect();
            let third_closed = closed_within(third);
            let a_closed = closed_within(a);
            // Once they have gone (`b` sent nothing either), a whole request is answered.
            drop(b);
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut c = connect();
            c.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
            let mut answer = String::new();
            let _ = c.read_to_string(&mut answer);
            (third_closed, a_closed, answer)
        });
        // At once, not at the head timeout (3 s): the margins are for a loaded machine.
        assert!(third_closed.is_some_and(|t| t < std::time::Duration::from_millis(1500)), "past the limit: {third_closed:?}");
        assert!(a_closed.is_some_and(|t| t < std::time::Duration::from_secs(8)), "half a head: {a_closed:?}");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// A client that pipelines requests and never reads the answers holds its connection only
    /// until no byte has moved for the stall timeout: then the only slot is free again.
    #[test]
    fn a_client_that_never_reads_is_closed_once_nothing_moves() {
        use std::io::{Read, Write};
        let limits = ServeLimits { stall_timeout: std::time::Duration::from_secs(2), max_connections: 1, ..ServeLimits::DEFAULT };
        let board = Board::new(serde_json::json!({"padding": "x".repeat(4096)}), None);
        let (sent, answered, after) = beside_a_server(board, limits, move |addr| {
            // Requests for 4 KB answers, far more than the sockets' buffers hold, never read.
            let mut slow = std::net::TcpStream::connect(addr).unwrap();
            slow.set_write_timeout(Some(std::time::Duration::from_secs(3))).unwrap();
            let mut sent = 0;
            while sent < 2_000_000 && slow.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").is_ok() {
                sent += 1;
            }
            // The slot is the slow client's until the server gives up on it.
            let start = std::time::Instant::now();
            loop {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
                let _ = c.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
                let mut answer = String::new();
                let _ = c.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.1 200") || start.elapsed() > std::time::Duration::from_secs(15) {
                    drop(slow);
                    return (sent, answer.starts_with("HTTP/1.1 200"), start.elapsed());
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        });
        assert!(sent < 2_000_000, "the slow client's requests stalled (the regime): all {sent} went out");
        assert!(answered, "a new client answered once the stalled one was closed (waited {after:?})");
    }

    /// The view is made each second only while a page watches; otherwise when asked for, from
    /// the history and the status set last.
    #[test]
    fn the_view_is_made_for_watchers_or_when_asked() {
        let status = |dropped: u64| serde_json::json!({ "classes": [], "rules": [], "stats": { "syns_dropped": dropped } });
        let board = Board::new(serde_json::Value::Null, None);
        board.set(status(1), 1_000);
        board.set(status(5), 2_000);
        assert_eq!(&**board.updates.borrow(), "{}", "nobody watching: not made");
        let view: serde_json::Value = serde_json::from_str(&board.view()).unwrap();
        assert_eq!(view["actions"]["syns_dropped"]["total"], 5, "made when asked, of the last status: {view}");
        assert_eq!(view["t"].as_array().map(Vec::len), Some(2), "with the history of both");
        let mut rx = board.updates.subscribe();
        board.set(status(9), 3_000);
        assert!(rx.has_changed().unwrap(), "a watcher gets each new view");
        let view: serde_json::Value = serde_json::from_str(&rx.borrow_and_update()).unwrap();
        assert_eq!(view["actions"]["syns_dropped"]["total"], 9);
    }

    /// Every metric the dashboard in `deploy/` queries is one rlm exports (a family's name, or
    /// its samples' `_total`, `_bucket`, `_sum`, `_count`), and it has the panels an operator
    /// looks for first.
    #[test]
    fn the_grafana_dashboard_queries_only_metrics_rlm_exports() {
        let mut registry = Registry::default();
        let _m = Metrics::new(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let names: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_whitespace().next()).collect();
        assert!(names.len() >= 25, "{names:?}");
        let exported = |m: &str| names.iter().any(|n| m == *n || ["_total", "_bucket", "_sum", "_count"].iter().any(|s| m == format!("{n}{s}")));
        let dashboard: serde_json::Value = serde_json::from_str(include_str!("../../../deploy/grafana-dashboard.json")).unwrap();
        let mut exprs = Vec::new();
        let mut titles = Vec::new();
        for p in dashboard["panels"].as_array().unwrap() {
            titles.push(p["title"].as_str().unwrap().to_string());
            for t in p["targets"].as_array().into_iter().flatten() {
                exprs.push(t["expr"].as_str().unwrap().to_string());
            }
        }
        assert!(exprs.len() >= 10, "{exprs:?}");
        for e in &exprs {
            let used: Vec<&str> = e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("rlm_")).collect();
            assert!(!used.is_empty(), "{e} queries no rlm metric");
            for m in used {
                assert!(exported(m), "{m} (in {e}) is not a metric rlm exports: {names:?}");
            }
        }
        for want in ["response time", "SYNs dropped", "Rules firing", "fail-open"] {
            assert!(titles.iter().any(|t| t.contains(want)), "a panel on {want}: {titles:?}");
        }
    }

    /// What the wire puts in the view cannot change how the page's script is parsed: the
    /// script holds no `<` or `>` of the view's, and its view reads back as it was.
    #[test]
    fn the_page_escapes_what_could_end_or_hide_its_script() {
        let view = serde_json::json!({"slowest": [{"host": "<!--<script>", "uri": "/a</script><b>&amp;"}]});
        let page = page_with(&view.to_string());
        let at = page.find("render({").expect("the view is written into the script") + "render(".len();
        let opening = page[..at].rfind("<script>").expect("in a script") + "<script>".len();
        let script = &page[opening..at + page[at..].find("</script>").expect("the script ends")];
        for tag in ["<!--", "<script", "</script", "<b>"] {
            assert!(!script.contains(tag), "{tag} of the wire's text is escaped in the script");
        }
        let mut de = serde_json::Deserializer::from_str(&page[at..]);
        let back: serde_json::Value = serde::Deserialize::deserialize(&mut de).unwrap();
        assert_eq!(back, view, "the escaped view reads back as it was");
    }

    /// Without a token rlm answers for localhost and addresses only: a rebound DNS name is
    /// refused, whatever it resolves to.
    #[test]
    fn without_a_token_only_local_hosts_and_addresses_are_answered() {
        for ok in [
            None,
            Some("127.0.0.1:9464"),
            Some("localhost:9464"),
            Some("LOCALHOST"),
            Some("a.localhost:1"),
            Some("[::1]:9464"),
            Some("[::1]"),
            Some("10.0.0.1"),
        ] {
            assert!(host_is_local(ok), "{ok:?}");
        }
        for no in
            [Some("evil.example"), Some("evil.example:9464"), Some("localhost.evil.example"), Some("[::1]x"), Some("127.0.0.1.nip.io:9464"), Some("")]
        {
            assert!(!host_is_local(no), "{no:?}");
        }
        use std::io::{Read, Write};
        let ask = |token: Option<String>, host: &'static str| {
            beside_a_server(Board::new(serde_json::json!({"ok": true}), token), ServeLimits::DEFAULT, move |addr| {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
                write!(s, "GET /status?token=0123456789abcdefXYZ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer);
                answer
            })
        };
        assert!(ask(None, "127.0.0.1").starts_with("HTTP/1.1 200"));
        assert!(ask(None, "rebound.example:9464").starts_with("HTTP/1.1 403"));
        assert!(ask(Some("0123456789abcdefXYZ".into()), "rlm.example:9464").starts_with("HTTP/1.1 200"), "a token answers for any name");
    }

    #[test]
    fn a_token_is_asked_for_only_when_configured_and_read_with_care() {
        assert!(token_admits(None, None, None));
        let t = Some("0123456789abcdefXYZ");
        assert!(!token_admits(t, None, None));
        assert!(token_admits(t, Some("Bearer 0123456789abcdefXYZ"), None));
        assert!(!token_admits(t, Some("Bearer 0123456789abcdefXY"), None));
        assert!(!token_admits(t, Some("0123456789abcdefXYZ"), None), "only as a bearer token");
        assert!(token_admits(t, None, Some("a=1&token=0123456789abcdefXYZ")));
        assert!(!token_admits(t, None, Some("token=0123456789abcdefXYZ0")));
        let dir = std::env::temp_dir().join(format!("rlm-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "0123456789abcdefXYZ\nignored\n").unwrap();
        let chmod = |mode: u32| std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        chmod(0o644);
        assert!(
            read_token(&file).unwrap_err().to_string().contains("other users can read or write it (mode 644)"),
            "a token others can read is refused"
        );
        chmod(0o660);
        assert!(read_token(&file).unwrap_err().to_string().contains("(mode 660)"), "a token its group can change is refused");
        chmod(0o640);
        assert_eq!(read_token(&file).unwrap(), "0123456789abcdefXYZ");
        assert!(read_token(std::path::Path::new("/dev/zero")).is_err(), "no regular file: refused, not read for ever");
        std::fs::write(&file, "short\n").unwrap();
        assert!(read_token(&file).unwrap_err().to_string().contains("at least 16"));
        assert!(read_token(&dir.join("absent")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
