//! Outbound mail as an injected trait: the mailbox-proof code mail (§5.2.1:
//! the gateway proves the mailbox before delivering to an agent) and the
//! probe, SYN-ACK, ACK and invite mails it sends on behalf of agents
//! (§5.2.1–§5.2.2, `flows`).
//! The code mail carries no RDV marker, so it never enters the mail rule's
//! marker path.
//!
//! Transports: [`SpoolMailer`] (files), [`smtp::SmtpMailer`] (a relay over
//! lettre) and [`RecordingMailer`] (tests); [`dkim::SignedMailer`] signs for
//! the From domain in front of either, so receivers can align DMARC.
//! [`build`] assembles the configured stack for `serve`.

pub mod dkim;
pub mod smtp;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// One composed RFC 5322 message and its SMTP envelope. Never logged: it
/// carries codes, cookies and signed documents (`Debug` shows the
/// recipient only).
#[derive(Clone, PartialEq, Eq)]
pub struct OutboundMessage {
    /// SMTP envelope sender (MAIL FROM): the gateway's bounce address.
    pub envelope_from: String,
    /// The one recipient, bare `local@domain` (§5.2.1: one recipient).
    pub to: String,
    /// The whole message, headers and body, CRLF line ends, not yet
    /// DKIM-signed (the transport signs when it holds a key for the
    /// From domain).
    pub raw: Vec<u8>,
}

impl std::fmt::Debug for OutboundMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundMessage")
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

/// Why a message was not sent. The text never quotes the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Worth retrying later (relay unreachable, 4xx).
    #[error("temporary: {0}")]
    Temporary(String),
    /// Will not succeed as is (5xx, a bad address).
    #[error("permanent: {0}")]
    Permanent(String),
}

pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), SendError>> + Send + 'a>>;

pub trait OutboundMail: Send + Sync + 'static {
    /// Hands the message to the transport; an error is reported to the
    /// caller as "could not send", never with the message.
    fn send<'a>(&'a self, msg: &'a OutboundMessage) -> SendFuture<'a>;
}

/// Outbound mail settings (`[outbound]`): where mail goes and as whom.
/// Secrets stay in files (`password_file`, DKIM `key_file`), read at start.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    /// `spool` (files under the outbox) or `smtp` (a relay).
    pub mode: OutboundMode,
    /// The gateway's own sender address (From of the code mail, MAIL FROM
    /// of everything it sends).
    pub from_address: String,
    /// smtp: the relay's host name or IP address.
    pub relay_host: Option<String>,
    /// smtp: default 587, or 465 with `tls = "tls"`.
    pub relay_port: Option<u16>,
    pub tls: RelayTls,
    /// Allows `tls = "none"` to a relay that is not on loopback.
    pub allow_plaintext: bool,
    /// A PEM CA bundle trusted instead of the Mozilla roots (private relay).
    pub ca_file: Option<PathBuf>,
    /// SMTP AUTH user; the password comes from `password_file`.
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    /// Connect and per-command timeout.
    pub timeout_secs: u64,
    /// The EHLO name; default `smtp_hostname`.
    pub hello_name: Option<String>,
    /// DKIM keys; mail is signed with every key of its From domain.
    pub dkim: Vec<dkim::DkimKeyConfig>,
}

/// Where outbound mail goes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OutboundMode {
    /// One file per message under `outbox_dir` (an operator or an MTA's
    /// pickup directory sends it).
    #[default]
    Spool,
    /// Through `relay_host` with lettre.
    Smtp,
}

/// How the SMTP connection to the relay is protected.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RelayTls {
    /// Plaintext, then STARTTLS, required (RFC 3207); port 587.
    #[default]
    Starttls,
    /// TLS from the first byte (RFC 8314 submissions); port 465.
    Tls,
    /// No TLS: loopback relays only, unless `allow_plaintext`.
    None,
}

impl OutboundConfig {
    pub fn check(&self) -> Result<(), crate::error::Error> {
        let bad = |s: String| Err(crate::error::Error::Config(s));
        if self.from_address.parse::<lettre::Address>().is_err() {
            return bad("outbound.from_address must be an email address".into());
        }
        if self.mode == OutboundMode::Spool {
            let smtp_only = [
                ("relay_host", self.relay_host.is_some()),
                ("relay_port", self.relay_port.is_some()),
                ("ca_file", self.ca_file.is_some()),
                ("username", self.username.is_some()),
                ("password_file", self.password_file.is_some()),
                ("hello_name", self.hello_name.is_some()),
            ];
            if let Some((k, _)) = smtp_only.iter().find(|(_, set)| *set) {
                return bad(format!("outbound.{k} needs mode = \"smtp\""));
            }
        } else {
            let host = self.relay_host.as_deref().unwrap_or_default();
            if !is_host(host) {
                return bad("outbound.relay_host must be a host name or an IP address".into());
            }
            if self.relay_port == Some(0) {
                return bad("outbound.relay_port must be 1 to 65535".into());
            }
            if self.tls == RelayTls::None && !self.allow_plaintext && !is_loopback(host) {
                return bad(format!(
                    "outbound.tls = \"none\" sends mail and passwords in the clear: only to a \
                     loopback relay, or set outbound.allow_plaintext = true (relay {host})"
                ));
            }
            if self.username.is_some() != self.password_file.is_some() {
                return bad("outbound.username and outbound.password_file go together".into());
            }
            if self.username.as_deref().is_some_and(str::is_empty) {
                return bad("outbound.username must not be empty".into());
            }
            if let Some(h) = &self.hello_name
                && !is_host(h)
            {
                return bad("outbound.hello_name must be a host name".into());
            }
        }
        if !(1..=600).contains(&self.timeout_secs) {
            return bad("outbound.timeout_secs must be 1 to 600".into());
        }
        dkim::check_configs(&self.dkim)
    }

