//! End to end over HTTP, the same suite on SQLite and on Postgres (§4.5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use rdv_directory_client::Error;
use rdv_directory_client::http::{ListedKey, parse_keys};
use rdv_directory_client::listing::{Listing, Removal};
use rdv_directory_client::oprf::ServerKey;
use rdv_proto::AgentKey;
use serde_json::{Value, json};

use rdv_service_kit::both_backends as both;

const DAY: time::Duration = time::Duration::days(1);

async fn publish(
    env: &Env,
    key: &AgentKey,
    card: &Value,
    a: &str,
) -> Result<rdv_directory_client::wire::ListingResponse, Error> {
    let (c, key, card, a, now) = (
        env.client(),
        AgentKey::from_seed(*key.seed()),
        card.clone(),
        addr(a),
        env.now(),
    );
    blocking(move || c.publish(&key, &card, &a, now, 7 * DAY, &mut rand_core::OsRng)).await
}

async fn lookup(env: &Env, a: &[&str]) -> Vec<rdv_directory_client::Found> {
    let (c, now) = (env.client(), env.now());
    let a: Vec<_> = a.iter().map(|s| addr(s)).collect();
    blocking(move || c.lookup(&a, now, false, &mut rand_core::OsRng))
        .await
        .unwrap()
}

both!(publish_then_lookup_finds_exactly_the_card);
async fn publish_then_lookup_finds_exactly_the_card(b: Backend) {
    let env = Env::new(b, |_| {}).await;
    let john = AgentKey::from_seed([1; 32]);
    let c = card(&john, &["john@doe.com", "+972-54-000-0000"], t0() - DAY);
    let r = publish(&env, &john, &c, "John@Doe.com").await.unwrap();
    assert_eq!((r.status.as_str(), r.claims), ("stored", 1));
    // Another agent listed elsewhere, to share buckets with.
    let jane = AgentKey::from_seed([2; 32]);
    publish(
        &env,
        &jane,
        &card(&jane, &["jane@doe.com"], t0() - DAY),
        "jane@doe.com",
    )
    .await
    .unwrap();
    let found = lookup(&env, &["john@doe.com", "nobody@doe.com", "+972540000000"]).await;
    assert_eq!(found[0].cards.len(), 1);
    assert_eq!(found[0].cards[0].card.doc, c);
    assert_eq!(&found[0].cards[0].card.id, john.id());
    assert!(found[0].refused.is_empty());
    assert!(found[1].cards.is_empty(), "a wrong address finds nothing");
    assert!(found[2].cards.is_empty(), "the phone was not published");
    env.teardown().await;
}

both!(several_agents_may_claim_one_address);
async fn several_agents_may_claim_one_address(b: Backend) {
    let env = Env::new(b, |c| c.max_claims_per_lookup_id = 2).await;
    for seed in 1..=2u8 {
        let k = AgentKey::from_seed([seed; 32]);
        let r = publish(
            &env,
            &k,
            &card(&k, &["shared@doe.com"], t0()),
            "shared@doe.com",
        )
        .await
        .unwrap();
        assert_eq!(r.claims, u64::from(seed));
    }
    let k3 = AgentKey::from_seed([3; 32]);
    let e = publish(
        &env,
        &k3,
        &card(&k3, &["shared@doe.com"], t0()),
        "shared@doe.com",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(e, Error::Refused { status: 409, ref code, .. } if code == "too_many_claims"),
        "{e:?}"
    );
    let found = lookup(&env, &["shared@doe.com"]).await;
    assert_eq!(
        found[0].cards.len(),
        2,
        "both claims returned, for the requester to judge"
    );
    env.teardown().await;
}

