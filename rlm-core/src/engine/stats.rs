//! The engine's counters and table sizes, for metrics, status and bounds tests.

use serde::Serialize;

/// Sizes of the engine's tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TableSizes {
    /// Connections tracked.
    pub connections: usize,
    /// Timers pending (the stale ones not yet compacted away included).
    pub timers: usize,
    /// Pageviews open.
    pub open_pageviews: usize,
    /// Deadlines of open pageviews pending (superseded ones not yet compacted away included).
    pub pageview_deadlines: usize,
    /// Clients whose last RTT is remembered.
    pub client_rtts: usize,
    /// Connections with acts of rlm (a SYN dropped, resent, ...) not yet counted on a pageview:
    /// at most the connections tracked.
    pub pending_acts: usize,
    /// Bytes all connections hold for later (partial heads, waiting requests, out-of-order
    /// segments), against `Config::max_held_bytes`.
    pub held_bytes: usize,
    /// Bytes the open pageviews' lists hold, against `PageviewConfig::max_list_bytes`.
    pub pageview_list_bytes: usize,
    /// QUIC flows remembered, against [`crate::quic::MAX_QUIC_FLOWS`].
    pub quic_flows: usize,
    /// Connections whose body the kernel was told need not be seen, until that body is over or
    /// the connection ends: at most the connections tracked.
    pub body_cuts: usize,
}

