//! Restoring from a backup (§6.4.1): what a bundle holds of the home, the
//! restored side's notices and the ack it takes, and a peer's answer to a
//! notice. Notices and acks are acted on before channel ordering: a notice
//! re-bases the chain whatever its seq, and an ack may move the head past
//! a gap it would otherwise sit behind.

use std::collections::BTreeSet;

use rdv_proto::AgentId;
use rdv_proto::channel::{Meta, RestoredDecision};
use rdv_proto::consts::RESTORED_MAX_PER_DAY;
use rdv_proto::doc::card::Card;
use rdv_proto::doc::restored::{RESTORED_ACK_TYPE, RESTORED_TYPE, Restored, RestoredAck};
use rdv_proto::time::{Instant, format_time};
use serde_json::{Map, Value, json};

use crate::agent::{Agent, Ctx};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::record::{Record, Table};
use crate::state::{Carry, ContactStatus, MailProbeIn, Pending, State};

fn backup_err(s: impl Into<String>) -> Error {
    Error::Backup(s.into())
}

/// The bundle's `state` (§6.4.1): every record of the home but what a
/// backup never holds, open approvals and confirm phrases. A pending
/// request is kept without its phrase (the owner is shown a new one).
pub fn backup_state(records: &[Record]) -> Result<Value> {
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        // Every table is decided here: a new one must say what it keeps.
        let value = match r.table {
            Table::Pending => {
                let mut p: Pending = serde_json::from_value(r.value.clone())
                    .map_err(|e| backup_err(format!("pending request {:?}: {e}", r.key)))?;
                p.phrase = None;
                serde_json::to_value(&p).map_err(|e| backup_err(e.to_string()))?
            }
            Table::MailProbeIn => {
                let mut m: MailProbeIn = serde_json::from_value(r.value.clone())
                    .map_err(|e| backup_err(format!("mailbox probe {:?}: {e}", r.key)))?;
                m.pending.phrase = None;
                serde_json::to_value(&m).map_err(|e| backup_err(e.to_string()))?
            }
            Table::Profile
            | Table::Contact
            | Table::Outgoing
            | Table::Blocked
            | Table::ChannelIn
            | Table::ChannelOut
            | Table::Outbox
            | Table::Delivery
            | Table::Seen
            | Table::RelayHealth
            | Table::ProbeLog
            | Table::KnownCard
            | Table::Mailbox
            | Table::GatewayCursor
            | Table::MailProbeOut
            | Table::Invite => r.value.clone(),
            // §5.5: a backup holds no confirm code of a task's gate, and no
            // auto_approve setting (re-enabling is a new human decision,
            // §5.5.1).
            Table::Task => crate::task_flow::without_codes(&r.value)?,
            Table::Owner if r.key.starts_with("auto:") => continue,
            Table::TaskLimits | Table::Owner | Table::Audit | Table::Transfer => r.value.clone(),
            // §5.5: nor a meeting's confirm code: its gates get a new nonce.
            Table::Meeting => crate::meeting::without_codes(&r.value)?,
            Table::MeetingPeer | Table::Calendar => r.value.clone(),
        };
        out.push(json!({"table": r.table.as_str(), "key": r.key, "value": value}));
    }
    Ok(json!({ "records": out }))
}

/// The records a bundle's `state` holds, checked before anything is
/// written: known tables, each record once, no confirm phrase, a state
/// that loads, and a profile whose card is `agent_id`'s own.
pub fn restored_records(state: &Value, agent_id: &AgentId) -> Result<Vec<Record>> {
    let bad = |why: &str| backup_err(format!("the backup's state {why}"));
    let top = state.as_object().ok_or_else(|| bad("is not an object"))?;
    if top.len() != 1 {
        return Err(bad("holds something other than records"));
    }
    let list = top
        .get("records")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("has no list of records"))?;
    let mut seen = BTreeSet::new();
    let mut records = Vec::with_capacity(list.len());
    for r in list {
        let m = r
            .as_object()
            .filter(|m| m.len() == 3)
            .ok_or_else(|| bad("has a record that is not {table, key, value}"))?;
        let table = m
            .get("table")
            .and_then(Value::as_str)
            .and_then(Table::parse)
            .ok_or_else(|| bad("has a record of an unknown table"))?;
        let key = m
            .get("key")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("has a record without a key"))?
            .to_string();
        let value = m
            .get("value")
            .cloned()
            .ok_or_else(|| bad("has a record without a value"))?;
        if !seen.insert((table, key.clone())) {
            return Err(bad("holds a record twice"));
        }
        let phrase = match table {
            Table::Pending => value.get("phrase"),
            Table::MailProbeIn => value.get("pending").and_then(|p| p.get("phrase")),
            _ => None,
        };
        if phrase.is_some_and(|p| !p.is_null()) {
            return Err(bad("holds a confirm phrase (§6.4.1: a backup never does)"));
        }
        records.push(Record { table, key, value });
    }
    let s = State::load(&records).map_err(|e| bad(&format!("does not load: {e}")))?;
    let p = s
        .profile
        .as_ref()
        .ok_or_else(|| bad("has no profile (no agent was set up)"))?;
    let card = Card::parse_signed(&p.card, true)
        .map_err(|e| bad(&format!("has a card that does not verify: {e}")))?;
    if &card.id != agent_id {
        return Err(bad("is another agent's"));
    }
    Ok(records)
}

