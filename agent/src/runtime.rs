//! The runtime: carriers → core → store → effects.
//!
//! Each input runs in one store transaction (`BEGIN IMMEDIATE`, so the
//! listener and a command in another terminal take turns): the state is
//! reloaded if another process committed since, the core decides, and its
//! writes and events commit before any effect is carried out (§7
//! persistence). The outcome of an effect (what the relays said) is the
//! next input.

use std::sync::Arc;
use std::time::Duration;

use rdv_agent_core::agent::PublishOutcome as CoreOutcome;
use rdv_agent_core::state::State;
use rdv_agent_core::{Agent, Command, Ctx, Effect, Event, Input, Output};
use rdv_proto::AgentKey;
use rdv_proto::time::{Instant, format_time};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::home::Home;
use crate::store::Store;
use crate::transport::nostr::{CarrierOptions, NostrCarrier, PublishOutcome, Query, Refusal};

/// How many effect → outcome rounds one command may take (a failed
/// carrier heals to the next one at once; retries wait for a tick).
const MAX_ROUNDS: usize = 8;

/// How often the listener retries what is due (§6.2 backoff).
pub const TICK: Duration = Duration::from_secs(5);

/// Options the front-end sets.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long a publish waits for the relays' OK.
    pub publish_timeout: Duration,
    /// How long a fetch waits for EOSE.
    pub fetch_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            publish_timeout: Duration::from_secs(10),
            fetch_timeout: Duration::from_secs(8),
        }
    }
}

/// One agent's home, open: its store, its state and its carriers.
pub struct Runtime {
    home: Home,
    store: Store,
    agent: Agent,
    generation: u64,
    nostr: Option<Arc<NostrCarrier>>,
    opts: Options,
    /// Set when relays, topics or policy changed: the listener subscribes again.
    pub resubscribe: bool,
}

fn now() -> Instant {
    time::OffsetDateTime::now_utc()
}

impl Runtime {
    /// Opens the home's agent.
    pub async fn open(home: Home, opts: Options) -> Result<Runtime> {
        if !home.has_agent() {
            return Err(Error::Agent(rdv_agent_core::Error::NoAgent));
        }
        let seed = home.read_seed()?;
        let key = AgentKey::from_seed(*seed);
        let store = Store::open(&home.db_path()).await?;
        let mut rt = Runtime {
            home,
            store,
            agent: Agent::new(key, State::default()),
            generation: u64::MAX,
            nostr: None,
            opts,
            resubscribe: false,
        };
        rt.refresh().await?;
        if rt.agent.state.profile.is_none() {
            return Err(Error::Agent(rdv_agent_core::Error::NoAgent));
        }
        Ok(rt)
    }

