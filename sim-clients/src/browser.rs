//! Emulated browsers, closed loop, behaving like the modified TPC-W browser of 004 section 6.
//!
//! Each browser has its own source address and two persistent connections. A pageview fetches
//! the container on the first connection, then the embedded images spread over both (each
//! connection takes the next image when it is free); the second connection is opened when the
//! container has arrived. Connection failure follows 004 Figure 5: the image tied to a second
//! connection that never connects is never fetched, the rest come over the first, and the
//! pageview ends when TCP reports the failure. Between pageviews the browser thinks for a
//! negative-exponential time (at least `think_min_s`). Every pageview is logged from the
//! browser's own clock: that log is the lab's ground truth.
//!
//! Over TLS ([`TlsSpec`], [`crate::tls`]) the same browser speaks HTTPS to the site's name:
//! HTTP/1.1 as above, or HTTP/2, where, as a real browser does, it keeps one connection and
//! asks for all of a page's images at once when the container has arrived.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::dist::ThinkTime;
use crate::tcp_profile::TcpProfile;

/// One browser to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BrowserSpec {
    pub addr: IpAddr,
    pub class: String,
    /// Over HTTPS, the site this browser asks for (SNI and Host), when not the run's.
    #[serde(default)]
    pub site: Option<String>,
    /// A `Cookie` header this browser sends with every request (cookie-abort's carts:
    /// `cart=3`); none: no cookie.
    #[serde(default)]
    pub cookie: Option<String>,
}

/// Who asks: the request's Host and the browser's cookie.
#[derive(Clone, Debug)]
struct Asker {
    host: String,
    cookie: Option<String>,
}

/// A run of browsers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSpec {
    pub server: SocketAddr,
    pub browsers: Vec<BrowserSpec>,
    pub think_mean_s: f64,
    pub duration_s: f64,
    /// Browsers start spread over this many seconds (no thundering herd).
    pub ramp_s: f64,
    pub seed: u64,
    pub profile: TcpProfile,
    /// Page paths to request, with weights (the site's mix); each may carry a `{item}`,
    /// `{subject}` or `{term}` placeholder.
    pub pages: Vec<(String, f64)>,
    pub items: u32,
    /// HTTPS instead of HTTP.
    #[serde(default)]
    pub tls: Option<TlsSpec>,
    /// The shortest think time: the think time is this plus a negative-exponential time, of
    /// mean `think_mean_s` in all.
    #[serde(default)]
    pub think_min_s: f64,
    /// Open loop instead: pageviews begin at these rates whatever the farm's response times,
    /// each by an idle browser (a new visitor: its connections opened afresh); the browsers do
    /// not think.
    #[serde(default)]
    pub arrivals: Option<Arrivals>,
}

/// An open-loop schedule of pageview arrivals: Poisson, at a rate constant between steps.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Arrivals {
    /// (from this second of the run, pageviews per second), in order of time; before the first
    /// step nothing arrives.
    pub steps: Vec<(f64, f64)>,
}

impl Arrivals {
    /// The rate at second `t` of the run, and when it next changes.
    pub fn rate_at(&self, t: f64) -> (f64, Option<f64>) {
        let i = self.steps.iter().rposition(|&(from, _)| from <= t);
        let rate = i.map_or(0.0, |i| self.steps[i].1);
        let next = self.steps.get(i.map_or(0, |i| i + 1)).map(|&(from, _)| from);
        (rate, next)
    }

    /// The arrival times (seconds of the run) before `duration_s`, from `rng`: exponential gaps
    /// at the rate in force, drawn afresh at each step (the gap is memoryless, so cutting it
    /// there is exact).
    pub fn times(&self, duration_s: f64, rng: &mut impl Rng) -> Vec<f64> {
        let mut out = Vec::new();
        let mut t = 0.0;
        while t < duration_s {
            let (rate, next) = self.rate_at(t);
            let until = next.unwrap_or(f64::INFINITY).min(duration_s);
            if rate <= 0.0 {
                t = until;
                continue;
            }
            let gap = -(1.0 - rng.random::<f64>()).ln() / rate;
            if t + gap >= until {
                t = until;
                continue;
            }
            t += gap;
            out.push(t);
        }
        out
    }
}

