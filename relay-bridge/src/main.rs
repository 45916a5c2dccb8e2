//! `rdv-relay-bridge`: a thin shell over the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use rdv_relay_bridge::config::Config;
use rdv_relay_bridge::message::SystemClock;
use rdv_service_kit::cli_docs::{self, DocsCommand};
use rdv_service_kit::telemetry::LogFormat;

/// The Rendezvous relay bridge: an ntfy-compatible HTTP API and an MQTT
/// broker on one topic space, with a message cache (SPEC §6.3, §4.4).
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the bridge until SIGINT or SIGTERM, then drain subscribers.
    ///
    /// Settings come from the TOML file, then RDV_BRIDGE_* environment
    /// variables (RDV_BRIDGE_SECTION__KEY, e.g. RDV_BRIDGE_CACHE__DURATION=1h),
    /// then these flags. Port 0 picks a free port; the bound addresses are
    /// printed on stdout as one JSON line and logged.
    Serve(ServeArgs),
    #[command(flatten)]
    Docs(DocsCommand),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// TOML config file (see docker/relay-bridge/config.toml).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// ntfy-compatible HTTP API address.
    #[arg(long)]
    http_listen: Option<SocketAddr>,
    /// MQTT 3.1.1 listener of the embedded broker.
    #[arg(long)]
    mqtt_listen: Option<SocketAddr>,
    /// MQTT 5 listener of the embedded broker.
    #[arg(long)]
    mqtt_v5_listen: Option<SocketAddr>,
    /// MQTT-over-WebSocket listener of the embedded broker.
    #[arg(long)]
    ws_listen: Option<SocketAddr>,
    /// Where the SQLite cache lives (unless cache.database_url is set).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// rumqttd 0.20 logs per-connection client events at ERROR under the
/// target `rumqttd::server::broker`: a probe or client that closes before
/// CONNECT, a refused CONNECT, an ordinary DISCONNECT ("router-drop"), and a
/// malformed first packet with its contents (attacker bytes in the log).
/// That target is off by default; refusals are counted in `/metrics`, and a
/// listener that fails to bind fails the start (`wait_listening`).
/// `RUST_LOG` replaces the whole filter.
const DEFAULT_LOG_FILTER: &str = "info,rumqttd=warn,rumqttd::server::broker=off";

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(a) => serve(a),
        Command::Docs(docs) => Ok(cli_docs::run::<Cli>(&docs)?),
    }
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    rdv_service_kit::telemetry::init(a.log_format, DEFAULT_LOG_FILTER);
    let mut cfg = Config::load(a.config.as_deref()).context("loading config")?;
    if let Some(x) = a.http_listen {
        cfg.http.listen = x;
    }
    if let Some(x) = a.mqtt_listen {
        cfg.mqtt.listen = Some(x);
    }
    if let Some(x) = a.mqtt_v5_listen {
        cfg.mqtt.listen_v5 = Some(x);
    }
    if let Some(x) = a.ws_listen {
        cfg.mqtt.ws_listen = Some(x);
    }
    if let Some(x) = a.data_dir {
        cfg.cache.data_dir = x;
    }
    cfg.validate()?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let running = rdv_relay_bridge::serve::start(cfg, Arc::new(SystemClock)).await?;
        let b = &running.bound;
        println!(
            "{}",
            serde_json::json!({
                "http": b.http.to_string(),
                "mqtt": b.mqtt.v4.map(|x| x.to_string()),
                "mqtt_v5": b.mqtt.v5.map(|x| x.to_string()),
                "ws": b.mqtt.ws.map(|x| x.to_string()),
            })
        );
        rdv_service_kit::shutdown::signal().await;
        tracing::info!("shutting down: draining subscribers");
        running.shutdown().await?;
        anyhow::Ok(())
    })?;
    // rumqttd's listener threads never return: leave without joining them.
    std::process::exit(0);
}
