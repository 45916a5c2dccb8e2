//! The HTTP API (issue #4) over a real store, the same suite on SQLite and
//! on Postgres: enrolment with the mailbox proof, inbound mail through the
//! gate, the signed pull API and SSE stream, and every refusal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rdv_service_kit::both_backends as both;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::env::*;
use common::*;
use http_body_util::BodyExt;
use rdv_probe_gateway::signed;
use rdv_proto::mailblock::TransferEncoding;
use rdv_proto::{Address, AgentKey};
use serde_json::json;
use tower::ServiceExt;

const QP: TransferEncoding = TransferEncoding::QuotedPrintable;
const ID: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const ID2: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02";
const ID3: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c03";
const MAILBOX: &str = "john@doe.test";
const SENDER: &str = "alice@sender.test";
const TS: &str = "2026-10-08T11:00:00Z";

fn probe(id: &str) -> Vec<u8> {
    probe_mail(id, MAILBOX, SENDER, TS, QP)
}

both!(enroll_deliver_and_pull);
async fn enroll_deliver_and_pull(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    let agent = recipient_agent();
    let token = env.enroll(&agent, "John@Doe.test").await;
    // The proof mail goes to the canonical mailbox and carries no marker,
    // so the mail rule never routes it (§5.2.1 marking).
    let sent = env.mailer.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].to, MAILBOX);
    let text = String::from_utf8_lossy(&sent[0].raw);
    assert!(text.contains("Subject: Your Rendezvous gateway code\r\n"));
    assert!(!text.contains("[RDV-"), "the code mail carries no marker");
    assert!(token.starts_with("rdvgw1."));

    let (st, v) = env.inbound(Some(&token), probe(ID)).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["outcome"], "admitted");
    assert_eq!(v["binding"], "needs_cookie");
    assert_eq!(v["seq"], 1);

    let (st, v) = env.signed(&agent, "GET", "/v1/inbox", b"").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    let it = &items[0];
    assert_eq!(
        (&it["kind"], &it["id"], &it["sender"], &it["mailbox"]),
        (&json!("probe"), &json!(ID), &json!(SENDER), &json!(MAILBOX))
    );
    assert_eq!(it["payload"]["request"]["id"], ID);
    assert_eq!(it["auth"]["dmarc"], "none");
    // The cookie the agent returns in its SYN-ACK verifies (§5.2.1).
    let cookie = it["cookie"].as_str().unwrap();
    assert!(cookie_keys().verify(
        agent.id(),
        ID,
        &Address::parse(SENDER).unwrap(),
        cookie,
        env.now()
    ));
    assert_eq!(v["next"], 1);
    let (_, v) = env.signed(&agent, "GET", "/v1/inbox?after=1", b"").await;
    assert!(v["items"].as_array().unwrap().is_empty());

    // A key that proved another mailbox gets nothing of John's.
    let other = AgentKey::from_seed([11; 32]);
    env.enroll(&other, "jane@doe.test").await;
    let (st, v) = env.signed(&other, "GET", "/v1/inbox", b"").await;
    assert_eq!(st, StatusCode::OK);
    assert!(v["items"].as_array().unwrap().is_empty());
    env.teardown().await;
}

both!(dmarc_pass_earns_the_weak_proof);
async fn dmarc_pass_earns_the_weak_proof(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    let token = env.enroll(&recipient_agent(), MAILBOX).await;
    let mut raw = format!(
        "Authentication-Results: {AUTHSERV}; dkim=pass header.d=sender.test; dmarc=pass header.from=sender.test\r\n"
    )
    .into_bytes();
    raw.extend(probe(ID));
    let (st, v) = env.inbound(Some(&token), raw).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["binding"], "weak_mailbox_proof");
    // A forged header from another authserv-id earns nothing.
    let mut raw =
        b"Authentication-Results: mx.evil.test; dmarc=pass header.from=sender.test\r\n".to_vec();
    raw.extend(probe(ID2));
    let (_, v) = env.inbound(Some(&token), raw).await;
    assert_eq!(v["binding"], "needs_cookie");
    env.teardown().await;
}

