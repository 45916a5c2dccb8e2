//! The A2A v0.3 mapping (§7.1, §7.5): our own strict types for the three
//! payloads that carry A2A objects, the three-way verdict of §7.5 rule 4,
//! and the unsupported reply of rule 5. No `a2a` crate matches v0.3 with
//! strict parsing (the one on crates.io, `a2a-types` 0.2, has no Message
//! and tolerates unknown keys), so the types live here.
//!
//! # API note for the tasks engine (§7.6)
//!
//! - [`classify`] takes an opened payload (`type` `a2a/*`) and returns an
//!   [`Inbound`]: `Message` (one validated message with its single data
//!   part split out as `verb` and `data`), `TaskUpdate`, `ArtifactUpdate`,
//!   `Unsupported` (answer it with [`unsupported_reply`], at most
//!   [`A2A_MAX_REPLIES_PER_TASK`] per task) or `Malformed` (drop silently).
//!   A2A's own objects are validated here (unknown keys and unknown task
//!   states are malformed); the keys inside `data` are the verb owner's:
//!   call [`check_data_keys`] and answer an unknown key as unsupported.
//! - Build what you send with [`Message::agent`], [`message_payload`],
//!   [`status_payload`] and [`artifact_payload`]; never hand-write JSON.
//! - Routing is [`Agent::on_a2a`] at the bottom of this file: meeting verbs
//!   go to `meeting.rs`; the arm marked `// tasks/v1 (§7.6)` is yours.
//!   rdv/cancel goes to whichever engine holds the task (meetings first).
//! - The types are stable: add fields only with the spec.

use rdv_proto::AgentId;
pub use rdv_proto::consts::A2A_MAX_REPLIES_PER_TASK;
use rdv_proto::consts::{
    A2A_ARTIFACT_UPDATE_TYPE, A2A_INLINE_FILE_MAX_BYTES, A2A_MAX_EXTENSIONS, A2A_MAX_PARTS,
    A2A_MAX_REFERENCE_TASKS, A2A_MESSAGE_TYPE, A2A_TASK_UPDATE_TYPE, A2A_TEXT_MAX_CHARS,
    A2A_UNSUPPORTED_KEY, EXT_MEETINGS, INVOKE_MAX_URI_LEN,
};
use rdv_proto::time::Instant;
use serde_json::{Map, Value, json};

use crate::agent::{Agent, Ctx};
use crate::error::Result;

/// An A2A v0.3 task state (§7.3, §7.6.2). No other value is read (§7.5:
/// extensions may not add enum values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
    AuthRequired,
    Unknown,
}

impl TaskState {
    pub const ALL: [TaskState; 9] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::Completed,
        TaskState::Canceled,
        TaskState::Failed,
        TaskState::Rejected,
        TaskState::AuthRequired,
        TaskState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::Completed => "completed",
            TaskState::Canceled => "canceled",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
            TaskState::AuthRequired => "auth-required",
            TaskState::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// completed, canceled, failed and rejected end a task.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Canceled | TaskState::Failed | TaskState::Rejected
        )
    }
}

/// A FilePart's `file` (A2A FileWithBytes or FileWithUri). Its §7.7
/// metadata is the files extension's business.
#[derive(Debug, Clone, PartialEq)]
pub struct FileContent {
    pub bytes: Option<String>,
    pub uri: Option<String>,
    pub mime_type: Option<String>,
    pub name: Option<String>,
}

/// One part of a message or artifact.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Human text: display only, never drives anything (§5.6).
    Text {
        text: String,
        metadata: Option<Map<String, Value>>,
    },
    /// The machine part (§7.1).
    Data {
        data: Map<String, Value>,
        metadata: Option<Map<String, Value>>,
    },
    File {
        file: FileContent,
        metadata: Option<Map<String, Value>>,
    },
}

/// An A2A Message; role is always `agent` (§7.1).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub message_id: String,
    pub task_id: Option<String>,
    pub context_id: Option<String>,
    pub parts: Vec<Part>,
    pub extensions: Vec<String>,
    pub reference_task_ids: Vec<String>,
    /// Ignorable (§7.5 rule 4).
    pub metadata: Option<Map<String, Value>>,
}

