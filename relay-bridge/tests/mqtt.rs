//! The MQTT side against real clients: Debian's mosquitto_pub/mosquitto_sub
//! and Python paho-mqtt, on the embedded broker's v4, v5 and WebSocket
//! listeners, bridged both ways to the ntfy topic space.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use base64::Engine as _;
use common::{Backend, Bridge, Proc, curl, curl_json, lines, tool};
use rdv_relay_bridge::config::MqttMode;

async fn bridge() -> Bridge {
    Bridge::start(Backend::Sqlite, |c| {
        c.mqtt.mode = MqttMode::Embedded;
        c.mqtt.listen = Some("127.0.0.1:0".parse().unwrap());
        c.mqtt.listen_v5 = Some("127.0.0.1:0".parse().unwrap());
        c.mqtt.ws_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await
}

fn poll(b: &Bridge, topic: &str) -> Vec<serde_json::Value> {
    let (code, body) = curl(&[&format!("{}/{topic}/json?poll=1", b.http())]);
    assert_eq!(code, 200);
    lines(&body)
}

fn payload_of(m: &serde_json::Value) -> Vec<u8> {
    let s = m["message"].as_str().unwrap();
    if m["encoding"] == "base64" {
        base64::engine::general_purpose::STANDARD.decode(s).unwrap()
    } else {
        s.as_bytes().to_vec()
    }
}

/// Starts mosquitto_sub printing "<topic> <hex payload>" lines, and waits
/// until it is subscribed (probes published through ntfy come through).
fn mosquitto_sub(b: &Bridge, topic: &str, port: u16, v5: bool) -> Proc {
    let port = port.to_string();
    let mut args = vec![
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        topic,
        "-q",
        "1",
        "-F",
        "%t %x",
    ];
    if v5 {
        args.extend_from_slice(&["-V", "mqttv5"]);
    }
    let p = Proc::spawn(tool("mosquitto_sub"), &args);
    let h = b.http();
    let probe = hex(b"probe");
    let (tx, rx) = std::sync::mpsc::channel();
    let t = topic.to_owned();
    std::thread::spawn(move || {
        for _ in 0..200 {
            curl(&["-H", "X-Cache: no", "-d", "probe", &format!("{h}/{t}")]);
            if rx
                .recv_timeout(std::time::Duration::from_millis(100))
                .is_ok()
            {
                return;
            }
        }
    });
    let first = p.line();
    assert!(first.ends_with(&probe), "{first}");
    let _ = tx.send(());
    p
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Next non-probe line.
fn next_real(p: &Proc) -> String {
    let probe = hex(b"probe");
    loop {
        let l = p.line();
        if !l.ends_with(&probe) {
            return l;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_pub_reaches_ntfy_byte_for_byte_once() {
    let b = bridge().await;
    let port = b.mqtt_port().to_string();
    let mut sse = Proc::py(&["sse", &format!("{}/m2n/sse", b.http()), "--count", "2"]);
    sse.until("OPEN");
    let body: Vec<u8> = (0..45_000u32).map(|i| (i * 131 % 251) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p");
    std::fs::write(&f, &body).unwrap();
    let st = std::process::Command::new(tool("mosquitto_pub"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "m2n",
            "-q",
            "1",
            "-f",
            f.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let st = std::process::Command::new(tool("mosquitto_pub"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "m2n",
            "-m",
            "after",
            "-V",
            "mqttv311",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let (got, done) = sse.finish();
    assert_eq!(done["count"], 2);
    let first: serde_json::Value =
        serde_json::from_str(got.iter().find_map(|l| l.strip_prefix("MSG ")).unwrap()).unwrap();
    assert_eq!(first["encoding"], "base64");
    assert!(payload_of(&first) == body, "payload differs");
    // Cached once: no echo came back as a second copy.
    let cached = poll(&b, "m2n");
    assert_eq!(cached.len(), 2);
    assert_eq!(payload_of(&cached[1]), b"after");
    // Topics outside the ntfy rule stay MQTT-only.
    let st = std::process::Command::new(tool("mosquitto_pub"))
        .args(["-h", "127.0.0.1", "-p", &port, "-t", "m2n/sub", "-m", "x"])
        .status()
        .unwrap();
    assert!(st.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ntfy_reaches_mosquitto_sub_v4_and_v5_once() {
    let b = bridge().await;
    let h = b.http();
    let v5port = b.running.as_ref().unwrap().bound.mqtt.v5.unwrap().port();
    let s4 = mosquitto_sub(&b, "n2m", b.mqtt_port(), false);
    let s5 = mosquitto_sub(&b, "n2m", v5port, true);
    let body: Vec<u8> = (0..45_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p");
    std::fs::write(&f, &body).unwrap();
    assert_eq!(
        curl(&["-T", f.to_str().unwrap(), &format!("{h}/n2m")]).0,
        200
    );
    curl(&["-d", "sentinel", &format!("{h}/n2m")]);
    for s in [&s4, &s5] {
        assert_eq!(next_real(s), format!("n2m {}", hex(&body)));
        assert_eq!(
            next_real(s),
            format!("n2m {}", hex(b"sentinel")),
            "exactly once"
        );
    }
    // And ntfy has it once (the broker's echo to the bridge was not re-published).
    let cached = poll(&b, "n2m");
    assert_eq!(cached.len(), 2);
    assert!(payload_of(&cached[0]) == body, "payload differs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paho_over_websocket_and_v5() {
    let b = bridge().await;
    let bound = b.running.as_ref().unwrap().bound.clone();
    let ws = bound.mqtt.ws.unwrap().port().to_string();
    let v5 = bound.mqtt.v5.unwrap().port().to_string();
    let mut p = Proc::py(&[
        "mqtt-pub",
        "--port",
        &ws,
        "--transport",
        "websockets",
        "--topic",
        "pahows",
        "--count",
        "3",
    ]);
    assert_eq!(p.finish().1["acked"], true);
    let mut p = Proc::py(&[
        "mqtt-pub",
        "--port",
        &v5,
        "--protocol",
        "5",
        "--topic",
        "pahows",
        "--count",
        "2",
        "--size",
        "45000",
    ]);
    assert_eq!(p.finish().1["acked"], true);
    let got = poll(&b, "pahows");
    assert_eq!(got.len(), 5);
    assert_eq!(payload_of(&got[0]), b"msg-0");
    let big = payload_of(&got[4]);
    assert_eq!(big.len(), 45000);
    assert!(big.starts_with(b"00000001:"));
    // ntfy → paho subscriber on WebSocket.
    let mut sub = Proc::py(&[
        "mqtt-sub",
        "--port",
        &ws,
        "--transport",
        "websockets",
        "--topic",
        "pahows2",
        "--count",
        "1",
        "--hex",
    ]);
    sub.until("SUBSCRIBED");
    let (_, m) = curl_json(&["-d", "to ws", &format!("{}/pahows2", b.http())]);
    assert_eq!(m["message"], "to ws");
    assert_eq!(sub.until("PAYLOAD"), hex(b"to ws"));
    assert_eq!(sub.finish().1["count"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_no_loss_no_duplicates() {
    let b = bridge().await;
    let port = b.mqtt_port().to_string();
    let n = 10_000;
    let ns = n.to_string();
    let mut sse = Proc::py(&[
        "sse",
        &format!("{}/bulk/sse", b.http()),
        "--count",
        &ns,
        "--timeout",
        "300",
    ]);
    sse.until("OPEN");
    let mut msub = Proc::py(&[
        "mqtt-sub",
        "--port",
        &port,
        "--topic",
        "bulk",
        "--count",
        &ns,
        "--timeout",
        "300",
    ]);
    msub.until("SUBSCRIBED");
    let mut p = Proc::py(&[
        "mqtt-pub",
        "--port",
        &port,
        "--topic",
        "bulk",
        "--count",
        &ns,
        "--timeout",
        "300",
    ]);
    assert_eq!(p.finish().1["acked"], true);
    let (got, done) = sse.finish();
    assert_eq!(done["count"], n);
    let mut seen = std::collections::HashSet::new();
    for l in got.iter().filter_map(|l| l.strip_prefix("MSG ")) {
        let m: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(
            seen.insert(m["message"].as_str().unwrap().to_owned()),
            "duplicate {m}"
        );
    }
    assert_eq!(seen.len(), n);
    let (_, d) = msub.finish();
    assert_eq!(
        (
            d["count"].as_u64(),
            d["unique"].as_u64(),
            d["dups"].as_u64()
        ),
        (Some(n as u64), Some(n as u64), Some(0))
    );
    assert_eq!(poll(&b, "bulk").len(), n);
}

/// Debian's mosquitto as the external broker (`mqtt.mode = "external"`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_mosquitto_broker() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ps = port.to_string();
    let _broker = Proc::spawn(tool("mosquitto"), &["-p", &ps]);
    let mut up = false;
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(up, "mosquitto did not start");
    let b = Bridge::start(Backend::Sqlite, |c| {
        c.mqtt.mode = MqttMode::External;
        c.mqtt.listen = None;
        c.mqtt.external_url = Some(format!("mqtt://127.0.0.1:{port}"));
    })
    .await;
    let h = b.http();
    let s = mosquitto_sub(&b, "ext", port, false);
    let body: Vec<u8> = (0..45_000u32).map(|i| (i * 13 % 256) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p");
    std::fs::write(&f, &body).unwrap();
    assert_eq!(
        curl(&["-T", f.to_str().unwrap(), &format!("{h}/ext")]).0,
        200
    );
    let st = std::process::Command::new(tool("mosquitto_pub"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &ps,
            "-t",
            "ext",
            "-m",
            "from-mqtt",
            "-q",
            "1",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(next_real(&s), format!("ext {}", hex(&body)));
    assert_eq!(
        next_real(&s),
        format!("ext {}", hex(b"from-mqtt")),
        "exactly once"
    );
    // ntfy side: both, once each (mosquitto echoes the bridge's own publications
    // back to it; the echo filter drops them). Wait for the second to arrive.
    let mut cached = Vec::new();
    for _ in 0..200 {
        cached = poll(&b, "ext");
        if cached.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(payload_of(&cached[0]) == body, "payload differs");
    assert_eq!(payload_of(&cached[1]), b"from-mqtt");
    // A sentinel through the same path proves nothing else is still in flight.
    let mut sse = Proc::py(&["sse", &format!("{h}/ext/sse"), "--count", "1"]);
    sse.until("OPEN");
    std::process::Command::new(tool("mosquitto_pub"))
        .args(["-h", "127.0.0.1", "-p", &ps, "-t", "ext", "-m", "sentinel"])
        .status()
        .unwrap();
    sse.finish();
    assert_eq!(poll(&b, "ext").len(), 3, "no echo copies were cached");
}

/// The embedded broker sends small publications at once: `TCP_NODELAY` on
/// the sockets it accepts (vendor/rumqttd/PATCHES.md), on every listener.
/// Without it a QoS 0 subscriber's publications wait on Nagle's algorithm
/// for its delayed ACK (~40 ms; docs/benchmarks/relay-bridge.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_broker_sets_tcp_nodelay() {
    let b = bridge().await;
    let bound = b.running.as_ref().unwrap().bound.clone();
    for a in [bound.mqtt.v4, bound.mqtt.v5, bound.mqtt.ws] {
        let a = a.unwrap();
        let c = std::net::TcpStream::connect(a).unwrap();
        let mine = c.local_addr().unwrap().port();
        let nodelay =
            tokio::task::spawn_blocking(move || common::server_side_nodelay(a.port(), mine))
                .await
                .unwrap();
        assert!(nodelay, "{a}: accepted socket without TCP_NODELAY");
        drop(c);
    }
}

fn mosquitto_pub(port: u16, extra: &[&str]) -> bool {
    std::process::Command::new(tool("mosquitto_pub"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q", "1"])
        .args(extra)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// An open instance (the default) admits anonymous MQTT clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_instance_admits_anonymous_mqtt() {
    let b = bridge().await;
    assert!(mosquitto_pub(b.mqtt_port(), &["-t", "anon", "-m", "hi"]));
    assert_eq!(poll(&b, "anon").len(), 1);
}

/// The vendored rumqttd's MQTT 5 reader refuses a CONNACK or UNSUBACK with a
/// payload instead of reaching `unreachable!()` (found by the `mqtt_packets`
/// fuzz target; vendor/rumqttd/PATCHES.md): any client could send one and
/// panic the task reading its connection. This test panics without the fix.
#[test]
fn v5_reader_refuses_unexpected_acks_without_panicking() {
    use rumqttd::protocol::Protocol;
    for first in [0x20u8, 0xb0] {
        let mut frame = bytes::BytesMut::from(&[first, 0x21][..]);
        frame.extend_from_slice(&[0x21; 0x21]);
        let r = rumqttd::protocol::v5::V5.read_mut(&mut frame, 1024);
        assert!(r.is_err(), "type {first:#x} with a payload must be refused");
    }
}

/// A burst of payloads on both sides of the size from which rumqttd sends a
/// payload from its own buffer (4,096 bytes; vendor/rumqttd PATCHES.md,
/// "Payloads sent from where they are"), with MQTT 5 properties, reaches v4
/// and v5 subscribers intact and in order: packets written around a payload
/// sent in place keep their bytes and their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_sizes_reach_v4_and_v5_subscribers_intact_in_order() {
    let b = bridge().await;
    let v5port = b.running.as_ref().unwrap().bound.mqtt.v5.unwrap().port();
    let s4 = mosquitto_sub(&b, "mixed", b.mqtt_port(), false);
    let s5 = mosquitto_sub(&b, "mixed", v5port, true);
    let sizes = [1usize, 4095, 4096, 40_000, 300, 4097, 12, 20_000];
    let lines: Vec<String> = (0..160)
        .map(|i| {
            let fill = char::from(b'a' + (i % 26) as u8);
            let head = format!("{i}:");
            let n = sizes[i % sizes.len()].max(head.len());
            format!("{head}{}", fill.to_string().repeat(n - head.len()))
        })
        .collect();
    // One publisher, QoS 1, a message-expiry property on every message:
    // the v5 subscriber gets properties between topic and payload.
    let port = v5port.to_string();
    let mut publisher = std::process::Command::new(tool("mosquitto_pub"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "mixed",
            "-q",
            "1",
            "-V",
            "mqttv5",
            "-D",
            "publish",
            "message-expiry-interval",
            "600",
            "-l",
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = publisher.stdin.take().unwrap();
        for l in &lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    assert!(publisher.wait().unwrap().success());
    for (name, s) in [("v4", &s4), ("v5", &s5)] {
        for (i, l) in lines.iter().enumerate() {
            assert!(
                next_real(s) == format!("mixed {}", hex(l.as_bytes())),
                "{name}: message {i} ({} bytes) differs or is out of order",
                l.len()
            );
        }
    }
}
