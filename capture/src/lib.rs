//! Capture driver: reads a pcap or pcapng capture, from a file or standard input, plain or
//! compressed (gzip, zstd), and replays it through the engine with the capture's own timestamps
//! as the clock.
//!
//! The two formats are read here rather than by libpcap: libpcap reads only from a `FILE*`, so
//! standard input after sniffing its first bytes and decompressed streams would need a pipe and
//! a copying thread each. The formats are small and fixed (the pcap record header and pcapng's
//! section, interface and packet blocks), reading them from any [`Read`] into one reused buffer
//! costs no allocation per frame, and every way a file can end badly becomes a reason we word
//! ourselves. `tests/cli.rs` holds the reader to libpcap's reading of every vendored trace.
//!
//! A thread reads (and decompresses) ahead, so that work runs beside the engine's.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use rlm_core::engine::{Engine, Event, Port};
use rlm_core::time::Timestamp;
use rlm_core::wire::LinkType;

mod sharded;
pub use sharded::replay_sharded;

/// Progress callback: (bytes of the file consumed so far, file size).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Where a capture comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    /// Standard input (`-` on the command line).
    Stdin,
}

impl Source {
    /// `-` is standard input; anything else a file.
    pub fn from_arg(p: &Path) -> Source {
        if p.as_os_str() == "-" {
            Source::Stdin
        } else {
            Source::File(p.to_path_buf())
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Stdin => f.write_str("(standard input)"),
        }
    }
}

/// How the capture's bytes were compressed, from its magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    fn name(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

/// One frame of the capture, borrowing the reader's buffer.
#[derive(Debug)]
pub struct Frame<'a> {
    pub ts: Timestamp,
    pub link: LinkType,
    pub data: &'a [u8],
}

/// Why a capture ended before its end: the file stops inside a record, a length does not add up,
/// the decompressor or the device failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut(pub String);

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Records longer than this are taken as damage, not data (libpcap's largest snap length is 256 KiB).
const MAX_RECORD: usize = 16 << 20;

const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
const PCAPNG_IDB: u32 = 1;
const PCAPNG_PB: u32 = 2;
const PCAPNG_SPB: u32 = 3;
const PCAPNG_EPB: u32 = 6;
const PCAPNG_BOM: u32 = 0x1A2B_3C4D;

#[derive(Clone, Copy, Debug)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    #[inline]
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        }
    }
    #[inline]
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        match self {
            Endian::Little => u16::from_le_bytes(a),
            Endian::Big => u16::from_be_bytes(a),
        }
    }
    fn u64(self, b: &[u8]) -> u64 {
        let a: [u8; 8] = b[..8].try_into().expect("8 bytes");
        match self {
            Endian::Little => u64::from_le_bytes(a),
            Endian::Big => u64::from_be_bytes(a),
        }
    }
}

/// A pcapng interface: its link type and how its timestamps count.
#[derive(Clone, Debug)]
struct Interface {
    link: LinkType,
    snaplen: u32,
    /// if_tsresol: units per second as 10^n (false) or 2^n (true).
    resol_binary: bool,
    resol_exp: u8,
    /// if_tsoffset, seconds.
    offset_s: i64,
}

impl Interface {
    fn timestamp(&self, units: u64) -> Timestamp {
        let ns: u128 = if self.resol_binary {
            ((units as u128) * 1_000_000_000) >> self.resol_exp.min(127)
        } else if self.resol_exp <= 9 {
            units as u128 * 10u128.pow(9 - self.resol_exp as u32)
        } else {
            units as u128 / 10u128.pow((self.resol_exp as u32 - 9).min(38))
        };
        let ns = ns as i128 + self.offset_s as i128 * 1_000_000_000;
        Timestamp(ns.clamp(0, u64::MAX as i128) as u64)
    }
}

#[derive(Debug)]
enum Format {
    Pcap { endian: Endian, nanos: bool, header_len: usize, link: LinkType },
    PcapNg { endian: Endian, interfaces: Vec<Interface> },
}

/// A pcap or pcapng reader over any byte stream.
pub struct CaptureReader {
    name: String,
    input: ReadAhead,
    compression: Compression,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    format: Format,
    /// Bytes taken from the underlying file or stdin (before decompression).
    raw_read: Arc<AtomicU64>,
    /// Size of the underlying file, when it is one.
    size: Option<u64>,
    /// The last timestamp (for pcapng simple packet blocks, which carry none).
    last_ts: Timestamp,
    /// A cut found while reading ahead at open, reported at the next frame.
    pending: Option<Cut>,
}

/// Counts the bytes read through it (for the progress bar).
struct Counting<R> {
    inner: R,
    n: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Bytes the read-ahead thread reads at a time.
const CHUNK: usize = 1 << 20;
/// Room left before each chunk's data for the unread end of the chunk before it, so that a record
/// cut by a chunk boundary is made whole by copying its first part only (larger than any snap
/// length libpcap writes; a longer record is gathered by copying).
const HEAD: usize = 320 << 10;

/// How a reader takes in its stream: in chunks of `chunk` bytes, each with `head` bytes of room
/// before it, read ahead on a thread of their own or, with `thread` false, in the caller's
/// thread when the parser needs them. The default ([`Chunking::default`]) is `rlm analyze`'s: 1
/// MiB chunks, 320 KiB of room, a thread. The fuzz target reads inline in small chunks and room,
/// so that records cross chunks and outgrow the room on small inputs (and no thread is started
/// nor a megabyte cleared for each input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunking {
    /// Room before each chunk's data, in bytes.
    pub head: usize,
    /// Bytes read at a time (at least 1).
    pub chunk: usize,
    /// Whether a thread reads ahead.
    pub thread: bool,
}

