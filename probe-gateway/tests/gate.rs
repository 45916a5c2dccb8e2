//! Gate rules the corpus does not cover: invites, SYN-ACKs, echoes (the
//! ACK leg by mail), the clock, limits through the whole gate, and a DNS
//! server that never answers.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::*;
use rdv_probe_gateway::auth::{SmtpSession, Verifier, VerifyConfig};
use rdv_probe_gateway::gate::{self, Arrival, AuthBackend};
use rdv_probe_gateway::limits::{LimitConfig, Limits, Rate};
use rdv_probe_gateway::verdict::{Binding, LimitScope, Refusal, Verdict};
use rdv_proto::Address;
use rdv_proto::doc::grant::{GrantBuilder, GrantRef};
use rdv_proto::mailblock::{self, Invite, TransferEncoding};
use serde_json::json;

const QP: TransferEncoding = TransferEncoding::QuotedPrintable;
const ID: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const ID2: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02";

fn mailbox() -> Address {
    Address::parse("john@doe.test").unwrap()
}

fn trusted() -> AuthBackend {
    AuthBackend::Trusted(vec!["mx.trusted.test".into()])
}

async fn run(
    raw: &[u8],
    agent: Option<&rdv_proto::AgentId>,
    limits: &Mutex<Limits>,
) -> Result<gate::Admitted, Refusal> {
    let mb = mailbox();
    let arrival = Arrival {
        mailbox: &mb,
        agent,
        max_bytes: rdv_proto::consts::MAIL_MAX_BYTES,
    };
    gate::run(raw, &arrival, None, &trusted(), limits, t(NOW)).await
}

fn fresh() -> Mutex<Limits> {
    Mutex::new(Limits::new(LimitConfig::default()))
}

#[tokio::test]
async fn invite_for_the_mailbox() {
    let key = requester();
    let inv = Invite::build(
        ID,
        Some("John@Doe.test"),
        "tok-123",
        t("2026-10-08T10:00:00Z"),
        &key,
    )
    .unwrap();
    let raw = compose(&inv, "john@doe.test", "alice@sender.test", QP);
    let a = run(&raw, None, &fresh()).await.unwrap();
    assert_eq!(a.screened.kind_name(), "invite");
    assert_eq!(a.binding, Binding::NeedsCookie);
    // Without a to_hint the invite is bound to no mailbox: refused.
    let inv = Invite::build(ID2, None, "tok-123", t("2026-10-08T10:00:00Z"), &key).unwrap();
    let raw = compose(&inv, "john@doe.test", "alice@sender.test", QP);
    assert_eq!(
        run(&raw, None, &fresh()).await.unwrap_err(),
        Refusal::ToHint
    );
}

#[tokio::test]
async fn syn_ack_only_for_the_requesters_agent() {
    let grantor = recipient_agent();
    let requester_id = requester().id().clone();
    let grant = GrantBuilder {
        id: ID2.into(),
        to: requester_id.clone(),
        reference: GrantRef::Request(ID.into()),
        card: card(&grantor),
        tier: "stranger".into(),
        scope: json!({"may_initiate": true}),
        expires: None,
        ts: t("2026-10-08T11:30:00Z"),
    }
    .sign(&grantor)
    .unwrap();
    let payload = mailblock::probe_ack_payload(&grant, "abcdefghijklmnopqrstuvwxyz");
    let raw = compose(&payload, "john@doe.test", "rdv@doe-agent.test", QP);
    let a = run(&raw, Some(&requester_id), &fresh()).await.unwrap();
    assert_eq!(a.screened.kind_name(), "probe_ack");
    // Another mailbox's agent does not take it, nor a mailbox with none.
    let other = AgentKeyExt::other();
    assert_eq!(
        run(&raw, Some(&other), &fresh()).await.unwrap_err(),
        Refusal::NotForMailbox
    );
    assert_eq!(
        run(&raw, None, &fresh()).await.unwrap_err(),
        Refusal::NotForMailbox
    );
}

#[tokio::test]
async fn echo_only_for_the_grantors_agent() {
    let grantor = recipient_agent().id().clone();
    let echo = mailblock::ProbeEcho::build(
        ID,
        &grantor,
        "abcdefghijklmnopqrstuvwxyz",
        t("2026-10-08T11:30:00Z"),
        &requester(),
    )
    .unwrap();
    let raw = compose(&echo, "john@doe.test", "rdv+a@gw.test", QP);
    let a = run(&raw, Some(&grantor), &fresh()).await.unwrap();
    assert_eq!(
        (a.screened.kind_name(), a.screened.id.as_str()),
        ("probe_echo", ID)
    );
    assert_eq!(&a.screened.requester, requester().id());
    assert_eq!(
        run(&raw, Some(&AgentKeyExt::other()), &fresh())
            .await
            .unwrap_err(),
        Refusal::NotForMailbox
    );
    assert_eq!(
        run(&raw, None, &fresh()).await.unwrap_err(),
        Refusal::NotForMailbox
    );
    // The X-Rdv-Ack header must name the block's probe and requester.
    let text = String::from_utf8(raw.clone()).unwrap();
    let swapped = text.replace(&format!("id={ID}"), &format!("id={ID2}"));
    assert!(matches!(
        run(swapped.as_bytes(), Some(&grantor), &fresh())
            .await
            .unwrap_err(),
        Refusal::MarkerMismatch(_)
    ));
    // An echo under a probe's marker is a mismatch too.
    let marked = text.replace("Subject: [RDV-ACK]", "Subject: [RDV-PROBE]");
    assert!(matches!(
        run(marked.as_bytes(), Some(&grantor), &fresh())
            .await
            .unwrap_err(),
        Refusal::MarkerMismatch(_)
    ));
    // Older than a probe lifetime: expired.
    let old = mailblock::ProbeEcho::build(
        ID,
        &grantor,
        "abcdefghijklmnopqrstuvwxyz",
        t("2026-09-20T11:30:00Z"),
        &requester(),
    )
    .unwrap();
    let raw = compose(&old, "john@doe.test", "rdv+a@gw.test", QP);
    assert_eq!(
        run(&raw, Some(&grantor), &fresh()).await.unwrap_err(),
        Refusal::Expired
    );
}

