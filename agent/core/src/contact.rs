//! Making a contact (§5.3), once for every path that makes one: our owner
//! grants a request (or a mailbox probe whose ACK came back, §5.2.1), or a
//! grantor's grant to us is accepted (a request by card answered, a probe
//! answer confirmed). Also the binding a contact keeps (§4.4), which a
//! stronger discovery later upgrades and nothing downgrades.

use rdv_proto::AgentId;
use rdv_proto::doc::grant::Grant;
use rdv_proto::doc::request::RequestBuilder;
use serde_json::{Value, json};

use crate::agent::{Agent, CAPABILITIES, Ctx};
use crate::error::Result;
use crate::event::Event;
use crate::record::Table;
use crate::state::{Binding, Contact, ContactStatus, HeldGrant, Outgoing, Target};

/// Whose grant founds the contact (§5.3 direction).
#[derive(Debug, Clone)]
pub(crate) enum Founding {
    /// Our owner's grant: what the peer may do towards us, at our tier.
    ByUs(HeldGrant),
    /// The peer's grant: what we may do towards the peer; our own tier for
    /// it starts at stranger (§5.3), and the contact ends when it expires.
    ToUs(HeldGrant),
}

/// A contact about to be made.
#[derive(Debug, Clone)]
pub(crate) struct NewContact {
    pub id: AgentId,
    /// The peer's signed card.
    pub card: Value,
    /// The owner's name for it (never the peer's).
    pub label: Option<String>,
    pub binding: Binding,
    pub founding: Founding,
    /// Hash of our card the peer already holds (§4.3), so it is not sent again.
    pub card_sent: Option<String>,
    /// How it came about, for the owner's event (granted, accepted, …).
    pub how: String,
}

/// Our own request for contact (§5.1), to a card, or as a probe (§4.4,
/// §5.2.1) naming the address it is for.
#[derive(Debug, Clone)]
pub(crate) struct OurRequest {
    pub target: Target,
    /// The probed address (`to_hint`); none for a request to a card.
    pub to_hint: Option<String>,
    /// The owner's name for whoever answers.
    pub label: Option<String>,
    pub greeting: String,
    /// The binding the answer gets when it becomes a contact.
    pub binding: Binding,
}

/// A signed grant as the side it concerns keeps it.
pub(crate) fn held_grant(g: &Grant) -> HeldGrant {
    HeldGrant {
        id: g.id.clone(),
        tier: g.tier.clone(),
        scope: g.doc.get("scope").cloned().unwrap_or(Value::Null),
        ts: g.ts,
        expires: g.expires,
    }
}

/// How much a binding says (§4.4): claimed (a pointer, a probe answer) and
/// a card handed over prove nothing; a directory listing is self-asserted
/// too but signed into a directory under the address; DNS and the mailbox
/// proof show control of the domain or the mailbox; in person is the owner's
/// own word. Bindings of one rank do not replace each other.
pub fn binding_rank(b: Binding) -> u8 {
    match b {
        Binding::Claimed | Binding::Card => 0,
        Binding::Directory => 1,
        Binding::Dns | Binding::Mailbox => 2,
        Binding::InPerson => 3,
    }
}

impl Agent {
    /// Records the contact, forgets a card kept for a later request (the
    /// contact holds the card now), and tells the owner.
    pub(crate) fn add_contact(&mut self, n: NewContact, ctx: &Ctx<'_>) {
        let (founding_grant, tier, granted_by_us, granted_to_us, expires) = match n.founding {
            Founding::ByUs(h) => (h.id.clone(), h.tier.clone(), Some(h), None, None),
            Founding::ToUs(h) => {
                let (id, expires) = (h.id.clone(), h.expires);
                (id, "stranger".to_string(), None, Some(h), expires)
            }
        };
        let c = Contact {
            id: n.id.clone(),
            card: n.card,
            label: n.label.clone(),
            binding: n.binding,
            status: ContactStatus::Active,
            founding_grant,
            tier,
            granted_by_us,
            granted_to_us,
            expires,
            since: ctx.now,
            card_sent: n.card_sent,
            card_updates: Vec::new(),
            reverse_grants: Vec::new(),
            received: Vec::new(),
            ended: None,
        };
        self.state.contacts.insert(n.id.clone(), c);
        self.state.touch(Table::Contact, n.id.as_str());
        if self.state.known_cards.remove(&n.id).is_some() {
            self.state.touch(Table::KnownCard, n.id.as_str());
        }
        self.tell(Event::Contact {
            id: n.id.clone(),
            fingerprint: n.id.fingerprint(),
            label: n.label,
            binding: n.binding.as_str().into(),
            how: n.how,
        });
    }

