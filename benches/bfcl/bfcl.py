#!/usr/bin/env python3
"""BFCL tool-calling accuracy of OpenAI-compatible servers, side by side (benchmark, not a test).

Cases: ../shared/data/tool-calling/bfcl_public.jsonl (BFCL v4 single-turn, see the README beside
it). Each case goes to every `--server` in turn before the next case (interleaved, so machine
noise hits all servers alike), as one POST {URL}/chat/completions with the case's `messages`
and `tools`, `tool_choice`, `max_tokens` and `temperature` 0. The answer is
`choices[0].message.tool_calls` (`function.name`, `function.arguments` as a JSON string).

Scoring follows BFCL's AST check (same number of calls; each expected call matched, in any
order, by one call of the same name; no parameter the function lacks; required parameters
present; values of the declared type and among the acceptable ones, strings compared after
BFCL's standardize: lowercased, without spaces and `,./-_*^`; an integer is accepted for a
number). A wrong answer gets exactly one error class, the first that applies:

  http_error        non-200, timeout, unreadable body
  relevance         (irrelevance cases) any tool call at all
  invalid_json      arguments not JSON, or not an object            \\
  unknown_name      a call names no tool of the case                  |
  unexpected_param  a parameter not in the function's properties      | grammar-removable
  missing_required  a required parameter left out                     |
  wrong_type        a value not of its declared JSON Schema type     /
  count             number of calls differs from the expected number
  wrong_name        right count, names do not match the expected ones
  value             a value not among the acceptable ones (also: a parameter the answer
                    leaves out that must be given, or one the expected answer does not list)

`leaked` counts answers whose `content` text itself holds what looks like a tool call (JSON
naming one of the case's tools, or a <tool_call>-style tag), whatever the score.

Python 3 stdlib only. Example:

    python3 benches/bfcl/bfcl.py --per-category 20 --model qwen \\
        --server formwork=http://127.0.0.1:8080/v1 \\
        --server llama-server=http://127.0.0.1:8081/v1 --out /tmp/bfcl-run

    python3 benches/bfcl/bfcl.py --self-test     # checks the scorer against the data itself
"""
import argparse
import itertools
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

GRAMMAR_CLASSES = ["invalid_json", "unknown_name", "unexpected_param", "missing_required", "wrong_type"]
OTHER_CLASSES = ["value", "count", "wrong_name", "relevance"]
ERROR_CLASSES = ["http_error"] + GRAMMAR_CLASSES + OTHER_CLASSES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA_REL = os.path.join("data", "tool-calling", "bfcl_public.jsonl")


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------

_STD_RE = re.compile(r"[ ,./\-_*^]")


def standardize(s):
    """BFCL's standardize_string."""
    return _STD_RE.sub("", s).lower().replace("'", '"')


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _type_is(v, t):
    if isinstance(t, list):
        return any(_type_is(v, x) for x in t)
    if t is None or t == "any":
        return True
    if t == "string":
        return isinstance(v, str)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return _is_num(v)  # an integer is accepted for a number
    if t == "boolean":
        return isinstance(v, bool)
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    if t == "null":
        return v is None
    return True  # unknown type name: do not judge


def type_ok(value, schema, acceptable):
    """Declared-type check, one level into arrays (items.type). Like BFCL, a value of the same
    JSON type as the acceptable answers passes even where the declared type differs (BFCL's
    'variable' case; e.g. null where null is acceptable)."""
    t = schema.get("type") if isinstance(schema, dict) else None
    ok = _type_is(value, t)
    if ok and t == "array" and isinstance(schema.get("items"), dict) and schema["items"].get("type"):
        it = schema["items"]["type"]
        ok = all(_type_is(x, it) for x in value)
    if ok:
        return True
    ans_types = {json_type(a) for a in acceptable if a != ""}
    vt = json_type(value)
    if vt == "integer" and "number" in ans_types:
        vt = "number"
    return vt in ans_types


def value_match(v, a):
    """Is model value v equal to one acceptable value a, with BFCL's normalisation?"""
    if isinstance(a, dict):
        # {key: [acceptable values]}, as BFCL writes dict answers
        if not isinstance(v, dict):
            return False
        for k, x in v.items():
            if k not in a or not value_in(x, a[k]):
                return False
        for k, acc in a.items():
            if k not in v and "" not in _as_list(acc):
                return False
        return True
    if isinstance(a, list):
        return isinstance(v, list) and len(v) == len(a) and all(value_match(x, y) for x, y in zip(v, a))
    if isinstance(a, bool) or isinstance(v, bool):
        return isinstance(a, bool) and isinstance(v, bool) and a == v
    if _is_num(a):
        return _is_num(v) and float(v) == float(a)
    if isinstance(a, str):
        return isinstance(v, str) and standardize(v) == standardize(a)
    if a is None:
        return v is None
    return v == a


