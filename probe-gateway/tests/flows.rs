//! The mail flows (issue #4; §5.2.1, §5.2.2) over a real store, every test
//! on SQLite and on Postgres: gateway addresses (API and SMTP), sending
//! probes, the SYN-ACK, the ACK leg by API and by mail, invites with their
//! limits, the opt-out, and a failing mailer that consumes no limit.
//! Mail the gateway sends is read back from the recording mailer and fed
//! to the SMTP listener (Python `smtplib`) as a forwarder would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rdv_service_kit::both_backends as both;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::env::*;
use common::*;
use http_body_util::BodyExt;
use mail_parser::MessageParser;
use rdv_probe_gateway::config::Config;
use rdv_probe_gateway::mailer::{OutboundMail, OutboundMessage, SendError, SendFuture};
use rdv_probe_gateway::smtp;
use rdv_proto::AgentKey;
use rdv_proto::doc::grant::{GrantBuilder, GrantRef};
use rdv_proto::mailblock::{self, BlockPayload, Invite, ProbeEcho, TransferEncoding};
use rdv_proto::time::format_time;
use serde_json::{Value, json};
use tokio::sync::watch;
use tower::ServiceExt;

const ID: &str = "2b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const ID2: &str = "2b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02";
const ID3: &str = "2b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c03";
const ID4: &str = "2b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c04";
const GRANT_ID: &str = "3c5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const INV: &str = "4d5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const INV2: &str = "4d5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02";
const INV3: &str = "4d5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c03";
const INV4: &str = "4d5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c04";
/// A's mailbox (the requester, `requester()`), B's (`recipient_agent()`).
const ALICE: &str = "alice@sender.test";
const JOHN: &str = "john@doe.test";
const DANA: &str = "dana@doe.test";
const TS: &str = "2026-10-08T11:00:00Z";
const DOMAIN: &str = "gw.test";
const DAY: time::Duration = time::Duration::days(1);
/// Where the inviter got the address (§5.2.2).
const SOURCE: &str = "the book club's member list";

fn flows_on(c: &mut Config) {
    c.flows.mail_domain = Some(DOMAIN.into());
    c.flows.public_url = Some("https://gw.test".into());
    c.smtp_hostname = "gw.test".into();
}

/// [`flows_on`], with unknown SMTP recipients refused at RCPT (`550
/// 5.1.1`), so the tests of recipient resolution see what it resolved.
fn flows_rejecting_unknown(c: &mut Config) {
    flows_on(c);
    c.smtp_unknown_recipients = rdv_probe_gateway::config::UnknownRecipients::Reject;
}

fn code(v: &Value) -> &str {
    v["error"].as_str().unwrap_or_default()
}

/// A status, the Retry-After header and the JSON body.
async fn raw_json(
    env: &mut Env,
    key: &AgentKey,
    path: &str,
    body: &Value,
) -> (StatusCode, Option<String>, Value) {
    let b = body.to_string();
    let (req, _) = env.signed_request(key, "POST", path, b.as_bytes());
    let res = env.router.clone().oneshot(req).await.unwrap();
    let st = res.status();
    let ra = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        st,
        ra,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

macro_rules! post {
    ($env:ident, $key:expr, $path:expr, $body:expr $(,)?) => {{
        let body = $body;
        post_json(&mut $env, $key, $path, body).await
    }};
}

macro_rules! raw {
    ($env:ident, $key:expr, $path:expr, $body:expr $(,)?) => {{
        let body = $body;
        raw_json(&mut $env, $key, $path, &body).await
    }};
}

async fn post_json(env: &mut Env, key: &AgentKey, path: &str, body: Value) -> (StatusCode, Value) {
    let b = body.to_string();
    env.signed(key, "POST", path, b.as_bytes()).await
}

async fn inbox(env: &mut Env, key: &AgentKey) -> Vec<Value> {
    let (st, v) = env.signed(key, "GET", "/v1/inbox", b"").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["items"].as_array().unwrap().clone()
}

/// The gateway address of `mailbox` for `key`, through `GET /v1/mailboxes`.
async fn gateway_address(env: &mut Env, key: &AgentKey, mailbox: &str) -> String {
    let (st, v) = env.signed(key, "GET", "/v1/mailboxes", b"").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["mailboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mailbox"] == mailbox)
        .unwrap()["gateway_address"]
        .as_str()
        .unwrap()
        .to_string()
}

fn now_str(env: &Env) -> String {
    format_time(env.now())
}

fn grant(env: &Env, request_id: &str, to: &AgentKey, by: &AgentKey) -> Value {
    GrantBuilder {
        id: GRANT_ID.into(),
        to: to.id().clone(),
        reference: GrantRef::Request(request_id.into()),
        card: card(by),
        tier: "stranger".into(),
        scope: json!({"may_initiate": true}),
        expires: None,
        ts: env.now(),
    }
    .sign(by)
    .unwrap()
}

fn invite(env: &Env, id: &str, to: &str, by: &AgentKey) -> Value {
    Invite::build(id, Some(to), "tok_0123456789abcdef", env.now(), by).unwrap()
}

/// A parsed sent mail: one header's raw value.
fn header(raw: &[u8], name: &str) -> Option<String> {
    let m = MessageParser::default().parse(raw).unwrap();
    m.header_raw(name).map(|s| s.trim().to_string())
}

/// The shared checks of every composed mail (§5.2.1 marking).
fn check_mail(m: &OutboundMessage, marker: &str, rdv_header: &str, from: &str, to: &str) -> Value {
    let p = MessageParser::default().parse(&m.raw).unwrap();
    assert!(
        p.subject().unwrap().starts_with(marker),
        "{:?}",
        p.subject()
    );
    assert!(p.header_raw(rdv_header).is_some(), "{rdv_header}");
    assert_eq!(
        p.header_raw("Auto-Submitted").unwrap().trim(),
        "auto-generated"
    );
    let tos: Vec<_> = p.to().unwrap().iter().collect();
    assert_eq!(tos.len(), 1);
    assert_eq!(tos[0].address.as_deref(), Some(to));
    assert!(p.cc().is_none() && p.bcc().is_none());
    assert_eq!(
        p.from().unwrap().first().unwrap().address.as_deref(),
        Some(from)
    );
    assert!(p.message_id().unwrap().ends_with("@gw.test"));
    assert_eq!((m.envelope_from.as_str(), m.to.as_str()), (from, to));
    mailblock::extract_block(&m.raw).unwrap()
}

/// The SMTP listener over `env`'s state, on a free port.
async fn listen(env: &Env) -> (SocketAddr, watch::Sender<bool>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (stop, rx) = watch::channel(false);
    let tls = smtp::tls_acceptor(env.state.config()).unwrap();
    smtp::spawn(l, env.state.clone(), tls, rx);
    (addr, stop)
}

/// One SMTP transaction by Python's smtplib: the replies to MAIL, RCPT
/// and (when RCPT was accepted) DATA.
async fn smtp_send(env: &Env, addr: SocketAddr, rcpt: &str, raw: &[u8]) -> Vec<Value> {
    let p = env.dir.path().join(format!("m{}.eml", rand_name()));
    std::fs::write(&p, raw).unwrap();
    let steps = json!([
        ["ehlo", "mx.sender.test"],
        ["cmd", "MAIL FROM:<bounce@sender.test>"],
        ["cmd", format!("RCPT TO:<{rcpt}>")],
        ["data_file", p.display().to_string()],
        ["quit"],
    ]);
    let python = std::env::var("RDV_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/smtp_client.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg(script)
            .arg(addr.ip().to_string())
            .arg(addr.port().to_string())
            .arg(steps.to_string())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    v[2..5].to_vec()
}

fn rand_name() -> String {
    let mut r = [0u8; 6];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut r);
    hex::encode(r)
}

