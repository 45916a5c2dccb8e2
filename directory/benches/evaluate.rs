//! Blinded evaluations per second with batches of 1, 100 and 1,000, beside
//! raw P-256 variable-base scalar multiplications in the same run (issue #3).
//! `evaluate_batch` is ours (ComputeCompositesFast with a multi-scalar
//! multiplication); `voprf_stock_batch` is stock `voprf` 0.5, for before/after.
//! Run: `cargo bench -p rdv-directory --bench evaluate`.
#![allow(clippy::unwrap_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
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

criterion_group!(benches, bench);
criterion_main!(benches);
