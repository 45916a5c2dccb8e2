//! Listings on SQLite (embedded default) or Postgres (operators), through
//! one code path (`sqlx::Any`) and one set of migrations. Several directory
//! processes may share one Postgres database (§4.5 scale-out).
//!
//! Nothing stored names an address, a dtopic, a blinded element or an OPRF
//! output: rows hold `lookup_id` (a hash of the output), the agent, the key
//! id, times and the signed listing with its sealed card.

use rdv_directory_client::listing::{Listing, Removal};
use rdv_proto::consts::{DIR_LISTING_MAX_LIFETIME_SECS, DIR_MAX_AHEAD_SECS};
use sqlx::{AnyPool, Row};

use crate::error::Result;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Bounds on claims, from the configuration (§4.5: claims are self-asserted,
/// so several agents may claim one lookup_id, within limits).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_claims_per_lookup_id: u32,
    pub max_listings_per_agent: u32,
}

/// What a publish did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    Stored {
        claims: u64,
    },
    Replaced {
        claims: u64,
    },
    /// A listing or removal with the same or a later `updated` is held.
    Stale,
    TooManyClaims,
    TooManyListings,
}

/// What a removal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoveOutcome {
    Removed {
        claims: u64,
    },
    /// Nothing to remove; the removal is remembered against replays.
    Absent {
        claims: u64,
    },
    Stale,
}

/// Counts for `rdv-directory stats` and the info endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub listings: u64,
    pub agents: u64,
    pub tombstones: u64,
    pub per_key: Vec<(String, u64)>,
}

#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    /// Postgres: publishes take advisory locks (see [`Store::put`]).
    postgres: bool,
}

/// Advisory-lock classes (the first of the two `int4` keys), so the claim
/// locks share no key with each other or, likely, with another application
/// on the same database. "rd" ‖ 1 and "rd" ‖ 2.
const LOCK_LOOKUP_ID: i32 = 0x7264_0001;
const LOCK_AGENT: i32 = 0x7264_0002;

