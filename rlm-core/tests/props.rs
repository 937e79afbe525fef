//! Property tests: HTTP framing and the embed scanner give the same answer however the bytes
//! are cut into segments, and never panic on arbitrary input.

use proptest::prelude::*;
use rlm_core::http::{EmbedScanner, HttpConn, HttpEvent, HttpOptions};
use rlm_core::Timestamp;

#[derive(Clone, Debug)]
enum Body {
    Length(usize),
    Chunked(Vec<usize>),
    /// HEAD request, or a 304: no body despite a Content-Length.
    Bodiless,
}

fn body_strategy() -> impl Strategy<Value = Body> {
    prop_oneof![(0usize..3000).prop_map(Body::Length), prop::collection::vec(1usize..700, 0..6).prop_map(Body::Chunked), Just(Body::Bodiless),]
}

fn chunked(sizes: &[usize], fill: u8) -> Vec<u8> {
    let mut v = Vec::new();
    for &n in sizes {
        v.extend(format!("{n:x}\r\n").into_bytes());
        v.extend(std::iter::repeat_n(fill, n));
        v.extend(b"\r\n");
    }
    v.extend(b"0\r\n\r\n");
    v
}

/// Where a transaction's messages start in the streams: the request line, the status line and
/// the response body's first byte (none without one).
type Offsets = (usize, usize, Option<usize>);

