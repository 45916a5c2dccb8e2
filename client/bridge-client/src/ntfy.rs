//! ntfy over HTTP (issue #5, SPEC §6.3): publish a body to a topic, poll,
//! and subscribe to topics over the JSON stream endpoint (`/<t1>,<t2>/json`)
//! with `since=`. Works against `rdv-relay-bridge` and ntfy itself.

use std::io::{BufRead, BufReader, Read};
use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::{Error, Result, validate_topic};

/// Longest line read from a stream: a 64 KiB body base64'd and JSON-escaped,
/// with room to spare. Longer is a malformed answer, not a reason to grow.
pub const MAX_LINE: u64 = 1024 * 1024;
/// Most messages one poll returns (the bridge caps a catch-up at 20,000).
pub const MAX_POLL: usize = 100_000;

/// One ntfy message as subscribers receive it (the fields the agent needs;
/// others, such as ntfy's attachments, are ignored).
///
/// The bridge writes the same JSON from its own type
/// (`rdv_relay_bridge::message::Message`), on purpose not this one: a client
/// reads any ntfy server, so it is lenient (`event` is any string: ntfy.sh
/// also sends `poll_request`, `message_delete`, …; unknown fields are
/// skipped), while the server emits three events from a closed enum and
/// carries an internal ordering key and an OpenAPI schema the agent does not
/// need. The test `wire_types_agree` (tests/ntfy.rs) fails when they drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub id: String,
    /// Unix seconds.
    pub time: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    /// `message`, `open`, `keepalive`, …
    pub event: String,
    pub topic: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The URL to open when the notification is clicked (ntfy's `click`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub click: Option<String>,
    /// `"base64"` when the body was not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
}

impl Message {
    /// The bytes the publisher sent.
    pub fn body(&self) -> Result<Vec<u8>> {
        let m = self.message.as_deref().unwrap_or("");
        match self.encoding.as_deref() {
            None | Some("") => Ok(m.as_bytes().to_vec()),
            Some("base64") => base64::engine::general_purpose::STANDARD
                .decode(m)
                .map_err(|e| Error::Malformed(format!("message {}: {e}", self.id))),
            Some(other) => Err(Error::Malformed(format!(
                "message {}: unknown encoding {other:?}",
                self.id
            ))),
        }
    }

    pub fn is_message(&self) -> bool {
        self.event == "message"
    }
}

/// Where a subscription starts in the server's cache (ntfy's `since=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// Nothing cached: only what is published from now on.
    None,
    /// Everything cached.
    All,
    /// The newest cached message only.
    Latest,
    /// Messages after the one with this id (how an agent resumes).
    Id(String),
    /// Messages at or after this Unix time (seconds).
    Time(u64),
    /// Messages of the last this-many seconds.
    Ago(Duration),
}

impl Since {
    fn param(&self) -> String {
        match self {
            Since::None => "none".into(),
            Since::All => "all".into(),
            Since::Latest => "latest".into(),
            Since::Id(id) => id.clone(),
            Since::Time(t) => t.to_string(),
            Since::Ago(d) => format!("{}s", d.as_secs()),
        }
    }
}

impl FromStr for Since {
    type Err = Error;
    /// `all`, `latest`, `none`, a Unix time, a duration (`10m`, `2h`, `1d`)
    /// or a message id.
    fn from_str(s: &str) -> Result<Since> {
        let bad = || Error::Input(format!("invalid since {s:?}"));
        match s {
            "none" => return Ok(Since::None),
            "all" => return Ok(Since::All),
            "latest" => return Ok(Since::Latest),
            _ => {}
        }
        if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(bad());
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return s.parse().map(Since::Time).map_err(|_| bad());
        }
        if let Some(secs) = rdv_proto::time::parse_duration(s) {
            let secs = u64::try_from(secs).map_err(|_| bad())?;
            return Ok(Since::Ago(Duration::from_secs(secs)));
        }
        Ok(Since::Id(s.to_owned()))
    }
}

/// A client of one ntfy server (or bridge).
#[derive(Debug, Clone)]
pub struct NtfyClient {
    base: String,
    agent: ureq::Agent,
    stream_agent: ureq::Agent,
    token: Option<String>,
}

impl NtfyClient {
    /// A client of the server at `base` (`http://` or `https://`).
    pub fn new(base: &str) -> Result<NtfyClient> {
        let base = base.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://"))
            || base.contains(['?', '#'])
        {
            return Err(Error::Input(format!(
                "server URL {base:?}: want http(s)://host[:port][/path]"
            )));
        }
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build();
        // A stream has a keepalive every 45 s; silence for much longer means
        // the connection is dead.
        let stream_agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .timeout_read(Duration::from_secs(120))
            .build();
        Ok(NtfyClient {
            base: base.to_owned(),
            agent,
            stream_agent,
            token: None,
        })
    }

