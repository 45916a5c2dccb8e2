//! DKIM signing of outbound mail (RFC 6376, Ed25519 per RFC 8463) with
//! mail-auth, so the gateway's mail aligns with DMARC for its From domain
//! and receivers' gates (§5.2.1 step 2) can pass it. Signing is a pure
//! function of the message, the key and the time (`t=`), which is injected.

use std::path::PathBuf;
use std::sync::Arc;

use mail_auth::AuthenticatedMessage;
use mail_auth::common::crypto::{DkimKey as AuthKey, Ed25519Key, RsaKey, Sha256, SigningKey};
use mail_auth::common::headers::{HeaderStream, HeaderWriter, Writable, Writer};
use mail_auth::dkim::{Canonicalization, Signature};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

use super::{OutboundMail, OutboundMessage, SendError, SendFuture};
use crate::clock::Clock;
use crate::error::Error;

/// Headers always signed (absent ones too: a relay cannot add them later).
pub const SIGNED_HEADERS: [&str; 9] = [
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "MIME-Version",
    "Content-Type",
    "Content-Transfer-Encoding",
    "Auto-Submitted",
];

/// One `[[outbound.dkim]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DkimKeyConfig {
    /// The `d=` domain: mail whose From domain is this one is signed.
    pub domain: String,
    /// The `s=` selector: the key is published at `<selector>._domainkey.<domain>`.
    pub selector: String,
    /// PEM private key: RSA (PKCS#1 or PKCS#8) or Ed25519 (PKCS#8).
    pub key_file: PathBuf,
    #[serde(default)]
    pub algorithm: DkimAlgorithm,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub enum DkimAlgorithm {
    #[default]
    #[serde(rename = "rsa-sha256")]
    RsaSha256,
    #[serde(rename = "ed25519-sha256")]
    Ed25519Sha256,
}

/// A DNS label sequence (letters, digits, hyphens, dots; no empty label).
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Checks the `[[outbound.dkim]]` entries without reading key files.
pub fn check_configs(keys: &[DkimKeyConfig]) -> Result<(), Error> {
    let mut seen = std::collections::HashSet::new();
    for k in keys {
        if !is_dns_name(&k.domain) {
            return Err(Error::Config(format!(
                "outbound.dkim domain {:?} is not a domain name",
                k.domain
            )));
        }
        if !is_dns_name(&k.selector) {
            return Err(Error::Config(format!(
                "outbound.dkim selector {:?} (domain {}) is not a DNS label",
                k.selector, k.domain
            )));
        }
        if !seen.insert((
            k.domain.to_ascii_lowercase(),
            k.selector.to_ascii_lowercase(),
        )) {
            return Err(Error::Config(format!(
                "outbound.dkim lists selector {} of {} twice",
                k.selector, k.domain
            )));
        }
    }
    Ok(())
}

/// A loaded signing key. `Debug` names the domain, selector and algorithm,
/// never the key.
pub struct DkimKey {
    domain: String,
    selector: String,
    algorithm: DkimAlgorithm,
    key: AuthKey,
}

impl std::fmt::Debug for DkimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DkimKey")
            .field("domain", &self.domain)
            .field("selector", &self.selector)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// Why a key did not load. Never quotes the key material.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("not a PEM private key")]
    NotPem,
    #[error("not an RSA private key (PKCS#1 or PKCS#8 PEM, 2048 to 8192 bits)")]
    NotRsa,
    #[error("not an Ed25519 private key (PKCS#8 PEM)")]
    NotEd25519,
}

