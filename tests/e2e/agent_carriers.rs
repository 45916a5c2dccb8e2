//! The agent's carriers besides Nostr, end to end (SPEC §4.4 item 1, §6.1,
//! §6.3, §5.2.2): real `rdv` processes, each with its own home, against
//! `rdv-dev-relay` and the real `rdv-relay-bridge` (its ntfy HTTP API and
//! its embedded MQTT broker), all on ephemeral loopback ports.
//!
//! Every journey is asserted on both sides. Waits are bounded polls of
//! `rdv inbox --json` and `rdv contact pending --json`; nothing sleeps to
//! assert timing. Every process is owned by a guard that kills it when
//! dropped. The relay and agent harness is agents.rs (shared with the
//! other journeys); the bridge and gateway guards are this file's.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rdv_e2e::{Server, TempDir, bin, free_port, start_server};
use serde_json::{Value, json};

mod agents;
use agents::*;

/// A wait that spans a failing carrier: the sender retries on its 5 s tick
/// and heals to the next carrier after two failed attempts.
const WAIT_HEAL: Duration = Duration::from_secs(60);

// ---- the probe gateway (§5.2.2 invites) ------------------------------------------

/// `rdv-probe-gateway serve` on port 0; the mail it sends is spooled to
/// files (its outbox), read here as the recipients' mailboxes.
struct Gateway {
    server: Server,
    dir: TempDir,
    seen: std::collections::HashSet<PathBuf>,
}

impl Gateway {
    fn start() -> Gateway {
        let dir = TempDir::new("carriers-gw");
        let config = dir.path().join("gateway.toml");
        std::fs::write(
            &config,
            format!(
                "http_listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n\n[flows]\nmail_domain = \"gw.test\"\npublic_url = \"https://gw.test\"\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let mut serve = Command::new(bin("rdv-probe-gateway"));
        serve.arg("serve").arg("--config").arg(&config);
        Gateway {
            server: start_server(serve),
            dir,
            seen: std::collections::HashSet::new(),
        }
    }

    fn url(&self) -> &str {
        &self.server.url
    }

    /// The mail spooled since the last call.
    fn new_mail(&mut self) -> Vec<String> {
        let outbox = self.dir.path().join("data").join("outbox");
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(&outbox) else {
            return out;
        };
        for e in rd {
            let p = e.unwrap().path();
            if self.seen.insert(p.clone()) {
                out.push(std::fs::read_to_string(&p).unwrap());
            }
        }
        out
    }
}

/// What the ntfy server has cached on `topic`, bodies parsed as JSON.
fn ntfy_cached(a: &Agent, bridge: &Bridge, topic: &str) -> Vec<Value> {
    let r = a.rdv(&["bridge", "sub", "--url", &bridge.http, topic, "--poll"]);
    assert_eq!(r.code, 0, "{}: {}", r.what, r.stderr);
    r.lines()
        .iter()
        .map(|m| serde_json::from_str(m["message"].as_str().unwrap()).unwrap())
        .collect()
}

/// The fallback entries of `type` a card lists.
fn fallbacks<'a>(card: &'a Value, ty: &str) -> Vec<&'a Value> {
    card["rendezvous"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["type"] == ty)
        .collect()
}

/// The non-Nostr carriers a command's delivery report lists, with `ok`.
fn carried(reply: &Value) -> Vec<(String, bool)> {
    reply["delivery"]
        .as_array()
        .unwrap_or_else(|| panic!("no delivery in {reply}"))
        .iter()
        .filter(|d| d["carrier"] != "nostr")
        .map(|d| (d["carrier"].as_str().unwrap().to_string(), d["ok"] == true))
        .collect()
}

// ---- 1. relay down: the delivery heals to MQTT, both ways --------------------

