#!/usr/bin/env bash
# Install GuideLLM (PyPI `guidellm`) into its own virtual environment for the load-generator
# capacity benchmark (benchmarks/loadgen_capacity.py), reusing it when it is already there and
# imports. GuideLLM is only ever run as a separate program; it is never a kneepoint dependency.
# Prints the environment's path.
#
#   scripts/install-guidellm.sh      # -> $KNEEPOINT_GUIDELLM_VENV or ~/.cache/kneepoint/guidellm-<ver>
#
# GuideLLM pulls in transformers and torch; an unpinned torch brings several GB of CUDA
# packages, so torch is pinned to 2.13.0 (a CPU wheel of that version is on our machines).
set -euo pipefail
source "$(dirname "$0")/venv-lib.sh"
VERSION="${KNEEPOINT_GUIDELLM_VERSION:-0.8.1}"
VENV="${KNEEPOINT_GUIDELLM_VENV:-$HOME/.cache/kneepoint/guidellm-$VERSION}"
CHECK="import guidellm.__main__"

venv_ready "$VENV" "$CHECK"
venv_begin "$VENV" "about 1 GB with torch's CPU build"
# Both in one resolve, so guidellm's requirements cannot replace the pinned torch.
"${PIP[@]}" "torch==2.13.0" "guidellm==$VERSION" >&2
venv_finish "$VENV" "$CHECK"
