//! Mail authentication (§5.2.1 gate step 2: "verify DMARC/DKIM/SPF via
//! Authentication-Results (RFC 8601). Unaligned mail is challenged, never
//! trusted").
//!
//! Two modes. *Trusted* reads the topmost RFC 8601 header written by a
//! configured authserv-id and ignores every other instance, forged ones
//! included. *Verify* checks DKIM, SPF (from the SMTP session, or for mail
//! pushed over HTTP the trusted `Received` hop, `received`) and DMARC
//! itself with `mail-auth` over a hickory resolver; a DNS failure or the
//! overall timeout is a temperror, which never earns a pass.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use mail_auth::dmarc::verify::DmarcParameters;
use mail_auth::hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{
    AuthenticatedMessage, DkimResult, DmarcResult, MessageAuthenticator, SpfOutput, SpfResult,
};
use mail_parser::Message;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::headers::header_all;
use crate::verdict::{AuthSource, AuthVerdicts, SpfSource, Verdict};

/// What the SMTP session told us, for SPF (RFC 7208 §2.4: MAIL FROM, or
/// the HELO identity when MAIL FROM is null).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmtpSession {
    pub client_ip: IpAddr,
    pub helo: String,
    /// The envelope sender; empty for the null reverse-path.
    pub mail_from: String,
}

/// The authentication mode of a deployment (`auth`). Verify is the
/// default: with nothing configured the gateway checks mail itself over
/// the system's resolver. Trusted mode is chosen explicitly, with the
/// authserv-ids of the MTA it trusts: `[auth.trusted] authserv_ids = […]`.
/// Verify is `auth = "verify"` or an empty `[auth.verify]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// Trust Authentication-Results from these authserv-ids only.
    Trusted { authserv_ids: Vec<String> },
    /// Verify with DNS.
    #[default]
    Verify,
}

/// `[auth.trusted]`: its one key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustedTable {
    authserv_ids: Vec<String>,
}

/// `[auth.verify]` has no keys of its own: the resolver settings
/// (`nameservers`, the DNS timeouts) are top-level keys.
impl<'de> Deserialize<'de> for AuthMode {
    /// Strict by hand: a derived enum would take the first key of a table
    /// holding both `trusted` and `verify` and drop the rest unread.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = AuthMode;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "\"verify\", a [auth.trusted] table with authserv_ids, or [auth.verify]",
                )
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AuthMode, E> {
                match v {
                    "verify" => Ok(AuthMode::Verify),
                    "trusted" => Err(E::custom(
                        "trusted mode needs its authserv-ids: [auth.trusted] authserv_ids = [\"mx.example.org\"]",
                    )),
                    other => Err(E::unknown_variant(other, &["verify", "trusted"])),
                }
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<AuthMode, A::Error> {
                use serde::de::Error as _;
                let mut mode = None;
                while let Some(key) = m.next_key::<String>()? {
                    let this = match key.as_str() {
                        "trusted" => AuthMode::Trusted {
                            authserv_ids: m.next_value::<TrustedTable>()?.authserv_ids,
                        },
                        "verify" => {
                            let keys = m.next_value::<BTreeMap<String, IgnoredAny>>()?;
                            if let Some(k) = keys.keys().next() {
                                return Err(A::Error::custom(format!(
                                    "unknown key `{k}` in [auth.verify]: verify mode has no keys of \
                                     its own (nameservers, dns_query_timeout_secs, \
                                     dns_total_timeout_secs and trusted_received_by are top-level keys)"
                                )));
                            }
                            AuthMode::Verify
                        }
                        other => {
                            return Err(A::Error::unknown_field(other, &["trusted", "verify"]));
                        }
                    };
                    if mode.is_some() {
                        return Err(A::Error::custom(
                            "choose one of [auth.trusted] and [auth.verify], not both",
                        ));
                    }
                    mode = Some(this);
                }
                mode.ok_or_else(|| A::Error::custom("[auth] is empty: choose trusted or verify"))
            }
        }
        d.deserialize_any(V)
    }
}

/// Trusted mode: the verdicts of the topmost Authentication-Results whose
/// authserv-id is one of `trusted` (RFC 8601 §5: the receiving MTA removes
/// or outranks foreign instances of its own id; later hops prepend, so the
/// topmost is the nearest). `from_domain` is the message's From domain: a
/// DMARC pass for another domain is no pass.
pub fn trusted(msg: &Message<'_>, trusted: &[String], from_domain: &str) -> AuthVerdicts {
    let none = |id: &str| {
        AuthVerdicts::none(AuthSource::Trusted {
            authserv_id: id.to_string(),
        })
    };
    for value in header_all(msg, "Authentication-Results") {
        let Some(ar) = parse_ar(&value) else {
            continue;
        };
        if !trusted
            .iter()
            .any(|t| t.eq_ignore_ascii_case(&ar.authserv_id))
        {
            continue;
        }
        return ar.verdicts(from_domain);
    }
    none("")
}

