//! Envelopes (§6.4): ephemeral X25519 → HKDF-SHA256 → AES-256-GCM, the header
//! bound as associated data, and an Ed25519 signature over everything but
//! `sig`, `content` included.
//!
//! Opening follows the order the spec and the threat model ask for: the raw
//! size, then the ciphertext's base64 length, then the header's shape and
//! times, then the signature, and only then decryption. The types enforce the
//! last step: only [`verify`] makes a [`Verified`], and only a [`Verified`]
//! is decrypted.

use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use hkdf::Hkdf;
use serde_json::{Map, Value, json};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::canon;
use crate::consts::{
    ENVELOPE_ALG, ENVELOPE_DEFAULT_TTL, ENVELOPE_HKDF_INFO, ENVELOPE_MAX_AHEAD_SECS,
    ENVELOPE_MAX_BYTES, ENVELOPE_MAX_CIPHERTEXT, ENVELOPE_MAX_CIPHERTEXT_B64,
    ENVELOPE_MAX_PLAINTEXT,
};
use crate::doc::obj::Obj;
use crate::encoding::{base64, base64_array, base64_decode};
use crate::error::{Error, Result};
use crate::keys::{AgentId, AgentKey};
use crate::sign;
use crate::time::{Instant, format_time, parse_ttl};

/// What a sender chooses for one envelope. `ephemeral` and `nonce` are the
/// caller's randomness (fresh per envelope; fixed only in test vectors).
pub struct SealParams<'a> {
    pub from: &'a AgentKey,
    pub to: &'a AgentId,
    pub seq: u64,
    pub prev: Option<&'a str>,
    pub created: Instant,
    pub ttl: &'a str,
    pub ephemeral: [u8; 32],
    pub nonce: [u8; 12],
}

impl<'a> SealParams<'a> {
    /// Parameters with fresh randomness from `rng` and the default ttl.
    pub fn new(
        from: &'a AgentKey,
        to: &'a AgentId,
        seq: u64,
        prev: Option<&'a str>,
        created: Instant,
        rng: &mut (impl rand_core::CryptoRngCore + ?Sized),
    ) -> Self {
        let mut ephemeral = [0u8; 32];
        let mut nonce = [0u8; 12];
        rng.fill_bytes(&mut ephemeral);
        rng.fill_bytes(&mut nonce);
        Self {
            from,
            to,
            seq,
            prev,
            created,
            ttl: ENVELOPE_DEFAULT_TTL,
            ephemeral,
            nonce,
        }
    }
}

/// The envelope's signed, cleartext facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub from: AgentId,
    pub to: AgentId,
    pub seq: u64,
    pub prev: Option<String>,
    /// `created` as written (kept verbatim: it is part of the AAD and the sig).
    pub created_raw: String,
    pub created: Instant,
    pub ttl_secs: i64,
    /// §4.6 hash of the whole envelope, the next envelope's `prev`.
    pub hash: String,
}

impl Header {
    /// When the envelope expires (`created + ttl`).
    pub fn expires(&self) -> Instant {
        self.created + time::Duration::seconds(self.ttl_secs)
    }
}

/// An envelope whose sizes, shape, times and signature [`verify`] checked.
/// §6.4: sizes before signatures, signatures before decryption; so this is
/// the only thing [`open_verified`] decrypts, and only [`verify`] and
/// [`verify_value`] make one (a [`Header`] anyone can build is never enough).
#[derive(Debug, Clone)]
pub struct Verified {
    header: Header,
    envelope: Value,
}

impl Verified {
    /// The signed header facts.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The envelope exactly as verified.
    pub fn envelope(&self) -> &Value {
        &self.envelope
    }

    /// The header and the envelope (to keep or forward, not to decrypt).
    pub fn into_parts(self) -> (Header, Value) {
        (self.header, self.envelope)
    }
}

/// A verified, decrypted envelope.
#[derive(Debug, Clone)]
pub struct Opened {
    pub header: Header,
    pub payload: Map<String, Value>,
}

