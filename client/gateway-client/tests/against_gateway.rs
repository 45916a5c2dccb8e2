//! The client against the real gateway (`rdv_probe_gateway::server`) on
//! 127.0.0.1:0 over HTTP: enrolment, the inbox and its stream, refusals
//! as data, and the whole probe handshake between two agents on one
//! gateway (SPEC §5.2.1) and an invite (§5.2.2), and a forwarding
//! confirmation as a typed item. The gateway's clock is a
//! ManualClock the clients share; its mail is recorded and fed back as a
//! mail rule would.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{Backend, Gw, card, probe_mail, request};
use rdv_gateway_client::{
    Error, ForwardingConfirmation, GatewayClient, InviteAnswer, ItemKind, ItemStatus,
};
use rdv_probe_gateway::clock::Clock;
use rdv_proto::AgentKey;
use rdv_proto::doc::grant::{GrantBuilder, GrantRef};
use rdv_proto::mailblock::{BlockPayload, Invite, ProbeEcho, parse_payload};
use serde_json::json;

const REQ1: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const REQ2: &str = "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02";

fn refused(e: Error) -> (u16, String) {
    match e {
        Error::Refused { status, code, .. } => (status, code),
        other => panic!("not a refusal: {other:?}"),
    }
}

#[test]
fn enrol_read_and_stream_sqlite() {
    enrol_read_and_stream(Backend::Sqlite);
}

#[test]
fn enrol_read_and_stream_postgres() {
    enrol_read_and_stream(Backend::Postgres);
}

fn enrol_read_and_stream(backend: Backend) {
    let gw = Gw::start_on(backend);
    let bob = gw.client(2);
    let r = bob.register("Bob@B.test").unwrap();
    assert_eq!(
        (r.status.as_str(), r.mailbox.as_str()),
        ("code_sent", "bob@b.test")
    );
    // A wrong code is the gateway's refusal, with its code.
    assert_eq!(
        refused(bob.verify("bob@b.test", "aaaaaaaa").unwrap_err()),
        (403, "wrong_code".into())
    );
    let v = bob.verify("bob@b.test", &gw.last_code()).unwrap();
    assert!(v.token.starts_with("rdvgw1."));
    assert_eq!(v.agent, bob.key().id().as_str());
    let gaddr = v.gateway_address.clone().unwrap();
    assert!(
        gaddr.starts_with("rdv+") && gaddr.ends_with("@gw.test"),
        "{gaddr}"
    );
    // The token is a secret: Debug does not show it.
    assert!(!format!("{v:?}").contains(&v.token));
    let m = bob.mailboxes().unwrap();
    assert_eq!(m.mailboxes.len(), 1);
    assert_eq!(m.mailboxes[0].mailbox, "bob@b.test");
    assert_eq!(
        m.mailboxes[0].gateway_address.as_deref(),
        Some(gaddr.as_str())
    );

    let page = bob.inbox(None, None).unwrap();
    assert!(page.items.is_empty());
    // A probe mail from another agent, piped in as the mail rule does.
    let alice = AgentKey::from_seed([1; 32]);
    let report = bob
        .inbound(
            &v.token,
            &probe_mail(&alice, REQ1, "bob@b.test", "alice@a.test"),
        )
        .unwrap();
    let seq = report["seq"].as_u64().unwrap();
    let page = bob.inbox(Some(0), Some(10)).unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.next, seq);
    let it = &page.items[0];
    assert_eq!(it.seq, seq);
    assert_eq!(it.kind, ItemKind::Probe);
    assert_eq!(it.status, Some(ItemStatus::Pending));
    assert_eq!(it.id.as_deref(), Some(REQ1));
    assert_eq!(it.mailbox.as_deref(), Some("bob@b.test"));
    assert_eq!(it.requester.as_deref(), Some(alice.id().as_str()));
    assert_eq!(it.binding.as_deref(), Some("weak_mailbox_proof"));
    assert_eq!(it.cookie.as_ref().unwrap().len(), 26);
    // The cursor: nothing after the last seq.
    assert!(bob.inbox(Some(seq), None).unwrap().items.is_empty());

    // The stream replays the queue after the cursor, then waits.
    let mut events = bob.stream(Some(0)).unwrap();
    let ev = events.next().unwrap().unwrap();
    assert_eq!(ev.event, "probe");
    assert_eq!(ev.id, Some(seq.to_string()));
    assert_eq!(&ev.item().unwrap(), it);
    // A message admitted while the stream is open arrives on it.
    bob.inbound(
        &v.token,
        &probe_mail(&alice, REQ2, "bob@b.test", "alice@a.test"),
    )
    .unwrap();
    let ev = events.next().unwrap().unwrap();
    assert_eq!(ev.item().unwrap().id.as_deref(), Some(REQ2));

    // Gmail's forwarding confirmation, at the gateway address, the way the
    // SMTP listener hands it over (`deliver_gateway`): a typed item with
    // the code, on the stream and in the inbox.
    let state = &gw.running.as_ref().unwrap().state;
    let seq = gw
        .rt
        .block_on(state.deliver_gateway("bob@b.test", &forwarding_mail(&gaddr), None))
        .unwrap();
    let ev = events.next().unwrap().unwrap();
    assert_eq!(ev.event, "forwarding_confirmation");
    assert_eq!(ev.id, Some(seq.to_string()));
    let it = ev.item().unwrap();
    assert_eq!(it.kind, ItemKind::ForwardingConfirmation);
    assert_eq!(
        it.forwarding_confirmation(),
        Some(ForwardingConfirmation {
            mailbox: "bob@b.test",
            code: "012345678",
            provider: Some("gmail"),
        })
    );
    assert!(it.extra.is_empty(), "{:?}", it.extra);
    let page = bob
        .inbox(Some(u64::try_from(seq - 1).unwrap()), None)
        .unwrap();
    assert_eq!(page.items, vec![it]);
}

