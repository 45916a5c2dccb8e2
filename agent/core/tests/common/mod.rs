//! A network of agents in memory: each node is a core agent whose writes
//! are kept as records (and can be reloaded, as after a crash), and a relay
//! that hands every published event to the nodes it concerns. No sockets:
//! this is what the sans-I/O core buys.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;

use rdv_agent_core::record::{Record, Table};
use rdv_agent_core::state::State;
use rdv_agent_core::{Agent, Command, Ctx, Effect, Event, Input, Output, PublishOutcome, Setup};
use rdv_proto::time::{Instant, parse_time};
use rdv_proto::{AgentId, AgentKey};
use serde_json::Value;

pub const RELAY: &str = "wss://relay.test";

pub fn t0() -> Instant {
    parse_time("t", "2026-12-01T10:00:00Z").unwrap()
}

pub struct Node {
    pub agent: Agent,
    pub key: [u8; 32],
    pub records: BTreeMap<(Table, String), Value>,
    pub inbox: Vec<Event>,
}

impl Node {
    pub fn new(seed: u8) -> Node {
        let key = AgentKey::from_seed([seed; 32]);
        Node {
            agent: Agent::new(key, State::default()),
            key: [seed; 32],
            records: BTreeMap::new(),
            inbox: Vec::new(),
        }
    }

    pub fn id(&self) -> AgentId {
        self.agent.id().clone()
    }

    /// Keeps an output's writes and events, as the store would.
    pub fn keep(&mut self, out: &Output) {
        for w in &out.writes {
            match &w.value {
                Some(v) => {
                    self.records.insert((w.table, w.key.clone()), v.clone());
                }
                None => {
                    self.records.remove(&(w.table, w.key.clone()));
                }
            }
        }
        self.inbox.extend(out.events.iter().cloned());
    }

