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
pub mod running;
#[cfg(feature = "bpf")]
pub mod testrun;

/// Load an object of this crate, its maps named in `sizes` made that many entries (bytes for a
/// ring buffer): fill its `server_ports` map (every object that needs the servers' ports has
/// one, indexed by port) and put `programs` through the verifier.
#[cfg(feature = "bpf")]
pub(crate) fn load_object(object: &[u8], what: &str, server_ports: &[u16], programs: &[&str], sizes: &[(&str, u32)]) -> anyhow::Result<aya::Ebpf> {
    use anyhow::Context;
    let mut loader = aya::EbpfLoader::new();
    for &(name, n) in sizes {
        loader.set_max_entries(name, n);
    }
    let mut bpf = loader.load(object).with_context(|| format!("loading {what}"))?;
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

/// A map of `bpf` (an array or a hash) through a descriptor of its own (a door for another
/// thread: [`inline::ShardDoor`], [`classify::SrptDoor`]).
#[cfg(feature = "bpf")]
pub(crate) fn own_map(bpf: &aya::Ebpf, name: &str) -> anyhow::Result<aya::maps::Map> {
    use anyhow::{bail, Context};
    use aya::maps::{Map, MapData};
    use std::os::fd::AsFd;
    let map = bpf.map(name).with_context(|| format!("map {name}"))?;
    let copy = |data: &MapData| -> anyhow::Result<MapData> {
        let fd = data.fd().as_fd().try_clone_to_owned().with_context(|| format!("map {name}: cannot duplicate its descriptor"))?;
        Ok(MapData::from_fd(fd)?)
    };
    Ok(match map {
        Map::Array(m) => Map::Array(copy(m)?),
        Map::HashMap(m) => Map::HashMap(copy(m)?),
        Map::LruHashMap(m) => Map::LruHashMap(copy(m)?),
        _ => bail!("map {name}: not an array or a hash"),
    })
}

/// How long the programs of an object go on acting on the engine's behalf after its last beat
/// ([`Heartbeat`]): past it they fail open.
pub const HEARTBEAT_STALE: std::time::Duration = std::time::Duration::from_millis(500);

/// The engine's heartbeat in an object's `heartbeat` map (`bpf/common.h`): while it is watched
/// and stale, the programs pass (or put in band 0) every packet, unmarked and unreported. A
/// freshly loaded object is watched with [`HEARTBEAT_STALE`] and has no beat yet, so it acts
/// only once beaten.
#[cfg(feature = "bpf")]
pub(crate) struct Heartbeat {
    stale_ns: u64,
}

#[cfg(feature = "bpf")]
impl Heartbeat {
    /// Watch `bpf`'s heartbeat (`stale`: `None`, not watched: the programs act whatever the
    /// time, as tests that drive them without a loop want), with no beat yet.
    pub(crate) fn watch(bpf: &mut aya::Ebpf, stale: Option<std::time::Duration>) -> anyhow::Result<Heartbeat> {
        let stale_ns = stale.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
        let hb = Heartbeat { stale_ns };
        hb.write(bpf, 0)?;
        Ok(hb)
    }

    /// A beat now (CLOCK_MONOTONIC, the programs' clock).
    pub(crate) fn beat(&self, bpf: &mut aya::Ebpf) -> anyhow::Result<()> {
        self.write(bpf, monotonic_ns())
    }

    fn write(&self, bpf: &mut aya::Ebpf, last_ns: u64) -> anyhow::Result<()> {
        use anyhow::Context;
        let mut m: aya::maps::Array<&mut aya::maps::MapData, records::HeartbeatValue> =
            aya::maps::Array::try_from(bpf.map_mut("heartbeat").context("map heartbeat")?)?;
        m.set(0, records::HeartbeatValue { last_ns, stale_ns: self.stale_ns }, 0)?;
        Ok(())
    }
}

/// The size of a memory page: the smallest ring buffer.
#[cfg(feature = "bpf")]
fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(n).unwrap_or(4096)
}

