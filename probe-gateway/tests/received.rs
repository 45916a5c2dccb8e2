//! Verify mode, mail pushed over HTTP (`POST /v1/inbound`, issue #4): SPF
//! from the topmost `Received:` hop by a `trusted_received_by` host (RFC
//! 5321 §4.4), over the loopback DNS server serving tests/corpus/zone.json
//! (`sender.test` authorizes 192.0.2.1 only; DMARC p=reject).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;
use std::time::Duration;

use axum::http::StatusCode;
use common::env::*;
use common::*;
use rdv_probe_gateway::auth::{SmtpSession, Verifier, VerifyConfig};
use rdv_probe_gateway::gate::AuthBackend;
use rdv_proto::mailblock::TransferEncoding;
use serde_json::Value;

const MAILBOX: &str = "john@doe.test";
const SENDER: &str = "alice@sender.test";
const TS: &str = "2026-10-08T11:00:00Z";
const MTA: &str = "mx.doe.test";

fn id(n: u32) -> String {
    format!("1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1{n:03x}")
}

/// A probe as the integrator's MTA hands it to the pipe: `Return-Path:`
/// and its `Received:` on top of `trace` (headers written further up).
fn pushed(n: u32, top: &str, trace: &str) -> Vec<u8> {
    let mut raw =
        format!("Return-Path: <bounce@sender.test>\r\nReceived: {top}\r\n{trace}").into_bytes();
    raw.extend(probe_mail(
        &id(n),
        MAILBOX,
        SENDER,
        TS,
        TransferEncoding::QuotedPrintable,
    ));
    raw
}

fn hop(ip: &str, by: &str) -> String {
    format!(
        "from mail.sender.test (mail.sender.test [{ip}])\r\n\tby {by} (Postfix) with ESMTPS id 4Xyz\r\n\tfor <{MAILBOX}>; Thu, 8 Oct 2026 11:00:00 +0000"
    )
}

async fn verify_env(trusted_by: &[&str]) -> (Env, String) {
    let zone: Value =
        serde_json::from_str(&std::fs::read_to_string(corpus_dir().join("zone.json")).unwrap())
            .unwrap();
    let ns = dns_server(load_zone(&zone)).await;
    let verifier = Verifier::new(VerifyConfig {
        nameservers: vec![ns],
        query_timeout: Duration::from_secs(5),
        total_timeout: Duration::from_secs(20),
        host_domain: "gateway.test".into(),
    })
    .unwrap();
    let by: Vec<String> = trusted_by.iter().map(|s| s.to_string()).collect();
    let mut env = Env::with_auth(
        Backend::Sqlite,
        |c| c.trusted_received_by = by,
        AuthBackend::Verify(Box::new(verifier)),
    )
    .await;
    let token = env.enroll(&recipient_agent(), MAILBOX).await;
    (env, token)
}

/// (spf, spf_source, dmarc, binding) of an admitted push.
async fn push(env: &Env, token: &str, raw: Vec<u8>) -> [String; 4] {
    let (st, v) = env.inbound(Some(token), raw).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let a = &v["auth"];
    [&a["spf"], &a["spf_source"], &a["dmarc"], &v["binding"]]
        .map(|x| x.as_str().unwrap_or("<absent>").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spf_from_a_trusted_received_hop() {
    let (env, token) = verify_env(&[MTA]).await;
    // Authorized IP: SPF pass, aligned with the From domain, so DMARC too.
    let got = push(&env, &token, pushed(1, &hop("192.0.2.1", MTA), "")).await;
    assert_eq!(got, ["pass", "received", "pass", "weak_mailbox_proof"]);
    // An IP the record does not authorize: SPF fail (-all), DMARC fail.
    let got = push(&env, &token, pushed(2, &hop("203.0.113.9", MTA), "")).await;
    assert_eq!(got, ["fail", "received", "fail", "needs_cookie"]);
    // A forged lower hop naming the authorized IP changes nothing.
    let forged = format!("Received: {}\r\n", hop("192.0.2.1", MTA));
    let got = push(&env, &token, pushed(3, &hop("203.0.113.9", MTA), &forged)).await;
    assert_eq!(got, ["fail", "received", "fail", "needs_cookie"]);
    // The topmost hop is by another host: a trusted one below is ignored.
    let trusted_below = format!("Received: {}\r\n", hop("192.0.2.1", MTA));
    let got = push(
        &env,
        &token,
        pushed(4, &hop("192.0.2.1", "mx.evil.test"), &trusted_below),
    )
    .await;
    assert_eq!(got, ["none", "none", "fail", "needs_cookie"]);
    // A malformed trusted hop (two address literals) is no session.
    let two =
        format!("from mail.sender.test (mail.sender.test [192.0.2.1] [203.0.113.9]) by {MTA}; x");
    let got = push(&env, &token, pushed(5, &two, "")).await;
    assert_eq!(got, ["none", "none", "fail", "needs_cookie"]);
    env.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_off_means_spf_none() {
    use rdv_probe_gateway::config::Config;
    assert_eq!(Config::default().trusted_received_by, Vec::<String>::new());
    let c = Config::from_toml("trusted_received_by = [\"mx.doe.test\"]").unwrap();
    assert_eq!(c.trusted_received_by, [MTA]);
    assert!(Config::from_toml("trusted_received_by = [\"mx doe\"]").is_err());
    assert!(Config::from_toml("trusted_received_by = [\"\"]").is_err());
    let (env, token) = verify_env(&[]).await;
    let got = push(&env, &token, pushed(1, &hop("192.0.2.1", MTA), "")).await;
    assert_eq!(got, ["none", "none", "fail", "needs_cookie"]);
    env.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_session_wins_and_is_reported() {
    let (env, _) = verify_env(&[MTA]).await;
    // The SMTP listener's path: its own session, never the headers.
    let session = SmtpSession {
        client_ip: "203.0.113.9".parse::<IpAddr>().unwrap(),
        helo: "mail.sender.test".into(),
        mail_from: "bounce@sender.test".into(),
    };
    let d = env
        .state
        .deliver(
            MAILBOX,
            &pushed(1, &hop("192.0.2.1", MTA), ""),
            Some(&session),
        )
        .await
        .unwrap();
    let a = serde_json::to_value(&d.admitted.auth).unwrap();
    assert_eq!(
        (&a["spf"], &a["spf_source"]),
        (&"fail".into(), &"session".into())
    );
    env.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_mode_has_no_spf_source() {
    let mut env = Env::new(Backend::Sqlite, |c| {
        c.trusted_received_by = vec![MTA.into()]
    })
    .await;
    let token = env.enroll(&recipient_agent(), MAILBOX).await;
    let got = push(&env, &token, pushed(1, &hop("192.0.2.1", MTA), "")).await;
    assert_eq!(got, ["none", "<absent>", "none", "needs_cookie"]);
    env.teardown().await;
}
