"""Verifies every DKIM-Signature of a message with dkimpy, answering DNS
from files instead of the network (tests/outbound.rs).

usage: dkim_verify.py MESSAGE NAME=TXTFILE [NAME=TXTFILE ...]

NAME is the record's owner, e.g. s1._domainkey.mail.test; TXTFILE holds
the TXT record ("v=DKIM1; k=rsa; p=..."). Prints one JSON object:
{"signatures": N, "results": [{"d", "s", "a", "ok", "error"}...]}; a
failed verification is "ok": false, not an exit status.
"""

import json
import sys

import dkim


def main():
    raw = open(sys.argv[1], "rb").read()
    records = {}
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        records[name.lower().rstrip(".")] = open(path, "rb").read().strip()

    def dnsfunc(name, timeout=5):
        if isinstance(name, bytes):
            name = name.decode()
        return records.get(name.lower().rstrip("."))

    d = dkim.DKIM(raw)
    results = []
    for i, (field, value) in enumerate(
        (f, v) for f, v in d.headers if f.lower() == b"dkim-signature"
    ):
        tags = dkim.util.parse_tag_value(value)
        error = None
        try:
            ok = d.verify(idx=i, dnsfunc=dnsfunc)
        except dkim.DKIMException as e:
            ok, error = False, str(e)
        results.append(
            {
                "d": tags[b"d"].decode(),
                "s": tags[b"s"].decode(),
                "a": tags[b"a"].decode(),
                "ok": bool(ok),
                "error": error,
            }
        )
    print(json.dumps({"signatures": len(results), "results": results}))


if __name__ == "__main__":
    main()
