//! `rdv demo`: the walk-through of issue #17, against a running suite
//! (`rdv-suite`). Two agents, Alice and Bob, each with a home of its own,
//! meet person to person: Bob lists himself in the directory (§4.5), Alice
//! finds him by a blinded lookup, asks by a topic probe (§4.4), Bob's human
//! grants (§5.3), Alice's human confirms the answer (§5.1), and they
//! exchange encrypted messages both ways (§6.4).
//!
//! Every step runs this very `rdv` binary as a person would type it, and
//! prints the command and what it printed. The only thing the demo adds is
//! waiting: where a person would look again a moment later, it polls.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{Error, Result};

/// How long the demo waits for something to arrive before it gives up.
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(250);

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// The suite's URLs, as `rdv-suite` writes them.
    #[arg(long, default_value = "./data/suite.json")]
    pub suite: PathBuf,
    /// Where the two homes go (default: a new folder under the system's
    /// temp directory). It must not hold homes already.
    #[arg(long)]
    pub workdir: Option<PathBuf>,
}

/// One of the two people.
struct Person {
    name: &'static str,
    home: PathBuf,
    listener: Option<Child>,
}

impl Drop for Person {
    fn drop(&mut self) {
        if let Some(mut c) = self.listener.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn demo_err(msg: impl Into<String>) -> Error {
    Error::Input(msg.into())
}

fn url(suite: &Value, key: &str, file: &Path) -> Result<String> {
    suite[key]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| demo_err(format!("{}: no {key:?} URL", file.display())))
}

impl Person {
    fn command(&self, args: &[&str]) -> Result<Command> {
        let mut c = Command::new(std::env::current_exe()?);
        c.args(args)
            .env("RDV_HOME", &self.home)
            .env_remove("RDV_PROFILE")
            // The demo's addresses are at example.com: no DNS to ask.
            .env("RDV_DNS_SERVER", "off");
        Ok(c)
    }

    /// Runs `rdv ARGS` as this person, shows it and what it printed.
    fn show(&self, args: &[&str]) -> Result<String> {
        println!("{}$ rdv {}", self.name, shell_words(args));
        let o = self.command(args)?.stdin(Stdio::null()).output()?;
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        for line in out.lines() {
            println!("    {line}");
        }
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            return Err(demo_err(format!(
                "`rdv {}` failed for {}: {}",
                args.join(" "),
                self.name,
                err.trim()
            )));
        }
        Ok(out)
    }

