//! RFC 9497 Appendix A.3.2 (P256-SHA256 VOPRF) through our server and client
//! code paths, and our own directory vectors (docs/test-vectors/directory.json):
//! checked here, regenerated with `RDV_WRITE_VECTORS=1`.

#![allow(clippy::unwrap_used)]

use rand_core::{CryptoRng, RngCore};
use rdv_directory_client::listing::Listing;
use rdv_directory_client::lookup::{Derived, oprf_input};
use rdv_directory_client::oprf::{self, ServerKey};
use rdv_directory_client::seal;
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::time::parse_time;
use rdv_proto::{Address, AgentKey};
use serde_json::{Value, json};

const RFC: &str = include_str!("../../../docs/test-vectors/directory-rfc9497-p256-voprf.json");
const OURS_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/test-vectors/directory.json"
);

/// Yields fixed bytes: the RFC's proof randomness, read as the scalar.
struct FixedRng(Vec<u8>);
impl RngCore for FixedRng {
    fn next_u32(&mut self) -> u32 {
        unimplemented!()
    }
    fn next_u64(&mut self) -> u64 {
        unimplemented!()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        let n = dest.len().min(self.0.len());
        dest[..n].copy_from_slice(&self.0[..n]);
        self.0.rotate_left(n);
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
impl CryptoRng for FixedRng {}

fn h(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}
fn hl(v: &Value) -> Vec<Vec<u8>> {
    v.as_array().unwrap().iter().map(h).collect()
}

#[test]
fn rfc9497_p256_voprf_vectors() {
    let rfc: Value = serde_json::from_str(RFC).unwrap();
    let key = ServerKey::from_secret(&h(&rfc["sk_s"])).unwrap();
    assert_eq!(key.public().as_bytes(), h(&rfc["pk_s"]).as_slice());
    for v in rfc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        // Client: Blind with the vector's blinds.
        let blinded: Vec<_> = hl(&v["input"])
            .iter()
            .zip(hl(&v["blind"]))
            .map(|(i, b)| oprf::blind_with_scalar(i, &b).unwrap())
            .collect();
        let want_blinded = hl(&v["blinded_element"]);
        for (b, w) in blinded.iter().zip(&want_blinded) {
            assert_eq!(&b.element, w, "{name}: blinded element");
        }
        // Server: BlindEvaluateBatch with the vector's proof randomness.
        let refs: Vec<&[u8]> = want_blinded.iter().map(Vec::as_slice).collect();
        let mut rng = FixedRng(h(&v["proof_random_scalar"]));
        let (evaluated, proof) = key.evaluate_batch(&refs, &mut rng).unwrap();
        assert_eq!(evaluated, hl(&v["evaluation_element"]), "{name}: evaluated");
        assert_eq!(proof, h(&v["proof"]), "{name}: proof");
        // Client: verify the proof and finalize.
        let erefs: Vec<&[u8]> = evaluated.iter().map(Vec::as_slice).collect();
        let out = oprf::finalize_batch(&blinded, &erefs, &proof, key.public()).unwrap();
        let out: Vec<Vec<u8>> = out.iter().map(|o| o.to_vec()).collect();
        assert_eq!(out, hl(&v["output"]), "{name}: output");
        // A flipped proof byte or a swapped element is refused.
        let mut bad = proof.clone();
        bad[40] ^= 1;
        assert!(oprf::finalize_batch(&blinded, &erefs, &bad, key.public()).is_err());
        let other = ServerKey::from_secret(&[9u8; 32]).unwrap();
        assert!(oprf::finalize_batch(&blinded, &erefs, &proof, other.public()).is_err());
    }
}

/// Our vectors: dtopic input, OPRF output under the RFC key, derived values,
/// a sealed card with a fixed nonce, and a signed listing.
fn ours() -> Value {
    let rfc: Value = serde_json::from_str(RFC).unwrap();
    let key = ServerKey::from_secret(&h(&rfc["sk_s"])).unwrap();
    let blind = h(&rfc["vectors"][0]["blind"][0]);
    let prs = h(&rfc["vectors"][0]["proof_random_scalar"]);
    let agent = AgentKey::from_seed([1; 32]);
    let t0 = parse_time("t", "2026-10-08T00:00:00Z").unwrap();
    let t1 = parse_time("t", "2026-11-07T00:00:00Z").unwrap();
    let mut b = CardBuilder::new(t0, vec!["wss://relay.example".into()]);
    b.addresses = vec![
        Address::parse("john@doe.com").unwrap(),
        Address::parse("+972540000000").unwrap(),
    ];
    let card = b.sign(&agent).unwrap();
    let mut cases = Vec::new();
    let mut elements = Vec::new();
    for raw in ["  John@Doe.COM ", "+972-54-000-0000"] {
        let addr = Address::parse(raw).unwrap();
        let input = oprf_input(&addr);
        let bl = oprf::blind_with_scalar(&input, &blind).unwrap();
        elements.push(bl.element.clone());
        let (ev, proof) = key
            .evaluate_batch(&[bl.element.as_slice()], &mut FixedRng(prs.clone()))
            .unwrap();
        let y = oprf::finalize_batch(
            std::slice::from_ref(&bl),
            &[ev[0].as_slice()],
            &proof,
            key.public(),
        )
        .unwrap()[0];
        let d = Derived::new(addr.clone(), y);
        let mut pt = rdv_proto::canon::to_vec(&card).unwrap();
        pt.resize(pt.len().div_ceil(1024) * 1024, b' ');
        let sealed = seal::seal_raw(&pt, &y, &[0u8; 12]).unwrap();
        let listing =
            Listing::sign(&agent, &key.public().id(), &d.lookup_id, &sealed, t0, t1).unwrap();
        cases.push(json!({
            "address": raw,
            "canon": addr.canon(),
            "dtopic": addr.dtopic(),
            "oprf_input_hex": hex::encode(&input),
            "blind": hex::encode(&blind),
            "blinded_element": hex::encode(&bl.element),
            "evaluation_element": hex::encode(&ev[0]),
            "proof_random_scalar": hex::encode(&prs),
            "proof": hex::encode(&proof),
            "y": hex::encode(y),
            "lookup_id": d.lookup_id,
            "seal_key": hex::encode(seal::seal_key(&y)),
            "seal_nonce": "000000000000000000000000",
            "sealed": sealed,
            "listing": listing,
        }));
    }
    // The padding rule's edge (docs/directory-protocol.md): a card whose
    // canonical form is exactly 1,024 bytes is sealed with no spaces.
    let y0 = h(&cases[0]["y"]);
    let exact = exact_block_card(&agent, t0);
    let exact_len = rdv_proto::canon::to_vec(&exact).unwrap().len();
    assert_eq!(exact_len, 1024);
    let exact_sealed = seal::seal(&exact, &y0, &mut FixedRng(vec![0; 32])).unwrap();
    // "The card claims the address": same type, same canonical value.
    let parsed = rdv_proto::doc::card::Card::verify(&card, t0, false).unwrap();
    let claims: Vec<Value> = [
        ("JOHN@doe.com", true),
        (" john@DOE.com", true),
        ("+972 54 000 0000", true),
        ("+972-54-000-0001", false),
        ("jane@doe.com", false),
        ("john@doe.co", false),
    ]
    .iter()
    .map(|(raw, want)| {
        let got = parsed.claims(&Address::parse(raw).unwrap());
        assert_eq!(got, *want, "{raw}");
        json!({"address": raw, "claimed": want})
    })
    .collect();
    json!({
        "description": "rdv directory vectors (docs/directory-protocol.md): OPRF key = RFC 9497 A.3.2 skSm; agent seed = 32 bytes of 0x01",
        "sealed_exact_block": {
            "why": "canon(card) is exactly 1024 bytes: no padding; sealed under cases[0].y with a zero nonce, raw length 12 + 1024 + 16",
            "card": exact,
            "canon_len": exact_len,
            "seal_nonce": "000000000000000000000000",
            "sealed": exact_sealed,
        },
        "claims": {
            "why": "addresses looked up against `card`: claimed when some discovery address has the same type and canonical value",
            "cases": claims,
        },
        "sk_s": hex::encode(h(&rfc["sk_s"])),
        "key_id": key.public().id(),
        "agent_seed": hex::encode([1u8; 32]),
        "card": card,
        "cases": cases,
        "invalid_elements": invalid_elements(&elements[0]),
    })
}

/// A card of `agent` whose canonical form is exactly 1,024 bytes: a
/// capability URI grown one character at a time until it fits.
fn exact_block_card(agent: &AgentKey, t0: rdv_proto::time::Instant) -> Value {
    for n in 0..200 {
        let mut b = CardBuilder::new(t0, vec!["wss://relay.example".into()]);
        b.addresses = vec![Address::parse("john@doe.com").unwrap()];
        b.capabilities
            .push(format!("https://example.org/ext/{}", "p".repeat(n)));
        b.capabilities
            .push(format!("https://example.org/ext/{}", "q".repeat(150)));
        b.capabilities
            .push(format!("https://example.org/ext/{}", "r".repeat(150)));
        b.capabilities
            .push(format!("https://example.org/ext/{}", "s".repeat(150)));
        let card = b.sign(agent).unwrap();
        let len = rdv_proto::canon::to_vec(&card).unwrap().len();
        if len == 1024 {
            return card;
        }
        assert!(
            len < 1024,
            "the base card is already over 1024 bytes ({len})"
        );
    }
    panic!("no capability length gives a 1024-byte card");
}

/// Encodings every element decoder must refuse (RFC 9497 §4.3
/// DeserializeElement: 33-byte compressed SEC1, tag 2 or 3, on the curve,
/// not the identity), made from a valid element. Several of them `p256`
/// itself decodes; the directory refused none of the compact ones before
/// `oprf::is_compressed`.
fn invalid_elements(valid: &[u8]) -> Value {
    use p256::elliptic_curve::sec1::ToEncodedPoint;
    let point = p256::PublicKey::from_sec1_bytes(valid).unwrap();
    let x = &valid[1..];
    let with_tag = |t: u8| [&[t][..], x].concat();
    // The first x after the element's with no point on the curve.
    let mut off = valid.to_vec();
    while p256::PublicKey::from_sec1_bytes(&off).is_ok() {
        let last = off.len() - 1;
        off[last] = off[last].wrapping_add(1);
    }
    let uncompressed = point.to_encoded_point(false).as_bytes().to_vec();
    for decodable in [&with_tag(0x05), &uncompressed] {
        assert!(p256::PublicKey::from_sec1_bytes(decodable).is_ok());
    }
    let mut past_p = vec![0xffu8; 33];
    past_p[0] = 0x02;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "SEC1 compact form 0x05 ‖ x (p256 decodes it)",
            with_tag(0x05),
        ),
        (
            "uncompressed 0x04 ‖ x ‖ y of the same point (p256 decodes it)",
            point.to_encoded_point(false).as_bytes().to_vec(),
        ),
        ("tag 0x04 with only x", with_tag(0x04)),
        ("hybrid tag 0x06 with only x", with_tag(0x06)),
        ("tag 0x00 with x", with_tag(0x00)),
        ("the identity, 0x00", vec![0x00]),
        ("x with no point on the curve", off),
        ("x = 2^256 − 1, past the field prime", past_p),
        ("one byte short", valid[..32].to_vec()),
        ("one byte long", [valid, &[0][..]].concat()),
    ];
    cases
        .into_iter()
        .map(|(why, b)| json!({"why": why, "hex": hex::encode(b)}))
        .collect()
}

