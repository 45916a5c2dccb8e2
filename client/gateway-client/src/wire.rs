//! The JSON bodies of the gateway API (docs/probe-gateway.md "HTTP API").
//!
//! Request bodies are shared with the gateway, which parses them with
//! these types (feature `openapi` adds their schemas): strict both ways
//! (`deny_unknown_fields`), and what the gateway documents. Answers
//! come from a gateway that may be newer than this client, so an unknown
//! member is kept (`extra`) rather than refused, while every known member
//! is typed and a wrong type is refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/register`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RegisterBody {
    pub mailbox: String,
}

/// `POST /v1/verify`. Holds the proof code: `Debug` hides it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VerifyBody {
    pub mailbox: String,
    pub code: String,
}

impl std::fmt::Debug for VerifyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyBody")
            .field("mailbox", &self.mailbox)
            .finish_non_exhaustive()
    }
}

/// `POST /v1/send/probe`: the signed contact request (§5.1) the gateway
/// mails as a probe (§5.2.1) to `to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SendProbeBody {
    pub to: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub request: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_mailbox: Option<String>,
    /// The owner's name: the From shows `"<from_name>'s agent" <address>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_name: Option<String>,
}

/// `POST /v1/send/syn-ack`: the signed grant answering the probe at `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SynAckBody {
    pub seq: i64,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub grant: Value,
    /// The owner's name: the From shows `"<from_name>'s agent" <address>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_name: Option<String>,
}

/// `POST /v1/ack`: the probed side releases the probe at `seq` with the
/// cookie the requester echoed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AckBody {
    pub seq: i64,
    pub cookie: String,
}

/// `POST /v1/send/ack`: the requester's signed `rdv/probe-echo` for the
/// SYN-ACK at `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SendAckBody {
    pub seq: i64,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub echo: Value,
    /// The owner's name: the From shows `"<from_name>'s agent" <address>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_name: Option<String>,
}

/// `POST /v1/send/invite`: the signed `rdv/invite` (§5.2.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SendInviteBody {
    pub to: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub invite: Value,
    /// Where the owner got the address (§5.2.2): the gateway states it in
    /// every invite, whatever the note says.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_mailbox: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The owner's name: the From shows `"<from_name>'s agent" <address>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_name: Option<String>,
}

/// The owner's answer to an invite (§5.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum InviteAnswer {
    Accepted,
    Declined,
}

impl std::str::FromStr for InviteAnswer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "accepted" => Ok(Self::Accepted),
            "declined" => Ok(Self::Declined),
            _ => Err("must be accepted or declined".into()),
        }
    }
}

/// `POST /v1/invites/{id}/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InviteStatusBody {
    pub status: InviteAnswer,
}

/// Members an answer carries that this client does not know.
pub type Extra = BTreeMap<String, Value>;

/// `POST /v1/register` answer (202).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registered {
    /// `code_sent`.
    pub status: String,
    pub mailbox: String,
    /// When the code stops working (RFC 3339).
    pub expires: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `POST /v1/verify` answer. The integration token is shown once and is a
/// secret: `Debug` hides it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Verified {
    pub mailbox: String,
    pub agent: String,
    pub token: String,
    /// The gateway's address for this mailbox (where the mail rule
    /// forwards), when it has one.
    #[serde(default)]
    pub gateway_address: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl std::fmt::Debug for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verified")
            .field("mailbox", &self.mailbox)
            .field("agent", &self.agent)
            .field("gateway_address", &self.gateway_address)
            .finish_non_exhaustive()
    }
}

