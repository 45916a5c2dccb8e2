//! `rdv proto …`: the conformance interface. Another implementation feeds
//! the same inputs to its own code and to these commands and compares bytes.
//!
//! Each command is a function of its arguments, stdin, the clock and a
//! random source, so the tests drive them without a process.

use rand_core::CryptoRngCore;
use rdv_proto::consts::CARD_MAX_BYTES;
use rdv_proto::doc::DocKind;
use rdv_proto::envelope::{self, SealParams};
use rdv_proto::nostr_event;
use rdv_proto::time::{Instant, parse_time};
use rdv_proto::{Address, AgentId, AgentKey, canon, idtopic, sign};
use serde_json::{Value, json};

use crate::cli::{NostrEventArgs, OpenArgs, ProtoCommand, SealArgs, TopicArgs, VerifyArgs};
use crate::error::{Error, Result};

/// Largest stdin a conformance command reads; checked before parsing.
pub const STDIN_MAX_BYTES: usize = 1024 * 1024;

/// The clock and the randomness a command may use.
pub struct Ctx<'a> {
    pub now: Instant,
    pub rng: &'a mut dyn CryptoRngCore,
}

/// Runs one command and returns exactly the bytes for stdout.
pub fn run(cmd: &ProtoCommand, stdin: &[u8], ctx: &mut Ctx<'_>) -> Result<Vec<u8>> {
    match cmd {
        ProtoCommand::Canon => Ok(canon::to_vec(&read_json(stdin)?)?),
        ProtoCommand::Keygen(a) => keygen(&a.seed),
        ProtoCommand::Topic(a) => topic(a),
        ProtoCommand::Sign(a) => {
            let key = seed(&a.seed)?;
            json_line(&sign::sign_value(read_json(stdin)?, &key)?)
        }
        ProtoCommand::Verify(a) => verify(a, stdin, ctx),
        ProtoCommand::Seal(a) => seal(a, stdin, ctx),
        ProtoCommand::Open(a) => open(a, stdin, ctx),
        ProtoCommand::NostrEvent(a) => nostr_event(a, stdin, ctx),
        ProtoCommand::NostrVerify => nostr_verify(stdin),
        ProtoCommand::Vectors(_) => Err(Error::Input(
            "vectors writes files; run it through the binary".into(),
        )),
    }
}

fn read_json(stdin: &[u8]) -> Result<Value> {
    Ok(canon::parse(stdin, STDIN_MAX_BYTES)?)
}

fn json_line(v: &Value) -> Result<Vec<u8>> {
    let mut out = canon::to_vec(v)?;
    out.push(b'\n');
    Ok(out)
}

/// A seed is exactly 64 lowercase hex characters.
pub fn seed(hex_seed: &str) -> Result<AgentKey> {
    let s = rdv_proto::encoding::hex_array::<32>("seed", hex_seed)?;
    Ok(AgentKey::from_seed(s))
}

fn time_arg(name: &'static str, s: &Option<String>, now: Instant) -> Result<Instant> {
    match s {
        None => Ok(now),
        Some(s) => Ok(parse_time(name, s)?),
    }
}

/// `seal --created`: envelopes carry whole seconds, so a fraction would be
/// silently lost; refuse it instead.
fn created_arg(s: &Option<String>, now: Instant) -> Result<Instant> {
    let t = time_arg("created", s, now)?;
    if s.is_some() && t.nanosecond() != 0 {
        return Err(Error::Input(
            "--created must be whole seconds (YYYY-MM-DDTHH:MM:SSZ)".into(),
        ));
    }
    Ok(t)
}

fn keygen(hex_seed: &str) -> Result<Vec<u8>> {
    let k = seed(hex_seed)?;
    let nostr = k.nostr_keys()?;
    json_line(&json!({
        "id": k.id().as_str(),
        "fingerprint": k.id().fingerprint(),
        "ed25519_pub": hex::encode(k.id().key_bytes()),
        "x25519_pub": hex::encode(k.id().x25519_public()?.as_bytes()),
        "nostr_pub": nostr.public_key().to_hex(),
    }))
}

fn topic(a: &TopicArgs) -> Result<Vec<u8>> {
    match (&a.address, &a.id) {
        (Some(addr), None) => {
            let addr = Address::parse(addr)?;
            json_line(&json!({"canon": addr.canon(), "dtopic": addr.dtopic()}))
        }
        (None, Some(id)) => json_line(&json!({"idtopic": idtopic(&AgentId::parse(id)?)})),
        _ => Err(Error::Input(
            "give exactly one of --address and --id".into(),
        )),
    }
}

