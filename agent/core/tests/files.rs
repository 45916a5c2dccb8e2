//! Files in tasks (SPEC §7.7 "In tasks", §5.5): every file part is
//! validated before the task engine sees the payload, one bad part refuses
//! the whole payload, the kept form drops other extensions' metadata and
//! sanitizes names, and the start gate binds each file's sha256. Agents
//! run on the in-memory network and reload from their records after every
//! input. Refusals are asserted by their reason.
#![allow(clippy::unwrap_used)]

mod common;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use common::Net;
use rdv_agent_core::file::{self, FileError};
use rdv_agent_core::gate::start_digest;
use rdv_agent_core::record::Table;
use rdv_agent_core::task::{
    EXT_REVIEW, OpenGate, Parsed, Role, TaskState, parse_payload, task_key,
};
use rdv_agent_core::task_flow::TaskCommand;
use rdv_agent_core::{Command, RequestTo};
use rdv_proto::AgentKey;
use rdv_proto::consts::{A2A_TASKS_REASON_KEY, EXT_FILES, EXT_REQUEST, EXT_TASKS};
use serde_json::{Value, json};

const OMER: usize = 0;
const JOHN: usize = 1;
const OTHER_EXT: &str = "https://example.org/ext/other/v1";

fn contacts() -> Net {
    contacts_at("1000/day")
}

fn contacts_at(max_frequency: &str) -> Net {
    let mut net = Net::new(2);
    net.init(OMER, &["omer@example.com"]);
    net.init(JOHN, &["john@example.com"]);
    let card = net.card(OMER);
    net.cmd(
        JOHN,
        Command::Request {
            to: RequestTo::Card(card),
            greeting: "John's agent".into(),
            label: Some("Omer".into()),
        },
    )
    .unwrap();
    let req = net.nodes[OMER]
        .agent
        .state
        .pending
        .keys()
        .next()
        .unwrap()
        .clone();
    net.cmd(
        OMER,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: json!({
                "may_initiate": true, "may_propose_meetings": false,
                "may_access_calendar": "free_busy", "max_frequency": max_frequency,
                "invoke": { EXT_REVIEW: {}, EXT_REQUEST: {} }
            }),
            label: Some("John".into()),
        },
    )
    .unwrap();
    net
}

fn uuid() -> String {
    let mut b = [0u8; 16];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut b);
    uuid::Builder::from_random_bytes(b)
        .into_uuid()
        .hyphenated()
        .to_string()
}

fn sha(b: &[u8]) -> String {
    file::sha256_hex(b)
}

/// A reference part as a peer writes it, with another extension's
/// metadata beside the files metadata.
fn reference(name: &str, content: &[u8]) -> Value {
    json!({"kind": "file",
    "file": {"uri": "https://files.example.com/q4/3f9a", "mimeType": "application/pdf", "name": name},
    "metadata": {
        EXT_FILES: {"sha256": sha(content), "size": content.len(),
            "enc": {"alg": "aes256gcm", "key": B64.encode([7u8; 32]), "nonce": B64.encode([1u8; 12]), "plain_sha256": sha(b"plain")}},
        OTHER_EXT: {"tracking": "id-1"}
    }})
}

fn request_payload(task_id: &str, files: Vec<Value>, extensions: Vec<&str>) -> Value {
    let mut parts = vec![
        json!({"kind": "data", "data": {"rdv": "task/request", "capability": EXT_REQUEST}}),
        json!({"kind": "text", "text": "Please read the attached plan."}),
    ];
    parts.extend(files);
    json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent",
        "messageId": uuid(), "taskId": task_id, "contextId": uuid(),
        "extensions": extensions, "parts": parts}})
}

fn send_request(net: &mut Net, task_id: &str, files: Vec<Value>, extensions: Vec<&str>) {
    let p = request_payload(task_id, files, extensions);
    let ev = net.forge(JOHN, OMER, &p);
    net.inject(OMER, &ev);
}

fn exec_task(net: &Net, id: &str) -> Option<rdv_agent_core::task::Task> {
    let key = task_key(Role::Executor, &net.nodes[JOHN].id(), id);
    net.nodes[OMER].agent.state.tasks.tasks.get(&key).cloned()
}

