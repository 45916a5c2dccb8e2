//! Agent benchmarks against the real binaries on loopback (docs/benchmarks.md,
//! "Agent"). Each prints, in the same run, the primitive it is bound by and
//! the peer a user would pick instead.
//!
//! ```sh
//! cargo build --release -p rdv-agent -p rdv-dev-relay --bins
//! cargo build --release -p rdv-agent --example agent-bench
//! target/release/examples/agent-bench all            # everything below
//! target/release/examples/agent-bench latency 200    # N messages
//! target/release/examples/agent-bench dinner 20 50   # N negotiations, M messages
//! target/release/examples/agent-bench first-contact 5
//! target/release/examples/agent-bench load 1000 10 60  # contacts, msg/s, window s
//! ```
//!
//! - `latency`: `rdv send` on B to the message event printed by A's
//!   `rdv listen --json`, over an `rdv-dev-relay`; the same through the
//!   library (`Runtime::command(Command::Send)` in this process, one runtime
//!   kept open); beside a bare kind-30417 round trip through the same relay
//!   (nostr-sdk: publish on one client, receive on another's subscription)
//!   and a timed loop of `envelope::seal` + `open`. Target: the library path
//!   within 2× of (bare round trip + seal + open).
//! - `dinner`: a full dinner negotiation between two agents (propose →
//!   counter → accept → both humans confirm, SPEC §7.2–§7.3) over the same
//!   relay, `rdv listen` on both homes, the proposal and both confirms
//!   through the library (`Runtime::command`, one runtime per home kept
//!   open): wall time (median, p95) and the envelopes the relay carried per
//!   negotiation, beside the latency mode's message round trip measured in
//!   the same run (M messages), and the ratio.
//! - `first-contact`: discover → request → grant → first message between
//!   two homes with `rdv listen` running on both, each step the tool's wall
//!   time and the network's (until the other side's listener prints the
//!   event), human steps excluded; by card (discover then request the ID)
//!   and by topic probe (request the address, grant, confirm).
//! - `load`: a home with N contacts built through the core (real requests
//!   and grants between in-memory agents, written with `Store`), the real
//!   `rdv listen` on it, R messages/s from the peers (sealed by their cores,
//!   published with nostr-sdk): its VmRSS and CPU over the window, beside a
//!   bare nostr-sdk subscriber process receiving the same stream, and
//!   `rdv status`'s wall time on that home beside its floor (process start,
//!   and opening the store and reading the summary it prints in-process;
//!   and the whole-state load it did before).
//!
//! Binaries are taken beside this example (target/release), or from
//! `RDV_BIN` and `RDV_DEV_RELAY_BIN`. The relay is rdv-dev-relay's, without
//! its 60 events/minute per connection limit ([`Relay::start`]).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Proc, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use nostr_sdk::prelude::{Alphabet, Event as SdkEvent, Filter, JsonUtil, Kind, SingleLetterTag};
use nostr_sdk::{Client, RelayPoolNotification};
use rdv_agent::home::Home;
use rdv_agent::runtime::{Options, Runtime};
use rdv_agent::store::Store;
use rdv_agent_core::agent::default_scope;
use rdv_agent_core::meeting::{self, Proposal, Slot};
use rdv_agent_core::record::{Table, Write};
use rdv_agent_core::state::State;
use rdv_agent_core::{Agent, Command, Ctx, Effect, Input, PublishOutcome, RequestTo, Setup};
use rdv_proto::envelope::{self, SealParams};
use rdv_proto::{AgentId, AgentKey, canon};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

// ---- processes -------------------------------------------------------------

fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

fn rdv_bin() -> PathBuf {
    std::env::var_os("RDV_BIN").map_or_else(|| bin_dir().join("rdv"), PathBuf::from)
}

fn relay_bin() -> PathBuf {
    std::env::var_os("RDV_DEV_RELAY_BIN")
        .map_or_else(|| bin_dir().join("rdv-dev-relay"), PathBuf::from)
}

struct Relay {
    child: Child,
    url: String,
}

