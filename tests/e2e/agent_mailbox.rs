//! The mailbox probe and the invite with `rdv` alone (SPEC §5.2.1,
//! §5.2.2): two real `rdv` homes, each with `rdv listen`, the real
//! `rdv-probe-gateway serve` (SQLite, port 0, outbound mail spooled to
//! `<data_dir>/outbox/`, the SMTP sink) and `rdv-relay-bridge` as the
//! agents' ntfy carrier (see [`Carriers`] for why not `rdv-dev-relay`). Spooled mail
//! reaches the recipient's gateway inbox through `rdv gateway inbound`, as
//! the recipient's mail rule would pipe it (docs/mail-rules.md).
//!
//! Journeys, asserted on both sides: mailbox probe → pending on the
//! recipient → grant → SYN-ACK → candidate → confirm → ACK → contact on
//! both sides → messages; an invite, its limit, and an opt-out honored.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdv_e2e::{Server, TempDir, bin, free_port, run, start_server};
use serde_json::Value;

/// How long a wait polls before the journey fails.
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(250);

/// A process killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `rdv-relay-bridge serve` (an ntfy server) on port 0; its URL.
fn ntfy_bridge(dir: &TempDir) -> (Guard, String) {
    let mut child = Command::new(bin("rdv-relay-bridge"))
        .args(["serve", "--http-listen", "127.0.0.1:0"])
        .args(["--mqtt-listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    std::thread::spawn(move || for _ in lines {});
    let v: Value = serde_json::from_str(&first).unwrap();
    (
        Guard(child),
        format!("http://{}", v["http"].as_str().unwrap()),
    )
}

/// Where the agents' envelopes travel. The gateway verifies the cards in
/// what it mails as in production, so it refuses ws:// relays (the
/// `rdv-dev-relay` kind): the cards list one wss:// relay that nobody
/// serves, and deliveries heal to the ntfy fallback (SPEC §6.1, §6.3).
struct Carriers {
    _bridge: Guard,
    ntfy: String,
    nostr: String,
    _dir: TempDir,
}

impl Carriers {
    fn start() -> Carriers {
        let dir = TempDir::new("mailbox-bridge");
        let (bridge, ntfy) = ntfy_bridge(&dir);
        Carriers {
            _bridge: bridge,
            ntfy,
            nostr: format!("wss://127.0.0.1:{}", free_port()),
            _dir: dir,
        }
    }
}

/// The gateway and its spool.
struct Gateway {
    server: Server,
    dir: TempDir,
    seen: HashSet<PathBuf>,
}

impl Gateway {
    fn start() -> Gateway {
        let dir = TempDir::new("mailbox-gw");
        let config = dir.path().join("gateway.toml");
        std::fs::write(
            &config,
            format!(
                "http_listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n\n[flows]\nmail_domain = \"gw.test\"\npublic_url = \"https://gw.test\"\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let mut serve = Command::new(bin("rdv-probe-gateway"));
        serve.arg("serve").arg("--config").arg(&config);
        Gateway {
            server: start_server(serve),
            dir,
            seen: HashSet::new(),
        }
    }

    fn url(&self) -> &str {
        &self.server.url
    }

    /// The mail spooled since the last call.
    fn new_mail(&mut self) -> Vec<String> {
        let outbox = self.dir.path().join("data").join("outbox");
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(&outbox) else {
            return out;
        };
        for e in rd {
            let p = e.unwrap().path();
            if self.seen.insert(p.clone()) {
                out.push(std::fs::read_to_string(&p).unwrap());
            }
        }
        out
    }

    /// The one new spooled mail whose subject carries `marker`.
    fn one_mail(&mut self, marker: &str) -> String {
        let mut m = self.new_mail();
        assert_eq!(m.len(), 1, "one new spooled mail");
        let mail = m.remove(0);
        assert!(
            mail.lines()
                .any(|l| l.starts_with("Subject: ") && l.contains(marker)),
            "not {marker}: {mail}"
        );
        mail
    }

    /// The mail rule: pipes `mail` to the gateway with the mailbox's token.
    fn inbound(&self, token: &str, mail: &str) {
        let o = run(
            Command::new(bin("rdv")).args([
                "gateway",
                "--gateway",
                self.url(),
                "inbound",
                "--token",
                token,
            ]),
            mail.as_bytes(),
        );
        assert!(
            o.status.success(),
            "inbound: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// `POST /v1/optout/TOKEN`, as the invite's one-click link does.
    fn opt_out(&self, token: &str) {
        let addr = self.url().trim_start_matches("http://").to_string();
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /v1/optout/{token} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 26\r\n\
             Connection: close\r\n\r\nList-Unsubscribe=One-Click"
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.contains("opted_out"),
            "{answer}"
        );
    }
}

/// One person's `rdv` home, with its listener.
struct Agent {
    name: &'static str,
    dir: TempDir,
    home: PathBuf,
    id: String,
    listener: Option<Guard>,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Agent {
    fn init(name: &'static str, address: &str, c: &Carriers) -> Agent {
        let dir = TempDir::new(&format!("mailbox-{name}"));
        let home = dir.path().join("home");
        let mut a = Agent {
            name,
            dir,
            home,
            id: String::new(),
            listener: None,
        };
        let v = a.ok(&[
            "init",
            "--address",
            address,
            "--relay",
            &c.nostr,
            "--ntfy",
            &c.ntfy,
        ]);
        a.id = v["id"].as_str().unwrap().to_string();
        a
    }

    fn rdv(&self, args: &[&str]) -> Run {
        let o = run(
            Command::new(bin("rdv"))
                .arg("--home")
                .arg(&self.home)
                .arg("--json")
                .args(args)
                .env_remove("RDV_HOME")
                .env_remove("RDV_PROFILE")
                .env_remove("RDV_GW_URL"),
            b"",
        );
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        }
    }

    /// A command that must succeed; its last JSON line.
    fn ok(&self, args: &[&str]) -> Value {
        let r = self.rdv(args);
        assert_eq!(
            r.code, 0,
            "{}: rdv {args:?} failed:\n{}\n{}",
            self.name, r.stdout, r.stderr
        );
        let line = r.stdout.lines().rfind(|l| !l.trim().is_empty()).unwrap();
        serde_json::from_str(line).unwrap()
    }

    /// A command that must fail: exit 1, nothing on stdout; its stderr.
    fn fail(&self, args: &[&str]) -> String {
        let r = self.rdv(args);
        assert_eq!(
            r.code, 1,
            "{}: rdv {args:?} should fail: {}",
            self.name, r.stdout
        );
        assert!(r.stdout.trim().is_empty(), "{}", r.stdout);
        assert!(r.stderr.starts_with("rdv: "), "{}", r.stderr);
        r.stderr
    }

    fn listen(&mut self) {
        let child = Command::new(bin("rdv"))
            .arg("--home")
            .arg(&self.home)
            .args(["--json", "listen"])
            .env_remove("RDV_HOME")
            .env_remove("RDV_PROFILE")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(self.dir.path().join("listen.out")).unwrap())
            .stderr(std::fs::File::create(self.dir.path().join("listen.err")).unwrap())
            .spawn()
            .unwrap();
        self.listener = Some(Guard(child));
    }

    fn inbox(&self) -> Vec<Value> {
        let r = self.rdv(&["inbox", "--limit", "1000"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Polls the inbox until an event matches.
    fn wait_event(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let events = self.inbox();
            if let Some(e) = events.iter().find(|e| pred(e)) {
                return e.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{}: no {what} within {WAIT:?}; inbox:\n{}\nlistener:\n{}",
                self.name,
                events
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n"),
                std::fs::read_to_string(self.dir.path().join("listen.err")).unwrap_or_default()
            );
            std::thread::sleep(POLL);
        }
    }

    fn contacts(&self) -> Vec<Value> {
        self.ok(&["contact", "list"])["contacts"]
            .as_array()
            .unwrap()
            .clone()
    }

    fn key_file(&self) -> PathBuf {
        self.home.join("agent.key")
    }

    /// add → the code from the spooled mail → verify; the mail rule's token.
    fn prove(&self, gw: &mut Gateway, mailbox: &str) -> String {
        let v = self.ok(&["mailbox", "add", mailbox, "--gateway", gw.url()]);
        assert_eq!(
            (&v["mailbox"], &v["verified"]),
            (&mailbox.into(), &false.into())
        );
        let mail = gw.new_mail().pop().unwrap();
        let code = mail
            .split_once("type this code into it: ")
            .unwrap()
            .1
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        let v = self.ok(&["mailbox", "verify", mailbox, &code]);
        assert_eq!(v["verified"], true);
        assert!(v["gateway_address"].as_str().unwrap().ends_with("@gw.test"));
        v["token"].as_str().unwrap().to_string()
    }
}

/// The opt-out token of an invite mail (List-Unsubscribe: <mailto:optout+TOKEN@…>).
fn optout_token(mail: &str) -> String {
    mail.split_once("mailto:optout+")
        .unwrap()
        .1
        .split('@')
        .next()
        .unwrap()
        .to_string()
}

fn gateway_inbox(gw: &Gateway, key: &Path) -> Vec<Value> {
    let o = run(
        Command::new(bin("rdv"))
            .args(["gateway", "--gateway", gw.url(), "--seed-file"])
            .arg(key)
            .arg("inbox"),
        b"",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn mailbox_probe_through_the_gateway_and_the_cookie_ack() {
    let carriers = Carriers::start();
    let mut gw = Gateway::start();
    let mut alice = Agent::init("alice", "alice@a.test", &carriers);
    let mut bob = Agent::init("bob", "bob@b.test", &carriers);
    let alice_token = alice.prove(&mut gw, "alice@a.test");
    let bob_token = bob.prove(&mut gw, "bob@b.test");
    let list = alice.ok(&["mailbox", "list"]);
    assert_eq!(list["mailboxes"][0]["mailbox"], "alice@a.test");
    assert_eq!(list["mailboxes"][0]["verified"], true);
    alice.listen();
    bob.listen();

    // SYN: Bob's mailbox probe, mailed by the gateway.
    let v = bob.ok(&[
        "contact",
        "probe-mail",
        "alice@a.test",
        "--greeting",
        "Hi, it's Bob's agent",
        "--label",
        "Alice",
    ]);
    assert_eq!(v["kind"], "mailbox-probe");
    let request_id = v["request_id"].as_str().unwrap().to_string();
    let probe = gw.one_mail("[RDV-PROBE]");
    // One per address per 30 days: the agent says when the next is allowed.
    let err = bob.fail(&["contact", "probe-mail", "alice@a.test"]);
    assert!(err.contains("next mailbox probe is allowed after"), "{err}");
    assert!(gw.new_mail().is_empty());

    // Alice's mail rule hands it to the gateway; her listener reads the
    // inbox stream: a pending request via mailbox.
    gw.inbound(&alice_token, &probe);
    let req = alice.wait_event("the mailbox probe", |e| e["kind"] == "contact_request");
    assert_eq!(
        (&req["via"], &req["address"], &req["request_id"]),
        (
            &"mailbox".into(),
            &"alice@a.test".into(),
            &request_id.as_str().into()
        )
    );
    assert_eq!(req["from"], bob.id.as_str());
    assert_eq!(
        req["greeting"]["untrusted_peer_text"],
        "Hi, it's Bob's agent"
    );
    let pending = alice.ok(&["contact", "pending"]);
    assert_eq!(pending["requests"][0]["via"], "mailbox");

    // Alice grants: the SYN-ACK goes by mail; her contact waits for the ACK.
    let v = alice.ok(&[
        "contact",
        "grant",
        &request_id,
        "--tier",
        "friend",
        "--label",
        "Bob",
    ]);
    assert_eq!(
        (&v["pending_ack"], &v["via"]),
        (&true.into(), &"mailbox".into())
    );
    let syn_ack = gw.one_mail("[RDV-PROBE-ACK]");
    assert!(alice.contacts().is_empty(), "pending until the ACK lands");

    // Bob's mail rule; his listener: a candidate, not a contact.
    gw.inbound(&bob_token, &syn_ack);
    let cand = bob.wait_event("the SYN-ACK", |e| e["kind"] == "contact_candidate");
    assert_eq!(cand["grantor"], alice.id.as_str());
    assert_eq!(cand["request_id"], request_id.as_str());
    assert!(bob.contacts().is_empty());
    let pending = bob.ok(&["contact", "pending"]);
    assert_eq!(
        pending["sent"][0]["candidates"][0]["agent"],
        alice.id.as_str()
    );

    // Bob confirms: the contact, and the ACK in the first envelope.
    let v = bob.ok(&["contact", "confirm", &request_id]);
    assert_eq!(
        (&v["binding"], &v["ack"]),
        (&"mailbox".into(), &"envelope".into())
    );
    let at_bob = bob.contacts();
    assert_eq!(at_bob.len(), 1);
    assert_eq!(
        (&at_bob[0]["id"], &at_bob[0]["binding"]),
        (&alice.id.as_str().into(), &"mailbox".into())
    );
    // §5.3 direction: Alice's grant is what Bob may do towards her.
    assert_eq!(at_bob[0]["they_allow"]["tier"], "friend");
    assert!(at_bob[0]["we_allow"].is_null());

    // Alice's listener gets the ACK with the cookie: the contact is made,
    // and her gateway releases the probe.
    let made = alice.wait_event("the ACK", |e| e["kind"] == "contact");
    assert_eq!(
        (&made["id"], &made["how"]),
        (&bob.id.as_str().into(), &"acked".into())
    );
    let at_alice = alice.contacts();
    assert_eq!(
        (&at_alice[0]["binding"], &at_alice[0]["we_allow"]["tier"]),
        (&"mailbox".into(), &"friend".into())
    );
    let deadline = Instant::now() + WAIT;
    loop {
        let items = gateway_inbox(&gw, &alice.key_file());
        if items
            .iter()
            .any(|i| i["kind"] == "release" && i["request_id"] == request_id.as_str())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no release at the gateway: {items:?}"
        );
        std::thread::sleep(POLL);
    }

    // Messages both ways.
    bob.ok(&[
        "send",
        &alice.id,
        r#"{"type":"note/text","text":"hello Alice"}"#,
    ]);
    let m = alice.wait_event("Bob's message", |e| e["kind"] == "message");
    assert_eq!(m["from"], bob.id.as_str());
    assert!(
        m["payload"]["untrusted_peer_text"]
            .as_str()
            .unwrap()
            .contains("hello Alice")
    );
    alice.ok(&["send", "Bob", r#"{"type":"note/text","text":"hi Bob"}"#]);
    let m = bob.wait_event("Alice's message", |e| e["kind"] == "message");
    assert_eq!(m["from"], alice.id.as_str());
    for a in [&alice, &bob] {
        assert!(
            !a.inbox().iter().any(|e| e["kind"] == "gateway_refused"),
            "{}",
            a.name
        );
    }
}

#[test]
fn invite_limit_and_opt_out() {
    let carriers = Carriers::start();
    let mut gw = Gateway::start();
    let alice = Agent::init("alice-inv", "alice@a.test", &carriers);
    let bob = Agent::init("bob-inv", "bob@b.test", &carriers);
    alice.prove(&mut gw, "alice@a.test");
    bob.prove(&mut gw, "bob@b.test");

    // The source is required: the invite states where the address came from.
    let r = alice.rdv(&["contact", "invite", "dana@d.test"]);
    assert_eq!(r.code, 2, "{}", r.stderr);

    let v = alice.ok(&[
        "contact",
        "invite",
        "dana@d.test",
        "--source",
        "the school parents' list",
        "--note",
        "Hi Dana, it's Alice.",
    ]);
    let invite_id = v["invite_id"].as_str().unwrap().to_string();
    let mail = gw.one_mail("[RDV-INVITE]");
    assert!(mail.contains("Hi Dana, it's Alice."), "{mail}");
    assert!(mail.contains("the school parents' list"), "{mail}");
    // Stated once, by the gateway, with the explainer link (§5.2.2).
    let unfolded = mail.replace("=\r\n", "").replace("=\n", "");
    assert_eq!(
        unfolded.matches("Where I got your address").count(),
        1,
        "{mail}"
    );
    assert!(unfolded.contains("https://gw.test/v1/about"), "{mail}");

    // One pending invite per address.
    let err = alice.fail(&["contact", "invite", "Dana@D.test", "--source", "again"]);
    assert!(err.contains("is pending since"), "{err}");

    // Dana opts out with the link; Bob's invite is refused by the gateway,
    // and the refusal is shown as such.
    gw.opt_out(&optout_token(&mail));
    let err = bob.fail(&[
        "contact",
        "invite",
        "dana@d.test",
        "--source",
        "Alice mentioned her",
    ]);
    assert!(
        err.contains("opted_out") && err.contains("opted out"),
        "{err}"
    );
    assert!(gw.new_mail().is_empty());
    let told = bob.inbox();
    let refused = told
        .iter()
        .find(|e| e["kind"] == "gateway_refused")
        .unwrap();
    assert_eq!(
        (&refused["what"], &refused["refusal"]),
        (&"invite".into(), &"opted_out".into())
    );
    // Permanent: the agent refuses the next one itself.
    let err = bob.fail(&["contact", "invite", "dana@d.test", "--source", "x"]);
    assert!(err.contains("opted out of invites"), "{err}");

    // Alice records the answer.
    let v = alice.ok(&["contact", "invite-status", &invite_id, "declined"]);
    assert_eq!(v["status"], "declined");
}
