//! The tasks/v1 engine (§7.6) as pure parts: the capability registry
//! (§7.6.3), the strict parser of task payloads (§7.1, §7.5, §7.6.1), the
//! request/v1 bounds (§7.6.4), the task record and its states (§7.6.2),
//! and the builders of what goes out. No I/O, no clock: the agent's glue
//! (`task_flow`) applies them to its state.

use std::collections::BTreeMap;

use rdv_proto::AgentId;
use rdv_proto::consts::{
    A2A_TASKS_REASON_KEY, EXT_FILES, EXT_REQUEST, EXT_TASKS, REQUEST_DATA_MAX_DEPTH,
    REQUEST_DATA_MAX_JSON_CHARS, REQUEST_DATA_MAX_KEY_CHARS, REQUEST_DATA_MAX_STRING_CHARS,
    REQUEST_DATA_MAX_VALUES, REQUEST_DATA_MIN_KEY_CHARS, TASK_AWAITING_KEY,
};
use rdv_proto::time::Instant;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::a2a;
use crate::phrase::PhraseRecord;

/// The example capability of the design's worked example (A.9): a
/// document review. Not normative; registered so two agents can run it.
pub const EXT_REVIEW: &str = "https://rendezvous.nesher.co/ext/review/v1";

/// The longest cancel reason, name or description we keep (display only).
pub const TASK_NOTE_MAX_CHARS: usize = 200;
pub const TASK_DESCRIPTION_MAX_CHARS: usize = 2_000;

// ---- approval classes and the registry (§7.6.3) ----------------------------

/// A capability's approval class (§7.6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalClass {
    /// Only shown to the human; nothing is done or returned beyond a status.
    Notify,
    /// The grant alone is the approval.
    Auto,
    /// Each task needs approval to start, each artifact to be released.
    Confirm,
    /// Gated like confirm; no standing policy waives the start gate.
    FreeForm,
}

impl ApprovalClass {
    /// How strict a class is: the executor applies the stricter of the
    /// capability's and its owner's (§7.6.3). notify is strictest: nothing
    /// is done at all.
    pub fn rank(self) -> u8 {
        match self {
            ApprovalClass::Auto => 0,
            ApprovalClass::Confirm => 1,
            ApprovalClass::FreeForm => 2,
            ApprovalClass::Notify => 3,
        }
    }

    pub fn stricter(self, other: ApprovalClass) -> ApprovalClass {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalClass::Notify => "notify",
            ApprovalClass::Auto => "auto",
            ApprovalClass::Confirm => "confirm",
            ApprovalClass::FreeForm => "free-form",
        }
    }

    pub fn parse(s: &str) -> Option<ApprovalClass> {
        match s {
            "notify" => Some(ApprovalClass::Notify),
            "auto" => Some(ApprovalClass::Auto),
            "confirm" => Some(ApprovalClass::Confirm),
            "free-form" => Some(ApprovalClass::FreeForm),
            _ => None,
        }
    }

    /// Whether a task of this class waits for its human to start.
    pub fn start_gated(self) -> bool {
        matches!(self, ApprovalClass::Confirm | ApprovalClass::FreeForm)
    }
}

/// How a capability's input and artifact data are shaped (§7.6.3 item 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// request/v1 (§7.6.4): `{"data": {…}}` within the bounds, results of
    /// shape `request/data`.
    Request,
    /// review/v1 (A.9): input `{focus: string[], due?}`, result
    /// `{rdv: "review/result", verdict, comments}`.
    Review,
}

/// One capability this agent implements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    pub uri: String,
    pub class: ApprovalClass,
    pub shape: Shape,
}

/// Why a capability cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// §7.6.4: request/v1 is free-form, fixed.
    #[error("request/v1 is class free-form, fixed (SPEC §7.6.4)")]
    RequestNotFreeForm,
}

/// The capabilities this agent implements, and the owner's own class for
/// each (never looser than the capability's, §7.6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    caps: BTreeMap<String, Capability>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::builtin()
    }
}

impl Registry {
    /// request/v1 (§7.6.4) and the review example (A.9), both free-form.
    pub fn builtin() -> Registry {
        let mut r = Registry {
            caps: BTreeMap::new(),
        };
        for (uri, shape) in [(EXT_REQUEST, Shape::Request), (EXT_REVIEW, Shape::Review)] {
            r.caps.insert(
                uri.to_string(),
                Capability {
                    uri: uri.to_string(),
                    class: ApprovalClass::FreeForm,
                    shape,
                },
            );
        }
        r
    }

