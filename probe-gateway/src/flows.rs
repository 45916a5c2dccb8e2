//! The mail flows the gateway runs for registered agents (§5.2.1, §5.2.2):
//! gateway addresses, sending probes and invites, the SYN-ACK, the ACK
//! leg (API and mail), per-address limits and the permanent opt-out.
//!
//! Every send is a signed request by an agent that proved a mailbox; the
//! documents it carries are verified by the core before anything is
//! mailed, and the mail is composed by the core (`mailblock::compose`).
//! Limits are claimed in the store before the mail is handed over and
//! given back when it could not be, so a failed send consumes nothing.
//! Nothing here logs an address, a cookie, a token or a document.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdv_proto::consts::{BLOCK_BEGIN, BLOCK_END, PROBE_LIFETIME_SECS};
use rdv_proto::mailblock::{
    self, BlockPayload, MailParams, ProbeEcho, TransferEncoding, probe_ack_payload, probe_payload,
};
use rdv_proto::time::from_unix;
use rdv_proto::{Address, AgentId};
use serde_json::{Value, json};

use crate::address_key::{AddressKey, OptOutId};
use crate::api_refusal::ApiRefusal;
use crate::clock::Entropy;
use crate::extract::{Signed, SignedAgent};
use crate::gate::Admitted;
use crate::http::email;
use crate::mailer::OutboundMessage;
use crate::state::AppState;
use crate::store::{
    InviteRules, NewProbe, NewSend, Released, SendLimit, SendRules, StoreError, StoredProbe,
};
use crate::verdict::{Delivery, Refusal};

pub use crate::config::{EXPLAINER_PATH, FlowConfig, OPTOUT_LOCAL};
pub use rdv_gateway_client::wire::{
    AckBody, InviteAnswer, InviteStatusBody, SendAckBody, SendInviteBody, SendProbeBody, SynAckBody,
};

const DAY: i64 = 24 * 3600;
/// The inbox kind of a release (the ACK leg landed).
pub const RELEASE_KIND: &str = "release";
/// A gateway-address tag: 10 lowercase base32 characters (50 bits).
pub const TAG_LEN: usize = 10;
/// The longest owner's note in an invite, characters.
pub const NOTE_MAX_CHARS: usize = 2000;
/// The longest invite source ("where I got your address", §5.2.2), characters.
pub const SOURCE_MAX_CHARS: usize = 200;

/// A fresh gateway-address tag from the injected entropy.
pub fn new_tag(entropy: &dyn Entropy) -> String {
    let mut raw = [0u8; 7];
    entropy.fill(&mut raw);
    let mut t = rdv_proto::encoding::base32(&raw);
    t.truncate(TAG_LEN);
    t
}

/// Whom an SMTP recipient names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipient {
    /// A proved mailbox (canonical), by its own address.
    Mailbox(String),
    /// A proved mailbox (canonical), by its gateway address `rdv+<tag>@…`:
    /// forwarding confirmations are taken here only (`forwarding`).
    Gateway(String),
    /// `optout+TOKEN@<mail_domain>`: the opt-out id the token carries.
    OptOut(OptOutId),
}

/// Maps an SMTP `RCPT TO` to its recipient. Gateway and opt-out addresses
/// are matched case-insensitively (the whole address is lowercased, §4.6
/// canon); anything else must be a proved mailbox.
pub async fn resolve_recipient(s: &AppState, rcpt: &str) -> Result<Option<Recipient>, StoreError> {
    let Ok(addr) = Address::parse_email(rcpt) else {
        return Ok(None);
    };
    let canon = addr.canon();
    let cfg = &s.inner.cfg.flows;
    if let (Some(domain), Some((local, dom))) = (&cfg.mail_domain, canon.rsplit_once('@'))
        && dom.eq_ignore_ascii_case(domain)
        && let Some((base, tail)) = local.split_once('+')
    {
        if base == cfg.address_local {
            if tail.len() != TAG_LEN {
                return Ok(None);
            }
            return Ok(s
                .inner
                .store
                .tag_mailbox(tail)
                .await?
                .map(Recipient::Gateway));
        }
        if base == OPTOUT_LOCAL {
            return Ok(s
                .inner
                .address_key
                .as_ref()
                .and_then(|k| k.optout_of_token(tail))
                .map(Recipient::OptOut));
        }
    }
    Ok(s.inner
        .store
        .mailbox_agent(canon)
        .await?
        .map(|_| Recipient::Mailbox(canon.to_string())))
}

/// Records an opt-out (permanent, shared through the store): its `H`,
/// never the address.
pub async fn record_optout(s: &AppState, id: &OptOutId) -> Result<(), StoreError> {
    s.inner
        .store
        .record_optout(&id.hex(), s.now().unix_timestamp())
        .await?;
    metrics::counter!("rdv_gateway_optouts_total").increment(1);
    tracing::info!("opt-out recorded");
    Ok(())
}

/// The address key, or 500 when `AppState::new` could not read it.
fn address_key(s: &AppState) -> Result<&AddressKey, ApiRefusal> {
    s.inner
        .address_key
        .as_ref()
        .ok_or_else(|| ApiRefusal::internal("address key unavailable"))
}

