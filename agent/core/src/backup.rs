//! The backup bundle (§6.4.1 "A backup is the key"): the agent's seed and
//! the rest of its home, encrypted under the owner's passphrase. Whoever
//! holds a bundle and its passphrase holds the agent, so the KDF is
//! memory-hard (scrypt N = 2^17, r = 8, p = 1) and the header that says
//! how to open it (format, version, agent ID, created, KDF parameters) is
//! bound as AES-256-GCM associated data.
//!
//! ```text
//! {"format": "rdv-backup", "version": 1, "agent_id": "rdv1:…",
//!  "created": "<RFC 3339>",
//!  "kdf": {"alg": "scrypt", "n": 131072, "r": 8, "p": 1, "salt": "<base64>"},
//!  "cipher": {"alg": "aes256gcm", "nonce": "<base64>"},
//!  "ciphertext": "<base64>"}
//! ```
//!
//! The plaintext is canon({"seed": hex, "state": …}). The caller leaves
//! open approvals and confirm phrases out of `state` (§6.4.1).

use std::fmt;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rdv_proto::consts::CANON_MAX_DEPTH;
use rdv_proto::time::{Instant, format_time, parse_time};
use rdv_proto::{AgentId, AgentKey, canon};
use serde_json::{Map, Value, json};
use zeroize::{Zeroize, Zeroizing};

use crate::peer_text::{bounded, terminal_safe};

pub const BACKUP_FORMAT: &str = "rdv-backup";
pub const BACKUP_VERSION: u64 = 1;

/// The largest bundle [`open`] reads, checked before parsing; [`create`]
/// refuses a state that would make a bigger one.
pub const BACKUP_MAX_BYTES: usize = 64 * 1024 * 1024;

/// §13 reference: at least 12 characters (counted after trimming, so
/// padding with spaces does not count).
pub const BACKUP_PASSPHRASE_MIN_CHARS: usize = 12;

/// scrypt N = 2^17, r = 8, p = 1 (§6.4.1): 128 MiB per try. The only
/// parameters [`open`] accepts, which also bounds the work a crafted file
/// can ask for.
pub const BACKUP_KDF_LOG_N: u8 = 17;
pub const BACKUP_KDF_R: u32 = 8;
pub const BACKUP_KDF_P: u32 = 1;

const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
/// Room for everything in a bundle but the ciphertext.
const HEADER_ROOM: usize = 1024;

