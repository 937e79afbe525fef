//! `rlm-lab`: build and tear down the lab.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use testbed::topology::Plan;

#[derive(Parser)]
#[command(name = "rlm-lab", about = "The rlm lab: namespaces, farm, WAN emulation, experiments")]
struct Cli {
    /// Prefix of the namespace names.
    #[arg(long, default_value = "rlm", global = true)]
    prefix: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the topology (idempotent: an earlier one is removed first).
    Up {
        /// Print namespaces, addresses, bridge and port names as JSON.
        #[arg(long)]
        json: bool,
        /// Emulated browsers in the HIGH class (10.4.0.0/16), one address each.
        #[arg(long, default_value_t = 64)]
        high: u32,
        /// Emulated browsers in the LOW class (10.5.0.0/16), one address each.
        #[arg(long, default_value_t = 128)]
        low: u32,
    },
    /// Remove the topology and every process left in it (also after a crash).
    Down,
    /// Run an experiment: build the lab, run each arm, tear down, write result.json and report.md.
    Run {
        /// An experiment of docs/experiments.md (`make lab` runs them all). Arms running the
        /// appliance inline need the rlm binary next to rlm-lab (cargo build --release -p
        /// rlm) or RLM_BIN.
        name: String,
        /// Run only these arms (by name, comma-separated); the report covers only them.
        #[arg(long, value_delimiter = ',', value_name = "ARM")]
        arms: Vec<String>,
        /// Short runs (each experiment within about 3 minutes), as CI runs them.
        #[arg(long)]
        quick: bool,
        /// Where result.json, report.md and the plots go.
        #[arg(long)]
        out: std::path::PathBuf,
        /// The farm's calibration on this machine: read from FILE if it exists, else measured
        /// and written there (experiments run one after another share one). Without it, each
        /// experiment with a CPU-bound farm measures its own.
        #[arg(long, value_name = "FILE")]
        calibration: Option<std::path::PathBuf>,
    },
    /// The farm's front server (started by the lab inside the server namespace).
    #[command(hide = true)]
    FarmFront {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        max_clients: usize,
        #[arg(long)]
        backlog: i32,
        #[arg(long)]
        workers: usize,
        #[arg(long)]
        keepalive: f64,
        #[arg(long)]
        static_upstream: std::net::SocketAddr,
        #[arg(long)]
        db: String,
        /// Write the front's counters and per-request server times here when it stops.
        #[arg(long)]
        stats: Option<std::path::PathBuf>,
        /// HTTPS: the certificate (PEM) and its key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<std::path::PathBuf>,
        #[arg(long)]
        tls_key: Option<std::path::PathBuf>,
    },
    /// Run emulated browsers from a spec (started by the lab in the client namespace).
    #[command(hide = true)]
    Browsers {
        #[arg(long)]
        spec: std::path::PathBuf,
        #[arg(long)]
        netns: Option<String>,
        #[arg(long)]
        cgroup: Option<std::path::PathBuf>,
        #[arg(long)]
        out: std::path::PathBuf,
        #[arg(long)]
        stats: Option<std::path::PathBuf>,
    },
    /// Run the open-loop generator from a spec (started by the lab in the client namespace).
    #[command(hide = true)]
    Openloop {
        #[arg(long)]
        spec: std::path::PathBuf,
        #[arg(long)]
        netns: Option<String>,
        #[arg(long)]
        out: std::path::PathBuf,
        #[arg(long)]
        stats: Option<std::path::PathBuf>,
    },
    /// Measure what a pageview costs the farm on this machine (a short arm of browsers on a
    /// LAN) and write the calibration the experiments scale their farm's quota by to FILE.
    Calibrate {
        /// Where the calibration goes (JSON); the arm's files go beside it (FILE with `.d`).
        file: std::path::PathBuf,
    },
    /// Check quick experiments' results (DIR/NAME/result.json) against the papers' shapes.
    Check {
        dir: std::path::PathBuf,
        /// Only these experiments (comma-separated; default: every one).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// Run the WAN emulator on a running lab until interrupted (or for --seconds).
    Wan {
        /// A client group and its path: NET=RTTms,LOSS% or NET=RTTms,UP%,DOWN% (repeatable).
        #[arg(long = "group", required = true)]
        groups: Vec<sim_clients::wan::Group>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        seconds: Option<f64>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up { json, high, low } => {
            let plan = Plan { prefix: cli.prefix, high_clients: high, low_clients: low, ..Plan::default() };
            plan.up().and_then(|info| {
                if json {
                    println!("{}", serde_json::to_string_pretty(&info)?);
                } else {
                    println!(
                        "lab up: clients {} ({} HIGH, {} LOW) -> WAN {} -> appliance bridge {}/{} -> farm {} {}",
                        info.namespaces.clients,
                        high,
                        low,
                        info.namespaces.wan,
                        info.namespaces.appliance,
                        info.bridge.name,
                        info.namespaces.servers,
                        info.farm.address
                    );
                }
                Ok(())
            })
        }
        Command::Down => Plan { prefix: cli.prefix, ..Plan::default() }.down(),
        Command::Run { name, quick, out, arms, calibration } => testbed::catalog::run(&name, quick, &out, &cli.prefix, &arms, calibration.as_deref())
            .map(|report| {
                println!("{report}");
                println!("report: {}", out.join("report.md").display());
            }),
        Command::FarmFront { listen, max_clients, backlog, workers, keepalive, static_upstream, db, stats: stats_file, tls_cert, tls_key } => {
            let plan = Plan { prefix: cli.prefix, ..Plan::default() };
            testbed::netns::enter(&plan.ns("srv")).and_then(|_| {
                let tls = match (&tls_cert, &tls_key) {
                    (Some(c), Some(k)) => Some(sim_clients::tls::server_config(c, k)?),
                    _ => None,
                };
                let cfg = testbed::farm::front::FrontConfig {
                    tls,
                    listen,
                    max_clients,
                    backlog,
                    workers,
                    keepalive: std::time::Duration::from_secs_f64(keepalive),
                    static_upstream,
                    db,
                };
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
                rt.block_on(async {
                    let stats = std::sync::Arc::new(testbed::farm::front::FrontStats::default());
                    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                    testbed::farm::front::serve(cfg, stats.clone(), async move {
                        term.recv().await;
                    })
                    .await?;
                    if let Some(p) = stats_file {
                        std::fs::write(p, serde_json::to_vec(&stats.report())?)?;
                    }
                    Ok(())
                })
            })
        }
        Command::Browsers { spec, netns, cgroup, out, stats } => (|| {
            let run: sim_clients::browser::RunSpec = serde_json::from_slice(&std::fs::read(&spec)?)?;
            let st = sim_clients::browser::run_process(run, netns.as_deref(), cgroup.as_deref(), &out)?;
            if let Some(p) = stats {
                std::fs::write(p, serde_json::to_vec_pretty(&st)?)?;
            }
            Ok(())
        })(),
        Command::Openloop { spec, netns, out, stats } => (|| {
            let run: sim_clients::openloop::OpenLoopSpec = serde_json::from_slice(&std::fs::read(&spec)?)?;
            let st = sim_clients::openloop::run_process(run, netns.as_deref(), &out)?;
            if let Some(p) = stats {
                std::fs::write(p, serde_json::to_vec_pretty(&st)?)?;
            }
            Ok(())
        })(),
        Command::Calibrate { file } => {
            let _ = std::fs::remove_file(&file);
            testbed::calibrate::load_or_measure(&file, &cli.prefix, None)
                .map(|c| println!("{}", serde_json::to_string_pretty(&c).unwrap_or_default()))
        }
        Command::Check { dir, only } => {
            let names: Vec<&str> = if only.is_empty() { testbed::catalog::names() } else { only.iter().map(String::as_str).collect() };
            testbed::catalog::check(&dir, &names)
        }
        .and_then(|(ok, bad, notes)| {
            for l in &ok {
                println!("PASS {l}");
            }
            for l in &bad {
                println!("FAIL {l}");
            }
            for l in &notes {
                println!("NOTE {l}");
            }
            println!("{} passed, {} failed", ok.len(), bad.len());
            if bad.is_empty() {
                Ok(())
            } else {
                anyhow::bail!("{} lab checks failed", bad.len())
            }
        }),
        Command::Wan { groups, seed, seconds } => {
            let plan = Plan { prefix: cli.prefix, ..Plan::default() };
            testbed::wan::WanHop::start(&plan, groups, seed).and_then(|mut hop| {
                std::thread::sleep(std::time::Duration::from_secs_f64(seconds.unwrap_or(f64::MAX / 4.0).min(1e9)));
                let stats = hop.finish()?;
                println!("{}", serde_json::to_string(&stats)?);
                Ok(())
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rlm-lab: {e:#}");
            ExitCode::from(1)
        }
    }
}
