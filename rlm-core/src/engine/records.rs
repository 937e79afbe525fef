//! The Zeek-style records the engine reports: one per finished HTTP transaction or exchange of
//! encrypted records (the fields of Zeek's http.log, [`TransactionRecord`]), one per action a rule took ([`DecisionRecord`]);
//! pageviews are [`crate::pageview::PageviewRecord`]s.

use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

use rules::{ClassId, RuleId};

use crate::http::Txn;
use crate::policy::{AggregateReading, Policy, TokenBucket};
use crate::time::{Timestamp, UnixMicros};
use crate::tls::exchange::Exchange;
use crate::wire::Endpoint;

/// A finished HTTP transaction, as reported. Fields named like a field of Zeek's http.log
/// mean what Zeek's means (`docs/architecture.md` lists them); the others are rlm's own.
#[derive(Clone, Debug, Serialize)]
pub struct TransactionRecord {
    /// Zeek `ts`: when the request started (its first byte), Unix seconds to the microsecond.
    pub ts: UnixMicros,
    /// Zeek `uid`: the connection's identifier (stable for a connection within one analysis).
    pub uid: String,
    /// Zeek `id.orig_h`: the client's address.
    #[serde(rename = "id.orig_h")]
    pub orig_h: IpAddr,
    /// Zeek `id.orig_p`: the client's port.
    #[serde(rename = "id.orig_p")]
    pub orig_p: u16,
    /// Zeek `id.resp_h`: the server's address.
    #[serde(rename = "id.resp_h")]
    pub resp_h: IpAddr,
    /// Zeek `id.resp_p`: the server's port.
    #[serde(rename = "id.resp_p")]
    pub resp_p: u16,
    /// Zeek `trans_depth`: position on its connection, from 1.
    pub trans_depth: u32,
    /// Zeek `method`: the request's method.
    pub method: Option<String>,
    /// The Host header as sent.
    pub host: Option<String>,
    /// Zeek `uri`: the request target, percent-decoded.
    pub uri: Option<String>,
    /// The request target exactly as sent.
    pub original_uri: Option<String>,
    /// Zeek `referrer`: the Referer header as sent.
    pub referrer: Option<String>,
    /// Zeek `version`: the HTTP version of the response.
    pub version: Option<String>,
    /// The HTTP version of the request (0.9 for a request line without one).
    pub request_version: Option<String>,
    /// Zeek `user_agent`: the User-Agent header as sent.
    pub user_agent: Option<String>,
    /// Zeek `request_body_len`: size after content decoding (gzip, deflate).
    pub request_body_len: u64,
    /// Zeek `response_body_len`: size after content decoding (gzip, deflate). `rlm analyze`
    /// decodes; the inline appliance does not, and reports the wire size here.
    pub response_body_len: u64,
    /// Body bytes on the wire (de-chunked, not decoded).
    pub request_body_wire_len: u64,
    /// The response's body bytes on the wire (de-chunked, not decoded).
    pub response_body_wire_len: u64,
    /// Zeek `status_code`: the final status.
    pub status_code: Option<u16>,
    /// Zeek `status_msg`: the final status's reason phrase (`<empty>` when it has none).
    pub status_msg: Option<String>,
    /// Zeek `info_code`: the last informational (1xx) status before the final one.
    pub info_code: Option<u16>,
    /// The response's Content-Type header as sent.
    pub content_type: Option<String>,
    /// First and last byte of the response, as seen.
    pub response_first_ts: Option<UnixMicros>,
    /// When the response's last byte was seen.
    pub response_last_ts: Option<UnixMicros>,
    /// The pageview it belongs to.
    pub pageview: Option<u64>,
    /// What was odd about it (bad_content_length, bad_chunking, capture_gap, incomplete, ...).
    pub anomalies: Vec<&'static str>,
    /// An exchange of encrypted records (TLS), not a request read: `host` is the SNI, the
    /// bodies' wire lengths are the records' bytes each way, method, URI, versions and status
    /// are unknown. Absent for HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ExchangeFacts>,
}

