//! The HTTP API (issue #4; SPEC §5.2.1, §5.2.2).
//!
//! - `POST /v1/inbound`: a raw RFC 5322 message, `Authorization: Bearer
//!   <integration token>`; bounded before parsing, gated, stored, queued.
//! - `POST /v1/register`, `POST /v1/verify`: an agent names a mailbox and
//!   proves it with the code mailed to it; verification returns the
//!   mailbox's integration token (shown once; only a hash is kept).
//! - `GET /v1/inbox`, `GET /v1/inbox/stream` (SSE): the agent's queue.
//! - The mail flows (`flows`): `GET /v1/mailboxes`, `POST /v1/send/probe`,
//!   `/v1/send/syn-ack`, `/v1/send/ack`, `/v1/send/invite`, `/v1/ack`,
//!   `/v1/invites/{id}/status`, and the opt-out at `/v1/optout/{token}`.
//!
//! Agent requests are signed (`signed`); handlers take them through the
//! extractors of `extract`. Refusals are JSON `{error, message}` with a
//! stable code. Nothing here logs a mail body, a token, a code or a
//! secret: handlers log outcomes and codes only.

use std::collections::VecDeque;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rdv_proto::encoding::base32;
use rdv_proto::time::{format_time, from_unix};
use rdv_proto::{Address, AgentId};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::broadcast;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa::OpenApi;

pub use crate::api_refusal::{ApiRefusal, ErrorBody};
use crate::extract::{Enrolling, SignedAgent};
use crate::gate;
use crate::mailer::code_message;
use crate::signed::AUTH_HEADER;
pub use crate::state::{AppState, Deps};
use crate::store::{CodeOutcome, StoredProbe};
use crate::verdict::{Delivery, Refusal as GateRefusal};
use rdv_gateway_client::wire::{RegisterBody, VerifyBody};

/// Prefix of integration tokens: `rdvgw1.<token id>.<secret>`.
pub const TOKEN_PREFIX: &str = "rdvgw1.";

/// The router.
pub fn app(state: AppState) -> Router {
    let cfg = &state.inner.cfg;
    let cors = rdv_service_kit::http::cors(
        &cfg.cors_origins,
        vec![Method::GET, Method::POST],
        vec![
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            header::HeaderName::from_static(AUTH_HEADER),
        ],
    );
    let timeout = Duration::from_secs(cfg.request_timeout_secs);
    // Mail has its own bound, applied by the handler while it reads
    // (`read_mail`); everything else is small JSON.
    let inbound = Router::new().route("/v1/inbound", post(inbound));
    let api = Router::new()
        .route("/v1/register", post(register))
        .route("/v1/verify", post(verify))
        .route("/v1/inbox", get(inbox))
        .route("/v1/inbox/stream", get(stream))
        .route("/v1/mailboxes", get(crate::flows::mailboxes))
        .route("/v1/send/probe", post(crate::flows::send_probe))
        .route("/v1/send/syn-ack", post(crate::flows::send_syn_ack))
        .route("/v1/send/ack", post(crate::flows::send_ack))
        .route("/v1/send/invite", post(crate::flows::send_invite))
        .route("/v1/ack", post(crate::flows::ack))
        .route("/v1/invites/{id}/status", post(crate::flows::invite_status))
        .route(
            "/v1/optout/{token}",
            get(crate::flows::optout_page).post(crate::flows::optout_confirm),
        )
        .route(crate::flows::EXPLAINER_PATH, get(crate::flows::explainer))
        .route("/v1/openapi.json", get(openapi))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .layer(RequestBodyLimitLayer::new(cfg.max_body_bytes));
    Router::new()
        .merge(inbound)
        .merge(api)
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        // Outside the body limits and the timeout, so their refusals (and
        // axum's own 404/405) get the JSON error shape too.
        .layer(axum::middleware::map_response(
            rdv_service_kit::http::json_refusals,
        ))
        .layer(cors)
        // The route only: a query could carry a cursor, never a body.
        .layer(rdv_service_kit::http::trace_layer())
        .with_state(state)
}

fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// Checks `Authorization: Bearer rdvgw1.<id>.<secret>` and returns the
/// token's mailbox. The secret's hash is compared in constant time.
async fn token_mailbox(s: &AppState, headers: &HeaderMap) -> Result<String, ApiRefusal> {
    let unauth = || {
        ApiRefusal::new(
            StatusCode::UNAUTHORIZED,
            "bad_token",
            "a valid integration token is required",
        )
    };
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(unauth)?;
    let token = value
        .strip_prefix("Bearer ")
        .and_then(|t| t.trim().strip_prefix(TOKEN_PREFIX))
        .ok_or_else(unauth)?;
    let (id, secret) = token.split_once('.').ok_or_else(unauth)?;
    if id.len() > 64 || secret.len() > 128 {
        return Err(unauth());
    }
    let held = s
        .inner
        .store
        .token(id)
        .await
        .map_err(ApiRefusal::internal)?;
    let given = sha256_hex(&[secret.as_bytes()]);
    // An unknown id still pays one comparison.
    let (mailbox, want) = held.unwrap_or_else(|| (String::new(), "0".repeat(64)));
    let ok: bool = want.as_bytes().ct_eq(given.as_bytes()).into();
    if ok && !mailbox.is_empty() {
        Ok(mailbox)
    } else {
        Err(unauth())
    }
}

fn gate_refusal(r: &GateRefusal) -> Response {
    let status = match r {
        GateRefusal::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        GateRefusal::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        GateRefusal::Duplicate => StatusCode::CONFLICT,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    (status, Json(gate::report(&Err(r.clone())))).into_response()
}

/// Receives one raw message for the token's mailbox (§5.2.1 "the rule").
#[utoipa::path(post, path = "/v1/inbound",
    request_body(content = String, content_type = "message/rfc822"),
    responses((status = 202, body = Object), (status = 401, body = ErrorBody),
        (status = 409, body = Object), (status = 413, body = Object),
        (status = 422, body = Object), (status = 429, body = Object)))]
async fn inbound(State(s): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let mailbox = match token_mailbox(&s, &headers).await {
        Ok(m) => m,
        Err(r) => return r.into_response(),
    };
    let raw = match read_mail(&headers, body, s.inner.cfg.max_mail_bytes).await {
        Ok(raw) => raw,
        Err(MailBody::TooLarge { drained }) => {
            s.inbound_too_large();
            let mut r = gate_refusal(&GateRefusal::TooLarge);
            if !drained {
                // The rest of the body is still coming: this answer ends
                // the connection (RFC 9112 §9.6).
                r.headers_mut().insert(
                    header::CONNECTION,
                    header::HeaderValue::from_static("close"),
                );
            }
            return r;
        }
        Err(MailBody::Broken) => {
            return ApiRefusal::new(
                StatusCode::BAD_REQUEST,
                "malformed",
                "the request body could not be read",
            )
            .into_response();
        }
    };
    // The gate checks the bound again before parsing.
    // Pushed over HTTP: no SMTP session, so in verify mode SPF comes from
    // a trusted `Received` hop (`trusted_received_by`) or is `none`.
    match s.deliver_pushed(&mailbox, raw.as_ref()).await {
        Ok(d) => {
            let mut report = gate::report(&Ok(d.admitted));
            report["seq"] = json!(d.seq);
            (StatusCode::ACCEPTED, Json(report)).into_response()
        }
        Err(Delivery::Refused(r)) => gate_refusal(&r),
        Err(Delivery::Internal(e)) => ApiRefusal::internal(e).into_response(),
    }
}

/// Over the bound, an inbound body is still read (and thrown away as it
/// arrives) up to this many bytes, so that a client that sends it whole
/// before reading the answer gets the 413 instead of a reset connection.
pub const OVERSIZE_DRAIN_BYTES: usize = 8 * 1024 * 1024;

/// Why [`read_mail`] has no message.
enum MailBody {
    /// Over `max_mail_bytes`; `drained` when the body was read to its end.
    TooLarge { drained: bool },
    /// The client's body broke off (or timed out).
    Broken,
}

/// The mail body, at most `max` bytes kept. Over the bound: refused at once
/// when the client waits for `100 Continue` (it has sent nothing yet) or
/// declares more than the drain allows; otherwise read to its end (up to
/// [`OVERSIZE_DRAIN_BYTES`], nothing past `max` kept) and then refused.
async fn read_mail(headers: &HeaderMap, body: Body, max: usize) -> Result<Bytes, MailBody> {
    use futures_util::StreamExt;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let expects_continue = headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if let Some(n) = declared
        && n > max as u64
        && (expects_continue || n > OVERSIZE_DRAIN_BYTES as u64)
    {
        return Err(MailBody::TooLarge { drained: false });
    }
    let mut kept: Vec<u8> = Vec::new();
    let mut seen: usize = 0;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Err(MailBody::Broken);
        };
        seen = seen.saturating_add(chunk.len());
        if seen > OVERSIZE_DRAIN_BYTES {
            return Err(MailBody::TooLarge { drained: false });
        }
        if seen <= max {
            kept.extend_from_slice(&chunk);
        } else if !kept.is_empty() {
            // Over the bound: keep nothing more, free what was kept.
            kept = Vec::new();
        }
    }
    if seen > max {
        return Err(MailBody::TooLarge { drained: true });
    }
    Ok(Bytes::from(kept))
}

