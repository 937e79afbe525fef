//! One TLS connection's state: each side's record layer, which side encrypts from when, and
//! the facts of its handshake, with Zeek's rules for `established` and `resumed`
//! (scripts/base/protocols/ssl/main.zeek and the ssl analyzer at a13de64f):
//! - a side encrypts at its ChangeCipherSpec, and, once the version chosen is past TLS 1.2
//!   (1.3 and its drafts), at its first application_data record;
//! - `established`: the first record read as ciphertext (after its side encrypted) while both
//!   sides encrypt;
//! - `resumed`: the ServerHello echoes the client's session id (neither empty nor 32 zeros) on a
//!   version before 1.3; or the client sent a ticket without a session id and no key exchange
//!   before its ChangeCipherSpec; or the client offered a PSK and the server took one.

use super::exchange::{ExchangeEvent, Exchanges};
use super::parser::{self, Piece, RecordReader, TlsBad};
use super::record::TlsSession;
use crate::time::Timestamp;

/// The random of a ServerHello that is a HelloRetryRequest (RFC 8446 4.1.3).
const HRR_RANDOM: [u8; 32] = [
    0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91, 0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E,
    0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
];

/// What the TLS analyzer reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsEvent {
    /// The handshake began (the client's ClientHello was read: `done` false) or ended (both
    /// sides encrypt: `done` true): the connection is not ready for requests in between.
    Handshake {
        /// It ended.
        done: bool,
    },
    /// An exchange began, was answered, or ended ([`super::exchange`]).
    Exchange(ExchangeEvent),
    /// The connection ended: what it was.
    Session(Box<TlsSession>),
}

/// The handshake facts Zeek's rules read.
#[derive(Debug, Default)]
struct Facts {
    client_session_id: Option<Vec<u8>>,
    ticket_empty_session_seen: bool,
    client_psk_seen: bool,
    client_key_exchange_seen: bool,
}

/// One TLS connection.
#[derive(Debug, Default)]
pub struct TlsConn {
    client: RecordReader,
    server: RecordReader,
    /// Each side's encryption began (client, server).
    encrypted: [bool; 2],
    facts: Facts,
    session: TlsSession,
    /// Pieces of the latest bytes, reused.
    pieces: Vec<Piece>,
    closed: bool,
    /// When each side's record under way began (client, server).
    record_start: [Option<Timestamp>; 2],
    /// TLS 1.3: the client's first encrypted record (its Finished) went by.
    client_finished: bool,
    exchanges: Exchanges,
    /// When both sides began encrypting: the connection is ready for requests.
    ready: Option<Timestamp>,
    /// Bytes an application record adds to what it carries (nonce, tag, content type), as the
    /// version and cipher chosen make it; 0 when unknown.
    overhead: u16,
    /// The client sent an application record after its Finished.
    client_spoke: bool,
}

/// Whether `plain` bytes of an HTTP/2 record are taken for control frames rather than a
/// request's HEADERS (client) or response data (server): less than 14 (a SETTINGS
/// acknowledgement 9, a WINDOW_UPDATE or RST_STREAM 13), 17 (a PING or its acknowledgement, a
/// GOAWAY without debug data), 22 (a SETTINGS acknowledgement and a WINDOW_UPDATE) or 26 (the
/// stream's and the connection's WINDOW_UPDATE together). A repeated request whose header block
/// HPACK has indexed whole can be as short as 18 bytes (a lab capture's was), so sizes alone
/// cannot tell them apart everywhere: a request of exactly these sizes is missed.
pub fn h2_control(plain: usize) -> bool {
    plain < 14 || matches!(plain, 17 | 22 | 26)
}

/// The most bytes a TLS 1.3 server's NewSessionTicket record carries, as servers send them
/// (rustls 81 with its 32-byte ticket ids, OpenSSL's and Go's about 200 to 250): a server record
/// of the first exchange no longer than this, before its response began, may be a ticket
/// ([`super::exchange`] holds it). A whole first response this short (a 304, a redirect) is taken
/// as such only at the client's next burst or the connection's end.
pub const TICKET_MAX: usize = 512;