/// The key, the lookup_id of `a` under it, and a listing doc for `card`.
async fn listing_doc(
    env: &Env,
    agent: &AgentKey,
    card: &Value,
    a: &str,
    updated: rdv_proto::time::Instant,
) -> (String, Value) {
    let (c, agent, card, a) = (
        env.client(),
        AgentKey::from_seed(*agent.seed()),
        card.clone(),
        addr(a),
    );
    blocking(move || {
        let key = c.keys().unwrap().remove(0);
        let d = c
            .derive(&key, &[a], 1, &mut rand_core::OsRng)
            .unwrap()
            .remove(0);
        let doc = d
            .listing(
                &agent,
                &card,
                &key.id,
                updated,
                updated + 7 * DAY,
                &mut rand_core::OsRng,
            )
            .unwrap();
        (d.lookup_id.clone(), doc)
    })
    .await
}

both!(forged_replayed_and_mismatched_listings_refused);
async fn forged_replayed_and_mismatched_listings_refused(b: Backend) {
    let env = Env::new(b, |_| {}).await;
    let john = AgentKey::from_seed([1; 32]);
    let c1 = card(&john, &["john@doe.com"], t0() - DAY);
    let (lid, old) = listing_doc(
        &env,
        &john,
        &c1,
        "john@doe.com",
        t0() - time::Duration::hours(2),
    )
    .await;
    let url = format!("{}/v1/listings/{lid}", env.url);
    let put = |doc: &Value| {
        let (url, body) = (url.clone(), rdv_proto::canon::to_string(doc).unwrap());
        blocking(move || raw("PUT", &url, Some(&body)))
    };
    // Forged: the sealed card swapped after signing.
    let mut forged = old.clone();
    forged["updated"] = json!("2026-10-07T23:00:00Z");
    let (s, _, body) = put(&forged).await;
    assert_eq!((s, body["error"].as_str()), (400, Some("bad_signature")));
    // Signed by a key other than the agent it names.
    let mallory = AgentKey::from_seed([9; 32]);
    let mut m = old.as_object().unwrap().clone();
    m.remove("sig");
    let sig = rdv_proto::sign::sign(m, &mallory).unwrap()["sig"].clone();
    let mut stolen = old.clone();
    stolen["sig"] = sig;
    assert_eq!(put(&stolen).await.0, 400);
    // Stored, then a newer one, then the older one replayed: nothing changes.
    assert_eq!(put(&old).await.0, 200);
    let c2 = card(&john, &["john@doe.com"], t0() - time::Duration::hours(1));
    let (_, newer) = listing_doc(
        &env,
        &john,
        &c2,
        "john@doe.com",
        t0() - time::Duration::hours(1),
    )
    .await;
    let (s, _, body) = put(&newer).await;
    assert_eq!((s, body["status"].as_str()), (200, Some("replaced")));
    let (s, _, body) = put(&old).await;
    assert_eq!((s, body["error"].as_str()), (409, Some("stale")));
    assert_eq!(
        put(&newer).await.0,
        409,
        "the same document again changes nothing"
    );
    let found = lookup(&env, &["john@doe.com"]).await;
    assert_eq!(found[0].cards.len(), 1);
    assert_eq!(found[0].cards[0].card.doc, c2);
    // Under another lookup_id than the path.
    let other = format!("{}/v1/listings/{}", env.url, "0".repeat(64));
    let body = rdv_proto::canon::to_string(&newer).unwrap();
    let (s, _, e) = blocking(move || raw("PUT", &other, Some(&body))).await;
    assert_eq!((s, e["error"].as_str()), (400, Some("lookup_id_mismatch")));
    // Removal, then the old listing replayed: stays removed.
    let rm = Removal::sign(&john, newer["key_id"].as_str().unwrap(), &lid, t0()).unwrap();
    let (u, body) = (url.clone(), rdv_proto::canon::to_string(&rm).unwrap());
    let (s, _, r) = blocking(move || raw("DELETE", &u, Some(&body))).await;
    assert_eq!((s, r["status"].as_str()), (200, Some("removed")));
    assert_eq!(put(&newer).await.1, None);
    assert_eq!(put(&newer).await.0, 409, "a replay after removal is stale");
    assert!(lookup(&env, &["john@doe.com"]).await[0].cards.is_empty());
    // An older removal replayed after a newer listing does nothing.
    env.clock.advance(time::Duration::minutes(10));
    let c3 = card(
        &john,
        &["john@doe.com"],
        env.now() - time::Duration::minutes(1),
    );
    publish(&env, &john, &c3, "john@doe.com").await.unwrap();
    let (u, body) = (url.clone(), rdv_proto::canon::to_string(&rm).unwrap());
    let (s, _, _) = blocking(move || raw("DELETE", &u, Some(&body))).await;
    assert_eq!(s, 409);
    assert_eq!(lookup(&env, &["john@doe.com"]).await[0].cards.len(), 1);
    // A removal dated the same second as the listing removes it: the owner
    // may withdraw a listing right after publishing it.
    let held = publish(&env, &john, &c3, "john@doe.com").await;
    assert!(held.is_err(), "same listing again is stale");
    let rm = Removal::sign(&john, newer["key_id"].as_str().unwrap(), &lid, env.now()).unwrap();
    let (u, body) = (url.clone(), rdv_proto::canon::to_string(&rm).unwrap());
    let (s, _, r) = blocking(move || raw("DELETE", &u, Some(&body))).await;
    assert_eq!((s, r["status"].as_str()), (200, Some("removed")));
    assert!(lookup(&env, &["john@doe.com"]).await[0].cards.is_empty());
    env.teardown().await;
}