/// Whether `addr` opted out (§5.2.2: permanent, whatever the master secret).
async fn opted_out(s: &AppState, addr: &Address) -> Result<bool, ApiRefusal> {
    let id = address_key(s)?.optout_id(addr);
    s.inner
        .store
        .opted_out(&id.hex())
        .await
        .map_err(ApiRefusal::internal)
}

/// The recipient's stored form for the per-address limits.
fn address_hash(s: &AppState, addr: &str) -> Result<String, ApiRefusal> {
    let a = Address::parse(addr).map_err(ApiRefusal::internal)?;
    Ok(address_key(s)?.address_hash(&a))
}

fn refusal(status: StatusCode, code: &'static str, msg: &str) -> ApiRefusal {
    ApiRefusal::new(status, code, msg)
}

fn not_found() -> ApiRefusal {
    refusal(StatusCode::NOT_FOUND, "not_found", "no such item of yours")
}

fn expired() -> ApiRefusal {
    refusal(
        StatusCode::GONE,
        "expired",
        "the probe is older than the probe lifetime",
    )
}

fn bad_document(e: impl std::fmt::Display) -> ApiRefusal {
    ApiRefusal::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "bad_document",
        format!("the document does not verify: {e}"),
    )
}

fn wrong_signer() -> ApiRefusal {
    refusal(
        StatusCode::FORBIDDEN,
        "wrong_signer",
        "the document is not signed by the calling key",
    )
}

fn no_gateway_address() -> ApiRefusal {
    refusal(
        StatusCode::CONFLICT,
        "no_gateway_address",
        "this gateway has no mail domain, or the mailbox has no gateway address yet",
    )
}

fn limit_refusal(l: SendLimit) -> ApiRefusal {
    let (status, code, msg, retry) = match l {
        SendLimit::Daily { retry_after } => (
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many sends today",
            Some(retry_after),
        ),
        SendLimit::Address { retry_after } => (
            StatusCode::TOO_MANY_REQUESTS,
            "address_limited",
            "this address was contacted recently",
            Some(retry_after),
        ),
        SendLimit::InvitePending => (
            StatusCode::CONFLICT,
            "invite_pending",
            "an invite to this address is still pending",
            None,
        ),
    };
    let mut r = refusal(status, code, msg);
    r.retry_after = retry;
    r
}

/// The caller's gateway address for `from_mailbox` (default: its first
/// mailbox), and that mailbox.
async fn sender_address(
    s: &AppState,
    agent: &AgentId,
    from_mailbox: Option<&str>,
) -> Result<(String, String), ApiRefusal> {
    if s.inner.cfg.flows.mail_domain.is_none() {
        return Err(no_gateway_address());
    }
    let held = s
        .inner
        .store
        .agent_mailbox_tags(agent.as_str())
        .await
        .map_err(ApiRefusal::internal)?;
    let pick = match from_mailbox {
        None => held.first(),
        Some(m) => {
            let m = email(m)?;
            held.iter().find(|(mb, _)| mb == m.canon())
        }
    };
    let Some((mailbox, tag)) = pick else {
        return Err(refusal(
            StatusCode::FORBIDDEN,
            "not_your_mailbox",
            "from_mailbox is not a mailbox this key proved",
        ));
    };
    let addr = tag
        .as_deref()
        .and_then(|t| s.inner.cfg.flows.gateway_address(t))
        .ok_or_else(no_gateway_address)?;
    Ok((addr, mailbox.clone()))
}

/// The gateway address of a mailbox (the From of a SYN-ACK or echo).
async fn mailbox_address(s: &AppState, mailbox: &str) -> Result<String, ApiRefusal> {
    let tag = s
        .inner
        .store
        .mailbox_tag(mailbox)
        .await
        .map_err(ApiRefusal::internal)?;
    tag.and_then(|t| s.inner.cfg.flows.gateway_address(&t))
        .ok_or_else(no_gateway_address)
}

/// The owner's name in a send body (`from_name`), at most this many characters.
pub const FROM_NAME_MAX_CHARS: usize = 64;
/// UTF-8 bytes per RFC 2047 encoded-word: 56 base64 characters, so a word
/// is 68 characters and every folded From line stays within 76.
const EW_BYTES: usize = 42;

/// Checks a send body's `from_name` (the owner's name): 1 to 64 printable
/// characters, no quotes, backslashes, angle brackets, line breaks or
/// invisible direction marks (a display name must not fake an address).
/// Returns the display name humans see: `<name>'s agent`.
pub(crate) fn display_name(from_name: Option<&str>) -> Result<Option<String>, ApiRefusal> {
    let Some(name) = from_name else {
        return Ok(None);
    };
    let bad = |m: &str| refusal(StatusCode::BAD_REQUEST, "bad_name", m);
    let n = name.chars().count();
    if n == 0 || n > FROM_NAME_MAX_CHARS || name.trim() != name {
        return Err(bad("from_name must be 1 to 64 characters, no outer spaces"));
    }
    let invisible = |c: char| matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
    if name
        .chars()
        .any(|c| c.is_control() || invisible(c) || matches!(c, '"' | '\\' | '<' | '>'))
    {
        return Err(bad(
            "from_name must be printable, without quotes, backslashes or angle brackets",
        ));
    }
    Ok(Some(format!("{name}'s agent")))
}

