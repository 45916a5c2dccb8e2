//! The agent's commands for a person at a terminal: each opens the home,
//! runs one library call, and prints its typed result (`--json`: one JSON
//! object per line; text: readable lines with peer text cleaned, §5.6).

use std::io::Write;

use rdv_agent_core::command::check_relay;
use rdv_agent_core::peer_text::terminal_safe;
use rdv_agent_core::state::{Binding, ContactStatus, Target as OutTarget};
use rdv_agent_core::{Command, Event, RequestTo, Setup};
use rdv_proto::AgentId;
use serde_json::{Value, json};

use crate::agent_cli::{
    AddressCommand, CardArgs, CardCommand, ContactCommand, DEFAULT_RELAYS, DiscoverArgs, InboxArgs,
    InitArgs, RelaysCommand, SendArgs, read_input,
};
use crate::cli::{Command as Cli, Global};
use crate::discovery::{self, Target};
use crate::error::{Error, Result};
use crate::home::Home;
use crate::runtime::{Options, Runtime};
use crate::terminal;

/// How output is printed.
pub struct Out {
    json: bool,
}

impl Out {
    /// One result: a JSON line, or `key: value` lines.
    pub fn value(&self, v: &Value) -> Result<()> {
        let mut so = std::io::stdout().lock();
        if self.json {
            return terminal::write_line(&mut so, v);
        }
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    writeln!(so, "{k}: {}", text_of(x))?;
                }
            }
            other => writeln!(so, "{}", text_of(other))?,
        }
        so.flush()?;
        Ok(())
    }

    /// One inbox event.
    pub fn event(&self, cursor: u64, e: &Event) -> Result<()> {
        let mut v = serde_json::to_value(e).map_err(|e| Error::Input(e.to_string()))?;
        if let Value::Object(m) = &mut v {
            m.insert("cursor".into(), json!(cursor));
        }
        if self.json {
            return terminal::write_line(&mut std::io::stdout().lock(), &v);
        }
        let mut so = std::io::stdout().lock();
        writeln!(so, "{}", event_line(cursor, &v))?;
        so.flush()?;
        Ok(())
    }
}

/// A value for a terminal: strings as they are (cleaned), peer text marked.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => terminal_safe(s),
        Value::Object(m) if m.len() == 1 && m.contains_key("untrusted_peer_text") => format!(
            "«{}» (peer-written)",
            terminal_safe(m["untrusted_peer_text"].as_str().unwrap_or(""))
        ),
        other => terminal::printable(&other.to_string()),
    }
}

fn event_line(cursor: u64, v: &Value) -> String {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("event");
    let mut parts = vec![format!("[{cursor}] {kind}")];
    if let Value::Object(m) = v {
        for (k, x) in m {
            if k == "kind" || k == "cursor" {
                continue;
            }
            if x.is_null() {
                continue;
            }
            parts.push(format!("{k}={}", text_of(x)));
        }
    }
    parts.join(" ")
}

fn home(g: &Global) -> Result<Home> {
    Home::resolve(g.home.clone(), g.profile.as_deref())
}

async fn open(g: &Global) -> Result<Runtime> {
    Runtime::open(home(g)?, Options::default()).await
}

/// A contact by agent ID or by the owner's label for it (unique).
fn contact_ref(rt: &Runtime, s: &str) -> Result<AgentId> {
    if s.starts_with(rdv_proto::consts::AGENT_ID_PREFIX) {
        return AgentId::parse(s).map_err(|e| Error::Input(format!("{s}: {e}")));
    }
    let hits: Vec<&AgentId> = rt
        .agent()
        .state
        .contacts
        .values()
        .filter(|c| c.status == ContactStatus::Active && c.label.as_deref() == Some(s))
        .map(|c| &c.id)
        .collect();
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Error::Input(format!(
            "no contact is labelled {s:?} (rdv contact list shows them)"
        ))),
        _ => Err(Error::Input(format!(
            "{} contacts are labelled {s:?}: use the agent ID",
            hits.len()
        ))),
    }
}

