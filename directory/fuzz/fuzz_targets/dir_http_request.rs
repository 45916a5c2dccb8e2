//! The directory's HTTP API (`http::app`, docs/directory.md,
//! docs/directory-protocol.md) driven with one request per input through
//! `tower::ServiceExt::oneshot`: routing and methods, the body limit,
//! CORS, the client address (peer or proxy header), rate limits, and every
//! route: `GET /v1/keys`, `/v1/info`, `/v1/openapi.json`, `/healthz`,
//! `/metrics`, `POST /v1/evaluate` (blinded elements, batches, the fast
//! batch evaluation), `POST /v1/lookup` (buckets, decoys, padding), `PUT`
//! and `DELETE /v1/listings/{lookup_id}` (signed listings and removals,
//! claims, replays). Two app states on one in-memory SQLite store, built
//! once on one current-thread runtime with a manual clock at
//! 2026-10-08T00:00:00Z and a key ring of three keys (`K` usable, `N`
//! usable and newer, `X` ended): an open one (limits out of reach, buckets
//! of 2 hex digits padded to 4) and a strict one (the client address from
//! `X-Forwarded-For`, limits of a few requests, a 4 KiB body limit, one
//! CORS origin, buckets of 1 digit).
//!
//! Input: a flags byte, then `<target>\n<Name: value>\n...\n\n<body>`.
//! Flags: bits 0-2 the method (GET PUT POST DELETE HEAD OPTIONS PATCH
//! GET), bit 3 the state (open or strict), bit 4 re-signs the body as one
//! of four agents (bits 5-6) after setting its `agent`, so a fuzzed
//! listing or removal gets past its signature; bit 7 makes the TCP peer
//! IPv6 instead of IPv4. In the target and body, `\x01` + a letter expands
//! to a fixture: `K` `N` `X` the key ids, `B` a real blinded element
//! (base64), `I` the lookup_id of a real listing under `K`, `P` / `p` its
//! bucket prefix of 2 / 1 digits, `L` that listing (signed, with a sealed
//! card claiming the address), `R` its removal, `S` its sealed card, `A`
//! the first agent's id. The target gets a leading `/` if it has none;
//! bytes a URI cannot hold are percent-encoded. Header lines that are not a
//! valid name and value are skipped.
//!
//! Bounds: at most `MAX_HEADERS` headers; every `RESET_EVERY` inputs the
//! store is emptied and both states are built again (fresh rate limits).
//!
//! Checked: no panic; a response (never a service error) with a status in
//! 100-599; every refusal (4xx, 5xx) but a HEAD's carries the uniform JSON
//! body `{error, message}` (two strings, nothing else), and a 429 a
//! `Retry-After` of at least 1 second; a 200 from `/v1/keys`, `/v1/info`,
//! `/v1/evaluate`, `/v1/lookup` or `/v1/listings/…` is that route's body
//! (wire types, strict): keys are the usable ones, an evaluation has one
//! 33-byte element per blinded one and a 64-byte proof under a usable key,
//! a lookup answers each bucket asked with a multiple of `pad_to` entries
//! (at least one), each under its prefix, and a listing answer's status is
//! one the API names. Run with `scripts/fuzz 120 dir_http_request`.
#![no_main]

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri};
use libfuzzer_sys::fuzz_target;
use rand_core::{CryptoRng, RngCore};
use rdv_directory::clock::ManualClock;
use rdv_directory::config::{Bucket, Config, Limits};
use rdv_directory::http::{AppState, app};
use rdv_directory::keys::{KeyEntry, KeyFile, KeyRing};
use rdv_directory::store::Store;
use rdv_directory_client::listing::Removal;
use rdv_directory_client::lookup::{Derived, oprf_input};
use rdv_directory_client::oprf::{self, ServerKey};
use rdv_directory_client::wire::{
    ErrorBody, EvaluateRequest, EvaluateResponse, InfoResponse, KeysResponse, ListingResponse,
    LookupRequest, LookupResponse,
};
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::doc::resign;
use rdv_proto::encoding::{base64, base64_decode};
use rdv_proto::time::{Instant, parse_time};
use rdv_proto::{Address, AgentKey, canon};
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tower::ServiceExt as _;

