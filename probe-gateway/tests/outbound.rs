//! Outbound mail against real parts: an aiosmtpd relay on 127.0.0.1:0
//! (tests/python/smtp_sink.py) and dkimpy verifying the DKIM signatures
//! (tests/python/dkim_verify.py, DNS answered from the key files). Covers
//! byte-exact delivery with the envelope, RSA-2048 and Ed25519 signatures,
//! tampering, unsigned domains, STARTTLS against the test CA, SMTP AUTH
//! from the password file, 5xx/4xx and unreachable relays, the `[outbound]` config checks, and the binary
//! mailing a DKIM-signed proof code through the relay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use rdv_probe_gateway::clock::{Clock, ManualClock};
use rdv_probe_gateway::config::Config;
use rdv_probe_gateway::mailer::{self, OutboundConfig, OutboundMail, SendError, plain_message};
use serde_json::{Value, json};

const CANARY: &str = "CANARY-OUTBOUND-BODY-5521";

use common::relay::{Sink, dkimpy, keys_dir, manifest, verdicts as ok_all};

/// The first header field of `raw` and the rest.
fn split_first_field(raw: &[u8]) -> (&[u8], &[u8]) {
    let mut i = 0;
    loop {
        let nl = raw[i..].windows(2).position(|w| w == b"\r\n").unwrap() + i + 2;
        if !matches!(raw.get(nl), Some(b' ' | b'\t')) {
            return raw.split_at(nl);
        }
        i = nl;
    }
}

const RECORDS: [(&str, &str); 4] = [
    ("s1._domainkey.rsa.test", "rsa2048.txt"),
    ("s2._domainkey.ed.test", "ed25519.txt"),
    ("r._domainkey.both.test", "rsa2048.txt"),
    ("e._domainkey.both.test", "ed25519.txt"),
];

/// 2026-10-08T12:00:00Z: in the past, so dkimpy accepts `t=`.
const SIGN_TIME: i64 = 1_791_460_800;

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        time::OffsetDateTime::from_unix_timestamp(SIGN_TIME).unwrap(),
    ))
}

fn smtp_config(port: u16) -> OutboundConfig {
    let k = |domain: &str, selector: &str, file: &str, alg: &str| {
        toml_value(&format!(
            "domain = \"{domain}\"\nselector = \"{selector}\"\nkey_file = \"{}\"\nalgorithm = \"{alg}\"",
            keys_dir().join(file).display()
        ))
    };
    let cfg = Config::from_toml(&format!(
        "[outbound]\nmode = \"smtp\"\nfrom_address = \"gw@rsa.test\"\nrelay_host = \"127.0.0.1\"\n\
         relay_port = {port}\ntls = \"none\"\ntimeout_secs = 20\nhello_name = \"gw.test\"\n\
         {}{}{}{}",
        k("rsa.test", "s1", "rsa2048.pem", "rsa-sha256"),
        k("ed.test", "s2", "ed25519.pem", "ed25519-sha256"),
        k("Both.Test", "r", "rsa2048-pkcs8.pem", "rsa-sha256"),
        k("both.test", "e", "ed25519.pem", "ed25519-sha256"),
    ))
    .unwrap();
    cfg.outbound
}

fn toml_value(fields: &str) -> String {
    format!("[[outbound.dkim]]\n{fields}\n")
}

fn build(cfg: &OutboundConfig, outbox: &Path) -> Arc<dyn OutboundMail> {
    let c: Arc<dyn Clock> = clock();
    mailer::build(cfg, outbox.to_path_buf(), "gw.test", c).unwrap()
}

fn build_err(cfg: &OutboundConfig, outbox: &Path, c: Arc<dyn Clock>) -> String {
    match mailer::build(cfg, outbox.to_path_buf(), "gw.test", c) {
        Ok(_) => panic!("built"),
        Err(e) => e.to_string(),
    }
}

fn message(from: &str, to: &str) -> mailer::OutboundMessage {
    let mut m = plain_message(
        from,
        to,
        "[RDV-PROBE] bot discovery request",
        &format!("Hello.\r\n.leading dot line\r\n{CANARY}\r\n"),
        "Thu, 08 Oct 2026 12:00:00 +0000",
        "<m1@gw.test>",
    );
    let mut raw = b"X-Rdv-Probe: v=1; id=00000000-0000-4000-8000-000000000001\r\n".to_vec();
    raw.extend_from_slice(&m.raw);
    m.raw = raw;
    m
}

