//! Keys and IDs (§4.1, §4.2, §6.2): an agent is an Ed25519 key; its ID, its
//! X25519 encryption key and its Nostr carrier key are all derived from it.

use std::fmt;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use hkdf::Hkdf;
use sha2::{Digest, Sha256, Sha512};
use zeroize::Zeroizing;

use crate::consts::{AGENT_ID_B32_LEN, AGENT_ID_PREFIX, NOSTR_CARRIER_INFO, SIG_PREFIX};
use crate::encoding::{base32, base32_decode};
use crate::error::{Error, Result};

/// An agent's identity key. Holds the 32-byte seed, wiped on drop.
pub struct AgentKey {
    seed: Zeroizing<[u8; 32]>,
    signing: SigningKey,
    id: AgentId,
}

impl fmt::Debug for AgentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl AgentKey {
    /// §4.1: the key from its 32-byte Ed25519 seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let signing = SigningKey::from_bytes(&seed);
        let id = AgentId::from_key(&signing.verifying_key());
        Self {
            seed: Zeroizing::new(seed),
            signing,
            id,
        }
    }

    /// A fresh key from the caller's randomness (the core has none of its own).
    pub fn generate(rng: &mut (impl rand_core::CryptoRngCore + ?Sized)) -> Self {
        let mut seed = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(seed.as_mut());
        Self::from_seed(*seed)
    }

    /// The seed, for the agent's encrypted key store.
    pub fn seed(&self) -> &[u8; 32] {
        &self.seed
    }

    pub fn id(&self) -> &AgentId {
        &self.id
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    /// §4.6: signs `rdv1/sig:` ‖ `msg`. Callers pass canonical bytes.
    pub fn sign_prefixed(&self, msg: &[u8]) -> [u8; 64] {
        let mut m = Vec::with_capacity(SIG_PREFIX.len() + msg.len());
        m.extend_from_slice(SIG_PREFIX);
        m.extend_from_slice(msg);
        self.signing.sign(&m).to_bytes()
    }

    /// §6.4 (pinned): the X25519 secret is the clamped first half of
    /// SHA-512(seed), as libsodium's `crypto_sign_ed25519_sk_to_curve25519`.
    pub fn x25519_secret(&self) -> x25519_dalek::StaticSecret {
        let mut h = Sha512::digest(self.seed.as_ref());
        let mut s = Zeroizing::new([0u8; 32]);
        s.copy_from_slice(&h[..32]);
        zeroize::Zeroize::zeroize(h.as_mut_slice());
        s[0] &= 248;
        s[31] &= 127;
        s[31] |= 64;
        x25519_dalek::StaticSecret::from(*s)
    }

    /// §6.2: the secp256k1 carrier key, HKDF-SHA256(seed, no salt,
    /// "rdv1/nostr-carrier"). It signs Nostr events only; it is never an identity.
    pub fn nostr_keys(&self) -> Result<nostr::key::Keys> {
        let hk = Hkdf::<Sha256>::new(None, self.seed.as_ref());
        let mut okm = Zeroizing::new([0u8; 32]);
        hk.expand(NOSTR_CARRIER_INFO, okm.as_mut())
            .map_err(|e| Error::Key(e.to_string()))?;
        let sk = nostr::key::SecretKey::from_slice(okm.as_ref())
            .map_err(|_| Error::Key("carrier scalar out of range".into()))?;
        Ok(nostr::key::Keys::new(sk))
    }
}

/// §4.2: `rdv1:` + lowercase unpadded base32 of the Ed25519 public key.
/// Holds the decompressed key too, so each verification does not decompress
/// it again; equality and order are the text's.
#[derive(Clone)]
pub struct AgentId {
    text: String,
    key: [u8; 32],
    point: std::sync::Arc<VerifyingKey>,
}

impl PartialEq for AgentId {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for AgentId {}

impl std::hash::Hash for AgentId {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.key.hash(h);
    }
}

impl PartialOrd for AgentId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for AgentId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

impl fmt::Debug for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl AgentId {
    pub fn from_key(key: &VerifyingKey) -> Self {
        let bytes = key.to_bytes();
        Self {
            text: format!("{AGENT_ID_PREFIX}{}", base32(&bytes)),
            key: bytes,
            point: std::sync::Arc::new(*key),
        }
    }

    /// Parses the canonical form only: the prefix, 52 lowercase base32
    /// characters, zero trailing bits, and a key that is a valid curve point.
    pub fn parse(s: &str) -> Result<Self> {
        let b32 = s
            .strip_prefix(AGENT_ID_PREFIX)
            .ok_or_else(|| Error::AgentId("must start with rdv1:".into()))?;
        if b32.len() != AGENT_ID_B32_LEN {
            return Err(Error::AgentId(format!(
                "must have {AGENT_ID_B32_LEN} base32 characters"
            )));
        }
        let bytes =
            base32_decode(b32).map_err(|_| Error::AgentId("not lowercase base32".into()))?;
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| Error::AgentId("not a 32-byte key".into()))?;
        let point = VerifyingKey::from_bytes(&key)
            .map_err(|_| Error::AgentId("not an Ed25519 public key".into()))?;
        Ok(Self::from_key(&point))
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn key_bytes(&self) -> &[u8; 32] {
        &self.key
    }

