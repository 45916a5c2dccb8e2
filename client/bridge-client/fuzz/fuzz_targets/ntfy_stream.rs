//! The ntfy JSON stream reader (`Subscription`, what `rdv bridge sub` and
//! the agent read from a server that may be hostile) over arbitrary bytes,
//! handed over in small pieces. Checked against a plain model of the same
//! rules over the whole input: the same messages, then the same error at
//! the same place or the same end; a line of `MAX_LINE` bytes or more is an
//! error; nothing after an error. Each message's `body()` is computed and,
//! without an encoding, is its text. `Since` parses the input's first line
//! without panicking, and an id it keeps is short and alphanumeric. Run
//! with `scripts/fuzz 120 ntfy_stream`.
//!
//! Input: the first byte picks the piece size; then bytes as they are,
//! except `0xFF hi lo b`, which is `b` repeated `(hi·256 + lo)·64` times
//! (none: `b` once), so lines past `MAX_LINE` are in reach.
#![no_main]

use std::io::Read;

use libfuzzer_sys::fuzz_target;
use rdv_bridge_client::ntfy::MAX_LINE;
use rdv_bridge_client::{Message, Since, Subscription};

/// The expanded input stays under this.
const MAX_EXPANDED: usize = 2 * MAX_LINE as usize + 4096;

fn expand(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() && out.len() < MAX_EXPANDED {
        if raw[i] == 0xFF && i + 3 < raw.len() {
            let n = (usize::from(raw[i + 1]) << 8 | usize::from(raw[i + 2])) * 64;
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

/// Hands over at most `piece` bytes a read, from an owned copy (the reader
/// must be `'static`).
struct Pieces {
    data: Vec<u8>,
    at: usize,
    piece: usize,
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.piece.min(buf.len()).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// What the stream holds: messages, then an error or the end.
fn model(input: &[u8]) -> (Vec<Message>, bool) {
    let mut out = Vec::new();
    for line in input.split(|&b| b == b'\n') {
        if line.len() >= MAX_LINE as usize {
            return (out, true);
        }
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Message>(line) {
            Ok(m) if m.is_message() => out.push(m),
            Ok(_) => {}
            Err(_) => return (out, true),
        }
    }
    (out, false)
}

fuzz_target!(|raw: &[u8]| {
    let Some((&sel, rest)) = raw.split_first() else {
        return;
    };
    let input = expand(rest);
    let piece = [1, 2, 3, 7, 64, 4096, 1 << 20, usize::MAX][usize::from(sel % 8)];
    // Byte-sized reads of an expanded megabyte would only slow the loop.
    let piece = if input.len() > 64 * 1024 {
        piece.max(4096)
    } else {
        piece
    };

    if let Some(first) = input.split(|&b| b == b'\n').next()
        && let Ok(text) = std::str::from_utf8(first)
        && let Ok(Since::Id(id)) = text.parse::<Since>()
    {
        assert!(id.len() <= 20 && id.bytes().all(|b| b.is_ascii_alphanumeric()));
    }

    let (want, want_err) = model(&input);
    let sub = Subscription::from_reader(Pieces {
        data: input,
        at: 0,
        piece,
    });
    let mut got = Vec::new();
    let mut got_err = false;
    for r in sub {
        assert!(!got_err, "an item after an error");
        match r {
            Ok(m) => got.push(m),
            Err(_) => got_err = true,
        }
    }
    assert_eq!(got, want);
    assert_eq!(got_err, want_err);
    for m in &got {
        let body = m.body();
        if m.encoding.is_none() {
            let text = m.message.as_deref().unwrap_or("");
            assert_eq!(body.ok().as_deref(), Some(text.as_bytes()));
        }
    }
});