fn reply_code(v: &Value) -> i64 {
    v[0].as_i64().unwrap()
}

/// A mailer that always fails (a relay that is down).
struct FailingMailer;

impl OutboundMail for FailingMailer {
    fn send<'a>(&'a self, _msg: &'a OutboundMessage) -> SendFuture<'a> {
        Box::pin(async { Err(SendError::Temporary("relay down".into())) })
    }
}

both!(gateway_addresses);
async fn gateway_addresses(b: Backend) {
    let mut env = Env::new(b, flows_rejecting_unknown).await;
    let john = recipient_agent();
    let body = json!({"mailbox": JOHN}).to_string();
    env.signed(&john, "POST", "/v1/register", body.as_bytes())
        .await;
    let body = json!({"mailbox": JOHN, "code": env.last_code()}).to_string();
    let (st, v) = env
        .signed(&john, "POST", "/v1/verify", body.as_bytes())
        .await;
    assert_eq!(st, StatusCode::OK);
    let ga = v["gateway_address"].as_str().unwrap().to_string();
    let (local, dom) = ga.split_once('@').unwrap();
    assert_eq!(dom, DOMAIN);
    let tag = local.strip_prefix("rdv+").unwrap();
    assert_eq!(tag.len(), 10);
    assert!(
        tag.bytes()
            .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(&c))
    );
    assert_eq!(gateway_address(&mut env, &john, JOHN).await, ga);
    // Proved again by the same key: the same address.
    env.enroll(&john, JOHN).await;
    assert_eq!(gateway_address(&mut env, &john, JOHN).await, ga);

    // Over SMTP: a forward to the gateway address (any case) reaches John.
    let (addr, stop) = listen(&env).await;
    let probe = probe_mail(ID, JOHN, ALICE, TS, TransferEncoding::QuotedPrintable);
    let r = smtp_send(&env, addr, &ga.to_ascii_uppercase(), &probe).await;
    assert_eq!((reply_code(&r[1]), reply_code(&r[2])), (250, 250), "{r:?}");
    let items = inbox(&mut env, &john).await;
    assert_eq!((items.len(), &items[0]["mailbox"]), (1, &json!(JOHN)));
    assert_eq!(items[0]["status"], "pending");
    // Unknown tags, wrong lengths and other domains are 550.
    for bad in [
        format!("rdv+aaaaaaaaaa@{DOMAIN}"),
        format!("rdv+{tag}x@{DOMAIN}"),
        format!("rdv+{tag}@other.test"),
        format!("other+{tag}@{DOMAIN}"),
    ] {
        let r = smtp_send(&env, addr, &bad, &probe).await;
        assert_eq!(reply_code(&r[1]), 550, "{bad}: {r:?}");
    }

    // Another key proves John's mailbox: a new address, the old one is dead.
    let other = AgentKey::from_seed([21; 32]);
    env.enroll(&other, JOHN).await;
    let ga2 = gateway_address(&mut env, &other, JOHN).await;
    assert_ne!(ga2, ga);
    let r = smtp_send(&env, addr, &ga, &probe).await;
    assert_eq!(reply_code(&r[1]), 550, "{r:?}");
    let _ = stop.send(true);
    env.teardown().await;

    // Without a mail domain: no address.
    let mut env = Env::new(b, |c| {
        c.smtp_unknown_recipients = rdv_probe_gateway::config::UnknownRecipients::Reject;
    })
    .await;
    env.enroll(&john, JOHN).await;
    let (_, v) = env.signed(&john, "GET", "/v1/mailboxes", b"").await;
    assert_eq!(
        v["mailboxes"],
        json!([{"mailbox": JOHN, "gateway_address": null}])
    );
    let (st, v) = post!(
        env,
        &requester(),
        "/v1/send/probe",
        json!({"to": JOHN, "request": request(ID, JOHN, TS)}),
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "unregistered"));
    env.enroll(&requester(), ALICE).await;
    let (st, v) = post!(
        env,
        &requester(),
        "/v1/send/probe",
        json!({"to": JOHN, "request": request(ID, JOHN, TS)}),
    );
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "no_gateway_address"));
    env.teardown().await;
}

