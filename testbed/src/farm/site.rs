//! The bookstore: TPC-W's 14 page types, their mix, their embedded images, the images themselves.
//!
//! Every container page is built from a database query and embeds up to 11 images: the logo,
//! navigation buttons and item thumbnails. Product-detail pages carry a 256 KB cover as their
//! second object for six items in seven, so about 18% of the browsing mix's pageviews have it
//! (004 section 6.4). Every image also exists in a smaller variant under `/ims/` (a sixteenth of
//! its size, at a path of the same length) for the rewrite experiments.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

/// TPC-W's web interactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageType {
    Home,
    NewProducts,
    BestSellers,
    ProductDetail,
    SearchRequest,
    SearchResults,
    ShoppingCart,
    CustomerRegistration,
    BuyRequest,
    BuyConfirm,
    OrderInquiry,
    OrderDisplay,
    AdminRequest,
    AdminConfirm,
}

impl PageType {
    pub const ALL: [PageType; 14] = [
        PageType::Home,
        PageType::NewProducts,
        PageType::BestSellers,
        PageType::ProductDetail,
        PageType::SearchRequest,
        PageType::SearchResults,
        PageType::ShoppingCart,
        PageType::CustomerRegistration,
        PageType::BuyRequest,
        PageType::BuyConfirm,
        PageType::OrderInquiry,
        PageType::OrderDisplay,
        PageType::AdminRequest,
        PageType::AdminConfirm,
    ];

    pub fn path(self) -> &'static str {
        match self {
            PageType::Home => "/home",
            PageType::NewProducts => "/new_products",
            PageType::BestSellers => "/best_sellers",
            PageType::ProductDetail => "/product_detail",
            PageType::SearchRequest => "/search_request",
            PageType::SearchResults => "/execute_search",
            PageType::ShoppingCart => "/shopping_cart",
            PageType::CustomerRegistration => "/customer_registration",
            PageType::BuyRequest => "/buy_request",
            PageType::BuyConfirm => "/buy_confirm",
            PageType::OrderInquiry => "/order_inquiry",
            PageType::OrderDisplay => "/order_display",
            PageType::AdminRequest => "/admin_request",
            PageType::AdminConfirm => "/admin_confirm",
        }
    }

    pub fn from_path(path: &str) -> Option<PageType> {
        PageType::ALL.iter().copied().find(|p| p.path() == path)
    }

    /// TPC-W's browsing mix, in percent of interactions.
    pub fn browsing_mix(self) -> f64 {
        match self {
            PageType::Home => 29.00,
            PageType::NewProducts => 11.00,
            PageType::BestSellers => 11.00,
            PageType::ProductDetail => 21.00,
            PageType::SearchRequest => 12.00,
            PageType::SearchResults => 11.00,
            PageType::ShoppingCart => 2.00,
            PageType::CustomerRegistration => 0.82,
            PageType::BuyRequest => 0.75,
            PageType::BuyConfirm => 0.69,
            PageType::OrderInquiry => 0.30,
            PageType::OrderDisplay => 0.25,
            PageType::AdminRequest => 0.10,
            PageType::AdminConfirm => 0.09,
        }
    }

    /// Pick a page type by the browsing mix from a uniform number in [0, 1).
    pub fn pick(u: f64) -> PageType {
        let total: f64 = PageType::ALL.iter().map(|p| p.browsing_mix()).sum();
        let mut x = u * total;
        for p in PageType::ALL {
            x -= p.browsing_mix();
            if x < 0.0 {
                return p;
            }
        }
        PageType::Home
    }

    /// How many item thumbnails the page lists.
    pub fn thumbnails(self) -> usize {
        match self {
            PageType::Home | PageType::NewProducts | PageType::BestSellers | PageType::SearchResults => 5,
            PageType::ProductDetail => 4,
            PageType::ShoppingCart | PageType::BuyRequest | PageType::BuyConfirm | PageType::OrderDisplay => 3,
            _ => 1,
        }
    }
}

/// Thumbnails on disk (items map onto them).
pub const THUMBS: u32 = 100;
/// 256 KB covers on disk.
pub const LARGE: u32 = 10;
pub const LARGE_BYTES: usize = 256 * 1024;

