#!/bin/sh
# Instruction counts (deterministic, unlike times) of the mask benchmark before and
# after the split: 60 schemas (every k-th file), the Qwen2.5 vocabulary (152k).
for w in before after; do
  FORMWORK_BENCH_N=60 FORMWORK_BENCH_MODEL=qwen2.5 valgrind --tool=callgrind \
    --callgrind-out-file=/tmp/cg-$w.out /tmp/masks-$w --bench > cg-$w.txt 2>&1 &
done
wait
for w in before after; do
  echo "== $w"; callgrind_annotate /tmp/cg-$w.out 2>/dev/null | grep -E "PROGRAM TOTALS|^ *[0-9,]+ .*(compute_mask|Matcher|matcher|walk|commit)" | head -12
done > callgrind-summary.txt
# Inclusive counts of the entry points (callgrind-inclusive.txt):
for w in before after; do
  echo "== $w"; callgrind_annotate --inclusive=yes /tmp/cg-$w.out 2>/dev/null | grep -E "PROGRAM TOTALS|Matcher::compute_mask|compile::compile \[|Matcher::commit|TokTrie::new \[" | head -6
done > callgrind-inclusive.txt
