//! Arbitrary bytes as a capture file (pcap or pcapng, plain, gzip or zstd: the reader sniffs
//! which): opening and reading must never panic or hang, whatever the headers, block lengths,
//! interfaces and timestamps say. Each frame read goes through an engine with the link type
//! and timestamp the capture gave it, as `rlm analyze` replays it.

use std::io::Cursor;

use rlm_core::{Config, Engine, Port};

/// Most frames read from one input.
const MAX_FRAMES: usize = 4096;

/// The target: `data` as a capture.
pub fn capture(data: &[u8]) {
    let how = rlm_capture::Chunking { head: data.len() * 7 % 600, chunk: 1 + data.len() * 13 % 1500, thread: false };
    let Ok(mut reader) = rlm_capture::from_read_chunked("fuzz", Box::new(Cursor::new(data.to_vec())), how) else { return };
    let mut e = Engine::new(Config { max_connections: 64, ..Config::default() });
    for _ in 0..MAX_FRAMES {
        match reader.next_frame() {
            Ok(Some(f)) => {
                e.handle_link(f.ts, Port::Unknown, f.link, f.data);
            }
            Ok(None) | Err(_) => break,
        }
        while e.poll_event().is_some() {}
    }
    let _ = (reader.name(), reader.compression(), reader.bytes_read(), reader.size());
}