/// Every payload node `from` sealed to node `to`, opened with `to`'s key.
fn sent(net: &Net, from: usize, to: usize) -> Vec<Value> {
    let key = AgentKey::from_seed(net.nodes[to].key);
    let from_id = net.nodes[from].id();
    net.log
        .iter()
        .filter_map(|ev| {
            let raw = serde_json::to_vec(ev).unwrap();
            let (_, c) = rdv_proto::nostr_event::parse_event(&raw).ok()?;
            let rdv_proto::nostr_event::Carried::Envelope { envelope, .. } = c else {
                return None;
            };
            let raw = rdv_proto::canon::to_vec(&envelope).ok()?;
            let v = rdv_proto::envelope::verify(&raw, net.now).ok()?;
            if v.header().from != from_id {
                return None;
            }
            let o = rdv_proto::envelope::open_verified(v, &key).ok()?;
            Some(Value::Object(o.payload))
        })
        .collect()
}

fn statuses(net: &Net, task_id: &str) -> Vec<Value> {
    sent(net, OMER, JOHN)
        .into_iter()
        .filter(|p| p["type"] == "a2a/task-update" && p["update"]["taskId"] == task_id)
        .map(|p| p["update"].clone())
        .collect()
}

#[test]
fn our_card_lists_the_files_extension() {
    let net = contacts();
    let card = net.card(OMER);
    let caps = card["capabilities"].as_array().unwrap();
    assert!(caps.iter().any(|c| c == EXT_FILES), "{caps:?}");
}

