//! The deterministic gate (§5.2.1 "the gate", §5.2.2), before anything is
//! stored or delivered. Pure: the clock, the verdicts and the limiter state
//! are inputs, so every rule is tested without a network or a wait.
//!
//! Order: size bound, then header screening (marker, one recipient, no list
//! traffic, RFC 3834), then the RDV/1 block through the core's extractor and
//! verifier, then `to_hint`; authentication (`auth`) runs between
//! [`screen`] and [`admit`], which dedupes and rate-limits.

use mail_parser::{HeaderName, Message, MessageParser};
use rdv_proto::consts::{
    ACK_HEADER, ACK_SUBJECT_MARKER, INVITE_HEADER, INVITE_SUBJECT_MARKER, PROBE_ACK_SUBJECT_MARKER,
    PROBE_HEADER, PROBE_LIFETIME_SECS, PROBE_MAX_AHEAD_SECS, PROBE_SUBJECT_MARKER,
};
use rdv_proto::mailblock::{self, BlockKind, BlockPayload};
use rdv_proto::time::Instant;
use rdv_proto::{Address, AgentId};
use serde::Serialize;

use crate::limits::Limits;
use crate::verdict::{AuthVerdicts, Binding, Refusal};

/// What the caller knows about how the message arrived.
#[derive(Debug, Clone)]
pub struct Arrival<'a> {
    /// The mailbox the message arrived for (the integration token's, or the
    /// registered mailbox the SMTP listener matched), canonical.
    pub mailbox: &'a Address,
    /// The agent registered for the mailbox, when there is one.
    pub agent: Option<&'a AgentId>,
    /// The raw-size bound, checked before parsing.
    pub max_bytes: usize,
}

/// A message that passed the screening steps: marked, single-recipient,
/// not list traffic, one verified block addressed to this mailbox.
#[derive(Debug, Clone)]
pub struct Screened {
    pub kind: BlockKind,
    pub payload: BlockPayload,
    /// The verified RDV/1 block as JSON (what is stored and delivered;
    /// never the raw mail).
    pub block: serde_json::Value,
    /// The payload's own id (request, grant or invite id; an echo's
    /// request_ref): the dedupe key.
    pub id: String,
    /// The requester (probe, echo), grantor (SYN-ACK) or inviter agent.
    pub requester: AgentId,
    /// canon(From): the sender address, rate-limit key and cookie input.
    pub sender: Address,
    /// The domain of the From address, for DMARC alignment.
    pub from_domain: String,
    /// When the payload was signed.
    pub ts: Instant,
}

/// A message the gate admitted, with what its arrival proves.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub screened: Screened,
    pub auth: AuthVerdicts,
    pub binding: Binding,
}

/// What the caller records for a refused or admitted message (no content).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub kind: Option<&'static str>,
    pub id: Option<String>,
}

fn kind_name(k: BlockKind) -> &'static str {
    match k {
        BlockKind::Probe => "probe",
        BlockKind::ProbeAck => "probe_ack",
        BlockKind::Invite => "invite",
        BlockKind::ProbeEcho => "probe_echo",
    }
}

impl Screened {
    pub fn summary(&self) -> Summary {
        Summary {
            kind: Some(kind_name(self.kind)),
            id: Some(self.id.clone()),
        }
    }

    pub fn kind_name(&self) -> &'static str {
        kind_name(self.kind)
    }
}

/// Header screening and block verification (§5.2.1 gate steps 1–2 without
/// the mail authentication). `now` is the gate's clock.
pub fn screen(raw: &[u8], arrival: &Arrival<'_>, now: Instant) -> Result<Screened, Refusal> {
    screen_with(raw, arrival, now, false)
}

