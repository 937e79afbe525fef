//! Running a loaded tc program on a frame inside the kernel (`BPF_PROG_TEST_RUN`), without a
//! device or a wire: the fast path's tests and the SYN-drop benchmark use it. The program runs
//! exactly as on a port (JIT, maps, ring buffer), on an `skb` the kernel builds from the frame.
//!
//! aya 0.13 has no wrapper for this command, so it is one `bpf(2)` call here.

use std::os::fd::{AsFd, AsRawFd};

use anyhow::{bail, Result};

/// `BPF_PROG_TEST_RUN` in `enum bpf_cmd`.
const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// The `test` member of `union bpf_attr` (linux/bpf.h), as far as rlm uses it.
#[repr(C)]
#[derive(Default)]
struct TestAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    pad: u32,
}

/// The first fields of `struct __sk_buff` (linux/bpf.h), up to `priority`; the kernel hands back
/// the whole context, of which these are read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SkBuffHead {
    pub len: u32,
    pub pkt_type: u32,
    pub mark: u32,
    pub queue_mapping: u32,
    pub protocol: u32,
    pub vlan_present: u32,
    pub vlan_tci: u32,
    pub vlan_proto: u32,
    pub priority: u32,
}

/// `sizeof(struct __sk_buff)` on 64-bit kernels since 5.x (the context the kernel writes back).
const SK_BUFF_SIZE: usize = 192;

/// What one test run gave.
#[derive(Clone, Copy, Debug)]
pub struct TestRun {
    /// The program's return value (`TC_ACT_OK` 0, `TC_ACT_SHOT` 2).
    pub retval: u32,
    /// Mean nanoseconds per run, as the kernel timed it.
    pub ns_per_run: u32,
    /// The `skb`'s mark and priority after the (last) run.
    pub skb: SkBuffHead,
}

/// Where a test run's `skb` is, as a program sees it: the kernel runs it on the loopback device
/// (`skb->ifindex` 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arrival {
    /// Leaving the device (`skb->ingress_ifindex` 0: it came from elsewhere, or from this host).
    #[default]
    Leaving,
    /// Come in at the device (`skb->ingress_ifindex == skb->ifindex`).
    CameIn,
}

/// `offsetof(struct __sk_buff, ingress_ifindex)`.
const INGRESS_IFINDEX_AT: usize = 36;

/// Run the loaded tc program `name` of `bpf` on `frame` `repeat` times on this CPU.
pub(crate) fn run_program(bpf: &aya::Ebpf, name: &str, frame: &[u8], repeat: u32, arrival: Arrival) -> Result<TestRun> {
    use anyhow::Context;
    let p: &aya::programs::SchedClassifier = bpf.program(name).with_context(|| format!("program {name} missing"))?.try_into()?;
    run(p.fd()?, frame, repeat, arrival)
}

/// Run the program `prog` on `frame` (an Ethernet frame) `repeat` times on this CPU, the `skb`
/// where `arrival` says.
pub fn run(prog: &impl AsFd, frame: &[u8], repeat: u32, arrival: Arrival) -> Result<TestRun> {
    if frame.len() < 14 {
        bail!("a test frame needs at least an Ethernet header ({} bytes)", frame.len());
    }
    let mut ctx_out = [0u8; SK_BUFF_SIZE];
    // The context handed in: zero but for the fields the kernel takes from it (mark, priority,
    // ingress_ifindex, ifindex, ...); ifindex 0 is the loopback device.
    let mut ctx_in = [0u8; SK_BUFF_SIZE];
    if arrival == Arrival::CameIn {
        ctx_in[INGRESS_IFINDEX_AT..INGRESS_IFINDEX_AT + 4].copy_from_slice(&1u32.to_ne_bytes());
    }
    let mut attr = TestAttr {
        prog_fd: prog.as_fd().as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        repeat: repeat.max(1),
        ctx_size_in: SK_BUFF_SIZE as u32,
        ctx_in: ctx_in.as_ptr() as u64,
        ctx_size_out: SK_BUFF_SIZE as u32,
        ctx_out: ctx_out.as_mut_ptr() as u64,
        ..TestAttr::default()
    };
    // SAFETY: attr points to a valid TestAttr of the size passed; data_in, ctx_in and ctx_out
    // point to buffers of the sizes given in it, alive for the call (the kernel reads frame and
    // ctx_in, writes ctx_out and attr).
    let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_TEST_RUN, &mut attr as *mut TestAttr, std::mem::size_of::<TestAttr>() as u32) };
    if rc < 0 {
        bail!("BPF_PROG_TEST_RUN: {}", std::io::Error::last_os_error());
    }
    // SAFETY: ctx_out holds SK_BUFF_SIZE initialised bytes, more than SkBuffHead (plain u32s).
    let skb = unsafe { std::ptr::read_unaligned(ctx_out.as_ptr() as *const SkBuffHead) };
    Ok(TestRun { retval: attr.retval, ns_per_run: attr.duration, skb })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_layout_matches_linux_bpf_h() {
        // union bpf_attr's test member: 12 u32 and 4 u64 fields, up to batch_size at 76.
        assert_eq!(std::mem::size_of::<TestAttr>(), 80);
        assert_eq!(std::mem::offset_of!(TestAttr, repeat), 32);
        assert_eq!(std::mem::offset_of!(TestAttr, ctx_out), 56);
        assert_eq!(std::mem::offset_of!(TestAttr, batch_size), 72);
        assert_eq!(std::mem::offset_of!(SkBuffHead, mark), 8);
        assert_eq!(std::mem::offset_of!(SkBuffHead, priority), 32);
        // ingress_ifindex follows priority.
        assert_eq!(INGRESS_IFINDEX_AT, std::mem::size_of::<SkBuffHead>());
    }
}

/// A BPF filesystem of a test's own under the temporary directory (pinned maps), unmounted and
/// removed when dropped. Needs root.
pub struct Bpffs(pub std::path::PathBuf);

impl Bpffs {
    pub fn mount(name: &str) -> Bpffs {
        let dir = std::env::temp_dir().join(format!("rlm-bpffs-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the BPF filesystem");
        let ok = std::process::Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&dir).status().is_ok_and(|s| s.success());
        assert!(ok, "mount -t bpf bpf {}", dir.display());
        Bpffs(dir)
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}