    /// Rebuilds the agent from its records only (a restart, or a crash
    /// after the last commit).
    pub fn reload(&mut self) {
        let recs: Vec<Record> = self
            .records
            .iter()
            .map(|((t, k), v)| Record {
                table: *t,
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        let state = State::load(&recs).unwrap();
        self.agent = Agent::new(AgentKey::from_seed(self.key), state);
    }

    pub fn handle(&mut self, input: Input, now: Instant) -> rdv_agent_core::Result<Output> {
        let mut rng = rand_core::OsRng;
        let mut ctx = Ctx { now, rng: &mut rng };
        let out = self.agent.handle(input, &mut ctx);
        match out {
            Ok(o) => {
                self.keep(&o);
                // Every later decision is made by the agent rebuilt from its
                // records alone: what was not committed does not exist.
                self.reload();
                Ok(o)
            }
            Err(e) => {
                // Nothing of a failed input is kept.
                self.reload();
                Err(e)
            }
        }
    }

    pub fn events_of(&self, kind: &str) -> Vec<Value> {
        self.inbox
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .filter(|v| v["kind"] == kind)
            .collect()
    }
}

pub fn setup(addresses: &[&str]) -> Setup {
    Setup {
        addresses: addresses.iter().map(|a| (a.to_string(), true)).collect(),
        relays: vec![RELAY.to_string()],
        public_pointer: true,
        inbound: "prompt".into(),
        other_rendezvous: Vec::new(),
        allow_ws: false,
        directories: Vec::new(),
        suggest: true,
    }
}

/// The nodes and what the relay holds.
pub struct Net {
    pub nodes: Vec<Node>,
    pub now: Instant,
    /// Every event the relay accepted (JSON).
    pub log: Vec<Value>,
    /// Relays that refuse everything, with the refusal.
    pub down: bool,
}

impl Net {
    pub fn new(n: usize) -> Net {
        Net {
            nodes: (0..n).map(|i| Node::new(i as u8 + 1)).collect(),
            now: t0(),
            log: Vec::new(),
            down: false,
        }
    }

    pub fn advance(&mut self, secs: i64) {
        self.now += time::Duration::seconds(secs);
    }

    pub fn init(&mut self, i: usize, addresses: &[&str]) {
        let now = self.now;
        let out = self.nodes[i]
            .handle(Input::Command(Command::Init(setup(addresses))), now)
            .unwrap();
        self.carry(i, out.effects);
    }

    /// A command on node `i`, its effects carried to quiescence.
    pub fn cmd(&mut self, i: usize, c: Command) -> rdv_agent_core::Result<Value> {
        let now = self.now;
        let out = self.nodes[i].handle(Input::Command(c), now)?;
        let reply = out.reply.clone().unwrap_or(Value::Null);
        self.carry(i, out.effects);
        Ok(reply)
    }

    /// Publishes what node `from` asked for; hands each event to every
    /// node it is for; reports the outcome back.
    pub fn carry(&mut self, from: usize, effects: Vec<Effect>) {
        let mut queue: Vec<(usize, Effect)> = effects.into_iter().map(|e| (from, e)).collect();
        let mut rounds = 0;
        while let Some((src, e)) = queue.pop() {
            rounds += 1;
            assert!(rounds < 10_000, "the network does not settle");
            let Effect::PublishNostr {
                delivery,
                event,
                relays,
            } = e
            else {
                continue;
            };
            let now = self.now;
            let outcome = if self.down {
                PublishOutcome::Unreachable {
                    reason: "connection refused".into(),
                }
            } else {
                PublishOutcome::Accepted
            };
            let outcomes = relays
                .iter()
                .map(|r| (r.clone(), outcome.clone()))
                .collect();
            let out = self.nodes[src]
                .handle(Input::Published { delivery, outcomes }, now)
                .unwrap();
            queue.extend(out.effects.into_iter().map(|e| (src, e)));
            if self.down {
                continue;
            }
            let json = serde_json::to_value(&*event).unwrap();
            self.log.push(json.clone());
            let raw = serde_json::to_vec(&json).unwrap();
            for i in 0..self.nodes.len() {
                if i == src || !self.concerns(i, &json) {
                    continue;
                }
                let out = self.nodes[i]
                    .handle(
                        Input::Nostr {
                            relay: RELAY.into(),
                            json: raw.clone(),
                        },
                        now,
                    )
                    .unwrap();
                queue.extend(out.effects.into_iter().map(|e| (i, e)));
            }
        }
    }

    /// Whether node `i` is subscribed to this event (#p or #t).
    pub fn concerns(&self, i: usize, ev: &Value) -> bool {
        let Ok(subs) = self.nodes[i].agent.subscriptions() else {
            return false;
        };
        ev["tags"].as_array().unwrap().iter().any(|t| {
            (t[0] == "p" && t[1] == subs.p.as_str())
                || (t[0] == "t" && subs.topics.iter().any(|x| t[1] == x.as_str()))
        })
    }

    /// Feeds raw event JSON to node `i` as if a relay sent it.
    pub fn inject(&mut self, i: usize, ev: &Value) -> Output {
        let now = self.now;
        let out = self.nodes[i]
            .handle(
                Input::Nostr {
                    relay: RELAY.into(),
                    json: serde_json::to_vec(ev).unwrap(),
                },
                now,
            )
            .unwrap();
        let effects = out.effects.clone();
        self.carry(i, effects);
        out
    }

    pub fn card(&self, i: usize) -> Value {
        self.nodes[i].agent.state.profile().unwrap().card.clone()
    }
}

// ---- restore (§6.4.1) ------------------------------------------------------

impl Node {
    /// Every record, as the store would load them.
    pub fn record_list(&self) -> Vec<Record> {
        self.records
            .iter()
            .map(|((t, k), v)| Record {
                table: *t,
                key: k.clone(),
                value: v.clone(),
            })
            .collect()
    }

    /// A node with this seed whose store holds exactly `records`: a home
    /// restored from a backup, with an empty inbox.
    pub fn from_records(seed: [u8; 32], records: &[Record]) -> Node {
        let state = State::load(records).unwrap();
        Node {
            agent: Agent::new(AgentKey::from_seed(seed), state),
            key: seed,
            records: records
                .iter()
                .map(|r| ((r.table, r.key.clone()), r.value.clone()))
                .collect(),
            inbox: Vec::new(),
        }
    }
}

impl Net {
    /// A command on node `i` whose effects are carried `secs` later (what
    /// the relays do with them happens after the command's second).
    pub fn cmd_then(&mut self, i: usize, c: Command, secs: i64) -> rdv_agent_core::Result<Value> {
        let now = self.now;
        let out = self.nodes[i].handle(Input::Command(c), now)?;
        let reply = out.reply.clone().unwrap_or(Value::Null);
        self.advance(secs);
        self.carry(i, out.effects);
        Ok(reply)
    }

    /// An envelope from node `from` to node `to` with any payload, sealed
    /// on `from`'s real outbound chain (which is committed, as a send
    /// would), as the Nostr event a relay would hand over. Not published.
    pub fn forge(&mut self, from: usize, to: usize, payload: &Value) -> Value {
        let key = AgentKey::from_seed(self.nodes[from].key);
        let to_id = self.nodes[to].id();
        let mut out = self.nodes[from]
            .agent
            .state
            .channels_out
            .get(&to_id)
            .cloned()
            .unwrap_or_default();
        let (seq, prev) = out.next();
        let prev = prev.map(str::to_string);
        let mut rng = rand_core::OsRng;
        let params = rdv_proto::envelope::SealParams::new(
            &key,
            &to_id,
            seq,
            prev.as_deref(),
            self.now,
            &mut rng,
        );
        let env = rdv_proto::envelope::seal(payload, &params).unwrap();
        let header = rdv_proto::envelope::verify_value(&env, self.now)
            .unwrap()
            .header()
            .clone();
        out.record(&header, env.clone());
        self.nodes[from].records.insert(
            (Table::ChannelOut, to_id.to_string()),
            serde_json::to_value(&out).unwrap(),
        );
        self.nodes[from].reload();
        self.wrap(from, &env)
    }

    /// An envelope node `i` sealed, in a Nostr event of its carrier key.
    pub fn wrap(&self, i: usize, env: &Value) -> Value {
        let key = AgentKey::from_seed(self.nodes[i].key);
        let mut aux = [0u8; 32];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut aux);
        let created_at = self.now.unix_timestamp() as u64;
        let ev = rdv_proto::nostr_event::envelope_event(
            env,
            &key.nostr_keys().unwrap(),
            created_at,
            aux,
        )
        .unwrap();
        serde_json::to_value(&ev).unwrap()
    }
}

// ---- set-ups the rule tests share -----------------------------------------

/// The default scope an owner grants in the tests (§5.3).
pub fn grant_scope() -> Value {
    rdv_agent_core::agent::default_scope(false, &[], "100/day")
}

/// Node `i`'s records, each value as the bytes the store would hold.
pub type Snapshot = Vec<(Table, String, Vec<u8>)>;

impl Node {
    /// Every record, byte for byte, for comparing before and after an input.
    pub fn snapshot(&self) -> Snapshot {
        self.records
            .iter()
            .map(|((t, k), v)| (*t, k.clone(), serde_json::to_vec(v).unwrap()))
            .collect()
    }
}

impl Net {
    /// Node `from` probes `address` (a topic probe, §4.4); returns the
    /// probe's request id.
    pub fn probe(&mut self, from: usize, address: &str, label: Option<&str>) -> String {
        let r = self
            .cmd(
                from,
                Command::Request {
                    to: rdv_agent_core::RequestTo::Address(address.into()),
                    greeting: "Hi, Bob's agent".into(),
                    label: label.map(str::to_string),
                },
            )
            .unwrap();
        r["request_id"].as_str().unwrap().to_string()
    }