impl Relay {
    /// rdv-dev-relay's relay (nostr-relay-builder's `LocalRelay`, built the
    /// same way) in a process of its own, with the builder's per-connection
    /// limit of 60 events a minute lifted: one runtime sending 200 messages,
    /// or 10 a second, would be refused past it. `RDV_BENCH_RELAY=dev` runs
    /// rdv-dev-relay itself (then keep under 60 messages a minute).
    fn start() -> Relay {
        let mut cmd = if std::env::var_os("RDV_BENCH_RELAY").is_some_and(|v| v == "dev") {
            Proc::new(relay_bin())
        } else {
            let mut c = Proc::new(std::env::current_exe().unwrap());
            c.arg("relay");
            c
        };
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", relay_bin().display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        Relay {
            child,
            url: v["url"].as_str().unwrap().trim_end_matches('/').to_string(),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `rdv --home H --json ARGS`; its wall time and its JSON answer.
fn rdv(home: &Path, args: &[&str]) -> (Duration, Value) {
    let t = Instant::now();
    let out = Proc::new(rdv_bin())
        .arg("--home")
        .arg(home)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "rdv {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        d,
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
    )
}

/// `rdv listen --json` on a home, each line it prints timestamped.
struct Listener {
    child: Child,
    rx: mpsc::Receiver<(Instant, Value)>,
}

impl Listener {
    fn start(home: &Path) -> Listener {
        let err = std::fs::File::create(home.with_extension("listen.log")).unwrap();
        let mut child = Proc::new(rdv_bin())
            .arg("--home")
            .arg(home)
            .arg("--json")
            .arg("listen")
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let t = Instant::now();
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send((t, v)).is_err()
                {
                    break;
                }
            }
        });
        // Ready once it holds the listener lock and had a moment to subscribe.
        let deadline = Instant::now() + WAIT;
        loop {
            let (_, v) = rdv(home, &["status"]);
            if v["inbound"] == "consumer running" {
                break;
            }
            assert!(Instant::now() < deadline, "rdv listen did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(1000));
        Listener { child, rx }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The line channel, for a reader thread (a closed one is left behind).
    fn take_rx(&mut self) -> mpsc::Receiver<(Instant, Value)> {
        std::mem::replace(&mut self.rx, mpsc::channel().1)
    }

    /// The first event printed that `pred` accepts, with when it was read.
    fn wait(&self, pred: impl Fn(&Value) -> bool) -> (Instant, Value) {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok((t, v)) if pred(&v) => return (t, v),
                Ok(_) => {}
                Err(e) => panic!("waiting for an event from rdv listen: {e}"),
            }
        }
    }

    fn wait_kind(&self, kind: &str) -> (Instant, Value) {
        self.wait(|v| v["kind"] == kind)
    }

    fn wait_text(&self, text: &str) -> Instant {
        let needle = format!("\"{text}\"");
        self.wait(|v| {
            v["kind"] == "message"
                && v["payload"]["untrusted_peer_text"]
                    .as_str()
                    .is_some_and(|p| p.contains(&needle))
        })
        .0
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // rdv listen stops on Ctrl-C (SIGINT).
        let _ = Proc::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- figures ----------------------------------------------------------------

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Nearest-rank percentile.
fn pct(v: &[Duration], p: f64) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    if s.is_empty() {
        return Duration::ZERO;
    }
    let i = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

fn line(name: &str, v: &[Duration]) {
    println!(
        "  {name:<48} p50 {:>8.3} ms  p99 {:>8.3} ms  (n={})",
        ms(pct(v, 0.5)),
        ms(pct(v, 0.99)),
        v.len()
    );
}

fn tmp_home(root: &Path, name: &str) -> PathBuf {
    root.join(name)
}

fn init(home: &Path, address: &str, relay: &str) -> (Duration, AgentId) {
    let (d, v) = rdv(
        home,
        &[
            "init",
            "--address",
            address,
            "--relay",
            relay,
            "--public-pointer",
            "--allow-ws",
        ],
    );
    (d, AgentId::parse(v["id"].as_str().unwrap()).unwrap())
}

fn note(text: &str) -> String {
    json!({"type": "note/text", "text": text}).to_string()
}

// ---- the bare Nostr round trip ------------------------------------------------

/// A fresh envelope event to `to`, as rdv would publish it (same size).
fn envelope_event(from: &AgentKey, to: &AgentId, text: &str) -> SdkEvent {
    let now = time::OffsetDateTime::now_utc();
    let p = SealParams::new(from, to, 1, None, now, &mut rand_core::OsRng);
    let env = envelope::seal(&json!({"type": "note/text", "text": text}), &p).unwrap();
    let mut aux = [0u8; 32];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut aux);
    let ev = rdv_proto::nostr_event::envelope_event(
        &env,
        &from.nostr_keys().unwrap(),
        now.unix_timestamp() as u64,
        aux,
    )
    .unwrap();
    SdkEvent::from_json(ev.as_json()).unwrap()
}

async fn client(url: &str) -> Client {
    let c = Client::default();
    c.add_relay(url).await.unwrap();
    c.connect().await;
    c.wait_for_connection(Duration::from_secs(5)).await;
    c
}

fn p_filter(to: &AgentId) -> Filter {
    Filter::new()
        .kind(Kind::Custom(rdv_proto::consts::NOSTR_KIND))
        .custom_tag(
            SingleLetterTag::lowercase(Alphabet::P),
            hex::encode(to.key_bytes()),
        )
}

/// Publish → received on another client's subscription, `n` times; and
/// publish → the relay's OK.
async fn bare_round_trips(url: &str, n: usize) -> (Vec<Duration>, Vec<Duration>) {
    let from = AgentKey::generate(&mut rand_core::OsRng);
    let to = AgentKey::generate(&mut rand_core::OsRng);
    let sub = client(url).await;
    let mut notes = sub.notifications();
    sub.subscribe(p_filter(to.id()), None).await.unwrap();
    let publisher = client(url).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut rt, mut ok) = (Vec::new(), Vec::new());
    for i in 0..n + 5 {
        let ev = envelope_event(&from, to.id(), &format!("bare-{i}"));
        let t = Instant::now();
        let sent = publisher.send_event(&ev).await.unwrap();
        let t_ok = t.elapsed();
        assert!(
            sent.failed.is_empty(),
            "the relay refused: {:?}",
            sent.failed
        );
        loop {
            match tokio::time::timeout(WAIT, notes.recv()).await {
                Ok(Ok(RelayPoolNotification::Event { event, .. })) if event.id == ev.id => break,
                Ok(Ok(_)) => {}
                other => panic!("bare subscription: {other:?}"),
            }
        }
        if i >= 5 {
            rt.push(t.elapsed());
            ok.push(t_ok);
        }
    }
    publisher.shutdown().await;
    sub.shutdown().await;
    (rt, ok)
}

/// seal and open of the benchmark's message, `n` times.
fn seal_open(n: usize) -> (Vec<Duration>, Vec<Duration>) {
    let a = AgentKey::generate(&mut rand_core::OsRng);
    let b = AgentKey::generate(&mut rand_core::OsRng);
    let payload = json!({"type": "note/text", "text": "lib-000"});
    let (mut s, mut o) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let now = time::OffsetDateTime::now_utc();
        let t = Instant::now();
        let p = SealParams::new(&a, b.id(), 1, None, now, &mut rand_core::OsRng);
        let env = envelope::seal(&payload, &p).unwrap();
        let t1 = Instant::now();
        let bytes = canon::to_vec(&env).unwrap();
        let opened = envelope::open(&bytes, &b, now).unwrap();
        let t2 = Instant::now();
        std::hint::black_box(opened);
        s.push(t1 - t);
        o.push(t2 - t1);
    }
    (s, o)
}

// ---- first contact ------------------------------------------------------------

/// One step: a tool's run (or several), then the wait until the other side
/// printed what it caused. Returns (tools, total).
struct Step {
    name: &'static str,
    tools: Duration,
    total: Duration,
}

struct Pair {
    a: PathBuf,
    b: PathBuf,
    a_id: AgentId,
    la: Listener,
    /// B's listener, kept running.
    lb: Listener,
}

