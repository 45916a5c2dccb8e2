//! Forwarding confirmations (issue #4, docs/probe-gateway.md "Mail flows",
//! "Forwarding confirmations"): Gmail mails a gateway address a numeric
//! code before it forwards to it. Only that code is queued for the
//! mailbox's agent (inbox kind [`KIND`]); the link and the body are never
//! read, stored or logged.
//!
//! Strict: SMTP to a gateway address only, exactly one From equal to
//! [`GMAIL_FROM`], a DKIM pass for [`GMAIL_DKIM_DOMAIN`] in the gateway's
//! own verdicts, a subject `(#<6–12 digits>) …` naming the forwarded
//! mailbox, and [`PER_DAY`] items per mailbox per day.

use mail_parser::MessageParser;
use rdv_proto::Address;
use rdv_proto::time::Instant;
use serde_json::json;

use crate::delivery::Delivery;
use crate::gate::{self, AuthBackend};
use crate::http::AppState;
use crate::limits::Rate;
use crate::store::NewProbe;
use crate::verdict::{AuthVerdicts, LimitScope, Refusal, Verdict};

/// The inbox kind (and SSE event name) of a forwarding confirmation.
pub const KIND: &str = "forwarding_confirmation";
/// The only sender of Gmail's forwarding confirmations.
pub const GMAIL_FROM: &str = "forwarding-noreply@google.com";
/// The DKIM `d=` that must pass (aligned with [`GMAIL_FROM`]).
pub const GMAIL_DKIM_DOMAIN: &str = "google.com";
/// At most this many confirmations per mailbox per day.
pub const PER_DAY: Rate = Rate {
    max: 5,
    window_secs: 24 * 3600,
};
/// The rate-event scope of [`PER_DAY`].
pub const RATE_SCOPE: &str = "forwarding_confirmation";
/// Code length bounds, in ASCII digits.
const CODE_DIGITS: std::ops::RangeInclusive<usize> = 6..=12;

/// The confirmation code of a subject `(#<digits>) …` whose rest names
/// `mailbox` (a whole word, case-insensitive); `None` otherwise.
pub fn parse_subject(subject: &str, mailbox: &str) -> Option<String> {
    let rest = subject.trim_start().strip_prefix("(#")?;
    let (code, tail) = rest.split_once(')')?;
    if !CODE_DIGITS.contains(&code.len()) || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let named = tail
        .split(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '(' | ')' | ',' | ';' | '"'))
        .any(|w| w.eq_ignore_ascii_case(mailbox));
    named.then(|| code.to_string())
}

/// A DKIM pass with `d=` exactly [`GMAIL_DKIM_DOMAIN`].
pub fn dkim_aligned(auth: &AuthVerdicts) -> bool {
    auth.dkim == Verdict::Pass
        && auth
            .dkim_domains
            .iter()
            .any(|d| d.eq_ignore_ascii_case(GMAIL_DKIM_DOMAIN))
}

/// Header checks of a bounded message: the sender, then the code.
fn screen(raw: &[u8], mailbox: &str, max_bytes: usize) -> Result<String, Refusal> {
    if raw.len() > max_bytes {
        return Err(Refusal::TooLarge);
    }
    let msg = MessageParser::default()
        .parse_headers(raw)
        .ok_or(Refusal::Malformed)?;
    let from = gate::single_from(&msg).map_err(|_| Refusal::ForwardingUnverified)?;
    if !from.canon().eq_ignore_ascii_case(GMAIL_FROM) {
        return Err(Refusal::ForwardingUnverified);
    }
    if gate::header_all(&msg, "Subject").len() != 1 {
        return Err(Refusal::ForwardingSubject);
    }
    let subject = msg.subject().ok_or(Refusal::ForwardingSubject)?;
    parse_subject(subject, mailbox).ok_or(Refusal::ForwardingSubject)
}

/// Delivers a forwarding confirmation that arrived by SMTP at `mailbox`'s
/// gateway address: the code is queued for the mailbox's agent, or the
/// refusal returned (the caller counts and logs its code only).
pub(crate) async fn deliver(
    state: &AppState,
    mailbox: &str,
    raw: &[u8],
    session: Option<&crate::auth::SmtpSession>,
    now: Instant,
) -> Result<i64, Delivery> {
    let s = &state.inner;
    let internal = |e: &dyn std::fmt::Display| Delivery::Internal(e.to_string());
    let agent = match s.store.mailbox_agent(mailbox).await {
        Ok(Some(a)) => a,
        Ok(None) => return Err(Delivery::Refused(Refusal::NotForMailbox)),
        Err(e) => return Err(internal(&e)),
    };
    let code = screen(raw, mailbox, s.cfg.max_mail_bytes).map_err(Delivery::Refused)?;
    let auth = match &s.backend {
        AuthBackend::Trusted(ids) => crate::auth::trusted(raw, ids, GMAIL_DKIM_DOMAIN),
        AuthBackend::Verify(v) => v.verify(raw, GMAIL_DKIM_DOMAIN, session).await,
    };
    if !dkim_aligned(&auth) {
        return Err(Delivery::Refused(Refusal::ForwardingUnverified));
    }
    let Ok(mailbox_addr) = Address::parse(mailbox) else {
        return Err(Delivery::Internal("stored mailbox does not parse".into()));
    };
    let payload = json!({
        "code": code,
        "provider": "gmail",
        "mailbox": mailbox_addr.canon(),
    });
    let item = NewProbe {
        mailbox: mailbox.to_string(),
        agent: agent.clone(),
        kind: KIND.into(),
        id: String::new(),
        requester: String::new(),
        sender: GMAIL_FROM.into(),
        ts: now.unix_timestamp(),
        payload: payload.to_string(),
        auth: serde_json::to_string(&auth).unwrap_or_default(),
        binding: String::new(),
    };
    let seq = s
        .store
        .queue_limited(&item, RATE_SCOPE, mailbox, PER_DAY, now.unix_timestamp())
        .await
        .map_err(|e| internal(&e))?
        .ok_or(Delivery::Refused(Refusal::RateLimited(LimitScope::Mailbox)))?;
    let _ = s.notify.send(agent);
    Ok(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: &str = "john@gmail.com";

    #[test]
    fn subject_code_is_strict() {
        let ok = "(#123456789) Gmail Forwarding Confirmation - Receive Mail from john@gmail.com";
        assert_eq!(parse_subject(ok, MB).as_deref(), Some("123456789"));
        assert_eq!(
            parse_subject(&ok.replace("john@", "JOHN@"), MB).as_deref(),
            Some("123456789")
        );
        for bad in [
            "Gmail Forwarding Confirmation - Receive Mail from john@gmail.com",
            "(#12345) Receive Mail from john@gmail.com",
            "(#1234567890123) Receive Mail from john@gmail.com",
            "(#12345a789) Receive Mail from john@gmail.com",
            "(#１２３４５６７) Receive Mail from john@gmail.com",
            "(# 123456789) Receive Mail from john@gmail.com",
            "Re: (#123456789) Receive Mail from john@gmail.com",
            "(#123456789) Receive Mail from eve@gmail.com",
            "(#123456789) Receive Mail from xjohn@gmail.com",
            "(#123456789) Receive Mail from john@gmail.com.evil.test",
            "(#123456789)",
        ] {
            assert_eq!(parse_subject(bad, MB), None, "{bad}");
        }
    }
}
