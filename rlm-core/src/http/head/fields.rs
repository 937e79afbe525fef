//! What header field values say: a field's value as text, a value's first token, the lengths
//! `Content-Length` and `Content-Range` give, and the request's navigation hints.

use super::escape::escape_bytes_past;
use super::split::{is_blank, trim_blanks, Field};
use super::Destination;

/// A field's value as text, if the field is there (the first of its name); escaped only as far
/// as rlm keeps a field ([`super::MAX_FIELD`], then cut by `RequestHead::bound_fields`).
pub(super) fn header_str(fields: &[Field<'_>], name: &str) -> Option<String> {
    fields.iter().find(|f| f.name.eq_ignore_ascii_case(name.as_bytes())).map(|f| escape_bytes_past(&f.value, super::MAX_FIELD))
}

/// The first token of a value, as Zeek's MIME code takes it (up to a blank, `,` or `;`).
pub(super) fn first_token(v: &[u8]) -> &[u8] {
    let v = trim_blanks(v);
    let end = v.iter().position(|b| is_blank(*b) || *b == b',' || *b == b';').unwrap_or(v.len());
    &v[..end]
}

/// A Content-Length value as Zeek and most servers read it: leading decimal digits (a sign or
/// anything else first makes it bad), fitting an i64.
pub(super) fn parse_content_length(v: &[u8]) -> Option<u64> {
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

/// The length of a `Content-Range: bytes first-last/size` (last - first + 1); None when it is
/// malformed, backwards or longer than a length can be.
pub(super) fn content_range_len(v: &str) -> Option<u64> {
    let v: String = v.chars().filter(|c| *c != ' ').collect();
    let spec = v.strip_prefix("bytes")?;
    let (range, _) = spec.split_once('/')?;
    let (f, l) = range.split_once('-')?;
    let (f, l): (u64, u64) = (f.parse().ok()?, l.parse().ok()?);
    // Checked: the numbers come from the wire (`bytes 0-18446744073709551615/1` would wrap), and
    // a length is no longer than a Content-Length can be.
    l.checked_sub(f)?.checked_add(1).filter(|n| *n <= i64::MAX as u64)
}

/// Whether the request's `Sec-Fetch-Dest`, or else its `Accept`, says the browser is navigating
/// or fetching a sub-resource.
pub(super) fn destination(fields: &[Field<'_>]) -> Destination {
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