/// Counters, all monotonic.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    /// Frames handed to the engine.
    pub frames: u64,
    /// Their bytes (whole frames, link header included).
    pub bytes: u64,
    /// Frames that decoded as TCP segments.
    pub tcp_segments: u64,
    /// Frames that did not decode, by reason.
    pub malformed: std::collections::BTreeMap<&'static str, u64>,
    /// Frames that are not ours (not IP, not TCP, fragments), by reason.
    pub ignored: std::collections::BTreeMap<&'static str, u64>,
    /// TCP segments to ports we were told not to watch.
    pub other_port_segments: u64,
    /// Segments of no tracked connection that could not start one (bare ACKs, FINs, RSTs).
    pub untracked_segments: u64,
    /// Connections tracked: started by a SYN or SYN/ACK, or joined midstream.
    pub connections: u64,
    /// Of them, joined midstream (first seen with data, not a handshake).
    pub connections_midstream: u64,
    /// Connections whose handshake failed: the connect timeout passed, or the server refused.
    pub connections_failed: u64,
    /// Of them, failures without evidence of a real client (one SYN, or a burst, that timed
    /// out; a refusal of a client never seen before): not charged to any pageview.
    pub failures_unproven: u64,
    /// Pageviews reported without evidence of a real client (`evidence` "none"): they enter no
    /// class statistics.
    pub pageviews_unproven: u64,
    /// Segments of a tracked connection that came in on the wrong side of the bridge (the
    /// server's from the clients' port, or the client's from the farm's): ignored whole.
    pub wrong_side: u64,
    /// Connections evicted because all connections together held more than
    /// `max_held_bytes` for later (the ones that began holding first go).
    pub evicted_held: u64,
    /// Open pageviews finished early, cut short, because the open pageviews' lists together
    /// held more than `max_list_bytes` (the oldest go first).
    pub pageviews_evicted: u64,
    /// Connections evicted from a full table.
    pub connections_evicted: u64,
    /// Connections whose bytes turned out not to be HTTP (their analyzer given up).
    pub connections_not_http: u64,
    /// Client SYNs that repeated an earlier one of the same connection.
    pub syn_retransmissions: u64,
    /// Server SYN/ACKs that repeated an earlier one of the same connection.
    pub synack_retransmissions: u64,
    /// SYNs the rules dropped (DROP SYN, or LIMIT SYN with an empty bucket).
    pub syns_dropped: u64,
    /// SYNs retransmitted to the servers on the clients' behalf (`FAST SYN`).
    pub fast_syns_sent: u64,
    /// Responses whose place in the sequence space went to the SRPT classifier.
    pub srpt_sizes_published: u64,
    /// Responses whose rest of body the kernel was told it need not show whole
    /// ([`crate::engine::FastpathUpdate::BodyUnread`]).
    pub bodies_cut: u64,
    /// Clients' own retransmissions absorbed while rlm was retransmitting for them.
    pub fast_syns_absorbed: u64,
    /// Clients' own retransmissions of a held SYN let through: the rule had let go before the
    /// paced release reached the SYN.
    pub fast_syns_client_passed: u64,
    /// SYN/ACKs retransmitted to the clients on the servers' behalf (`FAST SYN/ACK`).
    pub fast_synacks_sent: u64,
    /// First SYNs of pageviews held back (`DELAY FIRST SYN`).
    pub syns_delayed: u64,
    /// Frames the injection budget refused (the retransmissions stop; the endpoints' own TCP
    /// takes over), or not kept because too many were pending.
    pub inject_denied: u64,
    /// Frames not sent because no link address was known for where they go.
    pub inject_no_mac: u64,
    /// Image references blanked out of container pages (`REMOVE EMBEDS`).
    pub embeds_removed: u64,
    /// References a rule took but that stayed: part of their attributes had gone on in an
    /// earlier segment (`split`), or the scanner could not place them on the wire (`unmapped`),
    /// or the connection's record of blanks was full.
    pub embeds_kept_split: u64,
    /// References a rule took that stayed because the scanner could not place them on the wire.
    pub embeds_kept_unmapped: u64,
    /// References to blank (`REMOVE EMBEDS`) and request targets to rewrite (`REWRITE EMBEDS`)
    /// left as they were because the connection's record of changes was full.
    pub adapt_record_full: u64,
    /// Requests of embedded images rewritten to the mapping's variant (`REWRITE EMBEDS`).
    pub embeds_rewritten: u64,
    /// Requests a rewrite took that went on as they were: the mapping has no variant for the
    /// target (`unmapped`), the target was not wholly in the segment that completed the head
    /// (`split`), or the request line was not spaced as parsed (`unplaced`).
    pub rewrites_unmapped: u64,
    /// Requests a rewrite took that went on as they were: the target was not wholly in the segment
    /// that completed the head.
    pub rewrites_split: u64,
    /// Requests a rewrite took that went on as they were: the request line was not spaced as
    /// parsed.
    pub rewrites_unplaced: u64,
    /// `IF PREDICTED` decisions: made from a cell's measured mean, from the model, or not made
    /// because the object's size was not known yet (the object is left alone).
    pub predictions_measured: u64,
    /// `IF PREDICTED` decisions made from the model (the cell had too few samples).
    pub predictions_model: u64,
    /// `IF PREDICTED` decisions not made: the object's size was not known yet (it is left alone).
    pub predictions_no_size: u64,
    /// Containers a rule took but left alone: their body came content-encoded.
    pub adapt_skipped_encoded: u64,
    /// Server segments past a hole dropped while a removal was under way (the server resends
    /// them, and the resend is blanked).
    pub adapt_ooo_dropped: u64,
    /// Server segments forwarded with blanks (first copies and retransmissions).
    pub adapt_segments_edited: u64,
    /// Segments whose blanks could not be written (left as they were).
    pub adapt_patch_failed: u64,
    /// Segments that repeated bytes already delivered, in either direction (wholly or in part).
    pub retransmitted_segments: u64,
    /// Bytes declared never to be seen (capture loss), in either direction.
    pub gap_bytes: u64,
    /// RSTs and FINs whose sequence number lay outside their sender's window: ignored (a blind
    /// spoofer's, or stale copies).
    pub out_of_window: u64,
    /// Frames that reached rlm cut ([`crate::Engine::handle_cut`]).
    pub cut_frames: u64,
    /// Payload bytes of cut frames (retransmissions included) that the wire carried and rlm
    /// did not get: counted by length and timed, not seen.
    pub absent_bytes: u64,
    /// Bytes of bodies nothing reads that the kernel did not report (body cuts: it reports one
    /// segment a MiB and the last), taken as absent bytes where they were carried.
    pub unreported_bytes: u64,
    /// HTTP transactions finished.
    pub transactions: u64,
    /// Of them, with at least one anomaly.
    pub transactions_with_anomalies: u64,
    /// Pageviews finished.
    pub pageviews: u64,
    /// Response times that left a full class-statistics window (65,536 pageviews, its class's or
    /// all pageviews') before their time, to make room for a new one: the window then covers
    /// less than `class_window`.
    pub window_evicted: u64,
    /// Pageviews their class's window did not take: their client held its share of it already
    /// (twice the window's mean per source, once it holds 16).
    pub pageviews_over_share: u64,
    /// Engines side by side: samples of this engine's pageviews not shared with the others
    /// (more than `MAX_SHARED_SAMPLES` waited for the driver).
    pub class_samples_unshared: u64,
    /// Engines side by side: the others' samples taken into this engine's class windows.
    pub class_samples_shared: u64,
    /// Engines side by side: the others' samples left out (their classes numbered in another
    /// rule set than this engine's: taken across a reload).
    pub class_samples_stale: u64,
    /// Connections whose client's first bytes opened TLS but whose records could not be read.
    pub connections_not_tls: u64,
    /// TLS connections that ended, those of them established, and what was not read as TLS,
    /// by reason (connections).
    pub tls_connections: u64,
    #[allow(missing_docs)]
    pub tls_established: u64,
    /// Exchanges of encrypted records that ended (each also counted in `transactions`).
    pub tls_exchanges: u64,
    /// Exchanges of encrypted records that began while the rules have `REMOVE EMBEDS` or
    /// `REWRITE EMBEDS`, which need the plaintext: not applicable on TLS.
    pub adapt_not_applicable_tls: u64,
    /// Requests a `REJECT` or `LIMIT REQUESTS` fired at (each also counted in its rule's `fired`
    /// and `deferred`), or the SLA controller would have shed, while the engine does not carry
    /// them out ([`crate::Config::reject`] off: a capture, or a
    /// driver that cannot hold requests or send frames).
    pub rejects_deferred: u64,
    /// Requests `REJECT` answered in the server's stead ([`crate::Config::reject`]).
    pub requests_rejected: u64,
    /// Requests `REJECT` fired at (or connections `ABORT IDLE` was due on) but left to pass:
    /// the link addresses of an end were unknown.
    pub rejects_no_link_address: u64,
    /// Idle connections `ABORT IDLE` closed ([`crate::Config::reject`]).
    pub idle_aborted: u64,
    /// Idle connections `ABORT IDLE` was due on while the engine does not carry it out (each
    /// also counted in its rule's `fired` and `deferred`).
    pub aborts_deferred: u64,
    #[allow(missing_docs)]
    pub tls_bad: std::collections::BTreeMap<&'static str, u64>,
    /// Records of what nothing shows is real (see [`crate::Config::unproven_records_per_s`])
    /// left unwritten past their rate.
    pub records_unproven_skipped: u64,
    /// QUIC's flows, datagrams and bytes on the servers' UDP ports (seen, not managed).
    pub quic: crate::quic::QuicStats,
}

