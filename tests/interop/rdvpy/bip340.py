"""BIP-340 Schnorr signatures over secp256k1, written from the BIP's description.

Plain affine/Jacobian arithmetic on Python ints: slow but clear, and fine for tests.
"""
import hashlib

P = 2**256 - 2**32 - 977
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
G = (0x79BE667EF9DCBBAC55A06295CE870B07029BFCDB2DCE28D959F2815B16F81798,
     0x483ADA7726A3C4655DA4FBFC0E1108A8FD17B448A68554199C47D08FFB10D4B8)

# Points are (x, y) tuples; None is the point at infinity.


def _add(p1, p2):
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    x1, y1 = p1
    x2, y2 = p2
    if x1 == x2 and (y1 + y2) % P == 0:
        return None
    if p1 == p2:
        lam = 3 * x1 * x1 * pow(2 * y1, P - 2, P) % P
    else:
        lam = (y2 - y1) * pow(x2 - x1, P - 2, P) % P
    x3 = (lam * lam - x1 - x2) % P
    return (x3, (lam * (x1 - x3) - y1) % P)


def _mul(point, k: int):
    acc = None
    for i in range(k.bit_length() - 1, -1, -1):
        acc = _add(acc, acc)
        if (k >> i) & 1:
            acc = _add(acc, point)
    return acc


def tagged_hash(tag: str, msg: bytes) -> bytes:
    t = hashlib.sha256(tag.encode()).digest()
    return hashlib.sha256(t + t + msg).digest()


def _bytes32(x: int) -> bytes:
    return x.to_bytes(32, "big")


def _has_even_y(pt) -> bool:
    return pt[1] % 2 == 0


def lift_x(x: int):
    if x >= P:
        return None
    c = (pow(x, 3, P) + 7) % P
    y = pow(c, (P + 1) // 4, P)
    if y * y % P != c:
        return None
    return (x, y if y % 2 == 0 else P - y)


def pubkey_gen(sk: int) -> bytes:
    if not 1 <= sk < N:
        raise ValueError("secret key out of range")
    return _bytes32(_mul(G, sk)[0])


def sign(msg: bytes, sk: int, aux_rand: bytes) -> bytes:
    if not 1 <= sk < N:
        raise ValueError("secret key out of range")
    if len(aux_rand) != 32:
        raise ValueError("aux_rand must be 32 bytes")
    pt = _mul(G, sk)
    d = sk if _has_even_y(pt) else N - sk
    t = bytes(a ^ b for a, b in zip(_bytes32(d), tagged_hash("BIP0340/aux", aux_rand)))
    px = _bytes32(pt[0])
    k0 = int.from_bytes(tagged_hash("BIP0340/nonce", t + px + msg), "big") % N
    if k0 == 0:
        raise ValueError("nonce is zero")
    r = _mul(G, k0)
    k = k0 if _has_even_y(r) else N - k0
    rx = _bytes32(r[0])
    e = int.from_bytes(tagged_hash("BIP0340/challenge", rx + px + msg), "big") % N
    sig = rx + _bytes32((k + e * d) % N)
    if not verify(msg, px, sig):
        raise RuntimeError("produced signature does not verify")
    return sig


def verify(msg: bytes, pubkey: bytes, sig: bytes) -> bool:
    if len(pubkey) != 32 or len(sig) != 64:
        return False
    pt = lift_x(int.from_bytes(pubkey, "big"))
    r = int.from_bytes(sig[:32], "big")
    s = int.from_bytes(sig[32:], "big")
    if pt is None or r >= P or s >= N:
        return False
    e = int.from_bytes(tagged_hash("BIP0340/challenge", sig[:32] + pubkey + msg), "big") % N
    rr = _add(_mul(G, s), _mul(pt, N - e) if e else None)
    if rr is None or not _has_even_y(rr) or rr[0] != r:
        return False
    return True