/// Runs one agent command.
pub async fn run(cmd: Cli, g: &Global) -> Result<()> {
    let out = Out { json: g.json };
    match cmd {
        Cli::Init(a) => init(a, g, &out).await,
        Cli::Address(a) => address(a, g, &out).await,
        Cli::Relays(a) => relays(a, g, &out).await,
        Cli::Card(a) => card(a, g, &out).await,
        Cli::Discover(a) => discover(a, g, &out).await,
        Cli::Contact(a) => contact(a, g, &out).await,
        Cli::Mailbox(a) => crate::mailbox::run(a, g, &out).await,
        Cli::Send(a) => send(a, g, &out).await,
        Cli::Inbox(a) => inbox(a, g, &out).await,
        Cli::Listen => listen(g, &out).await,
        Cli::Status => status(g, &out).await,
        Cli::Backup(a) => crate::backup_cmd::run(a, g, &out).await,
        Cli::Task(a) => crate::task_cmd::run(a, g).await,
        Cli::OwnerSecret(a) => crate::task_cmd::owner_secret(a, g).await,
        Cli::Audit(a) => crate::task_cmd::audit(a, g).await,
        Cli::File(a) => crate::file_cmd::run(a, g).await,
        Cli::Dinner(a) => crate::meeting_cmd::run(a, g, &out).await,
        Cli::Suggest(a) => crate::suggest::run(a, g).await,
        Cli::Directory(d) if d.uses_home() => crate::directory_cmd::run_home(d, g).await,
        _ => Err(Error::Input("not an agent command".into())),
    }
}

async fn init(a: InitArgs, g: &Global, out: &Out) -> Result<()> {
    let relays: Vec<String> = if a.relays.is_empty() {
        DEFAULT_RELAYS.iter().map(|s| s.to_string()).collect()
    } else {
        a.relays
    };
    for r in &relays {
        check_relay(r, a.allow_ws)?;
    }
    let mut addresses: Vec<(String, bool)> = a.addresses.into_iter().map(|x| (x, true)).collect();
    addresses.extend(a.private_addresses.into_iter().map(|x| (x, false)));
    let h = home(g)?;
    // The fallback topics are derived from the agent ID, which exists only
    // once the key does: the runtime fills them in after keygen.
    let setup = Setup {
        addresses,
        relays,
        public_pointer: a.public_pointer,
        inbound: a.inbound,
        other_rendezvous: Vec::new(),
        allow_ws: a.allow_ws,
        directories: a.directories,
        suggest: !a.no_suggest,
    };
    let fallbacks = (a.ntfy, a.mqtt);
    let (mut rt, mut reply) = Runtime::init(h, setup, a.force, Options::default()).await?;
    if fallbacks.0.is_some() || fallbacks.1.is_some() {
        reply = rt
            .command(Command::SetFallbacks {
                ntfy: fallbacks.0,
                mqtt: fallbacks.1,
            })
            .await?;
    }
    let mut v = json!({
        "id": rt.agent().id(),
        "fingerprint": rt.agent().id().fingerprint(),
        "home": rt.home().dir().display().to_string(),
    });
    if let Some(p) = reply.get("published") {
        v["published"] = p.clone();
    }
    if let Some(d) = reply.get("delivery") {
        v["delivery"] = d.clone();
    }
    out.value(&v)
}

async fn address(a: AddressCommand, g: &Global, out: &Out) -> Result<()> {
    let mut rt = open(g).await?;
    let v = match a {
        AddressCommand::Add { address, private } => {
            rt.command(Command::AddAddress {
                address,
                public: !private,
            })
            .await?
        }
        AddressCommand::Remove { address } => {
            rt.command(Command::RemoveAddress { address }).await?
        }
        AddressCommand::List => {
            let p = rt.agent().state.profile()?;
            json!({ "addresses": p.addresses.iter().map(|x| json!({"address": x.address, "public": x.public})).collect::<Vec<_>>() })
        }
    };
    out.value(&summary(v))
}

/// A command's reply without the bulky card.
fn summary(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v
        && let Some(c) = m.remove("card")
    {
        m.insert(
            "card_created".into(),
            c.get("created").cloned().unwrap_or(Value::Null),
        );
    }
    v
}

async fn relays(a: RelaysCommand, g: &Global, out: &Out) -> Result<()> {
    let mut rt = open(g).await?;
    let v = match a {
        RelaysCommand::Add { url } => rt.command(Command::AddRelay { url }).await?,
        RelaysCommand::Remove { url } => rt.command(Command::RemoveRelay { url }).await?,
        RelaysCommand::List => relay_list(&rt)?,
    };
    out.value(&summary(v))
}

