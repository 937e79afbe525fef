//! One TCP segment's path through the engine: its connection (found, reused or started), the
//! TCP tracker's notes (handshake, ends), the application analyzer's events (handed to
//! [`super::application`]), and the nodes that act on it (SYN, SYN/ACK, response, request);
//! connections' ends and the pageviews they finish. Each stage hands back what it decided;
//! the frame's verdict is made from it once ([`Engine::handle_link`]).

use std::net::{IpAddr, SocketAddr};

use super::adaptation::AdaptStep;
use super::application::Rejection;
use super::records::{pageview_class, Writing};
use super::shard::{share, ClassSample};
use super::{DropCause, Engine, Event, FrameOutcome, Port, TimerKind, WELL_KNOWN_HTTP_PORTS};
use crate::analyzer::Analyzer;
use crate::flow::{CloseReason, ConnId, ConnState, Dir, FlowNote};
use crate::http::HttpOptions;
use crate::pageview::{Evidence, Failure};
use crate::policy::SynDecision;
use crate::time::{Timestamp, UnixMicros};
use crate::wire::{Endpoint, Segment};

impl Engine {
    /// A segment, through every stage; what the stages decided about its frame.
    pub(super) fn on_segment(&mut self, now: Timestamp, port: Port, seg: &Segment<'_>, decided: Option<SynDecision>) -> FrameOutcome {
        let mut out = FrameOutcome::default();
        let Some(id) = self.conn_for(now, port, seg) else { return out };
        let mut notes = Vec::new();
        let mut app_events = Vec::new();
        let c = self.flows.get_mut(id).expect("live id");
        let before_retx = c.c2s.retransmits + c.s2c.retransmits;
        let before_gap = c.c2s.gap_bytes + c.s2c.gap_bytes;
        let dir = c.dir_of(seg);
        // A segment of the server's that came in from the clients' side (or the reverse) is
        // someone else's: a spoofer's RST, SYN/ACK or data. Ignored whole, counted.
        if matches!((port, dir), (Port::Client, Dir::ToClient) | (Port::Server, Dir::ToServer)) {
            self.stats.wrong_side += 1;
            return out;
        }
        // A server segment: from the sequence number of its first byte new to the stream to the
        // byte past its end (where content adaptation can still blank a reference).
        let window = match (dir, c.s2c.next_seq()) {
            (Dir::ToClient, Some(from)) => Some((from, seg.seq.wrapping_add(seg.payload_len))),
            _ => None,
        };
        // A rejected request's connection is the appliance's to finish: nothing more of it goes
        // through; the client's FIN is acknowledged.
        if let Some(&next) = (!self.rejected.is_empty()).then(|| self.rejected.get(&id)).flatten() {
            if dir == Dir::ToServer && seg.flags.fin {
                if let Some(ack) = crate::actions::ack_fin(&self.syn.links, seg, next) {
                    self.transmits.push_back(super::Transmit { port: Port::Client, frame: ack });
                }
            }
            out.drop = Some(DropCause::Rejected);
            return out;
        }
        let cut_bodies = self.fastpath.as_ref().is_some_and(|fp| fp.cut_bodies);
        let c = self.flows.get_mut(id).expect("live id");
        let fate = c.on_segment(now, seg, &mut notes, &mut app_events);
        // With body cuts, the server's stream is unread while the HTTP reader, as this segment
        // left it, is inside a body nothing reads: the kernel may leave the body's next
        // segments unreported.
        if cut_bodies {
            c.s2c.set_unread(c.http().and_then(crate::http::HttpConn::unread_body_left));
        }
        self.stats.retransmitted_segments += (c.c2s.retransmits + c.s2c.retransmits - before_retx) as u64;
        self.stats.gap_bytes += c.c2s.gap_bytes + c.s2c.gap_bytes - before_gap;
        self.stats.absent_bytes += u64::from(seg.payload_len) - seg.payload.len() as u64;
        let close = self.on_notes(now, id, &notes, decided, &mut out);
        let (rewrite_due, reject) = self.process_app(now, id, &mut app_events, window);
        for depth in rewrite_due {
            self.decide_rewrite(now, id, depth, seg);
        }
        let mut close = close;
        if let Some(r) = reject.filter(|_| dir == Dir::ToServer) {
            if self.reject_request(now, id, seg, r) {
                out.drop = Some(DropCause::Rejected);
                // The client has its answer: the request ends here, unanswered by the server.
                close = Some(CloseReason::Rejected);
            }
        }
        // A cut frame is only measured (its verdict is not rlm's to give): adaptation, which
        // edits whole frames, does not see it.
        let whole = seg.payload.len() == seg.payload_len as usize;
        if self.adapt.edits_content() && self.cfg.adapt && whole {
            match self.adapt_segment(id, dir, fate, seg) {
                AdaptStep::Pass => {}
                AdaptStep::Drop => out.drop = Some(DropCause::AheadOfHole),
                AdaptStep::Edit(edits) => out.edits = Some(edits),
            }
        }
        if let Some(reason) = close {
            if reason == CloseReason::Refused {
                self.remove_conn(now, id, reason);
            } else {
                self.close_conn(now, id, reason);
            }
        } else {
            self.account_held(now, id);
        }
        self.collect_pageviews();
        out
    }

