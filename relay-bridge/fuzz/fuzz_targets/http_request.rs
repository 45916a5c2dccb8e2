//! The ntfy-compatible HTTP API (`http::app`, docs/relay-bridge.md) driven
//! with one request per input through `tower::ServiceExt::oneshot`: routing,
//! path and query extraction, the token forms (`Authorization`, `?auth=`),
//! the ACL, publish headers and query aliases (`X-Title`, `X-Priority`,
//! `X-Tags`, `X-Cache`, ...), the JSON publish form, subscription admission
//! (`since=`, filters, `poll=1`), the WebSocket upgrade, the rate limiter
//! and `X-Forwarded-For`. Two app states, built once on one current-thread
//! runtime: an open bridge with an in-memory SQLite cache, and a read-only
//! bridge without cache, behind a proxy, with two tokens
//! (`tk_writer` writes `up*`, `tk_reader` reads everything).
//! Run with `scripts/fuzz 120 http_request`.
//!
//! Input: a flags byte, then `<target>\n<Name: value>\n...\n\n<body>`.
//! Flags: bits 0-2 the method (GET PUT POST HEAD DELETE OPTIONS PATCH
//! GET), bit 3 the state (cache/open or no cache/read-only), bit 4
//! prepends `poll=1` to the query, bit 5 adds the WebSocket upgrade
//! headers and an (unusable) upgrade handle so `/ws` reaches admission.
//! The target gets a leading `/` if it has none; bytes a URI cannot hold
//! are percent-encoded (`%` is kept, so bad escapes stay in reach). Header
//! lines that are not a valid name and value are skipped.
//!
//! Bounds: at most `MAX_HEADERS` headers; a response body is read for at
//! most `MAX_BODY` bytes, each frame waited for at most `FRAME_WAIT`, so a
//! live subscription (no `poll=1`) ends the iteration too; every
//! `PRUNE_EVERY` inputs the clock moves past the cache duration and the
//! cache is pruned, so it holds few messages.
//!
//! Checked: no panic; a response (never a service error) with a status in
//! 100-599; a refusal (4xx) carries ntfy's JSON error body when the bridge
//! wrote it.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::BodyExt as _;
use libfuzzer_sys::fuzz_target;
use rdv_relay_bridge::auth::Auth;
use rdv_relay_bridge::config::{AuthConfig, DefaultAccess, LimitsConfig, TokenConfig};
use rdv_relay_bridge::http::{AppState, app};
use rdv_relay_bridge::hub::{Hub, HubOptions};
use rdv_relay_bridge::limits::Limits;
use rdv_relay_bridge::message::{Clock as _, ManualClock};
use rdv_relay_bridge::store::Store;
use tokio::runtime::Runtime;
use tower::ServiceExt as _;

const MAX_HEADERS: usize = 16;
const MAX_BODY: usize = 8 * 1024;
const FRAME_WAIT: Duration = Duration::from_millis(5);
const PRUNE_EVERY: u64 = 64;
const CACHE_SECS: i64 = 3600;
/// The corpus clock (as the probe gateway's): 2026-10-08.
const NOW_SECS: i64 = 1_791_460_800;
const METHODS: [Method; 8] = [
    Method::GET,
    Method::PUT,
    Method::POST,
    Method::HEAD,
    Method::DELETE,
    Method::OPTIONS,
    Method::PATCH,
    Method::GET,
];

struct Ctx {
    rt: Runtime,
    clock: Arc<ManualClock>,
    store: Store,
    /// [cached and open, uncached and read-only behind a proxy]
    apps: [Router; 2],
    cached: Arc<Hub>,
    limits: [Arc<Limits>; 2],
    runs: AtomicU64,
}

static CTX: OnceLock<Ctx> = OnceLock::new();

fn limits_config() -> LimitsConfig {
    LimitsConfig {
        // Small bodies keep the cache and each iteration small; the size
        // refusal is in reach.
        message_size_limit: 4096,
        request_burst: u32::MAX,
        request_replenish_ms: 1,
        global_requests_per_sec: u32::MAX,
        global_burst: u32::MAX,
        bytes_per_day: u64::MAX,
        ..LimitsConfig::default()
    }
}