/// How a run's browsers speak HTTPS.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TlsSpec {
    /// The lab authority's certificate, PEM ([`crate::tls::make_certs`]).
    pub ca: std::path::PathBuf,
    /// The site's name: the SNI and the Host.
    pub site: String,
    /// HTTP/2 (ALPN `h2`): one connection, a page's images asked for at once; else HTTP/1.1,
    /// two connections, as in the clear.
    pub h2: bool,
}

/// A browser's TLS: the run's connector and protocol (made once), its site's name.
pub(crate) struct BrowserTls {
    pub(crate) connector: tokio_rustls::TlsConnector,
    pub(crate) name: rustls::pki_types::ServerName<'static>,
    pub(crate) site: String,
    h2: bool,
}

impl BrowserTls {
    /// The run's TLS for a browser that asks for `site` (its own, else the run's).
    pub(crate) fn new(t: &TlsSpec, connector: &tokio_rustls::TlsConnector, site: Option<&str>) -> Result<BrowserTls> {
        let site = site.unwrap_or(&t.site).to_string();
        Ok(BrowserTls {
            connector: connector.clone(),
            name: rustls::pki_types::ServerName::try_from(site.clone()).context("the site's name")?,
            site,
            h2: t.h2,
        })
    }
}

/// One pageview, as the browser saw it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GroundTruth {
    pub client: String,
    pub class: String,
    pub url: String,
    /// First SYN of the pageview (connect called), or first request byte on a kept-alive
    /// connection; Unix seconds.
    pub start_ts: f64,
    /// Last byte of the last object received (or the failure reported by TCP).
    pub end_ts: f64,
    pub rt_s: f64,
    pub objects_fetched: u32,
    pub objects_expected: u32,
    pub syn_retransmissions: u32,
    pub failed_connections: u32,
    /// The container itself could not be fetched.
    pub failed: bool,
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// An open connection: HTTP/1.1 (in the clear or over TLS) or HTTP/2 (over TLS).
enum Conn {
    Http1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
}

impl Conn {
    fn is_closed(&self) -> bool {
        match self {
            Conn::Http1(s) => s.is_closed(),
            Conn::H2(s) => s.is_closed(),
        }
    }
}

/// HTTP/1.1 over `io`.
async fn http1<I>(io: I) -> hyper::Result<Conn>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(conn);
    Ok(Conn::Http1(sender))
}

/// Retransmissions so far on a socket (SYNs, for a socket that just connected).
fn total_retrans(fd: i32) -> u32 {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid socket and a buffer of the size given.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut info as *mut _ as *mut libc::c_void, &mut len) };
    if r == 0 {
        info.tcpi_total_retrans
    } else {
        0
    }
}

/// Open a connection from `src` with the profile's SYN behaviour. Err carries the SYN count
/// when the connect failed.
async fn connect(src: IpAddr, server: SocketAddr, profile: TcpProfile, tls: Option<&BrowserTls>) -> Result<(Conn, u32), (anyhow::Error, u32)> {
    use std::os::fd::AsRawFd;
    let setup = || -> Result<tokio::net::TcpSocket> {
        let s = socket2::Socket::new(socket2::Domain::for_address(server), socket2::Type::STREAM, None)?;
        profile.apply(&s)?;
        s.set_nodelay(true)?;
        s.bind(&SocketAddr::new(src, 0).into())?;
        s.set_nonblocking(true)?;
        Ok(tokio::net::TcpSocket::from_std_stream(s.into()))
    };
    let sock = setup().map_err(|e| (e, 0))?;
    let stream = sock.connect(server).await.map_err(|e| (anyhow!(e), profile.syn_retries()))?;
    let retrans = total_retrans(stream.as_raw_fd());
    let Some(tls) = tls else {
        return http1(stream).await.map(|c| (c, retrans)).map_err(|e| (anyhow!(e), retrans));
    };
    let stream = tls.connector.connect(tls.name.clone(), stream).await.map_err(|e| (anyhow!(e), retrans))?;
    let conn = if tls.h2 {
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.map_err(|e| (anyhow!(e), retrans))?;
        tokio::spawn(conn);
        Conn::H2(sender)
    } else {
        http1(stream).await.map_err(|e| (anyhow!(e), retrans))?
    };
    Ok((conn, retrans))
}

