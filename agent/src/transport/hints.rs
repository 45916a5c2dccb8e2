//! Discovery over the ntfy and MQTT hint servers (§4.4 item 1, §6.3): the
//! same topic namespace as on Nostr, read once. An ntfy server answers from
//! its cache (`poll=1`); an MQTT broker hands a new subscriber the message
//! it retained on each topic (the public pointer). What comes back is raw,
//! attacker-controlled bytes, bounded here and verified by the caller.

use std::time::{Duration, Instant};

use rdv_agent_core::state::Route;

/// The largest message kept from a hint topic: a public pointer is a card
/// (§4.3: at most 16 KiB), a probe a request with its card inside; both
/// are held to the envelope bound of §6.4.
pub const HINT_MESSAGE_MAX_BYTES: usize = rdv_proto::consts::ENVELOPE_MAX_BYTES;

/// At most this many messages are kept from one server for one lookup.
pub const HINT_MESSAGES_MAX: usize = 256;

/// After the last retained message, how long an MQTT lookup waits for
/// another before it ends.
const MQTT_QUIET: Duration = Duration::from_millis(700);

/// One message read from a hint server.
#[derive(Debug, Clone)]
pub struct HintMessage {
    /// `ntfy:<server>` or `mqtt:<url>`.
    pub source: String,
    pub topic: String,
    pub bytes: Vec<u8>,
}

/// Reads `topics` on every hint server in `routes` (their own topics are
/// ignored: only the server is taken), within `timeout` for each. Returns
/// what was read and, apart, one line per server that could not be asked.
pub async fn fetch(
    routes: Vec<Route>,
    topics: Vec<String>,
    timeout: Duration,
) -> (Vec<HintMessage>, Vec<String>) {
    let mut tasks = Vec::new();
    for r in routes {
        let topics = topics.clone();
        tasks.push(tokio::task::spawn_blocking(move || match r {
            Route::Ntfy { server, .. } => ntfy(&server, &topics),
            Route::Mqtt { url, .. } => mqtt(&url, &topics, timeout),
            Route::Nostr { .. } => Ok(Vec::new()),
        }));
    }
    let mut got = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(m)) => got.extend(m),
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (got, errors)
}

fn ntfy(server: &str, topics: &[String]) -> Result<Vec<HintMessage>, String> {
    use rdv_bridge_client::ntfy::{NtfyClient, Since};
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let source = format!("ntfy:{server}");
    let msgs = NtfyClient::new(server)
        .and_then(|c| c.poll(&names, &Since::All))
        .map_err(|e| format!("{source}: {e}"))?;
    let mut out = Vec::new();
    // Newest first: a flood of old messages cannot push the newest card out.
    for m in msgs.into_iter().rev() {
        if out.len() == HINT_MESSAGES_MAX {
            break;
        }
        if !topics.contains(&m.topic) {
            continue;
        }
        let Ok(bytes) = m.body() else { continue };
        if bytes.len() > HINT_MESSAGE_MAX_BYTES {
            continue;
        }
        out.push(HintMessage {
            source: source.clone(),
            topic: m.topic,
            bytes,
        });
    }
    Ok(out)
}

fn mqtt(url: &str, topics: &[String], timeout: Duration) -> Result<Vec<HintMessage>, String> {
    use rdv_bridge_client::mqtt::{MqttSubscription, QoS, fresh_client_id};
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let source = format!("mqtt:{url}");
    let mut sub = MqttSubscription::connect(url, &fresh_client_id("rdv"), &names, QoS::AtLeastOnce)
        .map_err(|e| format!("{source}: {e}"))?;
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while out.len() < HINT_MESSAGES_MAX && Instant::now() < deadline {
        let wait = MQTT_QUIET.min(deadline.saturating_duration_since(Instant::now()));
        match sub.recv_timeout(wait) {
            Ok(Some(p)) => {
                // Only what the broker kept: live traffic is the listener's.
                if !p.retain || !topics.contains(&p.topic) {
                    continue;
                }
                if p.payload.len() > HINT_MESSAGE_MAX_BYTES {
                    continue;
                }
                out.push(HintMessage {
                    source: source.clone(),
                    topic: p.topic,
                    bytes: p.payload,
                });
            }
            Ok(None) => break,
            Err(e) => return Err(format!("{source}: {e}")),
        }
    }
    Ok(out)
}
