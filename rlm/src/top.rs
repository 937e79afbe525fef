//! `rlm top`: the status page's essentials in a terminal (ratatui), read from a running rlm's
//! local API (`/view`, the page's own view, once a second): each class's response times with the
//! trend of its p95 and its limits, pageviews a second and SYNs admitted; the rules' firings;
//! the data path; the slowest open pageviews and where each stands. `--once` prints one screen
//! as text and exits (for scripts and for a terminal that is not one).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};
use ratatui::Frame;
use serde_json::Value;

/// Seconds of p95 history the trend column draws (a character a second).
const TREND_S: usize = 40;

fn secs(v: &Value) -> String {
    match v.as_f64() {
        None => "-".into(),
        Some(s) if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) => format!("{s:.2} s"),
    }
}

fn pct(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{:.1}%", x * 100.0))
}

fn count(v: &Value) -> String {
    v.as_u64().map_or("-".into(), |n| n.to_string())
}

/// The last `n` points of a series as block characters, scaled to its largest (a gap: a space).
fn trend(series: &[Value], n: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tail = &series[series.len().saturating_sub(n)..];
    let top = tail.iter().filter_map(Value::as_f64).fold(0.0, f64::max);
    tail.iter()
        .map(|v| match v.as_f64() {
            Some(x) if top > 0.0 => BARS[((x / top) * 7.0).round().clamp(0.0, 7.0) as usize],
            Some(_) => BARS[0],
            None => ' ',
        })
        .collect()
}

