//! The throughput experiment: what the appliance inline costs the bridge.
//!
//! Arms on one lab, alternating sample by sample (and which goes first, round by round) so
//! that whatever else loads this shared machine falls on them alike: `plain-bridge` (no rlm),
//! `rlm` (`rlm run` with a rule file that exercises every queued path; full run only) and
//! `rlm-records` (the same rlm writing its transaction, pageview and decision records, as an
//! operator's would: what writing them costs), `rlm-queue` (full run only: the SYNs without a
//! verdict through NFQUEUE), and `rlm-own-core` and `rlm-records-own-core` (full run only: the
//! same two rlm on a core of their own, the load, the servers and the lab's threads on the
//! other, as on a real appliance: there what the records cost is the data path's, not CPU
//! taken from wrk and nginx; [`crate::cpus`]). Each sample measures, for 5 s each (3 s in a
//! quick run):
//!
//! - `bulk_gbps`: iperf3 from the clients' namespace to an iperf3 server on the farm's address,
//!   one TCP stream, the server sending (`-R`: the direction of web responses), as one-second
//!   runs (5, or 3 in a quick run), their median. Not a server port: rlm only taps it. One
//!   stream's rate depends on where its ends and softirqs land on the two cores and holds
//!   within a run (11.1 to 14.4 Gbit/s between 5 s runs of one arm, 2026-11-28), so a sample
//!   draws it several times; an arm's figure is the median of all its runs pooled.
//! - `web_bulk_gbps`: HTTP downloads of a large object from nginx on the farm's port 80,
//!   which rlm watches (an octet stream: its body reaches rlm as its segments' headers and
//!   lengths, body cuts), read by the lab in the clients' namespace for a second each, as many
//!   as iperf3's runs and pooled the same way.
//! - `conn_per_s`: wrk, one thread, 16 connections, `Connection: close` on every request to a
//!   512-byte page of nginx on the farm's port 80, so that every request is a new connection
//!   whose SYN crosses rlm's queue (and SYN/ACK too, where rlm queues those); as one-second
//!   runs, as many as iperf3's, pooled the same way (wrk's rate too follows where it, nginx
//!   and their softirqs land on the two cores).
//! - connect time: 2,000 sequential connects to port 80 (closed with RST), timed by the lab; the
//!   `rlm` arm's added latency is the difference of its medians from the plain bridge's.
//! - first connect time: 500 connects, each from a client address of its own (new to the
//!   sample's rlm: the kernel has no verdict for its SYN, and rlm decides it), timed the same way.
//!
//! There is no WAN emulation on the path: the WAN namespace's bridge forwards plainly (its
//! bridge-netfilter hook is off and it holds no rule), and so does the appliance's bridge in the
//! plain-bridge arm (its hook off too; an rlm that queues turns it on and back off). In the full
//! run offloads (TSO, GSO, GRO) are on at the appliance's ports and the farm, as a real box has
//! them ([`Offloads::Appliance`]; the clients' and the WAN's stay off); a quick run keeps them
//! off everywhere, where one iperf3 stream's rate is steady enough to guard bulk at 85%.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::arm::{ArmResult, ArmSpec, PageviewSummary, Sample, ThroughputArm};
use crate::inline::{Inline, RlmArm, RlmOutcome};
use crate::stats::{median, percentile};
use crate::topology::{in_ns, Offloads, Plan, FARM_ADDR};

/// The rules of the `rlm` arm: every path a queued SYN or SYN/ACK can take is evaluated on
/// every handshake, and none of them ever holds traffic back (10.6/16 never connects; the
/// bucket is far above the load).
pub const RULES: &str = "# throughput: every queued path evaluated, none taken\n\
CLASS HIGH IF IP.SRC == 10.4.*.*\n\
CLASS LOW IF IP.SRC != 10.4.*.*\n\
IF RT.HIGH > 0.0s AND IP.SRC == 10.6.*.* THEN DROP SYN\n\
IF IP.SRC == 10.4.*.* THEN LIMIT SYN 1000000/s BURST 100000\n";

