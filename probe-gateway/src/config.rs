//! Service configuration: defaults, then a TOML file, then `RDV_GATEWAY_*`
//! environment overrides (nested keys with `__`, e.g.
//! `RDV_GATEWAY_LIMITS__PER_SENDER__MAX`). Secrets are never in here: the
//! master secret is read from `master_secret_file`, the address key from
//! `address_key_file`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::auth::AuthMode;
use crate::error::Error;
use crate::limits::{LimitConfig, Rate};
use crate::mailer::OutboundConfig;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP address; port 0 picks a free port (printed at start).
    pub http_listen: SocketAddr,
    /// SMTP listener for forwarded mail (`smtp`); off when unset. Port 0
    /// picks a free port (printed at start).
    pub smtp_listen: Option<SocketAddr>,
    /// The name in the SMTP greeting and EHLO reply.
    pub smtp_hostname: String,
    /// Most SMTP sessions at once; more are answered 421 and closed.
    pub smtp_max_sessions: usize,
    /// Longest wait for one SMTP command line or DATA chunk.
    pub smtp_command_timeout_secs: u64,
    /// Longest SMTP session, whatever it does.
    pub smtp_session_timeout_secs: u64,
    /// STARTTLS: a PEM certificate chain and its PEM private key; offered
    /// only when both are set.
    pub smtp_tls_cert_file: Option<PathBuf>,
    pub smtp_tls_key_file: Option<PathBuf>,
    /// Holds the SQLite file, the master secret and the outbox by default.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; default `<data_dir>/gateway.db`.
    pub database: Option<String>,
    pub max_db_connections: u32,
    /// Hex file of the cookie master secret (§5.2.1); default
    /// `<data_dir>/master-secret`, created on first start when absent.
    pub master_secret_file: Option<PathBuf>,
    /// After a rotation: the previous secret's file and when it was retired
    /// (RFC 3339); it stays valid for one probe lifetime.
    pub previous_master_secret_file: Option<PathBuf>,
    pub previous_retired_at: Option<String>,
    /// Hex file (64+ digits) of the address key that keys opt-outs and
    /// per-address limits (§5.2.2); default `<data_dir>/address-key`,
    /// created on first start. Never rotate it: it would forget every
    /// opt-out.
    pub address_key_file: Option<PathBuf>,
    /// What the SMTP listener answers to a gate refusal (§5.2.1 "Silence").
    pub smtp_refusals: SmtpRefusals,
    /// What the SMTP listener answers at `RCPT TO` for a mailbox with no
    /// registered agent (§5.2.1 "Silence", §9): by default the same as
    /// for a registered one (accepted, then dropped and counted).
    pub smtp_unknown_recipients: UnknownRecipients,
    /// Verify (the default: DKIM, SPF and DMARC checked here over DNS) or
    /// trusted (Authentication-Results from these authserv-ids only).
    pub auth: AuthMode,
    /// Verify mode, mail pushed over HTTP: the integrator's MTA host
    /// names whose topmost `Received:` gives SPF its session (RFC 5321
    /// §4.4); empty (the default) turns this off.
    pub trusted_received_by: Vec<String>,
    /// Verify mode: nameservers (the system's when empty).
    pub nameservers: Vec<SocketAddr>,
    pub dns_query_timeout_secs: u64,
    pub dns_total_timeout_secs: u64,
    /// Largest raw message, bytes, refused before parsing.
    pub max_mail_bytes: usize,
    /// Local testing only: admit `ws://` relay URLs in the cards that
    /// probes, SYN-ACKs and sends carry (§4.3 asks for `wss://`), so a
    /// test can point an agent at a relay on 127.0.0.1. Off by default;
    /// never turn it on in a deployment.
    pub dev_allow_ws_relays: bool,
    /// Largest JSON request body, bytes.
    pub max_body_bytes: usize,
    pub request_timeout_secs: u64,
    /// Allowed CORS origins; `["*"]` allows any.
    pub cors_origins: Vec<String>,
    /// Signed requests: how far `ts` may be from the gateway's clock.
    pub signed_request_window_secs: i64,
    /// Mailbox-proof codes: lifetime and tries.
    pub code_ttl_secs: i64,
    pub code_max_attempts: u32,
    /// Registrations (proof-code mails) per mailbox, so the gateway cannot
    /// be used to flood an address with codes.
    pub register_per_mailbox: Rate,
    /// Most items one inbox answer carries.
    pub inbox_max_items: u32,
    pub purge_interval_secs: u64,
    /// The spool directory of `[outbound] mode = "spool"` (one file per
    /// message); default `<data_dir>/outbox`.
    pub outbox_dir: Option<PathBuf>,
    pub limits: LimitConfig,
    /// Outbound mail: relay, sender address, DKIM keys.
    pub outbound: OutboundConfig,
    /// Probe, SYN-ACK, ACK and invite flows: gateway addresses, per-address
    /// limits, opt-out.
    pub flows: FlowConfig,
}