/// Gmail's forwarding confirmation to `to`, DKIM-passed for google.com by
/// the trusted authserv-id.
fn forwarding_mail(to: &str) -> Vec<u8> {
    format!(
        "Authentication-Results: {}; dkim=pass header.d=google.com\r\n\
         From: Gmail Team <forwarding-noreply@google.com>\r\nTo: {to}\r\n\
         Subject: (#012345678) Gmail Forwarding Confirmation - Receive Mail from bob@b.test\r\n\
         Date: Thu, 08 Oct 2026 11:59:00 +0000\r\nMessage-ID: <fwd-1@google.com>\r\n\
         Content-Type: text/plain; charset=UTF-8\r\n\r\n\
         Confirmation code: 012345678\r\n",
        common::AUTHSERV
    )
    .into_bytes()
}

#[test]
fn refusals_are_data() {
    let gw = Gw::start();
    let bob = gw.client(2);
    let token = gw.enroll(&bob, "bob@b.test");
    // A key that proved no mailbox.
    assert_eq!(
        refused(gw.client(3).inbox(None, None).unwrap_err()),
        (403, "unregistered".into())
    );
    // A client whose clock is 10 minutes off the gateway's window.
    let clock = gw.clock.clone();
    let skewed = GatewayClient::with(
        &gw.url,
        AgentKey::from_seed([2; 32]),
        Arc::new(move || clock.now() + time::Duration::minutes(10)),
        Box::new(common::CountingRng(77)),
    );
    assert_eq!(
        refused(skewed.inbox(None, None).unwrap_err()),
        (401, "stale".into())
    );
    // The mail rule's pipe: a wrong token; the gate's refusal code.
    let alice = AgentKey::from_seed([1; 32]);
    let mail = probe_mail(&alice, REQ1, "bob@b.test", "alice@a.test");
    let bad = format!("{}x", &token[..token.len() - 1]);
    assert_eq!(
        refused(bob.inbound(&bad, &mail).unwrap_err()),
        (401, "bad_token".into())
    );
    let other = probe_mail(&alice, REQ2, "carol@b.test", "alice@a.test");
    assert_eq!(
        refused(bob.inbound(&token, &other).unwrap_err()),
        (422, "to_hint".into())
    );
    bob.inbound(&token, &mail).unwrap();
    assert_eq!(
        refused(bob.inbound(&token, &mail).unwrap_err()),
        (409, "duplicate".into())
    );
    // Refused before anything is sent.
    assert!(matches!(
        bob.register("not a mailbox"),
        Err(Error::Input(_))
    ));
    assert!(matches!(
        bob.invite_status("../../v1/ack", InviteAnswer::Accepted),
        Err(Error::Input(_))
    ));
    assert!(matches!(
        bob.inbound("nottoken", &mail),
        Err(Error::Input(_))
    ));
    assert!(matches!(
        bob.inbound(
            &token,
            &vec![b'x'; rdv_gateway_client::client::MAX_MAIL_BYTES + 1]
        ),
        Err(Error::Input(_))
    ));
    // No server at all: a transport error, not a refusal.
    let gone = GatewayClient::new("http://127.0.0.1:9", AgentKey::from_seed([2; 32]));
    assert!(matches!(gone.mailboxes(), Err(Error::Transport(_))));
}

