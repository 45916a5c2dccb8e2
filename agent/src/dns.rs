//! DNS TXT discovery (§4.4 item 2): `_agent.<domain> TXT "rdv=rdv1:…"`
//! names the agent of an email address's domain. The answer is
//! attacker-controlled: it is bounded (record size, record count) and
//! parsed strictly (exactly `rdv=` and a canonical agent ID); anything
//! else is ignored. A hit gives only an agent ID: its card is fetched and
//! must carry that ID (discovery.rs).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{Name, RData};
use rdv_proto::{Address, AddressKind, AgentId};

use crate::error::{Error, Result};

/// Environment override of the resolver: `IP[:PORT]` (port 53 when none)
/// asks that server only, over UDP then TCP; `off` skips DNS.
pub const DNS_SERVER_ENV: &str = "RDV_DNS_SERVER";
/// The record's prefix, exactly (§4.4).
pub const TXT_PREFIX: &str = "rdv=";
/// Largest TXT record read, its length octets included: one full
/// character-string. A valid record is 62.
pub const TXT_MAX_BYTES: usize = 255;
/// An answer with more TXT records than this is ignored whole.
pub const TXT_MAX_RECORDS: usize = 16;
/// At most this many agent IDs are taken from one answer.
pub const MAX_CANDIDATES: usize = 8;
/// How long one lookup may take, retries included.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(4);

/// Which resolver to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dns {
    /// No DNS lookups.
    Off,
    /// The system's resolvers (`/etc/resolv.conf`).
    System,
    /// One server (tests, or an operator's own resolver).
    Server(SocketAddr),
}

/// What one TXT lookup gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// The name asked, e.g. `_agent.example.com`.
    pub name: String,
    /// The agent IDs named, in answer order, without repeats.
    pub ids: Vec<AgentId>,
    /// TXT records ignored (malformed, oversize, another format, over the bounds).
    pub ignored: usize,
}

impl Dns {
    /// From `RDV_DNS_SERVER` (unset or empty: the system resolver).
    pub fn from_env() -> Result<Dns> {
        match std::env::var(DNS_SERVER_ENV) {
            Ok(v) if !v.is_empty() => Dns::parse(&v),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(Dns::System),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(Error::Input(format!("{DNS_SERVER_ENV} is not valid UTF-8")))
            }
        }
    }

    /// `off`, `system`, `IP` or `IP:PORT` (`[v6]:PORT`).
    pub fn parse(s: &str) -> Result<Dns> {
        match s {
            "off" => return Ok(Dns::Off),
            "system" => return Ok(Dns::System),
            _ => {}
        }
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(Dns::Server(a));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Dns::Server(SocketAddr::new(ip, 53)));
        }
        Err(Error::Input(format!(
            "{DNS_SERVER_ENV}={s:?}: expected off, system, IP or IP:PORT"
        )))
    }

    pub(crate) fn resolver(&self) -> Result<Option<TokioResolver>> {
        let mut builder = match self {
            Dns::Off => return Ok(None),
            Dns::System => TokioResolver::builder_tokio()
                .map_err(|e| Error::Carrier(format!("dns: the system resolver: {e}")))?,
            Dns::Server(a) => {
                let mut udp = ConnectionConfig::udp();
                udp.port = a.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = a.port();
                let ns = NameServerConfig::new(a.ip(), true, vec![udp, tcp]);
                TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![ns]),
                    TokioRuntimeProvider::default(),
                )
            }
        };
        let o = builder.options_mut();
        o.timeout = Duration::from_secs(2);
        o.attempts = 1;
        o.cache_size = 64;
        let r = builder
            .build()
            .map_err(|e| Error::Carrier(format!("dns: {e}")))?;
        Ok(Some(r))
    }

    /// The agent IDs `_agent.<domain>` names for an email address; `None`
    /// when there is nothing to ask (DNS off, a phone, a domain that is no
    /// DNS name). No record, or no such name, is an empty answer.
    pub async fn lookup(&self, address: &Address) -> Result<Option<Answer>> {
        let Some(name) = txt_name(address) else {
            return Ok(None);
        };
        let Some(resolver) = self.resolver()? else {
            return Ok(None);
        };
        let mut answer = Answer {
            name: name.to_ascii().trim_end_matches('.').to_string(),
            ..Answer::default()
        };
        let got = tokio::time::timeout(LOOKUP_TIMEOUT, resolver.txt_lookup(name)).await;
        let lookup = match got {
            Err(_) => {
                return Err(Error::Carrier(format!("dns {}: timed out", answer.name)));
            }
            Ok(Err(e)) if e.is_no_records_found() || e.is_nx_domain() => return Ok(Some(answer)),
            Ok(Err(e)) => return Err(Error::Carrier(format!("dns {}: {e}", answer.name))),
            Ok(Ok(l)) => l,
        };
        let records: Vec<&[Box<[u8]>]> = lookup
            .answers()
            .iter()
            .filter_map(|r| match &r.data {
                RData::TXT(t) => Some(&*t.txt_data),
                _ => None,
            })
            .collect();
        (answer.ids, answer.ignored) = parse_records(&records);
        Ok(Some(answer))
    }
}

/// `_agent.<domain>.` for an email address (§4.4), as a fully qualified
/// name so no search domain is appended; `None` for a phone or a domain
/// that is not a DNS name of two labels or more.
pub fn txt_name(address: &Address) -> Option<Name> {
    if address.kind != AddressKind::Email {
        return None;
    }
    let (_, domain) = address.canon().rsplit_once('@')?;
    if !domain.contains('.') || domain.starts_with('.') || domain.ends_with('.') {
        return None;
    }
    let mut name = Name::from_utf8(format!("_agent.{domain}.")).ok()?;
    name.set_fqdn(true);
    Some(name)
}