const MAX_HEADERS: usize = 16;
const MAX_RESPONSE: usize = 16 << 20;
const RESET_EVERY: u64 = 256;
const METHODS: [Method; 8] = [
    Method::GET,
    Method::PUT,
    Method::POST,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
    Method::PATCH,
    Method::GET,
];
/// The key secrets: usable, ended, usable and newer.
const SECRETS: [[u8; 32]; 3] = [[0x11; 32], [0x12; 32], [0x13; 32]];

fn t(s: &str) -> Instant {
    parse_time("t", s).expect("a fixed time")
}

/// SplitMix64: deterministic fixtures.
struct Mix(u64);

impl RngCore for Mix {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        rand_core::impls::fill_bytes_via_next(self, dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoRng for Mix {}

/// What the `\x01` expansions stand for, and the agents that re-sign.
struct Fixtures {
    key_ids: [String; 3],
    blinded: String,
    lookup_id: String,
    listing: Vec<u8>,
    removal: Vec<u8>,
    sealed: String,
    agents: [AgentKey; 4],
}

static FX: LazyLock<Fixtures> = LazyLock::new(|| {
    let servers: Vec<ServerKey> = SECRETS
        .iter()
        .map(|s| ServerKey::from_secret(s).expect("a key"))
        .collect();
    let key_ids = [0, 1, 2].map(|i| servers[i].public().id());
    let agents = [1u8, 2, 3, 4].map(|i| AgentKey::from_seed([i; 32]));
    let address = Address::parse("alice@example.org").expect("an address");
    let b = oprf::blind_with_scalar(&oprf_input(&address), &[0x21; 32]).expect("a blind");
    let (evaluated, proof) = servers[0]
        .evaluate_batch(&[b.element.as_slice()], &mut Mix(1))
        .expect("an evaluation");
    let y = oprf::finalize_batch(
        std::slice::from_ref(&b),
        &[evaluated[0].as_slice()],
        &proof,
        servers[0].public(),
    )
    .expect("a verified evaluation")[0];
    let d = Derived::new(address.clone(), y);
    let mut cb = CardBuilder::new(
        t("2026-10-07T00:00:00Z"),
        vec!["wss://relay.example".into()],
    );
    cb.addresses = vec![address];
    let card = cb.sign(&agents[0]).expect("a card");
    let listing = d
        .listing(
            &agents[0],
            &card,
            &key_ids[0],
            t("2026-10-07T23:00:00Z"),
            t("2026-10-18T00:00:00Z"),
            &mut Mix(2),
        )
        .expect("a listing");
    let removal = Removal::sign(
        &agents[0],
        &key_ids[0],
        &d.lookup_id,
        t("2026-10-08T00:00:00Z"),
    )
    .expect("a removal");
    Fixtures {
        key_ids,
        blinded: base64(&b.element),
        lookup_id: d.lookup_id.clone(),
        sealed: listing["sealed"].as_str().unwrap_or_default().to_string(),
        listing: canon::to_vec(&listing).expect("canonical"),
        removal: canon::to_vec(&removal).expect("canonical"),
        agents,
    }
});

fn expand(raw: &[u8]) -> Vec<u8> {
    let fx = &*FX;
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == 1
            && let Some(&c) = raw.get(i + 1)
        {
            let rep: Option<&[u8]> = match c {
                b'K' => Some(fx.key_ids[0].as_bytes()),
                b'X' => Some(fx.key_ids[1].as_bytes()),
                b'N' => Some(fx.key_ids[2].as_bytes()),
                b'B' => Some(fx.blinded.as_bytes()),
                b'I' => Some(fx.lookup_id.as_bytes()),
                b'P' => Some(&fx.lookup_id.as_bytes()[..2]),
                b'p' => Some(&fx.lookup_id.as_bytes()[..1]),
                b'L' => Some(&fx.listing),
                b'R' => Some(&fx.removal),
                b'S' => Some(fx.sealed.as_bytes()),
                b'A' => Some(fx.agents[0].id().as_str().as_bytes()),
                _ => None,
            };
            if let Some(r) = rep {
                out.extend_from_slice(r);
                i += 2;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

fn key_file() -> KeyFile {
    let e = |s: &[u8; 32], nb: &str, na: Option<&str>| KeyEntry {
        secret: hex::encode(s),
        not_before: nb.into(),
        not_after: na.map(String::from),
    };
    KeyFile {
        keys: vec![
            e(&SECRETS[0], "2026-10-01T00:00:00Z", None),
            e(
                &SECRETS[1],
                "2026-09-01T00:00:00Z",
                Some("2026-10-01T00:00:00Z"),
            ),
            e(&SECRETS[2], "2026-10-07T00:00:00Z", None),
        ],
    }
}

fn open_config() -> Config {
    let wide = Bucket {
        burst: u32::MAX,
        per_day: u32::MAX,
    };
    Config {
        bucket_hex_len: 2,
        pad_to: 4,
        max_per_bucket: 16,
        max_batch: 16,
        max_buckets: 8,
        max_claims_per_lookup_id: 3,
        max_listings_per_agent: 4,
        limits: Limits {
            evaluate: wide,
            lookup: wide,
            publish: wide,
            global_evaluate_per_sec: u32::MAX,
        },
        ..Config::default()
    }
}

fn strict_config() -> Config {
    let b = |burst| Bucket { burst, per_day: 1 };
    Config {
        bucket_hex_len: 1,
        pad_to: 1,
        max_per_bucket: 2,
        max_batch: 4,
        max_buckets: 2,
        max_claims_per_lookup_id: 2,
        max_listings_per_agent: 2,
        max_body_bytes: 4096,
        cors_origins: vec!["https://app.example".into()],
        client_ip_header: Some("x-forwarded-for".into()),
        limits: Limits {
            evaluate: b(4),
            lookup: b(3),
            publish: b(3),
            global_evaluate_per_sec: 6,
        },
        ..Config::default()
    }
}

struct Ctx {
    rt: Runtime,
    clock: Arc<ManualClock>,
    ring: KeyRing,
    store: Mutex<Store>,
    /// [open, strict]
    apps: Mutex<[Router; 2]>,
    runs: AtomicU64,
}

static CTX: OnceLock<Ctx> = OnceLock::new();

async fn fresh_store() -> Store {
    Store::connect("sqlite::memory:", 1)
        .await
        .expect("an in-memory store")
}

fn apps(ring: &KeyRing, store: &Store, clock: &Arc<ManualClock>) -> [Router; 2] {
    [open_config(), strict_config()].map(|cfg| {
        assert!(cfg.check().is_ok(), "a valid configuration");
        app(AppState::new(
            cfg,
            ring.clone(),
            store.clone(),
            clock.clone(),
        ))
    })
}

fn ctx() -> &'static Ctx {
    CTX.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let clock = Arc::new(ManualClock::new(t("2026-10-08T00:00:00Z")));
        let ring = KeyRing::from_file(&key_file(), "fuzz").expect("a key ring");
        let store = rt.block_on(fresh_store());
        let apps = apps(&ring, &store, &clock);
        LazyLock::force(&FX);
        Ctx {
            rt,
            clock,
            ring,
            store: Mutex::new(store),
            apps: Mutex::new(apps),
            runs: AtomicU64::new(0),
        }
    })
}

/// The target as a URI: a leading `/`, and what a URI cannot hold
/// percent-encoded.
fn uri_of(target: &[u8]) -> Option<Uri> {
    let mut s = String::with_capacity(target.len() + 1);
    if target.first() != Some(&b'/') {
        s.push('/');
    }
    for &b in target {
        if b.is_ascii_graphic() && b != b'#' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s.parse().ok()
}

/// The body as a listing or removal of agent `who`, signed by them.
fn resigned(body: &[u8], who: usize) -> Option<Vec<u8>> {
    let mut doc = canon::parse(body, 1 << 16).ok()?;
    let key = &FX.agents[who];
    doc.as_object_mut()?
        .insert("agent".into(), json!(key.id().as_str()));
    canon::to_vec(&resign(&doc, key).ok()?).ok()
}

fn build(raw: &[u8]) -> Option<Request<Body>> {
    let (&flags, rest) = raw.split_first()?;
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&rest[..i], &rest[i + 2..]),
        None => (rest, &[][..]),
    };
    let mut lines = head.split(|&b| b == b'\n');
    let target = expand(lines.next().unwrap_or_default());
    let uri = uri_of(&target)?;
    let mut body = expand(body);
    if flags & 0x10 != 0 {
        body = resigned(&body, usize::from(flags >> 5 & 3))?;
    }
    let mut req = Request::new(Body::from(body));
    *req.method_mut() = METHODS[usize::from(flags & 7)].clone();
    *req.uri_mut() = uri;
    let headers = req.headers_mut();
    for line in lines.take(MAX_HEADERS) {
        let Some(i) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let value = &line[i + 1..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&line[..i]),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
    let peer: IpAddr = if flags & 0x80 != 0 {
        IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1])
    } else {
        IpAddr::from([192, 0, 2, 1])
    };
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(peer, 40000)));
    Some(req)
}

