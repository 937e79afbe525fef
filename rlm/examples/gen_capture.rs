//! Synthetic captures of web traffic, for `benches/analyze_vs_ndpi.sh`.
//!
//! ```sh
//! cargo run -p rlm --release --example gen_capture -- --profile html --packets 1000000 --out html-1m.pcap
//! cargo run -p rlm --release --example gen_capture -- --profile image --packets 10000000 --out - | rlm analyze -
//! ```
//!
//! What the server side of a busy site sees, seen next to the servers: pageviews start as a
//! Poisson process, each from one of many clients (each with its own round-trip time and
//! bandwidth). A browser fetches the page on one connection, then its embedded objects over up to
//! six keep-alive connections, each request going out a round trip after the previous response's
//! last byte; the client ACKs every other segment a round trip later; the server closes idle
//! connections after a keep-alive timeout.
//!
//! - `html`: pages of 20-60 KB of HTML with 5-15 embeds (stylesheets, scripts, small images).
//! - `image`: pages of 2-6 KB of HTML with 20-60 images of 5-50 KB.
//! - `dense`: pages of 80-120 KB of tag-dense HTML (a product table: a tag every 20 bytes or
//!   so, with attributes) with 10-20 embeds, as `html`'s.
//!
//! Frames are real Ethernet/IPv4/TCP (rlm_core::testkit); the output is a microsecond pcap, cut
//! after exactly `--packets` frames. The same arguments give the same bytes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{BufWriter, Write};

use rlm_core::testkit::{Rng, TcpConv};

#[derive(Clone, Copy, PartialEq)]
enum Profile {
    Html,
    Image,
    Dense,
}

struct Args {
    profile: Profile,
    packets: u64,
    out: String,
    seed: u64,
    clients: u32,
    /// Pageviews per second.
    rate: f64,
}

fn usage() -> ! {
    eprintln!("usage: gen_capture --profile html|image|dense --packets N [--out FILE|-] [--seed S] [--clients C] [--rate PAGEVIEWS_PER_S]");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut a = Args { profile: Profile::Html, packets: 1_000_000, out: "-".into(), seed: 1, clients: 5_000, rate: 0.0 };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| usage());
        match k.as_str() {
            "--profile" => {
                a.profile = match v().as_str() {
                    "html" => Profile::Html,
                    "image" => Profile::Image,
                    "dense" => Profile::Dense,
                    _ => usage(),
                }
            }
            "--packets" => a.packets = v().parse().unwrap_or_else(|_| usage()),
            "--out" => a.out = v(),
            "--seed" => a.seed = v().parse().unwrap_or_else(|_| usage()),
            "--clients" => a.clients = v().parse().unwrap_or_else(|_| usage()),
            "--rate" => a.rate = v().parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    if a.rate <= 0.0 {
        // About 10k packets/s (~60-80 Mbit/s) either way.
        a.rate = match a.profile {
            Profile::Html => 70.0,
            Profile::Image => 8.0,
            Profile::Dense => 35.0,
        };
    }
    a
}

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// Uniform in [lo, hi].
fn between(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi - lo + 1)
}

/// Exponential with the given mean (nanoseconds).
fn exp_ns(rng: &mut Rng, mean_ns: f64) -> u64 {
    (-(1.0 - rng.next_f64()).ln() * mean_ns) as u64
}

struct Client {
    ip: [u8; 4],
    rtt: u64,
    /// Nanoseconds per full segment at the client's bandwidth.
    seg_ns: u64,
    next_port: u16,
}

impl Client {
    fn port(&mut self) -> u16 {
        let p = self.next_port;
        self.next_port = if p >= 60_999 { 32_768 } else { p + 1 };
        p
    }
}

/// One object of a page.
struct Object {
    uri: String,
    content_type: &'static str,
    size: usize,
}

/// The frames of one pageview, with their times.
struct Frames(Vec<(u64, Vec<u8>)>);

impl Frames {
    fn push(&mut self, t: u64, f: Vec<u8>) {
        self.0.push((t, f));
    }
}

/// A connection of the browser, with the time its client side is next free.
struct Conn {
    tcp: TcpConv,
    /// When the server has sent its last byte so far.
    last: u64,
}