    /// The relay port: the configured one, or the default of the TLS mode.
    pub fn port(&self) -> u16 {
        self.relay_port.unwrap_or(match self.tls {
            RelayTls::Tls => 465,
            RelayTls::Starttls | RelayTls::None => 587,
        })
    }
}

/// A DNS host name (letters, digits, hyphens, dots) or an IP address.
fn is_host(h: &str) -> bool {
    h.parse::<std::net::IpAddr>().is_ok()
        || (!h.is_empty()
            && h.len() <= 253
            && h.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            }))
}

fn is_loopback(h: &str) -> bool {
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Default for OutboundConfig {
    fn default() -> Self {
        Self {
            mode: OutboundMode::Spool,
            from_address: "rdv-gateway@localhost".into(),
            relay_host: None,
            relay_port: None,
            tls: RelayTls::Starttls,
            allow_plaintext: false,
            ca_file: None,
            username: None,
            password_file: None,
            timeout_secs: 30,
            hello_name: None,
            dkim: Vec::new(),
        }
    }
}

/// The configured outbound stack: the transport of `mode` (the spool under
/// `outbox`, or the relay, greeting as `hello_default` unless `hello_name`
/// is set) behind DKIM signing with the configured keys, dated by `clock`.
/// Key, CA and password files are read here: a bad one is an error naming
/// the file, never quoting it.
pub fn build(
    cfg: &OutboundConfig,
    outbox: PathBuf,
    hello_default: &str,
    clock: std::sync::Arc<dyn crate::clock::Clock>,
) -> Result<std::sync::Arc<dyn OutboundMail>, crate::error::Error> {
    cfg.check()?;
    let keys = dkim::DkimKeys::load(&cfg.dkim)?;
    let inner: std::sync::Arc<dyn OutboundMail> = match cfg.mode {
        OutboundMode::Spool => std::sync::Arc::new(SpoolMailer { dir: outbox }),
        OutboundMode::Smtp => std::sync::Arc::new(smtp::SmtpMailer::new(cfg, hello_default)?),
    };
    Ok(std::sync::Arc::new(dkim::SignedMailer::new(
        keys, clock, inner,
    )))
}

/// A plain text/plain message (no RDV marker: it never enters the mail
/// rule's marker path). `date` is RFC 2822, `message_id` is `<id@host>`.
pub fn plain_message(
    from: &str,
    to: &str,
    subject: &str,
    body: &str,
    date: &str,
    message_id: &str,
) -> OutboundMessage {
    let raw = format!(
        "From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\nDate: {date}\r\n\
         Message-ID: {message_id}\r\nMIME-Version: 1.0\r\nAuto-Submitted: auto-generated\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n{body}"
    );
    OutboundMessage {
        envelope_from: from.to_string(),
        to: to.to_string(),
        raw: raw.into_bytes(),
    }
}

/// The mailbox-proof mail (plain text; no subject marker, no X-Rdv header).
pub fn code_message(
    from: &str,
    mailbox: &str,
    agent: &str,
    code: &str,
    date: &str,
    message_id: &str,
) -> OutboundMessage {
    plain_message(
        from,
        mailbox,
        "Your Rendezvous gateway code",
        &format!(
            "An agent ({agent}) asked to receive Rendezvous probes for this \
             address through this gateway.\r\n\r\nIf that is your agent, type this \
             code into it: {code}\r\n\r\nIf not, ignore this message; nothing \
             happens without the code.\r\n"
        ),
        date,
        message_id,
    )
}

/// Records every message (tests).
#[derive(Debug, Default)]
pub struct RecordingMailer(pub Mutex<Vec<OutboundMessage>>);

impl RecordingMailer {
    pub fn sent(&self) -> Vec<OutboundMessage> {
        self.0.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl OutboundMail for RecordingMailer {
    fn send<'a>(&'a self, msg: &'a OutboundMessage) -> SendFuture<'a> {
        Box::pin(async move {
            self.0
                .lock()
                .map_err(|_| SendError::Temporary("poisoned".into()))?
                .push(msg.clone());
            Ok(())
        })
    }
}

/// Writes each message as a file (mode 0600 on Unix) into a spool
/// directory (`mode = "spool"`): for operators whose MTA picks files up.
#[derive(Debug, Clone)]
pub struct SpoolMailer {
    pub dir: PathBuf,
}

impl SpoolMailer {
    fn write(&self, msg: &OutboundMessage) -> std::io::Result<()> {
        use std::io::Write;
        std::fs::create_dir_all(&self.dir)?;
        let mut name = [0u8; 16];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut name);
        let path = self.dir.join(format!("{}.eml", hex::encode(name)));
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&path)?;
        f.write_all(&msg.raw)
    }
}

impl OutboundMail for SpoolMailer {
    fn send<'a>(&'a self, msg: &'a OutboundMessage) -> SendFuture<'a> {
        Box::pin(async move {
            self.write(msg)
                .map_err(|e| SendError::Temporary(e.to_string()))
        })
    }
}
