//! RFC 9497 VOPRF, P256-SHA256 (§4.5): the server's batch evaluation with
//! one DLEQ proof, and the client's blinding, proof check and finalization.
//! Elements and proofs use the RFC's serialization (SerializeElement, proof
//! = c ‖ s), so any RFC 9497 library interoperates. Randomness is a
//! parameter so the Appendix A vectors replay through the same code.

use p256::NistP256;
use rand_core::{CryptoRng, RngCore};
use rdv_proto::encoding::base64_decode;
use sha2::{Digest, Sha256};
use voprf::{BlindedElement, EvaluationElement, Group, Proof, VoprfClient, VoprfServer};

use crate::error::{Error, Result};

/// Serialized element length (compressed SEC1 point).
pub const ELEMENT_LEN: usize = 33;
/// Serialized scalar length.
pub const SCALAR_LEN: usize = 32;
/// Serialized proof length (c ‖ s).
pub const PROOF_LEN: usize = 64;
/// Finalized output length (SHA-256).
pub const OUTPUT_LEN: usize = 32;

type Elem = <NistP256 as Group>::Elem;

/// Whether `b` is in SEC1's compressed form (33 bytes, tag 2 or 3), the
/// only one RFC 9497 §4.3's DeserializeElement reads. `p256` also reads
/// the compact form (`0x05 ‖ x`), a second encoding of the same point for
/// half of all x, so every decoder checks this first.
pub(crate) fn is_compressed(b: &[u8]) -> bool {
    b.len() == ELEMENT_LEN && matches!(b[0], 0x02 | 0x03)
}

/// `id` of a key: lowercase hex SHA-256 of the serialized public key (§4.5).
pub fn key_id(public_key: &[u8]) -> String {
    hex::encode(Sha256::digest(public_key))
}

/// A directory's public key, as listed by `GET /v1/keys`.
#[derive(Clone, Debug)]
pub struct PublicKey {
    elem: Elem,
    bytes: Vec<u8>,
}

impl PublicKey {
    /// Decodes a serialized element; the identity and off-curve points are refused.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if !is_compressed(bytes) {
            return Err(Error::Encoding("public key"));
        }
        let elem = NistP256::deserialize_elem(bytes).map_err(|_| Error::Encoding("public key"))?;
        Ok(Self {
            elem,
            bytes: bytes.to_vec(),
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn id(&self) -> String {
        key_id(&self.bytes)
    }
}

/// The server's OPRF private key.
pub struct ServerKey {
    server: VoprfServer<NistP256>,
    secret: p256::NonZeroScalar,
    public_bytes: [u8; ELEMENT_LEN],
    public: PublicKey,
}

impl std::fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerKey({})", self.public.id())
    }
}

impl ServerKey {
    /// From a serialized scalar (32 bytes, big-endian, non-zero, below the order).
    pub fn from_secret(secret: &[u8]) -> Result<Self> {
        if secret.len() != SCALAR_LEN {
            return Err(Error::Encoding("private key"));
        }
        let server = VoprfServer::<NistP256>::new_with_key(secret)
            .map_err(|_| Error::Encoding("private key"))?;
        let secret =
            p256::NonZeroScalar::try_from(secret).map_err(|_| Error::Encoding("private key"))?;
        let bytes = NistP256::serialize_elem(server.get_public_key()).to_vec();
        let public = PublicKey::from_bytes(&bytes)?;
        let mut public_bytes = [0u8; ELEMENT_LEN];
        public_bytes.copy_from_slice(&bytes);
        Ok(Self {
            server,
            secret,
            public_bytes,
            public,
        })
    }

    /// A fresh random key; returns the key and its secret bytes to store.
    pub fn generate(rng: &mut (impl RngCore + CryptoRng)) -> (Self, [u8; SCALAR_LEN]) {
        loop {
            let mut secret = [0u8; SCALAR_LEN];
            rng.fill_bytes(&mut secret);
            // Rejection sampling: all-zero or at/above the order is refused.
            if let Ok(k) = Self::from_secret(&secret) {
                return (k, secret);
            }
        }
    }

    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// BlindEvaluateBatch (RFC 9497 §3.3.2): every element times the key and
    /// one DLEQ proof for the whole batch, at about one scalar
    /// multiplication per element ([`crate::dleq`]). `blinded` are
    /// serialized elements; a malformed or identity element refuses the
    /// whole batch.
    pub fn evaluate_batch(
        &self,
        blinded: &[&[u8]],
        rng: &mut (impl RngCore + CryptoRng),
    ) -> Result<(Vec<Vec<u8>>, Vec<u8>)> {
        crate::dleq::blind_evaluate_batch(&self.secret, &self.public_bytes, blinded, rng)
    }