/// Two homes, both listening; `first contact` by card or by probe. The
/// pair is left as contacts (B calls A "Alice", A calls B "Bob").
fn first_contact(root: &Path, tag: &str, relay: &str, by_card: bool) -> (Pair, Vec<Step>) {
    let a = tmp_home(root, &format!("{tag}-a"));
    let b = tmp_home(root, &format!("{tag}-b"));
    let addr_a = format!("alice-{tag}@example.com");
    let (_, a_id) = init(&a, &addr_a, relay);
    init(&b, &format!("bob-{tag}@example.com"), relay);
    let la = Listener::start(&a);
    let lb = Listener::start(&b);
    let mut steps = Vec::new();
    let target = if by_card {
        let t = Instant::now();
        let (d, v) = rdv(&b, &["discover", &addr_a]);
        let found = v["found"][0]["id"].as_str().expect("discover found Alice");
        assert_eq!(found, a_id.as_str());
        steps.push(Step {
            name: "discover (B: rdv discover ADDRESS)",
            tools: d,
            total: t.elapsed(),
        });
        found.to_string()
    } else {
        addr_a.clone()
    };
    // request
    let t = Instant::now();
    let (d, _) = rdv(&b, &["contact", "request", &target, "--label", "Alice"]);
    let end = t + d;
    let (seen, _) = la.wait_kind("contact_request");
    steps.push(Step {
        name: if by_card {
            "request by card (B), until A's listener has it"
        } else {
            "request by probe (B), until A's listener has it"
        },
        tools: d,
        total: end.max(seen) - t,
    });
    // grant
    let t = Instant::now();
    let (d1, v) = rdv(&a, &["contact", "pending"]);
    let req = v["requests"][0]["request_id"].as_str().unwrap().to_string();
    let (d2, _) = rdv(
        &a,
        &[
            "contact",
            "grant",
            &req,
            "--tier",
            "friend",
            "--label",
            "Bob",
            "--max-frequency",
            "100000/day",
        ],
    );
    let end = Instant::now();
    let kind = if by_card {
        "contact"
    } else {
        "contact_candidate"
    };
    let (seen, _) = lb.wait_kind(kind);
    steps.push(Step {
        name: if by_card {
            "grant (A: pending + grant), until B has the contact"
        } else {
            "grant (A: pending + grant), until B has the candidate"
        },
        tools: d1 + d2,
        total: end.max(seen) - t,
    });
    if !by_card {
        let t = Instant::now();
        let (d1, v) = rdv(&b, &["contact", "pending"]);
        let req = v["sent"][0]["request_id"].as_str().unwrap().to_string();
        let (d2, _) = rdv(&b, &["contact", "confirm", &req]);
        steps.push(Step {
            name: "confirm (B: pending + confirm)",
            tools: d1 + d2,
            total: t.elapsed(),
        });
    }
    let t = Instant::now();
    let (d, _) = rdv(&b, &["send", "Alice", &note("first")]);
    let end = t + d;
    let seen = la.wait_text("first");
    steps.push(Step {
        name: "first message (B: rdv send), until A's listener has it",
        tools: d,
        total: end.max(seen) - t,
    });
    (Pair { a, b, a_id, la, lb }, steps)
}