/// The From header value for `addr` with an optional display name:
/// `"Dana's agent" <addr>`, or RFC 2047 B encoded-words (UTF-8) when the
/// name is not ASCII, folded one word a line.
fn from_header(display: Option<&str>, addr: &str) -> String {
    let Some(d) = display else {
        return addr.to_string();
    };
    if d.is_ascii() {
        return format!("\"{d}\" <{addr}>");
    }
    let mut words = Vec::new();
    let mut chunk = String::new();
    for c in d.chars() {
        if chunk.len() + c.len_utf8() > EW_BYTES {
            words.push(std::mem::take(&mut chunk));
        }
        chunk.push(c);
    }
    words.push(chunk);
    let mut v = String::new();
    for w in words {
        v.push_str(&format!(
            "=?utf-8?B?{}?=\r\n ",
            data_encoding::BASE64.encode(w.as_bytes())
        ));
    }
    v.push_str(&format!("<{addr}>"));
    v
}

/// A composed message and its Message-ID. `display` names the sender
/// (the From shows it; the envelope sender stays the bare address).
fn compose(
    s: &AppState,
    payload: &Value,
    from: &str,
    display: Option<&str>,
    to: &str,
    intro: Option<&str>,
) -> Result<(OutboundMessage, String), ApiRefusal> {
    let mut mid = [0u8; 12];
    s.inner.entropy.fill(&mut mid);
    let message_id = format!("<{}@{}>", hex::encode(mid), s.inner.cfg.smtp_hostname);
    let folded = from_header(display, from);
    let one_line = folded.replace("\r\n ", " ");
    let mut raw = mailblock::compose(
        payload,
        &MailParams {
            from: &one_line,
            to,
            date: s.now(),
            message_id: &message_id,
            encoding: TransferEncoding::QuotedPrintable,
            subject_line: None,
            intro,
        },
    )
    .map_err(bad_document)?;
    if folded != one_line {
        // The core writes From on one line first; fold its encoded-words.
        let head = format!("From: {one_line}\r\n");
        if !raw.starts_with(head.as_bytes()) {
            return Err(ApiRefusal::internal(
                "composed mail does not start with From",
            ));
        }
        let mut out = format!("From: {folded}\r\n").into_bytes();
        out.extend_from_slice(&raw[head.len()..]);
        raw = out;
    }
    Ok((
        OutboundMessage {
            envelope_from: from.to_string(),
            to: to.to_string(),
            raw,
        },
        message_id,
    ))
}

/// Hands `msg` to the mailer; a failure gives `claim` back (no limit is
/// consumed) and is 503 `mail_unavailable`.
async fn send_claimed(
    s: &AppState,
    kind: &'static str,
    msg: &OutboundMessage,
    claim: Option<&NewSend>,
) -> Result<(), ApiRefusal> {
    match s.inner.mailer.send(msg).await {
        Ok(()) => {
            metrics::counter!("rdv_gateway_sends_total", "kind" => kind, "outcome" => "sent")
                .increment(1);
            tracing::info!(kind, "mail sent for an agent");
            Ok(())
        }
        Err(e) => {
            metrics::counter!("rdv_gateway_sends_total", "kind" => kind, "outcome" => "failed")
                .increment(1);
            tracing::warn!(kind, error = %e, "mail for an agent not sent");
            if let Some(c) = claim {
                s.inner
                    .store
                    .unclaim_send(c)
                    .await
                    .map_err(ApiRefusal::internal)?;
            }
            Err(refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "mail_unavailable",
                "the mail could not be sent; try again later",
            ))
        }
    }
}

/// What a probe or invite send answers with (202).
struct Sent<'a> {
    id: &'a str,
    to: &'a str,
    message_id: &'a str,
}

/// A probe or an invite to an address: claims its slot under the
/// per-address rules, sends it (a send that fails gives the slot back), and
/// answers 202 with the id and Message-ID.
async fn claim_and_send(
    s: &AppState,
    kind: &'static str,
    msg: &OutboundMessage,
    send: &NewSend,
    rules: &SendRules,
    sent: Sent<'_>,
) -> Result<Response, ApiRefusal> {
    claim(s, send, rules).await?;
    send_claimed(s, kind, msg, Some(send)).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "status": "sent", "id": sent.id, "to": sent.to, "message_id": sent.message_id,
        })),
    )
        .into_response())
}

async fn claim(s: &AppState, send: &NewSend, rules: &SendRules) -> Result<(), ApiRefusal> {
    match s
        .inner
        .store
        .claim_send(send, rules)
        .await
        .map_err(ApiRefusal::internal)?
    {
        Ok(()) => Ok(()),
        Err(l) => Err(limit_refusal(l)),
    }
}

fn daily_only(s: &AppState) -> SendRules {
    SendRules {
        per_day: s.inner.cfg.flows.sends_per_day,
        ..SendRules::default()
    }
}

