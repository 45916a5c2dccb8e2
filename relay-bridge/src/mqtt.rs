//! The MQTT side (issue #5): an in-process `rumqttd` broker (v4, v5 and
//! WebSocket listeners) or an external broker, bridged both ways to the ntfy
//! topic space. MQTT topic `<prefix>T` is ntfy topic `T`; payloads go across
//! byte for byte, once, and never back where they came from.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rdv_bridge_client::PACKET_OVERHEAD;
use tokio::sync::mpsc;

use crate::auth::{Auth, MqttClient, Perm};
use crate::config::{FILTER_LOG_SEGMENTS, MqttConfig};
use crate::hub::{Draft, Hub, Item, Origin};
use crate::limits::{ConnGuard, Limited, Limits, Slowed, SubGuard, Visitor};
use crate::message::UnixTime as _;
use crate::{Error, Result, topic};
use rumqttd::gate::{ConnectionGate, LinkGate, Verdict};

/// The addresses the embedded broker listens on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MqttAddrs {
    pub v4: Option<SocketAddr>,
    pub v5: Option<SocketAddr>,
    pub ws: Option<SocketAddr>,
}

/// Our own publications on their way back from the broker: the bridge
/// subscribes to everything, so what it publishes returns to it, and must not
/// be carried to ntfy a second time. Counted by topic, then (length, payload
/// hash): a publication on a topic with nothing of ours in flight, or of a
/// length none of ours has, is told apart without hashing its payload (a
/// 32 KB payload's hash was an eighth of the bridge's CPU at full MQTT rate,
/// docs/benchmarks/relay-bridge.md).
#[derive(Debug, Default)]
pub struct EchoFilter {
    hasher: RandomState,
    pending: Mutex<EchoPending>,
}

#[derive(Debug, Default)]
struct EchoPending {
    /// Per topic: (payload length, payload hash, copies expected).
    by_topic: HashMap<String, Vec<(usize, u64, u32)>>,
    total: usize,
}

/// Most echoes awaited at once; past it (a broker that dropped some), all
/// are forgotten rather than grow without bound.
const ECHO_MAX: usize = 100_000;

impl EchoFilter {
    /// Records a publication about to go out.
    pub fn expect(&self, topic: &str, payload: &[u8]) {
        let h = self.hasher.hash_one(payload);
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.total >= ECHO_MAX {
            p.by_topic.clear();
            p.total = 0;
        }
        p.total += 1;
        let list = p.by_topic.entry(topic.to_owned()).or_default();
        match list
            .iter_mut()
            .find(|(l, x, _)| *l == payload.len() && *x == h)
        {
            Some(e) => e.2 += 1,
            None => list.push((payload.len(), h, 1)),
        }
    }

    /// True (once per expected copy) if this publication is our own echo.
    pub fn is_echo(&self, topic: &str, payload: &[u8]) -> bool {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(list) = p.by_topic.get_mut(topic) else {
            return false;
        };
        if !list.iter().any(|(l, _, _)| *l == payload.len()) {
            return false;
        }
        let h = self.hasher.hash_one(payload);
        let Some(i) = list
            .iter()
            .position(|(l, x, _)| *l == payload.len() && *x == h)
        else {
            return false;
        };
        list[i].2 -= 1;
        if list[i].2 == 0 {
            list.swap_remove(i);
        }
        if list.is_empty() {
            p.by_topic.remove(topic);
        }
        p.total = p.total.saturating_sub(1);
        true
    }
}

/// True if `body` is a valid public-pointer card (SPEC §4.4, §6.2): the
/// one body the bridge publishes to MQTT as its topic's retained message, as
/// Nostr relays keep the newest replaceable event. Anything else is carried
/// without looking (§3.4).
pub fn public_pointer_card(body: &[u8], now_secs: i64) -> Option<rdv_proto::time::Instant> {
    use rdv_proto::consts::CARD_MAX_BYTES;
    if body.len() > CARD_MAX_BYTES || body.first() != Some(&b'{') {
        return None;
    }
    let doc = rdv_proto::canon::parse(body, CARD_MAX_BYTES).ok()?;
    let now = rdv_proto::time::from_unix(now_secs).ok()?;
    let c = rdv_proto::doc::card::Card::verify(&doc, now, true).ok()?;
    (c.public_pointer && c.public).then_some(c.created)
}

