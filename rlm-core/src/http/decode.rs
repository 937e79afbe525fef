//! Content decoding of bodies (gzip, deflate), only to count their decoded size: Zeek's
//! `request_body_len`/`response_body_len` are sizes after content decoding, and ours mean the
//! same. Nothing decoded is kept; each decoder holds its inflate state (about 40 KiB) while its
//! body streams by.

use std::io::{self, Write};

use flate2::write::{DeflateDecoder, GzDecoder, ZlibDecoder};

use super::head::Coding;

/// Counts what the decoder writes.
#[derive(Debug, Default)]
struct Count(u64);

impl Write for Count {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Inner {
    Gzip(GzDecoder<Count>),
    Zlib(ZlibDecoder<Count>),
    Raw(DeflateDecoder<Count>),
    /// `deflate` before its first two bytes: zlib-wrapped or raw is not known yet.
    Sniff(Vec<u8>),
}

/// A streaming decoder that counts decoded bytes. A stream that fails to decode keeps the
/// count of what decoded before the failure and is flagged.
pub struct BodyDecoder {
    inner: Inner,
    failed: bool,
}

impl std::fmt::Debug for BodyDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyDecoder").field("failed", &self.failed).finish_non_exhaustive()
    }
}

fn is_zlib_header(b0: u8, b1: u8) -> bool {
    b0 & 0x0f == 8 && (u16::from(b0) << 8 | u16::from(b1)) % 31 == 0
}

impl BodyDecoder {
    /// A decoder for a body with this coding; None when there is nothing to decode.
    pub fn new(coding: Coding) -> Option<BodyDecoder> {
        let inner = match coding {
            Coding::Gzip => Inner::Gzip(GzDecoder::new(Count::default())),
            Coding::Deflate => Inner::Sniff(Vec::with_capacity(2)),
            Coding::Identity | Coding::Other => return None,
        };
        Some(BodyDecoder { inner, failed: false })
    }

    /// More body bytes (after de-chunking).
    pub fn feed(&mut self, mut data: &[u8]) {
        if self.failed || data.is_empty() {
            return;
        }
        if let Inner::Sniff(head) = &mut self.inner {
            let take = (2 - head.len()).min(data.len());
            head.extend_from_slice(&data[..take]);
            data = &data[take..];
            if head.len() < 2 {
                return;
            }
            let head = std::mem::take(head);
            self.inner = if is_zlib_header(head[0], head[1]) {
                Inner::Zlib(ZlibDecoder::new(Count::default()))
            } else {
                Inner::Raw(DeflateDecoder::new(Count::default()))
            };
            self.write(&head);
        }
        self.write(data);
    }

    fn write(&mut self, data: &[u8]) {
        let r = match &mut self.inner {
            Inner::Gzip(d) => d.write_all(data),
            Inner::Zlib(d) => d.write_all(data),
            Inner::Raw(d) => d.write_all(data),
            Inner::Sniff(_) => Ok(()),
        };
        if r.is_err() {
            self.failed = true;
        }
    }

    /// Bytes of the body were never seen (capture loss): the rest cannot be decoded.
    pub fn gap(&mut self) {
        self.failed = true;
    }

    /// The body ended: flush, and return the decoded size and whether decoding failed.
    pub fn finish(mut self) -> (u64, bool) {
        let (r, n) = match &mut self.inner {
            Inner::Gzip(d) => (d.try_finish(), d.get_ref().0),
            Inner::Zlib(d) => (d.try_finish(), d.get_ref().0),
            Inner::Raw(d) => (d.try_finish(), d.get_ref().0),
            Inner::Sniff(h) => (if h.is_empty() { Ok(()) } else { Err(io::ErrorKind::UnexpectedEof.into()) }, 0),
        };
        (n, self.failed || r.is_err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
    use flate2::Compression;

    fn text() -> Vec<u8> {
        (0..500).flat_map(|i| format!("<p>line {i} of the page</p>\n").into_bytes()).collect()
    }

    fn decoded_in_pieces(coding: Coding, body: &[u8], piece: usize) -> (u64, bool) {
        let mut d = BodyDecoder::new(coding).unwrap();
        for c in body.chunks(piece) {
            d.feed(c);
        }
        d.finish()
    }

    #[test]
    fn gzip_zlib_and_raw_deflate_count_decoded_bytes_in_any_pieces() {
        let plain = text();
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&plain).unwrap();
        let gz = gz.finish().unwrap();
        let mut zl = ZlibEncoder::new(Vec::new(), Compression::default());
        zl.write_all(&plain).unwrap();
        let zl = zl.finish().unwrap();
        let mut raw = DeflateEncoder::new(Vec::new(), Compression::default());
        raw.write_all(&plain).unwrap();
        let raw = raw.finish().unwrap();
        for piece in [1, 2, 7, 1448, 100_000] {
            assert_eq!(decoded_in_pieces(Coding::Gzip, &gz, piece), (plain.len() as u64, false), "gzip {piece}");
            assert_eq!(decoded_in_pieces(Coding::Deflate, &zl, piece), (plain.len() as u64, false), "zlib {piece}");
            assert_eq!(decoded_in_pieces(Coding::Deflate, &raw, piece), (plain.len() as u64, false), "raw {piece}");
        }
    }

    #[test]
    fn garbage_and_truncation_are_flagged_not_panics() {
        let (_, failed) = decoded_in_pieces(Coding::Gzip, b"this is not gzip at all", 5);
        assert!(failed);
        let plain = text();
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&plain).unwrap();
        let gz = gz.finish().unwrap();
        let (n, failed) = decoded_in_pieces(Coding::Gzip, &gz[..gz.len() / 2], 100);
        assert!(failed && n < plain.len() as u64);
        assert!(BodyDecoder::new(Coding::Identity).is_none() && BodyDecoder::new(Coding::Other).is_none());
    }
}
