//! The agent: one [`Input`] in, one [`Output`] out.
//!
//! The runtime commits `Output::writes` and `Output::events` in one
//! transaction, then carries out `Output::effects` (§7 persistence: state
//! before send). Nothing here reads a clock or a socket: [`Ctx`] brings the
//! time and the randomness.

use rdv_proto::consts::{EXT_MEETING_CANCEL, EXT_MEETINGS};
use rdv_proto::envelope::{self, SealParams};
use rdv_proto::time::Instant;
use rdv_proto::{AgentId, AgentKey};
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::event::Event;
use crate::record::{Table, Write};
use crate::state::{Carry, Delivery, Route, State};

/// The time and randomness one input may use.
pub struct Ctx<'a> {
    pub now: Instant,
    pub rng: &'a mut dyn rand_core::CryptoRngCore,
}

impl Ctx<'_> {
    pub fn uuid(&mut self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        uuid::Builder::from_random_bytes(b)
            .into_uuid()
            .hyphenated()
            .to_string()
    }

    pub fn bytes32(&mut self) -> [u8; 32] {
        let mut b = [0u8; 32];
        self.rng.fill_bytes(&mut b);
        b
    }

    pub fn unix(&self) -> i64 {
        self.now.unix_timestamp()
    }
}

/// Capabilities this software supports, listed on the card (§4.3, §7.5).
pub const CAPABILITIES: [&str; 8] = [
    rdv_proto::consts::CAP_RDV_V1,
    rdv_proto::consts::CAP_A2A_03,
    EXT_MEETINGS,
    EXT_MEETING_CANCEL,
    // §7.6: the tasks lifecycle and the capabilities it implements
    // (request/v1, and the review example of design A.9).
    rdv_proto::consts::EXT_TASKS,
    rdv_proto::consts::EXT_REQUEST,
    crate::task::EXT_REVIEW,
    // §7.7: file parts in tasks and artifacts.
    rdv_proto::consts::EXT_FILES,
];

/// Local default for a peer our owner has not granted (§5.3 direction).
pub const LOCAL_DEFAULT_MAX_FREQUENCY: &str = "50/day";

/// How a relay answered one publish (§6.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum PublishOutcome {
    Accepted,
    /// `kind`: blocked, rate-limited, restricted, duplicate, invalid, other.
    /// `message` is the relay's own text: untrusted.
    Refused {
        kind: String,
        message: String,
    },
    Unreachable {
        reason: String,
    },
}

/// One input to the agent.
#[derive(Debug, Clone)]
pub enum Input {
    /// Something the owner asked for.
    Command(crate::command::Command),
    /// A Nostr event from a relay, as raw JSON (attacker-controlled).
    Nostr { relay: String, json: Vec<u8> },
    /// An envelope from another carrier (ntfy, MQTT), as raw JSON.
    Envelope { carrier: String, bytes: Vec<u8> },
    /// A message on one of our listen topics (§4.4 dtopic) from an ntfy
    /// server or an MQTT broker, as raw bytes (attacker-controlled).
    Topic {
        carrier: String,
        topic: String,
        bytes: Vec<u8>,
    },
    /// What the relays said about a publish we asked for.
    Published {
        delivery: String,
        outcomes: Vec<(String, PublishOutcome)>,
    },
    /// What a non-Nostr carrier said about a delivery.
    Carried {
        delivery: String,
        ok: bool,
        reason: String,
    },
    /// Time passed: retry what is due.
    Tick,
    /// The listener starts: make every delivery still under way again
    /// (a crash left them behind).
    Resume,
    /// A probe gateway's inbox item or answer (§5.2.1, §5.2.2).
    Gateway(crate::mailbox::GatewayInput),
}

impl Input {
    /// What a carrier said about a delivery (§6.2). Handling one allocates
    /// no seq and records no outbox entry (a retry resends one already
    /// committed, §7), so losing its commit to a power loss only makes the
    /// delivery go again: the store may commit it without an fsync.
    pub fn is_outcome(&self) -> bool {
        matches!(self, Input::Published { .. } | Input::Carried { .. })
    }
}

