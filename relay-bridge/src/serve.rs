//! `rdv-relay-bridge serve`: wires config, cache, hub, HTTP and MQTT
//! together; prints and logs the bound addresses; drains on shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::Result;
use crate::auth::Auth;
use crate::config::{Config, MqttMode};
use crate::http::{AppState, app};
use crate::hub::{Hub, HubOptions};
use crate::limits::Limits;
use crate::message::{Clock, UnixTime as _};
use crate::mqtt::MqttAddrs;
use crate::store::Store;

/// Where a running bridge listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub http: SocketAddr,
    pub mqtt: MqttAddrs,
}

/// A running bridge.
#[derive(Debug)]
pub struct Running {
    pub bound: Bound,
    pub hub: Arc<Hub>,
    /// What the embedded broker holds in memory (None without one).
    pub broker: Option<Arc<rumqttd::RouterGauges>>,
    stop: Option<oneshot::Sender<()>>,
    http: JoinHandle<std::io::Result<()>>,
    housekeeping: JoinHandle<()>,
}

impl Running {
    /// Graceful shutdown: subscriptions end (their streams close cleanly),
    /// in-flight requests finish, then the cache closes.
    pub async fn shutdown(mut self) -> Result<()> {
        self.hub.shutdown();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let r = (&mut self.http).await;
        self.housekeeping.abort();
        // Everything already fanned out reaches the cache before it closes.
        self.hub.flush().await;
        if let Some(store) = self.hub.store() {
            store.close().await;
        }
        match r {
            Ok(r) => r.map_err(Into::into),
            Err(e) => Err(crate::Error::Io(std::io::Error::other(e.to_string()))),
        }
    }
}

/// Starts everything the config asks for.
pub async fn start(cfg: Config, clock: Arc<dyn Clock>) -> Result<Running> {
    cfg.validate()?;
    let cache_secs = cfg.cache.duration_secs()?;
    let store = if cache_secs > 0 {
        if cfg.cache.database_url.is_none() {
            std::fs::create_dir_all(&cfg.cache.data_dir)?;
        }
        Some(Store::open_with(&cfg.cache.url(), cfg.cache.shared).await?)
    } else {
        None
    };
    crate::metrics::handle();
    let hub = Hub::new(
        store,
        HubOptions {
            cache_secs,
            broadcast_capacity: cfg.limits.broadcast_capacity,
            keepalive: Duration::from_secs(cfg.http.keepalive_secs.max(1)),
            write_timeout: Duration::from_secs(cfg.limits.subscriber_write_timeout_secs.max(1)),
            queue_bytes: cfg.cache.queue_bytes,
            queue_messages: crate::hub::WRITE_QUEUE,
        },
        clock.clone(),
    );
    let limits = Limits::new(cfg.limits.clone(), clock.clone());
    let size_limit = cfg.limits.message_size_limit;
    let auth = Arc::new(Auth::new(&cfg.auth));
    let (mqtt, broker) = match cfg.mqtt.mode {
        MqttMode::Embedded => {
            let (addrs, gauges) = crate::mqtt::start_embedded(
                &cfg.mqtt,
                size_limit,
                hub.clone(),
                auth.clone(),
                Some(limits.clone()),
            )
            .await?;
            (addrs, Some(gauges))
        }
        MqttMode::External => {
            crate::mqtt::start_external(&cfg.mqtt, size_limit, hub.clone()).await?;
            (MqttAddrs::default(), None)
        }
        MqttMode::Off => (MqttAddrs::default(), None),
    };
    let state = AppState {
        hub: hub.clone(),
        limits: limits.clone(),
        auth,
        behind_proxy: cfg.http.behind_proxy,
        broker: broker.clone(),
    };
    let listener = tokio::net::TcpListener::bind(cfg.http.listen).await?;
    let http_addr = listener.local_addr()?;
    // axum 0.8 leaves Nagle on: a stream's small events would wait for the
    // subscriber's delayed ACK (~40 ms), far over the latency target.
    let listener = axum::serve::ListenerExt::tap_io(listener, |s| {
        let _ = s.set_nodelay(true);
    });
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let router = app(state);
    let http = tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async {
            let _ = stop_rx.await;
        })
        .await
    });
    let hk_hub = hub.clone();
    let housekeeping = tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_secs(60));
        loop {
            t.tick().await;
            limits.housekeeping();
            if let Some(s) = hk_hub.store()
                && let Err(e) = s.prune(hk_hub.clock().now_secs()).await
            {
                tracing::warn!(error = %e, "cache prune failed");
            }
        }
    });
    let bound = Bound {
        http: http_addr,
        mqtt,
    };
    tracing::info!(http = %bound.http, mqtt_v4 = ?bound.mqtt.v4, mqtt_v5 = ?bound.mqtt.v5, mqtt_ws = ?bound.mqtt.ws, "listening");
    Ok(Running {
        bound,
        hub,
        broker,
        stop: Some(stop_tx),
        http,
        housekeeping,
    })
}
