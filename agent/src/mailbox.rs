//! The runtime side of the mailbox probe and the invite (SPEC §5.2.1,
//! §5.2.2): the gateway calls the core asks for ([`perform`], blocking
//! `rdv-gateway-client` calls on the blocking pool), the gateway inbox
//! stream the listener reads ([`spawn_inbox`]: SSE from the last seq
//! handled, reconnecting with backoff), and the `rdv mailbox …` and
//! `rdv contact probe-mail|invite|invite-status` commands.

use std::time::Duration;

use rdv_agent_core::mailbox::{CallOutcome, GatewayCall, GatewayInput};
use rdv_agent_core::{Agent, Command, Input};
use rdv_gateway_client::{GatewayClient, InviteAnswer};
use rdv_proto::AgentKey;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::agent_cli::MailboxCommand;
use crate::agent_cmd::Out;
use crate::cli::Global;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::runtime::{Options, Runtime};
use crate::terminal::printable;

/// The agent's seed, for a gateway client on another thread.
type SeedBytes = Zeroizing<[u8; 32]>;

/// The longest wait between two inbox stream attempts.
const STREAM_BACKOFF_MAX: Duration = Duration::from_secs(60);

fn seed_of(home: &Home) -> Result<SeedBytes> {
    let seed = home.read_seed()?;
    Ok(Zeroizing::new(*seed))
}

fn client(gateway: &str, seed: &SeedBytes) -> GatewayClient {
    GatewayClient::new(gateway, AgentKey::from_seed(**seed))
}

/// A gateway refusal, in words a person can act on (network text escaped, §5.6).
fn refusal_text(code: &str, status: u16, message: &str, retry_after: Option<u64>) -> String {
    let message = if message.is_empty() {
        String::new()
    } else {
        format!(": {}", printable(message))
    };
    let hint = match code {
        "opted_out" => " (the address opted out: nothing will be sent to it)",
        "address_limited" => " (one per address per 30 days)",
        "invite_pending" => " (an invite to this address is still pending)",
        _ => "",
    };
    let retry = retry_after
        .map(|s| format!(" (retry after {s} s)"))
        .unwrap_or_default();
    format!(
        "gateway refused: {} ({status}){message}{hint}{retry}",
        printable(code)
    )
}

fn gw_err(e: rdv_gateway_client::Error) -> Error {
    use rdv_gateway_client::Error as G;
    match e {
        G::Refused {
            status,
            code,
            message,
            retry_after,
        } => Error::Carrier(refusal_text(&code, status, &message, retry_after)),
        G::Input(m) => Error::Input(m),
        G::Proto(p) => Error::Proto(p),
        other => Error::Carrier(format!("gateway: {}", printable(&other.to_string()))),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> rdv_gateway_client::Result<T> + Send + 'static,
) -> Result<rdv_gateway_client::Result<T>> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Carrier(e.to_string()))
}

/// Carries out one gateway call; the input that reports its answer, and
/// a summary for the command's reply.
pub async fn perform(home: &Home, call: GatewayCall) -> Result<(Input, Value)> {
    let seed = seed_of(home)?;
    let c = call.clone();
    let r = blocking(move || {
        let gw = client(c.gateway(), &seed);
        match c {
            GatewayCall::SendProbe {
                to,
                request,
                from_mailbox,
                ..
            } => gw
                .send_probe(&to, &request, from_mailbox.as_deref())
                .map(|_| ()),
            GatewayCall::SynAck { seq, grant, .. } => gw.syn_ack(seq, &grant).map(|_| ()),
            GatewayCall::Ack { seq, cookie, .. } => gw.ack(seq, &cookie).map(|_| ()),
            GatewayCall::SendAck { seq, echo, .. } => gw.send_ack(seq, &echo).map(|_| ()),
            GatewayCall::SendInvite {
                to,
                invite,
                source,
                note,
                from_mailbox,
                ..
            } => gw
                .send_invite(
                    &to,
                    &invite,
                    &source,
                    note.as_deref(),
                    from_mailbox.as_deref(),
                )
                .map(|_| ()),
            GatewayCall::InviteStatus {
                invite_id,
                accepted,
                ..
            } => {
                let answer = if accepted {
                    InviteAnswer::Accepted
                } else {
                    InviteAnswer::Declined
                };
                gw.invite_status(&invite_id, answer).map(|_| ())
            }
        }
    })
    .await?;
    let outcome = match r {
        Ok(()) => CallOutcome::Done,
        Err(rdv_gateway_client::Error::Refused {
            status,
            code,
            message,
            retry_after,
        }) => CallOutcome::Refused {
            status,
            code,
            message,
            retry_after,
        },
        Err(e) => CallOutcome::Failed {
            reason: e.to_string(),
        },
    };
    let mut summary = json!({
        "carrier": "gateway",
        "call": call.what(),
        "id": call.id(),
        "ok": outcome == CallOutcome::Done,
    });
    match &outcome {
        CallOutcome::Done => {}
        CallOutcome::Refused {
            status,
            code,
            message,
            retry_after,
        } => {
            summary["refusal"] = json!(printable(code));
            summary["status"] = json!(status);
            summary["message"] = json!(printable(message));
            summary["retry_after"] = json!(retry_after);
            summary["error"] = json!(refusal_text(code, *status, message, *retry_after));
        }
        CallOutcome::Failed { reason } => {
            summary["refusal"] = json!("unreachable");
            summary["error"] = json!(format!("gateway: {}", printable(reason)));
        }
    }
    Ok((
        Input::Gateway(GatewayInput::Answered { call, outcome }),
        summary,
    ))
}