impl Default for Chunking {
    fn default() -> Chunking {
        Chunking { head: HEAD, chunk: CHUNK, thread: true }
    }
}

/// Reads ahead on a thread of its own, so the system calls and the decompression run beside the
/// engine instead of between its frames (or, inline, reads when asked). Each chunk holds what one
/// `read` returned (a pipe's data is passed on as soon as it arrives) at offset `head`; chunks go
/// back to the thread for reuse.
enum ReadAhead {
    Thread { rx: Receiver<io::Result<(Vec<u8>, usize)>>, back: SyncSender<Vec<u8>>, head: usize },
    Inline { input: Box<dyn Read + Send>, spare: Option<Vec<u8>>, head: usize, chunk: usize },
}

/// A chunk's buffer: `buf` (a spare one, or new) with room for `head + chunk` bytes.
fn chunk_buffer(buf: Option<Vec<u8>>, head: usize, chunk: usize) -> Vec<u8> {
    let mut buf = buf.unwrap_or_default();
    if buf.len() < head + chunk {
        buf.resize(head + chunk, 0);
    }
    buf
}

/// One `read` of at most `chunk` bytes into `buf` past `head`, retried when interrupted.
fn read_chunk(input: &mut dyn Read, buf: &mut [u8], head: usize, chunk: usize) -> io::Result<usize> {
    loop {
        match input.read(&mut buf[head..head + chunk]) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

impl ReadAhead {
    fn spawn(mut input: Box<dyn Read + Send>, how: Chunking) -> io::Result<ReadAhead> {
        let (head, chunk) = (how.head, how.chunk.max(1));
        if !how.thread {
            return Ok(ReadAhead::Inline { input, spare: None, head, chunk });
        }
        let (tx, rx) = sync_channel::<io::Result<(Vec<u8>, usize)>>(2);
        let (back, back_rx) = sync_channel::<Vec<u8>>(4);
        std::thread::Builder::new().name("capture-read".into()).spawn(move || loop {
            let mut buf = chunk_buffer(back_rx.try_recv().ok(), head, chunk);
            let r = read_chunk(&mut *input, &mut buf, head, chunk);
            let end = !matches!(r, Ok(n) if n > 0);
            // The receiver gone (the replay stopped) ends the thread too.
            if tx.send(r.map(|n| (buf, n))).is_err() || end {
                return;
            }
        })?;
        Ok(ReadAhead::Thread { rx, back, head })
    }

    /// The room before each chunk's data.
    fn head(&self) -> usize {
        match self {
            ReadAhead::Thread { head, .. } | ReadAhead::Inline { head, .. } => *head,
        }
    }

    /// The next chunk and its length (0 at the end), or why the stream failed.
    fn next(&mut self) -> io::Result<(Vec<u8>, usize)> {
        match self {
            ReadAhead::Thread { rx, .. } => rx.recv().unwrap_or_else(|_| Err(io::Error::other("the reading thread stopped"))),
            ReadAhead::Inline { input, spare, head, chunk } => {
                let mut buf = chunk_buffer(spare.take(), *head, *chunk);
                read_chunk(&mut **input, &mut buf, *head, *chunk).map(|n| (buf, n))
            }
        }
    }

    fn give_back(&mut self, buf: Vec<u8>) {
        if buf.is_empty() {
            return;
        }
        match self {
            ReadAhead::Thread { back, .. } => {
                let _ = back.try_send(buf);
            }
            ReadAhead::Inline { spare, .. } => *spare = Some(buf),
        }
    }
}

/// Read until `buf` is full or the stream ends; returns how much was read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn sniff_compression(head: &[u8]) -> Result<Compression, &'static str> {
    match head {
        [0x1f, 0x8b, ..] => Ok(Compression::Gzip),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Ok(Compression::Zstd),
        [0xfd, b'7', b'z', b'X', ..] => Err("xz-compressed captures are not supported (decompress with xz -d, or recompress with gzip or zstd)"),
        [b'B', b'Z', b'h', ..] => Err("bzip2-compressed captures are not supported (decompress with bzip2 -d, or recompress with gzip or zstd)"),
        [0x04, 0x22, 0x4d, 0x18, ..] => Err("lz4-compressed captures are not supported (decompress with lz4 -d, or recompress with gzip or zstd)"),
        _ => Ok(Compression::None),
    }
}

/// Open a capture: a file or standard input, plain, gzip or zstd, pcap or pcapng. Errors here
/// (missing, a directory, not a capture, an unsupported link type) are one-line and happen before
/// any frame is read.
pub fn open(source: &Source) -> Result<CaptureReader> {
    let raw_read = Arc::new(AtomicU64::new(0));
    let (input, size): (Box<dyn Read + Send>, Option<u64>) = match source {
        Source::Stdin => {
            // Standard input's own descriptor, unbuffered: large reads, and Send for the read-ahead thread.
            use std::os::fd::AsFd;
            let fd = io::stdin().as_fd().try_clone_to_owned().context("cannot read capture (standard input)")?;
            (Box::new(Counting { inner: File::from(fd), n: raw_read.clone() }), None)
        }
        Source::File(path) => {
            let meta = std::fs::metadata(path).with_context(|| format!("cannot open capture {}", path.display()))?;
            if meta.is_dir() {
                bail!("cannot open capture {}: is a directory", path.display());
            }
            let f = File::open(path).with_context(|| format!("cannot open capture {}", path.display()))?;
            let size = meta.is_file().then_some(meta.len());
            (Box::new(Counting { inner: f, n: raw_read.clone() }), size)
        }
    };
    from_reader(source.to_string(), input, size, raw_read, Chunking::default())
}

/// A reader over any byte stream (plain, gzip or zstd), named `name` in messages.
pub fn from_read(name: &str, input: Box<dyn Read + Send>) -> Result<CaptureReader> {
    from_read_chunked(name, input, Chunking::default())
}

/// [`from_read`] taking its stream in chunks as `how` says.
pub fn from_read_chunked(name: &str, input: Box<dyn Read + Send>, how: Chunking) -> Result<CaptureReader> {
    let raw_read = Arc::new(AtomicU64::new(0));
    let input = Box::new(Counting { inner: input, n: raw_read.clone() });
    from_reader(name.to_string(), input, None, raw_read, how)
}

fn from_reader(name: String, mut input: Box<dyn Read + Send>, size: Option<u64>, raw_read: Arc<AtomicU64>, how: Chunking) -> Result<CaptureReader> {
    let mut head = [0u8; 4];
    let n = read_full(&mut *input, &mut head).with_context(|| format!("cannot read capture {name}"))?;
    let head = head[..n].to_vec();
    let compression = match sniff_compression(&head) {
        Ok(c) => c,
        Err(why) => bail!("cannot read capture {name}: {why}"),
    };
    let rejoined = Cursor::new(head).chain(input);
    let input: Box<dyn Read + Send> = match compression {
        Compression::None => Box::new(rejoined),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(BufReader::with_capacity(256 << 10, rejoined))),
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(BufReader::with_capacity(256 << 10, rejoined))
                .with_context(|| format!("cannot read capture {name}: zstd"))?,
        ),
    };
    let input = ReadAhead::spawn(input, how).with_context(|| format!("cannot read capture {name}"))?;
    let mut r = CaptureReader {
        name,
        input,
        compression,
        buf: Vec::new(),
        pos: 0,
        end: 0,
        eof: false,
        format: Format::PcapNg { endian: Endian::Little, interfaces: Vec::new() },
        raw_read,
        size,
        last_ts: Timestamp::ZERO,
        pending: None,
    };
    r.read_header()?;
    Ok(r)
}

