//! WAN emulation: per client group, a round-trip delay and independent random loss in each
//! direction.
//!
//! This kernel has no netem, so the lab's WAN hop is a bridge whose forwarded packets go
//! through NFQUEUE to this model (the `rlm-wan` binary): each packet is dropped with its
//! direction's loss probability, or accepted half an RTT after it arrived. Verdicts are issued
//! out of order; the kernel holds the packets meanwhile.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::Ipv4Addr;
use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// An IPv4 network in CIDR form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Net {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix as u32) };
        u32::from(ip) & mask == u32::from(self.addr) & mask
    }
}

impl FromStr for Net {
    type Err = String;
    fn from_str(s: &str) -> Result<Net, String> {
        let (a, p) = s.split_once('/').ok_or_else(|| format!("'{s}': expected a.b.c.d/len"))?;
        let addr = a.parse().map_err(|_| format!("'{a}' is not an IPv4 address"))?;
        let prefix: u8 = p.parse().map_err(|_| format!("'{p}' is not a prefix length"))?;
        if prefix > 32 {
            return Err(format!("prefix /{prefix} is longer than 32"));
        }
        Ok(Net { addr, prefix })
    }
}

/// Conditions on the path of one client group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    pub rtt: Duration,
    /// Loss probability client → server.
    pub loss_up: f64,
    /// Loss probability server → client.
    pub loss_down: f64,
}

/// A client group and its path: `10.4.0.0/16=80ms,2%` (same loss both ways) or
/// `10.4.0.0/16=80ms,2%,1%` (up, down).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Group {
    pub net: Net,
    pub profile: Profile,
}

fn parse_ms(s: &str) -> Result<Duration, String> {
    let v = s.strip_suffix("ms").ok_or_else(|| format!("'{s}': the delay needs 'ms'"))?;
    let ms: f64 = v.parse().map_err(|_| format!("'{s}' is not a delay"))?;
    if !(ms.is_finite() && ms >= 0.0) {
        return Err(format!("'{s}' is not a delay"));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

fn parse_pct(s: &str) -> Result<f64, String> {
    let v = s.strip_suffix('%').ok_or_else(|| format!("'{s}': the loss needs '%'"))?;
    let p: f64 = v.parse().map_err(|_| format!("'{s}' is not a percentage"))?;
    if !(0.0..=100.0).contains(&p) {
        return Err(format!("'{s}' is not between 0% and 100%"));
    }
    Ok(p / 100.0)
}

impl FromStr for Group {
    type Err = String;
    fn from_str(s: &str) -> Result<Group, String> {
        let (net, rest) = s.split_once('=').ok_or_else(|| format!("'{s}': expected NET=RTTms,LOSS%[,LOSS%]"))?;
        let parts: Vec<&str> = rest.split(',').collect();
        let (rtt, up, down) = match parts.as_slice() {
            [r] => (parse_ms(r)?, 0.0, 0.0),
            [r, l] => {
                let l = parse_pct(l)?;
                (parse_ms(r)?, l, l)
            }
            [r, u, d] => (parse_ms(r)?, parse_pct(u)?, parse_pct(d)?),
            _ => return Err(format!("'{s}': expected NET=RTTms,LOSS%[,LOSS%]")),
        };
        Ok(Group { net: net.parse()?, profile: Profile { rtt, loss_up: up, loss_down: down } })
    }
}

/// What to do with one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Drop,
    /// Accept after this long.
    Delay(Duration),
    /// Not a client group's packet: accept now.
    Pass,
}

/// Counters of the emulator.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct WanStats {
    pub up_packets: u64,
    pub up_dropped: u64,
    pub down_packets: u64,
    pub down_dropped: u64,
    pub passed: u64,
    /// Most packets held at once.
    pub max_held: u64,
    /// How late releases were, on average and at worst (microseconds).
    pub mean_release_lateness_us: f64,
    pub max_release_lateness_us: u64,
}

/// The decision model, seeded so a run can be repeated.
pub struct WanModel {
    groups: Vec<Group>,
    rng: StdRng,
    pub stats: WanStats,
}

