//! `make bench-engines` (root): the new-connection rate `rlm run` sustains on one engine and on
//! two, side by side in one run, alternating arms.
//!
//! The load tools are moved out of the way by time rather than by core (this machine has two):
//! rlm runs inline on the lab's bridge, is stopped (SIGSTOP), and its rings are filled through
//! its own programs (`BPF_PROG_TEST_RUN` on `syn_admit` and `observe`, the kernel dealing each
//! client's reports to its engine's ring as on the wire) with the frames of `CONNECTIONS`
//! connections: SYN, SYN/ACK, the handshake's ACK, a request, a 200-byte response, and both
//! FINs, from a HIGH or a LOW client (classes and their windows, shared
//! between the engines, are kept); the heartbeat is beaten meanwhile. Then rlm is let go
//! (SIGCONT) and the time until every ring is empty is the time its engines took: nothing else
//! runs then but this process, which reads the rings' positions every 200 us. The rate is
//! connections over that time. Checked: no report lost to a full ring while filling, and every
//! connection counted by rlm (its `/status`) after the drain.
//!
//! Seven rounds, each one engine then two; the figure is the median of each arm's rates and the
//! median of the rounds' ratios (the machine is shared: a round's two arms are seconds apart).
//! Writes target/bench-engines.json and prints a row per arm.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use kmod_fastpath::running::Running;
use kmod_fastpath::testrun::Arrival;
use rlm_core::testkit::TcpConv;
use testbed::inline::{Inline, RlmArm};
use testbed::topology::Plan;

/// Connections filled into the rings each round (about 1.5 KB of reports each: 150 MB, in rings
/// of 256 MiB).
const CONNECTIONS: usize = 100_000;
const ROUNDS: usize = 7;
const RING_MB: &str = "256";
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: image/gif\r\nContent-Length: 200\r\n\r\n";

/// One connection's frames, in order, each with where the program sees it: (client side,
/// arrival at the server port).
fn connection(i: usize) -> Vec<(bool, Arrival, Vec<u8>)> {
    let class = if i % 2 == 0 { 4 } else { 5 };
    let client = format!("10.{class}.{}.{}:{}", (i / 2) / 250 % 250, (i / 2) % 250 + 1, 40000 + (i % 20000));
    let mut c = TcpConv::new(&client, "10.9.0.1:80");
    let to_server = (false, Arrival::Leaving);
    let from_server = (false, Arrival::CameIn);
    let mut out = vec![((true, Arrival::CameIn), c.syn()), (from_server, c.synack()), (to_server, c.ack())];
    out.push((to_server, c.client_data(b"GET /img/1.gif HTTP/1.1\r\nHost: shop\r\n\r\n")));
    let mut body = RESPONSE.to_vec();
    body.extend(std::iter::repeat_n(b'G', 200));
    for f in c.server_data_in(&body, 1448) {
        out.push((from_server, f));
    }
    out.push((to_server, c.client_fin()));
    out.push((from_server, c.server_fin()));
    out.into_iter().map(|((client_side, arrival), f)| (client_side, arrival, f)).collect()
}

struct Round {
    engines: usize,
    fill_s: f64,
    drain_s: f64,
    per_s: f64,
    /// The CPU time of rlm's busiest thread during the drain (an engine's), and the rate it
    /// gives: connections over it (what the engines sustain with a core each, whatever else the
    /// shared machine ran meanwhile).
    busiest_cpu_s: f64,
    per_cpu_s: f64,
    frames: u64,
}

/// CPU time (user and system, seconds) of each thread of process `pid`, by thread id.
fn thread_cpu(pid: u32) -> std::collections::BTreeMap<u32, f64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // Fields after the command's closing parenthesis: state is the 3rd field, utime the
        // 14th and stime the 15th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        if let (Some(u), Some(s)) = (f.get(11).and_then(|v| v.parse::<f64>().ok()), f.get(12).and_then(|v| v.parse::<f64>().ok())) {
            out.insert(tid, (u + s) / hz);
        }
    }
    out
}