/// The arms of the experiment, in their order in the first round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arm {
    PlainBridge,
    /// rlm without records.
    Rlm,
    /// rlm writing its records.
    RlmRecords,
    /// rlm without records, its SYNs without a verdict through NFQUEUE (`--undecided-syns
    /// queue`, br_netfilter on) rather than held: the path before, side by side (full run only).
    RlmQueue,
    /// rlm without records on a core of its own, the load (wrk, iperf3, nginx, the lab's
    /// connects) on the others, as on a real appliance, where rlm's CPU is not the servers'
    /// ([`crate::cpus`]; full run only).
    RlmOwnCore,
    /// The same, rlm writing its records: what they cost the data path itself.
    RlmRecordsOwnCore,
}

impl Arm {
    pub fn name(self) -> &'static str {
        match self {
            Arm::PlainBridge => "plain-bridge",
            Arm::Rlm => "rlm",
            Arm::RlmRecords => "rlm-records",
            Arm::RlmQueue => "rlm-queue",
            Arm::RlmOwnCore => "rlm-own-core",
            Arm::RlmRecordsOwnCore => "rlm-records-own-core",
        }
    }

    /// Whether rlm runs on a core of its own, the load on the others.
    pub fn own_core(self) -> bool {
        matches!(self, Arm::RlmOwnCore | Arm::RlmRecordsOwnCore)
    }

    /// How rlm runs in this arm, if it does (an own-core arm's CPUs are set by [`sample`]).
    fn rlm(self) -> Option<RlmArm> {
        let rlm = RlmArm { rules: RULES.into(), ..RlmArm::default() };
        match self {
            Arm::PlainBridge => None,
            Arm::Rlm => Some(RlmArm { records: false, ..rlm }),
            Arm::RlmRecords => Some(rlm),
            Arm::RlmQueue => Some(RlmArm { records: false, extra_args: vec!["--undecided-syns".into(), "queue".into()], ..rlm }),
            Arm::RlmOwnCore => Some(RlmArm { records: false, ..rlm }),
            Arm::RlmRecordsOwnCore => Some(rlm),
        }
    }

    /// The arms of a run: a quick run judges rlm writing its records against the plain bridge
    /// (two arms, for `make test`'s time); the full run adds rlm without records, the queue's
    /// path, and the two on a core of their own, against which the records' cost is judged.
    pub fn of_run(quick: bool) -> Vec<Arm> {
        if quick {
            vec![Arm::PlainBridge, Arm::RlmRecords]
        } else {
            vec![Arm::PlainBridge, Arm::Rlm, Arm::RlmRecords, Arm::RlmQueue, Arm::RlmOwnCore, Arm::RlmRecordsOwnCore]
        }
    }
}

/// The pairs whose two arms the records' cost compares: rlm without and with its records.
const RECORD_PAIRS: [(Arm, Arm); 2] = [(Arm::Rlm, Arm::RlmRecords), (Arm::RlmOwnCore, Arm::RlmRecordsOwnCore)];

/// The order of the arms in round `round`: rotated one place each round (with two arms: ABBA),
/// so that a load that rises or falls through the run falls on every arm alike; and in odd
/// rounds the two arms of each of [`RECORD_PAIRS`] swapped, which the rotation alone keeps side
/// by side in one order (the one without records always first, after the same arm).
fn order(arms: &[Arm], round: usize) -> Vec<Arm> {
    let mut v = arms.to_vec();
    v.rotate_left(round % arms.len().max(1));
    if round % 2 == 1 {
        for (a, b) in RECORD_PAIRS {
            if let (Some(i), Some(j)) = (v.iter().position(|x| *x == a), v.iter().position(|x| *x == b)) {
                v.swap(i, j);
            }
        }
    }
    v
}

/// Lines of a file (0 if it cannot be read).
fn count_lines(path: &Path) -> u64 {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count() as u64)
}

const IPERF_PORT: u16 = 5201;
/// The web bulk's object ([`web_bulk`]): an octet stream, which nothing in rlm reads (body
/// cuts), of 64 GiB (sparse), more than any sample reads.
const WEB_BULK_FILE: &str = "big.bin";
const WEB_BULK_BYTES: u64 = 64 << 30;
const CONNECTS: usize = 2000;
/// Connects of a sample each from an address of its own ([`Sample::first_connect_p99_us`]).
const FIRST_CONNECTS: u32 = 500;

fn nginx_conf(dir: &Path) -> String {
    format!(
        "user www-data;\nworker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\n\
         events {{ worker_connections 16384; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  keepalive_timeout 0;\n  default_type text/html;\n  types {{ text/html html; application/octet-stream bin; }}\n\
           client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
           server {{\n    listen {FARM_ADDR}:80 backlog=4096 reuseport;\n    root {d}/www;\n  }}\n}}\n",
        d = dir.display()
    )
}