/// Seals `payload` (an object, sent as exactly its canonical JSON) to `p.to`.
pub fn seal(payload: &Value, p: &SealParams<'_>) -> Result<Value> {
    if !payload.is_object() {
        return Err(Error::shape("payload", "must be a JSON object"));
    }
    let plaintext = canon::to_vec(payload)?;
    if plaintext.len() > ENVELOPE_MAX_PLAINTEXT {
        return Err(Error::TooLarge {
            what: "payload",
            len: plaintext.len(),
            limit: ENVELOPE_MAX_PLAINTEXT,
        });
    }
    if p.seq < 1 || p.seq > crate::consts::CANON_MAX_SAFE_INT as u64 {
        return Err(Error::shape("seq", "must be a positive integer"));
    }
    if (p.seq == 1) != p.prev.is_none() {
        return Err(Error::shape("prev", "null exactly for seq 1"));
    }
    if p.prev.is_some_and(|h| !crate::encoding::is_hash(h)) {
        return Err(Error::shape("prev", "must be 64 lowercase hex digits"));
    }
    parse_ttl(p.ttl)?;
    let created = format_time(p.created);
    let aad = header_aad(p.from.id(), p.to, p.seq, p.prev, &created, p.ttl)?;

    let esk = x25519_dalek::StaticSecret::from(p.ephemeral);
    let epk = x25519_dalek::PublicKey::from(&esk);
    let recipient = p.to.x25519_public()?;
    let key = envelope_key(&esk, &recipient, &epk, &recipient)?;
    let ct = Aes256Gcm::new(key.as_ref().into())
        .encrypt(
            Nonce::from_slice(&p.nonce),
            Payload {
                msg: &plaintext,
                aad: &aad,
            },
        )
        .map_err(|_| Error::Decrypt)?;

    let env = json!({
        "v": 1,
        "from": p.from.id().as_str(),
        "to": p.to.as_str(),
        "seq": p.seq,
        "prev": p.prev,
        "created": created,
        "ttl": p.ttl,
        "content": {
            "alg": ENVELOPE_ALG,
            "epk": base64(epk.as_bytes()),
            "nonce": base64(&p.nonce),
            "ciphertext": base64(&ct),
        },
    });
    sign::sign_value(env, p.from)
}

/// Checks everything that needs no secret key: sizes, shape, times and the
/// signature (§6.4). Relays, bridges and `rdv proto verify` stop here.
pub fn verify(raw: &[u8], now: Instant) -> Result<Verified> {
    verify_for(raw, now, None)
}

/// [`verify`], refusing at once an envelope not addressed to `me` (when
/// given): the recipient's own ID need not be decoded again.
fn verify_for(raw: &[u8], now: Instant, me: Option<&AgentId>) -> Result<Verified> {
    if raw.len() > ENVELOPE_MAX_BYTES {
        return Err(Error::TooLarge {
            what: "envelope",
            len: raw.len(),
            limit: ENVELOPE_MAX_BYTES,
        });
    }
    let envelope = canon::parse(raw, ENVELOPE_MAX_BYTES)?;
    let header = verify_value_for(&envelope, now, me)?;
    Ok(Verified { header, envelope })
}

/// [`verify`] for an already parsed envelope (kept, as a copy, in the result).
pub fn verify_value(v: &Value, now: Instant) -> Result<Verified> {
    let header = verify_value_for(v, now, None)?;
    Ok(Verified {
        header,
        envelope: v.clone(),
    })
}

/// Why an envelope addressed to another agent is refused.
const NOT_FOR_ME: &str = "envelope is not addressed to this agent";