    /// Adds or replaces a capability; request/v1 only as free-form.
    pub fn register(&mut self, c: Capability) -> Result<(), RegistryError> {
        if c.uri == EXT_REQUEST && c.class != ApprovalClass::FreeForm {
            return Err(RegistryError::RequestNotFreeForm);
        }
        self.caps.insert(c.uri.clone(), c);
        Ok(())
    }

    pub fn get(&self, uri: &str) -> Option<&Capability> {
        self.caps.get(uri)
    }

    pub fn uris(&self) -> impl Iterator<Item = &str> {
        self.caps.keys().map(String::as_str)
    }

    /// The class an executor applies: the stricter of the capability's and
    /// the owner's (a peer can never lower it).
    pub fn effective_class(
        &self,
        uri: &str,
        owner: Option<ApprovalClass>,
    ) -> Option<ApprovalClass> {
        let c = self.get(uri)?;
        Some(match owner {
            Some(o) => c.class.stricter(o),
            None => c.class,
        })
    }
}

// ---- states and reasons (§7.6.2) -------------------------------------------

/// A2A v0.3 task states used by tasks/v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Rejected,
    Canceled,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
            TaskState::Canceled => "canceled",
        }
    }

    /// Known states only: an unknown one makes the update malformed (§7.5).
    pub fn parse(s: &str) -> Option<TaskState> {
        Some(match s {
            "submitted" => TaskState::Submitted,
            "working" => TaskState::Working,
            "input-required" => TaskState::InputRequired,
            "completed" => TaskState::Completed,
            "failed" => TaskState::Failed,
            "rejected" => TaskState::Rejected,
            "canceled" => TaskState::Canceled,
            _ => return None,
        })
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Rejected | TaskState::Canceled
        )
    }

    /// §7.6.2: the requester follows the executor forward only: nothing
    /// returns to submitted, nothing leaves a terminal state;
    /// working ⇄ input-required.
    pub fn may_follow(self, next: TaskState) -> bool {
        if self.is_terminal() || next == TaskState::Submitted {
            return false;
        }
        self != next || next == TaskState::Working
    }
}

/// A machine reason of a refusal or an end (§7.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Scope,
    Rate,
    Input,
    Busy,
    Human,
    Expired,
    Unsupported,
    Error,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Scope => "scope",
            Reason::Rate => "rate",
            Reason::Input => "input",
            Reason::Busy => "busy",
            Reason::Human => "human",
            Reason::Expired => "expired",
            Reason::Unsupported => "unsupported",
            Reason::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Some(match s {
            "scope" => Reason::Scope,
            "rate" => Reason::Rate,
            "input" => Reason::Input,
            "busy" => Reason::Busy,
            "human" => Reason::Human,
            "expired" => Reason::Expired,
            "unsupported" => Reason::Unsupported,
            "error" => Reason::Error,
            _ => return None,
        })
    }
}

// ---- the task record --------------------------------------------------------

/// Which side of a task this agent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The peer asked; we do it.
    Executor,
    /// We asked the peer.
    Requester,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Executor => "in",
            Role::Requester => "out",
        }
    }
}

/// The record key of a task: role, peer and taskId (two peers may pick
/// the same taskId).
pub fn task_key(role: Role, peer: &AgentId, task_id: &str) -> String {
    format!("{}:{}:{}", role.as_str(), peer, task_id)
}

/// What waits for the executor's human to be released (§5.5 release gate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Draft {
    /// An artifact (the `artifact` object as it will be sent); `complete`
    /// ends the task completed once it is sent. `sources` name the local
    /// file each of the owner's files was read from (shown at the gate,
    /// never sent).
    Artifact {
        artifact: Value,
        complete: bool,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sources: Vec<FileSource>,
    },
    /// A request of ours that carries the owner's files (§5.5, §7.7), held
    /// for the owner's release: the a2a/message as it will be sent.
    Request {
        message: Value,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sources: Vec<FileSource>,
    },
    /// A status with a message: a question (input-required) or a closing
    /// message (failed, completed).
    Status {
        state: TaskState,
        message: Value,
        reason: Option<Reason>,
    },
}