fn run_first_contact(root: &Path, relay: &Relay, runs: usize, bare_p50: Duration) {
    println!("\n== time to first contact (rdv listen on both homes; human steps excluded)");
    for by_card in [true, false] {
        let mut totals = Vec::new();
        let mut per_step: BTreeMap<usize, (&'static str, Vec<Duration>, Vec<Duration>)> =
            BTreeMap::new();
        for r in 0..runs {
            let tag = format!("fc{}{r}", if by_card { "c" } else { "p" });
            let (_pair, steps) = first_contact(root, &tag, &relay.url, by_card);
            totals.push(steps.iter().map(|s| s.total).sum::<Duration>());
            for (i, s) in steps.iter().enumerate() {
                let e = per_step
                    .entry(i)
                    .or_insert((s.name, Vec::new(), Vec::new()));
                e.1.push(s.tools);
                e.2.push(s.total);
            }
        }
        println!(
            "  {} ({runs} runs; per step: tools' wall time / tools + network, median)",
            if by_card {
                "by card: discover → request → grant → message"
            } else {
                "by probe: request → grant → confirm → message"
            }
        );
        for (name, tools, total) in per_step.values() {
            println!(
                "    {name:<58} {:>8.1} / {:>8.1} ms",
                ms(pct(tools, 0.5)),
                ms(pct(total, 0.5))
            );
        }
        let trips = 3.0;
        println!(
            "    total: median {:.1} ms, min {:.1}, max {:.1}; bare Nostr floor (3 one-way trips at the bare p50) {:.1} ms: {:.0}×",
            ms(pct(&totals, 0.5)),
            ms(pct(&totals, 0.0)),
            ms(pct(&totals, 1.0)),
            ms(bare_p50) * trips,
            ms(pct(&totals, 0.5)) / (ms(bare_p50) * trips)
        );
    }
}

// ---- message latency ----------------------------------------------------------

/// The latency mode's figures other modes are set beside.
struct Latency {
    /// The bare kind-30417 round trip, p50.
    bare_p50: Duration,
    /// The library path, command start → the other listener prints, p50.
    lib_p50: Duration,
}

fn run_latency(
    root: &Path,
    relay: &Relay,
    n: usize,
    tokio_rt: &tokio::runtime::Runtime,
) -> Latency {
    println!("\n== message latency over rdv-dev-relay ({n} messages each, one at a time)");
    let (bare, bare_ok) = tokio_rt.block_on(bare_round_trips(&relay.url, n));
    let (seal, open) = seal_open(n.max(500));
    let (pair, _) = first_contact(root, "lat", &relay.url, true);
    // The whole command: process start, SQLite open, relay connect, publish.
    let floor: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            Proc::new(rdv_bin()).arg("--version").output().unwrap();
            t.elapsed()
        })
        .collect();
    // A new WebSocket to the relay, as each `rdv send` opens one.
    let connect: Vec<Duration> = tokio_rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let c = client(&relay.url).await;
            v.push(t.elapsed());
            c.shutdown().await;
        }
        v
    });
    let mut cli = Vec::new();
    let mut cli_cmd = Vec::new();
    for i in 0..n {
        let text = format!("cli-{i:03}");
        let t = Instant::now();
        let (d, _) = rdv(&pair.b, &["send", "Alice", &note(&text)]);
        let seen = pair.la.wait_text(&text);
        cli.push(seen - t);
        cli_cmd.push(d);
    }
    // The library path: one runtime kept open, as rdv-mcp or a long-lived app.
    let mut lib = Vec::new();
    let mut lib_cmd = Vec::new();
    let (mut lib_apply, mut lib_carry) = (Vec::new(), Vec::new());
    let mut rt = tokio_rt
        .block_on(Runtime::open(Home::at(&pair.b), Options::default()))
        .unwrap();
    for i in 0..n + 3 {
        let text = format!("lib-{i:03}");
        let payload = json!({"type": "note/text", "text": text});
        // What Runtime::command does, in its two halves: decide and commit
        // (Runtime::apply), then publish and commit the relay's answer
        // (Runtime::carry).
        let t = Instant::now();
        let (applied, report) = tokio_rt.block_on(async {
            let out = rt
                .apply(Input::Command(Command::Send {
                    to: pair.a_id.clone(),
                    payload,
                }))
                .await
                .unwrap();
            let applied = t.elapsed();
            (applied, rt.carry(out.effects).await.unwrap())
        });
        let d = t.elapsed();
        assert!(report[0]["accepted"][0].is_string(), "{report:?}");
        let seen = pair.la.wait_text(&text);
        if i >= 3 {
            lib.push(seen - t);
            lib_cmd.push(d);
            lib_apply.push(applied);
            lib_carry.push(d - applied);
        }
    }
    drop(rt);
    // The store commits with synchronous=FULL: an fsync per commit, two on
    // the way (the send, the receipt); the relay's OK commits without one
    // (Store::begin_outcome).
    let fsync: Vec<Duration> = (0..50)
        .map(|i| {
            use std::io::Write as _;
            let mut f = std::fs::File::create(root.join("fsync.tmp")).unwrap();
            f.write_all(&[i as u8; 4096]).unwrap();
            let t = Instant::now();
            f.sync_all().unwrap();
            t.elapsed()
        })
        .collect();
    // One commit of one small record through the store (WAL,
    // synchronous=FULL), and the same as a delivery's outcome commits it
    // (Store::begin_outcome: synchronous=NORMAL, no fsync).
    let commits = |outcome: bool| -> Vec<Duration> {
        tokio_rt.block_on(async {
            let store = Store::open(&root.join(format!("commit-{outcome}.db")))
                .await
                .unwrap();
            let mut v = Vec::new();
            for i in 0..50 {
                let t = Instant::now();
                let mut tx = if outcome {
                    store.begin_outcome().await.unwrap()
                } else {
                    store.begin().await.unwrap()
                };
                tx.write(&[Write {
                    table: Table::Seen,
                    key: format!("k{i}"),
                    value: Some(json!(i)),
                }])
                .await
                .unwrap();
                tx.commit().await.unwrap();
                v.push(t.elapsed());
            }
            store.close().await;
            v
        })
    };
    let commit = commits(false);
    let outcome_commit = commits(true);
    let status: Vec<Duration> = (0..20).map(|_| rdv(&pair.b, &["status"]).0).collect();
    let so = pct(&seal, 0.5) + pct(&open, 0.5);
    line("seal (note/text payload)", &seal);
    line("open", &open);
    line("bare kind-30417: publish → relay OK", &bare_ok);
    line("bare kind-30417: publish → other client's sub", &bare);
    line("rdv process floor: `rdv --version`", &floor);
    line("relay connect (nostr-sdk client, WebSocket)", &connect);
    line("CLI: `rdv send` wall time", &cli_cmd);
    line("CLI: `rdv send` start → A's listener prints", &cli);
    line("`rdv status` on B (process + SQLite open + load)", &status);
    line("fsync of a new 4 KiB file, same file system", &fsync);
    line(
        "Store commit of one record (WAL, synchronous=FULL)",
        &commit,
    );
    line(
        "Store commit of one record, as an outcome (synchronous=NORMAL)",
        &outcome_commit,
    );
    line("library: Runtime::apply(Send): seal + commit", &lib_apply);
    line("library: Runtime::carry: publish, OK, commit", &lib_carry);
    line("library: Runtime::command(Send) returns", &lib_cmd);
    line("library: command start → A's listener prints", &lib);
    let bound50 = pct(&bare, 0.5) + so;
    let bound99 = pct(&bare, 0.99) + so;
    println!(
        "  bound = bare round trip + seal + open: p50 {:.3} ms, p99 {:.3} ms",
        ms(bound50),
        ms(bound99)
    );
    // §7 persistence puts two commits on the way: the sender's before the
    // publish, the receiver's before it shows the message. No agent that
    // keeps that rule can go under this floor, however it is written.
    let durable = bound50 + 2 * pct(&commit, 0.5);
    println!(
        "  library floor = bound + the two durable commits §7 puts on the way: {:.3} ms = {:.2}× the bound; library p50 is {:.2}× the floor",
        ms(durable),
        ms(durable) / ms(bound50),
        ms(pct(&lib, 0.5)) / ms(durable)
    );
    // A command run as its own process also starts, and opens a WebSocket.
    let cli_floor = durable + pct(&floor, 0.5) + pct(&connect, 0.5);
    println!(
        "  CLI floor = library floor + process start + relay connect: {:.3} ms = {:.2}× the bound; CLI p50 is {:.2}× the floor",
        ms(cli_floor),
        ms(cli_floor) / ms(bound50),
        ms(pct(&cli, 0.5)) / ms(cli_floor)
    );
    if ms(durable) / ms(bound50) > 2.0 {
        println!(
            "  the target (≤ 2× the bound) is under the floor of this run: it cannot be met on this machine"
        );
    }
    for (name, v) in [("library", &lib), ("CLI", &cli)] {
        let (r50, r99) = (
            ms(pct(v, 0.5)) / ms(bound50),
            ms(pct(v, 0.99)) / ms(bound99),
        );
        println!(
            "  {name}: p50 {r50:.2}× / p99 {r99:.2}× the bound (target ≤ 2×: {})",
            if r50 <= 2.0 && r99 <= 2.0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    Latency {
        bare_p50: pct(&bare, 0.5),
        lib_p50: pct(&lib, 0.5),
    }
}

// ---- dinner ---------------------------------------------------------------------

/// The negotiation `task_id` with `peer`, as `rt` holds it.
fn meeting_of<'a>(rt: &'a Runtime, task_id: &str, peer: &AgentId) -> &'a meeting::MeetingTask {
    rt.agent()
        .state
        .meetings
        .tasks
        .values()
        .find(|m| m.task_id == task_id && &m.peer == peer)
        .expect("the meeting")
}

