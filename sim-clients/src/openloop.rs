//! The open-loop generator of the SRPT experiments (000, 001, 002): requests arrive as a
//! Poisson process at a target load ρ of a shaped link, one connection each, for files whose
//! sizes follow 001 Table 1. The load may follow a schedule: constant, or the alternating and
//! intermittent transient overloads of 000 Table I.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use crate::browser::BrowserTls;
use crate::dist::EmpiricalSizes;

/// How the offered load changes over time.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Schedule {
    Constant {
        rho: f64,
    },
    /// `low_s` seconds at `low`, then `high_s` seconds at `high`, repeated (000 Table I: both
    /// alternating and intermittent overloads have this form).
    Periodic {
        low_s: f64,
        high_s: f64,
        low: f64,
        high: f64,
    },
}

impl Schedule {
    /// 000 Table I's workloads W1 to W10.
    pub fn table_i(n: u32) -> Option<Schedule> {
        let (low_s, high_s, low, high) = match n {
            1 => (25.0, 25.0, 0.2, 1.2),
            2 => (10.0, 10.0, 0.2, 1.2),
            3 => (50.0, 50.0, 0.2, 1.6),
            4 => (25.0, 25.0, 0.4, 1.4),
            5 => (10.0, 10.0, 0.4, 1.4),
            6 => (40.0, 40.0, 0.1, 1.7),
            7 => (63.0, 6.0, 0.4, 5.0),
            8 => (63.0, 10.0, 0.45, 3.0),
            9 => (20.0, 3.0, 0.735, 2.0),
            10 => (13.3, 2.0, 0.735, 2.0),
            _ => return None,
        };
        Some(Schedule::Periodic { low_s, high_s, low, high })
    }

    /// Load at `t` seconds into the run.
    pub fn rho_at(&self, t: f64) -> f64 {
        match *self {
            Schedule::Constant { rho } => rho,
            Schedule::Periodic { low_s, high_s, low, high } => {
                if (t % (low_s + high_s)) < low_s {
                    low
                } else {
                    high
                }
            }
        }
    }

    /// Mean load over whole periods.
    pub fn mean_rho(&self) -> f64 {
        match *self {
            Schedule::Constant { rho } => rho,
            Schedule::Periodic { low_s, high_s, low, high } => (low * low_s + high * high_s) / (low_s + high_s),
        }
    }
}

/// The files the server holds: `count` files whose sizes are the quantiles of the size model,
/// so that a file picked uniformly at random has a size drawn from it.
pub fn file_sizes(model: &EmpiricalSizes, count: usize, seed: u64) -> Vec<u64> {
    // Quantiles estimated from a large sample (the model has no closed-form inverse overall).
    let mut rng = StdRng::seed_from_u64(seed);
    let n = count * 200;
    let mut v: Vec<u64> = (0..n).map(|_| model.sample(&mut rng)).collect();
    v.sort_unstable();
    (0..count).map(|i| v[(i * 200 + 100).min(n - 1)]).collect()
}

/// An open-loop run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpenLoopSpec {
    pub server: SocketAddr,
    pub clients: Vec<IpAddr>,
    /// Sizes of the files `/files/{i}` on the server.
    pub files: Vec<u64>,
    /// The shaped link's rate (bits per second) that ρ refers to.
    pub link_bps: f64,
    pub schedule: Schedule,
    pub duration_s: f64,
    /// A request not finished after this long is abandoned (and logged as such).
    pub timeout_s: f64,
    /// Most requests in flight; arrivals beyond it are logged as not sent (the generator's own
    /// limit, reported so a run can be flagged).
    pub max_in_flight: usize,
    pub seed: u64,
    /// HTTPS instead of HTTP: each request on a connection of its own with a full TLS
    /// handshake, HTTP/1.1 by ALPN (`h2` is not spoken here).
    #[serde(default)]
    pub tls: Option<crate::browser::TlsSpec>,
}

