//! Seeds a directory database with synthetic listings for the lookup
//! benchmarks (issue #3, docs/benchmarks/directory.md): rows are inserted
//! directly in bulk (`Store::insert_raw`, multi-row INSERTs, 10,000 rows
//! per transaction), not through the HTTP API, so 10⁶ listings take
//! minutes, not hours.
//!
//!     cargo run --release -p rdv-directory --example seed -- DATABASE_URL KEY_FILE LISTINGS
//!
//! Tops the database up to LISTINGS listings under the first usable key of
//! KEY_FILE. Each is shaped like a one-block listing (~1.5 KB document with
//! 1,052 random sealed bytes, a random lookup_id and its own agent) but is
//! not signed: lookups return documents as stored, so latency is the same.
//! For benchmarks only: never point it at a production database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use rand_core::{OsRng, RngCore};
use rdv_directory::keys::KeyRing;
use rdv_directory::store::Store;

const PER_TX: usize = 10_000;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 4 {
        eprintln!("usage: seed DATABASE_URL KEY_FILE LISTINGS");
        std::process::exit(2);
    }
    let db = a[1].clone();
    let keys = KeyRing::load(std::path::Path::new(&a[2])).expect("key file");
    let now = time::OffsetDateTime::now_utc();
    let key_id = keys.usable(now).first().expect("a usable key").id.clone();
    let n: usize = a[3].parse().expect("LISTINGS is a count");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::connect(&db, 2).await.unwrap();
        let have = store.stats().await.unwrap().listings as usize;
        let t = Instant::now();
        let now = now.unix_timestamp();
        let mut rows = Vec::with_capacity(PER_TX);
        for i in have..n {
            let mut b = [0u8; 32];
            OsRng.fill_bytes(&mut b);
            let lookup_id = hex::encode(b);
            let mut sealed = vec![0u8; 1052];
            OsRng.fill_bytes(&mut sealed);
            let agent = format!("rdv1:{:0>52}", i);
            let doc = serde_json::json!({"v":1,"type":"rdv/dir-listing","agent":agent,
                "key_id":key_id,"lookup_id":lookup_id,"sealed":rdv_proto::encoding::base64(&sealed),
                "updated":"2026-01-01T00:00:00Z","expires":"2099-01-01T00:00:00Z","sig":"x"})
            .to_string();
            rows.push((
                lookup_id,
                agent,
                key_id.clone(),
                now,
                now + 86_400 * 30,
                doc,
            ));
            if rows.len() == PER_TX {
                store.insert_raw(&rows).await.unwrap();
                rows.clear();
            }
        }
        store.insert_raw(&rows).await.unwrap();
        let total = store.stats().await.unwrap().listings;
        store.close().await;
        println!(
            "seeded {} rows in {:.1}s; {total} listings",
            n.saturating_sub(have),
            t.elapsed().as_secs_f64()
        );
    });
}
