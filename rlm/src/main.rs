//! `rlm`: the appliance's command line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod commands;

use rlm::analyze::{self, AnalyzeOptions, UsageError};
use rlm_core::Config;

/// mimalloc: `rlm run` allocates per connection and transaction on its one thread, and glibc's
/// malloc showed as a third of its CPU in a profile under 20 k connections/s.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "rlm", version, about = "Remote latency-based management of a web server farm, from packets")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sit inline on a bridge: measure pageviews from the kernel fast path, decide the clients' SYNs, enforce the rule file.
    ///
    /// Attaches its eBPF programs to the bridge's ports (or, with observer = "pcap", queues the
    /// SYNs and measures from a tap); installs netfilter queue rules only when SYNs are queued
    /// or the rules in force need the queue (removed on SIGINT/SIGTERM, on a panic, and by its
    /// guard process if rlm is killed; bypassed meanwhile), serves
    /// Prometheus /metrics and /status on localhost, and writes --transactions, --pageviews and
    /// --decisions as JSON lines (the records of `rlm analyze`). SIGHUP reopens those files
    /// (after logrotate) and reloads the rule file if it changed.
    /// Exit status: 0 stopped by a signal; 1 failed (before installing anything if the bridge,
    /// the rule file or the privileges are wrong); 2 a usage error (outputs are refused, before
    /// anything is opened, when one is the rule file, the configuration or another output).
    Run(commands::RunArgs),
    /// Remove what an `rlm run` that did not exit cleanly left on its bridge.
    ///
    /// Its tc filters on either port (`syn_admit`, `observe`, `classify`, `srpt_acks`: left on
    /// the clsact path), its HTB qdisc on the client port (`7e1:`) and its netfilter rules,
    /// whatever that run's configuration was. `rlm run` does the same at every start, and its
    /// guard process when rlm dies; this is for systemd's `ExecStopPost=` (a stop that killed
    /// rlm and its guard together). Do not run it beside a running rlm on the same bridge.
    /// Exit status: 0 nothing left (removed or none found); 1 something could not be removed;
    /// 2 a usage error.
    Cleanup(commands::CleanupArgs),
    /// rlm run's guard process (rlm run starts it: see rlm/src/live/guard.rs).
    #[command(hide = true)]
    Guard {
        /// What to clean up, as JSON (`live::cleanup::CleanupPlan`).
        #[arg(long)]
        plan: String,
        #[arg(long)]
        log_json: bool,
    },
    /// Write rlm's man pages (rlm.1 and one per command, rlm-run.1 ...) into a directory (the
    /// Debian package's are made so: `make deb`).
    #[command(hide = true)]
    Man {
        /// Where to write them.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
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
        /// The file holding its token (its `status_token_file`), when it asks for one.
        #[arg(long, value_name = "FILE")]
        token_file: Option<std::path::PathBuf>,
    },
    /// Watch a running rlm in the terminal: its classes' response times, its rules firing, its
    /// data path and its slowest open pageviews, once a second (q quits).
    Top {
        /// Where it serves its status page.
        #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
        metrics: std::net::SocketAddr,
        /// The file holding its token (its `status_token_file`), when it asks for one.
        #[arg(long, value_name = "FILE")]
        token_file: Option<std::path::PathBuf>,
        /// Print one screen as text and exit.
        #[arg(long)]
        once: bool,
    },
    /// Rebuild transactions and pageviews from a capture (pcap or pcapng, plain, gzip or zstd).
    ///
    /// Prints a summary: frames, connections, transactions and pageviews, with those cut off by
    /// the end of the capture counted apart and left out of the response-time statistics (mean,
    /// p50, p95, p99, share over 3 s, histogram). Outputs are refused, before anything is opened,
    /// when one is the capture itself or two are the same file (through links or other spellings).
    ///
    /// Exit status: 0 done; 1 the capture could not be read, or was cut short (the summary of what
    /// was read is still printed and every output written); 2 a usage error.
    #[command(
        after_help = "Examples:\n  rlm analyze capture.pcapng.zst --pageviews pv.jsonl --summary-json summary.json\n  tcpdump -i eth0 -w - 'tcp port 80' | rlm analyze - --transactions - > tx.jsonl"
    )]
    Analyze {
        /// The capture file, or `-` for standard input. Compression (gzip, zstd) is recognised by its magic bytes.
        capture: PathBuf,
        /// Write one JSON object per transaction to this file (`-`: standard output).
        #[arg(long, value_name = "FILE")]
        transactions: Option<PathBuf>,
        /// Write one JSON object per pageview to this file (`-`: standard output).
        #[arg(long, value_name = "FILE")]
        pageviews: Option<PathBuf>,
        /// Write the summary as one JSON object to this file (`-`: standard output).
        #[arg(long = "summary-json", value_name = "FILE")]
        summary_json: Option<PathBuf>,
        /// A port the web servers listen on (repeatable). Default: any port, HTTP detected from its first bytes.
        #[arg(long = "server-port", value_name = "PORT")]
        server_ports: Vec<u16>,
        /// The clients' connect timeout charged to a failed connection, in seconds (004: 21 s, Windows XP).
        #[arg(long, default_value_t = 21.0, value_name = "SECONDS")]
        connect_timeout: f64,
        /// Do not show a progress bar.
        #[arg(long)]
        quiet: bool,
        /// Replay a rule file over the capture (what-if): when each rule would have fired, what it
        /// would have done to which connections, and the class response times over time.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
        /// Write each decision the rules would have taken as a JSON line (`-`: standard output).
        #[arg(long, value_name = "FILE", requires = "rules")]
        decisions: Option<PathBuf>,
        /// Write one JSON object per TLS connection, with Zeek's ssl.log fields (`-`: standard output).
        #[arg(long, value_name = "FILE")]
        tls: Option<PathBuf>,
        /// Engines run side by side, each on a thread of its own and each given every frame of
        /// its clients (default: one per core; with --rules always one, as the rules read
        /// statistics over all clients). Records come in the same order for the same number of
        /// engines, time-ordered within each engine's clients.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
        engines: Option<u16>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => commands::run(args),
        Command::Cleanup(args) => commands::cleanup(args),
        Command::Guard { plan, log_json } => commands::guard(&plan, log_json),
        Command::Check { files } => ExitCode::from(rules::check_command(files, &mut std::io::stdout(), &mut std::io::stderr())),
        Command::Man { dir } => match man_pages(&dir) {
            Ok(n) => {
                println!("{n} man pages in {}", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rlm man: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Status { metrics, token_file } => commands::status(metrics, token_file.as_deref()),
        Command::Top { metrics, token_file, once } => {
            let run = || -> anyhow::Result<()> {
                let token = token_file.as_deref().map(rlm::live::metrics::read_token).transpose()?;
                rlm::top::run(metrics, token, once)
            };
            match run() {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rlm top: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Analyze { capture, transactions, pageviews, summary_json, server_ports, connect_timeout, quiet, rules, decisions, tls, engines } => {
            let rules = match rules.as_deref().map(rules::check_file).transpose() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let mut config = Config { server_ports, ..Config::default() };
            if !(connect_timeout.is_finite() && connect_timeout > 0.0) {
                eprintln!("rlm: --connect-timeout must be a positive number of seconds");
                return ExitCode::from(2);
            }
            config.pageview.connect_timeout = Duration::from_secs_f64(connect_timeout);
            let engines = engines.map(usize::from);
            match analyze::run(AnalyzeOptions {
                capture,
                transactions,
                pageviews,
                summary_json,
                config,
                progress: !quiet,
                rules,
                decisions,
                tls,
                engines,
            }) {
                Ok(report) => {
                    // With an output on standard output, the summary keeps out of its way.
                    let text = report.summary.text();
                    let _ = if report.summary_to_stderr {
                        std::io::stderr().write_all(text.as_bytes())
                    } else {
                        std::io::stdout().write_all(text.as_bytes())
                    };
                    if report.summary.cut.is_some() {
                        ExitCode::from(1)
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    // One line: the chain of causes joined.
                    eprintln!("rlm: {}", format!("{e:#}").replace('\n', " "));
                    ExitCode::from(if e.is::<UsageError>() { 2 } else { 1 })
                }
            }
        }
    }
}

/// rlm.1 and a page per visible command (rlm-run.1, ...), from the command line's own help
/// (clap_mangen), into `dir`; how many were written.
fn man_pages(dir: &std::path::Path) -> anyhow::Result<usize> {
    use clap::CommandFactory;
    std::fs::create_dir_all(dir)?;
    let cli = Cli::command();
    let mut n = 0;
    let mut write = |name: &str, cmd: clap::Command| -> anyhow::Result<()> {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        std::fs::write(dir.join(format!("{name}.1")), out)?;
        n += 1;
        Ok(())
    };
    for sub in cli.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("rlm-{}", sub.get_name());
        // A one-shot command: the page's name is leaked, clap's names being 'static without its `string` feature.
        let page = sub.clone().name(&*Box::leak(name.clone().into_boxed_str()));
        write(&name, page)?;
    }
    write("rlm", cli)?;
    Ok(n)
}