/// Per topic, the `created` of the card last retained: an older card
/// (a replay) never replaces a newer one (§4.3: the newest card wins).
#[derive(Debug, Default)]
pub struct Retained(Mutex<HashMap<String, rdv_proto::time::Instant>>);

impl Retained {
    /// True if a card created at `created` should become `topic`'s retained
    /// message; records it.
    pub fn admit(&self, topic: &str, created: rdv_proto::time::Instant) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.get(topic).is_some_and(|c| *c > created) {
            return false;
        }
        if m.len() >= 1_000_000 && !m.contains_key(topic) {
            return false;
        }
        m.insert(topic.to_owned(), created);
        true
    }
}

/// Carries one publication from MQTT to ntfy, if it maps to a topic.
async fn inbound(
    hub: &Hub,
    echo: Option<&EchoFilter>,
    prefix: &str,
    mqtt_topic: &[u8],
    payload: Bytes,
    limit: usize,
) {
    let Ok(t) = std::str::from_utf8(mqtt_topic) else {
        return;
    };
    if echo.is_some_and(|e| e.is_echo(t, &payload)) {
        return;
    }
    let Some(name) = t.strip_prefix(prefix) else {
        return;
    };
    if topic::validate(name).is_err() {
        return;
    }
    if payload.len() > limit {
        crate::metrics::refused("mqtt_too_large");
        return;
    }
    let d = Draft {
        topic: name.to_owned(),
        // Shared with the broker's frame, not copied.
        body: payload,
        cache: true,
        ..Default::default()
    };
    if let Err(e) = hub.publish(d, Origin::Mqtt).await {
        tracing::warn!(error = %e, "mqtt → ntfy publish failed");
    }
}

/// Publications the MQTT → ntfy carrier missed: it reads one filter's log,
/// whose offsets are continuous, so a jump between two forwards is what
/// the broker dropped while the carrier was more than `filter_log_bytes`
/// behind (a cache or database too slow for the inflow). Counted and
/// logged: those messages reached MQTT subscribers but neither ntfy
/// subscribers nor the cache.
#[derive(Debug, Default)]
struct Gap {
    last: Option<u64>,
}

impl Gap {
    /// Notes one forward's offset; returns how many were skipped before it.
    fn check(&mut self, cursor: Option<(u64, u64)>) -> u64 {
        // Retained messages come without an offset.
        let Some((_, off)) = cursor else {
            return 0;
        };
        let mut lost = 0;
        if let Some(prev) = self.last
            && off > prev + 1
        {
            lost = off - prev - 1;
            metrics::counter!("rdv_bridge_mqtt_to_ntfy_lost_total").increment(lost);
            tracing::warn!(
                lost,
                "MQTT → ntfy carrier fell behind the broker's log; publications lost to ntfy and the cache"
            );
        }
        self.last = Some(off);
        lost
    }
}

/// Resolves port 0 to a free port: rumqttd binds inside its own threads and
/// does not report the address, so we find one and hand it over.
fn reserve(addr: SocketAddr) -> Result<SocketAddr> {
    if addr.port() != 0 {
        return Ok(addr);
    }
    let l = std::net::TcpListener::bind(addr)?;
    l.local_addr().map_err(Error::from)
}

/// The embedded broker's connection gate (issue #5; the hook is the rdv
/// patch in vendor/rumqttd/PATCHES.md): a visitor's MQTT connections, and
/// their publications and subscriptions, are held to the same token ACLs,
/// subscription slots and bytes per day as HTTP, and to MQTT's own packet
/// buckets (issue #14), which slow a publisher rather than close it. Only
/// sockets pass here: the bridge's own link is in-process and never gated.
#[derive(Clone)]
pub struct Gate {
    auth: Arc<Auth>,
    /// None: ACLs only (no visitor limits).
    limits: Option<Arc<Limits>>,
    prefix: Arc<str>,
}

impl Gate {
    pub fn new(auth: Arc<Auth>, limits: Option<Arc<Limits>>, prefix: &str) -> Arc<Gate> {
        Arc::new(Gate {
            auth,
            limits,
            prefix: prefix.into(),
        })
    }