    /// Runs `rdv --json ARGS` quietly and parses its one JSON object.
    fn json(&self, args: &[&str]) -> Result<Value> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let o = self.command(&all)?.stdin(Stdio::null()).output()?;
        if !o.status.success() {
            return Err(demo_err(format!(
                "`rdv {}` failed for {}: {}",
                args.join(" "),
                self.name,
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        serde_json::from_slice(&o.stdout)
            .map_err(|e| demo_err(format!("`rdv {}` printed no JSON: {e}", args.join(" "))))
    }

    /// Starts `rdv listen` in the background, its output to a log file.
    fn listen(&mut self) -> Result<()> {
        println!("{}$ rdv listen &", self.name);
        let log = std::fs::File::create(self.home.with_extension("listen.log"))?;
        let err = log.try_clone()?;
        let child = self
            .command(&["listen"])?
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()?;
        self.listener = Some(child);
        // `rdv status` reports the listener once it holds the home's lock.
        wait_for(&format!("{}'s listener", self.name), || {
            let s = self.json(&["status"])?;
            Ok((s["inbound"] == "consumer running").then_some(()))
        })
    }
}

fn shell_words(args: &[&str]) -> String {
    args.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"{}$&|;".contains(c)) {
                format!("'{}'", a.replace('\'', r"'\''"))
            } else {
                (*a).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(t) = f()? {
            return Ok(t);
        }
        if Instant::now() > deadline {
            return Err(demo_err(format!(
                "waited {WAIT:?} for {what}; nothing came"
            )));
        }
        std::thread::sleep(POLL);
    }
}

fn step(n: u32, text: &str) {
    println!();
    println!("── {n}. {text}");
}

fn note(text: &str) -> String {
    serde_json::json!({"type": "note/text", "text": text}).to_string()
}

/// Waits until `who`'s inbox holds a note with `text`.
fn wait_note(who: &Person, text: &str) -> Result<()> {
    wait_for(&format!("{text:?} in {}'s inbox", who.name), || {
        let o = who
            .command(&["--json", "inbox", "--limit", "1000"])?
            .stdin(Stdio::null())
            .output()?;
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        Ok(out
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| e["kind"] == "message" && e.to_string().contains(text))
            .then_some(()))
    })
}

/// Runs the walk-through; returns the folder holding the two homes.
pub fn run(args: &DemoArgs) -> Result<PathBuf> {
    let text = std::fs::read_to_string(&args.suite).map_err(|e| {
        demo_err(format!(
            "{}: {e} (start the suite first: rdv-suite, which writes it)",
            args.suite.display()
        ))
    })?;
    let suite: Value = serde_json::from_str(&text)
        .map_err(|e| demo_err(format!("{}: {e}", args.suite.display())))?;
    let relay = url(&suite, "nostr", &args.suite)?;
    let directory = url(&suite, "directory", &args.suite)?;
    let ntfy = url(&suite, "ntfy", &args.suite)?;

    let work = match &args.workdir {
        Some(w) => w.clone(),
        None => std::env::temp_dir().join(format!(
            "rdv-demo-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        )),
    };
    if work.join("alice").exists() || work.join("bob").exists() {
        return Err(demo_err(format!(
            "{} already holds an alice or bob home; name another --workdir",
            work.display()
        )));
    }
    std::fs::create_dir_all(&work)?;
    let mut alice = Person {
        name: "alice",
        home: work.join("alice"),
        listener: None,
    };
    let mut bob = Person {
        name: "bob",
        home: work.join("bob"),
        listener: None,
    };
    println!(
        "Two agents, Alice's and Bob's, with homes under {}",
        work.display()
    );
    println!("Suite: relay {relay}, directory {directory}, bridge {ntfy}");

    step(1, "Each person creates an agent (a key, a signed card)");
    for (p, addr) in [(&alice, "alice@example.com"), (&bob, "bob@example.com")] {
        p.show(&[
            "init",
            "--address",
            addr,
            "--relay",
            &relay,
            "--allow-ws",
            "--ntfy",
            &ntfy,
            "--directory",
            &directory,
        ])?;
    }

    step(
        2,
        "Bob lists his agent in the directory: it stores a sealed card under a blinded key, never his address",
    );
    bob.show(&["directory", "list-me"])?;
    bob.listen()?;

    step(
        3,
        "Alice looks Bob up: a blinded lookup, so the directory learns neither the address nor the answer",
    );
    let found = alice.json(&["discover", "bob@example.com"])?;
    alice.show(&["discover", "bob@example.com"])?;
    let bob_id = bob.json(&["status"])?["id"].as_str().map(str::to_string);
    let via_directory = found["found"]
        .as_array()
        .is_some_and(|f| f.iter().any(|c| c["id"].as_str() == bob_id.as_deref()));
    if !via_directory {
        return Err(demo_err(format!(
            "the lookup did not find Bob's agent: {found}"
        )));
    }

    step(
        4,
        "Alice asks: a topic probe on Bob's address topic, with a short greeting",
    );
    alice.show(&[
        "contact",
        "request",
        "bob@example.com",
        "--greeting",
        "Hi Bob, this is Alice's agent",
        "--label",
        "Bob",
    ])?;
    alice.listen()?;

    step(
        5,
        "Bob's agent shows the request to Bob (the greeting is marked as untrusted peer text)",
    );
    let request = wait_for("the request at Bob's", || {
        let p = bob.json(&["contact", "pending"])?;
        Ok(p["requests"]
            .as_array()
            .and_then(|r| r.first())
            .and_then(|r| r["request_id"].as_str())
            .map(str::to_string))
    })?;
    bob.show(&["contact", "pending"])?;

    step(
        6,
        "Bob grants: only his own command does (consent stays with the human)",
    );
    bob.show(&[
        "contact", "grant", &request, "--tier", "friend", "--label", "Alice",
    ])?;

    step(
        7,
        "Alice sees the answer as a candidate, checks its fingerprint, and confirms",
    );
    wait_for("Bob's answer at Alice's", || {
        let p = alice.json(&["contact", "pending"])?;
        Ok(p["sent"]
            .as_array()
            .is_some_and(|s| {
                s.iter()
                    .any(|r| r["candidates"].as_array().is_some_and(|c| !c.is_empty()))
            })
            .then_some(()))
    })?;
    alice.show(&["contact", "pending"])?;
    alice.show(&["contact", "confirm", &request])?;

    step(8, "Encrypted messages, both ways");
    alice.show(&["send", "Bob", &note("Dinner next week?")])?;
    wait_note(&bob, "Dinner next week?")?;
    bob.show(&["inbox"])?;
    bob.show(&["send", "Alice", &note("Yes! Thursday at 8?")])?;
    wait_note(&alice, "Yes! Thursday at 8?")?;
    alice.show(&["inbox"])?;

    step(9, "Done");
    println!(
        "Both homes stay in {} (RDV_HOME={}/alice rdv contact list).",
        work.display(),
        work.display()
    );
    Ok(work)
}