    /// Creates the home and its agent (`force` replaces an existing one:
    /// a new key, a new agent).
    pub async fn init(
        home: Home,
        setup: rdv_agent_core::Setup,
        force: bool,
        opts: Options,
    ) -> Result<(Runtime, Value)> {
        if let Some(warning) = home.create()? {
            eprintln!("rdv: {warning}");
        }
        if home.has_agent() {
            if force && home.listener_running() {
                return Err(Error::Input(
                    "a process listens on this home: stop `rdv listen` before re-keying".into(),
                ));
            }
            if !force {
                let seed = home.read_seed()?;
                let id = AgentKey::from_seed(*seed).id().to_string();
                return Err(Error::Agent(rdv_agent_core::Error::AgentExists(id)));
            }
            // Re-keying: the old database belongs to the old key.
            for suffix in ["", "-wal", "-shm"] {
                let p = format!("{}{suffix}", home.db_path().display());
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let key = AgentKey::generate(&mut rand_core::OsRng);
        home.write_seed(key.seed())?;
        let store = Store::open(&home.db_path()).await?;
        let mut rt = Runtime {
            home,
            store,
            agent: Agent::new(key, State::default()),
            generation: u64::MAX,
            nostr: None,
            opts,
            resubscribe: false,
        };
        let reply = rt.command(Command::Init(setup)).await?;
        Ok((rt, reply))
    }

    pub fn home(&self) -> &Home {
        &self.home
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The agent as of the last refresh or input (read-only queries).
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Reloads the state if another process committed since.
    pub async fn refresh(&mut self) -> Result<()> {
        let generation = self.store.generation().await?;
        if generation != self.generation {
            let mut tx = self.store.begin().await?;
            let recs = tx.load_all().await?;
            let g = tx.generation().await?;
            drop(tx);
            self.agent.state = State::load(&recs)?;
            self.generation = g;
        }
        Ok(())
    }

    /// One input: decide, commit, and return what to carry out.
    pub async fn apply(&mut self, input: Input) -> Result<Output> {
        let mut tx = if input.is_outcome() {
            self.store.begin_outcome().await?
        } else {
            self.store.begin().await?
        };
        let generation = tx.generation().await?;
        if generation != self.generation {
            let recs = tx.load_all().await?;
            self.agent.state = State::load(&recs)?;
        }
        let mut rng = rand_core::OsRng;
        let t = now();
        // `Ctx` is not `Send`: scoped so that it never lives across an
        // await (the MCP server runs commands on a multi-threaded runtime).
        let handled = {
            let mut ctx = Ctx {
                now: t,
                rng: &mut rng,
            };
            self.agent.handle(input, &mut ctx)
        };
        let out = match handled {
            Ok(out) => out,
            Err(e) => {
                // Nothing of a failed input is kept: reload next time.
                self.generation = u64::MAX;
                return Err(e.into());
            }
        };
        let events: Vec<Value> = out
            .events
            .iter()
            .map(serde_json::to_value)
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::Store(format!("serializing an event: {e}")))?;
        let committed = async {
            tx.write(&out.writes).await?;
            if !events.is_empty() {
                tx.append_inbox(&events, &format_time(t)).await?;
            }
            tx.commit().await
        }
        .await;
        match committed {
            Ok(g) => self.generation = g,
            Err(e) => {
                self.generation = u64::MAX;
                return Err(e);
            }
        }
        if out.effects.iter().any(|e| matches!(e, Effect::Resubscribe)) {
            self.resubscribe = true;
        }
        Ok(out)
    }

    /// A command from the owner, with its effects carried out. The reply
    /// gains `delivery`: what the carriers said.
    pub async fn command(&mut self, c: Command) -> Result<Value> {
        let out = self.apply(Input::Command(c)).await?;
        let mut reply = out.reply.clone().unwrap_or(Value::Null);
        let report = self.carry(out.effects).await?;
        if let Value::Object(m) = &mut reply
            && !report.is_empty()
        {
            m.insert("delivery".into(), Value::Array(report));
        }
        Ok(reply)
    }

    /// Carries out effects, feeding each outcome back, for a bounded number
    /// of rounds. Returns one summary per publish.
    pub async fn carry(&mut self, mut effects: Vec<Effect>) -> Result<Vec<Value>> {
        let mut report = Vec::new();
        for _ in 0..MAX_ROUNDS {
            if effects.is_empty() {
                break;
            }
            let mut next = Vec::new();
            for e in effects {
                let Some((input, summary)) = self.perform(e).await? else {
                    continue;
                };
                report.push(summary);
                let out = self.apply(input).await?;
                next.extend(out.effects);
            }
            effects = next;
        }
        Ok(report)
    }

    async fn carrier(&mut self) -> Result<Arc<NostrCarrier>> {
        if let Some(c) = &self.nostr {
            return Ok(c.clone());
        }
        let keys = self.agent_key()?.nostr_keys()?;
        let allow_ws = self
            .agent
            .state
            .profile
            .as_ref()
            .is_some_and(|p| p.allow_ws);
        let c = Arc::new(
            NostrCarrier::new(
                keys,
                CarrierOptions {
                    allow_ws,
                    publish_timeout: self.opts.publish_timeout,
                    ..CarrierOptions::default()
                },
            )
            .await?,
        );
        self.nostr = Some(c.clone());
        Ok(c)
    }

    fn agent_key(&self) -> Result<AgentKey> {
        let seed = self.home.read_seed()?;
        Ok(AgentKey::from_seed(*seed))
    }

    /// One effect; the input that reports its outcome, and a summary.
    async fn perform(&mut self, e: Effect) -> Result<Option<(Input, Value)>> {
        Ok(match e {
            Effect::Resubscribe => None,
            // §5.2.1, §5.2.2: a probe gateway call.
            Effect::Gateway(call) => Some(crate::mailbox::perform(&self.home, call).await?),
            Effect::PublishNostr {
                delivery,
                event,
                relays,
            } => {
                let carrier = self.carrier().await?;
                let outcomes = carrier.publish(&event, &relays).await;
                let summary = serde_json::json!({
                    "carrier": "nostr",
                    "accepted": outcomes.iter().filter(|o| matches!(o.outcome, PublishOutcome::Accepted)).map(|o| o.relay.clone()).collect::<Vec<_>>(),
                    "failed": outcomes.iter().filter(|o| !matches!(o.outcome, PublishOutcome::Accepted)).map(|o| o.relay.clone()).collect::<Vec<_>>(),
                });
                let outcomes = outcomes
                    .into_iter()
                    .map(|o| (o.relay, core_outcome(o.outcome)))
                    .collect();
                Some((Input::Published { delivery, outcomes }, summary))
            }
            Effect::PublishNtfy {
                delivery,
                server,
                topic,
                body,
            } => {
                let r = tokio::task::spawn_blocking(move || {
                    rdv_bridge_client::ntfy::NtfyClient::new(&server)
                        .and_then(|c| c.publish(&topic, body.as_bytes()).map(|_| ()))
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| Error::Carrier(e.to_string()))?;
                Some(carried("ntfy", delivery, r))
            }
            Effect::PublishMqtt {
                delivery,
                url,
                topic,
                body,
                retain,
            } => {
                let r = tokio::task::spawn_blocking(move || {
                    use rdv_bridge_client::mqtt::{MqttPublisher, fresh_client_id};
                    MqttPublisher::connect(&url, &fresh_client_id("rdv"))
                        .and_then(|mut p| {
                            p.publish(&topic, body.as_bytes(), rumqttc_qos1(), retain)?;
                            p.disconnect()
                        })
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| Error::Carrier(e.to_string()))?;
                Some(carried("mqtt", delivery, r))
            }
        })
    }

    /// Events committed after `cursor`.
    pub async fn inbox_after(&self, cursor: u64, limit: u32) -> Result<Vec<(u64, Event)>> {
        let rows = self.store.inbox_after(cursor, limit).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(c, v)| serde_json::from_value(v).ok().map(|e| (c, e)))
            .collect())
    }

    /// Fetches events from relays (discovery).
    pub async fn fetch(
        &mut self,
        relays: &[String],
        q: &Query,
    ) -> Result<Vec<crate::transport::nostr::Received>> {
        let carrier = self.carrier().await?;
        carrier.fetch(relays, q, self.opts.fetch_timeout).await
    }

    /// The long-running agent (`rdv listen`): subscribes on every carrier,
    /// feeds what arrives to the core, retries on each tick, until
    /// `shutdown` resolves. `on_event` sees each event as it commits.
    pub async fn listen(
        &mut self,
        shutdown: impl std::future::Future<Output = ()>,
        mut on_event: impl FnMut(&Event),
    ) -> Result<()> {
        // A `rdv status` probing the lock holds it for an instant: retry
        // briefly before concluding another listener runs.
        let mut lock = None;
        for _ in 0..20 {
            if let Some(l) = self.home.try_lock_listener()? {
                lock = Some(l);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _lock = lock.ok_or_else(|| {
            Error::Input(
                "another process already listens on this home (rdv listen or rdv-mcp)".into(),
            )
        })?;
        let out = self.apply(Input::Command(Command::Start)).await?;
        for e in &out.events {
            on_event(e);
        }
        self.carry(out.effects).await?;
        // Deliveries a crash left behind go again, decided on the committed
        // state like any input.
        let out = self.apply(Input::Resume).await?;
        self.carry(out.effects).await?;

        let mut sub = self.subscribe().await?;
        let mut subscribed = self.agent.subscriptions()?;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                got = sub.recv() => {
                    let Some(input) = got else { break };
                    let out = match self.apply(input).await {
                        Ok(o) => o,
                        Err(e) => {
                            tracing::warn!(error = %e, "an inbound event could not be handled");
                            continue;
                        }
                    };
                    for e in &out.events { on_event(e); }
                    if let Err(e) = self.carry_reporting(out.effects, &mut on_event).await {
                        tracing::warn!(error = %e, "carrying effects failed");
                    }
                }
                _ = tick.tick() => {
                    let out = self.apply(Input::Tick).await?;
                    for e in &out.events { on_event(e); }
                    if let Err(e) = self.carry_reporting(out.effects, &mut on_event).await {
                        tracing::warn!(error = %e, "carrying effects failed");
                    }
                    // Relays, topics or fallbacks changed, here or in another
                    // terminal (the tick reloaded what it committed).
                    let now_subs = self.agent.subscriptions()?;
                    if self.resubscribe || now_subs != subscribed {
                        self.resubscribe = false;
                        sub = self.subscribe().await?;
                        subscribed = now_subs;
                    }
                }
            }
        }
        Ok(())
    }

    async fn carry_reporting(
        &mut self,
        effects: Vec<Effect>,
        on_event: &mut impl FnMut(&Event),
    ) -> Result<()> {
        let mut pending = effects;
        for _ in 0..MAX_ROUNDS {
            if pending.is_empty() {
                break;
            }
            let mut next = Vec::new();
            for e in pending {
                let Some((input, _)) = self.perform(e).await? else {
                    continue;
                };
                let out = self.apply(input).await?;
                for e in &out.events {
                    on_event(e);
                }
                next.extend(out.effects);
            }
            pending = next;
        }
        Ok(())
    }

    /// Subscribes to envelopes for us (`#p`) and, apart (a filter's tags
    /// must all match), our listen topics (`#t`), since the longest envelope
    /// lifetime, so what came while we were away arrives (replays are
    /// dropped by the channel, §6.4). Both feed one stream.
    async fn subscribe(&mut self) -> Result<Inbound> {
        let subs = self.agent.subscriptions()?;
        let since = (now().unix_timestamp() - rdv_proto::consts::ENVELOPE_MAX_TTL_SECS).max(0);
        let carrier = self.carrier().await?;
        let mut queries = vec![Query {
            p: Some(subs.p.clone()),
            topics: Vec::new(),
            d: Vec::new(),
            since: Some(since as u64),
            limit: None,
        }];
        if !subs.topics.is_empty() {
            queries.push(Query {
                p: None,
                topics: subs.topics.clone(),
                d: Vec::new(),
                since: Some(since as u64),
                limit: None,
            });
        }
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let mut tasks = Vec::new();
        for q in queries {
            let mut sub = carrier.subscribe(&subs.relays, q).await?;
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(r) = sub.recv().await {
                    let input = Input::Nostr {
                        relay: r.relay,
                        json: r.json,
                    };
                    if tx.send(input).await.is_err() {
                        break;
                    }
                }
            }));
        }
        // §6.3: the fallback carriers on our card, envelopes as they are,
        // and (§4.4 item 1) the dtopics of our listed addresses on the same
        // servers, for topic probes.
        let mut ntfy_servers: Vec<String> = Vec::new();
        for (server, topic) in subs.ntfy {
            if !ntfy_servers.contains(&server) {
                ntfy_servers.push(server.clone());
            }
            tasks.push(tokio::spawn(ntfy_inbound(
                server,
                vec![topic],
                Listen::Envelopes,
                since as u64,
                tx.clone(),
            )));
        }
        let mut mqtt_brokers: Vec<String> = Vec::new();
        for (url, topic) in subs.mqtt {
            if !mqtt_brokers.contains(&url) {
                mqtt_brokers.push(url.clone());
            }
            let tx = tx.clone();
            tasks.push(tokio::task::spawn_blocking(move || {
                mqtt_inbound(&url, &[topic], Listen::Envelopes, &tx)
            }));
        }
        if !subs.topics.is_empty() {
            for server in ntfy_servers {
                tasks.push(tokio::spawn(ntfy_inbound(
                    server,
                    subs.topics.clone(),
                    Listen::Topics,
                    since as u64,
                    tx.clone(),
                )));
            }
            for url in mqtt_brokers {
                let (tx, topics) = (tx.clone(), subs.topics.clone());
                tasks.push(tokio::task::spawn_blocking(move || {
                    mqtt_inbound(&url, &topics, Listen::Topics, &tx)
                }));
            }
        }
        // §5.2.1: the gateway inboxes of our proved mailboxes.
        crate::mailbox::spawn_inbox(&self.agent, &self.home, &tx, &mut tasks);
        Ok(Inbound { rx, tasks })
    }
}

