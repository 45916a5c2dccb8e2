//! Confirm phrases (§5.5): a per-request secret shown only on human
//! channels and typed back by the human, so that a model cannot approve on
//! its own. The phrase approves exactly the terms shown with it; the store
//! keeps only a salted scrypt hash, so it cannot be read back from disk.

use std::fmt;
use std::fmt::Write as _;

use rdv_proto::time::Instant;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

/// How long a phrase stays valid. The reference shows a fresh phrase each
/// time the human looks, so a day is ample and bounds what a stolen hash is
/// worth.
pub const PHRASE_TTL: time::Duration = time::Duration::hours(24);

/// How far ahead of `now` a record's `created` may be (the clock stepped
/// back) before it is taken as unreadable and expired.
pub const PHRASE_MAX_AHEAD: time::Duration = time::Duration::minutes(5);

/// Wrong tries before the phrase is replaced (§5.5 reference: 5).
pub const PHRASE_MAX_MISSES: u32 = 5;

/// scrypt cost: N = 2^15, r = 8, p = 1 (32 MiB, tens of ms). Lower than the
/// backup's 2^17 on purpose: online guessing is stopped by
/// [`PHRASE_MAX_MISSES`], and offline the hash only has to outlast the
/// phrase's [`PHRASE_TTL`]: about 2^34 phrases at 2^15 each is years of
/// work, not a day. No parameters are stored: a change of cost only has to
/// wait out one TTL.
pub const PHRASE_KDF_LOG_N: u8 = 15;
pub const PHRASE_KDF_R: u32 = 8;
pub const PHRASE_KDF_P: u32 = 1;

/// Longer input is a miss without hashing: a phrase is at most 30 bytes.
pub const PHRASE_MAX_TYPED_BYTES: usize = 256;

/// The words of a phrase: 256, so one random byte picks one uniformly.
/// Short, common, lowercase, with no homophones and no number words
/// (the digits follow). Three words and three digits are 2^24 · 1000,
/// about 34 bits.
pub const WORDS: [&str; 256] = [
    "otter", "tiger", "eagle", "horse", "zebra", "koala", "panda", "moose", "camel", "llama",
    "whale", "shark", "squid", "crab", "snail", "frog", "toad", "lizard", "cobra", "raven",
    "robin", "heron", "swan", "goose", "duck", "owl", "hawk", "falcon", "parrot", "beaver",
    "badger", "rabbit", "mouse", "kitten", "puppy", "lamb", "goat", "sheep", "pony", "bison",
    "lion", "wolf", "fox", "bee", "ant", "moth", "mole", "gecko", "oyster", "salmon", "trout",
    "turtle", "walrus", "donkey", "amber", "violet", "coral", "ivory", "silver", "golden",
    "indigo", "green", "orange", "purple", "yellow", "maroon", "cobalt", "river", "ocean",
    "forest", "meadow", "valley", "canyon", "desert", "island", "lagoon", "cliff", "hill", "stone",
    "pebble", "sand", "cloud", "storm", "breeze", "frost", "snow", "comet", "planet", "star",
    "moon", "galaxy", "orbit", "meteor", "lake", "pond", "creek", "marsh", "cave", "grove",
    "field", "tundra", "jungle", "coast", "shore", "apple", "banana", "cherry", "grape", "lemon",
    "mango", "melon", "peach", "plum", "honey", "bread", "butter", "cheese", "pasta", "pizza",
    "salad", "soup", "rice", "bean", "carrot", "potato", "tomato", "onion", "pepper", "ginger",
    "garlic", "cookie", "muffin", "waffle", "noodle", "taco", "sugar", "cocoa", "coffee", "juice",
    "kiwi", "lime", "walnut", "almond", "peanut", "anchor", "arrow", "basket", "bell", "bottle",
    "bucket", "button", "candle", "castle", "chair", "clock", "crayon", "crown", "cup", "desk",
    "drum", "flag", "fork", "guitar", "hammer", "helmet", "jacket", "kettle", "ladder", "lamp",
    "magnet", "mirror", "needle", "paddle", "pencil", "piano", "pillow", "pocket", "rocket",
    "saddle", "scarf", "shovel", "spoon", "table", "tent", "ticket", "tunnel", "violin", "wagon",
    "wallet", "window", "zipper", "banjo", "barrel", "bridge", "cabin", "camera", "canoe", "chalk",
    "coin", "fence", "glove", "harp", "kite", "mask", "medal", "oven", "puzzle", "ribbon", "rope",
    "ruler", "shield", "sock", "sofa", "sword", "tower", "train", "vase", "wheel", "brave", "calm",
    "clever", "eager", "gentle", "happy", "jolly", "lucky", "merry", "proud", "quiet", "rapid",
    "shiny", "swift", "tidy", "witty", "bold", "bright", "fancy", "fresh", "fuzzy", "giant",
    "humble", "lively", "mighty", "noble", "polite", "sunny", "sturdy", "tiny", "wild", "wise",
    "quick", "smooth", "crisp", "maple", "cedar", "tulip",
];

