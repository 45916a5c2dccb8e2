//! `rdv-dev-relay`: a Nostr relay in memory for local use and tests. It
//! listens on loopback (port 0 picks a free one), prints
//! `{"url": "ws://127.0.0.1:PORT"}` on stdout once it accepts connections,
//! and runs until Ctrl-C or SIGTERM. Not for the open internet: no limits,
//! no persistence.

use std::net::SocketAddr;

use clap::Parser;

/// A Nostr relay in memory, for local use and tests.
#[derive(Debug, Parser)]
#[command(name = "rdv-dev-relay", version, about)]
struct Args {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
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