both!(card_that_does_not_claim_the_address_is_refused);
async fn card_that_does_not_claim_the_address_is_refused(b: Backend) {
    let env = Env::new(b, |_| {}).await;
    let eve = AgentKey::from_seed([5; 32]);
    // Eve lists a card that claims only her own address under john's lookup_id.
    let c = card(&eve, &["eve@evil.example"], t0() - DAY);
    publish(&env, &eve, &c, "john@doe.com").await.unwrap();
    // And a card of another agent inside her own listing.
    let john = AgentKey::from_seed([1; 32]);
    let johns = card(&john, &["+15550100"], t0() - DAY);
    publish(&env, &eve, &johns, "+15550100").await.unwrap();
    let found = lookup(&env, &["john@doe.com", "+15550100"]).await;
    assert!(found[0].cards.is_empty());
    assert!(
        matches!(&found[0].refused[..], [Error::Listing(m)] if m.contains("claim")),
        "{:?}",
        found[0].refused
    );
    assert!(found[1].cards.is_empty());
    assert!(
        matches!(&found[1].refused[..], [Error::Listing(m)] if m.contains("agent")),
        "{:?}",
        found[1].refused
    );
    env.teardown().await;
}

both!(bad_proof_and_unknown_key_refused);
async fn bad_proof_and_unknown_key_refused(b: Backend) {
    let env = Env::new(b, |_| {}).await;
    let c = env.client();
    let r = blocking(move || {
        let real = c.keys().unwrap().remove(0);
        let (other, _) = ServerKey::generate(&mut rand_core::OsRng);
        // The server's id with another public key: the proof cannot verify.
        let tagged = ListedKey {
            public: other.public().clone(),
            ..real.clone()
        };
        let bad = c.evaluate(&tagged, &[b"x".to_vec()], &mut rand_core::OsRng);
        // A key the server does not list.
        let unknown = ListedKey {
            id: other.public().id(),
            public: other.public().clone(),
            ..real
        };
        let unk = c.evaluate(&unknown, &[b"x".to_vec()], &mut rand_core::OsRng);
        (bad, unk)
    })
    .await;
    assert_eq!(r.0.unwrap_err(), Error::BadProof);
    assert!(
        matches!(r.1.unwrap_err(), Error::Refused { status: 400, ref code, .. } if code == "unknown_key")
    );
    // A listed key whose id is not its hash is refused by the client.
    let mut k = env.client();
    k = blocking(move || {
        let _ = k.keys().unwrap();
        k
    })
    .await;
    drop(k);
    let (s, _, body) = blocking({
        let u = format!("{}/v1/keys", env.url);
        move || raw("GET", &u, None)
    })
    .await;
    assert_eq!(s, 200);
    let mut keys: rdv_directory_client::wire::KeysResponse = serde_json::from_value(body).unwrap();
    keys.keys[0].id = "0".repeat(64);
    assert!(parse_keys(&keys).is_err());
    env.teardown().await;
}

