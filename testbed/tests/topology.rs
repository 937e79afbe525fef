//! The lab's topology in this kernel (needs root): up, traffic crosses both bridges, the
//! appliance has no address on the path, up again is harmless, down after a crash cleans up.

use std::process::{Command, Stdio};

use testbed::topology::{exists, in_ns, ip, pids, Plan, FARM_ADDR};

#[test]
fn up_traffic_idempotent_and_down_after_a_crash() {
    let plan = Plan { prefix: format!("rlmt{}", std::process::id()), high_clients: 3, low_clients: 2, ..Plan::default() };
    let _guard = testbed::topology::DownOnDrop(plan.clone());
    let info = plan.up().expect("up");
    assert!(plan.is_up());

    // Both classes reach the farm across the WAN bridge and the appliance bridge.
    for src in [&info.clients.high[0], &info.clients.low[1]] {
        let out = in_ns(&info.namespaces.clients, "ping", &["-c", "1", "-W", "3", "-I", src, FARM_ADDR]);
        assert!(out.is_ok(), "ping from {src}: {out:?}");
    }
    // A bump in the wire: no IPv4 address in the appliance or the WAN hop.
    for ns in [&info.namespaces.appliance, &info.namespaces.wan] {
        let addrs = ip(ns, "-4 addr show").unwrap();
        assert!(!addrs.lines().any(|l| l.contains("inet ") && !l.contains("127.0.0.1")), "{ns}: {addrs}");
    }
    let ports = ip(&info.namespaces.appliance, "link show master br0").unwrap();
    assert!(ports.contains("app-c") && ports.contains("app-s"), "{ports}");

    // Up again over a running lab gives the same lab.
    let again = plan.up().expect("second up");
    assert_eq!(serde_json::to_value(&again).unwrap(), serde_json::to_value(&info).unwrap());

    // A crashed run leaves processes behind in the namespaces.
    let mut leftover = Command::new("ip").args(["netns", "exec", &info.namespaces.servers, "sleep", "600"]).stdout(Stdio::null()).spawn().unwrap();
    for _ in 0..50 {
        if !pids(&info.namespaces.servers).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!pids(&info.namespaces.servers).is_empty());
    plan.down().expect("down");
    let status = leftover.wait().unwrap();
    assert!(!status.success(), "the leftover process was killed");
    for ns in [&info.namespaces.clients, &info.namespaces.wan, &info.namespaces.appliance, &info.namespaces.servers] {
        assert!(!exists(ns), "{ns} removed");
    }
    plan.down().expect("down when nothing is there");
}
