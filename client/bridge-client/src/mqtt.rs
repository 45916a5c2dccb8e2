//! MQTT 3.1.1 via `rumqttc` (issue #5, SPEC §6.3): publish to and subscribe
//! on a broker — the bridge's embedded one, or any other. On the bridge, MQTT
//! topic `<prefix>T` is ntfy topic `T` (prefix empty by default).
//!
//! Plain `mqtt://` only: this crate builds `rumqttc` without TLS, as the
//! bridge does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rumqttc::{Client, Connection, ConnectionError, Event, Outgoing, Packet};

pub use rumqttc::QoS;

use crate::{DEFAULT_MAX_BODY, Error, PACKET_OVERHEAD, Result, check_body};

/// How long one operation (connect, publish, subscribe) may take.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// `mqtt://host[:port]` (default port 1883) → host and port.
pub fn parse_url(url: &str) -> Result<(String, u16)> {
    let bad = |why: &str| Error::Input(format!("MQTT URL {url:?}: {why}"));
    let rest = match url.split_once("://") {
        Some(("mqtt" | "tcp", r)) => r,
        Some(_) => return Err(bad("want mqtt://host[:port] (no TLS in this build)")),
        None => url,
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return Err(bad("want mqtt://host[:port]"));
    }
    // [v6]:port, [v6], host:port, host
    if let Some(r) = rest.strip_prefix('[') {
        let (h, after) = r.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad("bad port"))?,
            None if after.is_empty() => 1883,
            None => return Err(bad("bad port")),
        };
        return Ok((h.to_owned(), port));
    }
    match rest.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !h.contains(':') => {
            Ok((h.to_owned(), p.parse().map_err(|_| bad("bad port"))?))
        }
        Some(_) => Err(bad("bad host")),
        None => Ok((rest.to_owned(), 1883)),
    }
}

/// A client id unique within this process and unlikely to collide across.
pub fn fresh_client_id(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn options(url: &str, client_id: &str) -> Result<rumqttc::MqttOptions> {
    let (host, port) = parse_url(url)?;
    let mut o = rumqttc::MqttOptions::new(client_id, host, port);
    o.set_keep_alive(Duration::from_secs(30));
    o.set_clean_session(true);
    let max = DEFAULT_MAX_BODY + PACKET_OVERHEAD;
    o.set_max_packet_size(max, max);
    Ok(o)
}

/// A topic one may publish to: non-empty, no wildcards, no NUL.
fn check_publish_topic(t: &str) -> Result<()> {
    if t.is_empty() || t.len() > 65_535 || t.contains(['+', '#', '\0']) {
        return Err(Error::Input(format!("invalid MQTT topic {t:?}")));
    }
    Ok(())
}

fn mqtt_err(e: ConnectionError) -> Error {
    Error::Mqtt(e.to_string())
}

/// Drives the connection until `done` says so, an error, or the deadline.
fn drive(conn: &mut Connection, what: &str, mut done: impl FnMut(&Event) -> bool) -> Result<()> {
    let deadline = Instant::now() + OP_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Mqtt(format!(
                "{what}: no answer within {OP_TIMEOUT:?}"
            )));
        }
        match conn.recv_timeout(left) {
            Ok(Ok(ev)) => {
                if let Event::Incoming(Packet::ConnAck(a)) = &ev
                    && a.code != rumqttc::ConnectReturnCode::Success
                {
                    return Err(Error::Mqtt(format!(
                        "{what}: connection refused: {:?}",
                        a.code
                    )));
                }
                if done(&ev) {
                    return Ok(());
                }
            }
            Ok(Err(e)) => return Err(Error::Mqtt(format!("{what}: {}", mqtt_err(e)))),
            Err(_) => {
                return Err(Error::Mqtt(format!(
                    "{what}: no answer within {OP_TIMEOUT:?}"
                )));
            }
        }
    }
}

/// A connection for publishing; each [`publish`](Self::publish) returns once
/// the broker has it (QoS 1/2: acknowledged; QoS 0: written to the socket).
pub struct MqttPublisher {
    client: Client,
    conn: Connection,
}

impl std::fmt::Debug for MqttPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttPublisher").finish_non_exhaustive()
    }
}

impl MqttPublisher {
    /// Connects (clean session) and waits for the broker's CONNACK.
    pub fn connect(url: &str, client_id: &str) -> Result<MqttPublisher> {
        let (client, mut conn) = Client::new(options(url, client_id)?, 64);
        drive(&mut conn, "connect", |e| {
            matches!(e, Event::Incoming(Packet::ConnAck(_)))
        })?;
        Ok(MqttPublisher { client, conn })
    }

    /// Publishes `payload` on MQTT topic `topic`. `retain` asks the broker to
    /// keep it for later subscribers.
    pub fn publish(&mut self, topic: &str, payload: &[u8], qos: QoS, retain: bool) -> Result<()> {
        check_publish_topic(topic)?;
        check_body(payload.len())?;
        self.client
            .publish(topic, qos, retain, payload.to_vec())
            .map_err(|e| Error::Mqtt(e.to_string()))?;
        let mut pkid = None;
        drive(&mut self.conn, "publish", |e| match (e, qos) {
            (Event::Outgoing(Outgoing::Publish(id)), QoS::AtMostOnce) => {
                let _ = id;
                true
            }
            (Event::Outgoing(Outgoing::Publish(id)), _) => {
                pkid = Some(*id);
                false
            }
            (Event::Incoming(Packet::PubAck(a)), QoS::AtLeastOnce) => Some(a.pkid) == pkid,
            (Event::Incoming(Packet::PubComp(a)), QoS::ExactlyOnce) => Some(a.pkid) == pkid,
            _ => false,
        })
    }