#[test]
fn relay_down_the_delivery_heals_to_mqtt() {
    let mut relay = Relay::dev("mqtt-heal");
    let bridge = start_bridge();
    let args = |addr: &'static str| {
        vec![
            "--address".to_string(),
            addr.to_string(),
            "--relay".into(),
            relay.url.clone(),
            "--allow-ws".into(),
            "--mqtt".into(),
            bridge.mqtt.clone(),
        ]
    };
    let init = |name: &str, addr: &'static str| {
        let a = args(addr);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        Agent::init(name, &a)
    };
    let mut alice = init("alice", "alice@example.com");
    let mut bob = init("bob", "bob@example.com");
    for a in [&alice, &bob] {
        let card = a.ok(&["card"]);
        let m = fallbacks(&card, "mqtt");
        assert_eq!(m.len(), 1, "the card lists the broker: {card}");
        assert_eq!(m[0]["url"], bridge.mqtt.as_str(), "{card}");
    }
    alice.listen();
    let file = alice.card_file();
    bob.ok(&["card", "import", file.to_str().unwrap()]);
    let r = bob.ok(&["contact", "request", &alice.id, "--label", "Alice"]);
    let rid = r["request_id"].as_str().unwrap().to_string();
    bob.listen();
    alice.wait_request_from(&bob);
    alice.ok(&["contact", "grant", &rid, "--label", "Bob"]);
    let aid = alice.id.clone();
    bob.wait_event("contact", |e| {
        e["kind"] == "contact" && e["id"] == aid.as_str()
    });

    // The only relay goes away for good. Bob's delivery fails there, and
    // his listener heals it to the next carrier on Alice's card, the MQTT
    // broker, where her listener receives it.
    relay.stop();
    let r = bob.send_note("Alice", "over mqtt");
    assert_eq!(delivery(&r, "failed"), vec![relay.url.clone()], "{r}");
    let e = alice.wait_note_for(&bob, "over mqtt", WAIT_HEAL);
    assert_eq!(e["label"], "Bob", "{e}");
    wait_until("Bob's queue to drain", WAIT, || {
        (bob.ok(&["status"])["deliveries_under_way"] == 0).then_some(())
    });

    // And back: Alice's answer heals to Bob's broker.
    alice.send_note("Bob", "back over mqtt");
    let e = bob.wait_note_for(&alice, "back over mqtt", WAIT_HEAL);
    assert_eq!(e["label"], "Alice", "{e}");
    wait_until("Alice's queue to drain", WAIT, || {
        (alice.ok(&["status"])["deliveries_under_way"] == 0).then_some(())
    });
}

// ---- 2. discovery and a topic probe over ntfy and MQTT, relay down -----------

