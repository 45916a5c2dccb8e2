//! A person at a terminal lists an agent in a directory and looks it up:
//! the real `rdv-directory` server (SQLite default, port 0) and the real
//! `rdv` binary, SPEC §4.5.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use rdv_e2e::{bin, run, start_server};
use serde_json::{Value, json};

const SEED: &str = "0303030303030303030303030303030303030303030303030303030303030303";

fn rdv(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let o = run(Command::new(bin("rdv")).args(args), stdin);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// A card claiming `alice@example.org`, signed through `rdv proto sign`.
fn card() -> Value {
    let (_, out, _) = rdv(&["proto", "keygen", "--seed", SEED], b"");
    let id = serde_json::from_str::<Value>(&out).unwrap()["id"].clone();
    let created =
        rdv_proto::time::format_time(rdv_proto::time::from_unix(time_now() - 60).unwrap());
    let unsigned = json!({
        "v": 1, "id": id, "created": created, "expires": null, "capabilities": ["rdv/v1", "a2a/0.3"],
        "discovery": {"addresses": [{"type": "email", "value": "alice@example.org"}], "public_pointer": false},
        "rendezvous": [{"type": "nostr", "relay": "wss://relay.example", "pref": 1}],
        "policy": {"inbound": "prompt", "public": false},
    });
    let (code, out, err) = rdv(
        &["proto", "sign", "--seed", SEED],
        unsigned.to_string().as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn time_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn publish_lookup_remove_from_the_terminal() {
    let dir = std::env::temp_dir().join(format!("rdv-e2e-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.to_str().unwrap();
    let o = run(
        Command::new(bin("rdv-directory")).args(["--data-dir", data, "keygen"]),
        b"",
    );
    assert!(
        o.status.success(),
        "keygen: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // As the Docker image runs it: the sample config named by the
    // environment, with an environment override on top.
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docker/directory/config.toml"
    );
    let mut serve = Command::new(bin("rdv-directory"));
    serve
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RDV_DIRECTORY_CONFIG", sample)
        .env("RDV_DIRECTORY_DATA_DIR", data);
    let server = start_server(serve);

    let seed_file = dir.join("seed");
    std::fs::write(&seed_file, SEED).unwrap();
    let card_file = dir.join("card.json");
    std::fs::write(&card_file, card().to_string()).unwrap();
    let (seed, cardp) = (seed_file.to_str().unwrap(), card_file.to_str().unwrap());
    let url = server.url.as_str();

    // Listed under an address the card claims (any case: canon lowercases).
    let (code, out, err) = rdv(
        &[
            "directory",
            "publish",
            "--url",
            url,
            "--address",
            "Alice@Example.org",
            "--seed-file",
            seed,
            "--card",
            cardp,
        ],
        b"",
    );
    assert_eq!(code, 0, "publish: {err}");
    assert!(out.contains("stored"), "{out}");
    // Refused for an address the card does not claim.
    let (code, _, err) = rdv(
        &[
            "directory",
            "publish",
            "--url",
            url,
            "--address",
            "bob@example.org",
            "--seed-file",
            seed,
            "--card",
            cardp,
        ],
        b"",
    );
    assert_eq!(code, 1);
    assert!(err.contains("does not list"), "{err}");

    // Lookup finds exactly the card for the address, nothing for another.
    let (code, out, err) = rdv(
        &[
            "directory",
            "lookup",
            "--url",
            url,
            "alice@example.org",
            "bob@example.org",
        ],
        b"",
    );
    assert_eq!(code, 0, "lookup: {err}");
    let id = card()["id"].as_str().unwrap().to_string();
    let alice_line = out
        .lines()
        .find(|l| l.starts_with("alice@example.org"))
        .expect("a line for alice");
    assert!(alice_line.contains(&id), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("bob@example.org") && l.contains("not found")),
        "{out}"
    );

    // Removed right after publishing; the lookup no longer finds it.
    let (code, _, err) = rdv(
        &[
            "directory",
            "remove",
            "--url",
            url,
            "--address",
            "alice@example.org",
            "--seed-file",
            seed,
        ],
        b"",
    );
    assert_eq!(code, 0, "remove: {err}");
    let (_, out, _) = rdv(
        &["directory", "lookup", "--url", url, "alice@example.org"],
        b"",
    );
    assert!(out.contains("not found") && !out.contains(&id), "{out}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A newcomer's first try (issue #14): `serve --data-dir D` on an empty `D`
/// creates the key (0600) and serves under it; a key file the operator
/// named and that is missing is refused, naming it, and nothing is created.
#[test]
fn first_serve_creates_the_key_and_a_named_missing_key_file_is_refused() {
    let dir = rdv_e2e::TempDir::new("dir-first-serve");
    let data = dir.path().join("data");
    let mut serve = Command::new(bin("rdv-directory"));
    serve.args([
        "--data-dir",
        data.to_str().unwrap(),
        "serve",
        "--listen",
        "127.0.0.1:0",
    ]);
    let server = start_server(serve);
    let key_file = data.join("oprf-keys.json");
    let meta = std::fs::metadata(&key_file).expect("key file created on first start");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }
    let served = |url: &str| {
        let keys = run(
            Command::new("curl").args(["-sf", &format!("{url}/v1/keys")]),
            b"",
        );
        let listed: Value = serde_json::from_slice(&keys.stdout).expect("keys JSON");
        let ids: Vec<String> = listed["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|k| k["id"].as_str().expect("id").to_string())
            .collect();
        ids
    };
    let first = served(&server.url);
    assert_eq!(first.len(), 1, "one fresh key: {first:?}");
    drop(server);
    // The next start serves the key it created, not another one.
    let mut again = Command::new(bin("rdv-directory"));
    again.args([
        "--data-dir",
        data.to_str().unwrap(),
        "serve",
        "--listen",
        "127.0.0.1:0",
    ]);
    let server = start_server(again);
    assert_eq!(served(&server.url), first);
    drop(server);

    let missing = dir.path().join("elsewhere").join("keys.json");
    let o = run(
        Command::new(bin("rdv-directory")).args([
            "--data-dir",
            dir.path().join("data2").to_str().unwrap(),
            "--key-file",
            missing.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ]),
        b"",
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(missing.to_str().unwrap()),
        "names the file: {err}"
    );
    assert!(!missing.exists());
}
