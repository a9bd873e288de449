#!/usr/bin/env bash
# Decode and prefill tokens/s and peak RSS: formwork (release) beside llama.cpp, same GGUF,
# same prompt (benches/prompt.txt), 128 greedy tokens with EOS ignored, 1 and 2 threads.
# A benchmark, not a test: run it by hand on an otherwise idle machine.
#
#   benches/decode_bench.sh [MODEL...]          # default: smollm2-135m gemma3-270m
#
# A MODEL is a registry name or a path to a .gguf file (such as one written by
# `formwork models synth --family`).
#
# Environment:
#   LLAMA_BENCH  path to llama.cpp's own `llama-bench` binary. When set, the llama.cpp rows
#              come from it (`-p PROMPT_TOKENS -n 128 -t THREADS -r RUNS`, mean tokens/s)
#              instead of llama-cpp-python. Build it from llama.cpp's source with
#              `cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF && cmake --build
#              build --target llama-bench` (about 15 minutes on 2 cores).
#   LLAMA_PY   a Python with llama-cpp-python (default /tmp/llamavenv/bin/python); the
#              llama.cpp rows are skipped when neither it nor LLAMA_BENCH is usable.
#   RUNS       runs per configuration, best taken (default 3).
#   THREADS    thread counts to try (default "1 2").
#   CANDLE_BARRIER_POOL_SPIN_LIMIT  defaults to 0 here, as in formwork itself.
#   CARGO_TARGET_DIR  where cargo builds formwork (default target/).
set -euo pipefail
cd "$(dirname "$0")/.."
export CANDLE_BARRIER_POOL_SPIN_LIMIT="${CANDLE_BARRIER_POOL_SPIN_LIMIT:-0}"
LLAMA_PY="${LLAMA_PY:-/tmp/llamavenv/bin/python}"
RUNS="${RUNS:-3}"
THREADS="${THREADS:-1 2}"
GEN=128
MODELS=("$@")
[ ${#MODELS[@]} -eq 0 ] && MODELS=(smollm2-135m gemma3-270m)

cargo build --release --quiet --bin formwork
BIN="${CARGO_TARGET_DIR:-target}/release/formwork"
PROMPT="$(cat benches/prompt.txt)"
have_llama=0
if [ -n "${LLAMA_BENCH:-}" ] && [ -x "$LLAMA_BENCH" ]; then have_llama=2
elif [ -x "$LLAMA_PY" ] && "$LLAMA_PY" -c "import llama_cpp" 2>/dev/null; then have_llama=1; fi

model_path() { # registry name -> file, from `formwork models list`
  "$BIN" models list | awk -v n="$1" '$1 == n { getline; print $NF }'
}

printf '| model | engine | threads | prompt tok | prefill tok/s | decode tok/s | peak RSS MB |\n'
printf '|---|---|---|---|---|---|---|\n'
for model in "${MODELS[@]}"; do
  if [ -f "$model" ]; then path="$model"; else path="$(model_path "$model")"; fi
  if [ ! -f "$path" ]; then echo "| $model | (absent: formwork models fetch $model) |||||" ; continue; fi
  for t in $THREADS; do
    best_pre=0; best_dec=0; rss=0; ptok=0
    for _ in $(seq "$RUNS"); do
      err="$( { /usr/bin/time -v "$BIN" generate --model "$path" --prompt "$PROMPT" \
                --max-tokens $GEN --ignore-eos --verbose --threads "$t" >/dev/null; } 2>&1 )"
      pre=$(sed -n 's/^prefill: \([0-9]*\) tokens .* = \([0-9.]*\) tok\/s/\2/p' <<<"$err")
      ptok=$(sed -n 's/^prefill: \([0-9]*\) tokens .*/\1/p' <<<"$err")
      dec=$(sed -n 's/^decode: .* = \([0-9.]*\) tok\/s/\1/p' <<<"$err")
      r=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' <<<"$err")
      best_pre=$(python3 -c "print(max($best_pre, $pre))")
      best_dec=$(python3 -c "print(max($best_dec, $dec))")
      rss=$(python3 -c "print(max($rss, $r))")
    done
    printf '| %s | formwork | %s | %s | %s | %s | %.0f |\n' "$model" "$t" "$ptok" "$best_pre" "$best_dec" "$(python3 -c "print($rss/1024)")"
    if [ $have_llama = 2 ]; then
      # The same number of prompt tokens as formwork's prefill (llama-bench feeds random
      # tokens of that count), then 128 decoded tokens; mean tokens/s over RUNS runs.
      out="$( { /usr/bin/time -v "$LLAMA_BENCH" -m "$path" -p "$ptok" -n $GEN -t "$t" \
                -r "$RUNS" -o json; } 2>/tmp/llama-bench-time.$$ )"
      r=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' /tmp/llama-bench-time.$$)
      rm -f /tmp/llama-bench-time.$$
      python3 -c "
import json, sys
rows = json.loads(sys.argv[1])
pre = next(r['avg_ts'] for r in rows if r['n_prompt'] > 0)
dec = next(r['avg_ts'] for r in rows if r['n_gen'] > 0)
print('| $model | llama.cpp (llama-bench) | $t | $ptok | %.1f | %.1f | %.0f |' % (pre, dec, int(sys.argv[2]) / 1024))
" "$out" "$r"
    elif [ $have_llama = 1 ]; then
      j="$("$LLAMA_PY" benches/llamacpp_bench.py --model "$path" --threads "$t" --gen-tokens $GEN --runs "$RUNS")"
      python3 -c "import json,sys; d=json.loads(sys.argv[1]); print('| %s | llama.cpp | %d | %d | %s | %s | %.0f |' % ('$model', d['threads'], d['prompt_tokens'], d['prefill_tok_s'], d['decode_tok_s'], d['peak_rss_mb']))" "$j"
    fi
  done
done
[ $have_llama != 0 ] || echo "(llama.cpp rows skipped: no LLAMA_BENCH, and $LLAMA_PY cannot import llama_cpp)" >&2
