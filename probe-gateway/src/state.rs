//! The service's state (issue #4): configuration, store, clock, entropy,
//! mailer, authentication, cookie and address keys, and the SSE notices;
//! what every adapter (`http`, `smtp`, `flows`, `delivery`) works on.

use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::sync::broadcast;

use crate::address_key::AddressKey;
use crate::clock::{Clock, Entropy};
use crate::config::Config;
use crate::cookie::CookieKeys;
use crate::gate::{AuthBackend, Gate};
use crate::limiter::StoreLimiter;
use crate::mailer::OutboundMail;
use crate::store::Store;

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) cfg: Config,
    pub(crate) store: Store,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) entropy: Arc<dyn Entropy>,
    pub(crate) mailer: Arc<dyn OutboundMail>,
    pub(crate) backend: AuthBackend,
    /// The gate's dedupe and windows, in the store.
    pub(crate) limiter: StoreLimiter,
    pub(crate) cookies: CookieKeys,
    /// Keys stored addresses and opt-out tokens (`address_key_file`);
    /// none when the file could not be read ([`AppState::try_new`] refuses).
    pub(crate) address_key: Option<AddressKey>,
    /// Agent ids with new messages, for the SSE streams.
    pub(crate) notify: broadcast::Sender<String>,
    pub(crate) metrics: Option<PrometheusHandle>,
}

/// What the service is built from; time, randomness, mail and DNS
/// (inside `backend`) are injected.
pub struct Deps {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    pub entropy: Arc<dyn Entropy>,
    pub mailer: Arc<dyn OutboundMail>,
    pub backend: AuthBackend,
    pub cookies: CookieKeys,
}

impl AppState {
    /// The state of `cfg`, reading the address key file (created when
    /// absent); an unreadable key is an error.
    pub fn try_new(cfg: Config, d: Deps) -> Result<Self, crate::Error> {
        let key = crate::secret_files::load_address_key(&cfg, d.entropy.as_ref())?;
        Ok(Self::build(cfg, d, Some(key)))
    }

    /// [`AppState::try_new`] that logs an unreadable address key instead;
    /// the flows that need it then answer 500 `internal`.
    pub fn new(cfg: Config, d: Deps) -> Self {
        let key = match crate::secret_files::load_address_key(&cfg, d.entropy.as_ref()) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::error!(error = %e, "address key unavailable");
                None
            }
        };
        Self::build(cfg, d, key)
    }

    fn build(cfg: Config, d: Deps, address_key: Option<AddressKey>) -> Self {
        let (notify, _) = broadcast::channel(256);
        Self {
            inner: Arc::new(Inner {
                limiter: StoreLimiter {
                    store: d.store.clone(),
                    limits: cfg.limits,
                },
                cfg,
                store: d.store,
                clock: d.clock,
                entropy: d.entropy,
                mailer: d.mailer,
                backend: d.backend,
                cookies: d.cookies,
                address_key,
                notify,
                metrics: metrics_handle(),
            }),
        }
    }

    /// The gate of this service: the configured authentication, the
    /// store's limiter and the switches of the configuration.
    pub(crate) fn gate(&self) -> Gate<'_, StoreLimiter> {
        let s = &self.inner;
        Gate {
            backend: &s.backend,
            limiter: &s.limiter,
            allow_ws: s.cfg.dev_allow_ws_relays,
            trusted_received_by: &s.cfg.trusted_received_by,
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    pub fn now(&self) -> time::OffsetDateTime {
        self.inner.clock.now()
    }
}

/// The process-wide Prometheus recorder (installed once).
fn metrics_handle() -> Option<PrometheusHandle> {
    static H: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    H.get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .clone()
}