/// Open a connection at `t` (SYN seen at t): returns it and when the client can send on it.
fn connect(frames: &mut Frames, client: &mut Client, server: &str, t: u64) -> (Conn, u64) {
    let ip = client.ip;
    let mut tcp = TcpConv::new(&format!("{}.{}.{}.{}:{}", ip[0], ip[1], ip[2], ip[3], client.port()), server);
    frames.push(t, tcp.syn());
    frames.push(t + 50 * US, tcp.synack());
    let established = t + client.rtt;
    frames.push(established, tcp.ack());
    (Conn { tcp, last: established }, established)
}

/// A request arriving at `t` and its response after `think`; returns when the last byte left.
fn exchange(frames: &mut Frames, conn: &mut Conn, client: &Client, t: u64, request: &[u8], response: &[u8], think: u64) -> u64 {
    frames.push(t, conn.tcp.client_data(request));
    let mut ts = t + think;
    let first_seq = conn.tcp.sseq;
    let segs = conn.tcp.server_data(response);
    let end_seq = conn.tcp.sseq;
    let n = segs.len();
    for (i, seg) in segs.into_iter().enumerate() {
        frames.push(ts, seg);
        // Delayed ACKs: every other segment, and the last, a round trip later, acknowledging
        // what had arrived by then.
        if i % 2 == 1 || i + 1 == n {
            conn.tcp.sseq = first_seq.wrapping_add(((i + 1) * conn.tcp.mss).min(response.len()) as u32);
            frames.push(ts + client.rtt, conn.tcp.client_ack());
            conn.tcp.sseq = end_seq;
        }
        if i + 1 < n {
            ts += client.seg_ns;
        }
    }
    conn.last = ts;
    ts
}

/// Bodies for each kind of object: text for stylesheets and scripts (no references in them, so a
/// pageview expects only what its HTML lists), bytes that look compressed for images.
struct Bodies {
    css: Vec<u8>,
    js: Vec<u8>,
    image: Vec<u8>,
}

impl Bodies {
    fn new(rng: &mut Rng) -> Bodies {
        let mut css = String::new();
        let mut js = String::new();
        let mut i = 0;
        while css.len() < 50_000 || js.len() < 50_000 {
            css.push_str(&format!(
                ".item-{i} {{ color: #{:06x}; margin: 0 {}px; padding: 4px 8px; font-family: Helvetica, Arial, sans-serif; border-bottom: 1px solid #eee; }}\n",
                rng.below(0xffffff),
                rng.below(16)
            ));
            js.push_str(&format!(
                "function render{i}(items, el) {{ var out = []; for (var k = 0; k < items.length; k++) {{ out.push('<li>' + items[k].name + '</li>'); }} el.innerHTML = out.join(''); return {}; }}\n",
                rng.below(1000)
            ));
            i += 1;
        }
        Bodies { css: css.into_bytes(), js: js.into_bytes(), image: (0..50_000).map(|_| rng.next_u64() as u8).collect() }
    }

    fn of(&self, o: &Object) -> &[u8] {
        match o.content_type {
            "text/css" => &self.css,
            "application/javascript" => &self.js,
            _ => &self.image,
        }
    }
}

fn response(obj: &Object, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nDate: Sun, 22 Nov 2026 10:00:00 GMT\r\nServer: Apache/2.4.62\r\nContent-Type: {}\r\nContent-Length: {}\r\nKeep-Alive: timeout=5, max=100\r\nConnection: Keep-Alive\r\n\r\n",
        obj.content_type, obj.size
    )
    .into_bytes();
    r.extend_from_slice(&body[..obj.size]);
    r
}

fn request(host: &str, uri: &str, referer: Option<&str>, accept: &str) -> Vec<u8> {
    let mut r = format!(
        "GET {uri} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\nAccept: {accept}\r\nAccept-Language: en-US,en;q=0.5\r\nConnection: keep-alive\r\n"
    );
    if let Some(r2) = referer {
        r.push_str(&format!("Referer: http://{host}{r2}\r\n"));
    }
    r.push_str("\r\n");
    r.into_bytes()
}