/// One GET on an open connection: its body when its last byte has arrived, or the status of an
/// answer that is not a success (a 503 from an overloaded site is an answer, not a broken
/// connection: a browser shows it and does not ask again); an error when the connection failed
/// under it.
async fn fetch(c: &mut Conn, who: &Asker, path: &str) -> Result<Result<Bytes, hyper::StatusCode>> {
    let host = &who.host;
    let with_cookie = |b: hyper::http::request::Builder| match &who.cookie {
        Some(c) => b.header("cookie", c.as_str()),
        None => b,
    };
    let resp = match c {
        Conn::Http1(s) => {
            s.ready().await?;
            s.send_request(with_cookie(hyper::Request::get(path).header("host", host.as_str())).body(Empty::<Bytes>::new())?).await?
        }
        Conn::H2(s) => {
            s.ready().await?;
            s.send_request(with_cookie(hyper::Request::get(format!("https://{host}{path}"))).body(Empty::<Bytes>::new())?).await?
        }
    };
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        return Ok(Err(status));
    }
    Ok(Ok(body))
}

/// The image references of a container (the bookstore's pages have only `<img src="...">`).
pub fn image_refs(html: &str) -> Vec<String> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| regex::Regex::new(r#"(?i)<img\s+[^>]*?src\s*=\s*["']?([^"' >]+)"#).expect("valid regex"));
    let mut seen = Vec::new();
    for c in re.captures_iter(html) {
        let u = c[1].to_string();
        if !seen.contains(&u) {
            seen.push(u);
        }
    }
    seen
}

struct Browser {
    spec: BrowserSpec,
    run: Arc<RunSpec>,
    tls: Option<Arc<BrowserTls>>,
    conns: [Option<Conn>; 2],
    rng: StdRng,
}

/// Outcome of getting one object over one connection slot.
enum Got {
    Ok,
    /// The connection could not be (re)opened: TCP reported failure after these SYNs.
    ConnectFailed,
    /// The request failed on an open connection.
    Error,
}

impl Browser {
    fn asker(&self) -> Asker {
        let host = match &self.tls {
            Some(t) => t.site.clone(),
            None => self.run.server.to_string(),
        };
        Asker { host, cookie: self.spec.cookie.clone() }
    }