/// What a transaction record of an encrypted exchange says that HTTP's do not.
#[derive(Clone, Debug, Serialize)]
pub struct ExchangeFacts {
    /// The requests it carried, as estimated from the client's records (1 on HTTP/1.1; on
    /// HTTP/2 its records that could carry a HEADERS frame).
    pub requests_estimated: u32,
    /// Application records each way (client's, server's).
    pub records_client: u32,
    #[allow(missing_docs)]
    pub records_server: u32,
    /// Server records before its response taken for TLS 1.3 session tickets (not in its
    /// response's records nor bytes).
    pub tickets: u32,
    /// Whether it may be HTTP/2 (ALPN `h2` chosen, or offered and the choice encrypted).
    pub h2: bool,
}

/// Zeek-style connection identifier: `C` and 17 base-62 digits, a hash of the 5-tuple and the
/// time the connection was first seen.
pub fn conn_uid(client: Endpoint, server: Endpoint, first_seen: Timestamp) -> String {
    use std::hash::{BuildHasher, Hash, Hasher};
    let state = ahash::RandomState::with_seeds(0x726c6d, 0x7569, 0x64, 0x2a);
    let mut h = state.build_hasher();
    (client, server, first_seen).hash(&mut h);
    let mut a = h.finish();
    let mut h2 = state.build_hasher();
    (a, first_seen, server).hash(&mut h2);
    let mut b = h2.finish();
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(18);
    out.push('C');
    for i in 0..17 {
        let x = if i < 9 { &mut a } else { &mut b };
        out.push(DIGITS[(*x % 62) as usize] as char);
        *x /= 62;
    }
    out
}

/// A rule acted (or would have, when replaying a capture): on a client's SYN (`DROP SYN`, `LIMIT
/// SYN`), on a connection's handshake once per connection (`FAST SYN`, `DELAY FIRST SYN`, `FAST
/// SYN/ACK`: when rlm keeps the frame to send, not at each copy sent), or on an embedded
/// reference once per reference (`REMOVE EMBEDS`, `REWRITE EMBEDS`).
#[derive(Clone, Debug, Serialize)]
pub struct DecisionRecord {
    /// When the rule acted, Unix seconds to the microsecond.
    pub ts: UnixMicros,
    /// `FILE:LINE:COL` of the rule.
    pub rule: String,
    /// The action as the rule language spells it: `DROP SYN`, `LIMIT SYN` (its bucket was
    /// empty), `FAST SYN`, `DELAY FIRST SYN`, `FAST SYN/ACK`, `REMOVE EMBEDS`, `REWRITE EMBEDS`.
    pub action: &'static str,
    /// The class of the connection's client.
    pub class: String,
    /// The connection's client, as `ip:port`.
    pub client: String,
    /// Its server, as `ip:port`.
    pub server: String,
    /// The SYN acted on was a retransmission by the client (`DROP SYN`, `LIMIT SYN`; false for
    /// the other actions, which take a connection's first SYN or SYN/ACK, or a reference).
    pub retransmission: bool,
    /// The reference acted on: for `REMOVE EMBEDS` the blanked reference's URL as the page
    /// writes it (an `<img>`'s `src` rather than its `srcset`), for `REWRITE EMBEDS` the request
    /// target the client sent; `None` for the actions on SYNs and handshakes.
    pub target: Option<String>,
    /// The class-aggregate tests of the rule's condition, in the rule's order, read at the
    /// decision: what made it fire (empty for a rule that names none).
    pub aggregates: Vec<AggregateReading>,
    /// Not to be written: a first SYN dropped from an address with no recent handshake, past
    /// [`crate::Config::unproven_records_per_s`] (reported still, so that a driver's counts of
    /// drops stay whole; counted in `stats.records_unproven_skipped`).
    #[serde(skip)]
    pub unwritten: bool,
}

impl DecisionRecord {
    /// The record of `rule` of `policy` taking `action` at `now` on a connection of `class` from
    /// `client` to `server`: not on a retransmission nor on a reference (the caller sets those
    /// where they apply).
    pub(crate) fn of(
        policy: &Policy,
        now: Timestamp,
        rule: RuleId,
        action: &'static str,
        class: ClassId,
        client: Endpoint,
        server: Endpoint,
    ) -> DecisionRecord {
        DecisionRecord {
            ts: UnixMicros::of(now),
            rule: policy.rule_label(rule).to_string(),
            action,
            class: policy.class_name(class).to_string(),
            client: client.to_string(),
            server: server.to_string(),
            retransmission: false,
            target: None,
            aggregates: policy.readings(now, rule),
            unwritten: false,
        }
    }

