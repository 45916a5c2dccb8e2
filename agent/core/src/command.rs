//! The owner's commands (§4.3, §5): each is the human's decision, taken
//! from a channel the assistant model cannot answer (§5.5). The front-ends
//! decide which of them need a confirm phrase; the core trusts a command.

use rdv_proto::doc::card::{Card, CardBuilder, Inbound as Policy};
use rdv_proto::doc::grant::{Grant, GrantBuilder, GrantRef};
use rdv_proto::doc::request::ContactRequest;
use rdv_proto::doc::revoke::Revoke;
use rdv_proto::time::format_time;
use rdv_proto::{Address, AgentId, idtopic};
use serde_json::{Value, json};

use crate::agent::{Agent, CAPABILITIES, Ctx, Effect};
use crate::contact::{Founding, NewContact, OurRequest};
use crate::error::{Error, Result};
use crate::record::Table;
use crate::state::{
    Binding, Carry, ContactStatus, HeldGrant, KnownCard, OwnAddress, Profile, Target,
};

/// What the owner sets up at `rdv init` (§4.3).
#[derive(Debug, Clone, Default)]
pub struct Setup {
    pub addresses: Vec<(String, bool)>,
    pub relays: Vec<String>,
    pub public_pointer: bool,
    pub inbound: String,
    pub other_rendezvous: Vec<Value>,
    pub allow_ws: bool,
    pub directories: Vec<String>,
    pub suggest: bool,
}

/// Whom a request goes to.
#[derive(Debug, Clone)]
pub enum RequestTo {
    /// A card we hold (found, imported, or fetched by ID).
    Card(Value),
    /// An address: a topic probe (§4.4).
    Address(String),
}

/// A command from the owner.
#[derive(Debug, Clone)]
pub enum Command {
    /// Sets up the profile and signs the first card.
    Init(Setup),
    /// At each start: refresh capabilities (§4.3 issue #43), send the card
    /// to contacts that lack it (issue #45).
    Start,
    AddAddress {
        address: String,
        public: bool,
    },
    RemoveAddress {
        address: String,
    },
    AddRelay {
        url: String,
    },
    RemoveRelay {
        url: String,
    },
    SetPolicy {
        inbound: String,
    },
    /// Lists ntfy and MQTT fallback carriers on the card (§6.3); the topic
    /// is derived from the agent ID.
    SetFallbacks {
        ntfy: Option<String>,
        mqtt: Option<String>,
    },
    /// Publish the card on the address and ID topics now (§4.4).
    PublishCard,
    /// Keep a card found by discovery or imported (§4.4).
    KeepCard {
        card: Value,
        binding: Binding,
    },
    Request {
        to: RequestTo,
        greeting: String,
        label: Option<String>,
    },
    Grant {
        request_id: String,
        tier: String,
        scope: Value,
        label: Option<String>,
    },
    /// Confirms a probe answer (§5.3: after seeing the fingerprint).
    Confirm {
        request_id: String,
        grantor: Option<AgentId>,
        label: Option<String>,
    },
    Decline {
        request_id: String,
        block: bool,
    },
    Revoke {
        id: AgentId,
    },
    Block {
        id: AgentId,
    },
    Unblock {
        id: AgentId,
    },
    Label {
        id: AgentId,
        label: Option<String>,
    },
    /// §6.4: adopt the next newer envelope after a fork.
    Resync {
        id: AgentId,
    },
    Send {
        to: AgentId,
        payload: Value,
    },
    /// §6.4.1: this agent was just restored from a backup made at
    /// `backup_created`; every contact gets a new epoch and its notice.
    Restored {
        backup_created: Option<rdv_proto::time::Instant>,
    },
    /// Records a mailbox the gateway mailed a code to (§5.2.1); the
    /// runtime made the `register` call.
    MailboxAdd {
        address: String,
        gateway: String,
        on_card: bool,
    },
    /// The gateway took the code: the mailbox is proved.
    MailboxVerified {
        address: String,
        gateway_address: Option<String>,
    },
    /// Forgets a mailbox (and its email rendezvous entry).
    MailboxRemove {
        address: String,
    },
    /// A mailbox probe through our gateway (§5.2.1).
    MailProbe {
        address: String,
        greeting: String,
        label: Option<String>,
        from_mailbox: Option<String>,
    },
    /// An invite, on the owner's explicit command (§5.2.2).
    Invite {
        address: String,
        source: String,
        note: Option<String>,
        from_mailbox: Option<String>,
    },
    /// The owner records the answer to an invite (§5.2.2).
    InviteAnswer {
        id: String,
        accepted: bool,
    },
    /// A general task command (§7.6, §5.5 gates).
    Task(crate::task_flow::TaskCommand),
    /// The owner passphrase and auto_approve: all (§5.5.1).
    Owner(crate::task_flow::OwnerCommand),
    /// The owner's file commands (§7.7): the direct-transfer setting and
    /// declining a transfer. Front-ends take the setting only from the
    /// owner's own terminal (never a model or a peer).
    File(crate::file::FileCommand),
    /// The owner answers an invite that reached them (§5.2.2): a request
    /// to the inviter's `card` carrying the signed `invite`'s token.
    AcceptInvite {
        invite: Value,
        card: Value,
        greeting: String,
        label: Option<String>,
    },
    /// §4.5: friend suggestions on or off (on by default).
    SetSuggest {
        on: bool,
    },
    /// §4.5: one more directory for discovery, suggestions and listing.
    AddDirectory {
        url: String,
    },
    /// Stops using a directory (its listings stay until unlisted).
    RemoveDirectory {
        url: String,
    },
    /// §7.3: the owner proposes a meeting to a contact.
    ProposeMeeting(crate::meeting::Proposal),
    /// §5.5: the owner confirms the held meeting shown with `code`.
    ConfirmMeeting {
        task_id: String,
        peer: Option<AgentId>,
        code: crate::owner::Secret,
    },
    /// §7.3: the owner cancels a negotiation, or calls off an agreed
    /// meeting with the cancel code shown with it.
    CancelMeeting {
        task_id: String,
        peer: Option<AgentId>,
        code: Option<crate::owner::Secret>,
        /// Sent to the peer with the cancel (one line, §7.2 text bound).
        reason: Option<String>,
    },
    /// §5.5: keeps the record of a code a front-end is about to show for
    /// the meeting step whose digest is `digest` (`meeting::current_step`).
    SetMeetingCode {
        task_id: String,
        peer: Option<AgentId>,
        digest: String,
        record: crate::phrase::PhraseRecord,
    },
    /// Every meeting (§7.3), without codes.
    ListMeetings,
    /// The owner's busy times, from the calendar adapter (§7.4).
    SetCalendar {
        busy: Vec<crate::meeting::Slot>,
        sources: Vec<String>,
    },
}

