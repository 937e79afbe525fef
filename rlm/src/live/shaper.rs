//! The client port's egress for SRPT (issue 11): an HTB tree used as strict priority (this
//! kernel has no `prio` qdisc), shaped a little under the real link rate so that the queue forms
//! here, in rlm's bands, and not further down. The SRPT classifier (kmod-fastpath's
//! `classify.bpf.c`) picks each packet's leaf through `skb->priority`.
//!
//! - SRPT: one leaf per band, `7e1:10` (band 0: control) to `7e1:10+B-1`, each `rate 8kbit ceil
//!   R prio b`: every leaf borrows the whole rate, and HTB lends to the lowest `prio` first. The
//!   8 kbit floor keeps the lowest band from starving outright (about one packet every 1.5 s).
//!   The lowest data band may get a larger floor (`[srpt] floor_pct` of R): HTB serves a leaf
//!   up to its own rate before it lends by priority.
//! - FAIR (the baseline): one leaf `7e1:10` at R.
//!
//! Each leaf has a `pfifo` of `band_limit` packets (`[srpt] band_limit_packets`). rlm owns the root
//! qdisc it installs (handle `7e1:`) and deletes it when it exits; it refuses to replace a root
//! qdisc an operator set up, other than the kernel's defaults or its own (a crash's leftover).

use anyhow::{bail, Context, Result};

use super::netfilter::run_with_input;

/// The major number of rlm's tree.
pub const MAJOR: u16 = 0x7e1;
/// The minor number of band 0's leaf; band b is `FIRST_LEAF + b`.
pub const FIRST_LEAF: u16 = 0x10;

/// Root qdiscs rlm may replace: the kernel's defaults, which it attaches with handle `0:` (one
/// of these kinds with another handle, `tc qdisc replace ... root fq_codel` giving `8001:`, is
/// an operator's, tuned or not).
const DEFAULT_ROOTS: [&str; 4] = ["noqueue", "pfifo_fast", "mq", "fq_codel"];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShaperPlan {
    pub dev: String,
    /// The shaped rate, bits per second.
    pub rate_bps: u64,
    /// Leaves: 1 (FAIR) or the SRPT bands.
    pub bands: u32,
    pub band_limit: u32,
    /// Bytes per packet HTB adds for the wire (a size table); 0: none.
    pub overhead: u32,
    /// A band guaranteed this rate (bits per second) whenever it has packets, before the strict
    /// priority lends the rest: `(band, floor)`, the lowest data band (`[srpt] floor_pct`).
    pub floor: Option<(u32, u64)>,
}

impl ShaperPlan {
    /// HTB's burst: at least two full frames, or a millisecond at the rate (a small burst
    /// would cost one HTB timer per packet at high rates).
    fn burst_bytes(&self) -> u64 {
        (self.rate_bps / 8 / 1000).max(3028)
    }

    /// The `tc -batch` text that builds the tree.
    pub fn install_batch(&self) -> String {
        let (dev, r, bu) = (&self.dev, self.rate_bps, self.burst_bytes());
        let stab = if self.overhead > 0 { format!(" stab overhead {} linklayer ethernet", self.overhead) } else { String::new() };
        let default = FIRST_LEAF as u32 + self.bands - 1;
        let mut t = format!("qdisc replace dev {dev} root handle {MAJOR:x}:{stab} htb default {default:x} r2q 10\n");
        t.push_str(&format!("class replace dev {dev} parent {MAJOR:x}: classid {MAJOR:x}:1 htb rate {r}bit ceil {r}bit burst {bu}b cburst {bu}b\n"));
        for b in 0..self.bands {
            let minor = FIRST_LEAF as u32 + b;
            let rate = match self.floor {
                _ if self.bands == 1 => format!("{r}bit"),
                Some((band, bps)) if band == b && bps > 8_000 => format!("{bps}bit"),
                _ => "8kbit".into(),
            };
            t.push_str(&format!(
                "class replace dev {dev} parent {MAJOR:x}:1 classid {MAJOR:x}:{minor:x} htb rate {rate} ceil {r}bit prio {b} quantum 1514 burst {bu}b cburst {bu}b\n"
            ));
            t.push_str(&format!("qdisc replace dev {dev} parent {MAJOR:x}:{minor:x} handle {:x}: pfifo limit {}\n", 0x7f0 + b, self.band_limit));
        }
        t
    }
}

/// Whether `tc qdisc show dev X root`'s output is a root qdisc rlm may replace: a default, or
/// rlm's own. `Err` names the one in place.
pub fn check_root(show: &str) -> Result<()> {
    let Some(line) = show.lines().find(|l| l.starts_with("qdisc ")) else { return Ok(()) };
    let w: Vec<&str> = line.split_whitespace().collect();
    let (kind, handle) = (w.get(1).copied().unwrap_or(""), w.get(2).copied().unwrap_or(""));
    if (DEFAULT_ROOTS.contains(&kind) && handle == "0:") || handle == format!("{MAJOR:x}:") {
        return Ok(());
    }
    bail!(
        "the root qdisc in place is {kind} {handle}, set up by someone else: rlm will not replace it (delete it, or run with [srpt] mode = \"off\")"
    )
}

