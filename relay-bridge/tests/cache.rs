//! The cache suite (issue #5): the same cases against SQLite and Postgres.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use common::{Backend, Bridge, Db, Proc, curl, curl_json, lines};
use rdv_relay_bridge::message::{Message, SystemClock, UnixTime as _};
use rdv_relay_bridge::since::Since;
use rdv_relay_bridge::store::Store;

fn msg(id: &str, topic: &str, key_secs: i64, expires: i64) -> Message {
    let mut m = Message::with_body(
        id.into(),
        key_secs * 1_000_000,
        topic.into(),
        bytes::Bytes::copy_from_slice(id.as_bytes()),
    );
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
    // A repeated id is written once (a retried write stores nothing twice).
    s.insert(&msg("k", "a", 101, 1000)).await.unwrap();
    assert_eq!(s.stats().await.unwrap().0, 1, "ids are unique");
    s.close().await;
    // Migrations run again at start, and are idempotent.
    let s = Store::open(&db.url).await.unwrap();
    assert_eq!(ids(&s, &["a"], Since::All, 200).await, ["k"]);
    s.close().await;
}

use rdv_service_kit::both_backends as both;

/// A batch spans several INSERT statements (64 rows each); a message id
/// already cached, or repeated within the batch, is written once, so a
/// retried batch writes nothing twice.
async fn batch_over_several_statements(b: Backend) {
    let db = Db::new(b).await;
    let s = Store::open(&db.url).await.unwrap();
    let batch: Vec<std::sync::Arc<Message>> = (0..150)
        .map(|i| std::sync::Arc::new(msg(&format!("m{i:03}"), "t", 100 + i, 1000)))
        .collect();
    s.insert_batch(&batch[..70]).await.unwrap();
    // A retry of the first 70 with the rest, and one id twice in a batch.
    let mut again = batch.clone();
    again.push(batch[149].clone());
    s.insert_batch(&again).await.unwrap();
    let want: Vec<String> = (0..150).map(|i| format!("m{i:03}")).collect();
    assert_eq!(ids(&s, &["t"], Since::All, 200).await, want);
    assert_eq!(s.stats().await.unwrap().0, 150);
}

/// Large bodies (in segment files beside a SQLite database, in the rows on
/// Postgres) come back byte for byte, before and after a reopen, and a
/// prune deletes the files no row needs any more.
async fn large_bodies(b: Backend) {
    let db = Db::new(b).await;
    let s = Store::open(&db.url).await.unwrap();
    // Text that JSON escapes, a binary body (base64), and the other
    // fields, all come back as they went in.
    let big = |id: &str, key: i64, expires: i64, fill: u8| {
        let body = match fill {
            b'e' => "\"quoted\"\n\\ é ✓ \u{1}".repeat(1000).into_bytes(),
            _ => (0..20_000u32)
                .map(|i| (i * 7 + u32::from(fill)) as u8)
                .collect(),
        };
        let mut m = Message::with_body(id.into(), key * 1_000_000, "big".into(), body.into());
        m.expires = Some(expires);
        m.title = Some(format!("title {id}"));
        m.tags = Some(vec!["a".into(), "b\"c".into()]);
        m.priority = Some(4);
        std::sync::Arc::new(m)
    };
    // Two batches an hour of keys apart: two segment files on SQLite.
    let early: Vec<_> = (0..10)
        .map(|i| big(&format!("e{i}"), 100 + i, 500, b'e'))
        .collect();
    let late: Vec<_> = (0..10)
        .map(|i| big(&format!("l{i}"), 3800 + i, 9000, b'l'))
        .collect();
    s.insert_batch(&early).await.unwrap();
    s.insert_batch(&late).await.unwrap();
    s.insert(&msg("small", "big", 5000, 9000)).await.unwrap();
    let t = vec!["big".to_string()];
    let want: Vec<Message> = early
        .iter()
        .chain(&late)
        .map(|m| (**m).clone())
        .chain([msg("small", "big", 5000, 9000)])
        .collect();
    assert_eq!(s.query(&t, &Since::All, 400).await.unwrap(), want);
    let files = s.body_files().unwrap();
    assert_eq!(files, (b == Backend::Sqlite).then_some(2));
    s.close().await;

    let s = Store::open(&db.url).await.unwrap();
    assert_eq!(s.query(&t, &Since::All, 400).await.unwrap(), want);
    // The early batch expires: its file goes, the late one's stays.
    assert_eq!(s.prune(500).await.unwrap(), 10);
    assert_eq!(s.query(&t, &Since::All, 600).await.unwrap(), want[10..]);
    assert_eq!(s.body_files().unwrap(), (b == Backend::Sqlite).then_some(1));
    s.close().await;
}

