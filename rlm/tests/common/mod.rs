//! What the tests of `rlm run` on a bridge of their own share (`tests/inline.rs`,
//! `tests/inline_srpt.rs`): three network namespaces, shell commands, `rlm status`.

#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

/// Run `cmd` with sh; its stdout. Fails the test if it fails.
pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().expect("sh");
    assert!(out.status.success(), "failed: {cmd}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Move this thread into network namespace `ns`.
pub fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("namespace");
    // SAFETY: setns with a valid namespace descriptor changes only this thread's namespace.
    assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {ns}");
}

/// Client, bridge and server namespaces `{prefix}-c`, `-b`, `-s`: the client's `c0` and the
/// server's `s0` joined by veths to `bc` and `bs`, ports of `br0` in the bridge namespace; the
/// client is `{net}.2/24`, the server `{net}.1/24`. Removed on drop (and before, if an earlier
/// run left them).
pub struct Topology {
    names: [String; 3],
}

impl Topology {
    pub fn up(prefix: &str, net: &str) -> Topology {
        let t = Topology { names: [format!("{prefix}-c"), format!("{prefix}-b"), format!("{prefix}-s")] };
        t.down_quiet();
        let [c, b, s] = &t.names;
        for ns in &t.names {
            sh(&format!("ip netns add {ns} && ip -n {ns} link set lo up"));
        }
        sh(&format!("ip link add c0 netns {c} type veth peer name bc netns {b}"));
        sh(&format!("ip link add s0 netns {s} type veth peer name bs netns {b}"));
        sh(&format!("ip -n {b} link add br0 type bridge && ip -n {b} link set bc master br0 && ip -n {b} link set bs master br0"));
        for (ns, dev) in [(b, "br0"), (b, "bc"), (b, "bs"), (c, "c0"), (s, "s0")] {
            sh(&format!("ip -n {ns} link set {dev} up"));
        }
        sh(&format!("ip -n {c} addr add {net}.2/24 dev c0 && ip -n {s} addr add {net}.1/24 dev s0"));
        t
    }

    /// GRO, GSO and TSO off on every port, as docs/deployment.md asks of the bridge's ports.
    pub fn offloads_off(&self) {
        let [c, b, s] = &self.names;
        for (ns, dev) in [(b, "bc"), (b, "bs"), (c, "c0"), (s, "s0")] {
            sh(&format!("ip netns exec {ns} ethtool -K {dev} tso off gso off gro off"));
        }
    }

    fn down_quiet(&self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.down_quiet();
    }
}

/// `rlm status` against the rlm in namespace `ns` serving `metrics`.
pub fn status(ns: &str, metrics: &str) -> Option<serde_json::Value> {
    let out = Command::new("ip").args(["netns", "exec", ns, env!("CARGO_BIN_EXE_rlm"), "status", "--metrics", metrics]).output().ok()?;
    serde_json::from_slice(&out.stdout).ok()
}
