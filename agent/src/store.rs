//! The agent's database, `agent.db` in its home: the core's records, the
//! inbox and the generation, on SQLite through sqlx.
//!
//! §7 persistence: each input's writes and inbox events commit in one
//! transaction before any effect of that input leaves, so a crash never
//! reuses a seq nor loses an outbox entry; at worst a payload goes twice.
//! A transaction is `BEGIN IMMEDIATE`, so inputs are serialized across
//! processes (the listener and a CLI command on the same home): each one
//! loads the state its predecessor committed.

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use rdv_agent_core::record::{Record, Table, Write};
use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};
use tokio::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// How many inbox events are kept: the newest, pruned as new ones commit.
pub const INBOX_KEEP: u32 = 10_000;

/// How long a transaction waits for another process's before failing. An
/// input's transaction holds no I/O (the core is sans-I/O), so this is long.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Reader connections per process (`Store::pool`), which WAL lets run
/// beside a write; writes have connections of their own (`durable`,
/// `relaxed`), one writer at a time (the `writer` mutex).
const MAX_CONNECTIONS: u32 = 4;

/// The agent's database.
#[derive(Debug)]
pub struct Store {
    /// Readers (and the migrations).
    pool: SqlitePool,
    /// The one connection every durable input commits on
    /// ([`Store::begin`]): always the same one, so its page cache stays
    /// valid between inputs. A pool of several hands out its connections in
    /// turn, and each finds its cache stale (another one wrote) and reads
    /// the pages again.
    durable: SqlitePool,
    /// One connection whose commits are not fsynced, for the outcomes of
    /// deliveries alone ([`Store::begin_outcome`]); opened on first use.
    relaxed: SqlitePool,
    /// Serializes this process's writers here, so they queue instead of
    /// spinning in SQLite's busy handler against each other.
    writer: Mutex<()>,
    inbox_keep: u32,
    path: PathBuf,
}

/// What [`Store::summary`] counts: a table's records, or those whose
/// top-level `field` holds the JSON value given.
#[derive(Debug, Clone)]
pub struct Count<'a> {
    pub table: Table,
    pub filter: Option<(&'a str, Value)>,
}

/// What [`Store::summary`] read: the loaded tables' records, then the
/// counts in the order asked.
#[derive(Debug, Clone)]
pub struct Summary {
    pub records: Vec<Record>,
    pub counts: Vec<u64>,
}

/// One input's transaction. Dropped without [`Txn::commit`], it rolls back:
/// nothing of it is stored and the generation is unchanged.
#[must_use = "a transaction dropped without commit rolls back"]
pub struct Txn<'a> {
    // Declared first, so it is dropped (rolled back) before the writer slot is freed.
    tx: Transaction<'static, Sqlite>,
    store: &'a Store,
    /// The generation read in this transaction: under `BEGIN IMMEDIATE` no
    /// one else can change it before the commit, which bumps it.
    generation: Option<u64>,
    _writer: MutexGuard<'a, ()>,
}

impl Store {
    /// Opens (creating it with mode 600) and migrates the database.
    pub async fn open(path: &Path) -> Result<Store> {
        Store::open_keeping(path, INBOX_KEEP).await
    }