    /// Make sure slot `i` has a connection; returns SYN retransmissions spent, or the failure.
    async fn ensure(&mut self, i: usize) -> Result<u32, u32> {
        if self.conns[i].as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(0);
        }
        self.conns[i] = None;
        match connect(self.spec.addr, self.run.server, self.run.profile, self.tls.as_deref()).await {
            Ok((c, r)) => {
                self.conns[i] = Some(c);
                Ok(r)
            }
            Err((_, syns)) => Err(syns),
        }
    }

    /// Fetch `path` on slot `i`, reopening a connection the server closed while idle.
    async fn get_on(&mut self, i: usize, path: &str, retrans: &mut u32) -> (Got, Option<Bytes>) {
        for attempt in 0..2 {
            match self.ensure(i).await {
                Ok(r) => *retrans += r,
                Err(syns) => {
                    *retrans += syns;
                    return (Got::ConnectFailed, None);
                }
            }
            let who = self.asker();
            let conn = self.conns[i].as_mut().expect("ensured");
            match fetch(conn, &who, path).await {
                Ok(Ok(b)) => return (Got::Ok, Some(b)),
                Ok(Err(_status)) => return (Got::Error, None),
                Err(_) if attempt == 0 => self.conns[i] = None, // closed under us: once more on a new one
                Err(_) => {
                    self.conns[i] = None;
                    return (Got::Error, None);
                }
            }
        }
        (Got::Error, None)
    }

    fn next_url(&mut self) -> String {
        let total: f64 = self.run.pages.iter().map(|p| p.1).sum();
        let mut x = self.rng.random::<f64>() * total;
        let mut path = self.run.pages.first().map(|p| p.0.clone()).unwrap_or_else(|| "/".into());
        for (p, w) in &self.run.pages {
            x -= w;
            if x < 0.0 {
                path = p.clone();
                break;
            }
        }
        const SUBJECTS: [&str; 6] = ["ARTS", "COMPUTERS", "HISTORY", "MYSTERY", "SCIENCE-NATURE", "TRAVEL"];
        path.replace("{item}", &self.rng.random_range(1..=self.run.items.max(1)).to_string())
            .replace("{subject}", SUBJECTS[self.rng.random_range(0..SUBJECTS.len())])
            .replace("{term}", &format!("{:x}", self.rng.random_range(16..256)))
    }

    /// One pageview.
    async fn pageview(&mut self) -> GroundTruth {
        let url = self.next_url();
        let start_wall = unix_now();
        let start = Instant::now();
        let mut retrans = 0;
        let mut record = GroundTruth {
            client: self.spec.addr.to_string(),
            class: self.spec.class.clone(),
            url: url.clone(),
            start_ts: start_wall,
            end_ts: start_wall,
            rt_s: 0.0,
            objects_fetched: 0,
            objects_expected: 0,
            syn_retransmissions: 0,
            failed_connections: 0,
            failed: false,
        };
        let (got, body) = self.get_on(0, &url, &mut retrans).await;
        let html = match (got, body) {
            (Got::Ok, Some(b)) => String::from_utf8_lossy(&b).into_owned(),
            (Got::ConnectFailed, _) => {
                record.failed = true;
                record.failed_connections = 1;
                return self.finish(record, start, retrans);
            }
            _ => {
                record.failed = true;
                return self.finish(record, start, retrans);
            }
        };
        let mut last = start.elapsed();
        let refs = image_refs(&html);
        record.objects_expected = refs.len() as u32;
        if let Some(Conn::H2(sender)) = &self.conns[0] {
            // HTTP/2: every image asked for at once on the one connection.
            let (fetched, l) = fetch_all_h2(sender.clone(), self.asker(), refs, start).await;
            record.objects_fetched = fetched;
            last = last.max(l);
            record.end_ts = start_wall + last.as_secs_f64();
            record.rt_s = last.as_secs_f64();
            record.syn_retransmissions = retrans;
            return record;
        }
        let queue = Arc::new(Mutex::new(refs.into_iter().collect::<VecDeque<String>>()));
        // Both connections take images from the queue; the second connection's first image is
        // tied to it (taken before it connects).
        let mut second = Browser {
            spec: self.spec.clone(),
            run: self.run.clone(),
            tls: self.tls.clone(),
            conns: [self.conns[1].take(), None],
            rng: StdRng::seed_from_u64(self.rng.random()),
        };
        let mut first_conn = self.conns[0].take();
        let q1 = queue.clone();
        let slot1 = async move {
            let mut fetched = 0u32;
            let mut retrans = 0u32;
            let mut failed = false;
            let mut last = Duration::ZERO;
            let tied = q1.lock().await.pop_front();
            if let Some(first) = tied {
                let mut next = Some(first);
                while let Some(path) = next.take() {
                    match second.get_on(0, &path, &mut retrans).await {
                        (Got::Ok, _) => {
                            fetched += 1;
                            last = start.elapsed();
                        }
                        (Got::ConnectFailed, _) => {
                            // Figure 5: the tied image is never fetched; the failure ends the page.
                            failed = true;
                            last = start.elapsed();
                            break;
                        }
                        (Got::Error, _) => {}
                    }
                    next = q1.lock().await.pop_front();
                }
            }
            (second.conns[0].take(), fetched, retrans, failed, last)
        };
        let who = self.asker();
        let q0 = queue.clone();
        let slot0 = async move {
            let mut fetched = 0u32;
            let mut last = Duration::ZERO;
            loop {
                let Some(path) = q0.lock().await.pop_front() else { break };
                let ok = match first_conn.as_mut() {
                    Some(c) => matches!(fetch(c, &who, &path).await, Ok(Ok(_))),
                    None => false,
                };
                if ok {
                    fetched += 1;
                    last = start.elapsed();
                } else {
                    first_conn = None;
                }
            }
            (first_conn, fetched, last)
        };
        let ((c0, f0, l0), (c1, f1, r1, failed1, l1)) = tokio::join!(slot0, slot1);
        self.conns = [c0, c1];
        record.objects_fetched = f0 + f1;
        retrans += r1;
        if failed1 {
            record.failed_connections += 1;
        }
        last = last.max(l0).max(l1);
        record.end_ts = start_wall + last.as_secs_f64();
        record.rt_s = last.as_secs_f64();
        record.syn_retransmissions = retrans;
        record
    }

    fn finish(&self, mut r: GroundTruth, start: Instant, retrans: u32) -> GroundTruth {
        let e = start.elapsed();
        r.end_ts = r.start_ts + e.as_secs_f64();
        r.rt_s = e.as_secs_f64();
        r.syn_retransmissions = retrans;
        r
    }
}