/// A body file cut short (a crash before the page cache reached the disk)
/// loses the bodies it no longer holds, and nothing else: no error, no
/// garbage.
#[tokio::test]
async fn a_cut_body_file_loses_only_what_it_lost() {
    let db = Db::new(Backend::Sqlite).await;
    let s = Store::open(&db.url).await.unwrap();
    let ms: Vec<_> = (0..4)
        .map(|i| {
            let mut m = Message::with_body(
                format!("c{i}"),
                (100 + i) * 1_000_000,
                "cut".into(),
                bytes::Bytes::from(vec![b'c'; 10_000]),
            );
            m.expires = Some(1000);
            std::sync::Arc::new(m)
        })
        .collect();
    s.insert_batch(&ms).await.unwrap();
    s.close().await;
    let f = only_body_file(&db.url);
    let len = std::fs::metadata(&f).unwrap().len();
    // Half of the third body and all of the fourth are gone.
    let cut = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    cut.set_len(len / 2 + 2000).unwrap();
    let s = Store::open(&db.url).await.unwrap();
    assert_eq!(ids(&s, &["cut"], Since::All, 200).await, ["c0", "c1"]);
    s.close().await;
}

/// A text in a body file is stored as sent, not escaped into JSON (what
/// the split saves), and its row holds the rest of the message.
#[tokio::test]
async fn a_text_in_a_body_file_is_stored_as_sent() {
    let db = Db::new(Backend::Sqlite).await;
    let s = Store::open(&db.url).await.unwrap();
    let text = "line \"one\"\nline two\t✓\n".repeat(400);
    let mut m = Message::with_body(
        "t1".into(),
        100_000_000,
        "split".into(),
        text.clone().into(),
    );
    m.expires = Some(1000);
    m.title = Some("hello".into());
    s.insert_batch(&[std::sync::Arc::new(m.clone())])
        .await
        .unwrap();
    let file = only_body_file(&db.url);
    let stored = std::fs::read(&file).unwrap();
    assert!(
        stored.windows(text.len()).any(|w| w == text.as_bytes()),
        "the frame holds the text byte for byte"
    );
    use sqlx::Connection as _;
    let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    let (body, size): (String, i64) =
        sqlx::query_as("SELECT body, size FROM rdv_bridge_messages WHERE id = 't1'")
            .fetch_one(&mut c)
            .await
            .unwrap();
    let head: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(head["title"], "hello");
    assert!(head.get("message").is_none(), "{body}");
    assert_eq!(size, text.len() as i64);
    assert_eq!(
        s.query(&["split".into()], &Since::All, 200).await.unwrap(),
        [m]
    );
    s.close().await;
}

/// Rows written before texts were split off (an empty `body`, the whole
/// message JSON in the frame) still read back.
#[tokio::test]
async fn rows_with_the_whole_json_in_the_file_still_read() {
    let db = Db::new(Backend::Sqlite).await;
    let s = Store::open(&db.url).await.unwrap();
    let mut m = Message::with_body(
        "old".into(),
        100_000_000,
        "legacy".into(),
        "x\"y".repeat(3000).into(),
    );
    m.expires = Some(1000);
    let json = m.to_json();
    let files = rdv_relay_bridge::bodies::Bodies::open(
        &rdv_relay_bridge::bodies::Bodies::dir_for(&db.url).unwrap(),
    )
    .unwrap();
    let at = files.append(m.key, &[json.as_bytes()]).unwrap()[0];
    use sqlx::Connection as _;
    let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "INSERT INTO rdv_bridge_messages \
         (id, topic, msg_key, expires, size, body, content_key, body_file, body_offset) \
         VALUES ('old', 'legacy', 100000000, 1000, ?, '', NULL, ?, ?)",
    )
    .bind(json.len() as i64)
    .bind(at.0)
    .bind(at.1)
    .execute(&mut c)
    .await
    .unwrap();
    assert_eq!(
        s.query(&["legacy".into()], &Since::All, 200).await.unwrap(),
        [m]
    );
    s.close().await;
}

