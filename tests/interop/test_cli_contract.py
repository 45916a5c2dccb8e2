"""The CLI's error contract: a refusal exits 1, writes nothing on stdout and one {"error"} line on stderr."""
import pytest

from rdvpy.keys import Keys

import cases

A, B = Keys.from_hex(cases.ALICE), Keys.from_hex(cases.BOB)


@pytest.mark.parametrize("args", [
    ["proto", "seal", "--seed", "SEED", "--to", "TO", "--seq", "-1"],
    ["proto", "seal", "--seed", "SEED", "--to", "TO", "--seq", "abc"],
    ["proto", "seal", "--to", "TO", "--seq", "1"],
    ["proto", "keygen"],
    ["proto", "canon", "--bogus"],
], ids=lambda a: " ".join(a[1:]))
def test_cli_usage_errors_follow_error_contract(rdv, args):
    """Argument errors (a value that does not parse, a missing or unknown option) are invalid input too."""
    args = [A.seed.hex() if x == "SEED" else B.id if x == "TO" else x for x in args]
    rdv.refused(args, b'{"type":"x"}')
