//! What the client reads from a directory server, which may be hostile
//! (§4.5): the keys list (`http::parse_keys`, `usable_keys`,
//! `newest_key`), an evaluation answer and its batch DLEQ proof
//! (`oprf::finalize_batch`, the steps of `DirectoryClient::evaluate`), a
//! lookup answer (`Derived::find` over every listing of its buckets) and a
//! sealed card (`seal::open`). The fixtures (`common`) are a directory key,
//! three blinded addresses with honest answers for batches of 1, 2 and 3,
//! and a real listing of the first address.
//!
//! Input: a mode byte, then the rest, in which `\x01` + a letter expands to
//! a fixture (`\x01J` the keys response, `\x01E` / `\x01e` the honest
//! evaluation of three elements / of one, `\x01L` the listing, `\x01K` the
//! key id, `\x01P` the public key; see `common::expand`). Mode byte: bits
//! 0-2 pick the reader, bits 3-4 the batch size (1 to 3), bit 5 allows
//! `ws://` relays in cards.
//!
//! - 0: the rest is a `GET /v1/keys` body.
//! - 1: the rest is a `POST /v1/evaluate` body, checked as the client does.
//! - 2: the rest edits the honest answer: an operation byte (0 none, 1 swap
//!   two elements, 2 drop one, 3 repeat one, 4 replace one by G·s, 5 swap
//!   the proof's halves), its operand byte, then XOR edits (two offset
//!   bytes and a byte each) over the elements and the proof.
//! - 3: the proof and elements a server with another key makes (the key:
//!   32 bytes of the rest), or, when they are the right key's, over a batch
//!   in which one element is replaced by hash-to-curve of the rest.
//! - 4: the rest is a `POST /v1/lookup` body, its listings looked up.
//! - 5-7: the rest is a sealed card, opened under the first output.
//!
//! Checked: nothing panics; an accepted key's id is the hash of its public
//! key and the newest key is usable; an evaluation is accepted only if
//! every output equals the honest one (a verifiable OPRF: no server can
//! make the client accept another value, so a forged or edited proof or
//! element never verifies), and an edited answer only if its bytes are the
//! honest ones; every card a lookup accepts is the listing agent's, claims
//! the address and is under the key and lookup_id asked for. Run with
//! `scripts/fuzz 120 server_answers`.
#![no_main]

mod common;

use common::{FX, Mix, check_lookup, expand};
use libfuzzer_sys::fuzz_target;
use p256::elliptic_curve::hash2curve::{ExpandMsgXmd, GroupDigest};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::{NistP256, ProjectivePoint, Scalar};
use rdv_directory_client::http::{newest_key, parse_keys, usable_keys};
use rdv_directory_client::oprf::{self, ServerKey};
use rdv_directory_client::seal;
use rdv_directory_client::wire::{EvaluateResponse, KeysResponse, LookupResponse};
use rdv_directory_client::{Error, Result};
use serde_json::Value;
use sha2::Sha256;

/// The client's steps on an evaluation answer for the first `n` elements
/// (`DirectoryClient::evaluate` after the request).
fn client_reads(n: usize, body: &[u8]) -> Result<Vec<[u8; 32]>> {
    let fx = &*FX;
    let r: EvaluateResponse =
        serde_json::from_slice(body).map_err(|e| Error::Transport(e.to_string()))?;
    oprf::finalize_answer(&fx.blinded[..n], &fx.key_id, fx.server.public(), &r)
}

/// Accepted outputs must be the honest ones.
fn honest(n: usize, got: &Result<Vec<[u8; 32]>>) {
    if let Ok(ys) = got {
        assert_eq!(
            ys.as_slice(),
            &FX.ys[..n],
            "a dishonest evaluation accepted"
        );
    }
}

fn finalize(n: usize, evaluated: &[Vec<u8>], proof: &[u8]) -> Result<Vec<[u8; 32]>> {
    let refs: Vec<&[u8]> = evaluated.iter().map(Vec::as_slice).collect();
    oprf::finalize_batch(&FX.blinded[..n], &refs, proof, FX.server.public())
}

fn keys(body: &[u8]) {
    let Ok(r) = serde_json::from_slice::<KeysResponse>(body) else {
        return;
    };
    let Ok(keys) = parse_keys(&r) else {
        return;
    };
    for k in &keys {
        assert_eq!(k.public.id(), k.id, "a key under another id");
        assert_eq!(k.public.as_bytes().len(), oprf::ELEMENT_LEN);
    }
    let now = FX.now;
    let usable = usable_keys(&keys, now);
    for k in &usable {
        assert!(k.not_before <= now && k.not_after.is_none_or(|t| now < t));
    }
    if let Ok(k) = newest_key(&keys, now) {
        assert!(usable.iter().any(|u| u.id == k.id), "newest key not usable");
        assert!(usable.iter().all(|u| u.not_before <= k.not_before));
    } else {
        assert!(usable.is_empty(), "usable keys but no newest");
    }
}

