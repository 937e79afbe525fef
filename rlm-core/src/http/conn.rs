//! One connection's HTTP/1.x: request and response streams, paired into transactions.
//!
//! Requests are parsed from the client's byte stream and queued; responses
//! from the server's stream pair with them first-in first-out, which covers
//! keep-alive and pipelining. Only head bytes are buffered; bodies are
//! counted as their framing dictates, and HTML/CSS bodies are fed through
//! the embed scanner on the way.

use std::collections::VecDeque;

use super::chunked::{ChunkStep, ChunkedDecoder};
use super::decode::BodyDecoder;
use super::embed::{EmbedRef, EmbedScanner};
use super::head::{self, Anomalies, Framing, RequestHead, ResponseHead, Version};
use crate::time::Timestamp;

/// Largest head we buffer before giving up on it.
pub const MAX_HEAD: usize = 32 * 1024;
/// Most transactions in flight on one connection (pipelined requests awaiting responses).
pub const MAX_PENDING: usize = 64;

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
    scanner: Option<Box<EmbedScanner>>,
    req_decoder: Option<Box<BodyDecoder>>,
    resp_decoder: Option<Box<BodyDecoder>>,
    /// A body Zeek reads line by line (close-delimited, or multipart), with what that adds.
    zeek_lines: Option<LineCount>,
    zeek_req_lines: Option<LineCount>,
}

/// What Zeek's line-mode body count adds to the bytes on the wire: every line end counts 2,
/// and a last line with no end gets 2 added when the body ends. In a close-delimited body a
/// bare LF or CR ends a line (so counts one more than it is); in a multipart body only CRLF
/// does (Zeek reads multipart parts with CRLF as the only line end).
#[derive(Clone, Copy, Debug, Default)]
struct LineCount {
    crlf_only: bool,
    extra: u64,
    after_cr: bool,
    partial: bool,
}

impl LineCount {
    fn multipart() -> LineCount {
        LineCount { crlf_only: true, ..LineCount::default() }
    }

