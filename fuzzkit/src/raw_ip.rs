//! Frames as NFQUEUE hands them to `rlm run`: bare IPv4 and IPv6 packets (`LinkType::RawIp`),
//! arbitrary bytes or TCP segments of 16 connections, on the port the input says, into
//! `Engine::handle_link`, under one of the rule files (or none) with adaptation and injection on.
//! Nothing may panic; a rewritten packet (`Verdict::Replace`) is as long as the one given, and
//! when that one was a well-formed segment the rewrite is one too, with good checksums; what the
//! engine sends decodes with good checksums.

use arbitrary::{Arbitrary, Unstructured};
use rlm_core::wire::LinkType;
use rlm_core::{Config, Engine, Port, Timestamp, Verdict};

use crate::net::{self, Seg, Seqs};
use crate::rulefiles;
use crate::seed::Enc;

/// One operation.
#[derive(Arbitrary, Clone, Debug, PartialEq)]
pub enum Op {
    /// A packet as it is, on port `port % 3` (client, server, unknown).
    Packet {
        port: u8,
        bytes: Vec<u8>,
    },
    /// A segment of connection `conn`, to server port 80 or 8080 (`server_port` bit 0).
    Segment {
        conn: u8,
        to_server: bool,
        port: u8,
        server_port: u8,
        seq_delta: i16,
        ack_delta: i16,
        flags: u8,
        snippet: u8,
        payload: Vec<u8>,
    },
    Tick {
        ms: u16,
    },
}

/// The input: rule file `rules` (past the last: none), then the operations.
#[derive(Arbitrary, Clone, Debug, PartialEq)]
pub struct Input {
    pub rules: u8,
    pub ops: Vec<Op>,
}

fn port_of(p: u8) -> Port {
    match p % 3 {
        0 => Port::Client,
        1 => Port::Server,
        _ => Port::Unknown,
    }
}

/// The target.
pub fn raw_ip(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let cfg = Config { server_ports: vec![80, 8080], max_connections: 8, inject: true, adapt: true, ..Config::default() };
    let mut e = Engine::new(cfg);
    let r = usize::from(input.rules);
    e.set_rules((r < rulefiles::COUNT).then(|| rulefiles::compiled(r)));
    let mut now = 1_000_000_000u64;
    let mut seqs = Seqs::default();
    for op in input.ops.iter().take(2000) {
        let (port, frame, good) = match op {
            Op::Packet { port, bytes } => (port_of(*port), bytes.clone(), false),
            Op::Segment { conn, to_server, port, server_port, seq_delta, ack_delta, flags, snippet, payload } => {
                let server_port = if server_port & 1 == 0 { 80 } else { 8080 };
                let s = Seg {
                    conn: *conn,
                    to_server: *to_server,
                    server_port,
                    seq_delta: *seq_delta,
                    ack_delta: *ack_delta,
                    flags: *flags,
                    snippet: *snippet,
                    payload,
                };
                (port_of(*port), seqs.frame(LinkType::RawIp, s), true)
            }
            Op::Tick { ms } => {
                now += u64::from(*ms) * 1_000_000;
                while let Some(t) = e.poll_timeout() {
                    if t.as_nanos() > now {
                        break;
                    }
                    e.handle_timeout(t);
                }
                continue;
            }
        };
        if let Verdict::Replace(b) = e.handle_link(Timestamp(now), port, LinkType::RawIp, &frame) {
            assert_eq!(b.len(), frame.len(), "a rewritten packet of another length");
            if good {
                if let Err(why) = net::check_tcp(LinkType::RawIp, &b) {
                    panic!("a rewritten packet {why}: {b:02x?}");
                }
            }
        }
        now += 1_000;
        while e.poll_event().is_some() {}
        while let Some(t) = e.poll_transmit() {
            if let Err(why) = net::check_tcp(LinkType::Ethernet, &t.frame) {
                panic!("a frame sent {why}: {:02x?}", t.frame);
            }
        }
    }
    e.shutdown(Timestamp(now));
    while e.poll_event().is_some() {}
}

/// `input` in the bytes [`raw_ip`] reads it from.
pub fn encode(input: &Input) -> Vec<u8> {
    let mut w = Enc::default();
    w.u8(input.rules);
    for op in &input.ops {
        w.more();
        match op {
            Op::Packet { port, bytes } => w.variant(0, 3).u8(*port).bytes(bytes),
            Op::Segment { conn, to_server, port, server_port, seq_delta, ack_delta, flags, snippet, payload } => w
                .variant(1, 3)
                .u8(*conn)
                .bool(*to_server)
                .u8(*port)
                .u8(*server_port)
                .i16(*seq_delta)
                .i16(*ack_delta)
                .u8(*flags)
                .u8(*snippet)
                .bytes(payload),
            Op::Tick { ms } => w.variant(2, 3).u16(*ms),
        };
    }
    w.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_inputs_decode_to_themselves() {
        let input = Input {
            rules: 7,
            ops: vec![
                Op::Packet { port: 2, bytes: vec![0x45, 0, 1] },
                Op::Segment {
                    conn: 13,
                    to_server: false,
                    port: 1,
                    server_port: 1,
                    seq_delta: 3,
                    ack_delta: -1,
                    flags: 18,
                    snippet: 3,
                    payload: b"x".to_vec(),
                },
                Op::Tick { ms: 65_000 },
            ],
        };
        assert_eq!(Input::arbitrary_take_rest(Unstructured::new(&encode(&input))).unwrap(), input);
    }
}
