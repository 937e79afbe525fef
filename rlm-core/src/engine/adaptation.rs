//! Content adaptation at the response and request nodes (004 section 5): which containers a
//! `REMOVE EMBEDS` takes and which of their image references it blanks, which image requests a
//! `REWRITE EMBEDS` rewrites, and the blanks each segment carries; with `IF PREDICTED`, the
//! sizes and transfer times the predictions are made from. The byte-level work (records of
//! blanks, patching a frame, placing a rewrite) is [`crate::adapt`]'s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::{Engine, Stats};
use crate::adapt::patch::{self, Edit};
use crate::adapt::predict::{self, size_key, Basis, ClientLoss, Predictor, SizeCache, Standing};
use crate::adapt::remove::Removal;
use crate::adapt::{rewrite, AdaptConn};
use crate::analyzer::Analyzer;
use crate::flow::{Conn, ConnId, Dir, SegFate};
use crate::http::{EmbedKind, EmbedRef, Txn};
use crate::policy::Policy;
use crate::time::Timestamp;
use crate::wire::{LinkType, Segment};

/// Server segments past a hole dropped in a row while a removal is under way; past it they go
/// on unblanked (the hole may never fill in rlm's view: a segment that went around it while its
/// queue was full, say, and the client's bare ACKs do not come to rlm).
const MAX_AHEAD_DROPS: u32 = 32;

/// The segment size assumed when a connection's loss is estimated from its bytes (Ethernet's).
const MSS_GUESS: u32 = 1448;

/// Blanks further behind a server segment than this are let go.
const RECORD_HORIZON: u32 = 1 << 26;

/// Content adaptation's state.
#[derive(Default)]
pub(super) struct Adaptation {
    /// By connection: the removals under way, the blanks written and the rewrites.
    conns: ahash::AHashMap<ConnId, AdaptConn>,
    /// Transactions whose request rlm rewrote, by connection and depth, with the target the
    /// server was asked for (a connection's go at once when it closes).
    rewritten: ahash::AHashMap<ConnId, BTreeMap<u32, String>>,
    /// Transfer times measured per (size, RTT, loss), the model behind them (`IF PREDICTED`).
    predictor: Predictor,
    client_loss: ClientLoss,
    sizes: SizeCache,
    /// Some rule has `REMOVE EMBEDS` ([`Policy::removes_embeds`]).
    pub removing: bool,
    /// A `REWRITE EMBEDS` is in the rules.
    pub rewriting: bool,
    /// An `IF PREDICTED` selector is in the rules: sizes and transfer times are learnt.
    pub predicting: bool,
}

/// What content adaptation does with the segment being handled.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AdaptStep {
    /// It goes on as it is.
    Pass,
    /// It goes no further: a server segment past a hole while a removal is under way (the
    /// server sends it again once the hole fills, and the resend is blanked).
    Drop,
    /// It goes on with these blanks written into it.
    Edit(Vec<Edit>),
}

impl Adaptation {
    /// The rules in force changed.
    pub fn on_rules(&mut self, policy: Option<&Policy>) {
        self.removing = policy.is_some_and(Policy::removes_embeds);
        self.rewriting = policy.is_some_and(Policy::rewrites_embeds);
        self.predicting = policy.is_some_and(Policy::predicts);
    }

    /// Whether the rules change what pages carry (`REMOVE EMBEDS`, `REWRITE EMBEDS`).
    pub fn edits_content(&self) -> bool {
        self.removing || self.rewriting
    }

    /// Whether some container is being adapted now.
    pub fn is_active(&self) -> bool {
        !self.conns.is_empty()
    }

    /// A transaction ended: its removal is over.
    pub fn txn_done(&mut self, id: ConnId, depth: u32) {
        if let Some(a) = self.conns.get_mut(&id) {
            a.removals.retain(|r| r.depth != depth);
        }
    }

    /// A connection closed: learn its client's loss (for predictions).
    pub fn on_close(&mut self, c: &Conn<Analyzer>) {
        if self.predicting && c.s2c.bytes > 0 {
            self.client_loss.on_conn(c.client.ip, c.s2c.bytes, c.s2c.retransmits, MSS_GUESS);
        }
    }

