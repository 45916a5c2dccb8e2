//! Meetings (§7.2–§7.4, §5.5): the negotiation as tasks kept as records.
//!
//! A negotiation is one task between two agents: offers of slots (at most
//! three rounds), an accept that holds a slot tentatively, a confirm that
//! completes it. Every slot held for one task is busy for every other. The
//! human decides each accept and each confirm (§5.5): a held meeting waits
//! behind a gate whose confirm code is bound to exactly what was shown
//! (peer, contextId, taskId, slot, stage, and a nonce drawn when the gate
//! opened, so a new negotiation under the same id gets a new code).
//!
//! The reference policy (§7.3): offer up to 3 free slots, accept the first
//! offered slot that is free, otherwise counter with 3 of our own. Meeting
//! messages carry slots only, never event titles (§7.4).

use std::collections::BTreeMap;

use rdv_proto::AgentId;
use rdv_proto::consts::{
    A2A_MAX_REPLIES_PER_TASK, A2A_MAX_SEEN_PER_TASK, EXT_MEETING_CANCEL, EXT_MEETINGS,
    MEETING_DEFAULT_EXPIRY_SECS, MEETING_GATE_DIGEST_PREFIX, MEETING_HOLD_GRACE_SECS,
    MEETING_MAX_EXPIRY_SECS, MEETING_MAX_OFFERS, MEETING_MAX_SLOTS, MEETING_MAX_TASKS_PER_PEER,
    MEETING_POLICY_SLOTS, MEETING_PRUNE_AFTER_SECS, MEETING_SLOT_MAX_SECS, MEETING_TEXT_MAX_CHARS,
    TASK_DEFAULT_MAX_OPEN,
};
use rdv_proto::doc::grant::{InvokeLimits, Scope};
use rdv_proto::time::{Instant, format_time};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::a2a::{self, Message, StatusUpdate, TaskState, Unsupported, parse_offset_time};
use crate::agent::{Agent, Ctx};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::peer_text::UntrustedPeerText;
use crate::phrase::{PhraseRecord, PhraseVerdict};
use crate::record::{Record, Table};

/// The verbs of the meetings extensions (§7.5 rule 1); rdv/cancel is
/// shared with tasks/v1 and routed by the task it names.
pub const VERB_PROPOSE: &str = "meeting/propose";
pub const VERB_COUNTER: &str = "meeting/counter";
pub const VERB_ACCEPT: &str = "meeting/accept";
pub const VERB_CONFIRM: &str = "meeting/confirm";
pub const VERB_DECLINE: &str = "meeting/decline";
pub const VERB_MEETING_CANCEL: &str = "meeting/cancel";
pub const VERB_CANCEL: &str = "rdv/cancel";

/// Whether `verb` is a meeting verb (rdv/cancel is not: it is shared).
pub fn is_meeting_verb(verb: &str) -> bool {
    matches!(
        verb,
        VERB_PROPOSE
            | VERB_COUNTER
            | VERB_ACCEPT
            | VERB_CONFIRM
            | VERB_DECLINE
            | VERB_MEETING_CANCEL
    )
}

/// The extension URI a verb is listed under (§7.5 rule 3).
pub fn extension_of(verb: &str) -> &'static str {
    if verb == VERB_MEETING_CANCEL {
        EXT_MEETING_CANCEL
    } else {
        EXT_MEETINGS
    }
}

/// A slot (§7.2): two instants. Written in UTC; read with any explicit
/// offset and compared as instants (time's `OffsetDateTime` equality and
/// order are the instant's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slot {
    #[serde(with = "time::serde::rfc3339")]
    pub start: Instant,
    #[serde(with = "time::serde::rfc3339")]
    pub end: Instant,
}

impl Slot {
    /// A slot the owner or a peer gives: end after start, at most 12 hours.
    pub fn new(start: Instant, end: Instant) -> std::result::Result<Slot, String> {
        if end <= start {
            return Err("a slot ends after it starts".into());
        }
        if (end - start).whole_seconds() > MEETING_SLOT_MAX_SECS {
            return Err("a slot is at most 12 hours long (§7.2)".into());
        }
        Ok(Slot { start, end })
    }

    pub fn overlaps(&self, o: &Slot) -> bool {
        self.start < o.end && o.start < self.end
    }

    pub fn to_value(&self) -> Value {
        json!({ "start": wire_time(self.start), "end": wire_time(self.end) })
    }
}

/// An instant as we write it in a meeting message: UTC, every fractional
/// digit kept, so echoing a peer's slot names the same instant (§7.2).
pub fn wire_time(t: Instant) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Who did something in a negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Us,
    Peer,
}

/// One round (§7.3: a round is one offer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offer {
    pub by: Side,
    pub slots: Vec<Slot>,
}

/// Which step a human approves (§5.5: the step is part of the binding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// We accept the peer's slot (meeting/accept).
    Accept,
    /// We confirm the peer's accept of our slot (meeting/confirm).
    Confirm,
    /// We call off the agreed meeting (meeting/cancel).
    Cancel,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Accept => "accept",
            Stage::Confirm => "confirm",
            Stage::Cancel => "cancel",
        }
    }
}

/// A step waiting for the human. The nonce makes its digest differ from
/// any earlier gate's (a new negotiation under the same id); the code is
/// the record of the confirm code last shown for it (`phrase.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub stage: Stage,
    pub slot: Slot,
    pub nonce: String,
    #[serde(default)]
    pub code: Option<PhraseRecord>,
}

/// A slot held for a task (§7.3): busy for every other task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    Tentative,
    Agreed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    pub slot: Slot,
    pub kind: HoldKind,
}

/// One negotiation (or a tombstone: a cancel that came before its proposal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeetingTask {
    pub peer: AgentId,
    pub task_id: String,
    pub context_id: String,
    /// Who proposed.
    pub proposer: Side,
    pub state: TaskState,
    /// §7.3: a cancel that arrived before its proposal.
    pub tombstone: bool,
    pub offers: Vec<Offer>,
    #[serde(with = "time::serde::rfc3339")]
    pub expires: Instant,
    pub hold: Option<Hold>,
    pub gate: Option<Gate>,
    /// The slot we sent meeting/accept for (waiting for the confirm).
    pub accepted: Option<Slot>,
    /// The agreed slot, kept as a record after a cancel (§7.3).
    pub agreed: Option<Slot>,
    /// The nonce of the agreement's cancel digest (§5.5).
    pub agreement_nonce: Option<String>,
    /// The record of the cancel code last shown for the agreement.
    #[serde(default)]
    pub agreement_code: Option<PhraseRecord>,
    /// Display only: the proposal's intent token and place (peer text
    /// when the peer proposed).
    pub intent: Option<String>,
    pub place: Option<String>,
    /// Why it ended, for the human (a peer's reason is peer text).
    pub end_reason: Option<String>,
    /// messageIds seen (§7: dedupe per task), at most 64.
    pub seen: Vec<String>,
    pub finished_replies: u32,
    pub unsupported_replies: u32,
    pub status_seen: u32,
    /// The code record of the last gate that closed, so a late code is
    /// told apart from a wrong one.
    #[serde(default)]
    pub retired_code: Option<PhraseRecord>,
    #[serde(with = "time::serde::rfc3339")]
    pub created: Instant,
    #[serde(with = "time::serde::rfc3339")]
    pub updated: Instant,
}

impl MeetingTask {
    fn last_offer(&self) -> Option<&Offer> {
        self.offers.last()
    }

    fn open(&self) -> bool {
        !self.tombstone && !self.state.is_terminal()
    }
}

/// Per-peer meeting counters (§5.3: kept with the contact, started afresh
/// by a new grant from the owner).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerMeetings {
    /// The grant the counters were kept under.
    pub grant_id: Option<String>,
    /// No longer kept: proposals count in the contact's one limit book
    /// (`TaskBook::limits`, §5.3). Read so older records load, never
    /// written again.
    #[serde(default, skip_serializing)]
    pub admitted: Vec<i64>,
    /// No longer kept (as `admitted`).
    #[serde(default, skip_serializing)]
    pub rejected: Vec<i64>,
    /// Unsupported replies for tasks we do not have (our bound: 8 a day).
    pub unknown_replies: Vec<i64>,
}

/// The owner's busy times (free/busy only, never titles; §7.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calendar {
    pub busy: Vec<Slot>,
    /// Where it was read from (the owner's paths), for `rdv dinner list`.
    pub sources: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub updated: Instant,
}

/// The meetings part of the state.
#[derive(Debug, Default)]
pub struct Book {
    /// By [`task_key`].
    pub tasks: BTreeMap<String, MeetingTask>,
    pub peers: BTreeMap<AgentId, PeerMeetings>,
    pub calendar: Option<Calendar>,
}

/// The record key of a task: the peer and its taskId (task IDs are chosen
/// by peers, so never the id alone).
pub fn task_key(peer: &AgentId, task_id: &str) -> String {
    format!("{peer} {task_id}")
}

const CALENDAR_KEY: &str = "calendar";