#[test]
fn a_request_with_files_is_kept_validated_and_shown_at_the_start_gate() {
    let mut net = contacts();
    let id = uuid();
    let inline = json!({"kind": "file", "file": {"bytes": B64.encode(b"notes"), "name": ".hidden/../notes.txt", "mimeType": "Text/Plain"}});
    send_request(
        &mut net,
        &id,
        vec![reference("../q4-plan.pdf", b"cipher"), inline],
        vec![EXT_TASKS, EXT_REQUEST, EXT_FILES],
    );
    let t = exec_task(&net, &id).expect("the task was admitted");
    assert_eq!(t.state, TaskState::Submitted);
    assert!(matches!(t.gate, Some(OpenGate::Start { .. })));
    assert_eq!(t.files.len(), 2);
    // Names and types are display hints, sanitized (§5.6 rule 5).
    assert_eq!(t.files[0].name.as_deref(), Some("_q4-plan.pdf"));
    assert_eq!(t.files[1].name.as_deref(), Some("hidden_.._notes.txt"));
    assert_eq!(t.files[1].mime_type.as_deref(), Some("text/plain"));
    // The kept form drops the other extension's metadata.
    let kept = t.files[0].to_value();
    assert!(kept["metadata"].get(OTHER_EXT).is_none());
    assert_eq!(kept["metadata"][EXT_FILES]["sha256"], sha(b"cipher"));
    // The start gate shows each file: name, size, sha256, encryption, URL;
    // never the key, and nothing was fetched.
    let ev = net.nodes[OMER].events_of("task");
    let received = ev.iter().find(|e| e["step"] == "received").unwrap();
    let files = received["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["sha256"], sha(b"cipher"));
    assert_eq!(files[0]["size"], 6);
    assert_eq!(files[0]["encrypted"], true);
    assert_eq!(files[0]["uri"], "https://files.example.com/q4/3f9a");
    assert_eq!(files[1]["sha256"], sha(b"notes"));
    assert!(!received.to_string().contains(&B64.encode([7u8; 32])));
}

#[test]
fn one_bad_file_part_refuses_the_whole_request() {
    let mut net = contacts();
    let id = uuid();
    let mut bad = reference("b.pdf", b"x");
    bad["metadata"][EXT_FILES]["owner"] = json!("me");
    send_request(
        &mut net,
        &id,
        vec![reference("a.pdf", b"x"), bad],
        vec![EXT_TASKS, EXT_REQUEST, EXT_FILES],
    );
    assert!(exec_task(&net, &id).is_none(), "no state was kept");
    let st = statuses(&net, &id);
    assert_eq!(st.last().unwrap()["status"]["state"], "rejected");
    assert_eq!(
        st.last().unwrap()["metadata"][A2A_TASKS_REASON_KEY],
        "input"
    );
    let dropped = net.nodes[OMER].events_of("dropped");
    assert!(
        dropped.iter().any(|d| d["reason"]
            .as_str()
            .unwrap()
            .contains("unknown key \"owner\"")),
        "{dropped:?}"
    );
}

#[test]
fn a_file_part_without_bytes_or_a_hash_is_refused() {
    let mut net = contacts();
    let id = uuid();
    let bare =
        json!({"kind": "file", "file": {"uri": "https://files.example.com/x", "name": "x.pdf"}});
    send_request(
        &mut net,
        &id,
        vec![bare],
        vec![EXT_TASKS, EXT_REQUEST, EXT_FILES],
    );
    assert!(exec_task(&net, &id).is_none());
    assert_eq!(
        statuses(&net, &id).last().unwrap()["metadata"][A2A_TASKS_REASON_KEY],
        "input"
    );
    // The parser says why.
    let p = request_payload(
        &uuid(),
        vec![json!({"kind": "file", "file": {"uri": "https://files.example.com/x"}})],
        vec![EXT_TASKS, EXT_REQUEST, EXT_FILES],
    );
    assert!(matches!(
        parse_payload(&p),
        Parsed::BadFile {
            why: FileError::NoHash,
            ..
        }
    ));
}

#[test]
fn file_parts_need_the_files_extension_listed() {
    let mut net = contacts();
    let id = uuid();
    send_request(
        &mut net,
        &id,
        vec![reference("a.pdf", b"x")],
        vec![EXT_TASKS, EXT_REQUEST],
    );
    assert!(exec_task(&net, &id).is_none());
    let p = request_payload(
        &uuid(),
        vec![reference("a.pdf", b"x")],
        vec![EXT_TASKS, EXT_REQUEST],
    );
    assert!(matches!(
        parse_payload(&p),
        Parsed::BadFile {
            why: FileError::NotListed,
            ..
        }
    ));
}

#[test]
fn an_http_or_userinfo_url_refuses_the_request() {
    for (uri, why) in [
        ("http://files.example.com/x", file::UrlError::NotHttps),
        (
            "https://me:pw@files.example.com/x",
            file::UrlError::Userinfo,
        ),
    ] {
        let mut part = reference("a.pdf", b"x");
        part["file"]["uri"] = json!(uri);
        let p = request_payload(&uuid(), vec![part], vec![EXT_TASKS, EXT_REQUEST, EXT_FILES]);
        match parse_payload(&p) {
            Parsed::BadFile {
                why: FileError::BadUrl { why: w, .. },
                ..
            } => assert_eq!(w, why),
            other => panic!("{uri}: {other:?}"),
        }
    }
}

#[test]
fn the_start_gate_digest_binds_each_files_sha256() {
    let mut net = contacts();
    let id = uuid();
    send_request(
        &mut net,
        &id,
        vec![reference("a.pdf", b"one")],
        vec![EXT_TASKS, EXT_REQUEST, EXT_FILES],
    );
    let t = exec_task(&net, &id).unwrap();
    let d = start_digest(&t);
    // Another file under the same task: another digest.
    let mut other = t.clone();
    if let Some(m) = other.files[0].meta.as_mut() {
        m.sha256 = sha(b"two");
    }
    assert_ne!(start_digest(&other), d);
    // No file at all: another digest too.
    let mut none = t.clone();
    none.files.clear();
    assert_ne!(start_digest(&none), d);
    // The name is a display hint; the hash is what binds.
    let mut renamed = t.clone();
    renamed.files[0].name = Some("b.pdf".into());
    assert_eq!(start_digest(&renamed), d);
}

#[test]
fn an_artifact_with_files_is_kept_and_a_bad_one_dropped() {
    let mut net = contacts();
    let omer = net.nodes[OMER].id();
    let r = net
        .cmd(
            JOHN,
            Command::Task(TaskCommand::Request {
                to: omer.clone(),
                capability: EXT_REQUEST.into(),
                texts: vec!["Send me the plan".into()],
                input: None,
                expires_in: None,
            }),
        )
        .unwrap();
    let id = r["task_id"].as_str().unwrap().to_string();
    let key = task_key(Role::Requester, &omer, &id);
    let ctx_id = net.nodes[JOHN].agent.state.tasks.tasks[&key]
        .context_id
        .clone();
    let artifact = |parts: Vec<Value>, ext: Vec<&str>| {
        json!({"type": "a2a/artifact-update", "update": {
            "kind": "artifact-update", "taskId": id, "contextId": ctx_id, "lastChunk": true,
            "artifact": {"artifactId": uuid(), "extensions": ext, "parts": parts}}})
    };
    // A bad file (a size that is not a number): the whole artifact is dropped.
    let mut bad = reference("plan.pdf", b"c");
    bad["metadata"][EXT_FILES]["size"] = json!("1");
    let ev = net.forge(
        OMER,
        JOHN,
        &artifact(vec![bad], vec![EXT_REQUEST, EXT_FILES]),
    );
    net.inject(JOHN, &ev);
    assert!(
        net.nodes[JOHN].agent.state.tasks.tasks[&key]
            .artifacts
            .is_empty()
    );
    // A good one is kept in its validated form.
    let good = artifact(
        vec![
            json!({"kind": "text", "text": "Here it is"}),
            reference("plan.pdf", b"c"),
        ],
        vec![EXT_REQUEST, EXT_FILES],
    );
    let ev = net.forge(OMER, JOHN, &good);
    net.inject(JOHN, &ev);
    let t = &net.nodes[JOHN].agent.state.tasks.tasks[&key];
    assert_eq!(t.artifacts.len(), 1);
    let f = t.artifacts[0]
        .parts
        .iter()
        .find(|p| p["kind"] == "file")
        .unwrap();
    assert!(f["metadata"].get(OTHER_EXT).is_none());
    let kept = file::parse_part_value(f).unwrap();
    assert_eq!(kept.sha256(), sha(b"c"));
    let ev = net.nodes[JOHN].events_of("task");
    let art = ev.iter().find(|e| e["step"] == "artifact").unwrap();
    assert_eq!(art["files"][0]["name"], "plan.pdf");
}

// ---- direct transfer (§7.7 rdv/transfer) -------------------------------------

fn transfer_msg(transfer: &str, step: &str, extra: Value) -> Value {
    let mut v =
        json!({"type": "rdv/transfer", "file": sha(b"x"), "transfer": transfer, "step": step});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn propose(transfer: &str) -> Value {
    transfer_msg(
        transfer,
        "propose",
        json!({"protocols": ["webrtc-datachannel/1"], "data": {}}),
    )
}

fn transfers_sent(net: &Net, transfer: &str) -> Vec<Value> {
    sent(net, OMER, JOHN)
        .into_iter()
        .filter(|p| p["type"] == "rdv/transfer" && p["transfer"] == transfer)
        .collect()
}

fn deliver(net: &mut Net, payload: &Value) {
    let ev = net.forge(JOHN, OMER, payload);
    net.inject(OMER, &ev);
}

fn direct_transfer(net: &mut Net, on: bool) -> Value {
    net.cmd(
        OMER,
        Command::File(file::FileCommand::DirectTransfer { on }),
    )
    .unwrap()
}

#[test]
fn a_propose_is_aborted_while_direct_transfer_is_off() {
    let mut net = contacts();
    assert!(
        !net.nodes[OMER].agent.direct_transfer_on(),
        "off by default"
    );
    let id = uuid();
    deliver(&mut net, &propose(&id));
    let out = transfers_sent(&net, &id);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["step"], "abort");
    assert_eq!(out[0]["reason"], "direct transfer is off");
    assert!(net.nodes[OMER].agent.state.tasks.transfers.is_empty());
    let ev = net.nodes[OMER].events_of("transfer");
    assert_eq!(ev.last().unwrap()["step"], "refused");
}

/// Omer's stored direct-transfer record, as the store holds it.
fn stored_setting(net: &Net) -> Value {
    net.nodes[OMER].records[&(Table::Owner, file::DIRECT_TRANSFER_KEY.to_string())].clone()
}

#[test]
fn the_setting_set_through_the_owners_path_is_on_and_macd() {
    let mut net = contacts();
    direct_transfer(&mut net, true);
    // Reloaded from its record after the command: on, and the record
    // carries a MAC over what it says.
    assert_eq!(
        net.nodes[OMER].agent.direct_transfer_setting(),
        file::DirectTransferSetting::On
    );
    let rec = stored_setting(&net);
    assert_eq!(rec["on"], true);
    assert_eq!(rec["mac"].as_str().unwrap().len(), 64);
    let r = net
        .cmd(OMER, Command::File(file::FileCommand::DirectTransferStatus))
        .unwrap();
    assert_eq!(r["direct_transfer"], true);
    assert!(r.get("notice").is_none());
}

#[test]
fn a_tampered_setting_counts_as_off_and_the_owner_is_told() {
    let mut net = contacts();
    // The owner set it off; something that can write the home flips it on
    // (keeping the old MAC), or writes an "on" record with no MAC at all.
    direct_transfer(&mut net, false);
    let off = stored_setting(&net);
    let mut flipped = off.clone();
    flipped["on"] = json!(true);
    let mut bare = off.clone();
    bare["on"] = json!(true);
    bare.as_object_mut().unwrap().remove("mac");
    // A setting MACed under another agent's key does not verify either.
    let other = file::DirectTransfer::new(true, net.now, &[99u8; 32]);
    for forged in [flipped, bare, serde_json::to_value(&other).unwrap()] {
        net.nodes[OMER]
            .records
            .insert((Table::Owner, file::DIRECT_TRANSFER_KEY.into()), forged);
        net.nodes[OMER].reload();
        assert!(!net.nodes[OMER].agent.direct_transfer_on());
        assert_eq!(
            net.nodes[OMER].agent.direct_transfer_setting(),
            file::DirectTransferSetting::Tampered
        );
        // Status: off, with the reason.
        let r = net
            .cmd(OMER, Command::File(file::FileCommand::DirectTransferStatus))
            .unwrap();
        assert_eq!(r["direct_transfer"], false);
        assert_eq!(r["integrity"], "failed");
        assert_eq!(r["notice"], file::DIRECT_TRANSFER_TAMPERED);
        // A propose is aborted as with the setting off, and the owner told.
        let id = uuid();
        deliver(&mut net, &propose(&id));
        let out = transfers_sent(&net, &id);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["step"], "abort");
        assert_eq!(out[0]["reason"], "direct transfer is off");
        assert!(
            net.nodes[OMER]
                .agent
                .state
                .tasks
                .transfers
                .values()
                .all(|t| t.transfer != id)
        );
        let told = net.nodes[OMER].events_of("direct_transfer");
        assert_eq!(told.last().unwrap()["on"], false);
        assert_eq!(
            told.last().unwrap()["reason"],
            file::DIRECT_TRANSFER_TAMPERED
        );
    }
    // Set again through the owner's path, it is on.
    direct_transfer(&mut net, true);
    assert!(net.nodes[OMER].agent.direct_transfer_on());
}