/// Starts one inbox stream per gateway where the agent proved a mailbox,
/// each feeding its items to `tx` as [`GatewayInput::Item`]s.
pub fn spawn_inbox(
    agent: &Agent,
    home: &Home,
    tx: &tokio::sync::mpsc::Sender<Input>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    let inboxes = agent.gateway_inboxes();
    if inboxes.is_empty() {
        return;
    }
    let seed = match seed_of(home) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "no key for the gateway inbox");
            return;
        }
    };
    for (gateway, after) in inboxes {
        tasks.push(tokio::spawn(inbox_stream(
            gateway,
            after,
            seed.clone(),
            tx.clone(),
        )));
    }
}

/// Reads `GET /v1/inbox/stream?after=…` (server-sent events) until the
/// gateway closes it or it fails, then again from the last seq read,
/// waiting 1 s, doubling up to a minute while nothing arrives.
async fn inbox_stream(
    gateway: String,
    mut after: u64,
    seed: SeedBytes,
    tx: tokio::sync::mpsc::Sender<Input>,
) {
    let mut backoff = Duration::from_secs(1);
    loop {
        if tx.is_closed() {
            return;
        }
        let (done, wait) = tokio::sync::oneshot::channel();
        let (g, s, t) = (gateway.clone(), seed.clone(), tx.clone());
        // A thread of its own: a stream blocks on its socket for as long as
        // it lives, and must not hold a blocking-pool thread at shutdown.
        std::thread::spawn(move || {
            let r = read_stream(&g, after, &s, &t);
            let _ = done.send(r);
        });
        let Ok((last, got, closed)) = wait.await else {
            return;
        };
        if closed {
            return;
        }
        after = after.max(last);
        backoff = if got {
            Duration::from_secs(1)
        } else {
            (backoff * 2).min(STREAM_BACKOFF_MAX)
        };
        tokio::time::sleep(backoff).await;
    }
}

/// One stream: (the last seq read, whether any event came, whether the
/// listener is gone).
fn read_stream(
    gateway: &str,
    after: u64,
    seed: &SeedBytes,
    tx: &tokio::sync::mpsc::Sender<Input>,
) -> (u64, bool, bool) {
    let mut last = after;
    let mut got = false;
    let events = match client(gateway, seed).stream(Some(after)) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "gateway inbox stream failed");
            return (last, got, false);
        }
    };
    for ev in events {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::debug!(error = %e, "gateway inbox stream ended");
                break;
            }
        };
        got = true;
        if let Some(seq) = ev.data.get("seq").and_then(Value::as_u64) {
            last = last.max(seq);
        }
        let input = Input::Gateway(GatewayInput::Item {
            gateway: gateway.to_string(),
            item: ev.data,
        });
        if tx.blocking_send(input).is_err() {
            return (last, got, true);
        }
    }
    (last, got, false)
}

// ---- commands ------------------------------------------------------------------

async fn open(g: &Global) -> Result<Runtime> {
    let home = Home::resolve(g.home.clone(), g.profile.as_deref())?;
    Runtime::open(home, Options::default()).await
}

/// A command whose gateway call must succeed: the gateway's refusal (in
/// the reply's `delivery`) is the command's error.
async fn gateway_command(rt: &mut Runtime, c: Command) -> Result<Value> {
    let reply = rt.command(c).await?;
    if let Some(d) = reply.get("delivery").and_then(Value::as_array)
        && let Some(bad) = d
            .iter()
            .find(|s| s["carrier"] == "gateway" && s["ok"] == false)
    {
        let text = bad["error"].as_str().unwrap_or("gateway refused");
        return Err(Error::Carrier(text.to_string()));
    }
    Ok(reply)
}

/// `rdv contact probe-mail`: a mailbox probe (§5.2.1).
pub async fn probe_mail(
    rt: &mut Runtime,
    address: String,
    greeting: String,
    label: Option<String>,
    from_mailbox: Option<String>,
) -> Result<Value> {
    let greeting = if greeting.is_empty() {
        "My agent would like to connect with yours.".to_string()
    } else {
        greeting
    };
    gateway_command(
        rt,
        Command::MailProbe {
            address,
            greeting,
            label,
            from_mailbox,
        },
    )
    .await
}