    /// Whether the rule dropped a client's SYN (`DROP SYN`, `LIMIT SYN`).
    pub fn drops_syn(&self) -> bool {
        matches!(self.action, "DROP SYN" | "LIMIT SYN")
    }
}

impl TransactionRecord {
    /// The record of a finished transaction between `client` and `server` on a connection first
    /// seen at `first_seen`, attached to pageview `pageview`.
    pub fn of(txn: &Txn, client: Endpoint, server: Endpoint, first_seen: Timestamp, pageview: Option<u64>) -> TransactionRecord {
        let req = txn.request.as_ref();
        let resp = txn.response.as_ref();
        let uri = req.map(|r| crate::http::head::unescape_uri(&r.zeek_uri));
        let status = resp.map(|r| r.status);
        TransactionRecord {
            ts: UnixMicros::of(txn.request_ts),
            uid: conn_uid(client, server, first_seen),
            orig_h: client.ip,
            orig_p: client.port,
            resp_h: server.ip,
            resp_p: server.port,
            trans_depth: txn.depth,
            method: req.map(|r| r.method.clone()),
            host: req.and_then(|r| r.host.clone()),
            uri,
            original_uri: req.map(|r| r.uri.clone()),
            referrer: req.and_then(|r| r.referrer.clone()),
            version: resp.map(|r| r.version.as_str().to_string()),
            request_version: req.map(|r| r.version.as_str().to_string()),
            user_agent: req.and_then(|r| r.user_agent.clone()),
            request_body_len: txn.request_body_len_decoded(),
            response_body_len: txn.response_body_len_decoded(),
            request_body_wire_len: txn.request_body_len,
            response_body_wire_len: txn.response_body_len,
            status_code: status,
            // As Zeek: a response without a reason phrase says `<empty>`.
            status_msg: resp.map(|r| r.reason.clone().unwrap_or_else(|| "<empty>".into())),
            info_code: txn.interim.or(status.filter(|s| (100..200).contains(s))),
            content_type: resp.and_then(|r| r.content_type.clone()),
            response_first_ts: txn.response_first_ts.map(UnixMicros::of),
            response_last_ts: txn.response_last_ts.map(UnixMicros::of),
            pageview,
            anomalies: txn.anomalies.labels().collect(),
            tls: None,
        }
    }

    /// The record of a finished exchange of encrypted records on a connection (`midstream`:
    /// joined after it began) to the site `sni`.
    pub fn of_exchange(
        x: &Exchange,
        client: Endpoint,
        server: Endpoint,
        first_seen: Timestamp,
        sni: Option<String>,
        midstream: bool,
        pageview: Option<u64>,
    ) -> TransactionRecord {
        TransactionRecord {
            ts: UnixMicros::of(x.request_first),
            uid: conn_uid(client, server, first_seen),
            orig_h: client.ip,
            orig_p: client.port,
            resp_h: server.ip,
            resp_p: server.port,
            trans_depth: x.depth,
            method: None,
            host: sni,
            uri: None,
            original_uri: None,
            referrer: None,
            version: None,
            request_version: None,
            user_agent: None,
            request_body_len: x.request_bytes,
            response_body_len: x.response_bytes,
            request_body_wire_len: x.request_bytes,
            response_body_wire_len: x.response_bytes,
            status_code: None,
            status_msg: None,
            info_code: None,
            content_type: None,
            response_first_ts: x.response_first.map(UnixMicros::of),
            response_last_ts: x.response_last.map(UnixMicros::of),
            pageview,
            anomalies: if midstream { vec!["midstream"] } else { Vec::new() },
            tls: Some(ExchangeFacts {
                requests_estimated: x.requests,
                records_client: x.request_records,
                records_server: x.response_records,
                tickets: x.tickets,
                h2: x.h2,
            }),
        }
    }
}

