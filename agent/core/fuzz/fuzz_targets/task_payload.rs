//! The tasks/v1 payload reader (agent/core/src/task.rs) and the request/v1
//! bounds (§7.6.4), on any bytes: a JSON payload bounded as an envelope's
//! plaintext (§6.4). Asserts: no panic; a task/request accepted names an
//! https capability and its input, when present, is an object; an input
//! that passes the request/v1 check is within every §7.6.4 bound (depth,
//! values, string and key lengths, 8,192 characters as JSON); what we
//! would send for an accepted request reads back to the same request.
//!
//! With `RDV_FUZZ_SEED_DIR=dir`, the init writes the corpus seeds (every
//! task verb, a status and an artifact update) into `dir`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdv_agent_core::task::{
    self, Incoming, Parsed, Shape, check_data_bounds, check_input, check_result_data,
};
use serde_json::{Value, json};

const REQ: &str = "https://rendezvous.nesher.co/ext/request/v1";

fn seeds() -> Vec<(String, Value)> {
    let ids = (
        "00000000-0000-4000-8000-000000000001",
        "00000000-0000-4000-8000-000000000002",
        "00000000-0000-4000-8000-000000000003",
    );
    let msg = |data: Value| {
        json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": ids.0, "taskId": ids.1,
        "contextId": ids.2, "extensions": ["https://rendezvous.nesher.co/ext/tasks/v1", REQ],
        "parts": [{"kind": "data", "data": data}, {"kind": "text", "text": "please"}]}})
    };
    vec![
        (
            "request".into(),
            msg(json!({"rdv": "task/request", "capability": REQ,
            "input": {"data": {"items": ["a", {"b": [1, 2, null]}], "n": 3}},
            "expires": "2026-12-04T00:00:00Z"})),
        ),
        (
            "review".into(),
            msg(json!({"rdv": "task/request",
            "capability": task::EXT_REVIEW, "input": {"focus": ["clarity"], "due": "2026-12-04T00:00:00+02:00"}})),
        ),
        (
            "input".into(),
            msg(json!({"rdv": "task/input", "input": {"data": {"k": "v"}}})),
        ),
        (
            "cancel".into(),
            msg(json!({"rdv": "rdv/cancel", "reason": "no longer"})),
        ),
        (
            "status".into(),
            task::status_payload(
                ids.1,
                ids.2,
                task::TaskState::InputRequired,
                Some(task::Reason::Human),
                true,
                Some(task::status_message(
                    ids.0,
                    ids.1,
                    ids.2,
                    &[
                        task::Part::Text("which?".into()),
                        task::Part::Data(json!({"rdv": "request/data", "data": {"q": 1}})),
                    ],
                )),
                time::OffsetDateTime::UNIX_EPOCH,
            ),
        ),
        (
            "artifact".into(),
            task::artifact_payload(
                ids.1,
                ids.2,
                &task::artifact_object(
                    ids.0,
                    Some("review"),
                    task::EXT_REVIEW,
                    &[task::Part::Data(
                        json!({"rdv": "review/result", "verdict": "ok", "comments": 0}),
                    )],
                ),
            ),
        ),
    ]
}

/// Every §7.6.4 bound, checked independently of the checker under test.
fn within_bounds(v: &Value, depth: usize, values: &mut usize) -> bool {
    match v {
        Value::Object(m) => {
            depth <= 4
                && m.iter().all(|(k, x)| {
                    *values += 1;
                    (1..=64).contains(&k.chars().count())
                        && *values <= 256
                        && within_bounds(x, depth + 1, values)
                })
        }
        Value::Array(a) => {
            depth <= 4
                && a.iter().all(|x| {
                    *values += 1;
                    *values <= 256 && within_bounds(x, depth + 1, values)
                })
        }
        Value::String(s) => s.chars().count() <= 2000,
        _ => true,
    }
}

fn check(v: &Value) {
    if let Ok(()) = check_data_bounds(v) {
        let mut n = 0;
        assert!(within_bounds(v, 1, &mut n), "accepted out of bounds: {v}");
        assert!(serde_json::to_string(v).unwrap().chars().count() <= 8192);
    }
    let _ = check_result_data(Shape::Request, v);
    let _ = check_result_data(Shape::Review, v);
    let _ = check_input(Shape::Review, Some(v));
    match task::parse_payload(v) {
        Parsed::Task(Incoming::Request {
            message_id,
            task_id,
            context_id,
            capability,
            input,
            texts,
            files,
            ..
        }) => {
            assert!(capability.starts_with("https://") && capability.len() <= 200);
            if let Some(i) = &input {
                assert!(i.is_object());
                if check_input(Shape::Request, Some(i)).is_ok() {
                    let mut n = 0;
                    assert!(
                        within_bounds(&i["data"], 1, &mut n),
                        "input out of bounds: {i}"
                    );
                }
            }
            let mut data = json!({"rdv": "task/request", "capability": capability});
            if let Some(i) = &input {
                data["input"] = i.clone();
            }
            let again = task::message_payload(
                &message_id,
                &task_id,
                &context_id,
                &capability,
                data,
                &texts,
                &files,
            );
            match task::parse_payload(&again) {
                Parsed::Task(Incoming::Request {
                    capability: c2,
                    input: i2,
                    texts: t2,
                    files: f2,
                    ..
                }) => {
                    assert_eq!((c2, i2, t2, f2), (capability, input, texts, files));
                }
                other => panic!("our own request does not read back: {other:?}"),
            }
        }
        Parsed::Task(Incoming::Input { input, .. }) => {
            assert!(input.is_none_or(|i| i.is_object()));
        }
        _ => {}
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
        if let Ok(v) = rdv_proto::canon::parse(data, rdv_proto::consts::ENVELOPE_MAX_PLAINTEXT) {
            check(&v);
        }
    }
);