    /// Signs our request `id` (with our card and capabilities) and keeps it
    /// as outgoing until it is answered or withdrawn; the signed request is
    /// for the caller to carry.
    pub(crate) fn open_request(&mut self, id: &str, r: OurRequest, ctx: &Ctx<'_>) -> Result<Value> {
        let doc = RequestBuilder {
            id: id.to_string(),
            to_hint: r.to_hint,
            card: self.state.profile()?.card.clone(),
            greeting: r.greeting.clone(),
            capabilities_offered: CAPABILITIES.iter().map(|s| s.to_string()).collect(),
            ts: ctx.now,
        }
        .sign(self.key())?;
        self.state.outgoing.insert(
            id.to_string(),
            Outgoing {
                request_id: id.to_string(),
                target: r.target,
                label: r.label,
                greeting: r.greeting,
                binding: r.binding,
                created: ctx.now,
                candidates: Vec::new(),
                dropped: 0,
                closed: false,
            },
        );
        self.state.touch(Table::Outgoing, id);
        Ok(doc)
    }

    /// Records a contact whose grant to us is `g` (§5.3 direction: it sets
    /// what we may do towards the peer and nothing else).
    pub(crate) fn make_contact_from_grant(
        &mut self,
        g: &Grant,
        binding: Binding,
        label: Option<String>,
        how: &str,
        ctx: &mut Ctx<'_>,
    ) {
        // Our card went with the request (§4.3): it need not be sent again.
        let card_sent = self
            .state
            .profile
            .as_ref()
            .and_then(|p| rdv_proto::sign::hash(&p.card).ok());
        self.add_contact(
            NewContact {
                id: g.from.clone(),
                card: g.card.doc.clone(),
                label,
                binding,
                founding: Founding::ToUs(held_grant(g)),
                card_sent,
                how: how.into(),
            },
            ctx,
        );
    }

    /// §4.4: a card of `id` was found (or handed over) with `binding`. The
    /// relationship records keep the stronger binding: a current contact's,
    /// a pending request's, a kept card's. Never a weaker one, and only for
    /// that key. Returns what was upgraded, for the command's reply.
    pub(crate) fn upgrade_binding(&mut self, id: &AgentId, binding: Binding) -> Vec<Value> {
        let stronger = |held: Binding| binding_rank(binding) > binding_rank(held);
        let mut upgraded = Vec::new();
        if let Some(c) = self.state.contacts.get_mut(id)
            && c.status == ContactStatus::Active
            && stronger(c.binding)
        {
            upgraded
                .push(json!({"contact": id, "from": c.binding.as_str(), "to": binding.as_str()}));
            c.binding = binding;
            self.state.touch(Table::Contact, id.as_str());
        }
        let pending: Vec<String> = self
            .state
            .pending
            .values()
            .filter(|p| &p.from == id && stronger(p.binding))
            .map(|p| p.request_id.clone())
            .collect();
        for r in pending {
            if let Some(p) = self.state.pending.get_mut(&r) {
                upgraded.push(
                    json!({"pending": r, "from": p.binding.as_str(), "to": binding.as_str()}),
                );
                p.binding = binding;
                self.state.touch(Table::Pending, r);
            }
        }
        if let Some(k) = self.state.known_cards.get_mut(id)
            && stronger(k.binding)
        {
            upgraded
                .push(json!({"kept_card": id, "from": k.binding.as_str(), "to": binding.as_str()}));
            k.binding = binding;
            self.state.touch(Table::KnownCard, id.as_str());
        }
        upgraded
    }
}