/// Serialise request/response pairs; return both streams, the expected (req_len, resp_len,
/// status) and where each transaction's messages start.
fn conversation(bodies: &[(Body, Body)]) -> (Vec<u8>, Vec<u8>, Vec<(u64, u64, u16)>, Vec<Offsets>) {
    let (mut client, mut server, mut expect, mut offsets) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, (req, resp)) in bodies.iter().enumerate() {
        let (req_at, resp_at) = (client.len(), server.len());
        let (method, req_len) = match req {
            Body::Length(n) => {
                client.extend(format!("POST /p{i} HTTP/1.1\r\nHost: h\r\nContent-Length: {n}\r\n\r\n").into_bytes());
                client.extend(std::iter::repeat_n(b'q', *n));
                ("POST", *n as u64)
            }
            Body::Chunked(sizes) => {
                client.extend(format!("PUT /p{i} HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n").into_bytes());
                client.extend(chunked(sizes, b'q'));
                ("PUT", sizes.iter().sum::<usize>() as u64)
            }
            Body::Bodiless => {
                client.extend(format!("HEAD /p{i} HTTP/1.1\r\nHost: h\r\n\r\n").into_bytes());
                ("HEAD", 0)
            }
        };
        let mut body_at = None;
        let (status, resp_len) = match (resp, method) {
            (_, "HEAD") => {
                server.extend(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n");
                (200, 0)
            }
            (Body::Length(n), _) => {
                server.extend(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {n}\r\n\r\n").into_bytes());
                body_at = (*n > 0).then_some(server.len());
                server.extend(std::iter::repeat_n(b'<', *n));
                (200, *n as u64)
            }
            (Body::Chunked(sizes), _) => {
                server.extend(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n");
                body_at = sizes.first().map(|n| server.len() + format!("{n:x}\r\n").len());
                server.extend(chunked(sizes, b'r'));
                (201, sizes.iter().sum::<usize>() as u64)
            }
            (Body::Bodiless, _) => {
                server.extend(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n");
                (304, 0)
            }
        };
        expect.push((req_len, resp_len, status));
        offsets.push((req_at, resp_at, body_at));
    }
    (client, server, expect, offsets)
}

/// Sequence numbers start just below the wrap, so that positions are checked across it.
const SEQ_BASE: u32 = u32::MAX - 1000;

/// Feed one side's bytes to `h`, cut at `cuts`, numbered from [`SEQ_BASE`].
fn feed_http(h: &mut HttpConn, from_server: bool, data: &[u8], cuts: &[usize], now: Timestamp, out: &mut Vec<HttpEvent>) {
    let mut seq = SEQ_BASE;
    for seg in split(data, cuts) {
        if from_server {
            h.on_server_data(now, seq, &seg, out);
        } else {
            h.on_client_data(now, seq, &seg, out);
        }
        seq = seq.wrapping_add(seg.len() as u32);
    }
}

fn split(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.push(0);
    points.push(data.len());
    points.sort_unstable();
    points.dedup();
    points.windows(2).map(|w| data[w[0]..w[1]].to_vec()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn framing_is_independent_of_segmentation(
        bodies in prop::collection::vec((body_strategy(), body_strategy()), 1..6),
        ccuts in prop::collection::vec(any::<usize>(), 0..20),
        scuts in prop::collection::vec(any::<usize>(), 0..20),
    ) {
        let (client, server, expect, offsets) = conversation(&bodies);
        let mut h = HttpConn::new(false, HttpOptions { scan_embeds: true, detect: false, decode_bodies: true, keep_headers: None });
        let mut out = Vec::new();
        // The client pipelines everything, then the server answers everything.
        feed_http(&mut h, false, &client, &ccuts, Timestamp(1), &mut out);
        feed_http(&mut h, true, &server, &scuts, Timestamp(2), &mut out);
        let done: Vec<(u64, u64, u16)> = out.iter().filter_map(|e| match e {
            HttpEvent::Done(t) => Some((t.request_body_len, t.response_body_len, t.response.as_ref().map(|r| r.status).unwrap_or(0))),
            _ => None,
        }).collect();
        prop_assert_eq!(&done, &expect);
        // Each message's position in sequence space, whatever the cuts and through chunk framing.
        let seq = |off: usize| SEQ_BASE.wrapping_add(off as u32);
        let positions: Vec<(Option<u32>, Option<u32>, Option<u32>)> = out.iter().filter_map(|e| match e {
            HttpEvent::Done(t) => Some((t.request_seq, t.response_seq, t.response_body_seq)),
            _ => None,
        }).collect();
        let expected: Vec<_> = offsets.iter().map(|&(q, r, b)| (Some(seq(q)), Some(seq(r)), b.map(seq))).collect();
        prop_assert_eq!(positions, expected);
        prop_assert!(out.iter().all(|e| !matches!(e, HttpEvent::Done(t) if !t.anomalies.is_empty())));
    }

    /// Cut frames: each server segment seen only up to a point, the rest handed on as absent
    /// (counted, not seen), anywhere but in a response head. Every transaction comes out as from
    /// whole segments: the same lengths, statuses and positions, and no anomaly.
    #[test]
    fn absent_bytes_frame_bodies_as_seen_ones_do(
        lens in prop::collection::vec(0usize..5000, 1..6),
        scuts in prop::collection::vec(any::<usize>(), 0..20),
        keeps in prop::collection::vec(any::<u16>(), 20..21),
    ) {
        let bodies: Vec<(Body, Body)> = lens.iter().map(|&n| (Body::Length(0), Body::Length(n))).collect();
        let (client, server, expect, offsets) = conversation(&bodies);
        // Each response head's bytes: from its status line to its body (or the next response).
        let heads: Vec<(usize, usize)> = offsets.iter().enumerate().map(|(i, &(_, r, b))| {
            (r, b.unwrap_or_else(|| offsets.get(i + 1).map_or(server.len(), |o| o.1)))
        }).collect();
        let mut h = HttpConn::new(false, HttpOptions { scan_embeds: true, detect: false, decode_bodies: true, keep_headers: None });
        let mut out = Vec::new();
        feed_http(&mut h, false, &client, &[], Timestamp(1), &mut out);
        let (mut seq, mut at, mut absent) = (SEQ_BASE, 0usize, 0u64);
        for (i, seg) in split(&server, &scuts).into_iter().enumerate() {
            let end = at + seg.len();
            // What is seen of it: a random share, and at least every head byte in it.
            let mut keep = seg.len() * usize::from(keeps[i % keeps.len()]) / usize::from(u16::MAX);
            for &(hs, he) in &heads {
                if hs < end && he > at {
                    keep = keep.max(he.min(end) - at);
                }
            }
            h.on_server_data(Timestamp(2), seq, &seg[..keep], &mut out);
            let rest = (seg.len() - keep) as u32;
            if rest > 0 {
                h.on_server_absent(Timestamp(2), seq.wrapping_add(keep as u32), rest, &mut out);
                absent += u64::from(rest);
            }
            seq = seq.wrapping_add(seg.len() as u32);
            at = end;
        }
        let done: Vec<(u64, u64, u16)> = out.iter().filter_map(|e| match e {
            HttpEvent::Done(t) => Some((t.request_body_len, t.response_body_len, t.response.as_ref().map(|r| r.status).unwrap_or(0))),
            _ => None,
        }).collect();
        prop_assert_eq!(&done, &expect, "{} bytes absent", absent);
        let body_seqs: Vec<Option<u32>> = out.iter().filter_map(|e| match e {
            HttpEvent::Done(t) => Some(t.response_body_seq),
            _ => None,
        }).collect();
        let expected: Vec<Option<u32>> = offsets.iter().map(|&(_, _, b)| b.map(|o| SEQ_BASE.wrapping_add(o as u32))).collect();
        prop_assert_eq!(body_seqs, expected);
        prop_assert!(out.iter().all(|e| !matches!(e, HttpEvent::Done(t) if !t.anomalies.is_empty())));
    }

    #[test]
    fn http_parser_survives_arbitrary_bytes(
        client in prop::collection::vec(any::<u8>(), 0..600),
        server in prop::collection::vec(any::<u8>(), 0..600),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let mut h = HttpConn::new(false, HttpOptions { scan_embeds: true, detect: false, decode_bodies: true, keep_headers: None });
        let mut out = Vec::new();
        feed_http(&mut h, false, &client, &cuts, Timestamp(1), &mut out);
        feed_http(&mut h, true, &server, &cuts, Timestamp(2), &mut out);
        h.on_server_gap(Timestamp(3), 17, &mut out);
        h.close(Timestamp(4), false, &mut out);
        prop_assert_eq!(h.in_flight(), 0);
    }
}

#[derive(Clone, Debug)]
enum Frag {
    Text(String),
    Img { url: String, upper: bool, quote: u8, spaces: bool },
    Comment(String),
    Script(String),
    Anchor(String),
}

fn frag_strategy() -> impl Strategy<Value = Frag> {
    let url = "/[a-z]{1,8}/[a-z0-9]{1,8}\\.(gif|png|jpg)";
    prop_oneof![
        "[a-zA-Z0-9 .,]{0,40}".prop_map(Frag::Text),
        (url, any::<bool>(), prop_oneof![Just(b'"'), Just(b'\''), Just(0u8)], any::<bool>()).prop_map(|(url, upper, quote, spaces)| Frag::Img {
            url,
            upper,
            quote,
            spaces
        }),
        "[a-z ]{0,20}".prop_map(Frag::Comment),
        "[a-z =;]{0,20}".prop_map(Frag::Script),
        url.prop_map(Frag::Anchor),
    ]
}

fn render(frags: &[Frag]) -> (String, Vec<String>) {
    let mut html = String::from("<!DOCTYPE html><html><body>");
    let mut urls = Vec::new();
    for f in frags {
        match f {
            Frag::Text(t) => html.push_str(t),
            Frag::Img { url, upper, quote, spaces } => {
                let (tag, attr) = if *upper { ("IMG", "SRC") } else { ("img", "src") };
                let sp = if *spaces { " \n " } else { "" };
                let q = if *quote == 0 { String::new() } else { (*quote as char).to_string() };
                html.push_str(&format!("<{tag} alt=\"x > y\" {attr}{sp}={sp}{q}{url}{q} width=3>"));
                urls.push(url.clone());
            }
            Frag::Comment(c) => html.push_str(&format!("<!-- <img src=\"/c/{c}.gif\"> -->")),
            Frag::Script(s) => html.push_str(&format!("<script>var {s} = '<img src=/s.gif>';</script>")),
            Frag::Anchor(u) => html.push_str(&format!("<a href=\"{u}\">link</a>")),
        }
    }
    html.push_str("</body></html>");
    (html, urls)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn embed_scanner_finds_exactly_the_images_whatever_the_cuts(
        frags in prop::collection::vec(frag_strategy(), 0..25),
        cuts in prop::collection::vec(any::<usize>(), 0..30),
    ) {
        let (html, expected) = render(&frags);
        let mut s = EmbedScanner::html();
        let mut out = Vec::new();
        for seg in split(html.as_bytes(), &cuts) {
            s.feed(&seg, &mut out);
        }
        let got: Vec<String> = out.iter().map(|r| r.urls[0].clone()).collect();
        prop_assert_eq!(got, expected);
        for r in &out {
            prop_assert!(html.as_bytes()[r.start as usize] == b'<' && html.as_bytes()[r.end as usize - 1] == b'>');
        }
    }

    #[test]
    fn embed_scanner_is_split_invariant_on_arbitrary_bytes(
        body in prop::collection::vec(prop_oneof![Just(b'<'), Just(b'>'), Just(b'"'), Just(b'='), Just(b' '), Just(b'i'), Just(b'm'), Just(b'g'), Just(b's'), Just(b'r'), Just(b'c'), any::<u8>()], 0..400),
        cuts in prop::collection::vec(any::<usize>(), 0..20),
    ) {
        let whole = {
            let mut s = EmbedScanner::html();
            let mut out = Vec::new();
            s.feed(&body, &mut out);
            out
        };
        let mut s = EmbedScanner::html();
        let mut out = Vec::new();
        for seg in split(&body, &cuts) {
            s.feed(&seg, &mut out);
        }
        prop_assert_eq!(out, whole);
    }
}

/// One generated request/response pair for the round-trip test.
#[derive(Clone, Debug)]
struct Message {
    method: String,
    target: String,
    http11: bool,
    lf_only: bool,
    headers: Vec<(String, String)>,
    folded: bool,
    req_body: Body,
    status: u16,
    reason: Option<String>,
    resp_body: Body,
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["GET", "POST", "PUT", "get", "M-SEARCH", "PROPFIND", "X_CUSTOM", "QUERY", "BREW"]).prop_map(String::from),
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}",
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (
        token(),
        prop_oneof!["/[A-Za-z0-9/._~%?=&-]{0,40}", Just("*".to_string()), "/[a-z]{1,5} [a-z]{1,5}"],
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(("X-[A-Za-z]{1,10}", "[ -~]{0,30}"), 0..4),
        any::<bool>(),
        body_strategy(),
        prop::sample::select(vec![200u16, 201, 301, 404, 500, 299]),
        prop::option::of("[A-Za-z ]{0,20}"),
        body_strategy(),
    )
        .prop_map(|(method, target, http11, lf_only, headers, folded, req_body, status, reason, resp_body)| Message {
            method,
            target,
            http11,
            lf_only,
            headers,
            folded,
            req_body,
            status,
            reason,
            resp_body,
        })
}

/// Serialise one message pair; returns the bytes and the expected request and response body lengths.
fn render_message(m: &Message, i: usize) -> (Vec<u8>, Vec<u8>, u64, u64) {
    let eol = if m.lf_only { "\n" } else { "\r\n" };
    let version = if m.http11 { "HTTP/1.1" } else { "HTTP/1.0" };
    let mut c = format!("{} {} {version}{eol}Host: h{i}{eol}", m.method, m.target).into_bytes();
    for (n, v) in &m.headers {
        c.extend(format!("{n}: {}{eol}", v.trim()).into_bytes());
        if m.folded {
            c.extend(format!(" continued{eol}").into_bytes());
        }
    }
    // Chunked framing exists from HTTP/1.1 on; a 1.0 message carries a length instead.
    let chunk = |sizes: &[usize], fill: u8, c: &mut Vec<u8>| {
        for &n in sizes {
            c.extend(format!("{n:x}{eol}").into_bytes());
            c.extend(std::iter::repeat_n(fill, n));
            c.extend(eol.as_bytes());
        }
        c.extend(format!("0{eol}{eol}").into_bytes());
    };
    let req_len = match &m.req_body {
        Body::Chunked(sizes) if m.http11 => {
            c.extend(format!("Transfer-Encoding: chunked{eol}{eol}").into_bytes());
            chunk(sizes, b'q', &mut c);
            sizes.iter().sum::<usize>() as u64
        }
        Body::Chunked(sizes) => {
            let n: usize = sizes.iter().sum();
            c.extend(format!("Content-Length: {n}{eol}{eol}").into_bytes());
            c.extend(std::iter::repeat_n(b'q', n));
            n as u64
        }
        Body::Length(n) => {
            c.extend(format!("Content-Length: {n}{eol}{eol}").into_bytes());
            c.extend(std::iter::repeat_n(b'q', *n));
            *n as u64
        }
        Body::Bodiless => {
            c.extend(eol.as_bytes());
            0
        }
    };
    let head_line = match &m.reason {
        Some(r) => format!("{version} {} {}{eol}", m.status, r.trim()),
        None => format!("{version} {}{eol}", m.status),
    };
    let mut s = head_line.into_bytes();
    let resp_len = match &m.resp_body {
        Body::Chunked(sizes) if m.http11 => {
            s.extend(format!("Transfer-Encoding: chunked{eol}{eol}").into_bytes());
            chunk(sizes, b'r', &mut s);
            sizes.iter().sum::<usize>() as u64
        }
        Body::Chunked(sizes) => {
            let n: usize = sizes.iter().sum();
            s.extend(format!("Content-Length: {n}{eol}{eol}").into_bytes());
            s.extend(std::iter::repeat_n(b'r', n));
            n as u64
        }
        Body::Length(n) => {
            s.extend(format!("Content-Length: {n}{eol}{eol}").into_bytes());
            s.extend(std::iter::repeat_n(b'r', *n));
            *n as u64
        }
        Body::Bodiless => {
            s.extend(format!("Content-Length: 0{eol}{eol}").into_bytes());
            0
        }
    };
    (c, s, req_len, resp_len)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Generated messages (any token method, odd targets, HTTP/1.0 and 1.1, CRLF or bare LF line
    /// ends, folded headers, lengths and chunking, with or without a reason phrase), pipelined
    /// and cut into segments anywhere, come back out of the parser as they went in.
    #[test]
    fn generated_messages_round_trip(
        msgs in prop::collection::vec(message(), 1..5),
        ccuts in prop::collection::vec(any::<usize>(), 0..20),
        scuts in prop::collection::vec(any::<usize>(), 0..20),
    ) {
        let (mut client, mut server, mut expect) = (Vec::new(), Vec::new(), Vec::new());
        for (i, m) in msgs.iter().enumerate() {
            let (c, s, rq, rs) = render_message(m, i);
            client.extend(c);
            server.extend(s);
            expect.push((m.method.clone(), m.target.clone(), if m.http11 { "1.1" } else { "1.0" }, rq, rs, m.status,
                m.reason.as_ref().map(|r| r.trim().to_string())));
        }
        let mut h = HttpConn::new(false, HttpOptions { scan_embeds: false, detect: false, decode_bodies: true, keep_headers: None });
        let mut out = Vec::new();
        feed_http(&mut h, false, &client, &ccuts, Timestamp(1), &mut out);
        feed_http(&mut h, true, &server, &scuts, Timestamp(2), &mut out);
        let got: Vec<_> = out.iter().filter_map(|e| match e {
            HttpEvent::Done(t) => {
                let rq = t.request.as_ref()?;
                let rs = t.response.as_ref()?;
                Some((rq.method.clone(), rq.uri.clone(), rq.version.as_str(), t.request_body_len, t.response_body_len, rs.status, rs.reason.clone()))
            }
            _ => None,
        }).collect();
        let expect: Vec<_> = expect.into_iter().map(|(m, u, v, a, b, s, r)| (m, u, v.to_string(), a, b, s, r)).collect();
        prop_assert_eq!(got, expect);
    }

    /// An HTTP/0.9 request (one line, no version) is answered by the bare body up to the close.
    #[test]
    fn http09_round_trip(target in "/[a-z0-9/.]{1,30}", lf_only in any::<bool>(), body in prop::collection::vec(any::<u8>(), 1..2000),
                         cuts in prop::collection::vec(any::<usize>(), 0..10)) {
        let mut h = HttpConn::new(false, HttpOptions { scan_embeds: false, detect: false, decode_bodies: true, keep_headers: None });
        let mut out = Vec::new();
        h.on_client_data(Timestamp(1), SEQ_BASE, format!("GET {target}{}", if lf_only { "\n" } else { "\r\n" }).as_bytes(), &mut out);
        feed_http(&mut h, true, &body, &cuts, Timestamp(2), &mut out);
        h.on_server_end(Timestamp(3), &mut out);
        h.close(Timestamp(3), false, &mut out);
        let t = out.iter().find_map(|e| match e { HttpEvent::Done(t) => Some(t), _ => None }).expect("a transaction");
        prop_assert_eq!(t.request.as_ref().map(|r| (r.uri.clone(), r.version.as_str())), Some((target.clone(), "0.9".to_string())));
        prop_assert_eq!(t.response.as_ref().map(|r| r.status), Some(0));
        prop_assert_eq!(t.response_body_len, body.len() as u64);
        prop_assert_eq!((t.request_seq, t.response_body_seq), (Some(SEQ_BASE), Some(SEQ_BASE)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// The pageview tracker's shortcut for request keys agrees with the URL parser wherever it
    /// answers, on hosts, ports and targets from tame to odd.
    #[test]
    fn simple_request_key_agrees_with_the_url_parser(
        host in prop_oneof![
            "[a-zA-Z0-9-]{1,12}(\\.[a-zA-Z0-9-]{1,12}){0,3}",
            "[0-9]{1,4}(\\.[0-9]{1,4}){0,4}",
            "(xn--|XN--)[a-z0-9]{1,8}\\.[a-z]{2,4}",
            "[a-z.]{0,10}",
        ],
        port in prop_oneof![Just(String::new()), "[0-9]{1,6}".prop_map(|p| format!(":{p}")), Just(":".to_string())],
        empty_host in any::<bool>(),
        target in prop_oneof![
            "/[a-zA-Z0-9/_.~!$&()*+,;=:@-]{0,30}(\\?[a-zA-Z0-9/_.~=&?%-]{0,20})?",
            "/[ -~]{0,30}",
            "(/\\.{1,3}){1,3}/?[a-z]{0,4}",
            "[a-z/]{0,10}",
        ],
    ) {
        let host = format!("{host}{port}");
        let h = if empty_host { Some("") } else { Some(host.as_str()) };
        let fast = rlm_core::pageview::simple_request_key(h, "10.9.0.1:8080", &target);
        if let Some(k) = fast {
            let slow = rlm_core::pageview::request_url(h, "10.9.0.1:8080", &target).and_then(|u| rlm_core::pageview::url_key(&u));
            prop_assert_eq!(Some(k), slow, "host {:?} target {:?}", h, target);
        }
    }
}

#[test]
fn simple_request_key_answers_the_common_cases_and_leaves_the_odd_ones() {
    use rlm_core::pageview::{request_url, simple_request_key, url_key};
    for (host, target) in [
        (Some("10.9.0.1"), "/small.html"),
        (Some("Shop.Example.com:8080"), "/img/a.gif?x=1&y=2"),
        (Some("shop.example.com:80"), "/"),
        (None, "/index.html?"),
        (Some(""), "/a/b/c.css"),
    ] {
        let fast = simple_request_key(host, "10.9.0.1:8080", target);
        assert!(fast.is_some(), "{host:?} {target:?}");
        assert_eq!(fast, request_url(host, "10.9.0.1:8080", target).and_then(|u| url_key(&u)));
    }
    assert_eq!(simple_request_key(Some("10.9.0.1"), "s", "/small.html").as_deref(), Some("10.9.0.1/small.html"));
    for (host, target) in [
        (Some("010.9.0.1"), "/"),
        (Some("10.9.1"), "/"),
        (Some("xn--bcher-kva.example"), "/"),
        (Some("h"), "/a/../b"),
        (Some("h"), "/a b"),
        (Some("h"), "/a#frag"),
        (Some("h"), "http://other/x"),
        (Some("h:080"), "/"),
    ] {
        assert_eq!(simple_request_key(host, "10.9.0.1:8080", target), None, "{host:?} {target:?}");
    }
}