/// The human's confirm through the library, as `rdv dinner confirm` does
/// it: the state as the listener committed it, the code shown for the
/// meeting waiting (`meeting_cmd::issue_code`: a phrase drawn and its
/// scrypt hash kept, what `rdv dinner list` prints), then
/// `Command::ConfirmMeeting` (the hash checked). Its wall time.
fn human_confirm(
    rt: &mut Runtime,
    peer: &AgentId,
    task_id: &str,
    tokio_rt: &tokio::runtime::Runtime,
) -> Duration {
    let t = Instant::now();
    tokio_rt.block_on(async {
        rt.refresh().await.unwrap();
        let (stage, _, digest) = meeting::current_step(meeting_of(rt, task_id, peer))
            .expect("a step waiting for the human");
        let code = rdv_agent::meeting_cmd::issue_code(rt, task_id, peer, stage, &digest)
            .await
            .unwrap()
            .expect("a code for the meeting shown");
        let v = rt
            .command(Command::ConfirmMeeting {
                task_id: task_id.to_string(),
                peer: Some(peer.clone()),
                code: rdv_agent_core::owner::Secret::new(code.expose()),
            })
            .await
            .unwrap();
        assert_eq!(v["confirmed"], true, "{v}");
    });
    t.elapsed()
}

/// Envelopes the relay carried to either agent until it has been quiet for
/// `quiet` (bounded by [`WAIT`]).
async fn drain_envelopes(
    notes: &mut tokio::sync::broadcast::Receiver<RelayPoolNotification>,
    quiet: Duration,
) -> usize {
    let mut ids = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(quiet.min(left), notes.recv()).await {
            Ok(Ok(RelayPoolNotification::Event { event, .. })) => {
                ids.insert(event.id);
            }
            Ok(Ok(_)) => {}
            _ => return ids.len(),
        }
    }
}

/// A full dinner negotiation between two agents over the local relay,
/// `n` times: B proposes an evening A's calendar is busy on (library,
/// `Command::ProposeMeeting`); A's `rdv listen` counters with free slots;
/// B's listener holds the first and waits for B; B confirms (library); A's
/// listener holds it and waits for A; A confirms (library); done when B's
/// listener prints `completed`. Humans answer at once: the wall time is the
/// agents' and the network's. Beside it, the message round trip of the
/// latency mode in the same run.
fn run_dinner(
    root: &Path,
    relay: &Relay,
    n: usize,
    lat: &Latency,
    tokio_rt: &tokio::runtime::Runtime,
) {
    println!(
        "\n== dinner negotiation over rdv-dev-relay (propose → counter → accept → both humans confirm; {n} runs)"
    );
    let pair = first_contact(root, "din", &relay.url, true).0;
    let open = |h: &Path| {
        tokio_rt
            .block_on(Runtime::open(Home::at(h), Options::default()))
            .unwrap()
    };
    let (mut rt_a, mut rt_b) = (open(&pair.a), open(&pair.b));
    let b_id = rt_b.agent().id().clone();
    // An evening per run, 19:00-21:00 UTC, every other day from the day
    // after tomorrow on: A's calendar is busy on each, so every proposal is
    // countered, with the same evening on the next days (the reference
    // policy), and the day after each is still free on both sides.
    let today = time::OffsetDateTime::now_utc().unix_timestamp() / 86_400;
    let evenings: Vec<Slot> = (0..n as i64)
        .map(|r| {
            let day = today + 2 + 2 * r;
            let at = |h: i64| rdv_proto::time::from_unix(day * 86_400 + h * 3600);
            Slot::new(at(19).unwrap(), at(21).unwrap()).unwrap()
        })
        .collect();
    tokio_rt
        .block_on(rt_a.command(Command::SetCalendar {
            busy: evenings.clone(),
            sources: vec!["agent-bench".into()],
        }))
        .unwrap();
    // Every envelope the relay carries to A or B, counted per negotiation.
    let (counter, mut notes) = tokio_rt.block_on(async {
        let c = client(&relay.url).await;
        let notes = c.notifications();
        c.subscribe(p_filter(&pair.a_id), None).await.unwrap();
        c.subscribe(p_filter(&b_id), None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        (c, notes)
    });
    tokio_rt.block_on(drain_envelopes(&mut notes, Duration::from_millis(300)));
    let is = |id: &str, step: &'static str| {
        let id = id.to_string();
        move |e: &Value| e["kind"] == "meeting" && e["task_id"] == id.as_str() && e["step"] == step
    };
    let (mut wall, mut confirms, mut msgs) = (Vec::new(), Vec::new(), Vec::new());
    for slot in &evenings {
        let t = Instant::now();
        let v = tokio_rt
            .block_on(rt_b.command(Command::ProposeMeeting(Proposal {
                to: pair.a_id.clone(),
                slots: vec![*slot],
                window: None,
                expires: None,
                place: None,
                intent: Some("dinner".into()),
            })))
            .unwrap();
        let id = v["task_id"].as_str().unwrap().to_string();
        // A counters (its calendar is busy); B's agent holds the first free
        // slot of the counter and waits for B.
        pair.lb.wait(is(&id, "confirm-needed"));
        let cb = human_confirm(&mut rt_b, &pair.a_id, &id, tokio_rt);
        // B's accept reaches A, whose agent holds it and waits for A.
        pair.la.wait(is(&id, "confirm-needed"));
        let ca = human_confirm(&mut rt_a, &b_id, &id, tokio_rt);
        // A's confirm reaches B: agreed on both sides.
        let (done, _) = pair.lb.wait(is(&id, "completed"));
        wall.push(done - t);
        confirms.push(ca + cb);
        msgs.push(tokio_rt.block_on(drain_envelopes(&mut notes, Duration::from_millis(500))));
        tokio_rt.block_on(async {
            rt_a.refresh().await.unwrap();
            rt_b.refresh().await.unwrap();
        });
        for (rt, peer) in [(&rt_a, &b_id), (&rt_b, &pair.a_id)] {
            assert_eq!(meeting_of(rt, &id, peer).state.as_str(), "completed");
        }
    }
    tokio_rt.block_on(counter.shutdown());
    drop((rt_a, rt_b));
    msgs.sort_unstable();
    let per = msgs[msgs.len() / 2];
    let (med, p95) = (pct(&wall, 0.5), pct(&wall, 0.95));
    println!(
        "  negotiation wall time (propose → B's listener prints completed)  median {:>8.1} ms  p95 {:>8.1} ms  (n={n})",
        ms(med),
        ms(p95)
    );
    println!(
        "    of which the two human confirms through the library (refresh + code + ConfirmMeeting): median {:.1} ms",
        ms(pct(&confirms, 0.5))
    );
    println!(
        "  envelopes over the relay per negotiation, both ways: median {per} (min {}, max {})",
        msgs[0],
        msgs[msgs.len() - 1]
    );
    println!(
        "  message round trip in this run (library: command start → the other listener prints): p50 {:.1} ms; bare Nostr p50 {:.3} ms",
        ms(lat.lib_p50),
        ms(lat.bare_p50)
    );
    println!(
        "  negotiation / message round trip: median {:.1}×, p95 {:.1}× (one message's trip per envelope would be {per}×)",
        ms(med) / ms(lat.lib_p50),
        ms(p95) / ms(lat.lib_p50)
    );
}