pub(crate) fn email(mailbox: &str) -> Result<Address, ApiRefusal> {
    Address::parse_email(mailbox).map_err(|_| {
        ApiRefusal::new(
            StatusCode::BAD_REQUEST,
            "bad_mailbox",
            "mailbox must be an email address",
        )
    })
}

fn code_hash(mailbox: &str, agent: &str, code: &str) -> String {
    sha256_hex(&[
        rdv_proto::consts::GW_CODE_HASH_DOMAIN,
        mailbox.as_bytes(),
        agent.as_bytes(),
        code.trim().to_ascii_lowercase().as_bytes(),
    ])
}

/// An agent names a mailbox; the gateway mails it a proof code.
#[utoipa::path(post, path = "/v1/register", request_body = RegisterBody,
    params(("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 202, body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
async fn register(
    State(s): State<AppState>,
    Enrolling { agent, body: b }: Enrolling<RegisterBody>,
) -> Result<Response, ApiRefusal> {
    let mailbox = email(&b.mailbox)?;
    let now = s.now();
    let under = s
        .inner
        .store
        .count_event(
            "register",
            mailbox.canon(),
            s.inner.cfg.register_per_mailbox,
            now.unix_timestamp(),
        )
        .await
        .map_err(ApiRefusal::internal)?;
    if !under {
        return Err(ApiRefusal::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many registrations of this mailbox; try again later",
        ));
    }
    let mut raw = [0u8; 5];
    s.inner.entropy.fill(&mut raw);
    let code = base32(&raw);
    let expires = now.unix_timestamp() + s.inner.cfg.code_ttl_secs;
    s.inner
        .store
        .put_pending(
            mailbox.canon(),
            agent.as_str(),
            &code_hash(mailbox.canon(), agent.as_str(), &code),
            expires,
        )
        .await
        .map_err(ApiRefusal::internal)?;
    let mut mid = [0u8; 12];
    s.inner.entropy.fill(&mut mid);
    let date = now
        .format(&time::format_description::well_known::Rfc2822)
        .map_err(ApiRefusal::internal)?;
    let msg = code_message(
        &s.inner.cfg.outbound.from_address,
        mailbox.canon(),
        agent.as_str(),
        &code,
        &date,
        &format!("<{}@{}>", hex::encode(mid), s.inner.cfg.smtp_hostname),
    );
    s.inner.mailer.send(&msg).await.map_err(|e| {
        tracing::warn!(error = %e, "proof-code mail not sent");
        ApiRefusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "mail_unavailable",
            "the code could not be sent; try again later",
        )
    })?;
    tracing::info!("registration pending");
    let expires = from_unix(expires).map(format_time).unwrap_or_default();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"status": "code_sent", "mailbox": mailbox.canon(), "expires": expires})),
    )
        .into_response())
}

