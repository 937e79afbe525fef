//! The lab's network: four namespaces in a line, all one Ethernet segment.
//!
//! ```text
//!  {p}-cli                 {p}-wan                 {p}-app                  {p}-srv
//!  browsers            WAN emulator hop        the appliance             the farm
//!  cli0 ──────────── wan-c ─[wanbr]─ wan-a ─── app-c ─[br0]─ app-s ──── srv0
//!  10.4.0.x (HIGH)     NFQUEUE both ways        no IP address:           10.9.0.1
//!  10.5.0.x (LOW)      (rlm-lab wan)            a bump in the wire
//! ```
//! Every address sits in 10.0.0.0/8 on the one segment, so the bridges forward at layer 2 and
//! neither the WAN hop nor the appliance is visible at layer 3. Offloads (TSO, GSO, GRO) are off
//! on every port so that each packet on the wire is one MTU-sized segment: loss and delay apply
//! per packet, and captures show what a real wire would. A plan may keep them on where a real
//! appliance has them ([`Offloads::Appliance`]).

use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// Which of the lab's ports keep their offloads (TSO, GSO, GRO).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Offloads {
    /// Off on every port: one MTU-sized segment per packet everywhere.
    #[default]
    Off,
    /// On at the appliance's bridge ports (`app-c`, `app-s`) and the farm's `srv0`, as a real
    /// appliance and a real server have them: rlm's fast path then sees the farm's TSO
    /// super-frames and the bridge's GRO aggregates. The WAN's and the clients' ports stay off,
    /// so that the WAN emulator's loss and delay still apply per packet. Turned on explicitly
    /// rather than left at the veth's defaults, which keep GRO off.
    Appliance,
}

impl Offloads {
    /// Whether port `dev` has its offloads on.
    pub fn on_at(self, dev: &str) -> bool {
        self == Offloads::Appliance && matches!(dev, "app-c" | "app-s" | "srv0")
    }
}

/// Address plan and names of one lab instance.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Prefix of the namespace names (`rlm` → `rlm-cli`, `rlm-wan`, `rlm-app`, `rlm-srv`).
    pub prefix: String,
    /// Emulated browsers per class; each gets its own address.
    pub high_clients: u32,
    pub low_clients: u32,
    /// Browsers of further groups, on 10.6/16, 10.7/16, ... in order.
    pub more_clients: Vec<u32>,
    /// Which ports keep TSO, GSO and GRO.
    pub offloads: Offloads,
}

impl Default for Plan {
    fn default() -> Self {
        Plan { prefix: "rlm".into(), high_clients: 64, low_clients: 128, more_clients: Vec::new(), offloads: Offloads::Off }
    }
}

pub const FARM_ADDR: &str = "10.9.0.1";
pub const HIGH_SUBNET: &str = "10.4.0.0/16";
pub const LOW_SUBNET: &str = "10.5.0.0/16";
const MASK: u8 = 8;

/// The `n`-th (0-based) address of a class subnet: 10.4.0.1, ..., 10.4.0.254, 10.4.1.1, ...
pub fn client_addr(high: bool, n: u32) -> String {
    group_addr(if high { 0 } else { 1 }, n)
}

/// The second octet of client group `g`'s subnet: 10.4/16 (HIGH), 10.5/16 (LOW), 10.6/16, ...
pub fn group_octet(g: usize) -> u8 {
    4 + g as u8
}

/// The `n`-th (0-based) address of client group `g`.
pub fn group_addr(g: usize, n: u32) -> String {
    format!("10.{}.{}.{}", group_octet(g), n / 254, n % 254 + 1)
}

/// What `rlm-lab up --json` prints: enough for other tools to attach.
#[derive(Clone, Debug, Serialize)]
pub struct Info {
    pub namespaces: Namespaces,
    pub farm: Farm,
    pub bridge: Bridge,
    pub wan: WanHop,
    pub clients: Clients,
}