#[tokio::test]
async fn delivers_exact_bytes_signed_and_verified_by_dkimpy() {
    let sink = Sink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let m = build(&smtp_config(sink.port), dir.path());

    for (domain, alg) in [("rsa.test", "rsa-sha256"), ("ed.test", "ed25519-sha256")] {
        let msg = message(&format!("Gateway <gw@{domain}>"), "John@Doe.test");
        let msg = mailer::OutboundMessage {
            envelope_from: format!("bounces@{domain}"),
            ..msg
        };
        m.send(&msg).await.unwrap();
        let got = sink.next();
        assert_eq!(got.mail_from, format!("bounces@{domain}"));
        assert_eq!(got.rcpt_tos, vec!["John@Doe.test".to_string()]);
        assert!(!got.tls);
        // Exactly one DKIM-Signature in front of the message, byte for byte
        // (the line starting with a dot survived dot-stuffing).
        let (sig, rest) = split_first_field(&got.data);
        assert!(sig.starts_with(b"DKIM-Signature: "), "{sig:?}");
        assert_eq!(rest, &msg.raw[..], "the message arrives unchanged");
        let sig = String::from_utf8(sig.to_vec())
            .unwrap()
            .replace("\r\n\t", "");
        assert!(sig.contains(&format!("d={domain};")), "{sig}");
        assert!(sig.contains(&format!("a={alg};")), "{sig}");
        assert!(sig.contains(&format!("t={SIGN_TIME};")), "{sig}");
        assert!(sig.to_ascii_lowercase().contains("x-rdv-probe"), "{sig}");
        let v = dkimpy(&got.data, &RECORDS);
        assert_eq!(ok_all(&v), vec![(domain.into(), alg.into(), true)], "{v}");

        // Tampering after signing fails: the body, then a signed header.
        let tampered = String::from_utf8(got.data.clone())
            .unwrap()
            .replace(CANARY, "CANARY-CHANGED");
        let v = dkimpy(tampered.as_bytes(), &RECORDS);
        assert_eq!(ok_all(&v), vec![(domain.into(), alg.into(), false)], "{v}");
        let tampered = String::from_utf8(got.data.clone())
            .unwrap()
            .replace("id=00000000-0000-4000-8000-000000000001", "id=evil");
        let v = dkimpy(tampered.as_bytes(), &RECORDS);
        assert_eq!(ok_all(&v), vec![(domain.into(), alg.into(), false)], "{v}");
    }

    // Two keys for one domain (case-insensitive): RSA and Ed25519 both.
    m.send(&message("gw@BOTH.test", "x@doe.test"))
        .await
        .unwrap();
    let got = sink.next();
    let v = dkimpy(&got.data, &RECORDS);
    let mut r = ok_all(&v);
    r.sort();
    assert_eq!(
        r,
        vec![
            ("both.test".into(), "ed25519-sha256".into(), true),
            ("both.test".into(), "rsa-sha256".into(), true),
        ],
        "{v}"
    );

    // No key for the From domain: unsigned, unchanged.
    let msg = message("gw@nokey.test", "x@doe.test");
    m.send(&msg).await.unwrap();
    let got = sink.next();
    assert_eq!(got.data, msg.raw);
    assert_eq!(dkimpy(&got.data, &RECORDS)["signatures"], 0);
}

#[tokio::test]
async fn starttls_with_private_ca() {
    let tls = manifest().join("tests/tls");
    let cert = tls.join("cert.pem").display().to_string();
    let key = tls.join("key.pem").display().to_string();
    let sink = Sink::start(&["--tls", &cert, &key]);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = smtp_config(sink.port);
    cfg.tls = mailer::RelayTls::Starttls;
    cfg.ca_file = Some(tls.join("ca.pem"));
    let m = build(&cfg, dir.path());
    let msg = message("gw@ed.test", "x@doe.test");
    m.send(&msg).await.unwrap();
    let got = sink.next();
    assert!(got.tls, "delivered inside TLS");
    assert!(got.data.ends_with(&msg.raw));
    let v = dkimpy(&got.data, &RECORDS);
    assert_eq!(
        ok_all(&v),
        vec![("ed.test".into(), "ed25519-sha256".into(), true)]
    );

    // The Mozilla roots do not know the test CA: refused, retryable.
    cfg.ca_file = None;
    let m = build(&cfg, dir.path());
    let e = m.send(&msg).await.unwrap_err();
    assert!(matches!(e, SendError::Temporary(_)), "{e}");
    // Plaintext to a relay that requires STARTTLS: its 530 is permanent.
    cfg.tls = mailer::RelayTls::None;
    let m = build(&cfg, dir.path());
    let e = m.send(&msg).await.unwrap_err();
    assert!(
        matches!(e, SendError::Permanent(ref t) if t.contains("530")),
        "{e}"
    );
}

