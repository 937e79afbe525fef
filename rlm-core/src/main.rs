//! `rlm`: the appliance's command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod commands;

use rlm_core::analyze::{self, AnalyzeOptions};
use rlm_core::Config;

#[derive(Parser)]
#[command(name = "rlm", version, about = "Remote latency-based management of a web server farm, from packets")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sit inline on a bridge: queue SYNs and SYN/ACKs, measure pageviews from a tap, enforce the rule file.
    ///
    /// Installs its netfilter rules (removed on SIGINT/SIGTERM; bypassed if rlm dies), serves
    /// Prometheus /metrics and /status on localhost, and reloads the rule file on SIGHUP.
    /// Exit status: 0 stopped by a signal; 1 failed (before installing anything if the bridge,
    /// the rule file or the privileges are wrong); 2 a usage error.
    Run(commands::RunArgs),
    /// Check rule files: print a summary of each, or its errors (FILE:LINE:COL, the line, a caret).
    ///
    /// Exit status: 0 all valid; 1 one is not; 2 a usage error.
    Check {
        /// The rule files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<std::ffi::OsString>,
    },
    /// Print what a running rlm says about itself (its classes, their response times, the rules firing).
    Status {
        /// Where it serves /status.
        #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
        metrics: std::net::SocketAddr,
    },
    /// Rebuild transactions and pageviews from a capture file (pcap or pcapng).
    Analyze {
        /// The capture file.
        capture: PathBuf,
        /// Write one JSON object per transaction to this file.
        #[arg(long)]
        transactions: Option<PathBuf>,
        /// Write one JSON object per pageview to this file.
        #[arg(long)]
        pageviews: Option<PathBuf>,
        /// A port the web servers listen on (repeatable). Default: any port, HTTP detected from its first bytes.
        #[arg(long = "server-port")]
        server_ports: Vec<u16>,
        /// The clients' connect timeout charged to a failed connection, in seconds (004: 21 s, Windows XP).
        #[arg(long, default_value_t = 21.0)]
        connect_timeout: f64,
        /// Do not show a progress bar.
        #[arg(long)]
        quiet: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => commands::run(args),
        Command::Check { files } => ExitCode::from(rules::check_command(files, &mut std::io::stdout(), &mut std::io::stderr())),
        Command::Status { metrics } => commands::status(metrics),
        Command::Analyze { capture, transactions, pageviews, server_ports, connect_timeout, quiet } => {
            let mut config = Config { server_ports, ..Config::default() };
            if !(connect_timeout.is_finite() && connect_timeout > 0.0) {
                eprintln!("rlm: --connect-timeout must be a positive number of seconds");
                return ExitCode::from(2);
            }
            config.pageview.connect_timeout = Duration::from_secs_f64(connect_timeout);
            match analyze::run(AnalyzeOptions { capture, transactions, pageviews, config, progress: !quiet }) {
                Ok(summary) => {
                    print!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("rlm: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
