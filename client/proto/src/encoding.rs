//! The two binary-to-text encodings of §4.6: lowercase unpadded base32 (IDs,
//! topics) and standard padded base64 (signatures, envelope content). Both
//! decoders refuse non-canonical input, so one value has one spelling.

use std::sync::LazyLock;

use base64::Engine as _;
use data_encoding::Encoding;

use crate::error::{Error, Result};

static BASE32: LazyLock<Encoding> = LazyLock::new(|| {
    let mut spec = data_encoding::Specification::new();
    spec.symbols.push_str("abcdefghijklmnopqrstuvwxyz234567");
    spec.check_trailing_bits = true;
    #[allow(clippy::expect_used)]
    spec.encoding()
        .expect("static base32 specification is valid")
});

/// §4.6: RFC 4648 base32, lowercase, no padding.
pub fn base32(bytes: &[u8]) -> String {
    BASE32.encode(bytes)
}

/// Decodes canonical lowercase unpadded base32 (trailing bits must be zero).
pub fn base32_decode(s: &str) -> Result<Vec<u8>> {
    BASE32
        .decode(s.as_bytes())
        .map_err(|e| Error::shape("base32", e.to_string()))
}

/// §4.6: RFC 4648 §4 base64, standard alphabet, padded.
pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes canonical padded base64 (no whitespace, zero trailing bits).
pub fn base64_decode(s: &str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(s.as_bytes())
        .map_err(|e| Error::shape("base64", e.to_string()))
}

/// Decodes base64 that must hold exactly `N` bytes.
pub fn base64_array<const N: usize>(field: &str, s: &str) -> Result<[u8; N]> {
    let v = base64_decode(s).map_err(|_| Error::shape(field, "not canonical base64"))?;
    v.try_into()
        .map_err(|_| Error::shape(field, format!("must be {N} bytes")))
}

/// Decodes lowercase hex that must hold exactly `N` bytes.
pub fn hex_array<const N: usize>(field: &str, s: &str) -> Result<[u8; N]> {
    if s.len() != 2 * N || s.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(Error::shape(
            field,
            format!("must be {} lowercase hex digits", 2 * N),
        ));
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).map_err(|_| Error::shape(field, "not hex"))?;
    Ok(out)
}

/// True for a §4.6 hash value: 64 lowercase hex digits.
pub fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_rfc4648_vectors_lowercase() {
        assert_eq!(base32(b"foobar"), "mzxw6ytboi");
        assert_eq!(base32(b"f"), "my");
        assert_eq!(base32_decode("mzxw6ytboi").unwrap(), b"foobar");
        assert!(base32_decode("MZXW6YTBOI").is_err(), "uppercase refused");
        assert!(base32_decode("mz======").is_err(), "padding refused");
        assert!(
            base32_decode("mz").is_err(),
            "non-zero trailing bits refused"
        );
    }

    #[test]
    fn base64_is_strict() {
        assert_eq!(base64(b"fo"), "Zm8=");
        assert!(base64_decode("Zm8").is_err());
        assert!(
            base64_decode("Zm9=").is_err(),
            "non-zero trailing bits refused"
        );
        assert!(base64_decode("Zm8=\n").is_err());
        assert!(base64_decode("Zm-_").is_err(), "url alphabet refused");
    }

    #[test]
    fn hex_is_lowercase_only() {
        assert!(hex_array::<2>("x", "abcd").is_ok());
        assert!(hex_array::<2>("x", "ABCD").is_err());
        assert!(hex_array::<2>("x", "abc").is_err());
        assert!(is_hash(&"a".repeat(64)) && !is_hash(&"A".repeat(64)) && !is_hash("ab"));
    }
}
