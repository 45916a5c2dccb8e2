//! Nostr event parsing (§6.2) on arbitrary bytes never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rdv_proto::nostr_event::parse_event(data);
});
