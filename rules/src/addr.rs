//! Address patterns: `*`, IPv4 with wildcards (`10.4.*.*`), IPv4 and IPv6 networks in CIDR
//! notation (`10.4.0.0/16`, `2001:db8::/32`) and single addresses.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::diag::{Error, Span};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrPattern {
    /// `*`: any address, IPv4 or IPv6.
    Any,
    /// Four parts, each a number or `*` (`10.4.*.*`, `*.*.*.*`). Matches IPv4 addresses only.
    V4Wildcard([Option<u8>; 4]),
    /// `10.4.0.0/16`, or a single address (`/32`).
    V4Net { addr: Ipv4Addr, prefix: u8 },
    /// `2001:db8::/32`, or a single address (`/128`).
    V6Net { addr: Ipv6Addr, prefix: u8 },
}

fn v4_mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix.min(32) as u32)
    }
}

fn v6_mask(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix.min(128) as u32)
    }
}

impl AddrPattern {
    /// Whether an address matches. IPv4-mapped IPv6 addresses (`::ffff:10.4.0.1`) are taken as
    /// the IPv4 address they carry.
    pub fn matches(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self, ip) {
            (AddrPattern::Any, _) => true,
            (AddrPattern::V4Wildcard(parts), IpAddr::V4(a)) => parts.iter().zip(a.octets()).all(|(p, o)| p.is_none_or(|p| p == o)),
            (AddrPattern::V4Net { addr, prefix }, IpAddr::V4(a)) => {
                let m = v4_mask(*prefix);
                u32::from(a) & m == u32::from(*addr) & m
            }
            (AddrPattern::V6Net { addr, prefix }, IpAddr::V6(a)) => {
                let m = v6_mask(*prefix);
                u128::from(a) & m == u128::from(*addr) & m
            }
            _ => false,
        }
    }
}

impl fmt::Display for AddrPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrPattern::Any => f.write_str("*"),
            AddrPattern::V4Wildcard(parts) => {
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    match p {
                        Some(v) => write!(f, "{v}")?,
                        None => f.write_str("*")?,
                    }
                }
                Ok(())
            }
            AddrPattern::V4Net { addr, prefix: 32 } => write!(f, "{addr}"),
            AddrPattern::V4Net { addr, prefix } => write!(f, "{addr}/{prefix}"),
            AddrPattern::V6Net { addr, prefix: 128 } => write!(f, "{addr}"),
            AddrPattern::V6Net { addr, prefix } => write!(f, "{addr}/{prefix}"),
        }
    }
}

const EXPECTED: &str = "an address pattern: 10.4.*.*, 10.4.0.0/16, 10.4.0.1, 2001:db8::/32 or *";

/// Read an address pattern from one word at `span`.
pub(crate) fn parse(word: &str, span: Span) -> Result<AddrPattern, Error> {
    if word == "*" {
        return Ok(AddrPattern::Any);
    }
    let (addr, prefix) = match word.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (word, None),
    };
    if addr.contains(':') {
        return parse_v6(word, addr, prefix, span);
    }
    let parts: Vec<&str> = addr.split('.').collect();
    // Byte offset of each part inside the word, for carets under the part at fault.
    let mut offsets = Vec::with_capacity(parts.len());
    let mut at = 0;
    for p in &parts {
        offsets.push(at);
        at += p.len() + 1;
    }
    if parts.len() != 4 {
        let mut e =
            Error::new(span, format!("'{addr}' has {} part{}; an IPv4 pattern has four", parts.len(), if parts.len() == 1 { "" } else { "s" }))
                .expected(EXPECTED);
        if (1..4).contains(&parts.len()) && prefix.is_none() && parts.last() == Some(&"*") {
            let fixed = format!("{addr}{}", ".*".repeat(4 - parts.len()));
            let note = if addr == "*.*.*" { " (004 section 6.2 prints *.*.*, a typo for *.*.*.*)" } else { "" };
            e = e.help(format!("did you mean {fixed}?{note}"));
        }
        return Err(e);
    }
    let mut octets = [None; 4];
    for (i, p) in parts.iter().enumerate() {
        let ps = span.sub(offsets[i], offsets[i] + p.len());
        octets[i] = match *p {
            "*" => None,
            "" => return Err(Error::new(span, format!("'{addr}' has an empty part")).expected(EXPECTED)),
            n if n.bytes().all(|b| b.is_ascii_digit()) => {
                if n.len() > 1 && n.starts_with('0') {
                    return Err(Error::new(ps, format!("'{n}' has a leading zero")).expected("a number from 0 to 255 without leading zeros"));
                }
                match n.parse::<u8>() {
                    Ok(v) => Some(v),
                    Err(_) => return Err(Error::new(ps, format!("{n} is not an octet")).expected("a number from 0 to 255 or *")),
                }
            }
            n => return Err(Error::new(ps, format!("'{n}' is not an octet")).expected("a number from 0 to 255 or *")),
        };
    }
    let wild = octets.iter().any(Option::is_none);
    match prefix {
        None if wild => Ok(AddrPattern::V4Wildcard(octets)),
        None => Ok(AddrPattern::V4Net { addr: Ipv4Addr::from(octets.map(|o| o.unwrap_or(0))), prefix: 32 }),
        Some(_) if wild => Err(Error::new(span, format!("'{word}' mixes * with a /prefix")).expected(EXPECTED)),
        Some(p) => {
            let addr = Ipv4Addr::from(octets.map(|o| o.unwrap_or(0)));
            let ps = span.sub(addr_len(word), word.len());
            let prefix = prefix_len(p, ps, 32)?;
            let net = Ipv4Addr::from(u32::from(addr) & v4_mask(prefix));
            if net != addr {
                return Err(Error::new(span, format!("'{word}' has bits set past its /{prefix} prefix"))
                    .expected(EXPECTED)
                    .help(format!("did you mean {net}/{prefix}?")));
            }
            Ok(AddrPattern::V4Net { addr, prefix })
        }
    }
}

