//! The address card (§4.3): what an agent publishes about itself, signed by
//! its own key (the `id`).

use serde_json::{Value, json};

use crate::address::{Address, AddressKind};
use crate::consts::{
    CARD_MAX_BYTES, CARD_MAX_CAPABILITIES, CARD_MAX_CAPABILITY_LEN, CARD_MAX_RELAYS,
    CARD_MIN_RELAYS, RELAY_URL_MAX_LEN,
};
use crate::error::{Error, Result};
use crate::keys::{AgentId, AgentKey};
use crate::time::Instant;

use super::obj::Obj;
use super::{open_signed, opt_time_value, sign_pairs, time_value, uri_list, url_with_scheme};

/// `policy.inbound` (§5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    Allow,
    Block,
    Prompt,
}

impl Inbound {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Block => "block",
            Self::Prompt => "prompt",
        }
    }
}

/// `owner` (§4.3): opt-in, peer-written display text (§5.6).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Owner {
    pub name: Option<String>,
    pub contact: Vec<String>,
}

/// A verified card.
#[derive(Debug, Clone, PartialEq)]
pub struct Card {
    pub id: AgentId,
    pub created: Instant,
    pub expires: Option<Instant>,
    pub capabilities: Vec<String>,
    pub owner: Option<Owner>,
    /// `discovery.addresses`, canonical (§4.4: what the card claims).
    pub addresses: Vec<Address>,
    pub public_pointer: bool,
    /// The `relay` of each `nostr` rendezvous entry, in card order, without
    /// repeats (§6.2).
    pub relays: Vec<String>,
    /// Every rendezvous entry as written (other transports are hints, §6.3).
    pub rendezvous: Vec<Value>,
    pub inbound: Inbound,
    pub public: bool,
    /// §4.6 hash of the whole card.
    pub hash: String,
    /// The signed document itself, to forward or store.
    pub doc: Value,
}

impl Card {
    /// Verifies a card at `now`: size, signature by `id`, shape, and not
    /// expired. `allow_ws` admits ws:// relays (test and dev setups, §4.3).
    pub fn verify(doc: &Value, now: Instant, allow_ws: bool) -> Result<Self> {
        Self::verify_at(doc, "", now, allow_ws)
    }

    /// As [`Card::verify`] for a card nested at `path` (`card` of a grant).
    pub(crate) fn verify_at(doc: &Value, path: &str, now: Instant, allow_ws: bool) -> Result<Self> {
        let c = Self::parse_at(doc, path, allow_ws)?;
        if c.is_expired(now) {
            return Err(Error::Expired);
        }
        Ok(c)
    }

    /// Everything [`Card::verify`] checks except expiry: for a card already
    /// held, whose expiry the caller judges itself.
    pub fn parse_signed(doc: &Value, allow_ws: bool) -> Result<Self> {
        Self::parse_at(doc, "", allow_ws)
    }

    fn parse_at(doc: &Value, path: &str, allow_ws: bool) -> Result<Self> {
        let (mut o, id, hash) = open_signed(doc, path, "card", "id", Some(CARD_MAX_BYTES))?;
        o.version()?;
        let created = o.time("created")?;
        let expires = nullable_time(&mut o, "expires")?;
        let capabilities = uri_list(
            &mut o,
            "capabilities",
            CARD_MAX_CAPABILITIES,
            CARD_MAX_CAPABILITY_LEN,
        )?;
        let owner = match o.opt("owner") {
            None => None,
            Some(v) => Some(owner(v, &o.path("owner"))?),
        };
        let (addresses, public_pointer) = match o.opt("discovery") {
            None => (Vec::new(), false),
            Some(v) => discovery(v, &o.path("discovery"))?,
        };
        let (rendezvous, relays) = rendezvous(&mut o, allow_ws)?;
        let mut p = o.object("policy")?;
        let inbound = match p.str("inbound")? {
            "allow" => Inbound::Allow,
            "block" => Inbound::Block,
            "prompt" => Inbound::Prompt,
            _ => return Err(p.err("inbound", "must be allow, block or prompt")),
        };
        let public = p.bool("public")?;
        // Members of policy we do not know are tolerated (forward-compatible).
        o.deny_unknown()?;
        Ok(Self {
            id,
            created,
            expires,
            capabilities,
            owner,
            addresses,
            public_pointer,
            relays,
            rendezvous,
            inbound,
            public,
            hash,
            doc: doc.clone(),
        })
    }

