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
        browsers: vec![BrowserSpec { addr: info.clients.high[0].parse().unwrap(), class: "HIGH".into() }],
        think_mean_s: 1000.0,
        duration_s: 2.0,
        ramp_s: 0.0,
        seed: 3,
        profile: TcpProfile::Xp,
        pages: vec![("/home".into(), 1.0)],
        items: 1000,
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