    /// Sends `Authorization: Bearer <token>` (the bridge's access tokens).
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    fn auth(&self, r: ureq::Request) -> ureq::Request {
        match &self.token {
            Some(t) => r.set("Authorization", &format!("Bearer {t}")),
            None => r,
        }
    }

    /// Publishes `body` on `topic` (`PUT /<topic>`); returns the message as
    /// the server stored it (with its id).
    pub fn publish(&self, topic: &str, body: &[u8]) -> Result<Message> {
        validate_topic(topic)?;
        let url = format!("{}/{topic}", self.base);
        let r = call(self.auth(self.agent.put(&url)).send_bytes(body))?;
        let text = r
            .into_string()
            .map_err(|e| Error::Transport(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| Error::Malformed(e.to_string()))
    }

    fn stream_url(&self, topics: &[&str], since: &Since, poll: bool) -> Result<String> {
        if topics.is_empty() {
            return Err(Error::Input("no topic to subscribe to".into()));
        }
        for t in topics {
            validate_topic(t)?;
        }
        let since = since.param();
        if !since.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::Input(format!("invalid since {since:?}")));
        }
        Ok(format!(
            "{}/{}/json?since={since}{}",
            self.base,
            topics.join(","),
            if poll { "&poll=1" } else { "" }
        ))
    }

    /// The cached messages of `topics` that `since` selects, oldest first
    /// (`poll=1`).
    pub fn poll(&self, topics: &[&str], since: &Since) -> Result<Vec<Message>> {
        let url = self.stream_url(topics, since, true)?;
        let r = call(self.auth(self.agent.get(&url)).call())?;
        let mut lines = Lines::new(r.into_reader());
        let mut out = Vec::new();
        while let Some(m) = lines.next_event()? {
            if m.is_message() {
                if out.len() == MAX_POLL {
                    return Err(Error::Malformed(format!("over {MAX_POLL} messages")));
                }
                out.push(m);
            }
        }
        Ok(out)
    }

    /// Opens a subscription to `topics` and returns once the server has
    /// confirmed it (its `open` event): anything published after this call
    /// returns is delivered. Cached messages `since` selects come first.
    pub fn subscribe(&self, topics: &[&str], since: &Since) -> Result<Subscription> {
        let url = self.stream_url(topics, since, false)?;
        let r = call(self.auth(self.stream_agent.get(&url)).call())?;
        let mut lines = Lines::new(r.into_reader());
        match lines.next_event()? {
            Some(m) if m.event == "open" => Ok(Subscription {
                lines,
                ended: false,
            }),
            Some(m) => Err(Error::Malformed(format!(
                "stream began with {:?}, not open",
                m.event
            ))),
            None => Err(Error::Malformed("stream ended before open".into())),
        }
    }

    /// [`subscribe`](Self::subscribe) as an async stream: the blocking
    /// subscription runs on a thread of its own, which ends at the next
    /// event (at worst the next keepalive) after the stream is dropped.
    pub async fn subscribe_stream(
        &self,
        topics: &[&str],
        since: &Since,
    ) -> Result<tokio_stream::wrappers::ReceiverStream<Result<Message>>> {
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let client = self.clone();
        let topics: Vec<String> = topics.iter().map(|t| (*t).to_owned()).collect();
        let since = since.clone();
        std::thread::Builder::new()
            .name("rdv-ntfy-sub".into())
            .spawn(move || {
                let t: Vec<&str> = topics.iter().map(String::as_str).collect();
                let sub = match client.subscribe(&t, &since) {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                for m in sub {
                    if tx.blocking_send(m).is_err() {
                        return;
                    }
                }
            })?;
        ready_rx
            .await
            .map_err(|_| Error::Transport("subscription thread ended".into()))??;
        Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
    }
}

fn call(r: std::result::Result<ureq::Response, ureq::Error>) -> Result<ureq::Response> {
    match r {
        Ok(r) => Ok(r),
        Err(ureq::Error::Status(status, resp)) => {
            let reason = resp
                .into_string()
                .ok()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_default();
            Err(Error::Refused { status, reason })
        }
        Err(ureq::Error::Transport(t)) => Err(Error::Transport(t.to_string())),
    }
}

/// NDJSON lines of bounded length.
struct Lines {
    r: BufReader<Box<dyn Read + Send + Sync>>,
    buf: Vec<u8>,
}

impl Lines {
    fn new(r: Box<dyn Read + Send + Sync>) -> Lines {
        Lines {
            r: BufReader::new(r),
            buf: Vec::new(),
        }
    }

