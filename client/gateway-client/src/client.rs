//! The typed blocking HTTP client of the gateway (docs/probe-gateway.md
//! "HTTP API"). Every agent request is signed (`signed`); every answer is
//! bounded before it is parsed; a refusal is data (`Error::Refused`, with
//! the gateway's stable code).

use std::io::{BufReader, Read};
use std::sync::Arc;
use std::time::Duration;

use rand_core::RngCore;
use rdv_proto::doc::obj::is_uuid;
use rdv_proto::time::Instant;
use rdv_proto::{Address, AgentKey};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::signed::{AUTH_HEADER, Now, Signer};
use crate::sse::EventReader;
use crate::wire::{
    AckBody, ErrorBody, Inbox, InviteAnswer, InviteStatusBody, Mailboxes, RegisterBody, Registered,
    Released, SendAckBody, SendInviteBody, SendProbeBody, Sent, StatusAnswer, SynAckBody, Verified,
    VerifyBody,
};

/// Largest answer read (an inbox page of 100 items, each with a block of
/// at most 64 KiB).
pub const MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;
/// Largest refusal body read.
const MAX_ERROR_BYTES: u64 = 64 * 1024;
/// Largest raw message `inbound` sends (the gateway's default
/// `max_mail_bytes`, §5.2.1 gate step 1).
pub const MAX_MAIL_BYTES: usize = rdv_proto::consts::MAIL_MAX_BYTES;
/// The prefix of integration tokens (`rdvgw1.<id>.<secret>`).
pub const TOKEN_PREFIX: &str = "rdvgw1.";

/// One agent's client of one gateway.
pub struct GatewayClient {
    base: String,
    signer: Signer,
    agent: ureq::Agent,
    stream_agent: ureq::Agent,
}

impl std::fmt::Debug for GatewayClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayClient")
            .field("base", &self.base)
            .field("signer", &self.signer)
            .finish_non_exhaustive()
    }
}

/// The events of an inbox stream, until the gateway closes it.
pub type EventStream = EventReader<BufReader<Box<dyn Read + Send + Sync>>>;

impl GatewayClient {
    /// `base` is the gateway's URL, e.g. `https://gw.example` (no `/v1`);
    /// the system clock and the OS randomness sign the requests.
    pub fn new(base: &str, key: AgentKey) -> Self {
        Self::with(
            base,
            key,
            Arc::new(time::OffsetDateTime::now_utc),
            Box::new(rand_core::OsRng),
        )
    }

