//! The embedded broker's MQTT packet readers (vendor/rumqttd, the bytes every
//! MQTT client sends the bridge): `protocol::v4::V4` and `protocol::v5::V5`
//! `read_mut` over arbitrary bytes, packet after packet until an error or
//! the end, each packet written back with `Protocol::write` (and by parts,
//! with `write_head`) and the written bytes read once more. Run with `scripts/fuzz 120 mqtt_packets`.
//!
//! Input: the first byte picks the protocol (bit 0) and the reader's
//! `max_size` (bits 1-2); the rest is the byte stream.
//!
//! Checked: no panic; every packet read consumes bytes (a reader that
//! returns a packet without consuming would spin the broker's read loop);
//! a packet written by parts is the packet written whole; at most
//! `MAX_PACKETS` packets per input, so each run is bounded.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rumqttd::protocol::Protocol;
use rumqttd::protocol::v4::V4;
use rumqttd::protocol::v5::V5;

const MAX_PACKETS: usize = 4096;

fn run(mut proto: impl Protocol, input: &[u8], max_size: usize) {
    let mut stream = BytesMut::from(input);
    for _ in 0..MAX_PACKETS {
        if stream.is_empty() {
            return;
        }
        let before = stream.len();
        let Ok(packet) = proto.read_mut(&mut stream, max_size) else {
            return;
        };
        assert!(
            stream.len() < before,
            "a packet read without consuming bytes: {packet:?}"
        );
        // Written by parts (`write_head`, what the broker's vectored write
        // sends before a payload it sends in place) and whole: the same
        // bytes, or the same refusal.
        let mut parts = BytesMut::new();
        let head = proto.write_head(packet.clone(), &mut parts);
        let mut out = BytesMut::new();
        let whole = proto.write(packet, &mut out);
        assert_eq!(head.is_ok(), whole.is_ok(), "write_head and write disagree");
        if let Ok(Some(payload)) = head {
            parts.extend_from_slice(&payload);
        }
        if whole.is_ok() {
            assert_eq!(parts, out, "write_head + payload differs from write");
        }
        // Written back and read once more; no equality check, only that
        // neither side panics.
        if whole.is_ok() {
            let max = max_size.max(out.len());
            let _ = proto.read_mut(&mut out, max);
        }
    }
}

fuzz_target!(|raw: &[u8]| {
    let Some((&sel, rest)) = raw.split_first() else {
        return;
    };
    let max_size = [16, 300, 10 * 1024, 1 << 20][usize::from(sel >> 1 & 3)];
    if sel & 1 == 0 {
        run(V4, rest, max_size);
    } else {
        run(V5, rest, max_size);
    }
});