def _as_list(acc):
    return acc if isinstance(acc, list) else [acc]


def value_in(v, acceptable):
    return any(value_match(v, a) for a in _as_list(acceptable))


def args_match(args, expected_args):
    """BFCL's per-parameter value check of one call against one expected call."""
    for k, v in args.items():
        if k not in expected_args or not value_in(v, expected_args[k]):
            return False
    for k, acc in expected_args.items():
        if k not in args and "" not in _as_list(acc):
            return False
    return True


def find_assignment(calls, expected):
    """One-to-one assignment of calls to expected entries (order-independent)."""
    n = len(expected)
    ok = [[c["name"] == e["name"] and args_match(c["args"], e["arguments"]) for c in calls] for e in expected]
    if n <= 6:
        for perm in itertools.permutations(range(len(calls)), n):
            if all(ok[i][perm[i]] for i in range(n)):
                return list(perm)
        return None
    used, out = set(), []
    for i in range(n):
        j = next((j for j in range(len(calls)) if j not in used and ok[i][j]), None)
        if j is None:
            return None
        used.add(j)
        out.append(j)
    return out


_TAG_RE = re.compile(r"<tool_call>|<\|python_tag\|>|\[TOOL_CALLS\]|<function[=>]|<\|tool_call", re.I)


def _iter_json(text):
    dec = json.JSONDecoder()
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                obj, end = dec.raw_decode(text, i)
                yield obj
                i = end
                continue
            except ValueError:
                pass
        i += 1


def _names_call(obj, names):
    if isinstance(obj, list):
        return any(_names_call(x, names) for x in obj)
    if isinstance(obj, dict):
        for k in ("name", "function", "tool", "tool_name", "function_name"):
            x = obj.get(k)
            if isinstance(x, str) and x in names:
                return True
            if isinstance(x, dict) and _names_call(x, names):
                return True
        if len(obj) == 1 and next(iter(obj)) in names:
            return True
        return any(_names_call(x, names) for x in obj.values() if isinstance(x, (dict, list)))
    return False


def leaked_call(content, names):
    if not isinstance(content, str) or not content.strip():
        return False
    if _TAG_RE.search(content):
        return True
    return any(_names_call(obj, names) for obj in _iter_json(content))


def tool_index(case):
    out = {}
    for t in case.get("tools") or []:
        f = t.get("function", t)
        out[f["name"]] = f
    return out


def score(case, answer):
    """answer: {"ok": bool, "tool_calls": [...OpenAI tool calls...], "content": str|None}.
    Returns {"correct", "error", "detail", "leaked"}."""
    tools = tool_index(case)
    expected = case["expected"]
    res = {"correct": False, "error": None, "detail": "", "leaked": False}
    if not answer.get("ok"):
        res["error"], res["detail"] = "http_error", answer.get("error", "")
        return res
    res["leaked"] = leaked_call(answer.get("content"), set(tools))
    raw_calls = answer.get("tool_calls") or []

    def fail(cls, detail):
        res["error"], res["detail"] = cls, detail
        return res

    if not expected:  # irrelevance: the right answer calls no tool
        if raw_calls:
            return fail("relevance", "%d call(s) where none fits" % len(raw_calls))
        res["correct"] = True
        return res

    # parse
    calls = []
    for i, tc in enumerate(raw_calls):
        f = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(f, dict):
            return fail("invalid_json", "call %d has no function object" % i)
        a = f.get("arguments")
        if isinstance(a, str):
            try:
                a = json.loads(a)
            except ValueError as e:
                return fail("invalid_json", "call %d arguments: %s" % (i, e))
        if not isinstance(a, dict):
            return fail("invalid_json", "call %d arguments are %s, not an object" % (i, json_type(a)))
        calls.append({"name": f.get("name"), "args": a})

    # schema checks, in class order across all calls
    for c in calls:
        if c["name"] not in tools:
            return fail("unknown_name", "no tool %r" % (c["name"],))
    for c in calls:
        props = (tools[c["name"]].get("parameters") or {}).get("properties") or {}
        for k in c["args"]:
            if k not in props:
                return fail("unexpected_param", "%s has no parameter %r" % (c["name"], k))
    for c in calls:
        req = (tools[c["name"]].get("parameters") or {}).get("required") or []
        for k in req:
            if k not in c["args"]:
                return fail("missing_required", "%s: %r missing" % (c["name"], k))
    for c in calls:
        props = (tools[c["name"]].get("parameters") or {}).get("properties") or {}
        for k, v in c["args"].items():
            acceptable = [a for e in expected if e["name"] == c["name"] for a in _as_list(e["arguments"].get(k, []))]
            if not type_ok(v, props[k], acceptable):
                return fail("wrong_type", "%s.%s: %s is not %s" % (c["name"], k, json_type(v), props[k].get("type")))

    if len(calls) != len(expected):
        return fail("count", "%d call(s), expected %d" % (len(calls), len(expected)))
    if sorted(c["name"] for c in calls) != sorted(e["name"] for e in expected):
        return fail("wrong_name", "called %s, expected %s" % ([c["name"] for c in calls], [e["name"] for e in expected]))
    if find_assignment(calls, expected) is None:
        return fail("value", "no value-correct matching: %s" % json.dumps([[c["name"], c["args"]] for c in calls])[:300])
    res["correct"] = True
    return res


