//! The ntfy message JSON (issue #5), as ntfy's own clients read it, and the
//! rules for turning a carried body into one and back, byte for byte.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Length of a message id: ntfy uses 12 characters of `[A-Za-z0-9]`.
pub const ID_LEN: usize = 12;
const ID_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// The injected clock is service-kit's (issue #14, "Written once"), so
/// expiry and limits are testable without waiting.
pub use rdv_service_kit::clock::{Clock, ManualClock, SystemClock};

/// The clock read as the bridge keeps time: microseconds and seconds since
/// the Unix epoch (message keys, `time`, expiry, the limits' buckets).
pub trait UnixTime {
    fn now_us(&self) -> i64;
    fn now_secs(&self) -> i64 {
        self.now_us().div_euclid(1_000_000)
    }
}

impl<C: Clock + ?Sized> UnixTime for C {
    fn now_us(&self) -> i64 {
        i64::try_from(self.now().unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
    }
}

/// The instant `us` microseconds after the Unix epoch (for a
/// [`ManualClock`]; out of range: the epoch).
pub fn unix_us(us: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A fresh message id from the given randomness.
pub fn new_id(rng: &mut impl rand::RngCore) -> String {
    (0..ID_LEN)
        .map(|_| {
            let i = (rng.next_u32() as usize) % ID_ALPHABET.len();
            char::from(ID_ALPHABET[i])
        })
        .collect()
}

/// True for something shaped like a message id (used by `since=<id>`).
pub fn is_id(s: &str) -> bool {
    (1..=16).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// ntfy's event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Open,
    Keepalive,
    Message,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Open => "open",
            Event::Keepalive => "keepalive",
            Event::Message => "message",
        }
    }
}

/// A message body as text: UTF-8 held in shared bytes, so a payload read
/// from MQTT or HTTP becomes a message without a copy (a fresh 32 KB copy per
/// MQTT publication was a fifth of the bridge's CPU at full rate,
/// docs/benchmarks/relay-bridge.md), and validated once: re-checking 32 KB
/// on every use was a tenth of it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Text(bytestring::ByteString);

impl Text {
    /// `b` as text, or `b` back if it is not UTF-8.
    pub fn from_utf8(b: Bytes) -> Result<Text, Bytes> {
        match bytestring::ByteString::try_from(b.clone()) {
            Ok(s) => Ok(Text(s)),
            Err(_) => Err(b),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The UTF-8 bytes, shared.
    pub fn bytes(&self) -> Bytes {
        self.0.as_bytes().clone()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text(s.into())
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(s.into())
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        String::deserialize(d).map(Text::from)
    }
}

/// One ntfy message (or `open`/`keepalive` event) as it goes on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Message {
    pub id: String,
    /// Unix seconds.
    pub time: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    pub event: Event,
    /// The topic, or for `open`/`keepalive` the comma-joined subscription.
    pub topic: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub message: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub click: Option<String>,
    /// `"base64"` when the body is not UTF-8 (as ntfy does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// Microsecond ordering key inside the cache; never on the wire.
    #[serde(skip)]
    pub key: i64,
}

impl Message {
    /// An `open` or `keepalive` event for a subscription.
    pub fn control(event: Event, id: String, now_secs: i64, topics: &[String]) -> Self {
        Message {
            id,
            time: now_secs,
            expires: None,
            event,
            topic: topics.join(","),
            message: None,
            title: None,
            tags: None,
            priority: None,
            click: None,
            encoding: None,
            key: 0,
        }
    }

    /// A message event carrying `body`: UTF-8 as text (shared, not
    /// copied), anything else base64.
    pub fn with_body(id: String, key: i64, topic: String, body: Bytes) -> Self {
        let (message, encoding) = match Text::from_utf8(body) {
            Ok(t) => (t, None),
            Err(b) => (Text::from(B64.encode(&b)), Some("base64".to_owned())),
        };
        Message {
            id,
            time: key.div_euclid(1_000_000),
            expires: None,
            event: Event::Message,
            topic,
            message: Some(message),
            title: None,
            tags: None,
            priority: None,
            click: None,
            encoding,
            key,
        }
    }

    /// The bytes the publisher sent (what MQTT subscribers get).
    pub fn payload(&self) -> Bytes {
        let Some(m) = &self.message else {
            return Bytes::new();
        };
        if self.encoding.as_deref() == Some("base64") {
            B64.decode(m.as_str())
                .map_or_else(|_| m.bytes(), Bytes::from)
        } else {
            m.bytes()
        }
    }

