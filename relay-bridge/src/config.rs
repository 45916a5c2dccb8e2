//! Service configuration: TOML file, then `RDV_BRIDGE_*` environment
//! overrides (`RDV_BRIDGE_LIMITS__REQUEST_BURST=10`), then command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

// The default body limit (64 KiB) and the MQTT packet's room above it, shared
// with the carrier clients.
use rdv_bridge_client::{DEFAULT_MAX_BODY, PACKET_OVERHEAD};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Segments of the embedded broker's per-filter log: the oldest segment is
/// dropped whole, so more segments keep the window closer to
/// `filter_log_bytes`.
pub const FILTER_LOG_SEGMENTS: usize = 8;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub http: HttpConfig,
    pub mqtt: MqttConfig,
    pub cache: CacheConfig,
    pub limits: LimitsConfig,
    pub auth: AuthConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Where the ntfy-compatible HTTP API listens (port 0: any free port).
    pub listen: SocketAddr,
    /// Seconds between `keepalive` events on a subscription (ntfy: 45).
    pub keepalive_secs: u64,
    /// Trust `X-Forwarded-For` from a reverse proxy for the visitor address.
    pub behind_proxy: bool,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            keepalive_secs: 45,
            behind_proxy: false,
        }
    }
}

/// Which MQTT broker carries the MQTT side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MqttMode {
    /// The in-process `rumqttd` broker.
    Embedded,
    /// An external broker (Mosquitto, EMQX) at `external_url`.
    External,
    /// HTTP only.
    Off,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MqttConfig {
    pub mode: MqttMode,
    /// MQTT 3.1.1 (v4) listener of the embedded broker.
    pub listen: Option<SocketAddr>,
    /// MQTT 5 listener of the embedded broker.
    pub listen_v5: Option<SocketAddr>,
    /// MQTT over WebSocket listener of the embedded broker.
    pub ws_listen: Option<SocketAddr>,
    /// MQTT topic `<prefix>T` is ntfy topic `T` (default: none).
    pub prefix: String,
    /// `mqtt://host:port` of the external broker.
    pub external_url: Option<String>,
    /// Client id of the bridge on an external broker (unique per process).
    pub client_id: String,
    /// Most connections the embedded broker accepts.
    pub max_connections: usize,
    /// Bytes of recent publications the embedded broker keeps in memory per
    /// subscribed filter (rumqttd's log, in 8 segments). A subscriber that
    /// falls further behind loses the oldest, as with Mosquitto's
    /// `max_queued_messages`; memory is at most this much per filter
    /// (docs/relay-bridge.md, "Memory").
    pub filter_log_bytes: usize,
    /// Most bytes (topic and payload) of retained messages the embedded
    /// broker keeps, all topics together; a retained publication past it is
    /// delivered but not kept (`rdv_bridge_mqtt_retained_refused_total`).
    pub retained_bytes: u64,
}

impl Default for MqttConfig {
    fn default() -> Self {
        Self {
            mode: MqttMode::Embedded,
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 1883))),
            listen_v5: None,
            ws_listen: None,
            prefix: String::new(),
            external_url: None,
            client_id: "rdv-relay-bridge".into(),
            max_connections: 10_000,
            filter_log_bytes: 32 * 1024 * 1024,
            retained_bytes: 64 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Where the SQLite cache lives when `database_url` is unset.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; default SQLite in `data_dir`.
    pub database_url: Option<String>,
    /// How long messages stay cached (`12h`; at most the 7-day envelope
    /// ttl, SPEC §6.4). `0s` disables the cache.
    pub duration: String,
    /// Shared-cache mode for bridges sharing one Postgres database: each
    /// (topic, payload) is cached once (docs/relay-bridge.md). Refused with
    /// SQLite.
    pub shared: bool,
    /// Bytes of messages delivered but not yet written to the cache before
    /// publishers wait for it (bounds memory when the disk or database
    /// falls behind); at least `limits.message_size_limit`, at most 4 GiB
    /// counted.
    pub queue_bytes: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./data"),
            database_url: None,
            duration: "12h".into(),
            shared: false,
            queue_bytes: crate::hub::WRITE_QUEUE_BYTES,
        }
    }
}

