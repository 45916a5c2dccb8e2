//! `rdv_auto_approve` (SPEC §5.5.1): "off" needs nothing (it only
//! narrows); "on" only through a form that shows the terminal's warning
//! and takes the owner passphrase, checked by the core like the
//! terminal's (scrypt, the lockout after three misses). There is no confirm
//! phrase for it and no argument takes a passphrase: with no form, a
//! closed or unanswered one, or no passphrase set, "on" is refused and
//! points to the terminal. What is set is bound to what the form showed:
//! another grant, label, expiry or passphrase record in between sets
//! nothing.

use rdv_agent_core::Command;
use rdv_agent_core::owner::{Secret, scope_digest};
use rdv_agent_core::task_flow::OwnerCommand;
use rdv_proto::AgentId;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ElicitationAction};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use super::consent;
use super::results::{self, ok, refused};
use super::tools::{AutoApproveArgs, OnOff, contact_ref};
use super::{Server, notice};
use crate::error::{Error, Result};
use crate::task_cmd::{auto_approve_warning, until_unix};

/// Runs `rdv_auto_approve`.
pub async fn auto_approve(
    server: &Server,
    ctx: &RequestContext<RoleServer>,
    a: AutoApproveArgs,
) -> CallToolResult {
    match a.action {
        OnOff::Off => match off(server, a).await {
            Ok(v) => ok(v),
            Err(e) => results::error("rdv_auto_approve", &e),
        },
        OnOff::On => on(server, ctx, a).await,
    }
}

async fn off(server: &Server, a: AutoApproveArgs) -> Result<Value> {
    let mut g = server.runtime().await?;
    let rt = g
        .as_mut()
        .ok_or(Error::Agent(rdv_agent_core::Error::NoAgent))?;
    let ids: Vec<AgentId> = if a.all_contacts == Some(true) {
        if a.agent_id.is_some() || a.to.is_some() {
            return Err(Error::Input(
                "give all_contacts, or agent_id / to, not both".into(),
            ));
        }
        rt.agent().state.tasks.auto.keys().cloned().collect()
    } else {
        vec![contact_ref(rt, a.agent_id.as_deref(), a.to.as_deref())?]
    };
    let mut was_on = Vec::new();
    for id in ids {
        let v = rt
            .command(Command::Owner(OwnerCommand::AutoApproveOff {
                contact: id.clone(),
                via: "mcp".into(),
            }))
            .await?;
        if v.get("was_on") == Some(&Value::Bool(true)) {
            was_on.push(id);
        }
    }
    notice(&format!(
        "auto-approve turned off through the MCP server for {} contact(s)",
        was_on.len()
    ));
    Ok(json!({"auto_approve": "off", "was_on_for": was_on, "via": "mcp"}))
}

/// What the form showed, to check again where the change is made.
#[derive(PartialEq)]
struct Bound {
    grant_id: String,
    scope_digest: String,
    label: Option<String>,
    /// The stored passphrase record (its hash, misses and lockout).
    secret: String,
}

fn bound(agent: &rdv_agent_core::Agent, id: &AgentId) -> Option<Bound> {
    let s = &agent.state;
    let c = s.contact(id)?;
    let g = c.granted_by_us.as_ref()?;
    let secret = serde_json::to_string(s.tasks.owner_secret.as_ref()?).ok()?;
    Some(Bound {
        grant_id: g.id.clone(),
        scope_digest: scope_digest(&g.scope),
        label: c.label.clone(),
        secret,
    })
}