/// A TaskStatusUpdateEvent (§7.1).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    pub task_id: String,
    pub context_id: String,
    pub state: TaskState,
    pub timestamp: Option<String>,
    pub message: Option<Box<Message>>,
    pub final_: bool,
    /// Ignorable (§7.5), except the unsupported key the sender reads.
    pub metadata: Option<Map<String, Value>>,
}

impl StatusUpdate {
    /// The refused messageId and verb of a §7.5 rule 5 reply, when this is one.
    pub fn unsupported(&self) -> Option<(String, Option<String>)> {
        let u = self.metadata.as_ref()?.get(A2A_UNSUPPORTED_KEY)?;
        let id = u.get("messageId")?.as_str().filter(|s| is_uuid(s))?;
        let verb = u
            .get("verb")
            .and_then(Value::as_str)
            .filter(|v| is_verb(v))
            .map(str::to_string);
        Some((id.to_string(), verb))
    }
}

/// An Artifact (§7.6.1).
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub artifact_id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub parts: Vec<Part>,
    pub extensions: Vec<String>,
    pub metadata: Option<Map<String, Value>>,
}

/// A TaskArtifactUpdateEvent (§7.6.1).
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactUpdate {
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    pub append: Option<bool>,
    pub last_chunk: Option<bool>,
    pub metadata: Option<Map<String, Value>>,
}

/// What a message refused as unsupported names (§7.5 rule 5).
#[derive(Debug, Clone, PartialEq)]
pub struct Unsupported {
    pub task_id: String,
    pub context_id: String,
    pub message_id: String,
    /// The verb, only when it has the shape of one (the reply echoes it).
    pub verb: Option<String>,
    /// Why, for the human (never sent).
    pub why: String,
}

/// The §7.5 rule 4 verdict on one `a2a/*` payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// An a2a/message with its one data part: `verb` is `data.rdv`, `data`
    /// the whole data object (its keys are the verb owner's to check).
    Message {
        message: Message,
        task_id: String,
        context_id: String,
        verb: String,
        data: Map<String, Value>,
    },
    TaskUpdate(StatusUpdate),
    ArtifactUpdate(ArtifactUpdate),
    /// Critical unknowns: answer with [`unsupported_reply`] (bounded).
    Unsupported(Unsupported),
    /// Dropped silently.
    Malformed(String),
}

/// A UUID in its hyphenated form (§7.1).
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A verb (`data.rdv`): a short token like `meeting/propose` (§5.6).
pub fn is_verb(s: &str) -> bool {
    crate::inbound::is_payload_type(s)
}

/// §7.5 rule 4: the keys of a verb's data, checked by the verb's owner.
/// Returns the first unknown key (answer it as unsupported).
pub fn check_data_keys(data: &Map<String, Value>, allowed: &[&str]) -> Option<String> {
    data.keys()
        .find(|k| k.as_str() != "rdv" && !allowed.contains(&k.as_str()))
        .cloned()
}

type Parsed<T> = std::result::Result<T, Refusal>;

/// Why a structure was refused while parsing.
enum Refusal {
    Malformed(String),
    /// An unknown part kind (§7.5 rule 4: critical).
    UnknownPart(String),
}

fn bad<T>(s: impl Into<String>) -> Parsed<T> {
    Err(Refusal::Malformed(s.into()))
}

/// A JSON object read strictly: every key must be one of `allowed`.
fn object<'a>(v: &'a Value, what: &str, allowed: &[&str]) -> Parsed<&'a Map<String, Value>> {
    let Some(m) = v.as_object() else {
        return bad(format!("{what} is not an object"));
    };
    if let Some(k) = m.keys().find(|k| !allowed.contains(&k.as_str())) {
        return bad(format!(
            "{what} has an unknown key {:?}",
            crate::peer_text::bounded(k, 64)
        ));
    }
    Ok(m)
}

