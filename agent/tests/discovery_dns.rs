//! DNS TXT discovery (SPEC §4.4 item 2) through the real `rdv` binary: a
//! DNS server on 127.0.0.1 in this process (a minimal UDP responder on
//! hickory-proto, so the tests can send answers no zone file would hold:
//! padded records, floods, foreign IDs), a Nostr relay in this process
//! (nostr-relay-builder), and agents in temporary homes. `RDV_DNS_SERVER`
//! points each `rdv` at the responder.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_resolver::proto::rr::rdata::TXT;
use hickory_resolver::proto::rr::{RData, RecordType};
use nostr_relay_builder::prelude::{LocalRelay, RelayBuilder};
use rdv_agent::home::Home;
use rdv_agent::runtime::{Options, Runtime};
use rdv_agent::transport::nostr::{CarrierOptions, NostrCarrier, delivered};
use rdv_agent_core::state::Binding;
use rdv_proto::{AgentId, AgentKey, idtopic};
use serde_json::Value;

/// TXT records per name (lowercase, no final dot), each as its strings.
type Zone = Arc<Mutex<HashMap<String, Vec<Vec<Vec<u8>>>>>>;

/// Answers TXT questions from `zone`; NXDOMAIN for other names.
async fn dns_server(zone: Zone) -> std::net::SocketAddr {
    common::dns::serve(move |name, qtype| {
        let records = zone.lock().unwrap().get(name).cloned()?;
        if qtype != RecordType::TXT {
            return Some(Vec::new());
        }
        Some(
            records
                .iter()
                .map(|strings| {
                    let parts: Vec<&[u8]> = strings.iter().map(Vec::as_slice).collect();
                    (RData::TXT(TXT::from_bytes(parts)), 60)
                })
                .collect(),
        )
    })
    .await
}

async fn relay() -> (LocalRelay, String) {
    let relay = LocalRelay::new(RelayBuilder::default());
    relay.run().await.unwrap();
    let url = relay.url().await.to_string();
    (relay, url)
}

struct World {
    dir: tempfile::TempDir,
    relay_url: String,
    dns: std::net::SocketAddr,
    zone: Zone,
    _relay: LocalRelay,
}

impl World {
    async fn new() -> World {
        let zone: Zone = Arc::default();
        let dns = dns_server(zone.clone()).await;
        let (r, relay_url) = relay().await;
        World {
            dir: tempfile::tempdir().unwrap(),
            relay_url,
            dns,
            zone,
            _relay: r,
        }
    }