/// The SMTP listener's answer to a gate refusal (`smtp_refusals`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum SmtpRefusals {
    /// `250 2.0.0 OK`, and the message is dropped: a bounce would tell an
    /// unknown sender that a gateway (and likely an agent) is behind the
    /// address (§5.2.1 "Silence").
    #[default]
    Discard,
    /// `550 5.7.1 Refused by the RDV gate: <code>`, for operators who want
    /// bounces.
    Reject,
}

/// The SMTP listener's answer to a recipient with no agent
/// (`smtp_unknown_recipients`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum UnknownRecipients {
    /// `250` at RCPT and after DATA, and the message is dropped (counted in
    /// `rdv_gateway_smtp_discarded_total{refusal="not_for_mailbox"}`): a
    /// `550 5.1.1` would become a bounce telling any sender whether an
    /// address has an agent.
    #[default]
    Accept,
    /// `550 5.1.1 No such mailbox here` at RCPT, for operators who accept
    /// that difference (an MTA that must not queue mail for nobody).
    Reject,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            http_listen: SocketAddr::from(([127, 0, 0, 1], 8490)),
            smtp_listen: None,
            smtp_hostname: "localhost".into(),
            smtp_max_sessions: 64,
            smtp_command_timeout_secs: 60,
            smtp_session_timeout_secs: 600,
            smtp_tls_cert_file: None,
            smtp_tls_key_file: None,
            data_dir: PathBuf::from("./data"),
            database: None,
            max_db_connections: 16,
            master_secret_file: None,
            previous_master_secret_file: None,
            previous_retired_at: None,
            address_key_file: None,
            smtp_refusals: SmtpRefusals::Discard,
            smtp_unknown_recipients: UnknownRecipients::Accept,
            auth: AuthMode::Verify,
            trusted_received_by: Vec::new(),
            nameservers: Vec::new(),
            dns_query_timeout_secs: 5,
            dns_total_timeout_secs: 20,
            max_mail_bytes: rdv_proto::consts::MAIL_MAX_BYTES,
            dev_allow_ws_relays: false,
            max_body_bytes: 64 * 1024,
            request_timeout_secs: 30,
            cors_origins: vec!["*".into()],
            signed_request_window_secs: 300,
            code_ttl_secs: 3600,
            code_max_attempts: 5,
            register_per_mailbox: Rate {
                max: 5,
                window_secs: 24 * 3600,
            },
            inbox_max_items: 100,
            purge_interval_secs: 300,
            outbox_dir: None,
            limits: LimitConfig::default(),
            outbound: OutboundConfig::default(),
            flows: FlowConfig::default(),
        }
    }
}

