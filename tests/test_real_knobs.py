"""The knob catalogue against the installed vLLM: every knob whose version range takes the
installed release is an option its `vllm serve` parser accepts (a boolean both ways, as
kneepoint renders it), and every knob the parser lacks is excluded by its range."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kneepoint.config import knob_catalogue

pytestmark = pytest.mark.real_vllm

# vLLM 0.32 builds `vllm serve`'s parser in vllm/entrypoints/launchers/cli_args.py; releases
# before the launchers package in vllm/entrypoints/openai/cli_args.py.
_OPTIONS = """
import json, vllm
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
options = sorted(o for action in parser._actions for o in action.option_strings)
print(json.dumps({"version": vllm.__version__, "options": options}))
"""


def test_every_knob_the_installed_release_should_know_is_an_option_it_takes(
    vllm_python: Path,
) -> None:
    done = subprocess.run([str(vllm_python), "-c", _OPTIONS], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    options, version = set(parsed["options"]), parsed["version"]
    for knob in knob_catalogue().knobs:
        flags = [knob.flag]
        if knob.domain.kind == "bool":
            flags.append("--no-" + knob.flag[2:])
        taken = all(flag in options for flag in flags)
        assert taken == knob.known_by(version), (knob.name, knob.vllm_versions, version, flags)
