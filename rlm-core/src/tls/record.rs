//! What a TLS connection was, as ssl.log has it: the fields rlm reads from the handshake in the
//! clear (Zeek's meanings and, through [`super::names`], its spellings), and rlm's own.

use crate::time::Timestamp;

/// The most letters `ssl_history` keeps (Zeek's `max_ssl_history_length`).
pub const HISTORY_MAX: usize = 100;

/// One TLS connection, as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSession {
    /// When its first TLS message was read (Zeek `ts`).
    pub first_ts: Option<Timestamp>,
    /// The version the server chose: its supported_versions, else its ServerHello's.
    pub version: Option<u16>,
    /// The cipher suite the server chose (its last ServerHello's, after a HelloRetryRequest).
    pub cipher: Option<u32>,
    /// The group of the key exchange: the ServerKeyExchange's named curve (ECDHE), or the
    /// server's key_share.
    pub curve: Option<u16>,
    /// The ClientHello's first host name (SNI), as sent.
    pub server_name: Option<Vec<u8>>,
    /// Zeek's `resumed`: the session id echoed (before TLS 1.3), a ticket without a key
    /// exchange, or a PSK the server took.
    pub resumed: bool,
    /// The description of the last alert read in the clear.
    pub last_alert: Option<u8>,
    /// The protocol the server's ALPN chose (visible up to TLS 1.2).
    pub next_protocol: Option<Vec<u8>>,
    /// Zeek's `established`: a record was read as ciphertext while both sides encrypted.
    pub established: bool,
    /// Zeek's `ssl_history`: a letter per message, upper case the client's.
    pub history: String,
    /// The protocols the client's ALPN offered.
    pub client_alpn: Vec<Vec<u8>>,
    /// The versions the client's supported_versions offered.
    pub client_versions: Vec<u16>,
    /// Records each way (client's, server's).
    pub records: [u64; 2],
    /// Their body bytes each way.
    pub record_bytes: [u64; 2],
    /// Why bytes were not read as TLS, if they were not (the first reason each way).
    pub bad: Vec<&'static str>,
    /// Joined after it began: its handshake was not seen.
    pub midstream: bool,
    /// Exchanges (client bursts and the server's records after them), and the server's
    /// application records before any request (tickets, an HTTP/2 server's SETTINGS).
    pub exchanges: u64,
    #[allow(missing_docs)]
    pub unsolicited: u32,
    /// Server records after the first request taken for TLS 1.3 session tickets, not its response.
    pub tickets: u32,
    /// Application records taken for HTTP/2 control (the client's preface, either side's
    /// WINDOW_UPDATEs, acknowledgements, GOAWAY), not requests nor response data.
    pub control_records: u32,
}

impl TlsSession {
    /// Add a history letter: `client`'s in upper case (Zeek's `add_to_history`).
    pub(super) fn history(&mut self, client: bool, letter: char) {
        if self.history.len() < HISTORY_MAX {
            self.history.push(if client { letter.to_ascii_uppercase() } else { letter });
        }
    }
}