impl CaptureReader {
    /// The capture's name in messages (its path, or "(standard input)").
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Bytes read from the file or standard input so far (compressed bytes for a compressed capture).
    pub fn bytes_read(&self) -> u64 {
        self.raw_read.load(Ordering::Relaxed)
    }

    /// The file's size, when the capture is a regular file.
    pub fn size(&self) -> Option<u64> {
        self.size
    }

    fn what(&self) -> String {
        match self.compression {
            Compression::None => String::new(),
            c => format!(" (inside {})", c.name()),
        }
    }

    /// Make at least `need` bytes available at `pos`, unless the stream ends first.
    /// Returns how many are available.
    fn fill(&mut self, need: usize) -> Result<usize, Cut> {
        while self.end - self.pos < need && !self.eof {
            let (mut next, n) = match self.input.next() {
                Ok(chunk) => chunk,
                Err(e) => {
                    self.eof = true;
                    return Err(Cut(match self.compression {
                        Compression::None => format!("read error: {e}"),
                        c => format!("{} stream: {e}", c.name()),
                    }));
                }
            };
            if n == 0 {
                self.eof = true;
                self.input.give_back(next);
                break;
            }
            let tail = self.end - self.pos;
            let head = self.input.head();
            if tail <= head {
                // The unread end of this chunk goes just before the next one's data.
                next[head - tail..head].copy_from_slice(&self.buf[self.pos..self.end]);
                let old = std::mem::replace(&mut self.buf, next);
                self.input.give_back(old);
                (self.pos, self.end) = (head - tail, head + n);
            } else {
                // A record longer than the headroom: gather it here (moved to the front once,
                // then grown in place, so that gathering it costs its length, not its length
                // times its chunks).
                if self.pos > 0 {
                    self.buf.copy_within(self.pos..self.end, 0);
                }
                self.buf.truncate(tail);
                self.buf.extend_from_slice(&next[head..head + n]);
                (self.pos, self.end) = (0, self.buf.len());
                self.input.give_back(next);
            }
        }
        Ok(self.end - self.pos)
    }

