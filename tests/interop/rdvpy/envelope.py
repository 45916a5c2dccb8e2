"""Envelope seal/open (SPEC §6.4)."""
import os
import re
from datetime import timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from . import canon, docs
from .encoding import b64, b64decode
from .ids import parse_agent_id
from .keys import Keys, ed25519_pub_to_x25519, x25519_pub_from_secret
from .timeutil import format_time, now_utc, parse_time, parse_ttl

ALG = "x25519+aes256gcm"
MAX_PLAINTEXT = 32768
TAG_LEN = 16
MAX_CIPHERTEXT = MAX_PLAINTEXT + TAG_LEN
MAX_TTL = timedelta(days=7)
MAX_SKEW = timedelta(minutes=5)
HEADER_FIELDS = ("v", "from", "to", "seq", "prev", "created", "ttl")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class EnvelopeError(ValueError):
    pass


def _key(shared: bytes, epk: bytes, recipient_x_pub: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=epk + recipient_x_pub,
                info=b"rdv1/envelope").derive(shared)


def header_aad(env: dict) -> bytes:
    return canon.dumps({k: env[k] for k in HEADER_FIELDS})


def seal(sender: Keys, to: str, seq: int, payload: dict, prev=None, created=None, ttl="48h",
         ephemeral_secret: bytes = None, nonce: bytes = None, check: bool = True) -> dict:
    """Seal and sign an envelope. check=False skips the sender's limits, to forge bad envelopes in tests."""
    plaintext = canon.dumps(payload)
    created = created or format_time(now_utc())
    if check:
        if not isinstance(payload, dict):
            raise EnvelopeError("payload must be a JSON object")
        if len(plaintext) > MAX_PLAINTEXT:
            raise EnvelopeError("payload over 32 KiB")
        if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= canon.MAX_SAFE_INT:
            raise EnvelopeError("seq must be a positive integer")
        if (seq == 1) != (prev is None) or (prev is not None and not _HEX64.match(prev)):
            raise EnvelopeError("prev is null exactly for seq 1, else 64 lowercase hex")
        if parse_ttl(ttl) > MAX_TTL:
            raise EnvelopeError("ttl over 7 days")
        parse_time(created)
    env = {"v": 1, "from": sender.id, "to": to, "seq": seq, "prev": prev, "created": created, "ttl": ttl}
    env["content"] = encrypt_content(env, plaintext, ephemeral_secret, nonce)
    return docs.sign(env, sender.seed)


def encrypt_content(header: dict, plaintext: bytes, ephemeral_secret: bytes = None, nonce: bytes = None) -> dict:
    """The content object for plaintext under this header (to, and the associated data, come from it)."""
    recipient_x = ed25519_pub_to_x25519(parse_agent_id(header["to"]))
    eph = ephemeral_secret if ephemeral_secret is not None else os.urandom(32)
    nonce = nonce if nonce is not None else os.urandom(12)
    if len(eph) != 32 or len(nonce) != 12:
        raise EnvelopeError("ephemeral secret is 32 bytes, nonce 12")
    epk = x25519_pub_from_secret(eph)
    shared = X25519PrivateKey.from_private_bytes(eph).exchange(X25519PublicKey.from_public_bytes(recipient_x))
    ct = AESGCM(_key(shared, epk, recipient_x)).encrypt(nonce, plaintext, header_aad(header))
    return {"alg": ALG, "epk": b64(epk), "nonce": b64(nonce), "ciphertext": b64(ct)}


def ciphertext_b64_too_long(b64text: str) -> bool:
    # Padded base64 of n bytes is 4*ceil(n/3) chars; 32784 = 3*10928, so the limit is 43712 chars.
    return len(b64text) > 4 * ((MAX_CIPHERTEXT + 2) // 3)


def check_shape(env) -> None:
    if not isinstance(env, dict):
        raise EnvelopeError("envelope must be an object")
    want = set(HEADER_FIELDS) | {"content", "sig"}
    if set(env) != want:
        raise EnvelopeError(f"envelope members must be exactly {sorted(want)}")
    if env["v"] != 1 or isinstance(env["v"], bool):
        raise EnvelopeError("v must be 1")
    for f in ("from", "to"):
        try:
            parse_agent_id(env[f])
        except ValueError as e:
            raise EnvelopeError(f"{f}: {e}") from None
    seq = env["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise EnvelopeError("seq must be a positive integer")
    prev = env["prev"]
    if seq == 1 and prev is not None:
        raise EnvelopeError("prev must be null for seq 1")
    if seq != 1 and not (isinstance(prev, str) and _HEX64.match(prev)):
        raise EnvelopeError("prev must be 64 lowercase hex")
    try:
        parse_time(env["created"])
        parse_ttl(env["ttl"])
    except ValueError as e:
        raise EnvelopeError(str(e)) from None
    c = env["content"]
    if not isinstance(c, dict) or set(c) != {"alg", "epk", "nonce", "ciphertext"}:
        raise EnvelopeError("content must have exactly alg, epk, nonce, ciphertext")
    if c["alg"] != ALG:
        raise EnvelopeError("unknown alg")
    if not isinstance(env["sig"], str):
        raise EnvelopeError("sig must be a string")


def verify_envelope(env, now=None) -> str:
    """Everything a receiver checks except decryption and the recipient; return the hash."""
    if isinstance(env, dict) and isinstance(env.get("content"), dict):
        ct = env["content"].get("ciphertext")
        if isinstance(ct, str) and ciphertext_b64_too_long(ct):
            raise EnvelopeError("ciphertext over the size limit")
    check_shape(env)
    try:
        h = docs.verify(env, parse_agent_id(env["from"]))
    except docs.SignatureError as e:
        raise EnvelopeError(str(e)) from None
    now = now or now_utc()
    created = parse_time(env["created"])
    ttl = parse_ttl(env["ttl"])
    if ttl > MAX_TTL:
        raise EnvelopeError("ttl over 7 days")
    if created - now > MAX_SKEW:
        raise EnvelopeError("created too far in the future")
    if now > created + ttl:
        raise EnvelopeError("expired")
    return h


def open_envelope(recipient: Keys, env, now=None) -> dict:
    verify_envelope(env, now)
    if env["to"] != recipient.id:
        raise EnvelopeError("envelope is not addressed to this agent")
    c = env["content"]
    try:
        epk, nonce, ct = b64decode(c["epk"]), b64decode(c["nonce"]), b64decode(c["ciphertext"])
    except ValueError as e:
        raise EnvelopeError(str(e)) from None
    if len(epk) != 32 or len(nonce) != 12 or len(ct) < TAG_LEN:
        raise EnvelopeError("bad content lengths")
    if len(ct) > MAX_CIPHERTEXT:
        raise EnvelopeError("ciphertext over the size limit")
    try:
        shared = X25519PrivateKey.from_private_bytes(recipient.x_secret).exchange(X25519PublicKey.from_public_bytes(epk))
    except ValueError as e:  # all-zero shared secret (low-order point)
        raise EnvelopeError(str(e)) from None
    try:
        pt = AESGCM(_key(shared, epk, recipient.x_pub)).decrypt(nonce, ct, header_aad(env))
    except InvalidTag:
        raise EnvelopeError("decryption failed") from None
    try:
        payload = canon.parse(pt)
    except canon.CanonError as e:
        raise EnvelopeError(f"payload: {e}") from None
    if not isinstance(payload, dict):
        raise EnvelopeError("payload is not an object")
    return {"from": env["from"], "seq": env["seq"], "prev": env["prev"], "created": env["created"], "payload": payload}