impl DkimKey {
    /// Parses a PEM private key for `algorithm`.
    pub fn from_pem(
        domain: &str,
        selector: &str,
        algorithm: DkimAlgorithm,
        pem: &[u8],
    ) -> Result<Self, KeyError> {
        let der = PrivateKeyDer::from_pem_slice(pem).map_err(|_| KeyError::NotPem)?;
        let key = match algorithm {
            DkimAlgorithm::RsaSha256 => {
                AuthKey::Rsa(RsaKey::<Sha256>::from_key_der(der).map_err(|_| KeyError::NotRsa)?)
            }
            DkimAlgorithm::Ed25519Sha256 => match der {
                // OpenSSL writes PKCS#8 v1 (no public key): accept it.
                PrivateKeyDer::Pkcs8(d) => AuthKey::Ed25519(
                    Ed25519Key::from_pkcs8_maybe_unchecked_der(d.secret_pkcs8_der())
                        .map_err(|_| KeyError::NotEd25519)?,
                ),
                _ => return Err(KeyError::NotEd25519),
            },
        };
        Ok(Self {
            domain: domain.to_ascii_lowercase(),
            selector: selector.to_string(),
            algorithm,
            key,
        })
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    pub fn selector(&self) -> &str {
        &self.selector
    }

    pub fn algorithm(&self) -> DkimAlgorithm {
        self.algorithm
    }
}

/// Why a message was not signed although a key was there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("the message has no header section")]
    Malformed,
    #[error("signing failed")]
    Crypto,
}

/// The signature header (`DKIM-Signature: …\r\n`, folded) of `raw` by `key`
/// at `now` (Unix seconds, the `t=` tag): relaxed/relaxed, no `l=`, no
/// `x=`. Signs [`SIGNED_HEADERS`] and every `X-Rdv-*` and
/// `List-Unsubscribe*` field present. This is `DkimSigner::sign` of
/// mail-auth with the time injected (its own reads the wall clock).
pub fn signature_header(key: &DkimKey, raw: &[u8], now: u64) -> Result<String, SignError> {
    let msg = AuthenticatedMessage::parse(raw).ok_or(SignError::Malformed)?;
    let mut names: Vec<String> = SIGNED_HEADERS.iter().map(|s| s.to_string()).collect();
    for (name, _) in &msg.headers {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let name = name.trim();
        let lower = name.to_ascii_lowercase();
        if (lower.starts_with("x-rdv-") || lower.starts_with("list-unsubscribe"))
            && !names.iter().any(|n| n.eq_ignore_ascii_case(name))
        {
            names.push(name.to_string());
        }
    }
    let template = Signature {
        v: 1,
        a: key.key.algorithm(),
        d: key.domain.clone(),
        s: key.selector.clone(),
        h: names,
        ch: Canonicalization::Relaxed,
        cb: Canonicalization::Relaxed,
        ..Default::default()
    };
    let body = raw
        .get(msg.body_offset as usize..)
        .ok_or(SignError::Malformed)?;
    let fields = Fields {
        headers: msg.headers.iter(),
        body,
    };
    let (_, canonical_headers, signed, canonical_body) = template.canonicalize(fields);
    let mut sig = template;
    sig.bh = key.key.hash(canonical_body).as_ref().to_vec();
    sig.t = now;
    sig.h = signed;
    sig.b = key
        .key
        .sign(Signable {
            headers: canonical_headers,
            sig: &sig,
        })
        .map_err(|_| SignError::Crypto)?;
    Ok(sig.to_header())
}

/// The header fields mail-auth's verifier sees, fed to its canonicalizer.
struct Fields<'a, 'x> {
    headers: std::slice::Iter<'a, (&'x [u8], &'x [u8])>,
    body: &'x [u8],
}

impl<'x> HeaderStream<'x> for Fields<'_, 'x> {
    fn next_header(&mut self) -> Option<(&'x [u8], &'x [u8])> {
        self.headers.next().copied()
    }

    fn body(&mut self) -> &'x [u8] {
        self.body
    }
}

/// The signed data of RFC 6376 §3.7: the canonical headers, then the
/// signature header with an empty `b=`.
struct Signable<'a, H> {
    headers: H,
    sig: &'a Signature,
}

impl<H: Writable> Writable for Signable<'_, H> {
    fn write(self, writer: &mut impl Writer) {
        self.headers.write(writer);
        self.sig.write(writer, false);
    }
}