/// (method, result, properties) of one resinfo.
type ArResult = (String, String, Vec<(String, String)>);

/// One parsed Authentication-Results header.
#[derive(Debug, Default)]
struct Ar {
    authserv_id: String,
    /// (method, result, properties)
    results: Vec<ArResult>,
}

/// Removes RFC 5322 comments (nested parentheses, quoted pairs).
fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut depth = 0u32;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if depth > 0 => {
                chars.next();
            }
            '(' => depth += 1,
            ')' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

fn parse_ar(value: &str) -> Option<Ar> {
    let text = strip_comments(value);
    let mut parts = text.split(';');
    let id = parts.next()?.split_whitespace().next()?.to_string();
    let mut ar = Ar {
        authserv_id: id,
        ..Ar::default()
    };
    for p in parts {
        let mut toks = p.split_whitespace();
        let Some(first) = toks.next() else { continue };
        let Some((method, result)) = first.split_once('=') else {
            continue;
        };
        let method = method.split('/').next().unwrap_or_default();
        let props = toks
            .filter_map(|t| t.split_once('='))
            .map(|(k, v)| {
                (
                    k.to_ascii_lowercase(),
                    v.trim_matches('"').to_ascii_lowercase(),
                )
            })
            .collect();
        ar.results.push((
            method.to_ascii_lowercase(),
            result.to_ascii_lowercase(),
            props,
        ));
    }
    Some(ar)
}

fn ar_verdict(method: &str, result: &str) -> Verdict {
    match result {
        "pass" => Verdict::Pass,
        "temperror" => Verdict::TempError,
        "none" => Verdict::None,
        // SPF neutral asserts nothing (RFC 7208 §2.6.2).
        "neutral" if method == "spf" => Verdict::None,
        _ => Verdict::Fail,
    }
}

/// Several results for one method: any pass wins, then temperror, then
/// fail; none only when nothing was said.
fn combine(vs: impl IntoIterator<Item = Verdict>) -> Verdict {
    let mut out = Verdict::None;
    for v in vs {
        out = match (out, v) {
            (Verdict::Pass, _) | (_, Verdict::Pass) => Verdict::Pass,
            (Verdict::TempError, _) | (_, Verdict::TempError) => Verdict::TempError,
            (Verdict::Fail, _) | (_, Verdict::Fail) => Verdict::Fail,
            _ => Verdict::None,
        };
    }
    out
}

impl Ar {
    fn verdicts(&self, from_domain: &str) -> AuthVerdicts {
        let prop = |props: &[(String, String)], k: &str| {
            props.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.clone())
        };
        let of = |m: &'static str| {
            self.results
                .iter()
                .filter(move |(method, _, _)| method == m)
        };
        let dkim = combine(of("dkim").map(|(m, r, _)| ar_verdict(m, r)));
        let dkim_domains = of("dkim")
            .filter(|(_, r, _)| r == "pass")
            .filter_map(|(_, _, p)| prop(p, "header.d"))
            .collect();
        let spf = combine(of("spf").map(|(m, r, _)| ar_verdict(m, r)));
        // A DMARC result speaks for the header.from it names: one for
        // another domain (or none named) says nothing about this message.
        let dmarc = combine(of("dmarc").map(|(m, r, p)| match prop(p, "header.from") {
            Some(d) if d.eq_ignore_ascii_case(from_domain) => ar_verdict(m, r),
            _ => Verdict::None,
        }));
        let arc = {
            let mut it = of("arc").peekable();
            it.peek()
                .is_some()
                .then(|| combine(it.map(|(m, r, _)| ar_verdict(m, r))))
        };
        AuthVerdicts {
            source: AuthSource::Trusted {
                authserv_id: self.authserv_id.clone(),
            },
            dkim,
            dkim_domains,
            spf,
            dmarc,
            arc,
            spf_source: None,
        }
    }
}

/// Verify mode's DNS and limits.
#[derive(Debug, Clone)]
pub struct VerifyConfig {
    /// Nameservers to ask (`ip:port`); the system's when empty.
    pub nameservers: Vec<std::net::SocketAddr>,
    /// Per-query timeout.
    pub query_timeout: Duration,
    /// Bound on the whole verification of one message.
    pub total_timeout: Duration,
    /// Our own host name, for SPF's %{r} macro.
    pub host_domain: String,
}