both!(inbound_refusals);
async fn inbound_refusals(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    let token = env.enroll(&recipient_agent(), MAILBOX).await;
    let code = |v: &serde_json::Value| v["error"].as_str().unwrap_or_default().to_string();

    let (st, v) = env.inbound(None, probe(ID)).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNAUTHORIZED, "bad_token".into())
    );
    let (id, _) = token["rdvgw1.".len()..].split_once('.').unwrap();
    let wrong = format!("rdvgw1.{id}.{}", "a".repeat(52));
    let (st, _) = env.inbound(Some(&wrong), probe(ID)).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "right id, wrong secret");
    let (st, _) = env.inbound(Some(&token[7..]), probe(ID)).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "no prefix");
    let unknown = format!("rdvgw1.{}.{}", "b".repeat(16), "a".repeat(52));
    let (st, _) = env.inbound(Some(&unknown), probe(ID)).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "unknown id");

    // Oversize: refused by the body bound, never parsed, in the gate's
    // refusal shape.
    let big = vec![b'a'; env.cfg.max_mail_bytes + 1];
    let (st, v) = env.inbound(Some(&token), big).await;
    assert_eq!(
        (st, &v["outcome"], &v["refusal"]),
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            &json!("refused"),
            &json!("too_large")
        ),
        "{v}"
    );

    // Gate refusals are data, with their code.
    let (st, v) = env.inbound(Some(&token), b"hello".to_vec()).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["outcome"], "refused");
    let for_jane = probe_mail(ID, "jane@doe.test", SENDER, TS, QP);
    let (st, v) = env.inbound(Some(&token), for_jane).await;
    assert_eq!(
        (st, v["refusal"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("to_hint"))
    );

    // Dedupe survives a restart (§5.2.1 gate step 3).
    let (st, _) = env.inbound(Some(&token), probe(ID)).await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let (st, v) = env.inbound(Some(&token), probe(ID)).await;
    assert_eq!(
        (st, v["refusal"].clone()),
        (StatusCode::CONFLICT, json!("duplicate"))
    );
    env.restart().await;
    let (st, v) = env.inbound(Some(&token), probe(ID)).await;
    assert_eq!(
        (st, v["refusal"].clone()),
        (StatusCode::CONFLICT, json!("duplicate"))
    );
    // Refused mail is not queued.
    let (_, v) = env
        .signed(&recipient_agent(), "GET", "/v1/inbox", b"")
        .await;
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    env.teardown().await;
}

both!(rate_limits_survive_restart_and_slide);
async fn rate_limits_survive_restart_and_slide(b: Backend) {
    let mut env = Env::new(b, |c| {
        c.limits.per_sender.max = 1;
        c.limits.per_sender.window_secs = 3600;
    })
    .await;
    let token = env.enroll(&recipient_agent(), MAILBOX).await;
    assert_eq!(
        env.inbound(Some(&token), probe(ID)).await.0,
        StatusCode::ACCEPTED
    );
    let (st, v) = env.inbound(Some(&token), probe(ID2)).await;
    assert_eq!(
        (st, v["refusal"].clone()),
        (StatusCode::TOO_MANY_REQUESTS, json!("rate_limited"))
    );
    env.restart().await;
    let (st, _) = env.inbound(Some(&token), probe(ID2)).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
    env.clock.advance(time::Duration::seconds(3600));
    // The refused id was not recorded: it is admitted once the window slides.
    assert_eq!(
        env.inbound(Some(&token), probe(ID2)).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        env.inbound(Some(&token), probe(ID3)).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    env.teardown().await;
}

both!(signed_request_refusals);
async fn signed_request_refusals(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    let agent = recipient_agent();
    let code = |v: &serde_json::Value| v["error"].as_str().unwrap_or_default().to_string();

    // No header.
    let req = Request::get("/v1/inbox").body(Body::empty()).unwrap();
    let (st, v) = env.send(req).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNAUTHORIZED, "unauthenticated".into())
    );
    // A key that registered nothing, then one whose registration is pending.
    let (st, v) = env.signed(&agent, "GET", "/v1/inbox", b"").await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::FORBIDDEN, "unregistered".into())
    );
    let body = json!({"mailbox": MAILBOX}).to_string();
    let (st, _) = env
        .signed(&agent, "POST", "/v1/register", body.as_bytes())
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let (st, v) = env.signed(&agent, "GET", "/v1/inbox", b"").await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::FORBIDDEN, "unregistered".into())
    );
    env.enroll(&agent, MAILBOX).await;

    // Replay: the same signed request twice, and again after a restart.
    let (req, header) = env.signed_request(&agent, "GET", "/v1/inbox", b"");
    assert_eq!(env.send(req).await.0, StatusCode::OK);
    let (st, v) = env.send(raw_signed("GET", "/v1/inbox", b"", &header)).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNAUTHORIZED, "replayed".into())
    );
    env.restart().await;
    let (st, v) = env.send(raw_signed("GET", "/v1/inbox", b"", &header)).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNAUTHORIZED, "replayed".into())
    );

    // Stale and future timestamps.
    let window = time::Duration::seconds(env.cfg.signed_request_window_secs + 1);
    for ts in [env.now() - window, env.now() + window] {
        let id = env.next_id();
        let h = signed::sign(&agent, "GET", "/v1/inbox", b"", &id, ts).unwrap();
        let (st, v) = env.send(raw_signed("GET", "/v1/inbox", b"", &h)).await;
        assert_eq!((st, code(&v)), (StatusCode::UNAUTHORIZED, "stale".into()));
    }
    // Signed for another query; another key's signature.
    let id = env.next_id();
    let h = signed::sign(&agent, "GET", "/v1/inbox?after=0", b"", &id, env.now()).unwrap();
    let (st, v) = env
        .send(raw_signed("GET", "/v1/inbox?after=5", b"", &h))
        .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNAUTHORIZED, "auth_mismatch".into())
    );
    let (st, v) = env
        .send(raw_signed("GET", "/v1/inbox", b"", "bm90IGpzb24="))
        .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNAUTHORIZED, "malformed_auth".into())
    );

    // Oversize JSON body and a non-email mailbox.
    let big = vec![b' '; env.cfg.max_body_bytes + 1];
    let (req, _) = env.signed_request(&agent, "POST", "/v1/register", &big);
    let (st, v) = env.send(req).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "too_large".into())
    );
    let body = json!({"mailbox": "+15551234567"}).to_string();
    let (st, v) = env
        .signed(&agent, "POST", "/v1/register", body.as_bytes())
        .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::BAD_REQUEST, "bad_mailbox".into())
    );
    env.teardown().await;
}

