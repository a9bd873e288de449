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
# Share of the bound: a decode step reads the file's weights once per token (all of them but
# the token embedding, which it reads a row of, unless the embedding is also the output
# matrix: benches/gguf_weights.py), so bytes per token x tok/s over this machine's read
# bandwidth at the same thread count (benches/bandwidth.rs, measured at the start of the run
# unless BANDWIDTH_GBS gives it, as "T1=24.1 T2=31.5") is the share of the memory bound each
# engine reaches.
#
# Environment: LLAMA_BENCH (required), RUNS (default 3), THREADS (default "2 1"),
# FORMWORK (default target/release/formwork), BANDWIDTH_GBS.
set -euo pipefail
cd "$(dirname "$0")/.."
export CANDLE_BARRIER_POOL_SPIN_LIMIT="${CANDLE_BARRIER_POOL_SPIN_LIMIT:-0}"
LLAMA_BENCH="${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary of llama.cpp}"
RUNS="${RUNS:-3}"
THREADS="${THREADS:-2 1}"
BIN="${FORMWORK:-target/release/formwork}"
median() { python3 -c "import statistics, sys; print('%.2f' % statistics.median(map(float, sys.argv[1:])))" "$@"; }

if [ -z "${BANDWIDTH_GBS:-}" ]; then
  BANDWIDTH_GBS="$(BANDWIDTH_THREADS="$THREADS" cargo bench -q --bench bandwidth 2>/dev/null |
                   sed -n 's/^bandwidth_gbs //p')"
fi
echo "read bandwidth, GB/s: $BANDWIDTH_GBS"
share() { # bytes per token, tok/s, threads
  python3 -c "
import sys
bw = dict(kv.split('=') for kv in sys.argv[4].split())
g = bw.get('T' + sys.argv[3])
print('%.0f%%' % (100 * float(sys.argv[1]) * float(sys.argv[2]) / 1e9 / float(g)) if g else '-')" "$@" "$BANDWIDTH_GBS"
}

printf '| file | MB | MB read per token | threads | formwork decode tok/s | share of bandwidth | llama.cpp decode tok/s | share | ratio | load average before |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for path in "$@"; do
  mb=$(( $(stat -c %s "$path") / 1000000 ))
  read_bytes=$(python3 benches/gguf_weights.py "$path")
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
    printf '| %s | %s | %s | %s | %s (%s) | %s | %s | %s | %.2f× | %s |\n' "$(basename "$path")" "$mb" \
      "$((read_bytes / 1000000))" "$t" "$f" "$(IFS=' '; echo "${fw[*]}")" "$(share "$read_bytes" "$f" "$t")" \
      "$lc" "$(share "$read_bytes" "$lc" "$t")" "$(python3 -c "print($f / $lc)")" "$load"
  done
done