fn relay_list(rt: &Runtime) -> Result<Value> {
    let s = &rt.agent().state;
    Ok(json!({ "relays": relays_json(s.profile()?, &s.relay_health) }))
}

/// The profile's relays, each with its health (§6.2).
fn relays_json(
    p: &rdv_agent_core::state::Profile,
    health: &std::collections::BTreeMap<String, rdv_agent_core::state::RelayHealth>,
) -> Value {
    let list: Vec<Value> = p
        .relays
        .iter()
        .map(|r| {
            let h = health.get(r).cloned().unwrap_or_default();
            json!({
                "url": r,
                "last_ok": h.last_ok.map(rdv_proto::time::format_time),
                "last_error": h.last_error_kind.map(|k| json!({
                    "kind": k,
                    "message": rdv_agent_core::peer_text::UntrustedPeerText::new(h.last_error_message.as_deref().unwrap_or("")),
                })),
                "cooldown_until": h.cooldown_until.map(rdv_proto::time::format_time),
            })
        })
        .collect();
    Value::Array(list)
}

async fn card(a: CardArgs, g: &Global, out: &Out) -> Result<()> {
    let mut rt = open(g).await?;
    match a.command {
        Some(CardCommand::Import { file, in_person }) => {
            let raw = read_input(&file, rdv_proto::consts::CARD_MAX_BYTES * 2)?;
            let card = rdv_proto::canon::parse(&raw, rdv_proto::consts::CARD_MAX_BYTES * 2)
                .map_err(|e| Error::Input(format!("{file}: not a card: {e}")))?;
            let binding = if in_person {
                Binding::InPerson
            } else {
                Binding::Card
            };
            let v = rt.command(Command::KeepCard { card, binding }).await?;
            out.value(&v)
        }
        Some(CardCommand::Publish) => {
            let v = rt.command(Command::PublishCard).await?;
            out.value(&v)
        }
        None => {
            let card = rt.agent().state.profile()?.card.clone();
            if a.qr {
                let text = rdv_proto::canon::to_string(&card)?;
                let qr = qrcode::QrCode::with_error_correction_level(
                    text.as_bytes(),
                    qrcode::EcLevel::L,
                )
                .map_err(|e| Error::Input(format!("the card does not fit a QR code: {e}")))?;
                let s = qr
                    .render::<qrcode::render::unicode::Dense1x2>()
                    .quiet_zone(true)
                    .build();
                println!("{s}");
                println!("{}", rt.agent().id());
                Ok(())
            } else if out.json {
                out.value(&card)
            } else {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&card).map_err(|e| Error::Input(e.to_string()))?
                );
                Ok(())
            }
        }
    }
}

async fn discover(a: DiscoverArgs, g: &Global, out: &Out) -> Result<()> {
    let mut rt = open(g).await?;
    let t = Target::parse(&a.target)?;
    let d = discovery::discover(&mut rt, &t, &a.target).await?;
    let v = serde_json::to_value(&d).map_err(|e| Error::Input(e.to_string()))?;
    if out.json {
        return out.value(&v);
    }
    if d.found.is_empty() {
        println!("No agent found for {}.", terminal_safe(&a.target));
        if d.own_card_on_relays {
            println!("(Your own card is on the relays for it.)");
        }
    }
    for f in &d.found {
        println!(
            "{} ({}) binding={} source={} claims=[{}] relays=[{}]",
            f.id,
            f.fingerprint,
            f.binding,
            terminal_safe(&f.source),
            f.claimed_addresses.join(", "),
            f.relays.join(", ")
        );
    }
    for e in &d.errors {
        println!("error: {}", terminal_safe(e));
    }
    Ok(())
}

