//! SPF for mail pushed over HTTP (issue #4): the SMTP session rebuilt from
//! the trace field the integrator's own MTA wrote (RFC 5321 §4.4).
//!
//! Only the **topmost** `Received:` header is read (the nearest hop; later
//! hops prepend), and only when its `by` host is a configured trusted name:
//! every header below it may be written by the sender. Its `from` clause
//! must be `from <helo> ([<rdns>] [<ip>])` exactly; the envelope sender is
//! the one `Return-Path:` (RFC 5321 §4.4, `<addr>` or `<>`). Anything
//! ambiguous or malformed gives no session (SPF `none`), never a pass.
//! Headers are bounded before they are parsed and never logged.

use std::net::{IpAddr, Ipv6Addr};

use mail_parser::Message;

use crate::auth::SmtpSession;

/// Longest `Received:` value read, raw bytes with folding.
pub const MAX_RECEIVED_BYTES: usize = 2048;
/// Longest `Return-Path:` value read, raw bytes with folding.
pub const MAX_RETURN_PATH_BYTES: usize = 600;
/// Longest domain name (RFC 1035 §2.3.4, presentation form).
const MAX_DOMAIN: usize = 255;

/// The SMTP session of the hop that wrote the topmost `Received:` of
/// the parsed message, when that hop is one of `trusted_by` (case-insensitive) and the
/// trace field and `Return-Path:` parse strictly. `None` otherwise.
pub fn session(msg: &Message<'_>, trusted_by: &[String]) -> Option<SmtpSession> {
    if trusted_by.is_empty() {
        return None;
    }
    let value = |h: &mail_parser::Header<'_>, max: usize| -> Option<String> {
        let bytes = msg
            .raw_message()
            .get(h.offset_start as usize..h.offset_end as usize)?;
        if bytes.len() > max {
            return None;
        }
        // Unfold (RFC 5322 §2.2.3); anything but ASCII is refused.
        let text = std::str::from_utf8(bytes).ok()?;
        text.is_ascii()
            .then(|| text.replace("\r\n", "").replace('\n', ""))
    };
    let top = msg
        .headers()
        .iter()
        .find(|h| h.name.as_str().eq_ignore_ascii_case("Received"))?;
    let hop = parse_received(&value(top, MAX_RECEIVED_BYTES)?)?;
    let by = hop.by.trim_end_matches('.');
    if !trusted_by
        .iter()
        .any(|t| t.trim_end_matches('.').eq_ignore_ascii_case(by))
    {
        return None;
    }
    let mut paths = msg
        .headers()
        .iter()
        .filter(|h| h.name.as_str().eq_ignore_ascii_case("Return-Path"));
    let (Some(path), None) = (paths.next(), paths.next()) else {
        return None;
    };
    let mail_from = parse_return_path(&value(path, MAX_RETURN_PATH_BYTES)?)?;
    Some(SmtpSession {
        client_ip: hop.ip,
        helo: hop.helo,
        mail_from,
    })
}

/// What one trace field says about the connection it records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The HELO/EHLO name (a domain or an address literal).
    pub helo: String,
    /// The connecting IP, from the TCP-info's address literal.
    pub ip: IpAddr,
    /// The host that wrote the field.
    pub by: String,
}

