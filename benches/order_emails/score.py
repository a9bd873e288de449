#!/usr/bin/env python3
"""Score `formwork extract` on the new order e-mails (benches/order_emails/emails.jsonl).

Run README command 1's settings on every e-mail and score (from the repository root):

    python3 benches/order_emails/score.py --run --out RESULTS_DIR \
        [--formwork target/release/formwork] [--model qwen2.5-coder-0.5b] \
        [-- EXTRA EXTRACT ARGS, e.g. --shots 3 --grounded=distinct]

This writes RESULTS_DIR/input.jsonl (id, text), runs
`formwork extract --jsonl RESULTS_DIR/input.jsonl --out RESULTS_DIR/out.jsonl
 --schema examples/order_email.schema.json --examples examples/order_email.examples.jsonl
 --model MODEL --parallel 2 EXTRA...`, then scores it. To score an existing output:

    python3 benches/order_emails/score.py --results OUT.jsonl --out RESULTS_DIR

Reports (per e-mail and totals), in RESULTS_DIR/report.md and RESULTS_DIR/report.json:
- whole: the e-mail wholly right (rows, address, billing and urgency all right);
- rows: the (sku_grezzo, quantita) pairs as a multiset: matched rows, extra rows
  (predicted, not in the gold) and missed rows (gold, not predicted), and their F1
  (this set's slot F1);
- address (`indirizzo_spedizione`) and billing (`cliente_fatturazione`), exact after
  folding case and spaces;
- urgency: per gold row, right when a matched predicted row has the same `urgenza`;
- not stated: every non-null string value of a data field (`sku_grezzo`,
  `quantita_testuale`, `indirizzo_spedizione`, `cliente_fatturazione`) whose text is not
  in the e-mail (case and runs of whitespace folded). `ragionamento` (required, a
  quotation that may join two sentences) is counted apart, as unquoted reasoning.
Alongside: the all-null baseline (an answer with no rows and null address and billing)
on the same measures.

Review: every value formwork wrote for `sku_grezzo`, `quantita`, `urgenza` (per row) and
the address and billing is judged right or wrong (a row is paired with the gold row of
the same SKU and quantity, else of the same SKU; a row with neither is wrong in all three),
then three ways to pick values for a person to check are compared on how many of the
wrong ones they catch: the least-confident 10% and 20% of values (`confidence`), the
values below `--review-below` (`needs_review`), and the values the model itself lists in
`campi_incerti` (the schema's "uncertain fields"). Rows the model missed hold no value to
check and are counted apart. Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCHEMA = os.path.join("examples", "order_email.schema.json")
EXAMPLES = os.path.join("examples", "order_email.examples.jsonl")
DATA_STRINGS = ("sku_grezzo", "quantita_testuale")
TOP_STRINGS = ("indirizzo_spedizione", "cliente_fatturazione")


def fold(s):
    return " ".join(s.split()).lower()


def norm_sku(s):
    return fold(s) if isinstance(s, str) else s


def row_key(r):
    return (norm_sku(r.get("sku_grezzo")), r.get("quantita"))


def same_text(a, b):
    if a is None or b is None:
        return a is None and b is None
    return isinstance(a, str) and isinstance(b, str) and fold(a) == fold(b)


def not_stated(value, text):
    """The data strings of `value` that the e-mail does not state, and unquoted reasoning."""
    doc = fold(text)
    bad, reasoning = [], []
    if not isinstance(value, dict):
        return bad, reasoning
    rows = value.get("righe") if isinstance(value.get("righe"), list) else []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            continue
        for k in DATA_STRINGS:
            v = r.get(k)
            if isinstance(v, str) and fold(v) and fold(v) not in doc:
                bad.append(f"righe.{i}.{k}={v!r}")
        v = r.get("ragionamento")
        if isinstance(v, str) and fold(v) not in doc:
            reasoning.append(f"righe.{i}.ragionamento")
    for k in TOP_STRINGS:
        v = value.get(k)
        if isinstance(v, str) and fold(v) and fold(v) not in doc:
            bad.append(f"{k}={v!r}")
    return bad, reasoning


def score_one(gold, pred, text):
    g_rows = gold["righe"]
    p_rows = pred.get("righe") if isinstance(pred, dict) and isinstance(pred.get("righe"), list) else []
    p_rows = [r for r in p_rows if isinstance(r, dict)]
    g = Counter(row_key(r) for r in g_rows)
    p = Counter(row_key(r) for r in p_rows)
    matched = sum((g & p).values())
    extra = sum((p - g).values())
    missed = sum((g - p).values())
    # Urgency: each gold row against the first unused predicted row with its key.
    used = [False] * len(p_rows)
    urg_right = 0
    for gr in g_rows:
        for j, pr in enumerate(p_rows):
            if not used[j] and row_key(pr) == row_key(gr):
                used[j] = True
                urg_right += pr.get("urgenza") == gr["urgenza"]
                break
    pred = pred if isinstance(pred, dict) else {}
    addr = same_text(pred.get("indirizzo_spedizione"), gold["indirizzo_spedizione"])
    bill = same_text(pred.get("cliente_fatturazione"), gold["cliente_fatturazione"])
    rows_right = extra == 0 and missed == 0
    bad, reasoning = not_stated(pred, text)
    return {
        "rows_gold": len(g_rows),
        "rows_pred": len(p_rows),
        "rows_matched": matched,
        "rows_extra": extra,
        "rows_missed": missed,
        "rows_right": rows_right,
        "address": addr,
        "billing": bill,
        "urgency_right": urg_right,
        "urgency_all": urg_right == len(g_rows),
        "not_stated": bad,
        "reasoning_unquoted": reasoning,
        "whole": rows_right and addr and bill and urg_right == len(g_rows),
    }


def totals(scores):
    n = len(scores)
    rows_gold = sum(s["rows_gold"] for s in scores)
    return {
        "emails": n,
        "whole": sum(s["whole"] for s in scores),
        "rows_gold": rows_gold,
        "rows_pred": sum(s["rows_pred"] for s in scores),
        "rows_matched": sum(s["rows_matched"] for s in scores),
        "rows_extra": sum(s["rows_extra"] for s in scores),
        "rows_missed": sum(s["rows_missed"] for s in scores),
        "rows_right_emails": sum(s["rows_right"] for s in scores),
        "address": sum(s["address"] for s in scores),
        "billing": sum(s["billing"] for s in scores),
        "urgency": sum(s["urgency_right"] for s in scores),
        "not_stated_values": sum(len(s["not_stated"]) for s in scores),
        "emails_with_not_stated": sum(bool(s["not_stated"]) for s in scores),
        "reasoning_unquoted": sum(len(s["reasoning_unquoted"]) for s in scores),
    }


def judged_values(gold, pred):
    """(JSON Pointer, right?) for each value a reviewer could check, and the missed gold rows."""
    out = []
    if not isinstance(pred, dict):
        return out, len(gold["righe"])
    rows = pred.get("righe") if isinstance(pred.get("righe"), list) else []
    free = list(range(len(gold["righe"])))
    pairs = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            continue
        pick = next((j for j in free if row_key(gold["righe"][j]) == row_key(r)), None)
        if pick is None:
            pick = next((j for j in free
                         if norm_sku(gold["righe"][j]["sku_grezzo"]) == norm_sku(r.get("sku_grezzo"))), None)
        if pick is not None:
            free.remove(pick)
        pairs.append((i, r, pick))
    for i, r, j in pairs:
        g = gold["righe"][j] if j is not None else None
        out.append((f"/righe/{i}/sku_grezzo", g is not None))
        out.append((f"/righe/{i}/quantita", g is not None and r.get("quantita") == g["quantita"]))
        out.append((f"/righe/{i}/urgenza", g is not None and r.get("urgenza") == g["urgenza"]))
    for k in TOP_STRINGS:
        out.append((f"/{k}", same_text(pred.get(k), gold[k])))
    return out, len(free)


def review(emails, by_id):
    """How many wrong values each way of picking values for review catches."""
    vals, missed_rows = [], 0
    for e in emails:
        rec = by_id.get(e["id"], {})
        conf = rec.get("confidence") or {}
        own = {"/" + str(p).replace(".", "/") for p in ((rec.get("value") or {}).get("campi_incerti") or [])
               if isinstance(p, str)}
        flagged = {r.split(" has confidence")[0] for r in rec.get("review_reasons") or []}
        judged, missed = judged_values(e["expected"], rec.get("value"))
        missed_rows += missed
        for ptr, right in judged:
            # A value the model did not write (a null) has its confidence under its pointer too.
            vals.append({"id": e["id"], "pointer": ptr, "right": right, "confidence": conf.get(ptr),
                         "own": ptr in own, "below": ptr in flagged})
    wrong = [v for v in vals if not v["right"]]
    res = {"values": len(vals), "wrong": len(wrong), "gold_rows_missed": missed_rows, "ways": {}}
    ranked = sorted(vals, key=lambda v: (v["confidence"] if v["confidence"] is not None else 1.0))
    for share in (0.05, 0.10, 0.20):
        k = round(share * len(vals))
        pick = ranked[:k]
        res["ways"][f"least-confident {share:.0%}"] = {
            "checked": k, "wrong_caught": sum(not v["right"] for v in pick)}
    for name, key in (("needs_review (below --review-below)", "below"),
                      ("the model's own campi_incerti", "own")):
        pick = [v for v in vals if v[key]]
        res["ways"][name] = {"checked": len(pick), "wrong_caught": sum(not v["right"] for v in pick)}
    pick = [v for v in vals if v["own"] or v["below"]]
    res["ways"]["either"] = {"checked": len(pick), "wrong_caught": sum(not v["right"] for v in pick)}
    res["wrong_values"] = [(v["id"], v["pointer"], v["confidence"], v["own"]) for v in wrong]
    return res


def row_f1(t):
    """F1 of the (SKU, quantity) rows: the slot F1 of this set (0 when nothing matched)."""
    m = t["rows_matched"]
    if m == 0:
        return 0.0
    p, r = m / (m + t["rows_extra"]), m / (m + t["rows_missed"])
    return 2 * p * r / (p + r)


def load_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def run_formwork(args, emails):
    os.makedirs(args.out, exist_ok=True)
    inp = os.path.join(args.out, "input.jsonl")
    out = os.path.join(args.out, "out.jsonl")
    with open(inp, "w", encoding="utf-8") as f:
        for e in emails:
            f.write(json.dumps({"id": e["id"], "text": e["text"]}, ensure_ascii=False) + "\n")
    if os.path.exists(out):
        os.remove(out)
    cmd = [args.formwork, "extract", "--jsonl", inp, "--out", out, "--schema", args.schema,
           "--examples", EXAMPLES, "--model", args.model, "--parallel", str(args.parallel),
           "--quiet"] + args.extra
    print("$ " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=ROOT, check=False)
    return out, cmd


def pct(a, b):
    return f"{100.0 * a / b:.0f}%" if b else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--emails", default=os.path.join(HERE, "emails.jsonl"))
    ap.add_argument("--results", help="an existing `formwork extract --jsonl` output")
    ap.add_argument("--run", action="store_true", help="run formwork first")
    ap.add_argument("--formwork", default=os.path.join("target", "release", "formwork"))
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--schema", default=SCHEMA, help="the schema (README command 1's by default)")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--out", required=True, help="folder for report.md and report.json")
    ap.add_argument("--label", default="", help="a line for the report's heading")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="-- then extra extract arguments")
    args = ap.parse_args()
    args.extra = [a for a in args.extra if a != "--"]
    emails = load_jsonl(args.emails)
    cmd = None
    if args.run:
        results, cmd = run_formwork(args, emails)
    elif args.results:
        results = args.results
    else:
        ap.error("give --run or --results")
    os.makedirs(args.out, exist_ok=True)
    earlier = os.path.join(args.out, "report.json")
    if cmd is None and os.path.exists(earlier):
        # Rescoring in place keeps the command that made the results.
        with open(earlier, encoding="utf-8") as f:
            old = json.load(f)
        cmd, args.label = old.get("command"), args.label or old.get("label", "")
    by_id = {str(r.get("id")): r for r in load_jsonl(results)}
    per, scores, base = [], [], []
    for e in emails:
        rec = by_id.get(e["id"], {})
        pred = rec.get("value")
        s = score_one(e["expected"], pred, e["text"])
        s["id"] = e["id"]
        s["verdict"] = rec.get("verdict", "missing")
        s["value"] = pred
        scores.append(s)
        base.append(score_one(e["expected"], {"righe": [], "indirizzo_spedizione": None,
                                              "cliente_fatturazione": None}, e["text"]))
    t, b = totals(scores), totals(base)
    t["row_f1"], b["row_f1"] = round(row_f1(t), 3), round(row_f1(b), 3)
    rv = review(emails, by_id)
    report = {"label": args.label, "command": cmd, "results": os.path.relpath(results),
              "totals": t, "all_null_baseline": b, "review": rv, "emails": scores}
    with open(os.path.join(args.out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
    n, rg = t["emails"], t["rows_gold"]
    lines = [f"# Order e-mails: {args.label or os.path.basename(args.out.rstrip('/'))}", ""]
    if cmd:
        lines += ["```", " ".join(cmd), "```", ""]
    lines += [
        "| measure | formwork | all-null baseline |",
        "|---|---|---|",
        f"| e-mails wholly right | {t['whole']}/{n} ({pct(t['whole'], n)}) | {b['whole']}/{n} |",
        f"| rows right (SKU, quantity) | {t['rows_matched']}/{rg} matched, {t['rows_extra']} extra, "
        f"{t['rows_missed']} missed; {t['rows_right_emails']}/{n} e-mails | 0/{rg} |",
        f"| row F1 (SKU, quantity) | {t['row_f1']:.2f} | {b['row_f1']:.2f} |",
        f"| address | {t['address']}/{n} | {b['address']}/{n} |",
        f"| billing | {t['billing']}/{n} | {b['billing']}/{n} |",
        f"| urgency (per gold row) | {t['urgency']}/{rg} | 0/{rg} |",
        f"| values not stated in the e-mail | {t['not_stated_values']} "
        f"(in {t['emails_with_not_stated']} e-mails) | 0 |",
        f"| reasoning not a verbatim quote | {t['reasoning_unquoted']}/{t['rows_pred']} rows | - |",
        "",
        f"Review: {rv['values']} values a person could check, {rv['wrong']} of them wrong "
        f"(and {rv['gold_rows_missed']} gold rows missed, with no value to check).",
        "",
        "| values checked | how many | wrong ones caught |",
        "|---|---|---|",
    ] + [f"| {name} | {w['checked']} | {w['wrong_caught']}/{rv['wrong']} ({pct(w['wrong_caught'], rv['wrong'])}) |"
         for name, w in rv["ways"].items()] + [
        "",
        "| id | whole | rows (match/extra/miss) | address | billing | urgency | not stated | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    yn = lambda x: "yes" if x else "no"
    for s in scores:
        lines.append(
            f"| {s['id']} | {yn(s['whole'])} | {s['rows_matched']}/{s['rows_extra']}/{s['rows_missed']} "
            f"| {yn(s['address'])} | {yn(s['billing'])} | {s['urgency_right']}/{s['rows_gold']} "
            f"| {'; '.join(s['not_stated']).replace('|', '/')} | {s['verdict']} |")
    lines += ["", "## Wrong answers", ""]
    for s, e in zip(scores, emails):
        if not s["whole"] or s["not_stated"]:
            lines += [f"### {s['id']}", "", "```", e["text"], "```", "",
                      "got: `" + json.dumps(s["value"], ensure_ascii=False) + "`", "",
                      "gold: `" + json.dumps(e["expected"], ensure_ascii=False) + "`", ""]
    with open(os.path.join(args.out, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[: lines.index("## Wrong answers") - 1]))


if __name__ == "__main__":
    main()
