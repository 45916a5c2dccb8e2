"""Agent IDs, fingerprints, discovery topics and canon(address) (SPEC §4.2, §4.4, §4.6)."""
import hashlib
import unicodedata

from .encoding import b32, b32decode

ID_PREFIX = "rdv1:"


def agent_id(ed25519_pub: bytes) -> str:
    if len(ed25519_pub) != 32:
        raise ValueError("Ed25519 public key must be 32 bytes")
    return ID_PREFIX + b32(ed25519_pub)


def parse_agent_id(rid: str) -> bytes:
    """The 32-byte Ed25519 public key of a canonical agent ID."""
    if not isinstance(rid, str) or not rid.startswith(ID_PREFIX) or len(rid) != 57:
        raise ValueError(f"not an agent ID: {rid!r}")
    key = b32decode(rid[len(ID_PREFIX):])
    if len(key) != 32:
        raise ValueError("agent ID key is not 32 bytes")
    return key


def fingerprint(rid: str) -> str:
    body = rid[len(ID_PREFIX):]
    return ID_PREFIX + body[:4] + "\u2026" + body[-4:]


def _topic(prefix: bytes, value: str) -> str:
    return b32(hashlib.sha256(prefix + value.encode("utf-8")).digest())[:26]


def dtopic(address: str) -> str:
    return _topic(b"rdv1/disc:", canon_address(address))


def idtopic(rid: str) -> str:
    return _topic(b"rdv1/id:", rid)


# ---------------------------------------------------------------- canon(address)

# Characters with the Unicode White_Space property (PropList.txt).
WHITE_SPACE = frozenset(
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
PHONE_SEPARATORS = frozenset("-.()/")


class AddressError(ValueError):
    pass


def _trim(s: str) -> str:
    a, b = 0, len(s)
    while a < b and s[a] in WHITE_SPACE:
        a += 1
    while b > a and s[b - 1] in WHITE_SPACE:
        b -= 1
    return s[a:b]


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) == "Cc"


def canon_address(address: str) -> str:
    t = _trim(address)
    if t.startswith("+"):
        digits = []
        for ch in t[1:]:
            if ch in WHITE_SPACE or ch in PHONE_SEPARATORS:
                continue
            if "0" <= ch <= "9":
                digits.append(ch)
                continue
            raise AddressError(f"invalid character {ch!r} in phone number")
        if not 1 <= len(digits) <= 15:
            raise AddressError("a phone number has 1 to 15 digits")
        return "+" + "".join(digits)
    if "@" in t:
        e = t.lower()
        if e.count("@") != 1:
            raise AddressError("an email has exactly one @")
        local, _, domain = e.partition("@")
        if not local or not domain:
            raise AddressError("an email has text on both sides of @")
        if any(ch in WHITE_SPACE or _is_control(ch) for ch in e):
            raise AddressError("white space or control character inside an email")
        return e
    raise AddressError("neither an email nor a +-led phone number")