    /// After the flush at a close: the connection's adaptation state goes.
    pub fn forget(&mut self, id: ConnId) {
        self.conns.remove(&id);
        self.rewritten.remove(&id);
    }

    /// rlm rewrote the request of transaction `depth` on `id` to `target`.
    fn rewrote(&mut self, id: ConnId, depth: u32, target: String) {
        self.rewritten.entry(id).or_default().insert(depth, target);
    }

    /// The target rlm rewrote the request of transaction `depth` on `id` to, if it did: the
    /// transaction is over, so it is forgotten.
    fn take_rewritten(&mut self, id: ConnId, depth: u32) -> Option<String> {
        let pending = self.rewritten.get_mut(&id)?;
        let target = pending.remove(&depth);
        if pending.is_empty() {
            self.rewritten.remove(&id);
        }
        target
    }
}

/// Write the blanks into a copy of `frame`: the copy, or `None` if they could not be written.
pub(super) fn write_blanks(stats: &mut Stats, link: LinkType, frame: &[u8], edits: &[Edit]) -> Option<Box<[u8]>> {
    let mut copy = frame.to_vec();
    match patch::apply(&mut copy, link, edits) {
        Ok(_) => {
            stats.adapt_segments_edited += 1;
            Some(copy.into())
        }
        Err(_) => {
            stats.adapt_patch_failed += 1;
            None
        }
    }
}

impl Engine {
    /// The response node at a response's head: whether a `REMOVE EMBEDS` takes this
    /// container. Not when its body comes content-encoded (it cannot be blanked).
    /// `done`: the transaction, when it has ended already (within the same segment).
    pub(super) fn decide_removal(&mut self, now: Timestamp, id: ConnId, depth: u32, done: Option<&Txn>) {
        let (Some(policy), Some(c)) = (self.policy.as_mut(), self.flows.get(id)) else { return };
        let Some(txn) = c.http().and_then(|h| h.txn(depth)).or(done).filter(|t| t.is_html()) else { return };
        let Some(resp) = txn.response.as_ref().filter(|r| (200..300).contains(&r.status)) else { return };
        // The fast path queues (and so lets rlm rewrite) IPv4 segments only.
        if !c.server.ip.is_ipv4() {
            return;
        }
        let (cl, sv) = (SocketAddr::from(c.client), SocketAddr::from(c.server));
        let class = policy.classify(cl, sv);
        let rt = self.pageviews.elapsed_for_client(c.client.ip, now);
        let req = txn.request.as_ref();
        let url = req.map(|r| r.uri.as_str());
        let host = req.and_then(|r| r.host.as_deref());
        let Some((rule, select)) = policy.at_response(now, cl, sv, class, url, host, resp.content_type.as_deref(), Some(rt)) else { return };
        if resp.encoded {
            self.stats.adapt_skipped_encoded += 1;
            return;
        }
        let mut removal = Removal::new(depth, rule, select);
        if matches!(removal.select, rules::EmbedSelect::Predicted { .. }) {
            let server = c.server.to_string();
            let host = req.and_then(|r| r.host.clone()).filter(|h| !h.is_empty()).unwrap_or_else(|| server.clone());
            removal.base = url.and_then(|u| crate::pageview::request_url(Some(&host), &server, u)).map(|b| (b, host));
        }
        self.adapt.conns.entry(id).or_default().removals.push(removal);
    }

