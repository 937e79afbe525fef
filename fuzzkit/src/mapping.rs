//! Arbitrary bytes as a `REWRITE EMBEDS ... USING` mapping file: reading must never panic, and a
//! mapping that reads maps every target to one exactly as long (rlm rewrites requests in place),
//! the words of the file and a few fixed targets among them.

use rules::Mapping;

/// Targets looked up in every mapping that reads, besides the file's own words.
const TARGETS: &[&str] = &["/", "/img/a.jpg", "/img/", "/ims/a.jpg", "/images/large/cover.jpg?x=1", "", "/é/ü"];

/// The target: `data` as a mapping file.
pub fn mapping(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(m) = Mapping::parse("fuzz.map", &text) else { return };
    let _ = (m.len(), m.is_empty());
    let words = text.split(['\n', ' ', '\t', '#']).filter(|w| !w.is_empty());
    for target in TARGETS.iter().copied().chain(words).take(1000) {
        // A word and its extensions: exact pairs, and prefixes that match longer targets.
        for t in [target.to_string(), format!("{target}x/y.gif"), target.trim_end_matches('*').to_string()] {
            if let Some(to) = m.map(&t) {
                assert_eq!(to.len(), t.len(), "{t:?} mapped to {to:?}, of another length");
                assert_ne!(to, t);
            }
        }
    }
}