/// The caller's mailboxes and their gateway addresses.
#[utoipa::path(get, path = "/v1/mailboxes",
    params(("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 200, body = Object), (status = 401, body = crate::api_refusal::ErrorBody),
        (status = 403, body = crate::api_refusal::ErrorBody)))]
pub async fn mailboxes(
    State(s): State<AppState>,
    SignedAgent(agent): SignedAgent,
) -> Result<Response, ApiRefusal> {
    let held = s
        .inner
        .store
        .agent_mailbox_tags(agent.as_str())
        .await
        .map_err(ApiRefusal::internal)?;
    let list: Vec<Value> = held
        .iter()
        .map(|(m, t)| {
            json!({
                "mailbox": m,
                "gateway_address": t.as_deref().and_then(|t| s.inner.cfg.flows.gateway_address(t)),
            })
        })
        .collect();
    Ok(axum::Json(json!({ "mailboxes": list })).into_response())
}

/// Sends a probe (§5.2.1 SYN) from the caller's gateway address.
#[utoipa::path(post, path = "/v1/send/probe", request_body = SendProbeBody,
    params(("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 202, body = Object), (status = 400, body = crate::api_refusal::ErrorBody),
        (status = 403, body = crate::api_refusal::ErrorBody), (status = 409, body = crate::api_refusal::ErrorBody),
        (status = 422, body = crate::api_refusal::ErrorBody), (status = 429, body = Object),
        (status = 503, body = crate::api_refusal::ErrorBody)))]
pub async fn send_probe(
    State(s): State<AppState>,
    Signed { agent, body: b }: Signed<SendProbeBody>,
) -> Result<Response, ApiRefusal> {
    let name = display_name(b.from_name.as_deref())?;
    let to = email(&b.to)?;
    let now = s.now();
    let payload = probe_payload(&b.request);
    let BlockPayload::Probe(p) =
        mailblock::parse_payload(&payload, now, s.inner.cfg.dev_allow_ws_relays)
            .map_err(bad_document)?
    else {
        return Err(bad_document("not a contact request"));
    };
    let req = &p.request;
    if req.from != agent {
        return Err(wrong_signer());
    }
    if req.to_hint_address().as_ref() != Some(&to) {
        return Err(refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "to_hint",
            "request.to_hint is not the address the probe goes to",
        ));
    }
    if (req.ts - now).whole_seconds() > rdv_proto::consts::PROBE_MAX_AHEAD_SECS {
        return Err(bad_document("ts is in the future"));
    }
    let (from, _) = sender_address(&s, &agent, b.from_mailbox.as_deref()).await?;
    if opted_out(&s, &to).await? {
        return Err(refusal(
            StatusCode::FORBIDDEN,
            "opted_out",
            "this address opted out of probes and invites",
        ));
    }
    let cfg = &s.inner.cfg.flows;
    let interval = cfg.probe_interval_days * DAY;
    let send = NewSend {
        kind: "probe",
        agent: agent.as_str().to_string(),
        addr_hash: address_hash(&s, to.canon())?,
        ref_id: req.id.clone(),
        at: now.unix_timestamp(),
        status: "sent",
        expires: now.unix_timestamp() + interval.max(DAY),
    };
    let (msg, message_id) = compose(&s, &payload, &from, name.as_deref(), to.canon(), None)?;
    let rules = SendRules {
        per_day: cfg.sends_per_day,
        probe_interval: Some(interval),
        invite: None,
    };
    let sent = Sent {
        id: &req.id,
        to: to.canon(),
        message_id: &message_id,
    };
    claim_and_send(&s, "probe", &msg, &send, &rules, sent).await
}

/// The caller's own inbox item `seq` of `kind`, or 404 (another key's too).
async fn own_item(
    s: &AppState,
    agent: &AgentId,
    seq: i64,
    kind: &str,
) -> Result<StoredProbe, ApiRefusal> {
    let it = s
        .inner
        .store
        .item(seq)
        .await
        .map_err(ApiRefusal::internal)?
        .ok_or_else(not_found)?;
    if it.probe.agent != agent.as_str() || it.probe.kind != kind {
        return Err(not_found());
    }
    Ok(it)
}

fn probe_cookie(s: &AppState, p: &StoredProbe) -> Result<String, ApiRefusal> {
    let q = &p.probe;
    let agent = AgentId::parse(&q.agent).map_err(ApiRefusal::internal)?;
    let from = Address::parse(&q.sender).map_err(ApiRefusal::internal)?;
    let ts = from_unix(q.ts).map_err(ApiRefusal::internal)?;
    Ok(s.inner.cookies.issue(&agent, &q.id, &from, ts))
}

/// Answers a probe the caller received (§5.2.1 SYN-ACK): the grant and the
/// gateway's cookie, to the probe's sender, from the mailbox's gateway address.
#[utoipa::path(post, path = "/v1/send/syn-ack", request_body = SynAckBody,
    params(("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 202, body = Object), (status = 403, body = crate::api_refusal::ErrorBody),
        (status = 404, body = crate::api_refusal::ErrorBody), (status = 409, body = crate::api_refusal::ErrorBody),
        (status = 422, body = crate::api_refusal::ErrorBody), (status = 503, body = crate::api_refusal::ErrorBody)))]
