//! The SMTP listener with a real SMTP client (Python's `smtplib`,
//! tests/python/smtp_client.py; `RDV_TEST_PYTHON` or `python3`), the
//! same suite on SQLite and on Postgres: a forwarded probe reaches the
//! agent's inbox through the pull API, SPF is checked against the session,
//! and every bound and bad sequence is refused with its RFC 5321 code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rdv_service_kit::both_backends as both;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::env::*;
use common::*;
use rdv_probe_gateway::auth::{Verifier, VerifyConfig};
use rdv_probe_gateway::config::{SmtpRefusals, UnknownRecipients};
use rdv_probe_gateway::gate::AuthBackend;
use rdv_probe_gateway::smtp;
use rdv_proto::mailblock::TransferEncoding;
use serde_json::{Value, json};
use tokio::sync::watch;

const ID: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const ID2: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02";
const ID3: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c03";
const MAILBOX: &str = "john@doe.test";
const SENDER: &str = "alice@sender.test";
const TS: &str = "2026-10-08T11:00:00Z";

fn probe(id: &str) -> Vec<u8> {
    probe_mail(id, MAILBOX, SENDER, TS, TransferEncoding::QuotedPrintable)
}

/// The SMTP listener over `env`'s state, on a free port (STARTTLS when
/// `env`'s configuration names a certificate).
async fn listen(env: &Env) -> (SocketAddr, watch::Sender<bool>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (stop, rx) = watch::channel(false);
    let tls = smtp::tls_acceptor(env.state.config()).unwrap();
    smtp::spawn(l, env.state.clone(), tls, rx);
    (addr, stop)
}

fn tls_file(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls")
        .join(name)
}

fn with_tls(c: &mut rdv_probe_gateway::config::Config) {
    c.smtp_tls_cert_file = Some(tls_file("cert.pem"));
    c.smtp_tls_key_file = Some(tls_file("key.pem"));
}

