"""`rdv proto nostr-event` / `rdv proto nostr-verify` against rdvpy.nostr (SPEC §6.2)."""
import json

import pytest

from rdvpy import bip340, canon, docs, envelope, ids, nostr
from rdvpy.keys import Keys

import cases

A, B = Keys.from_hex(cases.ALICE), Keys.from_hex(cases.BOB)
T0 = 1791460800  # 2026-10-08T12:00:00Z


def _env():
    return envelope.seal(A, B.id, 1, {"type": "a2a/message", "text": "hé \"x\" \\ \n 😀"}, created=cases.CREATED)


def _check_event_shape(ev):
    assert set(ev) == {"id", "pubkey", "created_at", "kind", "tags", "content", "sig"}
    assert ev["kind"] == 30417


@pytest.mark.parametrize("seed", [cases.ALICE, cases.SEEDS[0], cases.SEEDS[3]])
def test_keygen_nostr_pub_matches(rdv, seed):
    got = rdv.ok_json(["proto", "keygen", "--seed", seed])["nostr_pub"]
    k = Keys.from_hex(seed)
    assert got == k.nostr_pub.hex()
    assert bip340.lift_x(int(got, 16)) is not None


def test_envelope_event_from_rdv_verifies_in_python(rdv):
    env = _env()
    ev = rdv.ok_json(["proto", "nostr-event", "--seed", A.seed.hex(), "--created-at", str(T0)], canon.dumps(env))
    _check_event_shape(ev)
    assert ev["pubkey"] == A.nostr_pub.hex()
    assert ev["created_at"] == T0
    assert ev["tags"] == [["p", B.ed_pub.hex()], ["d", docs.doc_hash(env)]]
    assert ev["content"] == canon.dumps(env).decode("utf-8")
    assert ev["id"] == nostr.event_id(A.nostr_pub.hex(), T0, 30417, ev["tags"], ev["content"])
    assert nostr.verify_event(ev)["ok"] is True
    # the id is deterministic: the same event built in Python has the same id (sigs differ: aux rand)
    mine = nostr.envelope_event(A, env, created_at=T0)
    assert mine["id"] == ev["id"]


def test_envelope_event_sealed_by_rdv(rdv):
    out = rdv.ok(["proto", "seal", "--seed", A.seed.hex(), "--to", B.id, "--seq", "1", "--created", cases.CREATED],
                 b'{"type":"rdv/ping"}')
    ev = rdv.ok_json(["proto", "nostr-event", "--seed", A.seed.hex(), "--created-at", str(T0)], out)
    assert ev["tags"] == [["p", B.ed_pub.hex()], ["d", docs.doc_hash(json.loads(out))]]
    assert ev["content"].encode("utf-8") == out
    nostr.verify_event(ev)


def test_event_default_created_at(rdv):
    import time
    t = int(time.time())
    ev = rdv.ok_json(["proto", "nostr-event", "--seed", A.seed.hex()], canon.dumps(_env()))
    assert abs(ev["created_at"] - t) < 120
    nostr.verify_event(ev)


@pytest.mark.parametrize("topic_of", ["email", "phone", "id"])
def test_card_event_from_rdv_verifies_in_python(rdv, topic_of):
    topic = {"email": ids.dtopic("alice@example.com"), "phone": ids.dtopic("+972 54 000 0000"),
             "id": ids.idtopic(A.id)}[topic_of]
    card = docs.sign(cases.minimal_card(A.id), A.seed)
    ev = rdv.ok_json(["proto", "nostr-event", "--seed", A.seed.hex(), "--card", "--topic", topic,
                      "--created-at", str(T0)], canon.dumps(card))
    _check_event_shape(ev)
    assert ev["pubkey"] == A.nostr_pub.hex()
    assert ev["tags"] == [["t", topic], ["d", "rdv1/card:" + topic]]
    assert ev["content"] == canon.dumps(card).decode("utf-8")
    assert ev["id"] == nostr.card_event(A, card, topic, created_at=T0)["id"]
    nostr.verify_event(ev)


REPORT_FIELDS = ("ok", "id", "pubkey", "kind", "tags", "content", "carries")


