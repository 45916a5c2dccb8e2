//! Shared test fixtures: a requester agent, probe mails, and a real DNS
//! server on loopback that serves the test zone (never the internet).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod env;
pub mod relay;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{RData, Record, RecordType};
use rdv_proto::AgentKey;
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::doc::request::RequestBuilder;
use rdv_proto::mailblock::{self, MailParams, TransferEncoding};
use rdv_proto::time::{Instant, parse_time};
use serde_json::Value;
use tokio::net::UdpSocket;

pub fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

pub fn t(s: &str) -> Instant {
    parse_time("t", s).unwrap()
}

/// The corpus clock.
pub const NOW: &str = "2026-10-08T12:00:00Z";

pub fn requester() -> AgentKey {
    AgentKey::from_seed([7; 32])
}

pub fn recipient_agent() -> AgentKey {
    AgentKey::from_seed([9; 32])
}

pub fn card(key: &AgentKey) -> Value {
    CardBuilder::new(
        t("2026-10-01T00:00:00Z"),
        vec!["wss://relay.example.org".into()],
    )
    .sign(key)
    .unwrap()
}

/// A signed contact request from [`requester`].
pub fn request(id: &str, to_hint: &str, ts: &str) -> Value {
    let key = requester();
    RequestBuilder {
        id: id.into(),
        to_hint: Some(to_hint.into()),
        card: card(&key),
        greeting: "Alice's agent requests contact on Alice's behalf.".into(),
        capabilities_offered: vec!["a2a/0.3".into()],
        ts: t(ts),
    }
    .sign(&key)
    .unwrap()
}

/// A composed probe mail.
pub fn probe_mail(id: &str, to: &str, from: &str, ts: &str, enc: TransferEncoding) -> Vec<u8> {
    let payload = mailblock::probe_payload(&request(id, to, ts));
    compose(&payload, to, from, enc)
}

pub fn compose(payload: &Value, to: &str, from: &str, enc: TransferEncoding) -> Vec<u8> {
    mailblock::compose(
        payload,
        &MailParams {
            from,
            to,
            date: t("2026-10-08T11:00:00Z"),
            message_id: "<probe-1@sender.test>",
            encoding: enc,
            subject_line: None,
            intro: None,
        },
    )
    .unwrap()
}

/// One answer of the test zone.
#[derive(Debug, Clone)]
pub enum Answer {
    Txt(Vec<String>),
    ServFail,
}

/// The zone file format of tests/corpus/zone.json: `[{name, type, data}]`,
/// `type` TXT (data a string) or SERVFAIL.
pub fn load_zone(v: &Value) -> HashMap<String, Answer> {
    let mut zone: HashMap<String, Answer> = HashMap::new();
    for r in v.as_array().unwrap() {
        let name = r["name"]
            .as_str()
            .unwrap()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        match r["type"].as_str().unwrap() {
            "TXT" => {
                let data = r["data"].as_str().unwrap().to_string();
                match zone.entry(name).or_insert_with(|| Answer::Txt(Vec::new())) {
                    Answer::Txt(v) => v.push(data),
                    Answer::ServFail => {}
                }
            }
            "SERVFAIL" => {
                zone.insert(name, Answer::ServFail);
            }
            t => panic!("unknown record type {t}"),
        }
    }
    zone
}

/// A DNS server on 127.0.0.1:0 (UDP) answering TXT from `zone`, NXDOMAIN
/// for anything else. Runs until the runtime ends.
pub async fn dns_server(zone: HashMap<String, Answer>) -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let zone = Arc::new(zone);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                return;
            };
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut resp = Message::response(q.metadata.id, q.metadata.op_code);
            resp.metadata.message_type = MessageType::Response;
            resp.metadata.recursion_desired = q.metadata.recursion_desired;
            resp.metadata.recursion_available = true;
            resp.metadata.authoritative = true;
            resp.edns = q.edns.clone();
            let mut code = ResponseCode::NXDomain;
            for query in &q.queries {
                resp.add_query(query.clone());
                let name = query
                    .name()
                    .to_ascii()
                    .trim_end_matches('.')
                    .to_ascii_lowercase();
                match zone.get(&name) {
                    Some(Answer::ServFail) => code = ResponseCode::ServFail,
                    Some(Answer::Txt(txts)) => {
                        code = ResponseCode::NoError;
                        if query.query_type() == RecordType::TXT {
                            for txt in txts {
                                // Split into 255-byte character-strings.
                                let chunks = txt
                                    .as_bytes()
                                    .chunks(255)
                                    .map(|c| String::from_utf8_lossy(c).into_owned())
                                    .collect();
                                resp.add_answer(Record::from_rdata(
                                    query.name().clone(),
                                    60,
                                    RData::TXT(TXT::new(chunks)),
                                ));
                            }
                        }
                    }
                    None => {}
                }
            }
            resp.metadata.response_code = code;
            if let Ok(bytes) = resp.to_vec() {
                let _ = sock.send_to(&bytes, peer).await;
            }
        }
    });
    addr
}