/// What the runtime does after the commit.
#[derive(Debug, Clone)]
pub enum Effect {
    /// Publish this signed Nostr event to these relays, then report
    /// [`Input::Published`].
    PublishNostr {
        delivery: String,
        event: Box<nostr::event::Event>,
        relays: Vec<String>,
    },
    /// Publish this body on an ntfy topic, then report [`Input::Carried`].
    PublishNtfy {
        delivery: String,
        server: String,
        topic: String,
        body: String,
    },
    /// Publish this body on an MQTT topic, then report [`Input::Carried`].
    /// `retain`: a public-pointer card, kept by the broker for later
    /// subscribers as a relay keeps the newest replaceable event (§4.4).
    PublishMqtt {
        delivery: String,
        url: String,
        topic: String,
        body: String,
        retain: bool,
    },
    /// Relays, topics or policy changed: subscribe again.
    Resubscribe,
    /// Call a probe gateway, then report [`Input::Gateway`] (§5.2.1, §5.2.2).
    Gateway(crate::mailbox::GatewayCall),
}

/// The result of one input.
#[derive(Debug, Default)]
pub struct Output {
    pub writes: Vec<Write>,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
    /// The command's answer (none for carrier inputs).
    pub reply: Option<Value>,
}

/// What to subscribe to (§6.2, §4.4 listen mode, §6.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Subscriptions {
    pub relays: Vec<String>,
    /// Our Ed25519 key as hex: the `#p` of envelopes to us.
    pub p: String,
    /// The dtopics of our listed addresses (§4.4 listen mode).
    pub topics: Vec<String>,
    /// ntfy (server, topic) pairs from our card.
    pub ntfy: Vec<(String, String)>,
    /// MQTT (url, topic) pairs from our card.
    pub mqtt: Vec<(String, String)>,
}

/// The agent's rules over its state.
pub struct Agent {
    key: AgentKey,
    pub state: State,
    pub(crate) events: Vec<Event>,
    pub(crate) effects: Vec<Effect>,
}

impl Agent {
    pub fn new(key: AgentKey, state: State) -> Agent {
        Agent {
            key,
            state,
            events: Vec::new(),
            effects: Vec::new(),
        }
    }

    pub fn id(&self) -> &AgentId {
        self.key.id()
    }

    pub(crate) fn key(&self) -> &AgentKey {
        &self.key
    }

    /// Feeds one input. On an error nothing of it is kept: the caller drops
    /// the agent's state and reloads it from the store.
    pub fn handle(&mut self, input: Input, ctx: &mut Ctx<'_>) -> Result<Output> {
        match self.handle_inner(input, ctx) {
            Ok(o) => Ok(o),
            Err(e) => {
                // Nothing of a failed input leaves: its events and effects
                // go with it (the caller reloads the state).
                self.events.clear();
                self.effects.clear();
                Err(e)
            }
        }
    }

    fn handle_inner(&mut self, input: Input, ctx: &mut Ctx<'_>) -> Result<Output> {
        let outcome = input.is_outcome();
        let reply = match input {
            Input::Command(c) => Some(self.command(c, ctx)?),
            Input::Nostr { relay, json } => {
                self.on_nostr(&relay, &json, ctx)?;
                None
            }
            Input::Envelope { carrier, bytes } => {
                self.on_envelope_bytes(&carrier, &bytes, ctx)?;
                None
            }
            Input::Topic {
                carrier,
                topic,
                bytes,
            } => {
                self.on_topic_bytes(&carrier, &topic, &bytes, ctx)?;
                None
            }
            Input::Published { delivery, outcomes } => {
                self.on_published(&delivery, &outcomes, ctx)?;
                None
            }
            Input::Carried {
                delivery,
                ok,
                reason,
            } => {
                self.on_carried(&delivery, ok, &reason, ctx)?;
                None
            }
            Input::Tick => {
                self.tick(ctx)?;
                None
            }
            Input::Resume => {
                let ids: Vec<String> = self.state.deliveries.keys().cloned().collect();
                for id in ids {
                    self.attempt(&id, ctx)?;
                }
                None
            }
            Input::Gateway(g) => {
                self.on_gateway(g, ctx)?;
                None
            }
        };
        let writes = self.state.take_writes()?;
        // An outcome commits without an fsync (`Input::is_outcome`): it may
        // not carry what §7 needs durable before anything leaves.
        if outcome
            && writes
                .iter()
                .any(|w| matches!(w.table, Table::ChannelOut | Table::Outbox))
        {
            return Err(Error::Store(
                "a delivery's outcome changed a channel's seq or outbox".into(),
            ));
        }
        Ok(Output {
            writes,
            events: std::mem::take(&mut self.events),
            effects: std::mem::take(&mut self.effects),
            reply,
        })
    }

