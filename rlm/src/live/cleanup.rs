//! What an `rlm run` that did not exit cleanly leaves on its bridge, and its removal.
//!
//! A clean exit removes everything rlm installed; a panic that unwinds does too (the guards'
//! `Drop` in `netfilter` and `shaper`). What is left after a SIGKILL, an abort or the OOM killer:
//!
//! - the queue rules (harmless by themselves: `--queue-bypass` accepts what no rlm reads);
//! - rlm's HTB tree on the client port (handle `7e1:`), which goes on shaping the port, all in one
//!   band, with no classifier;
//! - on the clsact path ([`kmod_fastpath::AttachMode::Clsact`], or a kernel without tcx) the tc
//!   filters: `syn_admit` goes on dropping the SYNs of the verdicts it was given, `classify` and
//!   `srpt_acks` on ranking. tcx links go with the process.
//!
//! [`cleanup`] removes all three, whatever the configuration of the run that left them. It runs
//! at every start of `rlm run` (before anything is attached: the filters are found by name),
//! in rlm's guard process when rlm dies without a clean exit (`guard`), and from `rlm cleanup`
//! (systemd's `ExecStopPost=`).

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{netfilter, shaper};

/// Where to look: the bridge and its ports, as `rlm run` was told them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupPlan {
    pub bridge: String,
    pub client_port: String,
    pub server_port: String,
}

/// What [`cleanup`] found and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// tc filters detached, as `NAME on IFACE ingress|egress`.
    pub filters: Vec<String>,
    /// rlm's root qdisc was deleted from the client port.
    pub qdisc: bool,
    /// rlm's netfilter rules were removed.
    pub rules: bool,
    /// What could not be removed, one message each.
    pub errors: Vec<String>,
}

impl Cleaned {
    /// Nothing was found (and nothing failed).
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty() && !self.qdisc && !self.rules && self.errors.is_empty()
    }

    /// One line: what was removed, then what failed.
    pub fn summary(&self, plan: &CleanupPlan) -> String {
        let mut parts = Vec::new();
        if !self.filters.is_empty() {
            parts.push(format!("tc filters {}", self.filters.join(", ")));
        }
        if self.qdisc {
            parts.push(format!("the {:x}: qdisc on {}", shaper::MAJOR, plan.client_port));
        }
        if self.rules {
            parts.push(format!("the netfilter rules on {}", plan.bridge));
        }
        let mut s = if parts.is_empty() { "nothing of rlm's found".to_string() } else { format!("removed {}", parts.join("; ")) };
        if !self.errors.is_empty() {
            s.push_str(&format!("; failed: {}", self.errors.join("; ")));
        }
        s
    }
}

/// Remove whatever an earlier `rlm run` on `plan`'s bridge left. What holds or drops packets
/// goes first: the tc filters, then the HTB tree, then the queue rules (which the kernel already
/// bypasses). Each part is tried whatever the others did.
pub fn cleanup(plan: &CleanupPlan) -> Cleaned {
    let mut c = Cleaned::default();
    match kmod_fastpath::detach_leftovers(&[&plan.client_port, &plan.server_port]) {
        Ok(f) => c.filters = f,
        Err(e) => c.errors.push(format!("{e:#}")),
    }
    if port_exists(&plan.client_port) {
        match shaper::remove_tree(&plan.client_port) {
            Ok(q) => c.qdisc = q,
            Err(e) => c.errors.push(format!("{e:#}")),
        }
    }
    match netfilter::remove_leftovers(&plan.bridge) {
        Ok(r) => c.rules = r,
        Err(e) => c.errors.push(format!("{e:#}")),
    }
    c
}

/// The ports of `ports` that have no clsact qdisc now (`tc qdisc show dev PORT`): asked before
/// rlm attaches clsact filters, so that at a clean exit it deletes the qdiscs it made
/// ([`remove_clsact_made`]).
pub fn without_clsact(ports: &[&str]) -> Vec<String> {
    ports
        .iter()
        .filter(|p| {
            let out = std::process::Command::new("tc").args(["qdisc", "show", "dev", p]).output();
            out.is_ok_and(|o| o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("qdisc clsact"))
        })
        .map(|p| p.to_string())
        .collect()
}

/// Delete the clsact qdisc of each of `ports` (those rlm made it on, [`without_clsact`]) that no
/// filter hangs from any more (rlm's went with its programs; another program's would keep it).
/// Returns the ports whose qdisc was deleted.
pub fn remove_clsact_made(ports: &[String]) -> Result<Vec<String>> {
    let tc = |args: &[&str]| std::process::Command::new("tc").args(args).output();
    let mut removed = Vec::new();
    for p in ports {
        let filters: String = ["ingress", "egress"]
            .iter()
            .filter_map(|dir| tc(&["filter", "show", "dev", p, dir]).ok().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()))
            .collect();
        if filters.trim().is_empty() {
            let out = tc(&["qdisc", "del", "dev", p, "clsact"])?;
            if !out.status.success() {
                anyhow::bail!("tc qdisc del dev {p} clsact: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
            removed.push(p.clone());
        }
    }
    Ok(removed)
}

fn port_exists(name: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(name).exists()
}

/// `rlm cleanup`'s work: [`cleanup`], reported on stderr; Err when something could not be removed.
pub fn run(plan: &CleanupPlan) -> Result<Cleaned> {
    let c = cleanup(plan);
    eprintln!("rlm cleanup on {} ({} / {}): {}", plan.bridge, plan.client_port, plan.server_port, c.summary(plan));
    if !c.errors.is_empty() {
        anyhow::bail!("{}", c.errors.join("; "));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_say_what_was_removed_and_what_failed() {
        let plan = CleanupPlan { bridge: "br0".into(), client_port: "app-c".into(), server_port: "app-s".into() };
        assert_eq!(Cleaned::default().summary(&plan), "nothing of rlm's found");
        assert!(Cleaned::default().is_empty());
        let c = Cleaned { filters: vec!["syn_admit on app-c ingress".into()], qdisc: true, rules: true, errors: vec![] };
        assert_eq!(c.summary(&plan), "removed tc filters syn_admit on app-c ingress; the 7e1: qdisc on app-c; the netfilter rules on br0");
        let e = Cleaned { errors: vec!["tc: no".into()], ..Cleaned::default() };
        assert!(!e.is_empty());
        assert_eq!(e.summary(&plan), "nothing of rlm's found; failed: tc: no");
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<CleanupPlan>(&json).unwrap(), plan);
    }
}
