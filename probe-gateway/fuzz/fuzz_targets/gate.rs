//! The gate (§5.2.1), raw message in, verdict out: screening, trusted-mode
//! Authentication-Results and the limiter. Must never panic. Seed with
//! probe-gateway/tests/corpus/*.eml:
//!   cd probe-gateway/fuzz && mkdir -p corpus/gate && cp ../tests/corpus/*.eml corpus/gate/
//!   RUSTC_BOOTSTRAP=1 cargo fuzz run gate -- -max_total_time=300
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdv_probe_gateway::auth;
use rdv_probe_gateway::gate::{self, Arrival};
use rdv_probe_gateway::limits::{LimitConfig, Limits};
use rdv_proto::{Address, AgentKey};

fuzz_target!(|raw: &[u8]| {
    let Ok(mailbox) = Address::parse("john@doe.test") else {
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
    let _ = auth::trusted(raw, &ids, "sender.test");
    if let Ok(s) = gate::screen(raw, &arrival, now) {
        let verdicts = auth::trusted(raw, &ids, &s.from_domain);
        let mut limits = Limits::new(LimitConfig::default());
        let r = gate::admit(s, verdicts, &arrival, &mut limits, now);
        let _ = gate::report(&r);
    }
});
