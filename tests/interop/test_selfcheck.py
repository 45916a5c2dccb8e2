"""rdvpy checked against published vectors and against itself (needs no rdv binary)."""
import json
from pathlib import Path

import pytest

from rdvpy import bip340, canon, docs, envelope, ids, nostr
from rdvpy.keys import Keys, ed25519_pub_to_x25519, x25519_pub_from_secret
from rdvpy.timeutil import parse_time

import cases

VECTORS = json.loads((Path(__file__).parent / "vectors" / "bip340.json").read_text())["vectors"]


# ------------------------------------------------------------------ canonical JSON

def test_rfc8785_sorting_example():
    # RFC 8785 §3.2.3: members sorted by UTF-16 code units.
    src = ('{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew Letter Dalet With Dagesh",'
           '"1":"One","\\ud83d\\ude00":"Emoji: Grinning Face","\\u0080":"Control",'
           '"\\u00f6":"Latin Small Letter O With Diaeresis"}')
    keys = list(json.loads(canon.canonicalize(src)))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_utf16_not_code_point_order():
    assert canon.dumps({"\ue000": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ue000":1}'.encode()


def test_rfc8785_string_escapes():
    s = "".join(chr(c) for c in range(0x20)) + '"\\/\u007f\u2028\u2029é'
    want = ('"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f'
            '\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c'
            '\\u001d\\u001e\\u001f\\"\\\\/\u007f\u2028\u2029é"')
    assert canon.dumps(s) == want.encode()


@pytest.mark.parametrize("src,want", [
    ("-0", "0"), (" [ 1 , 2 ] ", "[1,2]"), ("9007199254740991", "9007199254740991"),
    ('"\\ud83d\\ude00"', '"😀"'), ('"\\u00E9"', '"é"'), ('"\\/"', '"/"'),
])
def test_canon_small(src, want):
    assert canon.canonicalize(src.encode()) == want.encode()


@pytest.mark.parametrize("src", [
    b"1.0", b"1e2", b"9007199254740992", b'{"a":1,"a":1}', b'{"a":1,"\\u0061":2}', b'"\\ud800"',
    b'"\\udc00"', b'"\xed\xa0\x80"', b"[1,]", b"01", b"", b'"\t"', b"[" * 33 + b"]" * 33,
])
def test_canon_refuses(src):
    with pytest.raises(canon.CanonError):
        canon.canonicalize(src)


def test_depth_32_allowed():
    assert canon.canonicalize(b"[" * 32 + b"]" * 32) == b"[" * 32 + b"]" * 32
    deep = b'{"a":' * 32 + b"1" + b"}" * 32
    assert canon.canonicalize(deep) == deep
    with pytest.raises(canon.CanonError):
        canon.canonicalize(b'{"a":' * 33 + b"1" + b"}" * 33)


# ------------------------------------------------------------------ keys and IDs

def test_rfc8032_vector1_public_key():
    k = Keys.from_hex(cases.SEEDS[0])
    assert k.ed_pub.hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    assert len(k.id) == 57 and k.id.startswith("rdv1:")
    fp = ids.fingerprint(k.id)
    assert fp == "rdv1:" + k.id[5:9] + "\u2026" + k.id[-4:]


@pytest.mark.parametrize("seed", cases.SEEDS)
def test_x25519_conversion_matches_secret(seed):
    # The Montgomery form of the Ed25519 public key is the X25519 public key of the clamped scalar.
    k = Keys.from_hex(seed)
    assert ed25519_pub_to_x25519(k.ed_pub) == x25519_pub_from_secret(k.x_secret) == k.x_pub


def test_id_roundtrip():
    k = Keys.from_hex(cases.ALICE)
    assert ids.parse_agent_id(k.id) == k.ed_pub


@pytest.mark.parametrize("addr,want", [
    ("  Alice@Example.COM\t", "alice@example.com"),
    ("\u00a0ÄLICE@ÉXAMPLE.com\u3000", "älice@éxample.com"),
    ("+972-54-000-0000", "+972540000000"),
    (" +1 (555) 123.4567/8 ", "+15551234567" + "8"),
    ("+1\u00a0555", "+1555"),
])
def test_canon_address(addr, want):
    assert ids.canon_address(addr) == want


@pytest.mark.parametrize("addr", ["alice", "", "+", "+1a", "+1234567890123456", "a@b@c", "@x", "x@",
                                  "a b@x", "a@x\u0001y", "+１２３", "+1_2"])
def test_canon_address_refuses(addr):
    with pytest.raises(ids.AddressError):
        ids.canon_address(addr)


# ------------------------------------------------------------------ signatures

def test_sign_verify_and_tamper():
    k = Keys.from_hex(cases.ALICE)
    card = docs.sign(cases.minimal_card(k.id), k.seed)
    h = docs.verify(card, k.ed_pub)
    assert len(h) == 64 and h == docs.doc_hash(card)
    bad = dict(card, created="2026-10-08T00:00:01Z")
    with pytest.raises(docs.SignatureError):
        docs.verify(bad, k.ed_pub)


# ------------------------------------------------------------------ envelope

def test_envelope_roundtrip_and_checks():
    a, b, c = (Keys.from_hex(s) for s in (cases.ALICE, cases.BOB, cases.CAROL))
    now = parse_time(cases.NOW)
    for p in cases.PAYLOADS:
        env = envelope.seal(a, b.id, 1, p, created=cases.CREATED)
        assert envelope.open_envelope(b, env, now)["payload"] == p
        with pytest.raises(envelope.EnvelopeError):
            envelope.open_envelope(c, env, now)
    env = envelope.seal(a, b.id, 1, {"type": "x"}, created=cases.CREATED)
    forged = envelope.seal(a, b.id, 1, {"type": "evil"}, created=cases.CREATED)
    swapped = dict(env, content=forged["content"])
    with pytest.raises(envelope.EnvelopeError):
        envelope.open_envelope(b, swapped, now)


def test_envelope_deterministic():
    a, b = Keys.from_hex(cases.ALICE), Keys.from_hex(cases.BOB)
    kw = dict(created=cases.CREATED, ephemeral_secret=bytes(range(32)), nonce=bytes(range(12)))
    assert envelope.seal(a, b.id, 1, {"type": "x"}, **kw) == envelope.seal(a, b.id, 1, {"type": "x"}, **kw)


# ------------------------------------------------------------------ BIP-340 and Nostr

@pytest.mark.parametrize("v", VECTORS, ids=lambda v: str(v["index"]))
def test_bip340_vectors(v):
    msg, pub, sig = bytes.fromhex(v["message"]), bytes.fromhex(v["public_key"]), bytes.fromhex(v["signature"])
    if v["secret_key"]:
        sk = int(v["secret_key"], 16)
        assert bip340.pubkey_gen(sk) == pub
        assert bip340.sign(msg, sk, bytes.fromhex(v["aux_rand"])) == sig
    assert bip340.verify(msg, pub, sig) is v["valid"]


def test_nostr_event_roundtrip():
    a, b = Keys.from_hex(cases.ALICE), Keys.from_hex(cases.BOB)
    env = envelope.seal(a, b.id, 1, {"type": "x"}, created=cases.CREATED)
    ev = nostr.envelope_event(a, env, created_at=1791460800)
    rep = nostr.verify_event(ev)
    assert rep["tags"] == [["p", b.ed_pub.hex()], ["d", docs.doc_hash(env)]]
    assert json.loads(rep["content"]) == env
    bad = dict(ev, content=ev["content"].replace('"seq":1', '"seq":2'))
    with pytest.raises(nostr.EventError):
        nostr.verify_event(bad)


def test_nip01_serialization_is_compact_json_for_plain_values():
    tags = [["p", "ab" * 32], ["d", "x"]]
    content = 'a "b" \\ c\nd é 😀'
    want = json.dumps([0, "cd" * 32, 1, 30417, tags, content], separators=(",", ":"), ensure_ascii=False)
    assert nostr.serialize_for_id("cd" * 32, 1, 30417, tags, content) == want.encode()


def test_greek_final_sigma_email():
    assert ids.canon_address("ΟΔΥΣΣΕΥΣ@EXAMPLE.GR") == "οδυσσευς@example.gr"
