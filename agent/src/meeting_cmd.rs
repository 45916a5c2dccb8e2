//! `rdv dinner propose|list|confirm|cancel|calendar` (SPEC §7.2–§7.4,
//! §5.5): meetings negotiated by the agents, each accept and confirm taken
//! by the human with the code `rdv dinner list` shows on the terminal. The
//! code is a confirm phrase (`phrase.rs`: random, kept only as a salted
//! scrypt hash, single use, dead after 5 wrong tries) bound to the exact
//! meeting shown (peer, contextId, task, slot, step); each listing issues
//! a new one. It is never printed with `--json`, in an event or in a log.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use rdv_agent_core::Command;
use rdv_agent_core::meeting::{self, Proposal, Slot};
use rdv_agent_core::owner::Secret;
use rdv_agent_core::peer_text::terminal_safe;
use rdv_agent_core::phrase::{Phrase, PhraseSecret};
use rdv_agent_core::state::ContactStatus;
use rdv_proto::AgentId;
use rdv_proto::time::format_time;
use serde_json::{Value, json};

use crate::agent_cmd::Out;
use crate::cli::Global;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::runtime::{Options, Runtime};

#[derive(Debug, Subcommand)]
pub enum DinnerCommand {
    /// Propose a meeting to a contact: your slots, or up to 3 free ones in
    /// a window (SPEC §7.3). Their grant must allow meetings (§7.4).
    Propose(ProposeArgs),
    /// The negotiations and agreed meetings, with the code each step that
    /// waits for you needs (text mode only).
    List(CalendarArgs),
    /// Confirm the held meeting shown by `rdv dinner list` (SPEC §5.5).
    /// Only you decide this: the code is bound to that meeting; if it
    /// changed (another slot, peer or step, a new negotiation under the
    /// same id) nothing is confirmed and `list` shows a new code.
    Confirm {
        /// The task id (from `rdv dinner list`).
        id: String,
        /// The code `rdv dinner list` showed for it last (each listing
        /// issues a new one; 5 wrong tries kill a code).
        #[arg(long)]
        code: String,
        /// The contact, when two negotiations share the id.
        #[arg(long)]
        contact: Option<String>,
    },
    /// Cancel a negotiation, or call off an agreed meeting (with the cancel
    /// code `rdv dinner list` shows for it; the peer frees its time, §7.3).
    Cancel {
        /// The task id (from `rdv dinner list`).
        id: String,
        /// For an agreed meeting: the cancel code `rdv dinner list` showed.
        #[arg(long)]
        code: Option<String>,
        /// The contact, when two negotiations share the id.
        #[arg(long)]
        contact: Option<String>,
        /// Why, sent to their agent (one line, at most 200 characters).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Read your busy times from calendar files (.json busy list or .ics);
    /// only free/busy is kept, never titles. Run again when they change.
    Calendar(CalendarArgs),
}

#[derive(Debug, Args)]
pub struct CalendarArgs {
    /// A calendar file: a .json busy list or an .ics file. Repeatable.
    #[arg(long = "calendar", value_name = "FILE")]
    pub calendars: Vec<PathBuf>,
    /// Your UTC offset, for floating and all-day times (default +00:00).
    #[arg(long, default_value = "+00:00", allow_hyphen_values = true)]
    pub tz: String,
    /// Calendar files, as arguments (for `rdv dinner calendar`).
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ProposeArgs {
    /// The contact: its agent ID or your label for it.
    pub contact: String,
    /// A slot START/END, RFC 3339 with an offset, at most 12 hours
    /// (e.g. 2026-12-03T19:00:00+01:00/2026-12-03T21:00:00+01:00).
    /// Repeatable, or comma-separated.
    #[arg(long = "slot", alias = "slots", value_delimiter = ',')]
    pub slots: Vec<String>,
    /// Instead of --slot: offer up to 3 free slots from this time on.
    #[arg(long, requires = "to", conflicts_with = "slots")]
    pub from: Option<String>,
    /// The end of the window.
    #[arg(long, requires = "from")]
    pub to: Option<String>,
    /// Each slot's length in a window, in minutes.
    #[arg(long, default_value_t = 120)]
    pub minutes: i64,
    /// When the negotiation ends (default 48 hours, at most 7 days).
    #[arg(long)]
    pub expires: Option<String>,
    /// Where (your words; sent to the peer).
    #[arg(long)]
    pub place: Option<String>,
    #[command(flatten)]
    pub calendar: CalendarArgs,
}

/// An RFC 3339 date-time with an offset (a slot end, `--from`, `expires`).
pub fn time_arg(s: &str) -> Result<rdv_proto::time::Instant> {
    rdv_agent_core::a2a::parse_offset_time(s).ok_or_else(|| {
        Error::Input(format!(
            "{s}: an RFC 3339 date-time with an offset (…T19:00:00+01:00 or …Z)"
        ))
    })
}

/// A slot START/END (§7.2: at most 12 hours).
pub fn slot_arg(s: &str) -> Result<Slot> {
    let (a, b) = s
        .split_once('/')
        .ok_or_else(|| Error::Input(format!("{s}: a slot is START/END")))?;
    Slot::new(time_arg(a)?, time_arg(b)?).map_err(Error::Input)
}

fn contact_ref(rt: &Runtime, s: &str) -> Result<AgentId> {
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

/// Reads the owner's calendar files into the agent, when any are given.
async fn load_calendar(rt: &mut Runtime, c: &CalendarArgs) -> Result<Option<Value>> {
    let mut paths = c.calendars.clone();
    paths.extend(c.files.iter().cloned());
    if paths.is_empty() {
        return Ok(None);
    }
    let tz = crate::calendar::parse_offset(&c.tz)?;
    let b = crate::calendar::read_paths(&paths, tz)?;
    let n = b.busy.len();
    rt.command(Command::SetCalendar {
        busy: b.busy,
        sources: b.sources.clone(),
    })
    .await?;
    Ok(Some(json!({
        "busy_intervals": n,
        "recurring_not_expanded": b.recurring,
        "sources": b.sources,
    })))
}

/// Runs one `rdv dinner` command.
pub async fn run(cmd: DinnerCommand, g: &Global, out: &Out) -> Result<()> {
    let home = Home::resolve(g.home.clone(), g.profile.as_deref())?;
    let mut rt = Runtime::open(home, Options::default()).await?;
    match cmd {
        DinnerCommand::Propose(a) => {
            load_calendar(&mut rt, &a.calendar).await?;
            let to = contact_ref(&rt, &a.contact)?;
            let slots = a
                .slots
                .iter()
                .map(|s| slot_arg(s))
                .collect::<Result<Vec<_>>>()?;
            let window = match (&a.from, &a.to) {
                (Some(f), Some(t)) => Some((time_arg(f)?, time_arg(t)?, a.minutes)),
                _ => None,
            };
            if slots.is_empty() && window.is_none() {
                return Err(Error::Input(
                    "give --slot START/END, or --from and --to".into(),
                ));
            }
            let expires = a.expires.as_deref().map(time_arg).transpose()?;
            let v = rt
                .command(Command::ProposeMeeting(Proposal {
                    to,
                    slots,
                    window,
                    expires,
                    place: a.place,
                    intent: Some("dinner".into()),
                }))
                .await?;
            out.value(&v)
        }
        DinnerCommand::Calendar(c) => {
            let v = load_calendar(&mut rt, &c)
                .await?
                .ok_or_else(|| Error::Input("give one or more calendar files".into()))?;
            out.value(&v)
        }
        DinnerCommand::List(c) => {
            load_calendar(&mut rt, &c).await?;
            let v = rt.command(Command::ListMeetings).await?;
            if g.json {
                return out.value(&v);
            }
            list_text(&mut rt, &v).await
        }
        DinnerCommand::Confirm { id, code, contact } => {
            let peer = contact.map(|c| contact_ref(&rt, &c)).transpose()?;
            let v = rt
                .command(Command::ConfirmMeeting {
                    task_id: id,
                    peer,
                    code: Secret::new(code),
                })
                .await?;
            done(out, v, "confirmed")
        }
        DinnerCommand::Cancel {
            id,
            code,
            contact,
            reason,
        } => {
            let peer = contact.map(|c| contact_ref(&rt, &c)).transpose()?;
            let v = rt
                .command(Command::CancelMeeting {
                    task_id: id,
                    peer,
                    code: code.map(Secret::new),
                    reason,
                })
                .await?;
            done(out, v, "canceled")
        }
    }
}

/// A refusal is printed (it is data) and ends the command with exit 1.
fn done(out: &Out, v: Value, key: &str) -> Result<()> {
    out.value(&v)?;
    if v.get(key) == Some(&Value::Bool(false)) {
        let why = v
            .get("refusal")
            .and_then(Value::as_str)
            .unwrap_or("refused");
        return Err(Error::Input(format!("nothing was done ({why})")));
    }
    Ok(())
}

fn slot_text(v: &Value) -> String {
    format!(
        "{} – {}",
        v.get("start").and_then(Value::as_str).unwrap_or("?"),
        v.get("end").and_then(Value::as_str).unwrap_or("?")
    )
}

/// The human's view: each meeting, and for each step waiting for them the
/// code bound to it (shown here only: a human channel, §5.5).
/// Issues a code bound to the meeting step shown (`digest`, from
/// `meeting::current_step`) and keeps its record; `None` when that step is
/// no longer the one waiting (the meeting changed since it was shown). The
/// code is for a human channel only: this terminal, the MCP server's
/// stderr, or handed straight back to the core after the human approved a
/// form.
pub async fn issue_code(
    rt: &mut Runtime,
    task_id: &str,
    peer: &AgentId,
    stage: meeting::Stage,
    digest: &str,
) -> Result<Option<PhraseSecret>> {
    let (secret, record) = Phrase::generate(
        &meeting::code_terms(stage, digest),
        time::OffsetDateTime::now_utc(),
        &mut rand_core::OsRng,
    )
    .map_err(|e| Error::Input(e.to_string()))?;
    let v = rt
        .command(Command::SetMeetingCode {
            task_id: task_id.to_string(),
            peer: Some(peer.clone()),
            digest: digest.to_string(),
            record,
        })
        .await?;
    Ok((v.get("code_set") == Some(&Value::Bool(true))).then_some(secret))
}

async fn list_text(rt: &mut Runtime, v: &Value) -> Result<()> {
    // Codes first (each is a write), then the listing.
    let mut codes = std::collections::BTreeMap::new();
    let steps: Vec<_> = rt
        .agent()
        .state
        .meetings
        .tasks
        .iter()
        .filter_map(|(k, t)| {
            meeting::current_step(t).map(|s| (k.clone(), t.task_id.clone(), t.peer.clone(), s))
        })
        .collect();
    for (key, task_id, peer, (stage, slot, digest)) in steps {
        if let Some(code) = issue_code(rt, &task_id, &peer, stage, &digest).await? {
            codes.insert(key, (stage, slot, code));
        }
    }
    let mut so = std::io::stdout().lock();
    let list = v
        .get("meetings")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if list.is_empty() {
        writeln!(so, "No meetings.")?;
    }
    for m in &list {
        let id = m["task_id"].as_str().unwrap_or("");
        let peer = m["peer"].as_str().unwrap_or("");
        let who = m["label"]
            .as_str()
            .map_or_else(|| peer.to_string(), terminal_safe);
        writeln!(
            so,
            "{id}  with {who} ({})  {}  proposed by {}  round {}",
            m["fingerprint"].as_str().unwrap_or(""),
            m["state"].as_str().unwrap_or(""),
            m["proposed_by"].as_str().unwrap_or(""),
            m["round"]
        )?;
        if let Some(o) = m.get("offer").filter(|o| !o.is_null()) {
            for s in o["slots"].as_array().into_iter().flatten() {
                writeln!(
                    so,
                    "    offered by {}: {}",
                    o["by"].as_str().unwrap_or(""),
                    slot_text(s)
                )?;
            }
        }
        if let Some(p) = m.get("place").filter(|p| !p.is_null()) {
            let text = p
                .get("untrusted_peer_text")
                .and_then(Value::as_str)
                .map(|t| format!("«{}» (peer-written)", terminal_safe(t)))
                .or_else(|| p.as_str().map(terminal_safe))
                .unwrap_or_default();
            writeln!(so, "    place: {text}")?;
        }
        if let Some(h) = m.get("held").filter(|h| !h.is_null()) {
            writeln!(
                so,
                "    held ({}): {}",
                h["kind"].as_str().unwrap_or(""),
                slot_text(&h["slot"])
            )?;
        }
        writeln!(so, "    expires {}", m["expires"].as_str().unwrap_or(""))?;
        let key = AgentId::parse(peer)
            .map(|p| meeting::task_key(&p, id))
            .unwrap_or_default();
        if let Some((stage, slot, code)) = codes.get(&key) {
            let code = code.expose();
            let when = format!("{} – {}", format_time(slot.start), format_time(slot.end));
            match stage {
                meeting::Stage::Cancel => writeln!(
                    so,
                    "    agreed: {when}. To call it off: rdv dinner cancel {id} --code {code}"
                )?,
                s => writeln!(
                    so,
                    "    waiting for you to {}: {when}\n    code: {code}  (rdv dinner confirm {id} --code {code})",
                    s.as_str()
                )?,
            }
        }
    }
    so.flush()?;
    Ok(())
}
