//! The farm's CPU quota: a cgroup in the v1 `cpu` controller (this machine's cgroups are hybrid;
//! the cpu controller is v1 under /sys/fs/cgroup/cpu), with its twin in `cpuacct` to measure
//! the CPU time used.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

pub const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";
pub const CPUACCT_ROOT: &str = "/sys/fs/cgroup/cpuacct";

/// A cpu cgroup with a CFS quota, and optionally a cgroup v2 twin whose sockets get an initial
/// SYN/ACK timeout; removed when dropped (its processes must be gone).
pub struct CpuCgroup {
    pub path: PathBuf,
    pub acct: PathBuf,
    v2: Option<PathBuf>,
    syn: Option<sim_clients::SynTimeout>,
}

impl CpuCgroup {
    /// `cores`: CPU time allowed per wall-clock second (0.5 = half a core); None: no limit.
    pub fn create(name: &str, cores: Option<f64>) -> Result<CpuCgroup> {
        let path = PathBuf::from(CPU_ROOT).join(name);
        let acct = PathBuf::from(CPUACCT_ROOT).join(name);
        for p in [&path, &acct] {
            if !p.exists() {
                std::fs::create_dir(p).with_context(|| format!("creating {}", p.display()))?;
            }
        }
        let period = 100_000u64;
        std::fs::write(path.join("cpu.cfs_period_us"), period.to_string())?;
        let quota = cores.map(|c| ((c * period as f64) as i64).max(1000)).unwrap_or(-1);
        std::fs::write(path.join("cpu.cfs_quota_us"), quota.to_string()).context("setting cpu.cfs_quota_us")?;
        Ok(CpuCgroup { path, acct, v2: None, syn: None })
    }

    /// Give the sockets of the processes that join an initial SYN(/ACK) retransmission timeout
    /// (a listener's SYN/ACKs follow its cgroup's sock_ops program).
    pub fn with_syn_timeout(mut self, name: &str, timeout: std::time::Duration) -> Result<CpuCgroup> {
        let v2 = PathBuf::from(sim_clients::tcp_profile::CGROUP2_ROOT).join(name);
        if !v2.exists() {
            std::fs::create_dir(&v2).with_context(|| format!("creating {}", v2.display()))?;
        }
        self.syn = Some(sim_clients::SynTimeout::attach(&v2, timeout)?);
        self.v2 = Some(v2);
        Ok(self)
    }

    /// Have a command's process join the cgroup before it runs (its children follow).
    pub fn join_on_spawn(&self, cmd: &mut Command) {
        let mut procs = vec![self.path.join("cgroup.procs"), self.acct.join("cgroup.procs")];
        procs.extend(self.v2.as_ref().map(|p| p.join("cgroup.procs")));
        // SAFETY: between fork and exec the closure only writes a few files.
        unsafe {
            cmd.pre_exec(move || {
                for p in &procs {
                    std::fs::write(p, "0")?;
                }
                Ok(())
            });
        }
    }

    /// CPU time used by the cgroup so far, in seconds.
    pub fn usage_s(&self) -> f64 {
        std::fs::read_to_string(self.acct.join("cpuacct.usage"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|ns| ns as f64 / 1e9)
            .unwrap_or(f64::NAN)
    }

    /// Times the quota throttled the cgroup, and for how long (s), from cpu.stat.
    pub fn throttled(&self) -> (u64, f64) {
        let stat = std::fs::read_to_string(self.path.join("cpu.stat")).unwrap_or_default();
        let get = |k: &str| stat.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.trim().parse::<u64>().ok())).unwrap_or(0);
        (get("nr_throttled "), get("throttled_time ") as f64 / 1e9)
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.path);
        let _ = std::fs::remove_dir(&self.acct);
        self.syn = None;
        if let Some(v2) = &self.v2 {
            let _ = std::fs::remove_dir(v2);
        }
    }
}
