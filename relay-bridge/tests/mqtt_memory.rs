//! What the embedded broker keeps in memory, and that it gives it back
//! (vendor/rumqttd PATCHES.md, "Memory the router gives back"): a filter's
//! log goes with its last subscriber, the topic-match cache and retained
//! messages are bounded, and clean sessions leave nothing behind. Real
//! rumqttc clients against a real bridge; the figures are the router's own
//! gauges, the ones `/metrics` exports.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::time::Duration;

use common::v4::{V4, WAIT};
use common::{Backend, Bridge, curl};
use rdv_relay_bridge::config::{Config, MqttMode};
use rumqttc::QoS;
use rumqttd::GaugeReading;

async fn bridge(tweak: impl FnOnce(&mut Config)) -> Bridge {
    Bridge::start(Backend::Sqlite, |c| {
        c.mqtt.mode = MqttMode::Embedded;
        c.mqtt.listen = Some("127.0.0.1:0".parse().unwrap());
        tweak(c);
    })
    .await
}

fn gauges(b: &Bridge) -> GaugeReading {
    b.running.as_ref().unwrap().broker.as_ref().unwrap().read()
}

/// Waits until the router's gauges satisfy `ok` (they are stored after each
/// router loop, so they may trail a client's acknowledgement by one loop);
/// panics with the last reading if they never do.
async fn settle(b: &Bridge, what: &str, ok: impl Fn(&GaugeReading) -> bool) -> GaugeReading {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let g = gauges(b);
        if ok(&g) {
            return g;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: gauges stayed at {g:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What one retained publication counts for (rumqttd's
/// `PublishData::size`).
fn entry(topic: &str, payload: usize) -> u64 {
    (4 + topic.len() + payload) as u64
}

async fn client(b: &Bridge, id: &str) -> V4 {
    V4::connect(b.mqtt_port(), id, None).await.unwrap()
}

/// A QoS 1 publication with the retain flag, up to its PUBACK.
async fn retain(p: &mut V4, topic: &str, body: Vec<u8>) {
    p.client
        .publish(topic, QoS::AtLeastOnce, true, body)
        .await
        .unwrap();
    p.until(|ev| matches!(ev, rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))).then_some(()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_log_goes_with_its_last_subscriber() {
    let b = bridge(|_| {}).await;
    // The bridge's own `#` filter is there from the start.
    settle(&b, "start", |g| g.filters == 1).await;
    let mut c = client(&b, "mem-log").await;
    // Within the default 30 subscriptions per visitor.
    let topics: Vec<String> = (0..24).map(|i| format!("mem/t{i}")).collect();
    for t in &topics {
        c.subscribe(&[t.as_str()]).await;
    }
    settle(&b, "subscribed", |g| {
        g.filters == 25 && g.subscriptions == 25
    })
    .await;
    for t in &topics {
        c.publish(t, &[b'x'; 4000]).await.unwrap();
    }
    for _ in &topics {
        c.next().await;
    }
    // Read by everyone (the client and the bridge's `#` link): nothing kept.
    settle(&b, "all read", |g| g.log_bytes == 0).await;

    for t in &topics[..12] {
        c.unsubscribe(t).await;
    }
    settle(&b, "half unsubscribed", |g| {
        g.filters == 13 && g.subscriptions == 13
    })
    .await;

    // A clean session's end releases the rest.
    drop(c);
    let g = settle(&b, "disconnected", |g| g.filters == 1).await;
    assert_eq!(g.subscriptions, 1);
    assert_eq!(g.saved_sessions, 0);
}

/// Publications in the lagging-subscriber tests: more than loopback's
/// socket buffers hold, less than the 32 MiB log.
const LAGGED: usize = 600;

/// The `i`th of them: its number, padded to 32 KB.
fn lagged(i: usize) -> Vec<u8> {
    let mut p = format!("{i:06}").into_bytes();
    p.resize(32 * 1024, b'.');
    p
}

/// Two subscribers of `topic`; the first publishes `LAGGED` messages and
/// reads each back, the second reads none, so the log holds them for it.
/// Returns (fast, slow).
async fn lagging(b: &Bridge, topic: &str) -> (V4, V4) {
    // Client ids may not hold a `/`.
    let id = topic.replace('/', "-");
    let mut fast = client(b, &format!("{id}-fast")).await;
    let mut slow = client(b, &format!("{id}-slow")).await;
    fast.subscribe(&[topic]).await;
    slow.subscribe(&[topic]).await;
    for i in 0..LAGGED {
        fast.client
            .publish(topic, QoS::AtMostOnce, false, lagged(i))
            .await
            .unwrap();
        let (t, p) = fast.next().await;
        assert_eq!((t.as_str(), &p[..6]), (topic, format!("{i:06}").as_bytes()));
    }
    let held = settle(b, "slow has not read", |g| g.log_bytes > 0).await;
    assert!(held.log_bytes > 0);
    (fast, slow)
}

/// A log is emptied only once every subscription reading it has read all
/// of it: a subscriber that lags behind another loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_subscriber_keeps_what_it_has_not_read() {
    let b = bridge(|_| {}).await;
    let (_fast, mut slow) = lagging(&b, "lag/t").await;
    for i in 0..LAGGED {
        let (t, p) = slow.next().await;
        assert_eq!(
            (t.as_str(), &p[..6]),
            ("lag/t", format!("{i:06}").as_bytes())
        );
    }
    settle(&b, "all read", |g| g.log_bytes == 0).await;
}

/// When the one subscriber behind leaves, what only it still had to read
/// is freed at once, not at the next publication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_subscriber_leaving_frees_what_it_held() {
    let b = bridge(|_| {}).await;
    let (_fast, slow) = lagging(&b, "leave/t").await;
    drop(slow);
    settle(&b, "slow gone", |g| g.log_bytes == 0 && g.filters == 2).await;
}

/// The slab reuses a dropped filter's index: nothing published to the old
/// filter may reach the new one's subscribers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_filter_index_never_leaks_into_the_next_filter() {
    let b = bridge(|_| {}).await;
    let mut a = client(&b, "leak-a").await;
    a.subscribe(&["leak/a"]).await;
    a.publish("leak/a", b"warm").await.unwrap();
    assert_eq!(a.next().await, ("leak/a".to_owned(), b"warm".to_vec()));
    a.unsubscribe("leak/a").await;
    settle(&b, "leak/a dropped", |g| g.filters == 1).await;

    let mut z = client(&b, "leak-z").await;
    z.subscribe(&["leak/z"]).await;
    a.publish("leak/a", b"secret").await.unwrap();
    a.publish("leak/z", b"marker").await.unwrap();
    // Everything z receives, whatever its topic, up to the marker.
    let mut got = vec![z.next().await];
    while got.last().unwrap().1 != b"marker" {
        got.push(z.next().await);
    }
    assert_eq!(got, [("leak/z".to_owned(), b"marker".to_vec())]);
}

/// A log stays while anyone reads it, shared subscribers included, and
/// comes back empty (delivering again) after it was dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_stays_while_any_subscriber_reads_it() {
    let b = bridge(|_| {}).await;
    let mut a = client(&b, "keep-a").await;
    let mut s = client(&b, "keep-s").await;
    a.subscribe(&["keep/t"]).await;
    s.subscribe(&["$share/g/keep/t"]).await;
    s.subscribe(&["keep/u"]).await;
    settle(&b, "subscribed", |g| g.filters == 3).await;

    a.unsubscribe("keep/t").await;
    a.publish("keep/t", b"one").await.unwrap();
    assert_eq!(s.next().await, ("keep/t".to_owned(), b"one".to_vec()));
    assert_eq!(
        gauges(&b).filters,
        3,
        "the shared subscriber still reads keep/t"
    );

    s.unsubscribe("$share/g/keep/t").await;
    settle(&b, "keep/t dropped", |g| g.filters == 2).await;
    a.publish("keep/t", b"nobody").await.unwrap();
    a.publish("keep/u", b"two").await.unwrap();
    assert_eq!(s.next().await, ("keep/u".to_owned(), b"two".to_vec()));

    // Subscribing again makes a fresh log that delivers.
    a.subscribe(&["keep/t"]).await;
    s.publish("keep/t", b"three").await.unwrap();
    assert_eq!(a.up_to("keep/t", b"three").await, [b"three".to_vec()]);
}

/// Clean sessions leave no saved state behind, whatever their client ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_sessions_leave_nothing_behind() {
    let b = bridge(|_| {}).await;
    for i in 0..30 {
        let mut c = client(&b, &format!("gone-{i}")).await;
        c.subscribe(&[&format!("gone/{i}")]).await;
        c.client.disconnect().await.unwrap();
        let _ = c.until(|_| None::<()>).await;
    }
    let g = settle(&b, "all gone", |g| g.filters == 1 && g.subscriptions == 1).await;
    assert_eq!(g.saved_sessions, 0);
}

