//! Running code inside a lab namespace (the namespace helpers are `lab-netns`'s, shared with the
//! tests of the other crates).

use anyhow::Result;

pub use lab_netns::{is_root, sh};

/// Move the calling thread into a named network namespace (for good: call it in a thread of
/// its own). Sockets it opens and processes it spawns live there.
pub fn enter(ns: &str) -> Result<()> {
    Ok(lab_netns::enter(ns)?)
}