impl Agent {
    /// §6.4.1, the restored side (`Command::Restored`): for every current
    /// contact, a new outbound epoch whose first envelope is the notice,
    /// sent now. Old-chain envelopes still queued to them are dropped (the
    /// re-based peer takes them for replays). Channels to anyone else keep
    /// their seq: such a peer does not act on a notice, so a jump would
    /// only open a gap no resend fills. Nothing more may go to these
    /// contacts within the notices' second (the peer takes what is not
    /// newer than a notice for a replay): the reply's `send_after` says when.
    pub(crate) fn restored(
        &mut self,
        backup_created: Option<Instant>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        self.state.profile()?;
        let ids: Vec<AgentId> = self
            .state
            .contacts
            .values()
            .filter(|c| c.status == ContactStatus::Active)
            .map(|c| c.id.clone())
            .collect();
        let stale: Vec<String> = self
            .state
            .deliveries
            .values()
            .filter(|d| matches!(&d.carry, Carry::Envelope { to, .. } if ids.contains(to)))
            .map(|d| d.id.clone())
            .collect();
        for d in &stale {
            self.state.deliveries.remove(d);
            self.state.touch(Table::Delivery, d.clone());
        }
        let mut notices = Vec::with_capacity(ids.len());
        for id in &ids {
            let in_seq = self
                .state
                .channels_in
                .get(id)
                .and_then(|c| c.head())
                .map_or(0, |(s, _)| s);
            let payload = self
                .state
                .channels_out
                .entry(id.clone())
                .or_default()
                .restore(ctx.now, in_seq, backup_created);
            let routes = self.contact_routes(id);
            let seq = self.send_payload(id, &payload, routes, ctx)?;
            let out = self
                .state
                .channels_out
                .get_mut(id)
                .ok_or_else(|| Error::Store(format!("no outbound channel to {id}")))?;
            let hash = out
                .next()
                .1
                .map(str::to_string)
                .ok_or_else(|| Error::Store(format!("the notice to {id} was not recorded")))?;
            out.record_notice(&hash);
            self.state.touch(Table::ChannelOut, id.as_str());
            let carry = Carry::Envelope {
                to: id.clone(),
                seq,
            };
            let delivery = self
                .state
                .deliveries
                .values()
                .find(|d| d.carry == carry)
                .map(|d| d.id.clone());
            let label = self.state.contacts.get(id).and_then(|c| c.label.clone());
            notices.push(json!({
                "to": id, "fingerprint": id.fingerprint(), "label": label,
                "seq": seq, "in_seq": in_seq, "delivery": delivery,
            }));
        }
        let second = ctx.now.replace_nanosecond(0).unwrap_or(ctx.now);
        Ok(json!({
            "contacts": ids.len(),
            "notices": notices,
            "dropped_deliveries": stale.len(),
            "send_after": format_time(second + time::Duration::seconds(1)),
        }))
    }