/// The tiers a human may pick (§5.3).
pub fn check_tier(t: &str) -> Result<()> {
    if rdv_proto::consts::TIERS.contains(&t) {
        Ok(())
    } else {
        Err(Error::Input(format!(
            "tier must be one of {}",
            rdv_proto::consts::TIERS.join(", ")
        )))
    }
}

/// A label the owner gives: one line, at most 64 characters.
pub fn check_label(l: &str) -> Result<()> {
    if l.is_empty() || l.chars().count() > 64 || l.chars().any(char::is_control) {
        return Err(Error::Input(
            "a label is 1 to 64 characters with no control characters".into(),
        ));
    }
    Ok(())
}

/// A relay URL we listen on: wss:// (ws:// only where allowed).
pub fn check_relay(url: &str, allow_ws: bool) -> Result<()> {
    let ok = (url.starts_with("wss://") || (allow_ws && url.starts_with("ws://")))
        && url.len() <= rdv_proto::consts::RELAY_URL_MAX_LEN
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else if url.starts_with("ws://") {
        Err(Error::Input(format!(
            "{url}: ws:// relays are for local tests only (rdv init --allow-ws); use wss://"
        )))
    } else {
        Err(Error::Input(format!("{url}: not a wss:// relay URL")))
    }
}

/// The ntfy and MQTT topic of an agent's fallback carriers (§6.3: one
/// topic per agent): `rdv-` and its ID topic.
pub fn fallback_topic(id: &AgentId) -> String {
    format!("rdv-{}", idtopic(id))
}

fn check_http_url(url: &str) -> Result<()> {
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 256
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(Error::Input(format!("{url}: not an http(s) URL")))
    }
}

fn policy(s: &str) -> Result<Policy> {
    match s {
        "allow" => Ok(Policy::Allow),
        "block" => Ok(Policy::Block),
        "prompt" => Ok(Policy::Prompt),
        _ => Err(Error::Input(
            "inbound policy is allow, block or prompt".into(),
        )),
    }
}