impl Stats {
    /// Adds `o`'s counts to these: the counters of engines that each saw part of the traffic
    /// (the shards of one capture, [`super::Sharding`]) as one engine's.
    pub fn add(&mut self, o: &Stats) {
        // Every field is named (no `..`), so that a counter added to `Stats` does not compile
        // until it is added here.
        let Stats {
            frames,
            bytes,
            tcp_segments,
            malformed,
            ignored,
            other_port_segments,
            untracked_segments,
            connections,
            connections_midstream,
            connections_failed,
            failures_unproven,
            pageviews_unproven,
            wrong_side,
            evicted_held,
            pageviews_evicted,
            connections_evicted,
            connections_not_http,
            syn_retransmissions,
            synack_retransmissions,
            syns_dropped,
            fast_syns_sent,
            srpt_sizes_published,
            bodies_cut,
            fast_syns_absorbed,
            fast_syns_client_passed,
            fast_synacks_sent,
            syns_delayed,
            inject_denied,
            inject_no_mac,
            embeds_removed,
            embeds_kept_split,
            embeds_kept_unmapped,
            adapt_record_full,
            embeds_rewritten,
            rewrites_unmapped,
            rewrites_split,
            rewrites_unplaced,
            predictions_measured,
            predictions_model,
            predictions_no_size,
            adapt_skipped_encoded,
            adapt_ooo_dropped,
            adapt_segments_edited,
            adapt_patch_failed,
            retransmitted_segments,
            gap_bytes,
            out_of_window,
            cut_frames,
            absent_bytes,
            unreported_bytes,
            transactions,
            transactions_with_anomalies,
            pageviews,
            window_evicted,
            pageviews_over_share,
            class_samples_unshared,
            class_samples_shared,
            class_samples_stale,
            connections_not_tls,
            tls_connections,
            tls_established,
            tls_exchanges,
            adapt_not_applicable_tls,
            rejects_deferred,
            requests_rejected,
            rejects_no_link_address,
            idle_aborted,
            aborts_deferred,
            tls_bad,
            records_unproven_skipped,
            quic,
        } = o;
        self.frames += *frames;
        self.bytes += *bytes;
        self.tcp_segments += *tcp_segments;
        add_counts(&mut self.malformed, malformed);
        add_counts(&mut self.ignored, ignored);
        self.other_port_segments += *other_port_segments;
        self.untracked_segments += *untracked_segments;
        self.connections += *connections;
        self.connections_midstream += *connections_midstream;
        self.connections_failed += *connections_failed;
        self.failures_unproven += *failures_unproven;
        self.pageviews_unproven += *pageviews_unproven;
        self.wrong_side += *wrong_side;
        self.evicted_held += *evicted_held;
        self.pageviews_evicted += *pageviews_evicted;
        self.connections_evicted += *connections_evicted;
        self.connections_not_http += *connections_not_http;
        self.syn_retransmissions += *syn_retransmissions;
        self.synack_retransmissions += *synack_retransmissions;
        self.syns_dropped += *syns_dropped;
        self.fast_syns_sent += *fast_syns_sent;
        self.srpt_sizes_published += *srpt_sizes_published;
        self.bodies_cut += *bodies_cut;
        self.fast_syns_absorbed += *fast_syns_absorbed;
        self.fast_syns_client_passed += *fast_syns_client_passed;
        self.fast_synacks_sent += *fast_synacks_sent;
        self.syns_delayed += *syns_delayed;
        self.inject_denied += *inject_denied;
        self.inject_no_mac += *inject_no_mac;
        self.embeds_removed += *embeds_removed;
        self.embeds_kept_split += *embeds_kept_split;
        self.embeds_kept_unmapped += *embeds_kept_unmapped;
        self.adapt_record_full += *adapt_record_full;
        self.embeds_rewritten += *embeds_rewritten;
        self.rewrites_unmapped += *rewrites_unmapped;
        self.rewrites_split += *rewrites_split;
        self.rewrites_unplaced += *rewrites_unplaced;
        self.predictions_measured += *predictions_measured;
        self.predictions_model += *predictions_model;
        self.predictions_no_size += *predictions_no_size;
        self.adapt_skipped_encoded += *adapt_skipped_encoded;
        self.adapt_ooo_dropped += *adapt_ooo_dropped;
        self.adapt_segments_edited += *adapt_segments_edited;
        self.adapt_patch_failed += *adapt_patch_failed;
        self.retransmitted_segments += *retransmitted_segments;
        self.gap_bytes += *gap_bytes;
        self.out_of_window += *out_of_window;
        self.cut_frames += *cut_frames;
        self.absent_bytes += *absent_bytes;
        self.unreported_bytes += *unreported_bytes;
        self.transactions += *transactions;
        self.transactions_with_anomalies += *transactions_with_anomalies;
        self.pageviews += *pageviews;
        self.window_evicted += *window_evicted;
        self.pageviews_over_share += *pageviews_over_share;
        self.class_samples_unshared += *class_samples_unshared;
        self.class_samples_shared += *class_samples_shared;
        self.class_samples_stale += *class_samples_stale;
        self.connections_not_tls += *connections_not_tls;
        self.tls_connections += *tls_connections;
        self.tls_established += *tls_established;
        self.tls_exchanges += *tls_exchanges;
        self.adapt_not_applicable_tls += *adapt_not_applicable_tls;
        self.rejects_deferred += *rejects_deferred;
        self.requests_rejected += *requests_rejected;
        self.rejects_no_link_address += *rejects_no_link_address;
        self.idle_aborted += *idle_aborted;
        self.aborts_deferred += *aborts_deferred;
        add_counts(&mut self.tls_bad, tls_bad);
        self.records_unproven_skipped += *records_unproven_skipped;
        self.quic.add(quic);
    }
}