both!(handshake_by_mail);
/// A probes B through the gateway, B answers, A receives the SYN-ACK and
/// echoes the cookie by mail; B's probe is released with via "mail".
async fn handshake_by_mail(b: Backend) {
    let mut env = Env::new(b, flows_on).await;
    let (alice, john) = (requester(), recipient_agent());
    env.enroll(&alice, ALICE).await;
    env.enroll(&john, JOHN).await;
    let ga_a = gateway_address(&mut env, &alice, ALICE).await;
    let ga_j = gateway_address(&mut env, &john, JOHN).await;
    let (addr, stop) = listen(&env).await;

    // SYN.
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/probe",
        json!({"to": "John@Doe.test", "request": request(ID, JOHN, TS)}),
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(
        (&v["status"], &v["id"], &v["to"]),
        (&json!("sent"), &json!(ID), &json!(JOHN))
    );
    let probe_mail = env.mailer.sent().last().unwrap().clone();
    assert_eq!(
        header(&probe_mail.raw, "Message-ID").unwrap(),
        v["message_id"].as_str().unwrap()
    );
    let block = check_mail(&probe_mail, "[RDV-PROBE]", "X-Rdv-Probe", &ga_a, JOHN);
    assert!(matches!(
        mailblock::parse_payload(&block, env.now(), false).unwrap(),
        BlockPayload::Probe(p) if p.request.id == ID
    ));
    // John's mail rule hands it over (his own address as RCPT).
    let r = smtp_send(&env, addr, JOHN, &probe_mail.raw).await;
    assert_eq!(reply_code(&r[2]), 250, "{r:?}");
    let items = inbox(&mut env, &john).await;
    let probe = &items[0];
    assert_eq!(
        (&probe["kind"], &probe["sender"], &probe["status"]),
        (&json!("probe"), &json!(ga_a), &json!("pending"))
    );
    let seq = probe["seq"].as_i64().unwrap();
    let cookie = probe["cookie"].as_str().unwrap().to_string();

    // SYN-ACK: refusals first.
    let g = grant(&env, ID, &alice, &john);
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": g})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::NOT_FOUND, "not_found"),
        "another key's probe"
    );
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": 999, "grant": g})
    );
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let mut tampered = g.clone();
    tampered["tier"] = json!("friend");
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": tampered})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "bad_document")
    );
    let by_alice = grant(&env, ID, &alice, &alice);
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": by_alice})
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "wrong_signer"));
    let other_req = grant(&env, ID2, &alice, &john);
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": other_req})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "not_this_probe")
    );
    let to_other = grant(&env, ID, &AgentKey::from_seed([3; 32]), &john);
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": to_other})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "not_this_probe")
    );
    let sent_before = env.mailer.sent().len();
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": g})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!((&v["status"], &v["seq"]), (&json!("sent"), &json!(seq)));
    assert_eq!(env.mailer.sent().len(), sent_before + 1);
    let synack = env.mailer.sent().last().unwrap().clone();
    let block = check_mail(&synack, "[RDV-PROBE-ACK]", "X-Rdv-Probe", &ga_j, &ga_a);
    assert_eq!(
        block["cookie"],
        json!(cookie),
        "the SYN-ACK carries the inbox item's cookie"
    );
    assert!(matches!(
        mailblock::parse_payload(&block, env.now(), false).unwrap(),
        BlockPayload::ProbeAck(_)
    ));
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": g})
    );
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "already_answered"));
    assert_eq!(inbox(&mut env, &john).await[0]["status"], "answered");

    // The SYN-ACK reaches Alice's gateway address; the gate admits it.
    let r = smtp_send(&env, addr, &synack.to, &synack.raw).await;
    assert_eq!(reply_code(&r[2]), 250, "{r:?}");
    let a_items = inbox(&mut env, &alice).await;
    let sa = a_items.iter().find(|i| i["kind"] == "probe_ack").unwrap();
    assert_eq!(
        (&sa["mailbox"], &sa["sender"]),
        (&json!(ALICE), &json!(ga_j))
    );
    let sa_seq = sa["seq"].as_i64().unwrap();

    // A forged echo (wrong cookie) by mail: silently discarded (§5.2.1
    // "Silence", smtp_refusals = "discard"), nothing released.
    let wrong = ProbeEcho::build(ID, john.id(), &"a".repeat(26), env.now(), &alice).unwrap();
    let forged = common::compose(&wrong, &ga_j, &ga_a, TransferEncoding::QuotedPrintable);
    let r = smtp_send(&env, addr, &ga_j, &forged).await;
    assert_eq!(reply_code(&r[2]), 250, "{r:?}");
    assert!(!r[2][1].as_str().unwrap().contains("bad_cookie"), "{r:?}");
    // Over HTTP the same refusal is a 422.
    let token = env.enroll(&john, JOHN).await;
    let (st, v) = env.inbound(Some(&token), forged.clone()).await;
    assert_eq!(
        (st, &v["refusal"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("bad_cookie"))
    );
    assert_eq!(inbox(&mut env, &john).await[0]["status"], "answered");

    // The echo through /v1/send/ack: refusals, then the mail.
    let echo = ProbeEcho::build(ID, john.id(), &cookie, env.now(), &alice).unwrap();
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/ack",
        json!({"seq": sa_seq, "echo": echo})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::NOT_FOUND, "not_found"),
        "another key's SYN-ACK"
    );
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/ack",
        json!({"seq": sa_seq, "echo": wrong})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "not_this_syn_ack")
    );
    let by_john = ProbeEcho::build(ID, john.id(), &cookie, env.now(), &john).unwrap();
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/ack",
        json!({"seq": sa_seq, "echo": by_john})
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "wrong_signer"));
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/ack",
        json!({"seq": sa_seq, "echo": echo})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let ack = env.mailer.sent().last().unwrap().clone();
    assert_eq!(
        header(&ack.raw, "Message-ID").unwrap(),
        v["message_id"].as_str().unwrap()
    );
    let block = check_mail(&ack, "[RDV-ACK]", "X-Rdv-Ack", &ga_a, &ga_j);
    assert_eq!(block, echo);
    assert_eq!(
        header(&ack.raw, "X-Rdv-Ack").unwrap(),
        format!("v=1; id={ID}; from={}", alice.id())
    );

    // It reaches John's gateway address: the probe is released by mail.
    let r = smtp_send(&env, addr, &ack.to, &ack.raw).await;
    assert_eq!(reply_code(&r[2]), 250, "{r:?}");
    let items = inbox(&mut env, &john).await;
    assert_eq!(items[0]["status"], "released");
    let rel: Vec<_> = items.iter().filter(|i| i["kind"] == "release").collect();
    assert_eq!(rel.len(), 1);
    assert_eq!(
        (
            &rel[0]["request_id"],
            &rel[0]["requester"],
            &rel[0]["mailbox"],
            &rel[0]["probe_seq"],
            &rel[0]["via"]
        ),
        (
            &json!(ID),
            &json!(alice.id().as_str()),
            &json!(JOHN),
            &json!(seq),
            &json!("mail")
        )
    );
    // An API ACK afterwards answers the same, with the first route.
    let (st, v) = post!(env, &john, "/v1/ack", json!({"seq": seq, "cookie": cookie}));
    assert_eq!(
        (st, &v["via"], &v["status"]),
        (StatusCode::OK, &json!("mail"), &json!("released"))
    );
    assert_eq!(
        inbox(&mut env, &john)
            .await
            .iter()
            .filter(|i| i["kind"] == "release")
            .count(),
        1
    );
    // The counters (the process-wide recorder this test binary installs).
    let (st, m) = env
        .send(Request::get("/metrics").body(Body::empty()).unwrap())
        .await;
    assert_eq!(st, StatusCode::OK);
    let m = m.as_str().unwrap();
    for c in [
        "rdv_gateway_sends_total{kind=\"probe\",outcome=\"sent\"}",
        "rdv_gateway_sends_total{kind=\"syn_ack\",outcome=\"sent\"}",
        "rdv_gateway_sends_total{kind=\"ack\",outcome=\"sent\"}",
        "rdv_gateway_releases_total{via=\"mail\"}",
    ] {
        assert!(m.contains(c), "{c} missing");
    }
    let _ = stop.send(true);
    env.teardown().await;
}

both!(ack_through_the_api);
async fn ack_through_the_api(b: Backend) {
    let mut env = Env::new(b, flows_on).await;
    let john = recipient_agent();
    let token = env.enroll(&john, JOHN).await;
    let other = AgentKey::from_seed([22; 32]);
    env.enroll(&other, DANA).await;
    for id in [ID, ID2] {
        let (st, v) = env
            .inbound(
                Some(&token),
                probe_mail(id, JOHN, ALICE, TS, TransferEncoding::Base64),
            )
            .await;
        assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    }
    let items = inbox(&mut env, &john).await;
    let (seq, cookie) = (
        items[0]["seq"].as_i64().unwrap(),
        items[0]["cookie"].as_str().unwrap().to_string(),
    );
    let seq2 = items[1]["seq"].as_i64().unwrap();
    let (st, v) = post!(
        env,
        &john,
        "/v1/ack",
        json!({"seq": seq, "cookie": "a".repeat(26)})
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "bad_cookie"));
    let (st, v) = post!(
        env,
        &john,
        "/v1/ack",
        json!({"seq": seq2, "cookie": cookie})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::FORBIDDEN, "bad_cookie"),
        "another probe's cookie"
    );
    let (st, v) = post!(
        env,
        &other,
        "/v1/ack",
        json!({"seq": seq, "cookie": cookie})
    );
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (st, v) = post!(env, &john, "/v1/ack", json!({"seq": 999, "cookie": cookie}));
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    assert_eq!(inbox(&mut env, &john).await.len(), 2, "nothing released");

    let (st, v) = post!(
        env,
        &john,
        "/v1/ack",
        json!({"seq": seq, "cookie": cookie.to_ascii_uppercase()})
    );
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"status": "released", "seq": seq, "request_id": ID,
               "requester": requester().id().as_str(), "mailbox": JOHN, "via": "api"})
    );
    // Idempotent: the same answer, no second release.
    let (st, v2) = post!(env, &john, "/v1/ack", json!({"seq": seq, "cookie": cookie}));
    assert_eq!((st, &v2), (StatusCode::OK, &v));
    let items = inbox(&mut env, &john).await;
    assert_eq!(items.len(), 3);
    assert_eq!(
        (&items[0]["status"], &items[1]["status"]),
        (&json!("released"), &json!("pending"))
    );
    assert_eq!(
        (&items[2]["kind"], &items[2]["via"], &items[2]["probe_seq"]),
        (&json!("release"), &json!("api"), &json!(seq))
    );

    // The stream announces releases as `event: release`.
    let (req, _) = env.signed_request(
        &john,
        "GET",
        &format!("/v1/inbox/stream?after={}", items[1]["seq"]),
        b"",
    );
    let res = env.router.clone().oneshot(req).await.unwrap();
    let mut body = res.into_body();
    let mut text = String::new();
    while !text.contains("event: release") {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Ok(d) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&d));
        }
    }
    assert!(text.contains(&format!("id: {}", items[2]["seq"])), "{text}");

    // Past the probe lifetime: 410 expired, even with the right cookie.
    let c2 = items[1]["cookie"].as_str().unwrap().to_string();
    env.clock.advance(DAY * 14);
    let (st, v) = post!(env, &john, "/v1/ack", json!({"seq": seq2, "cookie": c2}));
    assert_eq!((st, code(&v)), (StatusCode::GONE, "expired"));
    // Nor can it be answered any more.
    let g = grant(&env, ID2, &requester(), &john);
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq2, "grant": g})
    );
    assert_eq!((st, code(&v)), (StatusCode::GONE, "expired"));
    env.teardown().await;
}

