//! The OPRF key ring (§4.5): a JSON file of private keys with validity
//! windows. Rotation adds a key and ends the previous ones after a grace
//! period, during which both are listed and both resolve their listings.

use std::path::Path;
use std::sync::Arc;

use rand_core::{CryptoRng, RngCore};
use rdv_directory_client::oprf::ServerKey;
use rdv_directory_client::wire::KeyInfo;
use rdv_proto::encoding::base64;
use rdv_proto::time::{format_time, parse_time};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::{Error, Result};

/// The key file as stored (mode 0600).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    pub keys: Vec<KeyEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The private scalar, hex. Never logged.
    pub secret: String,
    pub not_before: String,
    pub not_after: Option<String>,
}

/// One loaded key.
#[derive(Debug)]
pub struct LoadedKey {
    pub key: ServerKey,
    pub id: String,
    pub not_before: OffsetDateTime,
    pub not_after: Option<OffsetDateTime>,
}

impl LoadedKey {
    pub fn usable(&self, now: OffsetDateTime) -> bool {
        self.not_before <= now && self.not_after.is_none_or(|t| now < t)
    }

    pub fn info(&self) -> KeyInfo {
        KeyInfo {
            id: self.id.clone(),
            public_key: base64(self.key.public().as_bytes()),
            not_before: format_time(self.not_before),
            not_after: self.not_after.map(format_time),
        }
    }
}

/// The keys a server holds.
#[derive(Debug, Clone)]
pub struct KeyRing {
    keys: Arc<Vec<LoadedKey>>,
}

impl KeyRing {
    pub fn from_file(file: &KeyFile, path: &str) -> Result<Self> {
        let bad = |reason: String| Error::KeyFile {
            path: path.into(),
            reason,
        };
        let mut keys = Vec::new();
        for (i, e) in file.keys.iter().enumerate() {
            let secret = hex::decode(&e.secret).map_err(|_| bad(format!("key {i}: bad hex")))?;
            let key =
                ServerKey::from_secret(&secret).map_err(|_| bad(format!("key {i}: invalid")))?;
            let not_before =
                parse_time("not_before", &e.not_before).map_err(|x| bad(x.to_string()))?;
            let not_after = e
                .not_after
                .as_deref()
                .map(|s| parse_time("not_after", s))
                .transpose()
                .map_err(|x| bad(x.to_string()))?;
            keys.push(LoadedKey {
                id: key.public().id(),
                key,
                not_before,
                not_after,
            });
        }
        if keys.is_empty() {
            return Err(bad("no keys: run `rdv-directory keygen`".into()));
        }
        Ok(Self {
            keys: Arc::new(keys),
        })
    }

    pub fn load(path: &Path) -> Result<Self> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::KeyFile {
            path: p.clone(),
            reason: e.to_string(),
        })?;
        let file: KeyFile = serde_json::from_str(&text).map_err(|e| Error::KeyFile {
            path: p.clone(),
            reason: e.to_string(),
        })?;
        Self::from_file(&file, &p)
    }

    /// The keys usable at `now`, oldest first.
    pub fn usable(&self, now: OffsetDateTime) -> Vec<&LoadedKey> {
        let mut v: Vec<&LoadedKey> = self.keys.iter().filter(|k| k.usable(now)).collect();
        v.sort_by_key(|k| k.not_before);
        v
    }

    /// A key usable at `now` by id.
    pub fn get(&self, id: &str, now: OffsetDateTime) -> Option<&LoadedKey> {
        self.keys.iter().find(|k| k.id == id && k.usable(now))
    }

    pub fn all(&self) -> &[LoadedKey] {
        &self.keys
    }

    /// Key ids and windows, to tell whether a reload changed anything.
    pub fn schedule(&self) -> Vec<(String, OffsetDateTime, Option<OffsetDateTime>)> {
        self.keys
            .iter()
            .map(|k| (k.id.clone(), k.not_before, k.not_after))
            .collect()
    }
}

/// A new key file with one key valid from `now`.
pub fn keygen(now: OffsetDateTime, rng: &mut (impl RngCore + CryptoRng)) -> KeyFile {
    let (_, secret) = ServerKey::generate(rng);
    KeyFile {
        keys: vec![KeyEntry {
            secret: hex::encode(secret),
            not_before: format_time(now),
            not_after: None,
        }],
    }
}

/// Rotation: every key without an end ends at `now + grace`; a new key
/// starts at `now`. Keys ended before `now` are dropped from the file.
pub fn rotate(
    file: &mut KeyFile,
    now: OffsetDateTime,
    grace: time::Duration,
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<()> {
    rotate_at(file, now, now, grace, rng)
}

/// Rotation that takes effect at `start` (not before `now`): the new key
/// starts then and every key without an end ends at `start + grace`. With
/// several processes reloading the file every `key_reload_secs`, a `start`
/// at least that far ahead lets all of them hold the new key before any
/// lists it (§4.5). Keys ended before `now` are dropped from the file.
pub fn rotate_at(
    file: &mut KeyFile,
    now: OffsetDateTime,
    start: OffsetDateTime,
    grace: time::Duration,
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<()> {
    let start = start.max(now);
    let end = format_time(start + grace);
    let mut kept = Vec::new();
    for mut e in file.keys.drain(..) {
        match &e.not_after {
            None => {
                e.not_after = Some(end.clone());
                kept.push(e);
            }
            Some(t) => {
                let t = parse_time("not_after", t).map_err(|x| Error::Config(x.to_string()))?;
                if t > now {
                    kept.push(e);
                }
            }
        }
    }
    kept.extend(keygen(start, rng).keys);
    file.keys = kept;
    Ok(())
}

/// The ring a server starts with. A newcomer's first `serve` on an empty
/// data directory gets a fresh key at the default path (returned, to be
/// logged with its id); a key file the operator named (`--key-file`,
/// `key_file`) must exist, since creating one there would hide a typo.
pub fn load_or_create(
    path: &Path,
    named: bool,
    now: OffsetDateTime,
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<(KeyRing, Option<String>)> {
    if named || path.exists() {
        return Ok((KeyRing::load(path)?, None));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = keygen(now, rng);
    write(path, &file)?;
    let ring = KeyRing::from_file(&file, &path.display().to_string())?;
    let id = ring.all().first().map(|k| k.id.clone());
    Ok((ring, id))
}

/// Writes a key file readable by its owner only.
pub fn write(path: &Path, file: &KeyFile) -> Result<()> {
    let text = serde_json::to_string_pretty(file).map_err(|e| Error::Config(e.to_string()))?;
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(tmp, path)?;
    Ok(())
}