fn spawn_in(ns: &str, cmd: &str, args: &[&str], log: &Path) -> Result<Child> {
    Command::new("ip")
        .args(["netns", "exec", ns, cmd])
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log)?)
        .stderr(Stdio::from(std::fs::File::options().append(true).create(true).open(log)?))
        .spawn()
        .with_context(|| format!("starting {cmd} (make deps installs it)"))
}

fn wait_listen(ns: &str, port: u16) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if in_ns(ns, "ss", &["-Hltn", &format!("sport = :{port}")]).is_ok_and(|o| !o.trim().is_empty()) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("nothing listens on port {port} in {ns}")
}

fn stop_child(c: &mut Child) {
    // SAFETY: kill(2) on our own unreaped child.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) && !matches!(c.try_wait(), Ok(Some(_))) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// iperf3's JSON: (received bits per second, retransmissions).
pub fn parse_iperf(json: &str) -> Result<(f64, u64)> {
    let v: serde_json::Value = serde_json::from_str(json).context("iperf3 -J output")?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("iperf3: {e}");
    }
    let end = &v["end"];
    let bps = end["sum_received"]["bits_per_second"].as_f64().ok_or_else(|| anyhow!("iperf3: no end.sum_received"))?;
    let retr = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    Ok((bps, retr))
}

/// wrk's "N requests in 5.00s".
pub fn parse_wrk_requests(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.trim().split_once(" requests in ").and_then(|(n, _)| n.trim().parse().ok()))
}

/// wrk's summary: (requests per second, socket errors + non-2xx answers).
pub fn parse_wrk(text: &str) -> Result<(f64, u64)> {
    let rps = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| anyhow!("wrk printed no Requests/sec:\n{text}"))?;
    let mut errors = 0u64;
    for l in text.lines().map(str::trim) {
        if let Some(rest) = l.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            errors += rest.split(',').filter_map(|kv| kv.split_whitespace().nth(1)?.parse::<u64>().ok()).sum::<u64>();
        } else if let Some(rest) = l.strip_prefix("Non-2xx or 3xx responses:") {
            errors += rest.trim().parse::<u64>().unwrap_or(0);
        }
    }
    Ok((rps, errors))
}

/// Time `n` sequential connects from `src` to the farm's port 80 inside the clients' namespace;
/// returns the connect times (µs) and the failures.
fn connect_times(ns: &str, src: &str, n: usize) -> Result<(Vec<f64>, usize)> {
    connects_from(ns, vec![src.to_string(); n])
}

/// Time one connect from each address of `srcs` in turn, as [`connect_times`] does.
fn connects_from(ns: &str, srcs: Vec<String>) -> Result<(Vec<f64>, usize)> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<(Vec<f64>, usize)> {
        crate::netns::enter(&ns)?;
        let farm: SocketAddr = format!("{FARM_ADDR}:80").parse()?;
        let (mut times, mut failed) = (Vec::with_capacity(srcs.len()), 0);
        for src in &srcs {
            let local: SocketAddr = format!("{src}:0").parse()?;
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            s.bind(&local.into())?;
            let t = Instant::now();
            match s.connect_timeout(&farm.into(), Duration::from_secs(2)) {
                Ok(()) => times.push(t.elapsed().as_secs_f64() * 1e6),
                Err(_) => failed += 1,
            }
            // RST on close: no TIME_WAIT piles up on either side.
            let _ = s.set_linger(Some(Duration::ZERO));
        }
        Ok((times, failed))
    })
    .join()
    .map_err(|_| anyhow!("connect thread panicked"))?
}

