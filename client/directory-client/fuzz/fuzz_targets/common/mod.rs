//! Fixtures shared by `listing` and `server_answers` (and `Mix` by
//! `keymul`), built once and deterministic (fixed keys, blinds and
//! randomness), and the `\x01` expansions that put them one token away
//! from the fuzzer.
#![allow(dead_code)]

use std::sync::LazyLock;

use rand_core::{CryptoRng, RngCore};
use rdv_directory_client::listing::{Listing, Removal};
use rdv_directory_client::lookup::{Derived, FoundCard, oprf_input};
use rdv_directory_client::oprf::{self, Blinded, ServerKey};
use rdv_directory_client::wire::{EvaluateResponse, KeyInfo, KeysResponse};
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::encoding::base64;
use rdv_proto::time::{Instant, format_time, parse_time};
use rdv_proto::{Address, AgentKey};
use serde_json::Value;

/// The directory's OPRF key (a valid scalar: below the group order).
pub const SECRET: [u8; 32] = [0x11; 32];
/// The addresses of the batch; the real listing is the first one's.
pub const ADDRESSES: [&str; 3] = ["alice@example.org", "+972-54-000-0000", "bob@example.org"];

/// SplitMix64: deterministic randomness for fixtures and evaluations.
pub struct Mix(pub u64);

impl RngCore for Mix {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        rand_core::impls::fill_bytes_via_next(self, dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoRng for Mix {}

/// An honest answer to the first `n` blinded elements.
pub struct Answer {
    pub evaluated: Vec<Vec<u8>>,
    pub proof: Vec<u8>,
    pub json: Vec<u8>,
}

pub struct Fx {
    pub now: Instant,
    pub server: ServerKey,
    pub key_id: String,
    /// The agent whose card and listing these are.
    pub agent: AgentKey,
    /// Another agent: a card of theirs in a listing of `agent`'s is refused.
    pub other: AgentKey,
    pub addresses: Vec<Address>,
    pub blinded: Vec<Blinded>,
    /// Honest answers for batches of 1, 2 and 3 elements.
    pub answers: Vec<Answer>,
    /// The OPRF outputs of the three addresses.
    pub ys: Vec<[u8; 32]>,
    pub derived: Vec<Derived>,
    pub card: Value,
    pub sealed: String,
    pub listing: Value,
    pub removal: Value,
    pub keys_json: Vec<u8>,
}

pub fn t(s: &str) -> Instant {
    parse_time("t", s).expect("a fixed time")
}

pub static FX: LazyLock<Fx> = LazyLock::new(|| {
    let now = t("2026-10-08T01:00:00Z");
    let server = ServerKey::from_secret(&SECRET).expect("a valid key");
    let key_id = server.public().id();
    let agent = AgentKey::from_seed([1; 32]);
    let other = AgentKey::from_seed([2; 32]);
    let addresses: Vec<Address> = ADDRESSES
        .iter()
        .map(|a| Address::parse(a).expect("an address"))
        .collect();
    let blinded: Vec<Blinded> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            oprf::blind_with_scalar(&oprf_input(a), &[0x21 + i as u8; 32]).expect("a blind")
        })
        .collect();
    let answers: Vec<Answer> = (1..=blinded.len())
        .map(|n| {
            let refs: Vec<&[u8]> = blinded[..n].iter().map(|b| b.element.as_slice()).collect();
            let (evaluated, proof) = server
                .evaluate_batch(&refs, &mut Mix(n as u64))
                .expect("an evaluation");
            let json = serde_json::to_vec(&EvaluateResponse {
                key_id: key_id.clone(),
                evaluated: evaluated.iter().map(|e| base64(e)).collect(),
                proof: base64(&proof),
            })
            .expect("JSON");
            Answer {
                evaluated,
                proof,
                json,
            }
        })
        .collect();
    let last = &answers[blinded.len() - 1];
    let refs: Vec<&[u8]> = last.evaluated.iter().map(Vec::as_slice).collect();
    let ys = oprf::finalize_batch(&blinded, &refs, &last.proof, server.public())
        .expect("the honest answer verifies");
    let derived: Vec<Derived> = addresses
        .iter()
        .zip(&ys)
        .map(|(a, y)| Derived::new(a.clone(), *y))
        .collect();
    let mut b = CardBuilder::new(
        t("2026-10-08T00:00:00Z"),
        vec!["wss://relay.example".into()],
    );
    b.addresses = addresses.clone();
    let card = b.sign(&agent).expect("a card");
    let sealed =
        rdv_directory_client::seal::seal(&card, &ys[0], &mut Mix(7)).expect("a sealed card");
    let listing = Listing::sign(
        &agent,
        &key_id,
        &derived[0].lookup_id,
        &sealed,
        t("2026-10-08T00:00:00Z"),
        t("2026-10-18T00:00:00Z"),
    )
    .expect("a listing");
    let removal = Removal::sign(&agent, &key_id, &derived[0].lookup_id, now).expect("a removal");
    let keys_json = serde_json::to_vec(&KeysResponse {
        suite: "P256-SHA256".into(),
        mode: "voprf".into(),
        keys: vec![KeyInfo {
            id: key_id.clone(),
            public_key: base64(server.public().as_bytes()),
            not_before: format_time(t("2026-10-01T00:00:00Z")),
            not_after: None,
        }],
    })
    .expect("JSON");
    Fx {
        now,
        server,
        key_id,
        agent,
        other,
        addresses,
        blinded,
        answers,
        ys,
        derived,
        card,
        sealed,
        listing,
        removal,
        keys_json,
    }
});

