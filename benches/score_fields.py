#!/usr/bin/env python3
"""Field accuracy and slot F1 of answers from any engine, as `formwork bench` scores them.

    python3 benches/score_fields.py DATASET.jsonl ANSWERS [ANSWERS ...]

DATASET: `{id, text, schema, expected}` lines (../shared/data/extraction/snips_public.jsonl).
ANSWERS: a `formwork bench` report.json (its masked records' `value`s), or the JSONL that
`benches/serve_bench.py` writes per server and level (each line's `content`, parsed as
JSON; content that does not parse, or an HTTP error, is an invalid answer).

The rules are bench's (src/bench/fields.rs), through scripts/rescore_report.py's helpers: the
leaf fields of `expected`, objects walked, arrays and scalars leaves; strings equal after
trimming and lowercasing, numbers as numbers; an invalid answer has every field wrong.
Slots: null, absent or `false` is empty; a hit is a filled gold equal to a filled answer, a
false fill an answer where the gold is empty, a miss the reverse; precision = hits /
answers filled, recall = hits / golds filled. The all-null answer (null everywhere, `false`
for booleans) is scored beside, as the baseline. This script does not check the schema: serve_bench.py's `valid` column does.
"""
import json
import os
import sys

# The field rules are the rescorer's, which follows src/bench/fields.rs.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
from rescore_report import empty, equal, get as lookup, leaves  # noqa: E402


def null_of(v):
    """The all-null answer for a gold value: null everywhere, `false` for a boolean."""
    if isinstance(v, dict) and v:
        return {k: null_of(x) for k, x in v.items()}
    return False if isinstance(v, bool) else None


def score(gold, answers):
    """answers: id -> value, or None for an invalid answer."""
    n = correct = hit = wrong = ff = miss = 0
    for rid, expected in gold.items():
        ans = answers.get(rid, None)
        for path, g in leaves(expected):
            n += 1
            if ans is None:
                p_valid, p = False, None
            else:
                p_valid, p = True, lookup(ans, path)
            if p_valid and ((p is None and g is None) or (p is not None and equal(p, g))):
                correct += 1
            pe, ge = (not p_valid) or empty(p), empty(g)
            if pe and ge:
                continue
            if not pe and ge:
                ff += 1
            elif pe and not ge:
                miss += 1
            elif equal(p, g):
                hit += 1
            else:
                wrong += 1
    prec = hit / (hit + wrong + ff) if hit + wrong + ff else 0.0
    rec = hit / (hit + wrong + miss) if hit + wrong + miss else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"answers": sum(1 for r in gold if answers.get(r) is not None), "records": len(gold),
            "fields": n, "field_acc": correct / n, "slot_p": prec, "slot_r": rec, "slot_f1": f1,
            "false_fills": ff, "misses": miss, "wrong": wrong, "hits": hit}


def load_answers(path):
    if path.endswith(".json"):
        rep = json.load(open(path))
        return {r["id"]: (r["value"] if r.get("parsed") and r["verdict"] == "valid" else None)
                for r in rep["records"] if r["mode"] == "masked"}
    out = {}
    for line in open(path):
        row = json.loads(line)
        try:
            out[row["id"]] = json.loads(row["content"]) if row.get("status") == 200 else None
        except (TypeError, ValueError):
            out[row["id"]] = None
    return out


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    gold = {}
    for line in open(sys.argv[1]):
        if line.strip():
            r = json.loads(line)
            gold[r["id"]] = r["expected"]
    rows = [("all-null answer", score(gold, {i: null_of(e) for i, e in gold.items()}))]
    for p in sys.argv[2:]:
        answers = load_answers(p)
        rows.append((p, score({i: e for i, e in gold.items() if i in answers}, answers)))
    print("| answers | records answered | field acc. | slot P | slot R | slot F1 | false fills | misses |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {s['answers']}/{s['records']} | {100 * s['field_acc']:.1f}% | {s['slot_p']:.2f} | "
              f"{s['slot_r']:.2f} | {s['slot_f1']:.2f} | {s['false_fills']} | {s['misses']} |")


if __name__ == "__main__":
    main()
