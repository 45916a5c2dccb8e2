//! Finding a card (§4.4, §4.5): public pointers on the address topic (or
//! the agent ID's topic) on our relays, then for an email the domain's DNS
//! TXT record (its agent IDs' cards fetched from their ID topics), then the
//! configured directories. Every card found is verified, must claim what
//! was asked for (or, from DNS, carry the ID the record names), and is kept
//! with its binding; our own card and anyone's label are never returned.

use rdv_agent_core::Command;
use rdv_agent_core::state::Binding;
use rdv_proto::doc::card::{Card, newest_card};
use rdv_proto::nostr_event::{Carried, parse_event};
use rdv_proto::{Address, AgentId, idtopic};
use serde::Serialize;

use crate::dns::Dns;
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
    #[serde(skip)]
    kept_as: Binding,
}

impl Found {
    fn new(card: Card, binding: Binding, source: String) -> Found {
        Found {
            id: card.id.clone(),
            fingerprint: card.id.fingerprint(),
            binding: binding.as_str(),
            kept_as: binding,
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
    /// DNS and directories that could not be asked, and why.
    pub errors: Vec<String>,
}

/// Looks `target` up everywhere configured, keeps each card found (for a
/// later request) and returns them. DNS through the resolver `RDV_DNS_SERVER`
/// names (default: the system's).
pub async fn discover(rt: &mut Runtime, target: &Target, raw: &str) -> Result<Discovery> {
    let dns = Dns::from_env()?;
    discover_with(rt, target, raw, &dns).await
}

/// Cards on `topics` from our relays and our ntfy and MQTT hint servers
/// (§4.4 item 1: one topic namespace on all three carriers) that verify,
/// for which `fits` holds, the newest of each agent (§4.3) with where it
/// was read (`relays`, `ntfy:<server>`, `mqtt:<url>`); and whether our own
/// card was there. A hint server that cannot be asked adds a line to
/// `errors`; the others still answer.
async fn pointer_cards(
    rt: &mut Runtime,
    topics: Vec<String>,
    fits: impl Fn(&str, &Card) -> bool,
    errors: &mut Vec<String>,
) -> Result<(Vec<(Card, String)>, bool)> {
    let profile = rt.agent().state.profile()?.clone();
    let me = rt.agent().id().clone();
    let now = time::OffsetDateTime::now_utc();
    let hint_routes = rt.agent().hint_routes("")?;
    let hints = (!hint_routes.is_empty()).then(|| {
        tokio::spawn(crate::transport::hints::fetch(
            hint_routes,
            topics.clone(),
            rt.options().fetch_timeout,
        ))
    });
    let q = Query {
        p: None,
        topics: topics.clone(),
        d: Vec::new(),
        since: None,
        limit: Some(64),
    };
    let got = rt.fetch(&profile.relays, &q).await?;
    // (topic, card document, source) from every carrier.
    let mut docs: Vec<(String, serde_json::Value, String)> = Vec::new();
    for r in got {
        if let Ok((_, Carried::Card { topic: t, card })) = parse_event(&r.json) {
            docs.push((t, card, "relays".to_string()));
        }
    }
    if let Some(task) = hints {
        let (msgs, errs) = task.await.map_err(|e| Error::Carrier(e.to_string()))?;
        errors.extend(errs);
        for m in msgs {
            // Bounded by the transport; a card, or nothing (a probe, noise).
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&m.bytes) else {
                continue;
            };
            docs.push((m.topic, v, m.source));
        }
    }
    let mut own = false;
    let mut cards: Vec<(Card, String)> = Vec::new();
    for (t, card, source) in docs {
        if !topics.contains(&t) {
            continue;
        }
        let Ok(c) = Card::verify(&card, now, profile.allow_ws) else {
            continue;
        };
        if !fits(&t, &c) {
            continue;
        }
        if c.id == me {
            own = true;
            continue;
        }
        cards.push((c, source));
    }
    let mut ids: Vec<AgentId> = cards.iter().map(|(c, _)| c.id.clone()).collect();
    ids.sort();
    ids.dedup();
    let newest = ids
        .iter()
        .filter_map(|id| {
            let c = newest_card(id, cards.iter().map(|(c, _)| c))?.clone();
            // The first carrier that had this very card (relays come first).
            let source = cards
                .iter()
                .find(|(x, _)| x.doc == c.doc)
                .map_or_else(|| "relays".to_string(), |(_, s)| s.clone());
            Some((c, source))
        })
        .collect();
    Ok((newest, own))
}

/// [`discover`] with the resolver given.
pub async fn discover_with(
    rt: &mut Runtime,
    target: &Target,
    raw: &str,
    dns: &Dns,
) -> Result<Discovery> {
    let profile = rt.agent().state.profile()?.clone();
    let me = rt.agent().id().clone();
    let now = time::OffsetDateTime::now_utc();
    let topic = target.topic();
    let mut errors = Vec::new();

    // The DNS question goes out now and is read after the relays answer.
    let dns_task = match target {
        Target::Address(a) => {
            let (dns, a) = (dns.clone(), a.clone());
            Some(tokio::spawn(async move { dns.lookup(&a).await }))
        }
        Target::Id(_) => None,
    };

    // 1. Public pointers on the topic (§4.4, §6.2).
    let (cards, mut own) = pointer_cards(
        rt,
        vec![topic.clone()],
        |_, c| match target {
            Target::Address(a) => c.claims(a),
            Target::Id(id) => &c.id == id,
        },
        &mut errors,
    )
    .await?;
    let mut found: Vec<Found> = cards
        .into_iter()
        .map(|(c, source)| Found::new(c, Binding::Claimed, source))
        .collect();

    // 2. DNS TXT (§4.4): the agent IDs the domain names; each one's card
    // from its ID topic, kept only if it carries that ID.
    let mut dns_ids: Vec<AgentId> = Vec::new();
    let mut dns_source = String::new();
    if let Some(task) = dns_task {
        match task.await.map_err(|e| Error::Carrier(e.to_string()))? {
            Ok(Some(answer)) => {
                dns_source = format!("dns:{}", answer.name);
                dns_ids = answer.ids.into_iter().filter(|id| id != &me).collect();
            }
            Ok(None) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    for f in found.iter_mut().filter(|f| dns_ids.contains(&f.id)) {
        f.binding = Binding::Dns.as_str();
        f.kept_as = Binding::Dns;
        f.source = dns_source.clone();
    }
    let missing: Vec<AgentId> = dns_ids
        .iter()
        .filter(|id| !found.iter().any(|f| &f.id == *id))
        .cloned()
        .collect();
    if !missing.is_empty() {
        let topics: Vec<String> = missing.iter().map(idtopic).collect();
        let (cards, _) = pointer_cards(
            rt,
            topics,
            |t, c| missing.contains(&c.id) && idtopic(&c.id) == t,
            &mut errors,
        )
        .await?;
        // In the record's order.
        for id in &missing {
            if let Some((c, _)) = cards.iter().find(|(c, _)| &c.id == id) {
                found.push(Found::new(c.clone(), Binding::Dns, dns_source.clone()));
            }
        }
    }

    // 3. Directories (§4.5), for an address.
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
                        if found.iter().any(|x| x.id == f.card.id) {
                            continue;
                        }
                        // A card the domain's record names keeps that binding.
                        if dns_ids.contains(&f.card.id) {
                            found.push(Found::new(f.card, Binding::Dns, dns_source.clone()));
                        } else {
                            found.push(Found::new(f.card, Binding::Directory, dir.clone()));
                        }
                    }
                }
                Err(e) => errors.push(format!("{dir}: {e}")),
            }
        }
    }

    for f in &found {
        rt.command(Command::KeepCard {
            card: f.card.doc.clone(),
            binding: f.kept_as,
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