/// Runs the smtplib client: one result per step, after the greeting.
async fn client(addr: SocketAddr, steps: Value) -> Vec<Value> {
    let python = std::env::var("RDV_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/smtp_client.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg(script)
            .arg(addr.ip().to_string())
            .arg(addr.port().to_string())
            .arg(steps.to_string())
            .output()
            .unwrap_or_else(|e| panic!("{python}: {e}"))
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "smtp client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0][0], 220, "greeting: {v:?}");
    v[1..].to_vec()
}

fn code(v: &Value) -> i64 {
    v[0].as_i64().unwrap_or_else(|| panic!("not a reply: {v}"))
}

fn write_mail(env: &Env, name: &str, raw: &[u8]) -> String {
    let p = env.dir.path().join(name);
    std::fs::write(&p, raw).unwrap();
    p.display().to_string()
}

async fn inbox(env: &mut Env) -> Vec<Value> {
    let (st, v) = env
        .signed(&recipient_agent(), "GET", "/v1/inbox", b"")
        .await;
    assert_eq!(st, 200, "{v}");
    v["items"].as_array().unwrap().clone()
}

both!(probe_over_smtp_reaches_the_inbox);
async fn probe_over_smtp_reaches_the_inbox(b: Backend) {
    // Bounces wanted: gate refusals are 550 with their code.
    let mut env = Env::new(b, |c| c.smtp_refusals = SmtpRefusals::Reject).await;
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let mut raw = format!(
        "Authentication-Results: {AUTHSERV}; dkim=pass header.d=sender.test; dmarc=pass header.from=sender.test\r\n"
    )
    .into_bytes();
    raw.extend(probe(ID));
    let mail = write_mail(&env, "probe.eml", &raw);
    let r = client(
        addr,
        json!([
            ["ehlo", "mail.sender.test"],
            ["cmd", "MAIL FROM:<forwarder@provider.test>"],
            // The canonical form matches whatever case the envelope uses.
            ["cmd", "RCPT TO:<John@Doe.test>"],
            ["data_file", mail],
            ["quit"],
        ]),
    )
    .await;
    assert_eq!(code(&r[0]), 250);
    assert_eq!(
        r[0][2]["size"],
        json!(env.cfg.max_mail_bytes.to_string()),
        "SIZE is advertised"
    );
    assert_eq!((code(&r[1]), code(&r[2])), (250, 250), "{r:?}");
    assert_eq!(code(&r[3]), 250, "{r:?}");
    // No queue number: the gateway-wide sequence is nobody's business.
    assert_eq!(r[3][1], "2.0.0 OK", "{r:?}");
    assert_eq!(code(&r[4]), 221);

    let items = inbox(&mut env).await;
    assert_eq!(items.len(), 1);
    let it = &items[0];
    assert_eq!(
        (&it["kind"], &it["id"], &it["mailbox"], &it["sender"]),
        (&json!("probe"), &json!(ID), &json!(MAILBOX), &json!(SENDER))
    );
    assert_eq!(it["binding"], "weak_mailbox_proof");
    assert!(it["cookie"].is_string());

    // The same message again: the shared path's dedupe refuses it.
    let r = client(
        addr,
        json!([
            ["helo", "mail.sender.test"],
            ["cmd", "MAIL FROM:<>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", mail],
        ]),
    )
    .await;
    assert_eq!(code(&r[3]), 550, "{r:?}");
    assert!(r[3][1].as_str().unwrap().contains("duplicate"), "{r:?}");
    // A gate refusal (to_hint names another mailbox) is a 550 with its code.
    let jane = write_mail(
        &env,
        "jane.eml",
        &probe_mail(ID2, "jane@doe.test", SENDER, TS, TransferEncoding::Base64),
    );
    let r = client(
        addr,
        json!([
            ["ehlo", "x.test"],
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", jane],
        ]),
    )
    .await;
    assert_eq!(code(&r[3]), 550, "{r:?}");
    assert!(r[3][1].as_str().unwrap().contains("to_hint"), "{r:?}");
    assert_eq!(inbox(&mut env).await.len(), 1, "refused mail is not queued");
    let _ = stop.send(true);
    env.teardown().await;
}

/// The Prometheus text through the router.
async fn metrics_text(env: &Env) -> String {
    let (st, v) = env
        .send(
            axum::http::Request::get("/metrics")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(st, 200);
    v.as_str().unwrap().to_string()
}

/// A discarded refusal's counter value for `code` (0 when absent).
fn discarded(metrics: &str, code: &str) -> u64 {
    let key = format!("rdv_gateway_smtp_discarded_total{{refusal=\"{code}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |n| n.trim().parse().unwrap())
}

both!(gate_refusals_are_silent_by_default);
/// §5.2.1 "Silence": by default (`smtp_refusals = "discard"`) a gate
/// refusal is `250 2.0.0 OK` that names nothing and queues nothing, and is
/// counted by its code; temporary failures stay 451; an unknown recipient
/// is taken like a known one (`unknown_recipients_are_answered_alike`).
async fn gate_refusals_are_silent_by_default(b: Backend) {
    let mut env = Env::new(b, |c| c.limits.per_sender.max = 1).await;
    assert_eq!(env.cfg.smtp_refusals, SmtpRefusals::Discard);
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let before = metrics_text(&env).await;
    let mail = write_mail(&env, "probe.eml", &probe(ID));
    let jane = write_mail(
        &env,
        "jane.eml",
        &probe_mail(ID2, "jane@doe.test", SENDER, TS, TransferEncoding::Base64),
    );
    let third = write_mail(&env, "third.eml", &probe(ID3));
    let r = client(
        addr,
        json!([
            ["ehlo", "x.test"],
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", mail],
            // The same again: a duplicate.
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", mail],
            // to_hint names another mailbox.
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", jane],
            // Unknown recipients are taken as known ones are.
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<nobody@doe.test>"],
            ["cmd", "RSET"],
            // Over the per-sender limit (1 a day): temporary, 451.
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", third],
        ]),
    )
    .await;
    let codes: Vec<i64> = r.iter().map(code).collect();
    assert_eq!(
        codes,
        [
            250, 250, 250, 250, 250, 250, 250, 250, 250, 250, 250, 250, 250, 250, 250, 451
        ],
        "{r:?}"
    );
    for i in [3, 6, 9] {
        let text = r[i][1].as_str().unwrap();
        assert_eq!(text, "2.0.0 OK", "a discarded refusal says nothing: {r:?}");
    }
    assert_eq!(
        inbox(&mut env).await.len(),
        1,
        "discarded mail is not queued"
    );
    // Counted by refusal code (the recorder is shared by the tests of this
    // process, so compare with the count before).
    let after = metrics_text(&env).await;
    for c in ["duplicate", "to_hint"] {
        assert!(
            discarded(&after, c) > discarded(&before, c),
            "{c} not counted: {after}"
        );
    }
    let _ = stop.send(true);
    env.teardown().await;
}

both!(unknown_recipients_are_answered_alike);
/// §5.2.1 "Silence", §9: by default a mailbox with no registered agent
/// gets exactly the answers a registered one gets (RCPT 250, DATA 250 with
/// no queue number), so a bounce can never tell a sender whether an
/// address has an agent; the mail is dropped and counted. Whether the
/// message is admitted or refused by the gate, the sender sees the same.
async fn unknown_recipients_are_answered_alike(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    assert_eq!(env.cfg.smtp_unknown_recipients, UnknownRecipients::Accept);
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let before = metrics_text(&env).await;
    let to_john = write_mail(&env, "john.eml", &probe(ID));
    let to_jane = write_mail(
        &env,
        "jane.eml",
        &probe_mail(ID2, "jane@doe.test", SENDER, TS, TransferEncoding::Base64),
    );
    let session = |rcpt: &str, mail: &str| {
        json!([
            ["ehlo", "x.test"],
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", format!("RCPT TO:<{rcpt}>")],
            ["data_file", mail],
            // A gate refusal for the registered mailbox: the same mail again.
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", format!("RCPT TO:<{rcpt}>")],
            ["data_file", mail],
        ])
    };
    let known = client(addr, session(MAILBOX, &to_john)).await;
    let unknown = client(addr, session("jane@doe.test", &to_jane)).await;
    let replies = |r: &[Value]| -> Vec<(i64, Value)> {
        r[1..].iter().map(|s| (code(s), s[1].clone())).collect()
    };
    assert_eq!(
        replies(&known),
        replies(&unknown),
        "{known:?} / {unknown:?}"
    );
    assert_eq!(
        replies(&known),
        vec![
            (250, json!("2.1.0 OK")),
            (250, json!("2.1.5 OK")),
            (250, json!("2.0.0 OK")),
            (250, json!("2.1.0 OK")),
            (250, json!("2.1.5 OK")),
            (250, json!("2.0.0 OK")),
        ]
    );
    // Only the registered mailbox's first message was queued.
    assert_eq!(inbox(&mut env).await.len(), 1);
    let after = metrics_text(&env).await;
    assert!(
        discarded(&after, "not_for_mailbox") >= discarded(&before, "not_for_mailbox") + 2,
        "mail for nobody is counted: {after}"
    );
    let _ = stop.send(true);
    env.teardown().await;

    // The operator's opt-in keeps the difference: 550 5.1.1 at RCPT.
    let env = Env::new(b, |c| {
        c.smtp_unknown_recipients = UnknownRecipients::Reject;
    })
    .await;
    let (addr, stop) = listen(&env).await;
    let to_jane = write_mail(
        &env,
        "jane.eml",
        &probe_mail(ID2, "jane@doe.test", SENDER, TS, TransferEncoding::Base64),
    );
    let r = client(addr, session("jane@doe.test", &to_jane)).await;
    assert_eq!(
        (code(&r[2]), r[2][1].clone()),
        (550, json!("5.1.1 No such mailbox here"))
    );
    let _ = stop.send(true);
    env.teardown().await;
}

both!(a_flooding_sender_meets_the_same_limit_anywhere);
/// §5.2.1 "Silence", §9: a sender over `limits.per_sender` gets the same
/// `451` whether the mailbox has an agent or not (mail for nobody runs the
/// gate and counts against the limits, and is never queued), so flooding
/// an address tells nothing about it. Each sender floods one address.
async fn a_flooding_sender_meets_the_same_limit_anywhere(b: Backend) {
    let mut env = Env::new(b, |c| c.limits.per_sender.max = 2).await;
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let flood = |env: &Env, to: &str, from: &str, ids: [&str; 3]| {
        let mut steps = vec![json!(["ehlo", "x.test"])];
        for (i, id) in ids.into_iter().enumerate() {
            let raw = probe_mail(id, to, from, TS, TransferEncoding::Base64);
            let file = write_mail(env, &format!("{to}-{i}.eml"), &raw);
            steps.push(json!(["cmd", format!("MAIL FROM:<{from}>")]));
            steps.push(json!(["cmd", format!("RCPT TO:<{to}>")]));
            steps.push(json!(["data_file", file]));
        }
        Value::Array(steps)
    };
    let known = client(addr, flood(&env, MAILBOX, SENDER, [ID, ID2, ID3])).await;
    let unknown = client(
        addr,
        flood(
            &env,
            "jane@doe.test",
            "bob@sender.test",
            [
                "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c04",
                "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c05",
                "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c06",
            ],
        ),
    )
    .await;
    let replies = |r: &[Value]| -> Vec<(i64, Value)> {
        r[1..].iter().map(|s| (code(s), s[1].clone())).collect()
    };
    assert_eq!(
        replies(&known),
        replies(&unknown),
        "{known:?} / {unknown:?}"
    );
    let data: Vec<(i64, Value)> = replies(&unknown).into_iter().skip(2).step_by(3).collect();
    assert_eq!(
        data,
        vec![
            (250, json!("2.0.0 OK")),
            (250, json!("2.0.0 OK")),
            (451, json!("4.7.1 Refused: rate_limited, try again later")),
        ]
    );
    // Only the registered mailbox's two admitted probes were queued.
    assert_eq!(inbox(&mut env).await.len(), 2);
    let _ = stop.send(true);
    env.teardown().await;
}

both!(oversize_data_is_refused_552);
async fn oversize_data_is_refused_552(b: Backend) {
    let mut env = Env::new(b, |c| c.max_mail_bytes = 16 * 1024).await;
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let mail = write_mail(&env, "probe.eml", &probe(ID));
    let r = client(
        addr,
        json!([
            ["ehlo", "x.test"],
            // Declared too large: refused at MAIL.
            ["cmd", "MAIL FROM:<a@x.test> SIZE=16385"],
            ["cmd", "MAIL FROM:<a@x.test> SIZE=16384"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            // Undeclared and too large: read to the end, refused, not kept.
            ["data_bytes", 200_000],
            // The session goes on: a fitting message is accepted.
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", mail],
        ]),
    )
    .await;
    assert_eq!(r[0][2]["size"], json!("16384"));
    let codes: Vec<i64> = r.iter().map(code).collect();
    assert_eq!(codes, [250, 552, 250, 250, 552, 250, 250, 250], "{r:?}");
    assert_eq!(inbox(&mut env).await.len(), 1);
    let _ = stop.send(true);
    env.teardown().await;
}

both!(one_known_recipient_only);
async fn one_known_recipient_only(b: Backend) {
    // The operator's opt-in: unknown recipients refused at RCPT.
    let mut env = Env::new(b, |c| {
        c.smtp_unknown_recipients = UnknownRecipients::Reject;
    })
    .await;
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let r = client(
        addr,
        json!([
            ["ehlo", "x.test"],
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<nobody@doe.test>"],
            ["cmd", "RCPT TO:<not an address>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["cmd", "RCPT TO:<jane@doe.test>"],
        ]),
    )
    .await;
    let codes: Vec<i64> = r.iter().map(code).collect();
    assert_eq!(codes[..3], [250, 250, 550], "{r:?}");
    assert!(codes[3] == 501 || codes[3] == 550, "{r:?}");
    assert_eq!(codes[4..], [250, 452, 452], "{r:?}");
    let _ = stop.send(true);
    env.teardown().await;
}

both!(bad_sequences_get_503);
async fn bad_sequences_get_503(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let r = client(
        addr,
        json!([
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["cmd", "DATA"],
            ["ehlo", "x.test"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["cmd", "DATA"],
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "DATA"],
            ["cmd", "RSET"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["cmd", "NOOP"],
            ["cmd", "VRFY john"],
            ["cmd", "STARTTLS"],
            ["cmd", "FROB"],
            ["cmd", "MAIL FROM:a@x.test"],
            ["cmd", format!("NOOP {}", "x".repeat(3000))],
            ["quit"],
        ]),
    )
    .await;
    let codes: Vec<i64> = r.iter().map(code).collect();
    assert_eq!(
        codes,
        [
            503, 503, 503, 250, 503, 503, 250, 503, 503, 250, 503, 250, 252, 502, 500, 501, 500,
            221
        ],
        "{r:?}"
    );
    // A client that only errs is cut off.
    let mut steps = vec![json!(["ehlo", "x.test"])];
    steps.extend((0..=smtp::MAX_BAD_COMMANDS).map(|_| json!(["cmd", "FROB"])));
    steps.push(json!(["wait_reply"]));
    steps.push(json!(["cmd", "NOOP"]));
    let r = client(addr, Value::Array(steps)).await;
    let n = smtp::MAX_BAD_COMMANDS as usize;
    // Each error is answered; past the cap the session says 421 and ends.
    assert!(r[1..=n + 1].iter().all(|x| code(x) == 500), "{r:?}");
    assert_eq!(code(&r[n + 2]), 421, "{r:?}");
    assert_eq!(r[n + 3], json!(["closed"]), "{r:?}");
    let _ = stop.send(true);
    env.teardown().await;
}

both!(stalled_clients_are_dropped);
async fn stalled_clients_are_dropped(b: Backend) {
    let env = Env::new(b, |c| c.smtp_command_timeout_secs = 1).await;
    let (addr, stop) = listen(&env).await;
    // Says EHLO, then nothing: the command timeout answers 421 and hangs up.
    let r = client(
        addr,
        json!([["ehlo", "x.test"], ["wait_reply"], ["cmd", "NOOP"]]),
    )
    .await;
    assert_eq!(code(&r[0]), 250);
    assert_eq!(code(&r[1]), 421, "{r:?}");
    assert!(r[1][1].as_str().unwrap().contains("Timeout"), "{r:?}");
    assert_eq!(r[2], json!(["closed"]), "{r:?}");
    let _ = stop.send(true);
    env.teardown().await;

    // Busy but never done: the whole-session bound cuts it.
    let env = Env::new(b, |c| c.smtp_session_timeout_secs = 1).await;
    let (addr, stop) = listen(&env).await;
    let r = client(
        addr,
        json!([["ehlo", "x.test"], ["wait_reply"], ["cmd", "NOOP"]]),
    )
    .await;
    assert_eq!(code(&r[1]), 421, "{r:?}");
    assert!(
        r[1][1].as_str().unwrap().contains("Session too long"),
        "{r:?}"
    );
    assert_eq!(r[2], json!(["closed"]), "{r:?}");
    let _ = stop.send(true);
    env.teardown().await;
}

both!(shutdown_closes_sessions);
async fn shutdown_closes_sessions(b: Backend) {
    let env = Env::new(b, |_| {}).await;
    let (addr, stop) = listen(&env).await;
    let mut held = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut greeting = [0u8; 3];
    tokio::io::AsyncReadExt::read_exact(&mut held, &mut greeting)
        .await
        .unwrap();
    assert_eq!(&greeting, b"220");
    stop.send(true).unwrap();
    let mut rest = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut held, &mut rest)
        .await
        .unwrap();
    assert!(rest.contains("\r\n421 4.3.2 Shutting down\r\n"), "{rest:?}");
    // And no new session starts: the connection is refused or, if the
    // listener had not closed yet, ends without a greeting. (One connect:
    // a second one raced the listener's close.)
    let fresh = match tokio::net::TcpStream::connect(addr).await {
        Err(_) => true,
        Ok(mut s) => {
            let mut b = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut s, &mut b)
                .await
                .is_err()
                || b.is_empty()
        }
    };
    assert!(fresh, "a session started after shutdown");
    env.teardown().await;
}

both!(sessions_are_capped);
async fn sessions_are_capped(b: Backend) {
    let env = Env::new(b, |c| c.smtp_max_sessions = 1).await;
    let (addr, stop) = listen(&env).await;
    // Hold the one session open (greeted, so it is counted) …
    let mut held = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut greeting = [0u8; 3];
    tokio::io::AsyncReadExt::read_exact(&mut held, &mut greeting)
        .await
        .unwrap();
    assert_eq!(&greeting, b"220");
    // … and the next one is turned away.
    let r = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .await
    .unwrap();
    assert!(r.starts_with("421 "), "{r}");
    drop(held);
    let _ = stop.send(true);
    env.teardown().await;
}

// Verify mode: SPF is checked against the session's client IP, HELO name
// and envelope sender, over the loopback DNS server.
both!(spf_from_the_session);
async fn spf_from_the_session(b: Backend) {
    let mut zone = HashMap::new();
    zone.insert(
        "sender.test".to_string(),
        Answer::Txt(vec!["v=spf1 ip4:127.0.0.1 -all".into()]),
    );
    zone.insert(
        "elsewhere.test".to_string(),
        Answer::Txt(vec!["v=spf1 ip4:192.0.2.1 -all".into()]),
    );
    zone.insert(
        "helo.sender.test".to_string(),
        Answer::Txt(vec!["v=spf1 ip4:127.0.0.1 -all".into()]),
    );
    let ns = dns_server(zone).await;
    let verifier = Verifier::new(VerifyConfig {
        nameservers: vec![ns],
        query_timeout: Duration::from_secs(5),
        total_timeout: Duration::from_secs(20),
        host_domain: "gateway.test".into(),
    })
    .unwrap();
    let mut env = Env::with_auth(b, |_| {}, AuthBackend::Verify(Box::new(verifier))).await;
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let one = write_mail(&env, "1.eml", &probe(ID));
    let two = write_mail(&env, "2.eml", &probe(ID2));
    let r = client(
        addr,
        json!([
            ["ehlo", "mail.elsewhere.test"],
            ["cmd", "MAIL FROM:<bounce@sender.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", one],
            ["cmd", "MAIL FROM:<bounce@elsewhere.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", two],
        ]),
    )
    .await;
    let codes: Vec<i64> = r.iter().map(code).collect();
    assert_eq!(codes, [250, 250, 250, 250, 250, 250, 250], "{r:?}");
    // The null reverse-path: SPF checks the HELO identity (RFC 7208 §2.3).
    let three = write_mail(&env, "3.eml", &probe(ID3));
    let r = client(
        addr,
        json!([
            ["helo", "helo.sender.test"],
            ["cmd", "MAIL FROM:<>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", three],
        ]),
    )
    .await;
    assert_eq!(code(&r[3]), 250, "{r:?}");
    let items = inbox(&mut env).await;
    let spf: Vec<(&Value, &Value)> = items
        .iter()
        .map(|i| (&i["id"], &i["auth"]["spf"]))
        .collect();
    assert_eq!(
        spf,
        [
            (&json!(ID), &json!("pass")),
            (&json!(ID2), &json!("fail")),
            (&json!(ID3), &json!("pass"))
        ],
        "{items:?}"
    );
    let _ = stop.send(true);
    env.teardown().await;
}

both!(starttls_then_deliver);
async fn starttls_then_deliver(b: Backend) {
    let mut env = Env::new(b, with_tls).await;
    env.enroll(&recipient_agent(), MAILBOX).await;
    let (addr, stop) = listen(&env).await;
    let mail = write_mail(&env, "probe.eml", &probe(ID));
    let ca = tls_file("ca.pem").display().to_string();
    let r = client(
        addr,
        json!([
            ["ehlo", "mail.sender.test"],
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RSET"],
            ["starttls", ca],
            // The session starts over inside TLS: EHLO first, and no
            // second STARTTLS on offer.
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["ehlo", "mail.sender.test"],
            ["cmd", "STARTTLS"],
            ["cmd", "MAIL FROM:<a@x.test>"],
            ["cmd", "RCPT TO:<john@doe.test>"],
            ["data_file", mail],
            ["quit"],
        ]),
    )
    .await;
    assert_eq!(r[0][2]["starttls"], true, "{r:?}");
    assert_eq!(r[5][2]["starttls"], false, "{r:?}");
    let codes: Vec<i64> = r.iter().map(code).collect();
    assert_eq!(
        codes,
        [250, 250, 250, 220, 503, 250, 503, 250, 250, 250, 221],
        "{r:?}"
    );
    assert_eq!(inbox(&mut env).await.len(), 1);
    // Without a certificate STARTTLS is neither offered nor accepted.
    let plain = Env::new(b, |_| {}).await;
    let (addr2, stop2) = listen(&plain).await;
    let r = client(addr2, json!([["ehlo", "x.test"], ["cmd", "STARTTLS"]])).await;
    assert_eq!(r[0][2]["starttls"], false);
    assert_eq!(code(&r[1]), 502);
    let _ = stop.send(true);
    let _ = stop2.send(true);
    plain.teardown().await;
    env.teardown().await;
}

/// Plaintext pipelined behind STARTTLS is dropped, not run inside TLS
/// (RFC 3207 §5, the CVE-2011-0411 class).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_drops_pipelined_plaintext() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
    let env = Env::new(Backend::Sqlite, with_tls).await;
    let (addr, stop) = listen(&env).await;
    let mut plain = BufReader::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    let mut line = String::new();
    plain.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("220 "), "{line}");
    plain
        .get_mut()
        .write_all(b"EHLO x.test\r\nSTARTTLS\r\nNOOP injected\r\n")
        .await
        .unwrap();
    loop {
        line.clear();
        plain.read_line(&mut line).await.unwrap();
        if line.starts_with("220 ") {
            break;
        }
        assert!(line.starts_with("250"), "{line}");
    }
    assert!(plain.buffer().is_empty());
    let mut roots = RootCertStore::empty();
    let pem = std::fs::read(tls_file("ca.pem")).unwrap();
    use rustls_pki_types::pem::PemObject;
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(name, plain.into_inner())
        .await
        .unwrap();
    tls.write_all(b"QUIT\r\n").await.unwrap();
    let mut rest = String::new();
    tls.read_to_string(&mut rest).await.unwrap_or_default();
    // One answer: QUIT's. The injected NOOP never ran.
    assert!(rest.starts_with("221 "), "{rest:?}");
    assert_eq!(rest.matches("\r\n").count(), 1, "{rest:?}");
    let _ = stop.send(true);
    env.teardown().await;
}