/// One request, as the client saw it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RequestRecord {
    pub client: String,
    pub file: usize,
    pub size: u64,
    /// Connect called (Unix seconds).
    pub start_ts: f64,
    pub rt_s: f64,
    /// Bytes of body received.
    pub received: u64,
    pub ok: bool,
    /// connect_failed, tls_failed, timeout, http_error, short_body, not_sent
    pub error: Option<String>,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A run's TLS, as the browsers have theirs: the connector (made once) and the site's name (SNI
/// and Host); HTTP/1.1 only.
fn openloop_tls(t: &crate::browser::TlsSpec) -> Result<BrowserTls> {
    anyhow::ensure!(!t.h2, "the open-loop generator speaks HTTP/1.1 only (one request per connection)");
    BrowserTls::new(t, &tokio_rustls::TlsConnector::from(crate::tls::client_config(&t.ca, false)?), None)
}

/// GET `/files/{file}` on a connection of its own from `src`, over TLS when `tls` is given.
async fn one(server: SocketAddr, src: IpAddr, file: usize, tls: Option<&BrowserTls>) -> Result<u64, &'static str> {
    let sock = (|| -> std::io::Result<tokio::net::TcpSocket> {
        let s = socket2::Socket::new(socket2::Domain::for_address(server), socket2::Type::STREAM, None)?;
        s.set_nodelay(true)?;
        s.bind(&SocketAddr::new(src, 0).into())?;
        s.set_nonblocking(true)?;
        Ok(tokio::net::TcpSocket::from_std_stream(s.into()))
    })()
    .map_err(|_| "connect_failed")?;
    let stream = sock.connect(server).await.map_err(|_| "connect_failed")?;
    match tls {
        Some(t) => get(t.connector.connect(t.name.clone(), stream).await.map_err(|_| "tls_failed")?, &t.site, file).await,
        None => get(stream, &server.to_string(), file).await,
    }
}

/// The request of [`one`] on its connection `io`; the body's length when it has all arrived.
async fn get<IO>(io: IO, host: &str, file: usize) -> Result<u64, &'static str>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|_| "connect_failed")?;
    tokio::spawn(conn);
    let req = hyper::Request::get(format!("/files/{file}")).header("host", host).body(Empty::<Bytes>::new()).map_err(|_| "http_error")?;
    let resp = sender.send_request(req).await.map_err(|_| "http_error")?;
    if !resp.status().is_success() {
        return Err("http_error");
    }
    let body = resp.into_body().collect().await.map_err(|_| "http_error")?.to_bytes();
    Ok(body.len() as u64)
}

/// Bytes a request for a file of `size` puts on the server's uplink: the body and a response
/// head of about 240 bytes in 1448-byte segments, 66 bytes of Ethernet, IP and TCP headers per
/// segment, and the SYN/ACK, FIN and bare ACKs of a one-request connection. Over TLS
/// (`tls`), the server's handshake flight and session tickets ([`TLS_SERVER_HANDSHAKE_BYTES`])
/// and each record's 22 bytes of header, content type and tag per 16 KB of content.
pub fn wire_bytes(size: u64, tls: bool) -> f64 {
    let mut payload = size as f64 + 240.0;
    if tls {
        payload += (payload / 16384.0).ceil() * 22.0 + TLS_SERVER_HANDSHAKE_BYTES;
    }
    payload + (payload / 1448.0).ceil() * 66.0 + 4.0 * 66.0
}

/// What the lab's farm sends in a TLS 1.3 handshake before the response: ServerHello,
/// ChangeCipherSpec, the encrypted EncryptedExtensions, Certificate (one ECDSA P-256
/// certificate of [`crate::tls::make_certs`]), CertificateVerify and Finished, and rustls's
/// NewSessionTickets after the client's Finished (measured by `tls::tests`).
pub const TLS_SERVER_HANDSHAKE_BYTES: f64 = 850.0;