/// The last mail the gateway sent, as the recipient's rule hands it over.
fn last_mail(gw: &Gw) -> Vec<u8> {
    gw.sent().pop().unwrap()
}

#[test]
fn probe_answer_echo_release_and_invite_sqlite() {
    probe_answer_echo_release_and_invite(Backend::Sqlite);
}

#[test]
fn probe_answer_echo_release_and_invite_postgres() {
    probe_answer_echo_release_and_invite(Backend::Postgres);
}

fn probe_answer_echo_release_and_invite(backend: Backend) {
    let gw = Gw::start_on(backend);
    let alice = gw.client(1);
    let bob = gw.client(2);
    let a_token = gw.enroll(&alice, "alice@a.test");
    let b_token = gw.enroll(&bob, "bob@b.test");
    let now = gw.clock.now();

    // SYN: Alice's agent probes Bob's mailbox through the gateway.
    let req = request(alice.key(), REQ1, "bob@b.test");
    let sent = alice.send_probe("bob@b.test", &req, None).unwrap();
    assert_eq!(sent.status, "sent");
    assert_eq!(sent.id.as_deref(), Some(REQ1));
    // Once per address per 30 days: the second is refused with a wait.
    let again = request(alice.key(), REQ2, "bob@b.test");
    match alice.send_probe("bob@b.test", &again, None).unwrap_err() {
        Error::Refused {
            status,
            code,
            retry_after,
            ..
        } => {
            assert_eq!((status, code.as_str()), (429, "address_limited"));
            assert!(retry_after.unwrap() > 0);
        }
        e => panic!("{e:?}"),
    }
    let b_seq = bob.inbound(&b_token, &last_mail(&gw)).unwrap()["seq"]
        .as_u64()
        .unwrap();
    let probe = bob.inbox(Some(b_seq - 1), Some(1)).unwrap().items.remove(0);
    assert_eq!((probe.kind.clone(), probe.seq), (ItemKind::Probe, b_seq));
    let cookie = probe.cookie.clone().unwrap();

    // SYN-ACK: Bob's agent grants; the gateway adds the cookie.
    let grant = GrantBuilder {
        id: "2b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01".into(),
        to: alice.key().id().clone(),
        reference: GrantRef::Request(REQ1.into()),
        card: card(bob.key()),
        tier: "stranger".into(),
        scope: json!({"may_initiate": true}),
        expires: None,
        ts: now,
    }
    .sign(bob.key())
    .unwrap();
    let sent = bob.syn_ack(b_seq, &grant).unwrap();
    assert_eq!((sent.status.as_str(), sent.seq), ("sent", Some(b_seq)));
    assert_eq!(
        refused(bob.syn_ack(b_seq, &grant).unwrap_err()).1,
        "already_answered"
    );
    let a_seq = alice.inbound(&a_token, &last_mail(&gw)).unwrap()["seq"]
        .as_u64()
        .unwrap();
    let ack = alice
        .inbox(Some(a_seq - 1), Some(1))
        .unwrap()
        .items
        .remove(0);
    assert_eq!(ack.kind, ItemKind::ProbeAck);
    let BlockPayload::ProbeAck(p) = parse_payload(&ack.payload, now, false).unwrap() else {
        panic!("not a SYN-ACK");
    };
    assert_eq!(p.cookie, cookie);

    // A wrong cookie does not release; the ACK by mail does.
    assert_eq!(
        refused(bob.ack(b_seq, "aaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap_err()),
        (403, "bad_cookie".into())
    );
    let echo = ProbeEcho::build(REQ1, bob.key().id(), &p.cookie, now, alice.key()).unwrap();
    assert_eq!(alice.send_ack(a_seq, &echo).unwrap().status, "sent");
    bob.inbound(&b_token, &last_mail(&gw)).unwrap();
    let items = bob.inbox(Some(b_seq), None).unwrap().items;
    let release = items.iter().find(|i| i.kind == ItemKind::Release).unwrap();
    assert_eq!(release.extra["request_id"], json!(REQ1));
    let r = bob.ack(b_seq, &cookie).unwrap();
    assert_eq!(
        (r.status.as_str(), r.request_id.as_str()),
        ("released", REQ1)
    );
    assert_eq!(r.via, "mail");

    // An invite to an address with no agent, then its answer.
    let inv_id = "3b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
    let inv = Invite::build(inv_id, Some("dana@d.test"), "tok3n", now, alice.key()).unwrap();
    let sent = alice
        .send_invite(
            "dana@d.test",
            &inv,
            "the book club's member list",
            Some("Hi Dana, it's Alice."),
            None,
        )
        .unwrap();
    assert_eq!(
        (sent.status.as_str(), sent.id.as_deref()),
        ("sent", Some(inv_id))
    );
    let inv2 = Invite::build(REQ2, Some("dana@d.test"), "tok3n", now, alice.key()).unwrap();
    assert_eq!(
        refused(
            alice
                .send_invite("dana@d.test", &inv2, "the club list", None, None)
                .unwrap_err()
        )
        .1,
        "invite_pending"
    );
    let st = alice.invite_status(inv_id, InviteAnswer::Declined).unwrap();
    assert_eq!(st.status, "declined");
}

#[test]
fn canned_answers_stream_end_bounds_and_retry() {
    use common::canned;
    let sse = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n\
                : ready\n\nevent: probe\nid: 3\ndata: {\"seq\":3,\"received\":\"2026-10-08T12:00:00Z\",\"kind\":\"probe\",\"new_member\":1}\n\n"
        .to_vec();
    let body = r#"{"error":"address_limited","message":"later","retry_after":90}"#;
    let limited = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
         retry-after: 60\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    let header_only =
        b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 30\r\ncontent-length: 4\r\n\
                        connection: close\r\n\r\noops"
            .to_vec();
    let mut huge = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        rdv_gateway_client::client::MAX_RESPONSE_BYTES + 1
    )
    .into_bytes();
    huge.extend(vec![
        b' ';
        rdv_gateway_client::client::MAX_RESPONSE_BYTES as usize
            + 1
    ]);
    let url = canned(vec![sse, limited, header_only, huge]);
    let c = GatewayClient::new(&url, AgentKey::from_seed([2; 32]));
    // One event (an unknown member kept), then a clean end on close.
    let evs: Vec<_> = c.stream(None).unwrap().collect();
    assert_eq!(evs.len(), 1);
    let item = evs[0].as_ref().unwrap().item().unwrap();
    assert_eq!((item.seq, item.kind.clone()), (3, ItemKind::Probe));
    assert_eq!(item.extra["new_member"], json!(1));
    // The body's retry_after wins over the header; a bodyless refusal
    // still has its status and the header's wait.
    assert_eq!(
        c.mailboxes().unwrap_err(),
        Error::Refused {
            status: 429,
            code: "address_limited".into(),
            message: "later".into(),
            retry_after: Some(90)
        }
    );
    assert_eq!(
        c.mailboxes().unwrap_err(),
        Error::Refused {
            status: 503,
            code: "unknown".into(),
            message: String::new(),
            retry_after: Some(30)
        }
    );
    assert!(matches!(c.mailboxes(), Err(Error::BadAnswer(_))));
}
