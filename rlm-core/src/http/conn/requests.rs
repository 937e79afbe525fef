//! The client's stream: request heads, parsed and queued as transactions, and request bodies.

use super::txn::{LineCount, Txn};
use super::{is_ws_line_end, resync, take_head, HeadTake, HttpConn, HttpEvent, Stream, MAX_PENDING};
use crate::http::chunked::{ChunkStep, ChunkedDecoder};
use crate::http::decode::BodyDecoder;
use crate::http::head::{self, Anomalies, Framing, RequestHead, Version};
use crate::time::Timestamp;

impl HttpConn {
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
                Stream::Head => d = self.read_request_head(now, d, &at, out),
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

    /// The client's stream is at a request head (`Stream::Head`): skip the line ends before
    /// it, and buffer it until it is complete; a complete head is parsed and queued. `at` gives
    /// the sequence number of a rest of `d`. Returns what is left of `d`.
    fn read_request_head<'d>(&mut self, now: Timestamp, mut d: &'d [u8], at: &impl Fn(&[u8]) -> u32, out: &mut Vec<HttpEvent>) -> &'d [u8] {
        if self.req_buf.is_empty() {
            let skip = d.iter().take_while(|b| is_ws_line_end(**b)).count();
            d = &d[skip..];
            if d.is_empty() {
                return d;
            }
            self.req_head_ts = now;
        }
        match take_head(&mut self.req_buf, d, true) {
            HeadTake::NeedMore => &[],
            HeadTake::TooLarge => {
                self.flag_last(Anomalies::HEAD_TOO_LARGE);
                self.req = Stream::Resync;
                &[]
            }
            HeadTake::Complete { head, consumed } => {
                // The head's bytes end where `consumed` does.
                let seq = at(&d[consumed..]).wrapping_sub(head.len() as u32);
                d = &d[consumed..];
                self.request_head(head, seq, out);
                d
            }
            HeadTake::SimpleRequest { line, consumed, len } => {
                // An HTTP/0.9 simple request is a single line with no version; the
                // connection carries nothing else HTTP from the client.
                let seq = at(&d[consumed..]).wrapping_sub(len as u32);
                self.simple_request(line, seq, out);
                &[]
            }
        }
    }

    /// An HTTP/0.9 simple request line, whose first byte has sequence number `seq`: queued as
    /// a request, and the client's stream is a tunnel from here on.
    fn simple_request(&mut self, line: head::RequestLine, seq: u32, out: &mut Vec<HttpEvent>) {
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
            kept: Vec::new(),
        }
        .bound_fields();
        self.push_request(req, seq, out);
        self.req = Stream::Tunnel;
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

    /// `len` bytes of the client's stream, carried now but not seen (the end of a cut frame):
    /// body bytes are counted by length; what would hold framing cannot be read, and the stream
    /// looks for the next request, without flagging a gap (nothing was lost).
    pub fn on_client_absent(&mut self, len: u32, out: &mut Vec<HttpEvent>) {
        let mut left = u64::from(len);
        while left > 0 {
            match &mut self.req {
                Stream::Length(rem) => {
                    let take = left.min(*rem);
                    *rem -= take;
                    let done = *rem == 0;
                    self.add_request_gap(take);
                    left -= take;
                    if done {
                        self.request_done(out);
                    }
                }
                Stream::Chunked(dec) if dec.data_remaining().is_some_and(|r| left <= r) => {
                    dec.skip_data(left);
                    self.add_request_gap(left);
                    left = 0;
                }
                Stream::Tunnel | Stream::UntilClose | Stream::Resync => left = 0,
                Stream::Head | Stream::Chunked(_) => {
                    self.req_buf.clear();
                    self.req = Stream::Resync;
                    left = 0;
                }
            }
        }
    }

    /// A request head, whose first byte has sequence number `seq`.
    fn request_head(&mut self, head: Vec<u8>, seq: u32, out: &mut Vec<HttpEvent>) {
        match head::parse_request_keeping(&head, self.keep.as_deref().map_or(&[], Vec::as_slice)) {
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