    pub(crate) fn tell(&mut self, e: Event) {
        self.events.push(e);
    }

    /// What the runtime subscribes to.
    pub fn subscriptions(&self) -> Result<Subscriptions> {
        let p = self.state.profile()?;
        let topics = p
            .addresses
            .iter()
            .filter(|a| a.public)
            .filter_map(|a| rdv_proto::Address::parse(&a.address).ok())
            .map(|a| a.dtopic())
            .collect();
        let mut ntfy = Vec::new();
        let mut mqtt = Vec::new();
        for r in &p.other_rendezvous {
            match route_of(r) {
                Some(Route::Ntfy { server, topic }) => ntfy.push((server, topic)),
                Some(Route::Mqtt { url, topic }) => mqtt.push((url, topic)),
                _ => {}
            }
        }
        Ok(Subscriptions {
            relays: p.relays.clone(),
            p: hex::encode(self.id().key_bytes()),
            topics,
            ntfy,
            mqtt,
        })
    }

    // ---- deliveries -------------------------------------------------------

    /// Seals `payload` to `to` on the next seq of that channel, records it
    /// in the outbox and queues its delivery over `routes` (§6.4, §7).
    pub(crate) fn send_payload(
        &mut self,
        to: &AgentId,
        payload: &Value,
        routes: Vec<Route>,
        ctx: &mut Ctx<'_>,
    ) -> Result<u64> {
        let out = self.state.channels_out.entry(to.clone()).or_default();
        let (seq, prev) = out.next();
        let prev = prev.map(str::to_string);
        let created = out.next_created(ctx.now);
        let params = SealParams::new(&self.key, to, seq, prev.as_deref(), created, ctx.rng);
        let env = envelope::seal(payload, &params)?;
        let header = sealed_header(self.key.id(), to, seq, prev, &env)?;
        let out = self.state.channels_out.entry(to.clone()).or_default();
        out.record(&header, env.clone());
        // The head and the new outbox entry (and the deletion of the one it
        // pushed out) commit before the envelope leaves (§7).
        self.state.touch(Table::ChannelOut, to.as_str());
        self.queue(
            Carry::Envelope {
                to: to.clone(),
                seq,
            },
            env,
            routes,
            ctx,
        )?;
        Ok(seq)
    }

    /// Queues one document for delivery and makes its first attempt.
    pub(crate) fn queue(
        &mut self,
        carry: Carry,
        doc: Value,
        routes: Vec<Route>,
        ctx: &mut Ctx<'_>,
    ) -> Result<String> {
        let id = ctx.uuid();
        let d = Delivery {
            id: id.clone(),
            carry,
            doc,
            routes,
            route: 0,
            attempts: 0,
            next_at: ctx.now,
            last_created_at: 0,
            created: ctx.now,
            in_flight: false,
        };
        self.state.deliveries.insert(id.clone(), d);
        self.attempt(&id, ctx)?;
        Ok(id)
    }

