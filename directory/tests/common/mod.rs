//! Shared test setup: a real directory on 127.0.0.1:0 over SQLite (temp
//! dir) or Postgres (a fresh database on `RDV_TEST_POSTGRES_URL`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rdv_directory::clock::ManualClock;
use rdv_directory::config::Config;
use rdv_directory::keys::{self, KeyFile, KeyRing};
use rdv_directory::server::{Running, start};
use rdv_directory::store::Store;
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::time::{Instant, parse_time};
use rdv_proto::{Address, AgentKey};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct Env {
    pub running: Option<Running>,
    pub clock: Arc<ManualClock>,
    pub url: String,
    pub db_url: String,
    pub cfg: Config,
    pub keyfile: KeyFile,
    pub dir: tempfile::TempDir,
    pg: Option<PgTestDb>,
}

pub fn t0() -> Instant {
    parse_time("t", "2026-10-08T00:00:00Z").unwrap()
}

pub use rdv_service_kit::testing::PgTestDb;

impl Env {
    pub async fn new(backend: Backend, tweak: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (db_url, pg) = match backend {
            Backend::Sqlite => (
                format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("directory.db").display()
                ),
                None,
            ),
            Backend::Postgres => {
                let db = PgTestDb::create("rdv_dir_test").await.unwrap();
                (db.url.clone(), Some(db))
            }
        };
        let mut cfg = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().to_path_buf(),
            database: Some(db_url.clone()),
            ..Config::default()
        };
        tweak(&mut cfg);
        let clock = Arc::new(ManualClock::new(t0()));
        let keyfile = keys::keygen(t0() - time::Duration::days(1), &mut rand_core::OsRng);
        let mut env = Self {
            running: None,
            clock,
            url: String::new(),
            db_url,
            cfg,
            keyfile,
            dir,
            pg,
        };
        env.restart().await;
        env
    }

    /// (Re)starts the server with the current key file on the same database.
    pub async fn restart(&mut self) {
        if let Some(r) = self.running.take() {
            let store = r.state.store().clone();
            r.shutdown().await.unwrap();
            store.close().await;
        }
        let ring = KeyRing::from_file(&self.keyfile, "test").unwrap();
        let store = Store::connect(&self.db_url, 4).await.unwrap();
        let r = start(self.cfg.clone(), ring, store, self.clock.clone())
            .await
            .unwrap();
        self.url = format!("http://{}", r.addr);
        self.running = Some(r);
    }

    pub async fn teardown(mut self) {
        if let Some(r) = self.running.take() {
            let store = r.state.store().clone();
            r.shutdown().await.unwrap();
            store.close().await;
        }
        if let Some(db) = self.pg.take() {
            db.drop_db().await.unwrap();
        }
    }

    pub fn now(&self) -> Instant {
        use rdv_directory::clock::Clock;
        self.clock.now()
    }

    pub fn client(&self) -> rdv_directory_client::DirectoryClient {
        rdv_directory_client::DirectoryClient::new(&self.url)
    }
}

pub fn rand_bytes<const N: usize>() -> [u8; N] {
    use rand_core::RngCore;
    let mut b = [0u8; N];
    rand_core::OsRng.fill_bytes(&mut b);
    b
}

/// A signed card of agent `seed` claiming `addresses`, created at `created`.
pub fn card(key: &AgentKey, addresses: &[&str], created: Instant) -> Value {
    let mut b = CardBuilder::new(created, vec!["wss://relay.example".into()]);
    b.addresses = addresses
        .iter()
        .map(|a| Address::parse(a).unwrap())
        .collect();
    b.sign(key).unwrap()
}

pub fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}

/// Runs blocking client code off the runtime.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// An oversize request as a client that announces its length would send it:
/// the headers with `Content-Length: len`, then nothing. The body limit
/// answers from the header alone, so the answer is deterministic (a client
/// still uploading when the server closes would see a broken pipe instead).
pub fn raw_announced(method: &str, url: &str, len: usize) -> (u16, Value) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {len}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        // Decode a chunked body: size line, data, CRLF, until the 0 chunk.
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            out.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
        out
    } else {
        body.to_string()
    };
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// A raw request: (status, retry-after, body JSON).
pub fn raw(method: &str, url: &str, body: Option<&str>) -> (u16, Option<String>, Value) {
    let req = ureq::request(method, url).set("content-type", "application/json");
    let res = match body {
        Some(b) => req.send_string(b),
        None => req.call(),
    };
    let r = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport: {e}"),
    };
    let status = r.status();
    let ra = r.header("retry-after").map(str::to_string);
    let text = r.into_string().unwrap_or_default();
    (
        status,
        ra,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}
