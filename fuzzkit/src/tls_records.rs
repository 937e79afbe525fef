//! Arbitrary bytes as a TLS connection's two streams: pieces of `[header: u16 big-endian, the
//! high bit set for the server's, the rest the length][bytes]` fed in order to the TLS
//! analyzer (the corpus's seeds are the zeek-ssl captures' first connections, segment by
//! segment), and the whole input through each handshake reader. Nothing may panic; what the
//! session counts stays within what was fed.

use rlm_core::time::Timestamp;
use rlm_core::tls::exchange::ExchangeEvent;
use rlm_core::tls::{parser, record::HISTORY_MAX, TlsConn, TlsEvent, TlsSession};

/// The target.
pub fn tls_records(data: &[u8]) {
    let _ = (parser::client_hello(data), parser::server_hello(data), parser::sslv2_hello(data), parser::ske_curve(data));
    let _ = (parser::opens_tls(data), parser::is_alert_record(data), parser::is_client_hello(data));
    let midstream = data.first().is_some_and(|b| b & 0x40 != 0);
    let mut conn = TlsConn::new(midstream);
    let mut fed = [0u64; 2];
    let mut rest = data;
    let mut t = 0;
    let mut exchanges = 0u64;
    while let [hi, lo, tail @ ..] = rest {
        let server = hi & 0x80 != 0;
        let len = (usize::from(hi & 0x7f) << 8 | usize::from(*lo)).min(tail.len());
        let (piece, after) = tail.split_at(len);
        rest = after;
        t += 1;
        let mut evs = Vec::new();
        conn.on_data(Timestamp::from_millis(t), !server, piece, &mut evs);
        exchanges += evs.iter().filter(|e| matches!(e, TlsEvent::Exchange(ExchangeEvent::Request { .. }))).count() as u64;
        fed[usize::from(server)] += piece.len() as u64;
        if hi & 0x40 != 0 && len == 0 {
            conn.on_gap(!server);
        }
        assert!(conn.held_bytes() <= 2 * (parser::HANDSHAKE_MAX + parser::RECORD_MAX) + 4 * HISTORY_MAX, "held {}", conn.held_bytes());
    }
    let mut out = Vec::new();
    conn.close(&mut out);
    conn.close(&mut out);
    let sessions: Vec<&TlsSession> = out.iter().filter_map(|e| if let TlsEvent::Session(s) = e { Some(&**s) } else { None }).collect();
    let [s] = sessions[..] else { panic!("one session at close: {out:?}") };
    assert_eq!(s.exchanges, exchanges, "every exchange begun is counted");
    assert!(s.record_bytes[0] <= fed[0] && s.record_bytes[1] <= fed[1], "{:?} of {fed:?}", s.record_bytes);
    assert!(s.history.len() <= HISTORY_MAX);
    assert!(!(s.midstream && s.established), "a connection joined mid-stream is never established");
}