#[test]
fn directory_vectors() {
    let got = ours();
    let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
    if std::env::var_os("RDV_WRITE_VECTORS").is_some() {
        std::fs::write(OURS_PATH, &text).unwrap();
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(OURS_PATH).unwrap()).unwrap();
    assert_eq!(got, want, "docs/test-vectors/directory.json is stale");
    // The exact-block card is sealed with no padding, and opens to itself.
    let e = &want["sealed_exact_block"];
    let y0 = h(&want["cases"][0]["y"]);
    let raw = rdv_proto::encoding::base64_decode(e["sealed"].as_str().unwrap()).unwrap();
    assert_eq!(raw.len(), 12 + 1024 + 16);
    assert_eq!(
        seal::open(e["sealed"].as_str().unwrap(), &y0).unwrap(),
        e["card"]
    );
    // The sealed card opens with y and is the card; the listing verifies.
    for c in want["cases"].as_array().unwrap() {
        let y = h(&c["y"]);
        assert_eq!(
            seal::open(c["sealed"].as_str().unwrap(), &y).unwrap(),
            want["card"]
        );
        Listing::parse_signed(&c["listing"]).unwrap();
        assert_eq!(
            c["lookup_id"].as_str().unwrap(),
            seal::lookup_id_hex(&y),
            "lookup_id = SHA-256(prefix ‖ y)"
        );
    }
}

