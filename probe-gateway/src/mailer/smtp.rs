//! The SMTP transport (`mode = "smtp"`): hands each message, bytes as
//! composed (and signed), to one relay with lettre over rustls. The relay
//! does MX delivery, retries and bounces; the gateway keeps no mail queue.

use std::time::Duration;

use lettre::address::Envelope;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::{OutboundConfig, OutboundMail, OutboundMessage, RelayTls, SendError, SendFuture};
use crate::error::Error;

/// Sends through the configured relay. `Debug` shows the relay, never the
/// credentials.
pub struct SmtpMailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    relay: String,
    port: u16,
    tls: RelayTls,
}

impl std::fmt::Debug for SmtpMailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpMailer")
            .field("relay", &self.relay)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl SmtpMailer {
    /// Builds the transport from `[outbound]` (checked here too); reads the
    /// CA and password files. Connects lazily, on the first send.
    pub fn new(cfg: &OutboundConfig, hello_default: &str) -> Result<Self, Error> {
        cfg.check()?;
        let relay = cfg
            .relay_host
            .clone()
            .ok_or_else(|| Error::Config("outbound.relay_host is required for smtp".into()))?;
        let port = cfg.port();
        let tls_params = || -> Result<TlsParameters, Error> {
            let mut b = TlsParameters::builder(relay.clone());
            if let Some(ca) = &cfg.ca_file {
                let pem = std::fs::read(ca).map_err(|e| {
                    Error::Config(format!("outbound.ca_file {}: {}", ca.display(), e.kind()))
                })?;
                let not_pem = || {
                    Error::Config(format!(
                        "outbound.ca_file {}: not PEM certificates",
                        ca.display()
                    ))
                };
                // lettre takes a file without certificates as an empty
                // bundle: count them first.
                let certs = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| not_pem())?;
                if certs.is_empty() {
                    return Err(not_pem());
                }
                let cert = Certificate::from_pem(&pem).map_err(|_| not_pem())?;
                // A private relay: trust its CA only.
                b = b
                    .certificate_store(CertificateStore::None)
                    .add_root_certificate(cert);
            }
            b.build_rustls()
                .map_err(|e| Error::Config(format!("outbound TLS settings: {e}")))
        };
        let tls = match cfg.tls {
            RelayTls::Starttls => Tls::Required(tls_params()?),
            RelayTls::Tls => Tls::Wrapper(tls_params()?),
            RelayTls::None => Tls::None,
        };
        let hello = cfg.hello_name.as_deref().unwrap_or(hello_default);
        let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(relay.clone())
            .port(port)
            .tls(tls)
            .timeout(Some(Duration::from_secs(cfg.timeout_secs)))
            .hello_name(client_id(hello));
        if let (Some(user), Some(file)) = (&cfg.username, &cfg.password_file) {
            let password = read_password(file)?;
            b = b.credentials(Credentials::new(user.clone(), password));
        }
        Ok(Self {
            transport: b.build(),
            relay,
            port,
            tls: cfg.tls,
        })
    }
}

/// The EHLO argument: an address literal for an IP, else the name.
fn client_id(hello: &str) -> ClientId {
    match hello.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => ClientId::Ipv4(a),
        Ok(std::net::IpAddr::V6(a)) => ClientId::Ipv6(a),
        Err(_) => ClientId::Domain(hello.to_string()),
    }
}

/// The first line of the file (a trailing newline is not part of it).
fn read_password(path: &std::path::Path) -> Result<String, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Config(format!(
            "outbound.password_file {}: {}",
            path.display(),
            e.kind()
        ))
    })?;
    let pw = text.lines().next().unwrap_or_default();
    if pw.is_empty() {
        return Err(Error::Config(format!(
            "outbound.password_file {} is empty",
            path.display()
        )));
    }
    Ok(pw.to_string())
}

/// The envelope: MAIL FROM (empty for the null reverse-path) and the one
/// recipient.
fn envelope(msg: &OutboundMessage) -> Result<Envelope, SendError> {
    let from = if msg.envelope_from.is_empty() {
        None
    } else {
        Some(
            msg.envelope_from
                .parse::<Address>()
                .map_err(|_| SendError::Permanent("bad envelope sender".into()))?,
        )
    };
    let to = msg
        .to
        .parse::<Address>()
        .map_err(|_| SendError::Permanent("bad recipient address".into()))?;
    Envelope::new(from, vec![to]).map_err(|_| SendError::Permanent("bad envelope".into()))
}

