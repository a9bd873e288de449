#!/bin/sh
# Mask benchmark before (eba5fd5, the last commit before the grammar split) and after
# (HEAD) the split, interleaved in one session: before, after, before, after, ...
# Each binary: `cargo bench -p formwork-grammar --bench masks --no-run` at that commit.
# FORMWORK_BENCH_N=0: every JSONSchemaBench schema; all three vocabularies.
set -e
for i in 1 2 3 4 5; do
  for w in before after; do
    FORMWORK_BENCH_N=0 /tmp/masks-$w --bench > $w-$i.txt 2>&1
  done
done
