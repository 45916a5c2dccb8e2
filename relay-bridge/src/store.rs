//! The message cache (issue #5): SQLite by default, Postgres for operators,
//! one set of migrations and one test suite for both (through sqlx's `Any`).

use sqlx::Row;

use crate::bodies::{Bodies, BodyRef, INLINE_MAX};
use crate::message::{Message, Text};
use crate::since::Since;
use crate::{Error, Result};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Most messages one catch-up query returns (bounds memory per subscriber).
pub const MAX_CATCH_UP: i64 = 20_000;

/// Rows per INSERT statement when a batch is written: 9 parameters each,
/// far under SQLite's and Postgres's limits on bound parameters.
const ROWS_PER_INSERT: usize = 64;

/// Runs blocking file I/O (the body segment files) on tokio's blocking
/// pool.
async fn off_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))
}

/// One cached row on its way back to a message.
struct Found {
    /// The message JSON; for a text in a body file, all but the text
    /// (empty in rows written before texts were split off: their frame is
    /// the whole JSON).
    body: String,
    key: i64,
    size: usize,
    at: Option<BodyRef>,
    frame: Option<Vec<u8>>,
}

impl Found {
    fn into_message(self) -> Result<Message> {
        let corrupt = |e: serde_json::Error| Error::Corrupt(e.to_string());
        let mut m: Message = match (self.frame, self.body.is_empty()) {
            (Some(frame), true) => serde_json::from_slice(&frame).map_err(corrupt)?,
            (Some(frame), false) => {
                let mut m: Message = serde_json::from_str(&self.body).map_err(corrupt)?;
                let text = Text::from_utf8(bytes::Bytes::from(frame))
                    .map_err(|_| Error::Corrupt("cached text is not UTF-8".into()))?;
                m.message = Some(text);
                m
            }
            (None, _) => serde_json::from_str(&self.body).map_err(corrupt)?,
        };
        m.key = self.key;
        Ok(m)
    }
}

