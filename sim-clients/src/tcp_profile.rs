//! The client operating system's TCP connect behaviour, per browser profile.
//!
//! The client's TCP is Linux's own; a profile only changes how it retries SYNs:
//! - `xp`: 3 s initial SYN timeout and 2 retries, as the Windows XP clients of the RLM paper
//!   (SYNs at 0, 3 and 9 s; the connection fails at 21 s);
//! - `linux`: 1 s and 6 retries (failure at 127 s).
//!
//! Three knobs make it: the initial timeout comes from a sock_ops program on the profile's
//! cgroup ([`crate::SynTimeout`]); the retry count is the socket's `TCP_SYNCNT`; and the
//! client namespace sets `net.ipv4.tcp_syn_linear_timeouts=0` so that the backoff is
//! exponential from the first retry (this kernel's default keeps 4 linear retries).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TcpProfile {
    Xp,
    Linux,
}

impl FromStr for TcpProfile {
    type Err = String;
    fn from_str(s: &str) -> Result<TcpProfile, String> {
        match s {
            "xp" => Ok(TcpProfile::Xp),
            "linux" => Ok(TcpProfile::Linux),
            _ => Err(format!("unknown TCP profile '{s}' (xp or linux)")),
        }
    }
}

impl TcpProfile {
    pub fn name(self) -> &'static str {
        match self {
            TcpProfile::Xp => "xp",
            TcpProfile::Linux => "linux",
        }
    }
    pub fn initial_syn_timeout(self) -> Duration {
        match self {
            TcpProfile::Xp => Duration::from_secs(3),
            TcpProfile::Linux => Duration::from_secs(1),
        }
    }
    pub fn syn_retries(self) -> u32 {
        match self {
            TcpProfile::Xp => 2,
            TcpProfile::Linux => 6,
        }
    }
    /// When the client's connect fails: the initial timeout doubled at each retry, summed.
    pub fn connect_timeout(self) -> Duration {
        let t = self.initial_syn_timeout();
        (0..=self.syn_retries()).map(|i| t * 2u32.pow(i)).sum()
    }
    /// Set the socket's SYN retry count (before connecting).
    pub fn apply<S: AsRawFd>(self, socket: &S) -> Result<()> {
        let n: libc::c_int = self.syn_retries() as libc::c_int;
        // SAFETY: a valid socket descriptor and an int option of the right size.
        let r = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_SYNCNT,
                &n as *const _ as *const libc::c_void,
                std::mem::size_of_val(&n) as libc::socklen_t,
            )
        };
        if r != 0 {
            bail!("TCP_SYNCNT: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Where the lab's cgroups (v2) go.
pub const CGROUP2_ROOT: &str = "/sys/fs/cgroup/unified";

/// A cgroup whose sockets get a profile's initial SYN timeout. Removed when dropped.
pub struct ProfileCgroup {
    pub path: PathBuf,
    pub profile: TcpProfile,
    _prog: Option<crate::SynTimeout>,
}

impl ProfileCgroup {
    /// Create `CGROUP2_ROOT/name` and attach the profile's timeout (Linux's own 1 s needs none).
    pub fn create(name: &str, profile: TcpProfile) -> Result<ProfileCgroup> {
        let path = Path::new(CGROUP2_ROOT).join(name);
        if !path.exists() {
            std::fs::create_dir(&path).with_context(|| format!("creating cgroup {}", path.display()))?;
        }
        let prog = match profile {
            TcpProfile::Linux => None,
            p => Some(crate::SynTimeout::attach(&path, p.initial_syn_timeout())?),
        };
        Ok(ProfileCgroup { path, profile, _prog: prog })
    }

    /// Move a process into the cgroup (0: the caller). Its sockets created from now on follow
    /// the profile.
    pub fn join(&self, pid: u32) -> Result<()> {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string()).with_context(|| format!("joining {}", self.path.display()))
    }

    /// How many sockets got the profile's timeout so far.
    pub fn answered(&self) -> u64 {
        self._prog.as_ref().and_then(|p| p.answered().ok()).unwrap_or(0)
    }
}

/// Move a process back to the root cgroup (so a profile's cgroup can be removed).
pub fn leave(pid: u32) -> Result<()> {
    std::fs::write(Path::new(CGROUP2_ROOT).join("cgroup.procs"), pid.to_string()).context("returning to the root cgroup")
}

impl Drop for ProfileCgroup {
    /// Detach the program, move any process still inside back to the root cgroup, remove it.
    fn drop(&mut self) {
        self._prog = None;
        if let Ok(procs) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
            for pid in procs.split_whitespace().filter_map(|p| p.parse().ok()) {
                let _ = leave(pid);
            }
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_timeouts() {
        assert_eq!(TcpProfile::Xp.connect_timeout(), Duration::from_secs(21));
        assert_eq!(TcpProfile::Linux.connect_timeout(), Duration::from_secs(127));
        assert_eq!("xp".parse::<TcpProfile>(), Ok(TcpProfile::Xp));
        assert!("win95".parse::<TcpProfile>().is_err());
    }
}