fn canon(v: &Value) -> Vec<u8> {
    rdv_proto::canon::to_vec(v).expect("canonical")
}

/// Expands `\x01` + a letter: `A` the agent's id, `O` the other agent's,
/// `K` the directory key id, `P` its public key (base64), `I` the first
/// address's lookup_id, `S` its sealed card, `C` the signed card, `L` the
/// signed listing, `R` the signed removal, `J` the keys response, `E` the
/// honest evaluation of all three elements, `e` of the first one. Anything
/// else is kept.
pub fn expand(raw: &[u8]) -> Vec<u8> {
    let fx = &*FX;
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == 1
            && let Some(&c) = raw.get(i + 1)
        {
            let rep: Option<Vec<u8>> = match c {
                b'A' => Some(fx.agent.id().as_str().as_bytes().to_vec()),
                b'O' => Some(fx.other.id().as_str().as_bytes().to_vec()),
                b'K' => Some(fx.key_id.as_bytes().to_vec()),
                b'P' => Some(base64(fx.server.public().as_bytes()).into_bytes()),
                b'I' => Some(fx.derived[0].lookup_id.as_bytes().to_vec()),
                b'S' => Some(fx.sealed.as_bytes().to_vec()),
                b'C' => Some(canon(&fx.card)),
                b'L' => Some(canon(&fx.listing)),
                b'R' => Some(canon(&fx.removal)),
                b'J' => Some(fx.keys_json.clone()),
                b'E' => Some(fx.answers[2].json.clone()),
                b'e' => Some(fx.answers[0].json.clone()),
                _ => None,
            };
            if let Some(r) = rep {
                out.extend_from_slice(&r);
                i += 2;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

/// `Derived::find` of `d` over `entries`: every listing under its
/// lookup_id is either a card that passes [`check_found`] or refused.
pub fn check_lookup(d: &Derived, entries: &[Value], allow_ws: bool) {
    let fx = &*FX;
    let found = d.find(&fx.key_id, entries, fx.now, allow_ws);
    let matching = entries
        .iter()
        .filter(|e| e.get("lookup_id").and_then(Value::as_str) == Some(d.lookup_id.as_str()))
        .count();
    assert_eq!(found.cards.len() + found.refused.len(), matching);
    for c in &found.cards {
        check_found(d, &fx.key_id, c, fx.now);
    }
}

/// What every accepted card of a lookup must satisfy: the listing's agent
/// signed it, it claims the address, the listing is under `key_id`, for
/// this lookup_id and unexpired.
fn check_found(d: &Derived, key_id: &str, found: &FoundCard, now: Instant) {
    assert_eq!(found.card.id, found.listing.agent, "card of another agent");
    assert!(found.card.claims(&d.address), "card does not claim it");
    assert_eq!(found.listing.key_id, key_id, "listing under another key");
    assert_eq!(found.listing.lookup_id, d.lookup_id, "another lookup_id");
    assert!(found.listing.expires > now, "expired listing accepted");
}