impl Agent {
    pub(crate) fn command(&mut self, c: Command, ctx: &mut Ctx<'_>) -> Result<Value> {
        match c {
            Command::Init(s) => self.init(s, ctx),
            Command::Start => self.start(ctx),
            Command::AddAddress { address, public } => {
                let a = Address::parse(&address).map_err(|e| Error::Input(e.to_string()))?;
                let mut p = self.state.profile()?.clone();
                if p.addresses.iter().any(|x| x.address == a.canon()) {
                    return Err(Error::Input(format!("{} is already listed", a.canon())));
                }
                if p.addresses.len() >= 8 {
                    return Err(Error::Input("at most 8 addresses".into()));
                }
                p.addresses.push(OwnAddress {
                    address: a.canon().into(),
                    public,
                });
                p.removed_addresses.retain(|x| x != a.canon());
                self.change_profile(p, ctx)
            }
            Command::RemoveAddress { address } => {
                let a = Address::parse(&address).map_err(|e| Error::Input(e.to_string()))?;
                let mut p = self.state.profile()?.clone();
                let before = p.addresses.len();
                p.addresses.retain(|x| x.address != a.canon());
                if p.addresses.len() == before {
                    return Err(Error::NotFound(format!("{} is not listed", a.canon())));
                }
                p.removed_addresses.push(a.canon().into());
                self.change_profile(p, ctx)
            }
            Command::AddRelay { url } => {
                let mut p = self.state.profile()?.clone();
                check_relay(&url, p.allow_ws)?;
                if p.relays.contains(&url) {
                    return Err(Error::Input(format!("{url} is already a relay")));
                }
                if p.relays.len() >= rdv_proto::consts::CARD_MAX_RELAYS {
                    return Err(Error::Input("a card lists at most 16 relays".into()));
                }
                p.relays.push(url);
                self.change_profile(p, ctx)
            }
            Command::RemoveRelay { url } => {
                let mut p = self.state.profile()?.clone();
                if !p.relays.contains(&url) {
                    return Err(Error::NotFound(format!("{url} is not a relay")));
                }
                if p.relays.len() == 1 {
                    return Err(Error::Refused(
                        "the last relay cannot be removed: add another first".into(),
                    ));
                }
                p.relays.retain(|r| r != &url);
                self.change_profile(p, ctx)
            }
            Command::SetPolicy { inbound } => {
                policy(&inbound)?;
                let mut p = self.state.profile()?.clone();
                p.inbound = inbound;
                self.change_profile(p, ctx)
            }
            Command::SetFallbacks { ntfy, mqtt } => {
                let mut p = self.state.profile()?.clone();
                let topic = fallback_topic(self.id());
                // Only the fallbacks this sets; a mailbox's email entry stays.
                p.other_rendezvous.retain(|e| {
                    !matches!(e.get("type").and_then(Value::as_str), Some("ntfy" | "mqtt"))
                });
                if let Some(server) = ntfy {
                    check_http_url(&server)?;
                    p.other_rendezvous.push(json!({
                        "type": "ntfy", "server": server, "topic": topic, "pref": 2,
                    }));
                }
                if let Some(url) = mqtt {
                    if !url.starts_with("mqtt://") {
                        return Err(Error::Input(format!(
                            "{url}: an MQTT broker is mqtt://host:port"
                        )));
                    }
                    p.other_rendezvous.push(json!({
                        "type": "mqtt", "url": url, "topic": topic, "pref": 3,
                    }));
                }
                self.change_profile(p, ctx)
            }
            Command::PublishCard => {
                let topics = self.publish_pointers(ctx)?;
                Ok(json!({ "published": topics }))
            }
            Command::KeepCard { card, binding } => self.keep_card(card, binding, ctx),
            Command::Request {
                to,
                greeting,
                label,
            } => self.request(to, greeting, label, ctx),
            Command::Grant {
                request_id,
                tier,
                scope,
                label,
            } => {
                // §5.2.1: a mailbox probe is answered by a SYN-ACK; the
                // contact waits for the ACK.
                let by_mail = self.state.mail_in.contains_key(&request_id);
                let id = self.grant_pending(&request_id, &tier, scope, label, ctx)?;
                if by_mail {
                    return Ok(json!({
                        "requester": id, "fingerprint": id.fingerprint(), "tier": tier,
                        "via": "mailbox", "pending_ack": true,
                    }));
                }
                Ok(json!({ "contact": id, "fingerprint": id.fingerprint(), "tier": tier }))
            }
            Command::Confirm {
                request_id,
                grantor,
                label,
            } if self.state.mail_out.contains_key(&request_id) => {
                self.confirm_mail(&request_id, grantor, label, ctx)
            }
            Command::Confirm {
                request_id,
                grantor,
                label,
            } => self.confirm(&request_id, grantor, label, ctx),
            Command::Decline { request_id, block } => {
                let p =
                    self.state.pending.remove(&request_id).ok_or_else(|| {
                        Error::NotFound(format!("no pending request {request_id}"))
                    })?;
                self.state.touch(Table::Pending, request_id.clone());
                if block {
                    self.state.blocked.insert(p.from.clone());
                    self.state.touch(Table::Blocked, p.from.as_str());
                }
                // §5.4: declining sends nothing (silence is a privacy feature).
                Ok(json!({ "declined": request_id, "blocked": block }))
            }
            Command::Revoke { id } => {
                if self.state.contact(&id).is_none() {
                    return Err(Error::NotFound(format!("{id} is not a current contact")));
                }
                self.revoke_contact(&id, "owner", ctx)?;
                Ok(json!({ "revoked": id }))
            }
            Command::Block { id } => {
                if self.state.contact(&id).is_some() {
                    self.end_contact(&id, "blocked", None, ctx.unix());
                }
                let ids: Vec<String> = self
                    .state
                    .pending
                    .values()
                    .filter(|p| p.from == id)
                    .map(|p| p.request_id.clone())
                    .collect();
                for r in ids {
                    self.state.pending.remove(&r);
                    self.state.touch(Table::Pending, r);
                }
                self.state.blocked.insert(id.clone());
                self.state.touch(Table::Blocked, id.as_str());
                Ok(json!({ "blocked": id }))
            }
            Command::Unblock { id } => {
                if !self.state.blocked.remove(&id) {
                    return Err(Error::NotFound(format!("{id} is not blocked")));
                }
                self.state.touch(Table::Blocked, id.as_str());
                Ok(json!({ "unblocked": id }))
            }
            Command::Label { id, label } => {
                if let Some(l) = &label {
                    check_label(l)?;
                }
                let c = self
                    .state
                    .contacts
                    .get_mut(&id)
                    .filter(|c| c.status == ContactStatus::Active)
                    .ok_or_else(|| Error::NotFound(format!("{id} is not a current contact")))?;
                c.label = label.clone();
                self.state.touch(Table::Contact, id.as_str());
                Ok(json!({ "contact": id, "label": label }))
            }
            Command::Resync { id } => {
                if self.state.contact(&id).is_none() {
                    return Err(Error::NotFound(format!("{id} is not a current contact")));
                }
                let ch = self
                    .state
                    .channels_in
                    .get_mut(&id)
                    .ok_or_else(|| Error::NotFound(format!("no channel state for {id}")))?;
                let was_refused = ch.refused().is_some();
                ch.human_resync();
                self.state.touch(Table::ChannelIn, id.as_str());
                Ok(json!({ "resynced": id, "was_refused": was_refused }))
            }
            Command::Send { to, payload } => self.send(&to, payload, ctx),
            Command::Restored { backup_created } => self.restored(backup_created, ctx),
            Command::MailboxAdd {
                address,
                gateway,
                on_card,
            } => self.mailbox_add(&address, &gateway, on_card, ctx),
            Command::MailboxVerified {
                address,
                gateway_address,
            } => self.mailbox_verified(&address, gateway_address, ctx),
            Command::MailboxRemove { address } => self.mailbox_remove(&address, ctx),
            Command::MailProbe {
                address,
                greeting,
                label,
                from_mailbox,
            } => self.mail_probe(&address, greeting, label, from_mailbox, ctx),
            Command::Invite {
                address,
                source,
                note,
                from_mailbox,
            } => self.invite(&address, &source, note, from_mailbox, ctx),
            Command::InviteAnswer { id, accepted } => self.invite_answer(&id, accepted, ctx),
            Command::Task(c) => self.task_command(c, ctx),
            Command::Owner(c) => self.owner_command(c, ctx),
            Command::File(c) => self.file_command(c, ctx),
            Command::AcceptInvite {
                invite,
                card,
                greeting,
                label,
            } => self.accept_invite(&invite, &card, greeting, label, ctx),
            Command::SetSuggest { on } => self.set_suggest(on),
            Command::AddDirectory { url } => self.add_directory(&url),
            Command::RemoveDirectory { url } => self.remove_directory(&url),
            Command::ProposeMeeting(p) => self.propose_meeting(p, ctx),
            Command::ConfirmMeeting {
                task_id,
                peer,
                code,
            } => self.confirm_meeting(&task_id, peer.as_ref(), code.expose(), ctx),
            Command::CancelMeeting {
                task_id,
                peer,
                code,
                reason,
            } => self.cancel_meeting(
                &task_id,
                peer.as_ref(),
                code.as_ref().map(crate::owner::Secret::expose),
                reason.as_deref(),
                ctx,
            ),
            Command::SetMeetingCode {
                task_id,
                peer,
                digest,
                record,
            } => self.set_meeting_code(&task_id, peer.as_ref(), &digest, record),
            Command::ListMeetings => self.list_meetings(ctx),
            Command::SetCalendar { busy, sources } => self.set_calendar(busy, sources, ctx),
        }
    }

