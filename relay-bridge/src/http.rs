//! The ntfy-compatible HTTP API (issue #5): publish (`PUT`/`POST /<topic>`,
//! JSON `POST /`, `GET /<topic>/publish`), subscribe (`/json`, `/sse`,
//! `/raw`, `/ws`, `poll=1`, `since=`, filters), `/healthz`, `/metrics`.

// A refusal is a finished `Response` (axum's rejection type); boxing it
// everywhere would only add noise.
#![allow(clippy::result_large_err)]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures_util::StreamExt as _;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use utoipa::OpenApi;

use crate::auth::{Auth, Denied, Perm};
use crate::hub::{Draft, Hub, Item, Origin, SubRequest};
use crate::limits::{Limited, Limits, SubGuard, Visitor};
use crate::message::{Event, Filters, Message, UnixTime as _, parse_priority};
use crate::{since, topic};

/// Everything a handler needs.
#[derive(Clone, Debug)]
pub struct AppState {
    pub hub: Arc<Hub>,
    pub limits: Arc<Limits>,
    pub auth: Arc<Auth>,
    /// Take the visitor from the last `X-Forwarded-For` entry.
    pub behind_proxy: bool,
    /// What the embedded MQTT broker holds in memory (None: no embedded
    /// broker).
    pub broker: Option<Arc<rumqttd::RouterGauges>>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "rdv-relay-bridge",
        description = "ntfy-compatible HTTP API of the Rendezvous relay bridge (SPEC §6.3)"
    ),
    paths(
        publish_topic,
        publish_json,
        topic_page,
        subscribe_json,
        subscribe_sse,
        subscribe_raw,
        subscribe_ws,
        healthz,
        metrics_page,
        openapi
    ),
    components(schemas(Message, Event, JsonPublish))
)]
struct ApiDoc;

/// Every route [`app`] serves, as (method, OpenAPI path).
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/"),
    ("put", "/"),
    ("get", "/{topic}"),
    ("put", "/{topic}"),
    ("post", "/{topic}"),
    ("get", "/{topic}/publish"),
    ("put", "/{topic}/publish"),
    ("post", "/{topic}/publish"),
    ("get", "/{topic}/send"),
    ("put", "/{topic}/send"),
    ("post", "/{topic}/send"),
    ("get", "/{topic}/trigger"),
    ("put", "/{topic}/trigger"),
    ("post", "/{topic}/trigger"),
    ("get", "/{topics}/json"),
    ("get", "/{topics}/sse"),
    ("get", "/{topics}/raw"),
    ("get", "/{topics}/ws"),
    ("get", "/healthz"),
    ("get", "/v1/health"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
];

/// The OpenAPI document of every HTTP path (issue #5). The aliases ntfy
/// accepts (`POST /{topic}`, `/{topic}/publish|send|trigger`, `PUT /`,
/// `/v1/health`) share the operation they alias, each with its own id.
pub fn api_doc() -> utoipa::openapi::OpenApi {
    use utoipa::openapi::path::Operation;
    let mut doc = ApiDoc::openapi();
    let get = |doc: &utoipa::openapi::OpenApi, path: &str, m: &str| -> Option<Operation> {
        let item = doc.paths.paths.get(path)?;
        match m {
            "get" => item.get.clone(),
            "put" => item.put.clone(),
            _ => item.post.clone(),
        }
    };
    let alias = |doc: &mut utoipa::openapi::OpenApi, from: (&str, &str), to: (&str, &str)| {
        let Some(mut op) = get(doc, from.1, from.0) else {
            return;
        };
        let slug: String =
            to.1.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
        op.operation_id = Some(format!("{}{slug}", to.0));
        let item = doc.paths.paths.entry(to.1.to_owned()).or_default();
        match to.0 {
            "get" => item.get = Some(op),
            "put" => item.put = Some(op),
            _ => item.post = Some(op),
        }
    };
    alias(&mut doc, ("put", "/{topic}"), ("post", "/{topic}"));
    for p in ["/{topic}/publish", "/{topic}/send", "/{topic}/trigger"] {
        for m in ["get", "put", "post"] {
            alias(&mut doc, ("put", "/{topic}"), (m, p));
        }
    }
    alias(&mut doc, ("post", "/"), ("put", "/"));
    alias(&mut doc, ("get", "/healthz"), ("get", "/v1/health"));
    doc
}