both!(oversize_and_malformed_bodies_refused);
async fn oversize_and_malformed_bodies_refused(b: Backend) {
    let env = Env::new(b, |c| c.max_batch = 10).await;
    let key_id = blocking({
        let c = env.client();
        move || c.keys().unwrap().remove(0).id
    })
    .await;
    let u = env.url.clone();
    let mut cases: Vec<(&str, String, String, u16, Option<&str>)> = vec![
        ("POST", "/v1/evaluate".into(), "{".into(), 400, Some("malformed")),
        ("POST", "/v1/evaluate".into(), json!({"key_id": key_id, "blinded": [], "x": 1}).to_string(), 400, Some("malformed")),
        ("POST", "/v1/evaluate".into(), json!({"key_id": key_id, "blinded": []}).to_string(), 413, Some("batch_size")),
        ("POST", "/v1/evaluate".into(), json!({"key_id": key_id, "blinded": vec!["A".repeat(44); 11]}).to_string(), 413, Some("batch_size")),
        ("POST", "/v1/evaluate".into(), json!({"key_id": key_id, "blinded": ["AAAA"]}).to_string(), 400, Some("bad_element")),
        ("POST", "/v1/evaluate".into(), json!({"key_id": key_id, "blinded": [rdv_proto::encoding::base64(&{ let mut x = [0xffu8; 33]; x[0] = 2; x })]}).to_string(), 400, Some("bad_element")),
        ("POST", "/v1/lookup".into(), json!({"key_id": key_id, "buckets": ["zz"]}).to_string(), 400, Some("bad_bucket")),
        ("POST", "/v1/lookup".into(), json!({"key_id": key_id, "buckets": ["abc"]}).to_string(), 400, Some("bad_bucket")),
        ("POST", "/v1/lookup".into(), json!({"key_id": "0".repeat(64), "buckets": ["ab"]}).to_string(), 400, Some("unknown_key")),
        ("PUT", format!("/v1/listings/{}", "a".repeat(64)), "[1, 2.5]".into(), 400, Some("invalid_document")),
        ("PUT", format!("/v1/listings/{}", "a".repeat(64)), "{\"a\":1,\"a\":2}".into(), 400, Some("invalid_document")),
        ("PUT", "/v1/listings/NOTHEX".into(), "{}".into(), 400, Some("bad_lookup_id")),
        ("PUT", format!("/v1/listings/{}", "a".repeat(64)), format!("{{\"pad\":\"{}\"}}", "x".repeat(30 * 1024)), 413, Some("too_large")),
        // Routing refusals from axum itself, same shape.
        ("POST", "/v1/nowhere".into(), "{}".into(), 404, Some("not_found")),
        ("PUT", "/v1/evaluate".into(), "{}".into(), 405, Some("method_not_allowed")),
    ];
    // Every encoding RFC 9497's DeserializeElement refuses, from the
    // vectors: SEC1's compact form among them, which the directory took
    // until fuzzing found it (docs/directory.md).
    let vectors: Value =
        serde_json::from_str(include_str!("../../docs/test-vectors/directory.json")).unwrap();
    for v in vectors["invalid_elements"].as_array().unwrap() {
        let b = hex::decode(v["hex"].as_str().unwrap()).unwrap();
        let body = json!({"key_id": key_id, "blinded": [rdv_proto::encoding::base64(&b)]});
        cases.push((
            "POST",
            "/v1/evaluate".into(),
            body.to_string(),
            400,
            Some("bad_element"),
        ));
    }
    // Over max_body_bytes: refused by the body limit from the announced
    // length, before any of the body is read, in the same JSON shape.
    let announced = [
        ("POST", "/v1/evaluate".to_string()),
        ("PUT", format!("/v1/listings/{}", "a".repeat(64))),
    ];
    let mut results = Vec::new();
    for (m, path) in announced {
        let url = format!("{u}{path}");
        let (s, e) = blocking(move || raw_announced(m, &url, 200 * 1024)).await;
        results.push((m, path, s, e, 413, Some("too_large")));
    }
    for (m, path, body, want, code) in cases {
        let url = format!("{u}{path}");
        let (s, _, e) = blocking(move || raw(m, &url, Some(&body))).await;
        results.push((m, path, s, e, want, code));
    }
    for (m, path, s, e, want, code) in results {
        assert_eq!(s, want, "{m} {path}: {e}");
        if let Some(code) = code {
            assert_eq!(e["error"].as_str(), Some(code), "{m} {path}: {e}");
        }
        // Every refusal is {error, message}, both strings, nothing else.
        let obj = e
            .as_object()
            .unwrap_or_else(|| panic!("{m} {path}: not JSON: {e}"));
        assert_eq!(obj.len(), 2, "{m} {path}: {e}");
        assert!(e["message"].is_string(), "{m} {path}: {e}");
    }
    env.teardown().await;
}