    /// The next event, or None at the end of the stream.
    fn next_event(&mut self) -> Result<Option<Message>> {
        loop {
            self.buf.clear();
            let n = (&mut self.r)
                .take(MAX_LINE)
                .read_until(b'\n', &mut self.buf)?;
            if n == 0 {
                return Ok(None);
            }
            if self.buf.last() != Some(&b'\n') && n as u64 == MAX_LINE {
                return Err(Error::Malformed(format!("line over {MAX_LINE} bytes")));
            }
            let line = self.buf.trim_ascii();
            if line.is_empty() {
                continue;
            }
            return serde_json::from_slice(line)
                .map(Some)
                .map_err(|e| Error::Malformed(e.to_string()));
        }
    }
}

/// A live subscription: yields `message` events (not `open`/`keepalive`)
/// until the server closes the stream or an error occurs. After an error it
/// ends: what follows a malformed or over-long line is not a line to trust
/// (the rest of a cut line would read as one). Resume with `since=` the id
/// of the last message received.
pub struct Subscription {
    lines: Lines,
    ended: bool,
}

impl Subscription {
    /// Reads an ntfy JSON stream (`/<topics>/json`, one JSON object a line)
    /// from any reader: a saved answer, a pipe from `curl`. Yields what a
    /// live subscription yields, with the same bounds.
    pub fn from_reader(r: impl Read + Send + Sync + 'static) -> Subscription {
        Subscription {
            lines: Lines::new(Box::new(r)),
            ended: false,
        }
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

impl Iterator for Subscription {
    type Item = Result<Message>;
    fn next(&mut self) -> Option<Result<Message>> {
        while !self.ended {
            match self.lines.next_event() {
                Ok(Some(m)) if m.is_message() => return Some(Ok(m)),
                Ok(Some(_)) => continue,
                Ok(None) => self.ended = true,
                Err(e) => {
                    self.ended = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_parses() {
        assert_eq!("all".parse::<Since>().ok(), Some(Since::All));
        assert_eq!("none".parse::<Since>().ok(), Some(Since::None));
        assert_eq!("latest".parse::<Since>().ok(), Some(Since::Latest));
        assert_eq!(
            "1700000000".parse::<Since>().ok(),
            Some(Since::Time(1_700_000_000))
        );
        assert_eq!(
            "10m".parse::<Since>().ok(),
            Some(Since::Ago(Duration::from_secs(600)))
        );
        assert_eq!(
            "AbC123xyz789".parse::<Since>().ok(),
            Some(Since::Id("AbC123xyz789".into()))
        );
        assert!("".parse::<Since>().is_err());
        assert!("a&b=c".parse::<Since>().is_err());
        assert!("99999999999999999999d".parse::<Since>().is_err());
    }

    fn line(id: &str) -> String {
        format!(
            "{{\"id\":\"{id}\",\"time\":1,\"event\":\"message\",\"topic\":\"t\",\"message\":\"hi\"}}\n"
        )
    }

    #[test]
    fn a_subscription_ends_at_its_first_error() {
        // An over-long line, cut at MAX_LINE: its rest is a valid message
        // line, which must not be delivered as if the server had sent it.
        let mut cut = vec![b' '; MAX_LINE as usize];
        cut.extend(line("rest").bytes());
        cut.extend(line("after").bytes());
        let got: Vec<_> = Subscription::from_reader(std::io::Cursor::new(cut)).collect();
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(matches!(got[0], Err(Error::Malformed(_))));

        let bad = format!("{}{{not json\n{}", line("a"), line("b"));
        let got: Vec<_> = Subscription::from_reader(std::io::Cursor::new(bad)).collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].as_ref().map(|m| m.id.as_str()).ok(), Some("a"));
        assert!(got[1].is_err());
    }

    #[test]
    fn a_stream_read_from_a_reader_skips_other_events() {
        let open = "{\"id\":\"o\",\"time\":1,\"event\":\"open\",\"topic\":\"t\"}\n";
        let text = format!("{open}\r\n\n{}  {}", line("a"), line("b").trim_end());
        let ids: Vec<String> = Subscription::from_reader(std::io::Cursor::new(text))
            .map(|m| m.map(|m| m.id))
            .collect::<Result<_>>()
            .expect("messages");
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn urls_refuse_what_would_escape_the_path() {
        let c = NtfyClient::new("http://127.0.0.1:1/").expect("client");
        assert!(c.stream_url(&["a/../b"], &Since::All, false).is_err());
        assert!(c.stream_url(&[], &Since::All, false).is_err());
        assert_eq!(
            c.stream_url(&["a", "b"], &Since::Id("x1".into()), true)
                .expect("url"),
            "http://127.0.0.1:1/a,b/json?since=x1&poll=1"
        );
        assert!(NtfyClient::new("ftp://x").is_err());
    }

    #[test]
    fn base64_bodies_decode() {
        let m: Message = serde_json::from_str(
            r#"{"id":"a","time":1,"event":"message","topic":"t","message":"AP8=","encoding":"base64"}"#,
        )
        .expect("json");
        assert_eq!(m.body().expect("body"), vec![0u8, 0xff]);
    }
}
