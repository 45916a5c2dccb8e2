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


_B32 = frozenset("abcdefghijklmnopqrstuvwxyz234567")


def _is_topic(t) -> bool:
    return isinstance(t, str) and len(t) == 26 and all(c in _B32 for c in t)


def check_carrier(ev: dict) -> str:
    """The Rendezvous rules of §6.2 on a verified event; return what it carries.

    kind 30417; exactly one p or t tag and one d tag. With p, the content is an envelope,
    p is its recipient's Ed25519 key in hex and d its hash (§4.6). With t (a dtopic or
    idtopic), d is "rdv1/card:" ‖ t (a public-pointer card) or the hex SHA-256 of the content.
    """
    from . import envelope  # local import: envelope does not need nostr

    if ev["kind"] != KIND:
        raise EventError("kind must be 30417")
    names = [t[0] for t in ev["tags"] if t]
    p = [t for t in ev["tags"] if t and t[0] == "p"]
    t = [t for t in ev["tags"] if t and t[0] == "t"]
    d = [t for t in ev["tags"] if t and t[0] == "d"]
    if len(p) + len(t) != 1 or len(d) != 1 or "" in names:
        raise EventError("exactly one of the p and t tags, and one d tag, expected")
    if any(len(x) < 2 for x in p + t + d):
        raise EventError("tag without a value")
    dval = d[0][1]
    try:
        doc = canon.parse(ev["content"].encode("utf-8"))
    except canon.CanonError as e:
        raise EventError(f"content: {e}") from None
    if p:
        try:
            envelope.check_shape(doc)
        except envelope.EnvelopeError as e:
            raise EventError(f"content is not an envelope: {e}") from None
        if p[0][1] != parse_agent_id(doc["to"]).hex():
            raise EventError("p tag is not the envelope's recipient")
        if dval != docs.doc_hash(doc):
            raise EventError("d tag is not the envelope hash")
        return "envelope"
    topic = t[0][1]
    if not _is_topic(topic):
        raise EventError("t tag is not a topic")
    if dval == "rdv1/card:" + topic:
        return "card"
    if dval == hashlib.sha256(ev["content"].encode("utf-8")).hexdigest():
        return "probe"
    raise EventError("d tag is neither a card pointer nor the content hash")