fn round(info: &testbed::topology::Info, engines: usize, frames: &[Vec<(bool, Arrival, Vec<u8>)>], dir: &std::path::Path) -> Result<Round> {
    let arm = RlmArm {
        rules: "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n".into(),
        // Room for every connection of the round in the tables (at 128 MiB, 39,321 of them: the
        // rest would be evicted, work a sustained rate does not make).
        extra_args: vec!["--engines".into(), engines.to_string(), "--ring-mb".into(), RING_MB.into(), "--memory-mb".into(), "1024".into()],
        records: false,
        count_maps: false,
        cpus: None,
    };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, dir, Duration::from_secs(20))?;
    let mut fp = Running::find()?;
    ensure!(fp.rings() == engines, "{} rings in use for {engines} engines", fp.rings());
    let before: serde_json::Value = serde_json::from_str(&rlm.get("/status")?)?;
    // SAFETY: kill(2) on rlm's pid (`ip netns exec` execs it), our child.
    unsafe { libc::kill(rlm.pid as i32, libc::SIGSTOP) };
    let t0 = Instant::now();
    let mut last_beat = Instant::now() - Duration::from_secs(1);
    let mut n = 0u64;
    for conn in frames {
        if last_beat.elapsed() >= Duration::from_millis(50) {
            fp.beat(Duration::from_secs(2))?;
            last_beat = Instant::now();
        }
        for (client_side, arrival, f) in conn {
            fp.run(*client_side, f, *arrival)?;
            n += 1;
        }
    }
    let fill_s = t0.elapsed().as_secs_f64();
    let per_ring = fp.waiting();
    let waiting: u64 = per_ring.iter().sum();
    if engines > 1 {
        eprintln!("rings hold {:?} MB", per_ring.iter().map(|b| b >> 20).collect::<Vec<_>>());
    }
    let cpu_before = thread_cpu(rlm.pid);
    // SAFETY: as above.
    unsafe { libc::kill(rlm.pid as i32, libc::SIGCONT) };
    let t1 = Instant::now();
    while fp.waiting().iter().any(|&w| w > 0) {
        std::thread::sleep(Duration::from_micros(200));
        ensure!(t1.elapsed() < Duration::from_secs(120), "rlm did not drain its rings in 2 minutes");
    }
    let drain_s = t1.elapsed().as_secs_f64();
    let cpu_after = thread_cpu(rlm.pid);
    let busiest_cpu_s = cpu_after.iter().map(|(t, c)| c - cpu_before.get(t).copied().unwrap_or(0.0)).fold(0.0, f64::max);
    // rlm's own count once its status has caught up (every second).
    std::thread::sleep(Duration::from_millis(2200));
    let after: serde_json::Value = serde_json::from_str(&rlm.get("/status")?)?;
    let out = rlm.stop()?;
    ensure!(out.exit_code == Some(0), "rlm exited {:?}", out.exit_code);
    let counter = |v: &serde_json::Value, k: &str| v["fastpath"][k].as_u64().unwrap_or(0);
    ensure!(counter(&after, "ring_full") == counter(&before, "ring_full"), "reports lost to a full ring: the figure would be too good");
    let frames_seen = after["stats"]["frames"].as_u64().unwrap_or(0) - before["stats"]["frames"].as_u64().unwrap_or(0);
    let conns = after["stats"]["connections"].as_u64().unwrap_or(0) - before["stats"]["connections"].as_u64().unwrap_or(0);
    let midstream = after["stats"]["connections_midstream"].as_u64().unwrap_or(0);
    ensure!(
        conns >= CONNECTIONS as u64 && midstream == 0,
        "rlm tracked {conns} connections of {CONNECTIONS} ({midstream} joined midstream; {frames_seen} frames; {waiting} bytes were waiting)"
    );
    Ok(Round {
        engines,
        fill_s,
        drain_s,
        per_s: CONNECTIONS as f64 / drain_s,
        busiest_cpu_s,
        per_cpu_s: CONNECTIONS as f64 / busiest_cpu_s.max(0.01),
        frames: n,
    })
}

fn main() -> Result<()> {
    ensure!(lab_netns::is_root(), "make bench-engines needs root (namespaces, eBPF)");
    let plan = Plan { prefix: format!("rlmbe{}", std::process::id()), high_clients: 1, low_clients: 1, ..Plan::default() };
    let _guard = testbed::topology::DownOnDrop(plan.clone());
    let info = plan.up().context("the lab's namespaces")?;
    let frames: Vec<_> = (0..CONNECTIONS).map(connection).collect();
    let dir = std::env::temp_dir().join(format!("rlm-bench-engines-{}", std::process::id()));
    let mut rounds = Vec::new();
    println!(
        "{:>7} {:>8} {:>9} {:>14} {:>12} {:>16} {:>9}",
        "engines", "fill s", "drain s", "connections/s", "busiest cpu", "per busiest cpu s", "frames"
    );
    let rounds_n = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(ROUNDS);
    // A round first that does not count: the first rlm of a run drained at half the rate of
    // the later ones, whatever its engines (measured 50,433 and 52,519 connections/s against
    // 106,698-114,754 with one engine).
    for engines in [1, 2] {
        let x = round(&info, engines, &frames, &dir.join(format!("warm-e{engines}")))?;
        println!("{:>7} {:>8.2} {:>9.3} {:>14.0} (warm-up, not counted)", x.engines, x.fill_s, x.drain_s, x.per_s);
    }
    for r in 0..rounds_n {
        for engines in [1, 2] {
            let x = round(&info, engines, &frames, &dir.join(format!("r{r}-e{engines}")))?;
            println!(
                "{:>7} {:>8.2} {:>9.3} {:>14.0} {:>12.2} {:>16.0} {:>9}",
                x.engines, x.fill_s, x.drain_s, x.per_s, x.busiest_cpu_s, x.per_cpu_s, x.frames
            );
            rounds.push(x);
        }
    }
    let median = |e: usize, f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().filter(|x| x.engines == e).map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (one, two) = (median(1, |x| x.per_s), median(2, |x| x.per_s));
    let (one_cpu, two_cpu) = (median(1, |x| x.per_cpu_s), median(2, |x| x.per_cpu_s));
    println!("by the busiest thread's CPU time: 1 engine {one_cpu:.0}/s, 2 engines {two_cpu:.0}/s: {:.2}x", two_cpu / one_cpu);
    // Each round's two arms ran back to back: their ratio, round by round.
    let mut ratios: Vec<f64> = rounds.chunks(2).map(|r| r[1].per_s / r[0].per_s).collect();
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    println!("median: 1 engine {one:.0}/s, 2 engines {two:.0}/s: {:.2}x; round by round {ratios:.2?}, median {ratio:.2}x", two / one);
    let json = serde_json::json!({
        "connections": CONNECTIONS, "rounds": rounds.iter().map(|x| serde_json::json!({
            "engines": x.engines, "fill_s": x.fill_s, "drain_s": x.drain_s, "connections_per_s": x.per_s,
            "busiest_thread_cpu_s": x.busiest_cpu_s, "connections_per_busiest_cpu_s": x.per_cpu_s, "frames": x.frames,
        })).collect::<Vec<_>>(),
        "median_per_s": { "1": one, "2": two }, "speedup": two / one, "round_ratios": ratios, "median_round_ratio": ratio,
        "median_per_busiest_cpu_s": { "1": one_cpu, "2": two_cpu },
    });
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-engines.json");
    if let Some(d) = out.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&json)? + "\n")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
