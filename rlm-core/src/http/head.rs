//! HTTP/1.x message heads: finding their end in a byte stream and parsing them leniently, the
//! way Zeek's HTTP analyzer and forgiving servers read them (see `docs/architecture.md`: httparse
//! is strict by design and rejects request lines that servers answer, so heads are split here).

use std::fmt;

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

/// One header field of a head: its name and value with surrounding blanks trimmed (folded
/// continuation lines joined with a space).
#[derive(Clone, Debug)]
pub struct Field<'a> {
    /// The field's name as sent.
    pub name: &'a [u8],
    /// The field's value (a folded continuation joined to it with a space).
    pub value: std::borrow::Cow<'a, [u8]>,
}

/// A head split into its start line and fields, read the way Zeek's HTTP analyzer and lenient
/// servers read it: lines end with CRLF or a bare LF; a line that starts with a blank continues
/// the field before it (obsolete folding, flagged); a line without a colon is skipped (flagged).
struct SplitHead<'a> {
    start: &'a [u8],
    fields: Vec<Field<'a>>,
    anomalies: Anomalies,
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn trim_blanks(mut v: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = v {
        if !is_blank(*first) {
            break;
        }
        v = rest;
    }
    while let [rest @ .., last] = v {
        if !is_blank(*last) {
            break;
        }
        v = rest;
    }
    v
}

fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = head.strip_suffix(b"\n").unwrap_or(head);
    body.split(|b| *b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

fn split_head(head: &[u8]) -> SplitHead<'_> {
    let mut it = lines(head).skip_while(|l| l.is_empty());
    let start = it.next().unwrap_or(&[]);
    let mut fields: Vec<Field<'_>> = Vec::new();
    let mut anomalies = Anomalies::default();
    for line in it {
        if line.is_empty() {
            break;
        }
        if is_blank(line[0]) {
            if let Some(last) = fields.last_mut() {
                anomalies.insert(Anomalies::OBS_FOLD);
                let v = last.value.to_mut();
                v.push(b' ');
                v.extend_from_slice(trim_blanks(line));
                continue;
            }
        }
        match memchr::memchr(b':', line) {
            Some(c) if c > 0 => fields.push(Field { name: trim_blanks(&line[..c]), value: trim_blanks(&line[c + 1..]).into() }),
            _ => anomalies.insert(Anomalies::BAD_HEADER_LINE),
        }
    }
    SplitHead { start, fields, anomalies }
}

