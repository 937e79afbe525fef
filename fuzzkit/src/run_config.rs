//! Arbitrary bytes as `rlm run`'s TOML configuration: reading and checking it must never panic,
//! and what it derives from a checked one (the SRPT rate, bands and floor, the writer's options)
//! neither.

use rlm::live::config::RunConfig;

/// The target: `data` as a configuration file.
pub fn run_config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(c) = RunConfig::parse(&text) else { return };
    let _ = c.writer_options();
    if c.validate().is_ok() {
        let s = &c.srpt;
        let _ = (s.rate_bps(), s.floor(), s.leaves(), s.state_path(&c.client_port));
    }
}
