//! A bounded reader of server-sent events (the HTML "event stream"
//! format) for `GET /v1/inbox/stream`: `event:`, `data:`, `id:` lines, a
//! blank line ends an event, `:` lines are comments (the gateway's
//! `ready` and keep-alives). Every line and every event is bounded before
//! it is kept; the end of the body ends the iteration cleanly.

use std::io::{BufRead, Read};

use crate::error::{Error, Result};
use crate::wire::StreamEvent;

/// Largest line kept, bytes (an item holds one RDV/1 block of at most
/// 64 KiB plus its envelope).
pub const MAX_LINE_BYTES: usize = 256 * 1024;
/// Largest event (all its data lines), bytes.
pub const MAX_EVENT_BYTES: usize = 512 * 1024;

/// Events read from a byte stream, one at a time.
pub struct EventReader<R> {
    inner: R,
    done: bool,
}

impl<R: BufRead> EventReader<R> {
    pub fn new(inner: R) -> Self {
        Self { inner, done: false }
    }

    /// One line without its end, or `None` at the end of the stream.
    fn line(&mut self) -> Result<Option<Vec<u8>>> {
        let mut buf = Vec::new();
        let n = (&mut self.inner)
            .take(MAX_LINE_BYTES as u64 + 2)
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::Transport(e.to_string()))?;
        if n == 0 {
            return Ok(None);
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        } else if buf.len() > MAX_LINE_BYTES {
            return Err(Error::BadAnswer("event stream line too long".into()));
        }
        if buf.len() > MAX_LINE_BYTES {
            return Err(Error::BadAnswer("event stream line too long".into()));
        }
        Ok(Some(buf))
    }

    /// The next complete event; `Ok(None)` when the server closed the
    /// stream (an event cut off by the close is dropped, as the format says).
    pub fn next_event(&mut self) -> Result<Option<StreamEvent>> {
        if self.done {
            return Ok(None);
        }
        let mut event: Option<String> = None;
        let mut id: Option<String> = None;
        let mut data: Vec<u8> = Vec::new();
        let mut has_data = false;
        loop {
            let Some(line) = self.line()? else {
                self.done = true;
                return Ok(None);
            };
            if line.is_empty() {
                if !has_data {
                    event = None;
                    continue;
                }
                let data = serde_json::from_slice(&data)
                    .map_err(|e| Error::BadAnswer(format!("event data: {e}")))?;
                return Ok(Some(StreamEvent {
                    event: event.unwrap_or_else(|| "message".into()),
                    id,
                    data,
                }));
            }
            if line.first() == Some(&b':') {
                continue;
            }
            let text = std::str::from_utf8(&line)
                .map_err(|_| Error::BadAnswer("event stream is not UTF-8".into()))?;
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
                        return Err(Error::BadAnswer("event too large".into()));
                    }
                }
                // `retry` and unknown fields are ignored, as the format says.
                _ => {}
            }
        }
    }
}

impl<R: BufRead> Iterator for EventReader<R> {
    type Item = Result<StreamEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => {
                // One error ends the stream: its framing is lost.
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn events(bytes: &[u8]) -> Vec<Result<StreamEvent>> {
        EventReader::new(bytes).collect()
    }

    #[test]
    fn events_comments_and_a_clean_end() {
        let s = b": ready\n\nevent: probe\nid: 4\ndata: {\"seq\":4}\n\n:keep-alive\n\
                  event: release\r\nid: 5\r\ndata: {\"seq\":\r\ndata: 5}\r\n\r\n";
        let got: Vec<StreamEvent> = events(s).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![
                StreamEvent {
                    event: "probe".into(),
                    id: Some("4".into()),
                    data: json!({"seq": 4})
                },
                StreamEvent {
                    event: "release".into(),
                    id: Some("5".into()),
                    data: json!({"seq": 5})
                },
            ]
        );
    }

    #[test]
    fn an_event_cut_by_the_close_is_dropped() {
        let got = events(b"event: probe\nid: 1\ndata: {\"seq\":1}\n\nevent: probe\ndata: {\"se");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap().id.as_deref(), Some("1"));
        // No data: nothing dispatched, the name does not leak into the next.
        let got = events(b"event: x\n\ndata: {}\n\n");
        assert_eq!(got[0].as_ref().unwrap().event, "message");
    }

    #[test]
    fn bounds_and_bad_data_end_the_stream() {
        let mut long = b"data: ".to_vec();
        long.extend(vec![b'1'; MAX_LINE_BYTES + 10]);
        long.extend(b"\n\n");
        let got = events(&long);
        assert_eq!(got.len(), 1);
        assert!(matches!(got[0], Err(Error::BadAnswer(_))));
        // Many data lines under the line bound, over the event bound.
        let line = format!("data: {}\n", "1".repeat(100_000));
        let mut big = String::new();
        for _ in 0..6 {
            big.push_str(&line);
        }
        big.push('\n');
        assert!(matches!(
            events(big.as_bytes())[0],
            Err(Error::BadAnswer(_))
        ));
        let got = events(b"data: not json\n\ndata: {}\n\n");
        assert_eq!(got.len(), 1, "nothing after an error");
        assert!(matches!(got[0], Err(Error::BadAnswer(_))));
    }
}
