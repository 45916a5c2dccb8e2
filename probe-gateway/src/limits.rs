//! Replay protection and rate limits of the gate (§5.2.1 gate step 3, §5.4).
//! In memory, with the clock as a parameter; ids are kept one probe
//! lifetime, which is enough because the gate refuses anything older.

use std::collections::{HashMap, VecDeque};

use rdv_proto::consts::PROBE_LIFETIME_SECS;
use rdv_proto::time::Instant;
use serde::{Deserialize, Serialize};

use crate::verdict::{LimitScope, Refusal};

/// `max` admitted messages per `window_secs`, sliding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    pub max: u32,
    pub window_secs: i64,
}

/// The gate's limits; defaults are the reference service's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitConfig {
    /// Per sender address (canon(From)).
    pub per_sender: Rate,
    /// Per requester agent ID.
    pub per_requester: Rate,
    /// Per receiving mailbox.
    pub per_mailbox: Rate,
}

impl Default for LimitConfig {
    fn default() -> Self {
        Self {
            per_sender: Rate {
                max: 10,
                window_secs: 24 * 3600,
            },
            per_requester: Rate {
                max: 20,
                window_secs: 24 * 3600,
            },
            per_mailbox: Rate {
                max: 100,
                window_secs: 24 * 3600,
            },
        }
    }
}

/// Seen ids and sliding-window counters.
#[derive(Debug, Default)]
pub struct Limits {
    cfg: LimitConfig,
    /// (kind, id) → when it was admitted.
    seen: HashMap<(String, String), i64>,
    windows: HashMap<(LimitScope, String), VecDeque<i64>>,
    /// Other sliding windows (echo attempts, forwarding confirmations):
    /// (scope, key) → (window, times).
    events: HashMap<(String, String), (i64, VecDeque<i64>)>,
    ops: u64,
}