impl CacheConfig {
    pub fn duration_secs(&self) -> Result<i64> {
        let s = crate::since::parse_duration(&self.duration)
            .ok_or_else(|| Error::Config(format!("cache.duration {:?}", self.duration)))?;
        if s > rdv_proto::consts::ENVELOPE_MAX_TTL_SECS {
            return Err(Error::Config(
                "cache.duration over 7 days (SPEC §6.4)".into(),
            ));
        }
        Ok(s)
    }

    pub fn url(&self) -> String {
        match &self.database_url {
            Some(u) => u.clone(),
            None => format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("cache.db").display()
            ),
        }
    }
}

/// Visitor limits, as ntfy operators know them, per IPv4 address or IPv6 /64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest message body in bytes (HTTP and MQTT).
    pub message_size_limit: usize,
    /// Request bucket: burst size and one token back every N milliseconds.
    pub request_burst: u32,
    pub request_replenish_ms: u64,
    /// Open subscriptions per visitor.
    pub subscriptions_per_visitor: u32,
    /// Bytes a visitor may publish per UTC day.
    pub bytes_per_day: u64,
    /// Global ceiling: requests per second over all visitors, and burst.
    pub global_requests_per_sec: u32,
    pub global_burst: u32,
    /// Global ceiling on open subscriptions (HTTP subscriptions and MQTT
    /// subscribed filters together).
    pub max_subscribers: usize,
    /// Concurrent MQTT connections per visitor on the embedded broker,
    /// checked before a byte is read (issue #5).
    pub mqtt_connections_per_visitor: u32,
    /// MQTT's own bucket per visitor (issue #14), apart from HTTP's: one
    /// token per PUBLISH or SUBSCRIBE on the embedded broker. Past it the
    /// broker stops reading that connection until a token is back (the
    /// publisher is slowed, not disconnected). Burst: a queue of this many
    /// publications flushed at once passes at full speed.
    pub mqtt_publish_burst: u32,
    /// Tokens back per second in each visitor's MQTT bucket.
    pub mqtt_publish_per_sec: u32,
    /// Global MQTT ceiling over all visitors: PUBLISH and SUBSCRIBE packets
    /// per second, and burst; past it every publisher is slowed alike.
    pub mqtt_global_publish_per_sec: u32,
    pub mqtt_global_publish_burst: u32,
    /// A subscriber that has not taken a message for this long is dropped.
    pub subscriber_write_timeout_secs: u64,
    /// Live messages buffered for a subscriber that lags (then it catches up
    /// from the cache).
    pub broadcast_capacity: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            message_size_limit: DEFAULT_MAX_BODY,
            request_burst: 60,
            request_replenish_ms: 5000,
            subscriptions_per_visitor: 30,
            bytes_per_day: 256 * 1024 * 1024,
            global_requests_per_sec: 2000,
            global_burst: 4000,
            max_subscribers: 10_000,
            mqtt_connections_per_visitor: 50,
            // docs/relay-bridge.md "MQTT access and limits" says why these.
            mqtt_publish_burst: 2_000,
            mqtt_publish_per_sec: 200,
            mqtt_global_publish_per_sec: 20_000,
            mqtt_global_publish_burst: 40_000,
            subscriber_write_timeout_secs: 30,
            broadcast_capacity: 4096,
        }
    }
}

/// Access when no token matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DefaultAccess {
    /// A community instance: anyone reads and writes.
    ReadWrite,
    /// Anyone reads; writing needs a token.
    ReadOnly,
    /// Every topic needs a token.
    DenyAll,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub default_access: DefaultAccess,
    pub tokens: Vec<TokenConfig>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            default_access: DefaultAccess::ReadWrite,
            tokens: Vec::new(),
        }
    }
}

/// A bearer token and the topics it may read and write (`*` at the end of a
/// pattern matches any rest; `*` alone matches every topic).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub token: String,
    #[serde(default)]
    pub read: Vec<String>,
    #[serde(default)]
    pub write: Vec<String>,
}

