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
#              come from it (per round: `-p PROMPT_TOKENS -n 0 -r 1` for prefill, and
#              `-p 0 -n 128 -d PROMPT_TOKENS -r 1` for decode after a context as long as
#              the prompt, as formwork decodes)
#              instead of llama-cpp-python. Build it from llama.cpp's source with
#              `cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF && cmake --build
#              build --target llama-bench` (about 15 minutes on 2 cores).
#   LLAMA_PY   a Python with llama-cpp-python (default /tmp/llamavenv/bin/python); the
#              llama.cpp rows are skipped when neither it nor LLAMA_BENCH is usable.
#   RUNS       rounds per configuration (default 3): each round runs formwork, then llama.cpp,
#              once; the table gives the median of the rounds for each.
#   THREADS    thread counts to try (default "1 2").
#   PROMPT_FILE  the prompt (default benches/prompt.txt, about 200 tokens).
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
PROMPT="$(cat "${PROMPT_FILE:-benches/prompt.txt}")"
have_llama=0
if [ -n "${LLAMA_BENCH:-}" ] && [ -x "$LLAMA_BENCH" ]; then have_llama=2
elif [ -x "$LLAMA_PY" ] && "$LLAMA_PY" -c "import llama_cpp" 2>/dev/null; then have_llama=1; fi

model_path() { # registry name -> file, from `formwork models list`
  "$BIN" models list | awk -v n="$1" '$1 == n { getline; print $NF }'
}

median() { python3 -c "import statistics,sys; print(round(statistics.median(map(float, sys.argv[1:])), 1))" "$@"; }
ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print('%.2f×' % (a / b) if b else '')" "$1" "$2"; }

# One round = formwork once, then llama.cpp once, so that the machine's load falls on both
# alike; each figure is the median of the RUNS rounds.
printf '| model | threads | prompt tok | prefill tok/s formwork | llama.cpp | ratio | decode tok/s formwork | llama.cpp | ratio | peak RSS MB formwork | llama.cpp |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for model in "${MODELS[@]}"; do
  if [ -f "$model" ]; then path="$model"; else path="$(model_path "$model")"; fi
  if [ ! -f "$path" ]; then echo "| $model | (absent: formwork models fetch $model) ||||||||||" ; continue; fi
  for t in $THREADS; do
    pres=(); decs=(); rss=0; ptok=0; lpres=(); ldecs=(); lrss=0
    for _ in $(seq "$RUNS"); do
      err="$( { /usr/bin/time -v "$BIN" generate --model "$path" --prompt "$PROMPT" \
                --max-tokens $GEN --ignore-eos --verbose --threads "$t" >/dev/null; } 2>&1 )"
      pres+=("$(sed -n 's/^prefill: \([0-9]*\) tokens .* = \([0-9.]*\) tok\/s/\2/p' <<<"$err")")
      ptok=$(sed -n 's/^prefill: \([0-9]*\) tokens .*/\1/p' <<<"$err")
      decs+=("$(sed -n 's/^decode: .* = \([0-9.]*\) tok\/s/\1/p' <<<"$err")")
      r=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' <<<"$err")
      rss=$(( r > rss ? r : rss ))
      if [ $have_llama = 2 ]; then
        # The same number of prompt tokens as formwork's prefill (llama-bench feeds random
        # tokens of that count); then GEN decoded tokens after a context of that many
        # (`-d`), as formwork decodes after its prompt (llama-bench's own `-n` decodes
        # from an empty context). One run of each.
        out="$( { /usr/bin/time -v "$LLAMA_BENCH" -m "$path" -p "$ptok" -n 0 -t "$t" \
                  -r 1 -o json; } 2>/tmp/llama-bench-time.$$ )"
        r=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' /tmp/llama-bench-time.$$)
        out2="$( { /usr/bin/time -v "$LLAMA_BENCH" -m "$path" -p 0 -n $GEN -d "$ptok" -t "$t" \
                  -r 1 -o json; } 2>/tmp/llama-bench-time.$$ )"
        r2=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' /tmp/llama-bench-time.$$)
        r=$(( r2 > r ? r2 : r ))
        rm -f /tmp/llama-bench-time.$$
        read -r lp ld < <(python3 -c "
import json, sys
pre, gen = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(next(r['avg_ts'] for r in pre if r['n_prompt'] > 0), next(r['avg_ts'] for r in gen if r['n_gen'] > 0))
" "$out" "$out2")
      elif [ $have_llama = 1 ]; then
        j="$("$LLAMA_PY" benches/llamacpp_bench.py --model "$path" --threads "$t" --gen-tokens $GEN --runs 1)"
        read -r lp ld r < <(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d['prefill_tok_s'], d['decode_tok_s'], int(d['peak_rss_mb'] * 1024))" "$j")
      fi
      if [ $have_llama != 0 ]; then lpres+=("$lp"); ldecs+=("$ld"); lrss=$(( r > lrss ? r : lrss )); fi
    done
    pre=$(median "${pres[@]}"); dec=$(median "${decs[@]}")
    if [ $have_llama != 0 ]; then
      lpre=$(median "${lpres[@]}"); ldec=$(median "${ldecs[@]}")
      printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d |\n' "$model" "$t" "$ptok" \
        "$pre" "$lpre" "$(ratio "$pre" "$lpre")" "$dec" "$ldec" "$(ratio "$dec" "$ldec")" \
        $((rss / 1024)) $((lrss / 1024))
    else
      printf '| %s | %s | %s | %s | | | %s | | | %d | |\n' "$model" "$t" "$ptok" "$pre" "$dec" $((rss / 1024))
    fi
  done
done
[ $have_llama != 0 ] || echo "(llama.cpp rows skipped: no LLAMA_BENCH, and $LLAMA_PY cannot import llama_cpp)" >&2
