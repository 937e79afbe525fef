//! Streaming decoder for `Transfer-Encoding: chunked` bodies.
//!
//! Holds no payload: it walks the framing byte by byte (sizes, extensions,
//! CRLFs, trailers) and hands out the data ranges in place, so a body split
//! anywhere across packets decodes the same.

/// What one call of [`ChunkedDecoder::feed`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkStep {
    /// `consumed` bytes of input were framing or data; `data` (start, len) is a range of the input that is body data.
    Progress {
        /// Bytes of input taken (framing and data).
        consumed: usize,
        /// The body data among them, as (start, len) in the input.
        data: Option<(usize, usize)>,
    },
    /// The body ended (last chunk and trailers) after `consumed` bytes of input.
    Done {
        /// Bytes of input taken, through the line feed that ends the trailers.
        consumed: usize,
    },
    /// The framing is broken (bad hex, size overflow): the body cannot be followed.
    Error {
        /// Bytes of input taken before the one that broke the framing.
        consumed: usize,
        /// What was wrong.
        reason: ChunkError,
    },
}

/// Why chunked framing could not be followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkError {
    /// A size line that does not start with a hex digit, or a byte after its digits other than
    /// `;`, space, tab, CR or LF.
    BadSize,
    /// A chunk size that does not fit in 64 bits.
    SizeOverflow,
    /// Chunk data not followed by CR LF (or a bare LF).
    MissingCrlf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading hex digits; `digits` counts them (for the "no digits" check).
    Size {
        value: u64,
        digits: u8,
    },
    /// Skipping a chunk extension or whitespace up to LF.
    SizeLineRest {
        value: u64,
    },
    Data {
        remaining: u64,
    },
    /// After data: expecting CR LF (bare LF tolerated).
    DataEnd {
        seen_cr: bool,
    },
    /// After the last chunk: at the start of a trailer line (empty line ends the body).
    TrailerLineStart {
        seen_cr: bool,
    },
    TrailerLine,
    Finished,
}

/// The chunked-framing decoder of one body: where it is in the framing, and no payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkedDecoder {
    state: State,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder { state: State::Size { value: 0, digits: 0 } }
    }
}

impl ChunkedDecoder {
    /// Whether the body has ended (the last chunk and its trailers read).
    pub fn is_finished(&self) -> bool {
        self.state == State::Finished
    }

    /// Bytes still owed by the current chunk's data, if inside one (for gap accounting).
    pub fn data_remaining(&self) -> Option<u64> {
        match self.state {
            State::Data { remaining } => Some(remaining),
            _ => None,
        }
    }

    /// Account for `len` missing bytes inside chunk data; false when the gap leaves the data (lost framing).
    pub fn skip_data(&mut self, len: u64) -> bool {
        match self.state {
            State::Data { remaining } if len <= remaining => {
                self.state = if len == remaining { State::DataEnd { seen_cr: false } } else { State::Data { remaining: remaining - len } };
                true
            }
            _ => false,
        }
    }

