//! The farm's front server: the one address and port browsers talk to.
//!
//! It behaves like the Apache of the RLM paper's testbed: at most `max_clients` connections are
//! served at once (the MaxClients limit: while that many are open it stops accepting, the
//! listen backlog fills, and the kernel drops further SYNs for real); connections are kept
//! alive between requests for `keepalive`. Images are passed to nginx (the static tier);
//! container pages are built by a pool of `workers` that each hold a PostgreSQL connection
//! (the dynamic tier), requests queueing for a free worker.
//!
//! With a TLS configuration it terminates HTTPS (rustls; [`sim_clients::tls`]): each connection's
//! handshake within the keep-alive time, then HTTP/2 when the client's ALPN chose `h2` (an idle
//! HTTP/2 connection is closed gracefully after the keep-alive time, as an HTTP/1.1 one is),
//! else HTTP/1.1.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, oneshot, Mutex, Semaphore};

use super::site::{render, ItemRow, PageType};

/// Capacity and wiring of the front server.
#[derive(Clone, Debug)]
pub struct FrontConfig {
    pub listen: SocketAddr,
    /// Connections served at once (Apache's MaxClients).
    pub max_clients: usize,
    /// The listen backlog (completed handshakes waiting to be accepted).
    pub backlog: i32,
    /// Database workers (page builders).
    pub workers: usize,
    /// How long an idle keep-alive connection is kept.
    pub keepalive: Duration,
    /// nginx, serving /img/.
    pub static_upstream: SocketAddr,
    /// libpq connection string of the bookstore.
    pub db: String,
    /// HTTPS: the server's TLS configuration.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Counters of the front server.
#[derive(Debug, Default)]
pub struct FrontStats {
    pub connections: AtomicU64,
    pub pages: AtomicU64,
    pub images: AtomicU64,
    pub errors: AtomicU64,
    /// The server's own time of each request, in seconds, as Apache's `%D` counts it: from the
    /// request's head being read to the last byte of the response handed to the kernel.
    pub page_times: std::sync::Mutex<Vec<f32>>,
    pub image_times: std::sync::Mutex<Vec<f32>>,
    /// Connections accepted, by the client's /16 ("10.4", "10.5").
    pub accepted_by_subnet: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Connections that ended in an error of the connection (a reset, rlm's ABORT IDLE or
    /// REJECT), by the client's /16: the server's own view of what was cut under it.
    pub reset_by_subnet: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

/// What the front server reports when it stops (`rlm-lab farm-front --stats FILE`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct FrontReport {
    pub connections: u64,
    pub pages: u64,
    pub images: u64,
    pub errors: u64,
    pub page_times_s: Vec<f32>,
    pub image_times_s: Vec<f32>,
    pub accepted_by_subnet: std::collections::BTreeMap<String, u64>,
    #[serde(default)]
    pub reset_by_subnet: std::collections::BTreeMap<String, u64>,
}

impl FrontStats {
    pub fn report(&self) -> FrontReport {
        FrontReport {
            connections: self.connections.load(Ordering::Relaxed),
            pages: self.pages.load(Ordering::Relaxed),
            images: self.images.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            page_times_s: self.page_times.lock().map(|v| v.clone()).unwrap_or_default(),
            image_times_s: self.image_times.lock().map(|v| v.clone()).unwrap_or_default(),
            accepted_by_subnet: self.accepted_by_subnet.lock().map(|m| m.clone()).unwrap_or_default(),
            reset_by_subnet: self.reset_by_subnet.lock().map(|m| m.clone()).unwrap_or_default(),
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Page,
    Image,
}

/// A response body that records the request's server time when hyper is done with it (its last
/// byte written to the socket, or the connection gone).
struct Timed {
    inner: Body,
    start: std::time::Instant,
    kind: Kind,
    stats: Arc<FrontStats>,
}

impl hyper::body::Body for Timed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        let t = self.start.elapsed().as_secs_f32();
        let v = match self.kind {
            Kind::Page => &self.stats.page_times,
            Kind::Image => &self.stats.image_times,
        };
        if let Ok(mut v) = v.lock() {
            v.push(t);
        }
    }
}

fn timed(sh: &Shared, start: std::time::Instant, kind: Kind, r: Response<Body>) -> Response<Body> {
    r.map(|b| Timed { inner: b, start, kind, stats: sh.stats.clone() }.boxed())
}

type Body = BoxBody<Bytes, hyper::Error>;

struct Job {
    page: PageType,
    params: HashMap<String, String>,
    reply: oneshot::Sender<Result<String, String>>,
}

struct Shared {
    jobs: mpsc::Sender<Job>,
    images: Client<HttpConnector, http_body_util::Empty<Bytes>>,
    upstream: SocketAddr,
    stats: Arc<FrontStats>,
}

fn full(s: impl Into<Bytes>) -> Body {
    Full::new(s.into()).map_err(|never| match never {}).boxed()
}

fn params(query: Option<&str>) -> HashMap<String, String> {
    query.unwrap_or("").split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// What nginx serves behind the front: the images (`/img/` and their small variants under
/// `/ims/`), and the open-loop experiments' files (`/files/`) when they come through the front.
fn is_static(path: &str) -> bool {
    path.starts_with("/img/") || path.starts_with("/ims/") || path.starts_with("/files/")
}

async fn handle(sh: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let start = std::time::Instant::now();
    let kind = if is_static(req.uri().path()) { Kind::Image } else { Kind::Page };
    let r = respond(&sh, req).await?;
    Ok(timed(&sh, start, kind, r))
}

async fn respond(sh: &Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    if is_static(&path) {
        sh.stats.images.fetch_add(1, Ordering::Relaxed);
        let uri = format!("http://{}{}", sh.upstream, path);
        let resp = match Request::get(uri).body(http_body_util::Empty::<Bytes>::new()) {
            Ok(r) => sh.images.request(r).await,
            Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
        };
        return Ok(match resp {
            Ok(r) => r.map(|b| b.boxed()),
            Err(_) => {
                sh.stats.errors.fetch_add(1, Ordering::Relaxed);
                status(StatusCode::BAD_GATEWAY)
            }
        });
    }
    let Some(page) = PageType::from_path(&path) else {
        return Ok(status(StatusCode::NOT_FOUND));
    };
    let (tx, rx) = oneshot::channel();
    let job = Job { page, params: params(req.uri().query()), reply: tx };
    if sh.jobs.send(job).await.is_err() {
        return Ok(status(StatusCode::SERVICE_UNAVAILABLE));
    }
    Ok(match rx.await {
        Ok(Ok(html)) => {
            sh.stats.pages.fetch_add(1, Ordering::Relaxed);
            Response::builder().header("content-type", "text/html; charset=utf-8").body(full(html)).expect("valid response")
        }
        _ => {
            sh.stats.errors.fetch_add(1, Ordering::Relaxed);
            status(StatusCode::INTERNAL_SERVER_ERROR)
        }
    })
}

fn status(s: StatusCode) -> Response<Body> {
    Response::builder().status(s).body(full(s.canonical_reason().unwrap_or(""))).expect("valid response")
}

const ITEM_COLS: &str = "i_id::int8, i_title, a_lname, i_cost::float8 from item join author on a_id = i_a_id";

fn rows(rs: Vec<tokio_postgres::Row>) -> Vec<ItemRow> {
    rs.iter().map(|r| ItemRow { id: r.get(0), title: r.get(1), author: r.get(2), cost: r.get(3) }).collect()
}

/// The query behind each page type (TPC-W's, simplified).
async fn items_for(
    db: &tokio_postgres::Client,
    page: PageType,
    p: &HashMap<String, String>,
    rng: &mut rand::rngs::StdRng,
    n_items: i32,
) -> Result<Vec<ItemRow>, tokio_postgres::Error> {
    let subject = p.get("subject").cloned().unwrap_or_else(|| "COMPUTERS".into());
    let item: i32 = p.get("i_id").and_then(|v| v.parse().ok()).unwrap_or_else(|| rng.random_range(1..=n_items));
    Ok(match page {
        PageType::NewProducts => {
            rows(db.query(&format!("select {ITEM_COLS} where i_subject = $1 order by i_pub_date desc, i_title limit 50"), &[&subject]).await?)
        }
        PageType::BestSellers => rows(
            db.query(
                &format!(
                    "select {ITEM_COLS} join (select ol_i_id, sum(ol_qty) q from order_line
                       where ol_o_id > (select max(o_id) - 3333 from orders) group by ol_i_id) b on b.ol_i_id = i_id
                     where i_subject = $1 order by b.q desc, i_title limit 50"
                ),
                &[&subject],
            )
            .await?,
        ),
        PageType::ProductDetail => {
            let mut v = rows(db.query(&format!("select {ITEM_COLS} where i_id = $1"), &[&item]).await?);
            v.extend(rows(
                db.query(&format!("select {ITEM_COLS} where i_id in (select unnest(i_related) from item where i_id = $1)"), &[&item]).await?,
            ));
            v
        }
        PageType::SearchResults => {
            let term = p.get("q").cloned().unwrap_or_else(|| format!("{:x}", rng.random_range(0..256)));
            rows(db.query(&format!("select {ITEM_COLS} where i_title like '%' || $1 || '%' order by i_title limit 50"), &[&term]).await?)
        }
        _ => {
            let ids: Vec<i32> = (0..5).map(|_| rng.random_range(1..=n_items)).collect();
            rows(db.query(&format!("select {ITEM_COLS} where i_id = any($1)"), &[&ids]).await?)
        }
    })
}

async fn worker(id: usize, db: String, jobs: Arc<Mutex<mpsc::Receiver<Job>>>) -> Result<()> {
    let (client, conn) = tokio_postgres::connect(&db, tokio_postgres::NoTls).await.context("connecting to the bookstore")?;
    tokio::spawn(conn);
    let n_items: i64 = client.query_one("select count(*) from item", &[]).await?.get(0);
    let n_items = n_items.max(1) as i32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(id as u64 + 1);
    loop {
        let job = { jobs.lock().await.recv().await };
        let Some(job) = job else { return Ok(()) };
        let result = items_for(&client, job.page, &job.params, &mut rng, n_items).await.map(|items| render(job.page, &items)).map_err(|e| {
            eprintln!("rlm-farm: {:?} failed: {e:?}", job.page);
            e.to_string()
        });
        let _ = job.reply.send(result);
    }
}

/// One HTTP/1.1 connection, kept alive for `keepalive` between requests.
/// One HTTP/1.1 connection, kept alive for `keepalive` between requests.
async fn serve_http1<I>(io: I, sh: Arc<Shared>, keepalive: Duration)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| handle(sh.clone(), req));
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(keepalive)
        .keep_alive(true)
        .serve_connection(io, svc)
        .await;
}