async fn on(
    server: &Server,
    ctx: &RequestContext<RoleServer>,
    a: AutoApproveArgs,
) -> CallToolResult {
    if a.all_contacts == Some(true) {
        return refused("auto-approve is turned on for one contact at a time: give agent_id or to");
    }
    // What the form will show, read now.
    let (id, until, warning, shown) = {
        let mut g = match server.runtime().await {
            Ok(g) => g,
            Err(e) => return results::error("rdv_auto_approve", &e),
        };
        let Some(rt) = g.as_mut() else {
            return refused("no agent in this home: call rdv_init first");
        };
        let id = match contact_ref(rt, a.agent_id.as_deref(), a.to.as_deref()) {
            Ok(id) => id,
            Err(e) => return results::error("rdv_auto_approve", &e),
        };
        let until = match until_unix(a.until.as_deref()) {
            Ok(u) => u,
            Err(e) => return results::error("rdv_auto_approve", &e),
        };
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        if until.is_some_and(|u| u <= now || u > now + 366 * 86_400) {
            return refused("until must be in the future and at most a year away");
        }
        if rt.agent().state.tasks.owner_secret.is_none() {
            return refused(&terminal_only(
                &id,
                "no owner passphrase is set: the human sets one with `rdv owner-secret set` in \
                 their own terminal first",
            ));
        }
        if !consent::forms_available(server, &ctx.peer) {
            return refused(&terminal_only(
                &id,
                "turning auto-approve on takes the owner passphrase in an approval form, and \
                 this client has none (or forms are off); there is no confirm phrase for it",
            ));
        }
        let Some(shown) = bound(rt.agent(), &id) else {
            return refused(
                "your human has not granted this contact anything: there is nothing to auto-approve",
            );
        };
        let warning = match auto_approve_warning(rt, &id, until) {
            Ok(w) => w,
            Err(e) => return results::error("rdv_auto_approve", &e),
        };
        (id, until, warning, shown)
    };
    let message = format!(
        "Rendezvous: your assistant asks to turn on AUTO-APPROVE ALL (your assistant cannot \
         answer this form).\n\nMode: all\n{}\n\nTo turn it on, type your owner passphrase \
         (the one you set with `rdv owner-secret set`). It goes to the Rendezvous server only; \
         your assistant never sees it. MCP forms have no password field, so it shows as plain \
         text. Decline or close this form to leave auto-approve off.",
        warning.join("\n")
    );
    let schema = match consent::form_schema(
        json!({"passphrase": {"type": "string", "title": "Owner passphrase"}}),
        &["passphrase"],
    ) {
        Ok(s) => s,
        Err(e) => return results::error("rdv_auto_approve", &e),
    };
    let pass = match consent::ask(server, &ctx.peer, message, schema).await {
        Ok((ElicitationAction::Accept, Some(c))) => {
            match c.get("passphrase").and_then(Value::as_str) {
                Some(p) if !p.is_empty() => Secret::new(p),
                _ => return refused("no passphrase was typed: auto-approve stays off"),
            }
        }
        Ok((ElicitationAction::Decline, _)) => {
            return ok(
                json!({"auto_approve": "off", "verdict": "declined", "next": "The human declined. Nothing changed."}),
            );
        }
        Ok(_) => {
            return refused(&terminal_only(&id, "the form was closed without an answer"));
        }
        Err(why) => return refused(&terminal_only(&id, why)),
    };
    let mut g = match server.runtime().await {
        Ok(g) => g,
        Err(e) => return results::error("rdv_auto_approve", &e),
    };
    let Some(rt) = g.as_mut() else {
        return refused("no agent in this home");
    };
    let want = id.clone();
    let r = consent::command_if(
        rt,
        move |agent| {
            if bound(agent, &want).as_ref() == Some(&shown) {
                Ok(())
            } else {
                Err(Error::Input(
                    "the contact's grant, label or the owner passphrase changed while the form \
                     was open: nothing was set"
                        .into(),
                ))
            }
        },
        Command::Owner(OwnerCommand::AutoApproveOn {
            contact: id.clone(),
            until,
            passphrase: pass,
            via: "form".into(),
        }),
    )
    .await;
    match r {
        Ok(v) if v.get("auto_approve") == Some(&json!("refused")) => {
            let p = v.get("passphrase").cloned().unwrap_or(Value::Null);
            ok(json!({
                "auto_approve": "refused",
                "verdict": p.get("verdict").cloned().unwrap_or(Value::Null),
                "misses_left": p.get("misses_left").cloned().unwrap_or(Value::Null),
                "locked_until": p.get("until").cloned().unwrap_or(Value::Null),
                "next": "The passphrase typed in the form was not the owner passphrase: nothing was set (three misses lock it for an hour).",
            }))
        }
        Ok(mut v) => {
            notice(&format!(
                "auto-approve ALL turned on for {id} ({}) through the approval form",
                id.fingerprint()
            ));
            if let Value::Object(m) = &mut v {
                m.insert("via".into(), json!("form"));
                m.insert("fingerprint".into(), json!(id.fingerprint()));
            }
            ok(v)
        }
        Err(e) => results::error("rdv_auto_approve", &e),
    }
}

fn terminal_only(id: &AgentId, why: &str) -> String {
    format!(
        "Auto-approve was not turned on: {why}. The human can run `rdv contact auto-approve \
         {id} all` in their own terminal."
    )
}