/// A TLS connection, as reported: Zeek's ssl.log fields with its names and spellings
/// (`docs/architecture.md` lists them; unset is null), then rlm's own.
#[derive(Clone, Debug, Serialize)]
pub struct TlsRecord {
    /// Zeek `ts`: its first TLS message (the connection's first segment when none was read).
    pub ts: UnixMicros,
    /// Zeek `uid`: the connection's, as its transactions'.
    pub uid: String,
    /// Zeek `id.orig_h`, `id.orig_p`: the client.
    #[serde(rename = "id.orig_h")]
    pub orig_h: IpAddr,
    #[serde(rename = "id.orig_p")]
    #[allow(missing_docs)]
    pub orig_p: u16,
    /// Zeek `id.resp_h`, `id.resp_p`: the server.
    #[serde(rename = "id.resp_h")]
    pub resp_h: IpAddr,
    #[serde(rename = "id.resp_p")]
    #[allow(missing_docs)]
    pub resp_p: u16,
    /// Zeek `version`: `TLSv12`, `TLSv13`, `TLSv13-draft23`, `unknown-N`.
    pub version: Option<String>,
    /// Zeek `cipher`: the suite's IANA name.
    pub cipher: Option<String>,
    /// Zeek `curve`: the key exchange's group.
    pub curve: Option<String>,
    /// Zeek `server_name`: the ClientHello's SNI.
    pub server_name: Option<String>,
    /// Zeek `resumed`: the session resumed (an echoed session id, a ticket, a PSK taken).
    pub resumed: bool,
    /// Zeek `last_alert`: the last alert read in the clear.
    pub last_alert: Option<String>,
    /// Zeek `next_protocol`: the protocol the server's ALPN chose.
    pub next_protocol: Option<String>,
    /// Zeek `established`: a record read as ciphertext while both sides encrypted.
    pub established: bool,
    /// Zeek `ssl_history`: a letter per message, upper case the client's.
    pub ssl_history: String,
    /// The protocols the client's ALPN offered.
    pub client_alpn: Vec<String>,
    /// The versions the client's supported_versions offered.
    pub client_versions: Vec<String>,
    /// Records of the client's, of the server's, and their body bytes.
    pub records_client: u64,
    #[allow(missing_docs)]
    pub records_server: u64,
    #[allow(missing_docs)]
    pub record_bytes_client: u64,
    #[allow(missing_docs)]
    pub record_bytes_server: u64,
    /// Joined after it began: its handshake was not seen.
    pub midstream: bool,
    /// Exchanges read from its application records (client bursts and the server's records
    /// after them), and the server's application records before any request.
    pub exchanges: u64,
    #[allow(missing_docs)]
    pub unsolicited_records: u32,
    /// Server records after the first request taken for TLS 1.3 session tickets.
    pub ticket_records: u32,
    /// Application records taken for HTTP/2 control, not requests nor response data.
    pub control_records: u32,
    /// Why bytes were not read as TLS (`record_too_long`, `bad_handshake`, `gap`,
    /// `server_not_tls`, ...).
    pub anomalies: Vec<&'static str>,
}

impl TlsRecord {
    /// The record of TLS connection `s` between `client` and `server`, first seen at
    /// `first_seen`.
    pub fn of(s: &crate::tls::TlsSession, client: Endpoint, server: Endpoint, first_seen: Timestamp) -> TlsRecord {
        use crate::http::head::escape_bytes;
        use crate::tls::names;
        TlsRecord {
            ts: UnixMicros::of(s.first_ts.unwrap_or(first_seen)),
            uid: conn_uid(client, server, first_seen),
            orig_h: client.ip,
            orig_p: client.port,
            resp_h: server.ip,
            resp_p: server.port,
            version: s.version.map(names::version),
            cipher: s.cipher.map(names::cipher),
            curve: s.curve.map(names::curve),
            server_name: s.server_name.as_deref().map(escape_bytes),
            resumed: s.resumed,
            last_alert: s.last_alert.map(names::alert),
            next_protocol: s.next_protocol.as_deref().map(escape_bytes),
            established: s.established,
            ssl_history: s.history.clone(),
            client_alpn: s.client_alpn.iter().map(|p| escape_bytes(p)).collect(),
            client_versions: s.client_versions.iter().map(|v| names::version(*v)).collect(),
            records_client: s.records[0],
            records_server: s.records[1],
            record_bytes_client: s.record_bytes[0],
            record_bytes_server: s.record_bytes[1],
            midstream: s.midstream,
            exchanges: s.exchanges,
            unsolicited_records: s.unsolicited,
            ticket_records: s.tickets,
            control_records: s.control_records,
            anomalies: s.bad.clone(),
        }
    }
}

