#!/usr/bin/env python3
"""Rescore an old `formwork bench` report.json (from before the slot measures) with the
measures the bench now computes: the all-null baseline, slot precision/recall/F1, false
fills and misses, and filled free-text values not found in the text (the fields
`--source-strings` marks), per mode; with a third argument (another report.json), only the records
whose ids that report also has (to compare runs on the same records). Same rules as src/bench/fields.rs and score.rs: empty = null, absent or
false; strings compared trimmed and lowercased; a record that does not conform fills
nothing. With --grounded, the rule of `--grounded` (src/engine/ground.rs) is applied to
each conforming value first, as free decoding applies it after the fact: every nullable
string (free text, or an enum of strings and null) whose value the record's text does not
contain (case-insensitive, runs of whitespace as one space) becomes null; with
--grounded=distinct, so does one that repeats an earlier grounded value of the answer.
Usage: scripts/rescore_report.py [--grounded[=distinct]] DATASET.jsonl REPORT.json [ONLY_IDS_OF.json]"""
import json
import sys

def leaves(v, p=""):
    if isinstance(v, dict) and v:
        for k, x in v.items():
            yield from leaves(x, p + "/" + k.replace("~", "~0").replace("/", "~1"))
    else:
        yield p, v

def get(v, ptr):
    for part in ptr.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(v, list) and part.isdigit() and int(part) < len(v):
            v = v[int(part)]
        elif isinstance(v, dict) and part in v:
            v = v[part]
        else:
            return None
    return v

def empty(v):
    return v is None or v is False

def equal(a, b):
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b

def free_text_pointers(schema):
    """Pointers of the object properties `--source-strings` would mark (nullable strings
    with no enum, const, format or pattern; `$ref` followed inside the schema)."""
    def resolve(v):
        for _ in range(8):
            r = v.get("$ref") if isinstance(v, dict) else None
            if not (isinstance(r, str) and r.startswith("#")):
                break
            t = schema
            for part in r[1:].split("/")[1:]:
                t = t.get(part.replace("~1", "/").replace("~0", "~"), {})
            v = t
        return v
    def free(m):
        return not any(k in m for k in ("enum", "const", "format", "pattern"))
    def types(m):
        t = m.get("type")
        return [t] if isinstance(t, str) else list(t or [])
    def marked(v):
        m = resolve(v)
        if not isinstance(m, dict):
            return False
        if sorted(types(m)) == ["null", "string"] and free(m):
            return True
        for k in ("anyOf", "oneOf"):
            bs = m.get(k)
            if isinstance(bs, list) and len(bs) == 2:
                nulls = [b for b in bs if isinstance(b, dict) and types(resolve(b)) == ["null"]]
                strs = [b for b in bs if isinstance(b, dict) and types(resolve(b)) == ["string"]
                        and free(resolve(b)) and free(b)]
                if len(nulls) == 1 and len(strs) == 1:
                    return True
        return False
    out = []
    def walk(v, p):
        m = resolve(v)
        if isinstance(m, dict):
            for k, x in (m.get("properties") or {}).items():
                q = p + "/" + k.replace("~", "~0").replace("/", "~1")
                if marked(x):
                    out.append(q)
                else:
                    walk(x, q)
    walk(schema, "")
    return out

def fold(s):
    return " ".join(s.split()).lower()

def grounded_pointers(schema):
    """The pointers `--grounded` judges: the free-text ones, and nullable enums of strings."""
    out = free_text_pointers(schema)
    def walk(m, p):
        for k, x in (m.get("properties") or {}).items():
            q = p + "/" + k.replace("~", "~0").replace("/", "~1")
            if "$ref" in x and x["$ref"].startswith("#"):
                t = schema
                for part in x["$ref"][1:].split("/")[1:]:
                    t = t.get(part.replace("~1", "/").replace("~0", "~"), {})
                x = t
            e = x.get("enum")
            if isinstance(e, list) and None in e and any(isinstance(v, str) for v in e) \
                    and all(v is None or isinstance(v, str) for v in e):
                if q not in out:
                    out.append(q)
            elif isinstance(x, dict):
                walk(x, q)
    walk(schema, "")
    return out

