//! Load for the rlm lab: emulated browsers, open-loop generators and WAN emulation.
//!
//! - [`browser`]: closed-loop emulated browsers (004's modified TPC-W browser) and their ground truth;
//! - [`openloop`]: the open-loop generator of the SRPT experiments (Poisson arrivals at a load ρ
//!   of a shaped link, 001 Table 1 sizes, 000 Table I transient overloads);
//! - [`wan`]: WAN delay and loss through NFQUEUE;
//! - [`tcp_profile`]: the clients' SYN behaviour (`xp`, `linux`);
//! - [`syn_timeout`]: the sock_ops program (`bpf/syn_timeout.bpf.c`, built by `build.rs` with
//!   clang, loaded with aya) that gives a cgroup's sockets the profile's initial SYN timeout;
//! - [`dist`]: the size model of 001 Table 1 and TPC-W's think time.

pub mod browser;
pub mod dist;
pub mod openloop;
pub mod syn_timeout;
pub mod tcp_profile;
pub mod tls;
pub mod wan;

pub use syn_timeout::{kernel_hz, SynTimeout};
