//! Envelope open (§6.4) on arbitrary bytes never panics. A JSON object input
//! is also sealed as a payload and must open to exactly itself.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use rdv_proto::envelope::{self, SealParams};
use rdv_proto::time::{Instant, parse_time};
use rdv_proto::{AgentKey, canon};

static ALICE: LazyLock<AgentKey> = LazyLock::new(|| AgentKey::from_seed([1; 32]));
static BOB: LazyLock<AgentKey> = LazyLock::new(|| AgentKey::from_seed([2; 32]));

fn now() -> Instant {
    parse_time("now", "2026-10-08T00:30:00Z").expect("fixed time")
}

fuzz_target!(|data: &[u8]| {
    let _ = envelope::open(data, &BOB, now());
    if let Ok(v @ serde_json::Value::Object(_)) = canon::parse(data, 32 * 1024) {
        let p = SealParams {
            from: &ALICE,
            to: BOB.id(),
            seq: 1,
            prev: None,
            created: now(),
            ttl: "48h",
            ephemeral: [3; 32],
            nonce: [4; 12],
        };
        if let Ok(env) = envelope::seal(&v, &p) {
            let bytes = canon::to_vec(&env).expect("serialize");
            let opened = envelope::open(&bytes, &BOB, now()).expect("own envelope opens");
            assert_eq!(serde_json::Value::Object(opened.payload), v);
        }
    }
});