impl WanModel {
    pub fn new(groups: Vec<Group>, seed: u64) -> WanModel {
        WanModel { groups, rng: StdRng::seed_from_u64(seed), stats: WanStats::default() }
    }

    /// Decide for an IP packet (starting at its IP header).
    pub fn decide(&mut self, ip: &[u8]) -> Decision {
        if ip.len() < 20 || ip[0] >> 4 != 4 {
            self.stats.passed += 1;
            return Decision::Pass;
        }
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        let (group, up) = match self.groups.iter().find(|g| g.net.contains(src)) {
            Some(g) => (g, true),
            None => match self.groups.iter().find(|g| g.net.contains(dst)) {
                Some(g) => (g, false),
                None => {
                    self.stats.passed += 1;
                    return Decision::Pass;
                }
            },
        };
        let p = group.profile;
        let loss = if up { p.loss_up } else { p.loss_down };
        let drop = loss > 0.0 && self.rng.random::<f64>() < loss;
        let (n, d) =
            if up { (&mut self.stats.up_packets, &mut self.stats.up_dropped) } else { (&mut self.stats.down_packets, &mut self.stats.down_dropped) };
        *n += 1;
        if drop {
            *d += 1;
            Decision::Drop
        } else {
            Decision::Delay(p.rtt / 2)
        }
    }
}

/// Longest sleep between looks at the queue.
const NAP: Duration = Duration::from_micros(200);
/// Within this of a release, yield instead of sleeping.
const SPIN: Duration = Duration::from_micros(150);

/// How to run the emulator on a queue.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub queue: u16,
    pub groups: Vec<Group>,
    pub seed: u64,
    /// Kernel queue length in packets (size it for rate × delay).
    pub max_queue: u32,
    /// Add (and on exit remove) `iptables -A FORWARD -j NFQUEUE --queue-num Q` in the calling
    /// thread's network namespace. Never with `--queue-bypass`: if the emulator dies, traffic
    /// stops rather than passing undelayed without a word.
    pub add_rule: bool,
}

