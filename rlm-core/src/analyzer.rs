//! A connection's application analyzer, chosen by what the connection carries, as Zeek's
//! analyzers are: the TCP tracker ([`crate::flow`]) hands it the connection's bytes in order
//! ([`StreamAnalyzer`]) and it reports what it finds to the engine.
//!
//! HTTP ([`crate::http`]: parser, per-connection state, records) is the one protocol today. The
//! next one gets its own `src/<protocol>/` with the same rooms, a variant here, and an event
//! enum over both protocols' events.

use crate::flow::{Conn, Dir, StreamAnalyzer};
use crate::http::{HttpConn, HttpEvent, HttpOptions};
use crate::time::Timestamp;

/// The application analyzer of one connection.
#[derive(Debug)]
pub enum Analyzer {
    /// HTTP/1.x, requests and responses, with the embedded objects of HTML and CSS bodies.
    Http(HttpConn),
}

impl Analyzer {
    /// An HTTP analyzer; `midstream`: the connection is joined after it started.
    pub fn http(midstream: bool, opts: HttpOptions) -> Analyzer {
        Analyzer::Http(HttpConn::new(midstream, opts))
    }

    /// The HTTP analyzer's state, if the connection is read as HTTP.
    pub fn as_http(&self) -> Option<&HttpConn> {
        match self {
            Analyzer::Http(h) => Some(h),
        }
    }

    /// Heap bytes it holds for later (partial heads, requests waiting for their responses).
    pub fn held_bytes(&self) -> usize {
        match self {
            Analyzer::Http(h) => h.held_bytes(),
        }
    }

    /// The analyzer found that its connection does not carry its protocol: it is dropped.
    pub fn gave_up(&self) -> bool {
        match self {
            Analyzer::Http(h) => h.not_http,
        }
    }
}

impl StreamAnalyzer for Analyzer {
    type Event = HttpEvent;

    fn on_data(&mut self, now: Timestamp, dir: Dir, seq: u32, data: &[u8], out: &mut Vec<HttpEvent>) {
        match (self, dir) {
            (Analyzer::Http(h), Dir::ToServer) => h.on_client_data(now, seq, data, out),
            (Analyzer::Http(h), Dir::ToClient) => h.on_server_data(now, seq, data, out),
        }
    }

    fn on_gap(&mut self, now: Timestamp, dir: Dir, len: u64, out: &mut Vec<HttpEvent>) {
        match (self, dir) {
            (Analyzer::Http(h), Dir::ToServer) => h.on_client_gap(len),
            (Analyzer::Http(h), Dir::ToClient) => h.on_server_gap(now, len, out),
        }
    }

    fn on_absent(&mut self, now: Timestamp, dir: Dir, seq: u32, len: u32, out: &mut Vec<HttpEvent>) {
        match (self, dir) {
            (Analyzer::Http(h), Dir::ToServer) => h.on_client_absent(len, out),
            (Analyzer::Http(h), Dir::ToClient) => h.on_server_absent(now, seq, len, out),
        }
    }

    fn on_end(&mut self, now: Timestamp, dir: Dir, out: &mut Vec<HttpEvent>) {
        match (self, dir) {
            (Analyzer::Http(h), Dir::ToServer) => h.on_client_end(out),
            (Analyzer::Http(h), Dir::ToClient) => h.on_server_end(now, out),
        }
    }

    fn on_close(&mut self, now: Timestamp, cut_off: bool, out: &mut Vec<HttpEvent>) {
        match self {
            Analyzer::Http(h) => h.close(now, cut_off, out),
        }
    }
}

impl Conn<Analyzer> {
    /// The connection's HTTP state, if it is read as HTTP.
    pub fn http(&self) -> Option<&HttpConn> {
        self.app.as_ref().and_then(Analyzer::as_http)
    }
}
