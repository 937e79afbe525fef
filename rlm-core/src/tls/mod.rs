//! The TLS analyzer's rooms, as `http/`'s: `parser` reads the record layer and, in the clear,
//! the handshake (with rusticata's tls-parser), without keys: after the handshake only records'
//! types, lengths and times are read, nothing is decrypted; `conn` is a connection's state and
//! Zeek's rules for `established` and `resumed`; `record` is what a connection was (ssl.log's
//! fields); `names` spells it as Zeek's ssl.log does; `exchange` makes exchanges (a client
//! burst and the server's records after it) of the application records.

pub mod conn;
pub mod exchange;
pub mod names;
pub mod parser;
pub mod record;
mod zeek_names;

pub use conn::{TlsConn, TlsEvent};
pub use parser::{ClientHello, Piece, RecordReader, ServerHello, TlsBad};
pub use record::TlsSession;