/// The domain of the one From mailbox, lowercase (mail-parser; `None`
/// when From is missing, a group, or more than one mailbox).
pub fn from_domain(raw: &[u8]) -> Option<String> {
    let msg = mail_parser::MessageParser::new().parse_headers(raw)?;
    let from = msg.from()?;
    let list = from.as_list()?;
    let [one] = list else {
        return None;
    };
    let addr = one.address()?;
    let (_, domain) = addr.rsplit_once('@')?;
    (!domain.is_empty()).then(|| domain.to_ascii_lowercase())
}

/// The configured keys, by From domain.
#[derive(Debug, Default)]
pub struct DkimKeys(Vec<DkimKey>);

impl DkimKeys {
    pub fn new(keys: Vec<DkimKey>) -> Self {
        Self(keys)
    }

    /// Reads and checks every key file; an error names the file, never its
    /// content.
    pub fn load(cfgs: &[DkimKeyConfig]) -> Result<Self, Error> {
        check_configs(cfgs)?;
        let mut keys = Vec::with_capacity(cfgs.len());
        for c in cfgs {
            let pem = std::fs::read(&c.key_file).map_err(|e| {
                Error::Config(format!(
                    "outbound.dkim key_file {}: {}",
                    c.key_file.display(),
                    e.kind()
                ))
            })?;
            let key =
                DkimKey::from_pem(&c.domain, &c.selector, c.algorithm, &pem).map_err(|e| {
                    Error::Config(format!(
                        "outbound.dkim key_file {}: {e}",
                        c.key_file.display()
                    ))
                })?;
            keys.push(key);
        }
        Ok(Self(keys))
    }

    /// The keys for a From domain (case-insensitive).
    pub fn for_domain<'a>(&'a self, domain: &'a str) -> impl Iterator<Item = &'a DkimKey> + 'a {
        self.0
            .iter()
            .filter(move |k| k.domain.eq_ignore_ascii_case(domain))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `raw` with one DKIM-Signature per key of its From domain prepended
    /// (RFC 8463 §3 suggests RSA and Ed25519 side by side); `raw` unchanged
    /// when no key matches.
    pub fn sign(&self, raw: &[u8], now: u64) -> Result<Vec<u8>, SignError> {
        let Some(domain) = from_domain(raw) else {
            tracing::debug!("no single From domain; sending unsigned");
            return Ok(raw.to_vec());
        };
        let mut headers = String::new();
        for key in self.for_domain(&domain) {
            headers.push_str(&signature_header(key, raw, now)?);
        }
        if headers.is_empty() {
            tracing::debug!(domain = %domain, "no DKIM key for the From domain; sending unsigned");
            return Ok(raw.to_vec());
        }
        let mut out = headers.into_bytes();
        out.extend_from_slice(raw);
        Ok(out)
    }
}

/// Signs every message with the keys of its From domain, then hands it to
/// the transport. A message whose domain has a key is never sent unsigned:
/// a signing failure is a temporary send error.
pub struct SignedMailer {
    keys: DkimKeys,
    clock: Arc<dyn Clock>,
    inner: Arc<dyn OutboundMail>,
}

impl std::fmt::Debug for SignedMailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedMailer")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl SignedMailer {
    pub fn new(keys: DkimKeys, clock: Arc<dyn Clock>, inner: Arc<dyn OutboundMail>) -> Self {
        Self { keys, clock, inner }
    }
}

