//! `rdv bridge pub|sub` (issue #5, SPEC §6.3): try a relay bridge, or any
//! ntfy server or MQTT broker, from a terminal. `--url http(s)://…` speaks
//! the ntfy HTTP API; `--url mqtt://…` speaks MQTT 3.1.1.

use std::io::{Read, Write};

use clap::Subcommand;
use rdv_bridge_client::mqtt::fresh_client_id;
use rdv_bridge_client::{
    DEFAULT_MAX_BODY, MqttPublisher, MqttSubscription, NtfyClient, QoS, Since,
};

use crate::error::{Error, Result};
use crate::terminal::write_line;

#[derive(Debug, Subcommand)]
pub enum BridgeCommand {
    /// Publish one message on a topic; prints the stored message (ntfy) as
    /// one JSON line.
    Pub {
        /// ntfy server (http://, https://) or MQTT broker (mqtt://).
        #[arg(long)]
        url: String,
        /// Access token (ntfy: Authorization: Bearer).
        #[arg(long)]
        token: Option<String>,
        /// The topic: 1 to 64 of [-_A-Za-z0-9].
        topic: String,
        /// The message; `-` (the default) reads it from stdin, at most 64 KiB.
        #[arg(default_value = "-")]
        message: String,
        /// MQTT: ask the broker to retain the message.
        #[arg(long)]
        retain: bool,
    },
    /// Print messages of one or more topics, one JSON object per line.
    Sub {
        /// ntfy server (http://, https://) or MQTT broker (mqtt://).
        #[arg(long)]
        url: String,
        #[arg(long)]
        token: Option<String>,
        /// Topics, comma-separated.
        topics: String,
        /// ntfy: where to start in the cache (all, latest, none, a message
        /// id, a Unix time, or a duration such as 10m).
        #[arg(long)]
        since: Option<String>,
        /// ntfy: print what is cached and exit instead of waiting.
        #[arg(long)]
        poll: bool,
        /// Exit after this many messages.
        #[arg(long)]
        count: Option<u64>,
    },
}

fn carrier(e: rdv_bridge_client::Error) -> Error {
    match e {
        rdv_bridge_client::Error::Topic(_) | rdv_bridge_client::Error::Input(_) => {
            Error::Input(e.to_string())
        }
        other => Error::Carrier(other.to_string()),
    }
}

fn is_mqtt(url: &str) -> bool {
    url.starts_with("mqtt://") || url.starts_with("tcp://")
}

fn read_body(message: &str, stdin: &mut impl Read) -> Result<Vec<u8>> {
    if message != "-" {
        return Ok(message.as_bytes().to_vec());
    }
    let mut buf = Vec::new();
    stdin
        .take(DEFAULT_MAX_BODY as u64 + 1)
        .read_to_end(&mut buf)?;
    if buf.len() > DEFAULT_MAX_BODY {
        return Err(Error::Input(format!(
            "stdin is over {DEFAULT_MAX_BODY} bytes"
        )));
    }
    Ok(buf)
}

/// Runs one command, reading a `-` message from stdin.
pub fn run(cmd: &BridgeCommand, out: &mut impl Write) -> Result<()> {
    run_with(cmd, &mut std::io::stdin().lock(), out)
}

/// Runs one command with the given stdin.
pub fn run_with(cmd: &BridgeCommand, stdin: &mut impl Read, out: &mut impl Write) -> Result<()> {
    match cmd {
        BridgeCommand::Pub {
            url,
            token,
            topic,
            message,
            retain,
        } => {
            rdv_bridge_client::validate_topic(topic).map_err(carrier)?;
            let body = read_body(message, stdin)?;
            if is_mqtt(url) {
                let mut p =
                    MqttPublisher::connect(url, &fresh_client_id("rdv-pub")).map_err(carrier)?;
                p.publish(topic, &body, QoS::AtLeastOnce, *retain)
                    .map_err(carrier)?;
                p.disconnect().map_err(carrier)?;
                return Ok(());
            }
            if *retain {
                return Err(Error::Input("--retain is for mqtt:// URLs".into()));
            }
            let m = client(url, token)?.publish(topic, &body).map_err(carrier)?;
            write_line(out, &m)?;
        }
        BridgeCommand::Sub {
            url,
            token,
            topics,
            since,
            poll,
            count,
        } => {
            let list: Vec<&str> = topics.split(',').collect();
            for t in &list {
                rdv_bridge_client::validate_topic(t).map_err(carrier)?;
            }
            let limit = count.unwrap_or(u64::MAX);
            if limit == 0 {
                return Ok(());
            }
            if is_mqtt(url) {
                if since.is_some() || *poll {
                    return Err(Error::Input(
                        "--since and --poll need an ntfy (http) URL".into(),
                    ));
                }
                let sub = MqttSubscription::connect(
                    url,
                    &fresh_client_id("rdv-sub"),
                    &list,
                    QoS::AtLeastOnce,
                )
                .map_err(carrier)?;
                for (n, p) in (1..).zip(sub) {
                    let p = p.map_err(carrier)?;
                    write_line(out, &p.to_json())?;
                    if n >= limit {
                        break;
                    }
                }
                return Ok(());
            }
            let since: Since = match since {
                Some(s) => s.parse().map_err(carrier)?,
                None if *poll => Since::All,
                None => Since::None,
            };
            let c = client(url, token)?;
            if *poll {
                for m in c
                    .poll(&list, &since)
                    .map_err(carrier)?
                    .iter()
                    .take(usize::try_from(limit).unwrap_or(usize::MAX))
                {
                    write_line(out, m)?;
                }
                return Ok(());
            }
            for (n, m) in (1..).zip(c.subscribe(&list, &since).map_err(carrier)?) {
                let m = m.map_err(carrier)?;
                write_line(out, &m)?;
                if n >= limit {
                    break;
                }
            }
        }
    }
    Ok(())
}

fn client(url: &str, token: &Option<String>) -> Result<NtfyClient> {
    let c = NtfyClient::new(url).map_err(carrier)?;
    Ok(match token {
        Some(t) => c.with_token(t.clone()),
        None => c,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_is_read_for_dash_and_bounded() {
        let mut small: &[u8] = b"hi\n";
        assert_eq!(read_body("-", &mut small).ok(), Some(b"hi\n".to_vec()));
        let mut none: &[u8] = b"ignored";
        assert_eq!(read_body("text", &mut none).ok(), Some(b"text".to_vec()));
        let big = vec![b'x'; DEFAULT_MAX_BODY + 1];
        assert!(read_body("-", &mut &big[..]).is_err());
    }

    #[test]
    fn bad_topics_fail_before_any_network() {
        let mut out = Vec::new();
        let cmd = BridgeCommand::Pub {
            url: "http://127.0.0.1:1".into(),
            token: None,
            topic: "a/b".into(),
            message: "x".into(),
            retain: false,
        };
        assert!(matches!(
            run_with(&cmd, &mut &b""[..], &mut out),
            Err(Error::Input(_))
        ));
        let cmd = BridgeCommand::Sub {
            url: "mqtt://127.0.0.1:1".into(),
            token: None,
            topics: "a,#".into(),
            since: None,
            poll: false,
            count: None,
        };
        assert!(matches!(
            run_with(&cmd, &mut &b""[..], &mut out),
            Err(Error::Input(_))
        ));
    }
}
