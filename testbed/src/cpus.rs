//! Which CPUs the lab's processes may run on: an appliance arm on a core of its own, as a real
//! box has, with the load (clients, servers, the lab's own threads) on the others.
//!
//! On this two-core machine the load and `rlm run` otherwise share both cores, so whatever CPU
//! rlm spends is taken from wrk and nginx, and a sample's rate measures the co-located load as
//! much as the appliance's data path ([`crate::throughput`]).

use std::io;

use anyhow::{bail, Result};

/// The CPUs this process may use, in order.
pub fn allowed() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it, CPU_ISSET reads within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|c| libc::CPU_ISSET(*c, &set)).collect()
    }
}

/// The appliance's core and the load's: the last allowed CPU for the appliance, the others for
/// the load. Fails with fewer than two.
pub fn split(cpus: &[usize]) -> Result<(Vec<usize>, Vec<usize>)> {
    match cpus.split_last() {
        Some((last, rest)) if !rest.is_empty() => Ok((vec![*last], rest.to_vec())),
        _ => bail!("an appliance core of its own needs two CPUs at least; this process may use {cpus:?}"),
    }
}

/// Restrict task `tid` (0: the calling thread) to `cpus`.
pub fn set(tid: i32, cpus: &[usize]) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it for CPUs under
    // CPU_SETSIZE (others are skipped); sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|c| **c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Every task (thread) of process `pid` and of its descendants, from /proc.
pub fn tasks_of_tree(pid: u32) -> Vec<i32> {
    let mut parents = std::collections::HashMap::<u32, Vec<u32>>::new();
    for (p, _, ppid) in crate::inline::processes() {
        parents.entry(ppid).or_default().push(p);
    }
    let (mut procs, mut todo) = (Vec::new(), vec![pid]);
    while let Some(p) = todo.pop() {
        procs.push(p);
        todo.extend(parents.get(&p).into_iter().flatten().copied());
    }
    procs
        .iter()
        .flat_map(|p| std::fs::read_dir(format!("/proc/{p}/task")).into_iter().flatten().flatten())
        .filter_map(|t| t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .collect()
}

/// While it lives, the calling thread (and what it spawns from then on) and the process trees
/// given run on the load's CPUs; dropped, they may use every CPU this process could.
pub struct LoadPinned {
    trees: Vec<u32>,
    all: Vec<usize>,
}

impl LoadPinned {
    pub fn new(load: &[usize], trees: &[u32]) -> Result<LoadPinned> {
        let me = LoadPinned { trees: trees.to_vec(), all: allowed() };
        set(0, load)?;
        for &p in trees {
            for t in tasks_of_tree(p) {
                // A task may have exited since /proc was read.
                match set(t, load) {
                    Err(e) if e.raw_os_error() != Some(libc::ESRCH) => return Err(e.into()),
                    _ => {}
                }
            }
        }
        Ok(me)
    }
}

impl Drop for LoadPinned {
    fn drop(&mut self) {
        let _ = set(0, &self.all);
        for &p in &self.trees {
            for t in tasks_of_tree(p) {
                let _ = set(t, &self.all);
            }
        }
    }
}

/// The CPUs task `tid` may use, from /proc (its Cpus_allowed_list, such as "0-1,3").
pub fn of_task(tid: i32) -> Option<Vec<usize>> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(parse_list)
}

/// The CPUs of a list such as /proc's "0-1,3" (empty if it does not parse).
pub fn parse_list(list: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for r in list.trim().split(',').filter(|r| !r.is_empty()) {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) else { return Vec::new() };
        out.extend(a..=b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_appliance_takes_the_last_cpu_and_the_load_the_others() {
        assert_eq!(split(&[0, 1]).unwrap(), (vec![1], vec![0]));
        assert_eq!(split(&[0, 2, 5]).unwrap(), (vec![5], vec![0, 2]));
        assert!(split(&[3]).is_err());
        assert!(split(&[]).is_err());
    }

    #[test]
    fn parses_procs_cpu_lists() {
        assert_eq!(parse_list("0-1,3"), vec![0, 1, 3]);
        assert_eq!(parse_list("1"), vec![1]);
        assert_eq!(parse_list(""), Vec::<usize>::new());
        assert_eq!(parse_list("x"), Vec::<usize>::new());
    }

    #[test]
    fn a_pinned_tree_runs_on_the_load_cpus_until_the_guard_drops() {
        let cpus = allowed();
        let Ok((_, load)) = split(&cpus) else {
            eprintln!("one CPU: nothing to pin");
            return;
        };
        // A child that spawns a grandchild: both are pinned, and freed again.
        use std::os::unix::process::CommandExt;
        // In a process group of its own, killed whole at the end.
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30 & wait"]).process_group(0).spawn().unwrap();
        let pid = child.id();
        let tasks = || loop {
            let t = tasks_of_tree(pid);
            if t.len() >= 2 {
                return t;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let before = tasks();
        // In a thread of its own: the guard pins the calling thread, not the test harness's.
        let (me, them) = std::thread::spawn(move || {
            let guard = LoadPinned::new(&load, &[pid]).unwrap();
            let me = allowed();
            let them: Vec<Option<Vec<usize>>> = tasks_of_tree(pid).iter().map(|t| of_task(*t)).collect();
            drop(guard);
            (me, them)
        })
        .join()
        .unwrap();
        let load = split(&cpus).unwrap().1;
        assert_eq!(me, load);
        assert_eq!(them.len(), before.len());
        assert!(them.iter().all(|c| c.as_ref() == Some(&load)), "{them:?} not {load:?}");
        // Freed: every task may use every CPU again.
        let after: Vec<usize> = tasks().iter().map(|t| of_task(*t).map_or(0, |l| l.len())).collect();
        assert!(after.iter().all(|n| *n == cpus.len()), "{after:?}");
        // SAFETY: kill(2) on the process group of our own child.
        unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        let _ = child.wait();
    }
}