#[derive(Clone, Debug, Serialize)]
pub struct Namespaces {
    pub clients: String,
    pub wan: String,
    pub appliance: String,
    pub servers: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Farm {
    pub address: String,
    pub ports: Vec<u16>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Bridge {
    pub namespace: String,
    pub name: String,
    pub client_port: String,
    pub server_port: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct WanHop {
    pub namespace: String,
    pub bridge: String,
    pub client_port: String,
    pub appliance_port: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Clients {
    pub interface: String,
    pub high_subnet: String,
    pub low_subnet: String,
    pub high: Vec<String>,
    pub low: Vec<String>,
    /// Further groups' addresses (10.6/16, 10.7/16, ...).
    pub more: Vec<Vec<String>>,
}

impl Clients {
    /// The addresses of group `g` (0: HIGH, 1: LOW, then the further ones).
    pub fn group(&self, g: usize) -> &[String] {
        match g {
            0 => &self.high,
            1 => &self.low,
            k => self.more.get(k - 2).map_or(&[], |v| &v[..]),
        }
    }

    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.high.iter().chain(self.low.iter()).chain(self.more.iter().flatten())
    }
}

impl Plan {
    pub fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    pub fn info(&self) -> Info {
        Info {
            namespaces: Namespaces { clients: self.ns("cli"), wan: self.ns("wan"), appliance: self.ns("app"), servers: self.ns("srv") },
            farm: Farm { address: FARM_ADDR.into(), ports: vec![80] },
            bridge: Bridge { namespace: self.ns("app"), name: "br0".into(), client_port: "app-c".into(), server_port: "app-s".into() },
            wan: WanHop { namespace: self.ns("wan"), bridge: "wanbr".into(), client_port: "wan-c".into(), appliance_port: "wan-a".into() },
            clients: Clients {
                interface: "cli0".into(),
                high_subnet: HIGH_SUBNET.into(),
                low_subnet: LOW_SUBNET.into(),
                high: (0..self.high_clients).map(|n| client_addr(true, n)).collect(),
                low: (0..self.low_clients).map(|n| client_addr(false, n)).collect(),
                more: self.more_clients.iter().enumerate().map(|(k, &c)| (0..c).map(|n| group_addr(k + 2, n)).collect()).collect(),
            },
        }
    }

    fn all_ns(&self) -> [String; 4] {
        [self.ns("cli"), self.ns("wan"), self.ns("app"), self.ns("srv")]
    }

    /// Build the lab. Idempotent: whatever an earlier run left is removed first.
    pub fn up(&self) -> Result<Info> {
        self.down()?;
        let [cli, wan, app, srv] = self.all_ns();
        for ns in [&cli, &wan, &app, &srv] {
            run("ip", &["netns", "add", ns])?;
            ip(ns, "link set lo up")?;
        }
        // The three wires.
        run("ip", &["-n", &cli, "link", "add", "cli0", "type", "veth", "peer", "name", "wan-c", "netns", &wan])?;
        run("ip", &["-n", &wan, "link", "add", "wan-a", "type", "veth", "peer", "name", "app-c", "netns", &app])?;
        run("ip", &["-n", &app, "link", "add", "app-s", "type", "veth", "peer", "name", "srv0", "netns", &srv])?;
        // The two bridges, with no address: layer 2 only.
        for (ns, br, ports) in [(&wan, "wanbr", ["wan-c", "wan-a"]), (&app, "br0", ["app-c", "app-s"])] {
            ip(ns, &format!("link add {br} type bridge"))?;
            // Forward at once: no STP listening/learning delay on a lab wire.
            ip(ns, &format!("link set {br} type bridge forward_delay 0 stp_state 0"))?;
            for p in ports {
                ip(ns, &format!("link set {p} master {br}"))?;
            }
            ip(ns, &format!("link set {br} up"))?;
            // Bridged IPv4 goes through iptables: the WAN emulator's NFQUEUE and, later, the appliance's.
            sysctl(ns, "net.bridge.bridge-nf-call-iptables", "1")?;
        }
        // Clients: one address each, both classes on one interface.
        let mut batch = String::new();
        for a in self.info().clients.all() {
            batch.push_str(&format!("addr add {a}/{MASK} dev cli0\n"));
        }
        ip_batch(&cli, &batch)?;
        // Exponential SYN backoff from the first retry, as the papers' clients had (this kernel
        // otherwise keeps 4 linear retries); profiles set the rest (sim_clients::tcp_profile).
        sysctl(&cli, "net.ipv4.tcp_syn_linear_timeouts", "0")?;
        ip(&srv, &format!("addr add {FARM_ADDR}/{MASK} dev srv0"))?;
        for (ns, dev) in [(&cli, "cli0"), (&wan, "wan-c"), (&wan, "wan-a"), (&app, "app-c"), (&app, "app-s"), (&srv, "srv0")] {
            ip(ns, &format!("link set {dev} up"))?;
            set_offloads(ns, dev, self.offloads.on_at(dev))?;
            keep_flows_in_order(ns, dev)?;
        }
        let info = self.info();
        self.wait_ready(&info)?;
        Ok(info)
    }

    /// Wait until the path carries traffic end to end (fresh links take a moment, and the first
    /// ARP exchanges would otherwise cost the first requests of an experiment a second).
    fn wait_ready(&self, info: &Info) -> Result<()> {
        let src = info.clients.all().next().cloned().unwrap_or_else(|| FARM_ADDR.into());
        for _ in 0..50 {
            if in_ns(&info.namespaces.clients, "ping", &["-c", "1", "-W", "1", "-I", &src, FARM_ADDR]).is_ok() {
                return Ok(());
            }
        }
        bail!("the lab's path from {src} to {FARM_ADDR} does not carry traffic")
    }

    /// Remove the lab: kill every process left in its namespaces (after a crash, say), then the
    /// namespaces, which takes their interfaces with them. Safe to call when nothing is there.
    pub fn down(&self) -> Result<()> {
        for ns in self.all_ns() {
            if !exists(&ns) {
                continue;
            }
            for pid in pids(&ns) {
                // SIGKILL: a lab left behind by a crash gets no second chance.
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).stderr(Stdio::null()).status();
            }
            run("ip", &["netns", "del", &ns])?;
        }
        // The farm's files (database, documents, logs) of this lab.
        let _ = std::fs::remove_dir_all(self.run_dir());
        Ok(())
    }

    /// Where this lab keeps its files.
    pub fn run_dir(&self) -> std::path::PathBuf {
        std::path::PathBuf::from("/var/tmp/rlm-lab").join(&self.prefix)
    }

    /// Make the appliance's client-side port (the farm's uplink toward the clients) a link of
    /// `bps` bits per second: one HTB class with a FIFO of `limit` packets (the FAIR baseline
    /// of the SRPT experiments without rlm).
    pub fn shape_uplink(&self, bps: u64, limit: u32) -> Result<()> {
        self.shape("app", "app-c", bps, limit)
    }

    /// Make the WAN's client-side port (`wan-c`, toward the clients) a link of `bps` bits per
    /// second with a FIFO of `limit` packets: the real link downstream of the appliance, which
    /// rlm (`--srpt`) shapes a little under, so that the queue forms in rlm's bands.
    pub fn shape_link(&self, bps: u64, limit: u32) -> Result<()> {
        self.shape("wan", "wan-c", bps, limit)
    }

    /// `dev` in namespace `which` as a link of `bps` bits per second: one HTB class, a FIFO of
    /// `limit` packets.
    fn shape(&self, which: &str, dev: &str, bps: u64, limit: u32) -> Result<()> {
        let ns = self.ns(which);
        let tc = |args: &str| in_ns(&ns, "tc", &args.split_whitespace().collect::<Vec<_>>()).map(|_| ());
        let _ = tc(&format!("qdisc del dev {dev} root"));
        tc(&format!("qdisc add dev {dev} root handle 1: htb default 1"))?;
        tc(&format!("class add dev {dev} parent 1: classid 1:1 htb rate {bps}bit ceil {bps}bit"))?;
        tc(&format!("qdisc add dev {dev} parent 1:1 handle 10: pfifo limit {limit}"))
    }

    /// Packets sent and dropped by every qdisc of `dev` in namespace `which` ("app", "wan"),
    /// from `tc -s qdisc`: (the qdisc's line, sent, dropped), the root first.
    pub fn qdisc_counts(&self, which: &str, dev: &str) -> Result<Vec<(String, u64, u64)>> {
        let out = in_ns(&self.ns(which), "tc", &["-s", "qdisc", "show", "dev", dev])?;
        Ok(parse_qdisc_list(&out))
    }

    /// Whether the lab's namespaces are there.
    pub fn is_up(&self) -> bool {
        self.all_ns().iter().all(|n| exists(n))
    }
}

/// Takes a lab down when dropped, even when a test's assertion failed.
pub struct DownOnDrop(pub Plan);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        let _ = self.0.down();
    }
}