fn iptables(op: &str, queue: u16) -> Result<()> {
    let q = queue.to_string();
    let out = Command::new("iptables").args(["-w", op, "FORWARD", "-j", "NFQUEUE", "--queue-num", &q]).output().context("cannot run iptables")?;
    if !out.status.success() {
        bail!("iptables {op}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Serve the queue until `stop` is set; returns the counters. Runs in the calling thread's
/// network namespace.
pub fn serve(cfg: &ServeConfig, stop: &AtomicBool) -> Result<WanStats> {
    let mut q = nfq::Queue::open().context("opening NFQUEUE (root needed)")?;
    q.bind(cfg.queue).with_context(|| format!("binding queue {}", cfg.queue))?;
    // Headers are all the model reads; the verdict leaves the packet as it is.
    q.set_copy_range(cfg.queue, 64)?;
    q.set_queue_max_len(cfg.queue, cfg.max_queue)?;
    q.set_fail_open(cfg.queue, false)?;
    q.set_nonblocking(true);
    // Bound before the rule exists, so no packet meets a queue with no reader.
    if cfg.add_rule {
        iptables("-A", cfg.queue)?;
    }
    let mut model = WanModel::new(cfg.groups.clone(), cfg.seed);
    // Packets waiting for their time, by due time then arrival order.
    let mut held: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut msgs: HashMap<u64, nfq::Message> = HashMap::new();
    let mut seq: u64 = 0;
    let (mut late_sum, mut late_n) = (0f64, 0u64);
    let result: Result<()> = (|| {
        while !stop.load(Ordering::SeqCst) {
            let mut got = 0;
            loop {
                match q.recv() {
                    Ok(mut msg) => {
                        got += 1;
                        let arrived = Instant::now();
                        match model.decide(msg.get_payload()) {
                            Decision::Drop => {
                                msg.set_verdict(nfq::Verdict::Drop);
                                q.verdict(msg)?;
                            }
                            Decision::Pass => {
                                msg.set_verdict(nfq::Verdict::Accept);
                                q.verdict(msg)?;
                            }
                            Decision::Delay(d) => {
                                seq += 1;
                                held.push(Reverse((arrived + d, seq)));
                                msgs.insert(seq, msg);
                                model.stats.max_held = model.stats.max_held.max(msgs.len() as u64);
                            }
                        }
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) => break,
                    Err(e) => return Err(e).context("reading the queue"),
                }
            }
            let now = Instant::now();
            while let Some(Reverse((due, id))) = held.peek().copied() {
                if due > now {
                    break;
                }
                held.pop();
                if let Some(mut msg) = msgs.remove(&id) {
                    msg.set_verdict(nfq::Verdict::Accept);
                    q.verdict(msg)?;
                    let late = now.saturating_duration_since(due).as_micros() as u64;
                    late_sum += late as f64;
                    late_n += 1;
                    model.stats.max_release_lateness_us = model.stats.max_release_lateness_us.max(late);
                }
            }
            if got == 0 {
                // Nothing arrived: nap briefly (nfq gives no descriptor to poll), never past the
                // next release. A sleep overshoots by tens of microseconds, so the last stretch
                // before a release is spent yielding instead.
                let until = held.peek().map(|Reverse((due, _))| due.saturating_duration_since(now)).unwrap_or(Duration::from_millis(1));
                if until > SPIN {
                    std::thread::sleep((until - SPIN).min(NAP));
                } else {
                    std::thread::yield_now();
                }
            }
        }
        Ok(())
    })();
    // On the way out, what is held goes through (late rather than lost), then the rule goes.
    for (_, mut msg) in msgs.drain() {
        msg.set_verdict(nfq::Verdict::Accept);
        let _ = q.verdict(msg);
    }
    if cfg.add_rule {
        iptables("-D", cfg.queue)?;
    }
    model.stats.mean_release_lateness_us = if late_n > 0 { late_sum / late_n as f64 } else { 0.0 };
    result.map(|_| model.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0];
        h.extend(src);
        h.extend(dst);
        h
    }

    #[test]
    fn parses_groups() {
        let g: Group = "10.4.0.0/16=80ms,2%".parse().unwrap();
        assert_eq!(g.profile, Profile { rtt: Duration::from_millis(80), loss_up: 0.02, loss_down: 0.02 });
        let g: Group = "10.5.0.0/16=300ms,1%,3%".parse().unwrap();
        assert_eq!((g.profile.loss_up, g.profile.loss_down), (0.01, 0.03));
        assert!("10.5.0.0/16=300,1%".parse::<Group>().is_err());
        assert!("10.5.0.0/33=3ms".parse::<Group>().is_err());
        assert!("10.5.0.0/16=3ms,150%".parse::<Group>().is_err());
    }

    #[test]
    fn delays_half_an_rtt_each_way_and_loses_at_the_configured_rate() {
        let mut m = WanModel::new(vec!["10.4.0.0/16=80ms,2%,10%".parse().unwrap()], 1);
        let up = ip([10, 4, 0, 9], [10, 9, 0, 1]);
        let down = ip([10, 9, 0, 1], [10, 4, 3, 9]);
        let n = 100_000;
        let mut drops = (0, 0);
        for _ in 0..n {
            match m.decide(&up) {
                Decision::Drop => drops.0 += 1,
                Decision::Delay(d) => assert_eq!(d, Duration::from_millis(40)),
                Decision::Pass => panic!("client packet passed"),
            }
            if m.decide(&down) == Decision::Drop {
                drops.1 += 1;
            }
        }
        assert!((drops.0 as f64 / n as f64 - 0.02).abs() < 0.002, "{drops:?}");
        assert!((drops.1 as f64 / n as f64 - 0.10).abs() < 0.004, "{drops:?}");
        assert_eq!(m.decide(&ip([10, 9, 0, 1], [10, 9, 0, 2])), Decision::Pass);
        assert_eq!(m.stats.up_packets, n);
    }

    #[test]
    fn same_seed_same_losses() {
        let g: Vec<Group> = vec!["10.4.0.0/16=10ms,30%".parse().unwrap()];
        let p = ip([10, 4, 0, 1], [10, 9, 0, 1]);
        let run = |seed| {
            let mut m = WanModel::new(g.clone(), seed);
            (0..200).map(|_| m.decide(&p) == Decision::Drop).collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }
}