both!(echo_attempts_are_limited);
/// Echoes by mail are not deduped (a release is idempotent), so attempts
/// are counted per sender address (`limits.per_sender`).
async fn echo_attempts_are_limited(b: Backend) {
    let mut env = Env::new(b, |c| {
        flows_on(c);
        c.limits.per_sender.max = 2;
    })
    .await;
    let john = recipient_agent();
    let token = env.enroll(&john, JOHN).await;
    let (st, _) = env
        .inbound(
            Some(&token),
            probe_mail(ID, JOHN, ALICE, TS, TransferEncoding::Base64),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let cookie = inbox(&mut env, &john).await[0]["cookie"]
        .as_str()
        .unwrap()
        .to_string();
    let echo = |c: &str| {
        let e = ProbeEcho::build(ID, john.id(), c, env.now(), &requester()).unwrap();
        common::compose(
            &e,
            JOHN,
            "bob@sender.test",
            TransferEncoding::QuotedPrintable,
        )
    };
    let (bad, good) = (echo(&"a".repeat(26)), echo(&cookie));
    for _ in 0..2 {
        let (st, v) = env.inbound(Some(&token), bad.clone()).await;
        assert_eq!(
            (st, &v["refusal"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!("bad_cookie"))
        );
    }
    let (st, v) = env.inbound(Some(&token), good.clone()).await;
    assert_eq!(
        (st, &v["refusal"]),
        (StatusCode::TOO_MANY_REQUESTS, &json!("rate_limited"))
    );
    assert_eq!(inbox(&mut env, &john).await[0]["status"], "pending");
    env.clock.advance(DAY);
    let (st, v) = env.inbound(Some(&token), good).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(inbox(&mut env, &john).await[0]["status"], "released");
    env.teardown().await;
}

both!(probe_checks_and_limits);
async fn probe_checks_and_limits(b: Backend) {
    let mut env = Env::new(b, |c| {
        flows_on(c);
        c.flows.sends_per_day = 2;
    })
    .await;
    let alice = requester();
    env.enroll(&alice, ALICE).await;
    let send = |to: &str, req: Value| json!({"to": to, "request": req});
    let p = "/v1/send/probe";

    let (st, v) = post!(
        env,
        &alice,
        p,
        send("not-an-address", request(ID, JOHN, TS))
    );
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "bad_mailbox"));
    let (st, v) = post!(env, &alice, p, json!({"to": JOHN}));
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "malformed"));
    let mut tampered = request(ID, JOHN, TS);
    tampered["greeting"] = json!("changed");
    let (st, v) = post!(env, &alice, p, send(JOHN, tampered));
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "bad_document")
    );
    let (st, v) = post!(env, &alice, p, send(DANA, request(ID, JOHN, TS)));
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "to_hint")
    );
    let john = recipient_agent();
    env.enroll(&john, JOHN).await;
    let (st, v) = post!(env, &john, p, send(JOHN, request(ID, JOHN, TS)));
    assert_eq!(
        (st, code(&v)),
        (StatusCode::FORBIDDEN, "wrong_signer"),
        "Alice's request sent by John"
    );
    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": JOHN, "request": request(ID, JOHN, TS), "from_mailbox": JOHN})
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "not_your_mailbox"));
    assert_eq!(env.mailer.sent().len(), 2, "only the two proof mails");

    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": JOHN, "request": request(ID, JOHN, TS), "from_mailbox": ALICE})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    // One probe per (caller, address) per 30 days, across a restart.
    env.clock.advance(DAY);
    env.restart().await;
    let (st, ra, v) = raw!(
        env,
        &alice,
        p,
        &send(JOHN, request(ID2, JOHN, &now_str(&env)))
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::TOO_MANY_REQUESTS, "address_limited")
    );
    assert_eq!(v["retry_after"], json!(29 * 86400));
    assert_eq!(ra.as_deref(), Some("2505600"));
    // Another caller may probe the same address.
    let carol = AgentKey::from_seed([23; 32]);
    env.enroll(&carol, "carol@sender.test").await;
    let req_c = rdv_proto::doc::request::RequestBuilder {
        id: ID3.into(),
        to_hint: Some(JOHN.into()),
        card: card(&carol),
        greeting: "hi".into(),
        capabilities_offered: vec![],
        ts: env.now(),
    }
    .sign(&carol)
    .unwrap();
    let (st, v) = post!(env, &carol, p, send(JOHN, req_c));
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    // The daily cap (2 here): Alice's next two addresses pass, the third does not.
    for (id, to) in [(ID2, DANA), (ID3, "eve@doe.test")] {
        let (st, v) = post!(env, &alice, p, send(to, request(id, to, &now_str(&env))));
        assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    }
    let (st, ra, v) = raw!(
        env,
        &alice,
        p,
        &send("fay@doe.test", request(ID4, "fay@doe.test", &now_str(&env)))
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    assert!(ra.is_some() && v["retry_after"].as_i64().unwrap() > 0);
    // After 30 days John may be probed again by Alice.
    env.clock.advance(DAY * 29);
    let (st, v) = post!(
        env,
        &alice,
        p,
        send(JOHN, request(ID4, JOHN, &now_str(&env)))
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    // The purge drops sends past their window: the limits still hold after it.
    env.state
        .store()
        .purge(env.now().unix_timestamp(), 86400)
        .await
        .unwrap();
    let (st, v) = post!(
        env,
        &alice,
        p,
        send(JOHN, request(ID, JOHN, &now_str(&env)))
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::TOO_MANY_REQUESTS, "address_limited")
    );
    env.teardown().await;
}

