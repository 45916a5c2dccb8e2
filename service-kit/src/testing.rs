//! For the services' tests: a throwaway Postgres database on the server
//! named by `RDV_TEST_POSTGRES_URL` (a superuser URL; `scripts/pg-test-server`
//! starts one and prints it). Postgres tests fail when it is unset, so a
//! CI run without a server cannot pass by skipping them.

use sqlx::Connection;
use sqlx::PgConnection;

/// `both_backends!(name, …)`: runs each `async fn name(Backend)` as two
/// tests, `name::sqlite` and `name::postgres` (each service keeps one test
/// suite for both stores). `Backend`, with `Sqlite` and `Postgres`, is the
/// calling test crate's own and must be in scope; so must `tokio`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                use super::*;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(Backend::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name(Backend::Postgres).await
                }
            }
        )+
    };
}

/// The variable naming the test server.
pub const PG_URL_VAR: &str = "RDV_TEST_POSTGRES_URL";

/// The admin URL; panics with the way to get one when unset.
pub fn pg_admin_url() -> String {
    std::env::var(PG_URL_VAR).unwrap_or_else(|_| {
        panic!("{PG_URL_VAR} is unset: Postgres tests need a server (scripts/pg-test-server prints a URL)")
    })
}

/// A database created for one test; drop it with [`PgTestDb::drop_db`].
#[derive(Debug, Clone)]
pub struct PgTestDb {
    /// The URL of the new database.
    pub url: String,
    admin: String,
    name: String,
}

impl PgTestDb {
    /// Creates `<prefix>_<16 hex digits>` on the test server.
    pub async fn create(prefix: &str) -> Result<Self, sqlx::Error> {
        let admin = pg_admin_url();
        let mut r = [0u8; 8];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut r);
        let name = format!(
            "{prefix}_{}",
            r.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        let mut c = PgConnection::connect(&admin).await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut c)
            .await?;
        c.close().await?;
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
        Ok(Self {
            url: format!("{base}/{name}"),
            admin,
            name,
        })
    }

    /// Drops the database, closing what is still connected to it.
    pub async fn drop_db(self) -> Result<(), sqlx::Error> {
        let mut c = PgConnection::connect(&self.admin).await?;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut c)
        .await?;
        c.close().await
    }
}

/// For each service binary's `man` and `completions` test (issue #17): runs
/// `BIN man --out DIR` and `BIN completions bash` and asserts that the top
/// page names every subcommand in `subcommands`, that each has its own
/// page (`NAME-SUB.1`), and that the bash script completes them. Panics
/// with the reason otherwise.
pub fn assert_cli_docs(bin: &std::path::Path, name: &str, subcommands: &[&str]) {
    use std::process::Command;
    let dir = std::env::temp_dir().join(format!("rdv-man-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new(bin)
        .arg("man")
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("run the binary");
    assert!(
        o.status.success(),
        "{name} man: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("man pages"), "{name} man printed {said:?}");
    let top = std::fs::read_to_string(dir.join(format!("{name}.1")))
        .unwrap_or_else(|e| panic!("{name}.1 not written: {e}"));
    assert!(top.contains(".TH"), "{name}.1 is not a man page: {top}");
    for sub in subcommands {
        // roff writes each hyphen as `\-`.
        let entry = format!("{name}-{sub}(1)");
        assert!(
            top.contains(&entry) || top.contains(&entry.replace('-', "\\-")),
            "{name}.1 does not name {sub}: {top}"
        );
        let page = dir.join(format!("{name}-{sub}.1"));
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("{} not written: {e}", page.display()));
        assert!(text.contains(".TH"), "{}: {text}", page.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new(bin)
        .args(["completions", "bash"])
        .output()
        .expect("run the binary");
    let script = String::from_utf8_lossy(&o.stdout);
    let completes =
        |l: &str| l.trim_start().starts_with("complete ") && l.ends_with(&format!(" {name}"));
    assert!(
        o.status.success() && script.lines().any(completes),
        "{name} completions bash: {script} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for sub in subcommands {
        assert!(script.contains(sub), "completions lack {sub}: {script}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn creates_a_usable_database_and_drops_it() {
        let db = PgTestDb::create("rdv_kit_test").await.unwrap();
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("CREATE TABLE t (x int)")
            .execute(&mut c)
            .await
            .unwrap();
        let name = db.name.clone();
        // Dropped even with a connection still open.
        db.drop_db().await.unwrap();
        let mut a = PgConnection::connect(&pg_admin_url()).await.unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
            .bind(&name)
            .fetch_one(&mut a)
            .await
            .unwrap();
        assert_eq!(n, 0);
    }
}