impl Book {
    /// Loads one of the meeting records (Table::Meeting, MeetingPeer, Calendar).
    pub fn load(&mut self, r: &Record) -> Result<()> {
        let bad = |e: serde_json::Error| {
            Error::Store(format!(
                "stored {} record {:?}: {e}",
                r.table.as_str(),
                r.key
            ))
        };
        match r.table {
            Table::Meeting => {
                let t: MeetingTask = serde_json::from_value(r.value.clone()).map_err(bad)?;
                self.tasks.insert(r.key.clone(), t);
            }
            Table::MeetingPeer => {
                let id = AgentId::parse(&r.key)
                    .map_err(|e| Error::Store(format!("stored meeting_peer key: {e}")))?;
                self.peers
                    .insert(id, serde_json::from_value(r.value.clone()).map_err(bad)?);
            }
            Table::Calendar => {
                self.calendar = Some(serde_json::from_value(r.value.clone()).map_err(bad)?);
            }
            _ => {}
        }
        Ok(())
    }

    /// The stored value of one meeting record, or none (deleted).
    pub fn record_value(&self, table: Table, key: &str) -> Result<Option<Value>> {
        let v = match table {
            Table::Meeting => self.tasks.get(key).map(serde_json::to_value),
            Table::MeetingPeer => AgentId::parse(key)
                .ok()
                .and_then(|id| self.peers.get(&id))
                .map(serde_json::to_value),
            Table::Calendar if key == CALENDAR_KEY => {
                self.calendar.as_ref().map(serde_json::to_value)
            }
            _ => None,
        };
        v.transpose()
            .map_err(|e| Error::Store(format!("serializing a meeting record: {e}")))
    }

    /// Whether `slot` is free for task `except`: not busy in the calendar
    /// and not held by any other task (§7.3).
    pub fn is_free(&self, slot: &Slot, except: Option<&str>) -> bool {
        let busy = self
            .calendar
            .as_ref()
            .is_some_and(|c| c.busy.iter().any(|b| b.overlaps(slot)));
        let held = self.tasks.iter().any(|(k, t)| {
            Some(k.as_str()) != except && t.hold.is_some_and(|h| h.slot.overlaps(slot))
        });
        !busy && !held
    }

    /// The reference policy's counter: our own free slots of the offered
    /// lengths at the offered times of day on the next 7 days, up to 3.
    pub fn counter_slots(&self, offered: &[Slot], now: Instant, except: &str) -> Vec<Slot> {
        let mut out: Vec<Slot> = Vec::new();
        for days in 1..=7 {
            for s in offered {
                let c = Slot {
                    start: s.start + time::Duration::days(days),
                    end: s.end + time::Duration::days(days),
                };
                if c.start > now
                    && self.is_free(&c, Some(except))
                    && !out.iter().any(|o| o.overlaps(&c))
                {
                    out.push(c);
                    if out.len() == MEETING_POLICY_SLOTS {
                        return out;
                    }
                }
            }
        }
        out
    }

    /// The reference policy's offer: up to 3 free, non-overlapping slots
    /// of `minutes` in [from, to], on a 30-minute grid.
    pub fn window_slots(
        &self,
        from: Instant,
        to: Instant,
        minutes: i64,
        now: Instant,
    ) -> Vec<Slot> {
        let len = time::Duration::minutes(minutes);
        let mut out: Vec<Slot> = Vec::new();
        let mut start = from;
        while start + len <= to && out.len() < MEETING_POLICY_SLOTS {
            let c = Slot {
                start,
                end: start + len,
            };
            if c.start > now && self.is_free(&c, None) && !out.iter().any(|o| o.overlaps(&c)) {
                out.push(c);
                start += len;
            } else {
                start += time::Duration::minutes(30);
            }
        }
        out
    }
}

/// §5.5: the digest of exactly what the human is shown for a gate; its
/// confirm code is bound to it ([`code_terms`]).
pub fn gate_digest(t: &MeetingTask, stage: Stage, slot: &Slot, nonce: &str) -> String {
    let shown = json!({
        "peer": t.peer.as_str(),
        "contextId": t.context_id,
        "taskId": t.task_id,
        "start": wire_time(slot.start),
        "end": wire_time(slot.end),
        "stage": stage.as_str(),
        "nonce": nonce,
    });
    let canon = rdv_proto::canon::to_vec(&shown).unwrap_or_default();
    let mut h = Sha256::new();
    h.update(MEETING_GATE_DIGEST_PREFIX);
    h.update(&canon);
    hex::encode(h.finalize())
}

/// What a meeting confirm code is bound to: the step and its digest.
pub fn code_terms(stage: Stage, digest: &str) -> Value {
    json!({"meeting_gate": stage.as_str(), "digest": digest})
}

/// The step waiting for the human on this task now: the open gate, or an
/// agreed meeting's cancel; with its slot and digest. A front-end shows
/// it, issues a code bound to that digest (`Command::SetMeetingCode`) and
/// shows the code on a human channel only.
pub fn current_step(t: &MeetingTask) -> Option<(Stage, Slot, String)> {
    if t.tombstone {
        return None;
    }
    if let Some(g) = &t.gate {
        return Some((g.stage, g.slot, gate_digest(t, g.stage, &g.slot, &g.nonce)));
    }
    if t.state == TaskState::Completed
        && let (Some(slot), Some(nonce)) = (&t.agreed, &t.agreement_nonce)
    {
        return Some((
            Stage::Cancel,
            *slot,
            gate_digest(t, Stage::Cancel, slot, nonce),
        ));
    }
    None
}

/// §5.5, §6.4.1: a meeting record as a backup holds it: no code shown
/// before the backup confirms anything after a restore (the records are
/// dropped and the nonces replaced, so every digest changes).
pub fn without_codes(v: &Value) -> Result<Value> {
    let mut t: MeetingTask = serde_json::from_value(v.clone())
        .map_err(|e| Error::Backup(format!("meeting record: {e}")))?;
    if let Some(g) = t.gate.as_mut() {
        g.nonce = "restored".into();
        g.code = None;
    }
    if t.agreement_nonce.is_some() {
        t.agreement_nonce = Some("restored".into());
    }
    t.agreement_code = None;
    t.retired_code = None;
    serde_json::to_value(&t).map_err(|e| Error::Backup(e.to_string()))
}

// ---- parsing a verb's data (§7.5 rule 4) -----------------------------------

/// One inbound meeting message, its A2A envelope already validated.
#[derive(Debug, Clone)]
pub struct Inbound {
    pub message_id: String,
    pub task_id: String,
    pub context_id: String,
    pub verb: String,
    pub data: Map<String, Value>,
}

/// A verb's data, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Verb {
    Propose {
        slots: Vec<Slot>,
        expires: Option<Instant>,
        place: Option<String>,
        intent: Option<String>,
    },
    Counter {
        slots: Vec<Slot>,
    },
    Accept {
        slot: Slot,
    },
    Confirm {
        slot: Slot,
    },
    Decline {
        reason: Option<String>,
    },
    Cancel {
        reason: Option<String>,
    },
    MeetingCancel {
        slot: Slot,
        reason: Option<String>,
    },
}

/// Why a verb's data was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataRefusal {
    /// §7.5 rule 4, critical: an unknown verb or key (answered).
    Unsupported(String),
    /// Anything else: dropped.
    Malformed(String),
}

type DataResult<T> = std::result::Result<T, DataRefusal>;

fn malformed<T>(s: impl Into<String>) -> DataResult<T> {
    Err(DataRefusal::Malformed(s.into()))
}

fn keys(m: &Map<String, Value>, allowed: &[&str], what: &str) -> DataResult<()> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(DataRefusal::Unsupported(format!(
            "an unknown key {:?} in {what}",
            crate::peer_text::bounded(k, 64)
        ))),
        None => Ok(()),
    }
}

/// A slot from a peer: exactly start and end, explicit offsets, ≤ 12 h.
pub fn parse_slot(v: &Value) -> DataResult<Slot> {
    let Some(m) = v.as_object() else {
        return malformed("a slot is not an object");
    };
    keys(m, &["start", "end"], "a slot")?;
    let t = |k: &str| {
        m.get(k)
            .and_then(Value::as_str)
            .and_then(parse_offset_time)
            .map_or_else(
                || {
                    malformed(format!(
                        "slot.{k} is not an RFC 3339 date-time with an offset"
                    ))
                },
                Ok,
            )
    };
    Slot::new(t("start")?, t("end")?).map_err(DataRefusal::Malformed)
}

fn slots(m: &Map<String, Value>) -> DataResult<Vec<Slot>> {
    let Some(a) = m.get("slots").and_then(Value::as_array) else {
        return malformed("slots is not an array");
    };
    if a.is_empty() || a.len() > MEETING_MAX_SLOTS {
        return malformed(format!("an offer holds 1 to {MEETING_MAX_SLOTS} slots"));
    }
    a.iter().map(parse_slot).collect()
}

fn slot(m: &Map<String, Value>) -> DataResult<Slot> {
    m.get("slot")
        .map_or_else(|| malformed("slot is missing"), parse_slot)
}

/// The owner's own short text sent in a verb (a place, a cancel reason):
/// one line the receiver's [`text`] takes (§7.2).
fn own_text(what: &str, s: &str) -> Result<()> {
    if s.chars().count() > MEETING_TEXT_MAX_CHARS || s.chars().any(char::is_control) {
        return Err(Error::Input(format!(
            "{what} is one line of at most {MEETING_TEXT_MAX_CHARS} characters"
        )));
    }
    Ok(())
}

fn text(m: &Map<String, Value>, k: &str) -> DataResult<Option<String>> {
    match m.get(k) {
        None => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= MEETING_TEXT_MAX_CHARS => {
            Ok(Some(s.clone()))
        }
        Some(_) => malformed(format!("{k} is not a string of at most 200 characters")),
    }
}

