//! The HTTP API (§4.5, pinned in docs/directory-protocol.md).
//!
//! Every body is bounded before it is parsed; refusals are JSON
//! `{error, message}` with a stable code. Nothing here logs or records an
//! address, a dtopic, a blinded element or an OPRF output: handlers log
//! only outcomes and counts.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rand_core::{OsRng, RngCore};
use rdv_directory_client::listing::{Listing, Removal};
use rdv_directory_client::lookup::is_bucket;
use rdv_directory_client::oprf::ELEMENT_LEN;
use rdv_directory_client::seal::SEALED_MIN_RAW;
use rdv_directory_client::wire::{
    Bucket, ErrorBody, EvaluateRequest, EvaluateResponse, InfoResponse, KeysResponse,
    ListingResponse, LookupRequest, LookupResponse,
};
use rdv_proto::consts::{
    DIR_LISTING_MAX_BYTES, DIR_LISTING_MAX_LIFETIME_SECS, DIR_LISTING_TYPE, DIR_OPRF_MODE,
    DIR_OPRF_SUITE,
};
use rdv_proto::encoding::{base32, base64, base64_decode, is_hash};
use rdv_proto::time::format_time;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa::OpenApi;

use crate::clock::Clock;
use crate::config::Config;
use crate::keys::KeyRing;
use crate::limits::{Kind, Limiter, Verdict};
use crate::store::{Bounds, PutOutcome, RemoveOutcome, Store};

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: Config,
    keys: RwLock<KeyRing>,
    /// The key file reloaded every `key_reload_secs` and on SIGHUP
    /// (`cfg.key_file`).
    key_source: Option<PathBuf>,
    /// Unix second of the next due reload.
    next_reload: Mutex<i64>,
    store: Store,
    clock: Arc<dyn Clock>,
    limiter: Limiter,
    metrics: Option<PrometheusHandle>,
}

impl AppState {
    /// `keys` is the ring to start with; if `cfg.key_file` is set and
    /// `cfg.key_reload_secs` is not 0, that file is read again whenever that
    /// many seconds of the service clock have passed, so every process
    /// sharing the file learns of a rotation without a restart (§4.5).
    pub fn new(cfg: Config, keys: KeyRing, store: Store, clock: Arc<dyn Clock>) -> Self {
        let limiter = Limiter::new(&cfg.limits, clock.clone());
        let key_source = cfg.key_file.clone();
        let next_reload = clock.now().unix_timestamp() + reload_secs(&cfg);
        Self {
            inner: Arc::new(Inner {
                cfg,
                keys: RwLock::new(keys),
                key_source,
                next_reload: Mutex::new(next_reload),
                store,
                clock,
                limiter,
                metrics: metrics_handle(),
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The key ring now, reloading the key file first when a reload is due
    /// on the service clock.
    pub fn keys(&self) -> KeyRing {
        if self.inner.key_source.is_some() && self.inner.cfg.key_reload_secs > 0 {
            let now = self.now().unix_timestamp();
            // One request reloads; the others go on with the current ring.
            let due = match self.inner.next_reload.try_lock() {
                Ok(mut next) if now >= *next => {
                    *next = now + reload_secs(&self.inner.cfg);
                    true
                }
                _ => false,
            };
            if due {
                let _ = self.reload_keys();
            }
        }
        self.current_keys()
    }

    fn current_keys(&self) -> KeyRing {
        match self.inner.keys.read() {
            Ok(k) => k.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Reads the key file again now (the periodic reload and SIGHUP). A
    /// file that does not load leaves the current keys in place. Returns
    /// whether the set of keys or their windows changed.
    pub fn reload_keys(&self) -> crate::Result<bool> {
        let Some(path) = &self.inner.key_source else {
            return Ok(false);
        };
        let fresh = match KeyRing::load(path) {
            Ok(k) => k,
            Err(e) => {
                metrics::counter!("rdv_directory_key_reload_failures_total").increment(1);
                tracing::warn!(error = %e, "key reload failed; keeping the current keys");
                return Err(e);
            }
        };
        let changed = fresh.schedule() != self.current_keys().schedule();
        if changed {
            tracing::info!(
                keys = fresh.all().len(),
                "key file reloaded; the key set changed"
            );
        }
        match self.inner.keys.write() {
            Ok(mut k) => *k = fresh,
            Err(p) => *p.into_inner() = fresh,
        }
        Ok(changed)
    }

    pub fn limiter(&self) -> &Limiter {
        &self.inner.limiter
    }

    pub fn now(&self) -> time::OffsetDateTime {
        self.inner.clock.now()
    }
}

fn reload_secs(cfg: &Config) -> i64 {
    i64::try_from(cfg.key_reload_secs.max(1)).unwrap_or(i64::MAX / 2)
}

/// The process-wide Prometheus recorder (installed once).
fn metrics_handle() -> Option<PrometheusHandle> {
    static H: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    H.get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .clone()
}

/// A refusal: status, stable code, message, and the wait for a 429.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            Json(ErrorBody {
                error: self.code.into(),
                message: self.message,
            }),
        )
            .into_response();
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}

type Answer<T> = Result<Json<T>, Refusal>;

/// Records the outcome of `endpoint` and turns it into a response.
fn finish<T: serde::Serialize>(endpoint: &'static str, a: Answer<T>) -> Response {
    let status = match &a {
        Ok(_) => StatusCode::OK,
        Err(r) => r.status,
    };
    metrics::counter!("rdv_directory_requests_total", "endpoint" => endpoint, "status" => status.as_u16().to_string())
        .increment(1);
    if status == StatusCode::TOO_MANY_REQUESTS {
        metrics::counter!("rdv_directory_rate_limited_total", "endpoint" => endpoint).increment(1);
    }
    match a {
        Ok(j) => j.into_response(),
        Err(r) => r.into_response(),
    }
}

/// The client's address: the TCP peer, or the last entry of the configured
/// proxy header.
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(h) = &state.inner.cfg.client_ip_header
            && let Some(ip) = parts
                .headers
                .get(h.as_str())
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.rsplit(',').next())
                .and_then(|v| v.trim().parse::<IpAddr>().ok())
        {
            return Ok(Self(ip));
        }
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
        Ok(Self(peer))
    }
}