/// One more connection of `subnet` in a count by client subnet.
fn count_by_subnet(counts: &std::sync::Mutex<std::collections::BTreeMap<String, u64>>, subnet: String) {
    if let Ok(mut m) = counts.lock() {
        *m.entry(subnet).or_insert(0) += 1;
    }
}

/// A connection's stream that notes whether a read found it reset (hyper closes an idle
/// connection on a reset without a word).
struct ResetWatch<S> {
    inner: S,
    reset: Arc<std::sync::atomic::AtomicBool>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for ResetWatch<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Err(e)) = &r {
            if e.kind() == std::io::ErrorKind::ConnectionReset {
                self.reset.store(true, Ordering::Relaxed);
            }
        }
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for ResetWatch<S> {
    fn poll_write(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One HTTP/2 connection, closed gracefully once no request came for `keepalive`.
async fn serve_h2<I>(io: I, sh: Arc<Shared>, keepalive: Duration)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let started = std::time::Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let seen = last.clone();
    let svc = hyper::service::service_fn(move |req| {
        seen.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        handle(sh.clone(), req)
    });
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new()).timer(TokioTimer::new()).serve_connection(io, svc);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(keepalive / 4);
    let mut closing = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tick.tick(), if !closing => {
                let idle = started.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                if idle >= keepalive {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// Serve until `stop` resolves.
pub async fn serve(cfg: FrontConfig, stats: Arc<FrontStats>, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    let (tx, rx) = mpsc::channel::<Job>(cfg.max_clients.max(1) * 2);
    let rx = Arc::new(Mutex::new(rx));
    let mut workers = Vec::new();
    for i in 0..cfg.workers.max(1) {
        workers.push(tokio::spawn(worker(i, cfg.db.clone(), rx.clone())));
    }
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let images = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).pool_max_idle_per_host(cfg.max_clients).build(http);
    let shared = Arc::new(Shared { jobs: tx, images, upstream: cfg.static_upstream, stats: stats.clone() });

    let sock = socket2::Socket::new(socket2::Domain::for_address(cfg.listen), socket2::Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&cfg.listen.into()).with_context(|| format!("binding {}", cfg.listen))?;
    sock.listen(cfg.backlog)?;
    let listener = tokio::net::TcpListener::from_std(sock.into())?;
    let slots = Arc::new(Semaphore::new(cfg.max_clients.max(1)));
    tokio::pin!(stop);
    loop {
        // MaxClients: no free slot, no accept; the backlog and then the SYN queue take the rest.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("semaphore open"),
            _ = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            _ = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        stats.connections.fetch_add(1, Ordering::Relaxed);
        let subnet = match peer.ip() {
            std::net::IpAddr::V4(a) => format!("{}.{}", a.octets()[0], a.octets()[1]),
            std::net::IpAddr::V6(_) => "v6".to_string(),
        };
        count_by_subnet(&stats.accepted_by_subnet, subnet.clone());
        let stats = stats.clone();
        let sh = shared.clone();
        let keepalive = cfg.keepalive;
        let tls = cfg.tls.clone().map(tokio_rustls::TlsAcceptor::from);
        let reset = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stream = ResetWatch { inner: stream, reset: reset.clone() };
        tokio::spawn(async move {
            match tls {
                None => serve_http1(TokioIo::new(stream), sh, keepalive).await,
                Some(acceptor) => {
                    let Ok(Ok(s)) = tokio::time::timeout(keepalive, acceptor.accept(stream)).await else { return };
                    if s.get_ref().1.alpn_protocol() == Some(b"h2") {
                        serve_h2(TokioIo::new(s), sh, keepalive).await
                    } else {
                        serve_http1(TokioIo::new(s), sh, keepalive).await
                    }
                }
            }
            if reset.load(Ordering::Relaxed) {
                count_by_subnet(&stats.reset_by_subnet, subnet);
            }
            drop(permit);
        });
    }
    for w in workers {
        w.abort();
    }
    Ok(())
}