/// [`screen`], admitting `ws://` relays in the block's cards when
/// `allow_ws` (the `dev_allow_ws_relays` switch, local testing only; §4.3
/// asks for `wss://`).
pub fn screen_with(
    raw: &[u8],
    arrival: &Arrival<'_>,
    now: Instant,
    allow_ws: bool,
) -> Result<Screened, Refusal> {
    if raw.len() > arrival.max_bytes {
        return Err(Refusal::TooLarge);
    }
    let msg = MessageParser::default()
        .parse_headers(raw)
        .ok_or(Refusal::Malformed)?;
    if msg.headers().is_empty() {
        return Err(Refusal::Malformed);
    }
    let marks = markers(&msg)?;
    check_recipients(&msg)?;
    check_list(&msg)?;
    check_auto_submitted(&msg)?;
    let sender = single_from(&msg)?;

    let block = mailblock::extract_block(raw).map_err(|e| match e {
        rdv_proto::Error::TooLarge { .. } => Refusal::TooLarge,
        e => Refusal::Block(e.to_string()),
    })?;
    let payload = mailblock::parse_payload(&block, now, allow_ws).map_err(|e| match e {
        rdv_proto::Error::Expired => Refusal::Expired,
        e => Refusal::Payload(e.to_string()),
    })?;
    let (kind, id, requester, to_hint, ts, header_id) = match &payload {
        BlockPayload::Probe(p) => {
            let r = &p.request;
            (
                BlockKind::Probe,
                r.id.clone(),
                r.from.clone(),
                r.to_hint.clone(),
                r.ts,
                r.id.clone(),
            )
        }
        BlockPayload::ProbeAck(a) => {
            let g = &a.grant;
            let request_ref = match &g.reference {
                rdv_proto::doc::grant::GrantRef::Request(r) => r.clone(),
                rdv_proto::doc::grant::GrantRef::Grant(_) => {
                    return Err(Refusal::Payload("a SYN-ACK answers a request".into()));
                }
            };
            (
                BlockKind::ProbeAck,
                g.id.clone(),
                g.from.clone(),
                None,
                g.ts,
                request_ref,
            )
        }
        BlockPayload::Invite(i) => (
            BlockKind::Invite,
            i.id.clone(),
            i.from.clone(),
            i.to_hint.clone(),
            i.ts,
            i.id.clone(),
        ),
        BlockPayload::ProbeEcho(e) => (
            BlockKind::ProbeEcho,
            e.request_ref.clone(),
            e.from.clone(),
            None,
            e.ts,
            e.request_ref.clone(),
        ),
    };
    marks.check(kind, &header_id, &requester)?;

    // Every payload is dated: the dedupe memory lasts one probe lifetime,
    // so anything older is refused by age, and nothing may be post-dated
    // to outlive it (§5.2.1, §5.4).
    let age = (now - ts).whole_seconds();
    if !(-PROBE_MAX_AHEAD_SECS..PROBE_LIFETIME_SECS).contains(&age) {
        return Err(Refusal::Expired);
    }
    match kind {
        BlockKind::Probe | BlockKind::Invite => {
            let hint = to_hint
                .as_deref()
                .and_then(|h| Address::parse(h).ok())
                .ok_or(Refusal::ToHint)?;
            if &hint != arrival.mailbox {
                return Err(Refusal::ToHint);
            }
        }
        BlockKind::ProbeAck => {
            // A SYN-ACK is addressed to the requester's agent: only that
            // agent's mailbox takes it.
            let BlockPayload::ProbeAck(a) = &payload else {
                return Err(Refusal::NotForMailbox);
            };
            if arrival.agent != Some(&a.grant.to) {
                return Err(Refusal::NotForMailbox);
            }
        }
        BlockKind::ProbeEcho => {
            // The echo goes back to the grantor: only its agent's mailbox
            // takes it (the cookie is checked against the store later).
            let BlockPayload::ProbeEcho(e) = &payload else {
                return Err(Refusal::NotForMailbox);
            };
            if arrival.agent != Some(&e.to) {
                return Err(Refusal::NotForMailbox);
            }
        }
    }
    let from_domain = sender
        .canon()
        .rsplit_once('@')
        .map(|(_, d)| d.to_string())
        .unwrap_or_default();
    Ok(Screened {
        kind,
        payload,
        block,
        id,
        requester,
        sender,
        from_domain,
        ts,
    })
}

/// Dedupe and rate limits (§5.2.1 gate step 3), then the binding (step 5).
/// Records the id and the counts only for an admitted message.
pub fn admit(
    screened: Screened,
    auth: AuthVerdicts,
    arrival: &Arrival<'_>,
    limits: &mut Limits,
    now: Instant,
) -> Result<Admitted, Refusal> {
    limits.admit(
        screened.kind_name(),
        &screened.id,
        screened.sender.canon(),
        screened.requester.as_str(),
        arrival.mailbox.canon(),
        now,
    )?;
    let binding = auth.binding();
    Ok(Admitted {
        screened,
        auth,
        binding,
    })
}

