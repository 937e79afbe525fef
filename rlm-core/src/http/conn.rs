//! One connection's HTTP/1.x: request and response streams, paired into transactions.
//!
//! Requests are parsed from the client's byte stream and queued; responses
//! from the server's stream pair with them first-in first-out, which covers
//! keep-alive and pipelining. Only head bytes are buffered; bodies are
//! counted as their framing dictates, and HTML/CSS bodies are fed through
//! the embed scanner on the way.
//!
//! The client's stream is read in `requests`, the server's in `responses`; the transaction
//! they fill in is `txn`'s.

use std::collections::VecDeque;

use super::chunked::ChunkedDecoder;
use super::embed::EmbedRef;
use super::head::{self, Anomalies, RequestHead, Version};
use crate::time::Timestamp;

mod requests;
mod responses;
mod txn;

pub use txn::Txn;

/// Largest head we buffer before giving up on it.
pub const MAX_HEAD: usize = 32 * 1024;
/// Most transactions in flight on one connection (pipelined requests awaiting responses).
pub const MAX_PENDING: usize = 64;

/// What the HTTP layer tells the engine.
#[derive(Debug)]
pub enum HttpEvent {
    /// A request head was parsed; look it up with [`HttpConn::txn`].
    Request {
        /// The transaction's position on its connection ([`Txn::depth`]).
        depth: u32,
    },
    /// The final response head of a transaction was parsed.
    ResponseHead {
        /// The transaction's position on its connection ([`Txn::depth`]).
        depth: u32,
    },
    /// The response body revealed embedded object references.
    Embeds {
        /// The transaction's position on its connection ([`Txn::depth`]).
        depth: u32,
        /// The references found, in document order.
        refs: Vec<EmbedRef>,
    },
    /// Bytes of a scanned response body went by unseen (a cut frame): references in them are
    /// not in its list, which is therefore incomplete.
    BodyUnseen {
        /// The transaction's position on its connection ([`Txn::depth`]).
        depth: u32,
    },
    /// A transaction finished (both sides complete, or the connection ended).
    Done(Box<Txn>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Head,
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    /// Discarding bytes until something that looks like the start of a message at a line start.
    Resync,
    Tunnel,
}

/// The names of the request headers kept for the rules, shared by the connections (a thin
/// pointer: a connection's state has a budget).
pub type KeepHeaders = std::sync::Arc<Vec<Box<str>>>;

/// How a connection's bytes are read as HTTP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpOptions {
    /// Scan HTML/CSS bodies for embedded objects.
    pub scan_embeds: bool,
    /// Stop parsing if the first bytes are not HTTP (when any port may carry HTTP).
    pub detect: bool,
    /// Decode gzip/deflate bodies to report their decoded size (as Zeek does). The inline
    /// path turns it off: it costs an inflate per encoded body and the appliance needs only
    /// wire sizes.
    pub decode_bodies: bool,
    /// Request headers to keep in each request's head for the rules ([`RequestHead::kept`]),
    /// lower case; `None`: none.
    pub keep_headers: Option<KeepHeaders>,
}

/// HTTP state of one TCP connection.
#[derive(Debug)]
pub struct HttpConn {
    req: Stream,
    resp: Stream,
    /// Head bytes of the message being received on each side (empty almost always).
    req_buf: Vec<u8>,
    resp_buf: Vec<u8>,
    req_head_ts: Timestamp,
    resp_head_ts: Timestamp,
    pending: VecDeque<Txn>,
    /// Index in `pending` of the transaction the next response belongs to.
    resp_idx: usize,
    depth: u32,
    scan: bool,
    decode: bool,
    /// The server said `Connection: close` once (or answered HTTP/0.9): Zeek then reads
    /// close-delimited bodies as plain bytes, not lines.
    server_closes: bool,
    /// The client sent a line that is not a request line; the server's answer to it is flagged.
    bad_request_line: bool,
    /// Set when the connection turned out not to carry HTTP (only when any port may be HTTP).
    pub not_http: bool,
    /// Drop the connection from HTTP parsing if its first bytes are not HTTP.
    detect: bool,
    /// The request headers kept for the rules ([`HttpOptions::keep_headers`]).
    keep: Option<KeepHeaders>,
}

