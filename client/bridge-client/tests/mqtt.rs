//! The MQTT carrier client against the bridge's embedded broker and against
//! Debian's `mosquitto` (issue #5), and ntfy → MQTT through the bridge.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Bridge, Mosquitto, WAIT};
use rdv_bridge_client::mqtt::fresh_client_id;
use rdv_bridge_client::{MqttPublisher, MqttSubscription, NtfyClient, QoS};

/// Publish at QoS 0 and 1 (a 256 B and a 45 KB payload) and receive them
/// byte for byte, in order, on a subscription to two filters.
fn round_trip(url: &str) {
    let mut sub = MqttSubscription::connect(
        url,
        &fresh_client_id("t-sub"),
        &["rt/a", "rt/b/+"],
        QoS::AtLeastOnce,
    )
    .unwrap();
    let mut p = MqttPublisher::connect(url, &fresh_client_id("t-pub")).unwrap();
    let small = vec![b's'; 256];
    let big: Vec<u8> = (0..45_000u32).map(|i| (i % 256) as u8).collect();
    p.publish("rt/a", &small, QoS::AtMostOnce, false).unwrap();
    p.publish("rt/b/x", &big, QoS::AtLeastOnce, false).unwrap();
    p.publish("rt/elsewhere", b"no", QoS::AtLeastOnce, false)
        .unwrap();
    p.publish("rt/a", b"last", QoS::AtLeastOnce, false).unwrap();
    p.disconnect().unwrap();
    let got: Vec<_> = (0..3)
        .map(|_| sub.recv_timeout(WAIT).unwrap().expect("a publication"))
        .collect();
    assert_eq!((got[0].topic.as_str(), &got[0].payload), ("rt/a", &small));
    assert_eq!((got[1].topic.as_str(), &got[1].payload), ("rt/b/x", &big));
    assert_eq!(
        (got[2].topic.as_str(), &got[2].payload[..]),
        ("rt/a", &b"last"[..])
    );
}

#[test]
fn round_trip_on_the_bridge() {
    let b = Bridge::start();
    round_trip(&b.mqtt);
}

#[test]
fn round_trip_on_mosquitto() {
    let m = Mosquitto::start();
    round_trip(&m.url);
}

#[test]
fn retained_publication_reaches_a_later_subscriber_on_mosquitto() {
    let m = Mosquitto::start();
    let mut p = MqttPublisher::connect(&m.url, &fresh_client_id("t-pub")).unwrap();
    p.publish("kept", b"card", QoS::AtLeastOnce, true).unwrap();
    p.disconnect().unwrap();
    let mut sub = MqttSubscription::connect(
        &m.url,
        &fresh_client_id("t-sub"),
        &["kept"],
        QoS::AtLeastOnce,
    )
    .unwrap();
    let got = sub
        .recv_timeout(WAIT)
        .unwrap()
        .expect("the retained message");
    assert!(got.retain);
    assert_eq!(got.payload, b"card");
}

#[test]
fn ntfy_publish_reaches_an_mqtt_subscriber_once() {
    let b = Bridge::start();
    let mut sub = MqttSubscription::connect(
        &b.mqtt,
        &fresh_client_id("t-sub"),
        &["to-mqtt"],
        QoS::AtLeastOnce,
    )
    .unwrap();
    let c = NtfyClient::new(&b.http).unwrap();
    c.publish("to-mqtt", b"first").unwrap();
    c.publish("to-mqtt", b"second").unwrap();
    let a = sub.recv_timeout(WAIT).unwrap().unwrap();
    let b2 = sub.recv_timeout(WAIT).unwrap().unwrap();
    assert_eq!(a.payload, b"first");
    assert_eq!(b2.payload, b"second");
}

#[test]
fn connecting_to_nothing_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The listener is dropped: nothing listens there.
    assert!(MqttPublisher::connect(&format!("mqtt://127.0.0.1:{port}"), "x").is_err());
    assert!(MqttPublisher::connect("mqtts://127.0.0.1:1", "x").is_err());
}
