//! The deterministic gate (§5.2.1 "the gate", §5.2.2), before anything is
//! stored or delivered. Pure: the clock, the verdicts and the limiter state
//! are inputs, so every rule is tested without a network or a wait.
//!
//! Order: size bound, then header screening (marker, one recipient, no list
//! traffic, RFC 3834), then the RDV/1 block through the core's extractor and
//! verifier, then `to_hint`; authentication (`auth`) runs between
//! `screen` and the [`Limiter`], which dedupes and rate-limits.
//! [`Gate::run`] is the one assembly of these steps: the headers are parsed
//! once, after the size bound, and every step reads that parse.

use mail_parser::{HeaderName, Message};
use rdv_proto::consts::{
    ACK_HEADER, ACK_SUBJECT_MARKER, INVITE_HEADER, INVITE_SUBJECT_MARKER, PROBE_ACK_SUBJECT_MARKER,
    PROBE_HEADER, PROBE_LIFETIME_SECS, PROBE_MAX_AHEAD_SECS, PROBE_SUBJECT_MARKER,
};
use rdv_proto::mailblock::{self, BlockKind, BlockPayload};
use rdv_proto::time::Instant;
use rdv_proto::{Address, AgentId};
use serde::Serialize;

use crate::auth::SmtpSession;
use crate::headers::{self, header_all, single_from};
use crate::verdict::{AuthVerdicts, Binding, Refusal, SpfSource};

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

/// Header screening and block verification (§5.2.1 gate steps 3–12,
/// without the mail authentication) of a message bounded and parsed by
/// [`Gate::run`]. `now` is the gate's clock; `allow_ws` admits `ws://`
/// relays in the block's cards (the `dev_allow_ws_relays` switch, local
/// testing only; §4.3 asks for `wss://`).
fn screen(
    raw: &[u8],
    msg: &Message<'_>,
    arrival: &Arrival<'_>,
    now: Instant,
    allow_ws: bool,
) -> Result<Screened, Refusal> {
    if msg.headers().is_empty() {
        return Err(Refusal::Malformed);
    }
    let marks = markers(msg)?;
    check_recipients(msg)?;
    check_list(msg)?;
    check_auto_submitted(msg)?;
    let sender = single_from(msg)?;

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

impl Admitted {
    /// The binding (step 5) of a message whose dedupe and limits are the
    /// [`Limiter`]'s.
    pub fn new(screened: Screened, auth: AuthVerdicts) -> Self {
        let binding = auth.binding();
        Self {
            screened,
            auth,
            binding,
        }
    }
}

/// Dedupe and rate limits (§5.2.1 gate steps 14–15, §5.4), and the queue
/// where there is one: in memory (`Mutex<Limits>`: `check`, the corpus,
/// the bench, the fuzz target) or in the store (`limiter::StoreLimiter`,
/// one transaction with the queueing), behind the one [`Gate::run`].
/// A refused message records nothing.
pub trait Limiter: Sync {
    /// A failure of the limiter itself (the store), never a refusal.
    type Error: std::fmt::Display + Send;

    /// Refuses a duplicate id or a message over a limit; otherwise records
    /// the id and the counts and, when the mailbox has an agent, queues
    /// the message, all at once. The queue's seq when it was queued.
    fn admit(
        &self,
        msg: &Admitted,
        arrival: &Arrival<'_>,
        now: Instant,
    ) -> impl Future<Output = Result<Result<Option<i64>, Refusal>, Self::Error>> + Send;

    /// One echo attempt from `sender`: echoes skip the dedupe (a release is
    /// idempotent), so cookie guesses count against `limits.per_sender`.
    fn echo(
        &self,
        sender: &Address,
        now: Instant,
    ) -> impl Future<Output = Result<Result<(), Refusal>, Self::Error>> + Send;

    /// A forwarding confirmation's `code` for the mailbox's agent
    /// (`forwarding`), at most `forwarding::PER_DAY` per mailbox; queued
    /// with its verdicts. The queue's seq when it was queued.
    fn confirmation(
        &self,
        arrival: &Arrival<'_>,
        code: &str,
        auth: &AuthVerdicts,
        now: Instant,
    ) -> impl Future<Output = Result<Result<Option<i64>, Refusal>, Self::Error>> + Send;
}

/// Where the verdicts come from in a deployment.
pub enum AuthBackend {
    /// Trusted mode: these authserv-ids only.
    Trusted(Vec<String>),
    /// Verify mode, over DNS.
    Verify(Box<crate::auth::Verifier>),
}

/// How a message arrived, beyond its mailbox.
#[derive(Debug, Clone, Copy, Default)]
pub struct Via<'a> {
    /// The SMTP session it came in (verify mode checks SPF against it).
    pub session: Option<&'a SmtpSession>,
    /// Pushed over HTTP (`POST /v1/inbound`): in verify mode without a
    /// session, SPF's session is the topmost `Received` hop by a
    /// `trusted_received_by` host (`received`).
    pub pushed: bool,
    /// By SMTP at the mailbox's gateway address: an unmarked message may
    /// be the provider's forwarding confirmation (`forwarding`).
    pub gateway_address: bool,
}

/// What passed the gate.
#[derive(Debug)]
pub enum Passed {
    /// A marked message (an echo too: its cookie is the caller's to
    /// check), with its queue seq when the limiter queued it.
    Message {
        admitted: Box<Admitted>,
        seq: Option<i64>,
    },
    /// A forwarding confirmation's code, queued (`forwarding`).
    Confirmation { seq: Option<i64> },
}

