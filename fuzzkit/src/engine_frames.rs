//! Arbitrary frame sequences through the engine: raw bytes, and TCP segments of a few
//! connections with arbitrary flags, sequence offsets and payloads (HTTP-flavoured or not),
//! interleaved with timer ticks; any of them may come cut (its first bytes, and a longer length
//! on the wire, as the fast path reports a super-frame). The engine must never panic or hang.

use arbitrary::{Arbitrary, Unstructured};
use rlm_core::wire::LinkType;
use rlm_core::{Config, Engine, Port, Timestamp};

use crate::seed::Enc;

/// Hand `frame` over whole, or cut: its first `keep` bytes, `more` bytes longer on the wire.
fn feed(e: &mut Engine, now: u64, port: Port, frame: &[u8], cut: Option<(u16, u16)>) {
    match cut {
        None => {
            e.handle(Timestamp(now), port, frame);
        }
        Some((keep, more)) => {
            let keep = (keep as usize).min(frame.len());
            e.handle_cut(Timestamp(now), port, LinkType::Ethernet, &frame[..keep], frame.len() + more as usize);
        }
    }
}

const SNIPPETS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
    b"<img src=\"/a.gif\"><link rel=stylesheet href=b.css>",
    b"5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"CONNECT h:443 HTTP/1.1\r\n\r\n",
];

/// One operation.
#[derive(Arbitrary, Clone, Debug, PartialEq)]
pub enum Op {
    /// A frame as it is, on port `port % 3` (client, server, unknown).
    Raw {
        port: u8,
        bytes: Vec<u8>,
        cut: Option<(u16, u16)>,
    },
    Segment {
        conn: u8,
        to_server: bool,
        seq_delta: i16,
        ack_delta: i16,
        flags: u8,
        snippet: u8,
        payload: Vec<u8>,
        cut: Option<(u16, u16)>,
    },
    Tick {
        ms: u16,
    },
}

fn tcp_frame(conn: u8, to_server: bool, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let client = std::net::SocketAddr::from(([10, 4, 0, conn % 8], 40_000 + u16::from(conn % 8)));
    let server = std::net::SocketAddr::from(([10, 9, 0, 1], 80));
    let (src, dst) = if to_server { (client, server) } else { (server, client) };
    crate::net::tcp_frame(LinkType::Ethernet, src, dst, seq, ack, flags, payload)
}

/// The target: `data` read as a sequence of [`Op`]s.
pub fn engine_frames(data: &[u8]) {
    let Ok(ops) = Vec::<Op>::arbitrary_take_rest(Unstructured::new(data)) else { return };
    run(&ops);
}

fn run(ops: &[Op]) {
    let cfg = Config { max_connections: 4, ..Config::default() };
    let mut e = Engine::new(cfg);
    let mut now = 1_000_000_000u64;
    let mut seqs = [[1000u32; 2]; 8];
    for op in ops.iter().take(2000) {
        match op {
            Op::Raw { port, bytes, cut } => {
                let p = match port % 3 {
                    0 => Port::Client,
                    1 => Port::Server,
                    _ => Port::Unknown,
                };
                feed(&mut e, now, p, bytes, *cut);
            }
            Op::Segment { conn, to_server, seq_delta, ack_delta, flags, snippet, payload, cut } => {
                let c = (*conn % 8) as usize;
                let dir = usize::from(!*to_server);
                let mut data = Vec::new();
                if (*snippet as usize) < SNIPPETS.len() {
                    data.extend_from_slice(SNIPPETS[*snippet as usize]);
                }
                data.extend_from_slice(payload);
                let seq = seqs[c][dir].wrapping_add(*seq_delta as i32 as u32);
                let ack = seqs[c][1 - dir].wrapping_add(*ack_delta as i32 as u32);
                let f = tcp_frame(*conn, *to_server, seq, ack, *flags, &data);
                seqs[c][dir] = seq.wrapping_add(data.len() as u32 + u32::from(flags & 5 != 0));
                feed(&mut e, now, Port::Unknown, &f, *cut);
            }
            Op::Tick { ms } => {
                now += *ms as u64 * 1_000_000;
                while let Some(t) = e.poll_timeout() {
                    if t.as_nanos() > now {
                        break;
                    }
                    e.handle_timeout(t);
                }
            }
        }
        now += 1_000;
        while e.poll_event().is_some() {}
    }
    e.shutdown(Timestamp(now));
    while e.poll_event().is_some() {}
}

/// `ops` in the bytes [`engine_frames`] reads them from.
pub fn encode(ops: &[Op]) -> Vec<u8> {
    let mut w = Enc::default();
    for op in ops {
        w.more();
        match op {
            Op::Raw { port, bytes, cut } => w.variant(0, 3).u8(*port).bytes(bytes).opt_u16_pair(*cut),
            Op::Segment { conn, to_server, seq_delta, ack_delta, flags, snippet, payload, cut } => {
                w.variant(1, 3).u8(*conn).bool(*to_server).i16(*seq_delta).i16(*ack_delta).u8(*flags).u8(*snippet).bytes(payload).opt_u16_pair(*cut)
            }
            Op::Tick { ms } => w.variant(2, 3).u16(*ms),
        };
    }
    w.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_ops_decode_to_themselves() {
        let ops = vec![
            Op::Raw { port: 1, bytes: vec![1, 2, 3], cut: None },
            Op::Segment {
                conn: 3,
                to_server: true,
                seq_delta: -5,
                ack_delta: 7,
                flags: 3,
                snippet: 2,
                payload: b"ab".to_vec(),
                cut: Some((10, 300)),
            },
            Op::Tick { ms: 700 },
        ];
        let bytes = encode(&ops);
        assert_eq!(Vec::<Op>::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap(), ops);
    }
}
