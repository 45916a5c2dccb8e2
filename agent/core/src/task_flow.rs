//! The tasks/v1 engine (§7.6) applied to the agent's state: what a peer
//! sends, what the owner commands, the gates, limits and bounds.

use std::collections::BTreeMap;

use rdv_proto::AgentId;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::gate::StandingPolicy;
use crate::limits::LimitBook;
use crate::owner::{AuditLine, AutoApprove, OwnerSecret};
use crate::record::{Record, Table};
use crate::task::Task;

/// The tasks' part of the state, kept as records.
#[derive(Debug, Default)]
pub struct TaskBook {
    /// By `task::task_key`.
    pub tasks: BTreeMap<String, Task>,
    /// Per contact, bound to our owner's grant (§5.3).
    pub limits: BTreeMap<AgentId, LimitBook>,
    pub owner_secret: Option<OwnerSecret>,
    /// Standing policies per contact, per capability (§5.5).
    pub policies: BTreeMap<AgentId, BTreeMap<String, StandingPolicy>>,
    /// auto_approve: all per contact (§5.5.1).
    pub auto: BTreeMap<AgentId, AutoApprove>,
    /// The audit log, by sequence (§5.5.1: bounded).
    pub audit: BTreeMap<u64, AuditLine>,
    /// The owner's direct-transfer setting (§7.7): off unless set.
    pub direct_transfer: Option<crate::file::DirectTransfer>,
    /// rdv/transfer negotiations, by `file::transfer_key` (§7.7).
    pub transfers: BTreeMap<String, crate::file::Transfer>,
}

fn read<T: DeserializeOwned>(r: &Record) -> Result<T> {
    serde_json::from_value(r.value.clone()).map_err(|e| {
        Error::Store(format!(
            "stored {} record {:?} does not read: {e}",
            r.table.as_str(),
            r.key
        ))
    })
}

fn write<T: Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::Store(format!("serializing state: {e}")))
}

fn id_of(key: &str) -> Option<AgentId> {
    AgentId::parse(key).ok()
}

