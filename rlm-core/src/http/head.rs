//! HTTP/1.x message heads: finding their end in a byte stream and parsing them leniently, the
//! way Zeek's HTTP analyzer and forgiving servers read them (see `docs/architecture.md`: httparse
//! is strict by design and rejects request lines that servers answer, so heads are split here).
//!
//! The parts: `split` (where a head ends, its lines split into the start line and fields),
//! `start_line` (request and status lines), `fields` (what header field values say), `framing`
//! (body framing, RFC 9112 section 6.3), `escape` (bytes and URIs as Zeek's logs write them).

use std::fmt;

mod escape;
mod fields;
mod framing;
mod split;
mod start_line;

#[cfg(test)]
mod tests;

pub use escape::{escape_bytes, unescape_uri};
pub use framing::{response_framing, ResponseFramingInputs};
pub use split::{find_head_end, Field};
pub use start_line::{is_token_char, parse_request_line, RequestLine};

use fields::{content_range_len, destination, first_token, header_str};
use framing::{body_headers, request_framing};
use split::split_head;
use start_line::parse_status_line;

/// Things a message did that a well-behaved peer does not; reported per transaction.
///
/// The flags, each with the label records report it by:
/// - `BAD_CONTENT_LENGTH` (`bad_content_length`): a `Content-Length` that is not a number (read
///   as 0).
/// - `CONFLICTING_CONTENT_LENGTH` (`conflicting_content_length`): `Content-Length` fields that
///   disagree (the last wins).
/// - `BAD_CHUNKING` (`bad_chunking`): chunked framing that broke; the body ends there and the
///   stream is resynchronised.
/// - `HEAD_TOO_LARGE` (`head_too_large`): a head longer than
///   [`MAX_HEAD`](crate::http::conn::MAX_HEAD), not parsed.
/// - `BAD_RESPONSE_HEAD` (`bad_response_head`): a response head starting `HTTP/` whose status
///   line does not parse.
/// - `TRUNCATED_BODY` (`truncated_body`): a body cut short: the client finished sending before
///   its request's end, or the connection ended before the response's.
/// - `CAPTURE_GAP` (`capture_gap`): bytes of the transaction never seen (capture loss).
/// - `ORPHAN_RESPONSE` (`orphan_response`): a response with no request to pair it with.
/// - `TE_NOT_CHUNKED_LAST` (`te_chunked_not_last`): `chunked` named in `Transfer-Encoding`
///   other than as the only coding of an HTTP/1.1 message (a server may frame it differently).
/// - `MIDSTREAM` (`midstream`): on a connection the capture joined after it started.
/// - `NO_RESPONSE` (`no_response`): no response came before the connection ended, or too many
///   requests were pipelined behind it.
/// - `ENCODED_CONTAINER` (`encoded_container`): an HTML or CSS body with a `Content-Encoding`,
///   not scanned for embedded objects.
/// - `INCOMPLETE` (`incomplete`): unfinished when the capture ended or the engine shut down.
/// - `UNDECODABLE_BODY` (`undecodable_body`): a gzip or deflate body that did not decode.
/// - `OBS_FOLD` (`obsolete_line_folding`): a header line continued on the next (obsolete line
///   folding).
/// - `BAD_HEADER_LINE` (`bad_header_line`): a header line without a colon (skipped).
/// - `BAD_VERSION` (`bad_version`): a request line whose version is not a digit, a dot and a
///   digit (recorded as 0.0).
/// - `ODD_REQUEST_LINE` (`odd_request_line`): a request target with blanks in it, or one Zeek
///   delimits differently.
/// - `CONTENT_LENGTH_AND_CHUNKED` (`content_length_and_chunked`): both a `Content-Length` and
///   chunked framing (chunked wins).
/// - `BAD_REQUEST_LINE` (`bad_request_line`): a response to a client line that is not a request
///   line.
/// - `NOT_HTTP_RESPONSE` (`not_http_response`): the server's answer to a request other than
///   HTTP/0.9 does not start with a status line (its body length is 0, as in Zeek).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Anomalies(u32);

