//! Canonical JSON (§4.6): the strict parser never panics, and whatever it
//! accepts re-serializes to bytes it accepts again, identically.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdv_proto::canon;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = canon::parse(data, 64 * 1024) {
        let bytes = canon::to_vec(&v).expect("accepted values serialize");
        let again = canon::parse(&bytes, usize::MAX).expect("canonical output parses");
        assert_eq!(canon::to_vec(&again).expect("serialize"), bytes, "canonical form is a fixed point");
        assert!(canon::is_canonical(&bytes, usize::MAX).expect("parse"));
    }
});
