//! From attribute and CSS values to the URLs they fetch.

use memchr::memchr;

/// Decode the few HTML character references that occur in URLs, trim, and drop non-fetches.
pub(super) fn clean_url(raw: &[u8]) -> Option<String> {
    let raw = raw.trim_ascii();
    let s = match std::str::from_utf8(raw) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(raw),
    };
    let s = if memchr(b'&', s.as_bytes()).is_some() {
        s.replace("&amp;", "&").replace("&#38;", "&").replace("&quot;", "\"").replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">")
    } else {
        s.into_owned()
    };
    let b = s.as_bytes();
    let skipped = |p: &str| b.len() >= p.len() && b[..p.len()].eq_ignore_ascii_case(p.as_bytes());
    let scheme = b.first().is_some_and(u8::is_ascii_alphabetic);
    if s.is_empty() || s.starts_with('#') || scheme && ["data:", "javascript:", "about:", "mailto:", "blob:"].into_iter().any(skipped) {
        return None;
    }
    Some(s)
}

/// Candidates of a `srcset`: comma-separated "URL [descriptor]".
pub(super) fn srcset_urls(v: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(v).split(',').filter_map(|c| c.split_ascii_whitespace().next()).filter_map(|u| clean_url(u.as_bytes())).collect()
}
