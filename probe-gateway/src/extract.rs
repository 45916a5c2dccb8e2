//! The extractors of agent-signed requests (§5.4; docs/probe-gateway.md
//! "Signed requests"), written once so every handler checks in the same
//! order: the body's size (the body limit layer, while the body is read),
//! then the `X-Rdv-Auth` signature over method, path, query and body, the
//! request id (replays), the key's proved mailbox, and only then the JSON.
//!
//! - [`Signed<T>`]: a key that proved a mailbox, and the body as `T`.
//! - [`Enrolling<T>`]: any key (`/v1/register`, `/v1/verify` prove the
//!   first mailbox), and the body as `T`.
//! - [`SignedAgent`]: a key that proved a mailbox; nothing to parse (GET).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rdv_proto::AgentId;
use serde::de::DeserializeOwned;

use crate::api_refusal::ApiRefusal;
use crate::signed::{self, AUTH_HEADER, AuthRefusal};
use crate::state::AppState;

/// A signed request and its JSON body. `PROVED` (the default) requires a
/// key that proved a mailbox (403 `unregistered`); [`Enrolling`] does not.
#[derive(Debug)]
pub struct Signed<T, const PROVED: bool = true> {
    pub agent: AgentId,
    pub body: T,
}

/// A signed request by any key: the mailbox proof itself.
pub type Enrolling<T> = Signed<T, false>;

/// A signed request by a key that proved a mailbox, without a body to
/// parse (the signature still covers the empty body).
#[derive(Debug)]
pub struct SignedAgent(pub AgentId);

impl<T: DeserializeOwned, const PROVED: bool> FromRequest<AppState> for Signed<T, PROVED> {
    type Rejection = Response;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, Response> {
        let (agent, body) = verified(req, s, PROVED).await?;
        let body = parse_body(&body).map_err(IntoResponse::into_response)?;
        Ok(Self { agent, body })
    }
}

impl FromRequest<AppState> for SignedAgent {
    type Rejection = Response;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, Response> {
        verified(req, s, true).await.map(|(agent, _)| Self(agent))
    }
}

/// Reads the body (413 from the body limit layer, through the `Bytes`
/// extractor), then verifies the signature and claims the request id;
/// with `proved`, the key must hold a mailbox.
async fn verified(req: Request, s: &AppState, proved: bool) -> Result<(AgentId, Bytes), Response> {
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let header = req.headers().get(AUTH_HEADER).cloned();
    let body = Bytes::from_request(req, s)
        .await
        .map_err(IntoResponse::into_response)?;
    let pq = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let header = header.as_ref().map(|v| v.as_bytes());
    let agent = signed_agent(s, method.as_str(), pq, header, &body).await;
    let agent = match agent {
        Ok(a) if proved => registered(s, a).await,
        other => other,
    };
    agent
        .map(|a| (a, body))
        .map_err(IntoResponse::into_response)
}

/// Verifies a signed agent request and claims its id (replay-proof).
async fn signed_agent(
    s: &AppState,
    method: &str,
    path_and_query: &str,
    header: Option<&[u8]>,
    body: &[u8],
) -> Result<AgentId, ApiRefusal> {
    let now = s.now();
    let window = s.inner.cfg.signed_request_window_secs;
    let req = signed::verify(header, method, path_and_query, body, now, window)?;
    // Kept until the request's timestamp has left the window for good.
    let expires = req.ts.unix_timestamp() + window + 1;
    let fresh = s
        .inner
        .store
        .claim_nonce(req.agent.as_str(), &req.id, expires, now.unix_timestamp())
        .await
        .map_err(ApiRefusal::internal)?;
    if !fresh {
        return Err(AuthRefusal::Replayed.into());
    }
    Ok(req.agent)
}

/// `agent`, when it proved at least one mailbox: nothing is delivered to
/// or sent for a key that did not.
async fn registered(s: &AppState, agent: AgentId) -> Result<AgentId, ApiRefusal> {
    let held = s
        .inner
        .store
        .agent_mailboxes(agent.as_str())
        .await
        .map_err(ApiRefusal::internal)?;
    if held.is_empty() {
        return Err(ApiRefusal::new(
            StatusCode::FORBIDDEN,
            "unregistered",
            "this key has not proved any mailbox here",
        ));
    }
    Ok(agent)
}