/// The second advisory-lock key: 32 bits of SHA-256 of `value`. Distinct
/// values may share a key; that only serializes their publishes.
fn lock_key(value: &str) -> i32 {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(value.as_bytes());
    i32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// The first 32 bits of a hex `lookup_id`.
pub fn bucket_of(lookup_id: &str) -> i64 {
    i64::from(u32::from_str_radix(&lookup_id[..8.min(lookup_id.len())], 16).unwrap_or(0))
}

/// The `[lo, hi)` range of `bucket` values under a hex prefix of 1–8 digits.
pub fn bucket_range(prefix: &str) -> (i64, i64) {
    let len = prefix.len().clamp(1, 8) as u32;
    let p = i64::from(u32::from_str_radix(prefix, 16).unwrap_or(0));
    let shift = 4 * (8 - len);
    (p << shift, (p + 1) << shift)
}

impl Store {
    /// Connects (creating a SQLite file if needed) and runs the migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self> {
        let sqlite = rdv_service_kit::db::is_sqlite(url);
        let pool = rdv_service_kit::db::connect(url, max_connections, &MIGRATOR).await?;
        Ok(Self {
            pool,
            postgres: !sqlite,
        })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Stores or replaces `l` at `now` (unix seconds), atomically: only a
    /// later `updated` than the held listing and any removal wins.
    ///
    /// The claim bounds hold under concurrent publishes (§4.5): what is
    /// counted is locked first. On Postgres the transaction takes two
    /// advisory locks, on the lookup_id and then on the agent, always in
    /// that order (so two publishes never wait on each other in a cycle),
    /// and READ COMMITTED lets the counts after them see every publish
    /// that held them before. On SQLite the first statement is a write, so
    /// the transaction holds the database's one write lock from its start.
    pub async fn put(&self, l: &Listing, now: i64, bounds: Bounds) -> Result<PutOutcome> {
        let updated = l.updated.unix_timestamp();
        let expires = l.expires.unix_timestamp();
        let agent = l.agent.as_str();
        let doc = rdv_proto::canon::to_string(&l.doc).map_err(rdv_directory_client::Error::from)?;
        let mut tx = self.pool.begin().await?;
        if self.postgres {
            for (class, value) in [(LOCK_LOOKUP_ID, l.lookup_id.as_str()), (LOCK_AGENT, agent)] {
                sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
                    .bind(class)
                    .bind(lock_key(value))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        // A write first: SQLite takes its write lock here, not mid-transaction.
        sqlx::query("DELETE FROM listings WHERE lookup_id = $1 AND expires <= $2")
            .bind(&l.lookup_id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let tomb: Option<i64> =
            sqlx::query("SELECT updated FROM tombstones WHERE lookup_id = $1 AND agent = $2")
                .bind(&l.lookup_id)
                .bind(agent)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| r.get(0));
        if tomb.is_some_and(|t| t >= updated) {
            return Ok(PutOutcome::Stale);
        }
        let held: Option<i64> =
            sqlx::query("SELECT updated FROM listings WHERE lookup_id = $1 AND agent = $2")
                .bind(&l.lookup_id)
                .bind(agent)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| r.get(0));
        let replaced = match held {
            Some(h) if h >= updated => return Ok(PutOutcome::Stale),
            Some(_) => true,
            None => {
                let claims = count(&mut tx, "lookup_id", &l.lookup_id, now).await?;
                if claims >= u64::from(bounds.max_claims_per_lookup_id) {
                    return Ok(PutOutcome::TooManyClaims);
                }
                let mine = count(&mut tx, "agent", agent, now).await?;
                if mine >= u64::from(bounds.max_listings_per_agent) {
                    return Ok(PutOutcome::TooManyListings);
                }
                false
            }
        };
        let n = sqlx::query(
            "INSERT INTO listings (lookup_id, agent, key_id, bucket, updated, expires, doc) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (lookup_id, agent) DO UPDATE SET key_id = excluded.key_id, \
             bucket = excluded.bucket, updated = excluded.updated, expires = excluded.expires, \
             doc = excluded.doc WHERE listings.updated < excluded.updated",
        )
        .bind(&l.lookup_id)
        .bind(agent)
        .bind(&l.key_id)
        .bind(bucket_of(&l.lookup_id))
        .bind(updated)
        .bind(expires)
        .bind(doc)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            return Ok(PutOutcome::Stale);
        }
        sqlx::query("DELETE FROM tombstones WHERE lookup_id = $1 AND agent = $2")
            .bind(&l.lookup_id)
            .bind(agent)
            .execute(&mut *tx)
            .await?;
        let claims = count(&mut tx, "lookup_id", &l.lookup_id, now).await?;
        tx.commit().await?;
        Ok(if replaced {
            PutOutcome::Replaced { claims }
        } else {
            PutOutcome::Stored { claims }
        })
    }

    /// Removes the agent's listing if `r` is as late as it or later (its
    /// owner may remove a listing within the second it published it; a
    /// replayed older removal still loses), and remembers
    /// the removal until anything it could have removed has expired.
    pub async fn remove(&self, r: &Removal, now: i64) -> Result<RemoveOutcome> {
        let updated = r.updated.unix_timestamp();
        let agent = r.agent.as_str();
        let mut tx = self.pool.begin().await?;
        let removed = sqlx::query(
            "DELETE FROM listings WHERE lookup_id = $1 AND agent = $2 AND updated <= $3",
        )
        .bind(&r.lookup_id)
        .bind(agent)
        .bind(updated)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if removed == 0 {
            let held: Option<i64> =
                sqlx::query("SELECT updated FROM listings WHERE lookup_id = $1 AND agent = $2")
                    .bind(&r.lookup_id)
                    .bind(agent)
                    .fetch_optional(&mut *tx)
                    .await?
                    .map(|x| x.get(0));
            if held.is_some() {
                return Ok(RemoveOutcome::Stale);
            }
        }
        let purge_after = updated + DIR_LISTING_MAX_LIFETIME_SECS + DIR_MAX_AHEAD_SECS;
        sqlx::query(
            "INSERT INTO tombstones (lookup_id, agent, updated, purge_after) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (lookup_id, agent) DO UPDATE SET updated = excluded.updated, \
             purge_after = excluded.purge_after WHERE tombstones.updated < excluded.updated",
        )
        .bind(&r.lookup_id)
        .bind(agent)
        .bind(updated)
        .bind(purge_after)
        .execute(&mut *tx)
        .await?;
        let claims = count(&mut tx, "lookup_id", &r.lookup_id, now).await?;
        tx.commit().await?;
        Ok(if removed > 0 {
            RemoveOutcome::Removed { claims }
        } else {
            RemoveOutcome::Absent { claims }
        })
    }

    /// The signed listings under `key_id` whose lookup_id starts with
    /// `prefix`, unexpired at `now`, at most `limit`.
    pub async fn bucket(
        &self,
        key_id: &str,
        prefix: &str,
        now: i64,
        limit: u32,
    ) -> Result<Vec<String>> {
        let (lo, hi) = bucket_range(prefix);
        let rows = sqlx::query(
            "SELECT doc, lookup_id FROM listings WHERE key_id = $1 AND bucket >= $2 AND bucket < $3 \
             AND expires > $4 ORDER BY lookup_id, agent LIMIT $5",
        )
        .bind(key_id)
        .bind(lo)
        .bind(hi)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        // Prefixes longer than 8 digits are refused earlier, so the range is exact.
        Ok(rows
            .into_iter()
            .filter(|r| r.get::<String, _>(1).starts_with(prefix))
            .map(|r| r.get(0))
            .collect())
    }

    /// Drops expired listings, spent tombstones and listings under keys
    /// that are no longer usable. Returns rows deleted.
    pub async fn purge(&self, now: i64, usable_keys: &[String]) -> Result<u64> {
        let mut n = sqlx::query("DELETE FROM listings WHERE expires <= $1")
            .bind(now)
            .execute(&self.pool)
            .await?
            .rows_affected();
        n += sqlx::query("DELETE FROM tombstones WHERE purge_after <= $1")
            .bind(now)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if !usable_keys.is_empty() {
            let held: Vec<String> = sqlx::query("SELECT DISTINCT key_id FROM listings")
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .map(|r| r.get(0))
                .collect();
            for k in held.iter().filter(|k| !usable_keys.contains(k)) {
                n += sqlx::query("DELETE FROM listings WHERE key_id = $1")
                    .bind(k)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
            }
        }
        Ok(n)
    }

    pub async fn stats(&self) -> Result<Stats> {
        let one = |sql: &'static str| {
            let pool = self.pool.clone();
            async move {
                let r = sqlx::query(sql).fetch_one(&pool).await?;
                Ok::<u64, sqlx::Error>(r.get::<i64, _>(0).max(0) as u64)
            }
        };
        let listings = one("SELECT COUNT(*) FROM listings").await?;
        let agents = one("SELECT COUNT(DISTINCT agent) FROM listings").await?;
        let tombstones = one("SELECT COUNT(*) FROM tombstones").await?;
        let per_key =
            sqlx::query("SELECT key_id, COUNT(*) FROM listings GROUP BY key_id ORDER BY key_id")
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1).max(0) as u64))
                .collect();
        Ok(Stats {
            listings,
            agents,
            tombstones,
            per_key,
        })
    }

    /// Trusted bulk insert for seeding benchmarks (`examples/seed.rs`):
    /// rows go in unchecked, in one transaction, as multi-row `INSERT`s of
    /// up to 500 rows (3,500 bound parameters, within SQLite's and
    /// Postgres's limits). Rows are `(lookup_id, agent, key_id, updated,
    /// expires, doc)`. Never reachable from the API.
    pub async fn insert_raw(
        &self,
        rows: &[(String, String, String, i64, i64, String)],
    ) -> Result<()> {
        const PER_STATEMENT: usize = 500;
        let mut tx = self.pool.begin().await?;
        for chunk in rows.chunks(PER_STATEMENT) {
            let mut sql = String::from(
                "INSERT INTO listings (lookup_id, agent, key_id, bucket, updated, expires, doc) VALUES ",
            );
            for i in 0..chunk.len() {
                let b = i * 7;
                if i > 0 {
                    sql.push(',');
                }
                sql.push_str(&format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5,
                    b + 6,
                    b + 7
                ));
            }
            let mut q = sqlx::query(&sql);
            for (lookup_id, agent, key_id, updated, expires, doc) in chunk {
                q = q
                    .bind(lookup_id)
                    .bind(agent)
                    .bind(key_id)
                    .bind(bucket_of(lookup_id))
                    .bind(*updated)
                    .bind(*expires)
                    .bind(doc);
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

async fn count(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    column: &'static str,
    value: &str,
    now: i64,
) -> Result<u64> {
    let sql = if column == "agent" {
        "SELECT COUNT(*) FROM listings WHERE agent = $1 AND expires > $2"
    } else {
        "SELECT COUNT(*) FROM listings WHERE lookup_id = $1 AND expires > $2"
    };
    let r = sqlx::query(sql)
        .bind(value)
        .bind(now)
        .fetch_one(&mut **tx)
        .await?;
    Ok(r.get::<i64, _>(0).max(0) as u64)
}
