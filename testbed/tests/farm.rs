//! The farm in the lab (needs root, nginx and PostgreSQL): pages built from the database with
//! their images served by nginx through the front; MaxClients and the backlog make the kernel
//! drop SYNs for real once the farm is full.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use testbed::farm::site::image_files;
use testbed::farm::{Farm, FarmConfig};
use testbed::netns;
use testbed::topology::{Plan, FARM_ADDR};

/// GET over a kept-alive connection; returns (status, body). Reads by Content-Length.
fn get(s: &mut TcpStream, path: &str) -> (u16, Vec<u8>) {
    write!(s, "GET {path} HTTP/1.1\r\nHost: shop\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let mut b = [0u8; 65536];
    let head_end = loop {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "closed before the head of {path}");
        buf.extend_from_slice(&b[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head[9..12].parse().unwrap();
    let len: usize = head.lines().find_map(|l| l.strip_prefix("content-length:")).map(|v| v.trim().parse().unwrap()).unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&b[..n]);
    }
    (status, buf[head_end..head_end + len].to_vec())
}

fn connect(src: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&format!("{src}:0").parse::<SocketAddr>().unwrap().into())?;
    s.connect_timeout(&format!("{FARM_ADDR}:80").parse::<SocketAddr>().unwrap().into(), timeout)?;
    Ok(s.into())
}

#[test]
fn pages_images_and_real_syn_drops_when_full() {
    let plan = Plan { prefix: format!("rlmf{}", std::process::id()), high_clients: 8, low_clients: 0, ..Plan::default() };
    let _guard = testbed::topology::DownOnDrop(plan.clone());
    let info = plan.up().expect("up");
    let cfg = FarmConfig { max_clients: 2, backlog: 1, workers: 2, items: 1000, orders: 3000, ..FarmConfig::default() };
    let mut farm = Farm::start(&plan, &cfg, std::path::Path::new(env!("CARGO_BIN_EXE_rlm-lab"))).expect("farm");

    let cli = info.namespaces.clients.clone();
    let servers = info.namespaces.servers.clone();
    let srcs = info.clients.high.clone();
    let result = std::thread::spawn(move || {
        netns::enter(&cli).unwrap();
        let mut a = connect(&srcs[0], Duration::from_secs(3)).expect("first connection");
        // A product page: from the database, with the 256 KB cover second.
        let (st, body) = get(&mut a, "/product_detail?i_id=1");
        assert_eq!(st, 200);
        let html = String::from_utf8(body).unwrap();
        let imgs: Vec<String> = html.split("<img src=\"").skip(1).map(|s| s.split('"').next().unwrap().to_string()).collect();
        assert!(imgs.len() >= 5 && imgs[1] == "/img/large/1.gif", "{imgs:?}");
        assert!(html.contains("Book "), "rows from the database");
        // Every image, over the same kept-alive connection, byte for byte as generated.
        let sizes: std::collections::HashMap<String, usize> = image_files().into_iter().map(|(p, n)| (format!("/{p}"), n)).collect();
        for i in &imgs {
            let (st, body) = get(&mut a, i);
            assert_eq!(st, 200, "{i}");
            assert_eq!(body.len(), sizes[i], "{i}");
        }
        for page in ["/home", "/best_sellers?subject=ARTS", "/execute_search?q=ab", "/new_products?subject=HISTORY"] {
            assert_eq!(get(&mut a, page).0, 200, "{page}");
        }
        assert_eq!(get(&mut a, "/nope").0, 404);

        // Full: two connections served, the backlog holds what it can, then SYNs are dropped.
        let _b = connect(&srcs[1], Duration::from_secs(3)).expect("second connection");
        let mut queued = Vec::new();
        let mut refused_at = None;
        for (k, src) in srcs[2..].iter().enumerate() {
            match connect(src, Duration::from_secs(2)) {
                Ok(s) => queued.push(s),
                Err(e) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "dropped, not refused: {e}");
                    refused_at = Some(k);
                    break;
                }
            }
        }
        // The listener's accept queue while every client still holds its connection.
        let listen = testbed::topology::in_ns(&servers, "ss", &["-Hltn", "sport = :80"]).expect("ss in the servers' namespace");
        let accept_queue: usize = listen.split_whitespace().nth(1).and_then(|q| q.parse().ok()).unwrap_or_else(|| panic!("ss: {listen}"));
        (queued.len(), refused_at, accept_queue)
    })
    .join()
    .expect("client thread");
    let (queued, refused_at, accept_queue) = result;
    assert!(refused_at.is_some(), "a connection beyond MaxClients + backlog had its SYNs dropped");
    // What the kernel documents: a listen backlog of 1 holds at most 2 completed handshakes
    // (the listener's Recv-Q). The clients may count one more connected: a SYN answered while
    // the queue had room, whose ACK then found it full and was dropped at the server (the
    // client's connect() returned; on two cores a SYN can overtake the ACK before it).
    assert!(accept_queue <= 2, "the backlog of 1 holds at most 2 completed handshakes, held {accept_queue}");
    assert!((accept_queue..=accept_queue + 1).contains(&queued), "{queued} connected at the clients, {accept_queue} in the accept queue");
    let usage = farm.usage();
    assert!(usage.cpu_s > 0.0, "{usage:?}");
    farm.stop();
}
