"""Nostr carrier events (SPEC §6.2; NIP-01 ids, BIP-340 signatures)."""
import hashlib
import os
import time

from . import bip340, canon, docs
from .ids import parse_agent_id
from .keys import Keys

KIND = 30417

_NIP01_ESCAPES = {"\n": "\\n", '"': '\\"', "\\": "\\\\", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _nip01_str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _NIP01_ESCAPES:
            out.append(_NIP01_ESCAPES[ch])
        elif ord(ch) < 0x20:
            # NIP-01 names only the seven escapes above; other C0 controls are written as
            # \u00xx like JSON.stringify and serde_json do (canonical content never has any).
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _nip01(v) -> str:
    if isinstance(v, bool) or v is None:
        raise ValueError("unexpected value in a Nostr event")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _nip01_str(v)
    if isinstance(v, list):
        return "[" + ",".join(_nip01(x) for x in v) + "]"
    raise ValueError("unexpected value in a Nostr event")


def serialize_for_id(pubkey_hex: str, created_at: int, kind: int, tags: list, content: str) -> bytes:
    return _nip01([0, pubkey_hex, created_at, kind, tags, content]).encode("utf-8")


def event_id(pubkey_hex: str, created_at: int, kind: int, tags: list, content: str) -> str:
    return hashlib.sha256(serialize_for_id(pubkey_hex, created_at, kind, tags, content)).hexdigest()


def build_event(keys: Keys, tags: list, content: str, created_at: int = None, kind: int = KIND) -> dict:
    created_at = int(time.time()) if created_at is None else created_at
    pub = keys.nostr_pub.hex()
    eid = event_id(pub, created_at, kind, tags, content)
    sig = bip340.sign(bytes.fromhex(eid), keys.nostr_sk, os.urandom(32))
    return {"id": eid, "pubkey": pub, "created_at": created_at, "kind": kind, "tags": tags,
            "content": content, "sig": sig.hex()}


def envelope_tags(env: dict) -> list:
    return [["p", parse_agent_id(env["to"]).hex()], ["d", docs.doc_hash(env)]]


def card_tags(topic: str) -> list:
    return [["t", topic], ["d", "rdv1/card:" + topic]]


def envelope_event(keys: Keys, env: dict, created_at: int = None) -> dict:
    return build_event(keys, envelope_tags(env), canon.dumps(env).decode("utf-8"), created_at)


def card_event(keys: Keys, card: dict, topic: str, created_at: int = None) -> dict:
    return build_event(keys, card_tags(topic), canon.dumps(card).decode("utf-8"), created_at)


class EventError(ValueError):
    pass


def _is_hex(s, n) -> bool:
    return isinstance(s, str) and len(s) == n and all(c in "0123456789abcdef" for c in s)


def verify_event(ev) -> dict:
    """Check the NIP-01 id and the BIP-340 signature; return the nostr-verify report."""
    if not isinstance(ev, dict):
        raise EventError("event must be an object")
    for f in ("id", "pubkey", "created_at", "kind", "tags", "content", "sig"):
        if f not in ev:
            raise EventError(f"missing {f}")
    if not (_is_hex(ev["id"], 64) and _is_hex(ev["pubkey"], 64) and _is_hex(ev["sig"], 128)):
        raise EventError("id, pubkey and sig must be lowercase hex")
    if not isinstance(ev["created_at"], int) or isinstance(ev["created_at"], bool) or ev["created_at"] < 0:
        raise EventError("bad created_at")
    if not isinstance(ev["kind"], int) or isinstance(ev["kind"], bool) or ev["kind"] < 0:
        raise EventError("bad kind")
    tags = ev["tags"]
    if not isinstance(tags, list) or not all(isinstance(t, list) and all(isinstance(x, str) for x in t) for t in tags):
        raise EventError("tags must be arrays of strings")
    if not isinstance(ev["content"], str):
        raise EventError("content must be a string")
    eid = event_id(ev["pubkey"], ev["created_at"], ev["kind"], tags, ev["content"])
    if eid != ev["id"]:
        raise EventError("id does not match the event")
    if not bip340.verify(bytes.fromhex(eid), bytes.fromhex(ev["pubkey"]), bytes.fromhex(ev["sig"])):
        raise EventError("bad BIP-340 signature")
    return {"ok": True, "id": eid, "pubkey": ev["pubkey"], "kind": ev["kind"], "tags": tags, "content": ev["content"]}