/// A 200's body is its route's (strict wire types).
fn check_ok(c: &Ctx, strict: bool, method: &Method, path: &str, req: &[u8], body: &[u8]) {
    let cfg = if strict {
        strict_config()
    } else {
        open_config()
    };
    let now = c.clock_now();
    let usable: Vec<String> = c.ring.usable(now).iter().map(|k| k.id.clone()).collect();
    match (method.as_str(), path) {
        ("GET", "/v1/keys") => {
            let r: KeysResponse = serde_json::from_slice(body).expect("a keys answer");
            let ids: Vec<String> = r.keys.iter().map(|k| k.id.clone()).collect();
            assert_eq!(ids, usable, "keys listed are the usable ones");
        }
        ("GET", "/v1/info") => {
            let r: InfoResponse = serde_json::from_slice(body).expect("an info answer");
            assert_eq!(r.bucket_hex_len, cfg.bucket_hex_len);
        }
        ("POST", "/v1/evaluate") => {
            let r: EvaluateResponse = serde_json::from_slice(body).expect("an evaluation");
            let q: EvaluateRequest = serde_json::from_slice(req).expect("an accepted request");
            assert_eq!(r.key_id, q.key_id);
            assert!(
                usable.contains(&r.key_id),
                "evaluated under an unusable key"
            );
            assert_eq!(
                r.evaluated.len(),
                q.blinded.len(),
                "one element per element"
            );
            for e in &r.evaluated {
                assert_eq!(base64_decode(e).map(|b| b.len()), Ok(33));
            }
            assert_eq!(base64_decode(&r.proof).map(|b| b.len()), Ok(64));
        }
        ("POST", "/v1/lookup") => {
            let r: LookupResponse = serde_json::from_slice(body).expect("a lookup answer");
            let q: LookupRequest = serde_json::from_slice(req).expect("an accepted request");
            assert_eq!(r.key_id, q.key_id);
            assert!(
                usable.contains(&r.key_id),
                "looked up under an unusable key"
            );
            let asked: Vec<&str> = q.buckets.iter().map(String::as_str).collect();
            let got: Vec<&str> = r.buckets.iter().map(|b| b.prefix.as_str()).collect();
            assert_eq!(got, asked, "one bucket per prefix, in order");
            for b in &r.buckets {
                let n = b.listings.len();
                assert!(n > 0 && n % cfg.pad_to as usize == 0, "{n} entries");
                assert!(
                    n <= (cfg.max_per_bucket as usize).div_ceil(cfg.pad_to as usize)
                        * cfg.pad_to as usize
                );
                for l in &b.listings {
                    let id = l.get("lookup_id").and_then(Value::as_str).unwrap_or("");
                    assert!(id.starts_with(&b.prefix), "{id} outside {}", b.prefix);
                    assert_eq!(
                        l.get("key_id").and_then(Value::as_str),
                        Some(r.key_id.as_str())
                    );
                }
            }
        }
        ("PUT" | "DELETE", p) if p.starts_with("/v1/listings/") => {
            let r: ListingResponse = serde_json::from_slice(body).expect("a listing answer");
            let names: &[&str] = if method == Method::PUT {
                &["stored", "replaced"]
            } else {
                &["removed", "absent"]
            };
            assert!(names.contains(&r.status.as_str()), "status {}", r.status);
            if r.status == "stored" || r.status == "replaced" {
                // The store is shared: the larger of the two states' bounds.
                let most = open_config()
                    .max_claims_per_lookup_id
                    .max(strict_config().max_claims_per_lookup_id);
                assert!(
                    r.claims >= 1 && r.claims <= u64::from(most),
                    "{} claims",
                    r.claims
                );
            }
        }
        _ => {}
    }
}