#[test]
fn with_direct_transfer_on_a_propose_waits_for_the_owner_and_nothing_accepts() {
    let mut net = contacts();
    direct_transfer(&mut net, true);
    assert!(net.nodes[OMER].agent.direct_transfer_on());
    let id = uuid();
    deliver(&mut net, &propose(&id));
    // Shown to the owner; nothing is sent, nothing accepted.
    assert!(transfers_sent(&net, &id).is_empty());
    let ev = net.nodes[OMER].events_of("transfer");
    let shown = ev.last().unwrap();
    assert_eq!(shown["step"], "proposed");
    assert_eq!(shown["protocols"][0], "webrtc-datachannel/1");
    let r = net
        .cmd(OMER, Command::File(file::FileCommand::DirectTransferStatus))
        .unwrap();
    assert_eq!(r["direct_transfer"], true);
    assert_eq!(r["waiting"][0]["transfer"], id);
    // A step out of order (a signal before any accept) aborts it.
    deliver(
        &mut net,
        &transfer_msg(&id, "signal", json!({"data": {"sdp": "v=0"}})),
    );
    let out = transfers_sent(&net, &id);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["step"], "abort");
    assert_eq!(out[0]["reason"], "a step out of order");
    // Finished: later messages are ignored.
    deliver(&mut net, &transfer_msg(&id, "done", json!({})));
    assert_eq!(transfers_sent(&net, &id).len(), 1);
    // A message for an unknown transfer is ignored too.
    let other = uuid();
    deliver(
        &mut net,
        &transfer_msg(
            &other,
            "accept",
            json!({"protocol": "webrtc-datachannel/1"}),
        ),
    );
    assert!(transfers_sent(&net, &other).is_empty());
    assert!(
        !net.nodes[OMER]
            .agent
            .state
            .tasks
            .transfers
            .keys()
            .any(|k| k.ends_with(&other))
    );
}

