//! The pages an invited person opens (§5.2.2), in a real browser: the
//! explainer every invite links to and the opt-out page with its confirm
//! button, served by the gateway on 127.0.0.1:0 and opened by headless
//! Chromium with JavaScript off (tests/python/browser_pages.py drives it
//! over the DevTools protocol; `RDV_TEST_PYTHON` or `python3`). Each page
//! must be readable on a phone (390×844) and a desktop (1280×800): no
//! sideways scrolling, body text of at least 16 px, a button a thumb can
//! hit; the screenshots stay under the target dir
//! (`$CARGO_TARGET_TMPDIR/gateway-pages/`). The button, clicked, records
//! the opt-out: the gateway then refuses the next invite to the address.
//!
//! Chromium is `RDV_TEST_CHROMIUM` or `chromium` on PATH (Debian's
//! `chromium` package). Without it the test is skipped with a loud
//! message, and fails when `CI` is set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::StatusCode;
use common::env::*;
use common::*;
use rdv_probe_gateway::clock::CountingEntropy;
use rdv_probe_gateway::gate::AuthBackend;
use rdv_probe_gateway::http::Deps;
use rdv_probe_gateway::mailer::RecordingMailer;
use rdv_proto::mailblock::Invite;
use serde_json::{Value, json};

const DANA: &str = "dana@doe.test";
const ALICE: &str = "alice@sender.test";
const INV: &str = "4d5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01";
const INV2: &str = "4d5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c02";

/// The browser, or why there is none.
fn chromium() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("RDV_TEST_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
}

fn invite_body(env: &Env, id: &str) -> Value {
    let inv = Invite::build(
        id,
        Some(DANA),
        "tok_0123456789abcdef",
        env.now(),
        &requester(),
    )
    .unwrap();
    json!({"to": DANA, "invite": inv, "source": "the book club's member list"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explainer_and_opt_out_in_a_real_browser() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is missing: install Debian's chromium package (CI must run this test)"
        );
        eprintln!(
            "\n\n!!!! SKIPPED explainer_and_opt_out_in_a_real_browser: no chromium on PATH \
             (apt-get install chromium, or set RDV_TEST_CHROMIUM) !!!!\n\n"
        );
        return;
    };
    let mut env = Env::new(Backend::Sqlite, |c| {
        c.flows.mail_domain = Some("gw.test".into());
        c.flows.public_url = Some("https://gw.test".into());
    })
    .await;
    let alice = requester();
    env.enroll(&alice, ALICE).await;
    let body = invite_body(&env, INV).to_string();
    let (st, v) = env
        .signed(&alice, "POST", "/v1/send/invite", body.as_bytes())
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    // The links the invite carries: the explainer, and the opt-out token.
    let mail = String::from_utf8(env.mailer.sent().last().unwrap().raw.clone()).unwrap();
    let mail = mail.replace("=\r\n", "");
    assert!(mail.contains("https://gw.test/v1/about"), "{mail}");
    let token = mail
        .split("/v1/optout/")
        .nth(1)
        .unwrap()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .unwrap()
        .to_string();

    // The same gateway (database, address key) serving on a real port.
    let store = rdv_probe_gateway::store::Store::connect(&env.db_url, 2)
        .await
        .unwrap();
    let deps = Deps {
        store,
        clock: env.clock.clone(),
        entropy: Arc::new(CountingEntropy::default()),
        mailer: Arc::new(RecordingMailer::default()),
        backend: AuthBackend::Trusted(vec![AUTHSERV.into()]),
        cookies: cookie_keys(),
    };
    let running = rdv_probe_gateway::server::start(env.cfg.clone(), deps)
        .await
        .unwrap();
    let base = format!("http://{}", running.addr);
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gateway-pages");
    let python = std::env::var("RDV_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/browser_pages.py");
    let args = [
        browser.display().to_string(),
        out_dir.display().to_string(),
        format!("{base}/v1/about"),
        format!("{base}/v1/optout/{token}"),
    ];
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg(script)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{python}: {e}"))
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "browser driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("screenshots in {}", out_dir.display());

    for page in ["explainer", "optout"] {
        for (view, width) in [("phone", 390.0), ("desktop", 1280.0)] {
            let m = &r[format!("{page}_{view}")];
            let f = |k: &str| m[k].as_f64().unwrap();
            assert!(
                Path::new(m["screenshot"].as_str().unwrap()).is_file(),
                "{page} {view}: a screenshot"
            );
            // A desktop's vertical scrollbar takes its width from the layout.
            assert!(
                (width - 20.0..=width).contains(&f("viewport_width")),
                "{page} {view}: {m}"
            );
            assert!(
                f("content_width") <= f("viewport_width"),
                "{page} {view}: no sideways scrolling ({m})"
            );
            assert!(
                f("body_font_px") >= 16.0,
                "{page} {view}: body text of 16 px at least"
            );
            assert!(
                f("h1_font_px") > f("body_font_px"),
                "{page} {view}: a heading"
            );
            assert_eq!(m["scripts"], 0, "{page} {view}: no script");
        }
    }
    let html = |k: &str| r[k]["html"].as_str().unwrap().to_string();
    let about = html("explainer_phone");
    for says in [
        "What is Rendezvous?",
        "What does the token do?",
        "How do I stop these emails?",
    ] {
        assert!(about.contains(says), "the explainer says {says}");
    }
    // The opt-out page: one button a thumb can hit, inside the screen.
    for view in ["phone", "desktop"] {
        let b = &r[format!("optout_{view}")]["button"];
        let f = |k: &str| b[k].as_f64().unwrap();
        assert!(f("height") >= 44.0, "{view}: button height {b}");
        assert!(
            f("x") >= 0.0
                && f("x") + f("width")
                    <= r[format!("optout_{view}")]["viewport_width"]
                        .as_f64()
                        .unwrap()
        );
    }
    assert!(
        html("optout_phone").contains("Stop Rendezvous probes and invitations"),
        "the opt-out page"
    );
    // The click: the form POST (no script) recorded the opt-out.
    assert!(
        html("after_click").contains("no more probes or invitations"),
        "{}",
        html("after_click")
    );

    // The gateway's store says so, and its API refuses the next invite.
    let id = rdv_probe_gateway::server::load_address_key(&env.cfg, &CountingEntropy::default())
        .unwrap()
        .optout_id(&rdv_proto::Address::parse(DANA).unwrap());
    assert!(env.state.store().opted_out(&id.hex()).await.unwrap());
    env.clock.advance(time::Duration::days(1));
    let body = invite_body(&env, INV2).to_string();
    let (st, v) = env
        .signed(&alice, "POST", "/v1/send/invite", body.as_bytes())
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("opted_out")),
        "{v}"
    );
    let state = running.state.clone();
    running.shutdown().await.unwrap();
    state.store().close().await;
    env.teardown().await;
}
