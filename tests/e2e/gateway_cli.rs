//! A person at a terminal tries a probe gateway (SPEC §5.2.1, §5.2.2): the
//! real `rdv-probe-gateway serve` (SQLite, port 0, outbound mail spooled to
//! `<data_dir>/outbox/`) and the real `rdv gateway …` commands. Spooled
//! mail is handed back with `rdv gateway inbound`, as a mail rule would;
//! Gmail's forwarding confirmation comes in over the gateway's SMTP listener.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use rdv_e2e::{Server, bin, run, start_server};
use rdv_proto::AgentKey;
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::doc::request::RequestBuilder;
use rdv_proto::mailblock::{self, MailParams, TransferEncoding};
use rdv_proto::time::from_unix;
use serde_json::Value;

const ALICE_SEED: &str = "0101010101010101010101010101010101010101010101010101010101010101";
const BOB_SEED: &str = "0202020202020202020202020202020202020202020202020202020202020202";
const RELAY: &str = "wss://relay.example.org";
/// The authserv-id the gateway trusts when it listens for SMTP.
const AUTHSERV: &str = "mx.e2e.test";

/// [`start_server`] for a gateway that also listens for SMTP: both bound
/// addresses are read from its stdout (`listening on http://…`, then
/// `listening on smtp://…`).
fn start_with_smtp(mut cmd: Command) -> (Server, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = |scheme: &str| loop {
        let line = lines
            .next()
            .expect("the gateway printed its addresses")
            .unwrap();
        if let Some((_, addr)) = line.split_once(scheme) {
            break addr
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
        }
    };
    let url = format!("http://{}", next("http://"));
    let smtp = next("smtp://");
    std::thread::spawn(move || for _ in lines {});
    (Server { child, url }, smtp)
}

/// One SMTP reply (its last line's code), multi-line replies read whole.
fn smtp_reply(r: &mut impl BufRead) -> u16 {
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert!(l.len() >= 4, "SMTP reply {l:?}");
        if l.as_bytes()[3] == b' ' {
            return l[..3].parse().unwrap();
        }
    }
}

/// Delivers `raw` to `rcpt` over SMTP, as Gmail's servers would.
fn smtp_send(addr: &str, from: &str, rcpt: &str, raw: &str) {
    use std::io::Write;
    let mut w = std::net::TcpStream::connect(addr).unwrap();
    let mut r = std::io::BufReader::new(w.try_clone().unwrap());
    assert_eq!(smtp_reply(&mut r), 220);
    for (cmd, want) in [
        ("EHLO mail-sor-f41.google.com".to_string(), 250),
        (format!("MAIL FROM:<{from}>"), 250),
        (format!("RCPT TO:<{rcpt}>"), 250),
        ("DATA".to_string(), 354),
    ] {
        write!(w, "{cmd}\r\n").unwrap();
        assert_eq!(smtp_reply(&mut r), want, "{cmd}");
    }
    for l in raw.split("\r\n") {
        let dot = if l.starts_with('.') { "." } else { "" };
        write!(w, "{dot}{l}\r\n").unwrap();
    }
    write!(w, ".\r\n").unwrap();
    assert_eq!(smtp_reply(&mut r), 250, "DATA");
    write!(w, "QUIT\r\n").unwrap();
}

/// Gmail's forwarding confirmation for `mailbox`, to its gateway address,
/// DKIM-passed for google.com by the trusted authserv-id.
fn forwarding_mail(mailbox: &str, to: &str) -> String {
    format!(
        "Authentication-Results: {AUTHSERV}; dkim=pass header.d=google.com\r\n\
         From: Gmail Team <forwarding-noreply@google.com>\r\nTo: {to}\r\n\
         Subject: (#012345678) Gmail Forwarding Confirmation - Receive Mail from {mailbox}\r\n\
         Message-ID: <fwd-1@google.com>\r\nContent-Type: text/plain; charset=UTF-8\r\n\r\n\
         Confirmation code: 012345678\r\n"
    )
}

struct Env {
    dir: PathBuf,
    server: Server,
    /// The SMTP listener's `host:port`, when started with one.
    smtp: Option<String>,
    seen: HashSet<PathBuf>,
}

