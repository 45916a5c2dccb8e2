//! A real SMTP relay for the outbound tests: Python `aiosmtpd`
//! (tests/python/smtp_sink.py) on 127.0.0.1, and dkimpy
//! (tests/python/dkim_verify.py) answering DNS from the test-only key
//! records under tests/outbound-keys/.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use data_encoding::BASE64;
use serde_json::Value;

pub fn python() -> String {
    std::env::var("RDV_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

pub fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn keys_dir() -> PathBuf {
    manifest().join("tests/outbound-keys")
}

/// A running smtp_sink.py; killed on drop.
pub struct Sink {
    child: Child,
    pub port: u16,
    lines: mpsc::Receiver<String>,
}

/// One message the sink accepted.
#[derive(Debug)]
pub struct Received {
    pub mail_from: String,
    pub rcpt_tos: Vec<String>,
    pub data: Vec<u8>,
    pub tls: bool,
}

impl Sink {
    /// Starts the sink with smtp_sink.py's options (`--tls`, `--reject`, `--auth`).
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(python())
            .arg(manifest().join("tests/python/smtp_sink.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        let port = first
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("sink port line: {first:?}"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Self { child, port, lines }
    }

    /// The next message the sink accepted.
    pub fn next(&self) -> Received {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the sink received a message");
        let v: Value = serde_json::from_str(&line).unwrap();
        Received {
            mail_from: v["mail_from"].as_str().unwrap().to_string(),
            rcpt_tos: v["rcpt_tos"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap().to_string())
                .collect(),
            data: BASE64
                .decode(v["data_b64"].as_str().unwrap().as_bytes())
                .unwrap(),
            tls: v["tls"].as_bool().unwrap(),
        }
    }

    /// Nothing more arrived within `wait`.
    pub fn assert_quiet(&self, wait: Duration) {
        if let Ok(l) = self.lines.recv_timeout(wait) {
            panic!("unexpected mail at the sink: {l}");
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// dkimpy's verdict per signature, DNS answered from `records`
/// (`(owner name, file under tests/outbound-keys/)`): the script's JSON.
pub fn dkimpy(raw: &[u8], records: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let msg = dir.path().join("msg.eml");
    std::fs::write(&msg, raw).unwrap();
    let out = Command::new(python())
        .arg(manifest().join("tests/python/dkim_verify.py"))
        .arg(&msg)
        .args(
            records
                .iter()
                .map(|(name, file)| format!("{name}={}", keys_dir().join(file).display())),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `(d, a, ok)` of each signature in dkimpy's answer, in signature order.
pub fn verdicts(v: &Value) -> Vec<(String, String, bool)> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["d"].as_str().unwrap().to_string(),
                r["a"].as_str().unwrap().to_string(),
                r["ok"].as_bool().unwrap(),
            )
        })
        .collect()
}
