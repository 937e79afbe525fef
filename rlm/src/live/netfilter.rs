//! The netfilter rules `rlm run` installs on a bridge, and their removal.
//!
//! Bridged IPv4/IPv6 traffic reaches iptables/ip6tables through br_netfilter
//! (`net.bridge.bridge-nf-call-iptables=1`). rlm puts its rules in chains of its own (`RLM-<bridge>`
//! in the mangle table's FORWARD), installed and removed in one `iptables-restore --noflush`
//! transaction each, so that no half-installed state is ever live. Only the packets that need a
//! decision are queued: SYNs arriving on the client port (and SYN/ACKs arriving on the server
//! port when a rule acts on them; today none does). Every queue rule carries `--queue-bypass`, so that with no rlm bound to the queue (it
//! stopped, was killed, or has not started) the kernel accepts the packets: the farm stays
//! reachable. The nft `queue` statement is used instead where the kernel has it (checked with
//! `nft -c`); this machine's kernel lacks it, so the xt NFQUEUE target through iptables-nft is
//! what runs here.
//!
//! Nothing of it outlives rlm: at removal the br_netfilter sysctls get back the values rlm found,
//! and a `mangle` table that iptables-nft created for rlm's chain (it did not exist before, and
//! holds no rule once rlm's are gone) is deleted. What rlm found is recorded with its rules
//! ([`Prior::record`]), so that the removal of a crashed run's rules, by its guard, the next
//! start or `rlm cleanup`, puts it back too.

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Where and what to queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuePlan {
    pub bridge: String,
    pub client_port: String,
    pub server_port: String,
    /// First queue number and how many queues (flow-consistent balancing across them).
    pub queue_base: u16,
    pub queues: u16,
    /// TCP ports of the servers whose SYNs and SYN/ACKs are queued.
    pub server_ports: Vec<u16>,
    /// Queue the servers' SYN/ACKs too (only when a rule acts at the SYN/ACK node; otherwise the
    /// tap sees them, and each connection costs one trip through userspace, not two).
    pub queue_synacks: bool,
    /// Queue only the SYNs carrying these mark bits (set by the eBPF fast path on the SYNs it
    /// has no verdict for); `None`: every client SYN.
    pub queue_mark: Option<u32>,
    /// Queue the non-SYN segments that carry the mark too, the servers' and the clients' (the
    /// eBPF fast path marks them while content adaptation or `REJECT` is carried out: responses
    /// for `REMOVE EMBEDS`, requests for `REWRITE EMBEDS` and `REJECT`, with each segment of a
    /// rejected connection's client): with `queue_mark` only.
    pub queue_content: bool,
}

/// Which mechanism carries the queue rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// nft's `queue` statement in an `inet` table of rlm's own.
    Nft,
    /// The xt NFQUEUE target, through iptables-nft (and ip6tables-nft).
    Iptables,
}

/// rlm's iptables chain on `bridge`.
fn chain_of(bridge: &str) -> String {
    // iptables chain names are at most 28 characters.
    let mut c = format!("RLM-{bridge}");
    c.truncate(28);
    c
}

/// rlm's nft table on `bridge`.
fn nft_table_of(bridge: &str) -> String {
    format!("rlm_{}", bridge.replace(|c: char| !c.is_ascii_alphanumeric(), "_"))
}

impl QueuePlan {
    fn chain(&self) -> String {
        chain_of(&self.bridge)
    }

    fn nft_table(&self) -> String {
        nft_table_of(&self.bridge)
    }

