//! `rdv-probe-gateway serve` as a process: port 0 printed (HTTP and SMTP),
//! env overrides, the whole enrolment and delivery over real HTTP and SMTP, graceful shutdown on
//! SIGTERM, and no secret, token, code or mail content in its output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use common::*;
use rdv_probe_gateway::config::Config;
use rdv_probe_gateway::signed;
use rdv_proto::mailblock::TransferEncoding;
use rdv_proto::time::format_time;
use serde_json::{Value, json};

const CANARY: &str = "CANARY-MAIL-CONTENT-7731";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rdv-probe-gateway"))
}

/// (status, body) of one request; `auth` is a signed header or a bearer token.
fn call(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let mut req = ureq::request(method, url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let res = if body.is_empty() && method == "GET" {
        req.call()
    } else {
        req.send_bytes(body)
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

fn signed_call(base: &str, n: u8, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let id = format!("00000000-0000-4000-8000-0000000000{n:02x}");
    let h = signed::sign(
        &recipient_agent(),
        method,
        path,
        body,
        &id,
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    call(
        method,
        &format!("{base}{path}"),
        &[
            (signed::AUTH_HEADER, &h),
            ("content-type", "application/json"),
        ],
        body,
    )
}

#[test]
fn serve_end_to_end_quiet_and_graceful() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--smtp-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .env("RUST_LOG", "debug")
        // As the Docker image runs it: the sample config named by the
        // environment (flags and an env override on top).
        .env(
            "RDV_GATEWAY_CONFIG",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../docker/probe-gateway/config.toml"
            ),
        )
        .env("RDV_GATEWAY_LIMITS__PER_SENDER__MAX", "1")
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
    assert!(!base.ends_with(":0"), "the bound port is printed");
    let mut smtp_line = String::new();
    stdout.read_line(&mut smtp_line).unwrap();
    let smtp_addr = smtp_line
        .trim()
        .strip_prefix("listening on smtp://")
        .unwrap_or_else(|| panic!("second line: {smtp_line}"))
        .to_string();
    assert!(!smtp_addr.ends_with(":0"), "the bound SMTP port is printed");

    let (st, v) = signed_call(
        &base,
        1,
        "POST",
        "/v1/register",
        br#"{"mailbox":"john@doe.test"}"#,
    );
    assert_eq!(st, 202, "{v}");
    // The proof mail is spooled (no SMTP sender yet).
    let spooled: Vec<_> = std::fs::read_dir(dir.path().join("outbox"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(spooled.len(), 1);
    let code = spooled[0]
        .split_once("type this code into it: ")
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let body = json!({"mailbox": "john@doe.test", "code": code}).to_string();
    let (st, v) = signed_call(&base, 2, "POST", "/v1/verify", body.as_bytes());
    assert_eq!(st, 200, "{v}");
    let token = v["token"].as_str().unwrap().to_string();
    let bearer = format!("Bearer {token}");

    let now = format_time(time::OffsetDateTime::now_utc() - time::Duration::minutes(1));
    let mail = |id: &str| {
        let mut m = format!("X-Canary: {CANARY}\r\n").into_bytes();
        m.extend(probe_mail(
            id,
            "john@doe.test",
            "alice@sender.test",
            &now,
            TransferEncoding::Base64,
        ));
        m
    };
    let inbound = |m: Vec<u8>| {
        call(
            "POST",
            &format!("{base}/v1/inbound"),
            &[
                ("authorization", &bearer),
                ("content-type", "message/rfc822"),
            ],
            &m,
        )
    };
    let (st, v) = inbound(mail("1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01"));
    assert_eq!(st, 202, "{v}");
    // RDV_GATEWAY_LIMITS__PER_SENDER__MAX=1 took effect.
    let (st, v) = inbound(mail("1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02"));
    assert_eq!((st, v["refusal"].clone()), (429, json!("rate_limited")));
    // The same gate over SMTP, from another sender (the per-sender limit
    // holds for alice), with a real client.
    let mut m = format!("X-Canary: {CANARY}\r\n").into_bytes();
    m.extend(probe_mail(
        "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c03",
        "john@doe.test",
        "bob@sender.test",
        &now,
        TransferEncoding::QuotedPrintable,
    ));
    let eml = dir.path().join("smtp.eml");
    std::fs::write(&eml, &m).unwrap();
    let (host, port) = smtp_addr.rsplit_once(':').unwrap();
    let steps = json!([
        ["ehlo", "mail.sender.test"],
        ["cmd", format!("MAIL FROM:<{CANARY}@sender.test>")],
        ["cmd", "RCPT TO:<john@doe.test>"],
        ["data_file", eml.display().to_string()],
        ["quit"],
    ]);
    let out = Command::new(std::env::var("RDV_TEST_PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/smtp_client.py"
        ))
        .args([host, port, &steps.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replies: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(replies[4][0], 250, "{replies}");
    let (st, v) = signed_call(&base, 3, "GET", "/v1/inbox", b"");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["items"].as_array().unwrap().len(), 2);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "graceful shutdown exits 0: {exit:?}");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let logs = drain.join().unwrap() + &line + &smtp_line + &rest;
    assert!(logs.contains("listening"), "logs are there: {logs}");
    assert!(
        logs.contains("smtp listening"),
        "the SMTP address is logged"
    );
    let secret = std::fs::read_to_string(dir.path().join("master-secret")).unwrap();
    let address_key = std::fs::read_to_string(dir.path().join("address-key")).unwrap();
    for (what, s) in [
        ("master secret", secret.trim()),
        ("address key", address_key.trim()),
        ("token", token.as_str()),
        ("token secret", token.rsplit('.').next().unwrap()),
        ("code", code.as_str()),
        ("mail content", CANARY),
        ("greeting", "requests contact on"),
    ] {
        assert!(!logs.contains(s), "the {what} leaked into the logs");
    }
}

#[test]
fn env_overrides_and_bad_config_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["serve", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path())
        .env("RDV_GATEWAY_MAX_BODY_BYTES", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_body_bytes"), "{err}");
}

#[test]
fn sample_config_parses() {
    let text = include_str!("../../docker/probe-gateway/config.toml");
    let c = Config::from_toml(text).unwrap();
    assert_eq!(c.http_listen.port(), 8490);
    assert_eq!(c.smtp_listen.map(|a| a.port()), Some(2525));
    assert_eq!(c.smtp_max_sessions, 64);
    assert_eq!(c.limits.per_sender.max, 10);
    assert_eq!(
        c.smtp_refusals,
        rdv_probe_gateway::config::SmtpRefusals::Discard
    );
    assert!(matches!(
        c.auth,
        rdv_probe_gateway::auth::AuthMode::Trusted { ref authserv_ids } if authserv_ids == &["mx.example.org"]
    ));
}

#[test]
fn unknown_and_invalid_keys_refused() {
    assert!(Config::from_toml("http_listne = \"0.0.0.0:1\"").is_err());
    assert!(Config::from_toml("[limits.per_sender]\nmax = 1\nwindow_secs = 1\nextra = 2").is_err());
    assert!(Config::from_toml("signed_request_window_secs = 0").is_err());
    assert!(Config::from_toml("code_max_attempts = 0").is_err());
    assert!(Config::from_toml("smtp_max_sessions = 0").is_err());
    assert!(Config::from_toml("smtp_command_timeout_secs = 0").is_err());
    assert!(Config::from_toml("smtp_session_timeout_secs = 0").is_err());
    assert!(Config::from_toml("smtp_hostname = \"a b\"").is_err());
    assert!(Config::from_toml("smtp_listen = \"127.0.0.1:0\"").is_ok());
    assert!(Config::from_toml("smtp_tls_cert_file = \"/x.pem\"").is_err());
    assert!(Config::from_toml("previous_retired_at = \"2026-10-01T00:00:00Z\"").is_err());
    assert!(Config::from_toml("auth = \"verify\"").is_ok());
    assert!(Config::from_toml("smtp_refusals = \"reject\"").is_ok());
    assert!(Config::from_toml("smtp_refusals = \"bounce\"").is_err());
}

/// "Configs that cannot mislead" (issue #14): nothing configured is verify
/// mode; every wrong config below is refused, and the message names the
/// key that is wrong (a typo is an error at start, never a silently
/// ignored setting).
#[test]
fn wrong_configs_are_refused_naming_the_key() {
    use rdv_probe_gateway::auth::AuthMode;
    assert_eq!(Config::from_toml("").unwrap().auth, AuthMode::Verify);
    assert_eq!(Config::default().auth, AuthMode::Verify);
    assert_eq!(
        Config::from_toml("[auth.verify]").unwrap().auth,
        AuthMode::Verify
    );
    assert_eq!(
        Config::from_toml("[auth.trusted]\nauthserv_ids = [\"mx.example.org\"]")
            .unwrap()
            .auth,
        AuthMode::Trusted {
            authserv_ids: vec!["mx.example.org".into()]
        }
    );
    let cases: &[(&str, &str)] = &[
        // The natural guess beside [auth.trusted]: resolver keys are top-level.
        (
            "[auth.verify]\nnameservers = [\"127.0.0.1:53\"]",
            "nameservers",
        ),
        ("[auth.verify]\nmade_up = 1", "made_up"),
        (
            "[auth.trusted]\nauthserv_ids = [\"mx\"]\nauthserv_id = \"mx\"",
            "authserv_id",
        ),
        ("[auth.trusted]\nauthserv_ids = []", "authserv_ids"),
        ("[auth.trusted]\nauthserv_ids = [\"a b\"]", "authserv_ids"),
        (
            "[auth]\ntrusted = { authserv_ids = [\"mx\"] }\nverify = {}",
            "not both",
        ),
        ("[auth.bogus]\nx = 1", "bogus"),
        ("auth = \"trusted\"", "authserv_ids"),
        ("auth = \"dns\"", "dns"),
        ("[auth]", "auth"),
        ("http_listne = \"0.0.0.0:1\"", "http_listne"),
        ("smtp_unknown_recipients = \"bounce\"", "bounce"),
        ("dev_allow_ws_relays = \"yes\"", "dev_allow_ws_relays"),
        (
            "[limits.per_sender]\nmax = 1\nwindow_secs = 1\nextra = 2",
            "extra",
        ),
        (
            "[limits]\nper_sendr = { max = 1, window_secs = 1 }",
            "per_sendr",
        ),
        (
            "[register_per_mailbox]\nmax = 1\nwindow_secs = 1\nwindow = 2",
            "window",
        ),
        ("[flows]\npublic_uri = \"https://x.test\"", "public_uri"),
        ("[flows]\nexplainer_url = \"ftp://x\"", "explainer_url"),
        ("[outbound]\nrelay = \"smtp.example.org\"", "relay"),
        (
            "[[outbound.dkim]]\ndomain = \"a.test\"\nselector = \"s\"\nkey_file = \"/k\"\nalgo = \"x\"",
            "algo",
        ),
        ("[smtp]\nlisten = \"127.0.0.1:25\"", "smtp"),
    ];
    for (text, key) in cases {
        let e = Config::from_toml(text).expect_err(text).to_string();
        assert!(
            e.contains(key),
            "{text:?} refused without naming {key:?}: {e}"
        );
    }
}

/// Trusted mode without an authserv-id (no mail could ever pass) stops
/// `serve` at start, saying why.
#[test]
fn serve_refuses_trusted_mode_without_authserv_id() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, "[auth.trusted]\nauthserv_ids = []\n").unwrap();
    let out = bin()
        .args(["serve", "--http-listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("authserv_ids") && err.contains("no message could ever pass"),
        "{err}"
    );
}