impl Config {
    /// Defaults, then the TOML file (if any), then `RDV_GATEWAY_*`
    /// (`RDV_GATEWAY_CONFIG` names the file, it is not a key).
    pub fn load(file: Option<&Path>) -> Result<Self, Error> {
        let c: Config = rdv_service_kit::config::load(&Config::default(), file, "RDV_GATEWAY_")
            .map_err(|e| Error::Config(e.0))?;
        c.check()?;
        Ok(c)
    }

    /// Parses TOML text alone (tests, sample configs).
    pub fn from_toml(text: &str) -> Result<Self, Error> {
        let c: Config = rdv_service_kit::config::from_toml(&Config::default(), text)
            .map_err(|e| Error::Config(e.0))?;
        c.check()?;
        Ok(c)
    }

    pub fn check(&self) -> Result<(), Error> {
        let bad = |s: &str| Err(Error::Config(s.into()));
        if let AuthMode::Trusted { authserv_ids } = &self.auth {
            if authserv_ids.is_empty() {
                return bad(
                    "auth.trusted.authserv_ids is empty: in trusted mode no message could ever \
                     pass the gate's authentication; name your MTA's authserv-id, or use verify \
                     mode (auth = \"verify\")",
                );
            }
            if authserv_ids.iter().any(|h| {
                h.is_empty()
                    || !h
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
            }) {
                return bad("auth.trusted.authserv_ids must name hosts (authserv-ids)");
            }
        }
        if self.max_mail_bytes == 0 || self.max_body_bytes == 0 {
            return bad("max_mail_bytes and max_body_bytes must be at least 1");
        }
        if !(1..=3600).contains(&self.signed_request_window_secs) {
            return bad("signed_request_window_secs must be 1 to 3600");
        }
        if self.code_ttl_secs < 60 || self.code_max_attempts == 0 {
            return bad("code_ttl_secs must be at least 60 and code_max_attempts at least 1");
        }
        if self.smtp_max_sessions == 0
            || self.smtp_command_timeout_secs == 0
            || self.smtp_session_timeout_secs == 0
        {
            return bad("smtp_max_sessions and the smtp timeouts must be at least 1");
        }
        if self.smtp_hostname.is_empty()
            || !self
                .smtp_hostname
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return bad("smtp_hostname must be a host name");
        }
        if self.smtp_tls_cert_file.is_some() != self.smtp_tls_key_file.is_some() {
            return bad("smtp_tls_cert_file and smtp_tls_key_file go together");
        }
        if self.trusted_received_by.iter().any(|h| {
            h.is_empty()
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
        }) {
            return bad("trusted_received_by must name hosts");
        }
        if self.inbox_max_items == 0 {
            return bad("inbox_max_items must be at least 1");
        }
        let l = &self.limits;
        for r in [
            l.per_sender,
            l.per_requester,
            l.per_mailbox,
            self.register_per_mailbox,
        ] {
            if r.max == 0 || r.window_secs <= 0 {
                return bad("every limit needs max and window_secs of at least 1");
            }
        }
        if self.previous_master_secret_file.is_some() != self.previous_retired_at.is_some() {
            return bad("previous_master_secret_file and previous_retired_at go together");
        }
        self.outbound.check()?;
        self.flows.check()?;
        Ok(())
    }

    pub fn database_url(&self) -> String {
        self.database.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("gateway.db").display()
            )
        })
    }

    pub fn master_secret_path(&self) -> PathBuf {
        self.master_secret_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("master-secret"))
    }

    pub fn address_key_path(&self) -> PathBuf {
        self.address_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("address-key"))
    }

    pub fn outbox_path(&self) -> PathBuf {
        self.outbox_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("outbox"))
    }
}

/// The local part of opt-out addresses: `optout+TOKEN@<mail_domain>`.
pub const OPTOUT_LOCAL: &str = "optout";
/// The path of the explainer page the gateway serves (§5.2.2 "a short
/// explainer link").
pub const EXPLAINER_PATH: &str = "/v1/about";

