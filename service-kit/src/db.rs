//! The database every service opens the same way: sqlx's Any driver over
//! SQLite (the embedded default) or Postgres (for operators who outgrow one
//! machine), with the service's migrations run at start.

use std::time::Duration;

use sqlx::AnyPool;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::Migrator;

/// How long a SQLite connection waits for another writer before failing.
pub const SQLITE_BUSY_TIMEOUT_MS: u32 = 5_000;

/// Most SQLite connections: it has one writer at a time, so more only add
/// lock waits.
pub const SQLITE_MAX_CONNECTIONS: u32 = 4;

pub fn is_sqlite(url: &str) -> bool {
    url.starts_with("sqlite:")
}

/// Opens the pool and runs `migrator`. SQLite gets WAL (readers do not
/// wait on the writer), `synchronous=NORMAL` (safe under WAL) and a busy
/// timeout on every connection: pragmas are per connection, so they are
/// set as each one opens, not once on whichever the pool hands out.
pub async fn connect(
    url: &str,
    max_connections: u32,
    migrator: &Migrator,
) -> Result<AnyPool, sqlx::Error> {
    install_default_drivers();
    let sqlite = is_sqlite(url);
    let mut opts = AnyPoolOptions::new()
        .max_connections(if sqlite {
            max_connections.clamp(1, SQLITE_MAX_CONNECTIONS)
        } else {
            max_connections.max(1)
        })
        .acquire_timeout(Duration::from_secs(30));
    if sqlite {
        opts = opts.after_connect(|conn, _| {
            Box::pin(async move {
                for pragma in [
                    "PRAGMA journal_mode=WAL".to_string(),
                    "PRAGMA synchronous=NORMAL".to_string(),
                    format!("PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}"),
                ] {
                    sqlx::query(&pragma).execute(&mut *conn).await?;
                }
                Ok(())
            })
        });
    }
    let pool = opts.connect(url).await?;
    migrator
        .run(&pool)
        .await
        .map_err(|e| sqlx::Error::Migrate(Box::new(e)))?;
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::*;

    #[tokio::test]
    async fn sqlite_pragmas_on_every_connection_and_migrations_run() {
        let dir = tempfile::tempdir().unwrap();
        let mig = dir.path().join("migrations");
        std::fs::create_dir(&mig).unwrap();
        std::fs::write(mig.join("0001_init.sql"), "CREATE TABLE t (x INTEGER);").unwrap();
        let migrator = Migrator::new(mig.as_path()).await.unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("k.db").display());
        let pool = connect(&url, 16, &migrator).await.unwrap();
        // Hold every connection at once, so each is a distinct one.
        let mut held = Vec::new();
        for _ in 0..SQLITE_MAX_CONNECTIONS {
            held.push(pool.acquire().await.unwrap());
        }
        for c in &mut held {
            let t: i64 = sqlx::query("PRAGMA busy_timeout")
                .fetch_one(&mut **c)
                .await
                .unwrap()
                .get(0);
            assert_eq!(t, i64::from(SQLITE_BUSY_TIMEOUT_MS));
            let mode: String = sqlx::query("PRAGMA journal_mode")
                .fetch_one(&mut **c)
                .await
                .unwrap()
                .get(0);
            assert_eq!(mode, "wal");
        }
        assert_eq!(pool.size(), SQLITE_MAX_CONNECTIONS, "capped for SQLite");
        drop(held);
        sqlx::query("INSERT INTO t (x) VALUES (1)")
            .execute(&pool)
            .await
            .unwrap();
        // Running the migrations again is a no-op, not an error.
        migrator.run(&pool).await.unwrap();
    }
}