/// Why a bundle could not be made or opened. Messages name the field and
/// the rule, never the passphrase, the seed or the state.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BackupError {
    #[error("the passphrase must be at least {min} characters")]
    PassphraseTooShort { min: usize },
    /// On create: the seed given is not this agent's. On open: the key
    /// inside is not the agent the header names.
    #[error("the key in the backup is not agent {agent_id}")]
    SeedMismatch { agent_id: String },
    #[error("the backup is {len} bytes, over the limit of {limit}")]
    TooLarge { len: usize, limit: usize },
    #[error("not a Rendezvous backup ({0})")]
    NotABackup(&'static str),
    /// Well-formed, but a format version or parameters this code does not
    /// open.
    #[error("unsupported backup: {field} {reason}")]
    Unsupported { field: &'static str, reason: String },
    #[error("malformed backup: {field}: {reason}")]
    Malformed { field: &'static str, reason: String },
    /// AES-GCM cannot tell the two apart.
    #[error("cannot decrypt the backup: wrong passphrase, or the file was altered")]
    Decrypt,
    /// The state is not canonical JSON (a float, or nested too deep).
    #[error("the state cannot be backed up: {0}")]
    State(String),
    /// A bug: the parameters are constants.
    #[error("key derivation failed")]
    Kdf,
    #[error("encryption failed")]
    Encrypt,
}

type Result<T> = std::result::Result<T, BackupError>;

/// An opened bundle.
pub struct Opened {
    pub seed: Zeroizing<[u8; 32]>,
    pub agent_id: AgentId,
    pub created: Instant,
    pub state: Value,
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened")
            .field("seed", &"[redacted]")
            .field("agent_id", &self.agent_id)
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

/// What a bundle's header says, before the passphrase: for the human to
/// check the agent ID and fingerprint before typing it. Unauthenticated
/// until [`open`] succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupHeader {
    pub agent_id: AgentId,
    pub created: Instant,
}

/// scrypt cost. Only [`FULL`] outside this module's tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cost {
    log_n: u8,
    r: u32,
    p: u32,
}

const FULL: Cost = Cost {
    log_n: BACKUP_KDF_LOG_N,
    r: BACKUP_KDF_R,
    p: BACKUP_KDF_P,
};

/// Encrypts the agent under `passphrase`; returns the bundle as JSON.
/// `created` is written in whole seconds.
pub fn create(
    seed: &[u8; 32],
    agent_id: &AgentId,
    state: &Value,
    passphrase: &str,
    created: Instant,
    rng: &mut (impl rand_core::CryptoRngCore + ?Sized),
) -> Result<Value> {
    create_with(FULL, seed, agent_id, state, passphrase, created, rng)
}

/// Opens a bundle: strict about its shape and parameters, and checks that
/// the key inside is the agent the header names.
pub fn open(bundle: &[u8], passphrase: &str) -> Result<Opened> {
    open_with(FULL, bundle, passphrase)
}

/// Reads the header without the passphrase (see [`BackupHeader`]).
pub fn inspect(bundle: &[u8]) -> Result<BackupHeader> {
    let h = parse_bundle(FULL, bundle)?;
    Ok(BackupHeader {
        agent_id: h.agent_id,
        created: h.created,
    })
}

fn create_with(
    cost: Cost,
    seed: &[u8; 32],
    agent_id: &AgentId,
    state: &Value,
    passphrase: &str,
    created: Instant,
    rng: &mut (impl rand_core::CryptoRngCore + ?Sized),
) -> Result<Value> {
    if passphrase.trim().chars().count() < BACKUP_PASSPHRASE_MIN_CHARS {
        return Err(BackupError::PassphraseTooShort {
            min: BACKUP_PASSPHRASE_MIN_CHARS,
        });
    }
    if AgentKey::from_seed(*seed).id() != agent_id {
        return Err(mismatch(agent_id));
    }
    // Inside the plaintext the state sits one level down: keep it openable.
    if too_deep(state, 2) {
        return Err(BackupError::State("nested too deep".into()));
    }
    let state =
        Zeroizing::new(canon::to_vec(state).map_err(|e| BackupError::State(e.to_string()))?);
    // canon({"seed": hex, "state": …}), built by hand so the seed never
    // sits in a `Value` ("seed" < "state": already in canonical order).
    let mut hex_seed = Zeroizing::new([0u8; 64]);
    hex::encode_to_slice(seed, hex_seed.as_mut()).map_err(|_| BackupError::Encrypt)?;
    let mut plaintext = Zeroizing::new(Vec::with_capacity(state.len() + 90 + TAG_LEN));
    plaintext.extend_from_slice(b"{\"seed\":\"");
    plaintext.extend_from_slice(hex_seed.as_ref());
    plaintext.extend_from_slice(b"\",\"state\":");
    plaintext.extend_from_slice(&state);
    plaintext.push(b'}');
    seal(cost, agent_id, created, plaintext, passphrase, rng)
}

/// Encrypts `plaintext` under a fresh salt and nonce.
fn seal(
    cost: Cost,
    agent_id: &AgentId,
    created: Instant,
    mut plaintext: Zeroizing<Vec<u8>>,
    passphrase: &str,
    rng: &mut (impl rand_core::CryptoRngCore + ?Sized),
) -> Result<Value> {
    let len = HEADER_ROOM + (plaintext.len() + TAG_LEN).div_ceil(3) * 4;
    if len > BACKUP_MAX_BYTES {
        return Err(BackupError::TooLarge {
            len,
            limit: BACKUP_MAX_BYTES,
        });
    }
    let mut salt = [0u8; SALT_LEN];
    rng.fill_bytes(&mut salt);
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill_bytes(&mut nonce);
    let mut header = Map::new();
    header.insert("format".into(), json!(BACKUP_FORMAT));
    header.insert("version".into(), json!(BACKUP_VERSION));
    header.insert("agent_id".into(), json!(agent_id.as_str()));
    header.insert("created".into(), json!(format_time(created)));
    header.insert(
        "kdf".into(),
        json!({"alg": "scrypt", "n": 1u64 << cost.log_n, "r": cost.r, "p": cost.p, "salt": B64.encode(salt)}),
    );
    let aad = canon::to_vec_map(&header).map_err(|_| BackupError::Encrypt)?;
    let key = derive(cost, passphrase, &salt)?;
    Aes256Gcm::new(key.as_ref().into())
        .encrypt_in_place(Nonce::from_slice(&nonce), &aad, &mut *plaintext)
        .map_err(|_| BackupError::Encrypt)?;
    header.insert(
        "cipher".into(),
        json!({"alg": "aes256gcm", "nonce": B64.encode(nonce)}),
    );
    header.insert("ciphertext".into(), json!(B64.encode(&*plaintext)));
    Ok(Value::Object(header))
}

fn open_with(cost: Cost, bundle: &[u8], passphrase: &str) -> Result<Opened> {
    let h = parse_bundle(cost, bundle)?;
    let key = derive(cost, passphrase, &h.salt)?;
    let mut plaintext = h.ciphertext;
    Aes256Gcm::new(key.as_ref().into())
        .decrypt_in_place(Nonce::from_slice(&h.nonce), &h.aad, &mut *plaintext)
        .map_err(|_| BackupError::Decrypt)?;
    let (seed, state) = parse_plaintext(&plaintext)?;
    if AgentKey::from_seed(*seed).id() != &h.agent_id {
        return Err(mismatch(&h.agent_id));
    }
    Ok(Opened {
        seed,
        agent_id: h.agent_id,
        created: h.created,
        state,
    })
}

/// A bundle's parts, checked.
struct Parsed {
    agent_id: AgentId,
    created: Instant,
    salt: [u8; SALT_LEN],
    nonce: [u8; NONCE_LEN],
    ciphertext: Zeroizing<Vec<u8>>,
    /// canon({format, version, agent_id, created, kdf}) as in the file.
    aad: Vec<u8>,
}

fn parse_bundle(cost: Cost, bundle: &[u8]) -> Result<Parsed> {
    if bundle.len() > BACKUP_MAX_BYTES {
        return Err(BackupError::TooLarge {
            len: bundle.len(),
            limit: BACKUP_MAX_BYTES,
        });
    }
    let v =
        canon::parse(bundle, BACKUP_MAX_BYTES).map_err(|_| BackupError::NotABackup("not JSON"))?;
    let Value::Object(mut m) = v else {
        return Err(BackupError::NotABackup("not a JSON object"));
    };
    match m.get("format") {
        Some(Value::String(f)) if f == BACKUP_FORMAT => {}
        Some(_) => return Err(BackupError::NotABackup("another format")),
        None => return Err(BackupError::NotABackup("no format")),
    }
    only_keys(
        &m,
        "bundle",
        &[
            "format",
            "version",
            "agent_id",
            "created",
            "kdf",
            "cipher",
            "ciphertext",
        ],
    )?;
    if m.get("version").and_then(Value::as_u64) != Some(BACKUP_VERSION) {
        return Err(unsupported("version", format!("must be {BACKUP_VERSION}")));
    }
    let agent_id = AgentId::parse(str_field(&m, "agent_id", "agent_id")?)
        .map_err(|_| malformed("agent_id", "not an agent ID"))?;
    let created = parse_time("created", str_field(&m, "created", "created")?)
        .map_err(|_| malformed("created", "not an RFC 3339 UTC time"))?;

    let kdf = obj_field(&m, "kdf")?;
    only_keys(kdf, "kdf", &["alg", "n", "r", "p", "salt"])?;
    if str_field(kdf, "alg", "kdf.alg")? != "scrypt" {
        return Err(unsupported("kdf.alg", "must be scrypt".into()));
    }
    let want = [
        ("n", "kdf.n", 1u64 << cost.log_n),
        ("r", "kdf.r", u64::from(cost.r)),
        ("p", "kdf.p", u64::from(cost.p)),
    ];
    for (key, field, value) in want {
        if kdf.get(key).and_then(Value::as_u64) != Some(value) {
            return Err(unsupported(field, format!("must be {value}")));
        }
    }
    let salt = fixed_b64::<SALT_LEN>(str_field(kdf, "salt", "kdf.salt")?, "kdf.salt")?;

    let cipher = obj_field(&m, "cipher")?;
    only_keys(cipher, "cipher", &["alg", "nonce"])?;
    if str_field(cipher, "alg", "cipher.alg")? != "aes256gcm" {
        return Err(unsupported("cipher.alg", "must be aes256gcm".into()));
    }
    let nonce =
        fixed_b64::<NONCE_LEN>(str_field(cipher, "nonce", "cipher.nonce")?, "cipher.nonce")?;

    let ciphertext = Zeroizing::new(
        B64.decode(str_field(&m, "ciphertext", "ciphertext")?)
            .map_err(|_| malformed("ciphertext", "not base64"))?,
    );
    if ciphertext.len() < TAG_LEN {
        return Err(malformed("ciphertext", "shorter than the GCM tag"));
    }

    m.remove("cipher");
    m.remove("ciphertext");
    let aad = canon::to_vec_map(&m).map_err(|_| malformed("bundle", "not canonical JSON"))?;
    Ok(Parsed {
        agent_id,
        created,
        salt,
        nonce,
        ciphertext,
        aad,
    })
}

/// The seed and state from an authenticated plaintext. The seed's hex is
/// wiped once read.
fn parse_plaintext(plaintext: &[u8]) -> Result<(Zeroizing<[u8; 32]>, Value)> {
    let v = canon::parse(plaintext, BACKUP_MAX_BYTES)
        .map_err(|_| malformed("plaintext", "not JSON"))?;
    let Value::Object(mut m) = v else {
        return Err(malformed("plaintext", "not a JSON object"));
    };
    let seed_text = m.remove("seed");
    let state = m.remove("state");
    let extra = m.keys().next().map(|k| short(k));
    let seed = match seed_text {
        Some(Value::String(mut s)) => {
            let mut seed = Zeroizing::new([0u8; 32]);
            let lower = s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            let ok = lower && hex::decode_to_slice(&s, seed.as_mut()).is_ok();
            s.zeroize();
            if !ok {
                return Err(malformed("seed", "not 64 lowercase hex digits"));
            }
            seed
        }
        Some(_) => return Err(malformed("seed", "not a string")),
        None => return Err(malformed("seed", "missing")),
    };
    if let Some(k) = extra {
        return Err(malformed("plaintext", format!("unknown field {k}")));
    }
    let state = state.ok_or_else(|| malformed("state", "missing"))?;
    Ok((seed, state))
}

fn derive(cost: Cost, passphrase: &str, salt: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
    let params =
        scrypt::Params::new(cost.log_n, cost.r, cost.p, 32).map_err(|_| BackupError::Kdf)?;
    let mut key = Zeroizing::new([0u8; 32]);
    scrypt::scrypt(passphrase.as_bytes(), salt, &params, key.as_mut())
        .map_err(|_| BackupError::Kdf)?;
    Ok(key)
}

/// Whether a container in `v`, taken to sit at `depth`, is deeper than
/// canonical JSON allows. Stops descending at the limit.
fn too_deep(v: &Value, depth: usize) -> bool {
    match v {
        Value::Array(a) => depth > CANON_MAX_DEPTH || a.iter().any(|x| too_deep(x, depth + 1)),
        Value::Object(m) => depth > CANON_MAX_DEPTH || m.values().any(|x| too_deep(x, depth + 1)),
        _ => false,
    }
}

fn only_keys(m: &Map<String, Value>, field: &'static str, allowed: &[&str]) -> Result<()> {
    for k in m.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(malformed(field, format!("unknown field {}", short(k))));
        }
    }
    Ok(())
}

