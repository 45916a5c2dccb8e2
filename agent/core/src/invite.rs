//! The invite's token, from the invitee's agent back to the inviter
//! (§5.2.2: "Acceptance replies with the token … the token maps the human
//! introduction to the handshake").
//!
//! The invitee's agent sends the inviter's card one encrypted envelope
//! whose payload is `rdv/invite-accept`: the invite's id, its token and a
//! signed contact request (§5.1), so the token travels only inside the
//! envelope, never on a topic (§9), and the request and the token cannot
//! arrive apart. The request itself is unchanged: an agent that does not
//! know the payload drops it (an unknown `rdv/` type), and the invitee can
//! still ask the plain way.
//!
//! The inviter's agent gates the request as any request (§5.1, §5.4), and
//! only when the token is the one of an invite of ours still waiting for
//! an answer does it show the request as the answer to that invite: via
//! `invite`, the invited address, binding `mailbox` (only whoever read the
//! mail sent to that address holds the token, as with the probe's cookie,
//! §5.2.1). The token is single use: the invite is then accepted, the
//! gateway told (its pending invite ends), and the same token again is a
//! plain request. Consent is unchanged: the owner still grants (§5.2, §5.5).

use rdv_proto::consts::INVITE_TOKEN_MAX_LEN;
use rdv_proto::doc::card::Card;
use rdv_proto::doc::request::RequestBuilder;
use rdv_proto::mailblock::Invite;
use rdv_proto::{AgentId, channel::Meta};
use serde_json::{Map, Value, json};
use subtle::ConstantTimeEq;

use crate::agent::{Agent, CAPABILITIES, Ctx, Effect};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::mailbox::GatewayCall;
use crate::record::Table;
use crate::state::{Binding, InviteStatus, Outgoing, Target, Via};

/// `type` of the invitee's answer (inside an envelope to the inviter).
pub const INVITE_ACCEPT_TYPE: &str = "rdv/invite-accept";

/// The answer's members, all required, no others.
const ACCEPT_KEYS: [&str; 4] = ["type", "invite_id", "token", "request"];

/// The payload that carries `request` with the invite's token.
pub fn accept_payload(invite_id: &str, token: &str, request: &Value) -> Value {
    json!({
        "type": INVITE_ACCEPT_TYPE,
        "invite_id": invite_id,
        "token": token,
        "request": request,
    })
}

/// An answer's fields, shape-checked (strict: §5.6 short structural fields).
struct Accept<'a> {
    invite_id: &'a str,
    token: &'a str,
    request: &'a Value,
}

fn parse_accept(v: &Value) -> Option<Accept<'_>> {
    let o: &Map<String, Value> = v.as_object()?;
    if o.len() != ACCEPT_KEYS.len() || !ACCEPT_KEYS.iter().all(|k| o.contains_key(*k)) {
        return None;
    }
    let invite_id = o.get("invite_id")?.as_str()?;
    let token = o.get("token")?.as_str()?;
    let request = o.get("request")?;
    let token_ok = !token.is_empty()
        && token.len() <= INVITE_TOKEN_MAX_LEN
        && token.bytes().all(|b| b.is_ascii_graphic());
    if !rdv_proto::doc::obj::is_uuid(invite_id) || !token_ok || !request.is_object() {
        return None;
    }
    Some(Accept {
        invite_id,
        token,
        request,
    })
}