/// CLOCK_MONOTONIC in nanoseconds: `bpf_ktime_get_ns`'s clock.
#[cfg(feature = "bpf")]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The tc programs of this crate, by the names they are attached under (`tc filter show` lists a
/// clsact filter by it): `inline.bpf.c`'s and `classify.bpf.c`'s.
pub const INLINE_PROGRAMS: [&str; 2] = ["syn_admit", "observe"];
pub const CLASSIFY_PROGRAMS: [&str; 2] = ["classify", "srpt_acks"];

/// How the tc programs are attached to a port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg(feature = "bpf")]
pub enum AttachMode {
    /// tcx links where the kernel has tcx (6.6 and later: aya's own choice), owned by the
    /// process: they go when it goes, however it ends. Older kernels: as [`AttachMode::Clsact`].
    #[default]
    Auto,
    /// Filters of a clsact qdisc, through netlink, as kernels before 6.6 have them: the kernel
    /// keeps them after the process is gone (see [`detach_leftovers`]).
    Clsact,
}

#[cfg(feature = "bpf")]
impl AttachMode {
    /// Whether programs attached this way are clsact filters (else tcx links).
    pub fn is_clsact(self) -> bool {
        match self {
            AttachMode::Clsact => true,
            AttachMode::Auto => aya::util::KernelVersion::current().map_or(true, |v| v < aya::util::KernelVersion::new(6, 6, 0)),
        }
    }
}

/// Attach a loaded program to `iface` in direction `dir`, as `mode` says; `first`: ahead of the
/// programs already there (tcx; a clsact filter attached later is ahead of those before it
/// anyway: netlink gives it the next lower priority number).
#[cfg(feature = "bpf")]
pub(crate) fn attach_program(
    prog: &mut aya::programs::SchedClassifier,
    iface: &str,
    dir: aya::programs::TcAttachType,
    mode: AttachMode,
    first: bool,
) -> anyhow::Result<()> {
    use aya::programs::links::LinkOrder;
    use aya::programs::tc::{self, NlOptions, TcAttachOptions};
    let options = if mode.is_clsact() {
        // The qdisc the filters hang from; one already there is fine.
        let _ = tc::qdisc_add_clsact(iface);
        TcAttachOptions::Netlink(NlOptions::default())
    } else {
        TcAttachOptions::TcxOrder(if first { LinkOrder::first() } else { LinkOrder::default() })
    };
    prog.attach_with_options(iface, dir, options)?;
    Ok(())
}

/// Detach every clsact filter on `ifaces` (ingress and egress) that is one of this crate's
/// programs ([`INLINE_PROGRAMS`], [`CLASSIFY_PROGRAMS`], by name): what an rlm that did not exit
/// cleanly leaves on a kernel without tcx, or with [`AttachMode::Clsact`]. tcx links need no
/// such cleaning (they go with their process). Returns what was detached, as `NAME on IFACE
/// ingress|egress`; an interface that does not exist or has no clsact qdisc has nothing to
/// detach. Call it before attaching: it would detach this process's own filters too.
#[cfg(feature = "bpf")]
pub fn detach_leftovers(ifaces: &[&str]) -> anyhow::Result<Vec<String>> {
    use aya::programs::{tc, TcAttachType};
    let mut detached = Vec::new();
    let mut errors = Vec::new();
    for &iface in ifaces {
        if !std::path::Path::new("/sys/class/net").join(iface).exists() {
            continue;
        }
        for (dir, dir_name) in [(TcAttachType::Ingress, "ingress"), (TcAttachType::Egress, "egress")] {
            for name in INLINE_PROGRAMS.iter().chain(&CLASSIFY_PROGRAMS) {
                match tc::qdisc_detach_program(iface, dir, name) {
                    Ok(()) => detached.push(format!("{name} on {iface} {dir_name}")),
                    // No such filter, or no clsact qdisc to hold one (the kernel says EINVAL).
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::EINVAL) => {}
                    Err(e) => errors.push(format!("{name} on {iface} {dir_name}: {e}")),
                }
            }
        }
    }
    if !errors.is_empty() {
        anyhow::bail!("detaching rlm's leftover tc filters: {} (detached: {detached:?})", errors.join("; "));
    }
    Ok(detached)
}

#[cfg(feature = "bpf")]
pub use classify::{
    classid, is_bpffs, ClassCount, FlowKey, FlowState, KeptState, SrptCounters, SrptDoor, SrptEgress, SrptMode, SrptParams, MAX_CLASSES,
};
