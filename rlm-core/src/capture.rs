//! Capture-file driver: replays a pcap or pcapng file (read by libpcap) through the engine,
//! with the capture's own timestamps as the clock.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::engine::{Engine, Event, Port};
use crate::time::Timestamp;
use crate::wire::LinkType;

/// Progress callback: (bytes of the file consumed so far, file size).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Replay `path` through `engine`, handing every event to `on_event`. Timers fire as capture time
/// passes; at the end the engine is shut down so every open connection and pageview is reported.
/// Returns the number of frames read.
pub fn replay(path: &Path, engine: &mut Engine, on_event: &mut dyn FnMut(Event) -> Result<()>, progress: Option<Progress<'_>>) -> Result<u64> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot open capture {}", path.display()))?;
    if !meta.is_file() {
        bail!("cannot open capture {}: not a regular file", path.display());
    }
    let size = meta.len();
    let mut cap = pcap::Capture::from_file(path).map_err(|e| anyhow::anyhow!("cannot read capture {}: {}", path.display(), e))?;
    let dlt = cap.get_datalink().0;
    let Some(link) = LinkType::from_dlt(dlt) else {
        bail!("cannot read capture {}: unsupported link type {}", path.display(), dlt);
    };
    let mut frames: u64 = 0;
    let mut consumed: u64 = 24;
    let mut last = Timestamp::ZERO;
    let mut progress = progress;
    let result: Result<()> = loop {
        match cap.next_packet() {
            Ok(p) => {
                let ts = Timestamp(p.header.ts.tv_sec.max(0) as u64 * 1_000_000_000 + p.header.ts.tv_usec.max(0) as u64 * 1_000);
                while let Some(t) = engine.poll_timeout() {
                    if t > ts {
                        break;
                    }
                    engine.handle_timeout(t);
                }
                engine.handle_link(ts, Port::Unknown, link, p.data);
                last = last.max(ts);
                frames += 1;
                consumed += 16 + p.header.caplen as u64;
                while let Some(ev) = engine.poll_event() {
                    on_event(ev)?;
                }
                if frames % 4096 == 0 {
                    if let Some(cb) = progress.as_mut() {
                        cb(consumed.min(size), size);
                    }
                }
            }
            Err(pcap::Error::NoMorePackets) => break Ok(()),
            Err(e) => break Err(anyhow::anyhow!("capture {} is damaged after {} frames: {}", path.display(), frames, e)),
        }
    };
    // Whatever was read is reported even when the file ends badly.
    engine.shutdown(last);
    while let Some(ev) = engine.poll_event() {
        on_event(ev)?;
    }
    if let Some(cb) = progress.as_mut() {
        cb(size, size);
    }
    result.map(|_| frames)
}