/// The owner types the code into the agent; the mailbox is bound to it.
#[utoipa::path(post, path = "/v1/verify", request_body = VerifyBody,
    params(("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 200, body = Object), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn verify(
    State(s): State<AppState>,
    Enrolling { agent, body: b }: Enrolling<VerifyBody>,
) -> Result<Response, ApiRefusal> {
    let mailbox = email(&b.mailbox)?;
    if b.code.len() > 64 {
        return Err(ApiRefusal::new(
            StatusCode::FORBIDDEN,
            "wrong_code",
            "wrong code",
        ));
    }
    let mut id = [0u8; 10];
    let mut secret = [0u8; 32];
    s.inner.entropy.fill(&mut id);
    s.inner.entropy.fill(&mut secret);
    let (id, secret) = (base32(&id), base32(&secret));
    let tag = crate::flows::new_tag(s.inner.entropy.as_ref());
    let outcome = s
        .inner
        .store
        .verify_code(
            mailbox.canon(),
            agent.as_str(),
            &code_hash(mailbox.canon(), agent.as_str(), &b.code),
            s.inner.cfg.code_max_attempts,
            &id,
            &sha256_hex(&[secret.as_bytes()]),
            &tag,
            s.now().unix_timestamp(),
        )
        .await
        .map_err(ApiRefusal::internal)?;
    tracing::info!(outcome = ?outcome, "mailbox proof");
    match outcome {
        CodeOutcome::Verified => {
            let tag = s
                .inner
                .store
                .mailbox_tag(mailbox.canon())
                .await
                .map_err(ApiRefusal::internal)?;
            Ok(Json(json!({
                "mailbox": mailbox.canon(),
                "agent": agent.as_str(),
                "token": format!("{TOKEN_PREFIX}{id}.{secret}"),
                "gateway_address": tag.and_then(|t| s.inner.cfg.flows.gateway_address(&t)),
            }))
            .into_response())
        }
        CodeOutcome::WrongCode => Err(ApiRefusal::new(
            StatusCode::FORBIDDEN,
            "wrong_code",
            "wrong code",
        )),
        CodeOutcome::TooManyAttempts => Err(ApiRefusal::new(
            StatusCode::FORBIDDEN,
            "too_many_attempts",
            "too many wrong codes; register again",
        )),
        CodeOutcome::NoneActive => Err(ApiRefusal::new(
            StatusCode::NOT_FOUND,
            "no_pending",
            "no registration of this mailbox by this agent is pending",
        )),
    }
}

/// The cursor of the inbox endpoints.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cursor {
    after: Option<i64>,
    limit: Option<u32>,
}

fn cursor(uri: &Uri) -> Result<Cursor, ApiRefusal> {
    let q = uri.query().unwrap_or_default();
    axum::extract::Query::<Cursor>::try_from_uri(uri)
        .map(|c| c.0)
        .or_else(|_| {
            if q.is_empty() {
                Ok(Cursor::default())
            } else {
                Err(ApiRefusal::new(
                    StatusCode::BAD_REQUEST,
                    "malformed",
                    "query is after=<seq>&limit=<n>",
                ))
            }
        })
}

/// One delivered message: the verified payload, verdicts, binding and,
/// for a probe, its status and the cookie the agent returns in its SYN-ACK
/// (§5.2.1); a release (the ACK leg landed); or a forwarding confirmation
/// (`code`, `provider`, `mailbox`: docs/probe-gateway.md "Mail flows").
pub(crate) fn item(s: &AppState, p: &StoredProbe) -> Value {
    let q = &p.probe;
    if q.kind == crate::flows::RELEASE_KIND || q.kind == crate::forwarding::KIND {
        let mut v = serde_json::from_str::<Value>(&q.payload).unwrap_or_else(|_| json!({}));
        v["seq"] = json!(p.seq);
        v["received"] = json!(from_unix(p.received).map(format_time).unwrap_or_default());
        v["kind"] = json!(q.kind);
        return v;
    }
    let cookie = (q.kind == "probe")
        .then(|| {
            let agent = AgentId::parse(&q.agent).ok()?;
            let from = Address::parse(&q.sender).ok()?;
            let ts = from_unix(q.ts).ok()?;
            Some(s.inner.cookies.issue(&agent, &q.id, &from, ts))
        })
        .flatten();
    let status = (q.kind == "probe").then_some(p.status.as_str());
    json!({
        "seq": p.seq,
        "received": from_unix(p.received).map(format_time).unwrap_or_default(),
        "mailbox": q.mailbox,
        "kind": q.kind,
        "status": status,
        "id": q.id,
        "requester": q.requester,
        "sender": q.sender,
        "payload": serde_json::from_str::<Value>(&q.payload).unwrap_or(Value::Null),
        "auth": serde_json::from_str::<Value>(&q.auth).unwrap_or(Value::Null),
        "binding": q.binding,
        "cookie": cookie,
    })
}