/// Parses an unfolded `Received:` value (RFC 5321 §4.4 `Stamp`): exactly
/// `from <helo> (<TCP-info>) by <host>`, then anything up to `;`. TCP-info
/// is `[<ip>]` or `<rdns> [<ip>]` (one address literal, no nested
/// comment). A second `from` or `by`, a comment anywhere else before `by`,
/// or an unbalanced comment refuses the whole field.
pub fn parse_received(value: &str) -> Option<Hop> {
    if value.len() > MAX_RECEIVED_BYTES || !value.is_ascii() {
        return None;
    }
    let stamp = value.split(';').next()?;
    let toks = tokens(stamp)?;
    let [from, helo, info, by, host, rest @ ..] = toks.as_slice() else {
        return None;
    };
    if !from.eq_ignore_ascii_case("from") || !by.eq_ignore_ascii_case("by") {
        return None;
    }
    // The `from` and `by` clauses occur once (RFC 5321 §4.4).
    if rest
        .iter()
        .any(|t| t.eq_ignore_ascii_case("from") || t.eq_ignore_ascii_case("by"))
    {
        return None;
    }
    let helo = if helo.starts_with('[') {
        address_literal(helo)?;
        helo.to_string()
    } else {
        domain(helo)?.to_string()
    };
    let host = domain(host)?.to_string();
    let inner = info.strip_prefix('(')?.strip_suffix(')')?;
    if inner.contains(['(', ')', '\\', '"']) {
        return None;
    }
    let ip = match inner
        .split_ascii_whitespace()
        .collect::<Vec<_>>()
        .as_slice()
    {
        [lit] => address_literal(lit)?,
        [rdns, lit] => {
            domain(rdns)?;
            address_literal(lit)?
        }
        _ => return None,
    };
    Some(Hop { helo, ip, by: host })
}

/// Whitespace-separated tokens, a balanced comment (RFC 5322 §3.2.2, with
/// quoted pairs) being one token; `None` when a comment is unbalanced or
/// glued to a word.
fn tokens(s: &str) -> Option<Vec<&str>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if b[i] == b'(' {
            let mut depth = 0u32;
            loop {
                match b.get(i)? {
                    b'\\' => i += 1,
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            i += 1;
            if b.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
                return None;
            }
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                if b[i] == b'(' || b[i] == b')' {
                    return None;
                }
                i += 1;
            }
        }
        out.push(s.get(start..i)?);
    }
    Some(out)
}

/// A host name: letters, digits, `-`, `_` and dots, at most 255 bytes.
fn domain(s: &str) -> Option<&str> {
    let ok = !s.is_empty()
        && s.len() <= MAX_DOMAIN
        && !s.starts_with('.')
        && !s.contains("..")
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    ok.then_some(s)
}

/// `[192.0.2.1]`, `[IPv6:2001:db8::1]` or `[2001:db8::1]` (RFC 5321
/// §4.1.3); an IPv4-mapped IPv6 address is read as the IPv4 one.
fn address_literal(s: &str) -> Option<IpAddr> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let ip = match inner.get(..5) {
        Some(p) if p.eq_ignore_ascii_case("ipv6:") => {
            IpAddr::V6(inner.get(5..)?.parse::<Ipv6Addr>().ok()?)
        }
        _ => inner.parse::<IpAddr>().ok()?,
    };
    Some(ip.to_canonical())
}