fn opt_str<'a>(m: &'a Map<String, Value>, k: &str, what: &str) -> Parsed<Option<&'a str>> {
    match m.get(k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => bad(format!("{what}.{k} is not a string")),
    }
}

fn req_str<'a>(m: &'a Map<String, Value>, k: &str, what: &str) -> Parsed<&'a str> {
    opt_str(m, k, what)?.map_or_else(|| bad(format!("{what}.{k} is missing")), Ok)
}

fn uuid_field(m: &Map<String, Value>, k: &str, what: &str) -> Parsed<Option<String>> {
    match opt_str(m, k, what)? {
        None => Ok(None),
        Some(s) if is_uuid(s) => Ok(Some(s.to_string())),
        Some(_) => bad(format!("{what}.{k} is not a UUID")),
    }
}

fn tag(m: &Map<String, Value>, want: &str, what: &str) -> Parsed<()> {
    if req_str(m, "kind", what)? == want {
        Ok(())
    } else {
        bad(format!("{what}.kind is not {want:?}"))
    }
}

fn metadata(m: &Map<String, Value>, what: &str) -> Parsed<Option<Map<String, Value>>> {
    match m.get("metadata") {
        None => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o.clone())),
        Some(_) => bad(format!("{what}.metadata is not an object")),
    }
}

fn opt_bool(m: &Map<String, Value>, k: &str, what: &str) -> Parsed<Option<bool>> {
    match m.get(k) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => bad(format!("{what}.{k} is not a boolean")),
    }
}

/// A list of extension URIs (§7.5 rule 3): unknown ones are ignorable,
/// but the list is bounded.
fn extensions(m: &Map<String, Value>, what: &str) -> Parsed<Vec<String>> {
    let Some(v) = m.get("extensions") else {
        return Ok(Vec::new());
    };
    let Some(a) = v.as_array() else {
        return bad(format!("{what}.extensions is not an array"));
    };
    if a.len() > A2A_MAX_EXTENSIONS {
        return bad(format!("{what}.extensions lists over {A2A_MAX_EXTENSIONS}"));
    }
    a.iter()
        .map(|u| match u.as_str() {
            Some(s) if !s.is_empty() && s.len() <= INVOKE_MAX_URI_LEN => Ok(s.to_string()),
            _ => bad(format!("{what}.extensions holds a bad URI")),
        })
        .collect()
}

fn parts(v: Option<&Value>, what: &str) -> Parsed<Vec<Part>> {
    let Some(a) = v.and_then(Value::as_array) else {
        return bad(format!("{what}.parts is not an array"));
    };
    if a.is_empty() || a.len() > A2A_MAX_PARTS {
        return bad(format!("{what}.parts holds 1 to {A2A_MAX_PARTS} parts"));
    }
    a.iter().map(part).collect()
}

fn part(v: &Value) -> Parsed<Part> {
    let Some(m) = v.as_object() else {
        return bad("a part is not an object");
    };
    let kind = req_str(m, "kind", "part")?;
    match kind {
        "text" => {
            let m = object(v, "text part", &["kind", "text", "metadata"])?;
            let text = req_str(m, "text", "text part")?;
            if text.chars().count() > A2A_TEXT_MAX_CHARS {
                return bad(format!("a text part over {A2A_TEXT_MAX_CHARS} characters"));
            }
            Ok(Part::Text {
                text: text.to_string(),
                metadata: metadata(m, "text part")?,
            })
        }
        "data" => {
            let m = object(v, "data part", &["kind", "data", "metadata"])?;
            let Some(Value::Object(data)) = m.get("data") else {
                return bad("data part.data is not an object");
            };
            Ok(Part::Data {
                data: data.clone(),
                metadata: metadata(m, "data part")?,
            })
        }
        "file" => {
            let m = object(v, "file part", &["kind", "file", "metadata"])?;
            let Some(f) = m.get("file") else {
                return bad("file part.file is missing");
            };
            let f = object(f, "file", &["bytes", "uri", "mimeType", "name"])?;
            let bytes = opt_str(f, "bytes", "file")?.map(str::to_string);
            let uri = opt_str(f, "uri", "file")?.map(str::to_string);
            if bytes.is_some() && uri.is_some() {
                return bad("file has both bytes and uri");
            }
            if bytes
                .as_ref()
                .is_some_and(|b| b.len() > A2A_INLINE_FILE_MAX_BYTES.div_ceil(3) * 4)
            {
                return bad("inline file bytes over 16 KiB");
            }
            Ok(Part::File {
                file: FileContent {
                    bytes,
                    uri,
                    mime_type: opt_str(f, "mimeType", "file")?.map(str::to_string),
                    name: opt_str(f, "name", "file")?.map(str::to_string),
                },
                metadata: metadata(m, "file part")?,
            })
        }
        other => Err(Refusal::UnknownPart(crate::peer_text::bounded(other, 64))),
    }
}