/// Why a phrase could not be issued. A phrase that does not approve is a
/// [`PhraseVerdict`], not an error.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PhraseError {
    /// The terms are not canonical JSON (a float, or nested too deep), so
    /// they have no digest (§4.6).
    #[error("the terms cannot be digested: {0}")]
    Terms(String),
    /// The scrypt parameters were refused (a bug: they are constants).
    #[error("key derivation failed")]
    Kdf,
}

/// Issues confirm phrases.
pub enum Phrase {}

impl Phrase {
    /// A new phrase for `terms` (exactly what the human is shown with it:
    /// peer, tier, scope, label…). The secret goes to a human channel once;
    /// the record is what the store keeps.
    pub fn generate(
        terms: &Value,
        now: Instant,
        rng: &mut (impl rand_core::CryptoRngCore + ?Sized),
    ) -> Result<(PhraseSecret, PhraseRecord), PhraseError> {
        let terms = terms_digest_bytes(terms)?;
        let mut text = Zeroizing::new(String::with_capacity(32));
        let mut b = Zeroizing::new([0u8; 3]);
        rng.fill_bytes(b.as_mut());
        for &i in b.iter() {
            text.push_str(WORDS[usize::from(i)]);
            text.push('-');
        }
        // Uniform in 0..1000: 10 random bits, rejecting 1000..1024.
        let digits = loop {
            let x = rng.next_u32() >> 22;
            if x < 1000 {
                break x;
            }
        };
        let _ = write!(text, "{digits:03}");
        let mut salt = [0u8; 16];
        rng.fill_bytes(&mut salt);
        let hash = derive(text.as_bytes(), &salt)?;
        let record = PhraseRecord {
            salt,
            hash: *hash,
            terms,
            created: whole_seconds(now),
            misses: 0,
            used: false,
        };
        Ok((PhraseSecret(text), record))
    }
}

/// The phrase itself, for the human's eyes only: wiped on drop, and
/// `Debug` never prints it, so it cannot slip into a log or a tool result.
pub struct PhraseSecret(Zeroizing<String>);

impl PhraseSecret {
    /// The phrase, to show on a human channel (a terminal, a local UI).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PhraseSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// What the store keeps of a phrase: never the phrase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhraseRecord {
    /// Random per phrase.
    #[serde(with = "hex_bytes")]
    salt: [u8; 16],
    /// scrypt(normalized phrase, salt).
    #[serde(with = "hex_bytes")]
    hash: [u8; 32],
    /// SHA-256 of canon(terms shown).
    #[serde(with = "hex_bytes")]
    terms: [u8; 32],
    #[serde(with = "rfc3339")]
    created: Instant,
    misses: u32,
    used: bool,
}

/// What a typed phrase does. Each but `Approved` and `WrongPhrase` means the
/// record is dead and the caller shows the human a new phrase if it still
/// needs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhraseVerdict {
    /// Right phrase, same terms. The record is now used (single use).
    Approved,
    /// Not the phrase; the record lives on for `misses_left` more tries.
    WrongPhrase { misses_left: u32 },
    /// Right phrase for other terms than those shown (another tier, scope or
    /// label): refused, and the phrase is spent, since whoever relayed it now
    /// knows it; issue a new phrase for the new terms (§5.5).
    TermsChanged,
    /// [`PHRASE_MAX_MISSES`] wrong tries: dead; issue a new phrase.
    Replaced,
    /// Approved (or spent) before.
    AlreadyUsed,
    /// Older than [`PHRASE_TTL`], or created in the future.
    Expired,
}