/// RFC 8058 opt-out headers on an invite are not list traffic; List-Id is.
#[tokio::test]
async fn list_unsubscribe_is_not_list_traffic() {
    let inv = Invite::build(
        ID,
        Some("john@doe.test"),
        "tok",
        t("2026-10-08T10:00:00Z"),
        &requester(),
    )
    .unwrap();
    let raw = compose(&inv, "john@doe.test", "alice@sender.test", QP);
    let mut with = b"List-Unsubscribe: <mailto:optout+x@gw.test>, <https://gw.test/v1/optout/x>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n".to_vec();
    with.extend_from_slice(&raw);
    run(&with, None, &fresh()).await.unwrap();
    let mut list = b"List-Id: <club.doe.test>\r\n".to_vec();
    list.extend_from_slice(&raw);
    assert_eq!(
        run(&list, None, &fresh()).await.unwrap_err(),
        Refusal::ListTraffic
    );
}

struct AgentKeyExt;
impl AgentKeyExt {
    fn other() -> rdv_proto::AgentId {
        rdv_proto::AgentKey::from_seed([3; 32]).id().clone()
    }
}

#[tokio::test]
async fn clock_bounds() {
    // Ten minutes ahead of the gate's clock: refused.
    let raw = probe_mail(
        ID,
        "john@doe.test",
        "alice@sender.test",
        "2026-10-08T12:10:00Z",
        QP,
    );
    assert_eq!(
        run(&raw, None, &fresh()).await.unwrap_err(),
        Refusal::Expired
    );
    // Four minutes ahead is clock skew: admitted.
    let raw = probe_mail(
        ID,
        "john@doe.test",
        "alice@sender.test",
        "2026-10-08T12:04:00Z",
        QP,
    );
    run(&raw, None, &fresh()).await.unwrap();
    // 13 days 23 hours old: still live.
    let raw = probe_mail(
        ID,
        "john@doe.test",
        "alice@sender.test",
        "2026-09-24T13:00:00Z",
        QP,
    );
    run(&raw, None, &fresh()).await.unwrap();
}

#[tokio::test]
async fn limits_through_the_gate() {
    let one = Rate {
        max: 1,
        window_secs: 3600,
    };
    let limits = Mutex::new(Limits::new(LimitConfig {
        per_sender: Rate {
            max: 10,
            window_secs: 3600,
        },
        per_requester: Rate {
            max: 10,
            window_secs: 3600,
        },
        per_mailbox: one,
    }));
    let raw = probe_mail(
        ID,
        "john@doe.test",
        "alice@sender.test",
        "2026-10-08T11:00:00Z",
        QP,
    );
    run(&raw, None, &limits).await.unwrap();
    assert_eq!(
        run(&raw, None, &limits).await.unwrap_err(),
        Refusal::Duplicate
    );
    let raw2 = probe_mail(
        ID2,
        "john@doe.test",
        "bob@sender.test",
        "2026-10-08T11:00:00Z",
        QP,
    );
    assert_eq!(
        run(&raw2, None, &limits).await.unwrap_err(),
        Refusal::RateLimited(LimitScope::Mailbox)
    );
}

#[tokio::test]
async fn size_bound_is_configurable() {
    let raw = probe_mail(
        ID,
        "john@doe.test",
        "alice@sender.test",
        "2026-10-08T11:00:00Z",
        QP,
    );
    let mb = mailbox();
    let arrival = Arrival {
        mailbox: &mb,
        agent: None,
        max_bytes: raw.len() - 1,
    };
    let r = gate::run(&raw, &arrival, None, &trusted(), &fresh(), t(NOW)).await;
    assert_eq!(r.unwrap_err(), Refusal::TooLarge);
}

/// A nameserver that never answers: the verification times out into
/// temperror, and temperror earns no binding.
#[tokio::test]
async fn silent_dns_is_temperror() {
    let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let ns = silent.local_addr().unwrap();
    let v = Verifier::new(VerifyConfig {
        nameservers: vec![ns],
        query_timeout: Duration::from_millis(200),
        total_timeout: Duration::from_millis(500),
        host_domain: "gateway.test".into(),
    })
    .unwrap();
    let raw = std::fs::read(corpus_dir().join("dkimpy-rsa-relaxed.eml")).unwrap();
    let session = SmtpSession {
        client_ip: "192.0.2.1".parse().unwrap(),
        helo: "mail.sender.test".into(),
        mail_from: "alice@sender.test".into(),
    };
    let mb = mailbox();
    let arrival = Arrival {
        mailbox: &mb,
        agent: None,
        max_bytes: rdv_proto::consts::MAIL_MAX_BYTES,
    };
    let a = gate::run(
        &raw,
        &arrival,
        Some(&session),
        &AuthBackend::Verify(Box::new(v)),
        &fresh(),
        t(NOW),
    )
    .await
    .unwrap();
    assert_eq!(a.auth.dkim, Verdict::TempError);
    assert_eq!(a.auth.dmarc, Verdict::TempError);
    assert_eq!(a.binding, Binding::NeedsCookie);
    drop(silent);
}