    fn read_header(&mut self) -> Result<()> {
        let name = self.name.clone();
        let have = self.fill(24).map_err(|c| anyhow::anyhow!("cannot read capture {name}: {c}"))?;
        let b = &self.buf[self.pos..self.end];
        if have < 4 {
            bail!("cannot read capture {name}: not a pcap or pcapng capture{} ({})", self.what(), if have == 0 { "empty" } else { "too short" });
        }
        let magic = [b[0], b[1], b[2], b[3]];
        let pcap = match magic {
            [0xd4, 0xc3, 0xb2, 0xa1] => Some((Endian::Little, false, 16)),
            [0xa1, 0xb2, 0xc3, 0xd4] => Some((Endian::Big, false, 16)),
            [0x4d, 0x3c, 0xb2, 0xa1] => Some((Endian::Little, true, 16)),
            [0xa1, 0xb2, 0x3c, 0x4d] => Some((Endian::Big, true, 16)),
            // Alexey Kuznetzov's modified pcap: 8 more bytes per record header.
            [0x34, 0xcd, 0xb2, 0xa1] => Some((Endian::Little, false, 24)),
            [0xa1, 0xb2, 0xcd, 0x34] => Some((Endian::Big, false, 24)),
            _ => None,
        };
        if let Some((endian, nanos, header_len)) = pcap {
            if have < 24 {
                bail!("cannot read capture {name}: the file ends inside the pcap header ({have} of 24 bytes)");
            }
            let major = endian.u16(&b[4..]);
            if major != 2 {
                bail!("cannot read capture {name}: unsupported pcap version {major}");
            }
            // The low 16 bits are the link type; the upper ones carry FCS information.
            let dlt = endian.u32(&b[20..]) & 0xFFFF;
            let Some(link) = LinkType::from_dlt(dlt as i32) else {
                bail!("cannot read capture {name}: unsupported link type {dlt}");
            };
            self.pos += 24;
            self.format = Format::Pcap { endian, nanos, header_len, link };
            return Ok(());
        }
        if u32::from_le_bytes(magic) == PCAPNG_SHB {
            // The section header's own byte-order magic says how to read its length.
            if have < 12 {
                bail!("cannot read capture {name}: the file ends inside the pcapng section header");
            }
            let endian = match b[8..12] {
                [0x4d, 0x3c, 0x2b, 0x1a] => Endian::Little,
                [0x1a, 0x2b, 0x3c, 0x4d] => Endian::Big,
                _ => bail!("cannot read capture {name}: not a pcap or pcapng capture{} (bad pcapng byte-order magic)", self.what()),
            };
            self.format = Format::PcapNg { endian, interfaces: Vec::new() };
            // Read ahead to the first packet, so that a bad section header or an unsupported first
            // interface is refused now; a cut found on the way is reported at the first frame.
            let mut first = true;
            loop {
                match self.pcapng_peek_type() {
                    Ok(Some(t)) if t == PCAPNG_EPB || t == PCAPNG_SPB || t == PCAPNG_PB => break,
                    Ok(None) => break,
                    Ok(Some(_)) => {}
                    Err(c) => {
                        self.pending = Some(c);
                        break;
                    }
                }
                let no_interface = matches!(&self.format, Format::PcapNg { interfaces, .. } if interfaces.is_empty());
                match self.pcapng_block() {
                    Ok(_) => {}
                    Err(c) if first || (no_interface && c.0.starts_with("unsupported link type")) => bail!("cannot read capture {name}: {c}"),
                    Err(c) => {
                        self.pending = Some(c);
                        break;
                    }
                }
                first = false;
            }
            return Ok(());
        }
        bail!("cannot read capture {name}: not a pcap or pcapng capture{}", self.what())
    }

