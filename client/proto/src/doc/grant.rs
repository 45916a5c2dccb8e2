//! The contact grant and the reverse grant (§5.3). Signed by `from`, the
//! grantor; it sets only what `to` may do towards `from`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::consts::{
    EXT_MEETING_CANCEL, EXT_MEETINGS, GRANT_MAX_AHEAD_SECS, INVOKE_MAX_KEYS, INVOKE_MAX_URI_LEN,
    TIERS,
};
use crate::error::{Error, Result};
use crate::keys::{AgentId, AgentKey};
use crate::time::{Instant, parse_frequency};

use super::card::{Card, nullable_time};
use super::obj::Obj;
use super::{open_signed, opt_time_value, sign_pairs, time_value, url_with_scheme};

/// `type` of a grant.
pub const GRANT_TYPE: &str = "rdv/contact-grant";

/// A `max_frequency` (§5.3): `count` per `window_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frequency {
    pub count: u64,
    pub window_secs: i64,
}

impl Frequency {
    pub(crate) fn parse(field: &str, s: &str) -> Result<Self> {
        let (count, window_secs) = parse_frequency(field, s)?;
        Ok(Self { count, window_secs })
    }
}

/// The limits of one `scope.invoke` entry (§5.3). Unknown limit fields are
/// ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InvokeLimits {
    pub max_frequency: Option<Frequency>,
    /// Tasks not yet terminal; the receiver's default is 4 when absent.
    pub max_open: Option<u64>,
}

/// A grant's scope (§5.3): an open object, so unknown members are kept in
/// `raw` and tolerated; the known ones are typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    pub may_initiate: Option<bool>,
    pub may_propose_meetings: Option<bool>,
    pub may_access_calendar: Option<String>,
    pub max_frequency: Option<Frequency>,
    pub invoke: Option<BTreeMap<String, InvokeLimits>>,
    pub raw: Map<String, Value>,
}

/// Whether `may_propose_meetings` agrees with `invoke` (§5.3 migration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeetingsConsistency {
    /// No invoke, or invoke and the boolean agree.
    Consistent,
    /// invoke without may_propose_meetings: the grant breaks "MUST also
    /// write", but a receiver reads invoke.
    MissingBoolean,
    /// Both present and they disagree: no meetings.
    Inconsistent,
}

impl Scope {
    /// Parses a scope (for a grant, or read back from storage).
    pub fn parse(v: &Value, path: &str) -> Result<Self> {
        let mut o = Obj::new(v, path)?;
        let may_initiate = opt_bool(&mut o, "may_initiate")?;
        let may_propose_meetings = opt_bool(&mut o, "may_propose_meetings")?;
        let may_access_calendar = match o.opt("may_access_calendar") {
            None => None,
            Some(_) => Some(o.str("may_access_calendar")?.to_string()),
        };
        let max_frequency = match o.opt("max_frequency") {
            None => None,
            Some(_) => Some(Frequency::parse(
                &o.path("max_frequency"),
                o.str("max_frequency")?,
            )?),
        };
        let invoke = match o.opt("invoke") {
            None => None,
            Some(v) => Some(parse_invoke(v, &o.path("invoke"))?),
        };
        Ok(Self {
            may_initiate,
            may_propose_meetings,
            may_access_calendar,
            max_frequency,
            invoke,
            raw: o.map().clone(),
        })
    }

    /// §5.3, §7.4: see [`allows_meetings`].
    pub fn allows_meetings(&self) -> bool {
        allows_meetings(self)
    }

    /// §5.3: a grant with invoke MUST also write may_propose_meetings,
    /// consistent with it. Reported as data: the receiver still applies
    /// [`allows_meetings`].
    pub fn meetings_consistency(&self) -> MeetingsConsistency {
        match (&self.invoke, self.may_propose_meetings) {
            (None, _) => MeetingsConsistency::Consistent,
            (Some(_), None) => MeetingsConsistency::MissingBoolean,
            (Some(inv), Some(b)) if inv.contains_key(EXT_MEETINGS) == b => {
                MeetingsConsistency::Consistent
            }
            (Some(_), Some(_)) => MeetingsConsistency::Inconsistent,
        }
    }