/// The cache.
#[derive(Clone, Debug)]
pub struct Store {
    pool: sqlx::AnyPool,
    sqlite: bool,
    shared: bool,
    /// Segment files for large bodies (a SQLite file cache only).
    bodies: Option<Bodies>,
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
        let bodies = match Bodies::dir_for(url) {
            Some(d) if sqlite => Some(Bodies::open(&d)?),
            _ => None,
        };
        Ok(Store {
            pool,
            sqlite,
            shared,
            bodies,
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

    /// Stores one message event: a batch of one (in shared mode, skipped
    /// if its topic and payload are already cached).
    pub async fn insert(&self, m: &Message) -> Result<()> {
        self.insert_batch(&[std::sync::Arc::new(m.clone())]).await
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
        // Large texts go to the segment files first, in one write, so no
        // row ever names a frame not yet written. Their rows keep the rest
        // of the message as JSON (`head_json`); other rows keep it all.
        let big = |m: &Message| {
            self.bodies.is_some() && m.message.as_ref().is_some_and(|t| t.len() >= INLINE_MAX)
        };
        let mut bodies: Vec<String> = rows
            .iter()
            .map(|(_, m)| if big(m) { m.head_json() } else { m.to_json() })
            .collect();
        let mut sizes: Vec<usize> = bodies.iter().map(String::len).collect();
        let mut refs: Vec<Option<BodyRef>> = vec![None; rows.len()];
        if let Some(files) = &self.bodies {
            let texts: Vec<(usize, bytes::Bytes)> = rows
                .iter()
                .enumerate()
                .filter(|(_, (_, m))| big(m))
                .map(|(i, (_, m))| (i, m.message.as_ref().map(Text::bytes).unwrap_or_default()))
                .collect();
            if !texts.is_empty() {
                let files = files.clone();
                let first_key = rows.first().map_or(0, |(_, m)| m.key);
                let (idx, texts): (Vec<usize>, Vec<bytes::Bytes>) = texts.into_iter().unzip();
                let written = off_thread(move || {
                    let slices: Vec<&[u8]> = texts.iter().map(|t| &t[..]).collect();
                    files.append(first_key, &slices).map(|r| (idx, texts, r))
                })
                .await??;
                let (idx, texts, written) = written;
                for ((i, t), r) in idx.into_iter().zip(texts).zip(written) {
                    refs[i] = Some(r);
                    sizes[i] = t.len();
                }
            }
        }
        // Several rows per statement: one round trip to the database (for
        // SQLite, to its worker thread) per chunk instead of per message.
        let mut tx = self.pool.begin().await?;
        let mut at = 0;
        for chunk in rows.chunks(ROWS_PER_INSERT) {
            // The two file columns only when this chunk has a body in a
            // file: small messages keep the shorter statement.
            let files = refs[at..at + chunk.len()].iter().any(Option::is_some);
            let cols = if files { 9 } else { 7 };
            let mut sql = String::from(
                "INSERT INTO rdv_bridge_messages \
                 (id, topic, msg_key, expires, size, body, content_key",
            );
            sql.push_str(if files {
                ", body_file, body_offset) VALUES "
            } else {
                ") VALUES "
            });
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push(',');
                }
                // SQLite gets anonymous `?`: sqlx looks up each numbered
                // parameter's name, a linear scan in SQLite, so 576 `$N`
                // cost a quadratic 7% of the bridge's CPU at 32 KB.
                let list: Vec<String> = (1..=cols)
                    .map(|k| {
                        if self.sqlite {
                            "?".to_owned()
                        } else {
                            format!("${}", i * cols + k)
                        }
                    })
                    .collect();
                sql.push('(');
                sql.push_str(&list.join(","));
                sql.push(')');
            }
            sql.push_str(" ON CONFLICT DO NOTHING");
            let mut q = sqlx::query(&sql);
            for (ck, m) in chunk {
                let body = std::mem::take(&mut bodies[at]);
                let size = i64::try_from(sizes[at]).unwrap_or(i64::MAX);
                let r = refs[at];
                at += 1;
                q = q
                    .bind(&m.id)
                    .bind(&m.topic)
                    .bind(m.key)
                    .bind(m.expires.unwrap_or(i64::MAX))
                    .bind(size)
                    .bind(body)
                    .bind(ck.as_deref());
                if files {
                    q = q.bind(r.map(|r| r.0)).bind(r.map(|r| r.1));
                }
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
                "SELECT body, msg_key, size, body_file, body_offset FROM rdv_bridge_messages \
                 WHERE expires > $1 AND msg_key > $2 \
                 AND topic IN ({list}) ORDER BY msg_key DESC, id DESC LIMIT 1"
            )
        } else {
            format!(
                "SELECT body, msg_key, size, body_file, body_offset FROM rdv_bridge_messages \
                 WHERE expires > $1 AND msg_key > $2 \
                 AND topic IN ({list}) ORDER BY msg_key, id LIMIT {MAX_CATCH_UP}"
            )
        };
        let mut q = sqlx::query(&sql).bind(now_secs).bind(floor);
        for t in topics {
            q = q.bind(t);
        }
        let rows = q.fetch_all(&self.pool).await?;
        let mut found = Vec::with_capacity(rows.len());
        for r in &rows {
            let body: String = r.try_get(0)?;
            let key: i64 = r.try_get(1)?;
            let size: i64 = r.try_get(2)?;
            let file: Option<i64> = r.try_get(3)?;
            let off: Option<i64> = r.try_get(4)?;
            let at = file.zip(off);
            found.push(Found {
                body,
                key,
                size: usize::try_from(size).unwrap_or(0),
                at,
                frame: None,
            });
        }
        // Texts in segment files: read together, off the async threads. A
        // frame that is missing or does not check loses its message only.
        if let Some(files) = self.bodies.clone()
            && found.iter().any(|f| f.at.is_some())
        {
            found = off_thread(move || {
                let mut files = files.reader();
                found
                    .into_iter()
                    .filter_map(|mut f| {
                        let Some(at) = f.at else {
                            return Some(f);
                        };
                        match files.read(at, f.size) {
                            Some(b) if b.len() == f.size => {
                                f.frame = Some(b);
                                Some(f)
                            }
                            _ => {
                                tracing::warn!(
                                    file = at.0,
                                    offset = at.1,
                                    "cached body unreadable; skipped"
                                );
                                None
                            }
                        }
                    })
                    .collect()
            })
            .await?;
        }
        found.into_iter().map(Found::into_message).collect()
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
        // A closed body file goes once no row names it (an index lookup per
        // file: a day of cache is a few dozen files).
        if let Some(files) = self.bodies.clone() {
            let f = files.clone();
            let closed = off_thread(move || f.closed()).await??;
            for n in closed {
                let used =
                    sqlx::query("SELECT 1 FROM rdv_bridge_messages WHERE body_file = $1 LIMIT 1")
                        .bind(n)
                        .fetch_optional(&self.pool)
                        .await?
                        .is_some();
                if !used {
                    let f = files.clone();
                    off_thread(move || f.delete(n)).await??;
                }
            }
        }
        Ok(r.rows_affected())
    }

    /// Body segment files on disk (None: bodies are kept in the rows).
    pub fn body_files(&self) -> Result<Option<usize>> {
        self.bodies.as_ref().map(Bodies::files).transpose()
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