/// The agent's queue after a cursor. Only messages admitted for a mailbox
/// this key registered and proved are ever returned.
#[utoipa::path(get, path = "/v1/inbox",
    params(("after" = Option<i64>, Query), ("limit" = Option<u32>, Query),
        ("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 200, body = Object), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
async fn inbox(
    State(s): State<AppState>,
    uri: Uri,
    SignedAgent(agent): SignedAgent,
) -> Result<Response, ApiRefusal> {
    let c = cursor(&uri)?;
    let limit = c
        .limit
        .unwrap_or(s.inner.cfg.inbox_max_items)
        .clamp(1, s.inner.cfg.inbox_max_items);
    let after = c.after.unwrap_or(0);
    let rows = s
        .inner
        .store
        .inbox(agent.as_str(), after, limit, s.now().unix_timestamp())
        .await
        .map_err(ApiRefusal::internal)?;
    let next = rows.last().map_or(after, |r| r.seq);
    let items: Vec<Value> = rows.iter().map(|p| item(&s, p)).collect();
    Ok(Json(json!({"items": items, "next": next})).into_response())
}

/// The same queue as server-sent events (`event: probe`, `event: release`
/// for a release, `event: forwarding_confirmation` for a forwarding
/// confirmation; `id: <seq>`); a `ready` comment comes first,
/// once the stream is subscribed.
#[utoipa::path(get, path = "/v1/inbox/stream",
    params(("after" = Option<i64>, Query),
        ("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 200, content_type = "text/event-stream"), (status = 401, body = ErrorBody)))]
async fn stream(
    State(s): State<AppState>,
    uri: Uri,
    SignedAgent(agent): SignedAgent,
) -> Result<Response, ApiRefusal> {
    let c = cursor(&uri)?;
    // Subscribe before the first read, so nothing admitted in between is missed.
    let rx = s.inner.notify.subscribe();
    struct St {
        s: AppState,
        agent: String,
        after: i64,
        buf: VecDeque<StoredProbe>,
        rx: broadcast::Receiver<String>,
    }
    let st = St {
        s,
        agent: agent.as_str().to_string(),
        after: c.after.unwrap_or(0),
        buf: VecDeque::new(),
        rx,
    };
    let events = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(p) = st.buf.pop_front() {
                let name = match p.probe.kind.as_str() {
                    crate::flows::RELEASE_KIND => "release",
                    crate::forwarding::KIND => crate::forwarding::KIND,
                    _ => "probe",
                };
                let ev = Event::default()
                    .event(name)
                    .id(p.seq.to_string())
                    .data(item(&st.s, &p).to_string());
                return Some((Ok::<_, std::convert::Infallible>(ev), st));
            }
            let now = st.s.now().unix_timestamp();
            let limit = st.s.inner.cfg.inbox_max_items;
            match st
                .s
                .inner
                .store
                .inbox(&st.agent, st.after, limit, now)
                .await
            {
                Ok(rows) if !rows.is_empty() => {
                    st.after = rows.last().map_or(st.after, |r| r.seq);
                    st.buf.extend(rows);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "stream read failed");
                    return None;
                }
            }
            loop {
                match st.rx.recv().await {
                    Ok(a) if a == st.agent => break,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    });
    let ready = futures_util::stream::once(async {
        Ok::<_, std::convert::Infallible>(Event::default().comment("ready"))
    });
    use futures_util::StreamExt;
    Ok(Sse::new(ready.chain(events))
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Rendezvous probe gateway",
        description = "SPEC §5.2.1, §5.2.2; docs/probe-gateway.md"
    ),
    paths(
        inbound,
        register,
        verify,
        inbox,
        stream,
        crate::flows::mailboxes,
        crate::flows::send_probe,
        crate::flows::send_syn_ack,
        crate::flows::send_ack,
        crate::flows::send_invite,
        crate::flows::ack,
        crate::flows::invite_status,
        crate::flows::optout_page,
        crate::flows::optout_confirm,
        crate::flows::explainer
    ),
    components(schemas(
        ErrorBody,
        RegisterBody,
        VerifyBody,
        crate::flows::SendProbeBody,
        crate::flows::SynAckBody,
        crate::flows::SendAckBody,
        crate::flows::SendInviteBody,
        crate::flows::AckBody,
        crate::flows::InviteStatusBody
    ))
)]
struct ApiDoc;

async fn openapi() -> Response {
    Json(ApiDoc::openapi()).into_response()
}

async fn healthz(State(s): State<AppState>) -> Response {
    match s.inner.store.ping().await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(_) => ApiRefusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "db_unavailable",
            "database unavailable",
        )
        .into_response(),
    }
}

async fn metrics_text(State(s): State<AppState>) -> Response {
    match &s.inner.metrics {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => ApiRefusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "metrics recorder unavailable",
        )
        .into_response(),
    }
}