    /// [`Store::open`], keeping the newest `inbox_keep` inbox events (at least 1).
    pub async fn open_keeping(path: &Path, inbox_keep: u32) -> Result<Store> {
        private_file(path)?;
        let opts = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL, not NORMAL: under WAL, NORMAL may lose the last commits
            // on power loss, and an envelope sent on a lost commit is a
            // reused seq (§7 persistence).
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        // A local file's connection does not go stale: no ping before each
        // use (sqlx's default), which costs a round trip to the connection's
        // thread per transaction.
        let relaxed = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(30))
            .connect_lazy_with(opts.clone().synchronous(SqliteSynchronous::Normal));
        let durable = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(30))
            .connect_lazy_with(opts.clone());
        let pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(opts)
            .await
            .map_err(|e| db_err(path, e))?;
        // Two processes opening a new file at once both try the first
        // migration; the loser fails, and on retry finds it applied.
        if MIGRATOR.run(&pool).await.is_err() {
            MIGRATOR
                .run(&pool)
                .await
                .map_err(|e| migrate_err(path, e))?;
        }
        // SQLite gives -wal and -shm the database's mode; fix any left by an older run.
        for side in ["-wal", "-shm"] {
            let mut p = path.as_os_str().to_owned();
            p.push(side);
            private_mode(Path::new(&p))?;
        }
        Ok(Store {
            pool,
            durable,
            relaxed,
            writer: Mutex::new(()),
            inbox_keep: inbox_keep.max(1),
            path: path.to_owned(),
        })
    }

    /// Starts one input's transaction with `BEGIN IMMEDIATE`: it takes the
    /// write lock now, waiting (up to [`BUSY_TIMEOUT`]) for any other
    /// process's transaction, so what it loads is current until it commits.
    pub async fn begin(&self) -> Result<Txn<'_>> {
        let writer = self.writer.lock().await;
        let tx = self
            .durable
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| db_err(&self.path, e))?;
        Ok(Txn {
            tx,
            store: self,
            generation: None,
            _writer: writer,
        })
    }

    /// [`Store::begin`] for the outcome of a delivery (what relays or a
    /// carrier said, §6.2): its commit is not fsynced (`synchronous=NORMAL`
    /// under WAL). A process crash loses nothing of it; a power loss may
    /// lose it, which only sends the delivery again (its seq and outbox
    /// entry committed durably before it first left, §7; the peer drops the
    /// copy). The next durable commit makes it durable too (one WAL).
    pub async fn begin_outcome(&self) -> Result<Txn<'_>> {
        let writer = self.writer.lock().await;
        let tx = self
            .relaxed
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| db_err(&self.path, e))?;
        Ok(Txn {
            tx,
            store: self,
            generation: None,
            _writer: writer,
        })
    }

    /// Up to `limit` inbox events after `cursor`, oldest first. A first
    /// cursor above `cursor + 1` means the events between were pruned.
    pub async fn inbox_after(&self, cursor: u64, limit: u32) -> Result<Vec<(u64, Value)>> {
        let rows = sqlx::query(
            "SELECT cursor, event FROM inbox WHERE cursor > ?1 ORDER BY cursor LIMIT ?2",
        )
        .bind(i64::try_from(cursor).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_err(&self.path, e))?;
        rows.iter().map(|r| self.inbox_row(r)).collect()
    }

    /// The newest `limit` inbox events, oldest first.
    pub async fn inbox_latest(&self, limit: u32) -> Result<Vec<(u64, Value)>> {
        let rows = sqlx::query(
            "SELECT cursor, event FROM \
             (SELECT cursor, event FROM inbox ORDER BY cursor DESC LIMIT ?1) \
             ORDER BY cursor",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_err(&self.path, e))?;
        rows.iter().map(|r| self.inbox_row(r)).collect()
    }

    /// One snapshot read for a summary (`rdv status`), without loading the
    /// state: the records of the `load` tables, and one count per
    /// [`Count`]. A listener's writes go on beside it (WAL), and its cost
    /// does not grow with the tables it only counts.
    pub async fn summary(&self, load: &[Table], counts: &[Count<'_>]) -> Result<Summary> {
        let mut tx = self.pool.begin().await.map_err(|e| db_err(&self.path, e))?;
        let mut records = Vec::new();
        for t in load {
            let rows =
                sqlx::query("SELECT tbl, key, value FROM records WHERE tbl = ?1 ORDER BY key")
                    .bind(t.as_str())
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(|e| db_err(&self.path, e))?;
            for r in &rows {
                records.push(read_record(&self.path, r)?);
            }
        }
        let mut n = Vec::with_capacity(counts.len());
        for c in counts {
            let q = match &c.filter {
                None => sqlx::query_scalar("SELECT count(*) FROM records WHERE tbl = ?1")
                    .bind(c.table.as_str()),
                Some((field, equals)) => {
                    let json = serde_json::to_string(equals)
                        .map_err(|e| Error::Store(format!("a count's value: {e}")))?;
                    // Value and JSON type, both read by SQLite's JSON: the
                    // stored false is counted, a stored 0 is not.
                    sqlx::query_scalar(
                        "SELECT count(*) FROM records WHERE tbl = ?1 \
                         AND json_extract(value, ?2) = json_extract(?3, '$') \
                         AND json_type(value, ?2) = json_type(?3, '$')",
                    )
                    .bind(c.table.as_str())
                    .bind(format!("$.\"{field}\""))
                    .bind(json)
                }
            };
            let count: i64 = q
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| db_err(&self.path, e))?;
            n.push(u64::try_from(count).unwrap_or(0));
        }
        Ok(Summary { records, counts: n })
    }

    /// The generation last committed, by any process.
    pub async fn generation(&self) -> Result<u64> {
        let row = sqlx::query("SELECT value FROM meta WHERE key = 'generation'")
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| db_err(&self.path, e))?;
        parse_generation(&self.path, row)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes every connection, waiting for them (and the WAL checkpoint on
    /// the last one) to finish.
    pub async fn close(self) {
        self.relaxed.close().await;
        self.durable.close().await;
        self.pool.close().await;
    }

    fn inbox_row(&self, r: &SqliteRow) -> Result<(u64, Value)> {
        let cursor: i64 = r.try_get(0).map_err(|e| db_err(&self.path, e))?;
        let event: String = r.try_get(1).map_err(|e| db_err(&self.path, e))?;
        let cursor = u64::try_from(cursor).map_err(|_| {
            Error::Store(format!(
                "{}: inbox cursor {cursor} is negative",
                self.path.display()
            ))
        })?;
        let event = serde_json::from_str(&event).map_err(|e| {
            Error::Store(format!(
                "{}: inbox event {cursor} is not JSON: {e}",
                self.path.display()
            ))
        })?;
        Ok((cursor, event))
    }
}

