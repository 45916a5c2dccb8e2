//! The claim bounds hold under concurrent publishes (§4.5), on SQLite and on
//! a real Postgres: many publishes racing for the last slots never leave
//! more than the bound stored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use rdv_directory::keys::KeyRing;
use rdv_directory::store::{Bounds, PutOutcome, Store};
use rdv_directory_client::listing::Listing;
use rdv_proto::AgentKey;
use serde_json::json;
use tokio::sync::Barrier;

const ROUNDS: usize = 5;
const RACERS: usize = 12;
const BOUND: u32 = 3;

fn listing(key_id: &str, agent: &AgentKey, lookup_id: &str) -> Listing {
    let updated = t0();
    Listing {
        agent: agent.id().clone(),
        key_id: key_id.to_string(),
        lookup_id: lookup_id.to_string(),
        sealed: "x".into(),
        updated,
        expires: updated + time::Duration::days(7),
        doc: json!({"lookup_id": lookup_id, "agent": agent.id().as_str()}),
    }
}

/// Runs every listing's publish at once (released together by a barrier)
/// and returns the outcomes.
async fn race(store: &Store, listings: Vec<Listing>, bounds: Bounds) -> Vec<PutOutcome> {
    let gate = Arc::new(Barrier::new(listings.len()));
    let now = t0().unix_timestamp();
    let tasks: Vec<_> = listings
        .into_iter()
        .map(|l| {
            let (store, gate) = (store.clone(), gate.clone());
            tokio::spawn(async move {
                gate.wait().await;
                store.put(&l, now, bounds).await.unwrap()
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn stored(outcomes: &[PutOutcome]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, PutOutcome::Stored { .. }))
        .count()
}

async fn claim_bounds_hold_under_concurrency(b: Backend) {
    let env = Env::new(b, |_| {}).await;
    // The server's key: its purge task drops listings under any other.
    let key_id = KeyRing::from_file(&env.keyfile, "t").unwrap().all()[0]
        .id
        .clone();
    // Its own pool, wide enough that every racer holds a connection.
    let store = Store::connect(&env.db_url, RACERS as u32).await.unwrap();
    let loose = 1000;
    for round in 0..ROUNDS {
        // Distinct agents racing for one lookup_id.
        let lookup_id = hex::encode(rand_bytes::<32>());
        let racers: Vec<Listing> = (0..RACERS)
            .map(|_| {
                listing(
                    &key_id,
                    &AgentKey::from_seed(rand_bytes::<32>()),
                    &lookup_id,
                )
            })
            .collect();
        let bounds = Bounds {
            max_claims_per_lookup_id: BOUND,
            max_listings_per_agent: loose,
        };
        let out = race(&store, racers, bounds).await;
        assert_eq!(stored(&out), BOUND as usize, "round {round}: {out:?}");
        assert!(
            out.iter()
                .all(|o| matches!(o, PutOutcome::Stored { .. } | PutOutcome::TooManyClaims)),
            "{out:?}"
        );
        let held = store
            .bucket(&key_id, &lookup_id[..8], t0().unix_timestamp(), 1000)
            .await
            .unwrap();
        let held = held.iter().filter(|d| d.contains(&lookup_id)).count();
        assert_eq!(held, BOUND as usize, "round {round}: stored claims");

        // One agent racing to list many lookup_ids.
        let agent = AgentKey::from_seed(rand_bytes::<32>());
        let racers: Vec<Listing> = (0..RACERS)
            .map(|_| listing(&key_id, &agent, &hex::encode(rand_bytes::<32>())))
            .collect();
        let bounds = Bounds {
            max_claims_per_lookup_id: loose,
            max_listings_per_agent: BOUND,
        };
        let out = race(&store, racers, bounds).await;
        assert_eq!(stored(&out), BOUND as usize, "round {round}: {out:?}");
        assert!(
            out.iter()
                .all(|o| matches!(o, PutOutcome::Stored { .. } | PutOutcome::TooManyListings)),
            "{out:?}"
        );
    }
    let st = store.stats().await.unwrap();
    assert_eq!(st.listings, (2 * ROUNDS) as u64 * u64::from(BOUND));
    store.close().await;
    env.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_bounds_hold_under_concurrency_sqlite() {
    claim_bounds_hold_under_concurrency(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_bounds_hold_under_concurrency_postgres() {
    claim_bounds_hold_under_concurrency(Backend::Postgres).await
}