both!(failed_mail_consumes_no_limit);
async fn failed_mail_consumes_no_limit(b: Backend) {
    let mut env = Env::new(b, |c| {
        flows_on(c);
        c.flows.sends_per_day = 1;
    })
    .await;
    let (alice, john) = (requester(), recipient_agent());
    env.enroll(&alice, ALICE).await;
    let token = env.enroll(&john, JOHN).await;
    env.inbound(
        Some(&token),
        probe_mail(ID2, JOHN, ALICE, TS, TransferEncoding::Base64),
    )
    .await;
    let seq = inbox(&mut env, &john).await[0]["seq"].as_i64().unwrap();
    env.restart_with_mailer(Arc::new(FailingMailer)).await;
    let body = json!({"to": JOHN, "request": request(ID, JOHN, TS)});
    for _ in 0..2 {
        let (st, v) = post!(env, &alice, "/v1/send/probe", body.clone());
        assert_eq!(
            (st, code(&v)),
            (StatusCode::SERVICE_UNAVAILABLE, "mail_unavailable")
        );
    }
    let g = grant(&env, ID2, &alice, &john);
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": g})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "mail_unavailable")
    );
    let inv = invite(&env, INV, DANA, &alice);
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": DANA, "source": SOURCE, "invite": inv})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "mail_unavailable")
    );
    env.restart().await;
    // Nothing was consumed: each goes through now (per-day cap 1 each).
    let (st, v) = post!(env, &alice, "/v1/send/probe", body);
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(inbox(&mut env, &john).await[0]["status"], "pending");
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": g})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    env.clock.advance(DAY);
    let inv = invite(&env, INV, DANA, &alice);
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": DANA, "source": SOURCE, "invite": inv})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    env.teardown().await;
}

both!(invites);
async fn invites(b: Backend) {
    let mut env = Env::new(b, |c| {
        flows_on(c);
        c.flows.invites_per_address_per_30d = 2;
    })
    .await;
    let alice = requester();
    env.enroll(&alice, ALICE).await;
    let dana_agent = AgentKey::from_seed([24; 32]);
    let dana_token = env.enroll(&dana_agent, DANA).await;
    let ga_a = gateway_address(&mut env, &alice, ALICE).await;
    let p = "/v1/send/invite";
    let note = "Hi Dana, it's Alice from the book club (I have your address from the club list).";

    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice), "note": "x".repeat(2001)})
    );
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "bad_note"));
    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice), "note": "---BEGIN RDV/1---"})
    );
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "bad_note"));
    // §5.2.2: the invite states where the sender got the address; without
    // a source there is no invite.
    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": DANA, "invite": invite(&env, INV, DANA, &alice), "note": note})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::BAD_REQUEST, "malformed"),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("source"), "{v}");
    for bad in ["", "   ", "a\nb", "---END RDV/1---", &"x".repeat(201)] {
        let (st, v) = post!(
            env,
            &alice,
            p,
            json!({"to": DANA, "source": bad, "invite": invite(&env, INV, DANA, &alice)})
        );
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "bad_source"),
            "{bad:?}"
        );
    }
    let (st, v) = post!(
        env,
        &dana_agent,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice)})
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "wrong_signer"));
    let mut tampered = invite(&env, INV, DANA, &alice);
    tampered["token"] = json!("other");
    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": tampered})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "bad_document")
    );
    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": JOHN, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice)})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "to_hint")
    );

    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice), "note": note})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!((&v["id"], &v["to"]), (&json!(INV), &json!(DANA)));
    let m = env.mailer.sent().last().unwrap().clone();
    let block = check_mail(&m, "[RDV-INVITE]", "X-Rdv-Invite", &ga_a, DANA);
    assert_eq!(block["id"], INV);
    let unsub = header(&m.raw, "List-Unsubscribe").unwrap();
    let token = unsub
        .split("mailto:optout+")
        .nth(1)
        .unwrap()
        .split('@')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        unsub,
        format!("<mailto:optout+{token}@{DOMAIN}>, <https://gw.test/v1/optout/{token}>")
    );
    assert_eq!(
        header(&m.raw, "List-Unsubscribe-Post").unwrap(),
        "List-Unsubscribe=One-Click"
    );
    let parsed = MessageParser::default().parse(&m.raw).unwrap();
    let text = parsed.body_text(0).unwrap();
    assert!(text.starts_with(note), "{text}");
    assert!(
        text.contains(&format!("Where I got your address: {SOURCE}.")),
        "{text}"
    );
    assert!(text.contains("sent by my AI assistant"));
    // The explainer link, besides the opt-out (§5.2.2).
    assert!(text.contains("https://gw.test/v1/about"), "{text}");
    assert!(text.contains(&format!("https://gw.test/v1/optout/{token}")));
    // Dana's agent exists: the gate admits the invite (List-Unsubscribe is
    // not list traffic).
    let (st, v) = env.inbound(Some(&dana_token), m.raw.clone()).await;
    assert_eq!(
        (st, &v["kind"]),
        (StatusCode::ACCEPTED, &json!("invite")),
        "{v}"
    );

    // One pending invite per (caller, address).
    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV2, DANA, &alice)})
    );
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "invite_pending"));
    // Status: refusals, then declined, which starts the cooldown.
    let sp = |id: &str| format!("/v1/invites/{id}/status");
    let (st, v) = post!(env, &alice, &sp(INV), json!({"status": "maybe"}));
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "malformed"));
    let (st, v) = post!(env, &alice, &sp(INV3), json!({"status": "declined"}));
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (st, v) = post!(env, &dana_agent, &sp(INV), json!({"status": "declined"}));
    assert_eq!(
        (st, code(&v)),
        (StatusCode::NOT_FOUND, "not_found"),
        "another key's invite"
    );
    let (st, v) = post!(env, &alice, &sp(INV), json!({"status": "declined"}));
    assert_eq!(
        (st, &v),
        (StatusCode::OK, &json!({"id": INV, "status": "declined"}))
    );
    let (st, _) = post!(env, &alice, &sp(INV), json!({"status": "declined"}));
    assert_eq!(st, StatusCode::OK, "the same answer again");
    let (st, v) = post!(env, &alice, &sp(INV), json!({"status": "accepted"}));
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "already_answered"));
    env.clock.advance(DAY * 10);
    env.restart().await;
    let (st, ra, v) = raw!(
        env,
        &alice,
        p,
        &json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV2, DANA, &alice)})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::TOO_MANY_REQUESTS, "address_limited")
    );
    assert_eq!(
        (v["retry_after"].as_i64(), ra.as_deref()),
        (Some(20 * 86400), Some("1728000"))
    );

    // Silence: after the 30-day pending window, a 30-day cooldown.
    let (st, _) = post!(
        env,
        &alice,
        p,
        json!({"to": JOHN, "source": SOURCE, "invite": invite(&env, INV3, JOHN, &alice)})
    );
    assert_eq!(st, StatusCode::ACCEPTED);
    env.clock.advance(DAY * 31);
    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": JOHN, "source": SOURCE, "invite": invite(&env, INV4, JOHN, &alice)})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::TOO_MANY_REQUESTS, "address_limited")
    );
    assert_eq!(v["retry_after"], json!(29 * 86400));
    // Dana's cooldown is over (declined 41 days ago).
    let (st, v) = post!(
        env,
        &alice,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV2, DANA, &alice)})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let (st, _) = post!(env, &alice, &sp(INV2), json!({"status": "accepted"}));
    assert_eq!(st, StatusCode::OK);

    // The global cap (2 per address per 30 days, all callers): Bob's is the second, Carol's the third.
    let bob = AgentKey::from_seed([25; 32]);
    let carol = AgentKey::from_seed([26; 32]);
    env.enroll(&bob, "bob@sender.test").await;
    env.enroll(&carol, "carol@sender.test").await;
    let (st, v) = post!(
        env,
        &bob,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV3, DANA, &bob)})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let (st, v) = post!(
        env,
        &carol,
        p,
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV4, DANA, &carol)})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::TOO_MANY_REQUESTS, "address_limited")
    );
    assert_eq!(v["retry_after"], json!(30 * 86400));
    env.teardown().await;
}

