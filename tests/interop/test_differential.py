"""Randomized differential tests (fixed RNG seeds, so every run is the same):
rdv and rdvpy must agree on acceptance and, where accepted, byte for byte."""
import random

import pytest

from rdvpy import canon, ids

STR_CHARS = (["a", "b", "Z", "0", " ", '"', "\\", "/", "\u007f", "\u0080", "é", "ж", "\u2028", "\u2029", "\ufeff",
              "\ue000", "\uffff", "\ufb33", "\U0001f600", "\U00010000", "\U0010ffff"] + [chr(c) for c in range(0x20)])


def _rand_str(rng, n=6):
    return "".join(rng.choice(STR_CHARS) for _ in range(rng.randint(0, n)))


def _rand_value(rng, depth):
    r = rng.random()
    if depth < 32 and r < 0.25:
        return {_rand_str(rng, 3): _rand_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}
    if depth < 32 and r < 0.45:
        return [_rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if r < 0.65:
        return _rand_str(rng)
    if r < 0.85:
        return rng.choice([0, 1, -1, 2**53 - 1, -(2**53 - 1), rng.randint(-(2**53 - 1), 2**53 - 1)])
    return rng.choice([True, False, None])


def _enc_str(rng, s):
    """A JSON string literal with a random choice of escapes."""
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch in '"\\' or c < 0x20:
            out.append(rng.choice(["\\u%04x" % c, "\\u%04X" % c]) if c < 0x20 or rng.random() < 0.5
                       else "\\" + ch)
        elif rng.random() < 0.3:
            if c > 0xFFFF:
                v = c - 0x10000
                out.append("\\u%04x\\u%04x" % (0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)))
            else:
                out.append("\\u%04x" % c)
        elif ch == "/" and rng.random() < 0.5:
            out.append("\\/")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _ws(rng):
    return "".join(rng.choice(" \t\r\n") for _ in range(rng.choice([0, 0, 0, 1, 2])))


def _enc(rng, v):
    """Non-canonical JSON text for v: random member order, whitespace and escapes."""
    if isinstance(v, dict):
        items = list(v.items())
        rng.shuffle(items)
        inner = ",".join(_ws(rng) + _enc_str(rng, k) + _ws(rng) + ":" + _ws(rng) + _enc(rng, x) + _ws(rng)
                         for k, x in items)
        return "{" + inner + _ws(rng) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_ws(rng) + _enc(rng, x) + _ws(rng) for x in v) + _ws(rng) + "]"
    if isinstance(v, str):
        return _enc_str(rng, v)
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    return "-0" if v == 0 and rng.random() < 0.2 else str(v)


MUTATIONS = ["1.0", "1e1", "-", "\\ud800", "\\udfff", ",", ":", "}", "]", "{", "[", '"', "\\", "\x01", "\t",
             "9007199254740992", "\u00a0", "x"]


def _mutate(rng, text):
    i = rng.randint(0, len(text))
    op = rng.random()
    if op < 0.4:
        return text[:i] + rng.choice(MUTATIONS) + text[i:]
    if op < 0.7 and text:
        return text[:i] + text[i + 1:]
    if op < 0.85:
        # duplicate the first member of the outermost object, if there is one
        if text.startswith("{") and len(text) > 2:
            return "{" + text[1:].split(",")[0].rstrip("}") + "," + text[1:]
        return text + text
    return text[:i] + "[" * 33 + "]" * 33 + text[i:]


@pytest.mark.parametrize("block", range(8))
def test_random_documents_canonicalize_identically(rdv, block):
    rng = random.Random(1000 + block)
    for _ in range(40):
        v = {"root": _rand_value(rng, 1)} if rng.random() < 0.7 else _rand_value(rng, 0)
        src = _enc(rng, v).encode("utf-8")
        want = canon.canonicalize(src)
        assert want == canon.dumps(v)
        r = rdv.run(["proto", "canon"], src)
        assert r.rc == 0 and r.stdout == want, f"canon disagrees\n  rdvpy: {want!r}\n" + r.describe()


@pytest.mark.parametrize("block", range(8))
def test_mutated_documents_agree(rdv, block):
    rng = random.Random(2000 + block)
    for _ in range(40):
        src = _mutate(rng, _enc(rng, {"k": _rand_value(rng, 1), "\U0001f600": [1, "x"]})).encode("utf-8")
        try:
            want = canon.canonicalize(src)
        except canon.CanonError:
            want = None
        r = rdv.run(["proto", "canon"], src)
        if want is None:
            assert r.rc == 1 and r.stdout == b"", "rdvpy refuses, rdv accepts:\n" + r.describe()
        else:
            assert r.rc == 0 and r.stdout == want, f"rdvpy accepts ({want!r}), rdv differs:\n" + r.describe()