impl Txn<'_> {
    /// The generation as of this transaction (the last commit's).
    pub async fn generation(&mut self) -> Result<u64> {
        if let Some(g) = self.generation {
            return Ok(g);
        }
        let row = sqlx::query("SELECT value FROM meta WHERE key = 'generation'")
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(|e| self.err(e))?;
        let g = parse_generation(&self.store.path, row)?;
        self.generation = Some(g);
        Ok(g)
    }

    /// Every record, ordered by table and key, for the core to rebuild its
    /// state. A table this version does not know (a newer `rdv` wrote it) is
    /// refused: dropping it would lose state on the next commit.
    pub async fn load_all(&mut self) -> Result<Vec<Record>> {
        let rows = sqlx::query("SELECT tbl, key, value FROM records ORDER BY tbl, key")
            .fetch_all(&mut *self.tx)
            .await
            .map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    /// The records of one table, ordered by key.
    pub async fn load_table(&mut self, t: Table) -> Result<Vec<Record>> {
        let rows = sqlx::query("SELECT tbl, key, value FROM records WHERE tbl = ?1 ORDER BY key")
            .bind(t.as_str())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    /// Applies the writes in order: a value puts (inserts or replaces), none deletes.
    pub async fn write(&mut self, writes: &[Write]) -> Result<()> {
        for w in writes {
            match &w.value {
                Some(v) => {
                    let text = serde_json::to_string(v).map_err(|e| {
                        Error::Store(format!("record {}/{}: {e}", w.table.as_str(), w.key))
                    })?;
                    sqlx::query(
                        "INSERT INTO records (tbl, key, value) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value",
                    )
                    .bind(w.table.as_str())
                    .bind(&w.key)
                    .bind(text)
                    .execute(&mut *self.tx)
                    .await
                }
                None => {
                    sqlx::query("DELETE FROM records WHERE tbl = ?1 AND key = ?2")
                        .bind(w.table.as_str())
                        .bind(&w.key)
                        .execute(&mut *self.tx)
                        .await
                }
            }
            .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Appends events to the inbox and returns their cursors, in order. The
    /// oldest beyond the kept number are pruned in this same transaction.
    pub async fn append_inbox(&mut self, events: &[Value], at: &str) -> Result<Vec<u64>> {
        let mut cursors = Vec::with_capacity(events.len());
        for ev in events {
            let text =
                serde_json::to_string(ev).map_err(|e| Error::Store(format!("inbox event: {e}")))?;
            let cursor: i64 = sqlx::query_scalar(
                "INSERT INTO inbox (at, event) VALUES (?1, ?2) RETURNING cursor",
            )
            .bind(at)
            .bind(text)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(|e| self.err(e))?;
            cursors.push(
                u64::try_from(cursor)
                    .map_err(|_| Error::Store(format!("inbox cursor {cursor} is negative")))?,
            );
        }
        if let Some(&newest) = cursors.last() {
            // Cursors only grow and rows go only from the oldest (here), so
            // the newest `inbox_keep` are the cursors above this one: a
            // range on the key, where an OFFSET walked up to `inbox_keep`
            // rows on every commit.
            let below = i64::try_from(newest)
                .unwrap_or(i64::MAX)
                .saturating_sub(i64::from(self.store.inbox_keep));
            sqlx::query("DELETE FROM inbox WHERE cursor <= ?1")
                .bind(below)
                .execute(&mut *self.tx)
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(cursors)
    }

    /// Bumps the generation and commits; returns the new generation. Only
    /// after this returns may the input's effects leave (§7 persistence).
    pub async fn commit(mut self) -> Result<u64> {
        let next = self
            .generation()
            .await?
            .checked_add(1)
            .ok_or_else(|| Error::Store("generation overflow".to_owned()))?;
        sqlx::query("UPDATE meta SET value = ?1 WHERE key = 'generation'")
            .bind(next.to_string())
            .execute(&mut *self.tx)
            .await
            .map_err(|e| self.err(e))?;
        let path = self.store.path.clone();
        self.tx.commit().await.map_err(|e| db_err(&path, e))?;
        Ok(next)
    }

    fn err(&self, e: sqlx::Error) -> Error {
        db_err(&self.store.path, e)
    }

    fn record(&self, r: &SqliteRow) -> Result<Record> {
        read_record(&self.store.path, r)
    }
}

fn read_record(path: &Path, r: &SqliteRow) -> Result<Record> {
    let tbl: String = r.try_get(0).map_err(|e| db_err(path, e))?;
    let key: String = r.try_get(1).map_err(|e| db_err(path, e))?;
    let value: String = r.try_get(2).map_err(|e| db_err(path, e))?;
    let path = path.display();
    let table = Table::parse(&tbl).ok_or_else(|| {
        Error::Store(format!(
            "{path}: has records of table {tbl:?}, unknown to this version of rdv \
             (written by a newer one?); upgrade rdv to use this home"
        ))
    })?;
    let value = Value::from_str(&value)
        .map_err(|e| Error::Store(format!("{path}: record {tbl}/{key} is not JSON: {e}")))?;
    Ok(Record { table, key, value })
}

/// Creates the file with mode 600 if it does not exist, else tightens its
/// mode. An existing file is never opened here: closing any descriptor of a
/// database drops every POSIX lock SQLite holds on it in this process.
fn private_file(path: &Path) -> Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => private_mode(path),
        Err(e) => Err(Error::Store(format!(
            "{}: cannot create the database: {e}",
            path.display()
        ))),
    }
}

/// Sets mode 600 on a file that group or others may reach; none is fine.
fn private_mode(path: &Path) -> Result<()> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::Store(format!("{}: {e}", path.display()))),
    };
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::Store(format!("{}: cannot set mode 600: {e}", path.display())))?;
    }
    Ok(())
}

