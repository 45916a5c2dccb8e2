//! The agent's home: one directory per profile holding the secret key
//! (`agent.key`), the database (`agent.db`, see `store`) and the listener
//! lock. Resolved as the reference does: `--home DIR`, else `$RDV_HOME`,
//! else `~/.rendezvous/<profile>` (profile `--profile`, else
//! `$RDV_PROFILE`, else `default`).
//!
//! The key lives in its own file, never in the database: the database is
//! copied, inspected and backed up far more casually than an identity key.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::io::{Read, Write as _};
use std::ops::Deref;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// The profile used when none is named.
pub const DEFAULT_PROFILE: &str = "default";
/// The secret key file: 64 lowercase hex digits of the Ed25519 seed and a newline.
pub const KEY_FILE: &str = "agent.key";
/// The database file (`store::Store`).
pub const DB_FILE: &str = "agent.db";
/// Held by the one process that consumes inbound events.
pub const LISTENER_LOCK_FILE: &str = "listener.lock";

/// The key file's exact length: 64 hex digits and a newline.
const KEY_FILE_LEN: usize = 65;

/// One profile's home directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    dir: PathBuf,
}

/// The 32-byte Ed25519 seed, wiped on drop. Its `Debug` prints no byte of
/// it, so a stray `{:?}` or a tracing field cannot log the identity.
pub struct Seed(Zeroizing<[u8; 32]>);

impl Seed {
    pub fn new(bytes: [u8; 32]) -> Seed {
        Seed(Zeroizing::new(bytes))
    }
}

impl Deref for Seed {
    type Target = [u8; 32];
    fn deref(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Seed(<redacted>)")
    }
}

/// Held while this process consumes inbound events; released on drop (the
/// lock goes with the open file, so also when the process dies).
#[derive(Debug)]
pub struct ListenerLock {
    _file: File,
}

/// Whether `name` is a profile name: `[a-z0-9][a-z0-9_-]{0,63}`. Strict,
/// because it becomes a path component.
pub fn valid_profile(name: &str) -> bool {
    let b = name.as_bytes();
    let head = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 64
        && head(b[0])
        && b[1..].iter().all(|&c| head(c) || c == b'_' || c == b'-')
}

fn home_err(path: &Path, what: &str, e: impl fmt::Display) -> Error {
    Error::Home(format!("{}: {what}: {e}", path.display()))
}

fn non_empty(v: Option<OsString>) -> Option<OsString> {
    v.filter(|s| !s.is_empty())
}

impl Home {
    /// Resolves the home from `--home`, `--profile` and the environment
    /// (`RDV_HOME`, `RDV_PROFILE`, `HOME`). Nothing is created.
    pub fn resolve(home: Option<PathBuf>, profile: Option<&str>) -> Result<Home> {
        Home::resolve_with(home, profile, |k| std::env::var_os(k))
    }

    /// [`Home::resolve`] with the environment passed in, for tests.
    pub fn resolve_with(
        home: Option<PathBuf>,
        profile: Option<&str>,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Home> {
        let profile = match profile {
            Some(p) => Some(p.to_owned()),
            None => match non_empty(env("RDV_PROFILE")) {
                Some(p) => Some(
                    p.into_string()
                        .map_err(|_| Error::Input("RDV_PROFILE is not valid UTF-8".to_owned()))?,
                ),
                None => None,
            },
        };
        // A bad name is refused even when --home makes it moot: it is a typo.
        if let Some(p) = &profile
            && !valid_profile(p)
        {
            return Err(Error::Input(format!(
                "profile {p:?} is not a valid name: use 1 to 64 of a-z, 0-9, '_' and '-', starting with a letter or digit"
            )));
        }
        if let Some(dir) = home {
            if dir.as_os_str().is_empty() {
                return Err(Error::Input("--home is empty".to_owned()));
            }
            return Ok(Home { dir });
        }
        if let Some(dir) = non_empty(env("RDV_HOME")) {
            return Ok(Home {
                dir: PathBuf::from(dir),
            });
        }
        let user = non_empty(env("HOME")).ok_or_else(|| {
            Error::Home(
                "cannot find the home directory: HOME is not set; pass --home DIR or set RDV_HOME"
                    .to_owned(),
            )
        })?;
        let profile = profile.as_deref().unwrap_or(DEFAULT_PROFILE);
        Ok(Home {
            dir: PathBuf::from(user).join(".rendezvous").join(profile),
        })
    }

    /// A home at `dir` exactly.
    pub fn at(dir: impl Into<PathBuf>) -> Home {
        Home { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.join(KEY_FILE)
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.join(DB_FILE)
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LISTENER_LOCK_FILE)
    }

    /// Creates the directory (and missing parents) with mode 700. An existing
    /// directory that group or others can reach is tightened to 700, and the
    /// returned warning says so: the caller shows it. Safe to call on every start.
    pub fn create(&self) -> Result<Option<String>> {
        let dir = &self.dir;
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| home_err(dir, "cannot create the agent's home", e))?;
        let meta = fs::metadata(dir).map_err(|e| home_err(dir, "cannot read", e))?;
        if !meta.is_dir() {
            return Err(Error::Home(format!(
                "{}: not a directory; pass --home with a directory",
                dir.display()
            )));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 == 0 {
            return Ok(None);
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| home_err(dir, "cannot set mode 700", e))?;
        Ok(Some(format!(
            "{}: was mode {mode:03o}, open to other users; set it to 700",
            dir.display()
        )))
    }

    /// Whether this home has an agent (a key file).
    pub fn has_agent(&self) -> bool {
        fs::symlink_metadata(self.key_path()).is_ok()
    }

    /// Writes the seed as the key file, atomically: a temporary file created
    /// with mode 600 (never briefly readable), synced, then renamed over
    /// `agent.key`, and the directory synced, so a crash leaves the old key
    /// or the new one, whole. It replaces an existing key, which loses that
    /// identity: the caller checks [`Home::has_agent`] first (`rdv init --force`).
    pub fn write_seed(&self, seed: &[u8; 32]) -> Result<()> {
        let path = self.key_path();
        let mut text = Zeroizing::new(String::with_capacity(KEY_FILE_LEN));
        for b in seed {
            text.push(char::from(HEX[usize::from(b >> 4)]));
            text.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        text.push('\n');
        let tmp = self
            .dir
            .join(format!(".{KEY_FILE}.tmp-{}", std::process::id()));
        // A temporary file left by a crash of this pid's predecessor is ours.
        let _ = fs::remove_file(&tmp);
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, &path)?;
            File::open(&self.dir)?.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(home_err(&path, "cannot write the agent key", e));
        }
        Ok(())
    }

