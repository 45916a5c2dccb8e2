//! Every signed document kind (§4.3, §5, §7.8). The first byte picks the
//! kind; the rest is the document. It is verified as given, then re-signed
//! by a fixed key named as its signer, so the shape checks behind the
//! signature are reached too. Nothing may panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use rdv_proto::doc::{DocKind, resign, verify_doc};
use rdv_proto::time::{Instant, parse_time};
use rdv_proto::{AgentKey, canon};
use serde_json::Value;

static KEY: LazyLock<AgentKey> = LazyLock::new(|| AgentKey::from_seed([1; 32]));

const KINDS: [DocKind; 9] = [
    DocKind::Card,
    DocKind::ContactRequest,
    DocKind::ContactGrant,
    DocKind::Revoke,
    DocKind::GroupState,
    DocKind::GroupInvite,
    DocKind::GroupJoin,
    DocKind::GroupLeave,
    DocKind::GroupMsgHeader,
];

fn now() -> Instant {
    parse_time("now", "2026-10-08T01:00:00Z").expect("fixed time")
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let kind = KINDS[sel as usize % KINDS.len()];
    let Ok(mut doc) = canon::parse(rest, 64 * 1024) else { return };
    let _ = verify_doc(kind, &doc, now());
    if let Value::Object(m) = &mut doc {
        let signer = if kind == DocKind::Card { "id" } else { "from" };
        m.insert(signer.into(), Value::String(KEY.id().to_string()));
        if let Ok(signed) = resign(&doc, &KEY) {
            if let Ok(hash) = verify_doc(kind, &signed, now()) {
                assert_eq!(hash.len(), 64);
            }
        }
    }
});