    /// The Ed25519 key. Always valid: checked at parse.
    pub fn verifying_key(&self) -> Result<VerifyingKey> {
        Ok(*self.point)
    }

    /// §4.2: the short human form, `rdv1:` + first 4 … last 4 base32 characters.
    pub fn fingerprint(&self) -> String {
        let b = &self.text[AGENT_ID_PREFIX.len()..];
        format!("{AGENT_ID_PREFIX}{}…{}", &b[..4], &b[b.len() - 4..])
    }

    /// §6.4 (pinned): the Montgomery form of the Ed25519 key, libsodium's
    /// `crypto_sign_ed25519_pk_to_curve25519`.
    pub fn x25519_public(&self) -> Result<x25519_dalek::PublicKey> {
        Ok(x25519_dalek::PublicKey::from(
            self.verifying_key()?.to_montgomery().to_bytes(),
        ))
    }

    /// Verifies an Ed25519 signature over `rdv1/sig:` ‖ `msg` (§4.6), strictly:
    /// small-order keys and non-canonical signatures are refused.
    pub fn verify_prefixed(&self, msg: &[u8], sig: &[u8; 64]) -> Result<()> {
        let mut m = Vec::with_capacity(SIG_PREFIX.len() + msg.len());
        m.extend_from_slice(SIG_PREFIX);
        m.extend_from_slice(msg);
        self.verify_signing_input(&m, sig)
    }

    /// Verifies over bytes that already start with `rdv1/sig:` (callers that
    /// assemble the signing input themselves, saving a copy).
    pub fn verify_signing_input(&self, input: &[u8], sig: &[u8; 64]) -> Result<()> {
        if !input.starts_with(SIG_PREFIX) {
            return Err(Error::BadSignature);
        }
        self.point
            .verify_strict(input, &ed25519_dalek::Signature::from_bytes(sig))
            .map_err(|_| Error::BadSignature)
    }
}

impl serde::Serialize for AgentId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for AgentId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AgentId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 8032 §7.1, test 1.
    const SEED1: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const PUB1: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

    fn key1() -> AgentKey {
        let mut s = [0u8; 32];
        hex::decode_to_slice(SEED1, &mut s).unwrap();
        AgentKey::from_seed(s)
    }

    #[test]
    fn id_is_57_chars_and_round_trips() {
        let k = key1();
        assert_eq!(hex::encode(k.verifying_key().to_bytes()), PUB1);
        let id = k.id().as_str();
        assert_eq!(id.len(), 57);
        assert_eq!(AgentId::parse(id).unwrap(), *k.id());
        assert!(k.id().fingerprint().starts_with("rdv1:") && k.id().fingerprint().contains('…'));
    }

    #[test]
    fn id_parse_is_strict() {
        let id = key1().id().as_str().to_string();
        assert!(AgentId::parse(&id.to_uppercase()).is_err());
        assert!(AgentId::parse(&id.replace("rdv1:", "rdv2:")).is_err());
        assert!(AgentId::parse(&id[..56]).is_err());
        assert!(AgentId::parse(&format!("{id}a")).is_err());
        // Last character carries 4 trailing bits that must be zero.
        let mut bad = id.clone().into_bytes();
        let last = bad.len() - 1;
        bad[last] = if bad[last] == b'b' { b'c' } else { b'b' };
        assert!(AgentId::parse(std::str::from_utf8(&bad).unwrap()).is_err());
    }

    #[test]
    fn id_serde_is_as_strict_as_parse() {
        let id = key1().id().clone();
        let text = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<AgentId>(&text).unwrap(), id);
        let e = serde_json::from_str::<AgentId>(&text.to_uppercase()).unwrap_err();
        assert!(e.to_string().contains("invalid agent id"), "{e}");
    }

    #[test]
    fn x25519_forms_agree() {
        // The secret derived from the seed and the public key derived from the
        // Ed25519 key must be one key pair.
        let k = key1();
        let pub_from_secret = x25519_dalek::PublicKey::from(&k.x25519_secret());
        assert_eq!(pub_from_secret, k.id().x25519_public().unwrap());
    }

    #[test]
    fn signatures_are_domain_separated() {
        let k = key1();
        let sig = k.sign_prefixed(b"hello");
        k.id().verify_prefixed(b"hello", &sig).unwrap();
        assert_eq!(
            k.id().verify_prefixed(b"hellp", &sig),
            Err(Error::BadSignature)
        );
        // A plain Ed25519 signature over the same bytes is not a Rendezvous signature.
        let plain = k.signing.sign(b"hello").to_bytes();
        assert_eq!(
            k.id().verify_prefixed(b"hello", &plain),
            Err(Error::BadSignature)
        );
    }

    #[test]
    fn nostr_carrier_key_is_stable() {
        let a = key1().nostr_keys().unwrap();
        let b = key1().nostr_keys().unwrap();
        assert_eq!(a.public_key(), b.public_key());
        assert_ne!(a.secret_key().as_secret_bytes(), key1().seed());
    }
}