/// The HTTP application.
pub fn app(state: AppState) -> Router {
    let limited = Router::new()
        .route("/", post(publish_json).put(publish_json))
        .route(
            "/{topic}",
            get(topic_page).put(publish_topic).post(publish_topic),
        )
        .route(
            "/{topic}/publish",
            get(publish_topic).put(publish_topic).post(publish_topic),
        )
        .route(
            "/{topic}/send",
            get(publish_topic).put(publish_topic).post(publish_topic),
        )
        .route(
            "/{topic}/trigger",
            get(publish_topic).put(publish_topic).post(publish_topic),
        )
        .route("/{topics}/json", get(subscribe_json))
        .route("/{topics}/sse", get(subscribe_sse))
        .route("/{topics}/raw", get(subscribe_raw))
        .route("/{topics}/ws", get(subscribe_ws))
        .layer(middleware::from_fn_with_state(state.clone(), gate));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/health", get(healthz))
        .route("/metrics", get(metrics_page))
        .route("/openapi.json", get(openapi))
        .merge(limited)
        .layer(tower_http::cors::CorsLayer::permissive())
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// An ntfy-style error body; the reason is data.
pub fn refuse(status: StatusCode, reason: &str) -> Response {
    crate::metrics::refused(match status.as_u16() {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        413 => "too_large",
        _ => "other",
    });
    let code = u32::from(status.as_u16()) * 100;
    (
        status,
        Json(serde_json::json!({ "code": code, "http": status.as_u16(), "error": reason })),
    )
        .into_response()
}

fn limited(l: Limited) -> Response {
    crate::metrics::refused(l.refusal.metric());
    let mut r = (
        StatusCode::TOO_MANY_REQUESTS,
        Json(serde_json::json!({ "code": 42901, "http": 429, "error": l.refusal.reason() })),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&l.retry_after_secs.to_string()) {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

fn denied(d: Denied) -> Response {
    match d {
        Denied::Unauthorized => refuse(StatusCode::UNAUTHORIZED, "unauthorized"),
        Denied::Forbidden => refuse(StatusCode::FORBIDDEN, "forbidden"),
    }
}

fn visitor_of(state: &AppState, req: &Request) -> Visitor {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    if state.behind_proxy {
        let fwd = req
            .headers()
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.rsplit(',').next())
            .and_then(|s| s.trim().parse::<IpAddr>().ok());
        if let Some(ip) = fwd {
            return Visitor::of(ip);
        }
    }
    Visitor::of(peer)
}

/// Rate limits every API request and records the visitor.
async fn gate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let v = visitor_of(&state, &req);
    if let Err(l) = state.limits.request(v) {
        return limited(l);
    }
    req.extensions_mut().insert(v);
    next.run(req).await
}

/// The visitor the gate recorded.
struct Who(Visitor);

impl<S: Send + Sync> FromRequestParts<S> for Who {
    type Rejection = Infallible;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Infallible> {
        Ok(Who(parts
            .extensions
            .get::<Visitor>()
            .copied()
            .unwrap_or(Visitor::of(IpAddr::from([127, 0, 0, 1])))))
    }
}

/// The query string as pairs.
#[derive(Debug, Default)]
struct Params(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = Response;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Response> {
        let q = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str::<Vec<(String, String)>>(q)
            .map(Params)
            .map_err(|_| refuse(StatusCode::BAD_REQUEST, "malformed query string"))
    }
}

impl Params {
    /// The first of `names` found as a header, else as a query parameter.
    fn get(&self, headers: &HeaderMap, names: &[&str]) -> Option<String> {
        for n in names {
            if let Some(v) = headers.get(*n).and_then(|v| v.to_str().ok()) {
                return Some(v.to_owned());
            }
        }
        for n in names {
            let n = n.to_ascii_lowercase();
            if let Some((_, v)) = self.0.iter().find(|(k, _)| k.to_ascii_lowercase() == n) {
                return Some(v.clone());
            }
        }
        None
    }
}

/// The token from `Authorization: Bearer …`, Basic with the token as the
/// password (ntfy's form), or `?auth=` (base64 of the header value).
fn token(headers: &HeaderMap, p: &Params) -> Result<Option<String>, Response> {
    let raw = match headers.get(header::AUTHORIZATION) {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| refuse(StatusCode::UNAUTHORIZED, "bad authorization header"))?
                .to_owned(),
        ),
        None => match p.0.iter().find(|(k, _)| k == "auth") {
            Some((_, v)) => {
                let d = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(v.trim_end_matches('='))
                    .map_err(|_| refuse(StatusCode::UNAUTHORIZED, "bad auth parameter"))?;
                Some(
                    String::from_utf8(d)
                        .map_err(|_| refuse(StatusCode::UNAUTHORIZED, "bad auth parameter"))?,
                )
            }
            None => None,
        },
    };
    let Some(raw) = raw else { return Ok(None) };
    if let Some(t) = raw.strip_prefix("Bearer ") {
        return Ok(Some(t.trim().to_owned()));
    }
    if let Some(b) = raw.strip_prefix("Basic ") {
        let d = base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
            .ok_or_else(|| refuse(StatusCode::UNAUTHORIZED, "bad basic credentials"))?;
        let pass = d.split_once(':').map(|(_, p)| p).unwrap_or("");
        return Ok(Some(pass.to_owned()));
    }
    Err(refuse(
        StatusCode::UNAUTHORIZED,
        "unsupported authorization scheme",
    ))
}