const MESSAGE_KEYS: [&str; 9] = [
    "kind",
    "role",
    "parts",
    "messageId",
    "taskId",
    "contextId",
    "extensions",
    "metadata",
    "referenceTaskIds",
];

/// The ids of a message, read before its parts, so an unknown part kind
/// can still be answered (§7.5 rule 5 needs them).
fn message_ids(m: &Map<String, Value>) -> Parsed<(String, Option<String>, Option<String>)> {
    tag(m, "message", "message")?;
    if req_str(m, "role", "message")? != "agent" {
        return bad("message.role is not \"agent\" (§7.1)");
    }
    let id = uuid_field(m, "messageId", "message")?
        .map_or_else(|| bad("message.messageId is missing"), Ok)?;
    Ok((
        id,
        uuid_field(m, "taskId", "message")?,
        uuid_field(m, "contextId", "message")?,
    ))
}

fn message(v: &Value) -> Parsed<Message> {
    let m = object(v, "message", &MESSAGE_KEYS)?;
    let (message_id, task_id, context_id) = message_ids(m)?;
    let reference_task_ids = match m.get("referenceTaskIds") {
        None => Vec::new(),
        Some(Value::Array(a)) if a.len() <= A2A_MAX_REFERENCE_TASKS => a
            .iter()
            .map(|x| match x.as_str() {
                Some(s) if is_uuid(s) => Ok(s.to_string()),
                _ => bad("message.referenceTaskIds holds a non-UUID"),
            })
            .collect::<Parsed<Vec<_>>>()?,
        Some(_) => bad("message.referenceTaskIds is not a short array")?,
    };
    Ok(Message {
        message_id,
        task_id,
        context_id,
        parts: parts(m.get("parts"), "message")?,
        extensions: extensions(m, "message")?,
        reference_task_ids,
        metadata: metadata(m, "message")?,
    })
}

fn timestamp(m: &Map<String, Value>, what: &str) -> Parsed<Option<String>> {
    match opt_str(m, "timestamp", what)? {
        None => Ok(None),
        Some(s) if s.len() <= 40 && parse_offset_time(s).is_some() => Ok(Some(s.to_string())),
        Some(_) => bad(format!("{what}.timestamp is not an RFC 3339 date-time")),
    }
}

