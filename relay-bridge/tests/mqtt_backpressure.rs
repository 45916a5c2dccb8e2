//! MQTT limits that slow rather than cut off (issue #14), with Debian's
//! mosquitto clients against the real bridge: a flood is slowed (the broker
//! stops reading its socket), never cut off or thinned, while another
//! visitor is served; only a spent day closes the connection, MQTT 5 with
//! reason 0x97. (A queue of 1,000 under the shipped defaults:
//! `mqtt_defaults.rs`, a process of its own for its metrics.)
//! Visitors are loopback addresses (`mosquitto_pub -A 127.0.0.2`), which
//! the limits key apart. Speeds are printed as figures, never asserted; the
//! one bound asserted is the limit's own (a flood cannot go faster than it).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::time::{Duration, Instant};

use common::mosquitto::{metric, numbered, payloads, poll_until, publisher, subscriber};
use common::{Backend, Bridge, curl};
use rdv_relay_bridge::config::{Config, LimitsConfig, MqttMode};

const PREFIX: &str = "ntfy/";

/// A bridge with v4 and v5 listeners and the shipped limits (HTTP's and
/// MQTT's), then `tweak`.
async fn bridge(tweak: impl FnOnce(&mut LimitsConfig)) -> Bridge {
    Bridge::start(Backend::Sqlite, |c: &mut Config| {
        c.mqtt.mode = MqttMode::Embedded;
        c.mqtt.listen = Some("127.0.0.1:0".parse().unwrap());
        c.mqtt.listen_v5 = Some("127.0.0.1:0".parse().unwrap());
        c.mqtt.prefix = PREFIX.into();
        c.limits = LimitsConfig::default();
        tweak(&mut c.limits);
    })
    .await
}

fn v5_port(b: &Bridge) -> u16 {
    b.running.as_ref().unwrap().bound.mqtt.v5.unwrap().port()
}

/// A flood from one visitor (`mosquitto_pub -l`, MQTT 5) past its MQTT
/// bucket is slowed to the bucket's rate, not cut off and not thinned:
/// every line arrives, in order, in the cache too, with no DISCONNECT;
/// meanwhile another visitor publishes and is served, and the flooding
/// visitor's HTTP requests are not refused (MQTT's bucket is its own).
async fn flood_is_slowed(qos: u8) {
    const BURST: u32 = 50;
    const PER_SEC: u32 = 100;
    const N: usize = 400;
    let b = bridge(|l| {
        l.mqtt_publish_burst = BURST;
        l.mqtt_publish_per_sec = PER_SEC;
    })
    .await;
    let p5 = v5_port(&b);
    let flood_topic = format!("{PREFIX}flood{qos}");
    let other_topic = format!("{PREFIX}other{qos}");
    let flood_lines = numbered("flood", N);
    let other_lines = numbered("other", 40);
    let flood_sub = subscriber(p5, "127.0.0.3", &flood_topic, 1, N, true);
    let other_sub = subscriber(p5, "127.0.0.4", &other_topic, 1, other_lines.len(), true);

    let q = qos.to_string();
    let t0 = Instant::now();
    let flood = publisher(
        p5,
        "127.0.0.1",
        &["-V", "mqttv5", "-q", &q, "-t", &flood_topic],
        flood_lines.clone(),
    );
    // Past its burst the flood is held at the bucket's rate.
    let (mut got, _) = payloads(&flood_sub, BURST as usize + 10);
    let other_t0 = Instant::now();
    let (ok, out, other_end) = publisher(
        p5,
        "127.0.0.2",
        &["-V", "mqttv5", "-q", "1", "-t", &other_topic],
        other_lines.clone(),
    )
    .await
    .unwrap();
    assert!(ok, "the other visitor's mosquitto_pub failed: {out}");
    let (other_got, _) = payloads(&other_sub, other_lines.len());
    assert_eq!(other_got, other_lines);
    let (http, _) = curl(&[
        "--interface",
        "127.0.0.1",
        "-d",
        "over http",
        &format!("{}/http{qos}", b.http()),
    ]);
    assert_eq!(http, 200, "the flooding visitor's HTTP request was refused");

    let (rest, last) = payloads(&flood_sub, N - got.len());
    got.extend(rest);
    assert_eq!(got, flood_lines, "the flood's lines at the subscriber");
    let (ok, out, flood_end) = flood.await.unwrap();
    assert!(ok, "the flooding mosquitto_pub failed: {out}");
    assert!(
        !out.to_lowercase().contains("received disconnect"),
        "the flood was disconnected: {out}"
    );
    assert_eq!(
        poll_until(&b, "127.0.0.5", &format!("flood{qos}"), N),
        flood_lines
    );
    assert_eq!(
        poll_until(&b, "127.0.0.5", &format!("other{qos}"), other_lines.len()),
        other_lines
    );
    assert!(metric(&b, "rdv_bridge_mqtt_slowed_total{limit=\"visitor\"}") > 0);

    // The limit held: past the burst, at most PER_SEC a second.
    let span = last - t0;
    let least = Duration::from_secs_f64((N - BURST as usize - 1) as f64 / f64::from(PER_SEC));
    assert!(
        span >= least,
        "{N} lines in {span:?}: faster than the limit"
    );
    let rate = (N - BURST as usize) as f64 / span.as_secs_f64();
    eprintln!(
        "figure: QoS {qos} flood: {N} lines in {:.2} s, {rate:.0}/s past the burst (limit {PER_SEC}/s); \
         publisher ended after {:.2} s; the other visitor's 40 lines took {:.3} s, \
         ended {:.2} s before the flood's last arrival",
        span.as_secs_f64(),
        (flood_end - t0).as_secs_f64(),
        (other_end - other_t0).as_secs_f64(),
        last.saturating_duration_since(other_end).as_secs_f64(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qos0_flood_is_slowed_not_cut_off_and_others_are_served() {
    flood_is_slowed(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qos1_flood_is_slowed_not_cut_off_and_others_are_served() {
    flood_is_slowed(1).await;
}

/// A day's bytes that are spent are the one limit that closes an MQTT
/// connection: `mosquitto_pub -V mqttv5 -l` of 100-byte lines gets
/// DISCONNECT 0x97 (quota exceeded) at the line that does not fit, and the
/// cache holds exactly the lines that did, in order; another visitor still
/// publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_day_closes_with_quota_exceeded() {
    let b = bridge(|l| l.bytes_per_day = 3_000).await;
    let p5 = v5_port(&b);
    let lines: Vec<String> = (0..100)
        .map(|i| format!("{i:03}{}", "d".repeat(97)))
        .collect();
    let (_, out, _) = publisher(
        p5,
        "127.0.0.1",
        &["-V", "mqttv5", "-q", "1", "-t", "ntfy/day"],
        lines.clone(),
    )
    .await
    .unwrap();
    assert!(
        out.contains("Received DISCONNECT (151)"),
        "no DISCONNECT 0x97 (quota exceeded): {out}"
    );
    assert_eq!(poll_until(&b, "127.0.0.5", "day", 30), lines[..30]);
    assert!(metric(&b, "rdv_bridge_refusals_total{reason=\"bytes_per_day\"}") >= 1);
    let (ok, out, _) = publisher(
        p5,
        "127.0.0.2",
        &["-V", "mqttv5", "-q", "1", "-t", "ntfy/day"],
        vec!["other".into()],
    )
    .await
    .unwrap();
    assert!(ok, "{out}");
    let mut want = lines[..30].to_vec();
    want.push("other".into());
    assert_eq!(poll_until(&b, "127.0.0.5", "day", 31), want);
}
