//! The human's gates on a task (§5.5): the start gate before the executor
//! acts, the release gate before anything it drafted leaves. Each approval
//! is bound to a digest of exactly what the human was shown; a confirm code
//! is a salted scrypt hash bound to that digest (`phrase.rs`), single use,
//! and stops working when the task changes or ends. Standing policies are
//! per contact and per capability and never waive a free-form start.

use rdv_proto::consts::{TASK_RELEASE_GATE_DIGEST_PREFIX, TASK_START_GATE_DIGEST_PREFIX};
use rdv_proto::time::{Instant, format_time};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::phrase::{PhraseRecord, PhraseVerdict};
use crate::task::{ApprovalClass, Draft, OpenGate, Task};

/// Which gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateStep {
    Start,
    Release,
}

impl GateStep {
    pub fn as_str(self) -> &'static str {
        match self {
            GateStep::Start => "start",
            GateStep::Release => "release",
        }
    }
}

fn digest(prefix: &[u8], v: &Value) -> String {
    // Every input is canonical JSON the core built or validated; a value
    // that has no canonical form digests as its serde text, which can
    // never equal a canonical one of other content.
    let body =
        rdv_proto::canon::to_vec(v).unwrap_or_else(|_| serde_json::to_vec(v).unwrap_or_default());
    let mut h = Sha256::new();
    h.update(prefix);
    h.update(&body);
    hex::encode(h.finalize())
}

/// §5.5 start gate: the peer, contextId, taskId, the capability, the
/// task's created, canon(input), the SHA-256 of each text part, each
/// file's sha256 (§7.7), and the step.
pub fn start_digest(t: &Task) -> String {
    let texts: Vec<String> = t
        .texts
        .iter()
        .map(|s| hex::encode(Sha256::digest(s.as_bytes())))
        .collect();
    let files: Vec<String> = t.files.iter().map(crate::file::FilePart::sha256).collect();
    digest(
        TASK_START_GATE_DIGEST_PREFIX,
        &json!({
            "step": "start",
            "peer": t.peer,
            "contextId": t.context_id,
            "taskId": t.task_id,
            "capability": t.capability,
            "created": format_time(t.created),
            "input": t.input,
            "text_sha256": texts,
            "files_sha256": files,
        }),
    )
}

/// §5.5 release gate: the peer, the task, and canon(artifact) (or the
/// status message that would leave).
pub fn release_digest(t: &Task, draft: &Draft) -> String {
    digest(
        TASK_RELEASE_GATE_DIGEST_PREFIX,
        &json!({
            "step": "release",
            "peer": t.peer,
            "contextId": t.context_id,
            "taskId": t.task_id,
            "content": draft.content(),
        }),
    )
}

/// The gate open on a task now and its digest, if any.
pub fn open_gate(t: &Task) -> Option<(GateStep, String)> {
    if !t.is_open() {
        return None;
    }
    match &t.gate {
        Some(OpenGate::Start { .. }) => Some((GateStep::Start, start_digest(t))),
        Some(OpenGate::Release { draft, .. }) => {
            Some((GateStep::Release, release_digest(t, draft)))
        }
        None => None,
    }
}

/// What a code record is bound to: the gate and its digest.
pub fn code_terms(step: GateStep, digest: &str) -> Value {
    json!({"task_gate": step.as_str(), "digest": digest})
}

/// What a typed code does (data, not an error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum CodeVerdict {
    Approved,
    WrongCode {
        misses_left: u32,
    },
    /// The code was for other content (the task changed while the human
    /// read), used, expired or replaced: ask again (`rdv task list`).
    NewCodeNeeded {
        reason: String,
    },
    /// No code was issued for this gate (`rdv task list` issues one).
    NoCode,
    /// This gate is not open on the task (another step, or it ended).
    NotOpen,
}

/// Checks `typed` against the code of the gate `step` on `t`, bound to the
/// task as it is now. The record's new state stays on the task either way.
pub fn check_code(t: &mut Task, step: GateStep, typed: &str, now: Instant) -> CodeVerdict {
    let Some((open, digest)) = open_gate(t) else {
        return CodeVerdict::NotOpen;
    };
    if open != step {
        return CodeVerdict::NotOpen;
    }
    let terms = code_terms(step, &digest);
    let rec = match &mut t.gate {
        Some(OpenGate::Start { code }) | Some(OpenGate::Release { code, .. }) => code,
        None => return CodeVerdict::NotOpen,
    };
    let Some(r) = rec.as_mut() else {
        return CodeVerdict::NoCode;
    };
    match r.check(typed, &terms, now) {
        PhraseVerdict::Approved => CodeVerdict::Approved,
        PhraseVerdict::WrongPhrase { misses_left } => CodeVerdict::WrongCode { misses_left },
        PhraseVerdict::TermsChanged => CodeVerdict::NewCodeNeeded {
            reason: "the task changed since the code was shown".into(),
        },
        PhraseVerdict::Replaced => CodeVerdict::NewCodeNeeded {
            reason: "too many wrong tries: the code was replaced".into(),
        },
        PhraseVerdict::AlreadyUsed => CodeVerdict::NewCodeNeeded {
            reason: "the code was already used".into(),
        },
        PhraseVerdict::Expired => CodeVerdict::NewCodeNeeded {
            reason: "the code expired".into(),
        },
    }
}

/// Stores a code record for the gate `step` whose digest is `digest`, if
/// that is the gate open now (the front-end computed the digest from what
/// it showed; a task that changed since gets no code).
pub fn set_code(t: &mut Task, step: GateStep, digest: &str, record: PhraseRecord) -> bool {
    let Some((open, now_digest)) = open_gate(t) else {
        return false;
    };
    if open != step
        || now_digest != digest
        || record.terms_digest()
            != crate::phrase::terms_digest(&code_terms(step, digest)).unwrap_or_default()
    {
        return false;
    }
    match &mut t.gate {
        Some(OpenGate::Start { code }) | Some(OpenGate::Release { code, .. }) => {
            *code = Some(record);
            true
        }
        None => false,
    }
}

/// A standing policy the owner set for one contact and one capability
/// (§5.5): never implied by a grant, never set by a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandingPolicy {
    pub auto_start: bool,
    pub auto_release: bool,
}

impl StandingPolicy {
    /// Whether the policy passes the gate `step` for a task of `class`:
    /// for free-form it may cover release, never start (§5.5, §7.6.3).
    pub fn passes(&self, step: GateStep, class: ApprovalClass) -> bool {
        match step {
            GateStep::Start => self.auto_start && class == ApprovalClass::Confirm,
            GateStep::Release => self.auto_release,
        }
    }
}
