//! rlm's fuzz targets as plain functions of the input's bytes, one per target: `fuzz/` wraps
//! each in a one-line cargo-fuzz target (`fuzz_target!(|data: &[u8]| fuzzkit::TARGET(data))`),
//! and `tests/corpora.rs` replays every file of `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` through them on every `cargo test` (debug, overflow checks on).
//! The structured targets read their operations with `arbitrary`; [`seed`] writes operations in
//! that format, for seeds (`examples/seeds.rs`).
//!
//! | target | what it feeds |
//! | --- | --- |
//! | [`engine_frames`] | frames and segments of 8 connections to an engine with no rules |
//! | [`rules_parse`] | a rule file: compile, print back, evaluate |
//! | [`capture()`] | a capture file (pcap, pcapng, gzip, zstd) read and replayed |
//! | `run_config` | `rlm run`'s TOML configuration, parsed and checked (feature `appliance`) |
//! | [`mapping()`] | a `REWRITE EMBEDS` mapping file |
//! | [`ring_record`] | the fast path's ring buffer records, into an engine as `rlm run` does |
//! | [`raw_ip`] | bare IP packets (NFQUEUE's) on any port, under rules |
//! | [`engine_rules`] | a configured engine under rules: segments, decided SYNs, deadlines, reloads, with its bounds checked |
//! | [`tls_records`] | a TLS connection's two streams, piece by piece, into the TLS analyzer, and into its handshake readers |

pub mod capture;
pub mod engine_frames;
pub mod engine_rules;
pub mod mapping;
pub mod net;
pub mod raw_ip;
pub mod ring_record;
pub mod rulefiles;
pub mod rules_parse;
#[cfg(feature = "appliance")]
pub mod run_config;
pub mod seed;
pub mod tls_records;

pub use capture::capture;
pub use engine_frames::engine_frames;
pub use engine_rules::engine_rules;
pub use mapping::mapping;
pub use raw_ip::raw_ip;
pub use ring_record::ring_record;
pub use rules_parse::rules_parse;
#[cfg(feature = "appliance")]
pub use run_config::run_config;
pub use tls_records::tls_records;

/// A target: it takes any bytes, and panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target built, by its name in `fuzz/` (a directory of `fuzz/corpus/` and
/// `fuzz/regressions/` each).
pub const TARGETS: &[(&str, Target)] = &[
    ("engine_frames", engine_frames),
    ("rules_parse", rules_parse),
    ("capture", capture),
    #[cfg(feature = "appliance")]
    ("run_config", run_config),
    ("mapping", mapping),
    ("ring_record", ring_record),
    ("raw_ip", raw_ip),
    ("engine_rules", engine_rules),
    ("tls_records", tls_records),
];