/// The most bytes of an HTTP/2 client's first record that carry only its preface: the 24-byte
/// magic, a SETTINGS frame of up to six settings and a WINDOW_UPDATE.
pub const H2_PREFACE_MAX: usize = 24 + 9 + 6 * 6 + 13;

impl TlsConn {
    /// A connection whose first client bytes opened TLS; `midstream`: joined after it began
    /// (its handshake was not seen: both sides read as encrypted).
    pub fn new(midstream: bool) -> TlsConn {
        let mut c = TlsConn::default();
        if midstream {
            c.encrypted = [true, true];
            c.client.encrypt();
            c.server.encrypt();
            c.session.midstream = true;
        }
        c
    }

    /// Bytes of the client (`client`) or of the server, in order, at `now`.
    pub fn on_data(&mut self, now: Timestamp, client: bool, data: &[u8], out: &mut Vec<TlsEvent>) {
        let mut pieces = std::mem::take(&mut self.pieces);
        let reader = if client { &mut self.client } else { &mut self.server };
        let r = reader.feed(data, &mut pieces);
        for p in pieces.drain(..) {
            self.piece(now, client, p, out);
        }
        self.pieces = pieces;
        if let Err(bad) = r {
            self.bad(bad);
        }
    }

    /// Bytes of one side that will never be seen: its framing is lost.
    pub fn on_gap(&mut self, client: bool) {
        let reader = if client { &mut self.client } else { &mut self.server };
        let fresh = reader.failed().is_none();
        if fresh {
            let _ = reader.fail(TlsBad::Gap);
            self.bad(TlsBad::Gap);
        }
    }

    /// Heap bytes it holds (handshake messages being reassembled).
    pub fn held_bytes(&self) -> usize {
        self.client.held_bytes() + self.server.held_bytes() + self.session.history.capacity()
    }

    /// A probe's server answered the ClientHello in something other than TLS (an HTTP server's
    /// 400): flagged, as the session's only reading.
    pub fn not_answered_in_tls(&mut self) {
        self.session.bad.push("server_not_tls");
    }

    /// Whether the client's framing failed before anything was read as TLS.
    pub fn not_tls(&self) -> bool {
        self.client.failed().is_some() && self.session.records[0] == 0
    }

    /// The connection ended: its exchange under way and its session, once.
    pub fn close(&mut self, out: &mut Vec<TlsEvent>) {
        if !self.closed {
            self.closed = true;
            let mut evs = Vec::new();
            self.exchanges.close(&mut evs);
            out.extend(evs.into_iter().map(TlsEvent::Exchange));
            self.session.exchanges = u64::from(self.exchanges.depth());
            self.session.unsolicited = self.exchanges.unsolicited;
            self.session.tickets = self.exchanges.tickets;
            out.push(TlsEvent::Session(Box::new(std::mem::take(&mut self.session))));
        }
    }

    /// What the session says so far.
    pub fn session(&self) -> &TlsSession {
        &self.session
    }

    fn bad(&mut self, bad: TlsBad) {
        if !self.session.bad.contains(&bad.name()) {
            self.session.bad.push(bad.name());
        }
    }

    fn piece(&mut self, now: Timestamp, client: bool, p: Piece, out: &mut Vec<TlsEvent>) {
        let side = usize::from(!client);
        match p {
            Piece::Record { header, bytes, done } => {
                let start = *self.record_start[side].get_or_insert(now);
                self.session.record_bytes[side] += bytes as u64;
                if done {
                    self.record_start[side] = None;
                    self.session.records[side] += 1;
                    self.record_done(now, client, header.ctype);
                    if self.session.established && self.ready.is_none() {
                        self.ready = Some(now);
                        out.push(TlsEvent::Handshake { done: true });
                    }
                    if header.ctype == parser::APPLICATION_DATA {
                        self.app_record(start, now, client, header.len, out);
                    }
                }
            }
            Piece::Handshake { msg_type, body } => {
                if client && msg_type == parser::CLIENT_HELLO && self.session.first_ts.is_none() {
                    out.push(TlsEvent::Handshake { done: false });
                }
                self.session.first_ts.get_or_insert(now);
                self.handshake(client, msg_type, &body);
            }
            Piece::Alert { description, .. } => {
                self.session.first_ts.get_or_insert(now);
                self.session.history(client, 'l');
                self.session.last_alert = Some(description);
            }
            Piece::Sslv2Hello(ch) => {
                self.session.first_ts.get_or_insert(now);
                self.session.history(true, 'c');
                self.facts.client_session_id = ch.session_id;
            }
        }
    }