    /// Whether `now` is at or past `expires`.
    pub fn is_expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|e| now >= e)
    }

    /// §4.3: an address counts as claimed only if the card lists it.
    pub fn claims(&self, addr: &Address) -> bool {
        self.addresses
            .iter()
            .any(|a| a.kind == addr.kind && a.canon() == addr.canon())
    }

    /// §4.3: whether this card replaces `held` (same agent, later `created`).
    pub fn supersedes(&self, held: &Card) -> bool {
        self.id == held.id && self.created > held.created
    }

    /// Whether the card lists `cap` in its capabilities (§7.5).
    pub fn has_capability(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c == cap)
    }
}

/// §4.3: of several verified cards, the one with the latest `created` among
/// those whose id is `id`. A tie keeps the first seen (a changed card moves
/// `created` on by at least a second, so a tie is never a change).
pub fn newest_card<'a>(
    id: &AgentId,
    cards: impl IntoIterator<Item = &'a Card>,
) -> Option<&'a Card> {
    let mut best: Option<&Card> = None;
    for c in cards.into_iter().filter(|c| &c.id == id) {
        if best.is_none_or(|b| c.created > b.created) {
            best = Some(c);
        }
    }
    best
}

/// A time member that must be present and may be null.
pub(crate) fn nullable_time<'a>(o: &mut Obj<'a>, key: &'a str) -> Result<Option<Instant>> {
    o.req(key)?;
    o.opt_time(key)
}

fn owner(v: &Value, path: &str) -> Result<Owner> {
    let mut o = Obj::new(v, path)?;
    let name = match o.opt("name") {
        None => None,
        Some(_) => Some(o.str("name")?.to_string()),
    };
    let contact = match o.opt("contact") {
        None => Vec::new(),
        Some(_) => o
            .array("contact")?
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Error::shape(format!("{path}.contact[{i}]"), "must be a string"))
            })
            .collect::<Result<_>>()?,
    };
    // Other owner members are tolerated (forward-compatible, §4.3).
    Ok(Owner { name, contact })
}

fn discovery(v: &Value, path: &str) -> Result<(Vec<Address>, bool)> {
    let mut o = Obj::new(v, path)?;
    let mut addresses = Vec::new();
    if o.opt("addresses").is_some() {
        for (i, a) in o.array("addresses")?.iter().enumerate() {
            let mut e = Obj::new(a, &format!("{path}.addresses[{i}]"))?;
            let kind = match e.str("type")? {
                "email" => AddressKind::Email,
                "phone" => AddressKind::Phone,
                _ => return Err(e.err("type", "must be email or phone")),
            };
            let raw = e.str("value")?;
            let addr = Address::parse(raw).map_err(|x| e.err("value", x.to_string()))?;
            if addr.kind != kind {
                return Err(e.err("value", "does not match its type"));
            }
            addresses.push(addr);
        }
    }
    let public_pointer = match o.opt("public_pointer") {
        None => false,
        Some(_) => o.bool("public_pointer")?,
    };
    Ok((addresses, public_pointer))
}

/// §4.3, §6.2: rendezvous entries each have a `type`; each `nostr` entry a
/// relay URL (wss://, or ws:// when allowed); 1 to 16 nostr entries.
fn rendezvous(o: &mut Obj<'_>, allow_ws: bool) -> Result<(Vec<Value>, Vec<String>)> {
    let arr = o.array("rendezvous")?;
    let mut relays: Vec<String> = Vec::new();
    let mut nostr = 0usize;
    for (i, e) in arr.iter().enumerate() {
        let mut r = Obj::new(e, &o.path(&format!("rendezvous[{i}]")))?;
        if r.str("type")? != "nostr" {
            continue;
        }
        nostr += 1;
        let url = r.str("relay")?;
        let ok = url_with_scheme(url, "wss", RELAY_URL_MAX_LEN)
            || (allow_ws && url_with_scheme(url, "ws", RELAY_URL_MAX_LEN));
        if !ok {
            let why = if url.starts_with("ws://") {
                "ws:// relays are allowed only in a test or dev setup"
            } else {
                "must be a wss:// URL of at most 256 characters"
            };
            return Err(r.err("relay", why));
        }
        if !relays.iter().any(|x| x == url) {
            relays.push(url.to_string());
        }
    }
    if !(CARD_MIN_RELAYS..=CARD_MAX_RELAYS).contains(&nostr) {
        return Err(o.err(
            "rendezvous",
            format!("must list {CARD_MIN_RELAYS} to {CARD_MAX_RELAYS} nostr relays"),
        ));
    }
    Ok((arr.clone(), relays))
}