#[tokio::test]
async fn relay_refusals_and_unreachable_relay_classified() {
    let dir = tempfile::tempdir().unwrap();
    let msg = message("gw@rsa.test", "x@doe.test");
    for (reply, permanent) in [
        ("550 5.7.1 Rejected by the test relay", true),
        ("451 4.3.0 Try again later", false),
    ] {
        let sink = Sink::start(&["--reject", reply]);
        let m = build(&smtp_config(sink.port), dir.path());
        let e = m.send(&msg).await.unwrap_err();
        let code = &reply[..3];
        match (&e, permanent) {
            (SendError::Permanent(t), true) | (SendError::Temporary(t), false) => {
                assert!(t.contains(code), "{t}")
            }
            _ => panic!("{reply}: {e:?}"),
        }
        assert!(!e.to_string().contains(CANARY), "no message in errors");
    }
    // A closed port: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let m = build(&smtp_config(port), dir.path());
    let e = m.send(&msg).await.unwrap_err();
    assert!(matches!(e, SendError::Temporary(_)), "{e}");
    assert!(!e.to_string().contains(CANARY));
}

#[tokio::test]
async fn relay_auth_with_the_password_file() {
    let sink = Sink::start(&["--auth", "rdv-gw", "pw-from-file-8812"]);
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("relay-password");
    let msg = message("gw@rsa.test", "x@doe.test");
    let mut cfg = smtp_config(sink.port);
    cfg.username = Some("rdv-gw".into());
    cfg.password_file = Some(pw.clone());
    std::fs::write(&pw, "pw-from-file-8812\n").unwrap();
    build(&cfg, dir.path()).send(&msg).await.unwrap();
    assert!(sink.next().data.ends_with(&msg.raw));
    // A wrong password: the relay's 535 is permanent.
    std::fs::write(&pw, "wrong\n").unwrap();
    let e = build(&cfg, dir.path()).send(&msg).await.unwrap_err();
    assert!(
        matches!(e, SendError::Permanent(ref t) if t.contains("535")),
        "{e}"
    );
    // No credentials at all: the relay refuses MAIL with 530.
    cfg.username = None;
    cfg.password_file = None;
    let e = build(&cfg, dir.path()).send(&msg).await.unwrap_err();
    assert!(
        matches!(e, SendError::Permanent(ref t) if t.contains("530")),
        "{e}"
    );
}

