//! Running an arm: build the lab, run the arm, tear down, summarise from the ground truth.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sim_clients::browser::{BrowserSpec, GeneratorStats, RunSpec};
use sim_clients::dist::EmpiricalSizes;
use sim_clients::openloop::{file_sizes, OpenLoopSpec, RequestRecord, RequestStats};
use sim_clients::tcp_profile::ProfileCgroup;
use sim_clients::wan::Group;

use crate::arm::{classes_of, pv_stats, read_truth, timeline, ArmResult, ArmSpec, ClassSyns, FrontSummary, OpenLoopArm, PageviewSummary, ServerSyns};
use crate::experiments::fidelity;
use crate::farm::sampler::Sampler;
use crate::farm::site::PageType;
use crate::farm::{Farm, FarmConfig};
use crate::inline::Inline;
use crate::speed::SpeedProbe;
use crate::topology::{Plan, FARM_ADDR};
use crate::wan::WanHop;

/// How often the machine's speed is probed while an arm's clients run ([`crate::speed`]).
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// The class of a client address: 10.4/16 HIGH, 10.5/16 LOW (the lab's plan).
fn class_of(a: [u8; 4]) -> Option<&'static str> {
    match (a[0], a[1]) {
        (10, 4) => Some("HIGH"),
        (10, 5) => Some("LOW"),
        _ => None,
    }
}

/// Count the SYNs and SYN/ACKs of a capture (Ethernet, IPv4) between `from` and `to` (Unix s),
/// per client class. The lab's own parsing: nothing of the appliance's decoder is used.
pub fn count_syns(path: &Path, from: f64, to: f64) -> Result<BTreeMap<String, ClassSyns>> {
    use std::collections::HashSet;
    let mut cap = pcap::Capture::from_file(path).with_context(|| format!("reading {}", path.display()))?;
    let secs = (to - from).max(0.0).ceil() as usize;
    let mut out: BTreeMap<String, ClassSyns> = BTreeMap::new();
    let mut conns: BTreeMap<&str, HashSet<([u8; 4], u16)>> = BTreeMap::new();
    let mut answered: BTreeMap<&str, HashSet<([u8; 4], u16)>> = BTreeMap::new();
    for c in ["HIGH", "LOW"] {
        out.insert(c.into(), ClassSyns { per_second: vec![0; secs], ..ClassSyns::default() });
    }
    while let Ok(p) = cap.next_packet() {
        let ts = p.header.ts.tv_sec as f64 + p.header.ts.tv_usec as f64 / 1e6;
        if ts < from || ts >= to {
            continue;
        }
        let d = p.data;
        // Ethernet II, IPv4, TCP.
        if d.len() < 14 + 20 || d[12..14] != [0x08, 0x00] || d[14] >> 4 != 4 || d[23] != 6 {
            continue;
        }
        let ihl = usize::from(d[14] & 0x0f) * 4;
        let t = 14 + ihl;
        if d.len() < t + 14 {
            continue;
        }
        let (src, dst) = ([d[26], d[27], d[28], d[29]], [d[30], d[31], d[32], d[33]]);
        let (sport, dport) = (u16::from_be_bytes([d[t], d[t + 1]]), u16::from_be_bytes([d[t + 2], d[t + 3]]));
        let flags = d[t + 13];
        let (syn, ack, rst) = (flags & 0x02 != 0, flags & 0x10 != 0, flags & 0x04 != 0);
        if !syn || rst {
            continue;
        }
        if !ack {
            let Some(class) = class_of(src) else { continue };
            let e = out.get_mut(class).expect("both classes");
            e.syns += 1;
            let i = ((ts - from) as usize).min(secs.saturating_sub(1));
            if let Some(slot) = e.per_second.get_mut(i) {
                *slot += 1;
            }
            conns.entry(class).or_default().insert((src, sport));
        } else if let Some(class) = class_of(dst) {
            answered.entry(class).or_default().insert((dst, dport));
        }
    }
    let span = (to - from).max(1e-9);
    for (class, e) in out.iter_mut() {
        e.connections = conns.get(class.as_str()).map_or(0, |s| s.len() as u64);
        e.answered = answered.get(class.as_str()).map_or(0, |s| s.len() as u64);
        e.syn_rate_per_s = e.syns as f64 / span;
        e.conn_rate_per_s = e.connections as f64 / span;
        e.answered_rate_per_s = e.answered as f64 / span;
    }
    Ok(out)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Paths and weights the browsers request: TPC-W's browsing mix.
pub fn tpcw_pages() -> Vec<(String, f64)> {
    PageType::ALL
        .iter()
        .map(|p| {
            let q = match p {
                PageType::ProductDetail => "?i_id={item}",
                PageType::NewProducts | PageType::BestSellers => "?subject={subject}",
                PageType::SearchResults => "?q={term}",
                _ => "",
            };
            (format!("{}{q}", p.path()), p.browsing_mix())
        })
        .collect()
}

/// The `rlm-lab` executable (it runs the farm's front and the browsers as subcommands).
pub fn lab_binary() -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    for dir in [me.parent(), me.parent().and_then(|p| p.parent())].into_iter().flatten() {
        let cand = dir.join("rlm-lab");
        if cand.is_file() {
            return Ok(cand);
        }
    }
    bail!("rlm-lab not found next to {}", me.display())
}