impl Draft {
    /// What the release digest covers: exactly what will leave.
    pub fn content(&self) -> Value {
        match self {
            Draft::Artifact {
                artifact, complete, ..
            } => {
                json!({"artifact": artifact, "complete": complete})
            }
            Draft::Request { message, .. } => json!({"request": message}),
            Draft::Status {
                state,
                message,
                reason,
            } => {
                json!({"state": state.as_str(), "message": message, "reason": reason.map(Reason::as_str)})
            }
        }
    }
}

/// Where one of the owner's files in a draft was read from (§7.7: the
/// release gate shows it with the file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSource {
    pub sha256: String,
    pub source: String,
}

/// A file of the owner's to attach (§7.7): its part (inline, or a
/// reference to the encrypted copy the owner uploaded) and the local path
/// it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnFile {
    pub part: crate::file::FilePart,
    pub source: String,
}

/// A gate open on a task, waiting for the human (§5.5). The code record is
/// a salted scrypt hash bound to the gate's digest, never the code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "gate", deny_unknown_fields)]
pub enum OpenGate {
    Start {
        code: Option<PhraseRecord>,
    },
    Release {
        draft: Draft,
        code: Option<PhraseRecord>,
    },
}

/// An artifact as kept: its validated parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptArtifact {
    pub artifact_id: String,
    pub name: Option<String>,
    pub parts: Vec<Value>,
    pub last_chunk: bool,
}

/// One task, on either side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub role: Role,
    pub peer: AgentId,
    pub task_id: String,
    pub context_id: String,
    pub capability: String,
    /// The class applied (executor), or the one we expect (requester).
    pub class: ApprovalClass,
    pub state: TaskState,
    pub reason: Option<Reason>,
    /// A cancel that overtook its request (§7.3): refused when it lands.
    pub tombstone: bool,
    /// Our owner's tier for the peer when it arrived (the weakest waiting
    /// task is rejected first, §7.4).
    pub tier: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created: Instant,
    #[serde(with = "time::serde::rfc3339")]
    pub expires: Instant,
    #[serde(with = "time::serde::rfc3339")]
    pub updated: Instant,
    /// The validated input (the latest task/input on the executor).
    pub input: Option<Value>,
    /// Text parts of the request and of each task/input (peer text on the
    /// executor side).
    pub texts: Vec<String>,
    /// messageIds seen for this task (§7.4: 64).
    pub seen: Vec<String>,
    /// task/input messages taken or sent (§7.6.2: 8).
    pub inputs: u32,
    /// Status updates processed (§7.4: 64).
    pub status_updates: u32,
    /// Artifacts received (requester) or released (executor), §7.4: 8.
    pub artifacts: Vec<KeptArtifact>,
    /// Artifact chunks processed (§7.4: 64).
    pub chunks: u32,
    /// Unsupported and finished-task replies sent (§7.4: 8 each).
    pub unsupported_replies: u32,
    pub finished_replies: u32,
    pub gate: Option<OpenGate>,
    /// How the start gate passed: class, code, policy or auto-approve.
    pub started_by: Option<String>,
    /// The latest status message from the executor (requester side): the
    /// question or the reason, peer text.
    pub note: Option<Value>,
    /// The files of the request and its inputs (§7.7), validated and kept;
    /// on the requester side, the files we attached. The start gate binds
    /// each one's sha256 (§5.5).
    #[serde(default)]
    pub files: Vec<crate::file::FilePart>,
    /// The requester sent rdv/cancel.
    pub cancel_sent: bool,
}

impl Task {
    pub fn key(&self) -> String {
        task_key(self.role, &self.peer, &self.task_id)
    }

    /// Open: not terminal and not a tombstone (§7.4 counts these).
    pub fn is_open(&self) -> bool {
        !self.tombstone && !self.state.is_terminal()
    }

    /// Waiting for the executor's human (§7.4 bound).
    pub fn waits_for_human(&self) -> bool {
        self.role == Role::Executor && self.is_open() && self.gate.is_some()
    }
}

// ---- bounds of request/v1 data (§7.6.4) ------------------------------------

/// Why data is outside the §7.6.4 bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundsError {
    #[error("data must be a JSON object")]
    NotObject,
    #[error("nested deeper than {REQUEST_DATA_MAX_DEPTH} levels")]
    TooDeep,
    #[error("more than {REQUEST_DATA_MAX_VALUES} values")]
    TooManyValues,
    #[error("a string over {REQUEST_DATA_MAX_STRING_CHARS} characters")]
    StringTooLong,
    #[error("a key outside {REQUEST_DATA_MIN_KEY_CHARS}–{REQUEST_DATA_MAX_KEY_CHARS} characters")]
    BadKey,
    #[error("a number that is not finite")]
    NotFinite,
    #[error("over {REQUEST_DATA_MAX_JSON_CHARS} characters as JSON")]
    TooLarge,
}