/// Run the arrivals; every request's record goes to `out`. The load ρ is the share of the
/// link's rate the requests' bytes on the wire take ([`wire_bytes`]).
pub async fn run(spec: OpenLoopSpec, out: tokio::sync::mpsc::UnboundedSender<RequestRecord>) -> Result<u64> {
    let spec = Arc::new(spec);
    let tls = spec.tls.as_ref().map(openloop_tls).transpose()?.map(Arc::new);
    let mean_size = spec.files.iter().map(|s| wire_bytes(*s, tls.is_some())).sum::<f64>() / spec.files.len().max(1) as f64;
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let start = Instant::now();
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut t = 0.0f64;
    let mut sent = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        // Next arrival at the current rate λ = ρ · link / mean size (a piecewise-constant rate:
        // exact enough with periods of seconds and interarrivals of milliseconds).
        let lambda = spec.schedule.rho_at(t) * spec.link_bps / 8.0 / mean_size;
        t += Exp::new(lambda.max(1e-9)).expect("positive rate").sample(&mut rng);
        if t >= spec.duration_s {
            break;
        }
        tokio::time::sleep_until((start + Duration::from_secs_f64(t)).into()).await;
        let file = rng.random_range(0..spec.files.len());
        let src = spec.clients[rng.random_range(0..spec.clients.len())];
        let size = spec.files[file];
        if in_flight.load(std::sync::atomic::Ordering::Relaxed) >= spec.max_in_flight {
            let _ = out.send(RequestRecord {
                client: src.to_string(),
                file,
                size,
                start_ts: unix_now(),
                rt_s: 0.0,
                received: 0,
                ok: false,
                error: Some("not_sent".into()),
            });
            continue;
        }
        sent += 1;
        in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (spec, out, in_flight, tls) = (spec.clone(), out.clone(), in_flight.clone(), tls.clone());
        tasks.spawn(async move {
            let start_ts = unix_now();
            let t0 = Instant::now();
            let r = tokio::time::timeout(Duration::from_secs_f64(spec.timeout_s), one(spec.server, src, file, tls.as_deref())).await;
            let rt_s = t0.elapsed().as_secs_f64();
            let (ok, received, error) = match r {
                Ok(Ok(n)) => (n == size, n, if n == size { None } else { Some("short_body".to_string()) }),
                Ok(Err(e)) => (false, 0, Some(e.to_string())),
                Err(_) => (false, 0, Some("timeout".to_string())),
            };
            in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            let _ = out.send(RequestRecord { client: src.to_string(), file, size, start_ts, rt_s, received, ok, error });
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    Ok(sent)
}

/// Run as a process of its own in a client namespace, one record per line to `out`.
pub fn run_process(spec: OpenLoopSpec, netns: Option<&str>, out: &std::path::Path) -> Result<crate::browser::GeneratorStats> {
    use std::io::Write;
    crate::browser::enter(netns, None)?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let wall = Instant::now();
        let cpu0 = crate::browser::cpu_seconds();
        let lag = crate::browser::lag_meter(wall + Duration::from_secs_f64(spec.duration_s));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let runner = tokio::spawn(run(spec, tx));
        while let Some(r) = rx.recv().await {
            serde_json::to_writer(&mut w, &r)?;
            w.write_all(b"\n")?;
        }
        let sent = runner.await??;
        w.flush()?;
        Ok(crate::browser::GeneratorStats::finish(sent, cpu0, wall, lag).await)
    })
}

/// Statistics of a run's requests (the `requests` block of result.json).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RequestStats {
    pub count: usize,
    pub completed: usize,
    pub mean_s: f64,
    /// Mean of response time over the time the file alone would take on the link.
    pub mean_slowdown: f64,
    /// Mean response time of the largest 1% of requests (by size).
    pub largest1pct_mean_s: f64,
    pub throughput_bps: f64,
    /// Mean response time by file size, in bins [lo, hi) with hi = 1.2 lo from 64 bytes (002
    /// section 3, Figure 9 left); bins with no completed request are left out.
    #[serde(default)]
    pub by_size: Vec<SizeBin>,
    /// Response time over time (000 Figure 8): the requests started in each second since the
    /// first, with their mean over those that completed.
    #[serde(default)]
    pub by_second: Vec<SecondBin>,
}