pub async fn send_syn_ack(
    State(s): State<AppState>,
    Signed { agent, body: b }: Signed<SynAckBody>,
) -> Result<Response, ApiRefusal> {
    let name = display_name(b.from_name.as_deref())?;
    let probe = own_item(&s, &agent, b.seq, "probe").await?;
    let now = s.now();
    if now.unix_timestamp() - probe.probe.ts >= PROBE_LIFETIME_SECS {
        return Err(expired());
    }
    let cookie = probe_cookie(&s, &probe)?;
    let payload = probe_ack_payload(&b.grant, &cookie);
    let BlockPayload::ProbeAck(a) =
        mailblock::parse_payload(&payload, now, s.inner.cfg.dev_allow_ws_relays)
            .map_err(bad_document)?
    else {
        return Err(bad_document("not a grant"));
    };
    let g = &a.grant;
    if g.from != agent {
        return Err(wrong_signer());
    }
    let answers = g.to.as_str() == probe.probe.requester
        && g.reference == rdv_proto::doc::grant::GrantRef::Request(probe.probe.id.clone());
    if !answers {
        return Err(refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not_this_probe",
            "grant.to and grant.request_ref must name the probe's requester and request",
        ));
    }
    let from = mailbox_address(&s, &probe.probe.mailbox).await?;
    let (msg, message_id) = compose(
        &s,
        &payload,
        &from,
        name.as_deref(),
        &probe.probe.sender,
        None,
    )?;
    let claimed = s
        .inner
        .store
        .set_probe_status(probe.seq, "pending", "answered")
        .await
        .map_err(ApiRefusal::internal)?;
    if !claimed {
        return Err(refusal(
            StatusCode::CONFLICT,
            "already_answered",
            "this probe was answered already",
        ));
    }
    let send = NewSend {
        kind: "syn_ack",
        agent: agent.as_str().to_string(),
        addr_hash: address_hash(&s, &probe.probe.sender)?,
        ref_id: probe.seq.to_string(),
        at: now.unix_timestamp(),
        status: "sent",
        expires: now.unix_timestamp() + DAY,
    };
    let out = async {
        claim(&s, &send, &daily_only(&s)).await?;
        send_claimed(&s, "syn_ack", &msg, Some(&send)).await
    }
    .await;
    if let Err(e) = out {
        // Not sent: the probe can be answered again.
        s.inner
            .store
            .set_probe_status(probe.seq, "answered", "pending")
            .await
            .map_err(ApiRefusal::internal)?;
        return Err(e);
    }
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({"status": "sent", "seq": probe.seq, "message_id": message_id})),
    )
        .into_response())
}

/// Releases a probe (the ACK leg landed): marks it, queues a `release`
/// item for its agent and tells the SSE streams. Idempotent.
async fn release(s: &AppState, probe: &StoredProbe, via: &str) -> Result<Released, StoreError> {
    let q = &probe.probe;
    let now = s.now();
    let payload = json!({
        "request_id": q.id, "requester": q.requester, "mailbox": q.mailbox,
        "probe_seq": probe.seq, "via": via,
    });
    let item = NewProbe {
        mailbox: q.mailbox.clone(),
        agent: q.agent.clone(),
        kind: RELEASE_KIND.into(),
        id: q.id.clone(),
        requester: q.requester.clone(),
        sender: String::new(),
        ts: now.unix_timestamp(),
        payload: payload.to_string(),
        auth: "null".into(),
        binding: String::new(),
    };
    let r = s
        .inner
        .store
        .release(probe.seq, via, &item, now.unix_timestamp())
        .await?;
    if let Released::Now(_) = r {
        let via_label = if via == "mail" { "mail" } else { "api" };
        metrics::counter!("rdv_gateway_releases_total", "via" => via_label).increment(1);
        tracing::info!(via = via_label, "probe released");
        let _ = s.inner.notify.send(q.agent.clone());
    }
    Ok(r)
}

fn released_body(probe: &StoredProbe, via: &str) -> Value {
    let q = &probe.probe;
    json!({
        "status": "released", "seq": probe.seq, "request_id": q.id,
        "requester": q.requester, "mailbox": q.mailbox, "via": via,
    })
}

/// The ACK leg through the API (§5.2.1): the owning agent found the
/// cookie echoed in the first envelope and releases the probe.
#[utoipa::path(post, path = "/v1/ack", request_body = AckBody,
    params(("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 200, body = Object), (status = 403, body = crate::api_refusal::ErrorBody),
        (status = 404, body = crate::api_refusal::ErrorBody), (status = 410, body = crate::api_refusal::ErrorBody)))]