    /// The same evaluation by stock `voprf` 0.5 (`batch_blind_evaluate`),
    /// which spends a second scalar multiplication per element on the
    /// composite. Kept as the reference the fast path is checked against
    /// byte for byte, and for the benchmark's before/after.
    #[doc(hidden)]
    pub fn evaluate_batch_reference(
        &self,
        blinded: &[&[u8]],
        rng: &mut (impl RngCore + CryptoRng),
    ) -> Result<(Vec<Vec<u8>>, Vec<u8>)> {
        if blinded.is_empty() || blinded.len() > usize::from(u16::MAX) {
            return Err(Error::Batch("1 to 65535 elements".into()));
        }
        let elems = blinded
            .iter()
            .map(|b| decode_blinded(b))
            .collect::<Result<Vec<_>>>()?;
        let res = self
            .server
            .batch_blind_evaluate(rng, &elems)
            .map_err(|_| Error::Batch("evaluation failed".into()))?;
        let evaluated = res
            .messages
            .iter()
            .map(|m| m.serialize().to_vec())
            .collect();
        Ok((evaluated, res.proof.serialize().to_vec()))
    }
}

fn decode_blinded(b: &[u8]) -> Result<BlindedElement<NistP256>> {
    if !is_compressed(b) {
        return Err(Error::Encoding("blinded element"));
    }
    BlindedElement::<NistP256>::deserialize(b).map_err(|_| Error::Encoding("blinded element"))
}

/// The client's state for one input between blinding and finalization.
pub struct Blinded {
    input: Vec<u8>,
    state: VoprfClient<NistP256>,
    /// The serialized blinded element to send.
    pub element: Vec<u8>,
}

impl std::fmt::Debug for Blinded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The input is an address's dtopic: never printed (§4.5).
        f.write_str("Blinded(..)")
    }
}

/// Blind(input) with a fresh random blind.
pub fn blind(input: &[u8], rng: &mut (impl RngCore + CryptoRng)) -> Result<Blinded> {
    let r = VoprfClient::<NistP256>::blind(input, rng).map_err(|_| Error::Encoding("input"))?;
    Ok(Blinded {
        input: input.to_vec(),
        element: r.message.serialize().to_vec(),
        state: r.state,
    })
}

/// Blind(input) with a given blind scalar: only for replaying RFC 9497
/// vectors, never for real lookups (a reused blind links requests).
#[doc(hidden)]
pub fn blind_with_scalar(input: &[u8], blind: &[u8]) -> Result<Blinded> {
    let scalar = NistP256::deserialize_scalar(blind).map_err(|_| Error::Encoding("blind"))?;
    let r = VoprfClient::<NistP256>::deterministic_blind_unchecked(input, scalar)
        .map_err(|_| Error::Encoding("input"))?;
    Ok(Blinded {
        input: input.to_vec(),
        element: r.message.serialize().to_vec(),
        state: r.state,
    })
}

/// What a client does with a directory's `POST /v1/evaluate` answer to
/// `blinded` under the key `key_id`: the same key, every element and the
/// proof decoded, then [`finalize_batch`]. Apart from the request so that
/// a hostile server's answers are testable without one (the
/// `server_answers` fuzz target).
pub fn finalize_answer(
    blinded: &[Blinded],
    key_id: &str,
    key: &PublicKey,
    answer: &crate::wire::EvaluateResponse,
) -> Result<Vec<[u8; OUTPUT_LEN]>> {
    if answer.key_id != key_id {
        return Err(Error::UnknownKey(answer.key_id.clone()));
    }
    let evaluated = answer
        .evaluated
        .iter()
        .map(|e| base64_decode(e).map_err(|_| Error::Encoding("evaluated element")))
        .collect::<Result<Vec<_>>>()?;
    let proof = base64_decode(&answer.proof).map_err(|_| Error::Encoding("proof"))?;
    let refs: Vec<&[u8]> = evaluated.iter().map(Vec::as_slice).collect();
    finalize_batch(blinded, &refs, &proof, key)
}

