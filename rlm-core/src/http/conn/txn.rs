//! One request and its response, as the connection pairs them, and the byte counting Zeek's
//! line mode adds to some bodies.

use crate::http::decode::BodyDecoder;
use crate::http::embed::EmbedScanner;
use crate::http::head::{Anomalies, RequestHead, ResponseHead};
use crate::time::Timestamp;

/// One request and its response.
#[derive(Debug)]
pub struct Txn {
    /// 1-based position on the connection (Zeek's trans_depth).
    pub depth: u32,
    /// None for a response that arrived with no request to pair with.
    pub request: Option<RequestHead>,
    /// When the request began: the segment with its head's first byte (for an orphan response, the
    /// response's).
    pub request_ts: Timestamp,
    /// Sequence number of the request line's first byte.
    pub request_seq: Option<u32>,
    /// Body bytes on the wire (after de-chunking, before content decoding).
    pub request_body_len: u64,
    /// Size after content decoding (gzip, deflate), when the body was encoded and decoding is on.
    pub request_body_decoded: Option<u64>,
    /// The request is over: its body read (or it had none), or the client finished sending.
    pub request_done: bool,
    /// The final response head, once parsed (interim 1xx heads, 101 aside, are not kept here).
    pub response: Option<ResponseHead>,
    /// Interim (1xx) status seen before the final response.
    pub interim: Option<u16>,
    /// When the response began: the segment with the first response head's first byte (an interim
    /// one's, if any).
    pub response_first_ts: Option<Timestamp>,
    /// When the latest byte of the response was seen.
    pub response_last_ts: Option<Timestamp>,
    /// Sequence numbers of the final response's status line and of its body's first byte.
    pub response_seq: Option<u32>,
    /// Sequence number of the response body's first byte, set when its first bytes are delivered.
    pub response_body_seq: Option<u32>,
    /// Sequence number of the byte after the final response's end, when its head says where
    /// that is (a Content-Length under 2 GiB, or no body); `None` for chunked and
    /// close-delimited bodies. The SRPT classifier counts the remaining bytes down to it.
    pub response_end_seq: Option<u32>,
    /// Body bytes on the wire (after de-chunking, before content decoding).
    pub response_body_len: u64,
    /// Size after content decoding (gzip, deflate), when the body was encoded and decoding is on.
    pub response_body_decoded: Option<u64>,
    /// The final response is over: its body read to its framing's end (or it had none).
    pub response_done: bool,
    /// What was odd about the transaction (its heads' anomalies and the streams').
    pub anomalies: Anomalies,
    /// The embed scanner of an HTML/CSS response body, while the body is read.
    pub(super) scanner: Option<Box<EmbedScanner>>,
    /// Content decoders of the request and response bodies, while they are read.
    pub(super) req_decoder: Option<Box<BodyDecoder>>,
    pub(super) resp_decoder: Option<Box<BodyDecoder>>,
    /// A body Zeek reads line by line (close-delimited, or multipart), with what that adds.
    pub(super) zeek_lines: Option<LineCount>,
    pub(super) zeek_req_lines: Option<LineCount>,
}

/// What Zeek's line-mode body count adds to the bytes on the wire: every line end counts 2,
/// and a last line with no end gets 2 added when the body ends. In a close-delimited body a
/// bare LF or CR ends a line (so counts one more than it is); in a multipart body only CRLF
/// does (Zeek reads multipart parts with CRLF as the only line end).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LineCount {
    crlf_only: bool,
    extra: u64,
    after_cr: bool,
    partial: bool,
}

impl LineCount {
    /// The count for a multipart body (only CRLF ends a line); `default()` is the one for a
    /// close-delimited body.
    pub(super) fn multipart() -> LineCount {
        LineCount { crlf_only: true, ..LineCount::default() }
    }