/// §7.6.4: a data object within the bounds: at most 4 levels of nesting
/// (the object itself is level 1), 256 values in all, strings of at most
/// 2,000 characters, keys of 1–64 characters, finite numbers, at most
/// 8,192 characters as JSON. Checked before any state is kept.
pub fn check_data_bounds(data: &Value) -> Result<(), BoundsError> {
    if !data.is_object() {
        return Err(BoundsError::NotObject);
    }
    let mut values = 0usize;
    walk(data, 1, &mut values)?;
    let text = serde_json::to_string(data).map_err(|_| BoundsError::TooLarge)?;
    if text.chars().count() > REQUEST_DATA_MAX_JSON_CHARS {
        return Err(BoundsError::TooLarge);
    }
    Ok(())
}

fn walk(v: &Value, depth: usize, values: &mut usize) -> Result<(), BoundsError> {
    match v {
        Value::Object(m) => {
            if depth > REQUEST_DATA_MAX_DEPTH {
                return Err(BoundsError::TooDeep);
            }
            for (k, x) in m {
                let n = k.chars().count();
                if !(REQUEST_DATA_MIN_KEY_CHARS..=REQUEST_DATA_MAX_KEY_CHARS).contains(&n) {
                    return Err(BoundsError::BadKey);
                }
                count(values)?;
                walk(x, depth + 1, values)?;
            }
        }
        Value::Array(a) => {
            if depth > REQUEST_DATA_MAX_DEPTH {
                return Err(BoundsError::TooDeep);
            }
            for x in a {
                count(values)?;
                walk(x, depth + 1, values)?;
            }
        }
        Value::String(s) => {
            if s.chars().count() > REQUEST_DATA_MAX_STRING_CHARS {
                return Err(BoundsError::StringTooLong);
            }
        }
        Value::Number(n) => {
            if !n.as_f64().is_some_and(f64::is_finite) {
                return Err(BoundsError::NotFinite);
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
    Ok(())
}

fn count(values: &mut usize) -> Result<(), BoundsError> {
    *values += 1;
    if *values > REQUEST_DATA_MAX_VALUES {
        Err(BoundsError::TooManyValues)
    } else {
        Ok(())
    }
}

/// Why an input or an artifact's data part does not fit its capability.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("{0}")]
    Bounds(#[from] BoundsError),
    #[error("{0}")]
    Shape(String),
}

fn shape(s: &str) -> ShapeError {
    ShapeError::Shape(s.to_string())
}

fn only_keys(m: &Map<String, Value>, allowed: &[&str]) -> bool {
    m.keys().all(|k| allowed.contains(&k.as_str()))
}

/// Validates a task's input against its capability's shape (§7.6.3,
/// §7.6.4); `None` is no input.
pub fn check_input(s: Shape, input: Option<&Value>) -> Result<(), ShapeError> {
    let Some(input) = input else {
        return match s {
            Shape::Request => Ok(()),
            Shape::Review => Err(shape("review/v1 needs input {focus}")),
        };
    };
    let m = input
        .as_object()
        .ok_or_else(|| shape("input must be an object"))?;
    match s {
        Shape::Request => {
            if !only_keys(m, &["data"]) {
                return Err(shape("request/v1 input is {\"data\": {…}} only"));
            }
            match m.get("data") {
                Some(d) => check_data_bounds(d).map_err(ShapeError::from),
                None => Err(shape("request/v1 input is {\"data\": {…}}")),
            }
        }
        Shape::Review => {
            if !only_keys(m, &["focus", "due"]) {
                return Err(shape("review/v1 input is {focus, due?}"));
            }
            let focus = m
                .get("focus")
                .and_then(Value::as_array)
                .ok_or_else(|| shape("focus must be a list of strings"))?;
            if focus.len() > 16
                || !focus.iter().all(|f| {
                    f.as_str()
                        .is_some_and(|s| !s.is_empty() && s.chars().count() <= 64)
                })
            {
                return Err(shape("focus: 1–64-character strings, at most 16"));
            }
            if let Some(d) = m.get("due") {
                let ok = d
                    .as_str()
                    .is_some_and(|s| a2a::parse_offset_time(s).is_some());
                if !ok {
                    return Err(shape("due must be an RFC 3339 time"));
                }
            }
            Ok(())
        }
    }
}

/// Validates one data part of an artifact or a status message (§7.6.3:
/// `data.rdv` names the shape; any other is refused, §7.5).
pub fn check_result_data(s: Shape, data: &Value) -> Result<(), ShapeError> {
    let m = data
        .as_object()
        .ok_or_else(|| shape("data must be an object"))?;
    match (s, m.get("rdv").and_then(Value::as_str)) {
        (Shape::Request, Some("request/data")) => {
            if !only_keys(m, &["rdv", "data"]) {
                return Err(shape("request/data is {rdv, data}"));
            }
            match m.get("data") {
                Some(d) => check_data_bounds(d).map_err(ShapeError::from),
                None => Err(shape("request/data needs data")),
            }
        }
        (Shape::Review, Some("review/result")) => {
            if !only_keys(m, &["rdv", "verdict", "comments"]) {
                return Err(shape("review/result is {rdv, verdict, comments}"));
            }
            let verdict_ok = matches!(
                m.get("verdict").and_then(Value::as_str),
                Some("ok" | "changes-requested")
            );
            let comments_ok = m
                .get("comments")
                .and_then(Value::as_u64)
                .is_some_and(|n| n <= 10_000);
            if verdict_ok && comments_ok {
                Ok(())
            } else {
                Err(shape(
                    "review/result: verdict ok|changes-requested, comments a count",
                ))
            }
        }
        _ => Err(shape("a data shape this capability does not define")),
    }
}

// ---- reading what a peer sent (§7.1, §7.5, §7.6.1) --------------------------

/// A validated part of a task message: text, data, or a file validated
/// by the rules of §7.7 (`file::check_part`) in its kept form.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Data(Value),
    File(Box<crate::file::FilePart>),
}

/// A task payload, validated strictly.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        message_id: String,
        task_id: String,
        context_id: String,
        capability: String,
        input: Option<Value>,
        /// The requested expiry, unclamped.
        expires: Option<Instant>,
        texts: Vec<String>,
        /// File parts, each validated (§7.7); nothing is fetched here.
        files: Vec<crate::file::FilePart>,
    },
    Input {
        message_id: String,
        task_id: String,
        context_id: String,
        input: Option<Value>,
        texts: Vec<String>,
        files: Vec<crate::file::FilePart>,
    },
    Cancel {
        message_id: String,
        task_id: String,
        context_id: String,
        reason: Option<String>,
        /// The message's extensions: which capability a tombstone is under.
        extensions: Vec<String>,
    },
    Status {
        task_id: String,
        context_id: String,
        state: TaskState,
        /// The status message's parts (text and data only).
        message: Vec<Part>,
        reason: Option<Reason>,
        /// The §7.5 rule 5 unsupported reply: the refused messageId and verb.
        unsupported: Option<(String, Option<String>)>,
        awaiting_human: bool,
    },
    Artifact {
        task_id: String,
        context_id: String,
        artifact_id: String,
        name: Option<String>,
        parts: Vec<Part>,
        append: bool,
        last_chunk: bool,
    },
}

