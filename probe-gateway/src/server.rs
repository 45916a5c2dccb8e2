//! Binding, serving, the purge task and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::auth::{Verifier, VerifyConfig};
use crate::clock::{Clock, Entropy, OsEntropy};
use crate::config::Config;
use crate::cookie::CookieKeys;
use crate::error::Error;
use crate::gate::AuthBackend;
use crate::http::app;
pub use crate::secret_files::{load_address_key, load_secret};
use crate::state::{AppState, Deps};
use crate::store::Store;

/// A running gateway.
pub struct Running {
    pub addr: SocketAddr,
    /// The SMTP listener's bound address, when `smtp_listen` is set.
    pub smtp_addr: Option<SocketAddr>,
    pub state: AppState,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
    smtp_task: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, drains in-flight requests and returns.
    pub async fn shutdown(self) -> std::io::Result<()> {
        let _ = self.stop.send(true);
        if let Some(t) = self.smtp_task {
            let _ = t.await;
        }
        self.task.await.unwrap_or(Ok(()))
    }
}

/// Binds `cfg.http_listen` and, when set, `cfg.smtp_listen` (port 0
/// allowed) and serves until shutdown.
pub async fn start(cfg: Config, deps: Deps) -> Result<Running, Error> {
    let listener = TcpListener::bind(cfg.http_listen).await?;
    let addr = listener.local_addr()?;
    let smtp_listener = match cfg.smtp_listen {
        Some(a) => Some((
            TcpListener::bind(a).await?,
            crate::smtp::tls_acceptor(&cfg)?,
        )),
        None => None,
    };
    let smtp_addr = smtp_listener
        .as_ref()
        .map(|(l, _)| l.local_addr())
        .transpose()?;
    let purge_every = Duration::from_secs(cfg.purge_interval_secs.max(1));
    let l = &cfg.limits;
    let longest = [
        l.per_sender,
        l.per_requester,
        l.per_mailbox,
        cfg.register_per_mailbox,
    ]
    .iter()
    .map(|r| r.window_secs)
    .max()
    .unwrap_or(0);
    // A missing or bad address key stops here (it is created when absent).
    let state = AppState::try_new(cfg, deps)?;
    let (stop, mut stopped) = watch::channel(false);
    let router = app(state.clone());
    let smtp_task =
        smtp_listener.map(|(l, tls)| crate::smtp::spawn(l, state.clone(), tls, stop.subscribe()));
    let mut purge_stop = stop.subscribe();
    let ps = state.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(purge_every);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    match ps.store().purge(ps.now().unix_timestamp(), longest).await {
                        Ok(n) => tracing::debug!(rows = n, "purged"),
                        Err(e) => tracing::warn!(error = %e, "purge failed"),
                    }
                }
                _ = purge_stop.changed() => break,
            }
        }
    });
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    Ok(Running {
        addr,
        smtp_addr,
        state,
        stop,
        task,
        smtp_task,
    })
}

/// The cookie keys of a configuration (current and, after a rotation, the
/// previous secret).
pub fn cookie_keys(cfg: &Config, entropy: &dyn Entropy) -> Result<CookieKeys, Error> {
    let current = load_secret(&cfg.master_secret_path(), true, entropy)?;
    let previous = match (&cfg.previous_master_secret_file, &cfg.previous_retired_at) {
        (Some(p), Some(at)) => {
            let at = rdv_proto::time::parse_time("previous_retired_at", at)
                .map_err(|e| Error::Config(e.to_string()))?;
            Some((load_secret(p, false, entropy)?, at))
        }
        _ => None,
    };
    Ok(CookieKeys { current, previous })
}

/// The authentication backend of a configuration.
pub fn backend(cfg: &Config) -> Result<AuthBackend, Error> {
    Ok(match &cfg.auth {
        crate::auth::AuthMode::Trusted { authserv_ids } => {
            AuthBackend::Trusted(authserv_ids.clone())
        }
        crate::auth::AuthMode::Verify => {
            AuthBackend::Verify(Box::new(Verifier::new(VerifyConfig {
                nameservers: cfg.nameservers.clone(),
                query_timeout: Duration::from_secs(cfg.dns_query_timeout_secs),
                total_timeout: Duration::from_secs(cfg.dns_total_timeout_secs),
                host_domain: "localhost".into(),
            })?))
        }
    })
}

pub use rdv_service_kit::shutdown::signal;

/// Everything `serve` starts from the config alone (keys and secrets read
/// or created, the store, the mailer), running: for `serve` and for the
/// suite (`rdv-suite`), which runs the gateway beside the other services.
pub async fn open(cfg: Config, clock: Arc<dyn Clock>) -> Result<(Running, Store), Error> {
    std::fs::create_dir_all(&cfg.data_dir)?;
    if cfg.dev_allow_ws_relays {
        tracing::warn!("dev_allow_ws_relays is on: ws:// relays are admitted (local testing only)");
    }
    let entropy = OsEntropy;
    let cookies = cookie_keys(&cfg, &entropy)?;
    let backend = backend(&cfg)?;
    match &cfg.auth {
        crate::auth::AuthMode::Verify => tracing::info!(
            nameservers = if cfg.nameservers.is_empty() {
                "system"
            } else {
                "configured"
            },
            "mail authentication: verify mode (DKIM, SPF, DMARC over DNS)"
        ),
        crate::auth::AuthMode::Trusted { authserv_ids } => tracing::info!(
            authserv_ids = authserv_ids.join(","),
            "mail authentication: trusted mode (Authentication-Results)"
        ),
    }
    let store = Store::connect(&cfg.database_url(), cfg.max_db_connections).await?;
    // Reads the DKIM key, CA and password files: a bad one stops here.
    let mailer = crate::mailer::build(
        &cfg.outbound,
        cfg.outbox_path(),
        &cfg.smtp_hostname,
        clock.clone(),
    )?;
    let deps = Deps {
        store: store.clone(),
        clock,
        entropy: Arc::new(entropy),
        mailer,
        backend,
        cookies,
    };
    let running = start(cfg, deps).await?;
    Ok((running, store))
}

/// `rdv-probe-gateway serve`: run until a signal, then drain and exit.
pub async fn serve(cfg: Config, clock: Arc<dyn Clock>) -> Result<(), Error> {
    let (running, store) = open(cfg, clock).await?;
    // The bound address goes to stdout so scripts can read it (port 0).
    println!("listening on http://{}", running.addr);
    tracing::info!(addr = %running.addr, "listening");
    if let Some(a) = running.smtp_addr {
        println!("listening on smtp://{a}");
        tracing::info!(addr = %a, "smtp listening");
    }
    signal().await;
    tracing::info!("shutting down");
    running.shutdown().await?;
    store.close().await;
    Ok(())
}
