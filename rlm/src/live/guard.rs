//! The guard: a process of its own that cleans up after `rlm run` when rlm cannot.
//!
//! A SIGKILL, an abort or the OOM killer ends rlm without running any of its code: no `Drop`,
//! no removal. Before it installs anything (and before it drops its capabilities), `rlm run`
//! starts `/proc/self/exe guard --plan JSON` ([`Guard::spawn`]) with the read end of a pipe as
//! its standard input, and keeps the write end. The guard puts itself in a session of its own,
//! ignores SIGINT, SIGTERM and SIGHUP, and blocks reading that pipe ([`main`]):
//!
//! - at a clean exit rlm writes [`DISARM`] once its own removal succeeded ([`Guard::disarm`]) and
//!   waits for the guard to exit: it exits without touching anything;
//! - when rlm dies any other way the kernel closes rlm's end and the guard reads EOF without the
//!   disarm byte: it runs [`cleanup::cleanup`] (the same as every start of `rlm run`: rlm's tc
//!   filters, its HTB tree, its queue rules) and exits.
//!
//! The guard inherits no descriptor of rlm's but its standard error (its log goes where rlm's
//! does): every other one is closed at its exec, so that it holds neither the NFQUEUE socket (the
//! kernel's bypass needs it closed) nor a tcx link (they must go with rlm).

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tracing::{info, warn};

use super::cleanup::{self, CleanupPlan};

/// What rlm writes to its guard at a clean exit.
pub const DISARM: u8 = b'D';

/// How long rlm waits for its guard to exit.
const WAIT: Duration = Duration::from_secs(2);

/// rlm's side of its guard: the write end of the guard's standard input. Dropped without
/// [`Guard::disarm`] (a panic unwinding, an error return), the guard cleans up.
pub struct Guard {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Guard {
    /// Start the guard for `plan`. Call it before installing anything, with the capabilities
    /// the cleanup needs (CAP_NET_ADMIN, CAP_NET_RAW): the guard keeps them.
    pub fn spawn(plan: &CleanupPlan, log_json: bool) -> Result<Guard> {
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("rlm").arg("guard").arg("--plan").arg(serde_json::to_string(plan)?);
        if log_json {
            cmd.arg("--log-json");
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::inherit());
        // SAFETY: only async-signal-safe calls between fork and exec: close_range(2), setsid(2),
        // signal(2).
        unsafe {
            cmd.pre_exec(|| {
                // Every descriptor past standard error is closed at exec: some of rlm's are not
                // close-on-exec (the nfq crate's NFQUEUE socket), and the guard must hold none.
                if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Out of rlm's session and process group, deaf to the signals that stop rlm
                // (ignored dispositions survive exec): from its first instruction on.
                libc::setsid();
                for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(s, libc::SIG_IGN);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().context("cannot start rlm's guard process (/proc/self/exe guard)")?;
        let pipe = child.stdin.take();
        Ok(Guard { child, pipe })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// rlm removed what it installed: the guard exits without cleaning. Waits for it (bounded).
    pub fn disarm(mut self) {
        if let Some(mut p) = self.pipe.take() {
            if let Err(e) = p.write_all(&[DISARM]) {
                warn!("the guard process is gone ({e}); nothing was left for it to remove");
            }
        }
        self.wait();
    }

    /// Wait for the guard to exit, at most [`WAIT`].
    fn wait(&mut self) {
        let until = Instant::now() + WAIT;
        while Instant::now() < until {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                _ => return,
            }
        }
        warn!(pid = self.child.id(), "the guard process has not exited yet");
    }
}

impl Drop for Guard {
    /// Not disarmed: closing the pipe makes the guard clean up; wait for it, so that what rlm
    /// installed is gone when rlm exits.
    fn drop(&mut self) {
        if self.pipe.take().is_some() {
            self.wait();
        }
    }
}

/// `rlm guard --plan JSON` (hidden; `rlm run` starts it): wait for rlm's end of standard input
/// to close, then clean up unless rlm disarmed it first.
pub fn main(plan: &str) -> ExitCode {
    let plan: CleanupPlan = match serde_json::from_str(plan) {
        Ok(p) => p,
        Err(e) => {
            warn!("rlm guard: bad --plan: {e}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: setsid(2), signal(2) and prctl(2) with constant arguments (the first two already
    // done before exec when rlm run started it; harmless again).
    unsafe {
        // `ps` and `pgrep` show it as rlm-guard, not as the `exe` of /proc/self/exe.
        libc::prctl(libc::PR_SET_NAME, c"rlm-guard".as_ptr() as libc::c_ulong, 0, 0, 0);
        libc::setsid();
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(s, libc::SIG_IGN);
        }
    }
    let rlm = std::os::unix::process::parent_id();
    let _ = std::env::set_current_dir("/");
    // The OOM killer takes rlm, never its guard (where it may lower its score: CAP_SYS_RESOURCE),
    // and the guard keeps what the cleanup needs and nothing more.
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    if let Err(e) = super::drop_capabilities() {
        warn!("rlm guard: keeping its capabilities: {e:#}");
    }
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if buf[..n].contains(&DISARM) => return ExitCode::SUCCESS,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                warn!("rlm guard: reading from rlm: {e}; cleaning up");
                break;
            }
        }
    }
    let t = Instant::now();
    let c = cleanup::cleanup(&plan);
    let ms = format!("{:.0}", t.elapsed().as_secs_f64() * 1e3);
    if c.is_empty() {
        // An error return: what rlm installed was removed on the way out.
        info!(rlm, ms, "rlm exited without disarming its guard; nothing of rlm's was left");
        return ExitCode::SUCCESS;
    }
    warn!(rlm, ms, "rlm ended without a clean exit; its guard: {}", c.summary(&plan));
    if c.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guard's protocol on a stand-in child (`cat` holding a pipe): disarm writes the byte
    /// and closes; a drop closes without it.
    #[test]
    fn disarm_writes_the_byte_and_waits() {
        let mut child = Command::new("sh").args(["-c", "od -An -c"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let pipe = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let g = Guard { child, pipe };
        let t = Instant::now();
        g.disarm();
        assert!(t.elapsed() < WAIT);
        let mut s = String::new();
        std::io::BufReader::new(out).read_to_string(&mut s).unwrap();
        assert_eq!(s.trim(), "D");
        let mut child = Command::new("sh").args(["-c", "od -An -c"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let pipe = child.stdin.take();
        let out = child.stdout.take().unwrap();
        drop(Guard { child, pipe });
        let mut s = String::new();
        std::io::BufReader::new(out).read_to_string(&mut s).unwrap();
        assert_eq!(s.trim(), "", "EOF without the byte");
    }
}
