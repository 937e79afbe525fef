//! The WAN hop of a running lab: the emulator serving the WAN namespace's queue from a thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{anyhow, Result};
use sim_clients::wan::{serve, Group, ServeConfig, WanStats};

use crate::netns;
use crate::topology::Plan;

/// A running WAN emulator; stopped (and its iptables rule removed) by [`WanHop::stop`] or drop.
pub struct WanHop {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<WanStats>>>,
}

impl WanHop {
    /// Start the emulator in the plan's WAN namespace with these groups.
    pub fn start(plan: &Plan, groups: Vec<Group>, seed: u64) -> Result<WanHop> {
        let ns = plan.ns("wan");
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("rlm-wan".into()).spawn(move || {
            netns::enter(&ns)?;
            let cfg = ServeConfig { queue: 7, groups, seed, max_queue: 65_536, add_rule: true };
            let _ = ready_tx.send(());
            serve(&cfg, &flag)
        })?;
        // Wait for the thread to be in its namespace; then a moment for the queue and rule.
        let _ = ready_rx.recv_timeout(std::time::Duration::from_secs(5));
        let mut hop = WanHop { stop, thread: Some(thread) };
        std::thread::sleep(std::time::Duration::from_millis(100));
        if hop.thread.as_ref().is_some_and(|t| t.is_finished()) {
            return Err(hop.finish().err().unwrap_or_else(|| anyhow!("the WAN emulator stopped at once")));
        }
        Ok(hop)
    }

    /// Stop and return the counters.
    pub fn finish(&mut self) -> Result<WanStats> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| anyhow!("the WAN emulator panicked"))?,
            None => Err(anyhow!("already stopped")),
        }
    }
}

impl Drop for WanHop {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.finish();
        }
    }
}
