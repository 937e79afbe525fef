//! What the tests of `rlm run` on a bridge of their own share (`tests/inline.rs`,
//! `tests/inline_srpt.rs`): three network namespaces, shell commands, `rlm status`.

#![allow(dead_code)]

use std::process::Command;

pub use lab_netns::is_root;

/// Run `cmd` with sh; its stdout. Fails the test if it fails.
pub fn sh(cmd: &str) -> String {
    lab_netns::sh(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// Move this thread into network namespace `ns`.
pub fn enter(ns: &str) {
    lab_netns::enter(ns).unwrap_or_else(|e| panic!("{e}"))
}

/// Client, bridge and server namespaces `{prefix}-c`, `-b`, `-s` ([`lab_netns::Bridge`]).
pub struct Topology(lab_netns::Bridge);

impl Topology {
    pub fn up(prefix: &str, net: &str) -> Topology {
        Topology(lab_netns::Bridge::up(prefix, net).unwrap_or_else(|e| panic!("{e}")))
    }

    /// GRO, GSO and TSO off on every port, as docs/deployment.md asks of the bridge's ports.
    pub fn offloads_off(&self) {
        self.0.offloads_off().unwrap_or_else(|e| panic!("{e}"))
    }
}

/// `rlm status` against the rlm in namespace `ns` serving `metrics`.
pub fn status(ns: &str, metrics: &str) -> Option<serde_json::Value> {
    let out = Command::new("ip").args(["netns", "exec", ns, env!("CARGO_BIN_EXE_rlm"), "status", "--metrics", metrics]).output().ok()?;
    serde_json::from_slice(&out.stdout).ok()
}
