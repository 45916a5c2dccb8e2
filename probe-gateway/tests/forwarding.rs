//! Forwarding confirmations (issue #4; docs/probe-gateway.md "Mail flows"):
//! Gmail's confirmation mailed to a gateway address reaches the agent as
//! its code only, over the SMTP listener with a real client (smtplib, as
//! tests/smtp.rs), in trusted mode, on SQLite and on Postgres. Every
//! deviation (sender, DKIM, authserv-id, subject, recipient, HTTP, the 6th
//! in a day) queues nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rdv_service_kit::both_backends as both;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::env::*;
use common::*;
use mail_auth::common::crypto::Ed25519Key;
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::{Canonicalization, DkimSigner};
use rdv_probe_gateway::auth::{Verifier, VerifyConfig};
use rdv_probe_gateway::config::SmtpRefusals;
use rdv_probe_gateway::gate::AuthBackend;
use rdv_probe_gateway::smtp;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::sync::watch;

const MAILBOX: &str = "john@doe.test";
const DOMAIN: &str = "gw.test";
const GOOGLE: &str = "forwarding-noreply@google.com";
const CODE: &str = "123456789";

fn subject(code: &str, mailbox: &str) -> String {
    format!("(#{code}) Gmail Forwarding Confirmation - Receive Mail from {mailbox}")
}

fn trusted_ar(domain: &str) -> String {
    format!("{AUTHSERV}; dkim=pass header.d={domain}; spf=pass smtp.mailfrom={domain}")
}

/// Gmail's confirmation, shaped as Google sends it: a link and the code in
/// the body (neither may reach the agent but the code).
fn confirmation(ar: Option<&str>, from: &str, subject: &str, to: &str) -> Vec<u8> {
    let mut s = String::new();
    if let Some(ar) = ar {
        s.push_str(&format!("Authentication-Results: {ar}\r\n"));
    }
    s.push_str(&format!(
        "From: Gmail Team <{from}>\r\nTo: {to}\r\nSubject: {subject}\r\n\
         Date: Thu, 08 Oct 2026 11:59:00 +0000\r\nMessage-ID: <fwd-1@google.com>\r\n\
         Content-Type: text/plain; charset=UTF-8\r\n\r\n\
         john@doe.test has requested to automatically forward mail to your email\r\n\
         address {to}.\r\n\r\n\
         To allow john@doe.test to automatically forward mail to your address,\r\n\
         please click the link below to confirm the request:\r\n\r\n\
         https://mail-settings.google.com/mail/vf-%5BANGjdJ_secret%5D-link\r\n\r\n\
         Confirmation code: {CODE}\r\n"
    ));
    s.into_bytes()
}

async fn listen(env: &Env) -> (SocketAddr, watch::Sender<bool>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (stop, rx) = watch::channel(false);
    smtp::spawn(l, env.state.clone(), None, rx);
    (addr, stop)
}