impl Ctx {
    fn clock_now(&self) -> time::OffsetDateTime {
        use rdv_directory::clock::Clock;
        self.clock.now()
    }
}

fuzz_target!(|raw: &[u8]| {
    let c = ctx();
    let Some(req) = build(raw) else {
        return;
    };
    let strict = raw[0] & 8 != 0;
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let app = c.apps.lock().unwrap_or_else(|p| p.into_inner())[usize::from(strict)].clone();
    // The body as sent, to compare an answer with its request.
    let (parts, body) = req.into_parts();
    let sent =
        c.rt.block_on(axum::body::to_bytes(body, usize::MAX))
            .unwrap_or_default();
    let req = Request::from_parts(parts, Body::from(sent.clone()));
    c.rt.block_on(async {
        let resp = match app.oneshot(req).await {
            Ok(r) => r,
            Err(e) => match e {},
        };
        let status = resp.status().as_u16();
        assert!((100..600).contains(&status), "status {status}");
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let got = axum::body::to_bytes(resp.into_body(), MAX_RESPONSE)
            .await
            .expect("a bounded answer");
        if status >= 400 && method != Method::HEAD {
            let v: Value = serde_json::from_slice(&got).expect("a refusal's JSON body");
            let _: ErrorBody = serde_json::from_value(v.clone()).expect("{error, message}");
            assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{v}");
        }
        if status == 429 {
            let secs: u64 = retry_after
                .as_deref()
                .and_then(|s| s.parse().ok())
                .expect("a 429 says when to retry");
            assert!(secs >= 1);
        }
        if status == 200 && method != Method::HEAD {
            check_ok(c, strict, &method, &path, &sent, &got);
        }
    });
    let n = c.runs.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_multiple_of(RESET_EVERY) {
        // Empty the store (a fresh one if the pool lost its in-memory
        // database) and start over with fresh rate limits.
        let mut store = c.store.lock().unwrap_or_else(|p| p.into_inner());
        c.rt.block_on(async {
            if store.purge(i64::MAX / 2, &[]).await.is_err() {
                *store = fresh_store().await;
            }
        });
        *c.apps.lock().unwrap_or_else(|p| p.into_inner()) = apps(&c.ring, &store, &c.clock);
    }
});