fn tc_show_root(dev: &str) -> Result<String> {
    let out = std::process::Command::new("tc").args(["qdisc", "show", "dev", dev, "root"]).output().context("cannot run tc (install iproute2)")?;
    if !out.status.success() {
        bail!("tc qdisc show dev {dev}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The tree rlm installed; [`Installed::remove`] deletes it, and so does dropping it without
/// (a panic unwinding, an early return), quietly.
#[derive(Debug)]
pub struct Installed {
    dev: String,
    /// Still to be removed (cleared by [`Installed::remove`]).
    armed: bool,
}

/// Build the tree on the port; on failure nothing of it is left.
pub fn install(plan: &ShaperPlan) -> Result<Installed> {
    let root = tc_show_root(&plan.dev)?;
    check_root(&root)?;
    if root.contains(&format!(" {MAJOR:x}: ")) {
        // A tree an rlm that did not exit cleanly left: HTB cannot change it in place.
        run_with_input("tc", &["-batch", "-"], &format!("qdisc del dev {} root\n", plan.dev)).context("removing the tree an earlier rlm left")?;
    }
    if let Err(e) = run_with_input("tc", &["-batch", "-"], &plan.install_batch()) {
        let _ = remove_tree(&plan.dev);
        return Err(e.context(format!("cannot shape {} for SRPT", plan.dev)));
    }
    Ok(Installed { dev: plan.dev.clone(), armed: true })
}

/// Delete rlm's root qdisc from `dev` if it has it (the port gets the kernel's default back);
/// whether there was one.
pub fn remove_tree(dev: &str) -> Result<bool> {
    if tc_show_root(dev)?.contains(&format!(" {MAJOR:x}: ")) {
        run_with_input("tc", &["-batch", "-"], &format!("qdisc del dev {dev} root\n"))?;
        return Ok(true);
    }
    Ok(false)
}

impl Installed {
    /// Delete rlm's root qdisc (the port gets the kernel's default back).
    pub fn remove(mut self) -> Result<()> {
        self.armed = false;
        remove_tree(&self.dev).map(|_| ())
    }
}

impl Drop for Installed {
    /// Not removed explicitly: a panic is unwinding (or an error returned early). The tree goes
    /// now, so that the port is not left shaped.
    fn drop(&mut self) {
        if self.armed {
            match remove_tree(&self.dev) {
                Ok(_) => tracing::warn!("removed rlm's qdisc from {} on the way out (not a clean exit)", self.dev),
                Err(e) => tracing::warn!("removing rlm's qdisc from {} on the way out failed: {e:#}", self.dev),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srpt_tree_is_strict_priority_leaves_under_one_shaped_class() {
        let p = ShaperPlan { dev: "app-c".into(), rate_bps: 9_500_000, bands: 7, band_limit: 100, overhead: 24, floor: None };
        let t = p.install_batch();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2 + 2 * 7);
        assert_eq!(lines[0], "qdisc replace dev app-c root handle 7e1: stab overhead 24 linklayer ethernet htb default 16 r2q 10");
        assert_eq!(lines[1], "class replace dev app-c parent 7e1: classid 7e1:1 htb rate 9500000bit ceil 9500000bit burst 3028b cburst 3028b");
        assert_eq!(
            lines[2],
            "class replace dev app-c parent 7e1:1 classid 7e1:10 htb rate 8kbit ceil 9500000bit prio 0 quantum 1514 burst 3028b cburst 3028b"
        );
        assert_eq!(lines[3], "qdisc replace dev app-c parent 7e1:10 handle 7f0: pfifo limit 100");
        assert!(lines[14].contains("classid 7e1:16 htb rate 8kbit ceil 9500000bit prio 6"));
        // FAIR: one leaf with the whole rate; no size table without overhead; a 1 ms burst at
        // 10 Gbit/s.
        let f =
            ShaperPlan { dev: "x".into(), rate_bps: 10_000_000_000, bands: 1, band_limit: 100, overhead: 0, floor: Some((0, 1000)) }.install_batch();
        assert!(f.starts_with("qdisc replace dev x root handle 7e1: htb default 10 r2q 10\n"), "{f}");
        assert!(f.contains("classid 7e1:10 htb rate 10000000000bit ceil 10000000000bit prio 0 quantum 1514 burst 1250000b"), "{f}");
        assert_eq!(f.lines().count(), 4);
        // A floor: only its band's rate changes.
        let g = ShaperPlan { floor: Some((6, 950_000)), ..p }.install_batch();
        let (gl, pl): (Vec<&str>, Vec<&str>) = (g.lines().collect(), t.lines().collect());
        assert_eq!(
            gl[14],
            "class replace dev app-c parent 7e1:1 classid 7e1:16 htb rate 950000bit ceil 9500000bit prio 6 quantum 1514 burst 3028b cburst 3028b"
        );
        assert!(gl.iter().zip(&pl).enumerate().all(|(i, (a, b))| i == 14 || a == b), "{g}");
    }

    #[test]
    fn only_a_default_or_rlms_own_root_is_replaced() {
        check_root("").unwrap();
        check_root("qdisc noqueue 0: root refcnt 2 \n").unwrap();
        check_root("qdisc pfifo_fast 0: root refcnt 2 bands 3\n").unwrap();
        check_root("qdisc htb 7e1: root refcnt 2 r2q 10 default 0x16\n").unwrap();
        let e = check_root("qdisc htb 1: root refcnt 2 r2q 10 default 0x3\n").unwrap_err().to_string();
        assert!(e.contains("htb 1:") && e.contains("will not replace"), "{e}");
        assert!(check_root("qdisc tbf 8001: root refcnt 2 rate 10Mbit\n").is_err());
        check_root(
            "qdisc fq_codel 0: root refcnt 2 limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64\n",
        )
        .unwrap();
        check_root("qdisc mq 0: root\n").unwrap();
        // The same kind set up by an operator (tc gives it a handle of its own): not replaced.
        let e =
            check_root("qdisc fq_codel 8001: root refcnt 2 limit 10240p flows 1024 quantum 1514 target 1ms interval 20ms\n").unwrap_err().to_string();
        assert!(e.contains("fq_codel 8001:"), "{e}");
        assert!(check_root("qdisc mq 1: root\n").is_err());
    }
}
