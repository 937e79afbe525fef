//! WAN emulation accuracy (needs root): ping -U across the lab with the emulator configured for
//! 80 ms RTT and 2% loss each way. `ping -U` measures user-to-user latency (plain ping stamps
//! before PREROUTING and would show half the delay).

use testbed::topology::{in_ns, Plan, FARM_ADDR};
use testbed::wan::WanHop;

/// (average RTT in ms, loss in percent) from ping's summary.
fn parse_ping(out: &str) -> (f64, f64) {
    let loss = out
        .split(',')
        .find(|p| p.contains("packet loss"))
        .and_then(|p| p.trim().split('%').next())
        .and_then(|v| v.trim().parse().ok())
        .expect("loss line");
    let avg = out
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.trim().split('/').nth(1))
        .and_then(|v| v.parse().ok())
        .expect("rtt line");
    (avg, loss)
}

#[test]
fn configured_rtt_and_loss_are_what_ping_measures() {
    let plan = Plan { prefix: format!("rlmw{}", std::process::id()), high_clients: 1, low_clients: 1, ..Plan::default() };
    let _guard = testbed::topology::DownOnDrop(plan.clone());
    let info = plan.up().expect("up");
    let groups = vec!["10.4.0.0/16=80ms,2%".parse().unwrap(), "10.5.0.0/16=160ms".parse().unwrap()];
    let mut hop = WanHop::start(&plan, groups, 42).expect("emulator");

    let n = 3000;
    let out = in_ns(
        &info.namespaces.clients,
        "ping",
        &["-U", "-q", "-c", &n.to_string(), "-i", "0.005", "-W", "2", "-I", &info.clients.high[0], FARM_ADDR],
    )
    .or_else(|e| if e.to_string().contains("packet loss") { Ok(e.to_string()) } else { Err(e) })
    .expect("ping");
    let (avg, loss) = parse_ping(&out);
    println!("HIGH: {n} pings, RTT {avg} ms, loss {loss}%");
    // Round-trip loss with 2% each way: 1 - 0.98^2 = 3.96%.
    assert!((avg - 80.0).abs() <= 4.0, "RTT {avg} ms, configured 80 ms:\n{out}");
    assert!((loss - 3.96).abs() <= 0.5, "loss {loss}%, expected 3.96%:\n{out}");

    // The other group gets its own path (004 section 6.4 uses 160 ms).
    let out =
        in_ns(&info.namespaces.clients, "ping", &["-U", "-q", "-c", "200", "-i", "0.005", "-I", &info.clients.low[0], FARM_ADDR]).expect("ping LOW");
    let (avg, loss) = parse_ping(&out);
    println!("LOW: RTT {avg} ms, loss {loss}%");
    assert!((avg - 160.0).abs() <= 8.0, "RTT {avg} ms, configured 160 ms (±5%)");
    assert_eq!(loss, 0.0);

    let stats = hop.finish().expect("emulator stats");
    println!("emulator: {stats:?}");
    assert!(stats.up_packets >= n as u64 && stats.down_packets > 0, "{stats:?}");
    // Without the emulator the WAN hop forwards nothing undelayed: its rule is gone with it, so
    // traffic flows again, and the lab is still intact.
    let after =
        in_ns(&info.namespaces.clients, "ping", &["-U", "-q", "-c", "3", "-i", "0.2", "-I", &info.clients.high[0], FARM_ADDR]).expect("ping after");
    let (avg, _) = parse_ping(&after);
    assert!(avg < 5.0, "no delay once the emulator is gone: {avg} ms");
}