impl PhraseRecord {
    /// Checks what the human typed against the terms about to be acted on.
    /// Dead records answer without hashing; a miss is counted before the
    /// verdict is returned, so the caller must persist the record after
    /// every check.
    pub fn check(&mut self, typed: &str, terms: &Value, now: Instant) -> PhraseVerdict {
        if self.used {
            return PhraseVerdict::AlreadyUsed;
        }
        if self.misses >= PHRASE_MAX_MISSES {
            return PhraseVerdict::Replaced;
        }
        if self.is_expired(now) {
            return PhraseVerdict::Expired;
        }
        let right = typed.len() <= PHRASE_MAX_TYPED_BYTES
            && derive(normalize(typed).as_bytes(), &self.salt)
                .is_ok_and(|h| bool::from(h.as_slice().ct_eq(&self.hash)));
        if !right {
            self.misses = self.misses.saturating_add(1);
            return if self.misses >= PHRASE_MAX_MISSES {
                PhraseVerdict::Replaced
            } else {
                PhraseVerdict::WrongPhrase {
                    misses_left: PHRASE_MAX_MISSES - self.misses,
                }
            };
        }
        self.used = true;
        // Terms that cannot be digested cannot be the ones shown.
        match terms_digest_bytes(terms) {
            Ok(d) if bool::from(d.ct_eq(&self.terms)) => PhraseVerdict::Approved,
            _ => PhraseVerdict::TermsChanged,
        }
    }

    /// Whether `typed` is this record's phrase, whatever its state: for
    /// telling a late phrase (its step changed since) from a wrong one.
    /// Approves nothing and changes nothing.
    pub fn was(&self, typed: &str) -> bool {
        typed.len() <= PHRASE_MAX_TYPED_BYTES
            && derive(normalize(typed).as_bytes(), &self.salt)
                .is_ok_and(|h| bool::from(h.as_slice().ct_eq(&self.hash)))
    }

    /// Whether a check could still approve (not used, replaced or expired).
    pub fn is_live(&self, now: Instant) -> bool {
        !self.used && self.misses < PHRASE_MAX_MISSES && !self.is_expired(now)
    }

    pub fn created(&self) -> Instant {
        self.created
    }

    pub fn misses(&self) -> u32 {
        self.misses
    }

    pub fn used(&self) -> bool {
        self.used
    }

    /// The hex digest of the terms the phrase was shown with.
    pub fn terms_digest(&self) -> String {
        hex::encode(self.terms)
    }

    fn is_expired(&self, now: Instant) -> bool {
        now - self.created >= PHRASE_TTL || self.created - now > PHRASE_MAX_AHEAD
    }
}

/// Whether a phrase may approve a grant of `tier`: friend and below only;
/// family and spouse need the host's form or the owner's terminal (§5.5,
/// reference). Unknown tiers never.
pub fn tier_allows_phrase(tier: &str) -> bool {
    matches!(tier, "friend" | "colleague" | "business" | "stranger")
}

/// The hex SHA-256 of canon(`terms`): what a phrase is bound to.
pub fn terms_digest(terms: &Value) -> Result<String, PhraseError> {
    terms_digest_bytes(terms).map(hex::encode)
}

/// How typed text is compared: trimmed, lowercased, and each run of
/// whitespace, hyphens or underscores made one hyphen (leading and trailing
/// ones dropped), so "Amber Otter_violet  417" is "amber-otter-violet-417".
pub fn normalize(typed: &str) -> Zeroizing<String> {
    let mut out = Zeroizing::new(String::with_capacity(typed.len()));
    let mut gap = false;
    for c in typed.trim().chars() {
        if c.is_whitespace() || c == '-' || c == '_' {
            gap = true;
            continue;
        }
        if gap && !out.is_empty() {
            out.push('-');
        }
        gap = false;
        for l in c.to_lowercase() {
            out.push(l);
        }
    }
    out
}