/// Every decoder refuses each of the vectors' invalid elements: the server
/// as a blinded element (both evaluations), the client as an evaluated
/// element and as a directory's public key.
#[test]
fn invalid_elements_are_refused_everywhere() {
    let want: Value = serde_json::from_str(&std::fs::read_to_string(OURS_PATH).unwrap()).unwrap();
    let rfc: Value = serde_json::from_str(RFC).unwrap();
    let key = ServerKey::from_secret(&h(&rfc["sk_s"])).unwrap();
    let case = &want["cases"][0];
    let blinded = oprf::blind_with_scalar(
        &hex::decode(case["oprf_input_hex"].as_str().unwrap()).unwrap(),
        &h(&case["blind"]),
    )
    .unwrap();
    let proof = h(&case["proof"]);
    let good = h(&case["evaluation_element"]);
    let one = std::slice::from_ref(&blinded);
    assert!(oprf::finalize_batch(one, &[good.as_slice()], &proof, key.public()).is_ok());
    let invalid = want["invalid_elements"].as_array().unwrap();
    assert!(invalid.len() >= 10);
    for v in invalid {
        let (why, b) = (v["why"].as_str().unwrap(), h(&v["hex"]));
        let mut rng = FixedRng(vec![1; 32]);
        assert!(
            key.evaluate_batch(&[b.as_slice()], &mut rng).is_err(),
            "server took {why}"
        );
        assert!(
            key.evaluate_batch_reference(&[b.as_slice()], &mut rng)
                .is_err(),
            "reference took {why}"
        );
        assert!(
            oprf::finalize_batch(one, &[b.as_slice()], &proof, key.public()).is_err(),
            "client took {why} as an evaluation"
        );
        assert!(
            oprf::PublicKey::from_bytes(&b).is_err(),
            "client took {why} as a key"
        );
    }
}

