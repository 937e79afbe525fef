//! `REMOVE EMBEDS` (004 section 5; transition 3 to 4 of Figure 3): which image references of a
//! container page go, and the blanks that carry it out on every copy of their bytes.
//!
//! The decision is taken per container response at its head ([`Removal`]), then per image
//! reference in document order at the tag's `>`. A reference that goes is blanked from its
//! attribute name's first byte through the value's end (`<img           alt="x">`): the element
//! stays, with no URL to fetch. What was blanked is kept per connection in sequence space
//! ([`super::record::Record`]), so that a retransmission, however the server cuts it, is blanked
//! alike.

use rules::{EmbedSelect, RuleId};

/// The removal decided at one container response's head.
#[derive(Clone, Debug)]
pub struct Removal {
    /// The transaction (its position on the connection).
    pub depth: u32,
    /// The `REMOVE EMBEDS` rule that took the container.
    pub rule: RuleId,
    /// Which of the container's image references the rule takes.
    pub select: EmbedSelect,
    /// Image references of the container seen so far.
    pub seen: u32,
    /// For `IF PREDICTED`: the container's URL (the base of its references) and its host as
    /// its requests name it, to look the objects' sizes up by.
    pub base: Option<(url::Url, String)>,
}

impl Removal {
    /// The removal of transaction `depth` by `rule`, with no reference seen yet.
    pub fn new(depth: u32, rule: RuleId, select: EmbedSelect) -> Removal {
        Removal { depth, rule, select, seen: 0, base: None }
    }

    /// The container's next image reference, in document order: whether it goes.
    pub fn takes(&mut self, url: &str) -> bool {
        self.seen += 1;
        selects(&self.select, self.seen, url)
    }
}

/// Whether `select` takes the image reference at `position` (1-based, document order) with
/// `url` (as written in the page). `IF PREDICTED` takes nothing here: the engine judges each
/// object with the transfer-time predictor instead (`engine/adaptation.rs`).
pub fn selects(select: &EmbedSelect, position: u32, url: &str) -> bool {
    match select {
        EmbedSelect::All => true,
        EmbedSelect::After(n) => position > *n,
        EmbedSelect::At(at) => at.contains(&position),
        EmbedSelect::Matching(glob) => glob.matches(url, false),
        EmbedSelect::Predicted { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rules::Glob;

    #[test]
    fn selectors_take_by_position_and_by_url() {
        let take = |s: EmbedSelect| (1..=4).map(|p| selects(&s, p, &format!("/img/{p}.gif"))).collect::<Vec<_>>();
        assert_eq!(take(EmbedSelect::All), [true, true, true, true]);
        assert_eq!(take(EmbedSelect::After(1)), [false, true, true, true]);
        assert_eq!(take(EmbedSelect::At(vec![2, 4])), [false, true, false, true]);
        assert_eq!(take(EmbedSelect::Matching(Glob::new("*/3.gif"))), [false, false, true, false]);
        let mut r = Removal::new(1, RuleId(0), EmbedSelect::At(vec![2]));
        assert_eq!([r.takes("/a"), r.takes("/b"), r.takes("/c")], [false, true, false]);
    }
}
