//! Transfer-time prediction for `IF PREDICTED RT > goal` (004 section 6.4, Figure 20; equation
//! 1 and Figure 8): how long an object of a given size takes to reach a client, from online
//! means of what rlm measured passively, grouped by (size, RTT, loss), and from the TCP latency
//! model of Cardwell, Savage and Anderson (INFOCOM 2000, 004's reference \[10\]) for groups not
//! seen often enough yet.
//!
//! A sample is an object's T_transfer as 004 Figure 2 has it: from the server's first response
//! byte to the client's last, that is the response's span at the appliance plus half the
//! client's RTT.

use std::time::Duration;

use crate::bounded::GenMap;

/// Size buckets: ≤1 KiB, ≤2 KiB, ... ≤1 MiB, and larger (log2).
pub const SIZE_BUCKETS: usize = 12;
/// RTT buckets of 20 ms up to 1 s, and longer.
pub const RTT_BUCKETS: usize = 51;
const RTT_BUCKET_MS: u64 = 20;
/// Loss buckets: < 0.5%, < 1%, < 2%, < 4%, < 8%, < 16%, and more.
pub const LOSS_BUCKETS: usize = 7;
const LOSS_EDGES: [f64; LOSS_BUCKETS - 1] = [0.005, 0.01, 0.02, 0.04, 0.08, 0.16];
/// A cell's mean is trusted from this many samples on; before, the model answers.
pub const MIN_SAMPLES: u32 = 8;

/// The parameters of the model's TCP sender and receiver.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpParams {
    /// Maximum segment size (bytes).
    pub mss: u32,
    /// Initial congestion window (segments): 10 on today's Linux (RFC 6928).
    pub initial_window: f64,
    /// Largest window (segments), the receiver's.
    pub max_window: f64,
    /// Segments acknowledged per ACK (2 with delayed ACKs).
    pub acked_per_ack: f64,
    /// The retransmission timeout beyond the RTT (Linux's minimum RTO is 200 ms).
    pub rto_extra: Duration,
}

impl Default for TcpParams {
    fn default() -> TcpParams {
        TcpParams { mss: 1448, initial_window: 10.0, max_window: 1000.0, acked_per_ack: 2.0, rto_extra: Duration::from_millis(200) }
    }
}

/// The expected time to transfer `size` bytes over a path of round-trip time `rtt` and segment
/// loss rate `loss` (Cardwell et al., section 3: initial slow start, the loss that ends it,
/// then congestion avoidance at the PFTK steady-state rate; no delayed-ACK wait, since Linux
/// acknowledges at once at a connection's start).
pub fn model(size: u64, rtt: Duration, loss: f64, tcp: &TcpParams) -> Duration {
    let rtt_s = rtt.as_secs_f64();
    let d = size.div_ceil(u64::from(tcp.mss.max(1))) as f64;
    if d == 0.0 {
        return Duration::ZERO;
    }
    let p = loss.clamp(0.0, 0.5);
    let (b, w1, wmax) = (tcp.acked_per_ack, tcp.initial_window, tcp.max_window);
    let gamma = 1.0 + 1.0 / b;
    let t0 = rtt_s + tcp.rto_extra.as_secs_f64();
    let log_g = |x: f64| x.ln() / gamma.ln();
    let q1 = 1.0 - p;
    // Data segments sent in the initial slow start, and the window it reaches.
    let d_ss = if p == 0.0 { d } else { ((1.0 - q1.powf(d)) * q1 / p + 1.0).min(d) };
    let w_ss = d_ss * (gamma - 1.0) / gamma + w1 / gamma;
    let t_ss = if w_ss > wmax {
        rtt_s * (log_g(wmax / w1) + 1.0 + (d_ss - (gamma * wmax - w1) / (gamma - 1.0)) / wmax)
    } else {
        rtt_s * log_g(d_ss * (gamma - 1.0) / w1 + 1.0)
    };
    if p == 0.0 {
        return Duration::from_secs_f64(t_ss.max(0.0));
    }
    // The probability that a loss is detected by a timeout rather than by triple duplicate
    // ACKs, in a window of w segments (PFTK's Q).
    let q = |w: f64| -> f64 {
        if w <= 3.0 {
            return 1.0;
        }
        let a = 1.0 - q1.powi(3);
        let num = a * (1.0 + q1.powi(3) * (1.0 - q1.powf(w - 3.0)));
        let den = 1.0 - q1.powf(w);
        if den <= 0.0 {
            1.0
        } else {
            (num / den).min(1.0)
        }
    };
    let g = 1.0 + p + 2.0 * p.powi(2) + 4.0 * p.powi(3) + 8.0 * p.powi(4) + 16.0 * p.powi(5) + 32.0 * p.powi(6);
    let timeout = g * t0 / (1.0 - p);
    // The loss that ends slow start (if one happens in it).
    let l_ss = 1.0 - q1.powf(d);
    let t_loss = l_ss * (q(w_ss) * timeout + (1.0 - q(w_ss)) * rtt_s);
    // What is left goes at the steady-state rate.
    let d_ca = (d - d_ss).max(0.0);
    let t_ca = if d_ca > 0.0 {
        let k = (2.0 + b) / (3.0 * b);
        let w = k + (8.0 * q1 / (3.0 * b * p) + k * k).sqrt();
        let rate = if w < wmax {
            (q1 / p + w / 2.0 + q(w)) / (rtt_s * (b / 2.0 * w + 1.0) + q(w) * timeout)
        } else {
            (q1 / p + wmax / 2.0 + q(wmax)) / (rtt_s * (b / 8.0 * wmax + q1 / (p * wmax) + 2.0) + q(wmax) * timeout)
        };
        d_ca / rate
    } else {
        0.0
    };
    Duration::from_secs_f64((t_ss + t_loss + t_ca).max(0.0))
}

