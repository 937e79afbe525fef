//! TLS bytes for tests: handshake messages, records, extensions, and the flights of whole
//! handshakes, as a client and a server send them.

use crate::tls::parser::{APPLICATION_DATA, CHANGE_CIPHER_SPEC, HANDSHAKE};

/// A handshake message of `msg_type` around `body`.
pub fn message(msg_type: u8, body: &[u8]) -> Vec<u8> {
    let n = body.len();
    [&[msg_type, (n >> 16) as u8, (n >> 8) as u8, n as u8][..], body].concat()
}

/// A record of `ctype` around `body`.
pub fn record(ctype: u8, body: &[u8]) -> Vec<u8> {
    [&[ctype, 3, 3, (body.len() >> 8) as u8, body.len() as u8][..], body].concat()
}

/// An extension of `ext_type` around `data`.
pub fn ext(ext_type: u16, data: &[u8]) -> Vec<u8> {
    [&ext_type.to_be_bytes()[..], &(data.len() as u16).to_be_bytes(), data].concat()
}

/// A ClientHello body offering `shop.example` by SNI, h2 and http/1.1 by ALPN, TLS 1.3 and
/// 1.2, with a 32-byte session id.
pub fn client_hello_body() -> Vec<u8> {
    client_hello_body_offering(&[b"h2", b"http/1.1"])
}

/// [`client_hello_body`] offering `protocols` by ALPN.
pub fn client_hello_body_offering(protocols: &[&[u8]]) -> Vec<u8> {
    client_hello_body_for(b"shop.example", protocols)
}

/// A ClientHello body naming `name` by SNI and offering `protocols` by ALPN.
pub fn client_hello_body_for(name: &[u8], protocols: &[&[u8]]) -> Vec<u8> {
    let sni = [&((name.len() + 3) as u16).to_be_bytes()[..], &[0], &(name.len() as u16).to_be_bytes(), name].concat();
    let alpn_list: Vec<u8> = protocols.iter().flat_map(|p| [&[p.len() as u8][..], p].concat()).collect();
    let alpn = [&(alpn_list.len() as u16).to_be_bytes()[..], &alpn_list].concat();
    let versions = [4u8, 3, 4, 3, 3];
    let exts = [ext(0, &sni), ext(16, &alpn), ext(43, &versions)].concat();
    [&[3u8, 3][..], &[7; 32], &[32], &[9; 32], &[0, 2, 0x13, 0x01], &[1, 0], &(exts.len() as u16).to_be_bytes(), &exts].concat()
}

/// A TLS 1.3 ServerHello body: TLS_AES_128_GCM_SHA256, supported_versions 1.3, an x25519
/// key share, the client's session id echoed.
pub fn server_hello_body() -> Vec<u8> {
    let exts = [ext(43, &[3, 4]), ext(51, &[[0u8, 29, 0, 32].as_slice(), &[5; 32]].concat())].concat();
    [&[3u8, 3][..], &[8; 32], &[32], &[9; 32], &[0x13, 0x01], &[0], &(exts.len() as u16).to_be_bytes(), &exts].concat()
}

/// A TLS 1.2 ServerHello body choosing `cipher`, with session id `sid` and `exts`.
pub fn server_hello_12(cipher: u16, sid: &[u8], exts: &[u8]) -> Vec<u8> {
    [&[3u8, 3][..], &[8; 32], &[sid.len() as u8], sid, &cipher.to_be_bytes(), &[0], &(exts.len() as u16).to_be_bytes(), exts].concat()
}

/// A ClientHello record ([`client_hello_body`]).
pub fn client_hello_record() -> Vec<u8> {
    record(HANDSHAKE, &message(1, &client_hello_body()))
}

/// A ClientHello record naming `name` by SNI, offering only `protocols` by ALPN.
pub fn client_hello_record_for(name: &[u8], protocols: &[&[u8]]) -> Vec<u8> {
    record(HANDSHAKE, &message(1, &client_hello_body_for(name, protocols)))
}

/// A ClientHello record offering only `protocols` by ALPN.
pub fn client_hello_record_offering(protocols: &[&[u8]]) -> Vec<u8> {
    record(HANDSHAKE, &message(1, &client_hello_body_offering(protocols)))
}

/// A TLS 1.3 server's first flight: its ServerHello ([`server_hello_body`]), a
/// ChangeCipherSpec and its encrypted handshake (one application record of 900 bytes).
pub fn server_flight_13() -> Vec<u8> {
    [record(HANDSHAKE, &message(2, &server_hello_body())), record(CHANGE_CIPHER_SPEC, &[1]), record(APPLICATION_DATA, &[0x17; 900])].concat()
}

/// A TLS 1.3 client's end of the handshake: a ChangeCipherSpec and its Finished (an application
/// record of 53 bytes).
pub fn client_finished_13() -> Vec<u8> {
    [record(CHANGE_CIPHER_SPEC, &[1]), record(APPLICATION_DATA, &[0x17; 53])].concat()
}

/// A TLS 1.3 server's NewSessionTicket as rustls sends it (a 32-byte nonce and ticket id: 81
/// bytes, in an application record of 98).
pub fn session_ticket_13() -> Vec<u8> {
    app(81 + 17)
}

/// An application record of `len` bytes.
pub fn app(len: usize) -> Vec<u8> {
    record(APPLICATION_DATA, &vec![0x17; len])
}
