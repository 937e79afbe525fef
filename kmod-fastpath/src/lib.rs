//! The kernel fast path of rlm.
//!
//! This kernel cannot load modules, so the fast path is eBPF: programs written in C under
//! `bpf/`, compiled by `build.rs` with clang, embedded in this crate and loaded with aya. Maps
//! are the only interface between the kernel and user space.
//!
//! - [`classify`]: the SRPT egress classifier (`bpf/classify.bpf.c`), a tc program on the client
//!   port's egress that sets each packet's `skb->priority` to an HTB classid by its response's
//!   remaining bytes (strict priority = HTB classes with `prio`), and keeps per-flow accounting.
//! - [`inline`]: the fast path of `rlm run` (`bpf/inline.bpf.c`): SYN admission in the kernel
//!   from verdicts the engine publishes, and the packets the engine measures through a ring buffer.
//! - [`testrun`]: runs a loaded program on a frame inside the kernel (`BPF_PROG_TEST_RUN`), for
//!   the tests and the SYN-drop benchmark.
//! - [`syn_timeout`]: the lab's client-side sock_ops program (`bpf/syn_timeout.bpf.c`) that sets
//!   the initial SYN timeout of a cgroup's sockets (the `xp` browser profile). It lives here so
//!   that every eBPF program of the project is built and loaded one way.

pub mod classify;
pub mod inline;
pub mod syn_timeout;
pub mod testrun;

pub use classify::{classid, ClassCount, FlowKey, FlowState, SrptCounters, SrptEgress, SrptMode, SrptParams, MAX_CLASSES};
pub use syn_timeout::{kernel_hz, SynTimeout};
