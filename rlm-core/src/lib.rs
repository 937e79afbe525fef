//! rlm-core: the sans-IO engine of the rlm appliance.
//!
//! Data flows wire → flow → http → pageview: frames are decoded
//! ([`wire`]), tracked as TCP connections ([`flow`]), read as HTTP
//! transactions ([`http`]) and correlated into pageviews ([`pageview`]).
//! [`engine::Engine`] ties them together behind a sans-IO interface; the
//! drivers ([`capture`]) and commands ([`analyze`]) sit around it.

pub mod actions;
pub mod adapt;
pub mod analyze;
pub mod capture;
pub mod engine;
pub mod flow;
pub mod http;
pub mod live;
pub mod pageview;
pub mod policy;
pub mod testkit;
pub mod time;
pub mod wire;

pub use engine::{Config, DecisionRecord, Engine, Event, FastpathUpdate, Port, Stats, SynMode, TransactionRecord, Verdict};
pub use pageview::{PageviewConfig, PageviewRecord};
pub use time::Timestamp;
