"""`rdv proto keygen` and `rdv proto topic` against rdvpy."""
import pytest

from rdvpy import ids
from rdvpy.keys import Keys

import cases


@pytest.mark.parametrize("seed", cases.SEEDS)
def test_keygen_matches(rdv, seed):
    got = rdv.ok_json(["proto", "keygen", "--seed", seed])
    want = Keys.from_hex(seed).keygen_json()
    assert got == want, f"keygen differs for seed {seed}\n  rdv:   {got}\n  rdvpy: {want}"


def test_keygen_shape(rdv):
    got = rdv.ok_json(["proto", "keygen", "--seed", cases.ALICE])
    assert set(got) == {"id", "fingerprint", "ed25519_pub", "x25519_pub", "nostr_pub"}
    assert len(got["id"]) == 57 and got["id"].startswith("rdv1:") and got["id"] == got["id"].lower()
    assert got["fingerprint"] == "rdv1:" + got["id"][5:9] + "\u2026" + got["id"][-4:]
    for k in ("ed25519_pub", "x25519_pub", "nostr_pub"):
        assert len(got[k]) == 64 and all(c in "0123456789abcdef" for c in got[k])


@pytest.mark.parametrize("bad", ["", "00", "zz" * 32, "00" * 31, "00" * 33])
def test_keygen_refuses_bad_seed(rdv, bad):
    rdv.refused(["proto", "keygen", "--seed", bad])


VALID_ADDRESSES = [
    "alice@example.com",
    "Alice@Example.COM",
    "  alice@example.com\t",
    "alice@example.com\n",
    "\u00a0Bob@X.org\u2003",
    "\u3000carol@example.org\u2029",
    "\u0085dave@example.org\u000b\u000c",
    "ÄLICE@ÉXAMPLE.com",
    "ÉLODIE@CAFÉ.FR",
    "ЖЕНЯ@ПРИМЕР.РФ",
    "ΟΔΥΣΣΕΥΣ@EXAMPLE.GR",         # final sigma: ...σσευς@
    "STRASSEẞ@EXAMPLE.DE",     # capital sharp s lowercases to ß
    "\u200balice@example.com",   # U+200B is not White_Space: it stays
    "a@b",
    "first.last+tag@sub.example.co.uk",
    "+972-54-000-0000",
    "+1 (555) 123.4567",
    "+1/555/1234",
    " +44 20 7946 0958 ",
    "\t+33.1.23.45.67.89\n",
    "+1\u00a0555\u2009123",
    "+123456789012345",
    "+1",
    "+0",
    "+(1)-(2)",
    "+ 1 2",
    "alice@example.com\ufeff",     # U+FEFF is Cf, neither White_Space nor a control: it stays
    "alice@example.com\u200e",
    "alice@ex\u180eample.com",      # U+180E left White_Space in Unicode 6.3
    "\u0130@x.tr",                  # İ lowercases to i + U+0307
    "\u01c5@x",                     # titlecase ǅ lowercases to ǆ
    "\uff21\uff2c\uff29\uff23\uff25@x",  # fullwidth letters lowercase to fullwidth
    "a@b\u0085",                   # U+0085 is White_Space: trimmed
]

INVALID_ADDRESSES = [
    "", "   ", "alice", "example.com", "+", "+ ", "+-()", "+abc", "+1a", "+1 555 CALL", "+1234567890123456",
    "+1_555", "+1,555", "+1+2", "++1", "+1@example.com", "+１２３", "+١٢٣", "a@b@c", "@example.com",
    "alice@", "@", "al ice@example.com", "alice@exa mple.com", "alice@exa\u00a0mple.com",
    "alice\u2003@example.com", "alice@exa\u0001mple.com", "alice@example.com\u007f", "\u0080alice@example.com",
    "alice@exa\tmple.com", "1-555-123-4567",
    # U+001C..U+001F are not White_Space (though Python's str.isspace() says so): never trimmed
    "\x1calice@example.com", "alice@example.com\x1f", "+1\x1f555", "\x1c+1", "a\u0085b@c",
]


@pytest.mark.parametrize("addr", VALID_ADDRESSES, ids=repr)
def test_topic_address_matches(rdv, addr):
    got = rdv.ok_json(["proto", "topic", "--address", addr])
    want = {"canon": ids.canon_address(addr), "dtopic": ids.dtopic(addr)}
    assert got == want, f"topic differs for {addr!r}\n  rdv:   {got}\n  rdvpy: {want}"
    assert len(got["dtopic"]) == 26


@pytest.mark.parametrize("addr", INVALID_ADDRESSES, ids=repr)
def test_topic_address_refused(rdv, addr):
    with pytest.raises(ids.AddressError):
        ids.canon_address(addr)
    rdv.refused(["proto", "topic", "--address", addr])


def test_topic_same_for_equivalent_addresses(rdv):
    a = rdv.ok_json(["proto", "topic", "--address", " Alice@Example.com "])
    b = rdv.ok_json(["proto", "topic", "--address", "alice@example.com"])
    assert a == b
    p = rdv.ok_json(["proto", "topic", "--address", "+972 (54) 000-0000"])
    q = rdv.ok_json(["proto", "topic", "--address", "+972540000000"])
    assert p == q


@pytest.mark.parametrize("seed", cases.SEEDS)
def test_topic_id_matches(rdv, seed):
    rid = Keys.from_hex(seed).id
    got = rdv.ok_json(["proto", "topic", "--id", rid])
    assert got == {"idtopic": ids.idtopic(rid)}, f"idtopic differs for {rid}: rdv {got}"