#[test]
fn the_owner_declines_and_turning_it_off_aborts_what_waits() {
    let mut net = contacts();
    direct_transfer(&mut net, true);
    let (a, b) = (uuid(), uuid());
    deliver(&mut net, &propose(&a));
    deliver(&mut net, &propose(&b));
    net.cmd(
        OMER,
        Command::File(file::FileCommand::DeclineTransfer {
            transfer: a.clone(),
        }),
    )
    .unwrap();
    assert_eq!(transfers_sent(&net, &a)[0]["step"], "abort");
    assert!(transfers_sent(&net, &b).is_empty());
    let r = direct_transfer(&mut net, false);
    assert_eq!(r["aborted"], json!([b.clone()]));
    assert_eq!(transfers_sent(&net, &b)[0]["step"], "abort");
    // Off again: a new propose is aborted at once.
    let c = uuid();
    deliver(&mut net, &propose(&c));
    assert_eq!(
        transfers_sent(&net, &c)[0]["reason"],
        "direct transfer is off"
    );
}

#[test]
fn a_transfer_message_with_another_steps_field_is_refused() {
    let mut net = contacts();
    direct_transfer(&mut net, true);
    let id = uuid();
    let mut p = propose(&id);
    p["protocol"] = json!("webrtc-datachannel/1");
    deliver(&mut net, &p);
    assert!(net.nodes[OMER].agent.state.tasks.transfers.is_empty());
    assert!(transfers_sent(&net, &id).is_empty());
    let dropped = net.nodes[OMER].events_of("dropped");
    assert!(
        dropped.iter().any(|d| d["reason"]
            .as_str()
            .unwrap()
            .contains("rdv/transfer refused")),
        "{dropped:?}"
    );
}