/// The web's bulk: one HTTP download of [`WEB_BULK_FILE`] from nginx on the farm's port 80 (a
/// port rlm watches, unlike iperf3's), read from `src` in the clients' namespace for `secs`
/// seconds; Gbit/s of the bytes read (the head included).
fn web_bulk(ns: &str, src: &str, secs: u32) -> Result<f64> {
    let (ns, src) = (ns.to_string(), src.to_string());
    std::thread::spawn(move || -> Result<f64> {
        use std::io::{Read, Write};
        crate::netns::enter(&ns)?;
        let farm: SocketAddr = format!("{FARM_ADDR}:80").parse()?;
        let local: SocketAddr = format!("{src}:0").parse()?;
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.bind(&local.into())?;
        s.connect_timeout(&farm.into(), Duration::from_secs(2))?;
        let mut s = std::net::TcpStream::from(s);
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(format!("GET /{WEB_BULK_FILE} HTTP/1.1\r\nHost: farm\r\n\r\n").as_bytes())?;
        let mut buf = vec![0u8; 256 << 10];
        let (start, mut bytes) = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(u64::from(secs)) {
            match s.read(&mut buf) {
                Ok(0) => bail!("the farm closed the download after {bytes} bytes"),
                Ok(n) => bytes += n as u64,
                Err(e) => return Err(e).context("reading the download"),
            }
        }
        Ok(bytes as f64 * 8.0 / start.elapsed().as_secs_f64() / 1e9)
    })
    .join()
    .map_err(|_| anyhow!("download thread panicked"))?
}

/// One sample of `arm` on the running lab.
fn sample(plan: &Plan, round: usize, arm: Arm, sample_s: u32, dir: &Path, servers: &[u32]) -> Result<Sample> {
    let cli = plan.ns("cli");
    let src = crate::topology::client_addr(true, 0);
    let sdir = dir.join(arm.name()).join(format!("round-{round}"));
    std::fs::create_dir_all(&sdir)?;
    // An own-core arm: rlm on the last CPU; this thread (and so every load it starts, and its
    // samplers) and the servers on the others for the sample.
    let split = if arm.own_core() { Some(crate::cpus::split(&crate::cpus::allowed())?) } else { None };
    let spec = arm.rlm().map(|a| RlmArm { cpus: split.as_ref().map(|(appliance, _)| appliance.clone()), ..a });
    let pinned = split.map(|(_, load)| crate::cpus::LoadPinned::new(&load, servers)).transpose()?;
    let rlm = spec.map(|a| Inline::start(&plan.ns("app"), &a, &sdir, Duration::from_secs(10))).transpose()?;
    // Where rlm (every task of it), the servers and the load ran, read from the kernel after the
    // load (an own-core arm's rlm shares none of its CPUs with the others).
    let rlm_pid = rlm.as_ref().map(|r| r.pid);
    let cpus_of_trees = |pids: &[u32]| -> Option<Vec<usize>> {
        pids.iter().flat_map(|p| crate::cpus::tasks_of_tree(*p)).filter_map(crate::cpus::of_task).reduce(|mut a, b| {
            a.extend(b);
            a.sort_unstable();
            a.dedup();
            a
        })
    };
    let run = || -> Result<Sample> {
        let (mut bulk_runs_gbps, mut retr) = (Vec::new(), 0);
        for run in 0..sample_s {
            // iperf3 -J prints its error as JSON on stdout and exits 1: read stdout either way.
            let out = Command::new("ip")
                .args(["netns", "exec", &cli, "iperf3", "-c", FARM_ADDR, "-p", &IPERF_PORT.to_string(), "-B", &src, "-t", "1", "-R", "-J"])
                .output()?;
            let iperf = String::from_utf8_lossy(&out.stdout).into_owned();
            std::fs::write(sdir.join(format!("iperf3-{run}.json")), &iperf)?;
            let (bps, r) = parse_iperf(&iperf)?;
            bulk_runs_gbps.push(bps / 1e9);
            retr += r;
        }
        let web_bulk_runs_gbps = (0..sample_s).map(|_| web_bulk(&cli, &src, 1)).collect::<Result<Vec<f64>>>()?;
        let url = format!("http://{FARM_ADDR}/small.html");
        let (mut conn_runs_per_s, mut errors, mut requests) = (Vec::new(), 0, 0);
        for run in 0..sample_s {
            let wrk = in_ns(&cli, "wrk", &["-t1", "-c16", "-d1s", "-H", "Connection: close", &url])?;
            std::fs::write(sdir.join(format!("wrk-{run}.txt")), &wrk)?;
            let (rps, e) = parse_wrk(&wrk)?;
            conn_runs_per_s.push(rps);
            errors += e;
            requests += parse_wrk_requests(&wrk).unwrap_or(0);
        }
        let (times, failed) = connect_times(&cli, &src, CONNECTS)?;
        // Every client address but the one above: new to this sample's rlm.
        let fresh = (1..=FIRST_CONNECTS).map(|i| crate::topology::client_addr(true, i)).collect();
        let (first, first_failed) = connects_from(&cli, fresh)?;
        let (rlm_cpus, server_cpus) = (rlm_pid.and_then(|p| cpus_of_trees(&[p])), cpus_of_trees(servers));
        // The thread that started every load of the sample (wrk, iperf3, the connects'
        // threads): they inherited its CPUs.
        let load_cpus = Some(crate::cpus::allowed());
        Ok(Sample {
            round,
            bulk_gbps: median(&bulk_runs_gbps),
            bulk_runs_gbps,
            bulk_retransmits: retr,
            web_bulk_gbps: median(&web_bulk_runs_gbps),
            web_bulk_runs_gbps,
            conn_per_s: median(&conn_runs_per_s),
            conn_runs_per_s,
            requests,
            conn_errors: errors,
            connect_p50_us: percentile(&times, 50.0),
            connect_p99_us: percentile(&times, 99.0),
            connect_failures: failed + first_failed,
            first_connect_p50_us: percentile(&first, 50.0),
            first_connect_p99_us: percentile(&first, 99.0),
            rlm: None,
            transaction_lines: None,
            machine_probe_ms: None,
            rlm_cpus,
            server_cpus,
            load_cpus,
        })
    };
    let probe = crate::speed::SpeedProbe::start(Duration::from_secs(1));
    let result = run();
    let speed = probe.finish();
    let outcome = rlm.map(Inline::stop).transpose()?;
    drop(pinned);
    let mut s = result?;
    s.machine_probe_ms = (!speed.samples_ms.is_empty()).then_some(speed.median_ms);
    s.transaction_lines = outcome.as_ref().and_then(|o| o.records.as_ref()).map(|r| count_lines(&r.transactions));
    s.rlm = outcome;
    eprintln!(
        "rlm-lab: throughput: round {round} {}: bulk {:.2} Gbit/s, web bulk {:.2} Gbit/s, {:.0} conn/s, connect p50 {:.0} µs p99 {:.0} µs, first connect p50 {:.0} µs p99 {:.0} µs",
        arm.name(),
        s.bulk_gbps,
        s.web_bulk_gbps,
        s.conn_per_s,
        s.connect_p50_us,
        s.connect_p99_us,
        s.first_connect_p50_us,
        s.first_connect_p99_us
    );
    Ok(s)
}