    /// The gate of one connection from `v`: a connection slot for the
    /// visitor and one request from its bucket (a connection is a request,
    /// as on HTTP); or the limit it hit.
    pub fn link(&self, v: Visitor) -> std::result::Result<Link, Limited> {
        let slot = match &self.limits {
            Some(l) => {
                let slot = l.mqtt_connection(v).map_err(refuse)?;
                l.request(v).map_err(refuse)?;
                Some(slot)
            }
            None => None,
        };
        Ok(Link {
            gate: self.clone(),
            v,
            who: None,
            _slot: slot,
            subs: HashMap::new(),
        })
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("limits", &self.limits.is_some())
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// Counts a limit's refusal (the HTTP reasons: the limits are shared).
fn refuse(l: Limited) -> Limited {
    crate::metrics::refused(l.refusal.metric());
    l
}

impl ConnectionGate for Gate {
    /// Called before a byte is read; None closes the socket.
    fn accept(&self, peer: SocketAddr) -> Option<Box<dyn LinkGate>> {
        Some(Box::new(self.link(Visitor::of(peer.ip())).ok()?))
    }
}

/// One MQTT connection's gate; dropping it (the connection ended) frees its
/// connection slot and its subscriptions' slots.
pub struct Link {
    gate: Gate,
    v: Visitor,
    /// Set by CONNECT.
    who: Option<MqttClient>,
    _slot: Option<ConnGuard>,
    /// Subscribed filters, each holding a subscription slot of the visitor.
    subs: HashMap<String, Option<SubGuard>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("visitor", &self.v)
            .field("subscriptions", &self.subs.len())
            .finish()
    }
}

impl Link {
    fn allows(&self, perm: Perm, topic: &str) -> bool {
        let ok = self.who.is_some_and(|w| {
            self.gate
                .auth
                .mqtt_allows(w, perm, &self.gate.prefix, topic)
        });
        if !ok {
            crate::metrics::refused("mqtt_forbidden");
        }
        ok
    }

    /// One token from the visitor's MQTT bucket and the global one, or how
    /// long the broker holds the packet (and stops reading the connection).
    fn pace(&self) -> Option<Verdict> {
        let l = self.gate.limits.as_ref()?;
        l.mqtt_packet(self.v).err().map(|Slowed { by, wait }| {
            metrics::counter!("rdv_bridge_mqtt_slowed_total", "limit" => by.metric()).increment(1);
            Verdict::Wait(wait)
        })
    }
}

impl LinkGate for Link {
    fn connect(&mut self, _client_id: &str, login: Option<(&str, &str)>) -> bool {
        match self
            .gate
            .auth
            .mqtt_login(login.map(|(_, password)| password))
        {
            Ok(who) => {
                self.who = Some(who);
                true
            }
            Err(e) => {
                crate::metrics::refused(e.code());
                false
            }
        }
    }

    /// ACL; then a spent day closes the connection (the one quota that
    /// waiting does not help, v5 DISCONNECT 0x97); then the MQTT buckets
    /// (over them: wait, nothing spent); then the bytes are spent.
    fn publish(
        &mut self,
        topic: &[u8],
        payload_len: usize,
        _qos: rumqttd::protocol::QoS,
    ) -> Verdict {
        let topic = String::from_utf8_lossy(topic);
        if !self.allows(Perm::Write, &topic) {
            return Verdict::NotAuthorized;
        }
        let Some(l) = &self.gate.limits else {
            return Verdict::Allow;
        };
        let n = payload_len as u64;
        if let Err(e) = l.bytes_fit(self.v, n) {
            refuse(e);
            return Verdict::QuotaExceeded;
        }
        if let Some(v) = self.pace() {
            return v;
        }
        // HTTP may have spent the day meanwhile.
        if let Err(e) = l.spend_bytes(self.v, n) {
            refuse(e);
            return Verdict::QuotaExceeded;
        }
        Verdict::Allow
    }