    /// The routes to a contact or a card: its rendezvous list in preference
    /// order (§6.1), Nostr relays first among equals; `extra` relays are
    /// added to the Nostr route (a card-update also goes to our own relays,
    /// old and new, §4.3).
    pub(crate) fn routes_for_card(&self, card: &Value, extra: &[String]) -> Vec<Route> {
        let mut entries: Vec<(i64, Route)> = Vec::new();
        let mut relays: Vec<String> = Vec::new();
        let mut nostr_pref = i64::MAX;
        for e in card
            .get("rendezvous")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let pref = e.get("pref").and_then(Value::as_i64).unwrap_or(i64::MAX);
            if pref == 0 {
                continue; // §4.3: lookup hints, not delivery addresses
            }
            match route_of(e) {
                Some(Route::Nostr { relays: r }) => {
                    nostr_pref = nostr_pref.min(pref);
                    for x in r {
                        if !relays.contains(&x) {
                            relays.push(x);
                        }
                    }
                }
                Some(r) => entries.push((pref, r)),
                None => {}
            }
        }
        for x in extra {
            if !relays.contains(x) {
                relays.push(x.clone());
            }
        }
        if !relays.is_empty() {
            entries.push((nostr_pref.min(i64::MAX - 1), Route::Nostr { relays }));
        }
        entries.sort_by_key(|(p, r)| (*p, !matches!(r, Route::Nostr { .. })));
        entries.into_iter().map(|(_, r)| r).collect()
    }

    /// Our own relays, as one route (probes and public pointers go there).
    pub(crate) fn own_routes(&self) -> Result<Vec<Route>> {
        Ok(vec![Route::Nostr {
            relays: self.state.profile()?.relays.clone(),
        }])
    }

    /// Makes one attempt of a delivery on its current route.
    pub(crate) fn attempt(&mut self, id: &str, ctx: &mut Ctx<'_>) -> Result<()> {
        let Some(mut d) = self.state.deliveries.get(id).cloned() else {
            return Ok(());
        };
        let Some(route) = d.routes.get(d.route).cloned() else {
            self.give_up(&d, "no carrier left to try");
            return Ok(());
        };
        d.attempts += 1;
        d.in_flight = true;
        d.next_at = ctx.now + time::Duration::seconds(backoff_secs(d.attempts));
        match route {
            Route::Nostr { relays } => {
                let relays = self.usable_relays(&relays, ctx.now);
                // §6.2: a retry republishes with a later created_at, or relays
                // drop it as a duplicate of the same d.
                let mut created_at = (ctx.unix().max(0) as u64).max(d.last_created_at + 1);
                let carrier = self.key.nostr_keys()?;
                let aux = ctx.bytes32();
                let event = match &d.carry {
                    Carry::Envelope { .. } => {
                        rdv_proto::nostr_event::envelope_event(&d.doc, &carrier, created_at, aux)?
                    }
                    Carry::Card { topic } => {
                        // §6.2: never earlier than the card's created.
                        let card_created = d
                            .doc
                            .get("created")
                            .and_then(Value::as_str)
                            .and_then(|s| rdv_proto::time::parse_time("created", s).ok())
                            .map_or(0, |t| t.unix_timestamp().max(0) as u64);
                        created_at = created_at.max(card_created);
                        rdv_proto::nostr_event::card_event(
                            &d.doc, topic, &carrier, created_at, aux,
                        )?
                    }
                    Carry::Probe { topic } => rdv_proto::nostr_event::probe_event(
                        &d.doc, topic, &carrier, created_at, aux,
                    )?,
                };
                d.last_created_at = created_at;
                self.effects.push(Effect::PublishNostr {
                    delivery: d.id.clone(),
                    event: Box::new(event),
                    relays,
                });
            }
            Route::Ntfy { server, topic } => {
                self.effects.push(Effect::PublishNtfy {
                    delivery: d.id.clone(),
                    server,
                    topic,
                    body: rdv_proto::canon::to_string(&d.doc)?,
                });
            }
            Route::Mqtt { url, topic } => {
                self.effects.push(Effect::PublishMqtt {
                    delivery: d.id.clone(),
                    url,
                    topic,
                    body: rdv_proto::canon::to_string(&d.doc)?,
                    retain: matches!(d.carry, Carry::Card { .. }),
                });
            }
        }
        self.state.touch(Table::Delivery, d.id.clone());
        self.state.deliveries.insert(d.id.clone(), d);
        Ok(())
    }

    /// Relays not cooling down; all of them if every one is (§6.2).
    fn usable_relays(&self, relays: &[String], now: Instant) -> Vec<String> {
        let ok: Vec<String> = relays
            .iter()
            .filter(|r| {
                self.state
                    .relay_health
                    .get(*r)
                    .and_then(|h| h.cooldown_until)
                    .is_none_or(|u| u <= now)
            })
            .cloned()
            .collect();
        if ok.is_empty() { relays.to_vec() } else { ok }
    }

    fn give_up(&mut self, d: &Delivery, reason: &str) {
        self.state.deliveries.remove(&d.id);
        self.state.touch(Table::Delivery, d.id.clone());
        let to = match &d.carry {
            Carry::Envelope { to, .. } => Some(to.clone()),
            _ => None,
        };
        self.tell(Event::DeliveryFailed {
            delivery: d.id.clone(),
            to,
            reason: reason.to_string(),
        });
    }

    fn on_published(
        &mut self,
        id: &str,
        outcomes: &[(String, PublishOutcome)],
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let mut accepted = false;
        for (relay, o) in outcomes {
            let h = self.state.relay_health.entry(relay.clone()).or_default();
            match o {
                // A relay that holds it already took it (NIP-01 "duplicate:").
                PublishOutcome::Accepted => {
                    accepted = true;
                    h.last_ok = Some(ctx.now);
                    h.failures = 0;
                    h.cooldown_until = None;
                }
                PublishOutcome::Refused { kind, .. } if kind == "duplicate" => {
                    accepted = true;
                    h.last_ok = Some(ctx.now);
                }
                PublishOutcome::Refused { kind, message } => {
                    h.last_error_at = Some(ctx.now);
                    h.last_error_kind = Some(kind.clone());
                    h.last_error_message = Some(crate::peer_text::bounded(message, 300));
                    h.failures += 1;
                    // §6.2: stop publishing to a relay that answers blocked,
                    // restricted or rate-limited, for a while.
                    if matches!(kind.as_str(), "blocked" | "rate-limited" | "restricted") {
                        h.cooldown_until = Some(ctx.now + time::Duration::minutes(10));
                        let message = crate::peer_text::UntrustedPeerText::new(message);
                        self.events.push(Event::RelayRefused {
                            relay: relay.clone(),
                            refusal: kind.clone(),
                            message,
                        });
                    }
                }
                PublishOutcome::Unreachable { reason } => {
                    h.last_error_at = Some(ctx.now);
                    h.last_error_kind = Some("unreachable".into());
                    h.last_error_message = Some(crate::peer_text::bounded(reason, 300));
                    h.failures += 1;
                }
            }
            self.state.touch(Table::RelayHealth, relay.clone());
        }
        if accepted {
            self.delivered(id);
            Ok(())
        } else {
            self.failed_attempt(id, ctx)
        }
    }

    fn on_carried(&mut self, id: &str, ok: bool, _reason: &str, ctx: &mut Ctx<'_>) -> Result<()> {
        if ok {
            self.delivered(id);
            Ok(())
        } else {
            self.failed_attempt(id, ctx)
        }
    }

    fn delivered(&mut self, id: &str) {
        if self.state.deliveries.remove(id).is_some() {
            self.state.touch(Table::Delivery, id);
        }
    }

    /// No carrier took it this time: retry with backoff, then heal to the
    /// next carrier of the card (§6.1); when every carrier failed, start
    /// over after a while, until the document's lifetime is over.
    fn failed_attempt(&mut self, id: &str, ctx: &mut Ctx<'_>) -> Result<()> {
        self.state.touch(Table::Delivery, id);
        let Some(d) = self.state.deliveries.get_mut(id) else {
            return Ok(());
        };
        d.in_flight = false;
        if d.attempts < MAX_ATTEMPTS_PER_ROUTE {
            return Ok(());
        }
        d.route += 1;
        d.attempts = 0;
        if d.route < d.routes.len() {
            d.next_at = ctx.now;
            return self.attempt(id, ctx);
        }
        d.route = 0;
        d.next_at = ctx.now + time::Duration::seconds(ROUND_PAUSE_SECS);
        if ctx.now - d.created >= time::Duration::seconds(DELIVERY_LIFETIME_SECS) {
            let d = d.clone();
            self.give_up(&d, "no carrier took it within its lifetime");
        }
        Ok(())
    }

    /// Forgets what has outlived its purpose: seen ids past every document
    /// lifetime (§5.4), probe records past the 30-day limit (§5.2.1),
    /// answered or withdrawn requests and unanswered probes after 30 days,
    /// and kept cards past [`MAX_KNOWN_CARDS`] (oldest first).
    fn prune(&mut self, ctx: &Ctx<'_>) {
        let now = ctx.unix();
        let old_seen: Vec<String> = self
            .state
            .seen
            .iter()
            .filter(|(_, t)| now - **t > crate::inbound::SEEN_RETENTION_SECS)
            .map(|(k, _)| k.clone())
            .collect();
        for k in old_seen {
            self.state.seen.remove(&k);
            self.state.touch(Table::Seen, k);
        }
        let old_probes: Vec<String> = self
            .state
            .probe_log
            .iter()
            .filter(|(_, t)| now - **t > rdv_proto::consts::PROBE_PER_ADDRESS_INTERVAL_SECS)
            .map(|(k, _)| k.clone())
            .collect();
        for k in old_probes {
            self.state.probe_log.remove(&k);
            self.state.touch(Table::ProbeLog, k);
        }
        let month = time::Duration::days(30);
        let old_out: Vec<String> = self
            .state
            .outgoing
            .values()
            .filter(|o| ctx.now - o.created > month)
            .map(|o| o.request_id.clone())
            .collect();
        for k in old_out {
            self.state.outgoing.remove(&k);
            self.state.touch(Table::Outgoing, k);
        }
        while self.state.known_cards.len() > MAX_KNOWN_CARDS {
            let Some(oldest) = self
                .state
                .known_cards
                .iter()
                .min_by_key(|(_, k)| k.found)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            self.state.known_cards.remove(&oldest);
            self.state.touch(Table::KnownCard, oldest.as_str());
        }
    }

    /// Retries deliveries that are due.
    fn tick(&mut self, ctx: &mut Ctx<'_>) -> Result<()> {
        self.prune(ctx);
        // §7.3: meeting expiry and holds; §7.4: pruning.
        self.meetings_tick(ctx)?;
        // §7.6.2, §7.4: task expiry and pruning; §5.5.1 auto-approve expiry.
        self.task_tick(ctx)?;
        let due: Vec<String> = self
            .state
            .deliveries
            .values()
            .filter(|d| d.next_at <= ctx.now)
            .map(|d| d.id.clone())
            .collect();
        for id in due {
            let in_flight = self.state.deliveries.get(&id).is_some_and(|d| d.in_flight);
            if in_flight {
                // The outcome never came (a crash, a hung relay): count it as
                // a failed attempt.
                self.failed_attempt(&id, ctx)?;
                if self
                    .state
                    .deliveries
                    .get(&id)
                    .is_some_and(|d| !d.in_flight && d.next_at <= ctx.now)
                {
                    self.attempt(&id, ctx)?;
                }
            } else {
                self.attempt(&id, ctx)?;
            }
        }
        Ok(())
    }
}

