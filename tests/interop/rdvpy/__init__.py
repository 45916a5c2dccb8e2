"""rdvpy: an independent Python implementation of the Rendezvous (rdv1) wire format, for interop tests.

Written from SPEC rev 3 (§4.2, §4.4, §4.6, §6.2, §6.4) alone.
"""
from . import bip340, canon, docs, encoding, envelope, ids, keys, nostr, timeutil  # noqa: F401
from .keys import Keys  # noqa: F401
