//! `rdv proto …` driven as a process, against the committed test vectors
//! (docs/test-vectors): the conformance contract of docs/conformance.md,
//! including exit codes, empty stdout on refusal and the one-line error.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

struct Out {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

fn rdv(args: &[&str], stdin: &[u8]) -> Out {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdv"))
        .args(["proto"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rdv");
    // A command that takes no stdin may exit before reading it.
    let _ = child.stdin.take().expect("stdin").write_all(stdin);
    let o = child.wait_with_output().expect("wait rdv");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: o.stdout,
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

fn ok_json(args: &[&str], stdin: &[u8]) -> Value {
    let o = rdv(args, stdin);
    assert_eq!(o.code, 0, "rdv proto {args:?} failed: {}", o.stderr);
    serde_json::from_slice(&o.stdout).expect("stdout is JSON")
}

/// The refusal contract: exit 1, nothing on stdout, one JSON line on stderr.
fn refused(args: &[&str], stdin: &[u8]) -> String {
    let o = rdv(args, stdin);
    assert_eq!(
        o.code,
        1,
        "rdv proto {args:?} should refuse; stdout {:?}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(o.stdout.is_empty(), "stdout must be empty on refusal");
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {:?}", o.stderr);
    let e: Value = serde_json::from_str(lines[0]).expect("stderr is JSON");
    e["error"].as_str().expect("error is a string").to_string()
}

fn vectors(name: &str) -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../docs/test-vectors/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).expect("vector file")).expect("vector JSON")
}

fn canon(v: &Value) -> Vec<u8> {
    rdv_proto::canon::to_vec(v).expect("canon")
}

#[test]
fn canon_matches_vectors_exactly_and_refuses_invalid() {
    let v = vectors("canon");
    for case in v["valid"].as_array().unwrap() {
        let o = rdv(&["canon"], case["input"].as_str().unwrap().as_bytes());
        assert_eq!(o.code, 0, "{}", case["name"]);
        assert_eq!(
            String::from_utf8(o.stdout).unwrap(),
            case["canonical"].as_str().unwrap(),
            "{}",
            case["name"]
        );
    }
    let invalid = v["invalid"].as_array().unwrap();
    assert!(!invalid.is_empty());
    for case in invalid {
        refused(&["canon"], case["input"].as_str().unwrap().as_bytes());
    }
}

#[test]
fn keygen_matches_vectors() {
    for k in vectors("keys")["keys"].as_array().unwrap() {
        let got = ok_json(&["keygen", "--seed", k["seed"].as_str().unwrap()], b"");
        for f in [
            "id",
            "fingerprint",
            "ed25519_pub",
            "x25519_pub",
            "nostr_pub",
        ] {
            assert_eq!(got[f], k[f], "{f}");
        }
    }
    refused(&["keygen", "--seed", "00"], b"");
    refused(&["keygen", "--seed", &"AB".repeat(32)], b"");
}

#[test]
fn topics_match_vectors() {
    let v = vectors("topics");
    for a in v["addresses"].as_array().unwrap() {
        let got = ok_json(&["topic", "--address", a["input"].as_str().unwrap()], b"");
        assert_eq!(got["canon"], a["canon"]);
        assert_eq!(got["dtopic"], a["dtopic"]);
    }
    for bad in v["invalid_addresses"].as_array().unwrap() {
        refused(&["topic", "--address", bad.as_str().unwrap()], b"");
    }
    for i in v["ids"].as_array().unwrap() {
        assert_eq!(
            ok_json(&["topic", "--id", i["id"].as_str().unwrap()], b"")["idtopic"],
            i["idtopic"]
        );
    }
    refused(&["topic", "--id", "rdv1:nope"], b"");
}

#[test]
fn sign_matches_vectors_and_refuses_signed_or_non_objects() {
    for c in vectors("signatures")["cases"].as_array().unwrap() {
        let seed = c["seed"].as_str().unwrap();
        let o = rdv(&["sign", "--seed", seed], &canon(&c["unsigned"]));
        assert_eq!(o.code, 0, "{}", o.stderr);
        let mut want = c["signed_canonical"].as_str().unwrap().as_bytes().to_vec();
        want.push(b'\n');
        assert_eq!(o.stdout, want);
        refused(&["sign", "--seed", seed], &canon(&c["signed"]));
    }
    refused(&["sign", "--seed", &"01".repeat(32)], b"[1,2]");
}

#[test]
fn envelopes_seal_byte_identical_open_and_verify() {
    let v = vectors("envelopes");
    let now = v["now"].as_str().unwrap();
    for c in v["valid"].as_array().unwrap() {
        let env = &c["envelope"];
        let got = ok_json(&["verify", "--kind", "envelope", "--now", now], &canon(env));
        assert_eq!(got, serde_json::json!({"ok": true, "hash": c["hash"]}));
        let opened = ok_json(
            &[
                "open",
                "--seed",
                c["recipient_seed"].as_str().unwrap(),
                "--now",
                now,
            ],
            &canon(env),
        );
        assert_eq!(opened["seq"], c["seq"]);
        assert_eq!(opened["prev"], c["prev"]);
        assert_eq!(opened["from"], env["from"]);
        if c.get("payload_note").is_none() {
            assert_eq!(opened["payload"], c["payload"]);
            // Sealing the same inputs gives the same bytes.
            let seq = c["seq"].to_string();
            let mut args = vec![
                "seal",
                "--seed",
                c["sender_seed"].as_str().unwrap(),
                "--to",
                env["to"].as_str().unwrap(),
                "--seq",
                &seq,
                "--created",
                c["created"].as_str().unwrap(),
                "--ttl",
                c["ttl"].as_str().unwrap(),
                "--ephemeral-seed",
                c["ephemeral_seed"].as_str().unwrap(),
                "--nonce",
                c["nonce"].as_str().unwrap(),
            ];
            if let Some(p) = c["prev"].as_str() {
                args.extend(["--prev", p]);
            }
            let o = rdv(&args, &canon(&c["payload"]));
            assert_eq!(o.code, 0, "{}", o.stderr);
            assert_eq!(o.stdout[..o.stdout.len() - 1], canon(env)[..]);
        }
        // The wrong key cannot open it.
        refused(
            &[
                "open",
                "--seed",
                c["sender_seed"].as_str().unwrap(),
                "--now",
                now,
            ],
            &canon(env),
        );
    }
    let invalid = v["invalid"].as_array().unwrap();
    assert!(invalid.len() >= 6);
    for c in invalid {
        let recipient = v["valid"][0]["recipient_seed"].as_str().unwrap();
        let e = refused(
            &["open", "--seed", recipient, "--now", now],
            &canon(&c["envelope"]),
        );
        assert!(!e.is_empty(), "{}", c["name"]);
        refused(
            &["verify", "--kind", "envelope", "--now", now],
            &canon(&c["envelope"]),
        );
    }
}

#[test]
fn oversize_ciphertext_refused_before_signature() {
    let v = vectors("envelopes");
    let c = v["invalid"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["error"] == "too large")
        .unwrap();
    let e = refused(
        &[
            "open",
            "--seed",
            &"02".repeat(32),
            "--now",
            v["now"].as_str().unwrap(),
        ],
        &canon(&c["envelope"]),
    );
    assert!(
        e.contains("too large"),
        "size is the reason, not the signature: {e}"
    );
}

#[test]
fn seal_refuses_non_objects_and_bad_ttl() {
    let to = vectors("keys")["keys"][2]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let seed = "01".repeat(32);
    refused(
        &["seal", "--seed", &seed, "--to", &to, "--seq", "1"],
        b"[1]",
    );
    refused(
        &[
            "seal", "--seed", &seed, "--to", &to, "--seq", "1", "--ttl", "8d",
        ],
        b"{}",
    );
    refused(&["seal", "--seed", &seed, "--to", &to, "--seq", "2"], b"{}");
    let env = ok_json(
        &["seal", "--seed", &seed, "--to", &to, "--seq", "1"],
        b"{\"type\":\"x\"}",
    );
    assert_eq!(env["ttl"], "48h");
}

#[test]
fn nostr_events_match_vectors_and_verify() {
    let v = vectors("nostr");
    let seed = v["seed"].as_str().unwrap();
    let e = &v["envelope_event"];
    let ca = e["created_at"].to_string();
    let got = ok_json(
        &["nostr-event", "--seed", seed, "--created-at", &ca],
        &canon(&e["envelope"]),
    );
    // BIP-340 aux randomness differs per run: everything but sig is fixed.
    for f in ["id", "pubkey", "created_at", "kind", "tags", "content"] {
        assert_eq!(got[f], e["event"][f], "{f}");
    }
    let checked = ok_json(&["nostr-verify"], &canon(&got));
    assert_eq!(checked["carries"], "envelope");
    let c = &v["card_event"];
    let ca = c["created_at"].to_string();
    let topic = c["topic"].as_str().unwrap();
    let got = ok_json(
        &[
            "nostr-event",
            "--seed",
            seed,
            "--card",
            "--topic",
            topic,
            "--created-at",
            &ca,
        ],
        &canon(&c["card"]),
    );
    for f in ["id", "pubkey", "created_at", "kind", "tags", "content"] {
        assert_eq!(got[f], c["event"][f], "{f}");
    }
    assert_eq!(
        ok_json(&["nostr-verify"], &canon(&c["event"]))["carries"],
        "card"
    );
    let mut tampered = c["event"].clone();
    tampered["created_at"] = serde_json::json!(c["created_at"].as_u64().unwrap() + 1);
    refused(&["nostr-verify"], &canon(&tampered));
}

#[test]
fn documents_verify_and_invalid_variants_are_refused() {
    let v = vectors("documents");
    let now = v["now"].as_str().unwrap();
    for c in v["valid"].as_array().unwrap() {
        let got = ok_json(
            &[
                "verify",
                "--kind",
                c["kind"].as_str().unwrap(),
                "--now",
                now,
            ],
            &canon(&c["doc"]),
        );
        assert_eq!(got["hash"], c["hash"], "{}", c["kind"]);
    }
    let invalid = v["invalid"].as_array().unwrap();
    assert!(invalid.len() >= 20);
    for c in invalid {
        refused(
            &[
                "verify",
                "--kind",
                c["kind"].as_str().unwrap(),
                "--now",
                now,
            ],
            &canon(&c["doc"]),
        );
    }
    refused(&["verify", "--kind", "nonsense"], b"{}");
}
