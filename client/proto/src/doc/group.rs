//! Group membership documents (§7.8.1, §7.8.2, §7.8.5): the state, the
//! invite, the join and the leave. Each is signed by its `from`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::consts::{
    EXT_GROUPS, GROUP_GREETING_MAX, GROUP_INVITE_MAX_EXPIRY_SECS, GROUP_JOIN_MAX_BYTES,
    GROUP_MAX_MEMBERS, GROUP_MEMBER_NAME_MAX, GROUP_NAME_MAX, GROUP_STATE_MAX_BYTES,
};
use crate::error::{Error, Result};
use crate::keys::{AgentId, AgentKey};
use crate::time::Instant;

use super::card::Card;
use super::grant::{Frequency, InvokeLimits, parse_invoke};
use super::obj::Obj;
use super::{open_signed, sign_pairs, time_value};

pub const GROUP_STATE_TYPE: &str = "rdv/group-state";
pub const GROUP_INVITE_TYPE: &str = "rdv/group-invite";
pub const GROUP_JOIN_TYPE: &str = "rdv/group-join";
pub const GROUP_LEAVE_TYPE: &str = "rdv/group-leave";

/// A member's role (§7.8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Member => "member",
        }
    }
}

/// One entry of `members`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: AgentId,
    pub role: Role,
    /// Hex SHA-256 of the canonical JSON of the member's card.
    pub card: String,
    /// Display text the admin wrote (§5.6), never verified.
    pub name: Option<String>,
}

/// A verified group state (§7.8.1).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupState {
    pub group: String,
    pub epoch: u64,
    pub prev: Option<String>,
    pub from: AgentId,
    pub members: Vec<Member>,
    pub member_rate: Frequency,
    pub name: String,
    pub ts: Instant,
    pub hash: String,
    pub doc: Value,
}

impl GroupState {
    /// Verifies a state: ≤ 8 KiB, signed by `from`, strict shape (unknown
    /// fields anywhere refused), and for epoch 0 `from` an admin in it.
    pub fn verify(doc: &Value) -> Result<Self> {
        Self::verify_at(doc, "")
    }

    pub(crate) fn verify_at(doc: &Value, path: &str) -> Result<Self> {
        let (mut o, from, hash) = open_signed(
            doc,
            path,
            "group state",
            "from",
            Some(GROUP_STATE_MAX_BYTES),
        )?;
        o.version()?;
        o.doc_type(GROUP_STATE_TYPE)?;
        let group = o.uuid("group")?.to_string();
        let epoch = o.int("epoch")?;
        if epoch < 0 {
            return Err(o.err("epoch", "must be an integer ≥ 0"));
        }
        let prev = match (epoch, o.req("prev")?) {
            (0, Value::Null) => None,
            (0, _) => return Err(o.err("prev", "must be null at epoch 0")),
            (_, Value::Null) => return Err(o.err("prev", "must be a hash after epoch 0")),
            _ => Some(o.hash("prev")?.to_string()),
        };
        let members = members(&mut o)?;
        let mut p = o.object("policy")?;
        let member_rate = Frequency::parse(&p.path("member_rate"), p.str("member_rate")?)?;
        if p.bool("members_may_invite")? {
            return Err(p.err("members_may_invite", "reserved: must be false"));
        }
        p.deny_unknown()?;
        let name = o.text("name", GROUP_NAME_MAX)?;
        if name.is_empty() {
            return Err(o.err("name", format!("must be 1 to {GROUP_NAME_MAX} characters")));
        }
        let name = name.to_string();
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        let s = Self {
            group,
            epoch: epoch as u64,
            prev,
            from,
            members,
            member_rate,
            name,
            ts,
            hash,
            doc: doc.clone(),
        };
        if s.epoch == 0 && !s.is_admin(&s.from) {
            return Err(Error::shape(
                join_path(path, "from"),
                "epoch 0 must be signed by an admin listed in it",
            ));
        }
        Ok(s)
    }

    pub fn member(&self, id: &AgentId) -> Option<&Member> {
        self.members.iter().find(|m| &m.id == id)
    }

    pub fn is_member(&self, id: &AgentId) -> bool {
        self.member(id).is_some()
    }

