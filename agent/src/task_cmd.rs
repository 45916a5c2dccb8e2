//! `rdv task …` (SPEC §7.6, §5.5), `rdv owner-secret` and `rdv audit`
//! (§5.5.1), and `rdv contact auto-approve`. The human's gates take the
//! code `rdv task list` shows on the terminal: bound to the digest of
//! exactly what was shown, single use, kept only as a salted scrypt hash,
//! never printed with `--json`, in an event or in a log. Peer text is
//! shown marked and cleaned (§5.6: links shown, never followed).

use std::io::{BufRead, IsTerminal, Write};
use std::process::Stdio;

use clap::{Args, Subcommand};
use rdv_agent_core::Command;
use rdv_agent_core::gate::{GateStep, StandingPolicy, code_terms, open_gate};
use rdv_agent_core::owner::Secret;
use rdv_agent_core::peer_text::{UntrustedPeerText, terminal_safe};
use rdv_agent_core::phrase::Phrase;
use rdv_agent_core::state::ContactStatus;
use rdv_agent_core::task::{EXT_REVIEW, Role, Task};
use rdv_agent_core::task_flow::{OwnerCommand, Submit, TaskCommand as Core, TaskRef};
use rdv_proto::AgentId;
use rdv_proto::consts::EXT_REQUEST;
use rdv_proto::time::format_time;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::cli::Global;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::runtime::{Options, Runtime};

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Tasks both ways. For each gate waiting for you, a code to approve
    /// it with (text mode only; a new code each time you look).
    List {
        /// Also finished tasks.
        #[arg(long)]
        all: bool,
    },
    /// One task, and its code if a gate waits for you (text mode only).
    Status { id: String },
    /// What the peer wrote for a task and its results, marked as peer text.
    Read { id: String },
    /// Ask a contact for a task (SPEC §7.6). Their grant must list the
    /// capability (deny by default); over their limits nothing is sent.
    Request {
        /// The contact: its agent ID or your label for it.
        contact: String,
        /// The capability URI, or `request` (…/ext/request/v1) or `review`
        /// (…/ext/review/v1).
        capability: String,
        /// The request in words (repeatable: one text part each).
        #[arg(long = "text")]
        texts: Vec<String>,
        /// request/v1: structured data beside the text, a JSON object.
        #[arg(long)]
        data: Option<String>,
        /// Any other capability: its input, a JSON object.
        #[arg(long, conflicts_with = "data")]
        input: Option<String>,
        /// How long the task may take: <n><s|m|h|d> (default 48h, at most 7d).
        #[arg(long)]
        expires: Option<String>,
        /// A file of yours, prepared with `rdv file prepare` (SPEC §7.7):
        /// SHA256 for an inline one, SHA256=https://… for the encrypted
        /// copy you uploaded (repeatable). A request with files is held
        /// until you release it (rdv task list, rdv task release).
        #[arg(long)]
        file: Vec<String>,
    },
    /// Answer a task that asks you for input (input-required).
    Input {
        id: String,
        #[arg(long = "text")]
        texts: Vec<String>,
        #[arg(long)]
        data: Option<String>,
        #[arg(long, conflicts_with = "data")]
        input: Option<String>,
    },
    /// Withdraw a task you asked for.
    Cancel {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// The start gate: approve the task `rdv task list` showed you. Only
    /// you decide this; if the task changed since, nothing is approved.
    Approve {
        id: String,
        #[arg(long)]
        code: String,
    },
    /// The release gate: let the draft `rdv task list` showed you leave.
    Release {
        id: String,
        #[arg(long)]
        code: String,
    },
    /// Say no to a task (rejected, reason human).
    Decline { id: String },
    /// Draft a result, a question (--question) or a closing message
    /// (--fail). It waits for your release (rdv task release).
    Submit {
        id: String,
        #[arg(long = "text")]
        texts: Vec<String>,
        /// A data part: for request/v1 the object inside request/data; for
        /// another capability its whole data part (with its "rdv").
        #[arg(long)]
        data: Option<String>,
        /// The artifact's name.
        #[arg(long)]
        name: Option<String>,
        /// More results follow: the task stays open.
        #[arg(long)]
        more: bool,
        #[arg(long, conflicts_with_all = ["fail", "more", "name"])]
        question: bool,
        #[arg(long, conflicts_with_all = ["question", "more", "name", "data"])]
        fail: bool,
        /// A file of yours, prepared with `rdv file prepare` (SPEC §7.7):
        /// SHA256 for an inline one, SHA256=https://… for the encrypted
        /// copy you uploaded there (repeatable). A result with files waits
        /// for your release every time (no policy or auto-approve).
        #[arg(long, conflicts_with_all = ["question", "fail"])]
        file: Vec<String>,
    },
    /// A standing policy for one contact and one capability (SPEC §5.5):
    /// start and/or release without asking. A free-form capability
    /// (request/v1, review/v1) always waits for you to start it.
    Policy {
        contact: String,
        capability: String,
        #[arg(long)]
        auto_start: bool,
        #[arg(long)]
        auto_release: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum OwnerSecretCommand {
    /// Set the owner passphrase (asked twice on this terminal, never shown;
    /// kept as a scrypt hash). Needs an interactive terminal.
    Set,
    /// Forget it, and turn every auto-approve off.
    Reset,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this contact (agent ID or label).
    #[arg(long)]
    pub contact: Option<String>,
    /// Only lines at or after this time (RFC 3339).
    #[arg(long)]
    pub since: Option<String>,
}

fn home(g: &Global) -> Result<Home> {
    Home::resolve(g.home.clone(), g.profile.as_deref())
}

async fn open(g: &Global) -> Result<Runtime> {
    Runtime::open(home(g)?, Options::default()).await
}

fn print(g: &Global, v: &Value) -> Result<()> {
    let mut so = std::io::stdout().lock();
    if g.json {
        return crate::terminal::write_line(&mut so, v);
    }
    if let Value::Object(m) = v {
        for (k, x) in m {
            writeln!(so, "{k}: {}", text_of(x))?;
        }
    } else {
        writeln!(so, "{}", text_of(v))?;
    }
    so.flush()?;
    Ok(())
}

/// Terminal-safe text of a value; peer text marked (§5.6 rule 6).
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => terminal_safe(s),
        Value::Object(m) if m.len() == 1 && m.contains_key("untrusted_peer_text") => format!(
            "«{}» (peer-written)",
            terminal_safe(m["untrusted_peer_text"].as_str().unwrap_or(""))
        ),
        other => crate::terminal::printable(&other.to_string()),
    }
}

