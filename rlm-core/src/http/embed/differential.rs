//! Differential tests: the fast scanner gives exactly what the original byte-at-a-time scanner
//! (`reference`) gives, fed in one piece, and fed in pieces cut anywhere.

use proptest::prelude::*;

use super::reference::Reference;
use super::{EmbedRef, EmbedScanner};

fn split<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.push(0);
    points.push(data.len());
    points.sort_unstable();
    points.dedup();
    points.windows(2).map(|w| &data[w[0]..w[1]]).collect()
}

fn fast(css: bool, pieces: &[&[u8]]) -> Vec<EmbedRef> {
    let mut s = if css { EmbedScanner::css() } else { EmbedScanner::html() };
    let mut out = Vec::new();
    for p in pieces {
        s.feed(p, &mut out);
    }
    assert_eq!(s.offset(), pieces.iter().map(|p| p.len() as u64).sum::<u64>());
    out
}

fn reference(css: bool, body: &[u8]) -> Vec<EmbedRef> {
    let mut s = if css { Reference::css() } else { Reference::html() };
    let mut out = Vec::new();
    s.feed(body, &mut out);
    out
}

/// Both scanners, whole and cut at `cuts` and byte by byte, agree.
fn check(css: bool, body: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
    let want = reference(css, body);
    prop_assert_eq!(&fast(css, &[body]), &want, "whole");
    prop_assert_eq!(&fast(css, &split(body, cuts)), &want, "cut at {:?}", cuts);
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    prop_assert_eq!(&fast(css, &bytes), &want, "byte by byte");
    Ok(())
}

fn pick(xs: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(xs).prop_map(str::to_string)
}

/// A mix of upper and lower case, as written by hand.
fn cased(s: String, mask: u32) -> String {
    s.chars().enumerate().map(|(i, c)| if mask >> (i % 32) & 1 == 1 { c.to_ascii_uppercase() } else { c }).collect()
}

fn css_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            pick(&[
                "url(",
                "URL(",
                "uRl( ",
                "url(\"",
                "url('",
                "@import",
                "@IMPORT ",
                "@import url(",
                "@import '",
                "@import \"",
                "/img/a.png",
                "/b.css",
                "data:x",
                "#x",
                ")",
                "'",
                "\"",
                ";",
                "\n",
                " ",
                "\t",
                "{",
                "}",
                "u",
                "ur",
                "@",
                "@imp",
                "background:",
                "a{color:red}",
                "</",
                "<",
                "&amp;",
            ]),
            "[a-z /.:;(){}'\"@-]{0,12}",
        ],
        0..16,
    )
    .prop_map(|v| v.concat())
}

fn attr_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "/[a-z]{1,6}/[a-z0-9]{1,6}\\.(gif|png|css|js)",
        "[a-z <>=\"'/&;#-]{0,14}",
        pick(&[
            "stylesheet",
            "icon",
            "shortcut icon",
            "apple-touch-icon",
            "preload",
            "modulepreload",
            "alternate stylesheet",
            "STYLESHEET",
            "image",
            "IMAGE",
            "text",
            "data:image/gif;base64,AA",
            "javascript:void(0)",
            "#top",
            "about:blank",
            "/a?x=1&amp;y=2",
            "/a.png 1x, /b.png 2x",
            " /c.webp 480w , data:x 1x,/d.png",
            "",
            " ",
            "/x y",
            "DATA:x",
            " JavaScript:go()",
            "Mailto:a@b",
            "blob:x",
            "ABOUT:",
            "data",
            "about",
            "/&#38;&quot;&#39;&lt;&gt;",
            "\u{e9}t\u{e9}.png",
            "//cdn/x.png",
            "x:y",
            "0:x",
        ]),
        css_text(),
    ]
}

fn attribute() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        4 => pick(&["src", "href", "rel", "srcset", "data", "style", "background", "type", "poster"]),
        2 => pick(&["class", "id", "alt", "title", "width", "data-src", "onclick", "loading"]),
        1 => pick(&["srcsrcsrcsrcsrcsrc", "backgroundbackground", "a\"b", "x'", "=x", "=src", "=style", "<", "s/rc", ">"]),
    ];
    let form = prop_oneof![Just(""), Just("\""), Just("'"), Just("=")];
    let gap = || pick(&["", "", " ", "\n", " \t"]);
    (name, any::<u32>(), form, gap(), gap(), attr_value()).prop_map(|(name, mask, form, g1, g2, value)| {
        let name = cased(name, mask);
        match form {
            "" => name,
            "=" => format!("{name}{g1}={g2}{value}"),
            q => format!("{name}{g1}={g2}{q}{value}{q}"),
        }
    })
}

