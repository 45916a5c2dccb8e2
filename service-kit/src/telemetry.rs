//! Structured logs on stderr, text for a terminal or JSON for a collector.
//! `RUST_LOG` overrides the service's default filter.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber. `default_filter` applies when
/// `RUST_LOG` is unset (e.g. `"info"`, or `"info,rumqttd=warn"`).
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let sub = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => sub.init(),
        LogFormat::Json => sub.json().init(),
    }
}