fn verify_value_for(v: &Value, now: Instant, me: Option<&AgentId>) -> Result<Header> {
    // §6.4: the ciphertext size is checked from the base64 length before
    // the signature is verified or anything is decoded.
    let ct_b64 = v
        .get("content")
        .and_then(|c| c.get("ciphertext"))
        .and_then(Value::as_str)
        .ok_or_else(|| Error::shape("content.ciphertext", "missing"))?;
    if ct_b64.len() > ENVELOPE_MAX_CIPHERTEXT_B64 {
        return Err(Error::TooLarge {
            what: "ciphertext (base64)",
            len: ct_b64.len(),
            limit: ENVELOPE_MAX_CIPHERTEXT_B64,
        });
    }

    let mut o = Obj::new(v, "envelope")?;
    o.version()?;
    let from = o.id("from")?;
    let to = match me {
        Some(me) if o.str("to")? == me.as_str() => me.clone(),
        Some(_) => return Err(o.err("to", NOT_FOR_ME)),
        None => o.id("to")?,
    };
    let seq = o.positive("seq")? as u64;
    let prev = match o.opt("prev") {
        Some(Value::Null) => None,
        Some(Value::String(_)) => Some(o.hash("prev")?.to_string()),
        _ => return Err(o.err("prev", "must be a hash or null")),
    };
    if (seq == 1) != prev.is_none() {
        return Err(o.err("prev", "null exactly for seq 1"));
    }
    let created_raw = o.str("created")?.to_string();
    let created = o.time("created")?;
    let ttl_secs = parse_ttl(o.str("ttl")?)?;
    let mut c = o.object("content")?;
    if c.str("alg")? != ENVELOPE_ALG {
        return Err(c.err("alg", format!("must be {ENVELOPE_ALG}")));
    }
    base64_array::<32>("content.epk", c.str("epk")?)?;
    base64_array::<12>("content.nonce", c.str("nonce")?)?;
    c.str("ciphertext")?;
    c.deny_unknown()?;
    o.str("sig")?;
    o.deny_unknown()?;

    // §6.4: a created more than 5 minutes ahead, or an expired envelope, is refused.
    if created > now + time::Duration::seconds(ENVELOPE_MAX_AHEAD_SECS) {
        return Err(Error::FromFuture("created"));
    }
    if now > created + time::Duration::seconds(ttl_secs) {
        return Err(Error::Expired);
    }

    let map = v
        .as_object()
        .ok_or_else(|| Error::shape("envelope", "must be an object"))?;
    let hash = sign::verify_hashed(map, &from, ENVELOPE_MAX_BYTES)?;
    Ok(Header {
        from,
        to,
        seq,
        prev,
        created_raw,
        created,
        ttl_secs,
        hash,
    })
}

/// Opens an envelope addressed to `me`: [`verify`], then decrypts. The
/// plaintext must be the canonical JSON of an object.
pub fn open(raw: &[u8], me: &AgentKey, now: Instant) -> Result<Opened> {
    open_verified(verify_for(raw, now, Some(me.id()))?, me)
}

/// Decrypts an envelope [`verify`] accepted, if it is addressed to `me`
/// (§6.4: never before its signature is checked).
pub fn open_verified(verified: Verified, me: &AgentKey) -> Result<Opened> {
    let Verified { header, envelope } = verified;
    let v = &envelope;
    if &header.to != me.id() {
        return Err(Error::shape("to", NOT_FOR_ME));
    }
    let content = v
        .get("content")
        .ok_or_else(|| Error::shape("content", "missing"))?;
    let field = |k: &str| {
        content
            .get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::shape(k, "missing"))
    };
    let epk = x25519_dalek::PublicKey::from(base64_array::<32>("content.epk", field("epk")?)?);
    let nonce = base64_array::<12>("content.nonce", field("nonce")?)?;
    let ct = base64_decode(field("ciphertext")?)?;
    if ct.len() > ENVELOPE_MAX_CIPHERTEXT {
        return Err(Error::TooLarge {
            what: "ciphertext",
            len: ct.len(),
            limit: ENVELOPE_MAX_CIPHERTEXT,
        });
    }
    let aad = header_aad(
        &header.from,
        &header.to,
        header.seq,
        header.prev.as_deref(),
        &header.created_raw,
        &ttl_raw(v)?,
    )?;
    let my_secret = me.x25519_secret();
    // The Montgomery form of our Ed25519 key: a field inversion, where
    // deriving it from the secret would cost a scalar multiplication.
    let my_public = me.id().x25519_public()?;
    let key = envelope_key(&my_secret, &epk, &epk, &my_public)?;
    let plaintext = Zeroizing::new(
        Aes256Gcm::new(key.as_ref().into())
            .decrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &ct,
                    aad: &aad,
                },
            )
            .map_err(|_| Error::Decrypt)?,
    );
    let payload = canon::parse(&plaintext, ENVELOPE_MAX_PLAINTEXT)?;
    if canon::to_vec(&payload)? != *plaintext {
        return Err(Error::shape("payload", "plaintext is not canonical JSON"));
    }
    match payload {
        Value::Object(payload) => Ok(Opened { header, payload }),
        _ => Err(Error::shape("payload", "must be a JSON object")),
    }
}