/// The topic → filters cache starts over past its bound instead of growing
/// with every distinct topic ever published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topic_cache_is_bounded() {
    let b = bridge(|c| c.cache.duration = "0s".into()).await;
    let mut c = client(&b, "many-topics").await;
    let n = rumqttd::PUBLISH_FILTERS_CAP + 1000;
    // In batches the client's request channel (100) holds, each sent out
    // before the next.
    for batch in (0..n).collect::<Vec<_>>().chunks(50) {
        for i in batch {
            c.client
                .publish(format!("many/{i}"), QoS::AtMostOnce, false, &b"x"[..])
                .await
                .unwrap();
        }
        let mut sent = 0;
        c.until(|ev| {
            if matches!(ev, rumqttc::Event::Outgoing(rumqttc::Outgoing::Publish(_))) {
                sent += 1;
            }
            (sent == batch.len()).then_some(())
        })
        .await
        .unwrap();
    }
    // Its PUBACK comes after the router has taken all the others.
    c.publish("many/last", b"x").await.unwrap();
    let g = settle(&b, "published", |g| g.topic_cache > 0).await;
    assert!(
        g.topic_cache <= rumqttd::PUBLISH_FILTERS_CAP as u64,
        "{n} topics cached as {}",
        g.topic_cache
    );
}