fn edited(n: usize, rest: &[u8]) {
    let fx = &*FX;
    let a = &fx.answers[n - 1];
    let mut evaluated = a.evaluated.clone();
    let mut proof = a.proof.clone();
    let op = rest.first().copied().unwrap_or(0);
    let arg = usize::from(rest.get(1).copied().unwrap_or(0));
    let edits = rest.get(2..).unwrap_or_default();
    let i = arg % n;
    let j = (arg / 3) % n;
    match op % 6 {
        1 => evaluated.swap(i, j),
        2 => {
            evaluated.remove(i);
        }
        3 => {
            let e = evaluated[i].clone();
            evaluated.insert(j, e);
        }
        4 => {
            let p = ProjectivePoint::GENERATOR * Scalar::from(1 + arg as u64);
            evaluated[i] = p.to_affine().to_encoded_point(true).as_bytes().to_vec();
        }
        5 => proof.rotate_left(32),
        _ => {}
    }
    for e in edits.chunks_exact(3) {
        let total = evaluated.iter().map(Vec::len).sum::<usize>() + proof.len();
        let mut at = usize::from(u16::from_be_bytes([e[0], e[1]])) % total;
        match evaluated.iter_mut().find(|x| {
            let hit = at < x.len();
            if !hit {
                at -= x.len();
            }
            hit
        }) {
            Some(x) => x[at] ^= e[2],
            None => proof[at] ^= e[2],
        }
    }
    let got = finalize(n, &evaluated, &proof);
    honest(n, &got);
    if got.is_ok() {
        assert!(
            evaluated == a.evaluated && proof == a.proof,
            "an edited answer accepted"
        );
    }
}

fn other_server(n: usize, rest: &[u8]) {
    let fx = &*FX;
    let mut secret = [0u8; 32];
    for (s, b) in secret.iter_mut().zip(rest) {
        *s = *b;
    }
    let mut blinded: Vec<Vec<u8>> = fx.blinded[..n].iter().map(|b| b.element.clone()).collect();
    let key = match ServerKey::from_secret(&secret) {
        Ok(k) if secret != common::SECRET => k,
        // The right key (or no key): evaluate another batch under it, one
        // element replaced by a point of the fuzzer's choosing.
        _ => {
            let msg = rest.get(32..).unwrap_or_default();
            let Ok(p) = NistP256::hash_from_bytes::<ExpandMsgXmd<Sha256>>(&[msg], &[b"rdv-fuzz"])
            else {
                return;
            };
            let i = msg.first().map_or(0, |b| usize::from(*b) % n);
            blinded[i] = p.to_affine().to_encoded_point(true).as_bytes().to_vec();
            ServerKey::from_secret(&common::SECRET).expect("the fixture key")
        }
    };
    let refs: Vec<&[u8]> = blinded.iter().map(Vec::as_slice).collect();
    let Ok((evaluated, proof)) = key.evaluate_batch(&refs, &mut Mix(rest.len() as u64)) else {
        return;
    };
    let got = finalize(n, &evaluated, &proof);
    honest(n, &got);
    let same = key.public().as_bytes() == fx.server.public().as_bytes()
        && blinded
            .iter()
            .zip(&fx.blinded)
            .all(|(b, f)| *b == f.element);
    assert_eq!(got.is_ok(), same, "another key's or batch's proof verified");
}

fn lookup(body: &[u8], allow_ws: bool) {
    let fx = &*FX;
    let Ok(r) = serde_json::from_slice::<LookupResponse>(body) else {
        return;
    };
    let entries: Vec<Value> = r.buckets.into_iter().flat_map(|b| b.listings).collect();
    for d in &fx.derived {
        check_lookup(d, &entries, allow_ws);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let n = 1 + usize::from(mode >> 3 & 3) % 3;
    match mode & 7 {
        0 => keys(&expand(rest)),
        1 => {
            let got = client_reads(n, &expand(rest));
            honest(n, &got);
        }
        2 => edited(n, rest),
        3 => other_server(n, rest),
        4 => lookup(&expand(rest), mode & 0x20 != 0),
        _ => {
            if let Ok(s) = std::str::from_utf8(&expand(rest)) {
                let _ = seal::open(s, &FX.ys[0]);
            }
        }
    }
});
