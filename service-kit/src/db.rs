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
    let pool = retry_connect(&ConnectRetry::AT_START, tokio::time::sleep, || {
        opts.clone().connect(url)
    })
    .await?;
    migrator
        .run(&pool)
        .await
        .map_err(|e| sqlx::Error::Migrate(Box::new(e)))?;
    Ok(pool)
}

/// How long a service keeps trying to reach its database at start: under
/// Compose the database may still be initializing when the service starts,
/// and nothing orders them (docs/self-hosting.md). This is on top of sqlx's
/// own wait (up to the 30 s acquire timeout, silent) on a refused
/// connection: it adds the errors sqlx gives up on at once (the host name
/// not resolving yet, a reset) and a log line per retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectRetry {
    /// Attempts in all, the first included.
    pub attempts: u32,
    pub first_delay: Duration,
    /// Each delay doubles up to this.
    pub max_delay: Duration,
}

impl ConnectRetry {
    /// 8 attempts, 0.5 s doubling to 8 s between them (about 40 s of
    /// sleeps when each attempt fails fast).
    pub const AT_START: Self = Self {
        attempts: 8,
        first_delay: Duration::from_millis(500),
        max_delay: Duration::from_secs(8),
    };
}

/// Errors worth another attempt: the server is not reachable or not ready
/// yet. Wrong passwords, missing databases and bad URLs fail at once.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => true,
        // 57P03 cannot_connect_now: "the database system is starting up".
        sqlx::Error::Database(d) => d.code().as_deref() == Some("57P03"),
        _ => false,
    }
}

/// Runs `attempt` until it succeeds, fails with a non-transient error, or
/// `policy.attempts` are spent; sleeps through `sleep` (injected, so tests
/// see the delays without waiting). Each retry is logged with the error,
/// which names no password (sqlx's errors carry no URL).
pub async fn retry_connect<T, F, Fut, S, SFut>(
    policy: &ConnectRetry,
    sleep: S,
    mut attempt: F,
) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    S: Fn(Duration) -> SFut,
    SFut: std::future::Future<Output = ()>,
{
    let mut delay = policy.first_delay;
    let mut n = 1;
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if n < policy.attempts && is_transient(&e) => {
                tracing::warn!(
                    attempt = n,
                    of = policy.attempts,
                    retry_in_ms = delay.as_millis() as u64,
                    error = %e,
                    "database not reachable yet; retrying"
                );
                sleep(delay).await;
                delay = (delay * 2).min(policy.max_delay);
                n += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::*;

    fn refused() -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }

    /// Runs `retry_connect` over scripted outcomes; returns the result, the
    /// attempts made and the delays slept.
    async fn scripted(
        policy: ConnectRetry,
        outcomes: Vec<Result<u8, sqlx::Error>>,
    ) -> (Result<u8, sqlx::Error>, usize, Vec<Duration>) {
        use std::sync::{Arc, Mutex};
        let outcomes = Arc::new(Mutex::new(outcomes.into_iter()));
        let calls = Arc::new(Mutex::new(0usize));
        let slept = Arc::new(Mutex::new(Vec::new()));
        let r = retry_connect(
            &policy,
            |d| {
                slept.lock().unwrap().push(d);
                async {}
            },
            || {
                *calls.lock().unwrap() += 1;
                let next = outcomes
                    .lock()
                    .unwrap()
                    .next()
                    .unwrap_or_else(|| Err(refused()));
                async move { next }
            },
        )
        .await;
        let n = *calls.lock().unwrap();
        let d = slept.lock().unwrap().clone();
        (r, n, d)
    }

    const POLICY: ConnectRetry = ConnectRetry {
        attempts: 5,
        first_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(300),
    };

    #[tokio::test]
    async fn connect_retries_transient_errors_with_capped_backoff() {
        let (r, n, d) = scripted(
            POLICY,
            vec![Err(refused()), Err(sqlx::Error::PoolTimedOut), Ok(7)],
        )
        .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(n, 3);
        assert_eq!(d, [Duration::from_millis(100), Duration::from_millis(200)]);
        // Bounded: gives up after `attempts` with the last error.
        let (r, n, d) = scripted(POLICY, vec![]).await;
        assert!(matches!(r, Err(sqlx::Error::Io(_))), "{r:?}");
        assert_eq!(n, 5);
        let ms: Vec<u128> = d.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, [100, 200, 300, 300], "doubling, capped at max_delay");
    }

    #[tokio::test]
    async fn connect_does_not_retry_permanent_errors() {
        let (r, n, d) = scripted(
            POLICY,
            vec![Err(sqlx::Error::Configuration("bad url".into())), Ok(1)],
        )
        .await;
        assert!(matches!(r, Err(sqlx::Error::Configuration(_))), "{r:?}");
        assert_eq!((n, d.len()), (1, 0));
    }

    #[tokio::test]
    async fn connect_retries_a_real_refused_port_then_gives_up() {
        // A port nothing listens on: sqlx waits out its acquire timeout on
        // the refusals and reports PoolTimedOut, which is retried, then
        // returned (sleeps skipped).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        install_default_drivers();
        let url = format!("postgres://rdv@127.0.0.1:{port}/x");
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let r = retry_connect(
            &POLICY,
            |_| async {},
            || {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                AnyPoolOptions::new()
                    .acquire_timeout(Duration::from_millis(200))
                    .connect(&url)
            },
        )
        .await;
        assert!(r.is_err());
        assert_eq!(
            calls.into_inner(),
            5,
            "every attempt made: the error was transient"
        );
    }

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