    /// Advance over `input`. Returns after at most one data range, so the caller can take it.
    pub fn feed(&mut self, input: &[u8]) -> ChunkStep {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Size { value, digits } => {
                    let d = match b {
                        b'0'..=b'9' => Some(b - b'0'),
                        b'a'..=b'f' => Some(b - b'a' + 10),
                        b'A'..=b'F' => Some(b - b'A' + 10),
                        _ => None,
                    };
                    match d {
                        Some(d) => {
                            if value > (u64::MAX >> 4) {
                                return ChunkStep::Error { consumed: i, reason: ChunkError::SizeOverflow };
                            }
                            self.state = State::Size { value: (value << 4) | d as u64, digits: digits.saturating_add(1) };
                        }
                        None if digits == 0 => {
                            // Tolerate stray CRLF before a size line (some servers emit an extra one).
                            if b == b'\r' || b == b'\n' {
                            } else {
                                return ChunkStep::Error { consumed: i, reason: ChunkError::BadSize };
                            }
                        }
                        None if b == b'\n' => self.end_size_line(value),
                        None if b == b';' || b == b' ' || b == b'\t' || b == b'\r' => self.state = State::SizeLineRest { value },
                        None => return ChunkStep::Error { consumed: i, reason: ChunkError::BadSize },
                    }
                    i += 1;
                }
                State::SizeLineRest { value } => {
                    if b == b'\n' {
                        self.end_size_line(value);
                    }
                    i += 1;
                }
                State::Data { remaining } => {
                    let take = remaining.min((input.len() - i) as u64) as usize;
                    let start = i;
                    i += take;
                    self.state =
                        if take as u64 == remaining { State::DataEnd { seen_cr: false } } else { State::Data { remaining: remaining - take as u64 } };
                    return ChunkStep::Progress { consumed: i, data: Some((start, take)) };
                }
                State::DataEnd { seen_cr } => {
                    match b {
                        b'\r' if !seen_cr => self.state = State::DataEnd { seen_cr: true },
                        b'\n' => self.state = State::Size { value: 0, digits: 0 },
                        _ => return ChunkStep::Error { consumed: i, reason: ChunkError::MissingCrlf },
                    }
                    i += 1;
                }
                State::TrailerLineStart { seen_cr } => {
                    i += 1;
                    match b {
                        b'\r' if !seen_cr => self.state = State::TrailerLineStart { seen_cr: true },
                        b'\n' => {
                            self.state = State::Finished;
                            return ChunkStep::Done { consumed: i };
                        }
                        _ => self.state = State::TrailerLine,
                    }
                }
                State::TrailerLine => {
                    if b == b'\n' {
                        self.state = State::TrailerLineStart { seen_cr: false };
                    }
                    i += 1;
                }
                State::Finished => return ChunkStep::Done { consumed: i },
            }
        }
        ChunkStep::Progress { consumed: i, data: None }
    }

    fn end_size_line(&mut self, value: u64) {
        self.state = if value == 0 { State::TrailerLineStart { seen_cr: false } } else { State::Data { remaining: value } };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decode `input` fed in pieces of `step` bytes; returns (data, finished, error).
    pub(crate) fn decode_in_steps(input: &[u8], step: usize) -> (Vec<u8>, bool, Option<ChunkError>) {
        let mut d = ChunkedDecoder::default();
        let mut out = Vec::new();
        for piece in input.chunks(step.max(1)) {
            let mut rest = piece;
            while !rest.is_empty() {
                match d.feed(rest) {
                    ChunkStep::Progress { consumed, data } => {
                        if let Some((s, n)) = data {
                            out.extend_from_slice(&rest[s..s + n]);
                        }
                        rest = &rest[consumed..];
                    }
                    ChunkStep::Done { .. } => return (out, true, None),
                    ChunkStep::Error { reason, .. } => return (out, false, Some(reason)),
                }
            }
        }
        (out, d.is_finished(), None)
    }

    #[test]
    fn decodes_across_every_split() {
        let body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\n";
        for step in 1..body.len() {
            let (data, done, err) = decode_in_steps(body, step);
            assert_eq!(err, None);
            assert!(done, "step {step}");
            assert_eq!(data, b"Wikipedia in\r\n\r\nchunks.");
        }
    }

    #[test]
    fn size_overflow_is_an_error() {
        let (_, done, err) = decode_in_steps(b"10000000000000000\r\n", 3);
        assert!(!done);
        assert_eq!(err, Some(ChunkError::SizeOverflow));
    }

    #[test]
    fn garbage_size_is_an_error() {
        assert_eq!(decode_in_steps(b"zz\r\n", 1).2, Some(ChunkError::BadSize));
        assert_eq!(decode_in_steps(b"2\r\nabX", 100).2, Some(ChunkError::MissingCrlf));
    }

    #[test]
    fn bare_lf_is_tolerated() {
        let (data, done, _) = decode_in_steps(b"3\nabc\n0\n\n", 2);
        assert!(done);
        assert_eq!(data, b"abc");
    }
}