    /// The request node at an embedded image's request head (completed by `seg`, a client's
    /// segment): whether a `REWRITE EMBEDS` takes it, and if so its target is rewritten in this
    /// segment and in every resend of it (the connection's request record), and its rule's
    /// decision recorded and counted for its pageview (once: resends are not requests again).
    pub(super) fn decide_rewrite(&mut self, now: Timestamp, id: ConnId, depth: u32, seg: &Segment<'_>) {
        let Some(c) = self.flows.get(id) else { return };
        // The fast path queues (and so lets rlm rewrite) IPv4 segments only.
        if !c.server.ip.is_ipv4() || c.dir_of(seg) != Dir::ToServer {
            return;
        }
        let Some(txn) = c.http().and_then(|h| h.txn(depth)) else { return };
        let (Some(req), Some(request_seq)) = (txn.request.as_ref(), txn.request_seq) else { return };
        // Only the images a container listed.
        let Some(position) = self.pageviews.image_position(id, depth) else { return };
        let (Some(at), Some(policy)) = (self.standing(now, id, depth), self.policy.as_mut()) else { return };
        let (cl, sv) = (SocketAddr::from(c.client), SocketAddr::from(c.server));
        let class = policy.classify(cl, sv);
        let Some((rule, select, map)) = policy.at_request(now, cl, sv, class, &req.uri, req.host.as_deref(), at.elapsed) else { return };
        let a = &mut self.adapt;
        let take = match select {
            rules::EmbedSelect::Predicted { cmp, goal } => {
                // 004 Figure 20: rewritten if its predicted transfer would take the pageview's
                // elapsed time past the goal.
                let size = a.sizes.get(&size_key(req.host.as_deref(), &sv.to_string(), &req.uri));
                count_prediction(&mut self.stats, a.predictor.judge(size, &at, cmp == rules::Cmp::Ge, goal))
            }
            ref s => crate::adapt::remove::selects(s, position, &req.uri),
        };
        if !take {
            return;
        }
        let Some(new) = map.map(&req.uri) else {
            self.stats.rewrites_unmapped += 1;
            return;
        };
        let rewritten = match rewrite::target_edit(seg.payload, seg.seq, request_seq, &req.method, &req.uri, &new) {
            Ok((seq, bytes)) => {
                if a.conns.entry(id).or_default().requests.add_bytes(seq, &bytes) {
                    self.stats.embeds_rewritten += 1;
                    a.rewrote(id, depth, new);
                    Some(req.uri.clone())
                } else {
                    self.stats.adapt_record_full += 1;
                    None
                }
            }
            Err(rewrite::Missed::NotInSegment) => {
                self.stats.rewrites_split += 1;
                None
            }
            Err(rewrite::Missed::Unplaced) => {
                self.stats.rewrites_unplaced += 1;
                None
            }
        };
        if let Some(target) = rewritten {
            self.pageviews.on_txn_act(id, depth, |acts| acts.embeds_rewritten += 1);
            self.record_decision(now, id, rule, "REWRITE EMBEDS", Some(target));
        }
    }

    /// A 2xx answer ended: its size goes into the size cache under the target the server was
    /// asked for (the variant, when rlm rewrote the request), and an object's transfer time
    /// (not a page's: pages wait for the server) into the predictor's cell.
    pub(super) fn learn_transfer(&mut self, id: ConnId, txn: &Txn) {
        let variant = self.adapt.take_rewritten(id, txn.depth);
        if !self.adapt.predicting {
            return;
        }
        let (Some(c), Some(req), Some(resp)) = (self.flows.get(id), txn.request.as_ref(), txn.response.as_ref()) else { return };
        if !(200..300).contains(&resp.status) {
            return;
        }
        let size = txn.response_body_len;
        let target = variant.as_deref().unwrap_or(&req.uri);
        self.adapt.sizes.insert(size_key(req.host.as_deref(), &c.server.to_string(), target), size);
        if txn.is_html() || size == 0 {
            return;
        }
        let (Some(first), Some(last)) = (txn.response_first_ts, txn.response_last_ts) else { return };
        let Some(rtt) = self.client_rtt(c) else { return };
        let transfer = last.saturating_since(first) + rtt / 2;
        self.adapt.predictor.observe(size, rtt, self.adapt.client_loss.of(c.client.ip), transfer);
    }

