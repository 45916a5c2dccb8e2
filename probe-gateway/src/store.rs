//! The gateway's state on SQLite (embedded default) or Postgres (operators),
//! through one code path (`sqlx::Any`) and one set of migrations: mailboxes
//! and their agents, pending mailbox proofs, integration tokens (hashes
//! only), admitted probes with their verdicts, the dedupe record and the
//! rate-limit windows (§5.2.1 gate step 3), and signed-request nonces.
//!
//! No raw mail is stored: a probe row holds the verified RDV/1 payload.

use rdv_proto::consts::PROBE_LIFETIME_SECS;
use sqlx::{AnyPool, Row};
use subtle::ConstantTimeEq;

use crate::limits::{LimitConfig, Rate};
use crate::verdict::{LimitScope, Refusal};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Store failures: the database or its migrations.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What the gate's dedupe and windows key an admitted message by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub kind: String,
    pub id: String,
    /// canon(From).
    pub sender: String,
    pub requester: String,
    /// The receiving mailbox, canonical (registered or not).
    pub mailbox: String,
}

/// A message the gate admitted, as queued for the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewProbe {
    pub mailbox: String,
    pub agent: String,
    pub kind: String,
    pub id: String,
    pub requester: String,
    pub sender: String,
    /// When the payload was signed (unix seconds): the cookie's date.
    pub ts: i64,
    /// Canonical JSON of the verified RDV/1 payload.
    pub payload: String,
    /// The verdicts as JSON.
    pub auth: String,
    pub binding: String,
}

/// A queued message with its sequence number and arrival time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProbe {
    pub seq: i64,
    pub received: i64,
    pub probe: NewProbe,
    /// A probe's state: `pending`, `answered` (SYN-ACK sent) or `released`.
    pub status: String,
    /// How a released probe was released: `api` or `mail`.
    pub released_via: Option<String>,
}

/// A send on behalf of an agent (§5.2.1, §5.2.2), counted by the limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSend {
    /// `probe`, `invite`, `syn_ack` or `ack`.
    pub kind: &'static str,
    pub agent: String,
    /// Keyed hash of canon(recipient) (`AddressKey::address_hash`).
    pub addr_hash: String,
    /// Request id, invite id or probe seq.
    pub ref_id: String,
    pub at: i64,
    /// `sent`, or `pending` for an invite.
    pub status: &'static str,
    pub expires: i64,
}

/// The per-address and per-caller limits a send is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendRules {
    /// Sends (every kind) per caller per day.
    pub per_day: u32,
    /// Probes: one per (caller, address) per this many seconds (§5.2.1).
    pub probe_interval: Option<i64>,
    /// Invites (§5.2.2).
    pub invite: Option<InviteRules>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InviteRules {
    pub pending_secs: i64,
    pub cooldown_secs: i64,
    /// Invites to one address across all callers per `global_window`.
    pub global_max: u32,
    pub global_window: i64,
}

/// Why a send was refused by a limit; `retry_after` in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendLimit {
    /// The caller's daily cap.
    Daily { retry_after: i64 },
    /// A per-address limit (probe interval, invite cooldown, global cap).
    Address { retry_after: i64 },
    /// An invite to this address by this caller is still pending.
    InvitePending,
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// Released now; the release item's seq.
    Now(i64),
    /// Released before, by this route.
    Already(String),
}

/// Seconds in a day.
const DAY: i64 = 24 * 3600;

/// What a mailbox-proof attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeOutcome {
    Verified,
    WrongCode,
    /// No registration pending for this agent and mailbox, or it expired.
    NoneActive,
    /// Too many wrong codes: the registration is dropped.
    TooManyAttempts,
}

#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
}