fn terms_digest_bytes(terms: &Value) -> Result<[u8; 32], PhraseError> {
    let bytes = rdv_proto::canon::to_vec(terms).map_err(|e| PhraseError::Terms(e.to_string()))?;
    Ok(Sha256::digest(&bytes).into())
}

fn derive(phrase: &[u8], salt: &[u8; 16]) -> Result<Zeroizing<[u8; 32]>, PhraseError> {
    let params = scrypt::Params::new(PHRASE_KDF_LOG_N, PHRASE_KDF_R, PHRASE_KDF_P, 32)
        .map_err(|_| PhraseError::Kdf)?;
    let mut out = Zeroizing::new([0u8; 32]);
    scrypt::scrypt(phrase, salt, &params, out.as_mut()).map_err(|_| PhraseError::Kdf)?;
    Ok(out)
}

/// As it is stored: UTC, whole seconds, so a record reads back equal.
fn whole_seconds(t: Instant) -> Instant {
    let t = t.to_offset(time::UtcOffset::UTC);
    t.replace_nanosecond(0).unwrap_or(t)
}

/// Fixed-size byte arrays as lowercase hex.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer, const N: usize>(b: &[u8; N], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        d: D,
    ) -> Result<[u8; N], D::Error> {
        let s = String::deserialize(d)?;
        let mut out = [0u8; N];
        let lower = s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !lower || hex::decode_to_slice(&s, &mut out).is_err() {
            return Err(D::Error::custom(format!(
                "expected {} lowercase hex digits",
                2 * N
            )));
        }
        Ok(out)
    }
}

/// Instants as the protocol writes them (§4.6).
mod rfc3339 {
    use rdv_proto::time::{Instant, format_time, parse_time};
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_time(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        let s = String::deserialize(d)?;
        parse_time("created", &s).map_err(|_| D::Error::custom("created: not an RFC 3339 UTC time"))
    }
}

