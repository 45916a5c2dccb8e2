//! `rdv backup create|restore` as a process (SPEC §6.4.1): a backup made
//! with --passphrase-file restores into a new home as the same agent; a
//! wrong passphrase, a home that has an agent, an existing file, an open
//! passphrase file and a short passphrase are refused with a clear message;
//! the files are private. Full-cost scrypt runs four times here.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::Out;
use serde_json::Value;

const PASS: &str = "correct horse battery staple";

fn rdv(home: &Path, args: &[&str]) -> Out {
    let out = common::rdv(home, args);
    assert!(
        !out.stdout.contains(PASS) && !out.stderr.contains(PASS),
        "the passphrase is never printed"
    );
    out
}

fn ok_json(home: &Path, args: &[&str]) -> Value {
    let o = rdv(home, args);
    assert!(o.ok, "rdv {args:?} failed: {}", o.stderr);
    serde_json::from_str(o.stdout.trim()).unwrap()
}

fn refused(home: &Path, args: &[&str]) -> String {
    let o = rdv(home, args);
    assert!(!o.ok, "rdv {args:?} should refuse: {}", o.stdout);
    o.stderr
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn secret_file(p: &Path, text: &str, mode: u32) {
    fs::write(p, text).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn backup_then_restore_into_a_new_home() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    let pass = dir.path().join("pass");
    secret_file(&pass, &format!("{PASS}\n"), 0o600);
    let pass_s = pass.to_str().unwrap();
    let init = ok_json(
        &a,
        &[
            "init",
            "--relay",
            "wss://relay.example.invalid",
            "--address",
            "alice@example.com",
        ],
    );
    let id = init["id"].as_str().unwrap().to_string();

    // Create.
    let file = dir.path().join("alice.rdvbackup");
    let file_s = file.to_str().unwrap();
    let c = ok_json(
        &a,
        &["backup", "create", file_s, "--passphrase-file", pass_s],
    );
    assert_eq!(c["id"], id.as_str());
    assert_eq!(c["fingerprint"], init["fingerprint"]);
    assert_eq!(c["file"], file_s);
    assert_eq!(c["verified_agent_id_matches"], true);
    assert_eq!(mode(&file), 0o600, "the backup is private");
    let text = fs::read_to_string(&file).unwrap();
    let seed = fs::read_to_string(a.join("agent.key")).unwrap();
    assert!(!text.contains(seed.trim()) && !text.contains("alice@example.com"));
    let bundle: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(bundle["format"], "rdv-backup");
    assert_eq!(bundle["agent_id"], id.as_str());
    assert!(
        fs::read_dir(dir.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp-")),
        "no temporary file left"
    );

    // Never over an existing file.
    let e = refused(
        &a,
        &["backup", "create", file_s, "--passphrase-file", pass_s],
    );
    assert!(e.contains("exists"), "{e}");
    assert_eq!(fs::read_to_string(&file).unwrap(), text, "left as it was");

    // Not into a home that has an agent: asked before any passphrase.
    let e = refused(&a, &["backup", "restore", file_s]);
    assert!(e.contains("already has an agent") && e.contains(&id), "{e}");

    // A wrong passphrase: a clear refusal, and nothing written.
    let wrong = dir.path().join("wrong");
    secret_file(&wrong, "correct horse battery stapler\n", 0o600);
    let e = refused(
        &b,
        &[
            "backup",
            "restore",
            file_s,
            "--passphrase-file",
            wrong.to_str().unwrap(),
        ],
    );
    assert!(e.contains("wrong passphrase"), "{e}");
    assert!(!b.join("agent.key").exists() && !b.join("agent.db").exists());

    // Restore.
    let r = ok_json(
        &b,
        &["backup", "restore", file_s, "--passphrase-file", pass_s],
    );
    assert_eq!(r["id"], id.as_str());
    assert_eq!(r["fingerprint"], init["fingerprint"]);
    assert_eq!(r["backup_created"], c["created"]);
    assert_eq!(r["contacts"], 0);
    assert_eq!(r["notices"], serde_json::json!([]));
    assert_eq!(fs::read_to_string(b.join("agent.key")).unwrap(), seed);
    assert_eq!(mode(&b.join("agent.key")), 0o600);
    assert_eq!(mode(&b), 0o700);
    let s = ok_json(&b, &["status"]);
    assert_eq!(s["id"], id.as_str());
    assert_eq!(s["addresses"][0]["address"], "alice@example.com");

    // The restored home now has an agent: a second restore is refused.
    let e = refused(
        &b,
        &["backup", "restore", file_s, "--passphrase-file", pass_s],
    );
    assert!(e.contains("already has an agent"), "{e}");
}

#[test]
fn passphrases_come_only_from_a_private_file_or_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    ok_json(&a, &["init", "--relay", "wss://relay.example.invalid"]);
    let file = dir.path().join("backup");
    let file_s = file.to_str().unwrap();

    // A passphrase file others may read is refused before it is read.
    let open = dir.path().join("open");
    secret_file(&open, &format!("{PASS}\n"), 0o644);
    let e = refused(
        &a,
        &[
            "backup",
            "create",
            file_s,
            "--passphrase-file",
            open.to_str().unwrap(),
        ],
    );
    assert!(
        e.contains("open to other users") && e.contains("chmod 600"),
        "{e}"
    );

    // At least 12 characters.
    let short = dir.path().join("short");
    secret_file(&short, "elevenchars\n", 0o600);
    let e = refused(
        &a,
        &[
            "backup",
            "create",
            file_s,
            "--passphrase-file",
            short.to_str().unwrap(),
        ],
    );
    assert!(e.contains("at least 12 characters"), "{e}");

    // One line only.
    let two = dir.path().join("two");
    secret_file(&two, &format!("{PASS}\nmore\n"), 0o600);
    let e = refused(
        &a,
        &[
            "backup",
            "create",
            file_s,
            "--passphrase-file",
            two.to_str().unwrap(),
        ],
    );
    assert!(e.contains("more than one line"), "{e}");

    // No file and no terminal: nothing to read it from.
    let e = refused(&a, &["backup", "create", file_s]);
    assert!(e.contains("not a terminal"), "{e}");

    // Never an argument.
    let e = refused(&a, &["backup", "create", file_s, "--passphrase", PASS]);
    assert!(e.contains("--passphrase"), "{e}");
    assert!(!file.exists(), "no backup was written");
}

// ---- the journey over a relay (§6.4.1) -------------------------------------

/// How long a wait polls before the journey fails.
const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A running `rdv listen`, killed when dropped.
struct Listener(std::process::Child);

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn listen(home: &Path) -> Listener {
    let log = home.with_extension(format!("listen-{}.log", std::process::id()));
    let child = Command::new(env!("CARGO_BIN_EXE_rdv"))
        .arg("--home")
        .arg(home)
        .args(["--json", "listen"])
        .env_remove("RDV_HOME")
        .env_remove("RDV_PROFILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Listener(child)
}

/// The home's inbox events, oldest first.
fn inbox(home: &Path) -> Vec<Value> {
    let o = rdv(home, &["inbox", "--limit", "1000"]);
    assert!(o.ok, "inbox: {}", o.stderr);
    o.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The texts of the notes in a home's inbox.
fn notes(home: &Path) -> Vec<String> {
    inbox(home)
        .iter()
        .filter(|e| e["kind"] == "message")
        .filter_map(|e| {
            let p: Value =
                serde_json::from_str(e["payload"]["untrusted_peer_text"].as_str()?).ok()?;
            p["text"].as_str().map(str::to_string)
        })
        .collect()
}

fn wait_note(home: &Path, text: &str) {
    wait_for(&format!("note {text:?}"), || {
        notes(home).iter().any(|t| t == text).then_some(())
    });
}

fn note(text: &str) -> String {
    serde_json::json!({"type": "note/text", "text": text}).to_string()
}

#[test]
fn a_restored_agent_is_rebased_by_its_contact_over_a_relay() {
    use nostr_relay_builder::prelude::{LocalRelay, RelayBuilder};
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let relay = tokio.block_on(async {
        let r = LocalRelay::new(RelayBuilder::default());
        r.run().await.unwrap();
        r
    });
    let url = tokio.block_on(relay.url()).to_string();
    let dir = tempfile::tempdir().unwrap();
    let (a, a2, b) = (
        dir.path().join("alice"),
        dir.path().join("alice-restored"),
        dir.path().join("bob"),
    );
    let pass = dir.path().join("pass");
    secret_file(&pass, &format!("{PASS}\n"), 0o600);
    let pass_s = pass.to_str().unwrap();
    let on = ["--relay", url.as_str(), "--allow-ws"];
    let alice = ok_json(&a, &[&["init"][..], &on].concat())["id"]
        .as_str()
        .unwrap()
        .to_string();
    let bob = ok_json(&b, &[&["init"][..], &on].concat())["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Contacts: Bob asks by Alice's card; Alice grants.
    let card = dir.path().join("alice.card");
    fs::write(&card, rdv(&a, &["card"]).stdout).unwrap();
    ok_json(&b, &["card", "import", card.to_str().unwrap()]);
    ok_json(&b, &["contact", "request", &alice, "--greeting", "hi"]);
    let listener_a = listen(&a);
    let req = wait_for("Bob's request", || {
        let p = ok_json(&a, &["contact", "pending"]);
        p["requests"][0]["request_id"].as_str().map(str::to_string)
    });
    ok_json(&a, &["contact", "grant", &req, "--tier", "friend"]);
    let _listener_b = listen(&b);
    wait_for("the contact at Bob", || {
        inbox(&b)
            .iter()
            .any(|e| e["kind"] == "contact" && e["id"] == alice.as_str())
            .then_some(())
    });
    ok_json(&a, &["send", &bob, &note("one")]);
    wait_note(&b, "one");

    // The backup; then the copy's last word before it is lost.
    drop(listener_a);
    ok_json(
        &a,
        &[
            "backup",
            "create",
            dir.path().join("alice.backup").to_str().unwrap(),
            "--passphrase-file",
            pass_s,
        ],
    );
    ok_json(&a, &["send", &bob, &note("two")]);
    wait_note(&b, "two");
    std::thread::sleep(std::time::Duration::from_millis(1100));

    // Restored into a new home: Bob is told and re-bases.
    let r = ok_json(
        &a2,
        &[
            "backup",
            "restore",
            dir.path().join("alice.backup").to_str().unwrap(),
            "--passphrase-file",
            pass_s,
        ],
    );
    assert_eq!(r["id"], alice.as_str());
    assert_eq!(r["contacts"], 1);
    assert_eq!(r["notices"][0]["to"], bob.as_str(), "{r}");
    assert_eq!(r["notices"][0]["delivery"], "accepted by a relay", "{r}");
    wait_for("Bob told of the restore", || {
        inbox(&b)
            .iter()
            .any(|e| e["kind"] == "restored" && e["id"] == alice.as_str())
            .then_some(())
    });

    // Both chains go on, with no fork on either side.
    let _listener_a2 = listen(&a2);
    ok_json(&b, &["send", &alice, &note("b-after")]);
    wait_note(&a2, "b-after");
    ok_json(&a2, &["send", &bob, &note("three")]);
    wait_note(&b, "three");
    assert_eq!(notes(&b), ["one", "two", "three"]);
    for home in [&a2, &b] {
        assert!(
            inbox(home).iter().all(|e| e["kind"] != "forked"),
            "no fork at {}",
            home.display()
        );
    }
    drop(relay);
}