    /// Reads the seed. Refuses a key file that group or others may read or
    /// write, or one not in the key format; the error names the file and the
    /// fix, never a byte of its content.
    pub fn read_seed(&self) -> Result<Seed> {
        let path = self.key_path();
        let mut f = File::open(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::Home(format!(
                    "{}: no agent key in this home; create one with `rdv init`",
                    path.display()
                ))
            } else {
                home_err(&path, "cannot open the agent key", e)
            }
        })?;
        // The mode of the file opened, not of whatever the path names next.
        let meta = f
            .metadata()
            .map_err(|e| home_err(&path, "cannot read", e))?;
        if !meta.is_file() {
            return Err(Error::Home(format!(
                "{}: not a regular file",
                path.display()
            )));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(Error::Home(format!(
                "{p}: the agent key is open to other users (mode {mode:03o}); \
                 refusing to use it. Fix: chmod 600 {p}, and if others may have read it, \
                 treat the key as compromised",
                p = path.display()
            )));
        }
        let malformed = || {
            Error::Home(format!(
                "{}: not an agent key file (expected 64 lowercase hex digits and a newline)",
                path.display()
            ))
        };
        let mut buf = Zeroizing::new(Vec::with_capacity(KEY_FILE_LEN + 1));
        // One byte more than a key file holds, to see that there is more.
        let cap = u64::try_from(KEY_FILE_LEN + 1).unwrap_or(u64::MAX);
        (&mut f)
            .take(cap)
            .read_to_end(&mut buf)
            .map_err(|e| home_err(&path, "cannot read the agent key", e))?;
        let hex = match buf.as_slice() {
            [hex @ .., b'\n'] if hex.len() == 64 => hex,
            _ => return Err(malformed()),
        };
        let mut seed = Seed::new([0u8; 32]);
        for (out, pair) in seed.0.iter_mut().zip(hex.chunks_exact(2)) {
            match (nibble(pair[0]), nibble(pair[1])) {
                (Some(hi), Some(lo)) => *out = (hi << 4) | lo,
                _ => return Err(malformed()),
            }
        }
        Ok(seed)
    }

    /// Takes the listener lock if no other process holds it: `None` when one
    /// does. Only the holder consumes inbound events, so two listeners never
    /// both advance the same channel state.
    pub fn try_lock_listener(&self) -> Result<Option<ListenerLock>> {
        let path = self.lock_path();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| home_err(&path, "cannot open the listener lock", e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(ListenerLock { _file: file })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(home_err(&path, "cannot lock", e)),
        }
    }

    /// Whether a process holds the listener lock. Probes with a shared lock
    /// it drops at once, so concurrent probes do not see each other; a
    /// listener starting during a probe sees it busy for that instant and
    /// should retry rather than conclude another listener runs.
    pub fn listener_running(&self) -> bool {
        let Ok(file) = File::open(self.lock_path()) else {
            return false;
        };
        matches!(file.try_lock_shared(), Err(TryLockError::WouldBlock))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// The key of a `--seed-file` (64 hex digits, surrounding whitespace
/// ignored): what the service commands (`rdv directory publish`, `rdv
/// gateway …`) sign with when they run without a home.
pub fn read_seed_file(path: &Path) -> Result<rdv_proto::AgentKey> {
    let text = Zeroizing::new(fs::read_to_string(path)?);
    let seed = Zeroizing::new(rdv_proto::encoding::hex_array::<32>("seed", text.trim())?);
    Ok(rdv_proto::AgentKey::from_seed(*seed))
}
