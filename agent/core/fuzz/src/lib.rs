//! The world the `inbound` target fuzzes: Alice's agent after a real flow
//! between seven in-memory agents (the approach of
//! agent/core/tests/common/mod.rs, copied: a fuzz crate cannot import test
//! code), the templates that let inputs past signatures, and one input's run
//! with its assertions.
//!
//! Alice holds, when the world is built: a profile, a contact (Bob, by a
//! topic probe she granted and he confirmed, with messages both ways), a
//! pending request (Carol's probe), an open probe with a candidate (hers to
//! dave@example.com, which Dave granted), an open request by card (to Erin)
//! and a blocked key (Frank). Mallory is a stranger.
//!
//! # Input format
//!
//! `selector ‖ data`. The selector's bits 0–2 pick the mode, bits 3–5 how far
//! the clock has moved since the world was built ([`OFFSETS`]), bit 6 the
//! carrier of sealed envelopes (0: `Input::Envelope`, 1: inside a Nostr
//! event signed with the sender's carrier key).
//!
//! | mode | data | input |
//! |---|---|---|
//! | 0 | event JSON | `Input::Nostr` as is |
//! | 1 | envelope JSON | `Input::Envelope` as is |
//! | 2 | sender, chain, payload | the payload (JSON object; other bytes become a `note/text`) sealed by the sender's real key, on the chain position `chain` picks ([`chain_position`]) |
//! | 3 | sender, template, overlay | a protocol document ([`World::docs`]: grants, requests, a revoke, a reverse grant, a card-update, a resend) with the JSON overlay merged in ([`merge`]), re-signed by the key its `from` names (bit 7 of template: keep the old `sig`), sealed by the sender on its next seq |
//! | 4 | signer, template, overlay | a contact request merged and re-signed, posted as a topic probe on Alice's dtopic (template bit 7: her ID topic) |
//! | 5 | template, signer, overlay | a real Nostr event ([`World::events`]) with the overlay's `content`, `tags`, `created_at` and `kind` (bytes that are not a JSON object become the content), re-signed with a carrier key; template bit 7 recomputes `d` so the §6.2 shape holds |
//! | 6 | sender, template, overlay | a document sealed on the next seq, then the overlay merged into the envelope itself and the envelope re-signed by the key its `from` names |
//! | 7 | (selector, length, data)… | up to 4 inputs of modes 0–6 in a row on the same agent, each from the state the one before committed |
//!
//! # What is asserted, for every input
//!
//! 1. No panic, and `handle` returns `Ok` with no reply (carrier input).
//! 2. **A refused input changes no state.** An input is *refused* when its
//!    output has no events and no effects: the owner hears nothing and
//!    nothing is sent. Such an input's writes may only (a) leave a record's
//!    serialized value as it was, or (b) move the inbound channel (§6.4) of
//!    the authenticated sender of a verified envelope to Alice, when that
//!    sender was admitted before the input (a contact, a pending requester,
//!    an agent asked by card, a peer we wrote to, or one already holding
//!    channel state, and not blocked): the chain's head and buffer follow
//!    every authentic envelope whatever its payload. Anything else is a
//!    finding.
//! 3. What was committed is what is in memory: the state rebuilt from the
//!    records after the writes equals the agent's state after `handle` (a
//!    change without a write would be lost at the next start).
//!
//! `RDV_FUZZ_ALLOW` tolerates named changes on refused inputs (a table, or
//! `table.member`), to fuzz on past a finding already reported; unset, the
//! rules are strict. `RDV_FUZZ_DEBUG=1` prints what each input did.
//! Findings so far (found at 62eed30, still there at 21ab300), both in
//! agent/core/src/inbound.rs: a request from a current contact (or any
//! request when the inbound policy is `block`) records its id in `seen`
//! before those checks refuse it (`on_request`); a card-update carrying
//! the card already held counts against the 20/hour bound with nothing
//! told (`on_card_update`, `SameCard`). Run on past them with
//! `RDV_FUZZ_ALLOW=seen,contact.card_updates`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::LazyLock;

use nostr::event::{Kind, Tag, UnsignedEvent};
use nostr::types::Timestamp;
use rand_core::{CryptoRng, RngCore};
use rdv_agent_core::agent::default_scope;
use rdv_agent_core::record::{Record, Table, Write};
use rdv_agent_core::state::State;
use rdv_agent_core::{
    Agent, Command, Ctx, Effect, Input, Output, PublishOutcome, RequestTo, Setup,
};
use rdv_proto::envelope::{self, SealParams};
use rdv_proto::nostr_event::{Carried, parse_event};
use rdv_proto::time::{Instant, parse_time};
use rdv_proto::{Address, AgentId, AgentKey, canon, idtopic, sign};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub const RELAY: &str = "wss://relay.test";