    fn init(&mut self, s: Setup, ctx: &mut Ctx<'_>) -> Result<Value> {
        if self.state.profile.is_some() {
            return Err(Error::AgentExists(self.id().to_string()));
        }
        policy(&s.inbound)?;
        if s.relays.is_empty() {
            return Err(Error::Input("at least one relay is needed".into()));
        }
        for r in &s.relays {
            check_relay(r, s.allow_ws)?;
        }
        let mut addresses: Vec<OwnAddress> = Vec::new();
        for (a, public) in &s.addresses {
            let a = Address::parse(a).map_err(|e| Error::Input(format!("{a}: {e}")))?;
            if !addresses.iter().any(|x| x.address == a.canon()) {
                addresses.push(OwnAddress {
                    address: a.canon().into(),
                    public: *public,
                });
            }
        }
        if addresses.len() > 8 {
            return Err(Error::Input("at most 8 addresses".into()));
        }
        let mut relays = Vec::new();
        for r in s.relays {
            if !relays.contains(&r) {
                relays.push(r);
            }
        }
        let mut p = Profile {
            addresses,
            relays,
            public_pointer: s.public_pointer,
            inbound: s.inbound,
            other_rendezvous: s.other_rendezvous,
            card: Value::Null,
            previous_relays: Vec::new(),
            removed_addresses: Vec::new(),
            allow_ws: s.allow_ws,
            directories: crate::directories::directory_list(&s.directories)?,
            suggest: s.suggest,
            created: ctx.now,
        };
        p.card = self.sign_card(&p, None, ctx)?;
        self.state.profile = Some(p);
        self.state.touch(Table::Profile, "profile");
        let published = if self.state.profile()?.public_pointer {
            self.publish_pointers(ctx)?
        } else {
            Vec::new()
        };
        self.effects.push(Effect::Resubscribe);
        Ok(json!({
            "id": self.id(),
            "fingerprint": self.id().fingerprint(),
            "card": self.state.profile()?.card,
            "published": published,
        }))
    }