    pub fn is_admin(&self, id: &AgentId) -> bool {
        self.member(id).is_some_and(|m| m.role == Role::Admin)
    }
}

/// §7.8.1 chain: `next` is a valid successor of `prev` (same group, epoch one
/// higher, prev the hash of `prev`, signed by an admin of `prev`).
pub fn check_successor(prev: &GroupState, next: &GroupState) -> Result<()> {
    if next.group != prev.group {
        return Err(Error::shape("group", "not the same group"));
    }
    if Some(next.epoch) != prev.epoch.checked_add(1) {
        return Err(Error::shape(
            "epoch",
            "must be one higher than the state before",
        ));
    }
    if next.prev.as_deref() != Some(prev.hash.as_str()) {
        return Err(Error::shape("prev", "is not the hash of the state before"));
    }
    if !prev.is_admin(&next.from) {
        return Err(Error::shape("from", "is not an admin of the state before"));
    }
    Ok(())
}

/// [`check_successor`] as a predicate.
pub fn is_valid_successor(prev: &GroupState, next: &GroupState) -> bool {
    check_successor(prev, next).is_ok()
}

fn join_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn members(o: &mut Obj<'_>) -> Result<Vec<Member>> {
    let arr = o.array("members")?;
    if arr.is_empty() || arr.len() > GROUP_MAX_MEMBERS {
        return Err(o.err(
            "members",
            format!("must list 1 to {GROUP_MAX_MEMBERS} members"),
        ));
    }
    let mut out: Vec<Member> = Vec::with_capacity(arr.len());
    for (i, m) in arr.iter().enumerate() {
        let mut e = Obj::new(m, &o.path(&format!("members[{i}]")))?;
        let id = e.id("id")?;
        let role = match e.str("role")? {
            "admin" => Role::Admin,
            "member" => Role::Member,
            _ => return Err(e.err("role", "must be admin or member")),
        };
        let card = e.hash("card")?.to_string();
        let name = match e.opt("name") {
            None => None,
            Some(_) => Some(e.text("name", GROUP_MEMBER_NAME_MAX)?.to_string()),
        };
        if out.iter().any(|x| x.id == id) {
            return Err(e.err("id", "listed twice"));
        }
        e.deny_unknown()?;
        out.push(Member {
            id,
            role,
            card,
            name,
        });
    }
    if !out.iter().any(|m| m.role == Role::Admin) {
        return Err(o.err("members", "must list at least one admin"));
    }
    Ok(out)
}

/// A group state before it is signed (§7.8.1).
#[derive(Debug, Clone)]
pub struct GroupStateBuilder {
    pub group: String,
    pub epoch: u64,
    pub prev: Option<String>,
    pub members: Vec<Member>,
    pub member_rate: String,
    pub name: String,
    pub ts: Instant,
}

impl GroupStateBuilder {
    /// The signed state, `from` being `key`'s.
    pub fn sign(&self, key: &AgentKey) -> Result<Value> {
        let members: Vec<Value> = self
            .members
            .iter()
            .map(|m| {
                let mut e = json!({"id": m.id.as_str(), "role": m.role.as_str(), "card": m.card});
                if let Some(n) = &m.name {
                    e["name"] = json!(n);
                }
                e
            })
            .collect();
        sign_pairs(
            vec![
                ("v", json!(1)),
                ("type", json!(GROUP_STATE_TYPE)),
                ("group", json!(self.group)),
                ("epoch", json!(self.epoch)),
                ("prev", json!(self.prev)),
                ("from", json!(key.id().as_str())),
                ("members", Value::Array(members)),
                (
                    "policy",
                    json!({"member_rate": self.member_rate, "members_may_invite": false}),
                ),
                ("name", json!(self.name)),
                ("ts", time_value(self.ts)),
            ],
            key,
        )
    }
}

/// A verified group invite (§7.8.2).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupInvite {
    pub id: String,
    pub group: String,
    pub from: AgentId,
    pub to: AgentId,
    /// The group's state: verified, same group, `from` an admin in it, `to`
    /// not in it yet, and room for one more.
    pub state: GroupState,
    pub greeting: String,
    pub expires: Instant,
    pub ts: Instant,
    pub hash: String,
    pub doc: Value,
}

