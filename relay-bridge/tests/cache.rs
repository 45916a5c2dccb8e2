//! The cache suite (issue #5): the same cases against SQLite and Postgres.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use common::{Backend, Db};
use rdv_relay_bridge::message::Message;
use rdv_relay_bridge::since::Since;
use rdv_relay_bridge::store::Store;

fn msg(id: &str, topic: &str, key_secs: i64, expires: i64) -> Message {
    let mut m = Message::with_body(id.into(), key_secs * 1_000_000, topic.into(), id.as_bytes());
    m.expires = Some(expires);
    m
}

async fn ids(s: &Store, topics: &[&str], since: Since, now: i64) -> Vec<String> {
    let t: Vec<String> = topics.iter().map(|x| x.to_string()).collect();
    s.query(&t, &since, now)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect()
}

async fn since_forms(b: Backend) {
    let db = Db::new(b).await;
    let s = Store::open(&db.url).await.unwrap();
    s.insert(&msg("a1", "a", 100, 1000)).await.unwrap();
    s.insert(&msg("b1", "b", 101, 1000)).await.unwrap();
    s.insert(&msg("a2", "a", 102, 1000)).await.unwrap();
    s.insert(&msg("a3", "a", 103, 1000)).await.unwrap();
    assert_eq!(ids(&s, &["a"], Since::All, 200).await, ["a1", "a2", "a3"]);
    assert_eq!(
        ids(&s, &["a", "b"], Since::All, 200).await,
        ["a1", "b1", "a2", "a3"]
    );
    assert_eq!(
        ids(&s, &["a"], Since::None, 200).await,
        Vec::<String>::new()
    );
    assert_eq!(ids(&s, &["a"], Since::Latest, 200).await, ["a3"]);
    assert_eq!(
        ids(&s, &["a"], Since::Id("a1".into()), 200).await,
        ["a2", "a3"]
    );
    assert_eq!(
        ids(&s, &["a"], Since::Id("zz".into()), 200).await,
        ["a1", "a2", "a3"]
    );
    assert_eq!(ids(&s, &["a"], Since::Time(102), 200).await, ["a2", "a3"]);
    assert_eq!(ids(&s, &["a"], Since::Key(102_000_000), 200).await, ["a3"]);
    assert_eq!(ids(&s, &["c"], Since::All, 200).await, Vec::<String>::new());
    // The message JSON comes back as it went in.
    let t = vec!["b".to_string()];
    let got = s.query(&t, &Since::All, 200).await.unwrap();
    assert_eq!(got, vec![msg("b1", "b", 101, 1000)]);
    s.close().await;
}

async fn expiry_and_prune(b: Backend) {
    let db = Db::new(b).await;
    let s = Store::open(&db.url).await.unwrap();
    s.insert(&msg("old", "a", 100, 500)).await.unwrap();
    s.insert(&msg("new", "a", 101, 5000)).await.unwrap();
    assert_eq!(ids(&s, &["a"], Since::All, 499).await, ["old", "new"]);
    assert_eq!(ids(&s, &["a"], Since::All, 500).await, ["new"]);
    assert_eq!(s.stats().await.unwrap().0, 2);
    assert_eq!(s.prune(500).await.unwrap(), 1);
    let (n, bytes) = s.stats().await.unwrap();
    assert_eq!(n, 1);
    assert!(bytes > 0);
    s.close().await;
}

async fn reopen_keeps_messages(b: Backend) {
    let db = Db::new(b).await;
    let s = Store::open(&db.url).await.unwrap();
    s.insert(&msg("k", "a", 100, 1000)).await.unwrap();
    assert!(
        s.insert(&msg("k", "a", 101, 1000)).await.is_err(),
        "ids are unique"
    );
    s.close().await;
    // Migrations run again at start, and are idempotent.
    let s = Store::open(&db.url).await.unwrap();
    assert_eq!(ids(&s, &["a"], Since::All, 200).await, ["k"]);
    s.close().await;
}

macro_rules! both {
    ($($name:ident),*) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name(super::Backend::Sqlite).await })*
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name(super::Backend::Postgres).await })*
        }
    };
}

both!(since_forms, expiry_and_prune, reopen_keeps_messages);
