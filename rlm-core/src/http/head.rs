//! HTTP/1.x message heads: finding their end in a byte stream and parsing them with httparse.

use std::fmt;

/// Things a message did that a well-behaved peer does not; reported per transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Anomalies(u32);

macro_rules! anomalies {
    ($($name:ident = $bit:expr, $label:expr;)*) => {
        impl Anomalies {
            $(pub const $name: Anomalies = Anomalies(1 << $bit);)*
            const LABELS: &'static [(Anomalies, &'static str)] = &[$((Anomalies::$name, $label)),*];
        }
    };
}

anomalies! {
    BAD_CONTENT_LENGTH = 0, "bad_content_length";
    CONFLICTING_CONTENT_LENGTH = 1, "conflicting_content_length";
    BAD_CHUNKING = 2, "bad_chunking";
    HEAD_TOO_LARGE = 3, "head_too_large";
    BAD_REQUEST_HEAD = 4, "bad_request_head";
    BAD_RESPONSE_HEAD = 5, "bad_response_head";
    TRUNCATED_BODY = 6, "truncated_body";
    CAPTURE_GAP = 7, "capture_gap";
    ORPHAN_RESPONSE = 8, "orphan_response";
    HTTP09_RESPONSE = 9, "http09_response";
    TE_NOT_CHUNKED_LAST = 10, "te_chunked_not_last";
    MIDSTREAM = 11, "midstream";
    NO_RESPONSE = 12, "no_response";
    ENCODED_CONTAINER = 13, "encoded_container";
    INCOMPLETE = 14, "incomplete";
}

impl Anomalies {
    pub fn contains(self, other: Anomalies) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn insert(&mut self, other: Anomalies) {
        self.0 |= other.0;
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn labels(self) -> impl Iterator<Item = &'static str> {
        Self::LABELS.iter().filter(move |(a, _)| self.contains(*a)).map(|(_, l)| *l)
    }
}

impl fmt::Display for Anomalies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<_> = self.labels().collect();
        f.write_str(&v.join(","))
    }
}

/// HTTP version of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http09,
    Http10,
    Http11,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http09 => "0.9",
            Version::Http10 => "1.0",
            Version::Http11 => "1.1",
        }
    }
}

/// How a message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
    /// The connection stops being HTTP (CONNECT 2xx, 101 Switching Protocols).
    Tunnel,
}

/// What the request's headers say about whether the browser is navigating or fetching a sub-resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// `Sec-Fetch-Dest: document`/`iframe`, or an Accept that puts text/html first.
    Document,
    /// `Sec-Fetch-Dest` naming a sub-resource (image, script, style, font, ...), or an Accept of image/*, text/css, ...
    Subresource,
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub uri: String,
    pub version: Version,
    pub host: Option<String>,
    pub referrer: Option<String>,
    pub framing: Framing,
    pub destination: Destination,
    pub anomalies: Anomalies,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub version: Version,
    pub content_type: Option<String>,
    /// `Content-Encoding` other than identity (the body cannot be scanned as is).
    pub encoded: bool,
    pub content_length: Option<u64>,
    pub chunked: bool,
    pub anomalies: Anomalies,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// httparse rejected it.
    Invalid,
}

/// Index just past the end of a head (the empty line), searching from `from`.
/// Accepts CRLF and bare LF line endings.
pub fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = from.saturating_sub(3);
    let mut i = start;
    while let Some(p) = memchr::memchr(b'\n', &buf[i..]) {
        let nl = i + p;
        match buf.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            _ => {}
        }
        i = nl + 1;
    }
    None
}

/// A plausible method token: 3 to 16 uppercase letters, `-` or `_`.
pub fn is_method_token(t: &[u8]) -> bool {
    (3..=16).contains(&t.len()) && t.iter().all(|b| b.is_ascii_uppercase() || *b == b'-' || *b == b'_')
}

/// If the first line of `buf` is an HTTP/0.9 simple request (`METHOD URI` with no version),
/// its method, URI and the length of the line.
pub fn simple_request(buf: &[u8]) -> Option<(String, String, usize)> {
    let nl = memchr::memchr(b'\n', buf)?;
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let mut parts = line.split(|b| *b == b' ').filter(|p| !p.is_empty());
    let (m, u) = (parts.next()?, parts.next()?);
    if parts.next().is_some() || !is_method_token(m) || u.is_empty() {
        return None;
    }
    Some((String::from_utf8_lossy(m).into_owned(), String::from_utf8_lossy(u).into_owned(), nl + 1))
}

