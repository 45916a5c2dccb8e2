//! `rdv gateway …` (issue #4, SPEC §5.2.1, §5.2.2): try a probe gateway
//! from a terminal: prove a mailbox, read what arrived, send probes,
//! answer them, echo a SYN-ACK, send invites, and pipe mail in. Until the
//! agent has a key store, the agent's key is read from `--seed-file` (64
//! hex digits), as `rdv directory` does. Output is JSON on stdout.

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};
use rand_core::RngCore;
use rdv_gateway_client::{GatewayClient, InboxItem, InviteAnswer, ItemKind};
use rdv_proto::consts::{MAIL_MAX_BYTES, TIERS};
use rdv_proto::doc::card::{Card, CardBuilder};
use rdv_proto::doc::grant::{GrantBuilder, GrantRef, Scope};
use rdv_proto::doc::request::RequestBuilder;
use rdv_proto::encoding::base32;
use rdv_proto::mailblock::{BlockPayload, Invite, ProbeEcho, parse_payload};
use rdv_proto::time::Instant;
use rdv_proto::{Address, AgentKey};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::terminal::{printable, write_line as line};

/// The default greeting of a probe (display-only text for the other side).
const DEFAULT_GREETING: &str = "My agent would like to connect with yours.";

/// The gateway and the agent key, common to every command.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// The gateway's base URL, e.g. https://gw.example.
    #[arg(long, env = "RDV_GW_URL", global = true)]
    pub gateway: Option<String>,
    /// File holding the agent's Ed25519 seed as 64 hex digits. Every
    /// command but `inbound` signs with it.
    #[arg(long, env = "RDV_GW_SEED_FILE", global = true)]
    pub seed_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: GatewayCommand,
}

