"""`rdv proto seal` / `rdv proto open` against rdvpy.envelope (SPEC §6.4)."""
import json

import pytest

from rdvpy import canon, docs, envelope
from rdvpy.encoding import b64, b64decode
from rdvpy.keys import Keys
from rdvpy.timeutil import parse_time

import cases

A, B, C = (Keys.from_hex(s) for s in (cases.ALICE, cases.BOB, cases.CAROL))
PREV = "ab" * 32
EPH = bytes(range(1, 33)).hex()
NONCE = bytes(range(100, 112)).hex()


def seal_args(sender, to, seq, prev=None, created=cases.CREATED, ttl=None, eph=None, nonce=None):
    a = ["proto", "seal", "--seed", sender.seed.hex(), "--to", to.id, "--seq", str(seq)]
    if prev is not None:
        a += ["--prev", prev]
    if created is not None:
        a += ["--created", created]
    if ttl is not None:
        a += ["--ttl", ttl]
    if eph is not None:
        a += ["--ephemeral-seed", eph, "--nonce", nonce]
    return a


def open_args(recipient, now=cases.NOW):
    return ["proto", "open", "--seed", recipient.seed.hex(), "--now", now]


def py_open(recipient, env, now=cases.NOW):
    return envelope.open_envelope(recipient, env, parse_time(now))


def _payload_of_size(n: int) -> dict:
    base = canon.dumps({"type": "pad", "pad": ""})
    p = {"type": "pad", "pad": "x" * (n - len(base))}
    assert len(canon.dumps(p)) == n
    return p


# ------------------------------------------------------------------ both directions

@pytest.mark.parametrize("n", range(len(cases.PAYLOADS)))
@pytest.mark.parametrize("seq,prev", [(1, None), (2, PREV), (9007199254740991, "0" * 64)])
def test_python_seal_rdv_open(rdv, n, seq, prev):
    p = cases.PAYLOADS[n]
    env = envelope.seal(A, B.id, seq, p, prev=prev, created=cases.CREATED)
    got = rdv.ok_json(open_args(B), canon.dumps(env))
    assert got == {"from": A.id, "seq": seq, "prev": prev, "created": cases.CREATED, "payload": p}


@pytest.mark.parametrize("n", range(len(cases.PAYLOADS)))
@pytest.mark.parametrize("seq,prev", [(1, None), (3, PREV)])
def test_rdv_seal_python_open(rdv, n, seq, prev):
    p = cases.PAYLOADS[n]
    out = rdv.ok(seal_args(A, B, seq, prev), canon.dumps(p))
    env = json.loads(out)
    assert out == canon.dumps(env), "seal output is not canonical JSON"
    assert env["from"] == A.id and env["to"] == B.id and env["seq"] == seq and env["prev"] == prev
    assert env["ttl"] == "48h" and env["v"] == 1 and env["content"]["alg"] == "x25519+aes256gcm"
    assert py_open(B, env)["payload"] == p
    # and rdv opens its own envelope too
    assert rdv.ok_json(open_args(B), out)["payload"] == p


def test_rdv_seal_default_created_is_now(rdv):
    out = rdv.ok(seal_args(A, B, 1, created=None), b'{"type":"x"}')
    env = json.loads(out)
    assert py_open(B, env, now=env["created"])["payload"] == {"type": "x"}
    envelope.open_envelope(B, env)  # opens at the real current time


# ------------------------------------------------------------------ deterministic vectors

@pytest.mark.parametrize("n", range(len(cases.PAYLOADS)))
@pytest.mark.parametrize("seq,prev,ttl", [(1, None, None), (1, None, "7d"), (42, PREV, "30m"), (5, "f" * 64, "90s")])
@pytest.mark.parametrize("eph,nonce", [(EPH, NONCE), ("00" * 32, "00" * 12), ("ff" * 32, "ff" * 12)])
def test_deterministic_seal_byte_identical(rdv, n, seq, prev, ttl, eph, nonce):
    p = cases.PAYLOADS[n]
    got = rdv.ok(seal_args(A, B, seq, prev, ttl=ttl, eph=eph, nonce=nonce), json.dumps(p, indent=2).encode())
    want = canon.dumps(envelope.seal(A, B.id, seq, p, prev=prev, created=cases.CREATED, ttl=ttl or "48h",
                                     ephemeral_secret=bytes.fromhex(eph), nonce=bytes.fromhex(nonce)))
    assert got == want, f"deterministic envelope differs\n  rdv:   {got!r}\n  rdvpy: {want!r}"


