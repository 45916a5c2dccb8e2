"""`rdv proto sign` / `rdv proto verify` against rdvpy.docs."""
import json

import pytest

from rdvpy import canon, docs
from rdvpy.encoding import b64, b64decode
from rdvpy.keys import Keys

import cases

DOCS = [
    {"v": 1, "type": "test"},
    {"v": 1, "text": "héllo \u2028 😀 \"q\" \\ \n\t\u0001\u007f", "n": [9007199254740991, -9007199254740991, 0],
     "keys": {"\ue000": 1, "\U0001f600": 2, "": None, "a\u0000": True}},
    {"nested": [[[[{"a": [[], {}]}]]]], "empty": "", "b": False},
]


def _card(seed):
    k = Keys.from_hex(seed)
    return k, cases.minimal_card(k.id)


@pytest.mark.parametrize("seed", cases.SEEDS[:4] + [cases.ALICE])
@pytest.mark.parametrize("n", range(len(DOCS)))
def test_sign_matches(rdv, seed, n):
    doc = DOCS[n]
    # feed a non-canonical rendering: pretty-printed, members in reverse order
    src = json.dumps(dict(reversed(list(doc.items()))), indent=2, ensure_ascii=True).encode()
    got = rdv.ok(["proto", "sign", "--seed", seed], src)
    want = canon.dumps(docs.sign(doc, bytes.fromhex(seed)))
    assert got == want, f"sign differs\n  rdv:   {got!r}\n  rdvpy: {want!r}"


@pytest.mark.parametrize("seed", [cases.ALICE, cases.BOB, cases.SEEDS[0]])
def test_card_signed_by_python_verifies_in_rdv(rdv, seed):
    k, card = _card(seed)
    signed = docs.sign(card, k.seed)
    got = rdv.ok_json(["proto", "verify", "--kind", "card"], canon.dumps(signed))
    assert got == {"ok": True, "hash": docs.doc_hash(signed)}
    # the same card, pretty-printed: the hash is over the canonical form
    got2 = rdv.ok_json(["proto", "verify", "--kind", "card"], json.dumps(signed, indent=1).encode())
    assert got2 == got


@pytest.mark.parametrize("seed", [cases.ALICE, cases.CAROL])
def test_card_signed_by_rdv_verifies_in_python(rdv, seed):
    k, card = _card(seed)
    signed = json.loads(rdv.ok(["proto", "sign", "--seed", seed], canon.dumps(card)))
    assert docs.verify(signed, k.ed_pub) == docs.doc_hash(signed)
    got = rdv.ok_json(["proto", "verify", "--kind", "card"], canon.dumps(signed))
    assert got["hash"] == docs.doc_hash(signed)


def _tampered(signed):
    k_other = Keys.from_hex(cases.CAROL)
    sig = bytearray(b64decode(signed["sig"]))
    sig[10] ^= 1
    yield "field changed", dict(signed, created="2026-10-08T00:00:01Z")
    yield "member added", dict(signed, extra=1)
    yield "capability removed", dict(signed, capabilities=["rdv/v1"])
    yield "nested field changed", dict(signed, policy={"inbound": "allow", "public": False})
    yield "sig bit flipped", dict(signed, sig=b64(bytes(sig)))
    yield "sig missing", {k: v for k, v in signed.items() if k != "sig"}
    yield "sig not base64", dict(signed, sig="!" * 88)
    yield "sig unpadded", dict(signed, sig=signed["sig"].rstrip("="))
    yield "sig truncated", dict(signed, sig=b64(b64decode(signed["sig"])[:63]))
    yield "sig by another key", dict(signed, sig=docs.sign(
        {k: v for k, v in signed.items() if k != "sig"}, k_other.seed)["sig"])
    yield "signed without the rdv1/sig: prefix", dict(signed, sig=b64(
        __import__("rdvpy").keys.ed25519_sign(bytes.fromhex(cases.ALICE),
                                              canon.dumps({k: v for k, v in signed.items() if k != "sig"}))))


@pytest.mark.parametrize("case", [c for c, _ in _tampered(docs.sign(cases.minimal_card(
    Keys.from_hex(cases.ALICE).id), bytes.fromhex(cases.ALICE)))])
def test_tampered_card_refused(rdv, case):
    k, card = _card(cases.ALICE)
    signed = docs.sign(card, k.seed)
    bad = dict(_tampered(signed))[case]
    with pytest.raises(docs.SignatureError):
        docs.verify(bad, k.ed_pub)
    rdv.refused(["proto", "verify", "--kind", "card"], canon.dumps(bad))


def test_card_claiming_another_id_refused(rdv):
    k, _ = _card(cases.ALICE)
    other = Keys.from_hex(cases.BOB)
    card = cases.minimal_card(other.id)      # says it is Bob's, signed by Alice
    rdv.refused(["proto", "verify", "--kind", "card"], canon.dumps(docs.sign(card, k.seed)))


def test_verify_refuses_invalid_json(rdv):
    rdv.refused(["proto", "verify", "--kind", "card"], b'{"v":1.0}')
    rdv.refused(["proto", "verify", "--kind", "card"], b"not json")


@pytest.mark.parametrize("src", [b"[1,2]", b'"doc"', b"1", b"null", b'{"a":1.5}', b'{"a":1,"a":2}', b"{"])
def test_sign_refuses_non_objects_and_bad_json(rdv, src):
    rdv.refused(["proto", "sign", "--seed", cases.ALICE], src)
