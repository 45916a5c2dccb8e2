//! End to end over real parts (issue #4 "Tests and figures"; §5.2.1): the
//! `rdv-probe-gateway serve` binary, trusted auth, its SMTP listener on
//! 127.0.0.1:0 fed by Python smtplib (tests/python/smtp_client.py), and
//! outbound mode "smtp" to an aiosmtpd sink (tests/python/smtp_sink.py)
//! with RSA and Ed25519 DKIM keys for its mail domain, verified by dkimpy
//! (tests/python/dkim_verify.py, DNS answered from tests/outbound-keys/).
//!
//! B proves its mailbox by the code mail; A's probe, forwarded to B's
//! gateway address, reaches B's inbox needing the cookie; B's SYN-ACK goes
//! out signed; a wrong cookie and another probe's cookie release nothing;
//! the echoed cookie from the SYN-ACK releases the probe. On SQLite and on
//! Postgres (`RDV_TEST_POSTGRES_URL`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use common::{recipient_agent, requester};
use mail_parser::MessageParser;
use rdv_probe_gateway::signed;
use rdv_proto::AgentKey;
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::doc::grant::{GrantBuilder, GrantRef};
use rdv_proto::doc::request::RequestBuilder;
use rdv_proto::mailblock::{self, BlockPayload, MailParams, TransferEncoding};
use rdv_service_kit::testing::PgTestDb;
use serde_json::{Value, json};

/// The gateway's mail domain (gateway addresses, DKIM `d=`).
const DOMAIN: &str = "gw.test";
/// The authserv-id the gateway trusts.
const AUTHSERV: &str = "mx.trusted.test";
/// A's mailbox (the requester), B's (the recipient).
const ALICE: &str = "alice@sender.test";
const JOHN: &str = "john@doe.test";
const ID: &str = "5e5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const ID2: &str = "5e5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02";
const GRANT_ID: &str = "6f5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
/// The DKIM records dkimpy is answered with (the test-only keys).
const RECORDS: [(&str, &str); 2] = [
    ("r._domainkey.gw.test", "rsa2048.txt"),
    ("e._domainkey.gw.test", "ed25519.txt"),
];

use common::relay::{Sink, keys_dir, manifest, python, verdicts};

/// dkimpy's (d, a, ok) per DKIM-Signature, sorted.
fn dkimpy(raw: &[u8]) -> Vec<(String, String, bool)> {
    let mut r = verdicts(&common::relay::dkimpy(raw, &RECORDS));
    r.sort();
    r
}

/// Both keys of the mail domain signed and dkimpy verifies both (or, with
/// `ok` false, refuses both).
fn signed_by_domain(ok: bool) -> Vec<(String, String, bool)> {
    vec![
        (DOMAIN.into(), "ed25519-sha256".into(), ok),
        (DOMAIN.into(), "rsa-sha256".into(), ok),
    ]
}

/// The `rdv-probe-gateway serve` process; killed on drop unless stopped.
struct Gateway {
    child: Child,
    stdout: BufReader<ChildStdout>,
    stderr: Option<JoinHandle<String>>,
    base: String,
    smtp: (String, String),
    nonce: u32,
}