/// A field's value as text, if the field is there (the first of its name).
fn header_str(fields: &[Field<'_>], name: &str) -> Option<String> {
    fields.iter().find(|f| f.name.eq_ignore_ascii_case(name.as_bytes())).map(|f| escape_bytes(&f.value))
}

/// The first token of a value, as Zeek's MIME code takes it (up to a blank, `,` or `;`).
fn first_token(v: &[u8]) -> &[u8] {
    let v = trim_blanks(v);
    let end = v.iter().position(|b| is_blank(*b) || *b == b',' || *b == b';').unwrap_or(v.len());
    &v[..end]
}

/// A Content-Length value as Zeek and most servers read it: leading decimal digits (a sign or
/// anything else first makes it bad), fitting an i64.
fn parse_content_length(v: &[u8]) -> Option<u64> {
    let v = first_token(v);
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut n: u64 = 0;
    for d in &v[..digits] {
        n = n.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    (n <= i64::MAX as u64).then_some(n)
}

struct BodyHeaders {
    content_length: Option<u64>,
    chunked: bool,
    /// `Connection: close` (a response without a length then runs to the end of the connection).
    close: bool,
    anomalies: Anomalies,
}

/// The fields that decide a body's framing. As in Zeek: the last valid Content-Length wins (a
/// different earlier one is flagged), a bad one means no body, and `Transfer-Encoding` is
/// chunked when its first coding is `chunked` on an HTTP/1.1 message (chunked named anywhere
/// else is flagged: a server may read it differently).
fn body_headers(fields: &[Field<'_>], version: Version) -> BodyHeaders {
    let mut out = BodyHeaders { content_length: None, chunked: false, close: false, anomalies: Anomalies::default() };
    for f in fields {
        if f.name.eq_ignore_ascii_case(b"content-length") {
            match parse_content_length(&f.value) {
                Some(n) => {
                    if out.content_length.is_some_and(|prev| prev != n) {
                        out.anomalies.insert(Anomalies::CONFLICTING_CONTENT_LENGTH);
                    }
                    out.content_length = Some(n);
                }
                None => {
                    out.anomalies.insert(Anomalies::BAD_CONTENT_LENGTH);
                    out.content_length = Some(0);
                }
            }
        } else if f.name.eq_ignore_ascii_case(b"transfer-encoding") {
            let codings: Vec<&[u8]> = f.value.split(|b| *b == b',').map(trim_blanks).filter(|c| !c.is_empty()).collect();
            let named = codings.iter().any(|c| c.eq_ignore_ascii_case(b"chunked"));
            let first = first_token(&f.value).eq_ignore_ascii_case(b"chunked");
            if first && version == Version::HTTP_11 {
                out.chunked = true;
            }
            if named && (codings.len() > 1 || !first || version != Version::HTTP_11) {
                out.anomalies.insert(Anomalies::TE_NOT_CHUNKED_LAST);
            }
        } else if f.name.eq_ignore_ascii_case(b"connection") && first_token(&f.value).eq_ignore_ascii_case(b"close") {
            out.close = true;
        }
    }
    if out.chunked && out.content_length.is_some() {
        out.anomalies.insert(Anomalies::CONTENT_LENGTH_AND_CHUNKED);
    }
    out
}

fn destination(fields: &[Field<'_>]) -> Destination {
    if let Some(d) = header_str(fields, "sec-fetch-dest") {
        return match d.to_ascii_lowercase().as_str() {
            "document" | "iframe" | "frame" | "embed" | "object" => Destination::Document,
            "" => Destination::Unknown,
            _ => Destination::Subresource,
        };
    }
    if let Some(a) = header_str(fields, "accept") {
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

/// Token characters of a method (RFC 9110 tchar, as Zeek's `is_HTTP_token_char`).
pub fn is_token_char(c: u8) -> bool {
    c > 31 && c < 127 && !b" \t()<>@,;:\\\"/[]?={}".contains(&c)
}

fn is_uri_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b":/?#[]@!$&'()*+,;=-_.~%".contains(&c)
}

fn starts_with_http(s: &[u8]) -> bool {
    s.len() >= 5 && s[..5].eq_ignore_ascii_case(b"HTTP/")
}

fn skip_blanks(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_blank(s[i]) {
        i += 1;
    }
    i
}

/// A request line as Zeek's HTTP analyzer reads it: a method of token characters, blanks, the
/// target (up to the blanks before `HTTP/`), and the version; no version is HTTP/0.9, which
/// needs a method of at least 3 characters and a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestLine {
    /// The method (token characters).
    pub method: String,
    /// The target as sent (everything between the method and the version, trimmed).
    pub target: String,
    /// The target as Zeek delimits it (the same but for a line without a version with blanks
    /// in its target, where Zeek drops its last character).
    pub zeek_target: String,
    /// The version (0.9 when there is none; 0.0 when it is not a digit, a dot and a digit).
    pub version: Version,
    /// `bad_version` when the version is not a digit, a dot and a digit.
    pub anomalies: Anomalies,
}

/// Read a request line as Zeek's HTTP analyzer does. `None` when it is not one: no method, no blank
/// after it, or (without a version) a method under 3 characters or no target.
pub fn parse_request_line(line: &[u8]) -> Option<RequestLine> {
    let m = line.iter().take_while(|c| is_token_char(**c)).count();
    if m == 0 {
        return None;
    }
    let rest_at = skip_blanks(line, m);
    if rest_at == m {
        return None;
    }
    let rest = &line[rest_at..];
    let mut anomalies = Anomalies::default();
    let mut eou = rest.iter().take_while(|c| is_uri_char(**c)).count();
    if eou >= rest.len() && starts_with_http(rest) {
        eou = 0;
    }
    let mut vs = eou;
    let mut found = false;
    while vs < rest.len() {
        eou = vs;
        vs = skip_blanks(rest, vs);
        if starts_with_http(&rest[vs..]) {
            found = true;
            break;
        }
        vs += 1;
    }
    let version = if !found {
        Version::HTTP_09
    } else if vs + 8 <= rest.len() {
        Version::parse(&rest[vs + 5..])
    } else {
        Version::default()
    };
    if found && version == Version::default() {
        anomalies.insert(Anomalies::BAD_VERSION);
    }
    let zeek_target = &rest[..eou.min(rest.len())];
    if version == Version::HTTP_09 && (m < 3 || zeek_target.is_empty()) {
        return None;
    }
    let target = if found { trim_blanks(&rest[..vs]) } else { trim_blanks(rest) };
    Some(RequestLine { method: escape_bytes(&line[..m]), target: escape_bytes(target), zeek_target: escape_bytes(zeek_target), version, anomalies })
}

/// A status line as Zeek reads it: `HTTP/x.y`, blanks, a 3-digit code (0 if not digits), and
/// an optional reason phrase. None when it is not a status line.
fn parse_status_line(line: &[u8]) -> Option<(Version, u16, Option<String>)> {
    if !starts_with_http(line) {
        return None;
    }
    let version = Version::parse(&line[5..]);
    let mut i = 5;
    while i < line.len() && !is_blank(line[i]) {
        i += 1;
    }
    if i >= line.len() {
        return None;
    }
    i = skip_blanks(line, i);
    if i + 3 > line.len() {
        return None;
    }
    let c = &line[i..i + 3];
    let code = if c.iter().all(u8::is_ascii_digit) { c.iter().fold(0u16, |n, d| n * 10 + (d - b'0') as u16) } else { 0 };
    i += 3;
    while i < line.len() && !is_blank(line[i]) {
        i += 1;
    }
    if i >= line.len() {
        return Some((version, code, None));
    }
    let r = skip_blanks(line, i);
    Some((version, code, Some(escape_bytes(&line[r..]))))
}

/// Parse a complete request head (through its empty line).
pub fn parse_request(head: &[u8]) -> Result<RequestHead, HeadError> {
    let h = split_head(head);
    let line = parse_request_line(h.start).ok_or(HeadError::Invalid)?;
    let bh = body_headers(&h.fields, line.version);
    let mut anomalies = bh.anomalies;
    anomalies.insert(h.anomalies);
    anomalies.insert(line.anomalies);
    if line.target != line.zeek_target || line.target.contains(' ') {
        anomalies.insert(Anomalies::ODD_REQUEST_LINE);
    }
    let framing = if line.version == Version::HTTP_09 {
        Framing::None
    } else if bh.chunked {
        Framing::Chunked
    } else {
        match bh.content_length {
            Some(0) | None => Framing::None,
            Some(n) => Framing::Length(n),
        }
    };
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
    })
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

/// The length of a `Content-Range: bytes first-last/size` (last - first + 1).
fn content_range_len(v: &str) -> Option<u64> {
    let v: String = v.chars().filter(|c| *c != ' ').collect();
    let spec = v.strip_prefix("bytes")?;
    let (range, _) = spec.split_once('/')?;
    let (f, l) = range.split_once('-')?;
    let (f, l): (u64, u64) = (f.parse().ok()?, l.parse().ok()?);
    (l >= f).then(|| l - f + 1)
}

/// Percent-decode a request target the way Zeek does for its `uri` field: `%XX` and `%uXXXX`
/// are decoded, a doubled `%` loses one, and malformed escapes are kept as written. Bytes that
/// do not form UTF-8 are written as `\xNN`, as Zeek's logs write them.
pub fn unescape_uri(uri: &str) -> String {
    let b = uri.as_bytes();
    if !b.contains(&b'%') {
        return uri.to_string();
    }
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let rest = &b[i + 1..];
        match rest {
            [] => {
                out.push(b'%');
                i += 1;
            }
            [c] => {
                out.extend_from_slice(&[b'%', *c]);
                i += 2;
            }
            [b'%', ..] => i += 1,
            [h, l, ..] if hex(*h).is_some() && hex(*l).is_some() => {
                out.push(hex(*h).unwrap_or(0) << 4 | hex(*l).unwrap_or(0));
                i += 3;
            }
            [b'u', a, b2, c, d, ..] if [a, b2, c, d].iter().all(|x| hex(**x).is_some()) => {
                let (a, b2, c, d) = (hex(*a).unwrap_or(0), hex(*b2).unwrap_or(0), hex(*c).unwrap_or(0), hex(*d).unwrap_or(0));
                if !(a == 0 && b2 == 0) {
                    out.push(a << 4 | b2);
                }
                out.push(c << 4 | d);
                i += 6;
            }
            [c, ..] => {
                out.extend_from_slice(&[b'%', *c]);
                i += 2;
            }
        }
    }
    escape_bytes(&out)
}

/// Bytes as text: valid UTF-8 as it is, anything else as `\xNN`.
pub fn escape_bytes(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        s.push_str(chunk.valid());
        for x in chunk.invalid() {
            s.push_str(&format!("\\x{x:02x}"));
        }
    }
    s
}

/// Extra header facts the response framing decision needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponseFramingInputs {
    /// The response has an `Upgrade` header (a 101 with one turns the connection into a tunnel).
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
        let r =
            parse_request(b"POST /x?y=1 HTTP/1.1\r\nHost: shop\r\nReferer: http://shop/\r\nContent-Length: 0050\r\nAccept: image/webp,*/*\r\n\r\n")
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
    }
}
