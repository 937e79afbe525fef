//! Body framing (RFC 9112 section 6.3, as Zeek applies it): the header fields that decide it,
//! and how the body of a request and of a response is delimited.

use super::fields::{first_token, parse_content_length};
use super::split::{trim_blanks, Field};
use super::{Anomalies, Framing, ResponseHead, Version};

/// What the fields that decide a body's framing say (see [`body_headers`]).
pub(super) struct BodyHeaders {
    /// The last `Content-Length` (a bad one reads as 0).
    pub(super) content_length: Option<u64>,
    /// `Transfer-Encoding` makes the body chunked.
    pub(super) chunked: bool,
    /// `Connection: close` (a response without a length then runs to the end of the connection).
    pub(super) close: bool,
    /// What was odd about the framing fields.
    pub(super) anomalies: Anomalies,
}

/// The fields that decide a body's framing. As in Zeek: the last valid Content-Length wins (a
/// different earlier one is flagged), a bad one means no body, and `Transfer-Encoding` is
/// chunked when its first coding is `chunked` on an HTTP/1.1 message (chunked named anywhere
/// else is flagged: a server may read it differently).
pub(super) fn body_headers(fields: &[Field<'_>], version: Version) -> BodyHeaders {
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

/// How a request's body is delimited: none for HTTP/0.9, else chunked, a length, or none (no or
/// a zero `Content-Length`).
pub(super) fn request_framing(version: Version, bh: &BodyHeaders) -> Framing {
    if version == Version::HTTP_09 {
        Framing::None
    } else if bh.chunked {
        Framing::Chunked
    } else {
        match bh.content_length {
            Some(0) | None => Framing::None,
            Some(n) => Framing::Length(n),
        }
    }
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