fn verify(a: &VerifyArgs, stdin: &[u8], ctx: &Ctx<'_>) -> Result<Vec<u8>> {
    let now = time_arg("now", &a.now, ctx.now)?;
    let hash = if a.kind == "envelope" {
        envelope::verify(stdin, now)?.into_parts().0.hash
    } else {
        let kind: DocKind = a.kind.parse()?;
        rdv_proto::doc::verify_doc(kind, &read_json(stdin)?, now)?
    };
    json_line(&json!({"ok": true, "hash": hash}))
}

fn seal(a: &SealArgs, stdin: &[u8], ctx: &mut Ctx<'_>) -> Result<Vec<u8>> {
    let key = seed(&a.seed)?;
    let to = AgentId::parse(&a.to)?;
    let created = created_arg(&a.created, ctx.now)?;
    let mut p = SealParams::new(&key, &to, a.seq, a.prev.as_deref(), created, ctx.rng);
    p.ttl = &a.ttl;
    if let (Some(e), Some(n)) = (&a.ephemeral_seed, &a.nonce) {
        p.ephemeral = rdv_proto::encoding::hex_array::<32>("ephemeral-seed", e)?;
        p.nonce = rdv_proto::encoding::hex_array::<12>("nonce", n)?;
    }
    json_line(&envelope::seal(&read_json(stdin)?, &p)?)
}

fn open(a: &OpenArgs, stdin: &[u8], ctx: &Ctx<'_>) -> Result<Vec<u8>> {
    let key = seed(&a.seed)?;
    let now = time_arg("now", &a.now, ctx.now)?;
    let o = envelope::open(stdin, &key, now)?;
    json_line(&json!({
        "from": o.header.from.as_str(),
        "seq": o.header.seq,
        "prev": o.header.prev,
        "created": o.header.created_raw,
        "payload": Value::Object(o.payload),
    }))
}

fn nostr_event(a: &NostrEventArgs, stdin: &[u8], ctx: &mut Ctx<'_>) -> Result<Vec<u8>> {
    let key = seed(&a.seed)?;
    let carrier = key.nostr_keys()?;
    let mut aux = [0u8; 32];
    ctx.rng.fill_bytes(&mut aux);
    let now_secs = u64::try_from(ctx.now.unix_timestamp())
        .map_err(|_| Error::Input("clock before 1970".into()))?;
    let doc = read_json(stdin)?;
    let ev = if a.card {
        let topic = a
            .topic
            .as_deref()
            .ok_or_else(|| Error::Input("--card needs --topic".into()))?;
        if canon::to_vec(&doc)?.len() > CARD_MAX_BYTES {
            return Err(Error::Input("card over 16 KiB".into()));
        }
        // Default: now, but never earlier than the card's created (§6.2).
        let created_at = match a.created_at {
            Some(t) => t,
            None => {
                let created = doc
                    .get("created")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let created = parse_time("card.created", created)?.unix_timestamp();
                now_secs.max(u64::try_from(created).unwrap_or(0))
            }
        };
        nostr_event::card_event(&doc, topic, &carrier, created_at, aux)?
    } else {
        envelope::verify_value(&doc, ctx.now)
            .map(|_| ())
            .or_else(|e| match e {
                // Wrapping an old envelope for a vector is fine; only its form matters.
                rdv_proto::Error::Expired | rdv_proto::Error::FromFuture(_) => Ok(()),
                e => Err(e),
            })?;
        nostr_event::envelope_event(&doc, &carrier, a.created_at.unwrap_or(now_secs), aux)?
    };
    json_line(&canon::parse(ev.as_json().as_bytes(), STDIN_MAX_BYTES)?)
}

fn nostr_verify(stdin: &[u8]) -> Result<Vec<u8>> {
    let (ev, carried) = nostr_event::parse_event(stdin)?;
    let tags: Vec<Vec<String>> = ev.tags.iter().map(|t| t.as_slice().to_vec()).collect();
    let what = match carried {
        nostr_event::Carried::Envelope { .. } => "envelope",
        nostr_event::Carried::Card { .. } => "card",
        nostr_event::Carried::Probe { .. } => "probe",
    };
    json_line(&json!({
        "ok": true,
        "id": ev.id.to_hex(),
        "pubkey": ev.pubkey.to_hex(),
        "kind": ev.kind.as_u16(),
        "tags": tags,
        "content": ev.content,
        "carries": what,
    }))
}