fn version_of(v: Option<u8>) -> Version {
    match v {
        Some(0) => Version::Http10,
        _ => Version::Http11,
    }
}

/// Parse a Content-Length value the way a careful server does: decimal digits only, fitting an i64.
fn parse_content_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for d in v {
        n = n.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    (n <= i64::MAX as u64).then_some(n)
}

struct BodyHeaders {
    content_length: Option<u64>,
    chunked: bool,
    anomalies: Anomalies,
}

fn body_headers(headers: &[httparse::Header<'_>]) -> BodyHeaders {
    let mut out = BodyHeaders { content_length: None, chunked: false, anomalies: Anomalies::default() };
    let mut bad_cl = false;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            match parse_content_length(h.value) {
                Some(n) => match out.content_length {
                    Some(prev) if prev != n => out.anomalies.insert(Anomalies::CONFLICTING_CONTENT_LENGTH),
                    _ => out.content_length = Some(n),
                },
                None => bad_cl = true,
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let codings: Vec<&[u8]> = h.value.split(|b| *b == b',').map(|c| c.trim_ascii()).collect();
            if codings.iter().any(|c| c.eq_ignore_ascii_case(b"chunked")) {
                out.chunked = true;
                if !codings.last().is_some_and(|c| c.eq_ignore_ascii_case(b"chunked")) {
                    out.anomalies.insert(Anomalies::TE_NOT_CHUNKED_LAST);
                }
            }
        }
    }
    if bad_cl {
        out.anomalies.insert(Anomalies::BAD_CONTENT_LENGTH);
    }
    if out.anomalies.contains(Anomalies::CONFLICTING_CONTENT_LENGTH) {
        out.content_length = None;
    }
    out
}

fn header_str(headers: &[httparse::Header<'_>], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| String::from_utf8_lossy(h.value.trim_ascii()).into_owned())
}

fn destination(headers: &[httparse::Header<'_>]) -> Destination {
    if let Some(d) = header_str(headers, "sec-fetch-dest") {
        return match d.to_ascii_lowercase().as_str() {
            "document" | "iframe" | "frame" | "embed" | "object" => Destination::Document,
            "" => Destination::Unknown,
            _ => Destination::Subresource,
        };
    }
    if let Some(a) = header_str(headers, "accept") {
        let first = a.split(',').next().unwrap_or("").trim().to_ascii_lowercase();
        if first.starts_with("text/html") || first.starts_with("application/xhtml") {
            return Destination::Document;
        }
        if first.starts_with("image/") || first.starts_with("text/css") || first.contains("javascript") || first.starts_with("font/") {
            return Destination::Subresource;
        }
    }
    Destination::Unknown
}

fn with_headers<'h, T>(f: impl Fn(&mut [httparse::Header<'h>]) -> Result<T, httparse::Error>) -> Result<T, HeadError> {
    let mut small = [httparse::EMPTY_HEADER; 64];
    match f(&mut small) {
        Ok(t) => Ok(t),
        Err(httparse::Error::TooManyHeaders) => {
            let mut big = vec![httparse::EMPTY_HEADER; 1024];
            f(&mut big).map_err(|_| HeadError::Invalid)
        }
        Err(_) => Err(HeadError::Invalid),
    }
}

fn lenient_parser() -> httparse::ParserConfig {
    let mut cfg = httparse::ParserConfig::default();
    cfg.allow_spaces_after_header_name_in_responses(true)
        .allow_obsolete_multiline_headers_in_responses(true)
        .allow_multiple_spaces_in_request_line_delimiters(true)
        .allow_multiple_spaces_in_response_status_delimiters(true)
        .ignore_invalid_headers_in_responses(true)
        .ignore_invalid_headers_in_requests(true);
    cfg
}

/// Parse a complete request head (through its empty line).
///
/// A request target with spaces in it (seen in the wild, and in Zeek's traces) is taken as
/// everything between the method and the last ` HTTP/x.y`, as servers that accept it do.
pub fn parse_request(head: &[u8]) -> Result<RequestHead, HeadError> {
    parse_request_inner(head).or_else(|e| {
        let nl = memchr::memchr(b'\n', head).ok_or(e)?;
        let line = head[..nl].strip_suffix(b"\r").unwrap_or(&head[..nl]);
        let first = memchr::memchr(b' ', line).ok_or(e)?;
        let last = memchr::memrchr(b' ', line).ok_or(e)?;
        if last <= first {
            return Err(e);
        }
        let (method, target, version) = (&line[..first], line[first + 1..last].trim_ascii(), &line[last + 1..]);
        if target.is_empty() || !is_method_token(method) || !version.starts_with(b"HTTP/") {
            return Err(e);
        }
        let mut fixed = Vec::with_capacity(head.len());
        fixed.extend_from_slice(method);
        fixed.extend_from_slice(b" / ");
        fixed.extend_from_slice(version);
        fixed.extend_from_slice(&head[nl.saturating_sub(usize::from(head[..nl].ends_with(b"\r")))..]);
        let mut req = parse_request_inner(&fixed)?;
        req.uri = String::from_utf8_lossy(target).into_owned();
        Ok(req)
    })
}