/// A JSON body, or 400 `malformed`.
fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiRefusal> {
    serde_json::from_slice(body).map_err(|e| {
        ApiRefusal::new(
            StatusCode::BAD_REQUEST,
            "malformed",
            format!("malformed body: {e}"),
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request as HttpRequest;
    use http_body_util::BodyExt;
    use rdv_proto::AgentKey;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;
    use crate::clock::{CountingEntropy, ManualClock};
    use crate::config::Config;
    use crate::cookie::{CookieKeys, MasterSecret};
    use crate::gate::AuthBackend;
    use crate::http::{Deps, app};
    use crate::mailer::RecordingMailer;
    use crate::store::Store;

    const NOW: &str = "2026-10-08T12:00:00Z";

    async fn state(dir: &std::path::Path) -> AppState {
        let db = format!("sqlite://{}?mode=rwc", dir.join("gw.db").display());
        let cfg = Config {
            data_dir: dir.to_path_buf(),
            database: Some(db.clone()),
            ..Config::default()
        };
        let now = rdv_proto::time::parse_time("now", NOW).unwrap();
        let deps = Deps {
            store: Store::connect(&db, 2).await.unwrap(),
            clock: Arc::new(ManualClock::new(now)),
            entropy: Arc::new(CountingEntropy::default()),
            mailer: Arc::new(RecordingMailer::default()),
            backend: AuthBackend::Trusted(vec![]),
            cookies: CookieKeys {
                current: MasterSecret::new(vec![0x42; 32]).unwrap(),
                previous: None,
            },
        };
        AppState::new(cfg, deps)
    }

    async fn send(s: &AppState, path: &str, body: &[u8], auth: Option<&str>) -> (u16, String) {
        let mut req = HttpRequest::post(path);
        if let Some(a) = auth {
            req = req.header(AUTH_HEADER, a);
        }
        let res = app(s.clone())
            .oneshot(req.body(Body::from(body.to_vec())).unwrap())
            .await
            .unwrap();
        let status = res.status().as_u16();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        (status, v["error"].as_str().unwrap_or_default().to_string())
    }

    fn uuid(n: &str) -> String {
        format!("00000000-0000-4000-8000-{n:0>12}")
    }

    /// The order every signed endpoint keeps: size, signature (and its id),
    /// a proved mailbox, then the body.
    #[tokio::test]
    async fn sizes_then_signatures_then_mailboxes_then_bodies() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(dir.path()).await;
        let key = AgentKey::from_seed([7; 32]);
        let sign = |path: &str, body: &[u8], id: &str| {
            signed::sign(&key, "POST", path, body, id, s.now()).unwrap()
        };
        let big = vec![b' '; s.config().max_body_bytes + 1];
        let junk = b"not json";
        // Path, body, request id of the signature (none: unsigned), answer.
        type Case<'a> = (&'a str, &'a [u8], Option<&'a str>, (u16, &'a str));
        let cases: [Case; 4] = [
            ("/v1/send/probe", &big, None, (413, "too_large")),
            ("/v1/send/probe", junk, None, (401, "unauthenticated")),
            ("/v1/send/probe", junk, Some("1"), (403, "unregistered")),
            // The mailbox proof needs no proved mailbox.
            ("/v1/register", junk, Some("2"), (400, "malformed")),
        ];
        for (path, body, id, want) in cases {
            let auth = id.map(|id| sign(path, body, &uuid(id)));
            let got = send(&s, path, body, auth.as_deref()).await;
            assert_eq!((got.0, got.1.as_str()), want, "{path} {id:?}");
        }
        // The id was claimed before the body was read: a replay is refused.
        let again = sign("/v1/register", junk, &uuid("2"));
        let got = send(&s, "/v1/register", junk, Some(&again)).await;
        assert_eq!((got.0, got.1.as_str()), (401, "replayed"));
        s.store().close().await;
    }
}
