#!/usr/bin/env python3
"""Split the SNIPS train examples into a held-out set and a shot pool.

No default of formwork (null margin, review threshold, shot count, prompt wording) but
`--fill-above` (set on both halves, each with the other's shots: docs/extraction.md) was
set on the records this writes as held out: they are train-split records
(`../shared/data/extraction/snips_train_examples.jsonl`), never in the public set, and
the shots for them come from the other half only. Per intent, records in file order
alternate: even positions are held out, odd ones the pool (60 and 60).

    python3 benches/snips_split.py OUT_DIR [--train PATH]

writes OUT_DIR/heldout.jsonl and OUT_DIR/pool.jsonl. Then (README "Extraction"):

    formwork bench --dataset OUT_DIR/heldout.jsonl --examples OUT_DIR/pool.jsonl ...
"""
import argparse
import collections
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", default="../shared/data/extraction/snips_train_examples.jsonl")
    a = ap.parse_args()
    try:
        lines = [l for l in open(a.train, encoding="utf-8") if l.strip()]
    except OSError as e:
        sys.exit(f"snips_split: {a.train}: {e.strerror} (set --train to the shared data's copy)")
    seen = collections.Counter()
    held, pool = [], []
    for n, l in enumerate(lines, 1):
        try:
            r = json.loads(l)
            intent = r["schema_name"]
        except (ValueError, KeyError) as e:
            sys.exit(f"snips_split: {a.train}:{n}: not a record with schema_name ({e})")
        (held if seen[intent] % 2 == 0 else pool).append(l if l.endswith("\n") else l + "\n")
        seen[intent] += 1
    os.makedirs(a.out, exist_ok=True)
    for name, rows in (("heldout.jsonl", held), ("pool.jsonl", pool)):
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            f.writelines(rows)
    print(f"{len(held)} held out, {len(pool)} in the pool: {a.out}")


if __name__ == "__main__":
    main()
