//! Shared test harness: a real bridge on ephemeral loopback ports, over
//! SQLite (temp dir) or Postgres (`RDV_TEST_POSTGRES_URL`, a fresh database
//! per test), and real client processes found on PATH.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use rdv_relay_bridge::config::{Config, MqttMode};
use rdv_relay_bridge::message::{Clock, SystemClock};
use rdv_relay_bridge::serve::{Running, start};
use rdv_service_kit::testing::PgTestDb;

pub mod mosquitto;
pub mod v4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A database for one test, dropped afterwards.
pub struct Db {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<PgTestDb>,
}

impl Db {
    pub async fn new(b: Backend) -> Db {
        match b {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("cache.db").display()
                );
                Db {
                    url,
                    _dir: Some(dir),
                    pg: None,
                }
            }
            Backend::Postgres => {
                let db = PgTestDb::create("rdv_bridge_test").await.unwrap();
                Db {
                    url: db.url.clone(),
                    _dir: None,
                    pg: Some(db),
                }
            }
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(db) = self.pg.take() {
            // Drop runs inside the tests' runtime: drop the database from a
            // thread of its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let _ = rt.block_on(db.drop_db());
            })
            .join();
        }
    }
}

/// A running bridge and its database.
pub struct Bridge {
    pub running: Option<Running>,
    pub db: Db,
}

/// A config for tests: every listener on 127.0.0.1:0, generous request
/// limits (HTTP and MQTT; tests of the shipped limits put them back).
pub fn test_config(db: &Db) -> Config {
    let mut c = Config::default();
    c.http.listen = "127.0.0.1:0".parse().unwrap();
    c.mqtt.mode = MqttMode::Off;
    c.mqtt.listen = None;
    c.cache.database_url = Some(db.url.clone());
    c.limits.request_burst = 1_000_000;
    c.limits.request_replenish_ms = 1;
    c.limits.global_burst = 1_000_000;
    c.limits.global_requests_per_sec = 1_000_000;
    c.limits.mqtt_publish_burst = 1_000_000;
    c.limits.mqtt_publish_per_sec = 1_000_000;
    c.limits.mqtt_global_publish_burst = 1_000_000;
    c.limits.mqtt_global_publish_per_sec = 1_000_000;
    c
}

impl Bridge {
    pub async fn start(b: Backend, tweak: impl FnOnce(&mut Config)) -> Bridge {
        Self::start_with_clock(b, tweak, Arc::new(SystemClock)).await
    }

    pub async fn start_with_clock(
        b: Backend,
        tweak: impl FnOnce(&mut Config),
        clock: Arc<dyn Clock>,
    ) -> Bridge {
        let db = Db::new(b).await;
        let mut c = test_config(&db);
        tweak(&mut c);
        let running = start(c, clock).await.unwrap();
        Bridge {
            running: Some(running),
            db,
        }
    }

    pub fn http(&self) -> String {
        format!("http://{}", self.running.as_ref().unwrap().bound.http)
    }

    pub fn mqtt_port(&self) -> u16 {
        self.running.as_ref().unwrap().bound.mqtt.v4.unwrap().port()
    }

    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await.unwrap();
        }
    }
}

/// An external tool on PATH, or a clear failure.
pub fn tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "`{name}` is not on PATH: install it (apt-get install -y curl mosquitto mosquitto-clients)"
    );
}

/// The Python of the test venv (relay-bridge/tests/python/.venv), or
/// `RDV_TEST_PYTHON`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("RDV_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/.venv/bin/python");
    assert!(
        p.is_file(),
        "no test venv at {}: run `python3 -m venv relay-bridge/tests/python/.venv && \
         relay-bridge/tests/python/.venv/bin/pip install -r relay-bridge/tests/python/requirements.txt`",
        p.display()
    );
    p
}

pub fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/bridge_client.py")
}

/// Runs curl; returns (HTTP status, body).
pub fn curl(args: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new(tool("curl"))
        .args(["-sS", "--max-time", "30", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = out.stdout;
    let nl = s.iter().rposition(|&b| b == b'\n').unwrap();
    let code: u16 = std::str::from_utf8(&s[nl + 1..])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (code, s[..nl].to_vec())
}

/// curl returning status and body as JSON.
pub fn curl_json(args: &[&str]) -> (u16, serde_json::Value) {
    let (code, body) = curl(args);
    (
        code,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// Parses NDJSON lines (a poll answer).
pub fn lines(body: &[u8]) -> Vec<serde_json::Value> {
    body.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// A client process whose stdout lines are read as they come.
pub struct Proc {
    pub child: Child,
    rx: mpsc::Receiver<String>,
}

impl Proc {
    pub fn spawn(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Proc {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { child, rx }
    }

    pub fn py(args: &[&str]) -> Proc {
        let script = client_script();
        let mut all = vec![script.to_str().unwrap()];
        all.extend_from_slice(args);
        Proc::spawn(python(), &all)
    }

    /// The next line (bounded wait; the bound is a hang guard, not a timing check).
    pub fn line(&self) -> String {
        self.rx
            .recv_timeout(Duration::from_secs(60))
            .expect("client produced no line within 60 s")
    }

    /// Skips lines until one starts with `prefix`; returns the rest.
    pub fn until(&self, prefix: &str) -> String {
        loop {
            let l = self.line();
            if let Some(rest) = l.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
    }

    /// All lines up to and including `DONE`; returns (lines, done json).
    pub fn finish(&mut self) -> (Vec<String>, serde_json::Value) {
        let mut v = Vec::new();
        loop {
            let l = self.line();
            if let Some(rest) = l.strip_prefix("DONE ") {
                let _ = self.child.wait();
                return (v, serde_json::from_str(rest).unwrap());
            }
            v.push(l);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the server side of the in-process TCP connection from
/// `client_port` to `server_port` has `TCP_NODELAY` (found among this
/// process's own descriptors through `pidfd_getfd`). Waits, bounded, for the
/// server to accept it and set its options (an accepted socket exists a
/// moment before the server's setsockopt). Linux only.
pub fn server_side_nodelay(server_port: u16, client_port: u16) -> bool {
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};
    let me = pidfd_open(getpid(), PidfdFlags::empty()).unwrap();
    let mut seen = false;
    for _ in 0..200 {
        for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
            let Some(n) = entry
                .ok()
                .and_then(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
            else {
                continue;
            };
            let Ok(fd) = pidfd_getfd(&me, n, PidfdGetfdFlags::empty()) else {
                continue;
            };
            let local = rustix::net::getsockname(&fd)
                .ok()
                .and_then(|a| std::net::SocketAddr::try_from(a).ok());
            let peer = rustix::net::getpeername(&fd)
                .ok()
                .flatten()
                .and_then(|a| std::net::SocketAddr::try_from(a).ok());
            if let (Some(l), Some(p)) = (local, peer)
                && l.port() == server_port
                && p.port() == client_port
            {
                seen = true;
                if rustix::net::sockopt::tcp_nodelay(&fd).unwrap() {
                    return true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(
        seen,
        "no accepted socket from port {client_port} on port {server_port}"
    );
    false
}
