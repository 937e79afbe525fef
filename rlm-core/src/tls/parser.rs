//! TLS as rlm reads it without keys: the record layer of one direction (type, version and length
//! of each record, across segments) and, while that side is in the clear, its handshake
//! messages, reassembled across records within [`HANDSHAKE_MAX`] and read with rusticata's
//! `tls-parser` (the parser Suricata uses): the ClientHello's SNI, ALPN offer, versions,
//! session id, ticket and PSK; the ServerHello's version, cipher, ALPN, key share and PSK; the
//! ServerKeyExchange's curve; alerts. What tls-parser does not read is read here: the record
//! framing and the reassembly, the ServerHello of TLS 1.3's drafts 14 to 22, the SSLv2-format
//! ClientHello and the ServerKeyExchange's named curve. Bad input is a [`TlsBad`], never a
//! panic.

use tls_parser::{TlsExtension, TlsMessage, TlsMessageHandshake};

/// The longest record TLS allows (2^14 bytes of plaintext and 2,048 of expansion, RFC 5246
/// 6.2.3): longer ones are not TLS.
pub const RECORD_MAX: usize = (1 << 14) + 2048;

/// The longest handshake message kept to be read (a certificate chain is a few KiB): a longer
/// one (a chain of many certificates) goes by unkept, its type reported with an empty body, and
/// the messages after it are read.
pub const HANDSHAKE_MAX: usize = 64 << 10;

/// Record content type (RFC 8446 5.1): ChangeCipherSpec.
pub const CHANGE_CIPHER_SPEC: u8 = 20;
/// Record content type: alert.
pub const ALERT: u8 = 21;
/// Record content type: handshake.
pub const HANDSHAKE: u8 = 22;
/// Record content type: application data (and TLS 1.3's encrypted records).
pub const APPLICATION_DATA: u8 = 23;
/// Record content type: heartbeat.
pub const HEARTBEAT: u8 = 24;

/// Handshake message type: ClientHello.
pub const CLIENT_HELLO: u8 = 1;
/// Handshake message type: ServerHello.
pub const SERVER_HELLO: u8 = 2;
/// Handshake message type: NewSessionTicket.
pub const NEW_SESSION_TICKET: u8 = 4;
/// Handshake message type: ServerKeyExchange.
pub const SERVER_KEY_EXCHANGE: u8 = 12;
/// Handshake message type: ClientKeyExchange.
pub const CLIENT_KEY_EXCHANGE: u8 = 16;
/// Handshake message type: Finished.
pub const FINISHED: u8 = 20;

/// Why bytes were not read as TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TlsBad {
    /// A record's type is none of 20 to 24.
    BadRecordType,
    /// A record's version is not 3.x (SSLv3 to TLS 1.3 all write 3.x).
    BadRecordVersion,
    /// A record longer than [`RECORD_MAX`].
    RecordTooLong,
    /// A handshake message tls-parser could not read.
    BadHandshake,
    /// An SSLv2-format ClientHello that does not add up.
    BadSslv2Hello,
    /// Bytes never seen (a capture's gap, bytes a cut frame did not carry): the framing after
    /// them is lost.
    Gap,
}

impl TlsBad {
    /// Every reason, in order.
    pub const ALL: [TlsBad; 6] =
        [TlsBad::BadRecordType, TlsBad::BadRecordVersion, TlsBad::RecordTooLong, TlsBad::BadHandshake, TlsBad::BadSslv2Hello, TlsBad::Gap];

    /// Its name in counters and records.
    pub fn name(self) -> &'static str {
        match self {
            TlsBad::BadRecordType => "bad_record_type",
            TlsBad::BadRecordVersion => "bad_record_version",
            TlsBad::RecordTooLong => "record_too_long",
            TlsBad::BadHandshake => "bad_handshake",
            TlsBad::BadSslv2Hello => "bad_sslv2_hello",
            TlsBad::Gap => "gap",
        }
    }
}

/// A record's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Its content type.
    pub ctype: u8,
    /// Its version field.
    pub version: u16,
    /// Its body's length.
    pub len: u16,
}

