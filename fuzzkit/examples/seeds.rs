//! Writes the seed corpora of `fuzz/corpus/<target>/`: the repository's rule files and mapping,
//! `rlm.sample.toml`, small captures from `rlm/tests/data` cut to at most 4 KB, and
//! conversations made with `rlm_core::testkit` in each target's input format; and the
//! regression inputs of `fuzz/regressions/` made from crashes the tests describe.
//!
//! `cargo run -p fuzzkit --example seeds` rewrites the files it names and leaves the others
//! (what fuzzing added, minimised) alone.

use std::io::Write;
use std::path::{Path, PathBuf};

use fuzzkit::net::{ACK, FIN, PSH, SYN};
use fuzzkit::{engine_frames as ef, engine_rules as er, raw_ip as ri, rulefiles};
use kmod_fastpath::ring::{Event, EventKind};
use rlm_core::testkit::TcpConv;

const HTML: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 96\r\n\r\n<html><img src=\"/img/cover.jpg\"><img src=\"/img/b.gif\"><link rel=stylesheet href=\"/s.css\"></html>";
const IMAGE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: 16\r\n\r\n0123456789abcdef";
const CHUNKED: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n1a\r\n<img src=\"/img/x.png\"> hi\r\n0\r\n\r\n";

/// A frame of a conversation, and whether the client sent it.
type Frames = Vec<(bool, Vec<u8>)>;