/// Where a prediction came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The mean of this many samples measured in the object's (size, RTT, loss) cell.
    Measured(u32),
    /// The model (the cell had fewer than [`MIN_SAMPLES`]).
    Model,
}

#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    mean_s: f32,
    n: u32,
}

/// Online means of T_transfer per (size, RTT, loss) cell, with the model behind them.
#[derive(Clone, Debug)]
pub struct Predictor {
    cells: Vec<Cell>,
    /// The TCP sender and receiver the model assumes (for cells with too few samples).
    pub tcp: TcpParams,
}

impl Default for Predictor {
    fn default() -> Predictor {
        Predictor { cells: vec![Cell::default(); SIZE_BUCKETS * RTT_BUCKETS * LOSS_BUCKETS], tcp: TcpParams::default() }
    }
}

fn size_bucket(size: u64) -> usize {
    // ≤1 KiB → 0, ≤2 KiB → 1, ..., ≤1 MiB → 10, larger → 11.
    let kib = size.div_ceil(1024).max(1);
    ((64 - (kib - 1).leading_zeros()) as usize).min(SIZE_BUCKETS - 1)
}

fn rtt_bucket(rtt: Duration) -> usize {
    ((rtt.as_millis() as u64 / RTT_BUCKET_MS) as usize).min(RTT_BUCKETS - 1)
}

fn loss_bucket(loss: f64) -> usize {
    LOSS_EDGES.iter().position(|&e| loss < e).unwrap_or(LOSS_BUCKETS - 1)
}

impl Predictor {
    fn cell(&self, size: u64, rtt: Duration, loss: f64) -> usize {
        (size_bucket(size) * RTT_BUCKETS + rtt_bucket(rtt)) * LOSS_BUCKETS + loss_bucket(loss)
    }

    /// A measured T_transfer of an object of `size` bytes to a client on a path of `rtt` and
    /// `loss`: an arithmetic mean up to [`MIN_SAMPLES`], then a moving average (weight 1/8).
    pub fn observe(&mut self, size: u64, rtt: Duration, loss: f64, transfer: Duration) {
        let i = self.cell(size, rtt, loss);
        let c = &mut self.cells[i];
        let t = transfer.as_secs_f64().min(3600.0) as f32;
        c.n = c.n.saturating_add(1);
        let w = if c.n <= MIN_SAMPLES { 1.0 / c.n as f32 } else { 1.0 / 8.0 };
        c.mean_s += (t - c.mean_s) * w;
    }

    /// The expected T_transfer of an object of `size` bytes to a client on a path of `rtt` and
    /// `loss`, and what it rests on.
    pub fn predict(&self, size: u64, rtt: Duration, loss: f64) -> (Duration, Basis) {
        let c = self.cells[self.cell(size, rtt, loss)];
        if c.n >= MIN_SAMPLES {
            (Duration::from_secs_f64(f64::from(c.mean_s)), Basis::Measured(c.n))
        } else {
            (model(size, rtt, loss, &self.tcp), Basis::Model)
        }
    }
}

