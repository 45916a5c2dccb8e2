//! The message cache (issue #5): SQLite by default, Postgres for operators,
//! one set of migrations and one test suite for both (through sqlx's `Any`).

use sqlx::Row;
use sqlx::any::{AnyPoolOptions, install_default_drivers};

use crate::message::Message;
use crate::since::Since;
use crate::{Error, Result};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Most messages one catch-up query returns (bounds memory per subscriber).
pub const MAX_CATCH_UP: i64 = 20_000;

/// The cache.
#[derive(Clone, Debug)]
pub struct Store {
    pool: sqlx::AnyPool,
    sqlite: bool,
}

impl Store {
    /// Connects and runs the migrations.
    pub async fn open(url: &str) -> Result<Store> {
        install_default_drivers();
        let sqlite = url.starts_with("sqlite:");
        let mut opts = AnyPoolOptions::new().max_connections(if sqlite { 1 } else { 8 });
        if sqlite {
            opts = opts.after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("PRAGMA journal_mode=WAL")
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query("PRAGMA synchronous=NORMAL")
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query("PRAGMA busy_timeout=5000")
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            });
        }
        let pool = opts.connect(url).await?;
        MIGRATOR.run(&pool).await?;
        Ok(Store { pool, sqlite })
    }

    pub fn is_sqlite(&self) -> bool {
        self.sqlite
    }

    /// Stores one message event.
    pub async fn insert(&self, m: &Message) -> Result<()> {
        let body = m.to_json();
        sqlx::query(
            "INSERT INTO rdv_bridge_messages (id, topic, msg_key, expires, size, body) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&m.id)
        .bind(&m.topic)
        .bind(m.key)
        .bind(m.expires.unwrap_or(i64::MAX))
        .bind(i64::try_from(body.len()).unwrap_or(i64::MAX))
        .bind(body)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The cached messages of `topics` that `since` asks for, oldest first,
    /// not expired at `now_secs`.
    pub async fn query(
        &self,
        topics: &[String],
        since: &Since,
        now_secs: i64,
    ) -> Result<Vec<Message>> {
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let list = (0..topics.len())
            .map(|i| format!("${}", i + 3))
            .collect::<Vec<_>>()
            .join(",");
        // $1 = expires floor, $2 = key floor (exclusive).
        let (floor, latest) = match since {
            Since::None => return Ok(Vec::new()),
            Since::All => (i64::MIN, false),
            Since::Latest => (i64::MIN, true),
            Since::Key(k) => (*k, false),
            Since::Time(t) => (t.saturating_mul(1_000_000).saturating_sub(1), false),
            Since::Id(id) => match self.key_of(id).await? {
                Some(k) => (k, false),
                // ntfy: an unknown id returns everything cached.
                None => (i64::MIN, false),
            },
        };
        let sql = if latest {
            format!(
                "SELECT body, msg_key FROM rdv_bridge_messages WHERE expires > $1 AND msg_key > $2 \
                 AND topic IN ({list}) ORDER BY msg_key DESC, id DESC LIMIT 1"
            )
        } else {
            format!(
                "SELECT body, msg_key FROM rdv_bridge_messages WHERE expires > $1 AND msg_key > $2 \
                 AND topic IN ({list}) ORDER BY msg_key, id LIMIT {MAX_CATCH_UP}"
            )
        };
        let mut q = sqlx::query(&sql).bind(now_secs).bind(floor);
        for t in topics {
            q = q.bind(t);
        }
        let rows = q.fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                let body: String = r.try_get(0)?;
                let key: i64 = r.try_get(1)?;
                let mut m: Message =
                    serde_json::from_str(&body).map_err(|e| Error::Corrupt(e.to_string()))?;
                m.key = key;
                Ok(m)
            })
            .collect()
    }

    async fn key_of(&self, id: &str) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT msg_key FROM rdv_bridge_messages WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(r) => Some(r.try_get(0)?),
            None => None,
        })
    }

    /// Drops what expired before `now_secs`; returns how many.
    pub async fn prune(&self, now_secs: i64) -> Result<u64> {
        let r = sqlx::query("DELETE FROM rdv_bridge_messages WHERE expires <= $1")
            .bind(now_secs)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }

    /// Cached messages and their total size in bytes (for `/metrics`).
    pub async fn stats(&self) -> Result<(i64, i64)> {
        let r = sqlx::query(
            "SELECT COUNT(*), CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM rdv_bridge_messages",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((r.try_get(0)?, r.try_get(1)?))
    }

    /// A cheap round trip (for `/healthz`).
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}