# ---------------------------------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------------------------------

def _perfect_calls(case, minimal=False):
    """A right answer built from the expected answers: the first acceptable value that is not
    "" for each parameter; a parameter left out where "" is acceptable and either it is not a
    property of the function or (minimal) not required."""
    tools = tool_index(case)
    calls = []
    for e in case["expected"]:
        params = tools[e["name"]].get("parameters") or {}
        props, req = params.get("properties") or {}, params.get("required") or []
        args = {}
        for k, acc in e["arguments"].items():
            acc = _as_list(acc)
            if "" in acc and (k not in props or (minimal and k not in req)):
                continue
            vals = [a for a in acc if a != ""]
            if vals:
                args[k] = _concrete(vals[0])
        calls.append({"type": "function", "function": {"name": e["name"], "arguments": json.dumps(args)}})
    return calls


def _concrete(a):
    """Turn an acceptable value into a plain value (dict answers hold lists of acceptables)."""
    if isinstance(a, dict):
        out = {}
        for k, acc in a.items():
            vals = [x for x in _as_list(acc) if x != ""]
            if vals:
                out[k] = _concrete(vals[0])
        return out
    if isinstance(a, list):
        return [_concrete(x) for x in a]
    return a


def self_test(cases):
    failures = []
    n_targeted = [0]

    def check(case, answer, want, label):
        if not label.startswith(("perfect", "reversed")):
            n_targeted[0] += 1
        r = score(case, answer)
        got = "correct" if r["correct"] else r["error"]
        if got != want:
            failures.append("%s %s: want %s, got %s (%s)" % (case["id"], label, want, got, r["detail"]))
        return r

    for case in cases:
        for minimal in (False, True):
            check(case, {"ok": True, "tool_calls": _perfect_calls(case, minimal), "content": None},
                  "correct", "perfect(minimal=%s)" % minimal)
        calls = _perfect_calls(case)
        if len(calls) > 1:  # order must not matter
            check(case, {"ok": True, "tool_calls": calls[::-1], "content": None}, "correct", "reversed")
    n_perfect = len(cases)

    # deliberately broken answers
    def first(pred):
        return next(c for c in cases if pred(c))

    def call(name, args):
        return {"type": "function", "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}

    def ans(calls, content=None):
        return {"ok": True, "tool_calls": calls, "content": content}

    single = first(lambda c: len(c["expected"]) == 1 and c["category"] == "simple_python"
                   and any(isinstance(v, str) and v for vs in c["expected"][0]["arguments"].values() for v in vs))
    e = single["expected"][0]
    good = json.loads(_perfect_calls(single)[0]["function"]["arguments"])
    props = tool_index(single)[e["name"]]["parameters"]["properties"]
    req = tool_index(single)[e["name"]]["parameters"].get("required") or []
    check(single, {"ok": False, "error": "HTTP 500"}, "http_error", "http")
    check(single, ans([call(e["name"], '{"a": ')]), "invalid_json", "truncated json")
    check(single, ans([call(e["name"], "[1, 2]")]), "invalid_json", "array args")
    check(single, ans([call("no_such_tool", good)]), "unknown_name", "unknown name")
    check(single, ans([call(e["name"], dict(good, zzz_extra=1))]), "unexpected_param", "extra param")
    if req:
        check(single, ans([call(e["name"], {k: v for k, v in good.items() if k != req[0]})]), "missing_required", "drop required")
    sk = next(k for k, v in good.items() if isinstance(v, str) and props[k].get("type") == "string")
    check(single, ans([call(e["name"], dict(good, **{sk: 12345}))]), "wrong_type", "int for string")
    check(single, ans([call(e["name"], dict(good, **{sk: good[sk] + " definitely wrong"}))]), "value", "wrong string")
    check(single, ans([call(e["name"], dict(good, **{sk: "  " + good[sk].upper() + ". "}))]), "correct", "string normalised")
    check(single, ans([]), "count", "no call")
    check(single, ans([], json.dumps({"name": e["name"], "arguments": good})), "count", "leaked")
    r = score(single, ans([], "Sure: " + json.dumps({"name": e["name"], "arguments": good})))
    if not r["leaked"]:
        failures.append("%s leaked: not detected" % single["id"])
    if score(single, ans(_perfect_calls(single), "Here you go."))["leaked"]:
        failures.append("%s leaked: false positive" % single["id"])
    check(single, ans(_perfect_calls(single) * 2), "count", "doubled")

    num = first(lambda c: len(c["expected"]) == 1 and any(
        tool_index(c)[c["expected"][0]["name"]]["parameters"]["properties"].get(k, {}).get("type") == "number"
        and any(_is_num(v) and float(v).is_integer() for v in vs)
        for k, vs in c["expected"][0]["arguments"].items()))
    ne = num["expected"][0]
    nk, nv = next((k, v) for k, vs in ne["arguments"].items() for v in vs
                  if tool_index(num)[ne["name"]]["parameters"]["properties"].get(k, {}).get("type") == "number"
                  and _is_num(v) and float(v).is_integer())
    ngood = json.loads(_perfect_calls(num)[0]["function"]["arguments"])
    check(num, ans([call(ne["name"], dict(ngood, **{nk: int(nv)}))]), "correct", "int for number")
    check(num, ans([call(ne["name"], dict(ngood, **{nk: str(nv)}))]), "wrong_type", "string for number")
    check(num, ans([call(ne["name"], dict(ngood, **{nk: nv + 1000.5}))]), "value", "wrong number")

    irr = first(lambda c: not c["expected"])
    t0 = irr["tools"][0]["function"]["name"]
    check(irr, ans([], "I cannot help with that."), "correct", "irrelevance text")
    check(irr, ans([call(t0, {})]), "relevance", "irrelevance call")

    multi = first(lambda c: len(c["expected"]) == 1 and len(c["tools"]) > 1)
    other = next(t["function"] for t in multi["tools"] if t["function"]["name"] != multi["expected"][0]["name"])
    dummy = {"string": "x", "integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}
    oargs = {k: dummy.get(other["parameters"]["properties"][k].get("type"), "x")
             for k in other["parameters"].get("required") or []}
    check(multi, ans([call(other["name"], oargs)]), "wrong_name", "other tool")

    par = first(lambda c: len(c["expected"]) >= 2)
    pc = _perfect_calls(par)
    check(par, ans(pc[:1]), "count", "parallel short")
    bad = json.loads(pc[0]["function"]["arguments"])
    bk = next((k for k, v in bad.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)), None)
    if bk is not None:
        bad[bk] = "zz wrong zz" if isinstance(bad[bk], str) else bad[bk] + 7777
        check(par, ans([call(pc[0]["function"]["name"], bad)] + pc[1:]), "value", "parallel one wrong")

    lst = first(lambda c: len(c["expected"]) == 1 and any(
        isinstance(v, list) and v and all(isinstance(x, str) for x in v) and len(v) > 1
        for vs in c["expected"][0]["arguments"].values() for v in vs))
    le = lst["expected"][0]
    lk = next(k for k, vs in le["arguments"].items() for v in vs if isinstance(v, list) and len(v) > 1 and all(isinstance(x, str) for x in v))
    lgood = json.loads(_perfect_calls(lst)[0]["function"]["arguments"])
    check(lst, ans([call(le["name"], dict(lgood, **{lk: [x.upper() for x in lgood[lk]]}))]), "correct", "list case-insensitive")
    check(lst, ans([call(le["name"], dict(lgood, **{lk: lgood[lk][:-1]}))]), "value", "list short")

    for f in failures[:40]:
        print("FAIL", f)
    print("self-test: %d cases scored correct on perfect answers (2 variants, parallel also reversed), "
          "%d targeted answers (broken and tolerated): %s"
          % (n_perfect, n_targeted[0], "OK" if not failures else "%d FAILURES" % len(failures)))
    return 0 if not failures else 1


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------

def default_data():
    base = os.environ.get("FORMWORK_SHARED") or os.path.join(os.path.dirname(REPO), "shared")
    return os.path.join(base, DATA_REL)


def load_cases(path):
    if not os.path.exists(path):
        print("bfcl: data file not found: %s\n  (set --data PATH or FORMWORK_SHARED=<dir holding %s>)"
              % (path, DATA_REL), file=sys.stderr)
        sys.exit(2)
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def sample(cases, per_category):
    if not per_category:
        return cases
    seen, out = {}, []
    for c in cases:  # file order
        if seen.get(c["category"], 0) < per_category:
            seen[c["category"]] = seen.get(c["category"], 0) + 1
            out.append(c)
    return out


def ask(url, body, timeout):
    """POST body to url; returns (answer dict for score(), raw record, wall seconds)."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    raw = {"status": None, "body": None}
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw["status"] = r.status
            text = r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        raw["status"] = e.code
        try:
            raw["body"] = e.read().decode("utf-8", "replace")[:4000]
        except Exception:
            pass
        return {"ok": False, "error": "HTTP %d" % e.code}, raw, time.perf_counter() - t0
    except Exception as e:  # timeout, refused, reset
        raw["error"] = repr(e)
        return {"ok": False, "error": repr(e)}, raw, time.perf_counter() - t0
    wall = time.perf_counter() - t0
    try:
        j = json.loads(text)
        raw["body"] = j
        msg = j["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raw["body"] = text[:4000]
        return {"ok": False, "error": "bad body: %r" % e}, raw, wall
    if raw["status"] != 200:
        return {"ok": False, "error": "HTTP %d" % raw["status"]}, raw, wall
    return {"ok": True, "tool_calls": msg.get("tool_calls") or [], "content": msg.get("content")}, raw, wall


def new_stats():
    return {"n": 0, "correct": 0, "wall_s": 0.0, "leaked": 0, **{k: 0 for k in ERROR_CLASSES}}


def add(st, r, wall):
    st["n"] += 1
    st["wall_s"] += wall
    st["correct"] += bool(r["correct"])
    st["leaked"] += bool(r["leaked"])
    if r["error"]:
        st[r["error"]] += 1


def finish(st):
    st["accuracy"] = 100.0 * st["correct"] / st["n"] if st["n"] else 0.0
    st["grammar_removable"] = sum(st[k] for k in GRAMMAR_CLASSES)
    st["req_per_min"] = st["n"] / (st["wall_s"] / 60.0) if st["wall_s"] > 0 else 0.0
    return st


def render(summary, categories, servers, meta):
    cols = ["n", "acc %"] + ERROR_CLASSES + ["grammar", "leaked", "req/min"]
    lines = ["# BFCL tool calling", "",
             "%s; model `%s`, tool_choice `%s`, parallel_tool_calls %s, max_tokens %d, temperature 0; %d cases." % (
                 meta["data"], meta["model"], meta["tool_choice"], str(meta.get("parallel_tool_calls", True)).lower(),
                 meta["max_tokens"], meta["n_cases"]), ""]
    if meta.get("extra") or meta.get("skipped_categories"):
        lines += ["Extra request fields: `%s`; categories left out: %s." % (
            json.dumps(meta.get("extra") or {}), ", ".join(meta.get("skipped_categories") or []) or "none"), ""]
    lines += [
             "Error classes: grammar-removable = %s; others = %s. `grammar` = their sum; "
             "`leaked` = answers with a tool call written in the content text." % (
                 ", ".join(GRAMMAR_CLASSES), ", ".join(["http_error"] + OTHER_CLASSES)), ""]
    lines += ["## Accuracy %", "", "| category | " + " | ".join(servers) + " |",
              "|---|" + "---:|" * len(servers)]
    for cat in categories + ["all"]:
        lines.append("| %s | " % cat + " | ".join("%.1f" % summary[s][cat]["accuracy"] for s in servers) + " |")
    for s in servers:
        lines += ["", "## %s (%s)" % (s, meta["servers"][s]), "",
                  "| category | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        for cat in categories + ["all"]:
            st = summary[s][cat]
            row = [str(st["n"]), "%.1f" % st["accuracy"]] + [str(st[k]) for k in ERROR_CLASSES] + [
                str(st["grammar_removable"]), str(st["leaked"]), "%.1f" % st["req_per_min"]]
            lines.append("| %s | " % cat + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help="bfcl_public.jsonl (default: $FORMWORK_SHARED or ../shared, then %s)" % DATA_REL)
    ap.add_argument("--per-category", type=int, default=0, help="first N cases of each category, in file order (0: all)")
    ap.add_argument("--server", action="append", default=[], metavar="NAME=URL", help="e.g. formwork=http://127.0.0.1:8080/v1; repeatable")
    ap.add_argument("--model", default="default")
    ap.add_argument("--tool-choice", default="auto")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--parallel-tool-calls", type=lambda x: x.lower() in ("1", "true", "yes"), default=True,
                    help="sent to every server (default true, the OpenAI default; llama-server's own default is false)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--skip-category", action="append", default=[], metavar="CATEGORY",
                    help="leave out a category (repeatable), e.g. the irrelevance sets with --tool-choice required")
    ap.add_argument("--extra", default=None, metavar="JSON",
                    help='fields added to every request body, e.g. \'{"formwork_grounded": true}\'')
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    ap.add_argument("--out", default=None, help="directory for <server>.jsonl, summary.md, summary.json")
    ap.add_argument("--self-test", action="store_true", help="check the scorer against the data and exit")
    args = ap.parse_args()

    data = args.data or default_data()
    cases = load_cases(data)
    if args.self_test:
        sys.exit(self_test(cases))
    if not args.server:
        ap.error("give at least one --server NAME=URL")
    servers = {}
    for s in args.server:
        if "=" not in s:
            ap.error("--server wants NAME=URL, got %r" % s)
        name, url = s.split("=", 1)
        servers[name] = url.rstrip("/")
    names = list(servers)

    cases = [c for c in cases if c["category"] not in args.skip_category]
    cases = sample(cases, args.per_category)
    extra = json.loads(args.extra) if args.extra else {}
    if not isinstance(extra, dict):
        ap.error("--extra wants a JSON object")
    categories = list(dict.fromkeys(c["category"] for c in cases))
    stats = {s: {c: new_stats() for c in categories + ["all"]} for s in names}
    outs = {}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        outs = {s: open(os.path.join(args.out, "%s.jsonl" % re.sub(r"[^A-Za-z0-9_.-]", "_", s)), "w") for s in names}

    t_start = time.time()
    for i, case in enumerate(cases):
        tc = args.tool_choice
        try:
            tc = json.loads(tc)  # allow a JSON object for a named tool
        except ValueError:
            pass
        body = {"model": args.model, "messages": case["messages"], "tools": case["tools"],
                "tool_choice": tc, "max_tokens": args.max_tokens, "temperature": args.temperature,
                # The spec's default, sent explicitly: llama-server defaults to false.
                "parallel_tool_calls": args.parallel_tool_calls}
        body.update(extra)
        marks = []
        for s in names:
            answer, raw, wall = ask(servers[s] + "/chat/completions", body, args.timeout)
            r = score(case, answer)
            add(stats[s][case["category"]], r, wall)
            add(stats[s]["all"], r, wall)
            marks.append("%s:%s" % (s, "ok" if r["correct"] else r["error"]))
            if s in outs:
                outs[s].write(json.dumps({"id": case["id"], "category": case["category"], "wall_s": round(wall, 4),
                                          "correct": r["correct"], "error": r["error"], "detail": r["detail"],
                                          "leaked": r["leaked"], "response": raw}) + "\n")
                outs[s].flush()
        print("[%d/%d] %s %s" % (i + 1, len(cases), case["id"], " ".join(marks)), file=sys.stderr, flush=True)
    for f in outs.values():
        f.close()

    summary = {s: {c: finish(st) for c, st in stats[s].items()} for s in names}
    meta = {"data": data, "model": args.model, "tool_choice": args.tool_choice,
            "parallel_tool_calls": args.parallel_tool_calls, "max_tokens": args.max_tokens,
            "temperature": args.temperature, "per_category": args.per_category, "n_cases": len(cases),
            "skipped_categories": args.skip_category, "extra": extra,
            "servers": servers, "wall_total_s": round(time.time() - t_start, 2)}
    md = render(summary, categories, names, meta)
    print(md)
    if args.out:
        with open(os.path.join(args.out, "summary.md"), "w") as f:
            f.write(md)
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump({"meta": meta, "servers": summary}, f, indent=1)


if __name__ == "__main__":
    main()