both!(rotation_keeps_old_listings_during_grace);
async fn rotation_keeps_old_listings_during_grace(b: Backend) {
    let mut env = Env::new(b, |_| {}).await;
    let john = AgentKey::from_seed([1; 32]);
    publish(
        &env,
        &john,
        &card(&john, &["john@doe.com"], t0() - DAY),
        "john@doe.com",
    )
    .await
    .unwrap();
    let old_id = blocking({
        let c = env.client();
        move || c.keys().unwrap().remove(0).id
    })
    .await;
    let now = env.now();
    rdv_directory::keys::rotate(&mut env.keyfile, now, 2 * DAY, &mut rand_core::OsRng).unwrap();
    env.restart().await;
    let keys = blocking({
        let c = env.client();
        move || c.keys().unwrap()
    })
    .await;
    assert_eq!(keys.len(), 2, "both keys listed during the grace period");
    let found = lookup(&env, &["john@doe.com"]).await;
    assert_eq!(found[0].cards.len(), 1, "old listing resolves during grace");
    assert_eq!(found[0].cards[0].listing.key_id, old_id);
    // New publishes use the new key.
    let jane = AgentKey::from_seed([2; 32]);
    publish(
        &env,
        &jane,
        &card(&jane, &["jane@doe.com"], t0() - DAY),
        "jane@doe.com",
    )
    .await
    .unwrap();
    env.clock.advance(3 * DAY);
    let found = lookup(&env, &["john@doe.com", "jane@doe.com"]).await;
    assert!(
        found[0].cards.is_empty(),
        "after the grace period the old key's listings are gone"
    );
    assert_eq!(found[1].cards.len(), 1);
    assert_ne!(found[1].cards[0].listing.key_id, old_id);
    let body = json!({"key_id": old_id, "buckets": ["00"]}).to_string();
    let u = format!("{}/v1/lookup", env.url);
    let (s, _, e) = blocking(move || raw("POST", &u, Some(&body))).await;
    assert_eq!((s, e["error"].as_str()), (400, Some("unknown_key")));
    env.teardown().await;
}

