//! What the engine's deterministic tests share: a run of an engine fed frames at chosen times,
//! collecting what it reports.
#![allow(dead_code)]

use rlm_core::testkit::TcpConv;
use rlm_core::{Config, Engine, Event, PageviewRecord, Port, Timestamp, TransactionRecord};

/// Appliance-side time base (seconds), so client-side estimates never go below zero.
pub const BASE_S: u64 = 1_000;
pub const RTT_MS: u64 = 80;

pub struct Run {
    pub engine: Engine,
    pub tx: Vec<TransactionRecord>,
    pub pv: Vec<PageviewRecord>,
    pub decisions: Vec<rlm_core::DecisionRecord>,
    /// The verdict on the last frame fed.
    pub verdict: Option<rlm_core::Verdict>,
}

pub fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(BASE_S * 1000 + ms)
}

pub fn secs(ts: f64) -> f64 {
    ts - BASE_S as f64
}

impl Run {
    pub fn new() -> Run {
        Run::with(Config::default())
    }
    pub fn with(cfg: Config) -> Run {
        Run { engine: Engine::new(cfg), tx: Vec::new(), pv: Vec::new(), decisions: Vec::new(), verdict: None }
    }
    pub fn advance(&mut self, ms: u64) {
        let now = at(ms);
        while let Some(t) = self.engine.poll_timeout() {
            if t > now {
                break;
            }
            self.engine.handle_timeout(t);
        }
        self.drain();
    }
    pub fn feed(&mut self, ms: u64, frame: Vec<u8>) {
        self.advance(ms);
        self.verdict = Some(self.engine.handle(at(ms), Port::Unknown, &frame));
        self.drain();
    }
    pub fn feed_all(&mut self, ms: u64, frames: Vec<Vec<u8>>) {
        for f in frames {
            self.feed(ms, f);
        }
    }
    pub fn drain(&mut self) {
        while let Some(ev) = self.engine.poll_event() {
            match ev {
                Event::Transaction(t) => self.tx.push(t),
                Event::Pageview(p) => self.pv.push(p),
                Event::Decision(d) => self.decisions.push(d),
                Event::Tls(_) => {}
            }
        }
    }
    pub fn finish(&mut self, ms: u64) {
        self.advance(ms);
        self.engine.shutdown(at(ms));
        self.drain();
    }
}

/// Handshake with the client's RTT: SYN and SYN/ACK at `t`, the ACK one RTT later.
pub fn handshake(r: &mut Run, c: &mut TcpConv, t: u64) {
    r.feed(t, c.syn());
    r.feed(t, c.synack());
    r.feed(t + RTT_MS, c.ack());
}

pub fn approx(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}