    /// With an injected clock and randomness (request ids), for tests and
    /// agents that keep their own.
    pub fn with(base: &str, key: AgentKey, now: Now, rng: Box<dyn RngCore + Send>) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            signer: Signer::new(key, now, rng),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(30))
                .build(),
            // A stream lives as long as it is read; the gateway's
            // keep-alives arrive well within the read timeout.
            stream_agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(10))
                .timeout_read(Duration::from_secs(120))
                .build(),
        }
    }

    pub fn key(&self) -> &AgentKey {
        self.signer.key()
    }

    /// The injected clock's now (what the next request is signed with).
    pub fn now(&self) -> Instant {
        self.signer.now()
    }

    /// A fresh UUID from the injected randomness (document ids).
    pub fn fresh_uuid(&self) -> String {
        self.signer.fresh_uuid()
    }

    /// `POST /v1/register`: the gateway mails a proof code to `mailbox`.
    pub fn register(&self, mailbox: &str) -> Result<Registered> {
        let mailbox = email(mailbox)?;
        self.post("/v1/register", &RegisterBody { mailbox })
    }

    /// `POST /v1/verify`: proves the mailbox with the mailed code; the
    /// answer holds the integration token (shown once).
    pub fn verify(&self, mailbox: &str, code: &str) -> Result<Verified> {
        let mailbox = email(mailbox)?;
        let code = code.trim().to_string();
        if code.is_empty() || code.len() > 64 || !code.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::Input("the code is letters and digits".into()));
        }
        self.post("/v1/verify", &VerifyBody { mailbox, code })
    }

    /// `GET /v1/mailboxes`: the mailboxes this key proved.
    pub fn mailboxes(&self) -> Result<Mailboxes> {
        self.call("GET", "/v1/mailboxes", None)
    }

    /// `GET /v1/inbox`: queued messages after the cursor.
    pub fn inbox(&self, after: Option<u64>, limit: Option<u32>) -> Result<Inbox> {
        let mut q = Vec::new();
        if let Some(a) = after {
            q.push(format!("after={a}"));
        }
        if let Some(l) = limit {
            q.push(format!("limit={l}"));
        }
        let path = if q.is_empty() {
            "/v1/inbox".to_string()
        } else {
            format!("/v1/inbox?{}", q.join("&"))
        };
        self.call("GET", &path, None)
    }

    /// `GET /v1/inbox/stream`: the queue after the cursor, then each new
    /// message as it is admitted, until the gateway closes the stream.
    pub fn stream(&self, after: Option<u64>) -> Result<EventStream> {
        let path = match after {
            Some(a) => format!("/v1/inbox/stream?after={a}"),
            None => "/v1/inbox/stream".to_string(),
        };
        let auth = self.signer.header("GET", &path, b"")?;
        let res = self
            .stream_agent
            .get(&format!("{}{path}", self.base))
            .set(AUTH_HEADER, &auth)
            .set("accept", "text/event-stream")
            .call();
        let r = answer(res)?;
        let reader: Box<dyn Read + Send + Sync> = r.into_reader();
        Ok(EventReader::new(BufReader::new(reader)))
    }

    /// `POST /v1/send/probe`: the gateway mails `request` (a signed
    /// contact request whose `to_hint` is canon(`to`), §5.2.1) as a probe.
    pub fn send_probe(
        &self,
        to: &str,
        request: &Value,
        from_mailbox: Option<&str>,
    ) -> Result<Sent> {
        let body = SendProbeBody {
            to: email(to)?,
            request: request.clone(),
            from_mailbox: from_mailbox.map(email).transpose()?,
            from_name: None,
        };
        self.post("/v1/send/probe", &body)
    }

    /// `POST /v1/send/syn-ack`: answers the probe at `seq` with a signed
    /// grant; the gateway adds the cookie and mails the SYN-ACK.
    pub fn syn_ack(&self, seq: u64, grant: &Value) -> Result<Sent> {
        self.post(
            "/v1/send/syn-ack",
            &SynAckBody {
                seq: wire_seq(seq)?,
                grant: grant.clone(),
                from_name: None,
            },
        )
    }

    /// `POST /v1/ack`: the probed side releases the probe at `seq` with
    /// the cookie the requester echoed (the ACK, §5.2.1).
    pub fn ack(&self, seq: u64, cookie: &str) -> Result<Released> {
        self.post(
            "/v1/ack",
            &AckBody {
                seq: wire_seq(seq)?,
                cookie: token_text("cookie", cookie)?,
            },
        )
    }

    /// `POST /v1/send/ack`: the requester mails its signed echo of the
    /// SYN-ACK at `seq` to the probed mailbox.
    pub fn send_ack(&self, seq: u64, echo: &Value) -> Result<Sent> {
        self.post(
            "/v1/send/ack",
            &SendAckBody {
                seq: wire_seq(seq)?,
                echo: echo.clone(),
                from_name: None,
            },
        )
    }

    /// `POST /v1/send/invite`: the gateway mails the signed invite (§5.2.2)
    /// with `source` (where the owner got the address: required, stated in
    /// the invite), the owner's `note`, an explainer link and the opt-out.
    pub fn send_invite(
        &self,
        to: &str,
        invite: &Value,
        source: &str,
        note: Option<&str>,
        from_mailbox: Option<&str>,
    ) -> Result<Sent> {
        if source.trim().is_empty() {
            return Err(Error::Input(
                "the source (where you got the address) is required".into(),
            ));
        }
        let body = SendInviteBody {
            to: email(to)?,
            invite: invite.clone(),
            source: source.trim().to_string(),
            from_mailbox: from_mailbox.map(email).transpose()?,
            note: note.map(str::to_string),
            from_name: None,
        };
        self.post("/v1/send/invite", &body)
    }

    /// `POST /v1/invites/{id}/status`: the owner's answer to an invite.
    pub fn invite_status(&self, id: &str, status: InviteAnswer) -> Result<StatusAnswer> {
        // The id goes into the path: only a UUID, nothing to escape.
        if !is_uuid(id) {
            return Err(Error::Input(
                "the invite id must be a lowercase UUID".into(),
            ));
        }
        self.post(
            &format!("/v1/invites/{id}/status"),
            &InviteStatusBody { status },
        )
    }

    /// `POST /v1/inbound` (the mail rule's pipe): one raw RFC 5322
    /// message for the token's mailbox. Returns the gate's report (with
    /// the queue `seq`); a gate refusal is `Error::Refused` with its code.
    pub fn inbound(&self, token: &str, raw: &[u8]) -> Result<Value> {
        inbound(&self.agent, &self.base, token, raw)
    }

    fn post<B: Serialize, R: DeserializeOwned>(&self, path: &str, body: &B) -> Result<R> {
        let bytes = serde_json::to_vec(body).map_err(|e| Error::Input(e.to_string()))?;
        self.call("POST", path, Some(&bytes))
    }

    fn call<R: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<R> {
        let auth = self.signer.header(method, path, body.unwrap_or_default())?;
        let req = self
            .agent
            .request(method, &format!("{}{path}", self.base))
            .set(AUTH_HEADER, &auth);
        let res = match body {
            Some(b) => req.set("content-type", "application/json").send_bytes(b),
            None => req.call(),
        };
        read_json(answer(res)?)
    }
}