impl Env {
    /// The gateway, with an SMTP listener (and `AUTHSERV` trusted) when
    /// `smtp`.
    fn start(name: &str, smtp: bool) -> Self {
        let dir = std::env::temp_dir().join(format!("rdv-e2e-gw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("gateway.toml");
        let mut toml = format!(
            "http_listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n",
            dir.join("data").display()
        );
        if smtp {
            toml.push_str(&format!(
                "smtp_listen = \"127.0.0.1:0\"\n\n[auth.trusted]\nauthserv_ids = [\"{AUTHSERV}\"]\n"
            ));
        }
        // public_url: invites carry the explainer link under it (§5.2.2).
        toml.push_str("\n[flows]\nmail_domain = \"gw.test\"\npublic_url = \"https://gw.test\"\n");
        std::fs::write(&config, toml).unwrap();
        let mut serve = Command::new(bin("rdv-probe-gateway"));
        serve.arg("serve").arg("--config").arg(&config);
        let (server, smtp) = if smtp {
            let (server, smtp) = start_with_smtp(serve);
            (server, Some(smtp))
        } else {
            (start_server(serve), None)
        };
        for (who, seed) in [("alice", ALICE_SEED), ("bob", BOB_SEED)] {
            std::fs::write(dir.join(format!("{who}.seed")), seed).unwrap();
        }
        Self {
            dir,
            server,
            smtp,
            seen: HashSet::new(),
        }
    }

    fn seed(&self, who: &str) -> String {
        self.dir.join(format!("{who}.seed")).display().to_string()
    }

    /// `rdv gateway --gateway URL --seed-file <who> ARGS…`.
    fn rdv(&self, who: &str, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
        let o = run(
            Command::new(bin("rdv"))
                .args(["gateway", "--gateway", &self.server.url, "--seed-file"])
                .arg(self.seed(who))
                .args(args),
            stdin,
        );
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into(),
            String::from_utf8_lossy(&o.stderr).into(),
        )
    }

    /// Like [`Env::rdv`], expecting success and one JSON object on stdout.
    fn ok(&self, who: &str, args: &[&str], stdin: &[u8]) -> Value {
        let (code, out, err) = self.rdv(who, args, stdin);
        assert_eq!(code, 0, "rdv gateway {args:?}: {err}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// The mail spooled since the last call.
    fn new_mail(&mut self) -> Vec<String> {
        let outbox = self.dir.join("data").join("outbox");
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

    /// The one new spooled mail.
    fn one_mail(&mut self) -> String {
        let mut m = self.new_mail();
        assert_eq!(m.len(), 1, "one new spooled mail");
        m.remove(0)
    }

    /// register → code from the spooled mail → verify; returns the token.
    fn enroll(&mut self, who: &str, mailbox: &str) -> Value {
        let v = self.ok(who, &["register", "--mailbox", mailbox], b"");
        assert_eq!(v["status"], "code_sent");
        let code = code_of(&self.one_mail());
        self.ok(who, &["verify", "--mailbox", mailbox, "--code", &code], b"")
    }

    fn inbox(&self, who: &str) -> Vec<Value> {
        let (code, out, err) = self.rdv(who, &["inbox"], b"");
        assert_eq!(code, 0, "inbox: {err}");
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `rdv gateway inbound --token T < mail`; returns the queue seq.
    fn inbound(&self, token: &str, mail: &str) -> u64 {
        let v = self.ok("bob", &["inbound", "--token", token], mail.as_bytes());
        v["seq"].as_u64().unwrap_or_else(|| panic!("{v}"))
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn code_of(mail: &str) -> String {
    mail.split_once("type this code into it: ")
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A probe mail another agent (Alice's, seed 01…) composed itself.
fn probe_mail(to: &str) -> String {
    let key = AgentKey::from_seed([1; 32]);
    let now = from_unix(now_secs() - 60).unwrap();
    let request = RequestBuilder {
        id: "1b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c01".into(),
        to_hint: Some(to.into()),
        card: CardBuilder::new(now, vec![RELAY.into()])
            .sign(&key)
            .unwrap(),
        greeting: "Alice's agent requests contact on Alice's behalf.".into(),
        capabilities_offered: vec!["a2a/0.3".into()],
        ts: now,
    }
    .sign(&key)
    .unwrap();
    let raw = mailblock::compose(
        &mailblock::probe_payload(&request),
        &MailParams {
            from: "alice@a.test",
            to,
            date: now,
            message_id: "<probe-1@a.test>",
            encoding: TransferEncoding::QuotedPrintable,
            subject_line: None,
            intro: None,
        },
    )
    .unwrap();
    String::from_utf8(raw).unwrap()
}

#[test]
fn enrol_receive_a_probe_and_refusals() {
    let mut env = Env::start("enrol", true);
    // A wrong code is refused with the gateway's code, exit 1.
    let v = env.ok("bob", &["register", "--mailbox", "Bob@B.test"], b"");
    assert_eq!(v["mailbox"], "bob@b.test");
    let code = code_of(&env.one_mail());
    let (c, out, err) = env.rdv(
        "bob",
        &["verify", "--mailbox", "bob@b.test", "--code", "aaaaaaaa"],
        b"",
    );
    assert_eq!((c, out.as_str()), (1, ""));
    assert!(err.contains("wrong_code") && err.contains("403"), "{err}");
    let (c, out, err) = env.rdv(
        "bob",
        &["verify", "--mailbox", "bob@b.test", "--code", &code],
        b"",
    );
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let token = v["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("rdvgw1."));
    let gaddr = v["gateway_address"].as_str().unwrap().to_string();
    assert!(gaddr.ends_with("@gw.test"));
    // The person is told how to wire the mail rule, and where to read.
    assert!(
        err.contains("docs/mail-rules.md") && err.contains("shown once"),
        "{err}"
    );
    let m = env.ok("bob", &["mailboxes"], b"");
    assert_eq!(m["mailboxes"][0]["mailbox"], "bob@b.test");

    assert!(env.inbox("bob").is_empty());
    // A key that proved nothing is refused.
    let (c, _, err) = env.rdv("alice", &["inbox"], b"");
    assert_eq!(c, 1);
    assert!(err.contains("unregistered") && err.contains("403"), "{err}");

    // The mail rule pipes a probe in; the inbox shows it with its cookie.
    let seq = env.inbound(&token, &probe_mail("bob@b.test"));
    let items = env.inbox("bob");
    assert_eq!(items.len(), 1);
    let it = &items[0];
    assert_eq!(
        (&it["seq"], &it["kind"], &it["status"]),
        (
            &Value::from(seq),
            &Value::from("probe"),
            &Value::from("pending")
        )
    );
    assert_eq!(it["requester"], AgentKey::from_seed([1; 32]).id().as_str());
    assert_eq!(it["cookie"].as_str().unwrap().len(), 26);
    // The same mail again, another recipient, a bad token: refused.
    let (c, _, err) = env.rdv(
        "bob",
        &["inbound", "--token", &token],
        probe_mail("bob@b.test").as_bytes(),
    );
    assert_eq!(c, 1);
    assert!(err.contains("duplicate"), "{err}");
    let (c, _, err) = env.rdv(
        "bob",
        &["inbound", "--token", "rdvgw1.nope.nope"],
        probe_mail("bob@b.test").as_bytes(),
    );
    assert_eq!(c, 1);
    assert!(err.contains("bad_token") && err.contains("401"), "{err}");
    // The token never shows up in an error.
    let (_, _, err) = env.rdv(
        "bob",
        &["inbound", "--token", &token],
        probe_mail("carol@b.test").as_bytes(),
    );
    assert!(err.contains("to_hint") && !err.contains(&token), "{err}");
    // Usage errors: clap's exit 2; a bad tier is ours, exit 1.
    let (c, _, _) = env.rdv("bob", &["inbox", "--after", "x"], b"");
    assert_eq!(c, 2);
    let (c, _, err) = env.rdv(
        "bob",
        &["answer", "--seq", "1", "--tier", "king", "--relay", RELAY],
        b"",
    );
    assert_eq!(c, 1);
    assert!(err.contains("--tier"), "{err}");

    // Gmail's forwarding confirmation reaches the gateway address by SMTP:
    // stdout has the item as the gateway sent it, stderr the code in words.
    let smtp = env.smtp.clone().unwrap();
    let fwd = forwarding_mail("bob@b.test", &gaddr);
    smtp_send(&smtp, "forwarding-noreply@google.com", &gaddr, &fwd);
    let after = seq.to_string();
    let (c, out, err) = env.rdv("bob", &["inbox", "--after", &after], b"");
    assert_eq!(c, 0, "{err}");
    let item: Value = serde_json::from_str(out.trim()).unwrap();
    let fseq = item["seq"].as_u64().unwrap();
    assert_eq!(
        item,
        serde_json::json!({
            "seq": fseq, "received": item["received"], "kind": "forwarding_confirmation",
            "code": "012345678", "provider": "gmail", "mailbox": "bob@b.test",
        })
    );
    let notice = "rdv: Gmail forwarding confirmation for bob@b.test: code 012345678; \
                  enter it in Gmail's forwarding settings";
    assert_eq!(err.trim(), notice);

    // listen prints the queued items as JSON lines, then waits.
    let mut child = Command::new(bin("rdv"))
        .args(["gateway", "--gateway", &env.server.url, "--seed-file"])
        .arg(env.seed("bob"))
        .args(["listen", "--after", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut errs = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let second: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let told = errs.next().unwrap().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(first["event"], "probe");
    assert_eq!(first["id"], seq.to_string());
    assert_eq!(first["data"]["seq"], seq);
    assert_eq!(second["event"], "forwarding_confirmation");
    assert_eq!(second["id"], fseq.to_string());
    assert_eq!(second["data"], item);
    assert_eq!(told, notice);
}

fn subject_has(mail: &str, marker: &str) -> bool {
    mail.lines()
        .any(|l| l.starts_with("Subject: ") && l.contains(marker))
}

#[test]
fn two_agents_probe_answer_ack_and_invite() {
    let mut env = Env::start("flow", false);
    let alice_token = env.enroll("alice", "alice@a.test")["token"]
        .as_str()
        .unwrap()
        .to_string();
    let bob_token = env.enroll("bob", "bob@b.test")["token"]
        .as_str()
        .unwrap()
        .to_string();

    // SYN: Alice probes Bob's mailbox; the gateway mails it.
    let v = env.ok(
        "alice",
        &["send-probe", "--to", "Bob@B.test", "--relay", RELAY],
        b"",
    );
    assert_eq!(v["sent"]["status"], "sent");
    let request_id = v["request_id"].as_str().unwrap().to_string();
    assert_eq!(v["sent"]["id"], request_id.as_str());
    let probe = env.one_mail();
    assert!(subject_has(&probe, "[RDV-PROBE]"), "{probe}");
    // Once per address per 30 days.
    let (c, _, err) = env.rdv(
        "alice",
        &["send-probe", "--to", "bob@b.test", "--relay", RELAY],
        b"",
    );
    assert_eq!(c, 1);
    assert!(
        err.contains("address_limited") && err.contains("retry after"),
        "{err}"
    );
    let b_seq = env.inbound(&bob_token, &probe);
    let cookie = env.inbox("bob")[0]["cookie"].as_str().unwrap().to_string();

    // SYN-ACK: Bob answers with a grant (tier stranger by default).
    let v = env.ok(
        "bob",
        &["answer", "--seq", &b_seq.to_string(), "--relay", RELAY],
        b"",
    );
    assert_eq!(v["sent"]["status"], "sent");
    let syn_ack = env.one_mail();
    assert!(subject_has(&syn_ack, "[RDV-PROBE-ACK]"), "{syn_ack}");
    let a_seq = env.inbound(&alice_token, &syn_ack);
    let ack_item = env
        .inbox("alice")
        .into_iter()
        .find(|i| i["seq"] == a_seq)
        .unwrap();
    assert_eq!(ack_item["kind"], "probe_ack");
    assert_eq!(ack_item["payload"]["grant"]["tier"], "stranger");
    assert_eq!(
        ack_item["payload"]["grant"]["request_ref"],
        request_id.as_str()
    );
    assert_eq!(ack_item["payload"]["cookie"], cookie.as_str());

    // ACK: Alice echoes the cookie by mail; Bob's gateway releases.
    let (c, _, err) = env.rdv("alice", &["send-ack", "--seq", &b_seq.to_string()], b"");
    // Bob's probe is not an item of Alice's.
    assert_eq!(c, 1);
    assert!(err.contains("no inbox item"), "{err}");
    let v = env.ok("alice", &["send-ack", "--seq", &a_seq.to_string()], b"");
    assert_eq!(v["status"], "sent");
    let echo = env.one_mail();
    assert!(subject_has(&echo, "[RDV-ACK]"), "{echo}");
    env.inbound(&bob_token, &echo);
    let items = env.inbox("bob");
    let release = items.iter().find(|i| i["kind"] == "release").unwrap();
    assert_eq!(release["request_id"], request_id.as_str());
    let (c, _, err) = env.rdv(
        "bob",
        &[
            "ack",
            "--seq",
            &b_seq.to_string(),
            "--cookie",
            "aaaaaaaaaaaaaaaaaaaaaaaaaa",
        ],
        b"",
    );
    assert_eq!(c, 1);
    assert!(err.contains("bad_cookie"), "{err}");
    let v = env.ok(
        "bob",
        &["ack", "--seq", &b_seq.to_string(), "--cookie", &cookie],
        b"",
    );
    assert_eq!(
        (&v["status"], &v["via"]),
        (&"released".into(), &"mail".into())
    );

    // An invite, and its answer recorded by the inviter.
    let v = env.ok(
        "alice",
        &[
            "send-invite",
            "--to",
            "dana@d.test",
            "--source",
            "the club list",
            "--note",
            "Hi Dana, it's Alice.",
        ],
        b"",
    );
    assert_eq!(v["sent"]["status"], "sent");
    let id = v["invite_id"].as_str().unwrap().to_string();
    let invite = env.one_mail();
    assert!(subject_has(&invite, "[RDV-INVITE]") && invite.contains("Hi Dana"));
    assert!(
        invite.contains("Where I got your address: the club list."),
        "{invite}"
    );
    // §5.2.2: the source is required.
    let (c, _, err) = env.rdv("alice", &["send-invite", "--to", "dana@d.test"], b"");
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("--source"), "{err}");
    let (c, _, err) = env.rdv(
        "alice",
        &["send-invite", "--to", "dana@d.test", "--source", "again"],
        b"",
    );
    assert_eq!(c, 1);
    assert!(err.contains("invite_pending"), "{err}");
    let v = env.ok(
        "alice",
        &["invite-status", "--id", &id, "--status", "declined"],
        b"",
    );
    assert_eq!(v["status"], "declined");
}