/// One second of [`RequestStats::by_second`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SecondBin {
    pub t_s: u32,
    pub started: usize,
    pub completed: usize,
    pub mean_s: f64,
}

/// Requests by the second they started in, from the first one's start.
fn by_second(recs: &[RequestRecord]) -> Vec<SecondBin> {
    let Some(t0) = recs.iter().map(|r| r.start_ts).min_by(f64::total_cmp) else { return Vec::new() };
    let mut bins: Vec<SecondBin> = Vec::new();
    for r in recs {
        let t = ((r.start_ts - t0).max(0.0)) as usize;
        if bins.len() <= t {
            bins.extend((bins.len()..=t).map(|t_s| SecondBin { t_s: t_s as u32, ..SecondBin::default() }));
        }
        let b = &mut bins[t];
        b.started += 1;
        if r.ok {
            b.completed += 1;
            b.mean_s += r.rt_s;
        }
    }
    for b in &mut bins {
        b.mean_s /= b.completed.max(1) as f64;
    }
    bins
}

/// One size bin of [`RequestStats::by_size`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SizeBin {
    pub lo: u64,
    pub hi: u64,
    pub count: usize,
    pub mean_s: f64,
}

/// Bins [x, 1.2x) from 64 bytes: the bin index of a size (sizes under 64 in bin 0).
fn size_bin(size: u64) -> usize {
    if size < 64 {
        return 0;
    }
    ((size as f64 / 64.0).ln() / 1.2f64.ln()).floor() as usize
}

fn bin_bounds(i: usize) -> (u64, u64) {
    let lo = (64.0 * 1.2f64.powi(i as i32)).ceil() as u64;
    let hi = (64.0 * 1.2f64.powi(i as i32 + 1)).ceil() as u64;
    (if i == 0 { 0 } else { lo }, hi)
}