/// The header in `b`, checked: a type of 20 to 24, a version 3.x, a length within
/// [`RECORD_MAX`].
pub fn parse_header(b: [u8; 5]) -> Result<RecordHeader, TlsBad> {
    let h = RecordHeader { ctype: b[0], version: u16::from_be_bytes([b[1], b[2]]), len: u16::from_be_bytes([b[3], b[4]]) };
    if !(CHANGE_CIPHER_SPEC..=HEARTBEAT).contains(&h.ctype) {
        return Err(TlsBad::BadRecordType);
    }
    if h.version >> 8 != 3 {
        return Err(TlsBad::BadRecordVersion);
    }
    if usize::from(h.len) > RECORD_MAX {
        return Err(TlsBad::RecordTooLong);
    }
    Ok(h)
}

/// Whether `b` (a client's first bytes) opens TLS: a handshake record of version 3.x carrying
/// a ClientHello, or an SSLv2-format ClientHello offering SSLv3 or later. Needs 6 bytes.
pub fn opens_tls(b: &[u8]) -> bool {
    match b {
        [HANDSHAKE, 3, minor, _, _, CLIENT_HELLO, ..] => *minor <= 4,
        [hi, _, 1, 3, minor, ..] => hi & 0x80 != 0 && *minor <= 4,
        _ => false,
    }
}

/// What one direction's record layer read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Piece {
    /// A record whose header was read, with how many of its body bytes came in this call
    /// (`done`: its last).
    Record { header: RecordHeader, bytes: usize, done: bool },
    /// A whole handshake message read in the clear: its type and body.
    Handshake { msg_type: u8, body: Vec<u8> },
    /// An alert read in the clear: level and description.
    Alert { level: u8, description: u8 },
    /// An SSLv2-format ClientHello (the client's first bytes).
    Sslv2Hello(ClientHello),
}

/// One direction's record layer: a record's header across segments, its body counted, and in
/// the clear the handshake records' bodies reassembled into messages and alerts read.
#[derive(Debug, Default)]
pub struct RecordReader {
    head: [u8; 5],
    head_have: u8,
    /// The record whose body is being read, and its body bytes still to come.
    current: Option<(RecordHeader, usize)>,
    /// Handshake bytes read in the clear, not yet a whole message.
    handshake: Vec<u8>,
    /// Bytes still to come of a message longer than [`HANDSHAKE_MAX`], not kept.
    skip: usize,
    /// An alert's first byte, when the record was cut between its two.
    alert_level: Option<u8>,
    /// Whether anything was read (an SSLv2 hello is only looked for first).
    started: bool,
    /// This side encrypts: from its ChangeCipherSpec on, or as told ([`RecordReader::encrypt`]);
    /// its handshake records and alerts are no longer read.
    encrypted: bool,
    /// Framing lost: the bytes are no longer read.
    failed: Option<TlsBad>,
}

