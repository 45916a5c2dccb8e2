//! Running the real `rdv` binary on a home, for the agent's CLI tests.
#![allow(dead_code, clippy::unwrap_used)]

pub mod dns;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// What one `rdv` run printed.
pub struct Out {
    pub ok: bool,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `rdv --home HOME --json ARGS…`, with no home or profile from the
/// environment and no DNS lookups.
pub fn rdv(home: &Path, args: &[&str]) -> Out {
    rdv_with(home, &["--json"], args)
}

/// `rdv --home HOME GLOBAL… ARGS…` (`GLOBAL` empty for text output).
pub fn rdv_with(home: &Path, global: &[&str], args: &[&str]) -> Out {
    let o = Command::new(env!("CARGO_BIN_EXE_rdv"))
        .arg("--home")
        .arg(home)
        .args(global)
        .args(args)
        .env_remove("RDV_HOME")
        .env_remove("RDV_PROFILE")
        .env("RDV_DNS_SERVER", "off")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Out {
        ok: o.status.success(),
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

/// The one JSON line a successful `rdv --json` run printed.
pub fn ok_json(home: &Path, args: &[&str]) -> Value {
    let o = rdv(home, args);
    assert!(o.ok, "rdv {args:?} failed: {}", o.stderr);
    serde_json::from_str(o.stdout.trim()).unwrap()
}

/// The error a refused run printed (exit 1, nothing on stdout).
pub fn refused(home: &Path, args: &[&str]) -> String {
    let o = rdv(home, args);
    assert_eq!(o.code, 1, "rdv {args:?} should refuse: {}", o.stdout);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    o.stderr
}

/// `rdv init` on an unreachable relay (nothing is published without
/// --public-pointer).
pub fn init(home: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["init", "--relay", "wss://relay.example.invalid"];
    args.extend_from_slice(extra);
    ok_json(home, &args)
}

/// `rdv --home HOME ARGS…` off the async runtime's threads, with `dns` as
/// `RDV_DNS_SERVER` (`off`, or a test resolver's address); (exit code,
/// stdout, stderr).
pub async fn rdv_async(home: &Path, dns: &str, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdv"));
    cmd.arg("--home")
        .arg(home)
        .args(args)
        .env("RDV_DNS_SERVER", dns)
        .env_remove("RDV_HOME")
        .env_remove("RDV_PROFILE");
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// `rdv --json init --allow-ws --relay RELAY EXTRA…` as [`rdv_async`]
/// runs it; the new agent's ID.
pub async fn init_on(home: &Path, dns: &str, relay: &str, extra: &[&str]) -> rdv_proto::AgentId {
    let mut args = vec!["--json", "init", "--allow-ws", "--relay", relay];
    args.extend_from_slice(extra);
    let (code, out, err) = rdv_async(home, dns, &args).await;
    assert_eq!(code, 0, "init {}: {err}", home.display());
    let v: Value = serde_json::from_str(&out).unwrap();
    rdv_proto::AgentId::parse(v["id"].as_str().unwrap()).unwrap()
}