/// Retained messages are bounded by `mqtt.retained_bytes`; past it a
/// retained publication is delivered but not kept, and `/metrics` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_messages_are_bounded() {
    let payload = vec![b'r'; 4000];
    let one = entry("ret/1", payload.len());
    let b = bridge(|c| c.mqtt.retained_bytes = 2 * one + 10).await;
    let mut p = client(&b, "ret-pub").await;
    for t in ["ret/1", "ret/2", "ret/3"] {
        retain(&mut p, t, payload.clone()).await;
    }
    let g = settle(&b, "retained", |g| g.retained_refused == 1).await;
    assert_eq!((g.retained, g.retained_bytes), (2, 2 * one));

    let mut s = client(&b, "ret-sub").await;
    s.client.subscribe("ret/#", QoS::AtLeastOnce).await.unwrap();
    let mut got = vec![s.next().await.0, s.next().await.0];
    got.sort();
    assert_eq!(got, ["ret/1", "ret/2"]);

    // Clearing one (an empty retained payload) makes room again.
    retain(&mut p, "ret/1", Vec::new()).await;
    retain(&mut p, "ret/3", payload.clone()).await;
    let g = settle(&b, "room again", |g| g.retained_bytes == 2 * one).await;
    assert_eq!((g.retained, g.retained_refused), (2, 1));

    let (code, body) = curl(&[&format!("{}/metrics", b.http())]);
    assert_eq!(code, 200);
    let text = String::from_utf8(body).unwrap();
    for line in [
        "rdv_bridge_mqtt_retained 2",
        "rdv_bridge_mqtt_retained_refused_total 1",
        "rdv_bridge_mqtt_filters 2",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
    }
}