fn str_field<'a>(m: &'a Map<String, Value>, key: &str, field: &'static str) -> Result<&'a str> {
    match m.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(malformed(field, "not a string")),
        None => Err(malformed(field, "missing")),
    }
}

fn obj_field<'a>(m: &'a Map<String, Value>, key: &'static str) -> Result<&'a Map<String, Value>> {
    match m.get(key) {
        Some(Value::Object(o)) => Ok(o),
        Some(_) => Err(malformed(key, "not an object")),
        None => Err(malformed(key, "missing")),
    }
}

fn fixed_b64<const N: usize>(s: &str, field: &'static str) -> Result<[u8; N]> {
    let bytes = B64.decode(s).map_err(|_| malformed(field, "not base64"))?;
    bytes
        .try_into()
        .map_err(|_| malformed(field, format!("must be {N} bytes")))
}

/// A key from the file, as an error may show it: cleaned and short.
fn short(k: &str) -> String {
    format!("\"{}\"", bounded(&terminal_safe(k), 40))
}

fn malformed(field: &'static str, reason: impl Into<String>) -> BackupError {
    BackupError::Malformed {
        field,
        reason: reason.into(),
    }
}

fn unsupported(field: &'static str, reason: String) -> BackupError {
    BackupError::Unsupported { field, reason }
}

