//! §4.5: after publishes and lookups, the database, the logs and the
//! metrics hold no address, no dtopic and no OPRF output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use common::*;
use rdv_proto::AgentKey;
use sqlx::{Connection, Row};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);
impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every log line of this test binary, at TRACE.
fn logs() -> &'static Buf {
    static B: OnceLock<Buf> = OnceLock::new();
    B.get_or_init(|| {
        let b = Buf::default();
        let w = b.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || w.clone())
            .with_ansi(false)
            .init();
        b
    })
}

const ADDRESSES: [&str; 3] = ["john@doe.com", "+972540000000", "jane@doe.com"];

async fn run(b: Backend) {
    let logs = logs();
    let env = Env::new(b, |_| {}).await;
    let john = AgentKey::from_seed([1; 32]);
    let c = card(&john, &ADDRESSES[..2], t0());
    let (cl, now) = (env.client(), env.now());
    let secrets = blocking(move || {
        for a in &ADDRESSES[..2] {
            cl.publish(
                &john,
                &c,
                &addr(a),
                now,
                time::Duration::days(7),
                &mut rand_core::OsRng,
            )
            .unwrap();
        }
        let all: Vec<_> = ADDRESSES.iter().map(|a| addr(a)).collect();
        let found = cl.lookup(&all, now, false, &mut rand_core::OsRng).unwrap();
        assert_eq!(found[0].cards.len(), 1);
        let key = cl.keys().unwrap().remove(0);
        let derived = cl.derive(&key, &all, 10, &mut rand_core::OsRng).unwrap();
        let mut s: Vec<(String, Vec<u8>)> = Vec::new();
        for d in &derived {
            let y = d.output();
            s.push(("address".into(), d.address.canon().as_bytes().to_vec()));
            s.push(("dtopic".into(), d.address.dtopic().into_bytes()));
            s.push(("y raw".into(), y.to_vec()));
            s.push(("y hex".into(), hex::encode(y).into_bytes()));
            s.push((
                "y base64".into(),
                rdv_proto::encoding::base64(y).into_bytes(),
            ));
        }
        s
    })
    .await;
    // The metrics endpoint.
    let murl = format!("{}/metrics", env.url);
    let metrics = blocking(move || ureq::get(&murl).call().unwrap().into_string().unwrap()).await;
    assert!(metrics.contains("rdv_directory_requests_total"));
    // The database, as bytes on disk (SQLite) or every row as text (Postgres).
    let store = env.running.as_ref().unwrap().state.store().clone();
    store.close().await;
    let mut db: Vec<u8> = Vec::new();
    match b {
        Backend::Sqlite => {
            for e in std::fs::read_dir(env.dir.path()).unwrap() {
                db.extend(std::fs::read(e.unwrap().path()).unwrap());
            }
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&env.db_url).await.unwrap();
            for t in ["listings", "tombstones", "_sqlx_migrations"] {
                let rows = sqlx::query(&format!("SELECT row_to_json(t)::text FROM {t} t"))
                    .fetch_all(&mut c)
                    .await
                    .unwrap();
                for r in rows {
                    db.extend(r.get::<String, _>(0).into_bytes());
                }
            }
            c.close().await.unwrap();
        }
    }
    assert!(db.len() > 1000, "the database holds the listings");
    let log = logs.0.lock().unwrap().clone();
    assert!(!log.is_empty(), "logs were captured");
    for (what, needle) in &secrets {
        for (place, hay) in [
            ("database", &db),
            ("logs", &log),
            ("metrics", &metrics.as_bytes().to_vec()),
        ] {
            assert!(
                !hay.windows(needle.len()).any(|w| w == needle.as_slice()),
                "{what} found in the {place}"
            );
        }
    }
    env.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privacy_sqlite() {
    run(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privacy_postgres() {
    run(Backend::Postgres).await
}