    /// `REJECT`: the request in `seg` goes no further; the server is reset and the client
    /// answered. False when it cannot be carried out (no link addresses learnt yet).
    fn reject_request(&mut self, now: Timestamp, id: ConnId, seg: &Segment<'_>, r: Rejection) -> bool {
        let Some((rst, answer, answer_len)) = crate::actions::reject_frames(&self.syn.links, seg, r.status, r.retry_after) else {
            self.stats.rejects_no_link_address += 1;
            return false;
        };
        self.transmits.push_back(super::Transmit { port: Port::Server, frame: rst });
        self.transmits.push_back(super::Transmit { port: Port::Client, frame: answer });
        // The client's next byte from the appliance: past the answer and its FIN.
        self.rejected.insert(id, seg.ack.wrapping_add(answer_len).wrapping_add(1));
        self.stats.requests_rejected += 1;
        // The appliance's answer is the request's response, whole, now.
        self.pageviews.on_txn_act(id, r.depth, |a| a.requests_rejected += 1);
        self.pageviews.on_txn_done(now, id, r.depth, Some(now), Some(now));
        // The kernel sends the connection's further segments here (the client's) or nowhere
        // (the server's): they are the appliance's to answer.
        if let Some(fp) = self.fastpath.as_mut() {
            fp.rejected(seg.src.into(), seg.dst.into());
        }
        true
    }

    /// The connection a segment belongs to: the one tracked, or a new one (a new SYN on a
    /// finished connection's ports starts a new connection; a full table evicts the least
    /// recently seen). `None`: a segment that cannot start one, or not to a server port.
    fn conn_for(&mut self, now: Timestamp, port: Port, seg: &Segment<'_>) -> Option<ConnId> {
        let f = seg.flags;
        let mut id = self.flows.lookup(seg.src, seg.dst);
        if let (Some(old), true) = (id, f.syn && !f.ack) {
            let c = self.flows.get(old).expect("looked up");
            let same_attempt = seg.src == c.client && c.c2s.next_seq() == Some(seg.seq.wrapping_add(1)) && c.state != ConnState::Closed;
            if !same_attempt && (c.state == ConnState::Closed || c.state == ConnState::Established || seg.src != c.client) {
                self.remove_conn(now, old, CloseReason::Reused);
                id = None;
            }
        }
        if id.is_some() {
            return id;
        }
        if !(f.syn || seg.payload_len > 0) || f.rst {
            self.stats.untracked_segments += 1;
            return None;
        }
        let (client, server) = self.client_of(port, seg);
        if !self.cfg.server_ports.is_empty() && !self.is_server_port(server.port) {
            self.stats.other_port_segments += 1;
            return None;
        }
        let midstream = !f.syn;
        if self.flows.is_full() {
            if let Some(victim) = self.flows.eviction_candidate() {
                self.remove_conn(now, victim, CloseReason::Evicted);
                self.stats.connections_evicted += 1;
            }
        }
        let http = HttpOptions {
            scan_embeds: self.cfg.scan_embeds,
            // With no ports configured, Zeek's HTTP ports are read as HTTP whatever they
            // carry; other ports only when the client's first bytes look like a request.
            detect: self.cfg.server_ports.is_empty() && !WELL_KNOWN_HTTP_PORTS.contains(&server.port),
            decode_bodies: self.cfg.decode_bodies,
            keep_headers: self.keep_headers.clone(),
        };
        let id = self.flows.insert(now, client, server, midstream, Some(Analyzer::pending(midstream, http)));
        self.stats.connections += 1;
        if midstream {
            self.stats.connections_midstream += 1;
        }
        self.push_timer(now + self.cfg.idle_timeout, id, TimerKind::Idle);
        Some(id)
    }

