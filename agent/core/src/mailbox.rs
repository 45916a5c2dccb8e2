//! The mailbox probe and the invite (§5.2.1, §5.2.2) through a probe
//! gateway (docs/probe-gateway.md). The core decides; the runtime makes the
//! gateway calls ([`GatewayCall`], an [`Effect::Gateway`]) and feeds back
//! their answers and the gateway inbox's items ([`GatewayInput`]).
//! Everything a gateway or a mail brings is attacker-controlled: bounded
//! and verified before any state changes.
//!
//! The handshake: SYN (our probe, mailed by our gateway) → the recipient's
//! owner grants → SYN-ACK (grant + card + the gateway's cookie) → our owner
//! confirms the candidate → ACK (the cookie echoed, in the first envelope,
//! or by mail) → the grantor's contact is made.

use rdv_proto::channel::Meta;
use rdv_proto::consts::{
    ADDRESS_MAX_LEN, INVITE_COOLDOWN_SECS, PROBE_COOKIE_MAX_LEN, PROBE_LIFETIME_SECS,
    PROBE_PER_ADDRESS_INTERVAL_SECS,
};
use rdv_proto::doc::card::Card;
use rdv_proto::doc::grant::{Grant, GrantBuilder, GrantRef};
use rdv_proto::doc::obj::is_uuid;
use rdv_proto::doc::request::ContactRequest;
use rdv_proto::mailblock::{BlockPayload, Invite, ProbeEcho, parse_payload};
use rdv_proto::time::{Instant, format_time, from_unix};
use rdv_proto::{Address, AgentId};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use crate::agent::{Agent, Ctx, Effect};
use crate::contact::{Founding, NewContact, OurRequest};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::inbound::{MAX_CANDIDATES, MAX_PENDING};
use crate::peer_text::UntrustedPeerText;
use crate::record::Table;
use crate::state::{
    Binding, Candidate, ContactStatus, HeldGrant, InviteStatus, MailAnswer, MailGrant, MailProbeIn,
    MailProbeOut, MailProbeStatus, OwnMailbox, Pending, Route, SentInvite, Target, Via,
};

/// At most this many mailboxes.
pub const MAX_MAILBOXES: usize = 8;
/// §5.2.2: an invite stays pending this long, unanswered.
pub const INVITE_PENDING_SECS: i64 = 30 * 24 * 3600;
/// Where the owner got the address: at most this many characters.
pub const SOURCE_MAX_CHARS: usize = 200;
/// The owner's note (the gateway takes 2000 characters with the source line).
pub const NOTE_MAX_CHARS: usize = 1500;
/// The pref of the email rendezvous entry on the card (§4.3).
pub const EMAIL_RENDEZVOUS_PREF: i64 = 3;

/// One call to a probe gateway (docs/probe-gateway.md "HTTP API").
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayCall {
    /// `POST /v1/send/probe` (the SYN).
    SendProbe {
        gateway: String,
        request_id: String,
        to: String,
        request: Value,
        from_mailbox: Option<String>,
    },
    /// `POST /v1/send/syn-ack`: our grant for the probe at `seq`.
    SynAck {
        gateway: String,
        request_id: String,
        seq: u64,
        grant: Value,
    },
    /// `POST /v1/ack`: the requester's cookie came back in an envelope.
    Ack {
        gateway: String,
        request_id: String,
        seq: u64,
        cookie: String,
    },
    /// `POST /v1/send/ack`: the ACK by mail, for the SYN-ACK at `seq`.
    SendAck {
        gateway: String,
        request_id: String,
        seq: u64,
        echo: Value,
    },
    /// `POST /v1/send/invite` (§5.2.2).
    SendInvite {
        gateway: String,
        invite_id: String,
        to: String,
        invite: Value,
        /// §5.2.2: where the owner got the address; the gateway states it
        /// in the invite, whatever the note.
        source: String,
        /// The owner's own words, if any.
        note: Option<String>,
        from_mailbox: Option<String>,
    },
    /// `POST /v1/invites/{id}/status`.
    InviteStatus {
        gateway: String,
        invite_id: String,
        accepted: bool,
    },
}

impl GatewayCall {
    pub fn gateway(&self) -> &str {
        match self {
            GatewayCall::SendProbe { gateway, .. }
            | GatewayCall::SynAck { gateway, .. }
            | GatewayCall::Ack { gateway, .. }
            | GatewayCall::SendAck { gateway, .. }
            | GatewayCall::SendInvite { gateway, .. }
            | GatewayCall::InviteStatus { gateway, .. } => gateway,
        }
    }

    /// What it is, as events and summaries name it.
    pub fn what(&self) -> &'static str {
        match self {
            GatewayCall::SendProbe { .. } => "probe",
            GatewayCall::SynAck { .. } => "syn_ack",
            GatewayCall::Ack { .. } => "ack",
            GatewayCall::SendAck { .. } => "send_ack",
            GatewayCall::SendInvite { .. } => "invite",
            GatewayCall::InviteStatus { .. } => "invite_status",
        }
    }

    /// The request or invite id it concerns.
    pub fn id(&self) -> &str {
        match self {
            GatewayCall::SendProbe { request_id, .. }
            | GatewayCall::SynAck { request_id, .. }
            | GatewayCall::Ack { request_id, .. }
            | GatewayCall::SendAck { request_id, .. } => request_id,
            GatewayCall::SendInvite { invite_id, .. }
            | GatewayCall::InviteStatus { invite_id, .. } => invite_id,
        }
    }
}

/// What the gateway answered to a call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    Done,
    /// The gateway's refusal, with its stable code.
    Refused {
        status: u16,
        code: String,
        message: String,
        retry_after: Option<u64>,
    },
    /// Unreachable, or an answer the client does not accept.
    Failed {
        reason: String,
    },
}