fn is_ws_line_end(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

impl HttpConn {
    /// Heap bytes the connection's HTTP state holds for later: partial heads and the requests
    /// waiting for their responses (at most [`MAX_HEAD`] each way and [`MAX_PENDING`] requests).
    pub fn held_bytes(&self) -> usize {
        let txn = std::mem::size_of::<Txn>();
        self.req_buf.capacity()
            + self.resp_buf.capacity()
            + self.pending.iter().map(|t| txn + t.request.as_ref().map_or(0, RequestHead::held_bytes)).sum::<usize>()
    }

    /// `midstream`: the capture joined the connection after it started, so both streams must
    /// first find a message boundary.
    pub fn new(midstream: bool, opts: HttpOptions) -> HttpConn {
        let start = if midstream { Stream::Resync } else { Stream::Head };
        HttpConn {
            req: start,
            resp: start,
            req_buf: Vec::new(),
            resp_buf: Vec::new(),
            req_head_ts: Timestamp::ZERO,
            resp_head_ts: Timestamp::ZERO,
            pending: VecDeque::new(),
            resp_idx: 0,
            depth: 0,
            scan: opts.scan_embeds,
            decode: opts.decode_bodies,
            server_closes: false,
            bad_request_line: false,
            not_http: false,
            detect: opts.detect,
            keep: opts.keep_headers,
        }
    }

    /// A transaction still in flight, by depth.
    pub fn txn(&self, depth: u32) -> Option<&Txn> {
        self.pending.iter().find(|t| t.depth == depth)
    }

    /// Transactions in flight.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// No request under way: every request answered whole, no request's bytes begun.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.req_buf.is_empty() && self.req == Stream::Head && self.resp == Stream::Head
    }

    /// The response under way is `depth`'s and the rest of its body, of a length its head gave,
    /// is read by nothing (no embed scanner, decoder or line count on it): its bytes need only
    /// be counted and timed, as absent ones are ([`HttpConn::on_server_absent`]).
    pub fn response_body_unread(&self, depth: u32) -> bool {
        let Some(t) = self.pending.get(self.resp_idx) else { return false };
        matches!(self.resp, Stream::Length(rem) if rem > 0)
            && t.depth == depth
            && t.scanner.is_none()
            && t.resp_decoder.is_none()
            && t.zeek_lines.is_none()
    }

    /// The server's stream is inside a body nothing reads (whichever response's), as
    /// [`HttpConn::response_body_unread`] says of the response under way: how many of its bytes
    /// are left.
    pub fn unread_body_left(&self) -> Option<u64> {
        match self.resp {
            Stream::Length(rem) if self.pending.get(self.resp_idx).is_some_and(|t| self.response_body_unread(t.depth)) => Some(rem),
            _ => None,
        }
    }

    /// True once either side stopped speaking HTTP (CONNECT tunnel, upgrade).
    pub fn is_tunnel(&self) -> bool {
        self.resp == Stream::Tunnel
    }

    fn give_up(&mut self) {
        self.not_http = true;
        self.req = Stream::Tunnel;
        self.resp = Stream::Tunnel;
        self.req_buf = Vec::new();
        self.resp_buf = Vec::new();
    }

    /// The connection is over (RST, both FINs, idle timeout, eviction, end of capture):
    /// every transaction still in flight is reported with what it has. `cut_off`: the end of
    /// the capture (or a shutdown) ended it, not the peers; what was unfinished is `incomplete`.
    pub fn close(&mut self, now: Timestamp, cut_off: bool, out: &mut Vec<HttpEvent>) {
        if self.resp == Stream::UntilClose {
            if cut_off {
                self.note_response_anomaly(Anomalies::INCOMPLETE);
            }
            self.response_done(now, out);
        }
        for mut t in self.pending.drain(..) {
            if cut_off && !(t.request_done && t.response_done) {
                t.anomalies.insert(Anomalies::INCOMPLETE);
            }
            if t.response.is_some() && !t.response_done {
                t.anomalies.insert(Anomalies::TRUNCATED_BODY);
            }
            if t.response.is_none() && t.interim.is_none() && t.response_first_ts.is_none() {
                t.anomalies.insert(Anomalies::NO_RESPONSE);
            }
            t.scanner = None;
            t.finish_request_decoding();
            t.finish_response_decoding();
            out.push(HttpEvent::Done(Box::new(t)));
        }
        self.resp_idx = 0;
        self.req = Stream::Tunnel;
        self.resp = Stream::Tunnel;
        self.req_buf = Vec::new();
        self.resp_buf = Vec::new();
    }

    /// Report the transactions at the front that are complete on both sides.
    fn drain(&mut self, out: &mut Vec<HttpEvent>) {
        while self.pending.front().is_some_and(|t| t.request_done && t.response_done) {
            let t = self.pending.pop_front().expect("front checked");
            self.resp_idx = self.resp_idx.saturating_sub(1);
            out.push(HttpEvent::Done(Box::new(t)));
        }
    }
}

