//! The RDV/1 mail block (§5.2.1, §5.2.2): a raw RFC 5322 message in, the one
//! block out, then its payload parsed; and the X-Rdv-* header value parser.
//! Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdv_proto::mailblock::{extract_block, parse_header_value, parse_payload};
use rdv_proto::time::parse_time;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = extract_block(data) {
        let now = parse_time("now", "2026-10-08T01:00:00Z").expect("fixed time");
        let _ = parse_payload(&v, now, false);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = parse_header_value(s);
    }
});
