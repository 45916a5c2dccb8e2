//! `rdv-probe-gateway`: `serve` (the HTTP API, docs/probe-gateway.md) and
//! `check`, which runs the §5.2.1 gate over one message so an operator can
//! test a mail rule end to end; `man` and `completions`.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use rdv_probe_gateway::auth::{SmtpSession, Verifier, VerifyConfig};
use rdv_probe_gateway::clock::SystemClock;
use rdv_probe_gateway::config::Config;
use rdv_probe_gateway::gate::{self, Arrival, AuthBackend};
use rdv_probe_gateway::limits::{LimitConfig, Limits};
use rdv_proto::{Address, AgentId};
use rdv_service_kit::cli_docs::{self, DocsCommand};
use rdv_service_kit::telemetry::LogFormat;

#[derive(Parser)]
#[command(
    version,
    about = "The Rendezvous probe and invite gateway (SPEC §5.2.1, §5.2.2)"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the HTTP API and, when configured, the SMTP listener; prints the
    /// bound addresses ("listening on http://…", then "listening on smtp://…").
    /// Settings: --config TOML, then RDV_GATEWAY_* variables, then these flags.
    Serve {
        /// TOML configuration file.
        #[arg(long, env = "RDV_GATEWAY_CONFIG")]
        config: Option<PathBuf>,
        /// HTTP address, e.g. 0.0.0.0:8490 (port 0 picks one).
        #[arg(long)]
        http_listen: Option<SocketAddr>,
        /// SMTP address for forwarded mail, e.g. 0.0.0.0:2525 (port 0 picks
        /// one; printed as "listening on smtp://…"). Off unless set here or
        /// as `smtp_listen` in the configuration.
        #[arg(long)]
        smtp_listen: Option<SocketAddr>,
        /// Holds the SQLite database, the master secret and the outbox.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// `sqlite://PATH?mode=rwc` or `postgres://…`.
        #[arg(long)]
        database: Option<String>,
    },
    /// Run the gate over one raw RFC 5322 message and print the verdict as
    /// JSON. Exit status 0 when admitted, 2 when refused. Choose trusted mode
    /// with --authserv-id, or verify mode with --verify.
    Check {
        /// The message file, or - for standard input.
        file: String,
        /// The mailbox the message arrived for (the probe's to_hint must name it).
        #[arg(long)]
        mailbox: String,
        /// The agent registered for the mailbox (needed to admit a SYN-ACK).
        #[arg(long)]
        agent: Option<String>,
        /// Trusted mode: read Authentication-Results only from this
        /// authserv-id (repeatable).
        #[arg(long = "authserv-id", conflicts_with = "verify")]
        authserv_ids: Vec<String>,
        /// Verify mode: check DKIM, SPF and DMARC over DNS.
        #[arg(long)]
        verify: bool,
        /// Verify mode: nameserver ip:port (repeatable; the system's by default).
        #[arg(long, requires = "verify")]
        nameserver: Vec<SocketAddr>,
        /// SPF: the connecting IP of the SMTP session.
        #[arg(long, requires_all = ["helo", "verify"])]
        client_ip: Option<IpAddr>,
        /// SPF: the HELO/EHLO name.
        #[arg(long)]
        helo: Option<String>,
        /// SPF: the envelope sender (empty for the null path).
        #[arg(long, default_value = "")]
        mail_from: String,
        /// The gate's clock, RFC 3339 (default: now).
        #[arg(long)]
        now: Option<String>,
        /// Largest message accepted, bytes.
        #[arg(long, default_value_t = rdv_proto::consts::MAIL_MAX_BYTES)]
        max_bytes: usize,
    },
    #[command(flatten)]
    Docs(DocsCommand),
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    rdv_service_kit::telemetry::init(cli.log_format, "info");
    match cli.cmd {
        Cmd::Docs(docs) => {
            cli_docs::run::<Cli>(&docs)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Serve {
            config,
            http_listen,
            smtp_listen,
            data_dir,
            database,
        } => {
            let mut cfg = Config::load(config.as_deref())?;
            if let Some(l) = http_listen {
                cfg.http_listen = l;
            }
            if let Some(l) = smtp_listen {
                cfg.smtp_listen = Some(l);
            }
            if let Some(d) = data_dir {
                cfg.data_dir = d;
            }
            if let Some(d) = database {
                cfg.database = Some(d);
            }
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(rdv_probe_gateway::server::serve(cfg, Arc::new(SystemClock)))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check {
            file,
            mailbox,
            agent,
            authserv_ids,
            verify,
            nameserver,
            client_ip,
            helo,
            mail_from,
            now,
            max_bytes,
        } => {
            let mailbox = Address::parse(&mailbox).context("--mailbox")?;
            let agent = agent
                .as_deref()
                .map(AgentId::parse)
                .transpose()
                .context("--agent")?;
            let now = match now {
                Some(s) => rdv_proto::time::parse_time("--now", &s)?,
                None => time::OffsetDateTime::now_utc(),
            };
            // Read at most one byte over the bound: the gate refuses it unparsed.
            let mut raw = Vec::new();
            let limit = max_bytes as u64 + 1;
            if file == "-" {
                std::io::stdin().take(limit).read_to_end(&mut raw)?;
            } else {
                std::fs::File::open(&file)
                    .with_context(|| format!("open {file}"))?
                    .take(limit)
                    .read_to_end(&mut raw)?;
            }
            let backend = if verify {
                AuthBackend::Verify(Box::new(Verifier::new(VerifyConfig {
                    nameservers: nameserver,
                    query_timeout: Duration::from_secs(5),
                    total_timeout: Duration::from_secs(20),
                    host_domain: "localhost".into(),
                })?))
            } else if !authserv_ids.is_empty() {
                AuthBackend::Trusted(authserv_ids)
            } else {
                bail!("choose --authserv-id (trusted mode) or --verify");
            };
            let session = client_ip.map(|ip| SmtpSession {
                client_ip: ip,
                helo: helo.unwrap_or_default(),
                mail_from,
            });
            let arrival = Arrival {
                mailbox: &mailbox,
                agent: agent.as_ref(),
                max_bytes,
            };
            let limits = Mutex::new(Limits::new(LimitConfig::default()));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let result = rt.block_on(gate::run(
                &raw,
                &arrival,
                session.as_ref(),
                &backend,
                &limits,
                now,
            ));
            println!("{}", serde_json::to_string_pretty(&gate::report(&result))?);
            Ok(if result.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
    }
}