impl TaskBook {
    pub(crate) fn load(&mut self, r: &Record) -> Result<()> {
        match r.table {
            Table::Task => {
                self.tasks.insert(r.key.clone(), read(r)?);
            }
            Table::TaskLimits => {
                let id = id_of(&r.key)
                    .ok_or_else(|| Error::Store(format!("task_limits key {:?}", r.key)))?;
                self.limits.insert(id, read(r)?);
            }
            Table::Owner => {
                if r.key == "secret" {
                    self.owner_secret = Some(read(r)?);
                } else if r.key == crate::file::DIRECT_TRANSFER_KEY {
                    self.direct_transfer = Some(read(r)?);
                } else if let Some(id) = r.key.strip_prefix("policy:").and_then(id_of) {
                    self.policies.insert(id, read(r)?);
                } else if let Some(id) = r.key.strip_prefix("auto:").and_then(id_of) {
                    self.auto.insert(id, read(r)?);
                } else {
                    return Err(Error::Store(format!("owner key {:?}", r.key)));
                }
            }
            Table::Transfer => {
                self.transfers.insert(r.key.clone(), read(r)?);
            }
            Table::Audit => {
                let n = r
                    .key
                    .parse()
                    .map_err(|_| Error::Store(format!("audit key {:?}", r.key)))?;
                self.audit.insert(n, read(r)?);
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn record_value(&self, table: Table, key: &str) -> Result<Option<Value>> {
        Ok(match table {
            Table::Task => self.tasks.get(key).map(write).transpose()?,
            Table::TaskLimits => id_of(key)
                .and_then(|i| self.limits.get(&i))
                .map(write)
                .transpose()?,
            Table::Owner => {
                if key == "secret" {
                    self.owner_secret.as_ref().map(write).transpose()?
                } else if key == crate::file::DIRECT_TRANSFER_KEY {
                    self.direct_transfer.as_ref().map(write).transpose()?
                } else if let Some(id) = key.strip_prefix("policy:").and_then(id_of) {
                    self.policies.get(&id).map(write).transpose()?
                } else if let Some(id) = key.strip_prefix("auto:").and_then(id_of) {
                    self.auto.get(&id).map(write).transpose()?
                } else {
                    None
                }
            }
            Table::Transfer => self.transfers.get(key).map(write).transpose()?,
            Table::Audit => key
                .parse::<u64>()
                .ok()
                .and_then(|n| self.audit.get(&n))
                .map(write)
                .transpose()?,
            _ => None,
        })
    }
}

/// The audit key of sequence `n`: zero-padded so keys sort.
pub fn audit_key(n: u64) -> String {
    format!("{n:020}")
}

/// A stored task without the confirm codes of its gate (a backup holds
/// none, §5.5).
pub fn without_codes(v: &Value) -> Result<Value> {
    let mut t: Task = serde_json::from_value(v.clone())
        .map_err(|e| Error::Backup(format!("a stored task does not read: {e}")))?;
    match &mut t.gate {
        Some(crate::task::OpenGate::Start { code })
        | Some(crate::task::OpenGate::Release { code, .. }) => *code = None,
        None => {}
    }
    write(&t)
}

// ---- commands ----------------------------------------------------------------

/// A task named by the owner: its taskId, and the peer when two share it.
#[derive(Debug, Clone)]
pub struct TaskRef {
    pub task_id: String,
    pub peer: Option<AgentId>,
}

/// What the executor's owner drafts for release (§5.5 release gate).
#[derive(Debug, Clone)]
pub enum Submit {
    /// A result: an artifact, then the task completes (unless `more`).
    Result {
        texts: Vec<String>,
        data: Option<Value>,
        name: Option<String>,
        more: bool,
    },
    /// A result carrying the owner's files (§7.7): they leave only through
    /// the release gate, never by a standing policy or auto-approve
    /// (§5.5.1).
    ResultWithFiles {
        texts: Vec<String>,
        data: Option<Value>,
        name: Option<String>,
        more: bool,
        files: Vec<crate::task::OwnFile>,
    },
    /// A question: input-required with a message.
    Question {
        texts: Vec<String>,
        data: Option<Value>,
    },
    /// The task could not be done: failed, with a closing message.
    Fail { texts: Vec<String> },
}

/// The owner's task commands (§7.6, §5.5). Each is the owner's own; the
/// gates still need the code shown with the task.
#[derive(Debug, Clone)]
pub enum TaskCommand {
    /// Ask a contact for a task (requester side).
    Request {
        to: AgentId,
        capability: String,
        texts: Vec<String>,
        input: Option<Value>,
        /// Seconds from now (default 48 h, at most 7 days).
        expires_in: Option<i64>,
    },
    /// [`TaskCommand::Request`] with the owner's files (§7.7): held for the
    /// owner's release gate before it leaves (§5.5).
    RequestWithFiles {
        to: AgentId,
        capability: String,
        texts: Vec<String>,
        input: Option<Value>,
        expires_in: Option<i64>,
        files: Vec<crate::task::OwnFile>,
    },
    /// Answer an input-required task.
    Input {
        task: TaskRef,
        texts: Vec<String>,
        input: Option<Value>,
    },
    /// Withdraw a task we requested.
    Cancel {
        task: TaskRef,
        reason: Option<String>,
    },
    /// Keeps the hashed code a front-end issued for the gate it showed
    /// (`digest` is what it showed). The code itself never gets here.
    SetCode {
        task: TaskRef,
        step: crate::gate::GateStep,
        digest: String,
        record: crate::phrase::PhraseRecord,
    },
    /// The start gate: the human approves the task shown.
    Approve {
        task: TaskRef,
        code: crate::owner::Secret,
    },
    /// The release gate: the human approves the draft shown.
    Release {
        task: TaskRef,
        code: crate::owner::Secret,
    },
    /// The human says no: rejected (or failed once started), reason human.
    Decline { task: TaskRef },
    /// A draft for the release gate.
    Submit { task: TaskRef, submit: Submit },
    /// A standing policy for one contact and one capability (§5.5).
    Policy {
        contact: AgentId,
        capability: String,
        policy: StandingPolicy,
    },
}

/// The owner's secret and auto-approve commands (§5.5.1). The front-end
/// takes them only from the owner's own terminal.
#[derive(Debug, Clone)]
pub enum OwnerCommand {
    /// Sets the owner passphrase (refused when one is set).
    SecretSet { passphrase: crate::owner::Secret },
    /// Forgets the passphrase and turns every auto-approve off.
    SecretReset,
    /// Turns auto_approve: all on for a contact (or extends it).
    AutoApproveOn {
        contact: AgentId,
        /// Unix seconds; none is no expiry.
        until: Option<i64>,
        passphrase: crate::owner::Secret,
        /// terminal or form.
        via: String,
    },
    /// Turns it off (needs no confirmation: it only narrows). `via`: where
    /// the owner (or a model, §5.5.1) turned it off, for the audit log:
    /// terminal or mcp.
    AutoApproveOff { contact: AgentId, via: String },
}

// ---- the engine ---------------------------------------------------------------

use rdv_proto::consts::{
    A2A_MAX_REPLIES_PER_TASK, A2A_MAX_SEEN_PER_TASK, AUDIT_LOG_MAX_LINES, EXT_TASKS,
    TASK_DEFAULT_EXPIRES_SECS, TASK_MAX_ARTIFACT_CHUNKS, TASK_MAX_ARTIFACTS, TASK_MAX_EXPIRES_SECS,
    TASK_MAX_INPUTS, TASK_MAX_OPEN_PER_PEER, TASK_MAX_STATUS_UPDATES, TASK_MAX_WAITING_PER_PEER,
    TASK_MAX_WAITING_TOTAL, TASK_PRUNE_AFTER_SECS,
};
use rdv_proto::doc::grant::Scope;
use rdv_proto::time::Instant;
use serde_json::json;

use crate::a2a;
use crate::agent::{Agent, Ctx};
use crate::event::Event;
use crate::gate::{self, CodeVerdict, GateStep};
use crate::limits::{self, Verdict};
use crate::owner::{SecretVerdict, never_covered};
use crate::peer_text::UntrustedPeerText;
use crate::task::{
    ApprovalClass, Draft, Incoming, KeptArtifact, OpenGate, Parsed, Part, Reason, Registry, Role,
    TaskState, check_input, check_result_data, task_key,
};

/// A tier's closeness: the weakest waiting task is rejected first (§7.4).
fn tier_rank(t: &str) -> u8 {
    match t {
        "spouse" => 5,
        "family" => 4,
        "friend" => 3,
        "colleague" => 2,
        "business" => 1,
        _ => 0,
    }
}

/// A peer's text for the human: joined, cleaned, bounded, marked (§5.6).
fn peer_text(texts: &[String]) -> Option<UntrustedPeerText> {
    (!texts.is_empty()).then(|| UntrustedPeerText::new(&texts.join("\n")))
}

fn peer_data(v: Option<&Value>) -> Option<UntrustedPeerText> {
    v.map(|d| UntrustedPeerText::new(&rdv_proto::canon::to_string(d).unwrap_or_default()))
}

fn parts_texts_data(parts: &[Part]) -> (Vec<String>, Vec<Value>) {
    let mut t = Vec::new();
    let mut d = Vec::new();
    for p in parts {
        match p {
            Part::Text(s) => t.push(s.clone()),
            Part::Data(v) => d.push(v.clone()),
            Part::File(_) => {}
        }
    }
    (t, d)
}

/// A pass without asking, for the audit log and the event.
struct Pass {
    via: &'static str,
}

impl Agent {
    fn task_event(&mut self, t: &crate::task::Task, step: &str) -> Event {
        let label = self
            .state
            .contacts
            .get(&t.peer)
            .and_then(|c| c.label.clone());
        let waiting = match (&t.gate, t.is_open()) {
            (Some(OpenGate::Start { .. }), true) => Some("start".to_string()),
            (Some(OpenGate::Release { .. }), true) => Some("release".to_string()),
            _ => None,
        };
        Event::Task {
            step: step.to_string(),
            peer: t.peer.clone(),
            label,
            task_id: t.task_id.clone(),
            capability: Some(t.capability.clone()),
            state: Some(t.state.as_str().to_string()),
            reason: t.reason.map(|r| r.as_str().to_string()),
            waiting_for_you: waiting,
            via: t.started_by.clone(),
            text: None,
            data: None,
            files: Vec::new(),
        }
    }

    fn task_refused_event(
        &mut self,
        from: &AgentId,
        task_id: &str,
        capability: Option<&str>,
        step: &str,
        reason: &str,
    ) {
        let label = self.state.contacts.get(from).and_then(|c| c.label.clone());
        self.tell(Event::Task {
            step: step.into(),
            peer: from.clone(),
            label,
            task_id: task_id.into(),
            capability: capability.map(str::to_string),
            state: Some("rejected".into()),
            reason: Some(reason.into()),
            waiting_for_you: None,
            via: None,
            text: None,
            data: None,
            files: Vec::new(),
        });
    }

    fn task_put(&mut self, t: crate::task::Task) {
        let k = t.key();
        self.state.tasks.tasks.insert(k.clone(), t);
        self.state.touch(Table::Task, k);
    }

    fn task_send(&mut self, to: &AgentId, payload: &Value, ctx: &mut Ctx<'_>) -> Result<()> {
        let routes = self.contact_routes(to);
        self.send_payload(to, payload, routes, ctx)?;
        Ok(())
    }

    /// A status update to the task's peer.
    fn task_send_status(
        &mut self,
        t: &crate::task::Task,
        message: Option<Value>,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let awaiting = t.waits_for_human();
        let p = crate::task::status_payload(
            &t.task_id,
            &t.context_id,
            t.state,
            t.reason,
            awaiting,
            message,
            ctx.now,
        );
        self.task_send(&t.peer.clone(), &p, ctx)
    }

    /// A refusal before any state is kept (§7.6.2): rejected, its reason.
    fn task_reject_stateless(
        &mut self,
        from: &AgentId,
        task_id: &str,
        context_id: &str,
        reason: Reason,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let p = crate::task::status_payload(
            task_id,
            context_id,
            TaskState::Rejected,
            Some(reason),
            false,
            None,
            ctx.now,
        );
        self.task_send(from, &p, ctx)
    }

    /// Our owner's grant to `peer`, parsed: what the peer may invoke on us.
    fn task_inbound_scope(&self, peer: &AgentId) -> Option<(String, Scope, Value, String)> {
        let c = self.state.contact(peer)?;
        let g = c.granted_by_us.as_ref()?;
        let s = Scope::parse(&g.scope, "scope").ok()?;
        Some((g.id.clone(), s, g.scope.clone(), g.tier.clone()))
    }

    /// The peer's grant to us, parsed: what we may invoke on the peer.
    fn task_outbound_scope(&self, peer: &AgentId) -> Option<Scope> {
        let c = self.state.contact(peer)?;
        let g = c.granted_to_us.as_ref()?;
        Scope::parse(&g.scope, "scope").ok()
    }

    /// §5.3 (a): every task or meeting message (`a2a::on_a2a`) counts
    /// towards the grant-wide max_frequency, as a free message does. `true`
    /// when it revoked.
    pub(crate) fn task_count_grant_wide(
        &mut self,
        from: &AgentId,
        ctx: &mut Ctx<'_>,
    ) -> Result<bool> {
        let Some(mut c) = self.state.contact(from).cloned() else {
            return Ok(true);
        };
        let freq = match &c.granted_by_us {
            Some(g) => g
                .scope
                .get("max_frequency")
                .and_then(Value::as_str)
                .map(str::to_string),
            None => Some(crate::agent::LOCAL_DEFAULT_MAX_FREQUENCY.to_string()),
        };
        if let Some(f) = freq
            && let Ok((count, window)) = rdv_proto::time::parse_frequency("max_frequency", &f)
        {
            let since = ctx.unix() - window;
            c.received.retain(|t| *t > since);
            c.received.push(ctx.unix());
            let over = c.received.len() as u64 > count;
            self.state.contacts.insert(from.clone(), c);
            self.state.touch(Table::Contact, from.as_str());
            if over {
                self.revoke_contact(from, "abuse", ctx)?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// §5.3 counting, the last check before a peer's task, or its meeting
    /// proposal (§7.4, capability the meetings URI), is admitted: one
    /// [`LimitBook`] per contact for both, so the 24-hour figure of (b)
    /// counts tasks and proposals together. The book is saved with the
    /// contact here, before any rdv/revoke leaves.
    pub(crate) fn limits_check(
        &mut self,
        from: &AgentId,
        grant_id: &str,
        capability: &str,
        lim: &rdv_proto::doc::grant::InvokeLimits,
        open: u64,
        ctx: &Ctx<'_>,
    ) -> Verdict {
        let stored = self.state.tasks.limits.get(from).cloned();
        let mut book = LimitBook::for_grant(stored, grant_id);
        let verdict = book.check(capability, lim, open, ctx.unix());
        self.state.tasks.limits.insert(from.clone(), book);
        self.state.touch(Table::TaskLimits, from.as_str());
        verdict
    }

    /// §5.3 (b): gross abuse revokes the contact, the human told apart from
    /// a revoke under (a): a `task` event with step `abuse` (for a meeting
    /// proposal, `capability` is the meetings URI), then `revoked` by
    /// `task-abuse`.
    pub(crate) fn revoke_for_abuse(
        &mut self,
        from: &AgentId,
        task_id: &str,
        capability: &str,
        abuse: &crate::limits::Abuse,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let label = self.state.contacts.get(from).and_then(|c| c.label.clone());
        let why = serde_json::to_string(abuse).unwrap_or_default();
        self.tell(Event::Task {
            step: "abuse".into(),
            peer: from.clone(),
            label,
            task_id: task_id.to_string(),
            capability: Some(capability.to_string()),
            state: None,
            reason: Some(why.clone()),
            waiting_for_you: None,
            via: None,
            text: None,
            data: None,
            files: Vec::new(),
        });
        self.revoke_contact_for(from, "task-abuse", Some(why), ctx)
    }

    /// Whether tasks/v1 takes this rdv/cancel (a meeting task goes to the
    /// meetings engine first, `a2a::on_a2a`): a task of ours, or one that
    /// names the tasks extension.
    pub(crate) fn task_claims_cancel(&self, from: &AgentId, task_id: &str, ext: &[String]) -> bool {
        self.state
            .tasks
            .tasks
            .contains_key(&task_key(Role::Executor, from, task_id))
            || ext.iter().any(|e| e == EXT_TASKS)
    }

    /// Whether a status or artifact update is for a task we requested.
    pub(crate) fn task_has_requested(&self, from: &AgentId, task_id: &str) -> bool {
        self.state
            .tasks
            .tasks
            .contains_key(&task_key(Role::Requester, from, task_id))
    }

    /// The tasks/v1 arm of `a2a::on_a2a`: one classified payload from a
    /// current contact.
    pub(crate) fn on_task(
        &mut self,
        from: &AgentId,
        inbound: a2a::Inbound,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        if self.state.contact(from).is_none() {
            return Ok(());
        }
        let parsed = crate::task::from_a2a(inbound);
        if matches!(parsed, Parsed::NotTask | Parsed::Malformed(_)) {
            return Ok(());
        }
        if self.task_count_grant_wide(from, ctx)? {
            return Ok(());
        }
        match parsed {
            Parsed::Task(Incoming::Request {
                message_id,
                task_id,
                context_id,
                capability,
                input,
                expires,
                texts,
                files,
            }) => self.task_exec_request(
                from,
                message_id,
                task_id,
                context_id,
                capability,
                input,
                expires,
                (texts, files),
                ctx,
            ),
            Parsed::Task(Incoming::Input {
                message_id,
                task_id,
                input,
                texts,
                files,
                ..
            }) => self.task_exec_input(from, &message_id, &task_id, input, (texts, files), ctx),
            Parsed::BadFile {
                task_id,
                context_id,
                verb,
                why,
            } => self.task_bad_file(from, &task_id, &context_id, &verb, &why, ctx),
            Parsed::Task(Incoming::Cancel {
                message_id,
                task_id,
                context_id,
                extensions,
                ..
            }) => self.task_exec_cancel(from, &message_id, &task_id, &context_id, &extensions, ctx),
            Parsed::Task(i @ Incoming::Status { .. }) => {
                self.task_req_status(from, i, ctx);
                Ok(())
            }
            Parsed::Task(i @ Incoming::Artifact { .. }) => {
                self.task_req_artifact(from, i, ctx);
                Ok(())
            }
            Parsed::Unsupported(u) => self.task_unsupported(from, u, None, ctx),
            Parsed::NotTask | Parsed::Malformed(_) => Ok(()),
        }
    }

    /// §7.7 "In tasks": a task/request or task/input whose file part fails
    /// the rules is refused whole, before any state: a request is answered
    /// rejected with reason input (as an input outside its schema is), an
    /// input is refused for the human only.
    fn task_bad_file(
        &mut self,
        from: &AgentId,
        task_id: &str,
        context_id: &str,
        verb: &str,
        why: &crate::file::FileError,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let exists = self
            .state
            .tasks
            .tasks
            .contains_key(&task_key(Role::Executor, from, task_id));
        self.tell(Event::Dropped {
            from: Some(from.clone()),
            reason: format!("a {verb} with a file part refused (SPEC §7.7): {why}"),
        });
        self.task_refused_event(from, task_id, None, "refused", "input");
        if verb == "task/request" && !exists {
            return self.task_reject_stateless(from, task_id, context_id, Reason::Input, ctx);
        }
        Ok(())
    }

    /// §7.5 rule 5, §7.6.2: the unsupported reply, with the task's real
    /// state; for a task we do not have only within a grant that allows
    /// some capability; bounded per task. Counted for the human.
    pub(crate) fn task_unsupported(
        &mut self,
        from: &AgentId,
        u: a2a::Unsupported,
        capability: Option<&str>,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let key = task_key(Role::Executor, from, &u.task_id);
        let state = match self.state.tasks.tasks.get_mut(&key) {
            Some(t) => {
                if t.unsupported_replies >= A2A_MAX_REPLIES_PER_TASK {
                    return Ok(());
                }
                t.unsupported_replies += 1;
                let s = t.state;
                self.state.touch(Table::Task, key);
                Some(s)
            }
            None => {
                let allows_some = self
                    .task_inbound_scope(from)
                    .and_then(|(_, s, _, _)| s.invoke)
                    .is_some_and(|i| !i.is_empty());
                if !allows_some {
                    return Ok(());
                }
                None
            }
        };
        self.task_refused_event(from, &u.task_id, capability, "unsupported", "unsupported");
        let mut p = a2a::unsupported_reply(&u, state.map(crate::task::a2a_state), ctx.now);
        if let Some(c) = capability
            && let Some(m) = p
                .pointer_mut(&format!(
                    "/update/metadata/{}",
                    rdv_proto::consts::A2A_UNSUPPORTED_KEY
                        .replace('~', "~0")
                        .replace('/', "~1")
                ))
                .and_then(Value::as_object_mut)
        {
            m.insert("capability".into(), json!(c));
        }
        self.task_send(from, &p, ctx)
    }

    /// The answer to a verb for a task that ended (§7.3): its real end
    /// state, bounded per task.
    fn task_finished_reply(&mut self, key: &str, ctx: &mut Ctx<'_>) -> Result<()> {
        let Some(t) = self.state.tasks.tasks.get_mut(key) else {
            return Ok(());
        };
        if t.finished_replies >= A2A_MAX_REPLIES_PER_TASK {
            return Ok(());
        }
        t.finished_replies += 1;
        let t = t.clone();
        self.state.touch(Table::Task, key);
        self.task_send_status(&t, None, ctx)
    }

    #[allow(clippy::too_many_arguments)]
    fn task_exec_request(
        &mut self,
        from: &AgentId,
        message_id: String,
        task_id: String,
        context_id: String,
        capability: String,
        input: Option<Value>,
        expires: Option<Instant>,
        (texts, files): (Vec<String>, Vec<crate::file::FilePart>),
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let key = task_key(Role::Executor, from, &task_id);
        if let Some(t) = self.state.tasks.tasks.get(&key).cloned() {
            if t.seen.contains(&message_id) {
                return Ok(()); // a duplicate (§7.3 dedupe)
            }
            let mut t = t;
            if t.seen.len() < A2A_MAX_SEEN_PER_TASK {
                t.seen.push(message_id);
            }
            if t.tombstone {
                // §7.3: the cancel overtook it; the request is refused.
                t.tombstone = false;
                t.state = TaskState::Canceled;
                t.updated = ctx.now;
                self.task_put(t);
                return self.task_finished_reply(&key, ctx);
            }
            self.task_put(t.clone());
            if t.state.is_terminal() {
                return self.task_finished_reply(&key, ctx);
            }
            // A re-request of an open task changes nothing (its gate stays
            // bound to what the human was shown).
            return Ok(());
        }
        // §5.3 deny by default; §7.4 only a grant whose invoke covers the
        // capability creates state.
        let Some((grant_id, scope, _, tier)) = self.task_inbound_scope(from) else {
            self.task_refused_event(from, &task_id, Some(&capability), "refused", "scope");
            return self.task_reject_stateless(from, &task_id, &context_id, Reason::Scope, ctx);
        };
        let registry = Registry::builtin();
        let Some(cap) = registry.get(&capability).cloned() else {
            let u = a2a::Unsupported {
                task_id,
                context_id,
                message_id,
                verb: Some("task/request".into()),
                why: "a capability this agent does not implement".into(),
            };
            if scope.invoke.as_ref().is_some_and(|i| !i.is_empty()) {
                return self.task_unsupported(from, u, Some(&capability), ctx);
            }
            self.task_refused_event(from, &u.task_id, Some(&capability), "refused", "scope");
            return self.task_reject_stateless(from, &u.task_id, &u.context_id, Reason::Scope, ctx);
        };
        let Some(lim) = limits::allowed(&scope, &capability) else {
            self.task_refused_event(from, &task_id, Some(&capability), "refused", "scope");
            return self.task_reject_stateless(from, &task_id, &context_id, Reason::Scope, ctx);
        };
        if check_input(cap.shape, input.as_ref()).is_err() {
            self.task_refused_event(from, &task_id, Some(&capability), "refused", "input");
            return self.task_reject_stateless(from, &task_id, &context_id, Reason::Input, ctx);
        }
        let now = ctx.now;
        let expires = expires
            .unwrap_or(now + time::Duration::seconds(TASK_DEFAULT_EXPIRES_SECS))
            .min(now + time::Duration::seconds(TASK_MAX_EXPIRES_SECS));
        if expires <= now {
            self.task_refused_event(from, &task_id, Some(&capability), "refused", "expired");
            return self.task_reject_stateless(from, &task_id, &context_id, Reason::Expired, ctx);
        }
        // §7.4 per peer: finished tasks and tombstones go first; a new task
        // is refused when all are open (not a per-capability limit: it
        // never counts towards abuse).
        if !self.task_room_for(from) {
            self.task_refused_event(from, &task_id, Some(&capability), "refused", "rate");
            return self.task_reject_stateless(from, &task_id, &context_id, Reason::Rate, ctx);
        }
        let class = registry
            .effective_class(&capability, None)
            .unwrap_or(ApprovalClass::FreeForm);
        let mut t = crate::task::Task {
            role: Role::Executor,
            peer: from.clone(),
            task_id: task_id.clone(),
            context_id: context_id.clone(),
            capability: capability.clone(),
            class,
            state: TaskState::Submitted,
            reason: None,
            tombstone: false,
            tier: tier.clone(),
            created: now,
            expires,
            updated: now,
            input,
            texts,
            seen: vec![message_id],
            inputs: 0,
            status_updates: 0,
            artifacts: Vec::new(),
            chunks: 0,
            unsupported_replies: 0,
            finished_replies: 0,
            gate: None,
            started_by: None,
            note: None,
            cancel_sent: false,
            files,
        };
        // Whether it would wait for the human, and who makes room (§7.4).
        let pass = if class.start_gated() {
            self.task_start_pass(&t, ctx)
        } else {
            None
        };
        let mut evict: Option<String> = None;
        if class.start_gated() && pass.is_none() {
            match self.task_waiting_room(from, &tier, now) {
                Ok(e) => evict = e,
                Err(()) => {
                    self.task_refused_event(from, &task_id, Some(&capability), "refused", "busy");
                    return self.task_reject_stateless(
                        from,
                        &task_id,
                        &context_id,
                        Reason::Busy,
                        ctx,
                    );
                }
            }
        }
        // §5.3 counting: the per-capability limits last, then admitted.
        let open = self
            .state
            .tasks
            .tasks
            .values()
            .filter(|x| {
                x.role == Role::Executor
                    && &x.peer == from
                    && x.capability == capability
                    && x.is_open()
            })
            .count() as u64;
        let verdict = self.limits_check(from, &grant_id, &capability, &lim, open, ctx);
        if let Verdict::Rejected { revoke, .. } = verdict {
            self.task_refused_event(from, &task_id, Some(&capability), "refused", "rate");
            self.task_reject_stateless(from, &task_id, &context_id, Reason::Rate, ctx)?;
            if let Some(abuse) = revoke {
                self.revoke_for_abuse(from, &task_id, &capability, &abuse, ctx)?;
            }
            return Ok(());
        }
        if let Some(k) = evict {
            self.task_reject_waiting(&k, ctx)?;
        }
        // Admitted.
        let mut ev_step = "received";
        match class {
            ApprovalClass::Notify => t.state = TaskState::Completed,
            ApprovalClass::Auto => {
                t.state = TaskState::Working;
                t.started_by = Some("class".into());
            }
            ApprovalClass::Confirm | ApprovalClass::FreeForm => match pass {
                Some(p) => {
                    t.state = TaskState::Working;
                    t.started_by = Some(p.via.into());
                    self.audit_pass(
                        &t,
                        GateStep::Start,
                        &gate::start_digest(&t),
                        None,
                        p.via,
                        ctx,
                    );
                    ev_step = "passed";
                }
                None => t.gate = Some(OpenGate::Start { code: None }),
            },
        }
        let mut ev = self.task_event(&t, ev_step);
        if let Event::Task {
            text, data, files, ..
        } = &mut ev
        {
            *text = peer_text(&t.texts);
            *data = peer_data(t.input.as_ref());
            *files = t.files.iter().map(crate::file::FilePart::shown).collect();
        }
        self.tell(ev);
        self.task_put(t.clone());
        self.task_send_status(&t, None, ctx)
    }

    /// Makes room for one more executor task of `from` (§7.4: 32 per peer,
    /// finished tasks and tombstones evicted first, oldest first).
    fn task_room_for(&mut self, from: &AgentId) -> bool {
        let mine: Vec<(String, bool, Instant)> = self
            .state
            .tasks
            .tasks
            .values()
            .filter(|x| x.role == Role::Executor && &x.peer == from)
            .map(|x| (x.key(), x.is_open(), x.updated))
            .collect();
        if mine.len() < TASK_MAX_OPEN_PER_PEER {
            return true;
        }
        let Some((k, _, _)) = mine
            .iter()
            .filter(|(_, open, _)| !open)
            .min_by_key(|(_, _, at)| *at)
        else {
            return false;
        };
        let k = k.clone();
        self.state.tasks.tasks.remove(&k);
        self.state.touch(Table::Task, k);
        true
    }

    /// §7.4 waiting for the human: per peer 4, in all 64. When full, the
    /// weakest (lowest tier, then oldest) is rejected, the newcomer
    /// included: `Err` when the newcomer is the weakest, else the key of
    /// the task to reject once the newcomer is admitted.
    fn task_waiting_room(
        &self,
        from: &AgentId,
        tier: &str,
        now: Instant,
    ) -> std::result::Result<Option<String>, ()> {
        let waiting: Vec<&crate::task::Task> = self
            .state
            .tasks
            .tasks
            .values()
            .filter(|x| x.waits_for_human())
            .collect();
        let peer: Vec<&&crate::task::Task> = waiting.iter().filter(|x| &x.peer == from).collect();
        let pool: Vec<&crate::task::Task> = if peer.len() >= TASK_MAX_WAITING_PER_PEER {
            peer.into_iter().copied().collect()
        } else if waiting.len() >= TASK_MAX_WAITING_TOTAL {
            waiting
        } else {
            return Ok(None);
        };
        let weakest = pool
            .iter()
            .min_by_key(|x| (tier_rank(&x.tier), x.created))
            .map(|x| (tier_rank(&x.tier), x.created, x.key()));
        match weakest {
            // The newcomer is the newest: it is the weakest unless its
            // tier is closer than the weakest waiting one's.
            Some((r, _, k)) if tier_rank(tier) > r => Ok(Some(k)),
            _ => {
                let _ = now;
                Err(())
            }
        }
    }

    /// Rejects a waiting task to make room (§7.4), reason busy.
    fn task_reject_waiting(&mut self, key: &str, ctx: &mut Ctx<'_>) -> Result<()> {
        let Some(mut t) = self.state.tasks.tasks.get(key).cloned() else {
            return Ok(());
        };
        t.state = TaskState::Rejected;
        t.reason = Some(Reason::Busy);
        t.gate = None;
        t.updated = ctx.now;
        let ev = self.task_event(&t, "refused");
        self.tell(ev);
        self.task_put(t.clone());
        self.task_send_status(&t, None, ctx)
    }

    /// Whether a start gate passes without asking: the owner's
    /// auto_approve: all for the contact, or a standing policy (never for
    /// free-form, §5.5, §7.6.3).
    fn task_start_pass(&mut self, t: &crate::task::Task, ctx: &mut Ctx<'_>) -> Option<Pass> {
        if self.auto_covers(&t.peer, &t.capability, ctx) {
            return Some(Pass {
                via: "auto-approve",
            });
        }
        let p = self
            .state
            .tasks
            .policies
            .get(&t.peer)
            .and_then(|m| m.get(&t.capability))
            .copied()
            .unwrap_or_default();
        p.passes(GateStep::Start, t.class)
            .then_some(Pass { via: "policy" })
    }

    fn task_release_pass(&mut self, t: &crate::task::Task, ctx: &mut Ctx<'_>) -> Option<Pass> {
        if self.auto_covers(&t.peer, &t.capability, ctx) {
            return Some(Pass {
                via: "auto-approve",
            });
        }
        let p = self
            .state
            .tasks
            .policies
            .get(&t.peer)
            .and_then(|m| m.get(&t.capability))
            .copied()
            .unwrap_or_default();
        p.passes(GateStep::Release, t.class)
            .then_some(Pass { via: "policy" })
    }

    /// §5.5.1: whether auto_approve: all on `peer` covers a task gate of
    /// `capability` now. A setting that no longer stands is turned off
    /// here (logged, and the human told).
    pub(crate) fn auto_covers(
        &mut self,
        peer: &AgentId,
        capability: &str,
        ctx: &mut Ctx<'_>,
    ) -> bool {
        let Some((a, grant)) = self.auto_standing(peer, ctx) else {
            return false;
        };
        let allowed_now = grant
            .and_then(|(_, s)| Scope::parse(&s, "scope").ok())
            .is_some_and(|s| limits::allowed(&s, capability).is_some());
        allowed_now && a.covers(capability) && !never_covered(crate::owner::Action::TaskGate)
    }

    /// §5.5.1 (issue #44): whether auto_approve: all on `peer` covers the
    /// accept or confirm of a meeting negotiation `peer` started: only if
    /// the setting covered meetings when the owner set it, and the grant
    /// allows them now.
    pub(crate) fn auto_covers_meeting(&mut self, peer: &AgentId, ctx: &mut Ctx<'_>) -> bool {
        let Some((a, _)) = self.auto_standing(peer, ctx) else {
            return false;
        };
        a.meetings
            && self.meetings_from(peer).is_some()
            && !never_covered(crate::owner::Action::MeetingConfirm)
    }

    /// The auto_approve setting on `peer` if it still stands, with our
    /// grant to `peer` (id, scope). A setting that no longer stands is
    /// turned off here (logged, and the human told).
    fn auto_standing(
        &mut self,
        peer: &AgentId,
        ctx: &mut Ctx<'_>,
    ) -> Option<(crate::owner::AutoApprove, Option<(String, Value)>)> {
        let a = self.state.tasks.auto.get(peer).cloned()?;
        let grant = self
            .state
            .contact(peer)
            .and_then(|c| c.granted_by_us.as_ref())
            .map(|g| (g.id.clone(), g.scope.clone()));
        let seed = *self.key().seed();
        let mut off = a
            .standing(
                grant.as_ref().map(|(i, s)| (i.as_str(), s)),
                ctx.unix(),
                &seed,
            )
            .err()
            .map(|e| {
                serde_json::to_value(e)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            });
        // §5.5.1: a fork or rollback of the contact's channel turns it off.
        if off.is_none()
            && self
                .state
                .channels_in
                .get(peer)
                .and_then(|ch| ch.refused())
                .is_some()
        {
            off = Some("fork".into());
        }
        if let Some(why) = off {
            let action = if why == "expired" { "expire" } else { "off" };
            self.auto_off(peer, action, Some(why), "agent", ctx);
            return None;
        }
        Some((a, grant))
    }

    fn auto_off(
        &mut self,
        peer: &AgentId,
        action: &str,
        why: Option<String>,
        via: &str,
        ctx: &mut Ctx<'_>,
    ) {
        if self.state.tasks.auto.remove(peer).is_none() {
            return;
        }
        self.state.touch(Table::Owner, format!("auto:{peer}"));
        self.audit_append(crate::owner::AuditLine {
            at: ctx.unix(),
            contact: peer.clone(),
            action: action.into(),
            capability: None,
            task_id: None,
            gate: None,
            digest: None,
            left_sha256: None,
            left_bytes: None,
            via: via.into(),
        });
        self.tell(Event::AutoApprove {
            id: peer.clone(),
            action: action.into(),
            reason: why,
            until: None,
        });
    }

    /// Appends one audit line, keeping the last 1000 (§5.5.1).
    pub(crate) fn audit_append(&mut self, line: crate::owner::AuditLine) {
        let n = self
            .state
            .tasks
            .audit
            .keys()
            .next_back()
            .map_or(1, |k| k + 1);
        self.state.tasks.audit.insert(n, line);
        self.state.touch(Table::Audit, audit_key(n));
        while self.state.tasks.audit.len() > AUDIT_LOG_MAX_LINES {
            let Some(first) = self.state.tasks.audit.keys().next().copied() else {
                break;
            };
            self.state.tasks.audit.remove(&first);
            self.state.touch(Table::Audit, audit_key(first));
        }
    }

    fn audit_pass(
        &mut self,
        t: &crate::task::Task,
        step: GateStep,
        digest: &str,
        left: Option<&Value>,
        via: &str,
        ctx: &mut Ctx<'_>,
    ) {
        let (sha, len) = match left.and_then(|v| rdv_proto::canon::to_vec(v).ok()) {
            Some(b) => (
                Some(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&b))),
                Some(b.len() as u64),
            ),
            None => (None, None),
        };
        self.audit_append(crate::owner::AuditLine {
            at: ctx.unix(),
            contact: t.peer.clone(),
            action: "pass".into(),
            capability: Some(t.capability.clone()),
            task_id: Some(t.task_id.clone()),
            gate: Some(step.as_str().into()),
            digest: Some(digest.into()),
            left_sha256: sha,
            left_bytes: len,
            via: via.into(),
        });
    }

    fn task_exec_input(
        &mut self,
        from: &AgentId,
        message_id: &str,
        task_id: &str,
        input: Option<Value>,
        (texts, files): (Vec<String>, Vec<crate::file::FilePart>),
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let key = task_key(Role::Executor, from, task_id);
        let Some(mut t) = self.state.tasks.tasks.get(&key).cloned() else {
            return Ok(());
        };
        if t.seen.iter().any(|s| s == message_id) {
            return Ok(());
        }
        if t.seen.len() >= A2A_MAX_SEEN_PER_TASK {
            return Ok(());
        }
        t.seen.push(message_id.to_string());
        self.task_put(t.clone());
        if t.state.is_terminal() || t.tombstone {
            return self.task_finished_reply(&key, ctx);
        }
        // §7.6.2: only while input-required, at most 8 per task.
        if t.state != TaskState::InputRequired || t.inputs >= TASK_MAX_INPUTS {
            self.task_refused_event(from, task_id, Some(&t.capability), "refused", "input");
            return Ok(());
        }
        let shape = Registry::builtin().get(&t.capability).map(|c| c.shape);
        if shape.is_none_or(|s| check_input(s, input.as_ref()).is_err()) {
            self.task_refused_event(from, task_id, Some(&t.capability), "refused", "input");
            return Ok(());
        }
        t.inputs += 1;
        if input.is_some() {
            t.input = input;
        }
        t.texts.extend(texts.iter().cloned());
        let shown: Vec<Value> = files.iter().map(crate::file::FilePart::shown).collect();
        t.files.extend(files);
        t.state = TaskState::Working;
        t.updated = ctx.now;
        let mut ev = self.task_event(&t, "input");
        if let Event::Task {
            text, data, files, ..
        } = &mut ev
        {
            *text = peer_text(&texts);
            *data = peer_data(t.input.as_ref());
            *files = shown;
        }
        self.tell(ev);
        self.task_put(t.clone());
        self.task_send_status(&t, None, ctx)
    }

    fn task_exec_cancel(
        &mut self,
        from: &AgentId,
        message_id: &str,
        task_id: &str,
        context_id: &str,
        extensions: &[String],
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let key = task_key(Role::Executor, from, task_id);
        if let Some(mut t) = self.state.tasks.tasks.get(&key).cloned() {
            if t.seen.iter().any(|s| s == message_id) {
                return Ok(());
            }
            if t.seen.len() < A2A_MAX_SEEN_PER_TASK {
                t.seen.push(message_id.to_string());
            }
            if !t.is_open() {
                self.task_put(t);
                return self.task_finished_reply(&key, ctx);
            }
            // The gate dies with the task: an approval for it now finds
            // nothing open (§5.5).
            t.state = TaskState::Canceled;
            t.gate = None;
            t.updated = ctx.now;
            let ev = self.task_event(&t, "canceled");
            self.tell(ev);
            self.task_put(t.clone());
            return self.task_send_status(&t, None, ctx);
        }
        // §7.3 tombstone, only under a grant whose invoke covers the
        // capability the cancel names (§7.4).
        let Some((_, scope, _, tier)) = self.task_inbound_scope(from) else {
            return Ok(());
        };
        let registry = Registry::builtin();
        let Some(cap) = extensions
            .iter()
            .find(|e| registry.get(e).is_some() && limits::allowed(&scope, e).is_some())
            .cloned()
        else {
            return Ok(());
        };
        if !self.task_room_for(from) {
            return Ok(());
        }
        let now = ctx.now;
        let t = crate::task::Task {
            role: Role::Executor,
            peer: from.clone(),
            task_id: task_id.to_string(),
            context_id: context_id.to_string(),
            capability: cap,
            class: ApprovalClass::FreeForm,
            state: TaskState::Canceled,
            reason: None,
            tombstone: true,
            tier,
            created: now,
            expires: now + time::Duration::seconds(TASK_MAX_EXPIRES_SECS),
            updated: now,
            input: None,
            texts: Vec::new(),
            seen: vec![message_id.to_string()],
            inputs: 0,
            status_updates: 0,
            artifacts: Vec::new(),
            chunks: 0,
            unsupported_replies: 0,
            finished_replies: 0,
            gate: None,
            started_by: None,
            note: None,
            cancel_sent: false,
            files: Vec::new(),
        };
        self.task_put(t);
        Ok(())
    }

    /// The executor's status for a task we requested: followed forward
    /// only (§7.6.2), bounded, its reason and message shown as peer text.
    fn task_req_status(&mut self, from: &AgentId, i: Incoming, ctx: &mut Ctx<'_>) {
        let Incoming::Status {
            task_id,
            context_id,
            state,
            message,
            reason,
            unsupported,
            ..
        } = i
        else {
            return;
        };
        let key = task_key(Role::Requester, from, &task_id);
        let Some(mut t) = self.state.tasks.tasks.get(&key).cloned() else {
            return;
        };
        if t.context_id != context_id || t.status_updates >= TASK_MAX_STATUS_UPDATES {
            return;
        }
        t.status_updates += 1;
        let moved = t.state.may_follow(state);
        if moved {
            t.state = state;
            t.reason = reason;
        }
        let (texts, datas) = parts_texts_data(&message);
        let shape = Registry::builtin().get(&t.capability).map(|c| c.shape);
        // A data part must be the capability's shape (§7.6.4: request/data).
        let datas: Vec<Value> = datas
            .into_iter()
            .filter(|d| shape.is_some_and(|s| check_result_data(s, d).is_ok()))
            .collect();
        if moved && (!texts.is_empty() || !datas.is_empty()) {
            t.note = Some(json!({"texts": texts, "data": datas}));
        }
        t.updated = ctx.now;
        self.task_put(t.clone());
        if !moved && unsupported.is_none() {
            return;
        }
        let mut ev = self.task_event(
            &t,
            if unsupported.is_some() {
                "unsupported"
            } else {
                "update"
            },
        );
        if let Event::Task {
            text,
            data,
            waiting_for_you,
            ..
        } = &mut ev
        {
            *waiting_for_you = None;
            *text = peer_text(&texts);
            *data = peer_data(datas.first());
            if let Some((mid, verb)) = &unsupported {
                *data = Some(UntrustedPeerText::new(&format!(
                    "refused message {mid} verb {}",
                    verb.as_deref().unwrap_or("?")
                )));
            }
        }
        self.tell(ev);
    }

    /// An artifact of a task we requested: validated against the
    /// capability's shape, bounded (§7.4), shown as peer content.
    fn task_req_artifact(&mut self, from: &AgentId, i: Incoming, ctx: &mut Ctx<'_>) {
        let Incoming::Artifact {
            task_id,
            context_id,
            artifact_id,
            name,
            parts,
            append,
            last_chunk,
        } = i
        else {
            return;
        };
        let key = task_key(Role::Requester, from, &task_id);
        let Some(mut t) = self.state.tasks.tasks.get(&key).cloned() else {
            return;
        };
        if t.context_id != context_id
            || t.state.is_terminal()
            || t.chunks >= TASK_MAX_ARTIFACT_CHUNKS
        {
            return;
        }
        let shape = Registry::builtin().get(&t.capability).map(|c| c.shape);
        let (texts, datas) = parts_texts_data(&parts);
        let bad = datas
            .iter()
            .any(|d| shape.is_none_or(|s| check_result_data(s, d).is_err()));
        t.chunks += 1;
        t.updated = ctx.now;
        if bad {
            self.task_put(t.clone());
            self.tell(Event::Dropped {
                from: Some(from.clone()),
                reason: "an artifact whose data the capability does not define".into(),
            });
            return;
        }
        let json_parts = crate::task::a2a_parts_json(&parts);
        match t
            .artifacts
            .iter_mut()
            .find(|a| a.artifact_id == artifact_id)
        {
            Some(a) if append => {
                a.parts.extend(json_parts);
                a.parts
                    .truncate(rdv_proto::consts::A2A_MAX_PARTS * TASK_MAX_ARTIFACTS);
                a.last_chunk = last_chunk;
            }
            Some(a) => {
                a.parts = json_parts;
                a.last_chunk = last_chunk;
            }
            None => {
                if t.artifacts.len() >= TASK_MAX_ARTIFACTS {
                    self.task_put(t);
                    return;
                }
                t.artifacts.push(KeptArtifact {
                    artifact_id: artifact_id.clone(),
                    name: name.clone(),
                    parts: json_parts,
                    last_chunk,
                });
            }
        }
        self.task_put(t.clone());
        let mut ev = self.task_event(&t, "artifact");
        if let Event::Task {
            text, data, files, ..
        } = &mut ev
        {
            *text = peer_text(&texts);
            *data = peer_data(datas.first());
            *files = crate::task::files_of(&parts)
                .iter()
                .map(crate::file::FilePart::shown)
                .collect();
        }
        self.tell(ev);
    }
}

// ---- the owner's commands -------------------------------------------------------

/// A verdict on a code as the reply says it.
fn verdict_value(v: &CodeVerdict) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn check_texts(texts: &[String], max_parts: usize) -> Result<()> {
    if texts.len() > max_parts {
        return Err(Error::Input(format!("at most {max_parts} text parts")));
    }
    for t in texts {
        if t.chars().count() > rdv_proto::consts::A2A_TEXT_MAX_CHARS {
            return Err(Error::Input(format!(
                "a text part is at most {} characters (SPEC §7.4)",
                rdv_proto::consts::A2A_TEXT_MAX_CHARS
            )));
        }
    }
    Ok(())
}

impl Agent {
    /// The key of the task `r` names.
    pub fn find_task(&self, r: &TaskRef) -> Result<String> {
        let hits: Vec<&crate::task::Task> = self
            .state
            .tasks
            .tasks
            .values()
            .filter(|t| t.task_id == r.task_id && r.peer.as_ref().is_none_or(|p| p == &t.peer))
            .collect();
        match hits.as_slice() {
            [one] => Ok(one.key()),
            [] => Err(Error::NotFound(format!("no task {}", r.task_id))),
            _ => Err(Error::Input(format!(
                "{} tasks have the id {}: name the contact",
                hits.len(),
                r.task_id
            ))),
        }
    }

    fn task_mut(&mut self, key: &str) -> Result<crate::task::Task> {
        self.state
            .tasks
            .tasks
            .get(key)
            .cloned()
            .ok_or_else(|| Error::NotFound("no such task".into()))
    }

    pub(crate) fn task_command(&mut self, c: TaskCommand, ctx: &mut Ctx<'_>) -> Result<Value> {
        match c {
            TaskCommand::Request {
                to,
                capability,
                texts,
                input,
                expires_in,
            } => self.task_request(to, capability, (texts, Vec::new()), input, expires_in, ctx),
            TaskCommand::RequestWithFiles {
                to,
                capability,
                texts,
                input,
                expires_in,
                files,
            } => self.task_request(to, capability, (texts, files), input, expires_in, ctx),
            TaskCommand::Input { task, texts, input } => {
                let key = self.find_task(&task)?;
                let mut t = self.task_mut(&key)?;
                if t.role != Role::Requester {
                    return Err(Error::Input("only the requester answers a task".into()));
                }
                // §7.6.2: only while input-required, at most 8 times.
                if t.state != TaskState::InputRequired {
                    return Err(Error::Refused(format!(
                        "the task is {}: task/input only answers input-required (SPEC §7.6.2)",
                        t.state.as_str()
                    )));
                }
                if t.inputs >= TASK_MAX_INPUTS {
                    return Err(Error::Refused("at most 8 task/input per task".into()));
                }
                check_texts(&texts, rdv_proto::consts::A2A_MAX_PARTS - 1)?;
                if let Some(s) = Registry::builtin().get(&t.capability).map(|c| c.shape) {
                    check_input(s, input.as_ref()).map_err(|e| Error::Input(e.to_string()))?;
                }
                let mut data = json!({"rdv": "task/input"});
                if let Some(i) = &input {
                    data["input"] = i.clone();
                }
                let p = crate::task::message_payload(
                    &ctx.uuid(),
                    &t.task_id,
                    &t.context_id,
                    &t.capability,
                    data,
                    &texts,
                    &[],
                );
                t.inputs += 1;
                t.updated = ctx.now;
                self.task_put(t.clone());
                self.task_send(&t.peer, &p, ctx)?;
                Ok(json!({"task_id": t.task_id, "sent": "task/input"}))
            }
            TaskCommand::Cancel { task, reason } => {
                let key = self.find_task(&task)?;
                let mut t = self.task_mut(&key)?;
                if t.role != Role::Requester {
                    return Err(Error::Input(
                        "this agent executes that task: use rdv task decline".into(),
                    ));
                }
                if !t.is_open() {
                    return Err(Error::Refused(format!("the task is {}", t.state.as_str())));
                }
                if matches!(
                    &t.gate,
                    Some(OpenGate::Release {
                        draft: Draft::Request { .. },
                        ..
                    })
                ) {
                    // Held for release and never sent: withdrawn here only.
                    t.gate = None;
                    t.state = TaskState::Canceled;
                    t.updated = ctx.now;
                    self.task_put(t.clone());
                    return Ok(json!({"task_id": t.task_id, "sent": null, "state": "canceled"}));
                }
                let mut data = json!({"rdv": "rdv/cancel"});
                if let Some(r) = &reason {
                    if r.chars().count() > crate::task::TASK_NOTE_MAX_CHARS {
                        return Err(Error::Input("a reason is at most 200 characters".into()));
                    }
                    data["reason"] = json!(r);
                }
                let p = crate::task::message_payload(
                    &ctx.uuid(),
                    &t.task_id,
                    &t.context_id,
                    &t.capability,
                    data,
                    &[],
                    &[],
                );
                t.cancel_sent = true;
                t.updated = ctx.now;
                self.task_put(t.clone());
                self.task_send(&t.peer, &p, ctx)?;
                Ok(json!({"task_id": t.task_id, "sent": "rdv/cancel"}))
            }
            TaskCommand::SetCode {
                task,
                step,
                digest,
                record,
            } => {
                let key = self.find_task(&task)?;
                let mut t = self.task_mut(&key)?;
                let ok = gate::set_code(&mut t, step, &digest, record);
                if ok {
                    self.task_put(t);
                }
                Ok(json!({"code_set": ok}))
            }
            TaskCommand::Approve { task, code } => {
                let key = self.find_task(&task)?;
                let mut t = self.task_mut(&key)?;
                let v = gate::check_code(&mut t, GateStep::Start, code.expose(), ctx.now);
                if v == CodeVerdict::Approved {
                    t.gate = None;
                    t.state = TaskState::Working;
                    t.started_by = Some("code".into());
                    t.updated = ctx.now;
                    self.task_put(t.clone());
                    self.task_send_status(&t, None, ctx)?;
                } else if v != CodeVerdict::NotOpen {
                    self.task_put(t.clone());
                }
                Ok(
                    json!({"task_id": t.task_id, "gate": "start", "result": verdict_value(&v), "state": t.state.as_str()}),
                )
            }
            TaskCommand::Release { task, code } => {
                let key = self.find_task(&task)?;
                let mut t = self.task_mut(&key)?;
                let v = gate::check_code(&mut t, GateStep::Release, code.expose(), ctx.now);
                if v == CodeVerdict::Approved {
                    self.task_release(t.clone(), None, ctx)?;
                } else if v != CodeVerdict::NotOpen {
                    self.task_put(t.clone());
                }
                let state = self
                    .state
                    .tasks
                    .tasks
                    .get(&key)
                    .map_or("gone", |x| x.state.as_str());
                Ok(
                    json!({"task_id": t.task_id, "gate": "release", "result": verdict_value(&v), "state": state}),
                )
            }
            TaskCommand::Decline { task } => {
                let key = self.find_task(&task)?;
                let mut t = self.task_mut(&key)?;
                if t.role != Role::Executor || !t.is_open() {
                    return Err(Error::Refused("no open task of a peer by that id".into()));
                }
                t.state = if t.started_by.is_some() {
                    TaskState::Failed
                } else {
                    TaskState::Rejected
                };
                t.reason = Some(Reason::Human);
                t.gate = None;
                t.updated = ctx.now;
                self.task_put(t.clone());
                self.task_send_status(&t, None, ctx)?;
                Ok(json!({"task_id": t.task_id, "state": t.state.as_str(), "reason": "human"}))
            }
            TaskCommand::Submit { task, submit } => self.task_submit(&task, submit, ctx),
            TaskCommand::Policy {
                contact,
                capability,
                policy,
            } => {
                if self.state.contact(&contact).is_none() {
                    return Err(Error::NotFound(format!(
                        "{contact} is not a current contact"
                    )));
                }
                let m = self
                    .state
                    .tasks
                    .policies
                    .entry(contact.clone())
                    .or_default();
                if policy == StandingPolicy::default() {
                    m.remove(&capability);
                } else {
                    m.insert(capability.clone(), policy);
                }
                if m.is_empty() {
                    self.state.tasks.policies.remove(&contact);
                }
                self.state.touch(Table::Owner, format!("policy:{contact}"));
                let free_form = Registry::builtin()
                    .get(&capability)
                    .is_some_and(|c| c.class == ApprovalClass::FreeForm);
                Ok(json!({
                    "contact": contact, "capability": capability,
                    "auto_start": policy.auto_start, "auto_release": policy.auto_release,
                    "note": if free_form && policy.auto_start {
                        "a free-form capability always waits for you to start it (SPEC §5.5)"
                    } else { "" },
                }))
            }
        }
    }

    fn task_request(
        &mut self,
        to: AgentId,
        capability: String,
        (texts, files): (Vec<String>, Vec<crate::task::OwnFile>),
        input: Option<Value>,
        expires_in: Option<i64>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Value> {
        if self.state.contact(&to).is_none() {
            return Err(Error::NotFound(format!("{to} is not a current contact")));
        }
        if !files.is_empty() {
            // §7.7: files only to a peer whose card lists the files URI,
            // and within the parts of one message.
            let lists = self.state.contact(&to).is_some_and(|c| {
                c.card
                    .get("capabilities")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x == rdv_proto::consts::EXT_FILES))
            });
            if !lists {
                return Err(Error::Refused(
                    "the peer's card does not list the files extension (SPEC §7.7)".into(),
                ));
            }
            if texts.len() + files.len() > rdv_proto::consts::A2A_MAX_PARTS - 1 {
                return Err(Error::Input(format!(
                    "at most {} text and file parts in a request",
                    rdv_proto::consts::A2A_MAX_PARTS - 1
                )));
            }
        }
        // §5.3 senders check first: deny by default, then the peer's limits.
        let scope = self.task_outbound_scope(&to);
        let Some(lim) = scope.as_ref().and_then(|s| limits::allowed(s, &capability)) else {
            return Err(Error::Refused(format!(
                "scope: {to}'s grant does not let this agent invoke {capability} (SPEC §5.3)"
            )));
        };
        check_texts(&texts, rdv_proto::consts::A2A_MAX_PARTS - 1)?;
        match Registry::builtin().get(&capability) {
            Some(c) => {
                check_input(c.shape, input.as_ref()).map_err(|e| Error::Input(e.to_string()))?
            }
            None => {
                if let Some(i) = &input
                    && !i.is_object()
                {
                    return Err(Error::Input("input must be a JSON object".into()));
                }
            }
        }
        let now = ctx.unix();
        let window = lim.max_frequency.map_or(0, |f| f.window_secs);
        let mine: Vec<&crate::task::Task> = self
            .state
            .tasks
            .tasks
            .values()
            .filter(|t| t.role == Role::Requester && t.peer == to && t.capability == capability)
            .collect();
        let open = mine.iter().filter(|t| t.is_open()).count() as u64;
        let sent: Vec<i64> = mine
            .iter()
            .map(|t| t.created.unix_timestamp())
            .filter(|t| *t > now - window)
            .collect();
        if let Err(l) = limits::sender_check(&lim, open, &sent, now) {
            return Err(Error::Refused(format!(
                "rate: {to}'s grant allows no more of {capability} now ({}); nothing was sent (SPEC §5.3)",
                match l {
                    limits::Limit::MaxOpen => "max_open",
                    limits::Limit::MaxFrequency => "max_frequency",
                }
            )));
        }
        let secs = expires_in
            .unwrap_or(TASK_DEFAULT_EXPIRES_SECS)
            .clamp(60, TASK_MAX_EXPIRES_SECS);
        let expires = ctx.now + time::Duration::seconds(secs);
        let (task_id, context_id, message_id) = (ctx.uuid(), ctx.uuid(), ctx.uuid());
        let mut data = json!({
            "rdv": "task/request",
            "capability": capability,
            "expires": rdv_proto::time::format_time(expires),
        });
        if let Some(i) = &input {
            data["input"] = i.clone();
        }
        let parts: Vec<crate::file::FilePart> = files.iter().map(|f| f.part.clone()).collect();
        let p = crate::task::message_payload(
            &message_id,
            &task_id,
            &context_id,
            &capability,
            data,
            &texts,
            &parts,
        );
        let class = Registry::builtin()
            .get(&capability)
            .map_or(ApprovalClass::FreeForm, |c| c.class);
        let t = crate::task::Task {
            role: Role::Requester,
            peer: to.clone(),
            task_id: task_id.clone(),
            context_id: context_id.clone(),
            capability: capability.clone(),
            class,
            state: TaskState::Submitted,
            reason: None,
            tombstone: false,
            tier: String::new(),
            created: ctx.now,
            expires,
            updated: ctx.now,
            input,
            texts,
            seen: vec![message_id],
            inputs: 0,
            status_updates: 0,
            artifacts: Vec::new(),
            chunks: 0,
            unsupported_replies: 0,
            finished_replies: 0,
            gate: None,
            started_by: None,
            note: None,
            cancel_sent: false,
            files: parts,
        };
        if !files.is_empty() {
            // §5.5: a request with the owner's files is held for the same
            // release gate as a result; never passed by a policy or
            // auto-approve (§5.5.1).
            let sources = files
                .iter()
                .map(|f| crate::task::FileSource {
                    sha256: f.part.sha256(),
                    source: f.source.clone(),
                })
                .collect();
            let mut t = t;
            t.gate = Some(OpenGate::Release {
                draft: Draft::Request {
                    message: p,
                    sources,
                },
                code: None,
            });
            self.task_put(t.clone());
            let ev = self.task_event(&t, "draft");
            self.tell(ev);
            return Ok(json!({
                "task_id": task_id, "context_id": context_id, "to": to,
                "capability": capability, "state": "submitted", "sent": false,
                "waiting_for_you": "release",
                "expires": rdv_proto::time::format_time(expires),
            }));
        }
        self.task_put(t);
        self.task_send(&to, &p, ctx)?;
        Ok(json!({
            "task_id": task_id, "context_id": context_id, "to": to,
            "capability": capability, "state": "submitted",
            "expires": rdv_proto::time::format_time(expires),
        }))
    }

    fn task_submit(&mut self, r: &TaskRef, submit: Submit, ctx: &mut Ctx<'_>) -> Result<Value> {
        let key = self.find_task(r)?;
        let mut t = self.task_mut(&key)?;
        if t.role != Role::Executor || !t.is_open() {
            return Err(Error::Refused("no open task of a peer by that id".into()));
        }
        if t.started_by.is_none() || t.state != TaskState::Working {
            return Err(Error::Refused(format!(
                "the task is {}: it must be approved to start (rdv task approve) and working",
                t.state.as_str()
            )));
        }
        if t.artifacts.len() >= TASK_MAX_ARTIFACTS {
            return Err(Error::Refused(
                "at most 8 artifacts per task (SPEC §7.4)".into(),
            ));
        }
        let shape = Registry::builtin().get(&t.capability).map(|c| c.shape);
        let parts_of = |texts: &[String], data: Option<Value>, max: usize| -> Result<Vec<Part>> {
            check_texts(texts, max)?;
            let mut parts: Vec<Part> = texts.iter().cloned().map(Part::Text).collect();
            if let Some(d) = data {
                if let Some(s) = shape {
                    check_result_data(s, &d).map_err(|e| Error::Input(e.to_string()))?;
                }
                parts.push(Part::Data(d));
            }
            if parts.is_empty() {
                return Err(Error::Input("give --text or --data".into()));
            }
            Ok(parts)
        };
        let draft = match submit {
            Submit::ResultWithFiles {
                texts,
                data,
                name,
                more,
                files,
            } if !files.is_empty() => {
                // §7.7: files only to a peer whose card lists the files URI.
                let lists = self.state.contact(&t.peer).is_some_and(|c| {
                    c.card
                        .get("capabilities")
                        .and_then(Value::as_array)
                        .is_some_and(|a| a.iter().any(|x| x == rdv_proto::consts::EXT_FILES))
                });
                if !lists {
                    return Err(Error::Refused(
                        "the peer's card does not list the files extension (SPEC §7.7)".into(),
                    ));
                }
                check_texts(&texts, rdv_proto::consts::A2A_MAX_PARTS - 1)?;
                let mut parts: Vec<Part> = texts.iter().cloned().map(Part::Text).collect();
                if let Some(d) = data {
                    if let Some(s) = shape {
                        check_result_data(s, &d).map_err(|e| Error::Input(e.to_string()))?;
                    }
                    parts.push(Part::Data(d));
                }
                let sources: Vec<crate::task::FileSource> = files
                    .iter()
                    .map(|f| crate::task::FileSource {
                        sha256: f.part.sha256(),
                        source: f.source.clone(),
                    })
                    .collect();
                parts.extend(files.into_iter().map(|f| Part::File(Box::new(f.part))));
                if parts.len() > rdv_proto::consts::A2A_MAX_PARTS {
                    return Err(Error::Input(format!(
                        "at most {} parts (text, data and files) per artifact",
                        rdv_proto::consts::A2A_MAX_PARTS
                    )));
                }
                Draft::Artifact {
                    artifact: crate::task::artifact_object(
                        &ctx.uuid(),
                        name.as_deref(),
                        &t.capability,
                        &parts,
                    ),
                    complete: !more,
                    sources,
                }
            }
            Submit::Result {
                texts,
                data,
                name,
                more,
            }
            | Submit::ResultWithFiles {
                texts,
                data,
                name,
                more,
                ..
            } => {
                let parts = parts_of(&texts, data, rdv_proto::consts::A2A_MAX_PARTS - 1)?;
                Draft::Artifact {
                    artifact: crate::task::artifact_object(
                        &ctx.uuid(),
                        name.as_deref(),
                        &t.capability,
                        &parts,
                    ),
                    complete: !more,
                    sources: Vec::new(),
                }
            }
            Submit::Question { texts, data } => {
                let parts = parts_of(&texts, data, rdv_proto::consts::A2A_MAX_PARTS - 1)?;
                Draft::Status {
                    state: TaskState::InputRequired,
                    message: crate::task::status_message(
                        &ctx.uuid(),
                        &t.task_id,
                        &t.context_id,
                        &parts,
                    ),
                    reason: None,
                }
            }
            Submit::Fail { texts } => {
                let parts = parts_of(&texts, None, rdv_proto::consts::A2A_MAX_PARTS)?;
                Draft::Status {
                    state: TaskState::Failed,
                    message: crate::task::status_message(
                        &ctx.uuid(),
                        &t.task_id,
                        &t.context_id,
                        &parts,
                    ),
                    reason: Some(Reason::Error),
                }
            }
        };
        // §5.5: everything the host sends for a peer's task passes the
        // release gate (the reference treats it all as owner data).
        // A code shown for an earlier draft stays on the gate: it is bound
        // to that draft's digest, so it releases nothing of this one.
        let kept = match &t.gate {
            Some(OpenGate::Release { code, .. }) => code.clone(),
            _ => None,
        };
        // §5.5, §5.5.1: a file of the owner's leaves only with the owner's
        // own approval at this gate: no policy or auto-approve passes it.
        let owner_files = matches!(&draft, Draft::Artifact { sources, .. } if !sources.is_empty());
        t.gate = Some(OpenGate::Release { draft, code: kept });
        t.updated = ctx.now;
        let pass = if owner_files {
            None
        } else {
            self.task_release_pass(&t, ctx)
        };
        if let Some(p) = pass {
            self.task_release(t.clone(), Some(p.via), ctx)?;
            let state = self
                .state
                .tasks
                .tasks
                .get(&key)
                .map_or("gone", |x| x.state.as_str());
            return Ok(
                json!({"task_id": t.task_id, "released": true, "via": p.via, "state": state}),
            );
        }
        self.task_put(t.clone());
        let ev = self.task_event(&t, "draft");
        self.tell(ev);
        Ok(json!({"task_id": t.task_id, "released": false, "waiting_for_you": "release"}))
    }

    /// Sends what the release gate approved (by a code, or `via` a pass
    /// written to the audit log), and moves the task on.
    fn task_release(
        &mut self,
        mut t: crate::task::Task,
        via: Option<&str>,
        ctx: &mut Ctx<'_>,
    ) -> Result<()> {
        let Some(OpenGate::Release { draft, .. }) = t.gate.clone() else {
            return Ok(());
        };
        let digest = gate::release_digest(&t, &draft);
        t.gate = None;
        t.updated = ctx.now;
        match draft {
            Draft::Artifact {
                artifact, complete, ..
            } => {
                let p = crate::task::artifact_payload(&t.task_id, &t.context_id, &artifact);
                if let Some(v) = via {
                    self.audit_pass(&t, GateStep::Release, &digest, Some(&p), v, ctx);
                }
                self.task_send(&t.peer.clone(), &p, ctx)?;
                t.artifacts.push(KeptArtifact {
                    artifact_id: artifact
                        .get("artifactId")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    name: artifact
                        .get("name")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    parts: artifact
                        .get("parts")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                    last_chunk: true,
                });
                if complete {
                    t.state = TaskState::Completed;
                    self.task_send_status(&t, None, ctx)?;
                }
            }
            Draft::Request { message, .. } => {
                // Our own request, released by the owner's code (§5.5).
                self.task_send(&t.peer.clone(), &message, ctx)?;
            }
            Draft::Status {
                state,
                message,
                reason,
            } => {
                t.state = state;
                t.reason = reason;
                let p = crate::task::status_payload(
                    &t.task_id,
                    &t.context_id,
                    state,
                    reason,
                    false,
                    Some(message),
                    ctx.now,
                );
                if let Some(v) = via {
                    self.audit_pass(&t, GateStep::Release, &digest, Some(&p), v, ctx);
                }
                self.task_send(&t.peer.clone(), &p, ctx)?;
            }
        }
        let ev = self.task_event(&t, "released");
        self.tell(ev);
        self.task_put(t);
        Ok(())
    }

    pub(crate) fn owner_command(&mut self, c: OwnerCommand, ctx: &mut Ctx<'_>) -> Result<Value> {
        match c {
            OwnerCommand::SecretSet { passphrase } => {
                if self.state.tasks.owner_secret.is_some() {
                    return Err(Error::Refused(
                        "an owner passphrase is set already: `rdv owner-secret reset` first".into(),
                    ));
                }
                let mut salt = [0u8; 16];
                ctx.rng.fill_bytes(&mut salt);
                let s = crate::owner::OwnerSecret::new(&passphrase, salt).ok_or_else(|| {
                    Error::Input(format!(
                        "the owner passphrase is at least {} characters",
                        crate::owner::OWNER_SECRET_MIN_CHARS
                    ))
                })?;
                self.state.tasks.owner_secret = Some(s);
                self.state.touch(Table::Owner, "secret");
                Ok(json!({"owner_secret": "set"}))
            }
            OwnerCommand::SecretReset => {
                self.state.tasks.owner_secret = None;
                self.state.touch(Table::Owner, "secret");
                let ids: Vec<AgentId> = self.state.tasks.auto.keys().cloned().collect();
                for id in &ids {
                    self.auto_off(
                        id,
                        "off",
                        Some("owner passphrase reset".into()),
                        "terminal",
                        ctx,
                    );
                }
                Ok(json!({"owner_secret": "reset", "auto_approve_off": ids}))
            }
            OwnerCommand::AutoApproveOn {
                contact,
                until,
                passphrase,
                via,
            } => {
                let Some(c) = self.state.contact(&contact).cloned() else {
                    return Err(Error::NotFound(format!(
                        "{contact} is not a current contact"
                    )));
                };
                let Some(g) = c.granted_by_us.clone() else {
                    return Err(Error::Refused(
                        "your agent has not granted this contact anything to invoke: grant first (rdv contact grant)".into(),
                    ));
                };
                let Some(mut secret) = self.state.tasks.owner_secret.clone() else {
                    return Err(Error::Refused(
                        "no owner passphrase: set one first with `rdv owner-secret set`".into(),
                    ));
                };
                if until.is_some_and(|u| u <= ctx.unix()) {
                    return Err(Error::Input("--until is in the past".into()));
                }
                let v = secret.check(&passphrase, ctx.now);
                self.state.tasks.owner_secret = Some(secret);
                self.state.touch(Table::Owner, "secret");
                if v != SecretVerdict::Right {
                    return Ok(json!({"auto_approve": "refused", "passphrase": v}));
                }
                let scope = Scope::parse(&g.scope, "scope").ok();
                let caps: Vec<String> = scope
                    .as_ref()
                    .and_then(|s| s.invoke.as_ref())
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                let meetings = scope.as_ref().is_some_and(Scope::allows_meetings);
                let seed = *self.key().seed();
                let extend = self.state.tasks.auto.contains_key(&contact);
                let a = crate::owner::AutoApprove::new(
                    contact.clone(),
                    g.id.clone(),
                    &g.scope,
                    caps.clone(),
                    meetings,
                    ctx.unix(),
                    until,
                    &via,
                    &seed,
                );
                self.state.tasks.auto.insert(contact.clone(), a);
                self.state.touch(Table::Owner, format!("auto:{contact}"));
                let action = if extend { "extend" } else { "set" };
                self.audit_append(crate::owner::AuditLine {
                    at: ctx.unix(),
                    contact: contact.clone(),
                    action: action.into(),
                    capability: None,
                    task_id: None,
                    gate: None,
                    digest: None,
                    left_sha256: None,
                    left_bytes: None,
                    via: via.clone(),
                });
                let until_s = until
                    .and_then(|u| rdv_proto::time::from_unix(u).ok())
                    .map(rdv_proto::time::format_time);
                self.tell(Event::AutoApprove {
                    id: contact.clone(),
                    action: action.into(),
                    reason: None,
                    until: until_s.clone(),
                });
                Ok(
                    json!({"auto_approve": action, "contact": contact, "capabilities": caps, "meetings": meetings, "until": until_s}),
                )
            }
            OwnerCommand::AutoApproveOff { contact, via } => {
                let was = self.state.tasks.auto.contains_key(&contact);
                self.auto_off(&contact, "off", None, &via, ctx);
                Ok(json!({"auto_approve": "off", "contact": contact, "was_on": was}))
            }
        }
    }

    /// Expiry and pruning (§7.4, §7.6.2): an executor's open task past its
    /// expires ends (rejected before it started, failed after), reason
    /// expired; finished tasks and tombstones go after 30 days; an
    /// auto-approve setting past its until is turned off.
    pub(crate) fn task_tick(&mut self, ctx: &mut Ctx<'_>) -> Result<()> {
        let now = ctx.now;
        let due: Vec<String> = self
            .state
            .tasks
            .tasks
            .values()
            .filter(|t| t.role == Role::Executor && t.is_open() && t.expires <= now)
            .map(|t| t.key())
            .collect();
        for k in due {
            let mut t = self.task_mut(&k)?;
            t.state = if t.started_by.is_some() {
                TaskState::Failed
            } else {
                TaskState::Rejected
            };
            t.reason = Some(Reason::Expired);
            t.gate = None;
            t.updated = now;
            let ev = self.task_event(&t, "expired");
            self.tell(ev);
            self.task_put(t.clone());
            self.task_send_status(&t, None, ctx)?;
        }
        let month = time::Duration::seconds(TASK_PRUNE_AFTER_SECS);
        let old: Vec<String> = self
            .state
            .tasks
            .tasks
            .values()
            .filter(|t| !t.is_open() && now - t.updated > month)
            .map(|t| t.key())
            .collect();
        for k in old {
            self.state.tasks.tasks.remove(&k);
            self.state.touch(Table::Task, k);
        }
        let ended: Vec<AgentId> = self
            .state
            .tasks
            .auto
            .values()
            .filter(|a| a.until.is_some_and(|u| u <= ctx.unix()))
            .map(|a| a.contact.clone())
            .collect();
        for id in ended {
            self.auto_off(&id, "expire", Some("expired".into()), "agent", ctx);
        }
        Ok(())
    }
}
