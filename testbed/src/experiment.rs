//! Experiments: build the lab, run each arm, tear down, summarise from the ground truth.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sim_clients::browser::{BrowserSpec, GeneratorStats, GroundTruth, RunSpec};
use sim_clients::dist::EmpiricalSizes;
use sim_clients::openloop::{file_sizes, OpenLoopSpec, RequestRecord, RequestStats, Schedule};
use sim_clients::tcp_profile::{ProfileCgroup, TcpProfile};
use sim_clients::wan::Group;

use crate::farm::site::PageType;
pub use crate::inline::RlmArm;
use crate::inline::{Inline, RlmOutcome};
use crate::farm::{Farm, FarmConfig, FarmUsage, FRONT_PORT};
use crate::topology::{Plan, FARM_ADDR};
use crate::wan::WanHop;

/// One arm of an experiment.
#[derive(Clone, Debug, Serialize)]
pub struct ArmSpec {
    pub name: String,
    pub high_clients: u32,
    pub low_clients: u32,
    pub think_mean_s: f64,
    pub duration_s: f64,
    /// WAN paths per client group; empty: no WAN hop (a LAN).
    pub wan: Vec<String>,
    pub profile: TcpProfile,
    pub farm: FarmConfig,
    /// Capture the appliance's server-side port for the passive measurement.
    pub capture: bool,
    pub seed: u64,
    /// An open-loop arm (the SRPT experiments) instead of browsers.
    pub openloop: Option<OpenLoopArm>,
    /// Run the appliance inline (`rlm run` on the appliance's bridge) with these rules.
    pub rlm: Option<RlmArm>,
}

/// The open-loop load of an arm: Poisson arrivals at a load of a shaped uplink.
#[derive(Clone, Debug, Serialize)]
pub struct OpenLoopArm {
    pub schedule: Schedule,
    /// The appliance's client-side port is shaped to this rate (the farm's uplink).
    pub link_bps: u64,
    /// Packets the uplink's FIFO holds.
    pub queue_packets: u32,
    /// Distinct files, sized at the quantiles of 001 Table 1 bounded at `max_file` bytes.
    pub files: usize,
    pub max_file: f64,
    pub timeout_s: f64,
}

pub use crate::stats::PvStats;

