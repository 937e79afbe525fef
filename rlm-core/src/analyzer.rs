//! A connection's application analyzer, chosen by what the connection carries, as Zeek's
//! analyzers are: the TCP tracker ([`crate::flow`]) hands it the connection's bytes in order
//! ([`StreamAnalyzer`]) and it reports what it finds to the engine.
//!
//! Two protocols, each in its own `src/<protocol>/` with the same rooms: HTTP
//! ([`crate::http`]) and TLS ([`crate::tls`]). A connection starts `Pending`; the client's
//! first bytes choose: a ClientHello (or, joined mid-stream, a TLS record header) makes it TLS,
//! anything else HTTP, and so does a server that speaks first. On a port read as HTTP whatever
//! it carries (a configured server port, or Zeek's HTTP ports), a ClientHello gets both until
//! the server's first bytes decide (Zeek's dynamic protocol detection keeps both logs of a
//! ClientHello sent to an HTTP server).

use crate::flow::{Conn, Dir, StreamAnalyzer};
use crate::http::{HttpConn, HttpEvent, HttpOptions};
use crate::time::Timestamp;
use crate::tls::{TlsConn, TlsEvent};

/// What an analyzer reports.
#[derive(Debug)]
pub enum AppEvent {
    /// The HTTP analyzer's.
    Http(HttpEvent),
    /// The TLS analyzer's.
    Tls(TlsEvent),
}

/// The application analyzer of one connection.
#[derive(Debug)]
pub enum Analyzer {
    /// Nothing read yet: the first bytes choose (`midstream`: joined after it began; `opts`:
    /// how HTTP is read, if it is HTTP).
    #[allow(missing_docs)]
    Pending { midstream: bool, opts: HttpOptions },
    /// HTTP/1.x, requests and responses, with the embedded objects of HTML and CSS bodies.
    Http(HttpConn),
    /// TLS: the handshake in the clear, then records' types, lengths and times.
    Tls(Box<TlsConn>),
    /// A ClientHello on a port read as HTTP: both, until the server's first bytes decide.
    Probe(Box<(HttpConn, TlsConn)>),
}

/// Whether a client's first bytes open TLS: a ClientHello (a handshake record or an SSLv2
/// hello), or, on a connection joined mid-stream, a record header of TLS.
fn client_opens_tls(data: &[u8], midstream: bool) -> bool {
    match data {
        [0x16, ..] if data.len() < 6 => true,
        [t, 3, minor, ..] if midstream => (20..=24).contains(t) && *minor <= 4,
        _ => crate::tls::parser::opens_tls(data),
    }
}

/// Whether a server's first bytes are a TLS record header.
fn server_speaks_tls(data: &[u8]) -> bool {
    matches!(data, [t, 3, minor, ..] if (20..=24).contains(t) && *minor <= 4) || matches!(data, [t] | [t, 3] if (20..=24).contains(t))
}

impl Analyzer {
    /// A connection's analyzer before its first bytes; `midstream`: it was joined after it
    /// started; `opts`: how HTTP is read, if it is HTTP.
    pub fn pending(midstream: bool, opts: HttpOptions) -> Analyzer {
        Analyzer::Pending { midstream, opts }
    }

    /// An HTTP analyzer; `midstream`: the connection is joined after it started.
    pub fn http(midstream: bool, opts: HttpOptions) -> Analyzer {
        Analyzer::Http(HttpConn::new(midstream, opts))
    }

    /// The HTTP analyzer's state, if the connection is read as HTTP.
    pub fn as_http(&self) -> Option<&HttpConn> {
        match self {
            Analyzer::Http(h) => Some(h),
            Analyzer::Probe(b) => Some(&b.0),
            _ => None,
        }
    }

    /// The TLS analyzer's state, if the connection is read as TLS.
    pub fn as_tls(&self) -> Option<&TlsConn> {
        match self {
            Analyzer::Tls(t) => Some(t),
            Analyzer::Probe(b) => Some(&b.1),
            _ => None,
        }
    }

    /// Heap bytes it holds for later (partial heads, requests waiting for their responses,
    /// handshake messages being reassembled).
    pub fn held_bytes(&self) -> usize {
        match self {
            Analyzer::Pending { .. } => 0,
            Analyzer::Http(h) => h.held_bytes(),
            Analyzer::Tls(t) => t.held_bytes(),
            Analyzer::Probe(b) => b.0.held_bytes() + b.1.held_bytes(),
        }
    }

    /// The analyzer found that its connection does not carry its protocol: it is dropped.
    pub fn gave_up(&self) -> bool {
        match self {
            Analyzer::Http(h) => h.not_http,
            Analyzer::Tls(t) => t.not_tls(),
            Analyzer::Pending { .. } | Analyzer::Probe(_) => false,
        }
    }

    /// The first bytes of `dir` choose the protocol of a pending analyzer.
    fn choose(&mut self, dir: Dir, data: &[u8]) {
        let Analyzer::Pending { midstream, ref opts } = *self else { return };
        let opts = opts.clone();
        *self = match dir {
            Dir::ToServer if client_opens_tls(data, midstream) => {
                if opts.detect {
                    Analyzer::Tls(Box::new(TlsConn::new(midstream)))
                } else {
                    Analyzer::Probe(Box::new((HttpConn::new(midstream, opts), TlsConn::new(midstream))))
                }
            }
            _ => Analyzer::http(midstream, opts),
        };
    }

