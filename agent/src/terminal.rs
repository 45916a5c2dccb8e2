//! Output for a person at a terminal: text from the network is shown
//! escaped, so a peer cannot repaint the screen or hide what it sent
//! (SPEC §5.6: peer-written text is display-only).

use std::io::Write;

use serde::Serialize;

use crate::error::{Error, Result};

/// `v` as one line of JSON with every non-ASCII or control character
/// escaped; it parses back to `v`.
pub fn ascii_json(v: &impl Serialize) -> serde_json::Result<String> {
    // Outside strings JSON is printable ASCII already; inside them a
    // `\uXXXX` escape is the same text.
    serde_json::to_string(v).map(|s| printable(&s))
}

/// Writes `v` as one `ascii_json` line and flushes it, so a reader piping
/// the output sees each event as it comes.
pub fn write_line(out: &mut impl Write, v: &impl Serialize) -> Result<()> {
    let text = ascii_json(v).map_err(|e| Error::Input(e.to_string()))?;
    writeln!(out, "{text}")?;
    out.flush()?;
    Ok(())
}

/// Text from the network (an error message, say) with control and
/// non-ASCII characters escaped.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() && !c.is_ascii_control() {
            out.push(c);
        } else {
            // As `\uXXXX` (UTF-16 units), which JSON reads back.
            let mut buf = [0u16; 2];
            for u in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn json_is_ascii_and_parses_back() {
        let v = json!({"greeting": "héllo\u{1b}[2J\u{7f}", "n": 1, "emoji": "\u{1f600}"});
        let s = ascii_json(&v).unwrap();
        assert!(s.is_ascii() && !s.chars().any(|c| c.is_control()), "{s}");
        assert!(s.contains("\\u00e9") && s.contains("\\ud83d\\ude00"), "{s}");
        assert_eq!(serde_json::from_str::<Value>(&s).unwrap(), v);
    }

    #[test]
    fn printable_escapes_controls() {
        let s = printable("bad\u{1b}[2J é");
        assert_eq!(s, "bad\\u001b[2J \\u00e9");
    }
}