    /// A container's references, in document order, as the scanner finds them: those its
    /// removal takes are blanked (kept in the connection's record), no longer expected by the
    /// pageview, and each counted for it with a decision record of the removal's rule. A
    /// reference whose attributes began in a segment that went on already stays.
    /// `window`: the server segment being handled, from the sequence number of its first byte
    /// new to the stream (blanks before it can no longer be written into a copy the client gets
    /// first) to the byte past its end; `None` when no segment is (a flush at a close).
    pub(super) fn remove_embeds(&mut self, now: Timestamp, id: ConnId, depth: u32, refs: &mut Vec<EmbedRef>, window: Option<(u32, u32)>) {
        let ahead = self.removal_standing(now, id, depth);
        let Engine { adapt, stats, .. } = &mut *self;
        let Adaptation { conns, predictor, sizes, .. } = adapt;
        let Some(a) = conns.get_mut(&id) else { return };
        let Some(i) = a.removals.iter().position(|r| r.depth == depth) else { return };
        let (removal, record, ahead_sent_to) = (&mut a.removals[i], &mut a.record, a.ahead_sent_to);
        let rule = removal.rule;
        // The references blanked, as the page writes them (their decision records come after).
        let mut blanked = Vec::new();
        let at_or_after = |x: u32, y: u32| (x.wrapping_sub(y) as i32) >= 0;
        // A range can still be blanked on every copy: it lies in the bytes this segment brings,
        // or past it in data that waited behind a hole and did not go on (dropped, or sent back
        // again later).
        let reachable = |&(seq, len): &(u32, u32)| {
            window.is_some_and(|(from, seg_end)| {
                at_or_after(seq, from) && (at_or_after(seg_end, seq.wrapping_add(len)) || ahead_sent_to.is_none_or(|to| at_or_after(seq, to)))
            })
        };
        refs.retain(|e| {
            if e.kind != EmbedKind::Image {
                return true;
            }
            let take = match (&removal.select, &ahead, &removal.base) {
                // Blanked if fetching it would take the pageview past the goal (the object's
                // size as last served, the client's path, the pageview's time so far).
                (rules::EmbedSelect::Predicted { cmp, goal }, Some(at), Some((base, host))) => {
                    removal.seen += 1;
                    let size = base.join(&e.urls[0]).ok().and_then(|u| sizes.get(&object_key(&u, base, host)));
                    count_prediction(stats, predictor.judge(size, at, *cmp == rules::Cmp::Ge, *goal))
                }
                _ => removal.takes(&e.urls[0]),
            };
            if !take {
                return true;
            }
            if e.wire.is_empty() {
                stats.embeds_kept_unmapped += 1;
                return true;
            }
            if !e.wire.iter().all(reachable) {
                stats.embeds_kept_split += 1;
                return true;
            }
            if !record.add(&e.wire) {
                stats.adapt_record_full += 1;
                return true;
            }
            stats.embeds_removed += 1;
            blanked.push(e.urls[0].clone());
            false
        });
        for target in blanked {
            self.pageviews.on_txn_act(id, depth, |acts| acts.embeds_blanked += 1);
            self.record_decision(now, id, rule, "REMOVE EMBEDS", Some(target));
        }
    }

    /// For a removal by `IF PREDICTED` of the container at `depth`: where its pageview stands.
    fn removal_standing(&self, now: Timestamp, id: ConnId, depth: u32) -> Option<Standing> {
        let a = self.adapt.conns.get(&id)?;
        a.removals.iter().find(|r| r.depth == depth)?.base.as_ref()?;
        self.standing(now, id, depth)
    }

    /// Where the pageview of transaction `depth` on `id` stands: its elapsed time and its
    /// client's path (what `IF PREDICTED` adds an object's transfer to).
    fn standing(&self, now: Timestamp, id: ConnId, depth: u32) -> Option<Standing> {
        let c = self.flows.get(id)?;
        let elapsed = self.pageviews.pageview_of_txn(id, depth).and_then(|pv| self.pageviews.elapsed(pv, now)).unwrap_or_default();
        Some(Standing { elapsed, rtt: self.client_rtt(c).unwrap_or_default(), loss: self.adapt.client_loss.of(c.client.ip) })
    }

    /// The RTT of a connection's client: its last handshake's at the appliance, else this one's.
    fn client_rtt(&self, c: &Conn<Analyzer>) -> Option<Duration> {
        self.pageviews.client_rtt(c.client.ip).or(c.rtt())
    }

