//! Core benchmarks: canonical JSON, card sign/verify, envelope seal/open at
//! 1 KiB and 32 KiB, each beside the primitives it is bound by, measured in
//! the same run. After criterion's report, prints the ratio
//! "our operation / sum of its primitives" (see docs/benchmarks.md).
//!
//! Run: `cargo bench -p rdv-proto --bench core`

// Fixed inputs only: a failure here is a bug in the benchmark itself.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant as Clock;

use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use criterion::Criterion;
use ed25519_dalek::{Signer, SigningKey};
use rdv_proto::envelope::{self, SealParams};
use rdv_proto::time::parse_time;
use rdv_proto::{AgentKey, canon, sign};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

struct Fixture {
    alice: AgentKey,
    bob: AgentKey,
    card: Value,
    signed_card: Value,
    card_bytes: Vec<u8>,
}

fn fixture() -> Fixture {
    let alice = AgentKey::from_seed([1; 32]);
    let bob = AgentKey::from_seed([2; 32]);
    let card = json!({
        "v": 1, "id": alice.id().as_str(), "created": "2026-10-08T00:00:00Z", "expires": null,
        "capabilities": ["rdv/v1", "a2a/0.3", "https://rendezvous.nesher.co/ext/meetings/v1",
                         "https://rendezvous.nesher.co/ext/meeting-cancel/v1", "https://rendezvous.nesher.co/ext/tasks/v1"],
        "owner": {"name": "Alice Example", "contact": ["mailto:alice@example.org"]},
        "discovery": {"addresses": [{"type": "email", "value": "alice@example.org"},
                                    {"type": "phone", "value": "+1 555 010 9999"}], "public_pointer": true},
        "rendezvous": [{"type": "nostr", "relay": "wss://relay.one.example", "pref": 1},
                       {"type": "nostr", "relay": "wss://relay.two.example", "pref": 2},
                       {"type": "ntfy", "topic": "rdv-alice", "pref": 3}],
        "policy": {"inbound": "prompt", "public": true},
    });
    let signed_card = sign::sign_value(card.clone(), &alice).unwrap();
    let card_bytes = canon::to_vec(&signed_card).unwrap();
    Fixture {
        alice,
        bob,
        card,
        signed_card,
        card_bytes,
    }
}

fn payload(size: usize) -> Value {
    let overhead = canon::to_vec(&json!({"type": "note", "text": ""}))
        .unwrap()
        .len();
    json!({"type": "note", "text": "x".repeat(size - overhead)})
}

fn now() -> rdv_proto::time::Instant {
    parse_time("now", "2026-10-08T00:30:00Z").unwrap()
}

fn seal(f: &Fixture, p: &Value) -> Value {
    let params = SealParams {
        from: &f.alice,
        to: f.bob.id(),
        seq: 1,
        prev: None,
        created: parse_time("c", "2026-10-08T00:00:00Z").unwrap(),
        ttl: "48h",
        ephemeral: [7; 32],
        nonce: [8; 12],
    };
    envelope::seal(p, &params).unwrap()
}

/// The primitives, over the same sizes our operations process.
struct Prims {
    ed_sign: SigningKey,
    ed_pub: ed25519_dalek::VerifyingKey,
    x_secret: x25519_dalek::StaticSecret,
    x_pub: x25519_dalek::PublicKey,
    aes: Aes256Gcm,
}

fn prims() -> Prims {
    let ed_sign = SigningKey::from_bytes(&[3; 32]);
    let x_secret = x25519_dalek::StaticSecret::from([4; 32]);
    Prims {
        ed_pub: ed_sign.verifying_key(),
        x_pub: x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from([5; 32])),
        ed_sign,
        x_secret,
        aes: Aes256Gcm::new(&[6u8; 32].into()),
    }
}