both!(mailbox_proof_refusals);
async fn mailbox_proof_refusals(b: Backend) {
    let mut env = Env::new(b, |c| c.code_max_attempts = 3).await;
    let agent = recipient_agent();
    let code = |v: &serde_json::Value| v["error"].as_str().unwrap_or_default().to_string();
    let verify = |c: &str| json!({"mailbox": MAILBOX, "code": c}).to_string();
    let register = json!({"mailbox": MAILBOX}).to_string();

    let (st, v) = env
        .signed(&agent, "POST", "/v1/verify", verify("x").as_bytes())
        .await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "no_pending".into()));
    env.signed(&agent, "POST", "/v1/register", register.as_bytes())
        .await;
    let right = env.last_code();
    // Another key cannot use the code mailed for this one.
    let thief = AgentKey::from_seed([12; 32]);
    let (st, _) = env
        .signed(&thief, "POST", "/v1/verify", verify(&right).as_bytes())
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    for _ in 0..3 {
        let (st, v) = env
            .signed(&agent, "POST", "/v1/verify", verify("wrong").as_bytes())
            .await;
        assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "wrong_code".into()));
    }
    let (st, v) = env
        .signed(&agent, "POST", "/v1/verify", verify(&right).as_bytes())
        .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::FORBIDDEN, "too_many_attempts".into())
    );
    let (st, _) = env
        .signed(&agent, "POST", "/v1/verify", verify(&right).as_bytes())
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "the registration is gone");

    // A code dies with its lifetime.
    env.signed(&agent, "POST", "/v1/register", register.as_bytes())
        .await;
    let right = env.last_code();
    env.clock
        .advance(time::Duration::seconds(env.cfg.code_ttl_secs));
    let (st, _) = env
        .signed(&agent, "POST", "/v1/verify", verify(&right).as_bytes())
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    env.teardown().await;
}

both!(reproving_a_mailbox_moves_it);
async fn reproving_a_mailbox_moves_it(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    let a = recipient_agent();
    let old = env.enroll(&a, MAILBOX).await;
    assert_eq!(
        env.inbound(Some(&old), probe(ID)).await.0,
        StatusCode::ACCEPTED
    );
    // Another key asks for the mailbox: nothing changes until it proves it.
    let bkey = AgentKey::from_seed([13; 32]);
    let body = json!({"mailbox": MAILBOX}).to_string();
    env.signed(&bkey, "POST", "/v1/register", body.as_bytes())
        .await;
    assert_eq!(
        env.inbound(Some(&old), probe(ID2)).await.0,
        StatusCode::ACCEPTED
    );
    let new = env.enroll(&bkey, MAILBOX).await;
    // The old token dies; new mail goes to the new key only.
    assert_eq!(
        env.inbound(Some(&old), probe(ID3)).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        env.inbound(Some(&new), probe(ID3)).await.0,
        StatusCode::ACCEPTED
    );
    let (_, v) = env.signed(&bkey, "GET", "/v1/inbox", b"").await;
    let ids: Vec<_> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(ID3)]);
    let (st, _) = env.signed(&a, "GET", "/v1/inbox", b"").await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    env.teardown().await;
}