fn one_topic(t: &str) -> Result<String, Response> {
    topic::validate(t).map_err(|e| refuse(StatusCode::BAD_REQUEST, e.reason()))?;
    Ok(t.to_owned())
}

fn parse_tags(s: &str) -> Option<Vec<String>> {
    let v: Vec<String> = s
        .split(',')
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect();
    (!v.is_empty()).then_some(v)
}

fn is_no(s: &str) -> bool {
    matches!(
        s.to_ascii_lowercase().as_str(),
        "no" | "0" | "false" | "off"
    )
}

fn is_yes(s: &str) -> bool {
    matches!(s.to_ascii_lowercase().as_str(), "yes" | "1" | "true" | "on")
}

/// Reads at most `limit` bytes of body; more is a 413.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| refuse(StatusCode::PAYLOAD_TOO_LARGE, "message body too large"))
}

async fn do_publish(state: &AppState, v: Visitor, d: Draft) -> Response {
    if d.body.len() > state.limits.message_size_limit() {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "message body too large");
    }
    if let Err(l) = state.limits.spend_bytes(v, d.body.len() as u64) {
        return limited(l);
    }
    if state.hub.is_shutting_down() {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    match state.hub.publish(d, Origin::Http).await {
        Ok(m) => Json(&*m).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "publish failed");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "cache write failed")
        }
    }
}

/// Publishes a message on a topic (body = message).
#[utoipa::path(put, path = "/{topic}", params(("topic" = String, Path)), request_body = String,
    responses((status = 200, body = Message), (status = 400), (status = 413), (status = 429)))]
async fn publish_topic(
    State(state): State<AppState>,
    Who(v): Who,
    Path(t): Path<String>,
    method: Method,
    headers: HeaderMap,
    p: Params,
    body: Body,
) -> Response {
    let topic = match one_topic(&t) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let tok = match token(&headers, &p) {
        Ok(t) => t,
        Err(r) => return r,
    };
    if let Err(d) = state
        .auth
        .check(tok.as_deref(), std::slice::from_ref(&topic), Perm::Write)
    {
        return denied(d);
    }
    let limit = state.limits.message_size_limit();
    let mut bytes = if method == Method::GET {
        Bytes::new()
    } else {
        match read_body(body, limit).await {
            Ok(b) => b,
            Err(r) => return r,
        }
    };
    if bytes.is_empty() {
        bytes = Bytes::from(
            p.get(&headers, &["X-Message", "Message", "m"])
                .unwrap_or_else(|| "triggered".into()),
        );
    }
    let priority = match p.get(&headers, &["X-Priority", "Priority", "prio", "p"]) {
        Some(s) => match parse_priority(&s) {
            Some(n) => Some(n),
            None => return refuse(StatusCode::BAD_REQUEST, "invalid priority"),
        },
        None => None,
    };
    let d = Draft {
        topic,
        body: bytes,
        title: p.get(&headers, &["X-Title", "Title", "ti", "t"]),
        tags: p
            .get(&headers, &["X-Tags", "Tags", "Tag", "ta"])
            .and_then(|s| parse_tags(&s)),
        priority,
        click: p.get(&headers, &["X-Click", "Click"]),
        cache: !p
            .get(&headers, &["X-Cache", "Cache"])
            .is_some_and(|s| is_no(&s)),
    };
    do_publish(&state, v, d).await
}

/// The JSON publish form (`POST /`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct JsonPublish {
    topic: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    click: Option<String>,
    /// Not an ntfy field: `"base64"` says `message` is base64 of a binary body.
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default)]
    cache: Option<String>,
}

