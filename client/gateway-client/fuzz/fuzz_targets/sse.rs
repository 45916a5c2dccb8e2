//! The client's event-stream reader (`sse::EventReader`, the inbox stream
//! of docs/gateway-client.md) over arbitrary bytes, read through a reader
//! that hands them over in small pieces. Checked against a plain model of
//! the same rules over the whole input: the same events and the same error
//! at the same place; every kept line, event name and id within
//! `MAX_LINE_BYTES`, every event's data within `MAX_EVENT_BYTES`; nothing
//! after an error or the end. Run with `scripts/fuzz 120 sse`.
//!
//! Input: the first byte picks the piece size; then bytes as they are,
//! except `0xFF hi lo b`, which is `b` repeated `(hi·256 + lo)·8` times
//! (none: `b` once), so lines and events past the bounds are in reach.
#![no_main]

use std::io::{BufReader, Read};

use libfuzzer_sys::fuzz_target;
use rdv_gateway_client::sse::{EventReader, MAX_EVENT_BYTES, MAX_LINE_BYTES};
use rdv_gateway_client::{Error, StreamEvent};

/// The expanded input stays under this.
const MAX_EXPANDED: usize = 2 * MAX_EVENT_BYTES;

fn expand(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() && out.len() < MAX_EXPANDED {
        if raw[i] == 0xFF && i + 3 < raw.len() {
            let n = (usize::from(raw[i + 1]) << 8 | usize::from(raw[i + 2])) * 8;
            let n = n.max(1).min(MAX_EXPANDED - out.len());
            out.extend(std::iter::repeat_n(raw[i + 3], n));
            i += 4;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    out
}

/// Hands over at most `piece` bytes a read.
struct Pieces<'a> {
    data: &'a [u8],
    piece: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.piece.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn bad(why: &str) -> Error {
    Error::BadAnswer(why.into())
}

/// The event-stream rules over the whole input at once.
fn model(input: &[u8]) -> Vec<Result<StreamEvent, Error>> {
    let mut out = Vec::new();
    let mut rest = input;
    let mut event: Option<String> = None;
    let mut id: Option<String> = None;
    let mut data: Vec<u8> = Vec::new();
    let mut has_data = false;
    while !rest.is_empty() {
        let line = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let l = &rest[..i];
                rest = &rest[i + 1..];
                l.strip_suffix(b"\r").unwrap_or(l)
            }
            None => std::mem::take(&mut rest),
        };
        if line.len() > MAX_LINE_BYTES {
            out.push(Err(bad("event stream line too long")));
            return out;
        }
        if line.is_empty() {
            if has_data {
                match serde_json::from_slice(&data) {
                    Ok(v) => out.push(Ok(StreamEvent {
                        event: event.take().unwrap_or_else(|| "message".into()),
                        id: id.take(),
                        data: v,
                    })),
                    Err(e) => {
                        out.push(Err(bad(&format!("event data: {e}"))));
                        return out;
                    }
                }
                data.clear();
                has_data = false;
            } else {
                event = None;
            }
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let Ok(text) = std::str::from_utf8(line) else {
            out.push(Err(bad("event stream is not UTF-8")));
            return out;
        };
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        match field {
            "event" => event = Some(value.to_string()),
            "id" if !value.contains('\0') => id = Some(value.to_string()),
            "data" => {
                if has_data {
                    data.push(b'\n');
                }
                data.extend_from_slice(value.as_bytes());
                has_data = true;
                if data.len() > MAX_EVENT_BYTES {
                    out.push(Err(bad("event too large")));
                    return out;
                }
            }
            _ => {}
        }
    }
    out
}

fuzz_target!(|raw: &[u8]| {
    let Some((&sel, rest)) = raw.split_first() else {
        return;
    };
    let input = expand(rest);
    let piece = [1, 2, 3, 7, 64, 4096, 1 << 20, usize::MAX][usize::from(sel % 8)];
    let cap = [1, 5, 8192][usize::from(sel / 8 % 3)];
    // Byte-sized reads of an expanded megabyte would only slow the loop.
    let (piece, cap) = if input.len() > 64 * 1024 {
        (piece.max(4096), cap.max(8192))
    } else {
        (piece, cap)
    };
    let src = Pieces {
        data: &input,
        piece,
    };
    let mut reader = EventReader::new(BufReader::with_capacity(cap, src));
    let mut got = Vec::new();
    for r in reader.by_ref() {
        let err = r.is_err();
        got.push(r);
        if err {
            break;
        }
    }
    // Fused: nothing after an error or the end.
    assert!(reader.next().is_none(), "an item after the end");
    assert!(reader.next().is_none(), "an item after the end");
    for e in got.iter().flatten() {
        assert!(
            e.event.len() <= MAX_LINE_BYTES,
            "event name {}",
            e.event.len()
        );
        assert!(e.id.as_ref().is_none_or(|i| i.len() <= MAX_LINE_BYTES));
    }
    let want = model(&input);
    assert_eq!(got.len(), want.len(), "{got:?}\n{want:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
});