/// An RFC 3339 date-time with an explicit offset (Z or ±HH:MM), as an
/// instant (§7.2: compared as instants).
pub fn parse_offset_time(s: &str) -> Option<Instant> {
    if s.len() > 40 || s.as_bytes().get(10) != Some(&b'T') {
        return None;
    }
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

fn status_update(v: &Value) -> Parsed<StatusUpdate> {
    let m = object(
        v,
        "status update",
        &["kind", "taskId", "contextId", "status", "final", "metadata"],
    )?;
    tag(m, "status-update", "status update")?;
    let task_id = uuid_field(m, "taskId", "status update")?
        .map_or_else(|| bad("status update.taskId is missing"), Ok)?;
    let context_id = uuid_field(m, "contextId", "status update")?
        .map_or_else(|| bad("status update.contextId is missing"), Ok)?;
    let Some(s) = m.get("status") else {
        return bad("status update.status is missing");
    };
    let s = object(s, "status", &["state", "message", "timestamp"])?;
    let Some(state) = TaskState::parse(req_str(s, "state", "status")?) else {
        return bad("an unknown task state (§7.5: malformed)");
    };
    let message = match s.get("message") {
        None => None,
        // Inside a status update nothing is answered: any refusal drops it.
        Some(x) => Some(Box::new(message(x).map_err(|e| match e {
            Refusal::UnknownPart(k) => Refusal::Malformed(format!("status message part {k}")),
            e => e,
        })?)),
    };
    let Some(final_) = opt_bool(m, "final", "status update")? else {
        return bad("status update.final is missing");
    };
    Ok(StatusUpdate {
        task_id,
        context_id,
        state,
        timestamp: timestamp(s, "status")?,
        message,
        final_,
        metadata: metadata(m, "status update")?,
    })
}

fn artifact_update(v: &Value) -> Parsed<ArtifactUpdate> {
    let m = object(
        v,
        "artifact update",
        &[
            "kind",
            "taskId",
            "contextId",
            "artifact",
            "append",
            "lastChunk",
            "metadata",
        ],
    )?;
    tag(m, "artifact-update", "artifact update")?;
    let task_id = uuid_field(m, "taskId", "artifact update")?
        .map_or_else(|| bad("artifact update.taskId is missing"), Ok)?;
    let context_id = uuid_field(m, "contextId", "artifact update")?
        .map_or_else(|| bad("artifact update.contextId is missing"), Ok)?;
    let Some(a) = m.get("artifact") else {
        return bad("artifact update.artifact is missing");
    };
    let a = object(
        a,
        "artifact",
        &[
            "artifactId",
            "name",
            "description",
            "parts",
            "extensions",
            "metadata",
        ],
    )?;
    let artifact = Artifact {
        artifact_id: uuid_field(a, "artifactId", "artifact")?
            .map_or_else(|| bad("artifact.artifactId is missing"), Ok)?,
        name: opt_str(a, "name", "artifact")?.map(str::to_string),
        description: opt_str(a, "description", "artifact")?.map(str::to_string),
        parts: parts(a.get("parts"), "artifact")?,
        extensions: extensions(a, "artifact")?,
        metadata: metadata(a, "artifact")?,
    };
    Ok(ArtifactUpdate {
        task_id,
        context_id,
        artifact,
        append: opt_bool(m, "append", "artifact update")?,
        last_chunk: opt_bool(m, "lastChunk", "artifact update")?,
        metadata: metadata(m, "artifact update")?,
    })
}

/// §7.1, §7.5 rule 4: the verdict on one opened `a2a/*` payload.
pub fn classify(payload: &Value) -> Inbound {
    let ty = payload.get("type").and_then(Value::as_str).unwrap_or("");
    let r = match ty {
        A2A_MESSAGE_TYPE => classify_message(payload),
        A2A_TASK_UPDATE_TYPE => object(payload, "payload", &["type", "update"])
            .and_then(|m| status_update(m.get("update").unwrap_or(&Value::Null)))
            .map(Inbound::TaskUpdate),
        A2A_ARTIFACT_UPDATE_TYPE => object(payload, "payload", &["type", "update"])
            .and_then(|m| artifact_update(m.get("update").unwrap_or(&Value::Null)))
            .map(Inbound::ArtifactUpdate),
        _ => bad("not an a2a payload type"),
    };
    match r {
        Ok(i) => i,
        Err(Refusal::Malformed(s)) => Inbound::Malformed(s),
        // Only a message answers an unknown part, and that is handled there.
        Err(Refusal::UnknownPart(k)) => Inbound::Malformed(format!("unknown part kind {k}")),
    }
}

fn classify_message(payload: &Value) -> Parsed<Inbound> {
    let p = object(payload, "payload", &["type", "message"])?;
    let Some(mv) = p.get("message") else {
        return bad("payload.message is missing");
    };
    let mo = object(mv, "message", &MESSAGE_KEYS)?;
    let (message_id, task_id, context_id) = message_ids(mo)?;
    let (Some(task_id), Some(context_id)) = (task_id, context_id) else {
        return bad("a message without taskId and contextId (§7.1)");
    };
    // The verb of the one data part, read before the other parts so an
    // unknown part kind can name it in the reply.
    let verb_hint = mo
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|x| x.get("kind").and_then(Value::as_str) == Some("data"))
        .find_map(|x| x.get("data")?.get("rdv")?.as_str().map(str::to_string))
        .filter(|v| is_verb(v));
    let message = match message(mv) {
        Ok(m) => m,
        Err(Refusal::UnknownPart(k)) => {
            return Ok(Inbound::Unsupported(Unsupported {
                task_id,
                context_id,
                message_id,
                verb: verb_hint,
                why: format!("unknown part kind {k}"),
            }));
        }
        Err(e) => return Err(e),
    };
    let mut datas = message.parts.iter().filter_map(|p| match p {
        Part::Data { data, .. } => Some(data),
        _ => None,
    });
    let (Some(data), None) = (datas.next(), datas.next()) else {
        return bad("a message carries exactly one data part (§7.1)");
    };
    let Some(verb) = data.get("rdv").and_then(Value::as_str) else {
        return bad("data.rdv is missing");
    };
    if !is_verb(verb) {
        return bad("data.rdv is not a verb");
    }
    let (verb, data) = (verb.to_string(), data.clone());
    Ok(Inbound::Message {
        message,
        task_id,
        context_id,
        verb,
        data,
    })
}

