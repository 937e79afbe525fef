//! The content-adaptation nodes: the response node at a container page's head (`REMOVE EMBEDS`)
//! and the request node at an embedded object's request head (`REWRITE EMBEDS`), and whether the
//! rules make them worth evaluating.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rules::{ClassId, Effect, EmbedSelect, Facts, Mapping, RuleId, RuleSet};

use super::Policy;
use crate::time::Timestamp;

/// What the content-adaptation nodes know of the transaction, for the rules' facts.
struct AdaptFacts<'a> {
    url: Option<&'a str>,
    host: Option<&'a str>,
    content_type: Option<&'a str>,
    rt: Option<Duration>,
}

impl Policy {
    /// Whether some rule has `REMOVE EMBEDS` (container responses are worth evaluating: for
    /// the removal, or for the counters when it is not carried out).
    pub fn removes_embeds(&self) -> bool {
        self.rules.any_effect_at(rules::Node::Response, |e| matches!(e, rules::Effect::RemoveEmbeds(_)))
    }

    /// The response node (transition 3 to 4 of 004 Figure 3), at a container page's head: the
    /// first `REMOVE EMBEDS` in force for it, with its rule. `url`, `host` and `content_type`
    /// are the transaction's; `pageview_rt` the elapsed time of the client's pageview.
    #[allow(clippy::too_many_arguments)]
    pub fn at_response(
        &mut self,
        now: Timestamp,
        client: SocketAddr,
        server: SocketAddr,
        class: ClassId,
        url: Option<&str>,
        host: Option<&str>,
        content_type: Option<&str>,
        pageview_rt: Option<Duration>,
    ) -> Option<(RuleId, EmbedSelect)> {
        let facts = AdaptFacts { url, host, content_type, rt: pageview_rt };
        self.embeds_at(rules::Node::Response, now, (client, server, class), facts, |rules, effect| match effect {
            Effect::RemoveEmbeds(id) => Some(Some(rules.embeds(id).select.clone())),
            _ => None,
        })
    }

    /// The rules at a content-adaptation node (`node`: request or response), every firing
    /// counted: the first action that `take` can carry out, with its rule; one it cannot (`take`
    /// gives `Some(None)`), or any while adaptation is not carried out, counts as deferred.
    /// `take` gives `None` for the effects of other actions.
    fn embeds_at<T>(
        &mut self,
        node: rules::Node,
        now: Timestamp,
        (client, server, class): (SocketAddr, SocketAddr, ClassId),
        a: AdaptFacts<'_>,
        take: impl Fn(&RuleSet, Effect) -> Option<Option<T>>,
    ) -> Option<(RuleId, T)> {
        self.refresh(now);
        let mut facts = Facts::new(client, server, class, &self.windows);
        facts.holds = Some(&self.holds);
        (facts.url, facts.host, facts.content_type, facts.rt) = (a.url, a.host, a.content_type, a.rt);
        let mut firings = std::mem::take(&mut self.firings);
        firings.clear();
        self.rules.eval(node, &facts, &mut firings);
        let mut found = None;
        // REJECT's, LIMIT REQUESTS' and ABORT IDLE's firings are counted at the request head
        // ([`Policy::at_request_head`]).
        for f in firings.iter().filter(|f| !f.effect.at_request_head()) {
            let Some(rc) = self.rule_counters.get_mut(f.rule.0 as usize) else { continue };
            rc.fired += 1;
            rc.last_fired = Some(now);
            match take(&self.rules, f.effect) {
                None => {}
                Some(Some(t)) if self.adapt_carried_out => {
                    if found.is_none() {
                        found = Some((f.rule, t));
                    }
                }
                Some(_) => rc.deferred += 1,
            }
        }
        self.firings = firings;
        found
    }

    /// Whether some rule has `REWRITE EMBEDS` (embedded objects' requests are worth evaluating:
    /// for the rewrite, or for the counters when it is not carried out).
    pub fn rewrites_embeds(&self) -> bool {
        self.rules.any_effect_at(rules::Node::Request, |e| matches!(e, Effect::RewriteEmbeds(_)))
    }

    /// Whether some `REMOVE EMBEDS` or `REWRITE EMBEDS` selects by `IF PREDICTED`: object sizes
    /// and transfer times are worth learning.
    pub fn predicts(&self) -> bool {
        let rules = &self.rules;
        [rules::Node::Request, rules::Node::Response].into_iter().any(|n| {
            rules.any_effect_at(n, |e| match e {
                Effect::RewriteEmbeds(id) | Effect::RemoveEmbeds(id) => matches!(rules.embeds(*id).select, EmbedSelect::Predicted { .. }),
                _ => false,
            })
        })
    }

    /// Whether some rule has `REWRITE EMBEDS` with its mapping read: requests must come through
    /// the queue to be rewritten.
    pub fn rewrites_with_mapping(&self) -> bool {
        let rules = &self.rules;
        rules.any_effect_at(rules::Node::Request, |e| matches!(e, Effect::RewriteEmbeds(id) if rules.embeds(*id).map.is_some()))
    }

    /// The request node (transitions 5 and 7 of 004 Figure 3), at an embedded object's request
    /// head: the first `REWRITE EMBEDS` in force for it whose mapping was read, with its rule.
    /// `url` is the request's target, `pageview_rt` the elapsed time of its pageview. A
    /// rewrite with no mapping read (no `USING`, or rules compiled without reading files) is
    /// counted as deferred.
    pub fn at_request(
        &mut self,
        now: Timestamp,
        client: SocketAddr,
        server: SocketAddr,
        class: ClassId,
        url: &str,
        host: Option<&str>,
        pageview_rt: Duration,
    ) -> Option<(RuleId, EmbedSelect, Arc<Mapping>)> {
        let facts = AdaptFacts { url: Some(url), host, content_type: None, rt: Some(pageview_rt) };
        let found = self.embeds_at(rules::Node::Request, now, (client, server, class), facts, |rules, effect| match effect {
            Effect::RewriteEmbeds(id) => {
                let e = rules.embeds(id);
                Some(e.map.as_ref().map(|map| (e.select.clone(), map.clone())))
            }
            _ => None,
        });
        found.map(|(rule, (select, map))| (rule, select, map))
    }
}