both!(opt_out);
async fn opt_out(b: Backend) {
    let mut env = Env::new(b, flows_rejecting_unknown).await;
    let alice = requester();
    env.enroll(&alice, ALICE).await;
    let (st, _) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice)})
    );
    assert_eq!(st, StatusCode::ACCEPTED);
    let m = env.mailer.sent().last().unwrap().clone();
    let unsub = header(&m.raw, "List-Unsubscribe").unwrap();
    let url = unsub
        .split("<https://gw.test")
        .nth(1)
        .unwrap()
        .trim_end_matches('>')
        .to_string();
    assert!(url.starts_with("/v1/optout/"));
    let get = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();

    // GET shows a confirm form and records nothing (scanners prefetch).
    let (st, v) = env.send(get(&url)).await;
    assert_eq!(st, StatusCode::OK);
    let page = v.as_str().unwrap();
    assert!(page.contains("<form method=\"post\">"), "{page}");
    assert!(page.contains("One-Click"), "{page}");
    let probe =
        |env: &Env, id: &str| json!({"to": DANA, "request": request(id, DANA, &now_str(env))});
    let (st, v) = post!(env, &alice, "/v1/send/probe", probe(&env, ID));
    assert_eq!(st, StatusCode::ACCEPTED, "a GET did not opt out: {v}");

    // A bad token: 404 bad_token, GET and POST.
    let bad = format!("{url}zz");
    let (st, v) = env.send(get(&bad)).await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "bad_token"));
    let (st, v) = env
        .send(Request::post(&bad).body(Body::empty()).unwrap())
        .await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "bad_token"));

    // The RFC 8058 one-click POST records it.
    let one_click = Request::post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("List-Unsubscribe=One-Click"))
        .unwrap();
    let (st, v) = env.send(one_click).await;
    assert_eq!(st, StatusCode::OK);
    assert!(v.as_str().unwrap().contains("Done"));
    env.restart().await;
    env.clock.advance(DAY * 60);
    let (st, v) = post!(env, &alice, "/v1/send/probe", probe(&env, ID2));
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "opted_out"));
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": "Dana@Doe.test", "source": SOURCE, "invite": invite(&env, INV2, DANA, &alice)})
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "opted_out"));
    // JSON when asked for; idempotent.
    let (st, v) = env
        .send(
            Request::post(&url)
                .header("accept", "application/json")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!((st, v), (StatusCode::OK, json!({"status": "opted_out"})));

    // Mail to optout+TOKEN@domain records it too; its content is discarded.
    let eve = "eve@doe.test";
    let (st, _) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": eve, "source": SOURCE, "invite": invite(&env, INV3, eve, &alice)})
    );
    assert_eq!(st, StatusCode::ACCEPTED);
    let m = env.mailer.sent().last().unwrap().clone();
    let unsub = header(&m.raw, "List-Unsubscribe").unwrap();
    let mailto = unsub
        .split("<mailto:")
        .nth(1)
        .unwrap()
        .split('>')
        .next()
        .unwrap()
        .to_string();
    let (addr, stop) = listen(&env).await;
    let tok = mailto
        .strip_prefix("optout+")
        .unwrap()
        .split('@')
        .next()
        .unwrap();
    let r = smtp_send(
        &env,
        addr,
        &format!("optout+{tok}zz@{DOMAIN}"),
        b"Subject: x\r\n\r\nstop\r\n",
    )
    .await;
    assert_eq!(reply_code(&r[1]), 550, "a bad token is no recipient: {r:?}");
    let r = smtp_send(
        &env,
        addr,
        &mailto.to_ascii_uppercase(),
        b"Subject: unsubscribe\r\n\r\nstop\r\n",
    )
    .await;
    assert_eq!((reply_code(&r[1]), reply_code(&r[2])), (250, 250), "{r:?}");
    assert!(r[2][1].as_str().unwrap().contains("Opt-out"));
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/probe",
        json!({"to": eve, "request": request(ID3, eve, &now_str(&env))})
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "opted_out"));
    let _ = stop.send(true);
    env.teardown().await;
}

/// The opt-out token of the previous scheme (base32 of the address, a dot,
/// a 10-byte MAC under a key derived from the master secret).
fn old_format_token(addr: &str) -> String {
    use hmac::Mac;
    let hk = hkdf::Hkdf::<sha2::Sha256>::new(None, &[0x42; 32]);
    let mut k = [0u8; 32];
    hk.expand(b"rdv1/gw/optout-token", &mut k).unwrap();
    let mut m = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(&k).unwrap();
    m.update(addr.as_bytes());
    let mac = m.finalize().into_bytes();
    let b32 = |b: &[u8]| data_encoding::BASE32_NOPAD.encode(b).to_ascii_lowercase();
    format!("{}.{}", b32(addr.as_bytes()), b32(&mac[..10]))
}

/// The opt-out token of the last invite's List-Unsubscribe mailto.
fn last_optout_token(env: &Env) -> String {
    let m = env.mailer.sent().last().unwrap().clone();
    let unsub = header(&m.raw, "List-Unsubscribe").unwrap();
    unsub
        .split("mailto:optout+")
        .nth(1)
        .unwrap()
        .split('@')
        .next()
        .unwrap()
        .to_string()
}

