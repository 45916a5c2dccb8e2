//! The whole suite in one process (issue #17): the directory (§4.5), the
//! probe gateway (§5.2.1, §5.2.2), the relay bridge (ntfy + MQTT, §6.3) and
//! a Nostr relay for local use (§6.2), each on its embedded defaults
//! (SQLite, embedded MQTT, mail spooled to files), on loopback, under one
//! data directory. Each service is started through its own library, exactly
//! as its binary starts it; this crate only chooses ports and folders.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

/// Why the suite did not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("directory: {0}")]
    Directory(#[from] rdv_directory::Error),
    #[error("probe gateway: {0}")]
    Gateway(#[from] rdv_probe_gateway::Error),
    #[error("relay bridge: {0}")]
    Bridge(#[from] rdv_relay_bridge::Error),
    #[error("nostr relay: {0}")]
    Relay(#[from] rdv_dev_relay::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Which loopback ports the services take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// Each service's documented default (directory 8480, gateway 8490 and
    /// SMTP 2525, bridge 8080 and MQTT 1883, Nostr relay 7777).
    Defaults,
    /// Free ports chosen by the system (tests; a second suite beside one).
    Ephemeral,
}

impl Ports {
    fn addr(self, default: u16) -> SocketAddr {
        let port = match self {
            Ports::Defaults => default,
            Ports::Ephemeral => 0,
        };
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    }
}

/// What `rdv-suite` is asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// One data directory: `directory/`, `gateway/` (with `outbox/`, the
    /// spooled outbound mail) and `bridge/` under it.
    pub data_dir: PathBuf,
    pub ports: Ports,
}

/// Where each service answers: printed at start and written to
/// `<data-dir>/suite.json`, which `rdv demo --suite` reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Urls {
    pub directory: String,
    pub gateway: String,
    pub gateway_smtp: String,
    /// Where the gateway spools outbound mail (no SMTP relay configured).
    pub gateway_outbox: String,
    pub ntfy: String,
    pub mqtt: String,
    pub nostr: String,
}

/// The running suite.
pub struct Suite {
    pub urls: Urls,
    directory: (rdv_directory::server::Running, rdv_directory::store::Store),
    gateway: (
        rdv_probe_gateway::server::Running,
        rdv_probe_gateway::store::Store,
    ),
    bridge: rdv_relay_bridge::serve::Running,
    relay: rdv_dev_relay::LocalRelay,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Starts every service; on any failure, what already started is stopped.
pub async fn start(opts: &Options) -> Result<Suite, Error> {
    let d = &opts.data_dir;
    std::fs::create_dir_all(d).map_err(io(d))?;

    let dir_cfg = rdv_directory::config::Config {
        listen: opts.ports.addr(8480),
        data_dir: d.join("directory"),
        ..Default::default()
    };
    let directory =
        rdv_directory::server::open(dir_cfg, Arc::new(rdv_directory::clock::SystemClock)).await?;

    let gw_cfg = rdv_probe_gateway::config::Config {
        http_listen: opts.ports.addr(8490),
        smtp_listen: Some(opts.ports.addr(2525)),
        data_dir: d.join("gateway"),
        // The local relay is ws://: cards naming it are admitted here only.
        dev_allow_ws_relays: true,
        ..Default::default()
    };
    let outbox = gw_cfg.outbox_path();
    let gateway = match rdv_probe_gateway::server::open(
        gw_cfg,
        Arc::new(rdv_probe_gateway::clock::SystemClock),
    )
    .await
    {
        Ok(g) => g,
        Err(e) => {
            stop_directory(directory).await;
            return Err(e.into());
        }
    };

    let mut br_cfg = rdv_relay_bridge::config::Config::default();
    br_cfg.http.listen = opts.ports.addr(8080);
    br_cfg.mqtt.listen = Some(opts.ports.addr(1883));
    br_cfg.cache.data_dir = d.join("bridge");
    let bridge = match rdv_relay_bridge::serve::start(
        br_cfg,
        Arc::new(rdv_relay_bridge::message::SystemClock),
    )
    .await
    {
        Ok(b) => b,
        Err(e) => {
            stop_directory(directory).await;
            stop_gateway(gateway).await;
            return Err(e.into());
        }
    };

    let relay = match rdv_dev_relay::start(opts.ports.addr(7777)).await {
        Ok(r) => r,
        Err(e) => {
            stop_directory(directory).await;
            stop_gateway(gateway).await;
            let _ = bridge.shutdown().await;
            return Err(e.into());
        }
    };

    let b = &bridge.bound;
    let urls = Urls {
        directory: format!("http://{}", directory.0.addr),
        gateway: format!("http://{}", gateway.0.addr),
        gateway_smtp: gateway
            .0
            .smtp_addr
            .map(|a| format!("smtp://{a}"))
            .unwrap_or_default(),
        gateway_outbox: outbox.display().to_string(),
        ntfy: format!("http://{}", b.http),
        mqtt: b.mqtt.v4.map(|a| format!("mqtt://{a}")).unwrap_or_default(),
        nostr: relay
            .url()
            .await
            .to_string()
            .trim_end_matches('/')
            .to_string(),
    };
    Ok(Suite {
        urls,
        directory,
        gateway,
        bridge,
        relay,
    })
}

async fn stop_directory(
    (running, store): (rdv_directory::server::Running, rdv_directory::store::Store),
) {
    if let Err(e) = running.shutdown().await {
        tracing::warn!(error = %e, "directory shutdown");
    }
    store.close().await;
}

async fn stop_gateway(
    (running, store): (
        rdv_probe_gateway::server::Running,
        rdv_probe_gateway::store::Store,
    ),
) {
    if let Err(e) = running.shutdown().await {
        tracing::warn!(error = %e, "gateway shutdown");
    }
    store.close().await;
}

impl Suite {
    /// Writes `suite.json` (the URLs) into `dir`, for `rdv demo --suite`.
    pub fn write_urls(&self, dir: &Path) -> Result<PathBuf, Error> {
        let path = dir.join("suite.json");
        let text = serde_json::to_string_pretty(&self.urls).unwrap_or_default() + "\n";
        std::fs::write(&path, text).map_err(io(&path))?;
        Ok(path)
    }

    /// Stops every service, each draining what it has in flight: the relay
    /// first (agents stop sending), then the bridge, gateway and directory.
    pub async fn shutdown(self) -> Result<(), Error> {
        self.relay.shutdown();
        let bridge = self.bridge.shutdown().await;
        stop_gateway(self.gateway).await;
        stop_directory(self.directory).await;
        bridge.map_err(Into::into)
    }
}