/// Where a pageview stands when an object of it is decided on: its elapsed time, and the
/// client's path.
#[derive(Clone, Copy, Debug)]
pub struct Standing {
    /// The pageview's time so far (zero when it is not known).
    pub elapsed: Duration,
    /// The client's round-trip time (zero when it is not known).
    pub rtt: Duration,
    /// The client's segment loss rate, a fraction (0 when it is not known).
    pub loss: f64,
}

/// What `IF PREDICTED RT > goal` (or `>=`, `at_least`) says of one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The object's size is not known yet: it is left alone.
    NoSize,
    /// Whether elapsed + predicted transfer passes the goal, and what the prediction rests on.
    Made {
        /// Elapsed time plus the predicted transfer passes the goal (`>`, or `>=` for `at_least`).
        passes: bool,
        /// What the prediction rests on.
        basis: Basis,
    },
}

impl Predictor {
    /// Whether fetching an object of `size` bytes would take the pageview past `goal`.
    pub fn judge(&self, size: Option<u64>, at: &Standing, at_least: bool, goal: Duration) -> Verdict {
        let Some(size) = size else { return Verdict::NoSize };
        let (t, basis) = self.predict(size, at.rtt, at.loss);
        let rt = at.elapsed + t;
        Verdict::Made { passes: if at_least { rt >= goal } else { rt > goal }, basis }
    }
}

/// Most clients (or objects) a table keeps. Past half of it, a new one makes the older half go
/// (those written to least recently), never the whole table: the `MAX_ENTRIES / 2` written to
/// last always stay, however many made-up ones come.
pub const MAX_ENTRIES: usize = 65_536;

/// Per-client segment loss, measured passively: a moving average (weight 1/8) over each closed
/// connection of the server's retransmitted segments against the segments it sent. The clients
/// whose connections closed last are kept (see [`MAX_ENTRIES`]).
#[derive(Clone, Debug, Default)]
pub struct ClientLoss {
    map: GenMap<std::net::IpAddr, f32, MAX_ENTRIES>,
}

impl ClientLoss {
    /// A connection of `client` closed after the server sent `bytes` of new data in segments
    /// of about `mss`, and `retransmits` segments again.
    pub fn on_conn(&mut self, client: std::net::IpAddr, bytes: u64, retransmits: u32, mss: u32) {
        let sent = bytes.div_ceil(u64::from(mss.max(1))) + u64::from(retransmits);
        if sent == 0 {
            return;
        }
        let x = retransmits as f32 / sent as f32;
        let e = self.map.get_or_insert_with(client, || x);
        *e += (x - *e) / 8.0;
    }

    /// The client's loss estimate (0 when unknown).
    pub fn of(&self, client: std::net::IpAddr) -> f64 {
        self.map.get(&client).map_or(0.0, |&e| f64::from(e))
    }

    /// Clients with an estimate.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no client has an estimate.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The size of each object served (its response body's bytes on the wire), by request key
/// (`host` and target as sent); the last one seen wins. The objects whose sizes were recorded
/// last are kept (see [`MAX_ENTRIES`]). A key is kept as a 64-bit hash, keyed afresh for each
/// cache (so that keys cannot be chosen to collide), not as its text: a full cache holds about
/// 2.2 MB of heap (16 bytes an object and its tables' slack) however long the targets. Keys whose
/// hashes collide share a size: with a full table, a chance of about 2^-48 per look-up.
#[derive(Clone, Debug, Default)]
pub struct SizeCache {
    map: GenMap<u64, u64, MAX_ENTRIES>,
    keys: ahash::RandomState,
}

impl SizeCache {
    /// Record the size of the object under `key` (see [`size_key`]).
    pub fn insert(&mut self, key: String, bytes: u64) {
        self.map.insert(self.keys.hash_one(key.as_str()), bytes);
    }

    /// The last size seen of the object under `key`, in bytes.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.map.get(&self.keys.hash_one(key)).copied()
    }