impl Incoming {
    pub fn task_id(&self) -> &str {
        match self {
            Incoming::Request { task_id, .. }
            | Incoming::Input { task_id, .. }
            | Incoming::Cancel { task_id, .. }
            | Incoming::Status { task_id, .. }
            | Incoming::Artifact { task_id, .. } => task_id,
        }
    }

    pub fn context_id(&self) -> &str {
        match self {
            Incoming::Request { context_id, .. }
            | Incoming::Input { context_id, .. }
            | Incoming::Cancel { context_id, .. }
            | Incoming::Status { context_id, .. }
            | Incoming::Artifact { context_id, .. } => context_id,
        }
    }
}

/// What reading a payload gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    Task(Incoming),
    /// A well-formed message the receiver does not support (§7.5 rule 4,
    /// critical): answered with the unsupported reply.
    Unsupported(a2a::Unsupported),
    /// A task/request or task/input with a file part that fails §7.7:
    /// the whole payload is refused before the engine sees it.
    BadFile {
        task_id: String,
        context_id: String,
        verb: String,
        why: crate::file::FileError,
    },
    /// Not a tasks/v1 payload (a meeting verb, another type): not ours.
    NotTask,
    /// Dropped silently (§7.5 malformed).
    Malformed(String),
}

/// The verbs of §7.6.1 and their data keys (besides `rdv`).
pub fn verb_keys(verb: &str) -> Option<&'static [&'static str]> {
    match verb {
        "task/request" => Some(&["capability", "input", "expires"]),
        "task/input" => Some(&["input"]),
        "rdv/cancel" => Some(&["reason"]),
        _ => None,
    }
}