/// A contact by agent ID or label.
fn contact_of(rt: &Runtime, s: &str) -> Result<AgentId> {
    if s.starts_with(rdv_proto::consts::AGENT_ID_PREFIX) {
        return AgentId::parse(s).map_err(|e| Error::Input(format!("{s}: {e}")));
    }
    let hits: Vec<AgentId> = rt
        .agent()
        .state
        .contacts
        .values()
        .filter(|c| c.status == ContactStatus::Active && c.label.as_deref() == Some(s))
        .map(|c| c.id.clone())
        .collect();
    match hits.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::Input(format!("no contact is labelled {s:?}"))),
        _ => Err(Error::Input(format!("several contacts are labelled {s:?}"))),
    }
}

/// A capability URI, or its short name (`request`, `review`).
pub fn capability_of(s: &str) -> String {
    match s {
        "request" => EXT_REQUEST.to_string(),
        "review" => EXT_REVIEW.to_string(),
        other => other.to_string(),
    }
}

fn json_arg(what: &str, s: &str) -> Result<Value> {
    let v = rdv_proto::canon::parse_str(s, rdv_proto::consts::ENVELOPE_MAX_PLAINTEXT)
        .map_err(|e| Error::Input(format!("{what}: not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Error::Input(format!("{what} must be a JSON object")));
    }
    Ok(v)
}

/// <n><s|m|h|d> as seconds.
pub fn duration(s: &str) -> Result<i64> {
    // The core's parser (a model reaches this through `until`): no panic on
    // a multi-byte last character; the bound is on the seconds.
    rdv_proto::time::parse_duration(s)
        .filter(|&d| d > 0 && d <= DURATION_MAX_SECS)
        .ok_or_else(|| {
            Error::Input(format!(
                "{s:?}: a duration is <n><s|m|h|d>, e.g. 48h or 7d, at most 3650d"
            ))
        })
}

/// The longest `--until`/`--expires` duration: ten years.
const DURATION_MAX_SECS: i64 = 3650 * 86_400;

/// The full taskId a prefix (at least 8 characters) names.
fn task_id(rt: &Runtime, s: &str) -> Result<String> {
    let ids: std::collections::BTreeSet<&str> = rt
        .agent()
        .state
        .tasks
        .tasks
        .values()
        .map(|t| t.task_id.as_str())
        .filter(|id| *id == s || (s.len() >= 8 && id.starts_with(s)))
        .collect();
    match ids.len() {
        1 => Ok(ids.into_iter().next().unwrap_or_default().to_string()),
        0 => Err(Error::Input(format!("no task {}", terminal_safe(s)))),
        _ => Err(Error::Input(format!(
            "{} names several tasks: give more of the id",
            terminal_safe(s)
        ))),
    }
}

fn tref(rt: &Runtime, s: &str) -> Result<TaskRef> {
    Ok(TaskRef {
        task_id: task_id(rt, s)?,
        peer: None,
    })
}

/// One task as `list` and `status` show it (and `rdv_task`): validated
/// fields only.
pub fn summary(rt: &Runtime, t: &Task) -> Value {
    let label = rt
        .agent()
        .state
        .contacts
        .get(&t.peer)
        .and_then(|c| c.label.clone());
    let waiting = open_gate(t).map(|(s, _)| s.as_str());
    json!({
        "task_id": t.task_id,
        "role": match t.role { Role::Executor => "executor", Role::Requester => "requester" },
        "peer": t.peer,
        "fingerprint": t.peer.fingerprint(),
        "label": label,
        "capability": t.capability,
        "class": t.class.as_str(),
        "state": t.state.as_str(),
        "reason": t.reason.map(|r| r.as_str()),
        "waiting_for_you": waiting,
        "started_by": t.started_by,
        "created": format_time(t.created),
        "expires": format_time(t.expires),
        "artifacts": t.artifacts.len(),
        // §7.7: each file as the gate shows it (never a key).
        "files": t.files.iter().map(rdv_agent_core::file::FilePart::shown).collect::<Vec<_>>(),
    })
}

/// Issues a code for the gate open on `t` and keeps its hash; the code
/// is for this terminal only.
async fn issue_code(rt: &mut Runtime, t: &Task) -> Result<Option<(GateStep, Zeroizing<String>)>> {
    let Some((step, digest)) = open_gate(t) else {
        return Ok(None);
    };
    Ok(issue_code_for(rt, t, step, &digest)
        .await?
        .map(|code| (step, code)))
}

/// Issues a code bound to the gate `step` of `t` as it was shown
/// (`digest`, §5.5) and keeps its hash; `None` when that gate is no longer
/// the one open (the task changed since it was shown). The code is for a
/// human channel only: this terminal, the MCP server's stderr, or handed
/// straight back to the core after the human approved a form.
pub async fn issue_code_for(
    rt: &mut Runtime,
    t: &Task,
    step: GateStep,
    digest: &str,
) -> Result<Option<Zeroizing<String>>> {
    let mut rng = rand_core::OsRng;
    let (secret, record) = Phrase::generate(
        &code_terms(step, digest),
        time::OffsetDateTime::now_utc(),
        &mut rng,
    )
    .map_err(|e| Error::Input(e.to_string()))?;
    let r = rt
        .command(Command::Task(Core::SetCode {
            task: TaskRef {
                task_id: t.task_id.clone(),
                peer: Some(t.peer.clone()),
            },
            step,
            digest: digest.to_string(),
            record,
        }))
        .await?;
    if r["code_set"] != true {
        return Ok(None);
    }
    Ok(Some(Zeroizing::new(secret.expose().to_string())))
}

/// What the human is shown at a gate: the peer, the capability, the input
/// and the text (peer-written), or the draft about to leave.
fn gate_view(t: &Task) -> Vec<String> {
    let mut out = Vec::new();
    match &t.gate {
        Some(rdv_agent_core::task::OpenGate::Start { .. }) => {
            if let Some(i) = &t.input {
                let s = rdv_proto::canon::to_string(i).unwrap_or_default();
                out.push(format!(
                    "  input: «{}» (peer-written)",
                    UntrustedPeerText::new(&s)
                ));
            }
            for x in &t.texts {
                out.push(format!(
                    "  text: «{}» (peer-written)",
                    UntrustedPeerText::new(x)
                ));
            }
            out.extend(crate::file_cmd::start_gate_lines(t));
        }
        Some(rdv_agent_core::task::OpenGate::Release { draft, .. }) => {
            out.extend(crate::file_cmd::release_gate_lines(t, draft));
        }
        None => {}
    }
    out
}

/// What the peer wrote for a task and its results, every part marked
/// as peer text (`rdv task read`, `rdv_task` "read"; §5.6).
pub fn read_view(t: &Task) -> Value {
    // Everything a peer wrote is marked; ours (as requester) too,
    // since it went through a peer-facing channel.
    let artifacts: Vec<Value> = t
        .artifacts
        .iter()
        .map(|a| {
            let parts: Vec<Value> = a
                .parts
                .iter()
                .map(|p| match p["kind"].as_str() {
                    Some("text") => json!({"text": UntrustedPeerText::new(p["text"].as_str().unwrap_or(""))}),
                    // §7.7: what the human is shown of a file (never its key).
                    Some("file") => json!({"file": crate::file_cmd::file_view(p)}),
                    _ => json!({"data": UntrustedPeerText::new(&rdv_proto::canon::to_string(&p["data"]).unwrap_or_default())}),
                })
                .collect();
            json!({
                "artifact_id": a.artifact_id,
                "name": a.name.as_deref().map(UntrustedPeerText::new),
                "parts": parts,
            })
        })
        .collect();
    json!({
        "task_id": t.task_id,
        "state": t.state.as_str(),
        "texts": t.texts.iter().map(|x| UntrustedPeerText::new(x)).collect::<Vec<_>>(),
        "input": t.input.as_ref().map(|i| UntrustedPeerText::new(&rdv_proto::canon::to_string(i).unwrap_or_default())),
        "note": t.note.as_ref().map(|n| UntrustedPeerText::new(&rdv_proto::canon::to_string(n).unwrap_or_default())),
        "artifacts": artifacts,
    })
}

pub async fn run(cmd: TaskCommand, g: &Global) -> Result<()> {
    let mut rt = open(g).await?;
    match cmd {
        TaskCommand::List { all } => {
            let tasks: Vec<Task> = rt
                .agent()
                .state
                .tasks
                .tasks
                .values()
                .filter(|t| !t.tombstone && (all || t.is_open()))
                .cloned()
                .collect();
            if g.json {
                let list: Vec<Value> = tasks.iter().map(|t| summary(&rt, t)).collect();
                return print(g, &json!({ "tasks": list }));
            }
            if tasks.is_empty() {
                println!("No tasks.");
            }
            for t in &tasks {
                let s = summary(&rt, t);
                println!(
                    "{} {} {} {} {} ({}) {}",
                    t.task_id,
                    s["role"].as_str().unwrap_or(""),
                    t.state.as_str(),
                    terminal_safe(&t.capability),
                    s["label"]
                        .as_str()
                        .map(terminal_safe)
                        .unwrap_or_else(|| t.peer.to_string()),
                    t.peer.fingerprint(),
                    t.reason
                        .map(|r| format!("reason={}", r.as_str()))
                        .unwrap_or_default()
                );
                for l in gate_view(t) {
                    println!("{l}");
                }
                if let Some((step, code)) = issue_code(&mut rt, t).await? {
                    let verb = match step {
                        GateStep::Start => "approve",
                        GateStep::Release => "release",
                    };
                    println!(
                        "  waiting for you: rdv task {verb} {} --code {}",
                        t.task_id,
                        code.as_str()
                    );
                }
            }
            Ok(())
        }
        TaskCommand::Status { id } => {
            let id = task_id(&rt, &id)?;
            let t = rt
                .agent()
                .state
                .tasks
                .tasks
                .values()
                .find(|t| t.task_id == id)
                .cloned()
                .ok_or_else(|| Error::Input("no such task".into()))?;
            print(g, &summary(&rt, &t))?;
            if !g.json {
                for l in gate_view(&t) {
                    println!("{l}");
                }
                if let Some((step, code)) = issue_code(&mut rt, &t).await? {
                    println!("code for the {} gate: {}", step.as_str(), code.as_str());
                }
            }
            Ok(())
        }
        TaskCommand::Read { id } => {
            let id = task_id(&rt, &id)?;
            let t = rt
                .agent()
                .state
                .tasks
                .tasks
                .values()
                .find(|t| t.task_id == id)
                .cloned()
                .ok_or_else(|| Error::Input("no such task".into()))?;
            print(g, &read_view(&t))
        }
        TaskCommand::Request {
            contact,
            capability,
            texts,
            data,
            input,
            expires,
            file,
        } => {
            let files = file
                .iter()
                .map(|f| crate::file_cmd::own_file(home(g)?.dir(), f))
                .collect::<Result<Vec<_>>>()?;
            let to = contact_of(&rt, &contact)?;
            let capability = capability_of(&capability);
            let input = match (data, input) {
                (Some(d), _) => Some(json!({"data": json_arg("--data", &d)?})),
                (None, Some(i)) => Some(json_arg("--input", &i)?),
                (None, None) => None,
            };
            let expires_in = expires.as_deref().map(duration).transpose()?;
            let c = if files.is_empty() {
                Core::Request {
                    to,
                    capability,
                    texts,
                    input,
                    expires_in,
                }
            } else {
                Core::RequestWithFiles {
                    to,
                    capability,
                    texts,
                    input,
                    expires_in,
                    files,
                }
            };
            let v = rt.command(Command::Task(c)).await?;
            print(g, &v)
        }
        TaskCommand::Input {
            id,
            texts,
            data,
            input,
        } => {
            let task = tref(&rt, &id)?;
            let input = match (data, input) {
                (Some(d), _) => Some(json!({"data": json_arg("--data", &d)?})),
                (None, Some(i)) => Some(json_arg("--input", &i)?),
                (None, None) => None,
            };
            let v = rt
                .command(Command::Task(Core::Input { task, texts, input }))
                .await?;
            print(g, &v)
        }
        TaskCommand::Cancel { id, reason } => {
            let task = tref(&rt, &id)?;
            let v = rt
                .command(Command::Task(Core::Cancel { task, reason }))
                .await?;
            print(g, &v)
        }
        TaskCommand::Approve { id, code } => {
            let task = tref(&rt, &id)?;
            let v = rt
                .command(Command::Task(Core::Approve {
                    task,
                    code: Secret::new(code),
                }))
                .await?;
            print(g, &v)
        }
        TaskCommand::Release { id, code } => {
            let task = tref(&rt, &id)?;
            let v = rt
                .command(Command::Task(Core::Release {
                    task,
                    code: Secret::new(code),
                }))
                .await?;
            print(g, &v)
        }
        TaskCommand::Decline { id } => {
            let task = tref(&rt, &id)?;
            let v = rt.command(Command::Task(Core::Decline { task })).await?;
            print(g, &v)
        }
        TaskCommand::Submit {
            id,
            texts,
            data,
            name,
            more,
            question,
            fail,
            file,
        } => {
            let files = file
                .iter()
                .map(|f| crate::file_cmd::own_file(home(g)?.dir(), f))
                .collect::<Result<Vec<_>>>()?;
            let task = tref(&rt, &id)?;
            let cap = rt
                .agent()
                .state
                .tasks
                .tasks
                .values()
                .find(|t| t.task_id == task.task_id)
                .map(|t| t.capability.clone())
                .unwrap_or_default();
            let data = data
                .map(|d| {
                    let v = json_arg("--data", &d)?;
                    // request/v1 results are request/data parts (§7.6.4).
                    Ok::<Value, Error>(if cap == EXT_REQUEST {
                        json!({"rdv": "request/data", "data": v})
                    } else {
                        v
                    })
                })
                .transpose()?;
            let submit = if fail {
                Submit::Fail { texts }
            } else if question {
                Submit::Question { texts, data }
            } else {
                Submit::ResultWithFiles {
                    texts,
                    data,
                    name,
                    more,
                    files,
                }
            };
            let v = rt
                .command(Command::Task(Core::Submit { task, submit }))
                .await?;
            print(g, &v)
        }
        TaskCommand::Policy {
            contact,
            capability,
            auto_start,
            auto_release,
        } => {
            let contact = contact_of(&rt, &contact)?;
            let v = rt
                .command(Command::Task(Core::Policy {
                    contact,
                    capability: capability_of(&capability),
                    policy: StandingPolicy {
                        auto_start,
                        auto_release,
                    },
                }))
                .await?;
            print(g, &v)
        }
    }
}

// ---- the owner's secret and auto-approve (§5.5.1) ----------------------------

const NOT_A_TERMINAL: &str = "this needs you at an interactive terminal: stdin is not a terminal \
     (SPEC §5.5.1: only the owner turns auto-approve on, never a model or a script)";

pub async fn owner_secret(cmd: OwnerSecretCommand, g: &Global) -> Result<()> {
    let mut rt = open(g).await?;
    match cmd {
        OwnerSecretCommand::Set => {
            if !std::io::stdin().is_terminal() {
                return Err(Error::Input(NOT_A_TERMINAL.into()));
            }
            let first = prompt("Owner passphrase (at least 10 characters): ").await?;
            let again = prompt("Same passphrase again: ").await?;
            if *first != *again {
                return Err(Error::Input("the two passphrases differ".into()));
            }
            let v = rt
                .command(Command::Owner(OwnerCommand::SecretSet {
                    passphrase: Secret::new(first.as_str()),
                }))
                .await?;
            print(g, &v)
        }
        OwnerSecretCommand::Reset => {
            let v = rt
                .command(Command::Owner(OwnerCommand::SecretReset))
                .await?;
            print(g, &v)
        }
    }
}

/// `--until` (the terminal) or `until` (`rdv_auto_approve`): RFC 3339, or
/// a duration from now (<n><s|m|h|d>), as unix seconds.
pub fn until_unix(until: Option<&str>) -> Result<Option<i64>> {
    until
        .map(|s| match rdv_proto::time::parse_time("--until", s) {
            Ok(t) => Ok(t.unix_timestamp()),
            Err(_) => Ok(time::OffsetDateTime::now_utc().unix_timestamp() + duration(s)?),
        })
        .transpose()
}

/// The §5.5.1 warning shown before auto-approve is turned on, in plain
/// words; the terminal and the MCP server's form show the same lines.
pub fn auto_approve_warning(
    rt: &Runtime,
    contact: &AgentId,
    until_unix: Option<i64>,
) -> Result<Vec<String>> {
    let c = rt
        .agent()
        .state
        .contact(contact)
        .cloned()
        .ok_or_else(|| Error::Input(format!("{contact} is not a current contact")))?;
    let caps: Vec<String> = c
        .granted_by_us
        .as_ref()
        .and_then(|g| g.scope.get("invoke"))
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    Ok(vec![
        format!(
            "Auto-approve ALL for {} ({}):",
            c.label
                .as_deref()
                .map(terminal_safe)
                .unwrap_or_else(|| contact.to_string()),
            contact.fingerprint()
        ),
        "  - that contact's agent can make this agent act and answer without asking you;".into(),
        format!(
            "  - it covers today: {}",
            if caps.is_empty() {
                "nothing".into()
            } else {
                caps.iter()
                    .map(|c| terminal_safe(c))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        "  - text and files from that contact reach this agent's model with its tools,".into(),
        "    so prompt injection from that contact gets the power of those tools;".into(),
        format!(
            "  - it ends {};",
            until_unix
                .and_then(|u| rdv_proto::time::from_unix(u).ok())
                .map(format_time)
                .unwrap_or_else(|| "only when you turn it off, or the grant changes".into())
        ),
        format!("  - turn it off with: rdv contact auto-approve {contact} off"),
    ])
}

/// `rdv contact auto-approve <contact> all|off [--until 7d]`.
pub async fn auto_approve(
    rt: &mut Runtime,
    contact: AgentId,
    mode: &str,
    until: Option<String>,
) -> Result<Value> {
    if mode == "off" {
        return rt
            .command(Command::Owner(OwnerCommand::AutoApproveOff {
                contact,
                via: "terminal".into(),
            }))
            .await;
    }
    if !std::io::stdin().is_terminal() {
        return Err(Error::Input(NOT_A_TERMINAL.into()));
    }
    let until_unix = until_unix(until.as_deref())?;
    for line in auto_approve_warning(rt, &contact, until_unix)? {
        eprintln!("{line}");
    }
    let pass = prompt("Owner passphrase: ").await?;
    rt.command(Command::Owner(OwnerCommand::AutoApproveOn {
        contact,
        until: until_unix,
        passphrase: Secret::new(pass.as_str()),
        via: "terminal".into(),
    }))
    .await
}

pub async fn audit(a: AuditArgs, g: &Global) -> Result<()> {
    let rt = open(g).await?;
    let contact = a
        .contact
        .as_deref()
        .map(|c| contact_of(&rt, c))
        .transpose()?;
    let since = a
        .since
        .as_deref()
        .map(|s| rdv_proto::time::parse_time("--since", s).map(|t| t.unix_timestamp()))
        .transpose()?;
    let lines: Vec<Value> = rt
        .agent()
        .state
        .tasks
        .audit
        .values()
        .filter(|l| contact.as_ref().is_none_or(|c| &l.contact == c))
        .filter(|l| since.is_none_or(|s| l.at >= s))
        .map(|l| {
            let mut v = serde_json::to_value(l).unwrap_or(Value::Null);
            if let Some(t) = rdv_proto::time::from_unix(l.at).ok().map(format_time) {
                v["at"] = json!(t);
            }
            v
        })
        .collect();
    if g.json {
        let mut so = std::io::stdout().lock();
        for l in &lines {
            crate::terminal::write_line(&mut so, l)?;
        }
        return Ok(());
    }
    if lines.is_empty() {
        println!("The audit log is empty.");
    }
    for l in &lines {
        println!("{}", crate::terminal::printable(&l.to_string()));
    }
    Ok(())
}

/// One line from the terminal with echo off; the prompt never holds its
/// own answer.
async fn prompt(text: &str) -> Result<Zeroizing<String>> {
    let saved = stty(&["-g"])?;
    let saved = saved.trim().to_string();
    eprint!("{text}");
    stty(&["-echo"])?;
    let mut line = Zeroizing::new(String::new());
    let read = tokio::task::block_in_place(|| std::io::stdin().lock().read_line(&mut line));
    let _ = stty(&[&saved]);
    eprintln!();
    read?;
    let end = line.trim_end_matches(['\n', '\r']).len();
    line.truncate(end);
    Ok(line)
}

fn stty(args: &[&str]) -> Result<String> {
    let o = std::process::Command::new("stty")
        .args(args)
        .stdin(Stdio::inherit())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| Error::Input(format!("cannot turn the terminal's echo off (stty): {e}")))?;
    if !o.status.success() {
        return Err(Error::Input(
            "cannot turn the terminal's echo off (stty failed)".into(),
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_bounded_and_never_panics() {
        assert_eq!(duration("48h").ok(), Some(48 * 3600));
        assert_eq!(duration("3650d").ok(), Some(DURATION_MAX_SECS));
        for bad in [
            "3651d",
            "315360001s",
            "0h",
            "1\u{452}",
            "\u{452}",
            "",
            "h",
            "-1d",
            "1.5h",
        ] {
            let e = duration(bad).unwrap_err().to_string();
            assert!(e.contains("a duration is <n><s|m|h|d>"), "{bad:?}: {e}");
        }
    }
}