    /// Objects with a size.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no object has a size.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The key of an object in the [`SizeCache`]: its host (or server) and its target as sent.
pub fn size_key(host: Option<&str>, server: &str, target: &str) -> String {
    format!("{}{target}", host.unwrap_or(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(size: u64, rtt_ms: u64, loss: f64) -> f64 {
        model(size, Duration::from_millis(rtt_ms), loss, &TcpParams::default()).as_secs_f64()
    }

    #[test]
    fn the_model_grows_with_size_rtt_and_loss() {
        let sizes = [1_000, 10_000, 100_000, 256_000, 1_000_000, 4_000_000];
        for w in sizes.windows(2) {
            assert!(secs(w[0], 160, 0.02) <= secs(w[1], 160, 0.02), "size {w:?}");
        }
        for w in [20, 80, 160, 300, 600].windows(2) {
            assert!(secs(256_000, w[0], 0.02) < secs(256_000, w[1], 0.02), "rtt {w:?}");
        }
        for w in [0.0, 0.005, 0.02, 0.05, 0.1].windows(2) {
            assert!(secs(256_000, 160, w[0]) < secs(256_000, 160, w[1]), "loss {w:?}");
        }
    }

    #[test]
    fn without_loss_it_is_slow_start_rounds() {
        // 10 segments fit the initial window: about one round's worth (log_1.5 of 1.5 = 1).
        let one = secs(14_480, 100, 0.0);
        assert!((one - 0.1).abs() < 1e-6, "{one}");
        // Each round grows the window by half: 100 segments take log_1.5(100 * 0.5 / 10 + 1).
        let hundred = secs(144_800, 100, 0.0);
        assert!((hundred - 0.1 * (6.0f64).ln() / 1.5f64.ln()).abs() < 1e-6, "{hundred}");
    }

    #[test]
    fn logarithmic_when_small_and_linear_when_large() {
        // 004 Figure 8 (80 ms, 2%): the latency of small transfers grows with the log of their
        // size; past slow start it grows in proportion.
        let (a, b, c) = (secs(2_000_000, 80, 0.02), secs(4_000_000, 80, 0.02), secs(8_000_000, 80, 0.02));
        assert!(((c - b) / (b - a) - 2.0).abs() < 0.05, "{a} {b} {c}");
        let (s1, s2, s3) = (secs(4_000, 80, 0.0), secs(40_000, 80, 0.0), secs(400_000, 80, 0.0));
        assert!(s3 - s2 < 3.0 * (s2 - s1), "{s1} {s2} {s3}");
    }

    #[test]
    fn a_256kb_image_at_the_papers_rtts_is_of_the_order_004_measured() {
        // 004 section 6.4's predictions (its measured means): 6.17, 8.11 and 11.05 s at 160,
        // 220 and 300 ms and 2% loss, from servers of its time (initial window 2). The model
        // gives 5.47, 7.43 and 10.03 s: within 12%.
        let old = TcpParams { initial_window: 2.0, ..TcpParams::default() };
        for (rtt, paper) in [(160, 6.17), (220, 8.11), (300, 11.05)] {
            let t = model(262_144, Duration::from_millis(rtt), 0.02, &old).as_secs_f64();
            assert!((t / paper - 1.0).abs() < 0.15, "{rtt} ms: {t:.2} s against 004's {paper} s");
        }
    }

    #[test]
    fn cells_answer_once_they_have_enough_samples() {
        let mut p = Predictor::default();
        let (size, rtt) = (256_000, Duration::from_millis(300));
        assert_eq!(p.predict(size, rtt, 0.02).1, Basis::Model);
        for _ in 0..MIN_SAMPLES - 1 {
            p.observe(size, rtt, 0.02, Duration::from_secs(4));
        }
        assert_eq!(p.predict(size, rtt, 0.02).1, Basis::Model);
        p.observe(250_000, Duration::from_millis(305), 0.025, Duration::from_secs(6));
        let (t, basis) = p.predict(size, rtt, 0.02);
        assert_eq!(basis, Basis::Measured(MIN_SAMPLES));
        assert!((t.as_secs_f64() - 4.25).abs() < 1e-3, "{t:?}");
        // Another cell is untouched.
        assert_eq!(p.predict(size, Duration::from_millis(160), 0.02).1, Basis::Model);
        assert_eq!(p.predict(2_000, rtt, 0.02).1, Basis::Model);
    }

    #[test]
    fn buckets_cover_every_input() {
        assert_eq!((size_bucket(0), size_bucket(1024), size_bucket(1025), size_bucket(1 << 20), size_bucket(u64::MAX)), (0, 0, 1, 10, 11));
        assert_eq!((rtt_bucket(Duration::ZERO), rtt_bucket(Duration::from_millis(159)), rtt_bucket(Duration::from_secs(9))), (0, 7, 50));
        assert_eq!((loss_bucket(0.0), loss_bucket(0.02), loss_bucket(1.0)), (0, 3, 6));
        let p = Predictor::default();
        let _ = p.predict(u64::MAX, Duration::MAX, f64::NAN);
    }

    #[test]
    fn client_loss_is_a_moving_average_over_connections_and_the_table_is_bounded() {
        let mut l = ClientLoss::default();
        let a: std::net::IpAddr = "10.6.0.1".parse().unwrap();
        assert_eq!(l.of(a), 0.0);
        // 98 new segments and 2 resent: 2%, an eighth of the way from 0.
        l.on_conn(a, 98 * 1448, 2, 1448);
        assert!((l.of(a) - 0.02).abs() < 1e-6, "{}", l.of(a));
        for _ in 0..200 {
            l.on_conn(a, 95 * 1448, 5, 1448);
        }
        assert!((l.of(a) - 0.05).abs() < 1e-3, "{}", l.of(a));
        l.on_conn(a, 0, 0, 1448);
        assert!((l.of(a) - 0.05).abs() < 1e-3);
        for i in 0..(MAX_ENTRIES as u32 + 10) {
            l.on_conn(std::net::IpAddr::from(i.to_be_bytes()), 1448, 0, 1448);
        }
        assert!(l.len() <= MAX_ENTRIES);
    }

    #[test]
    fn the_size_cache_keeps_the_last_size_and_stays_bounded() {
        let mut c = SizeCache::default();
        c.insert(size_key(Some("shop"), "10.9.0.1:80", "/img/large/1.gif"), 262_144);
        c.insert(size_key(None, "10.9.0.1:80", "/img/a.gif"), 500);
        assert_eq!(c.get("shop/img/large/1.gif"), Some(262_144));
        assert_eq!(c.get("10.9.0.1:80/img/a.gif"), Some(500));
        c.insert("shop/img/large/1.gif".into(), 16_384);
        assert_eq!(c.get("shop/img/large/1.gif"), Some(16_384));
        for i in 0..MAX_ENTRIES + 5 {
            c.insert(format!("k{i}"), 1);
        }
        assert!(c.len() <= MAX_ENTRIES);
    }

    #[test]
    fn made_up_clients_leave_the_newest_half_of_loss_estimates() {
        let mut l = ClientLoss::default();
        let ip = |i: u32| std::net::IpAddr::from(i.to_be_bytes());
        for i in 0..100 {
            l.on_conn(ip(i), 98 * 1448, 2, 1448);
        }
        assert!((0..100).all(|i| l.of(ip(i)) > 0.0));
        // Every made-up client has some loss, so that its estimate tells it is kept.
        let made_up = |i: usize| ip(0x0a00_0000 + i as u32);
        for i in 0..MAX_ENTRIES {
            l.on_conn(made_up(i), 98 * 1448, 2, 1448);
            let written = 100 + i + 1;
            assert!(l.len() >= written.min(MAX_ENTRIES / 2) && l.len() <= MAX_ENTRIES, "{written} clients, {} kept", l.len());
        }
        assert!((MAX_ENTRIES / 2..MAX_ENTRIES).all(|i| l.of(made_up(i)) > 0.0), "the newest half is kept");
    }

    #[test]
    fn made_up_objects_leave_the_newest_half_of_sizes() {
        let mut c = SizeCache::default();
        let real: Vec<String> = (0..100).map(|i| size_key(Some("shop"), "", &format!("/img/{i}.gif"))).collect();
        for (i, k) in real.iter().enumerate() {
            c.insert(k.clone(), i as u64);
        }
        for (i, k) in real.iter().enumerate() {
            assert_eq!(c.get(k), Some(i as u64));
        }
        let made_up = |i: usize| format!("shop/made-up/{i}");
        for i in 0..MAX_ENTRIES {
            c.insert(made_up(i), 1_000 + i as u64);
            let written = real.len() + i + 1;
            assert!(c.len() >= written.min(MAX_ENTRIES / 2) && c.len() <= MAX_ENTRIES, "{written} objects, {} kept", c.len());
        }
        for i in MAX_ENTRIES / 2..MAX_ENTRIES {
            assert_eq!(c.get(&made_up(i)), Some(1_000 + i as u64), "the newest half is kept");
        }
    }
}
