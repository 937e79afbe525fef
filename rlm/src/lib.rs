//! rlm: the appliance around the sans-IO engine ([`rlm_core`]).
//!
//! The engine decides; this crate does the I/O it never does: [`capture`] reads pcap and pcapng
//! files (plain, gzip or zstd) and replays them through the engine, [`analyze`] is the
//! `rlm analyze` command built on it, and [`live`] is `rlm run`, the inline driver (NFQUEUE,
//! the eBPF fast path, injection, shaping, metrics, status and the status page), whose page [`top`]
//! shows in a terminal. Both write their records as
//! JSON lines through [`records`]. The `rlm` binary's command line is `src/main.rs` and
//! `src/commands.rs`.

pub mod analyze;
/// The capture reader, a crate of its own (`capture/`) so that it builds without the appliance.
pub use rlm_capture as capture;
pub mod live;
pub mod records;
pub mod top;