    /// A probe's server spoke first: TLS or HTTP from here on; the other is closed, its
    /// events (a TLS session flagged `server_not_tls`, an HTTP transaction) reported.
    fn settle(&mut self, now: Timestamp, data: &[u8], out: &mut Vec<AppEvent>) {
        if !matches!(self, Analyzer::Probe(_)) {
            return;
        }
        let placeholder = Analyzer::Pending { midstream: false, opts: HttpOptions::default() };
        let Analyzer::Probe(both) = std::mem::replace(self, placeholder) else { return };
        let (mut http, mut tls) = *both;
        *self = if server_speaks_tls(data) {
            http_into(out, |e| http.close(now, false, e));
            Analyzer::Tls(Box::new(tls))
        } else {
            tls.not_answered_in_tls();
            tls_into(out, |e| tls.close(e));
            Analyzer::Http(http)
        };
    }
}

/// Collects a TLS analyzer's events as [`AppEvent`]s.
fn tls_into(out: &mut Vec<AppEvent>, f: impl FnOnce(&mut Vec<TlsEvent>)) {
    let mut evs = Vec::new();
    f(&mut evs);
    out.extend(evs.into_iter().map(AppEvent::Tls));
}

/// Collects an HTTP analyzer's events as [`AppEvent`]s.
fn http_into(out: &mut Vec<AppEvent>, f: impl FnOnce(&mut Vec<HttpEvent>)) {
    let mut evs = Vec::new();
    f(&mut evs);
    out.extend(evs.into_iter().map(AppEvent::Http));
}

impl StreamAnalyzer for Analyzer {
    type Event = AppEvent;

    fn on_data(&mut self, now: Timestamp, dir: Dir, seq: u32, data: &[u8], out: &mut Vec<AppEvent>) {
        self.choose(dir, data);
        if dir == Dir::ToClient {
            self.settle(now, data, out);
        }
        match (self, dir) {
            (Analyzer::Http(h), Dir::ToServer) => http_into(out, |e| h.on_client_data(now, seq, data, e)),
            (Analyzer::Http(h), Dir::ToClient) => http_into(out, |e| h.on_server_data(now, seq, data, e)),
            (Analyzer::Tls(t), dir) => tls_into(out, |e| t.on_data(now, dir == Dir::ToServer, data, e)),
            (Analyzer::Probe(b), _) => {
                let (h, t) = &mut **b;
                http_into(out, |e| h.on_client_data(now, seq, data, e));
                tls_into(out, |e| t.on_data(now, true, data, e));
            }
            (Analyzer::Pending { .. }, _) => {}
        }
    }

    fn on_gap(&mut self, now: Timestamp, dir: Dir, len: u64, out: &mut Vec<AppEvent>) {
        match (self, dir) {
            (Analyzer::Http(h), Dir::ToServer) => h.on_client_gap(len),
            (Analyzer::Http(h), Dir::ToClient) => http_into(out, |e| h.on_server_gap(now, len, e)),
            (Analyzer::Tls(t), dir) => t.on_gap(dir == Dir::ToServer),
            (Analyzer::Probe(b), _) => {
                b.0.on_client_gap(len);
                b.1.on_gap(true);
            }
            (Analyzer::Pending { .. }, _) => {}
        }
    }

    fn on_absent(&mut self, now: Timestamp, dir: Dir, seq: u32, len: u32, out: &mut Vec<AppEvent>) {
        match (self, dir) {
            (Analyzer::Http(h), Dir::ToServer) => http_into(out, |e| h.on_client_absent(len, e)),
            (Analyzer::Http(h), Dir::ToClient) => http_into(out, |e| h.on_server_absent(now, seq, len, e)),
            // Bytes not seen cut a record: its framing is lost.
            (Analyzer::Tls(t), dir) => t.on_gap(dir == Dir::ToServer),
            (Analyzer::Probe(b), _) => {
                http_into(out, |e| b.0.on_client_absent(len, e));
                b.1.on_gap(true);
            }
            (Analyzer::Pending { .. }, _) => {}
        }
    }

    fn on_end(&mut self, now: Timestamp, dir: Dir, out: &mut Vec<AppEvent>) {
        match (self, dir) {
            (Analyzer::Http(h), Dir::ToServer) => http_into(out, |e| h.on_client_end(e)),
            (Analyzer::Http(h), Dir::ToClient) => http_into(out, |e| h.on_server_end(now, e)),
            (Analyzer::Probe(b), Dir::ToServer) => http_into(out, |e| b.0.on_client_end(e)),
            _ => {}
        }
    }

    fn on_close(&mut self, now: Timestamp, cut_off: bool, out: &mut Vec<AppEvent>) {
        match self {
            Analyzer::Http(h) => http_into(out, |e| h.close(now, cut_off, e)),
            Analyzer::Tls(t) => tls_into(out, |e| t.close(e)),
            Analyzer::Probe(b) => {
                let (h, t) = &mut **b;
                http_into(out, |e| h.close(now, cut_off, e));
                tls_into(out, |e| t.close(e));
            }
            Analyzer::Pending { .. } => {}
        }
    }
}

impl Conn<Analyzer> {
    /// The connection's HTTP state, if it is read as HTTP.
    pub fn http(&self) -> Option<&HttpConn> {
        self.app.as_ref().and_then(Analyzer::as_http)
    }

    /// The connection's TLS state, if it is read as TLS.
    pub fn tls(&self) -> Option<&TlsConn> {
        self.app.as_ref().and_then(Analyzer::as_tls)
    }
}
