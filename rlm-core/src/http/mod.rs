//! HTTP/1.x over a tracked connection: heads, body framing, pairing, embed scanning.

pub mod chunked;
pub mod conn;
pub mod decode;
pub mod embed;
pub mod head;

pub use conn::{HttpConn, HttpEvent, HttpOptions, KeepHeaders, Txn};
pub use embed::{EmbedKind, EmbedRef, EmbedScanner};
pub use head::{Anomalies, Coding, Destination, Framing, RequestHead, ResponseHead, Version};
