#!/usr/bin/env python3
"""How `--fill-above P` was set: score every weighed null of a bench run as if its
quotation had been written at each bar.

    formwork bench --dataset D --examples POOL --model M --modes masked \\
        --fill-above 1 --report DIR
    python3 benches/fill_bar.py DIR/report.json D [DIR2/report.json D2 ...]

Run the bench with `--fill-above 1` (nothing filled), so that every weighed null is a
null the model wrote. Each record's `weighed` entries (field, quotation, P(value | a
value)) are read against the dataset's gold: at bar B, a quotation with P > B is
*fixed* when it is the gold (case and surrounding spaces folded, as the bench scores
strings), *broken* when the gold is null, and *still wrong* otherwise. Pairs of
(report, dataset) are added up. The fields decoded after a filled one are taken as
unchanged, which a real run at that bar need not keep. Standard library only.
"""
import json
import sys

BARS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def at(v, pointer):
    for k in pointer.strip("/").split("/"):
        if not isinstance(v, dict):
            return None
        v = v.get(k)
    return v


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: fill_bar.py REPORT.json DATASET.jsonl [REPORT.json DATASET.jsonl ...]")
    tally = {b: [0, 0, 0] for b in BARS}
    weighed = taken = 0
    for rep_path, data_path in zip(args[::2], args[1::2]):
        try:
            rep = json.load(open(rep_path, encoding="utf-8"))
            gold = {}
            for n, line in enumerate(open(data_path, encoding="utf-8"), 1):
                if line.strip():
                    r = json.loads(line)
                    gold[r["id"]] = r["expected"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"fill_bar: {rep_path} / {data_path}: {e}")
        for rec in rep.get("records", []):
            g = gold.get(rec["id"])
            for w in rec.get("weighed", []):
                weighed += 1
                taken += w["taken"]
                want = at(g, w["field"])
                for b in BARS:
                    if w["p"] <= b:
                        continue
                    if want is None:
                        tally[b][1] += 1
                    elif str(want).strip().lower() == w["quotation"].strip().lower():
                        tally[b][0] += 1
                    else:
                        tally[b][2] += 1
    print(f"{weighed} weighed nulls ({taken} filled in the run)")
    print("| bar | fixed | broken | still wrong |")
    print("|---|---|---|---|")
    for b in BARS:
        f, br, s = tally[b]
        print(f"| {b} | {f} | {br} | {s} |")


if __name__ == "__main__":
    main()