    /// The next frame; `Ok(None)` at the clean end of the capture, `Err` when it is cut short.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, Cut> {
        if let Some(c) = self.pending.take() {
            return Err(c);
        }
        match self.format {
            Format::Pcap { endian, nanos, header_len, link } => self.pcap_record(endian, nanos, header_len, link),
            Format::PcapNg { .. } => loop {
                if self.pcapng_peek_type()?.is_none() {
                    return Ok(None);
                }
                if let Some((off, len, ts, link)) = self.pcapng_block()? {
                    let data = &self.buf[off..off + len];
                    return Ok(Some(Frame { ts, link, data }));
                }
            },
        }
    }

    #[inline]
    fn pcap_record(&mut self, endian: Endian, nanos: bool, header_len: usize, link: LinkType) -> Result<Option<Frame<'_>>, Cut> {
        let have = if self.end - self.pos >= header_len { header_len } else { self.fill(header_len)? };
        if have == 0 {
            return Ok(None);
        }
        if have < header_len {
            return Err(Cut(format!("the file ends inside a record header ({have} of {header_len} bytes)")));
        }
        let h = &self.buf[self.pos..self.pos + header_len];
        let sec = endian.u32(h) as u64;
        let frac = endian.u32(&h[4..]) as u64;
        let caplen = endian.u32(&h[8..]) as usize;
        if caplen > MAX_RECORD {
            return Err(Cut(format!("a record claims {caplen} bytes, more than any capture holds (damaged file?)")));
        }
        let need = header_len + caplen;
        let have = if self.end - self.pos >= need { need } else { self.fill(need)? };
        if have < need {
            return Err(Cut(format!("the file ends inside a record ({} of {caplen} bytes)", have - header_len)));
        }
        let ts = Timestamp(sec * 1_000_000_000 + if nanos { frac } else { frac * 1_000 });
        let start = self.pos + header_len;
        self.pos += need;
        self.last_ts = ts;
        Ok(Some(Frame { ts, link, data: &self.buf[start..start + caplen] }))
    }

    /// The type of the next pcapng block, or None at the clean end.
    fn pcapng_peek_type(&mut self) -> Result<Option<u32>, Cut> {
        let have = self.fill(8)?;
        if have == 0 {
            return Ok(None);
        }
        if have < 8 {
            return Err(Cut(format!("the file ends inside a block header ({have} of 8 bytes)")));
        }
        let endian = match self.format {
            Format::PcapNg { endian, .. } => endian,
            Format::Pcap { .. } => unreachable!("pcapng only"),
        };
        Ok(Some(endian.u32(&self.buf[self.pos..])))
    }

    /// Consume one pcapng block. A packet block returns (offset in buf, caplen, ts, link).
    fn pcapng_block(&mut self) -> Result<Option<(usize, usize, Timestamp, LinkType)>, Cut> {
        let Format::PcapNg { mut endian, .. } = self.format else { unreachable!("pcapng only") };
        let btype = endian.u32(&self.buf[self.pos..]);
        if btype == PCAPNG_SHB {
            // A new section may switch byte order.
            if self.fill(12)? < 12 {
                return Err(Cut("the file ends inside a section header".into()));
            }
            endian = match self.buf[self.pos + 8..self.pos + 12] {
                [0x4d, 0x3c, 0x2b, 0x1a] => Endian::Little,
                [0x1a, 0x2b, 0x3c, 0x4d] => Endian::Big,
                _ => return Err(Cut("a section header with a bad byte-order magic".into())),
            };
        }
        let len = endian.u32(&self.buf[self.pos + 4..]) as usize;
        if len < 12 || len % 4 != 0 || len > MAX_RECORD {
            return Err(Cut(format!("a block of type {btype:#x} with a bad length {len}")));
        }
        let have = self.fill(len)?;
        if have < len {
            return Err(Cut(format!("the file ends inside a block ({have} of {len} bytes)")));
        }
        let start = self.pos;
        let b = &self.buf[start..start + len];
        if endian.u32(&b[len - 4..]) as usize != len {
            return Err(Cut(format!("a block of type {btype:#x} whose trailing length does not match ({len})")));
        }
        let body = &b[8..len - 4];
        self.pos += len;
        let Format::PcapNg { interfaces, endian: fmt_endian } = &mut self.format else { unreachable!() };
        match btype {
            PCAPNG_SHB => {
                if body.len() < 16 || endian.u32(body) != PCAPNG_BOM {
                    return Err(Cut("a bad section header".into()));
                }
                let major = endian.u16(&body[4..]);
                if major != 1 {
                    return Err(Cut(format!("unsupported pcapng version {major} in a section header")));
                }
                *fmt_endian = endian;
                interfaces.clear();
                Ok(None)
            }
            PCAPNG_IDB => {
                if body.len() < 8 {
                    return Err(Cut("a bad interface description".into()));
                }
                let dlt = endian.u16(body) as u32;
                let Some(link) = LinkType::from_dlt(dlt as i32) else {
                    return Err(Cut(format!("unsupported link type {dlt} (interface {})", interfaces.len())));
                };
                let mut ifc = Interface { link, snaplen: endian.u32(&body[4..]), resol_binary: false, resol_exp: 6, offset_s: 0 };
                let mut opts = &body[8..];
                while opts.len() >= 4 {
                    let code = endian.u16(opts);
                    let olen = endian.u16(&opts[2..]) as usize;
                    let padded = (olen + 3) & !3;
                    if code == 0 || 4 + olen > opts.len() {
                        break;
                    }
                    let v = &opts[4..4 + olen];
                    match (code, olen) {
                        (9, 1) => {
                            ifc.resol_binary = v[0] & 0x80 != 0;
                            ifc.resol_exp = v[0] & 0x7f;
                        }
                        (14, 8) => ifc.offset_s = endian.u64(v) as i64,
                        _ => {}
                    }
                    opts = &opts[(4 + padded).min(opts.len())..];
                }
                interfaces.push(ifc);
                Ok(None)
            }
            PCAPNG_EPB | PCAPNG_PB => {
                let (ifc_id, hi, lo, caplen) = if btype == PCAPNG_EPB {
                    if body.len() < 20 {
                        return Err(Cut("a bad enhanced packet block".into()));
                    }
                    (endian.u32(body) as usize, endian.u32(&body[4..]), endian.u32(&body[8..]), endian.u32(&body[12..]) as usize)
                } else {
                    if body.len() < 20 {
                        return Err(Cut("a bad packet block".into()));
                    }
                    (endian.u16(body) as usize, endian.u32(&body[4..]), endian.u32(&body[8..]), endian.u32(&body[12..]) as usize)
                };
                if 20 + caplen > body.len() {
                    return Err(Cut(format!("a packet block whose {caplen} bytes do not fit in it")));
                }
                let Some(ifc) = interfaces.get(ifc_id) else {
                    return Err(Cut(format!("a packet on interface {ifc_id}, which was never described")));
                };
                let ts = ifc.timestamp(((hi as u64) << 32) | lo as u64);
                self.last_ts = ts;
                Ok(Some((start + 8 + 20, caplen, ts, ifc.link)))
            }
            PCAPNG_SPB => {
                let Some(ifc) = interfaces.first() else {
                    return Err(Cut("a simple packet before any interface was described".into()));
                };
                if body.len() < 4 {
                    return Err(Cut("a bad simple packet block".into()));
                }
                let orig = endian.u32(body) as usize;
                let mut caplen = orig.min(body.len() - 4);
                if ifc.snaplen > 0 {
                    caplen = caplen.min(ifc.snaplen as usize);
                }
                Ok(Some((start + 8 + 4, caplen, self.last_ts, ifc.link)))
            }
            // Statistics, name resolution, journal entries, custom blocks: not ours.
            _ => Ok(None),
        }
    }
}

/// Deadlines a replay fires one by one, each at its own time, in all: 10,000,000 (a day of
/// capture has about 170,000 of the SLA controller's 500 ms steps, and each connection two or
/// three timers). Past them every frame fires what is due at its own time, at once.
const DEADLINES_ONE_BY_ONE: u64 = 10_000_000;