/// The markers a message carries (§5.2.1 "Marking").
struct Markers {
    subject: Option<BlockKind>,
    /// Which header family, with its parsed value.
    header: Option<(&'static str, mailblock::RdvHeader)>,
}

impl Markers {
    /// The block must be what the markers say, and a header must name the
    /// block's own id and signer.
    fn check(&self, kind: BlockKind, id: &str, from: &AgentId) -> Result<(), Refusal> {
        if self.subject.is_some_and(|s| s != kind) {
            return Err(Refusal::MarkerMismatch("subject marker vs block".into()));
        }
        if let Some((name, h)) = &self.header {
            if *name != kind.header_name() {
                return Err(Refusal::MarkerMismatch("header vs block".into()));
            }
            if h.id != id || &h.from != from {
                return Err(Refusal::MarkerMismatch("header id/from vs block".into()));
            }
        }
        Ok(())
    }
}

fn header_text(msg: &Message<'_>, h: &mail_parser::Header<'_>) -> String {
    let raw = msg
        .raw_message()
        .get(h.offset_start as usize..h.offset_end as usize)
        .unwrap_or_default();
    // Unfold (RFC 5322 §2.2.3) and trim.
    String::from_utf8_lossy(raw)
        .replace("\r\n", "")
        .replace('\n', "")
        .trim()
        .to_string()
}

/// Every instance of a header, unfolded, by case-insensitive name.
pub(crate) fn header_all(msg: &Message<'_>, name: &str) -> Vec<String> {
    msg.headers()
        .iter()
        .filter(|h| h.name.as_str().eq_ignore_ascii_case(name))
        .map(|h| header_text(msg, h))
        .collect()
}

fn markers(msg: &Message<'_>) -> Result<Markers, Refusal> {
    let subjects = header_all(msg, "Subject");
    if subjects.len() > 1 {
        return Err(Refusal::MarkerMismatch("more than one Subject".into()));
    }
    let subject = msg.subject().unwrap_or_default().trim_start();
    // [RDV-PROBE-ACK] is checked first; `[RDV-PROBE]` includes its bracket
    // so it cannot match the ACK's marker anyway.
    let subject_kind = [
        (PROBE_ACK_SUBJECT_MARKER, BlockKind::ProbeAck),
        (PROBE_SUBJECT_MARKER, BlockKind::Probe),
        (INVITE_SUBJECT_MARKER, BlockKind::Invite),
        (ACK_SUBJECT_MARKER, BlockKind::ProbeEcho),
    ]
    .into_iter()
    .find(|(m, _)| subject.starts_with(m))
    .map(|(_, k)| k);
    let mut header = None;
    for name in [PROBE_HEADER, INVITE_HEADER, ACK_HEADER] {
        let values = header_all(msg, name);
        match values.as_slice() {
            [] => {}
            [v] => {
                if header.is_some() {
                    return Err(Refusal::MarkerMismatch("both X-Rdv headers".into()));
                }
                let parsed = mailblock::parse_header_value(v)
                    .map_err(|e| Refusal::MarkerMismatch(e.to_string()))?;
                header = Some((name, parsed));
            }
            _ => return Err(Refusal::MarkerMismatch(format!("{name} repeated"))),
        }
    }
    if subject_kind.is_none() && header.is_none() {
        return Err(Refusal::NoMarker);
    }
    Ok(Markers {
        subject: subject_kind,
        header,
    })
}

/// One To address, no Cc or Bcc (§5.2.1: one recipient, never a list).
fn check_recipients(msg: &Message<'_>) -> Result<(), Refusal> {
    let count = |name: HeaderName<'_>| msg.headers().iter().filter(|h| h.name == name).count();
    if count(HeaderName::Cc) > 0 || count(HeaderName::Bcc) > 0 || count(HeaderName::To) != 1 {
        return Err(Refusal::Recipients);
    }
    let to = msg.to().ok_or(Refusal::Recipients)?;
    let mut addrs = to.iter();
    match (addrs.next(), addrs.next()) {
        (Some(a), None) if a.address.as_deref().is_some_and(|s| !s.is_empty()) => Ok(()),
        _ => Err(Refusal::Recipients),
    }
}

fn check_list(msg: &Message<'_>) -> Result<(), Refusal> {
    if !header_all(msg, "List-Id").is_empty() || !header_all(msg, "List-Post").is_empty() {
        return Err(Refusal::ListTraffic);
    }
    for p in header_all(msg, "Precedence") {
        let p = p.trim().to_ascii_lowercase();
        if matches!(p.as_str(), "bulk" | "list" | "junk") {
            return Err(Refusal::ListTraffic);
        }
    }
    Ok(())
}

/// RFC 3834 §5: probes and invites are `auto-generated` (§5.2.1). An
/// `auto-replied` message (an out-of-office answering a probe, quoting it) is
/// never processed, and neither is a message that does not say what it is.
fn check_auto_submitted(msg: &Message<'_>) -> Result<(), Refusal> {
    let values = header_all(msg, "Auto-Submitted");
    let [v] = values.as_slice() else {
        return Err(Refusal::AutoSubmitted(if values.is_empty() {
            "missing".into()
        } else {
            "repeated".into()
        }));
    };
    // The keyword may carry parameters (`auto-generated; owner-email=…`).
    let keyword = v
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if keyword == "auto-generated" {
        Ok(())
    } else if keyword == "auto-replied" {
        Err(Refusal::AutoSubmitted("auto-replied".into()))
    } else {
        Err(Refusal::AutoSubmitted("not auto-generated".into()))
    }
}

pub(crate) fn single_from(msg: &Message<'_>) -> Result<Address, Refusal> {
    if msg
        .headers()
        .iter()
        .filter(|h| h.name == HeaderName::From)
        .count()
        != 1
    {
        return Err(Refusal::From("not exactly one From header".into()));
    }
    let from = msg
        .from()
        .ok_or_else(|| Refusal::From("unparseable".into()))?;
    let mut it = from.iter();
    let (Some(a), None) = (it.next(), it.next()) else {
        return Err(Refusal::From("not exactly one mailbox".into()));
    };
    let addr = a
        .address
        .as_deref()
        .ok_or_else(|| Refusal::From("no address".into()))?;
    let parsed = Address::parse(addr).map_err(|e| Refusal::From(e.to_string()))?;
    if parsed.kind != rdv_proto::AddressKind::Email {
        return Err(Refusal::From("not an email address".into()));
    }
    Ok(parsed)
}

/// Where the verdicts come from in a deployment.
pub enum AuthBackend {
    /// Trusted mode: these authserv-ids only.
    Trusted(Vec<String>),
    /// Verify mode, over DNS.
    Verify(Box<crate::auth::Verifier>),
}

/// Mail authentication of a screened message (§5.2.1 gate step 2):
/// verdicts, never a refusal.
pub async fn authenticate(
    raw: &[u8],
    screened: &Screened,
    session: Option<&crate::auth::SmtpSession>,
    backend: &AuthBackend,
) -> AuthVerdicts {
    match backend {
        AuthBackend::Trusted(ids) => crate::auth::trusted(raw, ids, &screened.from_domain),
        AuthBackend::Verify(v) => v.verify(raw, &screened.from_domain, session).await,
    }
}

impl Admitted {
    /// The binding (step 5) of a message whose dedupe and limits were
    /// checked elsewhere (the store, `store::Store::admit`).
    pub fn new(screened: Screened, auth: AuthVerdicts) -> Self {
        let binding = auth.binding();
        Self {
            screened,
            auth,
            binding,
        }
    }
}

/// The whole gate for one message: [`screen`], authentication, [`admit`].
/// `limits` is locked only for the final, synchronous step.
pub async fn run(
    raw: &[u8],
    arrival: &Arrival<'_>,
    session: Option<&crate::auth::SmtpSession>,
    backend: &AuthBackend,
    limits: &std::sync::Mutex<Limits>,
    now: Instant,
) -> Result<Admitted, Refusal> {
    let screened = screen(raw, arrival, now)?;
    let auth = authenticate(raw, &screened, session, backend).await;
    let mut guard = limits
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    admit(screened, auth, arrival, &mut guard, now)
}

/// The gate's outcome as JSON, for the API and the `check` command: kind,
/// id, verdicts and binding, or the refusal code. No mail content.
pub fn report(result: &Result<Admitted, Refusal>) -> serde_json::Value {
    match result {
        Ok(a) => serde_json::json!({
            "outcome": "admitted",
            "kind": a.screened.kind_name(),
            "id": a.screened.id,
            "requester": a.screened.requester.as_str(),
            "auth": a.auth,
            "binding": a.binding,
        }),
        Err(r) => serde_json::json!({
            "outcome": "refused",
            "refusal": r.code(),
            "reason": r.to_string(),
        }),
    }
}