/// Text, data and file parts, each file validated by §7.7 before the
/// engine sees any of it: one bad file refuses the whole payload, and
/// file parts need the files URI in `extensions`.
fn split_parts(
    parts: &[a2a::Part],
    extensions: &[String],
) -> Result<(Vec<Part>, Vec<String>), crate::file::FileError> {
    let mut out = Vec::with_capacity(parts.len());
    let mut texts = Vec::new();
    let mut files = 0usize;
    for p in parts {
        match p {
            a2a::Part::Text { text, .. } => {
                texts.push(text.clone());
                out.push(Part::Text(text.clone()));
            }
            a2a::Part::Data { data, .. } => out.push(Part::Data(Value::Object(data.clone()))),
            a2a::Part::File { file, metadata } => {
                files += 1;
                out.push(Part::File(Box::new(crate::file::check_part(
                    file,
                    metadata.as_ref(),
                )?)));
            }
        }
    }
    if files > 0 && !extensions.iter().any(|e| e == EXT_FILES) {
        return Err(crate::file::FileError::NotListed);
    }
    Ok((out, texts))
}

/// The files among validated parts.
pub fn files_of(parts: &[Part]) -> Vec<crate::file::FilePart> {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::File(f) => Some((**f).clone()),
            _ => None,
        })
        .collect()
}

/// Reads one opened `a2a/*` payload as tasks/v1 (strict: `a2a::classify`,
/// then the verb's data keys and the capability URI).
pub fn parse_payload(payload: &Value) -> Parsed {
    from_a2a(a2a::classify(payload))
}

/// The tasks/v1 reading of an [`a2a::Inbound`].
pub fn from_a2a(i: a2a::Inbound) -> Parsed {
    match i {
        a2a::Inbound::Malformed(s) => Parsed::Malformed(s),
        a2a::Inbound::Unsupported(u) => Parsed::Unsupported(u),
        a2a::Inbound::Message {
            message,
            task_id,
            context_id,
            verb,
            data,
        } => from_message(message, task_id, context_id, verb, data),
        a2a::Inbound::TaskUpdate(u) => from_status(u),
        a2a::Inbound::ArtifactUpdate(a) => from_artifact(a),
    }
}

fn from_message(
    message: a2a::Message,
    task_id: String,
    context_id: String,
    verb: String,
    data: Map<String, Value>,
) -> Parsed {
    if !verb.starts_with("task/") && verb != "rdv/cancel" {
        return Parsed::NotTask;
    }
    let unsupported = |why: String| {
        Parsed::Unsupported(a2a::Unsupported {
            task_id: task_id.clone(),
            context_id: context_id.clone(),
            message_id: message.message_id.clone(),
            verb: Some(verb.clone()),
            why,
        })
    };
    let Some(keys) = verb_keys(&verb) else {
        return unsupported(format!("unknown verb {verb:?}"));
    };
    if let Some(k) = a2a::check_data_keys(&data, keys) {
        return unsupported(format!(
            "unknown key {:?} in {verb}",
            crate::peer_text::bounded(&k, 64)
        ));
    }
    let (parts, texts) = match split_parts(&message.parts, &message.extensions) {
        Ok(x) => x,
        Err(why) if verb != "rdv/cancel" => {
            return Parsed::BadFile {
                task_id,
                context_id,
                verb,
                why,
            };
        }
        Err(_) => return Parsed::Malformed("a cancel with a bad file part".into()),
    };
    let files = files_of(&parts);
    let input = data.get("input").cloned();
    if input.as_ref().is_some_and(|i| !i.is_object()) {
        return Parsed::Malformed("input must be an object".into());
    }
    let message_id = message.message_id;
    match verb.as_str() {
        "task/request" => {
            let Some(capability) = data.get("capability").and_then(Value::as_str).filter(|c| {
                c.starts_with("https://")
                    && c.len() <= rdv_proto::consts::INVOKE_MAX_URI_LEN
                    && !c.chars().any(|ch| ch.is_whitespace() || ch.is_control())
            }) else {
                return Parsed::Malformed(
                    "capability must be an https URI of at most 200 characters".into(),
                );
            };
            let expires = match data.get("expires") {
                None => None,
                Some(e) => match e.as_str().and_then(a2a::parse_offset_time) {
                    Some(t) => Some(t),
                    None => return Parsed::Malformed("expires must be an RFC 3339 time".into()),
                },
            };
            Parsed::Task(Incoming::Request {
                message_id,
                task_id,
                context_id,
                capability: capability.to_string(),
                input,
                expires,
                texts,
                files,
            })
        }
        "task/input" => Parsed::Task(Incoming::Input {
            message_id,
            task_id,
            context_id,
            input,
            texts,
            files,
        }),
        _ => {
            let reason = match data.get("reason") {
                None => None,
                Some(r) => match r.as_str() {
                    Some(s) if s.chars().count() <= TASK_NOTE_MAX_CHARS => Some(s.to_string()),
                    _ => {
                        return Parsed::Malformed(
                            "a cancel reason is a string of at most 200 characters".into(),
                        );
                    }
                },
            };
            Parsed::Task(Incoming::Cancel {
                message_id,
                task_id,
                context_id,
                reason,
                extensions: message.extensions,
            })
        }
    }
}