    /// Signs a card for `p`, later than `prev` (and the clock) by at least
    /// a second (§4.3), with our capabilities.
    fn sign_card(&self, p: &Profile, prev: Option<&Value>, ctx: &Ctx<'_>) -> Result<Value> {
        let now = ctx.now.replace_nanosecond(0).unwrap_or(ctx.now);
        let created = match prev.and_then(|c| Card::parse_signed(c, true).ok()) {
            Some(c) if c.created >= now => c.created + time::Duration::seconds(1),
            _ => now,
        };
        let mut b = CardBuilder::new(created, p.relays.clone());
        b.capabilities = CAPABILITIES.iter().map(|s| s.to_string()).collect();
        b.addresses = p
            .addresses
            .iter()
            .filter(|a| a.public)
            .filter_map(|a| Address::parse(&a.address).ok())
            .collect();
        b.public_pointer = p.public_pointer;
        b.public = p.public_pointer;
        b.inbound = policy(&p.inbound)?;
        b.other_rendezvous = p.other_rendezvous.clone();
        Ok(b.sign(self.key())?)
    }

    /// §4.3: every change re-signs the card, republishes the pointer (kept,
    /// added and removed addresses, and the ID topic) and sends the new card
    /// to every contact.
    pub(crate) fn change_profile(&mut self, mut p: Profile, ctx: &mut Ctx<'_>) -> Result<Value> {
        let old = self.state.profile()?.clone();
        for r in &old.relays {
            if !p.relays.contains(r) && !p.previous_relays.contains(r) {
                p.previous_relays.push(r.clone());
            }
        }
        p.previous_relays.retain(|r| !p.relays.contains(r));
        p.card = self.sign_card(&p, Some(&old.card), ctx)?;
        self.state.profile = Some(p);
        self.state.touch(Table::Profile, "profile");
        let published = if self.state.profile()?.public_pointer {
            self.publish_pointers(ctx)?
        } else {
            Vec::new()
        };
        let sent = self.send_card_to_contacts(ctx, true)?;
        self.effects.push(Effect::Resubscribe);
        Ok(json!({
            "card": self.state.profile()?.card,
            "published": published,
            "card_sent_to": sent,
        }))
    }

