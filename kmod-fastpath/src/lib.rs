//! The kernel fast path of rlm.
//!
//! This kernel cannot load modules, so the fast path is eBPF: programs written in C under
//! `bpf/`, compiled by `build.rs` with clang, embedded in this crate and loaded with aya. Maps
//! are the only interface between the kernel and user space.
//!
//! - [`classify`]: the egress classifier (`bpf/classify.bpf.c`), a tc program that looks each
//!   outbound IPv4 TCP/UDP packet's flow up in `flow_class` and sets `skb->priority` to the HTB
//!   classid the engine chose (strict priority = HTB classes with `prio`), counting per class.
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

pub use classify::{classid, ClassCount, EgressClassifier, FlowKey, MAX_CLASSES};
pub use syn_timeout::{kernel_hz, SynTimeout};
