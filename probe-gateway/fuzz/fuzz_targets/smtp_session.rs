//! The SMTP listener (docs/probe-gateway.md "SMTP listener"; `smtp::spawn`)
//! driven with arbitrary client bytes: the whole session state machine,
//! line and DATA bounds, dot-unstuffing, recipient resolution and delivery
//! through the gate, over loopback TCP against a real store (SQLite in a
//! temp dir) holding one proved mailbox. `smtp.rs` exposes the session only
//! through a `TcpListener`, so each input is one connection (linger 0, no
//! TIME_WAIT pile-up); the runtime is single-threaded.
//!
//! Input: the first byte picks the listener (bit 0: `smtp_refusals`
//! reject or discard) and the write chunk size; the rest is sent as is,
//! then the write side is closed, with these expansions so deep paths are
//! one token away: `\x01G` B's gateway address, `\x01O` an opt-out address
//! the gateway issued, `\x01M` a probe mail for B that the gate admits
//! (once; then it is a duplicate).
//!
//! Checked: no panic; the session ends once the client has closed; every
//! reply line is `NNN` + space or hyphen, printable ASCII, at most 512
//! bytes, with a code the listener uses; the greeting comes first; at most
//! one final reply per client line, plus the greeting and a closing 421.
//! Run with scripts/fuzz (seeds included): `scripts/fuzz 120 smtp_session`.
#![no_main]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use rdv_probe_gateway::address_key::AddressKey;
use rdv_probe_gateway::clock::{CountingEntropy, ManualClock};
use rdv_probe_gateway::config::{Config, SmtpRefusals};
use rdv_probe_gateway::cookie::{CookieKeys, MasterSecret};
use rdv_probe_gateway::gate::AuthBackend;
use rdv_probe_gateway::http::{AppState, Deps};
use rdv_probe_gateway::mailer::RecordingMailer;
use rdv_probe_gateway::smtp;
use rdv_probe_gateway::store::Store;
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::doc::request::RequestBuilder;
use rdv_proto::mailblock::{self, MailParams, TransferEncoding};
use rdv_proto::{Address, AgentKey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

const HOST: &str = "gw.test";
const JOHN: &str = "john@doe.test";
const TAG: &str = "abcdefghij";
const AUTHSERV: &str = "mx.trusted.test";
/// The corpus clock (tests/common): probes are dated just before it.
const NOW: i64 = 1_791_460_800;
const MAX_INPUT: usize = 16 * 1024;
/// The codes the listener answers with.
const CODES: [&str; 15] = [
    "220", "221", "250", "252", "354", "421", "451", "452", "500", "501", "502", "503", "550",
    "552", "555",
];

struct Ctx {
    rt: Runtime,
    /// [reject, discard]
    addrs: [SocketAddr; 2],
    expansions: Vec<(&'static [u8], Vec<u8>)>,
}

static CTX: OnceLock<Ctx> = OnceLock::new();

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(NOW).expect("a valid time")
}

/// A probe mail from A (seed 7) to John, trusted DMARC pass, dot-stuffed
/// and terminated for DATA.
fn probe_mail() -> Vec<u8> {
    let a = AgentKey::from_seed([7; 32]);
    let card = CardBuilder::new(
        now() - time::Duration::days(7),
        vec!["wss://relay.example.org".into()],
    )
    .sign(&a)
    .expect("card");
    let request = RequestBuilder {
        id: "7a5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01".into(),
        to_hint: Some(JOHN.into()),
        card,
        greeting: "A's agent requests contact.".into(),
        capabilities_offered: vec!["a2a/0.3".into()],
        ts: now() - time::Duration::hours(1),
    }
    .sign(&a)
    .expect("request");
    let mail = mailblock::compose(
        &mailblock::probe_payload(&request),
        &MailParams {
            from: "alice@sender.test",
            to: JOHN,
            date: now() - time::Duration::hours(1),
            message_id: "<fuzz-1@sender.test>",
            encoding: TransferEncoding::QuotedPrintable,
            subject_line: None,
            intro: None,
        },
    )
    .expect("compose");
    let mut raw = format!(
        "Authentication-Results: {AUTHSERV}; dkim=pass header.d=sender.test; \
         dmarc=pass header.from=sender.test\r\n"
    )
    .into_bytes();
    for line in mail.split_inclusive(|&b| b == b'\n') {
        if line.first() == Some(&b'.') {
            raw.push(b'.');
        }
        raw.extend_from_slice(line);
    }
    if !raw.ends_with(b"\r\n") {
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b".\r\n");
    raw
}

fn setup() -> Ctx {
    let dir = std::env::temp_dir().join(format!("rdv-gw-fuzz-smtp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let key_hex = "5a".repeat(32);
    let key_file: PathBuf = dir.join("address-key");
    std::fs::write(&key_file, &key_hex).expect("address key file");
    let optout = AddressKey::from_hex(&key_hex)
        .expect("address key")
        .optout_token(&Address::parse("dana@doe.test").expect("address"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = format!("sqlite://{}?mode=rwc", dir.join("gateway.db").display());
    let mut cfg = Config {
        data_dir: dir.clone(),
        database: Some(url.clone()),
        address_key_file: Some(key_file),
        smtp_hostname: HOST.into(),
        // Small, so oversize DATA is within a fuzz input's reach; the
        // probe mail fits.
        max_mail_bytes: 12 * 1024,
        smtp_max_sessions: 8,
        smtp_command_timeout_secs: 30,
        smtp_session_timeout_secs: 60,
        ..Config::default()
    };
    cfg.flows.mail_domain = Some(HOST.into());
    let mail = probe_mail();
    assert!(mail.len() < cfg.max_mail_bytes, "the probe mail fits");
    let addrs = rt.block_on(async {
        let store = Store::connect(&url, 2).await.expect("store");
        let agent = AgentKey::from_seed([9; 32]).id().as_str().to_string();
        let t = NOW;
        store
            .put_pending(JOHN, &agent, "h", t + 3600)
            .await
            .expect("pending");
        store
            .verify_code(JOHN, &agent, "h", 5, "tok1", "s", TAG, t)
            .await
            .expect("proved");
        let mut addrs = Vec::new();
        for mode in [SmtpRefusals::Reject, SmtpRefusals::Discard] {
            let mut c = cfg.clone();
            c.smtp_refusals = mode;
            let state = AppState::new(
                c,
                Deps {
                    store: store.clone(),
                    clock: Arc::new(ManualClock::new(now())),
                    entropy: Arc::new(CountingEntropy::default()),
                    mailer: Arc::new(RecordingMailer::default()),
                    backend: AuthBackend::Trusted(vec![AUTHSERV.into()]),
                    cookies: CookieKeys {
                        current: MasterSecret::new(vec![0x42; 32]).expect("secret"),
                        previous: None,
                    },
                },
            );
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            addrs.push(l.local_addr().expect("addr"));
            let tls = smtp::tls_acceptor(state.config()).expect("no tls");
            let (stop, rx) = tokio::sync::watch::channel(false);
            // Serve for the life of the process.
            std::mem::forget(stop);
            smtp::spawn(l, state, tls, rx);
        }
        [addrs[0], addrs[1]]
    });
    Ctx {
        rt,
        addrs,
        expansions: vec![
            (b"\x01G", format!("rdv+{TAG}@{HOST}").into_bytes()),
            (b"\x01O", format!("optout+{optout}@{HOST}").into_bytes()),
            (b"\x01M", mail),
        ],
    }
}

fn expand(input: &[u8], expansions: &[(&'static [u8], Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    'outer: while i < input.len() {
        for (token, with) in expansions {
            if input[i..].starts_with(token) {
                out.extend_from_slice(with);
                i += token.len();
                continue 'outer;
            }
        }
        out.push(input[i]);
        i += 1;
    }
    out
}

async fn session(addr: SocketAddr, input: &[u8], chunk: usize) -> Vec<u8> {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        panic!("the listener is gone");
    };
    let _ = s.set_zero_linger();
    let _ = s.set_nodelay(true);
    let (mut r, mut w) = s.split();
    let write = async {
        for c in input.chunks(chunk) {
            if w.write_all(c).await.is_err() {
                return;
            }
            // Let the session read what arrived so far: the split points
            // fall inside commands, CRLFs and the DATA terminator.
            tokio::task::yield_now().await;
        }
        let _ = w.shutdown().await;
    };
    let read = async {
        let mut out = Vec::new();
        // A reset after the server closed keeps what was read.
        let _ = r.read_to_end(&mut out).await;
        out
    };
    tokio::join!(write, read).1
}

fn check(out: &[u8], input: &[u8]) {
    if out.is_empty() {
        // Reset before the greeting was read (the client wrote into a
        // closing socket): nothing to check.
        return;
    }
    let mut finals = 0usize;
    let mut lines = out.split(|&b| b == b'\n').peekable();
    let mut first = true;
    while let Some(line) = lines.next() {
        let last = lines.peek().is_none();
        if last && line.is_empty() {
            break;
        }
        let shown = String::from_utf8_lossy(line);
        // A cut-off last line (reset) is only checked as a prefix.
        let line = match line.strip_suffix(b"\r") {
            Some(l) => l,
            None if last => line,
            None => panic!("reply line without CR: {shown:?}"),
        };
        assert!(
            line.len() + 2 <= 512,
            "reply line over 512 bytes: {shown:?}"
        );
        assert!(
            line.iter().all(|b| (0x20..0x7f).contains(b)),
            "reply not printable ASCII: {shown:?}"
        );
        if last && line.len() < 4 {
            break;
        }
        assert!(line.len() >= 4, "short reply line: {shown:?}");
        let code = std::str::from_utf8(&line[..3]).unwrap_or("");
        assert!(CODES.contains(&code), "unexpected reply code: {shown:?}");
        assert!(matches!(line[3], b' ' | b'-'), "bad separator: {shown:?}");
        if first && !last {
            assert!(
                line.starts_with(format!("220 {HOST} ").as_bytes())
                    || line.starts_with(b"421 4.3.2"),
                "first line is not the greeting: {shown:?}"
            );
            first = false;
        }
        if line[3] == b' ' {
            finals += 1;
        }
    }
    let client_lines = input.iter().filter(|&&b| b == b'\n').count();
    assert!(
        finals <= client_lines + 2,
        "{finals} replies to {client_lines} lines"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&flag, rest)) = data.split_first() else {
        return;
    };
    if rest.len() > MAX_INPUT {
        return;
    }
    let ctx = CTX.get_or_init(setup);
    let input = expand(rest, &ctx.expansions);
    let addr = ctx.addrs[usize::from(flag & 1)];
    let chunk = [1, 2, 3, 7, 64, 512, 4096, MAX_INPUT * 2][usize::from(flag >> 1) % 8];
    // Byte-sized writes of a long input would only slow the loop down.
    let chunk = if input.len() > 4096 {
        chunk.max(64)
    } else {
        chunk
    };
    let out = ctx.rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), session(addr, &input, chunk)).await
    });
    let Ok(out) = out else {
        panic!("the session did not end after the client closed");
    };
    check(&out, &input);
});
