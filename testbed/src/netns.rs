//! Running code inside a lab namespace.

use std::os::fd::AsRawFd;

use anyhow::{bail, Context, Result};

/// Move the calling thread into a named network namespace (for good: call it in a thread of
/// its own). Sockets it opens and processes it spawns live there.
pub fn enter(ns: &str) -> Result<()> {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).with_context(|| format!("namespace {ns}"))?;
    // SAFETY: setns with a valid namespace descriptor changes only this thread's namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns {ns}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}