/// One mailbox this key proved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MailboxEntry {
    pub mailbox: String,
    #[serde(default)]
    pub gateway_address: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/mailboxes` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mailboxes {
    pub mailboxes: Vec<MailboxEntry>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// What an inbox item holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A probe (SYN, §5.2.1) for one of our mailboxes.
    Probe,
    /// A SYN-ACK answering one of our probes.
    ProbeAck,
    /// An invite (§5.2.2).
    Invite,
    /// A requester's echo of our SYN-ACK's cookie (the ACK by mail).
    ProbeEcho,
    /// A probe of ours was released (the ACK landed).
    Release,
    /// The provider's code that confirms forwarding to our gateway address
    /// (docs/probe-gateway.md "Forwarding confirmations"): `code`,
    /// `provider` and `mailbox`, no payload.
    ForwardingConfirmation,
    /// A kind this client does not know yet.
    #[serde(untagged)]
    Other(String),
}

/// Where a probe stands at the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemStatus {
    Pending,
    Answered,
    Released,
}

/// One queued message (docs/probe-gateway.md "An inbox item"). Only
/// `seq`, `received` and `kind` are in every item: a release carries the
/// released probe's members instead of a payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxItem {
    pub seq: u64,
    /// When the gateway admitted it (RFC 3339).
    pub received: String,
    pub kind: ItemKind,
    /// Our mailbox it arrived for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
    /// The probe's, SYN-ACK's or invite's id (a release names the probe
    /// in `request_id`, kept in `extra`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
    /// canon(From) of the mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// The verified RDV/1 block payload (peer-written: data, never
    /// instructions, §5.6).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub payload: Value,
    /// DKIM, SPF, DMARC verdicts.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub auth: Value,
    /// `weak_mailbox_proof` or `needs_cookie`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    /// For a probe: the cookie the SYN-ACK carries (§5.2.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    /// For a forwarding confirmation: the code, ASCII digits as the
    /// provider's subject carried them (leading zeros kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// For a forwarding confirmation: who asked (`gmail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A forwarding confirmation's members, borrowed from its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardingConfirmation<'a> {
    /// Our mailbox whose forwarding it confirms.
    pub mailbox: &'a str,
    /// What the owner types into the provider's forwarding settings.
    pub code: &'a str,
    pub provider: Option<&'a str>,
}

impl InboxItem {
    /// The item as a forwarding confirmation: of that kind, with its code
    /// and mailbox (an item lacking either is not one the owner can use).
    pub fn forwarding_confirmation(&self) -> Option<ForwardingConfirmation<'_>> {
        if self.kind != ItemKind::ForwardingConfirmation {
            return None;
        }
        Some(ForwardingConfirmation {
            mailbox: self.mailbox.as_deref()?,
            code: self.code.as_deref()?,
            provider: self.provider.as_deref(),
        })
    }
}

