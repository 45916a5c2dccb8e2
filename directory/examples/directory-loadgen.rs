//! Lookup latency under load, from a second process (issue #3 figures,
//! docs/benchmarks/directory.md).
//!
//!     cargo run --release -p rdv-directory --example directory-loadgen -- URL REQUESTS THREADS [MAX_SECS]
//!
//! Sends at most REQUESTS lookups of one random bucket each from THREADS
//! threads to a directory on loopback (other hosts are refused), stopping
//! early after MAX_SECS (default 120), and prints p50/p99 and the number of
//! non-200 answers. Seed the database first with `examples/seed.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rand_core::{OsRng, RngCore};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if !(4..=5).contains(&a.len()) {
        eprintln!("usage: loadgen URL REQUESTS THREADS [MAX_SECS]");
        std::process::exit(2);
    }
    let url = a[1].trim_end_matches('/').to_string();
    let reqs: usize = a[2].parse().expect("REQUESTS");
    let threads: usize = a[3].parse::<usize>().expect("THREADS").clamp(1, 64);
    let max = Duration::from_secs(a.get(4).map_or(120, |s| s.parse().expect("MAX_SECS")));
    let host = url
        .strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .unwrap_or("");
    let loopback =
        host.starts_with("127.") || host.starts_with("localhost:") || host.starts_with("[::1]:");
    assert!(loopback, "loadgen only targets loopback: {url}");
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
    let per = reqs / threads;
    let start = Instant::now();
    let deadline = start + max;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (url, key_id) = (url.clone(), key_id.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(10))
                    .build();
                let mut lat = Vec::with_capacity(per);
                let (mut failed, mut listings) = (0usize, 0usize);
                for _ in 0..per {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let p = &hex::encode(OsRng.next_u32().to_be_bytes())[..hex_len];
                    let t = Instant::now();
                    let r = agent
                        .post(&format!("{url}/v1/lookup"))
                        .send_json(serde_json::json!({"key_id": key_id, "buckets": [p]}));
                    match r.map(|r| r.into_json::<serde_json::Value>()) {
                        Ok(Ok(v)) => {
                            listings += v["buckets"][0]["listings"].as_array().map_or(0, Vec::len)
                        }
                        _ => failed += 1,
                    }
                    lat.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                (lat, failed, listings)
            })
        })
        .collect();
    let (mut lat, mut failed, mut listings) = (Vec::new(), 0, 0);
    for h in handles {
        let (l, f, n) = h.join().unwrap();
        lat.extend(l);
        failed += f;
        listings += n;
    }
    let wall = start.elapsed().as_secs_f64();
    assert!(!lat.is_empty(), "no request sent");
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    println!(
        "requests={} failed={failed} threads={threads} p50={:.2}ms p99={:.2}ms max={:.2}ms rps={:.0} listings/answer={:.1}",
        lat.len(),
        pct(0.5),
        pct(0.99),
        lat[lat.len() - 1],
        lat.len() as f64 / wall,
        listings as f64 / lat.len() as f64
    );
}