fn only_body_file(url: &str) -> std::path::PathBuf {
    let dir = rdv_relay_bridge::bodies::Bodies::dir_for(url).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.remove(0)
}

both!(
    since_forms,
    expiry_and_prune,
    reopen_keeps_messages,
    batch_over_several_statements,
    large_bodies
);

/// Holds the cache's write lock from another connection, so the bridge's
/// background writer cannot commit until `release`.
enum WriteLock {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl WriteLock {
    async fn take(b: Backend, url: &str) -> WriteLock {
        use sqlx::Connection as _;
        match b {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
                sqlx::query("BEGIN IMMEDIATE")
                    .execute(&mut c)
                    .await
                    .unwrap();
                WriteLock::Sqlite(c)
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::query("BEGIN").execute(&mut c).await.unwrap();
                // EXCLUSIVE blocks INSERT but not SELECT.
                sqlx::query("LOCK TABLE rdv_bridge_messages IN EXCLUSIVE MODE")
                    .execute(&mut c)
                    .await
                    .unwrap();
                WriteLock::Postgres(c)
            }
        }
    }

    async fn release(self) {
        match self {
            WriteLock::Sqlite(mut c) => {
                sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
            }
            WriteLock::Postgres(mut c) => {
                sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
            }
        }
    }
}