macro_rules! anomalies {
    ($($name:ident = $bit:expr, $label:expr;)*) => {
        impl Anomalies {
            $(
                /// One flag, listed with its label on [`Anomalies`].
                pub const $name: Anomalies = Anomalies(1 << $bit);
            )*
            const LABELS: &'static [(Anomalies, &'static str)] = &[$((Anomalies::$name, $label)),*];
        }
    };
}

anomalies! {
    BAD_CONTENT_LENGTH = 0, "bad_content_length";
    CONFLICTING_CONTENT_LENGTH = 1, "conflicting_content_length";
    BAD_CHUNKING = 2, "bad_chunking";
    HEAD_TOO_LARGE = 3, "head_too_large";
    BAD_RESPONSE_HEAD = 5, "bad_response_head";
    TRUNCATED_BODY = 6, "truncated_body";
    CAPTURE_GAP = 7, "capture_gap";
    ORPHAN_RESPONSE = 8, "orphan_response";
    TE_NOT_CHUNKED_LAST = 10, "te_chunked_not_last";
    MIDSTREAM = 11, "midstream";
    NO_RESPONSE = 12, "no_response";
    ENCODED_CONTAINER = 13, "encoded_container";
    INCOMPLETE = 14, "incomplete";
    UNDECODABLE_BODY = 15, "undecodable_body";
    OBS_FOLD = 16, "obsolete_line_folding";
    BAD_HEADER_LINE = 17, "bad_header_line";
    BAD_VERSION = 18, "bad_version";
    ODD_REQUEST_LINE = 19, "odd_request_line";
    CONTENT_LENGTH_AND_CHUNKED = 20, "content_length_and_chunked";
    BAD_REQUEST_LINE = 21, "bad_request_line";
    NOT_HTTP_RESPONSE = 22, "not_http_response";
    FIELD_TRUNCATED = 23, "field_truncated";
}

impl Anomalies {
    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Anomalies) -> bool {
        self.0 & other.0 == other.0
    }
    /// Set the flags of `other`.
    pub fn insert(&mut self, other: Anomalies) {
        self.0 |= other.0;
    }
    /// Whether no flag is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The labels of the flags set, in bit order (as records list them).
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

/// HTTP version of a message: `HTTP/major.minor`, 0.9 for a request line without one, 0.0
/// for a version that is not a digit, a dot and a digit (as Zeek records it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version {
    /// The digit before the dot.
    pub major: u8,
    /// The digit after the dot.
    pub minor: u8,
}

impl Version {
    /// HTTP/0.9: a request line without a version.
    pub const HTTP_09: Version = Version { major: 0, minor: 9 };
    /// HTTP/1.0.
    pub const HTTP_10: Version = Version { major: 1, minor: 0 };
    /// HTTP/1.1.
    pub const HTTP_11: Version = Version { major: 1, minor: 1 };

    /// `major.minor`, as Zeek's `version` field writes it (`1.1`).
    pub fn as_str(self) -> String {
        format!("{}.{}", self.major, self.minor)
    }

    /// `[0-9].[0-9]` at the start of `v`, else 0.0.
    fn parse(v: &[u8]) -> Version {
        match v {
            [a, b'.', b, ..] if a.is_ascii_digit() && b.is_ascii_digit() => Version { major: a - b'0', minor: b - b'0' },
            _ => Version::default(),
        }
    }
}

/// How a message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// This many bytes (`Content-Length`).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes the connection (a response with neither length nor chunking).
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
    /// Neither header says (or `Sec-Fetch-Dest` is empty).
    Unknown,
}

/// A body's `Content-Encoding`, as far as the analyzer decodes it (Zeek decodes the same two).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Coding {
    /// No `Content-Encoding`, or `identity`.
    #[default]
    Identity,
    /// `gzip` or `x-gzip`.
    Gzip,
    /// `deflate` (zlib-wrapped, or raw as some servers send it).
    Deflate,
    /// Anything else (br, compress, ...): not decoded.
    Other,
}

