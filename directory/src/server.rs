//! Binding, serving, the purge task and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::config::Config;
use crate::error::Result;
use crate::http::{AppState, app};
use crate::keys::KeyRing;
use crate::store::Store;

/// A running directory.
pub struct Running {
    pub addr: SocketAddr,
    pub state: AppState,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Stops accepting, drains in-flight requests and returns.
    pub async fn shutdown(self) -> std::io::Result<()> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or(Ok(()))
    }

    /// Waits until the server stops (after a signal, in `serve`).
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.unwrap_or(Ok(()))
    }
}

/// Binds `cfg.listen` (port 0 allowed) and serves until shutdown.
pub async fn start(
    cfg: Config,
    keys: KeyRing,
    store: Store,
    clock: Arc<dyn Clock>,
) -> Result<Running> {
    let listener = TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let purge_every = Duration::from_secs(cfg.purge_interval_secs.max(1));
    let state = AppState::new(cfg, keys, store, clock);
    let (stop, mut stopped) = watch::channel(false);
    let router = app(state.clone());
    let mut purge_stop = stop.subscribe();
    let ps = state.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(purge_every);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let now = ps.now();
                    let ring = ps.keys();
                    let usable: Vec<String> = ring.usable(now).iter().map(|k| k.id.clone()).collect();
                    match ps.store().purge(now.unix_timestamp(), &usable).await {
                        Ok(n) => tracing::debug!(rows = n, "purged"),
                        Err(e) => tracing::warn!(error = %e, "purge failed"),
                    }
                    ps.limiter().shrink();
                }
                _ = purge_stop.changed() => break,
            }
        }
    });
    let task = tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = stopped.wait_for(|s| *s).await;
        })
        .await
    });
    Ok(Running {
        addr,
        state,
        stop,
        task,
    })
}

pub use rdv_service_kit::shutdown::signal;

/// Reloads the key file on each SIGHUP, until the server stops.
#[cfg(unix)]
fn reload_on_sighup(state: AppState) {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(mut hup) => {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    if let Ok(changed) = state.reload_keys() {
                        tracing::info!(changed, "SIGHUP: key file reloaded");
                    }
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot listen for SIGHUP"),
    }
}

/// Everything `serve` starts from the config alone (the key file loaded,
/// or created on a first start, and the store), running: for `serve` and
/// for the suite (`rdv-suite`).
pub async fn open(mut cfg: Config, clock: Arc<dyn Clock>) -> Result<(Running, Store)> {
    std::fs::create_dir_all(&cfg.data_dir)?;
    let named = cfg.key_file.is_some();
    // The file the keys came from is the one reloaded.
    cfg.key_file = Some(cfg.key_path());
    let (keys, created) =
        crate::keys::load_or_create(&cfg.key_path(), named, clock.now(), &mut rand_core::OsRng)?;
    if let Some(id) = created {
        tracing::info!(key_id = %id, path = %cfg.key_path().display(), "no key file: created one with a fresh OPRF key");
    }
    let store = Store::connect(&cfg.database_url(), cfg.max_db_connections).await?;
    let running = start(cfg, keys, store.clone(), clock).await?;
    Ok((running, store))
}

/// `rdv-directory serve`: run until a signal, then drain and exit.
pub async fn serve(cfg: Config, clock: Arc<dyn Clock>) -> Result<()> {
    let (running, store) = open(cfg, clock).await?;
    #[cfg(unix)]
    reload_on_sighup(running.state.clone());
    // The bound address goes to stdout so scripts can read it (port 0).
    println!("listening on http://{}", running.addr);
    tracing::info!(addr = %running.addr, "listening");
    signal().await;
    tracing::info!("shutting down");
    running.shutdown().await?;
    store.close().await;
    Ok(())
}