/// The gate (§5.2.1), assembled once: every caller (`POST /v1/inbound`,
/// the SMTP listener, forwarding confirmations, `check`, the corpus, the
/// bench, the fuzz target) runs [`Gate::run`]; only the [`Limiter`]
/// differs.
pub struct Gate<'a, L> {
    pub backend: &'a AuthBackend,
    pub limiter: &'a L,
    /// `dev_allow_ws_relays` (local testing only).
    pub allow_ws: bool,
    /// `trusted_received_by` (see [`Via::pushed`]).
    pub trusted_received_by: &'a [String],
}

impl<'a, L: Limiter> Gate<'a, L> {
    /// The gate over `backend` and `limiter`, with the switches off.
    pub fn new(backend: &'a AuthBackend, limiter: &'a L) -> Self {
        Self {
            backend,
            limiter,
            allow_ws: false,
            trusted_received_by: &[],
        }
    }

    /// The whole gate for one message: the size bound, one parse of the
    /// headers (`headers::parse`, bounded first) that every later step reads, [`screen`],
    /// authentication, then the [`Limiter`]. A refusal is the inner `Err`;
    /// the outer one is the limiter's own failure.
    pub async fn run(
        &self,
        raw: &[u8],
        arrival: &Arrival<'_>,
        via: Via<'_>,
        now: Instant,
    ) -> Result<Result<Passed, Refusal>, L::Error> {
        let msg = match headers::parse(raw, arrival.max_bytes) {
            Ok(m) => m,
            Err(r) => return Ok(Err(r)),
        };
        let screened = match screen(raw, &msg, arrival, now, self.allow_ws) {
            Ok(s) => s,
            Err(Refusal::NoMarker) if via.gateway_address => {
                return self.confirmation(raw, &msg, arrival, via, now).await;
            }
            Err(r) => return Ok(Err(r)),
        };
        let hop = match self.backend {
            AuthBackend::Verify(_) if via.pushed && via.session.is_none() => {
                crate::received::session(&msg, self.trusted_received_by)
            }
            _ => None,
        };
        let mut auth = self
            .authenticate(
                raw,
                &msg,
                &screened.from_domain,
                via.session.or(hop.as_ref()),
            )
            .await;
        if hop.is_some() && auth.spf_source == Some(SpfSource::Session) {
            auth.spf_source = Some(SpfSource::Received);
        }
        let admitted = Admitted::new(screened, auth);
        let seq = if admitted.screened.kind == BlockKind::ProbeEcho {
            if let Err(r) = self.limiter.echo(&admitted.screened.sender, now).await? {
                return Ok(Err(r));
            }
            None
        } else {
            match self.limiter.admit(&admitted, arrival, now).await? {
                Ok(seq) => seq,
                Err(r) => return Ok(Err(r)),
            }
        };
        Ok(Ok(Passed::Message {
            admitted: Box::new(admitted),
            seq,
        }))
    }

    /// An unmarked message at a gateway address: a forwarding confirmation
    /// for the mailbox's agent, or refused (`forwarding`).
    async fn confirmation(
        &self,
        raw: &[u8],
        msg: &Message<'_>,
        arrival: &Arrival<'_>,
        via: Via<'_>,
        now: Instant,
    ) -> Result<Result<Passed, Refusal>, L::Error> {
        if arrival.agent.is_none() {
            return Ok(Err(Refusal::NotForMailbox));
        }
        let code = match crate::forwarding::screen(msg, arrival.mailbox.canon()) {
            Ok(c) => c,
            Err(r) => return Ok(Err(r)),
        };
        let auth = self
            .authenticate(raw, msg, crate::forwarding::GMAIL_DKIM_DOMAIN, via.session)
            .await;
        if !crate::forwarding::dkim_aligned(&auth) {
            return Ok(Err(Refusal::ForwardingUnverified));
        }
        Ok(self
            .limiter
            .confirmation(arrival, &code, &auth, now)
            .await?
            .map(|seq| Passed::Confirmation { seq }))
    }

    /// Mail authentication (§5.2.1 gate step 13): verdicts, never a
    /// refusal. Trusted mode reads the parsed headers; verify mode hands
    /// the bounded bytes to `mail-auth` (DKIM needs the body).
    async fn authenticate(
        &self,
        raw: &[u8],
        msg: &Message<'_>,
        from_domain: &str,
        session: Option<&SmtpSession>,
    ) -> AuthVerdicts {
        match self.backend {
            AuthBackend::Trusted(ids) => crate::auth::trusted(msg, ids, from_domain),
            AuthBackend::Verify(v) => v.verify(raw, from_domain, session).await,
        }
    }
}

/// The gate with an in-memory limiter (`check`, the corpus, the bench):
/// [`Gate::run`] of a marked message, its outcome as admitted or refused.
pub async fn run<L: Limiter<Error = std::convert::Infallible>>(
    raw: &[u8],
    arrival: &Arrival<'_>,
    session: Option<&SmtpSession>,
    backend: &AuthBackend,
    limits: &L,
    now: Instant,
) -> Result<Admitted, Refusal> {
    let via = Via {
        session,
        ..Via::default()
    };
    match Gate::new(backend, limits).run(raw, arrival, via, now).await {
        Ok(Ok(Passed::Message { admitted, .. })) => Ok(*admitted),
        // Only a gateway address takes forwarding confirmations.
        Ok(Ok(Passed::Confirmation { .. })) => Err(Refusal::NoMarker),
        Ok(Err(r)) => Err(r),
        Err(never) => match never {},
    }
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