fn limit(state: &AppState, kind: Kind, ip: IpAddr, n: u32) -> Result<(), Refusal> {
    match state.inner.limiter.check(kind, ip, n) {
        Verdict::Allowed => Ok(()),
        Verdict::Limited { retry_after } => {
            tracing::info!(kind = kind.as_str(), "rate limited");
            Err(Refusal {
                retry_after: Some(retry_after),
                ..Refusal::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!("too many {} requests; retry later", kind.as_str()),
                )
            })
        }
    }
}

fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(body)
        .map_err(|e| Refusal::bad("malformed", format!("malformed body: {e}")))
}

fn usable_key<'a>(
    ring: &'a KeyRing,
    id: &str,
    now: time::OffsetDateTime,
) -> Result<&'a crate::keys::LoadedKey, Refusal> {
    ring.get(id, now).ok_or_else(|| {
        Refusal::bad(
            "unknown_key",
            "key_id is not a key this directory lists now",
        )
    })
}

/// The router; `state` carries config, keys, store, clock and limiters.
pub fn app(state: AppState) -> Router {
    let cfg = &state.inner.cfg;
    let cors = rdv_service_kit::http::cors(
        &cfg.cors_origins,
        vec![Method::GET, Method::POST, Method::PUT, Method::DELETE],
        vec![header::CONTENT_TYPE],
    )
    .expose_headers([header::RETRY_AFTER]);
    let body_limit = cfg.max_body_bytes;
    let timeout = Duration::from_secs(cfg.request_timeout_secs);
    Router::new()
        .route("/v1/keys", get(keys))
        .route("/v1/info", get(info))
        .route("/v1/evaluate", post(evaluate))
        .route("/v1/lookup", post(lookup))
        .route(
            "/v1/listings/{lookup_id}",
            put(put_listing).delete(delete_listing),
        )
        .route("/v1/openapi.json", get(openapi))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(body_limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        // Outside the body limit and the timeout, so their refusals (and
        // axum's own 404/405) get the JSON error shape too.
        .layer(axum::middleware::map_response(
            rdv_service_kit::http::json_refusals,
        ))
        .layer(cors)
        // The matched route, never the path: it would carry a lookup_id.
        .layer(rdv_service_kit::http::trace_layer())
        .with_state(state)
}

#[utoipa::path(get, path = "/v1/keys", responses((status = 200, body = KeysResponse)))]
async fn keys(State(s): State<AppState>) -> Response {
    let now = s.now();
    finish(
        "keys",
        Ok(Json(KeysResponse {
            suite: DIR_OPRF_SUITE.into(),
            mode: DIR_OPRF_MODE.into(),
            keys: s.keys().usable(now).into_iter().map(|k| k.info()).collect(),
        })),
    )
}

fn info_of(cfg: &Config) -> InfoResponse {
    InfoResponse {
        suite: DIR_OPRF_SUITE.into(),
        mode: DIR_OPRF_MODE.into(),
        bucket_hex_len: cfg.bucket_hex_len,
        pad_to: cfg.pad_to,
        max_batch: cfg.max_batch,
        max_buckets: cfg.max_buckets,
        max_claims_per_lookup_id: cfg.max_claims_per_lookup_id,
        max_listings_per_agent: cfg.max_listings_per_agent,
        listing_max_lifetime_secs: DIR_LISTING_MAX_LIFETIME_SECS,
    }
}

#[utoipa::path(get, path = "/v1/info", responses((status = 200, body = InfoResponse)))]
async fn info(State(s): State<AppState>) -> Response {
    finish("info", Ok(Json(info_of(&s.inner.cfg))))
}

#[utoipa::path(post, path = "/v1/evaluate", request_body = EvaluateRequest,
    responses((status = 200, body = EvaluateResponse), (status = 400, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn evaluate(State(s): State<AppState>, ip: ClientIp, body: Bytes) -> Response {
    finish("evaluate", evaluate_inner(&s, ip.0, &body).await)
}

async fn evaluate_inner(s: &AppState, ip: IpAddr, body: &[u8]) -> Answer<EvaluateResponse> {
    let req: EvaluateRequest = parse_json(body)?;
    let max = s.inner.cfg.max_batch as usize;
    if req.blinded.is_empty() || req.blinded.len() > max {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_size",
            format!("blinded must hold 1 to {max} elements"),
        ));
    }
    let ring = s.keys();
    let key = usable_key(&ring, &req.key_id, s.now())?;
    let b64_len = ELEMENT_LEN.div_ceil(3) * 4;
    let mut elems = Vec::with_capacity(req.blinded.len());
    for b in &req.blinded {
        let raw = (b.len() == b64_len)
            .then(|| base64_decode(b).ok())
            .flatten()
            .filter(|r| r.len() == ELEMENT_LEN)
            .ok_or_else(|| {
                Refusal::bad("bad_element", "a blinded element is not a P-256 element")
            })?;
        elems.push(raw);
    }
    limit(s, Kind::Evaluate, ip, elems.len() as u32)?;
    let id = key.id.clone();
    let ring2 = ring.clone();
    let n = elems.len();
    let res = tokio::task::spawn_blocking(move || {
        let key = ring2.all().iter().find(|k| k.id == id).map(|k| &k.key);
        let refs: Vec<&[u8]> = elems.iter().map(Vec::as_slice).collect();
        key.map(|k| k.evaluate_batch(&refs, &mut OsRng))
    })
    .await
    .map_err(Refusal::internal)?;
    let (evaluated, proof) = match res {
        Some(Ok(x)) => x,
        Some(Err(_)) => {
            return Err(Refusal::bad(
                "bad_element",
                "a blinded element is not a valid P-256 element",
            ));
        }
        None => return Err(Refusal::bad("unknown_key", "key_id is not listed")),
    };
    metrics::counter!("rdv_directory_evaluated_elements_total").increment(n as u64);
    Ok(Json(EvaluateResponse {
        key_id: req.key_id,
        evaluated: evaluated.iter().map(|e| base64(e)).collect(),
        proof: base64(&proof),
    }))
}

#[utoipa::path(post, path = "/v1/lookup", request_body = LookupRequest,
    responses((status = 200, body = LookupResponse), (status = 400, body = ErrorBody),
              (status = 429, body = ErrorBody)))]
