//! Outbound mail as an injected trait. Today it carries the mailbox-proof
//! code only (§5.2.1: the gateway proves the mailbox before delivering to
//! an agent); the code mail carries no RDV marker, so it never enters the
//! mail rule's marker path. The real SMTP sender (lettre) is a later task.

use std::path::PathBuf;
use std::sync::Mutex;

/// One mail the gateway wants sent. Never logged (it carries a code).
#[derive(Clone, PartialEq, Eq)]
pub struct OutboundMessage {
    pub to: String,
    pub subject: String,
    pub body: String,
}

impl std::fmt::Debug for OutboundMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundMessage")
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

pub trait OutboundMail: Send + Sync + 'static {
    /// Hands the message to the transport; an error is reported to the
    /// caller as "could not send", never with the message.
    fn send(&self, msg: &OutboundMessage) -> Result<(), String>;
}

/// The mailbox-proof mail (plain text; no subject marker, no X-Rdv header).
pub fn code_message(mailbox: &str, agent: &str, code: &str) -> OutboundMessage {
    OutboundMessage {
        to: mailbox.to_string(),
        subject: "Your Rendezvous gateway code".into(),
        body: format!(
            "An agent ({agent}) asked to receive Rendezvous probes for this \
             address through this gateway.\r\n\r\nIf that is your agent, type this \
             code into it: {code}\r\n\r\nIf not, ignore this message; nothing \
             happens without the code.\r\n"
        ),
    }
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
    fn send(&self, msg: &OutboundMessage) -> Result<(), String> {
        self.0
            .lock()
            .map_err(|_| "poisoned".to_string())?
            .push(msg.clone());
        Ok(())
    }
}

/// Writes each message as a file (mode 0600 on Unix) into a spool
/// directory, for operators until the SMTP sender lands.
#[derive(Debug, Clone)]
pub struct SpoolMailer {
    pub dir: PathBuf,
}

impl OutboundMail for SpoolMailer {
    fn send(&self, msg: &OutboundMessage) -> Result<(), String> {
        use std::io::Write;
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let mut name = [0u8; 16];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut name);
        let path = self.dir.join(format!("{}.eml", hex::encode(name)));
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&path).map_err(|e| e.to_string())?;
        write!(
            f,
            "To: {}\r\nSubject: {}\r\nAuto-Submitted: auto-generated\r\n\r\n{}",
            msg.to, msg.subject, msg.body
        )
        .map_err(|e| e.to_string())
    }
}
