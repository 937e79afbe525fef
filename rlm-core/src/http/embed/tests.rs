//! Tests of the scanner: every kind of reference, packet boundaries, offsets, wire ranges.

use super::*;

pub(crate) fn scan(body: &[u8], step: usize) -> Vec<EmbedRef> {
    let mut s = EmbedScanner::html();
    let mut out = Vec::new();
    for piece in body.chunks(step.max(1)) {
        s.feed(piece, &mut out);
    }
    out
}

fn urls(refs: &[EmbedRef]) -> Vec<String> {
    refs.iter().map(|r| r.urls.join("|")).collect()
}

const PAGE: &[u8] = br#"<!DOCTYPE html><html><head>
<link rel="stylesheet" href="/css/site.css"><link rel="shortcut icon" href=/favicon.ico>
<link rel=canonical href="/x"><style>body { background: url("/img/bg.png") } @import '/css/more.css';</style>
<script src="/js/app.js"></script><script>var s = "<img src='/not/this.gif'>";</script>
</head><body background="/img/tile.gif">
<!-- <img src="/commented.gif"> -->
<IMG SRC="/img/a.gif" alt="a > b"><img srcset="/img/b-1x.png 1x, /img/b-2x.png 2x" src='/img/b.png'>
<iframe src="/ad.html"></iframe><object data="/movie.swf"></object><embed src="/e.swf">
<picture><source srcset="/img/c.webp"><img src="/img/c.jpg"></picture>
<input type="image" src="/btn.gif"><div style="background-image:url(/img/div.png)">x</div>
<img src="data:image/gif;base64,AAAA"><img src="/a?x=1&amp;y=2"><a href="/next.html">next</a>
</body></html>"#;

#[test]
fn finds_every_kind_of_reference_and_nothing_else() {
    let got = urls(&scan(PAGE, PAGE.len()));
    assert_eq!(
        got,
        vec![
            "/css/site.css",
            "/favicon.ico",
            "/img/bg.png",
            "/css/more.css",
            "/js/app.js",
            "/img/tile.gif",
            "/img/a.gif",
            "/img/b.png|/img/b-1x.png|/img/b-2x.png",
            "/ad.html",
            "/movie.swf",
            "/e.swf",
            "/img/c.webp",
            "/img/c.jpg",
            "/btn.gif",
            "/img/div.png",
            "/a?x=1&y=2",
        ]
    );
}

#[test]
fn same_result_whatever_the_packet_boundaries() {
    let whole = scan(PAGE, PAGE.len());
    for step in [1, 2, 3, 7, 13, 64, 100] {
        assert_eq!(scan(PAGE, step), whole, "step {step}");
    }
}

#[test]
fn offsets_cover_the_tag() {
    let body = b"0123<img src=\"/a.gif\">tail";
    let r = &scan(body, 5)[0];
    assert_eq!(&body[r.start as usize..r.end as usize], b"<img src=\"/a.gif\">");
}

#[test]
fn required_flags() {
    let refs = scan(PAGE, 9);
    let find = |u: &str| refs.iter().find(|r| r.urls[0] == u).unwrap().required;
    assert!(find("/img/a.gif"));
    assert!(find("/css/site.css"));
    assert!(!find("/favicon.ico"));
    assert!(!find("/img/bg.png"));
    assert!(find("/img/div.png"));
}

#[test]
fn css_scanner() {
    let mut s = EmbedScanner::css();
    let mut out = Vec::new();
    for b in br#"a{background:URL( '/x.png' )} @import url(/y.css); b{src:url(/f.woff2)} c{background:url(data:x)}"#.chunks(4) {
        s.feed(b, &mut out);
    }
    assert_eq!(urls(&out), vec!["/x.png", "/y.css", "/f.woff2"]);
}

/// Feed `body` to a tracking scanner in pieces of `step` bytes laid on a wire where `junk`
/// (chunk framing, say) lies between pieces; return the wire, and the references with the
/// bytes their wire ranges cover there.
fn scan_on_wire(body: &[u8], step: usize, junk: &[u8], seq0: u32) -> (Vec<u8>, Vec<(EmbedRef, Vec<u8>)>) {
    let mut s = EmbedScanner::html();
    let (mut out, mut wire) = (Vec::new(), Vec::new());
    for piece in body.chunks(step.max(1)) {
        wire.extend_from_slice(junk);
        s.feed_at(piece, seq0.wrapping_add(wire.len() as u32), &mut out);
        wire.extend_from_slice(piece);
    }
    let covered = out
        .into_iter()
        .map(|r| {
            let bytes = r.wire.iter().flat_map(|&(seq, len)| {
                let at = seq.wrapping_sub(seq0) as usize;
                wire[at..at + len as usize].to_vec()
            });
            let bytes = bytes.collect();
            (r, bytes)
        })
        .collect();
    (wire, covered)
}

const IMGS: &[u8] = br#"<p>x</p><IMG SRC="/img/a.gif" alt="a > b"><img alt=x srcset="/b-1x.png 1x, /b-2x.png 2x" src='/b.png'>
<img src=/c.gif><img
  src = "/d.gif"><img src="/e.gif" src="/e2.gif"><img alt="no src"><img sources=x src=/f.gif><script src="/s.js"></script>"#;

