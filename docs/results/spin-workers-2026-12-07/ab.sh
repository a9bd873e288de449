#!/usr/bin/env bash
# Rounds of: rayon build, spinning build, llama-bench (1 run each), interleaved; helper paused.
set -u
cd /work/main
pause() { for p in $(ps -eo pid,ni --no-headers | awk '$2==19{print $1}'); do kill -STOP $p 2>/dev/null; done; }
resume() { for p in $(ps -eo pid,ni --no-headers | awk '$2==19{print $1}'); do kill -CONT $p 2>/dev/null; done; }
trap resume EXIT
F="$1"; RUNS="${RUNS:-7}"; t="${T:-2}"
export CANDLE_BARRIER_POOL_SPIN_LIMIT=0
pause; sleep 10
for r in $(seq $RUNS); do
  pause
  line="round=$r t=$t load=$(cut -d' ' -f1 /proc/loadavg)"
  for b in /work/runs/formwork-rayon target/release/formwork; do
    v=$($b generate --model "$F" --prompt "The total is" --max-tokens 64 --ignore-eos --verbose --threads $t 2>&1 >/dev/null | sed -n 's/^decode: .* = \([0-9.]*\) tok\/s/\1/p')
    line="$line $(basename $b)=$v"
  done
  v=$(/work/llamacpp/build/bin/llama-bench -m "$F" -p 0 -n 64 -t $t -r 1 -o json 2>/dev/null | python3 -c "import json,sys; print('%.2f'%json.load(sys.stdin)[0]['samples_ts'][0])")
  echo "$line llama-bench=$v"
done
