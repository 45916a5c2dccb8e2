"""Signs the corpus bases with dkimpy, an implementation independent of
mail-auth (RSA and Ed25519, relaxed and simple canonicalization), and makes
the variants: a body altered after signing, a From-domain mismatch, a
signature by the wrong key. Run after tests/gen_corpus.rs; the output is
checked in."""
import pathlib

import dkim

CORPUS = pathlib.Path(__file__).resolve().parent.parent / "corpus"
KEYS = CORPUS / "keys"
HEADERS = [b"from", b"to", b"subject", b"date", b"message-id", b"x-rdv-probe", b"auto-submitted"]


def base(name):
    return (CORPUS / "_base" / name).read_bytes()


def sign(msg, selector, domain, key, canon, alg=b"rsa-sha256"):
    return dkim.sign(
        msg,
        selector.encode(),
        domain.encode(),
        key,
        canonicalize=canon,
        include_headers=HEADERS,
        signature_algorithm=alg,
    ) + msg


def main():
    rsa = (KEYS / "rsa2048.pem").read_bytes()
    other = (KEYS / "other-rsa2048.pem").read_bytes()
    ed = (KEYS / "ed25519.seed.b64").read_bytes().strip()
    relaxed = (b"relaxed", b"relaxed")
    simple = (b"simple", b"simple")
    out = {
        "dkimpy-rsa-relaxed.eml": sign(base("probe-qp.eml"), "rsa", "sender.test", rsa, relaxed),
        "dkimpy-ed25519-simple.eml": sign(
            base("probe-b64.eml"), "ed", "sender.test", ed, simple, b"ed25519-sha256"
        ),
        "forwarded-spf-fail.eml": sign(base("probe-forwarded.eml"), "rsa", "sender.test", rsa, relaxed),
        # From stays alice@sender.test; the valid signature is other.test's.
        "from-domain-mismatch.eml": sign(base("probe-mismatch.eml"), "rsa", "other.test", other, relaxed),
        # d=sender.test, but signed with another key than the published one.
        "bad-dkim-signature.eml": sign(base("probe-badsig.eml"), "rsa", "sender.test", other, relaxed),
    }
    altered = sign(base("probe-altered.eml"), "rsa", "sender.test", rsa, simple)
    # Edit the human paragraph only: the RDV/1 block still verifies.
    out["body-altered.eml"] = altered.replace(b"This message was sent", b"This message was SENT", 1)
    assert out["body-altered.eml"] != altered
    for name, data in out.items():
        (CORPUS / name).write_bytes(data)
        print("wrote", name)


if __name__ == "__main__":
    main()
