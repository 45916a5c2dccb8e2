"""Canonical JSON (SPEC §4.6): RFC 8785 (JCS) restricted to integers.

`parse` is a strict JSON parser (RFC 8259 grammar plus the Rendezvous limits);
`dumps` is the canonical serializer. Values map to Python as:
object -> dict, array -> list, string -> str, integer -> int, true/false -> bool,
null -> None.
"""

MAX_SAFE_INT = 2**53 - 1
MAX_DEPTH = 32


class CanonError(ValueError):
    """The input is not acceptable JSON for canonicalization."""


# ---------------------------------------------------------------- parser

_WS = " \t\n\r"
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = "0123456789abcdefABCDEF"


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def fail(self, why: str):
        raise CanonError(f"{why} at offset {self.i}")

    def ws(self):
        s, i = self.s, self.i
        while i < len(s) and s[i] in _WS:
            i += 1
        self.i = i

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else ""

    def value(self, depth: int):
        self.ws()
        c = self.peek()
        if c == "{":
            return self.obj(depth + 1)
        if c == "[":
            return self.arr(depth + 1)
        if c == '"':
            return self.string()
        if c == "-" or c.isdigit() and c.isascii():
            return self.number()
        for lit, val in (("true", True), ("false", False), ("null", None)):
            if self.s.startswith(lit, self.i):
                self.i += len(lit)
                return val
        self.fail("unexpected character" if c else "unexpected end of input")

    def obj(self, depth: int):
        if depth > MAX_DEPTH:
            self.fail("nesting deeper than 32")
        self.i += 1  # {
        out = {}
        self.ws()
        if self.peek() == "}":
            self.i += 1
            return out
        while True:
            self.ws()
            if self.peek() != '"':
                self.fail("expected member name")
            key = self.string()
            if key in out:
                self.fail(f"duplicate member name {key!r}")
            self.ws()
            if self.peek() != ":":
                self.fail("expected ':'")
            self.i += 1
            out[key] = self.value(depth)
            self.ws()
            c = self.peek()
            self.i += 1
            if c == "}":
                return out
            if c != ",":
                self.i -= 1
                self.fail("expected ',' or '}'")

    def arr(self, depth: int):
        if depth > MAX_DEPTH:
            self.fail("nesting deeper than 32")
        self.i += 1  # [
        out = []
        self.ws()
        if self.peek() == "]":
            self.i += 1
            return out
        while True:
            out.append(self.value(depth))
            self.ws()
            c = self.peek()
            self.i += 1
            if c == "]":
                return out
            if c != ",":
                self.i -= 1
                self.fail("expected ',' or ']'")

    def hex4(self) -> int:
        h = self.s[self.i:self.i + 4]
        if len(h) != 4 or any(ch not in _HEX for ch in h):
            self.fail("bad \\u escape")
        self.i += 4
        return int(h, 16)

    def string(self) -> str:
        self.i += 1  # opening quote
        s = self.s
        parts = []
        while True:
            if self.i >= len(s):
                self.fail("unterminated string")
            c = s[self.i]
            if c == '"':
                self.i += 1
                return "".join(parts)
            if ord(c) < 0x20:
                self.fail("raw control character in string")
            if 0xD800 <= ord(c) <= 0xDFFF:  # cannot come from strict UTF-8, but str input may hold one
                self.fail("lone surrogate")
            if c != "\\":
                parts.append(c)
                self.i += 1
                continue
            self.i += 1
            e = self.peek()
            if e in _SIMPLE_ESCAPES:
                parts.append(_SIMPLE_ESCAPES[e])
                self.i += 1
                continue
            if e != "u":
                self.fail("bad escape")
            self.i += 1
            cu = self.hex4()
            if 0xDC00 <= cu <= 0xDFFF:
                self.fail("lone low surrogate")
            if 0xD800 <= cu <= 0xDBFF:
                if not s.startswith("\\u", self.i):
                    self.fail("lone high surrogate")
                self.i += 2
                lo = self.hex4()
                if not 0xDC00 <= lo <= 0xDFFF:
                    self.fail("high surrogate not followed by a low surrogate")
                cu = 0x10000 + ((cu - 0xD800) << 10) + (lo - 0xDC00)
            parts.append(chr(cu))

    def number(self) -> int:
        s, start = self.s, self.i
        i = start
        if i < len(s) and s[i] == "-":
            i += 1
        if i < len(s) and s[i] == "0":
            i += 1
        elif i < len(s) and "1" <= s[i] <= "9":
            while i < len(s) and "0" <= s[i] <= "9":
                i += 1
        else:
            self.i = i
            self.fail("bad number")
        if i < len(s) and s[i] in ".eE":
            self.i = i
            self.fail("number is not an integer")
        self.i = i
        n = int(s[start:i])
        if abs(n) > MAX_SAFE_INT:
            self.fail("integer out of range")
        return n


def parse(data) -> object:
    """Parse JSON text (bytes must be UTF-8) strictly; raise CanonError when refused."""
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")  # strict: refuses encoded surrogates and bad bytes
        except UnicodeDecodeError as e:
            raise CanonError(f"invalid UTF-8: {e}") from None
    else:
        text = data
    p = _Parser(text)
    v = p.value(0)
    p.ws()
    if p.i != len(text):
        p.fail("trailing data")
    return v


# ---------------------------------------------------------------- serializer

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            raise CanonError("lone surrogate in string")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _utf16_key(s: str) -> bytes:
    # Big-endian UTF-16 bytes compare exactly like sequences of UTF-16 code units.
    return s.encode("utf-16-be")


def _ser(v, out: list, depth: int):
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, int):
        if abs(v) > MAX_SAFE_INT:
            raise CanonError("integer out of range")
        out.append(str(v))  # -0 does not exist for Python ints
    elif isinstance(v, str):
        out.append(_str(v))
    elif isinstance(v, (list, tuple)):
        if depth + 1 > MAX_DEPTH:
            raise CanonError("nesting deeper than 32")
        out.append("[")
        for n, item in enumerate(v):
            if n:
                out.append(",")
            _ser(item, out, depth + 1)
        out.append("]")
    elif isinstance(v, dict):
        if depth + 1 > MAX_DEPTH:
            raise CanonError("nesting deeper than 32")
        out.append("{")
        for n, k in enumerate(sorted(v, key=_utf16_key)):
            if not isinstance(k, str):
                raise CanonError("member names must be strings")
            if n:
                out.append(",")
            out.append(_str(k))
            out.append(":")
            _ser(v[k], out, depth + 1)
        out.append("}")
    else:
        raise CanonError(f"cannot canonicalize {type(v).__name__}")


def dumps(v) -> bytes:
    """Canonical JSON bytes of a Python value."""
    out: list = []
    _ser(v, out, 0)
    return "".join(out).encode("utf-8")


def canonicalize(data) -> bytes:
    """Parse JSON text strictly and return its canonical bytes."""
    return dumps(parse(data))
