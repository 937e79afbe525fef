//! Start lines as Zeek's HTTP analyzer reads them: the request line (method, target, version)
//! and the status line (version, code, reason).

use super::escape::{escape_bytes, escape_bytes_past};
use super::split::{is_blank, trim_blanks};
use super::{Anomalies, Version};

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
    // Escaped only as far as rlm keeps them (`RequestHead::bound_fields` cuts them there).
    let text = |b: &[u8]| escape_bytes_past(b, super::MAX_FIELD);
    Some(RequestLine { method: text(&line[..m]), target: text(target), zeek_target: text(zeek_target), version, anomalies })
}

/// A status line as Zeek reads it: `HTTP/x.y`, blanks, a 3-digit code (0 if not digits), and
/// an optional reason phrase. None when it is not a status line.
pub(super) fn parse_status_line(line: &[u8]) -> Option<(Version, u16, Option<String>)> {
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
