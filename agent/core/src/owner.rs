//! What only the owner holds and sets (§5.5.1): the owner passphrase (a
//! salted scrypt hash, locked out after 3 misses), the auto_approve: all
//! setting per contact (MACed with the agent's key, bound to the grant it
//! was set on), and the audit log of every gate passed without asking.

use std::fmt;

use hmac::{Hmac, Mac};
use rdv_proto::AgentId;
use rdv_proto::consts::{AUTO_APPROVE_MAC_PREFIX, OWNER_SECRET_MAX_MISSES};
use rdv_proto::time::Instant;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// How long the passphrase is locked after [`OWNER_SECRET_MAX_MISSES`]
/// misses in a row.
pub const OWNER_SECRET_LOCKOUT: time::Duration = time::Duration::hours(1);
/// The shortest owner passphrase.
pub const OWNER_SECRET_MIN_CHARS: usize = 10;
/// Longer typed input is a miss without hashing.
pub const OWNER_SECRET_MAX_BYTES: usize = 1024;
/// scrypt cost of the owner passphrase: N = 2^15, r = 8, p = 1. Online
/// guessing is stopped by the lockout; the hash is for a stolen disk.
pub const OWNER_KDF_LOG_N: u8 = 15;
pub const OWNER_KDF_R: u32 = 8;
pub const OWNER_KDF_P: u32 = 1;
/// How far in the future a setting's `since` may be before it approves
/// nothing (a clock that stepped back).
pub const AUTO_APPROVE_MAX_AHEAD: time::Duration = time::Duration::minutes(5);

/// A secret the owner typed (a passphrase or a code): wiped on drop and
/// never printed by `Debug`, so it cannot reach a log or a result.
#[derive(Clone)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(Zeroizing::new(s.into()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The owner passphrase as stored: never the passphrase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerSecret {
    salt: String,
    hash: String,
    misses: u32,
    #[serde(with = "time::serde::rfc3339::option")]
    locked_until: Option<Instant>,
}

/// What a typed passphrase does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum SecretVerdict {
    Right,
    Wrong {
        misses_left: u32,
    },
    /// Too many misses: locked until then (unix seconds).
    Locked {
        until: i64,
    },
}

fn kdf(pass: &[u8], salt: &[u8]) -> Option<Zeroizing<[u8; 32]>> {
    let params = scrypt::Params::new(OWNER_KDF_LOG_N, OWNER_KDF_R, OWNER_KDF_P, 32).ok()?;
    let mut out = Zeroizing::new([0u8; 32]);
    scrypt::scrypt(pass, salt, &params, out.as_mut()).ok()?;
    Some(out)
}

impl OwnerSecret {
    /// Hashes a new passphrase; `None` when it is too short.
    pub fn new(pass: &Secret, salt: [u8; 16]) -> Option<OwnerSecret> {
        if pass.expose().trim().chars().count() < OWNER_SECRET_MIN_CHARS
            || pass.expose().len() > OWNER_SECRET_MAX_BYTES
        {
            return None;
        }
        let h = kdf(pass.expose().as_bytes(), &salt)?;
        Some(OwnerSecret {
            salt: hex::encode(salt),
            hash: hex::encode(*h),
            misses: 0,
            locked_until: None,
        })
    }

    /// Checks a typed passphrase; a miss is counted (the caller stores the
    /// record after every check), the third in a row locks it for an hour.
    pub fn check(&mut self, typed: &Secret, now: Instant) -> SecretVerdict {
        if let Some(u) = self.locked_until {
            if now < u {
                return SecretVerdict::Locked {
                    until: u.unix_timestamp(),
                };
            }
            self.locked_until = None;
            self.misses = 0;
        }
        let right = typed.expose().len() <= OWNER_SECRET_MAX_BYTES
            && hex::decode(&self.salt)
                .ok()
                .and_then(|salt| kdf(typed.expose().as_bytes(), &salt))
                .is_some_and(|h| {
                    bool::from(hex::encode(*h).as_bytes().ct_eq(self.hash.as_bytes()))
                });
        if right {
            self.misses = 0;
            return SecretVerdict::Right;
        }
        self.misses = self.misses.saturating_add(1);
        if self.misses >= OWNER_SECRET_MAX_MISSES {
            let until = now + OWNER_SECRET_LOCKOUT;
            self.locked_until = Some(until);
            return SecretVerdict::Locked {
                until: until.unix_timestamp(),
            };
        }
        SecretVerdict::Wrong {
            misses_left: OWNER_SECRET_MAX_MISSES - self.misses,
        }
    }

    pub fn misses(&self) -> u32 {
        self.misses
    }
}

/// auto_approve: all on one contact (§5.5.1), as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoApprove {
    pub contact: AgentId,
    /// Our owner's grant to the contact it was set on.
    pub grant_id: String,
    /// SHA-256 of canon(that grant's scope): a changed or widened grant
    /// turns it off.
    pub scope_digest: String,
    /// What the owner was shown as covered: the invoke keys then.
    pub capabilities: Vec<String>,
    /// Whether the grant allowed meetings then (issue #44).
    pub meetings: bool,
    /// Unix seconds.
    pub since: i64,
    pub until: Option<i64>,
    /// Where the owner set it: terminal or form.
    pub via: String,
    /// HMAC-SHA256 under the agent's key over everything above.
    pub mac: String,
}

