//! Prometheus `/metrics` (issue #5): messages in and out per protocol,
//! subscribers, cache size, refusals. One recorder per process.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide recorder on first use (None if another
/// recorder was installed first).
pub fn handle() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .clone()
}

/// Counts one refusal, by reason.
pub fn refused(reason: &'static str) {
    metrics::counter!("rdv_bridge_refusals_total", "reason" => reason).increment(1);
}