async fn lookup(State(s): State<AppState>, ip: ClientIp, body: Bytes) -> Response {
    finish("lookup", lookup_inner(&s, ip.0, &body).await)
}

/// The lookup answer as sent: [`LookupResponse`]'s shape, with listings
/// passed through as the stored canonical JSON instead of being parsed and
/// serialized again (most of an answer's bytes).
#[derive(serde::Serialize)]
struct RawLookup {
    key_id: String,
    buckets: Vec<RawBucket>,
}

#[derive(serde::Serialize)]
struct RawBucket {
    prefix: String,
    listings: Vec<Box<RawValue>>,
}

async fn lookup_inner(s: &AppState, ip: IpAddr, body: &[u8]) -> Answer<RawLookup> {
    let req: LookupRequest = parse_json(body)?;
    let cfg = &s.inner.cfg;
    if req.buckets.is_empty() || req.buckets.len() > cfg.max_buckets as usize {
        return Err(Refusal::bad(
            "bucket_count",
            format!("buckets must hold 1 to {} prefixes", cfg.max_buckets),
        ));
    }
    let hex_len = cfg.bucket_hex_len as usize;
    if !req.buckets.iter().all(|b| is_bucket(b, hex_len)) {
        return Err(Refusal::bad(
            "bad_bucket",
            format!("each bucket is {hex_len} lowercase hex digits"),
        ));
    }
    let ring = s.keys();
    let key = usable_key(&ring, &req.key_id, s.now())?;
    limit(s, Kind::Lookup, ip, req.buckets.len() as u32)?;
    let now = s.now();
    let mut out = Vec::with_capacity(req.buckets.len());
    for prefix in &req.buckets {
        let docs = s
            .inner
            .store
            .bucket(&key.id, prefix, now.unix_timestamp(), cfg.max_per_bucket)
            .await
            .map_err(Refusal::internal)?;
        let mut listings: Vec<Box<RawValue>> = Vec::with_capacity(docs.len());
        for d in docs {
            listings.push(RawValue::from_string(d).map_err(Refusal::internal)?);
        }
        let pad = cfg.pad_to as usize;
        let target = listings.len().div_ceil(pad).max(1) * pad;
        let mut rng = DecoyRng::new(target - listings.len());
        while listings.len() < target {
            listings.push(
                RawValue::from_string(decoy(&key.id, prefix, now, &mut rng))
                    .map_err(Refusal::internal)?,
            );
        }
        // Decoys and listings are not told apart by position.
        shuffle(&mut listings);
        out.push(RawBucket {
            prefix: prefix.clone(),
            listings,
        });
    }
    Ok(Json(RawLookup {
        key_id: req.key_id,
        buckets: out,
    }))
}

