//! MQTT retained messages for topics that hold a public-pointer card (issue
//! #5; SPEC §4.4, §6.2): a card published on ntfy becomes the MQTT retained
//! message of its topic, so a later MQTT subscriber gets it at once; a
//! replayed older card does not replace a newer one; other bodies are never
//! retained. Checked with Debian's `mosquitto_sub --retained-only`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Backend, Bridge, curl, tool};
use rdv_proto::AgentKey;
use rdv_relay_bridge::config::MqttMode;
use serde_json::json;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A signed card created `ago` seconds ago, public pointer on or off.
fn card(key: &AgentKey, ago: i64, public_pointer: bool) -> Vec<u8> {
    let created = rdv_proto::time::format_time(rdv_proto::time::from_unix(now() - ago).unwrap());
    let doc = json!({
        "v": 1, "id": key.id().to_string(), "created": created, "expires": null,
        "capabilities": ["rdv/v1"],
        "discovery": {"addresses": [{"type": "email", "value": "alice@example.org"}],
                      "public_pointer": public_pointer},
        "rendezvous": [{"type": "nostr", "relay": "wss://relay.example", "pref": 1}],
        "policy": {"inbound": "prompt", "public": public_pointer},
    });
    let signed = rdv_proto::sign::sign_value(doc, key).unwrap();
    rdv_proto::canon::to_vec(&signed).unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn publish(b: &Bridge, topic: &str, body: &[u8]) {
    let path = std::env::temp_dir().join(format!("rdv-retained-{}-{topic}", std::process::id()));
    std::fs::write(&path, body).unwrap();
    let (code, out) = curl(&[
        "-T",
        path.to_str().unwrap(),
        &format!("{}/{topic}", b.http()),
    ]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
}

/// What `mosquitto_sub` with `extra` arguments prints ("<topic> <hex
/// payload>" lines) until it exits at the first live message on
/// `live_topic`, which the loop publishes (bounded) until it does.
fn sub_until_live(b: &Bridge, extra: &[&str], live_topic: &str) -> Vec<String> {
    let port = b.mqtt_port().to_string();
    let mut args = vec!["-h", "127.0.0.1", "-p", &port, "-q", "1", "-F", "%t %x"];
    args.extend_from_slice(extra);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let h = std::thread::spawn(move || {
        std::process::Command::new(tool("mosquitto_sub"))
            .args(&args)
            .output()
            .unwrap()
    });
    for _ in 0..300 {
        if h.is_finished() {
            break;
        }
        publish(b, live_topic, b"live, not retained");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = h.join().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn public_pointer_cards_are_retained_newest_first_and_nothing_else() {
    let mut b = Bridge::start(Backend::Sqlite, |c| {
        c.mqtt.mode = MqttMode::Embedded;
        c.mqtt.listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let key = AgentKey::from_seed([7; 32]);
    let newer = card(&key, 60, true);
    let older = card(&key, 120, true);
    let private = card(&key, 60, false);
    publish(&b, "dtopic-a", &newer);
    publish(&b, "dtopic-a", &older); // a replay: must not win
    publish(&b, "dtopic-b", &private); // no public pointer
    publish(&b, "dtopic-c", b"{\"v\":1}"); // card-shaped, not a card
    let bb = &b;
    let got = tokio::task::block_in_place(|| {
        // Barrier: the bridge hands publications to the broker in order, so
        // once a later one arrives the cards have reached it.
        sub_until_live(bb, &["-C", "1", "-t", "barrier"], "barrier");
        sub_until_live(
            bb,
            &[
                "--retained-only",
                "-t",
                "dtopic-a",
                "-t",
                "dtopic-b",
                "-t",
                "dtopic-c",
            ],
            "dtopic-c",
        )
    });
    assert_eq!(got, vec![format!("dtopic-a {}", hex(&newer))]);
    b.stop().await;
}
