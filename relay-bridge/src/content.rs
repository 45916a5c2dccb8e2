//! Content keys for the shared-cache mode (`cache.shared`, issue #5): SHA-256
//! over a length-prefixed (topic, payload). Only these two cross an MQTT
//! broker, so they are all every bridge sees of a message.

use sha2::{Digest, Sha256};

/// The content key of a message, lowercase hex: SHA-256 over
/// `u64be(len(topic)) || topic || u64be(len(payload)) || payload`, where the
/// payload is the bytes the publisher sent (base64 undone).
pub fn content_key(topic: &str, payload: &[u8]) -> String {
    let mut h = Sha256::new();
    for part in [topic.as_bytes(), payload] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_key_is_length_prefixed_sha256() {
        // Moving a byte between topic and payload changes the key.
        assert_ne!(content_key("ab", b"c"), content_key("a", b"bc"));
        assert_eq!(content_key("t", b"x"), content_key("t", b"x"));
        assert_ne!(content_key("t", b"x"), content_key("u", b"x"));
        // The encoding, pinned: 8-byte lengths, then the bytes.
        let mut enc = 1u64.to_be_bytes().to_vec();
        enc.push(b't');
        enc.extend_from_slice(&1u64.to_be_bytes());
        enc.push(b'x');
        let want: String = Sha256::digest(&enc)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(content_key("t", b"x"), want);
        assert_eq!(content_key("t", b"").len(), 64);
    }
}