/// What the runtime brings from a gateway.
#[derive(Debug, Clone)]
pub enum GatewayInput {
    /// One item of our inbox at `gateway`, as JSON (attacker-controlled).
    Item { gateway: String, item: Value },
    /// The answer to a call the core asked for.
    Answered {
        call: GatewayCall,
        outcome: CallOutcome,
    },
}

fn email(s: &str) -> Result<Address> {
    Address::parse_email(s).map_err(|_| Error::Input(format!("{s:?} is not an email address")))
}

/// A gateway base URL: http(s)://, at most 256 characters, no spaces.
pub fn check_gateway_url(url: &str) -> Result<()> {
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 256
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(Error::Input(format!("{url}: not an http(s) gateway URL")))
    }
}

/// A short peer-supplied string member of an item, bounded.
fn item_str<'a>(item: &'a Value, k: &str, max: usize) -> Option<&'a str> {
    item.get(k)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= max)
}

/// A cookie: 1 to 128 printable ASCII characters (§5.2.1).
fn cookie_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= PROBE_COOKIE_MAX_LEN && s.bytes().all(|b| b.is_ascii_graphic())
}

fn plus(t: Instant, secs: i64) -> Instant {
    t + time::Duration::seconds(secs)
}

impl Agent {
    // ---- the owner's mailboxes ------------------------------------------------

    /// Records a mailbox the gateway mailed a code to (not proved yet).
    pub(crate) fn mailbox_add(
        &mut self,
        address: &str,
        gateway: &str,
        on_card: bool,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        self.state.profile()?;
        let a = email(address)?;
        check_gateway_url(gateway)?;
        let canon = a.canon().to_string();
        if !self.state.mailboxes.contains_key(&canon) && self.state.mailboxes.len() >= MAX_MAILBOXES
        {
            return Err(Error::Input(format!("at most {MAX_MAILBOXES} mailboxes")));
        }
        self.state.mailboxes.insert(
            canon.clone(),
            OwnMailbox {
                address: canon.clone(),
                gateway: gateway.trim_end_matches('/').to_string(),
                verified: false,
                gateway_address: None,
                on_card,
                added: ctx.now,
            },
        );
        self.state.touch(Table::Mailbox, canon.clone());
        let card_changed = self.sync_email_rendezvous(&[], ctx)?;
        Ok(json!({
            "mailbox": canon, "gateway": gateway, "verified": false, "on_card": on_card,
            "card_changed": card_changed,
        }))
    }

    /// The gateway took the code: the mailbox is proved; on the card if
    /// the owner said so.
    pub(crate) fn mailbox_verified(
        &mut self,
        address: &str,
        gateway_address: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        let canon = email(address)?.canon().to_string();
        let m = self.state.mailboxes.get_mut(&canon).ok_or_else(|| {
            Error::NotFound(format!("{canon}: no such mailbox (rdv mailbox add)"))
        })?;
        // The gateway's word: an email address, bounded, or nothing.
        let ga = gateway_address
            .filter(|g| g.len() <= ADDRESS_MAX_LEN)
            .and_then(|g| email(&g).ok())
            .map(|g| g.canon().to_string());
        m.verified = true;
        m.gateway_address = ga.clone();
        let (gateway, on_card) = (m.gateway.clone(), m.on_card);
        self.state.touch(Table::Mailbox, canon.clone());
        let card_changed = self.sync_email_rendezvous(&[], ctx)?;
        Ok(json!({
            "mailbox": canon, "gateway": gateway, "verified": true,
            "gateway_address": ga, "on_card": on_card, "card_changed": card_changed,
        }))
    }

    pub(crate) fn mailbox_remove(&mut self, address: &str, ctx: &mut Ctx<'_>) -> Result<Value> {
        let canon = email(address)?.canon().to_string();
        let m = self
            .state
            .mailboxes
            .remove(&canon)
            .ok_or_else(|| Error::NotFound(format!("{canon}: no such mailbox")))?;
        self.state.touch(Table::Mailbox, canon.clone());
        let drop: Vec<String> = m.gateway_address.into_iter().collect();
        let card_changed = self.sync_email_rendezvous(&drop, ctx)?;
        Ok(json!({ "removed": canon, "card_changed": card_changed }))
    }

    /// §4.3: the card lists a mailbox's gateway address as an email
    /// rendezvous entry only when the owner asked; re-signs on a change.
    fn sync_email_rendezvous(&mut self, drop: &[String], ctx: &mut Ctx<'_>) -> Result<bool> {
        let mut p = self.state.profile()?.clone();
        let ours: Vec<String> = self
            .state
            .mailboxes
            .values()
            .filter_map(|m| m.gateway_address.clone())
            .chain(drop.iter().cloned())
            .collect();
        let mut next: Vec<Value> = p
            .other_rendezvous
            .iter()
            .filter(|e| {
                !(e.get("type").and_then(Value::as_str) == Some("email")
                    && e.get("to")
                        .and_then(Value::as_str)
                        .is_some_and(|t| ours.iter().any(|o| o == t)))
            })
            .cloned()
            .collect();
        for m in self.state.mailboxes.values() {
            if let (true, true, Some(a)) = (m.verified, m.on_card, &m.gateway_address) {
                next.push(json!({"type": "email", "to": a, "pref": EMAIL_RENDEZVOUS_PREF}));
            }
        }
        if next == p.other_rendezvous {
            return Ok(false);
        }
        p.other_rendezvous = next;
        self.change_profile(p, ctx)?;
        Ok(true)
    }