/// The page and its objects.
fn page(rng: &mut Rng, profile: Profile, id: u64) -> (Object, Vec<u8>, Vec<Object>) {
    let mut objs = Vec::new();
    let (html_size, n) = match profile {
        Profile::Html => (between(rng, 20_000, 60_000) as usize, between(rng, 5, 15)),
        Profile::Image => (between(rng, 2_000, 6_000) as usize, between(rng, 20, 60)),
        Profile::Dense => (between(rng, 80_000, 120_000) as usize, between(rng, 10, 20)),
    };
    for k in 0..n {
        let o = match (profile, k % 4) {
            (Profile::Html | Profile::Dense, 0) => {
                Object { uri: format!("/static/site{}.css", k), content_type: "text/css", size: between(rng, 2_000, 15_000) as usize }
            }
            (Profile::Html | Profile::Dense, 1) => {
                Object { uri: format!("/static/app{}.js", k), content_type: "application/javascript", size: between(rng, 2_000, 15_000) as usize }
            }
            (Profile::Html | Profile::Dense, _) => {
                Object { uri: format!("/img/p{id}/i{k}.png"), content_type: "image/png", size: between(rng, 1_000, 5_000) as usize }
            }
            (Profile::Image, _) => {
                Object { uri: format!("/photos/p{id}/{k}.jpg"), content_type: "image/jpeg", size: between(rng, 5_000, 50_000) as usize }
            }
        };
        objs.push(o);
    }
    let mut html = String::with_capacity(html_size + 1024);
    html.push_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Catalogue page</title>\n");
    for o in &objs {
        match o.content_type {
            "text/css" => html.push_str(&format!("<link rel=\"stylesheet\" href=\"{}\">\n", o.uri)),
            "application/javascript" => html.push_str(&format!("<script src=\"{}\"></script>\n", o.uri)),
            _ => {}
        }
    }
    html.push_str("</head><body><div id=\"main\">\n");
    let images: Vec<&Object> = objs.iter().filter(|o| o.content_type.starts_with("image/")).collect();
    let mut i = 0;
    let mut para = 0;
    while html.len() + 40 < html_size || i < images.len() {
        if i < images.len() && (para % 2 == 1 || html.len() + 400 > html_size) {
            html.push_str(&format!(
                "<div class=\"item\"><a href=\"/item/{id}/{i}\"><img src=\"{}\" alt=\"item {i}\" width=\"200\" height=\"150\"></a></div>\n",
                images[i].uri
            ));
            i += 1;
        } else if profile == Profile::Dense {
            // A row of a product table: a tag every 20 bytes or so, most with attributes.
            html.push_str(&format!(
                "<tr class=\"r{}\"><td><input type=\"checkbox\" name=\"s{para}\"></td><td><a href=\"/item/{id}/{para}\"><b>#{para}</b></a></td><td><span class=\"p\">${}.{:02}</span></td><td><i>{}</i></td><td><a href=\"/cart?add={para}\" rel=\"nofollow\">add</a></td></tr>\n",
                para % 2,
                rng.below(200),
                rng.below(100),
                rng.below(50)
            ));
        } else {
            html.push_str(&format!(
                "<p class=\"desc\">Paragraph {para} of page {id}: a description of the item with its price, availability and a few words about delivery times and returns.</p>\n"
            ));
        }
        para += 1;
    }
    html.push_str("</div></body></html>\n");
    let body = html.into_bytes();
    let container = Object { uri: format!("/catalogue/page{id}.html"), content_type: "text/html; charset=utf-8", size: body.len() };
    (container, body, objs)
}

