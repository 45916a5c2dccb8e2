//! Verdicts and refusals as data (§5.2.1 "the gate"): what the gate decided
//! about one message, kept with the probe and shown to the agent. Nothing
//! here is an error: a refused mail is a normal outcome.

use serde::{Deserialize, Serialize};

/// One authentication method's result, reduced to the four outcomes the
/// gate acts on. `TempError` is never read as a pass (§5.2.1: unaligned mail
/// is challenged, never trusted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    None,
    #[serde(rename = "temperror")]
    TempError,
}

/// How the verdicts were obtained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum AuthSource {
    /// RFC 8601 Authentication-Results written by a configured authserv-id.
    Trusted { authserv_id: String },
    /// Checked by the gateway itself (DKIM, SPF, DMARC over DNS).
    Verified,
}

/// The authentication verdicts of one message (§5.2.1 gate step 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthVerdicts {
    #[serde(flatten)]
    pub source: AuthSource,
    pub dkim: Verdict,
    /// The `d=` domains of the DKIM signatures that passed.
    pub dkim_domains: Vec<String>,
    pub spf: Verdict,
    pub dmarc: Verdict,
    /// ARC is reported when present (`None` when the message has no ARC set
    /// or the source said nothing about it); it never changes the binding.
    pub arc: Option<Verdict>,
    /// Verify mode: where the SPF identities came from (absent in trusted
    /// mode, where the Authentication-Results speak).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spf_source: Option<SpfSource>,
}

/// Where verify mode took SPF's client IP, HELO and envelope sender
/// (RFC 7208 §2.4) from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpfSource {
    /// The gateway's own SMTP session.
    Session,
    /// The topmost `Received:` by a trusted host (RFC 5321 §4.4).
    Received,
    /// Nothing: SPF is `none`.
    None,
}

impl AuthVerdicts {
    /// Nothing could be said about the message (no trusted header, or
    /// authentication disabled).
    pub fn none(source: AuthSource) -> Self {
        Self {
            source,
            dkim: Verdict::None,
            dkim_domains: Vec::new(),
            spf: Verdict::None,
            dmarc: Verdict::None,
            arc: None,
            spf_source: None,
        }
    }

    /// The binding the verdicts earn (§5.2.1 "Verification"): only a DMARC
    /// pass (which is aligned with the From domain by definition) is a weak
    /// mailbox proof; anything else, temperror included, needs the cookie.
    pub fn binding(&self) -> Binding {
        if self.dmarc == Verdict::Pass {
            Binding::WeakMailboxProof
        } else {
            Binding::NeedsCookie
        }
    }
}

/// What arrival proves about the sender's mailbox (§5.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Binding {
    /// DMARC-aligned pass: the agent may prompt its human at once.
    WeakMailboxProof,
    /// The SYN-ACK's cookie must come back before the contact is more than pending.
    NeedsCookie,
}

/// Why the gate refused a message. Stable snake_case codes for metrics and
/// the API; never carries mail content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case", tag = "refusal", content = "detail")]
pub enum Refusal {
    /// Larger than the configured bound; refused before parsing.
    #[error("message too large")]
    TooLarge,
    /// Not parseable as an RFC 5322 message.
    #[error("not a mail message")]
    Malformed,
    /// Neither a subject marker nor an X-Rdv-* header (§5.2.1 rule 1).
    #[error("no RDV marker")]
    NoMarker,
    /// The subject marker, the X-Rdv-* header and the block disagree.
    #[error("marker mismatch: {0}")]
    MarkerMismatch(String),
    /// More than one recipient, or Cc/Bcc present (§5.2.1 marking).
    #[error("not exactly one recipient")]
    Recipients,
    /// List-Id or Precedence: bulk/list/junk (§5.2.1: never sent to a list).
    #[error("list or bulk traffic")]
    ListTraffic,
    /// Auto-Submitted missing, or not `auto-generated` (RFC 3834: an
    /// auto-replied message is never answered).
    #[error("auto-submitted: {0}")]
    AutoSubmitted(String),
    /// From is not exactly one mailbox.
    #[error("from: {0}")]
    From(String),
    /// No, several, or a malformed RDV/1 block (§5.2.1 gate step 1).
    #[error("rdv block: {0}")]
    Block(String),
    /// The payload does not verify (signature, card, shape; §5.1, §4.6).
    #[error("payload: {0}")]
    Payload(String),
    /// `to_hint` is not the mailbox the mail arrived for.
    #[error("to_hint is not the receiving mailbox")]
    ToHint,
    /// Older than the probe lifetime (14 days, §5.2.1), or dated in the future.
    #[error("expired or from the future")]
    Expired,
    /// The request id was seen before (§5.4 replay protection).
    #[error("duplicate id")]
    Duplicate,
    /// A rate limit (§5.2.1 gate step 3).
    #[error("rate limited per {0}")]
    RateLimited(LimitScope),
    /// The mailbox has no registered agent, or the payload is not for it.
    #[error("not for this mailbox")]
    NotForMailbox,
    /// An `rdv/probe-echo` whose cookie is not the one of a stored probe
    /// of this mailbox's agent from that requester (§5.2.1 ACK leg).
    #[error("the echoed cookie does not match a probe")]
    BadCookie,
    /// A forwarding confirmation whose From is not the provider's, or
    /// without the provider's aligned DKIM pass (`forwarding`).
    #[error("forwarding confirmation not from the provider")]
    ForwardingUnverified,
    /// A forwarding confirmation without a strict `(#<digits>)` code naming
    /// the forwarded mailbox in its subject (`forwarding`).
    #[error("forwarding confirmation subject")]
    ForwardingSubject,
}

impl Refusal {
    /// A short stable code for metrics.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::TooLarge => "too_large",
            Refusal::Malformed => "malformed",
            Refusal::NoMarker => "no_marker",
            Refusal::MarkerMismatch(_) => "marker_mismatch",
            Refusal::Recipients => "recipients",
            Refusal::ListTraffic => "list_traffic",
            Refusal::AutoSubmitted(_) => "auto_submitted",
            Refusal::From(_) => "from",
            Refusal::Block(_) => "block",
            Refusal::Payload(_) => "payload",
            Refusal::ToHint => "to_hint",
            Refusal::Expired => "expired",
            Refusal::Duplicate => "duplicate",
            Refusal::RateLimited(_) => "rate_limited",
            Refusal::NotForMailbox => "not_for_mailbox",
            Refusal::BadCookie => "bad_cookie",
            Refusal::ForwardingUnverified => "forwarding_unverified",
            Refusal::ForwardingSubject => "forwarding_subject",
        }
    }
}

/// Which rate limit refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitScope {
    Sender,
    Requester,
    Mailbox,
}

impl std::fmt::Display for LimitScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitScope::Sender => "sender address",
            LimitScope::Requester => "requester agent",
            LimitScope::Mailbox => "mailbox",
        })
    }
}

/// Why a message was not delivered (`delivery`, `flows::echo_by_mail`).
#[derive(Debug)]
pub enum Delivery {
    /// The gate (or the store's dedupe and limits) refused it: data.
    Refused(Refusal),
    /// The store failed; the message may be retried.
    Internal(String),
}