/// Publishes with a JSON body (`{"topic": …, "message": …}`).
#[utoipa::path(post, path = "/", request_body = JsonPublish,
    responses((status = 200, body = Message), (status = 400), (status = 413), (status = 429)))]
async fn publish_json(
    State(state): State<AppState>,
    Who(v): Who,
    headers: HeaderMap,
    p: Params,
    body: Body,
) -> Response {
    // Escaped JSON can be six times the message it carries.
    let limit = state
        .limits
        .message_size_limit()
        .saturating_mul(6)
        .saturating_add(4096);
    let bytes = match read_body(body, limit).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let j: JsonPublish = match serde_json::from_slice(&bytes) {
        Ok(j) => j,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &format!("malformed JSON: {e}")),
    };
    let topic = match one_topic(&j.topic) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let tok = match token(&headers, &p) {
        Ok(t) => t,
        Err(r) => return r,
    };
    if let Err(d) = state
        .auth
        .check(tok.as_deref(), std::slice::from_ref(&topic), Perm::Write)
    {
        return denied(d);
    }
    if j.priority.is_some_and(|n| !(1..=5).contains(&n)) {
        return refuse(StatusCode::BAD_REQUEST, "invalid priority");
    }
    let msg = j.message.unwrap_or_else(|| "triggered".into());
    let body = match j.encoding.as_deref() {
        None | Some("") => Bytes::from(msg.into_bytes()),
        Some("base64") => match base64::engine::general_purpose::STANDARD.decode(msg.as_bytes()) {
            Ok(b) => Bytes::from(b),
            Err(_) => return refuse(StatusCode::BAD_REQUEST, "invalid base64 message"),
        },
        Some(_) => return refuse(StatusCode::BAD_REQUEST, "unknown encoding"),
    };
    let d = Draft {
        topic,
        body,
        title: j.title,
        tags: j.tags.filter(|t| !t.is_empty()),
        priority: j.priority,
        click: j.click,
        cache: !j.cache.is_some_and(|s| is_no(&s)),
    };
    do_publish(&state, v, d).await
}

/// A short page naming the subscribe endpoints (ntfy serves its web app here).
#[utoipa::path(get, path = "/{topic}", params(("topic" = String, Path)),
    responses((status = 200, content_type = "text/plain"), (status = 400), (status = 429)))]
async fn topic_page(Path(t): Path<String>) -> Response {
    match one_topic(&t) {
        Ok(_) => (
            StatusCode::OK,
            "rdv-relay-bridge: subscribe with /<topic>/json, /sse, /raw or /ws\n",
        )
            .into_response(),
        Err(r) => r,
    }
}

/// Admission of a subscription: topics, ACL, limits, parameters.
fn admit(
    state: &AppState,
    v: Visitor,
    topics: &str,
    headers: &HeaderMap,
    p: &Params,
) -> Result<(SubRequest, SubGuard), Response> {
    let topics =
        topic::parse_list(topics).map_err(|e| refuse(StatusCode::BAD_REQUEST, e.reason()))?;
    let tok = token(headers, p)?;
    state
        .auth
        .check(tok.as_deref(), &topics, Perm::Read)
        .map_err(denied)?;
    if state.hub.is_shutting_down() {
        return Err(refuse(StatusCode::SERVICE_UNAVAILABLE, "shutting down"));
    }
    let poll = p
        .get(headers, &["X-Poll", "Poll", "po"])
        .is_some_and(|s| is_yes(&s));
    let now = state.hub.clock().now_secs();
    let since = match p.get(headers, &["X-Since", "Since", "si"]) {
        Some(s) => since::parse(&s, now).map_err(|e| refuse(StatusCode::BAD_REQUEST, e))?,
        None if poll => since::Since::All,
        None => since::Since::None,
    };
    let priorities = match p.get(headers, &["X-Priority", "Priority", "prio", "p"]) {
        Some(s) => s
            .split(',')
            .map(|x| {
                parse_priority(x)
                    .ok_or_else(|| refuse(StatusCode::BAD_REQUEST, "invalid priority filter"))
            })
            .collect::<Result<Vec<u8>, Response>>()?,
        None => Vec::new(),
    };
    let filters = Filters {
        id: p.get(headers, &["X-ID", "ID"]),
        message: p.get(headers, &["X-Message", "Message", "m"]),
        title: p.get(headers, &["X-Title", "Title", "ti", "t"]),
        tags: p
            .get(headers, &["X-Tags", "Tags", "Tag", "ta"])
            .and_then(|s| parse_tags(&s))
            .unwrap_or_default(),
        priorities,
    };
    let guard = state.limits.subscribe(v).map_err(limited)?;
    Ok((
        SubRequest {
            topics,
            since,
            filters,
            poll,
        },
        guard,
    ))
}