both!(rate_limits_answer_429);
async fn rate_limits_answer_429(b: Backend) {
    let env = Env::new(b, |c| {
        c.max_batch = 5;
        c.limits.evaluate.burst = 8;
        c.limits.evaluate.per_day = 10;
        c.limits.publish.burst = 2;
        c.limits.publish.per_day = 10;
    })
    .await;
    let c = env.client();
    let r = blocking(move || {
        let k = c.keys().unwrap().remove(0);
        let ok = c.evaluate(&k, &vec![b"a".to_vec(); 5], &mut rand_core::OsRng);
        let limited = c.evaluate(&k, &vec![b"a".to_vec(); 5], &mut rand_core::OsRng);
        (ok, limited)
    })
    .await;
    assert!(r.0.is_ok());
    match r.1 {
        Err(Error::Refused {
            status: 429,
            code,
            retry_after: Some(s),
            ..
        }) => {
            assert_eq!(code, "rate_limited");
            assert!(s >= 1);
        }
        other => panic!("expected 429, got {other:?}"),
    }
    // Publishes: two tries pass the limiter (refused for content), the third is 429.
    let u = format!("{}/v1/listings/{}", env.url, "a".repeat(64));
    let st = blocking(move || {
        (0..3)
            .map(|_| raw("PUT", &u, Some("{}")))
            .map(|r| (r.0, r.1))
            .collect::<Vec<_>>()
    })
    .await;
    assert_eq!(st[0].0, 400);
    assert_eq!(st[1].0, 400);
    assert_eq!(st[2].0, 429);
    assert!(
        st[2]
            .1
            .as_deref()
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|s| s >= 1)
    );
    let m = blocking({
        let u = format!("{}/metrics", env.url);
        move || raw("GET", &u, None).2
    })
    .await;
    assert!(
        m.as_str()
            .unwrap()
            .contains("rdv_directory_rate_limited_total"),
        "refusals are counted"
    );
    env.teardown().await;
}

both!(buckets_are_padded);
async fn buckets_are_padded(b: Backend) {
    let env = Env::new(b, |c| {
        c.bucket_hex_len = 1;
        c.pad_to = 4;
    })
    .await;
    for seed in 1..=6u8 {
        let k = AgentKey::from_seed([seed; 32]);
        let a = format!("user{seed}@doe.com");
        publish(&env, &k, &card(&k, &[&a], t0()), &a).await.unwrap();
    }
    let key_id = blocking({
        let c = env.client();
        move || c.keys().unwrap().remove(0).id
    })
    .await;
    let all: Vec<String> = (0..16).map(|i| format!("{i:x}")).collect();
    let body = json!({"key_id": key_id, "buckets": all}).to_string();
    let u = format!("{}/v1/lookup", env.url);
    let (s, _, r) = blocking(move || raw("POST", &u, Some(&body))).await;
    assert_eq!(s, 200);
    let mut real = 0;
    for bk in r["buckets"].as_array().unwrap() {
        let ls = bk["listings"].as_array().unwrap();
        assert!(
            !ls.is_empty() && ls.len() % 4 == 0,
            "bucket padded to a multiple of pad_to"
        );
        for l in ls {
            assert!(
                l["lookup_id"]
                    .as_str()
                    .unwrap()
                    .starts_with(bk["prefix"].as_str().unwrap())
            );
            if Listing::parse_signed(l).is_ok() {
                real += 1;
            }
        }
    }
    assert_eq!(real, 6, "exactly the real listings verify; decoys do not");
    env.teardown().await;
}

both!(listings_expire_unless_refreshed);
async fn listings_expire_unless_refreshed(b: Backend) {
    let env = Env::new(b, |_| {}).await;
    let john = AgentKey::from_seed([1; 32]);
    publish(
        &env,
        &john,
        &card(&john, &["john@doe.com"], t0() - DAY),
        "john@doe.com",
    )
    .await
    .unwrap();
    env.clock.advance(6 * DAY);
    assert_eq!(lookup(&env, &["john@doe.com"]).await[0].cards.len(), 1);
    env.clock.advance(2 * DAY);
    assert!(
        lookup(&env, &["john@doe.com"]).await[0].cards.is_empty(),
        "expired after 7 days"
    );
    let now = env.now().unix_timestamp();
    let usable: Vec<String> = env
        .running
        .as_ref()
        .unwrap()
        .state
        .keys()
        .usable(env.now())
        .iter()
        .map(|k| k.id.clone())
        .collect();
    let store = env.running.as_ref().unwrap().state.store().clone();
    assert!(store.purge(now, &usable).await.unwrap() >= 1);
    assert_eq!(store.stats().await.unwrap().listings, 0);
    env.teardown().await;
}

