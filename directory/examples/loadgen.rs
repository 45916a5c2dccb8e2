//! Lookup latency under load, from a second process (issue #3 figures).
//!
//!     rdv-directory --data-dir D keygen && rdv-directory --data-dir D serve --listen 127.0.0.1:0
//!     cargo run --release -p rdv-directory --example loadgen -- \
//!         URL DATABASE_URL LISTINGS REQUESTS THREADS
//!
//! Fills the database with LISTINGS synthetic listings under the server's
//! key (trusted bulk insert, not the API), then sends REQUESTS lookups of
//! one random bucket each from THREADS threads and prints p50/p99.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use rand_core::{OsRng, RngCore};
use rdv_directory::store::Store;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (url, db, n, reqs, threads) = (
        a[1].clone(),
        a[2].clone(),
        a[3].parse::<usize>().unwrap(),
        a[4].parse::<usize>().unwrap(),
        a[5].parse::<usize>().unwrap(),
    );
    let keys: serde_json::Value = ureq::get(&format!("{url}/v1/keys"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let key_id = keys["keys"][0]["id"].as_str().unwrap().to_string();
    let info: serde_json::Value = ureq::get(&format!("{url}/v1/info"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let hex_len = info["bucket_hex_len"].as_u64().unwrap() as usize;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::connect(&db, 4).await.unwrap();
        let have = store.stats().await.unwrap().listings as usize;
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let mut rows = Vec::with_capacity(1000);
        for i in have..n {
            let mut b = [0u8; 32];
            OsRng.fill_bytes(&mut b);
            let lookup_id = hex::encode(b);
            let mut sealed = vec![0u8; 1052];
            OsRng.fill_bytes(&mut sealed);
            let doc = serde_json::json!({"v":1,"type":"rdv/dir-listing","agent":format!("rdv1:{}", "a".repeat(52)),
                "key_id":key_id,"lookup_id":lookup_id,"sealed":rdv_proto::encoding::base64(&sealed),
                "updated":"2026-01-01T00:00:00Z","expires":"2099-01-01T00:00:00Z","sig":"x"}).to_string();
            rows.push((lookup_id, format!("agent{i}"), key_id.clone(), now, now + 86_400 * 30, doc));
            if rows.len() == 1000 {
                store.insert_raw(&rows).await.unwrap();
                rows.clear();
            }
        }
        store.insert_raw(&rows).await.unwrap();
        store.close().await;
    });
    let per = reqs / threads;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (url, key_id) = (url.clone(), key_id.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().build();
                let mut lat = Vec::with_capacity(per);
                for _ in 0..per {
                    let p = &hex::encode(OsRng.next_u32().to_be_bytes())[..hex_len];
                    let t = Instant::now();
                    let r = agent
                        .post(&format!("{url}/v1/lookup"))
                        .send_json(serde_json::json!({"key_id": key_id, "buckets": [p]}));
                    let _ = r.map(|r| r.into_string());
                    lat.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                lat
            })
        })
        .collect();
    let mut lat: Vec<f64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let wall = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    println!(
        "listings={n} requests={} threads={threads} p50={:.2}ms p99={:.2}ms rps={:.0}",
        lat.len(),
        pct(0.5),
        pct(0.99),
        lat.len() as f64 / wall
    );
}