/// `[flows]` settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FlowConfig {
    /// The domain of gateway addresses; unset: no gateway addresses, and
    /// nothing can be sent on behalf of agents.
    pub mail_domain: Option<String>,
    /// The local part before `+<tag>`.
    pub address_local: String,
    /// The public base URL (`https://gw.example`) of the one-click opt-out
    /// link and of the explainer page; unset: only the mailto opt-out.
    pub public_url: Option<String>,
    /// The explainer link every invite carries (§5.2.2), for operators who
    /// host their own page; default `<public_url>/v1/about`, the page this
    /// gateway serves. With neither set, invites are refused.
    pub explainer_url: Option<String>,
    /// One probe per (caller, address) per this many days (§5.2.1).
    pub probe_interval_days: i64,
    /// Sends of every kind per caller per day.
    pub sends_per_day: u32,
    /// An invite is pending this many days without an answer (§5.2.2).
    pub invite_pending_days: i64,
    /// Cooldown after an unanswered or declined invite (§5.2.2).
    pub invite_cooldown_days: i64,
    /// Invites to one address across all callers per 30 days.
    pub invites_per_address_per_30d: u32,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self {
            mail_domain: None,
            address_local: "rdv".into(),
            public_url: None,
            explainer_url: None,
            probe_interval_days: 30,
            sends_per_day: 50,
            invite_pending_days: 30,
            invite_cooldown_days: 30,
            invites_per_address_per_30d: 3,
        }
    }
}

fn hostname_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.contains('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

impl FlowConfig {
    pub fn check(&self) -> Result<(), Error> {
        let bad = |s: &str| Err(Error::Config(format!("flows: {s}")));
        if let Some(d) = &self.mail_domain
            && !hostname_ok(d)
        {
            return bad("mail_domain must be a domain name");
        }
        let local = &self.address_local;
        if local.is_empty()
            || local.len() > 32
            || local.eq_ignore_ascii_case(OPTOUT_LOCAL)
            || !local
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return bad("address_local must be 1 to 32 of a-z 0-9 - _, and not optout");
        }
        if let Some(u) = &self.public_url
            && !(u.starts_with("https://") || u.starts_with("http://"))
                | u.ends_with('/')
                | !u.bytes().all(|b| b.is_ascii_graphic())
        {
            return bad("public_url must be http(s)://host[/path] without a trailing slash");
        }
        if let Some(u) = &self.explainer_url
            && (!(u.starts_with("https://") || u.starts_with("http://"))
                || !u.bytes().all(|b| b.is_ascii_graphic()))
        {
            return bad("explainer_url must be an http(s):// URL");
        }
        if self.probe_interval_days < 1
            || self.invite_pending_days < 1
            || self.invite_cooldown_days < 0
            || self.sends_per_day == 0
            || self.invites_per_address_per_30d == 0
        {
            return bad("the day counts and caps must be at least 1 (cooldown at least 0)");
        }
        Ok(())
    }

    /// `<address_local>+<tag>@<mail_domain>`, when the domain is set.
    pub fn gateway_address(&self, tag: &str) -> Option<String> {
        self.mail_domain
            .as_ref()
            .map(|d| format!("{}+{tag}@{d}", self.address_local))
    }

    pub(crate) fn optout_mailto(&self, token: &str) -> Option<String> {
        self.mail_domain
            .as_ref()
            .map(|d| format!("{OPTOUT_LOCAL}+{token}@{d}"))
    }

    /// The explainer link of an invite: `explainer_url`, else this
    /// gateway's own page under `public_url`.
    pub fn explainer_link(&self) -> Option<String> {
        self.explainer_url.clone().or_else(|| {
            self.public_url
                .as_ref()
                .map(|u| format!("{u}{EXPLAINER_PATH}"))
        })
    }

    pub(crate) fn optout_url(&self, token: &str) -> Option<String> {
        self.public_url
            .as_ref()
            .map(|u| format!("{u}/v1/optout/{token}"))
    }
}