/// Where the agent's own card comes from, for commands that send it.
#[derive(Debug, Args)]
pub struct CardArgs {
    /// The agent's signed card (JSON file). Without it, a minimal card is
    /// built and signed from --relay.
    #[arg(long, conflicts_with = "relay")]
    pub card: Option<PathBuf>,
    /// A Nostr relay (wss://…) for a card built here; repeat for several.
    #[arg(long)]
    pub relay: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Ask the gateway to receive probes for one of your mailboxes. It
    /// mails a short code to that address; type it into `verify`.
    Register {
        /// Your email address.
        #[arg(long)]
        mailbox: String,
    },
    /// Prove the mailbox with the code the gateway mailed you. Prints the
    /// integration token (shown once: keep it; your mail rule uses it) and
    /// the gateway's address for the mailbox.
    Verify {
        #[arg(long)]
        mailbox: String,
        /// The code from the gateway's mail.
        #[arg(long)]
        code: String,
    },
    /// List the mailboxes this key proved, with their gateway addresses.
    Mailboxes,
    /// Print what arrived (probes, answers, invites, releases, forwarding
    /// confirmations), one JSON object per line, oldest first. A forwarding
    /// confirmation's code is also told on stderr, in words.
    Inbox {
        /// Only items after this sequence number.
        #[arg(long)]
        after: Option<u64>,
        /// At most this many items (the gateway caps it).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Wait for new items and print each as one JSON line
    /// ({"event","id","data"}) until interrupted or the gateway closes; a
    /// forwarding confirmation's code is also told on stderr, in words.
    Listen {
        /// Start after this sequence number (default: everything queued).
        #[arg(long)]
        after: Option<u64>,
    },
    /// Ask whether someone's mailbox has an agent: the gateway mails them
    /// a signed contact request (a probe, SPEC §5.2.1). Their agent, if
    /// any, answers; silence means none (or no interest).
    SendProbe {
        /// Their email address.
        #[arg(long)]
        to: String,
        /// Which of your proved mailboxes it is sent from (default: the
        /// gateway picks your first).
        #[arg(long)]
        from_mailbox: Option<String>,
        /// A short greeting they may read (plain text, shown as data).
        #[arg(long)]
        greeting: Option<String>,
        #[command(flatten)]
        card: CardArgs,
    },
    /// Say yes to the probe at --seq: signs a contact grant (SPEC §5.3)
    /// and the gateway mails it back with the mailbox cookie (SYN-ACK).
    Answer {
        /// The probe's sequence number (from `inbox`).
        #[arg(long)]
        seq: u64,
        /// How you classify the requester: spouse, family, friend,
        /// colleague, business or stranger.
        #[arg(long, default_value = "stranger")]
        tier: String,
        /// What the requester may do, as a JSON object (default: may
        /// write to you, no meetings, at most 20 messages a day).
        #[arg(long)]
        scope: Option<String>,
        #[command(flatten)]
        card: CardArgs,
    },
    /// On the probed side: release the probe at --seq with the cookie the
    /// requester echoed (the ACK, SPEC §5.2.1), ending the pending state.
    Ack {
        #[arg(long)]
        seq: u64,
        #[arg(long)]
        cookie: String,
    },
    /// On the requesting side: confirm the answer (SYN-ACK) at --seq by
    /// mailing back its cookie, signed (the ACK, SPEC §5.2.1).
    SendAck {
        /// The SYN-ACK's sequence number (from `inbox`).
        #[arg(long)]
        seq: u64,
    },
    /// Invite someone whose mailbox showed no agent (SPEC §5.2.2): the
    /// gateway mails a friendly note with a signed, single-use invitation.
    SendInvite {
        #[arg(long)]
        to: String,
        /// Where you got the address (SPEC §5.2.2), e.g. "the club's
        /// member list": stated in the invitation, whatever the note says.
        #[arg(long)]
        source: String,
        /// A personal line added to the invitation.
        #[arg(long)]
        note: Option<String>,
        #[arg(long)]
        from_mailbox: Option<String>,
    },
    /// Record your answer to an invite you received.
    InviteStatus {
        /// The invite's id (from `inbox`).
        #[arg(long)]
        id: String,
        /// accepted or declined.
        #[arg(long)]
        status: InviteAnswer,
    },
    /// For mail rules (procmail, Sieve pipes): read one raw message on
    /// stdin and hand it to the gateway with the integration token.
    Inbound {
        /// The token `verify` printed (the environment keeps it off the
        /// process list).
        #[arg(long, env = "RDV_GW_TOKEN", hide_env_values = true)]
        token: String,
    },
}

fn gw_err(e: rdv_gateway_client::Error) -> Error {
    use rdv_gateway_client::Error as G;
    match e {
        G::Refused {
            status,
            code,
            message,
            retry_after,
        } => {
            let retry = retry_after
                .map(|s| format!(" (retry after {s} s)"))
                .unwrap_or_default();
            // Gate refusals of `inbound` carry a code and no message.
            let message = if message.is_empty() {
                String::new()
            } else {
                format!(": {}", printable(&message))
            };
            Error::Carrier(format!(
                "gateway refused: {} ({status}){message}{retry}",
                printable(&code)
            ))
        }
        G::Input(m) => Error::Input(m),
        G::Proto(p) => Error::Proto(p),
        other => Error::Carrier(format!("gateway: {}", printable(&other.to_string()))),
    }
}

fn url(args: &GatewayArgs) -> Result<&str> {
    args.gateway
        .as_deref()
        .ok_or_else(|| Error::Input("--gateway URL (or RDV_GW_URL) is required".into()))
}

fn client(args: &GatewayArgs) -> Result<GatewayClient> {
    let path = args
        .seed_file
        .as_ref()
        .ok_or_else(|| Error::Input("--seed-file PATH (or RDV_GW_SEED_FILE) is required".into()))?;
    Ok(GatewayClient::new(
        url(args)?,
        crate::home::read_seed_file(path)?,
    ))
}

fn email(s: &str) -> Result<Address> {
    Address::parse_email(s).map_err(|_| Error::Input(format!("{s:?} is not an email address")))
}

/// The agent's card: the file given (verified, this key's), or a minimal
/// card signed now from the relays, listing `addresses` (§4.3: a probe
/// answer's card must list the probed address, §5.3).
fn own_card(c: &CardArgs, key: &AgentKey, now: Instant, addresses: &[Address]) -> Result<Value> {
    if let Some(path) = &c.card {
        let doc =
            rdv_proto::canon::parse(&std::fs::read(path)?, rdv_proto::consts::CARD_MAX_BYTES)?;
        let card = Card::verify(&doc, now, false)?;
        if &card.id != key.id() {
            return Err(Error::Input("the card is not this agent's".into()));
        }
        if let Some(a) = addresses.iter().find(|a| !card.claims(a)) {
            return Err(Error::Input(format!(
                "the card does not list {} (a probe answer's card must)",
                a.canon()
            )));
        }
        return Ok(doc);
    }
    if c.relay.is_empty() {
        return Err(Error::Input(
            "give --card FILE, or --relay wss://… to build a card".into(),
        ));
    }
    let mut b = CardBuilder::new(now, c.relay.clone());
    b.addresses = addresses.to_vec();
    Ok(b.sign(key)?)
}

/// The inbox item at `seq` (one of this key's), or an input error.
fn item_at(c: &GatewayClient, seq: u64) -> Result<InboxItem> {
    let page = c
        .inbox(Some(seq.saturating_sub(1)), Some(1))
        .map_err(gw_err)?;
    page.items
        .into_iter()
        .find(|i| i.seq == seq)
        .ok_or_else(|| Error::Input(format!("no inbox item at seq {seq}")))
}

/// The line a human needs for an item only they can act on: a forwarding
/// confirmation's code goes into the provider's settings, not to an agent
/// (docs/probe-gateway.md "Forwarding confirmations"). Network text is
/// escaped (§5.6).
fn notice(item: &InboxItem) -> Option<String> {
    let f = item.forwarding_confirmation()?;
    let provider = match f.provider {
        Some("gmail") | None => "Gmail".to_string(),
        Some(p) => printable(p),
    };
    Some(format!(
        "{provider} forwarding confirmation for {}: code {}; enter it in {provider}'s \
         forwarding settings",
        printable(f.mailbox),
        printable(f.code)
    ))
}

/// Prints [`notice`] on stderr: stdout stays one JSON item per line.
fn tell(item: &InboxItem) {
    if let Some(n) = notice(item) {
        eprintln!("rdv: {n}");
    }
}

/// Runs one command, reading `inbound`'s message from stdin.
pub fn run(args: &GatewayArgs, out: &mut impl Write) -> Result<()> {
    run_with(args, &mut std::io::stdin().lock(), out)
}

/// Runs one command with the given stdin.
pub fn run_with(args: &GatewayArgs, stdin: &mut impl Read, out: &mut impl Write) -> Result<()> {
    if let GatewayCommand::Inbound { token } = &args.command {
        let mut raw = Vec::new();
        stdin
            .take(MAIL_MAX_BYTES as u64 + 1)
            .read_to_end(&mut raw)?;
        if raw.len() > MAIL_MAX_BYTES {
            return Err(Error::Input(format!(
                "the message is over {MAIL_MAX_BYTES} bytes"
            )));
        }
        let report = rdv_gateway_client::inbound_with(url(args)?, token, &raw).map_err(gw_err)?;
        return line(out, &report);
    }
    let c = client(args)?;
    let now = c.now();
    match &args.command {
        GatewayCommand::Register { mailbox } => {
            line(out, &c.register(mailbox).map_err(gw_err)?)?;
        }
        GatewayCommand::Verify { mailbox, code } => {
            let v = c.verify(mailbox, code).map_err(gw_err)?;
            line(
                out,
                &json!({
                    "mailbox": v.mailbox,
                    "agent": v.agent,
                    "token": v.token,
                    "gateway_address": v.gateway_address,
                }),
            )?;
            eprintln!(
                "rdv: mailbox proved. The token above is shown once: store it where your \
                 mail rule can read it. Route mail whose subject starts with [RDV-PROBE], \
                 [RDV-PROBE-ACK], [RDV-ACK] or [RDV-INVITE] to `rdv gateway inbound` \
                 (RDV_GW_TOKEN=<token>){}; see docs/mail-rules.md.",
                v.gateway_address
                    .as_deref()
                    .map(|a| format!(" or forward it to {}", printable(a)))
                    .unwrap_or_default()
            );
        }
        GatewayCommand::Mailboxes => line(out, &c.mailboxes().map_err(gw_err)?)?,
        GatewayCommand::Inbox { after, limit } => {
            for item in c.inbox(*after, *limit).map_err(gw_err)?.items {
                line(out, &item)?;
                tell(&item);
            }
        }
        GatewayCommand::Listen { after } => {
            for ev in c.stream(*after).map_err(gw_err)? {
                let ev = ev.map_err(gw_err)?;
                line(
                    out,
                    &json!({"event": ev.event, "id": ev.id, "data": ev.data}),
                )?;
                if let Ok(item) = ev.item() {
                    tell(&item);
                }
            }
        }
        GatewayCommand::SendProbe {
            to,
            from_mailbox,
            greeting,
            card,
        } => {
            let to = email(to)?;
            let request = RequestBuilder {
                id: c.fresh_uuid(),
                to_hint: Some(to.canon().to_string()),
                card: own_card(card, c.key(), now, &[])?,
                greeting: greeting.clone().unwrap_or_else(|| DEFAULT_GREETING.into()),
                capabilities_offered: vec!["a2a/0.3".into()],
                ts: now,
            }
            .sign(c.key())?;
            let sent = c
                .send_probe(to.canon(), &request, from_mailbox.as_deref())
                .map_err(gw_err)?;
            line(out, &json!({"request_id": request["id"], "sent": sent}))?;
        }
        GatewayCommand::Answer {
            seq,
            tier,
            scope,
            card,
        } => {
            if !TIERS.contains(&tier.as_str()) {
                return Err(Error::Input(format!(
                    "--tier must be one of {}",
                    TIERS.join(", ")
                )));
            }
            let scope = match scope {
                Some(s) => serde_json::from_str::<Value>(s)
                    .map_err(|e| Error::Input(format!("--scope: {e}")))?,
                None => {
                    json!({"may_initiate": true, "may_propose_meetings": false, "max_frequency": "20/day"})
                }
            };
            Scope::parse(&scope, "scope")?;
            let item = item_at(&c, *seq)?;
            if item.kind != ItemKind::Probe {
                return Err(Error::Input(format!(
                    "the item at seq {seq} is not a probe"
                )));
            }
            let BlockPayload::Probe(probe) = parse_payload(&item.payload, now, false)? else {
                return Err(Error::Input(format!(
                    "the item at seq {seq} is not a probe"
                )));
            };
            let mailbox = email(item.mailbox.as_deref().unwrap_or_default())?;
            let grant = GrantBuilder {
                id: c.fresh_uuid(),
                to: probe.request.from.clone(),
                reference: GrantRef::Request(probe.request.id.clone()),
                card: own_card(card, c.key(), now, &[mailbox])?,
                tier: tier.clone(),
                scope,
                expires: None,
                ts: now,
            }
            .sign(c.key())?;
            let sent = c.syn_ack(*seq, &grant).map_err(gw_err)?;
            line(out, &json!({"grant_id": grant["id"], "sent": sent}))?;
        }
        GatewayCommand::Ack { seq, cookie } => {
            line(out, &c.ack(*seq, cookie).map_err(gw_err)?)?;
        }
        GatewayCommand::SendAck { seq } => {
            let item = item_at(&c, *seq)?;
            if item.kind != ItemKind::ProbeAck {
                return Err(Error::Input(format!(
                    "the item at seq {seq} is not an answer (SYN-ACK)"
                )));
            }
            let BlockPayload::ProbeAck(ack) = parse_payload(&item.payload, now, false)? else {
                return Err(Error::Input(format!(
                    "the item at seq {seq} is not an answer (SYN-ACK)"
                )));
            };
            if &ack.grant.to != c.key().id() {
                return Err(Error::Input(
                    "the answer is not addressed to this agent".into(),
                ));
            }
            let GrantRef::Request(request_ref) = &ack.grant.reference else {
                return Err(Error::Input("the answer does not name a probe".into()));
            };
            let echo = ProbeEcho::build(request_ref, &ack.grant.from, &ack.cookie, now, c.key())?;
            line(out, &c.send_ack(*seq, &echo).map_err(gw_err)?)?;
        }
        GatewayCommand::SendInvite {
            to,
            source,
            note,
            from_mailbox,
        } => {
            let to = email(to)?;
            let mut t = [0u8; 20];
            rand_core::OsRng.fill_bytes(&mut t);
            let token = base32(&t);
            let id = c.fresh_uuid();
            let invite = Invite::build(&id, Some(to.canon()), &token, now, c.key())?;
            let sent = c
                .send_invite(
                    to.canon(),
                    &invite,
                    source,
                    note.as_deref(),
                    from_mailbox.as_deref(),
                )
                .map_err(gw_err)?;
            line(out, &json!({"invite_id": id, "token": token, "sent": sent}))?;
        }
        GatewayCommand::InviteStatus { id, status } => {
            line(out, &c.invite_status(id, *status).map_err(gw_err)?)?;
        }
        GatewayCommand::Inbound { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::terminal::ascii_json;

    #[test]
    fn refusals_name_the_code_and_cannot_repaint_the_terminal() {
        let e = gw_err(rdv_gateway_client::Error::Refused {
            status: 429,
            code: "address_limited".into(),
            message: "later\u{1b}[2J\u{202e}".into(),
            retry_after: Some(90),
        });
        let text = e.to_string();
        assert!(matches!(e, Error::Carrier(_)));
        assert!(text.starts_with("gateway refused: address_limited (429): later"));
        assert!(text.ends_with("(retry after 90 s)"), "{text}");
        assert!(
            !text.chars().any(|c| c.is_control() || !c.is_ascii()),
            "{text}"
        );
        let e = gw_err(rdv_gateway_client::Error::Refused {
            status: 409,
            code: "duplicate".into(),
            message: String::new(),
            retry_after: None,
        });
        assert_eq!(e.to_string(), "gateway refused: duplicate (409)");
        let e = gw_err(rdv_gateway_client::Error::Input("bad".into()));
        assert!(matches!(e, Error::Input(_)));
    }

    #[test]
    fn forwarding_confirmations_get_a_human_line() {
        let item = |v: Value| serde_json::from_value::<InboxItem>(v).unwrap();
        let fwd = json!({
            "seq": 3, "received": "2026-10-08T12:00:00Z", "kind": "forwarding_confirmation",
            "code": "012345678", "provider": "gmail", "mailbox": "john@doe.test",
        });
        assert_eq!(
            notice(&item(fwd.clone())).as_deref(),
            Some(
                "Gmail forwarding confirmation for john@doe.test: code 012345678; enter it in \
                 Gmail's forwarding settings"
            )
        );
        // What the gateway sent cannot repaint the terminal.
        let mut odd = fwd.clone();
        odd["code"] = json!("1\u{1b}[2J");
        assert!(!notice(&item(odd)).unwrap().contains('\u{1b}'));
        // Other items have none; stdout's JSON is the item either way.
        let probe = json!({"seq": 4, "received": "2026-10-08T12:00:00Z", "kind": "probe"});
        assert_eq!(notice(&item(probe)), None);
        let back: Value = serde_json::from_str(&ascii_json(&item(fwd.clone())).unwrap()).unwrap();
        assert_eq!(back, fwd);
    }

    #[test]
    fn a_probe_answers_card_lists_the_mailbox() {
        let key = AgentKey::from_seed([2; 32]);
        let now = rdv_proto::time::parse_time("t", "2026-10-08T12:00:00Z").unwrap();
        let none = CardArgs {
            card: None,
            relay: vec![],
        };
        assert!(matches!(
            own_card(&none, &key, now, &[]),
            Err(Error::Input(_))
        ));
        let relays = CardArgs {
            card: None,
            relay: vec!["wss://relay.example.org".into()],
        };
        let bob = Address::parse("bob@b.test").unwrap();
        let doc = own_card(&relays, &key, now, std::slice::from_ref(&bob)).unwrap();
        let card = Card::verify(&doc, now, false).unwrap();
        assert!(card.claims(&bob) && &card.id == key.id());
        // A given card must be this key's and list the mailbox.
        let dir = std::env::temp_dir().join(format!("rdv-gw-card-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("card.json");
        let bare = own_card(&relays, &key, now, &[]).unwrap();
        std::fs::write(&path, bare.to_string()).unwrap();
        let file = CardArgs {
            card: Some(path.clone()),
            relay: vec![],
        };
        assert!(own_card(&file, &key, now, &[]).is_ok());
        assert!(matches!(
            own_card(&file, &key, now, &[bob]),
            Err(Error::Input(_))
        ));
        let other = AgentKey::from_seed([3; 32]);
        assert!(matches!(
            own_card(&file, &other, now, &[]),
            Err(Error::Input(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
