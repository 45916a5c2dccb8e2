"""RFC 3339 UTC timestamps ("…Z") and envelope ttl durations."""
import re
from datetime import datetime, timedelta, timezone

_TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z$")
# Pinned (docs/conformance.md): a positive n without leading zero.
_TTL = re.compile(r"^([1-9][0-9]{0,8})([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(s: str) -> datetime:
    m = _TS.match(s) if isinstance(s, str) else None
    if not m:
        raise ValueError(f"not an RFC 3339 UTC time: {s!r}")
    y, mo, d, h, mi, sec, frac = m.groups()
    us = int((frac or "0").ljust(6, "0")[:6])
    return datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), us, tzinfo=timezone.utc)


def format_time(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_utc() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def parse_ttl(s: str) -> timedelta:
    m = _TTL.match(s) if isinstance(s, str) else None
    if not m:
        raise ValueError(f"not a ttl: {s!r}")
    return timedelta(seconds=int(m.group(1)) * _UNIT[m.group(2)])