pub async fn ack(
    State(s): State<AppState>,
    Signed { agent, body: b }: Signed<AckBody>,
) -> Result<Response, ApiRefusal> {
    let probe = own_item(&s, &agent, b.seq, "probe").await?;
    let now = s.now();
    if (now.unix_timestamp() - probe.probe.ts) >= PROBE_LIFETIME_SECS {
        return Err(expired());
    }
    let sender = Address::parse(&probe.probe.sender).map_err(ApiRefusal::internal)?;
    let ok = b.cookie.len() <= rdv_proto::consts::PROBE_COOKIE_MAX_LEN
        && s.inner
            .cookies
            .verify(&agent, &probe.probe.id, &sender, &b.cookie, now);
    if !ok {
        tracing::info!("ack refused: bad cookie");
        return Err(refusal(
            StatusCode::FORBIDDEN,
            "bad_cookie",
            "the cookie is not this probe's",
        ));
    }
    let via = match release(&s, &probe, "api")
        .await
        .map_err(ApiRefusal::internal)?
    {
        Released::Now(_) => "api".to_string(),
        Released::Already(v) => v,
    };
    Ok(axum::Json(released_body(&probe, &via)).into_response())
}

/// The ACK leg by mail: an admitted `rdv/probe-echo` for `agent`'s mailbox
/// releases the probe it names when the cookie is that probe's. Returns the
/// release item's seq (the probe's when it was released before).
pub(crate) async fn echo_by_mail(
    s: &AppState,
    agent: &AgentId,
    admitted: &Admitted,
) -> Result<i64, Delivery> {
    let internal = |e: StoreError| Delivery::Internal(e.to_string());
    let BlockPayload::ProbeEcho(e) = &admitted.screened.payload else {
        return Err(Delivery::Refused(Refusal::Payload("not an echo".into())));
    };
    // Echo attempts were counted per sender by the gate's limiter
    // (`gate::Limiter::echo`): echoes skip the dedupe.
    let probe = s
        .inner
        .store
        .probe_by_request(agent.as_str(), &e.request_ref, e.from.as_str())
        .await
        .map_err(internal)?
        .ok_or(Delivery::Refused(Refusal::BadCookie))?;
    let now = s.now();
    if now.unix_timestamp() - probe.probe.ts >= PROBE_LIFETIME_SECS {
        return Err(Delivery::Refused(Refusal::Expired));
    }
    let sender =
        Address::parse(&probe.probe.sender).map_err(|_| Delivery::Refused(Refusal::BadCookie))?;
    if !s
        .inner
        .cookies
        .verify(agent, &probe.probe.id, &sender, &e.cookie, now)
    {
        return Err(Delivery::Refused(Refusal::BadCookie));
    }
    match release(s, &probe, "mail").await.map_err(internal)? {
        Released::Now(seq) => Ok(seq),
        Released::Already(_) => Ok(probe.seq),
    }
}

/// The ACK leg by mail, requester side: the signed echo of the SYN-ACK's
/// cookie, mailed to the SYN-ACK's sender from the caller's gateway address.
#[utoipa::path(post, path = "/v1/send/ack", request_body = SendAckBody,
    params(("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 202, body = Object), (status = 403, body = crate::api_refusal::ErrorBody),
        (status = 404, body = crate::api_refusal::ErrorBody), (status = 422, body = crate::api_refusal::ErrorBody),
        (status = 503, body = crate::api_refusal::ErrorBody)))]
pub async fn send_ack(
    State(s): State<AppState>,
    Signed { agent, body: b }: Signed<SendAckBody>,
) -> Result<Response, ApiRefusal> {
    let name = display_name(b.from_name.as_deref())?;
    let synack = own_item(&s, &agent, b.seq, "probe_ack").await?;
    let echo = ProbeEcho::verify(&b.echo).map_err(bad_document)?;
    if echo.from != agent {
        return Err(wrong_signer());
    }
    let held: Value = serde_json::from_str(&synack.probe.payload).map_err(ApiRefusal::internal)?;
    let same = echo.to.as_str() == synack.probe.requester
        && held["grant"]["request_ref"].as_str() == Some(echo.request_ref.as_str())
        && held["cookie"].as_str() == Some(echo.cookie.as_str());
    if !same {
        return Err(refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not_this_syn_ack",
            "echo.to, request_ref and cookie must be the SYN-ACK's",
        ));
    }
    let now = s.now();
    let age = (now - echo.ts).whole_seconds();
    if !(-rdv_proto::consts::PROBE_MAX_AHEAD_SECS..PROBE_LIFETIME_SECS).contains(&age) {
        return Err(bad_document("ts out of range"));
    }
    let from = mailbox_address(&s, &synack.probe.mailbox).await?;
    let (msg, message_id) = compose(
        &s,
        &b.echo,
        &from,
        name.as_deref(),
        &synack.probe.sender,
        None,
    )?;
    let send = NewSend {
        kind: "ack",
        agent: agent.as_str().to_string(),
        addr_hash: address_hash(&s, &synack.probe.sender)?,
        ref_id: synack.seq.to_string(),
        at: now.unix_timestamp(),
        status: "sent",
        expires: now.unix_timestamp() + DAY,
    };
    claim(&s, &send, &daily_only(&s)).await?;
    send_claimed(&s, "ack", &msg, Some(&send)).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({"status": "sent", "message_id": message_id})),
    )
        .into_response())
}