    /// The id of the (first) request pending at node `i`.
    pub fn pending_id(&self, i: usize) -> String {
        self.nodes[i]
            .agent
            .state
            .pending
            .keys()
            .next()
            .expect("a pending request")
            .clone()
    }

    /// Node `requester` probes `address` of node `grantor`, whose owner
    /// grants (tier friend, label "Bob"); the requester confirms. Both are
    /// initialised already.
    pub fn befriend(&mut self, requester: usize, grantor: usize, address: &str) {
        let probe_id = self.probe(requester, address, Some("Alice"));
        let req = self.pending_id(grantor);
        self.cmd(
            grantor,
            Command::Grant {
                request_id: req,
                tier: "friend".into(),
                scope: grant_scope(),
                label: Some("Bob".into()),
            },
        )
        .unwrap();
        self.cmd(
            requester,
            Command::Confirm {
                request_id: probe_id,
                grantor: None,
                label: None,
            },
        )
        .unwrap();
    }

    /// A `note/text` message from node `from` to node `to`; the reply.
    pub fn send_text(&mut self, from: usize, to: usize, text: &str) -> Value {
        let id = self.nodes[to].id();
        self.cmd(
            from,
            Command::Send {
                to: id,
                payload: serde_json::json!({"type": "note/text", "text": text}),
            },
        )
        .unwrap()
    }

    /// A topic probe (§4.4) signed by node `from`'s key, naming `to_hint`,
    /// posted on `topic`, as the Nostr event a relay would hand over. Not
    /// published, and nothing is recorded on `from`.
    pub fn probe_event(&self, from: usize, to_hint: &str, topic: &str) -> Value {
        let key = AgentKey::from_seed(self.nodes[from].key);
        let mut rng = rand_core::OsRng;
        let mut ctx = Ctx {
            now: self.now,
            rng: &mut rng,
        };
        let request = rdv_proto::doc::request::RequestBuilder {
            id: ctx.uuid(),
            to_hint: Some(to_hint.into()),
            card: self.card(from),
            greeting: "hello".into(),
            capabilities_offered: Vec::new(),
            ts: self.now,
        }
        .sign(&key)
        .unwrap();
        let ev = rdv_proto::nostr_event::probe_event(
            &request,
            topic,
            &key.nostr_keys().unwrap(),
            self.now.unix_timestamp() as u64,
            [7; 32],
        )
        .unwrap();
        serde_json::to_value(&ev).unwrap()
    }
}