    /// Publishes the card on each public address's topic, each removed
    /// address's topic, and the ID topic (§4.4, §6.2).
    pub(crate) fn publish_pointers(&mut self, ctx: &mut Ctx<'_>) -> Result<Vec<String>> {
        let p = self.state.profile()?.clone();
        if !p.public_pointer {
            return Err(Error::Refused(
                "the public pointer is off (rdv init --public-pointer turns it on)".into(),
            ));
        }
        let mut topics = Vec::new();
        for a in p.addresses.iter().filter(|a| a.public) {
            if let Ok(addr) = Address::parse(&a.address) {
                topics.push(addr.dtopic());
            }
        }
        for a in &p.removed_addresses {
            if let Ok(addr) = Address::parse(a) {
                topics.push(addr.dtopic());
            }
        }
        topics.push(idtopic(self.id()));
        let routes = self.own_routes()?;
        for t in &topics {
            self.queue(
                Carry::Card { topic: t.clone() },
                p.card.clone(),
                routes.clone(),
                ctx,
            )?;
            // §4.4 item 1, §6.3: the same topic on our ntfy and MQTT hint
            // servers, each its own delivery (they are not fallbacks of
            // one another: the pointer belongs on every one).
            for r in self.hint_routes(t)? {
                self.queue(
                    Carry::Card { topic: t.clone() },
                    p.card.clone(),
                    vec![r],
                    ctx,
                )?;
            }
        }
        Ok(topics)
    }

