//! The gateway's HTTP API over a real store: SQLite in a temp dir, or a
//! fresh Postgres database on `RDV_TEST_POSTGRES_URL` (dropped at the end).
//! Requests go through `tower::ServiceExt::oneshot`; time and randomness
//! are injected.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use rdv_probe_gateway::clock::{Clock, CountingEntropy, ManualClock};
use rdv_probe_gateway::config::Config;
use rdv_probe_gateway::cookie::{CookieKeys, MasterSecret};
use rdv_probe_gateway::gate::AuthBackend;
use rdv_probe_gateway::http::{AppState, Deps, app};
use rdv_probe_gateway::mailer::{OutboundMail, RecordingMailer};
use rdv_probe_gateway::signed;
use rdv_probe_gateway::store::Store;
use rdv_proto::AgentKey;
use rdv_service_kit::testing::PgTestDb;
use serde_json::Value;
use tower::ServiceExt;

use super::{NOW, t};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct Env {
    pub state: AppState,
    pub router: Router,
    pub clock: Arc<ManualClock>,
    pub mailer: Arc<RecordingMailer>,
    entropy: Arc<CountingEntropy>,
    /// The cookie keys of the next [`Env::restart`].
    pub cookies: CookieKeys,
    pub cfg: Config,
    pub db_url: String,
    pub dir: tempfile::TempDir,
    pg: Option<PgTestDb>,
    nonce: u64,
}

pub fn secret() -> MasterSecret {
    MasterSecret::new(vec![0x42; 32]).unwrap()
}

pub fn cookie_keys() -> CookieKeys {
    CookieKeys {
        current: secret(),
        previous: None,
    }
}

/// The authserv-id the tests trust.
pub const AUTHSERV: &str = "mx.trusted.test";

impl Env {
    pub async fn new(backend: Backend, tweak: impl FnOnce(&mut Config)) -> Self {
        Self::with_auth(backend, tweak, trusted()).await
    }

    /// [`Env::new`] with another authentication backend (verify mode);
    /// [`Env::restart`] goes back to trusted mode.
    pub async fn with_auth(
        backend: Backend,
        tweak: impl FnOnce(&mut Config),
        auth: AuthBackend,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (db_url, pg) = match backend {
            Backend::Sqlite => (
                format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("gateway.db").display()
                ),
                None,
            ),
            Backend::Postgres => {
                let db = PgTestDb::create("rdv_gw_test").await.unwrap();
                (db.url.clone(), Some(db))
            }
        };
        let mut cfg = Config {
            http_listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().to_path_buf(),
            database: Some(db_url.clone()),
            ..Config::default()
        };
        tweak(&mut cfg);
        let clock = Arc::new(ManualClock::new(t(NOW)));
        let mailer = Arc::new(RecordingMailer::default());
        let entropy = Arc::new(CountingEntropy::default());
        let store = Store::connect(&db_url, 4).await.unwrap();
        let state = AppState::new(
            cfg.clone(),
            deps(
                store,
                clock.clone(),
                mailer.clone(),
                entropy.clone(),
                auth,
                cookie_keys(),
            ),
        );
        Self {
            router: app(state.clone()),
            state,
            clock,
            mailer,
            entropy,
            cookies: cookie_keys(),
            cfg,
            db_url,
            dir,
            pg,
            nonce: 0,
        }
    }

    /// A new process on the same database: fresh state, fresh connections.
    pub async fn restart(&mut self) {
        let m = self.mailer.clone();
        self.restart_with_mailer(m).await;
    }

    /// [`Env::restart`] with another mailer (a failing one, say); the
    /// recording mailer comes back with the next [`Env::restart`].
    pub async fn restart_with_mailer(&mut self, mailer: Arc<dyn OutboundMail>) {
        self.state.store().close().await;
        let store = Store::connect(&self.db_url, 4).await.unwrap();
        self.state = AppState::new(
            self.cfg.clone(),
            deps(
                store,
                self.clock.clone(),
                mailer,
                self.entropy.clone(),
                trusted(),
                self.cookies.clone(),
            ),
        );
        self.router = app(self.state.clone());
    }

    pub async fn teardown(self) {
        self.state.store().close().await;
        if let Some(db) = self.pg {
            db.drop_db().await.unwrap();
        }
    }

    pub fn now(&self) -> time::OffsetDateTime {
        self.clock.now()
    }

    /// A fresh request id (a UUID) for signed requests.
    pub fn next_id(&mut self) -> String {
        self.nonce += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.nonce)
    }

    pub async fn send(&self, req: Request<Body>) -> (StatusCode, Value) {
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, v)
    }

    /// A signed request by `key` (returns the header so tests can replay it).
    pub fn signed_request(
        &mut self,
        key: &AgentKey,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> (Request<Body>, String) {
        let id = self.next_id();
        let h = signed::sign(key, method, path, body, &id, self.now()).unwrap();
        (raw_signed(method, path, body, &h), h)
    }

    pub async fn signed(
        &mut self,
        key: &AgentKey,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> (StatusCode, Value) {
        let (req, _) = self.signed_request(key, method, path, body);
        self.send(req).await
    }

    /// Registers and proves `mailbox` for `key`; returns the integration token.
    pub async fn enroll(&mut self, key: &AgentKey, mailbox: &str) -> String {
        let body = serde_json::json!({"mailbox": mailbox}).to_string();
        let (st, v) = self
            .signed(key, "POST", "/v1/register", body.as_bytes())
            .await;
        assert_eq!(st, StatusCode::ACCEPTED, "{v}");
        let code = self.last_code();
        let body = serde_json::json!({"mailbox": mailbox, "code": code}).to_string();
        let (st, v) = self
            .signed(key, "POST", "/v1/verify", body.as_bytes())
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        v["token"].as_str().unwrap().to_string()
    }

    /// The code in the last proof mail.
    pub fn last_code(&self) -> String {
        let sent = self.mailer.sent();
        let body = String::from_utf8(sent.last().expect("a proof mail was sent").raw.clone())
            .expect("the code mail is UTF-8");
        let (_, rest) = body.split_once("type this code into it: ").unwrap();
        rest.split_whitespace().next().unwrap().to_string()
    }

    pub async fn inbound(&self, token: Option<&str>, raw: Vec<u8>) -> (StatusCode, Value) {
        let mut b = Request::post("/v1/inbound").header("content-type", "message/rfc822");
        if let Some(tok) = token {
            b = b.header("authorization", format!("Bearer {tok}"));
        }
        self.send(b.body(Body::from(raw)).unwrap()).await
    }
}

pub fn raw_signed(method: &str, path: &str, body: &[u8], header: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header(signed::AUTH_HEADER, header)
        .body(Body::from(body.to_vec()))
        .unwrap()
}

fn deps(
    store: Store,
    clock: Arc<ManualClock>,
    mailer: Arc<dyn OutboundMail>,
    entropy: Arc<CountingEntropy>,
    backend: AuthBackend,
    cookies: CookieKeys,
) -> Deps {
    Deps {
        store,
        clock,
        entropy,
        mailer,
        backend,
        cookies,
    }
}

fn trusted() -> AuthBackend {
    AuthBackend::Trusted(vec![AUTHSERV.into()])
}