    /// The limits under which the grantee may invoke `cap`, or `None`: deny
    /// by default, no wildcard (§5.3). Only invoke keys allow a capability,
    /// except the meetings and meeting-cancel URIs (§5.3 migration, §7.4):
    /// without invoke, `may_propose_meetings: true` allows both with default
    /// limits; when invoke and the boolean disagree, neither is allowed.
    pub fn may_invoke(&self, cap: &str) -> Option<&InvokeLimits> {
        /// What `may_propose_meetings: true` reads as: no limits given.
        static BOOLEAN_MEETINGS: InvokeLimits = InvokeLimits {
            max_frequency: None,
            max_open: None,
        };
        let meeting_uri = cap == EXT_MEETINGS || cap == EXT_MEETING_CANCEL;
        match &self.invoke {
            None if meeting_uri && self.may_propose_meetings == Some(true) => {
                Some(&BOOLEAN_MEETINGS)
            }
            None => None,
            Some(_)
                if meeting_uri
                    && self.meetings_consistency() == MeetingsConsistency::Inconsistent =>
            {
                None
            }
            Some(inv) => inv.get(cap),
        }
    }
}

/// §5.3 migration, §7.4: read invoke first (the meetings URI); without
/// invoke fall back to may_propose_meetings; both present and disagreeing
/// is the narrower, no meetings. The same rule as
/// `scope.may_invoke(EXT_MEETINGS)`.
pub fn allows_meetings(scope: &Scope) -> bool {
    scope.may_invoke(EXT_MEETINGS).is_some()
}

fn opt_bool<'a>(o: &mut Obj<'a>, key: &'a str) -> Result<Option<bool>> {
    match o.opt(key) {
        None => Ok(None),
        Some(_) => o.bool(key).map(Some),
    }
}

/// §5.3 `scope.invoke`: at most 32 https URIs of at most 200 characters,
/// each mapping to an object of limits.
pub(crate) fn parse_invoke(v: &Value, path: &str) -> Result<BTreeMap<String, InvokeLimits>> {
    let o = Obj::new(v, path)?;
    let map = o.map();
    if map.len() > INVOKE_MAX_KEYS {
        return Err(Error::shape(
            path,
            format!("more than {INVOKE_MAX_KEYS} capabilities"),
        ));
    }
    let mut out = BTreeMap::new();
    for (k, lim) in map {
        let p = format!("{path}[{k:?}]");
        if k.chars().count() > INVOKE_MAX_URI_LEN || !url_with_scheme(k, "https", usize::MAX) {
            return Err(Error::shape(
                p,
                format!("keys must be https URIs of at most {INVOKE_MAX_URI_LEN} characters"),
            ));
        }
        let mut l = Obj::new(lim, &p)?;
        let max_frequency = match l.opt("max_frequency") {
            None => None,
            Some(_) => Some(Frequency::parse(
                &l.path("max_frequency"),
                l.str("max_frequency")?,
            )?),
        };
        let max_open = match l.opt("max_open") {
            None => None,
            Some(_) => Some(l.positive("max_open")? as u64),
        };
        // Limit fields we do not know are ignored (§5.3).
        out.insert(
            k.clone(),
            InvokeLimits {
                max_frequency,
                max_open,
            },
        );
    }
    Ok(out)
}

/// What a grant answers: a request (or probe), or, for a reverse grant, the
/// grant that founded the contact (§5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantRef {
    Request(String),
    Grant(String),
}

/// A verified grant.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub id: String,
    pub from: AgentId,
    pub to: AgentId,
    pub reference: GrantRef,
    /// The grantor's card: verified, unexpired, `id` equal to `from`.
    pub card: Card,
    pub tier: String,
    pub scope: Scope,
    pub expires: Option<Instant>,
    pub ts: Instant,
    pub hash: String,
    pub doc: Value,
}

impl Grant {
    /// Verifies a grant at `now` (an expired one is refused); `allow_ws` is
    /// passed to its card.
    pub fn verify(doc: &Value, now: Instant, allow_ws: bool) -> Result<Self> {
        Self::verify_at(doc, "", now, allow_ws)
    }

