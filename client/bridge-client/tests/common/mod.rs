//! Test harness: a real `rdv-relay-bridge` (its library, on a runtime of its
//! own) on 127.0.0.1:0, and Debian's `mosquitto` on a free loopback port.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rdv_relay_bridge::config::{Config, MqttMode};
use rdv_relay_bridge::message::SystemClock;
use rdv_relay_bridge::serve::{Running, start};

/// A running bridge with a SQLite cache in a temp dir and the embedded
/// MQTT broker.
pub struct Bridge {
    pub http: String,
    pub mqtt: String,
    running: Option<Running>,
    rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

impl Bridge {
    pub fn start() -> Bridge {
        Self::start_with(|_| {})
    }

    pub fn start_with(tweak: impl FnOnce(&mut Config)) -> Bridge {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::default();
        c.http.listen = "127.0.0.1:0".parse().unwrap();
        c.mqtt.mode = MqttMode::Embedded;
        c.mqtt.listen = Some("127.0.0.1:0".parse().unwrap());
        c.cache.database_url = Some(format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("cache.db").display()
        ));
        c.limits.request_burst = 1_000_000;
        c.limits.request_replenish_ms = 1;
        c.limits.global_burst = 1_000_000;
        c.limits.global_requests_per_sec = 1_000_000;
        tweak(&mut c);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = rt.block_on(start(c, Arc::new(SystemClock))).unwrap();
        Bridge {
            http: format!("http://{}", running.bound.http),
            mqtt: running
                .bound
                .mqtt
                .v4
                .map(|a| format!("mqtt://{a}"))
                .unwrap_or_default(),
            running: Some(running),
            rt,
            _dir: dir,
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = self.rt.block_on(r.shutdown());
        }
    }
}

/// Debian's `mosquitto` on a free loopback port, killed when dropped.
pub struct Mosquitto {
    pub url: String,
    pub addr: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

pub fn mosquitto_bin() -> PathBuf {
    for p in ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"] {
        if std::path::Path::new(p).is_file() {
            return PathBuf::from(p);
        }
    }
    panic!("mosquitto is not installed: apt-get install -y mosquitto");
}

impl Mosquitto {
    pub fn start() -> Mosquitto {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
                 max_queued_messages 100000\nlog_dest none\n"
            ),
        )
        .unwrap();
        let mut child = Command::new(mosquitto_bin())
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return Mosquitto {
                    url: format!("mqtt://{addr}"),
                    addr,
                    child,
                    _dir: dir,
                };
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("mosquitto did not listen on {addr}");
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Hang guard for waits (not a timing check).
pub const WAIT: Duration = Duration::from_secs(30);