impl Prims {
    fn sign(&self, msg: &[u8]) -> ed25519_dalek::Signature {
        self.ed_sign.sign(msg)
    }
    fn verify(&self, msg: &[u8], sig: &ed25519_dalek::Signature) {
        self.ed_pub.verify_strict(msg, sig).unwrap();
    }
    fn x25519(&self) -> [u8; 32] {
        self.x_secret.diffie_hellman(&self.x_pub).to_bytes()
    }
    fn x25519_base(&self) -> x25519_dalek::PublicKey {
        x25519_dalek::PublicKey::from(&self.x_secret)
    }
    fn seal(&self, pt: &[u8]) -> Vec<u8> {
        self.aes
            .encrypt(
                Nonce::from_slice(&[0; 12]),
                Payload {
                    msg: pt,
                    aad: b"header",
                },
            )
            .unwrap()
    }
    fn open(&self, ct: &[u8]) -> Vec<u8> {
        self.aes
            .decrypt(
                Nonce::from_slice(&[0; 12]),
                Payload {
                    msg: ct,
                    aad: b"header",
                },
            )
            .unwrap()
    }
}

fn benches(c: &mut Criterion) {
    let f = fixture();
    let p = prims();
    c.bench_function("canon/card parse+serialize", |b| {
        b.iter(|| canon::to_vec(&canon::parse(black_box(&f.card_bytes), 1 << 20).unwrap()).unwrap())
    });
    c.bench_function("serde_json/card parse+serialize", |b| {
        b.iter(|| {
            serde_json::to_vec(&serde_json::from_slice::<Value>(black_box(&f.card_bytes)).unwrap())
                .unwrap()
        })
    });
    c.bench_function("card/sign", |b| {
        b.iter(|| sign::sign_value(black_box(f.card.clone()), &f.alice).unwrap())
    });
    c.bench_function("card/verify", |b| {
        b.iter(|| {
            rdv_proto::doc::verify_doc(
                rdv_proto::doc::DocKind::Card,
                black_box(&f.signed_card),
                now(),
            )
            .unwrap()
        })
    });
    let card_unsigned = canon::to_vec(&f.card).unwrap();
    let card_sig = p.sign(&card_unsigned);
    c.bench_function("prim/ed25519 sign (card bytes)", |b| {
        b.iter(|| p.sign(black_box(&card_unsigned)))
    });
    c.bench_function("prim/ed25519 verify (card bytes)", |b| {
        b.iter(|| p.verify(black_box(&card_unsigned), &card_sig))
    });
    c.bench_function("prim/x25519", |b| b.iter(|| p.x25519()));
    for size in [1024usize, 32 * 1024] {
        let pl = payload(size);
        let env = seal(&f, &pl);
        let env_bytes = canon::to_vec(&env).unwrap();
        let pt = canon::to_vec(&pl).unwrap();
        let ct = p.seal(&pt);
        let env_sig = p.sign(&env_bytes);
        let k = size / 1024;
        c.bench_function(&format!("envelope/seal {k} KiB"), |b| {
            b.iter(|| seal(&f, black_box(&pl)))
        });
        c.bench_function(&format!("envelope/open {k} KiB"), |b| {
            b.iter(|| envelope::open(black_box(&env_bytes), &f.bob, now()).unwrap())
        });
        c.bench_function(&format!("prim/aes-256-gcm seal {k} KiB"), |b| {
            b.iter(|| p.seal(black_box(&pt)))
        });
        c.bench_function(&format!("prim/aes-256-gcm open {k} KiB"), |b| {
            b.iter(|| p.open(black_box(&ct)))
        });
        c.bench_function(&format!("prim/ed25519 sign (envelope {k} KiB)"), |b| {
            b.iter(|| p.sign(black_box(&env_bytes)))
        });
        c.bench_function(&format!("prim/ed25519 verify (envelope {k} KiB)"), |b| {
            b.iter(|| p.verify(black_box(&env_bytes), &env_sig))
        });
        c.bench_function(&format!("prim/sha256 (envelope {k} KiB)"), |b| {
            b.iter(|| Sha256::digest(black_box(&env_bytes)))
        });
    }
}