    /// After a segment of an adapted connection: a server segment gets the blanks that fall in
    /// it (or is dropped, past a hole while a removal is under way); the client's
    /// acknowledgements let go of blanks it can no longer ask for.
    pub(super) fn adapt_segment(&mut self, id: ConnId, dir: Dir, fate: SegFate, seg: &Segment<'_>) -> AdaptStep {
        let conns = &mut self.adapt.conns;
        let to_client = dir == Dir::ToClient && !seg.payload.is_empty();
        let removing = conns.get(&id).is_some_and(|a| !a.removals.is_empty());
        if to_client && fate == SegFate::Ahead {
            let a = conns.entry(id).or_default();
            if removing && a.ahead_dropped < MAX_AHEAD_DROPS {
                a.ahead_dropped += 1;
                self.stats.adapt_ooo_dropped += 1;
                return AdaptStep::Drop;
            }
            // It goes on as it is (no removal under way, or a hole that does not fill: the
            // bytes before it may have gone around rlm): references found in it once the hole
            // fills stay whole.
            let end = seg.seq.wrapping_add(seg.payload.len() as u32);
            if a.ahead_sent_to.is_none_or(|to| (end.wrapping_sub(to) as i32) > 0) {
                a.ahead_sent_to = Some(end);
            }
            return AdaptStep::Pass;
        }
        let Some(a) = conns.get_mut(&id) else { return AdaptStep::Pass };
        let mut edits = Vec::new();
        match dir {
            Dir::ToClient if to_client => {
                if fate == SegFate::New {
                    a.ahead_dropped = 0;
                }
                // Blanks this far behind the stream cannot be asked for again (the client's
                // window is far smaller), and their sequence numbers will come round again.
                a.record.prune(seg.seq.wrapping_sub(RECORD_HORIZON));
                edits = a.record.edits(seg.seq, seg.payload.len());
            }
            Dir::ToServer => {
                if seg.flags.ack {
                    a.record.prune(seg.ack);
                }
                if !seg.payload.is_empty() && !a.requests.is_empty() {
                    a.requests.prune(seg.seq.wrapping_sub(RECORD_HORIZON));
                    edits = a.requests.edits(seg.seq, seg.payload.len());
                }
                if a.is_idle() {
                    conns.remove(&id);
                }
            }
            _ => {}
        }
        if dir == Dir::ToClient && seg.flags.ack {
            if let Some(a) = conns.get_mut(&id) {
                a.requests.prune(seg.ack);
            }
        }
        if edits.is_empty() {
            AdaptStep::Pass
        } else {
            AdaptStep::Edit(edits)
        }
    }
}

/// Count an `IF PREDICTED` verdict; whether it takes the object.
fn count_prediction(stats: &mut Stats, v: predict::Verdict) -> bool {
    match v {
        predict::Verdict::NoSize => {
            stats.predictions_no_size += 1;
            false
        }
        predict::Verdict::Made { passes, basis } => {
            match basis {
                Basis::Measured(_) => stats.predictions_measured += 1,
                Basis::Model => stats.predictions_model += 1,
            }
            passes
        }
    }
}

/// The size-cache key of a reference resolved to `u` in a page at `base`: the page's host as
/// its requests name it (`host`) when the reference is to the same place, else its own.
fn object_key(u: &url::Url, base: &url::Url, host: &str) -> String {
    let target = match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_string(),
    };
    if u.host_str() == base.host_str() && u.port_or_known_default() == base.port_or_known_default() {
        size_key(Some(host), "", &target)
    } else {
        let authority = match u.port() {
            Some(p) => format!("{}:{p}", u.host_str().unwrap_or("")),
            None => u.host_str().unwrap_or("").to_string(),
        };
        size_key(Some(&authority), "", &target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_forgets_its_own_rewrites_only() {
        let mut a = Adaptation::default();
        let conn = |slot: u32| ConnId { slot, gen: 1 };
        // 10,000 rewritten transactions pending on 1,000 other connections, and 3 on the one
        // that closes.
        for slot in 1..=1_000 {
            for depth in 0..10 {
                a.rewrote(conn(slot), depth, format!("/small/{slot}/{depth}.gif"));
            }
        }
        let closing = conn(0);
        for depth in [0, 2, 5] {
            a.rewrote(closing, depth, format!("/small/0/{depth}.gif"));
        }
        a.forget(closing);
        assert_eq!(a.take_rewritten(closing, 2), None);
        assert!(!a.rewritten.contains_key(&closing));
        for slot in 1..=1_000 {
            for depth in 0..10 {
                assert_eq!(a.take_rewritten(conn(slot), depth), Some(format!("/small/{slot}/{depth}.gif")));
            }
        }
        // Each taken once: none is left, and no connection is kept with nothing pending.
        assert_eq!(a.take_rewritten(conn(1), 0), None);
        assert!(a.rewritten.is_empty());
    }
}
