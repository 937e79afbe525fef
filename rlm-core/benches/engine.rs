//! Engine throughput. Run: `cargo bench -p rlm-core --bench engine`
//!
//! - `header_only`: ACK segments of 1,000 established connections (decode, lookup, sequence
//!   bookkeeping): the per-packet cost every forwarded packet pays.
//! - `http_pageviews`: whole pageviews (handshakes, requests, HTML with embeds scanned, images,
//!   FINs): the full measurement path, per packet.
//! - `embed_scanner`: the HTML scanner alone, per byte.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rlm_core::http::EmbedScanner;
use rlm_core::testkit::TcpConv;
use rlm_core::{Config, Engine, Port, Timestamp};

const CONNS: usize = 1_000;

fn established_engine() -> (Engine, Vec<Vec<u8>>) {
    let mut e = Engine::new(Config::default());
    let mut acks = Vec::new();
    let mut t = 1_000_000_000u64;
    for i in 0..CONNS {
        let client = format!("10.{}.{}.{}:{}", 4 + i / 60_000, (i / 250) % 250, i % 250 + 1, 10_000 + (i % 50_000));
        let mut c = TcpConv::new(&client, "10.9.0.1:80");
        for f in [c.syn(), c.synack(), c.ack()] {
            t += 1_000;
            e.handle(Timestamp(t), Port::Unknown, &f);
        }
        acks.push(c.client_ack());
    }
    (e, acks)
}

fn page_frames(n_pages: usize) -> Vec<Vec<u8>> {
    let page: String = (0..9).map(|i| format!("<tr><td><img src=\"/img/item{i}.gif\" alt=\"book {i}\"></td><td>Title {i} by an author</td></tr>\n")).collect();
    let html = format!("<html><head><title>Best sellers</title><link rel=stylesheet href=/s.css></head><body><table>{page}</table></body></html>");
    let mut frames = Vec::new();
    for p in 0..n_pages {
        let mut c = TcpConv::new(&format!("10.4.{}.{}:{}", p / 250 % 250, p % 250 + 1, 20_000 + p % 40_000), "10.9.0.1:80");
        frames.extend([c.syn(), c.synack(), c.ack()]);
        frames.push(c.client_data(b"GET /best-sellers HTTP/1.1\r\nHost: shop\r\nAccept: text/html\r\n\r\n"));
        let resp = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{html}", html.len());
        frames.extend(c.server_data(resp.as_bytes()));
        frames.push(c.client_ack());
        for i in 0..9 {
            frames.push(c.client_data(format!("GET /img/item{i}.gif HTTP/1.1\r\nHost: shop\r\n\r\n").as_bytes()));
            let mut img = b"HTTP/1.1 200 OK\r\nContent-Type: image/gif\r\nContent-Length: 2000\r\n\r\n".to_vec();
            img.extend(std::iter::repeat_n(b'x', 2000));
            frames.extend(c.server_data(&img));
            frames.push(c.client_ack());
        }
        frames.push(c.client_fin());
        frames.push(c.server_fin());
        frames.push(c.client_ack());
    }
    frames
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.measurement_time(Duration::from_secs(8));

    let (mut engine, acks) = established_engine();
    g.throughput(Throughput::Elements(1));
    g.bench_function("header_only_per_packet", |b| {
        let mut t = 2_000_000_000u64;
        let mut i = 0;
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                t += 100;
                engine.handle(Timestamp(t), Port::Unknown, &acks[i]);
                i = (i + 1) % acks.len();
            }
            start.elapsed()
        })
    });

    let frames = page_frames(200);
    g.throughput(Throughput::Elements(frames.len() as u64));
    g.bench_function("http_pageviews_200_pages", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut e = Engine::new(Config::default());
                let start = Instant::now();
                let mut t = 1_000_000_000u64;
                for f in &frames {
                    t += 50_000;
                    e.handle(Timestamp(t), Port::Unknown, f);
                    while e.poll_event().is_some() {}
                }
                e.shutdown(Timestamp(t));
                while e.poll_event().is_some() {}
                total += start.elapsed();
            }
            total
        })
    });

    let html: Vec<u8> = (0..2000).flat_map(|i| format!("<p class=x>para {i}</p><img src=\"/i/{i}.gif\" width=10>").into_bytes()).collect();
    g.throughput(Throughput::Bytes(html.len() as u64));
    g.bench_function("embed_scanner", |b| {
        b.iter(|| {
            let mut s = EmbedScanner::html();
            let mut out = Vec::new();
            for chunk in html.chunks(1448) {
                s.feed(chunk, &mut out);
            }
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
