//! The never-rotated address key (§5.2.2 "permanent opt-out honored"):
//! the stored form of third parties' addresses and the opt-out tokens.
//!
//! The cookie master secret rotates; an opt-out keyed by it would be
//! forgotten one probe lifetime after a rotation. So addresses are keyed
//! by a separate secret (`address_key_file`) that is never rotated:
//! rotating it would forget every opt-out and per-address limit.
//!
//! Opt-out token (RFC 8058 link, `optout+TOKEN@` mailto): lowercase
//! unpadded base32 of `H ‖ T`, `H = HMAC(k_optout, canon(addr))[..16]`,
//! `T = HMAC(k_tag, H)[..5]`: 34 characters, no address in it, and `T`
//! lets the gateway refuse tokens it did not issue. The store keeps `H`.

use hmac::{Hmac, Mac};
use rdv_proto::Address;
use rdv_proto::consts::{GW_ADDRESS_HASH_INFO, GW_OPTOUT_TAG_INFO, GW_OPTOUT_TOKEN_INFO};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::error::Error;

/// `H`: the opt-out id of an address, bytes.
pub const OPTOUT_ID_LEN: usize = 16;
/// `T`: the check that the gateway issued a token, bytes.
pub const OPTOUT_TAG_LEN: usize = 5;
/// An opt-out token's length: base32 of 21 bytes, unpadded.
pub const OPTOUT_TOKEN_LEN: usize = (8 * (OPTOUT_ID_LEN + OPTOUT_TAG_LEN)).div_ceil(5);

/// The address key: 32 bytes or more from a file, never rotated, never
/// logged. Holds only the keys derived from it.
#[derive(Clone)]
pub struct AddressKey {
    hash: [u8; 32],
    optout: [u8; 32],
    tag: [u8; 32],
}

impl std::fmt::Debug for AddressKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AddressKey(..)")
    }
}

/// The opt-out id `H` of an address (what the store keeps, as hex).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptOutId(pub [u8; OPTOUT_ID_LEN]);

impl OptOutId {
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl AddressKey {
    pub fn new(secret: &[u8]) -> Result<Self, Error> {
        if secret.len() < 32 {
            return Err(Error::Config(
                "address key must be at least 32 bytes".into(),
            ));
        }
        let hk = hkdf::Hkdf::<Sha256>::new(None, secret);
        let derive = |info: &[u8]| {
            let mut k = [0u8; 32];
            // 32 bytes is far below HKDF-SHA256's 8160-byte limit.
            hk.expand(info, &mut k).map(|()| k)
        };
        match (
            derive(GW_ADDRESS_HASH_INFO),
            derive(GW_OPTOUT_TOKEN_INFO),
            derive(GW_OPTOUT_TAG_INFO),
        ) {
            (Ok(hash), Ok(optout), Ok(tag)) => Ok(Self { hash, optout, tag }),
            _ => Err(Error::Config("address key derivation failed".into())),
        }
    }

    /// A key file holds 64 or more hex digits (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<Self, Error> {
        let bytes = hex::decode(text.trim())
            .map_err(|_| Error::Config("address key file is not hex".into()))?;
        Self::new(&bytes)
    }

    /// The stored form of a recipient for per-address limits (§5.2.1,
    /// §5.2.2): hex HMAC-SHA256 of canon(addr), never the address.
    pub fn address_hash(&self, addr: &Address) -> String {
        hex::encode(hmac_sha256(&self.hash, addr.canon().as_bytes()))
    }

    /// `H` of an address: what an opt-out records and a send looks up.
    pub fn optout_id(&self, addr: &Address) -> OptOutId {
        let mut h = [0u8; OPTOUT_ID_LEN];
        h.copy_from_slice(&hmac_sha256(&self.optout, addr.canon().as_bytes())[..OPTOUT_ID_LEN]);
        OptOutId(h)
    }

    fn check(&self, id: &OptOutId) -> [u8; OPTOUT_TAG_LEN] {
        let mut t = [0u8; OPTOUT_TAG_LEN];
        t.copy_from_slice(&hmac_sha256(&self.tag, &id.0)[..OPTOUT_TAG_LEN]);
        t
    }

