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
use tokio::sync::mpsc;

use crate::auth::Auth;
use crate::config::MqttConfig;
use crate::hub::{Draft, Hub, Item, Origin};
use crate::{Error, Result, topic};

/// Room for the MQTT fixed header, topic and properties above the body limit.
pub const PACKET_OVERHEAD: usize = 1024;

/// The addresses the embedded broker listens on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MqttAddrs {
    pub v4: Option<SocketAddr>,
    pub v5: Option<SocketAddr>,
    pub ws: Option<SocketAddr>,
}

/// Our own publications on their way back from the broker: the bridge
/// subscribes to everything, so what it publishes returns to it, and must not
/// be carried to ntfy a second time. Counted by (topic, payload hash).
#[derive(Debug, Default)]
pub struct EchoFilter {
    hasher: RandomState,
    pending: Mutex<HashMap<(String, u64, usize), u32>>,
}

impl EchoFilter {
    fn key(&self, topic: &str, payload: &[u8]) -> (String, u64, usize) {
        (
            topic.to_owned(),
            self.hasher.hash_one(payload),
            payload.len(),
        )
    }

    /// Records a publication about to go out.
    pub fn expect(&self, topic: &str, payload: &[u8]) {
        let k = self.key(topic, payload);
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() > 100_000 {
            // An echo that never came (a broker that dropped it): forget all
            // rather than grow without bound.
            p.clear();
        }
        *p.entry(k).or_insert(0) += 1;
    }

    /// True (once per expected copy) if this publication is our own echo.
    pub fn is_echo(&self, topic: &str, payload: &[u8]) -> bool {
        let k = self.key(topic, payload);
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match p.get_mut(&k) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    p.remove(&k);
                }
                true
            }
            None => false,
        }
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
    payload: &[u8],
    limit: usize,
) {
    let Ok(t) = std::str::from_utf8(mqtt_topic) else {
        return;
    };
    if echo.is_some_and(|e| e.is_echo(t, payload)) {
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
        body: payload.to_vec(),
        cache: true,
        ..Default::default()
    };
    if let Err(e) = hub.publish(d, Origin::Mqtt).await {
        tracing::warn!(error = %e, "mqtt → ntfy publish failed");
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

fn server(
    name: &str,
    listen: SocketAddr,
    limit: usize,
    auth: &Arc<Auth>,
) -> rumqttd::ServerSettings {
    let mut s = rumqttd::ServerSettings {
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
        },
    };
    if auth.mqtt_requires_token() {
        // CONNECT carries the token as its password (username: anything).
        let auth = auth.clone();
        s.set_auth_handler(move |_client_id, _user, password: String| {
            let verdict = auth.mqtt_connect(&password);
            if let Err(d) = verdict {
                crate::metrics::refused(d.code());
            }
            std::future::ready(verdict.is_ok())
        });
    }
    s
}

/// Starts the embedded broker and the bridge link; returns where it listens.
/// The broker's listeners run on threads of their own for the process's life.
pub async fn start_embedded(
    cfg: &MqttConfig,
    limit: usize,
    hub: Arc<Hub>,
    auth: Arc<Auth>,
) -> Result<MqttAddrs> {
    let mut addrs = MqttAddrs::default();
    let mut rc = rumqttd::Config {
        id: 0,
        router: rumqttd::RouterConfig {
            max_connections: cfg.max_connections,
            max_outgoing_packet_count: 200,
            max_segment_size: 16 * 1024 * 1024,
            max_segment_count: 8,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Default::default(),
        },
        ..Default::default()
    };
    if let Some(a) = cfg.listen {
        let a = reserve(a)?;
        addrs.v4 = Some(a);
        rc.v4 = Some(HashMap::from([(
            "v4".to_owned(),
            server("v4", a, limit, &auth),
        )]));
    }
    if let Some(a) = cfg.listen_v5 {
        let a = reserve(a)?;
        addrs.v5 = Some(a);
        rc.v5 = Some(HashMap::from([(
            "v5".to_owned(),
            server("v5", a, limit, &auth),
        )]));
    }
    if let Some(a) = cfg.ws_listen {
        let a = reserve(a)?;
        addrs.ws = Some(a);
        rc.ws = Some(HashMap::from([(
            "ws".to_owned(),
            server("ws", a, limit, &auth),
        )]));
    }
    if addrs == MqttAddrs::default() {
        return Err(Error::Config(
            "mqtt.mode = embedded needs at least one listener".into(),
        ));
    }
    let mut broker = rumqttd::Broker::new(rc);
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
                    let p = rumqttd::protocol::Publish::new(
                        Bytes::from(topic),
                        Bytes::from(payload),
                        true,
                    );
                    rt.block_on(link_tx.send(rumqttd::protocol::Packet::Publish(p, None)))
                        .map(|_| ())
                } else {
                    link_tx
                        .publish(Bytes::from(topic), Bytes::from(payload))
                        .map(|_| ())
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
        loop {
            match link_rx.next().await {
                Ok(Some(rumqttd::Notification::Forward(f))) => {
                    inbound(
                        &hub,
                        Some(&echo),
                        &prefix,
                        &f.publish.topic,
                        &f.publish.payload,
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
    Ok(addrs)
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
                        &p.payload,
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
    use super::*;

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
    }
}