both!(sse_stream_delivers);
async fn sse_stream_delivers(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    let agent = recipient_agent();
    let token = env.enroll(&agent, MAILBOX).await;
    assert_eq!(
        env.inbound(Some(&token), probe(ID)).await.0,
        StatusCode::ACCEPTED
    );
    let (req, _) = env.signed_request(&agent, "GET", "/v1/inbox/stream?after=0", b"");
    let res = env.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let mut next = async || {
        let f = body.frame().await.unwrap().unwrap();
        String::from_utf8(f.into_data().unwrap().to_vec()).unwrap()
    };
    let ready = next().await;
    assert!(ready.starts_with(":") && ready.contains("ready"), "{ready}");
    let first = next().await;
    assert!(
        first.contains("event: probe") && first.contains(ID),
        "{first}"
    );
    assert!(first.contains("id: 1"));
    // Admitted while the stream is open.
    assert_eq!(
        env.inbound(Some(&token), probe(ID2)).await.0,
        StatusCode::ACCEPTED
    );
    let second = next().await;
    assert!(second.contains(ID2) && second.contains("id: 2"), "{second}");
    env.teardown().await;
}

both!(server_health_metrics_openapi_and_shutdown);
async fn server_health_metrics_openapi_and_shutdown(b: Backend) {
    use rdv_probe_gateway::clock::{CountingEntropy, ManualClock};
    use rdv_probe_gateway::gate::AuthBackend;
    use rdv_probe_gateway::http::Deps;
    use rdv_probe_gateway::mailer::RecordingMailer;
    use std::sync::Arc;
    let env = Env::new(b, |_| {}).await;
    let store = rdv_probe_gateway::store::Store::connect(&env.db_url, 2)
        .await
        .unwrap();
    let deps = Deps {
        store,
        clock: Arc::new(ManualClock::new(t(NOW))),
        entropy: Arc::new(CountingEntropy::default()),
        mailer: Arc::new(RecordingMailer::default()),
        backend: AuthBackend::Trusted(vec![]),
        cookies: cookie_keys(),
    };
    let running = rdv_probe_gateway::server::start(env.cfg.clone(), deps)
        .await
        .unwrap();
    assert_ne!(running.addr.port(), 0);
    let base = format!("http://{}", running.addr);
    let (health, openapi, metrics, missing) = tokio::task::spawn_blocking(move || {
        let get = |p: &str| match ureq::get(&format!("{base}{p}")).call() {
            Ok(r) => (r.status(), r.into_string().unwrap()),
            Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap()),
            Err(e) => panic!("{e}"),
        };
        (
            get("/healthz"),
            get("/v1/openapi.json"),
            get("/metrics"),
            get("/nope"),
        )
    })
    .await
    .unwrap();
    assert_eq!(health, (200, "ok\n".into()));
    assert_eq!(openapi.0, 200);
    let doc: serde_json::Value = serde_json::from_str(&openapi.1).unwrap();
    for p in [
        "/v1/inbound",
        "/v1/register",
        "/v1/verify",
        "/v1/inbox",
        "/v1/inbox/stream",
    ] {
        assert!(doc["paths"][p].is_object(), "{p} documented");
    }
    assert_eq!(metrics.0, 200);
    assert_eq!(missing.0, 404);
    let v: serde_json::Value = serde_json::from_str(&missing.1).unwrap();
    assert_eq!(v["error"], "not_found");
    let state = running.state.clone();
    running.shutdown().await.unwrap();
    state.store().close().await;
    env.teardown().await;
}

both!(purge_drops_what_expired);
async fn purge_drops_what_expired(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    let agent = recipient_agent();
    let token = env.enroll(&agent, MAILBOX).await;
    assert_eq!(
        env.inbound(Some(&token), probe(ID)).await.0,
        StatusCode::ACCEPTED
    );
    let store = env.state.store().clone();
    let now = env.now().unix_timestamp();
    let day = 86_400;
    // Nothing live is purged: the probe, its id and its rate events stay.
    assert_eq!(store.purge(now, day).await.unwrap(), 0);
    let (_, v) = env.signed(&agent, "GET", "/v1/inbox", b"").await;
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    // One probe lifetime later: the probe, its seen id, its three rate
    // events and the signed-request ids are gone.
    let later = now + rdv_proto::consts::PROBE_LIFETIME_SECS;
    let n = store.purge(later, day).await.unwrap();
    assert!(n >= 5, "purged {n}");
    assert_eq!(store.purge(later, day).await.unwrap(), 0);
    assert!(
        store
            .inbox(agent.id().as_str(), 0, 10, now)
            .await
            .unwrap()
            .is_empty()
    );
    env.teardown().await;
}

