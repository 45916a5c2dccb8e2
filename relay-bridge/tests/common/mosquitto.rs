//! mosquitto_pub and mosquitto_sub (Debian's mosquitto-clients) driven
//! line by line, and the bridge's HTTP side read back, for the MQTT limit
//! tests (issue #14).

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Bridge, Proc, curl, lines, tool};

/// The cached messages of ntfy `topic`, oldest first (the HTTP poll API,
/// from `bind`).
pub fn poll_as(b: &Bridge, bind: &str, topic: &str) -> Vec<String> {
    let (code, body) = curl(&[
        "--interface",
        bind,
        &format!("{}/{topic}/json?poll=1", b.http()),
    ]);
    assert_eq!(code, 200);
    lines(&body)
        .iter()
        .map(|m| m["message"].as_str().unwrap().to_owned())
        .collect()
}

/// The cached messages of ntfy `topic` once there are `n` (the MQTT → ntfy
/// carrier may still be behind the broker's own subscribers when they have
/// everything). Polls from `bind`, backing off, waiting out a 429 of the
/// visitor's HTTP bucket; the 60 s bound is a hang guard, after which what
/// is there is returned for the caller's assertion.
pub fn poll_until(b: &Bridge, bind: &str, topic: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pause = Duration::from_millis(50);
    loop {
        let (code, body) = curl(&[
            "--interface",
            bind,
            &format!("{}/{topic}/json?poll=1", b.http()),
        ]);
        assert!(code == 200 || code == 429, "poll answered {code}");
        if code == 200 {
            let got: Vec<String> = lines(&body)
                .iter()
                .map(|m| m["message"].as_str().unwrap().to_owned())
                .collect();
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: still refused after 60 s"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// A counter of `/metrics` (the line starting `name{labels} `), or 0.
pub fn metric(b: &Bridge, series: &str) -> u64 {
    let (code, body) = curl(&["--interface", "127.0.0.9", &format!("{}/metrics", b.http())]);
    assert_eq!(code, 200);
    let want = format!("{series} ");
    String::from_utf8(body)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&want).map(|n| n.trim().parse().unwrap()))
        .unwrap_or(0)
}

pub fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

/// `mosquitto_sub -d` from `bind` on `topic`, subscribed when this returns.
pub fn subscriber(port: u16, bind: &str, topic: &str, qos: u8, count: usize, v5: bool) -> Proc {
    let port = port.to_string();
    let qos = qos.to_string();
    let count = count.to_string();
    let mut args = vec![
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-A",
        bind,
        "-d",
        "-t",
        topic,
        "-q",
        &qos,
        "-C",
        &count,
    ];
    if v5 {
        args.extend(["-V", "mqttv5"]);
    }
    // Line-buffered (coreutils' stdbuf): `-d`'s lines are not flushed.
    let sub = tool("mosquitto_sub");
    let mut all = vec!["-oL", sub.to_str().unwrap()];
    all.extend(args);
    let p = Proc::spawn(tool("stdbuf"), &all);
    p.until("Subscribed");
    p
}

/// The next `n` payloads `sub` prints (its `-d` lines skipped), and when
/// the last one was read.
pub fn payloads(sub: &Proc, n: usize) -> (Vec<String>, Instant) {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let l = sub.line();
        if !l.starts_with("Client ") && !l.starts_with("Subscribed") {
            got.push(l);
        }
    }
    (got, Instant::now())
}

/// `mosquitto_pub -d -l` from `bind`, `lines` on its stdin (one
/// publication each), run to its end on a blocking thread: (exit ok, its
/// stdout and stderr, when it ended).
pub fn publisher(
    port: u16,
    bind: &str,
    args: &[&str],
    lines: Vec<String>,
) -> tokio::task::JoinHandle<(bool, String, Instant)> {
    let mut child = Command::new(tool("mosquitto_pub"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-A", bind])
        .args(["-d", "-l"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        for l in lines {
            if writeln!(stdin, "{l}").is_err() {
                return;
            }
        }
    });
    tokio::task::spawn_blocking(move || {
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text, Instant::now())
    })
}