    /// Says goodbye to the broker.
    pub fn disconnect(mut self) -> Result<()> {
        self.client
            .disconnect()
            .map_err(|e| Error::Mqtt(e.to_string()))?;
        match drive(&mut self.conn, "disconnect", |e| {
            matches!(e, Event::Outgoing(Outgoing::Disconnect))
        }) {
            Ok(()) => Ok(()),
            // The broker may close first: the goodbye was sent.
            Err(_) => Ok(()),
        }
    }
}

/// One publication received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub topic: String,
    pub payload: Vec<u8>,
    /// A retained message the broker kept, not a live one.
    pub retain: bool,
}

impl Publication {
    /// The publication in the shape of an ntfy message's fields: `topic`,
    /// `message` (UTF-8 text, else base64 with `encoding: "base64"`), and
    /// `retain` when set.
    pub fn to_json(&self) -> serde_json::Value {
        use base64::Engine as _;
        let mut v = match std::str::from_utf8(&self.payload) {
            Ok(s) => serde_json::json!({"topic": self.topic, "message": s}),
            Err(_) => serde_json::json!({
                "topic": self.topic,
                "message": base64::engine::general_purpose::STANDARD.encode(&self.payload),
                "encoding": "base64",
            }),
        };
        if self.retain {
            v["retain"] = serde_json::Value::Bool(true);
        }
        v
    }
}

/// A live subscription: yields publications until the connection fails
/// (then one error, then the end; no silent reconnect that could lose
/// messages under a clean session).
pub struct MqttSubscription {
    _client: Client,
    conn: Connection,
    done: bool,
}

impl std::fmt::Debug for MqttSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttSubscription").finish_non_exhaustive()
    }
}

impl MqttSubscription {
    /// Connects and subscribes to `filters` (MQTT topic filters), returning
    /// once the broker has acknowledged: anything published afterwards is
    /// delivered.
    pub fn connect(
        url: &str,
        client_id: &str,
        filters: &[&str],
        qos: QoS,
    ) -> Result<MqttSubscription> {
        if filters.is_empty() || filters.iter().any(|f| f.is_empty() || f.contains('\0')) {
            return Err(Error::Input("no valid MQTT topic filter".into()));
        }
        let (client, mut conn) = Client::new(options(url, client_id)?, 64);
        client
            .subscribe_many(
                filters
                    .iter()
                    .map(|f| rumqttc::SubscribeFilter::new((*f).to_owned(), qos)),
            )
            .map_err(|e| Error::Mqtt(e.to_string()))?;
        let mut refused = false;
        drive(&mut conn, "subscribe", |e| match e {
            Event::Incoming(Packet::SubAck(a)) => {
                refused = a
                    .return_codes
                    .iter()
                    .any(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure));
                true
            }
            _ => false,
        })?;
        if refused {
            return Err(Error::Mqtt("the broker refused the subscription".into()));
        }
        Ok(MqttSubscription {
            _client: client,
            conn,
            done: false,
        })
    }

    /// The next publication, or None if none arrives within `wait`.
    pub fn recv_timeout(&mut self, wait: Duration) -> Result<Option<Publication>> {
        let deadline = Instant::now() + wait;
        loop {
            if self.done {
                return Err(Error::Mqtt("the subscription has ended".into()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match self.conn.recv_timeout(left) {
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                    return Ok(Some(Publication {
                        topic: p.topic,
                        payload: p.payload.to_vec(),
                        retain: p.retain,
                    }));
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(mqtt_err(e));
                }
                Err(rumqttc::RecvTimeoutError::Timeout) => return Ok(None),
                Err(rumqttc::RecvTimeoutError::Disconnected) => {
                    self.done = true;
                    return Err(Error::Mqtt("connection closed".into()));
                }
            }
        }
    }
}

impl Iterator for MqttSubscription {
    type Item = Result<Publication>;
    fn next(&mut self) -> Option<Result<Publication>> {
        if self.done {
            return None;
        }
        loop {
            match self.conn.recv() {
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                    return Some(Ok(Publication {
                        topic: p.topic,
                        payload: p.payload.to_vec(),
                        retain: p.retain,
                    }));
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    self.done = true;
                    return Some(Err(mqtt_err(e)));
                }
                Err(_) => {
                    self.done = true;
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let p = |s: &str| parse_url(s).ok();
        assert_eq!(p("mqtt://127.0.0.1:1884"), Some(("127.0.0.1".into(), 1884)));
        assert_eq!(p("mqtt://h"), Some(("h".into(), 1883)));
        assert_eq!(p("h:7"), Some(("h".into(), 7)));
        assert_eq!(p("mqtt://[::1]:9"), Some(("::1".into(), 9)));
        assert_eq!(p("mqtt://[::1]"), Some(("::1".into(), 1883)));
        assert_eq!(p("mqtts://h:8883"), None);
        assert_eq!(p("mqtt://h:x"), None);
        assert_eq!(p("mqtt://u@h:1"), None);
        assert_eq!(p("mqtt://"), None);
    }

    #[test]
    fn publications_as_json() {
        let p = |payload: &[u8], retain| Publication {
            topic: "t".into(),
            payload: payload.to_vec(),
            retain,
        };
        assert_eq!(
            p(b"hi", false).to_json(),
            serde_json::json!({"topic": "t", "message": "hi"})
        );
        assert_eq!(
            p(&[0, 0xff], true).to_json(),
            serde_json::json!({"topic": "t", "message": "AP8=", "encoding": "base64", "retain": true})
        );
    }

    #[test]
    fn publish_topics() {
        assert!(check_publish_topic("a/b").is_ok());
        assert!(check_publish_topic("a/+").is_err());
        assert!(check_publish_topic("#").is_err());
        assert!(check_publish_topic("").is_err());
    }
}