/// The seven states of §7.6.2; a2a's auth-required and unknown are not
/// tasks/v1 states (§7.5: no new enum values), so an update naming them
/// is malformed here.
fn state_of(s: a2a::TaskState) -> Option<TaskState> {
    TaskState::parse(s.as_str())
}

/// Our state as a2a writes it.
pub fn a2a_state(s: TaskState) -> a2a::TaskState {
    a2a::TaskState::parse(s.as_str()).unwrap_or(a2a::TaskState::Unknown)
}

fn from_status(u: a2a::StatusUpdate) -> Parsed {
    let Some(state) = state_of(u.state) else {
        return Parsed::Malformed("a state tasks/v1 does not have".into());
    };
    // A status message carries text and data (§7.6.1); files come in
    // artifacts.
    let message = match &u.message {
        None => Vec::new(),
        Some(m) => match split_parts(&m.parts, &m.extensions) {
            Ok((p, _)) if !p.iter().any(|x| matches!(x, Part::File(_))) => p,
            Ok(_) => return Parsed::Malformed("a file part in a status message".into()),
            Err(why) => return Parsed::Malformed(why.to_string()),
        },
    };
    // Ignorable, peer-written: read only when well-shaped.
    let meta = u.metadata.as_ref();
    let reason = meta
        .and_then(|m| m.get(A2A_TASKS_REASON_KEY))
        .and_then(Value::as_str)
        .and_then(Reason::parse);
    let awaiting_human = meta
        .and_then(|m| m.get(TASK_AWAITING_KEY))
        .and_then(Value::as_str)
        == Some("human");
    let unsupported = u.unsupported();
    Parsed::Task(Incoming::Status {
        task_id: u.task_id,
        context_id: u.context_id,
        state,
        message,
        reason,
        unsupported,
        awaiting_human,
    })
}

fn from_artifact(a: a2a::ArtifactUpdate) -> Parsed {
    let parts = match split_parts(&a.artifact.parts, &a.artifact.extensions) {
        Ok((p, _)) => p,
        Err(why) => return Parsed::Malformed(why.to_string()),
    };
    if a.artifact
        .name
        .as_ref()
        .is_some_and(|n| n.chars().count() > TASK_NOTE_MAX_CHARS)
        || a.artifact
            .description
            .as_ref()
            .is_some_and(|d| d.chars().count() > TASK_DESCRIPTION_MAX_CHARS)
    {
        return Parsed::Malformed("an artifact name or description too long".into());
    }
    Parsed::Task(Incoming::Artifact {
        task_id: a.task_id,
        context_id: a.context_id,
        artifact_id: a.artifact.artifact_id,
        name: a.artifact.name,
        parts,
        append: a.append.unwrap_or(false),
        last_chunk: a.last_chunk.unwrap_or(false),
    })
}

// ---- what goes out -----------------------------------------------------------