/// Start `rlm-lab WHAT --spec SPEC --netns NS [extra] --out OUT --stats DIR/generator.json` with
/// its log in DIR/WHAT.log.
fn spawn_generator(lab: &Path, what: &str, spec: &Path, netns: &str, extra: &[&std::ffi::OsStr], out: &Path, dir: &Path) -> Result<Child> {
    Command::new(lab)
        .args([what, "--spec"])
        .arg(spec)
        .args(["--netns", netns])
        .args(extra)
        .arg("--out")
        .arg(out)
        .arg("--stats")
        .arg(dir.join("generator.json"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{what}.log")))?)
        .spawn()
        .with_context(|| format!("starting the {what} generator"))
}

/// The generator's own figures, and whether it (not the farm or the link) limited the run:
/// over 80% of a core, or a 99th-percentile scheduling lag over 50 ms.
fn generator_stats(dir: &Path) -> (GeneratorStats, bool) {
    let g: GeneratorStats = std::fs::read(dir.join("generator.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let bottleneck = g.wall_s > 0.0 && (g.cpu_s / g.wall_s > 0.8 || g.lag_p99_ms > 50.0);
    (g, bottleneck)
}

/// The WAN hop of an arm, if it has WAN paths.
fn start_wan(plan: &Plan, arm: &ArmSpec) -> Result<Option<WanHop>> {
    let groups: Vec<Group> = arm.wan.iter().map(|g| g.parse().map_err(|e: String| anyhow::anyhow!(e))).collect::<Result<_>>()?;
    if groups.is_empty() {
        return Ok(None);
    }
    Ok(Some(WanHop::start(plan, groups, arm.seed)?))
}

fn wait_or_kill(child: &mut Child, limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            if !st.success() {
                bail!("the browsers exited with {st}");
            }
            return Ok(());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Capture an interface of a namespace to a pcap file until `stop` is set.
fn start_capture(
    ns: String,
    dev: &'static str,
    filter: String,
    path: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Result<u64>> {
    std::thread::spawn(move || {
        crate::netns::enter(&ns)?;
        // A port with its offloads on carries super-frames of 64 KiB and their headers: the snap
        // length keeps them whole.
        let mut cap = pcap::Capture::from_device(dev)?.immediate_mode(true).snaplen(262_144).buffer_size(64 << 20).open()?.setnonblock()?;
        cap.filter(&filter, true)?;
        let mut file = cap.savefile(&path)?;
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            match cap.next_packet() {
                Ok(p) => {
                    file.write(&p);
                    n += 1;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        // Whatever is still buffered.
        while let Ok(p) = cap.next_packet() {
            file.write(&p);
            n += 1;
        }
        file.flush()?;
        Ok(n)
    })
}

/// Run one arm on a fresh lab; files go to `dir`.
pub fn run_arm(prefix: &str, arm: &ArmSpec, dir: &Path) -> Result<ArmResult> {
    std::fs::create_dir_all(dir)?;
    let lab = lab_binary()?;
    let t0 = std::time::Instant::now();
    let plan = Plan {
        prefix: prefix.to_string(),
        high_clients: arm.high_clients,
        low_clients: arm.low_clients,
        more_clients: arm.more_clients.clone(),
        offloads: arm.offloads,
    };
    let info = plan.up()?;
    let result = (|| -> Result<ArmResult> {
        if let Some(ol) = &arm.openloop {
            return run_openloop(&plan, &info, arm, ol, dir, &lab);
        }
        let mut farm = Farm::start(&plan, &arm.farm, &lab)?;
        let mut wan = start_wan(&plan, arm)?;
        let cgroup = ProfileCgroup::create(&format!("{prefix}-{}", arm.profile.name()), arm.profile)?;

        let browsers: Vec<BrowserSpec> = arm
            .class_names()
            .iter()
            .enumerate()
            .flat_map(|(g, class)| {
                let site = arm.https.as_ref().and_then(|h| h.group_sites.get(g).cloned());
                info.clients.group(g).iter().map(move |a| BrowserSpec {
                    addr: a.parse().expect("address"),
                    class: class.clone(),
                    site: site.clone(),
                    cookie: arm.cookies.iter().find(|(c, _)| c == class).map(|(_, v)| v.clone()),
                })
            })
            .collect();
        let port = arm.farm.front_port();
        let spec = RunSpec {
            server: format!("{FARM_ADDR}:{port}").parse()?,
            browsers,
            think_mean_s: arm.think_mean_s,
            duration_s: arm.duration_s,
            ramp_s: arm.ramp_s(),
            seed: arm.seed,
            profile: arm.profile,
            pages: arm.pages.clone().unwrap_or_else(tpcw_pages),
            items: arm.farm.items,
            tls: tls_spec(arm, &farm)?,
            think_min_s: arm.https.as_ref().map_or(0.0, |h| h.think_min_s),
            arrivals: arm.arrivals.clone(),
        };
        let spec_path = dir.join("browsers.json");
        std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec)?)?;
        let truth = dir.join("ground-truth.jsonl");

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let capture = arm.capture.then(|| dir.join("appliance-server-port.pcap"));
        let cap_thread =
            capture.as_ref().map(|p| start_capture(info.namespaces.appliance.clone(), "app-s", format!("tcp port {port}"), p.clone(), stop.clone()));
        let syn_capture = arm.syn_capture.then(|| dir.join("farm-syns.pcap"));
        let syn_thread = syn_capture.as_ref().map(|p| {
            let filter = format!("tcp port {port} and tcp[tcpflags] & tcp-syn != 0");
            start_capture(info.namespaces.servers.clone(), "srv0", filter, p.clone(), stop.clone())
        });
        std::thread::sleep(Duration::from_millis(200));
        let rlm = rlm_arm(arm, port).as_ref().map(|r| Inline::start(&info.namespaces.appliance, r, dir, Duration::from_secs(10))).transpose()?;
        let _page = rlm.as_ref().map(|_| page_relay(&info.namespaces.appliance, &arm.name));

        let started = unix_now();
        let t_up = t0.elapsed();
        let cpu_before = farm.usage().cpu_s;
        let sampler = farm.pid().map(|pid| Sampler::start(pid, port, Duration::from_secs(1)));
        let probe = SpeedProbe::start(PROBE_EVERY);
        let mut child =
            spawn_generator(&lab, "browsers", &spec_path, &info.namespaces.clients, &["--cgroup".as_ref(), cgroup.path.as_os_str()], &truth, dir)?;
        // Pageviews under way at the deadline may finish within the generator's tail (a failing
        // connection takes the profile's connect timeout); it cuts and counts those left and
        // reports. The lab kills it 5 s after that, a backstop (its figures are then missing,
        // and its arm's generator check fails).
        // The attacker starts with the browsers and sends from the end of their ramp to the end
        // of the run.
        let attacker = arm.attack.clone().map(|a| crate::attack::start(a, &info, arm.ramp_s(), arm.duration_s));
        let limit = Duration::from_secs_f64(arm.duration_s) + sim_clients::browser::tail(arm.profile) + Duration::from_secs(5);
        let waited = wait_or_kill(&mut child, limit);
        let machine_speed = probe.finish();
        let attack = attacker.map(|t| t.join().map_err(|_| anyhow::anyhow!("the attacker panicked"))?).transpose()?;
        let t_ran = t0.elapsed() - t_up;
        let farm_tcp = sampler.and_then(Sampler::finish);
        let rlm = rlm.map(Inline::stop).transpose()?;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        cap_thread.map(|t| t.join().map_err(|_| anyhow::anyhow!("capture thread panicked"))?).transpose()?;
        syn_thread.map(|t| t.join().map_err(|_| anyhow::anyhow!("capture thread panicked"))?).transpose()?;
        let mut usage = farm.usage();
        usage.load_cpu_s = usage.cpu_s - cpu_before;
        let wan = wan.as_mut().map(WanHop::finish).transpose()?;
        farm.stop();
        let farm_front = farm.front_report().map(|r| FrontSummary::of(&r));
        drop(cgroup);
        waited?;
        let server_syns = match syn_capture {
            Some(p) => {
                // The steady part: after the ramp and one connect timeout (a class whose SYNs
                // are refused offers them in synchronised waves until its first refused
                // connects have timed out), to the end of the run.
                let (from, to) = (spec.ramp_s + arm.profile.connect_timeout().as_secs_f64(), arm.duration_s);
                if to - from < 10.0 {
                    bail!("arm {}: {:.0} s is too short to count SYNs after the ramp and a connect timeout", arm.name, arm.duration_s);
                }
                let by_class = count_syns(&p, started + from, started + to)?;
                Some(ServerSyns { window_start_s: from, window_s: to - from, by_class, capture: p })
            }
            None => None,
        };

        let pvs = read_truth(&truth)?;
        // Where an arm's time goes: the lab up, the browsers (the run and the pageviews under way
        // at its end), the rest (stopping, captures read).
        eprintln!(
            "rlm-lab: arm {}: up {:.1} s, browsers {:.1} s ({:.0} s run), down {:.1} s",
            arm.name,
            t_up.as_secs_f64(),
            t_ran.as_secs_f64(),
            arm.duration_s,
            (t0.elapsed() - t_up - t_ran).as_secs_f64()
        );
        let (generator, bottleneck) = generator_stats(dir);
        let by_class = classes_of(&pvs).into_iter().map(|c| (c.clone(), pv_stats(pvs.iter().filter(|p| p.class == c)))).collect();
        let capture_fidelity = capture.as_deref().map(|c| fidelity::of_capture(c, port, &pvs, arm.profile.connect_timeout())).transpose()?;
        let (live_fidelity, live_fidelity_by_class) =
            match rlm.as_ref().and_then(|r| r.records.as_ref()).map(|r| fidelity::of_live(&r.pageviews, &pvs)) {
                Some(Ok((all, by_class))) => (Some(all), by_class),
                Some(Err(e)) => {
                    // The arm's other figures stand; its checks say the live figure is missing.
                    eprintln!("rlm-lab: arm {}: no live fidelity: {e:#}", arm.name);
                    (None, BTreeMap::new())
                }
                None => (None, BTreeMap::new()),
            };
        Ok(ArmResult {
            name: arm.name.clone(),
            config: arm.clone(),
            clients: arm.clients(),
            duration_s: arm.duration_s,
            pageviews: PageviewSummary { all: pv_stats(pvs.iter()), by_class },
            requests: None,
            generator,
            generator_bottleneck: bottleneck,
            farm_usage: usage,
            ground_truth: truth,
            capture,
            rlm,
            farm_front,
            server_syns,
            throughput: None,
            farm_tcp,
            timeline: timeline(&pvs, arm.duration_s),
            capture_fidelity,
            live_fidelity,
            live_fidelity_by_class,
            attack,
            windows: None,
            machine_speed: Some(machine_speed),
            wan,
        })
    })();
    plan.down()?;
    result
}

/// How the arm's clients speak HTTPS: the farm's authority, the arm's site and protocol; none
/// for HTTP.
fn tls_spec(arm: &ArmSpec, farm: &Farm) -> Result<Option<sim_clients::browser::TlsSpec>> {
    Ok(match (&arm.https, &farm.certs) {
        (Some(h), Some(c)) => Some(sim_clients::browser::TlsSpec { ca: c.ca.clone(), site: h.site.clone(), h2: h.h2 }),
        (Some(_), None) => anyhow::bail!("an HTTPS arm on a farm without TLS (farm.tls_sites is empty)"),
        _ => None,
    })
}

/// The arm's rlm; over HTTPS it watches the front's TLS `port` too, as an operator would list it.
fn rlm_arm(arm: &ArmSpec, port: u16) -> Option<crate::inline::RlmArm> {
    arm.rlm.clone().map(|mut r| {
        if arm.https.is_some() {
            r.extra_args.extend(["--server-ports".to_string(), port.to_string()]);
        }
        r
    })
}

/// rlm's live status page on the host while the arm runs, its address printed (`None`, said
/// why, if it cannot be published: the arm runs without it).
fn page_relay(appliance: &str, arm: &str) -> Option<crate::inline::PageRelay> {
    match crate::inline::PageRelay::start(appliance) {
        Ok(p) => {
            eprintln!("lab: arm {arm}: rlm's live status page is at {} until the arm ends", p.url());
            Some(p)
        }
        Err(e) => {
            eprintln!("lab: arm {arm}: rlm's status page cannot be published on the host: {e:#}");
            None
        }
    }
}

fn run_openloop(plan: &Plan, info: &crate::topology::Info, arm: &ArmSpec, ol: &OpenLoopArm, dir: &Path, lab: &Path) -> Result<ArmResult> {
    let files = file_sizes(&EmpiricalSizes::with_max(ol.max_file), ol.files, arm.seed);
    let farm_cfg = FarmConfig { files: files.clone(), ..arm.farm.clone() };
    let mut farm = Farm::start(plan, &farm_cfg, lab)?;
    match arm.rlm {
        Some(_) => plan.shape_link(ol.link_bps, ol.queue_packets)?,
        None => plan.shape_uplink(ol.link_bps, ol.queue_packets)?,
    }
    let mut wan = start_wan(plan, arm)?;
    let port = if ol.via_front { farm_cfg.front_port() } else { crate::farm::FILES_PORT };
    let rlm = rlm_arm(arm, port).as_ref().map(|r| Inline::start(&info.namespaces.appliance, r, dir, Duration::from_secs(10))).transpose()?;
    let _page = rlm.as_ref().map(|_| page_relay(&info.namespaces.appliance, &arm.name));
    let clients = info.clients.all().map(|a| a.parse().expect("address")).collect();
    let spec = OpenLoopSpec {
        server: format!("{FARM_ADDR}:{port}").parse()?,
        clients,
        files,
        link_bps: ol.rho_bps as f64,
        schedule: ol.schedule.clone(),
        duration_s: arm.duration_s,
        timeout_s: ol.timeout_s,
        max_in_flight: 4000,
        seed: arm.seed,
        tls: tls_spec(arm, &farm)?,
    };
    let spec_path = dir.join("openloop.json");
    std::fs::write(&spec_path, serde_json::to_vec(&spec)?)?;
    let records = dir.join("requests.jsonl");
    let sampler = farm.pid().map(|pid| Sampler::start(pid, port, Duration::from_secs(1)));
    let probe = SpeedProbe::start(PROBE_EVERY);
    let mut child = spawn_generator(lab, "openloop", &spec_path, &info.namespaces.clients, &[], &records, dir)?;
    let waited = wait_or_kill(&mut child, Duration::from_secs_f64(arm.duration_s + ol.timeout_s + 10.0));
    let machine_speed = probe.finish();
    let server = sampler.and_then(Sampler::finish).unwrap_or_default();
    // Where the queue formed: rlm's port (or the lab's shaped uplink; read before rlm exits and
    // takes its tree away) and the link downstream.
    let app = plan.qdisc_counts("app", "app-c")?;
    let down = plan.qdisc_counts("wan", "wan-c")?;
    let rlm = rlm.map(Inline::stop).transpose()?;
    let root = |q: &[(String, u64, u64)]| q.first().map_or((0, 0), |r| (r.1, r.2));
    let ((app_sent, app_dropped), (wan_sent, wan_dropped)) = (root(&app), root(&down));
    let leaves: Vec<serde_json::Value> =
        app.iter().skip(1).map(|(q, sent, dropped)| serde_json::json!({"qdisc": q, "sent_packets": sent, "dropped": dropped})).collect();
    let usage = farm.usage();
    let wan = wan.as_mut().map(WanHop::finish).transpose()?;
    farm.stop();
    waited?;
    let text = std::fs::read_to_string(&records)?;
    let recs: Vec<RequestRecord> = text.lines().filter(|l| !l.is_empty()).map(serde_json::from_str).collect::<Result<_, _>>()?;
    let (generator, over) = generator_stats(dir);
    let stats = RequestStats::of(&recs, ol.rho_bps as f64, arm.duration_s);
    let bottleneck = over || recs.iter().any(|r| r.error.as_deref() == Some("not_sent"));
    let mut requests = serde_json::to_value(&stats)?;
    requests["link"] = serde_json::json!({
        "appliance_port": {"sent_packets": app_sent, "dropped": app_dropped, "leaves": leaves},
        "downstream": {"sent_packets": wan_sent, "dropped": wan_dropped},
    });
    requests["server"] = serde_json::to_value(&server)?;
    Ok(ArmResult {
        name: arm.name.clone(),
        config: arm.clone(),
        clients: arm.clients(),
        duration_s: arm.duration_s,
        pageviews: PageviewSummary::default(),
        requests: Some(requests),
        generator,
        generator_bottleneck: bottleneck,
        farm_usage: usage,
        ground_truth: records,
        capture: None,
        rlm,
        farm_front: None,
        server_syns: None,
        throughput: None,
        farm_tcp: None,
        timeline: Vec::new(),
        capture_fidelity: None,
        live_fidelity: None,
        live_fidelity_by_class: BTreeMap::new(),
        attack: None,
        windows: None,
        machine_speed: Some(machine_speed),
        wan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet/IPv4/TCP frame with the given flags.
    fn frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 6;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[34 + 12] = 0x50;
        f[34 + 13] = flags;
        f
    }

    #[test]
    fn counts_syns_per_class_and_second() {
        let path = std::env::temp_dir().join(format!("rlm-lab-syns-{}.pcap", std::process::id()));
        let cap = pcap::Capture::dead(pcap::Linktype::ETHERNET).unwrap();
        let mut out = cap.savefile(&path).unwrap();
        let (farm, high, low) = ([10, 9, 0, 1], [10, 4, 0, 1], [10, 5, 0, 7]);
        let mut write = |t: f64, data: Vec<u8>| {
            let h = pcap::PacketHeader {
                ts: libc::timeval { tv_sec: t as i64, tv_usec: ((t.fract()) * 1e6) as i64 },
                caplen: data.len() as u32,
                len: data.len() as u32,
            };
            out.write(&pcap::Packet::new(&h, &data));
        };
        const SYN: u8 = 0x02;
        const SYNACK: u8 = 0x12;
        write(99.5, frame(low, farm, 1000, 80, SYN)); // before the window
        write(100.1, frame(low, farm, 1001, 80, SYN));
        write(100.2, frame(farm, low, 80, 1001, SYNACK));
        write(100.9, frame(low, farm, 1002, 80, SYN));
        write(103.0, frame(low, farm, 1002, 80, SYN)); // a retransmission: a packet, not a connection
        write(103.1, frame(farm, low, 80, 1002, SYNACK));
        write(101.5, frame(high, farm, 2000, 80, SYN));
        write(102.0, frame(high, farm, 2000, 80, SYN | 0x04)); // RST: not counted
        write(102.5, frame([10, 6, 0, 1], farm, 3000, 80, SYN)); // no class
        write(104.0, frame(low, farm, 1003, 80, SYN)); // at the window's end: out
        out.flush().unwrap();
        drop(out);
        let c = count_syns(&path, 100.0, 104.0).unwrap();
        let _ = std::fs::remove_file(&path);
        let low = &c["LOW"];
        assert_eq!((low.syns, low.connections, low.answered), (3, 2, 2));
        assert_eq!(low.per_second, vec![2, 0, 0, 1]);
        assert_eq!(low.syn_rate_per_s, 0.75);
        assert_eq!(c["HIGH"].syns, 1);
        assert_eq!(c["HIGH"].answered, 0);
    }
}