/// Waits after a failed fallback subscription before trying again.
const FALLBACK_RETRY: Duration = Duration::from_secs(5);

/// What a fallback subscription carries: envelopes to us (our agent
/// topic), or whatever is posted on our listen topics (§4.4: probes).
#[derive(Debug, Clone, Copy)]
enum Listen {
    Envelopes,
    Topics,
}

impl Listen {
    /// The input for one message, bounded first (§6.4).
    fn input(self, carrier: &str, topic: &str, bytes: Vec<u8>) -> Option<Input> {
        if bytes.len() > rdv_proto::consts::ENVELOPE_MAX_BYTES {
            return None;
        }
        Some(match self {
            Listen::Envelopes => Input::Envelope {
                carrier: carrier.to_string(),
                bytes,
            },
            Listen::Topics => Input::Topic {
                carrier: carrier.to_string(),
                topic: topic.to_string(),
                bytes,
            },
        })
    }
}

/// Receives messages on ntfy topics, resubscribing after a failure from
/// the last message seen (`since=<id>`), so none is missed.
async fn ntfy_inbound(
    server: String,
    topics: Vec<String>,
    listen: Listen,
    since: u64,
    tx: tokio::sync::mpsc::Sender<Input>,
) {
    use rdv_bridge_client::ntfy::{NtfyClient, Since};
    use tokio_stream::StreamExt;
    let mut since = Since::Time(since);
    let carrier = format!("ntfy:{server}");
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    loop {
        if tx.is_closed() {
            return;
        }
        let stream = match NtfyClient::new(&server) {
            Ok(c) => c.subscribe_stream(&names, &since).await,
            Err(e) => Err(e),
        };
        match stream {
            Ok(mut s) => {
                while let Some(m) = s.next().await {
                    let Ok(m) = m else { break };
                    if !m.is_message() {
                        continue;
                    }
                    since = Since::Id(m.id.clone());
                    // Only the topics asked for (a server may send others).
                    if !topics.contains(&m.topic) {
                        continue;
                    }
                    let Ok(bytes) = m.body() else { continue };
                    let Some(input) = listen.input(&carrier, &m.topic, bytes) else {
                        continue;
                    };
                    if tx.send(input).await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "ntfy subscription failed"),
        }
        tokio::time::sleep(FALLBACK_RETRY).await;
    }
}

/// Receives messages on MQTT topics (a blocking client, on its own
/// thread), reconnecting after a failure until the listener stops.
fn mqtt_inbound(
    url: &str,
    topics: &[String],
    listen: Listen,
    tx: &tokio::sync::mpsc::Sender<Input>,
) {
    use rdv_bridge_client::mqtt::{MqttSubscription, QoS, fresh_client_id};
    let carrier = format!("mqtt:{url}");
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    while !tx.is_closed() {
        match MqttSubscription::connect(url, &fresh_client_id("rdv"), &names, QoS::AtLeastOnce) {
            Ok(mut sub) => loop {
                if tx.is_closed() {
                    return;
                }
                match sub.recv_timeout(Duration::from_secs(1)) {
                    Ok(Some(p)) => {
                        if !topics.contains(&p.topic) {
                            continue;
                        }
                        let Some(input) = listen.input(&carrier, &p.topic, p.payload) else {
                            continue;
                        };
                        if tx.blocking_send(input).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "mqtt subscription ended");
                        break;
                    }
                }
            },
            Err(e) => tracing::debug!(error = %e, "mqtt subscription failed"),
        }
        std::thread::sleep(FALLBACK_RETRY);
    }
}

