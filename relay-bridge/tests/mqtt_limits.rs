//! Token ACLs and visitor limits on the embedded broker's MQTT side (issues
//! #5 and #14; floods from mosquitto_pub: `mqtt_backpressure.rs`), against real clients (rumqttc v4/v5, Debian's mosquitto_pub and
//! mosquitto_sub) and the real HTTP API of the same bridge. Another visitor
//! is a second loopback address: the clients bind 127.0.0.2 (`mosquitto_pub
//! -A`, `curl --interface`), which the limits key apart from 127.0.0.1.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::time::Duration;

use common::v4::{V4, WAIT};
use common::{Backend, Bridge, Proc, curl, lines, tool};
use rdv_relay_bridge::config::{Config, DefaultAccess, MqttMode, TokenConfig};
use rumqttc::v5 as m5;
use rumqttc::{QoS, SubscribeReasonCode};

const PREFIX: &str = "ntfy/";

async fn bridge(tweak: impl FnOnce(&mut Config)) -> Bridge {
    Bridge::start(Backend::Sqlite, |c| {
        c.mqtt.mode = MqttMode::Embedded;
        c.mqtt.listen = Some("127.0.0.1:0".parse().unwrap());
        c.mqtt.listen_v5 = Some("127.0.0.1:0".parse().unwrap());
        c.mqtt.prefix = PREFIX.into();
        tweak(c);
    })
    .await
}

fn v5_port(b: &Bridge) -> u16 {
    b.running.as_ref().unwrap().bound.mqtt.v5.unwrap().port()
}

/// `tk_alice` may read and write `alice*`; `tk_ops` everything.
fn tokens() -> Vec<TokenConfig> {
    vec![
        TokenConfig {
            token: "tk_alice".into(),
            read: vec!["alice*".into()],
            write: vec!["alice*".into()],
        },
        TokenConfig {
            token: "tk_ops".into(),
            read: vec!["*".into()],
            write: vec!["*".into()],
        },
    ]
}

/// The messages cached for ntfy `topic` (read with `tk_ops` when tokens
/// are configured).
fn poll(b: &Bridge, topic: &str) -> Vec<String> {
    let (code, body) = curl(&[
        "-H",
        "Authorization: Bearer tk_ops",
        &format!("{}/{topic}/json?poll=1", b.http()),
    ]);
    assert_eq!(code, 200);
    lines(&body)
        .iter()
        .map(|m| m["message"].as_str().unwrap().to_owned())
        .collect()
}

/// A refusal counted under `rdv_bridge_refusals_total{reason}`, or 0.
fn refusals(b: &Bridge, reason: &str) -> u64 {
    let (code, body) = curl(&[&format!("{}/metrics", b.http())]);
    assert_eq!(code, 200);
    let want = format!("rdv_bridge_refusals_total{{reason=\"{reason}\"}} ");
    String::from_utf8(body)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&want).map(|n| n.trim().parse().unwrap()))
        .unwrap_or(0)
}

/// An MQTT 5 client (rumqttc v5).
struct V5 {
    client: m5::AsyncClient,
    el: m5::EventLoop,
}

type V5Error = m5::ConnectionError;