/// HTTP/2: GET every path at once on clones of `sender`; the images fetched and when the last
/// arrived (since `start`).
async fn fetch_all_h2(
    sender: hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    who: Asker,
    paths: Vec<String>,
    start: Instant,
) -> (u32, Duration) {
    let mut set = tokio::task::JoinSet::new();
    for path in paths {
        let mut c = Conn::H2(sender.clone());
        let who = who.clone();
        set.spawn(async move { matches!(fetch(&mut c, &who, &path).await, Ok(Ok(_))).then(|| start.elapsed()) });
    }
    let (mut fetched, mut last) = (0, Duration::ZERO);
    while let Some(done) = set.join_next().await {
        if let Ok(Some(at)) = done {
            fetched += 1;
            last = last.max(at);
        }
    }
    (fetched, last)
}

/// How the load generator itself fared (to tell whether it, not the farm, was the bottleneck).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GeneratorStats {
    /// Pageviews (browsers) or requests (open loop) made.
    pub pageviews: u64,
    pub cpu_s: f64,
    pub wall_s: f64,
    /// Scheduling lag of a 50 ms tick: how late it fired (ms).
    pub lag_p99_ms: f64,
    pub lag_max_ms: f64,
    /// Open-loop arrivals that found no idle browser (every one was still loading a page).
    #[serde(default)]
    pub arrivals_lost: u64,
    /// Pageviews under way at the end that had not finished [`tail`] after it: given up,
    /// not in the ground truth, counted here.
    #[serde(default)]
    pub cut: u64,
}

/// How long after the run's end the pageviews under way may take to finish: one connect
/// timeout of the profile (a failing connection takes that long) and 5 s. Past it they are cut,
/// so that the generator always ends and reports by itself (the lab that runs it kills it later
/// than this, as a backstop only).
pub fn tail(profile: TcpProfile) -> Duration {
    profile.connect_timeout() + Duration::from_secs(5)
}

/// Wait for `tasks` until `until`; those still running then are aborted. Returns what the
/// finished ones returned and how many were cut.
async fn join_until<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>, until: Instant) -> Result<(Vec<T>, u64)> {
    let (mut done, mut cut) = (Vec::with_capacity(tasks.len()), 0);
    for mut t in tasks {
        match tokio::time::timeout_at(until.into(), &mut t).await {
            Ok(r) => done.push(r.context("browser task")?),
            Err(_) => {
                t.abort();
                cut += 1;
            }
        }
    }
    Ok((done, cut))
}