/// How one item is written in each subscription style.
#[derive(Debug, Clone, Copy)]
enum Style {
    Json,
    Sse,
    Raw,
}

fn encode(style: Style, m: &Message) -> String {
    match style {
        Style::Json => format!("{}\n", m.to_json()),
        Style::Sse if m.event == Event::Message => {
            format!("id: {}\ndata: {}\n\n", m.id, m.to_json())
        }
        Style::Sse => format!("event: {}\ndata: {}\n\n", m.event.as_str(), m.to_json()),
        Style::Raw if m.event == Event::Message => {
            format!("{}\n", m.text().replace(['\n', '\r'], " "))
        }
        Style::Raw => "\n".to_owned(),
    }
}

fn stream(state: &AppState, req: SubRequest, guard: SubGuard, style: Style) -> Response {
    let (tx, rx) = mpsc::channel::<Item>(64);
    tokio::spawn(state.hub.clone().run_subscription(req, tx));
    let body = ReceiverStream::new(rx).map(move |m| {
        let _held = &guard;
        Ok::<_, Infallible>(Bytes::from(encode(style, &m)))
    });
    let ctype = match style {
        Style::Json => "application/x-ndjson; charset=utf-8",
        Style::Sse => "text/event-stream; charset=utf-8",
        Style::Raw => "text/plain; charset=utf-8",
    };
    Response::builder()
        .header(header::CONTENT_TYPE, ctype)
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| refuse(StatusCode::INTERNAL_SERVER_ERROR, "response"))
}

/// Subscribes as NDJSON (one ntfy message JSON per line).
#[utoipa::path(get, path = "/{topics}/json", params(("topics" = String, Path, description = "t1[,t2…]"),
    ("since" = Option<String>, Query), ("poll" = Option<String>, Query)),
    responses((status = 200, body = Message, content_type = "application/x-ndjson"), (status = 400), (status = 429)))]
async fn subscribe_json(
    State(s): State<AppState>,
    Who(v): Who,
    Path(t): Path<String>,
    h: HeaderMap,
    p: Params,
) -> Response {
    match admit(&s, v, &t, &h, &p) {
        Ok((req, g)) => stream(&s, req, g, Style::Json),
        Err(r) => r,
    }
}

/// Subscribes as Server-Sent Events (`event:` and `data:` with the message JSON).
#[utoipa::path(get, path = "/{topics}/sse", params(("topics" = String, Path, description = "t1[,t2…]"),
    ("since" = Option<String>, Query), ("poll" = Option<String>, Query)),
    responses((status = 200, body = Message, content_type = "text/event-stream"), (status = 400), (status = 429)))]
async fn subscribe_sse(
    State(s): State<AppState>,
    Who(v): Who,
    Path(t): Path<String>,
    h: HeaderMap,
    p: Params,
) -> Response {
    match admit(&s, v, &t, &h, &p) {
        Ok((req, g)) => stream(&s, req, g, Style::Sse),
        Err(r) => r,
    }
}

/// Subscribes as raw text: one message body per line, empty lines as keepalives.
#[utoipa::path(get, path = "/{topics}/raw", params(("topics" = String, Path, description = "t1[,t2…]"),
    ("since" = Option<String>, Query), ("poll" = Option<String>, Query)),
    responses((status = 200, body = Message, content_type = "text/plain"), (status = 400), (status = 429)))]
async fn subscribe_raw(
    State(s): State<AppState>,
    Who(v): Who,
    Path(t): Path<String>,
    h: HeaderMap,
    p: Params,
) -> Response {
    match admit(&s, v, &t, &h, &p) {
        Ok((req, g)) => stream(&s, req, g, Style::Raw),
        Err(r) => r,
    }
}

/// Subscribes over WebSocket: one message JSON per text frame.
#[utoipa::path(get, path = "/{topics}/ws", params(("topics" = String, Path, description = "t1[,t2…]"),
    ("since" = Option<String>, Query), ("poll" = Option<String>, Query)),
    responses((status = 200, body = Message, content_type = "application/json"), (status = 400), (status = 429)))]
