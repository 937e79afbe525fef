//! Arbitrary bytes as a rule file: reading, checking, printing back and evaluating must never
//! panic or hang. A file that compiles prints back to a file that compiles to the same text.

use std::net::SocketAddr;
use std::time::Duration;

use rules::{Facts, Node, RequestFields, Scope, Stat};

/// A request's fields: a POST with a cookie header and one other.
struct Request;

impl RequestFields for Request {
    fn method(&self) -> &str {
        "POST"
    }
    fn header(&self, name: &str) -> Option<&str> {
        match name {
            "cookie" => Some("sid=1; cart=3; tier=gold"),
            "x-tier" => Some("paid"),
            _ => None,
        }
    }
}

/// The target: `data` as a rule file.
pub fn rules_parse(data: &[u8]) {
    let src = String::from_utf8_lossy(data);
    let Ok(set) = rules::compile("fuzz.rlm", &src) else { return };
    let printed = set.ast().to_string();
    let again = rules::compile("fuzz.rlm", &printed).expect("the printed form compiles");
    assert_eq!(again.ast().to_string(), printed);

    let agg = |_: Scope, s: Stat| Some(Duration::from_millis(if s == Stat::Mean { 3000 } else { 5000 }));
    let mut holds = set.new_holds();
    set.update_holds(&mut holds, Duration::from_secs(10), &agg);
    let server: SocketAddr = "10.9.0.1:80".parse().unwrap();
    let mut out = Vec::new();
    for client in ["10.4.0.1:40000", "[2001:db8::1]:80"] {
        let client: SocketAddr = client.parse().unwrap();
        let mut f = Facts::new(client, server, set.classify(client, server), &agg);
        f.rt = Some(Duration::from_secs(2));
        f.url = Some("/images/a.gif?x=1");
        f.host = Some("shop.example.com:80");
        f.content_type = Some("text/html; charset=utf-8");
        f.holds = Some(&holds);
        f.request = Some(&Request);
        for node in Node::ALL {
            set.eval(node, &f, &mut out);
        }
    }
}
