//! Inbound: any bytes from any carrier. Bounded before parsed, signatures
//! before decryption (§6.4), channel state only for admitted senders, and
//! every received document verified before any state changes (§5).

use rdv_proto::channel::{Admission, Decision, Fork, Meta};
use rdv_proto::doc::card::Card;
use rdv_proto::doc::card_update::{CardUpdateVerdict, check_card_update};
use rdv_proto::doc::grant::{Grant, GrantRef, ReverseGrantContext, check_reverse_grant};
use rdv_proto::doc::request::ContactRequest;
use rdv_proto::doc::revoke::Revoke;
use rdv_proto::nostr_event::{Carried, parse_event};
use rdv_proto::time::parse_frequency;
use rdv_proto::{Address, AgentId, envelope};
use serde_json::Value;

use crate::agent::{Agent, Ctx, LOCAL_DEFAULT_MAX_FREQUENCY};
use crate::error::Result;
use crate::event::Event;
use crate::peer_text::UntrustedPeerText;
use crate::record::Table;
use crate::state::{Binding, Candidate, ContactStatus, Held, Pending, Target, Via};

/// §5.3: at most 16 candidates per probe, one per grantor.
pub const MAX_CANDIDATES: usize = 16;
/// Requests waiting for the owner, in all (the oldest is dropped past it).
pub const MAX_PENDING: usize = 64;
/// §4.3: card-updates per contact per hour (reference: 20).
pub const CARD_UPDATES_PER_HOUR: usize = 20;
/// §5.3: reverse grants per contact per hour (reference: 10).
pub const REVERSE_GRANTS_PER_HOUR: usize = 10;
/// §5.4: how long a seen document id is remembered (past every lifetime:
/// probes live 14 days, envelopes at most 7).
pub const SEEN_RETENTION_SECS: i64 = 30 * 24 * 3600;

/// The largest message read from an ntfy or MQTT listen topic: a probe is
/// a request with its card inside (§4.4, §4.3: a card is at most 16 KiB),
/// held to the envelope bound of §6.4.
pub const TOPIC_MESSAGE_MAX_BYTES: usize = rdv_proto::consts::ENVELOPE_MAX_BYTES;

/// A payload type: a strict token (§5.6 short structural fields).
pub fn is_payload_type(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'/' | b'-')
        })
}

impl Agent {
    pub(crate) fn on_nostr(&mut self, _relay: &str, json: &[u8], ctx: &mut Ctx<'_>) -> Result<()> {
        // Bounded, id and signature checked, shape of §6.2 checked.
        let Ok((_, carried)) = parse_event(json) else {
            return Ok(());
        };
        match carried {
            Carried::Envelope {
                recipient,
                envelope,
            } => {
                if &recipient != self.id() {
                    return Ok(());
                }
                let Ok(raw) = rdv_proto::canon::to_vec(&envelope) else {
                    return Ok(());
                };
                self.on_envelope_bytes("nostr", &raw, ctx)
            }
            Carried::Probe { topic, request } => self.on_probe(&topic, &request, ctx),
            // Public pointers are read by discovery, not by the listener.
            Carried::Card { .. } => Ok(()),
        }
    }

