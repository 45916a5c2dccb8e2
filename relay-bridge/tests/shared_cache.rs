//! Shared-cache mode (`cache.shared`, issue #5): two bridges on one external
//! mosquitto and one Postgres database cache each message once, and both
//! answer `since=all` with the same single row. With the mode off, the same
//! setup caches a message once per bridge (the control that shows the test
//! would catch the duplicates).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Backend, Db, Proc, curl, lines, test_config, tool};
use rdv_relay_bridge::config::MqttMode;
use rdv_relay_bridge::message::SystemClock;
use rdv_relay_bridge::serve::{Running, start};
use rdv_relay_bridge::store::Store;

/// mosquitto on a free loopback port.
async fn mosquitto() -> (Proc, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let broker = Proc::spawn(tool("mosquitto"), &["-p", &port.to_string()]);
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return (broker, port);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("mosquitto did not start");
}

async fn bridge(db: &Db, port: u16, client_id: &str, shared: bool) -> Running {
    let mut c = test_config(db);
    c.mqtt.mode = MqttMode::External;
    c.mqtt.listen = None;
    c.mqtt.external_url = Some(format!("mqtt://127.0.0.1:{port}"));
    c.mqtt.client_id = client_id.into();
    c.cache.shared = shared;
    start(c, std::sync::Arc::new(SystemClock)).await.unwrap()
}

fn http(r: &Running) -> String {
    format!("http://{}", r.bound.http)
}

/// A live `/json` subscriber (curl); returns once `open` arrived.
fn subscribe(r: &Running, topic: &str) -> Proc {
    let p = Proc::spawn(tool("curl"), &["-sN", &format!("{}/{topic}/json", http(r))]);
    let open: serde_json::Value = serde_json::from_str(&p.line()).unwrap();
    assert_eq!(open["event"], "open");
    p
}

/// The next `n` message bodies a live subscriber receives, sorted.
fn live_bodies(p: &Proc, n: usize) -> Vec<String> {
    let mut v = Vec::new();
    while v.len() < n {
        let m: serde_json::Value = serde_json::from_str(&p.line()).unwrap();
        if m["event"] == "message" {
            v.push(m["message"].as_str().unwrap().to_owned());
        }
    }
    v.sort();
    v
}

/// `since=all` of `topic`: (body, id) pairs, sorted.
fn cached(r: &Running, topic: &str) -> Vec<(String, String)> {
    let (code, body) = curl(&[&format!("{}/{topic}/json?poll=1&since=all", http(r))]);
    assert_eq!(code, 200);
    let mut v: Vec<(String, String)> = lines(&body)
        .iter()
        .map(|m| {
            (
                m["message"].as_str().unwrap().to_owned(),
                m["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

fn mosquitto_pub(port: u16, topic: &str, msg: &str) {
    let st = std::process::Command::new(tool("mosquitto_pub"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-t", topic, "-m", msg, "-q", "1"])
        .status()
        .unwrap();
    assert!(st.success());
}

/// Publishes "from-http" to bridge A over HTTP and "from-mqtt" to the broker,
/// checks both bridges' live subscribers got both, commits both caches and
/// returns both bridges' `since=all`.
async fn two_bridges(shared: bool) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let (_broker, port) = mosquitto().await;
    let db = Db::new(Backend::Postgres).await;
    let a = bridge(&db, port, "bridge-a", shared).await;
    let b = bridge(&db, port, "bridge-b", shared).await;
    let sa = subscribe(&a, "multi");
    let sb = subscribe(&b, "multi");
    let (code, _) = curl(&["-d", "from-http", &format!("{}/multi", http(&a))]);
    assert_eq!(code, 200);
    mosquitto_pub(port, "multi", "from-mqtt");
    let want = vec!["from-http".to_owned(), "from-mqtt".to_owned()];
    assert_eq!(live_bodies(&sa, 2), want, "bridge A's live subscriber");
    assert_eq!(live_bodies(&sb, 2), want, "bridge B's live subscriber");
    // Both bridges have received both (their live subscribers saw them):
    // commit both write queues, then ask each bridge.
    a.hub.flush().await;
    b.hub.flush().await;
    let (ca, cb) = (cached(&a, "multi"), cached(&b, "multi"));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    (ca, cb)
}

fn bodies(v: &[(String, String)]) -> Vec<&str> {
    v.iter().map(|(m, _)| m.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shared_cache_stores_each_message_once_across_bridges() {
    let (ca, cb) = two_bridges(true).await;
    assert_eq!(bodies(&ca), ["from-http", "from-mqtt"], "exactly once on A");
    // The same single rows (same ids) on both bridges.
    assert_eq!(ca, cb, "B answers the same rows as A");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_shared_mode_each_bridge_caches_its_own_copy() {
    let (ca, cb) = two_bridges(false).await;
    let twice = ["from-http", "from-http", "from-mqtt", "from-mqtt"];
    assert_eq!(bodies(&ca), twice);
    assert_eq!(ca, cb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shared_cache_keeps_one_row_per_topic_and_payload() {
    let (_broker, port) = mosquitto().await;
    let db = Db::new(Backend::Postgres).await;
    let a = bridge(&db, port, "bridge-a", true).await;
    let s = subscribe(&a, "dup");
    for body in ["same", "same", "other"] {
        let (code, _) = curl(&["-d", body, &format!("{}/dup", http(&a))]);
        assert_eq!(code, 200);
    }
    // Another topic with the same payload is another message.
    assert_eq!(curl(&["-d", "same", &format!("{}/dup2", http(&a))]).0, 200);
    // Live subscribers get every publication.
    assert_eq!(live_bodies(&s, 3), ["other", "same", "same"]);
    // Before and after the cache write, `since=all` has one "same".
    assert_eq!(bodies(&cached(&a, "dup")), ["other", "same"]);
    a.hub.flush().await;
    assert_eq!(bodies(&cached(&a, "dup")), ["other", "same"]);
    assert_eq!(bodies(&cached(&a, "dup2")), ["same"]);
    a.shutdown().await.unwrap();
}

#[tokio::test]
async fn shared_cache_is_refused_with_sqlite() {
    let db = Db::new(Backend::Sqlite).await;
    assert!(Store::open_with(&db.url, true).await.is_err());
    assert!(Store::open_with(&db.url, false).await.is_ok());
    let mut c = test_config(&db);
    c.cache.shared = true;
    assert!(start(c, std::sync::Arc::new(SystemClock)).await.is_err());
}
