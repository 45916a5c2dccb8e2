"""Signed documents: sig, verification and hash (SPEC §4.6)."""
import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import canon
from .encoding import b64, b64decode
from .keys import ed25519_sign

SIG_PREFIX = b"rdv1/sig:"


class SignatureError(ValueError):
    pass


def signing_input(doc: dict) -> bytes:
    body = {k: v for k, v in doc.items() if k != "sig"}
    return SIG_PREFIX + canon.dumps(body)


def sign(doc: dict, seed: bytes) -> dict:
    if not isinstance(doc, dict):
        raise ValueError("only a JSON object can be signed")
    if "sig" in doc:
        raise ValueError("document already has a sig")
    out = dict(doc)
    out["sig"] = b64(ed25519_sign(seed, signing_input(doc)))
    return out


def doc_hash(doc) -> str:
    return hashlib.sha256(canon.dumps(doc)).hexdigest()


def verify(doc: dict, ed_pub: bytes) -> str:
    """Check the signature with the given Ed25519 public key; return the §4.6 hash."""
    if not isinstance(doc, dict) or not isinstance(doc.get("sig"), str):
        raise SignatureError("document has no sig")
    try:
        sig = b64decode(doc["sig"])
    except ValueError as e:
        raise SignatureError(str(e)) from None
    if len(sig) != 64:
        raise SignatureError("sig is not 64 bytes")
    try:
        Ed25519PublicKey.from_public_bytes(ed_pub).verify(sig, signing_input(doc))
    except InvalidSignature:
        raise SignatureError("bad signature") from None
    return doc_hash(doc)