/// Run every browser until the duration is over; each finished pageview goes to `out`.
pub async fn run(spec: RunSpec, out: tokio::sync::mpsc::UnboundedSender<GroundTruth>) -> Result<GeneratorStats> {
    let connector = spec.tls.as_ref().map(|t| crate::tls::client_config(&t.ca, t.h2).map(tokio_rustls::TlsConnector::from)).transpose()?;
    let tls: Vec<Option<Arc<BrowserTls>>> = spec
        .browsers
        .iter()
        .map(|b| match (&spec.tls, &connector) {
            (Some(t), Some(c)) => BrowserTls::new(t, c, b.site.as_deref()).map(|t| Some(Arc::new(t))),
            _ => Ok(None),
        })
        .collect::<Result<_>>()?;
    let spec = Arc::new(spec);
    let wall = Instant::now();
    let cpu0 = cpu_seconds();
    let deadline = wall + Duration::from_secs_f64(spec.duration_s);
    let lag = lag_meter(deadline);
    if let Some(arrivals) = spec.arrivals.clone() {
        return run_open(spec, arrivals, tls, out, (wall, cpu0, lag)).await;
    }
    let mut tasks = Vec::new();
    let n = spec.browsers.len().max(1);
    // Each browser's finished pageviews, counted as they finish: a browser cut at the end still
    // counts those it made.
    let made = Arc::new(std::sync::atomic::AtomicU64::new(0));
    for (k, b) in spec.browsers.iter().enumerate() {
        let spec = spec.clone();
        let out = out.clone();
        let b = b.clone();
        let tls = tls[k].clone();
        let made = made.clone();
        tasks.push(tokio::spawn(async move {
            let mut br = Browser {
                spec: b,
                run: spec.clone(),
                tls,
                conns: [None, None],
                rng: StdRng::seed_from_u64(spec.seed.wrapping_mul(1_000_003).wrapping_add(k as u64)),
            };
            let think = ThinkTime::with_mean((spec.think_mean_s - spec.think_min_s).max(1e-3));
            tokio::time::sleep(Duration::from_secs_f64(spec.ramp_s * k as f64 / n as f64)).await;
            while Instant::now() < deadline {
                let pv = br.pageview().await;
                made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if out.send(pv).is_err() {
                    break;
                }
                let t = Duration::from_secs_f64(spec.think_min_s + think.sample(&mut br.rng));
                if Instant::now() + t >= deadline {
                    break;
                }
                tokio::time::sleep(t).await;
            }
        }));
    }
    let (_, cut) = join_until(tasks, deadline + tail(spec.profile)).await?;
    let mut stats = GeneratorStats::finish(made.load(std::sync::atomic::Ordering::Relaxed), cpu0, wall, lag).await;
    stats.cut = cut;
    Ok(stats)
}

/// [`run`] in open loop: each arrival is of a class drawn by the browsers' shares (a run of one
/// HIGH browser in three gets one HIGH arrival in three), and an idle browser of that class,
/// picked at random, begins a pageview as a new visitor (its old connections closed); an arrival
/// that finds every browser of its class busy is lost (counted). Pageviews under way at the end
/// finish.
async fn run_open(
    spec: Arc<RunSpec>,
    arrivals: Arrivals,
    tls: Vec<Option<Arc<BrowserTls>>>,
    out: tokio::sync::mpsc::UnboundedSender<GroundTruth>,
    (wall, cpu0, lag): (Instant, f64, tokio::task::JoinHandle<Vec<f64>>),
) -> Result<GeneratorStats> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let times = arrivals.times(spec.duration_s, &mut rng);
    // Idle browsers by class, in the order the classes first appear.
    let mut classes: Vec<String> = Vec::new();
    let mut pools: Vec<Vec<Browser>> = Vec::new();
    for (k, b) in spec.browsers.iter().enumerate() {
        let i = classes.iter().position(|c| *c == b.class).unwrap_or_else(|| {
            classes.push(b.class.clone());
            pools.push(Vec::new());
            classes.len() - 1
        });
        pools[i].push(Browser {
            spec: b.clone(),
            run: spec.clone(),
            tls: tls[k].clone(),
            conns: [None, None],
            rng: StdRng::seed_from_u64(spec.seed.wrapping_mul(1_000_003).wrapping_add(k as u64)),
        });
    }
    let shares: Vec<usize> = pools.iter().map(Vec::len).collect();
    let total: usize = shares.iter().sum();
    if total == 0 {
        return Ok(GeneratorStats::finish(0, cpu0, wall, lag).await);
    }
    let idle = Arc::new(std::sync::Mutex::new(pools));
    let (mut lost, mut tasks) = (0u64, Vec::new());
    for t in times {
        tokio::time::sleep_until((wall + Duration::from_secs_f64(t)).into()).await;
        let mut pick = rng.random_range(0..total);
        let class = shares.iter().position(|&n| {
            if pick < n {
                true
            } else {
                pick -= n;
                false
            }
        });
        let class = class.expect("a class");
        let picked = {
            let mut pools = idle.lock().expect("pool");
            let pool = &mut pools[class];
            if pool.is_empty() {
                None
            } else {
                let i = rng.random_range(0..pool.len());
                Some(pool.swap_remove(i))
            }
        };
        let Some(mut br) = picked else {
            lost += 1;
            continue;
        };
        let (idle, out) = (idle.clone(), out.clone());
        tasks.push(tokio::spawn(async move {
            // A new visitor: nothing kept from the last one.
            br.conns = [None, None];
            let pv = br.pageview().await;
            let _ = out.send(pv);
            br.conns = [None, None];
            idle.lock().expect("pool")[class].push(br);
        }));
    }
    let started = tasks.len() as u64;
    let until = wall + Duration::from_secs_f64(spec.duration_s) + tail(spec.profile);
    let (_, cut) = join_until(tasks, until).await?;
    let mut stats = GeneratorStats::finish(started - cut, cpu0, wall, lag).await;
    stats.arrivals_lost = lost;
    stats.cut = cut;
    Ok(stats)
}