    pub(crate) fn verify_at(doc: &Value, path: &str, now: Instant, allow_ws: bool) -> Result<Self> {
        let (mut o, from, hash) = open_signed(doc, path, "contact grant", "from", None)?;
        o.version()?;
        o.doc_type(GRANT_TYPE)?;
        let id = o.uuid("id")?.to_string();
        let to = o.id("to")?;
        let req = o.opt("request_ref").is_some();
        let gr = o.opt("grant_ref").is_some();
        let reference = match (req, gr) {
            (true, false) => GrantRef::Request(o.uuid("request_ref")?.to_string()),
            (false, true) => GrantRef::Grant(o.uuid("grant_ref")?.to_string()),
            _ => {
                return Err(o.err(
                    "request_ref",
                    "exactly one of request_ref and grant_ref is required",
                ));
            }
        };
        let card = Card::verify_at(o.req("card")?, &o.path("card"), now, allow_ws)?;
        if card.id != from {
            return Err(o.err("card", "card.id is not the grant's from"));
        }
        let tier = o.str("tier")?;
        if !TIERS.contains(&tier) {
            return Err(o.err("tier", format!("must be one of {}", TIERS.join(", "))));
        }
        let scope = Scope::parse(o.req("scope")?, &o.path("scope"))?;
        let expires = nullable_time(&mut o, "expires")?;
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        if expires.is_some_and(|e| now >= e) {
            return Err(Error::Expired);
        }
        Ok(Self {
            id,
            from,
            to,
            reference,
            card,
            tier: tier.to_string(),
            scope,
            expires,
            ts,
            hash,
            doc: doc.clone(),
        })
    }

    /// Whether this is a reverse grant (§5.3).
    pub fn is_reverse(&self) -> bool {
        matches!(self.reference, GrantRef::Grant(_))
    }
}

/// What a receiver knows when a reverse grant arrives (§5.3).
#[derive(Debug, Clone, Copy)]
pub struct ReverseGrantContext<'a> {
    /// The receiver's own ID.
    pub me: &'a AgentId,
    /// The id of the grant that founded the contact.
    pub founding_grant_id: &'a str,
    /// The ts of the grant from this peer that the new one replaces.
    pub replaces_ts: Instant,
    /// The contact's current expiry (none: it does not expire).
    pub contact_expires: Option<Instant>,
    pub now: Instant,
}

/// §5.3: the pure receiver rules of a reverse grant. The caller has checked
/// that the sender is a current contact and the id is unseen. Returns the
/// contact's expiry after it: the grant may shorten the contact, never
/// extend it, so a later (or absent) expires leaves it as it was.
pub fn check_reverse_grant(g: &Grant, ctx: &ReverseGrantContext<'_>) -> Result<Option<Instant>> {
    match &g.reference {
        GrantRef::Grant(r) if r == ctx.founding_grant_id => {}
        GrantRef::Grant(_) => {
            return Err(Error::shape("grant_ref", "is not the founding grant"));
        }
        GrantRef::Request(_) => {
            return Err(Error::shape("grant_ref", "missing: not a reverse grant"));
        }
    }
    if &g.to != ctx.me {
        return Err(Error::shape("to", "not addressed to this agent"));
    }
    if g.ts <= ctx.replaces_ts {
        return Err(Error::shape("ts", "not newer than the grant it replaces"));
    }
    if (g.ts - ctx.now).whole_seconds() > GRANT_MAX_AHEAD_SECS {
        return Err(Error::FromFuture("ts"));
    }
    if g.expires.is_some_and(|e| ctx.now >= e) {
        return Err(Error::Expired);
    }
    Ok(match (ctx.contact_expires, g.expires) {
        (Some(c), Some(e)) => Some(c.min(e)),
        (c, e) => c.or(e),
    })
}

/// A grant before it is signed (§5.3).
#[derive(Debug, Clone)]
pub struct GrantBuilder {
    pub id: String,
    pub to: AgentId,
    pub reference: GrantRef,
    /// The grantor's signed card.
    pub card: Value,
    pub tier: String,
    pub scope: Value,
    pub expires: Option<Instant>,
    pub ts: Instant,
}

