//! Service configuration: TOML file, then `RDV_DIRECTORY_*` environment
//! overrides (nested keys with `__`, e.g. `RDV_DIRECTORY_LIMITS__EVALUATE__BURST`).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address to bind; port 0 picks a free port (printed at start).
    pub listen: SocketAddr,
    /// Holds the SQLite file and the key file unless given elsewhere.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; default `<data_dir>/directory.db`.
    pub database: Option<String>,
    pub max_db_connections: u32,
    /// Default `<data_dir>/oprf-keys.json`.
    pub key_file: Option<PathBuf>,
    /// Seconds (service clock) between re-reads of the key file, so a
    /// rotation reaches every process sharing it without a restart; 0
    /// turns it off (SIGHUP still reloads).
    pub key_reload_secs: u64,
    /// Bucket prefix length in hex digits (1–8), sized so each bucket holds
    /// many listings: 16^len buckets.
    pub bucket_hex_len: u32,
    /// Bucket answers are padded with decoys to a multiple of this.
    pub pad_to: u32,
    /// Most listings one bucket answer carries.
    pub max_per_bucket: u32,
    pub max_batch: u32,
    pub max_buckets: u32,
    pub max_claims_per_lookup_id: u32,
    pub max_listings_per_agent: u32,
    /// Request bodies above this are refused with 413.
    pub max_body_bytes: usize,
    pub request_timeout_secs: u64,
    /// Allowed CORS origins; `["*"]` allows any.
    pub cors_origins: Vec<String>,
    /// Header carrying the client address when behind a proxy (its last
    /// entry is used); unset means the TCP peer address.
    pub client_ip_header: Option<String>,
    /// Seconds between purges of expired listings.
    pub purge_interval_secs: u64,
    pub limits: Limits,
}

/// Token buckets per client (IPv4 address, IPv6 /64) and a global ceiling.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Evaluated elements: sized for a contact-list sync (a few thousand
    /// contacts a day), far below enumerating a phone-number space.
    pub evaluate: Bucket,
    pub lookup: Bucket,
    pub publish: Bucket,
    /// All clients together, evaluated elements per second.
    pub global_evaluate_per_sec: u32,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    pub burst: u32,
    pub per_day: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            evaluate: Bucket {
                burst: 2000,
                per_day: 5000,
            },
            lookup: Bucket {
                burst: 200,
                per_day: 2000,
            },
            publish: Bucket {
                burst: 50,
                per_day: 500,
            },
            global_evaluate_per_sec: 50_000,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8480)),
            data_dir: PathBuf::from("./data"),
            database: None,
            max_db_connections: 16,
            key_file: None,
            key_reload_secs: 60,
            bucket_hex_len: 2,
            pad_to: 16,
            max_per_bucket: 1024,
            max_batch: 1000,
            max_buckets: 64,
            max_claims_per_lookup_id: 8,
            max_listings_per_agent: 64,
            max_body_bytes: 128 * 1024,
            request_timeout_secs: 30,
            cors_origins: vec!["*".into()],
            client_ip_header: None,
            purge_interval_secs: 300,
            limits: Limits::default(),
        }
    }
}

impl Config {
    /// Defaults, then the TOML file (if any), then `RDV_DIRECTORY_*`
    /// (`RDV_DIRECTORY_CONFIG` names the file, it is not a key).
    pub fn load(file: Option<&std::path::Path>) -> Result<Self> {
        let c: Config = rdv_service_kit::config::load(&Config::default(), file, "RDV_DIRECTORY_")
            .map_err(|e| Error::Config(e.0))?;
        c.check()?;
        Ok(c)
    }

    /// Parses TOML text alone (tests, sample configs).
    pub fn from_toml(text: &str) -> Result<Self> {
        let c: Config = rdv_service_kit::config::from_toml(&Config::default(), text)
            .map_err(|e| Error::Config(e.0))?;
        c.check()?;
        Ok(c)
    }

    pub fn check(&self) -> Result<()> {
        let bad = |s: &str| Err(Error::Config(s.into()));
        if !(1..=8).contains(&self.bucket_hex_len) {
            return bad("bucket_hex_len must be 1 to 8");
        }
        if self.pad_to == 0 || self.max_per_bucket < self.pad_to {
            return bad("pad_to must be at least 1 and at most max_per_bucket");
        }
        if self.max_batch == 0 || self.max_batch > u32::from(u16::MAX) {
            return bad("max_batch must be 1 to 65535");
        }
        if self.max_buckets == 0 {
            return bad("max_buckets must be at least 1");
        }
        if self.limits.evaluate.burst < self.max_batch {
            return bad("limits.evaluate.burst must be at least max_batch");
        }
        for b in [
            self.limits.evaluate,
            self.limits.lookup,
            self.limits.publish,
        ] {
            if b.burst == 0 || b.per_day == 0 {
                return bad("every limit needs burst and per_day of at least 1");
            }
        }
        if self.limits.global_evaluate_per_sec == 0 {
            return bad("limits.global_evaluate_per_sec must be at least 1");
        }
        Ok(())
    }

    pub fn database_url(&self) -> String {
        self.database.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("directory.db").display()
            )
        })
    }

    pub fn key_path(&self) -> PathBuf {
        self.key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("oprf-keys.json"))
    }
}