/// Every subscription of the listener, as one stream of inputs.
struct Inbound {
    rx: tokio::sync::mpsc::Receiver<Input>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Inbound {
    async fn recv(&mut self) -> Option<Input> {
        self.rx.recv().await
    }
}

impl Drop for Inbound {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The input that reports a non-Nostr carrier's outcome, and its summary.
fn carried(carrier: &str, delivery: String, r: std::result::Result<(), String>) -> (Input, Value) {
    let summary = serde_json::json!({"carrier": carrier, "ok": r.is_ok()});
    let (ok, reason) = match r {
        Ok(()) => (true, String::new()),
        Err(e) => (false, e),
    };
    (
        Input::Carried {
            delivery,
            ok,
            reason,
        },
        summary,
    )
}

fn rumqttc_qos1() -> rdv_bridge_client::mqtt::QoS {
    rdv_bridge_client::mqtt::QoS::AtLeastOnce
}

fn core_outcome(o: PublishOutcome) -> CoreOutcome {
    match o {
        PublishOutcome::Accepted => CoreOutcome::Accepted,
        PublishOutcome::Refused { kind, message } => CoreOutcome::Refused {
            kind: match kind {
                Refusal::Blocked => "blocked",
                Refusal::RateLimited => "rate-limited",
                Refusal::Restricted => "restricted",
                Refusal::Duplicate => "duplicate",
                Refusal::Invalid => "invalid",
                Refusal::Other => "other",
            }
            .into(),
            message,
        },
        PublishOutcome::Unreachable { reason } => CoreOutcome::Unreachable { reason },
    }
}
