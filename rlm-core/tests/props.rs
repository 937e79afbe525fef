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

/// Serialise request/response pairs; return both streams and the expected (req_len, resp_len, status).
fn conversation(bodies: &[(Body, Body)]) -> (Vec<u8>, Vec<u8>, Vec<(u64, u64, u16)>) {
    let (mut client, mut server, mut expect) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (req, resp)) in bodies.iter().enumerate() {
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
        let (status, resp_len) = match (resp, method) {
            (_, "HEAD") => {
                server.extend(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n");
                (200, 0)
            }
            (Body::Length(n), _) => {
                server.extend(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {n}\r\n\r\n").into_bytes());
                server.extend(std::iter::repeat_n(b'<', *n));
                (200, *n as u64)
            }
            (Body::Chunked(sizes), _) => {
                server.extend(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n");
                server.extend(chunked(sizes, b'r'));
                (201, sizes.iter().sum::<usize>() as u64)
            }
            (Body::Bodiless, _) => {
                server.extend(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n");
                (304, 0)
            }
        };
        expect.push((req_len, resp_len, status));
    }
    (client, server, expect)
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
        let (client, server, expect) = conversation(&bodies);
        let mut h = HttpConn::new(false, HttpOptions { scan_embeds: true, detect: false, decode_bodies: true });
        let mut out = Vec::new();
        // The client pipelines everything, then the server answers everything.
        for seg in split(&client, &ccuts) {
            h.on_client_data(Timestamp(1), &seg, &mut out);
        }
        for seg in split(&server, &scuts) {
            h.on_server_data(Timestamp(2), &seg, &mut out);
        }
        let done: Vec<(u64, u64, u16)> = out.iter().filter_map(|e| match e {
            HttpEvent::Done(t) => Some((t.request_body_len, t.response_body_len, t.response.as_ref().map(|r| r.status).unwrap_or(0))),
            _ => None,
        }).collect();
        prop_assert_eq!(&done, &expect);
        prop_assert!(out.iter().all(|e| !matches!(e, HttpEvent::Done(t) if !t.anomalies.is_empty())));
    }

    #[test]
    fn http_parser_survives_arbitrary_bytes(
        client in prop::collection::vec(any::<u8>(), 0..600),
        server in prop::collection::vec(any::<u8>(), 0..600),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let mut h = HttpConn::new(false, HttpOptions { scan_embeds: true, detect: false, decode_bodies: true });
        let mut out = Vec::new();
        for seg in split(&client, &cuts) {
            h.on_client_data(Timestamp(1), &seg, &mut out);
        }
        for seg in split(&server, &cuts) {
            h.on_server_data(Timestamp(2), &seg, &mut out);
        }
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