# ------------------------------------------------------------------ forgery and tampering

def test_swapped_ciphertext_refused(rdv):
    """Keep a genuine signed header, put in a ciphertext of the attacker's own (encrypted to B)."""
    genuine = json.loads(rdv.ok(seal_args(A, B, 1), b'{"type":"rdv/ping"}'))
    header = {k: genuine[k] for k in envelope.HEADER_FIELDS}
    forged = dict(genuine, content=envelope.encrypt_content(header, canon.dumps({"type": "evil"})))
    # the forged content decrypts fine under the header, so only the signature stops it
    with pytest.raises(envelope.EnvelopeError, match="signature"):
        py_open(B, forged)
    rdv.refused(open_args(B), canon.dumps(forged))
    # the same attack on a Python-sealed envelope
    genuine = envelope.seal(A, B.id, 1, {"type": "rdv/ping"}, created=cases.CREATED)
    forged = dict(genuine, content=envelope.encrypt_content(header, canon.dumps({"type": "evil"})))
    rdv.refused(open_args(B), canon.dumps(forged))
    with pytest.raises(envelope.EnvelopeError):
        py_open(B, forged)


def _tamperings(env):
    c = env["content"]
    ct = bytearray(b64decode(c["ciphertext"]))
    ct[0] ^= 1
    yield "seq changed", dict(env, seq=2, prev=PREV)
    yield "created changed", dict(env, created="2026-10-08T12:00:01Z")
    yield "ttl changed", dict(env, ttl="47h")
    yield "to changed", dict(env, to=C.id)
    yield "from changed", dict(env, **{"from": C.id})
    yield "ciphertext bit flipped", dict(env, content=dict(c, ciphertext=b64(bytes(ct))))
    yield "nonce changed", dict(env, content=dict(c, nonce=b64(bytes(12))))
    yield "epk changed", dict(env, content=dict(c, epk=b64(B.x_pub)))
    yield "sig dropped", {k: v for k, v in env.items() if k != "sig"}
    yield "sig of the header only (rev 2)", dict(env, sig=docs.sign(
        {k: env[k] for k in envelope.HEADER_FIELDS}, A.seed)["sig"])


TAMPER_CASES = [name for name, _ in _tamperings(envelope.seal(A, B.id, 1, {"t": 1}, created=cases.CREATED))]


@pytest.mark.parametrize("case", TAMPER_CASES)
def test_tampered_envelope_refused(rdv, case):
    env = envelope.seal(A, B.id, 1, {"type": "x"}, created=cases.CREATED)
    bad = dict(_tamperings(env))[case]
    with pytest.raises(envelope.EnvelopeError):
        py_open(B, bad)
    rdv.refused(open_args(B), canon.dumps(bad))


def test_correctly_signed_but_undecryptable_refused(rdv):
    """The sender signs a ciphertext that does not decrypt under the header (wrong associated data)."""
    env = envelope.seal(A, B.id, 1, {"type": "x"}, created=cases.CREATED)
    header = {k: env[k] for k in envelope.HEADER_FIELDS}
    content = envelope.encrypt_content(dict(header, seq=7), canon.dumps({"type": "x"}))
    bad = docs.sign(dict(header, content=content), A.seed)
    with pytest.raises(envelope.EnvelopeError, match="decrypt"):
        py_open(B, bad)
    rdv.refused(open_args(B), canon.dumps(bad))


def test_non_object_payload_refused(rdv):
    for pt in (b"[1,2]", b'"x"', b"not json", b'{"a":1.5}'):
        header = {"v": 1, "from": A.id, "to": B.id, "seq": 1, "prev": None, "created": cases.CREATED, "ttl": "48h"}
        bad = docs.sign(dict(header, content=envelope.encrypt_content(header, pt)), A.seed)
        with pytest.raises(envelope.EnvelopeError):
            py_open(B, bad)
        rdv.refused(open_args(B), canon.dumps(bad))


