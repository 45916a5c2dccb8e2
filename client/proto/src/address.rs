//! Contact points and discovery topics (§4.4, §4.6).

use sha2::{Digest, Sha256};

use crate::consts::{ADDRESS_MAX_LEN, DTOPIC_PREFIX, IDTOPIC_PREFIX, TOPIC_LEN};
use crate::encoding::base32;
use crate::error::{Error, Result};
use crate::keys::AgentId;

/// The kind of a contact point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AddressKind {
    Email,
    Phone,
}

/// A contact point in its canonical form, `canon(address)` of §4.6.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub kind: AddressKind,
    canon: String,
}

/// §4.6 (pinned): phone separators removed by canon.
const PHONE_SEPARATORS: &[char] = &['-', '.', '(', ')', '/'];
/// E.164 numbers have at most 15 digits.
const PHONE_MAX_DIGITS: usize = 15;

impl Address {
    /// Parses and canonicalizes: `+`-led is a phone, one with `@` an email,
    /// anything else is refused (a malformed address is never a topic).
    pub fn parse(raw: &str) -> Result<Self> {
        if raw.len() > ADDRESS_MAX_LEN {
            return Err(Error::Address("too long".into()));
        }
        let s = raw.trim();
        if let Some(rest) = s.strip_prefix('+') {
            let mut digits = String::from("+");
            for c in rest.chars() {
                if c.is_ascii_digit() {
                    digits.push(c);
                } else if !(c.is_whitespace() || PHONE_SEPARATORS.contains(&c)) {
                    return Err(Error::Address(format!(
                        "phone has an invalid character {c:?}"
                    )));
                }
            }
            let n = digits.len() - 1;
            if n == 0 || n > PHONE_MAX_DIGITS {
                return Err(Error::Address("a phone has 1 to 15 digits".into()));
            }
            return Ok(Self {
                kind: AddressKind::Phone,
                canon: digits,
            });
        }
        if s.contains('@') {
            let (local, domain) = s.split_once('@').unwrap_or_default();
            if local.is_empty() || domain.is_empty() || domain.contains('@') {
                return Err(Error::Address(
                    "an email has exactly one @ with text on both sides".into(),
                ));
            }
            if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Error::Address(
                    "an email has no white space or control characters".into(),
                ));
            }
            return Ok(Self {
                kind: AddressKind::Email,
                canon: s.to_lowercase(),
            });
        }
        Err(Error::Address(
            "neither an email nor a +-led phone number".into(),
        ))
    }

    /// An email address and nothing else (§4.6): what the mail side reads
    /// (the probe and the invite, §5.2; a gateway mailbox). A phone number
    /// is refused like a malformed value, each with its reason.
    pub fn parse_email(raw: &str) -> Result<Self> {
        let a = Self::parse(raw)?;
        if a.kind != AddressKind::Email {
            return Err(Error::Address("a phone number, not an email".into()));
        }
        Ok(a)
    }

    /// `canon(address)`: the bare value, no type prefix.
    pub fn canon(&self) -> &str {
        &self.canon
    }

    /// §4.4: `dtopic(address)`.
    pub fn dtopic(&self) -> String {
        topic(DTOPIC_PREFIX, self.canon.as_bytes())
    }
}

/// §4.4 (issue #62): `idtopic(id)`, over the canonical ID string.
pub fn idtopic(id: &AgentId) -> String {
    topic(IDTOPIC_PREFIX, id.as_str().as_bytes())
}

fn topic(prefix: &[u8], value: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prefix);
    h.update(value);
    let mut t = base32(&h.finalize());
    t.truncate(TOPIC_LEN);
    t
}

/// True for something shaped like a topic: 26 lowercase base32 characters.
pub fn is_topic(s: &str) -> bool {
    s.len() == TOPIC_LEN && s.bytes().all(|b| matches!(b, b'a'..=b'z' | b'2'..=b'7'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_is_trimmed_and_lowercased() {
        let a = Address::parse("  John@Doe.COM\n").unwrap();
        assert_eq!((a.kind, a.canon()), (AddressKind::Email, "john@doe.com"));
        assert_eq!(a.dtopic(), Address::parse("john@doe.com").unwrap().dtopic());
        assert_eq!(a.dtopic().len(), 26);
        assert!(is_topic(&a.dtopic()));
    }

    #[test]
    fn dtopic_matches_its_definition() {
        // base32(SHA-256("rdv1/disc:" ‖ "john@doe.com"))[0:26], computed independently.
        let h = Sha256::digest(b"rdv1/disc:john@doe.com");
        let want: String = data_encoding::BASE32_NOPAD.encode(&h).to_lowercase()[..26].to_string();
        assert_eq!(Address::parse("john@doe.com").unwrap().dtopic(), want);
    }

    #[test]
    fn phone_separators_removed() {
        let a = Address::parse("+972-54-000-0000").unwrap();
        assert_eq!((a.kind, a.canon()), (AddressKind::Phone, "+972540000000"));
        assert_eq!(
            Address::parse(" +1 (555) 010.99/99 ").unwrap().canon(),
            "+15550109999"
        );
    }

    #[test]
    fn malformed_addresses_refused() {
        for bad in [
            "",
            "john",
            "john@",
            "@doe.com",
            "a@b@c",
            "jo hn@doe.com",
            "972540000000",
            "+972-54-abc",
            "+",
            "+1234567890123456",
            "+1_555",
            "a\u{7}@b.c",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn parse_email_takes_emails_only() {
        let a = Address::parse_email(" John@Doe.COM ").unwrap();
        assert_eq!((a.kind, a.canon()), (AddressKind::Email, "john@doe.com"));
        assert_eq!(Some(a), Address::parse("john@doe.com").ok());
        // A valid phone is an address, but not an email.
        assert!(Address::parse("+972-54-000-0000").is_ok());
        assert!(matches!(
            Address::parse_email("+972-54-000-0000"),
            Err(Error::Address(why)) if why == "a phone number, not an email"
        ));
        for bad in ["", "john", "john@", "@doe.com", "a@b@c", "jo hn@doe.com"] {
            assert!(
                matches!(Address::parse_email(bad), Err(Error::Address(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn idtopic_differs_from_dtopic_of_same_string() {
        let id = crate::keys::AgentKey::from_seed([7; 32]).id().clone();
        let t = idtopic(&id);
        assert!(is_topic(&t));
        let h = Sha256::digest(format!("rdv1/id:{id}").as_bytes());
        assert_eq!(
            t,
            data_encoding::BASE32_NOPAD.encode(&h).to_lowercase()[..26]
        );
    }
}