async fn subscribe_ws(
    State(s): State<AppState>,
    Who(v): Who,
    Path(t): Path<String>,
    h: HeaderMap,
    p: Params,
    ws: WebSocketUpgrade,
) -> Response {
    let (req, guard) = match admit(&s, v, &t, &h, &p) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let hub = s.hub.clone();
    ws.max_message_size(4096)
        .on_upgrade(move |socket| ws_session(socket, hub, req, guard))
}

async fn ws_session(mut socket: WebSocket, hub: Arc<Hub>, req: SubRequest, guard: SubGuard) {
    let (tx, mut rx) = mpsc::channel::<Item>(64);
    tokio::spawn(hub.run_subscription(req, tx));
    loop {
        tokio::select! {
            m = rx.recv() => match m {
                Some(m) => {
                    if socket.send(WsMessage::Text(m.to_json().into())).await.is_err() {
                        break;
                    }
                }
                None => {
                    let _ = socket.send(WsMessage::Close(None)).await;
                    break;
                }
            },
            r = socket.recv() => match r {
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    drop(guard);
}

/// Liveness and cache reachability.
#[utoipa::path(get, path = "/healthz", responses((status = 200), (status = 503)))]
async fn healthz(State(s): State<AppState>) -> Response {
    if s.hub.is_shutting_down() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"healthy": false})),
        )
            .into_response();
    }
    if let Some(store) = s.hub.store()
        && store.ping().await.is_err()
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"healthy": false})),
        )
            .into_response();
    }
    Json(serde_json::json!({"healthy": true})).into_response()
}

/// Prometheus metrics: messages in and out per protocol, subscribers,
/// cache size, refusals, and what the embedded broker holds in memory.
#[utoipa::path(get, path = "/metrics",
    responses((status = 200, content_type = "text/plain"), (status = 503)))]
async fn metrics_page(State(s): State<AppState>) -> Response {
    metrics::gauge!("rdv_bridge_subscribers_open").set(s.limits.subscribers() as f64);
    metrics::gauge!("rdv_bridge_cache_queue_bytes").set(s.hub.queued_bytes() as f64);
    if let Some(store) = s.hub.store()
        && let Ok((n, bytes)) = store.stats().await
    {
        metrics::gauge!("rdv_bridge_cache_messages").set(n as f64);
        metrics::gauge!("rdv_bridge_cache_bytes").set(bytes as f64);
    }
    if let Some(g) = &s.broker {
        broker_gauges(g.read());
    }
    match crate::metrics::handle() {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder unavailable",
        ),
    }
}

/// The embedded broker's memory, as docs/relay-bridge.md "Memory" explains.
fn broker_gauges(r: rumqttd::GaugeReading) {
    use metrics::gauge;
    gauge!("rdv_bridge_mqtt_filters").set(r.filters as f64);
    gauge!("rdv_bridge_mqtt_log_bytes").set(r.log_bytes as f64);
    gauge!("rdv_bridge_mqtt_topic_cache").set(r.topic_cache as f64);
    gauge!("rdv_bridge_mqtt_subscriptions").set(r.subscriptions as f64);
    gauge!("rdv_bridge_mqtt_retained").set(r.retained as f64);
    gauge!("rdv_bridge_mqtt_retained_bytes").set(r.retained_bytes as f64);
    gauge!("rdv_bridge_mqtt_saved_sessions").set(r.saved_sessions as f64);
    metrics::counter!("rdv_bridge_mqtt_retained_refused_total").absolute(r.retained_refused);
    metrics::counter!("rdv_bridge_mqtt_lagged_total").absolute(r.lagged);
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, content_type = "application/json")))]
async fn openapi() -> Response {
    Json(api_doc()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openapi_describes_every_route_once() {
        let doc = api_doc();
        let mut ids = std::collections::HashSet::new();
        for (m, p) in ROUTES {
            let item = doc.paths.paths.get(*p);
            let op = item.and_then(|i| match *m {
                "get" => i.get.as_ref(),
                "put" => i.put.as_ref(),
                _ => i.post.as_ref(),
            });
            let op = op.unwrap_or_else(|| panic!("{m} {p} is not in the OpenAPI document"));
            let id = op.operation_id.clone().unwrap_or_default();
            assert!(ids.insert(id.clone()), "operation id {id} repeats");
        }
        let described: usize = doc
            .paths
            .paths
            .values()
            .map(|i| {
                [&i.get, &i.put, &i.post, &i.delete]
                    .iter()
                    .filter(|o| o.is_some())
                    .count()
            })
            .sum();
        assert_eq!(
            described,
            ROUTES.len(),
            "the document describes a route app() lacks"
        );
    }
}