/// The median of every run of every sample pooled (a bulk figure is a few one-second runs per
/// sample, see [`sample`]).
fn pooled(samples: &[Sample], runs: fn(&Sample) -> &Vec<f64>) -> f64 {
    median(&samples.iter().flat_map(|s| runs(s).iter().copied()).collect::<Vec<_>>())
}

fn arm_of(samples: Vec<Sample>) -> ThroughputArm {
    let m = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
    let rlm: Vec<&RlmOutcome> = samples.iter().filter_map(|s| s.rlm.as_ref()).collect();
    let has_rlm = !rlm.is_empty();
    let opt_median = |v: Vec<f64>| if v.is_empty() { None } else { Some(median(&v)) };
    ThroughputArm {
        bulk_gbps: pooled(&samples, |s| &s.bulk_runs_gbps),
        web_bulk_gbps: pooled(&samples, |s| &s.web_bulk_runs_gbps),
        conn_per_s: pooled(&samples, |s| &s.conn_runs_per_s),
        connect_p50_us: m(|s| s.connect_p50_us),
        connect_p99_us: m(|s| s.connect_p99_us),
        first_connect_p50_us: m(|s| s.first_connect_p50_us),
        first_connect_p99_us: m(|s| s.first_connect_p99_us),
        rlm_verdict_latency_p50_us: opt_median(rlm.iter().filter_map(|o| o.verdict_latency_p50_us).collect()),
        rlm_verdict_latency_p99_us: opt_median(rlm.iter().filter_map(|o| o.verdict_latency_p99_us).collect()),
        rlm_clean_exits: has_rlm.then(|| rlm.iter().filter(|o| o.clean_exit).count()),
        rlm_cpu_cores: opt_median(rlm.iter().filter(|o| o.wall_s > 0.0).map(|o| o.cpu_s / o.wall_s).collect()),
        samples,
        ..ThroughputArm::default()
    }
}

