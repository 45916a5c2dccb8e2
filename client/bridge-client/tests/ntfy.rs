//! The ntfy carrier client against a real `rdv-relay-bridge` (issue #5):
//! publish, poll, subscribe with `since=`, several topics, binary bodies,
//! refusals, and MQTT → ntfy.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::mpsc;

use common::{Bridge, WAIT};
use rdv_bridge_client::{Error, MqttPublisher, NtfyClient, QoS, Since};

#[test]
fn publish_then_poll_and_catch_up_since_an_id() {
    let b = Bridge::start();
    let c = NtfyClient::new(&b.http).unwrap();
    let m1 = c.publish("cat-a", b"one").unwrap();
    let m2 = c.publish("cat-a", b"two").unwrap();
    c.publish("cat-b", b"other topic").unwrap();
    assert_eq!(m1.topic, "cat-a");
    assert_eq!(m1.id.len(), 12);

    let all = c.poll(&["cat-a"], &Since::All).unwrap();
    let bodies: Vec<_> = all.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(bodies, vec![b"one".to_vec(), b"two".to_vec()]);

    // An agent that saw m1 resumes after it.
    let after = c.poll(&["cat-a"], &Since::Id(m1.id.clone())).unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, m2.id);

    let both = c.poll(&["cat-a", "cat-b"], &Since::All).unwrap();
    assert_eq!(both.len(), 3);
    assert!(c.poll(&["cat-a"], &Since::None).unwrap().is_empty());
    let latest = c.poll(&["cat-a"], &Since::Latest).unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].id, m2.id);
}

#[test]
fn subscribe_gets_cached_then_live_messages_on_several_topics_byte_for_byte() {
    let b = Bridge::start();
    let c = NtfyClient::new(&b.http).unwrap();
    let cached = c.publish("sub-a", b"before").unwrap();
    let mut sub = c.subscribe(&["sub-a", "sub-b"], &Since::All).unwrap();
    // A 45 KB binary envelope-sized body (not UTF-8) and a text one.
    let big: Vec<u8> = (0..45_000u32).map(|i| (i * 7 % 251) as u8).collect();
    c.publish("sub-b", &big).unwrap();
    c.publish("sub-a", b"after").unwrap();
    c.publish("sub-c", b"not subscribed").unwrap();
    let got: Vec<_> = (0..3).map(|_| sub.next().unwrap().unwrap()).collect();
    assert_eq!(got[0].id, cached.id);
    assert_eq!(got[1].topic, "sub-b");
    assert_eq!(got[1].encoding.as_deref(), Some("base64"));
    assert_eq!(got[1].body().unwrap(), big);
    assert_eq!(got[2].body().unwrap(), b"after");
}

#[test]
fn subscribe_since_none_sees_only_what_comes_after_it() {
    let b = Bridge::start();
    let c = NtfyClient::new(&b.http).unwrap();
    c.publish("live-only", b"old").unwrap();
    let mut sub = c.subscribe(&["live-only"], &Since::None).unwrap();
    c.publish("live-only", b"new").unwrap();
    assert_eq!(sub.next().unwrap().unwrap().body().unwrap(), b"new");
}

#[test]
fn refusals_come_back_as_errors() {
    let b = Bridge::start_with(|c| c.limits.message_size_limit = 1000);
    let c = NtfyClient::new(&b.http).unwrap();
    match c.publish("big", &[b'x'; 1001]) {
        Err(Error::Refused { status: 413, .. }) => {}
        other => panic!("want 413, got {other:?}"),
    }
    // Refused before any request: a topic that would escape the path.
    assert!(matches!(c.publish("../x", b"y"), Err(Error::Topic(_))));
    assert!(matches!(
        c.subscribe(&["a/b"], &Since::All),
        Err(Error::Topic(_))
    ));
    // Reserved by ntfy: the server refuses it.
    assert!(matches!(
        c.publish("docs", b"y"),
        Err(Error::Refused { status: 400, .. })
    ));
}

#[test]
fn mqtt_publish_reaches_an_ntfy_subscriber() {
    let b = Bridge::start();
    let c = NtfyClient::new(&b.http).unwrap();
    let mut sub = c.subscribe(&["from-mqtt"], &Since::None).unwrap();
    let mut p = MqttPublisher::connect(&b.mqtt, "t-pub").unwrap();
    p.publish("from-mqtt", b"\x00\x01 binary", QoS::AtLeastOnce, false)
        .unwrap();
    p.disconnect().unwrap();
    let m = sub.next().unwrap().unwrap();
    assert_eq!(m.topic, "from-mqtt");
    assert_eq!(m.body().unwrap(), b"\x00\x01 binary");
}

#[test]
fn async_stream_yields_messages() {
    let b = Bridge::start();
    let c = NtfyClient::new(&b.http).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (tx, rx) = mpsc::channel();
    rt.block_on(async {
        use futures_util::StreamExt as _;
        let mut s = c
            .subscribe_stream(&["stream-t"], &Since::None)
            .await
            .unwrap();
        let c2 = c.clone();
        tokio::task::spawn_blocking(move || c2.publish("stream-t", b"hello").unwrap());
        let m = tokio::time::timeout(WAIT, s.next()).await.unwrap();
        tx.send(m.unwrap().unwrap()).unwrap();
    });
    assert_eq!(rx.recv().unwrap().body().unwrap(), b"hello");
}

/// The bridge's message JSON and this client's type carry the same fields:
/// every field the bridge writes is read, and written back unchanged.
#[test]
fn wire_types_agree() {
    use rdv_relay_bridge::message::{Event, Message as Wire};
    let mut full = Wire::with_body(
        "AbCdEf012345".into(),
        1_700_000_000_123_456,
        "t-1".into(),
        bytes::Bytes::from_static(&[0, 0xff, 7]),
    );
    full.expires = Some(1_700_043_200);
    full.title = Some("T".into());
    full.tags = Some(vec!["a".into(), "b".into()]);
    full.priority = Some(4);
    full.click = Some("https://example.com/".into());
    let text = Wire::with_body(
        "x".into(),
        5_000_000,
        "t".into(),
        bytes::Bytes::from_static(b"plain"),
    );
    let open = Wire::control(Event::Open, "o1".into(), 9, &["a".into(), "b".into()]);
    for w in [full, text, open] {
        let json: serde_json::Value = serde_json::from_str(&w.to_json()).unwrap();
        let m: rdv_bridge_client::Message = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json,
            "a field is lost or renamed"
        );
        assert_eq!(m.event, w.event.as_str());
        if m.is_message() {
            assert_eq!(m.body().unwrap(), &w.payload()[..]);
        }
    }
}