    /// A whole record of `ctype` from one side: encryption begins, established is decided.
    fn record_done(&mut self, now: Timestamp, client: bool, ctype: u8) {
        let side = usize::from(!client);
        match ctype {
            parser::CHANGE_CIPHER_SPEC if !self.encrypted[side] => {
                self.session.first_ts.get_or_insert(now);
                self.session.history(client, 'i');
                if client && self.facts.ticket_empty_session_seen && !self.facts.client_key_exchange_seen {
                    self.session.resumed = true;
                }
                self.encrypted[side] = true;
                return;
            }
            parser::APPLICATION_DATA if !self.encrypted[side] && self.past_tls12() => {
                self.encrypted[side] = true;
                if client {
                    self.client.encrypt()
                } else {
                    self.server.encrypt()
                }
            }
            _ => {}
        }
        if self.encrypted[side] && self.encrypted[1 - side] && !self.session.midstream {
            self.session.established = true;
        }
    }

    /// A whole application record of one side, from `first` to `last`, `len` bytes: into the
    /// exchanges once both sides encrypt (before, it is TLS 1.3's encrypted handshake), but the
    /// client's Finished (TLS 1.3: its first encrypted record) and, on TLS 1.3, either side's
    /// encrypted alerts and KeyUpdates (19 and 22 bytes: one byte of content, its type, and 16
    /// of tag). On a connection that may be HTTP/2, either side's records of control frames'
    /// sizes ([`h2_control`]) and the client's first record when it holds no more than the
    /// preface are control, not requests nor responses (counted in the session's
    /// `control_records`); each other client record may carry one request. On HTTP/1.1 a burst
    /// is one request.
    fn app_record(&mut self, first: Timestamp, last: Timestamp, client: bool, len: u16, out: &mut Vec<TlsEvent>) {
        if !(self.encrypted[0] && self.encrypted[1]) {
            return;
        }
        let tls13 = self.past_tls12();
        if tls13 && matches!(len, 19 | 22) {
            return;
        }
        if client && tls13 && !self.client_finished {
            self.client_finished = true;
            return;
        }
        let plain = usize::from(len).saturating_sub(usize::from(self.overhead));
        let h2 = self.may_be_h2();
        // The client's first record after its Finished, when it holds no more than the preface.
        let preface = client && !std::mem::replace(&mut self.client_spoke, true) && plain <= H2_PREFACE_MAX;
        // Either side's control frames (the server's GOAWAY when the client closes, the
        // acknowledgements, WINDOW_UPDATEs) are no requests nor response data.
        if h2 && (h2_control(plain) || preface) {
            self.session.control_records += 1;
            return;
        }
        let mut evs = Vec::new();
        if client {
            self.exchanges.client_record(first, last, u64::from(len), h2, &mut evs);
        } else {
            // TLS 1.3's tickets come after the first request (the client's Finished went with it).
            let maybe_ticket = tls13 && self.exchanges.depth() == 1 && plain <= TICKET_MAX;
            self.exchanges.server_record(first, last, u64::from(len), maybe_ticket, &mut evs);
        }
        out.extend(evs.into_iter().map(TlsEvent::Exchange));
    }