    pub(super) fn is_server_port(&self, p: u16) -> bool {
        self.cfg.server_ports.contains(&p)
    }

    /// Which endpoint of a segment of an unknown connection is the client.
    fn client_of(&self, port: Port, seg: &Segment<'_>) -> (Endpoint, Endpoint) {
        let (s, d) = (seg.src, seg.dst);
        match port {
            Port::Client => return (s, d),
            Port::Server => return (d, s),
            Port::Unknown => {}
        }
        if seg.flags.syn {
            return if seg.flags.ack { (d, s) } else { (s, d) };
        }
        match (self.is_server_port(s.port), self.is_server_port(d.port)) {
            (true, false) => (d, s),
            (false, true) => (s, d),
            _ => {
                if s.port < d.port {
                    (d, s)
                } else {
                    (s, d)
                }
            }
        }
    }

    /// The TCP tracker's notes on a segment: the handshake into the pageviews and the SYN and
    /// SYN/ACK nodes (what they decide about the frame goes into `out`); how the connection
    /// ends, if it does.
    fn on_notes(
        &mut self,
        now: Timestamp,
        id: ConnId,
        notes: &[FlowNote],
        decided: Option<SynDecision>,
        out: &mut FrameOutcome,
    ) -> Option<CloseReason> {
        let mut close = None;
        for note in notes {
            match *note {
                FlowNote::Syn { retransmission } => {
                    if retransmission {
                        self.stats.syn_retransmissions += 1;
                    } else {
                        self.push_timer(now + self.cfg.pageview.connect_timeout, id, TimerKind::Connect);
                    }
                    let c = self.flows.get(id).expect("live");
                    let (client, server) = (c.client, c.server);
                    let step = self.at_syn(now, id, client, server, retransmission, decided);
                    out.drop = out.drop.or(step.drop);
                    out.keep = step.keep.map(|k| (id, k)).or(out.keep);
                    self.pageviews.on_syn(now, id, client.ip, retransmission);
                }
                FlowNote::SynAck { retransmission } => {
                    if retransmission {
                        self.stats.synack_retransmissions += 1;
                    }
                    // The server answered: no more fast retransmissions.
                    self.syn.forget_syn(id);
                    self.pageviews.on_synack(now, id);
                    if self.syn.injecting_synack && !retransmission {
                        out.keep = self.at_synack(now, id).map(|k| (id, k)).or(out.keep);
                    }
                }
                FlowNote::Established => self.on_established(now, id),
                FlowNote::ServerRetransmission { seq, end } => self.pageviews.on_server_retransmission(now, id, seq, end),
                FlowNote::ClientGotTwice { seq, end } => self.pageviews.on_client_got_twice(id, seq, end),
                FlowNote::Unreported(n) => self.stats.unreported_bytes += u64::from(n),
                FlowNote::Refused => close = Some(CloseReason::Refused),
                FlowNote::Rst => close = Some(CloseReason::Rst),
                FlowNote::OutOfWindow => self.stats.out_of_window += 1,
                FlowNote::Fin(_) => {
                    if self.flows.get(id).expect("live").both_fins() {
                        close = Some(CloseReason::Fin);
                    }
                }
            }
        }
        close
    }

