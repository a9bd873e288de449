#!/usr/bin/env python3
"""Estimate what `--null-bias B` would do, from one masked `formwork bench` report.json.

The bench records, per record, every choice between `null` and a value that the
masked decoder made (`null_decisions`: the field's JSON Pointer, the model's margin
for null in nats before any bias, and whether null was written). A bias B turns a
value into null exactly where `gap + B > 0`. This script applies those flips to each
record's value (a flipped object field nulls everything under it) and rescores with
the bench's rules (empty = null, absent or false; strings trimmed and lowercased; a
record that does not conform fills nothing), for a grid of B.

It is a first-order estimate: after a flip the real decoder would go on from a
different text, so later fields may change too. Use it to pick B on a tuning set
(the train examples), then measure that B for real with `bench --null-bias B`.
Only B >= the report's own bias can be estimated (a value the run never wrote is
unknown).

Usage: scripts/null_bias_sweep.py DATASET.jsonl REPORT.json [--mode masked] [B ...]
"""
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rescore_report import empty, equal, get, leaves  # the bench's scoring rules, once

def set_null(v, ptr):
    parts = [p.replace("~1", "/").replace("~0", "~") for p in ptr.split("/")[1:]]
    for part in parts[:-1]:
        if isinstance(v, list) and part.isdigit() and int(part) < len(v):
            v = v[int(part)]
        elif isinstance(v, dict) and part in v:
            v = v[part]
        else:
            return
    last = parts[-1] if parts else None
    if isinstance(v, dict) and last in v:
        v[last] = None
    elif isinstance(v, list) and last is not None and last.isdigit() and int(last) < len(v):
        v[int(last)] = None

def score(records, gold, bias):
    m = dict(total=0, right=0, gold_empty=0, hit=0, wrong=0, ff=0, miss=0, emp=0, flips=0)
    for r in records:
        conforming = r["verdict"] in ("valid", "semantic_invalid")
        value = copy.deepcopy(r["value"]) if conforming else None
        if value is not None and bias is not None:
            for d in r.get("null_decisions", []):
                if not d["null"] and d["gap"] + bias > 0:
                    set_null(value, d["field"])
                    m["flips"] += 1
        for ptr, g in leaves(gold[r["id"]]):
            p = get(value, ptr) if value is not None else None
            m["total"] += 1
            m["gold_empty"] += empty(g)
            if empty(g) and empty(p):
                m["emp"] += 1
                # As the bench: a field is right when its value equals the gold.
                m["right"] += value is not None and (p == g or (p is None and g is None))
            elif empty(g):
                m["ff"] += 1
            elif empty(p):
                m["miss"] += 1
            elif equal(p, g):
                m["hit"] += 1
                m["right"] += 1
            else:
                m["wrong"] += 1
    return m

def main(argv):
    mode = "masked"
    if "--mode" in argv:
        i = argv.index("--mode")
        mode = argv[i + 1]
        del argv[i:i + 2]
    dataset, report = argv[1], argv[2]
    biases = [float(b) for b in argv[3:]] or [0, 0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8]
    gold = {}
    for line in open(dataset):
        if line.strip():
            d = json.loads(line)
            gold[d["id"]] = d["expected"]
    records = [r for r in json.load(open(report))["records"] if r["mode"] == mode]
    decisions = sum(len(r.get("null_decisions", [])) for r in records)
    print(f"{len(records)} records, mode {mode}, {decisions} null-or-value decisions recorded")
    print("| null bias | flips | field acc. | all-null | slot P | slot R | slot F1 | false fills | misses |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b in biases:
        m = score(records, gold, b)
        pred = m["hit"] + m["wrong"] + m["ff"]
        goldf = m["hit"] + m["wrong"] + m["miss"]
        P = m["hit"] / pred if pred else float("nan")
        R = m["hit"] / goldf if goldf else float("nan")
        F = 2 * m["hit"] / (pred + goldf) if pred + goldf else float("nan")
        print(f"| {b:g} | {m['flips']} | {100*m['right']/m['total']:.1f}% | "
              f"{100*m['gold_empty']/m['total']:.1f}% | {P:.2f} | {R:.2f} | {F:.2f} | "
              f"{100*m['ff']/max(1, m['ff']+m['emp']):.1f}% | {100*m['miss']/max(1, goldf):.1f}% |")

if __name__ == "__main__":
    main(sys.argv)
