//! Tests of head reading: head ends, request and status lines, fields, framing, URIs.

use super::*;

#[test]
fn head_end_with_crlf_and_lf() {
    assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY", 0), Some(27));
    assert_eq!(find_head_end(b"GET / HTTP/1.1\nHost: a\n\nBODY", 0), Some(24));
    assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nHost: a\r\n", 0), None);
    // Resuming the search just before where the last one stopped finds an end split across calls.
    let buf = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(find_head_end(buf, 25), Some(27));
}

#[test]
fn request_fields_and_framing() {
    let r = parse_request(b"POST /x?y=1 HTTP/1.1\r\nHost: shop\r\nReferer: http://shop/\r\nContent-Length: 0050\r\nAccept: image/webp,*/*\r\n\r\n")
        .unwrap();
    assert_eq!(r.method, "POST");
    assert_eq!(r.uri, "/x?y=1");
    assert_eq!(r.host.as_deref(), Some("shop"));
    assert_eq!(r.referrer.as_deref(), Some("http://shop/"));
    assert_eq!(r.framing, Framing::Length(50));
    assert_eq!(r.destination, Destination::Subresource);
}

#[test]
fn request_target_with_spaces() {
    let r = parse_request(b"GET /a b?c=\"d e\" HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    assert_eq!(r.uri, "/a b?c=\"d e\"");
    assert_eq!(r.host.as_deref(), Some("h"));
    // Zeek reads these as requests: an HTTP/0.9 line with a blank in its target, and a line
    // with no target at all.
    assert_eq!(parse_request(b"GET /a b\r\n\r\n").unwrap().version, Version::HTTP_09);
    assert_eq!(parse_request(b"GET  HTTP/1.1\r\n\r\n").unwrap().uri, "");
    // Found by the fuzzer: a single space in the request line.
    assert!(parse_request(b"GET \r\n\r\n").is_err());
}

#[test]
fn bad_content_lengths_are_flagged_and_ignored() {
    for cl in ["-1", "18446744073709551615", "+5", "99999999999999999999999"] {
        let head = format!("POST / HTTP/1.1\r\nContent-Length: {cl}\r\n\r\n");
        let r = parse_request(head.as_bytes()).unwrap();
        assert_eq!(r.framing, Framing::None, "{cl}");
        assert!(r.anomalies.contains(Anomalies::BAD_CONTENT_LENGTH), "{cl}");
    }
}