/// §7.2, §7.5 rule 4: a meeting verb's data, strictly.
pub fn parse_verb(verb: &str, data: &Map<String, Value>) -> DataResult<Verb> {
    match verb {
        VERB_PROPOSE => {
            keys(
                data,
                &["rdv", "slots", "expires", "place", "intent"],
                "data",
            )?;
            let expires = match data.get("expires") {
                None => None,
                Some(v) => Some(
                    v.as_str()
                        .and_then(parse_offset_time)
                        .map_or_else(|| malformed("expires is not an RFC 3339 date-time"), Ok)?,
                ),
            };
            let place = match data.get("place") {
                None => None,
                Some(Value::Object(p)) => {
                    keys(p, &["name", "area"], "place")?;
                    let name = text(p, "name")?;
                    let area = text(p, "area")?;
                    match (name, area) {
                        (Some(n), Some(a)) => Some(crate::peer_text::bounded(
                            &format!("{n} ({a})"),
                            MEETING_TEXT_MAX_CHARS,
                        )),
                        (n, a) => n.or(a),
                    }
                }
                Some(_) => return malformed("place is not an object"),
            };
            let intent = match data.get("intent") {
                None => None,
                Some(Value::String(s))
                    if !s.is_empty()
                        && s.len() <= 32
                        && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') =>
                {
                    Some(s.clone())
                }
                Some(_) => return malformed("intent is not a short token"),
            };
            Ok(Verb::Propose {
                slots: slots(data)?,
                expires,
                place,
                intent,
            })
        }
        VERB_COUNTER => {
            keys(data, &["rdv", "slots"], "data")?;
            Ok(Verb::Counter {
                slots: slots(data)?,
            })
        }
        VERB_ACCEPT => {
            keys(data, &["rdv", "slot"], "data")?;
            Ok(Verb::Accept { slot: slot(data)? })
        }
        VERB_CONFIRM => {
            keys(data, &["rdv", "slot"], "data")?;
            Ok(Verb::Confirm { slot: slot(data)? })
        }
        VERB_DECLINE => {
            keys(data, &["rdv", "reason"], "data")?;
            Ok(Verb::Decline {
                reason: text(data, "reason")?,
            })
        }
        VERB_CANCEL => {
            keys(data, &["rdv", "reason"], "data")?;
            Ok(Verb::Cancel {
                reason: text(data, "reason")?,
            })
        }
        VERB_MEETING_CANCEL => {
            keys(data, &["rdv", "slot", "reason"], "data")?;
            Ok(Verb::MeetingCancel {
                slot: slot(data)?,
                reason: text(data, "reason")?,
            })
        }
        _ => Err(DataRefusal::Unsupported("an unknown verb".into())),
    }
}

fn slots_value(s: &[Slot]) -> Value {
    Value::Array(s.iter().map(Slot::to_value).collect())
}

/// The data of a verb we send.
pub fn verb_data(verb: &Verb) -> Map<String, Value> {
    let mut m = Map::new();
    let (name, fields): (&str, Vec<(&str, Value)>) = match verb {
        Verb::Propose {
            slots,
            expires,
            place,
            intent,
        } => {
            let mut f = vec![("slots", slots_value(slots))];
            if let Some(e) = expires {
                f.push(("expires", json!(wire_time(*e))));
            }
            if let Some(p) = place {
                f.push(("place", json!({ "name": p })));
            }
            if let Some(i) = intent {
                f.push(("intent", json!(i)));
            }
            (VERB_PROPOSE, f)
        }
        Verb::Counter { slots } => (VERB_COUNTER, vec![("slots", slots_value(slots))]),
        Verb::Accept { slot } => (VERB_ACCEPT, vec![("slot", slot.to_value())]),
        Verb::Confirm { slot } => (VERB_CONFIRM, vec![("slot", slot.to_value())]),
        Verb::Decline { reason } => (
            VERB_DECLINE,
            reason.iter().map(|r| ("reason", json!(r))).collect(),
        ),
        Verb::Cancel { reason } => (
            VERB_CANCEL,
            reason.iter().map(|r| ("reason", json!(r))).collect(),
        ),
        Verb::MeetingCancel { slot, reason } => {
            let mut f = vec![("slot", slot.to_value())];
            if let Some(r) = reason {
                f.push(("reason", json!(r)));
            }
            (VERB_MEETING_CANCEL, f)
        }
    };
    m.insert("rdv".into(), json!(name));
    for (k, v) in fields {
        m.insert(k.into(), v);
    }
    m
}

fn verb_name(v: &Verb) -> &'static str {
    match v {
        Verb::Propose { .. } => VERB_PROPOSE,
        Verb::Counter { .. } => VERB_COUNTER,
        Verb::Accept { .. } => VERB_ACCEPT,
        Verb::Confirm { .. } => VERB_CONFIRM,
        Verb::Decline { .. } => VERB_DECLINE,
        Verb::Cancel { .. } => VERB_CANCEL,
        Verb::MeetingCancel { .. } => VERB_MEETING_CANCEL,
    }
}

/// §7.2: expires defaults to 48 hours, clamped to 7 days from now.
pub fn clamp_expires(asked: Option<Instant>, now: Instant) -> Instant {
    let max = now + time::Duration::seconds(MEETING_MAX_EXPIRY_SECS);
    asked
        .unwrap_or(now + time::Duration::seconds(MEETING_DEFAULT_EXPIRY_SECS))
        .min(max)
}

// ---- commands ----------------------------------------------------------------

/// What the owner asks to propose (§7.3 reference policy).
#[derive(Debug, Clone)]
pub struct Proposal {
    pub to: AgentId,
    /// Explicit slots, or
    pub slots: Vec<Slot>,
    /// a window [from, to] and a length in minutes to pick up to 3 free slots in.
    pub window: Option<(Instant, Instant, i64)>,
    pub expires: Option<Instant>,
    /// Display text sent with the proposal (the owner's words, never a
    /// calendar title).
    pub place: Option<String>,
    pub intent: Option<String>,
}

/// What a confirm or cancel command answered: data, not an error (§5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateRefusal {
    /// No task by that id waits for the human.
    NothingToConfirm,
    /// The code is one this task issued, for a meeting that changed since.
    Changed,
    /// The code is not one this task issued.
    WrongCode,
    /// An agreed meeting is cancelled only with its cancel code.
    CodeNeeded,
    /// The held slot is no longer free, or the task expired: declined.
    NoLongerPossible,
    /// No code was shown for this step yet (`rdv dinner list` shows one).
    NoCode,
    /// The code was used, expired, or killed by wrong tries: a new one is
    /// shown with the step.
    NewCodeNeeded,
}

/// A refused code, with the tries left when it was a miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CodeRefusal {
    why: GateRefusal,
    misses_left: Option<u32>,
}

impl CodeRefusal {
    fn of(why: GateRefusal) -> Self {
        CodeRefusal {
            why,
            misses_left: None,
        }
    }

    fn value(self, task_id: &str, done: &str) -> Value {
        let mut v = refusal(task_id, self.why, done);
        if let (Some(n), Value::Object(m)) = (self.misses_left, &mut v) {
            m.insert("misses_left".into(), json!(n));
        }
        v
    }
}

impl GateRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            GateRefusal::NothingToConfirm => "nothing_to_confirm",
            GateRefusal::Changed => "meeting_changed",
            GateRefusal::WrongCode => "wrong_code",
            GateRefusal::CodeNeeded => "code_needed",
            GateRefusal::NoLongerPossible => "no_longer_possible",
            GateRefusal::NoCode => "no_code",
            GateRefusal::NewCodeNeeded => "new_code_needed",
        }
    }
}

fn scope_of(v: Option<&crate::state::HeldGrant>) -> Option<Scope> {
    v.and_then(|g| Scope::parse(&g.scope, "scope").ok())
}

/// The limits of the meetings capability in a scope, if it allows them
/// (§7.4: invoke first, the boolean as fallback, both disagreeing: none).
fn meeting_limits(s: &Scope) -> Option<InvokeLimits> {
    s.may_invoke(EXT_MEETINGS).copied()
}

impl Agent {
    fn meeting_touch(&mut self, key: &str) {
        self.state.touch(Table::Meeting, key);
    }

    /// Whether we keep a task (or tombstone) `task_id` with `peer`.
    pub(crate) fn meeting_has(&self, peer: &AgentId, task_id: &str) -> bool {
        self.state
            .meetings
            .tasks
            .contains_key(&task_key(peer, task_id))
    }

    /// §7.4: our owner's grant to `peer` allows it to propose meetings.
    pub(crate) fn meetings_from(&self, peer: &AgentId) -> Option<(String, InvokeLimits)> {
        let c = self.state.contact(peer)?;
        let g = c.granted_by_us.as_ref()?;
        let l = meeting_limits(&scope_of(Some(g))?)?;
        Some((g.id.clone(), l))
    }

    /// §7.4: the peer's grant (or reverse grant) to us allows meetings.
    pub(crate) fn meetings_to(&self, peer: &AgentId) -> Option<InvokeLimits> {
        let c = self.state.contact(peer)?;
        meeting_limits(&scope_of(c.granted_to_us.as_ref())?)
    }

    /// The grant that covers a task's direction (§7.4): the peer's proposal
    /// is covered by our owner's grant, ours by the peer's grant to us.
    fn meeting_covered(&self, peer: &AgentId, proposer: Side) -> bool {
        match proposer {
            Side::Peer => self.meetings_from(peer).is_some(),
            Side::Us => self.meetings_to(peer).is_some(),
        }
    }