// ---- building --------------------------------------------------------------

impl Message {
    /// Our message: role agent, one data part (the verb), the verb's
    /// extension listed (§7.5 rule 3), no text (meeting messages carry
    /// slots only, §7.4).
    pub fn agent(
        message_id: String,
        task_id: &str,
        context_id: &str,
        extension: &str,
        data: Map<String, Value>,
    ) -> Message {
        Message {
            message_id,
            task_id: Some(task_id.to_string()),
            context_id: Some(context_id.to_string()),
            parts: vec![Part::Data {
                data,
                metadata: None,
            }],
            extensions: vec![extension.to_string()],
            reference_task_ids: Vec::new(),
            metadata: None,
        }
    }

    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("message"));
        m.insert("role".into(), json!("agent"));
        m.insert("messageId".into(), json!(self.message_id));
        if let Some(t) = &self.task_id {
            m.insert("taskId".into(), json!(t));
        }
        if let Some(c) = &self.context_id {
            m.insert("contextId".into(), json!(c));
        }
        m.insert(
            "parts".into(),
            Value::Array(self.parts.iter().map(Part::to_value).collect()),
        );
        if !self.extensions.is_empty() {
            m.insert("extensions".into(), json!(self.extensions));
        }
        if !self.reference_task_ids.is_empty() {
            m.insert("referenceTaskIds".into(), json!(self.reference_task_ids));
        }
        if let Some(md) = &self.metadata {
            m.insert("metadata".into(), Value::Object(md.clone()));
        }
        Value::Object(m)
    }
}

impl Part {
    pub fn to_value(&self) -> Value {
        let (mut m, md) = match self {
            Part::Text { text, metadata } => {
                (json!({"kind": "text", "text": text}), metadata.clone())
            }
            Part::Data { data, metadata } => (
                json!({"kind": "data", "data": Value::Object(data.clone())}),
                metadata.clone(),
            ),
            Part::File { file, metadata } => {
                let mut f = Map::new();
                for (k, v) in [
                    ("bytes", &file.bytes),
                    ("uri", &file.uri),
                    ("mimeType", &file.mime_type),
                    ("name", &file.name),
                ] {
                    if let Some(v) = v {
                        f.insert(k.into(), json!(v));
                    }
                }
                (json!({"kind": "file", "file": f}), metadata.clone())
            }
        };
        if let (Some(md), Some(o)) = (md, m.as_object_mut()) {
            o.insert("metadata".into(), Value::Object(md));
        }
        m
    }
}