fn poll_ids(b: &Bridge, q: &str) -> Vec<String> {
    let (code, body) = curl(&[&format!("{}/{q}", b.http())]);
    assert_eq!(code, 200);
    lines(&body)
        .iter()
        .filter(|m| m["event"] == "message")
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Fan-out does not wait for the cache (§ issue #5 latency target), and a
/// message not yet committed is still found by `since=` (id, all, latest,
/// time) and by a stream, once each; after the commit nothing is doubled.
async fn since_finds_messages_not_yet_written(backend: Backend) {
    let b = Bridge::start(backend, |_| {}).await;
    let hub = b.running.as_ref().unwrap().hub.clone();
    let h = b.http();
    let lock = WriteLock::take(backend, &b.db.url).await;
    let mut ids = Vec::new();
    for body in ["one", "two", "three"] {
        let (c, m) = curl_json(&["-d", body, &format!("{h}/pend")]);
        assert_eq!(c, 200, "publish must not wait for the cache: {m}");
        ids.push(m["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(hub.pending_writes(), 3, "the cache writer is held");
    assert_eq!(poll_ids(&b, "pend/json?poll=1&since=all"), ids);
    assert_eq!(
        poll_ids(&b, &format!("pend/json?poll=1&since={}", ids[0])),
        ids[1..]
    );
    assert_eq!(poll_ids(&b, "pend/json?poll=1&since=latest"), ids[2..]);
    assert_eq!(poll_ids(&b, "pend/json?poll=1&since=1h"), ids);
    assert!(poll_ids(&b, "other/json?poll=1&since=all").is_empty());
    // A stream resuming after the first id gets the rest, then live ones.
    let mut sub = Proc::py(&[
        "sse",
        &format!("{h}/pend/sse?since={}", ids[0]),
        "--count",
        "3",
    ]);
    sub.until("OPEN");
    let (_, m) = curl_json(&["-d", "four", &format!("{h}/pend")]);
    let (got, _) = sub.finish();
    let got: Vec<String> = got
        .iter()
        .filter_map(|l| l.strip_prefix("MSG "))
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    ids.push(m["id"].as_str().unwrap().to_owned());
    assert_eq!(got, ids[1..]);
    lock.release().await;
    hub.flush().await;
    assert_eq!(hub.pending_writes(), 0);
    assert_eq!(poll_ids(&b, "pend/json?poll=1&since=all"), ids, "once each");
    let store = hub.store().unwrap();
    assert_eq!(store.stats().await.unwrap().0, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_finds_messages_not_yet_written_sqlite() {
    since_finds_messages_not_yet_written(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_finds_messages_not_yet_written_postgres() {
    since_finds_messages_not_yet_written(Backend::Postgres).await
}

/// Shutdown commits what was fanned out before it closes the cache: the
/// writer is held until shutdown has begun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flushes_the_write_queue() {
    let mut b = Bridge::start(Backend::Sqlite, |_| {}).await;
    let hub = b.running.as_ref().unwrap().hub.clone();
    let h = b.http();
    let lock = WriteLock::take(Backend::Sqlite, &b.db.url).await;
    for i in 0..50 {
        assert_eq!(
            curl(&["-d", &format!("m{i}"), &format!("{h}/flushq")]).0,
            200
        );
    }
    assert_eq!(hub.pending_writes(), 50);
    let release = tokio::spawn(async move {
        // Bounded: a hang guard, not a timing check.
        let began = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while !hub.is_shutting_down() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        lock.release().await;
        assert!(began.is_ok(), "shutdown never began");
    });
    b.stop().await;
    release.await.unwrap();
    let s = Store::open(&b.db.url).await.unwrap();
    assert_eq!(
        ids(&s, &["flushq"], Since::All, SystemClock.now_secs())
            .await
            .len(),
        50
    );
    s.close().await;
}

/// A cache that falls behind holds at most `cache.queue_bytes` of messages:
/// the publish over it waits (and nothing is lost) until the writer has
/// committed and given the room back.
async fn the_write_queue_is_bounded_in_bytes(backend: Backend) {
    use rdv_relay_bridge::hub::{Draft, Origin};
    let b = Bridge::start(backend, |c| {
        c.limits.message_size_limit = 4096;
        c.cache.queue_bytes = 10_000;
    })
    .await;
    let hub = b.running.as_ref().unwrap().hub.clone();
    let draft = |i: usize| Draft {
        topic: "qbytes".into(),
        body: bytes::Bytes::from(format!("{i}").repeat(3000)),
        cache: true,
        ..Default::default()
    };
    let lock = WriteLock::take(backend, &b.db.url).await;
    // Three of 3,000 bytes (and their overhead) fit in 10,000.
    for i in 0..3 {
        hub.publish(draft(i), Origin::Http).await.unwrap();
    }
    assert_eq!(hub.pending_writes(), 3);
    assert_eq!(hub.queued_bytes(), 3 * (3000 + 256));
    let fourth = hub.publish(draft(3), Origin::Http);
    let mut fourth = std::pin::pin!(fourth);
    assert!(
        futures_util::poll!(fourth.as_mut()).is_pending(),
        "the fourth publish must wait for room in the queue"
    );
    assert_eq!(hub.pending_writes(), 3);
    lock.release().await;
    // Bounded: a hang guard, not a timing check.
    tokio::time::timeout(std::time::Duration::from_secs(30), fourth)
        .await
        .expect("room comes back once the batch is committed")
        .unwrap();
    hub.flush().await;
    assert_eq!(
        poll_ids(&b, "qbytes/json?poll=1&since=all").len(),
        4,
        "nothing lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_queue_is_bounded_in_bytes_sqlite() {
    the_write_queue_is_bounded_in_bytes(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_queue_is_bounded_in_bytes_postgres() {
    the_write_queue_is_bounded_in_bytes(Backend::Postgres).await
}

/// When the cache stalls for longer than the broker's log holds, the MQTT →
/// ntfy carrier loses the oldest publications it had not read: MQTT
/// subscribers still get them, and every one lost to ntfy and the cache is
/// counted (`rdv_bridge_mqtt_to_ntfy_lost_total`), none silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cache_loses_counted_publications_to_ntfy() {
    use rdv_relay_bridge::config::MqttMode;
    const N: usize = 1000;
    let b = Bridge::start(Backend::Sqlite, |c| {
        c.mqtt.mode = MqttMode::Embedded;
        c.mqtt.listen = Some("127.0.0.1:0".parse().unwrap());
        c.limits.message_size_limit = 4096;
        c.mqtt.filter_log_bytes = 64 * 1024;
        c.cache.queue_bytes = 8 * 1024;
    })
    .await;
    let mut sub = common::v4::V4::connect(b.mqtt_port(), "stall-sub", None)
        .await
        .unwrap();
    sub.subscribe(&["stall"]).await;
    let lock = WriteLock::take(Backend::Sqlite, &b.db.url).await;
    for i in 0..N {
        let mut p = format!("{i:06}").into_bytes();
        p.resize(2048, b'.');
        sub.client
            .publish("stall", rumqttc::QoS::AtMostOnce, false, p)
            .await
            .unwrap();
        let (_, got) = sub.next().await;
        assert_eq!(&got[..6], format!("{i:06}").as_bytes(), "MQTT gets all");
    }
    lock.release().await;
    let hub = b.running.as_ref().unwrap().hub.clone();
    // Until the carrier has passed the last publication (a hang guard,
    // not a timing check).
    let last = format!("{:06}", N - 1);
    let cached = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            hub.flush().await;
            let (_, body) = curl(&[&format!("{}/stall/json?poll=1&since=all", b.http())]);
            let ms = lines(&body);
            if ms
                .last()
                .is_some_and(|m| m["message"].as_str().unwrap_or("").starts_with(&last))
            {
                return ms.len();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the carrier never reached the last publication");
    let lost = N - cached;
    assert!(lost > 0, "the carrier lost nothing: publish more");
    let (_, m) = curl(&[&format!("{}/metrics", b.http())]);
    let m = String::from_utf8(m).unwrap();
    assert!(
        m.contains(&format!("rdv_bridge_mqtt_to_ntfy_lost_total {lost}")),
        "{lost} lost; {m}"
    );
}

/// A publish dropped while it waits for the cache's queue (its client hung
/// up) leaves nothing behind: no message pending that was never delivered,
/// no room held. Everything published before it is committed once the
/// cache is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_given_up_while_the_queue_is_full_leaves_nothing() {
    use rdv_relay_bridge::hub::{Draft, Hub, HubOptions, Origin};
    let db = Db::new(Backend::Sqlite).await;
    let store = Store::open(&db.url).await.unwrap();
    let hub = Hub::new(
        Some(store.clone()),
        HubOptions {
            cache_secs: 3600,
            broadcast_capacity: 16,
            keepalive: std::time::Duration::from_secs(45),
            write_timeout: std::time::Duration::from_secs(10),
            queue_bytes: 1 << 20,
            queue_messages: 2,
        },
        std::sync::Arc::new(SystemClock),
    );
    let draft = |i: usize| Draft {
        topic: "giveup".into(),
        body: bytes::Bytes::from(format!("m{i}")),
        cache: true,
        ..Default::default()
    };
    let lock = WriteLock::take(Backend::Sqlite, &db.url).await;
    // The writer takes what is queued and stops at the held lock.
    let flush = tokio::spawn({
        let hub = hub.clone();
        async move { hub.flush().await }
    });
    // Publish until the queue is full and one has to wait.
    let mut sent = 0;
    let mut queued = 0;
    let waiting = loop {
        assert!(sent < 100, "the queue never filled");
        let mut p = Box::pin(hub.publish(draft(sent), Origin::Http));
        match futures_util::poll!(p.as_mut()) {
            std::task::Poll::Ready(r) => {
                r.unwrap();
                sent += 1;
                queued = hub.queued_bytes();
            }
            std::task::Poll::Pending => break p,
        }
    };
    let pending = hub.pending_writes();
    assert_eq!(pending, sent);
    drop(waiting);
    assert_eq!(
        hub.pending_writes(),
        pending,
        "the dropped publish is not pending"
    );
    assert_eq!(
        hub.queued_bytes(),
        queued,
        "the dropped publish holds no room"
    );
    lock.release().await;
    flush.await.unwrap();
    hub.flush().await;
    assert_eq!(hub.queued_bytes(), 0, "all room given back");
    let t = vec!["giveup".to_string()];
    let cached = store
        .query(&t, &Since::All, SystemClock.now_secs())
        .await
        .unwrap();
    assert_eq!(cached.len(), sent);
}
