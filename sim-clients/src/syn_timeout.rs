//! The initial SYN timeout of a cgroup's sockets, set by a sock_ops program.
//!
//! A socket's cgroup is fixed when the socket is created, so a process must join the cgroup
//! before it opens its sockets (and before `ip netns exec` remounts /sys under it).

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use aya::maps::{Array, MapData};
use aya::programs::{CgroupAttachMode, SockOps};
use aya::{include_bytes_aligned, Ebpf};

static SYN_TIMEOUT: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/syn_timeout.bpf.o"));

/// The kernel's HZ (jiffies per second), from its configuration (/proc/config.gz).
pub fn kernel_hz() -> Result<u32> {
    let f = File::open("/proc/config.gz").context("reading /proc/config.gz for CONFIG_HZ")?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(f).read_to_string(&mut text).context("decompressing /proc/config.gz")?;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("CONFIG_HZ=") {
            return v.trim().parse().context("CONFIG_HZ is not a number");
        }
    }
    bail!("CONFIG_HZ not found in /proc/config.gz")
}

/// The program attached to one cgroup (v2). Detached when dropped.
pub struct SynTimeout {
    bpf: Ebpf,
}

impl SynTimeout {
    /// Give the sockets of the cgroup at `cgroup` (a cgroup v2 directory) an initial SYN timeout.
    pub fn attach(cgroup: &Path, initial: Duration) -> Result<SynTimeout> {
        let hz = kernel_hz()?;
        let jiffies = (initial.as_secs_f64() * hz as f64).round() as u32;
        if jiffies == 0 {
            bail!("initial SYN timeout {initial:?} is below one jiffy");
        }
        let mut bpf = Ebpf::load(SYN_TIMEOUT).context("loading the SYN timeout program")?;
        {
            let mut t: Array<&mut MapData, u32> = Array::try_from(bpf.map_mut("timeout_jiffies").context("map timeout_jiffies")?)?;
            t.set(0, jiffies, 0)?;
        }
        let dir = File::open(cgroup).with_context(|| format!("cgroup {}", cgroup.display()))?;
        let prog: &mut SockOps = bpf.program_mut("syn_timeout").context("program syn_timeout missing")?.try_into()?;
        prog.load().context("the verifier rejected syn_timeout")?;
        prog.attach(dir, CgroupAttachMode::Single).with_context(|| format!("attaching to {}", cgroup.display()))?;
        Ok(SynTimeout { bpf })
    }

    /// How many sockets the program gave a timeout so far.
    pub fn answered(&self) -> Result<u64> {
        let a: Array<&MapData, u64> = Array::try_from(self.bpf.map("answered").context("map answered")?)?;
        Ok(a.get(&0, 0)?)
    }
}