pub const ALICE: usize = 0;
pub const BOB: usize = 1;
pub const CAROL: usize = 2;
pub const DAVE: usize = 3;
pub const ERIN: usize = 4;
pub const MALLORY: usize = 5;
pub const FRANK: usize = 6;
pub const NAMES: [&str; 7] = ["alice", "bob", "carol", "dave", "erin", "mallory", "frank"];

/// How far the clock moved since the world was built, by selector bits 3–5.
pub const OFFSETS: [i64; 8] = [
    0,
    60,
    3600,
    2 * 86400,
    8 * 86400,
    15 * 86400,
    31 * 86400,
    -86400,
];

pub fn seed_of(i: usize) -> [u8; 32] {
    [i as u8 + 1; 32]
}

pub fn key_of(i: usize) -> AgentKey {
    AgentKey::from_seed(seed_of(i))
}

fn address_of(i: usize) -> String {
    format!("{}@example.com", NAMES[i])
}

/// Deterministic randomness (SHA-256 in counter mode), so a finding replays
/// exactly: the world is the same in every run.
pub struct DetRng {
    seed: [u8; 32],
    counter: u64,
    buf: [u8; 32],
    used: usize,
}

impl DetRng {
    pub fn new(seed: &[u8]) -> DetRng {
        DetRng {
            seed: Sha256::digest(seed).into(),
            counter: 0,
            buf: [0; 32],
            used: 32,
        }
    }
}

