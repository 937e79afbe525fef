//! Content adaptation on the packets (004 section 5): embedded objects removed from container
//! pages and image requests rewritten to smaller variants, in place, with the sequence space
//! unchanged and no copy of the content kept. The plan is docs/adapt-design.md.
//!
//! [`patch`] edits a segment's payload and keeps its TCP checksum right; [`remove`] decides which
//! image references of a container go and keeps what was blanked.

pub mod patch;
pub mod remove;
