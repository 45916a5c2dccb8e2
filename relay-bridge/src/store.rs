//! The message cache (issue #5): SQLite by default, Postgres for operators,
//! one set of migrations and one test suite for both (through sqlx's `Any`).

use sqlx::Row;

use crate::message::Message;
use crate::since::Since;
use crate::{Error, Result};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Most messages one catch-up query returns (bounds memory per subscriber).
pub const MAX_CATCH_UP: i64 = 20_000;

/// Rows per INSERT statement when a batch is written: 7 parameters each,
/// far under SQLite's and Postgres's limits on bound parameters.
const ROWS_PER_INSERT: usize = 64;

/// The cache.
#[derive(Clone, Debug)]
pub struct Store {
    pool: sqlx::AnyPool,
    sqlite: bool,
    shared: bool,
}

impl Store {
    /// Connects and runs the migrations (a per-bridge cache).
    pub async fn open(url: &str) -> Result<Store> {
        Self::open_with(url, false).await
    }

    /// Connects and runs the migrations; `shared` stores each
    /// (topic, payload) once, for bridges sharing one Postgres database
    /// (refused with SQLite).
    pub async fn open_with(url: &str, shared: bool) -> Result<Store> {
        if shared && rdv_service_kit::db::is_sqlite(url) {
            return Err(Error::Config(
                "cache.shared needs a Postgres cache.database_url".into(),
            ));
        }
        let sqlite = rdv_service_kit::db::is_sqlite(url);
        // SQLite in WAL mode: readers (catch-ups) need not queue behind the
        // background writer's transaction; an in-memory database is one
        // connection's, so it gets one.
        let conns = match (sqlite, url.contains(":memory:")) {
            (true, true) => 1,
            (true, false) => 4,
            _ => 8,
        };
        let pool = rdv_service_kit::db::connect(url, conns, &MIGRATOR).await?;
        Ok(Store {
            pool,
            sqlite,
            shared,
        })
    }

    pub fn is_sqlite(&self) -> bool {
        self.sqlite
    }

    /// Whether this is a shared cache (one row per topic and payload).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The content key written with `m`: set only in shared mode.
    fn key_for(&self, m: &Message) -> Option<String> {
        self.shared
            .then(|| crate::content::content_key(&m.topic, &m.payload()))
    }

    /// Stores one message event (in shared mode, skipped if its topic and
    /// payload are already cached).
    pub async fn insert(&self, m: &Message) -> Result<()> {
        let body = m.to_json();
        let sql = if self.shared {
            "INSERT INTO rdv_bridge_messages (id, topic, msg_key, expires, size, body, content_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING"
        } else {
            "INSERT INTO rdv_bridge_messages (id, topic, msg_key, expires, size, body, content_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)"
        };
        sqlx::query(sql)
            .bind(&m.id)
            .bind(&m.topic)
            .bind(m.key)
            .bind(m.expires.unwrap_or(i64::MAX))
            .bind(i64::try_from(body.len()).unwrap_or(i64::MAX))
            .bind(body)
            .bind(self.key_for(m))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Stores a batch of messages in one transaction. A message whose id is
    /// already cached is skipped, so a retried batch writes nothing twice;
    /// in shared mode so is one whose topic and payload are (whichever
    /// bridge writes first wins).
    pub async fn insert_batch(&self, ms: &[std::sync::Arc<Message>]) -> Result<()> {
        // Shared mode: rows go in content-key order, so two bridges writing
        // overlapping batches take the unique index's locks in one order
        // (no deadlock between them on Postgres).
        let mut rows: Vec<(Option<String>, &Message)> =
            ms.iter().map(|m| (self.key_for(m), &**m)).collect();
        if self.shared {
            rows.sort_by(|a, b| a.0.cmp(&b.0));
        }
        // Several rows per statement: one round trip to the database (for
        // SQLite, to its worker thread) per chunk instead of per message.
        let mut tx = self.pool.begin().await?;
        for chunk in rows.chunks(ROWS_PER_INSERT) {
            let mut sql = String::from(
                "INSERT INTO rdv_bridge_messages (id, topic, msg_key, expires, size, body, content_key) VALUES ",
            );
            for i in 0..chunk.len() {
                let p = i * 7;
                if i > 0 {
                    sql.push(',');
                }
                sql.push_str(&format!(
                    "(${},${},${},${},${},${},${})",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4,
                    p + 5,
                    p + 6,
                    p + 7
                ));
            }
            sql.push_str(" ON CONFLICT DO NOTHING");
            let mut q = sqlx::query(&sql);
            for (ck, m) in chunk {
                let body = m.to_json();
                q = q
                    .bind(&m.id)
                    .bind(&m.topic)
                    .bind(m.key)
                    .bind(m.expires.unwrap_or(i64::MAX))
                    .bind(i64::try_from(body.len()).unwrap_or(i64::MAX))
                    .bind(body)
                    .bind(ck.as_deref());
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
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

    /// The ordering key of the cached message `id`.
    pub async fn key_of(&self, id: &str) -> Result<Option<i64>> {
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
