//! The gate over the corpus (tests/corpus/*.json): each case names its
//! .eml, how it arrives and the verdict it must get. DNS is answered by a
//! real server on loopback serving tests/corpus/zone.json.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use rdv_probe_gateway::auth::{SmtpSession, Verifier, VerifyConfig};
use rdv_probe_gateway::gate::{self, Arrival, AuthBackend};
use rdv_probe_gateway::limits::{LimitConfig, Limits};
use rdv_proto::Address;
use serde_json::{Value, json};

fn load(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn eml(name: &str) -> Vec<u8> {
    if name == "generated:25MB" {
        // A well-formed probe padded to 25 MB with an ASCII body.
        let mut m = probe_mail(
            "0b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1cff",
            "john@doe.test",
            "alice@sender.test",
            "2026-10-08T11:00:00Z",
            rdv_proto::mailblock::TransferEncoding::QuotedPrintable,
        );
        let line = b"padding padding padding padding padding padding padding padding pad\r\n";
        while m.len() < 25 * 1024 * 1024 {
            m.extend_from_slice(line);
        }
        return m;
    }
    std::fs::read(corpus_dir().join(name)).unwrap()
}

async fn run_case(case: &Value, limits: &Mutex<Limits>) -> Value {
    let mut zone = load(&corpus_dir().join("zone.json"));
    if let Some(o) = case.get("zone_overrides") {
        let names: Vec<&str> = o
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        let arr = zone.as_array_mut().unwrap();
        arr.retain(|r| !names.contains(&r["name"].as_str().unwrap()));
        arr.extend(o.as_array().unwrap().iter().cloned());
    }
    let backend = match case["mode"].as_str().unwrap() {
        "verify" => {
            let ns = dns_server(load_zone(&zone)).await;
            AuthBackend::Verify(Box::new(
                Verifier::new(VerifyConfig {
                    nameservers: vec![ns],
                    query_timeout: Duration::from_secs(3),
                    total_timeout: Duration::from_secs(10),
                    host_domain: "gateway.test".into(),
                })
                .unwrap(),
            ))
        }
        "trusted" => {
            AuthBackend::Trusted(serde_json::from_value(case["authserv_ids"].clone()).unwrap())
        }
        m => panic!("mode {m}"),
    };
    let session: Option<SmtpSession> = case
        .get("session")
        .map(|s| serde_json::from_value(s.clone()).unwrap());
    let mailbox = Address::parse(case["mailbox"].as_str().unwrap()).unwrap();
    let agent = recipient_agent().id().clone();
    let arrival = Arrival {
        mailbox: &mailbox,
        agent: Some(&agent),
        max_bytes: rdv_proto::consts::MAIL_MAX_BYTES,
    };
    let raw = eml(case["eml"].as_str().unwrap());
    match gate::run(&raw, &arrival, session.as_ref(), &backend, limits, t(NOW)).await {
        Ok(a) => json!({
            "outcome": "admitted",
            "kind": a.screened.kind_name(),
            "dkim": a.auth.dkim,
            "spf": a.auth.spf,
            "dmarc": a.auth.dmarc,
            "arc": a.auth.arc,
            "binding": a.binding,
        }),
        Err(r) => json!({"outcome": "refused", "refusal": r.code()}),
    }
}

#[tokio::test]
async fn corpus() {
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && n != "zone.json")
        .collect();
    names.sort();
    assert!(names.len() >= 25, "the corpus is (nearly) empty: {names:?}");
    let mut failures = Vec::new();
    let mut admitted = 0;
    for name in &names {
        let case = load(&corpus_dir().join(name));
        let limits = Mutex::new(Limits::new(LimitConfig::default()));
        if let Some(first) = case.get("preceded_by") {
            let first = load(&corpus_dir().join(format!("{}.json", first.as_str().unwrap())));
            let got = run_case(&first, &limits).await;
            assert_eq!(got["outcome"], "admitted", "{name}: the first copy");
        }
        let got = run_case(&case, &limits).await;
        if got["outcome"] == "admitted" {
            admitted += 1;
        }
        if got != case["expect"] {
            failures.push(format!("{name}: got {got}, expected {}", case["expect"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Both outcomes are exercised.
    assert!(admitted >= 5 && admitted < names.len());
}
