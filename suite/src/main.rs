//! `rdv-suite`: the whole suite on one machine, on its embedded defaults.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use rdv_service_kit::cli_docs::{self, DocsCommand};
use rdv_service_kit::telemetry::LogFormat;
use rdv_suite::{Options, Ports};

/// Runs the whole Rendezvous suite on this machine with no setup: the
/// discovery directory (its OPRF key created on first start), the probe
/// gateway (outbound mail written to a spool folder), the relay bridge
/// (ntfy-compatible HTTP and an embedded MQTT broker, SQLite cache) and a
/// Nostr relay in memory, all on loopback. Prints where each listens and
/// writes it to <data-dir>/suite.json; Ctrl-C stops everything cleanly.
/// Then try `rdv demo` (it reads ./data/suite.json) in another terminal.
#[derive(Debug, Parser)]
#[command(name = "rdv-suite", version, args_conflicts_with_subcommands = true)]
struct Cli {
    /// One folder for every service's data (directory/, gateway/, bridge/).
    #[arg(long, default_value = "./data")]
    data_dir: PathBuf,
    /// Take free ports chosen by the system instead of each service's
    /// default (directory 8480, gateway 8490 + SMTP 2525, bridge 8080 +
    /// MQTT 1883, Nostr relay 7777).
    #[arg(long)]
    ephemeral_ports: bool,
    /// Print the URLs as one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Without a subcommand, the suite runs.
    #[command(subcommand)]
    docs: Option<DocsCommand>,
}

/// rumqttd's per-connection lines, and the dev relay's error line for each
/// client that leaves without a WebSocket close, are noise on a terminal.
const LOG_FILTER: &str = "info,rumqttd=warn,rumqttd::server::broker=off,nostr_relay_builder=off";

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(docs) = &cli.docs {
        return Ok(cli_docs::run::<Cli>(docs)?);
    }
    rdv_service_kit::telemetry::init(cli.log_format, LOG_FILTER);
    let opts = Options {
        data_dir: cli.data_dir.clone(),
        ports: if cli.ephemeral_ports {
            Ports::Ephemeral
        } else {
            Ports::Defaults
        },
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let suite = rdv_suite::start(&opts)
            .await
            .context("starting the suite (a default port in use? try --ephemeral-ports)")?;
        let file = suite.write_urls(&opts.data_dir)?;
        let u = &suite.urls;
        if cli.json {
            println!("{}", serde_json::to_string(u)?);
        } else {
            println!(
                "Rendezvous suite running; data in {}",
                opts.data_dir.display()
            );
            println!("  directory      {}", u.directory);
            println!(
                "  probe gateway  {}   mail in: {}",
                u.gateway, u.gateway_smtp
            );
            println!(
                "                 mail out is spooled to {}",
                u.gateway_outbox
            );
            println!("  relay bridge   {}   {}", u.ntfy, u.mqtt);
            println!("  nostr relay    {}", u.nostr);
            println!("Wrote {}. Ctrl-C stops everything.", file.display());
            println!(
                "Next, in another terminal: rdv demo --suite {}",
                file.display()
            );
        }
        rdv_service_kit::shutdown::signal().await;
        tracing::info!("stopping: draining every service");
        suite.shutdown().await?;
        anyhow::Ok(())
    })?;
    // rumqttd's listener threads never return: leave without joining them.
    std::process::exit(0);
}
