//! A person at a terminal tries a relay bridge (issue #5, SPEC §6.3): the
//! real `rdv-relay-bridge` (SQLite cache, ports 0) and the real `rdv`, with
//! `rdv bridge pub|sub` over ntfy HTTP and MQTT.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use rdv_e2e::{bin, run};
use serde_json::Value;

fn rdv(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let o = run(Command::new(bin("rdv")).args(args), stdin);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The bridge, killed when dropped; its addresses from the JSON line it
/// prints on start.
struct BridgeProc {
    child: Child,
    http: String,
    mqtt: String,
    _dir: TempDir,
}

impl Drop for BridgeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_bridge(name: &str) -> BridgeProc {
    let dir = std::env::temp_dir().join(format!("rdv-e2e-bridge-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(bin("rdv-relay-bridge"))
        .args(["serve", "--http-listen", "127.0.0.1:0"])
        .args(["--mqtt-listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let Some(first) = lines.next() else {
        let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
        panic!("bridge exited before its address line; its stderr:\n{log}");
    };
    let v: Value = serde_json::from_str(&first.unwrap()).unwrap();
    std::thread::spawn(move || for _ in lines {});
    BridgeProc {
        child,
        http: format!("http://{}", v["http"].as_str().unwrap()),
        mqtt: format!("mqtt://{}", v["mqtt"].as_str().unwrap()),
        _dir: TempDir(dir),
    }
}

#[test]
fn pub_and_sub_from_the_terminal() {
    let b = start_bridge("pubsub");
    let url = b.http.as_str();

    // A message as an argument, and one on stdin.
    let (code, out, err) = rdv(&["bridge", "pub", "--url", url, "term-a", "hello"], b"");
    assert_eq!(code, 0, "{err}");
    let first = json_lines(&out).remove(0);
    assert_eq!(first["message"], "hello");
    assert_eq!(first["topic"], "term-a");
    let (code, _, err) = rdv(
        &["bridge", "pub", "--url", url, "term-a", "-"],
        "from stdin\n".as_bytes(),
    );
    assert_eq!(code, 0, "{err}");

    // Poll: both, in order, one JSON object per line.
    let (code, out, err) = rdv(&["bridge", "sub", "--url", url, "term-a", "--poll"], b"");
    assert_eq!(code, 0, "{err}");
    let got = json_lines(&out);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["message"], "hello");
    assert_eq!(got[1]["message"], "from stdin\n");

    // Resume after the first one seen.
    let id = first["id"].as_str().unwrap();
    let (_, out, _) = rdv(
        &[
            "bridge", "sub", "--url", url, "term-a", "--poll", "--since", id,
        ],
        b"",
    );
    assert_eq!(json_lines(&out).len(), 1);

    // MQTT publish through `rdv`, seen on the ntfy side, on a second topic
    // of a streaming subscription that also gets the cached ones.
    let (code, _, err) = rdv(
        &["bridge", "pub", "--url", &b.mqtt, "term-b", "over mqtt"],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = rdv(
        &[
            "bridge",
            "sub",
            "--url",
            url,
            "term-a,term-b",
            "--since",
            "all",
            "--count",
            "3",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let got = json_lines(&out);
    assert_eq!(got.len(), 3);
    assert_eq!(got[2]["topic"], "term-b");
    assert_eq!(got[2]["message"], "over mqtt");

    // Bad input: an invalid topic fails with a message and no output.
    let (code, out, err) = rdv(&["bridge", "pub", "--url", url, "no/slash", "x"], b"");
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("invalid topic"), "{err}");
}

#[test]
fn an_mqtt_subscriber_in_the_terminal_sees_an_ntfy_publish() {
    let b = start_bridge("mqtt");
    let mut sub = Command::new(bin("rdv"))
        .args(["bridge", "sub", "--url", &b.mqtt, "term-m", "--count", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The subscriber may not be subscribed yet: publish until it has one
    // (bounded), then check what it printed.
    let mut exited = None;
    for i in 0..300 {
        if let Some(s) = sub.try_wait().unwrap() {
            exited = Some(s);
            break;
        }
        let (code, _, err) = rdv(
            &[
                "bridge",
                "pub",
                "--url",
                &b.http,
                "term-m",
                &format!("ping {i}"),
            ],
            b"",
        );
        assert_eq!(code, 0, "{err}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if exited.is_none() {
        let _ = sub.kill();
    }
    let o = sub.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = json_lines(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["topic"], "term-m");
    assert!(got[0]["message"].as_str().unwrap().starts_with("ping "));
}