/// Verifies the batch proof against `key` and finalizes every element
/// (RFC 9497 §3.3.2 Finalize). Refuses a count mismatch, an element that
/// does not decode and a proof that does not verify.
pub fn finalize_batch(
    blinded: &[Blinded],
    evaluated: &[&[u8]],
    proof: &[u8],
    key: &PublicKey,
) -> Result<Vec<[u8; OUTPUT_LEN]>> {
    if blinded.len() != evaluated.len() || blinded.is_empty() {
        return Err(Error::Batch(format!(
            "sent {} elements, got {} back",
            blinded.len(),
            evaluated.len()
        )));
    }
    if proof.len() != PROOF_LEN {
        return Err(Error::Encoding("proof"));
    }
    let proof = Proof::<NistP256>::deserialize(proof).map_err(|_| Error::Encoding("proof"))?;
    let messages = evaluated
        .iter()
        .map(|e| {
            if !is_compressed(e) {
                return Err(Error::Encoding("evaluated element"));
            }
            EvaluationElement::<NistP256>::deserialize(e)
                .map_err(|_| Error::Encoding("evaluated element"))
        })
        .collect::<Result<Vec<_>>>()?;
    let inputs: Vec<&[u8]> = blinded.iter().map(|b| b.input.as_slice()).collect();
    let clients: Vec<VoprfClient<NistP256>> = blinded.iter().map(|b| b.state.clone()).collect();
    let outputs = VoprfClient::batch_finalize(&inputs, &clients, &messages, &proof, key.elem)
        .map_err(|_| Error::BadProof)?;
    outputs
        .map(|o| {
            let o = o.map_err(|_| Error::Encoding("input"))?;
            let mut y = [0u8; OUTPUT_LEN];
            y.copy_from_slice(&o);
            Ok(y)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// SEC1's compact form of a compressed element (`0x05 ‖ x`), when it
    /// names the same point (it does for half of all x).
    fn compact_alias(compressed: &[u8]) -> Option<Vec<u8>> {
        let mut c = compressed.to_vec();
        c[0] = 0x05;
        let alias = p256::PublicKey::from_sec1_bytes(&c).ok()?;
        (alias == p256::PublicKey::from_sec1_bytes(compressed).ok()?).then_some(c)
    }

    /// RFC 9497 §4.3: DeserializeElement is SEC1's compressed form only.
    /// `p256` also reads the compact form; accepted, a server hashed the
    /// request's bytes as SerializeElement(C) into its proof, and a client
    /// took a second encoding of the same key or element (found by the
    /// `server_answers` fuzz target).
    #[test]
    fn only_the_compressed_form_decodes() {
        let key = ServerKey::from_secret(&[0x11; 32]).unwrap();
        let alias = (0u8..64)
            .find_map(|i| compact_alias(&blind_with_scalar(&[i], &[0x21; 32]).unwrap().element))
            .unwrap();
        // Server: both evaluations refuse the compact form.
        let mut rng = rand_core::OsRng;
        assert!(key.evaluate_batch(&[&alias], &mut rng).is_err());
        assert!(key.evaluate_batch_reference(&[&alias], &mut rng).is_err());
        // Client: an honest answer with an element in the compact form.
        let (b, evaluated, proof, alias) = (0u8..64)
            .find_map(|i| {
                let b = blind_with_scalar(&[i], &[0x22; 32]).unwrap();
                let (e, p) = key.evaluate_batch(&[&b.element], &mut rng).unwrap();
                compact_alias(&e[0]).map(|a| (b, e, p, a))
            })
            .unwrap();
        let b = std::slice::from_ref(&b);
        assert!(finalize_batch(b, &[&evaluated[0]], &proof, key.public()).is_ok());
        assert_eq!(
            finalize_batch(b, &[&alias], &proof, key.public()),
            Err(Error::Encoding("evaluated element"))
        );
        // A listed public key in the compact form.
        let pk = (1u8..64)
            .find_map(|i| {
                let k = ServerKey::from_secret(&[i; 32]).ok()?;
                compact_alias(k.public().as_bytes())
            })
            .unwrap();
        assert!(PublicKey::from_bytes(&pk).is_err());
    }
}