both!(registrations_per_mailbox_are_limited);
async fn registrations_per_mailbox_are_limited(b: Backend) {
    let mut env = Env::new(b, |c| {
        c.register_per_mailbox.max = 2;
        c.register_per_mailbox.window_secs = 3600;
    })
    .await;
    let body = json!({"mailbox": MAILBOX}).to_string();
    let keys = [11u8, 12, 13].map(|s| AgentKey::from_seed([s; 32]));
    for k in &keys[..2] {
        let (st, _) = env.signed(k, "POST", "/v1/register", body.as_bytes()).await;
        assert_eq!(st, StatusCode::ACCEPTED);
    }
    let (st, v) = env
        .signed(&keys[2], "POST", "/v1/register", body.as_bytes())
        .await;
    assert_eq!(
        (st, v["error"].clone()),
        (StatusCode::TOO_MANY_REQUESTS, json!("rate_limited"))
    );
    assert_eq!(env.mailer.sent().len(), 2, "no code mailed when limited");
    // Another mailbox is not affected; the window slides.
    let other = json!({"mailbox": "jane@doe.test"}).to_string();
    let (st, _) = env
        .signed(&keys[2], "POST", "/v1/register", other.as_bytes())
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    env.clock.advance(time::Duration::seconds(3600));
    let (st, _) = env
        .signed(&keys[2], "POST", "/v1/register", body.as_bytes())
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    env.teardown().await;
}

both!(streamed_oversize_mail_is_cut);
async fn streamed_oversize_mail_is_cut(b: Backend) {
    let mut env = Env::new(b, |c| c.max_mail_bytes = 64 * 1024).await;
    let token = env.enroll(&recipient_agent(), MAILBOX).await;
    // No Content-Length: the bound applies while the body streams in.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..100).map(|_| Ok(vec![b'a'; 1024])).collect();
    let req = Request::post("/v1/inbound")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap();
    let (st, v) = env.send(req).await;
    assert_eq!(
        (st, v["refusal"].clone()),
        (StatusCode::PAYLOAD_TOO_LARGE, json!("too_large")),
        "{v}"
    );
    env.teardown().await;
}

both!(ws_relays_only_with_the_dev_switch);
/// `dev_allow_ws_relays` (local testing only): a probe whose card names a
/// `ws://` relay is refused by default (§4.3 asks for `wss://`) and
/// admitted with the switch on.
async fn ws_relays_only_with_the_dev_switch(b: Backend) {
    use rdv_proto::doc::card::CardBuilder;
    use rdv_proto::doc::request::RequestBuilder;
    let key = requester();
    let card = CardBuilder::new(
        t("2026-10-01T00:00:00Z"),
        vec!["ws://127.0.0.1:7777".into()],
    )
    .sign(&key)
    .unwrap();
    let req = RequestBuilder {
        id: ID.into(),
        to_hint: Some(MAILBOX.into()),
        card,
        greeting: "Alice's agent requests contact on Alice's behalf.".into(),
        capabilities_offered: vec!["a2a/0.3".into()],
        ts: t(TS),
    }
    .sign(&key)
    .unwrap();
    let mail = compose(
        &rdv_proto::mailblock::probe_payload(&req),
        MAILBOX,
        SENDER,
        QP,
    );
    for (on, admitted) in [(false, false), (true, true)] {
        let mut env = Env::new(b, |c| c.dev_allow_ws_relays = on).await;
        let token = env.enroll(&recipient_agent(), MAILBOX).await;
        let (st, v) = env.inbound(Some(&token), mail.clone()).await;
        if admitted {
            assert_eq!(
                (st, &v["outcome"]),
                (StatusCode::ACCEPTED, &json!("admitted")),
                "{v}"
            );
        } else {
            assert_eq!(
                (st, &v["refusal"]),
                (StatusCode::UNPROCESSABLE_ENTITY, &json!("payload")),
                "{v}"
            );
            assert!(v["reason"].as_str().unwrap().contains("ws"), "{v}");
        }
        env.teardown().await;
    }
}