fn mismatch(agent_id: &AgentId) -> BackupError {
    BackupError::SeedMismatch {
        agent_id: agent_id.fingerprint(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand_core::OsRng;

    /// Cheap enough for the many tampering tests; only these tests can use it.
    const TEST: Cost = Cost {
        log_n: 10,
        r: 8,
        p: 1,
    };
    const PASS: &str = "correct horse battery";
    const SEED: [u8; 32] = [0xab; 32];

    fn created() -> Instant {
        parse_time("t", "2026-10-20T08:00:00Z").unwrap()
    }

    fn state() -> Value {
        json!({"contacts": [{"id": "rdv1:x", "tier": "friend", "label": "Mom ❤"}], "relays": ["wss://nos.lol"], "n": 42})
    }

    fn id() -> AgentId {
        AgentKey::from_seed(SEED).id().clone()
    }

    fn bundle() -> Value {
        create_with(TEST, &SEED, &id(), &state(), PASS, created(), &mut OsRng).unwrap()
    }

    fn bytes(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).unwrap()
    }

    fn open_test(v: &Value) -> Result<Opened> {
        open_with(TEST, &bytes(v), PASS)
    }

    fn no_secrets(e: &BackupError) {
        let text = e.to_string();
        assert!(!text.contains(PASS), "{text}");
        assert!(!text.contains(&hex::encode(SEED)), "{text}");
        assert!(!format!("{e:?}").contains(PASS));
    }

    #[test]
    fn round_trip_at_full_cost_and_wrong_passphrase() {
        let b = create(&SEED, &id(), &state(), PASS, created(), &mut OsRng).unwrap();
        assert_eq!(b["kdf"]["n"], 131072);
        assert_eq!(
            (b["kdf"]["r"].as_u64(), b["kdf"]["p"].as_u64()),
            (Some(8), Some(1))
        );
        let text = bytes(&b);
        let o = open(&text, PASS).unwrap();
        assert_eq!(*o.seed, SEED);
        assert_eq!(o.agent_id, id());
        assert_eq!(o.created, created());
        assert_eq!(o.state, state());
        let e = open(&text, "correct horse battery!").unwrap_err();
        assert_eq!(e, BackupError::Decrypt);
        assert!(e.to_string().contains("wrong passphrase"));
        no_secrets(&e);
        // A cheap-cost bundle is not opened by the real code, nor the reverse.
        assert!(matches!(
            open(&bytes(&bundle()), PASS),
            Err(BackupError::Unsupported { field: "kdf.n", .. })
        ));
        assert!(matches!(
            open_with(TEST, &text, PASS),
            Err(BackupError::Unsupported { field: "kdf.n", .. })
        ));
    }

    #[test]
    fn bundle_shape() {
        let b = bundle();
        let m = b.as_object().unwrap();
        let mut keys: Vec<&str> = m.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "agent_id",
                "cipher",
                "ciphertext",
                "created",
                "format",
                "kdf",
                "version"
            ]
        );
        assert_eq!(b["format"], "rdv-backup");
        assert_eq!(b["version"], 1);
        assert_eq!(b["agent_id"], id().as_str());
        assert_eq!(b["created"], "2026-10-20T08:00:00Z");
        assert_eq!(b["kdf"]["alg"], "scrypt");
        assert_eq!(
            B64.decode(b["kdf"]["salt"].as_str().unwrap())
                .unwrap()
                .len(),
            16
        );
        assert_eq!(b["cipher"]["alg"], "aes256gcm");
        assert_eq!(
            B64.decode(b["cipher"]["nonce"].as_str().unwrap())
                .unwrap()
                .len(),
            12
        );
        let text = String::from_utf8(bytes(&b)).unwrap();
        assert!(
            !text.contains(&hex::encode(SEED))
                && !text.contains("contacts")
                && !text.contains(PASS)
        );
        // Two bundles of the same agent share neither salt nor nonce.
        let c = bundle();
        assert_ne!(b["kdf"]["salt"], c["kdf"]["salt"]);
        assert_ne!(b["cipher"]["nonce"], c["cipher"]["nonce"]);
    }

    #[test]
    fn round_trip_cheap_and_inspect() {
        let b = bundle();
        let o = open_test(&b).unwrap();
        assert_eq!((*o.seed, o.state.clone()), (SEED, state()));
        let dbg = format!("{o:?}");
        assert!(!dbg.contains("171") && dbg.contains("[redacted]"), "{dbg}");
        let mut full = b.clone();
        full["kdf"]["n"] = json!(131072);
        let h = inspect(&bytes(&full)).unwrap();
        assert_eq!(
            h,
            BackupHeader {
                agent_id: id(),
                created: created()
            }
        );
    }

    #[test]
    fn tampered_header_fields_refused() {
        let other = AgentKey::from_seed([9; 32]).id().as_str().to_owned();
        type Tamper = fn(&mut Value, &str);
        let cases: Vec<(&str, Tamper)> = vec![
            ("agent_id", |b, o| b["agent_id"] = json!(o)),
            ("created", |b, _| {
                b["created"] = json!("2026-10-20T08:00:01Z")
            }),
            ("created fraction", |b, _| {
                b["created"] = json!("2026-10-20T08:00:00.000Z")
            }),
            ("kdf.n", |b, _| b["kdf"]["n"] = json!(2048)),
            ("kdf.n big", |b, _| b["kdf"]["n"] = json!(1u64 << 40)),
            ("kdf.r", |b, _| b["kdf"]["r"] = json!(16)),
            ("kdf.p", |b, _| b["kdf"]["p"] = json!(2)),
            ("kdf.alg", |b, _| b["kdf"]["alg"] = json!("argon2id")),
            ("kdf.salt", |b, _| {
                b["kdf"]["salt"] = json!(B64.encode([1u8; 16]))
            }),
            ("format", |b, _| b["format"] = json!("rdv-backup2")),
            ("version", |b, _| b["version"] = json!(2)),
            ("version string", |b, _| b["version"] = json!("1")),
            ("cipher.alg", |b, _| {
                b["cipher"]["alg"] = json!("chacha20poly1305")
            }),
            ("cipher.nonce", |b, _| {
                b["cipher"]["nonce"] = json!(B64.encode([1u8; 12]))
            }),
            ("ciphertext", |b, _| {
                let mut ct = B64.decode(b["ciphertext"].as_str().unwrap()).unwrap();
                ct[0] ^= 1;
                b["ciphertext"] = json!(B64.encode(ct));
            }),
        ];
        let b = bundle();
        assert!(open_test(&b).is_ok());
        for (name, tamper) in cases {
            let mut t = b.clone();
            tamper(&mut t, &other);
            let e = open_test(&t)
                .err()
                .unwrap_or_else(|| panic!("{name} opened"));
            no_secrets(&e);
        }
    }

    /// The header fields that strict parsing already pins (format, version,
    /// KDF parameters) are bound by the tag too, as are agent_id and created.
    #[test]
    fn aad_binds_the_header() {
        let b = bundle();
        let h = parse_bundle(TEST, &bytes(&b)).unwrap();
        let key = derive(TEST, PASS, &h.salt).unwrap();
        let try_aad = |aad: &[u8]| {
            let mut buf = h.ciphertext.clone();
            Aes256Gcm::new(key.as_ref().into())
                .decrypt_in_place(Nonce::from_slice(&h.nonce), aad, &mut *buf)
                .is_ok()
        };
        assert!(try_aad(&h.aad));
        let mut m = b.as_object().unwrap().clone();
        m.remove("cipher");
        m.remove("ciphertext");
        let edits: [(&str, &str, Value); 8] = [
            ("format", "", json!("rdv-backup2")),
            ("version", "", json!(2)),
            (
                "agent_id",
                "",
                json!(AgentKey::from_seed([9; 32]).id().as_str()),
            ),
            ("created", "", json!("2026-10-21T08:00:00Z")),
            ("kdf", "n", json!(2048)),
            ("kdf", "r", json!(9)),
            ("kdf", "p", json!(2)),
            ("kdf", "alg", json!("scrypt2")),
        ];
        for (k, sub, v) in edits {
            let mut e = m.clone();
            if sub.is_empty() {
                e[k] = v;
            } else {
                e[k][sub] = v;
            }
            assert!(!try_aad(&canon::to_vec_map(&e).unwrap()), "{k}.{sub}");
        }
    }

    #[test]
    fn seed_not_matching_agent_id_refused() {
        let plaintext = format!("{{\"seed\":\"{}\",\"state\":{{}}}}", hex::encode([9u8; 32]));
        let b = seal(
            TEST,
            &id(),
            created(),
            Zeroizing::new(plaintext.into_bytes()),
            PASS,
            &mut OsRng,
        )
        .unwrap();
        let e = open_test(&b).unwrap_err();
        assert!(matches!(e, BackupError::SeedMismatch { .. }), "{e}");
        assert!(!e.to_string().contains(&hex::encode([9u8; 32])));
        // And create refuses to write one.
        let e =
            create_with(TEST, &[9; 32], &id(), &state(), PASS, created(), &mut OsRng).unwrap_err();
        assert!(matches!(e, BackupError::SeedMismatch { .. }), "{e}");
    }

    #[test]
    fn malformed_plaintext_refused() {
        let seed = hex::encode(SEED);
        let cases = [
            format!("{{\"seed\":\"{seed}\",\"state\":{{}},\"phrases\":[]}}"),
            format!("{{\"seed\":\"{seed}\"}}"),
            "{\"state\":{}}".to_owned(),
            format!("{{\"seed\":\"{}\",\"state\":{{}}}}", seed.to_uppercase()),
            format!("{{\"seed\":\"{}\",\"state\":{{}}}}", &seed[2..]),
            "[1]".to_owned(),
            "{\"seed\":1,\"state\":{}}".to_owned(),
        ];
        for p in cases {
            let b = seal(
                TEST,
                &id(),
                created(),
                Zeroizing::new(p.clone().into_bytes()),
                PASS,
                &mut OsRng,
            )
            .unwrap();
            let e = open_test(&b).unwrap_err();
            assert!(matches!(e, BackupError::Malformed { .. }), "{p}: {e}");
            no_secrets(&e);
        }
    }

    #[test]
    fn oversize_refused_before_parsing() {
        let mut big = vec![b' '; BACKUP_MAX_BYTES + 1];
        big[0] = b'{';
        assert_eq!(
            open_with(TEST, &big, PASS).unwrap_err(),
            BackupError::TooLarge {
                len: BACKUP_MAX_BYTES + 1,
                limit: BACKUP_MAX_BYTES
            }
        );
        assert!(matches!(inspect(&big), Err(BackupError::TooLarge { .. })));
        // And create will not write what open would refuse.
        let huge = json!({"blob": "x".repeat(BACKUP_MAX_BYTES / 4 * 3)});
        assert!(matches!(
            create_with(TEST, &SEED, &id(), &huge, PASS, created(), &mut OsRng),
            Err(BackupError::TooLarge { .. })
        ));
    }

    #[test]
    fn unknown_keys_refused() {
        let b = bundle();
        for (path, key) in [("", "note"), ("kdf", "dklen"), ("cipher", "tag")] {
            let mut t = b.clone();
            let obj = if path.is_empty() {
                &mut t
            } else {
                &mut t[path]
            };
            obj[key] = json!(1);
            let e = open_test(&t).unwrap_err();
            assert!(
                matches!(&e, BackupError::Malformed { reason, .. } if reason.contains(key)),
                "{e}"
            );
        }
        // A hostile key is shown cleaned and short.
        let mut t = b.clone();
        t[format!("\u{1b}[2J{}", "k".repeat(500))] = json!(1);
        let e = open_test(&t).unwrap_err().to_string();
        assert!(!e.contains('\u{1b}') && e.chars().count() < 120, "{e}");
    }

    #[test]
    fn not_a_backup_refused() {
        for text in [
            &b"not json"[..],
            b"[]",
            b"{}",
            b"{\"format\":\"rdv-card\"}",
            b"{\"format\":\"rdv-backup\",\"format\":\"x\"}",
        ] {
            let e = open_with(TEST, text, PASS).unwrap_err();
            assert!(matches!(e, BackupError::NotABackup(_)), "{e}");
        }
        let mut b = bundle();
        b.as_object_mut().unwrap().remove("kdf");
        assert_eq!(open_test(&b).unwrap_err(), malformed("kdf", "missing"));
        let mut b = bundle();
        b["ciphertext"] = json!("!!");
        assert_eq!(
            open_test(&b).unwrap_err(),
            malformed("ciphertext", "not base64")
        );
        let mut b = bundle();
        b["ciphertext"] = json!(B64.encode([0u8; 15]));
        assert!(matches!(
            open_test(&b),
            Err(BackupError::Malformed {
                field: "ciphertext",
                ..
            })
        ));
        let mut b = bundle();
        b["kdf"]["salt"] = json!(B64.encode([0u8; 32]));
        assert!(matches!(
            open_test(&b),
            Err(BackupError::Malformed {
                field: "kdf.salt",
                ..
            })
        ));
        let mut b = bundle();
        b["agent_id"] = json!("rdv1:nope");
        assert!(matches!(
            open_test(&b),
            Err(BackupError::Malformed {
                field: "agent_id",
                ..
            })
        ));
    }

    #[test]
    fn short_passphrase_refused() {
        for p in [
            "",
            "elevenchars",
            "   padded   ",
            "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}",
        ] {
            let e =
                create_with(TEST, &SEED, &id(), &state(), p, created(), &mut OsRng).unwrap_err();
            assert_eq!(e, BackupError::PassphraseTooShort { min: 12 });
            // The real path refuses before any derivation.
            assert_eq!(
                create(&SEED, &id(), &state(), p, created(), &mut OsRng).unwrap_err(),
                e
            );
        }
        // Twelve characters are enough, however many bytes.
        let twelve = "\u{e9}".repeat(12);
        let b = create_with(TEST, &SEED, &id(), &state(), &twelve, created(), &mut OsRng).unwrap();
        assert!(open_with(TEST, &bytes(&b), &twelve).is_ok());
    }

    #[test]
    fn state_must_be_canonical() {
        let e = create_with(
            TEST,
            &SEED,
            &id(),
            &json!({"x": 1.5}),
            PASS,
            created(),
            &mut OsRng,
        )
        .unwrap_err();
        assert!(matches!(e, BackupError::State(_)), "{e}");
        let mut deep = json!(1);
        for _ in 0..CANON_MAX_DEPTH {
            deep = json!([deep]);
        }
        let e = create_with(TEST, &SEED, &id(), &deep, PASS, created(), &mut OsRng).unwrap_err();
        assert!(matches!(e, BackupError::State(_)), "{e}");
        // One level less still opens.
        let ok = deep[0].clone();
        let b = create_with(TEST, &SEED, &id(), &ok, PASS, created(), &mut OsRng).unwrap();
        assert_eq!(open_test(&b).unwrap().state, ok);
    }
}