impl GroupInvite {
    /// Verifies an invite at `now`: not expired, and `expires` at most 14
    /// days after both its `ts` and `now`.
    pub fn verify(doc: &Value, now: Instant) -> Result<Self> {
        let (mut o, from, hash) = open_signed(doc, "", "group invite", "from", None)?;
        o.version()?;
        o.doc_type(GROUP_INVITE_TYPE)?;
        let id = o.uuid("id")?.to_string();
        let group = o.uuid("group")?.to_string();
        let to = o.id("to")?;
        let state = GroupState::verify_at(o.req("state")?, "state")?;
        if state.group != group {
            return Err(o.err("state", "is another group's"));
        }
        if !state.is_admin(&from) {
            return Err(o.err("from", "is not an admin of the state it carries"));
        }
        if state.is_member(&to) {
            return Err(o.err("to", "is already in the group"));
        }
        if state.members.len() >= GROUP_MAX_MEMBERS {
            return Err(o.err("state", "the group is full"));
        }
        let greeting = o.text("greeting", GROUP_GREETING_MAX)?.to_string();
        let expires = o.time("expires")?;
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        if (expires - ts).whole_seconds() > GROUP_INVITE_MAX_EXPIRY_SECS
            || (expires - now).whole_seconds() > GROUP_INVITE_MAX_EXPIRY_SECS
        {
            return Err(Error::shape("expires", "more than 14 days ahead"));
        }
        if now >= expires {
            return Err(Error::Expired);
        }
        Ok(Self {
            id,
            group,
            from,
            to,
            state,
            greeting,
            expires,
            ts,
            hash,
            doc: doc.clone(),
        })
    }

    /// The signed invite, `from` being `key`'s.
    pub fn build(
        id: &str,
        to: &AgentId,
        state: &Value,
        greeting: &str,
        expires: Instant,
        ts: Instant,
        key: &AgentKey,
    ) -> Result<Value> {
        let group = state
            .get("group")
            .cloned()
            .ok_or_else(|| Error::shape("state.group", "missing"))?;
        sign_pairs(
            vec![
                ("v", json!(1)),
                ("type", json!(GROUP_INVITE_TYPE)),
                ("id", json!(id)),
                ("group", group),
                ("from", json!(key.id().as_str())),
                ("to", json!(to.as_str())),
                ("state", state.clone()),
                ("greeting", json!(greeting)),
                ("expires", time_value(expires)),
                ("ts", time_value(ts)),
            ],
            key,
        )
    }
}

/// A verified join: a group-scoped grant (§7.8.2).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupJoin {
    pub id: String,
    pub group: String,
    pub from: AgentId,
    pub to: AgentId,
    /// The invite it answers; none only for the creator's own join.
    pub invite_ref: Option<String>,
    /// Hash of the state the joiner's human approved.
    pub state: String,
    /// The joiner's card: verified, unexpired, `id` equal to `from`.
    pub card: Card,
    pub invoke: BTreeMap<String, InvokeLimits>,
    pub max_frequency: Frequency,
    pub ts: Instant,
    pub hash: String,
    pub doc: Value,
}

impl GroupJoin {
    /// Verifies a join at `now` (≤ 24 KiB); `allow_ws` is passed to its card.
    pub fn verify(doc: &Value, now: Instant, allow_ws: bool) -> Result<Self> {
        let (mut o, from, hash) =
            open_signed(doc, "", "group join", "from", Some(GROUP_JOIN_MAX_BYTES))?;
        o.version()?;
        o.doc_type(GROUP_JOIN_TYPE)?;
        let id = o.uuid("id")?.to_string();
        let group = o.uuid("group")?.to_string();
        let to = o.id("to")?;
        o.req("invite_ref")?;
        let invite_ref = match o.opt_str("invite_ref")? {
            None if from == to => None,
            None => return Err(o.err("invite_ref", "null only in the creator's own join")),
            Some(_) => Some(o.uuid("invite_ref")?.to_string()),
        };
        let state = o.hash("state")?.to_string();
        let card = Card::verify_at(o.req("card")?, "card", now, allow_ws)?;
        if card.id != from {
            return Err(o.err("card", "card.id is not the join's from"));
        }
        let mut s = o.object("scope")?;
        let invoke = parse_invoke(s.req("invoke")?, &s.path("invoke"))?;
        if invoke.contains_key(EXT_GROUPS) {
            return Err(s.err("invoke", "the groups extension is never a key"));
        }
        let max_frequency = Frequency::parse(&s.path("max_frequency"), s.str("max_frequency")?)?;
        s.deny_unknown()?;
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        Ok(Self {
            id,
            group,
            from,
            to,
            invite_ref,
            state,
            card,
            invoke,
            max_frequency,
            ts,
            hash,
            doc: doc.clone(),
        })
    }
}

