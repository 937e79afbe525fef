//! The emulated browser against the real farm (needs root, nginx, PostgreSQL): with every
//! client's second connection black-holed at the farm, a pageview behaves as 004 Figure 5 says:
//! the image tied to the second connection is never fetched, the others come over the first,
//! and the page ends when TCP reports the failure (21 s with the xp profile). Also checks the
//! ground truth's format.

use std::process::Command;

use sim_clients::browser::{BrowserSpec, RunSpec};
use sim_clients::tcp_profile::{ProfileCgroup, TcpProfile};
use testbed::farm::{Farm, FarmConfig};
use testbed::topology::{in_ns, Plan, FARM_ADDR};

#[test]
fn second_connection_failure_as_in_figure_5() {
    let plan = Plan { prefix: format!("rlmb{}", std::process::id()), high_clients: 1, low_clients: 0, ..Plan::default() };
    let _guard = testbed::topology::DownOnDrop(plan.clone());
    let info = plan.up().expect("up");
    let lab = std::path::Path::new(env!("CARGO_BIN_EXE_rlm-lab"));
    let cfg = FarmConfig { items: 1000, orders: 3000, cpu_cores: None, synack_timeout_s: None, ..FarmConfig::default() };
    let mut farm = Farm::start(&plan, &cfg, lab).expect("farm");
    // One connection per client at the farm: the second's SYNs are dropped.
    in_ns(
        &info.namespaces.servers,
        "iptables",
        &[
            "-w",
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "--syn",
            "--dport",
            "80",
            "-m",
            "connlimit",
            "--connlimit-above",
            "1",
            "--connlimit-mask",
            "32",
            "-j",
            "DROP",
        ],
    )
    .expect("connlimit");

    let dir = std::env::temp_dir().join(format!("rlm-browser-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = RunSpec {
        server: format!("{FARM_ADDR}:80").parse().unwrap(),
        browsers: vec![BrowserSpec { addr: info.clients.high[0].parse().unwrap(), class: "HIGH".into(), site: None, cookie: None }],
        think_mean_s: 1000.0,
        duration_s: 2.0,
        ramp_s: 0.0,
        seed: 3,
        profile: TcpProfile::Xp,
        pages: vec![("/home".into(), 1.0)],
        items: 1000,
        tls: None,
        think_min_s: 0.0,
        arrivals: None,
    };
    std::fs::write(dir.join("spec.json"), serde_json::to_vec(&spec).unwrap()).unwrap();
    let cg = ProfileCgroup::create(&format!("rlmb-xp-{}", std::process::id()), TcpProfile::Xp).unwrap();
    let out = dir.join("truth.jsonl");
    let st = Command::new(lab)
        .args(["browsers", "--spec"])
        .arg(dir.join("spec.json"))
        .args(["--netns", &info.namespaces.clients, "--cgroup"])
        .arg(&cg.path)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    farm.stop();

    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    for f in ["start_ts", "end_ts", "rt_s", "objects_fetched", "objects_expected", "syn_retransmissions", "failed_connections", "class", "client"] {
        assert!(v.get(f).is_some(), "ground truth lacks {f}: {v}");
    }
    assert_eq!(v["client"], info.clients.high[0].as_str());
    assert_eq!(v["class"], "HIGH");
    let (fetched, expected) = (v["objects_fetched"].as_u64().unwrap(), v["objects_expected"].as_u64().unwrap());
    assert!(expected >= 5);
    assert_eq!(fetched, expected - 1, "the image tied to the failed connection is never fetched: {v}");
    assert_eq!(v["failed_connections"], 1);
    assert_eq!(v["syn_retransmissions"], 2);
    let rt = v["rt_s"].as_f64().unwrap();
    assert!((21.0..23.0).contains(&rt), "the pageview ends when TCP reports the failure: {rt} s");
    assert!((v["end_ts"].as_f64().unwrap() - v["start_ts"].as_f64().unwrap() - rt).abs() < 1e-6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The browser over HTTPS against the farm terminating TLS: HTTP/1.1 and HTTP/2, every page's
/// images fetched, the ground truth as in the clear.
#[test]
fn browsers_speak_https_over_http1_and_http2() {
    let plan = Plan { prefix: format!("rlmt{}", std::process::id()), high_clients: 2, low_clients: 0, ..Plan::default() };
    let _guard = testbed::topology::DownOnDrop(plan.clone());
    let info = plan.up().expect("up");
    let lab = std::path::Path::new(env!("CARGO_BIN_EXE_rlm-lab"));
    let cfg = FarmConfig { items: 1000, orders: 3000, cpu_cores: None, tls_sites: vec!["shop.example".into()], ..FarmConfig::default() };
    let mut farm = Farm::start(&plan, &cfg, lab).expect("farm");
    let certs = farm.certs.clone().expect("a TLS farm has its certificates");
    let dir = std::env::temp_dir().join(format!("rlm-https-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for h2 in [false, true] {
        let spec = RunSpec {
            server: format!("{FARM_ADDR}:{}", cfg.front_port()).parse().unwrap(),
            browsers: info
                .clients
                .high
                .iter()
                .map(|a| BrowserSpec { addr: a.parse().unwrap(), class: "HIGH".into(), site: None, cookie: None })
                .collect(),
            think_mean_s: 0.3,
            duration_s: 3.0,
            ramp_s: 0.0,
            seed: 5,
            profile: TcpProfile::Linux,
            pages: vec![("/home".into(), 1.0), ("/product_detail?i_id={item}".into(), 1.0)],
            items: 1000,
            tls: Some(sim_clients::browser::TlsSpec { ca: certs.ca.clone(), site: "shop.example".into(), h2 }),
            think_min_s: 0.1,
            arrivals: None,
        };
        let spec_path = dir.join(format!("spec-{h2}.json"));
        std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
        let out = dir.join(format!("truth-{h2}.jsonl"));
        let st = Command::new(lab)
            .args(["browsers", "--spec"])
            .arg(&spec_path)
            .args(["--netns", &info.namespaces.clients, "--out"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(st.success());
        let text = std::fs::read_to_string(&out).unwrap();
        let pvs: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(pvs.len() >= 4, "h2 {h2}: {} pageviews", pvs.len());
        for v in &pvs {
            assert_eq!(v["failed"], false, "h2 {h2}: {v}");
            assert!(v["objects_expected"].as_u64().unwrap() >= 5, "h2 {h2}: {v}");
            assert_eq!(v["objects_fetched"], v["objects_expected"], "h2 {h2}: every image fetched: {v}");
        }
    }
    farm.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