/// `GET /v1/inbox` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inbox {
    pub items: Vec<InboxItem>,
    /// The cursor for the next call (`after`).
    pub next: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A `202 {"status": "sent", …}` answer of the send endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sent {
    /// `sent`.
    pub status: String,
    /// The id of what was sent (probe, invite), when the endpoint says.
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub to: Option<String>,
    #[serde(default)]
    pub seq: Option<u64>,
    #[serde(default)]
    pub message_id: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `POST /v1/ack` answer: the pending contact is released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Released {
    /// `released`.
    pub status: String,
    pub seq: u64,
    pub request_id: String,
    pub requester: String,
    pub mailbox: String,
    /// How the echo arrived (`api`, `mail`, …).
    pub via: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A plain `{"status": …}` answer (invite status).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusAnswer {
    pub status: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Every refusal: `{"error", "message", "retry_after"?}`; the inbound
/// gate's refusals are `{"outcome": "refused", "refusal": code, …}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub retry_after: Option<u64>,
}

/// One server-sent event of `GET /v1/inbox/stream`.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEvent {
    /// `probe`, `release`, … (`message` when the server named none).
    pub event: String,
    /// The `id:` line: the item's seq, the stream's resume cursor.
    pub id: Option<String>,
    /// The `data:` lines, parsed as JSON.
    pub data: Value,
}

impl StreamEvent {
    /// The data as an inbox item.
    pub fn item(&self) -> Result<InboxItem, serde_json::Error> {
        serde_json::from_value(self.data.clone())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The request bodies are what the gateway parses (it shares these
    /// types): the documented members only, optional ones left out when
    /// unset, anything else refused.
    #[test]
    fn request_bodies_are_the_documented_json() {
        let probe = SendProbeBody {
            to: "jane@doe.test".into(),
            request: json!({"type": "rdv/request"}),
            from_mailbox: None,
            from_name: Some("Ann".into()),
        };
        assert_eq!(
            serde_json::to_value(&probe).unwrap(),
            json!({"to": "jane@doe.test", "request": {"type": "rdv/request"}, "from_name": "Ann"})
        );
        let back: SendProbeBody = serde_json::from_value(json!({
            "to": "jane@doe.test", "request": {}, "from_mailbox": null
        }))
        .unwrap();
        assert_eq!((back.from_mailbox, back.from_name), (None, None));
        for bad in [
            json!({"to": "jane@doe.test", "request": {}, "cc": "x@y.test"}),
            json!({"request": {}}),
        ] {
            assert!(serde_json::from_value::<SendProbeBody>(bad).is_err());
        }
        // The gateway's sequence is signed: a negative seq parses (and
        // names no item), a fraction does not.
        let ack: AckBody = serde_json::from_value(json!({"seq": -1, "cookie": "c"})).unwrap();
        assert_eq!(ack.seq, -1);
        assert!(serde_json::from_value::<AckBody>(json!({"seq": 1.5, "cookie": "c"})).is_err());
        let syn: SynAckBody =
            serde_json::from_value(json!({"seq": 3, "grant": {}, "from_name": "Ann"})).unwrap();
        assert_eq!(syn.from_name.as_deref(), Some("Ann"));
        let status: InviteStatusBody =
            serde_json::from_value(json!({"status": "declined"})).unwrap();
        assert_eq!(status.status, InviteAnswer::Declined);
        assert!(serde_json::from_value::<InviteStatusBody>(json!({"status": "maybe"})).is_err());
        let invite: SendInviteBody = serde_json::from_value(json!({
            "to": "jane@doe.test", "invite": {}, "source": "a card", "note": "hi", "from_name": "Ann"
        }))
        .unwrap();
        assert_eq!(invite.note.as_deref(), Some("hi"));
        assert!(
            serde_json::from_value::<VerifyBody>(
                json!({"mailbox": "a@b.test", "code": "x", "k": 1})
            )
            .is_err()
        );
    }

    fn item(extra: Value) -> Result<InboxItem, serde_json::Error> {
        let mut v = json!({"seq": 7, "received": "2026-10-08T12:00:00Z", "kind": "probe"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v)
    }

    #[test]
    fn items_keep_unknown_members_and_refuse_wrong_known_ones() {
        let it = item(json!({"status": "pending", "later": [1]})).unwrap();
        assert_eq!(it.status, Some(ItemStatus::Pending));
        assert_eq!(it.extra["later"], json!([1]));
        // Round trip: the CLI prints what the gateway sent.
        assert_eq!(serde_json::to_value(&it).unwrap()["later"], json!([1]));
        let it = item(json!({"kind": "probe_echo"})).unwrap();
        assert_eq!(it.kind, ItemKind::ProbeEcho);
        let it = item(json!({"kind": "something_new"})).unwrap();
        assert_eq!(it.kind, ItemKind::Other("something_new".into()));
        assert!(item(json!({"status": "lost"})).is_err());
        assert!(item(json!({"seq": -1})).is_err());
        assert!(item(json!({"cookie": 5})).is_err());
        assert!(item(json!({"kind": 1})).is_err());
    }

    #[test]
    fn forwarding_confirmations_are_typed_and_round_trip() {
        // As the gateway sends it (probe-gateway/src/forwarding.rs, http.rs `item`).
        let wire = json!({
            "seq": 9, "received": "2026-10-08T12:00:00Z", "kind": "forwarding_confirmation",
            "code": "012345678", "provider": "gmail", "mailbox": "john@doe.test",
        });
        let it: InboxItem = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(it.kind, ItemKind::ForwardingConfirmation);
        assert!(it.extra.is_empty(), "{:?}", it.extra);
        assert_eq!(
            it.forwarding_confirmation(),
            Some(ForwardingConfirmation {
                mailbox: "john@doe.test",
                code: "012345678",
                provider: Some("gmail"),
            })
        );
        // The CLI prints the item as the gateway sent it.
        assert_eq!(serde_json::to_value(&it).unwrap(), wire);
        // A number is not a code (the leading zero would be lost).
        assert!(item(json!({"kind": "forwarding_confirmation", "code": 12345678})).is_err());
        // Without its code or mailbox it is of no use to the owner.
        let it = item(json!({"kind": "forwarding_confirmation", "mailbox": "j@d.test"})).unwrap();
        assert_eq!(it.forwarding_confirmation(), None);
        // Other kinds are not one, whatever members they carry.
        let it = item(json!({"code": "123456", "mailbox": "j@d.test"})).unwrap();
        assert_eq!(it.forwarding_confirmation(), None);
    }

    #[test]
    fn request_bodies_are_strict_and_secrets_stay_out_of_debug() {
        let b = VerifyBody {
            mailbox: "bob@b.test".into(),
            code: "k3j9x2ab".into(),
        };
        assert!(!format!("{b:?}").contains("k3j9x2ab"));
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            json!({"mailbox": "bob@b.test", "code": "k3j9x2ab"})
        );
        assert!(
            serde_json::from_value::<AckBody>(json!({"seq": 1, "cookie": "c", "x": 1})).is_err()
        );
        // Absent options are left out, not sent as null.
        let p = SendProbeBody {
            to: "bob@b.test".into(),
            request: json!({}),
            from_mailbox: None,
            from_name: None,
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"to": "bob@b.test", "request": {}})
        );
        assert_eq!(
            serde_json::to_value(InviteStatusBody {
                status: InviteAnswer::Declined
            })
            .unwrap(),
            json!({"status": "declined"})
        );
        assert!("maybe".parse::<InviteAnswer>().is_err());
    }
}