    /// The flags of the packets that may be queued: SYN set and RST clear (SYNs, and SYN/ACKs
    /// when those are queued).
    fn jump_flags(&self) -> &'static str {
        if self.queue_synacks {
            "SYN,RST SYN"
        } else {
            "SYN,ACK,RST SYN"
        }
    }

    fn queue_target(&self) -> String {
        if self.queues > 1 {
            format!("NFQUEUE --queue-balance {}:{} --queue-bypass", self.queue_base, self.queue_base + (self.queues - 1))
        } else {
            format!("NFQUEUE --queue-num {} --queue-bypass", self.queue_base)
        }
    }

    fn ports_match(&self) -> String {
        if self.server_ports.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = self.server_ports.iter().map(u16::to_string).collect();
            format!(" -m multiport --{{dir}}ports {}", list.join(","))
        }
    }

    /// The iptables-restore text that installs rlm's chain and its jump, with `prior` recorded
    /// in the chain's last rule ([`Prior::record`]).
    fn iptables_install(&self, prior: &Prior) -> String {
        let chain = self.chain();
        let q = self.queue_target();
        let ports = self.ports_match();
        let syn_ports = ports.replace("{dir}", "d");
        let synack_ports = ports.replace("{dir}", "s");
        let mut t = String::from("*mangle\n");
        t.push_str(&format!(":{chain} - [0:0]\n"));
        // Every bridged packet passes the jump, so its first test is the cheapest that leaves
        // almost all of them out: the TCP flags (measured here: this order costs a bulk
        // transfer about 7% less than testing the bridge port first).
        t.push_str(&format!("-A FORWARD -p tcp --tcp-flags {} -j {chain}\n", self.jump_flags()));
        let mark = self.queue_mark.map(|m| format!(" -m mark --mark {m:#x}/{m:#x}")).unwrap_or_default();
        t.push_str(&format!("-A {chain} -m physdev --physdev-in {} -p tcp --tcp-flags SYN,ACK,RST SYN{syn_ports}{mark} -j {q}\n", self.client_port));
        if self.queue_synacks {
            t.push_str(&format!(
                "-A {chain} -m physdev --physdev-in {} -p tcp --tcp-flags SYN,ACK,RST SYN,ACK{synack_ports} -j {q}\n",
                self.server_port
            ));
        }
        if let Some(jump) = self.content_jump() {
            t.push_str(&format!("-A FORWARD {jump}\n"));
            t.push_str(&format!("-A {chain} -m physdev --physdev-in {} -p tcp ! --tcp-flags SYN SYN{synack_ports}{mark} -j {q}\n", self.server_port));
            t.push_str(&format!("-A {chain} -m physdev --physdev-in {} -p tcp ! --tcp-flags SYN SYN{syn_ports}{mark} -j {q}\n", self.client_port));
        }
        // What the end of the chain does anyway, carrying what rlm found before it.
        t.push_str(&format!("-A {chain} -m comment --comment \"{}\" -j RETURN\n", prior.record()));
        t.push_str("COMMIT\n");
        t
    }

    /// The FORWARD rule (without `-A`) that sends the marked non-SYN segments to rlm's chain.
    fn content_jump(&self) -> Option<String> {
        let m = self.queue_mark.filter(|_| self.queue_content)?;
        Some(format!("-p tcp ! --tcp-flags SYN SYN -m mark --mark {m:#x}/{m:#x} -j {}", self.chain()))
    }

    /// The iptables-restore text that removes it.
    pub fn iptables_remove(&self) -> String {
        let chain = self.chain();
        let responses = self.content_jump().map(|j| format!("-D FORWARD {j}\n")).unwrap_or_default();
        format!("*mangle\n-D FORWARD -p tcp --tcp-flags {} -j {chain}\n{responses}-F {chain}\n-X {chain}\nCOMMIT\n", self.jump_flags())
    }

    /// The nft ruleset of rlm's own table (used where the kernel has the `queue` statement),
    /// with `prior` recorded as the table's comment ([`Prior::record`]).
    fn nft_install(&self, prior: &Prior) -> String {
        let table = self.nft_table();
        let q = if self.queues > 1 {
            format!("queue flags bypass,fanout to {}-{}", self.queue_base, self.queue_base + (self.queues - 1))
        } else {
            format!("queue flags bypass to {}", self.queue_base)
        };
        let ports = if self.server_ports.is_empty() {
            (String::new(), String::new())
        } else {
            let list: Vec<String> = self.server_ports.iter().map(u16::to_string).collect();
            (format!("tcp dport {{ {} }} ", list.join(", ")), format!("tcp sport {{ {} }} ", list.join(", ")))
        };
        let mut synack = if self.queue_synacks {
            format!("    iifname \"{}\" {}tcp flags & (syn|ack|rst) == syn|ack {q}\n", self.bridge, ports.1)
        } else {
            String::new()
        };
        if let Some(m) = self.queue_mark.filter(|_| self.queue_content) {
            synack.push_str(&format!("    iifname \"{}\" {}tcp flags & syn == 0 meta mark & {m:#x} == {m:#x} {q}\n", self.bridge, ports.1));
            synack.push_str(&format!("    iifname \"{}\" {}tcp flags & syn == 0 meta mark & {m:#x} == {m:#x} {q}\n", self.bridge, ports.0));
        }
        format!(
            "table inet {table} {{\n  comment \"{}\"\n  chain forward {{\n    type filter hook forward priority mangle; policy accept;\n    \
             iifname \"{}\" {}tcp flags & (syn|ack|rst) == syn {}{q}\n{synack}  }}\n}}\n",
            prior.record(),
            self.bridge,
            ports.0,
            self.queue_mark.map(|m| format!("meta mark & {m:#x} == {m:#x} ")).unwrap_or_default()
        )
    }
}

