//! The A2A parser (agent/core/src/a2a.rs) and the meeting verbs' data
//! (agent/core/src/meeting.rs), on any bytes: a JSON payload bounded as an
//! envelope's plaintext (§6.4). Asserts: no panic; whatever is accepted
//! round-trips (what we would send back parses to the same verdict); a
//! meeting verb's data, once accepted, rebuilds to data that parses to the
//! same verb; an unsupported verdict's reply is a status update carrying
//! the refused messageId.
//!
//! With `RDV_FUZZ_SEED_DIR=dir`, the init writes the corpus seeds (valid
//! messages of every verb, status and artifact updates) into `dir`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdv_agent_core::a2a::{self, Inbound, Message, Part};
use rdv_agent_core::meeting;
use serde_json::{Value, json};

fn seeds() -> Vec<(String, Value)> {
    let slot = json!({"start": "2026-12-03T19:00:00+01:00", "end": "2026-12-03T21:00:00+01:00"});
    let ids = (
        "00000000-0000-4000-8000-000000000001",
        "00000000-0000-4000-8000-000000000002",
        "00000000-0000-4000-8000-000000000003",
    );
    let msg = |data: Value| {
        json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": ids.0, "taskId": ids.1,
        "contextId": ids.2, "extensions": ["https://rendezvous.nesher.co/ext/meetings/v1"],
        "parts": [{"kind": "data", "data": data}, {"kind": "text", "text": "hi"}]}})
    };
    let mut out = vec![
        (
            "propose".into(),
            msg(json!({"rdv": "meeting/propose", "slots": [slot],
            "expires": "2026-12-04T00:00:00Z", "place": {"name": "x", "area": "y"}, "intent": "dinner"})),
        ),
        (
            "counter".into(),
            msg(json!({"rdv": "meeting/counter", "slots": [slot, slot]})),
        ),
        (
            "accept".into(),
            msg(json!({"rdv": "meeting/accept", "slot": slot})),
        ),
        (
            "confirm".into(),
            msg(json!({"rdv": "meeting/confirm", "slot": slot})),
        ),
        (
            "decline".into(),
            msg(json!({"rdv": "meeting/decline", "reason": "rate: x"})),
        ),
        ("cancel".into(), msg(json!({"rdv": "rdv/cancel"}))),
        (
            "mcancel".into(),
            msg(json!({"rdv": "meeting/cancel", "slot": slot})),
        ),
        (
            "task".into(),
            msg(json!({"rdv": "task/request",
            "capability": "https://rendezvous.nesher.co/ext/request/v1", "input": {"data": {}}})),
        ),
        (
            "status".into(),
            a2a::status_payload(
                ids.1,
                ids.2,
                a2a::TaskState::Completed,
                time::OffsetDateTime::UNIX_EPOCH,
                None,
            ),
        ),
    ];
    out.push((
        "artifact".into(),
        a2a::artifact_payload(
            ids.1,
            ids.2,
            &a2a::Artifact {
                artifact_id: ids.0.into(),
                name: Some("r".into()),
                description: None,
                parts: vec![Part::Text {
                    text: "t".into(),
                    metadata: None,
                }],
                extensions: vec![],
                metadata: None,
            },
            None,
            Some(true),
        ),
    ));
    out
}

fn check(v: &Value) {
    match a2a::classify(v) {
        Inbound::Message {
            message,
            task_id,
            context_id,
            verb,
            data,
        } => {
            // What we would write of this message parses the same.
            let again = a2a::classify(&a2a::message_payload(&message));
            assert!(
                matches!(&again, Inbound::Message { verb: v2, task_id: t2, context_id: c2, data: d2, .. }
                    if *v2 == verb && *t2 == task_id && *c2 == context_id && *d2 == data),
                "a re-serialized message changed: {again:?}"
            );
            if let Ok(parsed) = meeting::parse_verb(&verb, &data) {
                let rebuilt = meeting::verb_data(&parsed);
                let back = meeting::parse_verb(&verb, &rebuilt);
                assert_eq!(
                    back.as_ref().ok(),
                    Some(&parsed),
                    "a verb's data does not round-trip"
                );
            }
            let _ = Message::agent(message.message_id, &task_id, &context_id, "x", data);
        }
        Inbound::Unsupported(u) => {
            let r = a2a::unsupported_reply(&u, None, time::OffsetDateTime::UNIX_EPOCH);
            match a2a::classify(&r) {
                Inbound::TaskUpdate(s) => {
                    assert_eq!(s.unsupported().map(|x| x.0), Some(u.message_id))
                }
                other => panic!("our unsupported reply does not parse: {other:?}"),
            }
        }
        Inbound::TaskUpdate(_) | Inbound::ArtifactUpdate(_) | Inbound::Malformed(_) => {}
    }
}

fuzz_target!(
    init: {
        if let Some(dir) = std::env::var_os("RDV_FUZZ_SEED_DIR") {
            let dir = std::path::Path::new(&dir);
            std::fs::create_dir_all(dir).expect("the seed dir");
            for (name, v) in seeds() {
                std::fs::write(dir.join(name), serde_json::to_vec(&v).expect("json"))
                    .expect("writing a seed");
            }
        }
    },
    |data: &[u8]| {
        // Bounded like an envelope's plaintext, canonical JSON as opened.
        if let Ok(v) = rdv_proto::canon::parse(data, rdv_proto::consts::ENVELOPE_MAX_PLAINTEXT) {
            check(&v);
        }
    }
);
