"""The agent's numpy runs on one BLAS thread, set on the loaded library and not through the
environment the servers it starts inherit (kneepoint.probes.runtime.threads)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import QUICKSTART

_PROBE = """
import json, os, sys
from threadpoolctl import threadpool_info
from kneepoint.cli.main import main
before = dict(os.environ)
code = main(["config", "check", sys.argv[1]])
blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({"code": code, "blas": blas, "environ_kept": dict(os.environ) == before}))
"""


def test_every_command_holds_blas_to_one_thread_without_touching_the_environment() -> None:
    # a fresh process: this one's workers are already held to one thread (tests/conftest.py)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(QUICKSTART)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["code"] == 0
    assert seen["blas"] and set(seen["blas"]) == {1}, seen
    assert seen["environ_kept"]