    fn meeting_event(&mut self, key: &str, step: &str, slot: Option<Slot>, reason: Option<&str>) {
        let Some(t) = self.state.meetings.tasks.get(key) else {
            return;
        };
        let label = self
            .state
            .contacts
            .get(&t.peer)
            .and_then(|c| c.label.clone());
        let e = Event::Meeting {
            step: step.to_string(),
            peer: t.peer.clone(),
            label,
            task_id: t.task_id.clone(),
            context_id: t.context_id.clone(),
            state: t.state.as_str().to_string(),
            slot,
            slots: t.last_offer().map(|o| o.slots.clone()).unwrap_or_default(),
            reason: reason.map(UntrustedPeerText::new),
            waiting_for_you: t.gate.as_ref().map(|g| g.stage.as_str().to_string()),
        };
        self.tell(e);
    }

    /// Sends one meeting verb on a task (§7.1: one data part, its URI listed).
    fn meeting_send(
        &mut self,
        peer: &AgentId,
        task_id: &str,
        context_id: &str,
        verb: &Verb,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let name = verb_name(verb);
        let m = Message::agent(
            ctx.uuid(),
            task_id,
            context_id,
            extension_of(name),
            verb_data(verb),
        );
        let routes = self.contact_routes(peer);
        self.send_payload(peer, &a2a::message_payload(&m), routes, ctx)?;
        Ok(())
    }

    fn meeting_send_status(
        &mut self,
        peer: &AgentId,
        task_id: &str,
        context_id: &str,
        state: TaskState,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let p = a2a::status_payload(task_id, context_id, state, ctx.now, None);
        let routes = self.contact_routes(peer);
        self.send_payload(peer, &p, routes, ctx)?;
        Ok(())
    }

    /// Closes a task's gate (and, once it ended, its agreement's cancel),
    /// keeping the code last shown to tell "changed" from "wrong".
    fn meeting_retire_gate(t: &mut MeetingTask) {
        if let Some(c) = t.gate.take().and_then(|g| g.code) {
            t.retired_code = Some(c);
        }
        if t.state.is_terminal()
            && let Some(c) = t.agreement_code.take()
        {
            t.retired_code = Some(c);
        }
    }

    /// Ends a task in `state`, releasing its hold (§7.3).
    fn meeting_end(&mut self, key: &str, state: TaskState, why: Option<String>, now: Instant) {
        if let Some(t) = self.state.meetings.tasks.get_mut(key) {
            Self::meeting_retire_gate(t);
            t.state = state;
            t.hold = None;
            t.accepted = None;
            t.end_reason = why;
            t.updated = now;
        }
        self.meeting_touch(key);
    }

    fn meeting_open_gate(
        &mut self,
        key: &str,
        stage: Stage,
        slot: Slot,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let nonce = hex::encode(&ctx.bytes32()[..16]);
        if let Some(t) = self.state.meetings.tasks.get_mut(key) {
            Self::meeting_retire_gate(t);
            t.hold = Some(Hold {
                slot,
                kind: HoldKind::Tentative,
            });
            t.gate = Some(Gate {
                stage,
                slot,
                nonce,
                code: None,
            });
            t.updated = ctx.now;
        }
        self.meeting_touch(key);
        if let Some(t) = self.state.meetings.tasks.get(key).cloned()
            && let Some(g) = t.gate.clone()
            && t.proposer == Side::Peer
            && self.auto_covers_meeting(&t.peer, ctx)
        {
            return self.meeting_auto_pass(key, &t, &g, ctx);
        }
        self.meeting_event(key, "confirm-needed", Some(slot), None);
        Ok(())
    }

    /// §5.5.1 (issue #44): auto_approve: all on the contact takes the step
    /// of a negotiation the contact started, audited like a task gate.
    fn meeting_auto_pass(
        &mut self,
        key: &str,
        t: &MeetingTask,
        g: &Gate,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let verb = match g.stage {
            Stage::Accept => Verb::Accept { slot: g.slot },
            Stage::Confirm => Verb::Confirm { slot: g.slot },
            Stage::Cancel => return Ok(()),
        };
        let left = rdv_proto::canon::to_vec(&Value::Object(verb_data(&verb))).unwrap_or_default();
        self.audit_append(crate::owner::AuditLine {
            at: ctx.unix(),
            contact: t.peer.clone(),
            action: "pass".into(),
            capability: Some(EXT_MEETINGS.into()),
            task_id: Some(t.task_id.clone()),
            gate: Some(g.stage.as_str().into()),
            digest: Some(gate_digest(t, g.stage, &g.slot, &g.nonce)),
            left_sha256: Some(hex::encode(Sha256::digest(&left))),
            left_bytes: Some(left.len() as u64),
            via: "auto-approve".into(),
        });
        self.meeting_event(key, "auto-approved", Some(g.slot), None);
        self.meeting_pass_gate(key, t, g, ctx).map(|_| ())
    }

    fn meeting_decline(&mut self, key: &str, reason: &str, ctx: &mut Ctx<'_>) -> Result<()> {
        let Some(t) = self.state.meetings.tasks.get(key).cloned() else {
            return Ok(());
        };
        self.meeting_end(key, TaskState::Rejected, Some(reason.to_string()), ctx.now);
        self.meeting_send(
            &t.peer,
            &t.task_id,
            &t.context_id,
            &Verb::Decline {
                reason: Some(reason.to_string()),
            },
            ctx,
        )?;
        self.meeting_event(key, "rejected", None, None);
        Ok(())
    }

    /// Our turn after the peer's offer: the reference policy (§7.3).
    fn meeting_respond(&mut self, key: &str, ctx: &mut Ctx<'_>) -> Result<()> {
        let Some(t) = self.state.meetings.tasks.get(key).cloned() else {
            return Ok(());
        };
        if ctx.now >= t.expires {
            return self.meeting_decline(key, "expired", ctx);
        }
        let Some(offer) = t.last_offer().filter(|o| o.by == Side::Peer) else {
            return Ok(());
        };
        let book = &self.state.meetings;
        if let Some(s) = offer
            .slots
            .iter()
            .find(|s| s.start > ctx.now && book.is_free(s, Some(key)))
        {
            // Accept the first free slot: held, and waiting for the human.
            let s = *s;
            return self.meeting_open_gate(key, Stage::Accept, s, ctx);
        }
        if t.offers.len() >= MEETING_MAX_OFFERS {
            // §7.3: the receiver of the third offer declines if nothing fits.
            return self.meeting_decline(key, "nothing fits", ctx);
        }
        let ours = book.counter_slots(&offer.slots, ctx.now, key);
        if ours.is_empty() {
            return self.meeting_decline(key, "nothing fits", ctx);
        }
        if let Some(t) = self.state.meetings.tasks.get_mut(key) {
            t.offers.push(Offer {
                by: Side::Us,
                slots: ours.clone(),
            });
            // §7.3: the responder's counter is input-required, the
            // proposer's counter back is working.
            t.state = match t.proposer {
                Side::Peer => TaskState::InputRequired,
                Side::Us => TaskState::Working,
            };
            t.updated = ctx.now;
        }
        self.meeting_touch(key);
        self.meeting_send(
            &t.peer,
            &t.task_id,
            &t.context_id,
            &Verb::Counter { slots: ours },
            ctx,
        )?;
        self.meeting_event(key, "countered", None, None);
        Ok(())
    }

    /// One meeting message from a contact (§7.2–§7.4).
    pub(crate) fn meeting_message(
        &mut self,
        from: &AgentId,
        m: Inbound,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        self.meetings_expire(ctx);
        let verb = match parse_verb(&m.verb, &m.data) {
            Ok(v) => v,
            Err(DataRefusal::Malformed(_)) => return Ok(()),
            Err(DataRefusal::Unsupported(why)) => {
                let u = Unsupported {
                    task_id: m.task_id,
                    context_id: m.context_id,
                    message_id: m.message_id,
                    verb: Some(m.verb),
                    why,
                };
                return if self.meeting_has(from, &u.task_id) {
                    self.meeting_unsupported(from, u, ctx)
                } else {
                    self.meeting_unsupported_unknown_task(from, u, ctx)
                };
            }
        };
        let key = task_key(from, &m.task_id);
        let Some(t) = self.state.meetings.tasks.get(&key).cloned() else {
            return match verb {
                Verb::Propose { .. } => self.meeting_on_propose(from, &m, verb, ctx),
                Verb::Cancel { .. } => self.meeting_tombstone(from, &m, ctx),
                // Nothing to answer for a task we never had.
                _ => Ok(()),
            };
        };
        // One contextId covers one negotiation (§7.1).
        if t.context_id != m.context_id {
            return Ok(());
        }
        // §7: a re-sent message (same messageId, new envelope) is dropped.
        if t.seen.contains(&m.message_id) {
            return Ok(());
        }
        // Kept as seen only when it was acted on: a message that changes
        // nothing (no event, nothing sent) leaves no state either.
        let (events, effects) = (self.events.len(), self.effects.len());
        self.meeting_on_task(from, &key, t, verb, ctx)?;
        if self.events.len() != events || self.effects.len() != effects {
            if let Some(t) = self.state.meetings.tasks.get_mut(&key) {
                t.seen.push(m.message_id.clone());
                let n = t.seen.len();
                if n > A2A_MAX_SEEN_PER_TASK {
                    t.seen.drain(..n - A2A_MAX_SEEN_PER_TASK);
                }
            }
            self.meeting_touch(&key);
        }
        Ok(())
    }

