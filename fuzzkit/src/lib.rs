//! rlm's fuzz targets as plain functions of the input's bytes, one per target: `fuzz/` wraps
//! each in a one-line cargo-fuzz target (`fuzz_target!(|data: &[u8]| fuzzkit::TARGET(data))`),
//! and `tests/corpora.rs` replays every file of `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` through them on every `cargo test` (debug, overflow checks on).
//! The structured targets read their operations with `arbitrary`; [`seed`] writes operations in
//! that format, for seeds.
//!
//! | target | what it feeds |
//! | --- | --- |
//! | [`engine_frames`] | frames and segments of 8 connections to an engine with no rules |
//! | [`rules_parse`] | a rule file: compile, print back, evaluate |

pub mod engine_frames;
pub mod rules_parse;
pub mod seed;

pub use engine_frames::engine_frames;
pub use rules_parse::rules_parse;

/// A target: it takes any bytes, and panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target built, by its name in `fuzz/` (a directory of `fuzz/corpus/` and
/// `fuzz/regressions/` each).
pub const TARGETS: &[(&str, Target)] = &[("engine_frames", engine_frames), ("rules_parse", rules_parse)];
