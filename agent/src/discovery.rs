//! Finding a card (§4.4, §4.5): public pointers on the address topic (or
//! the agent ID's topic) on our relays, then the configured directories.
//! Every card found is verified, must claim what was asked for, and is kept
//! with its binding; our own card and anyone's label are never returned.

use rdv_agent_core::Command;
use rdv_agent_core::state::Binding;
use rdv_proto::doc::card::{Card, newest_card};
use rdv_proto::nostr_event::{Carried, parse_event};
use rdv_proto::{Address, AgentId, idtopic};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::transport::nostr::Query;

/// What is being looked for.
#[derive(Debug, Clone)]
pub enum Target {
    Address(Address),
    Id(AgentId),
}

impl Target {
    /// An email, a +phone or an agent ID, strictly.
    pub fn parse(s: &str) -> Result<Target> {
        if s.starts_with(rdv_proto::consts::AGENT_ID_PREFIX) {
            return AgentId::parse(s)
                .map(Target::Id)
                .map_err(|e| Error::Input(format!("{s}: not an agent ID: {e}")));
        }
        Address::parse(s)
            .map(Target::Address)
            .map_err(|e| Error::Input(format!("{s}: not an email, +phone or agent ID: {e}")))
    }

    pub fn topic(&self) -> String {
        match self {
            Target::Address(a) => a.dtopic(),
            Target::Id(id) => idtopic(id),
        }
    }
}

/// One card found.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    pub id: AgentId,
    pub fingerprint: String,
    /// claimed (a public pointer), directory, dns.
    pub binding: &'static str,
    /// Where it was found: relays, or a directory's URL.
    pub source: String,
    /// The addresses the card claims: claims, not proof (§4.4).
    pub claimed_addresses: Vec<String>,
    pub relays: Vec<String>,
    pub capabilities: Vec<String>,
    #[serde(skip)]
    pub card: Card,
}

impl Found {
    fn new(card: Card, binding: Binding, source: String) -> Found {
        Found {
            id: card.id.clone(),
            fingerprint: card.id.fingerprint(),
            binding: binding.as_str(),
            source,
            claimed_addresses: card
                .addresses
                .iter()
                .map(|a| a.canon().to_string())
                .collect(),
            relays: card.relays.clone(),
            capabilities: card.capabilities.clone(),
            card,
        }
    }
}

/// The result of one discovery.
#[derive(Debug, Clone, Serialize)]
pub struct Discovery {
    pub target: String,
    pub topic: String,
    pub found: Vec<Found>,
    /// Our own card was on the topic (for our own address).
    pub own_card_on_relays: bool,
    /// Directories that could not be asked, and why.
    pub errors: Vec<String>,
}

/// Looks `target` up everywhere configured, keeps each card found (for a
/// later request) and returns them.
pub async fn discover(rt: &mut Runtime, target: &Target, raw: &str) -> Result<Discovery> {
    let profile = rt.agent().state.profile()?.clone();
    let me = rt.agent().id().clone();
    let now = time::OffsetDateTime::now_utc();
    let topic = target.topic();
    let mut own = false;
    let mut errors = Vec::new();

    // 1. Public pointers on the topic (§4.4, §6.2).
    let q = Query {
        p: None,
        topics: vec![topic.clone()],
        d: Vec::new(),
        since: None,
        limit: Some(64),
    };
    let got = rt.fetch(&profile.relays, &q).await?;
    let mut cards: Vec<Card> = Vec::new();
    for r in got {
        let Ok((_, Carried::Card { topic: t, card })) = parse_event(&r.json) else {
            continue;
        };
        if t != topic {
            continue;
        }
        let Ok(c) = Card::verify(&card, now, profile.allow_ws) else {
            continue;
        };
        let fits = match target {
            Target::Address(a) => c.claims(a),
            Target::Id(id) => &c.id == id,
        };
        if !fits {
            continue;
        }
        if c.id == me {
            own = true;
            continue;
        }
        cards.push(c);
    }
    let mut found: Vec<Found> = Vec::new();
    let mut ids: Vec<AgentId> = cards.iter().map(|c| c.id.clone()).collect();
    ids.sort();
    ids.dedup();
    for id in &ids {
        // §4.3: of several cards of one agent, only the newest.
        if let Some(c) = newest_card(id, cards.iter()) {
            found.push(Found::new(c.clone(), Binding::Claimed, "relays".into()));
        }
    }

    // 2. Directories (§4.5), for an address.
    if let Target::Address(a) = target {
        for dir in &profile.directories {
            let d = dir.clone();
            let a = a.clone();
            let allow_ws = profile.allow_ws;
            let r = tokio::task::spawn_blocking(move || {
                rdv_directory_client::http::DirectoryClient::new(&d).lookup(
                    std::slice::from_ref(&a),
                    now,
                    allow_ws,
                    &mut rand_core::OsRng,
                )
            })
            .await
            .map_err(|e| Error::Carrier(e.to_string()))?;
            match r {
                Ok(list) => {
                    for f in list.into_iter().flat_map(|f| f.cards) {
                        if f.card.id == me {
                            own = true;
                            continue;
                        }
                        if !found.iter().any(|x| x.id == f.card.id) {
                            found.push(Found::new(f.card, Binding::Directory, dir.clone()));
                        }
                    }
                }
                Err(e) => errors.push(format!("{dir}: {e}")),
            }
        }
    }

    for f in &found {
        let binding = match f.binding {
            "directory" => Binding::Directory,
            "dns" => Binding::Dns,
            _ => Binding::Claimed,
        };
        rt.command(Command::KeepCard {
            card: f.card.doc.clone(),
            binding,
        })
        .await?;
    }
    Ok(Discovery {
        target: raw.to_string(),
        topic,
        found,
        own_card_on_relays: own,
        errors,
    })
}

/// The card of an agent ID: a contact's, a kept one, or fetched from its
/// ID topic (§4.4 issue #62).
pub async fn card_for_id(rt: &mut Runtime, id: &AgentId) -> Result<serde_json::Value> {
    rt.refresh().await?;
    if let Some(k) = rt.agent().state.known_cards.get(id) {
        return Ok(k.card.clone());
    }
    let d = discover(rt, &Target::Id(id.clone()), id.as_str()).await?;
    d.found
        .into_iter()
        .next()
        .map(|f| f.card.doc)
        .ok_or_else(|| {
            Error::Input(format!(
                "no card for {id} on the relays (import it with `rdv card import`)"
            ))
        })
}