impl Drop for PhraseRecord {
    fn drop(&mut self) {
        // Not secret, but a hash is as good as the phrase to an offline
        // guesser for a day: do not leave it in freed memory.
        self.hash.zeroize();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashSet;

    fn now() -> Instant {
        rdv_proto::time::parse_time("t", "2026-10-20T08:00:00Z").unwrap()
    }

    fn terms() -> Value {
        json!({"request": "5b1c", "tier": "friend", "scope": {"invoke": ["request/v1"], "meetings": false}, "label": null})
    }

    fn issue() -> (PhraseSecret, PhraseRecord) {
        Phrase::generate(&terms(), now(), &mut rand_core::OsRng).unwrap()
    }

    #[test]
    fn word_list_is_short_distinct_lowercase() {
        let set: HashSet<&str> = WORDS.iter().copied().collect();
        assert_eq!(set.len(), WORDS.len());
        assert!(WORDS.len() >= 256);
        for w in WORDS {
            assert!((3..=6).contains(&w.len()), "{w}");
            assert!(w.bytes().all(|b| b.is_ascii_lowercase()), "{w}");
        }
    }

    #[test]
    fn phrase_shape_is_three_words_and_three_digits() {
        let (secret, _) = issue();
        let p = secret.expose();
        let parts: Vec<&str> = p.split('-').collect();
        assert_eq!(parts.len(), 4, "{p}");
        for w in &parts[..3] {
            assert!(WORDS.contains(w), "{p}");
        }
        assert!(
            parts[3].len() == 3 && parts[3].bytes().all(|b| b.is_ascii_digit()),
            "{p}"
        );
        assert_eq!(*normalize(p), p);
    }

    #[test]
    fn approved_once_then_already_used() {
        let (secret, mut rec) = issue();
        assert!(rec.is_live(now()));
        assert_eq!(
            rec.check(secret.expose(), &terms(), now()),
            PhraseVerdict::Approved
        );
        assert!(rec.used() && !rec.is_live(now()));
        assert_eq!(
            rec.check(secret.expose(), &terms(), now()),
            PhraseVerdict::AlreadyUsed
        );
    }

    #[test]
    fn was_tells_a_spent_phrase_without_approving_or_counting() {
        let (secret, mut rec) = issue();
        assert_eq!(
            rec.check(secret.expose(), &terms(), now()),
            PhraseVerdict::Approved
        );
        let before = rec.clone();
        assert!(rec.was(secret.expose()));
        assert!(
            rec.was(&secret.expose().to_uppercase()),
            "typed as normalized"
        );
        assert!(!rec.was("otter-tiger-eagle-1234"));
        assert_eq!(rec, before, "nothing counted");
    }

    #[test]
    fn wrong_phrase_counts_down_and_five_misses_replace() {
        let (secret, mut rec) = issue();
        for left in (1..PHRASE_MAX_MISSES).rev() {
            assert_eq!(
                rec.check("amber-otter-violet-000x", &terms(), now()),
                PhraseVerdict::WrongPhrase { misses_left: left }
            );
        }
        assert_eq!(rec.check("nope", &terms(), now()), PhraseVerdict::Replaced);
        assert_eq!(rec.misses(), PHRASE_MAX_MISSES);
        // Dead: even the right phrase no longer approves.
        assert_eq!(
            rec.check(secret.expose(), &terms(), now()),
            PhraseVerdict::Replaced
        );
        assert!(!rec.is_live(now()));
    }

    #[test]
    fn overlong_input_is_a_miss() {
        let (_, mut rec) = issue();
        let long = "a".repeat(PHRASE_MAX_TYPED_BYTES + 1);
        assert_eq!(
            rec.check(&long, &terms(), now()),
            PhraseVerdict::WrongPhrase {
                misses_left: PHRASE_MAX_MISSES - 1
            }
        );
    }

    #[test]
    fn other_terms_are_refused_and_spend_the_phrase() {
        let (secret, rec) = issue();
        let mut other_tier = terms();
        other_tier["tier"] = json!("colleague");
        let mut other_scope = terms();
        other_scope["scope"]["invoke"] = json!(["request/v1", "https://example.com/x/v1"]);
        let mut other_meetings = terms();
        other_meetings["scope"]["meetings"] = json!(true);
        let mut other_label = terms();
        other_label["label"] = json!("Mom");
        let float = json!({"tier": 1.5});
        for t in [other_tier, other_scope, other_meetings, other_label, float] {
            let mut r = rec.clone();
            assert_eq!(
                r.check(secret.expose(), &t, now()),
                PhraseVerdict::TermsChanged,
                "{t}"
            );
            // The old phrase stops working, for the old terms too.
            assert_eq!(
                r.check(secret.expose(), &terms(), now()),
                PhraseVerdict::AlreadyUsed
            );
        }
        // Key order is not a change: the digest is over canonical JSON.
        let reordered: Value = serde_json::from_str(
            r#"{"tier":"friend","label":null,"scope":{"meetings":false,"invoke":["request/v1"]},"request":"5b1c"}"#,
        )
        .unwrap();
        let mut r = rec.clone();
        assert_eq!(
            r.check(secret.expose(), &reordered, now()),
            PhraseVerdict::Approved
        );
        assert_eq!(rec.terms_digest(), terms_digest(&terms()).unwrap());
    }

    #[test]
    fn wrong_phrase_with_other_terms_is_a_miss() {
        let (_, mut rec) = issue();
        assert_eq!(
            rec.check("x", &json!({}), now()),
            PhraseVerdict::WrongPhrase { misses_left: 4 }
        );
    }

    #[test]
    fn expires_after_ttl_and_when_created_in_the_future() {
        let (secret, rec) = issue();
        let almost = now() + PHRASE_TTL - time::Duration::seconds(1);
        assert_eq!(
            rec.clone().check(secret.expose(), &terms(), almost),
            PhraseVerdict::Approved
        );
        let mut r = rec.clone();
        assert_eq!(
            r.check(secret.expose(), &terms(), now() + PHRASE_TTL),
            PhraseVerdict::Expired
        );
        assert_eq!(r.misses(), 0);
        assert!(!r.used());
        let past = now() - PHRASE_MAX_AHEAD - time::Duration::seconds(1);
        assert_eq!(
            rec.clone().check(secret.expose(), &terms(), past),
            PhraseVerdict::Expired
        );
        let slight = now() - time::Duration::seconds(30);
        assert_eq!(
            rec.clone().check(secret.expose(), &terms(), slight),
            PhraseVerdict::Approved
        );
    }

    #[test]
    fn normalization() {
        assert_eq!(
            *normalize("  Amber Otter_violet  417 "),
            "amber-otter-violet-417"
        );
        assert_eq!(
            *normalize("amber--otter -_ violet\t417"),
            "amber-otter-violet-417"
        );
        assert_eq!(
            *normalize("-amber-otter-violet-417-"),
            "amber-otter-violet-417"
        );
        assert_eq!(
            *normalize("AMBER-OTTER-VIOLET-417"),
            "amber-otter-violet-417"
        );
        assert_eq!(*normalize("amberotter-violet-417"), "amberotter-violet-417");
        let (secret, rec) = issue();
        let typed = format!(" {} ", secret.expose().replace('-', "  ").to_uppercase());
        assert_eq!(
            rec.clone().check(&typed, &terms(), now()),
            PhraseVerdict::Approved
        );
        let squashed = secret.expose().replacen('-', "", 1);
        assert_eq!(
            rec.clone().check(&squashed, &terms(), now()),
            PhraseVerdict::WrongPhrase { misses_left: 4 }
        );
    }

    #[test]
    fn record_never_holds_the_phrase_and_reads_back() {
        let (secret, rec) = issue();
        let text = serde_json::to_string(&rec).unwrap();
        let p = secret.expose();
        assert!(!text.contains(p), "{text}");
        assert!(!text.contains(&p.replace('-', " ")), "{text}");
        assert!(!text.contains(&p[p.len() - 4..]), "{text}");
        assert!(!format!("{rec:?}").contains(p));
        let v: Value = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["created", "hash", "misses", "salt", "terms", "used"]);
        assert_eq!(v["created"], "2026-10-20T08:00:00Z");
        let mut back: PhraseRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, rec);
        assert_eq!(back.check(p, &terms(), now()), PhraseVerdict::Approved);
    }

    #[test]
    fn record_parsing_is_strict() {
        let (_, rec) = issue();
        let good = serde_json::to_value(&rec).unwrap();
        let mut extra = good.clone();
        extra["phrase"] = json!("x");
        assert!(serde_json::from_value::<PhraseRecord>(extra).is_err());
        let mut short = good.clone();
        short["salt"] = json!("00");
        assert!(serde_json::from_value::<PhraseRecord>(short).is_err());
        let mut upper = good.clone();
        upper["hash"] = json!(good["hash"].as_str().unwrap().to_uppercase());
        assert!(serde_json::from_value::<PhraseRecord>(upper).is_err());
        let mut time = good;
        time["created"] = json!("yesterday");
        assert!(serde_json::from_value::<PhraseRecord>(time).is_err());
    }

    #[test]
    fn salts_differ_so_hashes_differ() {
        let (_, a) = issue();
        let (_, b) = issue();
        assert_ne!(a.salt, b.salt);
        assert_ne!(a.hash, b.hash);
    }

    #[test]
    fn secret_debug_is_redacted() {
        let (secret, _) = issue();
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(format!("{:?}", (1, &secret)), "(1, [redacted])");
    }

    #[test]
    fn phrase_tiers() {
        for t in ["friend", "colleague", "business", "stranger"] {
            assert!(tier_allows_phrase(t), "{t}");
        }
        for t in ["family", "spouse", "Friend", "", "owner"] {
            assert!(!tier_allows_phrase(t), "{t}");
        }
        // Every protocol tier is decided one way or the other.
        assert_eq!(
            rdv_proto::consts::TIERS
                .iter()
                .filter(|t| tier_allows_phrase(t))
                .count(),
            4
        );
    }

    #[test]
    fn generate_refuses_non_canonical_terms() {
        assert!(matches!(
            Phrase::generate(&json!({"x": 0.5}), now(), &mut rand_core::OsRng),
            Err(PhraseError::Terms(_))
        ));
    }
}