def _listed(report: dict) -> dict:
    missing = [f for f in REPORT_FIELDS if f not in report]
    assert not missing, f"nostr-verify report lacks {missing}: {report}"
    return {f: report[f] for f in REPORT_FIELDS}


def test_python_envelope_event_accepted_by_rdv(rdv):
    env = _env()
    ev = nostr.envelope_event(A, env, created_at=T0)
    got = rdv.ok_json(["proto", "nostr-verify"], json.dumps(ev).encode())
    assert _listed(got) == {"ok": True, "id": ev["id"], "pubkey": ev["pubkey"], "kind": 30417, "tags": ev["tags"],
                            "content": ev["content"], "carries": "envelope"}


def test_nostr_verify_report_members(rdv):
    """The CLI table lists exactly ok, id, pubkey, kind, tags and content."""
    ev = nostr.envelope_event(A, _env(), created_at=T0)
    got = rdv.ok_json(["proto", "nostr-verify"], json.dumps(ev).encode())
    assert set(got) == set(REPORT_FIELDS), f"unexpected members {sorted(set(got) - set(REPORT_FIELDS))}"


def test_python_card_event_accepted_by_rdv(rdv):
    card = docs.sign(cases.minimal_card(A.id), A.seed)
    topic = ids.dtopic("Alice@Example.com")
    ev = nostr.card_event(A, card, topic, created_at=T0)
    got = rdv.ok_json(["proto", "nostr-verify"], json.dumps(ev, ensure_ascii=False).encode())
    assert _listed(got) == {"ok": True, "id": ev["id"], "pubkey": ev["pubkey"], "kind": 30417, "tags": ev["tags"],
                            "content": ev["content"], "carries": "card"}


NASTY_NAMES = [
    "plain",
    'line\nbreak "quoted" back\\slash carriage\rreturn tab\tbackspace\bformfeed\f \u0001',
    "unicode é ж 😀 \u2028 \u2029 \u007f \ufeff",
    '{"a":"\\u0001","b":"\\n"}',
]


@pytest.mark.parametrize("name", NASTY_NAMES)
@pytest.mark.parametrize("ascii_json", [True, False])
def test_nip01_escaping_agrees(rdv, name, ascii_json):
    """Card events whose content needs NIP-01 escaping (quotes, backslashes, non-ASCII): same id both ways."""
    card = cases.minimal_card(A.id)
    card["owner"] = {"name": name, "contact": ["mailto:a@example.com"]}
    card = docs.sign(card, A.seed)
    topic = ids.dtopic("a@example.com")
    ev = nostr.card_event(A, card, topic, created_at=T0)
    got = rdv.ok_json(["proto", "nostr-verify"], json.dumps(ev, ensure_ascii=ascii_json).encode())
    assert got["id"] == ev["id"] and got["content"] == ev["content"] and got["tags"] == ev["tags"]
    mine = rdv.ok_json(["proto", "nostr-event", "--seed", A.seed.hex(), "--card", "--topic", topic,
                        "--created-at", str(T0)], canon.dumps(card))
    assert mine["id"] == ev["id"] and mine["content"] == ev["content"]
    nostr.verify_event(mine)


def _carrier_cases():
    """Events with a valid NIP-01 id and BIP-340 sig, checked against the §6.2 carrier rules."""
    env = _env()
    content = canon.dumps(env).decode()
    h = docs.doc_hash(env)
    p = B.ed_pub.hex()
    card = docs.sign(cases.minimal_card(A.id), A.seed)
    cc = canon.dumps(card).decode()
    topic = ids.dtopic("a@example.com")
    import hashlib
    yield "envelope", True, [["p", p], ["d", h]], content, 30417
    yield "card pointer", True, [["t", topic], ["d", "rdv1/card:" + topic]], cc, 30417
    yield "card on idtopic", True, [["t", ids.idtopic(A.id)], ["d", "rdv1/card:" + ids.idtopic(A.id)]], cc, 30417
    yield "topic, d = sha256(content)", True, [["t", topic], ["d", hashlib.sha256(cc.encode()).hexdigest()]], cc, 30417
    yield "envelope, wrong kind", False, [["p", p], ["d", h]], content, 1
    yield "envelope, wrong d", False, [["p", p], ["d", "ab" * 32]], content, 30417
    yield "envelope, no d", False, [["p", p]], content, 30417
    yield "envelope, p of another key", False, [["p", A.ed_pub.hex()], ["d", h]], content, 30417
    yield "envelope, p and t", False, [["p", p], ["t", topic], ["d", h]], content, 30417
    yield "envelope, content not JSON", False, [["p", p], ["d", h]], "hello", 30417
    yield "card, d of another topic", False, [["t", topic], ["d", "rdv1/card:" + "a" * 26]], cc, 30417
    yield "card, t not a topic", False, [["t", "abc"], ["d", "rdv1/card:abc"]], cc, 30417
    yield "no tags", False, [], cc, 30417