#[test]
fn transfer_encoding_with_chunked_anywhere_is_chunked_but_flagged() {
    let r = parse_request(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n").unwrap();
    assert_eq!(r.framing, Framing::Chunked);
    assert!(r.anomalies.contains(Anomalies::TE_NOT_CHUNKED_LAST));
    // Zeek (and so rlm) reads the first coding only: `gzip, chunked` is not chunked, flagged.
    let r = parse_request(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 2\r\n\r\n").unwrap();
    assert_eq!(r.framing, Framing::Length(2));
    assert!(r.anomalies.contains(Anomalies::TE_NOT_CHUNKED_LAST));
}

#[test]
fn navigation_hints() {
    let nav = parse_request(b"GET / HTTP/1.1\r\nSec-Fetch-Dest: document\r\nAccept: image/png\r\n\r\n").unwrap();
    assert_eq!(nav.destination, Destination::Document);
    let page = parse_request(b"GET / HTTP/1.1\r\nAccept: text/html,application/xhtml+xml\r\n\r\n").unwrap();
    assert_eq!(page.destination, Destination::Document);
    let none = parse_request(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(none.destination, Destination::Unknown);
}

#[test]
fn response_framing_rules() {
    let (h, i) = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n").unwrap();
    assert_eq!(response_framing(Some("GET"), &h, i), Framing::Length(10));
    assert_eq!(response_framing(Some("HEAD"), &h, i), Framing::None);
    let (h, i) = parse_response(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n").unwrap();
    assert_eq!(response_framing(Some("GET"), &h, i), Framing::None);
    let (h, i) = parse_response(b"HTTP/1.0 200 OK\r\n\r\n").unwrap();
    assert_eq!(response_framing(Some("GET"), &h, i), Framing::UntilClose);
    assert_eq!(response_framing(Some("CONNECT"), &h, i), Framing::Tunnel);
    let (h, i) = parse_response(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n").unwrap();
    assert_eq!(response_framing(Some("GET"), &h, i), Framing::Tunnel);
    let (h, i) = parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n").unwrap();
    assert_eq!(response_framing(Some("GET"), &h, i), Framing::Chunked);
}

#[test]
fn uris_unescape_as_zeek_does() {
    assert_eq!(unescape_uri("/a%20b"), "/a b");
    assert_eq!(unescape_uri("/plain"), "/plain");
    assert_eq!(unescape_uri("/x%"), "/x%");
    assert_eq!(unescape_uri("/x%4"), "/x%4");
    assert_eq!(unescape_uri("/x%%41"), "/xA");
    assert_eq!(unescape_uri("/x%zz"), "/x%zz");
    assert_eq!(unescape_uri("/x%u0041%u00e9"), "/xA\\xe9");
    assert_eq!(unescape_uri("/caf%C3%A9"), "/café");
    assert_eq!(unescape_uri("/%ff"), "/\\xff");
}

#[test]
fn request_lines_as_zeek_reads_them() {
    let l = parse_request_line(b"GET /zeek.html").unwrap();
    assert_eq!((l.method.as_str(), l.target.as_str(), l.version), ("GET", "/zeek.html", Version::HTTP_09));
    let l = parse_request_line(b"get / HTTP/1.1").unwrap();
    assert_eq!((l.method.as_str(), l.version), ("get", Version::HTTP_11));
    let l = parse_request_line(b"M-SEARCH * HTTP/1.1").unwrap();
    assert_eq!((l.method.as_str(), l.target.as_str()), ("M-SEARCH", "*"));
    // No target: Zeek leaves the URI empty.
    let l = parse_request_line(b"GET HTTP/1.1").unwrap();
    assert_eq!((l.target.as_str(), l.version), ("", Version::HTTP_11));
    // A version that is not digit.digit is recorded as 0.0 and flagged.
    let l = parse_request_line(b"GET / HTTP/x.y").unwrap();
    assert_eq!(l.version, Version::default());
    assert!(l.anomalies.contains(Anomalies::BAD_VERSION));
    // No version and blanks in the target: Zeek's URI loses its last character.
    let l = parse_request_line(b"GET /foo bar").unwrap();
    assert_eq!((l.target.as_str(), l.zeek_target.as_str()), ("/foo bar", "/foo ba"));
    // Not request lines: nothing before the blank, no blank, a 0.9 line with a short method.
    assert!(parse_request_line(b" / HTTP/1.1").is_none());
    assert!(parse_request_line(b"hello").is_none());
    assert!(parse_request_line(b"GE /x").is_none());
    assert!(parse_request_line(b"\x16\x03\x01 hello").is_none());
}

#[test]
fn status_lines_as_zeek_reads_them() {
    assert_eq!(parse_status_line(b"HTTP/1.1 200 OK"), Some((Version::HTTP_11, 200, Some("OK".into()))));
    assert_eq!(parse_status_line(b"HTTP/1.0 404"), Some((Version::HTTP_10, 404, None)));
    assert_eq!(parse_status_line(b"http/1.1 301 Moved Permanently"), Some((Version::HTTP_11, 301, Some("Moved Permanently".into()))));
    assert_eq!(parse_status_line(b"HTTP/1.1 abc x"), Some((Version::HTTP_11, 0, Some("x".into()))));
    assert_eq!(parse_status_line(b"HTTP/1.1"), None);
    assert_eq!(parse_status_line(b"<html>"), None);
}

#[test]
fn heads_with_lf_only_folding_and_junk_lines() {
    let r = parse_request(b"POST /x HTTP/1.1\nHost: a\nX-Long: one\n  two\nnot a header\nContent-Length: 3\n\n").unwrap();
    assert_eq!(r.host.as_deref(), Some("a"));
    assert_eq!(r.framing, Framing::Length(3));
    assert!(r.anomalies.contains(Anomalies::OBS_FOLD) && r.anomalies.contains(Anomalies::BAD_HEADER_LINE));
}

#[test]
fn content_length_as_zeek_reads_it() {
    // Duplicates: the last wins, flagged.
    let r = parse_request(b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n").unwrap();
    assert_eq!(r.framing, Framing::Length(7));
    assert!(r.anomalies.contains(Anomalies::CONFLICTING_CONTENT_LENGTH));
    // Leading digits count; chunked wins over a length on HTTP/1.1 only.
    assert_eq!(parse_request(b"POST / HTTP/1.1\r\nContent-Length: 12a\r\n\r\n").unwrap().framing, Framing::Length(12));
    let te = b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n";
    assert_eq!(parse_request(te).unwrap().framing, Framing::Length(4));
    let (h, _) = parse_response(b"HTTP/1.1 206 Partial\r\nContent-Range: bytes 0-99/1000\r\nContent-Length: 50\r\n\r\n").unwrap();
    assert_eq!(h.content_length, Some(100));
    // A span from the wire that would wrap, or be longer than a length can be: ignored.
    for range in ["0-18446744073709551615", "1-18446744073709551615", "9223372036854775808-18446744073709551615", "5-4"] {
        let head = format!("HTTP/1.1 206 Partial\r\nContent-Range: bytes {range}/1\r\nContent-Length: 50\r\n\r\n");
        assert_eq!(parse_response(head.as_bytes()).unwrap().0.content_length, Some(50), "{range}");
    }
}

#[test]
fn a_long_target_is_kept_cut_at_max_field_and_flagged() {
    let mut head = b"GET /".to_vec();
    head.extend((0..30 * 1024).map(|k| 0x80 + (k % 0x7f) as u8));
    head.extend_from_slice(b"?\xce\xbb HTTP/1.1\r\nHost: shop\r\nUser-Agent: ua\r\n\r\n");
    let r = parse_request(&head).expect("a request");
    assert!(r.uri.len() <= MAX_FIELD && r.uri.len() > MAX_FIELD - 4, "{}", r.uri.len());
    assert!(r.zeek_uri.len() <= MAX_FIELD);
    assert!(r.anomalies.contains(Anomalies::FIELD_TRUNCATED));
    assert_eq!((r.host.as_deref(), r.user_agent.as_deref()), (Some("shop"), Some("ua")));
    // Escaped as `\xNN`, cut at a character boundary.
    assert!(r.uri.starts_with("/\\x80\\x81"), "{}", &r.uri[..16]);
    let short = parse_request(b"GET /a HTTP/1.1\r\nHost: shop\r\n\r\n").expect("a request");
    assert!(!short.anomalies.contains(Anomalies::FIELD_TRUNCATED));
}

proptest::proptest! {
    /// Escaping stopped past a limit gives the whole escape's start: all of it when it is not
    /// longer than the limit, else at most 4 bytes past the limit.
    #[test]
    fn escape_bytes_past_is_a_bounded_prefix(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), limit in 0usize..700) {
        let whole = super::escape::escape_bytes(&b);
        let cut = super::escape::escape_bytes_past(&b, limit);
        proptest::prop_assert!(whole.starts_with(&cut));
        if whole.len() <= limit {
            proptest::prop_assert_eq!(&cut, &whole);
        } else {
            proptest::prop_assert!(cut.len() > limit && cut.len() <= limit + 4, "{} for {}", cut.len(), limit);
        }
    }
}