    /// The proved mailbox a send goes from: the one named, or the first.
    fn sending_mailbox(&self, from: Option<&str>) -> Result<OwnMailbox> {
        let pick = match from {
            Some(f) => {
                let canon = email(f)?.canon().to_string();
                self.state.mailboxes.get(&canon).filter(|m| m.verified)
            }
            None => self.state.mailboxes.values().find(|m| m.verified),
        };
        pick.cloned().ok_or_else(|| {
            Error::Refused(
                "no proved mailbox to send from: `rdv mailbox add <your email> --gateway URL`, \
                 then `rdv mailbox verify`"
                    .into(),
            )
        })
    }

    // ---- the requester side (SYN, then the ACK) ------------------------------

    /// When the next mailbox probe to `address` (canonical) is allowed, if
    /// not now (§5.2.1: one per address per 30 days; the gateway's word).
    pub fn next_mail_probe(&self, address: &str, now: Instant) -> Option<Instant> {
        self.state
            .mail_out
            .values()
            .filter(|m| m.address == address)
            .filter_map(|m| match &m.status {
                MailProbeStatus::Sending | MailProbeStatus::Sent => {
                    Some(plus(m.created, PROBE_PER_ADDRESS_INTERVAL_SECS))
                }
                MailProbeStatus::Refused { .. } => m.not_before,
            })
            .filter(|t| *t > now)
            .max()
    }

    /// §5.2.1: the owner's mailbox probe, through our gateway.
    pub(crate) fn mail_probe(
        &mut self,
        address: &str,
        greeting: String,
        label: Option<String>,
        from_mailbox: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        self.state.profile()?;
        let addr = email(address)?;
        let canon = addr.canon().to_string();
        if self.state.mailboxes.contains_key(&canon) {
            return Err(Error::Input(format!("{canon} is your own mailbox")));
        }
        if greeting.chars().count() > rdv_proto::consts::REQUEST_GREETING_MAX {
            return Err(Error::Input(format!(
                "a greeting is at most {} characters",
                rdv_proto::consts::REQUEST_GREETING_MAX
            )));
        }
        if let Some(l) = &label {
            crate::command::check_label(l)?;
        }
        let from = self.sending_mailbox(from_mailbox.as_deref())?;
        if let Some(next) = self.next_mail_probe(&canon, ctx.now) {
            return Err(Error::Refused(format!(
                "{canon} was probed by mail less than 30 days ago (SPEC §5.2.1: one probe per \
                 address per 30 days); the next mailbox probe is allowed after {}",
                format_time(next)
            )));
        }
        if let Some(o) = self.state.outgoing.values().find(|o| {
            !o.closed && o.target == Target::Address(canon.clone()) && !o.candidates.is_empty()
        }) {
            return Err(Error::Refused(format!(
                "answers to your probe {} are waiting: check and confirm one (rdv contact \
                 pending, rdv contact confirm {})",
                o.request_id, o.request_id
            )));
        }
        if self.contact_claiming(&addr).is_some() {
            return Err(Error::Refused(format!("{canon} is already a contact")));
        }
        let id = ctx.uuid();
        let doc = self.open_request(
            &id,
            OurRequest {
                target: Target::Address(canon.clone()),
                to_hint: Some(canon.clone()),
                label,
                greeting,
                binding: Binding::Mailbox,
            },
            ctx,
        )?;
        self.state.mail_out.insert(
            id.clone(),
            MailProbeOut {
                request_id: id.clone(),
                address: canon.clone(),
                gateway: from.gateway.clone(),
                from_mailbox: from.address.clone(),
                status: MailProbeStatus::Sending,
                created: ctx.now,
                not_before: None,
                answers: Vec::new(),
            },
        );
        self.state.touch(Table::MailProbeOut, id.clone());
        self.effects.push(Effect::Gateway(GatewayCall::SendProbe {
            gateway: from.gateway.clone(),
            request_id: id.clone(),
            to: canon.clone(),
            request: doc,
            from_mailbox: Some(from.address.clone()),
        }));
        Ok(json!({
            "request_id": id, "kind": "mailbox-probe", "address": canon,
            "gateway": from.gateway, "from_mailbox": from.address,
        }))
    }

    /// Whether one of `routes` may take an envelope now: a fallback
    /// carrier, or a Nostr relay that is not cooling down after a refusal
    /// (§6.2).
    fn any_reachable(&self, routes: &[Route], now: Instant) -> bool {
        routes.iter().any(|r| match r {
            Route::Nostr { relays } => relays.iter().any(|x| {
                self.state
                    .relay_health
                    .get(x)
                    .and_then(|h| h.cooldown_until)
                    .is_none_or(|u| u <= now)
            }),
            Route::Ntfy { .. } | Route::Mqtt { .. } => true,
        })
    }

    /// A current contact whose card lists `addr`.
    fn contact_claiming(&self, addr: &Address) -> Option<AgentId> {
        self.state
            .contacts
            .values()
            .filter(|c| c.status == ContactStatus::Active)
            .find(|c| Card::parse_signed(&c.card, true).is_ok_and(|k| k.claims(addr)))
            .map(|c| c.id.clone())
    }