fn result(name: &str, spec: &ArmSpec, t: ThroughputArm, dir: &Path) -> ArmResult {
    ArmResult {
        name: name.into(),
        config: spec.clone(),
        clients: 1,
        duration_s: spec.duration_s,
        pageviews: PageviewSummary::default(),
        requests: None,
        generator: Default::default(),
        generator_bottleneck: false,
        farm_usage: Default::default(),
        ground_truth: dir.to_path_buf(),
        capture: None,
        rlm: None,
        farm_front: None,
        server_syns: None,
        throughput: Some(t),
        farm_tcp: None,
        timeline: Vec::new(),
        capture_fidelity: None,
        live_fidelity: None,
        live_fidelity_by_class: Default::default(),
        attack: None,
        windows: None,
        machine_speed: None,
        wan: None,
    }
}

/// Run the experiment: `rounds` rounds, each a sample of every arm of `arms`, in an order that
/// turns from round to round ([`order`]).
pub fn run(prefix: &str, rounds: usize, sample_s: u32, offloads: Offloads, out: &Path, spec: &ArmSpec, arms: &[Arm]) -> Result<Vec<ArmResult>> {
    std::fs::create_dir_all(out)?;
    // One address for the bulk, wrk and repeated connects, FIRST_CONNECTS more for first
    // connects.
    let plan = Plan { prefix: prefix.to_string(), high_clients: 1 + FIRST_CONNECTS, low_clients: 1, offloads, ..Plan::default() };
    plan.up()?;
    let result = (|| -> Result<Vec<ArmResult>> {
        // The WAN hop forwards plainly: no bridge netfilter, no rule.
        let wan = plan.ns("wan");
        in_ns(&wan, "sysctl", &["-q", "-w", "net.bridge.bridge-nf-call-iptables=0"])?;
        let rules = in_ns(&wan, "iptables-save", &[])?;
        if rules.contains("NFQUEUE") {
            bail!("the WAN hop holds a queue rule:\n{rules}");
        }
        // The appliance's bridge is plain too until an rlm that queues turns br_netfilter on
        // (and back off at its exit): the lab's topology turns it on for every experiment.
        let app = plan.ns("app");
        for family in ["iptables", "ip6tables"] {
            in_ns(&app, "sysctl", &["-q", "-w", &format!("net.bridge.bridge-nf-call-{family}=0")])?;
        }
        let srv = plan.ns("srv");
        let dir = plan.run_dir();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("www"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        for d in [Path::new("/var/tmp/rlm-lab"), dir.as_path(), dir.join("www").as_path()] {
            Command::new("chmod").arg("755").arg(d).status()?;
        }
        std::fs::write(dir.join("www/small.html"), "x".repeat(511) + "\n")?;
        // A sparse file (no disk used) larger than any sample downloads.
        std::fs::File::create(dir.join("www").join(WEB_BULK_FILE))?.set_len(WEB_BULK_BYTES)?;
        std::fs::write(dir.join("nginx.conf"), nginx_conf(&dir))?;
        let nginx = Command::new("ip")
            .args(["netns", "exec", &srv, "nginx", "-p"])
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nginx")?;
        let mut children = vec![nginx];
        let started = (|| -> Result<()> {
            wait_listen(&srv, 80)?;
            children.push(spawn_in(&srv, "iperf3", &["-s", "-B", FARM_ADDR, "-p", &IPERF_PORT.to_string()], &out.join("iperf3-server.log"))?);
            wait_listen(&srv, IPERF_PORT)
        })();
        let servers: Vec<u32> = children.iter().map(|c| c.id()).collect();
        let run = started.and_then(|()| {
            // One second of the web's bulk first, unmeasured: the first download of a run was
            // the slowest of its samples whatever the arm (2.3-2.4 Gbit/s against 4-5 later).
            web_bulk(&plan.ns("cli"), &crate::topology::client_addr(true, 0), 1)?;
            let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); arms.len()];
            for round in 0..rounds {
                for arm in order(arms, round) {
                    let i = arms.iter().position(|a| *a == arm).expect("one of the arms");
                    samples[i].push(sample(&plan, round, arm, sample_s, out, &servers)?);
                }
            }
            Ok(samples)
        });
        for c in children.iter_mut().rev() {
            stop_child(c);
        }
        let mut by_arm: Vec<ThroughputArm> = run?.into_iter().map(arm_of).collect();
        // Every arm with rlm against the plain bridge, if it ran; not the own-core arms, whose
        // load had one core fewer than the plain bridge's.
        if let Some(p) = arms.iter().position(|a| *a == Arm::PlainBridge) {
            let plain = by_arm[p].clone();
            for (t, arm) in by_arm.iter_mut().zip(arms) {
                if *arm != Arm::PlainBridge && !arm.own_core() {
                    t.added_latency_p50_us = Some(t.connect_p50_us - plain.connect_p50_us);
                    t.added_latency_p99_us = Some(t.connect_p99_us - plain.connect_p99_us);
                    t.first_added_p50_us = Some(t.first_connect_p50_us - plain.first_connect_p50_us);
                    t.first_added_p99_us = Some(t.first_connect_p99_us - plain.first_connect_p99_us);
                    t.bulk_ratio = (plain.bulk_gbps > 0.0).then(|| t.bulk_gbps / plain.bulk_gbps);
                    t.web_bulk_ratio = (plain.web_bulk_gbps > 0.0).then(|| t.web_bulk_gbps / plain.web_bulk_gbps);
                    t.conn_ratio = (plain.conn_per_s > 0.0).then(|| t.conn_per_s / plain.conn_per_s);
                }
            }
        }
        Ok(arms
            .iter()
            .zip(by_arm)
            .map(|(arm, t)| {
                let mut aspec = spec.clone();
                aspec.name = arm.name().into();
                aspec.rlm = arm.rlm();
                result(arm.name(), &aspec, t, &out.join(arm.name()))
            })
            .collect())
    })();
    plan.down()?;
    result
}