/// `Return-Path:` (RFC 5321 §4.4 `Return-path-line`): `<>` is the null
/// reverse-path (empty), `<local@domain>` the envelope sender; anything
/// else (no brackets, quoting, a route, several addresses) is refused.
pub fn parse_return_path(value: &str) -> Option<String> {
    let inner = value.trim().strip_prefix('<')?.strip_suffix('>')?;
    if inner.is_empty() {
        return Some(String::new());
    }
    let (local, dom) = inner.rsplit_once('@')?;
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && local
            .bytes()
            .all(|c| c.is_ascii_graphic() && !b"<>()[]\\,;:@\"".contains(&c));
    (local_ok && domain(dom).is_some_and(|d| d.contains('.'))).then(|| inner.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn headers(raw: &[u8]) -> Message<'_> {
        mail_parser::MessageParser::default()
            .parse_headers(raw)
            .unwrap()
    }

    fn trusted() -> Vec<String> {
        vec!["mx.example.org".into()]
    }

    fn mail(headers: &str) -> Vec<u8> {
        format!("{headers}From: a@sender.test\r\nTo: b@example.org\r\nSubject: x\r\n\r\nbody\r\n")
            .into_bytes()
    }

    const POSTFIX: &str = "from mail.sender.test (mail.sender.test [192.0.2.1]) by mx.example.org (Postfix) with ESMTPS id 4Xyz for <b@example.org>; Thu, 8 Oct 2026 11:00:00 +0000";

    #[test]
    fn ipv4() {
        let h = parse_received(POSTFIX).unwrap();
        assert_eq!(h.helo, "mail.sender.test");
        assert_eq!(h.ip, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(h.by, "mx.example.org");
        let h = parse_received("from helo.test ([192.0.2.9]) by mx.example.org").unwrap();
        assert_eq!(h.ip, "192.0.2.9".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn ipv6() {
        let h = parse_received(
            "from [IPv6:2001:db8::5] (unknown [IPv6:2001:db8::1]) by mx.example.org with ESMTP; x",
        )
        .unwrap();
        assert_eq!(h.ip, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(h.helo, "[IPv6:2001:db8::5]");
        let h = parse_received("from h.test (h.test [2001:db8::2]) by mx.example.org").unwrap();
        assert_eq!(h.ip, "2001:db8::2".parse::<IpAddr>().unwrap());
        // IPv4-mapped is the IPv4 address.
        let h = parse_received("from h.test ([IPv6:::ffff:192.0.2.3]) by mx.example.org").unwrap();
        assert_eq!(h.ip, "192.0.2.3".parse::<IpAddr>().unwrap());
        assert!(parse_received("from h.test ([IPv6:192.0.2.3]) by mx.example.org").is_none());
    }

    #[test]
    fn missing_brackets_or_bad_ip() {
        for v in [
            "from h.test (h.test 192.0.2.1) by mx.example.org",
            "from h.test (h.test) by mx.example.org",
            "from h.test (h.test [192.0.2.1) by mx.example.org",
            "from h.test (h.test [192.0.2.01]) by mx.example.org",
            "from h.test (h.test [192.0.2.256]) by mx.example.org",
            "from h.test (h.test [mail.test]) by mx.example.org",
            "from h.test by mx.example.org",
            "from h.test [192.0.2.1] by mx.example.org",
        ] {
            assert!(parse_received(v).is_none(), "{v}");
        }
    }

    #[test]
    fn two_ips_refused() {
        for v in [
            "from h.test (h.test [192.0.2.1] [198.51.100.7]) by mx.example.org",
            "from h.test ([192.0.2.1] [198.51.100.7]) by mx.example.org",
            "from h.test (h.test [192.0.2.1]) (x [198.51.100.7]) by mx.example.org",
        ] {
            assert!(parse_received(v).is_none(), "{v}");
        }
    }

    #[test]
    fn comments() {
        // Comments after `by` (even with brackets or parentheses) are fine.
        let h = parse_received(
            "from h.test (h.test [192.0.2.1]) by mx.example.org (Postfix (x) [198.51.100.7]) (using TLSv1.3 with cipher X (256/256 bits)) with ESMTPS",
        )
        .unwrap();
        assert_eq!(h.ip, "192.0.2.1".parse::<IpAddr>().unwrap());
        for v in [
            // A nested comment or an extra clause inside TCP-info.
            "from h.test (h.test [192.0.2.1] (may be forged)) by mx.example.org",
            "from h.test ([192.0.2.1] helo=h.test) by mx.example.org",
            // A comment before the HELO name or glued to a word.
            "from (c) h.test (h.test [192.0.2.1]) by mx.example.org",
            "from h.test(h.test [192.0.2.1]) by mx.example.org",
            // Unbalanced.
            "from h.test (h.test [192.0.2.1] by mx.example.org",
            "from h.test (h.test [192.0.2.1])) by mx.example.org",
            // A second `by` or `from`, or a HELO that is no host name.
            "from h.test (h.test [192.0.2.1]) by evil.test by mx.example.org",
            "from h.test (h.test [192.0.2.1]) by mx.example.org from x",
            "from h\"x (h.test [192.0.2.1]) by mx.example.org",
        ] {
            assert!(parse_received(v).is_none(), "{v}");
        }
    }

    #[test]
    fn folded_header() {
        let raw = mail(
            "Return-Path: <bounce@sender.test>\r\nReceived: from mail.sender.test\r\n\t(mail.sender.test [192.0.2.1])\r\n        by mx.example.org (Postfix) with ESMTPS id 4Xyz\r\n\tfor <b@example.org>; Thu, 8 Oct 2026 11:00:00 +0000\r\n",
        );
        let s = session(&headers(&raw), &trusted()).unwrap();
        assert_eq!(s.client_ip, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(s.helo, "mail.sender.test");
        assert_eq!(s.mail_from, "bounce@sender.test");
        // The trusted name matches case-insensitively, a root dot aside.
        assert!(session(&headers(&raw), &["MX.Example.Org.".to_string()]).is_some());
    }

    #[test]
    fn overlong_header_refused() {
        let pad = "x".repeat(MAX_RECEIVED_BYTES);
        let raw = mail(&format!(
            "Return-Path: <bounce@sender.test>\r\nReceived: from h.test (h.test [192.0.2.1]) by mx.example.org (\r\n\t{pad}); x\r\n"
        ));
        assert!(session(&headers(&raw), &trusted()).is_none());
        assert!(parse_received(&format!("{POSTFIX} {pad}")).is_none());
        // The same header within the bound is read.
        let raw = mail(&format!(
            "Return-Path: <bounce@sender.test>\r\nReceived: {POSTFIX}\r\n"
        ));
        assert!(session(&headers(&raw), &trusted()).is_some());
    }

    #[test]
    fn not_topmost_trusted_header_ignored() {
        // The topmost hop is not trusted: the trusted one below is ignored.
        let raw = mail(&format!(
            "Return-Path: <bounce@sender.test>\r\nReceived: from mx.example.org (mx.example.org [10.0.0.1]) by imap.example.org with LMTP; x\r\nReceived: {POSTFIX}\r\n"
        ));
        assert!(session(&headers(&raw), &trusted()).is_none());
        // A malformed topmost one is not skipped either.
        let raw = mail(&format!(
            "Return-Path: <bounce@sender.test>\r\nReceived: garbage\r\nReceived: {POSTFIX}\r\n"
        ));
        assert!(session(&headers(&raw), &trusted()).is_none());
    }

    #[test]
    fn forged_lower_header_ignored() {
        // The sender wrote a Received "by" the trusted host claiming an
        // authorized IP; the real topmost hop records 203.0.113.9.
        let raw = mail(
            "Return-Path: <bounce@sender.test>\r\nReceived: from evil.test (evil.test [203.0.113.9]) by mx.example.org (Postfix); x\r\nReceived: from mail.sender.test (mail.sender.test [192.0.2.1]) by mx.example.org; x\r\n",
        );
        let s = session(&headers(&raw), &trusted()).unwrap();
        assert_eq!(s.client_ip, "203.0.113.9".parse::<IpAddr>().unwrap());
        assert_eq!(s.helo, "evil.test");
    }

    #[test]
    fn off_untrusted_and_return_path() {
        let raw = mail(&format!(
            "Return-Path: <bounce@sender.test>\r\nReceived: {POSTFIX}\r\n"
        ));
        assert!(session(&headers(&raw), &[]).is_none());
        assert!(session(&headers(&raw), &["mx.other.org".to_string()]).is_none());
        // No Received at all.
        let raw = mail("Return-Path: <a@sender.test>\r\n");
        assert!(session(&headers(&raw), &trusted()).is_none());
        // Return-Path: exactly one, strictly shaped; `<>` is the null path.
        let with = |rp: &str| {
            let raw = mail(&format!("{rp}Received: {POSTFIX}\r\n"));
            session(&headers(&raw), &trusted())
        };
        assert_eq!(with("Return-Path: <>\r\n").unwrap().mail_from, "");
        for rp in [
            "",
            "Return-Path: <a@sender.test>\r\nReturn-Path: <b@sender.test>\r\n",
            "Return-Path: a@sender.test\r\n",
            "Return-Path: <a@sender.test>, <b@sender.test>\r\n",
            "Return-Path: <@relay.test:a@sender.test>\r\n",
            "Return-Path: <\"a b\"@sender.test>\r\n",
            "Return-Path: <a@sender>\r\n",
            "Return-Path: <a@@sender.test>\r\n",
        ] {
            assert!(with(rp).is_none(), "{rp}");
        }
    }
}
