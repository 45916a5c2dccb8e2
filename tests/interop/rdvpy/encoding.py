"""Base32 (RFC 4648, lowercase, unpadded) and standard padded base64 (SPEC §4.6)."""
import base64
import binascii


def b32(data: bytes) -> str:
    return base64.b32encode(data).decode("ascii").rstrip("=").lower()


def b32decode(text: str) -> bytes:
    """Strict: lowercase RFC 4648 alphabet, no padding, canonical trailing bits."""
    if not text or any(c not in "abcdefghijklmnopqrstuvwxyz234567" for c in text):
        raise ValueError("not lowercase unpadded base32")
    padded = text.upper() + "=" * (-len(text) % 8)
    try:
        data = base64.b32decode(padded)
    except binascii.Error as e:
        raise ValueError(f"bad base32: {e}") from None
    if b32(data) != text:
        raise ValueError("non-canonical base32")
    return data


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """Strict standard padded base64 (RFC 4648 §4), canonical encoding only."""
    if not isinstance(text, str):
        raise ValueError("base64 value must be a string")
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ValueError(f"bad base64: {e}") from None
    if b64(data) != text:
        raise ValueError("non-canonical base64")
    return data
