//! Directory listing from the home and friend suggestions (SPEC §4.5)
//! through the real `rdv` binary, against the real `rdv-directory` (SQLite,
//! port 0; build it first: `cargo build -p rdv-directory --bins`) and a
//! Nostr relay in this process that counts every event written to it.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use nostr_relay_builder::prelude::{
    BoxedFuture, Event, LocalRelay, PolicyResult, RelayBuilder, WritePolicy,
};
use rdv_agent::home::Home;
use rdv_agent::runtime::{Options, Runtime};
use rdv_agent_core::state::Binding;
use rdv_proto::AgentId;
use serde_json::Value;

/// Counts the events the relay is asked to store.
#[derive(Debug, Default, Clone)]
struct Writes(Arc<AtomicUsize>);

impl WritePolicy for Writes {
    fn admit_event<'a>(
        &'a self,
        _event: &'a Event,
        _addr: &'a SocketAddr,
    ) -> BoxedFuture<'a, PolicyResult> {
        Box::pin(async move {
            self.0.fetch_add(1, Ordering::SeqCst);
            PolicyResult::Accept
        })
    }
}

/// A workspace binary next to this test's `deps/` directory.
fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(|d| d.parent()).unwrap().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build -p rdv-directory --bins` first",
        path.display()
    );
    path
}

/// `rdv-directory serve` on 127.0.0.1:0 with SQLite in `data`; killed on drop.
struct Directory {
    child: Child,
    url: String,
}

impl Drop for Directory {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Directory {
    fn start(data: &std::path::Path) -> Directory {
        let bin = workspace_bin("rdv-directory");
        let d = data.to_str().unwrap();
        let o = Command::new(&bin)
            .args(["--data-dir", d, "keygen"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "keygen: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut child = Command::new(&bin)
            .args(["--data-dir", d, "serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("the directory exited").unwrap();
            if let Some(i) = line.find("http://") {
                break line[i..].split_whitespace().next().unwrap().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Directory { child, url }
    }

    /// Requests answered per endpoint, from `/metrics`.
    fn requests(&self, endpoint: &str) -> u64 {
        let hostport = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(hostport).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {hostport}\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        let prefix = format!("rdv_directory_requests_total{{endpoint=\"{endpoint}\"");
        body.lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

struct World {
    dir: tempfile::TempDir,
    relay_url: String,
    writes: Writes,
    directory: Directory,
    _relay: LocalRelay,
}

impl World {
    async fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("directory");
        std::fs::create_dir_all(&data).unwrap();
        let directory = tokio::task::spawn_blocking(move || Directory::start(&data))
            .await
            .unwrap();
        let writes = Writes::default();
        let relay = LocalRelay::new(RelayBuilder::default().write_policy(writes.clone()));
        relay.run().await.unwrap();
        let relay_url = relay.url().await.to_string();
        World {
            dir,
            relay_url,
            writes,
            directory,
            _relay: relay,
        }
    }

    fn home(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    async fn rdv(&self, home: &str, args: &[&str]) -> (i32, String, String) {
        common::rdv_async(&self.home(home), "off", args).await
    }

    /// A new agent on the test relay, with the test directory configured.
    async fn init(&self, home: &str, extra: &[&str]) -> AgentId {
        let mut args = vec!["--directory", self.directory.url.as_str()];
        args.extend_from_slice(extra);
        common::init_on(&self.home(home), "off", &self.relay_url, &args).await
    }

    async fn state(&self, home: &str) -> (HashMap<AgentId, Binding>, usize) {
        let rt = Runtime::open(Home::at(self.home(home)), Options::default())
            .await
            .unwrap();
        let s = &rt.agent().state;
        let kept = s
            .known_cards
            .iter()
            .map(|(id, k)| (id.clone(), k.binding))
            .collect();
        (kept, s.outgoing.len())
    }

    /// The agents `rdv discover` in the home `looker` finds for `address`
    /// in the directory (DNS off, no public pointers on the relay).
    async fn lookup(&self, address: &str) -> Vec<String> {
        let (code, out, err) = self.rdv("looker", &["--json", "discover", address]).await;
        assert_eq!(code, 0, "discover: {err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert!(v["errors"].as_array().unwrap().is_empty(), "{v}");
        v["found"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                assert_eq!(f["binding"], "directory");
                f["id"].as_str().unwrap().to_string()
            })
            .collect()
    }
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `list-me` lists each public address of the home's card in the configured
/// directory (not a private one); `unlist` withdraws them; another agent's
/// `rdv discover` sees both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_me_and_unlist_from_the_home() {
    let t0 = Instant::now();
    let w = World::new().await;
    let bob = w
        .init(
            "bob",
            &[
                "--address",
                "bob@example.org",
                "--address",
                "+1 555 0100",
                "--private-address",
                "b@private.test",
            ],
        )
        .await;
    w.init("looker", &[]).await;
    // Opt-in: nothing is listed before list-me.
    assert!(w.lookup("bob@example.org").await.is_empty());

    let (code, out, err) = w.rdv("bob", &["--json", "directory", "list-me"]).await;
    assert_eq!(code, 0, "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2, "{out}");
    for (l, a) in lines.iter().zip(["bob@example.org", "+15550100"]) {
        assert_eq!(l["address"], a);
        assert_eq!(l["status"], "stored");
        assert_eq!(l["directory"], w.directory.url.as_str());
    }
    for a in ["bob@example.org", "+15550100"] {
        assert_eq!(w.lookup(a).await, vec![bob.to_string()], "{a}");
    }
    assert!(w.lookup("b@private.test").await.is_empty());
    // Again: replaced, not doubled. A listing's `updated` is in whole
    // seconds and must be later than the one held (§4.5): the next second.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (code, out, err) = w.rdv("bob", &["directory", "list-me"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("claims on this address: 1"), "{out}");

    let (code, out, err) = w.rdv("bob", &["--json", "directory", "unlist"]).await;
    assert_eq!(code, 0, "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines.iter().all(|l| l["status"] == "removed"), "{out}");
    assert!(w.lookup("bob@example.org").await.is_empty());
    assert!(w.lookup("+15550100").await.is_empty());

    // --directory names one explicitly; an unreachable one fails the command.
    let (code, _, err) = w
        .rdv(
            "bob",
            &["directory", "list-me", "--directory", "http://127.0.0.1:9"],
        )
        .await;
    assert_eq!(code, 1);
    assert!(err.contains("failed"), "{err}");
    // No directory at all: said so.
    w.rdv(
        "nodir",
        &[
            "init",
            "--allow-ws",
            "--relay",
            &w.relay_url,
            "--address",
            "n@x.test",
        ],
    )
    .await;
    let (code, _, err) = w.rdv("nodir", &["directory", "list-me"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no directory"), "{err}");
    eprintln!("list_me_and_unlist_from_the_home: {:?}", t0.elapsed());
}

const CONTACTS_VCF: &str = "BEGIN:VCARD\r\nVERSION:3.0\r\nFN:Bob\r\n  Builder\r\nEMAIL;TYPE=INTERNET:Bob@Example.ORG\r\nEND:VCARD\r\n\
BEGIN:VCARD\r\nVERSION:4.0\r\nN:Lee;Carol;;;\r\nTEL;VALUE=uri:tel:+1-555-0101\r\nEND:VCARD\r\n\
BEGIN:VCARD\r\nFN:Dave \\, not listed\r\nEMAIL:dave@example.org\r\nTEL:555 0102\r\nEND:VCARD\r\n\
BEGIN:VCARD\r\nFN:\u{1b}[2JEve\r\nEMAIL:eve@example.org\r\nEND:VCARD\r\n";

/// Suggestions find exactly the listed agents of the owner's contacts,
/// keep their cards (binding directory), and send nothing: the relay gets
/// no event and no request is open until the owner runs the one shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggestions_find_listed_contacts_and_send_nothing() {
    let t0 = Instant::now();
    let w = World::new().await;
    let bob = w.init("bob", &["--address", "bob@example.org"]).await;
    let carol = w.init("carol", &["--address", "+1 555 0101"]).await;
    let eve = w.init("eve", &["--address", "eve@example.org"]).await;
    w.init("dave", &["--address", "dave@example.org"]).await;
    for who in ["bob", "carol", "eve"] {
        let (code, _, err) = w.rdv(who, &["directory", "list-me"]).await;
        assert_eq!(code, 0, "{who}: {err}");
    }
    w.init("alice", &[]).await;
    let vcf = w.home("contacts.vcf");
    std::fs::write(&vcf, CONTACTS_VCF).unwrap();
    let vcf = vcf.to_str().unwrap().to_string();

    let events_before = w.writes.0.load(Ordering::SeqCst);
    let lookups_before = w.directory.requests("lookup");
    let (code, out, err) = w.rdv("alice", &["suggest", "--contacts", &vcf]).await;
    assert_eq!(code, 0, "{err}");
    let line = |id: &AgentId| {
        out.lines()
            .find(|l| l.contains(id.as_str()))
            .unwrap_or_else(|| panic!("no line for {id}: {out}"))
            .to_string()
    };
    assert_eq!(
        line(&bob),
        format!(
            "Bob Builder <bob@example.org> appears to have an agent ({bob}, {}). Connect with: rdv contact request {bob}",
            bob.fingerprint()
        )
    );
    assert!(line(&carol).starts_with("Carol Lee <+15550101> appears to have an agent"));
    // The name is the owner's, but shown terminal-safe.
    let eve_line = line(&eve);
    assert!(!eve_line.contains('\u{1b}'), "{eve_line:?}");
    assert!(eve_line.contains("Eve <eve@example.org>"), "{eve_line:?}");
    assert!(!out.contains("dave"), "{out}");
    assert!(out.contains("3 suggestions; nothing was sent"), "{out}");
    assert!(out.contains("Skipped 1 entries"), "{out}");

    assert_eq!(
        w.writes.0.load(Ordering::SeqCst),
        events_before,
        "the relay got an event"
    );
    assert!(w.directory.requests("lookup") > lookups_before);
    let (kept, outgoing) = w.state("alice").await;
    assert_eq!(outgoing, 0, "a request was opened");
    assert_eq!(
        kept,
        HashMap::from([
            (bob.clone(), Binding::Directory),
            (carol.clone(), Binding::Directory),
            (eve.clone(), Binding::Directory),
        ])
    );

    // JSON: one line per suggestion and a summary.
    let csv = w.home("contacts.csv");
    std::fs::write(
        &csv,
        "Name,E-mail 1 - Type,E-mail 1 - Value,Mobile Phone\n\"Builder, Bob\",* Work,bob@example.org,\nNobody,,,12345\n",
    )
    .unwrap();
    let (code, out, err) = w
        .rdv(
            "alice",
            &["--json", "suggest", "--contacts", csv.to_str().unwrap()],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["kind"], "suggestion");
    assert_eq!(lines[0]["id"], bob.as_str());
    assert_eq!(lines[0]["name"], "Builder, Bob");
    assert_eq!(lines[0]["connect"], format!("rdv contact request {bob}"));
    assert_eq!(lines[1]["kind"], "summary");
    assert_eq!(lines[1]["invalid"], 1);
    assert_eq!(lines[1]["sent"], 0);
    assert_eq!(w.writes.0.load(Ordering::SeqCst), events_before);

    // The owner connects: the kept card is used (no rediscovery) and the
    // request leaves now, not before.
    let (code, _, err) = w.rdv("alice", &["contact", "request", bob.as_str()]).await;
    assert_eq!(code, 0, "{err}");
    assert!(w.writes.0.load(Ordering::SeqCst) > events_before);
    assert_eq!(w.state("alice").await.1, 1);
    eprintln!(
        "suggestions_find_listed_contacts_and_send_nothing: {:?}",
        t0.elapsed()
    );
}

/// Suggestions off (`rdv init --no-suggest`, or `rdv suggest --off`):
/// `rdv suggest --contacts` refuses, says how to switch them on, and asks
/// no directory. `--on` switches them back on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggestions_off_refuse_and_ask_nothing() {
    let t0 = Instant::now();
    let w = World::new().await;
    let bob = w.init("bob", &["--address", "bob@example.org"]).await;
    assert_eq!(w.rdv("bob", &["directory", "list-me"]).await.0, 0);
    w.init("alice", &["--no-suggest"]).await;
    let vcf = w.home("c.vcf");
    std::fs::write(
        &vcf,
        "BEGIN:VCARD\nFN:Bob\nEMAIL:bob@example.org\nEND:VCARD\n",
    )
    .unwrap();
    let vcf = vcf.to_str().unwrap().to_string();

    let evaluations = w.directory.requests("evaluate");
    let lookups = w.directory.requests("lookup");
    let (code, out, err) = w.rdv("alice", &["suggest", "--contacts", &vcf]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("off") && err.contains("rdv suggest --on"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    assert_eq!(w.directory.requests("evaluate"), evaluations);
    assert_eq!(w.directory.requests("lookup"), lookups);
    assert!(w.state("alice").await.0.is_empty());

    let (code, out, _) = w.rdv("alice", &["--json", "suggest"]).await;
    assert_eq!(code, 0);
    assert_eq!(json_lines(&out)[0]["suggest"], false);
    assert_eq!(w.rdv("alice", &["suggest", "--on"]).await.0, 0);
    let (code, out, err) = w.rdv("alice", &["suggest", "--contacts", &vcf]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(bob.as_str()), "{out}");

    // And off again by the switch.
    assert_eq!(w.rdv("alice", &["suggest", "--off"]).await.0, 0);
    let lookups = w.directory.requests("lookup");
    let (code, _, err) = w.rdv("alice", &["suggest", "--contacts", &vcf]).await;
    assert_eq!(code, 1);
    assert!(err.contains("rdv suggest --on"), "{err}");
    assert_eq!(w.directory.requests("lookup"), lookups);
    eprintln!("suggestions_off_refuse_and_ask_nothing: {:?}", t0.elapsed());
}

/// A contacts file that is not what it claims, or over the bounds, is
/// refused before any directory is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_oversize_contacts_are_refused() {
    let w = World::new().await;
    w.init("alice", &[]).await;
    let evaluations = w.directory.requests("evaluate");
    let bad = w.home("bad.csv");
    std::fs::write(&bad, "name,email\n\"Bob,bob@example.org\n").unwrap();
    let (code, _, err) = w
        .rdv("alice", &["suggest", "--contacts", bad.to_str().unwrap()])
        .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("line 2") && err.contains("not closed"),
        "{err}"
    );
    let big = w.home("big.vcf");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(rdv_agent::suggest::FILE_MAX_BYTES as u64 + 1)
        .unwrap();
    let (code, _, err) = w
        .rdv("alice", &["suggest", "--contacts", big.to_str().unwrap()])
        .await;
    assert_eq!(code, 1);
    assert!(err.contains("16 MiB"), "{err}");
    assert_eq!(w.directory.requests("evaluate"), evaluations);
}