    /// The message text ("" for none).
    pub fn text(&self) -> &str {
        self.message.as_ref().map_or("", Text::as_str)
    }

    /// One JSON line (NDJSON / WebSocket frame / SSE data).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// The JSON of everything but the text: what the cache keeps in a row
    /// whose text is in a body file, so a 32 KB body is not escaped into
    /// JSON on every write (an eighth of the bridge's CPU at 32 KB).
    pub fn head_json(&self) -> String {
        let head = Message {
            message: None,
            ..self.clone()
        };
        head.to_json()
    }
}

/// Parses a priority as ntfy does: 1-5 or a name.
pub fn parse_priority(s: &str) -> Option<u8> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "min" => Some(1),
        "2" | "low" => Some(2),
        "3" | "default" => Some(3),
        "4" | "high" => Some(4),
        "5" | "max" | "urgent" => Some(5),
        _ => None,
    }
}

/// Subscription filters (`id`, `message`, `title`, `tags`, `priority`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filters {
    pub id: Option<String>,
    pub message: Option<String>,
    pub title: Option<String>,
    /// All of these tags must be present.
    pub tags: Vec<String>,
    /// Any of these priorities matches (3 matches an unset priority).
    pub priorities: Vec<u8>,
}

impl Filters {
    pub fn matches(&self, m: &Message) -> bool {
        if m.event != Event::Message {
            return true;
        }
        if self.id.as_ref().is_some_and(|id| *id != m.id) {
            return false;
        }
        if self
            .message
            .as_ref()
            .is_some_and(|x| Some(x.as_str()) != m.message.as_ref().map(Text::as_str))
        {
            return false;
        }
        if self
            .title
            .as_ref()
            .is_some_and(|x| Some(x) != m.title.as_ref())
        {
            return false;
        }
        let tags = m.tags.as_deref().unwrap_or(&[]);
        if !self.tags.iter().all(|t| tags.contains(t)) {
            return false;
        }
        let prio = m.priority.unwrap_or(3);
        self.priorities.is_empty() || self.priorities.contains(&prio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn ids_have_ntfy_shape() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let id = new_id(&mut rng);
        assert_eq!(id.len(), 12);
        assert!(is_id(&id));
        assert_ne!(id, new_id(&mut rng));
    }

    #[test]
    fn binary_is_base64_and_round_trips() {
        let body = [0u8, 0xff, 0xfe, 1, 2];
        let m = Message::with_body(
            "a".into(),
            5_000_000,
            "t".into(),
            Bytes::copy_from_slice(&body),
        );
        assert_eq!(m.encoding.as_deref(), Some("base64"));
        assert_eq!(m.payload(), &body[..]);
        assert_eq!(m.time, 5);
        let t = Message::with_body("a".into(), 0, "t".into(), Bytes::from_static(b" text \n"));
        assert_eq!(t.encoding, None);
        assert_eq!(t.payload(), &b" text \n"[..]);
    }

    #[test]
    fn json_shape() {
        let m = Message::with_body(
            "abc".into(),
            1_000_000,
            "t".into(),
            Bytes::from_static(b"hi"),
        );
        let v: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id":"abc","time":1,"event":"message","topic":"t","message":"hi"})
        );
    }

    #[test]
    fn filters() {
        let mut m = Message::with_body("abc".into(), 0, "t".into(), Bytes::from_static(b"hi"));
        m.tags = Some(vec!["a".into(), "b".into()]);
        m.priority = Some(4);
        let f = |f: Filters| f.matches(&m);
        assert!(f(Filters::default()));
        assert!(f(Filters {
            tags: vec!["a".into()],
            ..Default::default()
        }));
        assert!(!f(Filters {
            tags: vec!["c".into()],
            ..Default::default()
        }));
        assert!(f(Filters {
            priorities: vec![4, 5],
            ..Default::default()
        }));
        assert!(!f(Filters {
            priorities: vec![3],
            ..Default::default()
        }));
        assert!(!f(Filters {
            message: Some("x".into()),
            ..Default::default()
        }));
        assert!(f(Filters {
            id: Some("abc".into()),
            ..Default::default()
        }));
        assert_eq!(parse_priority("urgent"), Some(5));
        assert_eq!(parse_priority("6"), None);
    }
}