/// Text from the network (a request's target, its Host, a rule's text) made safe for a terminal:
/// control characters (an escape sequence a client put in its request) shown as `\u{..}`.
fn printable(v: &Value) -> String {
    v.as_str().unwrap_or("").chars().map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// Where an open pageview stands: what its latest node says it waits for, and since when.
fn standing(p: &Value) -> String {
    let events = p["events"].as_array().cloned().unwrap_or_default();
    let Some(last) = events.iter().max_by(|a, b| a["t_s"].as_f64().unwrap_or(0.0).total_cmp(&b["t_s"].as_f64().unwrap_or(0.0))) else {
        return String::new();
    };
    let what = match last["kind"].as_str().unwrap_or("") {
        "syn" | "syn_retransmit" | "synack" | "synack_retransmit" => "connecting",
        "ack" => "connected, no request yet",
        "request" => "waiting on the server",
        "response_head" => "receiving",
        "last_byte" => "received; more to come?",
        "conn_failed" => "after a failed connection",
        k => k,
    };
    let since = p["rt_s"].as_f64().unwrap_or(0.0) - last["t_s"].as_f64().unwrap_or(0.0);
    format!("{what} for {since:.1} s")
}

/// Draw one screen of `view` (an error line instead of it when rlm did not answer).
pub fn draw(frame: &mut Frame, view: &Value, error: Option<&str>) {
    let classes = view["classes"].as_array().cloned().unwrap_or_default();
    let rules = view["rules"].as_array().cloned().unwrap_or_default();
    let slowest = view["slowest"].as_array().cloned().unwrap_or_default();
    let [head, class_area, rule_area, health_area, slow_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(classes.len() as u16 + 3),
        Constraint::Length(rules.len().max(1) as u16 + 3),
        Constraint::Length(9),
        Constraint::Min(3),
    ])
    .areas(frame.area());

    let header = match error {
        Some(e) => Line::from(Span::styled(format!("rlm top: {e}"), Style::default().fg(Color::Red))),
        None => Line::from(vec![
            Span::styled("rlm ", Style::default().add_modifier(Modifier::BOLD)),
            Span::raw(format!(
                "{} · {} · {} engine(s) · up {} s · {}   (q quits)",
                view["state"].as_str().unwrap_or("?"),
                view["observer"].as_str().unwrap_or("?"),
                view["engines"],
                view["uptime_s"],
                view["rules_file"].as_str().unwrap_or("no rule file")
            )),
        ]),
    };
    frame.render_widget(Paragraph::new(header), head);

    let class_rows: Vec<Row> = classes
        .iter()
        .map(|c| {
            let limits: Vec<String> = c["limits"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| format!("{} {} {}", l["stat"].as_str().unwrap_or("?"), l["cmp"].as_str().unwrap_or("?"), secs(&l["limit_s"])))
                .collect();
            let p95 = c["p95"].as_array().cloned().unwrap_or_default();
            Row::new(vec![
                Cell::from(c["class"].as_str().unwrap_or("?").to_string()),
                Cell::from(secs(&c["p50_s"])),
                Cell::from(secs(&c["p95_s"])),
                Cell::from(if limits.is_empty() { "-".into() } else { limits.join(", ") }),
                Cell::from(c["pageviews_per_s"].as_f64().map_or("-".into(), |r| format!("{r:.1}"))),
                Cell::from(pct(&c["admitted_share"])),
                Cell::from(trend(&p95, TREND_S)),
            ])
        })
        .collect();
    let class_table = Table::new(
        class_rows,
        [
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(18),
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Min(10),
        ],
    )
    .header(
        Row::new(["class", "p50", "p95", "rule limits", "pv/s", "admitted", "p95, last 40 s"]).style(Style::default().add_modifier(Modifier::BOLD)),
    )
    .block(Block::default().borders(Borders::TOP).title(" pageview response time by class (over the class window) "));
    frame.render_widget(class_table, class_area);

    let rule_rows: Vec<Row> = rules
        .iter()
        .map(|r| {
            let firing = r["firing"].as_bool().unwrap_or(false);
            let style = if firing { Style::default().fg(Color::Red) } else { Style::default() };
            Row::new(vec![
                Cell::from(if firing { "FIRING" } else { "" }),
                Cell::from(count(&r["fired_last_minute"])),
                Cell::from(count(&r["fired"])),
                Cell::from(format!("{}  {}", printable(&r["text"]), printable(&r["rule"]).rsplit('/').next().unwrap_or(""))),
            ])
            .style(style)
        })
        .collect();
    let rule_table = Table::new(rule_rows, [Constraint::Length(7), Constraint::Length(9), Constraint::Length(9), Constraint::Min(20)])
        .header(Row::new(["", "/min", "all", "rule"]).style(Style::default().add_modifier(Modifier::BOLD)))
        .block(Block::default().borders(Borders::TOP).title(" rules "));
    frame.render_widget(rule_table, rule_area);

    let [did_area, path_area] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(health_area);
    let a = &view["actions"];
    let did: Vec<Line> = view["action_labels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| Some((l[0].as_str()?, printable(&l[1]))))
        .map(|(k, label)| Line::from(format!("{label:<24} {:>6}/min {:>8} all", count(&a[k]["last_minute"]), count(&a[k]["total"]))))
        .collect();
    frame.render_widget(Paragraph::new(did).block(Block::default().borders(Borders::TOP).title(" what rlm did ")), did_area);
    let d = &view["datapath"];
    let mut path: Vec<Line> = Vec::new();
    for (i, r) in d["rings"].as_array().into_iter().flatten().enumerate() {
        let (w, s) = (r["waiting_bytes"].as_f64().unwrap_or(0.0), r["size_bytes"].as_f64().unwrap_or(1.0));
        path.push(Line::from(format!("ring {i} backlog          {:>6.1}% of {:.0} KiB", w / s * 100.0, s / 1024.0)));
    }
    for q in d["queues"].as_array().into_iter().flatten() {
        path.push(Line::from(format!("queue {}                {} waiting, {} dropped", q["queue"], count(&q["waiting"]), count(&q["dropped"]))));
    }
    let lost = |k: &str| format!("{}/min, {} all", count(&a[k]["last_minute"]), count(&a[k]["total"]));
    path.push(Line::from(format!("reports lost (ring full) {}", lost("reports_lost"))));
    path.push(Line::from(format!("fail-open passes         {}", lost("fail_open_passes"))));
    path.push(Line::from(format!("loop lag (worst, last s) {}", d["lag_max_ms"].as_f64().map_or("-".into(), |v| format!("{v:.1} ms")))));
    path.push(Line::from(format!("injection budget used    {}", pct(&d["inject_budget_used"]))));
    path.push(Line::from(format!("connections, open pvs    {}, {}", count(&d["connections"]), count(&d["open_pageviews"]))));
    frame.render_widget(Paragraph::new(path).block(Block::default().borders(Borders::TOP).title(" data path ")), path_area);

    let slow: Vec<Line> = slowest
        .iter()
        .map(|p| {
            Line::from(format!(
                "{:>8}  {:<8} {:<16} {}{}  {}; {} conn, {} SYN resends",
                secs(&p["rt_s"]),
                p["class"].as_str().unwrap_or("-"),
                p["client"].as_str().unwrap_or("?"),
                printable(&p["host"]),
                printable(&p["container"]),
                standing(p),
                p["connections"],
                p["syn_retransmissions"]
            ))
        })
        .collect();
    let slow = if slow.is_empty() { vec![Line::from("none open")] } else { slow };
    frame.render_widget(Paragraph::new(slow).block(Block::default().borders(Borders::TOP).title(" slowest open pageviews ")), slow_area);
}

/// Fetch the view (`/view`) from rlm at `addr`.
fn fetch(addr: SocketAddr, token: Option<&str>) -> Result<Value> {
    let body = super::live::metrics::get_local(addr, "/view", token)?;
    Ok(serde_json::from_str(&body)?)
}

/// One screen of `view`, `width` by `height`, as text lines (right-trimmed).
pub fn render_text(view: &Value, error: Option<&str>, width: u16, height: u16) -> Result<String> {
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))?;
    term.draw(|f| draw(f, view, error))?;
    let buf = term.backend().buffer();
    let area: Rect = buf.area;
    let mut out = String::new();
    for y in 0..area.height {
        let line: String = (0..area.width).map(|x| buf[(x, y)].symbol().to_string()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// `rlm top`: the live screen until q (or Esc, or Ctrl-C); with `once`, one screen printed.
pub fn run(addr: SocketAddr, token: Option<String>, once: bool) -> Result<()> {
    if once {
        let view = fetch(addr, token.as_deref())?;
        let (w, h) = ratatui::crossterm::terminal::size().unwrap_or((120, 40));
        print!("{}", render_text(&view, None, w.max(100), h.max(40))?);
        return Ok(());
    }
    let mut terminal = ratatui::init();
    let result = (|| -> Result<()> {
        let mut view = Value::Null;
        let mut error: Option<String> = None;
        let mut next = Instant::now();
        loop {
            if Instant::now() >= next {
                match fetch(addr, token.as_deref()) {
                    Ok(v) => {
                        view = v;
                        error = None;
                    }
                    Err(e) => error = Some(format!("no view from {addr}: {e:#}")),
                }
                next = Instant::now() + Duration::from_secs(1);
                terminal.draw(|f| draw(f, &view, error.as_deref()))?;
            }
            use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
            if event::poll(Duration::from_millis(200))? {
                if let Event::Key(k) = event::read()? {
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                        return Ok(());
                    }
                }
                // A resize (or any other event) redraws at once.
                terminal.draw(|f| draw(f, &view, error.as_deref()))?;
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_screen_shows_classes_rules_the_data_path_and_the_slowest_pageview() {
        let view = serde_json::json!({
            "state": "running", "observer": "ebpf", "engines": 1, "uptime_s": 53, "rules_file": "/etc/rlm/rules.rlm",
            "classes": [
                { "class": "HIGH", "p50_s": 0.8, "p95_s": 2.5, "pageviews_per_s": 9.5, "admitted_share": 1.0,
                  "limits": [{ "stat": "MEAN", "cmp": ">", "limit_s": 1.5 }], "p95": [1.0, 2.0, null, 4.0] },
                { "class": "LOW", "p50_s": null, "p95_s": null, "pageviews_per_s": null, "admitted_share": 0.416, "limits": [], "p95": [] },
            ],
            "rules": [{ "rule": "/etc/rlm/rules.rlm:3:1", "text": "IF RT.HIGH > 1.5s THEN DROP SYN", "firing": true, "fired": 804, "fired_last_minute": 97 }],
            "action_labels": [["syns_dropped", "SYNs dropped"]],
            "actions": { "syns_dropped": { "total": 804, "last_minute": 97 }, "reports_lost": { "total": 0, "last_minute": 0 },
                         "fail_open_passes": { "total": 3, "last_minute": 1 } },
            "datapath": { "rings": [{ "waiting_bytes": 4096, "size_bytes": 16_777_216 }], "queues": [{ "queue": 0, "waiting": 2, "dropped": 0 }],
                          "lag_max_ms": 8.1, "inject_budget_used": 0.25, "connections": 351, "open_pageviews": 93 },
            "slowest": [{ "rt_s": 31.7, "class": "LOW", "client": "10.5.0.109", "connections": 3, "syn_retransmissions": 3,
                          "host": "10.9.0.1:80", "container": "/new_products\u{1b}[2J",
                          "events": [{ "kind": "syn", "conn": 0, "t_s": 0.0 }, { "kind": "conn_failed", "conn": 1, "t_s": 30.2 }] }],
        });
        let text = render_text(&view, None, 120, 40).unwrap();
        println!("{text}");
        assert!(!text.contains('\u{1b}'), "a client's escape sequence reaches the terminal");
        for want in [
            "HIGH",
            "LOW",
            "MEAN > 1.50 s",
            "9.5",
            "41.6%",
            "▃▅ █",
            "FIRING",
            "804",
            "IF RT.HIGH > 1.5s THEN DROP SYN  rules.rlm:3:1",
            "SYNs dropped",
            "fail-open passes         1/min, 3 all",
            "SYNs dropped                 97/min      804 all",
            "ring 0 backlog",
            "queue 0",
            "8.1 ms",
            "25.0%",
            "31.70 s  LOW      10.5.0.109",
            "after a failed connection for 1.5 s",
            "10.9.0.1:80/new_products\\u{1b}[2J",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
        let down = render_text(&Value::Null, Some("no view from 127.0.0.1:9464: refused"), 100, 30).unwrap();
        assert!(down.contains("rlm top: no view from 127.0.0.1:9464") && down.contains("none open"), "{down}");
    }
}