impl Gateway {
    fn start(dir: &Path, relay_port: u16, database: Option<&str>) -> Self {
        let cfg = dir.join("gateway.toml");
        let key = |f: &str| keys_dir().join(f).display().to_string();
        std::fs::write(
            &cfg,
            format!(
                "smtp_hostname = \"{DOMAIN}\"\n\
                 [auth.trusted]\nauthserv_ids = [\"{AUTHSERV}\"]\n\
                 [flows]\nmail_domain = \"{DOMAIN}\"\n\
                 [outbound]\nmode = \"smtp\"\nfrom_address = \"rdv-gateway@{DOMAIN}\"\n\
                 relay_host = \"127.0.0.1\"\nrelay_port = {relay_port}\ntls = \"none\"\n\
                 timeout_secs = 20\n\
                 [[outbound.dkim]]\ndomain = \"{DOMAIN}\"\nselector = \"r\"\n\
                 key_file = \"{}\"\nalgorithm = \"rsa-sha256\"\n\
                 [[outbound.dkim]]\ndomain = \"{DOMAIN}\"\nselector = \"e\"\n\
                 key_file = \"{}\"\nalgorithm = \"ed25519-sha256\"\n",
                key("rsa2048.pem"),
                key("ed25519.pem"),
            ),
        )
        .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdv-probe-gateway"));
        cmd.args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--smtp-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--data-dir")
        .arg(dir);
        if let Some(db) = database {
            cmd.args(["--database", db]);
        }
        let mut child = cmd
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line: {line:?}"))
            .to_string();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let smtp = line
            .trim()
            .strip_prefix("listening on smtp://")
            .and_then(|a| a.rsplit_once(':'))
            .map(|(h, p)| (h.to_string(), p.to_string()))
            .unwrap_or_else(|| panic!("second line: {line:?}"));
        Self {
            child,
            stdout,
            stderr: Some(stderr),
            base,
            smtp,
            nonce: 0,
        }
    }