impl Agent {
    /// The inviter's side: an `rdv/invite-accept` from `from` (verified
    /// envelope, channel order). The request inside is gated as any
    /// request; it answers our invite only with that invite's token, once.
    pub(crate) fn on_invite_accept(
        &mut self,
        payload: &Value,
        from: &AgentId,
        meta: &Meta,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let Some(a) = parse_accept(payload) else {
            self.drop_invite_accept(from, "an invite answer of the wrong shape");
            return Ok(());
        };
        let request_id = a
            .request
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        // The invite it names, still waiting, with the same token
        // (compared in constant time: the token is a bearer proof).
        let invite = self
            .state
            .invites
            .get(a.invite_id)
            .filter(|i| matches!(i.status, InviteStatus::Sending | InviteStatus::Pending))
            .filter(|i| bool::from(i.token.as_bytes().ct_eq(a.token.as_bytes())))
            .cloned();
        let Some(inv) = invite else {
            // No token, no data (§5.2.2): a plain request, nothing mapped.
            return self.on_request(a.request, Some(from), Via::Envelope, Some(meta), ctx);
        };
        let was_contact = self.state.contact(from).is_some();
        self.on_request(
            a.request,
            Some(from),
            Via::Invite {
                address: inv.address.clone(),
                invite_id: inv.id.clone(),
            },
            Some(meta),
            ctx,
        )?;
        // Taken: waiting for the owner, or granted by a standing policy.
        let taken = self
            .state
            .pending
            .get(&request_id)
            .is_some_and(|p| &p.from == from)
            || (!was_contact && self.state.contact(from).is_some());
        if !taken {
            return Ok(());
        }
        // §5.2.2: single use; the invite is answered, and its gateway's
        // pending invite ends with it.
        if let Some(i) = self.state.invites.get_mut(&inv.id) {
            i.status = InviteStatus::Accepted;
            i.ended = Some(ctx.now);
        }
        self.state.touch(Table::Invite, inv.id.clone());
        self.effects
            .push(Effect::Gateway(GatewayCall::InviteStatus {
                gateway: inv.gateway.clone(),
                invite_id: inv.id.clone(),
                accepted: true,
            }));
        self.tell(Event::InviteAnswered {
            invite_id: inv.id.clone(),
            address: inv.address.clone(),
            request_id,
            from: from.clone(),
            fingerprint: from.fingerprint(),
        });
        Ok(())
    }

    fn drop_invite_accept(&mut self, from: &AgentId, reason: &str) {
        if self.state.contact(from).is_some() {
            self.tell(Event::Dropped {
                from: Some(from.clone()),
                reason: reason.to_string(),
            });
        }
    }

    /// The invitee's side (§5.2.2): the owner answers an invite that
    /// reached them (the signed `rdv/invite` of the mail's RDV/1 block) by
    /// asking the inviter's agent, whose `card` must be the invite's
    /// signer's, for contact, with the token.
    pub(crate) fn accept_invite(
        &mut self,
        invite: &Value,
        card: &Value,
        greeting: String,
        label: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        if greeting.chars().count() > rdv_proto::consts::REQUEST_GREETING_MAX {
            return Err(Error::Input(format!(
                "a greeting is at most {} characters",
                rdv_proto::consts::REQUEST_GREETING_MAX
            )));
        }
        if let Some(l) = &label {
            crate::command::check_label(l)?;
        }
        let inv = Invite::verify(invite)
            .map_err(|e| Error::Input(format!("not a signed invite: {e}")))?;
        let p = self.state.profile()?.clone();
        let c = Card::verify(card, ctx.now, p.allow_ws)?;
        if c.id != inv.from {
            return Err(Error::Refused(format!(
                "the card is {}'s, but the invite is from {}: use the inviter's card",
                c.id, inv.from
            )));
        }
        if &c.id == self.id() {
            return Err(Error::Input("that invite is this agent's own".into()));
        }
        if self.state.contact(&c.id).is_some() {
            return Err(Error::Refused(format!("{} is already a contact", c.id)));
        }
        if self.state.blocked.contains(&c.id) {
            return Err(Error::Refused(format!(
                "{} is blocked (rdv contact unblock first)",
                c.id
            )));
        }
        let id = ctx.uuid();
        let request = RequestBuilder {
            id: id.clone(),
            to_hint: None,
            card: p.card.clone(),
            greeting: greeting.clone(),
            capabilities_offered: CAPABILITIES.iter().map(|s| s.to_string()).collect(),
            ts: ctx.now,
        }
        .sign(self.key())?;
        self.state.outgoing.insert(
            id.clone(),
            Outgoing {
                request_id: id.clone(),
                target: Target::Agent(c.id.clone()),
                label,
                greeting,
                binding: Binding::Card,
                created: ctx.now,
                candidates: Vec::new(),
                dropped: 0,
                closed: false,
            },
        );
        self.state.touch(Table::Outgoing, id.clone());
        // §6.4: an agent we asked by card gets channel state.
        self.state.channels_in.admit(c.id.clone(), None);
        self.state.touch(Table::ChannelIn, c.id.as_str());
        let routes = self.routes_for_card(&c.doc, &[]);
        let payload = accept_payload(&inv.id, &inv.token, &request);
        let seq = self.send_payload(&c.id, &payload, routes, ctx)?;
        Ok(json!({
            "request_id": id, "kind": "invite", "invite_id": inv.id, "to": c.id,
            "fingerprint": c.id.fingerprint(), "seq": seq,
        }))
    }
}
