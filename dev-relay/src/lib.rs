//! A Nostr relay in memory for local use and tests (nostr-relay-builder):
//! the `rdv-dev-relay` binary and the suite (`rdv-suite`) start it. Not for
//! the open internet: no limits, no persistence.

use std::net::SocketAddr;

pub use nostr_relay_builder::LocalRelay;
use nostr_relay_builder::RelayBuilder;
use nostr_relay_builder::builder::RateLimit;

/// Why a relay did not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("starting the relay on {addr}: {reason}")]
    Start { addr: SocketAddr, reason: String },
}

/// Starts a relay on `listen` (port 0 picks a free one) and returns it
/// running; `relay.url().await` is its `ws://` address.
pub async fn start(listen: SocketAddr) -> Result<LocalRelay, Error> {
    // The builder binds the port itself and cannot report one it chose, so
    // a free port is found first (released just before the relay binds it).
    let port = if listen.port() == 0 {
        std::net::TcpListener::bind(listen)
            .and_then(|l| l.local_addr())
            .map_err(|source| Error::Bind {
                addr: listen,
                source,
            })?
            .port()
    } else {
        listen.port()
    };
    // No per-connection rate limit (the builder's default is 60 events a
    // minute): a local agent sending a card to many contacts would be cooled
    // down (§6.2) for nothing.
    let builder = RelayBuilder::default()
        .addr(listen.ip())
        .port(port)
        .rate_limit(RateLimit {
            max_reqs: 500,
            notes_per_minute: u32::MAX,
        });
    let relay = LocalRelay::new(builder);
    relay.run().await.map_err(|e| Error::Start {
        addr: SocketAddr::new(listen.ip(), port),
        reason: e.to_string(),
    })?;
    Ok(relay)
}