/// The header of an envelope we just sealed, read off what `seal` wrote
/// rather than verifying our own signature again; its hash (§4.6) is the
/// next envelope's prev. The size bound is the one a receiver checks first
/// (§6.4), so nothing is recorded that no peer would take.
fn sealed_header(
    from: &AgentId,
    to: &AgentId,
    seq: u64,
    prev: Option<String>,
    env: &Value,
) -> Result<envelope::Header> {
    let field = |k: &str| {
        env.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Store(format!("a sealed envelope without {k}")))
    };
    let bytes = rdv_proto::canon::to_vec(env)?;
    if bytes.len() > rdv_proto::consts::ENVELOPE_MAX_BYTES {
        return Err(rdv_proto::Error::TooLarge {
            what: "envelope",
            len: bytes.len(),
            limit: rdv_proto::consts::ENVELOPE_MAX_BYTES,
        }
        .into());
    }
    let created_raw = field("created")?.to_string();
    Ok(envelope::Header {
        from: from.clone(),
        to: to.clone(),
        seq,
        prev,
        created: rdv_proto::time::parse_time("created", &created_raw)?,
        created_raw,
        ttl_secs: rdv_proto::time::parse_ttl(field("ttl")?)?,
        hash: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
    })
}

/// Cards kept from discovery or import that are not contacts.
pub const MAX_KNOWN_CARDS: usize = 1024;