    /// §5.3, §5.2.1: the owner confirms a SYN-ACK: the contact is made
    /// (binding mailbox) and the ACK echoes the cookie, in the first
    /// envelope on the grantor's preferred hint, or by mail when its card
    /// lists none we can reach (every relay cooling down after a refusal).
    pub(crate) fn confirm_mail(
        &mut self,
        request_id: &str,
        grantor: Option<AgentId>,
        label: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        if let Some(l) = &label {
            crate::command::check_label(l)?;
        }
        let out = self
            .state
            .outgoing
            .get(request_id)
            .cloned()
            .filter(|o| !o.closed)
            .ok_or_else(|| Error::NotFound(format!("no open probe {request_id}")))?;
        let mp = self
            .state
            .mail_out
            .get(request_id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no mailbox probe {request_id}")))?;
        let cand = match &grantor {
            Some(g) => out.candidates.iter().find(|c| &c.grantor == g),
            None if out.candidates.len() <= 1 => out.candidates.first(),
            None => {
                return Err(Error::Input(format!(
                    "{} agents answered: name the one to confirm (--agent rdv1:…)",
                    out.candidates.len()
                )));
            }
        }
        .cloned()
        .ok_or_else(|| Error::NotFound(format!("no answer to {request_id} from that agent")))?;
        let allow_ws = self.state.profile()?.allow_ws;
        let g = Grant::verify(&cand.grant, ctx.now, allow_ws)
            .map_err(|e| Error::Refused(format!("the answer no longer verifies: {e}")))?;
        let ans = mp
            .answers
            .iter()
            .find(|a| a.grantor == g.from)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no SYN-ACK from {} kept", g.from)))?;
        let label = label.or(out.label.clone()).or(Some(mp.address.clone()));
        self.make_contact_from_grant(&g, Binding::Mailbox, label, "confirmed", ctx);
        // The grantor's chain starts at its first envelope (the answer came by mail).
        self.state.channels_in.admit(g.from.clone(), None);
        self.state.touch(Table::ChannelIn, g.from.as_str());
        if let Some(o) = self.state.outgoing.get_mut(request_id) {
            o.closed = true;
        }
        self.state.touch(Table::Outgoing, request_id);
        let echo = ProbeEcho::build(request_id, &g.from, &ans.cookie, ctx.now, self.key())?;
        let routes = self.routes_for_card(&g.card.doc, &[]);
        let ack = if !self.any_reachable(&routes, ctx.now) {
            self.effects.push(Effect::Gateway(GatewayCall::SendAck {
                gateway: mp.gateway.clone(),
                request_id: request_id.to_string(),
                seq: ans.seq,
                echo,
            }));
            "mail"
        } else {
            self.send_payload(&g.from, &echo, routes, ctx)?;
            "envelope"
        };
        Ok(json!({
            "contact": g.from, "fingerprint": g.from.fingerprint(), "binding": "mailbox",
            "ack": ack,
        }))
    }

    // ---- the recipient side (SYN-ACK, then the ACK) --------------------------

    /// §5.2.1: the owner grants a mailbox probe: the grant goes back as a
    /// SYN-ACK through our gateway, and the contact waits for the ACK.
    /// `None` when the request did not come by mail.
    pub(crate) fn grant_by_mail(
        &mut self,
        request_id: &str,
        tier: &str,
        scope: &Value,
        label: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Option<AgentId>> {
        let Some(mut rec) = self.state.mail_in.get(request_id).cloned() else {
            return Ok(None);
        };
        if !self.state.pending.contains_key(request_id) {
            return Err(Error::NotFound(format!(
                "no pending request {request_id} (granted already?)"
            )));
        }
        let p = self.state.profile()?.clone();
        let req = ContactRequest::verify(&rec.pending.request, ctx.now, p.allow_ws)
            .map_err(|e| Error::Refused(format!("the request no longer verifies: {e}")))?;
        if req.probe_expired(ctx.now) {
            return Err(Error::Refused(
                "the probe is older than 14 days: it can no longer be answered (§5.2.1)".into(),
            ));
        }
        let mailbox = email(&rec.mailbox)?;
        let card = Card::parse_signed(&p.card, true)?;
        if !card.claims(&mailbox) {
            return Err(Error::Refused(format!(
                "your card does not list {}: the requester would ignore the answer (SPEC §5.3); \
                 `rdv address add {}` first",
                rec.mailbox, rec.mailbox
            )));
        }
        let grant_id = ctx.uuid();
        let doc = GrantBuilder {
            id: grant_id.clone(),
            to: req.from.clone(),
            reference: GrantRef::Request(req.id.clone()),
            card: p.card.clone(),
            tier: tier.to_string(),
            scope: scope.clone(),
            expires: None,
            ts: ctx.now,
        }
        .sign(self.key())?;
        rec.granted = Some(MailGrant {
            grant: doc.clone(),
            id: grant_id,
            tier: tier.to_string(),
            scope: scope.clone(),
            label,
            ts: ctx.now,
            sent: false,
        });
        self.effects.push(Effect::Gateway(GatewayCall::SynAck {
            gateway: rec.gateway.clone(),
            request_id: request_id.to_string(),
            seq: rec.seq,
            grant: doc,
        }));
        self.state.mail_in.insert(request_id.to_string(), rec);
        self.state.touch(Table::MailProbeIn, request_id);
        self.state.pending.remove(request_id);
        self.state.touch(Table::Pending, request_id);
        Ok(Some(req.from))
    }

    /// §5.2.1 the ACK: the requester's first envelope echoes the cookie.
    /// Only the probe's requester, with the probe's cookie (compared in
    /// constant time), completes the contact; anything else changes nothing.
    pub(crate) fn on_probe_echo(
        &mut self,
        payload: &Value,
        from: &AgentId,
        meta: &Meta,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let Ok(e) = ProbeEcho::verify(payload) else {
            return Ok(());
        };
        if &e.from != from || &e.to != self.id() {
            return Ok(());
        }
        let Some(rec) = self.state.mail_in.get(&e.request_ref).cloned() else {
            return Ok(());
        };
        if &rec.requester != from || rec.acked || rec.granted.is_none() {
            return Ok(());
        }
        if !bool::from(e.cookie.as_bytes().ct_eq(rec.cookie.as_bytes())) {
            return Ok(());
        }
        self.complete_mail_contact(&rec, Some(meta), ctx)?;
        // The gateway ends the probe's pending state too.
        self.effects.push(Effect::Gateway(GatewayCall::Ack {
            gateway: rec.gateway.clone(),
            request_id: rec.request_id.clone(),
            seq: rec.seq,
            cookie: rec.cookie.clone(),
        }));
        Ok(())
    }

    /// The ACK landed: the contact our owner granted is made.
    fn complete_mail_contact(
        &mut self,
        rec: &MailProbeIn,
        anchor: Option<&Meta>,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let Some(g) = rec.granted.clone() else {
            return Ok(());
        };
        let card = rec
            .pending
            .request
            .get("card")
            .cloned()
            .unwrap_or(Value::Null);
        let card_sent = match g.grant.get("card") {
            Some(c) => Some(rdv_proto::sign::hash(c)?),
            None => None,
        };
        let id = rec.requester.clone();
        self.add_contact(
            NewContact {
                id: id.clone(),
                card,
                label: g.label.clone(),
                binding: Binding::Mailbox,
                founding: Founding::ByUs(HeldGrant {
                    id: g.id.clone(),
                    tier: g.tier.clone(),
                    scope: g.scope.clone(),
                    ts: g.ts,
                    expires: None,
                }),
                card_sent,
                how: "acked".into(),
            },
            ctx,
        );
        self.state.channels_in.admit(id.clone(), anchor);
        self.state.touch(Table::ChannelIn, id.as_str());
        let mut done = rec.clone();
        done.acked = true;
        self.state.mail_in.insert(rec.request_id.clone(), done);
        self.state.touch(Table::MailProbeIn, rec.request_id.clone());
        Ok(())
    }

    // ---- the invite (§5.2.2) ---------------------------------------------------

    /// §5.2.2: an invite, only on the owner's command: one pending per
    /// address, a 30-day cooldown after silence or a decline, opt-outs
    /// honored (the gateway's too).
    pub(crate) fn invite(
        &mut self,
        address: &str,
        source: &str,
        note: Option<String>,
        from_mailbox: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        self.state.profile()?;
        let addr = email(address)?;
        let canon = addr.canon().to_string();
        let source = source.trim();
        if source.is_empty()
            || source.chars().count() > SOURCE_MAX_CHARS
            || source.chars().any(char::is_control)
        {
            return Err(Error::Input(format!(
                "--source says where you got the address: 1 to {SOURCE_MAX_CHARS} characters, \
                 one line"
            )));
        }
        if let Some(n) = &note
            && (n.chars().count() > NOTE_MAX_CHARS
                || n.chars().any(|c| c.is_control() && c != '\n'))
        {
            return Err(Error::Input(format!(
                "a note is at most {NOTE_MAX_CHARS} characters, without control characters"
            )));
        }
        if self.state.mailboxes.contains_key(&canon) {
            return Err(Error::Input(format!("{canon} is your own mailbox")));
        }
        if self.contact_claiming(&addr).is_some() {
            return Err(Error::Refused(format!("{canon} is already a contact")));
        }
        self.invite_allowed(&canon, ctx.now)?;
        let from = self.sending_mailbox(from_mailbox.as_deref())?;
        let id = ctx.uuid();
        let token = rdv_proto::encoding::base32(&ctx.bytes32()[..20]);
        let doc = Invite::build(&id, Some(&canon), &token, ctx.now, self.key())?;
        let note = note.map(|n| n.trim().to_string()).filter(|n| !n.is_empty());
        self.state.invites.insert(
            id.clone(),
            SentInvite {
                id: id.clone(),
                address: canon.clone(),
                gateway: from.gateway.clone(),
                source: source.to_string(),
                token,
                status: InviteStatus::Sending,
                sent: ctx.now,
                ended: None,
                not_before: None,
            },
        );
        self.state.touch(Table::Invite, id.clone());
        self.effects.push(Effect::Gateway(GatewayCall::SendInvite {
            gateway: from.gateway.clone(),
            invite_id: id.clone(),
            to: canon.clone(),
            invite: doc,
            source: source.to_string(),
            note,
            from_mailbox: Some(from.address.clone()),
        }));
        Ok(json!({
            "invite_id": id, "address": canon, "gateway": from.gateway,
            "from_mailbox": from.address,
        }))
    }

    /// Whether an invite to `canon` may go now (§5.2.2), or why not.
    pub fn invite_allowed(&self, canon: &str, now: Instant) -> Result<()> {
        for inv in self.state.invites.values().filter(|i| i.address == canon) {
            match &inv.status {
                InviteStatus::OptedOut => {
                    return Err(Error::Refused(format!(
                        "{canon} opted out of invites (permanent, §5.2.2): none will be sent"
                    )));
                }
                InviteStatus::Sending | InviteStatus::Pending
                    if now < plus(inv.sent, INVITE_PENDING_SECS) =>
                {
                    return Err(Error::Refused(format!(
                        "an invite to {canon} is pending since {} (one pending invite per \
                         address, §5.2.2); record its answer with rdv contact invite-status",
                        format_time(inv.sent)
                    )));
                }
                InviteStatus::Accepted => {
                    return Err(Error::Refused(format!(
                        "{canon} accepted your invite already"
                    )));
                }
                _ => {}
            }
            let end = inv.ended.unwrap_or(plus(inv.sent, INVITE_PENDING_SECS));
            let mut next = plus(end, INVITE_COOLDOWN_SECS);
            if let InviteStatus::Refused { .. } = inv.status {
                next = inv.not_before.unwrap_or(now);
            }
            if now < next {
                return Err(Error::Refused(format!(
                    "{canon} was invited on {}: a 30-day cooldown applies (§5.2.2); the next \
                     invite is allowed after {}",
                    format_time(inv.sent),
                    format_time(next)
                )));
            }
        }
        Ok(())
    }

    /// The owner records the answer to an invite of ours; acceptance goes
    /// on as the normal consent flow (§5.1–§5.3).
    pub(crate) fn invite_answer(
        &mut self,
        id: &str,
        accepted: bool,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        let inv = self
            .state
            .invites
            .get_mut(id)
            .filter(|i| matches!(i.status, InviteStatus::Pending))
            .ok_or_else(|| Error::NotFound(format!("no pending invite {id}")))?;
        inv.status = if accepted {
            InviteStatus::Accepted
        } else {
            InviteStatus::Declined
        };
        inv.ended = Some(ctx.now);
        let (gateway, address) = (inv.gateway.clone(), inv.address.clone());
        self.state.touch(Table::Invite, id);
        self.effects
            .push(Effect::Gateway(GatewayCall::InviteStatus {
                gateway,
                invite_id: id.to_string(),
                accepted,
            }));
        let next = if accepted {
            format!("ask for contact: rdv contact request {address} (or their agent ID)")
        } else {
            "no invite to this address for 30 days".to_string()
        };
        Ok(json!({
            "invite_id": id, "address": address,
            "status": if accepted { "accepted" } else { "declined" }, "next": next,
        }))
    }

    // ---- what the gateway brings -------------------------------------------------

    pub(crate) fn on_gateway(&mut self, g: GatewayInput, ctx: &mut Ctx<'_>) -> Result<()> {
        match g {
            GatewayInput::Item { gateway, item } => self.on_item(&gateway, &item, ctx),
            GatewayInput::Answered { call, outcome } => self.on_answered(&call, &outcome, ctx),
        }
    }

    /// The gateways whose inbox the listener reads, with the last seq
    /// handled (the stream's `after`).
    pub fn gateway_inboxes(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for m in self.state.mailboxes.values().filter(|m| m.verified) {
            if !out.iter().any(|(g, _)| g == &m.gateway) {
                let after = self
                    .state
                    .gateway_cursors
                    .get(&m.gateway)
                    .copied()
                    .unwrap_or(0);
                out.push((m.gateway.clone(), after));
            }
        }
        out
    }

    /// Our proved mailbox at `gateway` that the item names.
    fn our_mailbox(&self, gateway: &str, item: &Value) -> Option<String> {
        let a = email(item_str(item, "mailbox", ADDRESS_MAX_LEN)?).ok()?;
        self.state
            .mailboxes
            .get(a.canon())
            .filter(|m| m.verified && m.gateway == gateway)
            .map(|m| m.address.clone())
    }

    /// One inbox item: handled once, in seq order (§5.4 replay).
    fn on_item(&mut self, gateway: &str, item: &Value, ctx: &mut Ctx<'_>) -> Result<()> {
        if !self
            .state
            .mailboxes
            .values()
            .any(|m| m.verified && m.gateway == gateway)
        {
            return Ok(());
        }
        let Some(seq) = item.get("seq").and_then(Value::as_u64) else {
            return Ok(());
        };
        let cursor = self
            .state
            .gateway_cursors
            .get(gateway)
            .copied()
            .unwrap_or(0);
        if seq <= cursor {
            return Ok(());
        }
        self.state.gateway_cursors.insert(gateway.to_string(), seq);
        self.state.touch(Table::GatewayCursor, gateway);
        let Some(mailbox) = self.our_mailbox(gateway, item) else {
            return Ok(());
        };
        match item.get("kind").and_then(Value::as_str).unwrap_or("") {
            "probe" => self.on_probe_item(gateway, seq, &mailbox, item, ctx),
            "probe_ack" => self.on_syn_ack_item(gateway, seq, item, ctx),
            "release" => self.on_release_item(gateway, item, ctx),
            "invite" => self.on_invite_item(&mailbox, item, ctx),
            _ => Ok(()),
        }
    }

    /// §5.2.1: a probe, already gated by the gateway (DKIM/DMARC, the
    /// signature), verified again here, then a pending request for the
    /// owner; binding mailbox when DMARC passed, claimed until the cookie
    /// comes back otherwise.
    fn on_probe_item(
        &mut self,
        gateway: &str,
        seq: u64,
        mailbox: &str,
        item: &Value,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let p = self.state.profile()?.clone();
        let payload = item.get("payload").unwrap_or(&Value::Null);
        let Ok(BlockPayload::Probe(probe)) = parse_payload(payload, ctx.now, p.allow_ws) else {
            return Ok(());
        };
        let req = probe.request;
        if req
            .to_hint_address()
            .map(|a| a.canon().to_string())
            .as_deref()
            != Some(mailbox)
        {
            return Ok(());
        }
        if &req.from == self.id()
            || self.state.blocked.contains(&req.from)
            || self.state.contact(&req.from).is_some()
            || p.inbound == "block"
        {
            return Ok(());
        }
        let Some(cookie) = item_str(item, "cookie", PROBE_COOKIE_MAX_LEN).filter(|c| cookie_ok(c))
        else {
            return Ok(());
        };
        if self.seen(&req.id, ctx) {
            return Ok(());
        }
        let weak_proof = item.get("binding").and_then(Value::as_str) == Some("weak_mailbox_proof");
        let sender = item_str(item, "sender", ADDRESS_MAX_LEN)
            .and_then(|s| email(s).ok())
            .map(|a| a.canon().to_string());
        if self.state.pending.len() >= MAX_PENDING
            && let Some(oldest) = self
                .state
                .pending
                .values()
                .min_by_key(|p| p.received)
                .map(|p| p.request_id.clone())
        {
            self.state.pending.remove(&oldest);
            self.state.touch(Table::Pending, oldest.clone());
            if self.state.mail_in.remove(&oldest).is_some() {
                self.state.touch(Table::MailProbeIn, oldest);
            }
            self.tell(Event::Dropped {
                from: None,
                reason: "too many requests waiting: the oldest was dropped".into(),
            });
        }
        let binding = if weak_proof {
            Binding::Mailbox
        } else {
            Binding::Claimed
        };
        let pending = Pending {
            request_id: req.id.clone(),
            from: req.from.clone(),
            request: req.doc.clone(),
            via: Via::Mailbox {
                address: mailbox.to_string(),
            },
            binding,
            received: ctx.now,
            phrase: None,
        };
        self.state.pending.insert(req.id.clone(), pending.clone());
        self.state.touch(Table::Pending, req.id.clone());
        self.state.mail_in.insert(
            req.id.clone(),
            MailProbeIn {
                request_id: req.id.clone(),
                requester: req.from.clone(),
                gateway: gateway.to_string(),
                mailbox: mailbox.to_string(),
                seq,
                cookie: cookie.to_string(),
                sender,
                weak_proof,
                pending,
                granted: None,
                acked: false,
            },
        );
        self.state.touch(Table::MailProbeIn, req.id.clone());
        self.tell(Event::ContactRequest {
            request_id: req.id.clone(),
            from: req.from.clone(),
            fingerprint: req.from.fingerprint(),
            binding: binding.as_str().into(),
            via: "mailbox".into(),
            address: Some(mailbox.to_string()),
            greeting: UntrustedPeerText::new(&req.greeting),
        });
        if p.inbound == "allow" {
            // §5.4, §5.5: a standing pre-approval the owner set.
            let scope = crate::agent::default_scope(false, &[], "100/day");
            self.grant_pending(&req.id, "stranger", scope, None, ctx)?;
        }
        Ok(())
    }

    /// §5.2.1, §5.3: a SYN-ACK to one of our mailbox probes, verified as
    /// any grant; a candidate for the owner, never a contact by itself.
    fn on_syn_ack_item(
        &mut self,
        gateway: &str,
        seq: u64,
        item: &Value,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let allow_ws = self.state.profile()?.allow_ws;
        let payload = item.get("payload").unwrap_or(&Value::Null);
        let Ok(BlockPayload::ProbeAck(ack)) = parse_payload(payload, ctx.now, allow_ws) else {
            return Ok(());
        };
        let g = ack.grant;
        if &g.to != self.id() || &g.from == self.id() || self.state.blocked.contains(&g.from) {
            return Ok(());
        }
        let GrantRef::Request(r) = &g.reference else {
            return Ok(());
        };
        // Only our mailbox probes are answered by mail, at their gateway.
        if self
            .state
            .mail_out
            .get(r)
            .is_none_or(|m| m.gateway != gateway)
        {
            return Ok(());
        }
        let Some(out) = self.state.outgoing.get(r).filter(|o| !o.closed) else {
            return Ok(());
        };
        let Target::Address(addr) = &out.target else {
            return Ok(());
        };
        let address = addr.clone();
        // §5.3: an answer whose card does not list the probed address is ignored.
        let Ok(a) = Address::parse(&address) else {
            return Ok(());
        };
        if !g.card.claims(&a)
            || self.state.seen.contains_key(&g.id)
            || out.candidates.iter().any(|c| c.grantor == g.from)
        {
            return Ok(());
        }
        if out.candidates.len() >= MAX_CANDIDATES {
            let Some(o) = self.state.outgoing.get_mut(r) else {
                return Ok(());
            };
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
        let r = r.clone();
        if let Some(o) = self.state.outgoing.get_mut(&r) {
            o.candidates.push(Candidate {
                grantor: g.from.clone(),
                grant: g.doc.clone(),
                // Unused: a mailbox answer came by mail, so the grantor's
                // chain starts at its first envelope (confirm_mail).
                anchor: Meta {
                    seq: 0,
                    prev: None,
                    hash: String::new(),
                    created: ctx.now,
                },
                received: ctx.now,
            });
        }
        self.state.touch(Table::Outgoing, r.clone());
        if let Some(m) = self.state.mail_out.get_mut(&r) {
            m.answers.push(MailAnswer {
                grantor: g.from.clone(),
                seq,
                cookie: ack.cookie.clone(),
            });
        }
        self.state.touch(Table::MailProbeOut, r.clone());
        self.seen(&g.id, ctx);
        self.tell(Event::ContactCandidate {
            request_id: r,
            grantor: g.from.clone(),
            fingerprint: g.from.fingerprint(),
            address,
        });
        Ok(())
    }

    /// The ACK by mail landed: the gateway checked the cookie and
    /// released the probe.
    fn on_release_item(&mut self, gateway: &str, item: &Value, ctx: &mut Ctx<'_>) -> Result<()> {
        let Some(request_id) = item_str(item, "request_id", 64).filter(|s| is_uuid(s)) else {
            return Ok(());
        };
        let Some(requester) = item_str(item, "requester", 128).and_then(|s| AgentId::parse(s).ok())
        else {
            return Ok(());
        };
        let probe_seq = item.get("probe_seq").and_then(Value::as_u64);
        let Some(rec) = self.state.mail_in.get(request_id).cloned() else {
            return Ok(());
        };
        if rec.requester != requester
            || rec.gateway != gateway
            || probe_seq != Some(rec.seq)
            || rec.acked
            || rec.granted.is_none()
        {
            return Ok(());
        }
        self.complete_mail_contact(&rec, None, ctx)
    }

    /// §5.2.2: someone's agent invited our owner; shown, nothing answered.
    fn on_invite_item(&mut self, mailbox: &str, item: &Value, ctx: &mut Ctx<'_>) -> Result<()> {
        let payload = item.get("payload").unwrap_or(&Value::Null);
        let Ok(BlockPayload::Invite(inv)) = parse_payload(payload, ctx.now, false) else {
            return Ok(());
        };
        if &inv.from == self.id() || self.state.blocked.contains(&inv.from) {
            return Ok(());
        }
        if let Some(h) = &inv.to_hint
            && email(h).ok().map(|a| a.canon().to_string()).as_deref() != Some(mailbox)
        {
            return Ok(());
        }
        let age = ctx.now - inv.ts;
        if age > time::Duration::seconds(PROBE_LIFETIME_SECS) || age < time::Duration::minutes(-5) {
            return Ok(());
        }
        if self.seen(&inv.id, ctx) {
            return Ok(());
        }
        self.tell(Event::Invited {
            invite_id: inv.id.clone(),
            from: inv.from.clone(),
            fingerprint: inv.from.fingerprint(),
            mailbox: Some(mailbox.to_string()),
        });
        Ok(())
    }

    /// The gateway's answer to one of our calls.
    fn on_answered(
        &mut self,
        call: &GatewayCall,
        outcome: &CallOutcome,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let id = call.id().to_string();
        let (code, retry) = match outcome {
            CallOutcome::Done => (None, None),
            CallOutcome::Refused {
                code, retry_after, ..
            } => (Some(code.as_str()), *retry_after),
            CallOutcome::Failed { .. } => (Some("unreachable"), None),
        };
        let not_before = retry.and_then(|s| {
            i64::try_from(s.min(366 * 24 * 3600))
                .ok()
                .and_then(|s| from_unix(ctx.unix() + s).ok())
        });
        let mut address = None;
        match call {
            GatewayCall::SendProbe { .. } => {
                let Some(mut m) = self.state.mail_out.get(&id).cloned() else {
                    return Ok(());
                };
                address = Some(m.address.clone());
                match (code, outcome) {
                    (None, _) => m.status = MailProbeStatus::Sent,
                    (_, CallOutcome::Failed { .. }) => {
                        // Not sent: it does not count against the limit.
                        self.state.mail_out.remove(&id);
                        self.state.touch(Table::MailProbeOut, id.clone());
                        self.close_outgoing(&id);
                    }
                    (Some(c), _) => {
                        m.status = MailProbeStatus::Refused { code: c.into() };
                        m.not_before = not_before;
                        self.close_outgoing(&id);
                    }
                }
                if self.state.mail_out.contains_key(&id) {
                    self.state.mail_out.insert(id.clone(), m);
                    self.state.touch(Table::MailProbeOut, id.clone());
                }
            }
            GatewayCall::SynAck { .. } => {
                let Some(mut rec) = self.state.mail_in.get(&id).cloned() else {
                    return Ok(());
                };
                address = Some(rec.mailbox.clone());
                match code {
                    None | Some("already_answered") => {
                        if let Some(g) = rec.granted.as_mut() {
                            g.sent = true;
                        }
                    }
                    Some(_) if !rec.acked => {
                        // Not answered: the request waits for the owner again.
                        rec.granted = None;
                        self.state.pending.insert(id.clone(), rec.pending.clone());
                        self.state.touch(Table::Pending, id.clone());
                    }
                    Some(_) => {}
                }
                self.state.mail_in.insert(id.clone(), rec);
                self.state.touch(Table::MailProbeIn, id.clone());
            }
            GatewayCall::SendInvite { to, .. } => {
                address = Some(to.clone());
                let Some(mut inv) = self.state.invites.get(&id).cloned() else {
                    return Ok(());
                };
                match (code, outcome) {
                    (None, _) => inv.status = InviteStatus::Pending,
                    (_, CallOutcome::Failed { .. }) => {
                        self.state.invites.remove(&id);
                        self.state.touch(Table::Invite, id.clone());
                    }
                    (Some("opted_out"), _) => {
                        inv.status = InviteStatus::OptedOut;
                        inv.ended = Some(ctx.now);
                    }
                    (Some(c), _) => {
                        inv.status = InviteStatus::Refused { code: c.into() };
                        inv.ended = Some(ctx.now);
                        inv.not_before = not_before;
                    }
                }
                if self.state.invites.contains_key(&id) {
                    self.state.invites.insert(id.clone(), inv);
                    self.state.touch(Table::Invite, id.clone());
                }
            }
            GatewayCall::Ack { .. }
            | GatewayCall::SendAck { .. }
            | GatewayCall::InviteStatus { .. } => {}
        }
        if let Some(c) = code {
            let message = match outcome {
                CallOutcome::Refused { message, .. } => message.as_str(),
                CallOutcome::Failed { reason } => reason.as_str(),
                CallOutcome::Done => "",
            };
            self.tell(Event::GatewayRefused {
                what: call.what().into(),
                id: Some(id),
                address,
                refusal: crate::peer_text::bounded(c, 64),
                message: UntrustedPeerText::new(&crate::peer_text::bounded(message, 300)),
                retry_after: retry,
            });
        }
        Ok(())
    }

    fn close_outgoing(&mut self, id: &str) {
        if let Some(o) = self.state.outgoing.get_mut(id) {
            o.closed = true;
            self.state.touch(Table::Outgoing, id);
        }
    }
}