impl Config {
    /// Defaults, then the TOML file (if any), then `RDV_BRIDGE_*`
    /// (`RDV_BRIDGE_CONFIG` names the file, it is not a key).
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let c: Config = rdv_service_kit::config::load(&Config::default(), path, "RDV_BRIDGE_")
            .map_err(|e| Error::Config(e.0))?;
        c.validate()?;
        Ok(c)
    }

    /// Parses TOML text alone (for tests of shipped samples).
    pub fn from_toml(text: &str) -> Result<Config> {
        let c: Config = rdv_service_kit::config::from_toml(&Config::default(), text)
            .map_err(|e| Error::Config(e.0))?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<()> {
        self.cache.duration_secs()?;
        if self.cache.shared && rdv_service_kit::db::is_sqlite(&self.cache.url()) {
            return Err(Error::Config(
                "cache.shared needs a Postgres cache.database_url (a SQLite file is one machine's)"
                    .into(),
            ));
        }
        if self.limits.message_size_limit == 0 || self.limits.message_size_limit > 16 << 20 {
            return Err(Error::Config(
                "limits.message_size_limit out of range".into(),
            ));
        }
        if self.limits.request_burst == 0 || self.limits.global_burst == 0 {
            return Err(Error::Config("limits: bursts must be at least 1".into()));
        }
        if self.limits.global_requests_per_sec == 0 || self.limits.request_replenish_ms == 0 {
            return Err(Error::Config("limits: rates must be positive".into()));
        }
        let l = &self.limits;
        for (key, n) in [
            ("mqtt_publish_burst", l.mqtt_publish_burst),
            ("mqtt_publish_per_sec", l.mqtt_publish_per_sec),
            ("mqtt_global_publish_per_sec", l.mqtt_global_publish_per_sec),
            ("mqtt_global_publish_burst", l.mqtt_global_publish_burst),
        ] {
            if n == 0 {
                return Err(Error::Config(format!("limits.{key} must be at least 1")));
            }
        }
        if self.limits.mqtt_connections_per_visitor == 0 {
            return Err(Error::Config(
                "limits.mqtt_connections_per_visitor must be at least 1".into(),
            ));
        }
        if self.cache.queue_bytes < self.limits.message_size_limit {
            return Err(Error::Config(format!(
                "cache.queue_bytes must hold at least one largest message ({} bytes)",
                self.limits.message_size_limit
            )));
        }
        if self.limits.broadcast_capacity == 0 {
            return Err(Error::Config(
                "limits.broadcast_capacity must be positive".into(),
            ));
        }
        if self.mqtt.mode == MqttMode::External && self.mqtt.external_url.is_none() {
            return Err(Error::Config(
                "mqtt.mode = external needs mqtt.external_url".into(),
            ));
        }
        let segment = self.limits.message_size_limit + PACKET_OVERHEAD;
        if self.mqtt.filter_log_bytes / FILTER_LOG_SEGMENTS < segment {
            return Err(Error::Config(format!(
                "mqtt.filter_log_bytes must be at least {} ({} segments of one largest message)",
                segment * FILTER_LOG_SEGMENTS,
                FILTER_LOG_SEGMENTS
            )));
        }
        if self.mqtt.prefix.contains(['#', '+']) {
            return Err(Error::Config("mqtt.prefix may not hold wildcards".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_fit_envelopes() {
        let c = Config::default();
        c.validate().unwrap();
        assert!(c.limits.message_size_limit >= rdv_proto::consts::ENVELOPE_MAX_BYTES);
        assert!(c.limits.message_size_limit >= rdv_proto::consts::CARD_MAX_BYTES);
        assert_eq!(c.cache.duration_secs().unwrap(), 12 * 3600);
    }

    #[test]
    fn refuses_unknown_fields_and_long_cache() {
        assert!(Config::from_toml("[http]\nlisten = \"127.0.0.1:0\"\nbogus = 1\n").is_err());
        assert!(Config::from_toml("[cache]\nduration = \"8d\"\n").is_err());
        assert!(Config::from_toml("[cache]\nduration = \"7d\"\n").is_ok());
        // Shared mode: Postgres only.
        assert!(Config::from_toml("[cache]\nshared = true\n").is_err());
        assert!(
            Config::from_toml("[cache]\nshared = true\ndatabase_url = \"sqlite://x.db\"\n")
                .is_err()
        );
        let c =
            Config::from_toml("[cache]\nshared = true\ndatabase_url = \"postgres://db/bridge\"\n")
                .unwrap();
        assert!(c.cache.shared);
        assert!(!Config::default().cache.shared);
        assert!(Config::from_toml("[mqtt]\nmode = \"external\"\n").is_err());
        // The cache queue holds at least one largest message.
        assert!(Config::from_toml("[cache]\nqueue_bytes = 0\n").is_err());
        assert!(Config::from_toml("[cache]\nqueue_bytes = 65535\n").is_err());
        assert!(Config::from_toml("[cache]\nqueue_bytes = 65536\n").is_ok());
    }

    /// MQTT has limits of its own (issue #14), fit for a client flushing a
    /// queue, and HTTP keeps ntfy's; they are set in `[limits]` (the
    /// environment's `RDV_BRIDGE_LIMITS__MQTT_…` goes through the same
    /// keys), and a zero rate or burst is refused by name.
    #[test]
    fn mqtt_limits_are_their_own() {
        let d = LimitsConfig::default();
        assert_eq!((d.request_burst, d.request_replenish_ms), (60, 5000));
        assert_eq!((d.global_requests_per_sec, d.global_burst), (2000, 4000));
        assert!(
            d.mqtt_publish_burst >= 1_000,
            "a queue of 1,000 passes at once"
        );
        assert!(d.mqtt_global_publish_burst >= d.mqtt_publish_burst);
        let c = Config::from_toml(
            "[limits]\nmqtt_publish_burst = 7\nmqtt_publish_per_sec = 3\n\
             mqtt_global_publish_per_sec = 11\nmqtt_global_publish_burst = 13\n",
        )
        .unwrap();
        assert_eq!(
            (
                c.limits.mqtt_publish_burst,
                c.limits.mqtt_publish_per_sec,
                c.limits.mqtt_global_publish_per_sec,
                c.limits.mqtt_global_publish_burst
            ),
            (7, 3, 11, 13)
        );
        assert_eq!(c.limits.request_burst, 60, "HTTP untouched");
        for key in [
            "mqtt_publish_burst",
            "mqtt_publish_per_sec",
            "mqtt_global_publish_per_sec",
            "mqtt_global_publish_burst",
        ] {
            let e = Config::from_toml(&format!("[limits]\n{key} = 0\n")).unwrap_err();
            assert!(e.to_string().contains(key), "{key}: {e}");
        }
        let e = Config::from_toml("[limits]\nmqtt_publish_rate = 5\n").unwrap_err();
        assert!(e.to_string().contains("mqtt_publish_rate"), "{e}");
    }

    #[test]
    fn filter_log_holds_eight_largest_messages() {
        // 8 segments of 64 KiB + 1 KiB overhead each.
        let min = 8 * (64 * 1024 + 1024);
        let at = |n: usize| Config::from_toml(&format!("[mqtt]\nfilter_log_bytes = {n}\n"));
        assert!(at(min).is_ok());
        assert!(at(min - 1).is_err());
        assert!(
            Config::from_toml(&format!(
                "[mqtt]\nfilter_log_bytes = {min}\n[limits]\nmessage_size_limit = 70000\n"
            ))
            .is_err(),
            "a larger message limit needs a larger log"
        );
    }

    #[test]
    fn shipped_samples_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/relay-bridge");
        let text = std::fs::read_to_string(dir.join("config.toml")).unwrap();
        let c = Config::from_toml(&text).unwrap();
        assert_eq!(c.mqtt.mode, MqttMode::Embedded);
        assert_eq!(
            c.limits,
            LimitsConfig::default(),
            "the sample's [limits] shows the defaults, MQTT's buckets too"
        );
    }
}