/// MQTT 3.1.1 topic matching, for the model below (`+` one level, `#` the
/// rest).
fn matches(filter: &str, topic: &str) -> bool {
    let (mut f, mut t) = (filter.split('/'), topic.split('/'));
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Random subscribe, unsubscribe, publish and reconnect steps from four
/// clients, against a model of who must receive what: every publication
/// reaches each client once per subscribed filter that matches it, and no
/// one else, while filters come and go (their logs dropped, emptied and
/// their indexes reused underneath).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_steps_deliver_exactly_what_the_model_says() {
    const FILTERS: [&str; 5] = ["rnd/a", "rnd/b", "rnd/c", "rnd/+", "rnd/#"];
    const TOPICS: [&str; 4] = ["rnd/a", "rnd/b", "rnd/c", "rnd/d"];
    let b = bridge(|_| {}).await;
    for seed in [1u64, 7, 1234] {
        // xorshift64: the same steps on every run.
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut rnd = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let mut clients = Vec::new();
        for i in 0..4 {
            clients.push(client(&b, &format!("rnd-{seed}-{i}")).await);
        }
        let mut subs: Vec<Vec<&str>> = vec![Vec::new(); 4];
        let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 4];
        let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 4];
        for step in 0..300 {
            let c = rnd(4);
            match rnd(10) {
                0..=2 => {
                    let f = FILTERS[rnd(FILTERS.len())];
                    clients[c].subscribe(&[f]).await;
                    if !subs[c].contains(&f) {
                        subs[c].push(f);
                    }
                }
                3..=4 => {
                    if let Some(i) = (!subs[c].is_empty()).then(|| rnd(subs[c].len())) {
                        let f = subs[c].remove(i);
                        clients[c].unsubscribe(f).await;
                    }
                }
                5 => {
                    // A clean session ends: all its subscriptions go.
                    let id = format!("rnd-{seed}-{c}");
                    got[c].extend(clients[c].inbox.drain(..).map(|m| m.1));
                    clients[c] = client(&b, &id).await;
                    subs[c].clear();
                }
                _ => {
                    let t = TOPICS[rnd(TOPICS.len())];
                    let body = format!("{seed}/{step}").into_bytes();
                    clients[c].publish(t, &body).await.unwrap();
                    for r in 0..4 {
                        let k = subs[r].iter().filter(|f| matches(f, t)).count();
                        want[r].extend(std::iter::repeat_n(body.clone(), k));
                        // Wait for them now, so that later steps cannot
                        // change whether they were delivered.
                        while got[r].iter().filter(|p| **p == body).count() < k {
                            let m = match clients[r].inbox.pop_front() {
                                Some(m) => m,
                                None => clients[r].next().await,
                            };
                            got[r].push(m.1);
                        }
                    }
                }
            }
        }
        let deliveries: usize = want.iter().map(Vec::len).sum();
        assert!(deliveries > 50, "seed {seed}: only {deliveries} deliveries");
        // Anything more that arrives is a delivery the model did not make.
        for (r, c) in clients.iter_mut().enumerate() {
            got[r].extend(c.inbox.drain(..).map(|m| m.1));
            while let Ok(Ok(ev)) =
                tokio::time::timeout(Duration::from_millis(300), c.el.poll()).await
            {
                if let rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) = ev {
                    got[r].push(p.payload.to_vec());
                }
            }
            got[r].sort();
            want[r].sort();
            assert_eq!(got[r], want[r], "seed {seed}, client {r}");
        }
        drop(clients);
        settle(&b, "all gone", |g| g.filters == 1 && g.log_bytes == 0).await;
    }
}

/// A subscriber further behind than its filter's log holds loses the oldest
/// publications (the documented `mqtt.filter_log_bytes` bound), in order and
/// without duplicates, and the router counts each one it lost
/// (`rdv_bridge_mqtt_lagged_total`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_behind_the_log_loses_the_oldest_and_each_is_counted() {
    const N: usize = 6000;
    let b = bridge(|c| {
        c.limits.message_size_limit = 4096;
        c.mqtt.filter_log_bytes = 64 * 1024;
        // The bridge's own carrier reads only `ntfy/#`: the count is the
        // slow subscriber's alone.
        c.mqtt.prefix = "ntfy/".into();
    })
    .await;
    let mut fast = client(&b, "behind-fast").await;
    let mut slow = client(&b, "behind-slow").await;
    fast.subscribe(&["behind/t"]).await;
    slow.subscribe(&["behind/t"]).await;
    let body = |i: usize| {
        let mut p = format!("{i:06}").into_bytes();
        p.resize(2048, b'.');
        p
    };
    // 12 MB through a 64 KiB log, more than the slow client's socket
    // buffers take in.
    for i in 0..N {
        fast.client
            .publish("behind/t", QoS::AtMostOnce, false, body(i))
            .await
            .unwrap();
        let (_, p) = fast.next().await;
        assert_eq!(&p[..6], format!("{i:06}").as_bytes());
    }
    let mut got = Vec::new();
    loop {
        let (_, p) = slow.next().await;
        let i: usize = std::str::from_utf8(&p[..6]).unwrap().parse().unwrap();
        got.push(i);
        if i == N - 1 {
            break;
        }
    }
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order, once each");
    let lost = (N - got.len()) as u64;
    assert!(lost > 0, "the slow client lost nothing: publish more");
    settle(&b, "every lost publication counted", |g| g.lagged == lost).await;
    let (_, m) = curl(&[&format!("{}/metrics", b.http())]);
    let m = String::from_utf8(m).unwrap();
    assert!(
        m.contains(&format!("rdv_bridge_mqtt_lagged_total {lost}")),
        "{m}"
    );
}

/// Raw MQTT 3.1.1 frames, so that a PUBLISH and an UNSUBSCRIBE reach the
/// broker in one write (one batch for its router).
mod raw {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::WAIT;

    fn string(s: &str) -> Vec<u8> {
        let mut v = u16::try_from(s.len()).unwrap().to_be_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut f = vec![kind];
        let mut n = body.len();
        loop {
            let mut b = (n % 128) as u8;
            n /= 128;
            if n > 0 {
                b |= 0x80;
            }
            f.push(b);
            if n == 0 {
                break;
            }
        }
        f.extend_from_slice(body);
        f
    }

