//! Load generator for the probe gateway (issue #4 benchmarks): probes gated
//! per second end to end over HTTP (`POST /v1/inbound`) and SMTP (the
//! forwarding listener) against the running binary, beside the in-process
//! gate and the primitive bound (one RSA-2048 and one Ed25519 verification
//! plus SHA-256 of the message), all measured in the same run. Loopback
//! only; every phase is bounded in count. Figures:
//! docs/benchmarks/probe-gateway.md.
//!
//! ```sh
//! cargo build --release -p rdv-probe-gateway --bin rdv-probe-gateway --example gateway-loadgen
//! target/release/examples/gateway-loadgen --gateway target/release/rdv-probe-gateway --messages 4000
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use rdv_probe_gateway::gate::{self, Arrival, AuthBackend};
use rdv_probe_gateway::limits::{LimitConfig, Limits, Rate};
use rdv_probe_gateway::signed;
use rdv_proto::mailblock::TransferEncoding;
use rdv_proto::time::format_time;
use rdv_proto::{Address, AgentKey};

const AUTHSERV: &str = "mx.bench.test";
const MAILBOX: &str = "john@doe.test";

struct Args {
    gateway: PathBuf,
    messages: usize,
    concurrency: usize,
    /// `postgres://…` (default: SQLite in the temp data dir).
    database: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        gateway: PathBuf::from("target/release/rdv-probe-gateway"),
        messages: 2000,
        concurrency: 8,
        database: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--gateway" => a.gateway = v.into(),
            "--messages" => a.messages = v.parse().expect("--messages N"),
            "--concurrency" => a.concurrency = v.parse().expect("--concurrency N"),
            "--database" => a.database = Some(v),
            _ => panic!(
                "unknown argument {k} (--gateway PATH --messages N --concurrency N --database URL)"
            ),
        }
    }
    a
}