/// Random bytes for a response's decoys, drawn from the OS in one call.
struct DecoyRng {
    buf: Vec<u8>,
    at: usize,
}

/// Bytes one decoy draws: lookup_id, agent, sealed card, signature, age.
const DECOY_BYTES: usize = 32 + 32 + SEALED_MIN_RAW + 64 + 8;

impl DecoyRng {
    fn new(decoys: usize) -> Self {
        let mut buf = vec![0u8; decoys * DECOY_BYTES];
        OsRng.fill_bytes(&mut buf);
        Self { buf, at: 0 }
    }

    fn take(&mut self, n: usize) -> &[u8] {
        if self.at + n > self.buf.len() {
            // Never reached (sized by `new`), but never reuse bytes.
            self.buf = vec![0u8; n.max(DECOY_BYTES)];
            OsRng.fill_bytes(&mut self.buf);
            self.at = 0;
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        s
    }
}

/// A decoy shaped like a one-block listing, as canonical JSON (the stored
/// listings' form, members in the same order): random lookup_id under the
/// prefix, random agent, sealed bytes and signature. It matches nobody.
fn decoy(key_id: &str, prefix: &str, now: time::OffsetDateTime, rng: &mut DecoyRng) -> String {
    let mut lookup_id = prefix.to_string();
    lookup_id.push_str(&hex::encode(rng.take(32))[prefix.len()..]);
    let agent = format!("rdv1:{}", base32(rng.take(32)));
    let sealed = base64(rng.take(SEALED_MIN_RAW));
    let sig = base64(rng.take(64));
    let r = rng.take(8);
    let day = i64::from(r[0] % 30);
    let secs = i64::from(u32::from_be_bytes([0, r[1], r[2], r[3]]) % 86_400);
    let updated = now - time::Duration::days(day) - time::Duration::seconds(secs);
    let expires = updated + time::Duration::days(30);
    format!(
        "{{\"agent\":\"{agent}\",\"expires\":\"{}\",\"key_id\":\"{key_id}\",\"lookup_id\":\"{lookup_id}\",\
         \"sealed\":\"{sealed}\",\"sig\":\"{sig}\",\"type\":\"{DIR_LISTING_TYPE}\",\"updated\":\"{}\",\"v\":1}}",
        format_time(expires),
        format_time(updated),
    )
}

fn shuffle<T>(v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = (OsRng.next_u64() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

fn listing_refusal(e: rdv_directory_client::Error) -> Refusal {
    use rdv_proto::Error as P;
    match e {
        rdv_directory_client::Error::Proto(P::BadSignature) => {
            Refusal::bad("bad_signature", "the signature does not verify")
        }
        rdv_directory_client::Error::Proto(P::Expired) => {
            Refusal::bad("expired", "the listing has expired")
        }
        rdv_directory_client::Error::Proto(P::FromFuture(_)) => Refusal::bad(
            "from_future",
            "updated is too far ahead of the server clock",
        ),
        rdv_directory_client::Error::Proto(P::TooLarge { .. }) => Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the document is too large",
        ),
        e => Refusal::bad("invalid_document", e.to_string()),
    }
}

fn check_path(lookup_id: &str) -> Result<(), Refusal> {
    if is_hash(lookup_id) {
        Ok(())
    } else {
        Err(Refusal::bad(
            "bad_lookup_id",
            "lookup_id is 64 lowercase hex digits",
        ))
    }
}

#[utoipa::path(put, path = "/v1/listings/{lookup_id}", request_body = Object,
    params(("lookup_id" = String, Path, description = "hex SHA-256(\"rdv1/dir/lookup:\" ‖ y)")),
    responses((status = 200, body = ListingResponse), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn put_listing(
    State(s): State<AppState>,
    ip: ClientIp,
    Path(lookup_id): Path<String>,
    body: Bytes,
) -> Response {
    finish("publish", put_inner(&s, ip.0, &lookup_id, &body).await)
}

async fn put_inner(
    s: &AppState,
    ip: IpAddr,
    lookup_id: &str,
    body: &[u8],
) -> Answer<ListingResponse> {
    check_path(lookup_id)?;
    limit(s, Kind::Publish, ip, 1)?;
    let doc = rdv_proto::canon::parse(body, DIR_LISTING_MAX_BYTES)
        .map_err(|e| listing_refusal(e.into()))?;
    let now = s.now();
    let l = Listing::verify(&doc, now).map_err(listing_refusal)?;
    if l.lookup_id != lookup_id {
        return Err(Refusal::bad(
            "lookup_id_mismatch",
            "the document is for another lookup_id",
        ));
    }
    usable_key(&s.keys(), &l.key_id, now)?;
    let cfg = &s.inner.cfg;
    let bounds = Bounds {
        max_claims_per_lookup_id: cfg.max_claims_per_lookup_id,
        max_listings_per_agent: cfg.max_listings_per_agent,
    };
    let out = s
        .inner
        .store
        .put(&l, now.unix_timestamp(), bounds)
        .await
        .map_err(Refusal::internal)?;
    tracing::info!(outcome = ?out, "publish");
    let conflict = |code, msg: &str| Err(Refusal::new(StatusCode::CONFLICT, code, msg));
    match out {
        PutOutcome::Stored { claims } => Ok(Json(ListingResponse {
            status: "stored".into(),
            claims,
        })),
        PutOutcome::Replaced { claims } => Ok(Json(ListingResponse {
            status: "replaced".into(),
            claims,
        })),
        PutOutcome::Stale => conflict(
            "stale",
            "a listing or removal with the same or a later updated is held",
        ),
        PutOutcome::TooManyClaims => {
            conflict("too_many_claims", "too many agents claim this lookup_id")
        }
        PutOutcome::TooManyListings => {
            conflict("too_many_listings", "this agent holds too many listings")
        }
    }
}

#[utoipa::path(delete, path = "/v1/listings/{lookup_id}", request_body = Object,
    params(("lookup_id" = String, Path, description = "hex lookup_id")),
    responses((status = 200, body = ListingResponse), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn delete_listing(
    State(s): State<AppState>,
    ip: ClientIp,
    Path(lookup_id): Path<String>,
    body: Bytes,
) -> Response {
    finish("remove", delete_inner(&s, ip.0, &lookup_id, &body).await)
}

async fn delete_inner(
    s: &AppState,
    ip: IpAddr,
    lookup_id: &str,
    body: &[u8],
) -> Answer<ListingResponse> {
    check_path(lookup_id)?;
    limit(s, Kind::Publish, ip, 1)?;
    let doc = rdv_proto::canon::parse(body, rdv_directory_client::listing::REMOVE_MAX_BYTES)
        .map_err(|e| listing_refusal(e.into()))?;
    let now = s.now();
    let r = Removal::verify(&doc, now).map_err(listing_refusal)?;
    if r.lookup_id != lookup_id {
        return Err(Refusal::bad(
            "lookup_id_mismatch",
            "the document is for another lookup_id",
        ));
    }
    let out = s
        .inner
        .store
        .remove(&r, now.unix_timestamp())
        .await
        .map_err(Refusal::internal)?;
    tracing::info!(outcome = ?out, "remove");
    match out {
        RemoveOutcome::Removed { claims } => Ok(Json(ListingResponse {
            status: "removed".into(),
            claims,
        })),
        RemoveOutcome::Absent { claims } => Ok(Json(ListingResponse {
            status: "absent".into(),
            claims,
        })),
        RemoveOutcome::Stale => Err(Refusal::new(
            StatusCode::CONFLICT,
            "stale",
            "the held listing is newer than this removal",
        )),
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Rendezvous discovery directory",
        description = "SPEC §4.5: RFC 9497 VOPRF (P256-SHA256) blinded lookups of sealed, signed listings. See docs/directory-protocol.md."
    ),
    paths(keys, info, evaluate, lookup, put_listing, delete_listing),
    components(schemas(
        KeysResponse,
        rdv_directory_client::wire::KeyInfo,
        EvaluateRequest,
        EvaluateResponse,
        LookupRequest,
        LookupResponse,
        Bucket,
        ListingResponse,
        InfoResponse,
        ErrorBody
    ))
)]
pub struct ApiDoc;

async fn openapi() -> Response {
    Json(ApiDoc::openapi()).into_response()
}

async fn healthz(State(s): State<AppState>) -> Response {
    match s.inner.store.stats().await {
        Ok(_) if !s.keys().usable(s.now()).is_empty() => (StatusCode::OK, "ok\n").into_response(),
        Ok(_) => Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_usable_key",
            "no usable key",
        )
        .into_response(),
        Err(_) => Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "database unavailable",
        )
        .into_response(),
    }
}

async fn metrics_text(State(s): State<AppState>, _h: HeaderMap) -> Response {
    match &s.inner.metrics {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "metrics recorder unavailable",
        )
        .into_response(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A decoy is what a stored listing looks like on the wire: canonical
    /// JSON with a listing's members, its lookup_id under the prefix, a
    /// one-block sealed card; and two decoys share no random field.
    #[test]
    fn decoys_are_shaped_like_listings() {
        let now = rdv_proto::time::parse_time("t", "2026-10-08T00:00:00Z").unwrap();
        let key_id = "a".repeat(64);
        let mut rng = DecoyRng::new(2);
        let (d1, d2) = (
            decoy(&key_id, "3f", now, &mut rng),
            decoy(&key_id, "3f", now, &mut rng),
        );
        for d in [&d1, &d2] {
            let v = rdv_proto::canon::parse_str(d, DIR_LISTING_MAX_BYTES).unwrap();
            assert_eq!(&rdv_proto::canon::to_string(&v).unwrap(), d, "canonical");
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                [
                    "agent",
                    "expires",
                    "key_id",
                    "lookup_id",
                    "sealed",
                    "sig",
                    "type",
                    "updated",
                    "v"
                ]
            );
            let lookup_id = v["lookup_id"].as_str().unwrap();
            assert!(is_hash(lookup_id) && lookup_id.starts_with("3f"));
            let sealed = base64_decode(v["sealed"].as_str().unwrap()).unwrap();
            assert_eq!(sealed.len(), SEALED_MIN_RAW);
            assert!(Listing::parse_signed(&v).is_err(), "a decoy never verifies");
        }
        let (v1, v2): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(&d1).unwrap(),
            serde_json::from_str(&d2).unwrap(),
        );
        for f in ["agent", "lookup_id", "sealed", "sig"] {
            assert_ne!(v1[f], v2[f], "{f} repeated");
        }
    }
}
