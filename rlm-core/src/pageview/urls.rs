//! The URL a request asks for and the normalised keys by which requests and embedded
//! references are matched (made without building the URL when the request is simple).

/// Normalised key of a URL: host (with a non-default port) + path + query.
pub fn url_key(u: &url::Url) -> Option<String> {
    let host = u.host_str()?.to_ascii_lowercase();
    let mut k = host;
    if let Some(p) = u.port() {
        k.push(':');
        k.push_str(&p.to_string());
    }
    k.push_str(u.path());
    if let Some(q) = u.query() {
        k.push('?');
        k.push_str(q);
    }
    Some(k)
}

/// [`url_key`] of [`request_url`] without building a URL, for the common simple case: a host of
/// lowercase-able ASCII letters, digits, hyphens and dots (or a canonical dotted quad), an optional
/// port, and an origin-form target whose path and query the URL parser would leave as they are
/// (no dot segments, no characters it escapes or rewrites, no fragment). `None`: not simple, ask
/// the URL parser. Property-tested against it.
pub fn simple_request_key(host: Option<&str>, server: &str, uri: &str) -> Option<String> {
    let h = host.filter(|h| !h.is_empty()).unwrap_or(server);
    let (name, port) = match h.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (h, None),
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && !p.starts_with('0') && p.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u32 = p.parse().ok()?;
            if n > 65_535 {
                return None;
            }
            (n != 80).then_some(p)
        }
        Some(_) => return None,
    };
    let labels_ok = !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') && !l.starts_with('-'))
        && !name.as_bytes()[..name.len().min(4)].eq_ignore_ascii_case(b"xn--")
        && !name.contains(".xn--")
        && !name.contains(".XN--");
    if !labels_ok {
        return None;
    }
    // A name whose last label starts with a digit is an IPv4 address to the URL parser: only a
    // canonical dotted quad stays as written.
    if name.rsplit('.').next().is_some_and(|l| l.as_bytes()[0].is_ascii_digit()) {
        let parts: Vec<&str> = name.split('.').collect();
        let canonical = parts.len() == 4
            && parts
                .iter()
                .all(|p| p.bytes().all(|b| b.is_ascii_digit()) && (p.len() == 1 || !p.starts_with('0')) && p.parse::<u16>().is_ok_and(|n| n <= 255));
        if !canonical {
            return None;
        }
    }
    let (path, query) = match uri.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (uri, None),
    };
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"/-_.~!$&()*+,;=:@".contains(&b);
    if !path.starts_with('/')
        || path.starts_with("//")
        || !path.bytes().all(plain)
        || query.is_some_and(|q| !q.bytes().all(|b| plain(b) || b == b'?'))
    {
        return None;
    }
    // Dot segments (`/./`, `/../`, a trailing `/.`) are resolved by the parser.
    if path.split('/').any(|seg| seg == "." || seg == "..") {
        return None;
    }
    let mut k = String::with_capacity(name.len() + uri.len() + 7);
    k.extend(name.chars().map(|c| c.to_ascii_lowercase()));
    if let Some(p) = port {
        k.push(':');
        k.push_str(p);
    }
    k.push_str(path);
    if let Some(q) = query {
        k.push('?');
        k.push_str(q);
    }
    Some(k)
}

/// The URL a request asks for (origin-form URI + Host, or absolute-form).
pub fn request_url(host: Option<&str>, server: &str, uri: &str) -> Option<url::Url> {
    if uri.starts_with("http://") || uri.starts_with("https://") {
        return url::Url::parse(uri).ok();
    }
    if !uri.starts_with('/') {
        return None;
    }
    let h = host.filter(|h| !h.is_empty()).unwrap_or(server);
    url::Url::parse(&format!("http://{h}{uri}")).ok()
}