pub fn thumb_url(item: i64) -> String {
    format!("/img/thumb/{}.gif", item.rem_euclid(THUMBS as i64))
}

pub fn large_url(item: i64) -> String {
    format!("/img/large/{}.gif", item.rem_euclid(LARGE as i64))
}

/// Whether an item's detail page carries the large cover (six items in seven).
pub fn has_large_cover(item: i64) -> bool {
    item.rem_euclid(7) != 0
}

const NAV: [&str; 4] = ["home", "search", "cart", "order"];

/// One item row as the page shows it.
#[derive(Clone, Debug)]
pub struct ItemRow {
    pub id: i64,
    pub title: String,
    pub author: String,
    pub cost: f64,
}

/// Build a container page. The embedded images, in order: the logo, (the large cover on a
/// product detail page), the navigation buttons, the item thumbnails.
pub fn render(page: PageType, items: &[ItemRow]) -> String {
    let mut h = String::with_capacity(4096);
    let _ = write!(h, "<!DOCTYPE html>\n<html><head><title>TPC-W bookstore: {:?}</title></head>\n<body>\n", page);
    h.push_str("<img src=\"/img/logo.gif\" alt=\"bookstore\">\n");
    if page == PageType::ProductDetail {
        if let Some(first) = items.first().filter(|i| has_large_cover(i.id)) {
            let _ = writeln!(h, "<img src=\"{}\" alt=\"cover\" width=\"400\">", large_url(first.id));
        }
    }
    h.push_str("<p>");
    for n in NAV {
        let _ = write!(h, "<a href=\"/{n}\"><img src=\"/img/nav/{n}.gif\" alt=\"{n}\"></a> ");
    }
    h.push_str("</p>\n<table>\n");
    for (k, it) in items.iter().enumerate() {
        let thumb = if k < page.thumbnails() { format!("<img src=\"{}\" alt=\"\">", thumb_url(it.id)) } else { String::new() };
        let _ = writeln!(
            h,
            "<tr><td>{thumb}</td><td><a href=\"/product_detail?i_id={}\">{}</a></td><td>{}</td><td>${:.2}</td></tr>",
            it.id,
            html_escape(&it.title),
            html_escape(&it.author),
            it.cost
        );
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A valid GIF89a (a 1×1 image) padded with a comment extension to exactly `size` bytes.
pub fn gif(size: usize, seed: u8) -> Vec<u8> {
    let mut g = b"GIF89a".to_vec();
    g.extend_from_slice(&[1, 0, 1, 0, 0x80, 0, 0]); // 1×1, global colour table of 2
    g.extend_from_slice(&[seed, 0x40, 0x80, 0xff, 0xff, 0xff]);
    let tail: &[u8] = &[0x2c, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b];
    let base = g.len() + tail.len();
    if size >= base + 5 {
        // Comment extension: 0x21 0xFE, sub-blocks of at most 255 bytes, a 0 terminator.
        let mut room = size - base - 3;
        g.extend_from_slice(&[0x21, 0xfe]);
        while room > 0 {
            let n = room.min(256) - 1;
            let n = if room - (n + 1) == 1 { n - 1 } else { n }; // never leave a lone byte
            g.push(n as u8);
            g.extend(std::iter::repeat_n(b'x', n));
            room -= n + 1;
        }
        g.push(0);
    }
    g.extend_from_slice(tail);
    g
}

/// Every image the site embeds, with its size: (path under the document root, bytes).
pub fn image_files() -> Vec<(String, usize)> {
    let mut v = vec![("img/logo.gif".to_string(), 4_000)];
    for n in NAV {
        v.push((format!("img/nav/{n}.gif"), 1_500));
    }
    for i in 0..THUMBS {
        // Thumbnails of 2 to 9 KB, spread deterministically.
        v.push((format!("img/thumb/{i}.gif"), 2_000 + (i as usize * 7919) % 7_000));
    }
    for i in 0..LARGE {
        v.push((format!("img/large/{i}.gif"), LARGE_BYTES));
    }
    // The small variants, a sixteenth of the size, at a path of the same length (`/ims/...` for
    // `/img/...`), so that rlm can rewrite a request in place (`testbed/maps/ims.map`).
    let small: Vec<(String, usize)> = v.iter().map(|(p, n)| (p.replacen("img/", "ims/", 1), (n / 16).max(200))).collect();
    v.extend(small);
    v
}

/// Write the images under `root`.
pub fn write_images(root: &Path) -> Result<()> {
    for (k, (p, n)) in image_files().iter().enumerate() {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().expect("has a parent"))?;
        std::fs::write(path, gif(*n, k as u8))?;
    }
    Ok(())
}

/// Write the open-loop experiments' files: `files/{i}` of `sizes[i]` bytes.
pub fn write_files(root: &Path, sizes: &[u64]) -> Result<()> {
    if sizes.is_empty() {
        return Ok(());
    }
    let dir = root.join("files");
    std::fs::create_dir_all(&dir)?;
    let max = sizes.iter().copied().max().unwrap_or(0) as usize;
    let block: Vec<u8> = (0..max).map(|i| b'a' + (i % 26) as u8).collect();
    for (i, n) in sizes.iter().enumerate() {
        std::fs::write(dir.join(i.to_string()), &block[..*n as usize])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gifs_have_the_exact_size_and_a_valid_frame() {
        for size in [0, 40, 41, 44, 45, 291, 292, 300, 1500, 4000, LARGE_BYTES] {
            let g = gif(size, 1);
            assert!(g.starts_with(b"GIF89a") && g.ends_with(&[0x3b]));
            if size >= 40 {
                assert_eq!(g.len(), size, "size {size}");
            }
        }
    }

    #[test]
    fn mix_and_large_covers() {
        let total: f64 = PageType::ALL.iter().map(|p| p.browsing_mix()).sum();
        assert!((total - 100.0).abs() < 0.01);
        // Share of pageviews whose second object is the 256 KB cover: about 18%.
        let share = PageType::ProductDetail.browsing_mix() / total * (6.0 / 7.0);
        assert!((share - 0.18).abs() < 0.005, "{share}");
        assert_eq!(PageType::pick(0.0), PageType::Home);
        assert_eq!(PageType::pick(0.999_999), PageType::AdminConfirm);
        for p in PageType::ALL {
            assert_eq!(PageType::from_path(p.path()), Some(p));
        }
    }

    #[test]
    fn pages_embed_at_most_eleven_images_with_the_cover_second() {
        let items: Vec<ItemRow> = (1..=10).map(|i| ItemRow { id: i, title: format!("T<{i}>"), author: "A".into(), cost: 1.5 }).collect();
        for p in PageType::ALL {
            let html = render(p, &items);
            let n = html.matches("<img ").count();
            assert!((5..=11).contains(&n), "{p:?}: {n}");
        }
        let html = render(PageType::ProductDetail, &items[..]);
        let srcs: Vec<&str> = html.split("<img src=\"").skip(1).map(|s| s.split('"').next().unwrap()).collect();
        assert_eq!(srcs[1], "/img/large/1.gif");
        assert!(html.contains("T&lt;1&gt;"));
        let no_cover = render(PageType::ProductDetail, &[ItemRow { id: 7, title: "x".into(), author: "y".into(), cost: 1.0 }]);
        assert!(!no_cover.contains("/img/large/"));
    }

    #[test]
    fn the_labs_mapping_takes_every_image_to_its_small_variant() {
        let map = rules::Mapping::parse("ims.map", crate::inline::IMS_MAP).expect("the lab's mapping parses");
        let files: std::collections::HashMap<String, usize> = image_files().into_iter().collect();
        let mut n = 0;
        for (path, &size) in files.iter().filter(|(p, _)| p.starts_with("img/")) {
            let to = map.map(&format!("/{path}")).expect("mapped");
            assert_eq!(to.len(), path.len() + 1);
            let small = files[&to[1..]];
            assert_eq!(small, (size / 16).max(200), "{path} -> {to}");
            n += 1;
        }
        assert_eq!(n * 2, files.len());
    }
}