    fn home(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `rdv --home HOME ARGS…` with the test resolver; (exit code, stdout, stderr).
    async fn rdv(&self, home: &str, args: &[&str]) -> (i32, String, String) {
        common::rdv_async(&self.home(home), &self.dns.to_string(), args).await
    }

    /// A new agent on the test relay; its ID.
    async fn init(&self, home: &str, extra: &[&str]) -> AgentId {
        common::init_on(
            &self.home(home),
            &self.dns.to_string(),
            &self.relay_url,
            extra,
        )
        .await
    }

    fn set_txt(&self, name: &str, records: Vec<Vec<Vec<u8>>>) {
        self.zone.lock().unwrap().insert(name.into(), records);
    }

    /// `rdv --json discover TARGET` as `home`: the IDs found with their binding.
    async fn discover(&self, home: &str, target: &str) -> (Vec<(String, String, String)>, Value) {
        let (code, out, err) = self.rdv(home, &["--json", "discover", target]).await;
        assert_eq!(code, 0, "discover {target}: {err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let found = v["found"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["id"].as_str().unwrap().to_string(),
                    f["binding"].as_str().unwrap().to_string(),
                    f["source"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        (found, v)
    }

    /// The cards `home` keeps, with their binding.
    async fn kept(&self, home: &str) -> HashMap<AgentId, Binding> {
        let rt = Runtime::open(Home::at(self.home(home)), Options::default())
            .await
            .unwrap();
        rt.agent()
            .state
            .known_cards
            .iter()
            .map(|(id, k)| (id.clone(), k.binding))
            .collect()
    }
}

fn txt(s: &str) -> Vec<Vec<u8>> {
    vec![s.as_bytes().to_vec()]
}

fn record_for(id: &AgentId) -> Vec<Vec<u8>> {
    txt(&format!("rdv={id}"))
}

fn seed_of(home: &Path) -> [u8; 32] {
    *Home::at(home).read_seed().unwrap()
}

/// One domain's record names two agents (and holds junk, ignored): both
/// cards come from their ID topics, kept with binding dns. An address whose
/// card is on its own topic too is upgraded from claimed to dns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_txt_record_finds_the_domains_agents() {
    let t0 = Instant::now();
    let w = World::new().await;
    let bob = w
        .init("bob", &["--address", "bob@bob.test", "--public-pointer"])
        .await;
    let carol = w
        .init(
            "carol",
            &["--address", "carol@carol.test", "--public-pointer"],
        )
        .await;
    w.init("alice", &[]).await;
    w.init("erin", &[]).await;
    w.set_txt(
        "_agent.bob.test",
        vec![
            record_for(&bob),
            txt("v=spf1 -all"),
            txt(&format!("RDV={carol}")),
            txt(&format!("rdv= {carol}")),
            vec![b"rdv=".to_vec(), carol.as_str().as_bytes().to_vec()],
            record_for(&bob),
        ],
    );

    // info@bob.test is on no topic and in no directory: only DNS finds it.
    let (found, v) = w.discover("alice", "Info@Bob.test").await;
    let src = "dns:_agent.bob.test".to_string();
    assert_eq!(
        found,
        vec![
            (bob.to_string(), "dns".into(), src.clone()),
            (carol.to_string(), "dns".into(), src.clone()),
        ],
        "{v}"
    );
    assert!(v["errors"].as_array().unwrap().is_empty(), "{v}");
    let kept = w.kept("alice").await;
    assert_eq!(kept.get(&bob), Some(&Binding::Dns));
    assert_eq!(kept.get(&carol), Some(&Binding::Dns));
    assert_eq!(kept.len(), 2);

    // Bob's own address: his public pointer (claimed) and the domain's
    // record agree; the binding is dns.
    w.set_txt("_agent.bob.test", vec![record_for(&bob)]);
    let (found, v) = w.discover("erin", "bob@bob.test").await;
    assert_eq!(found, vec![(bob.to_string(), "dns".into(), src)], "{v}");
    assert_eq!(w.kept("erin").await.get(&bob), Some(&Binding::Dns));

    // Without the record the same lookup is a claim only.
    w.set_txt("_agent.bob.test", vec![]);
    w.init("frank", &[]).await;
    let (found, _) = w.discover("frank", "bob@bob.test").await;
    assert_eq!(
        found,
        vec![(bob.to_string(), "claimed".into(), "relays".into())]
    );
    // DNS off: nothing asked.
    w.set_txt("_agent.bob.test", vec![record_for(&bob)]);
    let (_, out, _) = common::rdv_async(
        &w.home("frank"),
        "off",
        &["--json", "discover", "info@bob.test"],
    )
    .await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["found"], Value::Array(vec![]), "{v}");
    eprintln!("a_txt_record_finds_the_domains_agents: {:?}", t0.elapsed());
}

/// A record naming agent X, with another agent's (valid, signed) card
/// planted on X's ID topic: nothing is kept. An ID with no card anywhere
/// finds nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_for_another_id_than_the_record_names_is_not_kept() {
    let t0 = Instant::now();
    let w = World::new().await;
    let mallory = w.init("mallory", &["--address", "m@evil.test"]).await;
    w.init("alice", &[]).await;
    let x = AgentKey::from_seed([9; 32]).id().clone();
    assert_ne!(x, mallory);

    // Mallory's own card, signed by her, on the topic of X.
    let m_rt = Runtime::open(Home::at(w.home("mallory")), Options::default())
        .await
        .unwrap();
    let card = m_rt.agent().state.profile().unwrap().card.clone();
    let m_key = AgentKey::from_seed(seed_of(&w.home("mallory")));
    let carrier = NostrCarrier::new(
        m_key.nostr_keys().unwrap(),
        CarrierOptions {
            allow_ws: true,
            ..CarrierOptions::default()
        },
    )
    .await
    .unwrap();
    let now = time::OffsetDateTime::now_utc().unix_timestamp() as u64;
    let ev = rdv_proto::nostr_event::card_event(
        &card,
        &idtopic(&x),
        &m_key.nostr_keys().unwrap(),
        now,
        [7; 32],
    )
    .unwrap();
    assert!(delivered(
        &carrier
            .publish(&ev, std::slice::from_ref(&w.relay_url))
            .await
    ));

    w.set_txt("_agent.evil.test", vec![record_for(&x)]);
    let (found, v) = w.discover("alice", "ceo@evil.test").await;
    assert!(found.is_empty(), "{v}");
    assert!(w.kept("alice").await.is_empty());

    // The control: a record naming Mallory herself finds her card there.
    w.set_txt("_agent.evil.test", vec![record_for(&mallory)]);
    let m_ev = rdv_proto::nostr_event::card_event(
        &card,
        &idtopic(&mallory),
        &m_key.nostr_keys().unwrap(),
        now,
        [8; 32],
    )
    .unwrap();
    assert!(delivered(
        &carrier
            .publish(&m_ev, std::slice::from_ref(&w.relay_url))
            .await
    ));
    let (found, v) = w.discover("alice", "ceo@evil.test").await;
    assert_eq!(found.len(), 1, "{v}");
    assert_eq!(found[0].0, mallory.to_string());
    assert_eq!(found[0].1, "dns");
    eprintln!(
        "a_card_for_another_id_than_the_record_names_is_not_kept: {:?}",
        t0.elapsed()
    );
}