/// A verifier over one resolver, shared by every message.
pub struct Verifier {
    auth: MessageAuthenticator,
    cfg: VerifyConfig,
}

impl Verifier {
    pub fn new(cfg: VerifyConfig) -> Result<Self, Error> {
        let mut opts = ResolverOpts::default();
        opts.timeout = cfg.query_timeout;
        opts.attempts = 1;
        // Negative answers and errors are not cached longer than a query:
        // a temperror must not outlive the outage.
        opts.negative_max_ttl = Some(Duration::from_secs(60));
        let auth = if cfg.nameservers.is_empty() {
            MessageAuthenticator::new_system_conf()
        } else {
            let servers = cfg
                .nameservers
                .iter()
                .map(|sa| {
                    let mut ns = NameServerConfig::udp_and_tcp(sa.ip());
                    for c in &mut ns.connections {
                        c.port = sa.port();
                    }
                    ns
                })
                .collect();
            MessageAuthenticator::new(ResolverConfig::from_name_servers(servers), opts)
        }
        .map_err(|e| Error::Dns(e.to_string()))?;
        Ok(Self { auth, cfg })
    }

    /// DKIM, SPF and DMARC (and ARC, reported) of `raw`, whose From domain
    /// is `from_domain`. Never fails: a timeout is a temperror.
    pub async fn verify(
        &self,
        raw: &[u8],
        from_domain: &str,
        session: Option<&SmtpSession>,
    ) -> AuthVerdicts {
        match tokio::time::timeout(
            self.cfg.total_timeout,
            self.verify_inner(raw, from_domain, session),
        )
        .await
        {
            Ok(v) => v,
            Err(_) => AuthVerdicts {
                source: AuthSource::Verified,
                dkim: Verdict::TempError,
                dkim_domains: Vec::new(),
                spf: if session.is_some() {
                    Verdict::TempError
                } else {
                    Verdict::None
                },
                dmarc: Verdict::TempError,
                arc: None,
                spf_source: Some(spf_source(session)),
            },
        }
    }

    async fn verify_inner(
        &self,
        raw: &[u8],
        from_domain: &str,
        session: Option<&SmtpSession>,
    ) -> AuthVerdicts {
        let Some(msg) = AuthenticatedMessage::parse(raw) else {
            return AuthVerdicts {
                spf_source: Some(SpfSource::None),
                ..AuthVerdicts::none(AuthSource::Verified)
            };
        };
        let dkim_out = self.auth.verify_dkim(&msg).await;
        let dkim = combine(dkim_out.iter().map(|o| dkim_verdict(o.result())));
        let dkim_domains = dkim_out
            .iter()
            .filter(|o| o.result() == &DkimResult::Pass)
            .filter_map(|o| o.signature().map(|s| s.d.to_ascii_lowercase()))
            .collect();
        let (spf_out, mail_from_domain) = match session {
            Some(s) => {
                let params = if s.mail_from.is_empty() {
                    SpfParameters::verify_ehlo(s.client_ip, &s.helo, &self.cfg.host_domain)
                } else {
                    SpfParameters::verify_mail_from(
                        s.client_ip,
                        &s.helo,
                        &self.cfg.host_domain,
                        &s.mail_from,
                    )
                };
                let domain = s
                    .mail_from
                    .rsplit_once('@')
                    .map_or(s.helo.as_str(), |(_, d)| d)
                    .to_ascii_lowercase();
                (self.auth.verify_spf(params).await, domain)
            }
            None => (
                SpfOutput::new(String::new()).with_result(SpfResult::None),
                String::new(),
            ),
        };
        let spf = match spf_out.result() {
            SpfResult::Pass => Verdict::Pass,
            SpfResult::Fail | SpfResult::SoftFail | SpfResult::PermError => Verdict::Fail,
            SpfResult::TempError => Verdict::TempError,
            SpfResult::Neutral | SpfResult::None => Verdict::None,
        };
        let dmarc_out = self
            .auth
            .verify_dmarc(DmarcParameters::new(
                &msg,
                &dkim_out,
                &mail_from_domain,
                &spf_out,
            ))
            .await;
        // mail-auth reads the From domain from the message; it must be the
        // one the gate screened, or its verdict is about something else.
        let dmarc = if dmarc_out.domain().eq_ignore_ascii_case(from_domain) {
            match dmarc_out.result() {
                DmarcResult::Pass => Verdict::Pass,
                DmarcResult::TempError(_) => Verdict::TempError,
                DmarcResult::None => Verdict::None,
                DmarcResult::Fail(_) | DmarcResult::PermError(_) => Verdict::Fail,
            }
        } else {
            Verdict::None
        };
        let arc = if msg.as_headers.is_empty() && msg.ams_headers.is_empty() {
            None
        } else {
            Some(dkim_verdict(self.auth.verify_arc(&msg).await.result()))
        };
        AuthVerdicts {
            source: AuthSource::Verified,
            dkim,
            dkim_domains,
            spf,
            dmarc,
            arc,
            spf_source: Some(spf_source(session)),
        }
    }
}