fn tag() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        pick(&["img", "script", "link", "iframe", "frame", "object", "embed", "source", "video", "audio", "input", "style"]),
        pick(&["p", "div", "a", "span", "td", "tr", "li", "section", "br", "body", "table", "imgx", "scriptx", "averyveryverylongtagname"]),
    ];
    let sep = pick(&[" ", " ", "  ", "\n", "/", " / ", "\t", ""]);
    let end = pick(&[">", ">", ">", "/>", " >", ""]);
    (name, any::<u32>(), prop::collection::vec((sep, attribute()), 0..5), end).prop_map(|(name, mask, attrs, end)| {
        let mut t = format!("<{}", cased(name, mask));
        for (sep, a) in attrs {
            t.push_str(&sep);
            t.push_str(&a);
        }
        t.push_str(&end);
        t
    })
}

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 .,&;<>\"'=/!?-]{0,30}",
        6 => tag(),
        1 => pick(&["</div>", "</p >", "</a>", "</", "<", "<<", "< p>", "<>", "<?xml version=\"1.0\"?>", "<!DOCTYPE html>", "<!>", "<!x>", "<!-x>", "<!->"]),
        2 => (pick(&["<!--", "<!--", "<!---", "<!-- -"]), "[a-z <>!-]{0,20}", pick(&["-->", "--->", "---->", "->", "--!>", "-- >", "- ->", ""]))
            .prop_map(|(a, b, c)| format!("{a}{b}{c}")),
        2 => (pick(&["<script>", "<SCRIPT type=text/javascript>", "<script src=/s.js>", "<script\n>"]), "[a-z<>/'\" =;!-]{0,30}",
              pick(&["</script>", "</SCRIPT >", "</ScRiPt\n>", "</scr", "</scriptx>", "<</script>", "</ script>", ""]))
            .prop_map(|(a, b, c)| format!("{a}{b}{c}")),
        2 => (pick(&["<style>", "<STYLE media=screen>", "<style type=\"text/css\">"]), css_text(),
              pick(&["</style>", "</STYLE>", "</sty", "<</style>", "</stylex>", ""]))
            .prop_map(|(a, b, c)| format!("{a}{b}{c}")),
    ]
}

/// A tag whose URL is arbitrary bytes (not always UTF-8).
fn raw_url_tag() -> impl Strategy<Value = Vec<u8>> {
    (
        pick(&["<img src=\"", "<img srcset=\"", "<p style=\"background:url(", "<link rel=stylesheet href=\"", "<td background=\""]),
        prop::collection::vec(prop_oneof![3 => prop::sample::select(b"/a&; :,x".to_vec()), 1 => any::<u8>()], 0..12),
    )
        .prop_map(|(open, url)| [open.as_bytes(), &url, b")\">"].concat())
}

fn page() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![8 => fragment().prop_map(String::into_bytes), 1 => raw_url_tag()], 0..24).prop_map(|v| v.concat())
}

/// Bytes that matter to some state, and any byte.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    let interesting = prop::sample::select(b"<>\"'=/!?- \n\tsrcimgtylepu@()".to_vec());
    prop::collection::vec(prop_oneof![4 => interesting, 1 => any::<u8>()], 0..300)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn html_matches_the_reference(body in page(), cuts in prop::collection::vec(any::<usize>(), 0..30)) {
        check(false, &body, &cuts)?;
    }

    #[test]
    fn byte_soup_matches_the_reference(body in soup(), cuts in prop::collection::vec(any::<usize>(), 0..20)) {
        check(false, &body, &cuts)?;
        check(true, &body, &cuts)?;
    }

    #[test]
    fn css_matches_the_reference(css in css_text(), cuts in prop::collection::vec(any::<usize>(), 0..20)) {
        check(true, css.as_bytes(), &cuts)?;
        let in_style = format!("<style>{css}</style><div style=\"{}\">", css.replace('"', "'"));
        check(false, in_style.as_bytes(), &cuts)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Values around the 4096-byte cap: kept below it, dropped above it, in tags and in CSS.
    #[test]
    fn value_cap_matches_the_reference(n in 4090usize..4100, which in 0usize..5, cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let long = "a".repeat(n);
        let body = match which {
            0 => format!("<img src=\"/{long}\"><img src=/ok.gif>"),
            1 => format!("<img src=/{long} src=/second.gif>"),
            2 => format!("<img src='/{long}' src='/second.gif' srcset=\"/{long} 1x, /b.png 2x\">"),
            3 => format!("<style>a{{background:url(/{long})}} b{{background:url('/ok.png')}}</style>"),
            _ => format!("<p style=\"background:url(/{long})\">x</p><p style=\"x:url(/{long}) url(/b.png)\">"),
        };
        check(false, body.as_bytes(), &cuts)?;
        check(true, body.as_bytes(), &cuts)?;
    }
}

/// Every state the fast paths carry across a piece boundary, cut at every byte.
#[test]
fn every_cut_of_split_sensitive_constructs() {
    let cases: &[&[u8]] = &[
        b"<!-- a -- > b --- -> c -->x<img src=/a.gif>",
        b"<!---->x<img src=/a.gif><!--->--><img src=/b.gif>",
        b"<!-->--><img src=/c.gif>-->",
        b"<script>a<b</scr</SCRIPT<<//script</scriptx ><img src=/d.gif>",
        b"<style>a{b:url( '/e.png' )}</sty</STYLE\n><img src=/f.gif><style>@import url(/g.css);</style>",
        b"<DIV CLASS=\"a>b\" data-x='<img src=/no.gif>' STYLE=\"background:url(/h.png)\"/><a href=x>y</a>",
        b"<img\nsrc\n=\n'/i.gif'\nsrcset = \"/i2.gif 2x\"><IMG SRC=/j.gif/><img src=/k.gif/ >",
        b"<link rel=\"alternate stylesheet\" href=/no.css><link REL=Stylesheet HREF=/l.css><link rel=icon href=/m.ico>",
        b"<p a\"b='>' c=d\"e>f\">g<img src=/n.gif>",
        b"<video src=/v.mp4 poster=/p.jpg></video><input TYPE=image src=/o.gif><object data=/q.swf>",
    ];
    for body in cases {
        let want = reference(false, body);
        for a in 0..=body.len() {
            for b in a..=body.len() {
                let got = fast(false, &[&body[..a], &body[a..b], &body[b..]]);
                assert_eq!(got, want, "{} cut at {a}, {b}", String::from_utf8_lossy(body));
            }
        }
    }
}