    /// Whether the connection may carry HTTP/2: its server chose `h2` by ALPN, or the choice
    /// was encrypted (TLS 1.3) and the client offered it.
    pub fn may_be_h2(&self) -> bool {
        match &self.session.next_protocol {
            Some(p) => p == b"h2",
            None => self.past_tls12() && self.session.client_alpn.iter().any(|p| p == b"h2"),
        }
    }

    /// When both sides began encrypting (the handshake's end, as the client's requests may
    /// follow it), if they have.
    pub fn ready(&self) -> Option<Timestamp> {
        self.ready
    }

    /// Whether the version chosen is past TLS 1.2 (1.3, its drafts, or one Zeek does not
    /// know), as Zeek's analyzer decides when application data marks encryption.
    fn past_tls12(&self) -> bool {
        self.session.version.is_some_and(|v| !matches!(v, 0x0002 | 0x0300 | 0x0301 | 0x0302 | 0x0303))
    }

    /// A handshake message read in the clear.
    fn handshake(&mut self, client: bool, msg_type: u8, body: &[u8]) {
        match msg_type {
            parser::CLIENT_HELLO if client => match parser::client_hello(body) {
                Ok(ch) => {
                    // The extensions come first, as Zeek's events do: a ticket with an empty
                    // session id, unless the id proves not empty after all.
                    if ch.ticket {
                        self.facts.ticket_empty_session_seen = true;
                    }
                    if ch.session_id.is_some() {
                        self.facts.ticket_empty_session_seen = false;
                    }
                    self.facts.client_psk_seen |= ch.psk;
                    self.facts.client_session_id = ch.session_id;
                    if self.session.server_name.is_none() {
                        self.session.server_name = ch.server_name;
                    }
                    self.session.client_alpn = ch.alpn;
                    self.session.client_versions = ch.versions;
                }
                Err(bad) => self.bad(bad),
            },
            parser::SERVER_HELLO if !client => match parser::server_hello(body) {
                Ok(sh) => {
                    if let Some(v) = sh.selected_version {
                        self.session.version = Some(v);
                    } else if self.session.version.is_none() {
                        self.session.version = Some(sh.version);
                    }
                    if sh.psk && self.facts.client_psk_seen {
                        self.session.resumed = true;
                    }
                    self.session.cipher = Some(u32::from(sh.cipher));
                    if let Some(g) = sh.key_share_group {
                        self.session.curve = Some(g);
                    }
                    if sh.alpn.is_some() {
                        self.session.next_protocol = sh.alpn;
                    }
                    self.overhead = record_overhead(self.session.version.unwrap_or(sh.version), sh.cipher);
                    let v = self.session.version.unwrap_or(sh.version);
                    if sh.session_id.is_some() && sh.session_id == self.facts.client_session_id && v / 0xFF != 0x7F && v != 0x0304 {
                        self.session.resumed = true;
                    }
                    let hrr = body.get(2..34).is_some_and(|r| r == HRR_RANDOM);
                    self.session.history(false, if hrr { 'j' } else { 's' });
                    return;
                }
                Err(bad) => self.bad(bad),
            },
            parser::SERVER_KEY_EXCHANGE if !client => {
                let ecdhe = self.session.cipher.is_some_and(|c| super::names::cipher(c).contains("ECDHE"));
                if let Some(g) = parser::ske_curve(body).filter(|_| ecdhe) {
                    self.session.curve = Some(g);
                }
            }
            parser::CLIENT_KEY_EXCHANGE if client => self.facts.client_key_exchange_seen = true,
            _ => {}
        }
        self.session.history(client, history_letter(msg_type));
    }
}

/// Bytes an application record adds to its content under `version` and `cipher`: TLS 1.3's
/// content type and 16-byte tag; TLS 1.2's AEADs their explicit nonce (none for ChaCha20) and
/// tag; a CBC suite at least an IV, a MAC and a byte of padding (taken as 16 + 20 + 1).
fn record_overhead(version: u16, cipher: u16) -> u16 {
    if !matches!(version, 0x0002 | 0x0300 | 0x0301 | 0x0302 | 0x0303) {
        return 17;
    }
    let name = super::names::cipher(u32::from(cipher));
    if name.contains("CHACHA20") {
        16
    } else if name.contains("GCM") || name.contains("CCM") {
        24
    } else {
        37
    }
}