/// `POST /v1/inbound` without an agent key: what a mail rule's pipe runs.
pub fn inbound_with(base: &str, token: &str, raw: &[u8]) -> Result<Value> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    inbound(&agent, base.trim_end_matches('/'), token, raw)
}

fn inbound(agent: &ureq::Agent, base: &str, token: &str, raw: &[u8]) -> Result<Value> {
    let token = token.trim();
    if !token.starts_with(TOKEN_PREFIX)
        || token.len() > 256
        || !token.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Error::Input(format!(
            "an integration token starts with {TOKEN_PREFIX}"
        )));
    }
    if raw.len() > MAX_MAIL_BYTES {
        return Err(Error::Input(format!(
            "the message is over {MAX_MAIL_BYTES} bytes"
        )));
    }
    let res = agent
        .post(&format!("{base}/v1/inbound"))
        .set("authorization", &format!("Bearer {token}"))
        .set("content-type", "message/rfc822")
        .send_bytes(raw);
    read_json(answer(res)?)
}

/// An email address in canonical form (§4.6), or an input error.
fn email(s: &str) -> Result<String> {
    Address::parse_email(s)
        .map(|a| a.canon().to_string())
        .map_err(|_| Error::Input(format!("{s:?} is not an email address")))
}

/// A cookie: 1 to 128 printable ASCII characters (§5.2.1).
fn token_text(what: &str, s: &str) -> Result<String> {
    let s = s.trim();
    if s.is_empty()
        || s.len() > rdv_proto::consts::PROBE_COOKIE_MAX_LEN
        || !s.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Error::Input(format!("bad {what}")));
    }
    Ok(s.to_string())
}

/// A success, or the refusal the gateway answered with.
/// An inbox seq as the request bodies carry it (the gateway's sequence
/// is a signed 64-bit integer).
fn wire_seq(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| Error::Input("seq out of range".into()))
}

fn answer(res: std::result::Result<ureq::Response, ureq::Error>) -> Result<ureq::Response> {
    match res {
        Ok(r) => Ok(r),
        Err(ureq::Error::Status(status, r)) => Err(refusal(status, r)),
        Err(e) => Err(Error::Transport(e.to_string())),
    }
}

fn refusal(status: u16, r: ureq::Response) -> Error {
    let header_retry = r.header("retry-after").and_then(|v| v.trim().parse().ok());
    let body = read_bounded(r, MAX_ERROR_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice::<ErrorBody>(&b).ok());
    let (code, message, retry_after) = match body {
        Some(b) => (
            b.error.or(b.refusal).unwrap_or_else(|| "unknown".into()),
            b.message.unwrap_or_default(),
            b.retry_after.or(header_retry),
        ),
        None => ("unknown".into(), String::new(), header_retry),
    };
    Error::Refused {
        status,
        code,
        message,
        retry_after,
    }
}

fn read_bounded(r: ureq::Response, max: u64) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    r.into_reader()
        .take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::Transport(e.to_string()))?;
    if buf.len() as u64 > max {
        return Err(Error::BadAnswer(format!("answer over {max} bytes")));
    }
    Ok(buf)
}

fn read_json<R: DeserializeOwned>(r: ureq::Response) -> Result<R> {
    let buf = read_bounded(r, MAX_RESPONSE_BYTES)?;
    serde_json::from_slice(&buf).map_err(|e| Error::BadAnswer(e.to_string()))
}