impl super::Engine {
    /// The `n` slowest pageviews still open at `now` ([`crate::pageview::Pageviews::oldest_open`]),
    /// with their event graphs (at most [`LIVE_EVENTS`] nodes each) and classes: what a person
    /// looking at the appliance wants to see of where the time goes.
    pub fn slowest_open_pageviews(&self, now: Timestamp, n: usize) -> Vec<crate::pageview::PageviewRecord> {
        let mut pvs = self.pageviews.oldest_open(now, n, LIVE_EVENTS);
        if let Some(policy) = self.policy.as_ref() {
            for pv in &mut pvs {
                if let Ok(ip) = pv.client.parse::<IpAddr>() {
                    let class = pageview_class(policy, ip, pv.server.as_deref(), pv.host.as_deref());
                    pv.class = Some(policy.class_name(class).to_string());
                }
            }
        }
        pvs
    }
}

/// The nodes of a live pageview's event graph [`super::Engine::slowest_open_pageviews`] shows.
pub const LIVE_EVENTS: usize = 64;

/// A record of something unproven ([`crate::Config::unproven_records_per_s`]) keeps at most
/// this many bytes of each text field...
pub const UNPROVEN_FIELD: usize = 256;
/// ... and a pageview's first this many object URIs (`objects` still counts them all)...
pub const UNPROVEN_URIS: usize = 4;
/// ... and the first this many nodes of its event graph.
pub const UNPROVEN_EVENTS: usize = 8;

impl TransactionRecord {
    /// Cut to what a record of an unproven transaction keeps ([`UNPROVEN_FIELD`] bytes a text
    /// field), flagged `unproven` among its anomalies.
    pub(super) fn cut_unproven(&mut self) {
        for f in
            [&mut self.method, &mut self.host, &mut self.uri, &mut self.original_uri, &mut self.referrer, &mut self.user_agent].into_iter().flatten()
        {
            crate::http::head::bound_field(f, UNPROVEN_FIELD);
        }
        self.anomalies.push("unproven");
    }
}

impl crate::pageview::PageviewRecord {
    /// Cut to what a record of an unproven pageview keeps: its first [`UNPROVEN_URIS`] object
    /// URIs and [`UNPROVEN_EVENTS`] event nodes, [`UNPROVEN_FIELD`] bytes of each text field.
    pub(super) fn cut_unproven(&mut self) {
        self.object_uris.truncate(UNPROVEN_URIS);
        self.events.truncate(UNPROVEN_EVENTS);
        let uris = self.events.iter_mut().filter_map(|e| e.uri.as_mut());
        for f in self.object_uris.iter_mut().chain(uris).chain([&mut self.host, &mut self.container].into_iter().flatten()) {
            crate::http::head::bound_field(f, UNPROVEN_FIELD);
        }
    }
}

/// The rate of records of unproven things ([`crate::Config::unproven_records_per_s`]): a
/// bucket of a second's worth (at least one), from the first of them.
#[derive(Debug, Default)]
pub(super) struct UnprovenRecords {
    rate: Option<f64>,
    bucket: Option<TokenBucket>,
}

impl UnprovenRecords {
    pub(super) fn new(rate: Option<f64>) -> UnprovenRecords {
        UnprovenRecords { rate, bucket: None }
    }

    /// How a record goes out at `now` of something `unproven` (or not): whole when proven or
    /// when there is no rate; cut to what an unproven record keeps while the bucket has a
    /// token; else not at all, counted in `skipped` (`stats.records_unproven_skipped`).
    pub(super) fn writing(&mut self, now: Timestamp, unproven: bool, skipped: &mut u64) -> Writing {
        let Some(rate) = self.rate.filter(|_| unproven) else { return Writing::Whole };
        let cap = rate.max(1.0);
        let bucket = self.bucket.get_or_insert_with(|| TokenBucket::full(cap, now));
        if bucket.admit(now, rate, cap) {
            Writing::Cut
        } else {
            *skipped += 1;
            Writing::Skip
        }
    }
}

/// How a record goes out ([`UnprovenRecords::writing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Writing {
    /// As it is.
    Whole,
    /// Cut to what a record of something unproven keeps.
    Cut,
    /// Not written.
    Skip,
}

/// The class of a pageview of `client` whose first request went to `server` (`ip:port`, as its
/// record has it) for `host`: finished ones, and those in flight the SLA controller looks at.
pub(super) fn pageview_class(policy: &crate::policy::Policy, client: IpAddr, server: Option<&str>, host: Option<&str>) -> rules::ClassId {
    let server: SocketAddr = server.and_then(|s| s.parse().ok()).unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    policy.classify_pageview(client, server, host)
}