    pub fn connect(id: &str) -> Vec<u8> {
        let mut b = string("MQTT");
        b.extend_from_slice(&[4, 2, 0, 60]);
        b.extend(string(id));
        frame(0x10, &b)
    }

    pub fn subscribe(pkid: u16, topic: &str) -> Vec<u8> {
        let mut b = pkid.to_be_bytes().to_vec();
        b.extend(string(topic));
        b.push(0);
        frame(0x82, &b)
    }

    pub fn unsubscribe(pkid: u16, topic: &str) -> Vec<u8> {
        let mut b = pkid.to_be_bytes().to_vec();
        b.extend(string(topic));
        frame(0xa2, &b)
    }

    pub fn publish(topic: &str, payload: &[u8]) -> Vec<u8> {
        let mut b = string(topic);
        b.extend_from_slice(payload);
        frame(0x30, &b)
    }

    /// One packet: its type nibble and body.
    pub async fn read(s: &mut TcpStream) -> (u8, Vec<u8>) {
        tokio::time::timeout(WAIT, async {
            let kind = s.read_u8().await.unwrap();
            let (mut len, mut shift) = (0usize, 0);
            loop {
                let b = s.read_u8().await.unwrap();
                len |= usize::from(b & 0x7f) << shift;
                shift += 7;
                if b & 0x80 == 0 {
                    break;
                }
            }
            let mut body = vec![0; len];
            s.read_exact(&mut body).await.unwrap();
            (kind >> 4, body)
        })
        .await
        .expect("no packet from the broker")
    }

    /// The topic of a PUBLISH body.
    pub fn topic(body: &[u8]) -> String {
        let n = usize::from(u16::from_be_bytes([body[0], body[1]]));
        String::from_utf8(body[2..2 + n].to_vec()).unwrap()
    }

    pub async fn send(s: &mut TcpStream, bytes: &[u8]) {
        s.write_all(bytes).await.unwrap();
    }
}

/// A client that publishes on a topic and unsubscribes from it in one batch
/// gets nothing more from it: the request its own publication woke is
/// dropped with the subscription. Upstream re-tracked it: the client kept
/// receiving, and once the last other subscriber left (the log released),
/// the router panicked on the dropped log's index and the broker stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_and_unsubscribe_in_one_batch_leave_no_request_behind() {
    let b = bridge(|_| {}).await;
    let mut other = client(&b, "batch-other").await;
    other.subscribe(&["batch/x"]).await;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", b.mqtt_port()))
        .await
        .unwrap();
    s.set_nodelay(true).unwrap();
    raw::send(&mut s, &raw::connect("batch-raw")).await;
    assert_eq!(raw::read(&mut s).await.0, 2, "CONNACK");
    let mut subs = raw::subscribe(1, "batch/x");
    subs.extend(raw::subscribe(2, "batch/sync"));
    raw::send(&mut s, &subs).await;
    // Both SUBACKs (type 9).
    let mut acks = 0;
    while acks < 2 {
        if raw::read(&mut s).await.0 == 9 {
            acks += 1;
        }
    }
    // One write: the publication wakes this client's own request, then the
    // UNSUBSCRIBE ends it.
    let mut batch = raw::publish("batch/x", b"mine");
    batch.extend(raw::unsubscribe(3, "batch/x"));
    raw::send(&mut s, &batch).await;
    loop {
        let (kind, _) = raw::read(&mut s).await;
        if kind == 11 {
            break; // UNSUBACK
        }
    }
    // After the UNSUBACK, nothing on batch/x may arrive before the marker.
    other.publish("batch/x", b"after").await.unwrap();
    other.publish("batch/sync", b"marker").await.unwrap();
    loop {
        let (kind, body) = raw::read(&mut s).await;
        if kind == 3 {
            let t = raw::topic(&body);
            assert_ne!(t, "batch/x", "received after UNSUBACK");
            if t == "batch/sync" {
                break;
            }
        }
    }
    // The last other subscriber leaves: the log goes. The broker still
    // serves this client.
    other.unsubscribe("batch/x").await;
    other.publish("batch/sync", b"still").await.unwrap();
    loop {
        let (kind, body) = raw::read(&mut s).await;
        if kind == 3 && raw::topic(&body) == "batch/sync" && body.ends_with(b"still") {
            break;
        }
    }
}