// RFC 9497 A.3.2 through the HTTP evaluate endpoint and the client's finalize.
both!(rfc9497_vectors_over_http);
async fn rfc9497_vectors_over_http(b: Backend) {
    let rfc: Value = serde_json::from_str(include_str!(
        "../../docs/test-vectors/directory-rfc9497-p256-voprf.json"
    ))
    .unwrap();
    let mut env = Env::new(b, |_| {}).await;
    env.keyfile.keys[0].secret = rfc["sk_s"].as_str().unwrap().to_string();
    env.restart().await;
    let h = |v: &Value| hex::decode(v.as_str().unwrap()).unwrap();
    for v in rfc["vectors"].as_array().unwrap().clone() {
        let c = env.client();
        let rfc = rfc.clone();
        let (evaluated, outputs) = blocking(move || {
            let key = c.keys().unwrap().remove(0);
            assert_eq!(key.public.as_bytes(), h(&rfc["pk_s"]).as_slice());
            let blinded: Vec<_> = v["input"].as_array().unwrap().iter().zip(v["blind"].as_array().unwrap())
                .map(|(i, bl)| rdv_directory_client::oprf::blind_with_scalar(&h(i), &h(bl)).unwrap())
                .collect();
            let req = json!({"key_id": key.id, "blinded": blinded.iter().map(|b| rdv_proto::encoding::base64(&b.element)).collect::<Vec<_>>()});
            let r: Value = ureq::post(&format!("{}/v1/evaluate", c_url(&c))).send_json(req).unwrap().into_json().unwrap();
            let ev: Vec<Vec<u8>> = r["evaluated"].as_array().unwrap().iter().map(|e| rdv_proto::encoding::base64_decode(e.as_str().unwrap()).unwrap()).collect();
            let proof = rdv_proto::encoding::base64_decode(r["proof"].as_str().unwrap()).unwrap();
            let refs: Vec<&[u8]> = ev.iter().map(Vec::as_slice).collect();
            let out = rdv_directory_client::oprf::finalize_batch(&blinded, &refs, &proof, &key.public).unwrap();
            let want_ev: Vec<Vec<u8>> = v["evaluation_element"].as_array().unwrap().iter().map(h).collect();
            let want_out: Vec<Vec<u8>> = v["output"].as_array().unwrap().iter().map(h).collect();
            (ev == want_ev, out.iter().map(|o| o.to_vec()).collect::<Vec<_>>() == want_out)
        })
        .await;
        assert!(evaluated, "evaluated elements match RFC 9497");
        assert!(outputs, "outputs match RFC 9497");
    }
    env.teardown().await;
}

fn c_url(c: &rdv_directory_client::DirectoryClient) -> String {
    // The client keeps its base URL private; Debug shows it.
    let d = format!("{c:?}");
    let start = d.find("base: \"").unwrap() + 7;
    d[start..].split('"').next().unwrap().to_string()
}

both!(openapi_healthz_and_cors);
async fn openapi_healthz_and_cors(b: Backend) {
    let env = Env::new(b, |_| {}).await;
    let u = env.url.clone();
    let (doc, health, cors) = blocking(move || {
        let doc = raw("GET", &format!("{u}/v1/openapi.json"), None).2;
        let health = raw("GET", &format!("{u}/healthz"), None).0;
        let r = ureq::request("OPTIONS", &format!("{u}/v1/lookup"))
            .set("origin", "https://app.example")
            .set("access-control-request-method", "POST")
            .call()
            .unwrap();
        (
            doc,
            health,
            r.header("access-control-allow-origin").map(str::to_string),
        )
    })
    .await;
    for p in [
        "/v1/keys",
        "/v1/info",
        "/v1/evaluate",
        "/v1/lookup",
        "/v1/listings/{lookup_id}",
    ] {
        assert!(doc["paths"].get(p).is_some(), "openapi lists {p}");
    }
    assert_eq!(health, 200);
    assert_eq!(cors.as_deref(), Some("*"));
    env.teardown().await;
}