impl Store {
    /// Connects (creating a SQLite file if the URL says `mode=rwc`) and runs
    /// the migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self> {
        let pool = rdv_service_kit::db::connect(url, max_connections, &MIGRATOR).await?;
        Ok(Self { pool })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A trivial query, for `/healthz`.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").fetch_one(&self.pool).await?;
        Ok(())
    }

    /// Records a registration waiting for its code (a new one replaces the
    /// agent's earlier one for the mailbox, resetting the attempts).
    pub async fn put_pending(
        &self,
        mailbox: &str,
        agent: &str,
        code_hash: &str,
        expires: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO pending_registrations (mailbox, agent, code_hash, expires, attempts) \
             VALUES ($1, $2, $3, $4, 0) ON CONFLICT (mailbox, agent) DO UPDATE SET \
             code_hash = excluded.code_hash, expires = excluded.expires, attempts = 0",
        )
        .bind(mailbox)
        .bind(agent)
        .bind(code_hash)
        .bind(expires)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Checks a code against the pending registration (constant time on
    /// the hash). On success, atomically binds the mailbox to the agent,
    /// drops every pending registration and every earlier token of the
    /// mailbox, and stores the new token's hash.
    ///
    /// The mailbox keeps its gateway-address `tag` when the same agent
    /// proves it again; another agent gets the new `tag`, so the old
    /// address stops working.
    #[allow(clippy::too_many_arguments)]
    pub async fn verify_code(
        &self,
        mailbox: &str,
        agent: &str,
        code_hash: &str,
        max_attempts: u32,
        token_id: &str,
        token_secret_hash: &str,
        tag: &str,
        now: i64,
    ) -> Result<CodeOutcome> {
        let mut tx = self.pool.begin().await?;
        // A write first, so SQLite takes its write lock here.
        let bumped = sqlx::query(
            "UPDATE pending_registrations SET attempts = attempts + 1 \
             WHERE mailbox = $1 AND agent = $2 AND expires > $3",
        )
        .bind(mailbox)
        .bind(agent)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if bumped == 0 {
            return Ok(CodeOutcome::NoneActive);
        }
        let row = sqlx::query(
            "SELECT code_hash, attempts FROM pending_registrations WHERE mailbox = $1 AND agent = $2",
        )
        .bind(mailbox)
        .bind(agent)
        .fetch_one(&mut *tx)
        .await?;
        let held: String = row.get(0);
        let attempts: i64 = row.get(1);
        if attempts > i64::from(max_attempts) {
            sqlx::query("DELETE FROM pending_registrations WHERE mailbox = $1 AND agent = $2")
                .bind(mailbox)
                .bind(agent)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            return Ok(CodeOutcome::TooManyAttempts);
        }
        if !bool::from(held.as_bytes().ct_eq(code_hash.as_bytes())) {
            tx.commit().await?;
            return Ok(CodeOutcome::WrongCode);
        }
        sqlx::query(
            "INSERT INTO mailboxes (mailbox, agent, verified, tag) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (mailbox) DO UPDATE SET agent = excluded.agent, \
             verified = excluded.verified, tag = CASE WHEN mailboxes.agent = excluded.agent \
             AND mailboxes.tag IS NOT NULL THEN mailboxes.tag ELSE excluded.tag END",
        )
        .bind(mailbox)
        .bind(agent)
        .bind(now)
        .bind(tag)
        .execute(&mut *tx)
        .await?;
        for sql in [
            "DELETE FROM pending_registrations WHERE mailbox = $1",
            "DELETE FROM tokens WHERE mailbox = $1",
        ] {
            sqlx::query(sql).bind(mailbox).execute(&mut *tx).await?;
        }
        sqlx::query(
            "INSERT INTO tokens (token_id, mailbox, secret_hash, created) VALUES ($1, $2, $3, $4)",
        )
        .bind(token_id)
        .bind(mailbox)
        .bind(token_secret_hash)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(CodeOutcome::Verified)
    }

    /// The mailbox and secret hash of an integration token id.
    pub async fn token(&self, token_id: &str) -> Result<Option<(String, String)>> {
        Ok(
            sqlx::query("SELECT mailbox, secret_hash FROM tokens WHERE token_id = $1")
                .bind(token_id)
                .fetch_optional(&self.pool)
                .await?
                .map(|r| (r.get(0), r.get(1))),
        )
    }

    /// The agent a mailbox delivers to.
    pub async fn mailbox_agent(&self, mailbox: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query("SELECT agent FROM mailboxes WHERE mailbox = $1")
                .bind(mailbox)
                .fetch_optional(&self.pool)
                .await?
                .map(|r| r.get(0)),
        )
    }

    /// The gateway-address tag of a mailbox (none for mailboxes proved
    /// before tags existed, until proved again).
    pub async fn mailbox_tag(&self, mailbox: &str) -> Result<Option<String>> {
        Ok(sqlx::query("SELECT tag FROM mailboxes WHERE mailbox = $1")
            .bind(mailbox)
            .fetch_optional(&self.pool)
            .await?
            .and_then(|r| r.get::<Option<String>, _>(0)))
    }

    /// The mailbox a gateway-address tag forwards to.
    pub async fn tag_mailbox(&self, tag: &str) -> Result<Option<String>> {
        Ok(sqlx::query("SELECT mailbox FROM mailboxes WHERE tag = $1")
            .bind(tag)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| r.get(0)))
    }

    /// An agent's mailboxes with their tags.
    pub async fn agent_mailbox_tags(&self, agent: &str) -> Result<Vec<(String, Option<String>)>> {
        Ok(
            sqlx::query("SELECT mailbox, tag FROM mailboxes WHERE agent = $1 ORDER BY mailbox")
                .bind(agent)
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .map(|r| (r.get(0), r.get::<Option<String>, _>(1)))
                .collect(),
        )
    }

    /// The mailboxes an agent has proved.
    pub async fn agent_mailboxes(&self, agent: &str) -> Result<Vec<String>> {
        Ok(
            sqlx::query("SELECT mailbox FROM mailboxes WHERE agent = $1 ORDER BY mailbox")
                .bind(agent)
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .map(|r| r.get(0))
                .collect(),
        )
    }

    /// Dedupe and rate limits (§5.2.1 gate steps 14–15) of `p`, then queues
    /// `item` when there is one (a mailbox with no agent has none), in one
    /// transaction: a refused message records nothing. Returns the item's
    /// sequence number, or the refusal.
    pub async fn admit(
        &self,
        p: &Admission,
        item: Option<&NewProbe>,
        limits: &LimitConfig,
        now: i64,
    ) -> Result<Result<Option<i64>, Refusal>> {
        let mut tx = self.pool.begin().await?;
        // Claim the id: new, or its earlier admission is past one lifetime.
        let fresh = sqlx::query(
            "INSERT INTO seen_ids (kind, id, expires) VALUES ($1, $2, $3) \
             ON CONFLICT (kind, id) DO UPDATE SET expires = excluded.expires \
             WHERE seen_ids.expires <= $4",
        )
        .bind(&p.kind)
        .bind(&p.id)
        .bind(now + PROBE_LIFETIME_SECS)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if fresh == 0 {
            return Ok(Err(Refusal::Duplicate));
        }
        let checks: [(LimitScope, &str, Rate); 3] = [
            (LimitScope::Sender, &p.sender, limits.per_sender),
            (LimitScope::Requester, &p.requester, limits.per_requester),
            (LimitScope::Mailbox, &p.mailbox, limits.per_mailbox),
        ];
        for (scope, key, rate) in checks {
            let n: i64 = sqlx::query(
                "SELECT COUNT(*) FROM rate_events WHERE scope = $1 AND rkey = $2 AND at > $3",
            )
            .bind(scope_name(scope))
            .bind(key)
            .bind(now - rate.window_secs)
            .fetch_one(&mut *tx)
            .await?
            .get(0);
            if n >= i64::from(rate.max) {
                return Ok(Err(Refusal::RateLimited(scope)));
            }
        }
        for (scope, key, _) in checks {
            sqlx::query("INSERT INTO rate_events (scope, rkey, at) VALUES ($1, $2, $3)")
                .bind(scope_name(scope))
                .bind(key)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        let seq = match item {
            Some(item) => Some(insert_item(&mut tx, item, now).await?),
            None => None,
        };
        tx.commit().await?;
        Ok(Ok(seq))
    }

    /// The agent's queued, unexpired messages after `after`, oldest first.
    pub async fn inbox(
        &self,
        agent: &str,
        after: i64,
        limit: u32,
        now: i64,
    ) -> Result<Vec<StoredProbe>> {
        let rows = sqlx::query(&format!(
            "SELECT {ITEM_COLUMNS} FROM probes WHERE agent = $1 AND seq > $2 AND expires > $3 \
             ORDER BY seq LIMIT $4"
        ))
        .bind(agent)
        .bind(after)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(item_row).collect())
    }

    /// One queued item by seq, expired or not (until purged).
    pub async fn item(&self, seq: i64) -> Result<Option<StoredProbe>> {
        Ok(
            sqlx::query(&format!("SELECT {ITEM_COLUMNS} FROM probes WHERE seq = $1"))
                .bind(seq)
                .fetch_optional(&self.pool)
                .await?
                .as_ref()
                .map(item_row),
        )
    }

    /// The probe `request_id` from `requester` queued for `agent` (the
    /// newest), for an echo arriving by mail.
    pub async fn probe_by_request(
        &self,
        agent: &str,
        request_id: &str,
        requester: &str,
    ) -> Result<Option<StoredProbe>> {
        Ok(sqlx::query(&format!(
            "SELECT {ITEM_COLUMNS} FROM probes WHERE agent = $1 AND kind = 'probe' AND id = $2 \
             AND requester = $3 ORDER BY seq DESC LIMIT 1"
        ))
        .bind(agent)
        .bind(request_id)
        .bind(requester)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(item_row))
    }

    /// Moves a probe from status `from` to `to`; false when it was not in
    /// `from` (claims the SYN-ACK, and gives the claim back on a send failure).
    pub async fn set_probe_status(&self, seq: i64, from: &str, to: &str) -> Result<bool> {
        let n = sqlx::query("UPDATE probes SET status = $1 WHERE seq = $2 AND status = $3")
            .bind(to)
            .bind(seq)
            .bind(from)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    /// Releases probe `seq` (the ACK leg, §5.2.1) and queues `item` (kind
    /// `release`) for its agent, in one transaction; a probe released
    /// before is left alone and its route returned.
    pub async fn release(
        &self,
        seq: i64,
        via: &str,
        item: &NewProbe,
        now: i64,
    ) -> Result<Released> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE probes SET status = 'released', released_via = $1 \
             WHERE seq = $2 AND kind = 'probe' AND status <> 'released'",
        )
        .bind(via)
        .bind(seq)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            let via: Option<String> = sqlx::query("SELECT released_via FROM probes WHERE seq = $1")
                .bind(seq)
                .fetch_optional(&mut *tx)
                .await?
                .and_then(|r| r.get::<Option<String>, _>(0));
            return Ok(Released::Already(via.unwrap_or_default()));
        }
        let new = insert_item(&mut tx, item, now).await?;
        tx.commit().await?;
        Ok(Released::Now(new))
    }

    /// Checks `send` against `rules` and records it, in one transaction
    /// (serialized by a lock on the sequence row, on SQLite and Postgres
    /// alike); a refused send records nothing.
    pub async fn claim_send(
        &self,
        send: &NewSend,
        rules: &SendRules,
    ) -> Result<Result<(), SendLimit>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE counters SET value = value WHERE name = 'probe_seq'")
            .execute(&mut *tx)
            .await?;
        let now = send.at;
        let row = sqlx::query("SELECT COUNT(*), MIN(at) FROM sends WHERE agent = $1 AND at > $2")
            .bind(&send.agent)
            .bind(now - DAY)
            .fetch_one(&mut *tx)
            .await?;
        let (n, oldest): (i64, Option<i64>) = (row.get(0), row.get(1));
        if n >= i64::from(rules.per_day) {
            let retry_after = oldest.map_or(DAY, |o| o + DAY - now).max(1);
            return Ok(Err(SendLimit::Daily { retry_after }));
        }
        if let Some(interval) = rules.probe_interval {
            let last: Option<i64> = sqlx::query(
                "SELECT MAX(at) FROM sends WHERE kind = 'probe' AND agent = $1 \
                 AND addr_hash = $2 AND at > $3",
            )
            .bind(&send.agent)
            .bind(&send.addr_hash)
            .bind(now - interval)
            .fetch_one(&mut *tx)
            .await?
            .get(0);
            if let Some(last) = last {
                return Ok(Err(SendLimit::Address {
                    retry_after: (last + interval - now).max(1),
                }));
            }
        }
        if let Some(inv) = rules.invite {
            let last = sqlx::query(
                "SELECT status, at, status_at FROM sends WHERE kind = 'invite' AND agent = $1 \
                 AND addr_hash = $2 ORDER BY at DESC LIMIT 1",
            )
            .bind(&send.agent)
            .bind(&send.addr_hash)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(r) = last {
                let (status, at, status_at): (String, i64, i64) = (r.get(0), r.get(1), r.get(2));
                let until = match status.as_str() {
                    "pending" if now < at + inv.pending_secs => {
                        return Ok(Err(SendLimit::InvitePending));
                    }
                    "pending" => at + inv.pending_secs + inv.cooldown_secs,
                    "declined" => status_at + inv.cooldown_secs,
                    _ => now,
                };
                if now < until {
                    return Ok(Err(SendLimit::Address {
                        retry_after: until - now,
                    }));
                }
            }
            let row = sqlx::query(
                "SELECT COUNT(*), MIN(at) FROM sends WHERE kind = 'invite' AND addr_hash = $1 \
                 AND at > $2",
            )
            .bind(&send.addr_hash)
            .bind(now - inv.global_window)
            .fetch_one(&mut *tx)
            .await?;
            let (n, oldest): (i64, Option<i64>) = (row.get(0), row.get(1));
            if n >= i64::from(inv.global_max) {
                let retry_after = oldest.map_or(inv.global_window, |o| o + inv.global_window - now);
                return Ok(Err(SendLimit::Address {
                    retry_after: retry_after.max(1),
                }));
            }
        }
        sqlx::query(
            "INSERT INTO sends (kind, agent, addr_hash, ref_id, at, status, status_at, expires) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(send.kind)
        .bind(&send.agent)
        .bind(&send.addr_hash)
        .bind(&send.ref_id)
        .bind(send.at)
        .bind(send.status)
        .bind(send.at)
        .bind(send.expires)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Forgets a claimed send whose mail could not be handed over, so it
    /// consumes no limit.
    pub async fn unclaim_send(&self, send: &NewSend) -> Result<()> {
        sqlx::query("DELETE FROM sends WHERE kind = $1 AND agent = $2 AND ref_id = $3 AND at = $4")
            .bind(send.kind)
            .bind(&send.agent)
            .bind(&send.ref_id)
            .bind(send.at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Ends an invite's pending state (§5.2.2): `accepted` or `declined`
    /// (which starts the cooldown). Returns the status it had, or none when
    /// the caller sent no such invite. Only a pending invite changes.
    pub async fn set_invite_status(
        &self,
        agent: &str,
        invite_id: &str,
        status: &str,
        now: i64,
        keep_until: i64,
    ) -> Result<Option<String>> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE sends SET status = $1, status_at = $2, \
             expires = CASE WHEN expires < $3 THEN $3 ELSE expires END \
             WHERE kind = 'invite' AND agent = $4 AND ref_id = $5 AND status = 'pending'",
        )
        .bind(status)
        .bind(now)
        .bind(keep_until)
        .bind(agent)
        .bind(invite_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n > 0 {
            tx.commit().await?;
            return Ok(Some("pending".into()));
        }
        let held: Option<String> = sqlx::query(
            "SELECT status FROM sends WHERE kind = 'invite' AND agent = $1 AND ref_id = $2 \
             ORDER BY at DESC LIMIT 1",
        )
        .bind(agent)
        .bind(invite_id)
        .fetch_optional(&mut *tx)
        .await?
        .map(|r| r.get(0));
        Ok(held)
    }

    /// Whether the opt-out id `h` (hex `H`, `AddressKey::optout_id`) opted out.
    pub async fn opted_out(&self, h: &str) -> Result<bool> {
        Ok(sqlx::query("SELECT 1 FROM optouts WHERE addr_hash = $1")
            .bind(h)
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    /// Records an opt-out (permanent; idempotent).
    pub async fn record_optout(&self, hash: &str, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO optouts (addr_hash, at) VALUES ($1, $2) ON CONFLICT (addr_hash) DO NOTHING",
        )
        .bind(hash)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Counts an event against a sliding window (`scope`, `key`) and
    /// records it when under the limit; false when the limit is reached.
    pub async fn count_event(&self, scope: &str, key: &str, rate: Rate, now: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        if !take_slot(&mut tx, scope, key, rate, now).await? {
            // Dropping the transaction rolls the insertion back.
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Queues `item` if the sliding window (`scope`, `key`) is under `rate`,
    /// counting it, in one transaction; `None` when the limit is reached
    /// (nothing recorded).
    pub async fn queue_limited(
        &self,
        item: &NewProbe,
        scope: &str,
        key: &str,
        rate: Rate,
        now: i64,
    ) -> Result<Option<i64>> {
        let mut tx = self.pool.begin().await?;
        if !take_slot(&mut tx, scope, key, rate, now).await? {
            // Dropping the transaction rolls the insertion back.
            return Ok(None);
        }
        let seq = insert_item(&mut tx, item, now).await?;
        tx.commit().await?;
        Ok(Some(seq))
    }

    /// Records a signed request's id; false when it was seen and has not
    /// expired (a replay).
    pub async fn claim_nonce(&self, agent: &str, id: &str, expires: i64, now: i64) -> Result<bool> {
        let n = sqlx::query(
            "INSERT INTO request_nonces (agent, id, expires) VALUES ($1, $2, $3) \
             ON CONFLICT (agent, id) DO UPDATE SET expires = excluded.expires \
             WHERE request_nonces.expires <= $4",
        )
        .bind(agent)
        .bind(id)
        .bind(expires)
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Drops expired probes, ids, nonces, registrations, and rate events
    /// older than the longest window. Returns rows deleted.
    pub async fn purge(&self, now: i64, longest_window: i64) -> Result<u64> {
        // The forwarding-confirmation window is fixed, not configured.
        let longest_window = longest_window.max(crate::forwarding::PER_DAY.window_secs);
        let mut n = 0;
        for (sql, t) in [
            ("DELETE FROM probes WHERE expires <= $1", now),
            ("DELETE FROM seen_ids WHERE expires <= $1", now),
            ("DELETE FROM request_nonces WHERE expires <= $1", now),
            ("DELETE FROM pending_registrations WHERE expires <= $1", now),
            ("DELETE FROM sends WHERE expires <= $1", now),
            (
                "DELETE FROM rate_events WHERE at <= $1",
                now - longest_window,
            ),
        ] {
            n += sqlx::query(sql)
                .bind(t)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        Ok(n)
    }
}

const ITEM_COLUMNS: &str = "seq, received, mailbox, agent, kind, id, requester, sender, payload, \
     auth, binding, ts, status, released_via";

fn item_row(r: &sqlx::any::AnyRow) -> StoredProbe {
    StoredProbe {
        seq: r.get(0),
        received: r.get(1),
        probe: NewProbe {
            mailbox: r.get(2),
            agent: r.get(3),
            kind: r.get(4),
            id: r.get(5),
            requester: r.get(6),
            sender: r.get(7),
            ts: r.get(11),
            payload: r.get(8),
            auth: r.get(9),
            binding: r.get(10),
        },
        status: r.get(12),
        released_via: r.get::<Option<String>, _>(13),
    }
}

/// Queues one item under the next sequence number.
async fn insert_item(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    p: &NewProbe,
    now: i64,
) -> Result<i64> {
    let seq: i64 = sqlx::query(
        "UPDATE counters SET value = value + 1 WHERE name = 'probe_seq' RETURNING value",
    )
    .fetch_one(&mut **tx)
    .await?
    .get(0);
    sqlx::query(
        "INSERT INTO probes (seq, mailbox, agent, kind, id, requester, sender, ts, received, \
         expires, payload, auth, binding) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(seq)
    .bind(&p.mailbox)
    .bind(&p.agent)
    .bind(&p.kind)
    .bind(&p.id)
    .bind(&p.requester)
    .bind(&p.sender)
    .bind(p.ts)
    .bind(now)
    .bind(now + PROBE_LIFETIME_SECS)
    .bind(&p.payload)
    .bind(&p.auth)
    .bind(&p.binding)
    .execute(&mut **tx)
    .await?;
    Ok(seq)
}

fn scope_name(s: LimitScope) -> &'static str {
    match s {
        LimitScope::Sender => "sender",
        LimitScope::Requester => "requester",
        LimitScope::Mailbox => "mailbox",
    }
}

/// Records an event in the sliding window (`scope`, `key`) inside `tx` and
/// says whether the window is still within `rate`. The insert comes first,
/// so SQLite takes its write lock before counting; on `false` the caller
/// drops `tx`, rolling the insert back.
async fn take_slot(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    scope: &str,
    key: &str,
    rate: Rate,
    now: i64,
) -> Result<bool> {
    sqlx::query("INSERT INTO rate_events (scope, rkey, at) VALUES ($1, $2, $3)")
        .bind(scope)
        .bind(key)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    let n: i64 =
        sqlx::query("SELECT COUNT(*) FROM rate_events WHERE scope = $1 AND rkey = $2 AND at > $3")
            .bind(scope)
            .bind(key)
            .bind(now - rate.window_secs)
            .fetch_one(&mut **tx)
            .await?
            .get(0);
    Ok(n <= i64::from(rate.max))
}
