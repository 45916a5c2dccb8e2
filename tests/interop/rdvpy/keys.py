"""Agent keys: Ed25519 from a seed, its X25519 form, the Nostr carrier key (SPEC §4.1, §6.2, §6.4)."""
import hashlib
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from . import bip340
from .ids import agent_id, fingerprint

P25519 = 2**255 - 19


def ed25519_pub(seed: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def ed25519_sign(seed: bytes, msg: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).sign(msg)


def x25519_secret(seed: bytes) -> bytes:
    """Clamped first half of SHA-512(seed) (the Ed25519 scalar), as X25519 secret bytes."""
    h = bytearray(hashlib.sha512(seed).digest()[:32])
    h[0] &= 248
    h[31] &= 127
    h[31] |= 64
    return bytes(h)


def ed25519_pub_to_x25519(pub: bytes) -> bytes:
    """Montgomery u = (1 + y) / (1 - y) mod p of an Ed25519 public key."""
    if len(pub) != 32:
        raise ValueError("Ed25519 public key must be 32 bytes")
    y = int.from_bytes(pub, "little") & ((1 << 255) - 1)
    if y >= P25519:
        raise ValueError("Ed25519 public key y out of range")
    den = (1 - y) % P25519
    if den == 0:
        raise ValueError("Ed25519 public key has no Montgomery form")
    u = (1 + y) * pow(den, P25519 - 2, P25519) % P25519
    return u.to_bytes(32, "little")


def x25519_pub_from_secret(secret: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def nostr_secret(seed: bytes) -> int:
    okm = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"rdv1/nostr-carrier").derive(seed)
    d = int.from_bytes(okm, "big")
    if not 1 <= d < bip340.N:
        raise ValueError("carrier key out of range")
    return d


@dataclass(frozen=True)
class Keys:
    seed: bytes
    ed_pub: bytes
    id: str
    x_secret: bytes
    x_pub: bytes
    nostr_sk: int
    nostr_pub: bytes

    @classmethod
    def from_seed(cls, seed: bytes) -> "Keys":
        if len(seed) != 32:
            raise ValueError("seed must be 32 bytes")
        pub = ed25519_pub(seed)
        sk = nostr_secret(seed)
        return cls(seed=seed, ed_pub=pub, id=agent_id(pub), x_secret=x25519_secret(seed),
                   x_pub=ed25519_pub_to_x25519(pub), nostr_sk=sk, nostr_pub=bip340.pubkey_gen(sk))

    @classmethod
    def from_hex(cls, seed_hex: str) -> "Keys":
        return cls.from_seed(bytes.fromhex(seed_hex))

    def keygen_json(self) -> dict:
        """What `rdv proto keygen` reports."""
        return {"id": self.id, "fingerprint": fingerprint(self.id), "ed25519_pub": self.ed_pub.hex(),
                "x25519_pub": self.x_pub.hex(), "nostr_pub": self.nostr_pub.hex()}
