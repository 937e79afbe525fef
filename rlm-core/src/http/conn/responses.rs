//! The server's stream: response heads, paired with the requests first-in first-out, and
//! response bodies, fed to the embed scanner and the content decoder on the way.

use super::txn::{LineCount, Txn};
use super::{is_ws_line_end, resync, take_head, HeadTake, HttpConn, HttpEvent, Stream};
use crate::http::chunked::{ChunkStep, ChunkedDecoder};
use crate::http::decode::BodyDecoder;
use crate::http::embed::EmbedScanner;
use crate::http::head::{self, Anomalies, Framing, ResponseHead, Version};
use crate::time::Timestamp;

impl HttpConn {
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
                Stream::Head => d = self.read_response_head(now, d, &at, out),
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

    /// The server's stream is at a response head (`Stream::Head`): skip the line ends before
    /// it, and buffer it until it is complete; a complete head is parsed. An answer that does
    /// not start with a status line is an HTTP/0.9 response, or not HTTP. `at` gives the
    /// sequence number of a rest of `d`. Returns what is left of `d`.
    fn read_response_head<'d>(&mut self, now: Timestamp, mut d: &'d [u8], at: &impl Fn(&[u8]) -> u32, out: &mut Vec<HttpEvent>) -> &'d [u8] {
        // The answer to an HTTP/0.9 request is the bare body, whatever it starts with;
        // otherwise a response that does not start with a status line is not HTTP.
        let answers_09 = self.pending.get(self.resp_idx).and_then(|t| t.request.as_ref()).is_some_and(|r| r.version == Version::HTTP_09);
        if self.resp_buf.is_empty() {
            if !answers_09 {
                let skip = d.iter().take_while(|b| is_ws_line_end(**b)).count();
                d = &d[skip..];
                if d.is_empty() {
                    return d;
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
                    // Nothing more of the connection is read as HTTP.
                    return &[];
                }
                self.resp_buf.clear();
                self.resp = Stream::Resync;
                return d;
            }
            // The head bytes buffered so far came just before `d`.
            let buffered = std::mem::take(&mut self.resp_buf);
            self.start_http09_response(now);
            self.response_body(now, at(d).wrapping_sub(buffered.len() as u32), &buffered, out);
            return d;
        }
        match take_head(&mut self.resp_buf, d, false) {
            HeadTake::NeedMore | HeadTake::SimpleRequest { .. } => &[],
            HeadTake::TooLarge => {
                self.note_response_anomaly(Anomalies::HEAD_TOO_LARGE);
                self.resp = Stream::Resync;
                &[]
            }
            HeadTake::Complete { head, consumed } => {
                let seq = at(&d[consumed..]).wrapping_sub(head.len() as u32);
                d = &d[consumed..];
                self.response_head(now, &head, seq, out);
                d
            }
        }
    }

    /// The server will send no more (FIN): close-delimited bodies end here.
    pub fn on_server_end(&mut self, now: Timestamp, out: &mut Vec<HttpEvent>) {
        if self.resp == Stream::UntilClose {
            self.response_done(now, out);
        }
        self.resp = Stream::Tunnel;
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

    /// `len` bytes of the server's stream from `seq`, carried now but not seen (the end of a
    /// cut frame): body bytes are counted by length and timed, as if read; the scanner and the
    /// decoder skip them ([`HttpEvent::BodyUnseen`] when a container's references may lie in
    /// them). What would hold framing (a head, a chunk's size line) cannot be read: the stream
    /// looks for the next head, as after a gap, without flagging one (nothing was lost).
    pub fn on_server_absent(&mut self, now: Timestamp, mut seq: u32, len: u32, out: &mut Vec<HttpEvent>) {
        let mut left = u64::from(len);
        while left > 0 {
            match &mut self.resp {
                Stream::Length(rem) => {
                    let take = left.min(*rem);
                    *rem -= take;
                    let done = *rem == 0;
                    self.unseen_response_body(now, seq, take, out);
                    seq = seq.wrapping_add(take as u32);
                    left -= take;
                    if done {
                        self.response_done(now, out);
                    }
                }
                Stream::Chunked(dec) if dec.data_remaining().is_some_and(|r| left <= r) => {
                    dec.skip_data(left);
                    self.unseen_response_body(now, seq, left, out);
                    left = 0;
                }
                Stream::UntilClose => {
                    self.unseen_response_body(now, seq, left, out);
                    left = 0;
                }
                Stream::Tunnel | Stream::Resync => left = 0,
                Stream::Head | Stream::Chunked(_) => {
                    self.resp_buf.clear();
                    self.resp = Stream::Resync;
                    left = 0;
                }
            }
        }
    }

    /// Body bytes carried but not seen, from `seq`: counted and timed.
    fn unseen_response_body(&mut self, now: Timestamp, seq: u32, n: u64, out: &mut Vec<HttpEvent>) {
        self.count_response_body(n);
        if let Some(t) = self.pending.get_mut(self.resp_idx) {
            t.response_body_seq.get_or_insert(seq);
            t.response_last_ts = Some(now);
            if t.scanner.is_some() {
                out.push(HttpEvent::BodyUnseen { depth: t.depth });
            }
        }
    }

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

    /// Flag the transaction the server is answering now, if there is one.
    pub(super) fn note_response_anomaly(&mut self, a: Anomalies) {
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

    /// The response under way is over: its transaction is done on the server's side (and
    /// reported once it is on both), and the server's stream is at the next head.
    pub(super) fn response_done(&mut self, now: Timestamp, out: &mut Vec<HttpEvent>) {
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
}