/// Conversations: (name, frames in order).
fn conversations() -> Vec<(&'static str, Frames)> {
    let mut out = Vec::new();
    // A page and one of its images, on two connections; the second closes.
    let mut page = TcpConv::new("10.4.0.1:40001", "10.9.0.1:80");
    let mut img = TcpConv::new("10.4.0.1:40002", "10.9.0.1:80");
    let mut v: Frames = vec![(true, page.syn()), (false, page.synack()), (true, page.ack())];
    v.push((true, page.client_data(b"GET / HTTP/1.1\r\nHost: shop.example.com\r\n\r\n")));
    v.extend(page.server_data(HTML).into_iter().map(|f| (false, f)));
    v.push((true, page.client_ack()));
    v.extend([(true, img.syn()), (false, img.synack()), (true, img.ack())]);
    v.push((true, img.client_data(b"GET /img/cover.jpg HTTP/1.1\r\nHost: shop.example.com\r\nReferer: http://shop.example.com/\r\n\r\n")));
    v.extend(img.server_data(IMAGE).into_iter().map(|f| (false, f)));
    v.extend([(true, img.client_fin()), (false, img.server_fin()), (true, img.client_ack())]);
    out.push(("page-and-image", v));
    // Keep-alive: two requests, a chunked answer split in 7-byte segments.
    let mut c = TcpConv::new("10.5.0.2:40003", "10.9.0.1:80");
    let mut v: Frames = vec![(true, c.syn()), (false, c.synack()), (true, c.ack())];
    for path in ["/", "/a.css"] {
        v.push((true, c.client_data(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())));
        v.extend(c.server_data_in(CHUNKED, 7).into_iter().map(|f| (false, f)));
    }
    v.push((false, c.server_rst()));
    out.push(("keepalive-chunked-rst", v));
    // A SYN retransmitted and refused.
    let c = TcpConv::new("10.5.0.3:40004", "10.9.0.1:80");
    out.push(("refused", vec![(true, c.syn()), (true, c.syn()), (false, c.refuse())]));
    // IPv6, a POST.
    let mut c = TcpConv::new("[2001:db8:4::1]:40005", "[2001:db8:9::1]:80");
    let mut v: Frames = vec![(true, c.syn()), (false, c.synack()), (true, c.ack())];
    v.push((true, c.client_data(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")));
    v.extend(c.server_data(b"HTTP/1.1 204 No Content\r\n\r\n").into_iter().map(|f| (false, f)));
    out.push(("ipv6-post", v));
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// A pcap (microseconds, `dlt`) of `frames`, 10 ms apart.
fn pcap(dlt: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&4u16.to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&dlt.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        let t = 1_700_000_000_000_000u64 + i as u64 * 10_000;
        v.extend_from_slice(&((t / 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&((t % 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(f);
    }
    v
}

/// A pcapng (one section, one Ethernet interface with nanosecond timestamps) of `frames`.
fn pcapng(frames: &[Vec<u8>]) -> Vec<u8> {
    fn block(v: &mut Vec<u8>, btype: u32, body: &[u8]) {
        let len = 12 + body.len().next_multiple_of(4);
        v.extend_from_slice(&btype.to_le_bytes());
        v.extend_from_slice(&(len as u32).to_le_bytes());
        v.extend_from_slice(body);
        v.resize(v.len() + body.len().next_multiple_of(4) - body.len(), 0);
        v.extend_from_slice(&(len as u32).to_le_bytes());
    }
    let mut v = Vec::new();
    let shb: Vec<u8> = [&0x1a2b_3c4du32.to_le_bytes()[..], &1u16.to_le_bytes(), &0u16.to_le_bytes(), &u64::MAX.to_le_bytes()].concat();
    block(&mut v, 0x0a0d_0d0a, &shb);
    // Ethernet, snaplen 0, if_tsresol = 9 (nanoseconds), end of options.
    let idb: Vec<u8> = [&1u16.to_le_bytes()[..], &0u16.to_le_bytes(), &0u32.to_le_bytes(), &[9, 0, 1, 0, 9, 0, 0, 0], &[0, 0, 0, 0]].concat();
    block(&mut v, 1, &idb);
    for (i, f) in frames.iter().enumerate() {
        let t = 1_700_000_000_000_000_000u64 + i as u64 * 10_000_000;
        let epb: Vec<u8> = [
            &0u32.to_le_bytes()[..],
            &((t >> 32) as u32).to_le_bytes(),
            &(t as u32).to_le_bytes(),
            &(f.len() as u32).to_le_bytes(),
            &(f.len() as u32).to_le_bytes(),
            f,
        ]
        .concat();
        block(&mut v, 6, &epb);
    }
    v
}

/// The first whole records (pcap) or blocks (pcapng) of `file`, at most `max` bytes of it.
fn cut_capture(file: &[u8], max: usize) -> Vec<u8> {
    let (mut at, ng, little) = match file[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => (24, false, true),
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => (24, false, false),
        [0x0a, 0x0d, 0x0d, 0x0a] => (0, true, file[8..12] == [0x4d, 0x3c, 0x2b, 0x1a]),
        _ => panic!("not a capture"),
    };
    let u32_at = |b: &[u8]| {
        let a = b[..4].try_into().unwrap();
        (if little { u32::from_le_bytes(a) } else { u32::from_be_bytes(a) }) as usize
    };
    loop {
        if at + 16 > file.len() {
            return file[..at].to_vec();
        }
        let next = if ng { at + u32_at(&file[at + 4..]) } else { at + 16 + u32_at(&file[at + 8..]) };
        if next > max.min(file.len()) {
            return file[..at].to_vec();
        }
        at = next;
    }
}

fn main() {
    let repo = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let corpus = repo.join("fuzz/corpus");
    let regressions = repo.join("fuzz/regressions");
    let convs = conversations();

    // rules_parse: the rule files, the examples of docs/rules.md (the broken ones too).
    let dir = corpus.join("rules_parse");
    for i in 0..rulefiles::COUNT {
        let (name, text) = rulefiles::text(i);
        write(&dir, &format!("{name}.rlm"), text.as_bytes());
    }
    let doc = std::fs::read_to_string(repo.join("docs/rules.md")).unwrap();
    let blocks: Vec<&str> = doc.split("```").skip(1).step_by(2).collect();
    for (i, b) in blocks.iter().enumerate() {
        let b = b.strip_prefix('\n').unwrap_or(b);
        if b.lines().next().is_some_and(|l| l.starts_with("IF") || l.starts_with("CLASS") || l.starts_with('#')) {
            write(&dir, &format!("docs-rules-{i:02}.rlm"), b.as_bytes());
        }
    }
    for (name, text) in [
        ("bad-threshold.rlm", "IF RT > 1e30s THEN DROP SYN\n"),
        ("bad-pattern.rlm", "IF IP.SRC == *.*.* THEN\n  DROP SYN\n"),
        ("bad-then.rlm", "CLASS HIGH IF IP.SRC == 10.4.*.*\nIF IP.SRC == 10.4.*.*\n  DROP SYN\n"),
        ("bad-node.rlm", "IF URL == \"/x/*\" THEN DROP SYN\n"),
    ] {
        write(&dir, name, text.as_bytes());
    }

    // mapping: the lab's, and broken ones.
    let dir = corpus.join("mapping");
    write(&dir, "ims.map", &std::fs::read(repo.join("testbed/maps/ims.map")).unwrap());
    for (name, text) in [
        ("exact-and-prefixes.map", "# pairs\n/img/a.jpg /ims/a.jpg\n/x/* /y/*\n/images/large/* /images/small/*\n\t/a?b=1 /a?b=2 # comment\n"),
        ("other-length.map", "/a /bb\n"),
        ("one-word.map", "/a\n"),
        ("three-words.map", "/a /b /c\n"),
        ("half-prefix.map", "/img/* /ims\n"),
    ] {
        write(&dir, name, text.as_bytes());
    }

    // run_config: the sample, with its commented record keys taken in, and an SRPT one.
    let dir = corpus.join("run_config");
    let sample = std::fs::read_to_string(repo.join("rlm.sample.toml")).unwrap();
    write(&dir, "rlm.sample.toml", sample.as_bytes());
    let keys = ["transactions", "pageviews", "decisions", "records_max_bytes", "records_keep", "records_queue"];
    let records: Vec<&str> = sample
        .lines()
        .map(|l| match l.strip_prefix('#') {
            Some(e) if keys.iter().any(|k| e.starts_with(&format!("{k} = "))) => e,
            _ => l,
        })
        .collect();
    write(&dir, "records.toml", records.join("\n").as_bytes());
    write(
        &dir,
        "srpt.toml",
        b"bridge = \"br0\"\nclient_port = \"a\"\nserver_port = \"b\"\nserver_ports = [80, 8080]\n[srpt]\nmode = \"srpt\"\nlink_bps = 10000000\ncutoffs = [1024, 2048, 5120]\nfloor_pct = 5.0\n",
    );
    write(
        &dir,
        "pcap-observer.toml",
        b"bridge = \"br0\"\nclient_port = \"a\"\nserver_port = \"b\"\nobserver = \"pcap\"\ninject = false\nqueues = 4\nqueue_base = 65533\n",
    );

    // capture: small traces of the repository, cut to 4 KB, and the conversations in each format.
    let dir = corpus.join("capture");
    let traces = repo.join("rlm/tests/data/zeek-http/traces");
    for name in [
        "snap-tcp.pcap",
        "wikipedia.pcap",
        "zeek-image-1080-80-x.pcapng",
        "x-gzip.pcap",
        "http-inner-transfer-encoding-ossfuzz.pcap",
        "content-length-overflow.pcap",
        "pipelined-requests.pcap",
        "connect-with-smtp.pcap",
        "no-uri.pcap",
        "261_variant-04-te_cl_desync.pcap",
    ] {
        let cut = cut_capture(&std::fs::read(traces.join(name)).unwrap(), 4096);
        write(&dir, name, &cut);
    }
    let frames: Vec<Vec<u8>> = convs[0].1.iter().map(|(_, f)| f.clone()).collect();
    write(&dir, "conv.pcap", &pcap(1, &frames));
    write(&dir, "conv-raw.pcap", &pcap(101, &frames.iter().map(|f| f[14..].to_vec()).collect::<Vec<_>>()));
    write(&dir, "conv.pcapng", &pcapng(&frames));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&pcap(1, &frames)).unwrap();
    write(&dir, "conv.pcap.gz", &gz.finish().unwrap());
    write(&dir, "conv.pcapng.zst", &zstd::stream::encode_all(&pcapng(&frames)[..], 1).unwrap());

    // engine_frames: the conversations, each frame on the port it comes in on.
    let dir = corpus.join("engine_frames");
    for (name, conv) in &convs {
        let ops: Vec<ef::Op> = conv
            .iter()
            .flat_map(|(to_server, f)| [ef::Op::Raw { port: u8::from(!to_server), bytes: f.clone(), cut: None }, ef::Op::Tick { ms: 5 }])
            .collect();
        write(&dir, name, &ef::encode(&ops));
    }

    // raw_ip: the conversations as NFQUEUE hands them (no Ethernet header), under rule files.
    let dir = corpus.join("raw_ip");
    for (i, (name, conv)) in convs.iter().enumerate() {
        let ops = conv.iter().map(|(to_server, f)| ri::Op::Packet { port: u8::from(!to_server), bytes: f[14..].to_vec() }).collect();
        write(&dir, name, &ri::encode(&ri::Input { rules: [6, 7, 0, 12][i % 4], ops }));
    }

    // ring_record: the conversations as the fast path reports them: the client's SYNs decided
    // (the second one dropped by a LIMIT SYN), the rest observed, data segments cut at 96 bytes.
    let dir = corpus.join("ring_record");
    for (name, conv) in &convs {
        let mut syns = 0;
        let events: Vec<Event<'_>> = conv
            .iter()
            .enumerate()
            .map(|(i, (to_server, f))| {
                let syn = *to_server && f.len() <= 80 && f[47] & 0x12 == 0x02;
                let kind = match (syn, syns) {
                    (true, 0) => EventKind::SynPassed,
                    (true, _) => EventKind::SynDropped { rule: 0, limited: true },
                    (false, _) => EventKind::Observed { from_server: !*to_server },
                };
                syns += usize::from(syn);
                let frame = if syn { &f[..] } else { &f[..f.len().min(96)] };
                Event { ts_ns: 5_000_000_000 + i as u64 * 10_000_000, kind, wire_len: f.len() as u32, frame }
            })
            .collect();
        write(&dir, name, &fuzzkit::ring_record::encode(&events));
    }

    // engine_rules: a page and an image on two connections, written as operations, under each
    // rule file, with setups that vary.
    let dir = corpus.join("engine_rules");
    for i in 0..rulefiles::COUNT {
        let setup = er::Setup {
            ports: i as u8,
            max_connections: (i * 5) as u8,
            flags: [0, er::TIGHT, er::SRPT, er::NO_FASTPATH][i % 4],
            rules: i as u8,
            text: vec![],
        };
        let input = er::Input { setup, ops: engine_rules_page(i as u8 % 16) };
        write(&dir, &format!("page-{}", rulefiles::text(i).0), &er::encode(&input));
    }
    let text = b"CLASS HIGH IF IP.SRC == 10.4.*.*\nIF CLASS == DEFAULT THEN DROP SYN\nIF IP.SRC == 2001:db8::/32 THEN FAST SYN GAP 10ms\n".to_vec();
    let setup = er::Setup { ports: 3, max_connections: 0, flags: 0, rules: 255, text };
    let mut ops = engine_rules_page(12);
    ops.extend([er::Op::Decided { conn: 5, server_port: 0, drop: Some((0, false)) }, er::Op::Timeout, er::Op::Timeout, er::Op::Tick { ms: 30_000 }]);
    write(&dir, "text-rules-ipv6", &er::encode(&er::Input { setup, ops }));

    // Regressions: the request line with a single space the first engine_frames run found
    // (docs/testing.md; rlm-core's head tests keep it as a unit test too).
    let c = TcpConv::new("10.4.0.1:40000", "10.9.0.1:80");
    let mut c2 = c.clone();
    let ops = vec![
        ef::Op::Raw { port: 0, bytes: c.syn(), cut: None },
        ef::Op::Raw { port: 1, bytes: c.synack(), cut: None },
        ef::Op::Raw { port: 0, bytes: c2.ack(), cut: None },
        ef::Op::Raw { port: 0, bytes: c2.client_data(b"GET \r\n\r\n"), cut: None },
        ef::Op::Tick { ms: 100 },
    ];
    write(&regressions.join("engine_frames"), "request-line-single-space", &ef::encode(&ops));
    for t in fuzzkit::TARGETS.iter().map(|t| t.0) {
        let d = regressions.join(t);
        std::fs::create_dir_all(&d).unwrap();
        if std::fs::read_dir(&d).unwrap().next().is_none() {
            write(&d, ".gitkeep", b"");
        }
    }
}

/// Connection `conn` fetches the page, connection `conn + 1` its image; both close.
fn engine_rules_page(conn: u8) -> Vec<er::Op> {
    let seg = |conn: u8, to_server: bool, flags: u8, snippet: u8| er::Op::Segment {
        conn,
        to_server,
        server_port: 0,
        seq_delta: 0,
        ack_delta: 0,
        flags,
        snippet,
        payload: vec![],
        cut: None,
    };
    let none = u8::MAX;
    let mut ops = Vec::new();
    for (c, request, answer) in [(conn, 0, 3), (conn + 1, 1, 5)] {
        ops.extend([seg(c, true, SYN, none), er::Op::Tick { ms: 40 }, seg(c, false, SYN | ACK, none), seg(c, true, ACK, none)]);
        ops.extend([seg(c, true, ACK | PSH, request), er::Op::Tick { ms: 80 }, seg(c, false, ACK | PSH, answer), seg(c, true, ACK, none)]);
    }
    ops.extend([
        seg(conn + 1, true, FIN | ACK, none),
        seg(conn + 1, false, FIN | ACK, none),
        seg(conn + 1, true, ACK, none),
        er::Op::Tick { ms: 5_000 },
    ]);
    ops
}