/// Every frame of one pageview starting at `t0`, sorted by time.
fn pageview(rng: &mut Rng, profile: Profile, client: &mut Client, t0: u64, bodies: &Bodies) -> Vec<(u64, Vec<u8>)> {
    let mut frames = Frames(Vec::with_capacity(256));
    let srv = between(rng, 1, 4);
    let server = format!("10.9.0.{srv}:80");
    let host = format!("www{srv}.shop.example");
    let id = rng.below(5_000);
    let (container, html, objs) = page(rng, profile, id);
    let (mut c0, ready) = connect(&mut frames, client, &server, t0);
    let think = MS * between(rng, 20, 250);
    let html_req = request(&host, &container.uri, None, "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8");
    let first_seg = ready + 200 * US + think;
    let html_last = exchange(&mut frames, &mut c0, client, ready + 200 * US, &html_req, &response(&container, &html), think);
    // The browser asks for embeds once the head has arrived and been parsed: its requests reach
    // the server a round trip after the first segment, on up to six connections.
    let start = first_seg + client.rtt + MS * between(rng, 2, 10);
    let extra = objs.len().min(5);
    let mut conns = vec![(c0, html_last + client.rtt)];
    for k in 0..extra {
        let (c, ready) = connect(&mut frames, client, &server, start + k as u64 * 300 * US);
        conns.push((c, ready + 100 * US));
    }
    for (k, o) in objs.iter().enumerate() {
        // The connection free first.
        let j = (0..conns.len()).min_by_key(|&j| conns[j].1).expect("a connection");
        let at = conns[j].1.max(start + k as u64 * 50 * US);
        let think = MS * between(rng, 1, 15);
        let accept = if o.content_type.starts_with("image/") { "image/avif,image/webp,*/*" } else { "*/*" };
        let req = request(&host, &o.uri, Some(&container.uri), accept);
        let last = exchange(&mut frames, &mut conns[j].0, client, at, &req, &response(o, bodies.of(o)), think);
        conns[j].1 = last + client.rtt;
    }
    // The server closes each connection after its keep-alive timeout (5 s); the client answers.
    for (mut c, _) in conns {
        let t = c.last + 5_000 * MS;
        frames.push(t, c.tcp.server_fin());
        frames.push(t + client.rtt, c.tcp.client_fin());
        frames.push(t + client.rtt + 50 * US, c.tcp.client_ack());
    }
    frames.0.sort_by_key(|(t, _)| *t);
    frames.0
}

fn main() -> std::io::Result<()> {
    let a = parse_args();
    let mut rng = Rng::new(a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ a.profile as u64);
    let mut clients: Vec<Client> = (0..a.clients)
        .map(|i| {
            let rtt = MS * between(&mut rng, 10, 150);
            let mbit = between(&mut rng, 2, 50);
            Client {
                ip: [10, 64 + (i >> 16) as u8, (i >> 8) as u8, i as u8],
                rtt,
                seg_ns: 1_514 * 8 * 1_000 / mbit,
                next_port: 32_768 + rng.below(28_000) as u16,
            }
        })
        .collect();
    let bodies = Bodies::new(&mut rng);
    let out: Box<dyn Write> = if a.out == "-" { Box::new(std::io::stdout().lock()) } else { Box::new(std::fs::File::create(&a.out)?) };
    let mut w = BufWriter::with_capacity(1 << 20, out);
    w.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
    w.write_all(&[2, 0, 4, 0])?;
    for x in [0u32, 0, 65_535, 1] {
        w.write_all(&x.to_le_bytes())?;
    }
    // Pageviews in flight: their frames in time order, merged through a heap on the next frame's time.
    let mut live: Vec<VecDeque<(u64, Vec<u8>)>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let epoch: u64 = 1_795_000_000 * 1_000_000_000;
    let mut next_start = epoch;
    let mean_gap = 1e9 / a.rate;
    let mut written = 0u64;
    while written < a.packets {
        let next_frame = heap.peek().map(|Reverse((t, _))| *t).unwrap_or(u64::MAX);
        if next_start <= next_frame {
            let c = rng.below(a.clients as u64) as usize;
            let frames: VecDeque<_> = pageview(&mut rng, a.profile, &mut clients[c], next_start, &bodies).into();
            let slot = match free.pop() {
                Some(s) => {
                    live[s] = frames;
                    s
                }
                None => {
                    live.push(frames);
                    live.len() - 1
                }
            };
            heap.push(Reverse((live[slot][0].0, slot)));
            next_start += exp_ns(&mut rng, mean_gap).max(1);
            continue;
        }
        let Reverse((_, slot)) = heap.pop().expect("peeked");
        let (t, f) = live[slot].pop_front().expect("non-empty");
        w.write_all(&((t / 1_000_000_000) as u32).to_le_bytes())?;
        w.write_all(&(((t % 1_000_000_000) / 1_000) as u32).to_le_bytes())?;
        w.write_all(&(f.len() as u32).to_le_bytes())?;
        w.write_all(&(f.len() as u32).to_le_bytes())?;
        w.write_all(&f)?;
        written += 1;
        match live[slot].front() {
            Some((t, _)) => heap.push(Reverse((*t, slot))),
            None => free.push(slot),
        }
    }
    w.flush()
}
