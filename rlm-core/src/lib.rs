//! rlm-core: the sans-IO engine of the rlm appliance.
//!
//! Data flows wire → flow → http → pageview: frames are decoded
//! ([`wire`]), tracked as TCP connections ([`flow`]), read as HTTP
//! transactions ([`http`]) or TLS exchanges ([`tls`]) and correlated into
//! pageviews ([`pageview`]); QUIC's UDP flows are counted ([`quic`]).
//! [`engine::Engine`] ties them together behind a sans-IO interface: it takes
//! `(now, port, frame)` and timer ticks and hands back verdicts, frames to send,
//! timers and events. It reads no clock and does no I/O; the `rlm` crate holds the
//! drivers (capture files, the live inline path) and the commands around it.
//! `testkit` (feature `testkit`) builds TCP conversations for tests and benches.

#![warn(missing_docs)]

pub mod actions;
pub mod adapt;
pub mod analyzer;
mod bounded;
pub mod engine;
pub mod flow;
pub mod http;
pub mod pageview;
pub mod policy;
pub mod quic;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod time;
pub mod tls;
pub mod wire;

pub use engine::{Config, DecisionRecord, Engine, Event, FastpathUpdate, Port, Stats, SynMode, TlsRecord, TransactionRecord, Verdict};
pub use pageview::{PageviewConfig, PageviewRecord};
pub use time::Timestamp;