impl Artifact {
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("artifactId".into(), json!(self.artifact_id));
        if let Some(n) = &self.name {
            m.insert("name".into(), json!(n));
        }
        if let Some(d) = &self.description {
            m.insert("description".into(), json!(d));
        }
        m.insert(
            "parts".into(),
            Value::Array(self.parts.iter().map(Part::to_value).collect()),
        );
        if !self.extensions.is_empty() {
            m.insert("extensions".into(), json!(self.extensions));
        }
        if let Some(md) = &self.metadata {
            m.insert("metadata".into(), Value::Object(md.clone()));
        }
        Value::Object(m)
    }
}

/// `{"type": "a2a/message", "message": …}` (§7.1).
pub fn message_payload(m: &Message) -> Value {
    json!({ "type": A2A_MESSAGE_TYPE, "message": m.to_value() })
}

/// `{"type": "a2a/task-update", "update": …}` (§7.1): a status update with
/// our clock's timestamp; `final` for a terminal state.
pub fn status_payload(
    task_id: &str,
    context_id: &str,
    state: TaskState,
    now: Instant,
    metadata: Option<Map<String, Value>>,
) -> Value {
    let mut u = json!({
        "kind": "status-update",
        "taskId": task_id,
        "contextId": context_id,
        "status": { "state": state.as_str(), "timestamp": rdv_proto::time::format_time(now) },
        "final": state.is_terminal(),
    });
    if let (Some(md), Some(o)) = (metadata, u.as_object_mut()) {
        o.insert("metadata".into(), Value::Object(md));
    }
    json!({ "type": A2A_TASK_UPDATE_TYPE, "update": u })
}

/// `{"type": "a2a/artifact-update", "update": …}` (§7.6.1).
pub fn artifact_payload(
    task_id: &str,
    context_id: &str,
    artifact: &Artifact,
    append: Option<bool>,
    last_chunk: Option<bool>,
) -> Value {
    let mut u = json!({
        "kind": "artifact-update",
        "taskId": task_id,
        "contextId": context_id,
        "artifact": artifact.to_value(),
    });
    if let Some(o) = u.as_object_mut() {
        if let Some(a) = append {
            o.insert("append".into(), json!(a));
        }
        if let Some(l) = last_chunk {
            o.insert("lastChunk".into(), json!(l));
        }
    }
    json!({ "type": A2A_ARTIFACT_UPDATE_TYPE, "update": u })
}

/// §7.5 rule 5: the unsupported reply, carrying the task's real state (or
/// rejected when the receiver has none) and the refused messageId and verb.
pub fn unsupported_reply(u: &Unsupported, state: Option<TaskState>, now: Instant) -> Value {
    let mut refused = Map::new();
    refused.insert("messageId".into(), json!(u.message_id));
    if let Some(v) = &u.verb {
        refused.insert("verb".into(), json!(v));
    }
    let mut md = Map::new();
    md.insert(A2A_UNSUPPORTED_KEY.into(), Value::Object(refused));
    status_payload(
        &u.task_id,
        &u.context_id,
        state.unwrap_or(TaskState::Rejected),
        now,
        Some(md),
    )
}

// ---- routing ---------------------------------------------------------------

/// Which engine a verb belongs to (§7.5 rule 1, §7.6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// meetings/v1 and meeting-cancel/v1 (§7.2).
    Meetings,
    /// tasks/v1 (§7.6).
    Tasks,
    /// rdv/cancel: both; the task's engine decides.
    Cancel,
}

/// The family of a verb this agent knows, or none (unsupported).
pub fn family(verb: &str) -> Option<Family> {
    if crate::meeting::is_meeting_verb(verb) {
        Some(Family::Meetings)
    } else if verb == "rdv/cancel" {
        Some(Family::Cancel)
    } else if matches!(verb, "task/request" | "task/input") {
        Some(Family::Tasks)
    } else {
        None
    }
}