    /// The handshake is done: no more SYN/ACKs; a real client (its ACK matched the SYN/ACK,
    /// which a blind spoofer cannot do) earns its class some injections.
    fn on_established(&mut self, now: Timestamp, id: ConnId) {
        let c = self.flows.get(id).expect("live");
        let (client, rtt, answered) = (c.client.ip, c.rtt(), c.hs.answered);
        self.syn.fast_synacks.remove(&id);
        if self.syn.injecting && answered {
            if let Some(p) = &self.policy {
                let class = p.classify(c.client.into(), c.server.into());
                self.syn.budgets.earn(class.index());
            }
        }
        self.pageviews.on_established(now, id, client, answered, rtt);
    }

    /// `ABORT IDLE` is due on connection `id` (idle since its last response): the server's side
    /// is reset and the client's closed with a FIN from the server's address, each at its
    /// stream's next sequence number, as a server closing an idle keep-alive connection would
    /// (003 Paper C); the connection is then the appliance's to finish, as a rejected one's.
    /// Counted in the rule's `fired` (and `deferred` when not carried out).
    pub(super) fn abort_idle_due(&mut self, now: Timestamp, id: ConnId) {
        let Some((after, rule)) = self.abort_idle.get(&id).copied() else { return };
        let Some(c) = self.flows.get(id) else { return };
        // A request under way: its response's end arms the timer again.
        if c.state != ConnState::Established || !c.http().is_some_and(|h| h.is_idle()) {
            return;
        }
        let due = c.last_seen + after;
        if due > now {
            self.push_timer(due, id, TimerKind::AbortIdle);
            return;
        }
        let (client, server) = (c.client, c.server);
        let seqs = c.c2s.next_seq().zip(c.s2c.next_seq());
        self.abort_idle.remove(&id);
        if !self.policy.as_mut().is_some_and(|p| p.abort_due(now, rule)) {
            self.stats.aborts_deferred += 1;
            return;
        }
        let frames = seqs.and_then(|(to_server, to_client)| {
            crate::actions::abort_frames(&self.syn.links, (client, server), to_server, to_client).map(|f| (f, to_client))
        });
        let Some(((rst, fin), to_client)) = frames else {
            self.stats.rejects_no_link_address += 1;
            return;
        };
        self.transmits.push_back(super::Transmit { port: Port::Server, frame: rst });
        self.transmits.push_back(super::Transmit { port: Port::Client, frame: fin });
        self.rejected.insert(id, to_client.wrapping_add(1));
        self.stats.idle_aborted += 1;
        if let Some(fp) = self.fastpath.as_mut() {
            fp.rejected(client.into(), server.into());
        }
        self.close_conn(now, id, CloseReason::Aborted);
    }

    /// Close a connection (if it is not already) and take it out of the table, with what the
    /// appliance kept about it (a REJECT's sequence number).
    pub(super) fn remove_conn(&mut self, now: Timestamp, id: ConnId, reason: CloseReason) {
        self.close_conn(now, id, reason);
        self.flows.remove(id);
        self.rejected.remove(&id);
    }