/// The invite's human part (§5.2.2): the owner's note, where the owner
/// got the address (whatever the note says), the disclosure that the
/// owner's assistant sent it, the explainer link and the opt-out.
fn invite_intro(
    note: Option<&str>,
    source: &str,
    explainer: &str,
    optout_url: Option<&str>,
    mailto: &str,
) -> String {
    let mut t = String::new();
    if let Some(n) = note.map(str::trim).filter(|n| !n.is_empty()) {
        t.push_str(n);
        t.push_str("\n\n");
    }
    t.push_str(&format!(
        "Where I got your address: {}.\n\n",
        source.trim().trim_end_matches('.')
    ));
    t.push_str(
        "This invitation was sent by my AI assistant, on my behalf, using the Rendezvous \
         protocol. If you use an assistant that speaks it, it can pick this up; otherwise, \
         just reply to me.\n\n",
    );
    t.push_str(&format!("What this is, in two minutes: {explainer}\n\n"));
    match optout_url {
        Some(u) => t.push_str(&format!(
            "To never receive probes or invitations through this gateway again: {u} \
             (or mail {mailto})."
        )),
        None => t.push_str(&format!(
            "To never receive probes or invitations through this gateway again, mail {mailto}."
        )),
    }
    t
}

/// Checks an invite's source: 1 to [`SOURCE_MAX_CHARS`] characters on one
/// line, no block markers.
fn check_source(source: &str) -> Result<(), ApiRefusal> {
    let bad = |m: &str| refusal(StatusCode::BAD_REQUEST, "bad_source", m);
    let s = source.trim();
    if s.is_empty() || s.chars().count() > SOURCE_MAX_CHARS {
        return Err(bad(
            "source (where you got the address) must be 1 to 200 characters",
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(bad("source must be one line without control characters"));
    }
    if s.contains(BLOCK_BEGIN) || s.contains(BLOCK_END) || s.contains("RDV/1") {
        return Err(bad("source must not contain block markers"));
    }
    Ok(())
}

fn check_note(note: &str) -> Result<(), ApiRefusal> {
    let bad = |m: &str| refusal(StatusCode::BAD_REQUEST, "bad_note", m);
    if note.chars().count() > NOTE_MAX_CHARS {
        return Err(bad("the note is longer than 2000 characters"));
    }
    if note.contains(BLOCK_BEGIN) || note.contains(BLOCK_END) || note.contains("RDV/1") {
        return Err(bad("the note must not contain block markers"));
    }
    if note
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(bad("the note has control characters"));
    }
    Ok(())
}

/// Sends an invite (§5.2.2) from the caller's gateway address, with the
/// owner's note, the source of the address, the explainer link and the
/// RFC 8058 opt-out.
#[utoipa::path(post, path = "/v1/send/invite", request_body = SendInviteBody,
    params(("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 202, body = Object), (status = 400, body = crate::api_refusal::ErrorBody),
        (status = 403, body = crate::api_refusal::ErrorBody), (status = 409, body = crate::api_refusal::ErrorBody),
        (status = 422, body = crate::api_refusal::ErrorBody), (status = 429, body = Object),
        (status = 503, body = crate::api_refusal::ErrorBody)))]
pub async fn send_invite(
    State(s): State<AppState>,
    Signed { agent, body: b }: Signed<SendInviteBody>,
) -> Result<Response, ApiRefusal> {
    let name = display_name(b.from_name.as_deref())?;
    let to = email(&b.to)?;
    check_source(&b.source)?;
    if let Some(n) = &b.note {
        check_note(n)?;
    }
    let inv = mailblock::Invite::verify(&b.invite).map_err(bad_document)?;
    if inv.from != agent {
        return Err(wrong_signer());
    }
    if let Some(h) = &inv.to_hint
        && Address::parse(h).ok().as_ref() != Some(&to)
    {
        return Err(refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "to_hint",
            "invite.to_hint is not the address the invite goes to",
        ));
    }
    let now = s.now();
    let age = (now - inv.ts).whole_seconds();
    if !(-rdv_proto::consts::PROBE_MAX_AHEAD_SECS..PROBE_LIFETIME_SECS).contains(&age) {
        return Err(bad_document("ts out of range"));
    }
    let (from, _) = sender_address(&s, &agent, b.from_mailbox.as_deref()).await?;
    if opted_out(&s, &to).await? {
        return Err(refusal(
            StatusCode::FORBIDDEN,
            "opted_out",
            "this address opted out of probes and invites",
        ));
    }
    let cfg = &s.inner.cfg.flows;
    let token = address_key(&s)?.optout_token(&to);
    let mailto = cfg.optout_mailto(&token).ok_or_else(no_gateway_address)?;
    let url = cfg.optout_url(&token);
    let explainer = cfg.explainer_link().ok_or_else(|| {
        refusal(
            StatusCode::CONFLICT,
            "no_explainer_link",
            "this gateway has no public_url or explainer_url: an invite must carry an explainer link",
        )
    })?;
    let intro = invite_intro(
        b.note.as_deref(),
        &b.source,
        &explainer,
        url.as_deref(),
        &mailto,
    );
    let (mut msg, message_id) = compose(
        &s,
        &b.invite,
        &from,
        name.as_deref(),
        to.canon(),
        Some(&intro),
    )?;
    // RFC 2369 / RFC 8058 opt-out headers (the gate reads them as no list traffic).
    let mut head = match &url {
        Some(u) => format!(
            "List-Unsubscribe: <mailto:{mailto}>, <{u}>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"
        ),
        None => format!("List-Unsubscribe: <mailto:{mailto}>\r\n"),
    }
    .into_bytes();
    head.extend_from_slice(&msg.raw);
    msg.raw = head;
    let (pending, cooldown) = (
        cfg.invite_pending_days * DAY,
        cfg.invite_cooldown_days * DAY,
    );
    let window = 30 * DAY;
    let send = NewSend {
        kind: "invite",
        agent: agent.as_str().to_string(),
        addr_hash: address_hash(&s, to.canon())?,
        ref_id: inv.id.clone(),
        at: now.unix_timestamp(),
        status: "pending",
        expires: now.unix_timestamp() + (pending + cooldown).max(window),
    };
    let rules = SendRules {
        per_day: cfg.sends_per_day,
        probe_interval: None,
        invite: Some(InviteRules {
            pending_secs: pending,
            cooldown_secs: cooldown,
            global_max: cfg.invites_per_address_per_30d,
            global_window: window,
        }),
    };
    let sent = Sent {
        id: &inv.id,
        to: to.canon(),
        message_id: &message_id,
    };
    claim_and_send(&s, "invite", &msg, &send, &rules, sent).await
}

