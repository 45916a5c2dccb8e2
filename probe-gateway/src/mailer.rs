//! Outbound mail as an injected trait. Today it carries the mailbox-proof
//! code only (§5.2.1: the gateway proves the mailbox before delivering to
//! an agent); the code mail carries no RDV marker, so it never enters the
//! mail rule's marker path. The real SMTP sender (lettre) is a later task.

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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    /// The gateway's own sender address (From of the code mail, MAIL FROM
    /// of everything it sends).
    pub from_address: String,
}

impl OutboundConfig {
    pub fn check(&self) -> Result<(), crate::error::Error> {
        if !self.from_address.contains('@') {
            return Err(crate::error::Error::Config(
                "outbound.from_address must be an email address".into(),
            ));
        }
        Ok(())
    }
}

impl Default for OutboundConfig {
    fn default() -> Self {
        Self {
            from_address: "rdv-gateway@localhost".into(),
        }
    }
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
/// directory, for operators until the SMTP sender lands.
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