// ---- load ---------------------------------------------------------------------

/// An agent in memory, its records kept as the store would.
struct Node {
    agent: Agent,
    seed: [u8; 32],
    records: BTreeMap<(Table, String), Value>,
}

impl Node {
    fn new() -> Node {
        let key = AgentKey::generate(&mut rand_core::OsRng);
        Node {
            seed: *key.seed(),
            agent: Agent::new(key, State::default()),
            records: BTreeMap::new(),
        }
    }

    fn handle(&mut self, input: Input) -> rdv_agent_core::Output {
        let mut rng = rand_core::OsRng;
        let mut ctx = Ctx {
            now: time::OffsetDateTime::now_utc(),
            rng: &mut rng,
        };
        let out = self.agent.handle(input, &mut ctx).unwrap();
        for w in &out.writes {
            match &w.value {
                Some(v) => self.records.insert((w.table, w.key.clone()), v.clone()),
                None => self.records.remove(&(w.table, w.key.clone())),
            };
        }
        out
    }

    fn init(&mut self, address: &str, relay: &str) {
        let out = self.handle(Input::Command(Command::Init(Setup {
            addresses: vec![(address.into(), true)],
            relays: vec![relay.into()],
            public_pointer: false,
            inbound: "prompt".into(),
            allow_ws: true,
            suggest: true,
            ..Setup::default()
        })));
        self.settle(out.effects);
    }

    /// Reports every publish as accepted; returns the events published.
    fn settle(&mut self, effects: Vec<Effect>) -> Vec<nostr::event::Event> {
        let mut events = Vec::new();
        let mut queue = effects;
        while let Some(e) = queue.pop() {
            if let Effect::PublishNostr {
                delivery,
                event,
                relays,
            } = e
            {
                let outcomes = relays
                    .into_iter()
                    .map(|r| (r, PublishOutcome::Accepted))
                    .collect();
                events.push(*event);
                let out = self.handle(Input::Published { delivery, outcomes });
                queue.extend(out.effects);
            }
        }
        events
    }

    fn deliver(&mut self, events: &[nostr::event::Event]) -> Vec<nostr::event::Event> {
        let mut out_events = Vec::new();
        for ev in events {
            let out = self.handle(Input::Nostr {
                relay: "bench".into(),
                json: ev.as_json().into_bytes(),
            });
            out_events.extend(self.settle(out.effects));
        }
        out_events
    }
}

/// Alice with `n` contacts, each a real request by card she granted.
fn build_home(
    home: &Path,
    relay: &str,
    n: usize,
    tokio_rt: &tokio::runtime::Runtime,
) -> (AgentId, Vec<Node>) {
    let t = Instant::now();
    let mut alice = Node::new();
    alice.init("alice@example.com", relay);
    let card = alice.agent.state.profile().unwrap().card.clone();
    let mut peers = Vec::with_capacity(n);
    for i in 0..n {
        let mut p = Node::new();
        p.init(&format!("peer{i}@example.com"), relay);
        let out = p.handle(Input::Command(Command::Request {
            to: RequestTo::Card(card.clone()),
            greeting: String::new(),
            label: Some("Alice".into()),
        }));
        let req = out.reply.as_ref().unwrap()["request_id"]
            .as_str()
            .unwrap()
            .to_string();
        let evs = p.settle(out.effects);
        alice.deliver(&evs);
        let out = alice.handle(Input::Command(Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: default_scope(false, &[], "100000/day"),
            label: Some(format!("peer{i}")),
        }));
        let evs = alice.settle(out.effects);
        p.deliver(&evs);
        assert!(p.agent.state.contact(alice.agent.id()).is_some());
        peers.push(p);
    }
    let s = &alice.agent.state;
    assert_eq!(s.contacts.len(), n);
    assert!(s.deliveries.is_empty() && s.pending.is_empty());
    let built = t.elapsed();
    let home_h = Home::at(home);
    home_h.create().unwrap();
    home_h.write_seed(&alice.seed).unwrap();
    let writes: Vec<Write> = alice
        .records
        .iter()
        .map(|((t, k), v)| Write {
            table: *t,
            key: k.clone(),
            value: Some(v.clone()),
        })
        .collect();
    tokio_rt.block_on(async {
        let store = Store::open(&home_h.db_path()).await.unwrap();
        let mut tx = store.begin().await.unwrap();
        tx.write(&writes).await.unwrap();
        tx.commit().await.unwrap();
        store.close().await;
    });
    println!(
        "  home built through the core: {n} contacts, {} records, in {:.1} s",
        writes.len(),
        built.as_secs_f64()
    );
    (alice.agent.id().clone(), peers)
}