/// Zeek's history letter of a handshake message type (lower case; the ServerHello's is set
/// where a HelloRetryRequest is told from it).
fn history_letter(msg_type: u8) -> char {
    match msg_type {
        0 => 'h',
        1 => 'c',
        2 => 's',
        3 => 'v',
        4 => 't',
        5 => 'e',
        6 => 'j',
        8 => 'o',
        11 => 'x',
        12 => 'k',
        13 => 'r',
        14 => 'n',
        15 => 'y',
        16 => 'g',
        20 => 'f',
        21 => 'w',
        22 => 'u',
        23 => 'a',
        24 => 'p',
        254 => 'm',
        _ => 'z',
    }
}

#[cfg(test)]
mod tests {
    use super::super::exchange::ExchangeEvent;
    use super::super::parser::{ALERT, APPLICATION_DATA, CHANGE_CIPHER_SPEC, HANDSHAKE};
    use super::*;
    use crate::testkit::tls::*;

    /// The connection's session after `flights` (client's when true), fed in one piece each.
    fn session(flights: &[(bool, Vec<u8>)]) -> TlsSession {
        let mut c = TlsConn::new(false);
        for (i, (client, bytes)) in flights.iter().enumerate() {
            c.on_data(Timestamp::from_millis(i as u64 * 10), *client, bytes, &mut Vec::new());
        }
        let mut out = Vec::new();
        c.close(&mut out);
        let Some(TlsEvent::Session(s)) = out.last() else { panic!("{out:?}") };
        (**s).clone()
    }

    #[test]
    fn a_full_tls12_handshake_is_established_with_its_curve_and_history() {
        let server = [
            record(
                HANDSHAKE,
                &[message(2, &server_hello_12(0xc02f, &[5; 32], &[])), message(11, &[0; 40]), message(12, &[3, 0, 23, 65, 4])].concat(),
            ),
            record(HANDSHAKE, &message(14, &[])),
        ]
        .concat();
        let client = [record(HANDSHAKE, &message(16, &[0; 66])), record(CHANGE_CIPHER_SPEC, &[1]), record(HANDSHAKE, &[0x5a; 40])].concat();
        let server_end = [record(CHANGE_CIPHER_SPEC, &[1]), record(HANDSHAKE, &[0x6b; 40])].concat();
        let s = session(&[(true, client_hello_record()), (false, server.clone()), (true, client.clone())]);
        assert!(!s.established, "the server has not yet encrypted");
        let s = session(&[
            (true, client_hello_record()),
            (false, server),
            (true, client),
            (false, server_end),
            (true, record(APPLICATION_DATA, &[1; 100])),
        ]);
        assert_eq!((s.version, s.cipher, s.curve, s.established, s.resumed), (Some(0x0303), Some(0xc02f), Some(23), true, false));
        assert_eq!(s.history, "CsxknGIi");
        assert_eq!(s.server_name.as_deref(), Some(&b"shop.example"[..]));
        assert_eq!(s.first_ts, Some(Timestamp::from_millis(0)));
        assert_eq!((s.records, s.record_bytes[0] > 100), ([5, 4], true));
    }

    #[test]
    fn tls13_is_established_at_the_clients_finished_and_not_resumed_by_its_echoed_id() {
        let server =
            [record(HANDSHAKE, &message(2, &server_hello_body())), record(CHANGE_CIPHER_SPEC, &[1]), record(APPLICATION_DATA, &[0x17; 900])].concat();
        let s = session(&[(true, client_hello_record()), (false, server.clone())]);
        assert!(!s.established);
        let client = [record(CHANGE_CIPHER_SPEC, &[1]), record(APPLICATION_DATA, &[0x17; 53])].concat();
        let s = session(&[(true, client_hello_record()), (false, server), (true, client)]);
        assert_eq!((s.version, s.cipher, s.curve, s.established, s.resumed), (Some(0x0304), Some(0x1301), Some(29), true, false));
        assert_eq!(s.history, "CsiI");
        assert_eq!(s.client_versions, vec![0x0304, 0x0303]);
    }