/// Attempts on one carrier before the next is tried (§6.1 self-healing).
pub const MAX_ATTEMPTS_PER_ROUTE: u32 = 2;
/// After every carrier failed, the pause before starting over.
pub const ROUND_PAUSE_SECS: i64 = 600;
/// How long a delivery is tried: an envelope's default ttl (§6.4, 48 h).
pub const DELIVERY_LIFETIME_SECS: i64 = 48 * 3600;

/// Seconds to wait before retrying after `attempts` tries (§6.2 backoff).
pub fn backoff_secs(attempts: u32) -> i64 {
    match attempts {
        0 | 1 => 5,
        2 => 30,
        3 => 120,
        _ => 600,
    }
}

/// A rendezvous entry as a route, if it is one we can deliver on.
pub fn route_of(e: &Value) -> Option<Route> {
    let s = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
    match e.get("type").and_then(Value::as_str)? {
        "nostr" => Some(Route::Nostr {
            relays: vec![s("relay")?],
        }),
        "ntfy" => Some(Route::Ntfy {
            server: s("server").unwrap_or_else(|| "https://ntfy.sh".to_string()),
            topic: s("topic")?,
        }),
        "mqtt" => Some(Route::Mqtt {
            url: s("url").or_else(|| s("broker"))?,
            topic: s("topic")?,
        }),
        _ => None,
    }
}

