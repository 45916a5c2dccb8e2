//! The gate (§5.2.1), raw message in, verdict out: `Gate::run`, the one
//! assembly production runs (screening, trusted-mode
//! Authentication-Results, the in-memory limiter of `limiter`), for a mailbox and for
//! its gateway address (forwarding confirmations). Must never panic. Seed
//! with probe-gateway/tests/corpus/*.eml:
//!   cd probe-gateway/fuzz && mkdir -p corpus/gate && cp ../tests/corpus/*.eml corpus/gate/
//!   RUSTC_BOOTSTRAP=1 cargo fuzz run gate -- -max_total_time=300
#![no_main]

use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rdv_probe_gateway::{auth, headers};
use rdv_probe_gateway::gate::{self, Arrival, AuthBackend, Gate, Via};
use rdv_probe_gateway::limits::{LimitConfig, Limits};
use rdv_proto::{Address, AgentKey};

fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()
    })
    .as_ref()
}

fuzz_target!(|raw: &[u8]| {
    let (Some(rt), Ok(mailbox)) = (runtime(), Address::parse("john@doe.test")) else {
        return;
    };
    let agent = AgentKey::from_seed([9; 32]).id().clone();
    let arrival = Arrival {
        mailbox: &mailbox,
        agent: Some(&agent),
        max_bytes: rdv_proto::consts::MAIL_MAX_BYTES,
    };
    let Ok(now) = time::OffsetDateTime::from_unix_timestamp(1_791_460_800) else {
        return;
    };
    let ids = vec!["mx.trusted.test".to_string()];
    // Authentication-Results parsing runs on every input, screened or not.
    if let Ok(msg) = headers::parse(raw, arrival.max_bytes) {
        let _ = auth::trusted(&msg, &ids, "sender.test");
    }
    let backend = AuthBackend::Trusted(ids);
    let limits = Mutex::new(Limits::new(LimitConfig::default()));
    let r = rt.block_on(gate::run(raw, &arrival, None, &backend, &limits, now));
    let _ = gate::report(&r);
    let at_gateway = Via {
        gateway_address: true,
        ..Via::default()
    };
    let _ = rt.block_on(Gate::new(&backend, &limits).run(raw, &arrival, at_gateway, now));
});