@pytest.mark.parametrize("who", ["carol", "alice"])
def test_wrong_recipient_refused(rdv, who):
    env = envelope.seal(A, B.id, 1, {"type": "x"}, created=cases.CREATED)
    k = C if who == "carol" else A
    with pytest.raises(envelope.EnvelopeError):
        py_open(k, env)
    rdv.refused(open_args(k), canon.dumps(env))
    env2 = json.loads(rdv.ok(seal_args(A, B, 1), b'{"type":"x"}'))
    with pytest.raises(envelope.EnvelopeError):
        py_open(k, env2)


def test_shape_refused(rdv):
    def signed(**kw):
        header = {"v": 1, "from": A.id, "to": B.id, "seq": 1, "prev": None, "created": cases.CREATED, "ttl": "48h"}
        header.update(kw)
        return docs.sign(dict(header, content=envelope.encrypt_content(header, b'{"type":"x"}')), A.seed)
    for bad in (signed(seq=1, prev=PREV), signed(seq=2, prev=None), signed(seq=2, prev=PREV.upper()),
                signed(seq=0), signed(seq=-1), signed(v=2), signed(ttl="48"), signed(ttl="2w"),
                signed(created="2026-10-08 12:00:00"), signed(created="yesterday")):
        with pytest.raises(envelope.EnvelopeError):
            py_open(B, bad)
        rdv.refused(open_args(B), canon.dumps(bad))


# ------------------------------------------------------------------ size limit

def test_largest_payload_accepted(rdv):
    p = _payload_of_size(envelope.MAX_PLAINTEXT)
    env = envelope.seal(A, B.id, 1, p, created=cases.CREATED)
    assert rdv.ok_json(open_args(B), canon.dumps(env))["payload"] == p
    out = rdv.ok(seal_args(A, B, 1), canon.dumps(p))
    assert len(b64decode(json.loads(out)["content"]["ciphertext"])) == envelope.MAX_CIPHERTEXT
    assert py_open(B, json.loads(out))["payload"] == p


def test_sender_refuses_oversize_payload(rdv):
    p = _payload_of_size(envelope.MAX_PLAINTEXT + 1)
    with pytest.raises(envelope.EnvelopeError):
        envelope.seal(A, B.id, 1, p, created=cases.CREATED)
    rdv.refused(seal_args(A, B, 1), canon.dumps(p))


def test_oversize_ciphertext_refused(rdv):
    p = _payload_of_size(envelope.MAX_PLAINTEXT + 1)
    env = envelope.seal(A, B.id, 1, p, created=cases.CREATED, check=False)  # genuinely signed, decryptable
    assert len(b64decode(env["content"]["ciphertext"])) == envelope.MAX_CIPHERTEXT + 1
    with pytest.raises(envelope.EnvelopeError, match="size"):
        py_open(B, env)
    rdv.refused(open_args(B), canon.dumps(env))


def test_oversize_ciphertext_refused_before_signature(rdv):
    """Checked from the base64 length alone: even garbage of the wrong length is refused as such."""
    env = envelope.seal(A, B.id, 1, {"type": "x"}, created=cases.CREATED)
    bad = dict(env, content=dict(env["content"], ciphertext="A" * 43716))
    with pytest.raises(envelope.EnvelopeError, match="size"):
        py_open(B, bad)
    rdv.refused(open_args(B), canon.dumps(bad))


# ------------------------------------------------------------------ ttl, created and expiry

@pytest.mark.parametrize("ttl,ok", [("7d", True), ("168h", True), ("10080m", True), ("604800s", True),
                                    ("1s", True), ("48h", True),
                                    ("8d", False), ("169h", False), ("10081m", False), ("604801s", False),
                                    ("365d", False), ("048h", False), ("0s", False), ("00h", False)])
def test_ttl_limit(rdv, ttl, ok):
    now = "2026-10-08T12:00:00Z"
    env = envelope.seal(A, B.id, 1, {"type": "x"}, created=cases.CREATED, ttl=ttl, check=False)
    if ok:
        assert py_open(B, env, now)["payload"] == {"type": "x"}
        assert rdv.ok_json(open_args(B, now), canon.dumps(env))["payload"] == {"type": "x"}
    else:
        with pytest.raises(envelope.EnvelopeError, match="ttl"):
            py_open(B, env, now)
        rdv.refused(open_args(B, now), canon.dumps(env))


