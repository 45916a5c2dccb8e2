"""Inputs shared by the interop tests."""
import hashlib

# RFC 8032 §7.1 test 1-3 secret keys (Ed25519 seeds), the extremes, and a few derived ones.
SEEDS = [
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
    "00" * 32,
    "ff" * 32,
    "01" + "00" * 31,
] + [hashlib.sha256(b"rdv interop seed %d" % i).hexdigest() for i in range(6)]

ALICE, BOB, CAROL = SEEDS[6], SEEDS[7], SEEDS[8]

# Fixed time for envelopes, and matching --now values.
CREATED = "2026-10-08T12:00:00Z"
NOW = "2026-10-08T12:30:00Z"


def minimal_card(agent_id: str, created: str = "2026-10-08T00:00:00Z") -> dict:
    return {
        "v": 1,
        "id": agent_id,
        "created": created,
        "expires": None,
        "capabilities": ["rdv/v1", "a2a/0.3"],
        "rendezvous": [{"type": "nostr", "relay": "wss://relay.example", "pref": 1}],
        "policy": {"inbound": "prompt", "public": False},
    }


PAYLOADS = [
    {"type": "rdv/ping"},
    {"type": "a2a/message", "text": "héllo \u2028 wörld 😀 \"quoted\" back\\slash \n\t\u0001\u007f",
     "n": [0, -1, 9007199254740991, -9007199254740991], "nested": {"\ue000": 1, "\U0001f600": 2, "": None}},
    {"type": "x", "deep": [[[[[[[[{"a": [True, False, None]}]]]]]]]]},
]
