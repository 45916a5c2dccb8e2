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

use mail_parser::Message;

use crate::headers;
use crate::limits::Rate;
use crate::verdict::{AuthVerdicts, Refusal, Verdict};

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

/// Header checks of a bounded, parsed message (`headers::parse`, in `gate::Gate::run`): the
/// sender, then the code.
pub(crate) fn screen(msg: &Message<'_>, mailbox: &str) -> Result<String, Refusal> {
    let from = headers::single_from(msg).map_err(|_| Refusal::ForwardingUnverified)?;
    if !from.canon().eq_ignore_ascii_case(GMAIL_FROM) {
        return Err(Refusal::ForwardingUnverified);
    }
    if headers::header_all(msg, "Subject").len() != 1 {
        return Err(Refusal::ForwardingSubject);
    }
    let subject = msg.subject().ok_or(Refusal::ForwardingSubject)?;
    parse_subject(subject, mailbox).ok_or(Refusal::ForwardingSubject)
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