fn a2a_parts(parts: &[Part]) -> Vec<a2a::Part> {
    parts
        .iter()
        .map(|p| match p {
            Part::Text(t) => a2a::Part::Text {
                text: t.clone(),
                metadata: None,
            },
            Part::Data(d) => a2a::Part::Data {
                data: d.as_object().cloned().unwrap_or_default(),
                metadata: None,
            },
            Part::File(f) => f.to_part(),
        })
        .collect()
}

/// Extensions of a message or artifact: the files URI added when it
/// carries files (§7.7 "In tasks").
fn with_files_ext(mut ext: Vec<String>, parts: &[Part]) -> Vec<String> {
    if parts.iter().any(|p| matches!(p, Part::File(_))) {
        ext.push(EXT_FILES.to_string());
    }
    ext
}

/// Parts as A2A writes them (what a task keeps of an artifact).
pub fn a2a_parts_json(parts: &[Part]) -> Vec<Value> {
    a2a_parts(parts).iter().map(a2a::Part::to_value).collect()
}

/// A requester's a2a/message with one verb (§7.6.1): the data part, then
/// the text parts, then the files; extensions list the tasks URI, the
/// capability, and the files URI when it carries files (§7.7).
pub fn message_payload(
    message_id: &str,
    task_id: &str,
    context_id: &str,
    capability: &str,
    data: Value,
    texts: &[String],
    files: &[crate::file::FilePart],
) -> Value {
    let mut parts = vec![Part::Data(data)];
    parts.extend(texts.iter().cloned().map(Part::Text));
    parts.extend(files.iter().cloned().map(|f| Part::File(Box::new(f))));
    let m = a2a::Message {
        message_id: message_id.to_string(),
        task_id: Some(task_id.to_string()),
        context_id: Some(context_id.to_string()),
        parts: a2a_parts(&parts),
        extensions: with_files_ext(vec![EXT_TASKS.to_string(), capability.to_string()], &parts),
        reference_task_ids: Vec::new(),
        metadata: None,
    };
    a2a::message_payload(&m)
}

/// An executor's status update (§7.6.1, §7.6.2): its reason and the
/// awaiting flag in metadata, and a status message when given.
pub fn status_payload(
    task_id: &str,
    context_id: &str,
    state: TaskState,
    reason: Option<Reason>,
    awaiting_human: bool,
    message: Option<Value>,
    now: Instant,
) -> Value {
    let mut meta = Map::new();
    if let Some(r) = reason {
        meta.insert(A2A_TASKS_REASON_KEY.into(), json!(r.as_str()));
    }
    if awaiting_human {
        meta.insert(TASK_AWAITING_KEY.into(), json!("human"));
    }
    let mut p = a2a::status_payload(
        task_id,
        context_id,
        a2a_state(state),
        now,
        (!meta.is_empty()).then_some(meta),
    );
    if let Some(m) = message
        && let Some(st) = p
            .pointer_mut("/update/status")
            .and_then(Value::as_object_mut)
    {
        st.insert("message".into(), m);
    }
    p
}

/// A status message: an agent message with text and data parts only.
pub fn status_message(message_id: &str, task_id: &str, context_id: &str, parts: &[Part]) -> Value {
    a2a::Message {
        message_id: message_id.to_string(),
        task_id: Some(task_id.to_string()),
        context_id: Some(context_id.to_string()),
        parts: a2a_parts(parts),
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
        metadata: None,
    }
    .to_value()
}

/// The artifact an executor's owner drafts (§7.6.1), as it will be sent.
pub fn artifact_object(
    artifact_id: &str,
    name: Option<&str>,
    capability: &str,
    parts: &[Part],
) -> Value {
    a2a::Artifact {
        artifact_id: artifact_id.to_string(),
        name: name.map(str::to_string),
        description: None,
        parts: a2a_parts(parts),
        extensions: with_files_ext(vec![capability.to_string()], parts),
        metadata: None,
    }
    .to_value()
}

/// An executor's a2a/artifact-update (§7.6.1), one whole chunk. `artifact`
/// is what [`artifact_object`] built (and the human released).
pub fn artifact_payload(task_id: &str, context_id: &str, artifact: &Value) -> Value {
    json!({
        "type": rdv_proto::consts::A2A_ARTIFACT_UPDATE_TYPE,
        "update": {
            "kind": "artifact-update", "taskId": task_id, "contextId": context_id,
            "artifact": artifact, "lastChunk": true,
        }
    })
}