/// A 50 ms tick that records how late it fires, until `deadline`: the generator's scheduling lag.
pub fn lag_meter(deadline: Instant) -> tokio::task::JoinHandle<Vec<f64>> {
    tokio::spawn(async move {
        let mut lags = Vec::new();
        let tick = Duration::from_millis(50);
        let mut next = Instant::now() + tick;
        while Instant::now() < deadline {
            tokio::time::sleep_until(next.into()).await;
            lags.push(Instant::now().saturating_duration_since(next).as_secs_f64() * 1000.0);
            next += tick;
        }
        lags
    })
}

impl GeneratorStats {
    /// Close the books of a run that started at `wall` with `cpu0` seconds of CPU used.
    pub async fn finish(pageviews: u64, cpu0: f64, wall: Instant, lag: tokio::task::JoinHandle<Vec<f64>>) -> GeneratorStats {
        let mut lags = lag.await.unwrap_or_default();
        lags.sort_by(f64::total_cmp);
        let p99 = lags.get(((lags.len() as f64) * 0.99) as usize).copied().or(lags.last().copied()).unwrap_or(0.0);
        GeneratorStats {
            pageviews,
            cpu_s: cpu_seconds() - cpu0,
            wall_s: wall.elapsed().as_secs_f64(),
            lag_p99_ms: p99,
            lag_max_ms: lags.last().copied().unwrap_or(0.0),
            arrivals_lost: 0,
            cut: 0,
        }
    }
}

/// Put this process where a load generator runs: join a cgroup (v2) first, while /sys is
/// still the host's, then enter a network namespace. Call before any other thread exists:
/// threads created later inherit the namespace.
pub fn enter(netns: Option<&str>, cgroup: Option<&std::path::Path>) -> Result<()> {
    if let Some(cg) = cgroup {
        std::fs::write(cg.join("cgroup.procs"), "0").with_context(|| format!("joining {}", cg.display()))?;
    }
    if let Some(ns) = netns {
        lab_netns::enter(ns)?;
    }
    Ok(())
}