/// The digest of a grant scope (what an auto-approve setting is bound to).
pub fn scope_digest(scope: &Value) -> String {
    let body = rdv_proto::canon::to_vec(scope)
        .unwrap_or_else(|_| serde_json::to_vec(scope).unwrap_or_default());
    hex::encode(Sha256::digest(&body))
}

fn mac_of(a: &AutoApprove, key: &[u8; 32]) -> String {
    let body = json!({
        "contact": a.contact, "grant_id": a.grant_id, "scope_digest": a.scope_digest,
        "capabilities": a.capabilities, "meetings": a.meetings,
        "since": a.since, "until": a.until, "via": a.via,
    });
    let bytes = rdv_proto::canon::to_vec(&body).unwrap_or_default();
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else {
        return String::new();
    };
    m.update(AUTO_APPROVE_MAC_PREFIX);
    m.update(&bytes);
    hex::encode(m.finalize().into_bytes())
}

/// Why a setting approves nothing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoOff {
    /// Its MAC does not verify: its integrity cannot be checked.
    Integrity,
    /// Set in the future (or its times do not read).
    Future,
    Expired,
    /// The grant it was set on was replaced, changed or widened.
    GrantChanged,
}

impl AutoApprove {
    /// A new setting, MACed with the agent's key.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        contact: AgentId,
        grant_id: String,
        scope: &Value,
        capabilities: Vec<String>,
        meetings: bool,
        since: i64,
        until: Option<i64>,
        via: &str,
        key: &[u8; 32],
    ) -> AutoApprove {
        let mut a = AutoApprove {
            contact,
            grant_id,
            scope_digest: scope_digest(scope),
            capabilities,
            meetings,
            since,
            until,
            via: via.to_string(),
            mac: String::new(),
        };
        a.mac = mac_of(&a, key);
        a
    }

    /// Whether the setting still stands for the contact's current grant
    /// `(grant_id, scope)` at `now` (§5.5.1 "Bound to the grant").
    pub fn standing(
        &self,
        grant: Option<(&str, &Value)>,
        now: i64,
        key: &[u8; 32],
    ) -> Result<(), AutoOff> {
        let want = mac_of(self, key);
        if want.is_empty() || !bool::from(want.as_bytes().ct_eq(self.mac.as_bytes())) {
            return Err(AutoOff::Integrity);
        }
        if self.since > now + AUTO_APPROVE_MAX_AHEAD.whole_seconds() {
            return Err(AutoOff::Future);
        }
        if self.until.is_some_and(|u| u <= now || u < self.since) {
            return Err(AutoOff::Expired);
        }
        match grant {
            Some((id, scope))
                if id == self.grant_id && scope_digest(scope) == self.scope_digest =>
            {
                Ok(())
            }
            _ => Err(AutoOff::GrantChanged),
        }
    }

    /// Whether it covers a task of `capability`: only what the owner was
    /// shown when setting it, intersected with what the grant allows now
    /// (the caller has checked the grant allows it).
    pub fn covers(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// What §5.5.1 says auto_approve never covers; each still needs the
/// human every time. The engine asks [`never_covered`] before every pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A start or release gate of a pairwise task from the contact.
    TaskGate,
    /// The accept or confirm of a meeting negotiation the contact started
    /// (issue #44), when the setting covered meetings.
    MeetingConfirm,
    /// Creating a contact (a request or a discovery candidate).
    CreateContact,
    /// Joining, admitting, leaving, removing, terms, or a task in a group.
    Group,
    /// Granting anyone, or widening any grant.
    Grant,
    /// Attaching the owner's files to a task we send.
    AttachOwnerFiles,
    /// Cancelling an agreed meeting.
    CancelMeeting,
    /// Setting, extending or changing auto-approve itself.
    ChangeAutoApprove,
}

/// §5.5.1 "What it never covers".
pub fn never_covered(a: Action) -> bool {
    !matches!(a, Action::TaskGate | Action::MeetingConfirm)
}

/// One line of the audit log (§5.5.1): time, contact, capability, taskId,
/// which gate, the approval digest, and what left (hashes and sizes).
/// Setting, extending, expiring and turning off are logged too, with
/// where. Peer text is never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditLine {
    /// Unix seconds.
    pub at: i64,
    pub contact: AgentId,
    /// pass, set, extend, expire, off.
    pub action: String,
    pub capability: Option<String>,
    pub task_id: Option<String>,
    /// start or release.
    pub gate: Option<String>,
    pub digest: Option<String>,
    /// SHA-256 and size in bytes of what left (canon of the payload).
    pub left_sha256: Option<String>,
    pub left_bytes: Option<u64>,
    /// terminal, form or agent (a pass, expiry or grant change).
    pub via: String,
}