fn ctx() -> &'static Ctx {
    CTX.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let clock = Arc::new(ManualClock::new(rdv_relay_bridge::message::unix_us(
            NOW_SECS * 1_000_000,
        )));
        let (store, apps, limits, cached) = rt.block_on(async {
            let store = Store::open("sqlite::memory:")
                .await
                .expect("an in-memory cache");
            let opts = |cache_secs| HubOptions {
                cache_secs,
                broadcast_capacity: 64,
                keepalive: Duration::from_secs(1),
                write_timeout: Duration::from_secs(1),
                queue_bytes: 1 << 20,
                queue_messages: 1024,
            };
            let open = Auth::new(&AuthConfig::default());
            let read_only = Auth::new(&AuthConfig {
                default_access: DefaultAccess::ReadOnly,
                tokens: vec![
                    TokenConfig {
                        token: "tk_writer".into(),
                        read: vec!["up*".into()],
                        write: vec!["up*".into()],
                    },
                    TokenConfig {
                        token: "tk_reader".into(),
                        read: vec!["*".into()],
                        write: vec![],
                    },
                ],
            });
            let l0 = Limits::new(limits_config(), clock.clone());
            let l1 = Limits::new(limits_config(), clock.clone());
            let cached = Hub::new(Some(store.clone()), opts(CACHE_SECS), clock.clone());
            let s0 = AppState {
                hub: cached.clone(),
                limits: l0.clone(),
                auth: Arc::new(open),
                behind_proxy: false,
                broker: None,
            };
            let s1 = AppState {
                hub: Hub::new(None, opts(0), clock.clone()),
                limits: l1.clone(),
                auth: Arc::new(read_only),
                behind_proxy: true,
                broker: None,
            };
            (store, [app(s0), app(s1)], [l0, l1], cached)
        });
        Ctx {
            rt,
            clock,
            store,
            apps,
            cached,
            limits,
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

fn build(raw: &[u8]) -> Option<Request<Body>> {
    let (&flags, rest) = raw.split_first()?;
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&rest[..i], &rest[i + 2..]),
        None => (rest, &[][..]),
    };
    let mut lines = head.split(|&b| b == b'\n');
    let target = lines.next().unwrap_or_default();
    let mut uri = uri_of(target)?;
    if flags & 0x10 != 0 {
        let pq = uri.path_and_query().map_or("/", |p| p.as_str());
        let with_poll = match pq.split_once('?') {
            Some((p, q)) => format!("{p}?poll=1&{q}"),
            None => format!("{pq}?poll=1"),
        };
        uri = with_poll.parse().ok()?;
    }
    let mut req = Request::new(Body::from(body.to_vec()));
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
    if flags & 0x20 != 0 {
        for (n, v) in [
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ] {
            headers.insert(n, HeaderValue::from_static(v));
        }
        // No connection to upgrade: the handle fails at once, after the
        // handler has admitted (or refused) the subscription.
        let on = hyper::upgrade::on(&mut req);
        req.extensions_mut().insert(on);
    }
    Some(req)
}

fuzz_target!(|raw: &[u8]| {
    let Some(req) = build(raw) else {
        return;
    };
    let c = ctx();
    let which = usize::from(raw[0] >> 3 & 1);
    let head = req.method() == Method::HEAD;
    let app = c.apps[which].clone();
    c.rt.block_on(async {
        let resp = match app.oneshot(req).await {
            Ok(r) => r,
            Err(e) => match e {},
        };
        let status = resp.status().as_u16();
        assert!((100..600).contains(&status), "status {status}");
        let json_error = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let mut body = resp.into_body();
        let mut got = Vec::new();
        while got.len() < MAX_BODY {
            match tokio::time::timeout(FRAME_WAIT, body.frame()).await {
                Ok(Some(Ok(f))) => {
                    if let Some(d) = f.data_ref() {
                        got.extend_from_slice(d);
                    }
                }
                // The end, a body error (a refused read), or a live stream
                // with nothing more to say.
                Ok(Some(Err(_))) | Ok(None) | Err(_) => break,
            }
        }
        drop(body);
        if (400..500).contains(&status) && json_error && !head && got.len() < MAX_BODY {
            let v: serde_json::Value = serde_json::from_slice(&got).expect("a refusal's JSON body");
            assert_eq!(v["http"], status, "{v}");
        }
        // Let dropped subscriptions and the cache writer finish.
        tokio::task::yield_now().await;
    });
    let n = c.runs.fetch_add(1, Ordering::Relaxed) + 1;
    if n % PRUNE_EVERY == 0 {
        c.clock
            .set(c.clock.now() + Duration::from_secs((CACHE_SECS + 1) as u64));
        c.rt.block_on(async {
            c.cached.flush().await;
            let now = c.clock.now().unix_timestamp();
            let _ = c.store.prune(now).await;
        });
        for l in &c.limits {
            l.housekeeping();
        }
    }
});