/// Statistics of ground-truth pageviews; a pageview counts as failed if its container or any
/// of its connections failed.
pub fn pv_stats<'a>(pvs: impl Iterator<Item = &'a GroundTruth>) -> PvStats {
    let pvs: Vec<&GroundTruth> = pvs.collect();
    let rts: Vec<f64> = pvs.iter().map(|p| p.rt_s).collect();
    PvStats::of(&rts, pvs.iter().filter(|p| p.failed || p.failed_connections > 0).count())
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PageviewSummary {
    #[serde(flatten)]
    pub all: PvStats,
    pub by_class: BTreeMap<String, PvStats>,
}

/// What one arm measured.
#[derive(Clone, Debug, Serialize)]
pub struct ArmResult {
    pub name: String,
    pub config: ArmSpec,
    pub clients: u32,
    pub duration_s: f64,
    pub pageviews: PageviewSummary,
    /// Open-loop request statistics (the SRPT experiments); null for browser arms.
    pub requests: Option<serde_json::Value>,
    pub generator: GeneratorStats,
    /// The load generator, not the farm or the link, limited the run.
    pub generator_bottleneck: bool,
    pub farm_usage: FarmUsage,
    pub ground_truth: PathBuf,
    pub capture: Option<PathBuf>,
    /// The appliance inline: how it ran and stopped, and what it reported.
    pub rlm: Option<RlmOutcome>,
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

/// Capture a port of the appliance to a pcap file until `stop` is set.
fn start_capture(ns: String, dev: &'static str, path: PathBuf, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<Result<u64>> {
    std::thread::spawn(move || {
        crate::netns::enter(&ns)?;
        let mut cap = pcap::Capture::from_device(dev)?.immediate_mode(true).snaplen(65535).buffer_size(64 << 20).open()?.setnonblock()?;
        cap.filter(&format!("tcp port {FRONT_PORT}"), true)?;
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
    let plan = Plan { prefix: prefix.to_string(), high_clients: arm.high_clients, low_clients: arm.low_clients };
    let info = plan.up()?;
    let result = (|| -> Result<ArmResult> {
        if let Some(ol) = &arm.openloop {
            return run_openloop(&plan, &info, arm, ol, dir, &lab);
        }
        let mut farm = Farm::start(&plan, &arm.farm, &lab)?;
        let mut wan = start_wan(&plan, arm)?;
        let cgroup = ProfileCgroup::create(&format!("{prefix}-{}", arm.profile.name()), arm.profile)?;

        let mut browsers: Vec<BrowserSpec> = info.clients.high.iter().map(|a| BrowserSpec { addr: a.parse().expect("address"), class: "HIGH".into() }).collect();
        browsers.extend(info.clients.low.iter().map(|a| BrowserSpec { addr: a.parse().expect("address"), class: "LOW".into() }));
        let spec = RunSpec {
            server: format!("{FARM_ADDR}:{FRONT_PORT}").parse()?,
            browsers,
            think_mean_s: arm.think_mean_s,
            duration_s: arm.duration_s,
            ramp_s: arm.think_mean_s.min(arm.duration_s / 4.0),
            seed: arm.seed,
            profile: arm.profile,
            pages: tpcw_pages(),
            items: arm.farm.items,
        };
        let spec_path = dir.join("browsers.json");
        std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec)?)?;
        let truth = dir.join("ground-truth.jsonl");

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let capture = arm.capture.then(|| dir.join("appliance-server-port.pcap"));
        let cap_thread = capture.as_ref().map(|p| start_capture(info.namespaces.appliance.clone(), "app-s", p.clone(), stop.clone()));
        std::thread::sleep(Duration::from_millis(200));
        let rlm = arm.rlm.as_ref().map(|r| Inline::start(&info.namespaces.appliance, r, dir, Duration::from_secs(10))).transpose()?;

        let mut child = spawn_generator(&lab, "browsers", &spec_path, &info.namespaces.clients, &["--cgroup".as_ref(), cgroup.path.as_os_str()], &truth, dir)?;
        // Pageviews under way at the deadline finish (a failing connection takes the profile's
        // connect timeout), then whatever is left is cut.
        let limit = Duration::from_secs_f64(arm.duration_s) + arm.profile.connect_timeout() + Duration::from_secs(10);
        let waited = wait_or_kill(&mut child, limit);
        let rlm = rlm.map(Inline::stop).transpose()?;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        cap_thread.map(|t| t.join().map_err(|_| anyhow::anyhow!("capture thread panicked"))?).transpose()?;
        let usage = farm.usage();
        if let Some(w) = wan.as_mut() {
            w.finish()?;
        }
        farm.stop();
        drop(cgroup);
        waited?;

        let pvs = read_truth(&truth)?;
        let (generator, bottleneck) = generator_stats(dir);
        let mut by_class = BTreeMap::new();
        for class in ["HIGH", "LOW"] {
            if pvs.iter().any(|p| p.class == class) {
                by_class.insert(class.to_string(), pv_stats(pvs.iter().filter(|p| p.class == class)));
            }
        }
        Ok(ArmResult {
            name: arm.name.clone(),
            config: arm.clone(),
            clients: arm.high_clients + arm.low_clients,
            duration_s: arm.duration_s,
            pageviews: PageviewSummary { all: pv_stats(pvs.iter()), by_class },
            requests: None,
            generator,
            generator_bottleneck: bottleneck,
            farm_usage: usage,
            ground_truth: truth,
            capture,
            rlm,
        })
    })();
    plan.down()?;
    result
}

fn run_openloop(plan: &Plan, info: &crate::topology::Info, arm: &ArmSpec, ol: &OpenLoopArm, dir: &Path, lab: &Path) -> Result<ArmResult> {
    let files = file_sizes(&EmpiricalSizes::with_max(ol.max_file), ol.files, arm.seed);
    let farm_cfg = FarmConfig { files: files.clone(), ..arm.farm.clone() };
    let mut farm = Farm::start(plan, &farm_cfg, lab)?;
    plan.shape_uplink(ol.link_bps, ol.queue_packets)?;
    let mut wan = start_wan(plan, arm)?;
    let clients = info.clients.high.iter().chain(info.clients.low.iter()).map(|a| a.parse().expect("address")).collect();
    let spec = OpenLoopSpec {
        server: format!("{FARM_ADDR}:{}", crate::farm::FILES_PORT).parse()?,
        clients,
        files,
        link_bps: ol.link_bps as f64,
        schedule: ol.schedule.clone(),
        duration_s: arm.duration_s,
        timeout_s: ol.timeout_s,
        max_in_flight: 4000,
        seed: arm.seed,
    };
    let spec_path = dir.join("openloop.json");
    std::fs::write(&spec_path, serde_json::to_vec(&spec)?)?;
    let records = dir.join("requests.jsonl");
    let mut child = spawn_generator(lab, "openloop", &spec_path, &info.namespaces.clients, &[], &records, dir)?;
    let waited = wait_or_kill(&mut child, Duration::from_secs_f64(arm.duration_s + ol.timeout_s + 10.0));
    let usage = farm.usage();
    if let Some(w) = wan.as_mut() {
        w.finish()?;
    }
    farm.stop();
    waited?;
    let text = std::fs::read_to_string(&records)?;
    let recs: Vec<RequestRecord> = text.lines().filter(|l| !l.is_empty()).map(serde_json::from_str).collect::<Result<_, _>>()?;
    let (generator, over) = generator_stats(dir);
    let stats = RequestStats::of(&recs, ol.link_bps as f64, arm.duration_s);
    let bottleneck = over || recs.iter().any(|r| r.error.as_deref() == Some("not_sent"));
    Ok(ArmResult {
        name: arm.name.clone(),
        config: arm.clone(),
        clients: arm.high_clients + arm.low_clients,
        duration_s: arm.duration_s,
        pageviews: PageviewSummary::default(),
        requests: Some(serde_json::to_value(&stats)?),
        generator,
        generator_bottleneck: bottleneck,
        farm_usage: usage,
        ground_truth: records,
        capture: None,
        rlm: None,
    })
}

/// Read a ground-truth file.
pub fn read_truth(path: &Path) -> Result<Vec<GroundTruth>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).map_err(Into::into)).collect()
}