    /// A message on one of our listen topics over ntfy or MQTT (§4.4 item
    /// 1, §6.3). Bounded before it is parsed; only a topic probe is acted
    /// on, gated exactly as one from a relay. Cards (public pointers, ours
    /// or anyone's) are read by discovery, not here.
    pub(crate) fn on_topic_bytes(
        &mut self,
        _carrier: &str,
        topic: &str,
        bytes: &[u8],
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        if bytes.len() > TOPIC_MESSAGE_MAX_BYTES {
            return Ok(());
        }
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            return Ok(());
        };
        if v.get("type").and_then(Value::as_str) != Some(rdv_proto::doc::request::REQUEST_TYPE) {
            return Ok(());
        }
        self.on_probe(topic, &v, ctx)
    }

    /// How far a sender is admitted (§6.4: channel state only for admitted senders).
    fn admission(&self, from: &AgentId) -> Admission {
        if self.state.contact(from).is_some() || self.state.asked_by_card(from).is_some() {
            Admission::Buffered
        } else if self.state.pending.values().any(|p| &p.from == from)
            || self.state.channels_out.contains_key(from)
        {
            Admission::Tracked
        } else {
            Admission::Stranger
        }
    }

    pub(crate) fn on_envelope_bytes(
        &mut self,
        _carrier: &str,
        raw: &[u8],
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        // §6.4: size, then shape and times, then the signature; only a
        // verified envelope can be opened.
        let Ok(verified) = envelope::verify(raw, ctx.now) else {
            return Ok(());
        };
        let from = verified.header().from.clone();
        if self.state.blocked.contains(&from) || &verified.header().to != self.id() {
            // §5.4: a blocked key gets silence.
            return Ok(());
        }
        let Ok(opened) = envelope::open_verified(verified, self.key()) else {
            return Ok(());
        };
        let meta = Meta::from(&opened.header);
        // §6.4.1: a restore notice re-bases the chain instead of riding it.
        if self.restore_before_ordering(&from, &meta, &opened.payload, ctx)? {
            return Ok(());
        }
        let admission = self.admission(&from);
        let held = Held {
            from: from.clone(),
            hash: meta.hash.clone(),
            seq: meta.seq,
            payload: Value::Object(opened.payload),
        };
        let decision = self
            .state
            .channels_in
            .receive(&from, admission, &meta, held);
        if admission != Admission::Stranger || self.state.channels_in.get(&from).is_some() {
            self.state.touch(Table::ChannelIn, from.as_str());
        }
        match decision {
            Decision::Deliver { items, fork } => {
                for h in items {
                    let m = Meta {
                        seq: h.seq,
                        prev: None,
                        hash: h.hash.clone(),
                        created: meta.created,
                    };
                    let anchor = if h.hash == meta.hash { meta.clone() } else { m };
                    self.dispatch(&from, &anchor, h.payload, ctx)?;
                }
                if let Some(f) = fork {
                    self.forked(&from, &f);
                }
            }
            Decision::Duplicate | Decision::Refused => {}
            Decision::Buffered { resend } | Decision::Dropped { resend, .. } => {
                if let Some((a, b)) = resend
                    && self.state.contact(&from).is_some()
                {
                    let routes = self.contact_routes(&from);
                    let p = rdv_proto::channel::resend_payload(a, b);
                    self.send_payload(&from, &p, routes, ctx)?;
                }
            }
            Decision::Forked(f) => self.forked(&from, &f),
        }
        Ok(())
    }

    fn forked(&mut self, from: &AgentId, f: &Fork) {
        let (seq, reason) = match f {
            Fork::SeqReused { seq } => (*seq, "a different envelope reuses an accepted seq"),
            Fork::PrevMismatch { seq } => (*seq, "prev is not the chain head"),
        };
        self.tell(Event::Forked {
            id: from.clone(),
            seq,
            reason: reason.to_string(),
        });
    }

    pub(crate) fn contact_routes(&self, id: &AgentId) -> Vec<crate::state::Route> {
        match self.state.contacts.get(id) {
            Some(c) => self.routes_for_card(&c.card, &[]),
            None => Vec::new(),
        }
    }

    /// One opened payload from `from`, in channel order.
    fn dispatch(
        &mut self,
        from: &AgentId,
        meta: &Meta,
        payload: Value,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let ty = payload
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match ty.as_str() {
            rdv_proto::doc::request::REQUEST_TYPE => {
                self.on_request(&payload, Some(from), Via::Envelope, Some(meta), ctx)
            }
            rdv_proto::doc::grant::GRANT_TYPE => self.on_grant(&payload, from, meta, ctx),
            rdv_proto::doc::revoke::REVOKE_TYPE => self.on_revoke(&payload, from, ctx),
            rdv_proto::doc::card_update::CARD_UPDATE_TYPE => {
                self.on_card_update(&payload, from, ctx);
                Ok(())
            }
            "rdv/resend" => self.on_resend(&payload, from, ctx),
            // §5.2.1: the ACK of a mailbox probe, echoing the cookie.
            rdv_proto::mailblock::PROBE_ECHO_TYPE => self.on_probe_echo(&payload, from, meta, ctx),
            // §5.2.2: a request carrying our invite's token.
            crate::invite::INVITE_ACCEPT_TYPE => self.on_invite_accept(&payload, from, meta, ctx),
            // §6.4.1: acted on before ordering (restore_before_ordering).
            rdv_proto::doc::restored::RESTORED_TYPE
            | rdv_proto::doc::restored::RESTORED_ACK_TYPE => Ok(()),
            // §7.7: direct-transfer negotiation (file.rs on_transfer).
            rdv_proto::consts::TRANSFER_TYPE => self.on_transfer(from, &payload, ctx),
            // §7.1: A2A payloads, routed by capability (a2a.rs on_a2a).
            _ if ty.starts_with("a2a/") => self.on_a2a(from, &payload, ctx),
            _ if ty.starts_with("rdv/") => {
                self.drop_from(from, "unsupported rdv payload");
                Ok(())
            }
            _ => self.on_message(from, meta, &ty, &payload, ctx),
        }
    }

    fn drop_from(&mut self, from: &AgentId, reason: &str) {
        if self.state.contact(from).is_some() {
            self.tell(Event::Dropped {
                from: Some(from.clone()),
                reason: reason.to_string(),
            });
        }
    }

    /// Records `id` as seen (§5.4 replay); whether it was already.
    pub(crate) fn seen(&mut self, id: &str, ctx: &Ctx<'_>) -> bool {
        if self.state.seen.contains_key(id) {
            return true;
        }
        self.state.seen.insert(id.to_string(), ctx.unix());
        self.state.touch(Table::Seen, id);
        false
    }

    /// A topic probe (§4.4): a contact request on the dtopic of one of our
    /// listed addresses, gated like any inbound request, binding claimed.
    fn on_probe(&mut self, topic: &str, request: &Value, ctx: &mut Ctx<'_>) -> Result<()> {
        let profile = self.state.profile()?;
        let Some(addr) = profile
            .addresses
            .iter()
            .filter(|a| a.public)
            .filter_map(|a| Address::parse(&a.address).ok())
            .find(|a| a.dtopic() == topic)
        else {
            return Ok(());
        };
        let address = addr.canon().to_string();
        self.on_request(request, None, Via::Topic { address }, None, ctx)
    }

    /// §5.1, §5.4, §5.5: a request is verified, deduplicated, and then the
    /// owner's policy decides: block is silence, prompt waits for the human.
    pub(crate) fn on_request(
        &mut self,
        doc: &Value,
        env_from: Option<&AgentId>,
        via: Via,
        meta: Option<&Meta>,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let allow_ws = self.state.profile()?.allow_ws;
        let Ok(req) = ContactRequest::verify(doc, ctx.now, allow_ws) else {
            return Ok(());
        };
        if env_from.is_some_and(|f| f != &req.from) || &req.from == self.id() {
            return Ok(());
        }
        if let Via::Topic { address } = &via {
            // The probe must name the address whose topic it was posted on.
            let named = req.to_hint_address().map(|a| a.canon().to_string());
            if named.as_deref() != Some(address.as_str()) || req.probe_expired(ctx.now) {
                return Ok(());
            }
        }
        if self.state.blocked.contains(&req.from) || self.state.seen.contains_key(&req.id) {
            return Ok(());
        }
        if self.state.contact(&req.from).is_some() {
            // Already a contact: nothing to decide.
            return Ok(());
        }
        let policy = self.state.profile()?.inbound.clone();
        if policy == "block" {
            // Silence, and nothing kept: a refused request changes no state.
            return Ok(());
        }
        self.seen(&req.id, ctx);
        if self.state.pending.len() >= MAX_PENDING
            && let Some(oldest) = self
                .state
                .pending
                .values()
                .min_by_key(|p| p.received)
                .map(|p| p.request_id.clone())
        {
            self.state.pending.remove(&oldest);
            self.state.touch(Table::Pending, oldest);
            self.tell(Event::Dropped {
                from: None,
                reason: "too many requests waiting: the oldest was dropped".into(),
            });
        }
        let (via_s, address) = match &via {
            Via::Topic { address } => ("topic", Some(address.clone())),
            Via::Envelope => ("envelope", None),
            Via::Mailbox { address } => ("mailbox", Some(address.clone())),
            Via::Invite { address, .. } => ("invite", Some(address.clone())),
        };
        let binding = match via {
            Via::Topic { .. } => Binding::Claimed,
            Via::Envelope => Binding::Card,
            Via::Mailbox { .. } => Binding::Claimed,
            // §5.2.2: the token went only to the invited mailbox.
            Via::Invite { .. } => Binding::Mailbox,
        };
        // §6.4: a pending requester we keep gets channel state from here on.
        if let Some(m) = meta {
            self.state.channels_in.admit(req.from.clone(), Some(m));
            self.state.touch(Table::ChannelIn, req.from.as_str());
        }
        let pending = Pending {
            request_id: req.id.clone(),
            from: req.from.clone(),
            request: req.doc.clone(),
            via,
            binding,
            received: ctx.now,
            phrase: None,
        };
        self.state.pending.insert(req.id.clone(), pending);
        self.state.touch(Table::Pending, req.id.clone());
        self.tell(Event::ContactRequest {
            request_id: req.id.clone(),
            from: req.from.clone(),
            fingerprint: req.from.fingerprint(),
            binding: binding.as_str().into(),
            via: via_s.into(),
            address,
            greeting: UntrustedPeerText::new(&req.greeting),
        });
        if policy == "allow" {
            // §5.4, §5.5: a standing pre-approval the owner set.
            let scope = crate::agent::default_scope(false, &[], "100/day");
            self.grant_pending(&req.id, "stranger", scope, None, ctx)?;
        }
        Ok(())
    }

    /// §5.3: a grant answering our request, or a reverse grant.
    fn on_grant(
        &mut self,
        doc: &Value,
        from: &AgentId,
        meta: &Meta,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let allow_ws = self.state.profile()?.allow_ws;
        let Ok(g) = Grant::verify(doc, ctx.now, allow_ws) else {
            self.drop_from(from, "a grant that does not verify");
            return Ok(());
        };
        if &g.from != from || &g.to != self.id() {
            self.drop_from(from, "a grant not from its sender or not to us");
            return Ok(());
        }
        if self.state.seen.contains_key(&g.id) {
            return Ok(());
        }
        match &g.reference {
            GrantRef::Grant(_) => self.on_reverse_grant(&g, ctx),
            GrantRef::Request(r) => {
                let Some(out) = self.state.outgoing.get(r).cloned() else {
                    return Ok(());
                };
                if out.closed {
                    return Ok(());
                }
                match &out.target {
                    Target::Agent(id) => {
                        // §5.3: a request to a card is answered only by that
                        // card's agent; any other grantor changes nothing.
                        if id != &g.from {
                            return Ok(());
                        }
                        self.seen(&g.id, ctx);
                        let label = out.label.clone();
                        self.make_contact_from_grant(&g, out.binding, label, "accepted", ctx);
                        if let Some(o) = self.state.outgoing.get_mut(r) {
                            o.closed = true;
                        }
                        self.state.touch(Table::Outgoing, r.clone());
                    }
                    Target::Address(addr) => {
                        // §5.3: ignore an answer whose card does not list the
                        // probed address; keep the rest as candidates.
                        let Ok(a) = Address::parse(addr) else {
                            return Ok(());
                        };
                        if !g.card.claims(&a) {
                            return Ok(());
                        }
                        let Some(o) = self.state.outgoing.get_mut(r) else {
                            return Ok(());
                        };
                        if o.candidates.iter().any(|c| c.grantor == g.from) {
                            return Ok(());
                        }
                        if o.candidates.len() >= MAX_CANDIDATES {
                            o.dropped += 1;
                            let dropped = o.dropped;
                            self.state.touch(Table::Outgoing, r.clone());
                            if dropped == 1 {
                                self.tell(Event::CandidatesDropped {
                                    request_id: r.clone(),
                                    dropped,
                                });
                            }
                            return Ok(());
                        }
                        o.candidates.push(Candidate {
                            grantor: g.from.clone(),
                            grant: g.doc.clone(),
                            anchor: meta.clone(),
                            received: ctx.now,
                        });
                        self.state.touch(Table::Outgoing, r.clone());
                        self.seen(&g.id, ctx);
                        self.tell(Event::ContactCandidate {
                            request_id: r.clone(),
                            grantor: g.from.clone(),
                            fingerprint: g.from.fingerprint(),
                            address: addr.clone(),
                        });
                    }
                }
                Ok(())
            }
        }
    }

    /// §5.3 reverse grant: only from a current contact whose founding grant
    /// is grant_ref; it widens only what we may do towards the sender.
    fn on_reverse_grant(&mut self, g: &Grant, ctx: &mut Ctx<'_>) -> Result<()> {
        let Some(c) = self.state.contact(&g.from).cloned() else {
            return Ok(());
        };
        let replaces = c.granted_to_us.as_ref().map_or(c.since, |h| h.ts);
        let me = self.id().clone();
        let rctx = ReverseGrantContext {
            me: &me,
            founding_grant_id: &c.founding_grant,
            replaces_ts: replaces,
            contact_expires: c.expires,
            now: ctx.now,
        };
        let expires = match check_reverse_grant(g, &rctx) {
            Ok(e) => e,
            Err(e) => {
                self.drop_from(&g.from, &format!("reverse grant refused: {e}"));
                return Ok(());
            }
        };
        let hour_ago = ctx.unix() - 3600;
        let mut c = c;
        c.reverse_grants.retain(|t| *t > hour_ago);
        if c.reverse_grants.len() >= REVERSE_GRANTS_PER_HOUR {
            self.drop_from(&g.from, "over 10 reverse grants in an hour");
            return Ok(());
        }
        c.reverse_grants.push(ctx.unix());
        self.seen(&g.id, ctx);
        c.granted_to_us = Some(crate::contact::held_grant(g));
        c.expires = expires;
        let invoke: Vec<String> = g
            .scope
            .invoke
            .as_ref()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        self.tell(Event::ReverseGrant {
            id: g.from.clone(),
            tier: g.tier.clone(),
            may_propose_meetings: g.scope.allows_meetings(),
            invoke,
        });
        self.state.contacts.insert(g.from.clone(), c);
        self.state.touch(Table::Contact, g.from.as_str());
        Ok(())
    }

    /// §5.4: a contact's revoke ends the contact.
    fn on_revoke(&mut self, doc: &Value, from: &AgentId, ctx: &Ctx<'_>) -> Result<()> {
        let Ok(r) = Revoke::verify(doc) else {
            self.drop_from(from, "a revoke that does not verify");
            return Ok(());
        };
        if &r.from != from || &r.to != self.id() || self.state.contact(from).is_none() {
            return Ok(());
        }
        self.end_contact(from, "peer", None, ctx.unix());
        self.tell(Event::Revoked {
            id: from.clone(),
            by: "peer".into(),
            reason: None,
        });
        Ok(())
    }

    /// Marks a contact revoked, keeps why (`by`, `reason`, at `at`), and
    /// forgets its channel state.
    pub(crate) fn end_contact(&mut self, id: &AgentId, by: &str, reason: Option<String>, at: i64) {
        if let Some(c) = self.state.contacts.get_mut(id) {
            c.status = ContactStatus::Revoked;
            c.ended = Some(crate::state::Ended {
                by: by.to_string(),
                reason,
                at,
            });
            c.granted_by_us = None;
            c.granted_to_us = None;
            self.state.touch(Table::Contact, id.as_str());
        }
        self.state.channels_in.forget(id);
        self.state.touch(Table::ChannelIn, id.as_str());
    }

    /// §4.3: a contact's new card, within the checks and 20 an hour.
    fn on_card_update(&mut self, payload: &Value, from: &AgentId, ctx: &mut Ctx<'_>) {
        let Some(mut c) = self.state.contact(from).cloned() else {
            return;
        };
        let allow_ws = self.state.profile.as_ref().is_some_and(|p| p.allow_ws);
        let hour_ago = ctx.unix() - 3600;
        c.card_updates.retain(|t| *t > hour_ago);
        if c.card_updates.len() >= CARD_UPDATES_PER_HOUR {
            self.tell(Event::CardUpdateRefused {
                id: from.clone(),
                reason: "over 20 card updates in an hour".into(),
            });
            return;
        }
        let Ok(held) = Card::parse_signed(&c.card, true) else {
            return;
        };
        match check_card_update(payload, from, &held, ctx.now, allow_ws) {
            CardUpdateVerdict::Replace(card) => {
                c.card_updates.push(ctx.unix());
                c.card = card.doc.clone();
                self.tell(Event::CardUpdated { id: from.clone() });
            }
            // The same card again: ignored, and not counted (§4.3).
            CardUpdateVerdict::SameCard => return,
            CardUpdateVerdict::Refused(e) => {
                c.card_updates.push(ctx.unix());
                self.tell(Event::CardUpdateRefused {
                    id: from.clone(),
                    reason: e.to_string(),
                })
            }
        }
        self.state.contacts.insert(from.clone(), c);
        self.state.touch(Table::Contact, from.as_str());
    }

    /// §7: resend what the outbox still holds of the range, to a contact.
    fn on_resend(&mut self, payload: &Value, from: &AgentId, ctx: &mut Ctx<'_>) -> Result<()> {
        let Ok((a, b)) = rdv_proto::channel::parse_resend(payload) else {
            return Ok(());
        };
        if self.state.contact(from).is_none() {
            return Ok(());
        }
        let envs: Vec<(u64, Value)> = match self.state.channels_out.get(from) {
            Some(out) => out
                .resend(a, b)
                .into_iter()
                .map(|v| (v.get("seq").and_then(Value::as_u64).unwrap_or(0), v.clone()))
                .collect(),
            None => return Ok(()),
        };
        let routes = self.contact_routes(from);
        for (seq, env) in envs {
            self.queue(
                crate::state::Carry::Envelope {
                    to: from.clone(),
                    seq,
                },
                env,
                routes.clone(),
                ctx,
            )?;
        }
        Ok(())
    }

    /// A free message from a contact (§5.3: needs may_initiate; over the
    /// grant's max_frequency the grant is revoked, §10).
    fn on_message(
        &mut self,
        from: &AgentId,
        meta: &Meta,
        ty: &str,
        payload: &Value,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let Some(mut c) = self.state.contact(from).cloned() else {
            return Ok(());
        };
        if !is_payload_type(ty) {
            self.drop_from(from, "a payload without a valid type");
            return Ok(());
        }
        let (may_initiate, freq) = match &c.granted_by_us {
            Some(g) => (
                g.scope.get("may_initiate").and_then(Value::as_bool) == Some(true),
                g.scope
                    .get("max_frequency")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            // §5.3: our local default for a peer our owner has not granted.
            None => (true, Some(LOCAL_DEFAULT_MAX_FREQUENCY.to_string())),
        };
        if !may_initiate {
            self.drop_from(from, "the grant does not let this contact write");
            return Ok(());
        }
        if let Some(f) = freq
            && let Ok((count, window)) = parse_frequency("max_frequency", &f)
        {
            let since = ctx.unix() - window;
            c.received.retain(|t| *t > since);
            c.received.push(ctx.unix());
            if c.received.len() as u64 > count {
                self.state.contacts.insert(from.clone(), c);
                self.revoke_contact(from, "abuse", ctx)?;
                return Ok(());
            }
        }
        let label = c.label.clone();
        self.state.contacts.insert(from.clone(), c);
        self.state.touch(Table::Contact, from.as_str());
        let text = rdv_proto::canon::to_string(payload).unwrap_or_default();
        self.tell(Event::Message {
            from: from.clone(),
            label,
            seq: meta.seq,
            payload_type: ty.to_string(),
            payload: UntrustedPeerText::message(&text),
        });
        Ok(())
    }
}
