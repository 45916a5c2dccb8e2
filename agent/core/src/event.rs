//! What the agent tells its human: the typed event stream every front-end
//! reads (the CLI's inbox, the MCP server's `rdv_inbox`). Peer-written text
//! is always [`UntrustedPeerText`] (§5.6); everything else is a validated
//! field.

use rdv_proto::AgentId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::peer_text::UntrustedPeerText;

/// One event for the human, as stored in the inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// Someone asks for contact (§5.1); the owner decides.
    ContactRequest {
        request_id: String,
        from: AgentId,
        fingerprint: String,
        binding: String,
        /// `topic` (a probe on one of our addresses) or `envelope`.
        via: String,
        /// The address the probe named, for a topic probe.
        address: Option<String>,
        greeting: UntrustedPeerText,
    },
    /// An answer to our topic probe: a candidate until the owner confirms
    /// it after seeing the fingerprint (§5.3).
    ContactCandidate {
        request_id: String,
        grantor: AgentId,
        fingerprint: String,
        address: String,
    },
    /// Answers over the 16-candidate cap were dropped (§5.3): the real
    /// answer may be among them; redo the contact by card.
    CandidatesDropped { request_id: String, dropped: u64 },
    /// A new contact.
    Contact {
        id: AgentId,
        fingerprint: String,
        label: Option<String>,
        binding: String,
        /// `granted` (our owner granted their request) or `accepted` (they
        /// granted ours) or `confirmed` (our owner confirmed a probe answer).
        how: String,
    },
    /// A free message from a contact.
    Message {
        from: AgentId,
        label: Option<String>,
        seq: u64,
        /// The payload's `type`, a validated token.
        payload_type: String,
        /// The whole payload, as canonical JSON: peer-written.
        payload: UntrustedPeerText,
    },
    /// A contact ended: `peer` (their revoke), `owner`, `abuse` (over the
    /// grant's max_frequency, §5.3 (a), §10) or `task-abuse` (gross abuse of
    /// the per-capability limits, §5.3 (b), with the rule met in `reason`).
    Revoked {
        id: AgentId,
        by: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// What a contact's human now lets us do (§5.3 reverse grant).
    ReverseGrant {
        id: AgentId,
        tier: String,
        may_propose_meetings: bool,
        invoke: Vec<String>,
    },
    /// A contact sent its new card (§4.3); nothing the humans set changed.
    CardUpdated { id: AgentId },
    /// A card-update was dropped (§4.3): older, or failing a check.
    CardUpdateRefused { id: AgentId, reason: String },
    /// A contact forked or rolled back its chain (§6.4): its envelopes are
    /// refused until the owner runs `rdv contact resync`.
    Forked {
        id: AgentId,
        seq: u64,
        reason: String,
    },
    /// A contact restored its agent from a backup (§6.4.1).
    Restored { id: AgentId },
    /// A contact's restore notice was not acted on (§6.4.1): `rate-limited`
    /// (over 3 a day) or `forked` (its chain stays refused until the owner
    /// runs `rdv contact resync`).
    RestoreRefused {
        id: AgentId,
        refusal: String,
        reason: String,
    },
    /// A delivery found no carrier that took it.
    DeliveryFailed {
        delivery: String,
        to: Option<AgentId>,
        reason: String,
    },
    /// A relay refused our event (§6.2); it is cooled down for a while.
    RelayRefused {
        relay: String,
        refusal: String,
        message: UntrustedPeerText,
    },
    /// A payload from a peer was dropped, and why.
    Dropped {
        from: Option<AgentId>,
        reason: String,
    },
    /// A probe gateway refused what we asked it to mail (§5.2.1, §5.2.2):
    /// `what` is probe, syn_ack, ack, send_ack, invite or invite_status;
    /// `refusal` the gateway's code (opted_out, address_limited, …).
    GatewayRefused {
        what: String,
        id: Option<String>,
        address: Option<String>,
        refusal: String,
        /// The gateway's own words: untrusted.
        message: UntrustedPeerText,
        /// Seconds to wait, when the gateway said.
        retry_after: Option<u64>,
    },
    /// The agent our invite to `address` reached asks for contact with the
    /// invite's token (§5.2.2): request `request_id` answers the invite;
    /// the owner still decides (`rdv contact grant`).
    InviteAnswered {
        invite_id: String,
        address: String,
        request_id: String,
        from: AgentId,
        fingerprint: String,
    },
    /// A step of a meeting negotiation (§7.3): `step` is proposed,
    /// offer-received, countered, confirm-needed (the human decides:
    /// `rdv dinner list`, then `rdv dinner confirm`), accepted, accept-sent,
    /// completed, rejected, canceled, meeting-canceled, released, expired,
    /// refused (over a limit, declined with reason rate) or unsupported.
    /// Slots only, never titles (§7.4).
    Meeting {
        step: String,
        peer: AgentId,
        label: Option<String>,
        task_id: String,
        context_id: String,
        state: String,
        slot: Option<crate::meeting::Slot>,
        /// The latest offer.
        slots: Vec<crate::meeting::Slot>,
        /// A peer's decline or cancel reason.
        reason: Option<UntrustedPeerText>,
        /// The step waiting for the human, if any (accept or confirm).
        waiting_for_you: Option<String>,
    },
    /// A general task (§7.6). `step`: received, input, refused (a task
    /// rejected before any state: `reason` scope, rate, input, busy),
    /// unsupported, canceled, expired, update (the executor's status),
    /// artifact, passed (a gate passed without asking: `via` policy or
    /// auto-approve), released, abuse (the contact was revoked, §5.3 (b)).
    Task {
        step: String,
        peer: AgentId,
        label: Option<String>,
        task_id: String,
        capability: Option<String>,
        state: Option<String>,
        reason: Option<String>,
        /// The gate waiting for the human: start or release.
        waiting_for_you: Option<String>,
        via: Option<String>,
        /// What the peer wrote: the request, a question, a result's text.
        text: Option<UntrustedPeerText>,
        /// Validated data from the peer (input, a result's data part):
        /// shaped, still peer-written.
        data: Option<UntrustedPeerText>,
        /// The files that came with it (§7.7), as the human is shown them:
        /// sanitized name and type, size, sha256, encryption, URLs. Never a
        /// key; nothing was fetched.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<Value>,
    },
    /// A direct transfer (§7.7 rdv/transfer). `step`: proposed (a peer
    /// asks for a file by direct transfer; the owner's setting is on, so
    /// it waits for the owner), refused (the setting is off: answered with
    /// abort), aborted (by the peer, by us, or by a bound), declined (the
    /// owner said no). Nothing connects: no transfer protocol is
    /// implemented.
    Transfer {
        step: String,
        peer: AgentId,
        label: Option<String>,
        transfer: String,
        /// The file's sha256.
        file: String,
        task: Option<String>,
        protocols: Vec<String>,
        /// Why it ended: ours, or the peer's (display only).
        reason: Option<UntrustedPeerText>,
    },
    /// The owner's direct-transfer setting (§7.7) counts as off because its
    /// stored MAC does not verify (`reason` says so and how to set it).
    DirectTransfer { on: bool, reason: Option<String> },
    /// auto_approve: all on a contact changed (§5.5.1): set, extended,
    /// off, expired (with why).
    AutoApprove {
        id: AgentId,
        action: String,
        reason: Option<String>,
        until: Option<String>,
    },
    /// Someone's agent invited our owner (§5.2.2). Answering is the normal
    /// consent flow: `rdv contact request <from>`.
    Invited {
        invite_id: String,
        from: AgentId,
        fingerprint: String,
        /// Our mailbox it reached.
        mailbox: Option<String>,
    },
}
