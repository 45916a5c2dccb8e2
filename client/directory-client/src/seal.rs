//! Values derived from an OPRF output `y` (§4.5, issue #3), and the sealed
//! card: AES-256-GCM under `seal_key`, `lookup_id` as associated data, so a
//! scraped store is ciphertext readable only by whoever knows the address.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use hkdf::Hkdf;
use rand_core::{CryptoRng, RngCore};
use rdv_proto::consts::{
    CARD_MAX_BYTES, DIR_LOOKUP_PREFIX, DIR_SEAL_INFO, DIR_SEAL_PAD, GCM_TAG_LEN,
};
use rdv_proto::encoding::{base64, base64_decode};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// AES-GCM nonce length.
pub const NONCE_LEN: usize = 12;
/// Largest sealed plaintext: a 16 KiB card padded up to the next block.
pub const SEALED_MAX_PLAINTEXT: usize = CARD_MAX_BYTES.div_ceil(DIR_SEAL_PAD) * DIR_SEAL_PAD;
/// Largest raw sealed value: nonce ‖ ciphertext ‖ tag.
pub const SEALED_MAX_RAW: usize = NONCE_LEN + SEALED_MAX_PLAINTEXT + GCM_TAG_LEN;
/// Its base64 length: what a server bounds before decoding.
pub const SEALED_MAX_B64: usize = SEALED_MAX_RAW.div_ceil(3) * 4;
/// Smallest raw sealed value (one padding block).
pub const SEALED_MIN_RAW: usize = NONCE_LEN + DIR_SEAL_PAD + GCM_TAG_LEN;

/// `lookup_id = SHA-256("rdv1/dir/lookup:" ‖ y)`, as bytes.
pub fn lookup_id(y: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DIR_LOOKUP_PREFIX);
    h.update(y);
    h.finalize().into()
}

/// `lookup_id` as it travels: lowercase hex.
pub fn lookup_id_hex(y: &[u8]) -> String {
    hex::encode(lookup_id(y))
}

/// `seal_key = HKDF-SHA256(ikm = y, no salt, info = "rdv1/dir/seal")`, 32 bytes.
pub fn seal_key(y: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 32];
    // 32 bytes is always a valid HKDF-SHA256 output length.
    Hkdf::<Sha256>::new(None, y)
        .expand(DIR_SEAL_INFO, &mut k)
        .unwrap_or_default();
    k
}

/// Seals a signed card under `y`: base64(nonce ‖ AES-256-GCM(canon(card)
/// padded with spaces to a multiple of DIR_SEAL_PAD)).
pub fn seal(card: &Value, y: &[u8], rng: &mut (impl RngCore + CryptoRng)) -> Result<String> {
    let mut pt = rdv_proto::canon::to_vec(card)?;
    if pt.len() > CARD_MAX_BYTES {
        return Err(Error::Proto(rdv_proto::Error::TooLarge {
            what: "card",
            len: pt.len(),
            limit: CARD_MAX_BYTES,
        }));
    }
    let padded = pt.len().div_ceil(DIR_SEAL_PAD).max(1) * DIR_SEAL_PAD;
    pt.resize(padded, b' ');
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill_bytes(&mut nonce);
    seal_raw(&pt, y, &nonce)
}

/// Seals with a given nonce (vectors only; a reused nonce is fatal to GCM).
#[doc(hidden)]
pub fn seal_raw(padded: &[u8], y: &[u8], nonce: &[u8; NONCE_LEN]) -> Result<String> {
    let cipher = Aes256Gcm::new(&seal_key(y).into());
    let aad = lookup_id(y);
    let ct = cipher
        .encrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: padded,
                aad: &aad,
            },
        )
        .map_err(|_| Error::Unseal)?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&ct);
    Ok(base64(&out))
}

/// Opens a sealed card with `y` and parses it strictly (§4.6); the caller
/// then verifies it as a card.
pub fn open(sealed: &str, y: &[u8]) -> Result<Value> {
    if sealed.len() > SEALED_MAX_B64 {
        return Err(Error::Unseal);
    }
    let raw = base64_decode(sealed).map_err(|_| Error::Unseal)?;
    if raw.len() < NONCE_LEN + GCM_TAG_LEN {
        return Err(Error::Unseal);
    }
    let (nonce, ct) = raw.split_at(NONCE_LEN);
    let cipher = Aes256Gcm::new(&seal_key(y).into());
    let aad = lookup_id(y);
    let pt = cipher
        .decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad: &aad })
        .map_err(|_| Error::Unseal)?;
    // Trailing spaces are JSON white space: the strict parser skips them.
    Ok(rdv_proto::canon::parse(&pt, SEALED_MAX_PLAINTEXT)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn seal_open_round_trip_and_padding() {
        let y = [7u8; 32];
        let card = json!({"a": "b"});
        let s = seal(&card, &y, &mut rand_core::OsRng).unwrap();
        let raw = base64_decode(&s).unwrap();
        assert_eq!(raw.len(), SEALED_MIN_RAW, "padded to one block");
        assert_eq!(open(&s, &y).unwrap(), card);
        assert_eq!(open(&s, &[8u8; 32]), Err(Error::Unseal), "wrong y");
    }

    #[test]
    fn lookup_id_is_associated_data() {
        // A ciphertext moved under another y's lookup_id with the same key
        // cannot happen (both derive from y), so check the AAD directly:
        // sealing with AAD of y and opening with a different AAD fails.
        let y = [1u8; 32];
        let pt = vec![b' '; DIR_SEAL_PAD];
        let s = seal_raw(&pt, &y, &[0; NONCE_LEN]).unwrap();
        let raw = base64_decode(&s).unwrap();
        let cipher = Aes256Gcm::new(&seal_key(&y).into());
        let wrong_aad = lookup_id(&[2u8; 32]);
        let r = cipher.decrypt(
            Nonce::from_slice(&raw[..NONCE_LEN]),
            Payload {
                msg: &raw[NONCE_LEN..],
                aad: &wrong_aad,
            },
        );
        assert!(r.is_err());
    }

    #[test]
    fn tampered_and_oversize_refused() {
        let y = [7u8; 32];
        let s = seal(&json!({"a": 1}), &y, &mut rand_core::OsRng).unwrap();
        let mut raw = base64_decode(&s).unwrap();
        raw[20] ^= 1;
        assert_eq!(open(&base64(&raw), &y), Err(Error::Unseal));
        assert_eq!(open("AAAA", &y), Err(Error::Unseal));
        assert_eq!(
            open(&"A".repeat(SEALED_MAX_B64 + 4), &y),
            Err(Error::Unseal)
        );
    }
}
