//! `rdv-mcp` driven over stdio by MCP clients no one here wrote: Python's
//! official `mcp` SDK (agent/tests/mcp/journey.py) and the TypeScript
//! `@modelcontextprotocol/sdk` (agent/tests/mcp/ts/journey.mjs), against a
//! real Nostr relay (nostr-relay-builder's, on an ephemeral loopback port).
//! The journeys and what each proves are in the scripts' headers: consent
//! (§5.5: no grant on the model's say-so; forms; phrase binding, single
//! use, lockout; each dinner and both task gates; auto-approve only by form
//! with the owner passphrase, §5.5.1), peer text marking (§5.6), the consumer/attached
//! hand-over, the inbox resource, and a scan of every result for secrets.
//!
//! A client that is not installed skips its test with a loud line, except
//! under CI (`CI` set), where it fails. Python: the first of
//! `RDV_MCP_PYTHON`, `RDV_TEST_PYTHON`, /var/cache/rendezvous-rs/venv/bin/python
//! and python3 that has `pip install -r agent/tests/mcp/requirements.txt`. TypeScript: node 20+
//! and `npm ci` in agent/tests/mcp/ts.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nostr_relay_builder::prelude::{LocalRelay, RelayBuilder};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("mcp")
}

fn missing(what: &str, how: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what} is not installed, and CI needs it: {how}");
    }
    eprintln!(
        "\n!!!! SKIPPED: {what} is not installed ({how}); this MCP client test did not run !!!!\n"
    );
}

fn python() -> Option<PathBuf> {
    // RDV_TEST_PYTHON: the venv scripts/test installs the test clients in.
    let candidates: Vec<PathBuf> = ["RDV_MCP_PYTHON", "RDV_TEST_PYTHON"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .chain([
            PathBuf::from("/var/cache/rendezvous-rs/venv/bin/python"),
            PathBuf::from("python3"),
        ])
        .collect();
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import mcp.client.stdio, mcp_types"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

struct Work(PathBuf);

impl Work {
    fn new(name: &str) -> Work {
        let p = std::env::temp_dir().join(format!("rdv-mcp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Work(p)
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn relay() -> (LocalRelay, String) {
    let relay = LocalRelay::new(RelayBuilder::default());
    relay.run().await.unwrap();
    let url = relay.url().await.to_string();
    (relay, url.trim_end_matches('/').to_string())
}

/// Runs a client script to its end; its output is shown, and a failure
/// names the work directory (the servers' stderr logs are kept there).
async fn run_client(mut cmd: Command, work: &Work) {
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "the MCP client journey failed ({}); server logs in {}",
        out.status,
        work.0.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_journey() {
    let Some(py) = python() else {
        return missing(
            "Python's mcp SDK",
            "pip install -r agent/tests/mcp/requirements.txt",
        );
    };
    let (_relay, url) = relay().await;
    let work = Work::new("py");
    let mut cmd = Command::new(py);
    cmd.arg(tests_dir().join("journey.py"))
        .arg(env!("CARGO_BIN_EXE_rdv-mcp"))
        .arg(&url)
        .arg(&work.0)
        .arg(env!("CARGO_BIN_EXE_rdv"));
    run_client(cmd, &work).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_journey() {
    let ts = tests_dir().join("ts");
    let node_ok = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let sdk = ts.join("node_modules/@modelcontextprotocol/sdk/package.json");
    if !node_ok || !sdk.is_file() {
        return missing(
            "node and the TypeScript MCP SDK",
            "install node 20+, then `npm ci` in agent/tests/mcp/ts",
        );
    }
    let (_relay, url) = relay().await;
    let work = Work::new("ts");
    let mut cmd = Command::new("node");
    cmd.arg(ts.join("journey.mjs"))
        .arg(env!("CARGO_BIN_EXE_rdv-mcp"))
        .arg(&url)
        .arg(&work.0);
    run_client(cmd, &work).await;
}

/// `rdv mcp` is the same server as `rdv-mcp`, and its stdout carries MCP
/// only: every line it writes is a JSON-RPC message, while its notices for
/// the human (here: the home it serves) go to stderr.
#[test]
fn rdv_mcp_subcommand_speaks_only_mcp_on_stdout() {
    use std::io::{BufRead, BufReader, Write};
    let work = Work::new("sub");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdv"))
        .args(["mcp", "--home"])
        .arg(work.0.join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let status = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rdv_status","arguments":{}}}"#;
    writeln!(stdin, "{init}").unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(stdin, "{status}").unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut got = Vec::new();
    while got.len() < 2 {
        let line = lines.next().expect("the server closed stdout").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a non-MCP line ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        got.push(v);
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout carried a non-MCP line ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0");
    }
    assert_eq!(got[0]["result"]["serverInfo"]["name"], "rdv-mcp");
    assert!(
        got[0]["result"]["capabilities"]["resources"]["subscribe"] == true,
        "{}",
        got[0]
    );
    let text = got[1]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("rdv_init"), "no agent yet: {text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("serving MCP on stdio"), "{stderr}");
}