/// SMTP ends DATA with CRLF . CRLF, where the first CRLF ends the last line
/// (RFC 5321 §4.1.1.4), and lettre always writes all three: so a message
/// ending in CRLF goes without it and arrives byte for byte.
fn wire_body(raw: &[u8]) -> &[u8] {
    raw.strip_suffix(b"\r\n").unwrap_or(raw)
}

/// 4xx, connection, TLS and timeouts are worth retrying; 5xx and refusals
/// of the message itself are not. The text names the relay's code or the
/// failure kind, never the message.
pub fn classify(e: &lettre::transport::smtp::Error) -> SendError {
    if let Some(code) = e.status() {
        let text = format!("relay answered {code}");
        return if e.is_permanent() {
            SendError::Permanent(text)
        } else {
            SendError::Temporary(text)
        };
    }
    if e.is_timeout() {
        return SendError::Temporary("relay timed out".into());
    }
    if e.is_client() {
        // lettre refused to send as is (no 8BITMIME/SMTPUTF8 at the relay).
        return SendError::Permanent("the relay cannot take this message".into());
    }
    if e.is_tls() {
        return SendError::Temporary(format!("TLS with the relay failed: {e}"));
    }
    SendError::Temporary(format!("relay unreachable: {e}"))
}

impl OutboundMail for SmtpMailer {
    fn send<'a>(&'a self, msg: &'a OutboundMessage) -> SendFuture<'a> {
        Box::pin(async move {
            let env = envelope(msg)?;
            match self.transport.send_raw(&env, wire_body(&msg.raw)).await {
                Ok(_) => {
                    tracing::debug!("handed to the relay");
                    Ok(())
                }
                Err(e) => {
                    let err = classify(&e);
                    tracing::warn!(error = %err, "relay did not take the message");
                    Err(err)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn wire_body_drops_one_final_crlf() {
        assert_eq!(wire_body(b"a\r\nb\r\n"), b"a\r\nb");
        assert_eq!(wire_body(b"a\r\nb"), b"a\r\nb");
        assert_eq!(wire_body(b"a\r\n\r\n"), b"a\r\n");
    }

    #[test]
    fn hello_names() {
        assert_eq!(client_id("gw.test").to_string(), "gw.test");
        assert_eq!(client_id("192.0.2.1").to_string(), "[192.0.2.1]");
        assert_eq!(client_id("::1").to_string(), "[IPv6:::1]");
    }

    #[test]
    fn envelope_checked() {
        let m = |from: &str, to: &str| OutboundMessage {
            envelope_from: from.into(),
            to: to.into(),
            raw: Vec::new(),
        };
        assert!(envelope(&m("gw@a.test", "x@b.test")).is_ok());
        let null = envelope(&m("", "x@b.test")).unwrap();
        assert!(null.from().is_none());
        assert!(matches!(
            envelope(&m("gw@a.test", "not an address")),
            Err(SendError::Permanent(_))
        ));
        assert!(matches!(
            envelope(&m("bad", "x@b.test")),
            Err(SendError::Permanent(_))
        ));
    }

    #[test]
    fn password_file_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "s3cret\n").unwrap();
        assert_eq!(read_password(&p).unwrap(), "s3cret");
        std::fs::write(&p, "\n").unwrap();
        let e = read_password(&p).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = read_password(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing") && e.contains("not found"), "{e}");
    }

    #[test]
    fn debug_hides_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "hunter2-secret\n").unwrap();
        let cfg = OutboundConfig {
            mode: super::super::OutboundMode::Smtp,
            relay_host: Some("127.0.0.1".into()),
            tls: RelayTls::None,
            username: Some("gw".into()),
            password_file: Some(p),
            ..OutboundConfig::default()
        };
        let m = SmtpMailer::new(&cfg, "gw.test").unwrap();
        let dbg = format!("{m:?}");
        assert!(
            dbg.contains("127.0.0.1") && !dbg.contains("hunter2"),
            "{dbg}"
        );
    }
}