    /// A request signed by `key` (§4.6 `rdv/gw-request`, system clock).
    fn call(&mut self, key: &AgentKey, method: &str, path: &str, body: &Value) -> (u16, Value) {
        self.nonce += 1;
        let id = format!("00000000-0000-4000-8000-{:012x}", self.nonce);
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let h = signed::sign(
            key,
            method,
            path,
            &body,
            &id,
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
        let req = ureq::request(method, &format!("{}{path}", self.base))
            .set(signed::AUTH_HEADER, &h)
            .set("content-type", "application/json");
        let res = if method == "GET" {
            req.call()
        } else {
            req.send_bytes(&body)
        };
        let r = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("transport: {e}"),
        };
        let st = r.status();
        let text = r.into_string().unwrap();
        (
            st,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    fn inbox(&mut self, key: &AgentKey) -> Vec<Value> {
        let (st, v) = self.call(key, "GET", "/v1/inbox", &Value::Null);
        assert_eq!(st, 200, "{v}");
        v["items"].as_array().unwrap().clone()
    }

    /// One SMTP transaction by smtplib to the listener: the replies to
    /// MAIL, RCPT and DATA.
    fn smtp_send(&self, dir: &Path, mail_from: &str, rcpt: &str, raw: &[u8]) -> Vec<Value> {
        let eml = dir.join(format!("in-{}.eml", raw.len()));
        std::fs::write(&eml, raw).unwrap();
        let steps = json!([
            ["ehlo", "mx.sender.test"],
            ["cmd", format!("MAIL FROM:<{mail_from}>")],
            ["cmd", format!("RCPT TO:<{rcpt}>")],
            ["data_file", eml.display().to_string()],
            ["quit"],
        ]);
        let out = Command::new(python())
            .arg(manifest().join("tests/python/smtp_client.py"))
            .args([&self.smtp.0, &self.smtp.1, &steps.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        v[2..5].to_vec()
    }

    /// SIGTERM: exits 0; returns everything it printed.
    fn stop(mut self) -> String {
        let st = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "graceful shutdown exits 0: {exit:?}");
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        self.stderr.take().unwrap().join().unwrap() + &rest
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// A card created an hour ago (the binary runs on the system clock).
fn card(key: &AgentKey) -> Value {
    CardBuilder::new(
        now() - time::Duration::hours(1),
        vec!["wss://relay.example.org".into()],
    )
    .sign(key)
    .unwrap()
}

/// A's probe mail for B's mailbox (to_hint = JOHN), composed by the core,
/// behind the trusted MTA's Authentication-Results: DMARC fail, so the
/// binding needs the cookie.
fn probe_from_alice(id: &str) -> Vec<u8> {
    let a = requester();
    let request = RequestBuilder {
        id: id.into(),
        to_hint: Some(JOHN.into()),
        card: card(&a),
        greeting: "Alice's agent requests contact on Alice's behalf.".into(),
        capabilities_offered: vec!["a2a/0.3".into()],
        ts: now() - time::Duration::minutes(1),
    }
    .sign(&a)
    .unwrap();
    let message_id = format!("<{id}@sender.test>");
    let mail = mailblock::compose(
        &mailblock::probe_payload(&request),
        &MailParams {
            from: ALICE,
            to: JOHN,
            date: now(),
            message_id: &message_id,
            encoding: TransferEncoding::QuotedPrintable,
            subject_line: None,
            intro: None,
        },
    )
    .unwrap();
    let mut raw = format!(
        "Authentication-Results: {AUTHSERV}; dkim=none; spf=fail smtp.mailfrom=sender.test; \
         dmarc=fail header.from=sender.test\r\n"
    )
    .into_bytes();
    raw.extend(mail);
    raw
}

#[test]
fn probe_syn_ack_and_release_over_real_mail_sqlite() {
    run(None);
}

#[test]
fn probe_syn_ack_and_release_over_real_mail_postgres() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(PgTestDb::create("rdv_gw_e2e")).unwrap();
    // Dropped whatever the outcome, then the failure (if any) reported.
    let outcome = std::panic::catch_unwind(|| run(Some(&db.url)));
    rt.block_on(db.drop_db()).unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

fn run(database: Option<&str>) {
    let sink = Sink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mut gw = Gateway::start(dir.path(), sink.port, database);
    let (alice, john) = (requester(), recipient_agent());

    // a) B registers its mailbox; the proof-code mail reaches the relay,
    // DKIM-signed for the gateway's domain; B verifies with the code.
    let (st, v) = gw.call(&john, "POST", "/v1/register", &json!({"mailbox": JOHN}));
    assert_eq!(st, 202, "{v}");
    let code_mail = sink.next();
    assert_eq!(code_mail.mail_from, format!("rdv-gateway@{DOMAIN}"));
    assert_eq!(code_mail.rcpt_tos, vec![JOHN.to_string()]);
    assert_eq!(dkimpy(&code_mail.data), signed_by_domain(true));
    let text = String::from_utf8(code_mail.data).unwrap();
    let code = text
        .split_once("type this code into it: ")
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let (st, v) = gw.call(
        &john,
        "POST",
        "/v1/verify",
        &json!({"mailbox": JOHN, "code": "AAAAAAAA"}),
    );
    assert_eq!(st, 403, "a wrong code: {v}");
    let (st, v) = gw.call(
        &john,
        "POST",
        "/v1/verify",
        &json!({"mailbox": JOHN, "code": code}),
    );
    assert_eq!(st, 200, "{v}");
    let token = v["token"].as_str().unwrap().to_string();
    let ga = v["gateway_address"].as_str().unwrap().to_string();
    let tag = ga
        .strip_suffix(&format!("@{DOMAIN}"))
        .and_then(|l| l.strip_prefix("rdv+"))
        .unwrap_or_else(|| panic!("gateway address {ga}"));
    assert_eq!(tag.len(), 10, "{ga}");
    let (st, v) = gw.call(&john, "GET", "/v1/mailboxes", &Value::Null);
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["mailboxes"],
        json!([{"mailbox": JOHN, "gateway_address": ga}])
    );

    // b) A's probe, forwarded by B's provider to B's gateway address, over
    // real SMTP.
    let r = gw.smtp_send(dir.path(), ALICE, &ga, &probe_from_alice(ID));
    let codes: Vec<_> = r.iter().map(|x| x[0].as_i64().unwrap()).collect();
    assert_eq!(codes, vec![250, 250, 250], "{r:?}");

    // c) B's agent API: the probe, needing the cookie.
    let items = gw.inbox(&john);
    assert_eq!(items.len(), 1, "{items:?}");
    let probe = &items[0];
    assert_eq!(
        (
            &probe["kind"],
            &probe["id"],
            &probe["mailbox"],
            &probe["sender"],
            &probe["requester"],
            &probe["status"],
            &probe["binding"],
        ),
        (
            &json!("probe"),
            &json!(ID),
            &json!(JOHN),
            &json!(ALICE),
            &json!(alice.id().as_str()),
            &json!("pending"),
            &json!("needs_cookie"),
        ),
        "{probe}"
    );
    assert_eq!(probe["auth"]["dmarc"], "fail", "{probe}");
    let seq = probe["seq"].as_i64().unwrap();
    let cookie = probe["cookie"].as_str().unwrap().to_string();
    assert_eq!(cookie.len(), 26, "{cookie}");
    // A is no agent of this gateway: nothing for it, nothing sent yet.
    let (st, v) = gw.call(&alice, "GET", "/v1/inbox", &Value::Null);
    assert_eq!((st, &v["error"]), (403, &json!("unregistered")));
    sink.assert_quiet(Duration::from_millis(200));

    // d) B's SYN-ACK: a grant by B for A's request, B's card inside.
    let grant = GrantBuilder {
        id: GRANT_ID.into(),
        to: alice.id().clone(),
        reference: GrantRef::Request(ID.into()),
        card: card(&john),
        tier: "stranger".into(),
        scope: json!({"may_initiate": true}),
        expires: None,
        ts: now(),
    }
    .sign(&john)
    .unwrap();
    let (st, v) = gw.call(
        &john,
        "POST",
        "/v1/send/syn-ack",
        &json!({"seq": seq, "grant": grant}),
    );
    assert_eq!(st, 202, "{v}");
    assert_eq!((&v["status"], &v["seq"]), (&json!("sent"), &json!(seq)));
    let synack = sink.next();
    assert_eq!(synack.mail_from, ga, "the envelope sender is the From");
    assert_eq!(synack.rcpt_tos, vec![ALICE.to_string()]);
    let m = MessageParser::default().parse(&synack.data).unwrap();
    let subject = m.subject().unwrap();
    assert!(subject.starts_with("[RDV-PROBE-ACK]"), "{subject}");
    let x_rdv = m.header_raw("X-Rdv-Probe").unwrap();
    assert!(x_rdv.contains(ID), "{x_rdv}");
    assert_eq!(
        m.header_raw("Auto-Submitted").unwrap().trim(),
        "auto-generated"
    );
    let tos: Vec<_> = m.to().unwrap().iter().collect();
    assert_eq!(tos.len(), 1);
    assert_eq!(tos[0].address.as_deref(), Some(ALICE));
    assert!(m.cc().is_none() && m.bcc().is_none());
    let froms: Vec<_> = m.from().unwrap().iter().collect();
    assert_eq!(froms.len(), 1);
    assert_eq!(froms[0].address.as_deref(), Some(ga.as_str()));
    assert_eq!(
        m.message_id().map(|id| id.ends_with(&format!("@{DOMAIN}"))),
        Some(true)
    );
    assert_eq!(
        v["message_id"].as_str().map(|s| s.trim_matches(['<', '>'])),
        m.message_id()
    );
    assert_eq!(dkimpy(&synack.data), signed_by_domain(true));
    // The signature covers the X-Rdv-Probe header: altered, both fail.
    let text = String::from_utf8(synack.data.clone()).unwrap();
    let tampered = text.replacen(&format!("id={ID}"), &format!("id={ID2}"), 1);
    assert_ne!(tampered, text);
    assert_eq!(dkimpy(tampered.as_bytes()), signed_by_domain(false));
    // A's side: the block, verified by the core, carries B's grant and
    // the cookie of B's inbox item.
    let block = mailblock::extract_block(&synack.data).unwrap();
    let BlockPayload::ProbeAck(ack) = mailblock::parse_payload(&block, now(), false).unwrap()
    else {
        panic!("not a SYN-ACK: {block}");
    };
    assert_eq!(
        (&ack.grant.from, &ack.grant.to, &ack.grant.card.id),
        (john.id(), alice.id(), john.id())
    );
    assert_eq!(ack.grant.reference, GrantRef::Request(ID.into()));
    let echoed = ack.cookie.clone();
    assert_eq!(echoed, cookie);
    let items = gw.inbox(&john);
    assert_eq!(items[0]["status"], "answered");

    // e) The ACK leg by API. A wrong cookie: 403, nothing released.
    let (st, v) = gw.call(
        &john,
        "POST",
        "/v1/ack",
        &json!({"seq": seq, "cookie": "a".repeat(26)}),
    );
    assert_eq!((st, &v["error"]), (403, &json!("bad_cookie")), "{v}");
    // f) A live cookie of another probe (same requester and mailbox, over
    // the same path) does not release this one. The expired cookie is
    // covered with the injected clock in tests/flows.rs
    // (`ack_through_the_api`: 14 days on, `/v1/ack` with the right cookie
    // is 410 expired): this binary runs on the system clock, and the gate
    // refuses a probe dated past its lifetime on arrival.
    let r = gw.smtp_send(dir.path(), ALICE, JOHN, &probe_from_alice(ID2));
    assert_eq!(r[2][0], 250, "{r:?}");
    let items = gw.inbox(&john);
    let second = items.iter().find(|i| i["id"] == ID2).unwrap();
    let seq2 = second["seq"].as_i64().unwrap();
    let cookie2 = second["cookie"].as_str().unwrap().to_string();
    assert_ne!(cookie2, cookie);
    let (st, v) = gw.call(
        &john,
        "POST",
        "/v1/ack",
        &json!({"seq": seq, "cookie": cookie2}),
    );
    assert_eq!(
        (st, &v["error"]),
        (403, &json!("bad_cookie")),
        "another probe's cookie: {v}"
    );
    let items = gw.inbox(&john);
    assert_eq!(items.len(), 2, "no release item: {items:?}");
    assert_eq!(
        (&items[0]["status"], &items[1]["status"]),
        (&json!("answered"), &json!("pending"))
    );

    // The cookie echoed from the SYN-ACK releases the probe.
    let (st, v) = gw.call(
        &john,
        "POST",
        "/v1/ack",
        &json!({"seq": seq, "cookie": echoed}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v,
        json!({"status": "released", "seq": seq, "request_id": ID,
               "requester": alice.id().as_str(), "mailbox": JOHN, "via": "api"})
    );
    let items = gw.inbox(&john);
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0]["status"], "released");
    assert_eq!(
        items[1]["status"], "pending",
        "the other probe is untouched"
    );
    let rel = &items[2];
    assert_eq!(
        (
            &rel["kind"],
            &rel["request_id"],
            &rel["requester"],
            &rel["mailbox"],
            &rel["probe_seq"],
            &rel["via"]
        ),
        (
            &json!("release"),
            &json!(ID),
            &json!(alice.id().as_str()),
            &json!(JOHN),
            &json!(seq),
            &json!("api")
        )
    );
    // The second probe's cookie still works for the second probe only.
    let (st, v) = gw.call(
        &john,
        "POST",
        "/v1/ack",
        &json!({"seq": seq2, "cookie": cookie}),
    );
    assert_eq!((st, &v["error"]), (403, &json!("bad_cookie")), "{v}");
    sink.assert_quiet(Duration::from_millis(200));

    let logs = gw.stop();
    assert!(logs.contains("listening"), "{logs}");
    for (what, s) in [
        ("code", code.as_str()),
        ("cookie", cookie.as_str()),
        ("other cookie", cookie2.as_str()),
        ("token secret", token.rsplit('.').next().unwrap()),
        ("greeting", "requests contact on"),
    ] {
        assert!(!logs.contains(s), "the {what} leaked into the logs");
    }
}
