"""`python -m rdvpy.cli proto …`: the conformance CLI of SPEC-only rdvpy, same contract as `rdv proto`.

Used to check the interop tests themselves (RDV_BIN=tests/interop/rdvpy-cli), and handy to
produce vectors by hand.
"""
import argparse
import json
import sys

from . import canon, docs, envelope, ids, nostr
from .keys import Keys
from .timeutil import parse_time

KINDS = ["card", "contact-request", "contact-grant", "revoke", "envelope", "group-state", "group-invite",
         "group-join", "group-leave", "group-msg-header"]


class Refused(Exception):
    pass


def _seed(h: str) -> Keys:
    try:
        b = bytes.fromhex(h)
    except ValueError:
        raise Refused("seed is not hex") from None
    if len(b) != 32 or h != h.lower():
        raise Refused("seed must be 32 bytes of lowercase hex")
    return Keys.from_seed(b)


def _hexbytes(h: str, n: int, what: str) -> bytes:
    try:
        b = bytes.fromhex(h)
    except ValueError:
        raise Refused(f"{what} is not hex") from None
    if len(b) != n:
        raise Refused(f"{what} must be {n} bytes")
    return b


def _stdin_json():
    return canon.parse(sys.stdin.buffer.read())


class _ArgParser(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(f"usage: {message}")


def run(argv) -> bytes:
    ap = _ArgParser(prog="rdvpy")
    sub = ap.add_subparsers(dest="group", required=True)
    proto = sub.add_parser("proto").add_subparsers(dest="cmd", required=True)
    proto.add_parser("canon")
    p = proto.add_parser("keygen"); p.add_argument("--seed", required=True)
    p = proto.add_parser("topic"); g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--address"); g.add_argument("--id")
    p = proto.add_parser("sign"); p.add_argument("--seed", required=True)
    p = proto.add_parser("verify"); p.add_argument("--kind", required=True, choices=KINDS); p.add_argument("--now")
    p = proto.add_parser("seal")
    for a in ("--seed", "--to", "--seq"):
        p.add_argument(a, required=True)
    for a in ("--prev", "--created", "--ephemeral-seed", "--nonce"):
        p.add_argument(a)
    p.add_argument("--ttl", default="48h")
    p = proto.add_parser("open"); p.add_argument("--seed", required=True); p.add_argument("--now")
    p = proto.add_parser("nostr-event"); p.add_argument("--seed", required=True); p.add_argument("--card", action="store_true")
    p.add_argument("--topic"); p.add_argument("--created-at", type=int)
    proto.add_parser("nostr-verify")
    args = ap.parse_args(argv)
    now = parse_time(args.now) if getattr(args, "now", None) else None

    if args.cmd == "canon":
        return canon.dumps(_stdin_json())
    if args.cmd == "keygen":
        return canon.dumps(_seed(args.seed).keygen_json())
    if args.cmd == "topic":
        if args.address is not None:
            return canon.dumps({"canon": ids.canon_address(args.address), "dtopic": ids.dtopic(args.address)})
        ids.parse_agent_id(args.id)
        return canon.dumps({"idtopic": ids.idtopic(args.id)})
    if args.cmd == "sign":
        k = _seed(args.seed)
        return canon.dumps(docs.sign(_stdin_json(), k.seed))
    if args.cmd == "verify":
        doc = _stdin_json()
        if args.kind == "envelope":
            return canon.dumps({"ok": True, "hash": envelope.verify_envelope(doc, now)})
        if args.kind != "card":
            raise Refused("only card and envelope are implemented here")
        if not isinstance(doc, dict) or "id" not in doc:
            raise Refused("not a card")
        return canon.dumps({"ok": True, "hash": docs.verify(doc, ids.parse_agent_id(doc["id"]))})
    if args.cmd == "seal":
        k = _seed(args.seed)
        eph = nonce = None
        if (args.ephemeral_seed is None) != (args.nonce is None):
            raise Refused("--ephemeral-seed and --nonce go together")
        if args.ephemeral_seed is not None:
            eph, nonce = _hexbytes(args.ephemeral_seed, 32, "ephemeral seed"), _hexbytes(args.nonce, 12, "nonce")
        try:
            seq = int(args.seq)
        except ValueError:
            raise Refused("seq must be an integer") from None
        ids.parse_agent_id(args.to)
        env = envelope.seal(k, args.to, seq, _stdin_json(), prev=args.prev, created=args.created, ttl=args.ttl,
                            ephemeral_secret=eph, nonce=nonce)
        return canon.dumps(env)
    if args.cmd == "open":
        return canon.dumps(envelope.open_envelope(_seed(args.seed), _stdin_json(), now))
    if args.cmd == "nostr-event":
        k = _seed(args.seed)
        doc = _stdin_json()
        if args.card:
            if not args.topic:
                raise Refused("--card needs --topic")
            return json.dumps(nostr.card_event(k, doc, args.topic, args.created_at), ensure_ascii=False).encode()
        envelope.check_shape(doc)
        return json.dumps(nostr.envelope_event(k, doc, args.created_at), ensure_ascii=False).encode()
    if args.cmd == "nostr-verify":
        ev = _stdin_json()
        report = nostr.verify_event(ev)
        report["carries"] = nostr.check_carrier(ev)
        return json.dumps(report, ensure_ascii=False).encode()
    raise Refused("unknown command")


def main(argv=None) -> int:
    try:
        out = run(sys.argv[1:] if argv is None else argv)
    except (Refused, ValueError, KeyError, TypeError) as e:
        sys.stderr.write(json.dumps({"error": str(e) or type(e).__name__}) + "\n")
        return 1
    sys.stdout.buffer.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