CARRIER_CASES = [c[0] for c in _carrier_cases()]


@pytest.mark.parametrize("case", CARRIER_CASES)
def test_carrier_rules_agree(rdv, case):
    _, ok, tags, content, kind = next(c for c in _carrier_cases() if c[0] == case)
    ev = nostr.build_event(A, tags, content, created_at=T0, kind=kind)
    nostr.verify_event(ev)  # NIP-01 and BIP-340 hold in every case
    if ok:
        nostr.check_carrier(ev)
        assert _listed(rdv.ok_json(["proto", "nostr-verify"], json.dumps(ev).encode()))["id"] == ev["id"]
    else:
        with pytest.raises(nostr.EventError):
            nostr.check_carrier(ev)
        rdv.refused(["proto", "nostr-verify"], json.dumps(ev).encode())


@pytest.mark.parametrize("seed", cases.SEEDS[:6])
def test_events_from_many_keys(rdv, seed):
    k = Keys.from_hex(seed)
    card = docs.sign(cases.minimal_card(k.id), k.seed)
    topic = ids.idtopic(k.id)
    ev = rdv.ok_json(["proto", "nostr-event", "--seed", seed, "--card", "--topic", topic,
                      "--created-at", str(T0 + 1)], canon.dumps(card))
    assert ev["pubkey"] == k.nostr_pub.hex()
    nostr.verify_event(ev)
    mine = nostr.card_event(k, card, topic, created_at=T0 + 1)
    assert mine["id"] == ev["id"]
    assert _listed(rdv.ok_json(["proto", "nostr-verify"], json.dumps(mine).encode()))["id"] == mine["id"]


def _bad_events(ev):
    sig = bytearray(bytes.fromhex(ev["sig"]))
    sig[40] ^= 1
    other = Keys.from_hex(cases.CAROL)
    yield "content changed", dict(ev, content=ev["content"] + " ")
    yield "tags changed", dict(ev, tags=[["p", "00" * 32], ev["tags"][1]])
    yield "created_at changed", dict(ev, created_at=ev["created_at"] + 1)
    yield "kind changed", dict(ev, kind=1)
    yield "sig bit flipped", dict(ev, sig=bytes(sig).hex())
    yield "pubkey of another key", dict(ev, pubkey=other.nostr_pub.hex())
    yield "id recomputed, sig kept", dict(ev, content="x", id=nostr.event_id(ev["pubkey"], ev["created_at"],
                                                                                ev["kind"], ev["tags"], "x"))
    yield "sig zero", dict(ev, sig="00" * 64)
    yield "id missing", {k: v for k, v in ev.items() if k != "id"}
    yield "sig missing", {k: v for k, v in ev.items() if k != "sig"}


BAD_CASES = [name for name, _ in _bad_events(nostr.envelope_event(A, _env(), created_at=T0))]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_event_refused(rdv, case):
    ev = nostr.envelope_event(A, _env(), created_at=T0)
    bad = dict(_bad_events(ev))[case]
    with pytest.raises(nostr.EventError):
        nostr.verify_event(bad)
    rdv.refused(["proto", "nostr-verify"], json.dumps(bad).encode())


def test_rdv_event_tampered_refused(rdv):
    ev = rdv.ok_json(["proto", "nostr-event", "--seed", A.seed.hex(), "--created-at", str(T0)], canon.dumps(_env()))
    for _, bad in _bad_events(ev):
        rdv.refused(["proto", "nostr-verify"], json.dumps(bad).encode())