@pytest.mark.parametrize("now,ok", [
    ("2026-10-08T11:55:00Z", True),    # created exactly 5 minutes ahead of now
    ("2026-10-08T11:54:59Z", False),   # 5 minutes and 1 second ahead
    ("2026-10-08T11:00:00Z", False),
    ("2026-10-10T12:00:00Z", True),    # created + 48h exactly: not yet expired
    ("2026-10-10T12:00:01Z", False),   # expired
    ("2027-01-01T00:00:00Z", False),
])
def test_created_and_expiry(rdv, now, ok):
    env = envelope.seal(A, B.id, 1, {"type": "x"}, created=cases.CREATED)
    if ok:
        py_open(B, env, now)
        assert rdv.ok_json(open_args(B, now), canon.dumps(env))["payload"] == {"type": "x"}
    else:
        with pytest.raises(envelope.EnvelopeError):
            py_open(B, env, now)
        rdv.refused(open_args(B, now), canon.dumps(env))


# ------------------------------------------------------------------ hash and chaining

def test_verify_envelope_hash(rdv):
    env = envelope.seal(A, B.id, 1, {"type": "x"}, created=cases.CREATED)
    got = rdv.ok_json(["proto", "verify", "--kind", "envelope", "--now", cases.NOW], canon.dumps(env))
    assert got == {"ok": True, "hash": docs.doc_hash(env)}
    bad = dict(env, seq=2, prev=PREV)
    rdv.refused(["proto", "verify", "--kind", "envelope", "--now", cases.NOW], canon.dumps(bad))


def test_chain_across_implementations(rdv):
    first = rdv.ok(seal_args(A, B, 1), b'{"type":"one"}')
    h1 = docs.doc_hash(json.loads(first))
    assert rdv.ok_json(["proto", "verify", "--kind", "envelope", "--now", cases.NOW], first)["hash"] == h1
    second = envelope.seal(A, B.id, 2, {"type": "two"}, prev=h1, created="2026-10-08T12:00:01Z")
    got = rdv.ok_json(open_args(B), canon.dumps(second))
    assert got["seq"] == 2 and got["prev"] == h1 and got["payload"] == {"type": "two"}
    third = rdv.ok(seal_args(A, B, 3, prev=docs.doc_hash(second), created="2026-10-08T12:00:02Z"), b'{"type":"three"}')
    assert py_open(B, json.loads(third))["prev"] == docs.doc_hash(second)


@pytest.mark.parametrize("seq,prev,ttl", [
    ("0", None, None), ("2", None, None), ("1", PREV, None), ("2", PREV.upper(), None),
    ("2", "ab" * 31, None), ("1", None, "8d"), ("1", None, "169h"), ("1", None, "48"), ("1", None, "2w"),
])
def test_seal_refuses_bad_header_arguments(rdv, seq, prev, ttl):
    a = ["proto", "seal", "--seed", A.seed.hex(), "--to", B.id, "--seq", seq, "--created", cases.CREATED]
    if prev is not None:
        a += ["--prev", prev]
    if ttl is not None:
        a += ["--ttl", ttl]
    rdv.refused(a, b'{"type":"x"}')


@pytest.mark.parametrize("payload", [b"[1]", b'"x"', b"1", b"null", b'{"a":1.0}', b"{"])
def test_seal_refuses_non_object_payload(rdv, payload):
    rdv.refused(seal_args(A, B, 1), payload)



@pytest.mark.parametrize("created", ["2026-10-08T12:00:00+00:00", "2026-10-08t12:00:00z", "2026-10-08T14:00:00+02:00",
                                     "2026-10-08 12:00:00Z"])
def test_created_must_be_utc_z_form(rdv, created):
    """Pinned: a signed time has one spelling per instant (RFC 3339, UTC, upper-case T and Z)."""
    env = envelope.seal(A, B.id, 1, {"type": "x"}, created=cases.CREATED, check=False)
    env = dict(env, created=created)
    del env["sig"]
    env = docs.sign(env, A.seed)
    with pytest.raises(Exception):
        py_open(B, env, "2026-10-08T12:01:00Z")
    rdv.refused(open_args(B, "2026-10-08T12:01:00Z"), canon.dumps(env))
