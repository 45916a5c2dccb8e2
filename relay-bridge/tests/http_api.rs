//! The ntfy-compatible HTTP API, driven by curl recipes from ntfy's
//! documentation and the Python SSE / NDJSON / WebSocket client.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::sync::Arc;

use base64::Engine as _;
use common::{Backend, Bridge, Proc, curl, curl_json, lines, tool};
use rdv_relay_bridge::config::DefaultAccess;
use rdv_relay_bridge::config::TokenConfig;
use rdv_relay_bridge::message::{Clock, SystemClock, UnixTime as _};

fn poll(b: &Bridge, path_and_query: &str) -> Vec<serde_json::Value> {
    let (code, body) = curl(&[&format!("{}/{path_and_query}", b.http())]);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    lines(&body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_forms_and_message_json() {
    let b = Bridge::start(Backend::Sqlite, |_| {}).await;
    let h = b.http();
    // ntfy docs: curl -d "Backup successful 😀" ntfy.sh/mytopic
    let (c, m) = curl_json(&["-d", "Backup successful 😀", &format!("{h}/mytopic")]);
    assert_eq!(c, 200);
    assert_eq!(m["event"], "message");
    assert_eq!(m["topic"], "mytopic");
    assert_eq!(m["message"], "Backup successful 😀");
    assert_eq!(m["id"].as_str().unwrap().len(), 12);
    assert_eq!(
        m["expires"].as_i64().unwrap(),
        m["time"].as_i64().unwrap() + 12 * 3600
    );
    // ntfy docs: headers and their aliases.
    let (c, m) = curl_json(&[
        "-H",
        "Title: Unauthorized access detected",
        "-H",
        "Priority: urgent",
        "-H",
        "Tags: warning,skull",
        "-H",
        "X-Click: https://example.com",
        "-d",
        "Remote access detected.",
        &format!("{h}/mytopic"),
    ]);
    assert_eq!(c, 200);
    assert_eq!(m["title"], "Unauthorized access detected");
    assert_eq!(m["priority"], 5);
    assert_eq!(m["tags"], serde_json::json!(["warning", "skull"]));
    assert_eq!(m["click"], "https://example.com");
    let (c, m) = curl_json(&[
        "-X",
        "PUT",
        "-H",
        "X-Priority: 2",
        "-H",
        "ta: a",
        "-T",
        "-",
        &format!("{h}/mytopic"),
    ]);
    assert_eq!(
        (c, m["priority"].as_i64(), m["message"].as_str()),
        (200, Some(2), Some("triggered"))
    );
    // GET /<topic>/publish with query parameters.
    let (c, m) = curl_json(&[&format!(
        "{h}/mytopic/publish?message=hi+there&title=T&priority=high&tags=x"
    )]);
    assert_eq!(c, 200);
    assert_eq!(
        (
            m["message"].as_str(),
            m["title"].as_str(),
            m["priority"].as_i64()
        ),
        (Some("hi there"), Some("T"), Some(4))
    );
    // JSON publish: POST / with a JSON body.
    let (c, m) = curl_json(&[
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"topic":"mytopic","message":"json body","title":"J","tags":["t1"],"priority":4,"actions":[]}"#,
        &format!("{h}/"),
    ]);
    assert_eq!(c, 200, "{m}");
    assert_eq!(
        (m["message"].as_str(), m["priority"].as_i64()),
        (Some("json body"), Some(4))
    );
    let all = poll(&b, "mytopic/json?poll=1");
    assert_eq!(all.len(), 5);
    assert!(
        all.iter()
            .all(|m| m["event"] == "message" && m["topic"] == "mytopic")
    );
    assert_eq!(all[4]["message"], "json body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_bad_input() {
    let b = Bridge::start(Backend::Sqlite, |_| {}).await;
    let h = b.http();
    for bad in ["a.b", "docs", "v1", &"x".repeat(65), "%C3%A9"] {
        let (c, m) = curl_json(&["-d", "x", &format!("{h}/{bad}")]);
        assert_eq!(c, 400, "{bad}: {m}");
        assert!(m["error"].is_string());
    }
    let (c, _) = curl(&[&format!("{h}/ok,a.b/json?poll=1")]);
    assert_eq!(c, 400);
    // Oversize: the limit holds exactly.
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().join("at");
    let over = dir.path().join("over");
    std::fs::write(&at, vec![b'a'; 65536]).unwrap();
    std::fs::write(&over, vec![b'a'; 65537]).unwrap();
    let (c, _) = curl(&["-T", at.to_str().unwrap(), &format!("{h}/big")]);
    assert_eq!(c, 200);
    let (c, m) = curl_json(&["-T", over.to_str().unwrap(), &format!("{h}/big")]);
    assert_eq!(c, 413, "{m}");
    // Malformed JSON publishes.
    for body in [
        r#"{"topic":"t","message":"#,
        r#"{"message":"no topic"}"#,
        r#"{"topic":5}"#,
        r#"{"topic":"t","priority":9}"#,
        "[]",
    ] {
        let (c, m) = curl_json(&[
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
            &format!("{h}/"),
        ]);
        assert_eq!(c, 400, "{body}: {m}");
    }
    let (c, _) = curl(&["-H", "Priority: 7", "-d", "x", &format!("{h}/t")]);
    assert_eq!(c, 400);
    let (c, _) = curl(&[&format!("{h}/t/json?poll=1&since=a-b")]);
    assert_eq!(c, 400);
    assert_eq!(poll(&b, "big/json?poll=1").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_bodies_are_base64_byte_for_byte() {
    let b = Bridge::start(Backend::Sqlite, |_| {}).await;
    let h = b.http();
    // A 45 KB sealed envelope's worth of binary.
    let body: Vec<u8> = (0..45_000u32).map(|i| (i * 31 % 256) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bin");
    std::fs::write(&f, &body).unwrap();
    let (c, m) = curl_json(&["-T", f.to_str().unwrap(), &format!("{h}/bin")]);
    assert_eq!(c, 200);
    assert_eq!(m["encoding"], "base64");
    let got = poll(&b, "bin/json?poll=1");
    let dec = base64::engine::general_purpose::STANDARD
        .decode(got[0]["message"].as_str().unwrap())
        .unwrap();
    assert!(dec == body, "payload differs");
}

async fn since_over_http(backend: Backend) {
    let b = Bridge::start(backend, |_| {}).await;
    let h = b.http();
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, m) = curl_json(&["-d", &format!("m{i}"), &format!("{h}/catchup")]);
        ids.push(m["id"].as_str().unwrap().to_owned());
    }
    let msgs = |q: &str| {
        poll(&b, &format!("catchup/json?poll=1&{q}"))
            .iter()
            .map(|m| m["message"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(msgs("since=all"), ["m0", "m1", "m2"]);
    assert_eq!(msgs(""), ["m0", "m1", "m2"], "poll defaults to since=all");
    assert_eq!(msgs("since=latest"), ["m2"]);
    assert_eq!(msgs(&format!("since={}", ids[0])), ["m1", "m2"]);
    assert_eq!(msgs("since=10m"), ["m0", "m1", "m2"]);
    assert_eq!(msgs("since=none"), Vec::<String>::new());
    let future = SystemClock.now_secs() + 3600;
    assert_eq!(msgs(&format!("since={future}")), Vec::<String>::new());
    let (_, m) = curl_json(&[
        "-H",
        "X-Cache: no",
        "-d",
        "uncached",
        &format!("{h}/catchup"),
    ]);
    assert!(m.get("expires").is_none());
    assert_eq!(msgs("since=all").len(), 3, "X-Cache: no is not cached");
    // Catch-up after a disconnect: a live SSE subscriber, then since=<last id>.
    let mut p = Proc::py(&["sse", &format!("{h}/catchup/sse"), "--count", "1"]);
    p.until("OPEN");
    curl(&["-d", "live", &format!("{h}/catchup")]);
    let m: serde_json::Value = serde_json::from_str(&p.until("MSG")).unwrap();
    assert_eq!(m["message"], "live");
    p.finish();
    curl(&["-d", "while-away", &format!("{h}/catchup")]);
    let p = Proc::py(&[
        "json",
        &format!("{h}/catchup/json?since={}", m["id"].as_str().unwrap()),
        "--count",
        "1",
    ]);
    p.until("OPEN");
    let m2: serde_json::Value = serde_json::from_str(&p.until("MSG")).unwrap();
    assert_eq!(m2["message"], "while-away");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_over_http_sqlite() {
    since_over_http(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_over_http_postgres() {
    since_over_http(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters() {
    let b = Bridge::start(Backend::Sqlite, |_| {}).await;
    let h = b.http();
    curl(&[
        "-H",
        "Tags: a,b",
        "-H",
        "Priority: 4",
        "-H",
        "Title: x",
        "-d",
        "one",
        &format!("{h}/f"),
    ]);
    curl(&["-H", "Tags: b", "-d", "two", &format!("{h}/f")]);
    let (_, m) = curl_json(&["-d", "three", &format!("{h}/f")]);
    let msgs = |q: &str| {
        poll(&b, &format!("f/json?poll=1&{q}"))
            .iter()
            .map(|m| m["message"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(msgs("tags=b"), ["one", "two"]);
    assert_eq!(msgs("tags=a,b"), ["one"]);
    assert_eq!(msgs("priority=high"), ["one"]);
    assert_eq!(msgs("priority=3,4"), ["one", "two", "three"]);
    assert_eq!(msgs("message=two"), ["two"]);
    assert_eq!(msgs("title=x"), ["one"]);
    assert_eq!(
        msgs(&format!("id={}", m["id"].as_str().unwrap())),
        ["three"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subscription_style_gets_open_then_live_messages() {
    let b = Bridge::start(Backend::Sqlite, |_| {}).await;
    let h = b.http();
    let ws = h.replace("http://", "ws://");
    for (style, url) in [
        ("sse", format!("{h}/s1,s2/sse")),
        ("json", format!("{h}/s1,s2/json")),
        ("ws", format!("{ws}/s1,s2/ws")),
    ] {
        let mut p = Proc::py(&[style, &url, "--count", "2"]);
        p.until("OPEN");
        curl(&["-d", &format!("to s1 via {style}"), &format!("{h}/s1")]);
        curl(&["-d", "elsewhere", &format!("{h}/s3")]);
        curl(&["-d", &format!("to s2 via {style}"), &format!("{h}/s2")]);
        let (got, done) = p.finish();
        assert_eq!(done["count"], 2, "{style}");
        let msgs: Vec<serde_json::Value> = got
            .iter()
            .filter_map(|l| l.strip_prefix("MSG "))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(msgs[0]["message"], format!("to s1 via {style}"));
        assert_eq!(msgs[1]["topic"], "s2");
    }
    // raw: one line per message, the text alone.
    let raw = Proc::spawn(
        tool("curl"),
        &["-sN", "--max-time", "60", &format!("{h}/r/raw")],
    );
    assert_eq!(raw.line(), "", "raw writes an empty line for open");
    curl(&["-d", "line one\nline two", &format!("{h}/r")]);
    assert_eq!(raw.line(), "line one line two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_events() {
    let b = Bridge::start(Backend::Sqlite, |c| c.http.keepalive_secs = 1).await;
    let p = Proc::spawn(
        tool("curl"),
        &["-sN", "--max-time", "60", &format!("{}/k/json", b.http())],
    );
    let open: serde_json::Value = serde_json::from_str(&p.line()).unwrap();
    assert_eq!(
        (open["event"].as_str(), open["topic"].as_str()),
        (Some("open"), Some("k"))
    );
    let ka: serde_json::Value = serde_json::from_str(&p.line()).unwrap();
    assert_eq!(ka["event"], "keepalive");
    assert_eq!(ka["id"].as_str().unwrap().len(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ip_flood_is_limited_while_others_keep_working() {
    let b = Bridge::start(Backend::Sqlite, |c| {
        c.limits.request_burst = 5;
        c.limits.request_replenish_ms = 3_600_000;
    })
    .await;
    let h = b.http();
    let mut codes = Vec::new();
    for i in 0..20 {
        let out = std::process::Command::new(tool("curl"))
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-D",
                "-",
                "-d",
                &format!("{i}"),
                &format!("{h}/flood"),
            ])
            .output()
            .unwrap();
        let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
        let code: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        if code == 429 {
            let ra: u64 = head
                .lines()
                .find_map(|l| l.strip_prefix("retry-after:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(ra >= 1);
        }
        codes.push(code);
    }
    assert_eq!(codes.iter().filter(|&&c| c == 200).count(), 5);
    assert_eq!(codes.iter().filter(|&&c| c == 429).count(), 15);
    // Another visitor (127.0.0.2) is unaffected; health is never limited.
    let (c, _) = curl(&[
        "--interface",
        "127.0.0.2",
        "-d",
        "other",
        &format!("{h}/flood"),
    ]);
    assert_eq!(c, 200);
    let (c, _) = curl(&[&format!("{h}/healthz")]);
    assert_eq!(c, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_and_byte_limits() {
    let b = Bridge::start(Backend::Sqlite, |c| {
        c.limits.subscriptions_per_visitor = 2;
        c.limits.bytes_per_day = 100;
    })
    .await;
    let h = b.http();
    let s1 = Proc::spawn(
        tool("curl"),
        &["-sN", "--max-time", "60", &format!("{h}/a/json")],
    );
    let s2 = Proc::spawn(
        tool("curl"),
        &["-sN", "--max-time", "60", &format!("{h}/a/json")],
    );
    s1.line();
    s2.line();
    let (c, m) = curl_json(&[&format!("{h}/a/json")]);
    assert_eq!(c, 429, "{m}");
    let (c, _) = curl(&["-d", &"x".repeat(60), &format!("{h}/a")]);
    assert_eq!(c, 200);
    let (c, m) = curl_json(&["-d", &"x".repeat(60), &format!("{h}/a")]);
    assert_eq!(c, 429, "{m}");
    drop(s1);
    // The slot comes back once the bridge sees the client gone.
    let mut ok = false;
    for _ in 0..100 {
        let (c, _) = curl(&["--max-time", "1", &format!("{h}/a/json?poll=1")]);
        if c == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(ok, "subscription slot was not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_tokens_and_acls() {
    let b = Bridge::start(Backend::Sqlite, |c| {
        c.auth.default_access = DefaultAccess::DenyAll;
        c.auth.tokens = vec![TokenConfig {
            token: "tk_alice".into(),
            read: vec!["alice*".into()],
            write: vec!["alice-w".into()],
        }];
    })
    .await;
    let h = b.http();
    assert_eq!(curl(&["-d", "x", &format!("{h}/alice-w")]).0, 401);
    assert_eq!(
        curl(&[
            "-H",
            "Authorization: Bearer tk_bogus",
            "-d",
            "x",
            &format!("{h}/alice-w")
        ])
        .0,
        401
    );
    assert_eq!(
        curl(&[
            "-H",
            "Authorization: Bearer tk_alice",
            "-d",
            "x",
            &format!("{h}/alice-w")
        ])
        .0,
        200
    );
    assert_eq!(
        curl(&[
            "-H",
            "Authorization: Bearer tk_alice",
            "-d",
            "x",
            &format!("{h}/alice-r")
        ])
        .0,
        403
    );
    assert_eq!(
        curl(&[
            "-H",
            "Authorization: Bearer tk_alice",
            "-d",
            "x",
            &format!("{h}/bob")
        ])
        .0,
        403
    );
    // ntfy's other forms: Basic with the token as password, and ?auth=.
    assert_eq!(
        curl(&["-u", ":tk_alice", &format!("{h}/alice-w/json?poll=1")]).0,
        200
    );
    let auth = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("Bearer tk_alice");
    let (c, body) = curl(&[&format!("{h}/alice-w/json?poll=1&auth={auth}")]);
    assert_eq!((c, lines(&body).len()), (200, 1));
    assert_eq!(curl(&[&format!("{h}/alice-w/json?poll=1")]).0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_subscriber_does_not_hold_back_others() {
    let b = Bridge::start(Backend::Sqlite, |c| {
        c.limits.subscriber_write_timeout_secs = 1;
        c.limits.broadcast_capacity = 16;
    })
    .await;
    let h = b.http();
    let hub = b.running.as_ref().unwrap().hub.clone();
    // A subscriber that never reads what it asked for.
    use std::io::Write as _;
    let mut slow = std::net::TcpStream::connect(b.running.as_ref().unwrap().bound.http).unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_millis(1)))
        .unwrap();
    write!(slow, "GET /slow/json HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut both = false;
    for _ in 0..200 {
        if hub.subscriber_count() == 1 {
            both = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(both, "the slow subscriber never subscribed");
    let n = 150;
    let mut fast = Proc::py(&[
        "sse",
        &format!("{h}/slow/sse"),
        "--count",
        &n.to_string(),
        "--timeout",
        "120",
    ]);
    fast.until("OPEN");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("body");
    std::fs::write(&f, vec![b'z'; 60_000]).unwrap();
    for _ in 0..n {
        assert_eq!(
            curl(&["-T", f.to_str().unwrap(), &format!("{h}/slow")]).0,
            200
        );
    }
    let (_, done) = fast.finish();
    assert_eq!(done["count"], n);
    // The slow one is dropped once its write timeout passes.
    let mut gone = false;
    for _ in 0..200 {
        if hub.subscriber_count() == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(gone, "the slow subscriber was never dropped");
    drop(slow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_openapi() {
    let b = Bridge::start(Backend::Sqlite, |_| {}).await;
    let h = b.http();
    let (c, m) = curl_json(&[&format!("{h}/healthz")]);
    assert_eq!((c, m["healthy"].as_bool()), (200, Some(true)));
    curl(&["-d", "x", &format!("{h}/m")]);
    let (c, body) = curl(&[&format!("{h}/metrics")]);
    let text = String::from_utf8(body).unwrap();
    assert_eq!(c, 200);
    assert!(
        text.contains("rdv_bridge_messages_in_total{protocol=\"http\"}"),
        "{text}"
    );
    assert!(text.contains("rdv_bridge_cache_messages"), "{text}");
    assert!(text.contains("rdv_bridge_cache_queue_bytes"), "{text}");
    let (c, api) = curl_json(&[&format!("{h}/openapi.json")]);
    assert_eq!(c, 200);
    assert!(api["paths"]["/{topics}/json"].is_object(), "{api}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_drains_subscribers() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut b = Bridge::start_with_clock(Backend::Sqlite, |_| {}, clock).await;
    let h = b.http();
    let mut p = Proc::py(&["sse", &format!("{h}/bye/sse"), "--count", "5"]);
    p.until("OPEN");
    b.stop().await;
    // The stream ended cleanly: the client saw the end and reported.
    let (_, done) = p.finish();
    assert_eq!(done["count"], 0);
}

/// Stream events go out at once: `TCP_NODELAY` on accepted HTTP
/// connections (axum 0.8 leaves it off). Without it a subscriber's small
/// events wait on Nagle's algorithm for its delayed ACK (~40 ms; the MQTT →
/// SSE rows of docs/benchmarks/relay-bridge.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connections_set_tcp_nodelay() {
    let b = Bridge::start(Backend::Sqlite, |_| {}).await;
    let a = b.running.as_ref().unwrap().bound.http;
    let c = std::net::TcpStream::connect(a).unwrap();
    let mine = c.local_addr().unwrap().port();
    let nodelay = tokio::task::spawn_blocking(move || common::server_side_nodelay(a.port(), mine))
        .await
        .unwrap();
    assert!(nodelay, "accepted HTTP socket without TCP_NODELAY");
    drop(c);
}
