//! The harness of the agent's end-to-end journeys (agent_journeys,
//! agent_carriers, agent_dinner, agent_tasks): relays on ephemeral loopback
//! ports (`rdv-dev-relay`, nostr-rs-relay), the relay bridge (ntfy and MQTT),
//! `rdv` homes and their listeners, and
//! bounded polls of `rdv … --json`. Every process is owned by a guard that
//! kills it when dropped. Each journey file uses what it needs.
#![allow(dead_code)]

use std::cell::Cell;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdv_e2e::{TempDir, bin, free_port, nostr_rs_relay_bin, port_open};
use serde_json::{Value, json};

/// How long a wait polls before the journey fails.
pub const WAIT: Duration = Duration::from_secs(20);
/// A wait that spans a relay's restart: the listener's subscription
/// reconnects after 10 s, and the sender retries on its 5 s tick.
pub const WAIT_RECONNECT: Duration = Duration::from_secs(45);
/// How long one `rdv` command may run (a publish to a dead relay gives up
/// after its 10 s connect timeout).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Between two polls.
pub const POLL: Duration = Duration::from_millis(250);

// ---- relays ----------------------------------------------------------------

pub enum Impl {
    Dev,
    NostrRs(PathBuf),
}

/// A relay on a loopback port of its own, killed when dropped. `stop` and
/// `start` take it down and bring it back on the same port (nostr-rs-relay
/// keeps its SQLite data across; rdv-dev-relay starts empty).
pub struct Relay {
    pub imp: Impl,
    pub port: u16,
    pub url: String,
    pub child: Option<Child>,
    pub dir: TempDir,
    pub starts: usize,
}

impl Relay {
    pub fn dev(name: &str) -> Relay {
        let mut r = Relay {
            imp: Impl::Dev,
            port: 0,
            url: String::new(),
            child: None,
            dir: TempDir::new(&format!("relay-{name}")),
            starts: 0,
        };
        r.start();
        r
    }

    /// nostr-rs-relay, or `None` (a skip line printed) where it is not
    /// installed outside CI.
    pub fn nostr_rs(test: &str) -> Option<Relay> {
        let bin = nostr_rs_relay_bin(test)?;
        let mut r = Relay {
            imp: Impl::NostrRs(bin),
            port: 0,
            url: String::new(),
            child: None,
            dir: TempDir::new(&format!("nostr-rs-relay-{test}")),
            starts: 0,
        };
        r.start();
        Some(r)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("relay-{}.log", self.starts))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the relay is running already");
        match &self.imp {
            Impl::Dev => self.start_dev(),
            Impl::NostrRs(bin) => {
                let bin = bin.clone();
                self.start_nostr_rs(&bin);
            }
        }
    }

    pub fn start_dev(&mut self) {
        self.starts += 1;
        let listen = format!("127.0.0.1:{}", self.port);
        let mut child = Command::new(bin("rdv-dev-relay"))
            .args(["--listen", &listen])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(self.log_path()).unwrap())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let Some(Ok(first)) = lines.next() else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "rdv-dev-relay --listen {listen} exited before printing its URL:\n{}",
                self.log()
            );
        };
        std::thread::spawn(move || for _ in lines {});
        let v: Value = serde_json::from_str(&first).unwrap();
        let url = v["url"].as_str().unwrap().to_string();
        let port: u16 = url
            .trim_start_matches("ws://127.0.0.1:")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|_| panic!("not a loopback relay URL: {url}"));
        if self.port == 0 {
            self.port = port;
            self.url = url;
        } else {
            assert_eq!(port, self.port, "the dev relay came back on another port");
        }
        self.child = Some(child);
    }

    /// nostr-rs-relay reads `config.toml`; it cannot pick a port itself, so
    /// a free one is picked (and picked again if another process took it
    /// first). Its SQLite data lives in this relay's temp directory.
    pub fn start_nostr_rs(&mut self, bin: &Path) {
        let first = self.port == 0;
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        for _ in 0..5 {
            if first {
                self.port = free_port();
            }
            self.starts += 1;
            let config = self.dir.path().join("config.toml");
            std::fs::write(&config, nostr_rs_config(self.port, &data)).unwrap();
            let log = File::create(self.log_path()).unwrap();
            let mut child = Command::new(bin)
                .arg("--config")
                .arg(&config)
                .arg("--db")
                .arg(&data)
                .current_dir(self.dir.path())
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            let deadline = Instant::now() + WAIT;
            let exited = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                if port_open(self.port) {
                    self.url = format!("ws://127.0.0.1:{}", self.port);
                    self.child = Some(child);
                    return;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "nostr-rs-relay did not listen on port {} within {WAIT:?}:\n{}",
                        self.port,
                        self.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            assert!(
                first,
                "nostr-rs-relay did not start again on port {} ({exited}):\n{}",
                self.port,
                self.log()
            );
        }
        panic!(
            "nostr-rs-relay did not start on 5 free ports:\n{}",
            self.log()
        );
    }

    /// Takes the relay down (SIGKILL); its port refuses connections after.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        wait_until("the stopped relay's port to close", WAIT, || {
            (!port_open(self.port)).then_some(())
        });
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// nostr-rs-relay's configuration: loopback only, our port, data in the
/// temp directory, and none of the limits a public relay sets (event and
/// subscription rates, NIP-05, NIP-42, payments, allowlists) so that none
/// can interfere with a journey.
pub fn nostr_rs_config(port: u16, data: &Path) -> String {
    format!(
        r#"[info]
relay_url = "ws://127.0.0.1:{port}/"
name = "rdv-e2e"
description = "nostr-rs-relay for the rdv end-to-end tests"

[database]
engine = "sqlite"
data_directory = "{data}"
in_memory = false

[network]
address = "127.0.0.1"
port = {port}

[options]
reject_future_seconds = 1800

[limits]
messages_per_sec = 0
subscriptions_per_min = 0
max_event_bytes = 131072
max_ws_message_bytes = 131072
max_ws_frame_bytes = 131072

[authorization]
nip42_auth = false

[verified_users]
mode = "disabled"

[pay_to_relay]
enabled = false
"#,
        data = data.display()
    )
}