/// A session checked here came from the SMTP listener unless the caller
/// says otherwise (`http` marks a `Received` one).
fn spf_source(session: Option<&SmtpSession>) -> SpfSource {
    if session.is_some() {
        SpfSource::Session
    } else {
        SpfSource::None
    }
}

fn dkim_verdict(r: &DkimResult) -> Verdict {
    match r {
        DkimResult::Pass => Verdict::Pass,
        DkimResult::TempError(_) => Verdict::TempError,
        DkimResult::None => Verdict::None,
        DkimResult::Fail(_) | DkimResult::Neutral(_) | DkimResult::PermError(_) => Verdict::Fail,
    }
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

    fn msg(ars: &[&str]) -> Vec<u8> {
        let mut m = String::new();
        for a in ars {
            m.push_str(&format!("Authentication-Results: {a}\r\n"));
        }
        m.push_str("From: a@example.org\r\nTo: b@example.net\r\nSubject: x\r\n\r\nbody\r\n");
        m.into_bytes()
    }

    fn ids() -> Vec<String> {
        vec!["mx.trusted.test".into()]
    }

    #[test]
    fn only_configured_authserv_id_counts() {
        let raw = msg(&["mx.evil.test; dmarc=pass header.from=example.org; dkim=pass"]);
        let v = trusted(&headers(&raw), &ids(), "example.org");
        assert_eq!(v.dmarc, Verdict::None);
        assert_eq!(v.binding(), crate::verdict::Binding::NeedsCookie);
    }

    #[test]
    fn topmost_trusted_instance_wins() {
        let raw = msg(&[
            "mx.trusted.test 1; dkim=fail header.d=example.org; spf=softfail (not permitted) smtp.mailfrom=example.org; dmarc=fail header.from=example.org",
            "mx.trusted.test; dmarc=pass header.from=example.org",
        ]);
        let v = trusted(&headers(&raw), &ids(), "example.org");
        assert_eq!(
            (v.dkim, v.spf, v.dmarc),
            (Verdict::Fail, Verdict::Fail, Verdict::Fail)
        );
    }

    #[test]
    fn dmarc_for_another_domain_is_none() {
        let raw = msg(&[
            "MX.Trusted.Test; dmarc=pass header.from=other.org; dkim=pass header.d=other.org",
        ]);
        let v = trusted(&headers(&raw), &ids(), "example.org");
        assert_eq!(v.dmarc, Verdict::None);
        assert_eq!(v.dkim, Verdict::Pass);
        assert_eq!(v.dkim_domains, vec!["other.org".to_string()]);
    }

    #[test]
    fn comments_and_folding() {
        let raw = msg(&[
            "mx.trusted.test (a comment; dmarc=fail);\r\n\tdkim=pass (good (nested) sig) header.d=example.org;\r\n\tdmarc=pass (p=none) header.from=example.org; arc=none",
        ]);
        let v = trusted(&headers(&raw), &ids(), "example.org");
        assert_eq!(v.dmarc, Verdict::Pass);
        assert_eq!(v.arc, Some(Verdict::None));
        assert_eq!(v.binding(), crate::verdict::Binding::WeakMailboxProof);
        let raw = msg(&["mx.trusted.test; dmarc=temperror header.from=example.org"]);
        let v = trusted(&headers(&raw), &ids(), "example.org");
        assert_eq!(v.dmarc, Verdict::TempError);
        assert_eq!(v.binding(), crate::verdict::Binding::NeedsCookie);
    }

    #[test]
    fn combine_ranks() {
        use Verdict::*;
        assert_eq!(combine([]), None);
        assert_eq!(combine([Fail, Pass]), Pass);
        assert_eq!(combine([Fail, TempError]), TempError);
        assert_eq!(combine([None, Fail]), Fail);
    }
}