/// What a card says, before it is signed (§4.3).
#[derive(Debug, Clone)]
pub struct CardBuilder {
    pub created: Instant,
    pub expires: Option<Instant>,
    pub capabilities: Vec<String>,
    /// The `owner` object as the owner opted in, or none.
    pub owner: Option<Value>,
    pub addresses: Vec<Address>,
    pub public_pointer: bool,
    /// Nostr relays, in preference order (`pref` 1, 2, …).
    pub relays: Vec<String>,
    /// Other rendezvous entries, appended after the relays.
    pub other_rendezvous: Vec<Value>,
    pub inbound: Inbound,
    pub public: bool,
}

impl CardBuilder {
    /// A minimal card: rdv/v1 and a2a/0.3, the relays, prompt, not public.
    pub fn new(created: Instant, relays: Vec<String>) -> Self {
        Self {
            created,
            expires: None,
            capabilities: vec!["rdv/v1".into(), "a2a/0.3".into()],
            owner: None,
            addresses: Vec::new(),
            public_pointer: false,
            relays,
            other_rendezvous: Vec::new(),
            inbound: Inbound::Prompt,
            public: false,
        }
    }

    /// The signed card, `id` being `key`'s.
    pub fn sign(&self, key: &AgentKey) -> Result<Value> {
        let mut rendezvous: Vec<Value> = self
            .relays
            .iter()
            .enumerate()
            .map(|(i, r)| json!({"type": "nostr", "relay": r, "pref": i + 1}))
            .collect();
        rendezvous.extend(self.other_rendezvous.iter().cloned());
        let mut pairs = vec![
            ("v", json!(1)),
            ("id", json!(key.id().as_str())),
            ("created", time_value(self.created)),
            ("expires", opt_time_value(self.expires)),
            ("capabilities", json!(self.capabilities)),
            ("rendezvous", Value::Array(rendezvous)),
            (
                "policy",
                json!({"inbound": self.inbound.as_str(), "public": self.public}),
            ),
        ];
        if let Some(owner) = &self.owner {
            pairs.push(("owner", owner.clone()));
        }
        if !self.addresses.is_empty() || self.public_pointer {
            let addrs: Vec<Value> = self
                .addresses
                .iter()
                .map(|a| {
                    let t = match a.kind {
                        AddressKind::Email => "email",
                        AddressKind::Phone => "phone",
                    };
                    json!({"type": t, "value": a.canon()})
                })
                .collect();
            pairs.push((
                "discovery",
                json!({"addresses": addrs, "public_pointer": self.public_pointer}),
            ));
        }
        sign_pairs(pairs, key)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use crate::doc::resign;
    use crate::doc::testutil::{key, now, t};

    pub fn builder() -> CardBuilder {
        let mut b = CardBuilder::new(
            t("2026-10-08T00:00:00Z"),
            vec!["wss://relay.example".into()],
        );
        b.addresses = vec![
            Address::parse("john@doe.com").unwrap(),
            Address::parse("+972-54-000-0000").unwrap(),
        ];
        b.public_pointer = true;
        b.owner = Some(json!({"name": "John", "contact": ["mailto:john@doe.com"]}));
        b
    }

    /// A valid card of agent `n`.
    pub fn card(n: u8) -> Value {
        builder().sign(&key(n)).unwrap()
    }

    fn with(doc: &Value, f: impl FnOnce(&mut serde_json::Map<String, Value>), n: u8) -> Value {
        let mut d = doc.clone();
        f(d.as_object_mut().unwrap());
        resign(&d, &key(n)).unwrap()
    }

    fn refused(doc: &Value) -> Error {
        Card::verify(doc, now(), false).unwrap_err()
    }

    #[test]
    fn valid_card_verifies() {
        let d = card(1);
        let c = Card::verify(&d, now(), false).unwrap();
        assert_eq!(&c.id, key(1).id());
        assert_eq!(c.relays, vec!["wss://relay.example"]);
        assert_eq!(c.addresses.len(), 2);
        assert!(c.public_pointer);
        assert_eq!(c.inbound, Inbound::Prompt);
        assert_eq!(c.owner.as_ref().unwrap().name.as_deref(), Some("John"));
        assert_eq!(c.hash, crate::sign::hash(&d).unwrap());
        assert!(c.claims(&Address::parse("John@Doe.com").unwrap()));
        assert!(c.claims(&Address::parse("+972540000000").unwrap()));
        assert!(!c.claims(&Address::parse("dana@doe.com").unwrap()));
        // The interop suite's minimal card.
        let min = CardBuilder::new(
            t("2026-10-08T00:00:00Z"),
            vec!["wss://relay.example".into()],
        )
        .sign(&key(2))
        .unwrap();
        let c = Card::verify(&min, now(), false).unwrap();
        assert!(c.addresses.is_empty() && !c.public_pointer && c.owner.is_none());
    }

    #[test]
    fn tampered_card_fails_signature() {
        let mut d = card(1);
        d["created"] = json!("2026-10-09T00:00:00Z");
        assert_eq!(refused(&d), Error::BadSignature);
        // Signed by another key than its id.
        let mut d = card(1);
        d["id"] = json!(key(2).id().as_str());
        assert_eq!(refused(&d), Error::BadSignature);
        let d = with(&card(1), |_| {}, 2);
        assert_eq!(refused(&d), Error::BadSignature);
    }

    #[test]
    fn expiry() {
        let d = with(
            &card(1),
            |m| {
                m.insert("expires".into(), json!("2026-10-08T12:00:00Z"));
            },
            1,
        );
        assert_eq!(refused(&d), Error::Expired);
        let d = with(
            &card(1),
            |m| {
                m.insert("expires".into(), json!("2026-10-08T12:00:01Z"));
            },
            1,
        );
        Card::verify(&d, now(), false).unwrap();
        assert!(
            Card::parse_signed(
                &with(
                    &card(1),
                    |m| {
                        m.insert("expires".into(), json!("2020-01-01T00:00:00Z"));
                    },
                    1
                ),
                false
            )
            .is_ok()
        );
        let d = with(
            &card(1),
            |m| {
                m.insert("expires".into(), json!("soon"));
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "expires"));
        let d = with(
            &card(1),
            |m| {
                m.remove("expires");
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "expires"));
    }

    #[test]
    fn version_and_unknown_members() {
        let d = with(
            &card(1),
            |m| {
                m.insert("v".into(), json!(2));
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "v"));
        let d = with(
            &card(1),
            |m| {
                m.insert("extra".into(), json!(1));
            },
            1,
        );
        assert_eq!(refused(&d), Error::UnknownField("extra".into()));
        // Unknown members inside owner, discovery, rendezvous and policy are tolerated.
        let d = with(
            &card(1),
            |m| {
                m["owner"]["x"] = json!(1);
                m["discovery"]["x"] = json!(1);
                m["rendezvous"][0]["x"] = json!(1);
                m["policy"]["x"] = json!(1);
            },
            1,
        );
        Card::verify(&d, now(), false).unwrap();
    }

    #[test]
    fn capability_limits() {
        let at = |n: usize, len: usize| {
            with(
                &card(1),
                |m| {
                    let caps: Vec<String> = (0..n).map(|i| format!("{i:0>len$}")).collect();
                    m.insert("capabilities".into(), json!(caps));
                },
                1,
            )
        };
        Card::verify(&at(32, 200), now(), false).unwrap();
        assert!(
            matches!(refused(&at(33, 10)), Error::Shape { field, .. } if field == "capabilities")
        );
        assert!(
            matches!(refused(&at(1, 201)), Error::Shape { field, .. } if field == "capabilities[0]")
        );
        let d = with(
            &card(1),
            |m| {
                m.insert("capabilities".into(), json!([1]));
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "capabilities[0]"));
        let d = with(
            &card(1),
            |m| {
                m.insert("capabilities".into(), json!("rdv/v1"));
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "capabilities"));
    }

    #[test]
    fn size_limit() {
        // Pad owner.name so the canonical card is exactly at, then one past, the bound.
        let base = card(1);
        let len = crate::canon::to_vec(&base).unwrap().len();
        let pad = |extra: usize| {
            with(
                &base,
                |m| {
                    let name = format!("John{}", "x".repeat(extra));
                    m["owner"]["name"] = json!(name);
                },
                1,
            )
        };
        let exact = pad(CARD_MAX_BYTES - len);
        assert_eq!(crate::canon::to_vec(&exact).unwrap().len(), CARD_MAX_BYTES);
        Card::verify(&exact, now(), false).unwrap();
        let over = pad(CARD_MAX_BYTES - len + 1);
        assert!(matches!(refused(&over), Error::TooLarge { .. }));
    }

    #[test]
    fn relays() {
        let relays = |rs: Vec<&str>| {
            let mut b = builder();
            b.relays = rs.into_iter().map(String::from).collect();
            b.sign(&key(1)).unwrap()
        };
        let sixteen: Vec<String> = (0..16).map(|i| format!("wss://r{i}.example")).collect();
        let d = relays(sixteen.iter().map(String::as_str).collect());
        assert_eq!(Card::verify(&d, now(), false).unwrap().relays.len(), 16);
        let seventeen: Vec<String> = (0..17).map(|i| format!("wss://r{i}.example")).collect();
        let d = relays(seventeen.iter().map(String::as_str).collect());
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "rendezvous"));
        assert!(
            matches!(refused(&relays(vec![])), Error::Shape { field, .. } if field == "rendezvous")
        );
        // Other transports do not count as relays.
        let mut b = builder();
        b.relays.clear();
        b.other_rendezvous = vec![json!({"type": "ntfy", "topic": "x", "pref": 2})];
        assert!(
            matches!(refused(&b.sign(&key(1)).unwrap()), Error::Shape { field, .. } if field == "rendezvous")
        );
        let ws = relays(vec!["ws://localhost:7000"]);
        assert!(
            matches!(refused(&ws), Error::Shape { field, .. } if field == "rendezvous[0].relay")
        );
        Card::verify(&ws, now(), true).unwrap();
        for bad in [
            "https://relay.example",
            "wss://",
            "relay.example",
            "wss://a b",
        ] {
            assert!(
                refused(&relays(vec![bad])).to_string().contains("relay"),
                "{bad}"
            );
        }
        let d = with(
            &card(1),
            |m| {
                m["rendezvous"][0].as_object_mut().unwrap().remove("type");
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "rendezvous[0].type"));
        let d = with(
            &card(1),
            |m| {
                m["rendezvous"][0].as_object_mut().unwrap().remove("relay");
            },
            1,
        );
        assert!(
            matches!(refused(&d), Error::Shape { field, .. } if field == "rendezvous[0].relay")
        );
    }

    #[test]
    fn discovery_addresses() {
        let d = with(
            &card(1),
            |m| {
                m["discovery"]["addresses"][0]["type"] = json!("phone");
            },
            1,
        );
        assert!(
            matches!(refused(&d), Error::Shape { field, .. } if field == "discovery.addresses[0].value")
        );
        let d = with(
            &card(1),
            |m| {
                m["discovery"]["addresses"][0]["type"] = json!("fax");
            },
            1,
        );
        assert!(
            matches!(refused(&d), Error::Shape { field, .. } if field == "discovery.addresses[0].type")
        );
        let d = with(
            &card(1),
            |m| {
                m["discovery"]["addresses"][0]["value"] = json!("not an address");
            },
            1,
        );
        assert!(
            matches!(refused(&d), Error::Shape { field, .. } if field == "discovery.addresses[0].value")
        );
        let d = with(
            &card(1),
            |m| {
                m["discovery"]["public_pointer"] = json!("yes");
            },
            1,
        );
        assert!(
            matches!(refused(&d), Error::Shape { field, .. } if field == "discovery.public_pointer")
        );
        let d = with(
            &card(1),
            |m| {
                m["owner"]["name"] = json!(5);
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "owner.name"));
    }

    #[test]
    fn policy() {
        let d = with(
            &card(1),
            |m| {
                m["policy"]["inbound"] = json!("maybe");
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "policy.inbound"));
        let d = with(
            &card(1),
            |m| {
                m["policy"].as_object_mut().unwrap().remove("public");
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "policy.public"));
        let d = with(
            &card(1),
            |m| {
                m.remove("policy");
            },
            1,
        );
        assert!(matches!(refused(&d), Error::Shape { field, .. } if field == "policy"));
    }

    #[test]
    fn newest_created_wins() {
        let mk = |created: &str, n: u8| {
            let mut b = builder();
            b.created = t(created);
            Card::verify(&b.sign(&key(n)).unwrap(), now(), false).unwrap()
        };
        let a = mk("2026-10-01T00:00:00Z", 1);
        let b = mk("2026-10-03T00:00:00Z", 1);
        let c = mk("2026-10-02T00:00:00Z", 1);
        let other = mk("2026-10-05T00:00:00Z", 2);
        let all = [a.clone(), b.clone(), c.clone(), other.clone()];
        assert_eq!(newest_card(key(1).id(), &all).unwrap().created, b.created);
        assert_eq!(newest_card(key(2).id(), &all).unwrap().id, other.id);
        assert!(newest_card(key(3).id(), &all).is_none());
        assert!(b.supersedes(&a) && !a.supersedes(&b) && !a.supersedes(&a));
        assert!(
            !other.supersedes(&a),
            "another agent's card never supersedes"
        );
    }
}