fn addr_len(word: &str) -> usize {
    word.find('/').map_or(word.len(), |i| i + 1)
}

fn prefix_len(p: &str, span: Span, max: u8) -> Result<u8, Error> {
    let bad = || Error::new(span, format!("'/{p}' is not a prefix length")).expected(format!("a prefix length from 0 to {max}"));
    if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match p.parse::<u8>() {
        Ok(v) if v <= max => Ok(v),
        _ => Err(bad()),
    }
}

fn parse_v6(word: &str, addr: &str, prefix: Option<&str>, span: Span) -> Result<AddrPattern, Error> {
    let Ok(a) = addr.parse::<Ipv6Addr>() else {
        let mut e = Error::new(span.sub(0, addr.len()), format!("'{addr}' is not an IPv6 address")).expected(EXPECTED);
        if addr.contains('*') {
            e = e.help("IPv6 patterns are networks: write 2001:db8::/32, not wildcards");
        }
        return Err(e);
    };
    let Some(p) = prefix else {
        return Ok(AddrPattern::V6Net { addr: a, prefix: 128 });
    };
    let prefix = prefix_len(p, span.sub(addr_len(word), word.len()), 128)?;
    let net = Ipv6Addr::from(u128::from(a) & v6_mask(prefix));
    if net != a {
        return Err(Error::new(span, format!("'{word}' has bits set past its /{prefix} prefix"))
            .expected(EXPECTED)
            .help(format!("did you mean {net}/{prefix}?")));
    }
    Ok(AddrPattern::V6Net { addr: a, prefix })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<AddrPattern, Error> {
        parse(s, Span::new(100, 100 + s.len()))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn patterns_match() {
        let w = p("10.4.*.*").unwrap();
        assert!(w.matches(ip("10.4.200.3")) && !w.matches(ip("10.5.0.3")) && !w.matches(ip("2001:db8::1")));
        assert!(w.matches(ip("::ffff:10.4.1.1")), "IPv4-mapped");
        let n = p("10.4.0.0/16").unwrap();
        assert!(n.matches(ip("10.4.255.255")) && !n.matches(ip("10.3.255.255")));
        assert!(p("0.0.0.0/0").unwrap().matches(ip("1.2.3.4")));
        let s = p("10.4.0.1").unwrap();
        assert!(s.matches(ip("10.4.0.1")) && !s.matches(ip("10.4.0.2")));
        let v6 = p("2001:db8::/32").unwrap();
        assert!(v6.matches(ip("2001:db8:ffff::1")) && !v6.matches(ip("2001:db9::1")) && !v6.matches(ip("10.4.0.1")));
        assert!(p("::/0").unwrap().matches(ip("::1")));
        assert!(p("::1").unwrap().matches(ip("::1")));
        let any = p("*").unwrap();
        assert!(any.matches(ip("::1")) && any.matches(ip("1.2.3.4")));
        let all4 = p("*.*.*.*").unwrap();
        assert!(all4.matches(ip("1.2.3.4")) && !all4.matches(ip("::1")));
        for s in ["10.4.*.*", "10.4.0.0/16", "10.4.0.1", "2001:db8::/32", "::1", "*", "*.*.*.*", "10.*.3.*"] {
            assert_eq!(p(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn errors_point_inside_the_word() {
        let e = p("10.400.*.*").unwrap_err();
        assert_eq!(e.span, Span::new(103, 106));
        let e = p("*.*.*").unwrap_err();
        assert!(e.help.as_deref().unwrap().starts_with("did you mean *.*.*.*?"), "{e:?}");
        assert!(p("10.4.*").unwrap_err().help.unwrap().contains("10.4.*.*"));
        assert!(p("10.4.1.0/16").unwrap_err().help.unwrap().contains("10.4.0.0/16"));
        assert_eq!(p("10.4.0.0/33").unwrap_err().span, Span::new(109, 111));
        assert!(p("10.*.0.0/16").is_err());
        assert!(p("1.2.3.4.5").is_err());
        assert!(p("01.2.3.4").is_err());
        assert!(p("10..3.4").is_err());
        assert!(p("2001:db8::/129").is_err());
        assert!(p("2001:db8::1/32").unwrap_err().help.unwrap().contains("2001:db8::/32"));
        assert!(p("2001:*::/32").is_err());
        assert!(p("SYN").is_err());
    }
}
