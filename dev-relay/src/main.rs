//! `rdv-dev-relay`: a Nostr relay in memory for local use and tests. It
//! listens on loopback (port 0 picks a free one), prints
//! `{"url": "ws://127.0.0.1:PORT"}` on stdout once it accepts connections,
//! and runs until Ctrl-C or SIGTERM. Not for the open internet: no limits,
//! no persistence.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use nostr_relay_builder::builder::RateLimit;
use nostr_relay_builder::{LocalRelay, RelayBuilder};

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
    // The builder binds the port itself and cannot report one it chose, so
    // a free port is found first (released just before the relay binds it).
    let port = if args.listen.port() == 0 {
        std::net::TcpListener::bind(args.listen)
            .with_context(|| format!("binding {}", args.listen))?
            .local_addr()?
            .port()
    } else {
        args.listen.port()
    };
    // No per-connection rate limit (the builder's default is 60 events a
    // minute): a local agent sending a card to many contacts would be cooled
    // down (§6.2) for nothing.
    let builder = RelayBuilder::default()
        .addr(args.listen.ip())
        .port(port)
        .rate_limit(RateLimit {
            max_reqs: 500,
            notes_per_minute: u32::MAX,
        });
    let relay = LocalRelay::new(builder);
    relay
        .run()
        .await
        .with_context(|| format!("starting the relay on {}:{port}", args.listen.ip()))?;
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
