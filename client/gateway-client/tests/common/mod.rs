//! A real gateway (`rdv_probe_gateway::server::start`) on 127.0.0.1:0 over
//! SQLite in a temp dir, with a manual clock and a recording mailer, run on
//! its own Tokio runtime while the blocking client calls it; and a canned
//! HTTP server for answers a real gateway does not give on demand.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use rand_core::RngCore;
use rdv_gateway_client::GatewayClient;
use rdv_probe_gateway::clock::{Clock, CountingEntropy, ManualClock};
use rdv_probe_gateway::config::Config;
use rdv_probe_gateway::cookie::{CookieKeys, MasterSecret};
use rdv_probe_gateway::gate::AuthBackend;
use rdv_probe_gateway::http::Deps;
use rdv_probe_gateway::mailer::RecordingMailer;
use rdv_probe_gateway::server::{Running, start};
use rdv_probe_gateway::store::Store;
use rdv_proto::AgentKey;
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::doc::request::RequestBuilder;
use rdv_proto::mailblock::{self, MailParams, TransferEncoding};
use rdv_proto::time::{Instant, parse_time};
use rdv_service_kit::testing::PgTestDb;
use serde_json::Value;

pub const NOW: &str = "2026-10-08T12:00:00Z";
pub const AUTHSERV: &str = "mx.trusted.test";
/// The domain of the gateway's own addresses (`rdv+<tag>@…`).
pub const GW_DOMAIN: &str = "gw.test";

pub fn t(s: &str) -> Instant {
    parse_time("t", s).unwrap()
}

/// A reproducible byte stream (request ids), never for production.
pub struct CountingRng(pub u64);

impl RngCore for CountingRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 += 1;
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for c in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// Which real store the gateway runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    /// A fresh database on `RDV_TEST_POSTGRES_URL`, dropped at the end.
    Postgres,
}

pub struct Gw {
    pub rt: tokio::runtime::Runtime,
    /// The Postgres admin URL and database name, to drop.
    pg: Option<PgTestDb>,
    pub running: Option<Running>,
    pub url: String,
    pub clock: Arc<ManualClock>,
    pub mailer: Arc<RecordingMailer>,
    pub dir: tempfile::TempDir,
}

impl Gw {
    pub fn start() -> Self {
        Self::start_on(Backend::Sqlite)
    }

    pub fn start_on(backend: Backend) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (db, pg) = match backend {
            Backend::Sqlite => (
                format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("gateway.db").display()
                ),
                None,
            ),
            Backend::Postgres => {
                let db = rt.block_on(PgTestDb::create("rdv_gwc_test")).unwrap();
                (db.url.clone(), Some(db))
            }
        };
        let cfg = Config {
            http_listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().to_path_buf(),
            database: Some(db.clone()),
            ..Config::default()
        };
        let mut cfg = cfg;
        cfg.flows.mail_domain = Some(GW_DOMAIN.into());
        // Invites carry the explainer link of this base (§5.2.2).
        cfg.flows.public_url = Some("https://gw.test".into());
        let clock = Arc::new(ManualClock::new(t(NOW)));
        let mailer = Arc::new(RecordingMailer::default());
        let running = rt.block_on(async {
            let store = Store::connect(&db, 4).await.unwrap();
            let deps = Deps {
                store,
                clock: clock.clone(),
                entropy: Arc::new(CountingEntropy::default()),
                mailer: mailer.clone(),
                backend: AuthBackend::Trusted(vec![AUTHSERV.into()]),
                cookies: CookieKeys {
                    current: MasterSecret::new(vec![0x42; 32]).unwrap(),
                    previous: None,
                },
            };
            start(cfg, deps).await.unwrap()
        });
        let url = format!("http://{}", running.addr);
        Self {
            rt,
            pg,
            running: Some(running),
            url,
            clock,
            mailer,
            dir,
        }
    }

    /// A client of agent `n` on the gateway's clock, reproducible ids.
    pub fn client(&self, n: u8) -> GatewayClient {
        let clock = self.clock.clone();
        GatewayClient::with(
            &self.url,
            AgentKey::from_seed([n; 32]),
            Arc::new(move || clock.now()),
            Box::new(CountingRng(u64::from(n) << 32)),
        )
    }

    /// The raw messages the gateway has sent so far.
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.mailer.sent().into_iter().map(|m| m.raw).collect()
    }

    /// The code of the last proof mail.
    pub fn last_code(&self) -> String {
        let sent = self.mailer.sent();
        let body = String::from_utf8(sent.last().expect("a proof mail").raw.clone()).unwrap();
        let (_, rest) = body.split_once("type this code into it: ").unwrap();
        rest.split_whitespace().next().unwrap().to_string()
    }

    /// Registers and proves `mailbox` for `c`; returns the token.
    pub fn enroll(&self, c: &GatewayClient, mailbox: &str) -> String {
        c.register(mailbox).unwrap();
        c.verify(mailbox, &self.last_code()).unwrap().token
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            let store = r.state.store().clone();
            let _ = self.rt.block_on(async {
                let out = r.shutdown().await;
                store.close().await;
                out
            });
        }
        if let Some(db) = self.pg.take() {
            let _ = self.rt.block_on(db.drop_db());
        }
    }
}

pub fn card(key: &AgentKey) -> Value {
    CardBuilder::new(
        t("2026-10-01T00:00:00Z"),
        vec!["wss://relay.example.org".into()],
    )
    .sign(key)
    .unwrap()
}

/// A signed contact request by `key` for `to_hint`.
pub fn request(key: &AgentKey, id: &str, to_hint: &str) -> Value {
    RequestBuilder {
        id: id.into(),
        to_hint: Some(to_hint.into()),
        card: card(key),
        greeting: "Alice's agent requests contact on Alice's behalf.".into(),
        capabilities_offered: vec!["a2a/0.3".into()],
        ts: t("2026-10-08T11:00:00Z"),
    }
    .sign(key)
    .unwrap()
}

/// A probe mail from `key` (mailbox `from`) to `to`, with a DMARC pass
/// from the trusted authserv-id.
pub fn probe_mail(key: &AgentKey, id: &str, to: &str, from: &str) -> Vec<u8> {
    let payload = mailblock::probe_payload(&request(key, id, to));
    let mut m = format!(
        "Authentication-Results: {AUTHSERV}; dmarc=pass header.from={}\r\n",
        from.rsplit_once('@').unwrap().1
    )
    .into_bytes();
    m.extend(
        mailblock::compose(
            &payload,
            &MailParams {
                from,
                to,
                date: t("2026-10-08T11:00:00Z"),
                message_id: "<probe-1@sender.test>",
                encoding: TransferEncoding::QuotedPrintable,
                subject_line: None,
                intro: None,
            },
        )
        .unwrap(),
    );
    m
}

/// Serves each canned raw HTTP answer to one connection, then closes it.
/// Returns the base URL.
pub fn canned(answers: Vec<Vec<u8>>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for a in answers {
            let Ok((mut s, _)) = l.accept() else { return };
            // Read the request head (and a small body) before answering.
            let mut buf = [0u8; 65536];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(&a);
            let _ = s.flush();
        }
    });
    url
}