// ---- the owner's files leave only through the release gate (§5.5, §7.7) ------

fn issue_code(net: &mut Net, id: &str) -> String {
    use rdv_agent_core::gate::{code_terms, open_gate};
    let t = exec_task(net, id).unwrap();
    let (step, digest) = open_gate(&t).expect("a gate is open");
    let mut rng = rand_core::OsRng;
    let (secret, record) =
        rdv_agent_core::phrase::Phrase::generate(&code_terms(step, &digest), net.now, &mut rng)
            .unwrap();
    let r = net
        .cmd(
            OMER,
            Command::Task(TaskCommand::SetCode {
                task: tref(id),
                step,
                digest,
                record,
            }),
        )
        .unwrap();
    assert_eq!(r["code_set"], true);
    secret.expose().to_string()
}

fn tref(id: &str) -> rdv_agent_core::task_flow::TaskRef {
    rdv_agent_core::task_flow::TaskRef {
        task_id: id.into(),
        peer: None,
    }
}

#[test]
fn a_result_with_the_owners_files_waits_for_the_human_whatever_the_policy() {
    use rdv_agent_core::owner::Secret;
    use rdv_agent_core::task::OwnFile;
    use rdv_agent_core::task_flow::Submit;
    let mut net = contacts();
    let john = net.nodes[JOHN].id();
    // A standing policy that would release anything else without asking.
    net.cmd(
        OMER,
        Command::Task(TaskCommand::Policy {
            contact: john.clone(),
            capability: EXT_REQUEST.into(),
            policy: rdv_agent_core::gate::StandingPolicy {
                auto_start: false,
                auto_release: true,
            },
        }),
    )
    .unwrap();
    let omer = net.nodes[OMER].id();
    let r = net
        .cmd(
            JOHN,
            Command::Task(TaskCommand::Request {
                to: omer,
                capability: EXT_REQUEST.into(),
                texts: vec!["Send me the plan".into()],
                input: None,
                expires_in: None,
            }),
        )
        .unwrap();
    let id = r["task_id"].as_str().unwrap().to_string();
    let code = issue_code(&mut net, &id);
    let r = net
        .cmd(
            OMER,
            Command::Task(TaskCommand::Approve {
                task: tref(&id),
                code: Secret::new(code),
            }),
        )
        .unwrap();
    assert_eq!(r["result"]["verdict"], "approved");
    // Omer's own files: one inline, one encrypted reference.
    let inline = file::inline_part(b"short note", Some("note.txt"), Some("text/plain")).unwrap();
    let mut rng = rand_core::OsRng;
    let (cipher, meta) = file::seal_blob(b"the Q4 plan", &mut rng).unwrap();
    let reference =
        file::reference_part(meta, "https://files.example.com/q4", Some("q4.pdf"), None).unwrap();
    let r = net
        .cmd(
            OMER,
            Command::Task(TaskCommand::Submit {
                task: tref(&id),
                submit: Submit::ResultWithFiles {
                    texts: vec!["Here you are".into()],
                    data: None,
                    name: None,
                    more: false,
                    files: vec![
                        OwnFile {
                            part: inline.clone(),
                            source: "/home/omer/note.txt".into(),
                        },
                        OwnFile {
                            part: reference.clone(),
                            source: "/home/omer/q4.pdf".into(),
                        },
                    ],
                },
            }),
        )
        .unwrap();
    // The policy would have passed it: files need the human every time.
    assert_eq!(r["released"], false);
    let key = task_key(Role::Requester, &net.nodes[OMER].id(), &id);
    assert!(
        !net.nodes[JOHN].agent.state.tasks.tasks.contains_key(&key)
            || net.nodes[JOHN].agent.state.tasks.tasks[&key]
                .artifacts
                .is_empty()
    );
    assert!(
        !sent(&net, OMER, JOHN)
            .iter()
            .any(|p| p["type"] == "a2a/artifact-update")
    );
    // The gate holds the local source of each file, never sent.
    let t = exec_task(&net, &id).unwrap();
    match &t.gate {
        Some(OpenGate::Release {
            draft: rdv_agent_core::task::Draft::Artifact { sources, .. },
            ..
        }) => {
            assert_eq!(sources.len(), 2);
            assert_eq!(sources[1].sha256, reference.sha256());
            assert_eq!(sources[1].source, "/home/omer/q4.pdf");
        }
        other => panic!("{other:?}"),
    }
    // Released by the human's code: the artifact carries both files and the
    // files URI; no source path went out.
    let code = issue_code(&mut net, &id);
    let r = net
        .cmd(
            OMER,
            Command::Task(TaskCommand::Release {
                task: tref(&id),
                code: Secret::new(code),
            }),
        )
        .unwrap();
    assert_eq!(r["result"]["verdict"], "approved");
    let art = sent(&net, OMER, JOHN)
        .into_iter()
        .find(|p| p["type"] == "a2a/artifact-update")
        .unwrap();
    assert!(!art.to_string().contains("/home/omer"));
    let ext = art["update"]["artifact"]["extensions"].as_array().unwrap();
    assert!(ext.iter().any(|e| e == EXT_FILES));
    // John's side: validated and kept; the reference opens with its key.
    let kept = &net.nodes[JOHN].agent.state.tasks.tasks[&key].artifacts[0];
    let files: Vec<file::FilePart> = kept
        .parts
        .iter()
        .filter(|p| p["kind"] == "file")
        .map(|p| file::parse_part_value(p).unwrap())
        .collect();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].inline_bytes().unwrap(), b"short note");
    assert_eq!(files[1].open(&cipher).unwrap(), b"the Q4 plan");
}