impl OutboundMail for SignedMailer {
    fn send<'a>(&'a self, msg: &'a OutboundMessage) -> SendFuture<'a> {
        Box::pin(async move {
            if self.keys.is_empty() {
                return self.inner.send(msg).await;
            }
            let now = u64::try_from(self.clock.now().unix_timestamp()).unwrap_or(0);
            let raw = self.keys.sign(&msg.raw, now).map_err(|e| {
                tracing::warn!(error = %e, "DKIM signing failed");
                SendError::Temporary(format!("dkim: {e}"))
            })?;
            let signed = OutboundMessage {
                envelope_from: msg.envelope_from.clone(),
                to: msg.to.clone(),
                raw,
            };
            self.inner.send(&signed).await
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use mail_auth::dkim::DkimSigner;

    const RSA: &[u8] = include_bytes!("../../tests/outbound-keys/rsa2048.pem");
    const RSA8: &[u8] = include_bytes!("../../tests/outbound-keys/rsa2048-pkcs8.pem");
    const ED: &[u8] = include_bytes!("../../tests/outbound-keys/ed25519.pem");

    fn msg(from: &str) -> Vec<u8> {
        super::super::plain_message(
            from,
            "john@doe.test",
            "Hello",
            "Line one.\r\n\r\n\r\n",
            "Thu, 08 Oct 2026 12:00:00 +0000",
            "<1@gw.test>",
        )
        .raw
    }

    fn tag<'a>(header: &'a str, t: &str) -> &'a str {
        let flat: &str = header;
        let start = flat
            .split(';')
            .find(|p| p.trim().starts_with(&format!("{t}=")))
            .unwrap();
        start.trim().strip_prefix(&format!("{t}=")).unwrap()
    }

    #[test]
    fn same_as_mail_auth_signer_at_the_same_time() {
        for (alg, pem) in [
            (DkimAlgorithm::RsaSha256, RSA),
            (DkimAlgorithm::Ed25519Sha256, ED),
        ] {
            let raw = msg("gw@mail.test");
            let ours = DkimKey::from_pem("mail.test", "s1", alg, pem).unwrap();
            let theirs = DkimKey::from_pem("mail.test", "s1", alg, pem).unwrap();
            let reference = DkimSigner::from_key(theirs.key)
                .domain("mail.test")
                .selector("s1")
                .headers(SIGNED_HEADERS)
                .sign(&raw)
                .unwrap();
            let mine = signature_header(&ours, &raw, reference.t).unwrap();
            // RSA PKCS#1 v1.5 and Ed25519 are deterministic: byte-equal.
            assert_eq!(mine, reference.to_header(), "{alg:?}");
        }
    }

    #[test]
    fn time_is_injected_and_headers_chosen() {
        let key = DkimKey::from_pem("mail.test", "s1", DkimAlgorithm::Ed25519Sha256, ED).unwrap();
        let mut raw =
            b"X-Rdv-Probe: v=1; id=x\r\nList-Unsubscribe: <mailto:u@mail.test>\r\nX-Other: 1\r\n"
                .to_vec();
        raw.extend(msg("gw@mail.test"));
        let h = signature_header(&key, &raw, 1_791_460_800).unwrap();
        let unfolded: String = h.replace("\r\n\t", "").replace(['\r', '\n'], "");
        assert_eq!(tag(&unfolded, "t"), "1791460800");
        assert_eq!(tag(&unfolded, "c"), "relaxed/relaxed");
        assert_eq!(tag(&unfolded, "d"), "mail.test");
        assert_eq!(tag(&unfolded, "s"), "s1");
        assert_eq!(tag(&unfolded, "a"), "ed25519-sha256");
        let h_tag = tag(&unfolded, "h").to_ascii_lowercase();
        let signed: Vec<&str> = h_tag.split(':').map(str::trim).collect();
        for want in [
            "from",
            "to",
            "subject",
            "date",
            "message-id",
            "mime-version",
            "content-type",
            "content-transfer-encoding",
            "auto-submitted",
            "x-rdv-probe",
            "list-unsubscribe",
        ] {
            assert!(signed.contains(&want), "{want} signed: {h_tag}");
        }
        assert!(!signed.contains(&"x-other"), "{h_tag}");
        assert!(!unfolded.contains("x="), "no expiry");
        assert!(!unfolded.contains("; l="), "no body length");
    }

    #[test]
    fn keys_by_from_domain_case_insensitive() {
        let keys = DkimKeys::new(vec![
            DkimKey::from_pem("Mail.Test", "rsa", DkimAlgorithm::RsaSha256, RSA8).unwrap(),
            DkimKey::from_pem("mail.test", "ed", DkimAlgorithm::Ed25519Sha256, ED).unwrap(),
            DkimKey::from_pem("other.test", "o", DkimAlgorithm::Ed25519Sha256, ED).unwrap(),
        ]);
        let raw = msg("Gateway <GW@MAIL.TEST>");
        let out = keys.sign(&raw, 1).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert_eq!(
            text.matches("DKIM-Signature:").count(),
            2,
            "RSA and Ed25519"
        );
        assert!(text.contains("s=rsa") && text.contains("s=ed"));
        assert!(!text.contains("s=o;"));
        assert!(out.ends_with(&raw), "the message follows unchanged");
        // No key for the domain: unchanged.
        let raw = msg("gw@unsigned.test");
        assert_eq!(keys.sign(&raw, 1).unwrap(), raw);
        // Two From mailboxes: no single domain, unchanged.
        let raw = msg("a@mail.test, b@mail.test");
        assert_eq!(keys.sign(&raw, 1).unwrap(), raw);
    }

    #[test]
    fn from_domain_parses() {
        assert_eq!(
            from_domain(&msg("x@Mail.Test")).as_deref(),
            Some("mail.test")
        );
        assert_eq!(
            from_domain(&msg("\"A, B\" <x@b.test>")).as_deref(),
            Some("b.test")
        );
        // A display name in folded RFC 2047 words (flows' `from_name`).
        assert_eq!(
            from_domain(&msg("=?utf-8?B?RMOhbmEncyBhZ2VudA==?=\r\n <rdv+x@GW.test>")).as_deref(),
            Some("gw.test")
        );
        assert_eq!(from_domain(b"To: a@b.test\r\n\r\nhi"), None);
        assert_eq!(from_domain(&msg("undisclosed:;")), None);
    }

    #[test]
    fn key_formats() {
        let rsa = DkimAlgorithm::RsaSha256;
        let ed = DkimAlgorithm::Ed25519Sha256;
        assert!(DkimKey::from_pem("a.test", "s", rsa, RSA).is_ok(), "PKCS#1");
        assert!(
            DkimKey::from_pem("a.test", "s", rsa, RSA8).is_ok(),
            "PKCS#8"
        );
        assert!(DkimKey::from_pem("a.test", "s", ed, ED).is_ok());
        assert_eq!(
            DkimKey::from_pem("a.test", "s", rsa, ED).unwrap_err(),
            KeyError::NotRsa
        );
        assert_eq!(
            DkimKey::from_pem("a.test", "s", ed, RSA).unwrap_err(),
            KeyError::NotEd25519
        );
        assert_eq!(
            DkimKey::from_pem("a.test", "s", ed, RSA8).unwrap_err(),
            KeyError::NotEd25519
        );
        assert_eq!(
            DkimKey::from_pem("a.test", "s", rsa, b"not a key").unwrap_err(),
            KeyError::NotPem
        );
        let k = DkimKey::from_pem("a.test", "s", ed, ED).unwrap();
        let dbg = format!("{k:?}");
        assert!(dbg.contains("a.test") && !dbg.contains("key:"), "{dbg}");
    }

    #[test]
    fn configs_checked() {
        let k = |d: &str, s: &str| DkimKeyConfig {
            domain: d.into(),
            selector: s.into(),
            key_file: "/k".into(),
            algorithm: DkimAlgorithm::RsaSha256,
        };
        assert!(check_configs(&[k("a.test", "s1"), k("a.test", "s2")]).is_ok());
        assert!(check_configs(&[k("a.test", "s1"), k("A.test", "S1")]).is_err());
        assert!(check_configs(&[k("", "s1")]).is_err());
        assert!(check_configs(&[k("a test", "s1")]).is_err());
        assert!(check_configs(&[k("a.test", "s;1")]).is_err());
        assert!(check_configs(&[k("a..test", "s1")]).is_err());
    }
}
