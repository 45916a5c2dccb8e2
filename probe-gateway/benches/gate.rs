//! Probes gated per second, in process: trusted mode (no DNS), verify mode
//! over a loopback DNS server, and beside them the primitive bound measured
//! in the same run (one RSA-2048 and one Ed25519 verification plus body
//! hashing per message). Figures: docs/benchmarks/probe-gateway.md.
#![allow(clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rdv_probe_gateway::auth::{Verifier, VerifyConfig};
use rdv_probe_gateway::gate::{self, Arrival, AuthBackend};
use rdv_probe_gateway::limits::{LimitConfig, Limits, Rate};
use rdv_proto::Address;

fn no_limits() -> Mutex<Limits> {
    let r = Rate {
        max: u32::MAX,
        window_secs: 1,
    };
    Mutex::new(Limits::new(LimitConfig {
        per_sender: r,
        per_requester: r,
        per_mailbox: r,
    }))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mailbox = Address::parse("john@doe.test").unwrap();
    let arrival = Arrival {
        mailbox: &mailbox,
        agent: None,
        max_bytes: rdv_proto::consts::MAIL_MAX_BYTES,
    };
    let trusted_raw = std::fs::read(corpus_dir().join("trusted-pass.eml")).unwrap();
    let signed_raw = std::fs::read(corpus_dir().join("dkimpy-rsa-relaxed.eml")).unwrap();
    let mut g = c.benchmark_group("gate");
    g.throughput(Throughput::Elements(1));

    let trusted = AuthBackend::Trusted(vec!["mx.trusted.test".into()]);
    g.bench_function("trusted_in_process", |b| {
        // A fresh limiter per iteration batch: the same id is not a replay here.
        b.iter(|| {
            let limits = no_limits();
            rt.block_on(gate::run(
                &trusted_raw,
                &arrival,
                None,
                &trusted,
                &limits,
                t(NOW),
            ))
            .unwrap()
        })
    });

    let zone: serde_json::Value =
        serde_json::from_slice(&std::fs::read(corpus_dir().join("zone.json")).unwrap()).unwrap();
    let ns = rt.block_on(dns_server(load_zone(&zone)));
    let verify = AuthBackend::Verify(Box::new(
        rt.block_on(async {
            Verifier::new(VerifyConfig {
                nameservers: vec![ns],
                query_timeout: Duration::from_secs(2),
                total_timeout: Duration::from_secs(5),
                host_domain: "gateway.test".into(),
            })
        })
        .unwrap(),
    ));
    g.bench_function("verify_loopback_dns", |b| {
        b.iter(|| {
            let limits = no_limits();
            let a = rt
                .block_on(gate::run(
                    &signed_raw,
                    &arrival,
                    None,
                    &verify,
                    &limits,
                    t(NOW),
                ))
                .unwrap();
            assert_eq!(a.auth.dkim, rdv_probe_gateway::verdict::Verdict::Pass);
        })
    });

    // The primitive bound: RSA-2048 + Ed25519 verification + SHA-256 of the body.
    let rsa_pk = data_b64(&corpus_dir().join("keys/rsa2048.pub.b64"));
    let rsa_pem = std::fs::read(corpus_dir().join("keys/rsa2048.pem")).unwrap();
    let rsa_der = pem_body(&rsa_pem);
    let rsa_kp = ring::signature::RsaKeyPair::from_der(&rsa_der).unwrap();
    let msg = b"a canonicalized header block of a few hundred bytes";
    let mut rsa_sig = vec![0; rsa_kp.public().modulus_len()];
    rsa_kp
        .sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            msg,
            &mut rsa_sig,
        )
        .unwrap();
    let ed_kp = ring::signature::Ed25519KeyPair::from_seed_unchecked(&[5; 32]).unwrap();
    let ed_sig = ed_kp.sign(msg);
    use ring::signature::KeyPair;
    let ed_pk = ed_kp.public_key().as_ref().to_vec();
    let body = &signed_raw[..];
    g.bench_function("primitive_bound", |b| {
        b.iter(|| {
            ring::signature::UnparsedPublicKey::new(
                &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                &rsa_spki_to_pkcs1(&rsa_pk),
            )
            .verify(msg, &rsa_sig)
            .unwrap();
            ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &ed_pk)
                .verify(msg, ed_sig.as_ref())
                .unwrap();
            ring::digest::digest(&ring::digest::SHA256, body)
        })
    });
    g.finish();
}

fn data_b64(p: &std::path::Path) -> Vec<u8> {
    decode_b64(std::fs::read_to_string(p).unwrap().trim())
}

fn pem_body(pem: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(pem);
    let b: String = s.lines().filter(|l| !l.starts_with("-----")).collect();
    decode_b64(&b)
}

fn decode_b64(s: &str) -> Vec<u8> {
    data_encoding::BASE64.decode(s.as_bytes()).unwrap()
}

/// ring wants the RSAPublicKey (PKCS#1) inside the SubjectPublicKeyInfo:
/// for a 2048-bit key it is the DER after the 24-byte SPKI prefix.
fn rsa_spki_to_pkcs1(spki: &[u8]) -> Vec<u8> {
    spki[24..].to_vec()
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