fn add_counts(to: &mut std::collections::BTreeMap<&'static str, u64>, from: &std::collections::BTreeMap<&'static str, u64>) {
    for (k, v) in from {
        *to.entry(k).or_insert(0) += v;
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::{Config, Engine, Stats};
    use crate::testkit::TcpConv;
    use crate::time::Timestamp;
    use crate::wire::LinkType;

    /// Every number in `v` by its path, in order.
    fn leaves(v: &serde_json::Value, path: &str, out: &mut Vec<(String, u64)>) {
        match v {
            serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| leaves(v, &format!("{path}.{k}"), out)),
            serde_json::Value::Number(n) => out.push((path.to_string(), n.as_u64().unwrap())),
            other => panic!("{path}: {other}"),
        }
    }

    fn leaves_of(s: &Stats) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        leaves(&serde_json::to_value(s).unwrap(), "", &mut out);
        out
    }

    /// An engine's counters after `exchanges` HTTP exchanges and `junk` undecodable frames.
    fn counted(exchanges: usize, junk: usize) -> Stats {
        let mut e = Engine::new(Config { server_ports: vec![80], ..Config::default() });
        let mut t = Timestamp::ZERO;
        let mut feed = |e: &mut Engine, f: &[u8]| {
            t = t + std::time::Duration::from_millis(1);
            e.handle_link(t, crate::engine::Port::Unknown, LinkType::Ethernet, f);
        };
        for i in 0..exchanges {
            let mut c = TcpConv::new(&format!("10.0.0.{}:4000{i}", i + 1), "10.9.0.1:80");
            for f in [c.syn(), c.synack(), c.ack(), c.client_data(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")] {
                feed(&mut e, &f);
            }
            for f in c.server_data(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 18\r\n\r\n<img src=\"a.png\">") {
                feed(&mut e, &f);
            }
            // An object of the page on the same connection: two transactions, one pageview.
            let get = c.client_data(b"GET /a.png HTTP/1.1\r\nHost: a\r\nReferer: http://a/\r\n\r\n");
            feed(&mut e, &get);
            for f in c.server_data(b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 2\r\n\r\nab") {
                feed(&mut e, &f);
            }
            let (fin, sfin) = (c.client_fin(), c.server_fin());
            feed(&mut e, &fin);
            feed(&mut e, &sfin);
        }
        for _ in 0..junk {
            feed(&mut e, &[0u8; 20]);
        }
        e.shutdown(t + std::time::Duration::from_secs(600));
        e.stats().clone()
    }

    #[test]
    fn added_stats_are_the_sums_of_every_counter() {
        let (a, b) = (counted(1, 2), counted(3, 0));
        let mut sum = a.clone();
        sum.add(&b);
        let (la, lb, ls) = (leaves_of(&a), leaves_of(&b), leaves_of(&sum));
        assert_eq!(ls.len(), la.len());
        let nonzero = la.iter().filter(|(_, v)| *v > 0).count();
        assert!(nonzero >= 6, "only {nonzero} counters counted anything");
        for ((p, s), ((_, x), (_, y))) in ls.iter().zip(la.iter().zip(&lb)) {
            assert_eq!(*s, x + y, "{p}");
        }
    }
}