fn parse_request_inner(head: &[u8]) -> Result<RequestHead, HeadError> {
    with_headers(|hs| {
        let mut req = httparse::Request::new(hs);
        match lenient_parser().parse_request(&mut req, head)? {
            httparse::Status::Complete(_) => {}
            httparse::Status::Partial => return Err(httparse::Error::Token),
        }
        let headers = &*req.headers;
        let bh = body_headers(headers);
        let anomalies = bh.anomalies;
        let framing = if bh.chunked {
            Framing::Chunked
        } else if let Some(n) = bh.content_length {
            if n == 0 { Framing::None } else { Framing::Length(n) }
        } else {
            Framing::None
        };
        Ok(RequestHead {
            method: req.method.unwrap_or("").to_string(),
            uri: req.path.unwrap_or("").to_string(),
            version: version_of(req.version),
            host: header_str(headers, "host"),
            referrer: header_str(headers, "referer"),
            framing,
            destination: destination(headers),
            anomalies,
        })
    })
}

/// Parse a complete response head. `request_method` decides bodies of HEAD and CONNECT.
pub fn parse_response(head: &[u8]) -> Result<(ResponseHead, ResponseFramingInputs), HeadError> {
    with_headers(|hs| {
        let mut resp = httparse::Response::new(hs);
        match lenient_parser().parse_response(&mut resp, head)? {
            httparse::Status::Complete(_) => {}
            httparse::Status::Partial => return Err(httparse::Error::Token),
        }
        let headers = &*resp.headers;
        let bh = body_headers(headers);
        let encoded = header_str(headers, "content-encoding")
            .is_some_and(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"));
        let upgrade = header_str(headers, "upgrade").is_some();
        Ok((
            ResponseHead {
                status: resp.code.unwrap_or(0),
                version: version_of(resp.version),
                content_type: header_str(headers, "content-type"),
                encoded,
                content_length: bh.content_length,
                chunked: bh.chunked,
                anomalies: bh.anomalies,
            },
            ResponseFramingInputs { upgrade },
        ))
    })
}

/// Extra header facts the response framing decision needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponseFramingInputs {
    pub upgrade: bool,
}

/// RFC 9112 section 6.3: how the body of this response is delimited.
pub fn response_framing(request_method: Option<&str>, head: &ResponseHead, inputs: ResponseFramingInputs) -> Framing {
    let s = head.status;
    if s == 101 && inputs.upgrade {
        return Framing::Tunnel;
    }
    if request_method.is_some_and(|m| m.eq_ignore_ascii_case("CONNECT")) && (200..300).contains(&s) {
        return Framing::Tunnel;
    }
    if request_method.is_some_and(|m| m.eq_ignore_ascii_case("HEAD")) || (100..200).contains(&s) || s == 204 || s == 304 {
        return Framing::None;
    }
    if head.chunked {
        return Framing::Chunked;
    }
    match head.content_length {
        Some(0) => Framing::None,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    }
}

#[cfg(test)]
mod tests {
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
        let r = parse_request(b"POST /x?y=1 HTTP/1.1\r\nHost: shop\r\nReferer: http://shop/\r\nContent-Length: 0050\r\nAccept: image/webp,*/*\r\n\r\n").unwrap();
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
        assert!(parse_request(b"GET /a b\r\n\r\n").is_err());
        // Found by the fuzzer: a single space in the request line.
        assert!(parse_request(b"GET \r\n\r\n").is_err());
        assert!(parse_request(b"GET  HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn bad_content_lengths_are_flagged_and_ignored() {
        for cl in ["-1", "18446744073709551615", "12a", "99999999999999999999999"] {
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
    fn simple_requests() {
        assert_eq!(simple_request(b"GET /zeek.html\r\n"), Some(("GET".into(), "/zeek.html".into(), 16)));
        assert_eq!(simple_request(b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(simple_request(b"hello\r\n"), None);
    }
}