/// The fast batch evaluation (ComputeCompositesFast with a multi-scalar
/// multiplication) is byte-identical to stock `voprf` given the same proof
/// randomness, for batches of several sizes, and stock `voprf` verifies it.
#[test]
fn fast_evaluation_matches_stock_voprf_byte_for_byte() {
    use rand_core::OsRng;
    let (key, _) = ServerKey::generate(&mut OsRng);
    for n in [1usize, 2, 3, 17, 100, 257] {
        let blinded: Vec<_> = (0..n)
            .map(|i| oprf::blind(format!("input {i}").as_bytes(), &mut OsRng).unwrap())
            .collect();
        let refs: Vec<&[u8]> = blinded.iter().map(|b| b.element.as_slice()).collect();
        let mut r = [0u8; 32];
        OsRng.fill_bytes(&mut r);
        r[0] &= 0x7f; // below the group order: used as is by both
        let fast = key
            .evaluate_batch(&refs, &mut FixedRng(r.to_vec()))
            .unwrap();
        let stock = key
            .evaluate_batch_reference(&refs, &mut FixedRng(r.to_vec()))
            .unwrap();
        assert_eq!(fast, stock, "batch of {n}");
        let erefs: Vec<&[u8]> = fast.0.iter().map(Vec::as_slice).collect();
        oprf::finalize_batch(&blinded, &erefs, &fast.1, key.public()).unwrap();
    }
}

/// A batch holding one element that is not a point, or the identity, is
/// refused as a whole.
#[test]
fn fast_evaluation_refuses_bad_elements() {
    use rand_core::OsRng;
    let (key, _) = ServerKey::generate(&mut OsRng);
    let good = oprf::blind(b"x", &mut OsRng).unwrap().element;
    let mut off_curve = good.clone();
    off_curve[0] = 0x04;
    let zeros = vec![0u8; oprf::ELEMENT_LEN];
    for bad in [off_curve, zeros, good[..32].to_vec()] {
        assert!(
            key.evaluate_batch(&[good.as_slice(), bad.as_slice()], &mut OsRng)
                .is_err()
        );
    }
    assert!(key.evaluate_batch(&[], &mut OsRng).is_err());
}