    /// Count the next bytes of the body.
    pub(super) fn feed(&mut self, d: &[u8]) {
        if self.crlf_only {
            if let Some(&last) = d.last() {
                self.partial = !(last == b'\n' && (d.len() >= 2 && d[d.len() - 2] == b'\r' || d.len() == 1 && self.after_cr));
                self.after_cr = last == b'\r';
            }
            return;
        }
        for &b in d {
            match b {
                b'\n' => {
                    if !self.after_cr {
                        self.extra += 1;
                    }
                    self.after_cr = false;
                    self.partial = false;
                }
                b'\r' => {
                    if self.after_cr {
                        self.extra += 1;
                    }
                    self.after_cr = true;
                    self.partial = false;
                }
                _ => {
                    if self.after_cr {
                        self.extra += 1;
                    }
                    self.after_cr = false;
                    self.partial = true;
                }
            }
        }
    }
    /// What the line counting adds to the body's bytes, the body having ended here.
    fn total_extra(&self) -> u64 {
        if self.crlf_only {
            return if self.partial { 2 } else { 0 };
        }
        self.extra + u64::from(self.after_cr) + if self.partial { 2 } else { 0 }
    }
}

impl Txn {
    /// The transaction at `depth`, begun at `ts`: a request's, or (`None`) an orphan response's.
    pub(super) fn new(depth: u32, request: Option<RequestHead>, ts: Timestamp) -> Txn {
        Txn {
            depth,
            anomalies: request.as_ref().map(|r| r.anomalies).unwrap_or_default(),
            request,
            request_ts: ts,
            request_seq: None,
            request_body_len: 0,
            request_body_decoded: None,
            request_done: false,
            response: None,
            interim: None,
            response_first_ts: None,
            response_last_ts: None,
            response_seq: None,
            response_body_seq: None,
            response_end_seq: None,
            response_body_len: 0,
            response_body_decoded: None,
            response_done: false,
            scanner: None,
            req_decoder: None,
            resp_decoder: None,
            zeek_lines: None,
            zeek_req_lines: None,
        }
    }

    /// Body lengths as Zeek reports them: after content decoding where that was done.
    pub fn request_body_len_decoded(&self) -> u64 {
        self.request_body_decoded.unwrap_or(self.request_body_len + self.zeek_req_lines.map_or(0, |l| l.total_extra()))
    }
    /// Zeek's `response_body_len`: 0 when the server's answer was not an HTTP response, the
    /// decoded size of an encoded body, and for a close-delimited body read in Zeek's line mode,
    /// the bytes plus what its line counting adds.
    pub fn response_body_len_decoded(&self) -> u64 {
        if self.anomalies.contains(Anomalies::NOT_HTTP_RESPONSE) {
            return 0;
        }
        self.response_body_decoded.unwrap_or(self.response_body_len + self.zeek_lines.map_or(0, |l| l.total_extra()))
    }

    /// A body ended: its decoded size, and the anomaly if it did not decode.
    fn finish_decoding(decoder: &mut Option<Box<BodyDecoder>>, decoded: &mut Option<u64>, anomalies: &mut Anomalies) {
        if let Some(d) = decoder.take() {
            let (n, failed) = d.finish();
            *decoded = Some(n);
            if failed {
                anomalies.insert(Anomalies::UNDECODABLE_BODY);
            }
        }
    }

    /// The request body ended: its decoded size and whether it failed to decode, if it was
    /// being decoded.
    pub(super) fn finish_request_decoding(&mut self) {
        Txn::finish_decoding(&mut self.req_decoder, &mut self.request_body_decoded, &mut self.anomalies);
    }

    /// The response body ended: its decoded size and whether it failed to decode, if it was
    /// being decoded.
    pub(super) fn finish_response_decoding(&mut self) {
        Txn::finish_decoding(&mut self.resp_decoder, &mut self.response_body_decoded, &mut self.anomalies);
    }

    /// The request's method, if there was a request.
    pub fn method(&self) -> Option<&str> {
        self.request.as_ref().map(|r| r.method.as_str())
    }

    /// Whether the response is an HTML document (a container candidate).
    pub fn is_html(&self) -> bool {
        self.response
            .as_ref()
            .and_then(|r| r.content_type.as_deref())
            .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/html") || c.to_ascii_lowercase().starts_with("application/xhtml"))
    }
}