/// A replay's view of the engine's next deadline (cached: the engine's deadlines only move when
/// it handles something) and of the deadlines it may still fire one by one.
pub(crate) struct Deadlines {
    next: Option<Timestamp>,
    one_by_one_left: u64,
}

impl Deadlines {
    pub(crate) fn of(engine: &Engine) -> Deadlines {
        Deadlines::with(engine, DEADLINES_ONE_BY_ONE)
    }

    fn with(engine: &Engine, one_by_one: u64) -> Deadlines {
        Deadlines { next: engine.poll_timeout(), one_by_one_left: one_by_one }
    }
}

/// Fire `engine`'s timers due by `until`, capture time, each at its own time while the
/// replay's [`DEADLINES_ONE_BY_ONE`] last, and then what is left at `until` at once: a capture's
/// clock leaping decades ahead (one gap, or many frames days apart) would otherwise make the
/// controller step billions of times, and time stopped at the largest timestamp would bring a
/// deadline back at the same instant for ever.
fn fire_until(engine: &mut Engine, d: &mut Deadlines, until: Timestamp) {
    while let Some(t) = d.next {
        if t > until {
            break;
        }
        if d.one_by_one_left == 0 {
            engine.handle_timeout(until);
            d.next = engine.poll_timeout();
            break;
        }
        engine.handle_timeout(t);
        d.one_by_one_left -= 1;
        d.next = engine.poll_timeout();
    }
}

/// Hand `engine` a frame of the capture stamped `ts`, after the timers due by then.
fn feed_frame(engine: &mut Engine, d: &mut Deadlines, ts: Timestamp, link: LinkType, data: &[u8]) {
    fire_until(engine, d, ts);
    engine.handle_link(ts, Port::Unknown, link, data);
    d.next = engine.poll_timeout();
}

/// How a replay ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    pub frames: u64,
    /// Why the capture ended before its end, if it did.
    pub cut: Option<Cut>,
}

/// Replay `reader` through `engine`, handing every event to `on_event`. Timers fire as capture
/// time passes; at the end, clean or cut, the engine is shut down so every open connection and
/// pageview is reported. `Err` only when `on_event` fails.
pub fn replay_reader(
    reader: &mut CaptureReader,
    engine: &mut Engine,
    on_event: &mut dyn FnMut(Event) -> Result<()>,
    progress: Option<Progress<'_>>,
) -> Result<Replayed> {
    let deadlines = Deadlines::of(engine);
    replay_with(reader, engine, on_event, progress, deadlines)
}

