//! Per-capability limits of a grant (§5.3 `scope.invoke`): deny by
//! default, `max_frequency` and `max_open` per capability, counted exactly
//! as the spec says (admitted tasks only, sliding windows), and the gross
//! abuse rule that revokes. Pure: the caller passes the time and keeps the
//! [`LimitBook`] as a record with the contact (§5.3: "kept with the
//! contact book, saved before the rdv/revoke leaves").

use std::collections::BTreeMap;

use rdv_proto::consts::{
    ABUSE_DAY_SECS, ABUSE_LIMIT_FACTOR, ABUSE_MAX_REJECTIONS_PER_DAY, TASK_DEFAULT_MAX_OPEN,
};
use rdv_proto::doc::grant::{InvokeLimits, Scope};
use serde::{Deserialize, Serialize};

/// The most admission times kept per capability. A `max_frequency` above
/// it is applied as this many (stricter, never looser), so a generous
/// grant cannot make the record grow without bound.
pub const MAX_TRACKED_ADMISSIONS: usize = 1024;
/// The most rejection times kept per capability and in all: the 24-hour
/// figure revokes at [`ABUSE_MAX_REJECTIONS_PER_DAY`] + 1, so more are never
/// needed.
pub const MAX_TRACKED_REJECTIONS: usize = ABUSE_MAX_REJECTIONS_PER_DAY + 1;

/// What one capability's counters hold, in unix seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapCounters {
    /// When each task counted towards `max_frequency` was admitted.
    pub admitted: Vec<i64>,
    /// When each task was rejected for this capability's limits.
    pub rejected: Vec<i64>,
}

/// One contact's per-capability counters, bound to the grant they count
/// under: a new grant from the owner starts them afresh (§5.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitBook {
    /// The id of our owner's grant these counters belong to.
    pub grant: String,
    pub caps: BTreeMap<String, CapCounters>,
    /// Every per-capability rejection, any capability (the 24-hour figure).
    pub rejected: Vec<i64>,
}

/// Which limit refused a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    MaxOpen,
    MaxFrequency,
}

/// Why a contact is revoked for gross abuse (§5.3 (b)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "rule")]
pub enum Abuse {
    /// More rejections for one capability in its window than three times
    /// its limit (a "0/unit" limit read as 1).
    Capability {
        capability: String,
        rejected: u64,
        limit: u64,
    },
    /// More than 50 per-capability rejections in 24 hours.
    Day { rejected: u64 },
}

/// The verdict on one task under its capability's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted and counted.
    Admit,
    /// Rejected, reason rate, counted towards (b); `revoke` when (b) is met.
    Rejected { limit: Limit, revoke: Option<Abuse> },
}

/// The grant's limits for `cap`, or `None`: deny by default, no wildcard
/// (§5.3). Reads invoke first, the meetings boolean only for the meeting
/// URIs (`Scope::may_invoke`).
pub fn allowed(scope: &Scope, cap: &str) -> Option<InvokeLimits> {
    scope.may_invoke(cap).copied()
}

/// `max_open` as the receiver applies it (default 4).
pub fn max_open(l: &InvokeLimits) -> u64 {
    l.max_open.unwrap_or(TASK_DEFAULT_MAX_OPEN)
}

/// A stored time that is ahead of the clock counts as now, for one window
/// (§5.3).
fn clamp(t: i64, now: i64) -> i64 {
    t.min(now)
}

/// Keeps the times still inside `(now - window, now]`.
fn slide(v: &mut Vec<i64>, now: i64, window: i64) {
    for t in v.iter_mut() {
        *t = clamp(*t, now);
    }
    v.retain(|t| *t > now - window);
}

fn push_bounded(v: &mut Vec<i64>, t: i64, max: usize) {
    v.push(t);
    if v.len() > max {
        let cut = v.len() - max;
        v.drain(..cut);
    }
}

impl LimitBook {
    /// The book for our owner's current grant `grant_id`: the stored one if
    /// it counts under that grant, else a fresh one (§5.3: a new grant from
    /// the owner starts the counters afresh).
    pub fn for_grant(stored: Option<LimitBook>, grant_id: &str) -> LimitBook {
        match stored {
            Some(b) if b.grant == grant_id => b,
            _ => LimitBook {
                grant: grant_id.to_string(),
                ..LimitBook::default()
            },
        }
    }

    /// The last check before a task is admitted (§5.3 counting: after the
    /// capability is known supported, its input valid and the peer has
    /// room). `open` is this peer's tasks of `cap` not yet terminal.
    /// Admission counts the task; a rejection counts towards (b).
    pub fn check(&mut self, cap: &str, limits: &InvokeLimits, open: u64, now: i64) -> Verdict {
        let c = self.caps.entry(cap.to_string()).or_default();
        let freq = limits.max_frequency;
        if let Some(f) = freq {
            slide(&mut c.admitted, now, f.window_secs);
        } else {
            c.admitted.clear();
        }
        let limit = if open >= max_open(limits) {
            Some(Limit::MaxOpen)
        } else {
            match freq {
                Some(f) => {
                    let cap_n = (f.count as usize).min(MAX_TRACKED_ADMISSIONS);
                    (c.admitted.len() >= cap_n).then_some(Limit::MaxFrequency)
                }
                None => None,
            }
        };
        let Some(limit) = limit else {
            if freq.is_some() {
                push_bounded(&mut c.admitted, now, MAX_TRACKED_ADMISSIONS);
            }
            return Verdict::Admit;
        };
        // (b), per capability: within its max_frequency window; a
        // capability with only max_open has none and counts towards the
        // 24-hour figure alone.
        let mut revoke = None;
        if let Some(f) = freq {
            slide(&mut c.rejected, now, f.window_secs);
            push_bounded(&mut c.rejected, now, MAX_TRACKED_REJECTIONS);
            let lim = f.count.max(1);
            let n = c.rejected.len() as u64;
            if n > ABUSE_LIMIT_FACTOR.saturating_mul(lim) {
                revoke = Some(Abuse::Capability {
                    capability: cap.to_string(),
                    rejected: n,
                    limit: lim,
                });
            }
        } else {
            c.rejected.clear();
        }
        slide(&mut self.rejected, now, ABUSE_DAY_SECS);
        push_bounded(&mut self.rejected, now, MAX_TRACKED_REJECTIONS);
        let day = self.rejected.len();
        if revoke.is_none() && day > ABUSE_MAX_REJECTIONS_PER_DAY {
            revoke = Some(Abuse::Day {
                rejected: day as u64,
            });
        }
        Verdict::Rejected { limit, revoke }
    }
}

/// Senders check first (§5.3): whether a task of `cap` may go to a peer
/// whose grant to us gives `limits`, given our own open tasks of it and
/// the times we sent one. `Err` names the limit it would break: the task
/// is refused locally and nothing is sent.
pub fn sender_check(limits: &InvokeLimits, open: u64, sent: &[i64], now: i64) -> Result<(), Limit> {
    if open >= max_open(limits) {
        return Err(Limit::MaxOpen);
    }
    if let Some(f) = limits.max_frequency {
        let n = sent
            .iter()
            .filter(|t| clamp(**t, now) > now - f.window_secs)
            .count();
        if n as u64 >= f.count {
            return Err(Limit::MaxFrequency);
        }
    }
    Ok(())
}