impl RequestStats {
    /// `duration_s` is used when the records carry no usable times.
    pub fn of(recs: &[RequestRecord], link_bps: f64, duration_s: f64) -> RequestStats {
        let done: Vec<&RequestRecord> = recs.iter().filter(|r| r.ok).collect();
        let n = done.len();
        if n == 0 {
            return RequestStats { count: recs.len(), by_second: by_second(recs), ..RequestStats::default() };
        }
        let mean = done.iter().map(|r| r.rt_s).sum::<f64>() / n as f64;
        let slow = done.iter().map(|r| r.rt_s / ((r.size as f64 * 8.0 / link_bps).max(1e-6))).sum::<f64>() / n as f64;
        let mut by_size = done.clone();
        by_size.sort_by_key(|r| std::cmp::Reverse(r.size));
        let top = (n / 100).max(1);
        let largest = by_size[..top].iter().map(|r| r.rt_s).sum::<f64>() / top as f64;
        let bytes: u64 = done.iter().map(|r| r.received).sum();
        // Over the span the requests actually took (the last ones finish after the arrivals stop).
        let first = done.iter().map(|r| r.start_ts).fold(f64::INFINITY, f64::min);
        let last = done.iter().map(|r| r.start_ts + r.rt_s).fold(f64::NEG_INFINITY, f64::max);
        let span = if last > first { last - first } else { duration_s };
        let mut bins: std::collections::BTreeMap<usize, (usize, f64)> = std::collections::BTreeMap::new();
        for r in &done {
            let b = bins.entry(size_bin(r.size)).or_default();
            b.0 += 1;
            b.1 += r.rt_s;
        }
        let by_size = bins
            .into_iter()
            .map(|(i, (count, sum))| {
                let (lo, hi) = bin_bounds(i);
                SizeBin { lo, hi, count, mean_s: sum / count as f64 }
            })
            .collect();
        RequestStats {
            count: recs.len(),
            completed: n,
            mean_s: mean,
            mean_slowdown: slow,
            largest1pct_mean_s: largest,
            throughput_bps: bytes as f64 * 8.0 / span.max(1e-9),
            by_size,
            by_second: by_second(recs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_i_schedules() {
        let w1 = Schedule::table_i(1).unwrap();
        assert!((w1.mean_rho() - 0.7).abs() < 1e-9);
        assert_eq!(w1.rho_at(10.0), 0.2);
        assert_eq!(w1.rho_at(30.0), 1.2);
        assert_eq!(w1.rho_at(55.0), 0.2);
        for (n, mean) in [(3, 0.9), (4, 0.9), (6, 0.9), (7, 0.8), (8, 0.8), (9, 0.9), (10, 0.9)] {
            assert!((Schedule::table_i(n).unwrap().mean_rho() - mean).abs() < 0.03, "W{n}");
        }
        assert!(Schedule::table_i(11).is_none());
    }

    #[test]
    fn file_set_follows_the_model() {
        let m = EmpiricalSizes::with_max(4e6);
        let files = file_sizes(&m, 2000, 1);
        let below = files.iter().filter(|s| (**s as f64) < m.cut).count() as f64 / files.len() as f64;
        assert!((below - m.body_mass()).abs() < 0.01, "{below}");
        assert!(files.windows(2).all(|w| w[0] <= w[1]));
        assert!(*files.last().unwrap() <= 4_000_000);
    }

    #[test]
    fn request_stats() {
        let r = |size, rt, ok| RequestRecord {
            client: "c".into(),
            file: 0,
            size,
            start_ts: 10.0 - rt,
            rt_s: rt,
            received: if ok { size } else { 0 },
            ok,
            error: None,
        };
        let recs: Vec<RequestRecord> = (1..=200).map(|i| r(i * 1000, i as f64 / 100.0, true)).chain([r(5, 9.0, false)]).collect();
        let s = RequestStats::of(&recs, 8_000_000.0, 10.0);
        assert_eq!((s.count, s.completed), (201, 200));
        assert!((s.mean_s - 1.005).abs() < 1e-9);
        // The two largest (1%): 200 KB and 199 KB at 2.00 and 1.99 s.
        assert!((s.largest1pct_mean_s - 1.995).abs() < 1e-9);
        // Each request: rt = i/100 s for i KB at 1 MB/s = i/1000 s: slowdown 10.
        assert!((s.mean_slowdown - 10.0).abs() < 1e-6);
        // Sizes 1 KB .. 200 KB in bins [x, 1.2x): each size in the bin that holds it.
        assert!(s.by_size.iter().all(|b| b.lo < b.hi && b.count > 0));
        assert_eq!(s.by_size.iter().map(|b| b.count).sum::<usize>(), 200);
        let b = s.by_size.iter().find(|b| b.lo <= 100_000 && 100_000 < b.hi).unwrap();
        assert!((b.hi as f64 / b.lo as f64 - 1.2).abs() < 0.01, "{b:?}");
        // All end at t = 10 s; the first started at 10 − 2 s.
        assert!((s.throughput_bps - (200.0 * 201.0 / 2.0 * 1000.0 * 8.0 / 2.0)).abs() < 1e-3);
        assert!((wire_bytes(1208, false) - (1448.0 + 66.0 + 264.0)).abs() < 1e-9);
        // By second from the first start (the failed one at 1 s): nothing in seconds 1-6,
        // i = 101..200 started in second 7, i = 1..100 in second 8.
        assert_eq!(s.by_second.len(), 9);
        assert_eq!((s.by_second[0].started, s.by_second[0].completed, s.by_second[0].mean_s), (1, 0, 0.0));
        assert!(s.by_second[1..7].iter().all(|b| b.started == 0));
        assert_eq!((s.by_second[7].completed, s.by_second[8].completed), (100, 100));
        assert!((s.by_second[7].mean_s - 1.505).abs() < 1e-9 && (s.by_second[8].mean_s - 0.505).abs() < 1e-9);
    }
}