pub(crate) fn run_with_input(program: &str, args: &[&str], input: &str) -> Result<()> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {program} (install iptables, nftables and iproute2)"))?;
    child.stdin.take().expect("piped").write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Whether the kernel and nft accept a `queue` statement (checked without changing anything).
pub fn nft_queue_available() -> bool {
    let probe = "table inet rlm_probe { chain c { type filter hook forward priority 0; tcp flags syn queue flags bypass to 0 } }\n";
    Command::new("nft").args(["-c", "-f", "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().is_ok_and(|mut c| {
        let ok = c.stdin.take().is_some_and(|mut s| s.write_all(probe.as_bytes()).is_ok());
        ok && c.wait().is_ok_and(|s| s.success())
    })
}

/// The br_netfilter sysctls rlm sets (under `/proc/sys/net/bridge`).
const BR_NETFILTER_SYSCTLS: [&str; 2] = ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables"];

/// The address families rlm's iptables rules go into: nft's name for each, and its tool.
const FAMILIES: [(&str, &str); 2] = [("ip", "iptables"), ("ip6", "ip6tables")];

/// What rlm changes besides its own rules, as it found it before: put back at removal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Prior {
    /// Each br_netfilter sysctl rlm set, and its value before.
    sysctls: Vec<(&'static str, String)>,
    /// The families ([`FAMILIES`]) whose `mangle` table did not exist before rlm's rules
    /// (iptables-nft creates it for them).
    new_mangle: Vec<(&'static str, &'static str)>,
}