/// A join before it is signed (§7.8.2).
#[derive(Debug, Clone)]
pub struct GroupJoinBuilder {
    pub id: String,
    pub group: String,
    /// The admin (the joiner itself for the creator's join).
    pub to: AgentId,
    pub invite_ref: Option<String>,
    pub state: String,
    pub card: Value,
    /// `scope.invoke`: capability URI → limits object.
    pub invoke: Value,
    pub max_frequency: String,
    pub ts: Instant,
}

impl GroupJoinBuilder {
    pub fn sign(&self, key: &AgentKey) -> Result<Value> {
        sign_pairs(
            vec![
                ("v", json!(1)),
                ("type", json!(GROUP_JOIN_TYPE)),
                ("id", json!(self.id)),
                ("group", json!(self.group)),
                ("from", json!(key.id().as_str())),
                ("to", json!(self.to.as_str())),
                ("invite_ref", json!(self.invite_ref)),
                ("state", json!(self.state)),
                ("card", self.card.clone()),
                (
                    "scope",
                    json!({"invoke": self.invoke, "max_frequency": self.max_frequency}),
                ),
                ("ts", time_value(self.ts)),
            ],
            key,
        )
    }
}

/// A verified leave (§7.8.5).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupLeave {
    pub group: String,
    pub from: AgentId,
    pub epoch: u64,
    /// Hash of the state it leaves.
    pub state: String,
    pub ts: Instant,
    pub hash: String,
}

impl GroupLeave {
    pub fn verify(doc: &Value) -> Result<Self> {
        let (mut o, from, hash) = open_signed(doc, "", "group leave", "from", None)?;
        o.version()?;
        o.doc_type(GROUP_LEAVE_TYPE)?;
        let group = o.uuid("group")?.to_string();
        let epoch = o.int("epoch")?;
        if epoch < 0 {
            return Err(o.err("epoch", "must be an integer ≥ 0"));
        }
        let state = o.hash("state")?.to_string();
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        Ok(Self {
            group,
            from,
            epoch: epoch as u64,
            state,
            ts,
            hash,
        })
    }