/// A record padded past the size bound (its text still `rdv=` and a valid
/// ID: empty strings concatenate to nothing) is ignored; an answer of more
/// records than the bound is ignored whole, its valid record too. Just
/// under both bounds, the same record is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_answers_over_the_bounds_are_ignored() {
    let t0 = Instant::now();
    let w = World::new().await;
    let bob = w
        .init("bob", &["--address", "bob@bob.test", "--public-pointer"])
        .await;
    w.init("alice", &[]).await;
    let good = format!("rdv={bob}");
    let max = rdv_agent::dns::TXT_MAX_BYTES;
    let records = rdv_agent::dns::TXT_MAX_RECORDS;

    let mut padded = txt(&good);
    padded.extend((0..max - good.len()).map(|_| Vec::new()));
    assert_eq!(padded.iter().map(|s| 1 + s.len()).sum::<usize>(), max + 1);
    w.set_txt("_agent.pad.test", vec![padded]);
    let mut flood: Vec<Vec<Vec<u8>>> = (0..records).map(|i| txt(&format!("junk {i}"))).collect();
    flood.push(txt(&good));
    w.set_txt("_agent.flood.test", flood);
    let mut fits = txt(&good);
    fits.extend((0..max - good.len() - 1).map(|_| Vec::new()));
    let mut under: Vec<Vec<Vec<u8>>> = (0..records - 1)
        .map(|i| txt(&format!("junk {i}")))
        .collect();
    under.push(fits);
    w.set_txt("_agent.fits.test", under);

    for target in ["a@pad.test", "a@flood.test"] {
        let (found, v) = w.discover("alice", target).await;
        assert!(found.is_empty(), "{target}: {v}");
    }
    assert!(w.kept("alice").await.is_empty());
    let (found, v) = w.discover("alice", "a@fits.test").await;
    assert_eq!(
        found,
        vec![(bob.to_string(), "dns".into(), "dns:_agent.fits.test".into())],
        "{v}"
    );
    eprintln!(
        "dns_answers_over_the_bounds_are_ignored: {:?}",
        t0.elapsed()
    );
}

/// A server that never answers is an error in the result, not a failure:
/// the other sources still run, within the lookup timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_dns_server_is_reported_and_bounded() {
    let w = World::new().await;
    w.init("alice", &[]).await;
    // Bound, never read: queries go unanswered.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dns = silent.local_addr().unwrap().to_string();
    let t0 = Instant::now();
    let (code, out, err) = common::rdv_async(
        &w.home("alice"),
        &dns,
        &["--json", "discover", "a@silent.test"],
    )
    .await;
    let took = t0.elapsed();
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let errors = v["errors"].as_array().unwrap();
    assert!(
        errors.len() == 1
            && errors[0]
                .as_str()
                .unwrap()
                .starts_with("dns _agent.silent.test"),
        "{v}"
    );
    assert!(
        took < rdv_agent::dns::LOOKUP_TIMEOUT + Duration::from_secs(6),
        "{took:?}"
    );
    drop(silent);
}

/// A card first found as a claim (its public pointer) and found again once
/// the domain's TXT record names its key: the kept card's binding is
/// upgraded to dns (the core's KeepCard, fed by discovery), and a later
/// claim-only find does not take it back (SPEC §4.4 bindings).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_dns_find_upgrades_the_kept_binding_and_a_claim_does_not_undo_it() {
    let w = World::new().await;
    let bob = w
        .init("bob", &["--address", "bob@bob.test", "--public-pointer"])
        .await;
    w.init("alice", &[]).await;
    let (found, _) = w.discover("alice", "bob@bob.test").await;
    assert_eq!(found[0].1, "claimed");
    assert_eq!(w.kept("alice").await.get(&bob), Some(&Binding::Claimed));

    w.set_txt("_agent.bob.test", vec![record_for(&bob)]);
    let (found, _) = w.discover("alice", "bob@bob.test").await;
    assert_eq!(found[0].1, "dns");
    assert_eq!(
        w.kept("alice").await.get(&bob),
        Some(&Binding::Dns),
        "the same card found by DNS left the kept binding as it was"
    );

    w.set_txt("_agent.bob.test", vec![]);
    let (found, _) = w.discover("alice", "bob@bob.test").await;
    assert_eq!(found[0].1, "claimed");
    assert_eq!(w.kept("alice").await.get(&bob), Some(&Binding::Dns));
}