fn clk_tck() -> f64 {
    Proc::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// VmRSS in KiB.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|x| x.parse().ok())
        .unwrap_or(0)
}

/// utime + stime, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat; `after` starts at field 3.
    f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
}

/// What a window measured for one process.
struct Usage {
    rss_max: u64,
    rss_end: u64,
    cpu: f64,
}

fn measure(pids: &[u32], window: Duration) -> Vec<Usage> {
    let tck = clk_tck();
    let start: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let t = Instant::now();
    let mut max = vec![0u64; pids.len()];
    while t.elapsed() < window {
        for (i, p) in pids.iter().enumerate() {
            max[i] = max[i].max(rss_kib(*p));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let secs = t.elapsed().as_secs_f64();
    pids.iter()
        .enumerate()
        .map(|(i, p)| Usage {
            rss_max: max[i],
            rss_end: rss_kib(*p),
            cpu: (cpu_ticks(*p) - start[i]) as f64 / tck / secs * 100.0,
        })
        .collect()
}

/// `agent-bench relay`: rdv-dev-relay's main, without the rate limit.
fn unlimited_relay() {
    use nostr_relay_builder::prelude::RateLimit;
    use nostr_relay_builder::{LocalRelay, RelayBuilder};
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let builder = RelayBuilder::default()
            .addr(std::net::Ipv4Addr::LOCALHOST.into())
            .port(port)
            .rate_limit(RateLimit {
                max_reqs: 5000,
                notes_per_minute: u32::MAX,
            });
        let relay = LocalRelay::new(builder);
        relay.run().await.unwrap();
        println!("{}", json!({ "url": relay.url().await.to_string() }));
        std::future::pending::<()>().await;
    });
}

/// The peer a user would pick instead: a bare nostr-sdk subscriber on the
/// same `#p`, printing each event it receives (signatures checked by the SDK).
fn bare_subscriber(url: &str, p: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = client(url).await;
        let mut notes = c.notifications();
        let f = Filter::new()
            .kind(Kind::Custom(rdv_proto::consts::NOSTR_KIND))
            .custom_tag(SingleLetterTag::lowercase(Alphabet::P), p.to_string());
        c.subscribe(f, None).await.unwrap();
        println!("ready");
        while let Ok(n) = notes.recv().await {
            if let RelayPoolNotification::Event { event, .. } = n {
                println!("{}", event.id);
            }
        }
    });
}