    /// The ntfy servers and MQTT brokers our card lists (§6.3), each as a
    /// route to `topic`: where our pointers and probes go besides our
    /// relays, and where discovery looks (§4.4 item 1: one topic namespace
    /// on all three carriers).
    pub fn hint_routes(&self, topic: &str) -> Result<Vec<crate::state::Route>> {
        use crate::state::Route;
        let p = self.state.profile()?;
        let mut out: Vec<Route> = Vec::new();
        for e in &p.other_rendezvous {
            let r = match crate::agent::route_of(e) {
                Some(Route::Ntfy { server, .. }) => Route::Ntfy {
                    server,
                    topic: topic.to_string(),
                },
                Some(Route::Mqtt { url, .. }) => Route::Mqtt {
                    url,
                    topic: topic.to_string(),
                },
                _ => continue,
            };
            if !out.contains(&r) {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Sends our current card to contacts (`all`) or to those that lack it.
    fn send_card_to_contacts(&mut self, ctx: &mut Ctx<'_>, all: bool) -> Result<Vec<AgentId>> {
        let p = self.state.profile()?.clone();
        let hash = rdv_proto::sign::hash(&p.card)?;
        let ids: Vec<AgentId> = self
            .state
            .contacts
            .values()
            .filter(|c| c.status == ContactStatus::Active)
            .filter(|c| all || c.card_sent.as_deref() != Some(hash.as_str()))
            .map(|c| c.id.clone())
            .collect();
        let payload = rdv_proto::doc::card_update::card_update_payload(&p.card);
        let mut extra = p.relays.clone();
        extra.extend(p.previous_relays.iter().cloned());
        for id in &ids {
            let card = self.state.contacts[id].card.clone();
            let routes = self.routes_for_card(&card, &extra);
            self.send_payload(id, &payload, routes, ctx)?;
            if let Some(c) = self.state.contacts.get_mut(id) {
                c.card_sent = Some(hash.clone());
            }
            self.state.touch(Table::Contact, id.as_str());
        }
        Ok(ids)
    }

    /// §4.3 issue #43 and #45: at start, a card without a capability this
    /// software supports is re-signed; contacts without our card get it.
    fn start(&mut self, ctx: &mut Ctx<'_>) -> Result<Value> {
        let p = self.state.profile()?.clone();
        let card = Card::parse_signed(&p.card, true)?;
        let refreshed = CAPABILITIES.iter().any(|c| !card.has_capability(c));
        if refreshed {
            self.change_profile(p, ctx)?;
        } else {
            self.send_card_to_contacts(ctx, false)?;
        }
        Ok(json!({ "refreshed_card": refreshed }))
    }

    /// Keeps a card found or handed over (§4.4), and what the find shows of
    /// its key: a stronger binding upgrades the contact, pending request or
    /// kept card of that key (never a weaker one, never another key).
    fn keep_card(&mut self, card: Value, binding: Binding, ctx: &mut Ctx<'_>) -> Result<Value> {
        let allow_ws = self.state.profile()?.allow_ws;
        let c = Card::verify(&card, ctx.now, allow_ws)?;
        if &c.id == self.id() {
            return Err(Error::Input("that is this agent's own card".into()));
        }
        let upgraded = self.upgrade_binding(&c.id, binding);
        let held_binding = match self.state.known_cards.get(&c.id) {
            Some(held) => {
                if let Ok(h) = Card::parse_signed(&held.card, true)
                    && h.created >= c.created
                {
                    // §4.3: keep only the newest card of an agent.
                    return Ok(json!({
                        "id": c.id, "kept": false, "reason": "an equal or newer card is held",
                        "upgraded": upgraded,
                    }));
                }
                Some(held.binding)
            }
            None => None,
        };
        // A newer card of the key keeps the binding the key already has.
        let binding = match held_binding {
            Some(b) if crate::contact::binding_rank(b) > crate::contact::binding_rank(binding) => b,
            _ => binding,
        };
        self.state.known_cards.insert(
            c.id.clone(),
            KnownCard {
                card: c.doc.clone(),
                binding,
                found: ctx.now,
            },
        );
        self.state.touch(Table::KnownCard, c.id.as_str());
        Ok(json!({
            "id": c.id, "fingerprint": c.id.fingerprint(), "kept": true,
            "binding": binding.as_str(), "upgraded": upgraded,
        }))
    }

    fn request(
        &mut self,
        to: RequestTo,
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
            check_label(l)?;
        }
        let p = self.state.profile()?.clone();
        let id = ctx.uuid();
        match to {
            RequestTo::Card(card) => {
                let c = Card::verify(&card, ctx.now, p.allow_ws)?;
                if &c.id == self.id() {
                    return Err(Error::Input("that is this agent's own card".into()));
                }
                if self.state.contact(&c.id).is_some() {
                    return Err(Error::Refused(format!("{} is already a contact", c.id)));
                }
                let binding = self
                    .state
                    .known_cards
                    .get(&c.id)
                    .map_or(Binding::Card, |k| k.binding);
                let doc = self.open_request(
                    &id,
                    OurRequest {
                        target: Target::Agent(c.id.clone()),
                        to_hint: None,
                        label,
                        greeting,
                        binding,
                    },
                    ctx,
                )?;
                // §6.4: an agent we asked by card gets channel state.
                self.state.channels_in.admit(c.id.clone(), None);
                self.state.touch(Table::ChannelIn, c.id.as_str());
                let routes = self.routes_for_card(&c.doc, &[]);
                let seq = self.send_payload(&c.id, &doc, routes, ctx)?;
                Ok(json!({
                    "request_id": id, "kind": "card", "to": c.id,
                    "fingerprint": c.id.fingerprint(), "seq": seq,
                }))
            }
            RequestTo::Address(a) => {
                let addr = Address::parse(&a).map_err(|e| Error::Input(format!("{a}: {e}")))?;
                let canon = addr.canon().to_string();
                // §5.2.1: at most one probe per address per 30 days.
                if let Some(last) = self.state.probe_log.get(&canon)
                    && ctx.unix() - last < rdv_proto::consts::PROBE_PER_ADDRESS_INTERVAL_SECS
                {
                    let next = rdv_proto::time::from_unix(
                        last + rdv_proto::consts::PROBE_PER_ADDRESS_INTERVAL_SECS,
                    )?;
                    return Err(Error::Refused(format!(
                        "{canon} was probed less than 30 days ago; next probe allowed after {}",
                        format_time(next)
                    )));
                }
                let doc = self.open_request(
                    &id,
                    OurRequest {
                        target: Target::Address(canon.clone()),
                        to_hint: Some(canon.clone()),
                        label,
                        greeting,
                        binding: Binding::Claimed,
                    },
                    ctx,
                )?;
                self.state.probe_log.insert(canon.clone(), ctx.unix());
                self.state.touch(Table::ProbeLog, canon.clone());
                let topic = addr.dtopic();
                let routes = self.own_routes()?;
                // §4.4 item 1: the probe goes on the dtopic of every hint
                // server we use: our relays, and our ntfy and MQTT servers.
                for r in self.hint_routes(&topic)? {
                    self.queue(
                        Carry::Probe {
                            topic: topic.clone(),
                        },
                        doc.clone(),
                        vec![r],
                        ctx,
                    )?;
                }
                self.queue(
                    Carry::Probe {
                        topic: topic.clone(),
                    },
                    doc,
                    routes,
                    ctx,
                )?;
                Ok(json!({
                    "request_id": id, "kind": "topic-probe", "address": canon, "topic": topic,
                }))
            }
        }
    }

    /// §5.3, §5.5: the owner grants a pending request.
    pub(crate) fn grant_pending(
        &mut self,
        request_id: &str,
        tier: &str,
        scope: Value,
        label: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<AgentId> {
        check_tier(tier)?;
        if let Some(l) = &label {
            check_label(l)?;
        }
        rdv_proto::doc::grant::Scope::parse(&scope, "scope")?;
        if let Some(id) = self.grant_by_mail(request_id, tier, &scope, label.clone(), ctx)? {
            return Ok(id);
        }
        let pending = self
            .state
            .pending
            .get(request_id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no pending request {request_id}")))?;
        let p = self.state.profile()?.clone();
        let req = ContactRequest::verify(&pending.request, ctx.now, p.allow_ws)
            .map_err(|e| Error::Refused(format!("the request no longer verifies: {e}")))?;
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
        let from = req.from.clone();
        self.add_contact(
            NewContact {
                id: from.clone(),
                card: req.card.doc.clone(),
                label,
                binding: pending.binding,
                founding: Founding::ByUs(HeldGrant {
                    id: grant_id,
                    tier: tier.to_string(),
                    scope,
                    ts: ctx.now,
                    expires: None,
                }),
                // Our card goes with the grant (§4.3).
                card_sent: Some(rdv_proto::sign::hash(&p.card)?),
                how: "granted".into(),
            },
            ctx,
        );
        self.state.pending.remove(request_id);
        self.state.touch(Table::Pending, request_id);
        self.state.channels_in.admit(from.clone(), None);
        self.state.touch(Table::ChannelIn, from.as_str());
        let routes = self.routes_for_card(&req.card.doc, &[]);
        self.send_payload(&from, &doc, routes, ctx)?;
        Ok(from)
    }

    /// §5.3: the owner confirms one answer to a probe: it becomes a contact
    /// with binding claimed.
    fn confirm(
        &mut self,
        request_id: &str,
        grantor: Option<AgentId>,
        label: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        if let Some(l) = &label {
            check_label(l)?;
        }
        let out = self
            .state
            .outgoing
            .get(request_id)
            .cloned()
            .filter(|o| !o.closed)
            .ok_or_else(|| Error::NotFound(format!("no open probe {request_id}")))?;
        let cand = match &grantor {
            Some(g) => out.candidates.iter().find(|c| &c.grantor == g),
            None if out.candidates.len() == 1 => out.candidates.first(),
            None if out.candidates.is_empty() => None,
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
        let label = label.or(out.label.clone()).or(match &out.target {
            Target::Address(a) => Some(a.clone()),
            Target::Agent(_) => None,
        });
        self.make_contact_from_grant(&g, Binding::Claimed, label, "confirmed", ctx);
        // §6.4: its chain starts at the envelope that carried the answer.
        self.state
            .channels_in
            .admit(g.from.clone(), Some(&cand.anchor));
        self.state.touch(Table::ChannelIn, g.from.as_str());
        if let Some(o) = self.state.outgoing.get_mut(request_id) {
            o.closed = true;
        }
        self.state.touch(Table::Outgoing, request_id);
        Ok(json!({ "contact": g.from, "fingerprint": g.from.fingerprint(), "binding": "claimed" }))
    }

    /// Ends a contact and tells the peer (§5.4).
    pub(crate) fn revoke_contact(
        &mut self,
        id: &AgentId,
        by: &str,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        self.revoke_contact_for(id, by, None, ctx)
    }

    /// [`Self::revoke_contact`], with the reason kept in the contact and
    /// told in the `revoked` event (§5.3: a revoke under (b) told apart).
    pub(crate) fn revoke_contact_for(
        &mut self,
        id: &AgentId,
        by: &str,
        reason: Option<String>,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let doc = Revoke::build(&ctx.uuid(), id, ctx.now, self.key())?;
        let routes = self.contact_routes(id);
        self.send_payload(id, &doc, routes, ctx)?;
        self.end_contact(id, by, reason.clone(), ctx.unix());
        self.tell(crate::event::Event::Revoked {
            id: id.clone(),
            by: by.into(),
            reason,
        });
        Ok(())
    }

    /// A free message to a contact (§5.3: needs may_initiate).
    fn send(&mut self, to: &AgentId, payload: Value, ctx: &mut Ctx<'_>) -> Result<Value> {
        let c = self
            .state
            .contact(to)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("{to} is not a current contact")))?;
        let ty = payload.get("type").and_then(Value::as_str).ok_or_else(|| {
            Error::Input("the payload must be a JSON object with a \"type\"".into())
        })?;
        if !crate::inbound::is_payload_type(ty) {
            return Err(Error::Input(
                "type must match [a-z0-9][a-z0-9._/-]{0,63}".into(),
            ));
        }
        if ty.starts_with("rdv/") || ty.starts_with("a2a/") {
            return Err(Error::Input(
                "rdv/* and a2a/* payloads are the protocol's own; send another type".into(),
            ));
        }
        // Senders check their own grant first (§5.3).
        if let Some(g) = &c.granted_to_us
            && g.scope.get("may_initiate").and_then(Value::as_bool) == Some(false)
        {
            return Err(Error::Refused(format!(
                "{to}'s grant does not let this agent write first"
            )));
        }
        let routes = self.routes_for_card(&c.card, &[]);
        let seq = self.send_payload(to, &payload, routes, ctx)?;
        Ok(json!({ "to": to, "fingerprint": to.fingerprint(), "seq": seq }))
    }
}