impl RngCore for DetRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for d in dest {
            if self.used == 32 {
                let mut h = Sha256::new();
                h.update(self.seed);
                h.update(self.counter.to_le_bytes());
                self.buf = h.finalize().into();
                self.counter += 1;
                self.used = 0;
            }
            *d = self.buf[self.used];
            self.used += 1;
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoRng for DetRng {}

pub type Records = BTreeMap<(Table, String), Value>;

pub fn to_records(r: &Records) -> Vec<Record> {
    r.iter()
        .map(|((t, k), v)| Record {
            table: *t,
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

pub fn apply(records: &mut Records, writes: &[Write]) {
    for w in writes {
        match &w.value {
            Some(v) => {
                records.insert((w.table, w.key.clone()), v.clone());
            }
            None => {
                records.remove(&(w.table, w.key.clone()));
            }
        }
    }
}

/// One agent whose state lives in its records, as in the store.
struct Node {
    agent: Agent,
    seed: [u8; 32],
    records: Records,
}

impl Node {
    fn new(i: usize) -> Node {
        Node {
            agent: Agent::new(key_of(i), State::default()),
            seed: seed_of(i),
            records: Records::new(),
        }
    }

    fn handle(&mut self, input: Input, now: Instant, rng: &mut DetRng) -> Output {
        let mut ctx = Ctx { now, rng };
        let out = self.agent.handle(input, &mut ctx).expect("world input");
        apply(&mut self.records, &out.writes);
        let state = State::load(&to_records(&self.records)).expect("world records load");
        self.agent = Agent::new(AgentKey::from_seed(self.seed), state);
        out
    }
}

/// The in-memory network: every published event goes to each node it
/// concerns (`#p` or `#t`), unless it is held back from Alice.
struct Net {
    nodes: Vec<Node>,
    now: Instant,
    rng: DetRng,
    /// Events Alice got, and events held back from her (not delivered).
    to_alice: Vec<Value>,
    held: Vec<Value>,
    hold: bool,
}

impl Net {
    fn cmd(&mut self, i: usize, c: Command) -> Value {
        let now = self.now;
        let out = self.nodes[i].handle(Input::Command(c), now, &mut self.rng);
        self.carry(i, out.effects);
        out.reply.unwrap_or(Value::Null)
    }

    fn carry(&mut self, from: usize, effects: Vec<Effect>) {
        let mut queue: Vec<(usize, Effect)> = effects.into_iter().map(|e| (from, e)).collect();
        while let Some((src, e)) = queue.pop() {
            let Effect::PublishNostr {
                delivery,
                event,
                relays,
            } = e
            else {
                continue;
            };
            let now = self.now;
            let outcomes = relays
                .iter()
                .map(|r| (r.clone(), PublishOutcome::Accepted))
                .collect();
            let out =
                self.nodes[src].handle(Input::Published { delivery, outcomes }, now, &mut self.rng);
            queue.extend(out.effects.into_iter().map(|e| (src, e)));
            let json = serde_json::to_value(&*event).unwrap();
            let raw = serde_json::to_vec(&json).unwrap();
            for i in 0..self.nodes.len() {
                if i == src || !self.concerns(i, &json) {
                    continue;
                }
                if i == ALICE {
                    if self.hold {
                        self.held.push(json.clone());
                        continue;
                    }
                    self.to_alice.push(json.clone());
                }
                let input = Input::Nostr {
                    relay: RELAY.into(),
                    json: raw.clone(),
                };
                let out = self.nodes[i].handle(input, now, &mut self.rng);
                queue.extend(out.effects.into_iter().map(|e| (i, e)));
            }
        }
    }

    fn concerns(&self, i: usize, ev: &Value) -> bool {
        let Ok(subs) = self.nodes[i].agent.subscriptions() else {
            return false;
        };
        ev["tags"].as_array().into_iter().flatten().any(|t| {
            (t[0] == "p" && t[1] == subs.p.as_str())
                || (t[0] == "t" && subs.topics.iter().any(|x| t[1] == x.as_str()))
        })
    }

    fn first_pending(&self, i: usize) -> String {
        self.nodes[i]
            .agent
            .state
            .pending
            .keys()
            .next()
            .expect("a pending request")
            .clone()
    }

    fn probe(&mut self, from: usize, to: &str, label: Option<&str>) -> String {
        let r = self.cmd(
            from,
            Command::Request {
                to: RequestTo::Address(to.into()),
                greeting: format!("Hi, {}'s agent", NAMES[from]),
                label: label.map(str::to_string),
            },
        );
        r["request_id"].as_str().expect("request id").to_string()
    }

    fn grant(&mut self, i: usize, request_id: String, tier: &str) {
        self.cmd(
            i,
            Command::Grant {
                request_id,
                tier: tier.into(),
                scope: default_scope(false, &[], "100/day"),
                label: None,
            },
        );
    }

    fn send(&mut self, from: usize, to: usize, text: &str) {
        let to = self.nodes[to].agent.id().clone();
        self.cmd(
            from,
            Command::Send {
                to,
                payload: json!({"type": "note/text", "text": text}),
            },
        );
    }

    fn card(&self, i: usize) -> Value {
        self.nodes[i].agent.state.profile().unwrap().card.clone()
    }
}

/// Alice's agent as built, and what inputs are made from.
pub struct World {
    /// Alice's records.
    pub alice: Records,
    pub now: Instant,
    pub keys: Vec<AgentKey>,
    /// Real events on the relay for Alice: delivered, then held back.
    pub events: Vec<Value>,
    /// Documents to mutate, each with the agent that naturally sends it.
    pub docs: Vec<(usize, Value)>,
    /// Contact requests to post as probes, with their signer.
    pub requests: Vec<(usize, Value)>,
}

impl World {
    pub fn alice_id(&self) -> &AgentId {
        self.keys[ALICE].id()
    }

    /// Which agent holds this ID, if one of ours.
    pub fn key_for(&self, id: &str) -> Option<&AgentKey> {
        self.keys.iter().find(|k| k.id().as_str() == id)
    }
}

pub static WORLD: LazyLock<World> = LazyLock::new(build);

pub fn world() -> &'static World {
    &WORLD
}

fn build() -> World {
    let mut net = Net {
        nodes: (0..NAMES.len()).map(Node::new).collect(),
        now: parse_time("t", "2026-12-01T10:00:00Z").unwrap(),
        rng: DetRng::new(b"world"),
        to_alice: Vec::new(),
        held: Vec::new(),
        hold: false,
    };
    for i in 0..NAMES.len() {
        let setup = Setup {
            addresses: vec![(address_of(i), true)],
            relays: vec![RELAY.to_string()],
            public_pointer: true,
            inbound: "prompt".into(),
            suggest: true,
            ..Setup::default()
        };
        net.cmd(i, Command::Init(setup));
    }
    net.now += time::Duration::seconds(30);

    // Bob: a contact by a topic probe Alice granted and Bob confirmed.
    let bob_probe = net.probe(BOB, &address_of(ALICE), Some("Alice"));
    let req = net.first_pending(ALICE);
    net.grant(ALICE, req, "friend");
    net.cmd(
        BOB,
        Command::Confirm {
            request_id: bob_probe,
            grantor: None,
            label: None,
        },
    );
    net.now += time::Duration::seconds(60);
    net.send(BOB, ALICE, "hi Alice");
    net.send(ALICE, BOB, "hi Bob");
    net.send(BOB, ALICE, "how are you?");

    // Carol: a pending request (her probe, not answered).
    net.now += time::Duration::seconds(60);
    net.probe(CAROL, &address_of(ALICE), None);

    // Alice's open probe to Dave, with Dave's answer as its candidate.
    net.now += time::Duration::seconds(60);
    net.probe(ALICE, &address_of(DAVE), Some("Dave"));
    let req = net.first_pending(DAVE);
    net.grant(DAVE, req, "colleague");

    // Alice's request by card to Erin, open; Frank blocked.
    net.now += time::Duration::seconds(60);
    let erin = net.card(ERIN);
    net.cmd(
        ALICE,
        Command::Request {
            to: RequestTo::Card(erin),
            greeting: "Hello Erin".into(),
            label: Some("Erin".into()),
        },
    );
    let frank = net.nodes[FRANK].agent.id().clone();
    net.cmd(ALICE, Command::Block { id: frank });

    // Held back from Alice (corpus seeds and templates): Erin's grant,
    // Mallory's request by card and her probe, Frank's probe, Bob's
    // card-update.
    net.now += time::Duration::seconds(60);
    net.hold = true;
    let req = net.first_pending(ERIN);
    net.grant(ERIN, req, "friend");
    let alice_card = net.card(ALICE);
    net.cmd(
        MALLORY,
        Command::Request {
            to: RequestTo::Card(alice_card),
            greeting: "Hello from Mallory".into(),
            label: None,
        },
    );
    net.probe(FRANK, &address_of(ALICE), None);
    net.probe(MALLORY, &address_of(ALICE), None);
    net.cmd(
        BOB,
        Command::AddRelay {
            url: "wss://relay2.test".into(),
        },
    );
    net.now += time::Duration::seconds(60);

    let keys: Vec<AgentKey> = (0..NAMES.len()).map(key_of).collect();
    let mut events = net.to_alice.clone();
    events.extend(net.held.iter().cloned());

    // Documents: every payload sealed to Alice, and a few more.
    let mut docs = Vec::new();
    let mut requests = Vec::new();
    for ev in &events {
        let raw = serde_json::to_vec(ev).unwrap();
        match parse_event(&raw) {
            Ok((_, Carried::Envelope { envelope, .. })) => {
                let bytes = canon::to_vec(&envelope).unwrap();
                if let Ok(o) = envelope::open(&bytes, &keys[ALICE], net.now) {
                    let from = keys.iter().position(|k| k.id() == &o.header.from).unwrap();
                    docs.push((from, Value::Object(o.payload)));
                }
            }
            Ok((_, Carried::Probe { request, .. })) => {
                let from = request["from"].as_str().unwrap_or("");
                if let Some(i) = keys.iter().position(|k| k.id().as_str() == from) {
                    requests.push((i, request));
                }
            }
            _ => {}
        }
    }
    let alice = &net.nodes[ALICE].agent.state;
    let bob_id = keys[BOB].id().clone();
    let founding = alice.contacts[&bob_id].founding_grant.clone();
    docs.push((
        BOB,
        rdv_proto::doc::revoke::Revoke::build(
            "3f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            keys[ALICE].id(),
            net.now,
            &keys[BOB],
        )
        .unwrap(),
    ));
    docs.push((
        BOB,
        rdv_proto::doc::grant::GrantBuilder {
            id: "4f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d".into(),
            to: keys[ALICE].id().clone(),
            reference: rdv_proto::doc::grant::GrantRef::Grant(founding),
            card: net.card(BOB),
            tier: "family".into(),
            scope: default_scope(true, &[], "100/day"),
            expires: None,
            ts: net.now,
        }
        .sign(&keys[BOB])
        .unwrap(),
    ));
    // A current contact asking again, by card and by probe (a contact that
    // lost its state does this).
    for (id, to_hint) in [
        ("5f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", None),
        (
            "6e1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            Some(address_of(ALICE)),
        ),
    ] {
        let req = rdv_proto::doc::request::RequestBuilder {
            id: id.into(),
            to_hint: to_hint.clone(),
            card: net.card(BOB),
            greeting: "Bob again".into(),
            capabilities_offered: vec!["rdv/v1".into()],
            ts: net.now,
        }
        .sign(&keys[BOB])
        .unwrap();
        if to_hint.is_some() {
            requests.push((BOB, req));
        } else {
            docs.push((BOB, req));
        }
    }
    // Bob's card-update carrying the card Alice already holds.
    let held = alice.contacts[&bob_id].card.clone();
    docs.push((BOB, rdv_proto::doc::card_update::card_update_payload(&held)));
    docs.push((BOB, rdv_proto::channel::resend_payload(1, 2)));
    docs.push((BOB, json!({"type": "note/text", "text": "plain"})));
    let world = World {
        alice: net.nodes[ALICE].records.clone(),
        now: net.now,
        keys,
        events,
        docs,
        requests,
    };
    // The world is what the target needs: fail loudly if a step did not
    // take (the seeds would then be useless).
    let s = State::load(&to_records(&world.alice)).unwrap();
    assert!(s.contact(&bob_id).is_some(), "Bob is a contact");
    assert_eq!(s.pending.len(), 1, "Carol's request is pending");
    assert!(
        s.outgoing
            .values()
            .any(|o| !o.closed && o.candidates.len() == 1),
        "the probe to Dave is open with one candidate"
    );
    assert!(s.asked_by_card(world.keys[ERIN].id()).is_some());
    assert!(world.docs.len() >= 8, "documents: {}", world.docs.len());
    world
}

// ---- making inputs ---------------------------------------------------------

/// Overlays `over` on `base`: objects merge member by member (recursively),
/// `null` removes a member, anything else replaces.
pub fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(x) = b.get_mut(k) {
                    merge(x, v);
                } else {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Bytes as a JSON value: strict canonical parse, else serde_json's.
fn json_of(bytes: &[u8]) -> Option<Value> {
    canon::parse(bytes, 64 * 1024)
        .ok()
        .or_else(|| serde_json::from_slice(bytes).ok())
}

/// Re-signs a document and the card inside it with the keys they name
/// (`from` or `id`), or `fallback` when the name is not one of ours.
fn resign(w: &World, doc: &mut Value, fallback: &AgentKey) {
    if let Some(card) = doc.get_mut("card")
        && card.get("sig").is_some()
    {
        resign(w, card, fallback);
    }
    if let Value::Object(m) = doc
        && m.remove("sig").is_some()
    {
        let name = m
            .get("from")
            .or_else(|| m.get("id"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let key = w.key_for(name).unwrap_or(fallback);
        if let Ok(s) = sign::sign(m.clone(), key) {
            *m = s;
        }
    }
}

/// The (seq, prev) an envelope takes, by `chain` (low 3 bits) from the
/// head Alice holds for `from`; bits 3–4 pick the ttl, 5–6 the `created`
/// offset (seconds before the clock; the last is ahead of it).
pub fn chain_position(
    state: &State,
    from: &AgentId,
    chain: u8,
) -> (u64, Option<String>, &'static str, i64) {
    let (seq, prev) = match state.channels_in.get(from).and_then(|c| c.head()) {
        Some((s, h)) => (s + 1, Some(h.to_string())),
        None => (1, None),
    };
    let other = Some("0".repeat(64));
    let (seq, prev) = match chain & 7 {
        0 => (seq, prev),
        1 => (seq + 1, other),
        2 => (seq.saturating_sub(1).max(1), prev),
        3 => (1, None),
        4 => (seq, other),
        5 => (u64::MAX, other),
        6 => (seq, None),
        _ => (seq + 2, other),
    };
    let ttl = ["48h", "7d", "1s", "1h"][usize::from(chain >> 3 & 3)];
    let back = [0, 3600, 3 * 86400, -600][usize::from(chain >> 5 & 3)];
    (seq, prev, ttl, back)
}

fn seal_from(
    state: &State,
    from: &AgentKey,
    to: &AgentId,
    payload: &Value,
    chain: u8,
    now: Instant,
    rng: &mut DetRng,
) -> Option<Value> {
    let (seq, prev, ttl, back) = chain_position(state, from.id(), chain);
    let mut p = SealParams::new(
        from,
        to,
        seq,
        prev.as_deref(),
        now - time::Duration::seconds(back),
        rng,
    );
    p.ttl = ttl;
    envelope::seal(payload, &p).ok()
}

fn carried(env: &Value, sender: &AgentKey, nostr: bool, now: Instant, rng: &mut DetRng) -> Input {
    if nostr {
        let mut aux = [0; 32];
        rng.fill_bytes(&mut aux);
        let created = now.unix_timestamp().max(0) as u64;
        if let Ok(ev) =
            rdv_proto::nostr_event::envelope_event(env, &sender.nostr_keys().unwrap(), created, aux)
        {
            return Input::Nostr {
                relay: RELAY.into(),
                json: serde_json::to_vec(&ev).unwrap(),
            };
        }
    }
    Input::Envelope {
        carrier: "ntfy".into(),
        bytes: canon::to_vec(env).unwrap_or_default(),
    }
}

fn sign_event(
    keys: &nostr::key::Keys,
    created_at: u64,
    kind: u16,
    tags: Vec<Tag>,
    content: String,
    aux: [u8; 32],
) -> Option<Vec<u8>> {
    static SECP: LazyLock<secp256k1::Secp256k1<secp256k1::SignOnly>> =
        LazyLock::new(secp256k1::Secp256k1::signing_only);
    let mut u = UnsignedEvent::new(
        keys.public_key(),
        Timestamp::from_secs(created_at),
        Kind::Custom(kind),
        tags,
        content,
    );
    let id = u.id();
    let sig = keys.sign_schnorr_with_aux_rand(&SECP, id.as_bytes(), &aux);
    let ev = u.add_signature(sig).ok()?;
    serde_json::to_vec(&ev).ok()
}

fn byte(d: &[u8], i: usize) -> u8 {
    d.get(i).copied().unwrap_or(0)
}

/// The input a selector and its data stand for, from Alice's `state` now.
pub fn make_input(
    w: &World,
    state: &State,
    sel: u8,
    data: &[u8],
    now: Instant,
    rng: &mut DetRng,
) -> Option<Input> {
    let nostr = sel & 0x40 != 0;
    let alice = w.alice_id();
    let pick = |b: u8| &w.keys[usize::from(b) % w.keys.len()];
    let tail = data.get(2..).unwrap_or(&[]);
    match sel & 7 {
        0 => Some(Input::Nostr {
            relay: RELAY.into(),
            json: data.to_vec(),
        }),
        1 => Some(Input::Envelope {
            carrier: "mqtt".into(),
            bytes: data.to_vec(),
        }),
        2 => {
            let sender = pick(byte(data, 0));
            let payload = match json_of(tail) {
                Some(v @ Value::Object(_)) => v,
                _ => json!({"type": "note/text", "text": String::from_utf8_lossy(tail)}),
            };
            let env = seal_from(state, sender, alice, &payload, byte(data, 1), now, rng)?;
            Some(carried(&env, sender, nostr, now, rng))
        }
        3 | 6 => {
            let sender = pick(byte(data, 0));
            let t = byte(data, 1);
            let (_, doc) = &w.docs[usize::from(t & 0x7f) % w.docs.len()];
            let mut doc = doc.clone();
            let over = json_of(tail);
            if sel & 7 == 3 {
                if let Some(o) = &over {
                    merge(&mut doc, o);
                }
                if t & 0x80 == 0 {
                    resign(w, &mut doc, sender);
                }
            }
            let mut env = seal_from(state, sender, alice, &doc, 0, now, rng)?;
            if sel & 7 == 6 {
                if let Some(o) = &over {
                    merge(&mut env, o);
                }
                if t & 0x80 == 0 {
                    resign(w, &mut env, sender);
                }
            }
            Some(carried(&env, sender, nostr, now, rng))
        }
        4 => {
            let signer = pick(byte(data, 0));
            let t = byte(data, 1);
            let (_, req) = &w.requests[usize::from(t & 0x7f) % w.requests.len()];
            let mut req = req.clone();
            if let Some(o) = json_of(tail) {
                merge(&mut req, &o);
            }
            resign(w, &mut req, signer);
            let topic = if t & 0x80 == 0 {
                Address::parse("alice@example.com").ok()?.dtopic()
            } else {
                idtopic(alice)
            };
            let mut aux = [0; 32];
            rng.fill_bytes(&mut aux);
            let created = now.unix_timestamp().max(0) as u64;
            let ev = rdv_proto::nostr_event::probe_event(
                &req,
                &topic,
                &signer.nostr_keys().ok()?,
                created,
                aux,
            )
            .ok()?;
            Some(Input::Nostr {
                relay: RELAY.into(),
                json: serde_json::to_vec(&ev).ok()?,
            })
        }
        5 => {
            let t = byte(data, 0);
            let template = &w.events[usize::from(t & 0x7f) % w.events.len()];
            let signer = pick(byte(data, 1));
            let mut content = template["content"].as_str().unwrap_or("").to_string();
            let mut tags: Vec<Vec<String>> =
                serde_json::from_value(template["tags"].clone()).unwrap_or_default();
            let mut created_at = template["created_at"].as_u64().unwrap_or(0);
            let mut kind = 30417u16;
            match json_of(tail) {
                Some(Value::Object(o)) => {
                    match o.get("content") {
                        Some(Value::String(s)) => content = s.clone(),
                        Some(v) => content = canon::to_string(v).unwrap_or_default(),
                        None => {}
                    }
                    if let Some(t) = o
                        .get("tags")
                        .and_then(|v| serde_json::from_value(v.clone()).ok())
                    {
                        tags = t;
                    }
                    if let Some(c) = o.get("created_at").and_then(Value::as_u64) {
                        created_at = c;
                    }
                    if let Some(k) = o.get("kind").and_then(Value::as_u64) {
                        kind = k as u16;
                    }
                }
                _ => content = String::from_utf8_lossy(tail).into_owned(),
            }
            if t & 0x80 != 0 {
                // Make `d` what §6.2 asks, so the content is what is tested.
                let p_tag = tags.iter().any(|t| t.first().is_some_and(|n| n == "p"));
                let d = if p_tag {
                    canon::parse(content.as_bytes(), 128 * 1024)
                        .ok()
                        .and_then(|v| sign::hash(&v).ok())
                } else {
                    Some(hex::encode(Sha256::digest(content.as_bytes())))
                };
                if let Some(d) = d {
                    for t in tags.iter_mut() {
                        if t.first().is_some_and(|n| n == "d") && t.len() >= 2 {
                            t[1] = d.clone();
                        }
                    }
                }
            }
            let tags: Vec<Tag> = tags.iter().filter_map(|t| Tag::parse(t).ok()).collect();
            let mut aux = [0; 32];
            rng.fill_bytes(&mut aux);
            let json = sign_event(
                &signer.nostr_keys().ok()?,
                created_at,
                kind,
                tags,
                content,
                aux,
            )?;
            Some(Input::Nostr {
                relay: RELAY.into(),
                json,
            })
        }
        _ => None,
    }
}

// ---- one run -----------------------------------------------------------------

/// The state as JSON, field by field, to compare what is in memory with
/// what the records rebuild.
pub fn snapshot(s: &State) -> Value {
    json!({
        "profile": s.profile,
        "contacts": s.contacts,
        "pending": s.pending,
        "outgoing": s.outgoing,
        "blocked": s.blocked,
        "channels_in": s.channels_in,
        "channels_out": s.channels_out,
        "deliveries": s.deliveries,
        "seen": s.seen,
        "relay_health": s.relay_health,
        "probe_log": s.probe_log,
        "known_cards": s.known_cards,
    })
}

/// The authenticated sender of a verified envelope to Alice in `input`,
/// if it was admitted before the input (see the crate doc, rule 2b).
pub fn admitted_sender(w: &World, state: &State, input: &Input, now: Instant) -> Option<AgentId> {
    let raw = match input {
        Input::Nostr { json, .. } => match parse_event(json) {
            Ok((
                _,
                Carried::Envelope {
                    recipient,
                    envelope,
                },
            )) if &recipient == w.alice_id() => canon::to_vec(&envelope).ok()?,
            _ => return None,
        },
        Input::Envelope { bytes, .. } => bytes.clone(),
        _ => return None,
    };
    let from = envelope::open(&raw, &w.keys[ALICE], now).ok()?.header.from;
    let admitted = state.contact(&from).is_some()
        || state.asked_by_card(&from).is_some()
        || state.pending.values().any(|p| p.from == from)
        || state.channels_out.contains_key(&from)
        || state.channels_in.get(&from).is_some();
    (admitted && !state.blocked.contains(&from)).then_some(from)
}

/// `RDV_FUZZ_ALLOW=seen,contact.card_updates,…`: tables (or one member of a
/// table's records) whose changes on a refused input are tolerated, to fuzz
/// on past a finding already reported. Unset: strict.
static ALLOW: LazyLock<Vec<String>> = LazyLock::new(|| {
    std::env::var("RDV_FUZZ_ALLOW")
        .unwrap_or_default()
        .split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
});

/// Whether [`ALLOW`] tolerates this change of a record.
fn allowed(table: Table, old: Option<&Value>, new: Option<&Value>) -> bool {
    let t = table.as_str();
    if ALLOW.iter().any(|a| a == t) {
        return true;
    }
    let (Some(Value::Object(a)), Some(Value::Object(b))) = (old, new) else {
        return false;
    };
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .all(|k| ALLOW.iter().any(|x| *x == format!("{t}.{k}")))
}

/// `RDV_FUZZ_DEBUG=1`: print what each input did (to check the seeds reach
/// the paths they are for).
static DEBUG: LazyLock<bool> = LazyLock::new(|| std::env::var_os("RDV_FUZZ_DEBUG").is_some());

fn ser(v: Option<&Value>) -> Vec<u8> {
    v.map(|v| serde_json::to_vec(v).unwrap())
        .unwrap_or_default()
}

/// Feeds one input to Alice as `records` hold her, checks the rules, and
/// commits its writes to `records`.
pub fn step(
    w: &World,
    records: &mut Records,
    state: State,
    sel: u8,
    data: &[u8],
    now: Instant,
    rng: &mut DetRng,
) -> State {
    let Some(input) = make_input(w, &state, sel, data, now, rng) else {
        return state;
    };
    let admitted = admitted_sender(w, &state, &input, now);
    let mut agent = Agent::new(key_of(ALICE), state);
    let mut ctx = Ctx { now, rng };
    let out = match agent.handle(input, &mut ctx) {
        Ok(o) => o,
        Err(e) => panic!("carrier input returned Err: {e}"),
    };
    assert!(out.reply.is_none(), "a reply to carrier input");
    if *DEBUG {
        let kinds: Vec<String> = out
            .events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap()["kind"].to_string())
            .collect();
        let writes: Vec<String> = out
            .writes
            .iter()
            .map(|w| format!("{}/{}", w.table.as_str(), w.key))
            .collect();
        eprintln!(
            "mode {} events {kinds:?} effects {} writes {writes:?}",
            sel & 7,
            out.effects.len()
        );
    }
    // Rule 2: a refused input changes no state.
    if out.events.is_empty() && out.effects.is_empty() {
        for wr in &out.writes {
            let old = records.get(&(wr.table, wr.key.clone()));
            if ser(old) == ser(wr.value.as_ref()) {
                continue;
            }
            if wr.table == Table::ChannelIn
                && admitted.as_ref().is_some_and(|a| a.as_str() == wr.key)
            {
                continue;
            }
            if allowed(wr.table, old, wr.value.as_ref()) {
                continue;
            }
            panic!(
                "a refused input (no event, no effect) changed {}/{}:\n  before: {}\n  after:  {}",
                wr.table.as_str(),
                wr.key,
                old.map_or("(none)".into(), Value::to_string),
                wr.value
                    .as_ref()
                    .map_or("(deleted)".into(), Value::to_string),
            );
        }
    }
    // Rule 3: what was committed is what is in memory.
    apply(records, &out.writes);
    let reloaded = State::load(&to_records(records)).expect("committed records load");
    let (a, b) = (snapshot(&agent.state), snapshot(&reloaded));
    if a != b {
        let fields = a.as_object().unwrap();
        let differ: Vec<&String> = fields
            .keys()
            .filter(|k| a[k.as_str()] != b[k.as_str()])
            .collect();
        panic!("state changed without a write (lost at the next start): {differ:?}");
    }
    reloaded
}

/// One fuzz input: `selector ‖ data` (see the crate doc).
pub fn run(data: &[u8]) {
    let w = world();
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let now = w.now + time::Duration::seconds(OFFSETS[usize::from(sel >> 3 & 7)]);
    let mut rng = DetRng::new(data);
    let mut records = w.alice.clone();
    // Rebuilt from the records each time (not copied field by field), so
    // the start is exactly what the store would load, whatever fields
    // `State` grows.
    let state = State::load(&to_records(&records)).expect("world records load");
    if sel & 7 != 7 {
        step(w, &mut records, state, sel, rest, now, &mut rng);
        return;
    }
    let (mut rest, mut state) = (rest, state);
    for _ in 0..4 {
        let [s, len, tail @ ..] = rest else {
            return;
        };
        let n = usize::from(*len).min(tail.len());
        if s & 7 != 7 {
            let sel = *s | (sel & 0x40);
            state = step(w, &mut records, state, sel, &tail[..n], now, &mut rng);
        }
        rest = &tail[n..];
    }
}

/// Writes the corpus seeds into `dir`: the real events, then inputs of
/// every mode over every template.
pub fn write_seeds(dir: &std::path::Path) -> std::io::Result<usize> {
    let w = world();
    std::fs::create_dir_all(dir)?;
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: String, sel: u8, head: &[u8], body: &[u8]| {
        let mut v = vec![sel];
        v.extend_from_slice(head);
        v.extend_from_slice(body);
        seeds.push((name, v));
    };
    for (i, ev) in w.events.iter().enumerate() {
        let raw = serde_json::to_vec(ev).unwrap();
        add(format!("nostr-{i}"), 0, &[], &raw);
        if let Ok((_, Carried::Envelope { envelope, .. })) = parse_event(&raw) {
            add(
                format!("envelope-{i}"),
                1,
                &[],
                &canon::to_vec(&envelope).unwrap(),
            );
        }
        add(format!("event-{i}"), 5, &[i as u8, 1], b"{}");
        add(
            format!("event-fixd-{i}"),
            5,
            &[i as u8 | 0x80, 1],
            b"{\"content\":\"{}\"}",
        );
    }
    for s in 0..w.keys.len() as u8 {
        for chain in [0u8, 1, 2, 3, 4, 0x08, 0x30, 0x60] {
            add(
                format!("sealed-{s}-{chain}"),
                2,
                &[s, chain],
                br#"{"type":"note/text","text":"hi"}"#,
            );
        }
        add(format!("sealed-nostr-{s}"), 0x40 | 2, &[s, 0], b"hello");
    }
    for (t, (from, _)) in w.docs.iter().enumerate() {
        let (t, from) = (t as u8, *from as u8);
        add(format!("doc-{t}"), 3, &[from, t], b"{}");
        add(format!("doc-nostr-{t}"), 0x40 | 3, &[from, t], b"{}");
        add(format!("doc-later-{t}"), 3 | 2 << 3, &[from, t], b"{}");
        add(format!("doc-stranger-{t}"), 3, &[MALLORY as u8, t], b"{}");
        add(
            format!("doc-tier-{t}"),
            3,
            &[from, t],
            br#"{"tier":"family","scope":{"may_initiate":false}}"#,
        );
        add(format!("env-{t}"), 6, &[from, t], br#"{"seq":9}"#);
        add(
            format!("env-keep-{t}"),
            6,
            &[from, t | 0x80],
            br#"{"ttl":"7d"}"#,
        );
    }
    for (t, (from, _)) in w.requests.iter().enumerate() {
        let (t, from) = (t as u8, *from as u8);
        add(format!("probe-{t}"), 4, &[from, t], b"{}");
        add(
            format!("probe-mallory-{t}"),
            4,
            &[MALLORY as u8, t],
            br#"{"greeting":"hey"}"#,
        );
        add(format!("probe-old-{t}"), 4 | 5 << 3, &[from, t], b"{}");
    }
    // Sequences: a gap then its fill; a message then its replay.
    let msg = br#"{"type":"note/text","text":"x"}"#;
    let mut seq = |name: &str, steps: &[(u8, u8, u8)]| {
        let mut v = vec![7u8];
        for (s, from, chain) in steps {
            v.extend_from_slice(&[*s, 2 + msg.len() as u8, *from, *chain]);
            v.extend_from_slice(msg);
        }
        seeds.push((name.into(), v));
    };
    seq(
        "seq-gap-fill",
        &[(2, BOB as u8, 1), (2, BOB as u8, 0), (2, BOB as u8, 0)],
    );
    seq(
        "seq-carol",
        &[
            (2, CAROL as u8, 0),
            (2, CAROL as u8, 0),
            (2, CAROL as u8, 1),
        ],
    );
    seq("seq-erin", &[(2, ERIN as u8, 1), (2, ERIN as u8, 0)]);
    seq(
        "seq-fork",
        &[(2, BOB as u8, 0), (2, BOB as u8, 2), (2, BOB as u8, 0)],
    );
    let n = seeds.len();
    for (name, data) in seeds {
        std::fs::write(dir.join(name), data)?;
    }
    Ok(n)
}