fn run_load(
    root: &Path,
    relay: &Relay,
    n: usize,
    rate: u32,
    window: Duration,
    tokio_rt: &tokio::runtime::Runtime,
) {
    println!(
        "\n== rdv listen with {n} contacts at {rate} messages/s ({} s window)",
        window.as_secs()
    );
    let home = tmp_home(root, "load");
    let (alice_id, peers) = build_home(&home, &relay.url, n, tokio_rt);
    let t = Instant::now();
    let mut listener = Listener::start(&home);
    println!(
        "  rdv listen up (lock held + 1 s) in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let p_hex = hex::encode(alice_id.key_bytes());
    let mut bare = Proc::new(std::env::current_exe().unwrap())
        .args(["bare-subscriber", &relay.url, &p_hex])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bare_out = bare.stdout.take().unwrap();
    let bare_count = Arc::new(Mutex::new(0u64));
    {
        let c = bare_count.clone();
        std::thread::spawn(move || {
            for _ in BufReader::new(bare_out).lines() {
                *c.lock().unwrap() += 1;
            }
        });
    }
    let idle = measure(&[listener.pid(), bare.id()], Duration::from_secs(10));
    // The drive: R messages/s, round robin over the peers.
    let peers = Arc::new(Mutex::new(peers));
    let stop = Arc::new(AtomicBool::new(false));
    let sent: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let drive = {
        let (peers, stop, sent, url, alice_id) = (
            peers.clone(),
            stop.clone(),
            sent.clone(),
            relay.url.clone(),
            alice_id.clone(),
        );
        tokio_rt.spawn(async move {
            let publisher = client(&url).await;
            let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let text = format!("load-{k:06}");
                let events = {
                    let mut ps = peers.lock().unwrap();
                    let len = ps.len();
                    let p = &mut ps[k % len];
                    let out = p.handle(Input::Command(Command::Send {
                        to: alice_id.clone(),
                        payload: json!({"type": "note/text", "text": text}),
                    }));
                    p.settle(out.effects)
                };
                sent.lock().unwrap().insert(text, Instant::now());
                for ev in events {
                    let ev = SdkEvent::from_json(ev.as_json()).unwrap();
                    let sent = publisher.send_event(&ev).await.unwrap();
                    assert!(
                        sent.failed.is_empty(),
                        "the relay refused: {:?}",
                        sent.failed
                    );
                }
                k += 1;
            }
            publisher.shutdown().await;
            k
        })
    };
    // Latency of each message at load, read off the listener's lines.
    let lat: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let stop_reader = Arc::new(AtomicBool::new(false));
    let reader = {
        let (lat, sent, stop_reader) = (lat.clone(), sent.clone(), stop_reader.clone());
        let rx = listener.take_rx();
        std::thread::spawn(move || {
            while !stop_reader.load(Ordering::Relaxed) {
                let Ok((t, v)) = rx.recv_timeout(Duration::from_millis(200)) else {
                    continue;
                };
                let Some(p) = v["payload"]["untrusted_peer_text"].as_str() else {
                    continue;
                };
                let Ok(p) = serde_json::from_str::<Value>(p) else {
                    continue;
                };
                if let Some(text) = p["text"].as_str()
                    && let Some(s) = sent.lock().unwrap().get(text)
                {
                    lat.lock().unwrap().push(t.saturating_duration_since(*s));
                }
            }
        })
    };
    std::thread::sleep(Duration::from_secs(5)); // warm up
    lat.lock().unwrap().clear();
    let bare_before = *bare_count.lock().unwrap();
    let loaded = measure(&[listener.pid(), bare.id()], window);
    let bare_got = *bare_count.lock().unwrap() - bare_before;
    let lat_window = lat.lock().unwrap().clone();
    // rdv status on that home, while the load goes on.
    let status: Vec<Duration> = (0..20).map(|_| rdv(&home, &["status"]).0).collect();
    let floor: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            Proc::new(rdv_bin()).arg("--version").output().unwrap();
            t.elapsed()
        })
        .collect();
    // What `rdv status` reads now: the profile and relay health, and
    // counts in SQL.
    let summary: Vec<Duration> = (0..10)
        .map(|_| {
            tokio_rt.block_on(async {
                use rdv_agent::store::Count;
                let t = Instant::now();
                let store = Store::open(&Home::at(&home).db_path()).await.unwrap();
                let s = store
                    .summary(
                        &[Table::Profile, Table::RelayHealth],
                        &[Count {
                            table: Table::Contact,
                            filter: Some(("status", json!("active"))),
                        }],
                    )
                    .await
                    .unwrap();
                let d = t.elapsed();
                assert_eq!(s.counts, [n as u64]);
                store.close().await;
                d
            })
        })
        .collect();
    let load_state: Vec<Duration> = (0..10)
        .map(|_| {
            tokio_rt.block_on(async {
                let t = Instant::now();
                let store = Store::open(&Home::at(&home).db_path()).await.unwrap();
                let mut tx = store.begin().await.unwrap();
                let recs = tx.load_all().await.unwrap();
                drop(tx);
                let s = State::load(&recs).unwrap();
                let d = t.elapsed();
                std::hint::black_box(s);
                store.close().await;
                d
            })
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    let total_sent = tokio_rt.block_on(drive).unwrap();
    stop_reader.store(true, Ordering::Relaxed);
    let _ = reader.join();
    let _ = bare.kill();
    let _ = bare.wait();
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "  idle (10 s):      rdv listen VmRSS {:.1} MiB, CPU {:.2}%;  bare subscriber {:.1} MiB, {:.2}%",
        mib(idle[0].rss_end),
        idle[0].cpu,
        mib(idle[1].rss_end),
        idle[1].cpu
    );
    println!(
        "  at {rate} msg/s ({} s): rdv listen VmRSS max {:.1} / end {:.1} MiB, CPU {:.2}%;  bare subscriber max {:.1} / end {:.1} MiB, {:.2}% ({bare_got} events)",
        window.as_secs(),
        mib(loaded[0].rss_max),
        mib(loaded[0].rss_end),
        loaded[0].cpu,
        mib(loaded[1].rss_max),
        mib(loaded[1].rss_end),
        loaded[1].cpu
    );
    println!(
        "  ratio rdv listen / bare subscriber: memory {:.1}×, CPU {:.1}×; CPU per message {:.2} ms (bare {:.2} ms)",
        loaded[0].rss_max as f64 / loaded[1].rss_max.max(1) as f64,
        loaded[0].cpu / loaded[1].cpu.max(0.01),
        loaded[0].cpu * 10.0 / f64::from(rate),
        loaded[1].cpu * 10.0 / f64::from(rate),
    );
    line(
        &format!("message latency at load ({total_sent} sent in all)"),
        &lat_window,
    );
    line("`rdv status` on that home (listener at load)", &status);
    line("floor: `rdv --version`", &floor);
    line("Store::open + summary (what rdv status reads)", &summary);
    line(
        "Store::open + load_all + State::load (what it loaded before)",
        &load_state,
    );
    println!(
        "  rdv status / (process floor + Store::open + summary): {:.2}×",
        ms(pct(&status, 0.5)) / (ms(pct(&floor, 0.5)) + ms(pct(&summary, 0.5)))
    );
    drop(listener);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map_or("all", String::as_str);
    if what == "relay" {
        unlimited_relay();
        return;
    }
    if what == "bare-subscriber" {
        bare_subscriber(&args[1], &args[2]);
        return;
    }
    let num = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let tokio_rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // RDV_BENCH_KEEP=1 keeps the homes (to profile `rdv status` on them).
    let root: PathBuf = if std::env::var_os("RDV_BENCH_KEEP").is_some() {
        let p = tmp.keep();
        println!("homes kept in {}", p.display());
        p
    } else {
        tmp.path().to_path_buf()
    };
    let relay = Relay::start();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "agent-bench: {cores} cores, load {}, relay {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        relay.url
    );
    match what {
        "latency" => {
            run_latency(&root, &relay, num(1, 200) as usize, &tokio_rt);
        }
        "dinner" => {
            let lat = run_latency(&root, &relay, num(2, 50) as usize, &tokio_rt);
            run_dinner(&root, &relay, num(1, 20) as usize, &lat, &tokio_rt);
        }
        "first-contact" => {
            let (bare, _) = tokio_rt.block_on(bare_round_trips(&relay.url, 50));
            run_first_contact(&root, &relay, num(1, 5) as usize, pct(&bare, 0.5));
        }
        "load" => run_load(
            &root,
            &relay,
            num(1, 1000) as usize,
            num(2, 10) as u32,
            Duration::from_secs(num(3, 60)),
            &tokio_rt,
        ),
        _ => {
            let lat = run_latency(&root, &relay, 200, &tokio_rt);
            run_dinner(&root, &relay, 20, &lat, &tokio_rt);
            run_first_contact(&root, &relay, 5, lat.bare_p50);
            run_load(&root, &relay, 1000, 10, Duration::from_secs(60), &tokio_rt);
        }
    }
}