/// Each arm's figures (bulk and connections: medians of its one-second runs pooled) and every
/// sample's, for the report.
pub fn table(arms: &[ArmResult]) -> String {
    let mut md = String::from(
        "\n| arm | samples | bulk (median) | connections/s (median) | connect p50 | connect p99 | added p50 | added p99 | first connect p50 / p99 | first added p50 / p99 | rlm verdict p50 / p99 | rlm CPU | bulk ratio | conn ratio |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let o = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.1}{unit}"));
    for a in arms {
        let Some(t) = &a.throughput else { continue };
        md.push_str(&format!(
            "| {} | {} | {:.2} Gbit/s | {:.0} | {:.0} µs | {:.0} µs | {} | {} | {:.0} / {:.0} µs | {} / {} | {} / {} | {} | {} | {} |\n",
            a.name,
            t.samples.len(),
            t.bulk_gbps,
            t.conn_per_s,
            t.connect_p50_us,
            t.connect_p99_us,
            o(t.added_latency_p50_us, " µs"),
            o(t.added_latency_p99_us, " µs"),
            t.first_connect_p50_us,
            t.first_connect_p99_us,
            o(t.first_added_p50_us, ""),
            o(t.first_added_p99_us, " µs"),
            o(t.rlm_verdict_latency_p50_us, " µs"),
            o(t.rlm_verdict_latency_p99_us, " µs"),
            t.rlm_cpu_cores.map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
            t.bulk_ratio.map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
            t.conn_ratio.map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
        ));
    }
    md.push_str("\nEvery sample (bulk Gbit/s, connections/s, connect p50/p99 µs, and the machine's speed probe):\n\n");
    for a in arms {
        let Some(t) = &a.throughput else { continue };
        let s: Vec<String> = t
            .samples
            .iter()
            .map(|s| {
                let probe = s.machine_probe_ms.map_or(String::new(), |ms| format!(" (probe {ms:.2} ms)"));
                format!("{:.2} / {:.0} / {:.0} / {:.0}{probe}", s.bulk_gbps, s.conn_per_s, s.connect_p50_us, s.connect_p99_us)
            })
            .collect();
        md.push_str(&format!("- {}: {}\n", a.name, s.join("; ")));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_arm_turns_first_and_each_records_pair_alternates() {
        let arms = Arm::of_run(false);
        let rounds: Vec<Vec<Arm>> = (0..5).map(|r| order(&arms, r)).collect();
        for (r, o) in rounds.iter().enumerate() {
            assert_eq!(o.len(), arms.len(), "round {r}: {o:?}");
            assert!(arms.iter().all(|a| o.contains(a)), "round {r}: {o:?}");
        }
        // The first arm turns (the swap can make one pair's arm first twice).
        let firsts: std::collections::HashSet<Arm> = rounds.iter().map(|o| o[0]).collect();
        assert!(firsts.len() >= 4, "{rounds:?}");
        // Each pair's arm without records first in three rounds of five, the other in two.
        for (a, b) in RECORD_PAIRS {
            let a_first = rounds.iter().filter(|o| o.iter().position(|x| *x == a) < o.iter().position(|x| *x == b)).count();
            assert!((2..=3).contains(&a_first), "{a:?} before {b:?} in {a_first} of 5 rounds: {rounds:?}");
        }
        // The quick run's two arms: ABBA.
        let quick = Arm::of_run(true);
        assert_eq!(order(&quick, 1), vec![quick[1], quick[0]]);
        assert_eq!(order(&quick, 2), quick);
    }

    #[test]
    fn the_table_lists_every_sample_with_the_machines_probe() {
        let spec = crate::experiments::arm("throughput", 1, 10.0, &[], false, 1.0);
        let s = |probe| Sample {
            round: 1,
            bulk_gbps: 5.0,
            conn_per_s: 9000.0,
            connect_p50_us: 100.0,
            connect_p99_us: 300.0,
            machine_probe_ms: probe,
            ..Sample::default()
        };
        let t = ThroughputArm { samples: vec![s(Some(1.25)), s(None)], ..ThroughputArm::default() };
        let md = table(&[result("rlm", &spec, t, Path::new("/tmp"))]);
        assert!(md.contains("- rlm: 5.00 / 9000 / 100 / 300 (probe 1.25 ms); 5.00 / 9000 / 100 / 300\n"), "{md}");
    }

    #[test]
    fn an_arms_bulk_and_connection_rate_are_the_medians_of_every_run_pooled() {
        let s = |runs: &[f64], own, web: &[f64]| Sample {
            bulk_runs_gbps: runs.to_vec(),
            bulk_gbps: own,
            web_bulk_runs_gbps: web.to_vec(),
            // wrk's runs: the bulk runs' figures in thousands a second.
            conn_runs_per_s: runs.iter().map(|r| r * 1000.0).collect(),
            conn_per_s: own * 1000.0,
            ..Sample::default()
        };
        // Samples' own medians 9, 9 and 12 would give 9; the nine runs pooled give 10.
        let a = arm_of(vec![s(&[7.0, 9.0, 12.0], 9.0, &[3.0]), s(&[9.0, 10.0, 7.0], 9.0, &[8.0, 9.0]), s(&[12.0, 12.0, 11.0], 12.0, &[10.0, 11.0])]);
        assert_eq!(a.bulk_gbps, 10.0);
        // The web bulk's downloads the same (the samples' own medians, 3, 8 and 10, would give 8).
        assert_eq!(a.web_bulk_gbps, 9.0);
        // And wrk's connection rate (9,000 by the samples' own medians).
        assert_eq!(a.conn_per_s, 10_000.0);
    }

    #[test]
    fn parses_wrk_requests() {
        assert_eq!(super::parse_wrk_requests("Running 5s test @ http://x/\n  105471 requests in 5.00s, 80.2MB read\n"), Some(105471));
        assert_eq!(super::parse_wrk_requests("nothing"), None);
    }

    #[test]
    fn parses_wrk_and_iperf() {
        let wrk = "Running 5s test @ http://10.9.0.1/small.html\n  1 threads and 16 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency     1.62ms  400.00us   9.00ms   80.00%\n    Req/Sec     9.80k   500.00     10.50k    70.00%\n  48888 requests in 5.00s, 36.00MB read\n  Socket errors: connect 0, read 3, write 0, timeout 2\n  Non-2xx or 3xx responses: 1\nRequests/sec:   9777.60\nTransfer/sec:      7.20MB\n";
        assert_eq!(parse_wrk(wrk).unwrap(), (9777.6, 6));
        assert!(parse_wrk("nothing").is_err());
        let iperf =
            r#"{"start":{},"intervals":[],"end":{"sum_sent":{"bits_per_second":2.1e9,"retransmits":4},"sum_received":{"bits_per_second":2.0e9}}}"#;
        assert_eq!(parse_iperf(iperf).unwrap(), (2.0e9, 4));
        assert!(parse_iperf(r#"{"error":"unable to connect"}"#).is_err());
    }
}