#[tokio::test]
async fn spool_mode_signs_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = smtp_config(25);
    cfg.mode = mailer::OutboundMode::Spool;
    cfg.relay_host = None;
    cfg.relay_port = None;
    cfg.hello_name = None;
    let m = build(&cfg, &dir.path().join("outbox"));
    let msg = message("gw@rsa.test", "x@doe.test");
    m.send(&msg).await.unwrap();
    let files: Vec<_> = std::fs::read_dir(dir.path().join("outbox"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(files.len(), 1);
    assert!(files[0].ends_with(&msg.raw));
    let v = dkimpy(&files[0], &RECORDS);
    assert_eq!(
        ok_all(&v),
        vec![("rsa.test".into(), "rsa-sha256".into(), true)]
    );
}

#[test]
fn sample_config_outbound_parses() {
    let text = include_str!("../../docker/probe-gateway/config.toml");
    let c = Config::from_toml(text).unwrap();
    assert_eq!(c.outbound.mode, mailer::OutboundMode::Spool);
    assert!(c.outbound.from_address.contains('@'));
    // The commented smtp block, uncommented, parses too.
    let smtp: String = text
        .split("[outbound]")
        .nth(1)
        .unwrap()
        .lines()
        .map(|l| {
            l.strip_prefix("# ")
                .filter(|r| r.contains(" = ") || r.starts_with("[["))
                .unwrap_or(l)
        })
        .map(|l| if l.starts_with("mode = ") { "" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    let c = Config::from_toml(&format!("[outbound]\nmode = \"smtp\"{smtp}")).unwrap();
    assert_eq!(c.outbound.mode, mailer::OutboundMode::Smtp);
    assert_eq!(c.outbound.port(), 587);
    assert_eq!(c.outbound.dkim.len(), 2);
}

#[test]
fn bad_outbound_configs_refused_with_clear_errors() {
    let err = |t: &str| Config::from_toml(t).unwrap_err().to_string();
    let smtp = "[outbound]\nmode = \"smtp\"\n";
    for (toml, want) in [
        ("[outbound]\nfrom_address = \"nobody\"", "from_address"),
        (
            "[outbound]\nrelay_host = \"mx.test\"",
            "relay_host needs mode = \"smtp\"",
        ),
        ("[outbound]\nmode = \"carrier-pigeon\"", "mode"),
        ("[outbound]\nrelay = \"mx.test\"", "relay"),
        (smtp, "relay_host"),
        (&format!("{smtp}relay_host = \"mx .test\""), "relay_host"),
        (
            &format!("{smtp}relay_host = \"mx.test\"\nrelay_port = 0"),
            "relay_port",
        ),
        (
            &format!("{smtp}relay_host = \"mx.test\"\ntls = \"none\""),
            "loopback",
        ),
        (
            &format!("{smtp}relay_host = \"mx.test\"\ntls = \"ssl\""),
            "tls",
        ),
        (
            &format!("{smtp}relay_host = \"mx.test\"\nusername = \"u\""),
            "password_file",
        ),
        (
            &format!("{smtp}relay_host = \"mx.test\"\ntimeout_secs = 0"),
            "timeout_secs",
        ),
        (
            &format!("{smtp}relay_host = \"mx.test\"\nhello_name = \"a b\""),
            "hello_name",
        ),
        (
            "[[outbound.dkim]]\ndomain = \"a.test\"\nselector = \"s\"\nkey_file = \"/k\"\nalgorithm = \"rsa-sha1\"",
            "algorithm",
        ),
        (
            "[[outbound.dkim]]\ndomain = \"a.test\"\nselector = \"s\"\nkey_file = \"/k\"\nextra = 1",
            "extra",
        ),
        (
            "[[outbound.dkim]]\ndomain = \"a test\"\nselector = \"s\"\nkey_file = \"/k\"",
            "not a domain name",
        ),
    ] {
        let e = err(toml);
        assert!(e.contains(want), "{toml:?}: {e}");
    }
    // Plaintext to loopback, or anywhere when allowed explicitly.
    for ok in [
        format!("{smtp}relay_host = \"127.0.0.1\"\ntls = \"none\""),
        format!("{smtp}relay_host = \"localhost\"\ntls = \"none\""),
        format!("{smtp}relay_host = \"::1\"\ntls = \"none\""),
        format!("{smtp}relay_host = \"mx.test\"\ntls = \"none\"\nallow_plaintext = true"),
    ] {
        Config::from_toml(&ok).unwrap();
    }
    let c = Config::from_toml(&format!("{smtp}relay_host = \"mx.test\"\ntls = \"tls\"")).unwrap();
    assert_eq!(c.outbound.port(), 465);
}

#[test]
fn bad_key_files_stop_the_build_naming_the_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let secretish = dir.path().join("garbage.pem");
    std::fs::write(&secretish, "SECRET-KEY-MATERIAL-9931\n").unwrap();
    let c: Arc<dyn Clock> = clock();
    let with_key = |file: &Path, alg: &str| {
        Config::from_toml(&format!(
            "[[outbound.dkim]]\ndomain = \"a.test\"\nselector = \"s\"\nkey_file = \"{}\"\nalgorithm = \"{alg}\"",
            file.display()
        ))
        .unwrap()
        .outbound
    };
    for (file, alg, want) in [
        (secretish.clone(), "rsa-sha256", "not a PEM private key"),
        (dir.path().join("missing.pem"), "rsa-sha256", "not found"),
        (keys_dir().join("ed25519.pem"), "rsa-sha256", "not an RSA"),
        (
            keys_dir().join("rsa2048.pem"),
            "ed25519-sha256",
            "not an Ed25519",
        ),
    ] {
        let e = build_err(&with_key(&file, alg), dir.path(), c.clone());
        assert!(e.contains(&file.display().to_string()), "{e}");
        assert!(e.contains(want), "{e}");
        assert!(!e.contains("SECRET-KEY-MATERIAL"), "{e}");
    }
    // A CA file that is no certificate stops an smtp build.
    let mut cfg = smtp_config(25);
    cfg.tls = mailer::RelayTls::Starttls;
    cfg.ca_file = Some(secretish.clone());
    let e = build_err(&cfg, dir.path(), c);
    assert!(e.contains("ca_file") && e.contains("garbage.pem"), "{e}");
    assert!(!e.contains("SECRET-KEY-MATERIAL"), "{e}");
}

/// (status, body) of one HTTP request.
fn call(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let mut req = ureq::request(method, url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let r = match req.send_bytes(body) {
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

#[test]
fn serve_mails_a_dkim_signed_code_through_the_relay() {
    let sink = Sink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("relay-password");
    std::fs::write(&pw, "RELAY-PASSWORD-4410\n").unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "smtp_hostname = \"gw.test\"\n[outbound]\nmode = \"smtp\"\n\
             from_address = \"rdv-gateway@Both.test\"\nrelay_host = \"127.0.0.1\"\n\
             relay_port = {}\ntls = \"none\"\n\
             [[outbound.dkim]]\ndomain = \"both.test\"\nselector = \"e\"\nkey_file = \"{}\"\n\
             algorithm = \"ed25519-sha256\"\n",
            sink.port,
            keys_dir().join("ed25519.pem").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdv-probe-gateway"))
        .args(["serve", "--http-listen", "127.0.0.1:0"])
        .arg("--config")
        .arg(&cfg)
        .arg("--data-dir")
        .arg(dir.path())
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let drain = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).unwrap();
        s
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line: {line}"))
        .to_string();

    let body = br#"{"mailbox":"john@doe.test"}"#;
    let h = rdv_probe_gateway::signed::sign(
        &common::recipient_agent(),
        "POST",
        "/v1/register",
        body,
        "00000000-0000-4000-8000-0000000000a1",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let (st, v) = call(
        "POST",
        &format!("{base}/v1/register"),
        &[
            (rdv_probe_gateway::signed::AUTH_HEADER, &h),
            ("content-type", "application/json"),
        ],
        body,
    );
    assert_eq!(st, 202, "{v}");
    let got = sink.next();
    assert_eq!(got.mail_from, "rdv-gateway@Both.test");
    assert_eq!(got.rcpt_tos, vec!["john@doe.test".to_string()]);
    let text = String::from_utf8(got.data.clone()).unwrap();
    assert!(text.starts_with("DKIM-Signature: "), "{text}");
    let code = text
        .split_once("type this code into it: ")
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let v = dkimpy(&got.data, &RECORDS);
    assert_eq!(
        ok_all(&v),
        vec![("both.test".into(), "ed25519-sha256".into(), true)],
        "{v}"
    );
    // The code works: the mail really is the proof-code mail.
    let body = json!({"mailbox": "john@doe.test", "code": code}).to_string();
    let h = rdv_probe_gateway::signed::sign(
        &common::recipient_agent(),
        "POST",
        "/v1/verify",
        body.as_bytes(),
        "00000000-0000-4000-8000-0000000000a2",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let (st, v) = call(
        "POST",
        &format!("{base}/v1/verify"),
        &[
            (rdv_probe_gateway::signed::AUTH_HEADER, &h),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    );
    assert_eq!(st, 200, "{v}");
    assert!(
        !dir.path().join("outbox").exists(),
        "smtp mode does not spool"
    );

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let logs = drain.join().unwrap() + &rest;
    assert!(logs.contains("handed to the relay"), "{logs}");
    for s in [code.as_str(), "type this code", "RELAY-PASSWORD-4410"] {
        assert!(!logs.contains(s), "{s} leaked into the logs");
    }
}

#[test]
fn serve_refuses_a_bad_dkim_key_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("dkim-bad.pem");
    let mut f = std::fs::File::create(&bad).unwrap();
    f.write_all(b"-----BEGIN PRIVATE KEY-----\nU0VDUkVULUJZVEVT\n-----END PRIVATE KEY-----\n")
        .unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[outbound.dkim]]\ndomain = \"a.test\"\nselector = \"s\"\nkey_file = \"{}\"\n",
            bad.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdv-probe-gateway"))
        .args(["serve", "--http-listen", "127.0.0.1:0"])
        .arg("--config")
        .arg(&cfg)
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("dkim-bad.pem") && err.contains("not an RSA"),
        "{err}"
    );
    assert!(!err.contains("U0VDUkVULUJZVEVT"), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "never listened"
    );
}