    /// Close a connection: flush HTTP, tell the pageviews. It stays in the table (Closed) until
    /// its linger expires, unless the caller removes it.
    pub(super) fn close_conn(&mut self, now: Timestamp, id: ConnId, reason: CloseReason) {
        let mut evs = Vec::new();
        let Some(c) = self.flows.get_mut(id) else { return };
        if c.state == ConnState::Closed {
            return;
        }
        let never_established = !c.was_established();
        self.syn.forget(id);
        self.abort_idle.remove(&id);
        if let Some(p) = self.policy.as_mut().filter(|p| p.controller().is_some()) {
            p.conn_closed((SocketAddr::from(c.client), SocketAddr::from(c.server)));
        }
        c.close(now, reason == CloseReason::Shutdown, &mut evs);
        let client = c.client.ip;
        if let Some(fp) = self.fastpath.as_mut() {
            fp.flow_end(c.client, c.server);
        }
        self.adapt.on_close(c);
        let (first_syn, syns, backoff) = (c.hs.syn.first, c.hs.syn.count, c.hs.syn_shows_backoff());
        // What a flush at a close brings is read; requests it completes are not rewritten (no
        // segment of theirs is being handled).
        self.process_app(now, id, &mut evs, None);
        // After the flush, which can start a removal.
        self.adapt.forget(id);
        self.release_held(id);
        // A closed connection stays only to absorb stragglers: its slot is freed after the
        // linger, not after the idle timeout armed when it opened.
        if !matches!(reason, CloseReason::Shutdown | CloseReason::Refused | CloseReason::ConnectTimeout | CloseReason::Evicted) {
            self.push_timer(now + self.cfg.closed_linger, id, TimerKind::Idle);
        }
        // A failure counts against its client only with evidence that the client is real
        // (docs/architecture.md, "Evidence"): a timeout whose SYNs show the client's backoff; a
        // refusal (a RST acknowledging the SYN) of a client whose handshakes rlm has seen, or
        // that resent its SYN.
        let failed = match (reason, never_established, first_syn) {
            (CloseReason::ConnectTimeout, _, Some(s)) => {
                Some(Failure { first_syn: s, at: s + self.cfg.pageview.connect_timeout, syns, proven: backoff })
            }
            (CloseReason::Refused, _, Some(s)) => {
                Some(Failure { first_syn: s, at: now, syns, proven: backoff || self.pageviews.client_known(client, now) })
            }
            _ => None,
        };
        if let Some(f) = &failed {
            self.stats.connections_failed += 1;
            if !f.proven {
                self.stats.failures_unproven += 1;
            }
        }
        self.pageviews.on_conn_closed(now, id, client, failed);
        self.collect_pageviews();
    }

    /// Pageviews that ended: classed, into the class statistics (stamped with when, so that a
    /// decision's pageviews can be found), reported.
    pub(super) fn collect_pageviews(&mut self) {
        self.stats.pageviews_evicted = self.pageviews.evicted();
        for mut pv in self.pageviews.take_done() {
            self.stats.pageviews += 1;
            if pv.evidence == Evidence::None {
                self.stats.pageviews_unproven += 1;
            }
            if let Some(policy) = self.policy.as_mut() {
                let client: Option<IpAddr> = pv.client.parse().ok();
                if let Some(ip) = client {
                    let class = pageview_class(policy, ip, pv.server.as_deref(), pv.host.as_deref());
                    pv.class = Some(policy.class_name(class).to_string());
                    // Only a pageview with evidence of a real client enters the class statistics.
                    if !pv.incomplete && pv.evidence != Evidence::None {
                        let source = crate::policy::source_of(ip);
                        let taken = policy.on_pageview(self.last_now, class, pv.rt_s, source);
                        if let Some(shared) = self.shared_samples.as_mut() {
                            let sample = ClassSample { at: self.last_now, class: class.0, rt_s: pv.rt_s, source, rule_set: self.rule_sets };
                            share(shared, sample, &mut self.stats.class_samples_unshared);
                        }
                        self.stats.window_evicted += taken.evicted;
                        if taken.over_share {
                            self.stats.pageviews_over_share += 1;
                        }
                        if taken.counted {
                            pv.window_ts = Some(UnixMicros::of(self.last_now));
                        }
                    }
                }
            }
            match self.unproven.writing(self.last_now, pv.evidence == Evidence::None, &mut self.stats.records_unproven_skipped) {
                Writing::Skip => continue,
                Writing::Cut => pv.cut_unproven(),
                Writing::Whole => {}
            }
            self.events.push_back(Event::Pageview(pv));
        }
    }
}