    /// The signed leave of the state `state` (verified), `from` being `key`'s.
    pub fn build(state: &GroupState, ts: Instant, key: &AgentKey) -> Result<Value> {
        sign_pairs(
            vec![
                ("v", json!(1)),
                ("type", json!(GROUP_LEAVE_TYPE)),
                ("group", json!(state.group)),
                ("from", json!(key.id().as_str())),
                ("epoch", json!(state.epoch)),
                ("state", json!(state.hash)),
                ("ts", time_value(ts)),
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
    use crate::doc::resign;
    use crate::doc::testutil::{key, now, t};
    use serde_json::Map;

    pub const GROUP: &str = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
    const INVITE_ID: &str = "2a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
    const JOIN_ID: &str = "3a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";

    fn member(n: u8, role: Role) -> Member {
        Member {
            id: key(n).id().clone(),
            role,
            card: crate::sign::hash(&card(n)).unwrap(),
            name: (role == Role::Member).then(|| format!("Member {n}")),
        }
    }

    /// Epoch 0: agent 1 admin, agents 2 and 3 members.
    pub fn state_builder() -> GroupStateBuilder {
        GroupStateBuilder {
            group: GROUP.into(),
            epoch: 0,
            prev: None,
            members: vec![
                member(1, Role::Admin),
                member(2, Role::Member),
                member(3, Role::Member),
            ],
            member_rate: "60/hour".into(),
            name: "Microsite launch".into(),
            ts: t("2026-10-08T10:00:00Z"),
        }
    }

    pub fn state0() -> Value {
        state_builder().sign(&key(1)).unwrap()
    }

    fn state_err(d: &Value) -> String {
        match GroupState::verify(d).unwrap_err() {
            Error::Shape { field, .. } => field,
            Error::UnknownField(f) => format!("unknown {f}"),
            e => format!("{e:?}"),
        }
    }

    fn alter(d: &Value, n: u8, f: impl FnOnce(&mut Map<String, Value>)) -> Value {
        let mut d = d.clone();
        f(d.as_object_mut().unwrap());
        resign(&d, &key(n)).unwrap()
    }

    #[test]
    fn valid_state_verifies() {
        let s = GroupState::verify(&state0()).unwrap();
        assert_eq!(s.epoch, 0);
        assert_eq!(s.members.len(), 3);
        assert!(s.is_admin(key(1).id()) && !s.is_admin(key(2).id()));
        assert_eq!(
            s.member_rate,
            Frequency {
                count: 60,
                window_secs: 3600
            }
        );
        let mut tampered = state0();
        tampered["name"] = json!("Other");
        assert_eq!(GroupState::verify(&tampered), Err(Error::BadSignature));
    }

    #[test]
    fn state_shape_rules() {
        let s = state0();
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m.insert("x".into(), json!(1));
            })),
            "unknown x"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["members"][0]["x"] = json!(1);
            })),
            "unknown members[0].x"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["policy"]["x"] = json!(1);
            })),
            "unknown policy.x"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["policy"]["members_may_invite"] = json!(true);
            })),
            "policy.members_may_invite"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["policy"]["member_rate"] = json!("60/week");
            })),
            "policy.member_rate"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["group"] = json!("g1");
            })),
            "group"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["epoch"] = json!(-1);
            })),
            "epoch"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["prev"] = json!("a".repeat(64));
            })),
            "prev"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["epoch"] = json!(1);
            })),
            "prev"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["members"][1]["role"] = json!("owner");
            })),
            "members[1].role"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["members"][1]["card"] = json!("abc");
            })),
            "members[1].card"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["members"][2]["id"] = m["members"][1]["id"].clone();
            })),
            "members[2].id"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["members"] = json!([]);
            })),
            "members"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["members"][0]["role"] = json!("member");
            })),
            "members"
        );
        // Epoch 0 is signed by an admin listed in it.
        assert_eq!(
            state_err(&alter(&s, 2, |m| {
                m["from"] = json!(key(2).id().as_str());
            })),
            "from"
        );
        assert_eq!(
            state_err(&alter(&s, 4, |m| {
                m["from"] = json!(key(4).id().as_str());
            })),
            "from"
        );
        // Names: member ≤ 64, group 1 to 100.
        assert!(
            GroupState::verify(&alter(&s, 1, |m| {
                m["members"][1]["name"] = json!("n".repeat(64));
            }))
            .is_ok()
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["members"][1]["name"] = json!("n".repeat(65));
            })),
            "members[1].name"
        );
        assert!(
            GroupState::verify(&alter(&s, 1, |m| {
                m["name"] = json!("n".repeat(100));
            }))
            .is_ok()
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["name"] = json!("n".repeat(101));
            })),
            "name"
        );
        assert_eq!(
            state_err(&alter(&s, 1, |m| {
                m["name"] = json!("");
            })),
            "name"
        );
    }

    #[test]
    fn state_member_and_size_bounds() {
        let with_members = |n: u8| {
            let mut b = state_builder();
            b.members = (1..=n)
                .map(|i| member(i, if i == 1 { Role::Admin } else { Role::Member }))
                .collect();
            b.sign(&key(1)).unwrap()
        };
        GroupState::verify(&with_members(16)).unwrap();
        assert_eq!(state_err(&with_members(17)), "members");
        // Valid fields cannot reach 8 KiB (16 members of bounded size), so
        // a larger state carries something else: the size is refused before
        // the signature or the unknown member is even looked at.
        let base = with_members(16);
        assert!(crate::canon::to_vec(&base).unwrap().len() < GROUP_STATE_MAX_BYTES / 2);
        let padded = |n: usize| {
            let mut d = base.clone();
            d.as_object_mut().unwrap().insert("pad".into(), json!(""));
            let len = crate::canon::to_vec(&d).unwrap().len();
            d["pad"] = json!("x".repeat(n - len));
            d
        };
        let exact = padded(GROUP_STATE_MAX_BYTES);
        assert_eq!(
            crate::canon::to_vec(&exact).unwrap().len(),
            GROUP_STATE_MAX_BYTES
        );
        assert_eq!(
            GroupState::verify(&exact),
            Err(Error::BadSignature),
            "at the bound: read on"
        );
        assert!(matches!(
            GroupState::verify(&padded(GROUP_STATE_MAX_BYTES + 1)),
            Err(Error::TooLarge { .. })
        ));
        assert_eq!(
            state_err(&alter(&base, 1, |m| {
                m.insert("pad".into(), json!("x"));
            })),
            "unknown pad"
        );
    }

    fn next(prev: &GroupState, signer: u8, f: impl FnOnce(&mut GroupStateBuilder)) -> GroupState {
        let mut b = state_builder();
        b.epoch = prev.epoch + 1;
        b.prev = Some(prev.hash.clone());
        b.members.push(member(4, Role::Member));
        b.ts = t("2026-10-08T11:00:00Z");
        f(&mut b);
        GroupState::verify(&b.sign(&key(signer)).unwrap()).unwrap()
    }

    #[test]
    fn successor_rules() {
        let s0 = GroupState::verify(&state0()).unwrap();
        let s1 = next(&s0, 1, |_| {});
        assert!(is_valid_successor(&s0, &s1));
        // A later state need not list its signer (an admin may step down).
        let s1b = next(&s0, 1, |b| {
            b.members.retain(|m| m.role != Role::Admin);
            b.members[0].role = Role::Admin;
        });
        assert!(is_valid_successor(&s0, &s1b));
        assert!(
            !is_valid_successor(&s0, &next(&s0, 2, |_| {})),
            "signed by a non-admin"
        );
        assert!(
            !is_valid_successor(&s0, &next(&s0, 1, |b| b.epoch = 2)),
            "epoch skips"
        );
        assert!(
            !is_valid_successor(&s0, &next(&s0, 1, |b| b.prev = Some("0".repeat(64)))),
            "prev"
        );
        assert!(
            !is_valid_successor(
                &s0,
                &next(&s0, 1, |b| b.group =
                    "4a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d".into())
            ),
            "group"
        );
        assert!(!is_valid_successor(&s1, &s0));
        let s2 = next(&s1, 1, |_| {});
        assert!(is_valid_successor(&s1, &s2) && !is_valid_successor(&s0, &s2));
    }

    fn invite(f: impl FnOnce(&mut Map<String, Value>)) -> Value {
        let d = GroupInvite::build(
            INVITE_ID,
            key(5).id(),
            &state0(),
            "Help with the microsite?",
            t("2026-10-15T10:00:00Z"),
            t("2026-10-08T10:00:00Z"),
            &key(1),
        )
        .unwrap();
        alter(&d, 1, f)
    }

    fn invite_err(d: &Value, now: Instant) -> String {
        match GroupInvite::verify(d, now).unwrap_err() {
            Error::Shape { field, .. } => field,
            Error::UnknownField(f) => format!("unknown {f}"),
            e => format!("{e:?}"),
        }
    }

    #[test]
    fn invite_rules() {
        let i = GroupInvite::verify(&invite(|_| {}), now()).unwrap();
        assert_eq!(&i.to, key(5).id());
        assert_eq!(i.state.epoch, 0);
        let mut tampered = invite(|_| {});
        tampered["greeting"] = json!("hi");
        assert_eq!(
            GroupInvite::verify(&tampered, now()),
            Err(Error::BadSignature)
        );
        assert_eq!(
            invite_err(
                &invite(|m| {
                    m.insert("x".into(), json!(1));
                }),
                now()
            ),
            "unknown x"
        );
        assert_eq!(
            invite_err(
                &invite(|m| {
                    m["id"] = json!("i-1");
                }),
                now()
            ),
            "id"
        );
        assert_eq!(
            invite_err(
                &invite(|m| {
                    m["group"] = json!("4a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d");
                }),
                now()
            ),
            "state"
        );
        assert_eq!(
            invite_err(
                &invite(|m| {
                    m["to"] = json!(key(2).id().as_str());
                }),
                now()
            ),
            "to"
        );
        let mut bad_state = state0();
        bad_state["name"] = json!("x");
        assert_eq!(
            invite_err(
                &invite(|m| {
                    m["state"] = bad_state;
                }),
                now()
            ),
            "BadSignature"
        );
        let unk = alter(&state0(), 1, |m| {
            m.insert("x".into(), json!(1));
        });
        assert_eq!(
            invite_err(
                &invite(|m| {
                    m["state"] = unk;
                }),
                now()
            ),
            "unknown state.x"
        );
        // The inviter must be an admin of the state it carries.
        let d = GroupInvite::build(
            INVITE_ID,
            key(5).id(),
            &state0(),
            "",
            t("2026-10-15T10:00:00Z"),
            t("2026-10-08T10:00:00Z"),
            &key(2),
        )
        .unwrap();
        assert_eq!(invite_err(&d, now()), "from");
        // Greeting ≤ 280.
        assert!(
            GroupInvite::verify(
                &invite(|m| {
                    m["greeting"] = json!("g".repeat(280));
                }),
                now()
            )
            .is_ok()
        );
        assert_eq!(
            invite_err(
                &invite(|m| {
                    m["greeting"] = json!("g".repeat(281));
                }),
                now()
            ),
            "greeting"
        );
        // expires ≤ 14 days after ts (and now), and not past.
        assert!(
            GroupInvite::verify(
                &invite(|m| {
                    m["expires"] = json!("2026-10-22T10:00:00Z");
                }),
                now()
            )
            .is_ok()
        );
        assert_eq!(
            invite_err(
                &invite(|m| {
                    m["expires"] = json!("2026-10-22T10:00:01Z");
                }),
                now()
            ),
            "expires"
        );
        let old = invite(|m| {
            m["ts"] = json!("2026-09-01T00:00:00Z");
            m["expires"] = json!("2026-10-22T13:00:00Z");
        });
        assert_eq!(invite_err(&old, now()), "expires");
        assert_eq!(
            invite_err(&invite(|_| {}), t("2026-10-15T10:00:00Z")),
            "Expired"
        );
        // The group has room.
        let mut b = state_builder();
        b.members = (1..=16)
            .map(|i| member(i, if i == 1 { Role::Admin } else { Role::Member }))
            .collect();
        let full = b.sign(&key(1)).unwrap();
        let d = GroupInvite::build(
            INVITE_ID,
            key(20).id(),
            &full,
            "",
            t("2026-10-15T10:00:00Z"),
            t("2026-10-08T10:00:00Z"),
            &key(1),
        )
        .unwrap();
        assert_eq!(invite_err(&d, now()), "state");
    }

    fn join_builder(n: u8) -> GroupJoinBuilder {
        GroupJoinBuilder {
            id: JOIN_ID.into(),
            group: GROUP.into(),
            to: key(1).id().clone(),
            invite_ref: Some(INVITE_ID.into()),
            state: crate::sign::hash(&state0()).unwrap(),
            card: card(n),
            invoke: json!({"https://rendezvous.nesher.co/ext/request/v1": {}}),
            max_frequency: "20/day".into(),
            ts: t("2026-10-08T11:00:00Z"),
        }
    }

    fn join_err(d: &Value) -> String {
        match GroupJoin::verify(d, now(), false).unwrap_err() {
            Error::Shape { field, .. } => field,
            Error::UnknownField(f) => format!("unknown {f}"),
            e => format!("{e:?}"),
        }
    }

    #[test]
    fn join_rules() {
        let d = join_builder(5).sign(&key(5)).unwrap();
        let j = GroupJoin::verify(&d, now(), false).unwrap();
        assert_eq!(j.invite_ref.as_deref(), Some(INVITE_ID));
        assert_eq!(
            j.max_frequency,
            Frequency {
                count: 20,
                window_secs: 86400
            }
        );
        let mut tampered = d.clone();
        tampered["state"] = json!("0".repeat(64));
        assert_eq!(
            GroupJoin::verify(&tampered, now(), false),
            Err(Error::BadSignature)
        );
        // The creator's own join: invite_ref null, to itself.
        let mut b = join_builder(1);
        b.invite_ref = None;
        GroupJoin::verify(&b.sign(&key(1)).unwrap(), now(), false).unwrap();
        // Null invite_ref is only for the creator.
        let mut b = join_builder(5);
        b.invite_ref = None;
        assert_eq!(join_err(&b.sign(&key(5)).unwrap()), "invite_ref");
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m["invite_ref"] = json!("inv");
            })),
            "invite_ref"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m.remove("invite_ref");
            })),
            "invite_ref"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m["state"] = state0();
            })),
            "state"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m["card"] = card(6);
            })),
            "card"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m["scope"]["x"] = json!(1);
            })),
            "unknown scope.x"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m["scope"].as_object_mut().unwrap().remove("max_frequency");
            })),
            "scope.max_frequency"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m["scope"]["invoke"] = json!({EXT_GROUPS: {}});
            })),
            "scope.invoke"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m["scope"]["invoke"] = json!({"ftp://x/": {}});
            })),
            "scope.invoke[\"ftp://x/\"]"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m.insert("x".into(), json!(1));
            })),
            "unknown x"
        );
        assert_eq!(
            join_err(&alter(&d, 5, |m| {
                m["group"] = json!("grp");
            })),
            "group"
        );
        // ≤ 24 KiB: a card near its 16 KiB bound, then an ignored limit
        // field inside invoke pads the join to exactly the bound, and one past.
        let big_card = {
            let mut c = card(5);
            let len = crate::canon::to_vec(&c).unwrap().len();
            c["owner"]["name"] = json!("x".repeat(crate::consts::CARD_MAX_BYTES - len - 200));
            resign(&c, &key(5)).unwrap()
        };
        let sized = |n: usize| {
            let mut b = join_builder(5);
            b.card = big_card.clone();
            b.invoke = json!({"https://x.example/a": {"pad": ""}});
            let len = crate::canon::to_vec(&b.sign(&key(5)).unwrap())
                .unwrap()
                .len();
            b.invoke = json!({"https://x.example/a": {"pad": "p".repeat(n - len)}});
            b.sign(&key(5)).unwrap()
        };
        let exact = sized(GROUP_JOIN_MAX_BYTES);
        assert_eq!(
            crate::canon::to_vec(&exact).unwrap().len(),
            GROUP_JOIN_MAX_BYTES
        );
        GroupJoin::verify(&exact, now(), false).unwrap();
        assert!(matches!(
            GroupJoin::verify(&sized(GROUP_JOIN_MAX_BYTES + 1), now(), false),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn leave_rules() {
        let s0 = GroupState::verify(&state0()).unwrap();
        let d = GroupLeave::build(&s0, now(), &key(2)).unwrap();
        let l = GroupLeave::verify(&d).unwrap();
        assert_eq!(
            (&l.from, l.epoch, l.state.as_str()),
            (key(2).id(), 0, s0.hash.as_str())
        );
        let mut tampered = d.clone();
        tampered["epoch"] = json!(1);
        assert_eq!(GroupLeave::verify(&tampered), Err(Error::BadSignature));
        let e = |f: &dyn Fn(&mut Map<String, Value>)| match GroupLeave::verify(&alter(&d, 2, f))
            .unwrap_err()
        {
            Error::Shape { field, .. } => field,
            Error::UnknownField(f) => format!("unknown {f}"),
            e => format!("{e:?}"),
        };
        assert_eq!(
            e(&|m| {
                m.insert("x".into(), json!(1));
            }),
            "unknown x"
        );
        assert_eq!(
            e(&|m| {
                m.insert("id".into(), json!(JOIN_ID));
            }),
            "unknown id"
        );
        assert_eq!(
            e(&|m| {
                m["epoch"] = json!(-1);
            }),
            "epoch"
        );
        assert_eq!(
            e(&|m| {
                m["state"] = json!("abc");
            }),
            "state"
        );
        assert_eq!(
            e(&|m| {
                m["group"] = json!("g");
            }),
            "group"
        );
        assert_eq!(
            e(&|m| {
                m["type"] = json!("rdv/group-join");
            }),
            "type"
        );
    }
}