    fn feed(&mut self, d: &[u8]) {
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
    fn total_extra(&self) -> u64 {
        if self.crlf_only {
            return if self.partial { 2 } else { 0 };
        }
        self.extra + u64::from(self.after_cr) + if self.partial { 2 } else { 0 }
    }
}

impl Txn {
    fn new(depth: u32, request: Option<RequestHead>, ts: Timestamp) -> Txn {
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

    fn finish_request_decoding(&mut self) {
        Txn::finish_decoding(&mut self.req_decoder, &mut self.request_body_decoded, &mut self.anomalies);
    }

    fn finish_response_decoding(&mut self) {
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

/// How a connection's bytes are read as HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// Scan HTML/CSS bodies for embedded objects.
    pub scan_embeds: bool,
    /// Stop parsing if the first bytes are not HTTP (when any port may carry HTTP).
    pub detect: bool,
    /// Decode gzip/deflate bodies to report their decoded size (as Zeek does). The inline
    /// path turns it off: it costs an inflate per encoded body and the appliance needs only
    /// wire sizes.
    pub decode_bodies: bool,
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
}

fn is_ws_line_end(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

impl HttpConn {
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

    /// Bytes sent by the client, in order; `seq` is the sequence number of the first.
    pub fn on_client_data(&mut self, now: Timestamp, seq: u32, mut d: &[u8], out: &mut Vec<HttpEvent>) {
        let total = d.len();
        // The sequence number of the first byte of what is left of `d`.
        let at = |rest: &[u8]| seq.wrapping_add((total - rest.len()) as u32);
        if self.detect && self.depth == 0 && self.req == Stream::Head && self.req_buf.is_empty() {
            let first = d.iter().position(|b| !b.is_ascii_whitespace()).map(|i| &d[i..]).unwrap_or(&[]);
            if !first.is_empty() && !starts_like_http_request(first) {
                self.give_up();
                return;
            }
        }
        while !d.is_empty() {
            match self.req {
                Stream::Head => {
                    if self.req_buf.is_empty() {
                        let skip = d.iter().take_while(|b| is_ws_line_end(**b)).count();
                        d = &d[skip..];
                        if d.is_empty() {
                            break;
                        }
                        self.req_head_ts = now;
                    }
                    match take_head(&mut self.req_buf, d, true) {
                        HeadTake::NeedMore => d = &[],
                        HeadTake::TooLarge => {
                            self.flag_last(Anomalies::HEAD_TOO_LARGE);
                            self.req = Stream::Resync;
                            d = &[];
                        }
                        HeadTake::Complete { head, consumed } => {
                            // The head's bytes end where `consumed` does.
                            let seq = at(&d[consumed..]).wrapping_sub(head.len() as u32);
                            d = &d[consumed..];
                            self.request_head(head, seq, out);
                        }
                        HeadTake::SimpleRequest { line, consumed, len } => {
                            // An HTTP/0.9 simple request is a single line with no version; the
                            // connection carries nothing else HTTP from the client.
                            let seq = at(&d[consumed..]).wrapping_sub(len as u32);
                            d = &[];
                            let req = RequestHead {
                                method: line.method,
                                uri: line.target,
                                zeek_uri: line.zeek_target,
                                version: Version::HTTP_09,
                                host: None,
                                referrer: None,
                                user_agent: None,
                                coding: head::Coding::Identity,
                                multipart: false,
                                framing: Framing::None,
                                destination: head::Destination::Unknown,
                                anomalies: line.anomalies,
                            };
                            self.push_request(req, seq, out);
                            self.req = Stream::Tunnel;
                        }
                    }
                }
                Stream::Length(rem) => {
                    let take = rem.min(d.len() as u64);
                    self.add_request_body(&d[..take as usize]);
                    d = &d[take as usize..];
                    if take == rem {
                        self.request_done(out);
                    } else {
                        self.req = Stream::Length(rem - take);
                    }
                }
                Stream::Chunked(mut dec) => {
                    let step = dec.feed(d);
                    self.req = Stream::Chunked(dec);
                    match step {
                        ChunkStep::Progress { consumed, data } => {
                            if let Some((s, n)) = data {
                                self.add_request_body(&d[s..s + n]);
                            }
                            d = &d[consumed..];
                        }
                        ChunkStep::Done { consumed } => {
                            d = &d[consumed..];
                            self.request_done(out);
                        }
                        ChunkStep::Error { consumed, .. } => {
                            d = &d[consumed..];
                            self.flag_last(Anomalies::BAD_CHUNKING);
                            self.request_done(out);
                            self.req = Stream::Resync;
                        }
                    }
                }
                Stream::Resync => match resync(d, starts_like_http_request) {
                    Some(p) => {
                        d = &d[p..];
                        self.req = Stream::Head;
                    }
                    None => d = &[],
                },
                Stream::UntilClose | Stream::Tunnel => d = &[],
            }
        }
    }

    /// Bytes sent by the server, in order; `seq` is the sequence number of the first.
    pub fn on_server_data(&mut self, now: Timestamp, seq: u32, mut d: &[u8], out: &mut Vec<HttpEvent>) {
        let total = d.len();
        // The sequence number of the first byte of what is left of `d`.
        let at = |rest: &[u8]| seq.wrapping_add((total - rest.len()) as u32);
        if self.detect && self.depth == 0 && self.resp == Stream::Head && self.resp_buf.is_empty() {
            // The server spoke first, before any request: not HTTP (SMTP, SSH, ...).
            self.give_up();
            return;
        }
        while !d.is_empty() {
            match self.resp {
                Stream::Head => {
                    // The answer to an HTTP/0.9 request is the bare body, whatever it starts with;
                    // otherwise a response that does not start with a status line is not HTTP.
                    let answers_09 = self.pending.get(self.resp_idx).and_then(|t| t.request.as_ref()).is_some_and(|r| r.version == Version::HTTP_09);
                    if self.resp_buf.is_empty() {
                        if !answers_09 {
                            let skip = d.iter().take_while(|b| is_ws_line_end(**b)).count();
                            d = &d[skip..];
                            if d.is_empty() {
                                break;
                            }
                        }
                        self.resp_head_ts = now;
                    }
                    let prefix: Vec<u8> = self.resp_buf.iter().chain(d.iter()).take(5).copied().collect();
                    if answers_09 || !prefix.eq_ignore_ascii_case(&b"HTTP/"[..prefix.len()]) {
                        if self.resp_idx >= self.pending.len() {
                            // Neither a request to answer nor a status line: not HTTP. A
                            // connection that never carried a transaction is given up on.
                            if self.depth == 0 {
                                self.give_up();
                                return;
                            }
                            self.resp_buf.clear();
                            self.resp = Stream::Resync;
                            continue;
                        }
                        // The head bytes buffered so far came just before `d`.
                        let buffered = std::mem::take(&mut self.resp_buf);
                        self.start_http09_response(now);
                        self.response_body(now, at(d).wrapping_sub(buffered.len() as u32), &buffered, out);
                        continue;
                    }
                    match take_head(&mut self.resp_buf, d, false) {
                        HeadTake::NeedMore | HeadTake::SimpleRequest { .. } => d = &[],
                        HeadTake::TooLarge => {
                            self.note_response_anomaly(Anomalies::HEAD_TOO_LARGE);
                            self.resp = Stream::Resync;
                            d = &[];
                        }
                        HeadTake::Complete { head, consumed } => {
                            let seq = at(&d[consumed..]).wrapping_sub(head.len() as u32);
                            d = &d[consumed..];
                            self.response_head(now, &head, seq, out);
                        }
                    }
                }
                Stream::Length(rem) => {
                    let take = rem.min(d.len() as u64) as usize;
                    self.response_body(now, at(d), &d[..take], out);
                    d = &d[take..];
                    if take as u64 == rem {
                        self.response_done(now, out);
                    } else {
                        self.resp = Stream::Length(rem - take as u64);
                    }
                }
                Stream::Chunked(mut dec) => {
                    let step = dec.feed(d);
                    self.resp = Stream::Chunked(dec);
                    self.touch_response(now);
                    match step {
                        ChunkStep::Progress { consumed, data } => {
                            if let Some((s, n)) = data {
                                self.response_body(now, at(&d[s..]), &d[s..s + n], out);
                            }
                            d = &d[consumed..];
                        }
                        ChunkStep::Done { consumed } => {
                            d = &d[consumed..];
                            self.response_done(now, out);
                        }
                        ChunkStep::Error { consumed, .. } => {
                            d = &d[consumed..];
                            self.note_response_anomaly(Anomalies::BAD_CHUNKING);
                            self.response_done(now, out);
                            self.resp = Stream::Resync;
                        }
                    }
                }
                Stream::UntilClose => {
                    self.response_body(now, at(d), d, out);
                    d = &[];
                }
                Stream::Resync => match resync(d, |s| s.len() >= 5 && s[..5].eq_ignore_ascii_case(b"HTTP/")) {
                    Some(p) => {
                        d = &d[p..];
                        self.resp = Stream::Head;
                    }
                    None => d = &[],
                },
                Stream::Tunnel => d = &[],
            }
        }
    }

    /// The client will send no more (FIN).
    pub fn on_client_end(&mut self, out: &mut Vec<HttpEvent>) {
        if let Some(t) = self.pending.back_mut() {
            if !t.request_done {
                t.anomalies.insert(Anomalies::TRUNCATED_BODY);
                t.request_done = true;
            }
        }
        self.req = Stream::Tunnel;
        self.drain(out);
    }

    /// The server will send no more (FIN): close-delimited bodies end here.
    pub fn on_server_end(&mut self, now: Timestamp, out: &mut Vec<HttpEvent>) {
        if self.resp == Stream::UntilClose {
            self.response_done(now, out);
        }
        self.resp = Stream::Tunnel;
    }

    /// `len` bytes of the client's stream were never seen (capture loss).
    pub fn on_client_gap(&mut self, len: u64) {
        match &mut self.req {
            Stream::Length(rem) if len < *rem => {
                *rem -= len;
                self.add_request_gap(len);
            }
            Stream::Chunked(dec) if dec.data_remaining().is_some_and(|r| len <= r) => {
                dec.skip_data(len);
                self.add_request_gap(len);
            }
            Stream::Tunnel | Stream::UntilClose => {}
            _ => {
                self.flag_last(Anomalies::CAPTURE_GAP);
                self.req_buf.clear();
                self.req = Stream::Resync;
            }
        }
        if let Some(t) = self.pending.back_mut() {
            t.anomalies.insert(Anomalies::CAPTURE_GAP);
        }
    }

    /// `len` bytes of the server's stream were never seen (capture loss).
    pub fn on_server_gap(&mut self, now: Timestamp, len: u64, out: &mut Vec<HttpEvent>) {
        self.note_response_anomaly(Anomalies::CAPTURE_GAP);
        match &mut self.resp {
            Stream::Length(rem) if len <= *rem => {
                *rem -= len;
                let done = *rem == 0;
                self.count_response_body(len);
                if done {
                    self.response_done(now, out);
                }
            }
            Stream::Chunked(dec) if dec.data_remaining().is_some_and(|r| len <= r) => {
                dec.skip_data(len);
                self.count_response_body(len);
            }
            Stream::UntilClose => self.count_response_body(len),
            Stream::Tunnel => {}
            _ => {
                self.resp_buf.clear();
                self.resp = Stream::Resync;
            }
        }
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

    // --- requests ---

    /// A request head, whose first byte has sequence number `seq`.
    fn request_head(&mut self, head: Vec<u8>, seq: u32, out: &mut Vec<HttpEvent>) {
        match head::parse_request(&head) {
            Ok(req) => self.push_request(req, seq, out),
            Err(_) => {
                // Not a request line (Zeek stops reading the client here). The server's answer
                // to it, if it answers in HTTP, is still recorded, flagged.
                self.bad_request_line = true;
                self.req = Stream::Resync;
            }
        }
    }

    fn push_request(&mut self, req: RequestHead, seq: u32, out: &mut Vec<HttpEvent>) {
        if self.pending.len() >= MAX_PENDING {
            // Far more pipelined requests than any browser sends: report the oldest unanswered.
            if let Some(mut t) = self.pending.pop_front() {
                t.anomalies.insert(Anomalies::NO_RESPONSE);
                t.scanner = None;
                self.resp_idx = self.resp_idx.saturating_sub(1);
                out.push(HttpEvent::Done(Box::new(t)));
            }
        }
        let http09 = req.version == Version::HTTP_09;
        if http09 && matches!(self.resp, Stream::Length(_) | Stream::Chunked(_) | Stream::UntilClose) {
            // A response under way (one the server sent unasked) ends here, as in Zeek: what
            // the server sends next answers this HTTP/0.9 request.
            let ts = self.req_head_ts;
            self.response_done(ts, out);
        }
        self.depth += 1;
        let framing = req.framing;
        let connect = req.method.eq_ignore_ascii_case("CONNECT");
        let (coding, multipart) = (req.coding, req.multipart);
        let mut t = Txn::new(self.depth, Some(req), self.req_head_ts);
        t.request_seq = Some(seq);
        if self.decode && !matches!(framing, Framing::None) {
            t.req_decoder = BodyDecoder::new(coding).map(Box::new);
        }
        if multipart && !matches!(framing, Framing::None) {
            t.zeek_req_lines = Some(LineCount::multipart());
        }
        self.req = match framing {
            Framing::Length(n) => Stream::Length(n),
            Framing::Chunked => Stream::Chunked(ChunkedDecoder::default()),
            _ => {
                t.request_done = true;
                Stream::Head
            }
        };
        if connect || http09 {
            // Whatever follows a CONNECT is the tunnel's; after an HTTP/0.9 request the client
            // sends nothing HTTP (the server answers with the bare body, then closes).
            t.request_done = true;
            self.req = Stream::Tunnel;
        }
        self.pending.push_back(t);
        out.push(HttpEvent::Request { depth: self.depth });
    }

    fn add_request_body(&mut self, data: &[u8]) {
        if let Some(t) = self.pending.back_mut() {
            t.request_body_len += data.len() as u64;
            if let Some(dec) = t.req_decoder.as_mut() {
                dec.feed(data);
            }
            if let Some(l) = t.zeek_req_lines.as_mut() {
                l.feed(data);
            }
        }
    }

    fn add_request_gap(&mut self, n: u64) {
        if let Some(t) = self.pending.back_mut() {
            t.request_body_len += n;
            if let Some(dec) = t.req_decoder.as_mut() {
                dec.gap();
            }
        }
    }

    fn request_done(&mut self, out: &mut Vec<HttpEvent>) {
        if let Some(t) = self.pending.back_mut() {
            t.request_done = true;
            t.finish_request_decoding();
        }
        self.req = Stream::Head;
        self.drain(out);
    }

    fn flag_last(&mut self, a: Anomalies) {
        if let Some(t) = self.pending.back_mut() {
            t.anomalies.insert(a);
        }
    }

    // --- responses ---

    /// The transaction the server is answering now; an orphan is created when there is none.
    fn current_response_txn(&mut self, ts: Timestamp) -> &mut Txn {
        if self.resp_idx >= self.pending.len() {
            self.depth += 1;
            let mut t = Txn::new(self.depth, None, ts);
            t.request_done = true;
            t.anomalies.insert(Anomalies::ORPHAN_RESPONSE);
            if std::mem::take(&mut self.bad_request_line) {
                t.anomalies.insert(Anomalies::BAD_REQUEST_LINE);
            }
            self.pending.push_back(t);
            self.resp_idx = self.pending.len() - 1;
        }
        &mut self.pending[self.resp_idx]
    }

    fn note_response_anomaly(&mut self, a: Anomalies) {
        if let Some(t) = self.pending.get_mut(self.resp_idx) {
            t.anomalies.insert(a);
        }
    }

    fn touch_response(&mut self, now: Timestamp) {
        if let Some(t) = self.pending.get_mut(self.resp_idx) {
            t.response_last_ts = Some(now);
        }
    }

    /// The server's answer does not start with a status line. To an HTTP/0.9 request that is
    /// the HTTP/0.9 response (status 0, the body runs to the close); to anything else it is not
    /// an HTTP response (flagged, its body length 0 as in Zeek), though its bytes are timed.
    fn start_http09_response(&mut self, now: Timestamp) {
        let ts = self.resp_head_ts;
        let t = self.current_response_txn(ts);
        let http09 = t.request.as_ref().is_some_and(|r| r.version == Version::HTTP_09);
        if http09 {
            t.response = Some(ResponseHead {
                status: 0,
                reason: None,
                version: Version::HTTP_09,
                content_type: None,
                coding: head::Coding::Identity,
                encoded: false,
                content_length: None,
                chunked: false,
                close: true,
                anomalies: Anomalies::default(),
            });
        } else {
            t.anomalies.insert(Anomalies::NOT_HTTP_RESPONSE);
        }
        t.response_first_ts = Some(ts);
        t.response_last_ts = Some(now);
        self.server_closes |= http09;
        self.resp = Stream::UntilClose;
    }

    /// A response head, whose first byte has sequence number `seq`.
    fn response_head(&mut self, now: Timestamp, head: &[u8], seq: u32, out: &mut Vec<HttpEvent>) {
        let (resp, inputs) = match head::parse_response(head) {
            Ok(x) => x,
            Err(_) => {
                self.note_response_anomaly(Anomalies::BAD_RESPONSE_HEAD);
                self.resp = Stream::Resync;
                return;
            }
        };
        let ts = self.resp_head_ts;
        let (scan, decode) = (self.scan, self.decode);
        self.server_closes |= resp.close;
        let server_closes = self.server_closes;
        let t = self.current_response_txn(ts);
        if t.response_first_ts.is_none() {
            t.response_first_ts = Some(ts);
        }
        t.response_last_ts = Some(now);
        if (100..200).contains(&resp.status) && resp.status != 101 {
            t.interim = Some(resp.status);
            self.resp = Stream::Head;
            return;
        }
        t.response_seq = Some(seq);
        let framing = head::response_framing(t.method(), &resp, inputs);
        let body_seq = seq.wrapping_add(head.len() as u32);
        t.response_end_seq = match framing {
            Framing::Length(n) if n < 1 << 31 => Some(body_seq.wrapping_add(n as u32)),
            Framing::None => Some(body_seq),
            _ => None,
        };
        t.anomalies.insert(resp.anomalies);
        let ct = resp.content_type.as_deref().unwrap_or("").to_ascii_lowercase();
        let html = ct.starts_with("text/html") || ct.starts_with("application/xhtml");
        let css = ct.starts_with("text/css");
        if scan && (html || css) && !matches!(framing, Framing::None | Framing::Tunnel) {
            if resp.encoded {
                t.anomalies.insert(Anomalies::ENCODED_CONTAINER);
            } else {
                t.scanner = Some(Box::new(if html { EmbedScanner::html() } else { EmbedScanner::css() }));
            }
        }
        if decode && !matches!(framing, Framing::None | Framing::Tunnel) {
            t.resp_decoder = BodyDecoder::new(resp.coding).map(Box::new);
        }
        let closes = server_closes || resp.close;
        let plain = matches!(resp.coding, head::Coding::Identity | head::Coding::Other);
        if ct.starts_with("multipart/") && plain && !matches!(framing, Framing::None | Framing::Tunnel) {
            t.zeek_lines = Some(LineCount::multipart());
        } else if framing == Framing::UntilClose && !closes && plain {
            t.zeek_lines = Some(LineCount::default());
        }
        t.response = Some(resp);
        let depth = t.depth;
        out.push(HttpEvent::ResponseHead { depth });
        match framing {
            Framing::None => self.response_done(now, out),
            Framing::Length(n) => self.resp = Stream::Length(n),
            Framing::Chunked => self.resp = Stream::Chunked(ChunkedDecoder::default()),
            Framing::UntilClose => self.resp = Stream::UntilClose,
            Framing::Tunnel => {
                self.response_done(now, out);
                self.resp = Stream::Tunnel;
                self.req = Stream::Tunnel;
            }
        }
    }

    /// Body bytes the capture lost: counted, but the rest of an encoded body cannot be decoded.
    fn count_response_body(&mut self, n: u64) {
        if let Some(t) = self.pending.get_mut(self.resp_idx) {
            t.response_body_len += n;
            if let Some(dec) = t.resp_decoder.as_mut() {
                dec.gap();
            }
            if let Some(sc) = t.scanner.as_mut() {
                sc.gap();
            }
        }
    }

    /// Body bytes in order (chunk framing removed); `seq` is the sequence number of the first.
    fn response_body(&mut self, now: Timestamp, seq: u32, data: &[u8], out: &mut Vec<HttpEvent>) {
        let Some(t) = self.pending.get_mut(self.resp_idx) else {
            return;
        };
        if t.response_body_seq.is_none() && !data.is_empty() {
            t.response_body_seq = Some(seq);
        }
        t.response_body_len += data.len() as u64;
        t.response_last_ts = Some(now);
        if let Some(dec) = t.resp_decoder.as_mut() {
            dec.feed(data);
        }
        if let Some(l) = t.zeek_lines.as_mut() {
            l.feed(data);
        }
        if let Some(sc) = t.scanner.as_mut() {
            let mut refs = Vec::new();
            sc.feed_at(data, seq, &mut refs);
            if !refs.is_empty() {
                out.push(HttpEvent::Embeds { depth: t.depth, refs });
            }
        }
    }

    fn response_done(&mut self, now: Timestamp, out: &mut Vec<HttpEvent>) {
        if let Some(t) = self.pending.get_mut(self.resp_idx) {
            t.response_done = true;
            t.scanner = None;
            t.finish_response_decoding();
            if t.response_last_ts.is_none() {
                t.response_last_ts = Some(now);
            }
            self.resp_idx += 1;
        }
        self.resp = Stream::Head;
        self.drain(out);
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
    // The first line just completed but no blank line yet: maybe an HTTP/0.9 request.
    if allow_simple && !buf[..prev].contains(&b'\n') {
        if let Some(nl) = memchr::memchr(b'\n', buf) {
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

/// Methods Zeek's HTTP signature knows (`dpd.sig`): where no port says HTTP, a client's first
/// bytes must start with one of them, then a blank.
const KNOWN_METHODS: &[&[u8]] = &[
    b"GET",
    b"POST",
    b"HEAD",
    b"PUT",
    b"OPTIONS",
    b"DELETE",
    b"QUERY",
    b"CONNECT",
    b"PATCH",
    b"TRACE",
    b"ACL",
    b"BASELINE-CONTROL",
    b"BIND",
    b"CHECKIN",
    b"CHECKOUT",
    b"COPY",
    b"LABEL",
    b"LINK",
    b"LOCK",
    b"MERGE",
    b"MKACTIVITY",
    b"MKCALENDAR",
    b"MKCOL",
    b"MKREDIRECTREF",
    b"MOVE",
    b"ORDERPATCH",
    b"PROPFIND",
    b"PROPPATCH",
    b"REBIND",
    b"REPORT",
    b"SEARCH",
    b"UNBIND",
    b"UNCHECKOUT",
    b"UNLINK",
    b"UNLOCK",
    b"UPDATE",
    b"VERSION-CONTROL",
    b"BCOPY",
    b"BDELETE",
    b"BMOVE",
    b"BPROPFIND",
    b"BPROPPATCH",
    b"NOTIFY",
    b"POLL",
    b"SUBSCRIBE",
    b"UNSUBSCRIBE",
    b"X-MS-ENUMATTS",
    b"MKWORKSPACE",
    b"RPC_IN_DATA",
    b"RPC_OUT_DATA",
];

/// Whether `s` (a client's first bytes, blanks skipped) can start an HTTP request: a known
/// method (or a prefix of one, when that is all there is so far).
fn starts_like_http_request(s: &[u8]) -> bool {
    KNOWN_METHODS.iter().any(|m| if s.len() <= m.len() { m.starts_with(s) } else { s.starts_with(m) })
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
