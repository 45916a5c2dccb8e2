//! `rdv-dev-relay`: a Nostr relay in memory for local use and tests. It
//! listens on loopback (port 0 picks a free one), prints
//! `{"url": "ws://127.0.0.1:PORT"}` on stdout once it accepts connections,
//! and runs until Ctrl-C or SIGTERM. Not for the open internet: no limits,
//! no persistence. `rdv-dev-relay man` and `completions` write its man
//! pages and shell completions.

use std::net::SocketAddr;

use clap::Parser;
use rdv_service_kit::cli_docs::{self, DocsCommand};

/// A Nostr relay in memory, for local use and tests.
#[derive(Debug, Parser)]
#[command(
    name = "rdv-dev-relay",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Args {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Without a subcommand, the relay runs.
    #[command(subcommand)]
    docs: Option<DocsCommand>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(docs) = &args.docs {
        return Ok(cli_docs::run::<Args>(docs)?);
    }
    let relay = rdv_dev_relay::start(args.listen).await?;
    println!(
        "{}",
        serde_json::json!({ "url": relay.url().await.to_string() })
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    relay.shutdown();
    Ok(())
}