impl Limits {
    pub fn new(cfg: LimitConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// Refuses a duplicate id or a message over a limit; otherwise records
    /// the id and counts the message against each limit.
    pub fn admit(
        &mut self,
        kind: &str,
        id: &str,
        sender: &str,
        requester: &str,
        mailbox: &str,
        now: Instant,
    ) -> Result<(), Refusal> {
        let t = now.unix_timestamp();
        self.ops += 1;
        if self.ops.is_multiple_of(1024) {
            self.prune(t);
        }
        let key = (kind.to_string(), id.to_string());
        if self
            .seen
            .get(&key)
            .is_some_and(|&at| t - at < PROBE_LIFETIME_SECS)
        {
            return Err(Refusal::Duplicate);
        }
        let checks = [
            (LimitScope::Sender, sender, self.cfg.per_sender),
            (LimitScope::Requester, requester, self.cfg.per_requester),
            (LimitScope::Mailbox, mailbox, self.cfg.per_mailbox),
        ];
        for (scope, k, rate) in checks {
            let w = self.windows.entry((scope, k.to_string())).or_default();
            while w.front().is_some_and(|&s| t - s >= rate.window_secs) {
                w.pop_front();
            }
            if w.len() >= rate.max as usize {
                return Err(Refusal::RateLimited(scope));
            }
        }
        for (scope, k, _) in checks {
            if let Some(w) = self.windows.get_mut(&(scope, k.to_string())) {
                w.push_back(t);
            }
        }
        self.seen.insert(key, t);
        Ok(())
    }

    /// One echo attempt from `sender` (echoes are not deduped: a release
    /// is idempotent), counted against `per_sender`.
    pub fn echo(&mut self, sender: &str, now: Instant) -> Result<(), Refusal> {
        if self.take("echo", sender, self.cfg.per_sender, now) {
            Ok(())
        } else {
            Err(Refusal::RateLimited(LimitScope::Sender))
        }
    }

    /// Counts one event in the window (`scope`, `key`) when it is under
    /// `rate`; false (nothing counted) when it is full.
    pub fn take(&mut self, scope: &str, key: &str, rate: Rate, now: Instant) -> bool {
        let t = now.unix_timestamp();
        let (_, w) = self
            .events
            .entry((scope.to_string(), key.to_string()))
            .or_insert((rate.window_secs, VecDeque::new()));
        while w.front().is_some_and(|&s| t - s >= rate.window_secs) {
            w.pop_front();
        }
        if w.len() >= rate.max as usize {
            return false;
        }
        w.push_back(t);
        true
    }

    fn prune(&mut self, t: i64) {
        self.events
            .retain(|_, (win, w)| w.back().is_some_and(|&s| t - s < *win));
        self.seen.retain(|_, &mut at| t - at < PROBE_LIFETIME_SECS);
        let cfg = self.cfg;
        self.windows.retain(|(scope, _), w| {
            let win = match scope {
                LimitScope::Sender => cfg.per_sender.window_secs,
                LimitScope::Requester => cfg.per_requester.window_secs,
                LimitScope::Mailbox => cfg.per_mailbox.window_secs,
            };
            w.back().is_some_and(|&s| t - s < win)
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn small() -> LimitConfig {
        let r = |max| Rate {
            max,
            window_secs: 3600,
        };
        LimitConfig {
            per_sender: r(2),
            per_requester: r(3),
            per_mailbox: r(4),
        }
    }

    #[test]
    fn duplicate_refused_until_lifetime() {
        let mut l = Limits::new(LimitConfig::default());
        let t0 = datetime!(2026-10-08 00:00 UTC);
        l.admit("probe", "a", "s@x", "r", "m@y", t0).unwrap();
        assert_eq!(
            l.admit("probe", "a", "s2@x", "r2", "m@y", t0),
            Err(Refusal::Duplicate)
        );
        // Another kind with the same id is a different document.
        l.admit("invite", "a", "s@x", "r", "m@y", t0).unwrap();
        let later = t0 + time::Duration::seconds(PROBE_LIFETIME_SECS);
        l.admit("probe", "a", "s@x", "r", "m@y", later).unwrap();
    }

    #[test]
    fn each_scope_limits() {
        let t0 = datetime!(2026-10-08 00:00 UTC);
        let mut l = Limits::new(small());
        l.admit("probe", "1", "s@x", "r1", "m1", t0).unwrap();
        l.admit("probe", "2", "s@x", "r2", "m2", t0).unwrap();
        assert_eq!(
            l.admit("probe", "3", "s@x", "r3", "m3", t0),
            Err(Refusal::RateLimited(LimitScope::Sender))
        );
        // The refused one was not recorded: a fresh id from another sender passes.
        l.admit("probe", "3", "t@x", "r3", "m3", t0).unwrap();

        let mut l = Limits::new(small());
        for i in 0..3 {
            l.admit("probe", &i.to_string(), &format!("s{i}@x"), "r", "m", t0)
                .unwrap();
        }
        assert_eq!(
            l.admit("probe", "9", "s9@x", "r", "m", t0),
            Err(Refusal::RateLimited(LimitScope::Requester))
        );

        let mut l = Limits::new(small());
        for i in 0..4 {
            let s = i.to_string();
            l.admit("probe", &s, &format!("s{i}@x"), &s, "m", t0)
                .unwrap();
        }
        assert_eq!(
            l.admit("probe", "9", "s9@x", "r9", "m", t0),
            Err(Refusal::RateLimited(LimitScope::Mailbox))
        );
        // The window slides.
        let later = t0 + time::Duration::seconds(3600);
        l.admit("probe", "9", "s9@x", "r9", "m", later).unwrap();
    }

    #[test]
    fn echoes_count_per_sender_without_dedupe() {
        let t0 = datetime!(2026-10-08 00:00 UTC);
        let mut l = Limits::new(small());
        l.echo("s@x", t0).unwrap();
        l.echo("s@x", t0).unwrap();
        assert_eq!(
            l.echo("s@x", t0),
            Err(Refusal::RateLimited(LimitScope::Sender))
        );
        l.echo("t@x", t0).unwrap();
        let later = t0 + time::Duration::seconds(3600);
        l.echo("s@x", later).unwrap();
    }
}