impl RecordReader {
    /// Read `data`: pieces go to `out`, and while this side is in the clear its handshake
    /// records and alerts are read (it encrypts from its ChangeCipherSpec on, within the same
    /// bytes too). The first bad record stops the reader (what comes after has no framing to
    /// read), returned then and on every later call.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<Piece>) -> Result<(), TlsBad> {
        if let Some(bad) = self.failed {
            return Err(bad);
        }
        if !self.started && !data.is_empty() {
            self.started = true;
            if data[0] & 0x80 != 0 {
                let r = sslv2_hello(data).map(Piece::Sslv2Hello);
                return match r {
                    Ok(p) => {
                        out.push(p);
                        Ok(())
                    }
                    Err(bad) => self.fail(bad),
                };
            }
        }
        while !data.is_empty() {
            let Some((header, left)) = self.current else {
                let take = (5 - usize::from(self.head_have)).min(data.len());
                self.head[usize::from(self.head_have)..usize::from(self.head_have) + take].copy_from_slice(&data[..take]);
                self.head_have += take as u8;
                data = &data[take..];
                if self.head_have == 5 {
                    self.head_have = 0;
                    match parse_header(self.head) {
                        Ok(h) => {
                            self.current = Some((h, usize::from(h.len)));
                            if h.len == 0 {
                                self.current = None;
                                out.push(Piece::Record { header: h, bytes: 0, done: true });
                            }
                        }
                        Err(bad) => return self.fail(bad),
                    }
                }
                continue;
            };
            let take = left.min(data.len());
            let (body, rest) = data.split_at(take);
            data = rest;
            let done = take == left;
            self.current = if done { None } else { Some((header, left - take)) };
            out.push(Piece::Record { header, bytes: take, done });
            if !self.encrypted {
                match header.ctype {
                    HANDSHAKE => self.handshake_bytes(body, out),
                    ALERT => self.alert_bytes(body, out),
                    CHANGE_CIPHER_SPEC if done => self.encrypted = true,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Framing lost to `bad`: nothing more is read.
    pub(super) fn fail(&mut self, bad: TlsBad) -> Result<(), TlsBad> {
        self.failed = Some(bad);
        self.handshake = Vec::new();
        Err(bad)
    }

    /// Bytes of handshake records: whole messages (4-byte header, 24-bit length) out.
    fn handshake_bytes(&mut self, mut body: &[u8], out: &mut Vec<Piece>) {
        let skipped = self.skip.min(body.len());
        self.skip -= skipped;
        body = &body[skipped..];
        self.handshake.extend_from_slice(body);
        let mut at = 0;
        while self.handshake.len() - at >= 4 {
            let h = &self.handshake[at..];
            let len = (usize::from(h[1]) << 16) | (usize::from(h[2]) << 8) | usize::from(h[3]);
            if len > HANDSHAKE_MAX {
                // Too long to keep: its type now, its bytes let go as they come.
                out.push(Piece::Handshake { msg_type: h[0], body: Vec::new() });
                let here = h.len() - 4;
                if here >= len {
                    at += 4 + len;
                    continue;
                }
                self.skip = len - here;
                at = self.handshake.len();
                break;
            }
            if h.len() < 4 + len {
                break;
            }
            out.push(Piece::Handshake { msg_type: h[0], body: h[4..4 + len].to_vec() });
            at += 4 + len;
        }
        self.handshake.drain(..at);
    }

    /// Bytes of alert records: each two a level and a description.
    fn alert_bytes(&mut self, body: &[u8], out: &mut Vec<Piece>) {
        for &b in body {
            match self.alert_level.take() {
                None => self.alert_level = Some(b),
                Some(level) => out.push(Piece::Alert { level, description: b }),
            }
        }
    }

    /// This side encrypts from here on (joined mid-stream; TLS 1.3's first application record).
    pub fn encrypt(&mut self) {
        self.encrypted = true;
    }

    /// Heap bytes it holds (against the engine's budget of what connections hold).
    pub fn held_bytes(&self) -> usize {
        self.handshake.capacity()
    }

    /// Why it stopped reading, if it did.
    pub fn failed(&self) -> Option<TlsBad> {
        self.failed
    }
}

/// What a ClientHello offers, as rlm keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// The legacy version field (0x0303 for TLS 1.2 and 1.3).
    pub version: u16,
    /// The session id, when it is neither empty nor 32 zero bytes (Zeek's rule for resumption).
    pub session_id: Option<Vec<u8>>,
    /// The first host name of its server_name extension, as sent.
    pub server_name: Option<Vec<u8>>,
    /// The protocols its ALPN extension offers, in order.
    pub alpn: Vec<Vec<u8>>,
    /// Its supported_versions, in order (TLS 1.3).
    pub versions: Vec<u16>,
    /// A session_ticket extension with a ticket in it.
    pub ticket: bool,
    /// A pre_shared_key extension.
    pub psk: bool,
    /// An early_data extension (0-RTT).
    pub early_data: bool,
}

/// What a ServerHello chose, as rlm keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerHello {
    /// The legacy version field, or a TLS 1.3 draft's version.
    pub version: u16,
    /// The version of its supported_versions extension (TLS 1.3).
    pub selected_version: Option<u16>,
    /// Its session id, as [`ClientHello::session_id`].
    pub session_id: Option<Vec<u8>>,
    /// The cipher suite chosen.
    pub cipher: u16,
    /// The protocol its ALPN extension chose.
    pub alpn: Option<Vec<u8>>,
    /// The group of its key_share extension.
    pub key_share_group: Option<u16>,
    /// A pre_shared_key extension (the server took a PSK: resumption).
    pub psk: bool,
}

impl ServerHello {
    /// The version the connection speaks: the supported_versions one, else the legacy field.
    pub fn negotiated(&self) -> u16 {
        self.selected_version.unwrap_or(self.version)
    }
}

/// A session id as Zeek keeps it: none when empty or 32 zero bytes.
fn session_id(sid: Option<&[u8]>) -> Option<Vec<u8>> {
    sid.filter(|s| !(s.is_empty() || s.len() == 32 && s.iter().all(|b| *b == 0))).map(<[u8]>::to_vec)
}

/// A ClientHello's body (after its 4-byte handshake header).
pub fn client_hello(body: &[u8]) -> Result<ClientHello, TlsBad> {
    let (_, ch) = tls_parser::parse_tls_handshake_client_hello(body).map_err(|_| TlsBad::BadHandshake)?;
    let mut out = ClientHello { version: ch.version.0, session_id: session_id(ch.session_id), ..ClientHello::default() };
    let exts = match ch.ext {
        Some(e) => tls_parser::parse_tls_client_hello_extensions(e).map_err(|_| TlsBad::BadHandshake)?.1,
        None => Vec::new(),
    };
    for ext in exts {
        match ext {
            TlsExtension::SNI(names) if out.server_name.is_none() => {
                out.server_name = names.iter().find(|(t, _)| t.0 == 0).map(|(_, n)| n.to_vec());
            }
            TlsExtension::ALPN(protocols) => out.alpn = protocols.iter().map(|p| p.to_vec()).collect(),
            TlsExtension::SupportedVersions(v) => out.versions = v.iter().map(|v| v.0).collect(),
            TlsExtension::SessionTicket(t) => out.ticket = !t.is_empty(),
            TlsExtension::PreSharedKey(_) => out.psk = true,
            TlsExtension::EarlyData(_) => out.early_data = true,
            _ => {}
        }
    }
    Ok(out)
}

/// A ServerHello's body: TLS 1.0 to 1.3 through tls-parser, TLS 1.3's drafts 14 to 22 here (no
/// session id nor compression: version, random, cipher, extensions).
pub fn server_hello(body: &[u8]) -> Result<ServerHello, TlsBad> {
    let version = match body {
        [a, b, ..] => u16::from_be_bytes([*a, *b]),
        _ => return Err(TlsBad::BadHandshake),
    };
    let (mut out, ext) = if (0x7f0e..=0x7f16).contains(&version) {
        let rest = body.get(34..).ok_or(TlsBad::BadHandshake)?;
        let [c0, c1, ..] = rest else { return Err(TlsBad::BadHandshake) };
        let ext = rest.get(2..).filter(|e| e.len() >= 2).map(|e| {
            let n = usize::from(u16::from_be_bytes([e[0], e[1]]));
            &e[2..(2 + n).min(e.len())]
        });
        (ServerHello { version, cipher: u16::from_be_bytes([*c0, *c1]), ..ServerHello::default() }, ext)
    } else {
        let (_, sh) = tls_parser::parse_tls_handshake_server_hello(body).map_err(|_| TlsBad::BadHandshake)?;
        (ServerHello { version: sh.version.0, session_id: session_id(sh.session_id), cipher: sh.cipher.0, ..ServerHello::default() }, sh.ext)
    };
    let exts = match ext {
        Some(e) => tls_parser::parse_tls_server_hello_extensions(e).map_err(|_| TlsBad::BadHandshake)?.1,
        None => Vec::new(),
    };
    for ext in exts {
        match ext {
            TlsExtension::ALPN(p) => out.alpn = p.first().map(|p| p.to_vec()),
            TlsExtension::SupportedVersions(v) => out.selected_version = v.first().map(|v| v.0),
            // The key share: 51, or 40 in TLS 1.3's drafts (which tls-parser leaves unread in a
            // ServerHello).
            TlsExtension::KeyShare(k) | TlsExtension::KeyShareOld(k) => {
                out.key_share_group = (k.len() >= 2).then(|| u16::from_be_bytes([k[0], k[1]]))
            }
            TlsExtension::Unknown(t, k) if t.0 == 40 => out.key_share_group = (k.len() >= 2).then(|| u16::from_be_bytes([k[0], k[1]])),
            TlsExtension::PreSharedKey(_) => out.psk = true,
            _ => {}
        }
    }
    Ok(out)
}

/// The named curve of a ServerKeyExchange's ECDHE parameters (`curve_type` 3, then the group);
/// None for other parameters.
pub fn ske_curve(body: &[u8]) -> Option<u16> {
    match body {
        [3, a, b, ..] => Some(u16::from_be_bytes([*a, *b])),
        _ => None,
    }
}

/// An SSLv2-format ClientHello (RFC 6101 E.2): a 2-byte length with its high bit set, message
/// type 1, the version offered, the lengths of the cipher specs (3 bytes each), the session id
/// and the challenge, then those.
pub fn sslv2_hello(b: &[u8]) -> Result<ClientHello, TlsBad> {
    let bad = TlsBad::BadSslv2Hello;
    let [hi, lo, 1, v0, v1, c0, c1, s0, s1, ch0, ch1, rest @ ..] = b else { return Err(bad) };
    let len = (usize::from(hi & 0x7f) << 8) | usize::from(*lo);
    let (ciphers, sid, challenge) =
        (usize::from(u16::from_be_bytes([*c0, *c1])), usize::from(u16::from_be_bytes([*s0, *s1])), usize::from(u16::from_be_bytes([*ch0, *ch1])));
    if hi & 0x80 == 0 || ciphers % 3 != 0 || len != 9 + ciphers + sid + challenge || rest.len() < ciphers + sid + challenge {
        return Err(bad);
    }
    let sid_bytes = &rest[ciphers..ciphers + sid];
    Ok(ClientHello { version: u16::from_be_bytes([*v0, *v1]), session_id: session_id(Some(sid_bytes)), ..ClientHello::default() })
}

/// Whether tls-parser reads `record` (a whole plaintext record, header included) as an alert,
/// for the fuzz target and tests: the record layer above reads alerts itself.
pub fn is_alert_record(record: &[u8]) -> bool {
    matches!(tls_parser::parse_tls_plaintext(record), Ok((_, p)) if matches!(p.msg.first(), Some(TlsMessage::Alert(_))))
}

/// Whether tls-parser reads `msg` (a handshake message, header included) as a ClientHello.
pub fn is_client_hello(msg: &[u8]) -> bool {
    matches!(tls_parser::parse_tls_message_handshake(msg), Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(_)))))
}