/// `rdv contact invite`: an invite (§5.2.2), on the owner's command.
pub async fn invite(
    rt: &mut Runtime,
    address: String,
    source: String,
    note: Option<String>,
    from_mailbox: Option<String>,
) -> Result<Value> {
    gateway_command(
        rt,
        Command::Invite {
            address,
            source,
            note,
            from_mailbox,
        },
    )
    .await
}

/// `rdv contact invite-status`: the answer to an invite of ours.
pub async fn invite_status(rt: &mut Runtime, id: String, status: &str) -> Result<Value> {
    let accepted = match status {
        "accepted" => true,
        "declined" => false,
        _ => return Err(Error::Input("the status is accepted or declined".into())),
    };
    gateway_command(rt, Command::InviteAnswer { id, accepted }).await
}

/// `rdv mailbox …`.
pub async fn run(cmd: MailboxCommand, g: &Global, out: &Out) -> Result<()> {
    let mut rt = open(g).await?;
    let seed = seed_of(rt.home())?;
    let v = match cmd {
        MailboxCommand::Add {
            address,
            gateway,
            on_card,
        } => {
            rdv_agent_core::mailbox::check_gateway_url(&gateway)?;
            let gateway = gateway.trim_end_matches('/').to_string();
            let (gw, a) = (gateway.clone(), address.clone());
            let reg = blocking(move || client(&gw, &seed).register(&a))
                .await?
                .map_err(gw_err)?;
            let mut v = rt
                .command(Command::MailboxAdd {
                    address,
                    gateway,
                    on_card,
                })
                .await?;
            v["status"] = json!(reg.status);
            v["code_expires"] = json!(reg.expires);
            eprintln!(
                "rdv: the gateway mailed a code to {}: type it with `rdv mailbox verify {} <code>`",
                printable(&reg.mailbox),
                printable(&reg.mailbox)
            );
            v
        }
        MailboxCommand::Verify { address, code } => {
            let canon = rdv_proto::Address::parse(&address)
                .map_err(|e| Error::Input(format!("{address}: {e}")))?
                .canon()
                .to_string();
            let gateway = rt
                .agent()
                .state
                .mailboxes
                .get(&canon)
                .map(|m| m.gateway.clone())
                .ok_or_else(|| {
                    Error::Input(format!(
                        "{canon}: add it first (rdv mailbox add {canon} --gateway URL)"
                    ))
                })?;
            let (gw, a) = (gateway.clone(), canon.clone());
            let verified = blocking(move || client(&gw, &seed).verify(&a, &code))
                .await?
                .map_err(gw_err)?;
            let mut v = rt
                .command(Command::MailboxVerified {
                    address: canon,
                    gateway_address: verified.gateway_address.clone(),
                })
                .await?;
            v["token"] = json!(verified.token);
            if let Value::Object(m) = &mut v {
                m.remove("delivery");
            }
            eprintln!(
                "rdv: mailbox proved. The token above is shown once: your mail rule uses it to \
                 hand [RDV-PROBE], [RDV-PROBE-ACK], [RDV-ACK] and [RDV-INVITE] mail to the \
                 gateway (`rdv gateway inbound`, RDV_GW_TOKEN=<token>){}; see \
                 docs/mail-rules.md. `rdv listen` reads what arrives.",
                verified
                    .gateway_address
                    .as_deref()
                    .map(|a| format!(", or forward it to {}", printable(a)))
                    .unwrap_or_default()
            );
            v
        }
        MailboxCommand::Remove { address } => {
            let mut v = rt.command(Command::MailboxRemove { address }).await?;
            if let Value::Object(m) = &mut v {
                m.remove("delivery");
            }
            v
        }
        MailboxCommand::List => {
            let list: Vec<Value> = rt
                .agent()
                .state
                .mailboxes
                .values()
                .map(|m| {
                    json!({
                        "mailbox": m.address,
                        "gateway": m.gateway,
                        "verified": m.verified,
                        "gateway_address": m.gateway_address,
                        "on_card": m.on_card,
                        "inbox_seq": rt.agent().state.gateway_cursors.get(&m.gateway),
                    })
                })
                .collect();
            json!({ "mailboxes": list })
        }
    };
    out.value(&v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_plain_and_cannot_repaint_the_terminal() {
        let t = refusal_text("opted_out", 403, "no\u{1b}[2J", None);
        assert!(t.starts_with("gateway refused: opted_out (403): no"), "{t}");
        assert!(t.contains("opted out"), "{t}");
        assert!(!t.chars().any(|c| c.is_control()), "{t}");
        let t = refusal_text("address_limited", 429, "", Some(90));
        assert!(t.ends_with("(retry after 90 s)"), "{t}");
    }
}