// ---- an agent's home ---------------------------------------------------------

/// One person's agent: a home of its own, an optional `rdv listen`, and
/// the logs of every command it ran (kept for failure messages).
pub struct Agent {
    pub name: String,
    pub dir: TempDir,
    pub home: PathBuf,
    pub id: String,
    pub fingerprint: String,
    pub listener: Option<Child>,
    pub listens: usize,
    pub runs: Cell<usize>,
}

/// What one `rdv` command did.
pub struct Run {
    pub what: String,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{}: not a JSON line ({e}): {l}", self.what))
            })
            .collect()
    }
}

/// A command still running.
pub struct Running {
    pub what: String,
    pub child: Child,
    pub out: PathBuf,
    pub err: PathBuf,
}

impl Running {
    pub fn finish(mut self) -> Run {
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} ran over {COMMAND_TIMEOUT:?}; stderr:\n{}",
                    self.what,
                    std::fs::read_to_string(&self.err).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let run = Run {
            what: self.what.clone(),
            code: status.code().unwrap_or(-1),
            stdout: std::fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.err).unwrap_or_default(),
        };
        let _ = std::fs::remove_file(&self.out);
        let _ = std::fs::remove_file(&self.err);
        run
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Agent {
    /// A home with no agent yet.
    pub fn new(name: &str) -> Agent {
        let dir = TempDir::new(&format!("agent-{name}"));
        let home = dir.path().join("home");
        Agent {
            name: name.to_string(),
            dir,
            home,
            id: String::new(),
            fingerprint: String::new(),
            listener: None,
            listens: 0,
            runs: Cell::new(0),
        }
    }

    /// `rdv init` with these arguments; the agent's ID kept.
    pub fn init(name: &str, args: &[&str]) -> Agent {
        let mut a = Agent::new(name);
        let mut all = vec!["init"];
        all.extend_from_slice(args);
        let v = a.ok(&all);
        a.id = v["id"].as_str().unwrap().to_string();
        a.fingerprint = v["fingerprint"].as_str().unwrap().to_string();
        assert!(a.id.starts_with("rdv1:"), "{v}");
        a
    }

    /// An agent on `relay`, findable by `address` (no public pointer).
    pub fn on(name: &str, address: &str, relay: &Relay) -> Agent {
        Agent::init(
            name,
            &["--address", address, "--relay", &relay.url, "--allow-ws"],
        )
    }

    /// A copy of this home (`cp -a`): the same key and state, as a person
    /// who copies an old home to another machine has.
    pub fn copy(&self, name: &str) -> Agent {
        assert!(
            self.listener.is_none(),
            "copy a home only with its listener stopped"
        );
        let mut c = Agent::new(name);
        let st = Command::new("cp")
            .arg("-a")
            .arg(&self.home)
            .arg(&c.home)
            .status()
            .unwrap();
        assert!(st.success(), "cp -a {}", self.home.display());
        c.id = self.id.clone();
        c.fingerprint = self.fingerprint.clone();
        c
    }

    pub fn spawn(&self, args: &[&str]) -> Running {
        self.spawn_as(args, true)
    }

    /// `rdv` in text mode (no `--json`): what a person at the terminal sees.
    pub fn text(&self, args: &[&str]) -> Run {
        self.spawn_as(args, false).finish()
    }

    pub fn spawn_as(&self, args: &[&str], json: bool) -> Running {
        let n = self.runs.get();
        self.runs.set(n + 1);
        let out = self.dir.path().join(format!("run-{n}.out"));
        let err = self.dir.path().join(format!("run-{n}.err"));
        let child = Command::new(bin("rdv"))
            .arg("--home")
            .arg(&self.home)
            .args(if json { &["--json"][..] } else { &[][..] })
            .args(args)
            .env_remove("RDV_HOME")
            .env_remove("RDV_PROFILE")
            .env_remove("RDV_LOG_JSON")
            // Discovery's DNS step (§4.4) would ask the system resolver
            // about example.com: these journeys never leave loopback.
            .env("RDV_DNS_SERVER", "off")
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Running {
            what: format!("{}: rdv {}", self.name, args.join(" ")),
            child,
            out,
            err,
        }
    }

    pub fn rdv(&self, args: &[&str]) -> Run {
        self.spawn(args).finish()
    }

    /// Runs a command that must succeed; its (last) JSON line.
    pub fn ok(&self, args: &[&str]) -> Value {
        let r = self.rdv(args);
        assert_eq!(
            r.code, 0,
            "{} failed ({}):\nstdout: {}\nstderr: {}",
            r.what, r.code, r.stdout, r.stderr
        );
        r.lines()
            .pop()
            .unwrap_or_else(|| panic!("{} printed nothing", r.what))
    }

    /// Runs a command that must fail: non-zero exit, nothing on stdout, and
    /// one `rdv: …` message on stderr, which is returned.
    pub fn fail(&self, args: &[&str]) -> String {
        let r = self.rdv(args);
        assert_ne!(
            r.code, 0,
            "{} should have failed; stdout: {}",
            r.what, r.stdout
        );
        assert!(
            r.stdout.trim().is_empty(),
            "{} failed but printed: {}",
            r.what,
            r.stdout
        );
        assert!(
            r.stderr.contains("rdv: "),
            "{}: no message on stderr: {}",
            r.what,
            r.stderr
        );
        r.stderr
    }

    /// Starts `rdv listen --json`; its output goes to log files.
    pub fn listen(&mut self) {
        assert!(self.listener.is_none(), "{} listens already", self.name);
        self.listens += 1;
        let n = self.listens;
        let child = Command::new(bin("rdv"))
            .arg("--home")
            .arg(&self.home)
            .args(["--json", "listen"])
            .env(
                "RDV_LOG",
                std::env::var("RDV_E2E_LISTEN_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("RDV_HOME")
            .env_remove("RDV_PROFILE")
            .env("RDV_DNS_SERVER", "off")
            .stdin(Stdio::null())
            .stdout(File::create(self.dir.path().join(format!("listen-{n}.out"))).unwrap())
            .stderr(File::create(self.dir.path().join(format!("listen-{n}.err"))).unwrap())
            .spawn()
            .unwrap();
        self.listener = Some(child);
    }

    /// Stops the listener as a person does (Ctrl-C: SIGINT) and waits for it.
    pub fn stop_listener(&mut self) {
        let mut c = self.listener.take().expect("a listener");
        // The shell's builtin: no procps needed.
        let st = Command::new("sh")
            .args(["-c", "kill -INT \"$1\"", "sh", &c.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let deadline = Instant::now() + WAIT;
        while c.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!("{}: rdv listen did not stop on SIGINT", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9 of the listener.
    pub fn kill_listener(&mut self) {
        let mut c = self.listener.take().expect("a listener");
        c.kill().unwrap();
        let _ = c.wait();
    }

    /// What the listener wrote on stderr (for failure messages).
    pub fn listener_log(&self) -> String {
        let mut s = String::new();
        for n in 1..=self.listens {
            let p = self.dir.path().join(format!("listen-{n}.err"));
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            s.push_str(&format!("--- listen {n} stderr (last lines) ---\n"));
            for l in tail.into_iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    /// A listener that died is a failure, not a silent timeout later.
    pub fn check_listener(&mut self) {
        if let Some(c) = &mut self.listener
            && let Some(st) = c.try_wait().unwrap()
        {
            panic!(
                "{}: rdv listen exited ({st}):\n{}",
                self.name,
                self.listener_log()
            );
        }
    }

    pub fn inbox(&self) -> Vec<Value> {
        let r = self.rdv(&["inbox", "--limit", "1000"]);
        assert_eq!(r.code, 0, "{}: {}", r.what, r.stderr);
        r.lines()
    }

    /// Polls the inbox until an event matches.
    pub fn wait_event_for(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_listener();
            let events = self.inbox();
            if let Some(e) = events.iter().find(|e| pred(e)) {
                return e.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "{}: no {what} in the inbox within {timeout:?}; inbox:\n{}\n{}",
                    self.name,
                    events
                        .iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join("\n"),
                    self.listener_log()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    pub fn wait_event(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_event_for(what, WAIT, pred)
    }

    /// The free messages received, as (from, seq, payload) in inbox order.
    pub fn messages(&self) -> Vec<(String, u64, Value)> {
        self.inbox()
            .iter()
            .filter(|e| e["kind"] == "message")
            .map(|e| {
                let text = e["payload"]["untrusted_peer_text"].as_str().unwrap();
                (
                    e["from"].as_str().unwrap().to_string(),
                    e["seq"].as_u64().unwrap(),
                    serde_json::from_str(text).unwrap(),
                )
            })
            .collect()
    }

    /// Waits for a note with this text from `from`; the event.
    pub fn wait_note_for(&mut self, from: &Agent, text: &str, timeout: Duration) -> Value {
        let id = from.id.clone();
        let e = self.wait_event_for(&format!("note {text:?} from {}", from.name), timeout, |e| {
            e["kind"] == "message"
                && e["from"] == id.as_str()
                && note_text(e).as_deref() == Some(text)
        });
        assert_eq!(e["payload_type"], "note/text", "{e}");
        e
    }

    pub fn wait_note(&mut self, from: &Agent, text: &str) -> Value {
        self.wait_note_for(from, text, WAIT)
    }

    /// Polls `rdv contact pending --json` until `pick` finds something.
    pub fn wait_pending<T>(&mut self, what: &str, pick: impl Fn(&Value) -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            self.check_listener();
            let p = self.ok(&["contact", "pending"]);
            if let Some(t) = pick(&p) {
                return t;
            }
            if Instant::now() > deadline {
                panic!(
                    "{}: no {what} in `rdv contact pending` within {WAIT:?}: {p}\n{}",
                    self.name,
                    self.listener_log()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits for a request from `from` in our pending list; its entry.
    pub fn wait_request_from(&mut self, from: &Agent) -> Value {
        let id = from.id.clone();
        self.wait_pending(&format!("request from {}", from.name), |p| {
            p["requests"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["from"] == id.as_str())
                .cloned()
        })
    }

    pub fn requests(&self) -> Vec<Value> {
        self.ok(&["contact", "pending"])["requests"]
            .as_array()
            .unwrap()
            .clone()
    }

    pub fn sent_requests(&self) -> Vec<Value> {
        self.ok(&["contact", "pending"])["sent"]
            .as_array()
            .unwrap()
            .clone()
    }

    pub fn contacts(&self) -> Vec<Value> {
        self.ok(&["contact", "list"])["contacts"]
            .as_array()
            .unwrap()
            .clone()
    }

    pub fn contact(&self, other: &Agent) -> Option<Value> {
        self.contacts()
            .into_iter()
            .find(|c| c["id"] == other.id.as_str())
    }

    /// Our signed card, as `rdv card --json` prints it, in a file.
    pub fn card_file(&self) -> PathBuf {
        let card = self.ok(&["card"]);
        assert_eq!(card["id"], self.id.as_str(), "{card}");
        let path = self.dir.path().join("card.json");
        std::fs::write(&path, card.to_string()).unwrap();
        path
    }

    /// Sends a note; the reply (`to`, `seq`, `delivery`).
    pub fn send_note(&self, to: &str, text: &str) -> Value {
        let v = self.ok(&["send", to, &note(text)]);
        assert!(v["seq"].as_u64().is_some(), "{v}");
        v
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.listener.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ---- helpers ---------------------------------------------------------------

pub fn note(text: &str) -> String {
    json!({"type": "note/text", "text": text}).to_string()
}

/// The text of a `note/text` message event.
pub fn note_text(e: &Value) -> Option<String> {
    let raw = e["payload"]["untrusted_peer_text"].as_str()?;
    let v: Value = serde_json::from_str(raw).ok()?;
    v["text"].as_str().map(str::to_string)
}

pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "no {what} within {timeout:?}");
        std::thread::sleep(POLL);
    }
}

/// The relays a delivery report lists under `accepted` or `failed`.
pub fn delivery(reply: &Value, field: &str) -> Vec<String> {
    reply["delivery"]
        .as_array()
        .unwrap_or_else(|| panic!("no delivery in {reply}"))
        .iter()
        .filter(|d| d["carrier"] == "nostr")
        .flat_map(|d| d[field].as_array().cloned().unwrap_or_default())
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// Alice and Bob, each with a listener, made contacts the way two people
/// who met do: Bob imports Alice's card (`rdv card import`), requests
/// contact by her agent ID (an encrypted request), and Alice grants it.
/// Labels: Alice calls him "Bob", he calls her "Alice".
pub fn contacts(relay: &Relay) -> (Agent, Agent) {
    contacts_with(relay, &[])
}

/// As [`contacts`], Alice's grant to Bob carrying `grant_args` too.
pub fn contacts_with(relay: &Relay, grant_args: &[&str]) -> (Agent, Agent) {
    let mut alice = Agent::on("alice", "alice@example.com", relay);
    let mut bob = Agent::on("bob", "bob@example.com", relay);
    alice.listen();
    let card = alice.card_file();
    let kept = bob.ok(&["card", "import", card.to_str().unwrap()]);
    assert_eq!(kept["id"], alice.id.as_str(), "{kept}");
    let r = bob.ok(&[
        "contact",
        "request",
        &alice.id,
        "--greeting",
        "Hi, it's Bob",
        "--label",
        "Alice",
    ]);
    assert_eq!(r["kind"], "card", "{r}");
    assert_eq!(delivery(&r, "accepted"), vec![relay.url.clone()], "{r}");
    bob.listen();
    let req = alice.wait_request_from(&bob);
    assert_eq!(req["via"], "envelope", "{req}");
    let mut grant = vec![
        "contact",
        "grant",
        req["request_id"].as_str().unwrap(),
        "--tier",
        "friend",
        "--label",
        "Bob",
    ];
    grant.extend_from_slice(grant_args);
    let g = alice.ok(&grant);
    assert_eq!(g["contact"], bob.id.as_str(), "{g}");
    let aid = alice.id.clone();
    bob.wait_event("contact with Alice", |e| {
        e["kind"] == "contact" && e["id"] == aid.as_str() && e["how"] == "accepted"
    });
    (alice, bob)
}

/// A fresh agent asks `target` for contact by card; returns once the
/// request is in `target`'s pending list. Everything published to
/// `target` before it, on the same relay, has been handled by then: the
/// relay forwards events in order and the listener takes them one by one.
pub fn sentinel(target: &mut Agent, relay: &Relay) -> Agent {
    let s = Agent::init("sentinel", &["--relay", &relay.url, "--allow-ws"]);
    let card = target.card_file();
    s.ok(&["card", "import", card.to_str().unwrap()]);
    s.ok(&["contact", "request", &target.id, "--greeting", "sentinel"]);
    target.wait_request_from(&s);
    s
}

// ---- the relay bridge (ntfy and MQTT) ------------------------------------------

/// `rdv-relay-bridge serve` on ports 0: its ntfy URL and its embedded MQTT
/// broker's URL; killed when dropped.
pub struct Bridge {
    child: Child,
    pub http: String,
    pub mqtt: String,
    _dir: TempDir,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_bridge() -> Bridge {
    let dir = TempDir::new("bridge");
    let mut child = Command::new(bin("rdv-relay-bridge"))
        .args(["serve", "--http-listen", "127.0.0.1:0"])
        .args(["--mqtt-listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let Some(Ok(first)) = lines.next() else {
        let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
        panic!("the bridge exited before its address line:\n{log}");
    };
    std::thread::spawn(move || for _ in lines {});
    let v: Value = serde_json::from_str(&first).unwrap();
    Bridge {
        child,
        http: format!("http://{}", v["http"].as_str().unwrap()),
        mqtt: format!("mqtt://{}", v["mqtt"].as_str().unwrap()),
        _dir: dir,
    }
}