/// The default scope of a grant our owner issues (§5.3, §7.4): may write,
/// free/busy, 100/day, meetings when allowed; nothing else in invoke.
pub fn default_scope(meetings: bool, invoke: &[String], max_frequency: &str) -> Value {
    let mut inv = serde_json::Map::new();
    if meetings {
        inv.insert(EXT_MEETINGS.into(), Value::Object(Default::default()));
        inv.insert(EXT_MEETING_CANCEL.into(), Value::Object(Default::default()));
    }
    for u in invoke {
        inv.insert(u.clone(), Value::Object(Default::default()));
    }
    serde_json::json!({
        "may_initiate": true,
        "may_propose_meetings": meetings,
        "may_access_calendar": "free_busy",
        "max_frequency": max_frequency,
        "invoke": inv,
    })
}

#[allow(dead_code)]
pub(crate) fn err_input(s: impl Into<String>) -> Error {
    Error::Input(s.into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An outcome input is committed without an fsync, so one that would
    /// change a channel's seq or outbox is refused, not committed lightly.
    #[test]
    fn an_outcome_may_not_change_a_channel() {
        let me = AgentKey::from_seed([1; 32]);
        let peer = AgentKey::from_seed([2; 32]).id().clone();
        let mut a = Agent::new(me, State::default());
        let mut rng = rand_core::OsRng;
        let mut ctx = Ctx {
            now: rdv_proto::time::parse_time("t", "2026-12-01T10:00:00Z").unwrap(),
            rng: &mut rng,
        };
        let published = || Input::Published {
            delivery: "d".into(),
            outcomes: Vec::new(),
        };
        assert!(a.handle(published(), &mut ctx).is_ok());
        a.state.channels_out.entry(peer.clone()).or_default();
        a.state.touch(Table::ChannelOut, peer.as_str());
        let e = a.handle(published(), &mut ctx).unwrap_err().to_string();
        assert!(e.contains("changed a channel's seq or outbox"), "{e}");
        a.state.touch(Table::ChannelOut, peer.as_str());
        assert!(a.handle(Input::Tick, &mut ctx).is_ok(), "other inputs may");
    }

    /// The header taken off a fresh seal is the one verification reads, so
    /// the outbox records and the next prev are the envelope's own.
    #[test]
    fn the_sealed_header_is_the_verified_one() {
        let me = AgentKey::from_seed([1; 32]);
        let to = AgentKey::from_seed([2; 32]).id().clone();
        let now = rdv_proto::time::parse_time("t", "2026-12-01T10:00:00Z").unwrap()
            + time::Duration::milliseconds(789);
        let prev = "ab".repeat(32);
        for (seq, prev) in [(1, None), (7, Some(prev.as_str()))] {
            let mut rng = rand_core::OsRng;
            let params = SealParams::new(&me, &to, seq, prev, now, &mut rng);
            let env = envelope::seal(&serde_json::json!({"type": "note/text"}), &params).unwrap();
            let ours = sealed_header(me.id(), &to, seq, prev.map(str::to_string), &env).unwrap();
            let verified = envelope::verify_value(&env, now).unwrap();
            assert_eq!(&ours, verified.header());
        }
    }
}