#[test]
fn pointer_and_probe_over_ntfy_and_mqtt_while_the_relay_is_down() {
    let mut relay = Relay::dev("hints");
    let bridge = start_bridge();
    // Alice is findable by her address: her pointer goes on her relay and
    // on both hint servers of her card.
    let mut alice = Agent::init(
        "alice",
        &[
            "--address",
            "alice@example.com",
            "--relay",
            &relay.url,
            "--public-pointer",
            "--allow-ws",
            "--ntfy",
            &bridge.http,
            "--mqtt",
            &bridge.mqtt,
        ],
    );
    // Bob asks the ntfy server he uses, Carol the MQTT broker she uses.
    let mut bob = Agent::init(
        "bob",
        &["--relay", &relay.url, "--allow-ws", "--ntfy", &bridge.http],
    );
    let carol = Agent::init(
        "carol",
        &["--relay", &relay.url, "--allow-ws", "--mqtt", &bridge.mqtt],
    );
    alice.listen();
    relay.stop();

    // Bob finds her pointer on the address topic over ntfy.
    let d = bob.ok(&["discover", "alice@example.com"]);
    let found = d["found"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{d}");
    assert_eq!(found[0]["id"], alice.id.as_str(), "{d}");
    assert_eq!(found[0]["binding"], "claimed", "{d}");
    assert_eq!(
        found[0]["source"],
        format!("ntfy:{}", bridge.http).as_str(),
        "{d}"
    );
    // Carol holds only Alice's ID: the broker kept her card (retained) on
    // the ID topic.
    let d = carol.ok(&["discover", &alice.id]);
    let found = d["found"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{d}");
    assert_eq!(found[0]["id"], alice.id.as_str(), "{d}");
    assert_eq!(
        found[0]["source"],
        format!("mqtt:{}", bridge.mqtt).as_str(),
        "{d}"
    );

    // Bob's topic probe: his relay is down, his ntfy server takes it.
    let r = bob.ok(&[
        "contact",
        "request",
        "alice@example.com",
        "--greeting",
        "Hi, Bob here",
        "--label",
        "Alice",
    ]);
    assert_eq!(r["kind"], "topic-probe", "{r}");
    assert_eq!(delivery(&r, "failed"), vec![relay.url.clone()], "{r}");
    assert_eq!(carried(&r), vec![("ntfy".to_string(), true)], "{r}");
    let probe = r["request_id"].as_str().unwrap().to_string();
    let dtopic = r["topic"].as_str().unwrap().to_string();
    bob.listen();

    // Alice's listener watches her dtopic over ntfy and MQTT and gates the
    // probe by her policy (prompt): pending, via topic, binding claimed.
    let req = alice.wait_request_from(&bob);
    assert_eq!(req["request_id"], probe.as_str(), "{req}");
    assert_eq!(req["via"], "topic", "{req}");
    assert_eq!(req["binding"], "claimed", "{req}");
    assert_eq!(req["address"], "alice@example.com", "{req}");
    assert_eq!(
        req["greeting"],
        json!({"untrusted_peer_text": "Hi, Bob here"}),
        "{req}"
    );
    // Once, though it came over ntfy and (bridged) over MQTT.
    let asked: Vec<Value> = alice
        .inbox()
        .into_iter()
        .filter(|e| e["kind"] == "contact_request")
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");

    // §4.4, §9: the guessable topic holds the pointer and the probe, and
    // nothing else (no envelope, no grant).
    let cached = ntfy_cached(&bob, &bridge, &dtopic);
    assert!(!cached.is_empty());
    for m in &cached {
        let pointer = m["id"] == alice.id.as_str() && m["discovery"]["public_pointer"] == true;
        let probe_doc = m["type"] == "rdv/contact-request" && m["id"] == probe.as_str();
        assert!(pointer || probe_doc, "on the dtopic: {m}");
    }

    // Alice grants; the grant heals to Bob's ntfy server, where his listener
    // gets it: a candidate until he confirms it.
    alice.ok(&[
        "contact", "grant", &probe, "--tier", "friend", "--label", "Bob",
    ]);
    let aid = alice.id.clone();
    let e = bob.wait_event_for("contact_candidate", WAIT_HEAL, |e| {
        e["kind"] == "contact_candidate" && e["grantor"] == aid.as_str()
    });
    assert_eq!(e["address"], "alice@example.com", "{e}");
    assert!(
        bob.contact(&alice).is_none(),
        "a candidate is no contact yet"
    );
    let c = bob.ok(&["contact", "confirm", &probe]);
    assert_eq!(c["contact"], alice.id.as_str(), "{c}");
    assert_eq!(c["binding"], "claimed", "{c}");
    let held = bob.contact(&alice).unwrap();
    assert_eq!(held["label"], "Alice", "{held}");
    assert_eq!(held["they_allow"]["tier"], "friend", "{held}");
    let held = alice.contact(&bob).unwrap();
    assert_eq!(held["label"], "Bob", "{held}");
    assert_eq!(held["binding"], "claimed", "{held}");

    // They talk, still without the relay: Bob's note heals to Alice's ntfy.
    bob.send_note("Alice", "found you without the relay");
    let e = alice.wait_note_for(&bob, "found you without the relay", WAIT_HEAL);
    assert_eq!(e["label"], "Bob", "{e}");
}

// ---- 3. an invite's token brings the invitee's request back as its answer -----

impl Agent {
    /// `rdv mailbox add` → the code from the spooled mail → `verify`.
    fn prove(&self, gw: &mut Gateway, mailbox: &str) {
        let v = self.ok(&["mailbox", "add", mailbox, "--gateway", gw.url()]);
        assert_eq!(v["verified"], false, "{v}");
        let mail = gw.new_mail().pop().unwrap();
        let code = mail
            .split_once("type this code into it: ")
            .unwrap()
            .1
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        let v = self.ok(&["mailbox", "verify", mailbox, &code]);
        assert_eq!(v["verified"], true, "{v}");
    }
}

#[test]
fn an_invitee_answers_with_the_token_and_the_inviter_sees_the_answer() {
    let bridge = start_bridge();
    let mut gw = Gateway::start();
    // The gateway verifies cards as in production (no ws:// relays): the
    // cards list a wss:// relay nobody serves, and everything heals to the
    // ntfy hint server, where Alice's pointer is too.
    let nostr = format!("wss://127.0.0.1:{}", free_port());
    let mut alice = Agent::init(
        "alice",
        &[
            "--address",
            "alice@a.test",
            "--relay",
            &nostr,
            "--public-pointer",
            "--ntfy",
            &bridge.http,
        ],
    );
    alice.prove(&mut gw, "alice@a.test");

    // Dana has no agent: Alice invites her; the gateway mails the invite.
    let v = alice.ok(&[
        "contact",
        "invite",
        "dana@d.test",
        "--source",
        "the school parents' list",
    ]);
    let invite_id = v["invite_id"].as_str().unwrap().to_string();
    let mail = gw
        .new_mail()
        .into_iter()
        .find(|m| m.lines().any(|l| l.starts_with("Subject: [RDV-INVITE]")))
        .expect("the invite mail");
    alice.listen();

    // Later Dana installs an agent and answers with the mail she got.
    let mut dana = Agent::init("dana", &["--relay", &nostr, "--ntfy", &bridge.http]);
    let mail_file = dana.dir.path().join("invite.eml");
    std::fs::write(&mail_file, &mail).unwrap();
    let r = dana.ok(&[
        "contact",
        "accept-invite",
        mail_file.to_str().unwrap(),
        "--greeting",
        "Hi Alice, it's Dana",
        "--label",
        "Alice",
    ]);
    assert_eq!(r["kind"], "invite", "{r}");
    assert_eq!(r["invite_id"], invite_id.as_str(), "{r}");
    assert_eq!(
        r["to"],
        alice.id.as_str(),
        "the card came from her ID topic: {r}"
    );
    let rid = r["request_id"].as_str().unwrap().to_string();
    dana.listen();

    // Alice's side: the answer to her invite, bound to the invited mailbox.
    let did = dana.id.clone();
    let e = alice.wait_event_for("invite_answered", WAIT_HEAL, |e| {
        e["kind"] == "invite_answered" && e["from"] == did.as_str()
    });
    assert_eq!(e["invite_id"], invite_id.as_str(), "{e}");
    assert_eq!(e["address"], "dana@d.test", "{e}");
    assert_eq!(e["request_id"], rid.as_str(), "{e}");
    let req = alice.wait_request_from(&dana);
    assert_eq!(req["via"], "invite", "{req}");
    assert_eq!(req["address"], "dana@d.test", "{req}");
    assert_eq!(req["binding"], "mailbox", "{req}");
    assert_eq!(
        req["greeting"],
        json!({"untrusted_peer_text": "Hi Alice, it's Dana"}),
        "{req}"
    );
    // The invite is answered (single use): recording it again is refused,
    // and the gateway took the status.
    let r = alice.rdv(&["contact", "invite-status", &invite_id, "accepted"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("no pending invite"), "{}", r.stderr);
    assert!(
        !alice.inbox().iter().any(|e| e["kind"] == "gateway_refused"),
        "the gateway took the invite's status"
    );

    // Alice grants; Dana's side has the contact.
    alice.ok(&[
        "contact", "grant", &rid, "--tier", "friend", "--label", "Dana",
    ]);
    let aid = alice.id.clone();
    let e = dana.wait_event_for("contact", WAIT_HEAL, |e| {
        e["kind"] == "contact" && e["id"] == aid.as_str()
    });
    assert_eq!(e["how"], "accepted", "{e}");
    assert_eq!(e["label"], "Alice", "{e}");
    let held = alice.contact(&dana).unwrap();
    assert_eq!(held["binding"], "mailbox", "{held}");
    assert_eq!(held["label"], "Dana", "{held}");
}