both!(opt_out_survives_rotation);
/// §5.2.2 "permanent opt-out honored": tokens are short and address-free,
/// forged and old-format tokens are refused, and an opt-out still blocks
/// probes and invites after the master secret is rotated (the address key
/// is not).
async fn opt_out_survives_rotation(b: Backend) {
    let mut env = Env::new(b, flows_rejecting_unknown).await;
    let alice = requester();
    env.enroll(&alice, ALICE).await;
    // The address key file was created with mode 0600 on first start.
    let key_file = env.dir.path().join("address-key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert!(std::fs::read_to_string(&key_file).unwrap().trim().len() >= 64);

    // A long address (64-octet local part): the token stays short, the
    // mailto local part within RFC 5321's 64 octets, and neither the
    // header nor the link carries the address.
    let long = format!("{}@{}.example", "l".repeat(64), "d".repeat(60));
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": long, "source": SOURCE, "invite": invite(&env, INV, &long, &alice)})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let tok = last_optout_token(&env);
    assert!(tok.len() <= 40, "{tok}");
    assert!(format!("optout+{tok}").len() <= 64);
    let m = env.mailer.sent().last().unwrap().clone();
    let unsub = header(&m.raw, "List-Unsubscribe").unwrap();
    let b32 = data_encoding::BASE32_NOPAD
        .encode(long.as_bytes())
        .to_ascii_lowercase();
    assert!(
        !unsub.contains(&long) && !unsub.contains(&b32[..20]),
        "{unsub}"
    );

    let (st, _) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV2, DANA, &alice)})
    );
    assert_eq!(st, StatusCode::ACCEPTED);
    let tok = last_optout_token(&env);
    let get = |t: &str| {
        Request::get(format!("/v1/optout/{t}"))
            .body(Body::empty())
            .unwrap()
    };
    let post_json = |t: &str| {
        Request::post(format!("/v1/optout/{t}"))
            .header("accept", "application/json")
            .body(Body::empty())
            .unwrap()
    };
    // The confirm page names no address.
    let (st, v) = env.send(get(&tok)).await;
    assert_eq!(st, StatusCode::OK);
    let page = v.as_str().unwrap();
    assert!(
        page.contains("this address") && !page.contains("dana"),
        "{page}"
    );

    // Random, forged (one character changed) and old-format tokens: 404.
    let mut forged = tok.clone().into_bytes();
    forged[10] = if forged[10] == b'a' { b'b' } else { b'a' };
    let forged = String::from_utf8(forged).unwrap();
    let random = data_encoding::BASE32_NOPAD
        .encode(&[0x5a; 21])
        .to_ascii_lowercase();
    assert_eq!(random.len(), tok.len());
    let old = old_format_token(DANA);
    for bad in [&forged, &random, &old] {
        let (st, v) = env.send(get(bad)).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::NOT_FOUND, "bad_token"),
            "{bad}"
        );
        let (st, v) = env.send(post_json(bad)).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::NOT_FOUND, "bad_token"),
            "{bad}"
        );
    }
    let (addr, stop) = listen(&env).await;
    let r = smtp_send(
        &env,
        addr,
        &format!("optout+{old}@{DOMAIN}"),
        b"Subject: x\r\n\r\nstop\r\n",
    )
    .await;
    assert_eq!(reply_code(&r[1]), 550, "an old-format token: {r:?}");
    let _ = stop.send(true);
    let probe =
        |env: &Env, id: &str| json!({"to": DANA, "request": request(id, DANA, &now_str(env))});
    let (st, v) = post!(env, &alice, "/v1/send/probe", probe(&env, ID));
    assert_eq!(st, StatusCode::ACCEPTED, "no opt-out recorded yet: {v}");

    // Dana opts out; then the master secret is rotated (the previous one
    // retired long ago, so nothing of it is used) and the gateway restarts.
    let (st, v) = env.send(post_json(&tok)).await;
    assert_eq!((st, v), (StatusCode::OK, json!({"status": "opted_out"})));
    env.cookies = rdv_probe_gateway::cookie::CookieKeys {
        current: rdv_probe_gateway::cookie::MasterSecret::new(vec![0x43; 32]).unwrap(),
        previous: Some((secret(), t("2020-01-01T00:00:00Z"))),
    };
    env.clock.advance(DAY * 400);
    env.restart().await;
    let (st, v) = post!(env, &alice, "/v1/send/probe", probe(&env, ID2));
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "opted_out"));
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": "DANA@doe.test", "source": SOURCE, "invite": invite(&env, INV3, DANA, &alice)})
    );
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "opted_out"));
    // The link still works (idempotent) under the new master secret.
    let (st, _) = env.send(post_json(&tok)).await;
    assert_eq!(st, StatusCode::OK);
    // Others are not opted out.
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/probe",
        json!({"to": JOHN, "request": request(ID3, JOHN, &now_str(&env))})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    env.teardown().await;
}

/// A bad address key file stops the gateway, naming the file, never its content.
#[tokio::test]
async fn bad_address_key_file_is_refused() {
    use rdv_probe_gateway::clock::{CountingEntropy, ManualClock};
    use rdv_probe_gateway::gate::AuthBackend;
    use rdv_probe_gateway::http::{AppState, Deps};
    use rdv_probe_gateway::mailer::RecordingMailer;
    let env = Env::new(Backend::Sqlite, flows_on).await;
    let bad = env.dir.path().join("bad-key");
    std::fs::write(&bad, "not-hex-SECRETCONTENT\n").unwrap();
    let short = env.dir.path().join("short-key");
    std::fs::write(&short, "abcd\n").unwrap();
    for f in [bad, short] {
        let mut cfg = env.cfg.clone();
        cfg.address_key_file = Some(f.clone());
        let deps = Deps {
            store: env.state.store().clone(),
            clock: Arc::new(ManualClock::new(env.now())),
            entropy: Arc::new(CountingEntropy::default()),
            mailer: Arc::new(RecordingMailer::default()),
            backend: AuthBackend::Trusted(vec![]),
            cookies: cookie_keys(),
        };
        let e = AppState::try_new(cfg, deps).err().unwrap().to_string();
        assert!(e.contains("address key"), "{e}");
        assert!(e.contains(&f.display().to_string()), "{e}");
        assert!(!e.contains("SECRETCONTENT"), "{e}");
    }
    env.teardown().await;
}