/// Times each closure in alternation, `rounds` rounds of `reps` calls each,
/// and keeps each one's fastest round, in ns per call. Other processes on a
/// shared machine only ever slow a round down, so the fastest rounds of
/// closures timed side by side give a ratio that repeated runs agree on
/// (the directory's bench does the same, issue #14).
fn fastest(rounds: usize, reps: usize, fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    for f in fs.iter_mut() {
        for _ in 0..reps {
            f();
        }
    }
    let mut best = vec![f64::MAX; fs.len()];
    for _ in 0..rounds {
        for (i, f) in fs.iter_mut().enumerate() {
            let t = Clock::now();
            for _ in 0..reps {
                f();
            }
            best[i] = best[i].min(t.elapsed().as_nanos() as f64 / reps as f64);
        }
    }
    best
}

fn ratios() {
    let f = fixture();
    let p = prims();
    let (rounds, reps) = (400, 4);
    println!(
        "\nratios (fastest of {rounds} alternating rounds of {reps} calls, same process; µs per operation)"
    );
    println!(
        "{:<38} {:>10} {:>12} {:>7}",
        "operation", "ours", "primitives", "ratio"
    );
    let row = |name: &str, ours: f64, prim: f64| {
        println!(
            "{name:<38} {:>10.2} {:>12.2} {:>7.2}",
            ours / 1e3,
            prim / 1e3,
            ours / prim
        );
    };
    let t = fastest(
        rounds,
        reps,
        &mut [
            &mut || {
                black_box(canon::to_vec(&canon::parse(&f.card_bytes, 1 << 20).unwrap()).unwrap());
            },
            &mut || {
                black_box(
                    serde_json::to_vec(&serde_json::from_slice::<Value>(&f.card_bytes).unwrap())
                        .unwrap(),
                );
            },
        ],
    );
    row("canon card (vs serde_json)", t[0], t[1]);
    let card_unsigned = canon::to_vec(&f.card).unwrap();
    let card_sig = p.sign(&card_unsigned);
    let t = fastest(
        rounds,
        reps,
        &mut [
            &mut || {
                black_box(sign::sign_value(f.card.clone(), &f.alice).unwrap());
            },
            &mut || {
                black_box(p.sign(&card_unsigned));
            },
        ],
    );
    row("card sign (vs ed25519 sign)", t[0], t[1]);
    let t = fastest(
        rounds,
        reps,
        &mut [
            &mut || {
                black_box(
                    rdv_proto::doc::verify_doc(
                        rdv_proto::doc::DocKind::Card,
                        &f.signed_card,
                        now(),
                    )
                    .unwrap(),
                );
            },
            &mut || p.verify(&card_unsigned, &card_sig),
            &mut || {
                black_box(Sha256::digest(&f.card_bytes));
            },
        ],
    );
    row("card verify (vs ed25519 verify+sha256)", t[0], t[1] + t[2]);
    for size in [1024usize, 32 * 1024] {
        let pl = payload(size);
        let env = seal(&f, &pl);
        let env_bytes = canon::to_vec(&env).unwrap();
        let pt = canon::to_vec(&pl).unwrap();
        let ct = p.seal(&pt);
        let env_sig = p.sign(&env_bytes);
        let k = size / 1024;
        // Seal: ephemeral key (X25519 base), agreement (X25519), AES-GCM,
        // Ed25519 sign. Open: Ed25519 verify, SHA-256 (the envelope hash),
        // X25519, AES-GCM. All timed side by side.
        let t = fastest(
            rounds,
            reps,
            &mut [
                &mut || {
                    black_box(seal(&f, &pl));
                },
                &mut || {
                    black_box(envelope::open(&env_bytes, &f.bob, now()).unwrap());
                },
                &mut || {
                    black_box(p.x25519_base());
                },
                &mut || {
                    black_box(p.x25519());
                },
                &mut || {
                    black_box(p.seal(&pt));
                },
                &mut || {
                    black_box(p.open(&ct));
                },
                &mut || {
                    black_box(p.sign(&env_bytes));
                },
                &mut || p.verify(&env_bytes, &env_sig),
                &mut || {
                    black_box(Sha256::digest(&env_bytes));
                },
            ],
        );
        let (xb, x, aes_seal, aes_open, sign, verify, sha) =
            (t[2], t[3], t[4], t[5], t[6], t[7], t[8]);
        row(&format!("seal {k} KiB"), t[0], xb + x + aes_seal + sign);
        row(&format!("open {k} KiB"), t[1], verify + sha + x + aes_open);
    }
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