/// Sends `raw` to `rcpt` with smtplib; the DATA reply (code, text).
async fn send(env: &Env, addr: SocketAddr, rcpt: &str, raw: &[u8]) -> (i64, String) {
    let p = env.dir.path().join("mail.eml");
    std::fs::write(&p, raw).unwrap();
    let steps = json!([
        ["ehlo", "mail-sor-f41.google.com"],
        ["cmd", "MAIL FROM:<forwarding-noreply@google.com>"],
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
            .unwrap_or_else(|e| panic!("{python}: {e}"))
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[3][0], 250, "rcpt: {v:?}");
    let data = &v[4];
    (
        data[0].as_i64().unwrap(),
        data[1].as_str().unwrap_or_default().to_string(),
    )
}

async fn inbox(env: &mut Env) -> Vec<Value> {
    let (st, v) = env
        .signed(&recipient_agent(), "GET", "/v1/inbox", b"")
        .await;
    assert_eq!(st, 200, "{v}");
    v["items"].as_array().unwrap().clone()
}

/// A gateway with `MAILBOX` enrolled: the env, its token and gateway address.
async fn setup(b: Backend) -> (Env, String, String) {
    setup_with(b, AuthBackend::Trusted(vec![AUTHSERV.into()])).await
}

async fn setup_with(b: Backend, auth: AuthBackend) -> (Env, String, String) {
    let mut env = Env::with_auth(
        b,
        |c| {
            c.flows.mail_domain = Some(DOMAIN.into());
            // Bounces wanted: the refusal code is in the reply.
            c.smtp_refusals = SmtpRefusals::Reject;
        },
        auth,
    )
    .await;
    let token = env.enroll(&recipient_agent(), MAILBOX).await;
    let (st, v) = env
        .signed(&recipient_agent(), "GET", "/v1/mailboxes", b"")
        .await;
    assert_eq!(st, 200, "{v}");
    let ga = v["mailboxes"][0]["gateway_address"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(ga.starts_with("rdv+") && ga.ends_with(DOMAIN), "{ga}");
    (env, token, ga)
}

both!(confirmation_code_reaches_the_inbox);
async fn confirmation_code_reaches_the_inbox(b: Backend) {
    let (mut env, _, ga) = setup(b).await;
    let (addr, stop) = listen(&env).await;
    let raw = confirmation(
        Some(&trusted_ar("google.com")),
        // The From is compared case-insensitively.
        "Forwarding-NoReply@Google.com",
        &subject(CODE, "John@Doe.test"),
        &ga,
    );
    let (code, text) = send(&env, addr, &ga, &raw).await;
    assert_eq!(code, 250, "{text}");
    let items = inbox(&mut env).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let it = &items[0];
    assert_eq!(it["kind"], "forwarding_confirmation");
    assert_eq!(it["code"], CODE);
    assert_eq!(it["provider"], "gmail");
    assert_eq!(it["mailbox"], MAILBOX);
    assert!(it["received"].as_str().is_some_and(|r| !r.is_empty()));
    // The code only: no link, no body, no subject.
    let mut keys: Vec<&str> = it.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["code", "kind", "mailbox", "provider", "received", "seq"]
    );
    let text = it.to_string();
    assert!(!text.contains("https://") && !text.contains("Forwarding Confirmation"));
    stop.send(true).unwrap();
    env.teardown().await;
}

both!(everything_else_queues_nothing);
async fn everything_else_queues_nothing(b: Backend) {
    let (mut env, token, ga) = setup(b).await;
    let (addr, stop) = listen(&env).await;
    let ok_ar = trusted_ar("google.com");
    let ok_subject = subject(CODE, MAILBOX);
    let cases: Vec<(&str, String, Vec<u8>, &str)> = vec![
        (
            "wrong From",
            ga.clone(),
            confirmation(Some(&ok_ar), "noreply@google.com", &ok_subject, &ga),
            "forwarding_unverified",
        ),
        (
            "From look-alike",
            ga.clone(),
            confirmation(
                Some(&ok_ar),
                "forwarding-noreply@google.com.evil.test",
                &ok_subject,
                &ga,
            ),
            "forwarding_unverified",
        ),
        (
            "DKIM pass for another domain",
            ga.clone(),
            confirmation(Some(&trusted_ar("evil.test")), GOOGLE, &ok_subject, &ga),
            "forwarding_unverified",
        ),
        (
            "DKIM pass for a subdomain",
            ga.clone(),
            confirmation(
                Some(&trusted_ar("mail.google.com.evil.test")),
                GOOGLE,
                &ok_subject,
                &ga,
            ),
            "forwarding_unverified",
        ),
        (
            "forged Authentication-Results",
            ga.clone(),
            confirmation(
                Some("mx.evil.test; dkim=pass header.d=google.com"),
                GOOGLE,
                &ok_subject,
                &ga,
            ),
            "forwarding_unverified",
        ),
        (
            "no Authentication-Results",
            ga.clone(),
            confirmation(None, GOOGLE, &ok_subject, &ga),
            "forwarding_unverified",
        ),
        (
            "DKIM fail",
            ga.clone(),
            confirmation(
                Some(&format!("{AUTHSERV}; dkim=fail header.d=google.com")),
                GOOGLE,
                &ok_subject,
                &ga,
            ),
            "forwarding_unverified",
        ),
        (
            "no code",
            ga.clone(),
            confirmation(
                Some(&ok_ar),
                GOOGLE,
                &format!("Gmail Forwarding Confirmation - Receive Mail from {MAILBOX}"),
                &ga,
            ),
            "forwarding_subject",
        ),
        (
            "non-digit code",
            ga.clone(),
            confirmation(Some(&ok_ar), GOOGLE, &subject("12345678x", MAILBOX), &ga),
            "forwarding_subject",
        ),
        (
            "too-long code",
            ga.clone(),
            confirmation(
                Some(&ok_ar),
                GOOGLE,
                &subject("1234567890123", MAILBOX),
                &ga,
            ),
            "forwarding_subject",
        ),
        (
            "too-short code",
            ga.clone(),
            confirmation(Some(&ok_ar), GOOGLE, &subject("12345", MAILBOX), &ga),
            "forwarding_subject",
        ),
        (
            "another mailbox",
            ga.clone(),
            confirmation(Some(&ok_ar), GOOGLE, &subject(CODE, "eve@doe.test"), &ga),
            "forwarding_subject",
        ),
        (
            // The mailbox's own address takes RDV mail only.
            "sent to the mailbox itself",
            MAILBOX.to_string(),
            confirmation(Some(&ok_ar), GOOGLE, &ok_subject, MAILBOX),
            "no_marker",
        ),
    ];
    for (what, rcpt, raw, refusal) in &cases {
        let (code, text) = send(&env, addr, rcpt, raw).await;
        assert_eq!(code, 550, "{what}: {text}");
        assert!(text.ends_with(refusal), "{what}: {text}");
    }
    // Over HTTP (the integration token's push) it is unmarked mail.
    let raw = confirmation(Some(&ok_ar), GOOGLE, &ok_subject, MAILBOX);
    let (st, v) = env.inbound(Some(&token), raw).await;
    assert_eq!(st, 422, "{v}");
    assert_eq!(v["refusal"], "no_marker", "{v}");
    assert!(inbox(&mut env).await.is_empty());
    stop.send(true).unwrap();
    env.teardown().await;
}

both!(five_a_day);
async fn five_a_day(b: Backend) {
    let (mut env, _, ga) = setup(b).await;
    let (addr, stop) = listen(&env).await;
    let ar = trusted_ar("google.com");
    for i in 0..5 {
        let raw = confirmation(
            Some(&ar),
            GOOGLE,
            &subject(&format!("10000000{i}"), MAILBOX),
            &ga,
        );
        let (code, text) = send(&env, addr, &ga, &raw).await;
        assert_eq!(code, 250, "#{i}: {text}");
    }
    let raw = confirmation(Some(&ar), GOOGLE, &subject("100000005", MAILBOX), &ga);
    let (code, text) = send(&env, addr, &ga, &raw).await;
    assert_eq!(code, 451, "{text}");
    assert!(text.contains("rate_limited"), "{text}");
    let items = inbox(&mut env).await;
    let codes: Vec<&str> = items.iter().map(|i| i["code"].as_str().unwrap()).collect();
    assert_eq!(
        codes,
        [
            "100000000",
            "100000001",
            "100000002",
            "100000003",
            "100000004"
        ]
    );
    stop.send(true).unwrap();
    env.teardown().await;
}

/// `raw` with a DKIM signature by the corpus ed25519 key (selector `ed`)
/// for `domain`.
fn dkim_signed(raw: &[u8], domain: &str) -> Vec<u8> {
    let pem = std::fs::read_to_string(corpus_dir().join("keys/ed25519.pem")).unwrap();
    let der = PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap();
    let key = Ed25519Key::from_pkcs8_maybe_unchecked_der(der.secret_der()).unwrap();
    let sig = DkimSigner::from_key(key)
        .domain(domain)
        .selector("ed")
        .headers(["From", "To", "Subject", "Date", "Message-ID"])
        .header_canonicalization(Canonicalization::Relaxed)
        .body_canonicalization(Canonicalization::Relaxed)
        .sign(raw)
        .unwrap();
    let mut out = sig.to_header().into_bytes();
    out.extend_from_slice(raw);
    out
}

// Verify mode: the gateway checks Google's DKIM signature itself, over the
// loopback DNS server (the corpus ed25519 key published for google.com and
// evil.test); a trusted-looking Authentication-Results counts for nothing.
both!(verify_mode_checks_dkim_itself);
async fn verify_mode_checks_dkim_itself(b: Backend) {
    let key = std::fs::read_to_string(corpus_dir().join("keys/ed25519.pub.b64")).unwrap();
    let record = format!("v=DKIM1; k=ed25519; p={}", key.trim());
    let mut zone = HashMap::new();
    for d in ["google.com", "evil.test"] {
        zone.insert(
            format!("ed._domainkey.{d}"),
            Answer::Txt(vec![record.clone()]),
        );
    }
    let ns = dns_server(zone).await;
    let verifier = Verifier::new(VerifyConfig {
        nameservers: vec![ns],
        query_timeout: Duration::from_secs(5),
        total_timeout: Duration::from_secs(20),
        host_domain: "gateway.test".into(),
    })
    .unwrap();
    let (mut env, _, ga) = setup_with(b, AuthBackend::Verify(Box::new(verifier))).await;
    let (addr, stop) = listen(&env).await;
    let subj = subject(CODE, MAILBOX);
    // Unsigned, with an Authentication-Results verify mode ignores.
    let raw = confirmation(Some(&trusted_ar("google.com")), GOOGLE, &subj, &ga);
    let (code, text) = send(&env, addr, &ga, &raw).await;
    assert_eq!(code, 550, "{text}");
    assert!(text.ends_with("forwarding_unverified"), "{text}");
    // Signed by another domain.
    let raw = dkim_signed(&confirmation(None, GOOGLE, &subj, &ga), "evil.test");
    let (code, text) = send(&env, addr, &ga, &raw).await;
    assert_eq!(code, 550, "{text}");
    assert!(text.ends_with("forwarding_unverified"), "{text}");
    assert!(inbox(&mut env).await.is_empty());
    // Signed by google.com.
    let raw = dkim_signed(&confirmation(None, GOOGLE, &subj, &ga), "google.com");
    let (code, text) = send(&env, addr, &ga, &raw).await;
    assert_eq!(code, 250, "{text}");
    let items = inbox(&mut env).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["kind"], "forwarding_confirmation");
    assert_eq!(items[0]["code"], CODE);
    stop.send(true).unwrap();
    env.teardown().await;
}