fn parse_generation(path: &Path, row: Option<SqliteRow>) -> Result<u64> {
    let bad = || {
        Error::Store(format!(
            "{}: the generation is missing or damaged",
            path.display()
        ))
    };
    let row = row.ok_or_else(bad)?;
    let text: String = row.try_get(0).map_err(|e| db_err(path, e))?;
    text.parse().map_err(|_| bad())
}

fn db_err(path: &Path, e: sqlx::Error) -> Error {
    let busy = e
        .as_database_error()
        .and_then(|d| d.code())
        // SQLITE_BUSY and its extended codes.
        .is_some_and(|c| c.parse::<i32>().is_ok_and(|n| n & 0xff == 5));
    if busy {
        Error::Store(format!(
            "{}: {e} (another rdv process kept it busy for over {} s)",
            path.display(),
            BUSY_TIMEOUT.as_secs()
        ))
    } else {
        Error::Store(format!("{}: {e}", path.display()))
    }
}

fn migrate_err(path: &Path, e: sqlx::migrate::MigrateError) -> Error {
    use sqlx::migrate::MigrateError;
    match e {
        MigrateError::VersionMissing(v) => Error::Store(format!(
            "{}: was migrated by a newer rdv (migration {v}); upgrade rdv to use this home",
            path.display()
        )),
        e => Error::Store(format!("{}: migration failed: {e}", path.display())),
    }
}