    #[test]
    fn an_echoed_session_id_resumes_tls12_and_an_alert_is_the_last_one() {
        let server =
            [record(HANDSHAKE, &message(2, &server_hello_12(0xc02f, &[9; 32], &[]))), record(CHANGE_CIPHER_SPEC, &[1]), record(HANDSHAKE, &[1; 40])]
                .concat();
        let client = [record(CHANGE_CIPHER_SPEC, &[1]), record(HANDSHAKE, &[2; 40])].concat();
        let s = session(&[(true, client_hello_record()), (false, server), (true, client)]);
        assert!(s.resumed && s.established, "{s:?}");
        // A handshake refused with an alert: not established, the alert kept.
        let s = session(&[(true, client_hello_record()), (false, record(ALERT, &[2, 40]))]);
        assert_eq!((s.last_alert, s.established, s.history.as_str()), (Some(40), false, "Cl"));
    }

    #[test]
    fn application_records_after_the_handshake_make_exchanges() {
        let t = Timestamp::from_millis;
        let mut c = TlsConn::new(false);
        let mut out = Vec::new();
        c.on_data(t(0), true, &client_hello_record(), &mut out);
        let server = [record(HANDSHAKE, &message(2, &server_hello_body())), record(CHANGE_CIPHER_SPEC, &[1]), record(APPLICATION_DATA, &[0x17; 900])];
        c.on_data(t(40), false, &server.concat(), &mut out);
        // The client's Finished and its first request in one segment.
        let client = [record(CHANGE_CIPHER_SPEC, &[1]), record(APPLICATION_DATA, &[1; 53]), record(APPLICATION_DATA, &[2; 300])];
        c.on_data(t(80), true, &client.concat(), &mut out);
        c.on_data(t(120), false, &record(APPLICATION_DATA, &[3; 5000]), &mut out);
        c.on_data(t(125), false, &record(APPLICATION_DATA, &[3; 700]), &mut out);
        // An encrypted alert of the client's (19 bytes) is no request; the next page's is.
        c.on_data(t(900), true, &record(APPLICATION_DATA, &[4; 19]), &mut out);
        c.on_data(t(1000), true, &record(APPLICATION_DATA, &[5; 280]), &mut out);
        c.close(&mut out);
        let ex: Vec<&ExchangeEvent> = out.iter().filter_map(|e| if let TlsEvent::Exchange(x) = e { Some(x) } else { None }).collect();
        let [ExchangeEvent::Request { depth: 1, .. }, ExchangeEvent::Response { depth: 1, start: true, .. }, ExchangeEvent::Response { depth: 1, start: false, .. }, ExchangeEvent::Done(first), ExchangeEvent::Request { depth: 2, .. }, ExchangeEvent::Done(second)] =
            &ex[..]
        else {
            panic!("{ex:?}")
        };
        assert_eq!(
            (first.request_first, first.request_bytes, first.response_first, first.response_last, first.response_bytes),
            (t(80), 300, Some(t(120)), Some(t(125)), 5700)
        );
        assert_eq!((second.request_first, second.response_first), (t(1000), None));
        let Some(TlsEvent::Session(s)) = out.last() else { panic!() };
        assert_eq!((s.exchanges, s.unsolicited, s.established), (2, 0, true));
    }

    #[test]
    fn bytes_that_are_not_tls_are_counted_and_say_so() {
        let mut c = TlsConn::new(false);
        c.on_data(Timestamp::from_millis(0), true, &[0x16, 3, 1, 0xff, 0xff, 1], &mut Vec::new());
        assert!(c.not_tls());
        let mut out = Vec::new();
        c.close(&mut out);
        let [TlsEvent::Session(s)] = &out[..] else { panic!() };
        assert_eq!(s.bad, vec!["record_too_long"]);
    }
}