    /// The stateless opt-out token of an address: base32(H ‖ T), lowercase.
    pub fn optout_token(&self, addr: &Address) -> String {
        let id = self.optout_id(addr);
        let mut raw = id.0.to_vec();
        raw.extend_from_slice(&self.check(&id));
        data_encoding::BASE32_NOPAD
            .encode(&raw)
            .to_ascii_lowercase()
    }

    /// The opt-out id a token carries, when the gateway issued it (the
    /// check compared in constant time). Case-insensitive; anything but
    /// exactly [`OPTOUT_TOKEN_LEN`] base32 characters is refused unread.
    pub fn optout_of_token(&self, token: &str) -> Option<OptOutId> {
        if token.len() != OPTOUT_TOKEN_LEN {
            return None;
        }
        let raw = data_encoding::BASE32_NOPAD
            .decode(token.to_ascii_uppercase().as_bytes())
            .ok()?;
        if raw.len() != OPTOUT_ID_LEN + OPTOUT_TAG_LEN {
            return None;
        }
        let (h, t) = raw.split_at(OPTOUT_ID_LEN);
        let id = OptOutId(h.try_into().ok()?);
        bool::from(self.check(&id)[..].ct_eq(t)).then_some(id)
    }
}

fn hmac_sha256(key: &[u8; 32], data: &[u8]) -> [u8; 32] {
    let Ok(mut m) = <Hmac<Sha256> as Mac>::new_from_slice(key) else {
        return [0u8; 32];
    };
    m.update(data);
    m.finalize().into_bytes().into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(b: u8) -> AddressKey {
        AddressKey::new(&[b; 32]).unwrap()
    }

    #[test]
    fn tokens_are_short_address_free_and_checked() {
        let k = key(1);
        let a = Address::parse("Dana@Doe.example").unwrap();
        let tok = k.optout_token(&a);
        assert_eq!(tok.len(), OPTOUT_TOKEN_LEN);
        assert!(tok.len() <= 40);
        assert!(
            tok.bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
        );
        // Canonical: another spelling of the address, the same token.
        assert_eq!(
            tok,
            k.optout_token(&Address::parse("dana@doe.example").unwrap())
        );
        assert_eq!(k.optout_of_token(&tok), Some(k.optout_id(&a)));
        assert_eq!(
            k.optout_of_token(&tok.to_ascii_uppercase()),
            Some(k.optout_id(&a))
        );
        // H of another address with this T, a changed T, another key,
        // wrong lengths: refused.
        let other = k.optout_token(&Address::parse("eve@doe.example").unwrap());
        let spliced = format!("{}{}", &other[..26], &tok[26..]);
        assert_ne!(spliced, other);
        assert_eq!(k.optout_of_token(&spliced), None);
        let mut bad = tok.clone().into_bytes();
        bad[33] = if bad[33] == b'a' { b'b' } else { b'a' };
        assert_eq!(k.optout_of_token(&String::from_utf8(bad).unwrap()), None);
        assert_eq!(key(2).optout_of_token(&tok), None);
        assert_eq!(k.optout_of_token(""), None);
        assert_eq!(k.optout_of_token(&tok[..33]), None);
        assert_eq!(k.optout_of_token(&format!("{tok}a")), None);
        assert_eq!(k.optout_of_token(&"1".repeat(OPTOUT_TOKEN_LEN)), None);
    }

    #[test]
    fn address_hashes_are_keyed_and_canonical() {
        let a = Address::parse("Dana@Doe.example").unwrap();
        let h = key(1).address_hash(&a);
        assert_eq!(h.len(), 64);
        assert_eq!(
            h,
            key(1).address_hash(&Address::parse("dana@doe.example").unwrap())
        );
        assert_ne!(h, key(2).address_hash(&a));
        assert!(!h.contains("dana"));
        // The three derived keys differ (domain separation).
        assert_ne!(h[..32], key(1).optout_id(&a).hex());
    }

    #[test]
    fn keys_are_bounded_and_hidden() {
        assert!(AddressKey::new(&[0; 31]).is_err());
        assert!(AddressKey::from_hex("zz").is_err());
        let k = AddressKey::from_hex(&"ab".repeat(32)).unwrap();
        assert_eq!(format!("{k:?}"), "AddressKey(..)");
    }
}
