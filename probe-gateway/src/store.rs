//! The gateway's state on SQLite (embedded default) or Postgres (operators),
//! through one code path (`sqlx::Any`) and one set of migrations: mailboxes
//! and their agents, pending mailbox proofs, integration tokens (hashes
//! only), admitted probes with their verdicts, the dedupe record and the
//! rate-limit windows (§5.2.1 gate step 3), and signed-request nonces.
//!
//! No raw mail is stored: a probe row holds the verified RDV/1 payload.

use rdv_proto::consts::PROBE_LIFETIME_SECS;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
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
}

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
        install_default_drivers();
        let sqlite = url.starts_with("sqlite:");
        let pool = AnyPoolOptions::new()
            .max_connections(if sqlite {
                max_connections.clamp(1, 4)
            } else {
                max_connections.max(1)
            })
            .connect(url)
            .await?;
        if sqlite {
            sqlx::query("PRAGMA journal_mode=WAL")
                .execute(&pool)
                .await?;
            sqlx::query("PRAGMA busy_timeout=5000")
                .execute(&pool)
                .await?;
        }
        MIGRATOR.run(&pool).await?;
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
    #[allow(clippy::too_many_arguments)]
    pub async fn verify_code(
        &self,
        mailbox: &str,
        agent: &str,
        code_hash: &str,
        max_attempts: u32,
        token_id: &str,
        token_secret_hash: &str,
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
            "INSERT INTO mailboxes (mailbox, agent, verified) VALUES ($1, $2, $3) \
             ON CONFLICT (mailbox) DO UPDATE SET agent = excluded.agent, verified = excluded.verified",
        )
        .bind(mailbox)
        .bind(agent)
        .bind(now)
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

    /// Dedupe and rate limits (§5.2.1 gate step 3), then queues the probe,
    /// in one transaction: a refused message records nothing. Returns the
    /// probe's sequence number, or the refusal.
    pub async fn admit(
        &self,
        p: &NewProbe,
        limits: &LimitConfig,
        now: i64,
    ) -> Result<Result<i64, Refusal>> {
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
        let seq: i64 = sqlx::query(
            "UPDATE counters SET value = value + 1 WHERE name = 'probe_seq' RETURNING value",
        )
        .fetch_one(&mut *tx)
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
        .execute(&mut *tx)
        .await?;
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
        let rows = sqlx::query(
            "SELECT seq, received, mailbox, agent, kind, id, requester, sender, payload, auth, \
             binding, ts FROM probes WHERE agent = $1 AND seq > $2 AND expires > $3 \
             ORDER BY seq LIMIT $4",
        )
        .bind(agent)
        .bind(after)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| StoredProbe {
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
            })
            .collect())
    }

    /// Counts an event against a sliding window (`scope`, `key`) and
    /// records it when under the limit; false when the limit is reached.
    pub async fn count_event(&self, scope: &str, key: &str, rate: Rate, now: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        // A write first, so SQLite takes its write lock before counting.
        sqlx::query("INSERT INTO rate_events (scope, rkey, at) VALUES ($1, $2, $3)")
            .bind(scope)
            .bind(key)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let n: i64 = sqlx::query(
            "SELECT COUNT(*) FROM rate_events WHERE scope = $1 AND rkey = $2 AND at > $3",
        )
        .bind(scope)
        .bind(key)
        .bind(now - rate.window_secs)
        .fetch_one(&mut *tx)
        .await?
        .get(0);
        if n > i64::from(rate.max) {
            // Dropping the transaction rolls the insertion back.
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
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
        let mut n = 0;
        for (sql, t) in [
            ("DELETE FROM probes WHERE expires <= $1", now),
            ("DELETE FROM seen_ids WHERE expires <= $1", now),
            ("DELETE FROM request_nonces WHERE expires <= $1", now),
            ("DELETE FROM pending_registrations WHERE expires <= $1", now),
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

fn scope_name(s: LimitScope) -> &'static str {
    match s {
        LimitScope::Sender => "sender",
        LimitScope::Requester => "requester",
        LimitScope::Mailbox => "mailbox",
    }
}