impl Coding {
    fn of(fields: &[Field<'_>]) -> Coding {
        let Some(f) = fields.iter().find(|f| f.name.eq_ignore_ascii_case(b"content-encoding")) else {
            return Coding::Identity;
        };
        // The first token decides, as in Zeek.
        let first = first_token(&f.value);
        if first.is_empty() || first.eq_ignore_ascii_case(b"identity") {
            Coding::Identity
        } else if first.eq_ignore_ascii_case(b"gzip") || first.eq_ignore_ascii_case(b"x-gzip") {
            Coding::Gzip
        } else if first.eq_ignore_ascii_case(b"deflate") {
            Coding::Deflate
        } else {
            Coding::Other
        }
    }
}

/// The most bytes of one request field (target, method, Host, Referer, User-Agent) rlm keeps;
/// a longer one is cut at a character boundary and the head flagged `field_truncated`. Browsers
/// send targets of a few hundred bytes (and servers refuse past 8 KiB); a target of 30 KiB that
/// is not UTF-8 would be kept escaped at up to four times its length, twice.
pub const MAX_FIELD: usize = 8 * 1024;

/// `s` cut to `max` bytes at a character boundary; true if it was cut.
pub(crate) fn bound_field(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.shrink_to_fit();
    true
}

/// A parsed request head: its request line and the header fields rlm uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The method as sent (Zeek `method`).
    pub method: String,
    /// The request target as sent.
    pub uri: String,
    /// The target as Zeek delimits it (differs only for odd request lines).
    pub zeek_uri: String,
    /// The request's HTTP version (0.9 for a request line without one).
    pub version: Version,
    /// The `Host` header's value (Zeek `host`).
    pub host: Option<String>,
    /// The `Referer` header's value (Zeek `referrer`).
    pub referrer: Option<String>,
    /// The `User-Agent` header's value (Zeek `user_agent`).
    pub user_agent: Option<String>,
    /// The body's `Content-Encoding`.
    pub coding: Coding,
    /// A `multipart/*` body (Zeek counts its length line by line).
    pub multipart: bool,
    /// How the body is delimited: chunked, a length, or none (HTTP/0.9, or no or a zero
    /// `Content-Length`).
    pub framing: Framing,
    /// Whether the headers say the browser is navigating or fetching a sub-resource.
    pub destination: Destination,
    /// What was odd about the head (its request line, header lines and framing fields).
    pub anomalies: Anomalies,
    /// The headers the rules test (`HEADER.<name>`, `COOKIE.<name>`: their lower-case names as
    /// the parse was asked to keep them), each's first value, when the request has it.
    pub kept: Vec<(Box<str>, String)>,
}

impl rules::RequestFields for RequestHead {
    fn method(&self) -> &str {
        &self.method
    }

    fn header(&self, name: &str) -> Option<&str> {
        let named = |n: &str| name.eq_ignore_ascii_case(n);
        if named("host") {
            return self.host.as_deref();
        }
        if named("referer") {
            return self.referrer.as_deref();
        }
        if named("user-agent") {
            return self.user_agent.as_deref();
        }
        self.kept.iter().find(|(n, _)| named(n)).map(|(_, v)| v.as_str())
    }
}

impl RequestHead {
    /// Cut each kept field to [`MAX_FIELD`] bytes (flagging `field_truncated`).
    pub(crate) fn bound_fields(mut self) -> RequestHead {
        let mut cut = bound_field(&mut self.method, MAX_FIELD) | bound_field(&mut self.uri, MAX_FIELD) | bound_field(&mut self.zeek_uri, MAX_FIELD);
        for f in [&mut self.host, &mut self.referrer, &mut self.user_agent].into_iter().flatten().chain(self.kept.iter_mut().map(|(_, v)| v)) {
            cut |= bound_field(f, MAX_FIELD);
        }
        if cut {
            self.anomalies.insert(Anomalies::FIELD_TRUNCATED);
        }
        self
    }

    /// Heap bytes its fields hold.
    pub(crate) fn held_bytes(&self) -> usize {
        let opt = |o: &Option<String>| o.as_ref().map_or(0, String::capacity);
        self.method.capacity()
            + self.uri.capacity()
            + self.zeek_uri.capacity()
            + opt(&self.host)
            + opt(&self.referrer)
            + opt(&self.user_agent)
            + self.kept.iter().map(|(n, v)| n.len() + v.capacity() + std::mem::size_of::<(Box<str>, String)>()).sum::<usize>()
    }
}