/// The signed `rdv/invite` of an invite mail, of its RDV/1 block, or
/// given as JSON (§5.2.2), bounded before it is parsed.
fn read_invite(file: &str) -> Result<Value> {
    let raw = read_input(file, rdv_proto::consts::MAIL_MAX_BYTES)?;
    if let Ok(v) = serde_json::from_slice::<Value>(&raw)
        && v.is_object()
    {
        return Ok(v);
    }
    let text = String::from_utf8_lossy(&raw);
    let trimmed = text.trim_start();
    if trimmed.starts_with("---BEGIN RDV/1---") {
        // The block alone: its one JSON line.
        if let Some(line) = trimmed.lines().nth(1)
            && let Ok(v) = serde_json::from_str::<Value>(line.trim())
        {
            return Ok(v);
        }
    }
    rdv_proto::mailblock::extract_block(&raw)
        .map_err(|e| Error::Input(format!("{file}: no invite in it: {e}")))
}

async fn contact(a: ContactCommand, g: &Global, out: &Out) -> Result<()> {
    let mut rt = open(g).await?;
    let v = match a {
        ContactCommand::Request {
            target,
            greeting,
            label,
        } => {
            let to = match Target::parse(&target)? {
                Target::Address(addr) => RequestTo::Address(addr.canon().to_string()),
                Target::Id(id) => RequestTo::Card(discovery::card_for_id(&mut rt, &id).await?),
            };
            rt.command(Command::Request {
                to,
                greeting,
                label,
            })
            .await?
        }
        ContactCommand::Pending => {
            let v = pending(&rt)?;
            out.value(&v)?;
            if !g.json {
                // A human channel: the assistant's confirm phrases (§5.5),
                // never in --json.
                for (id, terms, phrase) in crate::mcp::consent::terminal_phrases(&mut rt).await? {
                    println!(
                        "confirm phrase for request {id}, on the terms your assistant asked ({}): {}  (type it to your assistant only if you approve; the phrase shown last wins)",
                        terminal_safe(&terms),
                        phrase.expose()
                    );
                }
            }
            return Ok(());
        }
        ContactCommand::Grant {
            request_id,
            tier,
            label,
            no_meetings,
            invoke,
            max_frequency,
        } => {
            rdv_proto::time::parse_frequency("max_frequency", &max_frequency)
                .map_err(|e| Error::Input(e.to_string()))?;
            let scope = rdv_agent_core::agent::default_scope(!no_meetings, &invoke, &max_frequency);
            rt.command(Command::Grant {
                request_id,
                tier,
                scope,
                label,
            })
            .await?
        }
        ContactCommand::Confirm {
            request_id,
            agent,
            label,
        } => {
            let grantor = agent
                .map(|s| AgentId::parse(&s).map_err(|e| Error::Input(format!("{s}: {e}"))))
                .transpose()?;
            rt.command(Command::Confirm {
                request_id,
                grantor,
                label,
            })
            .await?
        }
        ContactCommand::Decline { request_id, block } => {
            rt.command(Command::Decline { request_id, block }).await?
        }
        ContactCommand::Revoke { contact } => {
            let id = contact_ref(&rt, &contact)?;
            rt.command(Command::Revoke { id }).await?
        }
        ContactCommand::Block { agent } => {
            let id = contact_ref(&rt, &agent)?;
            rt.command(Command::Block { id }).await?
        }
        ContactCommand::Unblock { agent } => {
            let id = AgentId::parse(&agent).map_err(|e| Error::Input(format!("{agent}: {e}")))?;
            rt.command(Command::Unblock { id }).await?
        }
        ContactCommand::Label {
            contact,
            label,
            clear,
        } => {
            let id = contact_ref(&rt, &contact)?;
            if label.is_none() && !clear {
                return Err(Error::Input("give a label, or --clear".into()));
            }
            rt.command(Command::Label { id, label }).await?
        }
        ContactCommand::Resync { contact } => {
            let id = contact_ref(&rt, &contact)?;
            rt.command(Command::Resync { id }).await?
        }
        ContactCommand::List => contacts(&rt)?,
        ContactCommand::AutoApprove {
            contact,
            mode,
            until,
        } => {
            let id = contact_ref(&rt, &contact)?;
            crate::task_cmd::auto_approve(&mut rt, id, &mode, until).await?
        }
        ContactCommand::ProbeMail {
            address,
            greeting,
            label,
            from_mailbox,
        } => crate::mailbox::probe_mail(&mut rt, address, greeting, label, from_mailbox).await?,
        ContactCommand::Invite {
            address,
            source,
            note,
            from_mailbox,
        } => crate::mailbox::invite(&mut rt, address, source, note, from_mailbox).await?,
        ContactCommand::InviteStatus { invite_id, status } => {
            crate::mailbox::invite_status(&mut rt, invite_id, &status).await?
        }
        ContactCommand::AcceptInvite {
            file,
            card,
            greeting,
            label,
        } => {
            let invite = read_invite(&file)?;
            let card = match card {
                Some(f) => {
                    let raw = read_input(&f, rdv_proto::consts::CARD_MAX_BYTES * 2)?;
                    rdv_proto::canon::parse(&raw, rdv_proto::consts::CARD_MAX_BYTES * 2)
                        .map_err(|e| Error::Input(format!("{f}: not a card: {e}")))?
                }
                None => {
                    let from = invite
                        .get("from")
                        .and_then(Value::as_str)
                        .ok_or_else(|| Error::Input(format!("{file}: the invite names no from")))?;
                    let id = AgentId::parse(from)
                        .map_err(|e| Error::Input(format!("{file}: from: {e}")))?;
                    discovery::card_for_id(&mut rt, &id).await?
                }
            };
            rt.command(Command::AcceptInvite {
                invite,
                card,
                greeting,
                label,
            })
            .await?
        }
    };
    out.value(&v)
}

