#!/usr/bin/env bash
# Decode tokens/s of formwork beside llama.cpp's llama-bench on the same GGUF files (such as
# the ones `formwork models synth --family` writes), in one run: for each file and thread
# count, RUNS runs of each engine, the median reported.
#
#   LLAMA_BENCH=path/to/llama-bench benches/family_decode.sh FILE.gguf...
#
# formwork: `generate --prompt "The total is" --max-tokens 64 --ignore-eos --verbose
# --threads T`, its `decode:` line (64 tokens after a 4-token prompt). llama.cpp:
# `llama-bench -p 0 -n 64 -t T -r RUNS` (64 tokens from an empty context), the median of its
# per-run `samples_ts`. The ratio is formwork / llama.cpp.
#
# Environment: LLAMA_BENCH (required), RUNS (default 3), THREADS (default "2 1"),
# FORMWORK (default target/release/formwork).
set -euo pipefail
cd "$(dirname "$0")/.."
export CANDLE_BARRIER_POOL_SPIN_LIMIT="${CANDLE_BARRIER_POOL_SPIN_LIMIT:-0}"
LLAMA_BENCH="${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary of llama.cpp}"
RUNS="${RUNS:-3}"
THREADS="${THREADS:-2 1}"
BIN="${FORMWORK:-target/release/formwork}"
median() { python3 -c "import statistics, sys; print('%.2f' % statistics.median(map(float, sys.argv[1:])))" "$@"; }

printf '| file | MB | threads | formwork decode tok/s | llama.cpp decode tok/s | ratio | load average before |\n'
printf '|---|---|---|---|---|---|---|\n'
for path in "$@"; do
  mb=$(( $(stat -c %s "$path") / 1000000 ))
  for t in $THREADS; do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    fw=()
    for _ in $(seq "$RUNS"); do
      err="$("$BIN" generate --model "$path" --prompt "The total is" --max-tokens 64 \
              --ignore-eos --verbose --threads "$t" 2>&1 >/dev/null)"
      fw+=("$(sed -n 's/^decode: .* = \([0-9.]*\) tok\/s/\1/p' <<<"$err")")
    done
    out="$("$LLAMA_BENCH" -m "$path" -p 0 -n 64 -t "$t" -r "$RUNS" -o json 2>/dev/null)"
    lc=$(python3 -c "
import json, statistics, sys
rows = json.loads(sys.argv[1])
print('%.2f' % statistics.median(rows[0]['samples_ts']))" "$out")
    f=$(median "${fw[@]}")
    printf '| %s | %s | %s | %s (%s) | %s | %.2f× | %s |\n' "$(basename "$path")" "$mb" "$t" "$f" \
      "$(IFS=' '; echo "${fw[*]}")" "$lc" "$(python3 -c "print($f / $lc)")" "$load"
  done
done