#[test]
fn wire_ranges_cover_exactly_each_imgs_fetching_attributes_whatever_the_pieces() {
    let expect: Vec<&[u8]> = vec![
        b"SRC=\"/img/a.gif\"",
        b"srcset=\"/b-1x.png 1x, /b-2x.png 2x\"src='/b.png'",
        b"src=/c.gif",
        b"src = \"/d.gif\"",
        b"src=\"/e.gif\"src=\"/e2.gif\"",
        b"src=/f.gif",
    ];
    for (junk, seq0) in [(&b""[..], 1000u32), (&b"\r\n1f40\r\n"[..], u32::MAX - 50)] {
        for step in 1..=IMGS.len() {
            let (_, refs) = scan_on_wire(IMGS, step, junk, seq0);
            let imgs: Vec<&Vec<u8>> = refs.iter().filter(|(r, _)| r.kind == EmbedKind::Image).map(|(_, b)| b).collect();
            assert_eq!(imgs.len(), expect.len());
            for (got, want) in imgs.iter().zip(&expect) {
                // Small pieces may leave a tag unmappable (more than 8 of them), never wrong.
                if step >= 12 || !got.is_empty() {
                    assert_eq!(String::from_utf8_lossy(got), String::from_utf8_lossy(want), "step {step}, junk {junk:?}");
                }
            }
            assert!(refs.iter().filter(|(r, _)| r.kind != EmbedKind::Image).all(|(r, _)| r.wire.is_empty()), "step {step}");
        }
        // With nothing between the pieces, the ranges do not depend on the pieces at all.
        if junk.is_empty() {
            let whole: Vec<Vec<(u32, u32)>> = scan_on_wire(IMGS, IMGS.len(), junk, seq0).1.into_iter().map(|(r, _)| r.wire).collect();
            for step in [12, 17, 100] {
                let cut: Vec<Vec<(u32, u32)>> = scan_on_wire(IMGS, step, junk, seq0).1.into_iter().map(|(r, _)| r.wire).collect();
                assert_eq!(cut, whole, "step {step}");
            }
        }
    }
}

#[test]
fn a_tag_across_a_gap_is_not_placed_and_the_next_one_is() {
    let mut s = EmbedScanner::html();
    let mut out = Vec::new();
    s.feed_at(b"<p><img src=\"/a", 1000, &mut out);
    s.gap();
    s.feed_at(b".gif\"><img src=/b.gif>", 1100, &mut out);
    assert_eq!(out.len(), 2);
    assert!(out[0].wire.is_empty(), "{:?}", out[0].wire);
    assert_eq!(out[1].wire, [(1100 + 6 + 5, 10)]);
}

#[test]
fn a_tag_over_more_pieces_than_kept_cannot_be_mapped() {
    let body = b"<img alt=\"one two three four five six seven eight\" src=\"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.gif\">";
    // The attribute spans 13 pieces of 4 bytes: its first ones are gone by its end.
    let (_, refs) = scan_on_wire(body, 4, b"", 0);
    assert_eq!(refs.len(), 1);
    assert!(refs[0].0.wire.is_empty(), "{:?}", refs[0].0.wire);
    // In 8 pieces of 7 bytes it is still mapped, though the tag's `<` lies in a piece let go.
    let (_, refs) = scan_on_wire(body, 7, b"", 0);
    assert!(refs[0].1.starts_with(b"src=\"/a") && refs[0].1.ends_with(b".gif\""), "{}", String::from_utf8_lossy(&refs[0].1));
    // Fed whole, or without sequence numbers, the reference is the same but for `wire`.
    let (_, whole) = scan_on_wire(body, body.len(), b"", 0);
    assert_eq!(whole[0].1, refs[0].1);
    assert_eq!(scan(body, 4)[0].urls, whole[0].0.urls);
}

#[test]
fn pending_says_from_where_a_cut_tag_may_still_be_blanked() {
    let pending_after = |prefix: &[u8]| {
        let mut s = EmbedScanner::html();
        s.feed_at(prefix, 500, &mut Vec::new());
        s.pending()
    };
    let at = |prefix: &[u8], needle: &[u8]| Some(500 + prefix.windows(needle.len()).position(|w| w == needle).unwrap() as u32);
    for cut in [
        &b"x<img alt=\"a\" sr"[..],
        b"x<img alt=\"a\" src",
        b"x<img alt=\"a\" src=",
        b"x<img alt=\"a\" src=\"/a",
        b"x<img alt=\"a\" src=\"/a\" ",
        b"x<img alt=\"a\" src=\"/a\" width",
    ] {
        assert_eq!(pending_after(cut), at(cut, b"sr"), "{}", String::from_utf8_lossy(cut));
    }
    for cut in
        [&b"x<im"[..], b"x<img", b"x<img alt=\"a\" ", b"x<img alt=\"a", b"x<img style=", b"x<a href=\"/", b"x<img src=/a>", b"x<script src=\"/a"]
    {
        assert_eq!(pending_after(cut), None, "{}", String::from_utf8_lossy(cut));
    }
    // Without sequence numbers nothing is tracked.
    let mut s = EmbedScanner::html();
    s.feed(b"x<img src=\"/a", &mut Vec::new());
    assert_eq!(s.pending(), None);
}

#[test]
fn huge_attribute_values_are_dropped_not_buffered() {
    let mut body = b"<img src=\"".to_vec();
    body.extend(std::iter::repeat_n(b'a', 100_000));
    body.extend_from_slice(b"\"><img src=/ok.gif>");
    let r = scan(&body, 1000);
    assert_eq!(urls(&r), vec!["/ok.gif"]);
}

#[test]
fn find_byte_finds_the_first_whether_near_or_far() {
    use super::tag::{find_byte, NEAR};
    for len in [0, 1, NEAR - 1, NEAR, NEAR + 1, 3 * NEAR] {
        let hay = vec![b'x'; len];
        assert_eq!(find_byte(b'<', &hay), None, "none in {len} bytes");
        for at in 0..len {
            let mut h = hay.clone();
            h[at] = b'<';
            if at + 1 < len {
                h[len - 1] = b'<';
            }
            assert_eq!(find_byte(b'<', &h), Some(at), "the first of {len} bytes at {at}");
        }
    }
}
