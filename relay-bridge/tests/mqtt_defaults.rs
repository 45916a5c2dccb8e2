//! MQTT under the shipped limits (issue #14), with Debian's mosquitto
//! clients against the real bridge: a client flushing a queue of 1,000
//! publications is served whole. A process of its own: it reads the
//! process-wide `/metrics` to see that nothing was held back.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::time::Instant;

use common::mosquitto::{metric, numbered, payloads, poll_until, publisher, subscriber};
use common::{Backend, Bridge};
use rdv_relay_bridge::config::{Config, LimitsConfig, MqttMode};

const PREFIX: &str = "ntfy/";

/// The shipped defaults serve one client flushing a queue of 1,000
/// publications (`mosquitto_pub -l`) whole: every line reaches an MQTT
/// subscriber and the cache, in order, at QoS 0 and QoS 1, v4 and v5;
/// none was held back (the burst covers the queue) and the connection was
/// never closed. Before issue #14, 941 of 1,000 QoS 0 lines were lost and
/// QoS 1 did not finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_1000_lines_arrives_whole_under_the_defaults() {
    let b = Bridge::start(Backend::Sqlite, |c: &mut Config| {
        c.mqtt.mode = MqttMode::Embedded;
        c.mqtt.listen = Some("127.0.0.1:0".parse().unwrap());
        c.mqtt.listen_v5 = Some("127.0.0.1:0".parse().unwrap());
        c.mqtt.prefix = PREFIX.into();
        c.limits = LimitsConfig::default();
    })
    .await;
    let v5_port = b.running.as_ref().unwrap().bound.mqtt.v5.unwrap().port();
    let cases = [
        ("q0", 0u8, false, "127.0.0.1"),
        ("q1", 1, false, "127.0.0.2"),
        ("q1v5", 1, true, "127.0.0.3"),
    ];
    for (name, qos, v5, bind) in cases {
        let topic = format!("{PREFIX}{name}");
        let port = if v5 { v5_port } else { b.mqtt_port() };
        let want = numbered(name, 1000);
        let sub = subscriber(port, "127.0.0.9", &topic, qos, want.len(), v5);
        let q = qos.to_string();
        let mut args = vec!["-t", topic.as_str(), "-q", q.as_str()];
        if v5 {
            args.extend(["-V", "mqttv5"]);
        }
        let t0 = Instant::now();
        let (ok, out, _) = publisher(port, bind, &args, want.clone()).await.unwrap();
        assert!(ok, "{name}: mosquitto_pub failed: {out}");
        assert!(
            !out.to_lowercase().contains("received disconnect"),
            "{name}: {out}"
        );
        let (got, last) = payloads(&sub, want.len());
        assert_eq!(got, want, "{name}: the subscriber's lines");
        assert_eq!(
            poll_until(&b, bind, name, want.len()),
            want,
            "{name}: the cache"
        );
        eprintln!(
            "figure: {name}: 1,000 lines in {:.3} s (publisher start to last arrival)",
            (last - t0).as_secs_f64()
        );
    }
    assert_eq!(
        metric(&b, "rdv_bridge_mqtt_slowed_total{limit=\"visitor\"}"),
        0,
        "a queue of 1,000 was held back under the defaults"
    );
    assert_eq!(
        metric(&b, "rdv_bridge_mqtt_slowed_total{limit=\"global\"}"),
        0
    );
}
