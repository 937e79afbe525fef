//! The entries of the kernel's eBPF maps, counted by the lab itself (not read from rlm's
//! /status): every map loaded on the host whose name is asked for, its keys walked with
//! `BPF_MAP_GET_NEXT_KEY`. The soak judges rlm's fast-path tables with it.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};

use anyhow::{Context, Result};

/// `bpf(2)`'s command to walk a map's keys.
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;

/// `union bpf_attr` as the map element commands read it.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    next_key: u64,
    flags: u64,
}

/// Keys in the map open at `fd` whose keys are `key_size` bytes; a walk stops at 2^24 keys (a
/// map changing under the walk can send it round again).
fn count_keys(fd: std::os::fd::BorrowedFd<'_>, key_size: usize) -> u64 {
    let (mut key, mut next) = (vec![0u8; key_size.max(1)], vec![0u8; key_size.max(1)]);
    let mut n = 0u64;
    let mut first = true;
    while n < 1 << 24 {
        let attr = ElemAttr {
            map_fd: fd.as_raw_fd() as u32,
            // No key: the first one.
            key: if first { 0 } else { key.as_ptr() as u64 },
            next_key: next.as_mut_ptr() as u64,
            ..ElemAttr::default()
        };
        // SAFETY: `attr` and the buffers it points to outlive the call; the kernel writes
        // `key_size` bytes into `next`.
        let r = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_GET_NEXT_KEY, &attr as *const ElemAttr, std::mem::size_of::<ElemAttr>()) };
        if r != 0 {
            break;
        }
        n += 1;
        first = false;
        std::mem::swap(&mut key, &mut next);
    }
    n
}

/// The entries of each loaded map named in `names` (as the kernel keeps names: their first 15
/// bytes), summed over maps of the same name; a name no map has is 0.
pub fn entries(names: &[&str]) -> Result<BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, u64> = names.iter().map(|n| (n.to_string(), 0)).collect();
    for info in aya::maps::loaded_maps() {
        let info = info.context("cannot list the eBPF maps")?;
        let Some(name) = info.name_as_str().and_then(|m| names.iter().find(|n| n.get(..15).unwrap_or(n) == m)) else { continue };
        // A map gone since it was listed counts nothing.
        let Ok(fd) = info.fd() else { continue };
        *out.entry(name.to_string()).or_default() += count_keys(fd.as_fd(), info.key_size() as usize);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hash map of 37 entries made here (as root; skipped otherwise) is counted 37, and one
    /// of another name is not counted.
    #[test]
    fn a_maps_entries_are_counted_by_its_name() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: making a BPF map needs root");
            return;
        }
        let name = format!("rlmlab{}", std::process::id() % 1_000_000);
        // BPF_MAP_CREATE: a hash of 4-byte keys and values, named.
        let mut create = [0u8; 128];
        for (at, v) in [(0, 1u32), (4, 4), (8, 4), (12, 64)] {
            create[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        create[28..28 + name.len()].copy_from_slice(name.as_bytes());
        let fd = unsafe { libc::syscall(libc::SYS_bpf, 0 as libc::c_long, create.as_ptr(), create.len()) };
        assert!(fd >= 0, "BPF_MAP_CREATE: {}", std::io::Error::last_os_error());
        // SAFETY: the descriptor was just made and is owned here.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
        for k in 0..37u32 {
            let (key, value) = (k.to_ne_bytes(), (k * 2).to_ne_bytes());
            let attr = ElemAttr { map_fd: fd.as_raw_fd() as u32, key: key.as_ptr() as u64, next_key: value.as_ptr() as u64, ..ElemAttr::default() };
            // BPF_MAP_UPDATE_ELEM, whose attr has the value where GET_NEXT_KEY has the next key.
            let r = unsafe { libc::syscall(libc::SYS_bpf, 2 as libc::c_long, &attr as *const ElemAttr, std::mem::size_of::<ElemAttr>()) };
            assert_eq!(r, 0, "BPF_MAP_UPDATE_ELEM: {}", std::io::Error::last_os_error());
        }
        let counted = entries(&[&name, "rlmlab_nomap"]).unwrap();
        assert_eq!(counted[&name], 37);
        assert_eq!(counted["rlmlab_nomap"], 0);
        drop(fd);
    }
}
