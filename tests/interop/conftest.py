"""Shared fixtures: the `rdv` binary under test (RDV_BIN) and helpers to run it.

RDV_BIN must name the rdv binary. When it is unset or missing every interop test
fails with a clear message; nothing is ever skipped.
"""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))  # make `rdvpy` importable however pytest is started


def _resolve_bin():
    raw = os.environ.get("RDV_BIN")
    if not raw:
        return None, ("RDV_BIN is not set: point it at the rdv binary, e.g. "
                      "RDV_BIN=target/debug/rdv python -m pytest tests/interop")
    for cand in (Path(raw), REPO / raw):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand.resolve()), None
    return None, f"RDV_BIN={raw!r} does not name an executable file (looked in the cwd and in {REPO})"


@dataclass
class Run:
    args: list
    stdin: bytes
    rc: int
    stdout: bytes
    stderr: bytes

    def describe(self) -> str:
        return (f"rdv {' '.join(self.args)}\n  stdin:  {self.stdin[:400]!r}\n  rc={self.rc}\n"
                f"  stdout: {self.stdout[:400]!r}\n  stderr: {self.stderr[:400]!r}")


class Rdv:
    def __init__(self, path: str):
        self.path = path

    def run(self, args, stdin=b"") -> Run:
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        p = subprocess.run([self.path, *args], input=stdin, capture_output=True, timeout=60)
        return Run(list(args), stdin, p.returncode, p.stdout, p.stderr)

    def ok(self, args, stdin=b"") -> bytes:
        """Run; insist on success; return stdout (one trailing newline removed, if any)."""
        r = self.run(args, stdin)
        assert r.rc == 0, "rdv failed where it should succeed:\n" + r.describe()
        out = r.stdout
        return out[:-1] if out.endswith(b"\n") else out

    def ok_json(self, args, stdin=b""):
        out = self.ok(args, stdin)
        try:
            return json.loads(out)
        except ValueError:
            raise AssertionError(f"rdv printed something that is not JSON: {out[:400]!r}") from None

    def refused(self, args, stdin=b"") -> str:
        """Run; insist on the failure contract (exit 1, empty stdout, one JSON line on stderr)."""
        r = self.run(args, stdin)
        assert r.rc == 1, "rdv should have refused (exit 1):\n" + r.describe()
        assert r.stdout == b"", "rdv refused but wrote to stdout:\n" + r.describe()
        lines = r.stderr.decode("utf-8", "replace").strip("\n").split("\n")
        assert len(lines) == 1, "stderr should be exactly one line:\n" + r.describe()
        try:
            err = json.loads(lines[0])
        except ValueError:
            raise AssertionError("stderr is not JSON:\n" + r.describe()) from None
        assert isinstance(err, dict) and isinstance(err.get("error"), str) and err["error"], \
            "stderr should be {\"error\": \"<reason>\"}:\n" + r.describe()
        return err["error"]


@pytest.fixture(scope="session")
def rdv() -> Rdv:
    path, problem = _resolve_bin()
    if problem:
        pytest.fail(problem, pytrace=False)
    return Rdv(path)