    /// One verb on a task we keep, after the context and dedupe checks.
    fn meeting_on_task(
        &mut self,
        from: &AgentId,
        key: &str,
        t: MeetingTask,
        verb: Verb,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let key = key.to_string();
        // meeting/cancel of an agreed meeting (§7.3).
        if let Verb::MeetingCancel { slot, reason } = &verb
            && t.state == TaskState::Completed
            && !t.tombstone
        {
            if t.agreed == Some(*slot) && t.hold.is_some() {
                self.meeting_end(&key, TaskState::Canceled, reason.clone(), ctx.now);
                self.meeting_send_status(
                    from,
                    &t.task_id,
                    &t.context_id,
                    TaskState::Canceled,
                    ctx,
                )?;
                self.meeting_event(&key, "meeting-canceled", Some(*slot), reason.as_deref());
            }
            // Another slot, or no longer held: dropped.
            return Ok(());
        }
        if !t.open() {
            // §7.3: any verb for a finished task (or a proposal under a
            // tombstone) is answered with its real end state.
            return self.meeting_finished_reply(&key, ctx);
        }
        if !self.meeting_covered(from, t.proposer) {
            // The grant covering this negotiation no longer allows it.
            return Ok(());
        }
        match verb {
            // A second proposal under a live task id: not a new negotiation.
            Verb::Propose { .. } | Verb::MeetingCancel { .. } => Ok(()),
            Verb::Counter { slots } => {
                let our_turn_was_theirs = t.last_offer().is_some_and(|o| o.by == Side::Us)
                    && t.accepted.is_none()
                    && t.gate.is_none();
                if !our_turn_was_theirs {
                    return Ok(());
                }
                if t.offers.len() >= MEETING_MAX_OFFERS {
                    return self.meeting_decline(&key, "over three offers", ctx);
                }
                if let Some(x) = self.state.meetings.tasks.get_mut(&key) {
                    x.offers.push(Offer {
                        by: Side::Peer,
                        slots,
                    });
                    x.state = match x.proposer {
                        Side::Peer => TaskState::Working,
                        Side::Us => TaskState::InputRequired,
                    };
                    x.updated = ctx.now;
                }
                self.meeting_touch(&key);
                self.meeting_event(&key, "offer-received", None, None);
                self.meeting_respond(&key, ctx)
            }
            Verb::Accept { slot } => {
                let Some(offer) = t.last_offer().filter(|o| o.by == Side::Us) else {
                    return Ok(());
                };
                if t.gate.is_some() || t.accepted.is_some() {
                    return Ok(());
                }
                // §7.3: an accept MUST pick a slot of the latest offer.
                if !offer.slots.contains(&slot) {
                    return self.meeting_decline(&key, "the slot is not in the latest offer", ctx);
                }
                // The offerer checks the slot is still free and the task
                // has not expired (offers are not held).
                if ctx.now >= t.expires {
                    return self.meeting_decline(&key, "expired", ctx);
                }
                if !self.state.meetings.is_free(&slot, Some(&key)) {
                    return self.meeting_decline(&key, "the slot is no longer free", ctx);
                }
                self.meeting_event(&key, "accepted", Some(slot), None);
                self.meeting_open_gate(&key, Stage::Confirm, slot, ctx)
            }
            Verb::Confirm { slot } => {
                if t.accepted != Some(slot) {
                    return Ok(());
                }
                let nonce = hex::encode(&ctx.bytes32()[..16]);
                if let Some(x) = self.state.meetings.tasks.get_mut(&key) {
                    x.state = TaskState::Completed;
                    x.hold = Some(Hold {
                        slot,
                        kind: HoldKind::Agreed,
                    });
                    x.agreed = Some(slot);
                    x.accepted = None;
                    x.agreement_nonce = Some(nonce);
                    x.agreement_code = None;
                    x.updated = ctx.now;
                }
                self.meeting_touch(&key);
                // The accepter completes and acknowledges (§7.3).
                self.meeting_send_status(
                    from,
                    &t.task_id,
                    &t.context_id,
                    TaskState::Completed,
                    ctx,
                )?;
                self.meeting_event(&key, "completed", Some(slot), None);
                Ok(())
            }
            Verb::Decline { reason } => {
                self.meeting_end(&key, TaskState::Rejected, reason.clone(), ctx.now);
                self.meeting_event(&key, "rejected", None, reason.as_deref());
                Ok(())
            }
            Verb::Cancel { reason } => {
                self.meeting_end(&key, TaskState::Canceled, reason.clone(), ctx.now);
                self.meeting_send_status(
                    from,
                    &t.task_id,
                    &t.context_id,
                    TaskState::Canceled,
                    ctx,
                )?;
                self.meeting_event(&key, "canceled", None, reason.as_deref());
                Ok(())
            }
        }
    }

    /// §7.3: the answer for a finished task, at most 8 per task.
    fn meeting_finished_reply(&mut self, key: &str, ctx: &mut Ctx<'_>) -> Result<()> {
        let Some(t) = self.state.meetings.tasks.get_mut(key) else {
            return Ok(());
        };
        if t.finished_replies >= A2A_MAX_REPLIES_PER_TASK {
            return Ok(());
        }
        t.finished_replies += 1;
        let (peer, task, context, state) = (
            t.peer.clone(),
            t.task_id.clone(),
            t.context_id.clone(),
            t.state,
        );
        self.meeting_touch(key);
        self.meeting_send_status(&peer, &task, &context, state, ctx)
    }

    /// §7.5 rule 5 for a task we keep: its real state, at most 8 per task.
    pub(crate) fn meeting_unsupported(
        &mut self,
        from: &AgentId,
        u: Unsupported,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let key = task_key(from, &u.task_id);
        let Some(t) = self.state.meetings.tasks.get_mut(&key) else {
            return Ok(());
        };
        if t.context_id != u.context_id || t.unsupported_replies >= A2A_MAX_REPLIES_PER_TASK {
            return Ok(());
        }
        t.unsupported_replies += 1;
        let state = t.state;
        self.meeting_touch(&key);
        let p = a2a::unsupported_reply(&u, Some(state), ctx.now);
        let routes = self.contact_routes(from);
        self.send_payload(from, &p, routes, ctx)?;
        Ok(())
    }

    /// §7.5 rule 5 for a task we do not have: only within a meeting-capable
    /// grant, as rejected, at most 8 a day per peer (no task to count on).
    pub(crate) fn meeting_unsupported_unknown_task(
        &mut self,
        from: &AgentId,
        u: Unsupported,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let Some((grant_id, _)) = self.meetings_from(from) else {
            return Ok(());
        };
        let now = ctx.unix();
        // The bound is read before anything changes: a refusal keeps no state.
        let recent = self
            .state
            .meetings
            .peers
            .get(from)
            .filter(|p| p.grant_id.as_deref() == Some(grant_id.as_str()))
            .map_or(0, |p| {
                p.unknown_replies
                    .iter()
                    .filter(|t| now - **t < 86_400)
                    .count()
            });
        if recent as u32 >= A2A_MAX_REPLIES_PER_TASK {
            return Ok(());
        }
        let p = self.meeting_peer_counters(from, &grant_id);
        p.unknown_replies.retain(|t| now - t < 86_400);
        p.unknown_replies.push(now);
        self.state.touch(Table::MeetingPeer, from.as_str());
        let reply = a2a::unsupported_reply(&u, None, ctx.now);
        let routes = self.contact_routes(from);
        self.send_payload(from, &reply, routes, ctx)?;
        Ok(())
    }

    /// The peer's counters, started afresh under a new grant (§5.3).
    fn meeting_peer_counters(&mut self, peer: &AgentId, grant_id: &str) -> &mut PeerMeetings {
        self.state.touch(Table::MeetingPeer, peer.as_str());
        let p = self.state.meetings.peers.entry(peer.clone()).or_default();
        if p.grant_id.as_deref() != Some(grant_id) {
            *p = PeerMeetings {
                grant_id: Some(grant_id.to_string()),
                ..Default::default()
            };
        }
        p
    }

    /// A decline for a proposal we keep no state for.
    fn meeting_decline_unkept(
        &mut self,
        from: &AgentId,
        m: &Inbound,
        reason: &str,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        self.meeting_send(
            from,
            &m.task_id,
            &m.context_id,
            &Verb::Decline {
                reason: Some(reason.to_string()),
            },
            ctx,
        )
    }