/// Handshake bytes for the TLS analyzer's tests.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::tls::*;

    #[test]
    fn a_client_hello_gives_its_name_protocols_and_versions() {
        let ch = client_hello(&client_hello_body()).unwrap();
        assert_eq!(ch.server_name.as_deref(), Some(&b"shop.example"[..]));
        assert_eq!(ch.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!(ch.versions, vec![0x0304, 0x0303]);
        assert_eq!((ch.version, ch.session_id.as_ref().map(Vec::len), ch.ticket, ch.psk), (0x0303, Some(32), false, false));
        assert!(is_client_hello(&message(CLIENT_HELLO, &client_hello_body())));
        assert_eq!(client_hello(&client_hello_body()[..20]), Err(TlsBad::BadHandshake));
    }

    #[test]
    fn a_server_hello_gives_the_version_it_chose() {
        let sh = server_hello(&server_hello_body()).unwrap();
        assert_eq!(
            (sh.version, sh.selected_version, sh.negotiated(), sh.cipher, sh.key_share_group),
            (0x0303, Some(0x0304), 0x0304, 0x1301, Some(29))
        );
        // A draft-18 ServerHello: version 0x7f12, no session id nor compression.
        let exts = ext(40, &[0, 23, 0, 1, 5]);
        let draft = [&[0x7fu8, 0x12][..], &[1; 32], &[0x13, 0x02], &(exts.len() as u16).to_be_bytes(), &exts].concat();
        let sh = server_hello(&draft).unwrap();
        assert_eq!((sh.version, sh.cipher, sh.key_share_group, sh.session_id), (0x7f12, 0x1302, Some(23), None));
        assert_eq!(server_hello(&[3, 3, 1]), Err(TlsBad::BadHandshake));
    }

    #[test]
    fn records_are_framed_across_any_cut_and_handshakes_reassembled_across_records() {
        let hello = message(CLIENT_HELLO, &client_hello_body());
        // The ClientHello split over two records, then an alert and an application record.
        let (a, b) = hello.split_at(30);
        let wire = [record(HANDSHAKE, a), record(HANDSHAKE, b), record(ALERT, &[1, 0]), record(APPLICATION_DATA, &[0xaa; 300])].concat();
        for cut in [1, 2, 5, 7, 64, wire.len()] {
            let mut r = RecordReader::default();
            let mut out = Vec::new();
            for piece in wire.chunks(cut) {
                r.feed(piece, &mut out).unwrap();
            }
            let handshakes: Vec<&Piece> = out.iter().filter(|p| matches!(p, Piece::Handshake { .. })).collect();
            assert_eq!(handshakes, vec![&Piece::Handshake { msg_type: CLIENT_HELLO, body: client_hello_body() }], "cut {cut}");
            assert!(out.contains(&Piece::Alert { level: 1, description: 0 }), "cut {cut}");
            let done: Vec<(u8, u16)> = out
                .iter()
                .filter_map(|p| if let Piece::Record { header, done: true, .. } = p { Some((header.ctype, header.len)) } else { None })
                .collect();
            assert_eq!(done, vec![(HANDSHAKE, 30), (HANDSHAKE, (hello.len() - 30) as u16), (ALERT, 2), (APPLICATION_DATA, 300)], "cut {cut}");
            let app: usize = out
                .iter()
                .map(|p| {
                    if let Piece::Record { header, bytes, .. } = p {
                        if header.ctype == APPLICATION_DATA {
                            *bytes
                        } else {
                            0
                        }
                    } else {
                        0
                    }
                })
                .sum();
            assert_eq!(app, 300);
            assert!(r.held_bytes() <= HANDSHAKE_MAX);
        }
        // Encrypted: records counted, nothing read inside.
        let mut r = RecordReader::default();
        r.encrypt();
        let mut out = Vec::new();
        r.feed(&wire, &mut out).unwrap();
        assert!(!out.iter().any(|p| matches!(p, Piece::Handshake { .. } | Piece::Alert { .. })));
    }

    #[test]
    fn bad_framing_stops_the_reader_with_its_reason() {
        for (wire, bad) in [
            (vec![0x17, 3, 3, 0xff, 0xff], TlsBad::RecordTooLong),
            (vec![0x30, 3, 3, 0, 1, 0], TlsBad::BadRecordType),
            (vec![0x17, 2, 0, 0, 1, 0], TlsBad::BadRecordVersion),
        ] {
            let mut r = RecordReader::default();
            let mut out = Vec::new();
            assert_eq!(r.feed(&wire, &mut out), Err(bad));
            assert_eq!(r.feed(&record(APPLICATION_DATA, &[1]), &mut out), Err(bad), "and it stays stopped");
            assert_eq!(r.failed(), Some(bad));
        }
    }

    #[test]
    fn a_handshake_message_too_long_to_keep_goes_by_and_the_next_is_read() {
        // A 100,000-byte certificate message over seven records, then a ServerHelloDone.
        let long = message(11, &vec![7; 100_000]);
        let mut wire: Vec<u8> = long.chunks(16_000).flat_map(|c| record(HANDSHAKE, c)).collect();
        wire.extend(record(HANDSHAKE, &message(14, &[])));
        for cut in [1000, 16_005, wire.len()] {
            let mut r = RecordReader::default();
            let mut out = Vec::new();
            for piece in wire.chunks(cut) {
                r.feed(piece, &mut out).unwrap();
            }
            let hs: Vec<(u8, usize)> =
                out.iter().filter_map(|p| if let Piece::Handshake { msg_type, body } = p { Some((*msg_type, body.len())) } else { None }).collect();
            assert_eq!(hs, vec![(11, 0), (14, 0)], "cut {cut}");
            assert!(r.held_bytes() <= HANDSHAKE_MAX + RECORD_MAX, "held {}", r.held_bytes());
        }
    }

    #[test]
    fn an_sslv2_client_hello_is_read_and_a_bad_one_refused() {
        // Offering TLS 1.0 (3.1): 3 cipher specs (9 bytes), no session id, a 16-byte challenge.
        let body = [&[1u8, 3, 1, 0, 9, 0, 0, 0, 16][..], &[0; 9], &[0x42; 16]].concat();
        let hello = [&[0x80 | (body.len() >> 8) as u8, body.len() as u8][..], &body].concat();
        assert!(opens_tls(&hello));
        let mut r = RecordReader::default();
        let mut out = Vec::new();
        r.feed(&hello, &mut out).unwrap();
        assert_eq!(out, vec![Piece::Sslv2Hello(ClientHello { version: 0x0301, ..ClientHello::default() })]);
        let mut wrong = hello.clone();
        wrong[1] += 1;
        assert_eq!(sslv2_hello(&wrong), Err(TlsBad::BadSslv2Hello));
    }

    #[test]
    fn tls_is_told_from_http_by_its_first_bytes() {
        let hello = record(HANDSHAKE, &message(CLIENT_HELLO, &client_hello_body()));
        assert!(opens_tls(&hello));
        assert!(!opens_tls(b"GET / HTTP/1.1\r\n"));
        assert!(!opens_tls(&record(APPLICATION_DATA, &[0; 8])));
        assert!(!opens_tls(&hello[..4]));
        assert_eq!(ske_curve(&[3, 0, 23, 65]), Some(23));
        assert_eq!(ske_curve(&[1, 0, 23]), None);
        assert!(is_alert_record(&record(ALERT, &[2, 40])));
    }
}