#[test]
fn a_request_with_the_owners_files_is_held_for_release() {
    use rdv_agent_core::gate::{code_terms, open_gate};
    use rdv_agent_core::owner::Secret;
    use rdv_agent_core::task::OwnFile;
    let mut net = contacts();
    let omer = net.nodes[OMER].id();
    let mut rng = rand_core::OsRng;
    let (cipher, meta) = file::seal_blob(b"the Q4 plan", &mut rng).unwrap();
    let reference =
        file::reference_part(meta, "https://files.example.com/q4", Some("q4.pdf"), None).unwrap();
    let request = |net: &mut Net| {
        net.cmd(
            JOHN,
            Command::Task(TaskCommand::RequestWithFiles {
                to: omer.clone(),
                capability: EXT_REQUEST.into(),
                texts: vec!["Please check the plan".into()],
                input: None,
                expires_in: None,
                files: vec![OwnFile {
                    part: reference.clone(),
                    source: "/home/john/q4.pdf".into(),
                }],
            }),
        )
        .unwrap()
    };
    // Held: nothing left, the gate waits for John.
    let r = request(&mut net);
    assert_eq!(r["sent"], false);
    assert_eq!(r["waiting_for_you"], "release");
    let id = r["task_id"].as_str().unwrap().to_string();
    assert!(exec_task(&net, &id).is_none());
    assert!(
        !sent(&net, JOHN, OMER)
            .iter()
            .any(|p| p["type"] == "a2a/message")
    );
    let key = task_key(Role::Requester, &omer, &id);
    let t = net.nodes[JOHN].agent.state.tasks.tasks[&key].clone();
    let (step, digest) = open_gate(&t).unwrap();
    // A wrong code releases nothing.
    let (secret, record) =
        rdv_agent_core::phrase::Phrase::generate(&code_terms(step, &digest), net.now, &mut rng)
            .unwrap();
    let r = net
        .cmd(
            JOHN,
            Command::Task(TaskCommand::SetCode {
                task: tref(&id),
                step,
                digest,
                record,
            }),
        )
        .unwrap();
    assert_eq!(r["code_set"], true);
    let r = net
        .cmd(
            JOHN,
            Command::Task(TaskCommand::Release {
                task: tref(&id),
                code: Secret::new("amber-otter-violet-000"),
            }),
        )
        .unwrap();
    assert_eq!(r["result"]["verdict"], "wrong_code");
    assert!(exec_task(&net, &id).is_none());
    // John's code releases it: Omer gets the request with the file.
    let r = net
        .cmd(
            JOHN,
            Command::Task(TaskCommand::Release {
                task: tref(&id),
                code: Secret::new(secret.expose()),
            }),
        )
        .unwrap();
    assert_eq!(r["result"]["verdict"], "approved");
    let t = exec_task(&net, &id).expect("the request arrived");
    assert_eq!(t.files.len(), 1);
    assert_eq!(t.files[0].open(&cipher).unwrap(), b"the Q4 plan");
    let msg = sent(&net, JOHN, OMER)
        .into_iter()
        .find(|p| p["type"] == "a2a/message")
        .unwrap();
    assert!(!msg.to_string().contains("/home/john"));
    // A held request that is withdrawn never leaves.
    let r = request(&mut net);
    let id2 = r["task_id"].as_str().unwrap().to_string();
    net.cmd(
        JOHN,
        Command::Task(TaskCommand::Cancel {
            task: tref(&id2),
            reason: None,
        }),
    )
    .unwrap();
    assert!(exec_task(&net, &id2).is_none());
    assert!(
        !sent(&net, JOHN, OMER)
            .iter()
            .any(|p| p["message"]["taskId"] == id2)
    );
}

#[test]
fn transfer_messages_count_towards_the_grant_wide_max_frequency() {
    let mut net = contacts_at("3/day");
    let john = net.nodes[JOHN].id();
    let ids: Vec<String> = (0..5).map(|_| uuid()).collect();
    for id in &ids {
        deliver(&mut net, &propose(id));
    }
    // Three are answered with abort; the fourth is over the grant and
    // revokes the contact: nothing more is answered.
    let answered = ids
        .iter()
        .filter(|id| !transfers_sent(&net, id).is_empty())
        .count();
    assert_eq!(answered, 3);
    assert!(net.nodes[OMER].agent.state.contact(&john).is_none());
}