    /// All filters or none: the ACL of each, one token of the MQTT buckets
    /// for the packet (over them: wait), and a subscription slot per filter
    /// not yet subscribed.
    fn subscribe(&mut self, filters: &[&str]) -> Verdict {
        if !filters.iter().all(|f| self.allows(Perm::Read, f)) {
            return Verdict::NotAuthorized;
        }
        if let Some(v) = self.pace() {
            return v;
        }
        let mut new: HashMap<String, Option<SubGuard>> = HashMap::new();
        for f in filters {
            if self.subs.contains_key(*f) || new.contains_key(*f) {
                continue;
            }
            let slot = match &self.gate.limits {
                Some(l) => match l.subscribe(self.v) {
                    Ok(g) => Some(g),
                    // `new` drops here: the slots it took are freed.
                    Err(e) => {
                        refuse(e);
                        return Verdict::QuotaExceeded;
                    }
                },
                None => None,
            };
            new.insert((*f).to_owned(), slot);
        }
        self.subs.extend(new);
        Verdict::Allow
    }

    fn unsubscribe(&mut self, filters: &[&str]) {
        for f in filters {
            self.subs.remove(*f);
        }
    }
}

fn server(
    name: &str,
    listen: SocketAddr,
    limit: usize,
    gate: &Arc<Gate>,
) -> rumqttd::ServerSettings {
    rumqttd::ServerSettings {
        name: name.to_owned(),
        listen,
        tls: None,
        next_connection_delay_ms: 0,
        connections: rumqttd::ConnectionSettings {
            connection_timeout_ms: 10_000,
            max_payload_size: limit + PACKET_OVERHEAD,
            max_inflight_count: 500,
            auth: None,
            external_auth: None,
            dynamic_filters: true,
            // CONNECT carries the token as its password (username: anything).
            gate: Some(gate.clone()),
        },
    }
}

/// Starts the embedded broker and the bridge link; returns where it listens.
/// The broker's listeners run on threads of their own for the process's life.
/// MQTT clients are held to `auth`'s ACLs and, when given, to the visitor
/// limits of `limits`, shared with HTTP (issue #5). The gauges tell what the
/// broker holds in memory, for `/metrics`.
pub async fn start_embedded(
    cfg: &MqttConfig,
    limit: usize,
    hub: Arc<Hub>,
    auth: Arc<Auth>,
    limits: Option<Arc<Limits>>,
) -> Result<(MqttAddrs, Arc<rumqttd::RouterGauges>)> {
    let gate = Gate::new(auth, limits, &cfg.prefix);
    let mut addrs = MqttAddrs::default();
    let mut rc = rumqttd::Config {
        id: 0,
        router: rumqttd::RouterConfig {
            max_connections: cfg.max_connections,
            max_outgoing_packet_count: 200,
            max_segment_size: cfg.filter_log_bytes / FILTER_LOG_SEGMENTS,
            max_segment_count: FILTER_LOG_SEGMENTS,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Default::default(),
            max_retained_bytes: Some(cfg.retained_bytes),
        },
        ..Default::default()
    };
    if let Some(a) = cfg.listen {
        let a = reserve(a)?;
        addrs.v4 = Some(a);
        rc.v4 = Some(HashMap::from([(
            "v4".to_owned(),
            server("v4", a, limit, &gate),
        )]));
    }
    if let Some(a) = cfg.listen_v5 {
        let a = reserve(a)?;
        addrs.v5 = Some(a);
        rc.v5 = Some(HashMap::from([(
            "v5".to_owned(),
            server("v5", a, limit, &gate),
        )]));
    }
    if let Some(a) = cfg.ws_listen {
        let a = reserve(a)?;
        addrs.ws = Some(a);
        rc.ws = Some(HashMap::from([(
            "ws".to_owned(),
            server("ws", a, limit, &gate),
        )]));
    }
    if addrs == MqttAddrs::default() {
        return Err(Error::Config(
            "mqtt.mode = embedded needs at least one listener".into(),
        ));
    }
    let mut broker = rumqttd::Broker::new(rc);
    let gauges = broker.gauges();
    // One link subscribes to everything (MQTT → ntfy) and publishes (ntfy →
    // MQTT). rumqttd forwards the link's own publications back to it; the
    // echo filter drops exactly those (the test
    // `ntfy_reaches_mosquitto_sub_v4_and_v5_once` fails without it).
    let (mut link_tx, mut link_rx) = broker
        .link("rdv-relay-bridge")
        .map_err(|e| Error::Mqtt(e.to_string()))?;
    std::thread::Builder::new()
        .name("rumqttd".into())
        .spawn(move || {
            if let Err(e) = broker.start() {
                tracing::error!(error = %e, "embedded MQTT broker stopped");
            }
        })?;
    let filter = format!("{}#", cfg.prefix);
    link_tx
        .subscribe(filter)
        .map_err(|e| Error::Mqtt(e.to_string()))?;

    let echo = Arc::new(EchoFilter::default());
    let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
    hub.set_mqtt_sink(tx);

    // ntfy → MQTT, on a thread: the local link's send may block.
    let prefix = cfg.prefix.clone();
    let echo_out = echo.clone();
    let rt = tokio::runtime::Handle::current();
    let clock_hub = hub.clone();
    std::thread::Builder::new()
        .name("rdv-bridge-mqtt-out".into())
        .spawn(move || {
            let retained = Retained::default();
            while let Some(m) = rx.blocking_recv() {
                let topic = format!("{prefix}{}", m.topic);
                let payload = m.payload();
                echo_out.expect(&topic, &payload);
                let retain = public_pointer_card(&payload, clock_hub.clock().now_secs())
                    .is_some_and(|created| retained.admit(&topic, created));
                let sent = if retain {
                    // The link's `publish` cannot set the retain flag; `send`
                    // takes the packet as is.
                    let p = rumqttd::protocol::Publish::new(Bytes::from(topic), payload, true);
                    rt.block_on(link_tx.send(rumqttd::protocol::Packet::Publish(p, None)))
                        .map(|_| ())
                } else {
                    link_tx.publish(Bytes::from(topic), payload).map(|_| ())
                };
                if sent.is_err() {
                    tracing::error!("embedded broker link closed");
                    return;
                }
                metrics::counter!("rdv_bridge_messages_out_total", "protocol" => "mqtt")
                    .increment(1);
            }
        })?;

    // MQTT → ntfy.
    let prefix = cfg.prefix.clone();
    tokio::spawn(async move {
        let mut gap = Gap::default();
        loop {
            match link_rx.next().await {
                Ok(Some(rumqttd::Notification::Forward(f))) => {
                    gap.check(f.cursor);
                    inbound(
                        &hub,
                        Some(&echo),
                        &prefix,
                        &f.publish.topic,
                        f.publish.payload,
                        limit,
                    )
                    .await;
                }
                Ok(Some(rumqttd::Notification::Unschedule)) => {
                    if link_rx.wake().await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(error = %e, "embedded broker link closed");
                    return;
                }
            }
        }
    });

    for a in [addrs.v4, addrs.v5, addrs.ws].into_iter().flatten() {
        wait_listening(a).await?;
    }
    Ok((addrs, gauges))
}

/// Waits (bounded) until the broker listens on `a`. On Linux it reads the
/// kernel's socket table instead of connecting: a probe connection that
/// never sends CONNECT makes rumqttd log an ERROR at every start.
async fn wait_listening(a: SocketAddr) -> Result<()> {
    for _ in 0..400 {
        let up = match listening_port(a.port()) {
            Some(up) => up,
            None => tokio::net::TcpStream::connect(a).await.is_ok(),
        };
        if up {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(Error::Mqtt(format!(
        "embedded broker did not listen on {a}"
    )))
}

/// Whether a socket of this host listens on TCP `port` (`/proc/net/tcp`
/// and `tcp6`, state `0A`); None where that table cannot be read.
fn listening_port(port: u16) -> Option<bool> {
    let mut readable = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        readable = true;
        if listens_in(&text, port) {
            return Some(true);
        }
    }
    readable.then_some(false)
}

/// Parses one `/proc/net/tcp*` table: `sl local_address rem_address st …`,
/// the local address as `HEXADDR:HEXPORT`.
fn listens_in(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|l| {
        let mut f = l.split_whitespace();
        let local = f.nth(1);
        let state = f.nth(1);
        let p = local
            .and_then(|x| x.rsplit_once(':'))
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        p == Some(port) && state == Some("0A")
    })
}

/// Connects the bridge to an external broker (Mosquitto, EMQX) instead.
pub async fn start_external(cfg: &MqttConfig, limit: usize, hub: Arc<Hub>) -> Result<()> {
    let url = cfg
        .external_url
        .as_deref()
        .ok_or_else(|| Error::Config("mqtt.external_url is unset".into()))?;
    let hostport = url.strip_prefix("mqtt://").unwrap_or(url);
    let (host, port) = hostport
        .rsplit_once(':')
        .and_then(|(h, p)| {
            Some((
                h.trim_matches(['[', ']']).to_owned(),
                p.parse::<u16>().ok()?,
            ))
        })
        .ok_or_else(|| {
            Error::Config(format!("mqtt.external_url {url:?}: want mqtt://host:port"))
        })?;
    let mut opts = rumqttc::MqttOptions::new(cfg.client_id.clone(), host, port);
    opts.set_keep_alive(Duration::from_secs(30));
    opts.set_max_packet_size(limit + PACKET_OVERHEAD, limit + PACKET_OVERHEAD);
    opts.set_clean_session(true);
    let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, 1024);
    // Each message is its own small write: without this, Nagle's algorithm
    // holds them for the peer's delayed ACK (tens of ms on loopback).
    eventloop.network_options.set_tcp_nodelay(true);
    let filter = format!("{}#", cfg.prefix);
    let echo = Arc::new(EchoFilter::default());
    let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
    hub.set_mqtt_sink(tx);