    /// An opened envelope before channel ordering (§6.4.1). True when it
    /// was a restore notice, which never rides the chain; an ack is taken
    /// here and then ordered like any envelope.
    pub(crate) fn restore_before_ordering(
        &mut self,
        from: &AgentId,
        meta: &Meta,
        payload: &Map<String, Value>,
        ctx: &mut Ctx<'_>,
    ) -> Result<bool> {
        match payload.get("type").and_then(Value::as_str) {
            Some(RESTORED_TYPE) => {
                self.on_restored_notice(from, meta, payload, ctx)?;
                Ok(true)
            }
            Some(RESTORED_ACK_TYPE) => {
                self.on_restored_ack(from, meta, payload);
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// §6.4.1, the peer: a notice is acted on only from a contact; the
    /// channel decides (newer than everything accepted, 3 a day, never
    /// over a fork). Re-based: the human is told, the ack goes back and
    /// the outbox after `in_seq` is sent again.
    fn on_restored_notice(
        &mut self,
        from: &AgentId,
        meta: &Meta,
        payload: &Map<String, Value>,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        if self.state.contact(from).is_none() {
            return Ok(());
        }
        let Ok(notice) = Restored::parse(&Value::Object(payload.clone())) else {
            self.tell(Event::Dropped {
                from: Some(from.clone()),
                reason: "a restore notice that does not parse".into(),
            });
            return Ok(());
        };
        self.state.channels_in.admit(from.clone(), None);
        let Some(ch) = self.state.channels_in.get_mut(from) else {
            return Ok(());
        };
        let decision = ch.on_restored(meta, ctx.now);
        self.state.touch(Table::ChannelIn, from.as_str());
        match decision {
            RestoredDecision::Rebased => {
                self.tell(Event::Restored { id: from.clone() });
                let out = self.state.channels_out.entry(from.clone()).or_default();
                let (ack, resent) = out.ack(&meta.hash, notice.in_seq, ctx.now);
                let resent: Vec<(u64, Value)> = resent
                    .into_iter()
                    .map(|v| (v.get("seq").and_then(Value::as_u64).unwrap_or(0), v.clone()))
                    .collect();
                let routes = self.contact_routes(from);
                self.send_payload(from, &ack, routes.clone(), ctx)?;
                for (seq, env) in resent {
                    let carry = Carry::Envelope {
                        to: from.clone(),
                        seq,
                    };
                    self.queue(carry, env, routes.clone(), ctx)?;
                }
            }
            RestoredDecision::Replay => {}
            RestoredDecision::RateLimited => self.tell(Event::RestoreRefused {
                id: from.clone(),
                refusal: "rate-limited".into(),
                reason: format!(
                    "over {RESTORED_MAX_PER_DAY} restore notices in a day: its chain was not re-based"
                ),
            }),
            RestoredDecision::Refused => self.tell(Event::RestoreRefused {
                id: from.clone(),
                refusal: "forked".into(),
                reason: "its chain is refused after a fork: a restore notice never lifts that, \
                         only `rdv contact resync` does"
                    .into(),
            }),
        }
        Ok(())
    }

    /// §6.4.1, the restored side: the ack only for the notice sent to that
    /// contact last, once, and only one consistent with its own envelope
    /// (the chain goes on at its seq at the latest, after its floor).
    fn on_restored_ack(&mut self, from: &AgentId, meta: &Meta, payload: &Map<String, Value>) {
        if self.state.contact(from).is_none()
            || self
                .state
                .channels_in
                .get(from)
                .is_some_and(|c| c.is_refused())
        {
            return;
        }
        // No notice waits for an ack: nothing to take (nor to report).
        if self
            .state
            .channels_out
            .get(from)
            .and_then(|o| o.pending_notice())
            .is_none()
        {
            return;
        }
        let ack = match RestoredAck::parse(&Value::Object(payload.clone())) {
            Ok(a) if a.from_seq > meta.seq || a.floor >= meta.created => {
                self.tell(Event::Dropped {
                    from: Some(from.clone()),
                    reason: "a restore ack that contradicts its own envelope".into(),
                });
                return;
            }
            Ok(a) => a,
            Err(_) => {
                // Not the parser's words: they may quote a peer-written key.
                self.tell(Event::Dropped {
                    from: Some(from.clone()),
                    reason: "a restore ack that does not parse".into(),
                });
                return;
            }
        };
        let Some(out) = self.state.channels_out.get_mut(from) else {
            return;
        };
        // Not for the notice sent last, or taken already.
        if !out.take_ack(&ack) {
            return;
        }
        self.state.touch(Table::ChannelOut, from.as_str());
        if let Some(ch) = self.state.channels_in.get_mut(from) {
            ch.on_restored_ack(&ack);
            self.state.touch(Table::ChannelIn, from.as_str());
        }
    }
}