/// `LIST -t mangle -S` (`iptables` or `ip6tables`), or None when it cannot be listed.
fn mangle_listing(list: &str) -> Option<String> {
    let out = Command::new(list).args(["-t", "mangle", "-S"]).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether an nft table of another rlm (`rlm_*`) is there.
fn another_rlm_nft_table() -> bool {
    Command::new("nft")
        .args(["list", "tables"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.split_whitespace().last().is_some_and(|t| t.starts_with("rlm_"))))
}

/// Whether nft lists table `mangle` of `family` (false without nft: nothing to delete then).
fn mangle_exists(family: &str) -> bool {
    Command::new("nft").args(["list", "table", family, "mangle"]).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Whether an `iptables -t mangle -S` listing holds nothing but the built-in chains' policies.
fn mangle_is_empty(listing: &str) -> bool {
    listing.lines().all(|l| l.trim().is_empty() || l.starts_with("-P "))
}

/// The sysctls that make bridged traffic visible to iptables and nftables' inet family. Returns
/// each one's value before.
pub fn enable_br_netfilter() -> Result<Vec<(&'static str, String)>> {
    // The module is built in or loaded; the sysctl directory exists once it is.
    let dir = std::path::Path::new("/proc/sys/net/bridge");
    if !dir.exists() {
        let _ = Command::new("modprobe").arg("br_netfilter").status();
    }
    if !dir.exists() {
        bail!("br_netfilter is not available (/proc/sys/net/bridge missing): bridged traffic cannot be queued");
    }
    let mut before = Vec::new();
    for k in BR_NETFILTER_SYSCTLS {
        let was = std::fs::read_to_string(dir.join(k)).with_context(|| format!("cannot read net.bridge.{k}"))?;
        std::fs::write(dir.join(k), "1").with_context(|| format!("cannot set net.bridge.{k}"))?;
        before.push((k, was.trim().to_string()));
    }
    Ok(before)
}

/// How a recorded [`Prior`] begins.
const PRIOR_RECORD: &str = "rlm-prior";

impl Prior {
    /// What rlm found, as a line kept with its rules (an iptables rule's comment, the nft
    /// table's), so that whoever removes the rules of a run that did not exit cleanly (its guard,
    /// the next start, `rlm cleanup`) puts it back too: kept in rlm's memory alone it died with
    /// rlm, and the next run took the sysctls rlm had set for their values before. E.g.
    /// `rlm-prior bridge-nf-call-iptables=0 bridge-nf-call-ip6tables=1 new-mangle=ip,ip6`.
    fn record(&self) -> String {
        let mut r = String::from(PRIOR_RECORD);
        for (k, was) in &self.sysctls {
            r.push_str(&format!(" {k}={was}"));
        }
        if !self.new_mangle.is_empty() {
            r.push_str(&format!(" new-mangle={}", self.new_mangle.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(",")));
        }
        r
    }

    /// The [`Prior::record`] in a listing of rlm's rules (`iptables -t mangle -S`, `nft list
    /// table`), if there is one. Only the sysctls rlm sets, values of 0 or 1, and the families it
    /// knows are taken.
    fn from_listing(listing: &str) -> Option<Prior> {
        let start = listing.find(PRIOR_RECORD)?;
        let rest = &listing[start + PRIOR_RECORD.len()..];
        let record = &rest[..rest.find(['"', '\n']).unwrap_or(rest.len())];
        let mut prior = Prior::default();
        for part in record.split_whitespace() {
            let Some((k, v)) = part.split_once('=') else { continue };
            if k == "new-mangle" {
                prior.new_mangle = FAMILIES.into_iter().filter(|(f, _)| v.split(',').any(|x| x == *f)).collect();
            } else if let Some(name) = BR_NETFILTER_SYSCTLS.into_iter().find(|s| *s == k).filter(|_| v == "0" || v == "1") {
                prior.sysctls.push((name, v.to_string()));
            }
        }
        Some(prior)
    }

    /// Put back what rlm changed (its rules already removed): the sysctls' values (unless rules
    /// of another rlm, on another bridge, still need them: a chain `RLM-*` in a `mangle` table,
    /// or an nft table `rlm_*`), and delete the `mangle` tables created for it that hold no rule
    /// now. Every step is tried; the errors are reported together.
    fn restore(&self) -> Result<()> {
        let mut errors = Vec::new();
        let listings: Vec<(&str, Option<String>)> = FAMILIES.iter().map(|&(family, list)| (family, mangle_listing(list))).collect();
        let others = listings.iter().flat_map(|(_, l)| l.as_deref()).any(|l| l.lines().any(|c| c.starts_with("-N RLM-"))) || another_rlm_nft_table();
        for (k, was) in self.sysctls.iter().filter(|_| !others) {
            let path = std::path::Path::new("/proc/sys/net/bridge").join(k);
            if let Err(e) = std::fs::write(&path, was) {
                errors.push(format!("cannot restore net.bridge.{k} to {was}: {e}"));
            }
        }
        for (family, listing) in &listings {
            let created = self.new_mangle.iter().any(|(f, _)| f == family);
            if created && listing.as_deref().is_some_and(mangle_is_empty) {
                let st = Command::new("nft").args(["delete", "table", family, "mangle"]).stderr(Stdio::null()).status();
                if !st.is_ok_and(|s| s.success()) {
                    errors.push(format!("nft delete table {family} mangle failed"));
                }
            }
        }
        if !errors.is_empty() {
            bail!("{}", errors.join("; "));
        }
        Ok(())
    }
}

/// What is installed, so that it can be removed: by [`Installed::remove`], or when dropped
/// without it (a panic unwinding, an early return), quietly.
#[derive(Debug)]
pub struct Installed {
    plan: QueuePlan,
    backend: Backend,
    /// What was there before, put back at removal.
    prior: Prior,
    /// Still to be removed (cleared by [`Installed::remove`]).
    armed: bool,
}

impl Installed {
    pub fn backend(&self) -> Backend {
        self.backend
    }
}

/// Install the queue rules atomically. What an earlier run left is not looked for here:
/// `rlm run` removes it first ([`remove_leftovers`], through `cleanup::cleanup`).
pub fn install(plan: &QueuePlan) -> Result<Installed> {
    let new_mangle = FAMILIES.into_iter().filter(|(f, _)| !mangle_exists(f)).collect();
    let prior = Prior { new_mangle, sysctls: enable_br_netfilter()? };
    let backend = if nft_queue_available() { Backend::Nft } else { Backend::Iptables };
    let installed = match backend {
        Backend::Nft => run_with_input("nft", &["-f", "-"], &plan.nft_install(&prior)),
        Backend::Iptables => {
            let text = plan.iptables_install(&prior);
            run_with_input("iptables-restore", &["--noflush"], &text).and_then(|()| {
                run_with_input("ip6tables-restore", &["--noflush"], &text).inspect_err(|_| {
                    let _ = run_with_input("iptables-restore", &["--noflush"], &plan.iptables_remove());
                })
            })
        }
    };
    if let Err(e) = installed {
        let _ = prior.restore();
        return Err(e);
    }
    Ok(Installed { plan: plan.clone(), backend, prior, armed: true })
}

/// The restore text that removes whatever an earlier run on `bridge` left (after a crash or
/// SIGKILL), found in an `iptables -t mangle -S` listing: every jump to rlm's chain in FORWARD
/// (whatever version of rlm put it there) becomes a deletion, then the chain is flushed and
/// removed. None: nothing of rlm's there.
pub fn leftover_removal(bridge: &str, listing: &str) -> Option<String> {
    let chain = chain_of(bridge);
    let jumps: Vec<String> = listing
        .lines()
        .filter(|l| l.starts_with("-A FORWARD ") && l.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w[0] == "-j" && w[1] == chain))
        .map(|l| l.replacen("-A FORWARD ", "-D FORWARD ", 1))
        .collect();
    let has_chain = listing.lines().any(|l| l == format!("-N {chain}"));
    if jumps.is_empty() && !has_chain {
        return None;
    }
    let mut t = String::from("*mangle\n");
    for j in jumps {
        t.push_str(&j);
        t.push('\n');
    }
    if has_chain {
        t.push_str(&format!("-F {chain}\n-X {chain}\n"));
    }
    t.push_str("COMMIT\n");
    Some(t)
}

/// Remove whatever rules an earlier run on `bridge` left (iptables, ip6tables, nft); whether
/// there were any. Quiet: a tool that is missing has nothing of rlm's.
pub fn remove_leftovers(bridge: &str) -> Result<bool> {
    let mut found = false;
    let mut errors = Vec::new();
    // What the run that left them found: put back once they are gone.
    let mut prior = None;
    for (list, restore) in [("iptables", "iptables-restore"), ("ip6tables", "ip6tables-restore")] {
        let Some(listing) = mangle_listing(list) else { continue };
        let chain = chain_of(bridge);
        let ours: String = listing.lines().filter(|l| l.starts_with(&format!("-A {chain} "))).collect::<Vec<_>>().join("\n");
        prior = prior.or_else(|| Prior::from_listing(&ours));
        if let Some(text) = leftover_removal(bridge, &listing) {
            match run_with_input(restore, &["--noflush"], &text) {
                Ok(()) => found = true,
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
    }
    let table = nft_table_of(bridge);
    let nft = |args: &[&str]| Command::new("nft").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    let listed = Command::new("nft").args(["list", "table", "inet", &table]).stderr(Stdio::null()).output().ok().filter(|o| o.status.success());
    if let Some(out) = listed {
        prior = prior.or_else(|| Prior::from_listing(&String::from_utf8_lossy(&out.stdout)));
        match nft(&["delete", "table", "inet", &table]) {
            true => found = true,
            false => errors.push(format!("nft delete table inet {table} failed")),
        }
    }
    if let Some(Err(e)) = prior.filter(|_| errors.is_empty()).map(|p| p.restore()) {
        errors.push(format!("{e:#}"));
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(found)
}

impl Installed {
    /// Remove the rules; the bridge forwards plainly afterwards.
    pub fn remove(mut self) -> Result<()> {
        self.armed = false;
        self.remove_now()
    }

    fn remove_now(&self) -> Result<()> {
        self.remove_rules()?;
        self.prior.restore()
    }

    fn remove_rules(&self) -> Result<()> {
        match self.backend {
            Backend::Nft => {
                let st = Command::new("nft").args(["delete", "table", "inet", &self.plan.nft_table()]).status()?;
                if !st.success() {
                    bail!("nft delete table inet {} failed", self.plan.nft_table());
                }
            }
            Backend::Iptables => {
                run_with_input("iptables-restore", &["--noflush"], &self.plan.iptables_remove())?;
                run_with_input("ip6tables-restore", &["--noflush"], &self.plan.iptables_remove())?;
            }
        }
        Ok(())
    }
}

impl Drop for Installed {
    /// Not removed explicitly: a panic is unwinding (or an error returned early). The rules
    /// go now, so that the bridge forwards plainly whatever rlm does next.
    fn drop(&mut self) {
        if self.armed {
            match self.remove_now() {
                Ok(()) => tracing::warn!("removed rlm's netfilter rules on the way out (not a clean exit)"),
                Err(e) => tracing::warn!("removing rlm's netfilter rules on the way out failed: {e:#}"),
            }
        }
    }
}

/// Whether a bridge exists and the two ports are its ports.
pub fn check_bridge(bridge: &str, client_port: &str, server_port: &str) -> Result<()> {
    let brif = std::path::Path::new("/sys/class/net").join(bridge).join("brif");
    if !brif.is_dir() {
        bail!("{bridge} is not a bridge here (no /sys/class/net/{bridge}/brif)");
    }
    for p in [client_port, server_port] {
        if !brif.join(p).exists() {
            bail!("{p} is not a port of bridge {bridge}");
        }
    }
    if client_port == server_port {
        bail!("the client port and the server port must differ");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mangle_table_with_only_the_builtin_policies_is_empty() {
        assert!(mangle_is_empty("-P PREROUTING ACCEPT\n-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n-P POSTROUTING ACCEPT\n"));
        assert!(mangle_is_empty(""));
        assert!(!mangle_is_empty("-P FORWARD ACCEPT\n-N SOMEONES\n"));
        assert!(!mangle_is_empty("-P FORWARD ACCEPT\n-A FORWARD -j MARK --set-mark 1\n"));
    }

    fn plan(queues: u16) -> QueuePlan {
        QueuePlan {
            bridge: "br0".into(),
            client_port: "app-c".into(),
            server_port: "app-s".into(),
            queue_base: 0,
            queues,
            server_ports: vec![80, 8080],
            queue_synacks: true,
            queue_mark: None,
            queue_content: false,
        }
    }

    #[test]
    fn the_marked_segments_are_queued_both_ways_while_adapting_and_the_jump_is_removed() {
        let adapt = QueuePlan { queue_synacks: false, queue_mark: Some(0x80_0000), queue_content: true, ..plan(1) };
        let t = adapt.iptables_install(&Prior::default());
        assert!(t.contains("-A FORWARD -p tcp ! --tcp-flags SYN SYN -m mark --mark 0x800000/0x800000 -j RLM-br0\n"), "{t}");
        assert!(
            t.contains("-A RLM-br0 -m physdev --physdev-in app-s -p tcp ! --tcp-flags SYN SYN -m multiport --sports 80,8080 -m mark --mark 0x800000/0x800000 -j NFQUEUE --queue-num 0 --queue-bypass\n"),
            "{t}"
        );
        assert!(
            t.contains("-A RLM-br0 -m physdev --physdev-in app-c -p tcp ! --tcp-flags SYN SYN -m multiport --dports 80,8080 -m mark --mark 0x800000/0x800000 -j NFQUEUE --queue-num 0 --queue-bypass\n"),
            "{t}"
        );
        let r = adapt.iptables_remove();
        assert!(r.contains("-D FORWARD -p tcp ! --tcp-flags SYN SYN -m mark --mark 0x800000/0x800000 -j RLM-br0\n"), "{r}");
        assert!(adapt.nft_install(&Prior::default()).contains("tcp sport { 80, 8080 } tcp flags & syn == 0 meta mark & 0x800000 == 0x800000 queue"));
        assert!(adapt.nft_install(&Prior::default()).contains("tcp dport { 80, 8080 } tcp flags & syn == 0 meta mark & 0x800000 == 0x800000 queue"));
        // Without the fast path's mark nothing marks them: no rule.
        for p in [QueuePlan { queue_content: true, ..plan(1) }, QueuePlan { queue_mark: Some(0x80_0000), ..plan(1) }] {
            assert!(
                !p.iptables_install(&Prior::default()).contains("! --tcp-flags SYN SYN") && !p.nft_install(&Prior::default()).contains("syn == 0")
            );
        }
    }

    #[test]
    fn iptables_text_queues_syns_in_and_synacks_back_with_bypass() {
        let t = plan(1).iptables_install(&Prior::default());
        assert!(t.contains(":RLM-br0 - [0:0]"));
        assert!(t.contains("-A FORWARD -p tcp --tcp-flags SYN,RST SYN -j RLM-br0"));
        assert!(
            t.contains("--physdev-in app-c -p tcp --tcp-flags SYN,ACK,RST SYN -m multiport --dports 80,8080 -j NFQUEUE --queue-num 0 --queue-bypass")
        );
        assert!(t.contains(
            "--physdev-in app-s -p tcp --tcp-flags SYN,ACK,RST SYN,ACK -m multiport --sports 80,8080 -j NFQUEUE --queue-num 0 --queue-bypass"
        ));
        assert!(plan(4).iptables_install(&Prior::default()).contains("--queue-balance 0:3 --queue-bypass"));
        // The last queues the kernel has: the range's end computed without passing 65535.
        let top = QueuePlan { queue_base: 65_534, ..plan(2) };
        assert!(top.iptables_install(&Prior::default()).contains("--queue-balance 65534:65535 --queue-bypass"));
        assert!(top.nft_install(&Prior::default()).contains("fanout to 65534-65535"));
        let syn_only = QueuePlan { queue_synacks: false, ..plan(1) };
        assert!(
            !syn_only.iptables_install(&Prior::default()).contains("SYN,ACK -m") && !syn_only.nft_install(&Prior::default()).contains("== syn|ack")
        );
        let r = plan(1).iptables_remove();
        assert!(r.contains("-D FORWARD -p tcp --tcp-flags SYN,RST SYN -j RLM-br0") && r.contains("-F RLM-br0") && r.contains("-X RLM-br0"));
        assert!(QueuePlan { queue_synacks: false, ..plan(1) }.iptables_remove().contains("--tcp-flags SYN,ACK,RST SYN -j RLM-br0"));
        // With the eBPF fast path only the SYNs it marked are queued.
        let marked = QueuePlan { queue_synacks: false, queue_mark: Some(0x80_0000), ..plan(1) };
        assert!(marked.iptables_install(&Prior::default()).contains("--dports 80,8080 -m mark --mark 0x800000/0x800000 -j NFQUEUE"));
        assert!(marked.nft_install(&Prior::default()).contains("meta mark & 0x800000 == 0x800000 queue"));
    }

    #[test]
    fn leftovers_of_any_version_are_found() {
        let listing = "-P FORWARD ACCEPT\n-N RLM-br0\n-A FORWARD -p tcp -m physdev --physdev-is-bridged -j RLM-br0\n-A FORWARD -p tcp -m tcp --tcp-flags SYN,ACK,RST SYN -j RLM-br0\n-A FORWARD -j OTHER\n-A RLM-br0 -j NFQUEUE\n";
        let t = leftover_removal("br0", listing).unwrap();
        assert_eq!(
            t,
            "*mangle\n-D FORWARD -p tcp -m physdev --physdev-is-bridged -j RLM-br0\n-D FORWARD -p tcp -m tcp --tcp-flags SYN,ACK,RST SYN -j RLM-br0\n-F RLM-br0\n-X RLM-br0\nCOMMIT\n"
        );
        assert_eq!(leftover_removal("br0", "-P FORWARD ACCEPT\n-A FORWARD -j OTHER\n"), None);
    }

    /// What rlm found is kept with its rules, and read back from them as iptables and nft list
    /// them; what is not a value rlm could have found is left out.
    #[test]
    fn what_rlm_found_is_kept_with_its_rules_and_read_back() {
        let prior = Prior {
            sysctls: vec![("bridge-nf-call-iptables", "0".into()), ("bridge-nf-call-ip6tables", "1".into())],
            new_mangle: vec![("ip", "iptables")],
        };
        let record = "rlm-prior bridge-nf-call-iptables=0 bridge-nf-call-ip6tables=1 new-mangle=ip";
        assert_eq!(prior.record(), record);
        assert!(plan(1).iptables_install(&prior).contains(&format!("-A RLM-br0 -m comment --comment \"{record}\" -j RETURN\nCOMMIT\n")));
        assert!(plan(1).nft_install(&prior).contains(&format!("table inet rlm_br0 {{\n  comment \"{record}\"\n")));
        let iptables_s = format!("-A RLM-br0 -m physdev --physdev-in app-c -j NFQUEUE --queue-num 0 --queue-bypass\n-A RLM-br0 -m comment --comment \"{record}\" -j RETURN");
        assert_eq!(Prior::from_listing(&iptables_s), Some(prior.clone()));
        let nft_list = format!("table inet rlm_br0 {{\n\tcomment \"{record}\"\n\tchain forward {{\n\t}}\n}}\n");
        assert_eq!(Prior::from_listing(&nft_list), Some(prior));
        assert_eq!(Prior::from_listing("-A RLM-br0 -j NFQUEUE"), None, "no record: an rlm from before records were kept");
        let junk = Prior::from_listing("rlm-prior bridge-nf-call-iptables=7 kernel.panic=1 new-mangle=ip,filter\" -j RETURN").unwrap();
        assert_eq!(junk, Prior { sysctls: vec![], new_mangle: vec![("ip", "iptables")] });
    }

    #[test]
    fn nft_text_uses_bypass_and_fanout() {
        assert!(plan(1).nft_install(&Prior::default()).contains("queue flags bypass to 0"));
        assert!(plan(2).nft_install(&Prior::default()).contains("queue flags bypass,fanout to 0-1"));
        assert!(plan(1).nft_install(&Prior::default()).contains("table inet rlm_br0"));
    }
}
