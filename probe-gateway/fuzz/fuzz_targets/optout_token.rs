//! Opt-out tokens (§5.2.2 "permanent opt-out honored";
//! `address_key::AddressKey`): the decoder over arbitrary text must never
//! panic, accepts only tokens of the issuing key in their one spelling
//! (case aside), and every token it issues for a parseable address is
//! accepted back, by that key only. Run with scripts/fuzz (seeds included):
//!   scripts/fuzz 120 optout_token
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdv_probe_gateway::address_key::{AddressKey, OPTOUT_TOKEN_LEN};
use rdv_proto::Address;

fn keys() -> Option<(AddressKey, AddressKey)> {
    Some((
        AddressKey::new(&[0x42; 32]).ok()?,
        AddressKey::new(&[0x43; 32]).ok()?,
    ))
}

fuzz_target!(|raw: &[u8]| {
    let Some((k, other)) = keys() else {
        panic!("test keys refused");
    };
    let text = String::from_utf8_lossy(raw);

    // The input as a token (also the `optout+TOKEN@` local part and the
    // `/v1/optout/{token}` path segment).
    if let Some(id) = k.optout_of_token(&text) {
        assert_eq!(
            text.len(),
            OPTOUT_TOKEN_LEN,
            "accepted a token of another length"
        );
        // One spelling: the input is the issued encoding, case aside.
        let decoded = data_encoding::BASE32_NOPAD
            .decode(text.to_ascii_uppercase().as_bytes())
            .unwrap_or_else(|e| panic!("accepted a token that is not base32: {e}"));
        let canonical = data_encoding::BASE32_NOPAD
            .encode(&decoded)
            .to_ascii_lowercase();
        assert_eq!(
            canonical,
            text.to_ascii_lowercase(),
            "a second spelling accepted"
        );
        assert_eq!(k.optout_of_token(&text.to_ascii_lowercase()), Some(id));
        assert_eq!(k.optout_of_token(&text.to_ascii_uppercase()), Some(id));
        assert_eq!(
            other.optout_of_token(&text),
            None,
            "another key accepted it"
        );
    }

    // The input as an address: its token round-trips, by this key only.
    if let Ok(addr) = Address::parse(&text) {
        let tok = k.optout_token(&addr);
        assert_eq!(tok.len(), OPTOUT_TOKEN_LEN);
        assert!(
            tok.bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b)),
            "{tok}"
        );
        let id = k.optout_id(&addr);
        assert_eq!(k.optout_of_token(&tok), Some(id));
        assert_eq!(other.optout_of_token(&tok), None);
        // Another address's id under this token's check is refused.
        let mut spliced = tok.clone().into_bytes();
        let i = usize::from(raw.first().copied().unwrap_or(0)) % 25;
        spliced[i] = if spliced[i] == b'a' { b'b' } else { b'a' };
        if let Ok(s) = String::from_utf8(spliced) {
            assert_eq!(k.optout_of_token(&s), None, "a changed id accepted: {s}");
        }
        // The token names the address, not a spelling of it.
        if let Ok(canon) = Address::parse(addr.canon()) {
            assert_eq!(k.optout_token(&canon), tok);
        }
    }
});