/// The running gateway, killed on drop.
struct Gateway {
    child: Child,
    http: String,
    smtp: SocketAddr,
    data: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(bin: &Path, database: Option<&str>) -> Gateway {
    let data = tempfile::tempdir().unwrap();
    let big = "max = 100000000\nwindow_secs = 86400\n";
    let cfg = format!(
        "http_listen = \"127.0.0.1:0\"\nsmtp_listen = \"127.0.0.1:0\"\n\
         data_dir = \"{}\"\nsmtp_max_sessions = 256\n\
         [auth.trusted]\nauthserv_ids = [\"{AUTHSERV}\"]\n\
         [limits.per_sender]\n{big}[limits.per_requester]\n{big}[limits.per_mailbox]\n{big}",
        data.path().display()
    );
    let path = data.path().join("config.toml");
    std::fs::write(&path, cfg).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--config"]).arg(&path);
    if let Some(db) = database {
        cmd.args(["--database", db]);
    }
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (build it first)", bin.display()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut http = None;
    let mut smtp = None;
    while http.is_none() || smtp.is_none() {
        let l = lines
            .next()
            .expect("gateway exited before listening")
            .unwrap();
        if let Some(a) = l.strip_prefix("listening on http://") {
            http = Some(format!("http://{a}"));
        } else if let Some(a) = l.strip_prefix("listening on smtp://") {
            smtp = Some(a.parse().unwrap());
        }
    }
    Gateway {
        child,
        http: http.unwrap(),
        smtp: smtp.unwrap(),
        data,
    }
}

fn now() -> rdv_proto::time::Instant {
    time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap()
}

fn uuid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

fn signed_post(base: &str, key: &AgentKey, path: &str, body: &str, n: u64) -> serde_json::Value {
    let h = signed::sign(key, "POST", path, body.as_bytes(), &uuid(n), now()).unwrap();
    let r = ureq::post(&format!("{base}{path}"))
        .set("content-type", "application/json")
        .set(signed::AUTH_HEADER, &h)
        .send_string(body);
    match r {
        Ok(r) => r.into_json().unwrap(),
        Err(ureq::Error::Status(s, r)) => panic!("{path}: {s} {}", r.into_string().unwrap()),
        Err(e) => panic!("{path}: {e}"),
    }
}

/// Registers the mailbox for the recipient agent (the code comes from the
/// spooled proof mail) and returns the integration token.
fn enroll(g: &Gateway) -> String {
    let key = common::recipient_agent();
    let body = serde_json::json!({ "mailbox": MAILBOX }).to_string();
    signed_post(&g.http, &key, "/v1/register", &body, 1);
    let outbox = g.data.path().join("outbox");
    let mail = std::fs::read_dir(&outbox)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .next()
        .expect("a spooled proof mail");
    let (_, rest) = mail.split_once("type this code into it: ").unwrap();
    let code = rest.split_whitespace().next().unwrap();
    let body = serde_json::json!({ "mailbox": MAILBOX, "code": code }).to_string();
    let v = signed_post(&g.http, &key, "/v1/verify", &body, 2);
    v["token"].as_str().unwrap().to_string()
}

/// `n` distinct probes for the mailbox, each behind a trusted
/// Authentication-Results header (DMARC pass), dated now.
fn probes(first: u64, n: usize) -> Vec<Vec<u8>> {
    let ts = format_time(now());
    (0..n as u64)
        .map(|i| {
            let mut m = format!(
                "Authentication-Results: {AUTHSERV}; dkim=pass header.d=sender.test; \
                 spf=pass smtp.mailfrom=sender.test; dmarc=pass header.from=sender.test\r\n"
            )
            .into_bytes();
            m.extend(common::probe_mail(
                &uuid(first + i),
                MAILBOX,
                "Alice's agent <alice@sender.test>",
                &ts,
                TransferEncoding::QuotedPrintable,
            ));
            m
        })
        .collect()
}

struct Run {
    per_sec: f64,
    p50_us: u64,
    p99_us: u64,
}

/// Runs `work` over the messages from `concurrency` threads, each taking
/// the next message; returns throughput and latency percentiles.
fn drive<S>(
    msgs: &[Vec<u8>],
    concurrency: usize,
    open: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, &[u8]) + Sync,
) -> Run {
    let next = Mutex::new(0usize);
    let lat = Mutex::new(Vec::with_capacity(msgs.len()));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..concurrency {
            s.spawn(|| {
                let mut st = open();
                let mut mine = Vec::new();
                loop {
                    let i = {
                        let mut g = next.lock().unwrap();
                        let i = *g;
                        *g += 1;
                        i
                    };
                    let Some(m) = msgs.get(i) else { break };
                    let t = Instant::now();
                    work(&mut st, m);
                    mine.push(t.elapsed().as_micros() as u64);
                }
                lat.lock().unwrap().extend(mine);
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut l = lat.into_inner().unwrap();
    l.sort_unstable();
    let pct = |p: f64| l[((l.len() as f64 * p) as usize).min(l.len() - 1)];
    Run {
        per_sec: msgs.len() as f64 / secs,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    }
}

fn http_inbound(base: &str, token: &str, msgs: &[Vec<u8>], concurrency: usize) -> Run {
    let url = format!("{base}/v1/inbound");
    let auth = format!("Bearer {token}");
    drive(
        msgs,
        concurrency,
        || ureq::AgentBuilder::new().build(),
        |agent, m| {
            let r = agent
                .post(&url)
                .set("content-type", "message/rfc822")
                .set("authorization", &auth)
                .send_bytes(m);
            match r {
                Ok(r) if r.status() == 202 => {}
                Ok(r) => panic!("inbound: {}", r.status()),
                Err(e) => panic!("inbound: {e}"),
            }
        },
    )
}

/// A minimal SMTP client session (the listener's own tests use Python's
/// smtplib; here the client must not be the bottleneck).
struct Smtp {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Smtp {
    fn open(addr: SocketAddr) -> Smtp {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        let mut c = Smtp {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        };
        c.expect("220");
        c.cmd("EHLO bench.test\r\n", "250");
        c
    }

    /// Reads a (multi-line) reply and checks its code.
    fn expect(&mut self, code: &str) {
        loop {
            let mut l = String::new();
            self.r.read_line(&mut l).unwrap();
            assert!(l.starts_with(code), "expected {code}, got {l:?}");
            if l.as_bytes().get(3) != Some(&b'-') {
                return;
            }
        }
    }

    fn cmd(&mut self, c: &str, code: &str) {
        self.w.write_all(c.as_bytes()).unwrap();
        self.expect(code);
    }

    fn send(&mut self, m: &[u8]) {
        self.cmd("MAIL FROM:<alice@sender.test>\r\n", "250");
        self.cmd(&format!("RCPT TO:<{MAILBOX}>\r\n"), "250");
        self.cmd("DATA\r\n", "354");
        // Dot-stuffing: composed probes have no line starting with '.'.
        assert!(!m.windows(3).any(|w| w == b"\n.\r" || w == b"\n.."));
        self.w.write_all(m).unwrap();
        self.cmd("\r\n.\r\n", "250");
    }
}

fn smtp_deliver(addr: SocketAddr, msgs: &[Vec<u8>], concurrency: usize) -> Run {
    drive(msgs, concurrency, || Smtp::open(addr), |s, m| s.send(m))
}

/// The in-process gate over the same messages, one thread (per core).
fn in_process(msgs: &[Vec<u8>]) -> f64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mailbox = Address::parse(MAILBOX).unwrap();
    let arrival = Arrival {
        mailbox: &mailbox,
        agent: None,
        max_bytes: rdv_proto::consts::MAIL_MAX_BYTES,
    };
    let r = Rate {
        max: u32::MAX,
        window_secs: 1,
    };
    let limits = Mutex::new(Limits::new(LimitConfig {
        per_sender: r,
        per_requester: r,
        per_mailbox: r,
    }));
    let backend = AuthBackend::Trusted(vec![AUTHSERV.into()]);
    let t0 = Instant::now();
    for m in msgs {
        rt.block_on(gate::run(m, &arrival, None, &backend, &limits, now()))
            .unwrap();
    }
    msgs.len() as f64 / t0.elapsed().as_secs_f64()
}

/// One RSA-2048 and one Ed25519 verification plus SHA-256 of a message,
/// per second on one core: what verify mode cannot go below.
fn primitive_bound(msg: &[u8]) -> f64 {
    use ring::signature::{self, KeyPair};
    let rng = ring::rand::SystemRandom::new();
    let pem = std::fs::read_to_string(common::corpus_dir().join("keys/rsa2048.pem")).unwrap();
    let der: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = data_encoding::BASE64.decode(der.as_bytes()).unwrap();
    let rsa = signature::RsaKeyPair::from_der(&der).unwrap();
    let headers = b"a canonicalized header block of a few hundred bytes";
    let mut rsa_sig = vec![0; rsa.public().modulus_len()];
    rsa.sign(&signature::RSA_PKCS1_SHA256, &rng, headers, &mut rsa_sig)
        .unwrap();
    let rsa_pk = rsa.public().as_ref().to_vec();
    let ed = signature::Ed25519KeyPair::from_seed_unchecked(&[5; 32]).unwrap();
    let ed_sig = ed.sign(headers);
    let ed_pk = ed.public_key().as_ref().to_vec();
    let n = 3000;
    let t0 = Instant::now();
    for _ in 0..n {
        signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &rsa_pk)
            .verify(headers, &rsa_sig)
            .unwrap();
        signature::UnparsedPublicKey::new(&signature::ED25519, &ed_pk)
            .verify(headers, ed_sig.as_ref())
            .unwrap();
        std::hint::black_box(ring::digest::digest(&ring::digest::SHA256, msg));
    }
    f64::from(n) / t0.elapsed().as_secs_f64()
}

fn main() {
    let a = args();
    let g = start(&a.gateway, a.database.as_deref());
    let store = if a.database.is_some() {
        "Postgres"
    } else {
        "SQLite"
    };
    let token = enroll(&g);
    let n = a.messages;
    let http_msgs = probes(1_000_000, n);
    let smtp_msgs = probes(2_000_000, n);
    let local_msgs = probes(3_000_000, n.min(2000));
    let bytes = http_msgs[0].len();

    let bound = primitive_bound(&http_msgs[0]);
    let gate = in_process(&local_msgs);
    let http = http_inbound(&g.http, &token, &http_msgs, a.concurrency);
    let smtp = smtp_deliver(g.smtp, &smtp_msgs, a.concurrency);

    // Every message was admitted once: the inbox holds 2n probes.
    let mut seen = 0;
    let mut after = 0u64;
    let key = common::recipient_agent();
    let mut nonce = 10;
    loop {
        let path = format!("/v1/inbox?after={after}&limit=100");
        nonce += 1;
        let h = signed::sign(&key, "GET", &path, b"", &uuid(nonce), now()).unwrap();
        let v: serde_json::Value = ureq::get(&format!("{}{path}", g.http))
            .set(signed::AUTH_HEADER, &h)
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        let items = v["items"].as_array().unwrap();
        if items.is_empty() {
            break;
        }
        seen += items.len();
        after = v["next"].as_u64().unwrap();
    }
    assert_eq!(seen, 2 * n, "every probe admitted exactly once");

    println!(
        "probe gateway, {n} probes per path ({bytes} B each, trusted mode, DMARC pass), \
         {} client threads, {} cores",
        a.concurrency,
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    println!("| path | probes/s | p50 | p99 | ÷ primitive bound (1 core) |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| primitive bound: RSA-2048 + Ed25519 verify + SHA-256, 1 core | {bound:.0} | | | 1.00 |"
    );
    println!(
        "| gate in process (trusted), 1 core | {gate:.0} | | | {:.2} |",
        gate / bound
    );
    for (name, r) in [("HTTP POST /v1/inbound", &http), ("SMTP listener", &smtp)] {
        println!(
            "| {name}, end to end (binary, {store}) | {:.0} | {:.2} ms | {:.2} ms | {:.2} |",
            r.per_sec,
            r.p50_us as f64 / 1000.0,
            r.p99_us as f64 / 1000.0,
            r.per_sec / bound
        );
    }
    let _ = std::io::stdout().flush();
}