fn ttl_raw(v: &Value) -> Result<String> {
    v.get("ttl")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Error::shape("ttl", "missing"))
}

/// §6.4 (pinned): the associated data is canon of the header fields.
fn header_aad(
    from: &AgentId,
    to: &AgentId,
    seq: u64,
    prev: Option<&str>,
    created: &str,
    ttl: &str,
) -> Result<Vec<u8>> {
    canon::to_vec(&json!({
        "v": 1, "from": from.as_str(), "to": to.as_str(), "seq": seq,
        "prev": prev, "created": created, "ttl": ttl,
    }))
}

/// §6.4: key = HKDF-SHA256(X25519(secret, public), salt = epk ‖ recipient, "rdv1/envelope").
/// `secret` and `peer` are (ephemeral, recipient) when sealing and
/// (recipient, epk) when opening.
fn envelope_key(
    secret: &x25519_dalek::StaticSecret,
    peer: &x25519_dalek::PublicKey,
    epk: &x25519_dalek::PublicKey,
    recipient: &x25519_dalek::PublicKey,
) -> Result<Zeroizing<[u8; 32]>> {
    let shared = secret.diffie_hellman(peer);
    // A low-order point yields an all-zero secret anyone can compute.
    if !shared.was_contributory() {
        return Err(Error::Key("low-order X25519 point".into()));
    }
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(epk.as_bytes());
    salt[32..].copy_from_slice(recipient.as_bytes());
    let mut key = Zeroizing::new([0u8; 32]);
    Hkdf::<Sha256>::new(Some(&salt), shared.as_bytes())
        .expand(ENVELOPE_HKDF_INFO, key.as_mut())
        .map_err(|e| Error::Key(e.to_string()))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_time;

    fn t(s: &str) -> Instant {
        parse_time("t", s).unwrap()
    }

    fn keys() -> (AgentKey, AgentKey) {
        (AgentKey::from_seed([1; 32]), AgentKey::from_seed([2; 32]))
    }

    fn seal_one(a: &AgentKey, b: &AgentKey, payload: &Value) -> Value {
        let p = SealParams {
            from: a,
            to: b.id(),
            seq: 1,
            prev: None,
            created: t("2026-10-08T00:00:00Z"),
            ttl: "48h",
            ephemeral: [9; 32],
            nonce: [3; 12],
        };
        seal(payload, &p).unwrap()
    }

    fn bytes(v: &Value) -> Vec<u8> {
        canon::to_vec(v).unwrap()
    }

    const NOW: &str = "2026-10-08T01:00:00Z";

    #[test]
    fn round_trip() {
        let (a, b) = keys();
        let payload = json!({"type": "note", "text": "hi ☃"});
        let env = seal_one(&a, &b, &payload);
        let o = open(&bytes(&env), &b, t(NOW)).unwrap();
        assert_eq!(Value::Object(o.payload), payload);
        assert_eq!(&o.header.from, a.id());
        assert_eq!(o.header.seq, 1);
        assert_eq!(o.header.hash, sign::hash(&env).unwrap());
        // Only the recipient can open it.
        assert!(open(&bytes(&env), &a, t(NOW)).is_err());
    }

    #[test]
    fn swapped_ciphertext_under_genuine_header_is_refused() {
        // §6.4 rev 3 security fix: content is covered by the signature.
        let (a, b) = keys();
        let mallory = AgentKey::from_seed([7; 32]);
        let genuine = seal_one(&a, &b, &json!({"type": "note", "text": "genuine"}));
        // Mallory encrypts her own payload to b under a header copied from a.
        let forged_src = {
            let p = SealParams {
                from: &mallory,
                to: b.id(),
                seq: 1,
                prev: None,
                created: t("2026-10-08T00:00:00Z"),
                ttl: "48h",
                ephemeral: [5; 32],
                nonce: [6; 12],
            };
            seal(&json!({"type": "note", "text": "forged"}), &p).unwrap()
        };
        let mut forged = genuine.clone();
        forged["content"] = forged_src["content"].clone();
        assert_eq!(
            open(&bytes(&forged), &b, t(NOW)).unwrap_err(),
            Error::BadSignature
        );
    }

    #[test]
    fn header_is_bound_as_associated_data() {
        // Even if a signature check were skipped, a changed header fails GCM.
        let (a, b) = keys();
        let env = seal_one(&a, &b, &json!({"type": "x"}));
        let (mut header, envelope) = verify(&bytes(&env), t(NOW)).unwrap().into_parts();
        header.created_raw = "2026-10-08T00:00:01Z".into();
        // Only this module can build a Verified by hand, as here.
        let forged = Verified { header, envelope };
        assert_eq!(open_verified(forged, &b).unwrap_err(), Error::Decrypt);
    }

    #[test]
    fn oversize_ciphertext_refused_before_signature() {
        let (a, b) = keys();
        let mut env = seal_one(&a, &b, &json!({"type": "x"}));
        // One base64 quantum over the cap; the signature is now also wrong,
        // so the error kind proves which check ran first.
        env["content"]["ciphertext"] = Value::String("A".repeat(ENVELOPE_MAX_CIPHERTEXT_B64 + 4));
        assert!(matches!(
            open(&bytes(&env), &b, t(NOW)),
            Err(Error::TooLarge {
                what: "ciphertext (base64)",
                ..
            })
        ));
        // At the cap it gets past the size check (and fails on the signature).
        env["content"]["ciphertext"] = Value::String("A".repeat(ENVELOPE_MAX_CIPHERTEXT_B64));
        assert_eq!(
            open(&bytes(&env), &b, t(NOW)).unwrap_err(),
            Error::BadSignature
        );
    }

    #[test]
    fn largest_payload_fits_and_one_more_byte_does_not() {
        let (a, b) = keys();
        let overhead = canon::to_vec(&json!({"type": "x", "p": ""})).unwrap().len();
        let big = json!({"type": "x", "p": "a".repeat(ENVELOPE_MAX_PLAINTEXT - overhead)});
        let env = seal_one(&a, &b, &big);
        assert!(bytes(&env).len() <= ENVELOPE_MAX_BYTES);
        open(&bytes(&env), &b, t(NOW)).unwrap();
        let too_big = json!({"type": "x", "p": "a".repeat(ENVELOPE_MAX_PLAINTEXT - overhead + 1)});
        let p = SealParams {
            from: &a,
            to: b.id(),
            seq: 1,
            prev: None,
            created: t(NOW),
            ttl: "48h",
            ephemeral: [1; 32],
            nonce: [1; 12],
        };
        assert!(matches!(seal(&too_big, &p), Err(Error::TooLarge { .. })));
    }

    #[test]
    fn time_rules() {
        let (a, b) = keys();
        let env = seal_one(&a, &b, &json!({"type": "x"}));
        let raw = bytes(&env);
        // created 2026-10-08T00:00:00Z, ttl 48h.
        assert!(
            open(&raw, &b, t("2026-10-07T23:55:00Z")).is_ok(),
            "5 minutes ahead is allowed"
        );
        assert_eq!(
            open(&raw, &b, t("2026-10-07T23:54:59Z")).unwrap_err(),
            Error::FromFuture("created")
        );
        assert!(
            open(&raw, &b, t("2026-10-10T00:00:00Z")).is_ok(),
            "at created + ttl not yet expired"
        );
        assert_eq!(
            open(&raw, &b, t("2026-10-10T00:00:01Z")).unwrap_err(),
            Error::Expired
        );
    }

    #[test]
    fn ttl_over_seven_days_refused() {
        let (a, b) = keys();
        let mut p = SealParams::new(&a, b.id(), 1, None, t(NOW), &mut rand_core::OsRng);
        p.ttl = "8d";
        assert!(seal(&json!({"type": "x"}), &p).is_err(), "sender refuses");
        p.ttl = "7d";
        let mut env = seal(&json!({"type": "x"}), &p).unwrap();
        env["ttl"] = json!("8d");
        env.as_object_mut().unwrap().remove("sig");
        let env = sign::sign_value(env, &a).unwrap();
        assert!(
            matches!(open(&bytes(&env), &b, t(NOW)), Err(Error::Shape { .. })),
            "receiver refuses"
        );
    }

    #[test]
    fn shape_rules() {
        let (a, b) = keys();
        let env = seal_one(&a, &b, &json!({"type": "x"}));
        let resign = |f: &dyn Fn(&mut Value)| {
            let mut e = env.clone();
            e.as_object_mut().unwrap().remove("sig");
            f(&mut e);
            bytes(&sign::sign_value(e, &a).unwrap())
        };
        type Edit = Box<dyn Fn(&mut Value)>;
        let bad: Vec<(&str, Edit)> = vec![
            ("unknown field", Box::new(|e| e["x"] = json!(1))),
            (
                "unknown content field",
                Box::new(|e| e["content"]["x"] = json!(1)),
            ),
            ("v", Box::new(|e| e["v"] = json!(2))),
            ("seq 0", Box::new(|e| e["seq"] = json!(0))),
            ("seq 2 with null prev", Box::new(|e| e["seq"] = json!(2))),
            (
                "prev on seq 1",
                Box::new(|e| e["prev"] = json!("a".repeat(64))),
            ),
            ("alg", Box::new(|e| e["content"]["alg"] = json!("none"))),
            (
                "short nonce",
                Box::new(|e| e["content"]["nonce"] = json!(base64(&[0; 8]))),
            ),
            ("bad from", Box::new(|e| e["from"] = json!("rdv1:abc"))),
        ];
        for (name, f) in bad {
            assert!(open(&resign(&*f), &b, t(NOW)).is_err(), "{name} accepted");
        }
        // Non-canonical whitespace is fine on the wire; the content is what is signed.
        let pretty = serde_json::to_vec_pretty(&env).unwrap();
        assert!(open(&pretty, &b, t(NOW)).is_ok());
    }

    #[test]
    fn low_order_epk_refused() {
        let (a, b) = keys();
        let mut env = seal_one(&a, &b, &json!({"type": "x"}));
        env.as_object_mut().unwrap().remove("sig");
        env["content"]["epk"] = json!(base64(&[0u8; 32]));
        let env = sign::sign_value(env, &a).unwrap();
        assert!(matches!(open(&bytes(&env), &b, t(NOW)), Err(Error::Key(_))));
    }

    #[test]
    fn non_canonical_plaintext_refused() {
        // Build an envelope whose plaintext is valid JSON but not canonical.
        let (a, b) = keys();
        let env = seal_one(&a, &b, &json!({"type": "x"}));
        let h = verify(&bytes(&env), t(NOW)).unwrap().into_parts().0;
        let esk = x25519_dalek::StaticSecret::from([9u8; 32]);
        let epk = x25519_dalek::PublicKey::from(&esk);
        let bx = b.id().x25519_public().unwrap();
        let key = envelope_key(&esk, &bx, &epk, &bx).unwrap();
        let aad = header_aad(a.id(), b.id(), 1, None, &h.created_raw, "48h").unwrap();
        let ct = Aes256Gcm::new(key.as_ref().into())
            .encrypt(
                Nonce::from_slice(&[3; 12]),
                Payload {
                    msg: b"{ \"type\": \"x\" }",
                    aad: &aad,
                },
            )
            .unwrap();
        let mut e = env.clone();
        e.as_object_mut().unwrap().remove("sig");
        e["content"]["ciphertext"] = json!(base64(&ct));
        let e = sign::sign_value(e, &a).unwrap();
        assert!(open(&bytes(&e), &b, t(NOW)).is_err());
    }

    #[test]
    fn tampered_envelope_never_yields_verified() {
        // §6.4: every member outside sig, content included, is signed, so no
        // edit without the sender's key gets a Verified (and so a decryption).
        let (a, b) = keys();
        let env = seal_one(&a, &b, &json!({"type": "x"}));
        let other = seal_one(&a, &b, &json!({"type": "y"}));
        let mallory = AgentKey::from_seed([7; 32]);
        type Edit<'a> = Box<dyn Fn(&mut Value) + 'a>;
        let edits: Vec<(&str, Edit<'_>)> = vec![
            (
                "from",
                Box::new(|e| e["from"] = json!(mallory.id().as_str())),
            ),
            ("to", Box::new(|e| e["to"] = json!(mallory.id().as_str()))),
            (
                "created",
                Box::new(|e| e["created"] = json!("2026-10-08T00:00:01Z")),
            ),
            ("ttl", Box::new(|e| e["ttl"] = json!("47h"))),
            (
                "seq and prev",
                Box::new(|e| {
                    e["seq"] = json!(2);
                    e["prev"] = json!("a".repeat(64));
                }),
            ),
            (
                "epk",
                Box::new(|e| e["content"]["epk"] = json!(base64(&[9; 32]))),
            ),
            (
                "nonce",
                Box::new(|e| e["content"]["nonce"] = json!(base64(&[4; 12]))),
            ),
            (
                "ciphertext",
                Box::new(|e| e["content"] = other["content"].clone()),
            ),
            ("sig", Box::new(|e| e["sig"] = other["sig"].clone())),
        ];
        for (name, edit) in edits {
            let mut e = env.clone();
            edit(&mut e);
            assert_eq!(
                verify(&bytes(&e), t(NOW)).unwrap_err(),
                Error::BadSignature,
                "{name} edited"
            );
            assert_eq!(
                verify_value(&e, t(NOW)).unwrap_err(),
                Error::BadSignature,
                "{name} edited"
            );
            assert_eq!(
                open(&bytes(&e), &b, t(NOW)).unwrap_err(),
                if name == "to" {
                    Error::shape("envelope.to", NOT_FOR_ME)
                } else {
                    Error::BadSignature
                },
                "{name} edited"
            );
        }
        let v = verify(&bytes(&env), t(NOW)).unwrap();
        assert_eq!(v.envelope(), &env);
        assert_eq!(v.header().hash, sign::hash(&env).unwrap());
        assert_eq!(
            Value::Object(open_verified(v, &b).unwrap().payload),
            json!({"type": "x"})
        );
    }

    #[test]
    fn open_verified_refuses_an_envelope_for_someone_else() {
        let (a, b) = keys();
        let carol = AgentKey::from_seed([3; 32]);
        let env = seal_one(&a, &b, &json!({"type": "x"}));
        // A relay's verify knows no recipient: the envelope verifies...
        let v = verify(&bytes(&env), t(NOW)).unwrap();
        assert_eq!(&v.header().to, b.id());
        // ...and opening it as carol is refused for the address, before any
        // decryption is tried (that would be Error::Decrypt).
        assert_eq!(
            open_verified(v.clone(), &carol).unwrap_err(),
            Error::Shape {
                field: "to".into(),
                reason: "envelope is not addressed to this agent".into()
            }
        );
        assert_eq!(
            open_verified(verify_value(&env, t(NOW)).unwrap(), &a).unwrap_err(),
            Error::shape("to", NOT_FOR_ME),
            "nor by its sender"
        );
        assert_eq!(
            open(&bytes(&env), &carol, t(NOW)).unwrap_err(),
            Error::shape("envelope.to", NOT_FOR_ME)
        );
        assert!(open_verified(v, &b).is_ok());
    }
}