impl V5 {
    async fn connect(port: u16, id: &str, password: Option<&str>) -> Result<V5, String> {
        let mut o = m5::MqttOptions::new(id, "127.0.0.1", port);
        o.set_keep_alive(Duration::from_secs(30));
        o.set_clean_start(true);
        if let Some(p) = password {
            o.set_credentials("x", p);
        }
        let (client, mut el) = m5::AsyncClient::new(o, 100);
        let r = tokio::time::timeout(WAIT, async {
            loop {
                match el.poll().await {
                    Ok(m5::Event::Incoming(m5::Incoming::ConnAck(_))) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await
        .expect("no CONNACK and no error");
        r.map(|()| V5 { client, el })
    }

    async fn until<T>(
        &mut self,
        mut want: impl FnMut(&m5::Event) -> Option<T>,
    ) -> Result<T, V5Error> {
        tokio::time::timeout(WAIT, async {
            loop {
                let ev = self.el.poll().await?;
                if let Some(t) = want(&ev) {
                    return Ok(t);
                }
            }
        })
        .await
        .expect("client waited too long")
    }

    async fn subscribe(&mut self, filters: &[&str]) -> Vec<m5::mqttbytes::v5::SubscribeReasonCode> {
        let f = filters
            .iter()
            .map(|f| m5::mqttbytes::v5::Filter::new(*f, m5::mqttbytes::QoS::AtLeastOnce));
        self.client.subscribe_many(f).await.unwrap();
        self.until(|ev| match ev {
            m5::Event::Incoming(m5::Incoming::SubAck(a)) => Some(a.return_codes.clone()),
            _ => None,
        })
        .await
        .unwrap()
    }

    /// A QoS 1 publication: the PUBACK's reason, or the error that ended
    /// the connection.
    async fn publish(
        &mut self,
        topic: &str,
        payload: &[u8],
    ) -> Result<m5::mqttbytes::v5::PubAckReason, V5Error> {
        self.client
            .publish(
                topic,
                m5::mqttbytes::QoS::AtLeastOnce,
                false,
                payload.to_vec(),
            )
            .await
            .unwrap();
        self.until(|ev| match ev {
            m5::Event::Incoming(m5::Incoming::PubAck(a)) => Some(a.reason),
            _ => None,
        })
        .await
    }
}

/// The reason code of a v5 server DISCONNECT, if that ended the connection.
fn disconnect_reason(e: &V5Error) -> Option<m5::mqttbytes::v5::DisconnectReasonCode> {
    match e {
        m5::ConnectionError::MqttState(m5::StateError::ServerDisconnect {
            reason_code, ..
        }) => Some(*reason_code),
        _ => None,
    }
}

/// mosquitto_pub (QoS 1) from `bind` (a loopback address): (exit ok, stderr).
fn mosquitto_pub(port: u16, bind: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(tool("mosquitto_pub"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-A",
            bind,
            "-q",
            "1",
        ])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A restricted token publishes and subscribes its own topics over MQTT
/// (v4 and v5, rumqttc and mosquitto) and is refused every other: SUBACK
/// failure codes for other topics (for the whole packet when one filter is
/// refused), and a refused publication reaches neither ntfy nor an MQTT
/// subscriber of that topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_token_reads_and_writes_only_its_topics() {
    let b = bridge(|c| {
        c.auth.default_access = DefaultAccess::DenyAll;
        c.auth.tokens = tokens();
    })
    .await;
    let (p4, p5) = (b.mqtt_port(), v5_port(&b));
    // deny-all: anonymous and unknown tokens are refused at CONNECT.
    assert!(V4::connect(p4, "anon", None).await.is_err());
    assert!(V4::connect(p4, "bogus", Some("tk_alicex")).await.is_err());
    assert!(V5::connect(p5, "anon", None).await.is_err());

    // An all-topic observer of bob's topic.
    let mut ops = V4::connect(p4, "ops", Some("tk_ops")).await.unwrap();
    assert_eq!(
        ops.subscribe(&["ntfy/bob"]).await,
        [SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );

    let mut alice = V4::connect(p4, "alice", Some("tk_alice")).await.unwrap();
    assert_eq!(
        alice.subscribe(&["ntfy/alice1"]).await,
        [SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    for refused in [
        &["ntfy/bob"][..],
        &["alice1"],                  // outside the prefix
        &["ntfy/alice2", "ntfy/bob"], // one refused filter refuses the packet
    ] {
        assert_eq!(
            alice.subscribe(refused).await,
            vec![SubscribeReasonCode::Failure; refused.len()],
            "{refused:?}"
        );
    }
    // Her own topic works both ways, and ntfy has it.
    alice.publish("ntfy/alice1", b"mine").await.unwrap();
    assert_eq!(alice.next().await, ("ntfy/alice1".into(), b"mine".to_vec()));
    // alice2 was refused with bob in one packet: not subscribed.
    alice.publish("ntfy/alice2", b"two").await.unwrap();
    alice.publish("ntfy/alice1", b"after").await.unwrap();
    assert_eq!(
        alice.next().await,
        ("ntfy/alice1".into(), b"after".to_vec())
    );

    // A v4 publication on bob's topic closes her connection (MQTT 3.1.1
    // §3.3.5), and goes nowhere.
    alice
        .client
        .publish("ntfy/bob", QoS::AtLeastOnce, false, b"v4 secret".to_vec())
        .await
        .unwrap();
    alice.closed().await;
    // v5: PUBACK "not authorized", the connection stays.
    let mut a5 = V5::connect(p5, "alice5", Some("tk_alice")).await.unwrap();
    assert_eq!(
        a5.publish("ntfy/bob", b"v5 secret").await.unwrap(),
        m5::mqttbytes::v5::PubAckReason::NotAuthorized
    );
    assert_eq!(
        a5.publish("ntfy/alice1", b"v5 mine").await.unwrap(),
        m5::mqttbytes::v5::PubAckReason::Success
    );
    // mosquitto: v4 sees the connection lost, v5 the refusal.
    let (ok, _) = mosquitto_pub(
        p4,
        "127.0.0.1",
        &[
            "-u",
            "x",
            "-P",
            "tk_alice",
            "-t",
            "ntfy/bob",
            "-m",
            "mosq secret",
        ],
    );
    assert!(!ok, "mosquitto_pub v4 to a forbidden topic succeeded");
    let (_, err) = mosquitto_pub(
        p5,
        "127.0.0.1",
        &[
            "-V",
            "mqttv5",
            "-u",
            "x",
            "-P",
            "tk_alice",
            "-t",
            "ntfy/bob",
            "-m",
            "mosq5 secret",
        ],
    );
    assert!(err.contains("Not authorized"), "{err}");
    let (ok, err) = mosquitto_pub(
        p5,
        "127.0.0.1",
        &[
            "-V",
            "mqttv5",
            "-u",
            "x",
            "-P",
            "tk_alice",
            "-t",
            "ntfy/alice1",
            "-m",
            "mosq5",
        ],
    );
    assert!(ok && err.is_empty(), "{err}");
    // mosquitto_sub is told every subscription was denied.
    let out = std::process::Command::new(tool("mosquitto_sub"))
        .args(["-h", "127.0.0.1", "-p", &p5.to_string(), "-V", "mqttv5"])
        .args(["-u", "x", "-P", "tk_alice", "-t", "ntfy/bob", "-C", "1"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("denied"),
        "{out:?}"
    );

    // The observer gets the marker and nothing refused before it; ntfy has
    // only the marker on bob's topic, and alice's own messages on hers.
    let (ok, _) = mosquitto_pub(
        p4,
        "127.0.0.1",
        &["-u", "x", "-P", "tk_ops", "-t", "ntfy/bob", "-m", "marker"],
    );
    assert!(ok);
    assert_eq!(ops.up_to("ntfy/bob", b"marker").await, [b"marker".to_vec()]);
    assert_eq!(poll(&b, "bob"), ["marker"]);
    assert_eq!(poll(&b, "alice1"), ["mine", "after", "v5 mine", "mosq5"]);
    assert!(refusals(&b, "mqtt_forbidden") >= 7);
}

/// Wildcard filters need a token that reads every topic: refused for a
/// restricted token even where every topic they match would be its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcard_subscribe_needs_an_all_topic_token() {
    use m5::mqttbytes::v5::SubscribeReasonCode as R5;
    let b = bridge(|c| {
        c.auth.default_access = DefaultAccess::DenyAll;
        c.auth.tokens = tokens();
    })
    .await;
    let p5 = v5_port(&b);
    let mut alice = V5::connect(p5, "alice", Some("tk_alice")).await.unwrap();
    for f in [
        "ntfy/#",
        "ntfy/+",
        "#",
        "ntfy/+/alice1",
        "$share/g/ntfy/alice1",
    ] {
        assert_eq!(alice.subscribe(&[f]).await, [R5::NotAuthorized], "{f}");
    }
    let mut v4 = V4::connect(b.mqtt_port(), "alice4", Some("tk_alice"))
        .await
        .unwrap();
    assert_eq!(
        v4.subscribe(&["ntfy/#"]).await,
        [SubscribeReasonCode::Failure]
    );
    let mut ops = V5::connect(p5, "ops", Some("tk_ops")).await.unwrap();
    assert_eq!(
        ops.subscribe(&["ntfy/#", "#"]).await,
        [
            R5::Success(m5::mqttbytes::QoS::AtLeastOnce),
            R5::Success(m5::mqttbytes::QoS::AtLeastOnce)
        ]
    );
}

/// `read-only`: anonymous MQTT clients connect and subscribe (any topic,
/// wildcards too) but cannot publish; a write token can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_on_read_only_subscribes_but_cannot_publish() {
    let b = bridge(|c| {
        c.auth.default_access = DefaultAccess::ReadOnly;
        c.auth.tokens = tokens();
    })
    .await;
    let (p4, p5) = (b.mqtt_port(), v5_port(&b));
    let mut anon = V4::connect(p4, "anon-sub", None).await.unwrap();
    assert_eq!(
        anon.subscribe(&["ntfy/ro", "other/#"]).await,
        [
            SubscribeReasonCode::Success(QoS::AtLeastOnce),
            SubscribeReasonCode::Success(QoS::AtLeastOnce)
        ]
    );
    // An unknown token is refused at CONNECT (as on HTTP: 401).
    assert!(V4::connect(p4, "bogus", Some("nope")).await.is_err());

    let (ok, _) = mosquitto_pub(p4, "127.0.0.1", &["-t", "ntfy/ro", "-m", "anon v4"]);
    assert!(!ok, "anonymous v4 publish accepted");
    let (_, err) = mosquitto_pub(
        p5,
        "127.0.0.1",
        &["-V", "mqttv5", "-t", "ntfy/ro", "-m", "anon v5"],
    );
    assert!(err.contains("Not authorized"), "{err}");
    // A write token's publication (MQTT, then HTTP) arrives; nothing before.
    let (ok, _) = mosquitto_pub(
        p4,
        "127.0.0.1",
        &["-u", "x", "-P", "tk_ops", "-t", "ntfy/ro", "-m", "by token"],
    );
    assert!(ok);
    let (code, _) = curl(&[
        "-H",
        "Authorization: Bearer tk_ops",
        "-d",
        "over http",
        &format!("{}/ro", b.http()),
    ]);
    assert_eq!(code, 200);
    assert_eq!(
        anon.up_to("ntfy/ro", b"over http").await,
        [b"by token".to_vec(), b"over http".to_vec()]
    );
    assert_eq!(poll(&b, "ro"), ["by token", "over http"]);
}

/// At most `mqtt_connections_per_visitor` connections per visitor: the
/// next is closed before CONNACK while the others keep working, another
/// visitor still connects, and a slot frees when a connection ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_per_visitor_are_capped() {
    let b = bridge(|c| c.limits.mqtt_connections_per_visitor = 3).await;
    let p4 = b.mqtt_port();
    let mut c1 = V4::connect(p4, "c1", None).await.unwrap();
    let mut c2 = V4::connect(p4, "c2", None).await.unwrap();
    let c3 = V5::connect(v5_port(&b), "c3", None).await.unwrap();
    // The cap is per visitor over every listener.
    assert!(V4::connect(p4, "c4", None).await.is_err());
    assert!(V5::connect(v5_port(&b), "c4", None).await.is_err());
    assert!(refusals(&b, "mqtt_connections") >= 2);
    // Another visitor (127.0.0.2) is not affected.
    let (ok, err) = mosquitto_pub(p4, "127.0.0.2", &["-t", "ntfy/cap", "-m", "other"]);
    assert!(ok, "{err}");
    // The three admitted connections still work.
    assert_eq!(
        c1.subscribe(&["ntfy/cap"]).await,
        [SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    c2.publish("ntfy/cap", b"still here").await.unwrap();
    assert_eq!(c1.next().await, ("ntfy/cap".into(), b"still here".to_vec()));
    // One ends; its slot frees once the broker has seen it go (bounded).
    drop(c3);
    let mut again = None;
    for _ in 0..200 {
        if let Ok(c) = V4::connect(p4, "c5", None).await {
            again = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut c5 = again.expect("no slot freed after a disconnect");
    c5.publish("ntfy/cap", b"new").await.unwrap();
    assert_eq!(c1.next().await, ("ntfy/cap".into(), b"new".to_vec()));
    assert_eq!(
        poll_as(&b, "127.0.0.1", "cap"),
        ["other", "still here", "new"]
    );
}

/// A PUBLISH flood past the visitor's MQTT bucket (issue #14) is slowed,
/// not closed: every QoS 1 publication of an MQTT 5 client (rumqttc) is
/// acknowledged with success, none later than the bucket allows, on one
/// connection. The bucket is MQTT's own: the same visitor's HTTP requests
/// still pass, and another visitor (MQTT and HTTP from 127.0.0.2) is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_flood_is_slowed_not_cut_off() {
    const BURST: u32 = 5;
    const PER_SEC: u32 = 20;
    const N: u32 = 25;
    let b = bridge(|c| {
        c.limits = rdv_relay_bridge::config::LimitsConfig {
            mqtt_publish_burst: BURST,
            mqtt_publish_per_sec: PER_SEC,
            ..Default::default()
        };
    })
    .await;
    let mut flood = V5::connect(v5_port(&b), "flood", None).await.unwrap();
    let t0 = std::time::Instant::now();
    for i in 0..N {
        let r = flood.publish("ntfy/flood", format!("{i}").as_bytes()).await;
        assert_eq!(
            r.unwrap(),
            m5::mqttbytes::v5::PubAckReason::Success,
            "publication {i}"
        );
    }
    let took = t0.elapsed();
    // The bucket's own bound: past the burst, one per 1/PER_SEC s.
    let least = Duration::from_secs_f64(f64::from(N - BURST - 1) / f64::from(PER_SEC));
    assert!(
        took >= least,
        "{N} acknowledged in {took:?}: the limit did not hold"
    );
    eprintln!(
        "figure: {N} QoS 1 publications (burst {BURST}, {PER_SEC}/s) acknowledged in {:.2} s",
        took.as_secs_f64()
    );
    let want: Vec<String> = (0..N).map(|i| i.to_string()).collect();
    assert_eq!(poll_as(&b, "127.0.0.2", "flood"), want);
    // The same visitor on HTTP: ntfy's bucket is untouched.
    let (code, _) = curl(&["-d", "http", &format!("{}/flood", b.http())]);
    assert_eq!(code, 200);
    // Another visitor: MQTT and HTTP work.
    let (ok, err) = mosquitto_pub(
        b.mqtt_port(),
        "127.0.0.2",
        &["-t", "ntfy/flood", "-m", "other"],
    );
    assert!(ok, "{err}");
    let (code, _) = curl(&[
        "--interface",
        "127.0.0.2",
        "-d",
        "other http",
        &format!("{}/flood", b.http()),
    ]);
    assert_eq!(code, 200);
    let got = poll_as(&b, "127.0.0.2", "flood");
    assert_eq!(got.len(), N as usize + 3);
    assert_eq!(got[N as usize..], ["http", "other", "other http"]);
}

/// `poll` from another loopback address (a visitor with its own bucket).
fn poll_as(b: &Bridge, bind: &str, topic: &str) -> Vec<String> {
    let (code, body) = curl(&[
        "--interface",
        bind,
        &format!("{}/{topic}/json?poll=1", b.http()),
    ]);
    assert_eq!(code, 200);
    lines(&body)
        .iter()
        .map(|m| m["message"].as_str().unwrap().to_owned())
        .collect()
}

/// Bytes per day are one budget per visitor over HTTP and MQTT: after HTTP
/// spent most of it, an MQTT publication that does not fit is refused (v5:
/// DISCONNECT 0x97) and goes nowhere, one that fits passes, and another
/// visitor is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_per_day_are_shared_with_http() {
    let b = bridge(|c| c.limits.bytes_per_day = 1000).await;
    let (code, _) = curl(&["-d", &"h".repeat(900), &format!("{}/bytes", b.http())]);
    assert_eq!(code, 200);
    let mut c = V5::connect(v5_port(&b), "bytes", None).await.unwrap();
    assert_eq!(
        c.publish("ntfy/bytes", &[b'm'; 60]).await.unwrap(),
        m5::mqttbytes::v5::PubAckReason::Success
    );
    let end = c.publish("ntfy/bytes", &[b'x'; 60]).await.unwrap_err();
    assert_eq!(
        disconnect_reason(&end),
        Some(m5::mqttbytes::v5::DisconnectReasonCode::QuotaExceeded),
        "{end:?}"
    );
    // v4 (mosquitto): the connection is closed.
    let (ok, _) = mosquitto_pub(
        b.mqtt_port(),
        "127.0.0.1",
        &["-t", "ntfy/bytes", "-m", &"y".repeat(60)],
    );
    assert!(!ok, "over-quota v4 publish accepted");
    // HTTP agrees that the day is spent.
    let (code, _) = curl(&["-d", &"z".repeat(60), &format!("{}/bytes", b.http())]);
    assert_eq!(code, 429);
    assert!(refusals(&b, "bytes_per_day") >= 3);
    let (ok, err) = mosquitto_pub(
        b.mqtt_port(),
        "127.0.0.2",
        &["-t", "ntfy/bytes", "-m", &"o".repeat(600)],
    );
    assert!(ok, "{err}");
    let got = poll_as(&b, "127.0.0.2", "bytes");
    assert_eq!(got, ["h".repeat(900), "m".repeat(60), "o".repeat(600)]);
}

/// Subscriptions per visitor count HTTP subscriptions and MQTT filters
/// together: an MQTT SUBSCRIBE over the limit is refused as a whole (SUBACK
/// failure), HTTP is refused while MQTT holds the slots, and unsubscribing
/// or disconnecting frees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_shared_with_http() {
    let b = bridge(|c| c.limits.subscriptions_per_visitor = 3).await;
    let http_probe = |b: &Bridge| curl(&[&format!("{}/subs/json?poll=1", b.http())]).0;
    // One HTTP subscription stays open.
    let sse_args = [
        "sse".to_owned(),
        format!("{}/subs/sse", b.http()),
        "--count".into(),
        "1".into(),
        "--timeout".into(),
        "300".into(),
    ];
    let sse_args: Vec<&str> = sse_args.iter().map(String::as_str).collect();
    let _sse = Proc::py(&sse_args);
    _sse.until("OPEN");
    let mut c = V4::connect(b.mqtt_port(), "subs", None).await.unwrap();
    // Three filters do not fit beside it: none is subscribed.
    assert_eq!(
        c.subscribe(&["ntfy/s1", "ntfy/s2", "ntfy/s3"]).await,
        vec![SubscribeReasonCode::Failure; 3]
    );
    assert_eq!(http_probe(&b), 200, "a refused SUBSCRIBE took no slot");
    // Two do (a repeated filter counts once); now HTTP is refused.
    assert_eq!(
        c.subscribe(&["ntfy/s1", "ntfy/s2", "ntfy/s1"]).await,
        vec![SubscribeReasonCode::Success(QoS::AtLeastOnce); 3]
    );
    assert_eq!(
        c.subscribe(&["ntfy/s1"]).await.len(),
        1,
        "resubscribing is free"
    );
    assert_eq!(http_probe(&b), 429);
    assert_eq!(
        c.subscribe(&["ntfy/s3"]).await,
        [SubscribeReasonCode::Failure]
    );
    assert!(refusals(&b, "subscriptions") >= 3);
    // Unsubscribing frees a slot for HTTP.
    c.unsubscribe("ntfy/s2").await;
    assert_eq!(http_probe(&b), 200);
    // Disconnecting frees the rest (bounded wait for the broker to notice).
    assert_eq!(
        c.subscribe(&["ntfy/s3"]).await,
        [SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    assert_eq!(http_probe(&b), 429);
    drop(c);
    let mut freed = false;
    for _ in 0..200 {
        if http_probe(&b) == 200 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(freed, "MQTT subscriptions were not released at disconnect");
    // Both of its slots: two more HTTP subscriptions open beside the first.
    let more: Vec<Proc> = (0..2).map(|_| Proc::py(&sse_args)).collect();
    for p in &more {
        assert_eq!(p.line(), "OPEN");
    }
}

/// A will message is a publication the broker makes later on the client's
/// behalf: CONNECT is refused when the token may not write its topic, so a
/// restricted token cannot reach another topic through its will.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn will_message_needs_write_access() {
    let b = bridge(|c| {
        c.auth.default_access = DefaultAccess::DenyAll;
        c.auth.tokens = tokens();
    })
    .await;
    let p4 = b.mqtt_port();
    let mut ops = V4::connect(p4, "ops", Some("tk_ops")).await.unwrap();
    ops.subscribe(&["ntfy/bob", "ntfy/alice1"]).await;
    let refused = V4::connect_will(p4, "w1", Some("tk_alice"), Some("ntfy/bob")).await;
    assert!(refused.is_err(), "will on a forbidden topic admitted");
    // Her own topic: admitted, and the will fires when she vanishes.
    let mine = V4::connect_will(p4, "w2", Some("tk_alice"), Some("ntfy/alice1"))
        .await
        .unwrap();
    drop(mine);
    assert_eq!(ops.next().await, ("ntfy/alice1".into(), b"will".to_vec()));
    let (ok, _) = mosquitto_pub(
        p4,
        "127.0.0.1",
        &["-u", "x", "-P", "tk_ops", "-t", "ntfy/bob", "-m", "marker"],
    );
    assert!(ok);
    assert_eq!(ops.up_to("ntfy/bob", b"marker").await, [b"marker".to_vec()]);
}