impl Agent {
    /// The one dispatch point for `a2a/*` payloads from an admitted sender
    /// (inbound.rs after channel admission, in channel order).
    pub(crate) fn on_a2a(
        &mut self,
        from: &AgentId,
        payload: &Value,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        if self.state.contact(from).is_none() {
            return Ok(());
        }
        match classify(payload) {
            Inbound::Malformed(_) => Ok(()),
            Inbound::Unsupported(u) => self.a2a_unsupported(from, u, ctx),
            Inbound::Message {
                message,
                task_id,
                context_id,
                verb,
                data,
            } => {
                let m = crate::meeting::Inbound {
                    message_id: message.message_id.clone(),
                    task_id,
                    context_id,
                    verb,
                    data,
                };
                // A meeting of ours, or a cancel ahead of its proposal that
                // no task claims and that names the meetings extension (§7.3
                // tombstone), goes to the meetings engine.
                let meeting = match family(&m.verb) {
                    Some(Family::Meetings) => true,
                    Some(Family::Cancel) => {
                        self.meeting_has(from, &m.task_id)
                            || (!self.task_claims_cancel(from, &m.task_id, &message.extensions)
                                && message.extensions.iter().any(|e| e == EXT_MEETINGS))
                    }
                    _ => false,
                };
                // §5.3 (a): a meeting message counts towards the grant-wide
                // max_frequency, as a task message or a free message does.
                if meeting && self.task_count_grant_wide(from, ctx)? {
                    return Ok(());
                }
                match family(&m.verb) {
                    Some(Family::Meetings) => self.meeting_message(from, m, ctx),
                    Some(Family::Cancel) if meeting => self.meeting_message(from, m, ctx),
                    // tasks/v1 (§7.6): the tasks engine takes task/request,
                    // task/input and every other rdv/cancel (`task_flow`).
                    Some(Family::Tasks) | Some(Family::Cancel) => {
                        let inbound = Inbound::Message {
                            message,
                            task_id: m.task_id,
                            context_id: m.context_id,
                            verb: m.verb,
                            data: m.data,
                        };
                        self.on_task(from, inbound, ctx)
                    }
                    None => {
                        let u = Unsupported {
                            task_id: m.task_id,
                            context_id: m.context_id,
                            message_id: m.message_id,
                            verb: Some(m.verb),
                            why: "an unknown verb".into(),
                        };
                        self.a2a_unsupported(from, u, ctx)
                    }
                }
            }
            Inbound::TaskUpdate(u) => {
                if self.meeting_has(from, &u.task_id) {
                    if self.task_count_grant_wide(from, ctx)? {
                        return Ok(());
                    }
                    self.meeting_status(from, u, ctx)
                } else if self.task_has_requested(from, &u.task_id) {
                    // tasks/v1 (§7.6): status updates of our requested tasks.
                    self.on_task(from, Inbound::TaskUpdate(u), ctx)
                } else {
                    Ok(())
                }
            }
            // tasks/v1 (§7.6): artifacts of our requested tasks.
            Inbound::ArtifactUpdate(a) => self.on_task(from, Inbound::ArtifactUpdate(a), ctx),
        }
    }

    /// §7.5 rule 5: the reply, only to the task's peer (or within a
    /// meeting-capable grant for a task we do not have), bounded per task.
    fn a2a_unsupported(&mut self, from: &AgentId, u: Unsupported, ctx: &mut Ctx<'_>) -> Result<()> {
        if self.meeting_has(from, &u.task_id) {
            return self.meeting_unsupported(from, u, ctx);
        }
        // tasks/v1 (§7.6): a task of the tasks engine, or a task verb,
        // answers from there.
        let task_verb = u.verb.as_deref().is_some_and(|v| v.starts_with("task/"));
        if task_verb || self.task_claims_cancel(from, &u.task_id, &[]) {
            return self.task_unsupported(from, u, None, ctx);
        }
        self.meeting_unsupported_unknown_task(from, u, ctx)
    }
}