/// A parsed response head: its status line and the header fields rlm uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code (Zeek `status_code`): 0 when its three characters are not digits, and for an
    /// HTTP/0.9 answer.
    pub status: u16,
    /// The reason phrase (Zeek's status_msg).
    pub reason: Option<String>,
    /// The response's HTTP version (Zeek `version`).
    pub version: Version,
    /// The `Content-Type` header's value, as sent.
    pub content_type: Option<String>,
    /// The body's `Content-Encoding`.
    pub coding: Coding,
    /// `Content-Encoding` other than identity (the body cannot be scanned as is).
    pub encoded: bool,
    /// The `Content-Length` (a bad one reads as 0; a 206's `Content-Range` span when that is longer
    /// and the body is not chunked).
    pub content_length: Option<u64>,
    /// `Transfer-Encoding` makes the body chunked (`chunked` its first coding, on HTTP/1.1).
    pub chunked: bool,
    /// `Connection: close`.
    pub close: bool,
    /// What was odd about the head (its header lines and framing fields).
    pub anomalies: Anomalies,
}

/// Why a head was not parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// The start line is not a request line (or not a status line).
    Invalid,
}

/// Parse a complete request head (through its empty line).
pub fn parse_request(head: &[u8]) -> Result<RequestHead, HeadError> {
    parse_request_keeping(head, &[])
}

/// [`parse_request`], keeping the first value of each header named in `keep` (lower case: the
/// rules' [`rules::RuleSet::headers_used`]) in [`RequestHead::kept`].
pub fn parse_request_keeping(head: &[u8], keep: &[Box<str>]) -> Result<RequestHead, HeadError> {
    let h = split_head(head);
    let line = parse_request_line(h.start).ok_or(HeadError::Invalid)?;
    let bh = body_headers(&h.fields, line.version);
    let mut anomalies = bh.anomalies;
    anomalies.insert(h.anomalies);
    anomalies.insert(line.anomalies);
    if line.target != line.zeek_target || line.target.contains(' ') {
        anomalies.insert(Anomalies::ODD_REQUEST_LINE);
    }
    let framing = request_framing(line.version, &bh);
    Ok(RequestHead {
        method: line.method,
        uri: line.target,
        zeek_uri: line.zeek_target,
        version: line.version,
        host: header_str(&h.fields, "host"),
        referrer: header_str(&h.fields, "referer"),
        user_agent: header_str(&h.fields, "user-agent"),
        coding: Coding::of(&h.fields),
        multipart: header_str(&h.fields, "content-type").is_some_and(|c| c.to_ascii_lowercase().starts_with("multipart/")),
        framing,
        destination: destination(&h.fields),
        anomalies,
        kept: keep.iter().filter_map(|n| header_str(&h.fields, n).map(|v| (n.clone(), v))).collect(),
    }
    .bound_fields())
}

/// Parse a complete response head.
pub fn parse_response(head: &[u8]) -> Result<(ResponseHead, ResponseFramingInputs), HeadError> {
    let h = split_head(head);
    let (version, status, reason) = parse_status_line(h.start).ok_or(HeadError::Invalid)?;
    let bh = body_headers(&h.fields, version);
    let mut anomalies = bh.anomalies;
    anomalies.insert(h.anomalies);
    let mut content_length = bh.content_length;
    if status == 206 && !bh.chunked {
        // A 206's Content-Range sets its length when it is longer (as Zeek reads it, against evasion).
        if let Some(r) = header_str(&h.fields, "content-range").as_deref().and_then(content_range_len) {
            if content_length.is_none_or(|n| n == 0 || r > n) {
                content_length = Some(r);
            }
        }
    }
    let upgrade = header_str(&h.fields, "upgrade").is_some();
    let coding = Coding::of(&h.fields);
    Ok((
        ResponseHead {
            status,
            reason,
            version,
            content_type: header_str(&h.fields, "content-type"),
            coding,
            encoded: coding != Coding::Identity,
            content_length,
            chunked: bh.chunked,
            close: bh.close,
            anomalies,
        },
        ResponseFramingInputs { upgrade },
    ))
}
