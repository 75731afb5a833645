"""The install scripts' shared library under the scripts' own `set -euo pipefail`: a finished
environment is moved into place with its console scripts pointing there, whatever else bin/
holds (a __pycache__ folder made the first install exit 2 after it had done all its work)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from .conftest import REPO


def test_venv_finish_moves_an_environment_with_a_pycache_in_bin(tmp_path: Path) -> None:
    target = tmp_path / "tool"
    partial = Path(f"{target}.partial")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(partial)], check=True)
    script = partial / "bin" / "tool-cli"
    script.write_text(f"#!{partial}/bin/python\nprint('hi')\n")
    script.chmod(0o755)
    (partial / "bin" / "__pycache__").mkdir()
    lib = REPO / "scripts" / "venv-lib.sh"
    done = subprocess.run(
        ["bash", "-c", f'set -euo pipefail; source "{lib}"; venv_finish "$1" "import sys"',
         "bash", str(target)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(target)
    assert not partial.exists()
    assert (target / "bin" / "tool-cli").read_text().startswith(f"#!{target}/bin/python\n")


def test_the_fast_tier_installs_nothing_machine_local() -> None:
    """The README's test command installs `.[test]`: no torch there (a pinned torch found a
    local CPU wheel on our machines and a multi-GB CUDA build anywhere else); the tests that
    need it are the gp tier, which brings its own."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert not [d for d in extras["test"] if d.startswith(("torch", "vllm"))]
    assert any(d.startswith("torch") for d in extras["gp"])