/// The agent IDs of a TXT answer, each record given as its
/// character-strings, and how many records were ignored. Bounded: a
/// record over [`TXT_MAX_BYTES`] is ignored unread; an answer of more than
/// [`TXT_MAX_RECORDS`] records is ignored whole; at most
/// [`MAX_CANDIDATES`] IDs are taken.
pub fn parse_records(records: &[&[Box<[u8]>]]) -> (Vec<AgentId>, usize) {
    if records.len() > TXT_MAX_RECORDS {
        return (Vec::new(), records.len());
    }
    let mut ids: Vec<AgentId> = Vec::new();
    let mut ignored = 0;
    for r in records {
        match parse_record(r) {
            Some(id) if ids.contains(&id) => {}
            Some(id) if ids.len() < MAX_CANDIDATES => ids.push(id),
            _ => ignored += 1,
        }
    }
    (ids, ignored)
}

/// One record: its strings concatenated (RFC 7208 §3.3 style) must be
/// exactly `rdv=` and a canonical agent ID.
pub fn parse_record(strings: &[Box<[u8]>]) -> Option<AgentId> {
    let size: usize = strings.iter().map(|s| 1 + s.len()).sum();
    if size > TXT_MAX_BYTES {
        return None;
    }
    let bytes: Vec<u8> = strings.iter().flat_map(|s| s.iter().copied()).collect();
    let text = std::str::from_utf8(&bytes).ok()?;
    let id = text.strip_prefix(TXT_PREFIX)?;
    AgentId::parse(id).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn id(seed: u8) -> AgentId {
        rdv_proto::AgentKey::from_seed([seed; 32]).id().clone()
    }

    fn rec(parts: &[&str]) -> Vec<Box<[u8]>> {
        parts
            .iter()
            .map(|p| p.as_bytes().to_vec().into_boxed_slice())
            .collect()
    }

    #[test]
    fn strict_records() {
        let a = id(1);
        let good = format!("rdv={a}");
        assert_eq!(parse_record(&rec(&[&good])), Some(a.clone()));
        // Split over two strings: concatenated.
        assert_eq!(parse_record(&rec(&["rdv=", a.as_str()])), Some(a.clone()));
        let upper = format!("rdv={}", a.as_str().to_uppercase());
        let bad = [
            format!("RDV={a}"),
            format!("rdv= {a}"),
            format!(" rdv={a}"),
            format!("rdv={a} "),
            format!("rdv={a}x"),
            format!("rdv={a};v=2"),
            upper,
            format!("rdv:{a}"),
            a.to_string(),
            "v=spf1 -all".into(),
            "rdv=".into(),
            String::new(),
        ];
        for b in &bad {
            assert_eq!(parse_record(&rec(&[b])), None, "{b:?}");
        }
        assert_eq!(parse_record(&[vec![0xff, 0xfe].into_boxed_slice()]), None);
    }

    #[test]
    fn bounds() {
        let a = id(1);
        let good = format!("rdv={a}");
        // Empty strings concatenate to nothing: the text is valid, the
        // record over the bound.
        let mut padded = rec(&[&good]);
        padded.extend((0..TXT_MAX_BYTES).map(|_| Vec::new().into_boxed_slice()));
        assert_eq!(parse_record(&padded), None);
        let mut fits = rec(&[&good]);
        fits.extend((0..TXT_MAX_BYTES - good.len() - 1).map(|_| Vec::new().into_boxed_slice()));
        assert_eq!(parse_record(&fits), Some(a.clone()));

        let one = rec(&[&good]);
        let many: Vec<&[Box<[u8]>]> = (0..=TXT_MAX_RECORDS).map(|_| one.as_slice()).collect();
        assert_eq!(parse_records(&many), (Vec::new(), TXT_MAX_RECORDS + 1));
        let (ids, ignored) = parse_records(&many[..TXT_MAX_RECORDS]);
        assert_eq!((ids, ignored), (vec![a], 0));

        let recs: Vec<Vec<Box<[u8]>>> = (1..=12)
            .map(|s| rec(&[&format!("rdv={}", id(s))]))
            .collect();
        let refs: Vec<&[Box<[u8]>]> = recs.iter().map(Vec::as_slice).collect();
        let (ids, ignored) = parse_records(&refs);
        assert_eq!(ids.len(), MAX_CANDIDATES);
        assert_eq!(ignored, 12 - MAX_CANDIDATES);
    }

    #[test]
    fn names() {
        let n = |s: &str| txt_name(&Address::parse(s).unwrap()).map(|n| n.to_ascii());
        assert_eq!(
            n("Alice@Example.COM").as_deref(),
            Some("_agent.example.com.")
        );
        assert_eq!(
            n("a@bücher.example").as_deref(),
            Some("_agent.xn--bcher-kva.example.")
        );
        assert_eq!(n("+15551234567"), None);
        assert_eq!(n("a@localhost"), None);
        assert_eq!(n("a@[192.0.2.1]"), None);
        assert_eq!(n("a@exa_mple.com"), None);
        assert_eq!(n("a@example.com."), None);
    }

    #[test]
    fn settings() {
        assert_eq!(Dns::parse("off").unwrap(), Dns::Off);
        assert_eq!(
            Dns::parse("127.0.0.1:5353").unwrap(),
            Dns::Server("127.0.0.1:5353".parse().unwrap())
        );
        assert_eq!(
            Dns::parse("::1").unwrap(),
            Dns::Server("[::1]:53".parse().unwrap())
        );
        assert!(Dns::parse("dns.example:53").is_err());
    }
}
