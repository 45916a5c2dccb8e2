//! Blinded evaluations per second with batches of 1, 100 and 1,000, beside
//! raw P-256 variable-base scalar multiplications in the same run (issue #3).
//! `evaluate_batch` is ours (ComputeCompositesFast with a multi-scalar
//! multiplication); `voprf_stock_batch` is stock `voprf` 0.5, for before/after.
//! Run: `cargo bench -p rdv-directory --bench evaluate`.
//!
//! After criterion's report it prints the ratio table: raw and ours timed
//! in alternation, many short rounds, keeping each one's fastest round, so
//! that other processes on a shared machine (which only ever slow a round
//! down) disturb the ratio as little as possible. `-- nomatch` skips
//! criterion and prints the table only.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use criterion::{BenchmarkId, Criterion, Throughput};
use p256::elliptic_curve::Field;
use p256::{ProjectivePoint, Scalar};
use rand_core::OsRng;
use rdv_directory_client::oprf::{self, ServerKey};

fn bench(c: &mut Criterion) {
    let (key, _) = ServerKey::generate(&mut OsRng);
    let mut g = c.benchmark_group("directory");
    g.sample_size(10);
    // Raw: one variable-base scalar multiplication per element.
    let points: Vec<ProjectivePoint> = (0..100)
        .map(|_| ProjectivePoint::GENERATOR * Scalar::random(&mut OsRng))
        .collect();
    let k = Scalar::random(&mut OsRng);
    g.throughput(Throughput::Elements(100));
    g.bench_function("raw_p256_mul_x100", |b| {
        b.iter(|| {
            points
                .iter()
                .map(|p| p * &k)
                .fold(ProjectivePoint::IDENTITY, |a, x| a + x)
        })
    });
    for n in [1usize, 100, 1000] {
        let blinded: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                oprf::blind(format!("input{i}").as_bytes(), &mut OsRng)
                    .unwrap()
                    .element
            })
            .collect();
        let refs: Vec<&[u8]> = blinded.iter().map(Vec::as_slice).collect();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("evaluate_batch", n), &refs, |b, refs| {
            b.iter(|| key.evaluate_batch(refs, &mut OsRng).unwrap())
        });
        // Before: stock `voprf` 0.5 batch evaluation, same inputs, same run.
        g.bench_with_input(
            BenchmarkId::new("voprf_stock_batch", n),
            &refs,
            |b, refs| b.iter(|| key.evaluate_batch_reference(refs, &mut OsRng).unwrap()),
        );
    }
    g.finish();
}

/// One timing of `f`, in nanoseconds.
fn once(f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64
}

fn ratios() {
    let (key, _) = ServerKey::generate(&mut OsRng);
    let points: Vec<ProjectivePoint> = (0..100)
        .map(|_| ProjectivePoint::GENERATOR * Scalar::random(&mut OsRng))
        .collect();
    let k = Scalar::random(&mut OsRng);
    let mut raw = || {
        let s = points
            .iter()
            .map(|p| p * &k)
            .fold(ProjectivePoint::IDENTITY, |a, x| a + x);
        std::hint::black_box(s);
    };
    println!("\nratio to raw p256 (fastest of alternating rounds, this process; per element)");
    println!(
        "{:<22} {:>12} {:>14} {:>8}",
        "", "µs/element", "elements/s", "vs raw"
    );
    let mut rows = Vec::new();
    let mut raw_best = f64::MAX;
    for (n, rounds) in [(1usize, 200usize), (100, 40), (1000, 16)] {
        let blinded: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                oprf::blind(format!("input{i}").as_bytes(), &mut OsRng)
                    .unwrap()
                    .element
            })
            .collect();
        let refs: Vec<&[u8]> = blinded.iter().map(Vec::as_slice).collect();
        let mut ours = || {
            std::hint::black_box(key.evaluate_batch(&refs, &mut OsRng).unwrap());
        };
        let mut stock = || {
            std::hint::black_box(key.evaluate_batch_reference(&refs, &mut OsRng).unwrap());
        };
        let (mut best, mut stock_best) = (f64::MAX, f64::MAX);
        for _ in 0..rounds {
            raw_best = raw_best.min(once(&mut raw) / 100.0);
            best = best.min(once(&mut ours) / n as f64);
            stock_best = stock_best.min(once(&mut stock) / n as f64);
        }
        rows.push((format!("ours, batch {n}"), best));
        rows.push((format!("stock voprf, batch {n}"), stock_best));
    }
    println!(
        "{:<22} {:>12.1} {:>14.0} {:>8.2}",
        "raw p256 mul",
        raw_best / 1e3,
        1e9 / raw_best,
        1.0
    );
    for (name, t) in rows {
        println!(
            "{:<22} {:>12.1} {:>14.0} {:>8.2}",
            name,
            t / 1e3,
            1e9 / t,
            raw_best / t
        );
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    // `cargo test --benches` runs this binary in test mode: skip the timing.
    if !std::env::args().any(|a| a == "--test") {
        ratios();
    }
}