    /// §7.4 per-peer cap: room for one more task, evicting finished tasks
    /// and tombstones first (oldest first); false when all are open.
    fn meeting_room_for(&mut self, peer: &AgentId) -> bool {
        let prefix = format!("{peer} ");
        let mine: Vec<(String, bool, Instant)> = self
            .state
            .meetings
            .tasks
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(k, t)| (k.clone(), t.open(), t.updated))
            .collect();
        if mine.len() < MEETING_MAX_TASKS_PER_PEER {
            return true;
        }
        let Some((k, _, _)) = mine.iter().filter(|x| !x.1).min_by_key(|x| x.2) else {
            return false;
        };
        self.state.meetings.tasks.remove(k);
        self.meeting_touch(&k.clone());
        true
    }

    /// §5.3: a meeting proposal refused for a limit (already counted by
    /// `limits_check`): declined with reason rate, no state; when the
    /// refusal meets gross abuse (b), the contact is then revoked (as a
    /// task's is: rejected, then the rdv/revoke).
    fn meeting_rate_refusal(
        &mut self,
        from: &AgentId,
        m: &Inbound,
        why: &str,
        revoke: Option<crate::limits::Abuse>,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        self.meeting_decline_unkept(from, m, &format!("rate: {why}"), ctx)?;
        self.tell(Event::Meeting {
            step: "refused".into(),
            peer: from.clone(),
            label: self.state.contacts.get(from).and_then(|c| c.label.clone()),
            task_id: m.task_id.clone(),
            context_id: m.context_id.clone(),
            state: TaskState::Rejected.as_str().into(),
            slot: None,
            slots: Vec::new(),
            reason: None,
            waiting_for_you: None,
        });
        if let Some(abuse) = revoke {
            self.revoke_for_abuse(from, &m.task_id, EXT_MEETINGS, &abuse, ctx)?;
        }
        Ok(())
    }

    /// A peer's proposal (§7.4 scope, per-peer bound, per-capability limits).
    fn meeting_on_propose(
        &mut self,
        from: &AgentId,
        m: &Inbound,
        verb: Verb,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let Verb::Propose {
            slots,
            expires,
            place,
            intent,
        } = verb
        else {
            return Ok(());
        };
        // Only a grant whose invoke covers meetings creates a task (§7.4).
        let Some((grant_id, limits)) = self.meetings_from(from) else {
            self.tell(Event::Dropped {
                from: Some(from.clone()),
                reason: "a meeting proposal our grant does not allow (§7.4)".into(),
            });
            return Ok(());
        };
        let expires = clamp_expires(expires, ctx.now);
        if expires <= ctx.now {
            return self.meeting_decline_unkept(from, m, "expired", ctx);
        }
        // The per-peer bound (§7.4; never counted towards abuse).
        if !self.meeting_room_for(from) {
            return self.meeting_decline_unkept(from, m, "rate: too many negotiations", ctx);
        }
        // §5.3 counting, last: max_open over its proposals still pending and
        // max_frequency over admitted ones, in the contact's one limit book
        // (the meetings URI as the capability), rejections counted towards
        // (b) with the contact's tasks.
        let prefix = format!("{from} ");
        let open = self
            .state
            .meetings
            .tasks
            .iter()
            .filter(|(k, t)| k.starts_with(&prefix) && t.open() && t.proposer == Side::Peer)
            .count() as u64;
        if let crate::limits::Verdict::Rejected { limit, revoke } =
            self.limits_check(from, &grant_id, EXT_MEETINGS, &limits, open, ctx)
        {
            let why = match limit {
                crate::limits::Limit::MaxOpen => "too many open proposals",
                crate::limits::Limit::MaxFrequency => "over max_frequency",
            };
            return self.meeting_rate_refusal(from, m, why, revoke, ctx);
        }
        let key = task_key(from, &m.task_id);
        let t = MeetingTask {
            peer: from.clone(),
            task_id: m.task_id.clone(),
            context_id: m.context_id.clone(),
            proposer: Side::Peer,
            state: TaskState::Submitted,
            tombstone: false,
            offers: vec![Offer {
                by: Side::Peer,
                slots,
            }],
            expires,
            hold: None,
            gate: None,
            accepted: None,
            agreed: None,
            agreement_nonce: None,
            agreement_code: None,
            intent,
            place,
            end_reason: None,
            seen: vec![m.message_id.clone()],
            finished_replies: 0,
            unsupported_replies: 0,
            status_seen: 0,
            retired_code: None,
            created: ctx.now,
            updated: ctx.now,
        };
        self.state.meetings.tasks.insert(key.clone(), t);
        self.meeting_touch(&key);
        self.meeting_event(&key, "offer-received", None, None);
        self.meeting_respond(&key, ctx)
    }

    /// §7.3: a cancel before its proposal leaves a tombstone, only within a
    /// grant that covers meetings (§7.4).
    fn meeting_tombstone(&mut self, from: &AgentId, m: &Inbound, ctx: &mut Ctx<'_>) -> Result<()> {
        if self.meetings_from(from).is_none() || !self.meeting_room_for(from) {
            return Ok(());
        }
        let key = task_key(from, &m.task_id);
        let t = MeetingTask {
            peer: from.clone(),
            task_id: m.task_id.clone(),
            context_id: m.context_id.clone(),
            proposer: Side::Peer,
            state: TaskState::Canceled,
            tombstone: true,
            offers: Vec::new(),
            expires: ctx.now,
            hold: None,
            gate: None,
            accepted: None,
            agreed: None,
            agreement_nonce: None,
            agreement_code: None,
            intent: None,
            place: None,
            end_reason: None,
            seen: vec![m.message_id.clone()],
            finished_replies: 0,
            unsupported_replies: 0,
            status_seen: 0,
            retired_code: None,
            created: ctx.now,
            updated: ctx.now,
        };
        self.state.meetings.tasks.insert(key.clone(), t);
        self.meeting_touch(&key);
        // Honored (§7.3): acknowledged as canceled.
        self.meeting_send_status(from, &m.task_id, &m.context_id, TaskState::Canceled, ctx)
    }

    /// A peer's status update for one of our meeting tasks (§7.3, §7.5).
    pub(crate) fn meeting_status(
        &mut self,
        from: &AgentId,
        u: StatusUpdate,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let key = task_key(from, &u.task_id);
        let Some(t) = self.state.meetings.tasks.get_mut(&key) else {
            return Ok(());
        };
        if t.context_id != u.context_id || t.tombstone {
            return Ok(());
        }
        // §7.4: status updates processed per task, at most 64 (counted
        // when one is acted on: the rest change nothing).
        if t.status_seen >= 64 {
            return Ok(());
        }
        let (events, effects) = (self.events.len(), self.effects.len());
        self.meeting_status_apply(from, &key, &u, ctx);
        if self.events.len() != events || self.effects.len() != effects {
            if let Some(t) = self.state.meetings.tasks.get_mut(&key) {
                t.status_seen += 1;
            }
            self.meeting_touch(&key);
        }
        Ok(())
    }

    fn meeting_status_apply(&mut self, from: &AgentId, key: &str, u: &StatusUpdate, ctx: &Ctx<'_>) {
        let key = key.to_string();
        if let Some((_, verb)) = u.unsupported() {
            // §7.5 rule 5: the peer did not act on one of ours. It changes
            // nothing beyond what its state already means; tell the human.
            let verb = verb.filter(|v| is_meeting_verb(v) || v == VERB_CANCEL);
            let why = format!(
                "the peer's agent does not support {}: settle it with them directly",
                verb.as_deref().unwrap_or("one of our messages")
            );
            self.meeting_event(&key, "unsupported", None, None);
            self.tell(Event::Dropped {
                from: Some(from.clone()),
                reason: why,
            });
        }
        let Some(t) = self.state.meetings.tasks.get(&key).cloned() else {
            return;
        };
        match u.state {
            TaskState::Canceled | TaskState::Rejected if t.open() => {
                self.meeting_end(&key, u.state, None, ctx.now);
                self.meeting_event(&key, u.state.as_str(), None, None);
            }
            // §7.3: a peer canceled or rejected a task we completed (the
            // confirm crossed a cancel or arrived too late): released.
            TaskState::Canceled | TaskState::Rejected
                if t.state == TaskState::Completed && t.hold.is_some() =>
            {
                let slot = t.agreed;
                self.meeting_end(&key, u.state, None, ctx.now);
                self.meeting_event(&key, "released", slot, None);
            }
            _ => {}
        }
    }

    /// §7.3 expiry: tentative holds are released when the task expires; an
    /// accepter waiting for the confirm keeps its hold for the grace period.
    /// §7.4: finished tasks and tombstones are pruned after 30 days.
    pub(crate) fn meetings_expire(&mut self, ctx: &Ctx<'_>) {
        let now = ctx.now;
        let grace = time::Duration::seconds(MEETING_HOLD_GRACE_SECS);
        let prune = time::Duration::seconds(MEETING_PRUNE_AFTER_SECS);
        let mut expired = Vec::new();
        let mut pruned = Vec::new();
        for (k, t) in &self.state.meetings.tasks {
            if t.open() {
                let until = if t.accepted.is_some() {
                    t.expires + grace
                } else {
                    t.expires
                };
                if now >= until {
                    expired.push(k.clone());
                }
            } else if now - t.updated > prune {
                pruned.push(k.clone());
            }
        }
        for k in expired {
            self.meeting_end(&k, TaskState::Canceled, Some("expired".into()), now);
            self.meeting_event(&k, "expired", None, None);
        }
        for k in pruned {
            self.state.meetings.tasks.remove(&k);
            self.meeting_touch(&k);
        }
    }

    /// Tick: expiry and pruning (§7.3, §7.4).
    pub fn meetings_tick(&mut self, ctx: &Ctx<'_>) -> Result<()> {
        self.meetings_expire(ctx);
        Ok(())
    }

    // ---- the owner's commands ------------------------------------------------

    /// The owner proposes a meeting (§7.3 reference policy, §7.4 scope).
    pub(crate) fn propose_meeting(&mut self, p: Proposal, ctx: &mut Ctx<'_>) -> Result<Value> {
        self.meetings_expire(ctx);
        let c = self
            .state
            .contact(&p.to)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("{} is not a current contact", p.to)))?;
        // Senders check their own grant first (§5.3, §7.4).
        let limits = self.meetings_to(&p.to).ok_or_else(|| {
            Error::Refused(format!(
                "{}'s grant does not let this agent propose meetings (§7.4): until their owner \
                 grants you back, you cannot propose; ask them to propose instead",
                p.to
            ))
        })?;
        let card = rdv_proto::doc::card::Card::parse_signed(&c.card, true)?;
        if !card.has_capability(EXT_MEETINGS) {
            return Err(Error::Refused(
                "their card does not list the meetings extension (§7.5): their agent cannot \
                 negotiate a meeting"
                    .into(),
            ));
        }
        let prefix = format!("{} ", p.to);
        let open_ours = self
            .state
            .meetings
            .tasks
            .iter()
            .filter(|(k, t)| k.starts_with(&prefix) && t.open() && t.proposer == Side::Us)
            .count() as u64;
        if open_ours >= limits.max_open.unwrap_or(TASK_DEFAULT_MAX_OPEN) {
            return Err(Error::Refused(
                "rate: as many of your proposals are open as their grant allows".into(),
            ));
        }
        if let Some(f) = limits.max_frequency {
            let sent = self
                .state
                .meetings
                .tasks
                .iter()
                .filter(|(k, t)| {
                    k.starts_with(&prefix)
                        && t.proposer == Side::Us
                        && (ctx.now - t.created).whole_seconds() < f.window_secs
                })
                .count() as u64;
            if sent >= f.count {
                return Err(Error::Refused(
                    "rate: their grant's max_frequency for meetings is reached".into(),
                ));
            }
        }
        if let Some(pl) = &p.place {
            own_text("a place", pl)?;
        }
        let slots = if let Some((from, to, minutes)) = p.window {
            if !(15..=MEETING_SLOT_MAX_SECS / 60).contains(&minutes) || to <= from {
                return Err(Error::Input(
                    "a window needs --from before --to and --minutes between 15 and 720".into(),
                ));
            }
            self.state.meetings.window_slots(from, to, minutes, ctx.now)
        } else {
            p.slots.clone()
        };
        if slots.is_empty() {
            return Err(Error::Refused(
                "no free slot to offer in that window".into(),
            ));
        }
        if slots.len() > MEETING_MAX_SLOTS {
            return Err(Error::Input(format!("at most {MEETING_MAX_SLOTS} slots")));
        }
        for s in &slots {
            Slot::new(s.start, s.end).map_err(Error::Input)?;
            if s.start <= ctx.now {
                return Err(Error::Input("a slot starts in the future".into()));
            }
        }
        let expires = clamp_expires(p.expires, ctx.now);
        if expires <= ctx.now {
            return Err(Error::Input("expires is in the future".into()));
        }
        let task_id = ctx.uuid();
        let context_id = ctx.uuid();
        let key = task_key(&p.to, &task_id);
        let t = MeetingTask {
            peer: p.to.clone(),
            task_id: task_id.clone(),
            context_id: context_id.clone(),
            proposer: Side::Us,
            state: TaskState::Submitted,
            tombstone: false,
            offers: vec![Offer {
                by: Side::Us,
                slots: slots.clone(),
            }],
            expires,
            hold: None,
            gate: None,
            accepted: None,
            agreed: None,
            agreement_nonce: None,
            agreement_code: None,
            intent: p.intent.clone(),
            place: p.place.clone(),
            end_reason: None,
            seen: Vec::new(),
            finished_replies: 0,
            unsupported_replies: 0,
            status_seen: 0,
            retired_code: None,
            created: ctx.now,
            updated: ctx.now,
        };
        self.state.meetings.tasks.insert(key.clone(), t);
        self.meeting_touch(&key);
        let verb = Verb::Propose {
            slots: slots.clone(),
            expires: Some(expires),
            place: p.place,
            intent: p.intent,
        };
        self.meeting_send(&p.to, &task_id, &context_id, &verb, ctx)?;
        self.meeting_event(&key, "proposed", None, None);
        Ok(json!({
            "task_id": task_id,
            "context_id": context_id,
            "to": p.to,
            "slots": slots_value(&slots),
            "expires": format_time(expires),
            "state": TaskState::Submitted.as_str(),
        }))
    }

    fn meeting_tasks_by_id(&self, task_id: &str, peer: Option<&AgentId>) -> Vec<String> {
        self.state
            .meetings
            .tasks
            .iter()
            .filter(|(_, t)| t.task_id == task_id && peer.is_none_or(|p| &t.peer == p))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// §5.5: the human confirms the held meeting they were shown, by its
    /// code. Another slot, peer, stage or negotiation confirms nothing.
    pub(crate) fn confirm_meeting(
        &mut self,
        task_id: &str,
        peer: Option<&AgentId>,
        code: &str,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        self.meetings_expire(ctx);
        let keys = self.meeting_tasks_by_id(task_id, peer);
        let waiting: Vec<&String> = keys
            .iter()
            .filter(|k| {
                self.state.meetings.tasks.get(*k).is_some_and(|t| {
                    t.open() && t.gate.as_ref().is_some_and(|g| g.stage != Stage::Cancel)
                })
            })
            .collect();
        let key = match waiting.as_slice() {
            [one] => (*one).clone(),
            [] => {
                // A code shown for a gate that closed since is told apart.
                let mut changed = false;
                for k in &keys {
                    changed |= self.meeting_retired_code_matches(k, code);
                }
                let why = if changed {
                    GateRefusal::Changed
                } else {
                    GateRefusal::NothingToConfirm
                };
                return Ok(refusal(task_id, why, "confirmed"));
            }
            many => {
                return Err(Error::Input(format!(
                    "{} meetings with the id {task_id} wait for you: name the contact",
                    many.len()
                )));
            }
        };
        let key = &key;
        let Some(t) = self.state.meetings.tasks.get(key).cloned() else {
            return Ok(refusal(task_id, GateRefusal::NothingToConfirm, "confirmed"));
        };
        let Some(g) = t.gate.clone() else {
            return Ok(refusal(task_id, GateRefusal::NothingToConfirm, "confirmed"));
        };
        if !self.meeting_covered(&t.peer, t.proposer) {
            return Ok(refusal(task_id, GateRefusal::NothingToConfirm, "confirmed"));
        }
        if let Some(r) = self.meeting_check_code(key, code, ctx.now) {
            return Ok(r.value(task_id, "confirmed"));
        }
        // Still free, and not expired, when the human acts (§7.3).
        if ctx.now >= t.expires || !self.state.meetings.is_free(&g.slot, Some(key)) {
            self.meeting_decline(key, "the slot is no longer free", ctx)?;
            return Ok(refusal(task_id, GateRefusal::NoLongerPossible, "confirmed"));
        }
        self.meeting_pass_gate(key, &t, &g, ctx)
    }

    /// Takes the step of the gate `g` on `t`: the human approved it, or
    /// auto_approve: all did (§5.5.1). The accept or the confirm leaves.
    fn meeting_pass_gate(
        &mut self,
        key: &str,
        t: &MeetingTask,
        g: &Gate,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        {
            match g.stage {
                Stage::Accept => {
                    if let Some(x) = self.state.meetings.tasks.get_mut(key) {
                        Self::meeting_retire_gate(x);
                        x.accepted = Some(g.slot);
                        x.updated = ctx.now;
                    }
                    self.meeting_touch(key);
                    self.meeting_send(
                        &t.peer,
                        &t.task_id,
                        &t.context_id,
                        &Verb::Accept { slot: g.slot },
                        ctx,
                    )?;
                    self.meeting_event(key, "accept-sent", Some(g.slot), None);
                }
                Stage::Confirm => {
                    let nonce = hex::encode(&ctx.bytes32()[..16]);
                    if let Some(x) = self.state.meetings.tasks.get_mut(key) {
                        Self::meeting_retire_gate(x);
                        x.state = TaskState::Completed;
                        x.hold = Some(Hold {
                            slot: g.slot,
                            kind: HoldKind::Agreed,
                        });
                        x.agreed = Some(g.slot);
                        x.agreement_nonce = Some(nonce);
                        x.agreement_code = None;
                        x.updated = ctx.now;
                    }
                    self.meeting_touch(key);
                    self.meeting_send(
                        &t.peer,
                        &t.task_id,
                        &t.context_id,
                        &Verb::Confirm { slot: g.slot },
                        ctx,
                    )?;
                    self.meeting_event(key, "completed", Some(g.slot), None);
                }
                Stage::Cancel => {}
            }
            Ok(json!({
                "confirmed": true,
                "task_id": t.task_id,
                "peer": t.peer,
                "stage": g.stage.as_str(),
                "slot": g.slot.to_value(),
            }))
        }
    }

    /// §5.5: a front-end stores the record of a code it is about to show
    /// for the step it showed (`digest`, from [`current_step`]). A step
    /// that changed since gets no code: the front-end shows the new one.
    pub(crate) fn set_meeting_code(
        &mut self,
        task_id: &str,
        peer: Option<&AgentId>,
        digest: &str,
        record: PhraseRecord,
    ) -> Result<Value> {
        let keys = self.meeting_tasks_by_id(task_id, peer);
        let mut set = false;
        for key in &keys {
            let Some(t) = self.state.meetings.tasks.get_mut(key) else {
                continue;
            };
            let Some((stage, _, now_digest)) = current_step(t) else {
                continue;
            };
            let bound = crate::phrase::terms_digest(&code_terms(stage, &now_digest))
                .is_ok_and(|d| d == record.terms_digest());
            if now_digest != digest || !bound {
                continue;
            }
            match (&mut t.gate, stage) {
                (Some(g), _) => g.code = Some(record),
                (None, Stage::Cancel) => t.agreement_code = Some(record),
                (None, _) => break,
            }
            self.meeting_touch(key);
            set = true;
            break;
        }
        Ok(json!({ "code_set": set }))
    }

    /// Checks `typed` against the code shown for the step waiting on `key`
    /// now; `None` approves (the record is spent). Every check is kept:
    /// a miss counts, and [`crate::phrase::PHRASE_MAX_MISSES`] of them kill
    /// the code.
    fn meeting_check_code(&mut self, key: &str, typed: &str, now: Instant) -> Option<CodeRefusal> {
        let t = self.state.meetings.tasks.get_mut(key)?;
        let Some((stage, _, digest)) = current_step(t) else {
            return Some(CodeRefusal::of(GateRefusal::NothingToConfirm));
        };
        let terms = code_terms(stage, &digest);
        let record = match (&mut t.gate, stage) {
            (Some(g), _) => g.code.as_mut(),
            (None, _) => t.agreement_code.as_mut(),
        };
        let verdict = record.map(|r| r.check(typed, &terms, now));
        self.meeting_touch(key);
        let refused = match verdict {
            Some(PhraseVerdict::Approved) => return None,
            Some(PhraseVerdict::WrongPhrase { misses_left }) => CodeRefusal {
                why: GateRefusal::WrongCode,
                misses_left: Some(misses_left),
            },
            Some(PhraseVerdict::TermsChanged) => CodeRefusal::of(GateRefusal::Changed),
            Some(PhraseVerdict::Replaced | PhraseVerdict::AlreadyUsed | PhraseVerdict::Expired) => {
                CodeRefusal::of(GateRefusal::NewCodeNeeded)
            }
            None => CodeRefusal::of(GateRefusal::NoCode),
        };
        // A code for a gate that closed since is "changed", not "wrong".
        if matches!(refused.why, GateRefusal::WrongCode | GateRefusal::NoCode)
            && self.meeting_retired_code_matches(key, typed)
        {
            return Some(CodeRefusal::of(GateRefusal::Changed));
        }
        Some(refused)
    }

    /// Whether `typed` is the code last shown for a gate of `key` that
    /// closed since (used or not): that step changed, nothing is approved.
    fn meeting_retired_code_matches(&self, key: &str, typed: &str) -> bool {
        self.state
            .meetings
            .tasks
            .get(key)
            .and_then(|t| t.retired_code.as_ref())
            .is_some_and(|r| r.was(typed))
    }

    /// The owner cancels: rdv/cancel while negotiating; meeting/cancel for
    /// an agreed meeting, only with the code bound to the agreement shown.
    pub(crate) fn cancel_meeting(
        &mut self,
        task_id: &str,
        peer: Option<&AgentId>,
        code: Option<&str>,
        reason: Option<&str>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        if let Some(r) = reason {
            own_text("a reason", r)?;
        }
        let reason = reason.map(str::to_string);
        self.meetings_expire(ctx);
        let keys = self.meeting_tasks_by_id(task_id, peer);
        let key = match keys.as_slice() {
            [] => return Err(Error::NotFound(format!("no meeting {task_id}"))),
            [k] => k.clone(),
            _ => {
                return Err(Error::Input(format!(
                    "{} meetings have the id {task_id}: name the contact",
                    keys.len()
                )));
            }
        };
        let t = self
            .state
            .meetings
            .tasks
            .get(&key)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no meeting {task_id}")))?;
        if t.tombstone {
            return Err(Error::NotFound(format!("no meeting {task_id}")));
        }
        if t.open() {
            self.meeting_end(
                &key,
                TaskState::Canceled,
                Some(reason.as_ref().map_or_else(
                    || "canceled by you".to_string(),
                    |r| format!("canceled by you: {r}"),
                )),
                ctx.now,
            );
            self.meeting_send(
                &t.peer,
                &t.task_id,
                &t.context_id,
                &Verb::Cancel {
                    reason: reason.clone(),
                },
                ctx,
            )?;
            self.meeting_event(&key, "canceled", None, None);
            return Ok(json!({ "canceled": true, "task_id": t.task_id, "verb": VERB_CANCEL }));
        }
        let (Some(slot), Some(_)) = (t.agreed, t.hold) else {
            return Err(Error::Refused(format!(
                "meeting {task_id} already ended ({})",
                t.state.as_str()
            )));
        };
        let Some(code) = code else {
            return Ok(refusal(task_id, GateRefusal::CodeNeeded, "canceled"));
        };
        if let Some(r) = self.meeting_check_code(&key, code, ctx.now) {
            return Ok(r.value(task_id, "canceled"));
        }
        // §7.3, §7.5 rule 3: sent anyway; the human is told when the peer's
        // card does not list the extension.
        let advertised = self
            .state
            .contacts
            .get(&t.peer)
            .and_then(|c| rdv_proto::doc::card::Card::parse_signed(&c.card, true).ok())
            .is_some_and(|c| c.has_capability(EXT_MEETING_CANCEL));
        self.meeting_end(
            &key,
            TaskState::Canceled,
            Some(reason.as_ref().map_or_else(
                || "canceled by you".to_string(),
                |r| format!("canceled by you: {r}"),
            )),
            ctx.now,
        );
        if let Some(x) = self.state.meetings.tasks.get_mut(&key) {
            x.agreed = Some(slot);
        }
        self.meeting_send(
            &t.peer,
            &t.task_id,
            &t.context_id,
            &Verb::MeetingCancel {
                slot,
                reason: reason.clone(),
            },
            ctx,
        )?;
        self.meeting_event(&key, "canceled", Some(slot), None);
        Ok(json!({
            "canceled": true,
            "task_id": t.task_id,
            "verb": VERB_MEETING_CANCEL,
            "slot": slot.to_value(),
            "peer_may_not_act": !advertised,
            "note": if advertised { Value::Null } else {
                json!("their card does not list meeting/cancel: tell them directly")
            },
        }))
    }

    /// The owner's busy times (the calendar adapter's output).
    pub(crate) fn set_calendar(
        &mut self,
        busy: Vec<Slot>,
        sources: Vec<String>,
        ctx: &Ctx<'_>,
    ) -> Result<Value> {
        let n = busy.len();
        self.state.meetings.calendar = Some(Calendar {
            busy,
            sources,
            updated: ctx.now,
        });
        self.state.touch(Table::Calendar, CALENDAR_KEY);
        Ok(json!({ "busy_intervals": n }))
    }

    /// Every meeting, for `rdv dinner list` (no codes: those are shown only
    /// on the terminal, by the front-end, through [`current_code`]).
    pub(crate) fn list_meetings(&mut self, ctx: &Ctx<'_>) -> Result<Value> {
        self.meetings_expire(ctx);
        let list: Vec<Value> = self
            .state
            .meetings
            .tasks
            .values()
            .filter(|t| !t.tombstone)
            .map(|t| {
                meeting_view(
                    t,
                    self.state
                        .contacts
                        .get(&t.peer)
                        .and_then(|c| c.label.clone()),
                )
            })
            .collect();
        Ok(json!({ "meetings": list }))
    }
}