/// The inviter records the invitee's answer (§5.2.2): it ends the pending
/// state; `declined` starts the cooldown.
#[utoipa::path(post, path = "/v1/invites/{id}/status", request_body = InviteStatusBody,
    params(("id" = String, Path), ("x-rdv-auth" = String, Header, description = "signed request")),
    responses((status = 200, body = Object), (status = 400, body = crate::api_refusal::ErrorBody),
        (status = 404, body = crate::api_refusal::ErrorBody), (status = 409, body = crate::api_refusal::ErrorBody)))]
pub async fn invite_status(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Signed { agent, body: b }: Signed<InviteStatusBody>,
) -> Result<Response, ApiRefusal> {
    // Anything but `accepted` or `declined` was refused with the body
    // (400 `malformed`).
    let status = match b.status {
        InviteAnswer::Accepted => "accepted",
        InviteAnswer::Declined => "declined",
    };
    if id.len() > 64 {
        return Err(not_found());
    }
    let now = s.now().unix_timestamp();
    let keep = now + s.inner.cfg.flows.invite_cooldown_days * DAY;
    let before = s
        .inner
        .store
        .set_invite_status(agent.as_str(), &id, status, now, keep)
        .await
        .map_err(ApiRefusal::internal)?;
    match before.as_deref() {
        Some("pending") => {}
        Some(held) if held == status => {}
        Some(_) => {
            return Err(refusal(
                StatusCode::CONFLICT,
                "already_answered",
                "this invite was answered already",
            ));
        }
        None => return Err(not_found()),
    }
    Ok(axum::Json(json!({"id": id, "status": status})).into_response())
}

fn optout_target(s: &AppState, token: &str) -> Result<OptOutId, ApiRefusal> {
    address_key(s)?
        .optout_of_token(token)
        .ok_or_else(|| refusal(StatusCode::NOT_FOUND, "bad_token", "no such opt-out link"))
}

/// The opt-out link (RFC 8058): a page with a confirm button. A GET
/// records nothing, because mail scanners fetch links.
#[utoipa::path(get, path = "/v1/optout/{token}", params(("token" = String, Path)),
    responses((status = 200, content_type = "text/html"), (status = 404, body = crate::api_refusal::ErrorBody)))]
pub async fn optout_page(
    State(s): State<AppState>,
    Path(token): Path<String>,
) -> Result<Response, ApiRefusal> {
    optout_target(&s, &token)?;
    // The form posts to the page's own URL (whatever prefix a proxy adds);
    // nothing of the token or the address is echoed into the page.
    Ok(crate::pages::optout_form())
}

/// Records the opt-out (the confirm button, or an RFC 8058 one-click POST
/// with `List-Unsubscribe=One-Click`). JSON when asked for, else HTML.
#[utoipa::path(post, path = "/v1/optout/{token}", params(("token" = String, Path)),
    responses((status = 200, body = Object), (status = 404, body = crate::api_refusal::ErrorBody)))]
pub async fn optout_confirm(
    State(s): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiRefusal> {
    let id = optout_target(&s, &token)?;
    record_optout(&s, &id).await.map_err(ApiRefusal::internal)?;
    let json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"));
    Ok(if json {
        axum::Json(json!({"status": "opted_out"})).into_response()
    } else {
        crate::pages::optout_done()
    })
}

/// The explainer page every invite links to (§5.2.2).
#[utoipa::path(get, path = "/v1/about",
    responses((status = 200, content_type = "text/html")))]
pub async fn explainer() -> Response {
    crate::pages::explainer()
}