impl GrantBuilder {
    /// The signed grant, `from` being `key`'s.
    pub fn sign(&self, key: &AgentKey) -> Result<Value> {
        let (rk, rv) = match &self.reference {
            GrantRef::Request(r) => ("request_ref", r),
            GrantRef::Grant(g) => ("grant_ref", g),
        };
        sign_pairs(
            vec![
                ("v", json!(1)),
                ("type", json!(GRANT_TYPE)),
                ("id", json!(self.id)),
                ("from", json!(key.id().as_str())),
                ("to", json!(self.to.as_str())),
                (rk, json!(rv)),
                ("card", self.card.clone()),
                ("tier", json!(self.tier)),
                ("scope", self.scope.clone()),
                ("expires", opt_time_value(self.expires)),
                ("ts", time_value(self.ts)),
            ],
            key,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use crate::doc::card::tests::card;
    use crate::doc::request::tests::REQ_ID;
    use crate::doc::resign;
    use crate::doc::testutil::{key, now, t};

    pub const GRANT_ID: &str = "7a1b2c3d-4e5f-4a6b-9c7d-9e0f1a2b3c4d";
    const REVERSE_ID: &str = "8b1b2c3d-4e5f-4a6b-ac7d-9e0f1a2b3c4d";

    pub fn builder(from: u8, to: u8) -> GrantBuilder {
        GrantBuilder {
            id: GRANT_ID.into(),
            to: key(to).id().clone(),
            reference: GrantRef::Request(REQ_ID.into()),
            card: card(from),
            tier: "colleague".into(),
            scope: json!({
                "may_initiate": true,
                "may_propose_meetings": true,
                "may_access_calendar": "free_busy",
                "max_frequency": "20/day",
                "invoke": {
                    EXT_MEETINGS: {},
                    EXT_MEETING_CANCEL: {},
                    "https://rendezvous.nesher.co/ext/review/v1": {"max_frequency": "5/day", "max_open": 2, "future": 1}
                },
                "vendor_scope": {"x": 1}
            }),
            expires: Some(t("2027-10-08T00:00:00Z")),
            ts: t("2026-10-08T11:30:00Z"),
        }
    }

    /// A valid grant from agent 2 to agent 1.
    pub fn grant() -> Value {
        builder(2, 1).sign(&key(2)).unwrap()
    }

    fn with(f: impl FnOnce(&mut Map<String, Value>)) -> Value {
        let mut d = grant();
        f(d.as_object_mut().unwrap());
        resign(&d, &key(2)).unwrap()
    }

    fn field_err(d: &Value) -> String {
        match Grant::verify(d, now(), false).unwrap_err() {
            Error::Shape { field, .. } => field,
            Error::UnknownField(f) => format!("unknown {f}"),
            e => format!("{e:?}"),
        }
    }

    fn scope(v: Value) -> Scope {
        Scope::parse(&v, "scope").unwrap()
    }

    #[test]
    fn valid_grant_verifies() {
        let g = Grant::verify(&grant(), now(), false).unwrap();
        assert_eq!(&g.from, key(2).id());
        assert_eq!(&g.to, key(1).id());
        assert_eq!(g.reference, GrantRef::Request(REQ_ID.into()));
        assert!(!g.is_reverse());
        assert!(g.scope.allows_meetings());
        assert_eq!(
            g.scope.meetings_consistency(),
            MeetingsConsistency::Consistent
        );
        let review = g
            .scope
            .may_invoke("https://rendezvous.nesher.co/ext/review/v1")
            .unwrap();
        assert_eq!(review.max_open, Some(2));
        assert_eq!(
            review.max_frequency,
            Some(Frequency {
                count: 5,
                window_secs: 86400
            })
        );
        assert!(g.scope.raw.contains_key("vendor_scope"));
        for tier in TIERS {
            Grant::verify(
                &with(|m| {
                    m["tier"] = json!(tier);
                }),
                now(),
                false,
            )
            .unwrap();
        }
        Grant::verify(
            &with(|m| {
                m["expires"] = Value::Null;
            }),
            now(),
            false,
        )
        .unwrap();
    }

    #[test]
    fn tampered_fails_signature() {
        let mut d = grant();
        d["tier"] = json!("spouse");
        assert_eq!(Grant::verify(&d, now(), false), Err(Error::BadSignature));
    }

    #[test]
    fn refs_both_or_neither() {
        let both = with(|m| {
            m.insert("grant_ref".into(), json!(GRANT_ID));
        });
        assert_eq!(field_err(&both), "request_ref");
        let neither = with(|m| {
            m.remove("request_ref");
        });
        assert_eq!(field_err(&neither), "request_ref");
        let rev = with(|m| {
            m.remove("request_ref");
            m.insert("grant_ref".into(), json!(GRANT_ID));
        });
        assert!(Grant::verify(&rev, now(), false).unwrap().is_reverse());
        assert_eq!(
            field_err(&with(|m| {
                m["request_ref"] = json!("r-1");
            })),
            "request_ref"
        );
        let bad_gr = with(|m| {
            m.remove("request_ref");
            m.insert("grant_ref".into(), json!("g-1"));
        });
        assert_eq!(field_err(&bad_gr), "grant_ref");
    }

    #[test]
    fn rules() {
        assert_eq!(
            field_err(&with(|m| {
                m["id"] = json!("grant-1");
            })),
            "id"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["tier"] = json!("boss");
            })),
            "tier"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["scope"] = json!([]);
            })),
            "scope"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["to"] = json!("rdv1:nope");
            })),
            "to"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["card"] = card(1);
            })),
            "card"
        );
        assert_eq!(
            field_err(&with(|m| {
                m.insert("x".into(), json!(1));
            })),
            "unknown x"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["type"] = json!("rdv/revoke");
            })),
            "type"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["expires"] = json!("2026-10-08T12:00:00Z");
            })),
            "Expired"
        );
        assert_eq!(
            field_err(&with(|m| {
                m.remove("expires");
            })),
            "expires"
        );
        let expired_card = resign(
            &{
                let mut c = card(2);
                c["expires"] = json!("2026-10-01T00:00:00Z");
                c
            },
            &key(2),
        )
        .unwrap();
        assert_eq!(
            field_err(&with(|m| {
                m["card"] = expired_card;
            })),
            "Expired"
        );
    }

    #[test]
    fn scope_shape() {
        let e = |s: Value| {
            field_err(&with(|m| {
                m["scope"] = s;
            }))
        };
        assert_eq!(e(json!({"may_initiate": "yes"})), "scope.may_initiate");
        assert_eq!(
            e(json!({"may_propose_meetings": 1})),
            "scope.may_propose_meetings"
        );
        assert_eq!(
            e(json!({"may_access_calendar": true})),
            "scope.may_access_calendar"
        );
        assert_eq!(
            e(json!({"max_frequency": "20/week"})),
            "scope.max_frequency"
        );
        assert_eq!(e(json!({"invoke": []})), "scope.invoke");
        assert_eq!(
            e(json!({"invoke": {"http://x.example/a": {}}})),
            "scope.invoke[\"http://x.example/a\"]"
        );
        assert_eq!(
            e(json!({"invoke": {"https://x.example/a": true}})),
            "scope.invoke[\"https://x.example/a\"]"
        );
        assert_eq!(
            e(json!({"invoke": {"https://x.example/a": {"max_open": 0}}})),
            "scope.invoke[\"https://x.example/a\"].max_open"
        );
        assert_eq!(
            e(json!({"invoke": {"https://x.example/a": {"max_open": "2"}}})),
            "scope.invoke[\"https://x.example/a\"].max_open"
        );
        assert_eq!(
            e(json!({"invoke": {"https://x.example/a": {"max_frequency": "x"}}})),
            "scope.invoke[\"https://x.example/a\"].max_frequency"
        );
        // Key length and count at the bound pass, one past fails.
        let uri = |len: usize| {
            format!(
                "https://x.example/{}",
                "a".repeat(len - "https://x.example/".len())
            )
        };
        Grant::verify(
            &with(|m| {
                m["scope"] = json!({"invoke": {uri(200): {}}});
            }),
            now(),
            false,
        )
        .unwrap();
        assert!(e(json!({"invoke": {uri(201): {}}})).starts_with("scope.invoke["));
        let keys = |n: usize| -> Map<String, Value> {
            (0..n)
                .map(|i| (format!("https://x.example/{i}"), json!({})))
                .collect()
        };
        Grant::verify(
            &with(|m| {
                m["scope"] = json!({"invoke": keys(32)});
            }),
            now(),
            false,
        )
        .unwrap();
        assert_eq!(e(json!({"invoke": keys(33)})), "scope.invoke");
    }

    #[test]
    fn meetings_migration_rule() {
        let m = EXT_MEETINGS;
        assert!(allows_meetings(&scope(
            json!({"may_propose_meetings": true})
        )));
        assert!(!allows_meetings(&scope(
            json!({"may_propose_meetings": false})
        )));
        assert!(!allows_meetings(&scope(json!({}))));
        // invoke is read first.
        assert!(allows_meetings(&scope(json!({"invoke": {m: {}}}))));
        assert!(!allows_meetings(&scope(json!({"invoke": {}}))));
        assert!(allows_meetings(&scope(
            json!({"invoke": {m: {}}, "may_propose_meetings": true})
        )));
        // Inconsistent both ways: the narrower, no meetings.
        assert!(!allows_meetings(&scope(
            json!({"invoke": {m: {}}, "may_propose_meetings": false})
        )));
        assert!(!allows_meetings(&scope(
            json!({"invoke": {}, "may_propose_meetings": true})
        )));
        use MeetingsConsistency::*;
        assert_eq!(
            scope(json!({"invoke": {m: {}}})).meetings_consistency(),
            MissingBoolean
        );
        assert_eq!(
            scope(json!({"invoke": {}, "may_propose_meetings": true})).meetings_consistency(),
            Inconsistent
        );
        assert_eq!(
            scope(json!({"invoke": {m: {}}, "may_propose_meetings": false})).meetings_consistency(),
            Inconsistent
        );
        assert_eq!(
            scope(json!({"invoke": {}, "may_propose_meetings": false})).meetings_consistency(),
            Consistent
        );
        assert_eq!(
            scope(json!({"may_propose_meetings": true})).meetings_consistency(),
            Consistent
        );
    }

    fn reverse(f: impl FnOnce(&mut GrantBuilder)) -> Grant {
        // Agent 1 (the requester) grants agent 2 back.
        let mut b = builder(1, 2);
        b.id = REVERSE_ID.into();
        b.reference = GrantRef::Grant(GRANT_ID.into());
        b.tier = "friend".into();
        b.expires = Some(t("2027-01-01T00:00:00Z"));
        b.ts = t("2026-10-08T12:01:00Z");
        f(&mut b);
        Grant::verify(&b.sign(&key(1)).unwrap(), now(), false).unwrap()
    }

    #[test]
    fn reverse_grant_receiver_rules() {
        let me = key(2).id().clone();
        let ctx = ReverseGrantContext {
            me: &me,
            founding_grant_id: GRANT_ID,
            replaces_ts: t("2026-10-08T11:30:00Z"),
            contact_expires: Some(t("2027-10-08T00:00:00Z")),
            now: now(),
        };
        assert_eq!(
            check_reverse_grant(&reverse(|_| {}), &ctx).unwrap(),
            Some(t("2027-01-01T00:00:00Z"))
        );
        // expires never extends the contact.
        assert_eq!(
            check_reverse_grant(&reverse(|b| b.expires = None), &ctx).unwrap(),
            Some(t("2027-10-08T00:00:00Z"))
        );
        assert_eq!(
            check_reverse_grant(
                &reverse(|b| b.expires = Some(t("2030-01-01T00:00:00Z"))),
                &ctx
            )
            .unwrap(),
            Some(t("2027-10-08T00:00:00Z"))
        );
        let open = ReverseGrantContext {
            contact_expires: None,
            ..ctx
        };
        assert_eq!(
            check_reverse_grant(&reverse(|_| {}), &open).unwrap(),
            Some(t("2027-01-01T00:00:00Z"))
        );
        // Addressed to me.
        let other = key(3).id().clone();
        assert!(
            check_reverse_grant(&reverse(|_| {}), &ReverseGrantContext { me: &other, ..ctx })
                .is_err()
        );
        // grant_ref is the founding grant; a forward grant is not a reverse one.
        assert!(
            check_reverse_grant(
                &reverse(|b| b.reference = GrantRef::Grant(REVERSE_ID.into())),
                &ctx
            )
            .is_err()
        );
        assert!(
            check_reverse_grant(
                &reverse(|b| b.reference = GrantRef::Request(REQ_ID.into())),
                &ctx
            )
            .is_err()
        );
        // ts newer than the grant it replaces, and at most 5 minutes ahead.
        assert!(check_reverse_grant(&reverse(|b| b.ts = t("2026-10-08T11:30:00Z")), &ctx).is_err());
        assert!(check_reverse_grant(&reverse(|b| b.ts = t("2026-10-08T12:05:00Z")), &ctx).is_ok());
        assert_eq!(
            check_reverse_grant(&reverse(|b| b.ts = t("2026-10-08T12:05:01Z")), &ctx),
            Err(Error::FromFuture("ts"))
        );
        // Not expired at the receiver's now.
        let g = reverse(|b| b.expires = Some(t("2026-10-08T12:30:00Z")));
        assert_eq!(
            check_reverse_grant(
                &g,
                &ReverseGrantContext {
                    now: t("2026-10-08T12:30:00Z"),
                    ..ctx
                }
            ),
            Err(Error::Expired)
        );
    }

    #[test]
    fn may_invoke_reads_the_meetings_boolean_when_invoke_is_absent() {
        let (m, mc) = (EXT_MEETINGS, EXT_MEETING_CANCEL);
        let review = "https://rendezvous.nesher.co/ext/review/v1";
        let default = Some(&InvokeLimits::default());
        // §5.3: may_propose_meetings: true is invoke holding both meeting URIs.
        let s = scope(json!({"may_propose_meetings": true, "max_frequency": "20/day"}));
        assert_eq!(s.may_invoke(m), default);
        assert_eq!(s.may_invoke(mc), default);
        assert!(s.allows_meetings());
        // Only the meeting URIs: anything else needs an invoke key.
        for other in [
            review,
            crate::consts::EXT_GROUPS,
            "https://rendezvous.nesher.co/ext/tasks/v1",
        ] {
            assert_eq!(s.may_invoke(other), None, "{other}");
        }
        for s in [
            scope(json!({"may_propose_meetings": false})),
            scope(json!({})),
        ] {
            assert_eq!(s.may_invoke(m), None);
            assert_eq!(s.may_invoke(mc), None);
        }
    }

    #[test]
    fn may_invoke_reads_invoke_first() {
        let (m, mc) = (EXT_MEETINGS, EXT_MEETING_CANCEL);
        let review = "https://rendezvous.nesher.co/ext/review/v1";
        let two = InvokeLimits {
            max_frequency: None,
            max_open: Some(2),
        };
        // Consistent: invoke's own limits, and only what it lists.
        let s = scope(json!({"invoke": {m: {"max_open": 2}}, "may_propose_meetings": true}));
        assert_eq!(s.may_invoke(m), Some(&two));
        assert_eq!(s.may_invoke(mc), None, "invoke is read, not the boolean");
        // No boolean beside invoke (it breaks "MUST also write"): invoke is read.
        let s = scope(json!({"invoke": {m: {}, mc: {}}}));
        assert_eq!(s.may_invoke(m), Some(&InvokeLimits::default()));
        assert_eq!(s.may_invoke(mc), Some(&InvokeLimits::default()));
        // Both false and absent from invoke: no meetings, other keys still read.
        let s = scope(json!({"invoke": {review: {}}, "may_propose_meetings": false}));
        assert_eq!(s.may_invoke(m), None);
        assert_eq!(s.may_invoke(review), Some(&InvokeLimits::default()));
    }

    #[test]
    fn may_invoke_allows_no_meetings_when_invoke_and_boolean_disagree() {
        let (m, mc) = (EXT_MEETINGS, EXT_MEETING_CANCEL);
        let review = "https://rendezvous.nesher.co/ext/review/v1";
        for s in [
            // invoke lists meetings, the boolean says no.
            json!({"invoke": {m: {}, mc: {}, review: {}}, "may_propose_meetings": false}),
            // The boolean says yes, invoke does not list meetings.
            json!({"invoke": {mc: {}, review: {}}, "may_propose_meetings": true}),
            json!({"invoke": {review: {}}, "may_propose_meetings": true}),
        ] {
            let s = scope(s);
            assert_eq!(s.meetings_consistency(), MeetingsConsistency::Inconsistent);
            assert_eq!(s.may_invoke(m), None, "{:?}", s.raw);
            assert_eq!(s.may_invoke(mc), None, "{:?}", s.raw);
            assert!(!s.allows_meetings());
            // Other capabilities are not the meetings' business.
            assert_eq!(s.may_invoke(review), Some(&InvokeLimits::default()));
        }
    }
}
