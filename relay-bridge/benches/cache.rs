//! Cache write benchmarks: `Store::insert_batch` on the default SQLite cache
//! for 32 KB bodies (segment files, src/bodies.rs) and 256 B bodies (in the
//! rows), beside the primitive a 32 KB body is bound by: appending its bytes
//! to a file. After criterion's report, prints "ours / primitive" per
//! message, measured in the same run (see docs/benchmarks/relay-bridge.md).
//!
//! Run: `cargo bench -p rdv-relay-bridge --bench cache`

// Fixed inputs only: a failure here is a bug in the benchmark itself.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use rdv_relay_bridge::message::Message;
use rdv_relay_bridge::store::Store;

/// A SQLite cache in a temporary directory, with a runtime to drive it.
struct Cache {
    rt: tokio::runtime::Runtime,
    store: Store,
    next: i64,
    _dir: tempfile::TempDir,
}

impl Cache {
    fn new() -> Cache {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
        let store = rt.block_on(Store::open(&url)).unwrap();
        Cache {
            rt,
            store,
            next: 0,
            _dir: dir,
        }
    }

    /// `n` fresh messages of `size` bytes, already expired (so `prune`
    /// can empty the cache between rounds; expiry plays no part in writes).
    fn batch(&mut self, n: usize, size: usize) -> Vec<Arc<Message>> {
        let body = bytes::Bytes::from(vec![b'x'; size]);
        (0..n)
            .map(|_| {
                self.next += 1;
                let mut m = Message::with_body(
                    format!("b{:010}", self.next),
                    self.next,
                    "bench".into(),
                    body.clone(),
                );
                m.expires = Some(1);
                Arc::new(m)
            })
            .collect()
    }

    /// Time to write `rounds` batches of `n` × `size`; the cache is emptied
    /// (untimed) every 16 batches so the disk use stays bounded.
    fn write(&mut self, rounds: u64, n: usize, size: usize) -> Duration {
        let mut spent = Duration::ZERO;
        for r in 0..rounds {
            let b = self.batch(n, size);
            let t = Instant::now();
            self.rt.block_on(self.store.insert_batch(&b)).unwrap();
            spent += t.elapsed();
            if r % 16 == 15 {
                self.rt.block_on(self.store.prune(2)).unwrap();
            }
        }
        spent
    }
}

/// Appending `size` bytes to a file, per call, for `rounds` calls (the file
/// starts over every 64 MiB).
fn append(rounds: u64, size: usize) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let body = vec![b'x'; size];
    let mut f = std::fs::File::create(dir.path().join("raw")).unwrap();
    let mut len = 0;
    let t = Instant::now();
    for _ in 0..rounds {
        f.write_all(black_box(&body)).unwrap();
        len += size;
        if len > 64 << 20 {
            f = std::fs::File::create(dir.path().join("raw")).unwrap();
            len = 0;
        }
    }
    t.elapsed()
}

fn benches(c: &mut Criterion) {
    let mut cache = Cache::new();
    let mut g = c.benchmark_group("cache");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.bench_function("insert_batch of 64 × 32 KB", |b| {
        b.iter_custom(|rounds| cache.write(rounds, 64, 32 * 1024))
    });
    g.bench_function("insert_batch of 512 × 256 B", |b| {
        b.iter_custom(|rounds| cache.write(rounds, 512, 256))
    });
    g.bench_function("prim/append 32 KB to a file", |b| {
        b.iter_custom(|rounds| append(rounds, 32 * 1024))
    });
    g.finish();
}

fn ratios() {
    let mut cache = Cache::new();
    // Warm up: the first writes of a fresh file system area cost more.
    cache.write(16, 64, 32 * 1024);
    append(2000, 32 * 1024);
    let ours = cache.write(64, 64, 32 * 1024) / (64 * 64);
    let prim = append(4096, 32 * 1024) / 4096;
    let small = cache.write(16, 512, 256) / (16 * 512);
    println!("\nratios (measured now, same process; µs per message)");
    println!(
        "{:<34} {:>10} {:>12} {:>7}",
        "operation", "ours", "primitive", "ratio"
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{:<34} {:>10.2} {:>12.2} {:>7.2}",
        "cache write, 32 KB body",
        us(ours),
        us(prim),
        us(ours) / us(prim)
    );
    println!(
        "{:<34} {:>10.2} {:>12} {:>7}",
        "cache write, 256 B body",
        us(small),
        "–",
        "–"
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
    // `cargo test --benches` runs this binary in test mode: skip the timing.
    if !std::env::args().any(|a| a == "--test") {
        ratios();
    }
}