enum HeadTake {
    NeedMore,
    TooLarge,
    /// The complete head, and how many bytes of the new input it used.
    Complete {
        head: Vec<u8>,
        consumed: usize,
    },
    /// An HTTP/0.9 simple request line, the input bytes it used, and its whole length.
    SimpleRequest {
        line: head::RequestLine,
        consumed: usize,
        len: usize,
    },
}

/// Add input to a head buffer; say whether the head is complete.
fn take_head(buf: &mut Vec<u8>, d: &[u8], allow_simple: bool) -> HeadTake {
    let prev = buf.len();
    let window = &d[..d.len().min((MAX_HEAD + 4).saturating_sub(prev))];
    if prev == 0 {
        // The usual case: a whole head at the start of a segment; copy the head only.
        if let Some(end) = head::find_head_end(window, 0) {
            return HeadTake::Complete { head: window[..end].to_vec(), consumed: end };
        }
    }
    buf.extend_from_slice(window);
    if let Some(end) = head::find_head_end(buf, prev) {
        buf.truncate(end);
        return HeadTake::Complete { head: std::mem::take(buf), consumed: end - prev };
    }
    // The first line just completed but no blank line yet: maybe an HTTP/0.9 request. The new
    // bytes are searched first: looking through the older ones at every segment was quadratic
    // in a long first line (a 30 KiB target in 1,400-byte segments), and they are looked at only
    // when a line ended in the new ones (up to their first newline).
    if allow_simple {
        let first_nl = memchr::memchr(b'\n', &buf[prev..]).filter(|_| !buf[..prev].contains(&b'\n')).map(|p| prev + p);
        if let Some(nl) = first_nl {
            let first = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
            if let Some(line) = head::parse_request_line(first).filter(|l| l.version == Version::HTTP_09) {
                buf.clear();
                return HeadTake::SimpleRequest { line, consumed: nl + 1 - prev, len: nl + 1 };
            }
        }
    }
    if buf.len() > MAX_HEAD {
        buf.clear();
        return HeadTake::TooLarge;
    }
    HeadTake::NeedMore
}

/// Find the first line start in `d` at which `matches` holds. The start of `d` counts as a
/// line start too: `d` begins a segment, and senders start messages at segment starts.
fn resync(d: &[u8], matches: impl Fn(&[u8]) -> bool) -> Option<usize> {
    if matches(d) {
        return Some(0);
    }
    let mut i = 0;
    while let Some(p) = memchr::memchr(b'\n', &d[i..]) {
        let start = i + p + 1;
        if start < d.len() && matches(&d[start..]) {
            return Some(start);
        }
        i = start;
    }
    None
}