/// CPU time this process used so far (user + system), in seconds.
pub fn cpu_seconds() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Run a spec as a process of its own (see [`enter`]), writing ground truth to `out` as the
/// pageviews finish.
pub fn run_process(spec: RunSpec, netns: Option<&str>, cgroup: Option<&std::path::Path>, out: &std::path::Path) -> Result<GeneratorStats> {
    use std::io::Write;
    enter(netns, cgroup)?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let stats = rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let runner = tokio::spawn(run(spec, tx));
        while let Some(pv) = rx.recv().await {
            serde_json::to_writer(&mut w, &pv)?;
            w.write_all(b"\n")?;
            w.flush()?;
        }
        runner.await?
    })?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer that is not a success (an overloaded site's 503) fails the pageview and is not
    /// asked for again: a browser shows it. (Only a connection closed under a request is tried
    /// once more, on a new one.)
    #[test]
    fn a_503_is_an_answer_not_asked_again() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let server = listener.local_addr().unwrap();
            let asked = Arc::new(AtomicUsize::new(0));
            let counter = asked.clone();
            tokio::spawn(async move {
                while let Ok((mut s, _)) = listener.accept().await {
                    let counter = counter.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 4096];
                        if s.read(&mut buf).await.unwrap_or(0) > 0 {
                            counter.fetch_add(1, SeqCst);
                        }
                        let _ = s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
                    });
                }
            });
            let spec = RunSpec {
                server,
                browsers: vec![BrowserSpec { addr: "127.0.0.1".parse().unwrap(), class: "HIGH".into(), site: None, cookie: None }],
                think_mean_s: 1000.0,
                duration_s: 1.0,
                ramp_s: 0.0,
                seed: 1,
                profile: TcpProfile::Linux,
                pages: vec![("/home".into(), 1.0)],
                items: 10,
                tls: None,
                think_min_s: 0.0,
                arrivals: None,
            };
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            run(spec, tx).await.unwrap();
            let pv = rx.recv().await.expect("a pageview");
            assert!(pv.failed, "{pv:?}");
            assert_eq!(asked.load(SeqCst), 1, "asked once");
        });
    }

    /// The generator's end: tasks still running past the tail are cut and counted, the finished
    /// ones' results kept, and the wait ends at the tail, not when the hung task would.
    #[test]
    fn tasks_past_the_tail_are_cut_and_counted() {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let start = Instant::now();
            let tasks = vec![
                tokio::spawn(async { 1 }),
                tokio::spawn(async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    2
                }),
                tokio::spawn(async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    3
                }),
            ];
            let (done, cut) = join_until(tasks, start + Duration::from_millis(500)).await.unwrap();
            assert_eq!((done, cut), (vec![1, 3], 1));
            assert!(start.elapsed() < Duration::from_secs(30), "waited {:?}", start.elapsed());
        });
        assert_eq!(tail(TcpProfile::Xp), Duration::from_secs(26));
    }

    #[test]
    fn finds_the_images_once_each() {
        let html = r#"<img src="/img/logo.gif" alt=x><IMG SRC='/img/a.gif'><img alt="y" src=/img/b.gif><img src="/img/logo.gif"><a href="/x">"#;
        assert_eq!(image_refs(html), vec!["/img/logo.gif", "/img/a.gif", "/img/b.gif"]);
    }

    /// Open-loop arrivals: as many as each step's rate says (Poisson: within 4 standard
    /// deviations), none before the first step or past the end, in order.
    #[test]
    fn arrivals_follow_the_steps() {
        let a = Arrivals { steps: vec![(5.0, 10.0), (15.0, 100.0), (25.0, 0.0), (30.0, 20.0)] };
        assert_eq!(a.rate_at(0.0), (0.0, Some(5.0)));
        assert_eq!(a.rate_at(16.0), (100.0, Some(25.0)));
        assert_eq!(a.rate_at(31.0), (20.0, None));
        let mut rng = StdRng::seed_from_u64(7);
        let t = a.times(40.0, &mut rng);
        assert!(t.windows(2).all(|w| w[0] < w[1]));
        let count = |from: f64, to: f64| t.iter().filter(|&&x| x >= from && x < to).count() as f64;
        assert_eq!(count(0.0, 5.0), 0.0);
        assert_eq!(count(25.0, 30.0), 0.0);
        for (from, to, rate) in [(5.0, 15.0, 10.0), (15.0, 25.0, 100.0), (30.0, 40.0, 20.0)] {
            let want = rate * (to - from);
            assert!((count(from, to) - want).abs() <= 4.0 * want.sqrt(), "{from}-{to}: {} for {want}", count(from, to));
        }
        assert!(t.iter().all(|&x| x < 40.0));
    }
}
