//! `rlm-wan`: the lab's WAN hop. Run inside the WAN namespace; it binds an NFQUEUE, adds the
//! iptables rule that sends every forwarded (bridged) packet to it, and gives each packet its
//! group's delay and loss. No `--queue-bypass`: if this process dies, traffic stops instead of
//! passing undelayed without a word. The rule is removed on SIGINT/SIGTERM.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use clap::Parser;
use sim_clients::wan::{serve, Group, ServeConfig};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

#[derive(Parser)]
#[command(name = "rlm-wan", about = "WAN delay and loss for the rlm lab, through NFQUEUE")]
struct Args {
    /// NFQUEUE number.
    #[arg(long, default_value_t = 7)]
    queue: u16,
    /// A client group and its path: NET=RTTms,LOSS% or NET=RTTms,UP%,DOWN% (repeatable).
    #[arg(long = "group", required = true)]
    groups: Vec<Group>,
    /// Seed of the loss decisions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Kernel queue length in packets (size it for rate × delay).
    #[arg(long, default_value_t = 65_536)]
    max_queue: u32,
    /// Do not add the iptables rule (it is managed by the caller).
    #[arg(long)]
    no_rule: bool,
    /// Write counters as JSON here on exit.
    #[arg(long)]
    stats: Option<std::path::PathBuf>,
}

fn run(args: Args) -> Result<()> {
    unsafe {
        libc::signal(libc::SIGINT, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
    let cfg = ServeConfig { queue: args.queue, groups: args.groups, seed: args.seed, max_queue: args.max_queue, add_rule: !args.no_rule };
    let stats = serve(&cfg, &STOP)?;
    if let Some(path) = &args.stats {
        std::fs::write(path, serde_json::to_vec_pretty(&stats)?)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rlm-wan: {e:#}");
            ExitCode::from(1)
        }
    }
}