def ground(value, schema, text, distinct=False):
    """`--grounded` after the fact: a copy of `value` with unstated grounded strings null
    (and with `distinct`, those repeating an earlier grounded value, in document order)."""
    value = json.loads(json.dumps(value))
    ptrs = set(grounded_pointers(schema))
    kept = []
    for ptr, x in list(leaves(value)):
        if ptr not in ptrs or not isinstance(x, str):
            continue
        if fold(x) and fold(x) in fold(text) and not (distinct and fold(x) in kept):
            kept.append(fold(x))
        else:
            parts = [q.replace("~1", "/").replace("~0", "~") for q in ptr.split("/")[1:]]
            v = value
            for q in parts[:-1]:
                v = v[q]
            v[parts[-1]] = None
    return value

def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--grounded")]
    grounded = len(args) != len(sys.argv) - 1
    distinct = "--grounded=distinct" in sys.argv
    sys.argv[1:] = args
    gold = {}
    texts = {}
    schemas = {}
    for line in open(sys.argv[1]):
        if line.strip():
            d = json.loads(line)
            gold[d["id"]] = d["expected"]
            texts[d["id"]] = d["text"]
            schemas[d["id"]] = d["schema"]
    report = json.load(open(sys.argv[2]))
    only = None
    if len(sys.argv) > 3:
        only = {r["id"] for r in json.load(open(sys.argv[3]))["records"]}
    modes = {}
    for r in report["records"]:
        if only is not None and r["id"] not in only:
            continue
        m = modes.setdefault(r["mode"], dict(n=0, total=0, right=0, gold_empty=0, hit=0, wrong=0, ff=0, miss=0, emp=0, ft=0, nit=0))
        m["n"] += 1
        conforming = r["verdict"] in ("valid", "semantic_invalid")
        value = r["value"] if conforming else None
        if grounded and value is not None:
            value = ground(value, schemas[r["id"]], texts[r["id"]], distinct)
        if value is not None:
            for ptr in free_text_pointers(schemas[r["id"]]):
                x = get(value, ptr)
                if isinstance(x, str) and x != "":
                    m["ft"] += 1
                    m["nit"] += x not in texts[r["id"]]
        for ptr, g in leaves(gold[r["id"]]):
            p = get(value, ptr) if value is not None else None
            m["total"] += 1
            if grounded:
                # As the bench: a record that does not conform gets no field right.
                m["right"] += value is not None and (
                    (empty(g) and empty(p)) or (not empty(g) and not empty(p) and equal(p, g)))
            else:
                m["right"] += r["field_hits"].get(ptr, False)
            m["gold_empty"] += empty(g)
            if empty(g) and empty(p):
                m["emp"] += 1
            elif empty(g):
                m["ff"] += 1
            elif empty(p):
                m["miss"] += 1
            elif equal(p, g):
                m["hit"] += 1
            else:
                m["wrong"] += 1
    print("| mode | records | field acc. | all-null | slot P | slot R | slot F1 | false fills | misses | not in text |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, m in modes.items():
        pred = m["hit"] + m["wrong"] + m["ff"]
        goldf = m["hit"] + m["wrong"] + m["miss"]
        P = m["hit"] / pred if pred else float("nan")
        R = m["hit"] / goldf if goldf else float("nan")
        F = 2 * m["hit"] / (pred + goldf) if pred + goldf else float("nan")
        print(f"| {mode} | {m['n']} | {100*m['right']/m['total']:.1f}% | {100*m['gold_empty']/m['total']:.1f}% | "
              f"{P:.2f} | {R:.2f} | {F:.2f} | {100*m['ff']/(m['ff']+m['emp']):.1f}% | {100*m['miss']/goldf:.1f}% | {m['nit']} of {m['ft']} |")

if __name__ == "__main__":
    main()