/// A meeting as shown to the owner (peer text marked).
pub fn meeting_view(t: &MeetingTask, label: Option<String>) -> Value {
    json!({
        "task_id": t.task_id,
        "context_id": t.context_id,
        "peer": t.peer,
        "fingerprint": t.peer.fingerprint(),
        "label": label,
        "proposed_by": if t.proposer == Side::Us { "you" } else { "peer" },
        "state": t.state.as_str(),
        "round": t.offers.len(),
        "offer": t.last_offer().map(|o| json!({
            "by": if o.by == Side::Us { "you" } else { "peer" },
            "slots": slots_value(&o.slots),
        })),
        "held": t.hold.map(|h| json!({
            "slot": h.slot.to_value(),
            "kind": if h.kind == HoldKind::Agreed { "agreed" } else { "tentative" },
        })),
        "waiting_for_you": t.gate.as_ref().map(|g| json!({
            "stage": g.stage.as_str(), "slot": g.slot.to_value(),
        })),
        "agreed": t.agreed.map(|s| s.to_value()),
        "expires": format_time(t.expires),
        "intent": t.intent,
        "place": t.place.as_deref().map(|p| match t.proposer {
            Side::Peer => serde_json::to_value(UntrustedPeerText::new(p)).unwrap_or(Value::Null),
            Side::Us => json!(p),
        }),
        "ended": t.end_reason.as_deref().map(|r| serde_json::to_value(UntrustedPeerText::new(r)).unwrap_or(Value::Null)),
    })
}

fn refusal(task_id: &str, why: GateRefusal, done: &str) -> Value {
    let hint = match why {
        GateRefusal::NothingToConfirm => "nothing by that id waits for you",
        GateRefusal::Changed => {
            "the meeting changed since that code was shown: nothing was done; \
             rdv dinner list shows the meeting now and its new code"
        }
        GateRefusal::WrongCode => "that code is not the one shown: nothing was done",
        GateRefusal::CodeNeeded => {
            "an agreed meeting is called off only with the cancel code rdv dinner list shows"
        }
        GateRefusal::NoLongerPossible => {
            "the slot is no longer free or the negotiation expired: it was declined"
        }
        GateRefusal::NoCode => {
            "no code was shown for this step yet: rdv dinner list shows the meeting and one"
        }
        GateRefusal::NewCodeNeeded => {
            "that code was used, expired, or replaced after too many wrong tries: \
             rdv dinner list shows a new one"
        }
    };
    json!({
        done: false,
        "task_id": task_id,
        "refusal": why.as_str(),
        "message": hint,
    })
}