fn replay_with(
    reader: &mut CaptureReader,
    engine: &mut Engine,
    on_event: &mut dyn FnMut(Event) -> Result<()>,
    mut progress: Option<Progress<'_>>,
    mut deadlines: Deadlines,
) -> Result<Replayed> {
    let size = reader.size().unwrap_or(0);
    let mut frames: u64 = 0;
    let mut last = Timestamp::ZERO;
    let cut = loop {
        let (ts, link, data) = match reader.next_frame() {
            Ok(Some(f)) => (f.ts, f.link, f.data),
            Ok(None) => break None,
            Err(c) => break Some(c),
        };
        feed_frame(engine, &mut deadlines, ts, link, data);
        last = last.max(ts);
        frames += 1;
        while let Some(ev) = engine.poll_event() {
            on_event(ev)?;
        }
        if frames % 4096 == 0 {
            if let Some(cb) = progress.as_mut() {
                cb(reader.bytes_read().min(size), size);
            }
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
    Ok(Replayed { frames, cut })
}

/// Replay the capture at `path` (`-`: standard input) through `engine`. Returns the number of
/// frames read; a capture cut short is an error (after everything read was reported).
pub fn replay(path: &Path, engine: &mut Engine, on_event: &mut dyn FnMut(Event) -> Result<()>, progress: Option<Progress<'_>>) -> Result<u64> {
    let mut reader = open(&Source::from_arg(path))?;
    let r = replay_reader(&mut reader, engine, on_event, progress)?;
    match r.cut {
        None => Ok(r.frames),
        Some(c) => bail!("capture {} cut short after {} frames: {}", reader.name(), r.frames, c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: Vec<u8>) -> Result<CaptureReader> {
        from_read("test", Box::new(Cursor::new(bytes)))
    }

    #[test]
    fn a_clock_leaping_decades_ahead_is_replayed_in_a_bounded_number_of_steps() {
        // With an SLA target the controller looks every 500 ms of capture time. A capture
        // whose second frame is 73 years after its first would have the replay fire 4.6
        // billion controller steps one by one (found by reading, session 32); and a bound per
        // gap would not do, frames 13 hours apart each bringing as many. Past the replay's
        // DEADLINES_ONE_BY_ONE, what is due is fired at each frame's time.
        let sla = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nSLA HIGH RT.P95 < 2s\nSHED LOW\n";
        let replay = move |bytes: Vec<u8>, one_by_one: u64| {
            let mut engine = Engine::new(rlm_core::Config::default());
            engine.set_rules(Some(rules::compile("t.rlm", sla).unwrap()));
            let d = Deadlines::with(&engine, one_by_one);
            replay_with(&mut reader(bytes).unwrap(), &mut engine, &mut |_| Ok(()), None, d).unwrap().frames
        };
        let c = rlm_core::testkit::TcpConv::new("10.4.0.1:40000", "10.9.0.1:80");
        let (syn, synack) = (c.syn(), c.synack());
        let leap = pcap(false, false, &[(1_700_000_000, 0, &syn), (4_000_000_000, 0, &synack)]);
        // 1,000 frames 13 hours apart: as many steps again in each gap.
        let days: Vec<(u32, u32, &[u8])> = (0..1_000).map(|i| (1_700_000_000 + i * 50_000, 0, &syn[..])).collect();
        let days = pcap(false, false, &days);
        rlm_core::testkit::ends_within(std::time::Duration::from_secs(20), move || {
            assert_eq!(replay(leap, 10_000), 2);
            assert_eq!(replay(days, 10_000), 1_000);
        });
    }

    fn pcap(nanos: bool, big: bool, records: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let w32 = |v: &mut Vec<u8>, x: u32| v.extend(if big { x.to_be_bytes() } else { x.to_le_bytes() });
        let mut v = Vec::new();
        w32(&mut v, if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 });
        v.extend(if big { [0, 2, 0, 4] } else { [2, 0, 4, 0] });
        for x in [0, 0, 65535, 1] {
            w32(&mut v, x);
        }
        for (s, f, d) in records {
            for x in [*s, *f, d.len() as u32, d.len() as u32] {
                w32(&mut v, x);
            }
            v.extend_from_slice(d);
        }
        v
    }

    fn frames(r: &mut CaptureReader) -> (Vec<(u64, Vec<u8>)>, Option<Cut>) {
        let mut out = Vec::new();
        loop {
            match r.next_frame() {
                Ok(Some(f)) => out.push((f.ts.0, f.data.to_vec())),
                Ok(None) => return (out, None),
                Err(c) => return (out, Some(c)),
            }
        }
    }

    #[test]
    fn pcap_in_both_byte_orders_and_resolutions() {
        for (nanos, big) in [(false, false), (false, true), (true, false), (true, true)] {
            let mut r = reader(pcap(nanos, big, &[(10, 5, b"abc"), (11, 0, b"")])).unwrap();
            let (f, cut) = frames(&mut r);
            assert_eq!(cut, None);
            let unit = if nanos { 1 } else { 1000 };
            assert_eq!(f, vec![(10_000_000_000 + 5 * unit, b"abc".to_vec()), (11_000_000_000, vec![])]);
        }
    }

    #[test]
    fn cuts_are_named_not_errors() {
        let whole = pcap(false, false, &[(1, 0, b"0123456789"), (2, 0, b"abcdef")]);
        for cut_at in 25..whole.len() {
            let mut r = reader(whole[..cut_at].to_vec()).unwrap();
            let (f, cut) = frames(&mut r);
            if cut_at == 24 + 16 + 10 {
                assert_eq!((f.len(), cut), (1, None), "cut at a record boundary is a clean end");
            } else {
                let c = cut.unwrap_or_else(|| panic!("no cut at {cut_at}"));
                assert!(c.0.contains("the file ends inside a record"), "{c}");
            }
        }
        let mut huge = pcap(false, false, &[]);
        huge.extend([0u8; 8]);
        huge.extend(u32::MAX.to_le_bytes());
        huge.extend(u32::MAX.to_le_bytes());
        assert!(frames(&mut reader(huge).unwrap()).1.unwrap().0.contains("claims"));
    }

    /// Hands out its bytes in pieces of varying size, as a pipe does.
    struct Trickle(Vec<u8>, usize, rlm_core::testkit::Rng);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = (self.2.below(70_000) as usize + 1).min(buf.len()).min(self.0.len() - self.1);
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    #[test]
    fn records_across_chunks_and_larger_than_the_headroom() {
        let mut rng = rlm_core::testkit::Rng::new(3);
        let sizes: Vec<usize> = (0..3000)
            .map(|i| {
                if i % 997 == 5 {
                    HEAD + 12_345 + i
                } else if i % 333 == 0 {
                    3 * CHUNK / 2
                } else {
                    rng.below(1600) as usize
                }
            })
            .collect();
        let bodies: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| (0..n).map(|k| (k * 31 + i) as u8).collect()).collect();
        let records: Vec<(u32, u32, &[u8])> = bodies.iter().enumerate().map(|(i, b)| (i as u32, 0, &b[..])).collect();
        let bytes = pcap(false, false, &records);
        // rlm analyze's chunking, and the fuzz target's: inline, chunks and room smaller than
        // most records.
        let small = Chunking { head: 1000, chunk: 777, thread: false };
        for (trickle, how) in [(false, Chunking::default()), (true, Chunking::default()), (false, small), (true, small)] {
            let input: Box<dyn Read + Send> =
                if trickle { Box::new(Trickle(bytes.clone(), 0, rlm_core::testkit::Rng::new(9))) } else { Box::new(Cursor::new(bytes.clone())) };
            let mut r = from_read_chunked("test", input, how).unwrap();
            let (f, cut) = frames(&mut r);
            assert_eq!(cut, None);
            assert_eq!(f.len(), bodies.len());
            for (i, ((ts, data), body)) in f.iter().zip(&bodies).enumerate() {
                assert_eq!((*ts, data.len()), (i as u64 * 1_000_000_000, body.len()), "record {i}");
                assert!(data == body, "record {i} differs");
            }
        }
    }

    #[test]
    fn not_a_capture_and_unsupported_link_are_open_errors() {
        for bytes in [vec![], b"hello".to_vec(), b"GET / HTTP/1.1\r\n\r\n........".to_vec()] {
            let e = reader(bytes).err().expect("refused").to_string();
            assert!(e.contains("not a pcap or pcapng capture"), "{e}");
        }
        let mut p = pcap(false, false, &[]);
        p[20] = 147;
        assert!(reader(p).err().unwrap().to_string().contains("unsupported link type 147"));
        assert!(reader(vec![0xfd, b'7', b'z', b'X', b'Z', 0]).err().unwrap().to_string().contains("xz"));
    }

    /// A little pcapng writer: SHB, IDBs (link, tsresol), EPBs and one SPB.
    fn pcapng(big: bool, resol: u8, packets: &[(u32, u64, &[u8])]) -> Vec<u8> {
        let e = if big { Endian::Big } else { Endian::Little };
        let w32 = |x: u32| if big { x.to_be_bytes() } else { x.to_le_bytes() };
        let w16 = |x: u16| if big { x.to_be_bytes().to_vec() } else { x.to_le_bytes().to_vec() };
        let block = |t: u32, body: Vec<u8>| {
            let len = 12 + body.len() as u32;
            let mut v = w32(t).to_vec();
            v.extend(w32(len));
            v.extend(body);
            v.extend(w32(len));
            v
        };
        let mut out = Vec::new();
        let mut shb = w32(PCAPNG_BOM).to_vec();
        shb.extend(w16(1));
        shb.extend(w16(0));
        shb.extend([0xff; 8]);
        out.extend(block(PCAPNG_SHB, shb));
        for link in [1u16, 101] {
            let mut idb = w16(link);
            idb.extend(w16(0));
            idb.extend(w32(0));
            idb.extend(w16(9));
            idb.extend(w16(1));
            idb.extend([resol, 0, 0, 0]);
            idb.extend(w16(0));
            idb.extend(w16(0));
            out.extend(block(PCAPNG_IDB, idb));
        }
        // A block nobody reads (interface statistics).
        out.extend(block(5, vec![0; 8]));
        for (ifc, units, data) in packets {
            let mut epb = w32(*ifc).to_vec();
            epb.extend(w32((units >> 32) as u32));
            epb.extend(w32(*units as u32));
            epb.extend(w32(data.len() as u32));
            epb.extend(w32(data.len() as u32));
            epb.extend_from_slice(data);
            epb.resize((epb.len() + 3) & !3, 0);
            out.extend(block(PCAPNG_EPB, epb));
        }
        let mut spb = w32(3).to_vec();
        spb.extend(b"xyz\0");
        out.extend(block(PCAPNG_SPB, spb));
        let _ = e;
        out
    }

    #[test]
    fn pcapng_interfaces_resolutions_and_simple_packets() {
        for big in [false, true] {
            let bytes = pcapng(big, 6, &[(0, 1_500_000, b"hello"), (1, 2_000_001, b"raw")]);
            let mut r = reader(bytes).unwrap();
            let mut seen = Vec::new();
            while let Some(f) = r.next_frame().unwrap() {
                seen.push((f.ts.0, f.link, f.data.to_vec()));
            }
            assert_eq!(
                seen,
                vec![
                    (1_500_000_000, LinkType::Ethernet, b"hello".to_vec()),
                    (2_000_001_000, LinkType::RawIp, b"raw".to_vec()),
                    (2_000_001_000, LinkType::Ethernet, b"xyz".to_vec()),
                ]
            );
        }
        // Nanoseconds (10^-9) and 2^-10 units.
        let mut r = reader(pcapng(false, 9, &[(0, 7, b"a")])).unwrap();
        assert_eq!(r.next_frame().unwrap().unwrap().ts.0, 7);
        let mut r = reader(pcapng(false, 0x80 | 10, &[(0, 1024, b"a")])).unwrap();
        assert_eq!(r.next_frame().unwrap().unwrap().ts.0, 1_000_000_000);
        // Cut anywhere after the interfaces: frames before the cut, then a reason.
        let whole = pcapng(false, 6, &[(0, 1, b"0123456789"), (0, 2, b"abc")]);
        for n in 100..whole.len() {
            let mut r = reader(whole[..n].to_vec()).unwrap();
            let (_, cut) = frames(&mut r);
            if let Some(c) = cut {
                assert!(c.0.contains("ends inside"), "{c}");
            }
        }
        let mut undeclared = pcapng(false, 6, &[(5, 1, b"x")]);
        let (_, cut) = frames(&mut reader(std::mem::take(&mut undeclared)).unwrap());
        assert!(cut.unwrap().0.contains("never described"));
    }

    #[test]
    fn gzip_and_zstd_are_read_through() {
        use std::io::Write;
        let plain = pcap(false, false, &[(1, 0, b"abc"), (2, 0, b"defg")]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let gz = gz.finish().unwrap();
        let zs = zstd::stream::encode_all(&plain[..], 1).unwrap();
        for (bytes, c) in [(gz.clone(), Compression::Gzip), (zs, Compression::Zstd)] {
            let mut r = reader(bytes).unwrap();
            assert_eq!(r.compression(), c);
            let (f, cut) = frames(&mut r);
            assert_eq!((f.len(), cut), (2, None));
        }
        // A gzip stream cut short is a cut, after the frames before it.
        let mut r = reader(gz[..gz.len() - 10].to_vec()).unwrap();
        let (_, cut) = frames(&mut r);
        assert!(cut.is_some());
        // Compressed text is still not a capture.
        let zs = zstd::stream::encode_all(&b"just some text, no capture"[..], 1).unwrap();
        let e = reader(zs).err().unwrap().to_string();
        assert!(e.contains("not a pcap or pcapng capture (inside zstd)"), "{e}");
    }
}