/// One pending request as `rdv contact pending` and the MCP server's
/// `rdv_pending_requests` show it (peer text marked, §5.6).
pub fn pending_request_json(p: &rdv_agent_core::state::Pending) -> Value {
    let greeting = p
        .request
        .get("greeting")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (via, address) = match &p.via {
        rdv_agent_core::state::Via::Topic { address } => ("topic", Some(address.clone())),
        rdv_agent_core::state::Via::Envelope => ("envelope", None),
        rdv_agent_core::state::Via::Mailbox { address } => ("mailbox", Some(address.clone())),
        rdv_agent_core::state::Via::Invite { address, .. } => ("invite", Some(address.clone())),
    };
    json!({
        "request_id": p.request_id,
        "from": p.from,
        "fingerprint": p.from.fingerprint(),
        "binding": p.binding.as_str(),
        "via": via,
        "address": address,
        "greeting": rdv_agent_core::peer_text::UntrustedPeerText::new(greeting),
        "received": rdv_proto::time::format_time(p.received),
    })
}

fn pending(rt: &Runtime) -> Result<Value> {
    let s = &rt.agent().state;
    let requests: Vec<Value> = s.pending.values().map(pending_request_json).collect();
    let probes: Vec<Value> = s
        .outgoing
        .values()
        .filter(|o| !o.closed)
        .map(|o| {
            let target = match &o.target {
                OutTarget::Agent(id) => id.to_string(),
                OutTarget::Address(a) => a.clone(),
            };
            json!({
                "request_id": o.request_id,
                "to": target,
                "sent": rdv_proto::time::format_time(o.created),
                "candidates": o.candidates.iter().map(|c| json!({
                    "agent": c.grantor, "fingerprint": c.grantor.fingerprint(),
                })).collect::<Vec<_>>(),
                "dropped_answers": o.dropped,
            })
        })
        .collect();
    Ok(json!({ "requests": requests, "sent": probes }))
}

fn contacts(rt: &Runtime) -> Result<Value> {
    let list: Vec<Value> = rt
        .agent()
        .state
        .contacts
        .values()
        .filter(|c| c.status == ContactStatus::Active)
        .map(|c| {
            let refused = rt
                .agent()
                .state
                .channels_in
                .get(&c.id)
                .and_then(|ch| ch.refused())
                .is_some();
            json!({
                "id": c.id,
                "fingerprint": c.id.fingerprint(),
                "label": c.label,
                "binding": c.binding.as_str(),
                "tier": c.tier,
                "they_allow": c.granted_to_us.as_ref().map(|g| json!({"tier": g.tier, "scope": g.scope})),
                "we_allow": c.granted_by_us.as_ref().map(|g| json!({"tier": g.tier, "scope": g.scope})),
                "chain_refused": refused,
                "since": rdv_proto::time::format_time(c.since),
            })
        })
        .collect();
    // Contacts that ended, with who ended them and why (§5.4; a revoke for
    // abuse names its rule, §5.3 (a) apart from (b)).
    let ended: Vec<Value> = rt
        .agent()
        .state
        .contacts
        .values()
        .filter(|c| c.status == ContactStatus::Revoked)
        .filter_map(|c| {
            let e = c.ended.as_ref()?;
            Some(json!({
                "id": c.id,
                "fingerprint": c.id.fingerprint(),
                "label": c.label,
                "by": e.by,
                "reason": e.reason,
                "at": e.at,
            }))
        })
        .collect();
    Ok(json!({ "contacts": list, "ended": ended }))
}