/// The raw From header of a mail, folded lines and all.
fn raw_from(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::new();
    for (i, line) in text.split("\r\n").enumerate() {
        if i == 0 {
            assert!(line.starts_with("From: "), "{line}");
        } else if !line.starts_with(' ') {
            break;
        }
        assert!(line.len() <= 78, "a From line of {} characters", line.len());
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn from_name_of(raw: &[u8]) -> (Option<String>, Option<String>) {
    let p = MessageParser::default().parse(raw).unwrap();
    let f = p.from().unwrap().first().unwrap();
    (
        f.name.as_deref().map(str::to_string),
        f.address.as_deref().map(str::to_string),
    )
}

both!(from_name_display);
/// `from_name` in the send bodies: the From shows `"<name>'s agent"
/// <gateway address>` (RFC 2047 when not ASCII), the envelope stays bare,
/// and bad names are refused 400 `bad_name`.
async fn from_name_display(b: Backend) {
    let mut env = Env::new(b, flows_on).await;
    let (alice, john) = (requester(), recipient_agent());
    env.enroll(&alice, ALICE).await;
    env.enroll(&john, JOHN).await;
    let ga_a = gateway_address(&mut env, &alice, ALICE).await;
    let ga_j = gateway_address(&mut env, &john, JOHN).await;
    let probe = |id: &str, name: &str| json!({"to": JOHN, "request": request(id, JOHN, TS), "from_name": name});
    let sent_before = env.mailer.sent().len();
    for bad in [
        String::new(),
        "x".repeat(65),
        "Eve\" <ceo@bank.test>".into(),
        "a<b".into(),
        "a>b".into(),
        "a\\b".into(),
        "Dana\r\nBcc: x@y.test".into(),
        "Dana\n".into(),
        " Dana".into(),
        "\u{202e}Dana".into(),
        "Da\u{7}na".into(),
    ] {
        let (st, v) = post!(env, &alice, "/v1/send/probe", probe(ID, &bad));
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "bad_name"),
            "{bad:?}"
        );
        let (st, v) = post!(
            env,
            &alice,
            "/v1/send/invite",
            json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice), "from_name": bad})
        );
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "bad_name"),
            "{bad:?}"
        );
    }
    assert_eq!(env.mailer.sent().len(), sent_before, "nothing sent");

    // Not ASCII: RFC 2047 encoded-words that mail-parser reads back.
    let (st, v) = post!(env, &alice, "/v1/send/probe", probe(ID, "Dána Ørsted"));
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let m = env.mailer.sent().last().unwrap().clone();
    assert_eq!(
        from_name_of(&m.raw),
        (Some("Dána Ørsted's agent".into()), Some(ga_a.clone()))
    );
    assert!(
        raw_from(&m.raw).contains("=?utf-8?B?"),
        "{}",
        raw_from(&m.raw)
    );
    assert_eq!(m.envelope_from, ga_a);
    check_mail(&m, "[RDV-PROBE]", "X-Rdv-Probe", &ga_a, JOHN);
    // The gate admits it; the sender is the bare address.
    let (addr, stop) = listen(&env).await;
    let r = smtp_send(&env, addr, JOHN, &m.raw).await;
    assert_eq!(reply_code(&r[2]), 250, "{r:?}");
    let item = inbox(&mut env, &john).await[0].clone();
    assert_eq!(item["sender"], json!(ga_a));
    // The longest name, four-byte characters: several folded words.
    let longest = "🦀".repeat(64);
    let (st, v) = post!(env, &alice, "/v1/send/probe", {
        let mut p = probe(ID2, &longest);
        p["to"] = json!(DANA);
        p["request"] = request(ID2, DANA, TS);
        p
    });
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let m = env.mailer.sent().last().unwrap().clone();
    assert!(raw_from(&m.raw).matches("=?utf-8?B?").count() > 3);
    assert_eq!(from_name_of(&m.raw).0, Some(format!("{longest}'s agent")));

    // ASCII: a quoted display name. SYN-ACK, ACK and invite take it too.
    let g = grant(&env, ID, &alice, &john);
    let seq = item["seq"].as_i64().unwrap();
    let (st, v) = post!(
        env,
        &john,
        "/v1/send/syn-ack",
        json!({"seq": seq, "grant": g, "from_name": "John Doe"})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let synack = env.mailer.sent().last().unwrap().clone();
    assert_eq!(
        raw_from(&synack.raw),
        format!("From: \"John Doe's agent\" <{ga_j}>\n")
    );
    assert_eq!(
        from_name_of(&synack.raw),
        (Some("John Doe's agent".into()), Some(ga_j.clone()))
    );
    let r = smtp_send(&env, addr, &synack.to, &synack.raw).await;
    assert_eq!(reply_code(&r[2]), 250, "{r:?}");
    let sa = inbox(&mut env, &alice)
        .await
        .into_iter()
        .find(|i| i["kind"] == "probe_ack")
        .unwrap();
    let echo = ProbeEcho::build(
        ID,
        john.id(),
        sa["payload"]["cookie"].as_str().unwrap(),
        env.now(),
        &alice,
    )
    .unwrap();
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/ack",
        json!({"seq": sa["seq"], "echo": echo, "from_name": "Alice"})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let ack = env.mailer.sent().last().unwrap().clone();
    assert_eq!(from_name_of(&ack.raw).0.as_deref(), Some("Alice's agent"));
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice), "from_name": "Alice"})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let inv = env.mailer.sent().last().unwrap().clone();
    assert_eq!(
        from_name_of(&inv.raw),
        (Some("Alice's agent".into()), Some(ga_a.clone()))
    );
    let _ = stop.send(true);
    env.teardown().await;
}

/// The sample config documents every `[flows]` key and parses.
#[test]
fn sample_config_documents_flows() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/probe-gateway/config.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let cfg = Config::from_toml(&text).unwrap();
    let section = text.split("\n[flows]").nth(1).expect("a [flows] section");
    let keys = serde_json::to_value(rdv_probe_gateway::flows::FlowConfig::default()).unwrap();
    for k in keys.as_object().unwrap().keys() {
        assert!(
            section.lines().any(|l| l
                .trim_start_matches(['#', ' '])
                .starts_with(&format!("{k} ="))),
            "[flows] {k} is not documented"
        );
    }
    cfg.flows.check().unwrap();
    // Bad values are refused.
    for bad in [
        "[flows]\nmail_domain = \"not a domain\"",
        "[flows]\naddress_local = \"optout\"",
        "[flows]\npublic_url = \"ftp://x\"",
        "[flows]\nexplainer_url = \"javascript:alert(1)\"",
        "[flows]\nprobe_interval_days = 0",
        "[flows]\nunknown = 1",
    ] {
        assert!(Config::from_toml(bad).is_err(), "{bad}");
    }
}

/// The OpenAPI document lists the flow endpoints.
#[tokio::test]
async fn openapi_lists_the_flows() {
    let env = Env::new(Backend::Sqlite, flows_on).await;
    let (st, v) = env
        .send(
            Request::get("/v1/openapi.json")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    for p in [
        "/v1/mailboxes",
        "/v1/send/probe",
        "/v1/send/syn-ack",
        "/v1/send/ack",
        "/v1/send/invite",
        "/v1/ack",
        "/v1/invites/{id}/status",
        "/v1/optout/{token}",
        "/v1/about",
    ] {
        assert!(v["paths"].get(p).is_some(), "{p}");
    }
    // Every schema a body refers to (the shared `rdv_gateway_client::wire`
    // types) is in the document.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    refs(&v, &mut found);
    assert!(
        found.iter().any(|r| r.ends_with("/InviteStatusBody")),
        "{found:?}"
    );
    for r in found {
        let name = r.trim_start_matches("#/components/schemas/");
        assert!(
            v["components"]["schemas"].get(name).is_some(),
            "{r} dangles"
        );
    }
    env.teardown().await;
}

/// §5.2.2 without a note: the invite still states the source and carries
/// the explainer link; an operator's own `explainer_url` replaces the
/// gateway's page; with neither a public URL nor an explainer URL no
/// invite goes out. The gateway serves the explainer itself.
#[tokio::test]
async fn noteless_invite_states_source_and_explainer() {
    let mut env = Env::new(Backend::Sqlite, |c| {
        flows_on(c);
        c.flows.explainer_url = Some("https://example.org/what-is-rendezvous".into());
    })
    .await;
    let alice = requester();
    env.enroll(&alice, ALICE).await;
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": DANA, "source": "Bob Jones.", "invite": invite(&env, INV, DANA, &alice)})
    );
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let m = env.mailer.sent().last().unwrap().clone();
    let parsed = MessageParser::default().parse(&m.raw).unwrap();
    let text = parsed.body_text(0).unwrap();
    assert_eq!(
        text.lines().next(),
        Some("Where I got your address: Bob Jones."),
        "{text}"
    );
    assert!(
        text.contains("https://example.org/what-is-rendezvous"),
        "{text}"
    );
    assert!(!text.contains("https://gw.test/v1/about"), "{text}");
    // The page itself: HTML, no script allowed.
    let res = env
        .router
        .clone()
        .oneshot(Request::get("/v1/about").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let csp = res.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let page = String::from_utf8(body.to_vec()).unwrap();
    assert!(page.contains("What does the token do?"), "{page}");
    assert!(!page.contains("<script"), "{page}");
    env.teardown().await;

    let mut env = Env::new(Backend::Sqlite, |c| {
        flows_on(c);
        c.flows.public_url = None;
    })
    .await;
    env.enroll(&alice, ALICE).await;
    let (st, v) = post!(
        env,
        &alice,
        "/v1/send/invite",
        json!({"to": DANA, "source": SOURCE, "invite": invite(&env, INV, DANA, &alice)})
    );
    assert_eq!(
        (st, code(&v)),
        (StatusCode::CONFLICT, "no_explainer_link"),
        "{v}"
    );
    env.teardown().await;
}