    let prefix = cfg.prefix.clone();
    let echo_out = echo.clone();
    let out_client = client.clone();
    let clock_hub = hub.clone();
    tokio::spawn(async move {
        let retained = Retained::default();
        while let Some(m) = rx.recv().await {
            let topic = format!("{prefix}{}", m.topic);
            let payload = m.payload();
            echo_out.expect(&topic, &payload);
            let retain = public_pointer_card(&payload, clock_hub.clock().now_secs())
                .is_some_and(|created| retained.admit(&topic, created));
            if out_client
                .publish(topic, rumqttc::QoS::AtLeastOnce, retain, payload)
                .await
                .is_err()
            {
                tracing::error!("external broker client closed");
                return;
            }
            metrics::counter!("rdv_bridge_messages_out_total", "protocol" => "mqtt").increment(1);
        }
    });

    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let prefix = cfg.prefix.clone();
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        loop {
            match eventloop.poll().await {
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))) => {
                    // Clean session: subscribe again after every connect.
                    let _ = client
                        .subscribe(filter.clone(), rumqttc::QoS::AtLeastOnce)
                        .await;
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                    inbound(
                        &hub,
                        Some(&echo),
                        &prefix,
                        p.topic.as_bytes(),
                        p.payload,
                        limit,
                    )
                    .await;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "external broker connection lost; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), ready_rx)
        .await
        .map_err(|_| Error::Mqtt(format!("no subscription on {url} within 10 s")))?
        .map_err(|_| Error::Mqtt("external broker task ended".into()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn carrier_gaps_are_counted() {
        let mut g = super::Gap::default();
        assert_eq!(
            g.check(Some((0, 10))),
            0,
            "the first forward sets the start"
        );
        assert_eq!(g.check(Some((0, 11))), 0);
        assert_eq!(g.check(None), 0, "a retained message has no offset");
        assert_eq!(g.check(Some((1, 15))), 3, "12, 13 and 14 were dropped");
        assert_eq!(g.check(Some((1, 16))), 0);
    }

    use super::*;

    /// The gate keys limits by visitor: one visitor's cap, flood or spent
    /// bytes leave another's alone (the integration tests run from one
    /// address, and from 127.0.0.2 where a client can bind it).
    #[test]
    fn gate_limits_are_per_visitor() {
        use crate::config::{AuthConfig, LimitsConfig};
        use rumqttd::protocol::QoS;
        let cfg = LimitsConfig {
            mqtt_connections_per_visitor: 2,
            request_burst: 8,
            request_replenish_ms: 3_600_000,
            mqtt_publish_burst: 6,
            mqtt_publish_per_sec: 1,
            bytes_per_day: 100,
            subscriptions_per_visitor: 1,
            ..LimitsConfig::default()
        };
        let clock = Arc::new(crate::message::ManualClock::new(crate::message::unix_us(
            1_700_000_000_000_000,
        )));
        let limits = Limits::new(cfg, clock.clone());
        let gate = Gate::new(
            Arc::new(Auth::new(&AuthConfig::default())),
            Some(limits.clone()),
            "",
        );
        let peer = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 40_000);
        // Connections: the cap holds per visitor (an IPv6 /64 is one).
        let mut a1 = gate.accept(peer("10.0.0.1")).unwrap();
        let _a2 = gate.accept(peer("10.0.0.1")).unwrap();
        assert!(gate.accept(peer("10.0.0.1")).is_none());
        let _v6a = gate.accept(peer("2001:db8::1")).unwrap();
        let _v6b = gate.accept(peer("2001:db8::2")).unwrap();
        assert!(gate.accept(peer("2001:db8::3")).is_none());
        let mut b1 = gate.accept(peer("10.0.0.2")).unwrap();
        assert!(a1.connect("a", None) && b1.connect("b", None));
        // MQTT packets: six at once, then a wait of one second (the
        // injected clock does not move), and nothing spent while waiting.
        for _ in 0..6 {
            assert_eq!(a1.publish(b"t", 1, QoS::AtMostOnce), Verdict::Allow);
        }
        for _ in 0..3 {
            assert_eq!(
                a1.publish(b"t", 1, QoS::AtMostOnce),
                Verdict::Wait(std::time::Duration::from_secs(1))
            );
        }
        assert_eq!(
            a1.subscribe(&["z"]),
            Verdict::Wait(std::time::Duration::from_secs(1))
        );
        assert_eq!(b1.publish(b"t", 10, QoS::AtMostOnce), Verdict::Allow);
        // Bytes: 10.0.0.2 has 90 left; the waits above spent none of
        // 10.0.0.1's 94.
        assert_eq!(
            b1.publish(b"t", 91, QoS::AtMostOnce),
            Verdict::QuotaExceeded
        );
        // A spent day closes even while the bucket would make it wait.
        assert_eq!(
            a1.publish(b"t", 95, QoS::AtMostOnce),
            Verdict::QuotaExceeded
        );
        clock.advance(time::Duration::seconds(1));
        assert_eq!(a1.publish(b"t", 94, QoS::AtMostOnce), Verdict::Allow);
        // Subscriptions: one per visitor, all or none per packet.
        assert_eq!(b1.subscribe(&["x", "y"]), Verdict::QuotaExceeded);
        let mut b2 = gate.accept(peer("10.0.0.2")).unwrap();
        assert!(b2.connect("b2", None));
        assert_eq!(b2.subscribe(&["x"]), Verdict::Allow);
        // A connection that ends frees its slots.
        drop(b2);
        assert_eq!(b1.subscribe(&["x"]), Verdict::Allow);
        let v = Visitor::of("10.0.0.1".parse().unwrap());
        assert!(limits.mqtt_connection(v).is_err());
        drop(a1);
        assert!(limits.mqtt_connection(v).is_ok());
    }

    #[test]
    fn proc_net_tcp_listen_entries() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue\n   \
                 0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n   \
                 1: 0100007F:0050 0100007F:9C40 01 00000000:00000000 00:00000000 00000000\n";
        assert!(listens_in(t, 8080));
        assert!(!listens_in(t, 80), "established, not listening");
        assert!(!listens_in(t, 40000));
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = std_listener.local_addr().unwrap().port();
        assert_eq!(listening_port(port), Some(true));
        drop(std_listener);
        assert_eq!(listening_port(port), Some(false));
    }

    #[test]
    fn echo_filter_counts_copies() {
        let e = EchoFilter::default();
        e.expect("t", b"x");
        e.expect("t", b"x");
        assert!(!e.is_echo("t", b"y"));
        assert!(!e.is_echo("u", b"x"));
        assert!(e.is_echo("t", b"x"));
        assert!(e.is_echo("t", b"x"));
        assert!(!e.is_echo("t", b"x"));
        e.expect("t", b"ab");
        assert!(!e.is_echo("t", b"ac"), "same length, other payload");
        assert!(e.is_echo("t", b"ab"));
        assert!(!e.is_echo("t", b"ab"));
        for i in 0..ECHO_MAX + 1 {
            e.expect("t", format!("{i}").as_bytes());
        }
        assert!(!e.is_echo("t", b"0"), "forgotten past the bound");
        assert!(e.is_echo("t", format!("{ECHO_MAX}").as_bytes()));
    }
}