/// Whether a named network namespace exists.
pub fn exists(ns: &str) -> bool {
    std::path::Path::new("/var/run/netns").join(ns).exists()
}

/// Processes inside a namespace.
pub fn pids(ns: &str) -> Vec<u32> {
    Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// Run a command; fail with its stderr.
pub fn run(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd).args(args).output().with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        bail!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip -n NS <args>`.
pub fn ip(ns: &str, args: &str) -> Result<String> {
    let mut a = vec!["-n", ns];
    a.extend(args.split_whitespace());
    run("ip", &a)
}

/// A command inside a namespace: `ip netns exec NS cmd args...`.
pub fn in_ns(ns: &str, cmd: &str, args: &[&str]) -> Result<String> {
    let mut a = vec!["netns", "exec", ns, cmd];
    a.extend_from_slice(args);
    run("ip", &a)
}

fn ip_batch(ns: &str, batch: &str) -> Result<()> {
    use std::io::Write;
    let mut child =
        Command::new("ip").args(["-n", ns, "-batch", "-"]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().context("cannot run ip")?;
    child.stdin.take().expect("piped").write_all(batch.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("ip -batch in {ns}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    in_ns(ns, "sysctl", &["-q", "-w", &format!("{key}={value}")]).map(|_| ())
}

/// Each qdisc of `tc -s qdisc show`: (its first line, packets sent, dropped).
fn parse_qdisc_list(out: &str) -> Vec<(String, u64, u64)> {
    let mut v = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("qdisc ") {
            let mut block = String::new();
            while let Some(n) = lines.peek().filter(|n| !n.starts_with("qdisc ")) {
                block.push_str(n);
                block.push('\n');
                lines.next();
            }
            let (sent, dropped) = parse_qdisc_counts(&block);
            v.push((l.trim().to_string(), sent, dropped));
        }
    }
    v
}

/// "Sent N bytes M pkt (dropped D, ..." of `tc -s qdisc show`'s first qdisc: (M, D).
fn parse_qdisc_counts(out: &str) -> (u64, u64) {
    let w: Vec<&str> = out.split_whitespace().collect();
    let after = |key: &str| w.iter().position(|x| *x == key).and_then(|i| w.get(i + 1)).map(|v| v.trim_end_matches(',').parse().unwrap_or(0));
    let pkts = w.iter().position(|x| *x == "pkt").and_then(|i| w.get(i - 1)).and_then(|v| v.parse().ok()).unwrap_or(0);
    (pkts, after("(dropped").unwrap_or(0))
}

/// Steer each flow's frames arriving on `dev` to one CPU (RPS over every CPU, by flow hash), as
/// a real NIC's receive-side scaling does. A veth otherwise queues a frame on the backlog of the
/// CPU that sent it, and two segments of one connection sent from two CPUs can swap: a server's
/// ACK of the client's FIN, sent in a softirq, was overtaken by its own FIN, sent by the
/// application's close() on the other CPU; the client's duplicate ACK then met a closed socket
/// and drew a RST (seen once in a clean-clone `make test`, in the REJECT inline test).
fn keep_flows_in_order(ns: &str, dev: &str) -> Result<()> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()).min(32);
    let mask = format!("{:x}", (1u64 << cpus) - 1);
    // `ip netns exec` mounts the namespace's own sysfs, where its devices are.
    let path = format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus");
    in_ns(ns, "sh", &["-c", &format!("echo {mask} > {path}")]).map(|_| ())
}

/// TSO, GSO and GRO of `dev` on or off.
fn set_offloads(ns: &str, dev: &str, on: bool) -> Result<()> {
    let v = if on { "on" } else { "off" };
    in_ns(ns, "ethtool", &["-K", dev, "tso", v, "gso", v, "gro", v]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qdisc_counts_are_read_from_tc() {
        let out = "qdisc htb 1: root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000\n \
                   Sent 123456 bytes 789 pkt (dropped 12, overlimits 3 requeues 0)\n backlog 0b 0p requeues 0\n";
        assert_eq!(parse_qdisc_counts(out), (789, 12));
        assert_eq!(parse_qdisc_counts(""), (0, 0));
        let two = format!("{out}qdisc pfifo 7f0: parent 7e1:10 limit 100p\n Sent 5 bytes 2 pkt (dropped 1, overlimits 0 requeues 0)\n");
        let l = parse_qdisc_list(&two);
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].1, l[0].2), (789, 12));
        assert_eq!((l[1].0.as_str(), l[1].1, l[1].2), ("qdisc pfifo 7f0: parent 7e1:10 limit 100p", 2, 1));
    }

    #[test]
    fn offloads_on_only_at_the_appliance_and_the_farm() {
        let ports = ["cli0", "wan-c", "wan-a", "app-c", "app-s", "srv0"];
        assert!(ports.iter().all(|p| !Offloads::Off.on_at(p)));
        let on: Vec<&str> = ports.into_iter().filter(|p| Offloads::Appliance.on_at(p)).collect();
        assert_eq!(on, ["app-c", "app-s", "srv0"]);
    }

    #[test]
    fn client_addresses_are_unique_and_in_their_subnets() {
        let p = Plan { prefix: "x".into(), high_clients: 600, low_clients: 3, more_clients: vec![2], offloads: Offloads::Off };
        let i = p.info();
        let mut all: Vec<&String> = i.clients.all().collect();
        assert_eq!(i.clients.group(2), ["10.6.0.1", "10.6.0.2"]);
        assert!(i.clients.high.iter().all(|a| a.starts_with("10.4.")));
        assert!(i.clients.low.iter().all(|a| a.starts_with("10.5.")));
        assert_eq!(i.clients.high[253], "10.4.0.254");
        assert_eq!(i.clients.high[254], "10.4.1.1");
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 605);
    }
}
