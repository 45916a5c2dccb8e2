//! The confirm-phrase gate (§5.5): a front-end the model talks to (the MCP
//! server) grants only with a phrase the human read on a human channel.
//! The phrase approves the request on exactly the terms shown with it; any
//! other terms get a new phrase. Verdicts are data: a miss is counted and
//! kept, so it is not an error.

use rdv_proto::AgentId;
use serde::Serialize;
use serde_json::{Value, json};

use crate::agent::{Agent, Ctx};
use crate::error::{Error, Result};
use crate::phrase::{Phrase, PhraseSecret, PhraseVerdict, tier_allows_phrase};
use crate::record::Table;

/// What a phrase approves: the request, the peer, and the exact terms.
pub fn grant_terms(
    request_id: &str,
    from: &AgentId,
    tier: &str,
    scope: &Value,
    label: Option<&str>,
) -> Value {
    json!({
        "step": "contact-grant",
        "request_id": request_id,
        "from": from,
        "tier": tier,
        "scope": scope,
        "label": label,
    })
}

/// The answer to a phrase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum GateVerdict {
    Approved,
    WrongPhrase {
        misses_left: u32,
    },
    /// The phrase was for other terms, was used, expired or replaced: the
    /// human is shown a new one for these terms.
    NewPhraseNeeded {
        reason: String,
    },
    /// No phrase was issued for this request.
    NoPhrase,
}

impl Agent {
    /// Issues the phrase for granting `request_id` on these terms. The
    /// secret is for a human channel only (a terminal, stderr): never a
    /// tool result, an event or a log (§5.5).
    pub fn issue_grant_phrase(
        &mut self,
        request_id: &str,
        tier: &str,
        scope: &Value,
        label: Option<&str>,
        ctx: &mut Ctx<'_>,
    ) -> Result<PhraseSecret> {
        if !tier_allows_phrase(tier) {
            return Err(Error::Refused(format!(
                "a confirm phrase cannot grant tier {tier}: family and spouse need the \
                 owner's terminal (rdv contact grant)"
            )));
        }
        crate::command::check_tier(tier)?;
        let p = self
            .state
            .pending
            .get(request_id)
            .ok_or_else(|| Error::NotFound(format!("no pending request {request_id}")))?;
        let terms = grant_terms(request_id, &p.from, tier, scope, label);
        let (secret, record) =
            Phrase::generate(&terms, ctx.now, ctx.rng).map_err(|e| Error::Input(e.to_string()))?;
        if let Some(p) = self.state.pending.get_mut(request_id) {
            p.phrase = Some(record);
        }
        self.state.touch(Table::Pending, request_id);
        Ok(secret)
    }

    /// Checks a typed phrase against the terms about to be granted; on
    /// approval the grant is made. The record's new state is kept either way.
    pub fn grant_with_phrase(
        &mut self,
        request_id: &str,
        tier: &str,
        scope: Value,
        label: Option<String>,
        typed: &str,
        ctx: &mut Ctx<'_>,
    ) -> Result<GateVerdict> {
        let p = self
            .state
            .pending
            .get_mut(request_id)
            .ok_or_else(|| Error::NotFound(format!("no pending request {request_id}")))?;
        let terms = grant_terms(request_id, &p.from, tier, &scope, label.as_deref());
        let Some(rec) = p.phrase.as_mut() else {
            return Ok(GateVerdict::NoPhrase);
        };
        let verdict = rec.check(typed, &terms, ctx.now);
        self.state.touch(Table::Pending, request_id);
        Ok(match verdict {
            PhraseVerdict::Approved => {
                if !tier_allows_phrase(tier) {
                    return Ok(GateVerdict::NewPhraseNeeded {
                        reason: "a phrase cannot grant this tier".into(),
                    });
                }
                self.grant_pending(request_id, tier, scope, label, ctx)?;
                GateVerdict::Approved
            }
            PhraseVerdict::WrongPhrase { misses_left } => GateVerdict::WrongPhrase { misses_left },
            PhraseVerdict::TermsChanged => GateVerdict::NewPhraseNeeded {
                reason: "the phrase was shown for other terms".into(),
            },
            PhraseVerdict::Replaced => GateVerdict::NewPhraseNeeded {
                reason: "too many wrong tries: the phrase was replaced".into(),
            },
            PhraseVerdict::AlreadyUsed => GateVerdict::NewPhraseNeeded {
                reason: "the phrase was already used".into(),
            },
            PhraseVerdict::Expired => GateVerdict::NewPhraseNeeded {
                reason: "the phrase expired".into(),
            },
        })
    }

    /// Takes this input's writes and events (for calls outside [`Agent::handle`]).
    pub fn take_output(&mut self) -> Result<crate::agent::Output> {
        Ok(crate::agent::Output {
            writes: self.state.take_writes()?,
            events: std::mem::take(&mut self.events),
            effects: std::mem::take(&mut self.effects),
            reply: None,
        })
    }
}