ADDR_CHARS = (list("aZé@+.-()/ 09_") + ["\t", "\n", "\u00a0", "\u2003", "\u3000", "\u0085", "\u200b", "\x1c", "\x01",
                                       "\u0130", "\u03a3", "Ж", "\uff11", "\u0661"])


@pytest.mark.parametrize("block", range(6))
def test_random_addresses_agree(rdv, block):
    rng = random.Random(3000 + block)
    for _ in range(40):
        start = rng.choice(["", "+", " +", "a@", "A@b", "\u00a0+"])
        addr = start + "".join(rng.choice(ADDR_CHARS) for _ in range(rng.randint(0, 8)))
        if "\x00" in addr:
            continue
        try:
            want = {"canon": ids.canon_address(addr), "dtopic": ids.dtopic(addr)}
        except ids.AddressError:
            want = None
        r = rdv.run(["proto", "topic", "--address", addr])
        if want is None:
            assert r.rc == 1 and r.stdout == b"", f"rdvpy refuses {addr!r}, rdv accepts:\n" + r.describe()
        else:
            import json
            assert r.rc == 0 and json.loads(r.stdout) == want, f"rdvpy: {want}\n" + r.describe()


WS_CHARS = [" ", "\t", "\n", "\r", "\u000b", "\u000c", "\u00a0", "\u1680", "\u2000", "\u200a", "\u2028", "\u202f",
            "\u205f", "\u3000", "\u0085"]
LETTERS = list("abcXYZ") + ["É", "Ä", "Σ", "ς", "İ", "ẞ", "Ж", "Ǆ", "ǅ", "Ω", "K", "Å", "ﬀ", "Ⅻ", "Ⓐ"]


def _structured_address(rng):
    pad = lambda: "".join(rng.choice(WS_CHARS) for _ in range(rng.choice([0, 0, 1, 2])))  # noqa: E731
    if rng.random() < 0.5:
        body = "+"
        for _ in range(rng.randint(1, 17)):
            body += rng.choice(["", "", "", " ", "-", ".", "(", ")", "/", rng.choice(WS_CHARS)]) + rng.choice("0123456789")
        return pad() + body + pad()
    word = lambda: "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 6)))  # noqa: E731
    return pad() + word() + "@" + word() + "." + word() + pad()


@pytest.mark.parametrize("block", range(6))
def test_structured_addresses_agree(rdv, block):
    import json
    rng = random.Random(4000 + block)
    for _ in range(40):
        addr = _structured_address(rng)
        try:
            want = {"canon": ids.canon_address(addr), "dtopic": ids.dtopic(addr)}
        except ids.AddressError:
            want = None
        r = rdv.run(["proto", "topic", "--address", addr])
        if want is None:
            assert r.rc == 1 and r.stdout == b"", f"rdvpy refuses {addr!r}, rdv accepts:\n" + r.describe()
        else:
            assert r.rc == 0 and json.loads(r.stdout) == want, f"rdvpy: {want}\n" + r.describe()


@pytest.mark.parametrize("block", range(3))
def test_random_documents_sign_and_seal_identically(rdv, block):
    from rdvpy import docs, envelope
    from rdvpy.keys import Keys
    import cases
    rng = random.Random(5000 + block)
    for _ in range(10):
        sender, to = (Keys.from_hex(s) for s in rng.sample(cases.SEEDS, 2))
        doc = {k: v for k, v in {"type": _rand_str(rng), "v": 1, "body": _rand_value(rng, 1)}.items()}
        src = _enc(rng, doc).encode("utf-8")
        assert rdv.ok(["proto", "sign", "--seed", sender.seed.hex()], src) == canon.dumps(docs.sign(doc, sender.seed))
        eph, nonce = rng.randbytes(32), rng.randbytes(12)
        seq = rng.choice([1, 2, 77, 2**53 - 1])
        prev = None if seq == 1 else rng.randbytes(32).hex()
        ttl = rng.choice(["1s", "59m", "48h", "7d", "604800s"])
        got = rdv.ok(["proto", "seal", "--seed", sender.seed.hex(), "--to", to.id, "--seq", str(seq),
                      *(["--prev", prev] if prev else []), "--created", "2026-10-08T12:00:00Z", "--ttl", ttl,
                      "--ephemeral-seed", eph.hex(), "--nonce", nonce.hex()], src)
        want = envelope.seal(sender, to.id, seq, doc, prev=prev, created="2026-10-08T12:00:00Z", ttl=ttl,
                             ephemeral_secret=eph, nonce=nonce)
        assert got == canon.dumps(want)
        opened = rdv.ok(["proto", "open", "--seed", to.seed.hex(), "--now", "2026-10-08T12:00:00Z"], got)
        import json
        assert json.loads(opened)["payload"] == doc
