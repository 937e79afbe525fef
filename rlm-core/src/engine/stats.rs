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
