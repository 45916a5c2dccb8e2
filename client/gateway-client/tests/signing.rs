//! The `X-Rdv-Auth` header is exactly what the gateway's verifier accepts
//! (`rdv_probe_gateway::signed::verify`), bound to method, path with query
//! and body, with a fresh UUID and the injected clock's time.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{CountingRng, t};
use rdv_gateway_client::signed::{Signer, auth_header, fresh_uuid};
use rdv_probe_gateway::signed::{self as server, AuthRefusal};
use rdv_proto::AgentKey;
use rdv_proto::doc::obj::is_uuid;

const ID: &str = "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f";

#[test]
fn header_is_the_servers_document_byte_for_byte() {
    let k = AgentKey::from_seed([3; 32]);
    let now = t("2026-10-08T12:00:00Z");
    let body = br#"{"mailbox":"john@doe.test"}"#;
    let ours = auth_header(&k, "POST", "/v1/register", body, ID, now).unwrap();
    let theirs = server::sign(&k, "POST", "/v1/register", body, ID, now).unwrap();
    assert_eq!(ours, theirs);
    let ok = server::verify(
        Some(ours.as_bytes()),
        "POST",
        "/v1/register",
        body,
        now,
        300,
    )
    .unwrap();
    assert_eq!((&ok.agent, ok.id.as_str(), ok.ts), (k.id(), ID, now));
}

#[test]
fn header_binds_method_path_query_and_body() {
    let k = AgentKey::from_seed([3; 32]);
    let now = t("2026-10-08T12:00:00Z");
    let h = auth_header(&k, "GET", "/v1/inbox?after=4&limit=10", b"", ID, now).unwrap();
    let v = |m: &str, p: &str, b: &[u8]| server::verify(Some(h.as_bytes()), m, p, b, now, 300);
    assert!(v("GET", "/v1/inbox?after=4&limit=10", b"").is_ok());
    for (m, p, b) in [
        ("POST", "/v1/inbox?after=4&limit=10", &b""[..]),
        ("GET", "/v1/inbox?after=0&limit=10", b""),
        ("GET", "/v1/inbox", b""),
        ("GET", "/v1/inbox?after=4&limit=10", b"{}"),
    ] {
        assert_eq!(v(m, p, b), Err(AuthRefusal::Mismatch), "{m} {p}");
    }
}

#[test]
fn signer_uses_the_injected_clock_and_randomness() {
    let k = AgentKey::from_seed([5; 32]);
    let now = t("2026-10-08T12:00:00Z");
    let s = Signer::new(
        AgentKey::from_seed([5; 32]),
        Arc::new(move || now),
        Box::new(CountingRng(1)),
    );
    let h1 = s.header("GET", "/v1/mailboxes", b"").unwrap();
    let h2 = s.header("GET", "/v1/mailboxes", b"").unwrap();
    let r1 = server::verify(Some(h1.as_bytes()), "GET", "/v1/mailboxes", b"", now, 300).unwrap();
    let r2 = server::verify(Some(h2.as_bytes()), "GET", "/v1/mailboxes", b"", now, 300).unwrap();
    assert_eq!((&r1.agent, r1.ts), (k.id(), now));
    // A fresh id per request (the gateway refuses a reused one).
    assert_ne!(r1.id, r2.id);
    assert!(is_uuid(&r1.id) && is_uuid(&r2.id));
    // Reproducible: the same randomness gives the same ids.
    let again = Signer::new(
        AgentKey::from_seed([5; 32]),
        Arc::new(move || now),
        Box::new(CountingRng(1)),
    );
    assert_eq!(again.header("GET", "/v1/mailboxes", b"").unwrap(), h1);
    // The gateway's window is against its clock: a signer 301 s behind is stale.
    let late = now + time::Duration::seconds(301);
    assert_eq!(
        server::verify(Some(h1.as_bytes()), "GET", "/v1/mailboxes", b"", late, 300),
        Err(AuthRefusal::Stale)
    );
}

#[test]
fn fresh_uuids_are_version_4_and_lowercase() {
    let mut rng = CountingRng(9);
    for _ in 0..100 {
        let u = fresh_uuid(&mut rng);
        assert!(is_uuid(&u), "{u}");
        assert_eq!(&u[14..15], "4");
    }
}
