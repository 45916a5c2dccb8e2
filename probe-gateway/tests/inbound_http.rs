//! `POST /v1/inbound` over the bound, as an ordinary HTTP client sees it
//! (Python's `http.client`, tests/python/http_post.py; `RDV_TEST_PYTHON`
//! or `python3`) against the gateway on 127.0.0.1:0: a client that sends
//! 2 MiB whole before it reads gets the 413 every time, not a broken pipe;
//! the answer is the gate's refusal shape (`{"outcome":"refused",
//! "refusal":"too_large",…}`), and each one is counted as a refusal. A
//! client that waits for `100 Continue` is answered before it sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::env::*;
use common::*;
use rdv_probe_gateway::clock::CountingEntropy;
use rdv_probe_gateway::gate::AuthBackend;
use rdv_probe_gateway::http::Deps;
use rdv_probe_gateway::mailer::RecordingMailer;
use serde_json::Value;

const TRIES: usize = 20;

fn post(addr: std::net::SocketAddr, token: &str, size: usize, extra: &[&str]) -> Vec<Value> {
    let python = std::env::var("RDV_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/http_post.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg("/v1/inbound")
        .arg(token)
        .arg(size.to_string())
        .arg(TRIES.to_string())
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn refused_too_large(r: &Value) -> bool {
    if r["status"] != 413 {
        return false;
    }
    let body: Value = serde_json::from_str(r["body"].as_str().unwrap_or_default()).unwrap();
    body["outcome"] == "refused" && body["refusal"] == "too_large"
}

fn count(metrics: &str, line: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_mail_gets_its_answer() {
    let mut env = Env::new(Backend::Sqlite, |_| {}).await;
    let token = env.enroll(&recipient_agent(), "john@doe.test").await;
    let deps = Deps {
        store: rdv_probe_gateway::store::Store::connect(&env.db_url, 2)
            .await
            .unwrap(),
        clock: env.clock.clone(),
        entropy: Arc::new(CountingEntropy::default()),
        mailer: Arc::new(RecordingMailer::default()),
        backend: AuthBackend::Trusted(vec![AUTHSERV.into()]),
        cookies: cookie_keys(),
    };
    let running = rdv_probe_gateway::server::start(env.cfg.clone(), deps)
        .await
        .unwrap();
    let addr = running.addr;
    let metrics = move || {
        ureq::get(&format!("http://{addr}/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap()
    };
    let line = "rdv_gateway_inbound_total{outcome=\"refused\",refusal=\"too_large\"} ";
    let before = count(&tokio::task::spawn_blocking(metrics).await.unwrap(), line);

    let t = token.clone();
    let sent_whole = tokio::task::spawn_blocking(move || post(addr, &t, 2 << 20, &[]))
        .await
        .unwrap();
    let t = token.clone();
    let waiting =
        tokio::task::spawn_blocking(move || post(addr, &t, 2 << 20, &["expect-continue"]))
            .await
            .unwrap();
    for (what, rs) in [("sent whole", &sent_whole), ("100-continue", &waiting)] {
        let ok = rs.iter().filter(|r| refused_too_large(r)).count();
        assert_eq!(ok, TRIES, "{what}: every try sees the 413: {rs:?}");
    }
    let after = count(&tokio::task::spawn_blocking(metrics).await.unwrap(), line);
    assert_eq!(after - before, 2 * TRIES as u64, "each refusal is counted");

    // A fitting message on the same server still goes through the gate.
    let t = token.clone();
    let small = tokio::task::spawn_blocking(move || post(addr, &t, 1000, &[]))
        .await
        .unwrap();
    assert!(
        small.iter().all(|r| r["status"] == 422),
        "unmarked mail reaches the gate: {small:?}"
    );
    let state = running.state.clone();
    running.shutdown().await.unwrap();
    state.store().close().await;
    env.teardown().await;
}
