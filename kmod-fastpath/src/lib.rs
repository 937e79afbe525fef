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
//! - [`ring`]: the ring buffer's records and their reading ([`ring::Event::parse`]).
//! - `records` (private): the Rust side of the records shared with the programs
//!   (`bpf/common.h`), `#[repr(C)]` structs checked against the C definitions by a test.
//! - [`testrun`]: runs a loaded program on a frame inside the kernel (`BPF_PROG_TEST_RUN`), for
//!   the tests and the SYN-drop benchmark.
//!
//! It holds the appliance's programs only: the lab's client-side sock_ops program (the clients'
//! initial SYN timeout) is `sim_clients::SynTimeout`, with the clients it serves.

// Without the `bpf` feature (on by default) only `ring` is built: no clang, no aya.
#[cfg(feature = "bpf")]
pub mod classify;
#[cfg(feature = "bpf")]
pub mod inline;
#[cfg(feature = "bpf")]
mod records;
pub mod ring;
#[cfg(feature = "bpf")]
pub mod testrun;

/// Load an object of this crate: fill its `server_ports` map (every object that needs the
/// servers' ports has one, indexed by port) and put `programs` through the verifier.
#[cfg(feature = "bpf")]
pub(crate) fn load_object(object: &[u8], what: &str, server_ports: &[u16], programs: &[&str]) -> anyhow::Result<aya::Ebpf> {
    use anyhow::Context;
    let mut bpf = aya::Ebpf::load(object).with_context(|| format!("loading {what}"))?;
    {
        let mut ports: aya::maps::Array<&mut aya::maps::MapData, u8> =
            aya::maps::Array::try_from(bpf.map_mut("server_ports").context("map server_ports")?)?;
        for &p in server_ports {
            ports.set(u32::from(p), 1, 0).with_context(|| format!("server port {p}"))?;
        }
    }
    for name in programs {
        let prog: &mut aya::programs::SchedClassifier = bpf.program_mut(name).with_context(|| format!("program {name} missing"))?.try_into()?;
        prog.load().with_context(|| format!("the verifier rejected {name}"))?;
    }
    Ok(bpf)
}

#[cfg(feature = "bpf")]
pub use classify::{classid, is_bpffs, ClassCount, FlowKey, FlowState, KeptState, SrptCounters, SrptEgress, SrptMode, SrptParams, MAX_CLASSES};