async fn send(a: SendArgs, g: &Global, out: &Out) -> Result<()> {
    let mut rt = open(g).await?;
    let to = contact_ref(&rt, &a.contact)?;
    let max = rdv_proto::consts::ENVELOPE_MAX_PLAINTEXT;
    if a.payload.len() > max {
        return Err(Error::Input(format!(
            "the payload is {} bytes: at most {max} (SPEC §6.4)",
            a.payload.len()
        )));
    }
    let payload = rdv_proto::canon::parse_str(&a.payload, max)
        .map_err(|e| Error::Input(format!("the payload is not a JSON object: {e}")))?;
    let v = rt.command(Command::Send { to, payload }).await?;
    out.value(&v)
}

async fn inbox(a: InboxArgs, g: &Global, out: &Out) -> Result<()> {
    let rt = open(g).await?;
    let mut cursor = a.since;
    loop {
        let rows = rt.inbox_after(cursor, a.limit).await?;
        for (c, e) in &rows {
            out.event(*c, e)?;
            cursor = *c;
        }
        if !a.follow {
            return Ok(());
        }
        if rows.is_empty() {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok(()),
                _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
            }
        }
    }
}

async fn listen(g: &Global, out: &Out) -> Result<()> {
    let mut rt = open(g).await?;
    let json = out.json;
    let printer = Out { json };
    let mut n = 0u64;
    eprintln!(
        "rdv: listening as {} ({}); Ctrl-C stops",
        rt.agent().id(),
        rt.agent().id().fingerprint()
    );
    rt.listen(
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
        |e| {
            n += 1;
            let _ = printer.event(n, e);
        },
    )
    .await
}

/// Reads the profile and relay health, and counts the rest in the store:
/// loading a big home's state (every contact's card, every agent ID parsed)
/// for four numbers made this grow with the contacts.
async fn status(g: &Global, out: &Out) -> Result<()> {
    use crate::store::{Count, Store};
    use rdv_agent_core::record::Table;
    use rdv_agent_core::state::{CONTACT_STATUS_FIELD, OUTGOING_CLOSED_FIELD, State};
    let home = home(g)?;
    if !home.has_agent() {
        return Err(Error::Agent(rdv_agent_core::Error::NoAgent));
    }
    let key = rdv_proto::AgentKey::from_seed(*home.read_seed()?);
    let id = key.id();
    let store = Store::open(&home.db_path()).await?;
    let count = |table, filter| Count { table, filter };
    let summary = store
        .summary(
            &[Table::Profile, Table::RelayHealth],
            &[
                count(
                    Table::Contact,
                    Some((CONTACT_STATUS_FIELD, json!("active"))),
                ),
                count(Table::Pending, None),
                count(Table::Outgoing, Some((OUTGOING_CLOSED_FIELD, json!(false)))),
                count(Table::Delivery, None),
            ],
        )
        .await?;
    let s = State::load(&summary.records)?;
    let p = s.profile()?;
    let [contacts, pending, open_requests, deliveries] = summary.counts[..] else {
        return Err(Error::Store("the store counted something else".into()));
    };
    let listening = home.listener_running();
    let v = json!({
        "id": id,
        "fingerprint": id.fingerprint(),
        "home": home.dir().display().to_string(),
        "addresses": p.addresses.iter().map(|x| json!({"address": x.address, "public": x.public})).collect::<Vec<_>>(),
        "public_pointer": p.public_pointer,
        "inbound_policy": p.inbound,
        "relays": relays_json(p, &s.relay_health),
        "contacts": contacts,
        "pending_requests": pending,
        "open_requests": open_requests,
        "deliveries_under_way": deliveries,
        "inbound": if listening { "consumer running" } else { "no listener" },
    });
    out.value(&v)
}
